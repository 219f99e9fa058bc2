"""The metamorphic oracle's own logic: inert groups, variants, pairs, shrinking and case files.

Divergences come from the TEST DOUBLE fake probe's ``--planted-inert-read`` switch: a ``read`` of
a param makes later sgd steps leave it alone, an inert op that changes the run. The real
frameworks' metamorphic findings are tested in tests/probes/test_metamorphic_real.py.

The tests of this subject that run in-process are in tests/unit/judging/test_metamorphic.py.
"""

from __future__ import annotations

import pytest

from generators.programs import Profile
from harness.case.case_file import dump_case, parse_case
from harness.case.inert import check_inert, without
from harness.case.ir import Program, TensorDecl
from harness.fuzzing import variants
from harness.fuzzing.baseline import Baseline
from harness.fuzzing.engine import Engine
from harness.fuzzing.generation import generate
from harness.judging.metamorphic import compare_inert
from harness.targets.runner import Runner
from tests.fakes.targets import fake_target
from tests.support.metamorphic import READ_THEN_STEP, STEP, B, W, program

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python < 3.11
    import tomli as tomllib


@pytest.fixture(scope="module")
def planted():
    r = Runner([fake_target("ref", "--planted-inert-read")])
    yield r
    r.close()


@pytest.fixture(scope="module")
def clean():
    r = Runner([fake_target("ref")])
    yield r
    r.close()


# ------------------------------------------------------------------------------------------------
# The comparison, on the fake probe.


def test_the_planted_inert_read_is_a_metamorphic_value_finding(planted):
    found = variants.pair_findings([READ_THEN_STEP], planted.run, None)[0]
    assert len(found) == 1
    f = found[0]
    assert f.signature == "metamorphic|fake:ref~fake:ref|value|+read|step:sgd|unchanged~changed"
    assert (f.op_index, f.subject, f.inert, f.values) == (2, "w", (1,), ("[1., 2.]", "[0., 1.]"))
    assert f.sentence() == (
        "On fake:ref, after op 2 (`step:sgd`), w stayed [1., 2.] with the inert `read` "
        "(op 1) but changed to [0., 1.] without it."
    )


def test_a_clean_target_agrees_with_itself(clean):
    assert variants.pair_findings([READ_THEN_STEP], clean.run, None) == [[]]
    drawn = generate(40, 3, "default")
    batch, pairs = variants.plan(drawn, 1.0)
    results = clean.run(batch)
    assert variants.judge(pairs, results, lambda t: False) == []


def test_a_status_difference_is_found(clean):
    # The comparison itself, on hand-made traces: the group's run fails an op the other runs.
    with_t = clean.run_one(READ_THEN_STEP)
    without_t = clean.run_one(without(READ_THEN_STEP, check_inert(READ_THEN_STEP, [1])))
    tr = with_t["fake:ref"]
    tr.steps[2] = type(tr.steps[2])("error", "planted by the test", tr.steps[2].changed)
    tr._states = None
    f = compare_inert(READ_THEN_STEP, check_inert(READ_THEN_STEP, [1]), with_t, without_t)[0]
    assert (f.aspect, f.op_label, f.sides) == ("status", "step:sgd", ("error", "ok"))
    assert f.agrees is None and f.signature.endswith("|error~ok")
    # A reference that ran the op to ok agrees with the run without the group.
    reference = clean.run_one(READ_THEN_STEP)["fake:ref"]
    g = compare_inert(READ_THEN_STEP, check_inert(READ_THEN_STEP, [1]), {**with_t, "torch:cpu": reference}, without_t)[
        0
    ]
    assert (g.aspect, g.agrees) == ("status", "without") and g.signature.endswith("|error~ok|agrees:without")
    assert "torch agrees with the run without it. planted by the test" in g.sentence()


def padded_read() -> Program:
    """The planted read (op 2, the case's inert group) among ops that play no part in it."""
    return program(
        [W, B, TensorDecl("x", "param", (3,), (1.0, 1.0, 1.0))],
        [
            {"op": "snapshot", "name": "s", "of": "b", "method": "clone"},
            {"op": "fill", "target": "b", "value": 3.0},
            {"op": "read", "target": "w"},
            {"op": "scale", "target": "x", "factor": 2.0},
            STEP,
            {"op": "snapshot", "name": "t", "of": "x", "method": "detach"},
        ],
        inert=(2,),
    )


def test_engine_finds_shrinks_and_confirms_a_metamorphic_finding(planted):
    engine = Engine(planted, Baseline([]), shrink_time_s=60, metamorphic_share=1.0)
    padded = padded_read()
    recorded = []
    engine.record(
        [(padded, planted.run_one(padded), variants.pair_findings([padded], planted.run, None)[0])], recorded.append
    )
    rec = next(r for r in recorded if r.finding.kind == "metamorphic")
    m = rec.minimized
    assert [op["op"] for op in m.ops] == ["read", "step"] and m.inert == (0,)
    assert [t.name for t in m.tensors] == ["p0"]
    assert rec.status == "new" and rec.confirmed == (3, 3)
    # Its case file names the group; read back, it is the same case and shows the same finding.
    back = parse_case(tomllib.loads(dump_case(m)))
    assert back == m and back.inert == (0,)
    assert [f.signature for f in variants.pair_findings([back], planted.run, None)[0]] == [rec.signature]


