"""The PyTorch reproducer of a finding: a script that needs only torch, replays the program on the
CPU with the calls the torch target makes (``harness/targets/torch/``) and prints every
bound name after every op (``after op 0: s0 = [1.0, 2.0]``). An op torch did not run in the
finding's repro result is a comment.

Each op kind has an emitter (``EMITTERS``): the op's fields in, the script lines out. Text from
the case or the repro JSON (the title, names, messages) is written only as a literal or inside a
comment or the docstring, through ``harness.escaping``: never as code. A case name is never a
Python identifier or a module attribute of the script: the model holds each tensor, layer and
layer state under its ``model_key`` (``harness.targets.torch.names``, as the torch target does),
so a tensor named ``training``, ``forward`` or ``class`` is registered, replaced and loaded like
any other; the script's ``names`` dict is keyed by the case's own names.
"""

from __future__ import annotations

import math
from typing import Callable

from harness.case import ops
from harness.case.ir import Program
from harness.escaping import python_comment, python_docstring, python_str, visible
from harness.targets.protocol import PROGRAM_SEED
from harness.targets.torch.names import KEY_PREFIX, model_key
from harness.targets.reproducer_base import (Check, comment_lines, op_text, optimizer_key, statuses, step_fields,
                                             without_run)

_PRELUDE = '''#!/usr/bin/env python3
"""aliasfuzz reproducer (PyTorch, CPU): {title}

Generated from the minimized case; needs only torch. Prints every bound name after every op.
"""
import copy
import io

import torch
from torch import nn


def show(label, names):
    for n, t in names.items():
        print(f"{{label}}: {{n}} = {{[float(x) for x in t.detach().cpu().reshape(-1).tolist()]}}")


def _save_load(t):
    buf = io.BytesIO()
    torch.save(t, buf)
    buf.seek(0)
    return torch.load(buf)


def case_name(key):
    """The case's name of a model key (the model holds case name n under KEY_PREFIX + n)."""
    return key[len(KEY_PREFIX):]


def loss():
    """The sum of (p * grad) over the model's slots (a tied parameter once per slot)."""
    total = None
    for n, p in model.named_parameters(remove_duplicate=False):
        g = grads.get(n)
        g = torch.ones(p.shape, dtype=p.dtype) if g is None else torch.tensor(g, dtype=p.dtype).reshape(p.shape)
        term = (p * g.to(p.device)).sum()
        total = term if total is None else total + term
    return total


class Model(nn.Module):
    pass


KEY_PREFIX = {key_prefix}  # the model's key of case name n is KEY_PREFIX + n: any name is a tensor name
model = Model()
names = {{}}  # case name -> tensor
grads = {{}}  # model key -> the gradient the loss gives the param
optimizers = {{}}
checkpoints = {{}}  # name -> the state dict as returned (memory) or the bytes torch.save wrote (file)
accumulating = False  # a backward pass ran since the last step: its gradients are kept
caches = {{}}  # name -> [the KV-cache buffer of its cache appends, rows filled]
stats = []  # the layers' running statistics by model key: KEY_PREFIX + bn.running_mean, ...
'''

