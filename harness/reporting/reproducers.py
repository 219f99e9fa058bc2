"""Stand-alone reproducers for a finding, written next to its case file.

- ``<stem>.torch.py``: a PyTorch script (always);
- ``<stem>-candle/`` (Cargo.toml + src/main.rs) when a candle target is part of the finding;
- ``<stem>-burn/`` likewise for burn.

Each replays the minimized program with the framework's own API (no aliasfuzz dependency), on
the CPU, translating every op the way the probes do (``harness/targets/torch_worker.py``,
``rust_probes/*/src/session.rs``), and prints every bound name after every op:

    initial: p0 = [1.0, 2.0]
    after op 0: s0 = [1.0, 2.0]

(values row-major; ``uninitialized`` for a lazy param not yet created). An op the framework
reported ``unsupported`` (or that failed) in the finding's repro result is emitted as a comment.
The Rust projects depend on their framework's crates only, pinned as in the probes, and use the
probes' profile. Sharing the probes' ``CARGO_TARGET_DIR`` (with their Cargo.lock copied in,
``prepare_cargo_build``) does not by itself avoid rebuilding candle or burn: cargo unifies features
over everything one build resolves, and the probe workspace builds candle_probe, burn_probe and
their serde/serde_json/tempfile together, so a one-framework project enables other features on
shared crates (serde, half, rand, ...) and every crate above them gets a new hash. The test
suite's builds therefore use ``write_project(..., unify_with_probes=True)``: the generated
Cargo.toml then lists exactly the probe workspace's dependency set, so the resolved features, and
so the compiled artifacts, are the workspace's own and only the reproducer crate is compiled.
"""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any, Iterable

from harness.case.ir import Program, load_case
from harness.paths import PROBES_WORKSPACE

LINE_RE = re.compile(r"^(initial|after op (\d+)): (\S+) = (.*)$")


# ------------------------------------------------------------------------------------------------
# Shared helpers.


# The crates a reproducer of each framework depends on (their version and features are read from
# the probe's Cargo.toml); everything else a probe depends on is the harness's, not the user's.
FRAMEWORK_CRATES = {"candle": ("candle-core", "candle-nn"), "burn": ("burn",)}


