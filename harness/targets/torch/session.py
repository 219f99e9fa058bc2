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

import json
import math
import platform

import numpy as np
import torch
from torch import nn

from harness.case import ops as op_table
from harness.case.ops import Op
from harness.targets.driver import OpError, Unsupported
from harness.targets.protocol import PROGRAM_SEED, WireProgram, unreadable
from harness.targets.torch import COMPILE_VARIANTS, GRAPH_VARIANTS
from harness.targets.torch.elementwise import ElementwiseOps
from harness.targets.torch.graph import GraphReplay
from harness.targets.torch.layers import LayerOps
from harness.targets.torch.names import case_name, model_key
from harness.targets.torch.observe import DTYPE_ARGS, DTYPE_SOURCE, TORCH_DTYPES, observation
from harness.targets.torch.training import TrainingOps
from harness.targets.torch.transcript import Transcript, literal, nested
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
        "cpu+compile": ("cpu", "compile", "cpu", accel),
        "cpu+inductor": ("cpu", "inductor", "cpu", accel),
        "cpu+graph": ("cpu", "graph", "cpu", accel),
    }
    for dev in ("cuda",) * CUDA + ("mps",) * MPS:
        table[dev] = (dev, "plain", "gpu", "cpu")
        table[dev + "+foreach"] = (dev, "foreach", "gpu", "cpu")
        if dev == "cuda":
            table["cuda+fused"] = (dev, "fused", "gpu", "cpu")
            table["cuda+compile"] = (dev, "compile", "gpu", "cpu")
            table["cuda+inductor"] = (dev, "inductor", "gpu", "cpu")
            table["cuda+graph"] = (dev, "graph", "gpu", "cpu")
    return table


DEVICES = _device_table()
#: The ops whose tensor statements the ``compile`` variant runs as ``torch.compile``d functions
#: (``Transcript.compiling``): the ops that make, write or compute tensors. The others (steps,
#: checkpoints, modes, module and parameter surgery) run as in eager torch.
COMPILED_OPS = ("snapshot", "write", "assign", "fill", "scale", "append", "map", "add", "forward")
# A variant makes other calls than its plain device only for some ops: ``foreach`` and ``fused``
# change only the optimizer implementation (``TorchSession._optimizer``), which only ``step``
# uses; ``compile`` compiles the ``COMPILED_OPS``. On a program without them a variant device
# makes the same calls as its plain device, so the harness need not run it there (PROTOCOL.md,
# ``differs_on``).
#: Variants that are targets only where ``--targets`` names them by id (PROTOCOL.md,
#: ``on_request``): Inductor's first compile in a process costs tens of seconds and each new line
#: about a second, too much for every ``repro`` and every campaign that names torch.
ON_REQUEST_VARIANTS = ("inductor",)
#: Variants whose programs may outlast the harness's program timeout, and the seconds one may take
#: (PROTOCOL.md, ``program_timeout_s``): Inductor's first compile in a process took 26 s here
#: (50 s on another machine), and a cold program compiles several new lines after it.
PROGRAM_TIMEOUT_S = {"inductor": 120.0}
#: The ops the ``graph`` variant compiles: the op table's fusing ops (``OpSpec.fuses``).
GRAPH_OPS = tuple(kind for kind in op_table.OP_KINDS if op_table.OPS[kind].fuses)
VARIANT_DIFFERS_ON = {
    "foreach": ("step",),
    "fused": ("step",),
    "compile": COMPILED_OPS,
    "inductor": COMPILED_OPS,
    "graph": GRAPH_OPS,
}


# ---------------------------------------------------------------------------------------------
# The model and one program's session.


def _device_arg(device) -> str:
    """``, device="cuda"`` for a tensor made on ``device``; nothing for the CPU (torch's default)."""
    return "" if str(device) == "cpu" else f", device={str(device)!r}"


def _flat(values) -> list:
    out: list = []
    for x in values:
        out.extend(_flat(x) if isinstance(x, list) else [x])
    return out


