"""Identity: which names are one framework object, as the traces' identity tokens say.

A token is a framework's own notion of "the same tensor" (candle's tensor id, burn's ParamId,
torch's object id); only the partition of names by token means anything, never a token itself, so
every comparison here is between the two sides' partitions. A name without a token (a burn value)
is an object of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

from harness.case.ir import Program, names_bound, per_program
from harness.judging.verdicts import snapshots
from harness.targets.trace import Trace, identity_partition


class IdentityDivergence(NamedTuple):
    """The first op after which two names are one object on one side and distinct on the other."""

    op_index: int
    names: tuple[str, str]
    same: tuple[bool, bool]
    partitions: tuple[str, str]  # each side's partition, rendered


def first_divergence(program: Program, traces: Sequence[Trace], hidden: set[int]) -> IdentityDivergence | None:
    """The first op (not in ``hidden``) after which the two traces group their common names by
    token differently, and the first pair of names (in binding order) that shows it."""
    a, b = traces
    order = _binding_order(program)
    for i in range(len(a.steps)):
        if i in hidden:
            continue
        if i > 0 and not (_moved(a, i) or _moved(b, i)):
            continue  # no token appeared or changed: the partitions are those of the op before
        sa, sb = a.state_after(i), b.state_after(i)
        common = sorted(
            (n for n in sa if n in sb and sa[n].identity is not None and sb[n].identity is not None),
            key=lambda n: order.get(n, 1 << 30),
        )
        la, lb = _token_labels(sa, common), _token_labels(sb, common)
        if la == lb:
            continue  # the same partition on both sides (labels by first appearance; no sets built)
        j, k = _first_split(la, lb)
        x, y = common[j], common[k]
        same = (la[j] == la[k], lb[j] == lb[k])
        parts = tuple(_render(identity_partition({n: s[n] for n in common})) for s in (sa, sb))
        return IdentityDivergence(i, (x, y), same, parts)
    return None


def _first_split(la: Sequence[int], lb: Sequence[int]) -> tuple[int, int]:
    """The first pair ``(j, k)``, ``j < k``, in order (the smallest ``j``, then the smallest ``k``)
    that is one group on one side and two on the other, of two different groupings of the same
    names (``_token_labels`` of each side). Linear in the names, where asking every pair was
    quadratic: each name's next name of its group on each side (``after_a``, ``after_b``) is
    found in one pass; the names after ``j`` in its group are the same on both sides exactly when
    the two next names are the same name ``m`` and, recursively, the same holds at ``m`` (its
    group is ``j``'s on both sides). ``k`` is then where the two chains from ``j`` part: the
    smaller of the two next names at the first name whose next names differ."""
    n = len(la)
    after_a: list[int | None] = [None] * n
    after_b: list[int | None] = [None] * n
    last_a: dict[int, int] = {}
    last_b: dict[int, int] = {}
    for i in range(n):
        if la[i] in last_a:
            after_a[last_a[la[i]]] = i
        if lb[i] in last_b:
            after_b[last_b[lb[i]]] = i
        last_a[la[i]], last_b[lb[i]] = i, i
    alike = [True] * n  # the names after i in its group are the same on both sides
    for i in range(n - 1, -1, -1):
        nxt = after_a[i]
        alike[i] = nxt == after_b[i] and (nxt is None or alike[nxt])
    j = alike.index(False)  # the groupings differ, so some name's later group members differ
    c = j
    while after_a[c] == after_b[c]:  # both not None: the chains from j part later
        c = after_a[c]
    k = min(m for m in (after_a[c], after_b[c]) if m is not None)
    return j, k


def written_on_one_side(traces: Sequence[Trace], written: str | None, name: str, k: int) -> bool:
    """Whether ``written`` (what op ``k`` writes) is ``name`` itself (one token) on one side only:
    ``name`` then moved there because it is the written object (two candle clones of one param
    are one tensor), an identity divergence that came first."""
    if written is None or written == name:
        return False
    same = []
    for t in traces:
        state = t.state_after(k - 1)
        x, y = state.get(written), state.get(name)
        if x is None or y is None or x.identity is None or y.identity is None:
            return False
        same.append(x.identity == y.identity)
    return same[0] != same[1]


def shared_on_one_side(traces: Sequence[Trace], name: str, i: int) -> bool:
    """Whether, after op ``i``, the names that are one object with ``name`` differ between the
    sides (a candle clone of a param is the param; torch's is its own tensor): whatever moved
    ``name`` may then have moved it as that other name, not through a relation of its own."""
    groups = []
    for t in traces:
        state = t.state_after(i)
        token = state[name].identity if name in state else None
        groups.append({name} if token is None else {n for n, o in state.items() if o.identity == token})
    return groups[0] != groups[1]


def relating_method(program: Program, x: str, y: str, i: int) -> str | None:
    """The snapshot method that made ``y`` from ``x`` (or from a common source) by op ``i``, if any."""
    snaps = {s.name: s for s in snapshots(program) if s.op <= i}
    if y in snaps and snaps[y].source == x:
        return snaps[y].method
    if x in snaps and snaps[x].source == y:
        return snaps[x].method
    if y in snaps:
        return snaps[y].method
    return None


@per_program
def _binding_order(program: Program) -> Mapping[str, int]:
    """Each name's place in ``names_bound``: the order a divergence lists names in."""
    return MappingProxyType({n: i for i, n in enumerate(names_bound(program))})


def _token_labels(state, names: list[str]) -> list[int]:
    """Each name's identity token renamed to its first appearance in ``names``: two states group
    ``names`` alike exactly when their label lists are equal."""
    first: dict[str, int] = {}
    return [first.setdefault(state[n].identity, len(first)) for n in names]


def _moved(trace: Trace, i: int) -> bool:
    """Whether op ``i`` bound a new name or changed a name's identity token."""
    before = trace.state_after(i - 1)
    return any(n not in before or before[n].identity != o.identity for n, o in trace.steps[i].changed.items())


def _render(p) -> str:
    if not p:
        return "all distinct"
    return " ".join("{" + ",".join(sorted(g)) + "}" for g in sorted(p, key=sorted))
