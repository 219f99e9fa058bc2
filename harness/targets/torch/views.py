"""The torch calls of the snapshot methods whose arguments come from the source's shape, and of
the dtype conversions (``harness/case/methods.py``): each gives the source of the one call a user
writes, with the arguments written out (``w.permute(1, 0)``), given the source's variable and its
tensor. The session runs that source (``TorchSession._take``), and its transcript is the
reproducer.

Views share the source's storage (torch "Tensor Views" docs: ``expand``, ``permute``,
``narrow``, ``unsqueeze``, ``squeeze``, ``chunk``, ``select`` are view ops); ``flip`` copies
(torch.flip docs: "torch.flip makes a copy of input's data").
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def _dims(shape) -> str:
    return ", ".join(str(int(d)) for d in shape)


VIEWS: dict[str, Callable[[str, torch.Tensor], str]] = {
    # A new first dimension of 2 over the same elements: stride 0 along it (Tensor.expand docs:
    # "a new view ... with singleton dimensions expanded"; writes into it are refused when more
    # than one element refers to a memory location).
    "expand": lambda v, t: f"{v}.unsqueeze(0).expand({_dims((2, *t.shape))})",
    # The dimensions rotated left: (1, 2, ..., 0).
    "permute": lambda v, t: f"{v}.permute({_dims((*range(1, t.dim()), 0))})",
    "flip": lambda v, t: f"{v}.flip(0)",
    "narrow": lambda v, t: f"{v}.narrow(0, 1, {t.shape[0] - 1})",
    "unsqueeze": lambda v, t: f"{v}.unsqueeze(0)",
    "squeeze": lambda v, t: f"{v}.squeeze(0)",
    # The first of two chunks: ceil(rows / 2) rows (torch.chunk docs).
    "chunk": lambda v, t: f"{v}.chunk(2, 0)[0]",
    "select": lambda v, t: f"{v}.select(0, 0)",
}


#: The dtype conversions, given the source of the case's dtype (every tensor of a case has it).
CONVERSIONS: dict[str, Callable[[str, str], str]] = {
    # Tensor.to docs: "If the self Tensor already has the correct torch.dtype and torch.device,
    # then self is returned"; so is each step of a round trip through the tensor's own dtype.
    "to_same_dtype": lambda v, dtype: f"{v}.to({dtype})",
    "via_bf16": lambda v, dtype: f"{v}.to(torch.bfloat16).to({dtype})",
    "via_f32": lambda v, dtype: f"{v}.to(torch.float32).to({dtype})",
}
