"""The oracle's attribution rules, on hand-written traces (harness logic: no framework runs here).

Each trace is written as the states a target would report: ``steps`` lists, per op, the names
whose value changed and their new values. Two made-up targets, ``alpha:cpu`` and ``beta:cpu``,
stand for two frameworks.
"""

from __future__ import annotations

from dataclasses import replace

from harness.judging import rules
from harness.judging.oracle import compare
from harness.targets.trace import Trace
from tests.support.traces import P0, STEP, A, B, program, trace


def test_a_snapshot_moved_by_another_divergent_snapshot_is_not_a_finding_of_its_own():
    # s1 = to_home(s0), s0 = copy(p0): s0 follows p0 on alpha and keeps on beta, so at the step
    # s1's source moves on alpha only. Only s0's relation is the root cause.
    prog = program(
        P0,
        [
            {"op": "snapshot", "name": "s0", "of": "p0", "method": "copy"},
            {"op": "snapshot", "name": "s1", "of": "s0", "method": "to_home"},
            STEP,
        ],
    )
    a = trace(A, {"p0": [0.0]}, [{"s0": [0.0]}, {"s1": [0.0]}, {"p0": [-1.0], "s0": [-1.0], "s1": [-1.0]}])
    b = trace(B, {"p0": [0.0]}, [{"s0": [0.0]}, {"s1": [0.0]}, {"p0": [-1.0]}])
    found = compare(prog, {A: a, B: b})
    assert [f.signature for f in found] == ["framework|alpha:cpu~beta:cpu|verdict|copy|step|follows~keeps"]
    assert found[0].subject == "s0"


def test_a_step_that_trains_a_parameter_on_one_side_only_is_a_value_finding_about_the_step():
    # Nothing differed before the step; the clone keeps on alpha and sees no change on beta
    # because beta's step left p0 alone. That is the step's doing, not the clone's.
    prog = program(P0, [{"op": "snapshot", "name": "s0", "of": "p0", "method": "clone"}, STEP])
    a = trace(A, {"p0": [0.0]}, [{"s0": [0.0]}, {"p0": [-1.0]}])
    b = trace(B, {"p0": [0.0]}, [{"s0": [0.0]}, {}])
    (f,) = compare(prog, {A: a, B: b})
    assert f.signature == "value|alpha:cpu~beta:cpu|value|-|step:sgd|changed~unchanged"
    assert f.subject == "p0" and f.op_index == 1
    assert f.sentence() == "After op 1 (`step:sgd`), p0 changed to [-1.] on alpha:cpu but stayed [0.] on beta:cpu."


def test_a_source_moved_through_an_alias_keeps_the_snapshot_method_in_the_finding():
    # m0.p0 (module_clone) shares p0's storage on alpha only; a fill through s0, a snapshot of
    # m0.p0, moves p0 on alpha only. The op never names p0: the module_clone relation is the
    # finding, and its signature names the method.
    prog = program(
        P0,
        [
            {"op": "module_clone", "name": "m0"},
            {"op": "snapshot", "name": "s0", "of": "m0.p0", "method": "contiguous"},
            {"op": "fill", "target": "s0", "value": 1.0},
        ],
    )
    a = trace(A, {"p0": [0.0]}, [{"m0.p0": [0.0]}, {"s0": [0.0]}, {"p0": [1.0], "m0.p0": [1.0], "s0": [1.0]}])
    b = trace(B, {"p0": [0.0]}, [{"m0.p0": [0.0]}, {"s0": [0.0]}, {"m0.p0": [1.0], "s0": [1.0]}])
    sigs = [f.signature for f in compare(prog, {A: a, B: b})]
    assert sigs == ["framework|alpha:cpu~beta:cpu|verdict|module_clone|write|follows~none"]


def test_a_write_carried_by_one_snapshot_is_not_a_finding_of_its_siblings():
    # s0 = clone(p0) shares p0's storage on alpha only, s1 = detach(p0) shares it on both, and
    # s2 = alias(s0). A write into s2 reaches p0 (and so s1) on alpha only. s0 and s1 both see
    # their source move on one side only; s0 is the link the write went through (s2 -> s0 -> p0),
    # s1 only saw p0 move. Reporting s1 too would blame detach for candle's clone.
    prog = program(
        {"p0": {"kind": "param", "value": [0.0, 0.0]}},
        [
            {"op": "snapshot", "name": "s0", "of": "p0", "method": "clone"},
            {"op": "snapshot", "name": "s1", "of": "p0", "method": "detach"},
            {"op": "snapshot", "name": "s2", "of": "s0", "method": "alias"},
            {"op": "write", "target": "s2", "index": None, "value": [0.0, 1.0]},
        ],
    )
    moved = [0.0, 1.0]
    a = trace(
        A,
        {"p0": [0.0, 0.0]},
        [
            {"s0": [0.0, 0.0]},
            {"s1": [0.0, 0.0]},
            {"s2": [0.0, 0.0]},
            {"p0": moved, "s0": moved, "s1": moved, "s2": moved},
        ],
    )
    b = trace(
        B, {"p0": [0.0, 0.0]}, [{"s0": [0.0, 0.0]}, {"s1": [0.0, 0.0]}, {"s2": [0.0, 0.0]}, {"s0": moved, "s2": moved}]
    )
    found = compare(prog, {A: a, B: b})
    assert [(f.signature, f.subject) for f in found] == [
        ("framework|alpha:cpu~beta:cpu|verdict|clone|write|follows~none", "s0")
    ]


