"""The oracle against a target that observes only after a compiled run's last op (torch's
``graph`` variant: ``StepResult.fused``), on hand-written traces (harness logic: no framework
runs here). ``alpha:cpu`` observes after every op; ``beta:cpu`` stands for the graph variant.
"""

from __future__ import annotations

from harness.judging.oracle import compare
from tests.support.traces import P0, A, B, program, trace

#: A clone of p0, a write into p0 and a read: the first two one compiled run on beta.
RUN = [
    {"op": "snapshot", "name": "s0", "of": "p0", "method": "clone"},
    {"op": "write", "target": "p0", "value": [1.0]},
    {"op": "read", "target": "p0"},
]


def test_a_run_observed_at_its_end_agrees_with_the_same_ops_observed_one_by_one():
    prog = program(P0, RUN)
    a = trace(A, {"p0": [0.0]}, [{"s0": [0.0]}, {"p0": [1.0]}, {}])
    b = trace(B, {"p0": [0.0]}, [{}, {"s0": [0.0], "p0": [1.0]}, {}], fused={0})
    assert compare(prog, {A: a, B: b}) == []


def test_a_divergence_inside_a_run_is_found_at_the_runs_write():
    # On beta the clone follows the write made in the same run: compared after the run, and
    # named by the write that reached the clone.
    prog = program(P0, RUN)
    a = trace(A, {"p0": [0.0]}, [{"s0": [0.0]}, {"p0": [1.0]}, {}])
    b = trace(B, {"p0": [0.0]}, [{}, {"s0": [1.0], "p0": [1.0]}, {}], fused={0})
    (f,) = compare(prog, {A: a, B: b})
    assert f.op_index == 1 and f.subject == "s0"
    # s0 is first observed after the run on both sides: new on both, with other values, named by
    # the clone that made it in the run
    assert f.signature == "value|alpha:cpu~beta:cpu|value|clone|write:whole|changed~changed"


def test_a_finding_after_a_run_names_the_write_that_reached_its_subject_not_the_runs_last_op():
    # The run is the write and a snapshot of another tensor: the snapshot ends it, the write made
    # the divergence.
    tensors = {**P0, "p1": {"kind": "param", "value": [5.0]}}
    ops = [
        {"op": "snapshot", "name": "s0", "of": "p0", "method": "clone"},
        {"op": "read", "target": "p0"},
        {"op": "write", "target": "p0", "value": [1.0]},
        {"op": "snapshot", "name": "s1", "of": "p1", "method": "clone"},
    ]
    prog = program(tensors, ops)
    a = trace(A, {"p0": [0.0], "p1": [5.0]}, [{"s0": [0.0]}, {}, {"p0": [1.0]}, {"s1": [5.0]}])
    b = trace(
        B, {"p0": [0.0], "p1": [5.0]}, [{"s0": [0.0]}, {}, {}, {"p0": [1.0], "s0": [1.0], "s1": [5.0]}], fused={2}
    )
    (f,) = compare(prog, {A: a, B: b})
    assert f.op_index == 2 and f.subject == "s0"
    assert f.signature == "framework|alpha:cpu~beta:cpu|verdict|clone|write|keeps~follows"


def test_a_name_a_run_changed_and_changed_back_is_unchanged_after_it():
    # alpha sees p0 written and written back; beta, observing after the run, sees nothing change.
    prog = program(
        P0,
        [
            {"op": "write", "target": "p0", "value": [1.0]},
            {"op": "write", "target": "p0", "value": [0.0]},
            {"op": "read", "target": "p0"},
        ],
    )
    a = trace(A, {"p0": [0.0]}, [{"p0": [1.0]}, {"p0": [0.0]}, {}])
    b = trace(B, {"p0": [0.0]}, [{}, {}, {}], fused={0})
    coarse = a.coarsened(b.unobserved)
    assert [dict(s.changed) for s in coarse.steps] == [{}, {}, {}]
    assert coarse.steps[0].fused and not coarse.steps[1].fused
    assert compare(prog, {A: a, B: b}) == []
