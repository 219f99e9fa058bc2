"""The snapshot methods of the op table (``harness.case.ops``, which re-exports every name here):
what each method is, which sources it may be taken of, and what a snapshot that shares its
source's storage shows of it (``view``), which the oracle compares a following snapshot against.

Invariant, which ``tests/unit/case/test_op_table.py`` checks with the rest of the table (and
``tests/probes/test_op_table.py`` against each probe's handshake): the schema file, the Rust
protocol's ``Method`` enum and every probe's handshake name exactly these methods.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class MethodSpec:
    """One snapshot method. ``shape`` and ``view`` say what the snapshot shows of its source if
    it shares the source's storage (``view`` acts on a numpy array); ``accepts`` (the source's
    shape; ``needs`` says what it wants, for the error message: "``transpose`` needs a tensor
    of rank 2 or more") and ``sources`` restrict what it may be taken of (roles: param, buffer,
    lazy, snapshot)."""

    name: str
    doc: str
    shape: Callable[[tuple[int, ...]], tuple[int, ...]] = lambda s: s
    view: Callable[[Any], Any] = lambda a: a
    accepts: Callable[[tuple[int, ...]], bool] = lambda s: True
    needs: str = "a tensor"
    sources: tuple[str, ...] = ("param", "buffer", "lazy", "running", "snapshot")
    #: Made through the whole model (burn records the model, candle saves its VarMap), so it
    #: reads every param: a lazy one's first read.
    whole_model: bool = False

    def refusal(self, shape: tuple[int, ...]) -> str | None:
        """Why the method cannot be taken of a tensor of ``shape`` (None: it can)."""
        return None if self.accepts(tuple(shape)) else f"{self.name} needs {self.needs}"


METHOD_TABLE: tuple[MethodSpec, ...] = (
    MethodSpec("alias", "the same tensor under a second name"),
    MethodSpec("clone", "the framework's clone()"),
    MethodSpec("detach", "detach(): no autograd history"),
    MethodSpec("copy", "an explicit copy (candle copy(), torch clone().detach())"),
    MethodSpec("mul1", "the tensor times 1: a new result"),
    MethodSpec("to_home", "to() the device it is already on"),
    MethodSpec("to_cpu", "to() the CPU"),
    MethodSpec("contiguous", "contiguous()"),
    MethodSpec("reshape", "reshape to one dimension", shape=lambda s: (math.prod(s),), view=lambda a: a.reshape(-1)),
    MethodSpec("view_row", "the first row as a view", shape=lambda s: (1,) + s[1:], view=lambda a: a[0:1]),
    MethodSpec(
        "transpose",
        "the last two dimensions swapped",
        shape=lambda s: s[:-2] + (s[-1], s[-2]),
        view=lambda a: a.swapaxes(-1, -2),
        accepts=lambda s: len(s) >= 2,
        needs="a tensor of rank 2 or more",
    ),
    MethodSpec(
        "state_dict",
        "the entry of the model's state dict",
        sources=("param", "buffer", "lazy", "running"),
        whole_model=True,
    ),
    MethodSpec("deepcopy", "a deep copy of the tensor"),
    MethodSpec("to_host", "read to the host and made a tensor again"),
    MethodSpec("save_load", "saved to a file and loaded back", whole_model=True),
    # Views whose arguments come from the source's shape (issue #16). Ranks stay within 1..3, the
    # ranks a case's tensors have (and the burn probe's values: vals.rs).
    MethodSpec(
        "expand",
        "a new first dimension of 2, broadcast (stride 0)",
        shape=lambda s: (2,) + s,
        view=lambda a: np.broadcast_to(a[None], (2,) + a.shape),
        accepts=lambda s: len(s) <= 2,
        needs="a tensor of rank 2 or less",
    ),
    MethodSpec(
        "permute",
        "the dimensions rotated left (1, 2, 0)",
        shape=lambda s: s[1:] + s[:1],
        view=lambda a: a.transpose(tuple(range(1, a.ndim)) + (0,)),
        accepts=lambda s: len(s) == 3,
        needs="a tensor of rank 3",
    ),
    # Where it shared storage, a flip would show the rows reversed: no framework's flip does.
    MethodSpec("flip", "the first dimension reversed", view=lambda a: a[::-1]),
    MethodSpec(
        "narrow",
        "rows 1.. (narrow(0, 1, n - 1))",
        shape=lambda s: (s[0] - 1,) + s[1:],
        view=lambda a: a[1:],
        accepts=lambda s: s[0] >= 2,
        needs="a tensor of 2 rows or more",
    ),
    MethodSpec(
        "unsqueeze",
        "a new first dimension of 1",
        shape=lambda s: (1,) + s,
        view=lambda a: a[None],
        accepts=lambda s: len(s) <= 2,
        needs="a tensor of rank 2 or less",
    ),
    MethodSpec(
        "squeeze",
        "the first dimension, of size 1, removed",
        shape=lambda s: s[1:],
        view=lambda a: a[0],
        accepts=lambda s: len(s) >= 2 and s[0] == 1,
        needs="a tensor of rank 2 or more with one row",
    ),
    MethodSpec(
        "chunk",
        "the first of two chunks along the first dimension",
        shape=lambda s: (-(-s[0] // 2),) + s[1:],
        view=lambda a: a[: -(-a.shape[0] // 2)],
        accepts=lambda s: s[0] >= 2,
        needs="a tensor of 2 rows or more",
    ),
    MethodSpec(
        "select",
        "row 0, the rank dropped",
        shape=lambda s: s[1:],
        view=lambda a: a[0],
        accepts=lambda s: len(s) >= 2,
        needs="a tensor of rank 2 or more",
    ),
    # Dtype conversions (pytorch#194664: a conversion to the dtype a tensor already has returns
    # the tensor itself). Every tensor of a case has the case's dtype (``Program.dtype``), so
    # `to_same_dtype` converts to it; `via_bf16` and `via_f32` convert to bfloat16 or float32 and
    # back to it: two conversions to its own dtype in a bf16 or an f32 case. Only bfloat16 rounds
    # (its `view`: an f16 value may have more mantissa bits); float32 holds every f16 and bf16.
    MethodSpec("to_same_dtype", "converted to the dtype it already has (the case's dtype)"),
    MethodSpec("via_bf16", "converted to bfloat16 and back to the case's dtype", view=lambda a: bf16_rounded(a)),
    MethodSpec("via_f32", "converted to float32 and back to the case's dtype"),
    # torch's ``t.data``: a tensor over the same storage, outside autograd and with a version
    # counter of its own, so a write through it escapes autograd's check (torch docs, "Autograd
    # mechanics", in-place correctness checks; ``.detach()`` is the checked form).
    MethodSpec("data", "torch's .data: the same storage, outside autograd and the version counter"),
)
METHODS_BY_NAME: dict[str, MethodSpec] = {m.name: m for m in METHOD_TABLE}
METHODS = tuple(METHODS_BY_NAME)


def bf16_rounded(array):
    """``array`` (float32) rounded to bfloat16 and widened back: the upper 16 bits of each value,
    rounded to nearest, ties to even (what torch, candle's ``half`` crate and burn do). NaN and
    the infinities pass unchanged; a case's values are far from bfloat16's overflow."""
    a = np.ascontiguousarray(array, dtype=np.float32)
    bits = a.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32)
    return np.where(np.isfinite(a), rounded, a).reshape(a.shape)


def snapshot_shape(method: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of a snapshot made with ``method`` of a tensor of ``shape`` (``method`` may
    also be an op that binds a whole copy, ``module_clone``: the same shape)."""
    m = METHODS_BY_NAME.get(method)
    return m.shape(shape) if m else shape


def apply_view(method: str, array):
    """The value a snapshot made with ``method`` shows of ``array`` if it shares its storage."""
    m = METHODS_BY_NAME.get(method)
    return m.view(array) if m else array
