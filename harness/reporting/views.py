"""What every report view (Markdown, HTML, the history page) shows of a run and of each finding,
as plain text; each view only escapes and lays it out."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

from harness.case.case_file import load_case
from harness.case.ir import Program
from harness.errors import InputError
from harness.fuzzing.baseline import load_baseline
from harness.fuzzing.run_loading import Run, ShownFinding
from harness.reporting.table import Table, table_of_repro
from harness.triage import default_store, read_delta
from harness.triage.store import TriageError, TriageStore
from harness.urls import hide_password

HARNESS_TITLE = "Harness errors: aliasfuzz bugs, not framework findings"
HARNESS_INTRO = (
    "aliasfuzz itself raised while handling these programs: the run's findings may be "
    "incomplete. Report them against aliasfuzz, not a framework."
)


@dataclass
class FindingView:
    """What the report shows of one finding: its case, its table (or why there is none), and its
    reproducers (or why there are none)."""

    finding: ShownFinding
    case_text: str | None = None
    program: Program | None = None
    table: Table | None = None
    table_note: str | None = None
    reps: list[str] = field(default_factory=list)  # reproducer paths, relative to the run folder
    reps_note: str | None = None


def finding_view(f: ShownFinding) -> FindingView:
    """The case and the table of ``f`` read from the run folder; a case or repro file that cannot
    be read, or is not of this case, leaves a note in their place (a report never fails because
    of one finding)."""
    rec = f.record
    view = FindingView(f, case_text=f.read("case"))
    if "case" in f.paths and view.case_text is None:
        view.table_note = f"no table or reproducers: {rec.case} cannot be read (missing, or not a UTF-8 file)"
    elif "case" in f.paths:
        try:
            view.program = load_case(f.paths["case"])
        except InputError as e:
            view.table_note = f"no table or reproducers: {e}"
    if f.harness or view.program is None or not rec.repro or f.blocked:
        return view
    text = f.read("repro")
    if text is None:
        view.table_note = f"no table: {rec.repro} cannot be read (missing, or not a UTF-8 file)"
        return view
    try:
        view.table = table_of_repro(json.loads(text), view.program, rec.signature)
    except Exception as e:  # noqa: BLE001 - a report never fails because of one table
        view.table_note = f"table left out: {rec.repro} is not the repro JSON of this case ({type(e).__name__})"
    return view


def shrink_text(f: ShownFinding) -> str:
    """How the finding's case was shrunk, or why it was not (a known finding, by default), and
    how its confirmation on fresh probe processes went, when it had one."""
    r = f.record
    if r.shrink_seconds is None:
        if r.status != "known":
            return f"not shrunk, {r.ops_before} ops" + _confirm_text(r)
        case = f" (the baseline's case `{r.baseline_case}` is its minimal form)" if r.baseline_case else ""
        return f"not shrunk, {r.ops_before} ops: known{case}"
    return (
        f"shrunk {r.ops_before} → {r.ops_after} ops"
        f" ({'complete' if r.shrink_complete else 'stopped early'}, {r.shrink_runs} runs,"
        f" {r.shrink_seconds}s)"
    ) + _confirm_text(r)


def outside_text(r) -> str | None:
    """For a new finding a baseline entry would explain but for the installed versions: which, why,
    and what to do."""
    if not r.outside_baseline:
        return None
    return (
        f"baseline entry {r.outside_baseline} (the versions it was observed with): "
        "`aliasfuzz recheck`, then widen the entry's `versions` if it still shows"
    )


def _confirm_text(r) -> str:
    if r.confirm_runs is None:
        return "; not confirmed" if r.status in ("new", "flaky") else ""
    return f"; shown in {r.confirmed} of {r.confirm_runs} runs on fresh probe processes"


@dataclass
class KnownCause:
    """One baseline entry as a run saw it: the known findings it explains, collapsed into one
    row of the report's table of known root causes (its own case is their minimal form)."""

    id: str
    reason: str
    upstream: str
    case: str  # the entry's case, relative to the checkout
    signatures: list[str]
    first_found_s: float | None  # the earliest of its findings, seconds into the run
    first_seen: str | None = None  # when the triage store first saw it ("2026-12-02 15:52 UTC"): a run's start


