"""What a program's ops link, read from the program alone (no trace): the names a write reaches
through snapshot relations, the relations an ``append`` or ``replace`` ended on the way, the
``replace`` that linked a param a step trains, and the names whose values come from a
framework's RNG. The oracle (``harness.judging.oracle``) asks
these questions of every divergence it attributes; the report table asks the last one.
"""

from __future__ import annotations

from typing import NamedTuple

from harness.case import ops
from harness.case.ir import Program, per_program
from harness.judging.verdicts import SnapshotInfo, made_before, relation_end, snapshots


@per_program
def nondeterministic_names(program: Program) -> frozenset[str]:
    """Names whose values come from a framework's own generator (a lazy init in
    ``ops.DRAWN_INITS``) and what derives from them (snapshots, writes from them, the running
    statistics a forward of them moves): their values differ between frameworks and between two
    backends or devices of one framework by design."""
    return _derived_from(program, ops.DRAWN_INITS)


@per_program
def unreproducible_names(program: Program) -> frozenset[str]:
    """The ``nondeterministic_names`` whose values may differ between two runs of one target:
    those of ``uniform`` lazy tensors, which a generator that cannot be seeded (candle's CPU)
    draws. A target that cannot seed the program's one generator refuses ``program_rng``
    programs instead, so their values are compared within a target."""
    return _derived_from(program, ("uniform",))


def _derived_from(program: Program, inits: tuple[str, ...]) -> frozenset[str]:
    roots = {t.name for t in program.tensors if t.kind == "lazy" and t.init in inits}
    if not roots:
        return frozenset()  # nothing to derive from (most programs): no fixpoint to walk
    out = set(roots)
    params = program.model_names
    source = {s.name: s.source for s in snapshots(program)}
    # To a fixpoint: an op that writes a name from a nondeterministic one (``assign``) makes it
    # nondeterministic, and with it what the write may reach through shared storage on some
    # framework (the name's sources, transitively) and the snapshots of any of them.
    while True:
        before = len(out)
        for op in program.ops:
            out.update(b.name for b in ops.bindings(op, params) + ops.rebindings(op) if b.source in out)
            if ops.remade(op) is not None and any(n in out for n in ops.reads(op)):
                out.add(ops.remade(op))
            if ops.spec(op).acts_on_layer and any(n in out for n in ops.reads(op)):
                # A training forward moves its layer's running statistics by its input's values.
                out.update(n for layer in program.layers if layer.name == op.layer for n, _, _ in layer.states())
            target = ops.written(op)
            if target is not None and any(n in out for n in ops.reads(op) if n != target):
                seen: set[str] = set()
                while target is not None and target not in seen:
                    seen.add(target)
                    out.add(target)
                    target = source.get(target)
        if len(out) == before:
            return frozenset(out)


def write_path(program: Program, k: int) -> list[str]:
    """The names a write-like op ``k`` reaches through snapshot relations, nearest first: its
    target and the target's sources, transitively (``s2 = alias(s0)``, ``s0 = clone(p0)``: a
    write into s2 has the path s2, s0, p0). Empty for other ops.

    When a write moves the sources of several snapshots on one side only, a snapshot on this
    path is the link that carried the write (candle's ``clone`` of p0 sharing its storage); a
    snapshot off it (another snapshot of p0) only saw p0 move, a consequence of that link.

    A ``step`` writes every trainable tensor: its path is theirs, each followed by its sources.
    A declared tensor has a source only where a ``replace`` made it one (w = nn.Parameter(b):
    a step moves b through w's link, and the snapshots of b only saw b move)."""
    names = _written(program, k)
    source: dict[str, str] = {}
    for s in made_before(program, k):
        source.setdefault(s.name, s.source)  # the latest relation that bound the name
    path: list[str] = []
    for name in names:
        while name is not None and name not in path:
            path.append(name)
            name = source.get(name)
    return path


