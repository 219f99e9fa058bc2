"""The candle reproducer of a finding: ``src/main.rs`` of a cargo project that depends only on
candle, replays the program on the CPU with the calls the candle probe makes and prints every bound
name after every op. The helpers it calls (``loss``, ``save_and_load``, ``write_row``, ``assign_from``, ``Opt``,
``show``, ...) are the probe's own ``support.rs``, copied into the project
(``harness/targets/rust_project.py``); this module writes only the program-specific part.

A name is bound to a ``Var`` or a ``Tensor``, whichever type the candle call gives (the probe's
``Handle``, ``rust_probes/candle_probe/src/session.rs``): it decides how a write is spelled. Each op
kind has an emitter method (``_Writer.EMITTERS``). An op candle did not run in the finding's repro
result is a comment.

The program's layers are built after its tensors, as the probe builds them
(``rust_probes/candle_probe/src/session/layers.rs``): a batch norm through the VarMap
(``batch_norm_layer``), its running statistics bound to the VarMap's Vars; a ``candle_nn::Dropout``.
candle has no module modes: ``valid`` / ``train`` shadow the ``train`` flag every ``forward_t``
is given.

The program's dtype is ``dt`` (``main``'s first lines set it), as in the probe: a param of another
dtype than f32 is ``Var::from_tensor`` of its f32 values converted with ``to_dtype``, a buffer the
converted tensor, lazy params and layer statistics are made by the VarMap in ``dt``; a written
value is converted to its target's dtype, a filled one made a ``Scalar`` of it (``scalar_in``).
"""

from __future__ import annotations

import re

from harness.case import layers as layer_table
from harness.case import ops
from harness.case.ir import Program
from harness.targets.protocol import PROGRAM_SEED
from harness.escaping import rust_str, visible
from harness.targets.reproducer_base import Check
from harness.targets.rust_project import (CHECK_VALUES, MainWriter, check_tail, ident, main_body, main_head, rust_f32,
                                         rust_f32_list, rust_float)

_USES = ["use candle_core::{DType, Device, Tensor, Var};", "use candle_nn::{Init, ModuleT, VarMap};",
         "use std::collections::HashMap;", ""]
_MAIN = ["fn main() -> candle_core::Result<()> {", "    let dev = Device::Cpu;",
         "    let dt = {dtype};  // the program's dtype: every tensor's",
         "    #[allow(unused_mut)] // only `load` needs it mutable",
         "    let mut varmap = VarMap::new();",
         "    let mut grads: HashMap<String, Vec<f32>> = HashMap::new();"]

# Snapshot methods that are one candle call on the source tensor, giving a plain Tensor
# (``{t}``: the source as a receiver, ``{r}``: as a ``&Tensor``).
_TENSOR_METHODS = {
    "detach": "{t}.detach()", "copy": "{t}.copy()?", "mul1": "({r} * 1.0)?",
    "to_home": "{t}.to_device({t}.device())?", "to_cpu": "{t}.to_device(&Device::Cpu)?",
    "contiguous": "{t}.contiguous()?", "reshape": "{t}.reshape({t}.elem_count())?",
    "view_row": "{t}.narrow(0, 0, 1)?", "transpose": "{t}.t()?", "to_host": "through_host({r})?",
    # the probe's session/views.rs, spelled the same (`IndexOp::i` by its path: no import to leave unused)
    "expand": "expand_two({r})?", "permute": "{t}.permute((1, 2, 0))?", "flip": "{t}.flip(&[0])?",
    "narrow": "{t}.narrow(0, 1, {t}.dim(0)? - 1)?", "unsqueeze": "{t}.unsqueeze(0)?", "squeeze": "{t}.squeeze(0)?",
    "chunk": "{t}.chunk(2, 0)?.remove(0)", "select": "candle_core::IndexOp::i({r}, 0)?",
    # dt: the program's dtype, every tensor's (main's first lines set it)
    "to_same_dtype": "{t}.to_dtype(dt)?", "via_bf16": "{t}.to_dtype(DType::BF16)?.to_dtype(dt)?",
    "via_f32": "{t}.to_dtype(DType::F32)?.to_dtype(dt)?",
}

#: candle's dtype for a program's (the probe's ``candle_dtype``).
_CANDLE_DTYPES = {"f32": "DType::F32", "bf16": "DType::BF16", "f16": "DType::F16"}


