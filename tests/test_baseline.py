"""The known-divergence baseline: well-formed, and every entry backed by a case that shows it on
the real targets."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.fuzzing.baseline import load_baseline
from harness.case.ir import CaseError, load_case
from harness.reporting.repro import run_case
from tests.conftest import ROOT

BASELINE = load_baseline()


def test_every_entry_has_a_reason_reference_and_existing_case():
    assert len(BASELINE.entries) >= 8
    for e in BASELINE.entries:
        assert e.reason and e.upstream, e.id
        assert (ROOT / e.case).exists(), f"{e.id}: {e.case} does not exist"


@pytest.mark.parametrize("entry", BASELINE.entries, ids=lambda e: e.id)
def test_entry_case_shows_a_finding_the_entry_matches(entry, runner):
    program = load_case(ROOT / entry.case)
    findings = run_case(program, runner, runner.infos).findings  # a metamorphic case: both runs
    matched = [f for f in findings if entry.matches(f)]
    assert matched, f"{entry.case} shows none of {entry.id}; it shows {[f.signature for f in findings]}"
    # the first entry that matches is the one reported: an earlier, broader entry must not steal it
    assert any(BASELINE.match(f) is entry for f in matched)


def test_bad_baseline_is_a_one_line_error(tmp_path: Path):
    bad = tmp_path / "baseline.toml"
    bad.write_text('[[known]]\nid = "x"\nreason = "r"\n')
    with pytest.raises(CaseError) as info:
        load_baseline(bad)
    assert "known[0].case" in str(info.value) and "\n" not in str(info.value)
    bad.write_text('[[known]]\nid = "x"\nreason = "r"\ncase = "c"\ncolour = 1\n')
    with pytest.raises(CaseError) as info:
        load_baseline(bad)
    assert "known[0].colour" in str(info.value)


def test_an_entry_with_several_side_patterns_matches_any_of_them(tmp_path: Path):
    from harness.judging.finding import Finding

    path = tmp_path / "baseline.toml"
    path.write_text('[[known]]\nid = "x"\nreason = "r"\ncase = "c.toml"\nmethod = "copy"\n'
                    'sides = ["*keeps~*follows", "none~follows"]\n')
    entry = load_baseline(path).entries[0]

    def finding(sides):
        return Finding(kind="framework", aspect="verdict", targets=("candle:cpu", "torch:cpu"),
                       op_label="write", method="copy", sides=sides)

    assert entry.matches(finding(("rev keeps", "rev follows"))) and entry.matches(finding(("none", "follows")))
    assert not entry.matches(finding(("other", "follows"))) and not entry.matches(finding(("follows", "none")))
    path.write_text('[[known]]\nid = "x"\nreason = "r"\ncase = "c.toml"\nsides = 3\n')
    with pytest.raises(CaseError) as info:
        load_baseline(path)
    assert "known[0].sides" in str(info.value)


def test_every_match_field_takes_a_list_and_role_matches_the_subjects_kind(tmp_path: Path):
    from harness.judging.finding import Finding

    path = tmp_path / "baseline.toml"
    path.write_text('[[known]]\nid = "x"\nreason = "r"\ncase = "c.toml"\nmethod = ["copy", "save:*"]\n'
                    'op = ["load", "write"]\nrole = "buffer"\n')
    entry = load_baseline(path).entries[0]

    def finding(method, op, role):
        return Finding(kind="framework", aspect="verdict", targets=("candle:cpu", "torch:cpu"),
                       op_label=op, method=method, sides=("none", "follows"), role=role)

    assert entry.matches(finding("save:file", "load", "buffer")) and entry.matches(finding("copy", "write", "buffer"))
    assert not entry.matches(finding("save:file", "load", "param")) and not entry.matches(finding("copy", "step", "buffer"))
    assert not entry.matches(finding("clone", "write", "buffer")) and not entry.matches(finding("copy", "write", None))
    path.write_text('[[known]]\nid = "x"\nreason = "r"\ncase = "c.toml"\nrole = []\n')
    with pytest.raises(CaseError) as info:
        load_baseline(path)
    assert "known[0].role" in str(info.value)
