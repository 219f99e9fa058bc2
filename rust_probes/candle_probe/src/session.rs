//! One program interpreted on candle: every op maps onto the call a candle user writes.
//!
//! | op / method   | candle call                                                               |
//! |---------------|---------------------------------------------------------------------------|
//! | alias         | the same handle (`let s = &w`): same `Var`/`Tensor`, same id              |
//! | clone         | `Var::clone` on a param (a `Var`), `Tensor::clone` otherwise (Arc clone)  |
//! | detach        | `Tensor::detach()`                                                        |
//! | copy          | `Tensor::copy()?`                                                         |
//! | mul1          | `(&t * 1.0)?` (affine)                                                    |
//! | to_home       | `t.to_device(t.device())?` (a shallow clone on the same device)           |
//! | to_cpu        | `t.to_device(&Device::Cpu)?`                                              |
//! | contiguous    | `t.contiguous()?`                                                         |
//! | reshape       | `t.reshape(t.elem_count())?`                                              |
//! | view_row      | `t.narrow(0, 0, 1)?`                                                      |
//! | transpose     | `t.t()?`                                                                  |
//! | state_dict    | the `Var` under that name in `VarMap::data()` (params, layer stats)       |
//! | deepcopy      | unsupported: candle has no deep-copy call                                 |
//! | to_host       | `Tensor::new(values(t)?, t.device())?.reshape(shape)?.to_dtype(t.dtype())?` |
//! | save_load     | `VarMap::save` + `VarMap::load` into a fresh VarMap (params, layer stats) |
//! | expand        | `t.unsqueeze(0)?.expand((2, dims..))?` (`broadcast_as`: stride 0)         |
//! | permute       | `t.permute((1, 2, 0))?`                                                   |
//! | flip          | `t.flip(&[0])?` (`index_select`: a new storage)                           |
//! | narrow        | `t.narrow(0, 1, rows - 1)?`                                               |
//! | unsqueeze     | `t.unsqueeze(0)?`                                                         |
//! | squeeze       | `t.squeeze(0)?`                                                           |
//! | chunk         | `t.chunk(2, 0)?[0]`                                                       |
//! | select        | `t.i(0)?` (`IndexOp`: `narrow(0, 0, 1)?.squeeze(0)?`)                    |
//! | to_same_dtype | `t.to_dtype(dt)?`, `dt` the program's dtype (`self.clone()`: the tensor's own) |
//! | via_bf16      | `t.to_dtype(DType::BF16)?.to_dtype(dt)?`                                  |
//! | via_f32       | `t.to_dtype(DType::F32)?.to_dtype(dt)?`                                   |
//! | write (row)   | `t.slice_set(&row, 0, index)?`, `row` of shape `[1, rest...]` in `t`'s dtype |
//! | write (whole) | `Var::set(&v)` on a `Var`; `t.slice_set(&v, 0, 0)?` on a plain tensor     |
//! | fill          | `t.const_set(scalar_in(t.dtype(), value)?)?` (a `Scalar` of `t`'s dtype)  |
//! | scale         | `var.set(&(var.as_tensor() * factor)?)` on a `Var`; plain tensor: unsupported |
//! | step          | `SGD` / `AdamW` (`adam` = AdamW with weight_decay 0), `backward_step`     |
//! | move          | rebinds the name to `t.to_device(&dev)?`; `fork`: unsupported             |
//! | module_clone  | a clone of the `VarMap::data()` map: `<name>.<p>` = the cloned `Var` (params, stats) |
//! | read          | `t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?`                |
//! | assign (whole)| `Var::set(&src)` on a `Var`; `t.slice_set(&src, 0, 0)?` on a plain tensor |
//! | assign (row)  | `t.slice_set(&src.unsqueeze(0)?, 0, index)?`                              |
//! | source_index  | `src.narrow(0, j, 1)?.squeeze(0)?` (a view of row j), then as above       |
//! | set_lr        | `opt.set_learning_rate(to)` on the live optimizer                         |
//! | save (memory) | a clone of the `VarMap::data()` map: the same `Var`s, under their names   |
//! | save (file)   | `VarMap::save(path)`; `<name>.<p>` = `candle_core::safetensors::load(path)` |
//! | load          | memory: `VarMap::set` of the map's tensors; file: `VarMap::load(path)`; `assign`: unsupported |
//! | replace (new) | `Var::from_tensor(&v)?` inserted in the VarMap under the name; `data`, `set`: unsupported |
//! | replace (tie) | the value's own `Var` inserted under the name (one Var, two keys); a plain tensor: unsupported |
//! | append (cat)  | `Tensor::cat(&[&t, &src], 0)?` (a row source `unsqueeze(0)`d)                |
//! | append (cache)| `candle_nn::kv_cache::Cache::new(0, CACHE_ROWS)`: `append(&src)?`, then `current_data()?` |
//! | map           | `t.neg()?`, `t.relu()?`, `(&t + 1.0)?`, `t.clamp(-1f32, 1f32)?`, bound to the name |
//! | add           | `t.add(&o)?` (same shape), `t.broadcast_add(&o)?` (a row), bound to the name |
//! | valid, train  | set the `train` flag `forward_t` is given (candle has no module modes)    |
//! | forward       | `layer.forward_t(&x, train)?` (`BatchNorm`, `Dropout`; dropout p = 1 in training: unsupported) |
//! | no_grad, freeze | unsupported (candle has no requires-grad switch)                        |
//!
//! Dtype. Every tensor is made in the program's dtype `dt`: a param `Var::from_vec` in f32, else
//! `Var::from_tensor(&Tensor::from_vec(..)?.to_dtype(dt)?)`, a buffer the converted tensor, lazy
//! params and batch-norm statistics by the VarMap in `dt`; written values and gradients are
//! converted to the target's dtype (`slice_set`, `Var::set`, `mul` refuse two). Observations
//! report `t.dtype()`. `open` refuses a dtype a device cannot convert to (see `main.rs`).
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
//! only a `Var` can do (`Var::set`).