def ended_link(program: Program, op_index: int, name: str) -> str | None:
    """The snapshot relation that links ``name`` to the tensor the op at ``op_index`` writes, for
    a value divergence of ``name`` at that write: the first relation's method on the chain of
    relations between them (either way), or ``<method>@<op>`` when the chain ends at a name that
    ``<op>`` had bound again before (an ``append`` growing it, a ``replace`` of its param) through
    a relation made before that. A ``step`` writes every trainable tensor (``write_path``): the
    first one, in declaration order, that such a chain links to ``name``. None when ``op_index``
    writes nothing, writes ``name`` itself, no chain links them, or no relation on the chain has
    ended (the relations' own verdicts are then the findings).

    Such a relation is no longer judged (``trace.relation_end``), but on one side its snapshot may
    still share storage with what the name became (an alias of a KV cache's keys and the grown
    cache are two views of one buffer in torch and candle, values in burn): the relation and the op
    that rebound its source are then the root cause, so the signature names both. A chain through
    old objects only (an alias of p0 grown since, and a copy of the old alias) crosses no rebinding:
    its first method carried the write."""
    rels = made_before(program, op_index)
    theirs = _chain(program, rels, name, op_index)
    for written in _written(program, op_index):
        if written == name:
            continue
        for chain, hi in ((theirs, written), (_chain(program, rels, written, op_index), name)):
            k = next((k for k, hop in enumerate(chain) if k and hop.name == hi), None)
            if k is not None:
                # every relation on it judged: its verdicts are the findings
                return _link_name(program, chain, k) if any(h.ended for h in chain[1 : k + 1]) else None
    return None


def common_source_link(program: Program, op_index: int, name: str) -> str | None:
    """For a value divergence of ``name`` at op ``op_index`` that ``ended_link`` and
    ``own_relation`` do not explain: the relation that carried the op's write away from what it
    writes (for a step, from a param it trains) toward an object that ``name``'s own relations
    also lead to, a common source of both. Named as ``ended_link`` names a chain (``method`` or
    ``method@op``), when a relation on either chain has ended by then; None otherwise (no common
    source, or every relation on both chains is judged: their verdicts are the findings).

    Two snapshots of a tensor whose name was bound again (``s0 = transpose(b)``, ``s1 = alias(b)``,
    then ``b = neg(b)``): a write into s0 reaches s1 where both are views of the old b (torch), and
    not where they are values (burn). A param made over b's storage (``p = nn.Parameter(b)``) and
    an alias of b, b then bound again: a step reaches the alias where the param shares b's storage
    (torch) and not where it is a copy (candle's ``Var::from_tensor``). The write's own path
    (``write_path``) names the link; the other name only saw the common source move."""
    rels = made_before(program, op_index)
    theirs = _chain(program, rels, name, op_index)
    reached = {_object(program, hop): m for m, hop in enumerate(theirs)}
    for written in _written(program, op_index):
        if written == name:
            continue
        mine = _chain(program, rels, written, op_index)
        for k, hop in enumerate(mine):
            m = reached.get(_object(program, hop))
            if k == 0 or m is None:
                continue
            if m == 0 or not any(h.ended for h in mine[1 : k + 1] + theirs[1 : m + 1]):
                break  # ``name`` is on the write's path (``ended_link``), or every relation is judged
            return _link_name(program, mine, k)
    return None


def _written(program: Program, op_index: int) -> list[str]:
    """The names op ``op_index`` writes: every trainable tensor for a ``step``, else the one a
    write-like op writes, if any."""
    op = program.ops[op_index]
    if op.kind == "step":
        return [t.name for t in program.tensors if t.trainable]
    return [] if ops.written(op) is None else [ops.written(op)]


class _Hop(NamedTuple):
    """One step of ``_chain``: the relation followed (None for the chain's start), whether it had
    ended by the op, whether it ended because its source was bound to another object, the op
    that ended it, and the name reached, as its binding before op ``before``."""

    rel: SnapshotInfo | None
    ended: bool
    old_source: bool
    end: int
    name: str
    before: int


