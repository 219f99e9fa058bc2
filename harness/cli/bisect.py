"""``aliasfuzz bisect CASE --framework candle --versions 0.9.1..0.11.1``: the case's reproducer
built against each release (``harness/triage/bisect.py``). Where the case shows a divergence on
the installed release that a reproducer can check, each release's reproducer says whether it
shows; otherwise (or with ``--verdicts``) its snapshot verdicts are compared with torch's."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.cli.exits import EXIT_OK
from harness.targets.registry import RUST_SCAFFOLDS


def register(sub) -> None:
    p = sub.add_parser(
        "bisect",
        help="build a case's reproducer against each release of a framework and say "
        "where its divergence appears or disappears",
    )
    p.add_argument("case", metavar="CASE.toml")
    p.add_argument("--framework", required=True, choices=tuple(RUST_SCAFFOLDS))
    p.add_argument("--versions", required=True, help="A..B (every release from crates.io between them) or A,B,C")
    p.add_argument(
        "--cache",
        help="where each release's project and target directory are kept (default: ~/.cache/aliasfuzz/bisect)",
    )
    p.add_argument(
        "--verdicts",
        action="store_true",
        help="compare snapshot verdicts with torch's, even where the case's divergence can be checked",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=cmd_bisect)


def cmd_bisect(args: argparse.Namespace) -> int:
    from harness.case.case_file import load_case
    from harness.fuzzing.replay import run_case
    from harness.reporting.hand_over import check_of
    from harness.targets.registry import open_runner
    from harness.triage.bisect import (
        BisectError,
        bisect,
        cache_dir,
        cargo_observer,
        check_cache,
        parse_versions,
        published,
        verdict_words,
    )

    # Every input checked before anything is listed, run or built.
    program = load_case(args.case)
    cache = check_cache(Path(args.cache) if args.cache else cache_dir())
    versions = parse_versions(args.versions, lambda: published(args.framework))
    # The target a bisection checks the case on, for the installed release.
    installed = RUST_SCAFFOLDS[args.framework].cpu_target
    runner, found = open_runner(["torch:cpu", installed])
    try:
        if "torch:cpu" not in runner.ids:
            raise BisectError(f"the reference torch:cpu is not available: {dict(found.unavailable)}")
        ran = run_case(program, runner, runner.infos)
        reference = verdict_words(program, ran.traces["torch:cpu"])
    finally:
        runner.close()
    # The case's first divergence the reproducer can check, on the installed release: each
    # release's reproducer then says whether that divergence shows (any finding kind, not only
    # snapshot verdicts). Without one, the snapshot verdicts are compared with torch's.
    repro, check = None, None
    if not args.verdicts and installed in ran.traces:
        repro = ran.to_json()
        check = next((c for f in ran.findings if (c := check_of(f, repro, args.framework)) is not None), None)
    if check is None and not reference:
        raise BisectError(
            f"{args.case}: no divergence on {installed} to check and no snapshot verdict to compare, "
            "so there is nothing to bisect"
        )
    observer = cargo_observer(program, args.framework, cache, check=check)
    result = bisect(
        args.framework,
        versions,
        reference,
        observer,
        log=lambda line: print(f"aliasfuzz bisect: {line}", file=sys.stderr, flush=True),
    )
    if args.json:
        print(
            json.dumps(
                {
                    "case": args.case,
                    "framework": args.framework,
                    "reference": result.reference,
                    "releases": [vars(r) for r in result.rows],
                    "summary": result.summary(),
                },
                indent=2,
            )
        )
    else:
        print(result.table())
        print(f"\n{args.case}: {result.summary()}")
    return EXIT_OK
