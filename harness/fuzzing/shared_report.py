"""A shared campaign (``harness.fuzzing.shared_campaign``) read back from Redis: ``snapshot``
says what Redis holds of it (the tests and the benchmark read it too), ``export_campaign``
writes it as an ordinary run folder (``aliasfuzz report redis://host:port/n/NAME --out DIR``),
so the existing report code renders the merged campaign of every machine unchanged."""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from harness.errors import CampaignError
from harness.fuzzing import folder_setup
from harness.fuzzing.campaign import CampaignConfig
from harness.fuzzing.corpus import connect_redis
from harness.fuzzing.run_folder import RunFolder
from harness.fuzzing.run_state import RESUME_REQUIRED, json_kind, record_problem, shown
from harness.fuzzing.shared_campaign import campaign_prefix, check_config, check_name
from harness.urls import hide_password


def split_campaign_url(url: str) -> tuple[str, str]:
    """``redis://host:port/n/NAME`` -> (``redis://host:port/n``, NAME); a one-line
    ``CampaignError`` for anything else."""
    u = urlsplit(url)
    parts = u.path.strip("/").split("/")
    if u.scheme.lower() not in ("redis", "rediss") or len(parts) != 2 or not parts[0].isdigit():
        raise CampaignError(f"{hide_password(url)}: not a campaign URL; give redis://host:port/n/NAME")
    return urlunsplit((u.scheme, u.netloc, f"/{parts[0]}", u.query, u.fragment)), check_name(parts[1])


@dataclass
class CampaignSnapshot:
    """What Redis holds of a campaign (decoded)."""

    name: str
    config: dict[str, Any] | None
    counter: int = 0
    done: set[int] = field(default_factory=set)
    pending: set[int] = field(default_factory=set)
    completed_again: dict[int, int] = field(default_factory=dict)  # chunk -> completions after its first
    reissued: dict[int, int] = field(default_factory=dict)
    programs: int = 0
    machine_programs: dict[str, int] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    findings: dict[str, dict[str, Any]] = field(default_factory=dict)
    shrinks: list[tuple[str, str]] = field(default_factory=list)  # (owner, signature) per shrink started
    sightings: dict[str, int] = field(default_factory=dict)
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    started: float | None = None
    updated: float | None = None


#: The latest time a campaign's ``started`` or ``updated`` may hold (the end of year 9999): a
#: later one is no date the reports can show.
LATEST_TIME = 253402300799.0

# The keys ``snapshot`` reads, with the command that reads each.
_KEYS = (
    ("get", "config"),
    ("get", "counter"),
    ("get", "done"),
    ("zrange", "pending"),
    ("hgetall", "completed_again"),
    ("hgetall", "reissued"),
    ("get", "programs"),
    ("hgetall", "machine_programs"),
    ("lrange", "order"),
    ("hgetall", "findings"),
    ("lrange", "shrink_log"),
    ("hgetall", "sightings"),
    ("hgetall", "targets"),
    ("hgetall", "unavailable"),
    ("get", "started"),
    ("get", "updated"),
)


