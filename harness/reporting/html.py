"""``report.html``: the run's report as one self-contained page (inline CSS, no scripts, no
network); divergent table rows have the class ``divergent``, the subject's row ``subject``.
``CSS`` and ``escape`` serve the history page too."""

from __future__ import annotations

import html
import time
from typing import Any

from harness.fuzzing.run_loading import Run
from harness.reporting.table import Table, report_cell, report_notes
from harness.reporting.views import (
    FLAKY_INTRO,
    HARNESS_INTRO,
    HARNESS_TITLE,
    FindingView,
    KnownCause,
    href,
    known_causes,
    known_intro,
    outside_text,
    shrink_text,
    summary_facts,
    target_rows,
    when,
)

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:75em;padding:0 1em;color:#1d1d1f}
h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.6em 0}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.mono,pre,code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.9em}
tr.divergent td{background:#fde2e1}tr.divergent td:first-child{font-weight:bold}tr.subject td:first-child::before{content:"▶ "}
pre{background:#f7f7f7;border:1px solid #e3e3e3;padding:.6em;overflow:auto}
.new{color:#fff;background:#c62828;padding:0 .4em;border-radius:.3em}.known{background:#f9a825;padding:0 .4em;border-radius:.3em}
.sentence{font-size:1.05em;margin:.4em 0}.finding{border-left:4px solid #c62828;padding-left:1em;margin:1.5em 0}
.finding.known-finding{border-left-color:#f9a825}.flaky{background:#90a4ae;padding:0 .4em;border-radius:.3em}.finding.flaky-finding{border-left-color:#90a4ae}.dim{color:#666}.refused{color:#c62828;font-weight:bold}
#harness-errors{border:2px solid #6a1b9a;padding:0 1em 1em}.finding.harness-error{border-left-color:#6a1b9a}
.harness{color:#fff;background:#6a1b9a;padding:0 .4em;border-radius:.3em}
"""


def escape(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _a(rel: str, text: str | None = None) -> str:
    return f'<a href="{escape(href(rel))}">{escape(rel if text is None else text)}</a>'


def _table(table: Table) -> list[str]:
    out = [
        '<table class="side-by-side"><tr><th>tensor / snapshot</th>'
        + "".join(f"<th>{escape(t)}</th>" for t in table.targets)
        + "</tr>"
    ]
    for r in table.rows:
        classes = " ".join(c for c, on in (("divergent", r.divergent), ("subject", r.subject)) if on)
        out.append(
            f'<tr class="{classes}"><td>{escape(r.label)}</td>'
            + "".join(f'<td class="mono">{escape(report_cell(c))}</td>' for c in r.cells)
            + "</tr>"
        )
    out.append("</table>")
    if table.notes:
        out.append(
            '<p class="dim">Ops a target could not run:</p><ul class="dim">'
            + "".join(f"<li>{escape(x)}</li>" for x in report_notes(table.notes))
            + "</ul>"
        )
    return out


def _finding(n: int, v: FindingView) -> list[str]:
    f, rec = v.finding, v.finding.record
    harness = f.harness
    cls = "harness" if harness else rec.status if rec.status in ("new", "flaky") else "known"
    article = {"harness": "harness-error", "new": "", "flaky": "flaky-finding", "known": "known-finding"}[cls]
    base = f" ({escape(rec.baseline)})" if rec.baseline else ""
    out = [
        f'<article class="finding {article}" id="{"harness-error" if harness else "finding"}-{n}">',
        f'<h3>{n}. <span class="{cls}">{"harness error" if harness else escape(rec.status or "?")}{base}</span> '
        f"{escape(rec.kind)}</h3>",
        f'<p class="sentence">{escape(rec.sentence)}</p>',
    ]
    if rec.detail and not harness:
        out.append(f"<p>{escape(rec.detail)}</p>")
    if not harness and outside_text(rec):
        out.append(f'<p class="refused">outside its baseline\'s versions: {escape(outside_text(rec))}</p>')
    where = (
        f"stage {escape(rec.op)}"
        if harness
        else f"{escape(shrink_text(f))}; found after {escape(rec.seconds_to_find)}s"
    )
    out.append(
        f'<p class="dim">signature <code>{escape(rec.signature)}</code>; attributed by the oracle rule '
        + (f"<code>{escape(rec.rule)}</code>" if rec.rule else "(not recorded)")
        + "<br>"
        f"targets {escape(', '.join(dict.fromkeys(rec.targets)))}; {where}</p>"
    )
    out += [
        f'<p class="refused">{escape(why)}: <code>{escape(getattr(rec, key))}</code> (not read)</p>'
        for key, why in f.refused.items()
    ]
    if harness:
        out.append(
            f'<p>Traceback (inside aliasfuzz):</p><pre class="traceback">{escape(rec.detail or "(none recorded)")}</pre>'
        )
    if v.table:
        out += _table(v.table)
    if v.case_text:
        original = (
            f"; {_a(rec.original_case, 'original program')}"
            if rec.original_case and "original_case" not in f.refused
            else ""
        )
        out.append(
            f"<p>{'Case' if harness else 'Minimized case'} {_a(rec.case)} "
            f"(<code>aliasfuzz repro {escape(rec.case)}</code>{original}):</p>"
        )
        out.append(f'<pre class="case">{escape(v.case_text.rstrip())}</pre>')
    out += [f'<p class="dim">{escape(note)}</p>' for note in (v.table_note, v.reps_note) if note]
    if v.reps:
        out.append("<p>Reproducers: " + ", ".join(_a(p) for p in v.reps) + "</p>")
    out.append("</article>")
    return out


def _known_table(causes: list[KnownCause], intro: str) -> list[str]:
    if not causes:
        return []
    out = [
        f'<section id="known"><h2>Known root causes ({len(causes)})</h2><p>{escape(intro)}</p>',
        '<table class="known"><tr><th>baseline entry</th><th>findings</th><th>found after</th><th>first seen</th><th>reason</th>'
        "<th>upstream</th><th>case</th></tr>",
    ]
    for c in causes:
        first = "—" if c.first_found_s is None else f"{c.first_found_s:.1f}s"
        sigs = "".join(f"<li><code>{escape(sig)}</code></li>" for sig in c.signatures)
        out.append(
            f'<tr id="known-{escape(c.id)}"><td><code>{escape(c.id)}</code></td>'
            f"<td><details><summary>{len(c.signatures)}</summary><ul>{sigs}</ul></details></td>"
            f"<td>{first}</td><td>{escape(c.first_seen or '—')}</td><td>{escape(c.reason)}</td><td>{escape(c.upstream) or '—'}</td>"
            f"<td><code>{escape(c.case)}</code></td></tr>"
        )
    return out + ["</table></section>"]


def render_html(run: Run, views: list[FindingView]) -> str:
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>aliasfuzz report: {escape(run.path.name)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>aliasfuzz report: {escape(run.path.name)}</h1>",
    ]
    errors = [v for v in views if v.finding.harness]
    if errors:
        out.append(
            f'<section id="harness-errors"><h2>{escape(HARNESS_TITLE)} ({len(errors)})</h2><p>{HARNESS_INTRO}</p>'
        )
        for n, v in enumerate(errors, 1):
            out += _finding(n, v)
        out.append("</section>")
    out.append('<section id="summary"><h2>Summary</h2><table class="summary">')
    out += [f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in summary_facts(run)]
    out.append(
        '</table><h3>Targets</h3><table class="targets"><tr><th>target</th><th>versions</th>'
        "<th>programs run</th><th>time per program</th></tr>"
    )
    out += ["<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in target_rows(run)]
    out.append("</table></section>")
    out.append(f'<section id="findings"><h2>Findings ({len(run.new)} new, {len(run.known)} known)</h2>')
    rest = [v for v in views if not v.finding.harness and v.finding.record.status == "new"]
    flaky = [v for v in views if not v.finding.harness and v.finding.record.status == "flaky"]
    if not rest and not run.known:
        out.append("<p>No divergence found.</p>")
    elif not rest:
        out.append("<p>No new divergence: every finding is a known root cause (below).</p>")
    for n, v in enumerate(rest, 1):
        out += _finding(n, v)
    out.append("</section>")
    if flaky:
        out.append(f'<section id="flaky"><h2>Flaky findings ({len(flaky)})</h2><p>{escape(FLAKY_INTRO)}</p>')
        for n, v in enumerate(flaky, len(rest) + 1):
            out += _finding(n, v)
        out.append("</section>")
    out += _known_table(known_causes(run), known_intro(run))
    out.append(f'<p class="dim">Rendered {escape(when(time.time()))} by aliasfuzz.</p></body></html>')
    return "\n".join(out) + "\n"
