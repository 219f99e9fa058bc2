"""Inert ops: ops whose presence must not change what any other name of the program holds.

A correct framework gives a program and the same program without an inert op the same values,
statuses and identities for every name the inert op does not bind itself. The metamorphic oracle
(``harness.judging.metamorphic``) compares the two runs on one target; this module only reads the
program. Inert, by kind (``Inert.label``, which a metamorphic signature names):

- ``snapshot:<method>``: a snapshot no later op uses (``contiguous`` of a contiguous tensor is one
  of these), of a tensor whose first read draws nothing (below), and not made through the whole
  model (``state_dict``, ``save_load``: a record of every param) where a lazy tensor draws;
- ``module_clone``: a clone of the model none of whose names a later op uses;
- ``read``: a read of a tensor whose first read draws nothing (not a lazy tensor of ``uniform``
  or ``program_rng`` init, nor a module clone's: the first draws from an RNG that candle's CPU
  cannot seed, the second moves what every later first read of the program's one generator
  draws);
- ``valid+train``: a ``valid`` immediately followed by a ``train``, while the model is in
  training mode (after either, it is in training mode again).

Invariants: ``Inert.ops`` are op indices of the program, ascending; removing them (``without``)
leaves a valid program, because no other op reads what they bind.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.case import ops
from harness.case.ir import CaseError, check_program, names_bound, per_program, shapes_before

#: The kinds of inert op, by the first word of their label.
INERT_KINDS = ("snapshot", "module_clone", "read", "valid+train")


@dataclass(frozen=True)
class Inert:
    """One inert group of a program: its op indices, its label, and the names it binds."""

    ops: tuple[int, ...]
    label: str
    binds: frozenset[str]


def _uses_later(program, i: int, names: set[str]) -> bool:
    return any(set(ops.reads(op)) & names for op in program.ops[i + 1 :])


def _mode_before(program, i: int) -> str:
    mode = "train"
    for op in program.ops[:i]:
        if op["op"] in ("valid", "train"):
            mode = op["op"]
    return mode


def _draws(program, name: str) -> bool:
    """Whether a read of ``name`` may draw from a generator: a uniform lazy tensor, whose values
    differ between runs where the generator cannot be seeded, or one of ``program_rng`` (its first
    read takes the program generator's next values, moving every later first read's); or a name
    made of one by snapshots or a module clone (``s0 = alias(l0)``, ``m0.l0``: in burn a clone
    of a lazy param shares its lazy state, so reading it initialises the param)."""
    return name in _drawing_names(program)


@per_program
def _drawing_names(program) -> frozenset[str]:
    out = {t.name for t in program.tensors if t.kind == "lazy" and t.init in ops.DRAWN_INITS}
    if not out:
        return frozenset()  # most programs
    for op in program.ops:  # an op's source is bound before it: one pass in op order
        out.update(b.name for b in ops.bindings(op, program.model_names) if b.source in out)
    return frozenset(out)


def _snapshot_draws(program, op) -> bool:
    """Whether a snapshot may draw: of a tensor that does, or made through the whole model (a
    record or file of it reads every param) in a program with a lazy tensor that draws."""
    if ops.METHODS_BY_NAME[op["method"]].whole_model:
        return any(_draws(program, n) for n in program.model_names)
    return _draws(program, op["of"])


def inert_at(program, i: int) -> Inert | None:
    """The inert group that starts at op ``i``, if any."""
    op = program.ops[i]
    params = program.model_names
    if op["op"] in ("snapshot", "module_clone"):
        bound = {b.name for b in ops.bindings(op, params)}
        if _uses_later(program, i, bound) or (op["op"] == "snapshot" and _snapshot_draws(program, op)):
            return None
        label = f"snapshot:{op['method']}" if op["op"] == "snapshot" else "module_clone"
        return Inert((i,), label, frozenset(bound))
    if op["op"] == "read" and not _draws(program, op["target"]):
        return Inert((i,), "read", frozenset())
    if (
        op["op"] == "valid"
        and i + 1 < len(program.ops)
        and program.ops[i + 1]["op"] == "train"
        and _mode_before(program, i) == "train"
    ):
        return Inert((i, i + 1), "valid+train", frozenset())
    return None


def inert_ops(program, label: str | None = None) -> list[Inert]:
    """Every inert group of ``program`` (of ``label`` only, when given), in op order."""
    out = []
    for i in range(len(program.ops)):
        found = inert_at(program, i)
        if found is not None and (label is None or found.label == label):
            out.append(found)
    return out


def check_inert(program, indices: Sequence[int]) -> Inert:
    """The inert group a case's ``inert`` field names, or ValueError saying why it is not one."""
    idx = tuple(indices)
    if not idx or list(idx) != sorted(set(idx)) or idx[0] < 0 or idx[-1] >= len(program.ops):
        raise ValueError(f"expected ascending op indices of this case (0 to {len(program.ops) - 1})")
    found = inert_at(program, idx[0])
    if found is None or found.ops != idx:
        raise ValueError(
            f"ops {list(idx)} are not an inert group (an unused snapshot or module_clone, "
            "a read of a deterministic tensor, or valid then train in training mode)"
        )
    return found


