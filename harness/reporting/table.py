"""The side-by-side table of one case: a row per tensor and snapshot, a cell per target, and which
rows diverge. It is the one model every view renders: the terminal table (``repro.render``), the
Markdown and the HTML report. Each view chooses how a cell reads; none decides divergence itself.

Divergence has one rule, the oracle's:

- a tensor row diverges when the final values of the targets that ran the program are not all
  ``value_compare.values_close`` to the first (with the program's tolerance,
  ``value_compare.tolerance``), except for a name whose values come from a framework's own RNG (a
  lazy tensor of ``uniform`` or ``program_rng`` init and what derives from it:
  ``links.nondeterministic_names``): the oracle never compares those values across targets, so
  no view highlights them;
- a snapshot row diverges when the ``ok`` verdicts of the targets differ (``keeps`` on one,
  ``follows`` on another).

Rows come in a fixed order: the program's tensors, then other names a target bound that are no
snapshot (a module clone's tensors), then the snapshots by the op that took them (ties in the
program's order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.case.ir import Program
from harness.judging.links import nondeterministic_names
from harness.judging.value_compare import tolerance, values_close
from harness.judging.verdicts import Verdict, verdicts
from harness.targets.trace import Trace


@dataclass(frozen=True, eq=False)
class Cell:
    """What one target showed of one name at the end of the program."""

    #: The target's status when the program did not run there (``crash``, ``error``, ...), else None.
    failed: str | None
    #: The snapshot's verdict summary (``keeps``, ``follows@1 rev keeps@2``); None for a tensor.
    verdict: str | None
    #: Whether the name was bound at the end, and whether its value was initialised then.
    bound: bool
    initialized: bool
    value: np.ndarray | None  # float32; None when unbound or not observed


@dataclass(frozen=True)
class Row:
    name: str  # the tensor or snapshot name
    label: str  # ``name``, or ``name (method)`` for a snapshot
    cells: tuple[Cell, ...]  # in the table's target order
    divergent: bool
    snapshot: bool
    subject: bool = False  # the name a finding is about (the report marks it)


@dataclass(frozen=True)
class Note:
    """An op a target could not run (``op`` its index), or the whole program (``op`` None)."""

    target: str
    op: int | None
    status: str
    message: str | None


@dataclass(frozen=True)
class Table:
    targets: tuple[str, ...]
    rows: tuple[Row, ...]
    notes: tuple[Note, ...] = field(default=())


def build_table(
    program: Program,
    traces: Mapping[str, Trace],
    verdict_maps: Mapping[str, Mapping[str, Verdict]],
    subjects: frozenset[str] | set[str] = frozenset(),
) -> Table:
    """The table of ``program`` run as ``traces`` (target -> trace, in column order), with the
    verdicts of each target (``trace.verdicts``; a target missing from ``verdict_maps`` shows no
    verdicts). ``subjects``: the names to mark as a finding's subject."""
    ids = tuple(traces)
    vms = {tid: verdict_maps.get(tid, {}) for tid in ids}
    snaps: dict[str, Verdict] = {}  # name -> a verdict of it (its snapshot info), program order
    for vm in vms.values():
        for name, v in vm.items():
            snaps.setdefault(name, v)
    skip = nondeterministic_names(program)
    tol = tolerance(program)
    rows = []
    for name in _tensor_names(program, traces, snaps):
        cells = tuple(_cell(traces[tid], vms[tid], name) for tid in ids)
        values = [c.value for c in cells if c.failed is None and c.value is not None]
        divergent = name not in skip and any(not values_close(values[0], v, tol) for v in values[1:])
        rows.append(Row(name, name, cells, divergent, snapshot=False, subject=name in subjects))
    for name, v in sorted(snaps.items(), key=lambda item: item[1].snapshot.op):
        cells = tuple(_cell(traces[tid], vms[tid], name) for tid in ids)
        ok = {vms[tid][name].summary for tid in ids if name in vms[tid] and vms[tid][name].status == "ok"}
        rows.append(
            Row(name, f"{name} ({v.snapshot.method})", cells, len(ok) > 1, snapshot=True, subject=name in subjects)
        )
    return Table(ids, tuple(rows), _notes(traces))


def _tensor_names(program: Program, traces: Mapping[str, Trace], snaps: Mapping[str, Any]) -> list[str]:
    declared = [t.name for t in program.tensors]
    names = list(declared)
    for tr in traces.values():
        names += [n for n in tr.final if n not in names and n not in snaps]
    return names


def _cell(trace: Trace, vm: Mapping[str, Verdict], name: str) -> Cell:
    v = vm.get(name)
    obs = trace.final.get(name) if trace.ok else None
    return Cell(
        failed=None if trace.ok else trace.status,
        verdict=v.summary if v else None,
        bound=obs is not None,
        initialized=obs is not None and obs.initialized,
        value=None if obs is None else obs.value,
    )


def _notes(traces: Mapping[str, Trace]) -> tuple[Note, ...]:
    notes = []
    for tid, tr in traces.items():
        notes += [Note(tid, i, s.status, s.message) for i, s in enumerate(tr.steps) if s.status != "ok"]
        if not tr.ok:
            notes.append(Note(tid, None, tr.status, tr.message))
    return tuple(notes)


def table_of_repro(doc: Mapping[str, Any], program: Program, signature: str | None = None) -> Table:
    """The table of a repro JSON (``ReproResult.to_json``, the ``cases/NNN-<hash>.json`` of a run
    folder) of ``program``; the subjects are those of its divergences with ``signature`` (all
    of them when None). Raises (ValueError, TypeError, KeyError, AttributeError, ...) on a
    document that is not a repro JSON of ``program``."""
    traces = {
        tid: Trace.from_wire(
            tid,
            {
                "status": t.get("status") or "ok",
                "message": t.get("message"),
                "initial": t.get("initial") or {},
                "steps": t.get("trace") or [],
            },
        )
        for tid, t in doc["targets"].items()
    }
    subjects = {
        d.get("subject")
        for d in doc.get("divergences") or []
        if isinstance(d, dict) and (signature is None or d.get("signature") == signature)
    }
    return build_table(program, traces, {t: verdicts(program, tr) for t, tr in traces.items()}, subjects)


# ------------------------------------------------------------------------------------------------
# How a cell reads in the reports (Markdown and HTML; the terminal's compact form is repro.py's).


def exact_values(v: np.ndarray | None) -> str:
    """float32 values, each in its shortest round-trip form (at most 12): two values the table
    marks as different never print alike."""
    if v is None:
        return "—"
    flat = v.ravel()
    text = ", ".join(str(x) for x in flat[:12])
    return f"[{text}{', …' if len(flat) > 12 else ''}]"


def report_cell(c: Cell) -> str:
    """A report's cell: the target's status when it did not run the program, else the verdict
    and the final value."""
    if c.failed is not None:
        return c.failed
    value = None if not c.bound else exact_values(c.value) if c.initialized else "uninitialised"
    return " ".join(x for x in (c.verdict, value) if x) or "—"


def report_note(n: Note) -> str:
    if n.op is None:
        return f"{n.target}: {n.status}" + (f": {n.message}" if n.message else "")
    return f"{n.target} op {n.op}: {n.status}" + (f": {n.message}" if n.message else "")


def report_notes(notes: Sequence[Note]) -> list[str]:
    return [report_note(n) for n in notes]
