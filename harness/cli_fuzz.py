"""``aliasfuzz fuzz``: a budgeted campaign that writes a run folder and its reports."""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import datetime
from pathlib import Path

from .campaign import CampaignConfig, CampaignError, parse_duration, run_campaign


def register(sub) -> callable:
    p = sub.add_parser("fuzz", help="run a fuzzing campaign and write findings and reports")
    p.add_argument("--budget", help="time budget: 90s, 10m, 2h (default: until --max-programs)")
    p.add_argument("--max-programs", type=int, help="stop after about this many programs")
    p.add_argument("--seed", type=int, help="campaign seed (printed at start; default: random)")
    p.add_argument("--targets", help="comma-separated target ids or frameworks (default: all)")
    p.add_argument("--profile", default="default", choices=("quick", "default", "deep"))
    p.add_argument("--workers", type=int, default=1, help="worker processes, each with its own probes")
    p.add_argument("--out", help="run folder (default: reports/<timestamp>)")
    p.add_argument("--resume", metavar="DIR", help="continue the campaign in this run folder")
    p.add_argument("--db", help="corpus: a directory or redis://host:port/n (default: <out>/corpus)")
    p.add_argument("--chunk-size", type=int, default=64, help="programs generated and run per batch")
    p.add_argument("--shrink-time", type=float, default=None,
                   help="seconds to shrink each finding (default: 30, or a tenth of a shorter budget)")
    p.add_argument("--shrink-grace", type=float, default=None,
                   help="seconds past the budget for shrinking findings still unshrunk when it ends "
                        "(default: a quarter of the budget, 10 s to 5 min)")
    p.add_argument("--shrink-known", action="store_true",
                   help="shrink findings the baseline knows too (default: report them as found, after "
                        "the new ones; the baseline entry's case is their minimal form)")
    p.add_argument("--junit", help="also write JUnit XML here (one test case per signature)")
    p.add_argument("--baseline", help="known-divergence baseline (default: the bundled one)")
    p.add_argument("--no-report", action="store_true", help="skip report.md / report.html")
    return cmd_fuzz


def cmd_fuzz(args: argparse.Namespace) -> int:
    from .targets.registry import parse_target_list

    try:
        budget = parse_duration(args.budget)
        if budget is None and args.max_programs is None and not args.resume:
            raise CampaignError("give --budget or --max-programs (a campaign needs an end)")
        if args.workers < 1:
            raise CampaignError("--workers must be at least 1")
        if args.chunk_size < 1:
            raise CampaignError("--chunk-size must be at least 1")
        seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2 ** 32)
        out = args.resume or args.out or str(Path("reports") / datetime.now().strftime("%Y%m%d-%H%M%S"))
        config = CampaignConfig(out=out, seed=seed, budget_s=budget, max_programs=args.max_programs,
                                targets=parse_target_list(args.targets), profile=args.profile,
                                workers=args.workers, db=args.db, chunk_size=args.chunk_size,
                                shrink_time_s=_shrink_time(args.shrink_time, budget),
                                shrink_grace_s=_shrink_grace(args.shrink_grace, budget),
                                baseline=args.baseline, shrink_known=args.shrink_known)
        if args.resume:
            print(f"aliasfuzz fuzz: resuming {out}", flush=True)
        else:
            print(f"aliasfuzz fuzz: seed {seed}, profile {args.profile}, out {out}", flush=True)
        display = _Display()
        result = run_campaign(config, resume=bool(args.resume), log=display.log, progress=display.update)
        display.close()
    except CampaignError as e:
        print(f"aliasfuzz: {e}", file=sys.stderr)
        return 2
    new, known = len(result.new), len(result.findings) - len(result.new)
    # Shrinking holds up generation; in a short campaign it takes most of the time, so the rate
    # of programs alone would hide how fast the targets run.
    shrinking = sum(f.get("shrink_seconds") or 0.0 for f in result.findings)
    running = result.seconds - shrinking
    rates = f"{result.programs / max(result.seconds, 1e-9):.1f}/s"
    if shrinking > 0 and running > 0:
        shrunk = sum(1 for f in result.findings if f.get("shrink_seconds") is not None)
        rates += (f"; {shrinking:.1f}s of it shrinking {shrunk} findings, "
                  f"{result.programs / running:.1f}/s without")
    print(f"aliasfuzz fuzz: {result.programs} programs in {result.seconds:.1f}s ({rates}); "
          f"findings: {new} new, {known} known")
    for e in result.errors:
        print(f"aliasfuzz fuzz: worker error: {e}", file=sys.stderr)
    if not args.no_report:
        try:
            from .report import write_reports
        except ImportError:
            write_reports = None
        if write_reports is not None:
            paths = write_reports(result.folder.path)
            for p in paths:
                print(f"aliasfuzz fuzz: wrote {p}")
    if args.junit:
        from .junit import write_junit

        write_junit(result.findings, Path(args.junit))
        print(f"aliasfuzz fuzz: wrote {args.junit}")
    print(f"aliasfuzz fuzz: findings in {result.folder.findings_json}")
    if result.errors and not result.findings and result.programs == 0:
        return 2
    return 1 if new else 0


def _shrink_time(given: float | None, budget: float | None) -> float:
    """Per-finding shrink bound: a short campaign spreads its budget over more findings."""
    if given is not None:
        return given
    if budget is None:
        return 30.0
    return max(3.0, min(30.0, budget / 10))


def _shrink_grace(given: float | None, budget: float | None) -> float:
    """Time past the budget for shrinking: findings of the last chunks come in all at once (one
    chunk can hold dozens of new signatures), and a report of unshrunk cases is of little use."""
    if given is not None:
        if given < 0:
            raise CampaignError("--shrink-grace must not be negative")
        return given
    if budget is None:
        return 0.0  # no deadline: every finding is shrunk for its full --shrink-time
    return max(10.0, min(300.0, budget / 4))


class _Display:
    """Live progress in a terminal, plain log lines otherwise."""

    def __init__(self):
        self.tty = sys.stdout.isatty()
        self.last_line = 0.0
        self.started = time.monotonic()
        self.live = None
        if self.tty:
            from rich.live import Live
            from rich.text import Text

            self.live = Live(Text("starting targets..."), refresh_per_second=4, transient=True)
            self.live.start()

    def log(self, line: str) -> None:
        if self.live is not None:
            self.live.console.print(line, markup=False, highlight=False)
        else:
            print(line, flush=True)

    def update(self, state, records) -> None:
        elapsed = time.monotonic() - self.started
        programs = state.get("programs", 0)
        new = sum(1 for r in records if r["status"] == "new")
        text = (f"elapsed {elapsed:6.0f}s  programs {programs}  {programs / max(elapsed, 1e-9):6.1f}/s  "
                f"findings {new} new, {len(records) - new} known")
        if self.live is not None:
            from rich.text import Text

            self.live.update(Text(text))
        elif time.monotonic() - self.last_line >= 5:
            self.last_line = time.monotonic()
            print(text, flush=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
