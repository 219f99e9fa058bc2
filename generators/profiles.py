"""Program profiles: how long a drawn program is and how often each op is drawn.

``PROFILES`` names the profiles a campaign can use (``aliasfuzz fuzz --profile``); the strategy
that draws from one is ``generators.programs.programs``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The default profiles' share for torch's ``compile`` variant: it compiles each new line and
#: shape (about 40 ms each), and a warm program costs it several times what eager torch takes;
#: ``aliasfuzz bench`` measures what this share costs (docs/PERFORMANCE.md).
COMPILE_SHARE = 0.1

#: The default profiles' share for torch's ``graph`` variant: it compiles each run of fusing ops
#: as one function, a new graph for each new run (a run's text is rarely seen twice), so a warm
#: program costs it more than ``compile``; ``aliasfuzz bench`` measures what this share costs
#: (docs/PERFORMANCE.md).
GRAPH_SHARE = 0.1

#: The default profiles' share for torch's ``inductor`` variant, where ``--targets`` names it (it
#: is on request): Inductor generates and compiles C++ for each new line and shape (about 1.9 s
#: a program in a campaign's first minutes, 26 s for the first compile in a process), so it gets
#: a hundredth, and the ``compile`` profile a quarter (docs/PERFORMANCE.md).
INDUCTOR_SHARE = 0.01
#: The ``compile`` profile's share for the ``inductor`` variant.
INDUCTOR_COMPILE_SHARE = 0.25

#: The default profiles' share for burn's ``wgpu`` backend: each program costs it several times
#: what flex takes (lavapipe runs every kernel on the CPU), so it runs the share that keeps a
#: campaign within 15% of its programs/s without it (docs/PERFORMANCE.md, ``aliasfuzz bench``).
WGPU_SHARE = 0.02

#: How often each op is drawn, relative to the others, in the default profile.
DEFAULT_WEIGHTS: tuple[tuple[str, int], ...] = (
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
    ("backward_of", 2),
)


def _weights(**changed: int) -> tuple[tuple[str, int], ...]:
    """``DEFAULT_WEIGHTS`` with some ops' weights changed."""
    return tuple((kind, changed.get(kind, w)) for kind, w in DEFAULT_WEIGHTS)


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
    #: The share of programs a costly target runs: a variant by its name, where its plain device
    #: runs too (a variant absent here runs every program it is needed for), and a device by its
    #: target id, where another target runs too (absent: every program). Which programs is
    #: decided by each program's key (``Runner.submit``).
    target_shares: tuple[tuple[str, float], ...] = (
        ("compile", COMPILE_SHARE),
        ("graph", GRAPH_SHARE),
        ("inductor", INDUCTOR_SHARE),
        ("burn:wgpu", WGPU_SHARE),
    )
    weights: tuple[tuple[str, int], ...] = DEFAULT_WEIGHTS

    def op_menu(self) -> tuple[str, ...]:
        return tuple(kind for kind, w in self.weights for _ in range(w))


PROFILES = {
    "quick": Profile("quick", max_ops=8),
    "default": Profile("default", max_ops=16),
    "deep": Profile(
        "deep",
        max_ops=40,
        weights=_weights(write=5, step=6, move=3, assign=4, load=3, append=3, map=3, add=3),
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
            ("backward_of", 1),
        ),
    ),
    # Every program in bf16 or f16 (half each): the kernels and conversions of the narrow dtypes.
    "dtypes": Profile("dtypes", max_ops=16, dtype_share=10),
    # Aimed at the costly devices: every program runs on burn:wgpu (no share), in float32
    # (lavapipe has no bf16, so a bf16 program is `unsupported` there), with the default ops.
    # ``aliasfuzz fuzz --profile devices --targets burn``.
    "devices": Profile(
        "devices",
        max_ops=16,
        dtype_share=0,
        target_shares=(("compile", COMPILE_SHARE), ("graph", GRAPH_SHARE), ("inductor", INDUCTOR_SHARE)),
    ),
    # Aimed at torch.compile: every program the variant is needed for runs compiled, and most
    # ops are the ones it compiles (views, writes through them, element-wise ops, layers), with
    # fewer model-level ops between them. ``aliasfuzz fuzz --profile compile --targets torch``.
    "compile": Profile(
        "compile",
        max_ops=12,
        target_shares=(
            ("compile", 1.0),
            ("graph", 1.0),
            ("inductor", INDUCTOR_COMPILE_SHARE),
            ("burn:wgpu", WGPU_SHARE),
        ),
        weights=_weights(
            snapshot=10,
            write=5,
            step=2,
            move=1,
            save=1,
            load=1,
            set_lr=1,
            replace=1,
            backward=1,
            append=3,
            forward=4,
            assign=4,
            map=3,
            add=3,
            backward_of=3,
        ),
    ),
}


def get_profile(name: str | Profile) -> Profile:
    if isinstance(name, Profile):
        return name
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r} (known: {', '.join(PROFILES)})") from None
