"""``aliasfuzz minimize CASE.toml``: shrink a hand-written case to a 1-minimal one."""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import replace
from pathlib import Path

from harness.case.case_file import load_case, write_case
from harness.case.ir import CaseError
from harness.errors import InputError
from harness.files import output_file_problem


def register(sub) -> None:
    p = sub.add_parser("minimize", help="shrink a case to a 1-minimal case with the same divergence")
    p.add_argument("case", metavar="CASE.toml")
    p.add_argument("--targets", help="comma-separated target ids or frameworks (default: all)")
    p.add_argument("--signature", help="the divergence to keep (default: the case's first one)")
    p.add_argument("--out", help="where to write the minimized case (default: CASE.min.toml)")
    p.add_argument("--time", type=float, default=120.0, help="time bound in seconds")
    p.set_defaults(handler=cmd_minimize)


def cmd_minimize(args: argparse.Namespace) -> int:
    """Exit status as every command's: 1 a divergence was kept (and the minimized case written),
    0 none shows, 2 bad input, 3 the divergence kept is a harness error (a bug of aliasfuzz)."""
    from harness.fuzzing.baseline import load_baseline
    from harness.fuzzing.engine import Engine
    from harness.judging.harness_errors import is_harness_error, safe_compare
    from harness.targets.registry import open_runner, parse_target_list

    if not (math.isfinite(args.time) and args.time > 0):
        raise InputError(f"minimize: --time {args.time}: must be a finite number of seconds, more than 0")
    program = load_case(args.case)
    out = _out_path(args)
    runner, _ = open_runner(parse_target_list(args.targets))
    try:
        findings = safe_compare(program, runner.run_one(program))
        if not findings:
            print(f"aliasfuzz minimize: {args.case}: no divergence on {', '.join(runner.ids)}: nothing to keep")
            return 0
        if args.signature:
            chosen = next((f for f in findings if f.signature == args.signature), None)
            if chosen is None:
                print(
                    f"aliasfuzz: {args.case}: signature not shown; it shows: "
                    + "; ".join(f.signature for f in findings),
                    file=sys.stderr,
                )
                return 2
        else:
            chosen = findings[0]
        engine = Engine(runner, load_baseline(), shrink_time_s=args.time)
        minimized, final, result = engine.shrink(program, chosen)
        minimized = replace(minimized, title=final.sentence(), meta={"signature": final.signature})
        try:
            write_case(minimized, out)
        except OSError as e:
            raise CaseError(out, "--out", f"cannot write ({e.strerror or e})") from None
        state = "complete" if result.complete else f"stopped early after {args.time:.0f}s"
        if result.kept_as_found:
            state += "; the shrunk case did not show it when run again, so the case is kept as found"
        print(
            f"aliasfuzz minimize: {result.ops_before} -> {result.ops_after} ops, {len(minimized.tensors)} "
            f"tensor(s), {result.runs} runs in {result.seconds:.1f}s ({state})"
        )
        print(f"signature: {final.signature}")
        print(f"wrote {out}")
        if is_harness_error(final):
            print(f"aliasfuzz: {args.case}: {final.sentence()} (minimized case: {out})", file=sys.stderr)
            return 3
        return 1
    finally:
        runner.close()


def _out_path(args: argparse.Namespace) -> Path:
    """Where the minimized case goes, checked before minimizing: a regular file (or none yet) in
    an existing folder, never beside a case that is not a regular file (``/dev/stdin``)."""
    case = Path(args.case)
    out = Path(args.out) if args.out else case.with_suffix(".min.toml")
    special = Path(os.path.abspath(case)).parts[1:2] in (("dev",), ("proc",))  # /dev/stdin, /proc/self/fd/0
    if not args.out and (special or not case.is_file()):
        raise CaseError(case, "--out", "not a regular file of its own folder: give --out for the minimized case")
    if problem := output_file_problem(out):
        raise CaseError(out, "--out", problem)
    return out
