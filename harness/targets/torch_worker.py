"""The PyTorch target: interprets aliasfuzz programs on torch, speaking the probe protocol.

Run as ``python -m harness.targets.torch_worker``: a persistent process reading JSON requests on
stdin and writing one JSON reply per request on stdout, one per line, flushed after each reply
(``rust_probes/protocol/PROTOCOL.md``; ``rust_probes/protocol/schema/protocol.schema.json`` is
normative). It is the Python twin of the Rust driver ``aliasfuzz_protocol::{serve, run_program}``
and behaves like it on everything that is not framework specific:

- a line that is not a valid request gets ``{"type": "error", "id": null, "message": ...}`` and the
  worker reads the next line; blank lines are ignored; ``{"type": "exit"}`` or end of input exits 0;
- an op whose ``op`` field is missing or not a string: status ``error``; an op name outside the
  protocol's op list: ``unsupported`` (``unknown op "name"``); an op with a missing, unknown or
  mistyped field: ``error`` (``malformed op: ...``); an op using a name that is not bound:
  ``skipped`` (``no tensor named a, b``); an exception raised by torch inside an op: ``error`` with
  ``"<ExceptionType>: <message>"``;
- ``changed`` holds the names whose observation differs from the previous step (new names included),
  compared like the Rust ``Obs: PartialEq`` (values by float32 bit pattern, NaN included);
- non-finite floats travel as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``.

Differences from the Rust driver, on purpose: a request line that is not UTF-8 gets an ``error``
reply (the Rust ``lines()`` loop stops reading there).

The op -> torch call mapping follows ``docs/SEMANTICS.md`` (torch column); each choice is
commented where it is made (``_snapshot``, ``_move``, ``_step``).

Float values are reported as the shortest decimal that round-trips the float32 value (numpy's
``str(np.float32(x))``), the same digits serde_json prints for an ``f32`` in the Rust probes, so
``0.1f32`` travels as ``0.1`` from every target rather than ``0.10000000149011612`` from this one.

Fault injection (for the harness's reliability tests; harness logic, not a framework stand-in):
when the environment variable ``ALIASFUZZ_TORCH_FAULT`` is ``segfault`` and a program contains the
op ``{"op": "_fault"}``, the worker kills itself with ``SIGSEGV`` when it reaches that op; with
``hang`` it sleeps forever there. Without the variable (or with any other value) ``_fault`` is an
unknown op and answers ``unsupported`` like any other.
"""

from __future__ import annotations

import copy
import inspect
import io
import json
import math
import os
import platform
import signal
import struct
import sys
import time

import numpy as np
import torch
from torch import nn

PROTOCOL_VERSION = 1

# The case format's op and method names, version 1 (``ALL_OPS`` / ``ALL_METHODS`` in the Rust crate).
ALL_OPS = (
    "snapshot", "write", "fill", "scale", "step", "move", "module_clone", "valid", "train",
    "no_grad", "freeze", "read",
)
ALL_METHODS = (
    "alias", "clone", "detach", "copy", "mul1", "to_home", "to_cpu", "contiguous", "reshape",
    "view_row", "transpose", "state_dict", "deepcopy", "to_host", "save_load",
)
OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw")

FAULT = os.environ.get("ALIASFUZZ_TORCH_FAULT") or None
if FAULT not in ("segfault", "hang"):
    FAULT = None


# ---------------------------------------------------------------------------------------------
# Parsing: the checks serde does on the Rust side, with messages in the same spirit.


class Malformed(Exception):
    pass


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _f32(x: float) -> float:
    """A JSON number read as f32 (serde casts f64 -> f32: out of range becomes infinite)."""
    return float(np.float32(x))


def _float_list(v, what: str) -> list[float]:
    """``de_f32s``: numbers, or the strings NaN / Infinity / -Infinity."""
    if not isinstance(v, list):
        raise Malformed(f"invalid type for `{what}`: expected a sequence")
    out = []
    for x in v:
        if _is_num(x):
            out.append(_f32(x))
        elif x == "NaN":
            out.append(math.nan)
        elif x == "Infinity":
            out.append(math.inf)
        elif x == "-Infinity":
            out.append(-math.inf)
        elif isinstance(x, str):
            raise Malformed(f"not a float: {json.dumps(x)}")
        else:
            raise Malformed(f"invalid type for an element of `{what}`: expected a float")
    return out


