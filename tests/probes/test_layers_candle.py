"""Layers with running state (``[layers]``) and ``forward`` on the candle probe: candle-nn 0.11.1's
``BatchNorm`` and ``Dropout`` run with ``ModuleT::forward_t(&x, train)``, checked against the crate
sources (``~/.cargo/registry/src/*/candle-nn-0.11.1/src/batch_norm.rs``, ``ops.rs``,
``optim.rs``; ``candle-core-0.11.1/src/variable.rs``) and the upstream threads they rest on.
Each program is a bundled case file, or one with a field changed (a file checkpoint, a step)."""

from __future__ import annotations

import tomllib

import numpy as np
import pytest

from harness.case.case_file import load_case, parse_case
from tests.conftest import CASES, clean_runs

TARGET = "candle:cpu"
BN_CASE = CASES / "batch_norm_running_stats_across_clone_save_and_eval.toml"
X = np.array([[1.0, 2.0], [3.0, 6.0]])  # the batch norm case's input
MOMENTUM = 0.5
# batch_norm.rs `forward_train`: running = running * (1 - m) + stat * m, the mean's stat the batch
# mean and the variance's the unbiased batch variance (`norm_x_weight = momentum * n / (n - 1)`).
MEAN_AFTER = (1 - MOMENTUM) * 0.0 + MOMENTUM * X.mean(0)  # [1, 2]
VAR_AFTER = (1 - MOMENTUM) * 1.0 + MOMENTUM * X.var(0, ddof=1)  # [1.5, 4.5]
STATS = ("bn.running_mean", "bn.running_var")


@pytest.fixture(scope="module")
def run():
    with clean_runs(TARGET) as run_program:
        yield run_program


def _bn_case(**save_fields):
    """The batch norm case, its `save` op given ``save_fields``."""
    doc = tomllib.loads(BN_CASE.read_text())
    doc["ops"] = [dict(o, **save_fields) if o["op"] == "save" else o for o in doc["ops"]]
    return parse_case(doc)


def _value(trace, i: int, name: str):
    return trace.state_after(i)[name].value


def _id(trace, i: int, name: str):
    return trace.state_after(i)[name].identity


def test_running_stats_are_the_varmaps_vars_updated_in_place_by_forward_train(run):
    trace = run(load_case(BN_CASE))
    assert [s.status for s in trace.steps[:7]] == ["ok"] * 7, trace.steps
    # candle_nn::batch_norm gets running_mean (zeros) and running_var (ones) from the VarBuilder,
    # i.e. VarMap::get (var_map.rs), and keeps those Vars: Var::from_tensor of a variable's tensor
    # is that variable (huggingface/candle#2124, variable.rs `from_tensor`). So the state_dict
    # entry (the VarMap's Var), the module clone (a clone of the map) and the memory checkpoint (a
    # clone of the map) are the layer's own Vars: same ids, and they follow the training forward.
    np.testing.assert_array_equal(_value(trace, -1, "bn.running_mean"), [0.0, 0.0])
    np.testing.assert_array_equal(_value(trace, -1, "bn.running_var"), [1.0, 1.0])
    for prefix in ("m.", "c."):
        for stat in STATS:
            assert _id(trace, 2, prefix + stat) == _id(trace, -1, stat), prefix + stat
    assert _id(trace, 0, "entry") == _id(trace, -1, "bn.running_mean")
    # The training forward (huggingface/candle#1504: running stats tracked as Vars, updated with
    # Var::set, which copies into the Var's storage: variable.rs `set`). The module doc of
    # batch_norm.rs still says "for inference only, there is no possibility to track the running
    # stats": forward_train does track them.
    for name in ("bn.running_mean", "entry", "m.bn.running_mean", "c.bn.running_mean"):
        np.testing.assert_allclose(_value(trace, 3, name), MEAN_AFTER, err_msg=name)
        assert _id(trace, 3, name) == _id(trace, -1, "bn.running_mean"), name
    for name in ("bn.running_var", "m.bn.running_var", "c.bn.running_var"):
        np.testing.assert_allclose(_value(trace, 3, name), VAR_AFTER, err_msg=name)
    # It normalises with the batch's biased variance: (x - mean) / sqrt(var + eps).
    np.testing.assert_allclose(_value(trace, 3, "y"), (X - X.mean(0)) / np.sqrt(X.var(0) + 1e-5), rtol=1e-6)


def test_eval_forward_reads_the_running_stats_and_leaves_them(run):
    trace = run(load_case(BN_CASE))
    # batch_norm.rs `forward_eval`: (x - running_mean) / sqrt(running_var + eps), from the
    # running stats' detached tensors; nothing is set. `valid` only changes the flag.
    assert trace.steps[4].status == "ok" and trace.steps[4].changed == {}
    assert not set(trace.steps[5].changed) & {*STATS, "entry", "m.bn.running_mean", "c.bn.running_var"}
    np.testing.assert_allclose(_value(trace, 5, "y_eval"), (X - MEAN_AFTER) / np.sqrt(VAR_AFTER + 1e-5), rtol=1e-6)


