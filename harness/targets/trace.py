"""Traces: what a target observed after every op.

A trace arrives delta-encoded (see PROTOCOL.md); ``Trace.states`` rebuilds the full state after
each op. The targets produce traces (``harness.targets.base``); the oracle and the verdicts
(``harness.judging``) read them.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

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
    #: The tensor's version counter (torch ``_version``: every in-place write bumps it, and
    #: autograd refuses a backward pass over a saved tensor whose counter moved), where the target
    #: has one (``protocol.OBS_FIELDS``); None elsewhere.
    version: int | None = None

    @classmethod
    def from_wire(cls, raw: list | Mapping[str, Any]) -> Observation:
        """An observation as a probe sends it (a list of ``protocol.OBS_FIELDS``, in order), or
        as ``to_json`` writes it (a table: a finding's stored traces, hand-written ones)."""
        if type(raw) is list:
            shape, value, identity, device, requires_grad, initialized, dtype, note, *rest = raw
            storage = rest[0] if rest else None
            version = rest[1] if len(rest) > 1 else None
        else:
            shape, value, identity = raw["shape"], raw.get("value"), raw.get("identity")
            device, requires_grad, initialized = (
                raw.get("device", ""),
                raw.get("requires_grad"),
                raw.get("initialized", True),
            )
            dtype, note, storage = raw.get("dtype"), raw.get("note"), raw.get("storage")
            version = raw.get("version")
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
                "version": version,
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
            **({"version": self.version} if self.version is not None else {}),
        }


@dataclass(frozen=True)
class StepResult:
    status: str  # ok | unsupported | error | skipped
    message: str | None
    changed: Mapping[str, Observation]
    #: Nothing was observed after the op: it ran into a compiled graph that a later op ends, and
    #: its effects show in that op's ``changed`` (PROTOCOL.md, ``fused``).
    fused: bool = False


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

    @cached_property
    def has_versions(self) -> bool:
        """Whether the target reports version counters (any observation of the program's opening
        carries one): torch's targets do, candle's and burn's do not. Asked by two oracle rules
        per trace and pair, so it is computed once."""
        return any(o.version is not None for o in self.initial.values())

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
                    s.get("fused") is True,
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

    @cached_property
    def unobserved(self) -> frozenset[int]:
        """The ops after which nothing was observed (``StepResult.fused``)."""
        return frozenset(i for i, s in enumerate(self.steps) if s.fused)

    def coarsened(self, unobserved: frozenset[int]) -> Trace:
        """This trace as if observed only after the ops not in ``unobserved``: each such op's
        changes move to the next observed op (a later change of a name wins), so the state after
        an observed op is this trace's, and nothing changes at an unobserved one. Two traces of one
        program coarsened to one set of ops compare where both observed (a ``graph`` variant's
        run against eager torch's op by op). The trace itself where nothing is left out."""
        if not unobserved:
            return self
        steps, carried, observed = [], {}, dict(self.initial)
        for i, step in enumerate(self.steps):
            carried = {**carried, **step.changed}
            if i in unobserved and i < len(self.steps) - 1:
                steps.append(dataclasses.replace(step, changed={}, fused=True))
                continue
            # A name the run changed and changed back was not changed, seen from its ends.
            changed = {n: o for n, o in carried.items() if n not in observed or not _same(observed[n], o)}
            steps.append(dataclasses.replace(step, changed=changed))
            observed.update(changed)
            carried = {}
        return Trace(self.target, self.status, self.message, self.initial, steps, self.elapsed_us)

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
                    **({"fused": True} if s.fused else {}),
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


def _same(a: Observation, b: Observation) -> bool:
    """Whether two observations of a name are one: every field, values by their bits."""
    if (a.value is None) != (b.value is None) or (a.value is not None and a.value.tobytes() != b.value.tobytes()):
        return False
    return {k: v for k, v in a.__dict__.items() if k != "value"} == {
        k: v for k, v in b.__dict__.items() if k != "value"
    }


def alike(a: Trace, b: Trace) -> bool:
    """Whether two traces look the same to the oracle: statuses, names, shapes, dtypes, value bits,
    version counters and identity tokens renamed by first appearance (devices, ``requires_grad``
    and messages left out), so that no aspect can diverge between them. Walked side by side, the first step that
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
                or oa.version != ob.version
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


def identity_partition(state: Mapping[str, Observation]) -> frozenset[frozenset[str]]:
    """Names grouped by equal identity token; singletons and names without a token left out."""
    groups: dict[str, set[str]] = {}
    for name, obs in state.items():
        if obs.identity is not None:
            groups.setdefault(obs.identity, set()).add(name)
    return frozenset(frozenset(g) for g in groups.values() if len(g) > 1)
