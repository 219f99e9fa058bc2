"""Baseline entries carry the framework versions they were observed with (issue #17 item 2): an
entry explains a finding only where the installed versions lie in its ranges; outside them the
finding is `new`, and the report, `aliasfuzz repro` and `aliasfuzz recheck` say which entry and why.

The campaign test uses the TEST DOUBLE fake probe (standing in for the candle binary, reporting a
chosen candle-core version); repro and recheck run the real torch and candle targets.

The tests here run in this process, as the
unit tier requires; those that need real processes are in tests/e2e/test_baseline_versions.py.
"""

from __future__ import annotations

import pytest

from harness.fuzzing.baseline import BaselineError, load_baseline
from harness.versions import VersionRange, version_key


@pytest.mark.parametrize(
    "spec, inside, outside",
    [
        ("0.9.1..0.11.1", ["0.9.1", "0.10.0", "0.11.1"], ["0.9.0", "0.11.2", "0.12.0"]),
        ("0.22.1..", ["0.22.1", "0.23.0", "1.0.0"], ["0.22.0", "0.22.1-alpha.1"]),
        ("..2.5", ["2.4.9", "2.5", "2.5.0+cpu"], ["2.5.1", "3.0.0"]),
        ("2.15.0", ["2.15.0", "2.15.0+cu132"], ["2.15.1", "2.14.0", "2.15.0rc1"]),
    ],
)
def test_a_range_holds_its_versions_and_no_other(spec, inside, outside):
    r = VersionRange.parse(spec)
    assert all(v in r for v in inside) and not any(v in r for v in outside)
    assert VersionRange.parse(str(r)) == r


def test_versions_order_numerically_with_pre_releases_first():
    ordered = ["0.9.1", "0.10.0-alpha.1", "0.10.0-alpha.2", "0.10.0", "0.11.0", "2.15.0", "10.0"]
    assert sorted(reversed(ordered), key=version_key) == ordered


@pytest.mark.parametrize(
    "versions, field, says",
    [
        ('{ candle = "0.12.0..0.11.1" }', "known[0].versions.candle", "0.12.0 comes after 0.11.1"),
        ('{ cnadle = "0.11.1" }', "known[0].versions.cnadle", "unknown framework (known: torch, candle, burn)"),
        ("{ candle = 11 }", "known[0].versions.candle", "expected a version range"),
        ('{ candle = ".." }', "known[0].versions.candle", "names no version"),
        ('{ candle = "latest" }', "known[0].versions.candle", "is not a version"),
        ('"0.11.1"', "known[0].versions", "expected a table of framework"),
    ],
)
def test_a_bad_versions_field_is_one_line_naming_the_file_and_field(tmp_path, versions, field, says):
    path = tmp_path / "baseline.toml"
    path.write_text(f'[[known]]\nid = "x"\nreason = "r"\ncase = "tests/cases/planted.toml"\nversions = {versions}\n')
    with pytest.raises(BaselineError) as e:
        load_baseline(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and field in msg and says in msg, msg


def test_every_bundled_entry_names_the_versions_of_its_frameworks():
    for e in load_baseline().entries:
        named = {fw for fw, _ in e.versions}
        assert named and named >= set(e.frameworks), e.id