def test_the_link_nearest_the_write_is_the_one_that_carried_it():
    # s0 = reshape(p0) (a view on both), s1 = to_host(s0) (a view on alpha, a copy on beta),
    # s2 = reshape(s1). A write into s2 reaches s1 on both sides and goes on to s0 and p0 on
    # alpha only. s0 and s1 both see their source move on alpha only; the propagation stopped at
    # s1's link on beta (s0 did not move there at all, so its own relation was never tested).
    prog = program(
        {"p0": {"kind": "param", "value": [0.0, 0.0]}},
        [
            {"op": "snapshot", "name": "s0", "of": "p0", "method": "reshape"},
            {"op": "snapshot", "name": "s1", "of": "s0", "method": "to_host"},
            {"op": "snapshot", "name": "s2", "of": "s1", "method": "reshape"},
            {"op": "write", "target": "s2", "index": None, "value": [0.0, 1.0]},
        ],
    )
    zero, moved = [0.0, 0.0], [0.0, 1.0]
    a = trace(
        A,
        {"p0": zero},
        [{"s0": zero}, {"s1": zero}, {"s2": zero}, {"p0": moved, "s0": moved, "s1": moved, "s2": moved}],
    )
    b = trace(B, {"p0": zero}, [{"s0": zero}, {"s1": zero}, {"s2": zero}, {"s1": moved, "s2": moved}])
    found = compare(prog, {A: a, B: b})
    assert [(f.signature, f.subject) for f in found] == [
        ("framework|alpha:cpu~beta:cpu|verdict|to_host|write|follows~none", "s1")
    ]


def test_an_op_whose_effect_differs_after_an_earlier_difference_is_not_a_finding():
    # beta could not scale b0 (unsupported), so b0 already differs when the write comes: that
    # the write then changes b0 on alpha only is a consequence, not a divergence.
    prog = program(
        {"b0": {"kind": "buffer", "value": [1.0]}},
        [
            {"op": "snapshot", "name": "s0", "of": "b0", "method": "clone"},
            {"op": "scale", "target": "b0", "factor": 2.0},
            {"op": "write", "target": "b0", "value": [1.0]},
        ],
    )
    a = trace(A, {"b0": [1.0]}, [{"s0": [1.0]}, {"b0": [2.0]}, {"b0": [1.0]}])
    b = trace(B, {"b0": [1.0]}, [{"s0": [1.0]}, {}, {}], ["ok", "unsupported", "ok"])
    assert compare(prog, {A: a, B: b}) == []


def test_an_op_one_side_could_not_run_explains_a_later_effect_on_a_random_tensor():
    # l0's values come from each framework's RNG, so they are not compared. beta could not scale
    # s0 (a detach of l0) by 0; alpha's scale reached l0 and made it 0, so the later scale by 2
    # changes l0 on beta only: a consequence of the op beta could not run, not a finding.
    prog = program(
        {"l0": {"kind": "lazy", "shape": [1], "init": "uniform", "seed": 0}},
        [
            {"op": "snapshot", "name": "s0", "of": "l0", "method": "detach"},
            {"op": "scale", "target": "s0", "factor": 0.0},
            {"op": "scale", "target": "l0", "factor": 2.0},
        ],
    )
    a = trace(A, {"l0": [0.25]}, [{"s0": [0.25]}, {"l0": [0.0], "s0": [0.0]}, {}])
    b = trace(B, {"l0": [-0.5]}, [{"s0": [-0.5]}, {}, {"l0": [-1.0], "s0": [-1.0]}], ["ok", "unsupported", "ok"])
    assert compare(prog, {A: a, B: b}) == []


