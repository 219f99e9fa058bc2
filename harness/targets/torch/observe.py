"""What the torch target reports of a tensor: its observation (``Obs`` of the protocol).

Floats travel as the shortest decimal that round-trips the float32 value (``str(np.float32(x))``,
the digits serde_json prints for an ``f32``): ``0.1f32`` is ``0.1`` from every target. An f16 or
bf16 tensor's elements are widened to float32 (exact) and its ``dtype`` says what it holds."""

from __future__ import annotations

import numpy as np
import torch

from harness.targets.protocol import observation as wire_observation

#: The case's dtypes (``harness.case.ops.DTYPES``) as torch dtypes.
TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
_DTYPE_NAMES = {v: k for k, v in TORCH_DTYPES.items()}
#: Each case dtype as source text (``torch.bfloat16``), and as the ``dtype=`` argument of a tensor
#: made in it (none for float32, torch's default).
DTYPE_SOURCE = {d: str(d) for d in TORCH_DTYPES.values()}
DTYPE_ARGS = {d: "" if d == torch.float32 else f", dtype={d}" for d in TORCH_DTYPES.values()}


def dtype_name(dtype: torch.dtype) -> str:
    """``f32``, ``bf16``, ``f16``, or torch's own name for another dtype (``float64``)."""
    return _DTYPE_NAMES.get(dtype) or str(dtype).removeprefix("torch.")


# float32 value (held exactly as a Python float) -> its shortest round-tripping decimal. Programs
# reuse few values, and formatting one (``str(np.float32)``) costs 20 times a lookup. Zeros and NaN
# are not cached: 0.0 == -0.0 would share an entry, and NaN never finds its own.
_SHORTEST: dict[float, float] = {}


def shortest_f32(values: list[float]) -> list[float]:
    cache = _SHORTEST
    if len(cache) > 1 << 16:
        cache.clear()
    out = []
    for x in values:
        y = cache.get(x)
        if y is None:
            # str(np.float32) is the shortest round-tripping decimal: see the module docstring.
            y = float(str(np.float32(x)))
            if x == x and x != 0.0:
                cache[x] = y
        out.append(y)
    return out


def observation(t) -> list:
    d = t.detach()
    if not d.is_cpu:
        d = d.cpu()
    if d.dtype != torch.float32:
        d = d.to(torch.float32)
    # Nested tolist then flattened row-major: cheaper than reshape(-1) on tensors this small.
    values = d.tolist()
    if d.dim() == 0:
        values = [values]
    for _ in range(d.dim() - 1):
        values = [x for row in values for x in row]
    return wire_observation(
        list(t.shape),
        shortest_f32(values),
        str(id(t)),
        str(t.device),
        bool(t.requires_grad),
        dtype=dtype_name(t.dtype),
        storage=storage_token(t),
        version=t._version,
    )


def storage_token(t) -> str | None:
    """The address of the memory ``t`` is over: two tensors with one token share storage. None for
    an empty storage (its address is no memory of its own). Addresses are not reused within a
    program: the session keeps every object it bound alive."""
    storage = t.untyped_storage()
    return f"{t.device}:{storage.data_ptr():x}" if storage.nbytes() else None
