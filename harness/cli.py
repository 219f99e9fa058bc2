"""The ``aliasfuzz`` command line.

Exit statuses are the same everywhere: 0 nothing new found, 1 divergences (``repro``) or new
findings (``fuzz``), 2 bad input or a set-up problem, always with a one-line message.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

from .errors import InputError
from .ir import load_case

EXIT_OK, EXIT_FOUND, EXIT_USAGE = 0, 1, 2


def _err(message: str) -> int:
    print(f"aliasfuzz: {message}", file=sys.stderr)
    return EXIT_USAGE


def cmd_targets(args: argparse.Namespace) -> int:
    from .targets.registry import discover

    with discover() as found:
        if args.json:
            print(json.dumps({"targets": [t.info.to_json() for t in found.targets],
                              "unavailable": found.unavailable}, indent=2))
            return EXIT_OK
        from rich.console import Console
        from rich.table import Table

        table = Table(title="aliasfuzz targets")
        for col in ("target", "kind", "alt device", "versions", "ops", "methods"):
            table.add_column(col)
        for t in found.targets:
            i = t.info
            table.add_row(i.id, i.kind, i.alt or "—", ", ".join(f"{k} {v}" for k, v in i.versions.items()),
                          str(len(i.ops)), str(len(i.methods)))
        Console().print(table)
        for fw, why in found.unavailable.items():
            print(f"not available: {fw}: {why}")
    return EXIT_OK




def cmd_repro(args: argparse.Namespace) -> int:
    from .baseline import load_baseline
    from .repro import render, run_case
    from .targets.registry import open_runner, parse_target_list

    programs = [(Path(c), load_case(c)) for c in args.cases]  # validate every case before starting
    baseline = load_baseline(args.baseline)
    runner, _ = open_runner(parse_target_list(args.targets))
    infos = runner.infos
    status = EXIT_OK
    docs = []
    try:
        for path, program in programs:
            result = run_case(program, runner, infos, baseline)
            if result.findings:
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


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"targets": cmd_targets, "repro": cmd_repro}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aliasfuzz", description="Differential fuzzing of tensor aliasing "
                                     "across PyTorch, candle and burn.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("targets", help="list the targets available on this machine")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("repro", help="run case files on every target and show the divergences")
    p.add_argument("cases", nargs="+", metavar="CASE.toml")
    p.add_argument("--targets", help="comma-separated target ids or frameworks (default: all)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--baseline", help="known-divergence baseline (default: the bundled one)")

    _register_extra(sub)
    return parser


def _register_extra(sub) -> None:
    """Commands that live in their own modules register themselves here."""
    for name in ("minimize", "fuzz", "report", "bench"):
        try:
            module = __import__(f"harness.cli_{name}", fromlist=["register"])
        except ModuleNotFoundError as e:
            if e.name == f"harness.cli_{name}":
                continue
            raise
        COMMANDS[name] = module.register(sub)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except InputError as e:
        return _err(str(e))
    except KeyboardInterrupt:
        return _err("interrupted")
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