def test_a_snapshot_whose_first_difference_is_a_consequence_is_still_judged_on_the_next():
    # beta could not scale p0 (unsupported), so the write of 1.0 changes p0 on alpha only: s0
    # keeps on alpha and sees nothing on beta, a consequence. The fill then shows s0's own
    # divergence: beta's clone shares p0's storage (follows), alpha's keeps.
    prog = program(
        {"p0": {"kind": "param", "value": [1.0]}},
        [
            {"op": "snapshot", "name": "s0", "of": "p0", "method": "clone"},
            {"op": "scale", "target": "p0", "factor": 2.0},
            {"op": "write", "target": "p0", "value": [1.0]},
            {"op": "fill", "target": "p0", "value": 0.0},
        ],
    )
    a = trace(A, {"p0": [1.0]}, [{"s0": [1.0]}, {"p0": [2.0]}, {"p0": [1.0]}, {"p0": [0.0]}])
    b = trace(B, {"p0": [1.0]}, [{"s0": [1.0]}, {}, {}, {"p0": [0.0], "s0": [0.0]}], ["ok", "unsupported", "ok", "ok"])
    found = compare(prog, {A: a, B: b})
    assert [(f.signature, f.subject, f.op_index) for f in found] == [
        ("framework|alpha:cpu~beta:cpu|verdict|clone|write|keeps~follows", "s0", 3)
    ]


def test_a_one_sided_change_within_adam_tolerance_is_not_a_finding():
    # After an Adam step the values agree within tolerance, not bitwise: scaling a tiny value
    # changes it on one side and leaves an exact zero alone on the other.
    prog = program(
        P0,
        [
            {"op": "step", "optimizer": "adam", "lr": 0.1},
            {"op": "snapshot", "name": "s0", "of": "p0", "method": "clone"},
            {"op": "scale", "target": "p0", "factor": 2.0},
        ],
    )
    a = trace(A, {"p0": [0.0]}, [{"p0": [1e-7]}, {"s0": [1e-7]}, {"p0": [2e-7]}])
    b = trace(B, {"p0": [0.0]}, [{}, {"s0": [0.0]}, {}])
    assert compare(prog, {A: a, B: b}) == []


def test_value_signatures_leave_the_values_out():
    def finding(v_alpha, v_beta):
        prog = program(P0, [{"op": "step", "optimizer": "adamw", "lr": 0.1}])
        (f,) = compare(
            prog, {A: trace(A, {"p0": [0.0]}, [{"p0": [v_alpha]}]), B: trace(B, {"p0": [0.0]}, [{"p0": [v_beta]}])}
        )
        return f

    f, g = finding(0.5, 0.25), finding(-3.0, 7.0)
    assert f.signature == g.signature == "value|alpha:cpu~beta:cpu|value|-|step:adamw|changed~changed"
    assert "0.5" in f.sentence() and "0.25" in f.sentence() and "7." in g.sentence()
    assert f.to_json()["values"] == ["[0.5]", "[0.25]"]


LAZY = {"l0": {"kind": "lazy", "shape": [1], "init": "const", "fill": 0.0}}


def test_a_module_clone_of_an_uninitialised_lazy_parameter_keeps_its_value_when_first_given_one():
    # beta initialises lazily: the clone gets the initial value at the step that initialises and
    # trains the model's parameter. It keeps (is not trained), as alpha's deep copy does.
    prog = program(LAZY, [{"op": "module_clone", "name": "m0"}, STEP])
    a = trace(A, {"l0": [0.0]}, [{"m0.l0": [0.0]}, {"l0": [-1.0]}])
    b = trace(B, {"l0": None}, [{"m0.l0": None}, {"l0": [-1.0], "m0.l0": [0.0]}])
    assert compare(prog, {A: a, B: b}) == []


def test_a_lazy_parameter_initialised_by_an_op_on_one_side_only_is_not_a_finding():
    # A clone taken before beta initialises l0 shares the initialisation there (both get their
    # value at the read); on alpha both existed from the start. No op changed anything.
    prog = program(
        {"l0": {"kind": "lazy", "shape": [1], "init": "uniform", "seed": 3}},
        [{"op": "snapshot", "name": "s0", "of": "l0", "method": "clone"}, {"op": "read", "target": "l0"}],
    )
    a = trace(A, {"l0": [0.25]}, [{"s0": [0.25]}, {}])
    b = trace(B, {"l0": None}, [{"s0": None}, {"l0": [-0.5], "s0": [-0.5]}])
    assert compare(prog, {A: a, B: b}) == []


def test_adam_tolerance_is_relative_to_the_tensors_scale_or_the_step_size():
    import numpy as np

    from harness.judging.value_compare import ADAM_RTOL, Tolerance, values_close

    def close(x, y, lr=0.5):
        return values_close(np.array(x, dtype=np.float32), np.array(y, dtype=np.float32), Tolerance(ADAM_RTOL, lr))

    # Two Adam steps of lr 0.5 from [0, 1] (burn against torch): the element that cancels to
    # about zero carries the float32 error of the 1.0-sized operands.
    assert close([-0.9999983, 1.698732e-06], [-0.9999999, 5.960464e-08])
    # Two Adam steps of lr 1 from [2] (burn:flex against torch): 2 - 1 - 0.99999994, the whole
    # tensor about zero; the error is relative to the step taken (lr), not to the result.
    assert close([3.397465e-06], [1.192093e-07], lr=1.0)
    # A tensor that is small throughout, stepped by a small lr, is held to the absolute tolerance.
    assert not close([1.7e-06, 1e-06], [6e-08, 1e-06], lr=1e-3)
    # Differences of semantics (a weight decay applied or not) stay far outside.
    assert not close([0.5, 1.0], [0.24875, 1.0])
    assert not close([-0.999, 0.001], [-1.0, 0.0])
    assert close([float("nan"), 1.0], [float("nan"), 1.0])


