"""The torch target's element-wise ops, ``map`` and ``add``: each binds its target again to a new
tensor, as ``x = torch.relu(x)`` does (a mixin of ``TorchSession``, as ``LayerOps`` is)."""

from __future__ import annotations

from harness.case.ops import Op

#: ``map``'s functions as the source of their torch calls on a variable (``op_table.MAP_FNS``).
MAP_CALLS = {
    "neg": "torch.neg({})",
    "relu": "torch.relu({})",
    "add_scalar": "torch.add({}, 1.0)",
    "clamp": "torch.clamp({}, -1.0, 1.0)",
}


class ElementwiseOps:
    """``_op_map`` and ``_op_add``; the session provides ``tx``, ``caches`` and ``_set``."""

    def _op_map(self, op: Op) -> None:
        """``x = torch.relu(x)`` and the like: a new tensor (torch has no value semantics to keep
        a buffer unique; the old tensor lives on in what shares it)."""
        name = op.target
        self.caches.pop(name, None)
        self._set(name, MAP_CALLS[op.fn].format(self.tx.var(name)))

    def _op_add(self, op: Op) -> None:
        """``x = x + other``: a new tensor; a row broadcasts along the first dimension."""
        name = op.target
        self.caches.pop(name, None)
        self._set(name, f"{self.tx.var(name)} + {self.tx.var(op.other)}")
