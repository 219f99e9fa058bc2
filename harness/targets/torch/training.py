"""The torch session's training-loop ops: the live optimizers (``step``, ``backward``,
``backward_of``, ``set_lr``) and the model's checkpoints (``save``, ``load``), each as the torch call a user
writes.

``TrainingOps`` is a part of ``TorchSession`` (``harness.targets.torch.session``), kept apart so
that each file holds one concern; it uses the session's transcript ``tx`` (every call a line
run from its text), ``model``, ``grads``, ``variant``, ``_set``, ``_tensor_source`` and
``_rebind_slot``.
"""

from __future__ import annotations

import inspect

import torch

from harness.case.ops import Op
from harness.targets.driver import Skipped, Unsupported
from harness.targets.torch.names import case_name, model_key

# The fused implementations are picked by keyword; SGD only gained ``fused`` in later releases.
SGD_HAS_FUSED = "fused" in inspect.signature(torch.optim.SGD.__init__).parameters


def optimizer_key(op: Op, lr: float) -> tuple:
    """The hyper-parameters a live optimizer is filed under, with learning rate ``lr``."""
    return (op.optimizer, lr, op.momentum, op.dampening, op.betas, op.eps, op.weight_decay)


class TrainingOps:
    """``step``, ``backward``, ``backward_of``, ``set_lr``, ``save`` and ``load`` of a ``TorchSession``.

    Live optimizers are keyed by their hyper-parameters (``optimizer_key``): a ``step`` with other
    hyper-parameters makes a new optimizer over what the model holds then, a ``set_lr`` changes a
    live one's learning rate and refiles it under the new one. Checkpoints are keyed by name."""

    def _init_training(self) -> None:
        self.optimizers: dict[tuple, torch.optim.Optimizer] = {}
        self.optimizer_vars: dict[int, str] = {}  # id(optimizer) -> its variable
        self.accumulating = False  # a ``backward`` ran since the last step: its grads are kept
        # name -> ("memory", the variable of the state dict as returned) or ("file", the variable
        # of the buffer torch.save wrote)
        self.checkpoints: dict[str, tuple[str, str]] = {}

    # ---- optimizers -----------------------------------------------------------------------

    def _optimizer(self, op: Op) -> str:
        """The variable of the live optimizer ``op`` names, made (where the program first steps
        with these hyper-parameters) over what the model holds now (SEMANTICS.md)."""
        key = optimizer_key(op, op.lr)
        opt = self.optimizers.get(key)
        if opt is None:
            var = self.tx.helper("opt")
            self.tx.run(f"{var} = {self._new_optimizer(op)}")
            opt = self.optimizers[key] = self.tx.ns[var]
            self.optimizer_vars[id(opt)] = var
        return self.optimizer_vars[id(opt)]

    def _new_optimizer(self, op: Op) -> str:
        kind = op.optimizer
        if self.variant in (
            "plain",
            "compile",
            "inductor",
            "graph",
        ):  # the compiling variants compile tensor ops, not steps
            impl = "foreach=False"
        elif self.variant == "foreach":
            impl = "foreach=True"
        else:
            if kind.startswith("sgd") and not SGD_HAS_FUSED:
                raise Unsupported(f"torch {torch.__version__} has no fused SGD")
            impl = "fused=True"
        lr = f"lr={op.lr!r}"
        if kind == "sgd":
            return f"torch.optim.SGD(model.parameters(), {lr}, {impl})"
        if kind == "sgd_momentum":
            # torch skips dampening on the first momentum step (pytorch#152833: the buffer starts
            # as the gradient itself).
            return (
                f"torch.optim.SGD(model.parameters(), {lr}, momentum={op.momentum!r}, "
                f"dampening={op.dampening!r}, {impl})"
            )
        cls = "Adam" if kind == "adam" else "AdamW"
        return (
            f"torch.optim.{cls}(model.parameters(), {lr}, betas={tuple(op.betas)!r}, eps={op.eps!r}, "
            f"weight_decay={op.weight_decay!r}, {impl})"
        )

    def _op_step(self, op: Op) -> None:
        opt = self._optimizer(op)
        loss = self._loss()
        if not self.accumulating:
            self.tx.run(f"{opt}.zero_grad()")  # set_to_none=True by default
        self.tx.run(f"{loss}.backward()")
        self.tx.run(f"{opt}.step()")
        # The accumulation loop of the torch docs zeroes after its step: no gradient of this
        # step is left on what the optimizer holds (a param the model no longer holds included).
        self.tx.run(f"{opt}.zero_grad()")
        self.accumulating = False

    def _op_backward(self, op: Op) -> None:
        """Gradient accumulation as the torch docs write it: ``zero_grad()`` before the first
        backward pass, ``loss.backward()`` adding into every ``.grad`` until a step consumes them."""
        loss = self._loss()
        if not self.accumulating:
            self.tx.run("model.zero_grad()")  # set_to_none=True; the optimizer is not known yet
            self.accumulating = True
        self.tx.run(f"{loss}.backward()")

    def _op_backward_of(self, op: Op) -> None:
        """A backward pass over a graph recorded by earlier ops, as ``_op_backward`` accumulates:
        ``of.sum().backward(retain_graph=True)``, the graph kept so that a later pass can run over
        it again. Autograd checks each tensor the graph saved against the version counter it had
        when saved, and refuses the pass where an in-place write moved it since (the autograd
        mechanics notes, "In-place correctness checks")."""
        if not self.accumulating:
            self.tx.run("model.zero_grad()")
            self.accumulating = True
        self.tx.run(f"{self.tx.var(op.of)}.sum().backward(retain_graph=True)")

    def _loss(self) -> str:
        """The source of the loss: the sum over the model's slots of ``(p * g).sum()``, ``g``
        the param's declared ``grad`` (``p.sum()`` without one: a gradient of ones), a tied
        parameter once per slot (as each use of a tied weight adds to its gradient; the optimizer
        holds it once, as parameters() removes duplicates)."""
        terms = []
        for key, p in self.model.named_parameters(remove_duplicate=False):
            g = self.grads.get(case_name(key))
            terms.append(
                f"model.{key}.sum()"
                if g is None
                else f"(model.{key} * {self._tensor_source(g, list(p.shape), p)}).sum()"
            )
        if not terms:
            raise ValueError("the model has no parameters")
        return f"({' + '.join(terms)})" if len(terms) > 1 else terms[0]

    def _op_set_lr(self, op: Op) -> None:
        opt = self._optimizer(op)
        # What the torch docs and LR schedulers do: every param group's "lr" entry, in place.
        group = self.tx.helper("group")
        self.tx.run(f'for {group} in {opt}.param_groups: {group}["lr"] = {op.to!r}')
        live = self.optimizers.pop(optimizer_key(op, op.lr))
        self.optimizers[optimizer_key(op, op.to)] = live

    # ---- checkpoints ----------------------------------------------------------------------

    def _op_save(self, op: Op) -> None:
        # Module.state_dict() as returned: param.detach() and the buffers themselves, no copy.
        entries = self.tx.helper(op.name)
        if op.to == "memory":
            self.tx.run(f"{entries} = model.state_dict()")
            self.checkpoints[op.name] = ("memory", entries)
        else:
            file = self.tx.helper(f"{op.name}_file")
            self.tx.run(f"{file} = io.BytesIO()")
            self.tx.run(f"torch.save(model.state_dict(), {file})")
            self.checkpoints[op.name] = ("file", file)
            # what the file holds, as a user reading it sees it (default weights_only=True)
            self.tx.run(f"{entries} = torch.load(io.BytesIO({file}.getvalue()))")
        for p in [*self.grads, *self.layer_stats]:  # the model's names, in declaration order
            self._set(f"{op.name}.{p}", f"{entries}[{model_key(p)!r}]")

    def _op_load(self, op: Op) -> None:
        taken = self.checkpoints.get(op.from_)
        if taken is None:
            raise Skipped(f"no checkpoint named {op.from_} (its save did not run here)")
        how, held = taken
        sd = held if how == "memory" else f"torch.load(io.BytesIO({held}.getvalue()))"
        before = {**self.model._parameters, **self.model._buffers, **self._stat_tensors()}
        # assign=False copies into the existing tensors in place (param.copy_(input) under
        # no_grad); assign=True installs the loaded tensors (wrapped in new Parameters where the
        # model held Parameters) in the model's slots (Module._load_from_state_dict).
        self.tx.run(f"model.load_state_dict({sd}, assign={op.assign!r})")
        after = {**self.model._parameters, **self.model._buffers, **self._stat_tensors()}
        for key, old in before.items():  # model keys (``harness.targets.torch.names``)
            if after[key] is not old:
                self._rebind_slot(self.model, key, old, case_name(key))
