"""Verdicts scale with the program (issue 40, fault 16): ``trace.verdicts`` gives the same verdicts
as the straightforward computation below, and does not ask every op about every relation.

The straightforward computation (``reference_verdicts``) is the definition the verdicts had when
each relation walked every later op: its relation ends at the first later op that rebinds the
snapshot or makes its source another object (``ops.rebinds``, ``ops.denotes_another_object``),
and every op before that which changed either name, read from the full state after each op
(``Trace.state_after``), is an event. Its cost is the program's length squared, which is why
``verdicts`` no longer does it that way (tests/bench_verdicts.py prints the times).

The tests here run in this process, as the
unit tier requires; those that need the real frameworks are in tests/probes/test_verdict_scaling.py.
"""

from __future__ import annotations

import math
import random

from harness.case import ops
from harness.case.ir import names_bound, shapes_before
from harness.fuzzing.generation import generate
from harness.judging import verdicts as verdicts_module
from harness.judging.verdicts import (
    SnapshotInfo,
    snapshots,
    verdicts,
)
from harness.targets.trace import Observation, StepResult, Trace
from tests.support.long_programs import long_program, storage_trace
from tests.support.verdict_scaling import (
    assert_same_verdicts,
    reference_relation_end,
)

# ---------------------------------------------------------------------------------------------
# Random traces: any subset of the bound names changed at any op, values from a small set (so
# that coincidences, follows and keeps all occur), some steps not ok, some names never observed.


def random_trace(program, rng: random.Random) -> Trace:
    """A trace of ``program`` whose observations are drawn at random: no framework's, the
    verdicts' input space. Names are bound as the program binds them; a tenth are never observed."""
    hidden = {n for n in names_bound(program) if rng.random() < 0.1}

    def obs(shape) -> Observation:
        return Observation.from_wire(
            {
                "shape": list(shape),
                "value": [rng.choice([0.0, 1.0, 2.0]) for _ in range(math.prod(shape))],
                "identity": f"t{rng.randint(0, 3)}",
                "device": "cpu",
            }
        )

    initial = {n: obs(shape) for n, shape in shapes_before(program, 0).items() if n not in hidden}
    steps = []
    n_steps = len(program.ops) - (rng.random() < 0.1)  # sometimes a trace shorter than the program
    for i in range(n_steps):
        after = shapes_before(program, i + 1)
        changed = {n: obs(shape) for n, shape in after.items() if n not in hidden and rng.random() < 0.3}
        status = rng.choices(["ok", "error", "skipped"], weights=[18, 1, 1])[0]
        steps.append(StepResult(status, None if status == "ok" else "drawn", changed))
    return Trace("random:cpu", "ok", None, initial, steps)


def test_verdicts_equal_the_reference_on_long_programs():
    events = 0
    for seed in range(6):
        program = long_program(150, seed)
        events += assert_same_verdicts(program, storage_trace(program))
    assert events > 100


def test_verdicts_equal_the_reference_on_random_traces_of_generated_programs():
    rng = random.Random(7)
    programs = generate(150, seed=3, profile="default")
    events = 0
    for program in programs:
        for _ in range(3):
            events += assert_same_verdicts(program, random_trace(program, rng))
    assert events > 300


def test_a_relation_that_is_not_the_programs_own_ends_as_the_reference_says():
    # ``relation_end`` also answers for a relation a caller makes up (links.py): judged afresh.
    program = long_program(200, 1)
    for snap in snapshots(program)[::7]:
        for source in ("p0", "b0", snap.source):
            made_up = SnapshotInfo(snap.name, snap.op, source, "alias")
            for n in (len(program.ops), snap.op + 3):
                assert verdicts_module.relation_end(program, made_up, n) == reference_relation_end(program, made_up, n)


# ---------------------------------------------------------------------------------------------
# The work done: each op asked once, no full state per op.


def test_verdicts_ask_each_op_once_and_build_no_state_per_op(monkeypatch):
    # Counting wrappers around the two questions each op was asked for each relation: before,
    # ``_relation_end`` asked them of every later op (600 snapshots: about 200,000 questions),
    # and each event read the full state after its op (``Trace.states``: one dict of every bound
    # name per op, quadratic in time and memory).
    program = long_program(600, 2)
    trace = storage_trace(program)
    asked = {name: 0 for name in ("rebinds", "rebound", "denotes_another_object") if hasattr(ops, name)}
    for name in asked:
        real = getattr(ops, name)

        def counting(*args, _real=real, _name=name):
            asked[_name] += 1
            return _real(*args)

        monkeypatch.setattr(ops, name, counting)
    judged = verdicts(program, trace)
    assert sum(len(v.events) for v in judged.values()) > 100
    assert sum(asked.values()) <= len(program.ops), asked
    assert trace._states is None  # no full state was built


def test_checking_a_long_program_reads_only_each_ops_own_shapes(monkeypatch):
    # Before, checking each snapshot op copied the shape of every name bound so far
    # (``_FieldCheck.shapes``): 10,000 snapshots took 7 s to check, 2,000 took 0.3 s.
    from harness.case import op_checks

    read = []
    real = op_checks._FieldCheck.shapes

    def counting(self, *args):
        out = real(self, *args)
        read.append(len(out))
        return out

    monkeypatch.setattr(op_checks._FieldCheck, "shapes", counting)
    program = long_program(1000, 4)
    assert read and sum(read) <= 3 * len(program.ops), sum(read)
