"""``aliasfuzz repro CASE.toml...``: runs cases on every target and shows the divergences.

Exit status 0: every case was compared and none diverged; 1: divergences (known ones included);
2: a bad case, or a case nothing was compared on: no target ran it, or only one did (one target
is no comparison, so "no divergence" is never said of it; its table is shown all the same);
3: a harness error."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.case.case_file import load_case
from harness.cli.exits import EXIT_FOUND, EXIT_HARNESS, EXIT_OK, EXIT_USAGE


def register(sub) -> None:
    p = sub.add_parser("repro", help="run case files on every target and show the divergences")
    p.add_argument("cases", nargs="+", metavar="CASE.toml")
    p.add_argument("--targets", help="comma-separated target ids or frameworks (default: all)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--baseline", help="known-divergence baseline (default: the bundled one)")
    p.set_defaults(handler=cmd_repro)


def cmd_repro(args: argparse.Namespace) -> int:
    from harness.fuzzing.baseline import load_baseline
    from harness.fuzzing.replay import run_case
    from harness.reporting.repro import render
    from harness.targets.registry import open_runner, parse_target_list

    programs = [(Path(c), load_case(c)) for c in args.cases]  # validate every case before starting
    baseline = load_baseline(args.baseline)
    runner, _ = open_runner(parse_target_list(args.targets))
    infos = runner.infos
    baseline = baseline.for_installed(infos)  # an entry explains findings only on its versions
    status = EXIT_OK
    docs = []
    try:
        for path, program in programs:
            result = run_case(program, runner, infos, baseline)
            if result.harness_errors:
                status = EXIT_HARNESS
                _report_harness_errors("repro", path, program, result.harness_errors)
            elif result.ran_nowhere:
                status = max(status, EXIT_USAGE)
                why = "; ".join(f"{t}: {tr.status}: {tr.message}" for t, tr in result.traces.items())
                print(f"aliasfuzz: {path}: no target ran the case, so nothing was compared ({why})", file=sys.stderr)
            elif not result.compared:  # one target: no agreement to claim, as when none ran it
                status = max(status, EXIT_USAGE)
                print(f"aliasfuzz: {path}: {result.not_compared()}", file=sys.stderr)
            elif result.findings and status == EXIT_OK:
                status = EXIT_FOUND
            if args.json:
                docs.append({"case": str(path), **result.to_json()})
            else:
                if len(programs) > 1:
                    print(f"== {path}")
                render(result)
    finally:
        runner.close()
    if args.json:
        print(json.dumps(docs[0] if len(docs) == 1 else {"cases": docs}, indent=1))
    return status


def _report_harness_errors(command: str, path: Path, program, errors) -> None:
    """One line per harness error on stderr, naming the bug report that holds its traceback and
    the case."""
    from harness.case.case_file import dump_case
    from harness.judging.harness_errors import write_bug_report

    for f in errors:
        report = write_bug_report(f.sentence(), f.detail, {str(path): dump_case(program)})
        where = f"bug report: {report}" if report else "the bug report could not be written"
        print(f"aliasfuzz: {command} {path}: {f.sentence()} ({where})", file=sys.stderr)
