"""When two targets' values agree: exactly, or within the tolerance of the program's arithmetic
(float32 Adam and batch norm; the rounding of an f16 or bf16 case). The one rule the oracle, the
terminal table and every report view use to call a value divergent."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.case.ir import Program, per_program

ADAM_RTOL, ADAM_ATOL = 1e-4, 1e-6
#: The relative tolerance of a case's dtype: four units in the last place (2^-7 for bf16, 2^-10
#: for f16, each times 4). Two frameworks round an f16 or bf16 step at different points (one
#: computes ``p - lr * g`` in float32 and rounds once, another rounds the product first), and an
#: Adam step rounds each of its dozen ops: a few units apart, where aliasing gives another value.
DTYPE_RTOL = {"bf16": 4 * 2.0**-7, "f16": 4 * 2.0**-10}


@dataclass(frozen=True)
class Tolerance:
    """How far two targets' values may be apart: ``rtol`` relative to each element, and at least
    ``rtol`` times the larger of ``floor`` and the tensor's largest finite magnitude."""

    rtol: float
    floor: float


@per_program
def tolerance(program: Program) -> Tolerance | None:
    """The tolerance values of ``program`` are compared with; None: exactly.

    In float32: Adam's (``ADAM_RTOL``), with the floor the largest learning rate of the program's
    ``adam``/``adamw`` steps (bias correction), or 1 for a program with a batch-norm ``forward`` (a
    division by a square root, which every kernel rounds its own way), whichever is larger; none
    when neither is in the program. In f16 and bf16: the dtype's (``DTYPE_RTOL``), always."""
    lrs = [op.lr for op in program.ops if op.kind == "step" and op.optimizer in ("adam", "adamw")]
    norms = {layer.name for layer in program.layers if layer.kind == "batch_norm"}
    if any(op.kind == "forward" and op.layer in norms for op in program.ops):
        lrs.append(1.0)
    floor = max(lrs, default=0.0)
    if program.dtype in DTYPE_RTOL:
        return Tolerance(max(DTYPE_RTOL[program.dtype], ADAM_RTOL if lrs else 0.0), floor)
    return Tolerance(ADAM_RTOL, floor) if lrs else None


def values_close(a: np.ndarray, b: np.ndarray, tol: Tolerance | None) -> bool:
    """Whether two targets' values agree: exactly, or within ``tol`` (``tolerance(program)``)."""
    if a.shape != b.shape:
        return False
    if a.tobytes() == b.tobytes():  # bitwise equal: the common case, and the cheapest test
        return True
    return not elements_differ(a, b, tol).any()


def elements_differ(a: np.ndarray, b: np.ndarray, tol: Tolerance | None) -> np.ndarray:
    """Which elements of two same-shaped values differ (NaN equals NaN)."""
    if tol is None:
        return ~((a == b) | (np.isnan(a) & np.isnan(b)))
    # An element Adam brings to about zero is a difference of numbers as large as the tensor's
    # other elements (1 - 0.5 - 0.5), or as the step it took (2 - 1 - 0.99999994 after two steps
    # of lr 1): its rounding error is relative to them, not to itself. Adam's step is about lr per
    # element, with the relative error of its bias correction (1 - 0.999^t cancels). So the
    # absolute tolerance scales with the tensor's largest finite magnitude or the floor.
    finite = np.abs(np.concatenate([a[np.isfinite(a)], b[np.isfinite(b)]]).ravel())
    scale = max(float(finite.max()) if finite.size else 0.0, tol.floor)
    return ~np.isclose(a, b, rtol=tol.rtol, atol=max(ADAM_ATOL, tol.rtol * scale), equal_nan=True)
