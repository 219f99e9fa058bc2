"""The run folder: the one place that knows its layout (see ``harness.fuzzing.campaign`` for what each
file holds) and how a program is stored as bytes.

Beside the layout it keeps the folder's guarantees:

- one campaign at a time: ``campaign.lock`` holds an exclusive ``flock`` for as long as a
  campaign runs (the kernel drops it when the process dies, however it dies);
- a new campaign never writes into a folder that holds one already, nor into a folder of the
  user's that is not a run folder (``RunFolder.create_new``); a resume only into a run folder
  whose ``campaign.json`` has the shape the campaign reads (``RunFolder.open_existing``,
  ``load_state``);
- a set-up that fails leaves nothing behind: what ``create_new`` made is removed again while it
  holds no finding and no program has run, never a folder (or a file) that was there before;
- the journal (``findings.jsonl``) is the truth, and a finding is never lost: ``reconcile``
  restores to the journal what only ``findings.json`` still holds, and refuses when they
  contradict each other.

Every problem is a one-line ``CampaignError`` naming the file (and the key or line).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import types
import typing
from pathlib import Path
from typing import Any, Iterable

from harness.errors import CampaignError
from harness.files import atomic_write
from harness.case.ir import Program, TensorDecl, check_program


def program_to_bytes(p: Program) -> bytes:
    return json.dumps(p.to_wire(), sort_keys=True, separators=(",", ":")).encode()


def program_from_bytes(raw: bytes) -> Program:
    doc = json.loads(raw)
    tensors = tuple(TensorDecl(t["name"], t["kind"], tuple(t["shape"]),
                               tuple(t["value"]) if t.get("value") is not None else None,
                               tuple(t["grad"]) if t.get("grad") is not None else None,
                               t.get("init"), t.get("fill"), t.get("seed")) for t in doc["tensors"])
    return Program(tensors, check_program(tensors, doc["ops"]))


# ------------------------------------------------------------------------------------------------
# What campaign.json and the journal must hold.

LOCK_NAME = "campaign.lock"
TORN_NAME = "findings.jsonl.torn"  # torn journal tails, moved aside before the next line is written

# The files that make a folder a run folder: a new campaign refuses a folder holding any of them.
RUN_FILES = ("campaign.json", "findings.jsonl", "findings.json", TORN_NAME)
# What a new campaign may find in its --out and still take it: its own lock, and empty folders of
# its layout (a set-up killed before it wrote anything).
FRESH_FILES = (LOCK_NAME,)
FRESH_DIRS = ("cases", "corpus")
# Everything a campaign itself puts in its folder: what a failed set-up removes again.
OWN_NAMES = (*RUN_FILES, "cases", "corpus", LOCK_NAME)


def _nonneg_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _dict_of_dicts(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(x, dict) for x in v.values())


def _dict_of_str(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(x, str) for x in v.values())


def _list_of_dicts(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, dict) for x in v)


# key -> (required, check, what it must be). Every key run_campaign (and the report) reads.
STATE_FIELDS: dict[str, tuple[bool, Any, str]] = {
    "config": (True, lambda v: isinstance(v, dict), "must be an object (the campaign's configuration)"),
    "next_chunk": (True, _nonneg_int, "must be a non-negative integer"),
    "programs": (True, _nonneg_int, "must be a non-negative integer"),
    "elapsed_s": (True, lambda v: _number(v) and v >= 0, "must be a non-negative number"),
    "runs": (True, _list_of_dicts, "must be a list of objects"),
    "targets": (True, _dict_of_dicts, "must be an object of target -> object"),
    "unavailable": (True, _dict_of_str, "must be an object of framework -> reason"),
    "started": (False, _number, "must be a number (seconds since the epoch)"),
    "replayed": (False, _nonneg_int, "must be a non-negative integer"),
    "repeats_skipped": (False, _nonneg_int, "must be a non-negative integer"),
    "ran_nowhere": (False, _nonneg_int, "must be a non-negative integer"),
    "machine": (False, lambda v: isinstance(v, dict), "must be an object"),
}

# Fields of a journal record that something reads besides ``signature`` (which every record must
# have): checked when present.
_RECORD_FIELDS: dict[str, tuple[Any, str]] = {
    "status": (lambda v: isinstance(v, str), "must be a string"),
    "kind": (lambda v: isinstance(v, str), "must be a string"),
    "case": (lambda v: v is None or isinstance(v, str), "must be a path (a string)"),
    "original_case": (lambda v: v is None or isinstance(v, str), "must be a path (a string)"),
    "repro": (lambda v: v is None or isinstance(v, str), "must be a path (a string) or null"),
    "shrink_seconds": (lambda v: v is None or _number(v), "must be a number or null"),
}


# What a resumed campaign reads of every finding (CampaignResult.new, the report): reconcile
# requires them, besides the signature every journal line has.
RESUME_REQUIRED = ("status", "kind")


def check_state(state: Any, where: str | Path) -> dict[str, Any]:
    """Checks the shape of a campaign state (``campaign.json``): every key the campaign reads has
    the right type, no key is unknown. Raises ``CampaignError`` "WHERE: KEY: what is wrong"."""
    if not isinstance(state, dict):
        raise CampaignError(f"{where}: not a campaign state (a JSON object), found {_json_kind(state)}")
    for key in state:
        if key not in STATE_FIELDS:
            raise CampaignError(f"{where}: unknown key {key!r} (known: {', '.join(STATE_FIELDS)})")
    for key, (required, check, what) in STATE_FIELDS.items():
        if key not in state:
            if required:
                raise CampaignError(f"{where}: {key}: missing")
            continue
        if not check(state[key]):
            raise CampaignError(f"{where}: {key}: {what}, found {_shown(state[key])}")
    return state


def check_config_keys(config: dict[str, Any], fields: dict[str, Any], *, where: str | Path = "campaign.json",
                      required: Iterable[str] = ()) -> dict[str, Any]:
    """Checks a saved configuration against the fields of the configuration class, e.g.
    ``check_config_keys(state["config"], typing.get_type_hints(CampaignConfig),
    where=folder.state_json, required=("out", "seed"))``: no unknown key, no required key
    missing, each value of its field's type (``int``, ``float``, ``str``, ``bool``, ``X | None``,
    ``list[str]``; a type it does not know is not checked). Raises ``CampaignError``
    "WHERE: config.KEY: ..."; returns ``config``."""
    if not isinstance(config, dict):
        raise CampaignError(f"{where}: config: must be an object, found {_json_kind(config)}")
    for key in config:
        if key not in fields:
            raise CampaignError(f"{where}: config.{key}: unknown key (known: {', '.join(fields)})")
    for key in required:
        if key not in config:
            raise CampaignError(f"{where}: config.{key}: missing")
    for key, value in config.items():
        tp = fields[key]
        if not _is_instance(value, tp):
            raise CampaignError(f"{where}: config.{key}: must be {_type_name(tp)}, found {_shown(value)}")
    return config


def _is_instance(value: Any, tp: Any) -> bool:
    if tp is Any or isinstance(tp, (str, typing.TypeVar)):
        return True  # a field whose type is unknown here is not checked
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_is_instance(value, a) for a in typing.get_args(tp))
    if tp is None or tp is type(None):
        return value is None
    if origin is not None:  # list[str], dict[str, int], ...
        if not isinstance(value, origin if isinstance(origin, type) else object):
            return False
        args = typing.get_args(tp)
        if origin in (list, tuple, set, frozenset) and len(args) == 1:
            return all(_is_instance(v, args[0]) for v in value)
        if origin is dict and len(args) == 2:
            return all(_is_instance(k, args[0]) and _is_instance(v, args[1]) for k, v in value.items())
        return True
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is None or tp is type(None):
        return "null"
    if origin is not None:
        args = typing.get_args(tp)
        return f"a list of {_type_name(args[0])}" if origin is list and args else str(tp)
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(tp, getattr(tp, "__name__", str(tp)))


def _json_kind(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null",
            int: "a number", float: "a number"}.get(type(v), type(v).__name__)


def _shown(v: Any) -> str:
    text = json.dumps(v) if not isinstance(v, float) or math.isfinite(v) else str(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _why(e: OSError) -> str:
    return e.strerror or str(e)


def _read_regular(path: Path) -> bytes:
    """The bytes of a regular file (a FIFO or a device would block or never end: IsADirectoryError
    for a folder, OSError "not a regular file" for those)."""
    import stat

    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder", str(path))
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    with open(path, "rb") as f:
        return f.read()


# ------------------------------------------------------------------------------------------------


class RunFolder:
    """The one place that knows the run folder's layout.

    A campaign uses it as a context manager, holding the folder's lock for its whole run::

        with RunFolder.create_new(out) as folder:      # or RunFolder.open_existing(out)
            ...
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.cases = self.path / "cases"
        self.journal = self.path / "findings.jsonl"
        self.findings_json = self.path / "findings.json"
        self.state_json = self.path / "campaign.json"
        self.lock_file = self.path / LOCK_NAME
        self.torn_file = self.path / TORN_NAME
        self._lock_fd: int | None = None
        self._lock_depth = 0
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
        if self._lock_fd is not None:
            self._lock_depth += 1
            return
        while True:
            try:
                fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as e:
                raise CampaignError(f"{self.path}: cannot write the run folder: {_why(e)}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = _holder(fd)
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise CampaignError(f"{self.path}: in use by another campaign (pid {holder})") from None
                raise CampaignError(f"{self.path}: cannot lock the run folder: {_why(e)}") from None
            try:  # the file locked must still be the one at the path (a holder may have removed it)
                if os.fstat(fd).st_ino == os.stat(self.lock_file).st_ino:
                    break
            except FileNotFoundError:
                pass
            except OSError as e:
                os.close(fd)
                raise CampaignError(f"{self.path}: cannot lock the run folder: {_why(e)}") from None
            os.close(fd)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # the pid is for the message only; the lock is what counts
        self._lock_fd, self._lock_depth = fd, 1

    def release(self) -> None:
        if self._lock_fd is None:
            return
        self._lock_depth -= 1
        if self._lock_depth == 0:
            fd, self._lock_fd = self._lock_fd, None
            try:  # still holding it: whoever locks the old file next sees it gone (acquire)
                self.lock_file.unlink(missing_ok=True)
            except OSError:
                pass
            os.close(fd)  # closing the only descriptor drops the flock

    @property
    def locked(self) -> bool:
        return self._lock_fd is not None

    def lock(self) -> "RunFolder":
        """``with folder.lock():`` holds the lock for the block (see ``acquire``)."""
        self.acquire()
        return self

    def __enter__(self) -> "RunFolder":
        if self._lock_fd is None:
            self.acquire()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is not None and self._made is not None and self.locked and not self.holds_anything():
                self._remove_what_was_made()
        finally:
            self.release()

    # -- opening a folder -------------------------------------------------------------------------

    @classmethod
    def create_new(cls, path: str | Path) -> "RunFolder":
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
        parents = []  # missing parents, deepest first
        q = p.parent
        while not q.exists() and q != q.parent:
            parents.append(q)
            q = q.parent
        made_p = False
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.mkdir(p)
                made_p = True
            except FileExistsError:
                if not p.is_dir():
                    raise CampaignError(f"{p}: not a folder (--out must name a run folder)") from None
        except OSError as e:
            _rmdirs(parents)
            raise CampaignError(f"{p}: cannot write the run folder: {_why(e)}") from None
        if not made_p:  # refuse before writing even the lock file (but say so if it is in use)
            try:
                folder._check_fresh()
            except CampaignError:
                folder._raise_if_in_use()
                raise
        try:
            folder.acquire()
        except BaseException:
            _rmdirs(([p] if made_p else []) + parents)  # only if empty: never another's lock file
            raise
        try:
            there = folder._check_fresh()  # again, now that no other campaign can change it
        except BaseException:
            folder.release()  # nothing written (the lock file goes with the lock), nothing removed
            raise
        # From here on everything in the folder is this campaign's (it was empty but for what
        # _check_fresh allows, and the lock keeps other campaigns out).
        folder._made = ([p] if made_p else []) + parents
        folder._kept = {n for n in there if n in FRESH_DIRS}  # empty folders that were there: kept
        try:
            folder.create()
        except BaseException:
            folder._remove_what_was_made()
            folder.release()
            raise
        return folder

    @classmethod
    def open_existing(cls, path: str | Path) -> "RunFolder":
        """The folder of a campaign to resume, locked, its ``campaign.json`` checked
        (``load_state``). Never removes anything."""
        folder = cls(path)
        p = folder.path
        if not p.exists():
            raise CampaignError(f"{p}: no such run folder")
        if not p.is_dir():
            raise CampaignError(f"{p}: not a folder (--resume takes a run folder)")
        if not folder.state_json.exists() and not folder.state_json.is_symlink():
            raise CampaignError(f"{p}: no campaign.json: not a run folder")
        folder.acquire()
        try:
            folder.load_state()
            folder.create()
        except BaseException:
            folder.release()  # a refused resume leaves the folder as it was
            raise
        return folder

    def _raise_if_in_use(self) -> None:
        """Raises "in use by another campaign" when another process holds the lock; creates
        nothing."""
        try:
            fd = os.open(self.lock_file, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise CampaignError(f"{self.path}: in use by another campaign (pid {_holder(fd)})") from None
        finally:
            os.close(fd)

    def _check_fresh(self) -> set[str]:
        """Refuses a folder a new campaign must not take; returns the names (of ``FRESH_FILES``
        and ``FRESH_DIRS``) it holds already."""
        try:
            entries = list(os.scandir(self.path))
        except OSError as e:
            raise CampaignError(f"{self.path}: cannot read the run folder: {_why(e)}") from None
        names = {e.name for e in entries}
        if any(n in names for n in RUN_FILES):
            raise CampaignError(f"{self.path}: already holds a campaign: use --resume {self.path} or another --out")
        for e in entries:
            if e.name in FRESH_FILES and e.is_file(follow_symlinks=False):
                continue
            if e.name in FRESH_DIRS and e.is_dir(follow_symlinks=False) and not any(os.scandir(e.path)):
                continue
            raise CampaignError(f"{self.path}: not empty and not an aliasfuzz run folder (it holds {e.name!r}): "
                                f"give --out a new or empty folder")
        return names

    def holds_anything(self) -> bool:
        """A finding in the journal, or a saved state with programs run: worth keeping."""
        try:
            if self.journal.stat().st_size > 0:
                return True
        except OSError:
            pass
        return self._programs_saved > 0

    def _remove_what_was_made(self) -> None:
        """Undoes ``create_new`` (called with the lock held): the campaign's own files in the
        folder, then the folder and the parents it created, each only if it is empty then."""
        import shutil

        if self._made is None:
            return
        if self.path.is_dir():
            for name in OWN_NAMES:
                q = self.path / name
                try:
                    if q.is_dir() and not q.is_symlink():
                        shutil.rmtree(q)
                        if name in self._kept:
                            q.mkdir()
                    else:
                        q.unlink(missing_ok=True)
                except OSError:
                    pass
        _rmdirs(self._made)
        self._made = None

    def create(self) -> None:
        try:
            self.cases.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".writable"
            probe.write_text("")
            probe.unlink()
        except OSError as e:
            raise CampaignError(f"{self.path}: cannot write the run folder: {e.strerror or e}") from None

    # -- campaign.json ----------------------------------------------------------------------------

    def load_state(self, config_fields: dict[str, Any] | None = None,
                   config_required: Iterable[str] = ()) -> dict[str, Any]:
        """``campaign.json``, its shape checked (``check_state``); with ``config_fields`` its
        configuration too (``check_config_keys``)."""
        where = self.state_json
        try:
            raw = _read_regular(where)
        except FileNotFoundError:
            if not self.path.exists():
                raise CampaignError(f"{self.path}: no such run folder") from None
            raise CampaignError(f"{self.path}: no campaign.json: not a run folder") from None
        except IsADirectoryError:
            raise CampaignError(f"{where}: is a folder, not a campaign state") from None
        except NotADirectoryError:
            raise CampaignError(f"{self.path}: not a folder (--resume takes a run folder)") from None
        except OSError as e:
            raise CampaignError(f"{where}: cannot read: {_why(e)}") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CampaignError(f"{where}: not UTF-8 (byte {e.start}): not a campaign state") from None
        try:
            state = json.loads(text)
        except ValueError as e:
            raise CampaignError(f"{where}: unreadable ({e})") from None
        check_state(state, where)
        if config_fields is not None:
            check_config_keys(state["config"], config_fields, where=where, required=config_required)
        return state

    def save_state(self, state: dict[str, Any]) -> None:
        try:
            atomic_write(self.state_json, json.dumps(state, indent=2))
        except OSError as e:  # disk full, folder gone: one line, the journal is untouched
            raise CampaignError(f"{self.state_json}: cannot write ({e.strerror or e}); findings so far "
                                f"are intact in {self.journal}") from None
        programs = state.get("programs", 0) if isinstance(state, dict) else 0
        if isinstance(programs, int) and programs > self._programs_saved:
            self._programs_saved = programs

    # -- the journal and findings.json ------------------------------------------------------------

    def _read_journal(self, required: Iterable[str] = ()) -> tuple[list[dict[str, Any]], list[int], int | None]:
        """(records, their line numbers, the byte offset of a torn last line or None); each
        record has a string ``signature`` and the ``required`` keys."""
        name = f"{self.journal}"
        try:
            raw = _read_regular(self.journal)
        except FileNotFoundError:
            return [], [], None
        except IsADirectoryError:
            raise CampaignError(f"{name}: is a folder, not the findings journal") from None
        except OSError as e:
            raise CampaignError(f"{name}: cannot read: {_why(e)}") from None
        records: list[dict[str, Any]] = []
        numbers: list[int] = []
        torn: int | None = None
        offset = 0
        lines = raw.split(b"\n")
        for i, line in enumerate(lines, 1):
            start, offset = offset, offset + len(line) + 1
            last = i == len(lines)  # the bytes after the last newline: empty, or a torn write
            if not line.strip(b" \t\r\0"):
                if last and line:
                    torn = start
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise CampaignError(f"{name}:{i}: not UTF-8 (byte {e.start}): not a journal line") from None
            try:
                rec = json.loads(text)
            except ValueError as e:
                if last and text.lstrip().startswith("{"):
                    torn = start  # a kill in the middle of a write: not a finding yet
                    continue
                raise CampaignError(f"{name}:{i}: not JSON ({e})") from None
            if not isinstance(rec, dict):
                raise CampaignError(f"{name}:{i}: not a finding (a JSON object), found {_json_kind(rec)}")
            problem = _record_problem(rec, required)
            if problem:
                raise CampaignError(f"{name}:{i}: {problem}")
            records.append(rec)
            numbers.append(i)
        return records, numbers, torn

    def load_findings(self) -> list[dict[str, Any]]:
        """The journal. Tolerates a torn last line (a kill in the middle of a write) and blank
        lines; any other line that is not a finding is a ``CampaignError``
        "DIR/findings.jsonl:LINE: why"."""
        return self._read_journal()[0]

    def _load_findings_json(self, required: Iterable[str] = ()) -> list[dict[str, Any]] | None:
        where = self.findings_json
        try:
            raw = _read_regular(where)
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise CampaignError(f"{where}: is a folder, not the list of findings") from None
        except OSError as e:
            raise CampaignError(f"{where}: cannot read: {_why(e)}") from None
        hint = f"move it aside to rebuild it from {self.journal.name}"
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise CampaignError(f"{where}: unreadable ({e}): {hint}") from None
        if not isinstance(doc, list):
            raise CampaignError(f"{where}: not a list of findings, found {_json_kind(doc)}: {hint}")
        for n, rec in enumerate(doc, 1):
            problem = "not a finding (a JSON object)" if not isinstance(rec, dict) else _record_problem(rec, required)
            if problem:
                raise CampaignError(f"{where}: finding {n}: {problem}: {hint}")
        return doc

    def reconcile(self) -> tuple[list[dict[str, Any]], list[str]]:
        """Makes the journal and ``findings.json`` agree before a resume, losing nothing.

        The journal is the truth; ``findings.json`` is rewritten from it when it lags (a kill
        between the two writes). Findings that only ``findings.json`` holds (the journal was
        deleted, or cut short) are appended to the journal (fsync'ed) first. When the two
        disagree on the finding at some position, nothing is written and a ``CampaignError``
        names both. Returns the findings and the lines to log about what was restored."""
        records, numbers, _ = self._read_journal(RESUME_REQUIRED)
        listed = self._load_findings_json(RESUME_REQUIRED)
        messages: list[str] = []
        listed = listed or []
        for n, (rec, item) in enumerate(zip(records, listed), 1):
            if rec["signature"] != item["signature"]:
                raise CampaignError(
                    f"{self.findings_json}: finding {n} ({_shown(item['signature'])}) contradicts "
                    f"{self.journal.name}:{numbers[n - 1]} ({_shown(rec['signature'])}): resolve it by hand")
        if len(listed) > len(records):
            missing = listed[len(records):]
            how = f"{len(records)} finding(s)" if self.journal.exists() else "absent"
            self._append_lines(missing)
            records = records + [dict(r) for r in missing]
            messages.append(f"{self.journal}: restored {len(missing)} finding(s) from {self.findings_json.name} "
                            f"that the journal ({how}) lacked")
            gone = [r.get("case") for r in missing if isinstance(r.get("case"), str)
                    and not (self.path / r["case"]).exists()]
            if gone:
                messages.append(f"{self.path}: {len(gone)} restored finding(s) name a case file that is "
                                f"missing (first: {gone[0]})")
        if len(records) > len(listed) or not self.findings_json.exists():
            try:
                atomic_write(self.findings_json, json.dumps(records, indent=1))
            except OSError as e:
                raise CampaignError(f"{self.findings_json}: cannot write ({_why(e)}); the findings are intact "
                                    f"in {self.journal}") from None
        return records, messages

    def _append_lines(self, records: list[dict[str, Any]]) -> None:
        data = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records).encode("utf-8")
        try:
            with open(self.journal, "a+b") as f:
                self._end_on_a_line(f)
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise CampaignError(f"{self.journal}: cannot write ({_why(e)}); {self.findings_json.name} "
                                f"is left as it was") from None

    def _end_on_a_line(self, f) -> None:
        """Before appending to the journal (open in ``a+b``): a complete last line whose newline
        is missing gets it; a torn one (a kill mid-write, or anything else that is not a
        finding) is appended to ``findings.jsonl.torn`` (fsync'ed) and then cut off, so that
        the journal stays one finding per line and no byte of it is lost."""
        size = f.seek(0, os.SEEK_END)
        if not size:
            return
        start, block = size, b""
        while start > 0:  # find the start of the last line, reading back from the end
            step = min(65536, start)
            f.seek(start - step)
            block = f.read(step) + block
            start -= step
            nl = block.rfind(b"\n")
            if nl >= 0:
                start += nl + 1
                block = block[nl + 1:]
                break
        if not block:
            return
        try:
            rec = json.loads(block.decode("utf-8"))
            complete = isinstance(rec, dict) and _record_problem(rec) is None
        except ValueError:
            complete = False
        if complete:
            f.write(b"\n")
            return
        with open(self.torn_file, "ab") as t:
            t.write(block + b"\n")
            t.flush()
            os.fsync(t.fileno())
        f.truncate(start)
        f.flush()
        os.fsync(f.fileno())
        f.seek(0, os.SEEK_END)

    def add_finding(self, record: dict[str, Any], minimized: str, original: str, repro: dict | None,
                    all_records: list[dict[str, Any]]) -> None:
        try:
            self._add_finding(record, minimized, original, repro, all_records)
        except OSError as e:
            raise CampaignError(f"{self.path}: cannot write a finding ({e.strerror or e}); the "
                                f"{len(all_records)} earlier finding(s) are intact in {self.journal}") from None

    def _add_finding(self, record: dict[str, Any], minimized: str, original: str, repro: dict | None,
                     all_records: list[dict[str, Any]]) -> None:
        """Writes the case files first, then the journal line, then the list: a finding is in
        the journal only once everything it points to exists."""
        n = len(all_records) + 1
        stem = f"{n:03d}-{hashlib.sha1(record['signature'].encode()).hexdigest()[:8]}"
        atomic_write(self.cases / f"{stem}.toml", minimized)
        atomic_write(self.cases / f"{stem}.original.toml", original)
        if repro is not None:
            atomic_write(self.cases / f"{stem}.json", json.dumps(repro, indent=1))
        record = {**record, "case": f"cases/{stem}.toml", "original_case": f"cases/{stem}.original.toml",
                  "repro": f"cases/{stem}.json" if repro is not None else None}
        line = json.dumps(record, sort_keys=True) + "\n"
        with open(self.journal, "a+b") as f:
            self._end_on_a_line(f)  # a torn last line (disk full, kill): moved aside, cut off
            f.write(line.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        all_records.append(record)
        atomic_write(self.findings_json, json.dumps(all_records, indent=1))


def _holder(fd: int) -> str:
    """The pid a lock holder wrote into the lock file ("?" if none yet)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return "?"
    return text if text.isdigit() else "?"


def _rmdirs(paths: Iterable[Path]) -> None:
    """Removes each folder (deepest first) while it is empty; stops at the first that is not."""
    for q in paths:
        try:
            q.rmdir()
        except OSError:
            break


def _record_problem(rec: dict[str, Any], required: Iterable[str] = ()) -> str | None:
    if not isinstance(rec.get("signature"), str) or not rec["signature"]:
        return "no signature (a non-empty string)" if "signature" not in rec else \
            f"signature: must be a non-empty string, found {_shown(rec['signature'])}"
    for key in required:
        if key not in rec:
            return f"{key}: missing"
    for key, (check, what) in _RECORD_FIELDS.items():
        if key in rec and not check(rec[key]):
            return f"{key}: {what}, found {_shown(rec[key])}"
    return None
