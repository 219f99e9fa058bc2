"""The metamorphic oracle on the real frameworks: a target against itself, with and without an
inert op group (the oracle's own logic is tested on the fake probe in tests/e2e/test_metamorphic.py)."""

from __future__ import annotations

import pytest

from harness.case.case_file import load_case
from harness.fuzzing.baseline import load_baseline
from harness.fuzzing.replay import run_case
from harness.targets.registry import open_runner
from tests.conftest import CASES
from tests.support.probe_client import BURN_TARGETS

BURN_CASE = CASES / "burn_unused_module_clone_stops_a_moved_lazy_training.toml"


@pytest.fixture(scope="module")
def runner():
    r, found = open_runner(None)
    missing = {"torch:cpu", "candle:cpu", "burn:flex", "burn:ndarray"} - set(r.ids)
    if missing:
        r.close()
        pytest.fail(
            f"targets missing: {sorted(missing)} ({dict(found.unavailable)}); build the probes with `make probes`"
        )
    yield r
    r.close()


def test_an_unused_module_clone_stops_a_moved_lazy_from_training_on_burn(runner):
    program = load_case(BURN_CASE)
    result = run_case(program, runner, runner.infos, load_baseline(None))
    meta = {f.targets[0]: f for f in result.findings if f.kind == "metamorphic"}
    assert sorted(meta) == sorted(BURN_TARGETS)  # torch and candle agree with themselves
    for target, f in meta.items():
        # torch trains l: the clone moved burn away from it
        assert (
            f.signature
            == f"metamorphic|{target}~{target}|value|+module_clone|step:sgd|unchanged~changed|agrees:without"
        )
        assert (f.op_index, f.subject, f.inert) == (2, "l", (0,))
        assert f.values == ("[0.5, 0.5]", "[-0.5, -0.5]")
        # burn documents it (burn#5739): a baseline entry written for the metamorphic oracle knows it
        assert result.known[f.signature].id == "burn-lazy-initialised-before-a-move-stops-training"
    # Both runs are in the repro JSON: with the clone l stays at its init, without it l trains.
    doc = result.to_json()
    without = doc["without_inert"]["targets"]["burn:flex"]["final"]
    assert without["l"] == [-0.5, -0.5] and doc["targets"]["burn:flex"]["final"]["l"] == [0.5, 0.5]


def test_a_valid_train_round_trip_halves_the_step_of_a_tied_param_on_burn(runner):
    # A candidate upstream report (tests/cases/burn_tied_param_valid_train_halves_a_step.toml):
    # valid() then train() must change nothing (burn's Module docs: they set the autodiff mode),
    # yet after p0's slot holds p1's Param the next SGD step moves p0 by half as much.
    program = load_case(CASES / "burn_tied_param_valid_train_halves_a_step.toml")
    result = run_case(program, runner, runner.infos, load_baseline(None))
    meta = {f.targets[0]: f for f in result.findings if f.kind == "metamorphic"}
    assert sorted(meta) == sorted(BURN_TARGETS)  # torch and candle agree with themselves
    for target, f in meta.items():
        # torch steps p0 by -0.5, as burn without the round trip: the group moved burn away
        assert (
            f.signature == f"metamorphic|{target}~{target}|value|+valid+train|step:sgd|changed~changed|agrees:without"
        )
        assert (f.op_index, f.subject, f.inert) == (3, "p0", (1, 2))
        assert f.values == ("[[[-0.25, -0.25]]]", "[[[-0.5, -0.5]]]")
        assert result.known[f.signature] is None, "a candidate report, not a documented difference"


def test_a_valid_train_round_trip_separates_params_param_map_joined_on_burn(runner):
    # A candidate upstream report, of the family above: after `replace p1 = p0` (Param::map) the
    # two params are one autodiff node, so p1's accumulated gradient reaches p0 at the step; after
    # an inert valid() / train() each is a leaf of its own and p0 is stepped with its own gradient.
    program = load_case(CASES / "burn_valid_train_separates_params_param_map_joined.toml")
    result = run_case(program, runner, runner.infos, load_baseline(None))
    meta = {f.targets[0]: f for f in result.findings if f.kind == "metamorphic"}
    assert sorted(meta) == sorted(BURN_TARGETS)
    for target, f in meta.items():
        assert (
            f.signature == f"metamorphic|{target}~{target}|value|+valid+train|step:adam|changed~changed|agrees:neither"
        )
        assert (f.op_index, f.subject) == (3, "p0")
        assert f.values == ("[-1., -1., -1.]", "[-1., -1.,  0.]")
        assert result.known[f.signature] is None, "a candidate report, not a documented difference"


def test_a_valid_train_round_trip_that_restores_torchs_step_is_told_from_one_that_breaks_it(runner):
    # One signature class (+valid+train, a step, changed~changed), two causes: a param moved
    # after a backward pass takes both passes with the round trip, as torch does (a documented
    # difference's other side), while a tied param's step is halved by it (a candidate). The
    # agreement with torch tells them apart, so the baseline knows the first and not the second.
    moved = load_case(CASES / "burn_valid_train_makes_a_param_moved_after_a_backward_pass_train_with_both.toml")
    tied = load_case(CASES / "burn_tied_param_valid_train_halves_a_step.toml")
    for program, agrees, known in (
        (moved, "with", "burn-valid-train-gives-a-moved-param-both-passes"),
        (tied, "without", None),
    ):
        result = run_case(program, runner, runner.infos, load_baseline(None))
        meta = [f for f in result.findings if f.kind == "metamorphic"]
        assert sorted(f.targets[0] for f in meta) == sorted(BURN_TARGETS)
        for f in meta:
            assert f.sides == ("changed", "changed") and f.op_label.startswith("step:") and f.agrees == agrees
            entry = result.known[f.signature]
            assert (entry.id if entry else None) == known


def test_every_target_agrees_with_itself_on_every_inert_group_without_lazies(runner):
    # Each kind of inert group, inserted into one training program without lazy params: every
    # target runs both programs alike (the oracle does not invent divergences).
    from dataclasses import replace

    from harness.case.inert import check_inert
    from harness.case.ir import Program, TensorDecl, check_program

    tensors = (TensorDecl("w", "param", (2, 2), (1.0, 2.0, 3.0, 4.0)), TensorDecl("b", "buffer", (2,), (0.0, 1.0)))
    train = [
        {"op": "snapshot", "name": "s", "of": "w", "method": "detach"},
        {"op": "step", "optimizer": "adam", "lr": 0.5},
        {"op": "fill", "target": "b", "value": 3.0},
    ]
    groups = [
        [{"op": "snapshot", "name": "z", "of": "w", "method": "contiguous"}],
        [{"op": "module_clone", "name": "z"}],
        [{"op": "read", "target": "w"}],
        [{"op": "valid"}, {"op": "train"}],
        [{"op": "snapshot", "name": "z", "of": "b", "method": "clone"}],
    ]
    for group in groups:
        ops = train[:1] + group + train[1:]
        p = Program(tensors, check_program(tensors, ops))
        p = replace(p, inert=check_inert(p, list(range(1, 1 + len(group)))).ops)
        result = run_case(p, runner, runner.infos)
        meta = [f.signature for f in result.findings if f.kind == "metamorphic"]
        assert meta == [], (group, meta)
        assert set(result.without) == set(result.traces)
