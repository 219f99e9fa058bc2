"""The triage store: every root cause seen across runs, in one SQLite file beside the run folders
(``reports/triage.sqlite``).

A *root cause* is a baseline entry (its id) or, for a finding no entry knows, its signature. Per
root cause the store keeps when and in which runs it was seen, how many of its findings each run
recorded, the framework versions it was seen with, and a triage state (``STATES``). A campaign
records its run folder when it ends (``record_run``); ``aliasfuzz triage`` lists the causes and
sets their states.

A cause is "gone" when the previous run *of the same kind* (profile and targets, ``run_kind``)
showed it and this one did not: a lazy-profile run does not reach what a default one does, and a
Linux run has no Metal target, so against a run of another kind "gone" would say nothing about
the frameworks. "First seen" is against every earlier run, of any kind.

Invariants: recording a run twice changes nothing (sightings are keyed by cause and run); a state
a person set (anything but ``new``, ``known`` and ``flaky``) is kept across runs, except that a
cause ``fixed-in`` a version that shows again becomes ``regressed-in`` the versions it shows with.
Every write is one transaction: a reader never sees half a run.

Reading never writes: a store opened to be read (``TriageStore(path, write=False)``) is opened
read-only (SQLite's ``mode=ro``), an older store is read as it is (missing columns and tables read
as empty) and only migrated when something is written into it. A file that is not a triage store
(another program's SQLite database, an empty file) is refused with one line and left as it was,
whether it is to be read or written; a store another process holds locked is said to be busy,
not foreign; a damaged row is one line naming the table, the row and the field.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import InputError

#: Triage states; those in ``STATE_ARGS`` take one argument (what it names).
STATES = ("new", "known", "flaky", "reported", "duplicate-of", "wontfix", "fixed-in", "regressed-in")
STATE_ARGS = {"reported": "url", "duplicate-of": "root cause id", "fixed-in": "version", "regressed-in": "version"}
#: States a campaign sets from what a run shows; the others are a person's, and kept.
AUTOMATIC = ("new", "known", "flaky")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run TEXT PRIMARY KEY,       -- the run folder, resolved
    started TEXT NOT NULL,      -- the campaign's start (ISO 8601); runs are ordered by it
    programs INTEGER NOT NULL,
    kind TEXT                   -- what the run drew and ran on (``run_kind``); NULL: not recorded
);
CREATE TABLE IF NOT EXISTS causes (
    id TEXT PRIMARY KEY,        -- a baseline id, or the signature of a finding no entry knows
    baseline INTEGER NOT NULL,  -- 1 for a baseline id
    state TEXT NOT NULL,
    state_arg TEXT,
    sentence TEXT NOT NULL      -- one finding's sentence, to say what the cause is
);
CREATE TABLE IF NOT EXISTS sightings (
    cause TEXT NOT NULL REFERENCES causes(id),
    run TEXT NOT NULL REFERENCES runs(run),
    findings INTEGER NOT NULL,  -- the findings of the run with this cause (signatures, for a baseline id)
    versions TEXT NOT NULL,     -- JSON: target -> framework -> version, merged over those findings
    case_path TEXT,             -- one of those findings' minimized case, resolved (NULL: none kept)
    PRIMARY KEY (cause, run)
);
CREATE TABLE IF NOT EXISTS rechecks (
    cause TEXT NOT NULL REFERENCES causes(id),
    at TEXT NOT NULL,           -- when (ISO 8601)
    result TEXT NOT NULL,       -- RECHECK_RESULTS
    versions TEXT NOT NULL,     -- JSON: target -> framework -> version of the targets it ran on
    signatures TEXT NOT NULL    -- JSON: the signatures the case showed
);
"""

#: The columns each table of a triage store has had from its first version on: a database with
#: tables, whose tables are not these, is not a triage store (``_check_is_store``).
_FIRST_COLUMNS = {
    "runs": {"run", "started", "programs"},
    "causes": {"id", "baseline", "state", "state_arg", "sentence"},
    "sightings": {"cause", "run", "findings", "versions"},
    "rechecks": {"cause", "at", "result", "versions", "signatures"},
}

