"""The oracle's named attribution rules (``harness.judging.rules``): each finding names one, the
docs table is generated from them, and each rule's case makes a finding by that rule on the real
CPU targets (a rule shown only by a test double names that test, which must exist).

The tests here run in this process, as the
unit tier requires; those that need the real frameworks are in tests/probes/test_oracle_rules.py.
"""

from __future__ import annotations

import re

from harness.judging import rules
from harness.judging.finding import Finding, FindingRecord
from harness.judging.oracle import compare
from harness.targets.trace import Trace
from tests.conftest import ROOT
from tests.support.traces import P0, STEP, A, B, program, trace

CASE_RULES = [r for r in rules.RULES if r.shown_by.startswith("tests/cases/")]
TEST_RULES = [r for r in rules.RULES if not r.shown_by.startswith("tests/cases/")]


def test_the_docs_rule_table_is_the_rules_markdown():
    text = (ROOT / "docs" / "ORACLE.md").read_text(encoding="utf-8")
    table = re.search(r"<!-- rules: begin[^\n]*-->\n(.*?)<!-- rules: end -->", text, re.S)
    assert table is not None, "docs/ORACLE.md has no generated rule table"
    assert table.group(1) == rules.markdown(), "run `python -m harness.judging.rules` into docs/ORACLE.md"


def test_every_rule_is_shown_by_a_case_or_a_test_that_exists():
    for r in CASE_RULES:
        assert (ROOT / r.shown_by).is_file(), r
    constants = {r.name: k for k, r in vars(rules).items() if isinstance(r, rules.Rule)}
    for r in TEST_RULES:
        path, _, test = r.shown_by.partition("::")
        source = (ROOT / path).read_text(encoding="utf-8")
        body = re.search(rf"^def {re.escape(test)}\(.*?(?=^def |\Z)", source, re.M | re.S)
        assert body is not None, r
        # the test holds a finding to its rule
        assert f"rules.{constants[r.name]}.name" in body.group(0), r


def test_a_target_that_crashed_on_the_program_is_a_program_fails_finding():
    prog = program(P0, [STEP])
    crashed = Trace.from_wire(A, {"status": "crash", "message": "the probe exited (signal 11)"})
    (f,) = compare(prog, {A: crashed, B: trace(B, {"p0": [0.0]}, [{"p0": [-1.0]}])})
    assert f.kind == "crash" and f.sides == ("crash", "ok")
    assert f.rule == rules.PROGRAM_FAILS.name


def test_a_finding_and_its_record_carry_the_rule_out_of_the_signature():
    f = Finding(
        kind="framework",
        aspect="verdict",
        targets=("candle:cpu", "torch:cpu"),
        op_label="write",
        method="clone",
        sides=("follows", "keeps"),
        rule=rules.SNAPSHOT_RELATION_DIFFERS.name,
    )
    assert f.to_json()["rule"] == "snapshot-relation-differs"
    assert "snapshot-relation-differs" not in f.signature
    assert f.signature == Finding(**{**f.__dict__, "rule": "another"}).signature
    record = FindingRecord.from_json({"signature": f.signature, "rule": f.rule})
    assert record.rule == "snapshot-relation-differs"
    assert FindingRecord.from_json({"signature": f.signature}).rule is None  # a record from before


def _versioned(target: str, value_after: list[float], versions: tuple[int, int] | None) -> Trace:
    """TEST DOUBLE: a trace of ``p0`` through one write, its version counter ``versions``
    (before, after), or none (a target without counters)."""

    def obs(value, version):
        return {
            "shape": [1],
            "value": value,
            "identity": f"{target}:p0",
            "device": "cpu",
            "requires_grad": True,
            **({} if version is None else {"version": version}),
        }

    before, after = versions or (None, None)
    return Trace.from_wire(
        target,
        {
            "status": "ok",
            "initial": {"p0": obs([0.0], before)},
            "steps": [{"status": "ok", "changed": {"p0": obs(value_after, after)}}],
        },
    )


def test_a_write_one_target_keeps_off_the_version_counter_is_a_version_finding():
    prog = program(P0, [{"op": "fill", "target": "p0", "value": 2.0}])
    found = compare(prog, {A: _versioned(A, [2.0], (0, 1)), B: _versioned(B, [2.0], (0, 0))})
    # B, against itself, changed p0 and kept its counter: the write is hidden from its autograd
    (hidden,) = [f for f in found if f.kind == "version"]
    assert hidden.rule == rules.WRITE_HIDDEN_FROM_AUTOGRAD.name and hidden.targets == (B, B)
    (f,) = [f for f in found if f.kind != "version"]
    assert f.rule == rules.VERSION_DIFFERS.name
    assert (f.aspect, f.sides, f.subject, f.op_label, f.op_index) == ("version", ("bumped", "kept"), "p0", "fill", 0)
    assert "moved on alpha:cpu but not on beta:cpu" in f.sentence()
    assert "from 0 to 1 on alpha:cpu and from 0 to 0 on beta:cpu" in f.sentence()


def test_how_far_a_counter_moves_and_a_target_without_counters_make_no_version_finding():
    prog = program(P0, [{"op": "fill", "target": "p0", "value": 2.0}])
    # one in-place call may bump a counter once or twice: only whether it moves is compared
    assert compare(prog, {A: _versioned(A, [2.0], (0, 1)), B: _versioned(B, [2.0], (0, 2))}) == []
    assert compare(prog, {A: _versioned(A, [2.0], (0, 1)), B: _versioned(B, [2.0], None)}) == []


def test_a_value_moved_on_one_side_only_is_a_value_finding_not_a_version_finding():
    prog = program(P0, [{"op": "fill", "target": "p0", "value": 2.0}])
    found = compare(prog, {A: _versioned(A, [2.0], (0, 1)), B: _versioned(B, [0.0], (0, 0))})
    assert found and all(f.aspect != "version" for f in found)