def first_seen_in_store(run: Run) -> dict[str, str]:
    """Root cause id -> the start of the first run the triage store saw it in ("2026-12-02 15:52
    UTC"): as the run's recording wrote it into the run folder (``triage.json``), or for a run
    recorded before that was written, from the store beside the run folder, opened read-only.
    Empty when there is neither; a store beside it that cannot be read is one warning line on
    stderr, and the report is drawn all the same."""

    def shown(started: str) -> str:
        return started[:16].replace("T", " ") + " UTC"

    delta = read_delta(run.root)
    if delta is not None and delta.first_seen_at:
        return {c: shown(at) for c, at in delta.first_seen_at.items()}
    path = default_store(run.root)
    if not path.is_file():
        return {}
    try:
        with TriageStore(path, write=False) as db:
            causes = db.causes()
    except TriageError as e:
        _warn_once(f"aliasfuzz: warning: {e}; the report is drawn without the store's first sightings")
        return {}
    return {c.id: shown(c.first_seen) for c in causes if c.first_seen}


@cache
def _warn_once(line: str) -> None:
    """``line`` on stderr, once per process: the Markdown and HTML reports draw the same views."""
    print(line, file=sys.stderr)


def known_causes(run: Run) -> list[KnownCause]:
    """The run's known findings by baseline entry, in the order the run first found them. Reason
    and reference come from the run's baseline (the bundled one unless the campaign named
    another); an id the baseline no longer has keeps only its findings."""

    try:
        entries = {e.id: e for e in load_baseline(run.config.get("baseline")).entries}
    except InputError:
        entries = {}
    out: dict[str, KnownCause] = {}
    seen = first_seen_in_store(run)
    for f in run.known:
        rec = f.record
        key = rec.baseline or "?"
        e = entries.get(key)
        cause = out.setdefault(
            key,
            KnownCause(
                key,
                e.reason if e else "(not in the baseline any more)",
                e.upstream if e else "",
                e.case if e else (rec.baseline_case or ""),
                [],
                None,
                seen.get(key),
            ),
        )
        cause.signatures.append(rec.signature)
        if rec.seconds_to_find is not None and (
            cause.first_found_s is None or rec.seconds_to_find < cause.first_found_s
        ):
            cause.first_found_s = rec.seconds_to_find
    return sorted(out.values(), key=lambda c: (c.first_found_s is None, c.first_found_s or 0.0))


def known_intro(run: Run) -> str:
    """The intro of the reports' table of known root causes. It says whether the run shrank its known
    findings (``--shrink-known``) or left them as found, since the entry's case is their minimal form."""
    head = "Divergences the baseline explains (documented framework semantics), one row per baseline entry"
    on_demand = " `aliasfuzz draft CASE --known` writes the reproducers of a row's case."
    if run.config.get("shrink_known"):
        return head + ": the run shrank each finding it matched; the entry's case is their reference form." + on_demand
    return head + ": its case is the minimal form of every finding it matched, so they were not shrunk." + on_demand


def findings_text(run: Run) -> str:
    """``N new, M known``, with the flaky ones when there are any."""
    flaky = f", {len(run.flaky)} flaky" if run.flaky else ""
    return f"{len(run.new)} new{flaky}, {len(run.known)} known"


#: The intro of the reports' section of flaky findings.
FLAKY_INTRO = (
    "Each of these showed in a campaign and again on the minimized case, but not in every one "
    "of the runs on freshly started probe processes that confirm a finding: what it shows "
    "depends on more than the program (what a process ran before, timing). They are not "
    "counted as new findings; replay one with `aliasfuzz repro` to see it."
)


