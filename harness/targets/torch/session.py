"""The PyTorch target's session: how each op of a program becomes the torch call a user writes.

Everything that is not framework specific (parsing, unknown and malformed ops, skipped ops, errors,
the delta encoding, the loop) is the Python driver's, ``harness.targets.driver``: this module
implements its ``Probe`` (``TorchProbe``: the handshake and ``open``) and ``Session``
(``TorchSession``: ``apply``, ``names``, ``observe``), and ``python -m harness.targets.torch``
serves them.

Each op's torch call follows ``docs/SEMANTICS.md`` (torch column) and is commented where it is made.

Every tensor is made in the program's dtype (``TORCH_DTYPES``); observations are
``harness.targets.torch.observe``'s.
"""

from __future__ import annotations

import copy
import io
import json
import platform

import numpy as np
import torch
from torch import nn

from harness.case import ops as op_table
from harness.targets.driver import OpError, Unsupported
from harness.targets.protocol import PROGRAM_SEED, Program, unreadable
from harness.targets.torch.elementwise import ElementwiseOps
from harness.targets.torch.layers import LayerOps
from harness.targets.torch.names import case_name, model_key
from harness.targets.torch.observe import TORCH_DTYPES, observation
from harness.targets.torch.training import TrainingOps
from harness.targets.torch.views import CONVERSIONS, VIEWS

# ---------------------------------------------------------------------------------------------
# Devices.


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


CUDA = torch.cuda.is_available()
MPS = _mps_available()


def _device_table() -> dict:
    """Protocol device name -> (torch device, variant, kind, alt torch device)."""
    accel = "cuda" if CUDA else ("mps" if MPS else None)
    table = {
        # The brief asks for alt = cuda when present; on a Mac without CUDA the Metal device is
        # the only second device, so cpu's alt falls back to mps there.
        "cpu": ("cpu", "plain", "cpu", accel),
        "cpu+foreach": ("cpu", "foreach", "cpu", accel),
    }
    for dev in ("cuda",) * CUDA + ("mps",) * MPS:
        table[dev] = (dev, "plain", "gpu", "cpu")
        table[dev + "+foreach"] = (dev, "foreach", "gpu", "cpu")
        if dev == "cuda":
            table["cuda+fused"] = (dev, "fused", "gpu", "cpu")
    return table


DEVICES = _device_table()
# A variant changes only the optimizer implementation (``TorchSession._optimizer``), which only
# ``step`` uses: on a program without a step a variant device makes the same calls as its plain
# device, so the harness need not run it there (PROTOCOL.md, ``differs_on``).
VARIANT_DIFFERS_ON = ("step",)


# ---------------------------------------------------------------------------------------------
# The model and one program's session.


class Model(nn.Module):
    """The program's model: every param/lazy tensor an ``nn.Parameter`` and every buffer a registered
    buffer, in declaration order, each under its ``model_key`` (``harness.targets.torch.names``:
    a case may name a tensor ``training``). ``forward`` is never called; ``step`` builds its loss
    directly."""

    def forward(self):  # pragma: no cover - not used
        raise NotImplementedError


