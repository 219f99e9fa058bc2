"""The case file (``aliasfuzz-case/1``): a program as TOML tables, read and checked
(``load_case``, ``parse_case``) and written back canonical (``dump_case``, ``write_case``).

Reading checks every field with the program's own checks (``harness.case.ir``) and names the field
of a bad one (``CaseError``); a metamorphic case's ``inert`` list is checked as an inert group
(``harness.case.inert``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import tomli_w

from harness.case import ops
from harness.case import values as cv
from harness.case.inert import check_inert
from harness.case.ir import (
    MAX_NUMEL,
    CaseError,
    Program,
    TensorDecl,
    check_dtype_field,
    check_exact,
    check_ops,
    shape_ok,
)
from harness.case.layers import check_layer
from harness.case.ops import LAZY_INITS, TENSOR_KINDS
from harness.case.values import is_identifier
from harness.files import atomic_write

FORMAT = "aliasfuzz-case/1"


def _nest(flat: Sequence[float], shape: Sequence[int]) -> Any:
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return list(flat)
    step = math.prod(shape[1:])
    return [_nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


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
        if not shape_ok(shape_raw):
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
        if "shape" in raw and (not shape_ok(raw["shape"]) or tuple(raw["shape"]) != shape):
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
    check_dtype_field(dtype, err)
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
    ops = check_ops(tensors, doc.get("ops", []), err, layers)
    check_exact(tensors, ops, dtype, err)
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

    return atomic_write(path, dump_case(program))