def without(program, inert: Inert):
    """``program`` without the ops of ``inert`` (and without an ``inert`` field)."""
    from dataclasses import replace

    kept = [op for i, op in enumerate(program.ops) if i not in inert.ops]
    return replace(program, ops=tuple(kept), inert=())


def kept_index(inert: Inert, i: int) -> int:
    """The index in ``without(program, inert)`` of op ``i`` of ``program`` (not one of its ops)."""
    return i - sum(1 for j in inert.ops if j < i)


# ------------------------------------------------------------------------------------------------
# Variants: a drawn program with an inert op inserted, or with one of its own removed.


def _fresh(taken: set[str], stem: str) -> str:
    k = 0
    while f"{stem}{k}" in taken or any(t.startswith(f"{stem}{k}.") for t in taken):
        k += 1
    return f"{stem}{k}"


def _insertions(
    program, at: int, shapes: Mapping[str, tuple[int, ...]], taken: set[str], rng: random.Random
) -> list[dict[str, Any]]:
    """Candidate inert op groups to insert before op ``at``; ``shapes`` are the names bound then."""
    out: list[list[dict[str, Any]]] = [[{"op": "module_clone", "name": _fresh(taken, "z")}]]
    roles = {t.name: t.kind for t in program.tensors}
    model = set(program.model_names)
    names = [n for n in sorted(shapes) if not _draws(program, n)]
    if names:
        of = rng.choice(names)
        methods = [
            m
            for m in ops.METHOD_TABLE
            if m.accepts(shapes[of])
            and (roles.get(of, "running" if of in model else "snapshot") in m.sources)
            and not _snapshot_draws(program, {"method": m.name, "of": of})
        ]
        if methods:
            out.append([{"op": "snapshot", "name": _fresh(taken, "z"), "of": of, "method": rng.choice(methods).name}])
        out.append([{"op": "read", "target": rng.choice(names)}])
    if _mode_before(program, at) == "train":
        out.append([{"op": "valid"}, {"op": "train"}])
    return out


def variant(program, rng: random.Random):
    """A program that differs from ``program`` by one inert group, and that group: ``(with,
    inert)``, where ``with`` holds the group and ``without(with, inert)`` equals ``program`` (an
    insertion), or ``with`` is ``program`` itself (a removal of an inert group it already holds).
    None when there is none to make (a program of no ops and no names)."""
    from dataclasses import replace

    own = inert_ops(program)
    if own and rng.random() < 0.3:
        return program, rng.choice(own)
    # Early places twice as often as late ones (the smaller of two draws): an inert group early has
    # the most ops after it to disturb, and comes before the lazy tensors' first reads.
    at = min(rng.randint(0, len(program.ops)), rng.randint(0, len(program.ops)))
    shapes = shapes_before(program, at)
    taken = set(names_bound(program)) | {layer.name for layer in program.layers}
    group = rng.choice(_insertions(program, at, shapes, taken, rng))
    new_ops = list(program.ops[:at]) + group + list(program.ops[at:])
    try:
        canonical = check_program(program.tensors, new_ops, layers=program.layers, dtype=program.dtype)
    except CaseError:
        return None
    inserted = tuple(range(at, at + len(group)))
    with_program = replace(program, ops=tuple(canonical), inert=())
    found = inert_at(with_program, at)
    if found is None or found.ops != inserted:
        return None  # e.g. a read that is a lazy tensor's first one where that matters: not inert by rule
    return replace(with_program, inert=inserted), found
