"""Reports of a run folder: ``report.md`` and a single-file ``report.html`` (inline CSS, no
network, no JavaScript). The history page over many run folders is ``harness.reporting.history``.

Everything is rendered from the run folder alone (campaign.json, findings.json or the journal,
the case files and their repro JSON), so ``aliasfuzz report DIR`` can re-render at any time.

A run folder is input like any other, and may be damaged or hostile:

- A damaged folder (campaign.json missing, unreadable or not a campaign state; a journal that is
  not UTF-8 text or holds a line that is not an object) is a ``ReportError`` naming the file.
- Every path a finding record names (``PATH_FIELDS``: case, original_case, repro) must resolve,
  symlinks included, inside the run folder. One that does not is refused *for that finding
  only*: the rest of the report is written, the finding is shown with its record and "case path
  outside the run folder" (or the field that escaped) in place of its case, table and
  reproducers, and ``warn`` gets one line. Nothing is read or written through such a path.
- Reproducers are generated in a staging folder inside the run folder, then each file replaces
  its old version atomically (``files.atomic_write``, never through a symlink out of the folder):
  a full disk leaves the old reproducers whole.
- A report that cannot be written (full disk, read-only, the path is a directory) is a
  ``ReportError`` saying the journal (findings.jsonl) is intact; the old report stays whole.

Harness errors (``kind`` ``harness-error``: aliasfuzz itself raised while judging, shrinking or
recording a program) are counted apart from findings and shown first, in their own section.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Callable
from urllib.parse import quote

from harness.errors import InputError
from harness.files import atomic_write
from harness.judging.harness_errors import HARNESS_ERROR
from harness.case.ir import Program, load_case
from harness.reporting.repro import ReproResult, table_rows
from harness.fuzzing.run_folder import RunFolder
from harness.judging.trace import Trace, verdicts

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
HISTORY_HTML = "history.html"
#: The fields of a finding record that name a file of the run folder.
PATH_FIELDS = ("case", "original_case", "repro")
HARNESS_TITLE = "Harness errors: aliasfuzz bugs, not framework findings"

Warn = Callable[[str], None]


class ReportError(InputError):
    """The input is not something a report can be made from, or the report cannot be written
    (one line naming the file)."""


def cannot_write(path: Path | str, e: OSError, journal: Path | str = "findings.jsonl") -> ReportError:
    return ReportError(f"{path}: cannot write ({e.strerror or e}); nothing was lost: the journal {journal} "
                       f"is intact")


# ------------------------------------------------------------------------------------------------
# Loading.


def inside(root: Path, rel: Any, root_too: bool = False) -> Path | None:
    """``root / rel`` resolved (symlinks too) when it is inside ``root`` (resolved; ``root``
    itself only with ``root_too``), else None."""
    if not isinstance(rel, str) or not rel or "\0" in rel:
        return None
    try:
        p = (root / rel).resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return None
    return p if p.is_relative_to(root) and (root_too or p != root) else None


@dataclass
class Run:
    path: Path
    state: dict[str, Any]
    findings: list[dict[str, Any]]  # normalised records, harness errors first, then new, then known
    root: Path = field(default=None)  # the folder resolved
    problems: list[str] = field(default_factory=list)  # one line per refused path

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
    def harness_errors(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["kind"] == HARNESS_ERROR]

    @property
    def new(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["kind"] != HARNESS_ERROR and f["status"] == "new"]

    @property
    def known(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["kind"] != HARNESS_ERROR and f["status"] != "new"]

    def target_versions(self) -> dict[str, dict[str, str]]:
        out = {}
        for tid, info in (self.state.get("targets") or {}).items():
            v = info.get("versions") if isinstance(info, dict) else None
            out[str(tid)] = {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else {}
        return out


def _unreadable(path: Path, e: BaseException) -> ReportError:
    if isinstance(e, InputError):
        return ReportError(str(e))
    if isinstance(e, UnicodeDecodeError):
        return ReportError(f"{path}: unreadable (not UTF-8 text)")
    if isinstance(e, OSError):
        return ReportError(f"{path}: cannot read ({e.strerror or e})")
    if isinstance(e, RecursionError):
        return ReportError(f"{path}: unreadable (nested too deeply)")
    return ReportError(f"{path}: unreadable ({' '.join(str(e).split())})")


_READ_ERRORS = (InputError, OSError, ValueError, RecursionError)


def _text(v: Any) -> str | None:
    return None if v is None else v if isinstance(v, str) else json.dumps(v)


def _normalise(raw: dict[str, Any], root: Path) -> dict[str, Any]:
    """A finding record with every field the report shows of a known type, and ``_path`` (key:
    resolved path) / ``_refused`` (key: why) for PATH_FIELDS."""
    f = dict(raw)
    for k in ("signature", "kind", "status", "sentence", "detail", "op", "method", "baseline", "baseline_case"):
        f[k] = _text(f.get(k))
    f["signature"], f["kind"], f["sentence"] = f["signature"] or "?", f["kind"] or "?", f["sentence"] or ""
    t = raw.get("targets")
    f["targets"] = [str(x) for x in t] if isinstance(t, list) else [str(t)] if t else []
    f["_path"], f["_refused"] = {}, {}
    for key in PATH_FIELDS:
        rel = raw.get(key)
        if rel is None or rel == "":
            f[key] = None
            continue
        p = inside(root, rel)
        if p is None:
            f[key] = _text(rel)
            f["_refused"][key] = f"{key} path outside the run folder"
        else:
            f[key] = rel if not Path(rel).is_absolute() else p.relative_to(root).as_posix()
            f["_path"][key] = p
    return f


def load_run(run_dir: str | Path) -> Run:
    path = Path(run_dir)
    if not path.is_dir():
        raise ReportError(f"{path}: not a directory")
    try:
        root = path.resolve(strict=True)
    except (OSError, RuntimeError) as e:
        raise ReportError(f"{path}: cannot open ({e})") from None
    folder = RunFolder(path)
    for own in (folder.state_json, folder.journal, folder.findings_json):
        if (own.exists() or own.is_symlink()) and inside(root, own.name) is None:
            raise ReportError(f"{own}: a link out of the run folder: not read")
        if own.exists() and not own.is_file() and not own.is_dir():  # a FIFO would never end
            raise ReportError(f"{own}: not a regular file: not read")
    if not (folder.state_json.exists() or folder.state_json.is_symlink()):
        raise ReportError(f"{path}: no campaign.json: not a run folder")
    # RunFolder checks the shape of campaign.json and of every journal line (CampaignError).
    try:
        state = folder.load_state()
    except _READ_ERRORS as e:
        raise _unreadable(folder.state_json, e) from None
    records: list[Any] | None = None
    if folder.journal.exists() or folder.journal.is_symlink():  # the journal is the truth
        try:
            records = folder.load_findings()
        except _READ_ERRORS as e:
            raise _unreadable(folder.journal, e) from None
    listed = None
    if folder.findings_json.exists():
        try:
            listed = json.loads(folder.findings_json.read_text(encoding="utf-8"))
        except _READ_ERRORS as e:
            if records is None:
                raise _unreadable(folder.findings_json, e) from None
        if not (isinstance(listed, list) and all(isinstance(r, dict) for r in listed)):
            if records is None:
                raise ReportError(f"{folder.findings_json}: not a list of finding records")
            listed = None
    found = records or []
    if listed is not None and len(listed) > len(found):
        found = listed
    findings = [_normalise(r, root) for r in found]
    # Harness errors first (the run's own failures), then new findings (what a reader acts on),
    # each group in the order found.
    findings.sort(key=lambda f: 0 if f["kind"] == HARNESS_ERROR else 1 if f["status"] == "new" else 2)
    run = Run(path, state, findings, root)
    numbers = {HARNESS_ERROR: 0, "finding": 0}
    for f in findings:  # one line per finding with a path refused, numbered as the report does
        group = HARNESS_ERROR if f["kind"] == HARNESS_ERROR else "finding"
        numbers[group] += 1
        if f["_refused"]:
            what = ("its case, table and reproducers are" if "case" in f["_refused"] else
                    "its table and reproducers are" if "repro" in f["_refused"] else "its original's link is")
            run.problems.append(f"{path}: {group} {numbers[group]} ({_one_line(f['signature'])}): " + "; ".join(
                f"{why} ({_one_line(f[key])})" for key, why in f["_refused"].items()) + f": not read, {what} left out")
    return run


def _read(f: dict, key: str) -> str | None:
    p = f["_path"].get(key)
    try:
        return p.read_text(encoding="utf-8") if p is not None and p.is_file() else None
    except (OSError, ValueError):
        return None


def _shrink_text(f: dict) -> str:
    """How the finding's case was shrunk, or why it was not (a known finding, by default)."""
    if f.get("shrink_seconds") is None:
        if f.get("status") != "known":
            return f"not shrunk, {f.get('ops_before')} ops"
        case = f" (the baseline's case `{f['baseline_case']}` is its minimal form)" if f.get("baseline_case") else ""
        return f"not shrunk, {f.get('ops_before')} ops: known{case}"
    return (f"shrunk {f.get('ops_before')} → {f.get('ops_after')} ops"
            f" ({'complete' if f.get('shrink_complete') else 'stopped early'}, {f.get('shrink_runs')} runs,"
            f" {f.get('shrink_seconds')}s)")


