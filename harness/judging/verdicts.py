"""Verdicts: for every snapshot, how it related to its source at each later op that changed
either of them, read from a target's trace (``harness.targets.trace``):

- ``follows``: the snapshot moved with the source and equals its new value under the snapshot's
  view (it shares storage, or behaves as if it did);
- ``keeps``: the source changed and the snapshot still holds its old value (an independent copy),
  even when that old value happens to equal the source's new one;
- ``other``: neither (corruption, a partial write, garbage);
- ``unchanged``: nothing the snapshot could be compared on ever changed;
- ``unsupported`` / ``error`` / ``skipped``: the snapshot itself could not be taken.

An event is *reverse* when the op wrote into the snapshot itself: ``follows`` then means the source
changed with it (the write reached the source), ``keeps`` that the source did not move.

Values inside one trace are compared exactly: two handles on one buffer are bitwise equal, and a
copy that merely happens to hold an equal value is exactly what ``keeps`` means.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from harness.case import ops
from harness.case.ir import Program, per_program
from harness.targets.trace import Changes, Observation, Trace


@dataclass(frozen=True)
class Event:
    op: int
    verdict: str  # follows | keeps | other
    reverse: bool

    def label(self) -> str:
        return f"{'rev ' if self.reverse else ''}{self.verdict}@{self.op}"


@dataclass(frozen=True)
class SnapshotInfo:
    """A name bound by a snapshot-like op: which op, of what, with which method."""

    name: str
    op: int
    source: str
    method: str


@dataclass(frozen=True)
class Verdict:
    snapshot: SnapshotInfo
    status: str  # ok | unsupported | error | skipped | crash | timeout
    events: tuple[Event, ...] = ()
    message: str | None = None

    @property
    def summary(self) -> str:
        """One word where one word says it all, else every event."""
        if self.status != "ok":
            return self.status
        if not self.events:
            return "unchanged"
        kinds = {(e.verdict, e.reverse) for e in self.events}
        if len(kinds) == 1:
            verdict, reverse = kinds.pop()
            return f"rev {verdict}" if reverse else verdict
        return " ".join(e.label() for e in self.events)


@per_program
def snapshots(program: Program) -> tuple[SnapshotInfo, ...]:
    """Every snapshot relation, in op order. A name a ``replace`` rebinds from another has one
    relation per rebinding; one rebound from itself (``replace p0 value = p0``) has none: the new
    object is made of the old one, so the relations of the old one's snapshots go on
    (``relation_end``), and a relation of a name to itself could never diverge."""
    params = program.model_names
    return tuple(
        SnapshotInfo(b.name, i, b.source, b.method)
        for i, op in enumerate(program.ops)
        for b in ops.bindings(op, params) + ops.rebindings(op)
        if b.name != b.source
    )


def made_before(program: Program, i: int) -> tuple[SnapshotInfo, ...]:
    """The snapshot relations made before op ``i``, the latest first: where two relations bind or
    join the same names (``s = w.flip()``, then ``w.data = s``), the later one made what they
    share from then on, so a search for a name's relation takes the first it meets."""
    return tuple(s for s in reversed(snapshots(program)) if s.op < i)


def made_by(program: Program, i: int, name: str) -> SnapshotInfo | None:
    """The relation that last bound ``name`` before op ``i``; None for a name no snapshot bound
    by then (a declared tensor)."""
    return next((s for s in made_before(program, i) if s.name == name), None)


@per_program
def binding_order(program: Program) -> dict[str, int]:
    """Each name's place in the program's binding order: its declared tensors, its layers'
    states, then what each op binds. Renaming the tensors keeps it, as sorting by name does not,
    so the name a finding is about, and so its signature, does not depend on what names are called."""
    order: dict[str, int] = {}
    names = [t.name for t in program.tensors] + [n for layer in program.layers for n, _, _ in layer.states()]
    names += [s.name for s in snapshots(program)]
    for name in names:
        order.setdefault(name, len(order))
    return order