use aliasfuzz_protocol::{
    Dtype, LazyInit, Method, Obs, Op, Outcome, Program, Session, TensorKind,
};
use crate::support::{
    assign_from, insert_var, lazy_var, save_and_load, scalar_in, tensor_in, through_host, values, var_of,
    write_row, Opt,
};
use candle_core::backprop::GradStore;
use candle_core::{DType, Device, DeviceLocation, Tensor, Var};
use candle_nn::kv_cache::Cache;
use candle_nn::{Init, VarMap};
use std::collections::HashMap;

/// Ops this probe interprets (some answer `unsupported` for some inputs: `scale` on a plain
/// tensor, `step` with `sgd_momentum`, `move` with `fork`, `forward` of a dropout with p = 1 in
/// training). `no_grad` and `freeze` are never supported and so are not listed.
pub const OPS: &[&str] = &[
    "snapshot", "write", "fill", "scale", "step", "backward", "set_lr", "move", "module_clone", "valid", "train",
    "read", "assign", "save", "load", "replace", "append", "forward", "map", "add",
];

/// Snapshot methods this probe interprets (`state_dict` and `save_load` for params and layer stats only).
/// `deepcopy` is never supported (candle has no such call) and so is not listed.
pub const METHODS: &[&str] = &[
    "alias", "clone", "detach", "copy", "mul1", "to_home", "to_cpu", "contiguous", "reshape",
    "view_row", "transpose", "state_dict", "to_host", "save_load", "expand", "permute", "flip", "narrow",
    "unsqueeze", "squeeze", "chunk", "select", "to_same_dtype", "via_bf16", "via_f32",
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
    /// The gradient `step` uses for each VarMap entry.
    grads: HashMap<String, Vec<f32>>,
    /// Bound names in creation order; rebinding keeps the position.
    order: Vec<String>,
    bound: HashMap<String, Handle>,
    /// The live optimizers, by the key of their hyper-parameters (`OptimizerSpec::key`).
    optimizers: HashMap<String, Opt>,
    /// The gradients `backward` ops accumulated since the last step (`support::add_grads`).
    pending: Option<GradStore>,
    /// Checkpoints taken by `save`, by name.
    checkpoints: HashMap<String, Checkpoint>,
    /// Where `save` to a file writes, made at the first such save and removed with the session.
    checkpoint_dir: Option<tempfile::TempDir>,
    /// The KV cache of each name a `cache` append grew (dropped by a `cat` append of the name).
    caches: HashMap<String, Cache>,
}

