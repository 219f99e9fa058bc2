"""A triage store that is foreign, empty, older, read-only, locked or damaged, and damaged files
beside it (issue 40, faults 9, 14, 19a, 19d), through the real ``aliasfuzz`` command line on real
SQLite files. A lock is a real SQLite lock held by another process; read-only media is a real
read-only bind mount (as root, in a mount namespace of the command's own) or a folder without
write permission (as another user).

The tests here run in this process (the command line through ``run_cli_in_process``), as the
unit tier requires; those that need real processes are in tests/e2e/test_triage_store_hostile.py.
"""

from __future__ import annotations

import sqlite3

import pytest

from harness.triage.store import TriageStore
from tests.conftest import run_cli_in_process
from tests.support.triage_store_hostile import new_store, old_store, one_line, record

# ---- listing never writes (fault 14) ------------------------------------------------------------


def test_listing_a_foreign_sqlite_file_refuses_it_and_leaves_it_byte_identical(tmp_path):
    foreign = tmp_path / "notes.sqlite"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
        db.execute("INSERT INTO notes (text) VALUES ('mine')")
    db.close()
    before = foreign.read_bytes()
    for args in (["triage", "--store", str(foreign)], ["triage", "--store", str(foreign), "--set", "x", "wontfix"]):
        line = one_line(run_cli_in_process(*args))
        assert "not a triage store" in line and str(foreign) in line, line
    assert foreign.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.sqlite"]  # no journal left either


def test_listing_an_empty_file_says_it_is_no_store_and_leaves_it_empty(tmp_path):
    empty = tmp_path / "triage.sqlite"
    empty.touch()
    line = one_line(run_cli_in_process("triage", "--store", str(empty)))
    assert "not a triage store" in line and "empty" in line, line
    assert empty.stat().st_size == 0


def test_listing_an_older_store_reads_it_as_it_is_and_writing_migrates_it(tmp_path):
    old = old_store(tmp_path / "triage.sqlite")
    before = old.read_bytes()
    listed = run_cli_in_process("triage", "--store", str(old))
    assert listed.returncode == 0, listed.stderr
    assert "sig-old" in listed.stdout and "wontfix" in listed.stdout and "1 root causes" in listed.stdout
    assert old.read_bytes() == before  # no kind column, no tables added by a read
    with TriageStore(old) as db:  # a write migrates it
        db.record_run("run1", "2026-01-01T00:00:00Z", 10, [record("sig-a")], kind="default on candle:cpu")
    columns = {row[1] for row in sqlite3.connect(old).execute("PRAGMA table_info(sightings)")}
    assert "case_path" in columns


# ---- a damaged store, damaged files beside it (fault 9) -----------------------------------------


@pytest.mark.parametrize(
    "damage,said",
    [
        (
            "UPDATE sightings SET versions = '{not json' WHERE cause = 'sig-b'",
            "root cause 'sig-b': table sightings: versions",
        ),
        (
            "UPDATE sightings SET versions = '[1, 2]' WHERE cause = 'sig-a' AND run = 'run1'",
            "root cause 'sig-a': table sightings: versions",
        ),
        ("UPDATE runs SET started = NULL WHERE run = 'run1'", "table runs, run 'run1': started"),
    ],
)
def test_a_damaged_row_is_one_line_naming_the_table_row_and_field(tmp_path, damage, said):
    path = tmp_path / "triage.sqlite"
    with sqlite3.connect(path) as db:  # runs.started without NOT NULL: a store another tool wrote
        db.execute("CREATE TABLE runs (run TEXT PRIMARY KEY, started TEXT, programs INTEGER NOT NULL, kind TEXT)")
    db.close()
    new_store(path)
    with sqlite3.connect(path) as db:
        db.execute(damage)
    db.close()
    line = one_line(run_cli_in_process("triage", "--store", str(path)))
    assert str(path) in line and said in line and "damaged" in line, line


# ---- states (fault 19a) -------------------------------------------------------------------------


def test_duplicate_of_an_unknown_cause_is_refused(tmp_path):
    store = new_store(tmp_path / "triage.sqlite")
    line = one_line(
        run_cli_in_process("triage", "--store", str(store), "--set", "sig-a", "duplicate-of", "NO_SUCH_CAUSE")
    )
    assert "NO_SUCH_CAUSE" in line and "no root cause" in line, line
    assert "duplicate-of" not in run_cli_in_process("triage", "--store", str(store)).stdout
    ok = run_cli_in_process("triage", "--store", str(store), "--set", "sig-a", "duplicate-of", "sig-b")
    assert ok.returncode == 0, ok.stderr
    assert "duplicate-of sig-b" in run_cli_in_process("triage", "--store", str(store)).stdout
