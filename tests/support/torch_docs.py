"""What the torch documentation says of each snapshot method, as the views tests cite it."""

from __future__ import annotations

#: Why each is a view or a copy in torch (test_torch_target.py's tables cover the other methods).
TORCH_DOCS = {
    "expand": "Tensor.expand docs: 'Returns a new view of the self tensor with singleton dimensions "
    "expanded to a larger size ... setting the stride to 0'",
    "permute": "torch.permute docs: 'Returns a view of the original tensor input with its dimensions permuted'",
    "flip": "torch.flip docs: 'torch.flip makes a copy of input's data'",
    "narrow": "torch.narrow docs: 'The returned tensor and input tensor share the same underlying storage'",
    "unsqueeze": "torch.unsqueeze docs: 'The returned tensor shares the same underlying data with this tensor'",
    "squeeze": "torch.squeeze docs: 'The returned tensor shares the storage with the input tensor'",
    "chunk": "torch.chunk docs: 'Attempts to split a tensor into the specified number of chunks. Each "
    "chunk is a view of the input tensor'",
    "select": "torch.select docs: 'This function returns a view of the original tensor with the given "
    "dimension removed'",
}
