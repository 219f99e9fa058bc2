"""The probe protocol's messages on the Python side: its version, parsing, and observations.

The Python twin of the message types of ``rust_probes/protocol/src/lib.rs`` (``Request``,
``WireProgram``, ``TensorSpec``, ``Op``, ``Obs``), for the Python driver ``harness.targets.driver``;
``rust_probes/protocol/PROTOCOL.md`` describes the protocol and
``rust_probes/protocol/schema/protocol.schema.json`` is normative. ``PROTOCOL_VERSION`` is the
Python side's one definition: the harness's client (``harness.targets.base``) sends and checks
it, the Python driver answers with it. The Rust crate keeps its own constant, which every Rust
probe's hello reports and the client checks against this one.

Parsing does the checks serde does on the Rust side, with messages in the same spirit: a missing
field, a mistyped one, an unknown variant. Unknown fields of a request or a tensor are ignored;
an op accepts only its own fields (``deny_unknown_fields``). What each op's fields are comes from
the op table (``harness.case.ops``), by field kind:

- ``name``, ``new``, ``prefix``: a string;
- ``number``: a number, rounded to float32 unless the field is ``wide`` (an optimizer's
  hyper-parameter, ``f64`` in the Rust ``Op``); serde casts f64 -> f32, so out of range is infinite;
- ``choice``: one of the field's ``choices``;
- ``row``: absent, null or a non-negative integer (``Option<usize>``: absent reads as null);
- ``values``: a list of numbers (float32) or of the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``;
- ``betas``: a list of two numbers (float32 unless ``wide``).

Every field but a ``row`` must be present: the harness sends every field, defaults filled in.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.case import ops as op_table
from harness.case.layers import LAYER_KINDS

#: Bumped on every incompatible change; the harness refuses a target that reports another number.
PROTOCOL_VERSION = 12

#: The seed of a program's one generator (lazy init ``program_rng``), set once when it opens.
PROGRAM_SEED = 0


class Malformed(Exception):
    """A request, tensor or op that does not parse; the message says which field and why."""


# ---------------------------------------------------------------------------------------------
# Scalars.


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def f32(x: float) -> float:
    """A JSON number read as f32 (serde casts f64 -> f32: out of range becomes infinite)."""
    return float(np.float32(x))


def _need(d: dict, key: str):
    if key not in d:
        raise Malformed(f"missing field `{key}`")
    return d[key]


def _str(d: dict, key: str) -> str:
    v = _need(d, key)
    if not isinstance(v, str):
        raise Malformed(f"invalid type for `{key}`: expected a string")
    return v


def _bool(d: dict, key: str) -> bool:
    v = _need(d, key)
    if not isinstance(v, bool):
        raise Malformed(f"invalid type for `{key}`: expected a boolean")
    return v


def _enum(d: dict, key: str, variants) -> str:
    v = _str(d, key)
    if v not in variants:
        raise Malformed(f"unknown variant `{v}` for `{key}`, expected one of {', '.join(variants)}")
    return v


def _num(d: dict, key: str) -> float:
    v = _need(d, key)
    if not _is_num(v):
        raise Malformed(f"invalid type for `{key}`: expected a number")
    return float(v)


def _u64(v, key: str) -> int:
    if not _is_int(v) or v < 0:
        raise Malformed(f"invalid value for `{key}`: expected an unsigned integer")
    return v


def float_list(v, what: str) -> list[float]:
    """``de_f32s``: numbers (read as float32), or the strings NaN / Infinity / -Infinity."""
    if not isinstance(v, list):
        raise Malformed(f"invalid type for `{what}`: expected a sequence")
    out = []
    for x in v:
        if _is_num(x):
            out.append(f32(x))
        elif x == "NaN":
            out.append(math.nan)
        elif x == "Infinity":
            out.append(math.inf)
        elif x == "-Infinity":
            out.append(-math.inf)
        elif isinstance(x, str):
            raise Malformed(f"not a float: {json.dumps(x)}")
        else:
            raise Malformed(f"invalid type for an element of `{what}`: expected a float")
    return out


def _opt_float_list(d: dict, key: str):
    v = d.get(key)
    return None if v is None else float_list(v, key)


# ---------------------------------------------------------------------------------------------
# Requests and programs.


@dataclass(frozen=True)
class WireProgram:
    """A program as it travels (the case's program is ``harness.case.ir.Program``; this is what a
    probe receives, before any op is checked): ``tensors`` parsed (``TensorSpec`` dicts: name, kind, shape,
    value, grad, init, fill, seed; absent optional fields are None), ``ops`` kept raw, so that
    one unknown or malformed op does not reject the whole program: the driver parses each op and
    reports ``unsupported`` or ``error`` for that op alone."""

    tensors: list[dict]
    ops: list
    layers: list = ()  # LayerSpec dicts: name, kind, features, momentum, p (absent ones None)
    dtype: str = "f32"  # every tensor's (``op_table.DTYPES``)


@dataclass(frozen=True)
class Hello:
    protocol: int


@dataclass(frozen=True)
class Run:
    id: int
    device: str
    program: WireProgram
    #: Whether the reply carries the calls the session made (``transcript``, PROTOCOL.md).
    transcript: bool = False


@dataclass(frozen=True)
class Exit:
    pass


def parse_tensor(t) -> dict:
    if not isinstance(t, dict):
        raise Malformed("invalid type for a tensor: expected an object")
    spec = {
        "name": _str(t, "name"),
        "kind": _enum(t, "kind", op_table.TENSOR_KINDS),
        "value": _opt_float_list(t, "value"),
        "grad": _opt_float_list(t, "grad"),
    }
    shape = _need(t, "shape")
    if not isinstance(shape, list):
        raise Malformed("invalid type for `shape`: expected a sequence")
    spec["shape"] = [_u64(s, "shape") for s in shape]
    init = t.get("init")
    if init is not None and init not in op_table.LAZY_INITS:
        raise Malformed(f"unknown variant {json.dumps(init)} for `init`, expected {' or '.join(op_table.LAZY_INITS)}")
    spec["init"] = init
    fill = t.get("fill")
    if fill is not None and not _is_num(fill):
        raise Malformed("invalid type for `fill`: expected a number")
    spec["fill"] = None if fill is None else f32(fill)
    seed = t.get("seed")
    spec["seed"] = None if seed is None else _u64(seed, "seed")
    return spec


def parse_layer(x) -> dict:
    if not isinstance(x, dict):
        raise Malformed("invalid type for a layer: expected an object")
    for key in x:
        if key not in ("name", "kind", "features", "momentum", "p"):
            raise Malformed(f"unknown field `{key}` of a layer")
    spec = {"name": _str(x, "name"), "kind": _enum(x, "kind", LAYER_KINDS)}
    features = x.get("features")
    spec["features"] = None if features is None else _u64(features, "features")
    for key in ("momentum", "p"):
        value = x.get(key)
        if value is not None and not _is_num(value):
            raise Malformed(f"invalid type for `{key}`: expected a number")
        spec[key] = value
    return spec


def _reject_constant(name):
    raise Malformed(f"{name} is not JSON")


def parse_request(line: bytes) -> Hello | Run | Exit:
    """One request line, or ``Malformed``. Unknown fields are ignored (serde)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Malformed(f"not UTF-8: {e}") from None
    try:
        # NaN / Infinity literals are not JSON: non-finite floats travel as strings.
        req = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, Malformed) as e:
        raise Malformed(str(e)) from None
    if not isinstance(req, dict):
        raise Malformed("expected an object")
    kind = _need(req, "type")
    if kind == "hello":
        return Hello(_u64(_need(req, "protocol"), "protocol"))
    if kind == "exit":
        return Exit()
    if kind == "run":
        rid = _u64(_need(req, "id"), "id")
        device = _str(req, "device")
        program = _need(req, "program")
        if not isinstance(program, dict):
            raise Malformed("invalid type for `program`: expected an object")
        tensors = _need(program, "tensors")
        ops = _need(program, "ops")
        if not isinstance(tensors, list) or not isinstance(ops, list):
            raise Malformed("invalid type for `tensors` or `ops`: expected a sequence")
        layers = program.get("layers", [])
        if not isinstance(layers, list):
            raise Malformed("invalid type for `layers`: expected a sequence")
        dtype = program.get("dtype", "f32")
        if dtype not in op_table.DTYPES:
            raise Malformed(f"unknown variant {json.dumps(dtype)} for `dtype`, expected {' or '.join(op_table.DTYPES)}")
        transcript = req.get("transcript", False)
        if not isinstance(transcript, bool):
            raise Malformed("invalid type for `transcript`: expected a boolean")
        return Run(
            rid,
            device,
            WireProgram([parse_tensor(t) for t in tensors], ops, [parse_layer(x) for x in layers], dtype),
            transcript,
        )
    raise Malformed(f"unknown variant {json.dumps(kind)} for `type`, expected hello, run or exit")


