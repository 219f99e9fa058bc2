"""The torch calls of the snapshot methods whose arguments come from the source's shape, and of
the dtype conversions (``harness/case/methods.py``): each is the one call a user writes, and
returns what torch returns. The session (``TorchSession._take``) and the reproducer
(``reproducer._METHODS``) spell the same calls.

Views share the source's storage (torch "Tensor Views" docs: ``expand``, ``permute``,
``narrow``, ``unsqueeze``, ``squeeze``, ``chunk``, ``select`` are view ops); ``flip`` copies
(torch.flip docs: "torch.flip makes a copy of input's data").
"""

from __future__ import annotations

from typing import Callable

import torch

VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    # A new first dimension of 2 over the same elements: stride 0 along it (Tensor.expand docs:
    # "a new view ... with singleton dimensions expanded"; writes into it are refused when more
    # than one element refers to a memory location).
    "expand": lambda t: t.unsqueeze(0).expand(2, *t.shape),
    # The dimensions rotated left: (1, 2, ..., 0).
    "permute": lambda t: t.permute(*range(1, t.dim()), 0),
    "flip": lambda t: t.flip(0),
    "narrow": lambda t: t.narrow(0, 1, t.shape[0] - 1),
    "unsqueeze": lambda t: t.unsqueeze(0),
    "squeeze": lambda t: t.squeeze(0),
    # The first of two chunks: ceil(rows / 2) rows (torch.chunk docs).
    "chunk": lambda t: t.chunk(2, 0)[0],
    "select": lambda t: t.select(0, 0),
}


#: The dtype conversions, given the case's dtype (every tensor of a case has it).
CONVERSIONS: dict[str, Callable[[torch.Tensor, torch.dtype], torch.Tensor]] = {
    # Tensor.to docs: "If the self Tensor already has the correct torch.dtype and torch.device,
    # then self is returned"; so is each step of a round trip through the tensor's own dtype.
    "to_same_dtype": lambda t, dtype: t.to(dtype),
    "via_bf16": lambda t, dtype: t.to(torch.bfloat16).to(dtype),
    "via_f32": lambda t, dtype: t.to(torch.float32).to(dtype),
}
