"""The torch target's layers (a program's ``[layers]``) and ``forward``: ``nn.BatchNorm1d`` and
``nn.Dropout`` submodules of the model, so ``eval()``/``train()``, ``copy.deepcopy``,
``state_dict()`` and ``load_state_dict`` carry them. A mixin of ``TorchSession``: it uses the
session's ``tx``, ``model``, ``home``, ``dtype``, ``_set`` and ``_seen``. The model holds each layer under
its ``model_key`` (``harness.targets.torch.names``); ``layer_stats`` and the bound names are the
case's (``bn.running_mean``)."""

from __future__ import annotations

import torch

from harness.case.layers import RUNNING_STATS
from harness.case.ops import Op
from harness.targets.torch.names import model_key
from harness.targets.torch.observe import DTYPE_SOURCE


class LayerOps:
    """The layers, ``forward``, and the training flag the layers read (``valid``, ``train``)."""

    def _add_layer(self, spec: dict) -> None:
        key = model_key(spec["name"])
        if spec["kind"] == "batch_norm":
            # affine=False: the layer's only state is its running statistics (no weight or bias
            # the case would have to declare); eps is the default, 1e-5.
            layer = f"nn.BatchNorm1d({spec['features']}, momentum={spec['momentum']!r}, affine=False)"
        else:
            layer = f"nn.Dropout({spec['p']!r})"
        to = [repr(self.home)] * (self.home != "cpu") + [DTYPE_SOURCE[self.dtype]] * (self.dtype != torch.float32)
        self.tx.run(f"model.{key} = {layer}" + (f".to({', '.join(to)})" if to else ""))
        for stat, _ in RUNNING_STATS if spec["kind"] == "batch_norm" else ():
            name = f"{spec['name']}.{stat}"
            self.layer_stats.append(name)
            self._set(name, f"model.{model_key(name)}")

    def _op_forward(self, op: Op) -> None:
        # `y = layer(x)` as a training loop writes it. BatchNorm1d in training mode normalises with
        # the batch's statistics and updates its running buffers in place (running_var with the
        # unbiased variance); in eval mode it reads them. nn.Dropout returns its input itself when
        # p = 0 or in eval mode (ATen Dropout.cpp `_dropout_impl`), and input * 0 when p = 1.
        self._set(op.name, f"model.{model_key(op.layer)}({self.tx.var(op.input)})")
        # The batch_norm kernel updates the running buffers without bumping their version
        # counters: forget their last observations, so that they and every name over their
        # storage are read again (``observe``).
        for name in self.layer_stats:
            self._seen.pop(name, None)

    def _op_valid(self, op: Op) -> None:
        self.tx.run("model.eval()")  # the training flag of the model and every layer

    def _op_train(self, op: Op) -> None:
        self.tx.run("model.train()")

    def _stat_tensors(self) -> dict:
        """The model's layers' running statistics by model key (``model_key("bn.running_mean")``)."""
        return {model_key(name): self.model.get_buffer(model_key(name)) for name in self.layer_stats}
