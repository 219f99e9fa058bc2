//! One program interpreted on candle: every op is the candle call a user writes, spelled once,
//! through [`call!`], which runs it and records it in the session's transcript with the case's
//! names as variables. The transcript is the candle reproducer (`harness/targets/rust_reproducer.py`
//! wraps it in a `main`), so what the probe ran and what a maintainer reads are one text.
//!
//! The transcript's scaffolding variables are `dev` (the device), `dt` (the program's dtype),
//! `varmap` (the model's `VarMap`), `train` (the flag every `forward_t` is given), `loss` and
//! `grads` (a step's loss and accumulated gradients); the reproducer's `main` and `show` use no
//! other names, and no case variable takes these ([`RESERVED`]).
//!
//! Dtype. Every tensor is made in the program's dtype `dt`: a param `Var::from_vec` in f32, else
//! `Var::from_tensor(&Tensor::from_vec(..)?.to_dtype(dt)?)`, a buffer the converted tensor, lazy
//! params and batch-norm statistics by the VarMap in `dt`; written values are converted to the
//! target's dtype (`slice_set`, `Var::set`, `mul` refuse two), a filled one is a scalar of it.
//! Observations report `t.dtype()`. `open` refuses a dtype a device cannot convert to (`main.rs`).
//!
//! Layers. A `batch_norm` is `candle_nn::batch_norm(features, BatchNormConfig { affine: false,
//! .. }, vb.pp(layer))` over the model's VarMap: its running statistics are the VarMap's Vars
//! `<layer>.running_mean` / `<layer>.running_var`, bound under those names; they have no gradient,
//! so an optimizer made over the VarMap's vars holds them but never steps them. A `dropout` is
//! `candle_nn::Dropout::new(p)` (see `session/layers.rs`).
//!
//! Handles. A name is bound either to a `Var` or to a `Tensor`, whichever type the user's
//! variable would have: params (and lazy params) are `Var`s; `alias`/`clone` of a `Var` stay a
//! `Var` (a user who writes `let s = w.clone()` on a `Var` gets a `Var`, sharing the same inner
//! `Tensor`, so the same id and storage); `state_dict` and `save_load` give the `Var` read from a
//! `VarMap`; every other method returns a `Tensor` (what the candle call returns, even when that
//! tensor is the Var's own tensor, as `to_device` to the same device and a `narrow` over the
//! whole first dimension are). The type matters for whole-tensor `write` and for `scale`, which
//! only a `Var` can do (`Var::set`). Where a call takes a `&Tensor`, a `Var` is spelled
//! `w.as_tensor()` and a `Tensor` `&s` (`CandleSession::t`).

use aliasfuzz_protocol::transcript::{f32_lit, f32_vec, f64_lit, shape_lit, str_lit};
use aliasfuzz_protocol::{
    Dtype, LazyInit, Method, Obs, Op, Outcome, Program, Refusal, Session, TensorKind, Transcript,
};
use candle_core::{DType, Device, DeviceLocation, IndexOp, Tensor, Var};
use candle_nn::kv_cache::Cache;
use candle_nn::{Init, VarMap};
use std::collections::HashMap;

/// Runs a candle expression over placeholders and gives `(R<T>, text)`
/// (`aliasfuzz_protocol::spell!`): `call!([t = tensor => spelling, ...] expression)`.
macro_rules! call {
    ($($body:tt)*) => {{
        let (result, text) = aliasfuzz_protocol::spell!(candle_core::Error; $($body)*);
        (result.map_err(|e| Outcome::Error(crate::session::msg(e))), text)
    }};
}

mod layers;
mod rebind;
mod training;

use layers::Layer;
use training::{Checkpoint, Opt};

/// Ops this probe interprets (some answer `unsupported` for some inputs: `scale` on a plain
/// tensor, `step` with `sgd_momentum`, `move` with `fork`, `forward` of a dropout with p = 1 in
/// training). `no_grad` and `freeze` are never supported and so are not listed.
pub const OPS: &[&str] = &[
    "snapshot",
    "write",
    "fill",
    "scale",
    "step",
    "backward",
    "backward_of",
    "set_lr",
    "move",
    "module_clone",
    "valid",
    "train",
    "read",
    "assign",
    "save",
    "load",
    "replace",
    "append",
    "forward",
    "map",
    "add",
];

/// Snapshot methods this probe interprets (`state_dict` and `save_load` for params and layer stats only).
/// `deepcopy` is never supported (candle has no such call) and so is not listed.
pub const METHODS: &[&str] = &[
    "alias",
    "clone",
    "detach",
    "copy",
    "mul1",
    "to_home",
    "to_cpu",
    "contiguous",
    "reshape",
    "view_row",
    "transpose",
    "state_dict",
    "to_host",
    "save_load",
    "expand",
    "permute",
    "flip",
    "narrow",
    "unsqueeze",
    "squeeze",
    "chunk",
    "select",
    "to_same_dtype",
    "via_bf16",
    "via_f32",
];

