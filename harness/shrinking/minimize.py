"""Minimization: shrink a program to a 1-minimal case that still shows the same signature.

A domain pass over the case format, run to a fixpoint:

1. remove ops: chunks first (halves, quarters, ...), then single ops; an op that binds a name is
   removed together with every later op that uses that name;
2. remove tensors and layers, with every op that uses them;
3. simplify: values to 0 and 1, drop custom gradients, shrink shapes, simplify op fields
   (learning rates, optimizers, write values, devices);
4. rename tensors canonically (``p0``, ``b0``, ``l0`` for tensors, ``s0``... for snapshots,
   ``m0``... for module clones).

The result is 1-minimal: no single op or tensor can be removed and no value simplified without
losing the signature. Every round evaluates its candidates in one batch on the targets (the probes
pipeline them), so a pass costs one round trip, not one per candidate.

Shrinking is bounded in time; when the bound stops it early, the result says so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from harness.case import ops
from harness.case.ir import CaseError, Program, TensorDecl, check_program
from harness.case.layers import LayerDecl

#: Given candidate programs, which of them still show the signature (same order).
Predicate = Callable[[Sequence[Program]], list[bool]]


@dataclass
class MinimizeResult:
    program: Program
    ops_before: int
    ops_after: int
    runs: int
    seconds: float
    complete: bool  # False when the time bound stopped it before a fixpoint
    hypothesis_runs: int = 0  # runs spent in Hypothesis's shrinker before the domain pass
    #: The shrunk program showed the divergence to the shrinker but not when run again, so the
    #: program as found was kept (``program``, ``ops_after``).
    kept_as_found: bool = False


def _valid(
    tensors: Sequence[TensorDecl],
    ops: Iterable[Mapping[str, Any]],
    layers: Sequence[LayerDecl] = (),
    dtype: str = "f32",
) -> Program | None:
    try:
        canonical = check_program(tuple(tensors), list(ops), layers=tuple(layers), dtype=dtype)
    except CaseError:
        return None
    return Program(tuple(tensors), canonical, layers=tuple(layers), dtype=dtype)


def _bound_by(op: Mapping[str, Any], params: Sequence[str]) -> set[str]:
    """The names and checkpoints ``op`` makes (a name and a checkpoint are never equal: a
    checkpoint is a prefix, which no bound name is)."""
    return {b.name for b in ops.bindings(op, params)} | set(ops.checkpoints_taken(op))


def _uses(op: Mapping[str, Any]) -> set[str]:
    return set(ops.reads(op)) | set(ops.checkpoints_read(op))


def without_ops(program: Program, drop: set[int]) -> Program | None:
    """The program without ops ``drop`` and, transitively, every op using a name they bound."""
    params = program.model_names
    gone: set[str] = set()
    kept = []
    for i, op in enumerate(program.ops):
        if i in drop or _uses(op) & gone:
            gone |= _bound_by(op, params)
            continue
        kept.append(op)
    if len(kept) == len(program.ops):
        return None
    # A dropped ``append`` leaves its name shorter: later writes of it are cut to fit.
    p = _valid(program.tensors, kept, program.layers, program.dtype)
    if p is None and (reshaped := _reshaped_ops(program.tensors, kept, program.layers)) is not None:
        p = _valid(program.tensors, reshaped, program.layers, program.dtype)
    return replace(p, title=program.title, meta=program.meta) if p else None


def without_tensor(program: Program, name: str) -> Program | None:
    if len(program.tensors) <= 1:
        return None
    tensors = tuple(t for t in program.tensors if t.name != name)
    params = program.model_names
    gone = {name}
    kept = []
    for op in program.ops:
        if _uses(op) & gone:
            gone |= _bound_by(op, params)
            continue
        # a module clone no longer holds the removed param
        gone.update(f"{op[f.name]}.{name}" for f in ops.spec(op).of_kind("prefix"))
        kept.append(op)
    p = _valid(tensors, kept, program.layers, program.dtype)
    return replace(p, title=program.title, meta=program.meta) if p else None


def without_layer(program: Program, name: str) -> Program | None:
    """The program without layer ``name``, the ops that run it, and every op using a name its
    stats or those ops bound (a prefix no longer binds its stats)."""
    layer = next(x for x in program.layers if x.name == name)
    stats = {n for n, _, _ in layer.states()}
    params = program.model_names
    gone = set(stats)
    kept = []
    for op in program.ops:
        if _uses(op) & gone or (op.kind == "forward" and op.layer == name):
            gone |= _bound_by(op, params)
            continue
        gone.update(f"{op[f.name]}.{s}" for f in ops.spec(op).of_kind("prefix") for s in stats)
        kept.append(op)
    p = _valid(program.tensors, kept, tuple(x for x in program.layers if x.name != name), program.dtype)
    return replace(p, title=program.title, meta=program.meta) if p else None


def with_shape(program: Program, name: str, shape: tuple[int, ...]) -> Program | None:
    """The program with tensor ``name`` reshaped: values truncated, writes adapted."""
    decl = program.tensor(name)
    n = math.prod(shape)
    value = None if decl.value is None else tuple((list(decl.value) * n)[:n])
    grad = None if decl.grad is None else tuple((list(decl.grad) * n)[:n])
    tensors = tuple(replace(t, shape=shape, value=value, grad=grad) if t.name == name else t for t in program.tensors)
    out = _reshaped_ops(tensors, program.ops, program.layers)
    p = _valid(tensors, out, program.layers, program.dtype) if out is not None else None
    return replace(p, title=program.title, meta=program.meta) if p else None


def _reshaped_ops(tensors, program_ops, layers=()) -> list | None:
    """The ops adapted to the shapes their names have with ``tensors`` (``_reshaped_op``); None
    when one no longer applies."""
    out = []
    for _, op, shapes in ops.walk(tensors, program_ops, layers):
        op = _reshaped_op(op, shapes)
        if op is None:
            return None
        out.append(op)
    return out


def _reshaped_op(op: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> Mapping[str, Any] | None:
    """``op`` adapted to the shapes its names now have: a written row index clamped, written
    values cut or repeated to fit; None when a snapshot method no longer applies."""
    spec = ops.spec(op)
    method = ops.snapshot_method(op)
    if method is not None and method.refusal(shapes[op[spec.of_kind("name")[0].name]]) is not None:
        return None
    values = spec.of_kind("values")
    if not values:
        return op
    tshape = shapes[op[spec.of_kind("name")[0].name]]
    out = dict(op)
    rows = spec.of_kind("row")
    want = math.prod(tshape)
    if rows and out[rows[0].name] is not None:
        out[rows[0].name] = min(out[rows[0].name], tshape[0] - 1)
        want = math.prod(tshape[1:])
    out[values[0].name] = (list(out[values[0].name]) * want)[:want]
    return out


def _smaller_shapes(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    out = []
    if len(shape) > 1:
        out.append(shape[1:])  # drop the leading dimension
        out.append(shape[:-1])
    for i, d in enumerate(shape):
        if d > 1:
            out.append(shape[:i] + (1,) + shape[i + 1 :])
            if d > 2:
                out.append(shape[:i] + (d - 1,) + shape[i + 1 :])
    return out


def _simpler_values(xs: tuple[float, ...]) -> list[tuple[float, ...]]:
    out = []
    for v in (0.0, 1.0):
        cand = tuple(v for _ in xs)
        if cand != xs:
            out.append(cand)
    for i, x in enumerate(xs):
        for v in (0.0, 1.0):
            if x != v and abs(x) > v:
                out.append(xs[:i] + (v,) + xs[i + 1 :])
                break
    return out


def simplifications(program: Program) -> Iterator[Program]:
    """Candidate programs that are each 'simpler' by one step (a well-founded order, so the
    fixpoint loop terminates)."""
    if program.dtype != "f32":  # float32 holds every value of an f16 or bf16 case
        yield replace(program, dtype="f32")
    for t in program.tensors:
        if t.grad is not None:
            yield replace(program, tensors=tuple(replace(u, grad=None) if u is t else u for u in program.tensors))
        for smaller in _smaller_shapes(t.shape):
            p = with_shape(program, t.name, smaller)
            if p is not None:
                yield p
        if t.value is not None:
            for vals in _simpler_values(t.value):
                yield replace(program, tensors=tuple(replace(u, value=vals) if u is t else u for u in program.tensors))
        if t.kind == "lazy" and t.init in ops.DRAWN_INITS:
            yield replace(
                program,
                tensors=tuple(replace(u, init="const", fill=0.0, seed=None) if u is t else u for u in program.tensors),
            )
    # Re-point a use of a snapshot at the snapshot's own source: chains like
    # ``s1 = detach(s0); s2 = clone(s1)`` collapse, and the op removals can then drop the links.
    source = _snapshot_sources(program)
    for i, op in enumerate(program.ops):
        for key in (f.name for f in ops.spec(op).of_kind("name")):
            if op[key] in source:
                p = _valid(
                    program.tensors,
                    program.ops[:i] + ({**op, key: source[op[key]]},) + program.ops[i + 1 :],
                    program.layers,
                    program.dtype,
                )
                if p is not None:
                    yield replace(p, title=program.title, meta=program.meta)
    for i, op in enumerate(program.ops):
        for simpler in _simpler_op(op):
            p = _valid(
                program.tensors, program.ops[:i] + (simpler,) + program.ops[i + 1 :], program.layers, program.dtype
            )
            if p is not None:
                yield replace(p, title=program.title, meta=program.meta)


def _simpler_op(op: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The op with one field simplified, field by field in the op table's order (see the table
    in ``harness.case.ops`` for what each field kind allows)."""
    for f in ops.spec(op).fields:
        value = op[f.name]
        if f.kind == "choice" and f.ordered:
            candidates = f.choices[: f.choices.index(value)]
        elif f.kind == "number":
            candidates = f.shrink(value)
        elif f.kind == "values":
            candidates = [list(v) for v in _simpler_values(tuple(value))]
        elif f.kind == "row":
            candidates = [0] if value is not None and value > 0 else []
        elif f.kind == "flag":
            candidates = [False] if value else []
        else:
            candidates = []
        for simpler in candidates:
            yield ops.with_field(op, f.name, simpler)


