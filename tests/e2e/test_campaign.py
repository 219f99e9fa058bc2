"""Campaigns through the real command line: kill -9 and resume, exit statuses, JUnit, seeds.

Findings come fast from the TEST DOUBLE fake probe (tests/fakes/fake_probe.py, which has one
planted aliasing bug on its ``planted`` device), put in place of the candle probe binary with
``ALIASFUZZ_PROBE_DIR``: ``--targets candle`` then means ``candle:ref`` and ``candle:planted``,
both fakes. The harness code under test is the real one.

The tests of this subject that run in-process are in tests/unit/fuzzing/test_campaign.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.conftest import PY, ROOT, run_cli
from tests.support.fake_targets import fake_probe_dir


def journal_signatures(out: Path) -> list[str]:
    p = out / "findings.jsonl"
    if not p.exists():
        return []
    sigs = []
    for line in p.read_text().splitlines():
        try:
            sigs.append(json.loads(line)["signature"])
        except ValueError:
            pass
    return sigs


def test_sigkill_then_resume_keeps_every_finding(tmp_path):
    env = {**os.environ, **fake_probe_dir(tmp_path, "--slow-ms", "20")}
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            PY,
            "-m",
            "harness.cli",
            "fuzz",
            "--targets",
            "candle",
            "--profile",
            "quick",
            "--seed",
            "7",
            "--max-programs",
            "100000",
            "--chunk-size",
            "8",
            "--shrink-time",
            "10",
            "--out",
            str(out),
            "--no-report",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        # campaign.json is first written when the first chunk ends (campaign.py): wait for it
        # too, or a resume has nothing to resume.
        while (
            (len(journal_signatures(out)) < 2 or not (out / "campaign.json").exists())
            and time.monotonic() < deadline
            and proc.poll() is None
        ):
            time.sleep(0.1)
        assert proc.poll() is None, "the campaign ended before it could be killed"
        before = journal_signatures(out)
        assert before, "no finding within 120s"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the campaign and its probes, mid-run
        proc.wait(timeout=30)
    before = journal_signatures(out)  # whatever reached the journal before the kill
    r = run_cli("fuzz", "--resume", str(out), "--max-programs", "16", "--no-report", env=fake_probe_dir(tmp_path))
    assert r.returncode in (0, 1), r.stderr
    after = json.loads((out / "findings.json").read_text())
    assert set(before) <= {f["signature"] for f in after}
    for f in after:  # everything a finding points to exists
        assert (out / f["case"]).exists() and (out / f["original_case"]).exists()
    state = json.loads((out / "campaign.json").read_text())
    assert state["runs"][-1]["resumed"] is True and state["config"]["seed"] == 7


def test_exit_statuses_and_junit(tmp_path):
    env = fake_probe_dir(tmp_path)
    # 0: nothing new (a single target cannot diverge)
    r = run_cli(
        "fuzz",
        "--targets",
        "candle:ref",
        "--max-programs",
        "16",
        "--seed",
        "1",
        "--profile",
        "quick",
        "--out",
        str(tmp_path / "zero"),
        "--no-report",
        env=env,
    )
    assert r.returncode == 0, r.stderr
    # 1: new findings, with JUnit
    junit = tmp_path / "junit.xml"
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
        str(tmp_path / "one"),
        "--junit",
        str(junit),
        env=env,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    findings = json.loads((tmp_path / "one" / "findings.json").read_text())
    # the summary line separates shrinking from running programs
    m = re.search(
        r"(\d+) programs in ([\d.]+)s \([\d.]+/s; ([\d.]+)s of it shrinking (\d+) findings, "
        r"([\d.]+)/s without\)",
        r.stdout,
    )
    assert m, r.stdout
    programs, total, shrinking, count, rate = (float(g) for g in m.groups())
    assert count == len(findings) and abs(shrinking - sum(f["shrink_seconds"] for f in findings)) < 0.1
    assert 0 < shrinking < total
    running = total - shrinking  # both printed to 0.05 s: allow for the rounding
    assert programs / (running + 0.1) * 0.95 <= rate <= programs / max(running - 0.1, 1e-3) * 1.05
    root = ET.parse(junit).getroot()
    cases = root.findall(".//testcase")
    assert {c.get("name") for c in cases} == {f["signature"] for f in findings}
    assert len(root.findall(".//failure")) == sum(f["status"] == "new" for f in findings) > 0
    assert (tmp_path / "one" / "report.html").exists() and (tmp_path / "one" / "report.md").exists()
    # 2: bad input, one line on stderr
    for args in (["--budget", "soon"], ["--targets", "nosuch:dev", "--max-programs", "1"], []):
        r = run_cli("fuzz", *args, "--out", str(tmp_path / "two"), env=env)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_same_seed_same_programs(tmp_path):
    from harness.fuzzing.engine import chunk_seed
    from harness.fuzzing.generation import generate

    a = [p.key() for p in generate(16, chunk_seed(99, 3), "quick")]
    b = [p.key() for p in generate(16, chunk_seed(99, 3), "quick")]
    assert a == b
    env = fake_probe_dir(tmp_path)
    runs = []
    for name in ("a", "b"):
        out = tmp_path / name
        r = run_cli(
            "fuzz",
            "--targets",
            "candle",
            "--max-programs",
            "64",
            "--seed",
            "5",
            "--profile",
            "quick",
            "--shrink-time",
            "10",
            "--out",
            str(out),
            "--no-report",
            env=env,
        )
        assert r.returncode in (0, 1), r.stderr
        findings = json.loads((out / "findings.json").read_text())
        runs.append([(f["signature"], (out / f["original_case"]).read_text()) for f in findings])
        assert json.loads((out / "campaign.json").read_text())["programs"] == 64
    assert runs[0] == runs[1]


def test_findings_left_when_the_budget_ends_are_shrunk_in_the_grace(tmp_path):
    # A corpus replayed under a zero budget: every finding comes after the budget's end. Without
    # a grace it is recorded unshrunk (complete: false); with one it is shrunk to completion.
    env = fake_probe_dir(tmp_path)
    db = tmp_path / "corpus"
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
        "--db",
        str(db),
        "--out",
        str(tmp_path / "fill"),
        "--no-report",
        env=env,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    found = {}
    for grace in ("0", "60"):
        out = tmp_path / f"grace{grace}"
        r = run_cli(
            "fuzz",
            "--targets",
            "candle",
            "--budget",
            "0s",
            "--shrink-grace",
            grace,
            "--seed",
            "2",
            "--shrink-time",
            "10",
            "--db",
            str(db),
            "--out",
            str(out),
            "--no-report",
            env=env,
        )
        assert r.returncode in (0, 1), r.stdout + r.stderr
        assert json.loads((out / "campaign.json").read_text())["config"]["shrink_grace_s"] == float(grace)
        found[grace] = json.loads((out / "findings.json").read_text())
    assert found["0"] and {f["signature"] for f in found["0"]} == {f["signature"] for f in found["60"]}
    assert all(f["shrink_complete"] is False and f["shrink_runs"] == 0 for f in found["0"])
    assert all(f["shrink_complete"] is True for f in found["60"])
    # a negative grace is a usage error, on one line
    r = run_cli("fuzz", "--budget", "1s", "--shrink-grace", "-1", "--out", str(tmp_path / "bad"), env=env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_known_findings_are_reported_as_found_and_shrunk_only_when_asked(tmp_path):
    # A baseline that knows the fake's planted identity finding; its verdict findings stay new.
    baseline = tmp_path / "baseline.toml"
    baseline.write_text(
        '[[known]]\nid = "planted-identity"\nreason = "test"\naspect = "identity"\ncase = "tests/cases/planted.toml"\n'
    )
    runs = {}
    for flag in ((), ("--shrink-known",)):
        out = tmp_path / ("known-shrunk" if flag else "default")
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
            str(baseline),
            "--out",
            str(out),
            *flag,
            env=fake_probe_dir(tmp_path),
        )
        assert r.returncode == 1, r.stdout + r.stderr  # the verdict findings are new
        runs[flag] = (json.loads((out / "findings.json").read_text()), (out / "report.md").read_text())
    findings, md = runs[()]
    known = [f for f in findings if f["status"] == "known"]
    assert known and all(f["baseline"] == "planted-identity" for f in known)
    for f in known:
        assert f["shrink_seconds"] is None and f["ops_after"] == f["ops_before"]
        assert f["baseline_case"] == "tests/cases/planted.toml"
    assert all(f["shrink_seconds"] is not None for f in findings if f["status"] == "new")
    assert "not shrunk" in md and "tests/cases/planted.toml" in md
    findings, md = runs[("--shrink-known",)]
    assert all(f["shrink_seconds"] is not None for f in findings)
    assert "not shrunk" not in md


def test_the_campaign_keeps_what_each_target_ran_and_what_it_cost_and_the_report_shows_it(tmp_path):
    # The fake probe (a test double of the harness's own logic) says each program took 1 us.
    out = tmp_path / "run"
    args = ("--targets", "candle", "--max-programs", "48", "--seed", "3", "--profile", "quick", "--out", str(out))
    r = run_cli("fuzz", *args, "--shrink-time", "5", env=fake_probe_dir(tmp_path))
    assert r.returncode in (0, 1), r.stderr
    state = json.loads((out / "campaign.json").read_text())
    ran = state["programs"] - state.get("repeats_skipped", 0)
    costs = state["target_costs"]
    assert set(costs) == set(state["targets"]) and len(costs) == 2, costs
    for cost in costs.values():
        assert cost["programs"] == ran > 0 and abs(cost["probe_s"] - ran * 1e-6) < 1e-9, (cost, ran)
    report = (out / "report.md").read_text()
    for tid in costs:
        assert re.search(rf"\| {re.escape(tid)} \| [^|]+ \| {ran} \| 0\\?\.001 ms \|", report), report
    # A resumed campaign adds to the figures.
    r = run_cli("fuzz", "--resume", str(out), "--max-programs", "64", "--no-report", env=fake_probe_dir(tmp_path))
    assert r.returncode in (0, 1), r.stderr
    state = json.loads((out / "campaign.json").read_text())
    more = state["programs"] - state.get("repeats_skipped", 0)
    assert more > ran and all(c["programs"] == more for c in state["target_costs"].values())