mod layers;
mod rebind;
mod training;
mod views;

use layers::Layer;

/// What a `save` kept.
enum Checkpoint {
    /// The VarMap's map as it was: the model's own `Var`s under their names.
    Memory(HashMap<String, Var>),
    /// The safetensors file `VarMap::save` wrote.
    File(std::path::PathBuf),
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

type R<T> = Result<T, Outcome>;

pub fn candle_dtype(dtype: Dtype) -> DType {
    match dtype {
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::Bf16 => DType::BF16,
    }
}

fn ce<T>(r: candle_core::Result<T>) -> R<T> {
    r.map_err(|e| Outcome::Error(msg(e)))
}

impl CandleSession {
    pub fn open(home: Device, alt: Option<Device>, program: &Program) -> Result<Self, String> {
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
        };
        for spec in &program.tensors {
            let name = spec.name.clone();
            if s.bound.contains_key(&name) {
                return Err(format!("duplicate tensor name {name:?}"));
            }
            let ctx = |e: candle_core::Error| format!("creating {name:?}: {}", msg(e));
            let shape = spec.shape.clone();
            let handle = match spec.kind {
                TensorKind::Param => {
                    let value =
                        spec.value.clone().ok_or_else(|| format!("param {name:?} has no value"))?;
                    // In another dtype, a Var of the converted tensor (`make_var` copies it).
                    let var = if dtype == DType::F32 {
                        Var::from_vec(value, shape, &s.home)
                    } else {
                        tensor_in(value, &shape, dtype, &s.home).and_then(|t| Var::from_tensor(&t))
                    }
                    .map_err(ctx)?;
                    insert_var(&s.varmap, &name, &var);
                    Handle::Var(var)
                }
                TensorKind::Buffer => {
                    let value =
                        spec.value.clone().ok_or_else(|| format!("buffer {name:?} has no value"))?;
                    Handle::Tensor(tensor_in(value, &shape, dtype, &s.home).map_err(ctx)?)
                }
                TensorKind::Lazy => {
                    // Created now (candle has no lazy parameters) and reported initialised.
                    let init = match spec.init.unwrap_or(LazyInit::Const) {
                        LazyInit::Const => Init::Const(spec.fill.unwrap_or(0.0) as f64),
                        LazyInit::Uniform => {
                            if let Some(seed) = spec.seed {
                                // The CPU backend refuses to be seeded ("cannot seed the CPU rng
                                // with set_seed", cpu_backend/mod.rs): CPU values are then not
                                // reproducible, which the oracle allows (it never compares the
                                // values of uniform tensors).
                                let _ = s.home.set_seed(seed);
                            }
                            Init::Uniform { lo: -1.0, up: 1.0 }
                        }
                        // From the generator `CandleProbe::open` seeded once for the program.
                        LazyInit::ProgramRng => Init::Uniform { lo: -1.0, up: 1.0 },
                    };
                    Handle::Var(lazy_var(&s.varmap, shape, &name, init, dtype, &s.home).map_err(ctx)?)
                }
            };
            if spec.kind != TensorKind::Buffer {
                let grad = spec.grad_or_ones();
                if grad.len() != spec.numel() {
                    return Err(format!(
                        "grad of {name:?} has {} values for shape {:?}",
                        grad.len(),
                        spec.shape
                    ));
                }
                s.grads.insert(name.clone(), grad);
                s.params.push(name.clone());
            }
            s.bind(name, handle);
        }
        for spec in &program.layers {
            s.add_layer(spec)?;
        }
        Ok(s)
    }

    /// What a prefix (`module_clone`, `save`) binds under it: the params in program order, then
    /// the layers' running statistics.
    fn model_names(&self) -> Vec<String> {
        self.params.iter().chain(&self.stats).cloned().collect()
    }

