"""The metamorphic oracle: a target against itself, with and without an inert op group.

A program that holds an inert group (``harness.case.inert``: an unused snapshot or module clone,
a read that draws nothing, ``valid`` then ``train``) must run on one target as the same
program without it does: every op the two share has the same status, and after it every name the
two share holds the same values (exactly: one target, one program) and the same identity
partition (names whose values an RNG that cannot be seeded may draw, ``links.unreproducible_names``,
left out). The first op where that fails gives one finding of kind ``metamorphic`` per target, on
the program *with* the group:

- ``status``: the op succeeds with the group and fails without it, or the other way round (or the
  whole program fails on one run only: op ``program``); ``agrees`` as for a value (below), by
  the reference target's status of the op, where it ran it to ``ok`` or ``error``;
- ``draw``: a lazy tensor of the program's one generator (``program_rng``) drew other values in
  the two runs, so the group changed the order of first reads; its op is ``lazy_init`` and its
  sides say where the reordering starts (``_draw_finding``). A value that differs because of
  such a draw is this finding, not a ``value`` one;
- ``value``: a name's value differs; the sides say whether the op changed it in each run
  (``changed`` / ``unchanged``), with the group first, and ``agrees`` which of the two values
  the reference framework's target (``pairs.reference_target``: torch's, for a candle or burn
  target) holds after the same op of the program with the group: ``with``, ``without``, ``both``
  (within the program's tolerance), ``neither``; None where there is no reference (a torch
  target, no torch target, the op not ``ok`` there, the name unread). ``without`` says the
  inert group moved the target away from the framework code is ported from, ``with`` that it
  moved it back (the run without it shows a known difference from that framework);
- ``identity``: two names are one object in one run and two in the other.

The signature names the target (twice: both runs are its own), the aspect, the inert group's
label (``+module_clone``, ``+snapshot:clone``, ...) in the method's place, the first divergent op's
signature class, the sides and, for a value or a status, the agreement when there is one; names,
positions and values stay out of it, as in the differential oracle. A group whose own op fails
(``error``) is no evidence: a failed call may have consumed its input (burn moves a value into the
call that panics), so such a pair is not compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.case import ops
from harness.case.inert import Inert, kept_index
from harness.case.ir import Program
from harness.judging import rules
from harness.judging.finding import Finding
from harness.judging.harness_errors import harness_error
from harness.judging.links import unreproducible_names
from harness.judging.pairs import reference_target
from harness.judging.value_compare import tolerance, values_close
from harness.judging.verdicts import same_values, subject_role
from harness.targets.trace import Trace, identity_partition

KIND = "metamorphic"


def compare_inert(
    program: Program, inert: Inert, with_traces: Mapping[str, Trace], without_traces: Mapping[str, Trace]
) -> list[Finding]:
    """The findings of ``program`` (which holds ``inert``) against the same program without it,
    per target present in both runs, in target order."""
    out = []
    for t in sorted(with_traces):
        if t in without_traces:
            ref = reference_target(t, list(with_traces))
            found = compare_runs(
                program, inert, t, with_traces[t], without_traces[t], with_traces.get(ref) if ref is not None else None
            )
            if found is not None:
                out.append(found)
    return out


def _finding(inert: Inert, target: str, **kw) -> Finding:
    kw.setdefault("rule", rules.INERT_OPS_CHANGE_THE_RUN.name)
    return Finding(kind=KIND, targets=(target, target), method=f"+{inert.label}", inert=inert.ops, **kw)


def compare_runs(
    program: Program, inert: Inert, target: str, a: Trace, b: Trace, reference: Trace | None = None
) -> Finding | None:
    """The first divergence of run ``a`` (with the group) from run ``b`` (without), or None;
    ``reference``: the reference target's trace of the program (with the group), if any."""
    if not a.ok or not b.ok:
        if a.status == b.status:
            return None
        return _finding(
            inert,
            target,
            aspect="status",
            op_label="program",
            sides=(a.status, b.status),
            detail=(a.message or b.message or ""),
        )
    if any(i >= len(a.steps) or a.steps[i].status == "error" for i in inert.ops):
        return None
    # Values a framework's RNG drew (a uniform lazy init, and what derives from it) differ between
    # two runs of one program on a framework whose generator cannot be seeded (candle's CPU).
    skip = inert.binds | unreproducible_names(program)
    for j in range(len(program.ops)):
        if j in inert.ops:
            continue
        k = kept_index(inert, j)
        if k >= len(b.steps) or j >= len(a.steps):
            return None  # a short trace is the probe's fault, which the differential oracle reports
        x, y = a.steps[j], b.steps[k]
        op = program.ops[j]
        if x.status != y.status:
            return _finding(
                inert,
                target,
                aspect="status",
                op_label=ops.label(op),
                sides=(x.status, y.status),
                op_index=j,
                detail=x.message or y.message or "",
                agrees=_status_agreement(reference, j, x.status, y.status),
            )
        if x.fused or y.fused:
            continue  # a run of compiled ops (torch's ``graph`` variant): compared after its last op
        sa, sb = a.state_after(j), b.state_after(k)
        for name in sorted((x.changed.keys() | y.changed.keys()) - skip):
            ox, oy = sa.get(name), sb.get(name)
            if ox is None or oy is None or ox.value is None or oy.value is None:
                continue  # bound in one run only, or not initialised yet in one (a lazy the group read)
            if not same_values(ox.value, oy.value):
                drew = _draw_finding(program, inert, target, a, b, j)
                if drew is not None:
                    return drew  # the values differ because a lazy param drew others
                moved = (_moved(a, j, name), _moved(b, k, name))
                return _finding(
                    inert,
                    target,
                    aspect="value",
                    op_label=ops.label(op),
                    sides=tuple("changed" if m else "unchanged" for m in moved),
                    op_index=j,
                    subject=name,
                    values=(_render(ox.value), _render(oy.value)),
                    role=subject_role(program, name),
                    agrees=_agreement(program, reference, j, name, ox.value, oy.value),
                )
        if not any(o.identity is not None for o in (*x.changed.values(), *y.changed.values())):
            continue  # no token appeared or changed: the partitions are those of the op before
        common = {n: o for n, o in sa.items() if n not in skip and n in sb}
        pa = identity_partition(common)
        pb = identity_partition({n: sb[n] for n in common})
        if pa != pb:
            pair = _split_pair(pa, pb)
            same = tuple("same" if p in _pairs(q) else "distinct" for p, q in ((pair, pa), (pair, pb)))
            return _finding(
                inert,
                target,
                aspect="identity",
                op_label=ops.signature_class(op),
                sides=same,
                op_index=j,
                subject=",".join(pair),
            )
    return None