#: The ops the fake probe implements, reads and steps often: the planted bug needs a read of a
#: param and a later sgd step, which default programs (every op kind, four optimizers) hold in
#: about one variant in 200.
FAKE_OPS = Profile(
    "fake-ops",
    max_ops=10,
    layer_probability=0.0,
    weights=(("snapshot", 3), ("write", 2), ("fill", 1), ("scale", 1), ("step", 4), ("read", 3)),
)


def test_campaign_pairs_find_the_planted_read(planted):
    engine = Engine(planted, Baseline([]), shrink_time_s=0, metamorphic_share=1.0, confirm_runs=0)
    found = engine.check(generate(200, 8, FAKE_OPS))
    kinds = {f.kind for _, _, fs in found for f in fs}
    assert "metamorphic" in kinds
    assert engine.variants_run >= 150
    assert engine.programs_run == 200  # the variants are counted apart, in variants_run


def test_only_an_entry_naming_the_metamorphic_kind_knows_a_metamorphic_finding(planted):
    from harness.fuzzing.baseline import KnownDivergence

    f = variants.pair_findings([READ_THEN_STEP], planted.run, None)[0][0]
    broad = KnownDivergence("any-step", "r", "c.toml", op="step:*")  # kind "*": a differential entry
    assert not broad.matches(f)
    assert KnownDivergence("meta", "r", "c.toml", kind="metamorphic", op="step:*").matches(f)
    assert not KnownDivergence("meta-glob", "r", "c.toml", kind="meta*", op="step:*").matches(f)


@pytest.mark.parametrize("until", [4, 20])
def test_a_finding_the_minimized_case_does_not_show_again_keeps_the_program_as_found(planted, until):
    # TEST DOUBLE: the fake's planted read works only in a process's first `until` programs, so
    # the shrinker sees the divergence for a while and the run after shrinking does not. The case
    # is then the program as found, whose ops its inert group names (a minimized program with the
    # found program's indices named the wrong op, or none: the campaign died in confirm).
    padded = padded_read()
    found = variants.pair_findings([padded], planted.run, None)[0]
    assert found
    fading = Runner([fake_target("ref", "--planted-inert-read", "--planted-inert-read-until", str(until))])
    try:
        engine = Engine(fading, Baseline([]), shrink_time_s=20, metamorphic_share=1.0, confirm_runs=3)
        recorded = []
        engine.record([(padded, planted.run_one(padded), found)], recorded.append)
    finally:
        fading.close()
    assert [r.finding.kind for r in recorded] == ["metamorphic"], [r.signature for r in recorded]
    rec = recorded[0]
    assert rec.minimized == padded and check_inert(rec.minimized, rec.minimized.inert).ops == (2,)
    assert rec.confirmed == (3, 3) and rec.status == "new"  # fresh processes: the first programs again


# ------------------------------------------------------------------------------------------------
# Agreement with the reference framework: which run of the target holds what torch holds.


def with_a_reference(run_with: dict, reference_trace) -> dict:
    """``run_with`` plus ``reference_trace`` under the reference framework's primary target id.
    TEST DOUBLE: a fake target's trace stands in for torch's here, to test the oracle's logic."""
    return {**run_with, "torch:cpu": reference_trace}


def planted_pair(planted):
    group = check_inert(READ_THEN_STEP, [1])
    return group, planted.run_one(READ_THEN_STEP), planted.run_one(without(READ_THEN_STEP, group))


def test_a_reference_that_holds_the_run_without_the_group_says_the_group_broke_agreement(planted, clean):
    group, with_t, without_t = planted_pair(planted)
    reference = clean.run_one(READ_THEN_STEP)["fake:ref"]  # steps w: [0., 1.], as without the read
    [f] = compare_inert(READ_THEN_STEP, group, with_a_reference(with_t, reference), without_t)
    assert f.agrees == "without"
    assert f.signature == "metamorphic|fake:ref~fake:ref|value|+read|step:sgd|unchanged~changed|agrees:without"
    assert f.sentence().endswith("but changed to [0., 1.] without it. torch agrees with the run without it.")
    assert f.to_json()["agrees"] == "without"


def test_a_reference_that_holds_the_run_with_the_group_and_one_without_a_verdict(planted):
    group, with_t, without_t = planted_pair(planted)
    [f] = compare_inert(READ_THEN_STEP, group, with_a_reference(with_t, with_t["fake:ref"]), without_t)
    assert f.agrees == "with" and f.signature.endswith("|agrees:with")
    # The reference's own op failed: no evidence either way, and the signature has no agreement.
    failed = planted.run_one(READ_THEN_STEP)["fake:ref"]
    failed.steps[2] = type(failed.steps[2])("error", "planted by the test", failed.steps[2].changed)
    failed._states = None
    [g] = compare_inert(READ_THEN_STEP, group, with_a_reference(with_t, failed), without_t)
    assert g.agrees is None and g.signature == "metamorphic|fake:ref~fake:ref|value|+read|step:sgd|unchanged~changed"


def test_a_baseline_entry_can_name_the_agreement(planted, clean):
    from harness.fuzzing.baseline import KnownDivergence

    group, with_t, without_t = planted_pair(planted)
    reference = clean.run_one(READ_THEN_STEP)["fake:ref"]
    [broke] = compare_inert(READ_THEN_STEP, group, with_a_reference(with_t, reference), without_t)
    [alone] = compare_inert(READ_THEN_STEP, group, with_t, without_t)
    restores = KnownDivergence("restores", "r", "c.toml", kind="metamorphic", agrees=("with", "-"))
    assert not restores.matches(broke) and restores.matches(alone)
    assert KnownDivergence("any", "r", "c.toml", kind="metamorphic").matches(broke)
