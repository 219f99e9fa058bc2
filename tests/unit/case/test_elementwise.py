"""The element-wise ops `map` (`neg`, `relu`, `add_scalar`, `clamp`) and `add` (issue #16), on the
real targets.

Each binds its target again to a new tensor, as training code's `x = x.relu()` does:

- torch: functions without a trailing underscore are out of place ("In-place operations" in the
  autograd docs: only `_`-suffixed methods modify their input), so every earlier clone, view and
  value of the name keeps its values.
- candle: tensors are immutable; `neg`, `relu`, `affine`, `clamp`, `add` and `broadcast_add`
  return a new tensor (candle-core 0.11.1 tensor.rs).
- burn: ops take their input by value and return a new value ("Tensor" in the burn book: "tensors
  are values"); a backend may compute in place on a handle nobody else holds (`can_mut`), and a
  handle another name shares must not be changed. So the same holds: an element-wise op on a
  uniquely owned tensor, and on one a clone or view shares, leaves every other name untouched.

The tests here run in this process, as the
unit tier requires; those that need the real frameworks are in tests/probes/test_elementwise.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from generators.programs import programs
from harness.case import ops
from harness.case.ir import CaseError, Program, TensorDecl, check_program
from tests.support.elementwise import FNS, VALUES


def test_the_table_declares_every_function_and_the_torch_target_calls_each():
    from harness.targets.torch.elementwise import MAP_CALLS

    assert ops.MAP_FNS == tuple(FNS) == tuple(MAP_CALLS)
    import torch

    for fn, call in MAP_CALLS.items():
        x = torch.tensor(VALUES)
        assert (
            eval(call.format("x"), {"torch": torch, "x": x}).tolist()
            == FNS[fn](np.array(VALUES, dtype=np.float32)).tolist()
        ), fn


@pytest.mark.parametrize(
    "ops_, field, message",
    [
        ([{"op": "add", "target": "x", "other": "y"}], "ops[0].other", "neither the target's [2, 2] nor a row of it"),
        ([{"op": "map", "target": "w", "fn": "relu"}], "ops[0].target", "map takes a buffer"),
        ([{"op": "map", "target": "x", "fn": "exp"}], "ops[0].fn", "unknown fn 'exp'"),
    ],
)
def test_a_bad_element_wise_op_is_one_line_naming_the_field(ops_, field, message):
    decls = (
        TensorDecl("w", "param", (2, 2), VALUES),
        TensorDecl("x", "buffer", (2, 2), VALUES),
        TensorDecl("y", "buffer", (3,), (1.0, 2.0, 3.0)),
    )
    with pytest.raises(CaseError) as e:
        check_program(decls, ops_)
    msg = str(e.value)
    assert "\n" not in msg and field in msg and message in msg, msg


def test_the_generator_draws_map_and_add_on_names_they_apply_to():
    seen = {"map": set(), "add": 0, "add_row": 0}

    # Derandomized: the same programs every run, so the test cannot pass or fail by chance.
    @settings(max_examples=500, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(programs("default"))
    def draw(program):
        check_program(program.tensors, list(program.ops), layers=program.layers, dtype=program.dtype)
        for _, op, shapes in ops.walk(program.tensors, program.ops, program.layers):
            if op["op"] == "map":
                seen["map"].add(op["fn"])
            elif op["op"] == "add":
                assert ops.broadcasts_to(shapes[op["other"]], shapes[op["target"]])
                seen["add"] += 1
                seen["add_row"] += shapes[op["other"]] != shapes[op["target"]]

    draw()
    assert seen["map"] == set(ops.MAP_FNS) and seen["add"] > 0 and seen["add_row"] > 0, seen


def test_a_name_a_map_rebinds_ends_the_relation_of_its_snapshots():
    """After `x = relu(x)` a snapshot of x is a snapshot of nothing: a later write of x is not
    its source's write (the oracle would call a value-semantics framework's `keeps` a finding)."""
    from harness.judging.verdicts import relation_end, snapshots

    x = TensorDecl("x", "buffer", (2,), (1.0, 2.0))
    program = Program(
        (x,),
        check_program(
            (x,),
            [
                {"op": "snapshot", "name": "a", "of": "x", "method": "alias"},
                {"op": "map", "target": "x", "fn": "neg"},
                {"op": "fill", "target": "x", "value": 0.0},
            ],
        ),
    )
    (snap,) = snapshots(program)
    assert relation_end(program, snap, len(program.ops)) == 1
    assert ops.remade(program.ops[1]) == "x" and ops.rebinds(program.ops[1], "x")
    assert math.isclose(program.ops[2]["value"], 0.0)
