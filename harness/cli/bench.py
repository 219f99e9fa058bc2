"""``aliasfuzz bench``: throughput of the engine against its ceiling and a naive baseline, per-target
cost, cost by program length, two workers, and memory over a long run (see ``harness/fuzzing/bench.py``)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys

from harness.files import atomic_write, output_file_problem


def register(sub) -> None:
    from generators.programs import PROFILES

    p = sub.add_parser("bench", help="measure programs/s: generation, engine, naive baseline, workers, RSS")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--programs", type=int, default=512, help="programs per throughput figure")
    p.add_argument("--chunk-size", type=int, default=64)
    p.add_argument("--profile", default="default", choices=tuple(PROFILES))
    p.add_argument(
        "--targets", help="comma-separated target ids or frameworks, whatever their device (default: every CPU target)"
    )
    p.add_argument("--spawn-programs", type=int, default=4, help="programs for the spawn-per-program baseline")
    p.add_argument("--length-programs", type=int, default=64, help="programs per length (8/16/32/64 ops)")
    p.add_argument(
        "--rss-programs",
        type=int,
        default=5000,
        help="programs in the memory run (0 skips it; the issue's figure: 100000)",
    )
    p.add_argument(
        "--repeat", type=int, default=5, help="runs per throughput figure; the middle one is reported (default 5)"
    )
    p.add_argument("--no-workers", action="store_true", help="skip the two-worker figure")
    p.add_argument(
        "--profile-top",
        type=int,
        default=12,
        help="functions in the worker's profile, by own time (0 skips the profile; default 12)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (progress goes to stderr)")
    p.add_argument(
        "--markdown",
        metavar="FILE",
        help="also write what it prints to FILE as a Markdown page, with the command that made it",
    )
    p.set_defaults(handler=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from harness.fuzzing.bench import BenchConfig, run_bench
    from harness.fuzzing.options import option_problem
    from harness.targets.registry import parse_target_list

    for name in ("programs", "chunk_size", "spawn_programs", "length_programs", "repeat"):
        if getattr(args, name) < 1:
            print(f"aliasfuzz: --{name.replace('_', '-')} must be at least 1", file=sys.stderr)
            return 2
    if problem := option_problem("chunk_size", args.chunk_size):  # as fuzz --chunk-size
        print(f"aliasfuzz: --chunk-size {args.chunk_size}: {problem}", file=sys.stderr)
        return 2
    if args.markdown and (problem := output_file_problem(args.markdown)):
        print(f"aliasfuzz: --markdown {args.markdown}: {problem}", file=sys.stderr)  # before a run of minutes
        return 2
    config = BenchConfig(
        seed=args.seed,
        programs=args.programs,
        chunk_size=args.chunk_size,
        profile=args.profile,
        targets=parse_target_list(args.targets),
        spawn_programs=args.spawn_programs,
        length_programs=args.length_programs,
        rss_programs=max(0, args.rss_programs),
        workers=not args.no_workers,
        repeat=args.repeat,
        profile_top=max(0, args.profile_top),
    )
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    result = run_bench(config, log=log)
    if args.markdown:
        atomic_write(args.markdown, markdown_page(lines, sys.argv[1:]))
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    return 0


def markdown_page(lines: list[str], argv: list[str]) -> str:
    """What a bench run printed, as a page that says which command on which machine made it."""
    command = " ".join(["aliasfuzz", *(shlex.quote(a) for a in argv)])
    return "\n".join(
        [
            "# Figures from `aliasfuzz bench`",
            "",
            f"Written by `{command}` on a machine with {os.cpu_count()} CPUs ({platform.machine()}, "
            f"{platform.system()}, Python {platform.python_version()}). Run the command again to replace this page; "
            "docs/PERFORMANCE.md says what each line measures and how to read it. The machine's speed drifts "
            "between minutes: compare figures taken in one run.",
            "",
            "```text",
            *lines,
            "```",
            "",
        ]
    )
