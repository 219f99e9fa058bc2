"""The probe protocol's JSON Schema, generated from the op table.

``rust_probes/protocol/schema/protocol.schema.json`` is this module's output, kept in the tree
for the probes' authors and for validators that do not run Python. ``make schema`` rewrites it;
``tests/unit/case/test_op_table.py`` fails when the file or the Rust protocol's enums (through the
protocol crate's own test of the file) disagree with the table, and ``tests/probes/test_op_table.py``
when a probe's handshake does.

The message envelope (requests, replies, observations) is written out here; everything a
program carries (tensor kinds, ops, their fields, snapshot methods) comes from
``harness.case.ops``.

Run ``python -m harness.targets.schema`` to print the schema, ``--write`` to update the file, and
``--check`` to exit 1 when the file is stale.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from harness.case import ops
from harness.case.layers import LAYER_KINDS
from harness.paths import ROOT
from harness.paths import SCHEMA as SCHEMA_PATH
from harness.targets.protocol import OBS_FIELDS, OBS_REQUIRED

#: The ``$defs`` entry naming each enumeration of the table, in the order the Rust protocol
#: crate's test reads them.
ENUMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("op_name", ops.OP_KINDS),
    ("method", ops.METHODS),
    ("optimizer", ops.OPTIMIZERS),
    ("device_role", ops.DEVICE_ROLES),
    ("move_method", ops.MOVE_METHODS),
    ("checkpoint_store", ops.CHECKPOINT_STORES),
    ("replace_how", ops.REPLACE_HOWS),
    ("append_how", ops.APPEND_HOWS),
    ("map_fn", ops.MAP_FNS),
    ("tensor_kind", ops.TENSOR_KINDS),
    ("lazy_init", ops.LAZY_INITS),
    ("dtype", ops.DTYPES),
    ("layer_kind", LAYER_KINDS),
)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/$defs/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"oneOf": [schema, {"type": "null"}]}


def _field_schema(f: ops.Field) -> dict[str, Any]:
    if f.kind in ("name", "new", "prefix", "checkpoint", "layer"):
        return _ref("name")
    if f.kind == "number":
        return {"type": "number"}
    if f.kind == "choice":
        for def_name, values in ENUMS:
            if values == f.choices:
                return _ref(def_name)
        return {"enum": list(f.choices)}
    if f.kind == "row":
        return {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]}
    if f.kind == "values":
        return _ref("floats")
    if f.kind == "flag":
        return {"type": "boolean"}
    if f.kind == "betas":
        return {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}
    raise ValueError(f"field {f.name}: kind {f.kind!r} has no schema")


def _op_schema(spec: ops.OpSpec) -> dict[str, Any]:
    """One op as the harness sends it: every field present (defaults filled in)."""
    return {
        "description": spec.doc,
        "additionalProperties": False,
        "required": ["op", *(f.name for f in spec.fields)],
        "properties": {"op": {"const": spec.kind}, **{f.name: _field_schema(f) for f in spec.fields}},
    }


def _program_defs() -> dict[str, Any]:
    unknown = {
        "description": "an op this protocol version does not know: probes answer unsupported",
        "properties": {"op": {"not": _ref("op_name")}},
    }
    return {
        "program": {
            "type": "object",
            "additionalProperties": False,
            "required": ["tensors", "ops"],
            "properties": {
                "dtype": _ref("dtype"),
                "tensors": {"type": "array", "items": _ref("tensor")},
                "layers": {"type": "array", "items": _ref("layer")},
                "ops": {"type": "array", "items": _ref("op")},
            },
        },
        "layer": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "kind"],
            "properties": {
                "name": _ref("name"),
                "kind": _ref("layer_kind"),
                "features": {"type": "integer", "minimum": 1},
                "momentum": {"type": "number"},
                "p": {"type": "number"},
            },
        },
        "tensor": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "kind", "shape"],
            "properties": {
                "name": _ref("name"),
                "kind": _ref("tensor_kind"),
                "shape": _ref("shape"),
                "value": _nullable(_ref("floats")),
                "grad": _nullable(_ref("floats")),
                "init": _nullable(_ref("lazy_init")),
                "fill": _nullable({"type": "number"}),
                "seed": _nullable({"type": "integer", "minimum": 0}),
            },
        },
        "op": {
            "type": "object",
            "required": ["op"],
            "properties": {"op": {"type": "string"}},
            "oneOf": [_op_schema(spec) for spec in ops.OP_TABLE] + [unknown],
        },
        **{name: {"enum": list(values)} for name, values in ENUMS},
    }


def _envelope_defs() -> dict[str, Any]:
    obj = {"type": "object", "additionalProperties": False}
    # An observation is an array of its fields in ``protocol.OBS_FIELDS`` order.
    fields = {
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "value": _nullable(_ref("floats")),
        "identity": {"type": ["string", "null"]},
        "device": {"type": "string"},
        "requires_grad": {"type": ["boolean", "null"]},
        "initialized": {"type": "boolean"},
        "dtype": {"type": ["string", "null"]},
        "note": {"type": ["string", "null"]},
        "storage": {"type": ["string", "null"]},
        "version": {"type": "integer", "minimum": 0},
    }
    obs = {
        "type": "array",
        "prefixItems": [{"title": name, **fields[name]} for name in OBS_FIELDS],
        "items": False,
        "minItems": OBS_REQUIRED,
    }
    device = {
        **obj,
        "required": ["name", "alt", "kind"],
        "properties": {
            "name": {"type": "string"},
            "alt": {"type": ["string", "null"]},
            "kind": {"enum": ["cpu", "gpu"]},
            "differs_on": {"type": "array", "items": {"type": "string"}},
            "on_request": {"type": "boolean"},
            "program_timeout_s": {"type": "number", "exclusiveMinimum": 0},
        },
    }
    step = {
        **obj,
        "required": ["status", "changed"],
        "properties": {
            "status": {"enum": ["ok", "unsupported", "error", "skipped"]},
            "message": {"type": ["string", "null"]},
            "changed": {"type": "object", "additionalProperties": _ref("obs")},
            "fused": {"type": "boolean"},
        },
    }
    return {
        "float": {"oneOf": [{"type": "number"}, {"enum": ["NaN", "Infinity", "-Infinity"]}]},
        "floats": {"type": "array", "items": _ref("float")},
        "name": {"type": "string", "minLength": 1},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1, "maxItems": 3},
        "hello_request": {
            **obj,
            "required": ["type", "protocol"],
            "properties": {"type": {"const": "hello"}, "protocol": {"type": "integer"}},
        },
        "exit_request": {**obj, "required": ["type"], "properties": {"type": {"const": "exit"}}},
        "run_request": {
            **obj,
            "required": ["type", "id", "device", "program"],
            "properties": {
                "type": {"const": "run"},
                "id": {"type": "integer", "minimum": 0},
                "device": {"type": "string"},
                "program": _ref("program"),
            },
        },
        "obs": obs,
        "hello_reply": {
            **obj,
            "required": ["type", "protocol", "framework", "versions", "devices", "ops", "methods"],
            "properties": {
                "type": {"const": "hello"},
                "protocol": {"type": "integer"},
                "framework": {"type": "string"},
                "versions": {"type": "object", "additionalProperties": {"type": "string"}},
                "devices": {"type": "array", "minItems": 1, "items": device},
                "ops": {"type": "array", "items": _ref("op_name")},
                "methods": {"type": "array", "items": _ref("method")},
            },
        },
        "trace_reply": {
            **obj,
            "required": ["type", "id", "device", "status", "initial", "steps", "elapsed_us"],
            "properties": {
                "type": {"const": "trace"},
                "id": {"type": "integer"},
                "device": {"type": "string"},
                "status": {"enum": ["ok", "error"]},
                "message": {"type": ["string", "null"]},
                "initial": {"type": "object", "additionalProperties": _ref("obs")},
                "steps": {"type": "array", "items": step},
                "elapsed_us": {"type": "integer", "minimum": 0},
            },
        },
        "error_reply": {
            **obj,
            "required": ["type", "id", "message"],
            "properties": {
                "type": {"const": "error"},
                "id": {"type": ["integer", "null"]},
                "message": {"type": "string"},
            },
        },
    }


def protocol_schema(version: int = 1) -> dict[str, Any]:
    """The whole protocol schema: one JSON document per line, each one of six messages."""
    messages = ("hello_request", "run_request", "exit_request", "hello_reply", "trace_reply", "error_reply")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"aliasfuzz-protocol/{version}",
        "title": f"aliasfuzz probe protocol, version {version}",
        "description": "One JSON document per line in each direction. See PROTOCOL.md. "
        "Generated from harness/case/ops.py by `make schema`: do not edit.",
        "oneOf": [_ref(m) for m in messages],
        "$defs": {**_envelope_defs(), **_program_defs()},
    }


def schema_text() -> str:
    return json.dumps(protocol_schema(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = schema_text()
    if "--write" in args:
        SCHEMA_PATH.write_text(text)
        print(f"wrote {SCHEMA_PATH.relative_to(ROOT)}")
    elif "--check" in args:
        if SCHEMA_PATH.read_text() != text:
            print(f"{SCHEMA_PATH.relative_to(ROOT)} is stale: run `make schema`", file=sys.stderr)
            return 1
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
