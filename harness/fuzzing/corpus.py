"""The corpus: a Hypothesis example database of the programs that showed new findings, local (a
directory) or shared between machines (Redis).

``open_database`` checks at the start that the corpus can be written (a one-line
``CampaignError`` naming ``--db`` when it cannot) and returns a ``Corpus``. A save that fails
later (the Redis server gone, the directory made read-only) never stops a campaign, and is never
silent either: ``Corpus.store`` says whether everything was stored, and the corpus counts the
failures and keeps the first and the last error for the campaign to log.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from harness.case.case_file import parse_case
from harness.case.ir import Program
from harness.errors import CampaignError
from harness.files import atomic_write
from harness.fuzzing.run_folder import RunFolder, program_from_bytes, program_to_bytes
from harness.urls import hide_password

CORPUS_KEY = b"aliasfuzz/corpus/v1"
REDIS_PREFIX = b"aliasfuzz:"
# A dead Redis host must not stall the campaign: each save gives up after this long.
REDIS_TIMEOUT_S = 5.0

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


class Corpus:
    """A corpus database and what became of the saves into it. Also usable where a Hypothesis
    ``ExampleDatabase`` is expected (``fetch``, and ``save``, which raises on failure)."""

    def __init__(self, db, name: str):
        self.db = db
        self.name = name  # "--db SPEC" (password hidden) or the default folder's path
        self.stored = 0  # entries stored
        self.failures = 0  # entries that could not be stored
        self.first_error: str | None = None
        self.last_error: str | None = None
        self.last_reason: str | None = None  # last_error without the corpus's name
        self.skipped = 0  # entries load() could not read as a program (another format version)

    def __repr__(self) -> str:
        return f"Corpus({self.name!r}, stored={self.stored}, failures={self.failures})"

    # -- the ExampleDatabase face -----------------------------------------------------------------

    def fetch(self, key: bytes):
        return self.db.fetch(key)

    def save(self, key: bytes, value: bytes) -> None:
        """Saves one entry; raises ``OSError`` or the client's error when it is not stored."""
        from hypothesis.database import DirectoryBasedExampleDatabase

        self.db.save(key, value)
        if isinstance(self.db, DirectoryBasedExampleDatabase):
            _check_saved(self.db, key, value)  # Hypothesis swallows OSError: see that it is there

    # -- what the campaign calls ------------------------------------------------------------------

    def load(self) -> list[Program]:
        return load_corpus(self)

    def store(self, *cases_toml: str) -> bool:
        """Stores the programs of these case texts. True when every one was stored; otherwise
        False, with ``failures`` counted and ``last_error`` (and ``first_error``) set. Never
        raises for a failed save."""
        ok = True
        for text in cases_toml:
            error = self._store_one(text)
            if error is None:
                self.stored += 1
                continue
            ok = False
            self.failures += 1
            self.last_reason = error
            self.last_error = f"{self.name}: cannot store a program in the corpus ({error})"
            if self.first_error is None:
                self.first_error = self.last_error
        return ok

    def summary(self) -> str | None:
        """One line for the end of a campaign when saves failed, else None."""
        if not self.failures:
            return None
        total = self.failures + self.stored
        return (
            f"{self.name}: {self.failures} of {total} corpus entr{'y' if total == 1 else 'ies'} "
            f"not stored (last error: {self.last_reason})"
        )

    def _store_one(self, text: str) -> str | None:
        import tomllib

        try:
            raw = program_to_bytes(parse_case(tomllib.loads(text)))
        except Exception as e:  # a case the harness wrote should always parse: say so if not
            return f"the case does not parse: {type(e).__name__}: {e}"
        try:
            self.save(CORPUS_KEY, raw)
        except OSError as e:
            return e.strerror or str(e) or type(e).__name__
        except Exception as e:  # the Redis client's errors (connection lost, read-only replica, ...)
            return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        return None


def _check_saved(db, key: bytes, value: bytes) -> None:
    """Raises the ``OSError`` that kept a directory database's save from writing ``value``."""
    value_path = getattr(db, "_value_path", None)
    if value_path is None:  # another Hypothesis layout: ask it instead
        if value not in set(db.fetch(key)):
            raise OSError(f"the entry is not in {db.path} after saving it")
        return
    path = Path(value_path(key, value))
    if path.exists():
        return
    # Write it ourselves, where Hypothesis would have, to learn what is wrong (or to store it).
    atomic_write(path, value)