#: How long an operation waits for another process's lock on the store before it is busy. A
#: campaign's record and a recheck's result are one short transaction each.
BUSY_TIMEOUT_S = 10.0

#: What ``aliasfuzz recheck`` found of a root cause's case on the targets present.
RECHECK_RESULTS = ("still shows", "no longer shows", "changed signature", "cannot run")


class TriageError(InputError):
    """A store that cannot be opened or read, or a bad state: one line naming the file."""


@dataclass(frozen=True)
class Cause:
    id: str
    baseline: bool
    state: str
    state_arg: str | None
    sentence: str
    first_seen: str
    last_seen: str
    runs: int
    findings: int
    versions: dict[str, dict[str, str]]

    @property
    def state_text(self) -> str:
        return f"{self.state} {self.state_arg}" if self.state_arg else self.state


@dataclass(frozen=True)
class RunDelta:
    """What a run showed against the runs recorded before it: root causes seen for the first time
    in any run, causes the previous run of the same kind (``previous_run``) showed and this one
    did not, and causes that regressed.

    ``first_seen_known`` is the part of ``first_seen`` that are baseline entries: a documented
    design difference that a short run happened to reach for the first time is news about the
    run's reach, not about the frameworks, so it never makes a run "new"."""

    first_seen: tuple[str, ...]
    disappeared: tuple[str, ...]
    regressed: tuple[str, ...]
    previous_run: str | None
    first_seen_known: tuple[str, ...] = ()
    #: Each root cause of the run -> the start of the first run the store saw it in (ISO 8601):
    #: what the run's report shows, read from the run folder rather than from a store that may
    #: be in Redis, or replaced since (not part of equality: recording a run again adds nothing).
    first_seen_at: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def first_seen_new(self) -> tuple[str, ...]:
        """Root causes outside the baseline seen for the first time in any run."""
        return tuple(c for c in self.first_seen if c not in self.first_seen_known)

    def to_json(self) -> dict[str, Any]:
        return {
            "first_seen": list(self.first_seen),
            "first_seen_known": list(self.first_seen_known),
            "disappeared": list(self.disappeared),
            "regressed": list(self.regressed),
            "previous_run": self.previous_run,
            "first_seen_at": dict(sorted(self.first_seen_at.items())),
        }


def run_kind(profile: str | None, targets: Iterable[str]) -> str:
    """What a run drew and ran on, as the store compares runs: ``default on burn:flex,torch:cpu``."""
    return f"{profile or 'default'} on {','.join(sorted(targets))}"


def cause_of(record) -> str:
    """The root cause a finding record belongs to: its baseline entry, or its own signature."""
    return record.baseline or record.signature


