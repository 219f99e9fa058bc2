"""The burn reproducer of a finding: ``src/main.rs`` of a cargo project that depends only on burn,
replays the program on the CPU (flex with autodiff) with the calls the burn probe makes and prints
every bound name after every op. The helpers it calls (``Model``, ``edit_param``, ``loss_term``,
``make_optimizer``, ``record_round_trip``, ``save_and_load``, ``Checkpoints``, ``show_p``, ...)
are the probe's own ``support.rs``, copied into the project (``harness/targets/rust_project.py``);
this module writes only the program-specific part.

Every tensor and layer is made in the case's dtype (``let dtype = FloatDType::...`` at the top of
``main``), with the probe's calls: ``param_in`` / ``tensor_in`` / ``const_param`` (support.rs) where
a burn call takes no dtype, and in f32 burn's own ``Param::from_data`` / ``Tensor::from_data`` /
``Initializer::Constant``.

As in the probe (``rust_probes/burn_probe/src/session.rs``), params live in the model's slots
(``model.p<rank>[<index>]``), layers in its ``bn`` / ``dropout`` fields (``batch_norm``,
``dropout``; a dropout burn refuses to build, p = 1, is a comment), a running statistic is read
from its layer each time (``model.bn[<i>].running_mean.value()``, or a module clone's layer), and
every other name is a Rust variable holding a ``Param`` or a ``Tensor``; a burn call consumes its
argument, so an edit rebinds the name to a fresh variable (or puts the result back in the model's
slot). Each op kind has an emitter method
(``_Writer.EMITTERS``). An op burn did not run in the finding's repro result, or whose input was not
translated, is a comment.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.case import ops
from harness.case.ir import Program
from harness.case.layers import RUNNING_STATS
from harness.escaping import rust_str, visible
from harness.targets.base import SetupError
from harness.targets.protocol import PROGRAM_SEED
from harness.targets.reproducer_base import Check, step_fields
from harness.targets.rust_project import (
    CHECK_VALUES,
    MainWriter,
    check_tail,
    ident,
    main_body,
    main_head,
    rust_f32,
    rust_f32_list,
    rust_float,
)
from harness.targets.rust_reproducer import Scaffold, rust_main, transcribed

_USES = [
    "use burn::module::{Module, Param};",
    "use burn::nn::Initializer;",
    "use burn::optim::GradientsParams;",
    "use burn::tensor::{Device, FloatDType, Tensor, TensorData};",
    "",
]
_MAIN = [
    "fn main() {",
    "    let mut checkpoints = Checkpoints::default();  // declared first, so dropped last",
    "    let dev = Device::flex().autodiff();",
    "    let mut model = Model::empty();",
]
#: The case's dtype as burn names it (the probe's ``session::program_dtype``).
_FLOAT_DTYPES = {"f32": "FloatDType::F32", "bf16": "FloatDType::BF16", "f16": "FloatDType::F16"}

# Snapshot methods that are one call on the source's tensor (``{t}``; ``{r}``: the rank they give,
# the op table's ``snapshot_shape``, for the calls that name it).
_TENSOR_METHODS = {
    "clone": "{t}.clone()",
    "detach": "{t}.detach()",
    "mul1": "{t}.mul_scalar(1.0)",
    "to_home": "to_own_device({t})",
    "to_cpu": "{t}.to_device(&cpu_device())",
    "reshape": "flatten({t})",
    "view_row": "{t}.slice([0..1])",
    "transpose": "{t}.transpose()",
    "to_host": "through_host({t})",
    # the probe's session/snapshots.rs, spelled the same
    "expand": "expand_two::<_, {r}>({t})",
    "permute": "{t}.permute([1, 2, 0])",
    "flip": "{t}.flip([0])",
    "narrow": "{t}.narrow(0, 1, {t}.dims()[0] - 1)",
    "unsqueeze": "{t}.unsqueeze_dim::<{r}>(0)",
    "squeeze": "{t}.squeeze_dim::<{r}>(0)",
    "chunk": "{t}.chunk(2, 0).remove(0)",
    "select": "{t}.select_dim::<{r}>(0, 0)",
    # `dtype`: the case's (main's first lines), as the probe's snapshots.rs converts
    "to_same_dtype": "{t}.cast(dtype)",
    "via_bf16": "{t}.cast(FloatDType::BF16).cast(dtype)",
    "via_f32": "{t}.cast(FloatDType::F32).cast(dtype)",
}


#: ``map``'s functions, as the probe's ``vals::map_val`` calls them.
_MAP_CALLS = {
    "neg": "{t}.neg()",
    "relu": "burn::tensor::activation::relu({t})",
    "add_scalar": "{t}.add_scalar(1.0)",
    "clamp": "{t}.clamp(-1.0, 1.0)",
}


def _snapshot_rank(method: str, rank: int) -> int:
    """The rank of a snapshot made with ``method`` of a tensor of ``rank`` (the op table's shape
    of a source with that many dimensions)."""
    return len(ops.snapshot_shape(method, (2,) * rank))


_OPTIMIZER_ARGS = ("kind", "momentum", "dampening", "betas", "eps", "weight_decay")
_DEVICES = {"home": "cpu_device()", "cpu": "cpu_device()", "alt": "Device::ndarray().autodiff()"}
_STATS = [stat for stat, _ in RUNNING_STATS]
# What the probe answers for a write into a running statistic (session/layers.rs `refuse_stat_write`).
_NO_STAT_WRITE = "burn has no call that writes a RunningState in place (burn-core module/param/running.rs)"


def _dims(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _edit(op: dict) -> str:
    """The ``support::Edit`` of a write, fill or scale."""
    if op["op"] == "write":
        index = f"Some({op['index']})" if op.get("index") is not None else "None"
        return f"Edit::Write {{ index: {index}, value: {rust_f32_list(op['value'])} }}"
    if op["op"] == "fill":
        return f"Edit::Fill({rust_float(op['value'])})"
    return f"Edit::Scale({rust_float(op['factor'])})"


class _Writer(MainWriter):
    """The body of ``main`` for one program, op by op."""

    framework = "burn"
    ERRORS = "panic"

    def __init__(self, dtype: str = "f32") -> None:
        super().__init__()
        self.dtype = dtype  # the case's: f32 keeps burn's own calls that take no dtype
        # name -> ("model", rank, idx) | ("param", rank) | ("tensor", rank) | ("stat", module, i, stat):
        # `<module>.bn[i].<stat>`, a running statistic | None (not translated)
        self.slots: dict[str, tuple | None] = {}
        self.layers: dict[str, tuple[str, int] | None] = {}  # layer -> (model field, index); None: refused
        self.bn_names: list[tuple[str, int]] = []  # the batch norms, in the case's order, and their index
        self.order: list[str] = []
        self.cur: dict[str, str] = {}  # name -> its current Rust variable (names outside the model)
        self.params: list[tuple[str, int, int, list[float]]] = []  # (name, rank, idx, grad)
        self.counts = {1: 0, 2: 0, 3: 0}
        self.fresh = 0
        self.caches: set[str] = set()  # names whose `RowCache` a cache append started
        self.seeded = False  # whether the program's one generator was seeded (lazy init program_rng)

    def bind(self, name: str, slot: tuple) -> None:
        self.slots[name] = slot
        if name not in self.order:
            self.order.append(name)

    def new_var(self, name: str) -> str:
        self.fresh += 1
        return f"{ident(name)}_{self.fresh}"

    def ref(self, name: str) -> str:
        s = self.slots[name]
        if s[0] == "stat":
            return f"{s[1]}.bn[{s[2]}].{s[3]}"
        return f"model.p{s[1]}[{s[2]}]" if s[0] == "model" else self.cur[name]

    def value(self, name: str) -> str:
        """The name's value as a tensor: a param's ``val()``, a tensor's handle clone, a running
        statistic's ``value()`` (read from its layer now, as the probe reads it)."""
        s = self.slots[name]
        if s[0] == "stat":
            return f"{self.ref(name)}.value()"
        return f"{self.ref(name)}.val()" if s[0] in ("model", "param") else f"{self.ref(name)}.clone()"

    def rebind(self, name: str, call: Callable[[str], str]) -> None:
        """``name`` becomes ``call(its value)``: a fresh variable, or the model's slot
        (``placeholder`` holds the slot while burn consumes the param, as the probe's
        ``Model::take`` does)."""
        s = self.slots[name]
        if s[0] == "model":
            where = f"model.p{s[1]}[{s[2]}]"
            self.body.append(
                f"    {{ let p = std::mem::replace(&mut {where}, placeholder()); {where} = {call('p')}; }}"
            )
            return
        v = self.new_var(name)
        self.body.append(f"    let {v} = {call(self.cur[name])};")
        self.cur[name] = v

    def values_of(self, name: str) -> str:
        # A lazy param not yet initialised reads as no values: a check never forces one.
        if self.slots[name][0] in ("model", "param"):
            return (
                f"(if {self.ref(name)}.is_initialized() {{ read_values(&{self.value(name)}).unwrap_or_default() }} "
                "else { Vec::new() })"
            )
        return f"read_values(&{self.value(name)}).unwrap_or_default()"

    def show(self, label: str) -> None:
        for n in self.order:
            s = self.slots[n]
            if s is None:
                continue
            if s[0] == "stat":
                self.body.append(f"    show_t({rust_str(label)}, {rust_str(n)}, &{self.value(n)});")
            else:
                show = "show_t" if s[0] == "tensor" else "show_p"
                self.body.append(f"    {show}({rust_str(label)}, {rust_str(n)}, &{self.ref(n)});")

    def declare_layer(self, layer) -> None:
        """``batch_norm`` / ``dropout`` (support.rs) into the model's field; its statistics bound."""
        if layer.kind == "batch_norm":
            i = len(self.bn_names)
            self.body.append(
                f"    model.bn.push(batch_norm({layer.features}, {rust_float(layer.momentum)}, dtype, &dev));"
                f"  // {visible(layer.name)}"
            )
            self.layers[layer.name] = ("bn", i)
            self.bn_names.append((layer.name, i))
            for stat in _STATS:
                self.bind(f"{layer.name}.{stat}", ("stat", "model", i, stat))
        elif layer.p < 1.0:
            n = sum(1 for at in self.layers.values() if at is not None and at[0] == "dropout")
            self.body.append(f"    model.dropout.push(dropout({rust_float(layer.p)}));  // {visible(layer.name)}")
            self.layers[layer.name] = ("dropout", n)
        else:
            self.body.append(
                f"    // {visible(layer.name)}: DropoutConfig::init panics for p = {rust_float(layer.p)} "
                "(its range is [0, 1)): no layer"
            )
            self.layers[layer.name] = None

    def declare(self, t) -> None:
        r, dims = len(t.shape), _dims(t.shape)
        data = f"TensorData::new({rust_f32_list(t.value or [])}, {dims})"
        f32 = self.dtype == "f32"
        if t.kind == "buffer":
            v = self.new_var(t.name)
            make = f"Tensor::<{r}>::from_data({data}, &dev)" if f32 else f"tensor_in::<{r}>({data}, dtype, &dev)"
            self.body.append(f"    let {v} = {make};")
            self.cur[t.name] = v
            self.bind(t.name, ("tensor", r))
            return
        if t.kind == "param":
            expr = f"Param::<Tensor<{r}>>::from_data({data}, &dev)" if f32 else f"param_in::<{r}>({data}, dtype, &dev)"
        elif t.init == "uniform":
            expr = f"uniform_param({dims}, {t.seed or 0}, dtype, &dev)"
        elif t.init == "program_rng":
            if not self.seeded:  # as the probe's session does once per program, before any draw
                self.body += [
                    f"    dev.seed({PROGRAM_SEED});  // the program's one generator, per backend",
                    f"    {_DEVICES['alt']}.seed({PROGRAM_SEED});",
                ]
                self.seeded = True
            expr = f"program_rng_param({dims}, dtype, &dev)"
        elif f32:
            expr = f"Initializer::Constant {{ value: {rust_f32(rust_float(t.fill or 0.0))} as f64 }}.init::<{r}, _>({dims}, &dev)"
        else:
            expr = f"const_param({dims}, {rust_f32(rust_float(t.fill or 0.0))}, dtype, &dev)"
        self.body.append(f"    model.p{r}.push({expr});")
        self.params.append((t.name, r, self.counts[r], list(t.grad) if t.grad is not None else [1.0] * t.numel))
        self.bind(t.name, ("model", r, self.counts[r]))
        self.counts[r] += 1

    # -- op emitters -----------------------------------------------------------------------------

    def snapshot(self, op: dict) -> None:
        of, m, name = op["of"], op["method"], op["name"]
        if m not in _TENSOR_METHODS and m not in ("alias", "state_dict", "save_load"):
            self.body.append(f"    // {visible(m)}: not translated")
            self.slots.setdefault(name, None)
            return
        s, v = self.slots[of], self.new_var(name)
        if s[0] == "stat":
            self._snapshot_stat(of, m, v)
            self.bind(name, ("tensor", _snapshot_rank(m, 1)))
        elif m == "alias":
            self.body.append(f"    let {v} = {self.ref(of)}.clone();  // a second handle on the same value")
            self.bind(name, ("param", s[1]) if s[0] in ("model", "param") else ("tensor", s[1]))
        elif m in ("state_dict", "save_load"):
            self.body.append(f"    let {v} = {self._record(of, m)};")
            self.bind(name, ("param", s[1]))
        else:
            rank = _snapshot_rank(m, s[1])
            self.body.append(f"    let {v} = {_TENSOR_METHODS[m].format(t=self.value(of), r=rank)};")
            self.bind(name, ("tensor", rank))
        self.cur[name] = v

    def _snapshot_stat(self, of: str, m: str, v: str) -> None:
        """A snapshot of a running statistic: of its ``value()``, or its entry in the record (or
        file) of the module it lives in, read out of the loaded layer (the probe's
        ``snapshot_stat``)."""
        if m not in ("state_dict", "save_load"):
            expr = "{t}" if m == "alias" else _TENSOR_METHODS[m]
            self.body.append(f"    let {v} = {expr.format(t=self.value(of), r=_snapshot_rank(m, 1))};")
            return
        _, owner, i, stat = self.slots[of]
        if owner == "model":
            module, at = "model.clone()", f"bn[{i}]"
        else:  # a module clone's layer: a one-layer model
            module, at = f"Model {{ bn: vec![{owner}.bn[{i}].clone()], ..Model::empty() }}", "bn[0]"
        if m == "state_dict":
            read = f'record_round_trip({module}).expect("state_dict")'
        else:
            read = f'save_and_load({module}, &checkpoints.next().expect("checkpoint"), &dev, dtype).expect("save_load")'
        self.body.append(f"    let {v} = {read}.{at}.{stat}.value();")

    def _record(self, of: str, method: str) -> str:
        """The param read back from the module ``of`` lives in, through its record or a checkpoint
        file: the model itself, or a one-param model for a Param bound outside it (as the probe's
        ``module_of``)."""
        s = self.slots[of]
        r = s[1]
        if s[0] == "model":
            module, at = "model.clone()", f"p{r}[{s[2]}]"
        else:
            fields = {k: f"vec![{self.cur[of]}.clone()]" if k == r else "vec![]" for k in (1, 2, 3)}
            module, at = f"Model {{ p1: {fields[1]}, p2: {fields[2]}, p3: {fields[3]}, ..Model::empty() }}", f"p{r}[0]"
        if method == "state_dict":
            return f'record_round_trip({module}).expect("state_dict").{at}.clone()'
        return f'save_and_load({module}, &checkpoints.next().expect("checkpoint"), &dev, dtype).expect("save_load").{at}.clone()'

    def edit(self, op: dict) -> None:
        fn = "edit_tensor" if self.slots[op["target"]][0] == "tensor" else "edit_param"
        self.rebind(op["target"], lambda v: f"{fn}({v}, &{_edit(op)})")

    def assign(self, op: dict) -> None:
        """The source's value first (the probe's ``assign``: taken before the target is consumed),
        then ``assign_tensor`` / ``assign_param`` into the target."""
        source = op["source"]
        value = self.value(source)
        src = self.new_var(f"{source}_value")
        j = op.get("source_index")
        self.body.append(
            f"    let {src} = {value}.unsqueeze();" if j is None else f"    let {src} = row_of({value}, {j});"
        )
        index = "None" if op.get("index") is None else f"Some({op['index']})"
        fn = "assign_tensor" if self.slots[op["target"]][0] == "tensor" else "assign_param"
        self.rebind(op["target"], lambda v: f"{fn}({v}, {index}, {src})")

    def replace(self, op: dict) -> None:
        """The value first (the probe's ``replace``), then ``Param::from_tensor`` (a new ParamId)
        or ``Param::map`` (the id kept) in the param's slot."""
        value = op["value"]
        if op["how"] == "tie":  # the same Param (same ParamId) in a second field
            self.rebind(op["target"], lambda v: f"{{ let _ = {v}; {self.ref(value)}.clone() }}")
            return
        src = self.new_var(f"{value}_value")
        self.body.append(f"    let {src} = {self.value(value)};")
        if op["how"] == "new":
            self.rebind(op["target"], lambda v: f"{{ let _ = {v}; Param::from_tensor({src}) }}")
        else:
            self.rebind(op["target"], lambda v: f"{v}.map(|_| {src})")

    def append(self, op: dict) -> None:
        """The source's value first (the probe's ``append``), then ``cat_rows``, or the name's
        ``RowCache`` (its first cache append starts one with the name's rows); the name is a
        tensor from then on."""
        source = op["source"]
        tgt, t = op["target"], self.slots[op["target"]]
        src = self.new_var(f"{source}_value")
        self.body.append(f"    let {src} = {self.value(source)}.unsqueeze();  // a row gets a leading 1")
        cur = self.value(tgt) if t[0] == "stat" else self.cur[tgt] + (".val()" if t[0] == "param" else "")
        cache, v = f"{ident(tgt)}_cache", self.new_var(tgt)
        if op["how"] == "cat":
            self.caches.discard(tgt)
            self.body.append(f"    let {v} = cat_rows({cur}, {src});")
        else:
            if tgt not in self.caches:
                self.caches.add(tgt)
                self.body += [
                    f"    let mut {cache} = RowCache::new(&{cur}, {ops.CACHE_ROWS});",
                    f"    let _ = {cache}.append({cur});",
                ]
            self.body.append(f"    let {v} = {cache}.append({src});")
        self.cur[tgt] = v
        self.bind(tgt, ("tensor", 1 if t[0] == "stat" else t[1]))

    def _remade(self, tgt: str) -> str:
        """The target of ``map`` / ``add`` moved out of its variable (a param's ``into_value()``,
        a statistic's ``value()``), as the probe's ``consume`` moves it."""
        t = self.slots[tgt]
        self.caches.discard(tgt)
        return self.value(tgt) if t[0] == "stat" else self.cur[tgt] + (".into_value()" if t[0] == "param" else "")

    def _bind_remade(self, tgt: str, call: str) -> None:
        t, v = self.slots[tgt], self.new_var(tgt)
        self.body.append(f"    let {v} = {call};")
        self.cur[tgt] = v
        self.bind(tgt, ("tensor", 1 if t[0] == "stat" else t[1]))

    def map_op(self, op: dict) -> None:
        self._bind_remade(op["target"], _MAP_CALLS[op["fn"]].format(t=self._remade(op["target"])))

    def add_op(self, op: dict) -> None:
        # The other value first, as the probe takes it: `x = x + x` reads a second handle.
        other = self.new_var(f"{op['other']}_value")
        self.body.append(f"    let {other} = {self.value(op['other'])}.unsqueeze();  // a row gets a leading 1")
        self._bind_remade(op["target"], f"add_in_mode({self._remade(op['target'])}, {other})")

    def step(self, op: dict) -> None:
        """loss = the sum of ``loss_term`` over the model's params; backward; the optimizer's step."""
        var = self.optimizer(op, "make_optimizer", _OPTIMIZER_ARGS)
        self.body += ["    {", *self._backward_lines()]
        if self.accumulating:  # this pass accumulated into the backward ops' (as the probe steps)
            self.body += [
                "        let mut acc = _acc;",
                "        acc.accumulate(&model, gp);",
                "        let gp = acc.grads();",
            ]
            self.accumulating = False
        self.body += [f"        model = {var}.step({rust_float(step_fields(op)['lr'])}, model, gp);", "    }"]

    def _backward_lines(self) -> list[str]:
        terms = [f"loss_term(&model.p{r}[{idx}], &{rust_f32_list(g)}, &dev)" for _, r, idx, g in self.params]
        return [
            f"        let loss = {' + '.join(terms) or 'unreachable!()'};",
            "        let gp = GradientsParams::from_grads(loss.backward(), &model);",
        ]

    def backward(self, op: dict) -> None:
        """A ``GradientsAccumulator`` (keyed by ParamId) given this pass's gradients."""
        start = "_acc" if self.accumulating else "burn::optim::GradientsAccumulator::<Model>::new()"
        self.body += [
            "    let _acc = {",
            f"        let mut acc = {start};",
            *self._backward_lines(),
            "        acc.accumulate(&model, gp);",
            "        acc",
            "    };",
        ]
        self.accumulating = True

    def set_lr(self, op: dict) -> None:
        """A burn optimizer holds no learning rate: the next step passes the new one (and one not
        made yet has no state, so the step that names it makes it)."""
        self.body.append(
            f"    // set_lr: burn's Optimizer::step takes the learning rate; from here on {rust_float(op['to'])}"
        )
        if self.has_optimizer(op):
            self.refile_optimizer(op)

    def save(self, op: dict) -> None:
        """The record or file, and its entries read by loading it into a model (as the probe)."""
        c = ident(op["name"])
        if op["to"] == "memory":
            self.body += [
                f"    let {c}_record = model.clone().into_record();",
                f'    let {c}_read = read_record(model.clone(), {c}_record.clone()).expect("load_record");',
            ]
        else:
            self.body += [
                f'    let {c}_path = checkpoints.next().expect("checkpoint");',
                f'    let {c}_read = save_and_load(model.clone(), &{c}_path, &dev, dtype).expect("save_file");',
            ]
        self.checkpoints[op["name"]] = op["to"]
        for pname, r, idx, _ in self.params:
            n = f"{op['name']}.{pname}"
            self.cur[n] = v = self.new_var(n)
            self.body.append(f"    let {v} = {c}_read.p{r}[{idx}].clone();")
            self.bind(n, ("param", r))
        for layer, i in self.bn_names:  # what the checkpoint holds: values read out of it
            for stat in _STATS:
                n = f"{op['name']}.{layer}.{stat}"
                self.cur[n] = v = self.new_var(n)
                self.body.append(f"    let {v} = {c}_read.bn[{i}].{stat}.value();")
                self.bind(n, ("tensor", 1))

    def load(self, op: dict) -> None:
        c = ident(op["from"])
        if self.checkpoints.get(op["from"]) == "memory":
            self.body.append(f"    model = model.load_record({c}_record.clone());")
        else:
            self.body.append(f"    model = model.load_file(&{c}_path);")

    def move(self, op: dict) -> None:
        call = "to_device" if op["method"] == "to" else "fork"
        self.rebind(op["target"], lambda v: f"Module::{call}({v}, &{_DEVICES[op['device']]})")

    def module_clone(self, op: dict) -> None:
        mv = self.new_var(op["name"])
        self.body.append(f"    let {mv} = model.clone();")
        for pname, r, idx, _ in self.params:
            n = f"{op['name']}.{pname}"
            self.cur[n] = v = self.new_var(n)
            self.body.append(f"    let {v} = {mv}.p{r}[{idx}].clone();")
            self.bind(n, ("param", r))
        for layer, i in self.bn_names:  # the clone's layers: their running states are the model's
            for stat in _STATS:
                self.bind(f"{op['name']}.{layer}.{stat}", ("stat", mv, i, stat))

    def forward(self, op: dict) -> None:
        """``layer.forward(x.clone())`` on the model's layer (burn picks the mode: batch.rs,
        dropout.rs)."""
        field, i = self.layers[op["layer"]]
        v = self.new_var(op["name"])
        self.body.append(f"    let {v} = model.{field}[{i}].forward({self.value(op['input'])});")
        self.cur[op["name"]] = v
        s = self.slots[op["input"]]
        self.bind(op["name"], ("tensor", 1 if s[0] == "stat" else s[1]))

    def mode(self, op: dict) -> None:
        self.body.append(f"    model = model.{op['op']}();")

    def read(self, op: dict) -> None:
        s = self.slots[op["target"]]
        if s[0] == "stat":
            self.body.append(f"    let _ = {self.value(op['target'])}.to_data();")
            return
        self.body.append(f"    let _ = {self.ref(op['target'])}{'.val()' if s[0] != 'tensor' else ''}.to_data();")

    EMITTERS = {
        "snapshot": snapshot,
        "write": edit,
        "assign": assign,
        "fill": edit,
        "scale": edit,
        "step": step,
        "move": move,
        "module_clone": module_clone,
        "valid": mode,
        "train": mode,
        "no_grad": mode,
        "freeze": mode,
        "backward": backward,
        "forward": forward,
        "read": read,
        "set_lr": set_lr,
        "save": save,
        "load": load,
        "replace": replace,
        "append": append,
        "map": map_op,
        "add": add_op,
    }

    def bound(self, name: str) -> bool:
        return self.slots.get(name) is not None

    def untranslatable(self, op: dict) -> tuple[str, str] | None:
        """Also a record of a plain tensor (which the probe answers ``unsupported``)."""
        if (why := super().untranslatable(op)) is not None:
            return why
        if (
            op["op"] == "snapshot"
            and op["method"] in ("state_dict", "save_load")
            and self.slots[op["of"]][0] == "tensor"
        ):
            return "unsupported", "burn records hold module params only, not a plain tensor"
        if op["op"] in ops.WRITE_OPS and self.slots[ops.written(op)][0] == "stat":
            return "unsupported", _NO_STAT_WRITE
        if op["op"] == "forward" and self.layers.get(op["layer"]) is None:
            return "unsupported", "DropoutConfig::init panics for p outside [0, 1): no layer to run"
        return None

    def not_run(self, op: dict) -> None:
        if op["op"] == "snapshot":
            self.slots.setdefault(op["name"], None)
        elif op["op"] == "save":
            for pname, _, _, _ in self.params:
                self.slots.setdefault(f"{op['name']}.{pname}", None)
            for layer, _ in self.bn_names:
                for stat in _STATS:
                    self.slots.setdefault(f"{op['name']}.{layer}.{stat}", None)
        elif op["op"] == "forward":
            self.slots.setdefault(op["name"], None)