def test_a_value_finding_on_a_larger_tensor_names_its_first_differing_element():
    prog = program({"p0": {"kind": "param", "value": [0.0] * 6}}, [{"op": "step", "optimizer": "adamw", "lr": 0.1}])
    (f,) = compare(
        prog,
        {
            A: trace(A, {"p0": [0.0] * 6}, [{"p0": [-0.1, -0.1, 0.5, -0.1, 0.25, -0.1]}]),
            B: trace(B, {"p0": [0.0] * 6}, [{"p0": [-0.1, -0.1, -0.1, -0.1, -0.1, -0.1]}]),
        },
    )
    assert f.signature == "value|alpha:cpu~beta:cpu|value|-|step:adamw|changed~changed"
    assert f.sentence() == "After op 0 (`step:adamw`), p0[2] holds 0.5 on alpha:cpu but -0.1 on beta:cpu."
    assert f.detail.startswith("2 of 6 elements differ. alpha:cpu: [-0.1 ,") and "beta:cpu: [-0.1, -0.1," in f.detail


def test_an_rng_valued_tensor_moved_within_tolerance_on_one_side_only_is_no_finding():
    # The seed-11 campaign crash (IndexError in _value_finding), as the real targets traced it:
    # after a fill, an AdamW step moves the uniform lazy l0 by one float32 ulp on alpha and not
    # at all on beta. Equal within Adam's tolerance: nothing diverged, and nothing raises.
    prog = program(
        {"l0": {"kind": "lazy", "shape": [6], "init": "uniform", "seed": 0}},
        [
            {"op": "fill", "target": "l0", "value": -2.0},
            {"op": "snapshot", "name": "s0", "of": "l0", "method": "clone"},
            {"op": "step", "optimizer": "adamw", "lr": 1.0, "weight_decay": 0.5},
        ],
    )
    filled, moved = [-2.0] * 6, [-1.9999998807907104] * 6
    a = trace(A, {"l0": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]}, [{"l0": filled}, {"s0": filled}, {"l0": moved}])
    b = trace(B, {"l0": [0.6, 0.5, 0.4, 0.3, 0.2, 0.1]}, [{"l0": filled}, {"s0": filled}, {}])
    assert compare(prog, {A: a, B: b}) == []


def test_nothing_after_an_op_that_failed_on_one_side_is_compared():
    # The assign fails on beta (burn consumed p0 into the call that panicked, so beta's step
    # leaves it alone). The error is the finding; the step's different effect is its consequence.
    prog = program(
        P0,
        [
            {"op": "snapshot", "name": "s0", "of": "p0", "method": "to_cpu"},
            {"op": "assign", "target": "p0", "source": "s0"},
            STEP,
        ],
    )
    a = trace(A, {"p0": [0.0]}, [{"s0": [0.0]}, {}, {"p0": [-1.0]}])
    b = trace(B, {"p0": [0.0]}, [{"s0": [0.0]}, {}, {}], ["ok", "error", "ok"])
    assert [f.signature for f in compare(prog, {A: a, B: b})] == [
        "error|alpha:cpu~beta:cpu|status|-|assign:whole|ok~error"
    ]


def test_a_tensor_assigned_from_a_uniform_lazy_one_is_not_compared_by_value():
    # l0's values come from each framework's own generator, and p0 holds them after the assign.
    prog = program(
        {"p0": {"kind": "param", "value": [0.0]}, "l0": {"kind": "lazy", "shape": [1], "init": "uniform", "seed": 1}},
        [{"op": "assign", "target": "p0", "source": "l0"}],
    )
    a = trace(A, {"p0": [0.0], "l0": None}, [{"p0": [0.25], "l0": [0.25]}])
    b = trace(B, {"p0": [0.0], "l0": None}, [{"p0": [-0.5], "l0": [-0.5]}])
    assert compare(prog, {A: a, B: b}) == []


def test_nothing_after_a_load_that_ran_on_one_side_only_is_compared():
    # torch's load(assign=True) has no candle or burn call: unsupported there, the two models hold
    # other tensors from then on, and the step's different effect is no finding of its own.
    prog = program(P0, [{"op": "save", "name": "c", "to": "file"}, {"op": "load", "from": "c", "assign": True}, STEP])
    a = trace(A, {"p0": [0.0]}, [{"c.p0": [0.0]}, {}, {}])
    b = trace(B, {"p0": [0.0]}, [{"c.p0": [0.0]}, {}, {"p0": [-1.0]}], ["ok", "unsupported", "ok"])
    assert compare(prog, {A: a, B: b}) == []


