"""Layers with running state or a training flag (``[layers]``, ``forward``): the case format's
checks, the generator and minimizer, and torch's documented behaviour on the bundled cases. The
candle and burn behaviour is in ``test_layers_candle.py`` and ``test_layers_burn.py``.

The tests of this subject that run in-process are in tests/unit/case/test_layers.py.
"""

from __future__ import annotations

import pytest

from harness.case.case_file import load_case
from tests.conftest import CASES

BN_CASE = CASES / "batch_norm_running_stats_across_clone_save_and_eval.toml"


def _value(trace, i: int, name: str):
    return trace.state_after(i)[name].value.tolist()


@pytest.fixture(scope="module")
def torch_bn(runner):
    return runner.run_one(load_case(BN_CASE), every_target=True)["torch:cpu"]


def test_torch_batch_norm_updates_its_buffers_in_place(torch_bn):
    # torch.nn.BatchNorm1d docs: in training the running estimates are updated with `momentum`
    # (the running variance with the unbiased variance); `Module.state_dict()` holds the buffers
    # themselves (keep_vars=False detaches, no copy), so the entry and the kept checkpoint follow
    # the update; `copy.deepcopy` copies the buffers, so the clone keeps its zeros.
    t = torch_bn
    assert [s.status for s in t.steps] == ["ok"] * 8, t.steps
    assert _value(t, 3, "bn.running_mean") == [1.0, 2.0]
    assert _value(t, 3, "bn.running_var") == [1.5, 4.5]  # 0.5 * 1 + 0.5 * [2, 8] (unbiased)
    assert _value(t, 3, "entry") == [1.0, 2.0] and _value(t, 3, "c.bn.running_var") == [1.5, 4.5]
    assert _value(t, 3, "m.bn.running_mean") == [0.0, 0.0]
    # eval() reads the running statistics and updates nothing.
    assert _value(t, 5, "bn.running_mean") == [1.0, 2.0]
    assert _value(t, 5, "y_eval")[0] == pytest.approx([0.0, 0.0])
    # load_state_dict copies the checkpoint's values into the same buffers: they were the
    # checkpoint's own tensors, so nothing changes.
    assert _value(t, 7, "bn.running_mean") == [1.0, 2.0]


def test_torch_dropout_returns_its_input_itself(runner):
    # ATen Dropout.cpp `_dropout_impl`: p == 0 or not training returns the input tensor itself,
    # so the outputs follow a later write into the input, in both modes.
    t = runner.run_one(load_case(CASES / "dropout_returns_its_input.toml"), every_target=True)["torch:cpu"]
    assert [s.status for s in t.steps] == ["ok"] * 4, t.steps
    state = t.state_after(3)
    assert state["y_train"].identity == state["x"].identity == state["y_eval"].identity
    assert _value(t, 3, "y_train") == _value(t, 3, "y_eval") == [5.0, 7.0]


def test_torch_dropout_p1_drops_only_in_training(runner):
    # nn.Dropout docs: zeroes elements with probability p during training; the identity in eval.
    t = runner.run_one(load_case(CASES / "dropout_p1_drops_only_in_training.toml"), every_target=True)["torch:cpu"]
    assert [s.status for s in t.steps] == ["ok"] * 5, t.steps
    assert _value(t, 0, "y_train") == [0.0, 0.0]
    assert _value(t, 2, "y_eval") == [1.0, 2.0]
    assert _value(t, 4, "y_again") == [0.0, 0.0]


def test_torch_batch_norm_normalizes_an_input_after_updating_the_running_var_it_views(runner):
    # A candidate torch bug: the CPU kernel writes the running statistics in place, then
    # normalizes the input; an input that is a view of running_var (expand of [1.]) has moved
    # to 0.5 by then and is normalized with the statistics of the values passed (mean 1, var 0).
    # candle and burn normalize what was passed (0).
    traces = runner.run_one(
        load_case(CASES / "torch_batch_norm_normalizes_an_input_it_updated.toml"), every_target=True
    )
    t = traces["torch:cpu"]
    assert [s.status for s in t.steps] == ["ok"] * 2, t.steps
    assert _value(t, 1, "n0.running_var") == [0.5]
    assert [row[0] for row in _value(t, 1, "s1")] == pytest.approx([(0.5 - 1.0) / 1e-5**0.5] * 2)
    for other in ("candle:cpu", "burn:flex"):
        assert _value(traces[other], 1, "s1") == [[0.0], [0.0]], other
