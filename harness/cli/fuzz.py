"""``aliasfuzz fuzz``: a budgeted campaign that writes a run folder and its reports."""

from __future__ import annotations

import argparse
import math
import random
import signal
import sys
import time
from datetime import datetime
from pathlib import Path

from generators.programs import PROFILES
from harness.errors import InputError
from harness.files import output_file_problem
from harness.fuzzing.campaign import CampaignConfig, CampaignError, parse_duration, run_campaign, usable_cpus


def register(sub) -> None:
    p = sub.add_parser("fuzz", help="run a fuzzing campaign and write findings and reports")
    p.add_argument("--budget", help="time budget: 90s, 10m, 2h (default: until --max-programs)")
    p.add_argument("--max-programs", type=int, help="stop after about this many programs")
    p.add_argument("--seed", type=int, help="campaign seed (printed at start; default: random)")
    p.add_argument("--targets", help="comma-separated target ids or frameworks (default: all)")
    p.add_argument(
        "--profile",
        choices=tuple(PROFILES),
        help="program sizes and op weights (default: default; "
        "lazy: every program around a lazy tensor's first read; dtypes: every program in bf16 or f16)",
    )
    p.add_argument("--workers", type=int, default=1, help="worker processes, each with its own probes")
    p.add_argument("--out", help="run folder (default: reports/<timestamp>)")
    p.add_argument(
        "--resume",
        metavar="DIR",
        help="continue the campaign in this run folder (or, from any "
        "machine, the shared campaign redis://host:port/n/NAME, with a new --out)",
    )
    p.add_argument("--db", help="corpus: a directory or redis://host:port/n (default: <out>/corpus)")
    p.add_argument(
        "--campaign",
        metavar="NAME",
        help="join campaign NAME in the --db redis:// server: machines "
        "share its chunks, findings and config (see docs/REPORTS.md)",
    )
    p.add_argument(
        "--lease",
        type=float,
        default=None,
        metavar="S",
        help="with --campaign: seconds a dead machine's chunk waits before it is re-issued (default: 60)",
    )
    p.add_argument("--chunk-size", type=int, help="programs generated and run per batch (default: 64)")
    p.add_argument(
        "--shrink-time",
        type=float,
        default=None,
        help="seconds to shrink each finding (default: 30, or a tenth of a shorter budget)",
    )
    p.add_argument(
        "--shrink-grace",
        type=float,
        default=None,
        help="seconds past the budget for shrinking findings still unshrunk when it ends "
        "(default: a quarter of the budget, 10 s to 5 min)",
    )
    p.add_argument(
        "--shrink-known",
        action="store_true",
        help="shrink findings the baseline knows too (default: report them as found, after "
        "the new ones; the baseline entry's case is their minimal form)",
    )
    p.add_argument(
        "--confirm",
        type=int,
        default=3,
        metavar="N",
        help="re-run each new finding's minimized case N times on fresh probe processes; one "
        "that does not show every time is reported flaky, not new (default: 3; 0: off)",
    )
    p.add_argument(
        "--metamorphic",
        type=float,
        default=None,
        metavar="SHARE",
        help="the share of programs also run with an inert op inserted or removed, each target "
        "compared with itself (default: 0.25; 0: off)",
    )
    p.add_argument("--junit", help="also write JUnit XML here (one test case per signature)")
    p.add_argument("--baseline", help="known-divergence baseline (default: the bundled one)")
    p.add_argument("--no-report", action="store_true", help="skip report.md / report.html")
    p.add_argument(
        "--triage",
        metavar="STORE",
        help="the triage store the run is recorded in (default: "
        "triage.sqlite beside the run folder; redis://host:port/n: one store in Redis, copied there)",
    )
    p.set_defaults(handler=cmd_fuzz)


