"""One campaign over many machines (``aliasfuzz fuzz --db redis://host:port/n --campaign NAME``).

Every machine runs its own campaign (its own probes, its own run folder); what makes them one
campaign lives in Redis, under ``aliasfuzz:campaign:NAME:``:

- ``config``: the campaign's seed, profile, targets, chunk size, budget, program limit and
  metamorphic share, stored by the first machine (``SET NX``); a machine that gives another
  value is refused with one line naming the option (``settle``). The budget is each machine's:
  every machine fuzzes for that long; ``--max-programs`` bounds the whole campaign.
- ``counter``: the next chunk never issued (``INCR``). As with ``--workers``, chunk k's programs
  are fixed by the seed, so the campaign's programs do not depend on which machine ran what.
- ``lease:C``: the claimer of chunk C, with an expiry it renews while it works (a thread of the
  claiming process, so a machine that dies stops renewing); ``pending`` indexes the leased
  chunks not yet done by lease expiry. A chunk whose lease expired before it was done is
  re-issued to the next claimer (``reissued`` counts how often), so a killed machine loses no
  chunk. ``done`` is a bitmap of the finished chunks (a bit a chunk: a campaign of millions of
  chunks stays small); only the first completion counts its programs, and a later one is counted
  in ``completed_again`` (a slow machine whose lease had expired), so none goes unseen.
- ``shrink:SIG``: the machine shrinking a signature, a lease too (``SET NX``): a finding is
  shrunk once, by the machine that met it first; another that meets it counts a sighting
  (``sightings``, once per process) and goes on. If the shrinker dies, its lease expires and the next machine to
  meet the signature shrinks it.
- ``findings`` (signature -> the record as the run folder's ``findings.json`` holds it, less the
  file paths, with the case texts) and ``order``: the merged findings, which
  ``aliasfuzz report redis://host:port/n/NAME --out DIR`` renders into a run folder
  (``harness.fuzzing.shared_report``).

Each claim and each completion is one Lua script (atomic, one round trip): a chunk costs a few
Redis commands whatever the number of machines (docs/RELIABILITY.md has the figures).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from harness.errors import CampaignError
from harness.fuzzing.corpus import connect_redis
from harness.fuzzing.messages import FindingFound, Message, Progress, TargetsOpened
from harness.fuzzing.options import option_problem
from harness.fuzzing.run_state import json_kind, shown

# The options a campaign's machines must agree on: config key -> the option that sets it.
SHARED_OPTIONS = {
    "seed": "--seed",
    "profile": "--profile",
    "targets": "--targets",
    "chunk_size": "--chunk-size",
    "budget_s": "--budget",
    "max_programs": "--max-programs",
    "metamorphic_share": "--metamorphic",
}
DEFAULTS = {"profile": "default", "chunk_size": 64, "metamorphic_share": 0.25}
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
#: How long a lease outlives its last renewal: how long a dead machine's chunk waits to be re-issued.
LEASE_S = 60.0
# Claim -> chunk >= 0; EXHAUSTED: every chunk is done; WAIT: the rest are leased by live machines.
EXHAUSTED, WAIT = -1, -2

_CLAIM = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local ttl = tonumber(ARGV[3])
for _, c in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now_ms, 'LIMIT', 0, 16)) do
  if redis.call('GETBIT', KEYS[3], c) == 1 then
    redis.call('ZREM', KEYS[2], c)
  elseif redis.call('SET', ARGV[1] .. c, ARGV[2], 'NX', 'PX', ttl) then
    redis.call('ZADD', KEYS[2], now_ms + ttl, c)
    redis.call('HINCRBY', KEYS[4], c, 1)
    return tonumber(c)
  else
    redis.call('ZADD', KEYS[2], now_ms + redis.call('PTTL', ARGV[1] .. c), c)
  end
end
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
local limit = tonumber(ARGV[4])
if limit >= 0 and n >= limit then
  if redis.call('ZCARD', KEYS[2]) > 0 then return -2 end
  return -1
end
redis.call('INCR', KEYS[1])
redis.call('SET', ARGV[1] .. n, ARGV[2], 'PX', ttl)
redis.call('ZADD', KEYS[2], now_ms + ttl, n)
return n
"""

