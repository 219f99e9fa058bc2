"""``append`` (a name grown along its first dimension: ``torch.cat`` / ``Tensor::cat``, or a
preallocated KV cache) on each framework, against what its documentation and upstream reports say.
Each case is a bundled case file, run on every CPU target."""

from __future__ import annotations

import pytest

from harness.case.ir import load_case
from tests.conftest import CASES


def _value(trace, i: int, name: str):
    return trace.state_after(i)[name].value.tolist()


@pytest.fixture(scope="module")
def cache_views(runner):
    return runner.run_one(load_case(CASES / "kv_cache_view_follows_a_write_through_the_cache.toml"),
                          every_target=True)


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


@pytest.mark.parametrize("target", ["burn:flex", "burn:ndarray"])
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