class _Writer(MainWriter):
    """The body of ``main`` for one program, op by op."""

    framework = "candle"

    def __init__(self, program: Program):
        super().__init__()
        self.kinds: dict[str, str] = {}  # name -> "var" | "tensor"
        self.order: list[str] = []
        self.params = program.model_names  # what a prefix binds: params, then the layers' stats
        self.layers = program.layers
        self.caches: set[str] = set()  # names whose KV cache a cache append started
        self.seeded = False  # whether the program's one generator was seeded (lazy init program_rng)
        self.f32 = program.dtype == "f32"  # values need no conversion

    def bind(self, name: str, kind: str) -> None:
        self.kinds[name] = kind
        if name not in self.order:
            self.order.append(name)

    def bound(self, name: str) -> bool:
        return name in self.kinds

    def ten(self, name: str) -> str:
        """The name's tensor as a method receiver (``v.as_tensor()`` for a Var, else ``v``)."""
        return f"{ident(name)}.as_tensor()" if self.kinds[name] == "var" else ident(name)

    def ten_ref(self, name: str) -> str:
        """The name's tensor as a ``&Tensor`` argument or operand."""
        return f"{ident(name)}.as_tensor()" if self.kinds[name] == "var" else f"&{ident(name)}"

    def show(self, label: str) -> None:
        self.body += [f"    show({rust_str(label)}, {rust_str(n)}, {self.ten_ref(n)});" for n in self.order]

    def values_of(self, name: str) -> str:
        return f"values({self.ten_ref(name)}).unwrap_or_default()"

    def declare(self, t) -> None:
        v, shape = ident(t.name), "(" + ", ".join(str(d) for d in t.shape) + ",)"
        if t.kind == "param":
            made = (f"Var::from_vec({rust_f32_list(t.value)}, {shape}, &dev)?" if self.f32 else
                    f"Var::from_tensor(&Tensor::from_vec({rust_f32_list(t.value)}, {shape}, &dev)?.to_dtype(dt)?)?")
            self.body += [f"    let {v} = {made};", f"    insert_var(&varmap, {rust_str(t.name)}, &{v});"]
        elif t.kind == "buffer":
            convert = "" if self.f32 else ".to_dtype(dt)?"
            self.body.append(f"    let {v} = Tensor::from_vec({rust_f32_list(t.value)}, {shape}, &dev)?{convert};")
        else:
            if t.init == "program_rng" and not self.seeded:
                # As the probe does once per program; the CPU refuses (the probe: unsupported).
                self.body.append(f"    dev.set_seed({PROGRAM_SEED})?;  // the program's one generator")
                self.seeded = True
            init = (f"Init::Const({rust_f32(rust_float(t.fill or 0.0))} as f64)" if t.init == "const"
                    else "Init::Uniform { lo: -1.0, up: 1.0 }")
            dims = "vec![" + ", ".join(str(d) for d in t.shape) + "]"
            self.body.append(f"    let {v} = lazy_var(&varmap, {dims}, {rust_str(t.name)}, {init}, dt, &dev)?;")
        self.bind(t.name, "tensor" if t.kind == "buffer" else "var")
        if t.kind != "buffer":
            grad = list(t.grad) if t.grad is not None else [1.0] * t.numel
            self.body.append(f"    grads.insert({rust_str(t.name)}.to_string(), {rust_f32_list(grad)});")

    def declare_layer(self, layer) -> None:
        """A layer, as the probe's ``add_layer`` builds it, after the tensors; after the last one
        the ``train`` flag (true)."""
        v = _layer_var(layer.name)
        if layer.kind == "batch_norm":
            self.body.append(f"    let {v} = batch_norm_layer(&varmap, {rust_str(layer.name)}, {layer.features}, "
                             f"{rust_float(layer.momentum)}, {rust_float(layer_table.BATCH_NORM_EPS)}, dt, &dev)?;")
            for stat, _, _ in layer.states():
                self.body.append(f"    let {ident(stat)} = var_of(&varmap, {rust_str(stat)}).expect(\"batch_norm puts "
                                 'its stats in the VarMap");')
                self.bind(stat, "var")
        else:  # Dropout::new takes any p; only the training forward refuses p = 1
            self.body.append(f"    let {v} = candle_nn::Dropout::new({rust_f32(rust_float(layer.p))});")
        if layer is self.layers[-1]:
            self.body.append("    let train = true;  // candle has no module modes: what every forward_t is given")

    # -- op emitters -----------------------------------------------------------------------------

    def snapshot(self, op: dict) -> None:
        of, name, m = op["of"], ident(op["name"]), op["method"]
        if m in ("alias", "clone"):  # a Var stays a Var (Var::clone), a Tensor a Tensor
            note = "  // `let s = &w`: the same handle" if m == "alias" else ""
            self.body.append(f"    let {name} = {ident(of)}.clone();{note}")
            self.bind(op["name"], self.kinds[of])
        elif m in _TENSOR_METHODS:
            self.body.append(f"    let {name} = {_TENSOR_METHODS[m].format(t=self.ten(of), r=self.ten_ref(of))};")
            self.bind(op["name"], "tensor")
        elif m == "state_dict":
            self.body.append(f"    let {name} = var_of(&varmap, {rust_str(of)}).expect(\"a param or layer stat is in the VarMap\");")
            self.bind(op["name"], "var")
        elif m == "save_load":
            self.body += [f"    let {name} = {{",
                          '        let path = std::env::temp_dir().join(format!("aliasfuzz-repro-{}.safetensors", '
                          "std::process::id()));",
                          "        let _removed = RemoveOnDrop(path.clone());",
                          "        let fresh = save_and_load(&varmap, &path)?;",
                          f"        var_of(&fresh, {rust_str(of)}).expect(\"the fresh VarMap has the model's structure\")",
                          "    };"]
            self.bind(op["name"], "var")
        else:
            self.body.append(f"    // {visible(m)}: candle has no such call")

    def write(self, op: dict) -> None:
        tgt, value = op["target"], rust_f32_list(op["value"])
        if op.get("index") is not None:
            self.body.append(f"    write_row({self.ten_ref(tgt)}, {op['index']}, &{value})?;")
            return
        t = self.ten(tgt)
        convert = "" if self.f32 else f".to_dtype({t}.dtype())?"  # as write_row converts a row
        whole = f"Tensor::from_vec({value}, {t}.shape(), {t}.device())?{convert}"
        if self.kinds[tgt] == "var":
            self.body.append(f"    {ident(tgt)}.set(&{whole})?;")
        else:
            self.body.append(f"    {t}.slice_set(&{whole}, 0, 0)?;")

    def assign(self, op: dict) -> None:
        tgt, src = op["target"], self.ten_ref(op["source"])
        if op.get("source_index") is not None:  # a view of the row, as the probe takes it
            src = f"&{src.lstrip('&')}.narrow(0, {op['source_index']}, 1)?.squeeze(0)?"
        if op.get("index") is None and self.kinds[tgt] == "var":
            self.body.append(f"    {ident(tgt)}.set({src})?;")
            return
        index = "None" if op.get("index") is None else f"Some({op['index']})"
        self.body.append(f"    assign_from({self.ten_ref(tgt)}, {index}, {src})?;")

    def fill(self, op: dict) -> None:
        t, v = self.ten(op["target"]), rust_f32(rust_float(op["value"]))
        scalar = f"{v}.into()" if self.f32 else f"scalar_in({t}.dtype(), {v})?"  # a Scalar of the tensor's dtype
        self.body.append(f"    {t}.const_set({scalar})?;")

    def scale(self, op: dict) -> None:
        v = ident(op["target"])
        self.body.append(f"    {v}.set(&({v}.as_tensor() * {rust_f32(rust_float(op['factor']))} as f64)?)?;")

    def step(self, op: dict) -> None:
        var = self.optimizer(op, "Opt::new", ("kind", "&varmap", "lr", "betas", "eps", "weight_decay"), "?")
        if self.accumulating:  # the backward passes' sum and this one's, as the probe steps it
            self.body += ["    if let Some(sum) = accumulate(_pending, loss(&varmap, &grads)?, &varmap)? {",
                          f"        {var}.step(&sum)?;", "    }"]
            self.accumulating = False
            return
        self.body += ["    if let Some(loss) = loss(&varmap, &grads)? {", f"        {var}.backward_step(&loss)?;", "    }"]

    def backward(self, op: dict) -> None:
        """``support::accumulate``: candle has no gradient accumulator; its users add GradStores."""
        before = "_pending" if self.accumulating else "None"
        self.body.append(f"    let _pending = accumulate({before}, loss(&varmap, &grads)?, &varmap)?;")
        self.accumulating = True

    def set_lr(self, op: dict) -> None:
        var = self.optimizer(op, "Opt::new", ("kind", "&varmap", "lr", "betas", "eps", "weight_decay"), "?")
        self.body.append(f"    {var}.set_learning_rate({rust_float(op['to'])});")
        self.refile_optimizer(op)

    def save(self, op: dict) -> None:
        c = ident(op["name"])
        self.checkpoints[op["name"]] = op["to"]
        if op["to"] == "memory":
            self.body.append(f"    let {c}_map: HashMap<String, Var> = varmap.data().lock().unwrap().clone();")
            entries, kind = f"{c}_map", "var"
        else:
            self.body += [f'    let {c}_path = std::env::temp_dir().join(format!("aliasfuzz-repro-{{}}-{c}.safetensors", '
                          'std::process::id()));',
                          f"    let _{c}_removed = RemoveOnDrop({c}_path.clone());  // a later load reads it again",
                          f"    varmap.save(&{c}_path)?;",
                          f"    let {c}_read = candle_core::safetensors::load(&{c}_path, &dev)?;"]
            entries, kind = f"{c}_read", "tensor"
        for p in self.params:
            n = f"{op['name']}.{p}"
            self.body.append(f"    let {ident(n)} = {entries}[{rust_str(p)}].clone();")
            self.bind(n, kind)

    def load(self, op: dict) -> None:
        c = ident(op["from"])
        if self.checkpoints.get(op["from"]) == "memory":
            self.body.append(f"    varmap.set({c}_map.iter().map(|(k, v)| (k, v.as_tensor())))?;")
        else:
            self.body.append(f"    varmap.load(&{c}_path)?;")

    def replace(self, op: dict) -> None:
        """``new`` and ``tie`` (the probe answers ``unsupported`` for the others)."""
        tgt = op["target"]
        if op["how"] == "tie":
            self.body.append(f"    let {ident(tgt)} = {ident(op['value'])}.clone();  // the same Var")
        else:
            self.body.append(f"    let {ident(tgt)} = Var::from_tensor({self.ten_ref(op['value'])})?;")
        self.body.append(f"    insert_var(&varmap, {rust_str(tgt)}, &{ident(tgt)});")
        self.bind(tgt, "var")

    def append(self, op: dict) -> None:
        """``Tensor::cat``, or the name's ``candle_nn::kv_cache::Cache`` (its first cache append
        starts one with the name's rows), as the probe appends."""
        tgt, t = op["target"], ident(op["target"])
        self.body += [f"    let _src = {self.ten(op['source'])}.clone();",
                      f"    let _src = if _src.rank() < {self.ten(tgt)}.rank() {{ _src.unsqueeze(0)? }} else {{ _src }};"]
        if op["how"] == "cat":
            self.caches.discard(tgt)
            self.body.append(f"    let {t} = Tensor::cat(&[{self.ten_ref(tgt)}, &_src], 0)?;")
        else:
            if tgt not in self.caches:
                self.caches.add(tgt)
                self.body += [f"    let mut {t}_cache = candle_nn::kv_cache::Cache::new(0, {ops.CACHE_ROWS});",
                              f"    {t}_cache.append({self.ten_ref(tgt)})?;"]
            self.body += [f"    {t}_cache.append(&_src)?;",
                          f'    let {t} = {t}_cache.current_data()?.expect("an append filled the cache");']
        self.bind(tgt, "tensor")

    def move(self, op: dict) -> None:
        tgt = op["target"]
        self.body.append(f"    let {ident(tgt)} = {self.ten(tgt)}.to_device(&Device::Cpu)?;  "
                         f"// `{visible(op['device'])}` is the CPU here")
        self.bind(tgt, "tensor")

    def module_clone(self, op: dict) -> None:
        self.body.append("    let cloned: HashMap<String, Var> = varmap.data().lock().unwrap().clone();")
        for p in self.params:
            n = f"{op['name']}.{p}"
            self.body.append(f"    let {ident(n)} = cloned[{rust_str(p)}].clone();")
            self.bind(n, "var")

    def forward(self, op: dict) -> None:
        self.body.append(f"    let {ident(op['name'])} = {_layer_var(op['layer'])}.forward_t({self.ten_ref(op['input'])}, train)?;")
        self.bind(op["name"], "tensor")

    def valid(self, op: dict) -> None:
        self.body.append("    let train = false;  // the flag forward_t is given from now on")

    def train(self, op: dict) -> None:
        self.body.append("    let train = true;  // the flag forward_t is given from now on")

    def read(self, op: dict) -> None:
        self.body.append(f"    let _ = values({self.ten_ref(op['target'])})?;")

    def map_op(self, op: dict) -> None:
        """A new tensor bound to the name (the probe's ``session/rebind.rs``)."""
        tgt = op["target"]
        self.caches.discard(tgt)
        call = {"neg": "{t}.neg()?", "relu": "{t}.relu()?", "add_scalar": "({r} + 1.0)?",
                "clamp": "{t}.clamp(-1f32, 1f32)?"}[op["fn"]]
        self.body.append(f"    let {ident(tgt)} = {call.format(t=self.ten(tgt), r=self.ten_ref(tgt))};")
        self.bind(tgt, "tensor")

    def add_op(self, op: dict) -> None:
        """``add`` for equal shapes, ``broadcast_add`` for a row, as the probe chooses."""
        tgt, t, o = op["target"], self.ten(op["target"]), self.ten_ref(op["other"])
        self.caches.discard(tgt)
        self.body.append(f"    let {ident(tgt)} = if {t}.dims() == {self.ten(op['other'])}.dims() {{ {t}.add({o})? }} "
                         f"else {{ {t}.broadcast_add({o})? }};")
        self.bind(tgt, "tensor")

    EMITTERS = {"snapshot": snapshot, "write": write, "assign": assign, "fill": fill, "scale": scale, "step": step, "move": move,
                "module_clone": module_clone, "read": read, "set_lr": set_lr, "save": save, "load": load,
                "replace": replace, "backward": backward, "append": append, "forward": forward,
                "valid": valid, "train": train, "map": map_op, "add": add_op}


