"""The metamorphic oracle's own logic: inert groups, variants, pairs, shrinking and case files.

Divergences come from the TEST DOUBLE fake probe's ``--planted-inert-read`` switch: a ``read`` of
a param makes later sgd steps leave it alone, an inert op that changes the run. The real
frameworks' metamorphic findings are tested in tests/probes/test_metamorphic_real.py.

The tests here run in this process, as the
unit tier requires; those that need real processes are in tests/e2e/test_metamorphic.py.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from harness.case.case_file import dump_case, parse_case
from harness.case.inert import check_inert, inert_ops, variant, without
from harness.case.ir import CaseError, TensorDecl
from harness.fuzzing import variants
from harness.fuzzing.generation import generate
from tests.support.metamorphic import READ_THEN_STEP, B, W, program

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python < 3.11
    import tomli as tomllib


U = TensorDecl("u", "lazy", (2,), init="uniform", seed=3)


# ------------------------------------------------------------------------------------------------
# Inert groups, read from the program alone.


def test_inert_groups_by_kind():
    p = program(
        [W, B, U],
        [
            {"op": "snapshot", "name": "s", "of": "w", "method": "clone"},  # used by the write: not inert
            {"op": "snapshot", "name": "t", "of": "b", "method": "contiguous"},  # unused: inert
            {"op": "write", "target": "s", "value": [3.0, 4.0]},
            {"op": "read", "target": "w"},  # deterministic: inert
            {"op": "read", "target": "u"},  # a uniform lazy's read draws from the RNG: not inert
            {"op": "valid"},
            {"op": "train"},  # in training mode: inert together
            {"op": "module_clone", "name": "m"},  # m.w unused: inert
            {"op": "valid"},
            {"op": "valid"},
            {"op": "train"},  # valid, valid, train: the last two are
        ],
    )  # not inert (the model was in eval mode)
    found = [(g.ops, g.label) for g in inert_ops(p)]
    assert found == [((1,), "snapshot:contiguous"), ((3,), "read"), ((5, 6), "valid+train"), ((7,), "module_clone")]
    assert inert_ops(p, "read")[0].ops == (3,)
    assert check_inert(p, [7]).binds == frozenset({"m.w", "m.u"})


def test_a_group_used_later_is_not_inert():
    p = program([W], [{"op": "module_clone", "name": "m"}, {"op": "write", "target": "m.w", "value": [0.0, 0.0]}])
    assert inert_ops(p) == []
    with pytest.raises(ValueError, match="not an inert group"):
        check_inert(p, [0])


def test_variants_are_inert_and_reproducible():
    drawn = generate(60, 11, "default")
    batch, pairs = variants.plan(drawn, 1.0)
    again = variants.plan(drawn, 1.0)[1]
    assert [(p.original, p.inert, p.program.key()) for p in pairs] == [
        (p.original, p.inert, p.program.key()) for p in again
    ]
    assert len(pairs) >= 50 and len(batch) == len(drawn) + len(pairs)
    for pair in pairs:
        assert check_inert(pair.program, pair.program.inert) == pair.inert
        other = batch[pair.extra]
        plain = without(pair.program, pair.inert)
        if pair.inserted:
            assert plain.key() == drawn[pair.original].key() and other.key() == pair.program.key()
        else:
            assert other.key() == plain.key()
    assert {p.inert.label.split(":")[0] for p in pairs} == {"snapshot", "module_clone", "read", "valid+train"}
    assert variants.plan(drawn, 0.0) == (list(drawn), [])


def test_variant_of_an_empty_program_is_an_insertion():
    p = program([W], [])
    made = variant(p, random.Random(1))
    assert made is not None
    with_program, inert = made
    assert without(with_program, inert).key() == p.key()


# ------------------------------------------------------------------------------------------------
# The comparison, on the fake probe.


def test_case_inert_field_is_checked():
    doc = tomllib.loads(dump_case(READ_THEN_STEP))
    assert doc["inert"] == [1]
    for bad, message in (
        ([2], "not an inert group"),
        ([9], "ascending op indices"),
        ("1", "list of op indices"),
        ([2, 1], "ascending"),
    ):
        with pytest.raises(CaseError, match=message) as e:
            parse_case({**doc, "inert": bad}, "case.toml")
        assert "case.toml" in str(e.value) and "inert" in str(e.value)


def test_a_metamorphic_finding_with_an_agreement_is_shrunk_with_its_reference():
    from harness.fuzzing.engine import _targets_for
    from harness.judging.finding import Finding

    ids = ["burn:flex", "burn:ndarray", "candle:cpu", "torch:cpu", "torch:cpu+foreach"]
    f = Finding(
        kind="metamorphic",
        aspect="value",
        targets=("burn:flex", "burn:flex"),
        op_label="step:sgd",
        method="+valid+train",
        sides=("changed", "changed"),
        agrees="without",
    )
    assert _targets_for(f, ids) == ["burn:flex", "torch:cpu"]
    assert _targets_for(replace(f, agrees=None), ids) == ["burn:flex"]
    torch_own = replace(f, targets=("torch:cpu", "torch:cpu"), agrees=None)
    assert _targets_for(torch_own, ids) == ["torch:cpu"]
