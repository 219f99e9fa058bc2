"""What both tiers of the triage store hostile tests share: ``record``, ``store``, ``one_line``, ``old_store``."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

from harness.judging.finding import FindingRecord
from harness.triage.store import TriageStore


def record(signature: str, status: str = "new", baseline: str | None = None):
    return FindingRecord.from_json(
        {
            "signature": signature,
            "kind": "value",
            "status": status,
            "baseline": baseline,
            "sentence": f"{signature} diverges",
            "versions": {"candle:cpu": {"candle": "0.11.1"}},
        }
    )


def new_store(path: Path) -> Path:
    with TriageStore(path) as db:
        db.record_run("run1", "2026-01-01T00:00:00Z", 10, [record("sig-a"), record("sig-b")])
        db.record_run("run2", "2026-01-02T00:00:00Z", 10, [record("sig-a")])
    return path


def one_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "internal error" not in r.stderr, r.stderr
    return lines[0]


def old_store(path: Path) -> Path:
    """A store as the first version of the schema wrote it: runs without a kind, sightings
    without a case, no rechecks table."""
    with sqlite3.connect(path) as db:
        db.executescript("""
            CREATE TABLE runs (run TEXT PRIMARY KEY, started TEXT NOT NULL, programs INTEGER NOT NULL);
            CREATE TABLE causes (id TEXT PRIMARY KEY, baseline INTEGER NOT NULL, state TEXT NOT NULL,
                                 state_arg TEXT, sentence TEXT NOT NULL);
            CREATE TABLE sightings (cause TEXT NOT NULL, run TEXT NOT NULL, findings INTEGER NOT NULL,
                                    versions TEXT NOT NULL, PRIMARY KEY (cause, run));
            INSERT INTO runs VALUES ('run0', '2025-12-31T00:00:00Z', 5);
            INSERT INTO causes VALUES ('sig-old', 0, 'wontfix', NULL, 'an old cause');
            INSERT INTO sightings VALUES ('sig-old', 'run0', 2, '{"candle:cpu": {"candle": "0.9.1"}}');
        """)
    db.close()
    return path
