//! The snapshot methods whose arguments come from the source's shape (issue #16): each is the
//! one candle call a user writes. Every one but `flip` returns a new layout over the source's
//! storage (`storage: self.storage.clone()` in candle-core 0.11.1 tensor.rs `broadcast_as`,
//! `permute`, `squeeze`, `unsqueeze`; `narrow`, which `chunk` and indexing call); `flip` is
//! `index_select` along each dim (tensor.rs `flip`), a new storage.

use crate::support::expand_two;
use aliasfuzz_protocol::Method;
use candle_core::{IndexOp, Result, Tensor};

pub(super) fn view(t: &Tensor, method: Method) -> Result<Tensor> {
    match method {
        Method::Expand => expand_two(t),
        // The dimensions rotated left; the case validator sends rank 3 only.
        Method::Permute => t.permute((1, 2, 0)),
        Method::Flip => t.flip(&[0]),
        Method::Narrow => t.narrow(0, 1, t.dim(0)? - 1),
        Method::Unsqueeze => t.unsqueeze(0),
        Method::Squeeze => t.squeeze(0),
        // `Tensor::chunk`: the first chunk has ceil(rows / 2) rows, as torch's.
        Method::Chunk => Ok(t.chunk(2, 0)?.remove(0)),
        // Row 0 as candle's indexing takes it (`IndexOp::i`, indexer.rs: `narrow` then `squeeze`);
        // `Tensor::get` would `reshape`, which copies a strided row.
        Method::Select => t.i(0),
        other => candle_core::bail!("internal: {} is not a shape-derived view", other.as_str()),
    }
}
