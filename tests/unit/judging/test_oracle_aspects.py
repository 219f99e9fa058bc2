"""Each aspect's first divergence is reported whatever another aspect found, on the real targets;
and a target compared with itself across a copy of the model (``sharing``).

The tests here run in this process, as the
unit tier requires; those that need the real frameworks are in tests/probes/test_oracle_aspects.py.
"""

from __future__ import annotations

from tests.conftest import CASES


def test_a_sharing_findings_draft_says_before_and_after_the_op_not_one_target_twice():
    import json

    from harness.judging.finding import FindingRecord
    from harness.reporting.issue_draft import issue_markdown

    line = json.loads((CASES.parent / "records" / "sharing_finding.json").read_text())
    draft = issue_markdown(FindingRecord.from_json(line), "cases/001.toml", "", None)
    assert draft.startswith("# torch: `module_clone` splits parameters that were one storage\n")
    assert "- Observed, on `torch:cpu` after the op: split." in draft
    assert "- Expected, as on `torch:cpu` before it: shared." in draft
    assert "- Where the expectation comes from: the model before the op" in draft