    fn bind(&mut self, name: String, handle: Handle) {
        if self.bound.insert(name.clone(), handle).is_none() {
            self.order.push(name);
        }
    }

    fn get(&self, name: &str) -> R<Handle> {
        // The driver skips ops whose names do not exist; this is only a safety net.
        self.bound.get(name).cloned().ok_or_else(|| Outcome::Error(format!("no tensor {name:?}")))
    }

    fn model_var(&self, name: &str, method: &str) -> R<Var> {
        var_of(&self.varmap, name).ok_or_else(|| {
            Outcome::Unsupported(format!(
                "{method}: {name:?} is not in the VarMap (only params and layer stats are; buffers \
                 and snapshots are plain tensors a candle model does not hold)"
            ))
        })
    }

    fn snapshot(&self, of: &str, method: Method) -> R<Handle> {
        let src = self.get(of)?;
        let t = src.tensor();
        Ok(match method {
            // `let s = &w;`: the very same handle.
            Method::Alias => src.clone(),
            // `w.clone()`: a Var stays a Var (Var derives Clone over its Arc'd Tensor).
            Method::Clone => match &src {
                Handle::Var(v) => Handle::Var(v.clone()),
                Handle::Tensor(t) => Handle::Tensor(t.clone()),
            },
            Method::Detach => Handle::Tensor(t.detach()),
            Method::Copy => Handle::Tensor(ce(t.copy())?),
            Method::Mul1 => Handle::Tensor(ce(t * 1.0)?),
            Method::ToHome => Handle::Tensor(ce(t.to_device(t.device()))?),
            Method::ToCpu => Handle::Tensor(ce(t.to_device(&Device::Cpu))?),
            Method::Contiguous => Handle::Tensor(ce(t.contiguous())?),
            Method::Reshape => Handle::Tensor(ce(t.reshape(t.elem_count()))?),
            Method::ViewRow => Handle::Tensor(ce(t.narrow(0, 0, 1))?),
            Method::Transpose => Handle::Tensor(ce(t.t())?),
            // The model's container read without copying: the Var the VarMap holds under the
            // name (after a `move` of the name, still the original Var).
            Method::StateDict => Handle::Var(self.model_var(of, "state_dict")?),
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
            Method::ToHost => Handle::Tensor(ce(through_host(t))?),
            // tensor.rs `to_dtype`: `if self.dtype() == dtype { Ok(self.clone()) }`, one storage.
            Method::ToSameDtype => Handle::Tensor(ce(t.to_dtype(self.dtype))?),
            Method::ViaBf16 => Handle::Tensor(ce(t.to_dtype(DType::BF16).and_then(|b| b.to_dtype(self.dtype)))?),
            Method::ViaF32 => Handle::Tensor(ce(t.to_dtype(DType::F32).and_then(|b| b.to_dtype(self.dtype)))?),
            Method::SaveLoad => Handle::Var(self.save_load(of)?),
            m @ (Method::Expand
            | Method::Permute
            | Method::Flip
            | Method::Narrow
            | Method::Unsqueeze
            | Method::Squeeze
            | Method::Chunk
            | Method::Select) => Handle::Tensor(ce(views::view(t, m))?),
        })
    }

    /// `VarMap::save` + `VarMap::load` into a fresh VarMap through a temporary safetensors file
    /// (support.rs `save_and_load`): the fresh map's Var for `of`, a new Var holding the saved
    /// values.
    fn save_load(&self, of: &str) -> R<Var> {
        self.model_var(of, "save_load")?;
        let dir = tempfile::tempdir().map_err(|e| Outcome::Error(format!("tempdir: {e}")))?;
        let fresh = ce(save_and_load(&self.varmap, &dir.path().join("model.safetensors")))?;
        let var = var_of(&fresh, of).expect("the fresh VarMap has the model's structure");
        Ok(var)
    }

    fn write(&self, target: &str, index: Option<usize>, value: &[f32]) -> R<()> {
        let h = self.get(target)?;
        let t = h.tensor();
        match index {
            Some(i) => ce(write_row(t, i, value)),
            None => {
                let whole = ce(tensor_in(value.to_vec(), t.dims(), t.dtype(), t.device()))?;
                match &h {
                    Handle::Var(v) => ce(v.set(&whole)),
                    Handle::Tensor(t) => ce(t.slice_set(&whole, 0, 0)),
                }
            }
        }
    }

