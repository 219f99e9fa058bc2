"""``aliasfuzz report RUN_DIR`` re-renders a run folder's reports; ``aliasfuzz report --history
DIR`` renders the trend over every run folder under DIR (DIR/history.html); ``aliasfuzz report
redis://host:port/n/NAME --out DIR`` writes a shared campaign (``fuzz --campaign NAME``) as the
run folder DIR, then renders it.

Exit status 0 when the report was written (warnings, one line each on stderr: a path refused
because it leads out of the run folder, a damaged folder skipped by ``--history``); 2, with one
line, when nothing could be read or the report cannot be written."""

from __future__ import annotations

import argparse
import sys

from harness.errors import CampaignError


def register(sub) -> None:
    p = sub.add_parser("report", help="re-render a run folder's report, or the history of many runs")
    p.add_argument(
        "run_dir",
        nargs="?",
        metavar="RUN_DIR",
        help="a run folder written by `aliasfuzz fuzz`, or "
        "redis://host:port/n/NAME: a shared campaign (`fuzz --campaign NAME`), written to --out first",
    )
    p.add_argument("--out", metavar="DIR", help="with redis://.../NAME: the new run folder the campaign is written to")
    p.add_argument("--history", metavar="DIR", help="render DIR/history.html over every run folder under DIR")
    p.set_defaults(handler=cmd_report)


def _warn(line: str) -> None:
    print(f"aliasfuzz report: {line}", file=sys.stderr, flush=True)


def cmd_report(args: argparse.Namespace) -> int:
    from harness.reporting.history import render_history
    from harness.reporting.report import ReportError, load_run, summary_line, write_run_reports

    if bool(args.run_dir) == bool(args.history):
        print("aliasfuzz: report: give a run folder or --history DIR (one of them)", file=sys.stderr)
        return 2
    if args.out and not (args.run_dir and _is_campaign_url(args.run_dir)):
        print("aliasfuzz: report: --out is for a shared campaign (redis://host:port/n/NAME) only", file=sys.stderr)
        return 2
    try:
        if args.history:
            print(f"aliasfuzz report: wrote {render_history(args.history, _warn)}")
        elif _is_campaign_url(args.run_dir):
            _report_campaign(args)
        else:
            run = load_run(args.run_dir)
            for p in write_run_reports(run, _warn):
                print(f"aliasfuzz report: wrote {p}")
            print(f"aliasfuzz report: {summary_line(run)}")
    except (ReportError, CampaignError) as e:
        print(f"aliasfuzz: {e}", file=sys.stderr)
        return 2
    return 0


def _is_campaign_url(run_dir: str) -> bool:
    return run_dir.lower().startswith(("redis://", "rediss://"))


def _report_campaign(args: argparse.Namespace) -> None:
    """The shared campaign ``args.run_dir`` names, written as the run folder ``--out`` with its
    reports. The reports are rendered before the folder takes its name (``export_campaign``'s
    ``finish``): a campaign that cannot be exported or rendered leaves no folder, so a retry
    works."""
    from harness.fuzzing.shared_report import export_campaign
    from harness.reporting.report import load_run, summary_line, write_run_reports
    from harness.urls import hide_password

    if not args.out:
        raise CampaignError(
            f"{hide_password(args.run_dir)}: give --out DIR, the new run folder the campaign is written to"
        )
    rendered: dict[str, object] = {}

    def render(staging) -> None:
        run = load_run(staging)
        rendered["reports"] = [p.relative_to(staging) for p in write_run_reports(run, _warn)]
        rendered["summary"] = summary_line(run)

    folder = export_campaign(args.run_dir, args.out, render)
    print(f"aliasfuzz report: wrote the campaign to {folder}")
    for p in rendered["reports"]:
        print(f"aliasfuzz report: wrote {folder / p}")
    print(f"aliasfuzz report: {rendered['summary']}")