def _opt_float_list(d: dict, key: str):
    v = d.get(key)
    return None if v is None else _float_list(v, key)


def _need(d: dict, key: str):
    if key not in d:
        raise Malformed(f"missing field `{key}`")
    return d[key]


def _str(d: dict, key: str) -> str:
    v = _need(d, key)
    if not isinstance(v, str):
        raise Malformed(f"invalid type for `{key}`: expected a string")
    return v


def _enum(d: dict, key: str, variants) -> str:
    v = _str(d, key)
    if v not in variants:
        raise Malformed(f"unknown variant `{v}` for `{key}`, expected one of {', '.join(variants)}")
    return v


def _num(d: dict, key: str) -> float:
    v = _need(d, key)
    if not _is_num(v):
        raise Malformed(f"invalid type for `{key}`: expected a number")
    return float(v)


def _u64(v, key: str) -> int:
    if not _is_int(v) or v < 0:
        raise Malformed(f"invalid value for `{key}`: expected an unsigned integer")
    return v


def parse_tensor(t) -> dict:
    if not isinstance(t, dict):
        raise Malformed("invalid type for a tensor: expected an object")
    spec = {
        "name": _str(t, "name"),
        "kind": _enum(t, "kind", ("param", "buffer", "lazy")),
        "value": _opt_float_list(t, "value"),
        "grad": _opt_float_list(t, "grad"),
    }
    shape = _need(t, "shape")
    if not isinstance(shape, list):
        raise Malformed("invalid type for `shape`: expected a sequence")
    spec["shape"] = [_u64(s, "shape") for s in shape]
    init = t.get("init")
    if init is not None and init not in ("const", "uniform"):
        raise Malformed(f"unknown variant {json.dumps(init)} for `init`, expected const or uniform")
    spec["init"] = init
    fill = t.get("fill")
    if fill is not None and not _is_num(fill):
        raise Malformed("invalid type for `fill`: expected a number")
    spec["fill"] = None if fill is None else _f32(fill)
    seed = t.get("seed")
    spec["seed"] = None if seed is None else _u64(seed, "seed")
    return spec


