"""The differential oracle: from the traces of one program on every target, findings.

Pairs of targets are compared on four aspects, and the first divergent op of each aspect becomes
one finding, whatever the other aspects found before or after it:

- ``status``: one target fails (``error``, ``crash``, ``timeout``) where the other succeeds;
- ``verdict``: a snapshot follows its source on one target and keeps its value on the other
  (see ``trace.py`` for verdicts);
- ``identity``: the partition of names by identity token differs (which names are the same
  object), never the tokens themselves;
- ``value``: a value differs beyond tolerance (optimizer arithmetic, say) where no earlier finding
  set the name apart (a snapshot that follows on one side holds other values from then on: that is
  the snapshot's finding, and the value divergence is said in its detail, ``CONSEQUENCE_RULE``).
  Its sides say whether the op changed the tensor on each side (``changed`` / ``unchanged``; the
  sentence shows the values); its method, the link that carried it (``links.ended_link``), or
  for a step or a load the ``replace`` that linked the param (``links.own_relation``), or the one
  that carried the write toward a source the tensor shares (``links.common_source_link``).

A snapshot that ``sees no change`` on one side (its source did not move there) while it follows
or keeps on the other is not blamed on its snapshot method: its source moved on one side only.
When another snapshot's relation diverged at that op or earlier, or a value differed right before
it, that difference moved the source and is the finding; otherwise, when the op acts on the source
itself, the finding is the op's different effect on it, a ``value`` finding (``changed~unchanged``):
a step that does not train a parameter on one side, say (``_one_sided``).

Each target is also compared with itself (``sharing``): a module clone, a checkpoint or a load that
splits two of the model's names that were one object or one storage, or joins two that were not;
and, where it has version counters (``versions``), an in-place write that changed a name's values
and left its counter, which autograd's check of saved tensors then cannot see.

Which pairs: two devices of one framework (kind ``device``), a device and its variant (kind
``variant``: ``torch:cpu`` against ``torch:cpu+foreach``), and the primary targets of two
frameworks (kind ``framework``: porting hazards); a crash or timeout of a program is its own kind.
Only what both sides support is compared: an ``unsupported`` or ``skipped`` op on either side hides
that op and every snapshot it would have made; ``unsupported`` is never a divergence, and a target
that refuses a whole program (candle's CPU cannot seed a ``program_rng`` init) is left out of it.

A finding's signature names its root cause, not its surface: the kind, the targets, the aspect,
the snapshot method and the first divergent op's kind (with its salient attribute), and what each
side did; tensor names, op positions and values are left out.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.case import ops
from harness.case.ir import Program, per_program
from harness.judging import identity, rules, sharing, versions
from harness.judging.finding import Finding
from harness.judging.links import (
    common_source_link,
    ended_link,
    frozen_layer,
    nondeterministic_names,
    own_relation,
    status_method,
    write_path,
)
from harness.judging.pairs import pairs
from harness.judging.value_compare import elements_differ, tolerance, values_close
from harness.judging.verdicts import (
    SnapshotInfo,
    Verdict,
    binding_rank,
    made_by,
    same_values,
    snapshots,
    subject_role,
    verdicts,
    writes_into,
)
from harness.targets.trace import CRASH, TIMEOUT, UNSUPPORTED, Trace, alike

#: A value finding on a tensor with more elements names its first differing element.
SHOWN_ELEMENTS = 4


def _hidden_ops(program: Program, a: Trace, b: Trace) -> set[int]:
    """Ops that did not run on both sides, and every op after one that failed on one side only
    or that replaced the model (``OpSpec.replaces_model``: a ``load``) on one side only.
    Unsupported and skipped ops are never compared. An op that failed on one side is reported
    once, as an ``error`` finding, and nothing after it is compared: a failed call may have done
    part of its work or consumed its input (burn moves a value into the call that panics), so the
    two sides' states differ by construction, not by a second root cause. A model loaded on one
    side only holds other tensors than the other side's from then on, and a name an append grew on
    one side only has another shape, for the same reason, as does a layer a forward trained on one
    side only (``_sets_apart``)."""
    hidden = set()
    for i, (x, y) in enumerate(zip(a.steps, b.steps)):
        if x.status != "ok" or y.status != "ok":
            hidden.add(i)
        if (x.status == "error") != (y.status == "error"):
            return hidden | set(range(i, len(a.steps)))
        if (x.status == "ok") != (y.status == "ok") and i < len(program.ops) and _sets_apart(program.ops[i]):
            return hidden | set(range(i, len(a.steps)))
    return hidden


def _sets_apart(op) -> bool:
    """Whether ``op``, run on one side only, leaves the two sides' states of another kind: a model
    replaced (``OpSpec.replaces_model``: a ``load``), a name of another shape (``append``), which
    later ops that assume the program's shapes (a write of the longer name) cannot run on, a
    name computed from itself on one side only (``map``, ``add``), whose values differ from then on
    by construction, or a layer's running state updated on one side only (``acts_on_layer``: a
    ``forward``), whose update may show ops later (burn applies it at its next sync), where no
    op of the other side can account for it."""
    spec = ops.spec(op)
    return spec.replaces_model or spec.acts_on_layer or ops.remade(op) is not None


@dataclass
class PairContext:
    program: Program
    kind: str
    ids: tuple[str, str]
    traces: tuple[Trace, Trace]
    verdicts: tuple[Mapping[str, Verdict], Mapping[str, Verdict]]
    findings: list[Finding] = field(default_factory=list)

    def add(self, **kw) -> None:
        self.findings.append(Finding(kind=kw.pop("kind", self.kind), targets=self.ids, **kw))


def _compare_status(ctx: PairContext) -> bool:
    """Whole-program and per-op failures. Returns False when nothing else can be compared."""
    a, b = ctx.traces
    if not a.ok or not b.ok:
        return False  # whole-program failures are reported once per target by ``compare``
    for i, (x, y) in enumerate(zip(a.steps, b.steps)):
        statuses = {x.status, y.status}
        if (
            "ok" in statuses
            and len(statuses) > 1
            and i < len(ctx.program.ops)
            and _sets_apart(ctx.program.ops[i])
            and "error" not in statuses
        ):
            break  # unsupported or skipped on one side only: later failures are its consequences
        if "error" in statuses and "ok" not in statuses and len(statuses) > 1:
            # failed on one side, skipped or unsupported on the other: nothing to compare, and the
            # failed call may have consumed its input (burn), so later failures are its consequences
            break
        if "error" in statuses and "ok" in statuses:
            bad = x if x.status == "error" else y
            ctx.add(
                rule=rules.OP_FAILS_ON_ONE_SIDE.name,
                kind="error",
                aspect="status",
                op_label=ops.label(ctx.program.ops[i]),
                method=status_method(ctx.program, i),
                sides=(x.status, y.status),
                op_index=i,
                detail=bad.message or "",
            )
            break
    return True


def _event_map(v: Verdict, hidden: set[int]) -> dict[int, str]:
    return {e.op: ("rev " if e.reverse else "") + e.verdict for e in v.events if e.op not in hidden}


def _compare_verdicts(ctx: PairContext, hidden: set[int], unobserved: frozenset[int] = frozenset()) -> bool:
    """Every snapshot whose verdicts differ gives one finding, at its first divergent event
    (one program can show several root causes; ``compare`` drops repeated signatures).

    A divergence where one side ``sees no change`` says that the snapshot's source moved on one
    side only, which is a consequence when anything differed before: see ``_one_sided``. Such
    a consequence is not taken as the snapshot's finding: its next divergent event may still be
    a divergence of its own (a clone that follows on one side and keeps on the other, after an
    op one side could not run had already set the values apart). An event at an ``unobserved``
    op is no event: the coarsened traces show nothing there."""
    va, vb = ctx.verdicts
    found, one_sided = [], []
    for name, a in va.items():
        b = vb.get(name)
        if b is None or a.status != "ok" or b.status != "ok" or a.snapshot.op in hidden:
            continue
        ea, eb = _event_map(a, hidden | unobserved), _event_map(b, hidden | unobserved)
        for k in sorted(set(ea) | set(eb)):
            sa, sb = ea.get(k, "none"), eb.get(k, "none")
            if sa != sb:
                f = Finding(
                    kind=ctx.kind,
                    aspect="verdict",
                    targets=ctx.ids,
                    op_label=ops.signature_class(ctx.program.ops[k]),
                    method=a.snapshot.method,
                    sides=(sa, sb),
                    op_index=k,
                    subject=a.snapshot.name,
                    role=subject_role(ctx.program, a.snapshot.name),
                    rule=rules.SNAPSHOT_RELATION_DIFFERS.name,
                )
                if "none" in (sa, sb):
                    effect = _one_sided(ctx, a.snapshot, k, hidden)
                    if effect is _DERIVED:
                        continue
                    one_sided.append(
                        (a.snapshot, dataclasses.replace(f, rule=rules.SOURCE_MOVES_ON_ONE_SIDE.name), effect)
                    )
                else:
                    found.append(f)
                break
    first = min((f.op_index for f in found), default=len(ctx.traces[0].steps))
    # Per write op, the one-sided snapshot on its path nearest the written name: the first link
    # where the write's propagation differs (links beyond it did not move on one side at all).
    carrier: dict[int, str] = {}
    for snap, f, _effect in one_sided:
        path = write_path(ctx.program, f.op_index)
        if snap.name in path:
            best = carrier.get(f.op_index)
            if best is None or path.index(snap.name) < path.index(best):
                carrier[f.op_index] = snap.name
    kept: list[tuple[Finding | None, Finding]] = []  # (the op's effect or None, the verdict)
    for snap, f, effect in sorted(one_sided, key=lambda x: x[1].op_index):
        k = f.op_index
        if k >= first or any(v.op_index < k for _, v in kept):
            continue  # an aliasing divergence came first (at this op: it moved the source)
        if k in carrier and snap.name != carrier[k]:
            continue  # the write reached its source through the carrier's link, which is the finding
        kept.append((effect, f))
    # An op whose own effect differs (a step that trains a parameter on one side only) also
    # moves, on that side only, whatever aliases that parameter: those verdicts are its effect.
    effect_ops = {f.op_index for effect, f in kept if effect is not None}
    found += [effect or f for effect, f in kept if effect is not None or f.op_index not in effect_ops]
    found.sort(key=lambda f: f.op_index)
    ctx.findings.extend(found)
    return bool(found)


_DERIVED = object()


def _one_sided(ctx: PairContext, snap: SnapshotInfo, k: int, hidden: set[int]):
    """Op ``k`` moved the snapshot's source on one side only (or, when ``k`` wrote into the
    snapshot, the snapshot itself), and no aliasing diverged before. When the op acts on that
    tensor itself, its different effect is the finding, a ``value`` one (a step that does not
    train a parameter on one side, say). ``_DERIVED`` when a value differed right before ``k``
    (the op's effects then differ as a consequence: a write of the value one side already holds,
    or an op one side could not run earlier), when the tensor had no value before ``k`` on a
    side (a lazy parameter initialised by this op), or when the values still agree within
    tolerance after it. A value finding too when the tensor moved with a sibling the op wrote, both
    made from an object since bound again (``links.common_source_link``). None when the tensor
    moved through an alias (the snapshot's verdict, which names the method, is the finding then)
    or cannot be compared."""
    a, b = ctx.traces
    if not _values_agree(ctx, k - 1):
        return _DERIVED
    op = ctx.program.ops[k]
    on_snap = writes_into(op, snap.name)
    if not on_snap and op.kind == "step" and _acts_on(ctx.program, op, snap.name):
        # A step acts on a trainable snapshot (a replaced param) itself: one that trains it on one
        # side only is the finding; one that trains it on both moved the source through its link.
        on_snap = _moved_at(a, k, snap.name) != _moved_at(b, k, snap.name)
    name = snap.name if on_snap else snap.source
    # A load writes every entry into its object: where two entries are one object on one side
    # only, that object takes both there, the last in the load's own order (a HashMap's, in
    # candle-nn), as a write into one of two names that are one object moves the other.
    written = ctx.program.model_names if op.kind == "load" else (ops.written(op),)
    if any(identity.written_on_one_side(ctx.traces, w, name, k) for w in written):
        return _DERIVED  # that identity divergence is the finding (``_compare_identity``)
    drawn = nondeterministic_names(ctx.program)
    if name in drawn and (
        any(j < k for j in hidden) or not ops.spec(op).acts_on_params and any(n in drawn for n in ops.reads(op))
    ):
        # Its values differ by design, so _values_agree cannot tell whether an op one side could
        # not run left it different (a scale by 0 through a detach, unsupported on one side: a
        # later scale then changes it on that side only), and whether an op reading a drawn value
        # changes it depends on the value drawn (an assign of relu(l0)'s row into l0).
        return _DERIVED
    before = [t.state_after(k - 1).get(name) for t in (a, b)]
    after = [t.state_after(k).get(name) for t in (a, b)]
    if any(o is None or o.value is None for o in after):
        return None
    if any(o is None or o.value is None for o in before):
        return _DERIVED  # first initialised at this op on a side (lazy): no effect to compare
    if values_close(after[0].value, after[1].value, tolerance(ctx.program)):
        # Equal after the op (within the program's tolerance): nothing diverged here. For an RNG-valued
        # tensor too: the op brought both sides to one value, and it "moved" on one side only
        # because that side already held it, which an earlier op (an alias's write) did.
        return _DERIVED
    moved = [_moved_at(t, k, name) for t in (a, b)]
    if moved[0] != moved[1] and ended_link(ctx.program, k, name) is not None:
        # moved through what an ended relation still shares on one side: that link is the finding
        return _value_finding(ctx, k, name, moved, (after[0].value, after[1].value), rules.ENDED_LINK_STILL_SHARES)
    if (
        moved[0] != moved[1]
        and not identity.shared_on_one_side(ctx.traces, name, k - 1)
        and common_source_link(ctx.program, k, name) is not None
    ):
        # moved on one side with a sibling the op wrote, through their common source's old object
        # (two views of a tensor since grown, in torch; two values, in burn): that link is the
        # finding, not the relations made from ``name``. Not where ``name`` is another name's
        # object on one side only (a candle clone of a param): that identity is the cause then.
        return _value_finding(
            ctx, k, name, moved, (after[0].value, after[1].value), rules.COMMON_SOURCE_CARRIES_THE_WRITE
        )
    if moved[0] == moved[1] or not _acts_on(ctx.program, op, name):
        return None  # e.g. moved through an alias on one side: the snapshot's relation is the finding
    return _value_finding(ctx, k, name, moved, (after[0].value, after[1].value), rules.OP_EFFECT_DIFFERS)


def _acts_on(program: Program, op: Mapping[str, Any], name: str) -> bool:
    """Whether ``op`` names ``name`` itself (a write into it, a snapshot of it) or, for an op that
    acts on every param (``OpSpec.acts_on_params``: a step, a load), ``name`` is one of the model's
    trainable tensors: an op whose effect on its own operand differs is the finding, not the
    relation of some snapshot to it."""
    if ops.spec(op).acts_on_params:
        return any(t.name == name and t.trainable for t in program.tensors)
    if ops.spec(op).acts_on_layer:
        return name in {n for layer in program.layers if layer.name == op.layer for n, _, _ in layer.states()}
    return name == ops.subject(op)


def _value_method(program: Program, i: int, name: str) -> str | None:
    """The relation a value divergence of ``name`` at op ``i`` is named by (``harness.judging.links``):
    one on the chain between ``name`` and what the op writes, else the ``replace`` that linked a
    param the op acts on, else one that carried the write toward a source ``name`` shares, else
    the ``freeze`` that set the mode a layer's forward ran in."""
    return (
        ended_link(program, i, name)
        or own_relation(program, i, name)
        or common_source_link(program, i, name)
        or frozen_layer(program, i, name)
    )


def _value_finding(
    ctx: PairContext,
    i: int,
    name: str,
    moved: Sequence[bool],
    values: tuple[np.ndarray, np.ndarray],
    rule: rules.Rule,
) -> Finding:
    """A value divergence of ``name`` after op ``i``. The sides say whether op ``i`` changed it on
    each side; the values go in the sentence, never in the signature (each new value would be a
    new finding). A tensor of more than ``SHOWN_ELEMENTS`` elements is shown by its first
    differing element in the sentence, and whole in the detail."""
    x, y = values
    kind = "value" if ctx.kind == "framework" else ctx.kind
    sides = tuple("changed" if m else "unchanged" for m in moved)
    common = dict(
        kind=kind,
        aspect="value",
        targets=ctx.ids,
        op_label=ops.label(ctx.program.ops[i]),
        method=_value_method(ctx.program, i, name),
        sides=sides,
        op_index=i,
        subject=name,
        role=subject_role(ctx.program, name),
        rule=rule.name,
    )
    if x.shape != y.shape or x.size <= SHOWN_ELEMENTS:
        return Finding(**common, values=(_render_value(x), _render_value(y)))
    differ = elements_differ(x, y, tolerance(ctx.program))
    if not differ.any():  # the sides differ in effect, not in value: show both whole
        return Finding(**common, values=(_render_value(x), _render_value(y)))
    first = tuple(int(j) for j in np.argwhere(differ)[0])
    return Finding(
        **common,
        values=(_render_value(x[first]), _render_value(y[first])),
        at="[" + ", ".join(map(str, first)) + "]",
        detail=(
            f"{int(differ.sum())} of {x.size} elements differ. {ctx.ids[0]}: {_render_value(x)};"
            f" {ctx.ids[1]}: {_render_value(y)}"
        ),
    )


def _compare_identity(ctx: PairContext, hidden: set[int]) -> bool:
    """First op after which two names are one object on one side and distinct on the other. The
    sides say ``same``/``distinct`` (names go in the detail, never in the signature)."""
    d = identity.first_divergence(ctx.program, ctx.traces, hidden)
    if d is None:
        return False
    x, y = d.names
    ctx.add(
        rule=rules.IDENTITY_DIFFERS.name,
        aspect="identity",
        op_label=ops.signature_class(ctx.program.ops[d.op_index]),
        method=identity.relating_method(ctx.program, x, y, d.op_index),
        sides=tuple("same" if s else "distinct" for s in d.same),
        op_index=d.op_index,
        subject=f"{x},{y}",
        detail=f"{ctx.ids[0]}: {d.partitions[0]}; {ctx.ids[1]}: {d.partitions[1]}",
    )
    return True


def _values_agree(ctx: PairContext, i: int) -> bool:
    """Whether every name bound on both sides holds the same values after op ``i`` (names whose
    values come from a framework's RNG left out)."""
    tol = tolerance(ctx.program)
    skip = nondeterministic_names(ctx.program)
    sa, sb = (t.state_after(i) for t in ctx.traces)
    for name, x in sa.items():
        y = sb.get(name)
        if name in skip or y is None or x.value is None or y.value is None:
            continue
        if not values_close(x.value, y.value, tol):
            return False
    return True


#: The attribution rule that makes a value divergence the consequence of an earlier finding of
#: the same pair (``_compare_values``): the name's values were set apart by that finding, directly
#: (its snapshot, its two names) or through an op that computed it from a name set apart (``_moved_from_apart``).
CONSEQUENCE_RULE = rules.MOVED_BY_AN_EARLIER_DIVERGENCE.name


def _set_apart(finding: Finding, program: Program) -> set[str]:
    """The names whose values ``finding`` sets apart from its op on: a verdict's snapshot and its
    source, an identity finding's two names, a value finding's subject, and every snapshot taken
    of one of them, however indirectly."""
    names = set((finding.subject or "").split(",")) - {""}
    relations = snapshots(program)
    if finding.aspect == "verdict":  # a write that reached the source on one side only, or moved it there
        names |= {s.source for s in relations if s.name == finding.subject}
    if finding.aspect == "identity":
        # the op relates every name it binds to its source the same way (a module clone's or a
        # checkpoint's every entry is its param on one side), though the finding names one pair
        names |= {n for s in relations if s.op == finding.op_index for n in (s.name, s.source)}
    # A snapshot of a name set apart (``s1 = to_home(s0)``) holds what its source holds on each side.
    return _closure(names, {(s.source, s.name) for s in relations})


def _related(finding: Finding, program: Program) -> set[str]:
    """Every name joined to the finding's names by snapshot relations, either way: where the op
    that made the finding moved one of them on one side only (a write that went on through a
    view to the param on one side), that is the same finding, not another."""
    names = set((finding.subject or "").split(",")) - {""}
    edges = {(s.source, s.name) for s in snapshots(program)}
    return _closure(names, edges | {(b, a) for a, b in edges})


@per_program
def _ancestors(program: Program) -> dict[str, frozenset[str]]:
    """Name -> every name it is a snapshot of, however indirectly (its sources' sources)."""
    edges = {(s.name, s.source) for s in snapshots(program)}
    return {name: frozenset(_closure({name}, edges) - {name}) for name, _ in edges}


def _closure(names: set[str], edges: set[tuple[str, str]]) -> set[str]:
    """``names`` and every name reached from one of them along ``edges`` (source, name)."""
    names = set(names)
    while reached := {b for a, b in edges if a in names} - names:
        names |= reached
    return names


def _moved_from_apart(program: Program, i: int, apart: set[str], changed: set[str]) -> set[str]:
    """The names among ``changed`` whose new values op ``i`` computed from a name in ``apart``:
    everything it changed when it reads one of them by name; for a step or a load, which moves
    each param from its own state (its gradient, its checkpoint entry), only the names snapshot
    relations join to one of them (a tied param, an entry and its param); for a forward, what it
    changed when the layer's own state is one of them."""
    op = program.ops[i]
    spec = ops.spec(op)
    if apart & set(ops.reads(op)):
        return set(changed)
    if spec.acts_on_params or spec.replaces_model:
        edges = {(s.source, s.name) for s in snapshots(program)}
        return changed & _closure(apart, edges | {(b, a) for a, b in edges})
    if spec.acts_on_layer:
        layer = next((la for la in program.layers if la.name == op.layer), None)
        states = {n for n, _, _ in layer.states()} if layer is not None else set()
        return set(changed) if apart & states else set()
    return set()


def _compare_values(ctx: PairContext, hidden: set[int], unobserved: frozenset[int] = frozenset()) -> None:
    """The first value divergence that no earlier finding of the pair accounts for.

    Every aspect's first divergence is reported whatever comes after it, so a value divergence is
    looked for whether or not a verdict or identity finding was made. A name whose values differ
    because an earlier finding set it apart (``CONSEQUENCE_RULE``: a snapshot that follows on one
    side and keeps on the other holds other values from then on, as does whatever an op computes
    from it) is that finding's consequence: said in the cause's detail, never a finding of its own.
    Any other name that comes to differ is the value finding, even after a finding of another
    aspect (a ``save`` whose identity differs cannot hide an earlier step that trained a param
    differently). Nothing is compared after an ``unobserved`` op: its effects are compared after
    the next op."""
    a, b = ctx.traces
    tol = tolerance(ctx.program)
    skip = nondeterministic_names(ctx.program)
    # The pair's findings so far, by position in ``ctx.findings`` (a cause's detail is rewritten).
    pending = sorted((j for j, f in enumerate(ctx.findings) if f.op_index >= 0), key=lambda j: ctx.findings[j].op_index)
    apart: dict[str, int] = {}  # a name set apart -> the position of the finding that set it apart
    explained: set[str] = set()
    for i in range(len(a.steps)):
        if i in hidden:
            break  # one side could not run this op: from here on the states differ by design
        if i in unobserved:
            continue
        sa, sb = a.state_after(i), b.state_after(i)
        changed = a.steps[i].changed.keys() | b.steps[i].changed.keys()
        related_at_op: dict[str, int] = {}  # names tied by snapshots to a finding made at this op
        if apart and i < len(ctx.program.ops):
            moved = _moved_from_apart(ctx.program, i, set(apart), set(changed))
            if moved:
                first = min(apart.values(), key=lambda j: ctx.findings[j].op_index)
                for name in moved:
                    apart.setdefault(name, first)
        while pending and ctx.findings[pending[0]].op_index <= i:
            j = pending.pop(0)
            for name in _set_apart(ctx.findings[j], ctx.program):
                apart.setdefault(name, j)
            if ctx.findings[j].op_index == i:
                for name in _related(ctx.findings[j], ctx.program) & changed:
                    related_at_op.setdefault(name, j)
        # After op 0 only names that changed on either side can newly differ: everything else
        # was compared equal at the op before (or set apart, or the loop would have returned).
        for name in sorted(sa if i == 0 else changed, key=binding_rank(ctx.program)):
            if name in skip or name not in sa or name not in sb:
                continue
            x, y = sa[name].value, sb[name].value
            if x is None or y is None or values_close(x, y, tol):
                continue
            if name not in apart and name in related_at_op:
                apart[name] = related_at_op[name]
            if name not in apart:
                # a snapshot (a clone, a checkpoint entry) of a name set apart after it was taken
                cause = next((apart[n] for n in _ancestors(ctx.program).get(name, ()) if n in apart), None)
                if cause is not None:
                    apart[name] = cause
            if name in explained:
                continue  # its cause already says it differs from its first difference on
            found = _value_finding(ctx, i, name, [_moved_at(t, i, name) for t in (a, b)], (x, y), rules.VALUE_DIFFERS)
            if name not in apart:
                ctx.findings.append(found)
                return
            explained.add(name)
            _say_consequence(ctx, apart[name], found)


def _say_consequence(ctx: PairContext, j: int, consequence: Finding) -> None:
    """Adds to the detail of finding ``j`` that ``consequence`` follows from it (``CONSEQUENCE_RULE``)."""
    cause = ctx.findings[j]
    said = f"Its consequence ({CONSEQUENCE_RULE}): {consequence.sentence()}"
    before = cause.detail.rstrip()
    if before and not before.endswith("."):
        before += "."
    ctx.findings[j] = dataclasses.replace(cause, detail=f"{before} {said}".strip())


def _moved_at(trace: Trace, i: int, name: str) -> bool:
    """Whether op ``i`` bound ``name`` or changed its value."""
    if name not in trace.steps[i].changed:
        return False
    before = trace.state_after(i - 1).get(name)
    after = trace.state_after(i)[name]
    return before is None or before.value is None or after.value is None or not same_values(before.value, after.value)


def _render_value(x: np.ndarray) -> str:
    return np.array2string(x, precision=6, separator=", ").replace("\n", "")


def _compare_dtypes(ctx: PairContext, hidden: set[int], unobserved: frozenset[int] = frozenset()) -> None:
    """The first name the two targets hold in different dtypes, each as its framework reports it
    (``Observation.dtype``), at the op that made it so (``program``: as the program opened): one
    framework changed a tensor's dtype, or made it in another, where the other kept the case's."""
    a, b = ctx.traces
    for i in range(-1, len(a.steps)):
        if i in hidden:
            return
        if i in unobserved:
            continue
        sa, sb = a.state_after(i), b.state_after(i)
        for name in sorted(
            sa if i < 0 else a.steps[i].changed.keys() | b.steps[i].changed.keys(), key=binding_rank(ctx.program)
        ):
            x, y = sa.get(name), sb.get(name)
            if x is not None and y is not None and x.dtype and y.dtype and x.dtype != y.dtype:
                label = ops.label(ctx.program.ops[i]) if i >= 0 else "program"
                ctx.add(
                    rule=rules.DTYPE_DIFFERS.name,
                    aspect="dtype",
                    method=None,
                    op_label=label,
                    sides=(x.dtype, y.dtype),
                    op_index=max(i, 0),
                    subject=name,
                    role=subject_role(ctx.program, name),
                )
                return


def _compare_versions(ctx: PairContext, hidden: set[int]) -> None:
    """The first op that bumped a name's version counter on one target and not on the other
    (``Observation.version``: torch's, on its devices and variants; candle and burn have none).
    Only the same object before and after the op counts (a name bound again holds a new counter),
    and only where the op moved the name's value alike on both sides: a value moved on one side
    only is a value finding, and its counter follows it. How far a counter moves is not compared,
    only whether it moves: one in-place call may bump it once or several times (an optimizer's
    for-loop and its foreach kernels, a compiled graph's functionalized copy)."""
    a, b = ctx.traces
    if not a.has_versions or not b.has_versions:
        return
    for i in range(len(a.steps)):
        if i in hidden:
            continue
        changed = a.steps[i].changed.keys() | b.steps[i].changed.keys()
        if not changed:
            continue
        before_a, before_b = a.state_after(i - 1), b.state_after(i - 1)
        after_a, after_b = a.state_after(i), b.state_after(i)
        for name in sorted(changed, key=binding_rank(ctx.program)):
            seen = (before_a.get(name), after_a.get(name), before_b.get(name), after_b.get(name))
            if any(o is None or o.version is None or o.identity is None for o in seen):
                continue
            xa, ya, xb, yb = seen
            if xa.identity != ya.identity or xb.identity != yb.identity:
                continue
            if _moved_at(a, i, name) != _moved_at(b, i, name):
                continue
            bumped = (ya.version != xa.version, yb.version != xb.version)
            if bumped[0] == bumped[1]:
                continue
            ctx.add(
                rule=rules.VERSION_DIFFERS.name,
                aspect="version",
                method=_value_method(ctx.program, i, name) or _version_method(ctx.program, i, name),
                op_label=ops.label(ctx.program.ops[i]),
                sides=tuple("bumped" if x else "kept" for x in bumped),
                op_index=i,
                subject=name,
                role=subject_role(ctx.program, name),
                detail=(
                    f"Its version counter went from {xa.version} to {ya.version} on {ctx.ids[0]}"
                    f" and from {xb.version} to {yb.version} on {ctx.ids[1]}."
                ),
            )
            return


def _version_method(program: Program, i: int, name: str) -> str | None:
    """The relation a version divergence of ``name`` at op ``i`` is named by, where the value links
    name none: the relation that decides whether the write reaches ``name``'s counter. For a
    source the op's write reached through relations (``write_path``: ``s1 = to_host(s0)``, a write
    into s1), the relation next to it on that path, which made the written tensor share the
    source's counter or have its own; else the relation that made ``name`` (None for a declared
    name)."""
    path = write_path(program, i)
    for nearer, here in zip(path, path[1:]):
        if here == name and (rel := made_by(program, i, nearer)) is not None and rel.source == name:
            return rel.method
    made = made_by(program, i, name)
    return made.method if made else None


def compare_pair(
    program: Program,
    kind: str,
    ids: tuple[str, str],
    traces: tuple[Trace, Trace],
    verdict_maps=None,
    unobserved: frozenset[int] = frozenset(),
) -> list[Finding]:
    """The findings of one pair. ``unobserved``: the ops after which either side observed nothing
    (``Trace.unobserved``), the traces already coarsened to them (``Trace.coarsened``): nothing is
    compared after them, and what they did is compared after the next op both observed."""
    if verdict_maps is None:
        verdict_maps = (verdicts(program, traces[0]), verdicts(program, traces[1]))
    ctx = PairContext(program, kind, ids, traces, verdict_maps)
    if not _compare_status(ctx):
        return ctx.findings
    hidden = _hidden_ops(program, *traces)
    _compare_verdicts(ctx, hidden, unobserved)
    _compare_identity(ctx, hidden | unobserved)
    _compare_values(ctx, hidden, unobserved)
    _compare_dtypes(ctx, hidden, unobserved)
    _compare_versions(ctx, hidden | unobserved)
    if unobserved:
        ctx.findings[:] = [_in_run(program, f, unobserved) for f in ctx.findings]
    return ctx.findings


def _in_run(program: Program, f: Finding, unobserved: frozenset[int]) -> Finding:
    """A finding after the last op of a compiled run (the ops before it ``unobserved``), moved to
    the op of the run whose effect it judges: the last of the run's writes whose path reaches
    the finding's subject (``write_path``), else its last write. The states after the run are
    what both sides were compared on, and the write is the call a user would look at; naming it
    gives the finding the signature of the same divergence in a program whose run ends at that
    write. A status finding stays at the op where the run failed, and one without a write in the
    run where it is."""
    j = f.op_index
    if f.aspect not in ("verdict", "value", "version") or j is None or j - 1 not in unobserved:
        return f
    start = j
    while start - 1 in unobserved:
        start -= 1
    writes = [k for k in range(start, j + 1) if ops.written(program.ops[k]) is not None]
    reaching = [k for k in writes if f.subject is not None and f.subject in write_path(program, k)]
    k = (reaching or writes or [j])[-1]
    op, method = program.ops[k], f.method
    if f.aspect in ("value", "version"):
        # The relations made inside the run were never observed apart from it: the one that
        # carried the write to the subject, or made it, names the divergence.
        method = _value_method(program, k, f.subject) or _version_method(program, k, f.subject)
    if k == j and method == f.method:
        return f
    label = ops.signature_class(op) if f.aspect == "verdict" else ops.label(op)
    return dataclasses.replace(f, op_index=k, op_label=label, method=method)


#: TEST DOUBLE switch: ``ALIASFUZZ_TEST_ORACLE_FAULT=OP`` makes ``compare`` raise
#: ``InjectedFault`` for every program with an op of kind ``OP``. It exists only so the tests can
#: show that an exception of the oracle is contained (``harness_errors``); nothing else sets it.
FAULT_ENV = "ALIASFUZZ_TEST_ORACLE_FAULT"


class InjectedFault(RuntimeError):
    """TEST DOUBLE: the exception ``FAULT_ENV`` makes the oracle raise."""


def injected_fault(program: Program) -> None:
    op = os.environ.get(FAULT_ENV)
    if op and any(o.kind == op for o in program.ops):
        raise InjectedFault(f"injected by {FAULT_ENV}={op}")


def compare(program: Program, traces: Mapping[str, Trace]) -> list[Finding]:
    """All findings for one program. Deterministic: same traces, same findings, same order."""
    injected_fault(program)
    traces = {t: tr for t, tr in traces.items() if tr.status != UNSUPPORTED}
    vmap: dict[str, dict[str, Verdict]] = {}

    def verdicts_of(t: str) -> dict[str, Verdict]:
        if t not in vmap:
            vmap[t] = verdicts(program, traces[t])
        return vmap[t]

    findings: list[Finding] = []
    if any(tr.ok for tr in traces.values()):
        for t, tr in sorted(traces.items()):
            if not tr.ok:
                kind = tr.status if tr.status in (CRASH, TIMEOUT) else "error"
                findings.append(
                    Finding(
                        kind=kind,
                        aspect="status",
                        targets=(t, "-"),
                        op_label="program",
                        method=None,
                        sides=(tr.status, "ok"),
                        detail=tr.message or "",
                        rule=rules.PROGRAM_FAILS.name,
                    )
                )
    for _target, tr in sorted(traces.items()):
        findings.extend(sharing.changes(program, tr))
        findings.extend(versions.hidden_writes(program, tr))
    for kind, (a, b) in pairs(list(traces)):
        ta, tb = traces[a], traces[b]
        # A side that observed only after some ops (a compiled run of torch's ``graph`` variant):
        # both sides are compared where both observed, each op's effect after the run it is in.
        unobserved = ta.unobserved | tb.unobserved
        if unobserved:
            ta, tb = ta.coarsened(unobserved), tb.coarsened(unobserved)
            maps = (verdicts(program, ta), verdicts(program, tb))
        else:
            maps = (verdicts_of(a), verdicts_of(b))
        if ta.ok and tb.ok and alike(ta, tb):
            continue  # no aspect can diverge: a backend and its twin, mostly
        findings.extend(compare_pair(program, kind, (a, b), (ta, tb), maps, unobserved))
    seen: set[str] = set()
    unique = []
    for f in findings:
        if f.signature not in seen:
            seen.add(f.signature)
            unique.append(f)
    return unique
