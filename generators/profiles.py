"""Program profiles: how long a drawn program is and how often each op is drawn.

``PROFILES`` names the profiles a campaign can use (``aliasfuzz fuzz --profile``); the strategy
that draws from one is ``generators.programs.programs``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    """Program length and op weights. Weights are relative; 0 disables an op."""

    name: str
    max_ops: int
    max_params: int = 3
    max_buffers: int = 2
    lazy_probability: float = 0.25
    #: How often a program gets a batch-norm layer (over a declared [batch, features] tensor),
    #: and how often a dropout layer.
    layer_probability: float = 0.3
    #: In how many programs of ten the case's dtype is not float32 (one bf16, one f16 at 2).
    dtype_share: int = 2
    weights: tuple[tuple[str, int], ...] = (
        ("snapshot", 8),
        ("write", 4),
        ("fill", 2),
        ("scale", 2),
        ("step", 5),
        ("move", 2),
        ("module_clone", 1),
        ("valid", 1),
        ("train", 1),
        ("no_grad", 1),
        ("freeze", 1),
        ("read", 1),
        ("assign", 3),
        ("save", 2),
        ("load", 2),
        ("set_lr", 2),
        ("replace", 2),
        ("backward", 2),
        ("append", 2),
        ("forward", 3),
        ("map", 2),
        ("add", 2),
    )

    def op_menu(self) -> tuple[str, ...]:
        return tuple(kind for kind, w in self.weights for _ in range(w))


PROFILES = {
    "quick": Profile("quick", max_ops=8),
    "default": Profile("default", max_ops=16),
    "deep": Profile(
        "deep",
        max_ops=40,
        weights=(
            ("snapshot", 8),
            ("write", 5),
            ("fill", 2),
            ("scale", 2),
            ("step", 6),
            ("move", 3),
            ("module_clone", 1),
            ("valid", 1),
            ("train", 1),
            ("no_grad", 1),
            ("freeze", 1),
            ("read", 1),
            ("assign", 4),
            ("save", 2),
            ("load", 3),
            ("set_lr", 2),
            ("replace", 2),
            ("backward", 2),
            ("append", 3),
            ("forward", 3),
            ("map", 3),
            ("add", 3),
        ),
    ),
    # Around lazy initialisation: a lazy tensor in every program, and the ops whose effect on it
    # depends on when it is first read (moves, module clones, reads, steps).
    "lazy": Profile(
        "lazy",
        max_ops=10,
        lazy_probability=1.0,
        weights=(
            ("snapshot", 4),
            ("write", 2),
            ("fill", 1),
            ("scale", 1),
            ("step", 5),
            ("move", 5),
            ("module_clone", 3),
            ("valid", 1),
            ("train", 1),
            ("no_grad", 1),
            ("freeze", 1),
            ("read", 2),
            ("assign", 1),
            ("save", 2),
            ("load", 1),
            ("set_lr", 1),
            ("replace", 1),
            ("backward", 2),
            ("append", 1),
            ("forward", 1),
            ("map", 1),
            ("add", 1),
        ),
    ),
    # Every program in bf16 or f16 (half each): the kernels and conversions of the narrow dtypes.
    "dtypes": Profile("dtypes", max_ops=16, dtype_share=10),
}


def get_profile(name: str | Profile) -> Profile:
    if isinstance(name, Profile):
        return name
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r} (known: {', '.join(PROFILES)})") from None
