"""``ops.Op``: an op is parsed once against the op table, and read by field name everywhere.

A program holds ``Op`` objects whoever built it (a case file, the generator, the minimizer, the
wire); reading a field that the op's kind lacks fails at once, naming the kind and its fields;
and no module outside the case package reads an op by a key string (``op["target"]``), which
the last test checks over the harness's source.
"""

from __future__ import annotations

import ast
import copy
import json
import pickle

import pytest

from harness.case import ops
from harness.case.case_file import load_case
from harness.case.ir import Program, TensorDecl, check_program
from harness.targets.protocol import parse_op
from tests.conftest import CASES, ROOT

W = (TensorDecl("w", "param", (2,), (1.0, 2.0)),)


def _bundled_ops():
    for path in sorted(CASES.glob("*.toml")):
        yield from load_case(path).ops


def test_every_op_of_every_bundled_case_reads_each_field_of_its_kind_as_an_attribute():
    seen = set()
    for op in _bundled_ops():
        assert type(op) is ops.Op
        assert op.kind == op["op"] and op.spec is ops.OPS[op.kind]
        for f in op.spec.fields:
            attr = f.name + "_" if f.name == "from" else f.name
            assert getattr(op, attr) == op[f.name]
        seen.add(op.kind)
    assert seen == set(ops.OP_KINDS), "a kind no bundled case uses"


def test_a_field_the_kind_lacks_is_an_attribute_error_naming_the_kind_and_its_fields():
    (op,) = check_program(W, [{"op": "fill", "target": "w", "value": 3.0}])
    with pytest.raises(AttributeError, match=r"a `fill` op has no field `lr` \(its fields: target, value\)"):
        _ = op.lr
    assert not hasattr(op, "layer")
    assert op.target == "w" and op.value == 3.0


def test_from_a_python_keyword_is_read_as_from_underscore():
    program = load_case(CASES / "torch_load_assign_takes_the_checkpoints_tensors.toml")
    load = next(op for op in program.ops if op.kind == "load")
    assert load.from_ == load["from"]


def test_an_op_is_read_only_and_a_changed_field_makes_a_new_op():
    (op,) = check_program(W, [{"op": "scale", "target": "w", "factor": 2.0}])
    for change in (
        lambda: op.__setitem__("factor", 3.0),
        lambda: op.update(factor=3.0),
        lambda: op.pop("factor"),
        lambda: setattr(op, "factor", 3.0),
    ):
        with pytest.raises(TypeError, match="read-only"):
            change()
    changed = ops.with_field(op, "factor", 3.0)
    assert op.factor == 2.0 and changed["factor"] == 3.0
    assert Program(W, (changed,)).ops[0].factor == 3.0


def test_a_program_holds_ops_in_canonical_order_whatever_it_was_given():
    raw = {"value": 3.0, "target": "w", "op": "fill"}
    program = Program(W, [raw])
    (op,) = program.ops
    assert type(op) is ops.Op and list(op) == ["op", "target", "value"]
    assert op == raw and raw == op, "an op equals the dict of its fields"
    assert json.loads(json.dumps(program.to_wire()))["ops"] == [{"op": "fill", "target": "w", "value": 3.0}]


def test_an_op_survives_pickle_and_deepcopy():
    (op,) = check_program(W, [{"op": "write", "target": "w", "index": 1, "value": [5.0]}])
    for back in (pickle.loads(pickle.dumps(op)), copy.deepcopy(op), copy.copy(op)):
        assert type(back) is ops.Op and back == op and back.index == 1


def test_the_wire_parser_makes_ops():
    op = parse_op({"op": "scale", "target": "w", "factor": 2})
    assert type(op) is ops.Op and op.factor == 2.0


def test_a_kind_outside_the_table_has_no_fields():
    op = ops.Op({"op": "_fault", "note": "x"})
    assert op.kind == "_fault" and op["note"] == "x"
    with pytest.raises(AttributeError, match="its fields: none"):
        _ = op.note


# ------------------------------------------------------------------------------------------------
# The rule: outside harness/case, an op is read by field name.


def keyed_reads(source: str) -> list[str]:
    """Where ``source`` reads an op by a key string: ``op["x"]``, ``op.get("x")``, and the same on
    an element of a program's ops (``program.ops[i]["x"]``). A variable named ``op``, or
    ``<something>_op``, is an op by the project's naming."""

    def is_op(node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id == "op" or node.id.endswith("_op")
        return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "ops"

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and is_op(node.value):
            key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and is_op(node.func.value)
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_rule_finds_a_planted_keyed_read():
    planted = 'def f(op, program):\n    return op["target"], op.get("of"), program.ops[0]["op"], step_op["lr"]\n'
    assert len(keyed_reads(planted)) == 4
    assert keyed_reads("def f(op, f):\n    return op.target, op[f.name], raw['op']\n") == []


def test_no_module_outside_the_case_package_reads_an_op_by_a_key_string():
    case = ROOT / "harness" / "case"
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sorted((ROOT / "harness").rglob("*.py"))
        if case not in path.parents and (found := keyed_reads(path.read_text()))
    }
    assert offenders == {}, "read the op's field by name (op.target), not by key"
