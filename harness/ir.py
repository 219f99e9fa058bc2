"""The program IR: what a case is, how it is read from and written to a TOML case file, and the
wire form sent to targets.

A program is a list of named tensor declarations and a flat list of ops. Ops are kept as plain
dicts in *canonical form*: every field present, defaults filled in, values flattened row-major.
That one form is what the generator produces, what the minimizer edits, what targets receive
(``Program.to_wire``) and what ``dump_case`` writes back to TOML, so nothing is converted twice.

Validation happens once, here: a case that loads is well-formed for every target, so probes only
ever report ``unsupported`` or ``error`` for framework reasons, never for a malformed case.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the project runs on 3.11, tomli keeps 3.10 working
    import tomli as tomllib

import tomli_w

from .errors import InputError

FORMAT = "aliasfuzz-case/1"

TENSOR_KINDS = ("param", "buffer", "lazy")
LAZY_INITS = ("const", "uniform")
METHODS = (
    "alias", "clone", "detach", "copy", "mul1", "to_home", "to_cpu", "contiguous", "reshape",
    "view_row", "transpose", "state_dict", "deepcopy", "to_host", "save_load",
)
OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw")
DEVICE_ROLES = ("home", "cpu", "alt")
MOVE_METHODS = ("to", "fork")
MODULE_MODE_OPS = ("valid", "train", "no_grad", "freeze")
WRITE_OPS = ("write", "fill", "scale")

#: Every op kind with its fields: name -> (required, optional defaults). ``None`` as a default
#: means "computed from other fields" (see ``_step_defaults``).
OP_FIELDS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "snapshot": (("name", "of", "method"), {}),
    "write": (("target", "value"), {"index": None}),
    "fill": (("target", "value"), {}),
    "scale": (("target", "factor"), {}),
    "step": (("optimizer", "lr"), {"momentum": None, "betas": [0.9, 0.999], "eps": 1e-8,
                                   "weight_decay": None}),
    "move": (("target", "device"), {"method": "to"}),
    "module_clone": (("name",), {}),
    "valid": ((), {}),
    "train": ((), {}),
    "no_grad": ((), {}),
    "freeze": ((), {}),
    "read": (("target",), {}),
}
OP_KINDS = tuple(OP_FIELDS)

#: Largest tensor a case may declare: aliasing needs a few elements, and a huge lazy shape would
#: make a probe's allocation abort the process rather than fail one op.
MAX_NUMEL = 4096

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")


class CaseError(InputError, ValueError):
    """A malformed case. ``str()`` is the one-line message users see: file, location, field."""

    def __init__(self, path: str | Path | None, where: str, message: str):
        self.path = str(path) if path is not None else "<case>"
        self.where = where
        self.message = message
        super().__init__(f"{self.path}: {where}: {message}" if where else f"{self.path}: {message}")


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
    """A case: tensors, ops in canonical form, and free-text metadata that never affects runs."""

    tensors: tuple[TensorDecl, ...]
    ops: tuple[Mapping[str, Any], ...]
    title: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return {"tensors": [t.to_wire() for t in self.tensors], "ops": [dict(o) for o in self.ops]}

    def with_ops(self, ops: Iterable[Mapping[str, Any]]) -> "Program":
        return replace(self, ops=tuple(ops))

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

            key = json.dumps(self.to_wire(), sort_keys=True, separators=(",", ":"))
            object.__setattr__(self, "_key", key)  # frozen: a cache, not a field
        return key


# ------------------------------------------------------------------------------------------------
# Shapes and views: the harness needs them to validate cases and to decide whether a snapshot
# "follows" its source (equals the source under the same view).


def snapshot_shape(method: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    if method == "reshape":
        return (math.prod(shape),)
    if method == "view_row":
        return (1,) + shape[1:]
    if method == "transpose":
        return shape[:-2] + (shape[-1], shape[-2])
    return shape


def apply_view(method: str, array):
    """The value a snapshot made with ``method`` shows of ``array`` if it shares its storage."""
    if method == "reshape":
        return array.reshape(-1)
    if method == "view_row":
        return array[0:1]
    if method == "transpose":
        return array.swapaxes(-1, -2)
    return array


def _step_defaults(op: dict[str, Any]) -> None:
    if op["momentum"] is None:
        op["momentum"] = 0.9 if op["optimizer"] == "sgd_momentum" else 0.0
    if op["weight_decay"] is None:
        op["weight_decay"] = 0.01 if op["optimizer"] == "adamw" else 0.0


# ------------------------------------------------------------------------------------------------
# Validation and canonicalisation.


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _flatten(value: Any, where: str, err) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Nested lists of numbers -> (shape, flat values); rejects ragged or empty lists."""
    if _is_number(value):
        return (), (float(value),)
    if not isinstance(value, list) or not value:
        raise err(where, "expected a number or a non-empty (nested) list of numbers")
    parts = [_flatten(v, where, err) for v in value]
    shapes = {p[0] for p in parts}
    if len(shapes) != 1:
        raise err(where, "ragged nested list: rows have different shapes")
    inner = shapes.pop()
    flat: list[float] = []
    for p in parts:
        flat.extend(p[1])
    return (len(value),) + inner, tuple(flat)