def test_a_replaced_parameter_is_judged_as_a_snapshot_of_its_value():
    # After w = nn.Parameter(b) (alpha) against a copy (beta), a write into b moves w on alpha
    # only: the finding is the replace relation's verdict, and it names the declared kinds.
    prog = program(
        {"w": {"kind": "param", "value": [0.0]}, "b": {"kind": "buffer", "value": [1.0]}},
        [{"op": "replace", "target": "w", "value": "b"}, {"op": "fill", "target": "b", "value": 2.0}],
    )
    a = trace(A, {"w": [0.0], "b": [1.0]}, [{"w": [1.0]}, {"b": [2.0], "w": [2.0]}])
    b = trace(B, {"w": [0.0], "b": [1.0]}, [{"w": [1.0]}, {"b": [2.0]}])
    [f] = compare(prog, {A: a, B: b})
    assert f.signature == "framework|alpha:cpu~beta:cpu|verdict|replace:new|write|follows~keeps"  # fill is write-class
    assert f.subject == "w" and f.role == "param"


def test_a_parameter_replaced_by_itself_keeps_the_relations_of_its_snapshots():
    # s0 = reshape(w), then w = nn.Parameter(w) (alpha: over w's storage; beta: a new value). A
    # write into w reaches s0 on alpha only: the relation of s0 to w goes on across the
    # self-replace, so the finding names reshape, not a later snapshot of s0.
    prog = program(
        P0,
        [
            {"op": "snapshot", "name": "s0", "of": "p0", "method": "reshape"},
            {"op": "replace", "target": "p0", "value": "p0"},
            {"op": "snapshot", "name": "s1", "of": "s0", "method": "to_home"},
            {"op": "fill", "target": "p0", "value": 1.0},
        ],
    )
    a = trace(A, {"p0": [0.0]}, [{"s0": [0.0]}, {"p0": [0.0]}, {"s1": [0.0]}, {"p0": [1.0], "s0": [1.0], "s1": [1.0]}])
    b = trace(B, {"p0": [0.0]}, [{"s0": [0.0]}, {"p0": [0.0]}, {"s1": [0.0]}, {"p0": [1.0]}])
    found = compare(prog, {A: a, B: b})
    assert [(f.signature, f.subject) for f in found] == [
        ("framework|alpha:cpu~beta:cpu|verdict|reshape|write|follows~keeps", "s0")
    ]


def test_a_second_replace_of_a_parameter_is_judged_as_its_own_relation():
    # w = nn.Parameter(w), then w = nn.Parameter(b): the second link (over b's storage on alpha,
    # a copy on beta) is judged from the op that made it, and a write into w reaching b on alpha
    # only is its finding.
    prog = program(
        {"w": {"kind": "param", "value": [0.0]}, "b": {"kind": "buffer", "value": [1.0]}},
        [
            {"op": "replace", "target": "w", "value": "w"},
            {"op": "replace", "target": "w", "value": "b"},
            {"op": "fill", "target": "w", "value": 2.0},
        ],
    )
    a = trace(A, {"w": [0.0], "b": [1.0]}, [{}, {"w": [1.0]}, {"w": [2.0], "b": [2.0]}])
    b = trace(B, {"w": [0.0], "b": [1.0]}, [{}, {"w": [1.0]}, {"w": [2.0]}])
    [f] = compare(prog, {A: a, B: b})
    assert f.signature == "framework|alpha:cpu~beta:cpu|verdict|replace:new|write|rev follows~rev keeps"
    assert f.subject == "w"


def test_a_step_that_trains_a_replaced_parameter_on_one_side_only_is_the_steps_effect():
    # w = nn.Parameter(b) after the optimizer was made: alpha's optimizer trains w (and b moves
    # with it), beta's holds the old object and trains nothing. The finding is the step's effect
    # on w (a value finding, named by the relation that made w what the step met), not the
    # replace relation's verdict seeing no change on beta.
    prog = program(
        {"w": {"kind": "param", "value": [0.0]}, "b": {"kind": "buffer", "value": [1.0]}},
        [STEP, {"op": "replace", "target": "w", "value": "b"}, STEP],
    )
    a = trace(A, {"w": [0.0], "b": [1.0]}, [{"w": [-1.0]}, {"w": [1.0]}, {"w": [0.0], "b": [0.0]}])
    b = trace(B, {"w": [0.0], "b": [1.0]}, [{"w": [-1.0]}, {"w": [1.0]}, {}])
    [f] = compare(prog, {A: a, B: b})
    assert f.signature == "value|alpha:cpu~beta:cpu|value|replace:new|step:sgd|changed~unchanged"
    assert f.subject == "w" and f.role == "param"