# ------------------------------------------------------------------------------------------------
# The side-by-side table (targets x tensors/snapshots).


def _fmt_values(v: Any) -> str:
    """float32 values, each in its shortest round-trip form: two values the table marks as
    different never print alike."""
    if v is None:
        return "—"
    flat = v.ravel()
    text = ", ".join(str(x) for x in flat[:12])
    return f"[{text}{', …' if len(flat) > 12 else ''}]"


def side_by_side(repro: dict, program: Program, finding: dict | None = None
                 ) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """(target ids, rows, notes); a row: {label, cells: [text], divergent, subject}. The rows and
    which of them diverge are ``repro.table_rows``' (the terminal table's: ``value_compare.values_close``
    with the program's Adam tolerance, ok verdicts that differ); a cell also shows a snapshot's
    final value. Notes: the ops a target could not run. Raises (ValueError, TypeError, KeyError,
    ...) on a repro JSON that is not one of ``program``."""
    targets = repro["targets"]
    traces = {tid: Trace.from_wire(tid, {"status": t.get("status") or "ok", "message": t.get("message"),
                                         "initial": t.get("initial") or {}, "steps": t.get("trace") or []})
              for tid, t in targets.items()}
    result = ReproResult(program, {}, traces, [], verdict_maps={t: verdicts(program, tr) for t, tr in traces.items()})
    name_of = {f"{n} ({v.snapshot.method})": n for vm in result.verdict_maps.values() for n, v in vm.items()}
    subjects = {d.get("subject") for d in repro.get("divergences") or []
                if isinstance(d, dict) and (finding is None or d.get("signature") == finding.get("signature"))}
    rows = []
    for label, _cells, divergent in table_rows(result):
        name = name_of.get(label, label)
        cells = []
        for tid, tr in traces.items():
            if not tr.ok:
                cells.append(tr.status)
                continue
            v, obs = result.verdict_maps[tid].get(name), tr.final.get(name)
            value = None if obs is None else _fmt_values(obs.value) if obs.initialized else "uninitialised"
            cells.append(" ".join(x for x in ((v.summary if v else None), value) if x) or "—")
        rows.append({"label": label, "cells": cells, "divergent": divergent, "subject": name in subjects})
    notes = []
    for tid, tr in traces.items():
        notes += [f"{tid} op {i}: {s.status}" + (f": {s.message}" if s.message else "")
                  for i, s in enumerate(tr.steps) if s.status != "ok"]
        if not tr.ok:
            notes.append(f"{tid}: {tr.status}" + (f": {tr.message}" if tr.message else ""))
    return list(traces), rows, notes


