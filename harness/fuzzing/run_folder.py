"""The run folder: the one place that knows its layout (see ``harness.fuzzing.campaign`` for what each
file holds) and how a program is stored as bytes.

Beside the layout it keeps the folder's guarantees:

- one campaign at a time: ``campaign.lock`` holds an exclusive ``flock`` for as long as a
  campaign runs (``folder_lock``; the kernel drops it when the process dies, however it dies);
- a new campaign never writes into a folder that holds one already, nor into a folder of the
  user's that is not a run folder (``RunFolder.create_new``); a resume only into a run folder
  whose ``campaign.json`` has the shape the campaign reads (``RunFolder.open_existing``,
  ``load_state``; the shapes are ``run_state``'s);
- a reader (the reports, the history page) opens a folder with ``RunFolder.open_read_only``:
  no lock (a campaign may be running in it), nothing written, and none of the folder's own files
  read through a link out of it;
- nothing is written through a link: a resume refuses a folder whose own entries (the lock, the
  state, the journal, ``findings.json``, the torn file, ``cases/``, ``corpus/``) include one, a new
  campaign takes no folder holding one (``folder_setup.check_fresh``), and the lock, the journal
  and every temporary file are opened with ``O_NOFOLLOW``: ``refuse_links`` is the one check;
- a set-up that fails leaves nothing behind: what ``create_new`` made is removed again while it
  holds no finding and no program has run, never a folder (or a file) that was there before
  (``folder_setup``, which also names the folder's files);
- the journal (``findings.jsonl``; its bytes are ``journal``'s) is the truth, and a finding is never lost:
  ``reconcile`` restores to the journal what only ``findings.json`` still holds, and refuses when
  they contradict each other.

Every problem is a one-line ``CampaignError`` naming the file (and the key or line).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.case.ir import Program, TensorDecl, check_program
from harness.case.layers import LayerDecl
from harness.errors import CampaignError
from harness.files import atomic_write
from harness.fuzzing import folder_setup, journal
from harness.fuzzing.folder_lock import FolderLock
from harness.fuzzing.folder_setup import (
    CASES_NAME,
    CORPUS_NAME,
    FINDINGS_NAME,
    JOURNAL_NAME,
    LOCK_NAME,
    STATE_NAME,
    TORN_NAME,
)
from harness.fuzzing.run_state import (
    RESUME_REQUIRED,
    check_config_keys,
    check_state,
    json_kind,
    record_problem,
    shown,
    utf8_text,
)
from harness.judging.finding import stored_record
from harness.urls import hide_password

__all__ = [
    "FINDINGS_NAME",
    "JOURNAL_NAME",
    "LOCK_NAME",
    "STATE_NAME",
    "TORN_NAME",
    "RunFolder",
    "check_config_keys",
    "check_state",
    "inside",
    "program_from_bytes",
    "program_to_bytes",
]


def program_to_bytes(p: Program) -> bytes:
    return json.dumps(p.to_wire(), sort_keys=True, separators=(",", ":")).encode()


def program_from_bytes(raw: bytes) -> Program:
    doc = json.loads(raw)
    tensors = tuple(
        TensorDecl(
            t["name"],
            t["kind"],
            tuple(t["shape"]),
            tuple(t["value"]) if t.get("value") is not None else None,
            tuple(t["grad"]) if t.get("grad") is not None else None,
            t.get("init"),
            t.get("fill"),
            t.get("seed"),
        )
        for t in doc["tensors"]
    )
    layers = tuple(
        LayerDecl(x["name"], x["kind"], x.get("features"), x.get("momentum"), x.get("p")) for x in doc.get("layers", ())
    )
    dtype = doc.get("dtype", "f32")
    return Program(tensors, check_program(tensors, doc["ops"], layers=layers, dtype=dtype), layers=layers, dtype=dtype)


def inside(root: Path, rel: Any, root_too: bool = False) -> Path | None:
    """``root / rel`` resolved (symlinks too) when it is inside ``root`` (resolved; ``root``
    itself only with ``root_too``), else None: a path that is no non-empty string, holds a NUL,
    or leads out (a symlink loop counts as leading out)."""
    if not isinstance(rel, str) or not rel or "\0" in rel:
        return None
    try:
        p = (root / rel).resolve()
    except (OSError, RuntimeError):  # a symlink loop: refused like a path out
        return None
    return p if p.is_relative_to(root) and (root_too or p != root) else None


def _why(e: OSError) -> str:
    return e.strerror or str(e)


def _read_regular(path: Path) -> bytes:
    """The bytes of a regular file (a FIFO or a device would block or never end: IsADirectoryError
    for a folder, OSError "not a regular file" for those)."""
    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder", str(path))
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    with open(path, "rb") as f:
        return f.read()


class RunFolder:
    """The one place that knows the run folder's layout.

    A campaign uses it as a context manager, holding the folder's lock for its whole run::

        with RunFolder.create_new(out) as folder:      # or RunFolder.open_existing(out)
            ...

    ``RunFolder(path)`` itself opens nothing: it names the folder's files.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.cases = self.path / CASES_NAME
        self.corpus = self.path / CORPUS_NAME  # the default corpus (``--db`` may name another)
        self.journal = self.path / JOURNAL_NAME
        self.findings_json = self.path / FINDINGS_NAME
        self.state_json = self.path / STATE_NAME
        self.lock_file = self.path / LOCK_NAME
        self.torn_file = self.path / TORN_NAME
        #: The folder resolved, symlinks included (set by ``open_read_only``).
        self.root: Path | None = None
        self._lock = FolderLock(self.path, self.lock_file)
        self._read_only = False
        # Set by create_new: what it made (so that a failed set-up removes that, and only that).
        self._made: list[Path] | None = None  # the folders it created, deepest first
        self._kept: set[str] = set()  # folders of its layout that were there before: emptied, kept
        self._programs_saved = 0

    # -- the lock -------------------------------------------------------------------------------

    def acquire(self) -> None:
        """Takes the folder's exclusive lock (``campaign.lock``, ``flock``), without waiting.
        Raises ``CampaignError`` "DIR: in use by another campaign (pid N)". Re-entrant on
        this object; released by ``release`` (which removes the lock file) or by the kernel
        when the process ends, however it ends (the file then stays, unlocked)."""
        self._writable()
        self._lock.acquire()

    def release(self) -> None:
        self._lock.release()

    @property
    def locked(self) -> bool:
        return self._lock.held

    def lock(self) -> RunFolder:
        """``with folder.lock():`` holds the lock for the block (see ``acquire``)."""
        self.acquire()
        return self

    def __enter__(self) -> RunFolder:
        if not self.locked:
            self.acquire()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is not None and self._made is not None and self.locked and not self.holds_anything():
                self._remove_what_was_made()
        finally:
            self.release()

    def _writable(self) -> None:
        if self._read_only:  # a bug of the caller, never the user's doing
            raise RuntimeError(f"{self.path}: opened read-only (RunFolder.open_read_only): nothing may be written")

    # -- opening a folder -------------------------------------------------------------------------

    @classmethod
    def create_new(cls, path: str | Path) -> RunFolder:
        """The folder for a new campaign, locked. Creates it (and missing parents), or takes an
        existing empty one. Refuses, with one line and without writing anything: a folder that
        holds a campaign already (a ``campaign.json``, a journal or a ``findings.json``, even of
        a run with no finding), a non-empty folder that is not a run folder, a path that is no
        folder, a folder another campaign has locked. Used as a context manager: if the block
        raises while the folder holds no finding and no program was run (``save_state`` with
        ``programs`` > 0), what this call created is removed again (a folder that was there
        before stays, emptied of the campaign's own files)."""
        folder = cls(path)
        p = folder.path
        if p.exists() and not p.is_dir():
            raise CampaignError(f"{p}: not a folder (--out must name a run folder)")
        parents = folder_setup.missing_parents(p)
        made_p = folder_setup.make_folder(p, parents)
        if not made_p:  # refuse before writing even the lock file (but say so if it is in use)
            try:
                folder_setup.check_fresh(p)
            except CampaignError:
                folder._lock.raise_if_in_use()
                raise
        try:
            folder.acquire()
        except BaseException:
            folder_setup.rmdirs(([p] if made_p else []) + parents)  # only if empty: never another's lock file
            raise
        try:
            there = folder_setup.check_fresh(p)  # again, now that no other campaign can change it
        except BaseException:
            folder.release()  # nothing written (the lock file goes with the lock), nothing removed
            raise
        # From here on everything in the folder is this campaign's (it was empty but for what
        # check_fresh allows, and the lock keeps other campaigns out).
        folder._made = ([p] if made_p else []) + parents
        folder._kept = {n for n in there if n in folder_setup.FRESH_DIRS}  # empty folders that were there: kept
        try:
            folder.create()
        except BaseException:
            folder._remove_what_was_made()
            folder.release()
            raise
        return folder

    @classmethod
    def open_existing(cls, path: str | Path) -> RunFolder:
        """The folder of a campaign to resume, locked, its ``campaign.json`` checked
        (``load_state``). Refuses a folder whose own entries include a symbolic link
        (``refuse_links``) before it opens anything to write. Never removes anything."""
        folder = cls(path)
        p = folder.path
        if not p.exists():
            raise CampaignError(f"{p}: no such run folder")
        if not p.is_dir():
            raise CampaignError(f"{p}: not a folder (--resume takes a run folder)")
        if not folder.state_json.exists() and not folder.state_json.is_symlink():
            raise CampaignError(f"{p}: no campaign.json: not a run folder")
        folder.refuse_links(folder_setup.OWN_NAMES, writing=True)  # before the lock file is opened
        folder.acquire()
        try:
            folder.load_state()
            folder.create()
        except BaseException:
            folder.release()  # a refused resume leaves the folder as it was
            raise
        return folder

    @classmethod
    def open_read_only(cls, path: str | Path) -> RunFolder:
        """A run folder to read, not locked (a campaign may be running in it: every write it
        makes is atomic or a whole journal line, and a torn last line is left out), ``root``
        set. Refuses (``CampaignError`` naming the file): a path that is no folder, a folder
        without ``campaign.json``, one of the folder's own files (campaign.json, the journal,
        findings.json) that is a link out of the folder or not a regular file. Anything that
        would write through the returned folder raises."""
        folder = cls(path)
        folder._read_only = True
        p = folder.path
        if not p.is_dir():
            raise CampaignError(f"{p}: not a directory")
        try:
            folder.root = p.resolve(strict=True)
        except (OSError, RuntimeError) as e:
            raise CampaignError(f"{p}: cannot open ({e})") from None
        folder.refuse_links((STATE_NAME, JOURNAL_NAME, FINDINGS_NAME), writing=False)
        for own in (folder.state_json, folder.journal, folder.findings_json):
            if own.exists() and not own.is_file() and not own.is_dir():  # a FIFO would never end
                raise CampaignError(f"{own}: not a regular file: not read")
        if not (folder.state_json.exists() or folder.state_json.is_symlink()):
            raise CampaignError(f"{p}: no campaign.json: not a run folder")
        return folder

    def refuse_links(self, names: Iterable[str], *, writing: bool) -> None:
        """The one check that keeps a command's reads and writes inside the run folder: refuses,
        with a one-line ``CampaignError`` naming the entry, each of the folder's entries ``names``
        that is a symbolic link. Writing (a campaign, a resume), every link is refused, whatever
        it points to: a write through it lands where it points, outside the folder or over
        another of the folder's own files (a linked ``campaign.lock`` would be truncated). Only
        reading (``open_read_only``), a link is refused when it leads out of the folder
        (``inside``): one between the folder's own files reads nothing of anyone else's."""
        root = self.root or self.path.resolve()
        for name in names:
            entry = self.path / name
            if not entry.is_symlink():
                continue
            if writing:
                raise CampaignError(
                    f"{entry}: a symbolic link (to {os.readlink(entry)}): nothing is written "
                    f"through a link; make it a plain file or folder of the run folder"
                )
            if inside(root, name) is None:
                raise CampaignError(f"{entry}: a link out of the run folder: not read")

    def holds_anything(self) -> bool:
        """A finding in the journal, or a saved state with programs run: worth keeping. A
        journal that cannot be looked at counts as holding something (never removed unseen)."""
        try:
            if self.journal.stat().st_size > 0:
                return True
        except FileNotFoundError:
            pass  # no journal: no finding
        except OSError:
            return True
        return self._programs_saved > 0

    def _remove_what_was_made(self) -> None:
        """Undoes ``create_new`` (called with the lock held): the campaign's own files in the
        folder, then the folder and the parents it created, each only if it is empty then
        (``folder_setup``)."""
        if self._made is None:
            return
        folder_setup.remove_own_files(self.path, self._kept)
        folder_setup.rmdirs(self._made)
        self._made = None

    def create(self) -> None:
        self._writable()
        try:
            self.cases.mkdir(parents=True, exist_ok=True)
            # A fresh name (O_EXCL): a fixed one could be a link planted to truncate another file.
            fd, probe = tempfile.mkstemp(prefix=".writable-", dir=self.path)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise CampaignError(f"{self.path}: cannot write the run folder: {e.strerror or e}") from None

    # -- campaign.json ----------------------------------------------------------------------------

    def load_state(
        self, config_fields: dict[str, Any] | None = None, config_required: Iterable[str] = ()
    ) -> dict[str, Any]:
        """``campaign.json``, its shape checked (``check_state``); with ``config_fields`` its
        configuration too (``check_config_keys``)."""
        where = self.state_json
        raw = self._read_own(where, "a campaign state")
        if raw is None:
            if not self.path.exists():
                raise CampaignError(f"{self.path}: no such run folder")
            raise CampaignError(f"{self.path}: no campaign.json: not a run folder")
        text = utf8_text(raw, where, "a campaign state")
        try:
            state = json.loads(text)
        except RecursionError:
            raise CampaignError(f"{where}: unreadable (nested too deeply)") from None
        except ValueError as e:
            raise CampaignError(f"{where}: unreadable ({e})") from None
        check_state(state, where)
        if config_fields is not None:
            check_config_keys(state["config"], config_fields, where=where, required=config_required)
        return state

    def save_state(self, state: dict[str, Any]) -> None:
        """Writes ``campaign.json``. The password of the corpus URL (``config.db``) is hidden
        (``harness.urls``): it is never stored, so a resume is given ``--db`` again."""
        self._writable()
        config = state.get("config") if isinstance(state, dict) else None
        if isinstance(config, dict) and isinstance(config.get("db"), str):
            state = {**state, "config": {**config, "db": hide_password(config["db"])}}
        try:
            atomic_write(self.state_json, json.dumps(state, indent=2))
        except OSError as e:  # disk full, folder gone: one line, the journal is untouched
            raise CampaignError(
                f"{self.state_json}: cannot write ({e.strerror or e}); findings so far are intact in {self.journal}"
            ) from None
        programs = state.get("programs", 0) if isinstance(state, dict) else 0
        if isinstance(programs, int) and programs > self._programs_saved:
            self._programs_saved = programs

    def _read_own(self, path: Path, what: str) -> bytes | None:
        """The bytes of one of the folder's own files (``what`` it should be, for messages);
        None when it does not exist."""
        self.refuse_links((path.name,), writing=False)
        try:
            return _read_regular(path)
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise CampaignError(f"{path}: is a folder, not {what}") from None
        except NotADirectoryError:
            raise CampaignError(f"{self.path}: not a folder (--resume takes a run folder)") from None
        except OSError as e:
            raise CampaignError(f"{path}: cannot read: {_why(e)}") from None

    # -- the journal and findings.json ------------------------------------------------------------

    def _read_journal(self, required: Iterable[str] = ()) -> journal.JournalRead:
        raw = self._read_own(self.journal, "the findings journal")
        return journal.parse_journal(raw or b"", self.journal, required)

    def load_findings(self) -> list[dict[str, Any]]:
        """The journal. Tolerates a torn last line (a kill in the middle of a write) and blank
        lines; any other line that is not a finding is a ``CampaignError``
        "DIR/findings.jsonl:LINE: why"."""
        return self._read_journal().records

    def read_findings(self) -> list[dict[str, Any]]:
        """The findings as a reader sees them, writing nothing: the journal's, or those of
        ``findings.json`` when it lists more (a journal lost or cut short that no resume has
        restored yet: ``reconcile`` would restore them). A damaged ``findings.json`` is passed
        over when there is a journal (the journal is the truth; the next resume rewrites the
        list from it), and a ``CampaignError`` when there is none."""
        has_journal = self.journal.exists() or self.journal.is_symlink()
        records = self.load_findings() if has_journal else []
        try:
            listed = self._load_findings_json()
        except CampaignError:
            if not has_journal:
                raise
            listed = None
        return listed if listed is not None and len(listed) > len(records) else records

    def _load_findings_json(self, required: Iterable[str] = (), hint: str | None = None) -> list[dict[str, Any]] | None:
        """``findings.json``, each record checked (``record_problem``); None when it does not
        exist. ``hint``: what to do about a damaged one, appended to the message."""
        where = self.findings_json
        raw = self._read_own(where, "the list of findings")
        if raw is None:
            return None
        tail = f": {hint}" if hint else ""
        try:
            doc = json.loads(raw.decode("utf-8"))
        except RecursionError:
            raise CampaignError(f"{where}: unreadable (nested too deeply){tail}") from None
        except (UnicodeDecodeError, ValueError) as e:
            raise CampaignError(f"{where}: unreadable ({e}){tail}") from None
        if not isinstance(doc, list):
            raise CampaignError(f"{where}: not a list of findings, found {json_kind(doc)}{tail}")
        for n, rec in enumerate(doc, 1):
            problem = "not a finding (a JSON object)" if not isinstance(rec, dict) else record_problem(rec, required)
            if problem:
                raise CampaignError(f"{where}: finding {n}: {problem}{tail}")
        return doc

    def reconcile(self) -> tuple[list[dict[str, Any]], list[str]]:
        """Makes the journal and ``findings.json`` agree before a resume, losing nothing.

        The journal is the truth; ``findings.json`` is rewritten from it when it lags (a kill
        between the two writes). Findings that only ``findings.json`` holds (the journal was
        deleted, or cut short) are appended to the journal (fsync'ed) first. When the two
        disagree on the finding at some position, nothing is written and a ``CampaignError``
        names both. Returns the findings and the lines to log about what was restored."""
        self._writable()
        read = self._read_journal(RESUME_REQUIRED)
        records = read.records
        listed = self._load_findings_json(RESUME_REQUIRED, f"move it aside to rebuild it from {self.journal.name}")
        messages: list[str] = []
        listed = listed or []
        for n, (rec, item) in enumerate(zip(records, listed), 1):
            if rec["signature"] != item["signature"]:
                raise CampaignError(
                    f"{self.findings_json}: finding {n} ({shown(item['signature'])}) contradicts "
                    f"{self.journal.name}:{read.line_numbers[n - 1]} ({shown(rec['signature'])}): resolve it by hand"
                )
        if len(listed) > len(records):
            missing = listed[len(records) :]
            how = f"{len(records)} finding(s)" if self.journal.exists() else "absent"
            try:
                journal.append(self.journal, self.torn_file, journal.journal_lines(missing))
            except OSError as e:
                raise CampaignError(
                    f"{self.journal}: cannot write ({_why(e)}); {self.findings_json.name} is left as it was"
                ) from None
            records = records + [dict(r) for r in missing]
            messages.append(
                f"{self.journal}: restored {len(missing)} finding(s) from {self.findings_json.name} "
                f"that the journal ({how}) lacked"
            )
            gone = [
                r.get("case")
                for r in missing
                if isinstance(r.get("case"), str) and not (self.path / r["case"]).exists()
            ]
            if gone:
                messages.append(
                    f"{self.path}: {len(gone)} restored finding(s) name a case file that is missing (first: {gone[0]})"
                )
        if len(records) > len(listed) or not self.findings_json.exists():
            try:
                self._write_findings_list(records)
            except OSError as e:
                raise CampaignError(
                    f"{self.findings_json}: cannot write ({_why(e)}); the findings are intact in {self.journal}"
                ) from None
        return records, messages

    def add_finding(
        self,
        record: Mapping[str, Any],
        minimized: str,
        original: str,
        repro: dict | None,
        all_records: list[dict[str, Any]],
    ) -> None:
        """Stores one finding: ``record`` (its JSON form, ``FindingRecord.to_json``) with the
        paths of its files, which are written first, then the journal line, then the list: a
        finding is in the journal only once everything it points to exists. Appends the stored
        record to ``all_records`` (every finding so far, in the order found)."""
        self._writable()
        try:
            self._add_finding(record, minimized, original, repro, all_records)
        except OSError as e:
            raise CampaignError(
                f"{self.path}: cannot write a finding ({e.strerror or e}); the "
                f"{len(all_records)} earlier finding(s) are intact in {self.journal}"
            ) from None

    def _add_finding(
        self,
        record: Mapping[str, Any],
        minimized: str,
        original: str,
        repro: dict | None,
        all_records: list[dict[str, Any]],
    ) -> None:
        self.refuse_links((CASES_NAME,), writing=True)  # again: it may have been replaced since the start
        n = len(all_records) + 1
        stem = f"{n:03d}-{hashlib.sha1(record['signature'].encode()).hexdigest()[:8]}"
        atomic_write(self.cases / f"{stem}.toml", minimized)
        atomic_write(self.cases / f"{stem}.original.toml", original)
        if repro is not None:
            atomic_write(self.cases / f"{stem}.json", json.dumps(repro, indent=1))
        stored = stored_record(
            record,
            case=f"cases/{stem}.toml",
            original_case=f"cases/{stem}.original.toml",
            repro=f"cases/{stem}.json" if repro is not None else None,
        )
        journal.append(self.journal, self.torn_file, journal.journal_lines([stored]))  # a torn tail set aside
        all_records.append(stored)
        self._write_findings_list(all_records)

    def _write_findings_list(self, records: list[dict[str, Any]]) -> None:
        atomic_write(self.findings_json, json.dumps(records, indent=1))

    def ensure_findings_list(self) -> None:
        """Writes an empty ``findings.json`` when there is none (a run that found nothing), so
        that every finished run folder has one. Raises ``CampaignError`` when it cannot."""
        self._writable()
        if self.findings_json.exists():
            return
        try:
            self._write_findings_list([])
        except OSError as e:
            raise CampaignError(
                f"{self.findings_json}: cannot write ({_why(e)}); the journal {self.journal} is intact"
            ) from None