# Snapshot method -> the expression of the snapshot (``{t}``: the source tensor, ``{of}``: its model key as a literal).
_METHODS = {
    "alias": "{t}", "clone": "{t}.clone()", "detach": "{t}.detach()", "copy": "copy.copy({t})",
    "mul1": "{t} * 1.0", "to_home": "{t}.to({t}.device)", "to_cpu": "{t}.cpu()",
    "contiguous": "{t}.contiguous()", "reshape": "{t}.reshape(-1)", "view_row": "{t}.narrow(0, 0, 1)",
    "transpose": "{t}.transpose(-2, -1)", "state_dict": "model.state_dict()[{of}]",
    "deepcopy": "copy.deepcopy({t})",
    "to_host": "torch.from_numpy({t}.detach().cpu().numpy()).to({t}.device)",
    "save_load": "_save_load({t})",
    # views.py's calls, spelled the same
    "expand": "{t}.unsqueeze(0).expand(2, *{t}.shape)", "permute": "{t}.permute(*range(1, {t}.dim()), 0)",
    "flip": "{t}.flip(0)", "narrow": "{t}.narrow(0, 1, {t}.shape[0] - 1)", "unsqueeze": "{t}.unsqueeze(0)",
    "squeeze": "{t}.squeeze(0)", "chunk": "{t}.chunk(2, 0)[0]", "select": "{t}.select(0, 0)",
    # DTYPE: the case's, every tensor's (the script's first lines set it)
    "to_same_dtype": "{t}.to(DTYPE)", "via_bf16": "{t}.to(torch.bfloat16).to(DTYPE)",
    "via_f32": "{t}.to(torch.float32).to(DTYPE)",
}


_TORCH_DTYPES = {"f32": "torch.float32", "bf16": "torch.bfloat16", "f16": "torch.float16"}


def _name(n: str) -> str:
    return f"names[{python_str(n)}]"


def _key(n: str) -> str:
    """The literal of the model's key of case name ``n`` (``names.model_key``)."""
    return python_str(model_key(n))


def _tensor_lines(t) -> list[str]:
    """The declaration of one tensor: registered on the model as a parameter or a buffer."""
    shape = list(t.shape)
    if t.kind != "lazy":
        out = [f"_t = torch.tensor({[float(x) for x in t.value]!r}, dtype=DTYPE).reshape({shape})"]
    elif t.init == "uniform":
        out = [f"_t = torch.empty({shape}, dtype=DTYPE).uniform_(-1.0, 1.0, "
               f"generator=torch.Generator().manual_seed({t.seed or 0}))"]
    elif t.init == "program_rng":
        out = [f"_t = torch.empty({shape}, dtype=DTYPE).uniform_(-1.0, 1.0, generator=program_rng)"]
    else:
        out = [f"_t = torch.full({shape}, {float(t.fill or 0.0)!r}, dtype=DTYPE)"]
    n, k = python_str(t.name), _key(t.name)
    if t.kind == "buffer":
        return out + [f"model.register_buffer({k}, _t)", f"names[{n}] = model._buffers[{k}]"]
    return out + [f"model.register_parameter({k}, nn.Parameter(_t))",
                  f"names[{n}] = model._parameters[{k}]",
                  f"grads[{k}] = {list(t.grad) if t.grad is not None else None!r}"]


def _layer_lines(layer) -> list[str]:
    """One layer, a submodule of the model; a batch norm's running buffers bound by name."""
    if layer.kind == "dropout":
        return [f"model.add_module({_key(layer.name)}, nn.Dropout({float(layer.p)!r}))"]
    out = [f"model.add_module({_key(layer.name)}, nn.BatchNorm1d({layer.features}, momentum={float(layer.momentum)!r}, "
           "affine=False, dtype=DTYPE))"]
    for name, _, _ in layer.states():
        out += [f"stats.append({_key(name)})", f"names[{python_str(name)}] = model.get_buffer({_key(name)})"]
    return out


def _forward(op: dict) -> list[str]:
    return [f"{_name(op['name'])} = model.get_submodule({_key(op['layer'])})({_name(op['input'])})"]


def _snapshot(op: dict) -> list[str]:
    return [f"{_name(op['name'])} = " + _METHODS[op["method"]].format(t=_name(op["of"]), of=_key(op["of"]))]


def _write(op: dict) -> list[str]:
    t = _name(op["target"])
    v = f"torch.tensor({[float(x) for x in op['value']]!r}, dtype={t}.dtype, device={t}.device)"
    if op.get("index") is None:
        return ["with torch.no_grad():", f"    {t}.copy_({v}.reshape({t}.shape))"]
    return ["with torch.no_grad():", f"    {t}[{op['index']}] = {v}.reshape({t}.shape[1:])"]