/// The variables of the transcript's scaffolding and of the reproducer's `main`: no case name's
/// variable takes one.
pub const RESERVED: &[&str] = &[
    "main",
    "show",
    "dev",
    "dt",
    "varmap",
    "train",
    "loss",
    "grads",
    "alt",
    "candle_core",
    "candle_nn",
    "half",
    "std",
    "Device",
    "DType",
    "IndexOp",
    "Tensor",
    "Var",
    "VarMap",
    "Init",
    "ModuleT",
    "Optimizer",
];

#[derive(Clone)]
enum Handle {
    Var(Var),
    Tensor(Tensor),
}

impl Handle {
    fn tensor(&self) -> &Tensor {
        match self {
            Handle::Var(v) => v.as_tensor(),
            Handle::Tensor(t) => t,
        }
    }
}

pub struct CandleSession {
    home: Device,
    /// The program's dtype: every tensor it declares, every layer's state.
    dtype: DType,
    alt: Option<Device>,
    /// The model: params and lazy params, keyed by their program name, and the layers' running
    /// statistics (`<layer>.running_mean`, ...).
    varmap: VarMap,
    /// Names of the model's params in program order (for `module_clone`).
    params: Vec<String>,
    /// Names of the layers' running statistics in layer order (after the params in `model_names`).
    stats: Vec<String>,
    /// The model's layers by name.
    layers: HashMap<String, Layer>,
    /// What `forward_t` is given: true at open, set by `valid` / `train`.
    train: bool,
    /// The gradient each param's loss term is multiplied by, and its variable.
    grads: HashMap<String, (Tensor, String)>,
    /// Bound names in creation order; rebinding keeps the position.
    order: Vec<String>,
    bound: HashMap<String, Handle>,
    /// The live optimizers, by the key of their hyper-parameters (`OptimizerSpec::key`), each
    /// with its variable.
    optimizers: HashMap<String, (Opt, String)>,
    /// The gradients `backward` ops accumulated since the last step (the transcript's `grads`).
    pending: Option<candle_core::backprop::GradStore>,
    /// Checkpoints taken by `save`, by name.
    checkpoints: HashMap<String, Checkpoint>,
    /// Where `save` to a file writes, made at the first such save and removed with the session.
    checkpoint_dir: Option<tempfile::TempDir>,
    /// The KV cache of each name a `cache` append grew (dropped by a `cat` append of the name),
    /// with its variable.
    caches: HashMap<String, (Cache, String)>,
    /// The calls made so far.
    tx: Transcript,
    /// Whether the transcript has opened the second device (`alt`).
    alt_spelled: bool,
    /// The names whose variable is a reference (an `alias`: `let s = &w;`).
    borrowed: std::collections::HashSet<String>,
}

/// A candle error as a one-line message (without the captured backtrace, if any).
pub fn msg(e: candle_core::Error) -> String {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => msg(*inner),
        other => other.to_string(),
    }
}