def parse_request(line: bytes):
    """Returns ``(kind, fields)`` or raises ``Malformed``. Unknown fields are ignored (serde)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Malformed(f"not UTF-8: {e}") from None
    try:
        req = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, Malformed) as e:
        raise Malformed(str(e)) from None
    if not isinstance(req, dict):
        raise Malformed("expected an object")
    kind = _need(req, "type")
    if kind == "hello":
        return "hello", {"protocol": _u64(_need(req, "protocol"), "protocol")}
    if kind == "exit":
        return "exit", {}
    if kind == "run":
        rid = _u64(_need(req, "id"), "id")
        device = _str(req, "device")
        program = _need(req, "program")
        if not isinstance(program, dict):
            raise Malformed("invalid type for `program`: expected an object")
        tensors = _need(program, "tensors")
        ops = _need(program, "ops")
        if not isinstance(tensors, list) or not isinstance(ops, list):
            raise Malformed("invalid type for `tensors` or `ops`: expected a sequence")
        return "run", {"id": rid, "device": device,
                       "tensors": [parse_tensor(t) for t in tensors], "ops": ops}
    raise Malformed(f"unknown variant {json.dumps(kind)} for `type`, expected hello, run or exit")


def _reject_constant(name):
    raise Malformed(f"{name} is not JSON")


# Fields of each op (deny_unknown_fields on the Rust side): name -> kind.
OP_FIELDS = {
    "snapshot": {"name": "str", "of": "str", "method": ALL_METHODS},
    "write": {"target": "str", "index": "index", "value": "floats"},
    "fill": {"target": "str", "value": "num"},
    "scale": {"target": "str", "factor": "num"},
    "step": {"optimizer": OPTIMIZERS, "lr": "num", "momentum": "num", "betas": "betas",
             "eps": "num", "weight_decay": "num"},
    "move": {"target": "str", "device": ("home", "cpu", "alt"), "method": ("to", "fork")},
    "module_clone": {"name": "str"},
    "valid": {}, "train": {}, "no_grad": {}, "freeze": {},
    "read": {"target": "str"},
}
# The names an op needs bound before it can run (``Op::uses``).
USES = {"snapshot": "of", "write": "target", "fill": "target", "scale": "target",
        "move": "target", "read": "target"}


def parse_op(raw: dict) -> dict:
    name = raw["op"]
    fields = OP_FIELDS[name]
    for key in raw:
        if key != "op" and key not in fields:
            raise Malformed(f"unknown field `{key}`, expected one of "
                            f"{', '.join('`%s`' % f for f in fields) or 'none'}")
    op = {"op": name}
    for key, kind in fields.items():
        if kind == "str":
            op[key] = _str(raw, key)
        elif kind == "num":
            op[key] = _num(raw, key)
        elif kind == "floats":
            op[key] = _float_list(_need(raw, key), key)
        elif kind == "index":
            # Option<usize> without deserialize_with: serde treats a missing field as None.
            v = raw.get(key)
            op[key] = None if v is None else _u64(v, key)
        elif kind == "betas":
            v = _need(raw, key)
            if not (isinstance(v, list) and len(v) == 2 and all(_is_num(x) for x in v)):
                raise Malformed("invalid value for `betas`: expected an array of 2 numbers")
            op[key] = (float(v[0]), float(v[1]))
        else:
            op[key] = _enum(raw, key, kind)
    # f32 fields of the Rust Op (f64 for the optimizer's hyper-parameters).
    for key in ("value", "factor"):
        if key in op and isinstance(op[key], float):
            op[key] = _f32(op[key])
    return op


# ---------------------------------------------------------------------------------------------
# Devices.


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


CUDA = torch.cuda.is_available()
MPS = _mps_available()
# The fused implementations are picked by keyword; SGD only gained ``fused`` in later releases.
SGD_HAS_FUSED = "fused" in inspect.signature(torch.optim.SGD.__init__).parameters


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
# A variant changes only the optimizer implementation (``Session._optimizer``), which only
# ``step`` uses: on a program without a step a variant device makes the same calls as its plain
# device, so the harness need not run it there (PROTOCOL.md, ``differs_on``).
VARIANT_DIFFERS_ON = ("step",)


def hello() -> dict:
    return {
        "type": "hello",
        "protocol": PROTOCOL_VERSION,
        "framework": "torch",
        "versions": {"torch": torch.__version__, "python": platform.python_version(),
                     "numpy": np.__version__},
        "devices": [{"name": n, "alt": d[3], "kind": d[2],
                     **({"differs_on": list(VARIANT_DIFFERS_ON)} if d[1] != "plain" else {})}
                    for n, d in DEVICES.items()],
        "ops": list(ALL_OPS),
        "methods": list(ALL_METHODS),
    }


# ---------------------------------------------------------------------------------------------
# The model and one program's session.


class Model(nn.Module):
    """The program's model: every param/lazy tensor an ``nn.Parameter`` and every buffer a registered
    buffer, in declaration order. ``forward`` is never called; ``step`` builds its loss directly."""

    def forward(self):  # pragma: no cover - not used
        raise NotImplementedError


class Unsupported(Exception):
    pass


# float32 value (held exactly as a Python float) -> its shortest round-tripping decimal. Programs
# reuse few values, and formatting one (``str(np.float32)``) costs 20 times a lookup. Zeros and NaN
# are not cached: 0.0 == -0.0 would share an entry, and NaN never finds its own.
_SHORTEST: dict[float, float] = {}


def _shortest_f32(values: list[float]) -> list[float]:
    cache = _SHORTEST
    if len(cache) > 1 << 16:
        cache.clear()
    out = []
    for x in values:
        y = cache.get(x)
        if y is None:
            # str(np.float32) is the shortest round-tripping decimal: see the module docstring.
            y = float(str(np.float32(x)))
            if x == x and x != 0.0:
                cache[x] = y
        out.append(y)
    return out


def _obs(t) -> dict:
    d = t.detach()
    if not d.is_cpu:
        d = d.cpu()
    if d.dtype != torch.float32:
        d = d.to(torch.float32)
    # Nested tolist then flattened row-major: cheaper than reshape(-1) on tensors this small.
    values = d.tolist()
    if d.dim() == 0:
        values = [values]
    for _ in range(d.dim() - 1):
        values = [x for row in values for x in row]
    return {
        "shape": list(t.shape),
        "value": _shortest_f32(values),
        "device": str(t.device),
        "requires_grad": bool(t.requires_grad),
        "identity": str(id(t)),
        "initialized": True,
    }


def _unreadable(note: str) -> dict:
    return {"shape": [], "value": None, "device": "", "requires_grad": None, "identity": None,
            "initialized": True, "note": note}


def _same_obs(a: dict | None, b: dict) -> bool:
    """``Obs: PartialEq`` of the Rust crate: values compare by float32 bit pattern, so a tensor
    holding a NaN is not reported as changed after every op."""
    if a is b:  # ``observe_all`` hands back the same dict for a tensor it did not re-read
        return True
    if a is None or a.keys() != b.keys():
        return False
    for k in a:
        if k == "value":
            va, vb = a[k], b[k]
            if (va is None) != (vb is None):
                return False
            if va is not None and (len(va) != len(vb) or _bits(va) != _bits(vb)):
                return False
        elif a[k] != b[k]:
            return False
    return True


def _bits(values: list[float]) -> bytes:
    """The float32 bit patterns of ``values``, packed in one call (``struct`` rounds each float to
    float32 as ``f32`` does, and keeps NaN payloads and the sign of zero)."""
    return struct.pack(f"<{len(values)}f", *values)


class Session:
    def __init__(self, device_name: str, tensors: list[dict]):
        if device_name not in DEVICES:
            raise Unsupported(f"unknown device {json.dumps(device_name)} "
                              f"(this probe has {', '.join(DEVICES)})")
        self.home, self.variant, _, self.alt = DEVICES[device_name]
        self.model = Model()
        self.modules = [self.model]  # the model and its module_clone copies
        self.clone_prefix: dict[int, str] = {}  # id(clone module) -> "<name>."
        self.names: dict[str, torch.Tensor] = {}
        # Observation cache (see observe_all): name -> (key, last observation).
        self._seen: dict[str, tuple[tuple, dict]] = {}
        self.keep: list = []  # every object ever bound: ids are never reused within a program
        self.grads: dict[str, list[float] | None] = {}  # declared param name -> `grad` field
        self.optimizers: dict[tuple, torch.optim.Optimizer] = {}
        for spec in tensors:
            if spec["name"] in self.names:
                raise ValueError(f"tensor {spec['name']!r} declared twice")
            t = self._create(spec)
            if spec["kind"] == "buffer":
                self.model.register_buffer(spec["name"], t)
                t = self.model._buffers[spec["name"]]
            else:
                t = nn.Parameter(t)
                self.model.register_parameter(spec["name"], t)
                self.grads[spec["name"]] = spec["grad"]
            self._bind(spec["name"], t)

    def _create(self, spec: dict) -> torch.Tensor:
        shape = spec["shape"]
        if spec["kind"] == "lazy":
            # torch has no lazy parameters: create at open, report initialised (SEMANTICS.md).
            if spec["init"] == "uniform":
                gen = torch.Generator().manual_seed(spec["seed"] or 0)
                t = torch.empty(shape, dtype=torch.float32).uniform_(-1.0, 1.0, generator=gen)
            else:
                fill = spec["fill"] if spec["fill"] is not None else 0.0
                t = torch.full(shape, fill, dtype=torch.float32)
        else:
            if spec["value"] is None:
                raise ValueError(f"tensor {spec['name']!r} has no value")
            t = torch.tensor(spec["value"], dtype=torch.float32).reshape(shape)
        return t.to(self.home)

    def _bind(self, name: str, t) -> None:
        self.names[name] = t
        self.keep.append(t)

    # ---- ops --------------------------------------------------------------------------------

    def apply(self, op: dict) -> None:
        getattr(self, "_" + op["op"])(op)

    def _snapshot(self, op: dict) -> None:
        self._bind(op["name"], self._take(self.names[op["of"]], op["of"], op["method"]))

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
        if method == "state_dict":
            # Module.state_dict() holds param.detach() / the buffer (keep_vars=False): no copy.
            if of not in self.model._parameters and of not in self.model._buffers:
                raise Unsupported(f"state_dict: {of!r} is not a parameter or buffer of the model "
                                  "(a snapshot has no state_dict entry)")
            return self.model.state_dict()[of]
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

    def _write(self, op: dict) -> None:
        t = self.names[op["target"]]
        value = torch.tensor(op["value"], dtype=torch.float32, device=t.device)
        with torch.no_grad():
            if op["index"] is None:
                t.copy_(value.reshape(t.shape))
            else:
                # row shape = shape[1:]; a 0-d scalar for a rank-1 tensor
                t[op["index"]] = value.reshape(t.shape[1:])

    def _fill(self, op: dict) -> None:
        with torch.no_grad():
            self.names[op["target"]].fill_(op["value"])

    def _scale(self, op: dict) -> None:
        with torch.no_grad():
            self.names[op["target"]].mul_(op["factor"])

    def _optimizer(self, op: dict) -> torch.optim.Optimizer:
        key = (op["optimizer"], op["lr"], op["momentum"], op["betas"], op["eps"], op["weight_decay"])
        opt = self.optimizers.get(key)
        if opt is not None:
            return opt
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
            opt = torch.optim.SGD(params, lr=op["lr"], **impl)
        elif kind == "sgd_momentum":
            opt = torch.optim.SGD(params, lr=op["lr"], momentum=op["momentum"], **impl)
        elif kind == "adam":
            opt = torch.optim.Adam(params, lr=op["lr"], betas=op["betas"], eps=op["eps"],
                                   weight_decay=op["weight_decay"], **impl)
        else:
            opt = torch.optim.AdamW(params, lr=op["lr"], betas=op["betas"], eps=op["eps"],
                                    weight_decay=op["weight_decay"], **impl)
        self.optimizers[key] = opt
        return opt

    def _step(self, op: dict) -> None:
        opt = self._optimizer(op)
        opt.zero_grad()  # set_to_none=True by default
        loss = None
        for name, p in self.model.named_parameters():
            g = self.grads.get(name)
            g = (torch.ones(p.shape, dtype=torch.float32, device=p.device) if g is None
                 else torch.tensor(g, dtype=torch.float32, device=p.device).reshape(p.shape))
            term = (p * g).sum()
            loss = term if loss is None else loss + term
        if loss is None:
            raise ValueError("the model has no parameters")
        loss.backward()
        opt.step()

    def _move(self, op: dict) -> None:
        if op["method"] == "fork":
            raise Unsupported("fork is burn only (torch has no such call)")
        dev = {"home": self.home, "cpu": "cpu", "alt": self.alt}[op["device"]]
        if dev is None:
            raise Unsupported(f"no second device next to {self.home}")
        name = op["target"]
        t = self.names[name]
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
        """The module now holds `new` where it held `old`: the name that reads the module's slot
        (the declared name for the model, `<clone>.<key>` for a module_clone) reads `new` from now
        on, and so does the name the move went through (`t = module.<key>` after `module.to`).
        Other names bound to `old` keep it, as a user's other variables would."""
        slot_name = key if module is self.model else self.clone_prefix.get(id(module), "") + key
        for n in (slot_name, target):
            if self.names.get(n) is old:
                self._bind(n, new)

    def _module_clone(self, op: dict) -> None:
        clone = copy.deepcopy(self.model)
        self.modules.append(clone)
        self.clone_prefix[id(clone)] = op["name"] + "."
        for pname, p in clone.named_parameters():
            self._bind(f"{op['name']}.{pname}", p)

    def _valid(self, op: dict) -> None:
        self.model.eval()

    def _train(self, op: dict) -> None:
        self.model.train()

    def _no_grad(self, op: dict) -> None:
        # torch has no module-level no-grad or freeze flag: both are requires_grad_(False) on every
        # parameter (SEMANTICS.md); torch.no_grad() is a context, not a model state.
        for p in self.model.parameters():
            p.requires_grad_(False)

    _freeze = _no_grad

    def _read(self, op: dict) -> None:
        pass  # torch tensors are always materialised; observing reads every name anyway

    # ---- observation ------------------------------------------------------------------------

    def observe_all(self) -> dict:
        """Every bound name read to the host, skipping the read where nothing can have changed.

        Reading a tensor (detach, copy to host, format every float) is the worker's hot path.
        A name is re-read only when its key changed (object, version counter, storage, layout,
        flags) or when any name sharing its storage changed: tensors over one storage may have
        separate version counters (``torch.from_numpy``, ``copy.copy``), so a write through one
        must invalidate all of them."""
        keys: dict[str, tuple | None] = {}
        for name, t in self.names.items():
            try:
                keys[name] = (id(t), t._version, t.untyped_storage().data_ptr(), t.storage_offset(),
                              t.shape, t.stride(), t.requires_grad, t.device)
            except Exception:  # noqa: BLE001 - no key: always read
                keys[name] = None
        dirty = {k[2] for n, k in keys.items() if k is not None and self._seen.get(n, (None,))[0] != k}
        out = {}
        for name, t in self.names.items():
            key = keys[name]
            seen = self._seen.get(name)
            if key is not None and seen is not None and seen[0] == key and key[2] not in dirty:
                out[name] = seen[1]
                continue
            try:
                out[name] = _obs(t)
            except Exception as e:  # noqa: BLE001 - an unreadable tensor is data, not a crash
                out[name] = _unreadable(f"{type(e).__name__}: {e}")
            if key is not None:
                self._seen[name] = (key, out[name])
        return out


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