@dataclass
class View:
    """What the report shows of one finding."""

    f: dict[str, Any]
    case_text: str | None = None
    program: Program | None = None
    table: tuple[list[str], list[dict[str, Any]], list[str]] | None = None
    table_note: str | None = None
    reps: list[str] = field(default_factory=list)
    reps_note: str | None = None

    @property
    def refused(self) -> dict[str, str]:
        return self.f["_refused"]


def _blocked(f: dict[str, Any]) -> bool:
    """Whether the finding's table and reproducers are left out (its case or repro refused)."""
    return bool({"case", "repro"} & f["_refused"].keys())


def finding_view(f: dict[str, Any]) -> View:
    view = View(f, case_text=_read(f, "case"))
    if "case" in f["_path"] and view.case_text is None:
        view.table_note = f"no table or reproducers: {f['case']} cannot be read (missing, or not a UTF-8 file)"
    elif "case" in f["_path"]:
        try:
            view.program = load_case(f["_path"]["case"])
        except InputError as e:
            view.table_note = f"no table or reproducers: {e}"
    if f["kind"] == HARNESS_ERROR or view.program is None or not f.get("repro") or _blocked(f):
        return view
    text = _read(f, "repro")
    try:
        view.table = side_by_side(json.loads(text), view.program, f) if text is not None else None
    except Exception as e:  # noqa: BLE001 - a report never fails because of one table
        view.table_note = f"table left out: {f['repro']} is not the repro JSON of this case ({type(e).__name__})"
    return view


