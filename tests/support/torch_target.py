"""What both tiers of the torch target tests share: ``SCHEMA``, ``param``, ``FOLLOWS``, ``KEEPS``."""

from __future__ import annotations

import json

from tests.conftest import ROOT

SCHEMA = json.loads((ROOT / "rust_probes/protocol/schema/protocol.schema.json").read_text())


def param(name, shape, value, grad=None):
    t = {"name": name, "kind": "param", "shape": shape, "value": value}
    if grad is not None:
        t["grad"] = grad
    return t


FOLLOWS = {
    "alias": "the same Python object",
    "detach": "Tensor.detach docs: 'Returned Tensor shares the same storage with the original one'",
    "data": "Autograd mechanics docs: .data gives a tensor over the same storage (in-place changes to it "
    "are not reported to autograd)",
    "copy": "copy.copy -> Tensor.__reduce_ex__ (torch/_tensor.py) rebuilds from the same storage; "
    "copy.copy does not deep-copy the reduce arguments",
    "to_home": "Tensor.to docs: 'If the self Tensor already has the correct torch.dtype and "
    "torch.device, then self is returned'",
    "to_cpu": "Tensor.cpu docs: 'If this object is already in CPU memory, then no copy is "
    "performed and the original object is returned'",
    "contiguous": "Tensor.contiguous docs: 'If self tensor is already in the specified memory "
    "format, this function returns the self tensor'",
    "reshape": "torch.reshape docs: 'When possible, the returned tensor will be a view of input'",
    "view_row": "torch.narrow docs: 'The returned tensor and input tensor share the same underlying storage'",
    "transpose": "torch.transpose docs: 'The resulting out tensor shares its underlying storage with the input tensor'",
    "state_dict": "Module.state_dict docs: 'contains references to the module's parameters and "
    "buffers'; source: `param.detach()` when keep_vars=False",
    "to_host": "Tensor.numpy docs: 'The returned ndarray and the tensor will share their storage'; "
    "torch.from_numpy docs: 'The returned tensor and ndarray share the same memory'; "
    "then .to(same device) returns self",
    "to_same_dtype": "Tensor.to docs: 'If the self Tensor already has the correct torch.dtype and "
    "torch.device, then self is returned' (w is float32)",
    "via_f32": "Tensor.to docs, as for to_same_dtype, twice: float32 to float32 returns self",
}


KEEPS = {
    "clone": "torch.clone docs: 'Returns a copy of input'",
    "mul1": "an out-of-place multiplication allocates its result",
    "deepcopy": "Tensor.__deepcopy__ (torch/_tensor.py) clones the storage",
    "save_load": "torch.load builds new storages from the serialized bytes",
    "via_bf16": "Tensor.to docs: 'Otherwise, the returned tensor is a copy of self with the desired "
    "torch.dtype' (twice; the values here are exact in bfloat16)",
}
