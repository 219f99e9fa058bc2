"""Reports of a run folder: ``report.md`` and a single-file ``report.html`` (inline CSS, no
network, no JavaScript), and a history page over many run folders (``history.html``, a
hand-written inline SVG).

Everything is rendered from the run folder alone (campaign.json, findings.json or the journal,
the case files and their repro JSON), so ``aliasfuzz report DIR`` can re-render at any time.
"""

from __future__ import annotations

import html
import json
import math
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .errors import InputError

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
HISTORY_HTML = "history.html"


class ReportError(InputError):
    """The input is not something a report can be made from (one line)."""


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# ------------------------------------------------------------------------------------------------
# Loading.


@dataclass
class Run:
    path: Path
    state: dict[str, Any]
    findings: list[dict[str, Any]]

    @property
    def config(self) -> dict[str, Any]:
        return self.state.get("config", {})

    @property
    def programs(self) -> int:
        return int(self.state.get("programs", 0))

    @property
    def elapsed(self) -> float:
        return float(self.state.get("elapsed_s", 0.0))

    @property
    def throughput(self) -> float:
        return self.programs / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def new(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if f.get("status") == "new"]

    @property
    def known(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if f.get("status") != "new"]

    def target_versions(self) -> dict[str, dict[str, str]]:
        out = {}
        for tid, info in (self.state.get("targets") or {}).items():
            out[tid] = dict(info.get("versions", {})) if isinstance(info, dict) else {}
        return out