def _nest(flat: Sequence[float], shape: Sequence[int]) -> Any:
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return list(flat)
    step = math.prod(shape[1:])
    return [_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


class _Scope:
    """Names bound while walking the ops: name -> (shape, role) with role in TENSOR_KINDS or
    'snapshot'."""

    def __init__(self, tensors: Sequence[TensorDecl]):
        self.bound: dict[str, tuple[tuple[int, ...], str]] = {t.name: (t.shape, t.kind) for t in tensors}
        self.params = [t.name for t in tensors if t.trainable]


def _check_tensor(name: str, raw: Any, err) -> TensorDecl:
    where = f"tensors.{name}"
    if not NAME_RE.match(name) or "." in name:
        raise err(where, "tensor names are identifiers (letters, digits, '_')")
    if not isinstance(raw, dict):
        raise err(where, "expected a table like { kind = \"param\", value = [...] }")
    allowed = {"kind", "value", "grad", "shape", "init", "fill", "seed"}
    for key in raw:
        if key not in allowed:
            raise err(f"{where}.{key}", f"unknown field (allowed: {', '.join(sorted(allowed))})")
    kind = raw.get("kind")
    if kind not in TENSOR_KINDS:
        raise err(f"{where}.kind", f"must be one of {', '.join(TENSOR_KINDS)}, got {kind!r}")
    if kind == "lazy":
        shape_raw = raw.get("shape")
        if (not isinstance(shape_raw, list) or not 1 <= len(shape_raw) <= 3
                or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape_raw)):
            raise err(f"{where}.shape", "a lazy tensor needs shape = [d1, ...] with 1 to 3 positive ints")
        init = raw.get("init")
        if init not in LAZY_INITS:
            raise err(f"{where}.init", f"must be one of {', '.join(LAZY_INITS)}, got {init!r}")
        fill = raw.get("fill", 0.0 if init == "uniform" else None)
        if init == "const" and not _is_number(fill):
            raise err(f"{where}.fill", "init = \"const\" needs a number fill")
        seed = raw.get("seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise err(f"{where}.seed", "must be a non-negative integer")
        if "value" in raw:
            raise err(f"{where}.value", "lazy tensors have no value: use init and fill")
        shape = tuple(shape_raw)
        if math.prod(shape) > MAX_NUMEL:
            raise err(f"{where}.shape", f"at most {MAX_NUMEL} elements, got {math.prod(shape)}")
        value = None
        fill = float(fill) if init == "const" else None
    else:
        if "value" not in raw:
            raise err(f"{where}.value", "missing (nested list of numbers)")
        shape, value = _flatten(raw["value"], f"{where}.value", err)
        if not 1 <= len(shape) <= 3:
            raise err(f"{where}.value", f"rank must be 1 to 3, got {len(shape)}")
        if math.prod(shape) > MAX_NUMEL:
            raise err(f"{where}.value", f"at most {MAX_NUMEL} elements, got {math.prod(shape)}")
        if "shape" in raw and tuple(raw["shape"]) != shape:
            raise err(f"{where}.shape", f"says {raw['shape']} but value has shape {list(shape)}")
        for key in ("init", "fill", "seed"):
            if key in raw:
                raise err(f"{where}.{key}", "only lazy tensors take this field")
        init, fill, seed = None, None, None
    grad = None
    if "grad" in raw:
        if kind == "buffer":
            raise err(f"{where}.grad", "buffers are not trained: grad is for params")
        gshape, grad = _flatten(raw["grad"], f"{where}.grad", err)
        if gshape != shape:
            raise err(f"{where}.grad", f"shape {list(gshape)} differs from the tensor's {list(shape)}")
    return TensorDecl(name, kind, shape, value, grad, init, fill, seed)


def check_op(raw: Mapping[str, Any], i: int, scope: _Scope, err) -> dict[str, Any]:
    """Validates one op against the names bound so far and returns its canonical form; updates
    ``scope`` with the names it binds."""
    where = f"ops[{i}]"
    if not isinstance(raw, Mapping):
        raise err(where, "expected a table")
    kind = raw.get("op")
    if kind not in OP_FIELDS:
        raise err(f"{where}.op", f"unknown op {kind!r} (known: {', '.join(OP_KINDS)})")
    required, optional = OP_FIELDS[kind]
    for key in raw:
        if key != "op" and key not in required and key not in optional:
            raise err(f"{where}.{key}", f"unknown field for op {kind!r}")
    for key in required:
        if key not in raw:
            raise err(f"{where}.{key}", f"missing (op {kind!r} needs {', '.join(required)})")
    op: dict[str, Any] = {"op": kind}
    for key in required:
        op[key] = raw[key]
    for key, default in optional.items():
        op[key] = raw.get(key, default)

    def name_of(key: str) -> tuple[tuple[int, ...], str]:
        name = op[key]
        if not isinstance(name, str) or name not in scope.bound:
            raise err(f"{where}.{key}", f"no tensor named {name!r} at this point")
        return scope.bound[name]

    def new_name(key: str) -> str:
        name = op[key]
        if not isinstance(name, str) or not NAME_RE.match(name) or "." in name:
            raise err(f"{where}.{key}", f"{name!r} is not a valid name (letters, digits, '_')")
        if name in scope.bound:
            raise err(f"{where}.{key}", f"name {name!r} is already bound")
        return name

    def number(key: str, positive: bool = False) -> float:
        x = op[key]
        if not _is_number(x) or not math.isfinite(float(x)):
            raise err(f"{where}.{key}", f"expected a finite number, got {x!r}")
        if positive and x <= 0:
            raise err(f"{where}.{key}", f"must be positive, got {x!r}")
        return float(x)

    if kind == "snapshot":
        shape, role = name_of("of")
        method = op["method"]
        if method not in METHODS:
            raise err(f"{where}.method", f"unknown method {method!r} (known: {', '.join(METHODS)})")
        if method == "transpose" and len(shape) < 2:
            raise err(f"{where}.method", "transpose needs a tensor of rank 2 or more")
        if method == "state_dict" and role == "snapshot":
            raise err(f"{where}.method", "state_dict reads a param or buffer, not a snapshot")
        name = new_name("name")
        scope.bound[name] = (snapshot_shape(method, shape), "snapshot")
    elif kind == "write":
        shape, _ = name_of("target")
        index = op["index"]
        if index is None:
            want = shape
        else:
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < shape[0]:
                raise err(f"{where}.index", f"must be an integer in 0..{shape[0] - 1}, got {index!r}")
            want = shape[1:]
        got, flat = _flatten(op["value"], f"{where}.value", err)
        # Canonical form is flat (row-major), so a flat list of the right length is accepted too.
        flat_ok = len(got) == 1 and got[0] == math.prod(want)
        if got != want and not flat_ok:
            raise err(f"{where}.value", f"shape {list(got)} does not match the target's {list(want) or 'scalar'}")
        op["value"] = list(flat)
    elif kind == "fill":
        name_of("target")
        op["value"] = number("value")
    elif kind == "scale":
        name_of("target")
        op["factor"] = number("factor")
    elif kind == "step":
        if op["optimizer"] not in OPTIMIZERS:
            raise err(f"{where}.optimizer", f"unknown optimizer {op['optimizer']!r} (known: {', '.join(OPTIMIZERS)})")
        op["lr"] = number("lr", positive=True)
        _step_defaults(op)
        op["momentum"] = number("momentum")
        op["eps"] = number("eps", positive=True)
        op["weight_decay"] = number("weight_decay")
        betas = op["betas"]
        if (not isinstance(betas, list) or len(betas) != 2 or not all(_is_number(b) and 0 <= b < 1 for b in betas)):
            raise err(f"{where}.betas", "expected two numbers in [0, 1)")
        op["betas"] = [float(b) for b in betas]
    elif kind == "move":
        _, role = name_of("target")
        if role not in ("param", "lazy"):
            raise err(f"{where}.target", f"move takes a param, {op['target']!r} is a {role}")
        if op["device"] not in DEVICE_ROLES:
            raise err(f"{where}.device", f"must be one of {', '.join(DEVICE_ROLES)}, got {op['device']!r}")
        if op["method"] not in MOVE_METHODS:
            raise err(f"{where}.method", f"must be one of {', '.join(MOVE_METHODS)}, got {op['method']!r}")
    elif kind == "module_clone":
        prefix = new_name("name")
        for p in scope.params:
            full = f"{prefix}.{p}"
            if full in scope.bound:
                raise err(f"{where}.name", f"name {full!r} is already bound")
            scope.bound[full] = (scope.bound[p][0], "snapshot")
    elif kind == "read":
        name_of("target")
    return op


def check_program(tensors: Sequence[TensorDecl], ops: Sequence[Mapping[str, Any]], path=None) -> tuple[dict[str, Any], ...]:
    """Validates ops (raw or canonical) and returns them canonical. Raises ``CaseError``."""

    def err(where: str, message: str) -> CaseError:
        return CaseError(path, where, message)

    scope = _Scope(tensors)
    return tuple(check_op(raw, i, scope, err) for i, raw in enumerate(ops))


def parse_case(doc: Mapping[str, Any], path: str | Path | None = None) -> Program:
    def err(where: str, message: str) -> CaseError:
        return CaseError(path, where, message)

    fmt = doc.get("format")
    if fmt != FORMAT:
        raise err("format", f"must be {FORMAT!r}, got {fmt!r}")
    for key in doc:
        if key not in ("format", "title", "tensors", "ops", "meta"):
            raise err(key, "unknown top-level field (allowed: format, title, tensors, ops, meta)")
    raw_tensors = doc.get("tensors")
    if not isinstance(raw_tensors, dict) or not raw_tensors:
        raise err("tensors", "missing or empty [tensors] table")
    tensors = tuple(_check_tensor(name, raw, err) for name, raw in raw_tensors.items())
    raw_ops = doc.get("ops", [])
    if not isinstance(raw_ops, list):
        raise err("ops", "expected an array of [[ops]] tables")
    ops = check_program(tensors, raw_ops, path)
    title = doc.get("title", "")
    if not isinstance(title, str):
        raise err("title", "expected a string")
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise err("meta", "expected a table")
    return Program(tensors, ops, title, meta)


def load_case(path: str | Path) -> Program:
    """Reads and validates a TOML case file. Raises ``CaseError`` with a one-line message."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise CaseError(path, "", f"cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise CaseError(path, "", "not UTF-8 text") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise CaseError(path, "", f"invalid TOML: {e}") from None
    return parse_case(doc, path)


# ------------------------------------------------------------------------------------------------
# Writing cases back (minimized findings, corpus exports).


def _canonical_defaults(op: Mapping[str, Any]) -> dict[str, Any]:
    """The optional fields of ``op`` with the values loading would fill in."""
    _, optional = OP_FIELDS[op["op"]]
    out = {k: v for k, v in optional.items() if v is not None}
    if op["op"] == "step":
        probe = {"optimizer": op["optimizer"], "momentum": None, "weight_decay": None}
        _step_defaults(probe)
        out.update(momentum=probe["momentum"], weight_decay=probe["weight_decay"])
    return out


def case_document(program: Program) -> dict[str, Any]:
    doc: dict[str, Any] = {"format": FORMAT}
    if program.title:
        doc["title"] = program.title
    tensors: dict[str, Any] = {}
    for t in program.tensors:
        entry: dict[str, Any] = {"kind": t.kind}
        if t.kind == "lazy":
            entry["shape"] = list(t.shape)
            entry["init"] = t.init
            if t.init == "const":
                entry["fill"] = t.fill
            else:
                entry["seed"] = t.seed
        else:
            entry["value"] = _nest(t.value, t.shape)
        if t.grad is not None:
            entry["grad"] = _nest(t.grad, t.shape)
        tensors[t.name] = entry
    doc["tensors"] = tensors
    ops = []
    shapes = {t.name: t.shape for t in program.tensors}
    params = [t.name for t in program.tensors if t.trainable]
    for op in program.ops:
        out = {"op": op["op"]}
        defaults = _canonical_defaults(op)
        for key, value in op.items():
            if key == "op":
                continue
            if key == "index" and value is None:
                continue  # TOML has no null: an absent index means "whole tensor"
            if key in defaults and defaults[key] == value:
                continue  # keep written cases short: defaults are filled in again on load
            if key == "value" and op["op"] == "write":
                shape = shapes[op["target"]]
                value = _nest(value, shape if op["index"] is None else shape[1:])
            out[key] = value
        if op["op"] == "snapshot":
            shapes[op["name"]] = snapshot_shape(op["method"], shapes[op["of"]])
        elif op["op"] == "module_clone":
            for p in params:
                shapes[f"{op['name']}.{p}"] = shapes[p]
        ops.append(out)
    doc["ops"] = ops
    if program.meta:
        doc["meta"] = dict(program.meta)
    return doc


def dump_case(program: Program) -> str:
    """The TOML text of a case; ``parse_case(tomllib.loads(dump_case(p)))`` equals ``p``."""
    return tomli_w.dumps(case_document(program))


def write_case(program: Program, path: str | Path) -> Path:
    """Writes a case file atomically (a crash never leaves half a case behind)."""
    from .files import atomic_write

    return atomic_write(path, dump_case(program))


def names_bound(program: Program) -> list[str]:
    """Every name the program binds, in binding order (tensors, then snapshots)."""
    names = [t.name for t in program.tensors]
    params = [t.name for t in program.tensors if t.trainable]
    for op in program.ops:
        if op["op"] == "snapshot":
            names.append(op["name"])
        elif op["op"] == "module_clone":
            names.extend(f"{op['name']}.{p}" for p in params)
    return names
