"""Benchmark: the time of every snapshot's verdict (``harness.judging.verdicts.verdicts``) against
the length of the program.

Not a test (nothing is asserted on time); it prints figures. Run it with
``.venv/bin/python -m tests.bench_verdicts [--sizes 500 1000 2000 10000] [--seed 0]``.

For each size, a program of that many snapshots (``tests.support.long_programs.long_program``: writes,
maps and replaces among them) and a trace of it (``storage_trace``, a TEST DOUBLE of a target's
trace). Printed per size: the ops, the observations the trace holds, and the seconds taken by
``verdicts`` on a program object it has not seen (its per-program caches empty), then again on
the same program with a second trace (the caches warm, as for the second target of a campaign).
The program and trace are built before the clock starts.
"""

from __future__ import annotations

import argparse
import time

from harness.judging.verdicts import verdicts
from tests.support.long_programs import long_program, storage_trace


def measure(n_snapshots: int, seed: int) -> str:
    program = long_program(n_snapshots, seed)
    first, second = storage_trace(program, "one:cpu"), storage_trace(program, "two:cpu")
    start = time.perf_counter()
    judged = verdicts(program, first)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    verdicts(program, second)
    warm = time.perf_counter() - start
    observations = sum(len(step.changed) for step in first.steps)
    events = sum(len(v.events) for v in judged.values())
    return (
        f"{n_snapshots:6} snapshots: {len(program.ops):6} ops, {observations:6} observations, "
        f"{len(judged):6} relations, {events:6} events; verdicts {cold:8.3f} s cold, {warm:8.3f} s warm"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000, 10000])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for n in args.sizes:
        print(measure(n, args.seed), flush=True)


if __name__ == "__main__":
    main()
