"""A triage store shared through Redis: the SQLite store (``store.TriageStore``) kept as one value,
``aliasfuzz:triage``, in the Redis database a campaign shares (``redis://host:port/n``), so that
machines and nightly jobs with no disk in common keep one history of root causes.

Each use copies the store into a local file and works on that copy with the usual store; a change
is written back under Redis's optimistic lock (``WATCH``, then ``MULTI``/``EXEC``). When another
process wrote the store in between, the copy is fetched again and the change made again: every
change is one the store can make twice (recording a run again changes nothing; a state set again
is the same state), so a retry loses nothing and duplicates nothing.

Invariant: a local store is never replaced or truncated. The copy each use works on is a file of
its own (a temporary one), and the value read from Redis is checked to be a triage store before
anything uses it: a garbage value is one line, and nothing local changes. A recorded run's
report reads what it shows of the shared history (the first sighting of each of its causes)
from the run folder's ``triage.json``, not from a store beside it. The first use of an empty key
starts from a copy of the local store beside the run folder when there is one (``seed``), so a
history kept on one machine moves into Redis; that local store is only read.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from harness.files import atomic_write
from harness.fuzzing.corpus import connect_redis
from harness.triage.store import TriageError, TriageStore

#: The key the store is kept under, in the URL's database.
KEY = "aliasfuzz:triage"
#: How many times a change is made again after another process wrote the store first.
MAX_TRIES = 20

_T = TypeVar("_T")


def is_shared(spec: str | os.PathLike | None) -> bool:
    """Whether a ``--store`` / ``--triage`` value names a Redis database rather than a file."""
    return isinstance(spec, str) and spec.startswith(("redis://", "rediss://"))


def fetch(url: str, work: str | Path, option: str) -> Path | None:
    """Copies the shared store into ``work`` (a file this process owns, never a user's store)
    and returns it; None when Redis holds no store. Raises a one-line ``InputError`` naming
    ``option`` when Redis cannot be used or its value is not a triage store."""
    client, shown = _connect(url, option)
    try:
        blob = client.get(KEY)
    except Exception as e:
        raise TriageError(f"{shown}: cannot read the triage store ({e})") from None
    if blob is None:
        return None
    return _copy_of(blob, Path(work), shown)


def change(url: str, work: str | Path, option: str, make: Callable[[Path], _T], seed: Path | None = None) -> _T:
    """``make(work)`` on a fresh copy of the shared store in ``work`` (a file this process owns,
    never a user's store), then the copy written back, the two as one: retried on a fresh copy
    while another process writes the store in between. With no store in Redis yet, ``make``
    starts from a copy of ``seed`` when that file exists (it is only read), else from nothing."""
    client, shown = _connect(url, option)  # says how to install redis when it is missing
    import redis

    work = Path(work)
    try:
        for _ in range(MAX_TRIES):
            with client.pipeline() as pipe:
                try:
                    pipe.watch(KEY)
                    blob = pipe.get(KEY)
                    work.unlink(missing_ok=True)  # what an attempt before this one left
                    if blob is not None:
                        _copy_of(blob, work, shown)
                    elif seed is not None and seed.is_file():
                        shutil.copyfile(seed, work)
                    result = make(work)
                    pipe.multi()
                    pipe.set(KEY, work.read_bytes())
                    pipe.execute()
                    return result
                except redis.WatchError:
                    continue
    except redis.RedisError as e:
        raise TriageError(f"{shown}: cannot update the triage store ({e})") from None
    raise TriageError(f"{shown}: the triage store changed under this update {MAX_TRIES} times in a row")


def _copy_of(blob: bytes, work: Path, shown: str) -> Path:
    """``blob``, the value read from Redis, written to ``work`` once it reads as a triage store;
    a one-line ``TriageError`` naming the key otherwise (``work`` then removed)."""
    atomic_write(work, blob)
    try:
        TriageStore(work, write=False).close()
    except TriageError as e:
        work.unlink(missing_ok=True)
        why = str(e).split(": ", 1)[-1]  # without the working copy's name
        raise TriageError(f"{shown}: the value of {KEY} ({len(blob)} bytes) is not a triage store: {why}") from None
    return work


def _connect(url: str, option: str):

    return connect_redis(url, option)