def canonical_names(program: Program) -> Program:
    """Renames tensors p0.., b0.., l0.., layers n0.. (batch norms) and d0.. (dropouts), and
    snapshots s0.., module clones m0.., checkpoints c0.., in order."""
    mapping: dict[str, str] = {}
    counters: dict[str, int] = {}

    def fresh(prefix: str) -> str:
        n = counters.get(prefix, 0)
        counters[prefix] = n + 1
        return f"{prefix}{n}"

    prefix_of = {"param": "p", "buffer": "b", "lazy": "l"}
    for t in program.tensors:
        mapping[t.name] = fresh(prefix_of[t.kind])
    layers = []
    for layer in program.layers:  # batch norms n0.., dropouts d0..; their stats with them
        layers.append(replace(layer, name=fresh("n" if layer.kind == "batch_norm" else "d")))
        mapping[layer.name] = layers[-1].name
        for (old, _, _), (new, _, _) in zip(layer.states(), layers[-1].states()):
            mapping[old] = new
    params = program.model_names
    renamed = []
    for op in program.ops:
        spec = ops.spec(op)
        op = dict(op)
        for f in spec.of_kind("name"):
            op[f.name] = mapping[op[f.name]]
        for f in spec.of_kind("new"):
            mapping[op[f.name]] = op[f.name] = fresh("s")
        for f in (*spec.of_kind("checkpoint"), *spec.of_kind("layer")):
            op[f.name] = mapping[op[f.name]]
        for f in spec.of_kind("prefix"):
            old = op[f.name]
            op[f.name] = mapping[old] = fresh("c" if f.checkpoint else "m")
            for p in params:
                mapping[f"{old}.{p}"] = f"{op[f.name]}.{mapping[p]}"
        renamed.append(op)
    tensors = tuple(replace(t, name=mapping[t.name]) for t in program.tensors)
    return Program(
        tensors,
        check_program(tensors, renamed, layers=tuple(layers), dtype=program.dtype),
        program.title,
        program.meta,
        tuple(layers),
        dtype=program.dtype,
    )