def _assign(op: dict) -> list[str]:
    t, src = _name(op["target"]), _name(op["source"])
    if op.get("source_index") is not None:
        src = f"{src}[{op['source_index']}]"
    if op.get("index") is None:
        return ["with torch.no_grad():", f"    {t}.copy_({src})"]
    return ["with torch.no_grad():", f"    {t}[{op['index']}] = {src}"]


def _append(op: dict) -> list[str]:
    """``torch.cat``, or the preallocated KV cache the torch target keeps (``caches``: name ->
    [buffer, rows filled])."""
    t, src, n = _name(op["target"]), _name(op["source"]), op["target"]
    out = [f"_src = {src} if {src}.dim() == {t}.dim() else {src}.unsqueeze(0)"]
    if op["how"] == "cat":
        return out + [f"caches.pop({python_str(n)}, None)", f"{t} = torch.cat([{t}, _src])"]
    return out + [
        f"if {python_str(n)} not in caches:  # a buffer of {ops.CACHE_ROWS} rows, starting with the name's",
        f"    _buf = torch.zeros(({ops.CACHE_ROWS},) + tuple({t}.shape[1:]))",
        "    with torch.no_grad():",
        f"        _buf[:{t}.shape[0]] = {t}",
        f"    caches[{python_str(n)}] = [_buf, {t}.shape[0]]",
        f"_buf, _n = caches[{python_str(n)}]",
        "with torch.no_grad():",
        "    _buf[_n:_n + _src.shape[0]] = _src",
        f"caches[{python_str(n)}] = [_buf, _n + _src.shape[0]]",
        f"{t} = _buf[:_n + _src.shape[0]]  # a view of the buffer"]


#: ``map``'s functions as the torch target calls them (``elementwise.MAP_CALLS``).
_MAP_CALLS = {"neg": "torch.neg({t})", "relu": "torch.relu({t})", "add_scalar": "torch.add({t}, 1.0)",
              "clamp": "torch.clamp({t}, -1.0, 1.0)"}


def _map(op: dict) -> list[str]:
    t = _name(op["target"])
    return [f"caches.pop({python_str(op['target'])}, None)", f"{t} = " + _MAP_CALLS[op["fn"]].format(t=t)]


def _add(op: dict) -> list[str]:
    t = _name(op["target"])
    return [f"caches.pop({python_str(op['target'])}, None)", f"{t} = {t} + {_name(op['other'])}  # a row broadcasts"]


def _fill(op: dict) -> list[str]:
    return ["with torch.no_grad():", f"    {_name(op['target'])}.fill_({float(op['value'])!r})"]


def _scale(op: dict) -> list[str]:
    return ["with torch.no_grad():", f"    {_name(op['target'])}.mul_({float(op['factor'])!r})"]


def _optimizer(op: dict) -> str:
    """The optimizer's constructor; ``**IMPL`` is the implementation (``foreach=False`` as the
    plain target makes it, or the variant's), set before each run of the script."""
    f = step_fields(op)
    params, lr = "list(model.parameters())", f["lr"]
    adam = (f"lr={lr!r}, betas={tuple(f['betas'])!r}, eps={f['eps']!r}, weight_decay={f['weight_decay']!r}, "
            "**IMPL")
    return {"sgd": f"torch.optim.SGD({params}, lr={lr!r}, **IMPL)",
            "sgd_momentum": f"torch.optim.SGD({params}, lr={lr!r}, momentum={f['momentum']!r}, "
                            f"dampening={f['dampening']!r}, **IMPL)",
            "adam": f"torch.optim.Adam({params}, {adam})",
            "adamw": f"torch.optim.AdamW({params}, {adam})"}[f["optimizer"]]


