"""Loading a run folder for the reports (``report.md``, ``report.html``, the history page) and for
triage.

The folder is read through ``RunFolder.open_read_only`` (its layout, and its checks of
campaign.json and of every journal line, are the run folder's), never locked: a campaign may be
writing it meanwhile. A run folder is input like any other, and may be damaged or hostile:

- A damaged folder (campaign.json missing, unreadable or not a campaign state; a journal that is
  not UTF-8 text or holds a line that is not a finding; one of the folder's own files a link out
  of it) is a ``ReportError`` naming the file.
- Every path a finding record names (``finding.PATH_FIELDS``: case, original_case, repro) must
  resolve, symlinks included, inside the run folder. One that does not is refused *for that
  finding only* (``ShownFinding.refused``) and ``Run.problems`` gets one line for it; nothing is
  read or written through such a path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.fuzzing.run_folder import RunFolder, inside
from harness.judging.finding import PATH_FIELDS, FindingRecord
from harness.judging.harness_errors import HARNESS_ERROR

Warn = Callable[[str], None]


class ReportError(InputError):
    """The input is not something a report can be made from, or the report cannot be written
    (one line naming the file)."""


def cannot_write(path: Path | str, e: OSError, journal: Path | str = "findings.jsonl") -> ReportError:
    return ReportError(f"{path}: cannot write ({e.strerror or e}); nothing was lost: the journal {journal} is intact")


@dataclass(frozen=True)
class ShownFinding:
    """A finding record as the reports show it. Its path fields are relative to the run folder
    (None when the record has none); ``paths`` maps each accepted path field to the file inside
    the run folder, ``refused`` each refused one to why."""

    record: FindingRecord
    paths: dict[str, Path]
    refused: dict[str, str]

    @property
    def harness(self) -> bool:
        """A harness error: a bug of aliasfuzz, counted apart from the findings."""
        return self.record.kind == HARNESS_ERROR

    @property
    def blocked(self) -> bool:
        """Whether its table and reproducers are left out (its case or repro path refused)."""
        return bool({"case", "repro"} & self.refused.keys())

    def read(self, key: str) -> str | None:
        """The text of the file a path field names; None when it has none, or the file is
        missing, not a regular file or not UTF-8 (the caller says so in the report)."""
        p = self.paths.get(key)
        try:
            return p.read_text(encoding="utf-8") if p is not None and p.is_file() else None
        except (OSError, ValueError):
            return None


@dataclass
class Run:
    folder: RunFolder  # opened read-only
    state: dict[str, Any]
    findings: list[ShownFinding]  # harness errors first, then new, then known, each in the order found
    problems: list[str] = field(default_factory=list)  # one line per refused path

    @property
    def path(self) -> Path:
        return self.folder.path

    @property
    def root(self) -> Path:
        """The folder resolved (symlinks too): every path the report reads or writes is inside."""
        return self.folder.root

    @property
    def config(self) -> dict[str, Any]:
        return self.state.get("config") or {}

    @property
    def programs(self) -> int:
        return int(self.state.get("programs") or 0)

    @property
    def elapsed(self) -> float:
        return float(self.state.get("elapsed_s") or 0.0)

    @property
    def throughput(self) -> float:
        return self.programs / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def harness_errors(self) -> list[ShownFinding]:
        return [f for f in self.findings if f.harness]

    @property
    def new(self) -> list[ShownFinding]:
        return [f for f in self.findings if not f.harness and f.record.status == "new"]

    @property
    def flaky(self) -> list[ShownFinding]:
        """New divergences that did not show in every confirmation run (``Engine.confirm``)."""
        return [f for f in self.findings if not f.harness and f.record.status == "flaky"]

    @property
    def known(self) -> list[ShownFinding]:
        return [f for f in self.findings if not f.harness and f.record.status not in ("new", "flaky")]

    def target_costs(self) -> dict[str, tuple[int, float]]:
        """Per target id, (programs it ran, seconds its process spent on them) over the campaign's
        runs; a target without figures (a run folder from before they were kept) is absent."""
        out = {}
        for tid, cost in (self.state.get("target_costs") or {}).items():
            programs, seconds = cost.get("programs"), cost.get("probe_s")
            if isinstance(programs, int) and isinstance(seconds, (int, float)):
                out[str(tid)] = (programs, float(seconds))
        return out

    def target_versions(self) -> dict[str, dict[str, str]]:
        out = {}
        for tid, info in (self.state.get("targets") or {}).items():
            v = info.get("versions") if isinstance(info, dict) else None
            out[str(tid)] = {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else {}
        return out


def one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _unreadable(e: BaseException, path: Path) -> ReportError:
    if isinstance(e, InputError):
        return ReportError(str(e))
    if isinstance(e, RecursionError):
        return ReportError(f"{path}: unreadable (nested too deeply)")
    return ReportError(f"{path}: unreadable ({one_line(e)})")


def shown_finding(raw: dict[str, Any], root: Path) -> ShownFinding:
    """``raw`` (a record's JSON form) read by ``FindingRecord.from_json``, each path field
    resolved inside ``root`` or refused."""
    record = FindingRecord.from_json(raw)
    paths: dict[str, Path] = {}
    refused: dict[str, str] = {}
    rel_paths: dict[str, str | None] = {}
    for key in PATH_FIELDS:
        rel = getattr(record, key)
        if not rel:
            rel_paths[key] = None
            continue
        p = inside(root, rel)
        if p is None:
            refused[key] = f"{key} path outside the run folder"
            rel_paths[key] = rel
        else:
            rel_paths[key] = rel if not Path(rel).is_absolute() else p.relative_to(root).as_posix()
            paths[key] = p
    return ShownFinding(replace(record, **rel_paths), paths, refused)


def _order(f: ShownFinding) -> int:
    # Harness errors first (the run's own failures), then new findings (what a reader acts on),
    # then the flaky ones, then the known.
    return 0 if f.harness else {"new": 1, "flaky": 2}.get(f.record.status, 3)


def load_run(run_dir: str | Path) -> Run:
    """The run folder ``run_dir`` for the reports. Raises ``ReportError`` (one line naming the
    file) when it is not a run folder or is damaged (see the module docstring)."""
    path = Path(run_dir)
    try:
        folder = RunFolder.open_read_only(path)
        state = folder.load_state()
        found = folder.read_findings()
    except (InputError, OSError, ValueError, RecursionError) as e:
        raise _unreadable(e, path) from None
    findings = sorted((shown_finding(r, folder.root) for r in found), key=_order)  # stable: in the order found
    run = Run(folder, state, findings)
    numbers = {HARNESS_ERROR: 0, "finding": 0}
    for f in findings:  # one line per finding with a path refused, numbered as the report does
        group = HARNESS_ERROR if f.harness else "finding"
        numbers[group] += 1
        if f.refused:
            what = (
                "its case, table and reproducers are"
                if "case" in f.refused
                else "its table and reproducers are"
                if "repro" in f.refused
                else "its original's link is"
            )
            run.problems.append(
                f"{path}: {group} {numbers[group]} ({one_line(f.record.signature)}): "
                + "; ".join(f"{why} ({one_line(getattr(f.record, key))})" for key, why in f.refused.items())
                + f": not read, {what} left out"
            )
    return run