def _snapshot_sources(program: Program) -> dict[str, str]:
    params = program.model_names
    return {b.name: b.source for op in program.ops for b in ops.bindings(op, params)}


def _reference_depth(program: Program) -> int:
    """How many snapshot links the ops' references go through, summed."""
    source = _snapshot_sources(program)

    def depth(name: str) -> int:
        n = 0
        while name in source:
            name, n = source[name], n + 1
        return n

    return sum(depth(name) for op in program.ops for name in ops.reads(op))


def cost(program: Program) -> tuple:
    """What minimization decreases, most important first. Every accepted step lowers it, so the
    fixpoint loop terminates."""
    return (
        len(program.ops),
        len(program.tensors) + len(program.layers),
        sum(t.numel for t in program.tensors),
        sum(
            ops.value_cost(t.value or ())
            + (0 if t.grad is None else 1 + ops.value_cost(t.grad))
            + (t.kind == "lazy" and t.init in ops.DRAWN_INITS)
            for t in program.tensors
        ),
        sum(ops.op_cost(op) for op in program.ops) + _reference_depth(program),
    )


def _op_removals(program: Program) -> Iterator[Program]:
    n = len(program.ops)
    size = n // 2
    while size >= 2:
        for start in range(0, n, size):
            p = without_ops(program, set(range(start, min(n, start + size))))
            if p is not None:
                yield p
        size //= 2
    for i in reversed(range(n)):
        p = without_ops(program, {i})
        if p is not None:
            yield p


