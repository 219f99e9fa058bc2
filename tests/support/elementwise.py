"""What both tiers of the elementwise tests share: ``FNS``, ``VALUES``."""

from __future__ import annotations

import numpy as np

#: What each function computes, in float32 (exact on the values used here).
FNS = {
    "neg": lambda a: -a,
    "relu": lambda a: np.maximum(a, 0),
    "add_scalar": lambda a: a + 1,
    "clamp": lambda a: np.clip(a, -1, 1),
}


VALUES = (-2.0, -0.5, 0.5, 2.0)
