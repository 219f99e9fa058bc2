//! The `snapshot` op of a [`BurnSession`]: each method the burn call a user writes (the table
//! is in README.md), and the records it reads a param or a running statistic back from.

use super::{BurnSession, Slot};
use crate::on_val;
use crate::support::{
    cpu_device, expand_two, flatten, record_round_trip, save_and_load, through_host, to_own_device, Model,
};
use crate::vals::{IntoVal, Val};
use aliasfuzz_protocol::{Method, Outcome};
use burn::tensor::{FloatDType, Tensor};

/// A one-call method on the value; `dtype`: the program's, which the dtype conversions end in.
fn snap_tensor<const D: usize>(t: Tensor<D>, method: Method, dtype: FloatDType) -> Result<Val, Outcome>
where
    Tensor<D>: IntoVal,
{
    Ok(match method {
        // `Tensor::clone`: a handle on the same primitive.
        Method::Clone => t.clone().into_val(),
        Method::Detach => t.detach().into_val(),
        Method::Mul1 => t.mul_scalar(1.0).into_val(),
        Method::ToHome => to_own_device(t).into_val(),
        Method::ToCpu => t.to_device(&cpu_device()).into_val(),
        Method::Reshape => flatten(t).into_val(),
        Method::ViewRow => t.slice([0..1]).into_val(),
        Method::Transpose => t.transpose().into_val(),
        Method::ToHost => through_host(t).into_val(),
        // cast.rs: a cast to the tensor's own float dtype returns the tensor.
        Method::ToSameDtype => t.cast(dtype).into_val(),
        // Asked first, as burn's device.rs advises before choosing a reduced precision: a backend
        // without bf16 (ndarray) panics in the cast ("Unsupported dtype: BF16").
        Method::ViaBf16 if !t.device().supports_dtype(FloatDType::BF16) => {
            return Err(Outcome::Unsupported(
                "via_bf16: this backend does not support bf16 (Device::supports_dtype)".into(),
            ))
        }
        Method::ViaBf16 => t.cast(FloatDType::BF16).cast(dtype).into_val(),
        // Every backend has f32 (flex and ndarray: Device::supports_dtype).
        Method::ViaF32 => t.cast(FloatDType::F32).cast(dtype).into_val(),
        Method::Flip => t.flip([0]).into_val(),
        Method::Narrow => {
            let rows = t.dims()[0];
            t.narrow(0, 1, rows - 1).into_val()
        }
        // `Tensor::chunk`: the first chunk has ceil(rows / 2) rows, as torch's.
        Method::Chunk => t.chunk(2, 0).remove(0).into_val(),
        other => return Err(Outcome::Error(format!("internal: {} is not a tensor method", other.as_str()))),
    })
}

/// The methods whose result has another rank than the source (`expand`, `unsqueeze`: one more;
/// `squeeze`, `select`: one less) or that take one rank only (`permute`): burn's ranks are const
/// generics, so each is spelled per rank (1 to 3, vals.rs). The case validator sends no other.
fn snap_rank(v: Val, method: Method) -> Result<Val, Outcome> {
    Ok(match (method, v) {
        (Method::Expand, Val::T1(t)) => expand_two::<1, 2>(t).into_val(),
        (Method::Expand, Val::T2(t)) => expand_two::<2, 3>(t).into_val(),
        (Method::Permute, Val::T3(t)) => t.permute([1, 2, 0]).into_val(),
        (Method::Unsqueeze, Val::T1(t)) => t.unsqueeze_dim::<2>(0).into_val(),
        (Method::Unsqueeze, Val::T2(t)) => t.unsqueeze_dim::<3>(0).into_val(),
        (Method::Squeeze, Val::T2(t)) => t.squeeze_dim::<1>(0).into_val(),
        (Method::Squeeze, Val::T3(t)) => t.squeeze_dim::<2>(0).into_val(),
        // Row 0 with the rank dropped: `select_dim` ("a dimension index, and then squeezing that
        // dim", burn-tensor base.rs); `select` takes an index tensor and keeps the rank.
        (Method::Select, Val::T2(t)) => t.select_dim::<1>(0, 0).into_val(),
        (Method::Select, Val::T3(t)) => t.select_dim::<2>(0, 0).into_val(),
        (m, v) => {
            return Err(Outcome::Error(format!("internal: {} of a rank-{} tensor", m.as_str(), v.shape().len())))
        }
    })
}

