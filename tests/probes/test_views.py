"""The snapshot methods whose arguments come from the source's shape (issue #16): `expand`,
`permute`, `flip`, `narrow`, `unsqueeze`, `squeeze`, `chunk`, `select`, on the real targets.

Each expectation is a framework's documented behaviour, cited where it is asserted:

- torch: every one but `flip` is a view ("Tensor Views" docs), so it follows a write of its source
  and a step (SGD's `param.add_`), and a write into it reaches the source; `expand` has stride 0
  and torch refuses a write that would store two values in one place; `flip` copies.
- candle (candle-core 0.11.1 sources): every one but `flip` builds a new `Tensor_` with
  `storage: self.storage.clone()` (tensor.rs `broadcast_as`, `permute`, `squeeze`, `unsqueeze`,
  `narrow`; `chunk` and `IndexOp::i` call `narrow`), one storage with the param's Var, which a row
  write (`slice_set`) and a step (`Var::set`, variable.rs: `copy_strided_src` into the existing
  storage) write in place; `flip` is `index_select` (tensor.rs `flip`), a new storage.
- burn: tensors are values; no snapshot sees a later write of its source, nor the source one into
  the snapshot (burn-tensor ops take `self`; a write rebinds the name).

Also: the case format refuses each method on a shape it does not apply to, the generator draws
each one, and the minimizer keeps cases valid while it shrinks their shapes.

The tests of this subject that run in-process are in tests/unit/case/test_views.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from harness.case import ops
from harness.case.ir import Program, TensorDecl, check_program
from harness.judging.verdicts import verdicts
from harness.targets.torch.views import VIEWS
from tests.support.probe_client import BURN_TARGETS
from tests.support.torch_docs import TORCH_DOCS

VIEW_METHODS = ("expand", "permute", "flip", "narrow", "unsqueeze", "squeeze", "chunk", "select")

COPIES = {"flip"}

# Per method: the source (shape, row-major values), the snapshot's value, the row a write of the
# source changes (one the view covers), and the snapshot after that write where it shares storage.
CASES = {
    "expand": ((2, 2), [1, 2, 3, 4], [1, 2, 3, 4, 1, 2, 3, 4], 0, [10, 10, 3, 4, 10, 10, 3, 4]),
    # s[0, j, k] = w[k, 0, j]
    "permute": ((2, 1, 2), [1, 2, 3, 4], [1, 3, 2, 4], 0, [10, 3, 10, 4]),
    "flip": ((2, 2), [1, 2, 3, 4], [3, 4, 1, 2], 0, [3, 4, 10, 10]),
    "narrow": ((3, 2), [1, 2, 3, 4, 5, 6], [3, 4, 5, 6], 1, [10, 10, 5, 6]),
    "unsqueeze": ((2, 2), [1, 2, 3, 4], [1, 2, 3, 4], 0, [10, 10, 3, 4]),
    "squeeze": ((1, 2), [1, 2], [1, 2], 0, [10, 10]),
    "chunk": ((3, 2), [1, 2, 3, 4, 5, 6], [1, 2, 3, 4], 0, [10, 10, 3, 4]),
    "select": ((2, 2), [1, 2, 3, 4], [1, 2], 0, [10, 10]),
}
# The source after `fill(s, 9)` where the snapshot shares its storage: the elements it covers.
FILLED = {
    "expand": [9, 9, 9, 9],
    "permute": [9, 9, 9, 9],
    "flip": [1, 2, 3, 4],
    "narrow": [1, 2, 9, 9, 9, 9],
    "unsqueeze": [9, 9, 9, 9],
    "squeeze": [9, 9],
    "chunk": [9, 9, 9, 9, 5, 6],
    "select": [9, 9, 3, 4],
}
SHARING = ("torch:cpu", "candle:cpu")
VALUES = tuple(BURN_TARGETS)


def _param(m: str) -> TensorDecl:
    shape, value = CASES[m][0], CASES[m][1]
    return TensorDecl("w", "param", shape, tuple(float(x) for x in value))


def _program(m: str, *later: dict) -> Program:
    w = _param(m)
    return Program((w,), check_program((w,), [{"op": "snapshot", "name": "s", "of": "w", "method": m}, *later]))


def _flat(trace, i: int, name: str) -> list[float]:
    return trace.state_after(i)[name].value.ravel().tolist()


@pytest.fixture(scope="module")
def across_write(runner):
    """Per method: a snapshot, a write of a row of its source it covers, an SGD step (lr 1,
    grad ones: every element of the source moves by -1), on every target."""
    out = {}
    for m in VIEW_METHODS:
        shape, row = CASES[m][0], CASES[m][3]
        program = _program(
            m,
            {"op": "write", "target": "w", "index": row, "value": [10.0] * math.prod(shape[1:])},
            {"op": "step", "optimizer": "sgd", "lr": 1.0},
        )
        out[m] = (program, runner.run_one(program, every_target=True))
    return out


@pytest.mark.parametrize("method", VIEW_METHODS)
def test_torch_and_candle_views_follow_their_source_and_flip_keeps(across_write, method):
    program, traces = across_write[method]
    shape, _, taken, _, after_write = CASES[method]
    for target in SHARING:
        t = traces[target]
        assert [s.status for s in t.steps] == ["ok"] * 3, (target, t.steps)
        s = t.state_after(0)["s"]
        assert s.shape == ops.snapshot_shape(method, shape) and s.value.ravel().tolist() == taken, target
        if method in COPIES:
            assert _flat(t, 1, "s") == _flat(t, 2, "s") == taken, f"{target}: {TORCH_DOCS[method]}"
        else:
            assert _flat(t, 1, "s") == after_write, f"{target}: {TORCH_DOCS[method]}"
            assert _flat(t, 2, "s") == [x - 1 for x in after_write], f"{target}: the step writes in place"
        # The op table's `view` is what the oracle compares against: it judges the same.
        want = "keeps" if method in COPIES else "follows"
        assert verdicts(program, t)["s"].summary == want, target


@pytest.mark.parametrize("method", VIEW_METHODS)
def test_burn_views_are_values(across_write, method):
    program, traces = across_write[method]
    taken = CASES[method][2]
    for target in VALUES:
        t = traces[target]
        assert [s.status for s in t.steps] == ["ok"] * 3, (target, t.steps)
        assert _flat(t, 0, "s") == _flat(t, 1, "s") == _flat(t, 2, "s") == taken, target
        assert t.state_after(2)["w"].value.ravel().tolist() != CASES[method][1], "the source did change"
        assert verdicts(program, t)["s"].summary == "keeps", target


@pytest.mark.parametrize("method", VIEW_METHODS)
def test_a_fill_of_the_view_reaches_the_source_exactly_where_it_shares_storage(runner, method):
    # torch `fill_` (it writes one value, so even an expanded view takes it) and candle
    # `const_set` (tensor.rs: `storage_mut().const_set(value, self.layout())`, through the view's
    # layout) write into the shared storage; burn rebinds the snapshot alone.
    traces = runner.run_one(_program(method, {"op": "fill", "target": "s", "value": 9.0}), every_target=True)
    source = CASES[method][1]
    for target, t in traces.items():
        if target not in SHARING + VALUES:
            continue
        assert [s.status for s in t.steps] == ["ok", "ok"], (target, t.steps)
        assert set(_flat(t, 1, "s")) == {9.0}, target
        want = source if target in VALUES else FILLED[method]
        assert _flat(t, 1, "w") == want, target


def _view(method: str, t: torch.Tensor) -> torch.Tensor:
    """The torch target's call of a view ``method`` on ``t``, run from its source as the session runs it."""
    return eval(VIEWS[method]("t", t), {"t": t})