class _Reader:
    """Decodes what Redis holds of a campaign, every value checked: anything else (another
    type of key, a value that is no number, no JSON, no finding) is a one-line ``CampaignError``
    naming the key and, in a hash or a list, the field or item: any machine can write these keys,
    and a value no machine of this version writes must stop ``report`` with that line, never
    with an exception, and before anything is written."""

    def __init__(self, shown: str, name: str):
        self.shown, self.name, self.prefix = shown, name, campaign_prefix(name)

    def where(self, key: str, field: str | None = None) -> str:
        at = f", field {field}" if field is not None else ""
        return f"{self.shown}: campaign {self.name}: key {self.prefix}{key}{at}"

    def error(self, key: str, field: str | None, problem: str) -> CampaignError:
        return CampaignError(f"{self.where(key, field)}: {problem}")

    def text(self, raw: bytes, key: str, field: str | None = None) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.error(key, field, f"not UTF-8 text (byte {e.start})") from None

    def count(self, raw: bytes | None, key: str, field: str | None = None) -> int:
        """A non-negative integer as Redis's INCR/HINCRBY write it (None: 0)."""
        if raw is None:
            return 0
        text = self.text(raw, key, field)
        if not re.fullmatch(r"[0-9]{1,19}", text):
            raise self.error(key, field, f"must be a non-negative integer, found {shown(text)}")
        return int(text)

    def json(self, raw: bytes, key: str, field: str | None = None) -> Any:
        try:
            return json.loads(self.text(raw, key, field))
        except (ValueError, RecursionError) as e:
            raise self.error(key, field, f"not JSON ({type(e).__name__}: {str(e)[:80]})") from None

    def time(self, raw: bytes | None, key: str) -> float | None:
        if raw is None:
            return None
        text = self.text(raw, key)
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and 0 <= value <= LATEST_TIME):
            raise self.error(key, None, f"must be a time (seconds since 1970, up to year 9999), found {shown(text)}")
        return value

    def counts(self, h: dict[bytes, bytes], key: str, chunks_below: int | None = None) -> dict:
        """A hash of counts; its fields chunk numbers below ``chunks_below`` when given, else names."""
        out: dict = {}
        for k, v in h.items():
            field = self.text(k, key)
            if chunks_below is not None:
                chunk = self.count(k, key, field)
                if chunk >= chunks_below:
                    raise self.error(key, field, f"chunk {chunk} was never issued (the counter is at {chunks_below})")
                out[chunk] = self.count(v, key, field)
            else:
                out[field] = self.count(v, key, field)
        return out

    def finding(self, signature: str, raw: bytes) -> dict[str, Any]:
        """A stored finding (``SharedCampaign.store_finding``): its record as the run folder's
        journal takes it, and the texts of its case files."""
        entry = self.json(raw, "findings", signature)
        if not isinstance(entry, dict):
            raise self.error("findings", signature, f"not a stored finding (a JSON object), found {json_kind(entry)}")
        record = entry.get("record")
        if not isinstance(record, dict):
            raise self.error("findings", signature, f"record: must be an object, found {shown(record)}")
        problem = record_problem(record, RESUME_REQUIRED)
        if problem:
            raise self.error("findings", signature, f"record.{problem}")
        if record["signature"] != signature:
            raise self.error(
                "findings",
                signature,
                f"record.signature: {shown(record['signature'])} is another finding's (the field names the finding)",
            )
        for part in ("minimized", "original"):
            if not isinstance(entry.get(part), str):
                raise self.error(
                    "findings", signature, f"{part}: must be the text of a case, found {shown(entry.get(part))}"
                )
        if entry.get("repro") is not None and not isinstance(entry["repro"], dict):
            raise self.error("findings", signature, f"repro: must be an object or null, found {shown(entry['repro'])}")
        return entry


def snapshot(client, name: str, shown_as: str = "redis") -> CampaignSnapshot:
    """What Redis holds of campaign ``name``, read in one transaction and every value checked
    (``_Reader``: a one-line ``CampaignError`` naming the key and the field, ``shown_as`` naming
    the server). The configuration is checked as ``fuzz`` checks its options
    (``shared_campaign.check_config``)."""
    p = campaign_prefix(name)
    read = _Reader(shown_as, name)
    pipe = client.pipeline(transaction=True)  # one consistent view (MULTI/EXEC)
    for op, key in _KEYS:
        if op == "zrange":
            pipe.zrange(p + key, 0, -1)
        elif op == "lrange":
            pipe.lrange(p + key, 0, -1)
        else:
            getattr(pipe, op)(p + key)
    try:
        answers = pipe.execute(raise_on_error=False)
    except Exception as e:  # noqa: BLE001 - the client's errors: connection lost, timeout, ...
        raise CampaignError(f"{shown_as}: campaign {name}: Redis failed ({type(e).__name__}: {e})") from None
    for (_op, key), answer in zip(_KEYS, answers):
        if isinstance(answer, Exception):  # WRONGTYPE: the key is a list where a string belongs, ...
            raise read.error(key, None, f"Redis refused to read it ({type(answer).__name__}: {answer})")
    (
        config,
        counter,
        done,
        pending,
        completed_again,
        reissued,
        programs,
        machine_programs,
        order,
        findings,
        shrinks,
        sightings,
        targets,
        unavailable,
        started,
        updated,
    ) = answers

    config = None if config is None else check_config(read.json(config, "config"), read.where("config"))
    counter = read.count(counter, "counter")
    done_chunks = _bits(done or b"")
    if done_chunks and max(done_chunks) >= counter:
        raise read.error(
            "done", None, f"marks chunk {max(done_chunks)} done, which was never issued (the counter is at {counter})"
        )
    pending_chunks = set()
    for c in pending:
        chunk = read.count(c, "pending", read.text(c, "pending"))
        if chunk >= counter:
            raise read.error("pending", str(chunk), f"chunk {chunk} was never issued (the counter is at {counter})")
        pending_chunks.add(chunk)
    stored = {}
    for k, v in findings.items():
        signature = read.text(k, "findings")
        stored[signature] = read.finding(signature, v)
    signatures: list[str] = []
    for n, raw in enumerate(order):
        signature = read.text(raw, "order", f"item {n}")
        if signature not in stored:
            raise read.error("order", f"item {n}", f"{shown(signature)} is no finding of key {p}findings")
        if signature in signatures:
            raise read.error("order", f"item {n}", f"{shown(signature)} is listed twice")
        signatures.append(signature)
    shrink_log = []
    for n, raw in enumerate(shrinks):
        pair = read.json(raw, "shrink_log", f"item {n}")
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise read.error("shrink_log", f"item {n}", f"must be [machine, signature], found {shown(pair)}")
        shrink_log.append(tuple(pair))
    target_infos = {}
    for k, v in targets.items():
        target = read.text(k, "targets")
        info = read.json(v, "targets", target)
        if not isinstance(info, dict):
            raise read.error(
                "targets", target, f"must be an object (what the target said of itself), found {json_kind(info)}"
            )
        target_infos[target] = info
    return CampaignSnapshot(
        name,
        config,
        counter,
        done_chunks,
        pending_chunks,
        read.counts(completed_again, "completed_again", counter),
        read.counts(reissued, "reissued", counter),
        read.count(programs, "programs"),
        read.counts(machine_programs, "machine_programs"),
        signatures,
        stored,
        shrink_log,
        read.counts(sightings, "sightings"),
        target_infos,
        {
            read.text(k, "unavailable"): read.text(v, "unavailable", read.text(k, "unavailable"))
            for k, v in unavailable.items()
        },
        read.time(started, "started"),
        read.time(updated, "updated"),
    )


