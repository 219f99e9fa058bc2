"""Lazy init from the program's one generator (``init = "program_rng"``), on the real targets.

Each lazy tensor of this init draws uniform values in [-1, 1) from one generator per program,
seeded once (``PROGRAM_SEED``) when the program opens. What each framework documents:

- burn (burn-core 0.22.1 module/param/base.rs): a lazy ``Param`` runs its init on the first
  ``val()``; the backend's generator (``Device::seed``) is shared, so the param read first takes
  the first values, whatever the declaration order (burn-nn's Initializer docs). Clones of an
  uninitialised param share its lazy state (burn#5045, the fix of burn#5040): a module clone made
  before the first read initialises once, with the original.
- torch has no lazy parameters: every tensor is created when the program opens, in declaration
  order, from ``torch.Generator().manual_seed(PROGRAM_SEED)`` (``Tensor.uniform_(generator=)``).
- candle's CPU backend cannot be seeded (``Device::set_seed``: "cannot seed the CPU rng with
  set_seed"): the probe refuses the whole program (trace status ``unsupported``) and the oracle
  leaves candle out of that program's comparisons.

The oracle compares these values within one target only (``links.unreproducible_names`` leaves
them in the metamorphic oracle's comparison; ``links.nondeterministic_names`` takes them out of
the comparison of two targets).

The tests here run in this process, as the
unit tier requires; those that need the real frameworks are in tests/probes/test_program_rng.py.
"""

from __future__ import annotations

import tomllib
from dataclasses import replace

import pytest

from harness.case import inert
from harness.case.case_file import FORMAT, dump_case, parse_case
from harness.case.ir import CaseError, Program, TensorDecl, check_program
from harness.judging.links import nondeterministic_names, unreproducible_names

L0, L1 = TensorDecl("l0", "lazy", (2,), init="program_rng"), TensorDecl("l1", "lazy", (3,), init="program_rng")


def _program(*ops: dict, tensors=(L0, L1)) -> Program:
    return Program(tuple(tensors), check_program(tuple(tensors), list(ops)))


def _reads(*names: str) -> list[dict]:
    return [{"op": "read", "target": n} for n in names]


def test_values_of_the_program_generator_are_compared_within_a_target_only():
    program = _program({"op": "snapshot", "name": "s0", "of": "l0", "method": "clone"}, *_reads("l1"))
    assert {"l0", "s0", "l1"} <= nondeterministic_names(program)
    assert unreproducible_names(program) == frozenset()
    uniform = replace(L0, init="uniform", seed=3)
    assert unreproducible_names(_program(*_reads("l0"), tensors=(uniform,))) == {"l0"}


def test_a_read_or_a_snapshot_of_a_program_generator_tensor_is_not_inert():
    # Its first read takes the generator's next values: removing it moves every later draw.
    program = _program(
        {"op": "module_clone", "name": "m"},
        {"op": "read", "target": "l0"},
        {"op": "snapshot", "name": "s", "of": "l1", "method": "clone"},
    )
    assert [g.label for g in inert.inert_ops(program)] == ["module_clone"]
    # Nor is a snapshot of a snapshot of one (burn's alias of a lazy param shares its lazy state).
    program = _program(
        {"op": "snapshot", "name": "s0", "of": "l0", "method": "alias"},
        {"op": "snapshot", "name": "s1", "of": "s0", "method": "clone"},
        *_reads("l1"),
    )
    assert inert.inert_ops(program) == []


def test_a_case_file_round_trips_and_refuses_a_seed_for_the_program_generator(tmp_path):
    program = _program(*_reads("l1"))
    assert parse_case(tomllib.loads(dump_case(program))).key() == program.key()
    doc = {
        "format": FORMAT,
        "tensors": {"l": {"kind": "lazy", "shape": [2], "init": "program_rng", "seed": 1}},
        "ops": [],
    }
    with pytest.raises(CaseError, match=r"tensors\.l\.seed: .*program's one generator: no seed"):
        parse_case(doc, tmp_path / "c.toml")
