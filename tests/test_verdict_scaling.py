"""Verdicts scale with the program (issue 40, fault 16): ``trace.verdicts`` gives the same verdicts
as the straightforward computation below, and does not ask every op about every relation.

The straightforward computation (``reference_verdicts``) is the definition the verdicts had when
each relation walked every later op: its relation ends at the first later op that rebinds the
snapshot or makes its source another object (``ops.rebinds``, ``ops.denotes_another_object``),
and every op before that which changed either name, read from the full state after each op
(``Trace.state_after``), is an event. Its cost is the program's length squared, which is why
``verdicts`` no longer does it that way (tests/bench_verdicts.py prints the times).
"""

from __future__ import annotations

import math
import random

import pytest

from harness.case import ops
from harness.case.ir import names_bound, shapes_before
from harness.fuzzing.generation import generate
from harness.judging import verdicts as verdicts_module
from harness.judging.verdicts import (
    Event,
    SnapshotInfo,
    Verdict,
    _view,
    relation_key,
    same_values,
    snapshots,
    verdicts,
    writes_into,
)
from harness.targets.trace import Observation, StepResult, Trace
from tests.conftest import targets_runner
from tests.support.long_programs import long_program, storage_trace

# ---------------------------------------------------------------------------------------------
# The reference: each relation walks every later op.


def reference_relation_end(program, snap: SnapshotInfo, n: int) -> int:
    end = len(program.ops)
    for k in range(snap.op + 1, len(program.ops)):
        op = program.ops[k]
        if ops.rebinds(op, snap.name) or ops.denotes_another_object(op, snap.source):
            end = k
            break
    return end if end < min(n, len(program.ops)) else n


def reference_verdict(program, trace: Trace, snap: SnapshotInfo) -> Verdict:
    if not trace.ok:
        return Verdict(snap, trace.status, message=trace.message)
    if snap.op >= len(trace.steps):
        return Verdict(snap, "error", message="trace is shorter than the program")
    taken = trace.steps[snap.op]
    if taken.status != "ok":
        return Verdict(snap, taken.status, message=taken.message)
    if snap.name not in trace.state_after(snap.op):
        return Verdict(snap, "error", message=f"{snap.name} was not observed")
    events = []
    for k in range(snap.op + 1, reference_relation_end(program, snap, len(trace.steps))):
        changed = trace.steps[k].changed
        if snap.source not in changed and snap.name not in changed:
            continue
        before, after = trace.state_after(k - 1), trace.state_after(k)
        x0, x1 = _view(snap.method, before.get(snap.source)), _view(snap.method, after.get(snap.source))
        s0 = before[snap.name].value if snap.name in before else None
        s1 = after[snap.name].value if snap.name in after else None
        d_source, d_snap = not same_values(x0, x1), s0 is not None and not same_values(s0, s1)
        reverse = writes_into(program.ops[k], snap.name)
        if d_source:
            if s0 is None and same_values(s1, x1):
                continue
            if same_values(s1, x1) and d_snap:
                verdict = "follows"
            elif not d_snap:
                verdict = "keeps"
            else:
                verdict = "other"
            events.append(Event(k, verdict, reverse))
        elif reverse and d_snap:
            events.append(Event(k, "keeps", True))
    return Verdict(snap, "ok", tuple(events))


def reference_verdicts(program, trace: Trace) -> dict[str, Verdict]:
    out: dict[str, Verdict] = {}
    for s in snapshots(program):
        out[relation_key(s, s.name not in out)] = reference_verdict(program, trace, s)
    return out


def fresh(trace: Trace) -> Trace:
    """The same trace without its caches: the reference reads the full states, ``verdicts`` its
    own index, and neither may lean on what the other built."""
    return Trace(trace.target, trace.status, trace.message, trace.initial, trace.steps, trace.elapsed_us)


def assert_same_verdicts(program, trace: Trace) -> int:
    """``verdicts`` equals the reference; returns the number of events (so a test can check it
    compared something)."""
    got, want = verdicts(program, fresh(trace)), reference_verdicts(program, fresh(trace))
    assert list(got) == list(want)
    for key in want:
        assert got[key] == want[key], (key, got[key], want[key])
    return sum(len(v.events) for v in want.values())


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


@pytest.mark.timeout(300)
def test_verdicts_equal_the_reference_on_torch_traces_of_generated_programs():
    programs = generate(40, seed=11, profile="default")
    events = 0
    with targets_runner(("torch:cpu",)) as runner:
        for program in programs:
            traces = runner.run_one(program, every_target=True)
            events += assert_same_verdicts(program, traces["torch:cpu"])
    assert events > 20


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
