"""Layer declarations: the model's layers with running state or a training flag.

A case's ``[layers]`` table declares them next to its tensors::

    [layers]
    bn = { kind = "batch_norm", features = 2, momentum = 0.5 }
    drop = { kind = "dropout", p = 1.0 }

A ``batch_norm`` layer (torch ``BatchNorm1d(features, momentum=m, affine=False)``, candle
``candle_nn::batch_norm`` with ``affine: false``, burn ``BatchNorm``) holds two running statistics,
bound from the start under ``<layer>.running_mean`` (zeros) and ``<layer>.running_var`` (ones):
names of the model, like its trainable tensors, so ``module_clone`` and ``save`` bind them under
their prefix, ``state_dict`` snapshots read them, and writes and snapshots take them like buffers.
A ``dropout`` layer has no state: only the model's training flag, which ``valid`` and ``train``
set, decides what ``forward`` does with it. ``p`` is 0 or 1 so that every output is exact.

Invariants: layer names are identifiers distinct from every tensor name; a state name has one dot,
so it never equals a tensor or snapshot name (identifiers), and a prefix ``<x>`` binds
``<x>.<layer>.<stat>``, which no other op binds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.case import values as cv
from harness.case.values import is_identifier

LAYER_KINDS = ("batch_norm", "dropout")
#: A batch-norm layer's running statistics, in the order every probe binds them, and their
#: initial value (torch ``reset_running_stats``, candle and burn alike).
RUNNING_STATS = (("running_mean", 0.0), ("running_var", 1.0))
#: The epsilon every batch-norm layer adds to the variance: each framework's default.
BATCH_NORM_EPS = 1e-5
MAX_FEATURES = 8
DROPOUT_PS = (0.0, 1.0)


@dataclass(frozen=True)
class LayerDecl:
    """One layer. ``features`` and ``momentum`` are a batch norm's; ``p`` a dropout's."""

    name: str
    kind: str
    features: int | None = None
    momentum: float | None = None
    p: float | None = None

    def states(self) -> tuple[tuple[str, tuple[int, ...], float], ...]:
        """The names the layer binds: ``(name, shape, initial value of every element)``."""
        if self.kind != "batch_norm":
            return ()
        return tuple((f"{self.name}.{stat}", (self.features,), init) for stat, init in RUNNING_STATS)

    def to_wire(self) -> dict[str, Any]:
        if self.kind == "batch_norm":
            return {"name": self.name, "kind": self.kind, "features": self.features, "momentum": self.momentum}
        return {"name": self.name, "kind": self.kind, "p": self.p}

    def document(self) -> dict[str, Any]:
        """The layer as a case file's ``[layers]`` entry writes it."""
        return {k: v for k, v in self.to_wire().items() if k != "name"}


def state_names(layers: Sequence[LayerDecl]) -> list[str]:
    return [name for layer in layers for name, _, _ in layer.states()]


def layer_of(layers: Sequence[LayerDecl], name: str) -> LayerDecl | None:
    return next((layer for layer in layers if layer.name == name), None)


def input_problem(layer: LayerDecl, shape: tuple[int, ...]) -> str | None:
    """Why a tensor of ``shape`` cannot be ``layer``'s input, or None. A batch norm reads
    ``[batch, features]`` with a batch of 2 or more: torch refuses one value per channel in
    training, and the unbiased variance of one value divides by zero."""
    if layer.kind == "batch_norm":
        if len(shape) != 2 or shape[1] != layer.features or shape[0] < 2:
            return f"{layer.name} reads [batch >= 2, {layer.features}], got {list(shape)}"
    return None


def check_layer(name: Any, raw: Any, taken: set[str], err, where: str | None = None) -> LayerDecl:
    """One ``[layers]`` entry (a TOML table) -> its declaration; ``taken``: the tensor and layer
    names declared so far (updated)."""

    where = where or f"layers.{name}"
    if not is_identifier(name):
        raise err(where, "layer names are identifiers (letters, digits, '_')")
    if name in taken:
        raise err(where, "already declared (a tensor or a layer)")
    if not isinstance(raw, dict):
        raise err(where, 'expected a table like { kind = "batch_norm", features = 2, momentum = 0.1 }')
    kind = raw.get("kind")
    if kind not in LAYER_KINDS:
        raise err(f"{where}.kind", f"must be one of {', '.join(LAYER_KINDS)}, got {cv.brief(kind)}")
    allowed = {"kind", "features", "momentum"} if kind == "batch_norm" else {"kind", "p"}
    for key in raw:
        if key not in allowed:
            raise err(f"{where}.{key}", f"unknown field for a {kind} layer (allowed: {', '.join(sorted(allowed))})")
    taken.add(name)
    if kind == "dropout":
        p = cv.f32(raw.get("p", 0.0), f"{where}.p", err)
        if p not in DROPOUT_PS:
            raise err(f"{where}.p", f"must be 0 or 1 (exact outputs), got {p!r}")
        return LayerDecl(name, kind, p=p)
    features = raw.get("features")
    if not isinstance(features, int) or isinstance(features, bool) or not 1 <= features <= MAX_FEATURES:
        raise err(f"{where}.features", f"must be an integer in 1..{MAX_FEATURES}, got {cv.brief(features)}")
    momentum = cv.f32(raw.get("momentum", 0.1), f"{where}.momentum", err)
    if not 0 < momentum <= 1:
        raise err(f"{where}.momentum", f"must be in (0, 1], got {momentum!r}")
    return LayerDecl(name, kind, features=features, momentum=momentum)


def check_decls(layers: Any, tensor_names: set[str], err) -> tuple[LayerDecl, ...]:
    """Layers built in code (generator, minimizer, corpus): ``check_layer`` on each one's table."""
    if not isinstance(layers, (tuple, list)):
        raise err("layers", f"expected a sequence of LayerDecl, got {cv.brief(layers)}")
    taken = set(tensor_names)
    out = []
    for layer in layers:
        if not isinstance(layer, LayerDecl):
            raise err("layers", f"expected LayerDecl, got {cv.brief(layer)}")
        out.append(check_layer(layer.name, layer.document(), taken, err))
    return tuple(out)