# ---------------------------------------------------------------------------------------------
# Ops, from the op table.


def _parse_number(raw: dict, f: op_table.Field) -> float:
    x = _num(raw, f.name)
    return x if f.wide else f32(x)


def _parse_row(raw: dict, f: op_table.Field) -> int | None:
    # Option<usize> without deserialize_with: serde reads a missing field as None.
    v = raw.get(f.name)
    return None if v is None else _u64(v, f.name)


def _parse_betas(raw: dict, f: op_table.Field) -> tuple[float, float]:
    v = _need(raw, f.name)
    if not (isinstance(v, list) and len(v) == 2 and all(_is_num(x) for x in v)):
        raise Malformed(f"invalid value for `{f.name}`: expected an array of 2 numbers")
    # A tuple: the torch session keys its optimizers by every hyper-parameter.
    return (float(v[0]), float(v[1])) if f.wide else (f32(v[0]), f32(v[1]))


#: Field kind -> the parser of such a field of a raw op (``ops.FIELD_KINDS``, one each).
_FIELD_PARSERS: dict[str, Callable[[dict, op_table.Field], Any]] = {
    "name": lambda raw, f: _str(raw, f.name),
    "new": lambda raw, f: _str(raw, f.name),
    "prefix": lambda raw, f: _str(raw, f.name),
    "checkpoint": lambda raw, f: _str(raw, f.name),
    "layer": lambda raw, f: _str(raw, f.name),
    "flag": lambda raw, f: _bool(raw, f.name),
    "number": _parse_number,
    "choice": lambda raw, f: _enum(raw, f.name, f.choices),
    "row": _parse_row,
    "values": lambda raw, f: float_list(_need(raw, f.name), f.name),
    "betas": _parse_betas,
}
assert set(_FIELD_PARSERS) == set(op_table.FIELD_KINDS), "a field kind without a parser"


