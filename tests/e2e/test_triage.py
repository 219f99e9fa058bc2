"""The triage store across runs (``harness.triage``) and ``aliasfuzz triage``. The store's logic
is driven with finding records built here; the command line end to end with campaigns of the
fake target (a TEST DOUBLE with a planted divergence, ``tests/fakes``), which stands in for no
framework.

The tests of this subject that run in-process are in tests/unit/triage/test_triage.py.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.conftest import CASES, run_cli
from tests.support.fake_targets import fake_probe_dir


def test_campaigns_record_themselves_and_the_report_says_what_changed(tmp_path):
    env = fake_probe_dir(tmp_path)
    reports = tmp_path / "reports"
    for name in ("run1", "run2"):
        r = run_cli(
            "fuzz",
            "--targets",
            "candle",
            "--max-programs",
            "32",
            "--seed",
            "1",
            "--profile",
            "quick",
            "--shrink-time",
            "5",
            "--confirm",
            "1",
            "--out",
            str(reports / name),
            env=env,
        )
        assert r.returncode == 1, r.stdout + r.stderr
        assert "triage:" in r.stdout
    store = reports / "triage.sqlite"
    kinds = sqlite3.connect(store).execute("SELECT kind FROM runs").fetchall()
    assert len(kinds) == 2 and kinds[0] == kinds[1] and kinds[0][0].startswith("quick on candle"), kinds
    delta = json.loads((reports / "run2" / "triage.json").read_text())
    assert delta["previous_run"] == str((reports / "run1").resolve()) and delta["first_seen"] == []
    # The same seed finds the same causes: the second report says nothing is new since the first.
    assert "| since the run before | nothing new since run1 |" in (reports / "run2" / "report.md").read_text()
    assert " new first seen (" in (reports / "run1" / "report.md").read_text()
    assert "(no run recorded before it)" in (reports / "run1" / "report.md").read_text()
    listed = run_cli("triage", "--store", str(store))
    assert listed.returncode == 0 and "root causes" in listed.stdout
    cause = listed.stdout.splitlines()[1].split()[-1]
    assert run_cli("triage", "--store", str(store), "--set", cause, "wontfix").returncode == 0
    assert "wontfix" in run_cli("triage", "--store", str(store)).stdout
    bad = run_cli("triage", "--store", str(store), "--set", cause, "reported")
    assert bad.returncode == 2 and "needs a url" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_recheck_says_per_root_cause_whether_it_still_shows(tmp_path):
    env = fake_probe_dir(tmp_path)
    reports = tmp_path / "reports"
    r = run_cli(
        "fuzz",
        "--targets",
        "candle",
        "--max-programs",
        "32",
        "--seed",
        "1",
        "--profile",
        "quick",
        "--shrink-time",
        "5",
        "--confirm",
        "1",
        "--out",
        str(reports / "run1"),
        env=env,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    # The fake's planted device shares a clone's buffer: the clone case shows a divergence of the
    # framework with itself; the case without a clone shows none.
    quiet = tmp_path / "alias.toml"
    quiet.write_text(
        'format = "aliasfuzz-case/1"\n[tensors]\nb = { kind = "buffer", value = [1.0] }\n'
        '[[ops]]\nop = "snapshot"\nname = "s"\nof = "b"\nmethod = "alias"\n'
        '[[ops]]\nop = "fill"\ntarget = "b"\nvalue = 2.0\n'
    )
    baseline = tmp_path / "baseline.toml"
    baseline.write_text(
        '[[known]]\nid = "planted-clone"\nframeworks = ["candle"]\nmethod = "clone"\nreason = "the planted bug"\n'
        f'case = "{CASES / "candle_clone_shares_storage.toml"}"\n\n'
        '[[known]]\nid = "gone"\nframeworks = ["candle"]\nmethod = "alias"\nreason = "shows nothing"\n'
        f'case = "{quiet}"\n'
    )
    store = reports / "triage.sqlite"
    out = run_cli("recheck", "--store", str(store), "--targets", "candle", "--baseline", str(baseline), env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    results = {
        line.split()[-1]: line[:18].strip() for line in out.stdout.splitlines() if not line.startswith("aliasfuzz")
    }
    assert results["planted-clone"] == "still shows", out.stdout
    assert results["gone"] == "no longer shows", out.stdout
    stored = [c for c in results if c not in ("planted-clone", "gone")]
    assert stored and all(results[c] == "still shows" for c in stored), out.stdout
    n = sqlite3.connect(store).execute("SELECT COUNT(*) FROM rechecks").fetchone()[0]
    assert n == len(results)


def test_recheck_fails_on_change_only_when_a_result_changed_since_the_last_recheck(tmp_path):
    # The TEST DOUBLE fake probe stands in for the candle binary: its planted device shares a
    # clone's buffer, so the clone case shows; the alias case shows nothing.
    env = fake_probe_dir(tmp_path)
    quiet = tmp_path / "alias.toml"
    quiet.write_text(
        'format = "aliasfuzz-case/1"\n[tensors]\nb = { kind = "buffer", value = [1.0] }\n'
        '[[ops]]\nop = "snapshot"\nname = "s"\nof = "b"\nmethod = "alias"\n'
        '[[ops]]\nop = "fill"\ntarget = "b"\nvalue = 2.0\n'
    )
    baseline = tmp_path / "baseline.toml"
    store = tmp_path / "triage.sqlite"

    def recheck(case_of_gone: Path):
        baseline.write_text(
            f'[[known]]\nid = "gone"\nframeworks = ["candle"]\nmethod = "clone"\n'
            f'reason = "r"\ncase = "{case_of_gone}"\n'
        )
        return run_cli(
            "recheck",
            "--store",
            str(store),
            "--targets",
            "candle",
            "--baseline",
            str(baseline),
            "--fail-on-change",
            env=env,
        )

    # First recheck: "gone" does not show -> a change (a baseline case that shows nothing).
    first = recheck(quiet)
    assert first.returncode == 1, first.stdout + first.stderr
    assert (
        "aliasfuzz recheck: 1 changed since the last recheck\n"
        "aliasfuzz recheck: changed: gone (first recheck -> no longer shows)"
    ) in first.stdout
    # The same results again: nothing changed.
    again = recheck(quiet)
    assert again.returncode == 0 and "0 changed since the last recheck" in again.stdout, again.stdout
    # Its case shows the divergence again: a change the other way (it came back).
    back = recheck(CASES / "candle_clone_shares_storage.toml")
    assert back.returncode == 1 and "changed: gone (no longer shows -> still shows)" in back.stdout, back.stdout


def test_the_known_causes_table_says_when_the_store_first_saw_each(tmp_path):
    # Two runs with a baseline that knows the fake's planted identity finding (TEST DOUBLE): the
    # second run's known-causes table gives the first run's start as the cause's first sighting.
    env = fake_probe_dir(tmp_path)
    baseline = tmp_path / "baseline.toml"
    baseline.write_text(
        '[[known]]\nid = "planted-identity"\nreason = "test"\naspect = "identity"\ncase = "tests/cases/planted.toml"\n'
    )
    reports = tmp_path / "reports"
    for name in ("run1", "run2"):
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
            "5",
            "--confirm",
            "1",
            "--baseline",
            str(baseline),
            "--out",
            str(reports / name),
            env=env,
        )
        assert r.returncode == 1, r.stdout + r.stderr
    first = (
        sqlite3.connect(reports / "triage.sqlite")
        .execute("SELECT started FROM runs ORDER BY started LIMIT 1")
        .fetchone()[0]
    )
    when = first[:16].replace("T", " ") + " UTC"
    md = (reports / "run2" / "report.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| `planted-identity`"))
    assert f"| {when} |" in row, row
    assert "| baseline entry | findings | found after | first seen |" in md
    assert f"<td>{when}</td>" in (reports / "run2" / "report.html").read_text()
