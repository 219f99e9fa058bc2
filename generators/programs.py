"""Hypothesis strategies for aliasfuzz programs.

``programs(profile)`` draws a valid program of the case format: a few tensors, then a *flat* list
of ops. Every name an op uses is drawn as an index into the names bound so far, so deleting any
op while shrinking still leaves a valid program (the index simply lands on another name) and
Hypothesis's shrinker can cut the list down freely. A flat list shrinks to the true minimum far
more reliably than a ``RuleBasedStateMachine`` (see shared notes, "the field").

Values come from a small set of dyadic numbers that stay exact in float32 through SGD steps with
the learning rates drawn here, so most comparisons between frameworks can be exact.

The strategies are plain Hypothesis strategies: ``@given(programs("quick"))`` works in any test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from hypothesis import strategies as st

from harness.case.ir import METHODS, Program, TensorDecl, check_program, snapshot_shape

EXACT_VALUES = (0.0, 1.0, -1.0, 0.5, 2.0, -0.5, 0.25, 3.0, -2.0, 4.0)
LEARNING_RATES = (0.5, 0.25, 1.0, 0.125)
SCALE_FACTORS = (2.0, -1.0, 0.5, 0.0)


@dataclass(frozen=True)
class Profile:
    """Program length and op weights. Weights are relative; 0 disables an op."""

    name: str
    max_ops: int
    max_params: int = 3
    max_buffers: int = 2
    lazy_probability: float = 0.25
    weights: tuple[tuple[str, int], ...] = (
        ("snapshot", 8), ("write", 4), ("fill", 2), ("scale", 2), ("step", 5), ("move", 2),
        ("module_clone", 1), ("valid", 1), ("train", 1), ("no_grad", 1), ("freeze", 1), ("read", 1),
    )

    def op_menu(self) -> tuple[str, ...]:
        return tuple(kind for kind, w in self.weights for _ in range(w))


PROFILES = {
    "quick": Profile("quick", max_ops=8),
    "default": Profile("default", max_ops=16),
    "deep": Profile("deep", max_ops=40, weights=(
        ("snapshot", 8), ("write", 5), ("fill", 2), ("scale", 2), ("step", 6), ("move", 3),
        ("module_clone", 1), ("valid", 1), ("train", 1), ("no_grad", 1), ("freeze", 1), ("read", 1))),
}


def get_profile(name: str | Profile) -> Profile:
    if isinstance(name, Profile):
        return name
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r} (known: {', '.join(PROFILES)})") from None


shapes = st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple)
exact_values = st.sampled_from(EXACT_VALUES)
learning_rates = st.sampled_from(LEARNING_RATES)
scale_factors = st.sampled_from(SCALE_FACTORS)
# sampled_from leans towards its first element: put the method that most often reveals something
# there rather than ``alias``, which is the same in every framework.
methods = st.sampled_from(("clone",) + tuple(m for m in METHODS if m != "clone"))
optimizers = st.sampled_from(("sgd", "sgd_momentum", "adam", "adamw"))
device_roles = st.sampled_from(("home", "cpu", "alt"))
move_methods = st.sampled_from(("to", "fork"))
momenta = st.sampled_from((0.5, 0.9))
weight_decays = st.sampled_from((0.0, 0.5, 0.01))


# Strategies are built once and reused: building one inside the draw loop costs more than
# drawing from it (Hypothesis validates every new strategy).
@lru_cache(maxsize=None)
def values(shape: tuple[int, ...]) -> st.SearchStrategy[tuple[float, ...]]:
    n = math.prod(shape)
    return st.lists(exact_values, min_size=n, max_size=n).map(tuple)


@lru_cache(maxsize=None)
def _index(n: int) -> st.SearchStrategy[int]:
    return st.sampled_from(range(n))


@lru_cache(maxsize=None)
def _maybe_index(n: int) -> st.SearchStrategy[int | None]:
    return st.none() | st.integers(0, n - 1)


@lru_cache(maxsize=None)
def _menu(profile: "Profile") -> st.SearchStrategy[str]:
    return st.sampled_from(profile.op_menu())


@lru_cache(maxsize=None)
def _lengths(lo: int, hi: int) -> st.SearchStrategy[int]:
    # Longest first: sampled_from leans towards its first element, and a fuzzer wants long
    # programs (the minimizer makes findings short again).
    return st.sampled_from(range(hi, lo - 1, -1))


@lru_cache(maxsize=None)
def _count(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.integers(lo, hi)


@st.composite
def tensors(draw, profile: Profile) -> tuple[TensorDecl, ...]:
    out = []
    for i in range(draw(_count(1, profile.max_params))):
        shape = draw(shapes)
        grad = draw(values(shape)) if draw(st.booleans()) else None
        out.append(TensorDecl(f"p{i}", "param", shape, draw(values(shape)), grad))
    for i in range(draw(_count(0, profile.max_buffers))):
        shape = draw(shapes)
        out.append(TensorDecl(f"b{i}", "buffer", shape, draw(values(shape))))
    if profile.lazy_probability and draw(_count(0, 99)) < profile.lazy_probability * 100:
        shape = draw(shapes)
        if draw(st.booleans()):
            out.append(TensorDecl("l0", "lazy", shape, init="const", fill=draw(exact_values)))
        else:
            out.append(TensorDecl("l0", "lazy", shape, init="uniform", seed=draw(_count(0, 99))))
    return tuple(out)


def _pick(draw, names: list[str]) -> str:
    return names[draw(_index(len(names)))]


@st.composite
def programs(draw, profile: str | Profile = "default", max_ops: int | None = None) -> Program:
    """A valid program. ``max_ops`` overrides the profile's length (benchmarks use it)."""
    prof = get_profile(profile)
    decls = draw(tensors(prof))
    # sampled_from, not integers: integers() leans hard towards its lower bound, and half the
    # programs would have one op.
    n_ops = draw(_lengths(1 if max_ops is None else max_ops, max_ops or prof.max_ops))
    shape_of: dict[str, tuple[int, ...]] = {t.name: t.shape for t in decls}
    base = [t.name for t in decls]
    params = [t.name for t in decls if t.trainable]
    names = list(base)
    menu = _menu(prof)
    ops: list[dict[str, Any]] = []
    n_snap = n_module = 0
    for _ in range(n_ops):
        kind = draw(menu)
        if kind == "snapshot":
            method = draw(methods)
            of = _pick(draw, base if method == "state_dict" else names)
            if method == "transpose" and len(shape_of[of]) < 2:
                method = "clone"
            name = f"s{n_snap}"
            n_snap += 1
            ops.append({"op": "snapshot", "name": name, "of": of, "method": method})
            shape_of[name] = snapshot_shape(method, shape_of[of])
            names.append(name)
        elif kind == "write":
            target = _pick(draw, names)
            shape = shape_of[target]
            index = draw(_maybe_index(shape[0]))
            row = shape if index is None else shape[1:]
            ops.append({"op": "write", "target": target, "index": index,
                        "value": list(draw(values(row or (1,))))})
        elif kind == "fill":
            ops.append({"op": "fill", "target": _pick(draw, names), "value": draw(exact_values)})
        elif kind == "scale":
            ops.append({"op": "scale", "target": _pick(draw, names), "factor": draw(scale_factors)})
        elif kind == "step":
            optimizer = draw(optimizers)
            op = {"op": "step", "optimizer": optimizer, "lr": draw(learning_rates)}
            if optimizer == "sgd_momentum":
                op["momentum"] = draw(momenta)
            if optimizer == "adamw":
                op["weight_decay"] = draw(weight_decays)
            ops.append(op)
        elif kind == "move":
            if not params:
                continue
            ops.append({"op": "move", "target": _pick(draw, params),
                        "device": draw(device_roles), "method": draw(move_methods)})
        elif kind == "module_clone":
            name = f"m{n_module}"
            n_module += 1
            ops.append({"op": "module_clone", "name": name})
            for p in params:
                shape_of[f"{name}.{p}"] = shape_of[p]
                names.append(f"{name}.{p}")
        elif kind == "read":
            ops.append({"op": "read", "target": _pick(draw, names)})
        else:
            ops.append({"op": kind})
    return Program(decls, check_program(decls, ops))
