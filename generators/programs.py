"""Hypothesis strategies for aliasfuzz programs.

``programs(profile)`` draws a valid program of the case format: a few tensors, then a *flat* list
of ops. Every name an op uses is drawn as an index into the names bound so far, so deleting any
op while shrinking still leaves a valid program (the index simply lands on another name) and
Hypothesis's shrinker can cut the list down freely. A flat list shrinks to the true minimum far
more reliably than a ``RuleBasedStateMachine`` (see shared notes, "the field").

Values come from a small set of dyadic numbers that stay exact in float32 through SGD steps with
the learning rates drawn here, so most comparisons between frameworks can be exact.

The strategies are Hypothesis strategies: ``@given(programs("quick"))`` works in any test. Their
leaves are one primitive draw each (``generators.choices``), the choice ``sampled_from``,
``booleans``, ``integers`` or ``binary`` would make, at a fraction of the cost.
"""

from __future__ import annotations

import itertools
import math
from functools import cache
from typing import Any

from hypothesis.internal.conjecture.utils import calc_label_from_name
from hypothesis.strategies import SearchStrategy

from generators.choices import Bytes, Count, FastDraw, Flag, Menu
from generators.profiles import PROFILES, Profile, get_profile  # noqa: F401 - re-exported
from harness.case import ops
from harness.case.ir import Program, TensorDecl, check_program
from harness.case.layers import DROPOUT_PS, LayerDecl, input_problem

EXACT_VALUES = (0.0, 1.0, -1.0, 0.5, 2.0, -0.5, 0.25, 3.0, -2.0, 4.0)
LEARNING_RATES = (0.5, 0.25, 1.0, 0.125)
SCALE_FACTORS = (2.0, -1.0, 0.5, 0.0)


def _shape_menu() -> tuple[tuple[int, ...], ...]:
    """Every shape of rank 1 to 3 with sides 1 to 3, simplest first (rank, then size), each
    repeated so that a rank is drawn about as often as the list of sides drawn before: two in
    five programs' tensors of rank 1, one in five of rank 2, two in five of rank 3."""
    copies = {1: 18, 2: 3, 3: 2}
    shapes = sorted(
        (s for r in copies for s in itertools.product((1, 2, 3), repeat=r)), key=lambda s: (len(s), math.prod(s), s)
    )
    return tuple(s for s in shapes for _ in range(copies[len(s)]))


# One draw for a shape: drawn as a list of sides it took about seven (the list's own draws, a
# "more" flag and a side per dimension), a fifth of a program's draws. The shrinker lowers the
# index, which reaches the simpler shapes first.
shapes = Menu(_shape_menu(), "shape")
exact_values = Menu(EXACT_VALUES, "exact value")
learning_rates = Menu(LEARNING_RATES, "learning rate")
scale_factors = Menu(SCALE_FACTORS, "scale factor")
FLAG = Flag()
# A menu leans towards its first item (as sampled_from does): put the method that most often
# reveals something there rather than ``alias``, which is the same in every framework.
methods = Menu(("clone",) + tuple(m for m in ops.METHODS if m != "clone"), "method")
optimizers = Menu(ops.OPTIMIZERS, "optimizer")
device_roles = Menu(ops.DEVICE_ROLES, "device role")
move_methods = Menu(ops.MOVE_METHODS, "move method")
momenta = Menu((0.5, 0.9), "momentum")
dampenings = Menu((0.0, 0.5), "dampening")
checkpoint_stores = Menu(ops.CHECKPOINT_STORES, "checkpoint store")
replace_hows = Menu(ops.REPLACE_HOWS, "replace how")
append_hows = Menu(ops.APPEND_HOWS, "append how")
map_fns = Menu(ops.MAP_FNS, "map fn")
assign_flags = Menu((False, True), "assign flag")
weight_decays = Menu((0.0, 0.5, 0.01), "weight decay")


@cache
def dtypes(share: int) -> Menu:
    """A case's dtype: float32 but in ``share`` programs of ten, split between bf16 and f16.
    One integer draw that shrinks to 0, float32 (``ops.DTYPES``' simplest)."""
    others = tuple(ops.DTYPES[1 + i % (len(ops.DTYPES) - 1)] for i in range(share))
    return Menu(tuple(others[i - 10 + share] if i >= 10 - share else "f32" for i in range(10)), f"dtype {share}")


# Strategies are built once and reused: building one inside the draw loop costs more than
# drawing from it (Hypothesis validates every new strategy).
@cache
def values(shape: tuple[int, ...]) -> Bytes:
    return _values(math.prod(shape))