class TorchSession(TrainingOps, LayerOps, ElementwiseOps):
    """One program on one torch device: the driver's ``Session``.

    ``bound`` maps every name bound now to the object a user's variable of that name would hold;
    every object ever bound stays referenced (``keep``), so ``id()``, the identity token, is never
    reused within a program. Tensors change only inside ``__init__`` and ``apply`` (the driver's
    contract), which is what lets ``observe`` reuse a round of change keys until the next op."""

    def __init__(self, device_name: str, tensors: list[dict], layers: list[dict] = (), dtype: str = "f32"):
        if device_name not in DEVICES:
            raise OpError(f"unknown device {json.dumps(device_name)} "
                              f"(this probe has {', '.join(DEVICES)})")
        self.home, self.variant, _, self.alt = DEVICES[device_name]
        self.dtype = TORCH_DTYPES[dtype]  # every tensor's, grads and layer stats included
        self.model = Model()
        self.modules = [self.model]  # the model and its module_clone copies
        self.clone_prefix: dict[int, str] = {}  # id(clone module) -> "<name>."
        self.bound: dict[str, torch.Tensor] = {}
        # Observation cache (see observe): name -> (key, last observation).
        self._seen: dict[str, tuple[tuple, dict]] = {}
        # The change keys of every bound name and the byte ranges of the storages written since
        # the last observation, computed by the first observe after an op (None: not yet).
        self._round: tuple[dict[str, tuple | None], list] | None = None
        # id -> (version, byte range) of each tensor a live optimizer holds, at the last round
        self._held: dict[int, tuple] = {}
        self.keep: list = []  # every object ever bound: ids are never reused within a program
        self.grads: dict[str, list[float] | None] = {}  # declared param name -> `grad` field
        # name -> (the KV-cache buffer of its ``append how=cache`` ops, rows filled)
        self.caches: dict[str, tuple[torch.Tensor, int]] = {}
        self.program_rng = torch.Generator().manual_seed(PROGRAM_SEED)  # drawn in declaration order
        self._init_training()
        for spec in tensors:
            if spec["name"] in self.bound:
                raise ValueError(f"tensor {spec['name']!r} declared twice")
            t = self._create(spec)
            key = model_key(spec["name"])
            if spec["kind"] == "buffer":
                self.model.register_buffer(key, t)
                t = self.model._buffers[key]
            else:
                t = nn.Parameter(t)
                self.model.register_parameter(key, t)
                self.grads[spec["name"]] = spec["grad"]
            self._bind(spec["name"], t)
        self.layer_stats: list[str] = []  # `<layer>.running_mean`, ...: the model's buffers by name
        for spec in layers:
            self._add_layer(spec)

    def _create(self, spec: dict) -> torch.Tensor:
        shape = spec["shape"]
        if spec["kind"] == "lazy":
            # torch has no lazy parameters: create at open, report initialised (SEMANTICS.md).
            if spec["init"] in op_table.DRAWN_INITS:
                gen = (torch.Generator().manual_seed(spec["seed"] or 0) if spec["init"] == "uniform"
                       else self.program_rng)
                t = torch.empty(shape, dtype=self.dtype).uniform_(-1.0, 1.0, generator=gen)
            else:
                fill = spec["fill"] if spec["fill"] is not None else 0.0
                t = torch.full(shape, fill, dtype=self.dtype)
        else:
            if spec["value"] is None:
                raise ValueError(f"tensor {spec['name']!r} has no value")
            t = torch.tensor(spec["value"], dtype=self.dtype).reshape(shape)
        return t.to(self.home)

    def _bind(self, name: str, t) -> None:
        self.bound[name] = t
        self.keep.append(t)

    # ---- ops --------------------------------------------------------------------------------

    def apply(self, op: dict) -> None:
        self._round = None  # the op may change any tensor: the next observe recomputes the keys
        run = getattr(self, "_op_" + op["op"], None)
        if run is None:  # an op of the table this session has no method for yet: not in OPS
            raise Unsupported(f"the torch target does not interpret {op['op']!r}")
        run(op)

    def _op_snapshot(self, op: dict) -> None:
        self._bind(op["name"], self._take(self.bound[op["of"]], op["of"], op["method"]))

    def _take(self, t, of: str, method: str):
        if method == "alias":
            return t  # a second Python reference to the same object
        if method == "clone":
            return t.clone()
        if method == "detach":
            return t.detach()
        if method == "copy":
            # Tensors have no .copy() method; the Python-level copy a user types is copy.copy(t).
            # torch defines no __copy__, so copy.copy goes through Tensor.__reduce_ex__ and rebuilds
            # the object from its storage *without* copying it (torch/_tensor.py
            # _reduce_ex_internal; Parameter.__reduce_ex__ -> torch._utils._rebuild_parameter):
            # a new object of the same class sharing memory. Observed, not assumed.
            return copy.copy(t)
        if method == "mul1":
            return t * 1.0
        if method == "to_home":
            return t.to(t.device)  # returns self when nothing changes (Tensor.to docs)
        if method == "to_cpu":
            return t.cpu()  # returns self when already on the CPU (Tensor.cpu docs)
        if method == "contiguous":
            return t.contiguous()  # returns self when already contiguous
        if method == "reshape":
            return t.reshape(-1)  # a view when possible
        if method == "view_row":
            return t.narrow(0, 0, 1)
        if method == "transpose":
            return t.transpose(-2, -1)
        if method in VIEWS:
            return VIEWS[method](t)  # views.py: the calls whose arguments come from t's shape
        if method in CONVERSIONS:
            return CONVERSIONS[method](t, self.dtype)  # views.py: the dtype conversions
        if method == "state_dict":
            # Module.state_dict() holds param.detach() / the buffer (keep_vars=False): no copy.
            key = model_key(of)
            if key not in self.model._parameters and key not in self.model._buffers and of not in self.layer_stats:
                raise Unsupported(f"state_dict: {of!r} is not a parameter or buffer of the model "
                                  "(a snapshot has no state_dict entry)")
            return self.model.state_dict()[key]
        if method == "deepcopy":
            return copy.deepcopy(t)
        if method == "to_host":
            # The numpy round trip a user writes. Tensor.numpy() shares memory with a CPU tensor
            # and torch.from_numpy shares it back, and .to(same device) returns self: on the CPU
            # the result aliases `t`; on an accelerator .cpu() and .to() copy. Observed, not faked.
            return torch.from_numpy(t.detach().cpu().numpy()).to(t.device)
        if method == "save_load":
            buf = io.BytesIO()
            torch.save(t, buf)
            buf.seek(0)
            return torch.load(buf)  # default weights_only=True: tensors and Parameters load
        raise Unsupported(f"method {method!r}")  # pragma: no cover - parse_op checks the enum

    def _op_write(self, op: dict) -> None:
        t = self.bound[op["target"]]
        value = torch.tensor(op["value"], dtype=t.dtype, device=t.device)
        with torch.no_grad():
            if op["index"] is None:
                t.copy_(value.reshape(t.shape))
            else:
                # row shape = shape[1:]; a 0-d scalar for a rank-1 tensor
                t[op["index"]] = value.reshape(t.shape[1:])

    def _op_assign(self, op: dict) -> None:
        t, src = self.bound[op["target"]], self.bound[op["source"]]
        if op["source_index"] is not None:
            src = src[op["source_index"]]  # a view of the row: dst[i] = src[j]
        with torch.no_grad():
            if op["index"] is None:
                t.copy_(src)  # "Copies the elements from src into self" (Tensor.copy_)
            else:
                t[op["index"]] = src  # Tensor.__setitem__: copy_ into the row view

    def _op_replace(self, op: dict) -> None:
        name, value = op["target"], self.bound[op["value"]]
        key = model_key(name)
        old = self.model._parameters[key]
        if op["how"] == "new":
            # `module.w = nn.Parameter(v)`: a new Parameter over v's storage (no copy,
            # pytorch/pytorch#22821); nn.Module.__setattr__ puts it in _parameters.
            setattr(self.model, key, nn.Parameter(value))
            self._rebind_slot(self.model, key, old, self.model._parameters[key], name)
        elif op["how"] == "data":
            old.data = value  # the same object, now over v's storage (Tensor.data setter)
        elif op["how"] == "set":
            with torch.no_grad():
                old.set_(value)  # the same object rebound to v's storage (Tensor.set_)
        else:
            # `model.b = model.a`: the same Parameter in two slots (tied weights). Module.__setattr__
            # refuses a tensor that is not a Parameter (TypeError).
            setattr(self.model, key, value)
            self._rebind_slot(self.model, key, old, self.model._parameters[key], name)

    def _op_append(self, op: dict) -> None:
        name, t, src = op["target"], self.bound[op["target"]], self.bound[op["source"]]
        if src.dim() < t.dim():
            src = src.unsqueeze(0)  # one row: a view of shape [1, rest]
        if op["how"] == "cat":
            self.caches.pop(name, None)
            self._bind(name, torch.cat([t, src]))  # a new tensor (torch.cat)
            return
        # A preallocated KV cache (transformers' StaticCache): a buffer of CACHE_ROWS rows written
        # in place, the name bound to the view of its filled rows. The name's first cache append
        # (or its first after a `cat`) starts a buffer holding the name's rows.
        if name not in self.caches:
            with torch.no_grad():
                buf = torch.zeros((op_table.CACHE_ROWS,) + tuple(t.shape[1:]), dtype=t.dtype, device=t.device)
                buf[:t.shape[0]] = t
            self.caches[name] = (buf, t.shape[0])
        buf, n = self.caches[name]
        with torch.no_grad():
            buf[n:n + src.shape[0]] = src  # Tensor.__setitem__: copy_ into the rows' view
        self.caches[name] = (buf, n + src.shape[0])
        self._bind(name, buf[:n + src.shape[0]])  # basic slicing: a view of the buffer

    def _op_fill(self, op: dict) -> None:
        with torch.no_grad():
            self.bound[op["target"]].fill_(op["value"])

    def _op_scale(self, op: dict) -> None:
        with torch.no_grad():
            self.bound[op["target"]].mul_(op["factor"])

    def _op_move(self, op: dict) -> None:
        if op["method"] == "fork":
            raise Unsupported("fork is burn only (torch has no such call)")
        dev = {"home": self.home, "cpu": "cpu", "alt": self.alt}[op["device"]]
        if dev is None:
            raise Unsupported(f"no second device next to {self.home}")
        name = op["target"]
        t = self.bound[name]
        for module in self.modules:
            for key, p in module._parameters.items():
                if p is t:
                    out = _move_param_like_module_apply(module, key, dev)
                    if out is not p:  # only with torch.__future__ flags: a new Parameter
                        self._rebind_slot(module, key, p, out, name)
                    return
            for key, b in module._buffers.items():
                if b is t:
                    # Module._apply: self._buffers[key] = fn(buf): the module holds a new tensor,
                    # which `module.<key>` (the declared name) reads from now on.
                    moved = b.to(dev)
                    module._buffers[key] = moved
                    if moved is not b:
                        self._rebind_slot(module, key, b, moved, name)
                    return
        # Not held by a module (a snapshot): a user writes `t = t.to(dev)`; the name is rebound.
        self._bind(name, t.to(dev))

    def _rebind_slot(self, module: nn.Module, key: str, old, new, target: str) -> None:
        """The module now holds `new` where it held `old` under its ``key`` (a ``model_key``): the
        name that reads the module's slot (the declared name for the model, `<clone>.<name>` for a
        module_clone) reads `new` from now on, and so does the name the move went through
        (`t = module.<key>` after `module.to`). Other names bound to `old` keep it, as a user's
        other variables would."""
        slot_name = case_name(key) if module is self.model else self.clone_prefix.get(id(module), "") + case_name(key)
        for n in (slot_name, target):
            if self.bound.get(n) is old:
                self._bind(n, new)

    def _op_module_clone(self, op: dict) -> None:
        clone = copy.deepcopy(self.model)
        self.modules.append(clone)
        self.clone_prefix[id(clone)] = op["name"] + "."
        for key, p in clone.named_parameters(remove_duplicate=False):  # a tied one under each name
            self._bind(f"{op['name']}.{case_name(key)}", p)
        for stat in self.layer_stats:  # deepcopy copies the layers' buffers too
            self._bind(f"{op['name']}.{stat}", clone.get_buffer(model_key(stat)))

    def _op_no_grad(self, op: dict) -> None:
        # torch has no module-level no-grad or freeze flag: both are requires_grad_(False) on every
        # parameter (SEMANTICS.md); torch.no_grad() is a context, not a model state.
        for p in self.model.parameters():
            p.requires_grad_(False)

    _op_freeze = _op_no_grad

    def _op_read(self, op: dict) -> None:
        pass  # torch tensors are always materialised; observing reads every name anyway

    # ---- observation ------------------------------------------------------------------------

    def names(self) -> list[str]:
        return list(self.bound)

    def observe(self, name: str) -> dict:
        """``name`` read to the host, or its last observation where nothing can have changed.

        Reading a tensor (detach, copy to host, format every float) is this target's hot path.
        A name is re-read only when its key changed (object, version counter, storage, layout,
        flags) or when any name whose storage overlaps its storage's bytes changed: tensors over
        one memory may have separate version counters and separate storage objects
        (``copy.copy``; ``torch.from_numpy`` of a view's ``numpy()``, whose storage starts where
        the view does, inside its source's), so a write through one must invalidate all of them."""
        if self._round is None:
            self._round = self._change_keys()
        keys, dirty = self._round
        key = keys[name]
        seen = self._seen.get(name)
        if key is not None and seen is not None and seen[0] == key and not _overlaps(key[2], dirty):
            return seen[1]
        try:
            obs = observation(self.bound[name])
        except Exception as e:  # noqa: BLE001 - an unreadable tensor is data, not a crash
            obs = unreadable(f"{type(e).__name__}: {e}")
        if key is not None:
            self._seen[name] = (key, obs)
        return obs

    def _change_keys(self) -> tuple[dict[str, tuple | None], list]:
        """Every bound name's change key (None: cannot be keyed, always read), and the byte ranges
        of the storages of the names whose key differs from their last observation's (``dirty``).
        Computed for all names before any is observed: ``dirty`` must not see this round's
        observations."""
        keys: dict[str, tuple | None] = {}
        for name, t in self.bound.items():
            try:
                keys[name] = (id(t), t._version, _bytes(t), t.storage_offset(), t.shape, t.stride(),
                              t.requires_grad, t.device)
            except Exception:  # noqa: BLE001 - no key: always read
                keys[name] = None
        dirty = [k[2] for n, k in keys.items() if k is not None and self._seen.get(n, (None,))[0] != k]
        # A step writes what the optimizers hold, which no name may bind any more: a param the
        # model's slot replaced (load with assign, a replace) stays over the storage of the name
        # it was made over (``w.data = c.w``), and its writes bump its own version counter only.
        held = {id(t): (t._version, _bytes(t))
                for opt in self.optimizers.values() for group in opt.param_groups for t in group["params"]}
        dirty += [k[1] for i, k in held.items() if self._held.get(i) != k]
        self._held = held
        return keys, dirty


