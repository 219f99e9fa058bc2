"""Where the worker's CPU goes in an engine run, stage by stage (``aliasfuzz bench``'s
``worker_stages_ms``) and function by function (``worker_profile``).

Each stage is timed on the thread that does it (``time.thread_time``), around the calls the
engine makes anyway:

- ``drawing``: drawing a chunk of programs (``generation.generate``, on the main thread);
- ``traces``: each target's batch (``Target.run_wire``, on that target's runner thread): writing
  the programs to the probe, then reading and decoding its traces (``json.loads``,
  ``Trace.from_wire``); waiting on the pipe costs no CPU;
- ``oracle``: judging a chunk (``Engine.judge``, on the main thread), the metamorphic variants'
  pairs included;
- ``rest``: what is left of the worker process's CPU (planning the variants, the pipeline, the
  interpreter's own work, other threads).

One engine run on the same programs as the throughput rounds, after them, so it does not change
what they measure; the wrappers cost microseconds a call, against milliseconds a chunk.

The profile is one more such run under ``cProfile``, on the main thread (drawing, judging, the
pipeline) and on each target's runner thread (``Target.run_wire``), in thread CPU time, merged:
its entries rank where the time goes, but profiling makes every Python call dearer (the run
takes several times as long), so its milliseconds are the profiled run's, not the engine's.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from harness.fuzzing.engine import Engine, pipeline
from harness.fuzzing.generation import generate
from harness.paths import ROOT

STAGES = ("drawing", "traces", "oracle")


def measure_worker_stages(engine: Engine, chunks: Callable[..., Any]) -> dict[str, float]:
    """CPU milliseconds per program of each stage (``STAGES``, ``rest``) and of the whole
    worker (``total``), over one pipelined run of ``chunks(drawer)``."""
    clocks: Counter[str] = Counter()
    lock = threading.Lock()

    def timed(stage: str, fn: Callable) -> Callable:
        def run(*args, **kwargs):
            start = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.thread_time() - start
                with lock:
                    clocks[stage] += spent

        return run

    engine.judge = timed("oracle", engine.judge)  # an instance attribute, removed below
    start = time.process_time()
    try:
        n = _run_wrapped(engine, chunks(timed("drawing", generate)), lambda fn: timed("traces", fn))
    finally:
        del engine.judge
    total = (time.process_time() - start) / max(n, 1) * 1e3
    out = {stage: clocks[stage] / max(n, 1) * 1e3 for stage in STAGES}
    out["rest"] = max(total - sum(out.values()), 0.0)
    out["total"] = total
    return out


def measure_worker_profile(engine: Engine, chunks: Callable[..., Any], top: int) -> list[dict[str, Any]]:
    """The ``top`` functions by own time over one profiled pipelined run of ``chunks(drawer)``:
    ``function`` (``path:line(name)``, the path from the package down), ``own_ms`` and
    ``cumulative_ms`` per program, ``calls`` per program."""
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()

    def profiled(fn: Callable) -> Callable:
        def run(*args, **kwargs):
            profile = _cpu_profile()
            with lock:
                profiles.append(profile)
            profile.enable()  # this thread only
            try:
                return fn(*args, **kwargs)
            finally:
                profile.disable()

        return run

    main = _cpu_profile()
    main.enable()
    try:
        n = _run_wrapped(engine, chunks(generate), profiled)
    finally:
        main.disable()
    stats = pstats.Stats(main)
    for profile in profiles:
        stats.add(profile)
    per = 1e3 / max(n, 1)
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:top]  # type: ignore[attr-defined]
    return [
        {"function": _where(key), "own_ms": tt * per, "cumulative_ms": ct * per, "calls": nc / max(n, 1)}
        for key, (_cc, nc, tt, ct, _callers) in rows
    ]


def _run_wrapped(engine: Engine, chunks: Any, wrap: Callable[[Callable], Callable]) -> int:
    """Programs run by one pipelined run of ``chunks``, each target's ``run_wire`` wrapped by
    ``wrap`` meanwhile (an instance attribute, removed after)."""
    engine.ran.clear()  # the throughput rounds ran these programs: run them again
    for t in engine.runner.targets:
        t.run_wire = wrap(t.run_wire)
    n = 0
    try:
        for programs, _ in pipeline(engine, chunks):
            n += len(programs)
    finally:
        for t in engine.runner.targets:
            del t.run_wire
    return n


def _cpu_profile() -> cProfile.Profile:
    """A profile of the calling thread's CPU time: a thread blocked on a pipe or a lock spends
    none (with the default clock, a runner thread's ``read`` would top the list). Built-in
    functions count in their callers: timing each ``len`` and ``isinstance`` would cost more
    than they do and push them up the list."""
    return cProfile.Profile(time.thread_time_ns, 1e-9, True, False)


def _where(key: tuple[str, int, str]) -> str:
    """``path:line(name)`` with the path from its package down (``hypothesis/...``,
    ``harness/...``); built-ins as cProfile names them."""
    path, line, name = key
    if path == "~":
        return name
    parts = path.split(os.sep)
    for root in ("site-packages", "lib"):
        if root in parts:
            parts = parts[len(parts) - parts[::-1].index(root) :]
            break
    else:
        here = str(ROOT).split(os.sep)
        if parts[: len(here)] == here:
            parts = parts[len(here) :]
    return f"{'/'.join(parts)}:{line}({name})"


def stage_figures(
    fig: dict[str, Any], engine: Engine, chunks: Callable[..., Any], log: Callable[[str], None], profile_top: int = 0
) -> None:
    """``worker_stages_ms`` (``measure_worker_stages``) and, with ``profile_top``,
    ``worker_profile`` (``measure_worker_profile``), and the lines that print them."""
    stages = fig["worker_stages_ms"] = measure_worker_stages(engine, chunks)
    log(
        f"    worker CPU per program by stage: {stages['total']:.2f} ms = "
        + " + ".join(f"{k} {stages[k]:.2f}" for k in (*STAGES, "rest"))
    )
    if profile_top > 0:
        rows = fig["worker_profile"] = measure_worker_profile(engine, chunks, profile_top)
        log(
            f"    worker profile, top {len(rows)} by own time (cProfile, main and runner threads; "
            "ms per program of the profiled run):"
        )
        for r in rows:
            log(
                f"      {r['own_ms']:6.3f} own {r['cumulative_ms']:7.3f} cumulative {r['calls']:7.1f} calls  {r['function']}"
            )