def binding_rank(program: Program):
    """A sort key by ``binding_order`` (a name it does not know last, by name)."""
    order = binding_order(program)
    return lambda name: (order.get(name, len(order)), name)


def subject_role(program: Program, name: str) -> str | None:
    """The declared kind (param, buffer, lazy) of the tensor ``name`` is, or else is a snapshot
    of, through snapshot sources (``s1 = alias(s0)``, ``s0 = clone(b0)``: buffer). A lazy tensor
    of the program's one generator is ``lazy:program_rng``: what it holds depends on the order of
    first reads, which a baseline entry may need to tell apart (match ``lazy*`` for any lazy)."""
    declared = {t.name: "lazy:program_rng" if t.init == "program_rng" else t.kind for t in program.tensors}
    source = {s.name: s.source for s in snapshots(program)}
    seen = set()
    # A declared name is its own kind, even where a ``replace`` made it a snapshot relation.
    while name not in declared and name in source and name not in seen:
        seen.add(name)
        name = source[name]
    return declared.get(name)


def same_values(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Whether two observed values are equal, NaN equal to NaN (as a snapshot's verdict uses it)."""
    if a is b:  # states share unchanged observations: the usual case, and free
        return True
    if a is None or b is None:
        return a is None and b is None
    if a.shape != b.shape:
        return False
    if a.tobytes() == b.tobytes():  # bitwise equal: the common case, and 40 times cheaper than
        return True  # np.array_equal on these tiny arrays
    # -0.0 equals 0.0, NaN equals NaN (any payload): element by element, in Python floats.
    return all(x == y or (x != x and y != y) for x, y in zip(a.ravel().tolist(), b.ravel().tolist()))


def _view(method: str, obs: Observation | None) -> np.ndarray | None:
    if obs is None or obs.value is None:
        return None
    try:
        return ops.apply_view(method, obs.value)
    except (ValueError, IndexError):
        return None


def writes_into(op: Mapping[str, Any], name: str) -> bool:
    return ops.written(op) == name


def snapshot_verdict(program: Program, trace: Trace, snap: SnapshotInfo) -> Verdict:
    if not trace.ok:
        return Verdict(snap, trace.status, message=trace.message)
    if snap.op >= len(trace.steps):
        return Verdict(snap, "error", message="trace is shorter than the program")
    taken = trace.steps[snap.op]
    if taken.status != "ok":
        return Verdict(snap, taken.status, message=taken.message)
    changes = trace.changes()
    source, name = changes.get(snap.source, _NEVER), changes.get(snap.name, _NEVER)
    seen = _first_observed(trace, snap.op, name)
    if seen is None:
        return Verdict(snap, "error", message=f"{snap.name} was not observed")
    events = []
    # Only the ops that changed either side can make an event (the states are merged from
    # ``changed``): each relation reads its two names' changes, not every op of the program.
    start, end = seen + 1, relation_end(program, snap, len(trace.steps))
    for k in sorted({*source.between(start, end), *name.between(start, end)}):
        x0, x1 = _view(snap.method, source.after(k - 1)), _view(snap.method, source.after(k))
        before, after = name.after(k - 1), name.after(k)
        s0 = before.value if before is not None else None
        s1 = after.value if after is not None else None
        # A lazy snapshot getting its first value (burn initialises a clone of an uninitialised
        # parameter with it) is not a change of the snapshot: one that then holds another value
        # than its source (the source was initialised and trained by the same step) keeps. One
        # that holds the same value tells nothing yet (one shared initialisation, or the same
        # init value that a step happened to leave in place): later ops tell.
        d_source, d_snap = not same_values(x0, x1), s0 is not None and not same_values(s0, s1)
        reverse = writes_into(program.ops[k], snap.name)
        if d_source:
            if s0 is None and same_values(s1, x1):
                continue
            # A snapshot that shares its source's storage moves with it. One that did not move
            # and merely holds what the source now holds (a copy filled with 0.0, then an Adam step
            # that brings the source to exactly 0.0 on one framework only) is a coincidence, and
            # keeps.
            if same_values(s1, x1) and d_snap:
                verdict = "follows"
            elif not d_snap:
                verdict = "keeps"
            else:
                verdict = "other"
            events.append(Event(k, verdict, reverse))
        elif reverse and d_snap:
            events.append(Event(k, "keeps", True))
    return Verdict(snap, "ok", tuple(events))


def _first_observed(trace: Trace, made: int, name: Changes) -> int | None:
    """The op after which the snapshot made at op ``made`` was first observed: ``made`` itself,
    or, for one made inside a compiled run that observes nothing before its last op
    (``StepResult.fused``: torch's ``graph`` variant), that last op, where its relation is judged
    from (what the run did to it is compared as values there). None where it was not observed."""
    if name.after(made) is not None:
        return made
    later = name.between(made + 1, len(trace.steps))
    if later and all(trace.steps[k].fused for k in range(made, later[0])):
        return later[0]
    return None


#: The changes of a name a trace never observed.
_NEVER = Changes([], [])


def relation_end(program: Program, snap: SnapshotInfo, n: int) -> int:
    """The op at which the snapshot's relation ends: the first after it that binds itself again
    from another name, or its source to another object (a ``replace`` puts another tensor in the
    param's slot, an ``append`` binds a longer one, so the name denotes another object from then
    on); ``n`` when none does. A name rebound from itself
    denotes a parameter made of the object it denoted (``nn.Parameter(w)`` over w's storage, the
    same Var in candle, a new value in burn): its snapshots are compared with that one on, and
    whether they follow it is the finding."""
    end = _relation_ends(program).get(snap)
    if end is None:  # a relation this program does not have (a caller's own): judged afresh
        end = _relation_end(program, snap)
    return end if end < min(n, len(program.ops)) else n


@per_program
def _relation_ends(program: Program) -> Mapping[SnapshotInfo, int]:
    return MappingProxyType({s: _relation_end(program, s) for s in snapshots(program)})


def _relation_end(program: Program, snap: SnapshotInfo) -> int:
    # The snapshot's own link ends at any rebinding; its source's only when the source becomes
    # another object (``w.data = v`` keeps the object: an alias of w follows it).
    rebound, another = _rebinding_ops(program)
    end = len(program.ops)
    for at in (rebound.get(snap.name, ()), another.get(snap.source, ())):
        j = bisect.bisect_right(at, snap.op)
        if j < len(at):
            end = min(end, at[j])
    return end


@per_program
def _rebinding_ops(program: Program) -> tuple[Mapping[str, tuple[int, ...]], Mapping[str, tuple[int, ...]]]:
    """For each name, the ops that bind it again (``ops.rebinds``), and those after which it
    denotes another object (``ops.denotes_another_object``), ascending: one pass over the ops,
    where asking each op about each relation's names was quadratic in the program's length."""
    rebound: dict[str, list[int]] = {}
    another: dict[str, list[int]] = {}
    for k, op in enumerate(program.ops):
        names = ops.rebound(op)
        for name in names:
            rebound.setdefault(name, []).append(k)
        if not ops.keeps_object(op):
            for name in names:
                another.setdefault(name, []).append(k)
    return (
        MappingProxyType({n: tuple(ks) for n, ks in rebound.items()}),
        MappingProxyType({n: tuple(ks) for n, ks in another.items()}),
    )


def relation_key(snap: SnapshotInfo, first: bool) -> str:
    """A relation's key in ``verdicts``: its name for a name's first relation, ``name@op`` for a
    later one (a param a second ``replace`` rebound)."""
    return snap.name if first else f"{snap.name}@{snap.op}"


def verdicts(program: Program, trace: Trace) -> dict[str, Verdict]:
    """Every snapshot relation's verdict, keyed by ``relation_key``. A param a ``replace`` rebinds
    twice has two relations, each judged up to the op that ends it (``relation_end``)."""
    out: dict[str, Verdict] = {}
    for s in snapshots(program):
        out[relation_key(s, s.name not in out)] = snapshot_verdict(program, trace, s)
    return out