fn device_name(d: &Device) -> String {
    match d.location() {
        DeviceLocation::Cpu => "cpu".into(),
        DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}

/// How the transcript makes a device: the reproducer runs on the CPU, a probe on any of them.
fn device_spelling(d: &Device) -> String {
    match d.location() {
        DeviceLocation::Cpu => "Device::Cpu".into(),
        DeviceLocation::Cuda { gpu_id } => format!("Device::new_cuda({gpu_id})?"),
        DeviceLocation::Metal { gpu_id } => format!("Device::new_metal({gpu_id})?"),
    }
}

type R<T> = Result<T, Outcome>;

/// What an outcome that is not `Ok` says.
fn outcome_text(o: Outcome) -> String {
    match o {
        Outcome::Ok => "ok".into(),
        Outcome::Error(m) | Outcome::Unsupported(m) | Outcome::Skipped(m) => m,
    }
}

pub fn candle_dtype(dtype: Dtype) -> DType {
    match dtype {
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::Bf16 => DType::BF16,
    }
}

/// The tensor's values, row-major, read to the host and widened to f32 (`to_vec1::<f32>` refuses
/// another dtype; f32 holds every f16 and bf16 value exactly).
pub fn values(t: &Tensor) -> candle_core::Result<Vec<f32>> {
    t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()
}

impl CandleSession {
    /// Opens a session over `program`'s tensors and layers, each made by a spelled call (the
    /// transcript's prologue). `seed`: the program's one generator is seeded first (`main.rs`).
    pub fn open(home: Device, alt: Option<Device>, program: &Program, seed: Option<u64>) -> Result<Self, Refusal> {
        let dtype = candle_dtype(program.dtype);
        let mut s = CandleSession {
            home,
            dtype,
            alt,
            varmap: VarMap::new(),
            params: vec![],
            stats: vec![],
            layers: HashMap::new(),
            train: true,
            grads: HashMap::new(),
            order: vec![],
            bound: HashMap::new(),
            optimizers: HashMap::new(),
            pending: None,
            checkpoints: HashMap::new(),
            checkpoint_dir: None,
            caches: HashMap::new(),
            tx: Transcript::new(RESERVED),
            alt_spelled: false,
            borrowed: Default::default(),
        };
        s.tx.line(format!("let dev = {};", device_spelling(&s.home)));
        s.tx.line(format!(
            "let dt = DType::{dtype:?};  // the program's dtype: every tensor's"
        ));
        s.tx.line("let mut varmap = VarMap::new();");
        if let Some(seed) = seed {
            // One generator seeded once per program; the CPU backend refuses to be seeded
            // ("cannot seed the CPU rng with set_seed"), so its draws cannot be reproduced.
            let (r, text) = call!([dev = &s.home => "&dev", seed = seed => seed.to_string()] dev.set_seed(seed)?);
            s.tx.line(format!("{text};"));
            if let Err(Outcome::Error(e)) = r {
                return Err(Refusal::Unsupported(format!("init program_rng: Device::set_seed: {e}")));
            }
        }
        for spec in &program.tensors {
            let name = spec.name.clone();
            if s.bound.contains_key(&name) {
                return Err(format!("duplicate tensor name {name:?}").into());
            }
            let ctx = |e: Outcome| Refusal::Error(format!("creating {name:?}: {}", outcome_text(e)));
            let v = s.tx.var(&name);
            let (dev, dt) = (s.home.clone(), s.dtype);
            let handle = match spec.kind {
                TensorKind::Param => {
                    let value = spec
                        .value
                        .clone()
                        .ok_or_else(|| format!("param {name:?} has no value"))?;
                    let (values, shape) = (value.clone(), spec.shape.clone());
                    // In another dtype, a Var of the converted tensor (`make_var` copies it).
                    let (var, text) = if dtype == DType::F32 {
                        call!([values = values => f32_vec(&value), shape = shape => shape_lit(&spec.shape), dev = &dev => "&dev"]
                            Var::from_vec(values, shape, dev)?)
                    } else {
                        call!([values = values => f32_vec(&value), shape = shape => shape_lit(&spec.shape), dev = &dev => "&dev", dt = dt => "dt"]
                            Var::from_tensor(&Tensor::from_vec(values, shape, dev)?.to_dtype(dt)?)?)
                    };
                    s.tx.line(format!("let {v} = {text};"));
                    let var = var.map_err(ctx)?;
                    s.insert_var(&name, &var, &v).map_err(ctx)?;
                    Handle::Var(var)
                }
                TensorKind::Buffer => {
                    let value = spec
                        .value
                        .clone()
                        .ok_or_else(|| format!("buffer {name:?} has no value"))?;
                    let (t, text) = s.new_tensor(&value, &spec.shape);
                    s.tx.line(format!("let {v} = {text};"));
                    Handle::Tensor(t.map_err(ctx)?)
                }
                TensorKind::Lazy => {
                    // Created now (candle has no lazy parameters) and reported initialised.
                    let init = match spec.init.unwrap_or(LazyInit::Const) {
                        LazyInit::Const => format!("Init::Const({})", f64_lit(spec.fill.unwrap_or(0.0) as f64)),
                        LazyInit::Uniform => {
                            if let Some(seed) = spec.seed {
                                // The CPU backend refuses to be seeded ("cannot seed the CPU rng
                                // with set_seed", cpu_backend/mod.rs): CPU values are then not
                                // reproducible, which the oracle allows (it never compares the
                                // values of uniform tensors).
                                let (_, text) =
                                    call!([dev = &dev => "&dev", seed = seed => seed.to_string()] dev.set_seed(seed)?);
                                s.tx.line(format!(
                                    "let _ = (|| -> candle_core::Result<()> {{ {text}; Ok(()) }})();"
                                ));
                            }
                            "Init::Uniform { lo: -1.0, up: 1.0 }".to_string()
                        }
                        // From the generator `open` seeded once for the program.
                        LazyInit::ProgramRng => "Init::Uniform { lo: -1.0, up: 1.0 }".to_string(),
                    };
                    let init_value = match spec.init.unwrap_or(LazyInit::Const) {
                        LazyInit::Const => Init::Const(spec.fill.unwrap_or(0.0) as f64),
                        _ => Init::Uniform { lo: -1.0, up: 1.0 },
                    };
                    let shape = spec.shape.clone();
                    // `VarMap::get` makes the Var in the map and gives its tensor; the Var is
                    // then read back from the map, as `VarBuilder::get_with_hints` leaves it.
                    let (r, text) = call!([varmap = &s.varmap => "&varmap", shape = shape => shape_lit(&spec.shape),
                        key = name.as_str() => str_lit(&name), init = init_value => init, dt = dt => "dt", dev = &dev => "&dev"]
                        varmap.get(shape, key, init, dt, dev)?);
                    s.tx.line(format!("{text};"));
                    r.map_err(ctx)?;
                    let var = s.model_var_line(&name, &v).map_err(ctx)?;
                    Handle::Var(var)
                }
            };
            if spec.kind != TensorKind::Buffer {
                let grad = spec.grad_or_ones();
                if grad.len() != spec.numel() {
                    return Err(
                        format!("grad of {name:?} has {} values for shape {:?}", grad.len(), spec.shape).into(),
                    );
                }
                let g = s.tx.helper(&format!("{v}_grad"));
                let (t, text) = s.new_tensor(&grad, &spec.shape);
                s.tx.line(format!("let {g} = {text};"));
                s.grads.insert(name.clone(), (t.map_err(ctx)?, g));
                s.params.push(name.clone());
            }
            s.bind(name, handle);
        }
        for spec in &program.layers {
            s.add_layer(spec)?;
        }
        Ok(s)
    }

    /// A new tensor of `values` in `shape` on the home device, in the program's dtype.
    fn new_tensor(&self, values: &[f32], shape: &[usize]) -> (R<Tensor>, String) {
        let (v, sh, dev, dt) = (values.to_vec(), shape.to_vec(), &self.home, self.dtype);
        if dt == DType::F32 {
            call!([values = v => f32_vec(values), shape = sh => shape_lit(shape), dev = dev => "&dev"]
                Tensor::from_vec(values, shape, dev)?)
        } else {
            call!([values = v => f32_vec(values), shape = sh => shape_lit(shape), dev = dev => "&dev", dt = dt => "dt"]
                Tensor::from_vec(values, shape, dev)?.to_dtype(dt)?)
        }
    }

    /// Puts `var` (the transcript's `spelled`) in the model's VarMap under `key`, as a user
    /// building a model does.
    fn insert_var(&mut self, key: &str, var: &Var, spelled: &str) -> R<()> {
        let (r, text) = call!([varmap = &self.varmap => "&varmap", key = key => str_lit(key), w = var => spelled]
            varmap.data().lock().unwrap().insert(key.to_string(), w.clone()));
        self.tx.line(format!("{text};"));
        r.map(|_| ())
    }

    /// `let v = varmap.data().lock().unwrap()["name"].clone();`: the Var the VarMap holds
    /// under `name` (the same Var, not a copy), bound to the variable `v`.
    fn model_var_line(&mut self, name: &str, v: &str) -> R<Var> {
        let (r, text) = call!([varmap = &self.varmap => "&varmap", key = name => str_lit(name)]
            varmap.data().lock().unwrap()[key].clone());
        self.tx.line(format!("let {v} = {text};"));
        r
    }

    /// What a prefix (`module_clone`, `save`) binds under it: the params in program order, then
    /// the layers' running statistics.
    fn model_names(&self) -> Vec<String> {
        self.params.iter().chain(&self.stats).cloned().collect()
    }

    /// Binds `name` to `handle`, the value of its variable (no longer a reference: `Method::Alias`
    /// marks one after binding it).
    fn bind(&mut self, name: String, handle: Handle) {
        self.tx.var(&name);
        self.borrowed.remove(&name);
        if self.bound.insert(name.clone(), handle).is_none() {
            self.order.push(name);
        }
    }

    fn get(&self, name: &str) -> R<Handle> {
        // The driver skips ops whose names do not exist; this is only a safety net.
        self.bound
            .get(name)
            .cloned()
            .ok_or_else(|| Outcome::Error(format!("no tensor {name:?}")))
    }

    /// How the transcript spells `name`'s tensor where a `&Tensor` goes.
    fn t(&mut self, name: &str) -> String {
        let var = self.tx.var(name);
        match self.bound.get(name) {
            Some(Handle::Var(_)) => format!("{var}.as_tensor()"),
            _ if self.borrowed.contains(name) => var,
            _ => format!("&{var}"),
        }
    }

    fn model_var(&self, name: &str, method: &str) -> R<Var> {
        self.varmap.data().lock().unwrap().get(name).cloned().ok_or_else(|| {
            Outcome::Unsupported(format!(
                "{method}: {name:?} is not in the VarMap (only params and layer stats are; buffers \
                 and snapshots are plain tensors a candle model does not hold)"
            ))
        })
    }

    /// Records `let <name> = <text>;` and binds `name` to what the call gave.
    fn let_bind(&mut self, name: &str, spelled: (R<Handle>, String)) -> R<()> {
        let var = self.tx.var(name);
        self.tx.line(format!("let {var} = {};", spelled.1));
        let h = spelled.0?;
        self.bind(name.to_string(), h);
        Ok(())
    }

    /// Records the statement `<text>;` and gives what the call gave.
    fn stmt<T>(&mut self, spelled: (R<T>, String)) -> R<T> {
        self.tx.line(format!("{};", spelled.1));
        spelled.0
    }

    fn snapshot(&mut self, name: &str, of: &str, method: Method) -> R<()> {
        let src = self.get(of)?;
        let t = src.tensor().clone();
        let ts = self.t(of);
        let tensor = |r: (R<Tensor>, String)| (r.0.map(Handle::Tensor), r.1);
        let spelled = match method {
            // `let s = &w;`: the very same handle.
            // (The probe holds the handle twice; the reproducer borrows it: `let s = &w;`, or the
            // same reference again when `w` is one.)
            Method::Alias => {
                let v = self.tx.var(of);
                let spelled = if self.borrowed.contains(of) { v } else { format!("&{v}") };
                self.let_bind(name, (Ok(src.clone()), spelled))?;
                self.borrowed.insert(name.to_string());
                return Ok(());
            }
            // `w.clone()`: a Var stays a Var (Var derives Clone over its Arc'd Tensor).
            Method::Clone => match &src {
                Handle::Var(var) => {
                    let v = self.tx.var(of);
                    let (r, text) = call!([w = var => v] w.clone());
                    (r.map(Handle::Var), text)
                }
                Handle::Tensor(_) => tensor(call!([t = &t => ts] t.clone())),
            },
            Method::Detach => tensor(call!([t = &t => ts] t.detach())),
            Method::Copy => tensor(call!([t = &t => ts] t.copy()?)),
            Method::Mul1 => tensor(call!([t = &t => ts] (t * 1.0)?)),
            Method::ToHome => tensor(call!([t = &t => ts] t.to_device(t.device())?)),
            Method::ToCpu => tensor(call!([t = &t => ts] t.to_device(&Device::Cpu)?)),
            Method::Contiguous => tensor(call!([t = &t => ts] t.contiguous()?)),
            Method::Reshape => tensor(call!([t = &t => ts] t.reshape(t.elem_count())?)),
            Method::ViewRow => tensor(call!([t = &t => ts] t.narrow(0, 0, 1)?)),
            Method::Transpose => tensor(call!([t = &t => ts] t.t()?)),
            // The model's container read without copying: the Var the VarMap holds under the
            // name (after a `move` of the name, still the original Var).
            Method::StateDict => {
                self.model_var(of, "state_dict")?;
                let (r, text) = call!([varmap = &self.varmap => "&varmap", key = of => str_lit(of)]
                    varmap.data().lock().unwrap()[key].clone());
                (r.map(Handle::Var), text)
            }
            Method::Deepcopy => {
                return Err(Outcome::Unsupported(
                    "candle has no deep-copy call (Tensor::clone and Var::clone share storage; \
                     Tensor::copy is the `copy` method)"
                        .into(),
                ))
            }
            Method::Data => {
                return Err(Outcome::Unsupported(
                    "candle has no `.data` (a tensor over the same storage outside autograd; \
                     Tensor::detach is the `detach` method)"
                        .into(),
                ))
            }
            // The values read to host memory and a new tensor made from them on the tensor's
            // device, in its shape and dtype (read widened to f32, exact for f16 and bf16).
            Method::ToHost => tensor(call!([t = &t => ts]
                Tensor::new(t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?, t.device())?
                    .reshape(t.shape())?
                    .to_dtype(t.dtype())?)),
            // tensor.rs `to_dtype`: `if self.dtype() == dtype { Ok(self.clone()) }`, one storage.
            Method::ToSameDtype => tensor(call!([t = &t => ts, dt = self.dtype => "dt"] t.to_dtype(dt)?)),
            Method::ViaBf16 => {
                tensor(call!([t = &t => ts, dt = self.dtype => "dt"] t.to_dtype(DType::BF16)?.to_dtype(dt)?))
            }
            Method::ViaF32 => {
                tensor(call!([t = &t => ts, dt = self.dtype => "dt"] t.to_dtype(DType::F32)?.to_dtype(dt)?))
            }
            Method::SaveLoad => return self.save_load(name, of),
            // The shape-derived views (issue #16): each the one candle call a user writes. Every
            // one but `flip` is a new layout over the source's storage (candle-core 0.11.1
            // tensor.rs `broadcast_as`, `permute`, `squeeze`, `unsqueeze`, `narrow`); `flip` is
            // `index_select` along each dim, a new storage.
            Method::Expand => {
                // A new first dimension of 2 (`expand` is `broadcast_as`: stride 0).
                let shape: Vec<usize> = std::iter::once(2).chain(t.dims().iter().copied()).collect();
                let spelled = shape_lit(&shape);
                tensor(call!([t = &t => ts, shape = shape => spelled] t.unsqueeze(0)?.expand(shape)?))
            }
            // The dimensions rotated left; the case validator sends rank 3 only.
            Method::Permute => tensor(call!([t = &t => ts] t.permute((1, 2, 0))?)),
            Method::Flip => tensor(call!([t = &t => ts] t.flip(&[0])?)),
            Method::Narrow => tensor(call!([t = &t => ts] t.narrow(0, 1, t.dim(0)? - 1)?)),
            Method::Unsqueeze => tensor(call!([t = &t => ts] t.unsqueeze(0)?)),
            Method::Squeeze => tensor(call!([t = &t => ts] t.squeeze(0)?)),
            // `Tensor::chunk`: the first chunk has ceil(rows / 2) rows, as torch's.
            Method::Chunk => tensor(call!([t = &t => ts] t.chunk(2, 0)?.remove(0))),
            // Row 0 as candle's indexing takes it (`IndexOp::i`, indexer.rs: `narrow` then
            // `squeeze`); `Tensor::get` would `reshape`, which copies a strided row.
            Method::Select => tensor(call!([t = &t => ts] t.i(0)?)),
        };
        self.let_bind(name, spelled)
    }

    /// `VarMap::save` of the model, then `VarMap::load` into a fresh VarMap, whose Var for `of`
    /// is bound to `name`. `load` only fills variables already in the map (var_map.rs: "values
    /// for variables that are currently not in the map are not kept"), so the fresh map is first
    /// given the model's structure with `VarMap::get(.., Init::Const(0.), ..)`, as a user
    /// rebuilding the model through a `VarBuilder` would. Its Vars are new (new ids, own storage).
    fn save_load(&mut self, name: &str, of: &str) -> R<()> {
        self.model_var(of, "save_load")?;
        let dir = tempfile::tempdir().map_err(|e| Outcome::Error(format!("tempdir: {e}")))?;
        let path = self.tx.helper("path");
        let (file, text) = call!([dir = dir.path() => "std::env::temp_dir()"]
            dir.join(format!("aliasfuzz-repro-{}-model.safetensors", std::process::id())));
        self.tx.line(format!("let {path} = {text};"));
        let file = file?;
        let fresh_var = self.tx.helper("fresh");
        self.stmt(call!([varmap = &self.varmap => "&varmap", path = &file => format!("&{path}")] varmap.save(path)?))?;
        let (fresh, text) = call!([varmap = &self.varmap => "&varmap", path = &file => format!("&{path}")] {
            let mut fresh = VarMap::new();
            for (k, v) in varmap.data().lock().unwrap().iter() {
                fresh.get(v.shape(), k, Init::Const(0.0), v.dtype(), v.device())?;
            }
            fresh.load(path)?;
            fresh
        });
        self.tx.line(format!("let {fresh_var} = {text};"));
        let fresh = fresh?;
        let (r, text) = call!([fresh = &fresh => fresh_var.clone(), key = of => str_lit(of)]
            fresh.data().lock().unwrap()[key].clone());
        self.let_bind(name, (r.map(Handle::Var), text))
    }

    fn write(&mut self, target: &str, index: Option<usize>, value: &[f32]) -> R<()> {
        let h = self.get(target)?;
        let t = h.tensor().clone();
        let ts = self.t(target);
        let values = value.to_vec();
        let lit = f32_vec(value);
        // In the tensor's dtype: `slice_set` and `Var::set` refuse a source of another dtype.
        let same = t.dtype() == DType::F32;
        match index {
            Some(i) => {
                let mut row = t.dims().to_vec();
                if row.is_empty() {
                    return Err(Outcome::Error("write: a rank-0 tensor has no rows".into()));
                }
                row[0] = 1;
                let shape = shape_lit(&row);
                let spelled = if same {
                    call!([t = &t => ts, values = values => lit, row = row => shape, i = i => i.to_string()]
                        t.slice_set(&Tensor::from_vec(values, row, t.device())?, 0, i)?)
                } else {
                    call!([t = &t => ts, values = values => lit, row = row => shape, i = i => i.to_string()]
                        t.slice_set(&Tensor::from_vec(values, row, t.device())?.to_dtype(t.dtype())?, 0, i)?)
                };
                self.stmt(spelled)
            }
            None => {
                let shape = shape_lit(t.dims());
                let dims = t.dims().to_vec();
                let spelled = match (&h, same) {
                    (Handle::Var(var), true) => {
                        let v = self.tx.var(target);
                        call!([w = var => v, values = values => lit, dims = dims => shape]
                            w.set(&Tensor::from_vec(values, dims, w.device())?)?)
                    }
                    (Handle::Var(var), false) => {
                        let v = self.tx.var(target);
                        call!([w = var => v, values = values => lit, dims = dims => shape]
                            w.set(&Tensor::from_vec(values, dims, w.device())?.to_dtype(w.dtype())?)?)
                    }
                    (Handle::Tensor(_), true) => call!([t = &t => ts, values = values => lit, dims = dims => shape]
                        t.slice_set(&Tensor::from_vec(values, dims, t.device())?, 0, 0)?),
                    (Handle::Tensor(_), false) => call!([t = &t => ts, values = values => lit, dims = dims => shape]
                        t.slice_set(&Tensor::from_vec(values, dims, t.device())?.to_dtype(t.dtype())?, 0, 0)?),
                };
                self.stmt(spelled)
            }
        }
    }

    /// `t.const_set(scalar)`: a `Scalar` of the tensor's own dtype (`const_set` refuses another,
    /// "const_set dtype mismatch"), as a candle user writes it (`half::bf16::from_f32`).
    fn fill(&mut self, target: &str, value: f32) -> R<()> {
        let t = self.get(target)?.tensor().clone();
        let ts = self.t(target);
        let x = f32_lit(value);
        let spelled = match t.dtype() {
            DType::BF16 => call!([t = &t => ts, x = value => x] t.const_set(half::bf16::from_f32(x).into())?),
            DType::F16 => call!([t = &t => ts, x = value => x] t.const_set(half::f16::from_f32(x).into())?),
            _ => call!([t = &t => ts, x = value => x] t.const_set(x.into())?),
        };
        self.stmt(spelled)
    }

    /// `assign`: a whole-tensor copy into a `Var` is `Var::set` (what a candle user calls on a
    /// parameter), anything else `slice_set` into the tensor's storage, of the source with a
    /// leading dimension of 1 at row `index`. `slice_set` refuses a non-contiguous source and a
    /// source over the target's own storage (candle#2733). A `source_index` j takes row j as a
    /// view, as `src.i(j)` does (`Tensor::get` would copy a strided row, hiding what
    /// `slice_set` does with a view).
    fn assign(&mut self, target: &str, source: &str, index: Option<usize>, source_index: Option<usize>) -> R<()> {
        let src = self.get(source)?.tensor().clone();
        let ss = self.t(source);
        let h = self.get(target)?;
        let t = h.tensor().clone();
        let ts = self.t(target);
        let spelled = match (&h, index, source_index) {
            (Handle::Var(var), None, None) => {
                let v = self.tx.var(target);
                call!([w = var => v, src = &src => ss] w.set(src)?)
            }
            (Handle::Var(var), None, Some(j)) => {
                let v = self.tx.var(target);
                call!([w = var => v, src = &src => ss, j = j => j.to_string()] w.set(&src.narrow(0, j, 1)?.squeeze(0)?)?)
            }
            (_, None, None) => call!([t = &t => ts, src = &src => ss] t.slice_set(src, 0, 0)?),
            (_, None, Some(j)) => call!([t = &t => ts, src = &src => ss, j = j => j.to_string()]
                t.slice_set(&src.narrow(0, j, 1)?.squeeze(0)?, 0, 0)?),
            (_, Some(i), None) => call!([t = &t => ts, src = &src => ss, i = i => i.to_string()]
                t.slice_set(&src.unsqueeze(0)?, 0, i)?),
            (_, Some(i), Some(j)) => {
                call!([t = &t => ts, src = &src => ss, i = i => i.to_string(), j = j => j.to_string()]
                t.slice_set(&src.narrow(0, j, 1)?.squeeze(0)?.unsqueeze(0)?, 0, i)?)
            }
        };
        self.stmt(spelled)
    }

    fn apply_inner(&mut self, op: &Op) -> R<()> {
        match op {
            Op::Snapshot { name, of, method } => self.snapshot(name, of, *method),
            Op::Write { target, index, value } => self.write(target, *index, value),
            Op::Fill { target, value } => self.fill(target, *value),
            Op::Scale { target, factor } => match self.get(target)? {
                Handle::Var(var) => {
                    let v = self.tx.var(target);
                    let f = f64_lit(*factor as f64);
                    self.stmt(call!([w = &var => v, f = *factor as f64 => f] w.set(&(w.as_tensor() * f)?)?))
                }
                Handle::Tensor(_) => Err(Outcome::Unsupported(
                    "candle has no public in-place multiply for a plain Tensor (tensors are \
                     immutable by design; only Var::set writes a product back)"
                        .into(),
                )),
            },
            Op::Step { .. } => self.step(&op.optimizer_spec().expect("a step names an optimizer")),
            Op::Backward {} => self.backward(),
            Op::BackwardOf { of } => self.backward_of(of),
            Op::SetLr { to, .. } => self.set_lr(&op.optimizer_spec().expect("set_lr names an optimizer"), *to),
            Op::Save { name, to } => self.save(name, *to),
            Op::Load { from, assign } => self.load(from, *assign),
            Op::Replace { target, value, how } => self.replace(target, value, *how),
            Op::Append { target, source, how } => self.append(target, source, *how),
            Op::Map { target, func } => self.map(target, *func),
            Op::Add { target, other } => self.add(target, other),
            Op::Move { target, device, method } => self.move_to(target, *device, *method),
            Op::ModuleClone { name } => self.module_clone(name),
            // candle has no module modes: `train` is the argument a candle user passes to
            // `ModuleT::forward_t` (candle-core/src/lib.rs); switching it does nothing else.
            Op::Valid {} => {
                self.train = false;
                self.tx.line("let train = false;");
                Ok(())
            }
            Op::Train {} => {
                self.train = true;
                self.tx.line("let train = true;");
                Ok(())
            }
            Op::Forward { name, layer, input } => self.forward(name, layer, input),
            Op::NoGrad {} | Op::Freeze {} => Err(Outcome::Unsupported(
                "candle has no requires-grad switch: a Var is always tracked; a user detaches \
                 or leaves it out of the optimizer"
                    .into(),
            )),
            Op::Read { target } => {
                let t = self.get(target)?.tensor().clone();
                let ts = self.t(target);
                let (r, text) = call!([t = &t => ts] t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?);
                self.tx.line(format!("let _ = {text};"));
                r.map(|_| ())
            }
            Op::Assign {
                target,
                source,
                index,
                source_index,
            } => self.assign(target, source, *index, *source_index),
        }
    }

    /// The nearest a candle user has to cloning a whole model: clone what the VarMap holds
    /// (`varmap.data().lock().unwrap().clone()`, a HashMap<String, Var>). Cloning a candle model
    /// struct (`Linear` etc. derive Clone) or `VarMap::clone` (Arc) or `all_vars()` gives the
    /// same Vars: Arc clones sharing the params' storage and ids.
    fn module_clone(&mut self, name: &str) -> R<()> {
        let prefix = self.tx.var(name);
        let map = self.tx.helper(&format!("{prefix}_vars"));
        let (cloned, text) = call!([varmap = &self.varmap => "&varmap"] varmap.data().lock().unwrap().clone());
        self.tx.line(format!("let {map} = {text};"));
        let cloned = cloned?;
        for p in self.model_names() {
            if cloned.contains_key(&p) {
                let (r, text) = call!([map = &cloned => map.clone(), key = p.as_str() => str_lit(&p)] map[key].clone());
                self.let_bind(&format!("{name}.{p}"), (r.map(Handle::Var), text))?;
            }
        }
        Ok(())
    }
}

impl Session for CandleSession {
    fn apply(&mut self, op: &Op) -> Outcome {
        match self.apply_inner(op) {
            Ok(()) => Outcome::Ok,
            Err(o) => o,
        }
    }

    fn names(&self) -> Vec<String> {
        self.order.clone()
    }

    fn observe(&mut self, name: &str) -> Obs {
        let Some(h) = self.bound.get(name) else {
            return Obs::unreadable(format!("no tensor {name:?}"));
        };
        let t = h.tensor();
        let (value, note) = match values(t) {
            Ok(v) => (Some(v), None),
            Err(e) => (None, Some(format!("read failed: {}", msg(e)))),
        };
        Obs {
            shape: t.dims().to_vec(),
            value,
            device: device_name(t.device()),
            requires_grad: Some(t.is_variable()),
            // A Var's id is its inner tensor's id.
            identity: Some(format!("{:?}", t.id())),
            initialized: true,
            dtype: Some(t.dtype().as_str().to_string()),
            note,
        }
    }

    fn begin_op(&mut self) {
        self.tx.begin_op();
    }

    fn transcript(&self) -> Option<serde_json::Value> {
        Some(self.tx.to_json())
    }
}