def _live_optimizer(op: dict) -> list[str]:
    """``opt`` = the live optimizer of the op's hyper-parameters, made if none is."""
    key = optimizer_key(op)
    return [f"if {key!r} not in optimizers:", f"    optimizers[{key!r}] = {_optimizer(op)}",
            f"opt = optimizers[{key!r}]"]


def _step(op: dict) -> list[str]:
    """The live optimizer's step: zero_grad (unless a ``backward`` accumulated since the last
    step), backward of the loss, step, zero_grad."""
    return _live_optimizer(op) + [
        "if not accumulating:", "    opt.zero_grad()", "loss().backward()", "opt.step()", "opt.zero_grad()",
        "accumulating = False"]


def _backward(op: dict) -> list[str]:
    """Gradient accumulation: zero_grad before the first backward pass, then add into ``.grad``."""
    return ["if not accumulating:", "    model.zero_grad()", "    accumulating = True", "loss().backward()"]


def _set_lr(op: dict) -> list[str]:
    return _live_optimizer(op) + [
        "for group in opt.param_groups:", f"    group['lr'] = {float(op['to'])!r}",
        f"optimizers[{optimizer_key(op, op['to'])!r}] = optimizers.pop({optimizer_key(op)!r})"]


def _save(op: dict) -> list[str]:
    n = op["name"]
    out = ["_sd = model.state_dict()  # param.detach() and the buffers: no copy"]
    if op["to"] == "memory":
        out.append(f"checkpoints[{python_str(n)}] = _sd")
    else:
        out += ["_buf = io.BytesIO()", "torch.save(_sd, _buf)", f"checkpoints[{python_str(n)}] = _buf.getvalue()",
                f"_sd = torch.load(io.BytesIO(checkpoints[{python_str(n)}]))  # what the file holds"]
    return out + ["for _k in [*grads, *stats]:", f"    names[{python_str(n)} + '.' + case_name(_k)] = _sd[_k]"]


def _replace(op: dict) -> list[str]:
    # ``setattr(model, key, ...)`` is ``model.<key> = ...`` (nn.Module.__setattr__) for any key;
    # the key is the case name's ``model_key``, never one of nn.Module's own attributes.
    n, k, v = python_str(op["target"]), _key(op["target"]), _name(op["value"])
    if op["how"] == "new":
        return [f"_old = model._parameters[{k}]", f"setattr(model, {k}, nn.Parameter({v}))",
                f"if names.get({n}) is _old:", f"    names[{n}] = model._parameters[{k}]"]
    if op["how"] == "data":
        return [f"model._parameters[{k}].data = {v}"]
    if op["how"] == "tie":
        return [f"_old = model._parameters[{k}]", f"setattr(model, {k}, {v})  # the same Parameter in two slots",
                f"if names.get({n}) is _old:", f"    names[{n}] = model._parameters[{k}]"]
    return ["with torch.no_grad():", f"    model._parameters[{k}].set_({v})"]


def _load(op: dict) -> list[str]:
    """``load_state_dict``; with ``assign=True`` the model's slots hold new objects, which the
    declared names read from then on (as the torch target rebinds them)."""
    return [f"_ck = checkpoints[{python_str(op['from'])}]",
            "_sd = torch.load(io.BytesIO(_ck)) if isinstance(_ck, bytes) else _ck",
            "_before = {**model._parameters, **model._buffers, **{_k: model.get_buffer(_k) for _k in stats}}",
            f"model.load_state_dict(_sd, assign={bool(op['assign'])!r})",
            "_after = {**model._parameters, **model._buffers, **{_k: model.get_buffer(_k) for _k in stats}}",
            "for _k, _old in _before.items():  # model keys",
            "    if _after[_k] is not _old and names.get(case_name(_k)) is _old:",
            "        names[case_name(_k)] = _after[_k]"]


