"""How the oracle names a value finding by the relations between names
(``harness.judging.links``): across relations a rebinding ended, at a step, and between two
names whose chains meet only at a common source. Hand-written traces (harness logic: no framework
runs here), with the helpers of ``tests/unit/judging/test_oracle.py``.
"""

from __future__ import annotations

from harness.judging import rules
from harness.judging.links import write_path
from harness.judging.oracle import compare
from harness.judging.verdicts import made_before, made_by
from harness.targets.trace import Trace
from tests.support.traces import P0, STEP, A, B, program, trace


def test_a_write_reaching_a_sibling_view_of_a_rebound_source_names_the_written_views_relation():
    # s0 = detach(b0), s1 = alias(b0), then b0 = neg(b0): a write into s0 reaches s1 on alpha
    # (two views of the old b0) and not on beta (values). No chain links s0 and s1 but their
    # common source, whose name was bound again: the relation the write left s0 by is the link.
    prog = program(
        {"b0": {"kind": "buffer", "value": [1.0]}},
        [
            {"op": "snapshot", "name": "s0", "of": "b0", "method": "detach"},
            {"op": "snapshot", "name": "s1", "of": "b0", "method": "alias"},
            {"op": "map", "target": "b0", "fn": "neg"},
            {"op": "write", "target": "s0", "value": [0.0]},
        ],
    )
    a = trace(A, {"b0": [1.0]}, [{"s0": [1.0]}, {"s1": [1.0]}, {"b0": [-1.0]}, {"s0": [0.0], "s1": [0.0]}])
    b = trace(B, {"b0": [1.0]}, [{"s0": [1.0]}, {"s1": [1.0]}, {"b0": [-1.0]}, {"s0": [0.0]}])
    [f] = compare(prog, {A: a, B: b})
    assert f.signature == "value|alpha:cpu~beta:cpu|value|detach@map:neg|write:whole|changed~unchanged"
    assert f.subject == "s1"


def test_a_step_reaching_an_alias_of_a_params_rebound_source_names_the_replace():
    # p0 = nn.Parameter(b0) (alpha: over b0's storage; beta: a copy), s0 = alias(b0), then
    # b0 = neg(b0): the step moves s0 on alpha only, through the param's link to the old b0.
    prog = program(
        {"p0": {"kind": "param", "value": [0.0]}, "b0": {"kind": "buffer", "value": [0.0]}},
        [
            {"op": "replace", "target": "p0", "value": "b0"},
            {"op": "snapshot", "name": "s0", "of": "b0", "method": "alias"},
            {"op": "map", "target": "b0", "fn": "neg"},
            STEP,
        ],
    )
    a = trace(
        A, {"p0": [0.0], "b0": [0.0]}, [{"p0": [0.0]}, {"s0": [0.0]}, {"b0": [-0.0]}, {"p0": [-1.0], "s0": [-1.0]}]
    )
    b = trace(B, {"p0": [0.0], "b0": [0.0]}, [{"p0": [0.0]}, {"s0": [0.0]}, {"b0": [-0.0]}, {"p0": [-1.0]}])
    [f] = compare(prog, {A: a, B: b})
    assert f.signature == "value|alpha:cpu~beta:cpu|value|replace:new@map:neg|step:sgd|changed~unchanged"
    assert f.subject == "s0"


