"""Writes hidden from autograd, judged on one target.

torch keeps a version counter per tensor (``t._version``): every in-place call bumps it, views
share their base's, and autograd refuses a backward pass over a saved tensor whose counter moved
since it was saved ("In-place correctness checks" of the autograd mechanics notes). A tensor over
another's memory with a counter of its own, such as ``t.data`` (pytorch#30987) or a tensor made
from ``t.numpy()``, is a way around that check: a write through it changes ``t``'s values and
leaves ``t``'s counter where it was, and a backward pass over a graph that saved ``t`` then runs
with the new values, silently.

This compares a target with itself, so it needs no second framework: a finding of kind
``version`` names one target twice (``targets = (target, target)``, as a sharing one does), the
op that wrote, and the relation that carried the write to the name (``method``); its sides are
``changed~kept``: the name's values changed, its counter did not. Only targets that report
version counters (``Observation.version``: torch) are judged; candle and burn have none.
"""

from __future__ import annotations

from collections import deque

from harness.case import ops
from harness.case.ir import Program
from harness.judging import rules
from harness.judging.finding import Finding
from harness.judging.verdicts import binding_rank, made_before, same_values, subject_role
from harness.targets.trace import Trace


def _carrier(program: Program, trace: Trace, k: int, name: str) -> str | None:
    """The relation across which op ``k``'s write stopped moving version counters: on the
    shortest path of snapshot relations (made before op ``k``, either way) from ``name`` to a name
    over its memory whose counter op ``k`` moved, the link nearest that name whose other end's counter did not
    move. A view shares its base's counter, so the write moves every counter up to the relation
    that made a tensor of its own over the memory (``.data``, ``copy.copy``, ``p.data = v``).
    None where no such path exists (the op itself swapped what ``name`` holds)."""
    before, after = trace.state_after(k - 1), trace.state_after(k)
    memory = after[name].storage

    def bumped(n: str) -> bool:
        """Whether op ``k`` moved ``n``'s counter, ``n`` over ``name``'s memory where the target
        names storage (a param the same step trained elsewhere carried nothing to ``name``)."""
        x, y = before.get(n), after.get(n)
        return (
            x is not None
            and y is not None
            and x.version is not None
            and y.version is not None
            and x.identity == y.identity
            and x.version != y.version
            and (memory is None or y.storage is None or y.storage == memory)
        )

    # The latest relation first (``made_before``): the later of two that join the same names made
    # what they share now.
    links: dict[str, list[tuple[str, str]]] = {}
    for s in made_before(program, k):
        links.setdefault(s.name, []).append((s.source, s.method))
        links.setdefault(s.source, []).append((s.name, s.method))
    reached: dict[str, tuple[str, str] | None] = {name: None}
    queue = deque([name])
    while queue:
        at = queue.popleft()
        if bumped(at):
            while (back := reached[at]) is not None:
                nearer, method = back
                if not bumped(nearer):
                    return method
                at = nearer
            return None
        for other, method in links.get(at, ()):
            if other not in reached:
                reached[other] = (at, method)
                queue.append(other)
    return None


def hidden_writes(program: Program, trace: Trace) -> list[Finding]:
    """The first op of each label, per carrier, after which a name of ``trace`` holds other values
    over the same object with its version counter unmoved: a write through a tensor with a counter of its own,
    or an op that swaps what a tensor holds (``w.data = v``, which ``Module._apply`` did with every
    parameter before pytorch#21865)."""
    if not trace.ok or not trace.has_versions:
        return []
    found: dict[str, Finding] = {}
    for k, (op, step) in enumerate(zip(program.ops, trace.steps)):
        if step.status != "ok" or not step.changed:
            continue
        before = trace.state_after(k - 1)
        # In binding order, not by name: which name a finding is about must not depend on what
        # the names are called. Every name the op hid a write from is judged: each carrier of
        # its own (a ``.data`` and a ``copy.copy`` of one name) is a finding of its own.
        for name in sorted(step.changed, key=binding_rank(program)):
            now = step.changed[name]
            was = before.get(name)
            if was is None or was.version is None or now.version is None or was.identity is None:
                continue
            if was.identity != now.identity or now.version != was.version:
                continue
            if was.value is None or now.value is None or same_values(was.value, now.value):
                continue
            method = _carrier(program, trace, k, name)
            f = Finding(
                rule=rules.WRITE_HIDDEN_FROM_AUTOGRAD.name,
                kind="version",
                aspect="version",
                targets=(trace.target, trace.target),
                op_label=ops.label(op),
                method=method,
                sides=("changed", "kept"),
                op_index=k,
                subject=name,
                role=subject_role(program, name),
                detail=(
                    f"{name} went from {was.value.tolist()} to {now.value.tolist()}, its version counter"
                    f" stayed at {now.version}."
                ),
            )
            found.setdefault(f.signature, f)
    return list(found.values())