def connect_redis(spec: str, option: str | None = "--db"):
    """``(client, shown)`` for ``--db redis://host:port/n``: a client that answered PING, and the
    option as messages show it (password hidden; ``option`` None: the URL alone). Raises a
    one-line ``CampaignError`` naming it when the URL is malformed or the server cannot be reached."""
    shown = f"{option} {hide_password(spec)}" if option else hide_password(spec)
    try:
        u = urlsplit(spec)
        port = u.port  # raises ValueError for a port that is no number or out of range
        host = u.hostname
    except ValueError as e:
        raise CampaignError(f"{shown}: not a valid Redis URL ({e}); give redis://host:port/n") from None
    if not host:
        raise CampaignError(f"{shown}: not a valid Redis URL (no host); give redis://host:port/n")
    db_path = u.path.strip("/")
    if db_path and not db_path.isdigit():
        raise CampaignError(
            f"{shown}: not a valid Redis URL (database {db_path!r} is not a number); give redis://host:port/n"
        )
    try:
        import redis  # an optional dependency: only a shared store needs it
    except ImportError:
        raise CampaignError(
            f"{shown}: the redis package is not installed; install the extra: pip install 'aliasfuzz[redis]'"
        ) from None
    try:
        client = redis.Redis.from_url(spec, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S)
    except Exception as e:
        raise CampaignError(f"{shown}: not a valid Redis URL ({e}); give redis://host:port/{port or 'n'}") from None
    try:
        client.ping()
    except Exception as e:
        raise CampaignError(f"{shown}: cannot reach Redis ({e})") from None
    return client, shown


def _open_redis(spec: str):
    client, shown = connect_redis(spec)  # says how to install redis when it is missing
    from hypothesis.extra.redis import RedisExampleDatabase  # imports redis

    check = REDIS_PREFIX + b"write-check"
    try:  # a read-only replica, a full server (maxmemory), an ACL: found now, not at the first finding
        client.set(check, b"1", ex=60)
        client.delete(check)
    except Exception as e:
        raise CampaignError(f"{shown}: cannot write the corpus ({e})") from None
    return Corpus(RedisExampleDatabase(client, key_prefix=REDIS_PREFIX), shown)


def _open_directory(spec: str | None, folder: RunFolder) -> Corpus:
    from hypothesis.database import DirectoryBasedExampleDatabase

    path = Path(spec) if spec else folder.corpus
    shown = f"--db {spec}" if spec else str(path)
    if path.exists() and not path.is_dir():
        raise CampaignError(f"{shown}: not a folder (give --db a folder or redis://host:port/n)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CampaignError(f"{shown}: cannot create the corpus folder ({e.strerror or e})") from None
    db = DirectoryBasedExampleDatabase(str(path))
    key_dir = path / db._key_path(CORPUS_KEY).name if hasattr(db, "_key_path") else None
    for where in (path, key_dir):
        if where is None or not where.is_dir():
            continue
        try:  # Hypothesis would swallow this error at every save: find it now
            fd, tmp = tempfile.mkstemp(dir=where, prefix=".aliasfuzz-write-check-")
            os.close(fd)
            os.unlink(tmp)
        except OSError as e:
            raise CampaignError(f"{shown}: cannot write the corpus ({e.strerror or e})") from None
    return Corpus(db, shown)


def open_database(spec: str | None, folder: RunFolder) -> Corpus:
    """The corpus for ``--db SPEC`` (a folder, or ``redis://host:port/n``; default: the run
    folder's ``corpus/``), checked to be writable now. Raises a one-line ``CampaignError``
    naming ``--db`` when it is malformed, unreachable or cannot be written."""
    if spec:
        m = _SCHEME.match(spec)
        if m:
            if m.group(1).lower() in ("redis", "rediss"):
                return _open_redis(spec)
            raise CampaignError(
                f"--db {hide_password(spec)}: unknown URL scheme {m.group(1)}:// (give a folder or redis://host:port/n)"
            )
    return _open_directory(spec, folder)


def load_corpus(db) -> list[Program]:
    """The programs in the corpus (a ``Corpus`` or a bare example database). Entries that are
    no program of this version are skipped (counted in ``Corpus.skipped``); a corpus that cannot
    be read is a one-line ``CampaignError``."""
    out = []
    name = getattr(db, "name", "--db")
    try:
        for raw in db.fetch(CORPUS_KEY):
            try:
                out.append(program_from_bytes(raw))
            except Exception:
                if isinstance(db, Corpus):
                    db.skipped += 1
                continue  # an entry from another format version: skip it, never fail the campaign
    except OSError as e:
        raise CampaignError(f"{name}: cannot read the corpus ({e.strerror or e})") from None
    except CampaignError:
        raise
    except Exception as e:  # the Redis client's errors
        raise CampaignError(f"{name}: cannot read the corpus ({type(e).__name__}: {e})") from None
    return out


def store_corpus(db, *cases_toml: str) -> str | None:
    """Stores the programs of these cases; never raises for a failed save. Returns None when
    all were stored, else the error (a ``Corpus`` also counts it: ``failures``, ``last_error``)."""
    corpus = db if isinstance(db, Corpus) else Corpus(db, "--db")
    before = corpus.failures
    corpus.store(*cases_toml)
    return corpus.last_error if corpus.failures > before else None
