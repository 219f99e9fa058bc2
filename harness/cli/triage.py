"""``aliasfuzz triage``: the root causes of every recorded run, and their triage states.

``aliasfuzz triage`` lists them (``--store``: default ``reports/triage.sqlite``, or
``redis://host:port/n`` for the store a shared campaign's machines keep in Redis: ``shared``);
``aliasfuzz triage --record RUN_DIR`` records a run folder (a campaign does this itself when it
ends); ``aliasfuzz triage --set ID STATE [ARG]`` sets a state (``reported URL``,
``duplicate-of ID``, ``wontfix``, ``fixed-in VERSION``, ...). ``aliasfuzz recheck`` runs every
baseline entry's case and every stored root cause's minimized case on the targets present and
records whether each still shows; with ``--fail-on-change`` it exits 1 when a result changed since
the cause's last recheck (``harness.triage.recheck``). Exit status 0, or 2 with one line."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from harness.escaping import visible
from harness.triage import shared
from harness.urls import hide_password


def register(sub) -> None:
    p = sub.add_parser("triage", help="list root causes across runs, record a run, set a triage state")
    p.add_argument("--store", help="the triage store: a file (default: reports/triage.sqlite) or redis://host:port/n")
    p.add_argument("--record", metavar="RUN_DIR", help="record a run folder in the store")
    p.add_argument("--set", nargs="+", metavar=("ID", "STATE"), help="set root cause ID's state: ID STATE [ARG]")
    p.set_defaults(handler=cmd_triage)
    r = sub.add_parser("recheck", help="run every baseline case and stored root cause again on the targets present")
    r.add_argument(
        "--store",
        help="the triage store: a file (default: reports/triage.sqlite; made when missing) or redis://host:port/n",
    )
    r.add_argument("--targets", help="comma-separated target ids or frameworks (default: all)")
    r.add_argument("--baseline", help="known-divergence baseline (default: the bundled one)")
    r.add_argument(
        "--fail-on-change",
        action="store_true",
        help="exit 1 when a root cause's result changed since its last recheck (a nightly run's check)",
    )
    r.set_defaults(handler=cmd_recheck)


def cmd_recheck(args: argparse.Namespace) -> int:
    from harness.errors import InputError
    from harness.fuzzing.baseline import load_baseline
    from harness.targets.registry import open_runner, parse_target_list
    from harness.triage import STORE_NAME
    from harness.triage.recheck import recheck
    from harness.triage.store import TriageStore

    def run(path: Path) -> tuple[list, dict]:
        with TriageStore(path) as db:
            runner, _ = open_runner(parse_target_list(args.targets))
            try:
                return recheck(db, baseline, runner), {t: info.versions for t, info in runner.infos.items()}
            finally:
                runner.close()

    try:
        baseline = load_baseline(args.baseline)
        if shared.is_shared(args.store):
            # Rechecked on a copy and written back as one change: another machine's record in
            # between makes it run again on the new copy (``shared.change``).
            where = hide_password(args.store)
            with tempfile.TemporaryDirectory(prefix="aliasfuzz-triage-") as tmp:
                results, versions = shared.change(args.store, Path(tmp) / STORE_NAME, "--store", run)
        else:
            path = Path(args.store or Path("reports") / STORE_NAME)
            where = str(path)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise InputError(f"--store {path}: cannot make its folder ({e.strerror or e})") from None
            results, versions = run(path)
    except InputError as e:
        print(f"aliasfuzz: {e}", file=sys.stderr)
        return 2
    for r in results:
        print(f"{visible(r.result):<18} {visible(r.cause)}" + (f"  ({visible(r.note)})" if r.note else ""))
    counts = {k: sum(r.result == k for r in results) for k in dict.fromkeys(r.result for r in results)}
    print(f"aliasfuzz recheck: {', '.join(f'{n} {k}' for k, n in counts.items())}; recorded in {where}")
    print(
        "aliasfuzz recheck: versions: "
        + visible("; ".join(f"{t} {' '.join(f'{k} {v}' for k, v in vs.items())}" for t, vs in versions.items()))
    )
    changed = [r for r in results if r.changed]
    print(
        f"aliasfuzz recheck: {len(changed)} changed since the last recheck"
        + "".join(
            f"\naliasfuzz recheck: changed: {visible(r.cause)} ({visible(r.previous or 'first recheck')} -> "
            f"{visible(r.result)})"
            for r in changed
        )
    )
    return 1 if changed and args.fail_on_change else 0


def cmd_triage(args: argparse.Namespace) -> int:
    from harness.errors import InputError
    from harness.triage import STORE_NAME, default_store, record_folder

    try:
        if args.record:
            store = args.store or default_store(args.record)
            delta = record_folder(args.record, store, "--store")
            print(
                f"aliasfuzz triage: recorded {args.record} in {hide_password(str(store))}: "
                f"{len(delta.first_seen_new)} new first seen, {len(delta.first_seen_known)} known first reached, "
                f"{len(delta.disappeared)} gone since the run before, {len(delta.regressed)} regressed"
            )
            return 0
        if args.set and len(args.set) not in (2, 3):
            print("aliasfuzz: triage --set: give ID STATE [ARG]", file=sys.stderr)
            return 2
        if shared.is_shared(args.store):
            with tempfile.TemporaryDirectory() as tmp:
                return _list_or_set(args, Path(tmp) / STORE_NAME)
        return _list_or_set(args, Path(args.store or Path("reports") / STORE_NAME))
    except InputError as e:
        print(f"aliasfuzz: {e}", file=sys.stderr)
        return 2


def _list_or_set(args: argparse.Namespace, path: Path) -> int:
    """Lists the root causes of the store, or sets one's state (``--set``); a Redis store
    (``args.store``) through the copy ``path``. Listing opens the store read-only."""
    from harness.triage.store import TriageStore

    def set_state(local: Path) -> None:
        with TriageStore(local) as db:
            db.set_state(*args.set)

    where = hide_password(args.store) if shared.is_shared(args.store) else str(path)
    if shared.is_shared(args.store):
        shared.fetch(args.store, path, "--store")
    if not path.is_file():
        print(
            f"aliasfuzz: {where}: no triage store (a campaign writes one beside its run folder, or with "
            f"--triage redis://... in Redis)",
            file=sys.stderr,
        )
        return 2
    if args.set:
        if shared.is_shared(args.store):
            shared.change(args.store, path, "--store", set_state)
        else:
            set_state(path)
        print(f"aliasfuzz triage: {args.set[0]}: {' '.join(args.set[1:])}")
        return 0
    with TriageStore(path, write=False) as db:
        _print_causes(db.causes())
    return 0


def _print_causes(causes) -> None:
    """One line per root cause. Every field comes from the store (a shared one from other
    machines): printed through ``visible``, an ANSI sequence or a line break is shown, never run."""
    print(f"{'state':<24} {'runs':>4} {'findings':>8}  {'first seen':<10} {'last seen':<10}  root cause")
    for c in causes:
        print(
            f"{visible(c.state_text)[:24]:<24} {visible(c.runs):>4} {visible(c.findings):>8}  "
            f"{visible(c.first_seen)[:10]:<10} {visible(c.last_seen)[:10]:<10}  {visible(c.id)}"
        )
    print(f"{len(causes)} root causes")