def _layer_var(layer: str) -> str:
    """The Rust variable of a layer (``layer_bn``: never a bound name's ``v_...``)."""
    return f"layer_{layer}"


def candle_main(program: Program, repro: dict | None = None, check: Check | None = None) -> str:
    """``src/main.rs`` of ``program``; ``repro`` (the finding's repro JSON) says which ops candle ran;
    ``check``: what says whether the finding's divergence shows (exit 1 when it does)."""
    # Both runs of a metamorphic case have the program's tensors and layers: one writer kind.
    prelude = [line.replace("{dtype}", _CANDLE_DTYPES[program.dtype]) for line in _MAIN[1:]]
    body = _without_unread_state(main_body(program, repro, lambda: _Writer(program), prelude, check))
    head = main_head("candle", "CPU", program.title or "case")
    tail = _REMOVE_ON_DROP if any("RemoveOnDrop(" in line for line in body) else []
    checks = CHECK_VALUES if check is not None else []
    return "\n".join([*head, *_USES, _MAIN[0], *body, *check_tail(check), "    Ok(())", "}", *tail, *checks, ""])


#: What ``main`` sets up for ops that may not come: the variable, and the lines that only fill it.
_SET_UP = {"dt": ("    let dt = ", ()), "varmap": ("    let mut varmap = ", ("    #[allow(unused_mut)]", "    insert_var(&varmap, ")),
           "grads": ("    let mut grads: ", ("    grads.insert(",))}


def _without_unread_state(body: list[str]) -> list[str]:
    """``body`` without the program's dtype, VarMap or gradient map where no line reads them: the
    VarMap's entries and the gradients are read only by the ops that step, save, load, replace or
    clone the model, so a program without such ops reads as the calls it makes."""
    for variable, (declared, filling) in _SET_UP.items():
        word = re.compile(rf"\b{variable}\b")
        own = [line for line in body if line.startswith(declared) or line.startswith(filling)]
        if not any(word.search(line) for line in body if line not in own):
            body = [line for line in body if line not in own]
    return body


#: The checkpoint files a replay writes are removed when ``main`` returns, by ``Ok`` or by an
#: error: a replayed case leaves nothing in the temporary directory.
_REMOVE_ON_DROP = ["", "/// Removes a checkpoint file when it goes out of scope.", "struct RemoveOnDrop(std::path::PathBuf);", "",
                   "impl Drop for RemoveOnDrop {", "    fn drop(&mut self) {", "        let _ = std::fs::remove_file(&self.0);",
                   "    }", "}"]
