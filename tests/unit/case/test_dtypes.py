"""The dtype conversions (issue #16; pytorch#194664): `to_same_dtype` (to float32, the dtype every
case tensor has) and `via_bf16` (to bfloat16 and back), on the real targets.

Each expectation is a framework's documented behaviour or source, cited where it is asserted:

- torch: `Tensor.to` "If the self Tensor already has the correct torch.dtype and torch.device,
  then self is returned": `to_same_dtype` is the tensor itself (tests/probes/test_torch_target.py asserts
  the identity); `via_bf16` is a copy.
- candle (candle-core 0.11.1 tensor.rs `to_dtype`): `if self.dtype() == dtype { Ok(self.clone()) }`,
  one storage with the Var, which a row write (`slice_set`) and a step (`Var::set`) write in
  place; a conversion to another dtype builds a new storage.
- burn (burn-tensor 0.22.1 cast.rs): a cast to the tensor's own float dtype returns the tensor; a
  tensor is a value either way, so both keep.
- burn's ndarray backend has no bf16 (`Device::supports_dtype(BF16)` is false; its cast panics
  "Unsupported dtype: BF16"): the probe asks first and answers `unsupported`; flex has it.
- bfloat16 rounding is round to nearest, ties to even, everywhere: the op table's `view` of
  `via_bf16` (ops.bf16_rounded) is what the oracle compares a following snapshot against.

The tests here run in this process, as the
unit tier requires; those that need the real frameworks are in tests/probes/test_dtypes.py.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.case import ops

#: The targets that convert to bfloat16 (burn:ndarray answers `unsupported`).
BF16 = ("torch:cpu", "candle:cpu", "burn:flex")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False, allow_subnormal=False), min_size=1, max_size=16))
def test_the_tables_bf16_rounding_is_torchs(xs):
    a = np.array(xs, dtype=np.float32)
    assert ops.bf16_rounded(a).tobytes() == torch.from_numpy(a).bfloat16().float().numpy().tobytes()


def test_the_rounding_ties_to_even_and_keeps_nan():
    got = ops.bf16_rounded(np.array([1.00390625, 1.01171875, np.nan, -0.0], np.float32))
    assert got[:2].tolist() == [1.0, 1.015625] and np.isnan(got[2]) and np.signbit(got[3])