def summary_facts(run: Run) -> list[tuple[str, str]]:
    c = run.config
    m = run.state.get("machine") or {}
    budget = c.get("budget_s")
    facts = [("harness errors", f"{len(run.harness_errors)} (aliasfuzz bugs, not framework findings)")] \
        if run.harness_errors else []
    facts += [
        ("started", _when(run.state.get("started"))),
        ("seed", str(c.get("seed", "?"))),
        ("profile", str(c.get("profile", "?"))),
        ("budget", f"{budget:g}s" if isinstance(budget, (int, float)) else "none"),
        ("max programs", str(c.get("max_programs")) if c.get("max_programs") is not None else "none"),
        ("workers", str(c.get("workers", 1))),
        ("programs run", str(run.programs) + (f" ({run.state['repeats_skipped']} of them repeats of a program"
                                               " already run, not run again)" if run.state.get("repeats_skipped") else "")),
        ("replayed from the corpus", str(run.state.get("replayed", 0))),
        *([("programs no target ran", f"{run.state['ran_nowhere']} (every target failed them: they were not "
            "compared, so they are no agreement)")] if run.state.get("ran_nowhere") else []),
        ("elapsed", f"{run.elapsed:.1f}s"),
        ("throughput", f"{run.throughput:.1f} programs/s"),
        ("findings", f"{len(run.new)} new, {len(run.known)} known"),
        ("machine", ", ".join(f"{k} {v}" for k, v in m.items()) if m else "?"),
        ("corpus", str(c.get("db") or "run folder (corpus/)")),
    ]
    unavailable = run.state.get("unavailable") or {}
    if unavailable:
        facts.append(("unavailable", "; ".join(f"{k}: {v}" for k, v in unavailable.items())))
    return facts


def summary_line(run: Run) -> str:
    """The terminal summary: harness errors first, apart from the findings."""
    errors = len(run.harness_errors)
    head = f"{errors} harness error(s): aliasfuzz bugs, not framework findings (the report's first section); " \
        if errors else ""
    return f"{head}findings: {len(run.new)} new, {len(run.known)} known"