def _chain(program: Program, rels: tuple[SnapshotInfo, ...], name: str, op_index: int) -> list[_Hop]:
    """The objects ``name``'s snapshot relations lead to at op ``op_index``, ``name``'s own first:
    past a relation whose source was bound again since, to the source's old object. ``rels``: the
    relations made before op ``op_index``, the latest first (``made_before``)."""
    x, before = name, op_index  # x's object is its binding before op ``before``
    out = [_Hop(None, False, False, op_index, x, before)]
    seen: set[str] = set()
    while x not in seen:
        seen.add(x)
        rel = next((r for r in rels if r.name == x and r.op < before), None)
        if rel is None:
            break
        end = relation_end(program, rel, len(program.ops))
        ended = end <= op_index
        if before == op_index and ended and ops.denotes_another_object(program.ops[end], rel.name):
            break  # x denotes another object now: the relation was its old one's
        old_source = ended and ops.denotes_another_object(program.ops[end], rel.source)
        x, before = rel.source, end if old_source else op_index
        out.append(_Hop(rel, ended, old_source, end, x, before))
    return out


def _link_name(program: Program, chain: list[_Hop], k: int) -> str:
    """A chain's name up to its ``k``-th hop: ``<method>@<op>`` of that hop's relation when the op
    that ended it bound its source to another object, else the chain's first relation's method."""
    hop = chain[k]
    return f"{hop.rel.method}@{ops.label(program.ops[hop.end])}" if hop.old_source else chain[1].rel.method


def _object(program: Program, hop: _Hop) -> tuple[str, int]:
    """The object a hop reached: its name and the last op before ``hop.before`` that bound the
    name to another object (a snapshot made it, an op remade it, a ``replace`` from another
    name), -1 for none."""
    params = program.model_names
    for j in range(hop.before - 1, -1, -1):
        op = program.ops[j]
        if any(b.name == hop.name for b in ops.bindings(op, params)) or ops.denotes_another_object(op, hop.name):
            return hop.name, j
    return hop.name, -1


def own_relation(program: Program, i: int, name: str) -> str | None:
    """For an op on every param (a step, a load), the method of a live ``replace`` that made the
    param ``name``, else of one made from it (``replace:tie``: a tied param is stepped once in
    torch, once per name in candle), else of one that made it from itself since it was last
    rebound (candle's Var again, torch's new Parameter, without the gradient accumulated on the
    old one). None for another op, or a param no replace links."""
    if not ops.spec(program.ops[i]).acts_on_params:
        return None
    live = [
        s
        for s in snapshots(program)
        if s.op < i and s.method.startswith("replace") and relation_end(program, s, len(program.ops)) > i
    ]
    made = [s.method for s in live if s.name == name] or [s.method for s in live if s.source == name]
    if made:
        return made[-1]
    for op in reversed(program.ops[:i]):  # a replace from itself is no relation (``snapshots``)
        if ops.rebinds(op, name):
            return None
        own = [b.method for b in ops.rebindings(op) if b.name == name == b.source]
        if own:
            return own[0]
    return None


#: The ops that set the model's training mode, which decides what a layer's forward does and
#: whether a step can train at all.
MODE_OPS = ("train", "valid", "freeze")


def model_mode(program: Program, i: int) -> str | None:
    """The mode op op ``i`` runs under: ``valid`` or ``freeze`` where that is the model's last mode
    op before it, None where it is ``train`` or there is none (a model starts in training)."""
    modes = [o.kind for o in program.ops[:i] if o.kind in MODE_OPS]
    return modes[-1] if modes and modes[-1] != "train" else None


def frozen_layer(program: Program, i: int, name: str) -> str | None:
    """``freeze`` where op ``i`` is a forward of the layer that holds ``name`` (its running
    statistics, say) and runs under a ``freeze`` (``model_mode``): burn's ``Module::freeze`` turns
    training off as well as gradients, torch's ``requires_grad_(False)`` leaves the mode alone, so
    what the forward does to its state differs by that op. None otherwise."""
    op = program.ops[i]
    if op.kind != "forward":
        return None
    holders = [layer.name for layer in program.layers if name in {n for n, _, _ in layer.states()}]
    if holders != [op.layer]:
        return None
    return "freeze" if model_mode(program, i) == "freeze" else None


def status_method(program: Program, i: int) -> str | None:
    """What a failure of op ``i`` on one side is named by: a snapshot's method; for an op that
    trains (a step, a backward pass), the mode it ran under (``model_mode``: burn's ``valid()``
    model is on the backend without autodiff, and cannot train); else None."""
    op = program.ops[i]
    if op.kind == "snapshot":
        return op.method
    if op.kind in ("step", "backward", "backward_of"):
        return model_mode(program, i)
    return None