def _values(n: int) -> Bytes:
    # One draw for the whole tensor, n bytes: an index draw per element cost a Hypothesis draw
    # each (about a third of a program's draws; a fixed-size ``st.lists`` twice that again).
    return Bytes(n, _exact_values, "exact values")


def _exact_values(raw: bytes) -> tuple[float, ...]:
    """Byte ``b`` of element ``i`` is ``EXACT_VALUES[(b * K // 256 + i) % K]``: lower bytes give
    earlier values, offset by the position, so that the simplest choice (all zero bytes, which
    is also what Hypothesis puts where a mutant's choices no longer line up) is a tensor of
    distinct values, not of zeros, which would hide what a scale or a view does to them."""
    k = len(EXACT_VALUES)
    return tuple(EXACT_VALUES[((b * k >> 8) + i) % k] for i, b in enumerate(raw))


@cache
def _index(n: int) -> Menu:
    return Menu(range(n), f"index {n}")


@cache
def _maybe_index(n: int) -> Menu:
    # None half the time, else an index: one draw (``none() | integers()`` took two), which
    # shrinks to None, the whole tensor.
    return Menu((None,) * n + tuple(range(n)), f"maybe index {n}")


@cache
def _menu(profile: Profile) -> Menu:
    return Menu(profile.op_menu(), f"op {profile.name}")


@cache
def _lengths(lo: int, hi: int) -> Menu:
    # Longest first: a menu leans towards its first item, and a fuzzer wants long
    # programs (the minimizer makes findings short again).
    return Menu(range(hi, lo - 1, -1), f"length {lo} {hi}")


@cache
def _count(lo: int, hi: int) -> Count:
    return Count(lo, hi)


def tensors(draw: FastDraw, profile: Profile) -> tuple[TensorDecl, ...]:
    out = []
    for i in range(draw(_count(1, profile.max_params))):
        shape = draw(shapes)
        grad = draw(values(shape)) if draw(FLAG) else None
        out.append(TensorDecl(f"p{i}", "param", shape, draw(values(shape)), grad))
    for i in range(draw(_count(0, profile.max_buffers))):
        shape = draw(shapes)
        out.append(TensorDecl(f"b{i}", "buffer", shape, draw(values(shape))))
    if profile.lazy_probability and draw(_count(0, 99)) < profile.lazy_probability * 100:
        # Up to two, so that the order of first reads can matter (``program_rng``: both draw
        # from the program's one generator). Never ``uniform`` beside ``program_rng``: burn's
        # generator is one per backend, and a uniform init reseeds it, which would make every
        # later draw depend on when that init ran.
        drawn = None
        for i in range(draw(_count(1, 2))):
            shape = draw(shapes)
            if draw(FLAG):
                out.append(TensorDecl(f"l{i}", "lazy", shape, init="const", fill=draw(exact_values)))
                continue
            drawn = drawn or ("uniform" if draw(FLAG) else "program_rng")
            if drawn == "uniform":
                out.append(TensorDecl(f"l{i}", "lazy", shape, init=drawn, seed=draw(_count(0, 99))))
            else:
                out.append(TensorDecl(f"l{i}", "lazy", shape, init=drawn))
    return tuple(out)


BATCH_NORM_MOMENTA = (0.5, 1.0, 0.25)
batch_norm_momenta = Menu(BATCH_NORM_MOMENTA, "batch norm momentum")
dropout_ps = Menu(DROPOUT_PS, "dropout p")


def layers(draw: FastDraw, profile: Profile, decls: tuple[TensorDecl, ...]) -> tuple[LayerDecl, ...]:
    """A batch norm over the features of a declared ``[batch >= 2, features]`` tensor (so a
    ``forward`` has an input from the start), and a dropout, each with ``layer_probability``.
    Momenta are dyadic, so that the running mean stays exact."""
    out = []
    chance = int(profile.layer_probability * 100)
    inputs = [t for t in decls if len(t.shape) == 2 and t.shape[0] >= 2]
    if inputs and draw(_count(0, 99)) < chance:
        features = _pick_item(draw, inputs).shape[1]
        out.append(LayerDecl("bn", "batch_norm", features=features, momentum=draw(batch_norm_momenta)))
    if draw(_count(0, 99)) < chance:
        out.append(LayerDecl("drop", "dropout", p=draw(dropout_ps)))
    return tuple(out)