impl BurnSession {
    /// The module `of` lives in, and its slot there: the model itself for a model param, a
    /// one-param model for a Param bound outside it.
    pub(super) fn module_of(&self, of: &str, src: Val) -> Result<(Model, usize, usize), Outcome> {
        match self.slots.get(of) {
            Some(Slot::Model(r, i)) => {
                self.refuse_lost_params()?;
                Ok((self.model.clone(), *r, *i))
            }
            _ => match src {
                v @ (Val::P1(_) | Val::P2(_) | Val::P3(_)) => {
                    let mut m = Model::empty();
                    let (r, i) = m.push(v).map_err(Outcome::Error)?;
                    Ok((m, r, i))
                }
                _ => Err(Outcome::Unsupported(
                    "burn records hold module params only: a plain Tensor in a module is a \
                     constant whose visit records nothing (burn-core module/param/constant.rs, \
                     `TODO: tensor record should persist`)"
                        .into(),
                )),
            },
        }
    }

    /// An error when a param was lost to an earlier failed call: its slot holds this probe's
    /// placeholder, which no user's model has, so a record or file of the model would show it.
    pub(super) fn refuse_lost_params(&self) -> Result<(), Outcome> {
        if let Some(why) = &self.layers_lost {
            return Err(Outcome::Error(format!("the model's layers were lost: {why}")));
        }
        match self.params.iter().find(|mp| self.lost.contains(&(mp.rank, mp.idx))) {
            Some(mp) => Err(Outcome::Error(format!(
                "{} was lost to an earlier failed call: the model cannot be recorded",
                mp.name
            ))),
            None => Ok(()),
        }
    }

    pub(super) fn snapshot(&mut self, name: &str, of: &str, method: Method) -> Outcome {
        let src = match self.get(of) {
            Ok(v) => v,
            Err(o) => return o,
        };
        let of_stat = matches!(self.slots.get(of), Some(Slot::ModelStat(..) | Slot::LayerStat(..)));
        let result: Result<Val, Outcome> = match method {
            // A running statistic's record entry, read back as a tensor (layers.rs).
            Method::StateDict | Method::SaveLoad if of_stat => self.snapshot_stat(of, method),
            // The same handle bound to the name: `Param::clone` (same ParamId, shared lazy state)
            // or `Tensor::clone`.
            Method::Alias => Ok(src),
            Method::Contiguous => Err(Outcome::Unsupported(
                "burn has no contiguous call: layout is internal to each backend (burn-tensor \
                 0.22.1 Tensor API)"
                    .into(),
            )),
            Method::Copy => Err(Outcome::Unsupported(
                "burn has no copy-into call (no copy_/copy_from in the burn-tensor 0.22.1 Tensor \
                 API): tensors are values"
                    .into(),
            )),
            Method::Data => Err(Outcome::Unsupported(
                "burn has no `.data` (a tensor over the same storage outside autograd and a \
                 version counter; Tensor::detach is the `detach` method)"
                    .into(),
            )),
            Method::Deepcopy => Err(Outcome::Unsupported(
                "burn has no deep copy: Tensor::clone and Param::clone are handle clones and \
                 Module clones share lazy and running state (burn-core module/param/base.rs, \
                 running.rs)"
                    .into(),
            )),
            // The model's record applied back onto it, then the param read out of the loaded
            // model (support.rs `record_round_trip`).
            Method::StateDict => self.module_of(of, src).and_then(|(model, r, i)| {
                Ok(record_round_trip(model).map_err(Outcome::Error)?.get(r, i))
            }),
            // A checkpoint file restored into a fresh model on the home device (support.rs
            // `save_and_load`); the loaded param carries the ParamId stored in the file.
            Method::SaveLoad => self.module_of(of, src).and_then(|(model, r, i)| {
                let path = self.checkpoints.next().map_err(Outcome::Error)?;
                Ok(save_and_load(model, &path, &self.home, self.dtype).map_err(Outcome::Error)?.get(r, i))
            }),
            // Tensor methods on the value: `Param::val()` (forces a lazy param) or the tensor.
            m @ (Method::Expand | Method::Permute | Method::Unsqueeze | Method::Squeeze | Method::Select) => {
                snap_rank(on_val!(src, param p => p.val().into_val(), tensor t => t.into_val()), m)
            }
            m => on_val!(src, param p => snap_tensor(p.val(), m, self.dtype), tensor t => snap_tensor(t, m, self.dtype)),
        };
        match result {
            Ok(v) => {
                self.bind(name.to_string(), Slot::Own(v));
                Outcome::Ok
            }
            Err(o) => o,
        }
    }
}
