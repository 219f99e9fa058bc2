"""Benchmark of a shared campaign (``fuzz --campaign``), not a test: prints figures.

    PYTHONPATH=. python -m tests.bench_shared_campaign [--programs 960] [--chunk-size 16] [--slow-ms 10]
        [--targets candle:ref|candle]

Runs the same campaign (seed, programs) once on one ``aliasfuzz fuzz`` process and once on three
at the same time, each its own "machine" (own run folder, own probes), on a fresh local
``redis-server``. The target is the TEST DOUBLE fake probe (``--targets candle:ref``: one target,
so no divergence and no shrinking; ``--targets candle`` adds its planted divergence, so findings,
shrinking and sightings; ``--slow-ms`` sleeps per program, standing in for a target's own time),
so the rates say how the harness and Redis scale, not how fast any framework runs.

For each run it prints: wall time (process start to the last exit: probe and Python start-up
included) and programs per second; the Redis commands executed (``INFO commandstats`` reset
before, read after: those inside the Lua scripts counted by name, ``evalsha`` once per script
call, i.e. per round trip), per chunk; and the Redis server's CPU time (``INFO cpu``) per chunk.
From the three-machine run's Redis CPU per chunk it estimates how many machines one Redis core
serves at a given chunk rate per machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import tempfile
import time
from pathlib import Path

from tests.conftest import PY, ROOT, _redis_server
from tests.support.fake_targets import fake_probe_dir

IGNORED = {"info", "config", "ping", "flushall"}  # the benchmark's own commands


def redis_stats(client) -> tuple[dict[str, int], float]:
    stats = client.info("commandstats")
    calls = {k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()}
    cpu = client.info("cpu")
    return {k: v for k, v in calls.items() if k not in IGNORED}, cpu["used_cpu_user"] + cpu["used_cpu_sys"]


def run_machines(url: str, name: str, machines: int, args: argparse.Namespace, tmp: Path, env: dict) -> float:
    cmd = [
        PY,
        "-m",
        "harness.cli",
        "fuzz",
        "--db",
        url,
        "--campaign",
        name,
        "--targets",
        args.targets,
        "--profile",
        "quick",
        "--seed",
        "5",
        "--max-programs",
        str(args.programs),
        "--chunk-size",
        str(args.chunk_size),
        "--confirm",
        "0",
        "--shrink-time",
        "2",
        "--no-report",
    ]
    started = time.monotonic()
    procs = [
        subprocess.Popen(
            cmd + ["--out", str(tmp / f"{name}-{i}")],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(machines)
    ]
    for p in procs:
        _out, err = p.communicate(timeout=1800)
        if p.returncode not in (0, 1):
            raise SystemExit(f"a machine failed ({p.returncode}): {err.strip()}")
    return time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=960)
    ap.add_argument("--chunk-size", type=int, default=16)
    ap.add_argument("--slow-ms", type=int, default=10, help="the fake target's sleep per program")
    ap.add_argument(
        "--targets",
        default="candle:ref",
        help="candle:ref: one target, no finding (the default); "
        "candle: the fake's planted divergence too, so findings, shrinking and sightings count",
    )
    ap.add_argument(
        "--chunk-rate",
        type=float,
        default=1.0,
        help="chunks per second one machine runs on real targets, for the estimate",
    )
    args = ap.parse_args()
    import redis

    from harness.fuzzing.shared_report import snapshot

    chunks = -(-args.programs // args.chunk_size)
    print(
        f"fake target (TEST DOUBLE, {args.slow_ms} ms sleep per program), {args.programs} programs in "
        f"{chunks} chunks of {args.chunk_size}; {os.cpu_count()} CPUs"
    )
    with tempfile.TemporaryDirectory() as d, contextlib.contextmanager(_redis_server)(Path(d)) as (url, _proc):
        tmp = Path(d)
        env = fake_probe_dir(tmp, "--slow-ms", str(args.slow_ms))
        client = redis.Redis.from_url(url)
        rates, per_chunk_cpu = {}, 0.0
        for machines in (1, 3):
            name = f"bench{machines}"
            client.config_resetstat()
            _calls0, cpu0 = redis_stats(client)
            wall = run_machines(url, name, machines, args, tmp, env)
            calls, cpu1 = redis_stats(client)
            snap = snapshot(client, name)
            assert snap.done == set(range(chunks)), "not every chunk was done"
            rates[machines] = snap.programs / wall
            total = sum(calls.values())
            per_chunk_cpu = (cpu1 - cpu0) / chunks
            print(f"{machines} machine(s): {len(snap.findings)} findings, {sum(snap.sightings.values())} sightings")
            print(
                f"{machines} machine(s): {snap.programs} programs in {wall:.1f}s = {rates[machines]:.1f} programs/s; "
                f"Redis: {total} commands ({total / chunks:.1f}/chunk), {calls.get('evalsha', 0)} script calls "
                f"({calls.get('evalsha', 0) / chunks:.2f}/chunk), {1000 * per_chunk_cpu:.2f} ms CPU/chunk"
            )
            top = sorted(calls.items(), key=lambda kv: -kv[1])[:8]
            print("   commands: " + ", ".join(f"{k} {v}" for k, v in top))
        print(f"three machines against one: {rates[3] / rates[1]:.2f}x")
        serves = 1.0 / max(per_chunk_cpu * args.chunk_rate, 1e-12)
        print(
            f"estimate: one Redis core serves about {serves:,.0f} machines at {args.chunk_rate:g} chunk/s each "
            f"(its CPU per chunk, start-up and polling included)"
        )


if __name__ == "__main__":
    main()
