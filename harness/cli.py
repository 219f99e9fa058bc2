"""The ``aliasfuzz`` command line.

Exit statuses are the same everywhere: 0 nothing new found, 1 divergences (``repro``) or new
findings (``fuzz``), 2 bad input or a set-up problem, always with a one-line message, 3 a bug of
aliasfuzz itself (a harness error: its bug report, with the case attached, is named on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Callable

from .errors import InputError
from .ir import load_case

EXIT_OK, EXIT_FOUND, EXIT_USAGE, EXIT_HARNESS = 0, 1, 2, 3


def _err(message: str) -> int:
    print(f"aliasfuzz: {message}", file=sys.stderr)
    return EXIT_USAGE


def cmd_targets(args: argparse.Namespace) -> int:
    from .targets.registry import discover

    with discover() as found:
        if args.json:
            print(json.dumps({"targets": [t.info.to_json() for t in found.targets],
                              "unavailable": found.unavailable}, indent=2))
            return EXIT_OK
        from rich.console import Console
        from rich.table import Table

        table = Table(title="aliasfuzz targets")
        for col in ("target", "kind", "alt device", "versions", "ops", "methods"):
            table.add_column(col)
        for t in found.targets:
            i = t.info
            table.add_row(i.id, i.kind, i.alt or "—", ", ".join(f"{k} {v}" for k, v in i.versions.items()),
                          str(len(i.ops)), str(len(i.methods)))
        Console().print(table)
        for fw, why in found.unavailable.items():
            print(f"not available: {fw}: {why}")
    return EXIT_OK




def cmd_repro(args: argparse.Namespace) -> int:
    from .baseline import load_baseline
    from .repro import render, run_case
    from .targets.registry import open_runner, parse_target_list

    programs = [(Path(c), load_case(c)) for c in args.cases]  # validate every case before starting
    baseline = load_baseline(args.baseline)
    runner, _ = open_runner(parse_target_list(args.targets))
    infos = runner.infos
    status = EXIT_OK
    docs = []
    try:
        for path, program in programs:
            result = run_case(program, runner, infos, baseline)
            if result.harness_errors:
                status = EXIT_HARNESS
                _report_harness_errors("repro", path, program, result.harness_errors)
            elif result.ran_nowhere:
                status = max(status, EXIT_USAGE)
                why = "; ".join(f"{t}: {tr.status}: {tr.message}" for t, tr in result.traces.items())
                print(f"aliasfuzz: {path}: no target ran the case, so nothing was compared ({why})",
                      file=sys.stderr)
            elif result.findings and status == EXIT_OK:
                status = EXIT_FOUND
            if args.json:
                docs.append({"case": str(path), **result.to_json()})
            else:
                if len(programs) > 1:
                    print(f"== {path}")
                render(result)
    finally:
        runner.close()
    if args.json:
        print(json.dumps(docs[0] if len(docs) == 1 else {"cases": docs}, indent=1))
    return status


def _report_harness_errors(command: str, path: Path, program, errors) -> None:
    """One line per harness error on stderr, naming the bug report that holds its traceback and
    the case."""
    from .harness_errors import write_bug_report
    from .ir import dump_case

    for f in errors:
        report = write_bug_report(f.sentence(), f.detail, {str(path): dump_case(program)})
        where = f"bug report: {report}" if report else "the bug report could not be written"
        print(f"aliasfuzz: {command} {path}: {f.sentence()} ({where})", file=sys.stderr)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"targets": cmd_targets, "repro": cmd_repro}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aliasfuzz", description="Differential fuzzing of tensor aliasing "
                                     "across PyTorch, candle and burn.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("targets", help="list the targets available on this machine")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("repro", help="run case files on every target and show the divergences")
    p.add_argument("cases", nargs="+", metavar="CASE.toml")
    p.add_argument("--targets", help="comma-separated target ids or frameworks (default: all)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--baseline", help="known-divergence baseline (default: the bundled one)")

    _register_extra(sub)
    return parser


def _register_extra(sub) -> None:
    """Commands that live in their own modules register themselves here."""
    for name in ("minimize", "fuzz", "report", "bench"):
        try:
            module = __import__(f"harness.cli_{name}", fromlist=["register"])
        except ModuleNotFoundError as e:
            if e.name == f"harness.cli_{name}":
                continue
            raise
        COMMANDS[name] = module.register(sub)


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

    from .harness_errors import line_of, write_bug_report

    cases = {}
    for c in list(getattr(args, "cases", None) or []) + [getattr(args, "case", None)]:
        try:
            if c:
                cases[str(c)] = Path(c).read_text(encoding="utf-8")[:1 << 20]
        except (OSError, ValueError):
            pass
    summary = f"{type(exc).__name__}: {exc} at {line_of(exc)}"
    report = write_bug_report(summary, traceback.format_exc(), cases)
    where = f"bug report with the case: {report}" if report else "the bug report could not be written"
    print(f"aliasfuzz: internal error (a bug of aliasfuzz): {' '.join(summary.split())} ({where})",
          file=sys.stderr)
    return EXIT_HARNESS


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    stdout = sys.stdout = _GuardedStdout(sys.stdout)
    try:
        status = COMMANDS[args.command](args)
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
        print(f"aliasfuzz: cannot write to standard output ({stdout.failure.strerror or stdout.failure})",
              file=sys.stderr)
        status = max(status, EXIT_USAGE) if status != EXIT_HARNESS else status
    return status


if __name__ == "__main__":
    sys.exit(main())
