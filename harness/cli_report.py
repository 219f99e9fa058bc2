"""``aliasfuzz report RUN_DIR`` re-renders a run folder's reports; ``aliasfuzz report --history
DIR`` renders the trend over every run folder under DIR (DIR/history.html)."""

from __future__ import annotations

import argparse
import sys


def register(sub) -> callable:
    p = sub.add_parser("report", help="re-render a run folder's report, or the history of many runs")
    p.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="a run folder written by `aliasfuzz fuzz`")
    p.add_argument("--history", metavar="DIR", help="render DIR/history.html over every run folder under DIR")
    return cmd_report


def cmd_report(args: argparse.Namespace) -> int:
    from .report import ReportError, render_history, write_reports

    if bool(args.run_dir) == bool(args.history):
        print("aliasfuzz: report: give a run folder or --history DIR (one of them)", file=sys.stderr)
        return 2
    try:
        if args.history:
            print(f"aliasfuzz report: wrote {render_history(args.history)}")
        else:
            for p in write_reports(args.run_dir):
                print(f"aliasfuzz report: wrote {p}")
    except ReportError as e:
        print(f"aliasfuzz: {e}", file=sys.stderr)
        return 2
    return 0