def _bytes(t: torch.Tensor) -> tuple[int, int]:
    """The byte range (start, end) of the storage ``t`` is over."""
    storage = t.untyped_storage()
    start = storage.data_ptr()
    return start, start + storage.nbytes()


def _overlaps(span: tuple[int, int], spans: list[tuple[int, int]]) -> bool:
    """Whether the byte range ``span`` (start, end) shares a byte with any of ``spans``. An empty
    storage shares none; the lists are a program's few names."""
    start, end = span
    return any(s < end and start < e for s, e in spans)


#: The table's op kinds with a ``TorchSession._op_<kind>`` method, in order (all: test_op_table.py).
OPS = tuple(kind for kind in op_table.OP_KINDS if hasattr(TorchSession, "_op_" + kind))


class TorchProbe:
    """The driver's ``Probe`` for torch: the handshake, and a session per program."""

    def __init__(self) -> None:
        torch.set_num_threads(1)  # several targets share the harness machine's cores
        torch.manual_seed(0)

    def hello(self) -> dict:
        return {
            "framework": "torch",
            "versions": {"torch": torch.__version__, "python": platform.python_version(),
                         "numpy": np.__version__},
            "devices": [{"name": n, "alt": d[3], "kind": d[2],
                         **({"differs_on": list(VARIANT_DIFFERS_ON)} if d[1] != "plain" else {})}
                        for n, d in DEVICES.items()],
            # An op whose torch call does not exist for some fields (``move`` with ``fork``) is
            # listed, and answered ``unsupported`` for those fields by the session.
            "ops": list(OPS),
            "methods": list(op_table.METHODS),
        }

    def open(self, device: str, program: Program) -> TorchSession:
        return TorchSession(device, program.tensors, program.layers, program.dtype)