    fn apply_inner(&mut self, op: &Op) -> R<()> {
        match op {
            Op::Snapshot { name, of, method } => {
                let h = self.snapshot(of, *method)?;
                self.bind(name.clone(), h);
                Ok(())
            }
            Op::Write { target, index, value } => self.write(target, *index, value),
            Op::Fill { target, value } => {
                let t = self.get(target)?.tensor().clone();
                ce(scalar_in(t.dtype(), *value).and_then(|v| t.const_set(v)))
            }
            Op::Scale { target, factor } => match self.get(target)? {
                Handle::Var(v) => ce((v.as_tensor() * *factor as f64).and_then(|p| v.set(&p))),
                Handle::Tensor(_) => Err(Outcome::Unsupported(
                    "candle has no public in-place multiply for a plain Tensor (tensors are \
                     immutable by design; only Var::set writes a product back)"
                        .into(),
                )),
            },
            Op::Step { .. } => self.step(&op.optimizer_spec().expect("a step names an optimizer")),
            Op::Backward {} => self.backward(),
            Op::SetLr { to, .. } => self.set_lr(&op.optimizer_spec().expect("set_lr names an optimizer"), *to),
            Op::Save { name, to } => self.save(name, *to),
            Op::Load { from, assign } => self.load(from, *assign),
            Op::Replace { target, value, how } => self.replace(target, value, *how),
            Op::Append { target, source, how } => self.append(target, source, *how),
            Op::Map { target, func } => self.map(target, *func),
            Op::Add { target, other } => self.add(target, other),
            Op::Move { target, device, method } => self.move_to(target, *device, *method),
            // The nearest a candle user has to cloning a whole model: clone what the VarMap holds
            // (`varmap.data().lock().unwrap().clone()`, a HashMap<String, Var>). Cloning a candle
            // model struct (`Linear` etc. derive Clone) or `VarMap::clone` (Arc) or
            // `all_vars()` gives the same Vars: Arc clones sharing the params' storage and ids.
            Op::ModuleClone { name } => {
                let cloned: HashMap<String, Var> = self.varmap.data().lock().unwrap().clone();
                for p in self.model_names() {
                    if let Some(v) = cloned.get(&p) {
                        self.bind(format!("{name}.{p}"), Handle::Var(v.clone()));
                    }
                }
                Ok(())
            }
            // candle has no module modes: `train` is the argument a candle user passes to
            // `ModuleT::forward_t` (candle-core/src/lib.rs); switching it does nothing else.
            Op::Valid {} => {
                self.train = false;
                Ok(())
            }
            Op::Train {} => {
                self.train = true;
                Ok(())
            }
            Op::Forward { name, layer, input } => self.forward(name, layer, input),
            Op::NoGrad {} | Op::Freeze {} => Err(Outcome::Unsupported(
                "candle has no requires-grad switch: a Var is always tracked; a user detaches \
                 or leaves it out of the optimizer"
                    .into(),
            )),
            Op::Read { target } => {
                ce(values(self.get(target)?.tensor())).map(|_| ())
            }
            // As `write`: a whole-tensor copy into a `Var` is `Var::set` (what a candle user
            // calls on a parameter), anything else `slice_set` into the tensor's storage.
            Op::Assign { target, source, index, source_index } => {
                let src = self.get(source)?.tensor().clone();
                let src = match source_index {
                    None => src,
                    // A view of row j, as `src.i(j)` takes it; `Tensor::get` would copy a
                    // strided row (its `reshape`), hiding what slice_set does with a view.
                    Some(j) => ce(src.narrow(0, *j, 1).and_then(|r| r.squeeze(0)))?,
                };
                match (self.get(target)?, index) {
                    (Handle::Var(v), None) => ce(v.set(&src)),
                    (h, _) => ce(assign_from(h.tensor(), *index, &src)),
                }
            }
        }
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
}
