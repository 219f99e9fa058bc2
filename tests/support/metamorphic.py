"""What both tiers of the metamorphic tests share: ``program``, ``W``, ``B``, ``STEP``, ``READ_THEN_STEP``."""

from __future__ import annotations

from harness.case.ir import Program, TensorDecl, check_program


def program(tensors, ops, **kw) -> Program:
    tensors = tuple(tensors)
    return Program(tensors, check_program(tensors, ops), **kw)


W = TensorDecl("w", "param", (2,), (1.0, 2.0))


B = TensorDecl("b", "buffer", (2,), (0.0, 0.0))


STEP = {"op": "step", "optimizer": "sgd", "lr": 1.0}


READ_THEN_STEP = program(
    [W, B],
    [
        {"op": "snapshot", "name": "s", "of": "b", "method": "clone"},
        {"op": "read", "target": "w"},
        STEP,
        {"op": "fill", "target": "b", "value": 2.0},
    ],
    inert=(1,),
)