def test_a_step_reaching_a_clone_of_a_clone_whose_middle_was_rebound_names_the_first_clone():
    # s0 = clone(p0), s1 = clone(s0), s0 grown by an append, s2 = alias(s1): on alpha clones share
    # their source's storage, so the step moves s1 (and s2 with it); on beta none of them moves.
    # s1's relations ended at the append: the first of them, s1's clone, carried the step.
    prog = program(
        P0,
        [
            {"op": "snapshot", "name": "s0", "of": "p0", "method": "clone"},
            {"op": "snapshot", "name": "s1", "of": "s0", "method": "clone"},
            {"op": "append", "target": "s0", "source": "p0"},
            {"op": "snapshot", "name": "s2", "of": "s1", "method": "alias"},
            STEP,
        ],
    )
    a = trace(
        A,
        {"p0": [0.0]},
        [{"s0": [0.0]}, {"s1": [0.0]}, {"s0": [0.0, 0.0]}, {"s2": [0.0]}, {"p0": [-1.0], "s1": [-1.0], "s2": [-1.0]}],
        same={"s0": "p0", "s1": "p0", "s2": "p0"},
    )
    b = trace(B, {"p0": [0.0]}, [{"s0": [0.0]}, {"s1": [0.0]}, {"s0": [0.0, 0.0]}, {"s2": [0.0]}, {"p0": [-1.0]}])
    found = compare(prog, {A: a, B: b})
    assert "value|alpha:cpu~beta:cpu|value|clone|step:sgd|changed~unchanged" in [f.signature for f in found]
    assert not any(f.aspect == "verdict" and f.method == "alias" for f in found)


def test_a_snapshot_of_a_sibling_that_saw_it_move_on_one_side_is_the_siblings_finding():
    # s0 = detach(b0), s1 = alias(b0), s2 = expand(s1), then b0 = neg(b0): a write into s0 moves
    # s1 and s2 on alpha (views of the old b0) and neither on beta (values). s2 follows s1 on
    # alpha and sees no change on beta, but s2's relation is not why: s1 moved with its sibling.
    prog = program(
        {"b0": {"kind": "buffer", "value": [1.0]}},
        [
            {"op": "snapshot", "name": "s0", "of": "b0", "method": "detach"},
            {"op": "snapshot", "name": "s1", "of": "b0", "method": "alias"},
            {"op": "snapshot", "name": "s2", "of": "s1", "method": "expand"},
            {"op": "map", "target": "b0", "fn": "neg"},
            {"op": "write", "target": "s0", "value": [0.0]},
        ],
    )
    a = trace(
        A,
        {"b0": [1.0]},
        [{"s0": [1.0]}, {"s1": [1.0]}, {"s2": [1.0]}, {"b0": [-1.0]}, {"s0": [0.0], "s1": [0.0], "s2": [0.0]}],
    )
    b = trace(B, {"b0": [1.0]}, [{"s0": [1.0]}, {"s1": [1.0]}, {"s2": [1.0]}, {"b0": [-1.0]}, {"s0": [0.0]}])
    [f] = compare(prog, {A: a, B: b})
    assert f.signature == "value|alpha:cpu~beta:cpu|value|detach@map:neg|write:whole|changed~unchanged"
    assert f.subject == "s1"
    assert f.rule == rules.COMMON_SOURCE_CARRIES_THE_WRITE.name


def test_a_sibling_that_is_another_names_object_on_one_side_leaves_the_verdict_the_finding():
    # s0 = unsqueeze(p0), s1 = clone(p0), then p0 = replace(s1): on alpha a clone is p0's own
    # object (candle's Var), so the new p0 is the old one, and a write through s0 moves s1 and p0.
    # s1 and the old p0 are one object there, not siblings of a common source: the relation the
    # new p0 has to s1 (its replace) is the finding, not the view s0 was made by.
    prog = program(
        P0,
        [
            {"op": "snapshot", "name": "s0", "of": "p0", "method": "unsqueeze"},
            {"op": "snapshot", "name": "s1", "of": "p0", "method": "clone"},
            {"op": "replace", "target": "p0", "value": "s1"},
            {"op": "write", "target": "s0", "value": [1.0]},
        ],
    )
    a = trace(
        A,
        {"p0": [0.0]},
        [{"s0": [0.0]}, {"s1": [0.0]}, {"p0": [0.0]}, {"s0": [1.0], "s1": [1.0], "p0": [1.0]}],
        same={"s1": "p0"},
    )
    b = trace(B, {"p0": [0.0]}, [{"s0": [0.0]}, {"s1": [0.0]}, {"p0": [0.0]}, {"s0": [1.0]}])
    found = compare(prog, {A: a, B: b})
    assert not any(f.method and f.method.startswith("unsqueeze") for f in found), [f.signature for f in found]
    assert "framework|alpha:cpu~beta:cpu|verdict|replace:new|write|follows~none" in [f.signature for f in found]


