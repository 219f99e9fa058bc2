"""Benchmark: the two ways of drawing programs (harness/fuzzing/generation.py), side by side.

Not a test (nothing is asserted on time); it prints figures. Run it with
``.venv/bin/python -m tests.bench_generation [--seeds 10] [--chunks 40]``.

For each drawer, ``generate`` (a ``ConjectureData`` per program, as campaigns draw) and
``generate_given`` (the ``@given`` loop it replaced):

- drawing: programs a second over ``--chunks`` chunks of the default profile, distinct programs,
  mean length;
- ten planted findings: on the TEST DOUBLE fake probe (tests/fakes/, a planted ``clone`` that
  shares its buffer), one campaign per seed draws chunks of the quick profile until the engine
  records the planted clone verdict, then shrinks it as a campaign does (Hypothesis's shrinker
  from the recorded choices, then the domain pass). Printed per drawer: programs run until the
  finding, ops before and after shrinking, whether the result is the known minimum (two ops) and
  1-minimal, and the median shrink time.
"""

from __future__ import annotations

import argparse
import statistics
import time

from harness.fuzzing.baseline import Baseline
from harness.fuzzing.engine import Engine, chunk_seed
from harness.fuzzing.generation import generate, generate_given
from harness.shrinking.minimize import is_one_minimal
from harness.targets.runner import Runner
from tests.fakes.targets import fake_target

DRAWERS = {"generate": generate, "generate_given": generate_given}


def drawing(drawer, chunks: int) -> str:
    start = time.perf_counter()
    drawn = [p for k in range(chunks) for p in drawer(64, chunk_seed(1, k), "default")]
    seconds = time.perf_counter() - start
    return (
        f"{len(drawn) / seconds:7.1f} programs/s, {len({p.key() for p in drawn})} distinct of {len(drawn)}, "
        f"mean length {statistics.mean(len(p.ops) for p in drawn):.1f} ops"
    )


def planted(drawer, runner: Runner, seed: int, max_chunks: int = 40) -> dict | None:
    """The planted clone verdict found and shrunk from one campaign seed, or None if not found."""
    engine = Engine(runner, Baseline([]), shrink_time_s=30, drawer=drawer)
    engine.profile = "quick"
    recorded = []
    for chunk in range(max_chunks):
        engine.process(engine.generate(32, chunk_seed(seed, chunk)), recorded.append)
        hit = next((r for r in recorded if r.finding.method == "clone" and r.finding.aspect == "verdict"), None)
        if hit is not None:
            minimal = is_one_minimal(hit.minimized, engine.predicate(hit.finding, runner.ids)) == []
            return {
                "programs": engine.programs_run,
                "before": hit.shrink.ops_before,
                "after": len(hit.minimized.ops),
                "one_minimal": minimal,
                "seconds": hit.shrink.seconds,
                "hypothesis_runs": hit.shrink.hypothesis_runs,
            }
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--chunks", type=int, default=40)
    args = ap.parse_args()
    runner = Runner([fake_target("ref"), fake_target("planted")])
    try:
        for name, drawer in DRAWERS.items():
            print(f"{name}: drawing {drawing(drawer, args.chunks)}")
            found = [planted(drawer, runner, seed) for seed in range(1, args.seeds + 1)]
            got = [f for f in found if f]
            for seed, f in enumerate(found, 1):
                print(
                    f"  seed {seed:2}: "
                    + (
                        "not found"
                        if f is None
                        else f"found after {f['programs']:4} programs; shrunk {f['before']:2} -> {f['after']} ops "
                        f"({'1-minimal' if f['one_minimal'] else 'NOT 1-minimal'}) in {f['seconds']:.2f}s, "
                        f"{f['hypothesis_runs']} Hypothesis runs"
                    )
                )
            if got:
                print(
                    f"  {len(got)}/{len(found)} found; {sum(f['after'] == 2 for f in got)} at the known minimum; "
                    f"median programs to find {statistics.median(f['programs'] for f in got):.0f}; "
                    f"median shrink {statistics.median(f['seconds'] for f in got):.2f}s"
                )
    finally:
        runner.close()


if __name__ == "__main__":
    main()
