//! One program on one device: names bound to burn values, the model that owns the params and
//! the layers, and the optimizers. Every op is the burn call a user writes; the table is in
//! README.md.

use crate::support::{cpu_device, placeholder, Checkpoints, Edit, Model};
use crate::vals::{
    add_val, assign_val, cat_val, edit_val, make, map_val, move_val, obs_param, observe_val, read_val, replace_val, KvCache,
    MoveKind, Val,
};
use aliasfuzz_protocol::{
    panic_message, AppendHow, DeviceRole, Dtype, MoveMethod, Obs, Op, Outcome, Program, ReplaceHow, Session, TensorKind,
    PROGRAM_SEED,
};
use burn::module::Module;
use burn::nn::BatchNorm;
use burn::optim::{GradientsAccumulator, ModuleOptimizer};
use burn::store::ModuleRecord;
use burn::tensor::{Device, FloatDType};
use std::collections::{HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

enum Slot {
    /// A param owned by the model, at (rank, index).
    Model(usize, usize),
    /// A value bound outside the model: a buffer or a snapshot.
    Own(Val),
    /// A running statistic of the model's batch norm `model.bn[i]`, read from it when used.
    ModelStat(usize, Stat),
    /// A running statistic of a batch norm outside the model (a module clone's layer, sharing
    /// burn's running states with the model's as the clone does), read from it when used.
    LayerStat(Box<BatchNorm>, Stat),
    /// The value was moved into a burn call that panicked: burn consumed it, nothing to observe.
    Lost(String),
}

struct ModelParam {
    name: String,
    rank: usize,
    idx: usize,
    grad: Vec<f32>,
}

pub struct BurnSession {
    home: Device,
    /// The program's dtype: every tensor it declares, every layer, every value an op makes.
    dtype: FloatDType,
    alt: Option<Device>,
    model: Model,
    params: Vec<ModelParam>,
    /// Model slots whose param was lost to a panicking call (a placeholder holds the slot).
    lost: HashSet<(usize, usize)>,
    order: Vec<String>,
    slots: HashMap<String, Slot>,
    optims: Vec<(String, ModuleOptimizer)>,
    /// The gradients `backward` ops accumulated since the last step (burn's GradientsAccumulator).
    accumulated: Option<GradientsAccumulator<Model>>,
    /// What each `save` kept, by checkpoint name.
    saved: HashMap<String, Saved>,
    /// Checkpoint files written by `save_load`, kept until the session ends (a param loaded by
    /// `load_file` reads the file on access).
    checkpoints: Checkpoints,
    /// The KV cache of each name a `cache` append grew (dropped by a `cat` append of the name).
    caches: HashMap<String, KvCache>,
    /// The case's layers, in its order (the model holds them by kind).
    layers: Vec<layers::ModelLayer>,
    /// Why the model's layers were lost to a panicking call, if they were.
    layers_lost: Option<String>,
}

mod layers;
mod snapshots;
mod training;
use layers::Stat;

/// What a `save` kept.
enum Saved {
    /// `model.clone().into_record()`.
    Record(ModuleRecord),
    /// The file `save_file` wrote.
    File(PathBuf),
}

impl BurnSession {
    pub fn new(home: Device, alt: Option<Device>, program: &Program) -> Result<Self, String> {
        let mut s = BurnSession {
            home,
            dtype: program_dtype(program),
            alt,
            model: Model::empty(),
            params: vec![],
            lost: HashSet::new(),
            order: vec![],
            slots: HashMap::new(),
            optims: vec![],
            accumulated: None,
            saved: HashMap::new(),
            checkpoints: Checkpoints::default(),
            caches: HashMap::new(),
            layers: vec![],
            layers_lost: None,
        };
        if program.uses_program_rng() {
            // burn's generator is one per backend (`Device::seed`): seed both devices a lazy
            // param may initialise on (a move retargets an uninitialised one; the CPU device of
            // a `move` is flex, which is always one of the two), once per program.
            s.home.seed(PROGRAM_SEED);
            if let Some(alt) = &s.alt {
                alt.seed(PROGRAM_SEED);
            }
        }
        for spec in &program.tensors {
            if s.slots.contains_key(&spec.name) {
                return Err(format!("tensor {:?} defined twice", spec.name));
            }
            let v = match spec.shape.len() {
                1 => make::<1>(spec, s.dtype, &s.home)?,
                2 => make::<2>(spec, s.dtype, &s.home)?,
                3 => make::<3>(spec, s.dtype, &s.home)?,
                r => return Err(format!("{}: rank {r} (burn probe supports 1 to 3)", spec.name)),
            };
            let slot = match spec.kind {
                TensorKind::Param | TensorKind::Lazy => {
                    let (rank, idx) = s.model.push(v)?;
                    s.params.push(ModelParam {
                        name: spec.name.clone(),
                        rank,
                        idx,
                        grad: spec.grad_or_ones(),
                    });
                    Slot::Model(rank, idx)
                }
                TensorKind::Buffer => Slot::Own(v),
            };
            s.bind(spec.name.clone(), slot);
        }
        for spec in &program.layers {
            s.add_layer(spec)?;
        }
        Ok(s)
    }

    fn bind(&mut self, name: String, slot: Slot) {
        if !self.slots.contains_key(&name) {
            self.order.push(name.clone());
        }
        self.slots.insert(name, slot);
    }

    /// A handle clone of the name's value (`Param::clone` / `Tensor::clone`).
    fn get(&self, name: &str) -> Result<Val, Outcome> {
        match self.slots.get(name) {
            Some(Slot::Model(r, i)) => Ok(self.model.get(*r, *i)),
            Some(Slot::Own(v)) => Ok(v.handle_clone()),
            Some(slot @ (Slot::ModelStat(..) | Slot::LayerStat(..))) => Ok(self.stat_value(slot).expect("a stat slot")),
            // Skipped, as an op whose input an unsupported or failed op never bound: the failed
            // call that consumed the value is the error, once.
            Some(Slot::Lost(m)) => Err(Outcome::Skipped(format!("{name} was lost earlier ({m})"))),
            None => Err(Outcome::Error(format!("no tensor named {name}"))),
        }
    }

    fn shape_of(&self, name: &str) -> Result<Vec<usize>, Outcome> {
        match self.slots.get(name) {
            Some(Slot::Model(r, i)) => Ok(match r {
                1 => self.model.p1[*i].lazy_shape().as_slice().to_vec(),
                2 => self.model.p2[*i].lazy_shape().as_slice().to_vec(),
                _ => self.model.p3[*i].lazy_shape().as_slice().to_vec(),
            }),
            Some(Slot::Own(v)) => Ok(v.shape()),
            _ => self.get(name).map(|v| v.shape()),
        }
    }

    /// Moves the name's value into `f` (so burn sees the handle as unique, as a user's
    /// `x = f(x)` does) and rebinds the name to the result. If `f` panics burn has consumed the
    /// value: the name becomes `Lost` and the op an error.
    fn consume(&mut self, name: &str, f: impl FnOnce(Val) -> Val) -> Outcome {
        let (holder, v) = match self.slots.remove(name) {
            Some(Slot::Model(r, i)) => (Some((r, i)), self.model.take(r, i)),
            Some(Slot::Own(v)) => (None, v),
            // A statistic's value (an append rebinds the name to a longer plain tensor; writes
            // are refused before this: `refuse_stat_write`).
            Some(slot @ (Slot::ModelStat(..) | Slot::LayerStat(..))) => {
                (None, self.stat_value(&slot).expect("a stat slot"))
            }
            Some(Slot::Lost(m)) => {
                let out = Outcome::Skipped(format!("{name} was lost earlier ({m})"));
                self.slots.insert(name.to_string(), Slot::Lost(m));
                return out;
            }
            None => return Outcome::Error(format!("no tensor named {name}")),
        };
        let result = catch_unwind(AssertUnwindSafe(|| f(v)));
        let (slot, outcome) = match (result, holder) {
            (Ok(v), Some((r, i))) => match self.model.put(r, i, v) {
                Ok(()) => (Slot::Model(r, i), Outcome::Ok),
                Err(e) => {
                    self.lost.insert((r, i));
                    (Slot::Lost(e.clone()), Outcome::Error(e))
                }
            },
            (Ok(v), None) => (Slot::Own(v), Outcome::Ok),
            (Err(p), holder) => {
                let msg = panic_message(p);
                if let Some(ri) = holder {
                    self.lost.insert(ri);
                }
                (Slot::Lost(format!("consumed by a call that failed: {msg}")), Outcome::Error(msg))
            }
        };
        self.slots.insert(name.to_string(), slot);
        outcome
    }

    /// Rebinds the model to `f(model)`; a panic loses every model param.
    fn model_op(&mut self, f: impl FnOnce(Model) -> Model) -> Outcome {
        let lens = (self.model.p1.len(), self.model.p2.len(), self.model.p3.len());
        let model = std::mem::replace(&mut self.model, Model::empty());
        match catch_unwind(AssertUnwindSafe(|| f(model))) {
            Ok(m) => {
                self.model = m;
                Outcome::Ok
            }
            Err(p) => {
                let msg = panic_message(p);
                self.lose_model(lens, &msg);
                Outcome::Error(msg)
            }
        }
    }

    fn lose_model(&mut self, lens: (usize, usize, usize), msg: &str) {
        let mut m = Model::empty();
        self.lose_layers(&mut m, msg);
        for _ in 0..lens.0 {
            m.push(Model::placeholder_val(1)).ok();
        }
        for _ in 0..lens.1 {
            m.push(Model::placeholder_val(2)).ok();
        }
        for _ in 0..lens.2 {
            m.push(Model::placeholder_val(3)).ok();
        }
        self.model = m;
        let names: Vec<String> = self
            .slots
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Model(..) | Slot::ModelStat(..)))
            .map(|(n, _)| n.clone())
            .collect();
        for n in names {
            if let Some(Slot::Model(r, i)) = self.slots.get(&n) {
                self.lost.insert((*r, *i));
            }
            self.slots.insert(n, Slot::Lost(format!("the model was consumed by a call that failed: {msg}")));
        }
    }

    fn edit(&mut self, target: &str, edit: Edit) -> Outcome {
        if let Some(o) = self.refuse_stat_write(target) {
            return o;
        }
        let shape = match self.shape_of(target) {
            Ok(s) => s,
            Err(o) => return o,
        };
        if let Err(e) = edit.check(&shape) {
            return Outcome::Error(format!("{e} (checked before calling burn)"));
        }
        self.consume(target, |v| edit_val(v, &edit))
    }

    /// `assign`: a handle to the source (taken before the target is consumed, so `source ==
    /// target` reads the target's own values), then `slice_assign` into the target.
    fn assign(&mut self, target: &str, source: &str, index: Option<usize>, source_index: Option<usize>) -> Outcome {
        if let Some(o) = self.refuse_stat_write(target) {
            return o;
        }
        let src = match self.get(source) {
            Ok(v) => v,
            Err(o) => return o,
        };
        self.consume(target, |v| assign_val(v, index, &src, source_index))
    }

    /// `replace`: the value taken first (so `value == target` reads the param itself), then the
    /// param's slot rebound to `Param::from_tensor(value)` (`new`: a new ParamId, burn#2428),
    /// `param.map(|_| value)` (`data`: the id kept) or the value's own Param (`tie`).
    fn replace(&mut self, target: &str, value: &str, how: ReplaceHow) -> Outcome {
        if how == ReplaceHow::Set {
            return Outcome::Unsupported(
                "burn has no storage rebinding (torch's set_): a burn tensor is a value; \
                 Param::map (`data`) and Param::from_tensor (`new`) are its two calls"
                    .into(),
            );
        }
        let src = match self.get(value) {
            Ok(v) => v,
            Err(o) => return o,
        };
        if how == ReplaceHow::Tie {
            // The same Param (same ParamId, one shared lazy state) in a second field.
            if !matches!(src, Val::P1(_) | Val::P2(_) | Val::P3(_)) {
                return Outcome::Unsupported(
                    "a burn param field holds a Param: a plain tensor there is a module constant, \
                     which burn neither records nor trains"
                        .into(),
                );
            }
            return self.consume(target, |_old| src);
        }
        self.consume(target, |v| replace_val(v, &src, how == ReplaceHow::Data))
    }

    /// `append`: `Tensor::cat`, or the name's KV cache (`vals::KvCache`), which its first cache
    /// append starts with the name's rows. The source is taken first (`source == target` reads
    /// the target's own values).
    fn append(&mut self, target: &str, source: &str, how: AppendHow) -> Outcome {
        let src = match self.get(source) {
            Ok(v) => v,
            Err(o) => return o,
        };
        if how == AppendHow::Cat {
            self.caches.remove(target);
            return self.consume(target, |v| cat_val(v, &src));
        }
        let mut cache = self.caches.remove(target);
        let out = self.consume(target, |v| {
            let cache = cache.get_or_insert_with(|| {
                let mut fresh = KvCache::for_rows_of(&v);
                fresh.append(&v);
                fresh
            });
            cache.append(&src)
        });
        if let (Outcome::Ok, Some(cache)) = (&out, cache) {
            self.caches.insert(target.to_string(), cache);
        }
        out
    }

    fn module_clone(&mut self, name: &str) -> Outcome {
        let clone = self.model.clone();
        let mut bound = vec![];
        for mp in &self.params {
            if self.lost.contains(&(mp.rank, mp.idx)) {
                continue;
            }
            bound.push((format!("{name}.{}", mp.name), clone.get(mp.rank, mp.idx)));
        }
        for (n, v) in bound {
            self.bind(n, Slot::Own(v));
        }
        // The clone's layers share the model's running states (burn's Clone of a RunningState
        // clones its Arc): bound live, read from the clone's layer.
        if self.layers_lost.is_none() {
            self.bind_stats(name, &clone, true);
        }
        Outcome::Ok
    }
}

