"""Harness errors: an exception raised inside aliasfuzz itself while it judges, shrinks, records
or reports a program. It is a bug of aliasfuzz, never a finding about a framework, and it must
never end a campaign or crash a command.

A harness error becomes a ``Finding`` of kind ``harness-error``. Its signature is the stage, the
exception type and the innermost frame of aliasfuzz's own code that raised it
(``harness-error|oracle|IndexError|harness/judging/oracle.py:_value_finding``), with no line number so
that an edit elsewhere in the file does not make it a new finding. The same signature is what
the shrinker keeps: a smaller program "still shows" the finding when it raises the same
exception at the same place (``safe_compare`` turns the exception into that finding, so the
ordinary shrink predicate applies unchanged). Its ``detail`` holds the whole traceback.

The oracle's TEST DOUBLE switch ``ALIASFUZZ_TEST_ORACLE_FAULT`` (``oracle.injected_fault``)
raises inside ``compare``, so that containment is tested on a real oracle exception.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Mapping
from pathlib import Path

from harness.case.ir import Program
from harness.files import atomic_write
from harness.judging import rules
from harness.judging.finding import Finding
from harness.judging.oracle import compare
from harness.paths import ROOT
from harness.targets.trace import Trace
from harness.urls import hide_password

HARNESS_ERROR = "harness-error"

#: Directories whose frames count as aliasfuzz's own code when a traceback is located.
_OWN = tuple(str(ROOT / d) + os.sep for d in ("harness", "generators"))
_ROOT = ROOT


def location(exc: BaseException) -> str:
    """The innermost frame of aliasfuzz's own code in ``exc``'s traceback, as
    ``harness/judging/oracle.py:_value_finding`` (the last frame of all when none is aliasfuzz's)."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if f.filename.startswith(_OWN)] or frames
    if not own:
        return "unknown"
    f = own[-1]
    try:
        name = Path(f.filename).resolve().relative_to(_ROOT).as_posix()
    except ValueError:
        name = Path(f.filename).name
    return f"{name}:{f.name}"


def line_of(exc: BaseException) -> str:
    """``location`` with the line number, for messages (never for signatures)."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if f.filename.startswith(_OWN)] or frames
    return f"{location(exc)}:{own[-1].lineno}" if own else "unknown"


#: A harness error's ``targets``: aliasfuzz itself. Which targets ran the program is not part of
#: the signature, since shrinking runs a subset and the same bug must keep the same signature.
HARNESS_TARGETS = ("aliasfuzz", "-")


def harness_error(exc: BaseException, stage: str) -> Finding:
    """The finding for ``exc`` raised at ``stage`` (oracle, shrink, confirm, record)."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    message = " ".join(str(exc).split())[:300] or type(exc).__name__
    return Finding(
        kind=HARNESS_ERROR,
        aspect="harness",
        rule=rules.HARNESS_ERROR.name,
        targets=HARNESS_TARGETS,
        op_label=stage,
        method=None,
        sides=(type(exc).__name__, location(exc)),
        subject=message,
        detail=text,
    )


def is_harness_error(finding: Finding) -> bool:
    return finding.kind == HARNESS_ERROR


def safe_compare(program: Program, traces: Mapping[str, Trace]) -> list[Finding]:
    """``oracle.compare``, with an exception turned into a harness-error finding (so shrinking
    keeps "raises the same exception at the same place")."""
    try:
        return compare(program, traces)
    except Exception as e:  # noqa: BLE001 - the whole point: any bug of the oracle is contained
        return [harness_error(e, "oracle")]


def bug_dir() -> Path:
    """Where bug reports of aliasfuzz itself go: ``ALIASFUZZ_BUG_DIR``, else
    ``reports/harness-errors`` of the checkout."""
    env = os.environ.get("ALIASFUZZ_BUG_DIR")
    return Path(env) if env else _ROOT / "reports" / "harness-errors"


def write_bug_report(summary: str, traceback_text: str, cases: Mapping[str, str]) -> Path | None:
    """A Markdown bug report of aliasfuzz itself: the command, the summary, the traceback and the
    case files it ran (``cases``: name -> text), ready to attach to an issue. Every URL's password
    in it is hidden (``harness.urls``): the command line may hold ``--db redis://:PASSWORD@...``,
    and a bug report is made to be shared. Returns its path, or None when it cannot be written
    (the caller's one-line message then says so)."""

    parts = [
        f"# aliasfuzz harness error\n\n{summary}\n\n",
        f"Command: `{' '.join(sys.argv)}`\n\n",
        f"Python {sys.version.split()[0]}\n\n## Traceback\n\n```\n{traceback_text.rstrip()}\n```\n",
    ]
    for name, text in cases.items():
        parts.append(f"\n## Case `{name}`\n\n```toml\n{text.rstrip()}\n```\n")
    path = bug_dir() / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.md"
    try:
        return atomic_write(path, hide_password("".join(parts)))
    except OSError:
        return None