def test_a_load_into_two_names_that_are_one_object_on_one_side_is_that_identitys_finding():
    # p0 = replace(p1) makes p0 p1's own object on alpha (candle's Var::from_tensor of a Var) and a
    # new one on beta; a load then writes both entries into that one object on alpha, the last in
    # the load's order (p0's here), and moves p1 there only. The identity divergence is the cause:
    # neither a clone of p1 that kept its value nor p1's own change is a finding of its own.
    prog = program(
        {"p0": {"kind": "param", "value": [0.0]}, "p1": {"kind": "param", "value": [1.0]}},
        [
            {"op": "save", "name": "c"},
            {"op": "replace", "target": "p0", "value": "p1"},
            {"op": "snapshot", "name": "s0", "of": "p1", "method": "clone"},
            {"op": "load", "from": "c"},
        ],
    )
    saved = {"c.p0": [0.0], "c.p1": [1.0]}
    a = _with_p0_as_p1_from(1, [saved, {"p0": [1.0]}, {"s0": [1.0]}, {"p0": [0.0], "p1": [0.0]}])
    b = trace(B, {"p0": [0.0], "p1": [1.0]}, [saved, {"p0": [1.0]}, {"s0": [1.0]}, {"p0": [0.0]}])
    found = compare(prog, {A: a, B: b})
    assert [f.signature for f in found] == ["framework|alpha:cpu~beta:cpu|identity|replace:new|replace|same~distinct"]


def _with_p0_as_p1_from(at: int, steps: list) -> Trace:
    """An alpha trace (``tests.test_oracle.trace``'s observations) where p0 is p1's object from
    step ``at`` on: the helper's ``same`` would make them one from the start."""

    def obs(name, value, step):
        token = "p1" if name == "p0" and step >= at else name
        return {
            "shape": [len(value)],
            "value": value,
            "device": "cpu",
            "requires_grad": None,
            "identity": f"{A}:{token}",
            "initialized": True,
        }

    return Trace.from_wire(
        A,
        {
            "status": "ok",
            "initial": {"p0": obs("p0", [0.0], -1), "p1": obs("p1", [1.0], -1)},
            "steps": [
                {"status": "ok", "changed": {n: obs(n, v, i) for n, v in s.items()}} for i, s in enumerate(steps)
            ],
        },
    )


def test_the_latest_relation_made_before_an_op_is_the_one_a_name_has():
    # s = flip(p0), p0.data = s, then p0.data = b: p0 has two relations as the name they bound,
    # and from op 2 on the later one (over b) is what p0 shares; s keeps the one op 0 made.
    prog = program(
        {"p0": {"kind": "param", "value": [0.0]}, "b": {"kind": "buffer", "value": [1.0]}},
        [
            {"op": "snapshot", "name": "s", "of": "p0", "method": "flip"},
            {"op": "replace", "target": "p0", "value": "s", "how": "data"},
            {"op": "replace", "target": "p0", "value": "b", "how": "data"},
            {"op": "write", "target": "p0", "value": [2.0]},
        ],
    )
    assert made_before(prog, 0) == ()
    assert [(r.name, r.source, r.op) for r in made_before(prog, 3)] == [("p0", "b", 2), ("p0", "s", 1), ("s", "p0", 0)]
    assert made_by(prog, 1, "p0") is None and made_by(prog, 2, "p0").source == "s"
    assert made_by(prog, 3, "p0").source == "b" and made_by(prog, 3, "s").method == "flip"
    assert write_path(prog, 3) == ["p0", "b"]  # through the latest relation, not the one over s
