"""``aliasfuzz matrix``: the semantics matrix (snapshot method x op class -> follows / keeps, per
target), as Markdown and HTML with a case per row (``harness/reporting/matrix.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.exits import EXIT_OK


def register(sub) -> None:
    p = sub.add_parser(
        "matrix", help="build the semantics matrix: does each snapshot method follow or keep, per target"
    )
    p.add_argument("--targets", help="comma-separated target ids or frameworks (default: all)")
    p.add_argument(
        "--out",
        default=str(Path("reports") / "matrix"),
        help="folder for matrix.md, matrix.html and the cases (default: reports/matrix)",
    )
    p.add_argument(
        "--reproducers",
        action="store_true",
        help="also write each case's torch script and candle / burn cargo projects",
    )
    p.set_defaults(handler=cmd_matrix)


def cmd_matrix(args: argparse.Namespace) -> int:
    from harness.reporting.matrix import build, check_out, write
    from harness.targets.registry import open_runner, parse_target_list

    check_out(Path(args.out))  # before the targets start and the matrix is built, not after
    runner, _ = open_runner(parse_target_list(args.targets))
    try:
        m = build(runner)
    finally:
        runner.close()
    out = Path(args.out)
    write(m, out, reproducers=args.reproducers)
    differing = sum(1 for k in range(len(m.rows)) for t in m.targets if m.differs(k, t))
    print(
        f"aliasfuzz matrix: {len(m.rows)} rows x {len(m.targets)} targets, {differing} cells differ from "
        f"{m.reference or 'no reference'}; wrote {out / 'matrix.md'} and {out / 'matrix.html'}"
    )
    return EXIT_OK