def load_run(run_dir: str | Path) -> Run:
    path = Path(run_dir)
    if not path.is_dir():
        raise ReportError(f"{path}: not a directory")
    state_file = path / "campaign.json"
    if not state_file.exists():
        raise ReportError(f"{path}: no campaign.json: not a run folder")
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ReportError(f"{state_file}: unreadable ({e})") from None
    if not isinstance(state, dict):
        raise ReportError(f"{state_file}: not a campaign state")
    findings: list[dict[str, Any]] = []
    fj = path / "findings.json"
    try:
        findings = json.loads(fj.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        findings = []
    journal = path / "findings.jsonl"
    if journal.exists():  # the journal is the truth (findings.json may lag a kill)
        recs = []
        for line in journal.read_text(encoding="utf-8").splitlines():
            try:
                recs.append(json.loads(line))
            except ValueError:
                continue
        if len(recs) > len(findings):
            findings = recs
    findings = [f for f in findings if isinstance(f, dict)]
    # New findings first (what a reader acts on), each group in the order found.
    findings.sort(key=lambda f: f.get("status") != "new")
    return Run(path, state, findings)


def _read(run: Run, rel: str | None) -> str | None:
    if not rel:
        return None
    try:
        return (run.path / rel).read_text(encoding="utf-8")
    except OSError:
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


def _repro(run: Run, finding: dict) -> dict | None:
    text = _read(run, finding.get("repro"))
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


# ------------------------------------------------------------------------------------------------
# The side-by-side table (targets x tensors/snapshots).


def _flat(v: Any) -> list[float] | None:
    if v is None:
        return None
    out: list[float] = []

    def walk(x):
        if isinstance(x, list):
            for y in x:
                walk(y)
        else:
            out.append(float(x))

    walk(v)
    return out


def _fmt_values(v: Any) -> str:
    flat = _flat(v)
    if flat is None:
        return "—"
    text = ", ".join(f"{x:.6g}" for x in flat[:12])
    return f"[{text}{', …' if len(flat) > 12 else ''}]"


def _close(a: list[float], b: list[float]) -> bool:
    if len(a) != len(b):
        return False
    return all((math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-6)
               for x, y in zip(a, b))


def side_by_side(repro: dict, finding: dict | None = None) -> tuple[list[str], list[dict[str, Any]]]:
    """(target ids, rows); a row: {label, cells: [text], divergent: bool, subject: bool}."""
    targets = repro.get("targets") or {}
    ids = list(targets)
    subjects = {d.get("subject") for d in repro.get("divergences") or []
                if finding is None or d.get("signature") == finding.get("signature")}
    names: list[str] = []
    snaps: set[str] = set()
    for t in targets.values():
        for n in (t.get("final") or {}):
            if n not in names:
                names.append(n)
        snaps.update((t.get("verdicts") or {}).keys())
    for t in targets.values():
        for n in (t.get("verdicts") or {}):
            if n not in names:
                names.append(n)
    rows = []
    for n in names:
        cells, vals, verdicts = [], [], []
        for tid in ids:
            t = targets[tid]
            if t.get("status") not in (None, "ok"):
                cells.append(str(t.get("status")))
                continue
            final = t.get("final") or {}
            verdict = (t.get("verdicts") or {}).get(n)
            parts = []
            if verdict is not None:
                parts.append(str(verdict))
                verdicts.append(str(verdict))
            if n in final:
                parts.append(_fmt_values(final[n]))
                f = _flat(final[n])
                if f is not None:
                    vals.append(f)
            cells.append(" ".join(parts) if parts else "—")
        divergent = len(set(verdicts)) > 1 or any(not _close(vals[0], v) for v in vals[1:])
        rows.append({"label": n + (" (snapshot)" if n in snaps else ""), "cells": cells,
                     "divergent": divergent, "subject": n in subjects})
    return ids, rows


def _op_notes(repro: dict) -> list[str]:
    notes = []
    for tid, t in (repro.get("targets") or {}).items():
        for i, s in enumerate(t.get("ops") or []):
            if s.get("status", "ok") != "ok":
                notes.append(f"{tid} op {i}: {s['status']}" + (f": {s['message']}" if s.get("message") else ""))
        if t.get("status") not in (None, "ok"):
            notes.append(f"{tid}: {t.get('status')}: {t.get('message') or ''}".rstrip(": "))
    return notes


# ------------------------------------------------------------------------------------------------
# Summary facts.


def _when(ts: Any) -> str:
    try:
        return datetime.fromtimestamp(float(ts), tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def summary_facts(run: Run) -> list[tuple[str, str]]:
    c = run.config
    m = run.state.get("machine") or {}
    budget = c.get("budget_s")
    facts = [
        ("started", _when(run.state.get("started"))),
        ("seed", str(c.get("seed", "?"))),
        ("profile", str(c.get("profile", "?"))),
        ("budget", f"{budget:g}s" if isinstance(budget, (int, float)) else "none"),
        ("max programs", str(c.get("max_programs")) if c.get("max_programs") is not None else "none"),
        ("workers", str(c.get("workers", 1))),
        ("programs run", str(run.programs) + (f" ({run.state['repeats_skipped']} of them repeats of a program"
                                               " already run, not run again)" if run.state.get("repeats_skipped") else "")),
        ("replayed from the corpus", str(run.state.get("replayed", 0))),
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


def _versions_text(v: dict[str, str]) -> str:
    return ", ".join(f"{k} {x}" for k, x in v.items()) or "—"


def _reproducer_links(run: Run, finding: dict) -> list[str]:
    from . import reproducers

    try:
        paths = reproducers.write_reproducers(run.path, finding)
    except Exception as e:  # a report never fails because of one reproducer
        return [f"!{type(e).__name__}: {e}"]
    return [str(p.relative_to(run.path)) + ("/" if p.is_dir() else "") for p in paths]


# ------------------------------------------------------------------------------------------------
# Markdown.


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(run: Run, links: dict[str, list[str]]) -> str:
    out = [f"# aliasfuzz report: {run.path.name}", "", "## Summary", ""]
    out += ["| | |", "|---|---|"]
    out += [f"| {k} | {_md_cell(v)} |" for k, v in summary_facts(run)]
    out += ["", "### Targets", "", "| target | versions |", "|---|---|"]
    for tid, v in run.target_versions().items():
        out.append(f"| {tid} | {_md_cell(_versions_text(v))} |")
    out += ["", f"## Findings ({len(run.new)} new, {len(run.known)} known)", ""]
    if not run.findings:
        out.append("No divergence found.")
    for n, f in enumerate(run.findings, 1):
        status = f.get("status", "?")
        base = f" (baseline {f['baseline']})" if f.get("baseline") else ""
        out += [f"### {n}. [{status}{base}] {f.get('kind', '?')}: {f.get('sentence', '')}", "",
                f"- signature: `{f.get('signature', '')}`",
                f"- targets: {', '.join(f.get('targets', []))}; op `{f.get('op')}`, method `{f.get('method')}`",
                f"- {_shrink_text(f)}; found after {f.get('seconds_to_find')}s",
                f"- case: [{f.get('case')}]({f.get('case')}) (`aliasfuzz repro {f.get('case')}`); "
                f"original: [{f.get('original_case')}]({f.get('original_case')})", ""]
        if f.get("detail"):
            out += [f"{f['detail']}", ""]
        case = _read(run, f.get("case"))
        if case:
            out += ["```toml", case.rstrip(), "```", ""]
        repro = _repro(run, f)
        if repro:
            ids, rows = side_by_side(repro, f)
            out += ["| tensor / snapshot | " + " | ".join(ids) + " |", "|---|" + "---|" * len(ids)]
            for r in rows:
                mark = "**" if r["divergent"] else ""
                label = ("⚠ " if r["divergent"] else "") + r["label"]
                out.append(f"| {mark}{_md_cell(label)}{mark} | " + " | ".join(
                    f"{mark}{_md_cell(c)}{mark}" for c in r["cells"]) + " |")
            notes = _op_notes(repro)
            if notes:
                out += ["", "Ops a target could not run:", ""] + [f"- {_md_cell(x)}" for x in notes]
            out.append("")
        reps = links.get(f.get("signature", ""), [])
        if reps:
            out.append("Reproducers: " + ", ".join(f"[{p}]({p})" for p in reps))
            out.append("")
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
.finding.known-finding{border-left-color:#f9a825}.dim{color:#666}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def render_html(run: Run, links: dict[str, list[str]]) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>aliasfuzz report: {_e(run.path.name)}</title>", f"<style>{_CSS}</style></head><body>",
           f"<h1>aliasfuzz report: {_e(run.path.name)}</h1>",
           '<section id="summary"><h2>Summary</h2><table class="summary">']
    out += [f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in summary_facts(run)]
    out.append('</table><h3>Targets</h3><table class="targets"><tr><th>target</th><th>versions</th></tr>')
    out += [f"<tr><td>{_e(t)}</td><td>{_e(_versions_text(v))}</td></tr>" for t, v in run.target_versions().items()]
    out.append("</table></section>")
    out.append(f'<section id="findings"><h2>Findings ({len(run.new)} new, {len(run.known)} known)</h2>')
    if not run.findings:
        out.append("<p>No divergence found.</p>")
    for n, f in enumerate(run.findings, 1):
        status = f.get("status", "?")
        cls = "new" if status == "new" else "known"
        out.append(f'<article class="finding {"" if cls == "new" else "known-finding"}" id="finding-{n}">')
        base = f" ({_e(f['baseline'])})" if f.get("baseline") else ""
        out.append(f'<h3>{n}. <span class="{cls}">{_e(status)}{base}</span> {_e(f.get("kind", "?"))}</h3>')
        out.append(f'<p class="sentence">{_e(f.get("sentence", ""))}</p>')
        if f.get("detail"):
            out.append(f"<p>{_e(f['detail'])}</p>")
        out.append(f'<p class="dim">signature <code>{_e(f.get("signature", ""))}</code><br>'
                   f'targets {_e(", ".join(f.get("targets", [])))}; {_e(_shrink_text(f))}; found after '
                   f'{_e(f.get("seconds_to_find"))}s</p>')
        repro = _repro(run, f)
        if repro:
            ids, rows = side_by_side(repro, f)
            out.append('<table class="side-by-side"><tr><th>tensor / snapshot</th>'
                       + "".join(f"<th>{_e(t)}</th>" for t in ids) + "</tr>")
            for r in rows:
                classes = " ".join(c for c, on in (("divergent", r["divergent"]), ("subject", r["subject"])) if on)
                out.append(f'<tr class="{classes}"><td>{_e(r["label"])}</td>'
                           + "".join(f'<td class="mono">{_e(c)}</td>' for c in r["cells"]) + "</tr>")
            out.append("</table>")
            notes = _op_notes(repro)
            if notes:
                out.append('<p class="dim">Ops a target could not run:</p><ul class="dim">'
                           + "".join(f"<li>{_e(x)}</li>" for x in notes) + "</ul>")
        case = _read(run, f.get("case"))
        if case:
            out.append(f'<p>Minimized case <a href="{_e(f.get("case"))}">{_e(f.get("case"))}</a> '
                       f'(<code>aliasfuzz repro {_e(f.get("case"))}</code>; '
                       f'<a href="{_e(f.get("original_case"))}">original program</a>):</p>')
            out.append(f'<pre class="case">{_e(case.rstrip())}</pre>')
        reps = links.get(f.get("signature", ""), [])
        if reps:
            out.append("<p>Reproducers: " + ", ".join(f'<a href="{_e(p)}">{_e(p)}</a>' for p in reps) + "</p>")
        out.append("</article>")
    out.append("</section>")
    out.append(f'<p class="dim">Rendered {_e(_when(time.time()))} by aliasfuzz.</p></body></html>')
    return "\n".join(out) + "\n"


def write_reports(run_dir: str | Path) -> list[Path]:
    """Writes report.md and report.html (and each finding's reproducers) into the run folder."""
    run = load_run(run_dir)
    links = {f.get("signature", ""): _reproducer_links(run, f) for f in run.findings if f.get("case")}
    md = run.path / REPORT_MD
    page = run.path / REPORT_HTML
    _atomic_write(md, render_markdown(run, links))
    _atomic_write(page, render_html(run, links))
    return [md, page]


# ------------------------------------------------------------------------------------------------
# History: a trend over every run folder under a directory.


def find_runs(reports_dir: Path) -> list[Run]:
    runs = []
    for state in sorted(reports_dir.glob("**/campaign.json")):
        if len(state.relative_to(reports_dir).parts) > 4:
            continue
        try:
            runs.append(load_run(state.parent))
        except ReportError:
            continue
    runs.sort(key=lambda r: float(r.state.get("started") or 0))
    return runs


def _svg_chart(runs: list[Run]) -> str:
    """Stacked bars (new, known findings) per run and a throughput line on a second axis."""
    w, h, left, right, top, bottom = 760, 300, 50, 60, 20, 60
    pw, ph = w - left - right, h - top - bottom
    n = max(len(runs), 1)
    slot = pw / n
    max_f = max([len(r.findings) for r in runs] + [1])
    max_t = max([r.throughput for r in runs] + [1e-9])
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
             f'role="img" aria-label="findings and throughput per run">',
             f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#ccc"/>']
    for k in range(5):  # grid and left axis (findings)
        y = top + ph - ph * k / 4
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{max_f * k / 4:.3g}</text>')
        parts.append(f'<text x="{left + pw + 6}" y="{y + 4:.1f}" font-size="11" fill="#1565c0">{max_t * k / 4:.3g}</text>')
    points = []
    for i, r in enumerate(runs):
        x = left + slot * i + slot * 0.2
        bw = slot * 0.6
        hn = ph * len(r.new) / max_f
        hk = ph * len(r.known) / max_f
        y0 = top + ph
        parts.append(f'<rect class="bar-new" x="{x:.1f}" y="{y0 - hn:.1f}" width="{bw:.1f}" height="{hn:.1f}" fill="#c62828">'
                     f'<title>{_e(r.path.name)}: {len(r.new)} new</title></rect>')
        parts.append(f'<rect class="bar-known" x="{x:.1f}" y="{y0 - hn - hk:.1f}" width="{bw:.1f}" height="{hk:.1f}" '
                     f'fill="#f9a825"><title>{_e(r.path.name)}: {len(r.known)} known</title></rect>')
        cx = left + slot * (i + 0.5)
        points.append((cx, top + ph - ph * r.throughput / max_t, r))
        label = _when(r.state.get("started"))[:10] if r.state.get("started") else r.path.name
        parts.append(f'<text x="{cx:.1f}" y="{top + ph + 14}" font-size="10" text-anchor="end" '
                     f'transform="rotate(-30 {cx:.1f} {top + ph + 14})">{_e(label)} {_e(r.path.name[-12:])}</text>')
    if points:
        parts.append('<polyline class="throughput" fill="none" stroke="#1565c0" stroke-width="2" points="'
                     + " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in points) + '"/>')
        for x, y, r in points:
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="#1565c0"><title>{_e(r.path.name)}: '
                         f'{r.throughput:.1f} programs/s</title></circle>')
    parts.append(f'<text x="12" y="{top + ph / 2}" font-size="11" transform="rotate(-90 12 {top + ph / 2})" '
                 f'text-anchor="middle">findings (red new, amber known)</text>')
    parts.append(f'<text x="{w - 8}" y="{top + ph / 2}" font-size="11" fill="#1565c0" '
                 f'transform="rotate(90 {w - 8} {top + ph / 2})" text-anchor="middle">programs/s</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def render_history(reports_dir: str | Path) -> Path:
    """Writes ``<reports_dir>/history.html``: findings and throughput over every run folder."""
    root = Path(reports_dir)
    if not root.is_dir():
        raise ReportError(f"{root}: not a directory")
    runs = find_runs(root)
    if not runs:
        raise ReportError(f"{root}: no run folder (campaign.json) under it")
    rows = []
    for r in runs:
        rel = r.path.relative_to(root)
        link = f'<a href="{_e(rel.as_posix())}/report.html">{_e(rel)}</a>' if (r.path / REPORT_HTML).exists() else _e(rel)
        rows.append(f"<tr><td>{link}</td><td>{_e(_when(r.state.get('started')))}</td><td>{_e(r.config.get('seed'))}</td>"
                    f"<td>{r.programs}</td><td>{r.elapsed:.1f}</td><td>{r.throughput:.1f}</td>"
                    f"<td>{len(r.new)}</td><td>{len(r.known)}</td>"
                    f"<td>{_e('; '.join(f'{t}: {_versions_text(v)}' for t, v in r.target_versions().items()))}</td></tr>")
    page = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8"><title>aliasfuzz history</title>',
            f"<style>{_CSS}</style></head><body>", f"<h1>aliasfuzz history: {_e(root.name or root)}</h1>",
            f"<p>{len(runs)} run(s); findings per run (bars) and throughput (line).</p>",
            f'<figure id="trend">{_svg_chart(runs)}</figure>',
            '<table class="runs"><tr><th>run</th><th>started</th><th>seed</th><th>programs</th><th>seconds</th>'
            "<th>programs/s</th><th>new</th><th>known</th><th>targets</th></tr>", *rows, "</table>",
            "</body></html>"]
    out = root / HISTORY_HTML
    _atomic_write(out, "\n".join(page) + "\n")
    return out
