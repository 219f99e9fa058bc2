"""The case format: parsing, canonical form, round trips, and one-line errors for bad input."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from harness.case.case_file import dump_case, load_case, parse_case
from harness.case.ir import CaseError
from harness.case.ops import snapshot_shape
from tests.conftest import CASES, run_cli_in_process
from tests.support.cases import BAD_CASES

ALL_CASES = sorted(CASES.glob("*.toml"))


def test_bundled_cases_cover_every_op_and_method():
    from harness.case.ops import METHODS, OP_KINDS

    ops, methods = set(), set()
    for path in ALL_CASES:
        for op in load_case(path).ops:
            ops.add(op["op"])
            if op["op"] == "snapshot":
                methods.add(op["method"])
            if op["op"] == "step":
                ops.add(f"step:{op['optimizer']}")
            if op["op"] == "move":
                ops.add(f"move:{op['method']}:{op['device']}")
    assert set(OP_KINDS) <= ops
    assert set(METHODS) <= methods
    assert {"step:sgd", "step:sgd_momentum", "step:adam", "step:adamw"} <= ops
    assert {"move:to:home", "move:to:alt", "move:fork:cpu"} <= ops


@pytest.mark.parametrize("path", ALL_CASES, ids=lambda p: p.name)
def test_round_trip(path: Path):
    program = load_case(path)
    again = parse_case(tomllib.loads(dump_case(program)))
    assert again.key() == program.key()
    assert again.title == program.title


def test_defaults_are_filled_in():
    program = load_case(CASES / "example_sgd_snapshots.toml")
    step = program.ops[1]
    assert step == {
        "op": "step",
        "optimizer": "sgd",
        "lr": 0.5,
        "momentum": 0.0,
        "dampening": 0.0,
        "betas": [0.9, 0.999],
        "eps": 1e-8,
        "weight_decay": 0.0,
    }
    assert program.ops[3]["value"] == [7.0, 7.0] and program.ops[3]["index"] == 0
    assert program.tensor("buf").shape == (2, 2)


def test_snapshot_shapes():
    assert snapshot_shape("reshape", (2, 3)) == (6,)
    assert snapshot_shape("view_row", (2, 3)) == (1, 3)
    assert snapshot_shape("transpose", (4, 2, 3)) == (4, 3, 2)
    assert snapshot_shape("clone", (2, 3)) == (2, 3)


@pytest.mark.parametrize("name", sorted(BAD_CASES))
def test_bad_case_in_process(tmp_path: Path, name: str):
    text, where, fragment = BAD_CASES[name]
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    with pytest.raises(CaseError) as info:
        load_case(path)
    message = str(info.value)
    assert message.startswith(str(path))
    assert where in message and fragment in message
    assert "\n" not in message


@pytest.mark.parametrize("name", ["bad_toml", "unknown_op", "unknown_name", "shape_mismatch", "missing_field"])
def test_bad_case_cli_one_line_exit_2(tmp_path: Path, name: str):
    text, where, fragment = BAD_CASES[name]
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    result = run_cli_in_process("repro", str(path), "--targets", "torch:cpu")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(path) in lines[0] and where in lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_missing_file_is_one_line(tmp_path: Path):
    result = run_cli_in_process("repro", str(tmp_path / "absent.toml"))
    assert result.returncode == 2
    assert "absent.toml" in result.stderr and "cannot read" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_program_key_is_computed_once_and_not_carried_to_a_changed_program():
    import pickle
    from dataclasses import replace

    program = load_case(CASES / "example_sgd_snapshots.toml")
    key = program.key()
    assert program.key() is key  # cached
    shorter = program.with_ops(program.ops[:1])
    assert shorter.key() != key and shorter.key() == parse_case(tomllib.loads(dump_case(shorter))).key()
    assert replace(program, title="another title").key() == key  # metadata is not part of it
    assert pickle.loads(pickle.dumps(program)) == program and pickle.loads(pickle.dumps(program)).key() == key