def summary_facts(run: Run) -> list[tuple[str, str]]:
    c = run.config
    m = run.state.get("machine") or {}
    budget = c.get("budget_s")
    facts = (
        [("harness errors", f"{len(run.harness_errors)} (aliasfuzz bugs, not framework findings)")]
        if run.harness_errors
        else []
    )
    facts += [
        ("started", when(run.state.get("started"))),
        ("seed", str(c.get("seed", "?"))),
        ("profile", str(c.get("profile", "?"))),
        ("budget", f"{budget:g}s" if isinstance(budget, (int, float)) else "none"),
        ("max programs", str(c.get("max_programs")) if c.get("max_programs") is not None else "none"),
        ("workers", str(c.get("workers", 1))),
        (
            "programs run",
            str(run.programs)
            + (
                f" ({run.state['repeats_skipped']} of them repeats of a program already run, not run again)"
                if run.state.get("repeats_skipped")
                else ""
            ),
        ),
        ("replayed from the corpus", str(run.state.get("replayed", 0))),
        *(
            [
                (
                    "programs no target ran",
                    f"{run.state['ran_nowhere']} (every target failed them: they were not "
                    "compared, so they are no agreement)",
                )
            ]
            if run.state.get("ran_nowhere")
            else []
        ),
        ("elapsed", f"{run.elapsed:.1f}s"),
        ("throughput", f"{run.throughput:.1f} programs/s"),
        ("findings", findings_text(run)),
        ("machine", ", ".join(f"{k} {v}" for k, v in m.items()) if m else "?"),
        # A folder written before passwords were hidden in campaign.json still shows none.
        ("corpus", hide_password(str(c.get("db") or "run folder (corpus/)"))),
    ]
    since = since_last_run(run)
    if since:
        facts.append(("since the run before", since))
    unavailable = run.state.get("unavailable") or {}
    if unavailable:
        facts.append(("unavailable", "; ".join(f"{k}: {v}" for k, v in unavailable.items())))
    return facts


def since_last_run(run: Run) -> str | None:
    """What the triage store said of this run against the run recorded before it (the run
    folder's ``triage.json``), or None when the run was not recorded. "Nothing new" means no root
    cause outside the baseline was seen for the first time and none regressed; baseline entries
    a run reached for the first time, and causes gone since the run before, are listed after it."""

    delta = read_delta(run.root)  # a damaged triage.json: one line naming the file and the field
    if delta is None:
        return None
    first, known = list(delta.first_seen), list(delta.first_seen_known)
    gone, regressed = list(delta.disappeared), list(delta.regressed)
    new = [c for c in first if c not in known]

    def listed(ids: list[str], words: str) -> str:
        return f"{len(ids)} {words}" + (f" ({', '.join(ids[:8])}{', ...' if len(ids) > 8 else ''})" if ids else "")

    previous = delta.previous_run
    tail = [listed(ids, words) for ids, words in ((known, "known first reached"), (gone, "gone")) if ids]
    if previous and not new and not regressed:
        return "; ".join([f"nothing new since {Path(previous).name}", *tail])
    text = "; ".join([listed(new, "new first seen"), *([listed(regressed, "regressed")] if regressed else []), *tail])
    return text if previous else f"{text} (no run recorded before it)"


def summary_line(run: Run) -> str:
    """The terminal summary: harness errors first, apart from the findings."""
    errors = len(run.harness_errors)
    head = (
        f"{errors} harness error(s): aliasfuzz bugs, not framework findings (the report's first section); "
        if errors
        else ""
    )
    return f"{head}findings: {findings_text(run)}"


def when(ts: Any) -> str:
    """A timestamp (seconds since the epoch) in UTC; "?" for one that is none."""
    try:
        return datetime.fromtimestamp(float(ts), tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def versions_text(v: dict[str, str]) -> str:
    return ", ".join(f"{k} {x}" for k, x in v.items()) or "—"


def target_rows(run: Run) -> list[tuple[str, str, str, str]]:
    """The report's targets table: (target, versions, programs it ran, what one cost its process).
    A costly target runs only its share of the programs (``Profile.target_shares``), so the two
    figures say both what it was given and why."""
    costs = run.target_costs()
    rows = []
    for tid, versions in run.target_versions().items():
        programs, seconds = costs.get(tid, (None, None))
        rows.append(
            (
                tid,
                versions_text(versions),
                "—" if programs is None else f"{programs:,}",
                "—" if not programs else f"{seconds * 1000 / programs:.3g} ms",
            )
        )
    return rows


def href(rel: str) -> str:
    return quote(rel)  # ':' too: a file name never becomes a URL scheme
