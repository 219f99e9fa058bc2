"""The program IR: what a case is, how it is read from and written to a TOML case file, and the
wire form sent to targets.

A program is a list of named tensor declarations and a flat list of ops. Each op is an
``ops.Op``: parsed against the op table, read by field name (``op.target``), and a read-only dict
in *canonical form*: every field present, defaults filled in, values flattened row-major. That one
form is what the generator produces, what the minimizer edits (into a changed copy), what targets
receive (``Program.to_wire``) and what ``dump_case`` writes back to TOML, so nothing is converted
twice.

Which ops exist and what their fields are is the op table's (``harness.case.ops``); one op is
checked in ``harness.case.op_checks``. Validation happens once, here (reading files and checking
numbers in ``harness.case.values``), for case files and for programs built in code alike: a case
that loads is well-formed for every target, so probes only ever report ``unsupported`` or
``error`` for framework reasons, never for a malformed case. Every refusal is a ``CaseError``, one line naming the file and the field.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from harness.case import ops
from harness.case import values as cv
from harness.case.layers import LayerDecl, check_decls, state_names
from harness.case.op_checks import Scope, check_op
from harness.case.ops import LAZY_INITS, TENSOR_KINDS
from harness.case.values import is_identifier
from harness.errors import InputError

#: Largest tensor a case may declare: aliasing needs a few elements, and a huge lazy shape would
#: make a probe's allocation abort the process rather than fail one op.
MAX_NUMEL = 4096


class CaseError(InputError, ValueError):
    """A malformed case. ``str()`` is the one-line message users see: file, location, field."""

    def __init__(self, path: str | Path | None, where: str, message: str):
        self.path = str(path) if path is not None else "<case>"
        self.where = where
        self.message = message
        # Paths, names and messages quote user input, which may hold newlines: escape them, so
        # the message the command line prints is always one line.
        text = f"{self.path}: {where}: {message}" if where else f"{self.path}: {message}"
        super().__init__(cv.one_line(text))


@dataclass(frozen=True)
class TensorDecl:
    """One initial tensor. ``value`` and ``grad`` are flat row-major tuples of floats."""

    name: str
    kind: str
    shape: tuple[int, ...]
    value: tuple[float, ...] | None = None
    grad: tuple[float, ...] | None = None
    init: str | None = None
    fill: float | None = None
    seed: int | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def trainable(self) -> bool:
        return self.kind in ("param", "lazy")

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "shape": list(self.shape)}
        if self.value is not None:
            out["value"] = list(self.value)
        if self.grad is not None:
            out["grad"] = list(self.grad)
        if self.kind == "lazy":
            out["init"] = self.init
            out["fill"] = self.fill
            out["seed"] = self.seed
        return out


@dataclass(frozen=True)
class Program:
    """A case: tensors, ops in canonical form, free-text metadata that never affects runs, the
    model's layers (``harness.case.layers``) and, for a case of the metamorphic oracle, the op
    indices of its inert group (``harness.case.inert``): the case is also run without them, and
    each target compared with itself."""

    tensors: tuple[TensorDecl, ...]
    ops: tuple[ops.Op, ...]
    title: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)
    layers: tuple[LayerDecl, ...] = ()
    inert: tuple[int, ...] = ()
    #: The dtype of every tensor and layer state (``ops.DTYPES``).
    dtype: str = "f32"

    def __post_init__(self) -> None:
        # Every op a program holds is an ``ops.Op``, whoever built the program (a case file, the
        # generator, the minimizer, a test): readers name fields, never keys.
        if not all(type(o) is ops.Op for o in self.ops):
            object.__setattr__(self, "ops", tuple(ops.as_op(o) for o in self.ops))
        elif not isinstance(self.ops, tuple):
            object.__setattr__(self, "ops", tuple(self.ops))

    def to_wire(self) -> dict[str, Any]:
        out = {"tensors": [t.to_wire() for t in self.tensors], "ops": [dict(o) for o in self.ops]}
        if self.layers:  # absent when none: the wire form of a program without layers is unchanged
            out["layers"] = [layer.to_wire() for layer in self.layers]
        if self.dtype != "f32":  # likewise
            out["dtype"] = self.dtype
        return out

    @property
    def model_names(self) -> list[str]:
        """What the model holds by name (``ops.model_names``): what a prefix binds."""
        return ops.model_names(self.tensors, self.layers)

    def with_ops(self, ops: Iterable[Mapping[str, Any]]) -> Program:
        """The program with other ops (and no ``inert`` group: its indices were of the old ops)."""
        return replace(self, ops=tuple(ops), inert=())

    def tensor(self, name: str) -> TensorDecl:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    def key(self) -> str:
        """A stable text key: equal programs (ignoring metadata) have equal keys.

        Computed once per program: a campaign asks for it three times per program drawn (its
        choices, ``Engine.unseen``, ``Engine.forget``), at about 40 us each. A program is never
        changed after it is made (``with_ops`` and ``replace`` make a new one, without the key)."""
        key = self.__dict__.get("_key")
        if key is None:
            import json

            wire = self.to_wire()
            if self.inert:  # not sent to a target: the targets run the program, the oracle pairs it
                wire["inert"] = list(self.inert)
            key = json.dumps(wire, sort_keys=True, separators=(",", ":"))
            object.__setattr__(self, "_key", key)  # frozen: a cache, not a field
        return key


# ------------------------------------------------------------------------------------------------
# Validation and canonicalisation. Numbers and nested values are checked in ``case_values``; this
# part knows the case's structure: which fields exist, which names are bound, which shapes fit.


def shape_ok(shape: Any) -> bool:
    return (
        isinstance(shape, (list, tuple))
        and 1 <= len(shape) <= cv.MAX_RANK
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape)
    )


def _check_decl(t: Any, seen: set[str], err) -> None:
    """A ``TensorDecl`` built in code (generator, minimizer, corpus): the checks
    ``_check_tensor`` gives a case file's table, on the flat form."""
    if not isinstance(t, TensorDecl):
        raise err("tensors", f"expected TensorDecl, got {cv.brief(t)}")
    where = f"tensors.{t.name}"
    if not is_identifier(t.name):
        raise err(where, "tensor names are identifiers (letters, digits, '_')")
    if t.name in seen:
        raise err(where, "declared twice")
    seen.add(t.name)
    if t.kind not in TENSOR_KINDS:
        raise err(f"{where}.kind", f"must be one of {', '.join(TENSOR_KINDS)}, got {cv.brief(t.kind)}")
    if not isinstance(t.shape, tuple) or not shape_ok(t.shape):
        raise err(f"{where}.shape", f"expected a tuple of 1 to 3 positive ints, got {cv.brief(t.shape)}")
    if t.numel > MAX_NUMEL:
        raise err(f"{where}.shape", f"at most {MAX_NUMEL} elements, got {t.numel}")
    if t.kind == "lazy":
        if t.value is not None:
            raise err(f"{where}.value", "lazy tensors have no value: use init and fill")
        if t.init not in LAZY_INITS:
            raise err(f"{where}.init", f"must be one of {', '.join(LAZY_INITS)}, got {cv.brief(t.init)}")
        if t.init == "const" or t.fill is not None:
            cv.f32(t.fill, f"{where}.fill", err)
        if t.seed is not None:
            if t.init == "program_rng":
                raise err(f"{where}.seed", 'init = "program_rng" draws from the program\'s one generator: no seed')
            cv.seed(t.seed, f"{where}.seed", err)
    else:
        cv.flat_values(t.value, t.numel, f"{where}.value", err)
    if t.grad is not None:
        if t.kind == "buffer":
            raise err(f"{where}.grad", "buffers are not trained: grad is for params")
        cv.flat_values(t.grad, t.numel, f"{where}.grad", err)


