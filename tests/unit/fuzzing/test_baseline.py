"""The known-divergence baseline: well-formed, and every entry backed by a case that shows it on
the real targets.

The tests here run in this process, as the
unit tier requires; those that need the real frameworks are in tests/probes/test_baseline.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.case.ir import CaseError
from harness.fuzzing.baseline import load_baseline
from harness.judging.finding import Finding
from tests.conftest import ROOT
from tests.support.baseline import ALSO_SHOWS, BASELINE, UNEXPLAINED, stem


def test_every_entry_has_a_reason_reference_and_existing_case():
    assert len(BASELINE.entries) >= 8
    for e in BASELINE.entries:
        assert e.reason and e.upstream, e.id
        assert (ROOT / e.case).exists(), f"{e.id}: {e.case} does not exist"


def test_the_reviewed_lists_name_baseline_cases_and_entries():
    stems = {stem(e.case) for e in BASELINE.entries}
    ids = {e.id for e in BASELINE.entries}
    assert set(ALSO_SHOWS) <= stems and set(UNEXPLAINED) <= stems
    assert set().union(*ALSO_SHOWS.values()) <= ids


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

    path = tmp_path / "baseline.toml"
    path.write_text(
        '[[known]]\nid = "x"\nreason = "r"\ncase = "c.toml"\nmethod = "copy"\n'
        'sides = ["*keeps~*follows", "none~follows"]\n'
    )
    entry = load_baseline(path).entries[0]

    def finding(sides):
        return Finding(
            kind="framework",
            aspect="verdict",
            targets=("candle:cpu", "torch:cpu"),
            op_label="write",
            method="copy",
            sides=sides,
        )

    assert entry.matches(finding(("rev keeps", "rev follows"))) and entry.matches(finding(("none", "follows")))
    assert not entry.matches(finding(("other", "follows"))) and not entry.matches(finding(("follows", "none")))
    path.write_text('[[known]]\nid = "x"\nreason = "r"\ncase = "c.toml"\nsides = 3\n')
    with pytest.raises(CaseError) as info:
        load_baseline(path)
    assert "known[0].sides" in str(info.value)


def test_every_match_field_takes_a_list_and_role_matches_the_subjects_kind(tmp_path: Path):

    path = tmp_path / "baseline.toml"
    path.write_text(
        '[[known]]\nid = "x"\nreason = "r"\ncase = "c.toml"\nmethod = ["copy", "save:*"]\n'
        'op = ["load", "write"]\nrole = "buffer"\n'
    )
    entry = load_baseline(path).entries[0]

    def finding(method, op, role):
        return Finding(
            kind="framework",
            aspect="verdict",
            targets=("candle:cpu", "torch:cpu"),
            op_label=op,
            method=method,
            sides=("none", "follows"),
            role=role,
        )

    assert entry.matches(finding("save:file", "load", "buffer")) and entry.matches(finding("copy", "write", "buffer"))
    assert not entry.matches(finding("save:file", "load", "param")) and not entry.matches(
        finding("copy", "step", "buffer")
    )
    assert not entry.matches(finding("clone", "write", "buffer")) and not entry.matches(finding("copy", "write", None))
    path.write_text('[[known]]\nid = "x"\nreason = "r"\ncase = "c.toml"\nrole = []\n')
    with pytest.raises(CaseError) as info:
        load_baseline(path)
    assert "known[0].role" in str(info.value)
