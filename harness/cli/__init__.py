"""The ``aliasfuzz`` command line.

Exit statuses are the same everywhere: 0 nothing new found, 1 divergences (``repro``) or new
findings (``fuzz``), 2 bad input or a set-up problem, always with a one-line message, 3 a bug of
aliasfuzz itself (a harness error: its bug report, with the case attached, is named on stderr).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.cli.exits import EXIT_HARNESS, EXIT_USAGE
from harness.errors import InputError


def _err(message: str) -> int:
    print(f"aliasfuzz: {message}", file=sys.stderr)
    return EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    from harness.cli import bench, bisect, draft, fuzz, matrix, minimize, report, repro, targets, triage

    parser = argparse.ArgumentParser(
        prog="aliasfuzz", description="Differential fuzzing of tensor aliasing across PyTorch, candle and burn."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (targets, repro, draft, minimize, fuzz, report, triage, matrix, bisect, bench):
        module.register(sub)  # each sets its command's ``handler``
    return parser


class _GuardedStdout:
    """Standard output that a closed pipe (``| head``) or a full device cannot turn into an
    exception: the first failure is remembered and later output dropped, so a campaign goes on,
    writes its reports and exits with the status its findings give."""

    def __init__(self, stream):
        self._stream = stream
        self.failure: OSError | None = None

    def write(self, text: str) -> int:
        if self.failure is None:
            try:
                return self._stream.write(text)
            except OSError as e:
                self.failure = e
        return len(text)

    def flush(self) -> None:
        if self.failure is None:
            try:
                self._stream.flush()
            except OSError as e:
                self.failure = e

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _harness_crash(args: argparse.Namespace, exc: Exception) -> int:
    """A bug of aliasfuzz outside any program's containment: one line and a bug report with the
    command's case files attached, exit status 3."""
    import traceback

    from harness.judging.harness_errors import line_of, write_bug_report
    from harness.urls import hide_password

    cases = {}
    for c in list(getattr(args, "cases", None) or []) + [getattr(args, "case", None)]:
        try:
            if c:
                cases[str(c)] = Path(c).read_text(encoding="utf-8")[: 1 << 20]
        except (OSError, ValueError):
            pass
    summary = hide_password(f"{type(exc).__name__}: {exc} at {line_of(exc)}")
    report = write_bug_report(summary, traceback.format_exc(), cases)
    where = f"bug report with the case: {report}" if report else "the bug report could not be written"
    print(f"aliasfuzz: internal error (a bug of aliasfuzz): {' '.join(summary.split())} ({where})", file=sys.stderr)
    return EXIT_HARNESS


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    stdout = sys.stdout = _GuardedStdout(sys.stdout)
    try:
        status = args.handler(args)
    except InputError as e:
        status = _err(str(e))
    except KeyboardInterrupt:
        status = _err("interrupted")
    except Exception as e:  # noqa: BLE001 - a harness bug is a bug report, not a traceback
        status = _harness_crash(args, e)
    finally:
        sys.stdout = stdout._stream
    stdout.flush()
    if stdout.failure is not None:
        try:  # what is still buffered would fail again at exit, with a message of Python's own
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
    if stdout.failure is not None and not isinstance(stdout.failure, BrokenPipeError):
        # A full or broken device, not a reader that stopped early: the output was lost.
        print(
            f"aliasfuzz: cannot write to standard output ({stdout.failure.strerror or stdout.failure})", file=sys.stderr
        )
        status = max(status, EXIT_USAGE) if status != EXIT_HARNESS else status
    return status
