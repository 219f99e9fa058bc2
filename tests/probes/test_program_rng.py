"""Lazy init from the program's one generator (``init = "program_rng"``), on the real targets.

Each lazy tensor of this init draws uniform values in [-1, 1) from one generator per program,
seeded once (``PROGRAM_SEED``) when the program opens. What each framework documents:

- burn (burn-core 0.22.1 module/param/base.rs): a lazy ``Param`` runs its init on the first
  ``val()``; the backend's generator (``Device::seed``) is shared, so the param read first takes
  the first values, whatever the declaration order (burn-nn's Initializer docs). Clones of an
  uninitialised param share its lazy state (burn#5045, the fix of burn#5040): a module clone made
  before the first read initialises once, with the original.
- torch has no lazy parameters: every tensor is created when the program opens, in declaration
  order, from ``torch.Generator().manual_seed(PROGRAM_SEED)`` (``Tensor.uniform_(generator=)``).
- candle's CPU backend cannot be seeded (``Device::set_seed``: "cannot seed the CPU rng with
  set_seed"): the probe refuses the whole program (trace status ``unsupported``) and the oracle
  leaves candle out of that program's comparisons.

The oracle compares these values within one target only (``links.unreproducible_names`` leaves
them in the metamorphic oracle's comparison; ``links.nondeterministic_names`` takes them out of
the comparison of two targets).

The tests of this subject that run in-process are in tests/unit/case/test_program_rng.py.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from harness.case import inert
from harness.case.case_file import load_case
from harness.case.ir import Program, TensorDecl, check_program
from harness.fuzzing.baseline import load_baseline
from harness.fuzzing.replay import run_case
from harness.judging.oracle import compare
from harness.targets.protocol import PROGRAM_SEED
from tests.conftest import CASES
from tests.support.probe_client import BURN_TARGETS

BURN = tuple(BURN_TARGETS)
TORCH = ("torch:cpu", "torch:cpu+foreach")
L0, L1 = TensorDecl("l0", "lazy", (2,), init="program_rng"), TensorDecl("l1", "lazy", (3,), init="program_rng")


def _program(*ops: dict, tensors=(L0, L1)) -> Program:
    return Program(tuple(tensors), check_program(tuple(tensors), list(ops)))


def _final(trace, name: str) -> list[float]:
    return trace.state_after(len(trace.steps) - 1)[name].value.ravel().tolist()


def _reads(*names: str) -> list[dict]:
    return [{"op": "read", "target": n} for n in names]


def _torch_draws(*shapes) -> list[list[float]]:
    gen = torch.Generator().manual_seed(PROGRAM_SEED)
    return [torch.empty(s).uniform_(-1.0, 1.0, generator=gen).ravel().tolist() for s in shapes]


def test_torch_draws_in_declaration_order_whatever_is_read_first(runner):
    want = _torch_draws((2,), (3,))
    for order in (("l0", "l1"), ("l1", "l0")):
        traces = runner.run_one(_program(*_reads(*order)), every_target=True)
        for target in TORCH:
            t = traces[target]
            assert t.ok and [s.status for s in t.steps] == ["ok", "ok"], (target, t.message, t.steps)
            assert [_final(t, "l0"), _final(t, "l1")] == want, (target, order)


def test_burn_draws_in_the_order_of_first_reads(runner):
    # Two params of one shape: the one read first takes the generator's first values.
    same = (L0, replace(L1, shape=(2,)))
    first = runner.run_one(_program(*_reads("l0", "l1"), tensors=same), every_target=True)
    swapped = runner.run_one(_program(*_reads("l1", "l0"), tensors=same), every_target=True)
    for target in BURN:
        a, b = first[target], swapped[target]
        assert a.ok and b.ok, (target, a.message, b.message)
        assert a.state_after(0)["l1"].value is None, "l1 is not initialised before its first read"
        assert _final(a, "l0") == _final(b, "l1") and _final(a, "l1") == _final(b, "l0"), target
        assert _final(a, "l0") != _final(a, "l1"), target
        assert all(-1.0 <= x < 1.0 for x in _final(a, "l0") + _final(a, "l1")), target


def test_a_burn_module_clone_before_the_first_read_initialises_once(runner):
    # burn#5045: the clone shares the lazy state, so reading the clone's l0 and then l0 gives one
    # draw, the same values, and l1 then takes the next values, as without the clone.
    with_clone = runner.run_one(
        _program({"op": "module_clone", "name": "m"}, *_reads("m.l0", "l0", "l1")), every_target=True
    )
    plain = runner.run_one(_program(*_reads("l0", "l1")), every_target=True)
    for target in BURN:
        t = with_clone[target]
        assert t.ok and [s.status for s in t.steps] == ["ok"] * 4, (target, t.steps)
        assert _final(t, "m.l0") == _final(t, "l0") == _final(plain[target], "l0"), target
        assert _final(t, "l1") == _final(plain[target], "l1"), target


def test_candle_cpu_refuses_the_program_and_the_oracle_leaves_it_out(runner):
    program = _program(*_reads("l1", "l0"))
    traces = runner.run_one(program, every_target=True)
    t = traces["candle:cpu"]
    assert t.status == "unsupported" and t.steps == [], t
    assert "cannot seed the CPU rng" in t.message
    # torch and burn draw different values (the oracle does not compare them across targets),
    # and candle's refusal is no finding.
    assert _final(traces["torch:cpu"], "l0") != _final(traces["burn:flex"], "l0")
    assert compare(program, traces) == []


def test_an_unused_module_clone_changes_no_burn_draw(runner):
    # The metamorphic oracle on the real targets: the module clone nobody uses is inert, and burn
    # (which shares the clone's lazy state) draws the same values with and without it.
    program = _program(
        {"op": "module_clone", "name": "z"}, *_reads("l1", "l0"), {"op": "step", "optimizer": "sgd", "lr": 0.5}
    )
    program = replace(program, inert=inert.check_inert(program, [0]).ops)
    result = run_case(program, runner, runner.infos)
    assert [f.signature for f in result.findings if f.kind == "metamorphic"] == []
    doc = result.to_json()
    for target in BURN + TORCH:
        with_clone, without = doc["targets"][target]["final"], doc["without_inert"]["targets"][target]["final"]
        assert [with_clone[n] for n in ("l0", "l1")] == [without[n] for n in ("l0", "l1")], target


def _metamorphic(result) -> dict:
    return {f.targets[0]: f for f in result.findings if f.kind == "metamorphic"}


def test_a_valid_train_round_trip_reorders_burns_draws_and_the_finding_says_where(runner):
    # burn's valid() initialises every lazy param in the model's order (l0 first); without the
    # round trip the read of l1 initialises it first, and takes what l0 took. torch draws at
    # start-up either way.
    program = load_case(CASES / "burn_valid_initialises_every_lazy_param.toml")
    result = run_case(program, runner, runner.infos, load_baseline(None))
    meta = _metamorphic(result)
    assert sorted(meta) == list(BURN)
    for target, f in meta.items():
        assert f.signature == f"metamorphic|{target}~{target}|draw|+valid+train|lazy_init|valid~later"
        assert f.subject == "l1" and f.values[0] != f.values[1]  # l0 is never read without the group
        assert "`valid` initialised a lazy param that the run without it initialised later" in f.sentence()
        assert result.known[f.signature].id == "burn-valid-initialises-every-lazy-param"


def test_a_draw_hidden_by_a_step_that_also_trains_is_not_called_a_draw(runner):
    # Without the clone the step initialises l0 and trains it in one op, so its first values are
    # not its draw: the finding is the documented one, a moved param that stopped training.
    l0 = TensorDecl("l0", "lazy", (1,), init="program_rng")
    program = _program(
        {"op": "module_clone", "name": "m0"},
        {"op": "move", "target": "l0", "device": "home"},
        {"op": "step", "optimizer": "sgd", "lr": 0.5},
        tensors=(l0,),
    )
    program = replace(program, inert=(0,))
    result = run_case(program, runner, runner.infos, load_baseline(None))
    for _target, f in _metamorphic(result).items():
        assert f.aspect == "value" and f.sides == ("unchanged", "changed"), f.signature
        assert result.known[f.signature].id == "burn-lazy-initialised-before-a-move-stops-training"


def test_an_op_whose_effect_on_a_draw_depends_on_the_value_drawn_is_not_compared(runner):
    # assign l0[0] = relu(clone(l0))[0]: where the framework drew a negative value the assign
    # changes l0 (to 0), where it drew a positive one it writes l0's own value back. torch and
    # burn draw different values by design, so "changed on one side only" is no finding.
    l0 = TensorDecl("l0", "lazy", (1,), init="program_rng")
    program = _program(
        {"op": "snapshot", "name": "s0", "of": "l0", "method": "clone"},
        {"op": "map", "target": "s0", "fn": "relu"},
        {"op": "save", "name": "c0"},
        {"op": "assign", "target": "l0", "source": "s0", "index": 0, "source_index": 0},
        tensors=(l0,),
    )
    traces = runner.run_one(program, every_target=True)
    drawn = {t: _final(traces[t], "s0")[0] for t in ("torch:cpu", "burn:flex")}
    assert drawn["torch:cpu"] == 0.0 and drawn["burn:flex"] > 0.0, drawn  # the two draws' signs differ
    assert [f.signature for f in compare(program, traces) if f.subject == "l0" and f.aspect == "value"] == []