_DONE = """
local lease = KEYS[5]
if redis.call('SETBIT', KEYS[1], ARGV[1], 1) == 0 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('DEL', lease)
  redis.call('INCRBY', KEYS[4], ARGV[2])
  redis.call('HINCRBY', KEYS[6], ARGV[3], ARGV[2])
  redis.call('SET', KEYS[7], redis.call('TIME')[1])
  return 1
end
redis.call('HINCRBY', KEYS[3], ARGV[1], 1)
if redis.call('GET', lease) == ARGV[3] then redis.call('DEL', lease) end
return 0
"""

_RENEW = """
local renewed = 0
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('PEXPIRE', key, ARGV[2])
    local chunk = ARGV[2 + i]
    if chunk ~= '' then
      local now = redis.call('TIME')
      redis.call('ZADD', ARGV[3 + #KEYS], 'XX', tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
                 + tonumber(ARGV[2]), chunk)
    end
    renewed = renewed + 1
  end
end
return renewed
"""

_RELEASE = """
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then redis.call('DEL', key) end
end
return 0
"""

_CLAIM_SIGNATURE = """
local answer = 1
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  answer = 0
elseif not redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3]) then
  answer = 2
end
if answer == 1 then
  redis.call('RPUSH', KEYS[4], cjson.encode({ARGV[2], ARGV[1]}))
elseif ARGV[4] == '1' then
  redis.call('HINCRBY', KEYS[3], ARGV[1], 1)
end
return answer
"""
# Signature claim answers: stored already; this process's to shrink; another live machine shrinks it.
STORED, OURS, SHRINKING = 0, 1, 2

_STORE_FINDING = """
local stored = redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
if stored == 1 then redis.call('RPUSH', KEYS[2], ARGV[1]) end
if redis.call('GET', KEYS[3]) == ARGV[3] then redis.call('DEL', KEYS[3]) end
return stored
"""


def campaign_prefix(name: str) -> str:
    return f"aliasfuzz:campaign:{name}:"


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise CampaignError(
            f"--campaign {name!r}: a campaign name is letters, digits, '.', '_' and '-' "
            f"(at most 100, starting with a letter or digit)"
        )
    return name


# -- the shared options, checked ------------------------------------------------------------------


def canonical_targets(targets: list[str] | None) -> list[str] | None:
    """``targets`` in one order, each once: a campaign's targets are a set (which of them run
    does not depend on their order), so the same targets given in another order are the same
    campaign."""
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        return targets  # no list of targets: left for the caller's check to name
    return sorted(set(targets))


def check_config(config: Any, where: str) -> dict[str, Any]:
    """A shared campaign's configuration (as stored in Redis), every ``SHARED_OPTIONS`` field
    checked by ``option_problem``; a one-line ``CampaignError`` "WHERE, field KEY: what is wrong,
    found VALUE" otherwise (``where`` names the Redis key). Returns it, its targets canonical."""

    if not isinstance(config, dict):
        raise CampaignError(f"{where}: not a campaign configuration (a JSON object), found {json_kind(config)}")
    for key in SHARED_OPTIONS:
        if key not in config:
            raise CampaignError(f"{where}, field {key}: missing")
        problem = option_problem(key, config[key])
        if problem:
            raise CampaignError(f"{where}, field {key}: {problem}, found {shown(config[key])}")
    if config["budget_s"] is None and config["max_programs"] is None:
        raise CampaignError(f"{where}, fields budget_s and max_programs: both null, so the campaign would never end")
    return {**config, "targets": canonical_targets(config["targets"])}


