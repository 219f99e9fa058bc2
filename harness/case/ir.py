"""The program IR: what a case is, how it is read from and written to a TOML case file, and the
wire form sent to targets.

A program is a list of named tensor declarations and a flat list of ops. Ops are kept as plain
dicts in *canonical form*: every field present, defaults filled in, values flattened row-major.
That one form is what the generator produces, what the minimizer edits, what targets receive
(``Program.to_wire``) and what ``dump_case`` writes back to TOML, so nothing is converted twice.

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

import tomli_w

from harness.case import ops
from harness.case import values as cv
from harness.case.layers import LayerDecl, check_decls, check_layer
from harness.case.op_checks import Scope, check_op, is_identifier
from harness.case.ops import LAZY_INITS, TENSOR_KINDS
from harness.errors import InputError

FORMAT = "aliasfuzz-case/1"

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
    ops: tuple[Mapping[str, Any], ...]
    title: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)
    layers: tuple[LayerDecl, ...] = ()
    inert: tuple[int, ...] = ()
    #: The dtype of every tensor and layer state (``ops.DTYPES``).
    dtype: str = "f32"

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


def _nest(flat: Sequence[float], shape: Sequence[int]) -> Any:
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return list(flat)
    step = math.prod(shape[1:])
    return [_nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def _shape_ok(shape: Any) -> bool:
    return (
        isinstance(shape, (list, tuple))
        and 1 <= len(shape) <= cv.MAX_RANK
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape)
    )


def _check_tensor(name: str, raw: Any, err) -> TensorDecl:
    """One ``[tensors]`` entry of a case file -> its declaration."""
    where = f"tensors.{name}"
    if not is_identifier(name):
        raise err(where, "tensor names are identifiers (letters, digits, '_')")
    if not isinstance(raw, dict):
        raise err(where, 'expected a table like { kind = "param", value = [...] }')
    allowed = {"kind", "value", "grad", "shape", "init", "fill", "seed"}
    for key in raw:
        if key not in allowed:
            raise err(f"{where}.{key}", f"unknown field (allowed: {', '.join(sorted(allowed))})")
    kind = raw.get("kind")
    if kind not in TENSOR_KINDS:
        raise err(f"{where}.kind", f"must be one of {', '.join(TENSOR_KINDS)}, got {cv.brief(kind)}")
    if kind == "lazy":
        shape_raw = raw.get("shape")
        if not _shape_ok(shape_raw):
            raise err(f"{where}.shape", "a lazy tensor needs shape = [d1, ...] with 1 to 3 positive ints")
        init = raw.get("init")
        if init not in LAZY_INITS:
            raise err(f"{where}.init", f"must be one of {', '.join(LAZY_INITS)}, got {cv.brief(init)}")
        if init == "const" and not cv.is_number(raw.get("fill")):
            raise err(f"{where}.fill", 'init = "const" needs a number fill')
        fill = cv.f32(raw["fill"], f"{where}.fill", err) if init == "const" else None
        # A const tensor does not use its seed: absent stays None (as the generator makes it),
        # so that writing a case and reading it back gives the same program (and key).
        default_seed = 0 if init == "uniform" else None
        if "seed" in raw and init == "program_rng":
            raise err(f"{where}.seed", 'init = "program_rng" draws from the program\'s one generator: no seed')
        seed = cv.seed(raw["seed"], f"{where}.seed", err) if "seed" in raw else default_seed
        if "value" in raw:
            raise err(f"{where}.value", "lazy tensors have no value: use init and fill")
        shape = tuple(shape_raw)
        if math.prod(shape) > MAX_NUMEL:
            raise err(f"{where}.shape", f"at most {MAX_NUMEL} elements, got {math.prod(shape)}")
        value = None
    else:
        if "value" not in raw:
            raise err(f"{where}.value", "missing (nested list of numbers)")
        shape, value = cv.flatten(raw["value"], f"{where}.value", err)
        if not 1 <= len(shape) <= cv.MAX_RANK:
            raise err(f"{where}.value", f"rank must be 1 to {cv.MAX_RANK}, got {len(shape)}")
        if math.prod(shape) > MAX_NUMEL:
            raise err(f"{where}.value", f"at most {MAX_NUMEL} elements, got {math.prod(shape)}")
        if "shape" in raw and (not _shape_ok(raw["shape"]) or tuple(raw["shape"]) != shape):
            raise err(f"{where}.shape", f"says {cv.brief(raw['shape'])} but value has shape {list(shape)}")
        for key in ("init", "fill", "seed"):
            if key in raw:
                raise err(f"{where}.{key}", "only lazy tensors take this field")
        init, fill, seed = None, None, None
    grad = None
    if "grad" in raw:
        if kind == "buffer":
            raise err(f"{where}.grad", "buffers are not trained: grad is for params")
        gshape, grad = cv.flatten(raw["grad"], f"{where}.grad", err)
        if gshape != shape:
            raise err(f"{where}.grad", f"shape {list(gshape)} differs from the tensor's {list(shape)}")
    return TensorDecl(name, kind, shape, value, grad, init, fill, seed)


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
    if not isinstance(t.shape, tuple) or not _shape_ok(t.shape):
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


def _check_ops(
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
    _check_dtype_field(dtype, err)
    checked = _check_ops(tensors, ops, err, layers)
    _check_exact(tensors, checked, dtype, err)
    return checked


def _check_dtype_field(dtype: Any, err) -> None:
    if dtype not in ops.DTYPES:
        raise err("dtype", f"must be one of {', '.join(ops.DTYPES)}, got {cv.brief(dtype)}")


def _check_exact(tensors: Sequence[TensorDecl], checked_ops: Sequence[Mapping[str, Any]], dtype: str, err) -> None:
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


def parse_case(doc: Mapping[str, Any], path: str | Path | None = None) -> Program:
    """Validates a case document (a TOML file's tables) and returns its program. Raises
    ``CaseError``, and only that: a known field's check names the field; anything else that goes
    wrong names the tensor or op being read (or just the file)."""

    def err(where: str, message: str) -> CaseError:
        return CaseError(path, where, message)

    return cv.guarded("", err, _parse_case, doc, err)


def _parse_case(doc: Any, err) -> Program:
    if not isinstance(doc, Mapping):
        raise err("", f"expected a table of format, title, tensors, ops, meta, got {cv.brief(doc)}")
    fmt = doc.get("format")
    if fmt != FORMAT:
        raise err("format", f"must be {FORMAT!r}, got {cv.brief(fmt)}")
    for key in doc:
        if key not in ("format", "title", "dtype", "tensors", "layers", "ops", "inert", "meta"):
            raise err(key, "unknown top-level field (allowed: format, title, dtype, tensors, layers, ops, inert, meta)")
    dtype = doc.get("dtype", "f32")
    _check_dtype_field(dtype, err)
    raw_tensors = doc.get("tensors")
    if not isinstance(raw_tensors, dict) or not raw_tensors:
        raise err("tensors", "missing or empty [tensors] table")
    tensors = tuple(
        cv.guarded(f"tensors.{name}", err, _check_tensor, name, raw, err) for name, raw in raw_tensors.items()
    )
    raw_layers = doc.get("layers", {})
    if not isinstance(raw_layers, dict):
        raise err("layers", "expected a [layers] table")
    taken = {t.name for t in tensors}
    layers = tuple(
        cv.guarded(f"layers.{name}", err, check_layer, name, raw, taken, err) for name, raw in raw_layers.items()
    )
    ops = _check_ops(tensors, doc.get("ops", []), err, layers)
    _check_exact(tensors, ops, dtype, err)
    title = doc.get("title", "")
    if not isinstance(title, str):
        raise err("title", "expected a string")
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise err("meta", "expected a table")
    cv.shallow(meta, "meta", err)
    program = Program(tensors, ops, title, meta, layers, dtype=dtype)
    if "inert" in doc:
        program = replace(program, inert=_check_inert_field(program, doc["inert"], err))
    return program


def _check_inert_field(program: Program, raw: Any, err) -> tuple[int, ...]:
    from harness.case.inert import check_inert

    if not isinstance(raw, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in raw):
        raise err("inert", f"expected a list of op indices, got {cv.brief(raw)}")
    try:
        return check_inert(program, raw).ops
    except ValueError as e:
        raise err("inert", str(e)) from None


def load_case(path: str | Path) -> Program:
    """Reads and validates a TOML case file (see ``case_values.read_toml`` for what is refused before
    parsing). Raises ``CaseError`` with a one-line message, and only that."""
    return parse_case(cv.read_toml(path, lambda message: CaseError(path, "", message)), path)


# ------------------------------------------------------------------------------------------------
# Writing cases back (minimized findings, corpus exports).


def _canonical_defaults(op: Mapping[str, Any]) -> dict[str, Any]:
    """The optional fields of ``op`` with the values loading would fill in."""
    return {k: v for k, v in ops.defaults(op["op"], op).items() if v is not None}


def _op_document(op: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    """One op as a case file writes it: defaults left out, ``values`` nested like its target."""
    out = {"op": op["op"]}
    defaults = _canonical_defaults(op)
    spec = ops.spec(op)
    for f in spec.fields:
        value = op[f.name]
        if f.kind == "row" and value is None:
            continue  # TOML has no null: an absent index means "whole tensor"
        if f.name in defaults and defaults[f.name] == value:
            continue  # keep written cases short: defaults are filled in again on load
        if f.kind == "values":
            shape = shapes[op[spec.of_kind("name")[0].name]]
            rows = spec.of_kind("row")
            value = _nest(value, shape if not rows or op[rows[0].name] is None else shape[1:])
        out[f.name] = value
    return out


def case_document(program: Program) -> dict[str, Any]:
    doc: dict[str, Any] = {"format": FORMAT}
    if program.title:
        doc["title"] = program.title
    if program.dtype != "f32":
        doc["dtype"] = program.dtype
    tensors: dict[str, Any] = {}
    for t in program.tensors:
        entry: dict[str, Any] = {"kind": t.kind}
        if t.kind == "lazy":
            entry["shape"] = list(t.shape)
            entry["init"] = t.init
            if t.init == "const":
                entry["fill"] = t.fill
            if t.seed is not None:
                entry["seed"] = t.seed
        else:
            entry["value"] = _nest(t.value, t.shape)
        if t.grad is not None:
            entry["grad"] = _nest(t.grad, t.shape)
        tensors[t.name] = entry
    doc["tensors"] = tensors
    if program.layers:
        doc["layers"] = {layer.name: layer.document() for layer in program.layers}
    doc["ops"] = [_op_document(op, shapes) for _, op, shapes in ops.walk(program.tensors, program.ops, program.layers)]
    if program.inert:
        doc["inert"] = list(program.inert)
    if program.meta:
        doc["meta"] = dict(program.meta)
    return doc


def dump_case(program: Program) -> str:
    """The TOML text of a case; ``parse_case(tomllib.loads(dump_case(p)))`` equals ``p``."""
    return tomli_w.dumps(case_document(program))


def write_case(program: Program, path: str | Path) -> Path:
    """Writes a case file atomically (a crash never leaves half a case behind)."""
    from harness.files import atomic_write

    return atomic_write(path, dump_case(program))


def names_bound(program: Program) -> list[str]:
    """Every name the program binds, in binding order (tensors, layer states, then snapshots)."""
    from harness.case.layers import state_names

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
