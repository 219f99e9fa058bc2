"""The oracle's named attribution rules (``harness.judging.rules``): each finding names one, the
docs table is generated from them, and each rule's case makes a finding by that rule on the real
CPU targets (a rule shown only by a test double names that test, which must exist).

The tests of this subject that run in-process are in tests/unit/judging/test_oracle_rules.py.
"""

from __future__ import annotations

import pytest

from harness.case.case_file import load_case
from harness.fuzzing.replay import run_case
from harness.judging import rules
from tests.conftest import ROOT

CASE_RULES = [r for r in rules.RULES if r.shown_by.startswith("tests/cases/")]


@pytest.mark.parametrize("rule", CASE_RULES, ids=[r.name for r in CASE_RULES])
def test_a_rules_case_makes_a_finding_by_that_rule(runner, rule):
    result = run_case(load_case(ROOT / rule.shown_by), runner, runner.infos)
    named = {f.rule for f in result.findings}
    assert rule.name in named, f"{rule.shown_by}: its findings name {sorted(named)}"


def test_every_finding_of_the_bundled_cases_names_a_known_rule(runner):
    unnamed = []
    for case in sorted((ROOT / "tests" / "cases").glob("*.toml")):
        for f in run_case(load_case(case), runner, runner.infos).findings:
            if f.rule not in rules.BY_NAME:
                unnamed.append((case.name, f.signature, f.rule))
    assert not unnamed, unnamed[:10]
