"""Absent targets are never read as "fixed" (issue 40, fault 6): ``aliasfuzz recheck`` on fewer
targets than a cause needs says "cannot run" (shown, counted, never a change), and ``aliasfuzz
repro`` on one target says nothing was compared (exit status 2) instead of "No divergence". Real
processes: the real torch target, the bundled baseline and its cases."""

from __future__ import annotations

import json
import sqlite3

from harness.fuzzing.baseline import load_baseline
from harness.judging.finding import SELF_KINDS, FindingRecord
from harness.triage.store import TriageStore
from tests.conftest import CASES, ROOT, run_cli

#: A cause no baseline entry names, seen between candle and torch, with a case that shows it.
CANDLE_CAUSE = "framework|candle:cpu~torch:cpu|verdict|clone|write:whole|follows~keeps"


def _store_with_a_candle_cause(path):
    record = FindingRecord.from_json(
        {
            "signature": CANDLE_CAUSE,
            "kind": "framework",
            "status": "new",
            "sentence": "a candle cause",
            "targets": ["candle:cpu", "torch:cpu"],
            "versions": {"candle:cpu": {"candle": "0.11.1"}},
        }
    )
    with TriageStore(path) as db:
        db.record_run(
            "run1",
            "2026-01-01T00:00:00Z",
            10,
            [record],
            {CANDLE_CAUSE: str(CASES / "candle_clone_shares_storage.toml")},
        )
    return path


def _results(stdout: str) -> dict[str, tuple[str, str]]:
    """cause -> (result, note) from recheck's lines."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("aliasfuzz"):
            continue
        result, rest = line[:18].strip(), line[18:].strip()
        cause, _, note = rest.partition("  (")
        out[cause] = (result, note.rstrip(")"))
    return out


def test_recheck_on_torch_alone_says_every_cause_of_candle_or_burn_cannot_run(tmp_path):
    store = _store_with_a_candle_cause(tmp_path / "triage.sqlite")
    r = run_cli("recheck", "--store", str(store), "--targets", "torch:cpu", "--fail-on-change")
    assert r.returncode == 0, r.stdout + r.stderr
    results = _results(r.stdout)
    entries = load_baseline(None).entries
    assert set(results) == {e.id for e in entries} | {CANDLE_CAUSE}, r.stdout
    # A cause within one torch target (its frameworks are torch's, and it is a target against
    # itself: sharing, version) runs on torch:cpu and still shows; every other one cannot run, a
    # cause between torch:cpu and a variant of it (torch:cpu+compile) included, and a cause of no
    # framework in particular whose case shows only a target against itself on torch:cpu alone.
    torch_only = {e.id for e in entries if list(e.frameworks) == ["torch"] and e.kind in SELF_KINDS}
    assert torch_only, "the baseline has a torch-only cause for this test to run"
    assert {c for c, (result, _) in results.items() if result == "still shows"} == torch_only, r.stdout
    assert {result for c, (result, _) in results.items() if c not in torch_only} == {"cannot run"}, r.stdout
    for e in entries:
        if e.id in torch_only:
            continue
        note = results[e.id][1]
        if "candle" in e.frameworks:
            assert note.startswith("needs candle") and "torch:cpu" in note, (e.id, note)
        elif "burn" in e.frameworks:
            assert note.startswith("needs burn"), (e.id, note)
        else:  # no framework named: it ran on torch:cpu alone, which is no comparison
            assert "only torch:cpu ran the case" in note, (e.id, note)
    assert results[CANDLE_CAUSE][1].startswith("needs candle:cpu"), results[CANDLE_CAUSE]
    cannot = len(results) - len(torch_only)
    assert f"aliasfuzz recheck: {cannot} cannot run, {len(torch_only)} still shows;" in r.stdout
    assert "aliasfuzz recheck: 0 changed since the last recheck" in r.stdout
    stored = sqlite3.connect(store).execute("SELECT DISTINCT result FROM rechecks").fetchall()
    assert sorted(stored) == [("cannot run",), ("still shows",)]


def test_repro_on_one_target_says_nothing_was_compared(tmp_path):
    case = ROOT / "tests" / "cases" / "candle_clone_shares_storage.toml"  # a baseline entry's case
    r = run_cli("repro", str(case), "--targets", "torch:cpu")
    assert r.returncode == 2, r.stdout + r.stderr
    said = " ".join(r.stdout.split())  # the terminal table wraps lines at its width
    assert "No divergence" not in said and "one target is no comparison, so nothing was compared" in said, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "only torch:cpu ran the case" in lines[0] and str(case) in lines[0], r.stderr
    doc = run_cli("repro", str(case), "--targets", "torch:cpu", "--json")
    assert doc.returncode == 2 and json.loads(doc.stdout)["compared"] is False, doc.stdout + doc.stderr


def test_repro_on_two_targets_that_agree_still_says_no_divergence():
    r = run_cli(
        "repro", str(CASES / "example_sgd_snapshots.toml"), "--targets", "torch:cpu,torch:cpu+foreach", "--json"
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["compared"] is True and doc["divergences"] == []