# ---------------------------------------------------------------------------------------------
# The driver (``run_program`` / ``serve`` of the Rust crate).


def _fault() -> None:
    if FAULT == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    while True:  # "hang"
        time.sleep(3600)


def run_op(session: Session, raw) -> tuple[str, str | None]:
    name = raw.get("op") if isinstance(raw, dict) else None
    if not isinstance(name, str):
        return "error", "malformed op: no string field `op`"
    if name == "_fault" and FAULT is not None:
        _fault()
    if name not in ALL_OPS:
        return "unsupported", f"unknown op {json.dumps(name)}"
    try:
        op = parse_op(raw)
    except Malformed as e:
        return "error", f"malformed op: {e}"
    use = USES.get(name)
    if use is not None and op[use] not in session.names:
        return "skipped", f"no tensor named {op[use]}"
    try:
        session.apply(op)
    except Unsupported as e:
        return "unsupported", str(e)
    except Exception as e:  # noqa: BLE001 - torch errors are the data
        return "error", f"{type(e).__name__}: {e}"
    return "ok", None


def run_program(rid: int, device: str, tensors: list, ops: list) -> dict:
    start = time.perf_counter()
    trace = {"type": "trace", "id": rid, "device": device}
    try:
        session = Session(device, tensors)
    except Exception as e:  # noqa: BLE001
        msg = str(e) if isinstance(e, Unsupported) else f"{type(e).__name__}: {e}"
        trace.update(status="error", message=msg, initial={}, steps=[],
                     elapsed_us=int((time.perf_counter() - start) * 1e6))
        return trace
    initial = session.observe_all()
    previous = initial
    steps = []
    for raw in ops:
        status, message = run_op(session, raw)
        now = session.observe_all()
        changed = {k: v for k, v in now.items() if not _same_obs(previous.get(k), v)}
        previous = now
        step = {"status": status, "changed": changed}
        if message is not None:
            step["message"] = message
        steps.append(step)
    trace.update(status="ok", initial=initial, steps=steps,
                 elapsed_us=int((time.perf_counter() - start) * 1e6))
    return trace


