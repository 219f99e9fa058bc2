"""``aliasfuzz triage``: the root causes of every recorded run, and their triage states.

``aliasfuzz triage`` lists them (``--store``: default ``reports/triage.sqlite``);
``aliasfuzz triage --record RUN_DIR`` records a run folder (a campaign does this itself when it
ends); ``aliasfuzz triage --set ID STATE [ARG]`` sets a state (``reported URL``,
``duplicate-of ID``, ``wontfix``, ``fixed-in VERSION``, ...). Exit status 0, or 2 with one line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("triage", help="list root causes across runs, record a run, set a triage state")
    p.add_argument("--store", help="the triage store (default: reports/triage.sqlite)")
    p.add_argument("--record", metavar="RUN_DIR", help="record a run folder in the store")
    p.add_argument("--set", nargs="+", metavar=("ID", "STATE"), help="set root cause ID's state: ID STATE [ARG]")
    p.set_defaults(handler=cmd_triage)


def cmd_triage(args: argparse.Namespace) -> int:
    from harness.errors import InputError
    from harness.triage import STORE_NAME, default_store, record_folder
    from harness.triage.store import TriageStore

    try:
        if args.record:
            store = args.store or default_store(args.record)
            delta = record_folder(args.record, store)
            print(f"aliasfuzz triage: recorded {args.record} in {store}: {len(delta.first_seen)} first seen, "
                  f"{len(delta.disappeared)} gone since the run before, {len(delta.regressed)} regressed")
            return 0
        path = Path(args.store or Path("reports") / STORE_NAME)
        if not path.is_file():
            print(f"aliasfuzz: {path}: no triage store (a campaign writes one beside its run folder)", file=sys.stderr)
            return 2
        with TriageStore(path) as db:
            if args.set:
                if len(args.set) not in (2, 3):
                    print("aliasfuzz: triage --set: give ID STATE [ARG]", file=sys.stderr)
                    return 2
                db.set_state(*args.set)
                print(f"aliasfuzz triage: {args.set[0]}: {' '.join(args.set[1:])}")
                return 0
            _print_causes(db.causes())
    except InputError as e:
        print(f"aliasfuzz: {e}", file=sys.stderr)
        return 2
    return 0


def _print_causes(causes) -> None:
    print(f"{'state':<24} {'runs':>4} {'findings':>8}  {'first seen':<10} {'last seen':<10}  root cause")
    for c in causes:
        print(f"{c.state_text[:24]:<24} {c.runs:>4} {c.findings:>8}  {c.first_seen[:10]:<10} {c.last_seen[:10]:<10}  {c.id}")
    print(f"{len(causes)} root causes")