def _reference_status(reference: Trace | None, j: int) -> str | None:
    """The status the reference trace's op ``j`` ended with; None without one (no reference, a
    failed program, a short trace)."""
    if reference is None or not reference.ok or j >= len(reference.steps):
        return None
    return reference.steps[j].status


def _status_agreement(reference: Trace | None, j: int, with_status: str, without_status: str) -> str | None:
    """Which run's status of op ``j`` the reference trace's is (``Finding.agrees``); None unless
    the reference ran the op to ``ok`` or ``error`` (a skip or refusal is no evidence)."""
    held = _reference_status(reference, j)
    if held not in ("ok", "error"):
        return None
    return "with" if held == with_status else "without" if held == without_status else "neither"


def _agreement(program: Program, reference: Trace | None, j: int, name: str, with_value, without_value) -> str | None:
    """Which run's value of ``name`` after op ``j`` the reference trace holds (``Finding.agrees``)."""
    if _reference_status(reference, j) != "ok":
        return None
    held = reference.state_after(j).get(name)
    if held is None or held.value is None:
        return None
    tol = tolerance(program)
    close = (values_close(held.value, with_value, tol), values_close(held.value, without_value, tol))
    return {(True, False): "with", (False, True): "without", (True, True): "both"}.get(close, "neither")


def _first_values(trace: Trace, name: str) -> tuple[int, Any] | None:
    """The op after which ``name`` first holds values (-1: when the program opened), and those
    values; None if it never does."""
    o = trace.initial.get(name)
    if o is not None and o.value is not None:
        return -1, o.value
    for i, step in enumerate(trace.steps):
        o = step.changed.get(name)
        if o is not None and o.value is not None:
            return i, o.value
    return None