def test_an_identity_divergence_is_named_by_the_relation_that_made_it_then():
    # s1 = clone(s0), s0 = alias(p0): s1 is p0 itself on alpha (a clone that is the same tensor)
    # from op 1 on. A later replace of p0 by s1 relates them too, but the divergence came first,
    # from the clone.
    prog = program(
        P0,
        [
            {"op": "snapshot", "name": "s0", "of": "p0", "method": "alias"},
            {"op": "snapshot", "name": "s1", "of": "s0", "method": "clone"},
            {"op": "replace", "target": "p0", "value": "s1"},
        ],
    )
    steps = [{"s0": [0.0]}, {"s1": [0.0]}, {"p0": [0.0]}]
    a = trace(A, {"p0": [0.0]}, steps, same={"s0": "p0", "s1": "p0"})
    b = trace(B, {"p0": [0.0]}, steps, same={"s0": "p0"})
    [f] = compare(prog, {A: a, B: b})
    assert f.signature == "framework|alpha:cpu~beta:cpu|identity|clone|snapshot|same~distinct"


def test_an_alias_of_a_param_follows_a_data_swap_of_it():
    # w.data = b keeps the object, so s0 = alias(w) goes on being a snapshot of it: alpha's s0
    # takes b's values with w, beta's keeps (burn's Param::map gives w a new value). The finding
    # is the alias relation, not a value of s0 with no relation.
    prog = program(
        {"w": {"kind": "param", "value": [1.0]}, "b": {"kind": "param", "value": [0.0]}},
        [
            {"op": "snapshot", "name": "s0", "of": "w", "method": "alias"},
            {"op": "replace", "target": "w", "value": "b", "how": "data"},
        ],
    )
    a = trace(A, {"w": [1.0], "b": [0.0]}, [{"s0": [1.0]}, {"w": [0.0], "s0": [0.0]}])
    b = trace(B, {"w": [1.0], "b": [0.0]}, [{"s0": [1.0]}, {"w": [0.0]}])
    [f] = compare(prog, {A: a, B: b})
    assert (f.signature, f.subject) == ("framework|alpha:cpu~beta:cpu|verdict|alias|replace|follows~keeps", "s0")


def test_a_source_that_is_the_written_tensor_on_one_side_is_that_identity_divergence():
    # s0 and s1 are clones of w; on alpha both are w itself (one tensor). w is then replaced by
    # nn.Parameter(s0), and a write into s1 moves s0 on alpha only, because there s0 is s1: the
    # clones' identity is the finding, not the replace relation seeing its source move.
    prog = program(
        P0,
        [
            {"op": "snapshot", "name": "s0", "of": "p0", "method": "clone"},
            {"op": "snapshot", "name": "s1", "of": "p0", "method": "clone"},
            {"op": "replace", "target": "p0", "value": "s0"},
            {"op": "write", "target": "s1", "index": None, "value": [1.0]},
        ],
    )
    a = trace(
        A,
        {"p0": [0.0]},
        [{"s0": [0.0]}, {"s1": [0.0]}, {}, {"s0": [1.0], "s1": [1.0], "p0": [1.0]}],
        same={"s0": "p0", "s1": "p0"},
    )
    b = trace(B, {"p0": [0.0]}, [{"s0": [0.0]}, {"s1": [0.0]}, {"p0": [0.0]}, {"s1": [1.0]}])
    sigs = [f.signature for f in compare(prog, {A: a, B: b})]
    assert sigs == ["framework|alpha:cpu~beta:cpu|identity|clone|snapshot|same~distinct"]


def test_the_tolerance_comes_from_the_program():
    from harness.judging.value_compare import ADAM_RTOL, DTYPE_RTOL, Tolerance, tolerance

    plain = program({"p0": {"kind": "param", "value": [1.0]}}, [{"op": "step", "optimizer": "sgd", "lr": 0.5}])
    adam = program({"p0": {"kind": "param", "value": [1.0]}}, [{"op": "step", "optimizer": "adam", "lr": 0.25}])
    assert tolerance(plain) is None  # float32 SGD: exact
    assert tolerance(adam) == Tolerance(ADAM_RTOL, 0.25)
    assert tolerance(replace(plain, dtype="bf16")) == Tolerance(DTYPE_RTOL["bf16"], 0.0)
    assert tolerance(replace(adam, dtype="f16")) == Tolerance(DTYPE_RTOL["f16"], 0.25)


def test_a_bf16_case_tolerates_a_few_units_in_the_last_place_and_no_more():
    import numpy as np

    from harness.judging.value_compare import tolerance, values_close

    bf16 = replace(program({"p0": {"kind": "param", "value": [1.0]}}, []), dtype="bf16")
    tol = tolerance(bf16)

    def close(x, y):
        return values_close(np.array(x, dtype=np.float32), np.array(y, dtype=np.float32), tol)

    # 3.625 and 3.640625 are one bf16 unit apart (2^-6 at that magnitude): one rounding apart
    assert close([3.625, 1.0], [3.640625, 1.0])
    # a value that did not move where the other side's moved by a step is far outside
    assert not close([3.625, 1.0], [4.125, 1.0])
    assert not close([0.5], [0.0])


