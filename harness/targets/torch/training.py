"""The torch session's training-loop ops: the live optimizers (``step``, ``backward``,
``set_lr``) and the model's checkpoints (``save``, ``load``), each as the torch call a user
writes.

``TrainingOps`` is a part of ``TorchSession`` (``harness.targets.torch.session``), kept apart so
that each file holds one concern; it uses the session's ``model``, ``bound``, ``grads``,
``variant``, ``_bind`` and ``_rebind_slot``.
"""

from __future__ import annotations

import inspect
import io

import torch

from harness.targets.driver import Skipped, Unsupported
from harness.targets.torch.names import case_name, model_key

# The fused implementations are picked by keyword; SGD only gained ``fused`` in later releases.
SGD_HAS_FUSED = "fused" in inspect.signature(torch.optim.SGD.__init__).parameters


def optimizer_key(op: dict, lr: float) -> tuple:
    """The hyper-parameters a live optimizer is filed under, with learning rate ``lr``."""
    return (op["optimizer"], lr, op["momentum"], op["dampening"], op["betas"], op["eps"],
            op["weight_decay"])


class TrainingOps:
    """``step``, ``backward``, ``set_lr``, ``save`` and ``load`` of a ``TorchSession``.

    Live optimizers are keyed by their hyper-parameters (``optimizer_key``): a ``step`` with other
    hyper-parameters makes a new optimizer over what the model holds then, a ``set_lr`` changes a
    live one's learning rate and refiles it under the new one. Checkpoints are keyed by name."""

    def _init_training(self) -> None:
        self.optimizers: dict[tuple, torch.optim.Optimizer] = {}
        self.accumulating = False  # a ``backward`` ran since the last step: its grads are kept
        # name -> ("memory", the state dict as returned) or ("file", the bytes torch.save wrote)
        self.checkpoints: dict[str, tuple[str, object]] = {}

    # ---- optimizers -----------------------------------------------------------------------

    def _optimizer(self, op: dict) -> torch.optim.Optimizer:
        key = optimizer_key(op, op["lr"])
        opt = self.optimizers.get(key)
        if opt is None:
            opt = self.optimizers[key] = self._new_optimizer(op)
        return opt

    def _new_optimizer(self, op: dict) -> torch.optim.Optimizer:
        kind = op["optimizer"]
        if self.variant == "plain":
            impl = {"foreach": False}
        elif self.variant == "foreach":
            impl = {"foreach": True}
        else:
            if kind.startswith("sgd") and not SGD_HAS_FUSED:
                raise Unsupported(f"torch {torch.__version__} has no fused SGD")
            impl = {"fused": True}
        # The optimizer holds whatever the model holds now (SEMANTICS.md): list(parameters()).
        params = list(self.model.parameters())
        if kind == "sgd":
            return torch.optim.SGD(params, lr=op["lr"], **impl)
        if kind == "sgd_momentum":
            # torch skips dampening on the first momentum step (pytorch#152833: the buffer starts
            # as the gradient itself).
            return torch.optim.SGD(params, lr=op["lr"], momentum=op["momentum"],
                                   dampening=op["dampening"], **impl)
        if kind == "adam":
            return torch.optim.Adam(params, lr=op["lr"], betas=op["betas"], eps=op["eps"],
                                    weight_decay=op["weight_decay"], **impl)
        return torch.optim.AdamW(params, lr=op["lr"], betas=op["betas"], eps=op["eps"],
                                 weight_decay=op["weight_decay"], **impl)

    def _op_step(self, op: dict) -> None:
        opt = self._optimizer(op)
        if not self.accumulating:
            opt.zero_grad()  # set_to_none=True by default
        self._loss().backward()
        opt.step()
        # The accumulation loop of the torch docs zeroes after its step: no gradient of this
        # step is left on what the optimizer holds (a param the model no longer holds included).
        opt.zero_grad()
        self.accumulating = False

    def _op_backward(self, op: dict) -> None:
        """Gradient accumulation as the torch docs write it: ``zero_grad()`` before the first
        backward pass, ``loss.backward()`` adding into every ``.grad`` until a step consumes them."""
        if not self.accumulating:
            self.model.zero_grad()  # set_to_none=True; the optimizer is not known yet
            self.accumulating = True
        self._loss().backward()

    def _loss(self) -> torch.Tensor:
        """Sum over the model's slots of (p * g).sum(), g being the param's declared ``grad``."""
        loss = None
        # Every slot, a tied parameter once per slot (as each use of a tied weight adds to its
        # gradient); the optimizer holds it once (parameters() removes duplicates).
        for key, p in self.model.named_parameters(remove_duplicate=False):
            g = self.grads.get(case_name(key))
            g = (torch.ones(p.shape, dtype=p.dtype, device=p.device) if g is None
                 else torch.tensor(g, dtype=p.dtype, device=p.device).reshape(p.shape))
            term = (p * g).sum()
            loss = term if loss is None else loss + term
        if loss is None:
            raise ValueError("the model has no parameters")
        return loss

    def _op_set_lr(self, op: dict) -> None:
        opt = self._optimizer(op)
        # What the torch docs and LR schedulers do: every param group's "lr" entry, in place.
        for group in opt.param_groups:
            group["lr"] = op["to"]
        del self.optimizers[optimizer_key(op, op["lr"])]
        self.optimizers[optimizer_key(op, op["to"])] = opt

    # ---- checkpoints ----------------------------------------------------------------------

    def _op_save(self, op: dict) -> None:
        # Module.state_dict() as returned: param.detach() and the buffers themselves, no copy.
        sd = self.model.state_dict()
        if op["to"] == "memory":
            self.checkpoints[op["name"]] = ("memory", sd)
            entries = sd
        else:
            buf = io.BytesIO()
            torch.save(sd, buf)
            data = buf.getvalue()
            self.checkpoints[op["name"]] = ("file", data)
            entries = _read_checkpoint(data)  # what the file holds, as a user reading it sees it
        for p in [*self.grads, *self.layer_stats]:  # the model's names, in declaration order
            self._bind(f"{op['name']}.{p}", entries[model_key(p)])

    def _op_load(self, op: dict) -> None:
        taken = self.checkpoints.get(op["from"])
        if taken is None:
            raise Skipped(f"no checkpoint named {op['from']} (its save did not run here)")
        how, held = taken
        sd = held if how == "memory" else _read_checkpoint(held)
        before = {**self.model._parameters, **self.model._buffers, **self._stat_tensors()}
        # assign=False copies into the existing tensors in place (param.copy_(input) under
        # no_grad); assign=True installs the loaded tensors (wrapped in new Parameters where the
        # model held Parameters) in the model's slots (Module._load_from_state_dict).
        self.model.load_state_dict(sd, assign=op["assign"])
        after = {**self.model._parameters, **self.model._buffers, **self._stat_tensors()}
        for key, old in before.items():  # model keys (``harness.targets.torch.names``)
            if after[key] is not old:
                self._rebind_slot(self.model, key, old, after[key], case_name(key))


def _read_checkpoint(data: bytes) -> dict:
    """``torch.load`` of a saved state dict (default ``weights_only=True``)."""
    return torch.load(io.BytesIO(data))