def _bits(bitmap: bytes) -> set[int]:
    """The offsets of the set bits of a Redis bitmap (``SETBIT``: the first bit is the high bit)."""
    return {8 * i + b for i, byte in enumerate(bitmap) for b in range(8) if byte & (0x80 >> b)}


def export_campaign(url: str, out: str | Path, finish: Callable[[Path], Any] | None = None) -> Path:
    """Writes the campaign at ``url`` (``redis://host:port/n/NAME``) as a new run folder ``out``:
    ``campaign.json`` (its configuration, the programs of its done chunks, the machines'
    processes as ``runs``), and every finding as the machine that shrank it stored it (case
    files, journal, ``findings.json``), in the order they were stored. Returns the folder.

    Everything is read and checked first (``snapshot``), then written into a fresh hidden
    folder beside ``out``; ``finish`` (the report command renders the reports there) runs on
    it, and only then does it take the name ``out``. So a failure at any step (a value in Redis
    no machine writes, a full disk, a report that cannot be rendered) leaves no folder behind
    and a retry works; ``out`` is refused, with one line, when it is there and not empty."""

    db, name = split_campaign_url(url)
    client, shown_as = connect_redis(db, option=None)
    snap = snapshot(client, name, shown_as)
    if snap.config is None:
        raise CampaignError(f"{shown_as}: no campaign {name} in this Redis database")
    c = snap.config
    config = CampaignConfig(
        out=str(out),
        seed=c["seed"],
        budget_s=c["budget_s"],
        max_programs=c["max_programs"],
        targets=c["targets"],
        profile=c["profile"],
        workers=max(1, len(snap.machine_programs)),
        db=db,
        chunk_size=c["chunk_size"],
        metamorphic_share=c["metamorphic_share"],
        campaign=name,
    )
    started = snap.started or 0.0
    state = {
        "config": config.to_json(),
        "started": started,
        "next_chunk": snap.counter,
        "programs": snap.programs,
        "elapsed_s": max(0.0, (snap.updated or started) - started),
        "replayed": 0,
        "machine": {
            "campaign": name,
            "processes": len(snap.machine_programs),
            "chunks_done": len(snap.done),
            "chunks_reissued": sum(snap.reissued.values()),
            "sightings": sum(snap.sightings.values()),
        },
        "targets": snap.targets,
        "unavailable": snap.unavailable,
        "runs": [{"machine": owner, "programs": n} for owner, n in sorted(snap.machine_programs.items())],
    }
    out = Path(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise CampaignError(f"{out}: not a folder (--out must name a new or empty folder, not a file or a link)")
    if out.exists():
        folder_setup.check_fresh(out)
    parents = folder_setup.missing_parents(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        # A fresh name (mkdir fails on one that exists), made as any folder is (the umask's mode).
        staging = out.parent / f".{out.name}.export-{secrets.token_hex(6)}"
        os.mkdir(staging)
    except OSError as e:
        folder_setup.rmdirs(parents)
        raise CampaignError(f"{out}: cannot write the run folder: {e.strerror or e}") from None
    try:
        records: list[dict[str, Any]] = []
        with RunFolder.create_new(staging) as folder:
            folder.save_state(state)
            for sig in snap.order:
                entry = snap.findings[sig]
                folder.add_finding(entry["record"], entry["minimized"], entry["original"], entry["repro"], records)
            folder.ensure_findings_list()
        if finish is not None:
            finish(staging)
        try:
            os.rename(staging, out)  # over an empty folder too; never over one that holds anything
        except OSError as e:
            raise CampaignError(
                f"{out}: cannot take the campaign ({e.strerror or e}): give --out a new or empty folder"
            ) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        folder_setup.rmdirs(parents)
        raise
    return out
