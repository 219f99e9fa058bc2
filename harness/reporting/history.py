"""The history page: findings and throughput over every run folder under a directory
(``history.html``, a hand-written inline SVG; no network, no JavaScript).

A damaged run folder (campaign.json unreadable or not a campaign state, a journal line that is
not an object, binary files, campaign.json that is a folder, a folder with a journal but no
campaign.json) is skipped with one line to ``warn`` naming it and why; the others are rendered.
Only when no run folder at all can be read is it a ``ReportError``.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.errors import InputError
from harness.files import atomic_write
from harness.fuzzing.run_folder import JOURNAL_NAME, STATE_NAME
from harness.fuzzing.run_loading import ReportError, Run, Warn, load_run
from harness.reporting.html import CSS, escape
from harness.reporting.report import HISTORY_HTML, REPORT_HTML
from harness.reporting.views import href, versions_text, when

#: How deep below the directory a run folder may be (``reports/shard-1/run/``: 3).
MAX_DEPTH = 3
_MARKERS = (STATE_NAME, JOURNAL_NAME)  # a folder holding either is a run folder, maybe damaged


def _candidates(root: Path, warn: Warn) -> list[Path]:
    """Folders up to MAX_DEPTH below ``root`` that hold campaign.json or a journal, in name
    order. Links to folders are followed, each folder once (a link loop ends); a run folder's
    own subfolders (cases/, corpus/) are not searched."""
    out: list[Path] = []
    seen: set[tuple[int, int]] = set()

    def walk(d: Path, depth: int) -> None:
        try:
            st = d.stat()
            if (st.st_dev, st.st_ino) in seen:
                return
            seen.add((st.st_dev, st.st_ino))
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError as e:
            warn(f"skipped {d}: cannot list it ({e.strerror or e})")
            return
        if any(e.name in _MARKERS for e in entries):
            out.append(d)
            return
        if depth < MAX_DEPTH:
            # Real folders first, then links: a link to a folder under ``root`` (reports/latest)
            # then finds it seen, and the run is listed under its own name.
            for e in sorted(entries, key=lambda e: e.is_symlink()):
                try:
                    is_dir = e.is_dir()
                except OSError as err:  # cannot tell: not searched, and said so
                    warn(f"skipped {e.path}: cannot tell whether it is a folder ({err.strerror or err})")
                    is_dir = False
                if is_dir:
                    walk(Path(e.path), depth + 1)

    walk(root, 0)
    out.sort(key=lambda p: str(p))
    return out


def find_runs(reports_dir: str | Path, warn: Warn | None = None) -> list[Run]:
    """Every readable run folder under ``reports_dir``, oldest first; ``warn`` gets one line per
    damaged folder skipped."""
    say = warn or (lambda _: None)
    runs = []
    for d in _candidates(Path(reports_dir), say):
        try:
            runs.append(load_run(d))
        except InputError as e:
            say(f"skipped {d}: {e}")
    runs.sort(key=lambda r: float(r.state.get("started") or 0))
    return runs


def _svg_chart(runs: list[Run]) -> str:
    """Stacked bars (new, known findings) per run and a throughput line on a second axis."""
    w, h, left, right, top, bottom = 760, 300, 50, 60, 20, 60
    pw, ph = w - left - right, h - top - bottom
    n = max(len(runs), 1)
    slot = pw / n
    max_f = max([len(r.new) + len(r.known) for r in runs] + [1])
    max_t = max([r.throughput for r in runs] + [1e-9])
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
        f'role="img" aria-label="findings and throughput per run">',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#ccc"/>',
    ]
    for k in range(5):  # grid and left axis (findings)
        y = top + ph - ph * k / 4
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        parts.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{max_f * k / 4:.3g}</text>'
        )
        parts.append(
            f'<text x="{left + pw + 6}" y="{y + 4:.1f}" font-size="11" fill="#1565c0">{max_t * k / 4:.3g}</text>'
        )
    points = []
    for i, r in enumerate(runs):
        x = left + slot * i + slot * 0.2
        bw = slot * 0.6
        hn = ph * len(r.new) / max_f
        hk = ph * len(r.known) / max_f
        y0 = top + ph
        parts.append(
            f'<rect class="bar-new" x="{x:.1f}" y="{y0 - hn:.1f}" width="{bw:.1f}" height="{hn:.1f}" fill="#c62828">'
            f"<title>{escape(r.path.name)}: {len(r.new)} new</title></rect>"
        )
        parts.append(
            f'<rect class="bar-known" x="{x:.1f}" y="{y0 - hn - hk:.1f}" width="{bw:.1f}" height="{hk:.1f}" '
            f'fill="#f9a825"><title>{escape(r.path.name)}: {len(r.known)} known</title></rect>'
        )
        cx = left + slot * (i + 0.5)
        points.append((cx, top + ph - ph * r.throughput / max_t, r))
        label = when(r.state.get("started"))[:10] if r.state.get("started") else r.path.name
        parts.append(
            f'<text x="{cx:.1f}" y="{top + ph + 14}" font-size="10" text-anchor="end" '
            f'transform="rotate(-30 {cx:.1f} {top + ph + 14})">{escape(label)} {escape(r.path.name[-12:])}</text>'
        )
    if points:
        parts.append(
            '<polyline class="throughput" fill="none" stroke="#1565c0" stroke-width="2" points="'
            + " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in points)
            + '"/>'
        )
        for x, y, r in points:
            parts.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="#1565c0"><title>{escape(r.path.name)}: '
                f"{r.throughput:.1f} programs/s</title></circle>"
            )
    parts.append(
        f'<text x="12" y="{top + ph / 2}" font-size="11" transform="rotate(-90 12 {top + ph / 2})" '
        f'text-anchor="middle">findings (red new, amber known)</text>'
    )
    parts.append(
        f'<text x="{w - 8}" y="{top + ph / 2}" font-size="11" fill="#1565c0" '
        f'transform="rotate(90 {w - 8} {top + ph / 2})" text-anchor="middle">programs/s</text>'
    )
    parts.append("</svg>")
    return "\n".join(parts)


def render_history(reports_dir: str | Path, warn: Warn | None = None) -> Path:
    """Writes ``<reports_dir>/history.html`` over every readable run folder under it. ``warn``
    gets one line per damaged folder skipped. Raises ``ReportError`` when no run folder can be
    read or the page cannot be written."""
    root = Path(reports_dir)
    if not root.is_dir():
        raise ReportError(f"{root}: not a directory")
    skipped: list[str] = []

    def note(line: str) -> None:
        skipped.append(line)
        if warn is not None:
            warn(line)

    runs = find_runs(root, note)
    if not runs:
        raise ReportError(
            f"{root}: no run folder could be read ({len(skipped)} damaged, skipped)"
            if skipped
            else f"{root}: no run folder (campaign.json) under it"
        )
    rows = []
    for r in runs:
        rel = r.path.relative_to(root).as_posix()
        link = (
            f'<a href="{escape(href(rel))}/{REPORT_HTML}">{escape(rel)}</a>'
            if (r.path / REPORT_HTML).is_file()
            else escape(rel)
        )
        errors = len(r.harness_errors)
        errors_cell = f'<td class="refused">{errors}</td>' if errors else "<td>0</td>"
        rows.append(
            f"<tr><td>{link}</td><td>{escape(when(r.state.get('started')))}</td><td>{escape(r.config.get('seed'))}</td>"
            f"<td>{r.programs}</td><td>{r.elapsed:.1f}</td><td>{r.throughput:.1f}</td>"
            f"<td>{len(r.new)}</td><td>{len(r.known)}</td>"
            f"{errors_cell}"
            f"<td>{escape('; '.join(f'{t}: {versions_text(v)}' for t, v in r.target_versions().items()))}</td></tr>"
        )
    page = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>aliasfuzz history</title>',
        f"<style>{CSS}</style></head><body>",
        f"<h1>aliasfuzz history: {escape(root.name or root)}</h1>",
        f"<p>{len(runs)} run(s); findings per run (bars) and throughput (line)."
        + (f" {len(skipped)} damaged folder(s) skipped.</p>" if skipped else "</p>"),
        f'<figure id="trend">{_svg_chart(runs)}</figure>',
        '<table class="runs"><tr><th>run</th><th>started</th><th>seed</th><th>programs</th><th>seconds</th>'
        "<th>programs/s</th><th>new</th><th>known</th><th>harness errors</th><th>targets</th></tr>",
        *rows,
        "</table>",
    ]
    if skipped:
        page += ['<h2>Skipped</h2><ul class="dim">', *(f"<li>{escape(s)}</li>" for s in skipped), "</ul>"]
    page.append("</body></html>")
    out = root / HISTORY_HTML
    try:
        atomic_write(out, "\n".join(page) + "\n")
    except OSError as e:
        raise ReportError(f"{out}: cannot write ({e.strerror or e}); the run folders are untouched") from None
    return out