def check_ops(
    tensors: Sequence[TensorDecl], ops: Any, err, layers: Sequence[LayerDecl] = ()
) -> tuple[dict[str, Any], ...]:
    if not isinstance(ops, (list, tuple)):
        raise err("ops", "expected an array of [[ops]] tables")
    scope = Scope(tensors, layers)
    return tuple(cv.guarded(f"ops[{i}]", err, check_op, raw, i, scope, err) for i, raw in enumerate(ops))


def check_program(
    tensors: Sequence[TensorDecl],
    ops: Sequence[Mapping[str, Any]],
    path=None,
    layers: Sequence[LayerDecl] = (),
    dtype: str = "f32",
) -> tuple[dict[str, Any], ...]:
    """Validates a program built in code (the generator, the minimizer, a corpus entry read
    back): its tensor and layer declarations, with the checks a case file's get, and its ops (raw
    or canonical). Returns the ops canonical. Raises ``CaseError``, and only that."""

    def err(where: str, message: str) -> CaseError:
        return CaseError(path, where, message)

    if not isinstance(tensors, (tuple, list)) or not tensors:
        raise err("tensors", f"expected a non-empty sequence of TensorDecl, got {cv.brief(tensors)}")
    seen: set[str] = set()
    for t in tensors:
        cv.guarded(f"tensors.{getattr(t, 'name', '?')}", err, _check_decl, t, seen, err)
    layers = cv.guarded("layers", err, check_decls, layers, seen, err)
    check_dtype_field(dtype, err)
    checked = check_ops(tensors, ops, err, layers)
    check_exact(tensors, checked, dtype, err)
    return checked


