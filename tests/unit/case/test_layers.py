"""Layers with running state or a training flag (``[layers]``, ``forward``): the case format's
checks, the generator and minimizer, and torch's documented behaviour on the bundled cases. The
candle and burn behaviour is in ``test_layers_candle.py`` and ``test_layers_burn.py``.

The tests here run in this process, as the
unit tier requires; those that need the real frameworks are in tests/probes/test_layers.py.
"""

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
