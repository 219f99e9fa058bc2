"""The triage store across runs (``harness.triage``) and ``aliasfuzz triage``. The store's logic
is driven with finding records built here; the command line end to end with campaigns of the
fake target (a TEST DOUBLE with a planted divergence, ``tests/fakes``), which stands in for no
framework."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from harness.judging.finding import FindingRecord
from harness.triage.store import TriageError, TriageStore
from tests.conftest import CASES, run_cli
from tests.support.fake_targets import fake_probe_dir


def _record(signature: str, status: str = "new", baseline: str | None = None, version: str = "0.11.1"):
    return FindingRecord.from_json(
        {
            "signature": signature,
            "kind": "value",
            "status": status,
            "baseline": baseline,
            "sentence": f"{signature} diverges",
            "versions": {"candle:cpu": {"candle": version}},
        }
    )


def test_a_cause_is_counted_once_per_run_and_states_follow_the_runs(tmp_path):
    with TriageStore(tmp_path / "t.sqlite") as db:
        run1 = [_record("sig-a"), _record("sig-k1", "known", "burn-values"), _record("sig-k2", "known", "burn-values")]
        first = db.record_run("run1", "2026-01-01T00:00:00Z", 100, run1)
        assert first.first_seen == ("burn-values", "sig-a") and first.previous_run is None
        assert first.first_seen_known == ("burn-values",) and first.first_seen_new == ("sig-a",)
        assert db.record_run("run1", "2026-01-01T00:00:00Z", 100, run1) == first  # twice changes nothing
        second = db.record_run("run2", "2026-01-02T00:00:00Z", 50, [_record("sig-b", "flaky")])
        assert second == type(second)(("sig-b",), ("burn-values", "sig-a"), (), "run1")
        causes = {c.id: c for c in db.causes()}
    assert causes["burn-values"].baseline and causes["burn-values"].state == "known"
    assert causes["burn-values"].findings == 2 and causes["burn-values"].runs == 1
    assert causes["sig-a"].state == "new" and causes["sig-b"].state == "flaky"
    assert causes["sig-a"].versions == {"candle:cpu": {"candle": "0.11.1"}}
    assert list(causes)[0] == "sig-b"  # the most recently seen first


def test_only_a_cause_outside_the_baseline_seen_for_the_first_time_is_new_since_the_run_before(tmp_path):
    """A short run reaches different documented design differences each time; reaching one for
    the first time is listed, but the run says "nothing new" unless a cause outside the baseline
    shows for the first time."""
    from types import SimpleNamespace

    from harness.reporting.views import since_last_run

    def said(delta) -> str:
        folder = tmp_path / delta.previous_run.replace("1", "2")
        folder.mkdir(exist_ok=True)
        (folder / "triage.json").write_text(json.dumps(delta.to_json()))
        return since_last_run(SimpleNamespace(root=folder))

    with TriageStore(tmp_path / "t.sqlite") as db:
        db.record_run("run1", "2026-01-01T00:00:00Z", 10, [_record("sig-a"), _record("sig-k", "known", "burn-values")])
        known_only = db.record_run(
            "run2", "2026-01-02T00:00:00Z", 10, [_record("sig-a"), _record("sig-t", "known", "torch-clone")]
        )
        assert said(known_only) == "nothing new since run1; 1 known first reached (torch-clone); 1 gone (burn-values)"
        with_new = db.record_run("run3", "2026-01-03T00:00:00Z", 10, [_record("sig-a"), _record("sig-b")])
    assert with_new.first_seen_new == ("sig-b",) and with_new.previous_run == "run2"
    assert said(with_new) == "1 new first seen (sig-b); 1 gone (torch-clone)"


def test_a_persons_state_is_kept_and_a_fixed_cause_that_shows_again_regressed(tmp_path):
    with TriageStore(tmp_path / "t.sqlite") as db:
        db.record_run("run1", "2026-01-01T00:00:00Z", 10, [_record("sig-a"), _record("sig-b")])
        db.set_state("sig-a", "reported", "https://github.com/huggingface/candle/issues/1")
        db.set_state("sig-b", "fixed-in", "0.11.2")
        delta = db.record_run(
            "run2", "2026-01-02T00:00:00Z", 10, [_record("sig-a"), _record("sig-b", version="0.11.3")]
        )
        states = {c.id: c.state_text for c in db.causes()}
    assert delta.regressed == ("sig-b",)
    assert states == {
        "sig-a": "reported https://github.com/huggingface/candle/issues/1",
        "sig-b": "regressed-in candle 0.11.3",
    }


@pytest.mark.parametrize(
    "args,message",
    [
        (("sig-a", "closed"), "unknown state 'closed'"),
        (("sig-a", "reported"), "needs a url"),
        (("sig-a", "wontfix", "because"), "takes no argument"),
        (("sig-a", "duplicate-of", "sig-a"), "duplicate of itself"),
        (("nope", "wontfix"), "no root cause 'nope'"),
    ],
)
def test_a_bad_state_is_one_line_naming_the_store(tmp_path, args, message):
    with TriageStore(tmp_path / "t.sqlite") as db:
        db.record_run("run1", "2026-01-01T00:00:00Z", 10, [_record("sig-a")])
        with pytest.raises(TriageError) as e:
            db.set_state(*args)
    assert message in str(e.value) and str(tmp_path / "t.sqlite") in str(e.value)


def test_a_file_that_is_no_store_is_refused(tmp_path):
    bad = tmp_path / "t.sqlite"
    bad.write_text("not a database\n" * 100)
    with pytest.raises(TriageError) as e:
        TriageStore(bad)
    assert "not a triage store" in str(e.value)


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


def test_gone_is_against_the_last_run_of_the_same_kind_and_first_seen_against_every_run(tmp_path):
    """Runs of several profiles or target sets share one store: what a run of another kind showed
    is never "gone", and a cause it showed first is not "first seen" again."""
    default, lazy = "default on candle:cpu,torch:cpu", "lazy on candle:cpu,torch:cpu"
    with TriageStore(tmp_path / "t.sqlite") as db:
        db.record_run("run1", "2026-01-01T00:00:00Z", 10, [_record("sig-a"), _record("sig-b")], kind=default)
        other = db.record_run("run2", "2026-01-02T00:00:00Z", 10, [_record("sig-c")], kind=lazy)
        assert other.previous_run is None and other.disappeared == ()  # no lazy run before it
        again = db.record_run("run3", "2026-01-03T00:00:00Z", 10, [_record("sig-a"), _record("sig-c")], kind=default)
    assert again.previous_run == "run1" and again.disappeared == ("sig-b",)
    assert again.first_seen == ()  # sig-c was first seen by the lazy run


def test_a_store_written_before_runs_had_a_kind_is_opened_and_its_runs_kept(tmp_path):
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as old:
        old.execute("CREATE TABLE runs (run TEXT PRIMARY KEY, started TEXT NOT NULL, programs INTEGER NOT NULL)")
        old.execute("INSERT INTO runs VALUES ('run0', '2025-12-31T00:00:00Z', 5)")
    with TriageStore(path) as db:
        delta = db.record_run("run1", "2026-01-01T00:00:00Z", 10, [_record("sig-a")], kind="default on torch:cpu")
        assert delta.previous_run is None  # run0's kind is unknown
        assert db.db.execute("SELECT run, kind FROM runs ORDER BY run").fetchall() == [
            ("run0", None),
            ("run1", "default on torch:cpu"),
        ]
