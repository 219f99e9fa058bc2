"""Where the worker's CPU goes in an engine run, stage by stage: ``aliasfuzz bench``'s
``worker_stages_ms``.

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
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any, Callable

from harness.fuzzing.engine import Engine, pipeline
from harness.fuzzing.generation import generate

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

    engine.ran.clear()  # the throughput rounds ran these programs: run them again
    engine.judge = timed("oracle", engine.judge)  # instance attributes, removed below
    for t in engine.runner.targets:
        t.run_wire = timed("traces", t.run_wire)
    start, n = time.process_time(), 0
    try:
        for programs, _ in pipeline(engine, chunks(timed("drawing", generate))):
            n += len(programs)
    finally:
        del engine.judge
        for t in engine.runner.targets:
            del t.run_wire
    total = (time.process_time() - start) / max(n, 1) * 1e3
    out = {stage: clocks[stage] / max(n, 1) * 1e3 for stage in STAGES}
    out["rest"] = max(total - sum(out.values()), 0.0)
    out["total"] = total
    return out


def stage_figures(fig: dict[str, Any], engine: Engine, chunks: Callable[..., Any], log: Callable[[str], None]) -> None:
    """``worker_stages_ms`` (``measure_worker_stages``), and the line that prints it."""
    stages = fig["worker_stages_ms"] = measure_worker_stages(engine, chunks)
    log(f"    worker CPU per program by stage: {stages['total']:.2f} ms = "
        + " + ".join(f"{k} {stages[k]:.2f}" for k in (*STAGES, "rest")))
