"""Metamorphic pairs in a campaign: drawn programs run beside a variant that differs by one inert
op group, and each target is compared with itself (``harness.judging.metamorphic``).

A chunk's batch is its drawn programs followed by one variant for each program the share selects
(``plan``): the program with an inert group inserted (``harness.case.inert.variant``), or, for a
program that already holds one, the program without it. Which programs get a variant, and which
variant, follows from the program alone (a ``random.Random`` seeded by its key), so the same seed
gives the same pairs in any number of workers and after a resume. ``judge`` turns the batch's
traces into ``(program with the group, its traces, findings)`` entries, the form the engine records
and shrinks; the program carries its ``inert`` group, as the case file written for it does.

For shrinking, replay and confirmation, ``pair_findings`` judges any program on a run function:
each of its inert groups of the finding's label is tried (the minimizer renumbers ops, so the
group is found again in every candidate rather than carried by index).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from harness.case.inert import Inert, check_inert, inert_ops, variant, without
from harness.case.ir import Program
from harness.judging.finding import Finding
from harness.judging.metamorphic import safe_compare_inert
from harness.targets.trace import Trace

#: Runs programs on targets: one trace per target, per program (``Runner.run``).
RunFn = Callable[[Sequence[Program]], list[dict[str, Trace]]]


@dataclass(frozen=True)
class Pair:
    """One metamorphic pair of a batch: the drawn program ``original`` (its index in the chunk),
    the other program's index in the batch, the program that holds the group (with ``inert`` set)
    and the group."""

    original: int
    extra: int
    program: Program
    inert: Inert
    inserted: bool  # the extra program is the one with the group (else the drawn program is)


def plan(programs: Sequence[Program], share: float) -> tuple[list[Program], list[Pair]]:
    """The batch to run for ``programs`` (them first, in order, then the variants) and its pairs."""
    batch = list(programs)
    pairs = []
    if share <= 0:
        return batch, pairs
    for i, p in enumerate(programs):
        rng = random.Random(p.key())
        if rng.random() >= share:
            continue
        made = variant(p, rng)
        if made is None:
            continue
        with_program, inert = made
        inserted = with_program is not p
        batch.append(with_program if inserted else without(p, inert))
        pairs.append(Pair(i, len(batch) - 1, replace(with_program, inert=inert.ops), inert, inserted))
    return batch, pairs


def judge(
    pairs: Sequence[Pair], results: Sequence[dict[str, Trace]], cancelled: Callable[[dict[str, Trace]], bool]
) -> list[tuple[Program, dict[str, Trace], list[Finding]]]:
    """The pairs that showed a divergence, as ``(program with the group, its traces, findings)``;
    a pair with a cancelled side (or not run: a batch cut short) is left out."""
    out = []
    for pair in pairs:
        if pair.extra >= len(results) or pair.original >= len(results):
            continue
        drawn, extra = results[pair.original], results[pair.extra]
        if cancelled(drawn) or cancelled(extra):
            continue
        with_traces, without_traces = (extra, drawn) if pair.inserted else (drawn, extra)
        findings = safe_compare_inert(pair.program, pair.inert, with_traces, without_traces)
        if findings:
            out.append((pair.program, with_traces, findings))
    return out


def groups(program: Program, label: str | None) -> list[Inert]:
    """The groups a program is judged against: its ``inert`` field when it names one (a case file),
    else every inert group of ``label``."""
    if program.inert:
        found = check_inert(program, program.inert)
        return [found] if label is None or found.label == label else []
    return inert_ops(program, label) if label is not None else []


def pair_findings(
    programs: Sequence[Program], run: RunFn, label: str | None, traces: Sequence[Mapping[str, Trace]] | None = None
) -> list[list[Finding]]:
    """For each program, the metamorphic findings of its groups (``groups``), each program with
    ``inert`` set to the group that showed them. Runs every program without each of its groups,
    and the programs themselves unless their ``traces`` are given, in one batch."""
    plans = [groups(p, label) for p in programs]
    batch = [] if traces is not None else list(programs)
    index = []
    for p, gs in zip(programs, plans):
        index.append([])
        for g in gs:
            batch.append(without(p, g))
            index[-1].append(len(batch) - 1)
    results = run(batch) if batch else []
    out = []
    for k, (p, gs) in enumerate(zip(programs, plans)):
        own = traces[k] if traces is not None else results[k]
        found: list[Finding] = []
        for g, j in zip(gs, index[k]):
            found.extend(safe_compare_inert(replace(p, inert=g.ops), g, own, results[j]))
        out.append(found)
    return out