class TriageStore:
    """One SQLite triage store. Opened to write (the default), a missing file or an empty
    database becomes a store and an older store gets the tables and columns it lacks; opened to
    read (``write=False``), the file is opened read-only and nothing in it changes."""

    def __init__(self, path: str | Path, *, write: bool = True):
        self.path = Path(path)
        self.write = write
        try:
            if write:
                self.db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)
            else:
                if not self.path.is_file():
                    raise TriageError(f"{self.path}: no triage store there (not a file)")
                # ``mode=ro``: a read never creates, migrates or journals anything.
                self.db = sqlite3.connect(self.path.resolve().as_uri() + "?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
        except sqlite3.Error as e:
            raise self._error(e, "open the store") from None
        try:
            tables = self._check_is_store()
            if write:
                with self.db:
                    self.db.executescript(_SCHEMA)
                    # A store written before runs had a kind (its runs keep NULL), or sightings a case.
                    if "kind" not in self._columns("runs"):
                        self.db.execute("ALTER TABLE runs ADD COLUMN kind TEXT")
                    if "case_path" not in self._columns("sightings"):
                        self.db.execute("ALTER TABLE sightings ADD COLUMN case_path TEXT")
                tables = set(_FIRST_COLUMNS)
            self.tables = tables
        except TriageError:
            self.db.close()
            raise
        except sqlite3.Error as e:
            self.db.close()
            raise self._error(e, "open the store") from None

    def _columns(self, table: str) -> set[str]:
        return {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}

    def _check_is_store(self) -> set[str]:
        """The store's tables (of ``_FIRST_COLUMNS``); raises ``TriageError`` for a database
        that is not a triage store. An empty database is one only when it is to be written."""
        tables = {name for (name,) in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            if self.write:
                return set()
            raise TriageError(f"{self.path}: not a triage store (an empty database: no runs recorded in it)")
        if "runs" not in tables:
            raise TriageError(
                f"{self.path}: not a triage store (its tables are {', '.join(sorted(tables))}; "
                f"a triage store has {', '.join(_FIRST_COLUMNS)})"
            )
        for table, columns in _FIRST_COLUMNS.items():
            missing = columns - self._columns(table) if table in tables else set()
            if missing:
                raise TriageError(
                    f"{self.path}: not a triage store (its table {table} has no column {', '.join(sorted(missing))})"
                )
        return tables & set(_FIRST_COLUMNS)

    def _error(self, e: sqlite3.Error, doing: str) -> TriageError:
        """One line for an SQLite error: a lock held by another process is busy, a file that is
        no database is not a store, a store that cannot be written says so."""
        name = getattr(e, "sqlite_errorname", "")
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "database is locked" in str(e):
            return TriageError(
                f"{self.path}: the store is busy: another process holds it locked "
                f"(waited {BUSY_TIMEOUT_S:g}s to {doing}); try again when it is done"
            )
        if name.startswith("SQLITE_NOTADB") or "file is not a database" in str(e):
            return TriageError(f"{self.path}: not a triage store ({e})")
        if name.startswith("SQLITE_READONLY") or "readonly" in str(e):
            return TriageError(f"{self.path}: cannot {doing}: the store is read-only ({e})")
        if name.startswith("SQLITE_CORRUPT") or "malformed" in str(e):
            return TriageError(f"{self.path}: the store is damaged: cannot {doing} ({e})")
        return TriageError(f"{self.path}: cannot {doing} ({e})")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> TriageStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- recording runs -------------------------------------------------------------------------

    def record_run(
        self,
        run: str,
        started: str,
        programs: int,
        records: Iterable[Any],
        cases: dict[str, str] | None = None,
        kind: str | None = None,
    ) -> RunDelta:
        """Records one run's finding records (``FindingRecord``; harness errors are not causes) and
        returns what changed against the run of the same ``kind`` (``run_kind``) recorded before
        it; ``cases`` maps a record's signature to its minimized case file. Recording a run again
        changes nothing and returns the same delta."""
        by_cause: dict[str, list[Any]] = {}
        for r in records:
            by_cause.setdefault(cause_of(r), []).append(r)
        case_of = {
            cause: next((cases[r.signature] for r in rs if r.signature in (cases or {})), None)
            for cause, rs in by_cause.items()
        }
        try:
            with self.db:
                return self._record(run, started, programs, kind, by_cause, case_of)
        except sqlite3.Error as e:
            raise self._error(e, f"record {run}") from None

    def _record(
        self,
        run: str,
        started: str,
        programs: int,
        kind: str | None,
        by_cause: dict[str, list[Any]],
        case_of: dict[str, str | None],
    ) -> RunDelta:
        db = self.db
        db.execute("INSERT OR IGNORE INTO runs VALUES (?, ?, ?, ?)", (run, started, programs, kind))
        started, kind = db.execute("SELECT started, kind FROM runs WHERE run = ?", (run,)).fetchone()
        previous = db.execute(
            "SELECT run FROM runs WHERE kind IS ? AND (started < ? OR (started = ? AND run < ?)) "
            "ORDER BY started DESC, run DESC LIMIT 1",
            (kind, started, started, run),
        ).fetchone()
        seen_before = {
            c
            for (c,) in db.execute(
                "SELECT DISTINCT s.cause FROM sightings s JOIN runs r ON r.run = s.run WHERE r.started < ? OR "
                "(r.started = ? AND r.run < ?)",
                (started, started, run),
            )
        }
        regressed = []
        for cause, records in by_cause.items():
            versions = _merged_versions(r.versions for r in records)
            statuses = {r.status for r in records}
            automatic = "new" if "new" in statuses else "flaky" if statuses == {"flaky"} else "known"
            row = db.execute("SELECT state FROM causes WHERE id = ?", (cause,)).fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO causes VALUES (?, ?, ?, NULL, ?)",
                    (cause, int(records[0].baseline is not None), automatic, records[0].sentence),
                )
            elif row[0] in AUTOMATIC:
                db.execute("UPDATE causes SET state = ? WHERE id = ?", (automatic, cause))
            elif row[0] == "fixed-in":
                db.execute(
                    "UPDATE causes SET state = 'regressed-in', state_arg = ? WHERE id = ?",
                    (_versions_text(versions), cause),
                )
                regressed.append(cause)
            db.execute(
                "INSERT OR IGNORE INTO sightings VALUES (?, ?, ?, ?, ?)",
                (cause, run, len(records), json.dumps(versions, sort_keys=True), case_of[cause]),
            )
        disappeared: list[str] = []
        if previous is not None:
            shown = {c for (c,) in db.execute("SELECT cause FROM sightings WHERE run = ?", (previous[0],))}
            disappeared = sorted(shown - set(by_cause))
        first = sorted(set(by_cause) - seen_before)
        marks = ",".join("?" * len(by_cause))
        first_seen_at = {
            c: at
            for c, at in db.execute(
                f"SELECT s.cause, MIN(r.started) FROM sightings s JOIN runs r ON r.run = s.run WHERE s.cause IN ({marks}) "
                "GROUP BY s.cause",
                list(by_cause),
            )
            if isinstance(at, str)
        }
        return RunDelta(
            tuple(first),
            tuple(disappeared),
            tuple(sorted(regressed)),
            previous[0] if previous else None,
            tuple(c for c in first if by_cause[c][0].baseline is not None),
            first_seen_at,
        )

    # ---- reading and setting states -------------------------------------------------------------

    def causes(self) -> list[Cause]:
        """Every root cause, the most recently seen first. A damaged row (a run with no start, a
        sighting whose versions are not JSON of target -> framework -> version) raises a
        ``TriageError`` naming it."""
        if not {"causes", "sightings", "runs"} <= self.tables:
            return []  # an older store that has recorded no cause yet
        try:
            undated = self.db.execute("SELECT run FROM runs WHERE typeof(started) != 'text' LIMIT 1").fetchone()
            rows = self.db.execute(
                "SELECT c.id, c.baseline, c.state, c.state_arg, c.sentence, MIN(r.started), MAX(r.started), "
                "COUNT(s.run), SUM(s.findings), GROUP_CONCAT(s.versions, '\x1f') FROM causes c "
                "JOIN sightings s ON s.cause = c.id JOIN runs r ON r.run = s.run GROUP BY c.id "
                "ORDER BY MAX(r.started) DESC, c.id"
            ).fetchall()
        except sqlite3.Error as e:
            raise self._error(e, "read the store") from None
        if undated is not None:
            raise TriageError(
                f"{self.path}: the store is damaged: table runs, run {undated[0]!r}: started: "
                "must be a time (ISO 8601 text)"
            )
        out = []
        for i, b, st, arg, sentence, first, last, runs, findings, versions in rows:
            where = f"{self.path}: the store is damaged: root cause {i!r}"
            if not isinstance(st, str) or not isinstance(sentence, str) or not isinstance(findings, int):
                raise TriageError(f"{where}: state, sentence or findings of the wrong type")
            out.append(
                Cause(
                    i,
                    bool(b),
                    st,
                    arg,
                    sentence,
                    first,
                    last,
                    runs,
                    findings,
                    _merged_versions(
                        _versions_of(v, f"{where}: table sightings: versions") for v in (versions or "").split("\x1f")
                    ),
                )
            )
        return out

    def latest_case(self, cause: str) -> str | None:
        """The minimized case of the cause's most recent sighting that kept one."""
        if not {"sightings", "runs"} <= self.tables or "case_path" not in self._columns("sightings"):
            return None
        try:
            row = self.db.execute(
                "SELECT s.case_path FROM sightings s JOIN runs r ON r.run = s.run "
                "WHERE s.cause = ? AND s.case_path IS NOT NULL ORDER BY r.started DESC LIMIT 1",
                (cause,),
            ).fetchone()
        except sqlite3.Error as e:
            raise self._error(e, "read the store") from None
        return row[0] if row and isinstance(row[0], str) else None

    def record_recheck(self, cause: str, at: str, result: str, versions: dict, signatures: Iterable[str]) -> None:
        """One recheck of a cause; a baseline id not seen in any run yet is added as ``known``."""
        assert result in RECHECK_RESULTS, result
        try:
            with self.db:
                self.db.execute("INSERT OR IGNORE INTO causes VALUES (?, 1, 'known', NULL, '')", (cause,))
                self.db.execute(
                    "INSERT INTO rechecks VALUES (?, ?, ?, ?, ?)",
                    (cause, at, result, json.dumps(versions, sort_keys=True), json.dumps(sorted(signatures))),
                )
        except sqlite3.Error as e:
            raise self._error(e, f"record the recheck of {cause}") from None

    def last_recheck(self, cause: str) -> tuple[str, str] | None:
        """``(at, result)`` of the cause's latest recheck."""
        if "rechecks" not in self.tables:
            return None
        try:
            return self.db.execute(
                "SELECT at, result FROM rechecks WHERE cause = ? ORDER BY at DESC LIMIT 1", (cause,)
            ).fetchone()
        except sqlite3.Error as e:
            raise self._error(e, "read the store") from None

    def set_state(self, cause: str, state: str, arg: str | None = None) -> None:
        """Sets a root cause's triage state; ``arg`` is required exactly for ``STATE_ARGS``."""
        if state not in STATES:
            raise TriageError(f"{self.path}: unknown state {state!r} (known: {', '.join(STATES)})")
        if (state in STATE_ARGS) != (arg is not None):
            need = f"needs a {STATE_ARGS[state]}" if state in STATE_ARGS else "takes no argument"
            raise TriageError(f"{self.path}: state {state!r} {need}")
        if state == "duplicate-of" and arg == cause:
            raise TriageError(f"{self.path}: {cause} cannot be a duplicate of itself")
        try:
            with self.db:
                if (
                    state == "duplicate-of"
                    and self.db.execute("SELECT 1 FROM causes WHERE id = ?", (arg,)).fetchone() is None
                ):
                    raise TriageError(
                        f"{self.path}: duplicate-of {arg!r}: no root cause {arg!r} (`aliasfuzz triage` lists them)"
                    )
                changed = self.db.execute(
                    "UPDATE causes SET state = ?, state_arg = ? WHERE id = ?", (state, arg, cause)
                ).rowcount
        except sqlite3.Error as e:
            raise self._error(e, f"set the state of {cause}") from None
        if not changed:
            raise TriageError(f"{self.path}: no root cause {cause!r} (`aliasfuzz triage` lists them)")


def _versions_of(text: str, where: str) -> dict[str, dict[str, str]]:
    """A sighting's ``versions`` column: JSON of target -> framework -> version; a
    ``TriageError`` at ``where`` when it is not."""
    try:
        versions = json.loads(text)
    except ValueError:
        raise TriageError(f"{where}: not JSON ({text[:40]!r})") from None
    if not isinstance(versions, dict) or not all(
        isinstance(fws, dict) and all(isinstance(v, str) for v in fws.values()) for fws in versions.values()
    ):
        raise TriageError(f"{where}: must be an object of target -> framework -> version, found {text[:40]!r}")
    return versions


def _merged_versions(each: Iterable[dict | None]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for versions in each:
        for target, frameworks in (versions or {}).items():
            out.setdefault(target, {}).update(frameworks or {})
    return out


def _versions_text(versions: dict[str, dict[str, str]]) -> str:
    """``candle 0.11.1, torch 2.15.0``: every framework version, once."""
    flat = {f"{k} {v}" for frameworks in versions.values() for k, v in frameworks.items() if k != "python"}
    return ", ".join(sorted(flat)) or "unknown versions"