def _move(op: dict) -> list[str]:
    """What ``module.to`` does to a param (``.data`` swapped) or a buffer (rebound); else ``.to``."""
    tgt, t = op["target"], _name(op["target"])
    return [f"# CPU only: `{visible(op['device'])}` is the CPU here. What module.to does to a param/buffer:",
            f"if {_key(tgt)} in model._parameters and model._parameters[{_key(tgt)}] is {t}:",
            "    with torch.no_grad():",
            f"        {t}.data = {t}.data.to('cpu')",
            f"elif {_key(tgt)} in model._buffers and model._buffers[{_key(tgt)}] is {t}:",
            f"    model._buffers[{_key(tgt)}] = {t} = {t}.to('cpu')",
            "else:",
            f"    {t} = {t}.to('cpu')"]


def _module_clone(op: dict) -> list[str]:
    return ["_m = copy.deepcopy(model)", "for _k, _p in _m.named_parameters(remove_duplicate=False):",
            f"    names[{python_str(op['name'])} + '.' + case_name(_k)] = _p", "for _k in stats:",
            f"    names[{python_str(op['name'])} + '.' + case_name(_k)] = _m.get_buffer(_k)"]


EMITTERS: dict[str, Callable[[dict], list[str]]] = {
    "snapshot": _snapshot, "write": _write, "assign": _assign, "fill": _fill, "scale": _scale, "step": _step, "move": _move,
    "module_clone": _module_clone,
    "valid": lambda op: ["model.eval()"],
    "train": lambda op: ["model.train()"],
    "no_grad": lambda op: ["model.requires_grad_(False)"],
    "freeze": lambda op: ["model.requires_grad_(False)"],
    "read": lambda op: [f"_ = {_name(op['target'])}.tolist()"],
    "set_lr": _set_lr, "save": _save, "load": _load, "replace": _replace, "backward": _backward,
    "append": _append, "forward": _forward, "map": _map, "add": _add,
}


def _float_list(values) -> str:
    """A list literal of floats; NaN and the infinities as ``float("nan")`` and so on."""
    return "[" + ", ".join(repr(float(v)) if math.isfinite(v) else f'float("{v}")' for v in values) + "]"


#: The check of a checked script (``Check``): defined after the prelude, called after the op.
_CHECK = '''divergence = False  # set where the finding's divergence shows


def check_values(name, got, want, source):
    """Prints the values the divergence expects beside those observed; True when they differ."""
    got = [float(x) for x in got.detach().cpu().reshape(-1).tolist()]
    same = lambda a, b: (a != a and b != b) or abs(a - b) <= 1e-4 * max(abs(b), 1.0)
    differ = len(got) != len(want) or not all(same(a, b) for a, b in zip(got, want))
    print(f"check: {name} = {got}; the divergence expects {want} ({source}): {'it differs' if differ else 'it agrees'}")
    return differ
'''


#: The optimizer implementation of each torch device variant (``TorchSession._new_optimizer``).
IMPLS = {"plain": "{'foreach': False}", "foreach": "{'foreach': True}", "fused": "{'fused': True}"}


def variant_of(target: str) -> str:
    """The optimizer implementation a torch target id names: ``torch:cpu+foreach`` -> ``foreach``."""
    return target.split("+", 1)[1] if "+" in target else "plain"