def _encode_floats(reply: dict) -> None:
    """Non-finite floats travel as strings (in place, over the trace's observations)."""
    if reply.get("type") != "trace":
        return
    groups = [reply["initial"]] + [s["changed"] for s in reply["steps"]]
    for group in groups:
        for obs in group.values():
            v = obs["value"]
            if v is not None and not all(math.isfinite(x) for x in v):
                obs["value"] = [x if math.isfinite(x) else
                                ("NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity"))
                                for x in v]


def handle(line: bytes):
    """One request line -> the reply dict, or None for exit."""
    try:
        kind, req = parse_request(line)
    except Malformed as e:
        return {"type": "error", "id": None, "message": f"malformed request: {e}"}
    if kind == "exit":
        return None
    if kind == "hello":
        return hello()  # always our own protocol number, so the harness can name both
    reply = run_program(req["id"], req["device"], req["tensors"], req["ops"])
    _encode_floats(reply)
    return reply


def serve() -> int:
    torch.set_num_threads(1)  # several targets share the harness machine's cores
    torch.manual_seed(0)
    stdin = sys.stdin.buffer
    stdout = sys.stdout
    while True:
        line = stdin.readline()
        if not line:
            break
        if not line.strip():
            continue
        try:
            reply = handle(line)
            if reply is None:
                break
            text = json.dumps(reply, separators=(",", ":"), allow_nan=False)
        except Exception as e:  # noqa: BLE001 - a worker bug must not kill the target
            text = json.dumps({"type": "error", "id": None,
                               "message": f"internal error: {type(e).__name__}: {e}"})
        try:
            stdout.write(text + "\n")
            stdout.flush()
        except BrokenPipeError:
            break  # the harness went away
    return 0


if __name__ == "__main__":
    sys.exit(serve())
