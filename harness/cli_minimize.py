"""``aliasfuzz minimize CASE.toml``: shrink a hand-written case to a 1-minimal one."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from .ir import load_case, write_case


def register(sub) -> callable:
    p = sub.add_parser("minimize", help="shrink a case to a 1-minimal case with the same divergence")
    p.add_argument("case", metavar="CASE.toml")
    p.add_argument("--targets", help="comma-separated target ids or frameworks (default: all)")
    p.add_argument("--signature", help="the divergence to keep (default: the case's first one)")
    p.add_argument("--out", help="where to write the minimized case (default: CASE.min.toml)")
    p.add_argument("--time", type=float, default=120.0, help="time bound in seconds")
    return cmd_minimize


def cmd_minimize(args: argparse.Namespace) -> int:
    from .engine import Engine
    from .baseline import load_baseline
    from .oracle import compare
    from .targets.registry import open_runner, parse_target_list

    program = load_case(args.case)
    runner, _ = open_runner(parse_target_list(args.targets))
    try:
        findings = compare(program, runner.run_one(program))
        if not findings:
            print(f"aliasfuzz minimize: {args.case}: no divergence on {', '.join(runner.ids)}: nothing to keep")
            return 1
        if args.signature:
            chosen = next((f for f in findings if f.signature == args.signature), None)
            if chosen is None:
                print(f"aliasfuzz: {args.case}: signature not shown; it shows: "
                      + "; ".join(f.signature for f in findings), file=sys.stderr)
                return 2
        else:
            chosen = findings[0]
        engine = Engine(runner, load_baseline(), shrink_time_s=args.time)
        minimized, final, result = engine.shrink(program, chosen)
        out = Path(args.out) if args.out else Path(args.case).with_suffix(".min.toml")
        minimized = replace(minimized, title=final.sentence(), meta={"signature": final.signature})
        write_case(minimized, out)
        state = "complete" if result.complete else f"stopped early after {args.time:.0f}s"
        print(f"aliasfuzz minimize: {result.ops_before} -> {result.ops_after} ops, {len(minimized.tensors)} "
              f"tensor(s), {result.runs} runs in {result.seconds:.1f}s ({state})")
        print(f"signature: {final.signature}")
        print(f"wrote {out}")
        return 0
    finally:
        runner.close()
