"""``aliasfuzz bench``: throughput of the engine against its ceiling and a naive baseline, per-target
cost, cost by program length, two workers, and memory over a long run (see ``harness/fuzzing/bench.py``)."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub) -> None:
    from generators.programs import PROFILES

    p = sub.add_parser("bench", help="measure programs/s: generation, engine, naive baseline, workers, RSS")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--programs", type=int, default=512, help="programs per throughput figure")
    p.add_argument("--chunk-size", type=int, default=64)
    p.add_argument("--profile", default="default", choices=tuple(PROFILES))
    p.add_argument("--targets", help="comma-separated target ids or frameworks (default: every CPU target)")
    p.add_argument("--spawn-programs", type=int, default=4, help="programs for the spawn-per-program baseline")
    p.add_argument("--length-programs", type=int, default=64, help="programs per length (8/16/32/64 ops)")
    p.add_argument("--rss-programs", type=int, default=5000,
                   help="programs in the memory run (0 skips it; the issue's figure: 100000)")
    p.add_argument("--repeat", type=int, default=5,
                   help="runs per throughput figure; the middle one is reported (default 5)")
    p.add_argument("--no-workers", action="store_true", help="skip the two-worker figure")
    p.add_argument("--json", action="store_true", help="print one JSON object (progress goes to stderr)")
    p.set_defaults(handler=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from harness.fuzzing.bench import BenchConfig, run_bench
    from harness.targets.registry import parse_target_list

    for name in ("programs", "chunk_size", "spawn_programs", "length_programs", "repeat"):
        if getattr(args, name) < 1:
            print(f"aliasfuzz: --{name.replace('_', '-')} must be at least 1", file=sys.stderr)
            return 2
    config = BenchConfig(seed=args.seed, programs=args.programs, chunk_size=args.chunk_size, profile=args.profile,
                         targets=parse_target_list(args.targets), spawn_programs=args.spawn_programs,
                         length_programs=args.length_programs, rss_programs=max(0, args.rss_programs),
                         workers=not args.no_workers, repeat=args.repeat)
    log = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else \
        (lambda line: print(line, flush=True))
    result = run_bench(config, log=log)
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    return 0
