"""Confirm before report: a new finding's minimized case is re-run on freshly started probe
processes (``Engine.confirm``); one that does not show every time is ``flaky``, reported in its own
section and not a failure. On the TEST DOUBLE fake probe (tests/fakes/fake_probe.py), whose
``--planted-after N`` makes its planted bug depend on what the process ran before.

The tests of this subject that run in-process are in tests/unit/fuzzing/test_confirm.py.
"""

from __future__ import annotations

import json

from harness.fuzzing.baseline import Baseline
from harness.fuzzing.engine import Engine
from harness.targets.runner import Runner
from tests.conftest import run_cli
from tests.fakes.targets import fake_target
from tests.support.fake_targets import PLANTED, fake_probe_dir


def _record(*planted_flags: str, confirm_runs: int = 3):
    ref, planted = fake_target("ref"), fake_target("planted", *planted_flags)
    runner = Runner([ref, planted])
    try:
        engine = Engine(runner, Baseline([]), shrink_time_s=30, confirm_runs=confirm_runs)
        runner.run_one(PLANTED)  # a first program: the one `--planted-after 1` serves clean
        recorded = []
        engine.process([PLANTED], recorded.append)
        return recorded, planted.process.stats.starts
    finally:
        runner.close()


def test_a_finding_that_shows_on_fresh_processes_is_new_and_confirmed():
    recorded, starts = _record()
    assert recorded and all(r.status == "new" and r.confirmed == (3, 3) for r in recorded), recorded
    # each finding's confirmation started the planted process afresh three times
    assert starts == 1 + 3 * len(recorded)


def test_a_finding_that_needs_an_earlier_program_is_flaky():
    recorded, _ = _record("--planted-after", "1")
    # shown in the campaign and while shrinking (the process had run a program before), never
    # on a fresh process's first program
    assert recorded and all(r.status == "flaky" and r.confirmed == (0, 3) for r in recorded), recorded


def test_no_confirmation_runs_leave_a_finding_new_and_unconfirmed():
    recorded, starts = _record(confirm_runs=0)
    assert recorded and all(r.status == "new" and r.confirmed is None for r in recorded)
    assert starts == 1


def test_a_campaign_reports_flaky_findings_apart_and_does_not_fail_on_them(tmp_path):
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
        "--out",
        str(out),
        env=fake_probe_dir(tmp_path, "--planted-after", "1"),
    )
    assert r.returncode == 0, r.stdout + r.stderr  # nothing new: the flaky findings are no failure
    findings = json.loads((out / "findings.json").read_text())
    flaky = [f for f in findings if f["status"] == "flaky"]
    assert flaky and all(f["confirmed"] == 0 and f["confirm_runs"] == 3 for f in flaky)
    assert not [f for f in findings if f["status"] == "new"]
    md = (out / "report.md").read_text()
    assert f"## Flaky findings ({len(flaky)})" in md and "shown in 0 of 3 runs on fresh probe processes" in md
    assert f"{len(flaky)} flaky" in md
    assert 'id="flaky"' in (out / "report.html").read_text()
    # the same campaign on a fake whose bug needs no earlier program: new, confirmed 3 of 3
    out = tmp_path / "stable"
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
        "--out",
        str(out),
        "--no-report",
        env=fake_probe_dir(tmp_path),
    )
    assert r.returncode == 1, r.stdout + r.stderr
    findings = json.loads((out / "findings.json").read_text())
    assert findings and all(f["status"] == "new" and f["confirmed"] == 3 for f in findings)