def torch_script(program: Program, repro: dict | None = None, check: Check | None = None,
                 variants: tuple[str, str] | None = None) -> str:
    """The script of ``program``; ``repro`` (the finding's repro JSON) says which ops torch ran.
    A metamorphic case runs twice: as it is, then without its inert ops (``without: ...`` lines).
    ``check``: what says whether the finding's divergence shows; the script then ends by saying
    so, and exits 1 when it does. ``variants`` (two of ``IMPLS``): a finding between two
    optimizer implementations; the script runs the program with each, from a fresh model (the
    second's lines labelled ``<variant>: ...``), and its check compares the two runs."""
    out = [_PRELUDE.format(title=python_docstring(program.title or "case"), key_prefix=python_str(KEY_PREFIX))]
    if check is not None or variants is not None:
        out.append(_CHECK)
    first = variants[0] if variants else "plain"
    out.append(f"IMPL = {IMPLS[first]}  # the optimizers' implementation")
    if variants is not None:
        other = variants[1]
        out += _run_lines(program, repro, "", range(len(program.ops)))
        out += ["", "# The same program with the other implementation, from a fresh model; the first run's values kept.",
                "first = {n: t.detach().clone() for n, t in names.items()}",
                f'print("== {other} ==")', *_FRESH_STATE, f"IMPL = {IMPLS[other]}"]
        out += _run_lines(program, repro, f"{other}: ", range(len(program.ops)))
        out += ["", "# The divergence: a name the two implementations leave with different values.",
                "for n in first:", "    if n in names:",
                f"        divergence |= check_values(n, names[n], [float(x) for x in first[n].reshape(-1).tolist()], "
                f"{python_str(f'the {first} run')})"]
    else:
        out += _run_lines(program, repro, "", range(len(program.ops)), check)
    second = without_run(program, repro) if variants is None else None
    if second is not None:
        out += ["", f"# The same program without its inert ops {list(program.inert)}, from a fresh model.",
                f'print("== without the inert ops {list(program.inert)} ==")',
                *_FRESH_STATE, *_run_lines(second.program, second.repro, second.prefix, second.numbers)]
    if check is not None or variants is not None:
        out += ["", "if divergence:", '    print("the divergence shows")', "    raise SystemExit(1)",
                'print("the divergence does not show")']
    return "\n".join(out) + "\n"


#: The prelude's state, made afresh for a metamorphic case's second run.
_FRESH_STATE = ["model = Model()", "names = {}", "grads = {}", "optimizers = {}", "checkpoints = {}",
                "accumulating = False", "caches = {}", "stats = []"]


def _run_lines(program: Program, repro: dict | None, prefix: str, numbers, check: Check | None = None) -> list[str]:
    st = statuses(repro, "torch")
    out = [f"DTYPE = {_TORCH_DTYPES[program.dtype]}  # the case's dtype: every tensor's"]
    if any(t.init == "program_rng" for t in program.tensors):
        out.append(f"program_rng = torch.Generator().manual_seed({PROGRAM_SEED})  # the program's one generator")
    for t in program.tensors:
        out += _tensor_lines(t)
    for layer in program.layers:
        out += _layer_lines(layer)
    out.append(f'show("{prefix}initial", names)')
    for k, (i, op) in enumerate(zip(numbers, program.ops)):
        out.append("")
        status, message = st.get(k, ("ok", None))
        if status == "error" and op["op"] in EMITTERS:
            # The call is made and its error printed, as torch raised it for the target.
            label = f"{prefix}op {i}"
            shows = check is not None and check.want is None and label == check.label()
            out += [f"# op {i}: {op_text(op)}", *python_comment(f"torch reported an error here: {message or ''}"),
                    "try:", *("    " + line for line in EMITTERS[op["op"]](op)),
                    "except Exception as e:", f'    print(f"{label}: error: {{type(e).__name__}}: {{e}}")',
                    *(["    divergence = True"] if shows else [])]
        elif status != "ok":
            out += comment_lines("#", i, op, status, message)
        else:
            out.append(f"# op {i}: {op_text(op)}")
            out += EMITTERS.get(op["op"], lambda op: [f"# {op['op']}: no translation"])(op)
        out.append(f'show("{prefix}after op {i}", names)')
        if check is not None and check.want is not None and f"{prefix}after op {i}" == check.label() and check.subject:
            out.append(f"if {python_str(check.subject)} in names:")
            out.append(f"    divergence |= check_values({python_str(check.subject)}, names[{python_str(check.subject)}], "
                       f"{_float_list(check.want)}, {python_str(check.source)})")
    return out
