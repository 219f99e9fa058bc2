"""``aliasfuzz bisect CASE --framework candle --versions 0.9.1..0.11.1``: the case's reproducer
built against each release, its verdicts against the reference framework's (``harness/triage/bisect.py``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.cli import EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("bisect", help="build a case's reproducer against each release of a framework and say "
                                      "where its divergence appears or disappears")
    p.add_argument("case", metavar="CASE.toml")
    p.add_argument("--framework", required=True, choices=("candle", "burn"))
    p.add_argument("--versions", required=True, help="A..B (every release from crates.io between them) or A,B,C")
    p.add_argument("--cache", help="where each release's project and target directory are kept "
                                   "(default: ~/.cache/aliasfuzz/bisect)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=cmd_bisect)


def cmd_bisect(args: argparse.Namespace) -> int:
    from harness.case.ir import load_case
    from harness.triage.bisect import (BisectError, bisect, cache_dir, cargo_observer, check_cache, parse_versions,
                                       published, verdict_words)
    from harness.targets.registry import open_runner

    # Every input checked before anything is listed, run or built.
    program = load_case(args.case)
    cache = check_cache(Path(args.cache) if args.cache else cache_dir())
    versions = parse_versions(args.versions, lambda: published(args.framework))
    runner, found = open_runner(["torch:cpu"])
    try:
        if "torch:cpu" not in runner.ids:
            raise BisectError(f"the reference torch:cpu is not available: {dict(found.unavailable)}")
        reference = verdict_words(program, runner.run_one(program)["torch:cpu"])
    finally:
        runner.close()
    if not reference:
        raise BisectError(f"{args.case}: the case binds no snapshot, so there is no verdict to bisect")
    result = bisect(args.framework, versions, reference, cargo_observer(program, args.framework, cache),
                    log=lambda line: print(f"aliasfuzz bisect: {line}", file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps({"case": args.case, "framework": args.framework, "reference": result.reference,
                          "releases": [vars(r) for r in result.rows], "summary": result.summary()}, indent=2))
    else:
        print(result.table())
        print(f"\n{args.case}: {result.summary()}")
    return EXIT_OK
