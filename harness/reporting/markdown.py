"""``report.md``: the run's report in Markdown (harness errors, summary, targets, one section per
new finding with its side-by-side table, divergent rows in bold with ⚠, the subject marked ▶, the
flaky ones, then one table of the known root causes)."""

from __future__ import annotations

from harness.escaping import md_code, md_fence, md_text
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
)

# Every field of a finding, a run or a baseline entry is written through harness.escaping
# (md_text, md_code, md_fence), as report.html writes it through html.escape: a field is text,
# never Markdown or HTML.
_cell = md_text
_fence = md_fence


def _link(rel: str | None) -> str:
    return f"[{_cell(rel)}]({href(rel)})" if rel else "—"


def _table(table: Table) -> list[str]:
    out = [
        "| tensor / snapshot | " + " | ".join(_cell(t) for t in table.targets) + " |",
        "|---|" + "---|" * len(table.targets),
    ]
    for r in table.rows:
        mark = "**" if r.divergent else ""
        label = ("⚠ " if r.divergent else "") + ("▶ " if r.subject else "") + r.label
        out.append(
            f"| {mark}{_cell(label)}{mark} | "
            + " | ".join(f"{mark}{_cell(report_cell(c))}{mark}" for c in r.cells)
            + " |"
        )
    if table.notes:
        out += ["", "Ops a target could not run:", ""] + [f"- {_cell(x)}" for x in report_notes(table.notes)]
    return out + [""]


def _finding(n: int, v: FindingView) -> list[str]:
    f, rec = v.finding, v.finding.record
    harness = f.harness
    base = f" (baseline {rec.baseline})" if rec.baseline else ""
    status = md_text(f"{'harness error' if harness else rec.status or '?'}{base}")
    # The brackets are the report's own: the text inside is escaped, so "[new]" never becomes a link.
    out = [
        f"### {n}. [{status}] {md_text(rec.kind)}: {md_text(rec.sentence)}",
        "",
        f"- signature: {md_code(rec.signature)}; attributed by the oracle rule "
        + (md_code(rec.rule) if rec.rule else "(not recorded)"),
        f"- targets: {md_text(', '.join(map(str, dict.fromkeys(rec.targets))))}; "
        f"{'stage' if harness else 'op'} {md_code(rec.op)}" + ("" if harness else f", method {md_code(rec.method)}"),
    ]
    if not harness:
        out.append(f"- {md_text(shrink_text(f))}; found after {md_text(rec.seconds_to_find)}s")
        if outside_text(rec):
            out.append(f"- **outside its baseline's versions**: {md_text(outside_text(rec))}")
    out += [f"- **{md_text(why)}**: {md_code(getattr(rec, key))} (not read)" for key, why in f.refused.items()]
    if rec.case and "case" not in f.refused:
        out.append(
            f"- case: {_link(rec.case)} ({md_code(f'aliasfuzz repro {rec.case}')}); original: "
            f"{_link(rec.original_case if 'original_case' not in f.refused else None)}"
        )
    out.append("")
    if harness:
        out += ["Traceback (inside aliasfuzz):", "", *_fence(rec.detail or "(none recorded)", "text"), ""]
    elif rec.detail:
        out += [md_text(rec.detail), ""]
    if v.case_text:
        out += [*_fence(v.case_text, "toml"), ""]
    if v.table:
        out += _table(v.table)
    for note in (v.table_note, v.reps_note):
        if note:
            out += [f"_{_cell(note)}_", ""]
    if v.reps:
        out += ["Reproducers: " + ", ".join(_link(p) for p in v.reps), ""]
    return out


def render_markdown(run: Run, views: list[FindingView]) -> str:
    out = [f"# aliasfuzz report: {md_text(run.path.name)}", ""]
    errors = [v for v in views if v.finding.harness]
    if errors:
        out += [f"## {HARNESS_TITLE} ({len(errors)})", "", HARNESS_INTRO, ""]
        for n, v in enumerate(errors, 1):
            out += _finding(n, v)
    out += ["## Summary", "", "| | |", "|---|---|"]
    out += [f"| {k} | {_cell(v)} |" for k, v in summary_facts(run)]
    out += ["", "### Targets", "", "| target | versions | programs run | time per program |", "|---|---|---|---|"]
    out += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in target_rows(run)]
    out += ["", f"## Findings ({len(run.new)} new, {len(run.known)} known)", ""]
    rest = [v for v in views if not v.finding.harness and v.finding.record.status == "new"]
    flaky = [v for v in views if not v.finding.harness and v.finding.record.status == "flaky"]
    if not rest and not run.known:
        out.append("No divergence found.")
    elif not rest:
        out.append("No new divergence: every finding is a known root cause (below).")
    for n, v in enumerate(rest, 1):
        out += _finding(n, v)
    if flaky:
        out += [f"## Flaky findings ({len(flaky)})", "", FLAKY_INTRO, ""]
        for n, v in enumerate(flaky, len(rest) + 1):
            out += _finding(n, v)
    return "\n".join(out + _known_table(known_causes(run), known_intro(run))) + "\n"


def _known_table(causes: list[KnownCause], intro: str) -> list[str]:
    if not causes:
        return []
    out = [
        f"## Known root causes ({len(causes)})",
        "",
        intro,
        "",
        "| baseline entry | findings | found after | first seen | reason | upstream | case |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in causes:
        first = "—" if c.first_found_s is None else f"{c.first_found_s:.1f}s"
        out.append(
            f"| {md_code(c.id)} | {len(c.signatures)} | {first} | {md_text(c.first_seen or '—')} | {_cell(c.reason)} "
            f"| {_cell(c.upstream) or '—'} "
            f"| {md_code(c.case)} |"
        )
    out += ["", "<details><summary>Their signatures</summary>", ""]
    for c in causes:
        out += [f"- {md_code(c.id)}: " + ", ".join(md_code(sig) for sig in c.signatures)]
    return out + ["", "</details>", ""]