def _when(ts: Any) -> str:
    try:
        return datetime.fromtimestamp(float(ts), tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def _versions_text(v: dict[str, str]) -> str:
    return ", ".join(f"{k} {x}" for k, x in v.items()) or "—"


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _href(rel: str) -> str:
    return quote(rel)  # ':' too: a file name never becomes a URL scheme


# ------------------------------------------------------------------------------------------------
# Reproducers: staged inside the run folder, then each file replaces its old version atomically.


def _write_reproducers(run: Run, view: View) -> None:
    from harness.reporting import reproducers

    f = view.f
    if f["kind"] == HARNESS_ERROR or _blocked(f) or view.program is None or view.case_text is None:
        return
    rel = PurePosixPath(f["case"])
    if not rel.name.endswith(".toml"):
        view.reps_note = f"no reproducers: {f['case']} is not a .toml file"
        return
    stage = None
    try:
        stage = Path(tempfile.mkdtemp(prefix=".reproducers-", dir=run.root))
        (stage / rel.name).write_text(view.case_text, encoding="utf-8")
        repro_text = _read(f, "repro")
        if repro_text is not None:
            (stage / "repro.json").write_text(repro_text, encoding="utf-8")
        made = reproducers.write_reproducers(stage, {"targets": f["targets"], "case": rel.name,
                                                     "repro": "repro.json" if repro_text is not None else None})
        for p in made:
            for src in ([p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file())):
                dest_rel = (rel.parent / src.relative_to(stage).as_posix()).as_posix()
                dest = inside(run.root, dest_rel)
                if dest is None or inside(run.root, str(PurePosixPath(dest_rel).parent), root_too=True) is None:
                    raise ReportError(f"{dest_rel}: a link out of the run folder: not written")
                atomic_write(run.path / dest_rel, src.read_text(encoding="utf-8"))
            view.reps.append((rel.parent / p.name).as_posix() + ("/" if p.is_dir() else ""))
    except Exception as e:  # noqa: BLE001 - a report never fails because of one reproducer
        view.reps_note = f"reproducers not written: {type(e).__name__}: {_one_line(e)}"
    finally:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)


# ------------------------------------------------------------------------------------------------
# Markdown.