def _draw_finding(program: Program, inert: Inert, target: str, a: Trace, b: Trace, j: int) -> Finding | None:
    """A lazy tensor of the program's one generator that drew other values in the two runs, by op
    ``j`` of run ``a``: the inert group changed the order of first reads (``program_rng``). Only
    a draw both runs show is compared: the op that initialised the tensor must leave its values
    as drawn (a step that initialises a param also trains it).

    The sides locate the reordering rather than the tensor: the op that initialised the first
    tensor (in run ``a``'s order) whose initialising op differs between the runs, in run ``a``,
    and whether run ``b`` initialised it ``earlier`` or ``later`` (or not at all; ``open``: before
    any op, ``never``: not in the run). So one reordering is one signature, whichever later op
    first shows it."""
    origin = {kept_index(inert, i): i for i in range(len(program.ops)) if i not in inert.ops}
    never = (len(program.ops), None)  # a tensor one run never initialised
    drawn = {}
    for t in program.tensors:
        if t.kind == "lazy" and t.init == "program_rng":
            fa, fb = _first_values(a, t.name) or never, _first_values(b, t.name)
            drawn[t.name] = (fa, (origin[fb[0]] if fb[0] >= 0 else -1, fb[1]) if fb else never)
    differs = [
        n
        for n, (fa, fb) in drawn.items()
        if max(fa[0], fb[0]) <= j
        and _shows_draw(program, fa[0], n)
        and _shows_draw(program, fb[0], n)
        and not same_values(fa[1], fb[1])
    ]
    if not differs:
        return None
    name = differs[0]
    moved = sorted((fa[0], n) for n, (fa, fb) in drawn.items() if fa[0] != fb[0])
    first = moved[0][1] if moved else name
    ia, ib = drawn[first][0][0], drawn[first][1][0]
    label = lambda i: "open" if i < 0 else "never" if i >= len(program.ops) else ops.label(program.ops[i])  # noqa: E731
    sides = (label(ia), label(ib) if ia == ib else "later" if ib > ia else "earlier")
    (_, va), (_, vb) = drawn[name]
    return _finding(
        inert,
        target,
        aspect="draw",
        rule=rules.INERT_OPS_REORDER_THE_DRAW.name,
        op_label="lazy_init",
        sides=sides,
        op_index=max(drawn[name][0][0], 0),
        subject=name,
        values=(_render(va), _render(vb)),
        role="lazy:program_rng",
    )


def _shows_draw(program: Program, i: int, name: str) -> bool:
    """Whether ``name`` holds what its initialisation drew after op ``i`` (-1: at open): the op
    does not change its values (a read, a snapshot, a move, a valid, a save do not)."""
    if i < 0:
        return True
    op = program.ops[i]
    s = ops.spec(op)
    return not (
        s.acts_on_params or s.replaces_model or name in (ops.written(op), ops.remade(op)) or ops.rebinds(op, name)
    )


def _moved(trace: Trace, i: int, name: str) -> bool:
    before = trace.state_after(i - 1).get(name)
    after = trace.state_after(i).get(name)
    if before is None or after is None or before.value is None:
        return True
    return not same_values(before.value, after.value)


def _pairs(partition) -> set[tuple[str, str]]:
    return {(x, y) for group in partition for x in group for y in group if x < y}


def _split_pair(pa, pb) -> tuple[str, str]:
    """The first pair of names (in name order) that is one object in one partition only."""
    return min(_pairs(pa) ^ _pairs(pb))


def _render(x) -> str:
    import numpy as np

    return np.array2string(x, precision=6, separator=", ").replace("\n", "")


def safe_compare_inert(
    program: Program, inert: Inert, with_traces: Mapping[str, Trace], without_traces: Mapping[str, Trace]
) -> list[Finding]:
    """``compare_inert``, with an exception turned into a harness-error finding (as
    ``harness_errors.safe_compare`` does for the differential oracle)."""

    try:
        return compare_inert(program, inert, with_traces, without_traces)
    except Exception as e:  # noqa: BLE001 - any bug of this oracle is contained
        return [harness_error(e, "oracle")]


def group_label(finding: Finding) -> str | None:
    """The inert group label a metamorphic finding names (its method without the ``+``)."""
    if finding.kind != KIND or not finding.method:
        return None
    return finding.method[1:]