def test_a_tensor_one_framework_holds_in_another_dtype_is_a_dtype_finding():
    prog = replace(program(P0, [STEP, STEP]), dtype="bf16")

    def typed(t: Trace, dtypes: list[str]) -> Trace:
        # the helper's observations carry no dtype: give p0 the one each state says
        t.initial["p0"] = replace(t.initial["p0"], dtype=dtypes[0])
        for step, d in zip(t.steps, dtypes[1:]):
            step.changed["p0"] = replace(step.changed["p0"], dtype=d)
        return t

    a = typed(trace(A, {"p0": [0.0]}, [{"p0": [-1.0]}, {"p0": [-2.0]}]), ["bf16", "bf16", "bf16"])
    b = typed(trace(B, {"p0": [0.0]}, [{"p0": [-1.0]}, {"p0": [-2.0]}]), ["bf16", "f32", "f32"])
    (f,) = compare(prog, {A: a, B: b})
    assert f.signature == "framework|alpha:cpu~beta:cpu|dtype|-|step:sgd|bf16~f32"
    assert f.sentence() == "After op 0 (`step:sgd`), p0 is bf16 on alpha:cpu but f32 on beta:cpu."
    assert f.rule == rules.DTYPE_DIFFERS.name
    # made in another dtype from the start: the program's opening is the op
    b = typed(trace(B, {"p0": [0.0]}, [{"p0": [-1.0]}, {"p0": [-2.0]}]), ["f32", "f32", "f32"])
    (f,) = compare(prog, {A: a, B: b})
    assert f.op_label == "program" and f.sentence().startswith("As the program opens, p0 is bf16 on")
    # the same dtype on both sides: nothing
    assert (
        compare(
            prog, {A: a, B: typed(trace(B, {"p0": [0.0]}, [{"p0": [-1.0]}, {"p0": [-2.0]}]), ["bf16", "bf16", "bf16"])}
        )
        == []
    )


def test_a_step_value_finding_on_a_tied_param_names_the_tie_from_either_end():
    # p0 = p1 tied: alpha steps the one parameter once; beta steps it twice (candle's optimizer
    # lists the Var under both names), then in one slot only (burn's takes the gradient out by
    # id). The tie is what the step treats differently, so it is the findings' method, on the
    # tied name and on its source.
    P = {"p0": {"kind": "param", "value": [0.0]}, "p1": {"kind": "param", "value": [0.0]}}
    prog = program(P, [{"op": "replace", "target": "p0", "value": "p1", "how": "tie"}, STEP])
    a = trace(A, {"p0": [0.0], "p1": [0.0]}, [{"p0": [0.0]}, {"p0": [-1.0], "p1": [-1.0]}], same={"p0": "p1"})
    b = trace(B, {"p0": [0.0], "p1": [0.0]}, [{"p0": [0.0]}, {"p0": [-2.0], "p1": [-2.0]}], same={"p0": "p1"})
    [f] = [f for f in compare(prog, {A: a, B: b}) if f.aspect == "value"]
    assert (f.subject, f.method, f.sides) == ("p0", "replace:tie", ("changed", "changed"))
    c = trace(B, {"p0": [0.0], "p1": [0.0]}, [{"p0": [0.0]}, {"p0": [-1.0]}], same={"p0": "p1"})
    [g] = [f for f in compare(prog, {A: a, B: c}) if f.aspect == "value"]
    assert (g.subject, g.method, g.sides) == ("p1", "replace:tie", ("changed", "unchanged"))


def test_a_step_value_finding_names_a_replace_of_the_param_from_itself_until_it_is_rebound():
    # p0 = p0 between a backward pass and the step: candle's is the same Var (its accumulated
    # gradient applies), torch's a new Parameter (it does not). No relation links p0 to itself,
    # yet the replace is what the step treats differently: the finding's method. Once another
    # replace rebinds p0 from p1, that relation is what a later step's finding is about.
    P = {"p0": {"kind": "param", "value": [0.0]}, "p1": {"kind": "param", "value": [0.0]}}
    prog = program(P, [{"op": "backward"}, {"op": "replace", "target": "p0", "value": "p0"}, STEP])
    a = trace(A, {"p0": [0.0], "p1": [0.0]}, [{}, {}, {"p0": [-1.0], "p1": [-0.5]}])
    b = trace(B, {"p0": [0.0], "p1": [0.0]}, [{}, {}, {"p0": [-0.5], "p1": [-0.5]}])
    [f] = compare(prog, {A: a, B: b})
    assert (f.subject, f.method, f.sides) == ("p0", "replace:new", ("changed", "changed"))
    rebound = program(
        P,
        [
            {"op": "replace", "target": "p0", "value": "p0", "how": "data"},
            {"op": "replace", "target": "p0", "value": "p1", "how": "set"},
            STEP,
        ],
    )
    assert [f.method for f in compare(rebound, {A: a, B: b})] == ["replace:set"]
    # a step with no replace before it is named by nothing
    plain = program(P, [{"op": "backward"}, {"op": "backward"}, STEP])
    [h] = compare(plain, {A: a, B: b})
    assert h.method is None