/// The program's dtype as burn names it.
pub fn program_dtype(program: &Program) -> FloatDType {
    match program.dtype {
        Dtype::F32 => FloatDType::F32,
        Dtype::F16 => FloatDType::F16,
        Dtype::Bf16 => FloatDType::BF16,
    }
}

impl Model {
    fn placeholder_val(rank: usize) -> Val {
        match rank {
            1 => Val::P1(placeholder::<1>()),
            2 => Val::P2(placeholder::<2>()),
            _ => Val::P3(placeholder::<3>()),
        }
    }
}

impl Session for BurnSession {
    fn apply(&mut self, op: &Op) -> Outcome {
        match op {
            Op::Snapshot { name, of, method } => self.snapshot(name, of, *method),
            Op::Write { target, index, value } => {
                self.edit(target, Edit::Write { index: *index, value: value.clone() })
            }
            Op::Fill { target, value } => self.edit(target, Edit::Fill(*value)),
            Op::Scale { target, factor } => self.edit(target, Edit::Scale(*factor)),
            Op::Assign { target, source, index, source_index } => self.assign(target, source, *index, *source_index),
            Op::Step { .. } => self.step(&op.optimizer_spec().expect("a step names an optimizer")),
            Op::Backward {} => self.backward(),
            Op::SetLr { to, .. } => self.set_lr(&op.optimizer_spec().expect("set_lr names an optimizer"), *to),
            Op::Save { name, to } => self.save(name, *to),
            Op::Load { from, assign } => self.load(from, *assign),
            Op::Replace { target, value, how } => self.replace(target, value, *how),
            Op::Append { target, source, how } => self.append(target, source, *how),
            Op::Map { target, func } => {
                self.caches.remove(target);
                self.consume(target, |v| map_val(v, *func))
            }
            Op::Add { target, other } => {
                let o = match self.get(other) {
                    Ok(v) => v,
                    Err(o) => return o,
                };
                self.caches.remove(target);
                self.consume(target, |v| add_val(v, &o))
            }
            Op::Move { target, device, method } => {
                let dev = match device {
                    DeviceRole::Home => self.home.clone(),
                    DeviceRole::Cpu => cpu_device(),
                    DeviceRole::Alt => match &self.alt {
                        Some(d) => d.clone(),
                        None => {
                            return Outcome::Unsupported("no second device for this target".into())
                        }
                    },
                };
                // Asked first, as for `via_bf16`: a device without the program's dtype (ndarray has
                // no bf16 or f16) cannot hold the tensor. Its `from_data_owned` panics on an
                // initialised param; a lazy one moved there panics at its first read, after which
                // the process hangs at the next read of it.
                if !dev.supports_dtype(self.dtype) {
                    return Outcome::Unsupported(format!(
                        "move: the {device:?} device has no {:?} (Device::supports_dtype)",
                        self.dtype
                    ));
                }
                let kind = match method {
                    MoveMethod::To => MoveKind::To,
                    MoveMethod::Fork => MoveKind::Fork,
                };
                self.consume(target, |v| move_val(v, kind, &dev))
            }
            Op::ModuleClone { name } => self.module_clone(name),
            Op::Forward { name, layer, input } => self.forward(name, layer, input),
            // Module mode changes rebind the model, as `model = model.valid()` does.
            Op::Valid {} => self.model_op(|m| m.valid()),
            Op::Train {} => self.model_op(|m| m.train()),
            Op::NoGrad {} => self.model_op(|m| m.no_grad()),
            Op::Freeze {} => self.model_op(|m| m.freeze()),
            Op::Read { target } => match self.get(target) {
                Ok(v) => {
                    read_val(&v);
                    Outcome::Ok
                }
                Err(o) => o,
            },
        }
    }

    fn names(&self) -> Vec<String> {
        self.order.clone()
    }

    fn observe(&mut self, name: &str) -> Obs {
        match self.slots.get(name) {
            Some(Slot::Model(r, i)) => match r {
                1 => obs_param(&self.model.p1[*i]),
                2 => obs_param(&self.model.p2[*i]),
                _ => obs_param(&self.model.p3[*i]),
            },
            Some(Slot::Own(v)) => observe_val(v),
            // Plain tensors: no ParamId to report (a RunningState's id is private in running.rs).
            Some(slot @ (Slot::ModelStat(..) | Slot::LayerStat(..))) => {
                observe_val(&self.stat_value(slot).expect("a stat slot"))
            }
            Some(Slot::Lost(m)) => Obs::unreadable(m.clone()),
            None => Obs::unreadable(format!("no tensor named {name}")),
        }
    }
}
