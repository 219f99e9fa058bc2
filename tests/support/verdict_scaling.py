"""What both tiers of the verdict scaling tests share: ``reference_relation_end``, ``reference_verdict``, ``reference_verdicts``, ``fresh``, ``assert_same_verdicts``."""

from __future__ import annotations

from harness.case import ops
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
from harness.targets.trace import Trace


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
