"""The triage store across runs (``harness.triage``) and ``aliasfuzz triage``. The store's logic
is driven with finding records built here; the command line end to end with campaigns of the
fake target (a TEST DOUBLE with a planted divergence, ``tests/fakes``), which stands in for no
framework.

The tests here run in this process, as the
unit tier requires; those that need real processes are in tests/e2e/test_triage.py.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from harness.judging.finding import FindingRecord
from harness.triage.store import TriageError, TriageStore


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
