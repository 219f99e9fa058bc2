"""Layers with running state or a training flag (``[layers]``, ``forward``): the case format's
checks, the generator and minimizer, and torch's documented behaviour on the bundled cases. The
candle and burn behaviour is in ``test_layers_candle.py`` and ``test_layers_burn.py``."""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import HealthCheck, given, settings

from generators.programs import programs
from harness.case.case_file import dump_case, load_case, parse_case
from harness.case.ir import CaseError, names_bound
from harness.shrinking.minimize import canonical_names, without_layer
from tests.conftest import CASES

BN_CASE = CASES / "batch_norm_running_stats_across_clone_save_and_eval.toml"

HEADER = 'format = "aliasfuzz-case/1"\n[tensors]\nx = { kind = "buffer", value = [[1.0, 2.0], [3.0, 6.0]] }\n'


def _parse(text: str):
    return parse_case(tomllib.loads(text), "t.toml")


@pytest.mark.parametrize(
    "layers,ops,where,message",
    [
        ('bn = { kind = "conv" }', "", "layers.bn.kind", "must be one of"),
        ('bn = { kind = "batch_norm" }', "", "layers.bn.features", "integer in 1..8"),
        ('bn = { kind = "batch_norm", features = 2, momentum = 0.0 }', "", "layers.bn.momentum", "(0, 1]"),
        ('drop = { kind = "dropout", p = 0.5 }', "", "layers.drop.p", "0 or 1"),
        ('drop = { kind = "dropout", features = 2 }', "", "layers.drop.features", "unknown field"),
        ('x = { kind = "dropout" }', "", "layers.x", "already declared"),
        (
            'bn = { kind = "batch_norm", features = 3 }',
            '[[ops]]\nop = "forward"\nname = "y"\nlayer = "bn"\ninput = "x"\n',
            "ops[0].input",
            "reads [batch >= 2, 3]",
        ),
        (
            'bn = { kind = "batch_norm", features = 2 }',
            '[[ops]]\nop = "forward"\nname = "y"\nlayer = "nope"\ninput = "x"\n',
            "ops[0].layer",
            "no layer named",
        ),
        (
            'bn = { kind = "batch_norm", features = 2 }',
            '[[ops]]\nop = "snapshot"\nname = "bn"\nof = "x"\nmethod = "clone"\n',
            "ops[0].name",
            "names a layer",
        ),
        (
            'bn = { kind = "batch_norm", features = 2 }',
            '[[ops]]\nop = "append"\ntarget = "bn.running_mean"\nsource = "bn.running_var"\n',
            "ops[0].target",
            "is a running",
        ),
    ],
)
def test_a_bad_layer_or_forward_is_refused_naming_the_field(layers, ops, where, message):
    with pytest.raises(CaseError) as e:
        _parse(HEADER + "[layers]\n" + layers + "\n" + ops)
    assert e.value.where == where and message in e.value.message, str(e.value)
    assert "\n" not in str(e.value)


def test_layer_stats_are_model_names_bound_under_every_prefix():
    program = load_case(BN_CASE)
    assert program.model_names == ["bn.running_mean", "bn.running_var"]
    assert names_bound(program) == [
        "x",
        "bn.running_mean",
        "bn.running_var",
        "entry",
        "m.bn.running_mean",
        "m.bn.running_var",
        "c.bn.running_mean",
        "c.bn.running_var",
        "y",
        "y_eval",
    ]
    # A case with layers written and read back is the same program.
    assert parse_case(tomllib.loads(dump_case(program))).key() == program.key()
    assert program.to_wire()["layers"] == [{"name": "bn", "kind": "batch_norm", "features": 2, "momentum": 0.5}]


def test_the_minimizer_renames_and_removes_layers():
    program = canonical_names(load_case(BN_CASE))
    assert [layer.name for layer in program.layers] == ["n0"]
    assert program.ops[0]["of"] == "n0.running_mean" and program.ops[3]["layer"] == "n0"
    gone = without_layer(program, "n0")
    # The stat's snapshot and both forwards go with the layer; the prefixes stay, binding nothing of it.
    assert gone is not None and not gone.layers
    assert [op["op"] for op in gone.ops] == ["module_clone", "save", "valid", "train", "load"]


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(programs("default"))
def test_drawn_forwards_read_what_their_layer_takes(program):
    # check_program ran in the strategy; a drawn program survives a write and a read back, and the
    # layers of the forwards it draws exist.
    layers = {layer.name for layer in program.layers}
    assert all(op["layer"] in layers for op in program.ops if op["op"] == "forward")
    assert parse_case(tomllib.loads(dump_case(program))).key() == program.key()


def test_the_generator_draws_both_layers_and_forwards():
    seen: set[str] = set()

    # Derandomized: the same 800 programs every run, so the test cannot pass or fail by chance.
    @settings(max_examples=800, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(programs("quick"))
    def draw(program):
        seen.update(layer.kind for layer in program.layers)
        seen.update(f"forward:{op['layer']}" for op in program.ops if op["op"] == "forward")

    draw()
    assert {"batch_norm", "dropout", "forward:bn", "forward:drop"} <= seen, seen


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
