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

The tests of this subject that run in-process are in tests/unit/case/test_elementwise.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.case import ops
from harness.case.case_file import load_case
from harness.case.ir import Program, TensorDecl, check_program
from harness.judging.oracle import compare
from tests.conftest import CASES
from tests.support.elementwise import FNS, VALUES

#: The snapshot methods each program takes of its buffer (of each shape) before mapping every
#: snapshot and then the buffer: clones, views and copies, the views burn#1430 and burn#5375 name
#: among them (`permute`, `flip`, `expand`).
SHAPES = {
    (2, 2): (
        "alias",
        "clone",
        "detach",
        "copy",
        "transpose",
        "view_row",
        "reshape",
        "flip",
        "narrow",
        "chunk",
        "select",
        "expand",
        "unsqueeze",
        "contiguous",
        "to_home",
        "to_cpu",
    ),
    (2, 1, 2): ("permute", "flip", "select", "narrow", "reshape", "clone"),
}


def _mapped_program(fn: str, shape: tuple[int, ...]) -> Program:
    """A buffer, a snapshot of it by every method of ``SHAPES[shape]``, then ``map`` of each
    snapshot and, last, of the buffer."""
    x = TensorDecl("x", "buffer", shape, VALUES)
    methods = SHAPES[shape]
    assert all(ops.METHODS_BY_NAME[m].accepts(shape) for m in methods)
    later = [{"op": "snapshot", "name": f"s_{m}", "of": "x", "method": m} for m in methods]
    later += [{"op": "map", "target": f"s_{m}", "fn": fn} for m in methods]
    later.append({"op": "map", "target": "x", "fn": fn})
    return Program((x,), check_program((x,), later))


@pytest.fixture(scope="module")
def mapped(runner):
    cases = [(fn, shape) for fn in FNS for shape in SHAPES]
    traces = runner.run([_mapped_program(fn, shape) for fn, shape in cases], every_target=True)
    return dict(zip(cases, traces))


def _value(trace, i: int, name: str) -> np.ndarray:
    return trace.state_after(i)[name].value


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("fn", FNS)
def test_a_map_binds_a_new_tensor_and_leaves_every_other_name_untouched(mapped, fn, shape):
    methods = SHAPES[shape]
    n = len(methods)
    checked = set()
    x = np.array(VALUES, dtype=np.float32).reshape(shape)
    for target, trace in mapped[fn, shape].items():
        if trace.unobserved:
            # torch:cpu+graph runs the snapshots and maps as one compiled function and observes
            # only after it: its final state is eager's (the oracle compares it op by op there)
            assert np.array_equal(_value(trace, 2 * n, "x"), FNS[fn](x)), target
            continue
        for k, m in enumerate(methods):
            name = f"s_{m}"
            if trace.steps[k].status != "ok":  # a method the framework has no call for
                assert trace.steps[n + k].status == "skipped", (target, name, trace.steps[n + k])
                continue
            assert trace.steps[n + k].status == "ok", (target, name, trace.steps[n + k])
            before = _value(trace, n + k - 1, name)
            assert np.array_equal(_value(trace, n + k, name), FNS[fn](before)), (target, name)
            # Every other name, the buffer first, holds what it held before this map.
            for other in ["x"] + [f"s_{o}" for o in methods if o != m]:
                if other in trace.state_after(n + k):
                    assert np.array_equal(_value(trace, n + k, other), _value(trace, n + k - 1, other)), (
                        target,
                        f"map of {name} changed {other}",
                    )
        last = 2 * n
        assert trace.steps[last].status == "ok", (target, trace.steps[last])
        assert np.array_equal(_value(trace, last, "x"), FNS[fn](x)), target
        for m in methods:
            if f"s_{m}" in trace.state_after(last):
                assert np.array_equal(_value(trace, last, f"s_{m}"), _value(trace, last - 1, f"s_{m}")), (target, m)
        checked.add(target.split(":")[0])
    assert {"torch", "candle", "burn"} <= checked


def test_burn_maps_a_uniquely_owned_tensor_without_touching_any_clone(runner):
    """The acceptance case of issue #16: in burn, `x` is moved into the call. First the one name
    holding the buffer (a unique handle: burn may compute in place), then a handle a `clone`
    shares; the clone keeps its values and so does every value taken before."""
    x = TensorDecl("x", "buffer", (2, 2), VALUES)
    program = Program(
        (x,),
        check_program(
            (x,),
            [
                {"op": "map", "target": "x", "fn": "neg"},  # unique: nobody else holds x's buffer
                {"op": "snapshot", "name": "c", "of": "x", "method": "clone"},
                {"op": "map", "target": "x", "fn": "relu"},  # shared with c
                {"op": "add", "target": "c", "other": "c"},  # c + c: both operands one buffer
                {"op": "map", "target": "c", "fn": "add_scalar"},  # unique again
            ],
        ),
    )
    traces = runner.run_one(program, every_target=True)
    a = np.array(VALUES, dtype=np.float32).reshape(2, 2)
    burn = [t for t in traces if t.startswith("burn:")]
    assert burn, "no burn target"
    for target in burn:
        t = traces[target]
        assert [s.status for s in t.steps] == ["ok"] * 5, (target, t.steps)
        assert np.array_equal(_value(t, 0, "x"), -a)
        assert np.array_equal(_value(t, 2, "c"), -a), f"{target}: relu of x changed its clone"
        assert np.array_equal(_value(t, 2, "x"), np.maximum(-a, 0))
        assert np.array_equal(_value(t, 3, "x"), np.maximum(-a, 0)), f"{target}: c + c changed x"
        assert np.array_equal(_value(t, 4, "c"), -2 * a + 1) and np.array_equal(_value(t, 4, "x"), np.maximum(-a, 0))


def test_add_broadcasts_a_row_and_the_case_agrees_everywhere(runner):
    """The case file: maps of views and a param's clone, a row broadcast, a name added to itself.
    Every target gives the same values at every step, and the oracle finds no value or status
    difference (candle's `clone` shares storage, a known identity difference, is not one)."""
    program = load_case(CASES / "elementwise_ops_leave_clones_and_views_untouched.toml")
    traces = runner.run_one(program, every_target=True)
    x0 = np.array([[-2.0, -0.5], [0.5, 2.0]], dtype=np.float32)
    end = len(program.ops) - 1
    for target, t in traces.items():
        assert all(s.status == "ok" for s in t.steps), (target, t.steps)
        assert np.array_equal(_value(t, end, "x"), np.maximum(x0, 0) + np.array([10.0, 20.0], dtype=np.float32))
        assert np.array_equal(_value(t, end, "c"), 2 * x0), target
        assert np.array_equal(_value(t, end, "t"), -x0.T + 2 * x0), target
        assert np.array_equal(_value(t, end, "f"), np.clip(x0[::-1], -1, 1)), target
        assert np.array_equal(_value(t, end, "pc"), np.array([[2.0, -1.0], [4.0, -3.0]], dtype=np.float32)), target
        assert np.array_equal(_value(t, end, "w"), np.array([[1.0, -2.0], [3.0, -4.0]], dtype=np.float32)), target
    findings = compare(program, traces)
    assert [f for f in findings if f.aspect in ("value", "status")] == [], findings