def _pick(draw, names: list[str]) -> str:
    return _pick_item(draw, names)


class _Drawn:
    """The names a program being drawn has bound so far, and its ops."""

    def __init__(self, decls: tuple[TensorDecl, ...], layers: tuple[LayerDecl, ...] = ()):
        self.shape_of: dict[str, tuple[int, ...]] = {t.name: t.shape for t in decls}
        self.shape_of.update({n: shape for layer in layers for n, shape, _ in layer.states()})
        self.layers = layers
        self.stats = [n for layer in layers for n, _, _ in layer.states()]
        self.base = [t.name for t in decls] + self.stats
        self.buffers = [t.name for t in decls if t.kind == "buffer"]
        self.params = [t.name for t in decls if t.trainable]
        self.model = self.params + self.stats  # what module_clone and save bind under a prefix
        self.names = list(self.base)
        self.ops: list[dict[str, Any]] = []
        self.n_snap = self.n_module = 0
        self.checkpoints: list[str] = []
        # The hyper-parameters of every live optimizer (as drawn, defaults left out), so that a
        # later step or set_lr can name one again.
        self.optimizers: list[dict[str, Any]] = []


def _draw_snapshot(draw, p: _Drawn) -> None:
    method = draw(methods)
    spec = ops.METHODS_BY_NAME[method]
    # A source of a shape the method accepts (`squeeze`: one row, `permute`: rank 3), drawn
    # among those only so that shape-bound methods are drawn as often as any; none: a clone.
    pool = [n for n in (p.base if method == "state_dict" else p.names) if spec.accepts(p.shape_of[n])]
    if not pool:
        method, pool = "clone", p.names
    of = _pick(draw, pool)
    name = f"s{p.n_snap}"
    p.n_snap += 1
    p.ops.append({"op": "snapshot", "name": name, "of": of, "method": method})
    p.shape_of[name] = ops.snapshot_shape(method, p.shape_of[of])
    p.names.append(name)


def _draw_write(draw, p: _Drawn) -> None:
    target = _pick(draw, p.names)
    shape = p.shape_of[target]
    index = draw(_maybe_index(shape[0]))
    row = shape if index is None else shape[1:]
    p.ops.append({"op": "write", "target": target, "index": index, "value": list(draw(values(row or (1,))))})


def _draw_optimizer(draw, p: _Drawn) -> dict[str, Any]:
    """The hyper-parameters of a live optimizer (half the time, when there is one) or new ones."""
    if p.optimizers and draw(FLAG):
        return dict(_pick_item(draw, p.optimizers))
    optimizer = draw(optimizers)
    spec: dict[str, Any] = {"optimizer": optimizer, "lr": draw(learning_rates)}
    if optimizer == "sgd_momentum":
        spec["momentum"] = draw(momenta)
        spec["dampening"] = draw(dampenings)
    if optimizer == "adamw":
        spec["weight_decay"] = draw(weight_decays)
    p.optimizers.append(spec)
    return dict(spec)


def _pick_item(draw, items: list):
    # No draw where there is no choice: one that can only give 0 costs a draw all the same.
    return items[0] if len(items) == 1 else items[draw(_index(len(items)))]


def _draw_step(draw, p: _Drawn) -> None:
    p.ops.append({"op": "step", **_draw_optimizer(draw, p)})


def _draw_set_lr(draw, p: _Drawn) -> None:
    spec = _draw_optimizer(draw, p)
    to = draw(learning_rates)
    p.ops.append({"op": "set_lr", **spec, "to": to})
    live = next(s for s in p.optimizers if s == spec)
    live["lr"] = to  # the live optimizer is keyed by its new learning rate from now on


def _draw_move(draw, p: _Drawn) -> None:
    if p.params:
        p.ops.append(
            {"op": "move", "target": _pick(draw, p.params), "device": draw(device_roles), "method": draw(move_methods)}
        )


def _draw_module_clone(draw, p: _Drawn) -> None:
    name = f"m{p.n_module}"
    p.n_module += 1
    p.ops.append({"op": "module_clone", "name": name})
    for param in p.model:
        p.shape_of[f"{name}.{param}"] = p.shape_of[param]
        p.names.append(f"{name}.{param}")


def _draw_save(draw, p: _Drawn) -> None:
    name = f"c{len(p.checkpoints)}"
    p.checkpoints.append(name)
    p.ops.append({"op": "save", "name": name, "to": draw(checkpoint_stores)})
    for param in p.model:
        p.shape_of[f"{name}.{param}"] = p.shape_of[param]
        p.names.append(f"{name}.{param}")