def test_a_step_after_an_identity_finding_still_reports_a_param_the_finding_never_touched():
    # s0 = alias(p0) is p0 itself on alpha only (an identity finding at op 0). The step then
    # trains p1 on beta only: p1 has nothing to do with p0 or s0, so the step's value finding
    # is reported, not taken for a consequence of the identity finding because a step reads
    # every param.
    prog = program(
        {"p0": {"kind": "param", "value": [0.0]}, "p1": {"kind": "param", "value": [0.0]}},
        [{"op": "snapshot", "name": "s0", "of": "p0", "method": "alias"}, STEP],
    )
    a = trace(A, {"p0": [0.0], "p1": [0.0]}, [{"s0": [0.0]}, {"p0": [-1.0], "s0": [-1.0]}], same={"s0": "p0"})
    b = trace(B, {"p0": [0.0], "p1": [0.0]}, [{"s0": [0.0]}, {"p0": [-1.0], "s0": [-1.0], "p1": [-1.0]}])
    found = compare(prog, {A: a, B: b})
    values = [(f.signature, f.subject, f.op_index) for f in found if f.aspect == "value"]
    assert values == [("value|alpha:cpu~beta:cpu|value|-|step:sgd|unchanged~changed", "p1", 1)], [
        f.signature for f in found
    ]
    assert any(f.aspect == "identity" and f.op_index == 0 for f in found)


def test_a_write_through_a_module_clones_second_param_is_the_clones_identity_finding():
    # m0 = module_clone: m0.p0 is p0 and m0.p1 is p1 on alpha (the identity finding names the
    # first pair only). A write through an alias of m0.p1 then moves p1 on alpha only: the
    # clone's relation again, said in the identity finding's detail, not a value finding.
    two = {"p0": {"kind": "param", "value": [0.0]}, "p1": {"kind": "param", "value": [0.0]}}
    prog = program(
        two,
        [
            {"op": "module_clone", "name": "m0"},
            {"op": "snapshot", "name": "s0", "of": "m0.p1", "method": "alias"},
            {"op": "fill", "target": "s0", "value": 1.0},
        ],
    )
    a = trace(
        A,
        {"p0": [0.0], "p1": [0.0]},
        [{"m0.p0": [0.0], "m0.p1": [0.0]}, {"s0": [0.0]}, {"s0": [1.0], "m0.p1": [1.0], "p1": [1.0]}],
        same={"m0.p0": "p0", "m0.p1": "p1", "s0": "p1"},
    )
    b = trace(
        B,
        {"p0": [0.0], "p1": [0.0]},
        [{"m0.p0": [0.0], "m0.p1": [0.0]}, {"s0": [0.0]}, {"s0": [1.0], "m0.p1": [1.0]}],
        same={"s0": "m0.p1"},
    )
    found = compare(prog, {A: a, B: b})
    assert [f.aspect for f in found] == ["identity"], [f.signature for f in found]
    assert "p1 changed to [1.]" in found[0].detail


def test_a_snapshot_taken_of_a_name_after_it_diverged_is_that_divergences_consequence():
    # c = detach(p0) shares p0 on both sides; s0 = alias(c) shares on alpha only, so the fill of
    # s0 moves c and p0 on alpha only (s0's verdict finding, p0 moved by the same write). A module
    # clone taken after that holds what p0 held on each side: m0.p0 differs as the verdict's
    # consequence, though m0.p0 is a snapshot of p0, not of s0.
    prog = program(
        P0,
        [
            {"op": "snapshot", "name": "c", "of": "p0", "method": "detach"},
            {"op": "snapshot", "name": "s0", "of": "c", "method": "alias"},
            {"op": "fill", "target": "s0", "value": 1.0},
            {"op": "module_clone", "name": "m0"},
        ],
    )
    a = trace(A, {"p0": [0.0]}, [{"c": [0.0]}, {"s0": [0.0]}, {"s0": [1.0], "c": [1.0], "p0": [1.0]}, {"m0.p0": [1.0]}])
    b = trace(B, {"p0": [0.0]}, [{"c": [0.0]}, {"s0": [0.0]}, {"s0": [1.0]}, {"m0.p0": [0.0]}])
    found = compare(prog, {A: a, B: b})
    assert [(f.aspect, f.subject) for f in found] == [("verdict", "s0")], [f.signature for f in found]
    assert "m0.p0" in found[0].detail
    assert f"Its consequence ({rules.MOVED_BY_AN_EARLIER_DIVERGENCE.name})" in found[0].detail
    assert found[0].rule == rules.SNAPSHOT_RELATION_DIFFERS.name  # the cause's own rule