def is_op_kind(name: str) -> bool:
    """Whether ``name`` is an op of the case format (the Rust crate's ``ALL_OPS``)."""
    return name in op_table.OPS


def parse_op(raw: dict) -> op_table.Op:
    """A raw op whose ``op`` is an op kind (``is_op_kind``) -> the op with every field parsed, in
    the table's field order; ``Malformed`` for an unknown, missing or mistyped field."""
    spec = op_table.OPS[raw["op"]]
    fields = [f.name for f in spec.fields]
    for key in raw:
        if key != "op" and key not in fields:
            raise Malformed(f"unknown field `{key}`, expected one of {', '.join(f'`{f}`' for f in fields) or 'none'}")
    return op_table.Op({"op": spec.kind} | {f.name: _FIELD_PARSERS[f.kind](raw, f) for f in spec.fields})


def uses(op: dict) -> tuple[str, ...]:
    """The names a parsed op needs bound before it can run (``Op::uses``)."""
    return op_table.reads(op)


# ---------------------------------------------------------------------------------------------
# Observations.


#: An observation on the wire is a list of these fields, in this order (PROTOCOL.md, OBS; the
#: Rust ``Obs``): a trace holds dozens of observations, and field names were most of their bytes.
#: The last two are optional, sent only by a target that has them: ``storage``, a token of the
#: memory the tensor is over (torch: the storage's address), null where the tensor has none of its
#: own; ``version``, the tensor's version counter (torch ``t._version``, which every in-place
#: write bumps and autograd checks saved tensors against). candle and burn send neither: they
#: have no storage token to give and no version counter (docs/SEMANTICS.md).
OBS_FIELDS = (
    "shape",
    "value",
    "identity",
    "device",
    "requires_grad",
    "initialized",
    "dtype",
    "note",
    "storage",
    "version",
)
#: How many fields every wire observation has (all but the optional ``storage`` and ``version``).
OBS_REQUIRED = len(OBS_FIELDS) - 2
#: Where ``value`` is in a wire observation.
VALUE = OBS_FIELDS.index("value")


def observation(
    shape: list[int],
    value: list[float] | None,
    identity: str | None,
    device: str,
    requires_grad: bool | None,
    initialized: bool = True,
    dtype: str | None = None,
    note: str | None = None,
    storage: str | None = None,
    version: int | None = None,
) -> list:
    """A wire observation (``OBS_FIELDS``; ``storage`` and ``version`` only where known, a
    null ``storage`` before a ``version`` where only the version is)."""
    obs = [shape, value, identity, device, requires_grad, initialized, dtype, note]
    if storage is not None or version is not None:
        obs.append(storage)
    if version is not None:
        obs.append(version)
    return obs


def unreadable(note: str) -> list:
    """``Obs::unreadable``: the observation of a name that could not be read, and why."""
    return observation([], None, None, "", None, note=note)


def same_obs(a: list | None, b: list) -> bool:
    """``Obs: PartialEq`` of the Rust crate: values compare by float32 bit pattern, so a tensor
    holding a NaN is not reported as changed after every op, and -0.0 differs from 0.0."""
    if a is b:  # a session may hand back the same list for a tensor it did not re-read
        return True
    if a is None or len(a) != len(b):
        return False
    for k, (x, y) in enumerate(zip(a, b)):
        if k == VALUE:
            if (x is None) != (y is None):
                return False
            if x is not None and (len(x) != len(y) or _bits(x) != _bits(y)):
                return False
        elif x != y:
            return False
    return True


def _bits(values: list[float]) -> bytes:
    """The float32 bit patterns of ``values``, packed in one call (``struct`` rounds each float to
    float32 as ``f32`` does, and keeps NaN payloads and the sign of zero)."""
    return struct.pack(f"<{len(values)}f", *values)


def _non_finite(x: float):
    return x if math.isfinite(x) else ("NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity"))


def encode_floats(trace: dict) -> None:
    """``ser_f32s``: non-finite floats travel as strings (in place, over the trace's observations)."""
    for group in [trace["initial"]] + [s["changed"] for s in trace["steps"]]:
        for obs in group.values():
            v = obs[VALUE]
            if v is not None and not all(math.isfinite(x) for x in v):
                obs[VALUE] = [_non_finite(x) for x in v]
