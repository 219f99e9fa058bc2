"""Replaying one case on every target: the result object, its JSON form and its terminal table."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from harness.fuzzing.baseline import Baseline, KnownDivergence
from harness.case.ir import Program
from harness.judging.harness_errors import harness_error, is_harness_error, safe_compare
from harness.judging.finding import Finding
from harness.judging.value_compare import adam_lr, values_close
from harness.targets.runner import Runner
from harness.targets.base import TargetInfo
from harness.judging.trace import Trace, Verdict, verdicts


@dataclass
class ReproResult:
    program: Program
    infos: Mapping[str, TargetInfo]
    traces: Mapping[str, Trace]
    findings: list[Finding]
    known: dict[str, KnownDivergence | None] = field(default_factory=dict)  # signature -> entry
    verdict_maps: dict[str, dict[str, Verdict]] = field(default_factory=dict)

    @property
    def new_findings(self) -> list[Finding]:
        return [f for f in self.findings if self.known.get(f.signature) is None]

    @property
    def harness_errors(self) -> list[Finding]:
        return [f for f in self.findings if is_harness_error(f)]

    @property
    def ran_nowhere(self) -> bool:
        """No target ran the program: "no divergence" would then be agreement of failures."""
        return not any(tr.ok for tr in self.traces.values())

    def to_json(self) -> dict[str, Any]:
        targets = {}
        for tid, tr in self.traces.items():
            info = self.infos.get(tid)
            targets[tid] = {
                "status": tr.status,
                "message": tr.message,
                "versions": dict(info.versions) if info else {},
                "final": {n: (None if o.value is None else o.value.tolist()) for n, o in tr.final.items()},
                "verdicts": {n: v.summary for n, v in self.verdict_maps[tid].items()},
                "events": {n: [e.label() for e in v.events] for n, v in self.verdict_maps[tid].items()},
                "ops": [{"status": s.status, **({"message": s.message} if s.message else {})} for s in tr.steps],
                "trace": tr.to_json()["trace"],
                "initial": tr.to_json()["initial"],
            }
        divergences = []
        for f in self.findings:
            entry = self.known.get(f.signature)
            divergences.append({**f.to_json(), "status": "known" if entry else "new",
                                "baseline": entry.id if entry else None})
        return {"title": self.program.title, "targets": targets, "divergences": divergences}


def run_case(program: Program, runner: Runner, infos: Mapping[str, TargetInfo],
             baseline: Baseline | None = None) -> ReproResult:
    """Runs ``program`` on every target and judges it. A bug of the oracle or of the verdicts is
    a harness-error finding in the result, never an exception."""
    traces = runner.run_one(program, every_target=True)
    findings = safe_compare(program, traces)
    result = ReproResult(program, infos, traces, findings)
    try:
        result.verdict_maps = {t: verdicts(program, tr) for t, tr in traces.items()}
    except Exception as e:  # noqa: BLE001 - contained: the table then shows no verdicts
        result.verdict_maps = {t: {} for t in traces}
        error = harness_error(e, "verdicts")
        if all(f.signature != error.signature for f in findings):
            findings.append(error)
    if baseline is not None:
        result.known = {f.signature: None if is_harness_error(f) else baseline.match(f) for f in findings}
    return result


# ------------------------------------------------------------------------------------------------
# Terminal rendering.


def _fmt_value(v: np.ndarray | None) -> str:
    if v is None:
        return "—"
    text = np.array2string(v, precision=5, separator=",", suppress_small=True, max_line_width=60)
    return " ".join(text.split())


def table_rows(result: ReproResult) -> list[tuple[str, list[str], bool]]:
    """(row label, cell per target, divergent?) for every tensor and snapshot."""
    ids = list(result.traces)
    rows: list[tuple[str, list[str], bool]] = []
    adam = adam_lr(result.program)
    snaps = set()
    for vm in result.verdict_maps.values():
        snaps.update(vm)
    names: list[str] = []
    for tr in result.traces.values():
        for n in tr.final:
            if n not in names and n not in snaps:
                names.append(n)
    for n in [t.name for t in result.program.tensors] + [n for n in names if n not in {t.name for t in result.program.tensors}]:
        cells, vals = [], []
        for tid in ids:
            tr = result.traces[tid]
            if not tr.ok:
                cells.append(tr.status)
                continue
            obs = tr.final.get(n)
            v = obs.value if obs is not None else None
            vals.append(v)
            cells.append(_fmt_value(v) if obs is not None and obs.initialized else "uninitialised")
        real = [v for v in vals if v is not None]
        divergent = any(not values_close(real[0], v, adam) for v in real[1:]) if real else False
        rows.append((n, cells, divergent))
    for s in sorted(snaps, key=lambda n: min(vm[n].snapshot.op for vm in result.verdict_maps.values() if n in vm)):
        cells, comparable = [], []
        method = next(vm[s].snapshot.method for vm in result.verdict_maps.values() if s in vm)
        for tid in ids:
            v = result.verdict_maps[tid].get(s)
            cells.append(v.summary if v else "—")
            if v and v.status == "ok":
                comparable.append(v.summary)
        rows.append((f"{s} ({method})", cells, len(set(comparable)) > 1))
    return rows


def render(result: ReproResult, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    title = result.program.title or "case"
    table = Table(title=title, show_lines=False)
    table.add_column("tensor / snapshot", style="bold")
    for tid in result.traces:
        table.add_column(tid)
    for label, cells, divergent in table_rows(result):
        style = "bold red" if divergent else None
        table.add_row(label, *[f"[{style}]{c}[/]" if style else c for c in cells])
    console.print(table)
    notes = []
    for tid, tr in result.traces.items():
        for i, s in enumerate(tr.steps):
            if s.status != "ok":
                notes.append(f"  {tid} op {i} ({result.program.ops[i]['op']}): {s.status}"
                             + (f": {s.message}" if s.message else ""))
        if not tr.ok:
            notes.append(f"  {tid}: {tr.status}: {tr.message}")
    if notes:
        console.print("[dim]Ops a target could not run:[/]")
        for n in notes:
            console.print(n, markup=False, highlight=False)
    if result.ran_nowhere:
        console.print("[bold red]No target ran this case, so nothing was compared.[/]")
    elif not result.findings:
        console.print("[green]No divergence.[/]")
        return
    console.print(f"[bold]{len(result.findings)} divergence(s):[/]")
    for f in result.findings:
        entry = result.known.get(f.signature)
        tag = f"[yellow]known ({entry.id})[/]" if entry else "[bold red]new[/]"
        console.print(f"  {tag} [{f.kind}] ", end="")
        console.print(f.sentence(), markup=False, highlight=False)
        console.print(f"      signature: {f.signature}", markup=False, highlight=False, style="dim")