def test_torch_expand_is_a_stride_0_view_that_refuses_a_whole_write(runner):
    w = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    e = _view("expand", w)  # the torch target's own call
    assert e.shape == (2, 2, 2) and e.stride()[0] == 0
    assert e.untyped_storage().data_ptr() == w.untyped_storage().data_ptr()
    program = _program(
        "expand",
        {"op": "write", "target": "s", "value": [7.0] * 8},
        {"op": "scale", "target": "s", "factor": 2.0},
        {"op": "write", "target": "s", "index": 1, "value": [5.0] * 4},
    )
    traces = runner.run_one(program, every_target=True)
    t = traces["torch:cpu"]
    # copy_ and mul_ check for internal overlap (ATen `assert_no_internal_overlap`): the message
    # torch raises for any in-place write into an expanded tensor that is not one value.
    assert [s.status for s in t.steps] == ["ok", "error", "error", "ok"], t.steps
    for k in (1, 2):
        assert "more than one element of the written-to tensor refers to a single memory location" in t.steps[k].message
    assert _flat(t, 2, "w") == [1, 2, 3, 4]
    # A row of the expansion (`e[1]`) is a plain view of w: a row write goes through, into w.
    assert _flat(t, 3, "w") == [5, 5, 5, 5] and _flat(t, 3, "s") == [5.0] * 8
    # candle: `slice_set` (tensor_cat.rs) refuses a destination that is not contiguous, and a
    # broadcast is not; `scale` of a plain tensor has no call. burn: all three rebind s.
    c = traces["candle:cpu"]
    assert [s.status for s in c.steps] == ["ok", "error", "unsupported", "error"], c.steps
    assert "slice-set only supports contiguous tensors" in c.steps[1].message
    for target in VALUES:
        b = traces[target]
        assert [s.status for s in b.steps] == ["ok"] * 4, (target, b.steps)
        assert _flat(b, 3, "s") == [14.0] * 4 + [5.0] * 4 and _flat(b, 3, "w") == [1, 2, 3, 4], target