def _move_param_like_module_apply(module: nn.Module, key: str, dev) -> nn.Parameter:
    """One parameter of ``module.to(dev)``, i.e. the body of ``nn.Module._apply`` (torch 2.15,
    torch/nn/modules/module.py) for ``self._parameters[key]`` with ``fn = lambda t: t.to(dev)``.

    Default path (no ``torch.__future__`` flag set, dense CPU/CUDA/MPS tensors): the moved tensor
    has a compatible shallow-copy type, so ``param.data = param_applied``: the Parameter object
    stays (identity kept, every name bound to it follows); then, when ``param.grad`` is set,
    ``param.grad.data = grad_applied`` (the grad object stays too). The two other branches of
    ``_apply`` (swap_tensors, or a new Parameter replacing the old one in the module) are copied
    as well so that the flags behave as in torch. Returns the module's parameter afterwards."""
    param = module._parameters[key]
    with torch.no_grad():
        param_applied = param.to(dev)

    def should_use_set_data(tensor, tensor_applied) -> bool:
        if torch._has_compatible_shallow_copy_type(tensor, tensor_applied):
            return not torch.__future__.get_overwrite_module_params_on_conversion()
        return False

    use_swap = torch.__future__.get_swap_module_params_on_conversion()
    param_grad = param.grad
    if use_swap:
        if param_grad is not None:
            param.grad = None
        torch.utils.swap_tensors(
            param, nn.Parameter(param_applied, requires_grad=param.requires_grad))
        out_param = param
    elif should_use_set_data(param, param_applied):
        param.data = param_applied
        out_param = param
    else:
        out_param = nn.Parameter(param_applied, param.requires_grad)
        module._parameters[key] = out_param
    if param_grad is not None:
        with torch.no_grad():
            grad_applied = param_grad.to(dev)
        if use_swap:
            grad_applied.requires_grad_(param_grad.requires_grad)
            torch.utils.swap_tensors(param_grad, grad_applied)
            out_param.grad = param_grad
        elif should_use_set_data(param_grad, grad_applied):
            out_param.grad.data = grad_applied
        else:
            out_param.grad = grad_applied.requires_grad_(param_grad.requires_grad)
    return out_param