def check_dtype_field(dtype: Any, err) -> None:
    if dtype not in ops.DTYPES:
        raise err("dtype", f"must be one of {', '.join(ops.DTYPES)}, got {cv.brief(dtype)}")


def check_exact(tensors: Sequence[TensorDecl], checked_ops: Sequence[Mapping[str, Any]], dtype: str, err) -> None:
    """Refuses a tensor's value or grad, or an op's ``values`` field, that ``dtype`` does not
    hold exactly (``case_values.exact_in``)."""
    if dtype == "f32":
        return
    for t in tensors:
        for key in ("value", "grad"):
            if getattr(t, key) is not None:
                cv.exact_in(dtype, getattr(t, key), f"tensors.{t.name}.{key}", err)
    for i, op in enumerate(checked_ops):
        for f in ops.spec(op).of_kind("values"):
            cv.exact_in(dtype, op[f.name], f"ops[{i}].{f.name}", err)


# ------------------------------------------------------------------------------------------------
# Writing cases back (minimized findings, corpus exports).


def names_bound(program: Program) -> list[str]:
    """Every name the program binds, in binding order (tensors, layer states, then snapshots)."""

    params = program.model_names
    return (
        [t.name for t in program.tensors]
        + state_names(program.layers)
        + [b.name for op in program.ops for b in ops.bindings(op, params)]
    )


def shapes_before(program: Program, at: int) -> dict[str, tuple[int, ...]]:
    """Every name bound before op ``at`` (``at`` may be ``len(program.ops)``) and its shape."""
    last = {t.name: t.shape for t in program.tensors} | {
        n: shape for layer in program.layers for n, shape, _ in layer.states()
    }
    for i, _, shapes in ops.walk(program.tensors, program.ops, program.layers):
        if i == at:
            return dict(shapes)
        last = shapes  # ``walk`` updates this dict after each yield: at the end, after the last op
    return dict(last)


_T = TypeVar("_T")

#: How many programs a ``per_program`` cache holds before it starts afresh.
PER_PROGRAM_LIMIT = 4096


def per_program(fn: Callable[[Program], _T]) -> Callable[[Program], _T]:
    """Memoizes a fact the program alone determines (its snapshot relations, say), keyed by the
    program object: the oracle asks the same of one program for every trace and every pair of
    targets. ``fn`` must return an immutable value. The cache holds the program (so its id is not
    reused while cached) and starts afresh after ``PER_PROGRAM_LIMIT`` programs."""
    cache: dict[int, tuple[Program, Any]] = {}

    @functools.wraps(fn)
    def memoized(program: Program) -> _T:
        hit = cache.get(id(program))
        if hit is not None and hit[0] is program:
            return hit[1]
        value = fn(program)
        if len(cache) >= PER_PROGRAM_LIMIT:
            cache.clear()
        cache[id(program)] = (program, value)
        return value

    return memoized