def cmd_fuzz(args: argparse.Namespace) -> int:
    from harness.fuzzing.baseline import load_baseline
    from harness.targets.registry import parse_target_list

    previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    try:
        _campaign_resume(args)
        budget = _check_options(args)
        load_baseline(args.baseline)  # a bad --baseline is one line before anything is written
        seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
        out = args.resume or args.out or str(Path("reports") / datetime.now().strftime("%Y%m%d-%H%M%S"))
        config = CampaignConfig(
            out=out,
            seed=seed,
            budget_s=budget,
            max_programs=args.max_programs,
            targets=parse_target_list(args.targets),
            profile=args.profile or "default",
            workers=args.workers,
            db=args.db,
            chunk_size=args.chunk_size or 64,
            shrink_time_s=_shrink_time(args.shrink_time, budget),
            shrink_grace_s=_shrink_grace(args.shrink_grace, budget),
            baseline=args.baseline,
            shrink_known=args.shrink_known,
            confirm_runs=args.confirm,
            metamorphic_share=0.25 if args.metamorphic is None else args.metamorphic,
        )
        config = _joined_campaign(args, config)
        if args.resume:
            print(f"aliasfuzz fuzz: resuming {out}", flush=True)
        elif config.campaign:
            print(
                f"aliasfuzz fuzz: campaign {config.campaign}, seed {config.seed}, profile {config.profile}, out {out}",
                flush=True,
            )
        else:
            print(f"aliasfuzz fuzz: seed {seed}, profile {config.profile}, out {out}", flush=True)
        display = _Display()
        try:
            result = run_campaign(config, resume=bool(args.resume), log=display.log, progress=display.update)
        finally:
            display.close()
    except CampaignError as e:
        print(f"aliasfuzz: {e}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)
    _summary(result)
    _record_triage(args, result)
    written = _write_reports(args, result)
    print(f"aliasfuzz fuzz: findings in {result.folder.findings_json}")
    if result.interrupted:
        print(f"aliasfuzz: interrupted: resume with `aliasfuzz fuzz --resume {result.folder.path}`", file=sys.stderr)
        return 2
    if not written:
        return 2
    if result.harness_errors or result.harness_failed:
        return 3
    if result.errors and not result.findings and result.programs == 0:
        return 2
    # "0 new" of nothing run is no clean result. A machine joining a shared campaign whose chunks
    # the others have all run runs none by design: the campaign's result is theirs.
    if result.programs_this_run == 0 and not config.campaign:
        print("aliasfuzz: ran no program, so nothing was compared (see the log above)", file=sys.stderr)
        return 2
    state = result.folder.load_state()
    run = result.programs - state.get("repeats_skipped", 0)
    if run > 0 and state.get("ran_nowhere", 0) >= run:
        print("aliasfuzz: no program ran on any target, so nothing was compared (see the log above)", file=sys.stderr)
        return 2
    return 1 if result.new else 0


def _sigterm_as_interrupt(signum, frame) -> None:
    """SIGTERM (a CI job cancelled, ``timeout``) ends a campaign as Ctrl-C does: state saved,
    reports written."""
    raise KeyboardInterrupt


def _check_options(args: argparse.Namespace) -> float | None:
    """The campaign's options, checked before anything starts; returns the budget in seconds."""
    from harness.fuzzing.options import option_problem
    from harness.fuzzing.shared_campaign import check_name

    budget = parse_duration(args.budget)
    if args.campaign is not None:  # '' too: never a campaign of one machine in disguise
        check_name(args.campaign)
    if budget is None and args.max_programs is None and not args.resume and not args.campaign:
        raise CampaignError("give --budget or --max-programs (a campaign needs an end)")
    # The options a shared campaign stores in Redis: one check (options.option_problem) for the
    # command line, what a joining machine reads there and a resumed campaign.json.
    for flag, key, given, value in (
        ("--budget", "budget_s", args.budget, budget),
        ("--max-programs", "max_programs", args.max_programs, args.max_programs),
        ("--chunk-size", "chunk_size", args.chunk_size, args.chunk_size),
        ("--metamorphic", "metamorphic_share", args.metamorphic, args.metamorphic),
    ):
        problem = None if value is None else option_problem(key, value)
        if problem:
            raise CampaignError(f"{flag} {given}: {problem}")
    if args.workers < 1:
        raise CampaignError(f"--workers {args.workers}: must be at least 1")
    if args.workers > (cpus := usable_cpus()):
        # Each worker starts its own targets; more than the CPUs spend the budget starting them.
        raise CampaignError(
            f"--workers {args.workers}: more than the {cpus} CPU(s) this machine gives aliasfuzz "
            f"(each worker runs its own targets); give at most {cpus}"
        )
    if args.confirm < 0:
        raise CampaignError(f"--confirm {args.confirm}: must be 0 (off) or more runs")
    for flag, value in (("--shrink-time", args.shrink_time), ("--shrink-grace", args.shrink_grace)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise CampaignError(f"{flag} {value}: must be a finite number of seconds, 0 or more")
    if args.lease is not None and not (math.isfinite(args.lease) and args.lease > 0):
        raise CampaignError(f"--lease {args.lease}: must be a finite number of seconds, more than 0")
    if args.lease is not None and not args.campaign and not args.resume:
        raise CampaignError("--lease: only with --campaign NAME")
    if args.junit and (problem := output_file_problem(args.junit)):
        raise CampaignError(f"--junit {args.junit}: {problem}")  # before a campaign, not after it
    if args.resume:
        if args.out and Path(args.out) != Path(args.resume):
            raise CampaignError(f"--out {args.out} with --resume {args.resume}: a resume writes to its own folder")
        _check_resume(args)
    return budget


def _check_resume(args: argparse.Namespace) -> None:
    """A resume continues the same campaign: an option that would make it another one (its seed,
    targets, profile, corpus or baseline) is refused rather than ignored."""
    from harness.fuzzing.run_folder import RunFolder
    from harness.fuzzing.shared_campaign import canonical_targets
    from harness.targets.registry import parse_target_list
    from harness.urls import has_hidden_password, hide_password

    saved = RunFolder(args.resume).load_state().get("config", {})
    # Compared as stored: targets as a set, the corpus URL with its password hidden (never stored).
    given = {
        "seed": args.seed,
        "targets": canonical_targets(parse_target_list(args.targets)),
        "profile": args.profile,
        "db": args.db and hide_password(args.db),
        "baseline": args.baseline,
        "chunk_size": args.chunk_size,
        "metamorphic_share": args.metamorphic,
    }
    stored = {
        **saved,
        "targets": canonical_targets(saved.get("targets")),
        "db": hide_password(saved["db"]) if isinstance(saved.get("db"), str) else saved.get("db"),
    }
    for key, value in given.items():
        if value is not None and value != stored.get(key):
            flag = {"metamorphic_share": "--metamorphic"}.get(key, "--" + key.replace("_", "-"))
            raise CampaignError(
                f"{flag} {value}: the campaign in {args.resume} has {key} {stored.get(key)!r}; "
                f"a resume continues it unchanged (leave {flag} out, or start a new --out)"
            )
    if args.db is None and has_hidden_password(saved.get("db")):
        raise CampaignError(
            f"--resume {args.resume}: its corpus is --db {saved['db']}, whose password is never "
            f"stored: give --db with the password again"
        )


def _campaign_resume(args: argparse.Namespace) -> None:
    """``--resume redis://host:port/n/NAME`` resumes a shared campaign from any machine: it joins
    campaign NAME (``--db redis://host:port/n --campaign NAME``) with a new run folder."""
    if not args.resume or not args.resume.lower().startswith(("redis://", "rediss://")):
        return
    from harness.fuzzing.shared_report import split_campaign_url
    from harness.urls import hide_password

    db, name = split_campaign_url(args.resume)
    for flag, given, value in (("--db", args.db, db), ("--campaign", args.campaign, name)):
        if given is not None and given != value:
            raise CampaignError(
                f"{flag} {hide_password(given)} with --resume {hide_password(args.resume)}: the URL "
                f"names the campaign (leave {flag} out)"
            )
    args.db, args.campaign, args.resume = db, name, None


def _joined_campaign(args: argparse.Namespace, config: CampaignConfig) -> CampaignConfig:
    """``config`` as the shared campaign has it (``--campaign``, or a resumed run folder of one):
    the options every machine shares come from Redis (the first machine stores its own there; a
    joining machine that gives another value is refused, one line naming the option); unchanged
    without a campaign."""
    from dataclasses import replace

    from harness.fuzzing.run_folder import RunFolder
    from harness.fuzzing.shared_campaign import LEASE_S, SharedCampaign

    name, db, lease, fresh, fresh_where = args.campaign, args.db, args.lease, {"seed": config.seed}, "the command line"
    if args.resume:
        saved = RunFolder(args.resume).load_state().get("config", {})
        name, db = name or saved.get("campaign"), db or saved.get("db")
        lease = lease or saved.get("lease_s")
        fresh = saved  # a Redis that lost the campaign gets it back as this folder ran it
        fresh_where = str(RunFolder(args.resume).state_json)
    if not name:
        return config
    given = {
        "seed": args.seed,
        "profile": args.profile,
        "targets": config.targets,
        "chunk_size": args.chunk_size,
        "budget_s": config.budget_s,
        "max_programs": args.max_programs,
        "metamorphic_share": args.metamorphic,
    }
    shared = SharedCampaign.open(db, name).settle(given, fresh, fresh_where)
    budget = shared["budget_s"]
    return replace(
        config,
        campaign=name,
        db=db,
        lease_s=lease or LEASE_S,
        seed=shared["seed"],
        profile=shared["profile"],
        targets=shared["targets"],
        chunk_size=shared["chunk_size"],
        budget_s=budget,
        max_programs=shared["max_programs"],
        metamorphic_share=shared["metamorphic_share"],
        shrink_time_s=_shrink_time(args.shrink_time, budget),
        shrink_grace_s=_shrink_grace(args.shrink_grace, budget),
    )


def _summary(result) -> None:
    new, known = len(result.new), len(result.findings) - len(result.new) - len(result.harness_errors)
    # Shrinking holds up generation; in a short campaign it takes most of the time, so the rate
    # of programs alone would hide how fast the targets run.
    shrinking = sum(f.get("shrink_seconds") or 0.0 for f in result.findings)
    running = result.seconds - shrinking
    rates = f"{result.programs / max(result.seconds, 1e-9):.1f}/s"
    if shrinking > 0 and running > 0:
        shrunk = sum(1 for f in result.findings if f.get("shrink_seconds") is not None)
        rates += f"; {shrinking:.1f}s of it shrinking {shrunk} findings, {result.programs / running:.1f}/s without"
    print(
        f"aliasfuzz fuzz: {result.programs} programs in {result.seconds:.1f}s ({rates}); "
        f"findings: {new} new, {known} known"
    )
    for f in result.harness_errors:
        print(
            f"aliasfuzz fuzz: HARNESS ERROR (a bug of aliasfuzz): {f['sentence']} -> {result.folder.path / f['case']}",
            file=sys.stderr,
        )
    for e in result.errors:
        print(f"aliasfuzz fuzz: worker error: {e}", file=sys.stderr)
    nowhere = result.folder.load_state().get("ran_nowhere", 0)
    if nowhere:  # never agreement: nothing was compared
        print(f"aliasfuzz fuzz: warning: {nowhere} program(s) ran on no target, so were not compared", file=sys.stderr)


def _record_triage(args: argparse.Namespace, result) -> None:
    """Records the run in the triage store, so that its report says what changed since the run
    before. A store that cannot be written is one line: the run folder and its reports are
    written all the same."""
    from harness.triage import record_folder

    try:
        delta = record_folder(result.folder.path, args.triage)
    except (InputError, OSError) as e:
        print(f"aliasfuzz fuzz: the run is not in the triage store: {e}", file=sys.stderr)
        return
    print(
        f"aliasfuzz fuzz: triage: {len(delta.first_seen_new)} new root causes first seen "
        f"({len(delta.first_seen_known)} known ones first reached), {len(delta.disappeared)} gone since the run before"
    )


def _write_reports(args: argparse.Namespace, result) -> bool:
    """report.md / report.html and the JUnit file; False (after one line) when one cannot be
    written. The journal is never touched here."""
    from harness.reporting.junit import write_junit
    from harness.reporting.report import write_reports

    try:
        if not args.no_report:
            for p in write_reports(
                result.folder.path, warn=lambda line: print(f"aliasfuzz fuzz: {line}", file=sys.stderr)
            ):
                print(f"aliasfuzz fuzz: wrote {p}")
        if args.junit:
            write_junit(result.findings, Path(args.junit))
            print(f"aliasfuzz fuzz: wrote {args.junit}")
    except InputError as e:
        print(f"aliasfuzz: {e}", file=sys.stderr)
        return False
    except OSError as e:
        print(
            f"aliasfuzz: cannot write the report ({e.strerror or e}); the findings are intact in "
            f"{result.folder.journal}",
            file=sys.stderr,
        )
        return False
    return True


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
        text = (
            f"elapsed {elapsed:6.0f}s  programs {programs}  {programs / max(elapsed, 1e-9):6.1f}/s  "
            f"findings {new} new, {len(records) - new} known"
        )
        if self.live is not None:
            from rich.text import Text

            self.live.update(Text(text))
        elif time.monotonic() - self.last_line >= 5:
            self.last_line = time.monotonic()
            print(text, flush=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
