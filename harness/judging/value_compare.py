"""When two targets' values agree: exactly, or within the float32 tolerance of Adam and batch
norm. The one rule the oracle, the terminal table and every report view use to call a value
divergent."""

from __future__ import annotations

import numpy as np

from harness.case.ir import Program

ADAM_RTOL, ADAM_ATOL = 1e-4, 1e-6


def adam_lr(program: Program) -> float | None:
    """The scale of the float32 error two targets' values may differ by, which sets the tolerance
    values are compared with: the largest learning rate of the program's ``adam``/``adamw`` steps
    (bias correction), or 1 for a program with a batch-norm ``forward`` (a division by a square
    root, which every kernel rounds its own way), whichever is larger; None when neither is in
    the program (values are then compared exactly)."""
    lrs = [op["lr"] for op in program.ops if op["op"] == "step" and op["optimizer"] in ("adam", "adamw")]
    norms = {layer.name for layer in program.layers if layer.kind == "batch_norm"}
    if any(op["op"] == "forward" and op["layer"] in norms for op in program.ops):
        lrs.append(1.0)
    return max(lrs) if lrs else None


def values_close(a: np.ndarray, b: np.ndarray, adam: float | None) -> bool:
    """Whether two targets' values agree: exactly, or within Adam's tolerance when the program
    has an Adam step (``adam`` is then ``adam_lr``)."""
    if a.shape != b.shape:
        return False
    if a.tobytes() == b.tobytes():  # bitwise equal: the common case, and the cheapest test
        return True
    return not elements_differ(a, b, adam).any()


def elements_differ(a: np.ndarray, b: np.ndarray, adam: float | None) -> np.ndarray:
    """Which elements of two same-shaped values differ (NaN equals NaN)."""
    if adam is None:
        return ~((a == b) | (np.isnan(a) & np.isnan(b)))
    # An element Adam brings to about zero is a difference of numbers as large as the tensor's
    # other elements (1 - 0.5 - 0.5), or as the step it took (2 - 1 - 0.99999994 after two steps
    # of lr 1): its float32 error is relative to them, not to itself. Adam's step is about lr per
    # element, with the relative error of its bias correction (1 - 0.999^t cancels). So the
    # absolute tolerance scales with the tensor's largest finite magnitude or the largest lr.
    finite = np.abs(np.concatenate([a[np.isfinite(a)], b[np.isfinite(b)]]).ravel())
    scale = max(float(finite.max()) if finite.size else 0.0, adam)
    return ~np.isclose(a, b, rtol=ADAM_RTOL, atol=max(ADAM_ATOL, ADAM_RTOL * scale), equal_nan=True)