class SharedCampaign:
    """One process's handle on a campaign in Redis: claims, leases (renewed by a thread while
    held), completions, signature claims and findings. ``owner`` names this process in every
    lease (host:pid:random), so a lease is only ever renewed or released by its claimer."""

    def __init__(self, client, name: str, lease_s: float = LEASE_S, shown: str = "--db"):
        self.client, self.name, self.lease_ms = client, check_name(name), max(1, int(lease_s * 1000))
        self.shown = shown  # the --db option as messages show it
        self.prefix = campaign_prefix(name)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self._scripts = {
            n: client.register_script(s)
            for n, s in (
                ("claim", _CLAIM),
                ("done", _DONE),
                ("renew", _RENEW),
                ("release", _RELEASE),
                ("claim_signature", _CLAIM_SIGNATURE),
                ("store", _STORE_FINDING),
            )
        }
        self._held: dict[str, str] = {}  # lease key -> its chunk ('' for a signature's lease)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.renew_errors = 0
        self.paused = False
        self._sighted: set[str] = set()  # signatures met here that another machine claimed
        self._settled: set[str] = set()  # ... and that are stored: never asked again
        self._recheck: dict[str, float] = {}  # ... being shrunk elsewhere: ask again after (monotonic)

    @classmethod
    def open(cls, db: str, name: str, lease_s: float = LEASE_S) -> SharedCampaign:

        if not db or not db.lower().startswith(("redis://", "rediss://")):
            raise CampaignError(f"--campaign {name}: needs --db redis://host:port/n (the campaign lives in Redis)")
        client, shown = connect_redis(db)
        return cls(client, name, lease_s, shown)

    def key(self, part: str) -> str:
        return self.prefix + part

    def _run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        """Runs one of the scripts; Redis lost is a one-line ``CampaignError``: this machine stops
        (its findings so far are in its run folder, and in Redis up to the last one), and the
        chunks it leased are re-issued to the other machines once their leases expire."""
        try:
            return self._scripts[script](keys=keys, args=args)
        except Exception as e:  # noqa: BLE001 - the client's errors: connection lost, timeout, OOM, ...
            raise CampaignError(
                f"{self.shown}: campaign {self.name}: Redis failed ({type(e).__name__}: {e}); "
                f"this machine stops, its chunks go to the others when their leases expire"
            ) from None

    # -- the configuration ----------------------------------------------------------------------

    def settle(self, given: dict[str, Any], fresh: dict[str, Any], fresh_where: str = "the defaults") -> dict[str, Any]:
        """The campaign's configuration: the stored one (``given``'s values that are not None
        must match it, else a one-line ``CampaignError`` naming the option), or, for the first
        machine, ``given`` completed by ``fresh`` and ``DEFAULTS``, stored now (``SET NX``: of two
        first machines, one stores and the other is checked against it). What is read from Redis
        is checked as the command line's options are (``check_config``: one line naming the key
        and the field), and so is what is stored (``fresh_where`` names where ``fresh`` came
        from). Targets are compared as sets (``canonical_targets``)."""
        first = {k: given.get(k) if given.get(k) is not None else fresh.get(k, DEFAULTS.get(k)) for k in SHARED_OPTIONS}
        key = self.key("config")
        raw = self._get(key)
        if raw is None:
            if first["budget_s"] is None and first["max_programs"] is None:
                raise CampaignError(f"--campaign {self.name}: a new campaign needs --budget or --max-programs")
            first = check_config(first, f"--campaign {self.name}: the configuration from {fresh_where}")
            try:
                stored_now = self.client.set(key, json.dumps(first), nx=True)
                if stored_now:
                    self.client.set(self.key("started"), repr(time.time()), nx=True)
            except Exception as e:  # noqa: BLE001 - the client's errors
                raise self._failed(e) from None
            if stored_now:
                return first
            raw = self._get(key)
        stored = check_config(self._json(raw, key), f"{self.shown}: campaign {self.name}: key {key}")
        for option, flag in SHARED_OPTIONS.items():
            value = given.get(option)
            if option == "targets":
                value = canonical_targets(value)
            if value is not None and value != stored.get(option):
                raise CampaignError(
                    f"{flag} {_shown(value)}: campaign {self.name} has {option} "
                    f"{_shown(stored.get(option))}; "
                    f"every machine runs it unchanged (leave {flag} out, or name another --campaign)"
                )
        return stored

    def _get(self, key: str) -> bytes | None:
        try:
            return self.client.get(key)
        except Exception as e:  # noqa: BLE001 - the client's errors: connection lost, WRONGTYPE, ...
            raise self._failed(e, key) from None

    def _failed(self, e: Exception, key: str | None = None) -> CampaignError:
        at = f" at key {key}" if key else ""
        return CampaignError(f"{self.shown}: campaign {self.name}: Redis failed{at} ({type(e).__name__}: {e})")

    def _json(self, raw: bytes, key: str) -> Any:
        """The JSON value stored at ``key``; a one-line ``CampaignError`` naming the key when it is not JSON."""
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise CampaignError(
                f"{self.shown}: campaign {self.name}: key {key}: not JSON ({type(e).__name__}: {str(e)[:80]})"
            ) from None

    # -- chunks ---------------------------------------------------------------------------------

    def claim(self, limit: int, go_on: Callable[[], bool]) -> int | None:
        """The next chunk for this process, leased: an expired lease's chunk first, then a new one
        from the counter. None once every chunk below ``limit`` (-1: none) is done, or when
        ``go_on()`` says to stop; while the last chunks are leased by others it polls, since a
        lease that expires makes its chunk this machine's to run."""
        while go_on():
            chunk = int(
                self._run(
                    "claim",
                    [self.key("counter"), self.key("pending"), self.key("done"), self.key("reissued")],
                    [self.key("lease:"), self.owner, self.lease_ms, limit],
                )
            )
            if chunk >= 0:
                self._hold(self.key(f"lease:{chunk}"), str(chunk))
                return chunk
            if chunk == EXHAUSTED:
                return None
            if self._holds_chunk():  # its own chunk, in the pipeline behind this claim: finish it first
                self.paused = True
                return None
            # WAIT: nothing to run until a lease ends one way or the other; ten looks per lease
            # period, at most one a second, so many idle machines do not load Redis.
            time.sleep(min(1.0, self.lease_ms / 10000))
        return None

    def again(self) -> bool:
        """Whether the last claim paused (the chunks left were leased, some by this process)
        rather than ended: once the worker has finished its own, it claims again."""
        paused, self.paused = self.paused, False
        return paused

    def _holds_chunk(self) -> bool:
        with self._lock:
            return any(self._held.values())

    def chunk_done(self, chunk: int, programs: int) -> bool:
        """Marks ``chunk`` done with its ``programs``; False when another machine had done it first
        (its programs are not counted again)."""
        lease = self.key(f"lease:{chunk}")
        self._drop(lease)
        return bool(
            self._run(
                "done",
                [
                    self.key("done"),
                    self.key("pending"),
                    self.key("completed_again"),
                    self.key("programs"),
                    lease,
                    self.key("machine_programs"),
                    self.key("updated"),
                ],
                [chunk, programs, self.owner],
            )
        )

    # -- findings -------------------------------------------------------------------------------

    def claim_signature(self, signature: str) -> bool:
        """True when this process is to shrink ``signature`` (its lease taken); False when it is
        stored already or another live machine is shrinking it, with a sighting counted the first
        time this process meets it. Most programs show some signature met before, so the answer
        is remembered: a stored signature for good, one being shrunk until that lease could
        have expired (then Redis is asked again: its shrinker may have died)."""
        now = time.monotonic()
        if signature in self._settled or self._recheck.get(signature, 0.0) > now:
            return False
        lease = self.key(f"shrink:{signature}")
        answer = int(
            self._run(
                "claim_signature",
                [self.key("findings"), lease, self.key("sightings"), self.key("shrink_log")],
                [signature, self.owner, self.lease_ms, "0" if signature in self._sighted else "1"],
            )
        )
        if answer == OURS:
            self._hold(lease, "")
            return True
        self._sighted.add(signature)
        if answer == STORED:
            self._settled.add(signature)
        else:
            self._recheck[signature] = now + self.lease_ms / 1000
        return False

    def store_finding(self, msg: FindingFound) -> bool:
        """Stores a finding (its record and case texts) unless its signature is stored already;
        ends this process's shrink lease on it. True when stored now."""
        record = msg.record.to_json()
        entry = {
            "record": record,
            "minimized": msg.minimized,
            "original": msg.original,
            "repro": msg.repro,
            "machine": self.owner,
            "stored": time.time(),
        }
        lease = self.key(f"shrink:{record['signature']}")
        self._drop(lease)
        return bool(
            self._run(
                "store",
                [self.key("findings"), self.key("order"), lease],
                [record["signature"], json.dumps(entry), self.owner],
            )
        )

    def note_targets(self, msg: TargetsOpened) -> None:
        pipe = self.client.pipeline(transaction=False)
        for tid, info in msg.targets.items():
            pipe.hset(self.key("targets"), tid, json.dumps(info))
        for framework, why in msg.unavailable.items():
            pipe.hset(self.key("unavailable"), framework, why)
        pipe.execute()

    # -- leases ---------------------------------------------------------------------------------

    def _hold(self, key: str, chunk: str) -> None:
        with self._lock:
            self._held[key] = chunk
        if self._renewer is None:
            self._renewer = threading.Thread(target=self._renew_loop, name="aliasfuzz-lease", daemon=True)
            self._renewer.start()

    def _drop(self, key: str) -> None:
        with self._lock:
            self._held.pop(key, None)

    def _renew_loop(self) -> None:
        # Three renewals per lease period: one lost to a slow network still leaves time for the next.
        while not self._stop.wait(self.lease_ms / 3000):
            with self._lock:
                held = dict(self._held)
            if not held:
                continue
            try:
                self._run("renew", list(held), [self.owner, self.lease_ms, *held.values(), self.key("pending")])
            except CampaignError:  # Redis unreachable for a while: the next round tries again
                self.renew_errors += 1

    def close(self) -> None:
        """Stops renewing and releases what this process still holds (a chunk the deadline cut
        short, a finding left unshrunk): released now, they are re-issued at once."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        with self._lock:
            held, self._held = list(self._held), {}
        if held:
            with contextlib.suppress(Exception):
                self._run("release", held, [self.owner])


def _shown(value: Any) -> str:
    return (
        ",".join(value)
        if isinstance(value, list)
        else "none"
        if value is None
        else f"{value:g}"
        if isinstance(value, float)
        else str(value)
    )


@contextlib.contextmanager
def joined(
    config, claim: Callable[[], int | None], emit: Callable[[Message], None], known: Callable[[str], bool]
) -> Iterator[tuple[Callable[[], int | None], Callable[[Message], None], Callable[[str], bool], Callable[[], bool]]]:
    """A worker's ``claim``, ``emit`` and ``known`` (``campaign.worker_loop``) turned into the
    shared campaign's, and its ``again``: chunks come from Redis (the local ``claim`` still says
    when this machine's budget ends), a chunk completed or a finding found is told to Redis before
    the driver, and a signature is this worker's to shrink only if its Redis claim succeeds."""
    shared = SharedCampaign.open(config.db, config.campaign, config.lease_s)
    limit = -1 if config.max_programs is None else -(-config.max_programs // config.chunk_size)

    def shared_claim() -> int | None:
        return shared.claim(limit, lambda: claim() is not None)

    def shared_emit(msg: Message) -> None:
        if isinstance(msg, Progress) and msg.chunk is not None:
            shared.chunk_done(msg.chunk, msg.programs)
        elif isinstance(msg, FindingFound):
            shared.store_finding(msg)
        elif isinstance(msg, TargetsOpened):
            shared.note_targets(msg)
        emit(msg)

    def shared_known(signature: str) -> bool:
        return known(signature) or not shared.claim_signature(signature)

    try:
        yield shared_claim, shared_emit, shared_known, shared.again
    finally:
        shared.close()
