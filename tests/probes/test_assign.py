"""``assign`` (a write from another bound tensor, ``dst.copy_(src)`` / ``dst[i] = src``) on each
framework, against what its documentation and upstream reports say. Each case is a bundled case
file, run on every CPU target."""

from __future__ import annotations

import pytest

from harness.case.case_file import load_case
from tests.conftest import CASES
from tests.support.probe_client import BURN_TARGETS

W_T = [[1.0, 3.0], [2.0, 4.0]]


@pytest.fixture(scope="module")
def transposed_source(runner):
    return runner.run_one(load_case(CASES / "assign_from_a_transposed_snapshot.toml"), every_target=True)


def _value(trace, i: int, name: str):
    return trace.state_after(i)[name].value.tolist()


@pytest.mark.parametrize("target", ["torch:cpu", *BURN_TARGETS])
def test_a_copy_from_a_transposed_source_is_a_copy(transposed_source, target):
    # torch Tensor.copy_: "Copies the elements from src into self tensor"; burn slice_assign
    # writes the values of its source. Either way the cache does not follow later writes of w.
    if target not in transposed_source:
        pytest.fail(f"{target} is not a target here: {sorted(transposed_source)}")
    trace = transposed_source[target]
    assert [s.status for s in trace.steps] == ["ok", "ok", "ok"]
    assert _value(trace, 1, "cache") == W_T
    assert _value(trace, 2, "cache") == W_T and _value(trace, 2, "w") == [[9.0, 9.0], [9.0, 9.0]]


def test_candle_slice_set_refuses_a_transposed_source(transposed_source):
    # candle#3902: the KV-cache append slice_sets a transposed value ("slice-set only supports
    # contiguous tensors"), so models make it contiguous first.
    step = transposed_source["candle:cpu"].steps[1]
    assert step.status == "error" and "contiguous" in (step.message or ""), step


def test_a_row_copied_into_a_clone_reaches_the_parameter_only_in_candle(runner):
    traces = runner.run_one(load_case(CASES / "assign_row_into_a_shared_clone.toml"), every_target=True)
    # candle: Var::clone is an Arc clone of the same storage (candle_clone_shares_storage.toml);
    # slice_set writes that storage, so w follows. torch: Tensor.clone copies.
    assert _value(traces["candle:cpu"], 1, "w") == [[1.0, 2.0], [5.0, 6.0]]
    assert _value(traces["torch:cpu"], 1, "w") == [[1.0, 2.0], [3.0, 4.0]]
    for t in ("torch:cpu", "candle:cpu", "burn:flex"):
        assert _value(traces[t], 1, "best") == [[1.0, 2.0], [5.0, 6.0]], t


def test_a_copy_from_a_view_of_the_destination(runner):
    traces = runner.run_one(load_case(CASES / "assign_from_itself.toml"), every_target=True)
    # torch: b[1] = b[0] through views of b is a plain overlapping-free row copy.
    assert _value(traces["torch:cpu"], 2, "b") == [[1.0, 2.0], [1.0, 2.0]]
    # candle#2733: slice_set with source and destination over the same storage is an error.
    step = traces["candle:cpu"].steps[2]
    assert step.status == "error", step
    assert _value(traces["burn:flex"], 2, "b") == [[1.0, 2.0], [1.0, 2.0]]


def test_rows_of_a_transposed_snapshot_are_copied_by_row(runner):
    # dst[i] = src[j] (source_index), the KV-cache write of candle#3902: torch `cache[i] = kv[j]`
    # and burn `slice_assign` of `kv.slice([j..j+1])` copy a strided row; candle's slice_set of the
    # row view refuses it ("slice-set only supports contiguous tensors") and copies the row of a
    # contiguous() copy. Every cache keeps its rows when w is written afterwards.
    traces = runner.run_one(load_case(CASES / "assign_rows_of_a_transposed_snapshot.toml"), every_target=True)
    for t in ("torch:cpu", "burn:flex", "burn:ndarray"):
        assert _value(traces[t], 3, "cache")[1] == [3.0, 6.0], t
        assert _value(traces[t], 5, "cache")[1] == [3.0, 6.0], t
    candle = traces["candle:cpu"]
    assert candle.steps[3].status == "error" and "contiguous" in (candle.steps[3].message or "")
    for t in ("torch:cpu", "candle:cpu"):  # the contiguous copy: burn has no contiguous call
        assert _value(traces[t], 2, "cache")[0] == [2.0, 5.0], t
        assert _value(traces[t], 4, "last") == [1.0, 4.0], t  # a row into the whole of `last`
        assert _value(traces[t], 5, "last") == [1.0, 4.0], t
    assert traces["burn:flex"].steps[1].status == "unsupported"
