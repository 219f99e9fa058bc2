"""Each aspect's first divergence is reported whatever another aspect found, on the real targets;
and a target compared with itself across a copy of the model (``sharing``).

The tests of this subject that run in-process are in tests/unit/judging/test_oracle_aspects.py.
"""

from __future__ import annotations

import pytest

from harness.case.case_file import load_case, parse_case
from harness.judging.oracle import CONSEQUENCE_RULE, compare
from tests.conftest import CASES, targets_runner

#: A Var tied under two VarMap keys: candle steps it twice, torch once (op 1, a value finding).
TIED_STEP = {
    "format": "aliasfuzz-case/1",
    "tensors": {"p0": {"kind": "param", "value": [0.0]}, "p1": {"kind": "param", "value": [0.0]}},
    "ops": [
        {"op": "replace", "target": "p0", "value": "p1", "how": "tie"},
        {"op": "step", "optimizer": "sgd", "lr": 0.5},
    ],
}
#: A checkpoint: its entries are objects of their own in torch and candle alike, but candle's and
#: torch's entries relate to the params differently, an identity divergence at op 2.
SAVE = {"op": "save", "name": "c"}


@pytest.fixture(scope="module")
def torch_and_candle():
    with targets_runner(("torch:cpu", "candle:cpu")) as runner:
        yield runner


def _findings(runner, case: dict):
    program = parse_case(case, "test")
    return compare(program, runner.run_one(program, every_target=True))


def test_a_later_finding_of_another_aspect_does_not_hide_an_earlier_value_finding(torch_and_candle):
    alone = _findings(torch_and_candle, TIED_STEP)
    saved = _findings(torch_and_candle, {**TIED_STEP, "ops": TIED_STEP["ops"] + [SAVE]})

    def value_at_the_step(findings):
        return [f for f in findings if f.aspect == "value" and f.op_index == 1]

    assert value_at_the_step(alone), [f.signature for f in alone]
    assert [f.signature for f in value_at_the_step(saved)] == [f.signature for f in value_at_the_step(alone)]
    # the save's own divergence is still reported beside it
    assert any(f.op_index == 2 for f in saved), [f.signature for f in saved]


def test_a_value_divergence_an_earlier_finding_explains_is_said_in_that_findings_detail(torch_and_candle):
    """candle's clone is the param itself (identity, op 0): after the step the clone follows in
    candle and keeps in torch (the verdict), so c's values differ from then on, and so do w's after
    a write into c. Those are the earliest finding's consequences, not value findings of their own."""
    program = load_case(CASES / "candle_clone_shares_storage.toml")
    findings = compare(program, torch_and_candle.run_one(program, every_target=True))
    identity = [f for f in findings if f.aspect == "identity" and f.method == "clone"]
    assert [f.subject for f in identity] == ["w,c"], [f.signature for f in findings]
    assert not [f for f in findings if f.aspect == "value"], [f.signature for f in findings]
    detail = identity[0].detail
    assert detail.count(CONSEQUENCE_RULE) == 2
    assert "After op 1 (`step:sgd`), c changed" in detail and "After op 2 (`write:row`), w changed" in detail


@pytest.fixture(scope="module")
def torch_alone():
    with targets_runner(("torch:cpu",)) as runner:
        yield runner


@pytest.mark.parametrize(
    ("case", "signature"),
    [
        # pytorch#79788: Parameter.__deepcopy__ clones each Parameter's data on its own
        (
            "torch_deepcopy_splits_parameters_over_one_storage.toml",
            "sharing|torch:cpu~torch:cpu|storage|-|module_clone|shared~split",
        ),
        # pytorch#188346: load_state_dict(assign=True) puts each entry in its own slot
        ("load_assign_unties_parameters.toml", "sharing|torch:cpu~torch:cpu|identity|-|load:assign|shared~split"),
    ],
)
def test_a_copy_that_splits_what_the_model_shared_is_a_sharing_finding(torch_alone, case, signature):
    program = load_case(CASES / case)
    findings = compare(program, torch_alone.run_one(program, every_target=True))
    assert signature in [f.signature for f in findings]


def test_a_copy_that_keeps_the_models_sharing_is_no_finding(torch_alone):
    """A module clone of a tied pair (one Parameter object) keeps it one object: deepcopy's memo."""
    program = load_case(CASES / "module_clone_of_tied_parameters.toml")
    findings = compare(program, torch_alone.run_one(program, every_target=True))
    assert not [f for f in findings if f.kind == "sharing"], [f.signature for f in findings]