def _draw_load(draw, p: _Drawn) -> None:
    if not p.checkpoints:  # nothing to load yet: take the checkpoint (so max_ops=N still gives N)
        _draw_save(draw, p)
        return
    p.ops.append({"op": "load", "from": _pick(draw, p.checkpoints), "assign": draw(assign_flags)})


def _draw_replace(draw, p: _Drawn) -> None:
    if not p.params:
        return
    target, how = _pick(draw, p.params), draw(replace_hows)
    shape = p.shape_of[target]
    # A tie takes another parameter (a tensor is refused everywhere); without one, a new object.
    values = [n for n in p.params if n != target and p.shape_of[n] == shape] if how == "tie" else []
    if not values:
        how = "new" if how == "tie" else how
        values = [n for n in p.names if p.shape_of[n] == shape]  # the target itself at least
    p.ops.append({"op": "replace", "target": target, "value": _pick(draw, values), "how": how})


def _draw_assign(draw, p: _Drawn) -> None:
    target = _pick(draw, p.names)
    shape = p.shape_of[target]
    index = draw(_maybe_index(shape[0]))
    want = shape if index is None else shape[1:]
    sources = [n for n in p.names if p.shape_of[n] == want]  # the target itself, views of it, ...
    # Or a row of a name (dst[i] = src[j], the KV-cache write from a transposed snapshot).
    row_sources = [n for n in p.names if p.shape_of[n] and p.shape_of[n][1:] == want]
    if row_sources and (not sources or draw(FLAG)):
        source = _pick(draw, row_sources)
        row = draw(_count(0, p.shape_of[source][0] - 1))
        p.ops.append({"op": "assign", "target": target, "source": source, "index": index, "source_index": row})
        return
    if not sources:  # no name has the row's shape: copy a whole tensor, which the target fits
        index, sources = None, [n for n in p.names if p.shape_of[n] == shape]
    p.ops.append({"op": "assign", "target": target, "source": _pick(draw, sources), "index": index})


def _draw_append(draw, p: _Drawn) -> None:
    """A buffer or snapshot grown by a row or rows of a name (itself included), within
    ``ops.CACHE_ROWS``; a snapshot instead when there is none to grow or it is full (so
    ``max_ops=N`` still gives N ops)."""
    targets = _remakeable(p)
    if not targets:
        _draw_snapshot(draw, p)
        return
    target = _pick(draw, targets)
    shape = p.shape_of[target]
    sources = [
        n
        for n in p.names
        if (rows := ops.appended_rows(shape, p.shape_of[n])) is not None and shape[0] + rows <= ops.CACHE_ROWS
    ]
    if not sources:
        _draw_snapshot(draw, p)
        return
    source = _pick(draw, sources)
    p.ops.append({"op": "append", "target": target, "source": source, "how": draw(append_hows)})
    p.shape_of[target] = (shape[0] + ops.appended_rows(shape, p.shape_of[source]),) + shape[1:]


def _remakeable(p: _Drawn) -> list[str]:
    """The names ``map`` and ``add`` may bind again: buffers and snapshots (not the model's)."""
    return [n for n in p.names if n in p.buffers or n not in p.base]


def _draw_map(draw, p: _Drawn) -> None:
    """A buffer or snapshot bound again to an element-wise function of it; a snapshot instead
    when there is none."""
    targets = _remakeable(p)
    if not targets:
        _draw_snapshot(draw, p)
        return
    p.ops.append({"op": "map", "target": _pick(draw, targets), "fn": draw(map_fns)})


def _draw_add(draw, p: _Drawn) -> None:
    """A buffer or snapshot bound again to its sum with a name of its shape or of its row's
    (itself included); a snapshot instead when there is none."""
    targets = _remakeable(p)
    if not targets:
        _draw_snapshot(draw, p)
        return
    target = _pick(draw, targets)
    others = [n for n in p.names if ops.broadcasts_to(p.shape_of[n], p.shape_of[target])]
    p.ops.append({"op": "add", "target": target, "other": _pick(draw, others)})