def _load_toml(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _workspace_members() -> list[Path]:
    ws = _load_toml(PROBES_WORKSPACE / "Cargo.toml").get("workspace", {})
    out: list[Path] = []
    for pattern in ws.get("members", []):
        out += sorted(p for p in PROBES_WORKSPACE.glob(pattern) if (p / "Cargo.toml").exists())
    return out


def _member_deps(member: Path, table: str = "dependencies") -> dict[str, dict]:
    """A workspace member's registry dependencies (path deps, i.e. other members, left out),
    ``workspace = true`` entries spelled out, each as a table (``{ version = ... }``)."""
    wsdeps = _load_toml(PROBES_WORKSPACE / "Cargo.toml").get("workspace", {}).get("dependencies", {})
    out: dict[str, dict] = {}
    for name, spec in _load_toml(member / "Cargo.toml").get(table, {}).items():
        if isinstance(spec, dict) and spec.get("workspace"):
            extra = [f for f in spec.get("features", [])]
            spec = wsdeps[name]
            if extra:
                spec = _spec(spec)
                spec["features"] = sorted(set(spec.get("features", [])) | set(extra))
        spec = _spec(spec)
        if "path" in spec:
            continue
        out[name] = spec
    return out


def _spec(spec: Any) -> dict:
    return {"version": spec} if isinstance(spec, str) else dict(spec)


def _merge_spec(name: str, a: dict, b: dict) -> dict:
    """Two members' requirements on one crate, as cargo unifies them (one version, the union of
    the features, default features if either wants them)."""
    if a == b:
        return a
    other = {k: v for k, v in {**a, **b}.items() if k not in ("features", "default-features")}
    if a.get("version") != b.get("version") or any(a.get(k) != b.get(k) for k in other if k != "version"):
        raise ValueError(f"rust_probes: members require {name} differently: {a} vs {b}")
    out = dict(other)
    feats = sorted(set(a.get("features", [])) | set(b.get("features", [])))
    if feats:
        out["features"] = feats
    if a.get("default-features", True) is False and b.get("default-features", True) is False:
        out["default-features"] = False
    return out


def _workspace_deps(table: str) -> dict[str, dict]:
    """The union of every probe workspace member's registry dependencies of one kind."""
    out: dict[str, dict] = {}
    for member in _workspace_members():
        for name, spec in _member_deps(member, table).items():
            out[name] = _merge_spec(name, out[name], spec) if name in out else spec
    return out


def _dep_lines(deps: dict[str, dict]) -> list[str]:
    return [f"{name} = {_toml_value(spec['version'] if list(spec) == ['version'] else spec)}"
            for name, spec in deps.items()]


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def _toml_tables(prefix: str, table: dict) -> list[str]:
    """``table`` as TOML tables under ``prefix`` (nested tables as ``[prefix.key]``)."""
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
    lines = [f"[{prefix}]", *(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in scalars.items()), ""] \
        if scalars or not table else []
    for k, v in table.items():
        if isinstance(v, dict):
            lines += _toml_tables(f"{prefix}.{_toml_key(k)}", v)
    return lines


def _toml_value(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


def _cargo_toml(package: str, framework: str, unify_with_probes: bool = False) -> str:
    """The reproducer's Cargo.toml: its framework's crates, pinned as in the probe, the probe's
    features and the probe workspace's profiles. ``unify_with_probes`` (test builds only) lists
    the whole probe workspace's dependency set instead (see the module docstring)."""
    probe = PROBES_WORKSPACE / f"{framework}_probe"
    probe_deps = _member_deps(probe)
    deps = {name: probe_deps[name] for name in FRAMEWORK_CRATES[framework]}
    build_deps: dict[str, dict] = {}
    note = [f"# Crate versions and features are pinned as in rust_probes/{framework}_probe/Cargo.toml."]
    if unify_with_probes:
        deps = {**deps, **{k: v for k, v in _workspace_deps("dependencies").items() if k not in deps}}
        for k in FRAMEWORK_CRATES[framework]:
            deps[k] = _merge_spec(k, probe_deps[k], _workspace_deps("dependencies")[k])
        build_deps = _workspace_deps("build-dependencies")
        note += [
            "# Test build: the dependencies below are the whole probe workspace's (rust_probes/*/Cargo.toml),",
            "# not only what this program uses. cargo unifies features over the dependency graph it resolves;",
            "# with exactly the workspace's set, every dependency gets the workspace's features and so the same",
            "# build hash, and a CARGO_TARGET_DIR shared with `cargo build --workspace --bins` in rust_probes",
            "# reuses every compiled dependency (a candle- or burn-only set rebuilds serde, half, rand,",
            "# candle-core or burn and everything above them: minutes instead of seconds).",
        ]
    feats = _load_toml(probe / "Cargo.toml").get("features", {})
    feature_lines = [f"{k} = {_toml_value(v)}" for k, v in feats.items()
                     if all(str(f).split("/", 1)[0].rstrip("?") in deps for f in v)]
    profiles = _load_toml(PROBES_WORKSPACE / "Cargo.toml").get("profile", {})
    return "\n".join([
        "# Generated by aliasfuzz (harness/reporting/reproducers.py): a stand-alone reproducer.",
        *note,
        "[package]", f'name = "{package}"', 'version = "0.1.0"', 'edition = "2021"', "publish = false", "",
        "[dependencies]", *_dep_lines(deps), "",
        *(["[build-dependencies]", *_dep_lines(build_deps), ""] if build_deps else []),
        "[features]", *feature_lines, "",
        "# The probes' profiles (rust_probes/Cargo.toml): their kernels are built optimised.",
        *(_toml_tables("profile", profiles) if profiles else []),
        "# Not part of any enclosing workspace.", "[workspace]", "",
    ])


def _statuses(repro: dict | None, framework: str) -> dict[int, tuple[str, str | None]]:
    """op index -> (status, message) for the first target of the framework in the repro JSON
    (an op another device of the framework could run is still emitted)."""
    out: dict[int, tuple[str, str | None]] = {}
    if not repro:
        return out
    for tid, t in repro.get("targets", {}).items():
        if tid.split(":", 1)[0] != framework:
            continue
        for i, s in enumerate(t.get("ops") or []):
            st = s.get("status", "ok")
            if st != "ok" and (i not in out or out[i][0] != "ok"):
                out[i] = (st, s.get("message"))
            elif st == "ok":
                out[i] = ("ok", None)
        if t.get("status") not in (None, "ok"):
            continue
    return out


def _op_text(op: dict) -> str:
    return json.dumps(op, separators=(", ", ": "))


def _comment_lines(prefix: str, i: int, op: dict, status: str, message: str | None) -> list[str]:
    msg = f": {message}" if message else ""
    return [f"{prefix} op {i}: {_op_text(op)}", f"{prefix}   not run: the framework reported `{status}`{msg}"]


def _replace_model_param(slot: tuple, expr: str) -> str:
    """A burn line that takes the model's param out of its slot as ``p`` and puts ``expr`` back
    (burn calls consume the param, as the probe's ``Param::map`` edits do)."""
    where = f"model.p{slot[1]}[{slot[2]}]"
    return f"    {{ let p = std::mem::replace(&mut {where}, placeholder()); {where} = {expr}; }}"


def _rust_f32_list(values: Iterable[float]) -> str:
    """A ``Vec<f32>`` literal: the first element carries the type (an unsuffixed literal would make
    ``Var::from_vec``/``TensorData::new``, generic over the element type, build an F64 tensor)."""
    items = [_rust_float(v) for v in values]
    if not items:
        return "Vec::<f32>::new()"
    return "vec![" + ", ".join([_rust_f32(items[0]), *items[1:]]) + "]"


def _rust_f32(literal: str) -> str:
    """A float literal typed f32 (``1.5f32``); ``f32::NAN`` and the like are already."""
    return literal if literal.startswith("f32::") else literal + "f32"


def _rust_float(v: float) -> str:
    text = repr(float(v))
    if text in ("inf", "-inf", "nan"):
        return {"inf": "f32::INFINITY", "-inf": "f32::NEG_INFINITY", "nan": "f32::NAN"}[text]
    if "e" in text or "." in text:
        return text + ("" if "." in text.split("e")[0] else "")
    return text + ".0"


def _ident(name: str) -> str:
    return "v_" + re.sub(r"\W", "_", name)


def _step_fields(op: dict) -> tuple[str, float, float, list[float], float, float]:
    betas = op.get("betas") or [0.9, 0.999]
    return (op["optimizer"], float(op.get("lr", 0.1)), float(op.get("momentum") or 0.0), [float(b) for b in betas],
            float(op.get("eps") if op.get("eps") is not None else 1e-8), float(op.get("weight_decay") or 0.0))


def _rows(shape) -> int:
    return shape[0] if shape else 1


# ------------------------------------------------------------------------------------------------
# PyTorch.


def torch_script(program: Program, repro: dict | None = None) -> str:
    st = _statuses(repro, "torch")
    out = [
        "#!/usr/bin/env python3",
        f'"""aliasfuzz reproducer (PyTorch, CPU): {program.title or "case"}',
        "",
        "Generated from the minimized case; needs only torch. Prints every bound name after every op.",
        '"""',
        "import copy",
        "import io",
        "",
        "import torch",
        "from torch import nn",
        "",
        "",
        "def show(label, names):",
        "    for n, t in names.items():",
        "        print(f\"{label}: {n} = {[float(x) for x in t.detach().cpu().reshape(-1).tolist()]}\")",
        "",
        "",
        "class Model(nn.Module):",
        "    pass",
        "",
        "",
        "model = Model()",
        "names = {}",
        "grads = {}",
        "optimizers = {}",
    ]
    for t in program.tensors:
        shape = list(t.shape)
        if t.kind == "lazy":
            if t.init == "uniform":
                out.append(f"_t = torch.empty({shape}).uniform_(-1.0, 1.0, generator=torch.Generator().manual_seed({t.seed or 0}))")
            else:
                out.append(f"_t = torch.full({shape}, {float(t.fill or 0.0)!r})")
        else:
            out.append(f"_t = torch.tensor({[float(x) for x in t.value]!r}, dtype=torch.float32).reshape({shape})")
        if t.kind == "buffer":
            out.append(f'model.register_buffer("{t.name}", _t)')
            out.append(f'names["{t.name}"] = model._buffers["{t.name}"]')
        else:
            out.append(f'model.register_parameter("{t.name}", nn.Parameter(_t))')
            out.append(f'names["{t.name}"] = model._parameters["{t.name}"]')
            out.append(f'grads["{t.name}"] = {list(t.grad) if t.grad is not None else None!r}')
    out.append('show("initial", names)')
    methods = {
        "alias": "{t}", "clone": "{t}.clone()", "detach": "{t}.detach()", "copy": "copy.copy({t})",
        "mul1": "{t} * 1.0", "to_home": "{t}.to({t}.device)", "to_cpu": "{t}.cpu()",
        "contiguous": "{t}.contiguous()", "reshape": "{t}.reshape(-1)", "view_row": "{t}.narrow(0, 0, 1)",
        "transpose": "{t}.transpose(-2, -1)", "state_dict": "model.state_dict()[{of!r}]",
        "deepcopy": "copy.deepcopy({t})",
        "to_host": "torch.from_numpy({t}.detach().cpu().numpy()).to({t}.device)",
        "save_load": "_save_load({t})",
    }
    out[out.index("class Model(nn.Module):"):out.index("class Model(nn.Module):")] = [
        "def _save_load(t):", "    buf = io.BytesIO()", "    torch.save(t, buf)", "    buf.seek(0)",
        "    return torch.load(buf)", "", ""]
    for i, op in enumerate(program.ops):
        out.append("")
        status, message = st.get(i, ("ok", None))
        if status != "ok":
            out += _comment_lines("#", i, op, status, message)
            out.append(f'show("after op {i}", names)')
            continue
        out.append(f"# op {i}: {_op_text(op)}")
        kind = op["op"]
        if kind == "snapshot":
            t = f'names[{op["of"]!r}]'
            out.append(f'names[{op["name"]!r}] = ' + methods[op["method"]].format(t=t, of=op["of"]))
        elif kind == "write":
            t = f'names[{op["target"]!r}]'
            out.append("with torch.no_grad():")
            v = f"torch.tensor({[float(x) for x in op['value']]!r}, dtype=torch.float32, device={t}.device)"
            if op.get("index") is None:
                out.append(f"    {t}.copy_({v}.reshape({t}.shape))")
            else:
                out.append(f"    {t}[{op['index']}] = {v}.reshape({t}.shape[1:])")
        elif kind == "fill":
            out += ["with torch.no_grad():", f"    names[{op['target']!r}].fill_({float(op['value'])!r})"]
        elif kind == "scale":
            out += ["with torch.no_grad():", f"    names[{op['target']!r}].mul_({float(op['factor'])!r})"]
        elif kind == "step":
            o, lr, mom, betas, eps, wd = _step_fields(op)
            key = (o, lr, mom, tuple(betas), eps, wd)
            ctor = {"sgd": f"torch.optim.SGD(list(model.parameters()), lr={lr!r}, foreach=False)",
                    "sgd_momentum": f"torch.optim.SGD(list(model.parameters()), lr={lr!r}, momentum={mom!r}, foreach=False)",
                    "adam": f"torch.optim.Adam(list(model.parameters()), lr={lr!r}, betas={tuple(betas)!r}, eps={eps!r}, weight_decay={wd!r}, foreach=False)",
                    "adamw": f"torch.optim.AdamW(list(model.parameters()), lr={lr!r}, betas={tuple(betas)!r}, eps={eps!r}, weight_decay={wd!r}, foreach=False)"}[o]
            out += [f"if {key!r} not in optimizers:", f"    optimizers[{key!r}] = {ctor}",
                    f"opt = optimizers[{key!r}]", "opt.zero_grad()", "loss = None",
                    "for n, p in model.named_parameters():",
                    "    g = grads.get(n)",
                    "    g = torch.ones(p.shape) if g is None else torch.tensor(g, dtype=torch.float32).reshape(p.shape)",
                    "    term = (p * g.to(p.device)).sum()",
                    "    loss = term if loss is None else loss + term",
                    "loss.backward()", "opt.step()"]
        elif kind == "move":
            dev = "cpu"
            tgt = op["target"]
            out += [f"# CPU only: `{op['device']}` is the CPU here. What module.to does to a param/buffer:",
                    f"if {tgt!r} in model._parameters and model._parameters[{tgt!r}] is names[{tgt!r}]:",
                    "    with torch.no_grad():",
                    f"        names[{tgt!r}].data = names[{tgt!r}].data.to({dev!r})",
                    f"elif {tgt!r} in model._buffers and model._buffers[{tgt!r}] is names[{tgt!r}]:",
                    f"    model._buffers[{tgt!r}] = names[{tgt!r}] = names[{tgt!r}].to({dev!r})",
                    "else:",
                    f"    names[{tgt!r}] = names[{tgt!r}].to({dev!r})"]
        elif kind == "module_clone":
            out += ["_m = copy.deepcopy(model)",
                    "for _k, _p in _m.named_parameters():",
                    f"    names[{op['name']!r} + '.' + _k] = _p"]
        elif kind in ("valid", "train"):
            out.append("model.eval()" if kind == "valid" else "model.train()")
        elif kind in ("no_grad", "freeze"):
            out.append("model.requires_grad_(False)")
        elif kind == "read":
            out.append(f"_ = names[{op['target']!r}].tolist()")
        else:  # pragma: no cover - the case validator knows every op
            out.append(f"# unknown op {kind}")
        out.append(f'show("after op {i}", names)')
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------------
# candle.


def candle_main(program: Program, repro: dict | None = None) -> str:
    st = _statuses(repro, "candle")
    body: list[str] = []
    kinds: dict[str, str] = {}  # name -> "var" | "tensor"
    order: list[str] = []
    params = [t.name for t in program.tensors if t.kind != "buffer"]
    opt_keys: dict[str, str] = {}

    def bind(name: str, kind: str) -> None:
        kinds[name] = kind
        if name not in order:
            order.append(name)

    def ten(name: str) -> str:
        """The name's tensor as a method receiver (``v.as_tensor()`` for a Var, else ``v``)."""
        return f"{_ident(name)}.as_tensor()" if kinds[name] == "var" else _ident(name)

    def ten_ref(name: str) -> str:
        """The name's tensor as a ``&Tensor`` argument or operand."""
        return f"{_ident(name)}.as_tensor()" if kinds[name] == "var" else f"&{_ident(name)}"

    def show(label: str) -> None:
        for n in order:
            body.append(f'    show("{label}", "{n}", {ten_ref(n)});')

    for t in program.tensors:
        v, shape = _ident(t.name), "(" + ", ".join(str(d) for d in t.shape) + ",)"
        if t.kind == "param":
            body.append(f"    let {v} = Var::from_vec({_rust_f32_list(t.value)}, {shape}, &dev)?;")
            body.append(f'    varmap.data().lock().unwrap().insert("{t.name}".to_string(), {v}.clone());')
            bind(t.name, "var")
        elif t.kind == "buffer":
            body.append(f"    let {v} = Tensor::from_vec({_rust_f32_list(t.value)}, {shape}, &dev)?;")
            bind(t.name, "tensor")
        else:
            init = (f"Init::Const({_rust_f32(_rust_float(t.fill or 0.0))} as f64)" if t.init != "uniform"
                    else "Init::Uniform { lo: -1.0, up: 1.0 }")
            body.append(f'    varmap.get({shape}, "{t.name}", {init}, DType::F32, &dev)?;')
            body.append(f'    let {v} = varmap.data().lock().unwrap()["{t.name}"].clone();')
            bind(t.name, "var")
        if t.kind != "buffer":
            grad = list(t.grad) if t.grad is not None else [1.0] * t.numel
            body.append(f'    grads.insert("{t.name}".to_string(), {_rust_f32_list(grad)});')
    show("initial")
    for i, op in enumerate(program.ops):
        body.append("")
        status, message = st.get(i, ("ok", None))
        if status != "ok":
            body += ["    " + x for x in _comment_lines("//", i, op, status, message)]
            show(f"after op {i}")
            continue
        body.append(f"    // op {i}: {_op_text(op)}")
        kind = op["op"]
        if kind == "snapshot":
            of, name, m = op["of"], _ident(op["name"]), op["method"]
            t = ten(of)
            src = _ident(of)
            simple = {"detach": f"{t}.detach()", "copy": f"{t}.copy()?", "mul1": f"({ten_ref(of)} * 1.0)?",
                      "to_home": f"{t}.to_device({t}.device())?", "to_cpu": f"{t}.to_device(&Device::Cpu)?",
                      "contiguous": f"{t}.contiguous()?", "reshape": f"{t}.reshape({t}.elem_count())?",
                      "view_row": f"{t}.narrow(0, 0, 1)?", "transpose": f"{t}.t()?",
                      "to_host": f"Tensor::new({t}.flatten_all()?.to_vec1::<f32>()?, {t}.device())?.reshape({t}.shape())?"}
            if m in ("alias", "clone"):
                body.append(f"    let {name} = {src}.clone();" + ("  // `let s = &w`: the same handle" if m == "alias" else ""))
                bind(op["name"], kinds[of])
            elif m in simple:
                body.append(f"    let {name} = {simple[m]};")
                bind(op["name"], "tensor")
            elif m == "state_dict":
                body.append(f'    let {name} = varmap.data().lock().unwrap()["{of}"].clone();')
                bind(op["name"], "var")
            elif m == "save_load":
                body += [f"    let {name} = {{",
                         '        let path = std::env::temp_dir().join(format!("aliasfuzz-repro-{}.safetensors", std::process::id()));',
                         "        varmap.save(&path)?;",
                         "        let mut fresh = VarMap::new();",
                         "        let structure: Vec<(String, Var)> = varmap.data().lock().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect();",
                         "        for (k, v) in &structure {",
                         "            fresh.get(v.shape(), k, Init::Const(0.0), v.dtype(), v.device())?;",
                         "        }",
                         "        fresh.load(&path)?;",
                         "        let _ = std::fs::remove_file(&path);",
                         f'        let v = fresh.data().lock().unwrap()["{of}"].clone();',
                         "        v",
                         "    };"]
                bind(op["name"], "var")
            else:
                body.append(f"    // {m}: candle has no such call")
        elif kind == "write":
            t = ten(op["target"])
            if op.get("index") is not None:
                body += ["    {", f"        let mut row_shape = {t}.dims().to_vec();", "        row_shape[0] = 1;",
                         f"        let row = Tensor::from_vec({_rust_f32_list(op['value'])}, row_shape, {t}.device())?;",
                         f"        {t}.slice_set(&row, 0, {op['index']})?;", "    }"]
            else:
                whole = f"Tensor::from_vec({_rust_f32_list(op['value'])}, {t}.shape(), {t}.device())?"
                if kinds[op["target"]] == "var":
                    body.append(f"    {_ident(op['target'])}.set(&{whole})?;")
                else:
                    body.append(f"    {t}.slice_set(&{whole}, 0, 0)?;")
        elif kind == "fill":
            body.append(f"    {ten(op['target'])}.const_set({_rust_f32(_rust_float(op['value']))}.into())?;")
        elif kind == "scale":
            v = _ident(op["target"])
            body.append(f"    {v}.set(&({v}.as_tensor() * {_rust_f32(_rust_float(op['factor']))} as f64)?)?;")
        elif kind == "step":
            o, lr, _mom, betas, eps, wd = _step_fields(op)
            key = json.dumps(op, sort_keys=True)
            if key not in opt_keys:
                opt_keys[key] = var = f"opt{len(opt_keys)}"
                if o == "sgd":
                    body.append(f"    let mut {var} = SGD::new(varmap.all_vars(), {_rust_float(lr)})?;")
                else:
                    body.append(f"    let mut {var} = AdamW::new(varmap.all_vars(), ParamsAdamW {{ lr: {_rust_float(lr)}, "
                                f"beta1: {_rust_float(betas[0])}, beta2: {_rust_float(betas[1])}, eps: {_rust_float(eps)}, "
                                f"weight_decay: {_rust_float(0.0 if o == 'adam' else wd)} }})?;")
            body.append("    if let Some(loss) = loss(&varmap, &grads)? {")
            body.append(f"        {opt_keys[key]}.backward_step(&loss)?;")
            body.append("    }")
        elif kind == "move":
            t = ten(op["target"])
            body.append(f"    let {_ident(op['target'])} = {t}.to_device(&Device::Cpu)?;  // `{op['device']}` is the CPU here")
            bind(op["target"], "tensor")
        elif kind == "module_clone":
            body.append("    let cloned: HashMap<String, Var> = varmap.data().lock().unwrap().clone();")
            for p in params:
                n = f"{op['name']}.{p}"
                body.append(f'    let {_ident(n)} = cloned["{p}"].clone();')
                bind(n, "var")
        elif kind == "read":
            body.append(f"    let _ = {ten(op['target'])}.flatten_all()?.to_vec1::<f32>()?;")
        else:
            body.append(f"    // {kind}: candle has no such call")
        show(f"after op {i}")
    head = [
        f"//! aliasfuzz reproducer (candle, CPU): {program.title or 'case'}",
        "//! Generated from the minimized case; depends only on candle. Prints every bound name after every op.",
        "// A fixed prelude of helpers: a program uses only some of them (dead_code).",
        "#![allow(unused_variables, unused_mut, unused_imports, dead_code, clippy::all)]",
        "use candle_core::{DType, Device, Tensor, Var};",
        "use candle_nn::{AdamW, Init, Optimizer, ParamsAdamW, VarMap, SGD};",
        "use std::collections::HashMap;",
        "",
        "fn show(label: &str, name: &str, t: &Tensor) {",
        "    match t.flatten_all().and_then(|f| f.to_vec1::<f32>()) {",
        '        Ok(v) => println!("{label}: {name} = {v:?}"),',
        '        Err(e) => println!("{label}: {name} = unreadable ({e})"),',
        "    }",
        "}",
        "",
        "/// loss = sum over the VarMap's vars of sum(var * grad) (None: no vars, nothing to train).",
        "fn loss(varmap: &VarMap, grads: &HashMap<String, Vec<f32>>) -> candle_core::Result<Option<Tensor>> {",
        "    let vars: Vec<(String, Var)> = varmap.data().lock().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect();",
        "    let mut total: Option<Tensor> = None;",
        "    for (name, var) in &vars {",
        "        let g = Tensor::from_vec(grads[name].clone(), var.shape(), var.device())?;",
        "        let term = (var.as_tensor() * &g)?.sum_all()?;",
        "        total = Some(match total { None => term, Some(l) => (l + term)? });",
        "    }",
        "    Ok(total)",
        "}",
        "",
        "fn main() -> candle_core::Result<()> {",
        "    let dev = Device::Cpu;",
        "    let varmap = VarMap::new();",
        "    let mut grads: HashMap<String, Vec<f32>> = HashMap::new();",
    ]
    return "\n".join(head + body + ["    Ok(())", "}", ""])


# ------------------------------------------------------------------------------------------------
# burn.

_BURN_HEAD = r'''//! aliasfuzz reproducer (burn, CPU flex backend with autodiff): {title}
//! Generated from the minimized case; depends only on burn. Prints every bound name after every op.
// A fixed prelude of helpers: a program uses only some of them (dead_code).
#![allow(unused_variables, unused_mut, unused_imports, deprecated, dead_code, clippy::all)]
use burn::module::{{Module, Param, ParamId}};
use burn::nn::Initializer;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{{AdamConfig, AdamWConfig, GradientsParams, ModuleOptimizer, SgdConfig}};
use burn::tensor::{{Device, Distribution, Shape, Tensor, TensorData}};

#[derive(Module, Debug)]
pub struct Model {{
    pub p1: Vec<Param<Tensor<1>>>,
    pub p2: Vec<Param<Tensor<2>>>,
    pub p3: Vec<Param<Tensor<3>>>,
}}

fn show_t<const D: usize>(label: &str, name: &str, t: &Tensor<D>) {{
    match t.to_data().try_to_vec_as::<f32>() {{
        Ok(v) => println!("{{label}}: {{name}} = {{v:?}}"),
        Err(e) => println!("{{label}}: {{name}} = unreadable ({{e:?}})"),
    }}
}}

fn show_p<const D: usize>(label: &str, name: &str, p: &Param<Tensor<D>>) {{
    if !p.is_initialized() {{
        println!("{{label}}: {{name}} = uninitialized");
    }} else {{
        show_t(label, name, &p.val());
    }}
}}

fn placeholder<const D: usize>() -> Param<Tensor<D>> {{
    Param::uninitialized(ParamId::new(), |device, _| Tensor::<D>::zeros([0; D], device), Device::flex(), false,
                         Shape::new([0; D]))
}}

enum Edit {{ Write {{ index: Option<usize>, value: Vec<f32> }}, Fill(f32), Scale(f32) }}

fn edit_tensor<const D: usize>(t: Tensor<D>, edit: &Edit) -> Tensor<D> {{
    match edit {{
        Edit::Write {{ index: Some(i), value }} => {{
            let mut row = t.dims();
            row[0] = 1;
            let v = Tensor::<D>::from_data(TensorData::new(value.clone(), row), &t.device());
            t.slice_assign([*i..*i + 1], v)
        }}
        Edit::Write {{ index: None, value }} => {{
            let dims = t.dims();
            let device = t.device();
            drop(t);
            Tensor::<D>::from_data(TensorData::new(value.clone(), dims), &device)
        }}
        Edit::Fill(x) => {{
            let rows = t.dims()[0];
            t.slice_fill([0..rows], *x)
        }}
        Edit::Scale(f) => t.mul_scalar(*f),
    }}
}}

fn edit_param<const D: usize>(p: Param<Tensor<D>>, edit: &Edit) -> Param<Tensor<D>> {{
    p.map(|t| {{
        let require_grad = t.is_require_grad();
        let autodiff = t.is_autodiff();
        let out = edit_tensor(t.inner(), edit);
        let out = if autodiff {{ Tensor::from_inner(out) }} else {{ out }};
        if require_grad {{ out.require_grad() }} else {{ out }}
    }})
}}

/// One term of the loss, `(p * g).sum()`, on the home device (after a `move` a param may be elsewhere).
fn loss_term<const D: usize>(p: &Param<Tensor<D>>, grad: &[f32], home: &Device) -> Tensor<1> {{
    let v = p.val();
    let g = Tensor::<D>::from_data(TensorData::new(grad.to_vec(), v.dims()), &v.device());
    let term = (v * g).sum();
    if term.device() != *home {{ term.to_device(home) }} else {{ term }}
}}

/// The same layout with fresh, lazily zero-initialised params (new ParamIds) on `device`: the
/// model a user builds from its config before `load_file`.
fn skeleton(model: &Model, device: &Device) -> Model {{
    fn fresh<const D: usize>(p: &Param<Tensor<D>>, device: &Device) -> Param<Tensor<D>> {{
        let shape = p.lazy_shape();
        let s2 = shape.clone();
        Param::uninitialized(
            ParamId::new(),
            move |device, require_grad| {{
                let t = Tensor::<D>::zeros(s2, device);
                if require_grad {{ t.require_grad() }} else {{ t }}
            }},
            device.clone(),
            true,
            shape,
        )
    }}
    Model {{
        p1: model.p1.iter().map(|p| fresh(p, device)).collect(),
        p2: model.p2.iter().map(|p| fresh(p, device)).collect(),
        p3: model.p3.iter().map(|p| fresh(p, device)).collect(),
    }}
}}

/// Checkpoint files written by `save_file`, removed when the program ends: a tensor loaded by
/// `load_file` is backed by the file and reads it on access (deleting it early makes `to_data`
/// panic with `host access failed`).
struct Checkpoints(Vec<std::path::PathBuf>);

impl Checkpoints {{
    fn next(&mut self) -> std::path::PathBuf {{
        let path = std::env::temp_dir()
            .join(format!("aliasfuzz-repro-{{}}-{{}}.bpk", std::process::id(), self.0.len()));
        self.0.push(path.clone());
        path
    }}
}}

impl Drop for Checkpoints {{
    fn drop(&mut self) {{
        for p in &self.0 {{
            let _ = std::fs::remove_file(p);
        }}
    }}
}}

fn make_optimizer(kind: &str, momentum: f64, betas: [f64; 2], eps: f64, weight_decay: f64) -> ModuleOptimizer {{
    let decay = (weight_decay != 0.0).then(|| WeightDecayConfig::new(weight_decay as f32));
    match kind {{
        "sgd" => SgdConfig::new().with_weight_decay(decay).init(),
        "sgd_momentum" => SgdConfig::new()
            .with_weight_decay(decay)
            .with_momentum(Some(MomentumConfig::new().with_momentum(momentum).with_dampening(0.0).with_nesterov(false)))
            .init(),
        "adam" => AdamConfig::new().with_beta_1(betas[0] as f32).with_beta_2(betas[1] as f32)
            .with_epsilon(eps as f32).with_weight_decay(decay).init(),
        _ => AdamWConfig::new().with_beta_1(betas[0] as f32).with_beta_2(betas[1] as f32)
            .with_epsilon(eps as f32).with_weight_decay(weight_decay as f32).init(),
    }}
}}

fn main() {{
    let mut checkpoints = Checkpoints(vec![]);  // declared first, so removed last
    let dev = Device::flex().autodiff();
    let mut model = Model {{ p1: vec![], p2: vec![], p3: vec![] }};
'''


def burn_main(program: Program, repro: dict | None = None) -> str:
    st = _statuses(repro, "burn")
    # name -> ("model", rank, idx) | ("param", rank) | ("tensor", rank) | None (not translated)
    slots: dict[str, tuple] = {}
    order: list[str] = []
    params: list[tuple[str, int, int, list[float]]] = []
    counts = {1: 0, 2: 0, 3: 0}
    body: list[str] = []
    opt_keys: dict[str, str] = {}
    fresh = [0]

    def bind(name: str, slot: tuple) -> None:
        slots[name] = slot
        if name not in order:
            order.append(name)

    def new_var(name: str) -> str:
        fresh[0] += 1
        return f"{_ident(name)}_{fresh[0]}"

    cur: dict[str, str] = {}  # name -> current Rust variable (own slots)

    def ref(name: str) -> str:
        s = slots[name]
        return f"model.p{s[1]}[{s[2]}]" if s[0] == "model" else cur[name]

    def show(label: str) -> None:
        for n in order:
            s = slots[n]
            if s is None:
                continue
            fn = "show_t" if s[0] == "tensor" else "show_p"
            body.append(f'    {fn}("{label}", "{n}", &{ref(n)});')

    for t in program.tensors:
        r = len(t.shape)
        dims = "[" + ", ".join(str(d) for d in t.shape) + "]"
        data = f"TensorData::new({_rust_f32_list(t.value or [])}, {dims})"
        if t.kind == "buffer":
            v = new_var(t.name)
            body.append(f"    let {v} = Tensor::<{r}>::from_data({data}, &dev);")
            cur[t.name] = v
            bind(t.name, ("tensor", r))
            continue
        if t.kind == "param":
            expr = f"Param::<Tensor<{r}>>::from_data({data}, &dev)"
        elif t.init == "uniform":
            expr = (f"Param::uninitialized(ParamId::new(), move |device, require_grad| {{ device.seed({t.seed or 0}); "
                    f"let t = Tensor::<{r}>::random({dims}, Distribution::Uniform(-1.0, 1.0), device); "
                    f"if require_grad {{ t.require_grad() }} else {{ t }} }}, dev.clone(), true, Shape::new({dims}))")
        else:
            expr = (f"Initializer::Constant {{ value: {_rust_f32(_rust_float(t.fill or 0.0))} as f64 }}"
                    f".init::<{r}, _>({dims}, &dev)")
        body.append(f"    model.p{r}.push({expr});")
        params.append((t.name, r, counts[r], list(t.grad) if t.grad is not None else [1.0] * t.numel))
        bind(t.name, ("model", r, counts[r]))
        counts[r] += 1
    show("initial")

    def rank_of(name: str) -> int:
        return slots[name][1]

    for i, op in enumerate(program.ops):
        body.append("")
        status, message = st.get(i, ("ok", None))
        kind = op["op"]
        uses = [op[k] for k in ("of", "target") if k in op]
        if status == "ok" and any(slots.get(u) is None for u in uses):
            status, message = "not translated", "its input was not translated"
        if (status == "ok" and kind == "snapshot" and op["method"] in ("state_dict", "save_load")
                and slots[op["of"]][0] == "tensor"):
            status, message = "unsupported", "burn records hold module params only, not a plain tensor"
        if status != "ok":
            body += ["    " + x for x in _comment_lines("//", i, op, status, message)]
            if kind == "snapshot":
                slots.setdefault(op["name"], None)
            show(f"after op {i}")
            continue
        body.append(f"    // op {i}: {_op_text(op)}")
        if kind == "snapshot":
            of, m = op["of"], op["method"]
            s = slots[of]
            v = new_var(op["name"])
            r = rank_of(of)
            if m == "alias":
                body.append(f"    let {v} = {ref(of)}.clone();  // a second handle on the same value")
                bind(op["name"], ("param", r) if s[0] in ("model", "param") else ("tensor", r))
            elif m in ("state_dict", "save_load"):
                # The module the param lives in: a clone of the model, or a one-param model for a
                # Param bound outside it (rust_probes/burn_probe/src/session.rs `module_of`).
                if s[0] == "model":
                    mod, at = "model.clone()", f"p{r}[{s[2]}]"
                else:
                    empty = {1: "vec![]", 2: "vec![]", 3: "vec![]"}
                    empty[r] = f"vec![{cur[of]}.clone()]"
                    mod = f"Model {{ p1: {empty[1]}, p2: {empty[2]}, p3: {empty[3]} }}"
                    at = f"p{r}[0]"
                if m == "state_dict":
                    body += [f"    let {v} = {{",
                             f"        let m = {mod};",
                             "        let record = m.clone().into_record();",
                             '        let loaded = m.try_load_record(record).unwrap_or_else(|e| panic!("load_record: {e}"));',
                             f"        loaded.{at}.clone()",
                             "    };"]
                else:
                    body += [f"    let {v} = {{",
                             f"        let m = {mod};",
                             "        let path = checkpoints.next();",
                             "        let fresh = skeleton(&m, &dev);",
                             '        m.save_file(&path).unwrap_or_else(|e| panic!("save_file: {e}"));',
                             '        let loaded = fresh.try_load_file(&path).unwrap_or_else(|e| panic!("load_file: {e}"));',
                             f"        loaded.{at}.clone()",
                             "    };"]
                bind(op["name"], ("param", r))
            else:
                t = f"{ref(of)}.val()" if s[0] in ("model", "param") else f"{ref(of)}.clone()"
                expr = {"clone": f"{t}.clone()", "detach": f"{t}.detach()", "mul1": f"{t}.mul_scalar(1.0)",
                        "to_home": f"{{ let t = {t}; let d = t.device(); t.to_device(&d) }}",
                        "to_cpu": f"{t}.to_device(&Device::flex().autodiff())",
                        "reshape": f"{{ let t = {t}; let n: usize = t.dims().iter().product(); t.reshape([n]) }}",
                        "view_row": f"{t}.slice([0..1])", "transpose": f"{t}.transpose()",
                        "to_host": f"{{ let t = {t}; let d = t.device(); Tensor::<{r}>::from_data(t.to_data(), &d) }}"}.get(m)
                if expr is None:
                    body.append(f"    // {m}: not translated")
                    slots.setdefault(op["name"], None)
                    show(f"after op {i}")
                    continue
                body.append(f"    let {v} = {expr};")
                bind(op["name"], ("tensor", 1 if m == "reshape" else r))
            cur[op["name"]] = v
        elif kind in ("write", "fill", "scale"):
            edit = {"write": lambda: f"Edit::Write {{ index: {'Some(%d)' % op['index'] if op.get('index') is not None else 'None'}, value: {_rust_f32_list(op['value'])} }}",
                    "fill": lambda: f"Edit::Fill({_rust_float(op['value'])})",
                    "scale": lambda: f"Edit::Scale({_rust_float(op['factor'])})"}[kind]()
            tgt = op["target"]
            s = slots[tgt]
            if s[0] == "model":
                body.append(_replace_model_param(s, f"edit_param(p, &{edit})"))
            else:
                v = new_var(tgt)
                fn = "edit_param" if s[0] == "param" else "edit_tensor"
                body.append(f"    let {v} = {fn}({cur[tgt]}, &{edit});")
                cur[tgt] = v
        elif kind == "step":
            o, lr, mom, betas, eps, wd = _step_fields(op)
            key = json.dumps(op, sort_keys=True)
            if key not in opt_keys:
                opt_keys[key] = var = f"opt{len(opt_keys)}"
                body.append(f'    let mut {var} = make_optimizer("{o}", {_rust_float(mom)}, [{_rust_float(betas[0])}, '
                            f"{_rust_float(betas[1])}], {_rust_float(eps)}, {_rust_float(wd)});")
            terms = [f"loss_term(&model.p{r}[{idx}], &{_rust_f32_list(g)}, &dev)" for _, r, idx, g in params]
            body += ["    {", f"        let loss = {' + '.join(terms) or 'unreachable!()'};",
                     "        let grads = loss.backward();",
                     "        let gp = GradientsParams::from_grads(grads, &model);",
                     f"        model = {opt_keys[key]}.step({_rust_float(lr)}, model, gp);", "    }"]
        elif kind == "move":
            dev = {"home": "Device::flex().autodiff()", "cpu": "Device::flex().autodiff()",
                   "alt": "Device::ndarray().autodiff()"}[op["device"]]
            call = "to_device" if op["method"] == "to" else "fork"
            tgt = op["target"]
            s = slots[tgt]
            if s[0] == "model":
                body.append(_replace_model_param(s, f"Module::{call}(p, &{dev})"))
            else:
                v = new_var(tgt)
                body.append(f"    let {v} = Module::{call}({cur[tgt]}, &{dev});")
                cur[tgt] = v
        elif kind == "module_clone":
            mv = new_var(op["name"])
            body.append(f"    let {mv} = model.clone();")
            for pname, r, idx, _ in params:
                n = f"{op['name']}.{pname}"
                v = new_var(n)
                body.append(f"    let {v} = {mv}.p{r}[{idx}].clone();")
                cur[n] = v
                bind(n, ("param", r))
        elif kind in ("valid", "train", "no_grad", "freeze"):
            body.append(f"    model = model.{kind}();")
        elif kind == "read":
            s = slots[op["target"]]
            body.append(f"    let _ = {ref(op['target'])}{'.val()' if s[0] != 'tensor' else ''}.to_data();")
        show(f"after op {i}")
    return _BURN_HEAD.format(title=program.title or "case") + "\n".join(body) + "\n}\n"


# ------------------------------------------------------------------------------------------------
# Writing.


def _frameworks(finding: dict, repro: dict | None) -> set[str]:
    fws = {t.split(":", 1)[0] for t in finding.get("targets", [])}
    return fws


def write_reproducers(run_dir: str | Path, finding: dict) -> list[Path]:
    """Writes the reproducers of one finding (a findings.json record) next to its case; returns
    their paths (the script, and each cargo project's folder)."""
    run_dir = Path(run_dir)
    case_path = run_dir / finding["case"]
    program = load_case(case_path)
    repro = None
    if finding.get("repro"):
        try:
            repro = json.loads((run_dir / finding["repro"]).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            repro = None
    stem = case_path.name[: -len(".toml")]
    out: list[Path] = []
    script = case_path.with_name(f"{stem}.torch.py")
    script.write_text(torch_script(program, repro), encoding="utf-8")
    out.append(script)
    fws = _frameworks(finding, repro)
    for fw, gen in (("candle", candle_main), ("burn", burn_main)):
        if fw not in fws:
            continue
        proj = case_path.with_name(f"{stem}-{fw}")
        (proj / "src").mkdir(parents=True, exist_ok=True)
        pkg = re.sub(r"[^a-z0-9_]", "_", f"repro_{stem}_{fw}".lower())
        (proj / "Cargo.toml").write_text(_cargo_toml(pkg, fw), encoding="utf-8")
        (proj / "src" / "main.rs").write_text(gen(program, repro), encoding="utf-8")
        out.append(proj)
    return out


def write_project(program: Program, framework: str, dest: Path, repro: dict | None = None,
                  unify_with_probes: bool = False) -> Path:
    """One cargo project for ``framework`` (candle or burn) at ``dest`` (used by the tests).
    ``unify_with_probes``: depend on the whole probe workspace's dependency set, so that a build
    sharing the probes' CARGO_TARGET_DIR compiles only this crate (see the module docstring)."""
    gen = {"candle": candle_main, "burn": burn_main}[framework]
    (dest / "src").mkdir(parents=True, exist_ok=True)
    (dest / "Cargo.toml").write_text(_cargo_toml(f"repro_{framework}", framework, unify_with_probes), encoding="utf-8")
    (dest / "src" / "main.rs").write_text(gen(program, repro), encoding="utf-8")
    return dest


def prepare_cargo_build(project: Path) -> None:
    """Copies the probes' Cargo.lock in, so the same dependency versions resolve (and, with the
    probes' CARGO_TARGET_DIR, nothing already compiled is rebuilt)."""
    lock = PROBES_WORKSPACE / "Cargo.lock"
    if lock.exists():
        shutil.copyfile(lock, project / "Cargo.lock")


def parse_output(text: str) -> dict[int | None, dict[str, list[float] | str]]:
    """Reproducer output -> {op index (None: initial): {name: flat values or a word}}."""
    out: dict[int | None, dict[str, Any]] = {}
    for line in text.splitlines():
        m = LINE_RE.match(line.strip())
        if not m:
            continue
        step = None if m.group(1) == "initial" else int(m.group(2))
        raw = m.group(4).strip()
        if raw.startswith("["):
            vals = [float(x) for x in re.findall(r"[-+]?(?:inf|nan|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)", raw[1:-1])]
            out.setdefault(step, {})[m.group(3)] = vals
        else:
            out.setdefault(step, {})[m.group(3)] = raw.split()[0]
    return out


def trace_states(target_json: dict) -> dict[int | None, dict[str, list[float] | str]]:
    """A target's repro JSON (``initial`` + per-op ``changed``) -> the full state after each op,
    in ``parse_output``'s form."""
    def val(o: dict) -> Any:
        if not o.get("initialized", True):
            return "uninitialized"
        if o.get("value") is None:
            return "unreadable"
        flat: list[float] = []

        def walk(x: Any) -> None:
            if isinstance(x, list):
                for y in x:
                    walk(y)
            else:
                flat.append(float(x))

        walk(o["value"])
        return flat

    state = {n: val(o) for n, o in (target_json.get("initial") or {}).items()}
    out: dict[int | None, dict[str, Any]] = {None: dict(state)}
    for i, step in enumerate(target_json.get("trace") or []):
        for n, o in (step.get("changed") or {}).items():
            state[n] = val(o)
        out[i] = dict(state)
    return out
