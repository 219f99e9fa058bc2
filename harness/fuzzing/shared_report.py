"""A shared campaign (``harness.fuzzing.shared_campaign``) read back from Redis: ``snapshot``
says what Redis holds of it (the tests and the benchmark read it too), ``export_campaign``
writes it as an ordinary run folder (``aliasfuzz report redis://host:port/n/NAME --out DIR``),
so the existing report code renders the merged campaign of every machine unchanged."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from harness.errors import CampaignError
from harness.fuzzing.corpus import connect_redis, hide_password
from harness.fuzzing.shared_campaign import campaign_prefix, check_name


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


def snapshot(client, name: str) -> CampaignSnapshot:
    p = campaign_prefix(name)
    pipe = client.pipeline(transaction=True)  # one consistent view (MULTI/EXEC)
    for op, key in (("get", "config"), ("get", "counter"), ("get", "done"), ("zrange", "pending"),
                    ("hgetall", "completed_again"), ("hgetall", "reissued"), ("get", "programs"),
                    ("hgetall", "machine_programs"), ("lrange", "order"), ("hgetall", "findings"),
                    ("lrange", "shrink_log"), ("hgetall", "sightings"), ("hgetall", "targets"),
                    ("hgetall", "unavailable"), ("get", "started"), ("get", "updated")):
        if op == "zrange":
            pipe.zrange(p + key, 0, -1)
        elif op == "lrange":
            pipe.lrange(p + key, 0, -1)
        else:
            getattr(pipe, op)(p + key)
    (config, counter, done, pending, completed_again, reissued, programs, machine_programs, order, findings, shrinks,
     sightings, targets, unavailable, started, updated) = pipe.execute()

    def ints(h):
        return {int(k): int(v) for k, v in h.items()}

    def text(h):
        return {k.decode(): v.decode() for k, v in h.items()}

    return CampaignSnapshot(
        name, json.loads(config) if config else None, int(counter or 0), _bits(done or b""),
        {int(c) for c in pending}, ints(completed_again), ints(reissued), int(programs or 0),
        {k: int(v) for k, v in text(machine_programs).items()}, [s.decode() for s in order],
        {k: json.loads(v) for k, v in text(findings).items()}, [tuple(json.loads(x)) for x in shrinks],
        {k: int(v) for k, v in text(sightings).items()}, {k: json.loads(v) for k, v in text(targets).items()},
        text(unavailable), float(started) if started else None, float(updated) if updated else None)


def _bits(bitmap: bytes) -> set[int]:
    """The offsets of the set bits of a Redis bitmap (``SETBIT``: the first bit is the high bit)."""
    return {8 * i + b for i, byte in enumerate(bitmap) for b in range(8) if byte & (0x80 >> b)}


def export_campaign(url: str, out: str | Path) -> Path:
    """Writes the campaign at ``url`` (``redis://host:port/n/NAME``) as a new run folder ``out``:
    ``campaign.json`` (its configuration, the programs of its done chunks, the machines'
    processes as ``runs``), and every finding as the machine that shrank it stored it (case
    files, journal, ``findings.json``), in the order they were stored. Returns the folder."""
    from harness.fuzzing.campaign import CampaignConfig
    from harness.fuzzing.run_folder import RunFolder

    db, name = split_campaign_url(url)
    client, shown = connect_redis(db, option=None)
    snap = snapshot(client, name)
    if snap.config is None:
        raise CampaignError(f"{shown}: no campaign {name} in this Redis database")
    c = snap.config
    config = CampaignConfig(out=str(out), seed=c["seed"], budget_s=c["budget_s"], max_programs=c["max_programs"],
                            targets=c["targets"], profile=c["profile"], workers=max(1, len(snap.machine_programs)),
                            db=db, chunk_size=c["chunk_size"], metamorphic_share=c["metamorphic_share"],
                            campaign=name)
    started = snap.started or 0.0
    state = {"config": config.to_json(), "started": started, "next_chunk": snap.counter, "programs": snap.programs,
             "elapsed_s": max(0.0, (snap.updated or started) - started), "replayed": 0,
             "machine": {"campaign": name, "processes": len(snap.machine_programs), "chunks_done": len(snap.done),
                         "chunks_reissued": sum(snap.reissued.values()), "sightings": sum(snap.sightings.values())},
             "targets": snap.targets, "unavailable": snap.unavailable,
             "runs": [{"machine": owner, "programs": n} for owner, n in sorted(snap.machine_programs.items())]}
    records: list[dict[str, Any]] = []
    with RunFolder.create_new(out) as folder:
        folder.save_state(state)
        for sig in snap.order:
            entry = snap.findings[sig]
            folder.add_finding(entry["record"], entry["minimized"], entry["original"], entry["repro"], records)
        folder.ensure_findings_list()
    return folder.path
