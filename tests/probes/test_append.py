"""``append`` (a name grown along its first dimension: ``torch.cat`` / ``Tensor::cat``, or a
preallocated KV cache) on each framework, against what its documentation and upstream reports say.
Each case is a bundled case file, run on every CPU target."""

from __future__ import annotations

import pytest

from harness.case.case_file import load_case
from tests.conftest import CASES
from tests.support.probe_client import BURN_TARGETS


def _value(trace, i: int, name: str):
    return trace.state_after(i)[name].value.tolist()


@pytest.fixture(scope="module")
def cache_views(runner):
    return runner.run_one(load_case(CASES / "kv_cache_view_follows_a_write_through_the_cache.toml"), every_target=True)


@pytest.mark.parametrize("target", ["torch:cpu", "candle:cpu"])
def test_keys_kept_from_a_cache_follow_a_write_through_it(cache_views, target):
    # torch: basic slicing returns a view ("Tensor Views"), so buf[:n] shares the buffer a later
    # append writes into. candle: Cache::current_data is `all_data.narrow(..)`, a view, and
    # slice_set writes the buffer's storage in place (candle-nn kv_cache.rs).
    trace = cache_views[target]
    assert [s.status for s in trace.steps] == ["ok"] * 4, trace.steps
    assert _value(trace, 0, "k") == [[1.0, 2.0], [3.0, 4.0]]
    assert _value(trace, 2, "k") == [[1.0, 2.0], [3.0, 4.0], [3.0, 4.0]]
    assert _value(trace, 2, "kept") == [[1.0, 2.0], [3.0, 4.0]]
    assert _value(trace, 3, "kept") == [[9.0, 9.0], [3.0, 4.0]]


@pytest.mark.parametrize("target", BURN_TARGETS)
def test_burn_cache_hands_out_values(cache_views, target):
    # burn tensors are values (the burn book, "Tensor"): slice_assign and slice return new
    # tensors, so the keys an earlier append returned keep their rows.
    trace = cache_views[target]
    assert [s.status for s in trace.steps] == ["ok"] * 4, trace.steps
    assert _value(trace, 3, "k") == [[9.0, 9.0], [3.0, 4.0], [3.0, 4.0]]
    assert _value(trace, 3, "kept") == [[1.0, 2.0], [3.0, 4.0]]


def test_candle_cache_refuses_a_transposed_source_and_cat_takes_it(runner):
    traces = runner.run_one(load_case(CASES / "kv_cache_append_of_a_transposed_view.toml"), every_target=True)
    # huggingface/candle#3902: Cache::append slice_sets the source ("slice-set only supports
    # contiguous tensors"); Tensor::cat copies any layout.
    candle = traces["candle:cpu"]
    assert candle.steps[2].status == "ok" and _value(candle, 2, "by_cat") == [[0.0, 0.0], [1.0, 3.0], [2.0, 4.0]]
    assert candle.steps[3].status == "error" and "contiguous" in (candle.steps[3].message or ""), candle.steps[3]
    for t in ("torch:cpu", "burn:flex", "burn:ndarray"):
        assert [s.status for s in traces[t].steps] == ["ok"] * 4, (t, traces[t].steps)
        assert _value(traces[t], 3, "k") == [[0.0, 0.0], [1.0, 3.0], [2.0, 4.0]], t


def test_an_appended_tensor_keeps_its_rows(runner):
    traces = runner.run_one(load_case(CASES / "appended_cache_keeps_its_source.toml"), every_target=True)
    # torch.cat returns a new tensor; a cache copies its source in (copy_, slice_set,
    # slice_assign). So neither follows a later fill of w, and `before` is the old, shorter c.
    for t, trace in traces.items():
        assert [s.status for s in trace.steps] == ["ok"] * 4, (t, trace.steps)
        assert _value(trace, 3, "w") == [[0.0, 0.0]], t
        assert _value(trace, 3, "c") == [[5.0, 6.0], [1.0, 2.0]], t
        assert _value(trace, 3, "k") == [[7.0, 8.0], [1.0, 2.0]], t
        assert _value(trace, 3, "before") == [[5.0, 6.0]], t


def _program(tensors: dict, ops: list):
    from harness.case.ir import Program, TensorDecl, check_program

    decls = tuple(TensorDecl(n, k, (len(v),), tuple(v)) for n, (k, v) in tensors.items())
    return Program(decls, check_program(decls, ops))


def test_an_append_one_side_could_not_run_leaves_later_ops_uncompared(runner):
    from harness.judging.oracle import compare

    # burn has no state_dict entry for a buffer: s0 is never bound there, the append is skipped,
    # and b0 keeps one row, so the write of two values fails there. That failure is the skipped
    # append's consequence, not a finding of its own.
    p = _program(
        {"b0": ("buffer", [0.0])},
        [
            {"op": "snapshot", "name": "s0", "of": "b0", "method": "state_dict"},
            {"op": "append", "target": "b0", "source": "s0"},
            {"op": "write", "target": "b0", "value": [0.0, 0.0]},
        ],
    )
    traces = runner.run_one(p)
    assert traces["burn:flex"].steps[1].status == "skipped" and traces["burn:flex"].steps[2].status == "error"
    assert not [f for f in compare(p, traces) if f.op_label == "write:whole"]


def test_a_write_across_an_ended_relation_names_the_link_that_carried_it(runner):
    from harness.judging.oracle import compare

    # s1 = copy.copy(s0) shares w's storage in torch (s0 is w itself); the append grows s0 into a
    # new tensor, but s1 still reaches w: the copy carried the write, not the append.
    p = _program(
        {"w": ("param", [1.0])},
        [
            {"op": "snapshot", "name": "s0", "of": "w", "method": "alias"},
            {"op": "snapshot", "name": "s1", "of": "s0", "method": "copy"},
            {"op": "append", "target": "s0", "source": "w", "how": "cache"},
            {"op": "write", "target": "s1", "value": [0.0]},
        ],
    )
    sigs = {f.signature for f in compare(p, runner.run_one(p))}
    assert "value|candle:cpu~torch:cpu|value|copy|write:whole|unchanged~changed" in sigs, sigs
    # the keys kept from a cache and the grown cache: the alias, across the append that grew it
    traces = runner.run_one(load_case(CASES / "kv_cache_view_follows_a_write_through_the_cache.toml"))
    sigs = {
        f.signature for f in compare(load_case(CASES / "kv_cache_view_follows_a_write_through_the_cache.toml"), traces)
    }
    assert "value|burn:flex~torch:cpu|value|alias@append:cache|write:row|unchanged~changed" in sigs, sigs