def _shape(shape) -> str:
    """A shape as a tuple literal: ``(2, 3)``, ``(2,)``, ``()``."""
    dims = [str(int(d)) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


class TorchSession(TrainingOps, LayerOps, ElementwiseOps):
    """One program on one torch device: the driver's ``Session``.

    Every torch call is a line of the session's transcript (``self.tx``), run from its text: the
    model is ``model``, and each bound name a variable of the transcript's namespace. ``bound``
    maps every name bound now to what its variable holds; every object ever bound stays
    referenced (``keep``), so ``id()``, the identity token, is never reused within a program.
    Tensors change only inside ``__init__`` and ``apply`` (the driver's contract), which is what
    lets ``observe`` reuse a round of change keys until the next op."""

    def __init__(
        self, device_name: str, tensors: list[dict], layers: list[dict] = (), dtype: str = "f32", ops: list = ()
    ):
        if device_name not in DEVICES:
            raise OpError(f"unknown device {json.dumps(device_name)} (this probe has {', '.join(DEVICES)})")
        self.home, self.variant, _, self.alt = DEVICES[device_name]
        self.dtype = TORCH_DTYPES[dtype]  # every tensor's, grads and layer stats included
        self.tx = Transcript()
        self.tx.run(f"{self.tx.helper('model')} = nn.Module()")
        self.model = self.tx.ns["model"]
        # The model and its module_clone copies, each with the variable that holds it.
        self.modules: list[tuple[nn.Module, str]] = [(self.model, "model")]
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
        # name -> (the variable of the KV-cache buffer of its ``append how=cache`` ops, rows filled)
        self.caches: dict[str, tuple[str, int]] = {}
        self.program_rng: str | None = None  # the variable of the program's one generator, once drawn
        self._init_training()
        for spec in tensors:
            if spec["name"] in self.bound:
                raise ValueError(f"tensor {spec['name']!r} declared twice")
            self._declare(spec)
        self.layer_stats: list[str] = []  # `<layer>.running_mean`, ...: the model's buffers by name
        for spec in layers:
            self._add_layer(spec)
        #: The ``graph`` variant's replay (``graph.py``): this session writes the program, eagerly,
        #: and the replay runs it, its fusing runs compiled; what it holds is what is observed.
        self.graph = GraphReplay(self.tx, self.variant, ops) if self.variant in GRAPH_VARIANTS else None

    def _declare(self, spec: dict) -> None:
        """``model.w = w = nn.Parameter(torch.tensor(...))``; a buffer registered under its key."""
        name, made = spec["name"], self._made(spec)
        key, v = model_key(name), self.tx.var(name)
        if spec["kind"] == "buffer":
            self.tx.run(f"{v} = {made}")
            self.tx.run(f"model.register_buffer({key!r}, {v})")
        else:
            self.tx.run(f"model.{key} = {v} = nn.Parameter({made})")
            self.grads[name] = spec["grad"]
        self._bind(name)

    def _made(self, spec: dict) -> str:
        """The source of a declared tensor's values, on the home device in the case's dtype."""
        shape, dt = spec["shape"], DTYPE_ARGS[self.dtype]
        if spec["kind"] == "lazy":
            # torch has no lazy parameters: create at open, report initialised (SEMANTICS.md).
            if spec["init"] in op_table.DRAWN_INITS:
                if spec["init"] == "uniform":
                    gen = f"torch.Generator().manual_seed({spec['seed'] or 0})"
                else:  # one generator for the program, drawn in declaration order
                    if self.program_rng is None:
                        self.program_rng = self.tx.helper("rng")
                        self.tx.run(f"{self.program_rng} = torch.Generator().manual_seed({PROGRAM_SEED})")
                    gen = self.program_rng
                made = f"torch.empty({_shape(shape)}{dt}).uniform_(-1.0, 1.0, generator={gen})"
            else:
                fill = spec["fill"] if spec["fill"] is not None else 0.0
                made = f"torch.full({_shape(shape)}, {literal(fill)}{dt})"
        else:
            if spec["value"] is None:
                raise ValueError(f"tensor {spec['name']!r} has no value")
            made = f"torch.tensor({literal(nested(_flat(spec['value']), list(shape)))}{dt})"
        return made if self.home == "cpu" else f"{made}.to({self.home!r})"

    def _bind(self, name: str) -> None:
        """``name`` is bound to what its variable holds now."""
        t = self.tx.value(name)
        self.bound[name] = t
        self.keep.append(t)

    def _set(self, name: str, source: str) -> None:
        """``<name> = <source>``: the name bound to what the source gives."""
        self.tx.run(f"{self.tx.var(name)} = {source}")
        self._bind(name)

    def _tensor_source(self, values: list, shape: list[int], like: torch.Tensor) -> str:
        """``torch.tensor([...])`` of ``values`` in ``shape``, in ``like``'s dtype, on its device.
        Values that do not fill the shape are written flat and reshaped, so that torch refuses them."""
        flat, args = _flat(values), f"{DTYPE_ARGS.get(like.dtype, '')}{_device_arg(like.device)}"
        if len(flat) != math.prod(shape):
            return f"torch.tensor({literal(flat)}{args}).reshape({_shape(shape)})"
        return f"torch.tensor({literal(nested(flat, shape))}{args})"

    # ---- ops --------------------------------------------------------------------------------

    def begin_op(self) -> None:
        """The driver's call before each op: the transcript's next op starts."""
        self.tx.begin_op()
        if self.graph is not None:
            self.graph.begin_op()

    def end_op(self) -> bool:
        """The driver's call after each op: True where the op is not observed after it (an inner op
        of the ``graph`` variant's compiled run, ``GraphReplay.end_op``)."""
        return self.graph.end_op() if self.graph is not None else False

    def transcript(self) -> dict:
        return self.graph.to_json() if self.graph is not None else self.tx.to_json()

    def apply(self, op: Op) -> None:
        self._round = None  # the op may change any tensor: the next observe recomputes the keys
        run = getattr(self, "_op_" + op.kind, None)
        if run is None:  # an op of the table this session has no method for yet: not in OPS
            raise Unsupported(f"the torch target does not interpret {op.kind!r}")
        per_op = self.variant in COMPILE_VARIANTS and self.variant not in GRAPH_VARIANTS
        self.tx.compiling = self.variant if per_op and op.kind in COMPILED_OPS else None
        start = len(self.tx.current)
        try:
            run(op)
        except Exception:
            if self.graph is not None:
                self.graph.failed(self.tx.current[start:])
            raise
        else:
            if self.graph is not None:
                self.graph.ran(self.tx.current[start:])
        finally:
            if self.tx.compiling:
                # AOTAutograd applies a mutation made under no_grad without bumping the version
                # counters of the tensors it writes (eager torch bumps them): the change keys
                # cannot see it, so every name is read again after a compiled op.
                self._seen.clear()
            self.tx.compiling = None  # only the op's own statements: never an observation's

    def _op_snapshot(self, op: Op) -> None:
        self._set(op.name, self._take(op.of, op.method))

    def _take(self, of: str, method: str) -> str:
        """The source of snapshot ``method`` of ``of`` (lines it needs first are run here)."""
        v, t = self.tx.var(of), self.bound[of]
        if method == "alias":
            return v  # a second Python reference to the same object
        if method == "clone":
            return f"{v}.clone()"
        if method == "detach":
            return f"{v}.detach()"
        if method == "copy":
            # Tensors have no .copy() method; the Python-level copy a user types is copy.copy(t).
            # torch defines no __copy__, so copy.copy goes through Tensor.__reduce_ex__ and rebuilds
            # the object from its storage *without* copying it (torch/_tensor.py
            # _reduce_ex_internal; Parameter.__reduce_ex__ -> torch._utils._rebuild_parameter):
            # a new object of the same class sharing memory. Observed, not assumed.
            return f"copy.copy({v})"
        if method == "mul1":
            return f"{v} * 1.0"
        if method == "to_home":
            return f"{v}.to({v}.device)"  # returns self when nothing changes (Tensor.to docs)
        if method == "to_cpu":
            return f"{v}.cpu()"  # returns self when already on the CPU (Tensor.cpu docs)
        if method == "contiguous":
            return f"{v}.contiguous()"  # returns self when already contiguous
        if method == "reshape":
            return f"{v}.reshape(-1)"  # a view when possible
        if method == "view_row":
            return f"{v}.narrow(0, 0, 1)"
        if method == "transpose":
            return f"{v}.transpose(-2, -1)"
        if method in VIEWS:
            return VIEWS[method](v, t)  # views.py: the calls whose arguments come from t's shape
        if method in CONVERSIONS:
            return CONVERSIONS[method](v, DTYPE_SOURCE[self.dtype])  # views.py: the dtype conversions
        if method == "state_dict":
            # Module.state_dict() holds param.detach() / the buffer (keep_vars=False): no copy.
            key = model_key(of)
            if key not in self.model._parameters and key not in self.model._buffers and of not in self.layer_stats:
                raise Unsupported(
                    f"state_dict: {of!r} is not a parameter or buffer of the model (a snapshot has no state_dict entry)"
                )
            return f"model.state_dict()[{key!r}]"
        if method == "deepcopy":
            return f"copy.deepcopy({v})"
        if method == "data":
            # "Autograd mechanics": .data shares storage like .detach() but in-place changes to
            # it are not reported to autograd (no version counter bump seen by the graph).
            return f"{v}.data"
        if method == "to_host":
            # The numpy round trip a user writes. Tensor.numpy() shares memory with a CPU tensor
            # and torch.from_numpy shares it back, and .to(same device) returns self: on the CPU
            # the result aliases `t`; on an accelerator .cpu() and .to() copy. Observed, not faked.
            return f"torch.from_numpy({v}.detach().cpu().numpy()).to({v}.device)"
        if method == "save_load":
            buf = self.tx.helper("buf")
            self.tx.run(f"{buf} = io.BytesIO()")
            self.tx.run(f"torch.save({v}, {buf})")
            self.tx.run(f"{buf}.seek(0)")
            return f"torch.load({buf})"  # default weights_only=True: tensors and Parameters load
        raise Unsupported(f"method {method!r}")  # pragma: no cover - parse_op checks the enum

    def _op_write(self, op: Op) -> None:
        v, t = self.tx.var(op.target), self.bound[op.target]
        if op.index is None:
            self.tx.run(f"with torch.no_grad(): {v}.copy_({self._tensor_source(op.value, list(t.shape), t)})")
        else:
            # row shape = shape[1:]; a 0-d scalar for a rank-1 tensor
            row = self._tensor_source(op.value, list(t.shape[1:]), t)
            self.tx.run(f"with torch.no_grad(): {v}[{op.index}] = {row}")

    def _op_assign(self, op: Op) -> None:
        v, src = self.tx.var(op.target), self.tx.var(op.source)
        if op.source_index is not None:
            src = f"{src}[{op.source_index}]"  # a view of the row: dst[i] = src[j]
        if op.index is None:
            # "Copies the elements from src into self" (Tensor.copy_)
            self.tx.run(f"with torch.no_grad(): {v}.copy_({src})")
        else:
            self.tx.run(f"with torch.no_grad(): {v}[{op.index}] = {src}")  # copy_ into the row view

    def _op_replace(self, op: Op) -> None:
        name, value = op.target, self.tx.var(op.value)
        key = model_key(name)
        old = self.model._parameters[key]
        # The name reads the model's slot from now on when it read the old parameter.
        also = f" = {self.tx.var(name)}" if self.bound.get(name) is old else ""
        if op.how == "new":
            # `model.w = nn.Parameter(v)`: a new Parameter over v's storage (no copy,
            # pytorch/pytorch#22821); nn.Module.__setattr__ puts it in _parameters.
            self.tx.run(f"model.{key}{also} = nn.Parameter({value})")
        elif op.how == "data":
            self.tx.run(f"model.{key}.data = {value}")  # the same object, now over v's storage
        elif op.how == "set":
            self.tx.run(f"with torch.no_grad(): model.{key}.set_({value})")  # rebound to v's storage
        else:
            # `model.b = model.a`: the same Parameter in two slots (tied weights). Module.__setattr__
            # refuses a tensor that is not a Parameter (TypeError).
            self.tx.run(f"model.{key}{also} = {value}")
        if also:
            self._bind(name)

    def _op_append(self, op: Op) -> None:
        name, t, s = op.target, self.bound[op.target], self.bound[op.source]
        v, src = self.tx.var(name), self.tx.var(op.source)
        rows = 1 if s.dim() < t.dim() else s.shape[0]
        if s.dim() < t.dim():
            src = f"{src}.unsqueeze(0)"  # one row: a view of shape [1, rest]
        if op.how == "cat":
            self.caches.pop(name, None)
            self._set(name, f"torch.cat([{v}, {src}])")  # a new tensor (torch.cat)
            return
        # A preallocated KV cache (transformers' StaticCache): a buffer of CACHE_ROWS rows written
        # in place, the name bound to the view of its filled rows. The name's first cache append
        # (or its first after a `cat`) starts a buffer holding the name's rows.
        if name not in self.caches:
            cache = self.tx.helper(f"{v}_cache")
            shape = _shape((op_table.CACHE_ROWS,) + tuple(t.shape[1:]))
            self.tx.run(f"{cache} = torch.zeros({shape}{DTYPE_ARGS.get(t.dtype, '')}{_device_arg(t.device)})")
            self.tx.run(f"with torch.no_grad(): {cache}[:{t.shape[0]}] = {v}")
            self.caches[name] = (cache, t.shape[0])
        cache, n = self.caches[name]
        # Tensor.__setitem__: copy_ into the rows' view
        self.tx.run(f"with torch.no_grad(): {cache}[{n}:{n + rows}] = {src}")
        self.caches[name] = (cache, n + rows)
        self._set(name, f"{cache}[:{n + rows}]")  # basic slicing: a view of the buffer

    def _op_fill(self, op: Op) -> None:
        self.tx.run(f"with torch.no_grad(): {self.tx.var(op.target)}.fill_({literal(op.value)})")

    def _op_scale(self, op: Op) -> None:
        self.tx.run(f"with torch.no_grad(): {self.tx.var(op.target)}.mul_({literal(op.factor)})")

    def _op_move(self, op: Op) -> None:
        if op.method == "fork":
            raise Unsupported("fork is burn only (torch has no such call)")
        dev = {"home": self.home, "cpu": "cpu", "alt": self.alt}[op.device]
        if dev is None:
            raise Unsupported(f"no second device next to {self.home}")
        name = op.target
        t = self.bound[name]
        for module, m in self.modules:
            for key, p in module._parameters.items():
                if p is t:
                    # What `module.to(dev)` does to each parameter (nn.Module._apply, without a
                    # torch.__future__ flag): `param.data = param.to(dev)`, the Parameter object
                    # kept (every name bound to it follows), and its gradient's data likewise.
                    self.tx.run(f"with torch.no_grad(): {m}.{key}.data = {m}.{key}.to({dev!r})")
                    if p.grad is not None:
                        self.tx.run(f"with torch.no_grad(): {m}.{key}.grad.data = {m}.{key}.grad.to({dev!r})")
                    return
            for key, b in module._buffers.items():
                if b is t:
                    # Module._apply: self._buffers[key] = fn(buf): the module holds a new tensor,
                    # which `module.<key>` (the declared name) reads from now on.
                    self.tx.run(f"{m}.{key} = {m}.{key}.to({dev!r})")
                    moved = module._buffers[key]
                    if moved is not b:
                        self._rebind_slot(module, key, b, name)
                    return
        # Not held by a module (a snapshot): a user writes `t = t.to(dev)`; the name is rebound.
        self._set(name, f"{self.tx.var(name)}.to({dev!r})")

    def _rebind_slot(self, module: nn.Module, key: str, old, target: str) -> None:
        """The module now holds a new tensor where it held `old` under its ``key`` (a
        ``model_key``): the name that reads the module's slot (the declared name for the model,
        `<clone>.<name>` for a module_clone) reads it from now on (``w = model.w``), and so does
        the name the move went through. Other names bound to `old` keep it, as a user's other
        variables would."""
        m = next(var for mod, var in self.modules if mod is module)
        slot_name = case_name(key) if module is self.model else self.clone_prefix.get(id(module), "") + case_name(key)
        for n in dict.fromkeys((slot_name, target)):
            if self.bound.get(n) is old:
                self._set(n, f"{m}.{key}")

    def _op_module_clone(self, op: Op) -> None:
        clone = self.tx.helper(op.name)
        self.tx.run(f"{clone} = copy.deepcopy(model)")
        module = self.tx.ns[clone]
        self.modules.append((module, clone))
        self.clone_prefix[id(module)] = op.name + "."
        for key, _ in module.named_parameters(remove_duplicate=False):  # a tied one under each name
            self._set(f"{op.name}.{case_name(key)}", f"{clone}.{key}")
        for stat in self.layer_stats:  # deepcopy copies the layers' buffers too
            self._set(f"{op.name}.{stat}", f"{clone}.{model_key(stat)}")

    def _op_no_grad(self, op: Op) -> None:
        # torch has no module-level no-grad or freeze flag: both are requires_grad_(False) on every
        # parameter (SEMANTICS.md); torch.no_grad() is a context, not a model state.
        p = self.tx.helper("p")
        self.tx.run(f"for {p} in model.parameters(): {p}.requires_grad_(False)")

    _op_freeze = _op_no_grad

    def _op_read(self, op: Op) -> None:
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
        if self.graph is not None:  # the replay's tensors, read every time: no change keys there
            return observation(self.graph.value(name))
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
                keys[name] = (
                    id(t),
                    t._version,
                    _bytes(t),
                    t.storage_offset(),
                    t.shape,
                    t.stride(),
                    t.requires_grad,
                    t.device,
                )
            except Exception:  # noqa: BLE001 - no key: always read
                keys[name] = None
        dirty = [k[2] for n, k in keys.items() if k is not None and self._seen.get(n, (None,))[0] != k]
        # A step writes what the optimizers hold, which no name may bind any more: a param the
        # model's slot replaced (load with assign, a replace) stays over the storage of the name
        # it was made over (``w.data = c.w``), and its writes bump its own version counter only.
        held = {
            id(t): (t._version, _bytes(t))
            for opt in self.optimizers.values()
            for group in opt.param_groups
            for t in group["params"]
        }
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
            "versions": {"torch": torch.__version__, "python": platform.python_version(), "numpy": np.__version__},
            "devices": [
                {
                    "name": n,
                    "alt": d[3],
                    "kind": d[2],
                    **({"differs_on": list(VARIANT_DIFFERS_ON[d[1]])} if d[1] != "plain" else {}),
                    **({"on_request": True} if d[1] in ON_REQUEST_VARIANTS else {}),
                    **({"program_timeout_s": PROGRAM_TIMEOUT_S[d[1]]} if d[1] in PROGRAM_TIMEOUT_S else {}),
                }
                for n, d in DEVICES.items()
            ],
            # An op whose torch call does not exist for some fields (``move`` with ``fork``) is
            # listed, and answered ``unsupported`` for those fields by the session.
            "ops": list(OPS),
            "methods": list(op_table.METHODS),
        }

    def open(self, device: str, program: WireProgram) -> TorchSession:
        return TorchSession(device, program.tensors, program.layers, program.dtype, program.ops)
