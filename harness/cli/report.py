"""``aliasfuzz report RUN_DIR`` re-renders a run folder's reports; ``aliasfuzz report --history
DIR`` renders the trend over every run folder under DIR (DIR/history.html).

Exit status 0 when the report was written (warnings, one line each on stderr: a path refused
because it leads out of the run folder, a damaged folder skipped by ``--history``); 2, with one
line, when nothing could be read or the report cannot be written."""

from __future__ import annotations

import argparse
import sys


def register(sub) -> None:
    p = sub.add_parser("report", help="re-render a run folder's report, or the history of many runs")
    p.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="a run folder written by `aliasfuzz fuzz`")
    p.add_argument("--history", metavar="DIR", help="render DIR/history.html over every run folder under DIR")
    p.set_defaults(handler=cmd_report)


def _warn(line: str) -> None:
    print(f"aliasfuzz report: {line}", file=sys.stderr, flush=True)


def cmd_report(args: argparse.Namespace) -> int:
    from harness.reporting.report import ReportError, load_run, summary_line, write_run_reports
    from harness.reporting.history import render_history

    if bool(args.run_dir) == bool(args.history):
        print("aliasfuzz: report: give a run folder or --history DIR (one of them)", file=sys.stderr)
        return 2
    try:
        if args.history:
            print(f"aliasfuzz report: wrote {render_history(args.history, _warn)}")
        else:
            run = load_run(args.run_dir)
            for p in write_run_reports(run, _warn):
                print(f"aliasfuzz report: wrote {p}")
            print(f"aliasfuzz report: {summary_line(run)}")
    except ReportError as e:
        print(f"aliasfuzz: {e}", file=sys.stderr)
        return 2
    return 0
