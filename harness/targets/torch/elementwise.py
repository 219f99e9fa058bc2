"""The torch target's element-wise ops, ``map`` and ``add``: each binds its target again to a new
tensor, as ``x = torch.relu(x)`` does (a mixin of ``TorchSession``, as ``LayerOps`` is)."""

from __future__ import annotations

import torch

#: ``map``'s functions as torch calls (``op_table.MAP_FNS``).
MAP_CALLS = {
    "neg": torch.neg,
    "relu": torch.relu,
    "add_scalar": lambda t: torch.add(t, 1.0),
    "clamp": lambda t: torch.clamp(t, -1.0, 1.0),
}


class ElementwiseOps:
    """``_op_map`` and ``_op_add``; the session provides ``bound``, ``caches`` and ``_bind``."""

    def _op_map(self, op: dict) -> None:
        """``x = torch.relu(x)`` and the like: a new tensor (torch has no value semantics to keep
        a buffer unique; the old tensor lives on in what shares it)."""
        name = op["target"]
        self.caches.pop(name, None)
        self._bind(name, MAP_CALLS[op["fn"]](self.bound[name]))

    def _op_add(self, op: dict) -> None:
        """``x = x + other``: a new tensor; a row broadcasts along the first dimension."""
        name = op["target"]
        self.caches.pop(name, None)
        self._bind(name, self.bound[name] + self.bound[op["other"]])