def _draw_forward(draw, p: _Drawn) -> None:
    """A layer's output on a name it reads (a batch norm: ``[batch >= 2, features]``); a
    snapshot instead when there is no layer or no such name."""
    if not p.layers:
        _draw_snapshot(draw, p)
        return
    layer = _pick_item(draw, list(p.layers))
    inputs = [n for n in p.names if input_problem(layer, p.shape_of[n]) is None]
    if not inputs:
        _draw_snapshot(draw, p)
        return
    source = _pick(draw, inputs)
    name = f"s{p.n_snap}"
    p.n_snap += 1
    p.ops.append({"op": "forward", "name": name, "layer": layer.name, "input": source})
    p.shape_of[name] = p.shape_of[source]
    p.names.append(name)


def _draw_backward_of(draw, p: _Drawn) -> None:
    """A backward pass over the graph of a name the model's params may have made: a param or a
    snapshot (a buffer, a layer's statistics or a name made from them has no graph, and torch
    refuses a pass over it); the plain ``backward`` instead when there is none."""
    tracked = [n for n in p.names if n not in p.buffers and n not in p.stats]
    if not tracked:
        p.ops.append({"op": "backward"})
        return
    p.ops.append({"op": "backward_of", "of": _pick(draw, tracked)})


#: How each op kind of the op table is drawn; an op with no fields is drawn as itself.
#: ``tests/unit/case/test_op_table.py`` checks that every op of the table can be drawn.
DRAWERS = {
    "snapshot": _draw_snapshot,
    "write": _draw_write,
    "fill": lambda draw, p: p.ops.append({"op": "fill", "target": _pick(draw, p.names), "value": draw(exact_values)}),
    "scale": lambda draw, p: p.ops.append(
        {"op": "scale", "target": _pick(draw, p.names), "factor": draw(scale_factors)}
    ),
    "step": _draw_step,
    "move": _draw_move,
    "module_clone": _draw_module_clone,
    "read": lambda draw, p: p.ops.append({"op": "read", "target": _pick(draw, p.names)}),
    "assign": _draw_assign,
    "save": _draw_save,
    "load": _draw_load,
    "set_lr": _draw_set_lr,
    "replace": _draw_replace,
    "append": _draw_append,
    "forward": _draw_forward,
    "map": _draw_map,
    "add": _draw_add,
    "backward_of": _draw_backward_of,
}


def draw_op(draw, kind: str, p: _Drawn) -> None:
    drawer = DRAWERS.get(kind)
    if drawer is None:
        assert not ops.OPS[kind].fields, f"op {kind!r} has fields but no drawer"
        p.ops.append({"op": kind})
    else:
        drawer(draw, p)


class ProgramStrategy(SearchStrategy):
    """A valid program of ``profile``, ``max_ops`` long if given. Its leaves are drawn with
    ``FastDraw`` (``generators.choices``); the declarations and the layers are a span each, as
    their composites were."""

    def __init__(self, profile: Profile, max_ops: int | None):
        super().__init__()
        self.profile, self.max_ops = profile, max_ops

    def __repr__(self) -> str:
        return f"programs({self.profile.name!r}, max_ops={self.max_ops})"

    def do_draw(self, data) -> Program:
        prof, max_ops, draw = self.profile, self.max_ops, FastDraw(data)
        draw.span(_TENSORS_LABEL)
        decls = tensors(draw, prof)
        draw.end()
        draw.span(_LAYERS_LABEL)
        declared_layers = layers(draw, prof, decls)
        draw.end()
        # A menu of lengths, not integers: integers() leans hard towards its lower bound, and
        # half the programs would have one op.
        n_ops = draw(_lengths(1 if max_ops is None else max_ops, max_ops or prof.max_ops))
        drawn = _Drawn(decls, declared_layers)
        menu = _menu(prof)
        # No span per op: Hypothesis's shrinker then took a shrinkable finding (a clone written
        # by a fill) to a local minimum of three ops rather than the two it needs
        # (tests/e2e/test_engine_fake.py), and the mutator copies an op's fields, not whole ops.
        for _ in range(n_ops):
            draw_op(draw, draw(menu), drawn)
        dtype = draw(dtypes(prof.dtype_share))
        draw.finish()
        return Program(
            decls,
            check_program(decls, drawn.ops, layers=declared_layers, dtype=dtype),
            layers=declared_layers,
            dtype=dtype,
        )


_TENSORS_LABEL = calc_label_from_name("aliasfuzz tensors")
_LAYERS_LABEL = calc_label_from_name("aliasfuzz layers")


@cache
def programs(profile: str | Profile = "default", max_ops: int | None = None) -> ProgramStrategy:
    """The strategy of valid programs. ``max_ops`` overrides the profile's length (benchmarks
    use it)."""
    return ProgramStrategy(get_profile(profile), max_ops)