#: What the burn probe's transcript (``rust_probes/burn_probe/src/session.rs``) is wrapped in: the
#: model type it pushes params and layers into, and the print helper. Every burn call is the
#: transcript's. The probe gives a transcript only where it spelled every call of the program (not
#: yet ``save``, ``load``, the ``state_dict`` / ``save_load`` snapshots, batch norms outside f32,
#: an op whose call failed on a value it consumed); ``burn_main`` writes the others with the
#: writer below until every call is spelled.
SCAFFOLD = Scaffold(
    framework="burn",
    probe="burn_probe",
    device="flex",
    uses=(
        "use burn::module::{Module, Param, ParamId, RunningState};",
        "use burn::nn::{BatchNorm, BatchNormConfig, Dropout, DropoutConfig, Initializer};",
        "use burn::optim::decay::WeightDecayConfig;",
        "use burn::optim::momentum::MomentumConfig;",
        "use burn::optim::{AdamConfig, AdamWConfig, GradientsAccumulator, GradientsParams, Optimizer, SgdConfig};",
        "use burn::tensor::{DType, Device, Distribution, FloatDType, Shape, Tensor, TensorData};",
    ),
    helpers=(
        "/// The program's model: its params by rank, in program order within each rank, and its layers",
        "/// by kind. Buffers stay outside it (a plain `Tensor` field is a module constant, which burn",
        "/// neither records nor trains).",
        "#[derive(Module, Debug, Default)]",
        "struct Model {",
        "    p1: Vec<Param<Tensor<1>>>,",
        "    p2: Vec<Param<Tensor<2>>>,",
        "    p3: Vec<Param<Tensor<3>>>,",
        "    bn: Vec<BatchNorm>,",
        "    dropout: Vec<Dropout>,",
        "}",
        "",
        "/// What `show` reads: a tensor's values, row-major, read to the host; `None` for a lazy param",
        "/// not yet initialised (reading it would initialise it).",
        "trait Shown {",
        "    fn read(&self) -> Option<Result<Vec<f32>, String>>;",
        "}",
        "",
        "impl<const D: usize> Shown for Tensor<D> {",
        "    fn read(&self) -> Option<Result<Vec<f32>, String>> {",
        '        Some(self.to_data().try_to_vec_as::<f32>().map_err(|e| format!("to_data: {e:?}")))',
        "    }",
        "}",
        "",
        "impl<const D: usize> Shown for Param<Tensor<D>> {",
        "    fn read(&self) -> Option<Result<Vec<f32>, String>> {",
        "        if self.is_initialized() { self.val().read() } else { None }",
        "    }",
        "}",
        "",
        "impl Shown for RunningState<Tensor<1>> {",
        "    fn read(&self) -> Option<Result<Vec<f32>, String>> {",
        "        self.value().read()",
        "    }",
        "}",
        "",
        "/// A name whose value a failed call consumed (moved into it): nothing is left to read.",
        "struct Lost;",
        "",
        "impl Shown for Lost {",
        "    fn read(&self) -> Option<Result<Vec<f32>, String>> {",
        '        Some(Err("consumed by a call that failed".into()))',
        "    }",
        "}",
        "",
        "impl<T: Shown> Shown for &T {",
        "    fn read(&self) -> Option<Result<Vec<f32>, String>> {",
        "        (*self).read()",
        "    }",
        "}",
        "",
        "/// The values a check compares (none for an uninitialised lazy param: a check never forces one).",
        "fn values(t: &impl Shown) -> Vec<f32> {",
        "    t.read().and_then(Result::ok).unwrap_or_default()",
        "}",
        "",
        "/// Prints `label: name = [values]`.",
        "fn show(label: &str, name: &str, t: &impl Shown) {",
        "    match t.read() {",
        '        None => println!("{label}: {name} = uninitialized"),',
        '        Some(Ok(v)) => println!("{label}: {name} = {v:?}"),',
        '        Some(Err(e)) => println!("{label}: {name} = unreadable ({e})"),',
        "    }",
        "}",
    ),
    result="Result<(), Box<dyn std::error::Error>>",
    errors="panic",
    # The model is read only by programs with params or layers; the dtype only by conversions.
    set_up=(("model", r"let mut model = "), ("dtype", r"let dtype = ")),
    unread_lets=r"let (?P<var>\w+_grad\d*) = ",
)


def burn_main(program: Program, repro: dict | None = None, check: Check | None = None) -> str:
    """``src/main.rs`` of ``program``: the burn probe's transcript of it where the probe spelled
    every call the program makes (``rust_main``), else the writer's translation, for which
    ``repro`` (the finding's repro JSON) says which ops burn ran; ``check``: what says whether the
    finding's divergence shows (exit 1 when it does)."""
    try:
        if transcribed(SCAFFOLD, program):
            return rust_main(SCAFFOLD, program, check)
    except SetupError:  # no probe to ask: the writer needs none
        pass
    prelude = [
        *_MAIN[1:3],
        f"    let dtype = {_FLOAT_DTYPES[program.dtype]};  // the case's dtype: every tensor's",
        *_MAIN[3:],
    ]
    body = main_body(program, repro, lambda: _Writer(program.dtype), prelude, check)
    head = main_head("burn", "CPU flex backend with autodiff", program.title or "case")
    checks = CHECK_VALUES if check is not None else []
    return "\n".join([*head, *_USES, _MAIN[0], *body, *check_tail(check), "}", *checks, ""])
