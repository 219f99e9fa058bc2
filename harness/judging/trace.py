"""Traces: what a target observed after every op, and the verdicts derived from them.

A trace arrives delta-encoded (see PROTOCOL.md); ``Trace.states`` rebuilds the full state after
each op. Verdicts say, for every snapshot, how it related to its source at each later op that
changed either of them:

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
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from harness.case import ops
from harness.case.ir import Program, per_program

#: Trace statuses set by the harness rather than the target.
CRASH, TIMEOUT = "crash", "timeout"
#: The status of a trace whose target refused the whole program (the framework has no call for
#: something it declares).
UNSUPPORTED = "unsupported"


class MalformedTrace(ValueError):
    """A probe's trace reply that cannot be read (a probe bug): the program gets an ``error``
    trace, the probe goes on."""


def _floats(raw: Any) -> np.ndarray | None:
    """A wire value list as float32. numpy converts the whole list in one call (the strings
    ``NaN``, ``Infinity`` and ``-Infinity`` included), but reads ``None`` as NaN: a probe that
    sends ``null`` is refused, as ``float(None)`` would."""
    if raw is None:
        return None
    if None in raw:
        raise TypeError("a value list holds null")
    return np.array(raw, dtype=np.float32)


_new, _setattr = object.__new__, object.__setattr__


@dataclass(frozen=True)
class Observation:
    shape: tuple[int, ...]
    value: np.ndarray | None  # float32, shaped
    device: str
    requires_grad: bool | None
    identity: str | None
    initialized: bool
    note: str | None = None
    #: The float dtype the framework reports (``f32``, ``f16``, ``bf16``, or its own name for
    #: another); ``value`` holds the elements widened to float32. None where unreadable.
    dtype: str | None = None
    #: A token of the memory the tensor is over (two names with one token share storage), where
    #: the target can name it (``protocol.OBS_FIELDS``); None elsewhere.
    storage: str | None = None

    @classmethod
    def from_wire(cls, raw: list | Mapping[str, Any]) -> Observation:
        """An observation as a probe sends it (a list of ``protocol.OBS_FIELDS``, in order), or
        as ``to_json`` writes it (a table: a finding's stored traces, hand-written ones)."""
        if type(raw) is list:
            shape, value, identity, device, requires_grad, initialized, dtype, note, *rest = raw
            storage = rest[0] if rest else None
        else:
            shape, value, identity = raw["shape"], raw.get("value"), raw.get("identity")
            device, requires_grad, initialized = (
                raw.get("device", ""),
                raw.get("requires_grad"),
                raw.get("initialized", True),
            )
            dtype, note, storage = raw.get("dtype"), raw.get("note"), raw.get("storage")
        shape = tuple(shape)
        value = _floats(value)
        if value is not None and len(shape) != 1:  # a flat list is already one-dimensional
            try:
                value = value.reshape(shape)
            except ValueError:
                pass  # a probe bug; keep the flat values so the oracle still sees them
        # The fields set in one step: a frozen dataclass's __init__ sets each through
        # object.__setattr__, which was half the cost of reading an observation (a trace is
        # dozens of them, and every target sends one per program).
        obs = _new(cls)
        _setattr(
            obs,
            "__dict__",
            {
                "shape": shape,
                "value": value,
                "device": device,
                "requires_grad": requires_grad,
                "identity": identity,
                "initialized": bool(initialized),
                "note": note,
                "dtype": dtype,
                "storage": storage,
            },
        )
        return obs

    def to_json(self) -> dict[str, Any]:
        return {
            "shape": list(self.shape),
            "value": None if self.value is None else self.value.tolist(),
            "device": self.device,
            "requires_grad": self.requires_grad,
            "identity": self.identity,
            "initialized": self.initialized,
            **({"note": self.note} if self.note else {}),
            **({"dtype": self.dtype} if self.dtype else {}),
            **({"storage": self.storage} if self.storage else {}),
        }


@dataclass(frozen=True)
class StepResult:
    status: str  # ok | unsupported | error | skipped
    message: str | None
    changed: Mapping[str, Observation]


@dataclass
class Trace:
    """One program on one target. ``status`` is ``ok``, ``error`` (the program could not start on
    the target), ``crash`` (the target process died) or ``timeout``."""

    target: str
    status: str
    message: str | None = None
    initial: dict[str, Observation] = field(default_factory=dict)
    steps: list[StepResult] = field(default_factory=list)
    elapsed_us: int = 0
    _states: list[dict[str, Observation]] | None = field(default=None, repr=False)
    _changes: dict[str, Changes] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_wire(cls, target: str, raw: Mapping[str, Any]) -> Trace:
        """A trace reply as the oracle reads it. Raises ``MalformedTrace`` (one line) when the
        reply is a trace in name only: a field missing or of the wrong type."""
        try:
            initial = {k: Observation.from_wire(v) for k, v in raw.get("initial", {}).items()}
            steps = [
                StepResult(
                    s["status"],
                    s.get("message"),
                    {k: Observation.from_wire(v) for k, v in s.get("changed", {}).items()},
                )
                for s in raw.get("steps", [])
            ]
            return cls(
                target, raw.get("status", "ok"), raw.get("message"), initial, steps, int(raw.get("elapsed_us", 0))
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise MalformedTrace(f"malformed trace: {type(e).__name__}: {e}") from None

    @classmethod
    def failed(cls, target: str, status: str, message: str) -> Trace:
        return cls(target, status, message)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def states(self) -> list[dict[str, Observation]]:
        """Full state after each op: ``states()[i]`` is after op i; the initial state is
        ``self.initial``."""
        if self._states is None:
            current = dict(self.initial)
            out = []
            for step in self.steps:
                current = {**current, **step.changed}
                out.append(current)
            self._states = out
        return self._states

    def changes(self) -> dict[str, Changes]:
        """Every name's observations, each with the op after which it was made (-1: the initial
        state): what ``state_after(i)[name]`` is, read without building every state. The
        verdicts read a few names at a few ops each; a full state per op is quadratic in the
        program's length."""
        if self._changes is None:
            out: dict[str, Changes] = {}
            for name, obs in self.initial.items():
                out[name] = Changes([-1], [obs])
            for i, step in enumerate(self.steps):
                for name, obs in step.changed.items():
                    ch = out.get(name)
                    if ch is None:
                        out[name] = Changes([i], [obs])
                    else:
                        ch.ops.append(i)
                        ch.observations.append(obs)
            self._changes = out
        return self._changes

    def state_after(self, i: int) -> dict[str, Observation]:
        """State after op ``i``; ``i = -1`` is the initial state."""
        return self.initial if i < 0 else self.states()[i]

    @property
    def final(self) -> dict[str, Observation]:
        return self.states()[-1] if self.steps else self.initial

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "message": self.message,
            "initial": {k: v.to_json() for k, v in self.initial.items()},
            "trace": [
                {
                    "status": s.status,
                    **({"message": s.message} if s.message else {}),
                    "changed": {k: v.to_json() for k, v in s.changed.items()},
                }
                for s in self.steps
            ],
            "elapsed_us": self.elapsed_us,
        }


@dataclass
class Changes:
    """One name's observations in a trace (``Trace.changes``): ``observations[j]`` was made by op
    ``ops[j]`` (-1: the initial state), ``ops`` ascending."""

    ops: list[int]
    observations: list[Observation]

    def after(self, i: int) -> Observation | None:
        """The name's observation after op ``i`` (-1: initially), or None where it is not bound
        yet."""
        j = bisect.bisect_right(self.ops, i) - 1
        return self.observations[j] if j >= 0 else None

    def between(self, start: int, end: int) -> list[int]:
        """The ops ``k`` with ``start <= k < end`` that changed the name."""
        return self.ops[bisect.bisect_left(self.ops, start) : bisect.bisect_left(self.ops, end)]


def alike(a: Trace, b: Trace) -> bool:
    """Whether two traces look the same to the oracle: statuses, names, shapes, dtypes, value bits
    and identity tokens renamed by first appearance (devices, ``requires_grad`` and messages left
    out), so that no aspect can diverge between them. Walked side by side, the first step that
    differs stops it (traces of two frameworks mostly differ somewhere; two backends' mostly do
    not)."""
    if a.status != b.status or len(a.steps) != len(b.steps):
        return False
    tokens_a: dict[str, int] = {}
    tokens_b: dict[str, int] = {}

    def same(xa: Mapping[str, Observation], xb: Mapping[str, Observation]) -> bool:
        if xa.keys() != xb.keys():
            return False
        for name in sorted(xa):  # one order on both sides: it numbers the tokens
            oa, ob = xa[name], xb[name]
            if (
                oa.shape != ob.shape
                or oa.dtype != ob.dtype
                or (oa.value is None) != (ob.value is None)
                or (oa.identity is None) != (ob.identity is None)
            ):
                return False
            if oa.value is not None and oa.value.tobytes() != ob.value.tobytes():
                return False
            if oa.identity is not None and tokens_a.setdefault(oa.identity, len(tokens_a)) != tokens_b.setdefault(
                ob.identity, len(tokens_b)
            ):
                return False
        return True

    return same(a.initial, b.initial) and all(
        x.status == y.status and same(x.changed, y.changed) for x, y in zip(a.steps, b.steps)
    )


# ------------------------------------------------------------------------------------------------
# Verdicts.


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
    if name.after(snap.op) is None:
        return Verdict(snap, "error", message=f"{snap.name} was not observed")
    events = []
    # Only the ops that changed either side can make an event (the states are merged from
    # ``changed``): each relation reads its two names' changes, not every op of the program.
    start, end = snap.op + 1, relation_end(program, snap, len(trace.steps))
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


def identity_partition(state: Mapping[str, Observation]) -> frozenset[frozenset[str]]:
    """Names grouped by equal identity token; singletons and names without a token left out."""
    groups: dict[str, set[str]] = {}
    for name, obs in state.items():
        if obs.identity is not None:
            groups.setdefault(obs.identity, set()).add(name)
    return frozenset(frozenset(g) for g in groups.values() if len(g) > 1)