def test_load_of_a_memory_checkpoint_is_refused(run):
    trace = run(load_case(BN_CASE))
    # The memory checkpoint is a clone of the VarMap's map: the model's own Vars. VarMap::set
    # (var_map.rs) calls Var::set of each Var with itself, which variable.rs refuses ("cannot set
    # a variable to a tensor that is derived from its value"); nothing changes.
    load = trace.steps[7]
    assert load.status == "error" and "derived from its value" in (load.message or ""), load
    np.testing.assert_allclose(_value(trace, 7, "bn.running_mean"), MEAN_AFTER)


def test_load_of_a_file_checkpoint_restores_the_running_stats(run):
    trace = run(_bn_case(to="file"))
    assert [s.status for s in trace.steps] == ["ok"] * 8, trace.steps
    # VarMap::save wrote the stats (var_map.rs `save`: every Var of the map); what the file holds
    # is read back as new tensors, which do not follow the forward.
    for stat, init in zip(STATS, ([0.0, 0.0], [1.0, 1.0])):
        assert _id(trace, 2, "c." + stat) != _id(trace, -1, stat)
        np.testing.assert_array_equal(_value(trace, 3, "c." + stat), init)
    # VarMap::load sets every Var of the map from the file (Var::set: in place, the same Vars), so
    # the layer, the state_dict entry and the module clone are back to the saved values.
    for name, init in (
        ("bn.running_mean", [0.0, 0.0]),
        ("bn.running_var", [1.0, 1.0]),
        ("entry", [0.0, 0.0]),
        ("m.bn.running_var", [1.0, 1.0]),
    ):
        np.testing.assert_array_equal(_value(trace, 7, name), init, err_msg=name)
    assert _id(trace, 7, "bn.running_mean") == _id(trace, -1, "bn.running_mean")


def test_a_step_leaves_the_running_stats_and_a_write_reaches_the_layer(run):
    doc = tomllib.loads(BN_CASE.read_text())
    doc["tensors"]["w"] = {"kind": "param", "value": [1.0, 2.0]}
    doc["ops"] = [
        {"op": "forward", "name": "y", "layer": "bn", "input": "x"},
        {"op": "step", "optimizer": "sgd", "lr": 0.5},
        {"op": "step", "optimizer": "adamw", "lr": 0.5, "weight_decay": 0.5},
        {"op": "write", "target": "bn.running_mean", "value": [7.0, 8.0]},
        {"op": "valid"},
        {"op": "forward", "name": "y_eval", "layer": "bn", "input": "x"},
    ]
    trace = run(parse_case(doc))
    assert [s.status for s in trace.steps] == ["ok"] * 6, trace.steps
    # The optimizers are made over VarMap::all_vars(), the running stats included, but
    # SGD::step and AdamW::step (optim.rs) only update a Var the GradStore has a gradient for,
    # weight decay included; the loss reads the params only, so the stats stay.
    assert set(trace.steps[1].changed) == {"w"} and set(trace.steps[2].changed) == {"w"}
    np.testing.assert_allclose(_value(trace, 2, "bn.running_mean"), MEAN_AFTER)
    np.testing.assert_allclose(_value(trace, 2, "bn.running_var"), VAR_AFTER)
    # The name is bound to the layer's own Var: a write through it is what forward_eval reads.
    np.testing.assert_allclose(_value(trace, 5, "y_eval"), (X - [7.0, 8.0]) / np.sqrt(VAR_AFTER + 1e-5), rtol=1e-6)


def test_dropout_p0_returns_its_input_in_eval_and_a_product_in_training(run):
    trace = run(load_case(CASES / "dropout_returns_its_input.toml"))
    assert [s.status for s in trace.steps] == ["ok"] * 4, trace.steps
    # candle-nn ops.rs: Dropout::forward(xs, train) is `ops::dropout(xs, p)` in training, i.e.
    # `xs * mask` (a new tensor; p = 0 keeps every element, scale 1), and `Ok(xs.clone())` in eval:
    # the input's own Tensor (an Arc clone), which follows a later slice_set into the input.
    assert _id(trace, 0, "y_train") != _id(trace, -1, "x")
    np.testing.assert_array_equal(_value(trace, 0, "y_train"), [1.0, 2.0])
    assert _id(trace, 2, "y_eval") == _id(trace, -1, "x")
    np.testing.assert_array_equal(_value(trace, 3, "y_eval"), [5.0, 7.0])
    np.testing.assert_array_equal(_value(trace, 3, "y_train"), [1.0, 2.0])


def test_dropout_p1_is_refused_in_training_only(run):
    trace = run(load_case(CASES / "dropout_p1_drops_only_in_training.toml"))
    # Dropout::new(1.0) constructs (ops.rs takes any p); `ops::dropout` bails in training:
    # "dropout probability has to be in [0, 1)". Eval never looks at p: `xs.clone()`.
    assert [s.status for s in trace.steps] == ["unsupported", "ok", "ok", "ok", "unsupported"], trace.steps
    for i in (0, 4):
        assert "[0, 1)" in (trace.steps[i].message or ""), trace.steps[i]
    assert _id(trace, 2, "y_eval") == _id(trace, -1, "x")
    np.testing.assert_array_equal(_value(trace, 2, "y_eval"), [1.0, 2.0])
