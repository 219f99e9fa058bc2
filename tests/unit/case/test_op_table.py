"""The op table (``harness/case/ops.py``) is the one definition of every op and snapshot method:
its invariants hold, and the protocol schema file, the generators and every probe's handshake
agree with it. (The Rust protocol crate's own test checks its enums against the schema file, so
schema == table here and enums == schema there close the loop.)

The tests here run in this process, as the
unit tier requires; those that need the real frameworks are in tests/probes/test_op_table.py.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from generators.programs import DRAWERS, PROFILES
from harness.case import ops
from harness.case.case_file import load_case
from harness.targets import schema
from tests.conftest import CASES


def test_the_schema_file_is_generated_from_the_table():
    assert schema.SCHEMA_PATH.read_text() == schema.schema_text(), "stale schema: run `make schema`"
    jsonschema.Draft202012Validator.check_schema(json.loads(schema.SCHEMA_PATH.read_text()))


def test_the_schema_names_every_op_and_method_of_the_table():
    defs = schema.protocol_schema()["$defs"]
    assert defs["op_name"]["enum"] == list(ops.OP_KINDS)
    assert defs["method"]["enum"] == list(ops.METHODS)
    kinds = [branch["properties"]["op"].get("const") for branch in defs["op"]["oneOf"]]
    assert kinds[:-1] == list(ops.OP_KINDS) and kinds[-1] is None  # the last: unknown ops


@pytest.mark.parametrize("spec", ops.OP_TABLE, ids=lambda s: s.kind)
def test_op_table_invariants(spec):
    assert all(f.kind in ops.FIELD_KINDS for f in spec.fields)
    names = [f.name for f in spec.fields]
    assert len(set(names)) == len(names) and "op" not in names
    required = [f.required for f in spec.fields]
    assert required == sorted(required, reverse=True), "required fields come first (canonical order)"
    assert sum(f.writes for f in spec.fields) <= 1
    rows = spec.of_kind("row")
    assert sum(f.of is None for f in rows) <= 1 and len(spec.of_kind("values")) <= 1
    assert [f.of is None for f in rows] == sorted((f.of is None for f in rows), reverse=True), (
        "the written name's row comes first"
    )
    assert all(f.of in names and spec.field(f.of).kind == "name" for f in rows if f.of is not None)
    if spec.of_kind("row") or spec.of_kind("values") or spec.of_kind("new"):
        assert spec.of_kind("name"), "rows, values and snapshots are of a named tensor"
    for f in spec.fields:
        if f.kind == "choice":
            assert f.choices and len(set(f.choices)) == len(f.choices)
        if isinstance(f.default, ops.Derived):
            assert f.default.depends_on in names[: names.index(f.name)]
        if f.writes or f.roles:
            assert f.kind == "name"
    assert spec.doc


def test_every_op_can_be_drawn_by_every_profile():
    for kind in ops.OP_KINDS:
        assert kind in DRAWERS or not ops.OPS[kind].fields, f"no drawer for {kind}"
    for profile in PROFILES.values():
        assert {k for k, _ in profile.weights} == set(ops.OP_KINDS), profile.name


def test_every_drawer_draws_exactly_one_op():
    # generate(max_ops=N) forces N ops (the bench's per-length figures rely on it): a drawer never
    # skips, whatever the names bound so far.
    from harness.fuzzing.generation import generate

    for seed in range(3):
        assert {len(p.ops) for p in generate(40, seed, "deep", 24)} == {24}


def test_bundled_cases_are_valid_wire_programs():
    validator = jsonschema.Draft202012Validator(schema.protocol_schema())
    for path in sorted(CASES.glob("*.toml")):
        request = {"type": "run", "id": 1, "device": "cpu", "program": load_case(path).to_wire()}
        errors = [e.message for e in validator.iter_errors(request)]
        assert not errors, f"{path.name}: {errors[:1]}"


def test_simplified_ops_stay_valid_and_get_cheaper():
    from harness.shrinking.minimize import _simpler_op

    step = {
        "op": "step",
        "optimizer": "adamw",
        "lr": 2.0,
        "momentum": 0.0,
        "dampening": 0.0,
        "betas": [0.9, 0.999],
        "eps": 1e-8,
        "weight_decay": 0.01,
    }
    simpler = list(_simpler_op(step))
    assert [s["optimizer"] for s in simpler[:3]] == ["sgd", "sgd_momentum", "adam"]
    assert simpler[1]["momentum"] == 0.9 and simpler[0]["weight_decay"] == 0.0  # derived again
    assert simpler[3] == {**step, "lr": 1.0}
    assert all(ops.op_cost(s) < ops.op_cost(step) for s in simpler)
    move = {"op": "move", "target": "p0", "device": "alt", "method": "fork"}
    assert list(_simpler_op(move)) == [{**move, "device": "home"}, {**move, "device": "cpu"}, {**move, "method": "to"}]
    snap = {"op": "snapshot", "name": "s0", "of": "p0", "method": "save_load"}
    assert list(_simpler_op(snap)) == []  # methods are not ordered by simplicity


@pytest.mark.parametrize("doc", ["CASE_FORMAT.md", "SEMANTICS.md"])
def test_the_docs_name_every_op_and_method(doc):
    text = (schema.ROOT / "docs" / doc).read_text()
    missing = [k for k in (*ops.OP_KINDS, *ops.METHODS) if f"`{k}`" not in text and f"`{k} {{" not in text]
    assert not missing, f"docs/{doc} does not describe {missing}"


def test_cache_rows_is_one_number_in_the_op_table_and_the_rust_protocol():
    """The KV cache's preallocated rows live in the op table (``ops.CACHE_ROWS``) and, as a Rust
    constant, in the protocol crate that both probes share: they must agree, or a cache append
    would overflow in one framework and not in the other."""
    import re

    from harness.case import ops
    from harness.paths import PROBES_WORKSPACE

    source = (PROBES_WORKSPACE / "protocol" / "src" / "lib.rs").read_text(encoding="utf-8")
    found = re.findall(r"pub const CACHE_ROWS: usize = (\d+);", source)
    assert found == [str(ops.CACHE_ROWS)], found
