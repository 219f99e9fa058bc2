"""Checking one op of a case against the op table (``harness.case.ops``) and the names bound so
far, and making its canonical form. ``harness.case.ir`` walks a program's ops through
``check_op``; every refusal is ``err(where, message)``, one line naming the op and the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from harness.case import ops
from harness.case import values as cv
from harness.case.layers import input_problem
from harness.case.values import is_identifier


class Scope:
    """Names bound while walking the ops: name -> (shape, role) with role in TENSOR_KINDS,
    'running' (a layer's running statistic) or 'snapshot'. ``tensors`` and ``layers`` are the
    program's declarations (``ir.TensorDecl``, ``layers.LayerDecl``)."""

    def __init__(self, tensors: Sequence[Any], layers: Sequence[Any] = ()):
        self.bound: dict[str, tuple[tuple[int, ...], str]] = {t.name: (t.shape, t.kind) for t in tensors}
        self.bound.update({n: (shape, "running") for layer in layers for n, shape, _ in layer.states()})
        self.layers = {layer.name: layer for layer in layers}
        self.params = ops.model_names(tensors, layers)
        self.checkpoints: set[str] = set()  # taken by a ``save`` so far


def check_op(raw: Mapping[str, Any], i: int, scope: Scope, err) -> ops.Op:
    """Validates one op against the op table and the names bound so far and returns it parsed, in
    canonical form (every field of the table, in its order); updates ``scope`` with the names it
    binds."""
    where = f"ops[{i}]"
    if not isinstance(raw, Mapping):
        raise err(where, "expected a table")
    kind = raw.get("op")
    if not isinstance(kind, str) or kind not in ops.OPS:  # a list is unhashable: test str first
        raise err(f"{where}.op", f"unknown op {cv.brief(kind)} (known: {', '.join(ops.OP_KINDS)})")
    spec = ops.OPS[kind]
    known = {f.name for f in spec.fields}
    for key in raw:
        if key != "op" and key not in known:
            raise err(f"{where}.{key}", f"unknown field for op {kind!r}")
    required = [f.name for f in spec.fields if f.required]
    for key in required:
        if key not in raw:
            raise err(f"{where}.{key}", f"missing (op {kind!r} needs {', '.join(required)})")
    op: dict[str, Any] = {"op": kind}
    for f in spec.fields:
        op[f.name] = raw[f.name] if f.name in raw else None if isinstance(f.default, ops.Derived) else f.default
    for f in spec.fields:  # derived defaults need their field checked first: a second pass
        if isinstance(f.default, ops.Derived) and op[f.name] is None:
            op[f.name] = f.default.compute(op)
    check = _FieldCheck(op, where, scope, err)
    # Reads before binds: a snapshot of itself is "no tensor named", never "already bound".
    for f in sorted(spec.fields, key=lambda f: f.kind in ("new", "prefix")):
        op[f.name] = getattr(check, f.kind)(f)
    grown = ops.grown(op)
    if grown is not None:
        scope.bound[grown] = (ops.grown_shape(op, check.shapes(ops.reads(op))), scope.bound[grown][1])
    return ops.Op(op)


class _FieldCheck:
    """One method per field kind of the op table: checks ``op[field]`` and returns its canonical
    value. ``values`` and ``row`` fields are checked against the op's ``name`` field."""

    def __init__(self, op: dict[str, Any], where: str, scope: Scope, err):
        self.op, self.where, self.scope, self.err = op, where, scope, err
        self.kind = op["op"]

    def _fail(self, f: ops.Field, message: str) -> Exception:
        return self.err(f"{self.where}.{f.name}", message)

    def _target_shape(self) -> tuple[int, ...]:
        target = ops.OPS[self.kind].of_kind("name")[0]
        return self.scope.bound[self.op[target.name]][0]

    def name(self, f: ops.Field) -> str:
        name = self.op[f.name]
        if not isinstance(name, str) or name not in self.scope.bound:
            raise self._fail(f, f"no tensor named {cv.brief(name)} at this point")
        shape, role = self.scope.bound[name]
        if f.roles and role not in f.roles:
            raise self._fail(f, f"{self.kind} takes a {f.roles[0]}, {name!r} is a {role}")
        if f.extends:
            target = self._target_shape()
            rows = ops.appended_rows(target, shape)
            if rows is None:
                raise self._fail(
                    f, f"shape {list(shape)} is neither a row of the target's {list(target)} nor rows of it"
                )
            if target[0] + rows > ops.CACHE_ROWS:
                raise self._fail(
                    f, f"appending {rows} rows to the target's {target[0]} makes more than {ops.CACHE_ROWS}"
                )
        if f.broadcasts and not ops.broadcasts_to(shape, self._target_shape()):
            target = self._target_shape()
            raise self._fail(f, f"shape {list(shape)} is neither the target's {list(target)} nor a row of it")
        if f.feeds:
            problem = input_problem(self.scope.layers[self.op["layer"]], shape)
            if problem is not None:
                raise self._fail(f, problem)
        if f.fits:
            row = self._row_of(f.name)
            if row is not None and self.row(row) is not None:
                shape = shape[1:]  # the source's row is what is copied
            if shape != self._written_shape():
                raise self._fail(
                    f, f"shape {list(shape)} does not fit the target's {list(self._written_shape()) or 'scalar'}"
                )
        return name

    def _row_of(self, name_field: str | None) -> ops.Field | None:
        """The op's ``row`` field indexing ``name_field`` (None: the written name)."""
        return next((g for g in ops.OPS[self.kind].of_kind("row") if g.of == name_field), None)

    def _new(self, f: ops.Field, name: Any) -> str:
        if not is_identifier(name):
            raise self._fail(f, f"{cv.brief(name)} is not a valid name (letters, digits, '_')")
        if name in self.scope.bound:
            raise self._fail(f, f"name {name!r} is already bound")
        if name in self.scope.checkpoints:
            raise self._fail(f, f"name {name!r} already names a checkpoint")
        if name in self.scope.layers:
            raise self._fail(f, f"name {name!r} names a layer")
        return name

    def new(self, f: ops.Field) -> str:
        name = self._new(f, self.op[f.name])
        for b in ops.bindings(self.op, self.scope.params):
            self.scope.bound[b.name] = (ops.bound_shape(b, self.shapes((b.source,))), "snapshot")
        return name

    def prefix(self, f: ops.Field) -> str:
        prefix = self._new(f, self.op[f.name])
        for b in ops.bindings(self.op, self.scope.params):
            if b.name in self.scope.bound:
                raise self._fail(f, f"name {b.name!r} is already bound")
            self.scope.bound[b.name] = (self.scope.bound[b.source][0], "snapshot")
        if f.checkpoint:
            self.scope.checkpoints.add(prefix)
        return prefix

    def checkpoint(self, f: ops.Field) -> str:
        name = self.op[f.name]
        if not isinstance(name, str) or name not in self.scope.checkpoints:
            taken = ", ".join(sorted(self.scope.checkpoints)) or "none"
            raise self._fail(f, f"no checkpoint named {cv.brief(name)} at this point (taken: {taken})")
        return name

    def layer(self, f: ops.Field) -> str:
        name = self.op[f.name]
        if not isinstance(name, str) or name not in self.scope.layers:
            declared = ", ".join(self.scope.layers) or "none"
            raise self._fail(f, f"no layer named {cv.brief(name)} (declared: {declared})")
        return name

    def flag(self, f: ops.Field) -> bool:
        value = self.op[f.name]
        if not isinstance(value, bool):
            raise self._fail(f, f"expected true or false, got {cv.brief(value)}")
        return value

    def shapes(self, names: Sequence[str]) -> dict[str, tuple[int, ...]]:
        """The shapes of ``names`` (those bound): only the op's own, as a copy of every bound
        name's per op made checking a program quadratic in its length."""
        bound = self.scope.bound
        return {name: bound[name][0] for name in names if name in bound}

    def number(self, f: ops.Field) -> float:
        x = cv.f32(self.op[f.name], f"{self.where}.{f.name}", self.err)
        if f.positive and x <= 0:
            raise self._fail(f, f"must be positive, got {x!r}")
        return x

    def choice(self, f: ops.Field) -> str:
        value = self.op[f.name]
        if not isinstance(value, str) or value not in f.choices:
            raise self._fail(f, f"unknown {f.name} {cv.brief(value)} (known: {', '.join(f.choices)})")
        method = ops.snapshot_method(self.op) if f.choices is ops.METHODS else None
        if method is not None:
            source = ops.OPS[self.kind].of_kind("name")[0]
            shape, role = self.scope.bound[self.op[source.name]]
            refusal = method.refusal(shape)
            if refusal is not None:
                raise self._fail(f, f"{refusal}, not one of shape {list(shape)}")
            if role not in method.sources:
                raise self._fail(f, f"{value} reads a {' or '.join(method.sources)}, not a {role}")
        return value

    def row(self, f: ops.Field) -> int | None:
        shape = self._target_shape() if f.of is None else self.scope.bound[self.op[f.of]][0]
        index, rows = self.op[f.name], shape[0]
        if index is not None and (not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < rows):
            raise self._fail(f, f"must be an integer in 0..{rows - 1}, got {cv.brief(index)}")
        return index

    def _written_shape(self) -> tuple[int, ...]:
        """The shape of what the op writes: the target's row (its row field set) or all of it."""
        shape = self._target_shape()
        row = self._row_of(None)
        return shape[1:] if row is not None and self.row(row) is not None else shape

    def values(self, f: ops.Field) -> list[float]:
        shape = self._written_shape()
        got, flat = cv.flatten(self.op[f.name], f"{self.where}.{f.name}", self.err)
        # Canonical form is flat (row-major), so a flat list of the right length is accepted too.
        flat_ok = len(got) == 1 and got[0] == math.prod(shape)
        if got != shape and not flat_ok:
            raise self._fail(f, f"shape {list(got)} does not match the target's {list(shape) or 'scalar'}")
        return list(flat)

    def betas(self, f: ops.Field) -> list[float]:
        betas = self.op[f.name]
        if not isinstance(betas, list) or len(betas) != 2:
            raise self._fail(f, "expected two numbers in [0, 1)")
        out = [cv.f32(b, f"{self.where}.{f.name}[{j}]", self.err) for j, b in enumerate(betas)]
        if not all(0 <= b < 1 for b in out):
            raise self._fail(f, f"expected two numbers in [0, 1), got {out}")
        return out
