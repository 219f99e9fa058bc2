"""Baseline entries carry the framework versions they were observed with (issue #17 item 2): an
entry explains a finding only where the installed versions lie in its ranges; outside them the
finding is `new`, and the report, `aliasfuzz repro` and `aliasfuzz recheck` say which entry and why.

The campaign test uses the TEST DOUBLE fake probe (standing in for the candle binary, reporting a
chosen candle-core version); repro and recheck run the real torch and candle targets.

The tests of this subject that run in-process are in tests/unit/fuzzing/test_baseline_versions.py.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from tests.support.fake_targets import fake_probe_dir


def _planted_baseline(tmp_path, candle_range: str):
    path = tmp_path / f"baseline-{candle_range}.toml"
    path.write_text(
        '[[known]]\nid = "planted-identity"\nreason = "test"\naspect = "identity"\n'
        f'case = "tests/cases/planted.toml"\nversions = {{ candle = "{candle_range}" }}\n'
    )
    return path


@pytest.mark.parametrize("candle_range, known", [("0.11.1", False), ("0.11.1..", True), ("0.12.0", True)])
def test_a_campaign_finding_outside_its_entrys_versions_is_new_and_says_why(tmp_path, candle_range, known):
    out = tmp_path / "run"
    r = run_cli(
        "fuzz",
        "--targets",
        "candle",
        "--max-programs",
        "256",
        "--seed",
        "1",
        "--profile",
        "quick",
        "--shrink-time",
        "10",
        "--baseline",
        str(_planted_baseline(tmp_path, candle_range)),
        "--out",
        str(out),
        env=fake_probe_dir(tmp_path, "--version", "candle-core=0.12.0"),
    )
    assert r.returncode == 1, r.stdout + r.stderr  # the fake's verdict findings are new either way
    findings = json.loads((out / "findings.json").read_text())
    identity = [f for f in findings if f["aspect"] == "identity"]
    assert identity
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    if known:
        assert all(f["status"] == "known" and "outside_baseline" not in f for f in identity)
        assert "outside its baseline's versions" not in md
    else:
        why = "`planted-identity`: candle 0.12.0 is outside 0.11.1"
        assert all(f["status"] == "new" and f["outside_baseline"] == why for f in identity), identity
        assert f"**outside its baseline's versions**: baseline entry {why}" in md
        assert "outside its baseline&#x27;s versions" in html or "outside its baseline's versions" in html


def _real_baseline(tmp_path, candle_range: str):
    path = tmp_path / "baseline.toml"
    path.write_text(
        '[[known]]\nid = "candle-clone-shares-storage"\nframeworks = ["candle", "torch"]\n'
        'method = "clone"\nreason = "r"\ncase = "tests/cases/candle_clone_shares_storage.toml"\n'
        f'versions = {{ candle = "{candle_range}", torch = "2.0.0.." }}\n'
    )
    return path


def test_repro_names_the_entry_whose_versions_leave_out_the_installed_candle(tmp_path):
    case = "tests/cases/candle_clone_shares_storage.toml"
    # repro exits 1 on any divergence, known or new: what it prints tells them apart.
    inside = run_cli(
        "repro", case, "--targets", "torch:cpu,candle:cpu", "--baseline", str(_real_baseline(tmp_path, "0.9.0.."))
    )
    assert inside.returncode == 1 and "known (candle-clone-shares-storage)" in inside.stdout, (
        inside.stdout + inside.stderr
    )
    assert "new" not in inside.stdout
    outside = run_cli(
        "repro", case, "--targets", "torch:cpu,candle:cpu", "--baseline", str(_real_baseline(tmp_path, "0.12.0.."))
    )
    assert outside.returncode == 1, outside.stdout + outside.stderr
    text = " ".join(outside.stdout.split())
    assert "new (baseline `candle-clone-shares-storage`: candle 0.11.1 is outside 0.12.0..: recheck" in text, text
    assert "known (" not in text
    doc = json.loads(
        run_cli(
            "repro",
            case,
            "--json",
            "--targets",
            "torch:cpu,candle:cpu",
            "--baseline",
            str(_real_baseline(tmp_path, "0.12.0..")),
        ).stdout
    )
    divergences = doc[0]["divergences"] if isinstance(doc, list) else doc["divergences"]
    assert divergences and all(
        d["status"] == "new"
        and d["baseline"] is None
        and d["outside_baseline"] == "`candle-clone-shares-storage`: candle 0.11.1 is outside 0.12.0.."
        for d in divergences
    )


def test_recheck_says_an_entry_still_shows_outside_its_versions(tmp_path):
    r = run_cli(
        "recheck",
        "--targets",
        "torch:cpu,candle:cpu",
        "--store",
        str(tmp_path / "t.sqlite"),
        "--baseline",
        str(_real_baseline(tmp_path, "..0.10.0")),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(x for x in r.stdout.splitlines() if "candle-clone-shares-storage" in x)
    assert line.startswith("still shows") and "(candle 0.11.1 is outside ..0.10.0: widen the entry's versions)" in line