def _md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _fence(text: str, lang: str = "") -> list[str]:
    """A fenced block longer than any run of backticks inside ``text``."""
    longest = max((len(r) for r in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return [ticks + lang, text.rstrip(), ticks]


def _md_link(rel: str | None) -> str:
    return f"[{_md_cell(rel)}]({_href(rel)})" if rel else "—"


def _md_finding(n: int, v: View) -> list[str]:
    f = v.f
    harness = f["kind"] == HARNESS_ERROR
    base = f" (baseline {f['baseline']})" if f.get("baseline") else ""
    out = [f"### {n}. [{'harness error' if harness else f['status'] or '?'}{base}] {_one_line(f['kind'])}: "
           f"{_one_line(f['sentence'])}", "", f"- signature: `{_one_line(f['signature'])}`",
           f"- targets: {', '.join(f['targets'])}; {'stage' if harness else 'op'} `{f['op']}`"
           + ("" if harness else f", method `{f['method']}`")]
    if not harness:
        out.append(f"- {_shrink_text(f)}; found after {f.get('seconds_to_find')}s")
    out += [f"- **{why}**: `{_one_line(f[key])}` (not read)" for key, why in v.refused.items()]
    if f.get("case") and "case" not in v.refused:
        out.append(f"- case: {_md_link(f['case'])} (`aliasfuzz repro {_one_line(f['case'])}`); original: "
                   f"{_md_link(f['original_case'] if 'original_case' not in v.refused else None)}")
    out.append("")
    if harness:
        out += ["Traceback (inside aliasfuzz):", "", *_fence(f.get("detail") or "(none recorded)", "text"), ""]
    elif f.get("detail"):
        out += [_one_line(f["detail"]), ""]
    if v.case_text:
        out += [*_fence(v.case_text, "toml"), ""]
    if v.table:
        ids, rows, notes = v.table
        out += ["| tensor / snapshot | " + " | ".join(_md_cell(t) for t in ids) + " |", "|---|" + "---|" * len(ids)]
        for r in rows:
            mark = "**" if r["divergent"] else ""
            label = ("⚠ " if r["divergent"] else "") + ("▶ " if r["subject"] else "") + r["label"]
            out.append(f"| {mark}{_md_cell(label)}{mark} | " + " | ".join(
                f"{mark}{_md_cell(c)}{mark}" for c in r["cells"]) + " |")
        if notes:
            out += ["", "Ops a target could not run:", ""] + [f"- {_md_cell(x)}" for x in notes]
        out.append("")
    for note in (v.table_note, v.reps_note):
        if note:
            out += [f"_{_md_cell(note)}_", ""]
    if v.reps:
        out += ["Reproducers: " + ", ".join(_md_link(p) for p in v.reps), ""]
    return out


def render_markdown(run: Run, views: list[View]) -> str:
    out = [f"# aliasfuzz report: {run.path.name}", ""]
    errors = [v for v in views if v.f["kind"] == HARNESS_ERROR]
    if errors:
        out += [f"## {HARNESS_TITLE} ({len(errors)})", "",
                "aliasfuzz itself raised while handling these programs: the run's findings may be "
                "incomplete. Report them against aliasfuzz, not a framework.", ""]
        for n, v in enumerate(errors, 1):
            out += _md_finding(n, v)
    out += ["## Summary", "", "| | |", "|---|---|"]
    out += [f"| {k} | {_md_cell(v)} |" for k, v in summary_facts(run)]
    out += ["", "### Targets", "", "| target | versions |", "|---|---|"]
    out += [f"| {_md_cell(t)} | {_md_cell(_versions_text(v))} |" for t, v in run.target_versions().items()]
    out += ["", f"## Findings ({len(run.new)} new, {len(run.known)} known)", ""]
    rest = [v for v in views if v.f["kind"] != HARNESS_ERROR]
    if not rest:
        out.append("No divergence found.")
    for n, v in enumerate(rest, 1):
        out += _md_finding(n, v)
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------------
# HTML.

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:75em;padding:0 1em;color:#1d1d1f}
h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.6em 0}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.mono,pre,code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.9em}
tr.divergent td{background:#fde2e1}tr.divergent td:first-child{font-weight:bold}tr.subject td:first-child::before{content:"▶ "}
pre{background:#f7f7f7;border:1px solid #e3e3e3;padding:.6em;overflow:auto}
.new{color:#fff;background:#c62828;padding:0 .4em;border-radius:.3em}.known{background:#f9a825;padding:0 .4em;border-radius:.3em}
.sentence{font-size:1.05em;margin:.4em 0}.finding{border-left:4px solid #c62828;padding-left:1em;margin:1.5em 0}
.finding.known-finding{border-left-color:#f9a825}.dim{color:#666}.refused{color:#c62828;font-weight:bold}
#harness-errors{border:2px solid #6a1b9a;padding:0 1em 1em}.finding.harness-error{border-left-color:#6a1b9a}
.harness{color:#fff;background:#6a1b9a;padding:0 .4em;border-radius:.3em}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _a(rel: str, text: str | None = None) -> str:
    return f'<a href="{_e(_href(rel))}">{_e(rel if text is None else text)}</a>'


def _html_finding(n: int, v: View) -> list[str]:
    f = v.f
    harness = f["kind"] == HARNESS_ERROR
    cls = "harness" if harness else "new" if f["status"] == "new" else "known"
    article = {"harness": "harness-error", "new": "", "known": "known-finding"}[cls]
    base = f" ({_e(f['baseline'])})" if f.get("baseline") else ""
    out = [f'<article class="finding {article}" id="{"harness-error" if harness else "finding"}-{n}">',
           f'<h3>{n}. <span class="{cls}">{"harness error" if harness else _e(f["status"] or "?")}{base}</span> '
           f'{_e(f["kind"])}</h3>', f'<p class="sentence">{_e(f["sentence"])}</p>']
    if f.get("detail") and not harness:
        out.append(f"<p>{_e(f['detail'])}</p>")
    where = f"stage {_e(f['op'])}" if harness else f"{_e(_shrink_text(f))}; found after {_e(f.get('seconds_to_find'))}s"
    out.append(f'<p class="dim">signature <code>{_e(f["signature"])}</code><br>'
               f'targets {_e(", ".join(f["targets"]))}; {where}</p>')
    out += [f'<p class="refused">{_e(why)}: <code>{_e(f[key])}</code> (not read)</p>' for key, why in v.refused.items()]
    if harness:
        out.append(f'<p>Traceback (inside aliasfuzz):</p><pre class="traceback">{_e(f.get("detail") or "(none recorded)")}</pre>')
    if v.table:
        ids, rows, notes = v.table
        out.append('<table class="side-by-side"><tr><th>tensor / snapshot</th>'
                   + "".join(f"<th>{_e(t)}</th>" for t in ids) + "</tr>")
        for r in rows:
            classes = " ".join(c for c, on in (("divergent", r["divergent"]), ("subject", r["subject"])) if on)
            out.append(f'<tr class="{classes}"><td>{_e(r["label"])}</td>'
                       + "".join(f'<td class="mono">{_e(c)}</td>' for c in r["cells"]) + "</tr>")
        out.append("</table>")
        if notes:
            out.append('<p class="dim">Ops a target could not run:</p><ul class="dim">'
                       + "".join(f"<li>{_e(x)}</li>" for x in notes) + "</ul>")
    if v.case_text:
        original = f'; {_a(f["original_case"], "original program")}' if f.get("original_case") \
            and "original_case" not in v.refused else ""
        out.append(f'<p>{"Case" if harness else "Minimized case"} {_a(f["case"])} '
                   f'(<code>aliasfuzz repro {_e(f["case"])}</code>{original}):</p>')
        out.append(f'<pre class="case">{_e(v.case_text.rstrip())}</pre>')
    out += [f'<p class="dim">{_e(note)}</p>' for note in (v.table_note, v.reps_note) if note]
    if v.reps:
        out.append("<p>Reproducers: " + ", ".join(_a(p) for p in v.reps) + "</p>")
    out.append("</article>")
    return out


def render_html(run: Run, views: list[View]) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>aliasfuzz report: {_e(run.path.name)}</title>", f"<style>{_CSS}</style></head><body>",
           f"<h1>aliasfuzz report: {_e(run.path.name)}</h1>"]
    errors = [v for v in views if v.f["kind"] == HARNESS_ERROR]
    if errors:
        out.append(f'<section id="harness-errors"><h2>{_e(HARNESS_TITLE)} ({len(errors)})</h2>'
                   "<p>aliasfuzz itself raised while handling these programs: the run's findings may be "
                   "incomplete. Report them against aliasfuzz, not a framework.</p>")
        for n, v in enumerate(errors, 1):
            out += _html_finding(n, v)
        out.append("</section>")
    out.append('<section id="summary"><h2>Summary</h2><table class="summary">')
    out += [f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in summary_facts(run)]
    out.append('</table><h3>Targets</h3><table class="targets"><tr><th>target</th><th>versions</th></tr>')
    out += [f"<tr><td>{_e(t)}</td><td>{_e(_versions_text(v))}</td></tr>" for t, v in run.target_versions().items()]
    out.append("</table></section>")
    out.append(f'<section id="findings"><h2>Findings ({len(run.new)} new, {len(run.known)} known)</h2>')
    rest = [v for v in views if v.f["kind"] != HARNESS_ERROR]
    if not rest:
        out.append("<p>No divergence found.</p>")
    for n, v in enumerate(rest, 1):
        out += _html_finding(n, v)
    out.append("</section>")
    out.append(f'<p class="dim">Rendered {_e(_when(time.time()))} by aliasfuzz.</p></body></html>')
    return "\n".join(out) + "\n"


def write_run_reports(run: Run, warn: Warn | None = None) -> list[Path]:
    """Writes report.md and report.html (and each finding's reproducers) into the run folder.
    ``warn`` gets one line per path refused (outside the run folder). Raises ``ReportError``
    when a report cannot be written; the journal and the old report are left whole."""
    for line in run.problems if warn is not None else ():
        warn(line)
    views = [finding_view(f) for f in run.findings]
    for v in views:
        _write_reproducers(run, v)
    md, page = run.path / REPORT_MD, run.path / REPORT_HTML
    for path, render in ((md, render_markdown), (page, render_html)):
        try:
            atomic_write(path, render(run, views))
        except OSError as e:
            raise cannot_write(path, e, run.path / "findings.jsonl") from None
    return [md, page]


def write_reports(run_dir: str | Path, warn: Warn | None = None) -> list[Path]:
    """``write_run_reports(load_run(run_dir), warn)``."""
    return write_run_reports(load_run(run_dir), warn)
