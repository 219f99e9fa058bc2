"""A triage store shared through Redis: the SQLite store (``store.TriageStore``) kept as one value,
``aliasfuzz:triage``, in the Redis database a campaign shares (``redis://host:port/n``), so that
machines and nightly jobs with no disk in common keep one history of root causes.

Each use copies the store into a local file and works on that copy with the usual store; a change
is written back under Redis's optimistic lock (``WATCH``, then ``MULTI``/``EXEC``). When another
process wrote the store in between, the copy is fetched again and the change made again: every
change is one the store can make twice (recording a run again changes nothing; a state set again
is the same state), so a retry loses nothing and duplicates nothing.

Invariant: the local file is a copy of the shared store after each use, so a report rendered from
the run folder (``reporting.views.first_seen_in_store`` reads the store beside it) shows the
shared history. The first use of an empty key uploads the local store when there is one, so a
history kept on one machine moves into Redis.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, TypeVar

from harness.files import atomic_write
from harness.triage.store import TriageError

#: The key the store is kept under, in the URL's database.
KEY = "aliasfuzz:triage"
#: How many times a change is made again after another process wrote the store first.
MAX_TRIES = 20

_T = TypeVar("_T")


def is_shared(spec: str | os.PathLike | None) -> bool:
    """Whether a ``--store`` / ``--triage`` value names a Redis database rather than a file."""
    return isinstance(spec, str) and spec.startswith(("redis://", "rediss://"))


def fetch(url: str, local: str | Path, option: str) -> Path:
    """Copies the shared store into ``local`` (left as it is when Redis holds none) and returns
    it. Raises a one-line ``InputError`` naming ``option`` when Redis cannot be used."""
    client, shown = _connect(url, option)
    try:
        blob = client.get(KEY)
    except Exception as e:
        raise TriageError(f"{shown}: cannot read the triage store ({e})") from None
    if blob is not None:
        atomic_write(local, blob)
    return Path(local)


def change(url: str, local: str | Path, option: str, make: Callable[[Path], _T]) -> _T:
    """``make(local)`` on a fresh copy of the shared store, then the copy written back, the two
    as one: retried on a fresh copy while another process writes the store in between."""
    import redis

    client, shown = _connect(url, option)
    local = Path(local)
    try:
        for _ in range(MAX_TRIES):
            with client.pipeline() as pipe:
                try:
                    pipe.watch(KEY)
                    blob = pipe.get(KEY)
                    if blob is not None:
                        atomic_write(local, blob)
                    result = make(local)
                    pipe.multi()
                    pipe.set(KEY, local.read_bytes())
                    pipe.execute()
                    return result
                except redis.WatchError:
                    continue
    except redis.RedisError as e:
        raise TriageError(f"{shown}: cannot update the triage store ({e})") from None
    raise TriageError(f"{shown}: the triage store changed under this update {MAX_TRIES} times in a row")


def _connect(url: str, option: str):
    from harness.fuzzing.corpus import connect_redis

    return connect_redis(url, option)