def minimize(program: Program, shows: Predicate, *, time_limit_s: float = 60.0, batch_size: int = 16) -> MinimizeResult:
    """Shrinks ``program`` while ``shows`` holds. ``shows([program])`` must be true."""
    start = time.monotonic()
    runs = 0
    current = program
    complete = True

    def first_that_shows(candidates: Iterable[Program]) -> Program | None:
        nonlocal runs
        current_cost = cost(current)
        batch: list[Program] = []
        seen: set[str] = set()
        for cand in candidates:
            if time.monotonic() - start > time_limit_s:
                raise _OutOfTime()
            key = cand.key()
            if key in seen or cost(cand) >= current_cost:
                continue
            seen.add(key)
            batch.append(cand)
            if len(batch) >= batch_size:
                runs += len(batch)
                for c, ok in zip(batch, shows(batch)):
                    if ok:
                        return c
                batch = []
        if batch:
            runs += len(batch)
            for c, ok in zip(batch, shows(batch)):
                if ok:
                    return c
        return None

    try:
        changed = True
        while changed:
            changed = False
            for generate in (_op_removals, _tensor_removals, simplifications):
                while True:
                    better = first_that_shows(generate(current))
                    if better is None:
                        break
                    current, changed = better, True
        renamed = canonical_names(current)
        if renamed.key() != current.key():
            runs += 1
            if shows([renamed])[0]:
                current = renamed
    except _OutOfTime:
        complete = False
    return MinimizeResult(current, len(program.ops), len(current.ops), runs, time.monotonic() - start, complete)


def _tensor_removals(program: Program) -> Iterator[Program]:
    for t in reversed(program.tensors):
        p = without_tensor(program, t.name)
        if p is not None:
            yield p
    for layer in reversed(program.layers):
        p = without_layer(program, layer.name)
        if p is not None:
            yield p


class _OutOfTime(Exception):
    pass


def is_one_minimal(program: Program, shows: Predicate) -> list[str]:
    """Every single-op and single-tensor removal that still shows the signature (empty when the
    program is 1-minimal with respect to removals)."""
    cands: list[tuple[str, Program]] = []
    for i in range(len(program.ops)):
        p = without_ops(program, {i})
        if p is not None:
            cands.append((f"op {i}", p))
    for t in program.tensors:
        p = without_tensor(program, t.name)
        if p is not None:
            cands.append((f"tensor {t.name}", p))
    for layer in program.layers:
        p = without_layer(program, layer.name)
        if p is not None:
            cands.append((f"layer {layer.name}", p))
    if not cands:
        return []
    oks = shows([p for _, p in cands])
    return [label for (label, _), ok in zip(cands, oks) if ok]