def test_candle_refuses_a_write_into_a_permuted_view(runner):
    # tensor.rs `permute` swaps strides: not contiguous, so `slice_set` refuses it (torch's
    # `copy_` writes through the strides into w).
    traces = runner.run_one(
        _program("permute", {"op": "write", "target": "s", "value": [7.0, 8.0, 9.0, 6.0]}), every_target=True
    )
    c, t = traces["candle:cpu"], traces["torch:cpu"]
    assert c.steps[1].status == "error" and "slice-set only supports contiguous tensors" in c.steps[1].message
    assert t.steps[1].status == "ok" and _flat(t, 1, "w") == [7, 9, 8, 6]  # s[0, j, k] = w[k, 0, j]


def test_candle_flip_of_a_transposed_tensor_fails_where_torch_and_burn_flip_it(runner):
    # A candidate upstream report (tests/cases/candle_flip_of_a_strided_tensor_fails.toml): candle's
    # Tensor::flip is index_select along each dim, and the CPU index_select refuses a source that
    # is not contiguous; flip's docs ("makes a copy of the tensor's data") state no such condition.
    # When candle fixes it, this test fails and the case leaves the candidate list.
    from harness.case.case_file import load_case
    from tests.conftest import ROOT

    program = load_case(ROOT / "tests" / "cases" / "candle_flip_of_a_strided_tensor_fails.toml")
    traces = runner.run_one(program, every_target=True)
    c = traces["candle:cpu"]
    assert [s.status for s in c.steps] == ["ok", "error"], c.steps
    assert "index-select only supports contiguous tensors" in c.steps[1].message
    for target in ("torch:cpu", *VALUES):
        t = traces[target]
        assert [s.status for s in t.steps] == ["ok", "ok"], (target, t.steps)
        assert _flat(t, 1, "f") == [2, 4, 1, 3], target  # the transpose [[1, 3], [2, 4]], rows reversed
