//! One program on one device: names bound to burn values, the model that owns the params and
//! the layers, and the optimizers. Every op is the burn call a user writes; the table is in
//! README.md.
//!
//! Transcript. Each burn call is spelled once, through `call!`, which runs it and records it in
//! the session's transcript with the case's names as variables (`aliasfuzz_protocol::transcript`);
//! wrapped in a `main` (`harness/targets/rust_reproducer.py`, the scaffolding in
//! `harness/targets/burn/reproducer.py`), the transcript is the burn reproducer. Its variables:
//! `dev` (the device, with autodiff), `dtype` (the program's), `model` (the scaffolding's `Model`:
//! params by rank, layers by kind), `alt` (the second device), `loss`, `grads`, `accumulator`,
//! and one per optimizer (`sgd`, `adam`, ...). A name the model holds (a param, a batch norm's
//! running statistic) is a borrow of its slot (`let w = &model.p1[0];`), made again after every
//! call that rebinds the model or a slot; any other name is a variable of its own, rebound
//! (`let x: Tensor<2> = x.neg();`) where burn gives a new value. A checkpoint is read back by
//! loading it (`session/records.rs`). A call that failed on a value it consumed is the last line
//! of its op, which the reproducer runs apart; the transcript's `after_failure` lines then say
//! what the probe keeps: the name lost (`let w = Lost;`), a model param's slot held by a stand-in.
//! The ops not spelled yet (a module clone's statistic through a record, a model param given a
//! tensor) run through `model.rs` and `vals.rs` and leave the transcript incomplete:
//! `transcript()` then gives none.

use crate::model::{cpu_device, placeholder, Checkpoints, Model};
use crate::vals::IntoVal;
use crate::vals::{obs_param, observe_val, KvCache, Val};
use aliasfuzz_protocol::transcript::f32_vec;
use aliasfuzz_protocol::{
    panic_message, AppendHow, DeviceRole, Dtype, MoveMethod, Obs, Op, Outcome, Program, ReplaceHow, Session,
    TensorKind, Transcript, CACHE_ROWS, PROGRAM_SEED,
};
use burn::module::Module;
use burn::nn::BatchNorm;
use burn::optim::{GradientsAccumulator, ModuleOptimizer};
use burn::store::ModuleRecord;
use burn::tensor::{Device, FloatDType, Tensor, TensorData};
use std::collections::{HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

/// Runs a burn expression over placeholders and gives `(Result<T, Outcome>, text)`
/// (`aliasfuzz_protocol::spell!`): `call!([t = tensor => spelling, ...] expression)`. burn calls
/// panic rather than return errors, so the expression is spelled as a closure and run under
/// `catch_unwind`: the text exists before the call runs, and a panic is the op's error, as the
/// reproducer's `catch_unwind` around a failed op's last line makes it.
macro_rules! call {
    ([$($p:ident = $v:expr => $var:expr),* $(,)?] $e:expr) => {{
        let (run, text) = aliasfuzz_protocol::spell!(::std::convert::Infallible; [$($p = $v => $var),*] move || $e);
        let run = match run {
            Ok(run) => run,
            Err(never) => match never {},
        };
        let text = crate::session::spelling::without_closure(text);
        let result = ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(run))
            .map_err(|p| aliasfuzz_protocol::Outcome::Error(aliasfuzz_protocol::panic_message(p)));
        (result, text)
    }};
}

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
    /// The gradient the param's loss term is multiplied by, and its variable (`<name>_grad`).
    grad: TensorData,
    grad_var: String,
}

/// How the transcript makes the session's devices: `home` (`dev`) and the second device (`alt`).
pub struct DeviceSpelling {
    pub home: String,
    pub alt: Option<String>,
}

/// The variables of the transcript's scaffolding and of the reproducer's `main`: no case name's
/// variable takes one.
pub const RESERVED: &[&str] = &[
    "main",
    "show",
    "values",
    "dev",
    "dtype",
    "model",
    "alt",
    "loss",
    "grads",
    "accumulator",
    "burn",
    "std",
    "Model",
    "Device",
    "DType",
    "FloatDType",
    "Tensor",
    "TensorData",
    "Param",
    "ParamId",
    "Shape",
    "Module",
    "Initializer",
    "Distribution",
    "GradientsParams",
    "GradientsAccumulator",
    "Optimizer",
    "SgdConfig",
    "AdamConfig",
    "AdamWConfig",
    "MomentumConfig",
    "WeightDecayConfig",
    "BatchNormConfig",
    "DropoutConfig",
    "Shown",
    "Lost",
];

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
    /// The spelled KV cache of each name a `cache` append grew (dropped by a `cat` append, a
    /// `map` or an `add` of the name): its buffer, its variable and its filled rows.
    spelled_caches: HashMap<String, (Val, String, usize)>,
    /// A cache's buffer while it is being appended to.
    cache_buffers: HashMap<String, Val>,
    /// The calls made so far, with the case's names as variables.
    tx: Transcript,
    /// Whether every call so far is in the transcript: the ops this probe does not spell yet
    /// (records, checkpoints, layers, module clones, `replace`, `append`, `assign`) clear it, and
    /// an incomplete transcript is not given out.
    complete: bool,
    devices: DeviceSpelling,
    /// Whether the transcript has made the second device (`alt`).
    alt_spelled: bool,
    /// Whether the model moved into a call that failed (the probe holds a stand-in since).
    model_consumed: bool,
    /// The variable of each live optimizer, by its key, and whether the transcript's
    /// `accumulator` holds gradients.
    optim_vars: HashMap<String, String>,
}

mod layers;
mod make;
mod records;
mod snapshots;
pub(crate) mod spelling;
mod training;
use crate::on_val;
use crate::vals::source_tensor;
use layers::Stat;
use spelling::{erased, Edit, Spelled};

/// What a `save` kept.
enum Saved {
    /// `model.clone().into_record()`, and its variable.
    Record(ModuleRecord, String),
    /// The file `save_file` wrote, and the variable of its path.
    File(PathBuf, String),
}

impl BurnSession {
    pub fn new(home: Device, alt: Option<Device>, program: &Program, devices: DeviceSpelling) -> Result<Self, String> {
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
            spelled_caches: HashMap::new(),
            cache_buffers: HashMap::new(),
            tx: Transcript::new(RESERVED),
            complete: true,
            devices,
            alt_spelled: false,
            model_consumed: false,
            optim_vars: HashMap::new(),
        };
        s.tx.line(format!("let dev = {};", s.devices.home));
        let dtype_name = format!("{:?}", s.dtype).to_uppercase();
        s.tx.line(format!(
            "let dtype = FloatDType::{dtype_name};  // the program's dtype: every tensor's"
        ));
        s.tx.line("let mut model = Model::default();");
        if program.uses_program_rng() {
            // burn's generator is one per backend (`Device::seed`): seed both devices a lazy
            // param may initialise on (a move retargets an uninitialised one; the CPU device of
            // a `move` is flex, which is always one of the two), once per program.
            let (r, text) =
                call!([dev = &s.home => "&dev", seed = PROGRAM_SEED => PROGRAM_SEED.to_string()] dev.seed(seed));
            s.tx.line(format!("{text};"));
            r.map_err(|e| format!("seeding: {}", outcome_text(&e)))?;
            if let Some(alt) = s.alt.clone() {
                let spelled = s.alt_spelling().unwrap_or_default();
                let (r, text) =
                    call!([alt = &alt => spelled, seed = PROGRAM_SEED => PROGRAM_SEED.to_string()] alt.seed(seed));
                s.tx.line(format!("{text};"));
                r.map_err(|e| format!("seeding: {}", outcome_text(&e)))?;
            }
        }
        for spec in &program.tensors {
            if s.slots.contains_key(&spec.name) {
                return Err(format!("tensor {:?} defined twice", spec.name));
            }
            let var = s.tx.var(&spec.name);
            let (v, text) = match spec.shape.len() {
                1 => make::make::<1>(spec, s.dtype, &s.home)?,
                2 => make::make::<2>(spec, s.dtype, &s.home)?,
                3 => make::make::<3>(spec, s.dtype, &s.home)?,
                r => return Err(format!("{}: rank {r} (burn probe supports 1 to 3)", spec.name)),
            };
            let rank = spec.shape.len();
            let ctx = |e: Outcome| format!("creating {:?}: {}", spec.name, outcome_text(&e));
            let slot = match spec.kind {
                TensorKind::Param | TensorKind::Lazy => {
                    s.tx.line(format!("model.p{rank}.push({text});"));
                    let (rank, idx) = s.model.push(v.map_err(ctx)?)?;
                    let grad_var = s.tx.helper(&format!("{var}_grad"));
                    let (values, dims) = (spec.grad_or_ones(), spec.shape.clone());
                    let (grad, text) = call!([values = values.clone() => f32_vec(&values), dims = dims.clone() => spelling::dims_lit(&dims)]
                        TensorData::new(values, dims));
                    s.tx.line(format!("let {grad_var} = {text};"));
                    s.params.push(ModelParam {
                        name: spec.name.clone(),
                        rank,
                        idx,
                        grad: grad.map_err(ctx)?,
                        grad_var,
                    });
                    Slot::Model(rank, idx)
                }
                TensorKind::Buffer => {
                    s.tx.line(format!("let {var}: Tensor<{rank}> = {text};"));
                    Slot::Own(v.map_err(ctx)?)
                }
            };
            s.bind(spec.name.clone(), slot);
        }
        for spec in &program.layers {
            s.add_layer(spec)?;
        }
        s.reborrow();
        Ok(s)
    }

    /// How the transcript spells the second device, made on first use (`let alt = ...;`).
    fn alt_spelling(&mut self) -> Option<String> {
        let alt = self.devices.alt.clone()?;
        if !self.alt_spelled {
            // `Device::ndarray` is deprecated in burn 0.22 but still shipped: the alt CPU device.
            self.tx.line(format!("#[allow(deprecated)] let alt = {alt};"));
            self.alt_spelled = true;
        }
        Some("&alt".into())
    }

    /// `let w = &model.p1[0];` for every name the model holds: the model's params and its
    /// layers' running statistics are read through these borrows, made again after every call
    /// that rebinds the model or one of its slots.
    fn reborrow(&mut self) {
        for line in self.borrows() {
            self.tx.line(line);
        }
    }

    /// The lines of [`BurnSession::reborrow`].
    fn borrows(&mut self) -> Vec<String> {
        let mut lines = vec![];
        let names: Vec<String> = self.order.clone();
        for name in names {
            let place = match self.slots.get(&name) {
                Some(Slot::Model(r, i)) if !self.lost.contains(&(*r, *i)) => format!("&model.p{r}[{i}]"),
                Some(Slot::ModelStat(i, stat)) if self.layers_lost.is_none() => {
                    format!("&model.bn[{i}].{}", stat.name())
                }
                _ => continue,
            };
            let v = self.tx.var(&name);
            lines.push(format!("let {v} = {place};"));
        }
        lines
    }

    /// After a failed call that consumed the value of `name` (its variable `var`): the name reads
    /// as lost in the reproducer too (`let w = Lost;`, the scaffolding's value that `show`s as
    /// unreadable), as the probe observes it.
    fn lost_after_failure(&mut self, var: &str) {
        self.tx.after_failure(format!("let {var} = Lost;"));
    }

    /// The name's value as a tensor, as the transcript spells it: a param's `val()` (which
    /// initialises a lazy one), a tensor's handle clone, a running statistic's `value()`.
    fn value_spelling(&mut self, name: &str) -> String {
        let v = self.tx.var(name);
        match self.slots.get(name) {
            Some(Slot::Own(Val::T1(_) | Val::T2(_) | Val::T3(_))) => format!("{v}.clone()"),
            Some(Slot::ModelStat(..) | Slot::LayerStat(..)) => format!("{v}.value()"),
            _ => format!("{v}.val()"),
        }
    }

    /// Whether `name` is a running statistic read from its layer.
    fn stat_names_contain(&self, name: &str) -> bool {
        matches!(self.slots.get(name), Some(Slot::ModelStat(..) | Slot::LayerStat(..)))
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
                (
                    Slot::Lost(format!("consumed by a call that failed: {msg}")),
                    Outcome::Error(msg),
                )
            }
        };
        self.slots.insert(name.to_string(), slot);
        outcome
    }

    /// `let mut model = <call>;`: the model moved into a spelled call (`call(model)`) and rebound to
    /// what it gives; a panic loses every model param. The model's borrows are made again.
    fn spelled_model_op(&mut self, call: impl FnOnce(Model) -> Spelled<Model>) -> Outcome {
        if self.model_consumed {
            // The reproducer's `model` moved into a call that failed: a later call on the model
            // is the probe's stand-in, which the reproducer does not have. Not spelled.
            self.complete = false;
        }
        let lens = (self.model.p1.len(), self.model.p2.len(), self.model.p3.len());
        let model = std::mem::replace(&mut self.model, Model::empty());
        let (r, text) = call(model);
        // A new binding rather than an assignment: a model the program does not read after its
        // last op is then no unread assignment.
        self.tx.line(format!("let mut model = {text};"));
        match r {
            Ok(m) => {
                self.model = m;
                self.reborrow();
                Outcome::Ok
            }
            Err(o) => {
                let msg = match &o {
                    Outcome::Error(m) => m.clone(),
                    _ => String::new(),
                };
                // The model moved into the call that failed: every name it held reads as lost,
                // here and in the reproducer.
                let held: Vec<String> = self
                    .order
                    .iter()
                    .filter(|n| matches!(self.slots.get(*n), Some(Slot::Model(..) | Slot::ModelStat(..))))
                    .cloned()
                    .collect();
                self.lose_model(lens, &msg);
                self.model_consumed = true;
                for name in held {
                    let var = self.tx.var(&name);
                    self.lost_after_failure(&var);
                }
                o
            }
        }
    }

    /// The spelled form of [`BurnSession::consume`]: `f` gets the name's value and the variable
    /// it is spelled with, and gives the spelled call that makes the name's new value. A plain
    /// value is rebound (`let x: Tensor<2> = <call>;`); a model param is taken out of the
    /// model's list and the result put back in its place (`{ let w = model.p1.remove(0);
    /// model.p1.insert(0, <call>); }`), after which the model's borrows are made again.
    fn consume_spelled(&mut self, name: &str, f: impl FnOnce(Val, &str) -> Spelled<Val>) -> Outcome {
        let var = self.tx.var(name);
        let is_stat = self.stat_names_contain(name);
        let (holder, v) = match self.slots.remove(name) {
            Some(Slot::Model(r, i)) => (Some((r, i)), self.model.take(r, i)),
            Some(Slot::Own(v)) => (None, v),
            // A statistic's value (writes are refused before this: `refuse_stat_write`).
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
        let before = spelling::type_of(&v);
        // A statistic's value is read from its layer (`bn_running_mean.value()`).
        let own = if is_stat { format!("{var}.value()") } else { var.clone() };
        let (result, text) = f(v, &own);
        let (slot, outcome) = match (result, holder) {
            (Ok(v), Some((r, i))) => {
                self.tx.line(format!(
                    "{{ let {var} = model.p{r}.remove({i}); model.p{r}.insert({i}, {text}); }}"
                ));
                match self.model.put(r, i, v) {
                    Ok(()) => (Slot::Model(r, i), Outcome::Ok),
                    Err(e) => {
                        self.complete = false; // a param slot given a tensor: not a burn call
                        self.lost.insert((r, i));
                        (Slot::Lost(e.clone()), Outcome::Error(e))
                    }
                }
            }
            (Ok(v), None) => {
                self.tx.line(format!("let {var}: {} = {text};", spelling::type_of(&v)));
                (Slot::Own(v), Outcome::Ok)
            }
            (Err(o), holder) => {
                match holder {
                    Some((r, i)) => {
                        self.tx.line(format!(
                            "{{ let {var} = model.p{r}.remove({i}); model.p{r}.insert({i}, {text}); }}"
                        ));
                        self.lost.insert((r, i));
                        // The model keeps the lost param's slot, so that the other params keep
                        // their places (their borrows, the optimizers' view of the model): a
                        // stand-in goes where the consumed param was, in the probe's model as in
                        // the reproducer's, whose borrows of the model are made again after.
                        let (stand_in, text) = match r {
                            1 => erased(spelling::stand_in::<1>()),
                            2 => erased(spelling::stand_in::<2>()),
                            _ => erased(spelling::stand_in::<3>()),
                        };
                        self.tx.after_failure(format!("model.p{r}.insert({i}, {text});"));
                        if let Ok(v) = stand_in {
                            let _ = self.model.put(r, i, v);
                        }
                        self.lost_after_failure(&var);
                        for line in self.borrows() {
                            self.tx.after_failure(line);
                        }
                    }
                    None => {
                        self.tx.line(format!("let {var}: {before} = {text};"));
                        self.lost_after_failure(&var);
                    }
                }
                let msg = match &o {
                    Outcome::Error(m) => m.clone(),
                    other => outcome_text(other),
                };
                (Slot::Lost(format!("consumed by a call that failed: {msg}")), o)
            }
        };
        self.slots.insert(name.to_string(), slot);
        if let (Outcome::Ok, Some(Slot::Model(..))) = (&outcome, self.slots.get(name)) {
            self.reborrow();
        }
        outcome
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
            self.slots.insert(
                n,
                Slot::Lost(format!("the model was consumed by a call that failed: {msg}")),
            );
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
        self.consume_spelled(target, |v, var| {
            on_val!(v, param p => erased(spelling::edit_param(p, var, &edit)), tensor t => erased(spelling::edit_tensor(t, var, &edit)))
        })
    }

    /// `let w_value = w.clone();`: the value of `value` (`src`, a handle clone), held first in a
    /// variable of its own: the target may be a model param, whose slot leaves the model's list
    /// while it is written, and `value == target` reads the target itself.
    fn hold(&mut self, value: &str, src: Val) -> Result<(Val, String), Outcome> {
        let vs = self.value_spelling(value);
        let vs = match &src {
            Val::P1(_) | Val::P2(_) | Val::P3(_) => self.tx.var(value),
            _ => vs.trim_end_matches(".clone()").to_string(),
        };
        let value_var = self.tx.var(value);
        let held = self.tx.helper(&format!("{value_var}_value"));
        let (src, text) = on_val!(&src,
            param p => erased(call!([p = p => vs.clone()] p.clone())),
            tensor t => erased(call!([t = t => vs.clone()] t.clone())));
        self.tx.line(format!("let {held} = {text};"));
        Ok((src?, held))
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
        let (src, held) = match self.hold(source, src) {
            Ok(h) => h,
            Err(o) => return o,
        };
        self.consume_spelled(target, |v, var| match v {
            Val::P1(p) => erased(spelling::assign_param(
                p,
                var,
                index,
                spelling::assign_source(src, &held, source_index),
            )),
            Val::P2(p) => erased(spelling::assign_param(
                p,
                var,
                index,
                spelling::assign_source(src, &held, source_index),
            )),
            Val::P3(p) => erased(spelling::assign_param(
                p,
                var,
                index,
                spelling::assign_source(src, &held, source_index),
            )),
            Val::T1(t) => erased(spelling::assign_tensor(
                t,
                var,
                index,
                spelling::assign_source(src, &held, source_index),
            )),
            Val::T2(t) => erased(spelling::assign_tensor(
                t,
                var,
                index,
                spelling::assign_source(src, &held, source_index),
            )),
            Val::T3(t) => erased(spelling::assign_tensor(
                t,
                var,
                index,
                spelling::assign_source(src, &held, source_index),
            )),
        })
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
        if how == ReplaceHow::Tie && !matches!(src, Val::P1(_) | Val::P2(_) | Val::P3(_)) {
            return Outcome::Unsupported(
                "a burn param field holds a Param: a plain tensor there is a module constant, \
                 which burn neither records nor trains"
                    .into(),
            );
        }
        let (src, held) = match self.hold(value, src) {
            Ok(h) => h,
            Err(o) => return o,
        };
        if how == ReplaceHow::Tie {
            // The same Param (same ParamId, one shared lazy state) in a second field.
            return self.consume_spelled(target, |_old, _| (Ok(src), held.clone()));
        }
        let keep_id = how == ReplaceHow::Data;
        self.consume_spelled(target, |v, var| match v {
            Val::P1(p) => erased(spelling::replace_param(p, var, src, &held, keep_id)),
            Val::P2(p) => erased(spelling::replace_param(p, var, src, &held, keep_id)),
            Val::P3(p) => erased(spelling::replace_param(p, var, src, &held, keep_id)),
            Val::T1(t) => erased(spelling::replace_tensor(t, src, &held)),
            Val::T2(t) => erased(spelling::replace_tensor(t, src, &held)),
            Val::T3(t) => erased(spelling::replace_tensor(t, src, &held)),
        })
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
            self.spelled_caches.remove(target);
            let (src, held) = match self.hold(source, src) {
                Ok(h) => h,
                Err(o) => return o,
            };
            // A param's value is its `val()`.
            return self.consume_spelled(target, |v, var| {
                let param = format!("{var}.val()");
                match v {
                    Val::P1(p) => erased(spelling::cat_tensor(p.val(), &param, src, &held)),
                    Val::P2(p) => erased(spelling::cat_tensor(p.val(), &param, src, &held)),
                    Val::P3(p) => erased(spelling::cat_tensor(p.val(), &param, src, &held)),
                    Val::T1(t) => erased(spelling::cat_tensor(t, var, src, &held)),
                    Val::T2(t) => erased(spelling::cat_tensor(t, var, src, &held)),
                    Val::T3(t) => erased(spelling::cat_tensor(t, var, src, &held)),
                }
            });
        }
        if !matches!(self.slots.get(target), Some(Slot::Model(..))) {
            return self.cache_append(target, source, src);
        }
        // A model param given a tensor (an error): not spelled.
        self.complete = false;
        let mut cache = self.caches.remove(target);
        self.spelled_caches.remove(target);
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

    /// A `cache` append: the name's KV cache (`spelling::cache_new`, the name's rows put in
    /// first) given the source's rows, and the name rebound to the filled rows. The source is held
    /// first (`source == target` reads the target's own values).
    fn cache_append(&mut self, target: &str, source: &str, src: Val) -> Outcome {
        let old = match self.get(target) {
            Ok(v) => v,
            Err(o) => return o,
        };
        let (src, held) = match self.hold(source, src) {
            Ok(h) => h,
            Err(o) => return o,
        };
        let var = self.tx.var(target);
        let value = self.value_spelling(target);
        let outcome = match old {
            Val::P1(p) => self.cache_append_rank::<1>(target, &var, p.val(), &value, src, &held),
            Val::P2(p) => self.cache_append_rank::<2>(target, &var, p.val(), &value, src, &held),
            Val::P3(p) => self.cache_append_rank::<3>(target, &var, p.val(), &value, src, &held),
            Val::T1(t) => self.cache_append_rank::<1>(target, &var, t, &value, src, &held),
            Val::T2(t) => self.cache_append_rank::<2>(target, &var, t, &value, src, &held),
            Val::T3(t) => self.cache_append_rank::<3>(target, &var, t, &value, src, &held),
        };
        if !matches!(outcome, Outcome::Ok) {
            self.complete = false; // the name's value went into a call that failed
            self.caches.remove(target);
            self.spelled_caches.remove(target);
        }
        outcome
    }

    fn cache_append_rank<const D: usize>(
        &mut self,
        target: &str,
        var: &str,
        old: Tensor<D>,
        value: &str,
        src: Val,
        held: &str,
    ) -> Outcome
    where
        Tensor<D>: crate::vals::IntoVal,
    {
        let (cv, start) = match self.spelled_caches.remove(target) {
            Some((buffer, cv, rows)) => {
                self.cache_buffers.insert(target.to_string(), buffer);
                (cv, rows)
            }
            None => {
                let cv = self.tx.helper(&format!("{var}_cache"));
                let like = format!("&{value}");
                let (buffer, text) = spelling::cache_new(&old, like.trim_end_matches(".clone()"), CACHE_ROWS);
                self.tx.line(format!("let mut {cv} = {text};"));
                let buffer: Tensor<D> = match buffer {
                    Ok(b) => b,
                    Err(o) => return o,
                };
                // The name's own rows first (a handle on its value; a param's `val()`).
                let (buffer, text) = spelling::cache_put(buffer, &cv, old.clone(), value, 0);
                self.tx.line(format!("{cv} = {text};"));
                let buffer = match buffer {
                    Ok(b) => b,
                    Err(o) => return o,
                };
                let rows = old.dims()[0];
                let (first, text) = spelling::cache_rows(&buffer, &cv, rows);
                self.tx.line(format!("let _ = {text};"));
                if let Err(o) = first {
                    return o;
                }
                self.cache_buffers.insert(target.to_string(), buffer.into_val());
                (cv, rows)
            }
        };
        let buffer: Tensor<D> = match self.cache_buffers.remove(target) {
            Some(b) => crate::vals::source_tensor(&b),
            None => return Outcome::Error("internal: no cache buffer".into()),
        };
        let (rows, rows_text) = spelling::assign_source::<D>(src, held, None);
        let rows = match rows {
            Ok(r) => r,
            Err(o) => return o,
        };
        let end = start + rows.dims()[0];
        let (buffer, text) = spelling::cache_put(buffer, &cv, rows, &rows_text, start);
        self.tx.line(format!("{cv} = {text};"));
        let buffer = match buffer {
            Ok(b) => b,
            Err(o) => return o,
        };
        let (filled, text) = spelling::cache_rows(&buffer, &cv, end);
        // The name's old value goes once the filled rows are taken, as a rebinding drops it.
        drop(old);
        self.tx.line(format!(
            "let {var}: Tensor<{D}> = {{ let filled = {text}; drop({var}); filled }};"
        ));
        let filled = match filled {
            Ok(f) => f,
            Err(o) => return o,
        };
        self.spelled_caches
            .insert(target.to_string(), (buffer.into_val(), cv, end));
        self.bind(target.to_string(), Slot::Own(filled.into_val()));
        Outcome::Ok
    }

    /// `let c = model.clone();`, and `<name>.<p>` bound to the clone's params
    /// (`let c_w = c.p1[0].clone();`); the clone itself is dropped after, as the probe holds only
    /// what the names hold. The clone's layers share the model's running states (burn's Clone of
    /// a RunningState clones its Arc): bound live, read from the clone's layer.
    fn module_clone(&mut self, name: &str) -> Outcome {
        let base: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' })
            .collect();
        let clone_var = self.tx.helper(&format!(
            "{}_model",
            base.trim_start_matches(|c: char| c.is_ascii_digit())
        ));
        if self.model_consumed {
            self.complete = false; // as in `spelled_model_op`
        }
        let (clone, text) = call!([model = &self.model => "&model"] model.clone());
        self.tx.line(format!("let {clone_var} = {text};"));
        let clone = match clone {
            Ok(c) => c,
            Err(o) => return o,
        };
        let params: Vec<(String, usize, usize)> = self
            .params
            .iter()
            .filter(|mp| !self.lost.contains(&(mp.rank, mp.idx)))
            .map(|mp| (mp.name.clone(), mp.rank, mp.idx))
            .collect();
        for (p, rank, i) in params {
            let n = format!("{name}.{p}");
            let v = self.tx.var(&n);
            let (r, text) = records::read_entry(&clone, &clone_var, records::Entry::Param(rank, i));
            self.tx.line(format!("let {v}: Param<Tensor<{rank}>> = {text};"));
            match r {
                Ok(val) => self.bind(n, Slot::Own(val)),
                Err(o) => return o,
            }
        }
        if self.layers_lost.is_none() {
            self.bind_stats(name, &clone);
            self.spell_live_stats(name, &clone_var);
        }
        self.tx.line(format!("drop({clone_var});"));
        Outcome::Ok
    }
}

/// What an outcome says.
fn outcome_text(o: &Outcome) -> String {
    match o {
        Outcome::Ok => "ok".into(),
        Outcome::Error(m) | Outcome::Unsupported(m) | Outcome::Skipped(m) => m.clone(),
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
            Op::Write { target, index, value } => self.edit(
                target,
                Edit::Write {
                    index: *index,
                    value: value.clone(),
                },
            ),
            Op::Fill { target, value } => self.edit(target, Edit::Fill(*value)),
            Op::Scale { target, factor } => self.edit(target, Edit::Scale(*factor)),
            Op::Assign {
                target,
                source,
                index,
                source_index,
            } => self.assign(target, source, *index, *source_index),
            Op::Step { .. } => self.step(&op.optimizer_spec().expect("a step names an optimizer")),
            Op::Backward {} => self.backward(),
            Op::BackwardOf { of } => self.backward_of(of),
            Op::SetLr { to, .. } => self.set_lr(&op.optimizer_spec().expect("set_lr names an optimizer"), *to),
            Op::Save { name, to } => self.save(name, *to),
            Op::Load { from, assign } => self.load(from, *assign),
            Op::Replace { target, value, how } => self.replace(target, value, *how),
            Op::Append { target, source, how } => self.append(target, source, *how),
            Op::Map { target, func } => {
                self.caches.remove(target);
                self.spelled_caches.remove(target);
                if matches!(self.slots.get(target), Some(Slot::Model(..))) {
                    self.complete = false; // a param slot given a tensor: not a burn call
                }
                // A param's value moved out of it (`Param::into_value`).
                self.consume_spelled(target, |v, var| {
                    let param = format!("{var}.into_value()");
                    on_val!(v, param p => erased(spelling::map_tensor(p.into_value(), &param, *func)),
                        tensor t => erased(spelling::map_tensor(t, var, *func)))
                })
            }
            Op::Add { target, other } => {
                // The other value first, as a handle: `x = x + x` reads a second handle.
                let o = match self.get(other) {
                    Ok(v) => v,
                    Err(o) => return o,
                };
                let mut ov = self.value_spelling(other);
                self.caches.remove(target);
                self.spelled_caches.remove(target);
                if matches!(self.slots.get(target), Some(Slot::Model(..))) {
                    self.complete = false;
                }
                let rank = self.shape_of(target).map(|s| s.len()).unwrap_or(0);
                if o.shape().len() < rank {
                    ov = format!("{ov}.unsqueeze()"); // a row gets a leading 1
                }
                self.consume_spelled(target, |v, var| {
                    let param = format!("{var}.into_value()");
                    match v {
                        Val::P1(p) => erased(spelling::add_tensor(p.into_value(), &param, source_tensor(&o), &ov)),
                        Val::P2(p) => erased(spelling::add_tensor(p.into_value(), &param, source_tensor(&o), &ov)),
                        Val::P3(p) => erased(spelling::add_tensor(p.into_value(), &param, source_tensor(&o), &ov)),
                        Val::T1(t) => erased(spelling::add_tensor(t, var, source_tensor(&o), &ov)),
                        Val::T2(t) => erased(spelling::add_tensor(t, var, source_tensor(&o), &ov)),
                        Val::T3(t) => erased(spelling::add_tensor(t, var, source_tensor(&o), &ov)),
                    }
                })
            }
            Op::Move { target, device, method } => {
                let dev = match device {
                    DeviceRole::Home => self.home.clone(),
                    DeviceRole::Cpu => cpu_device(),
                    DeviceRole::Alt => match &self.alt {
                        Some(d) => d.clone(),
                        None => return Outcome::Unsupported("no second device for this target".into()),
                    },
                };
                let spelled_device = match device {
                    DeviceRole::Home => "&dev".to_string(),
                    DeviceRole::Cpu => "&Device::flex().autodiff()".to_string(),
                    DeviceRole::Alt => String::new(), // made below, once the move is known to run
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
                let spelled_device = match device {
                    DeviceRole::Alt => self.alt_spelling().unwrap_or_default(),
                    _ => spelled_device,
                };
                let fork = *method == MoveMethod::Fork;
                self.consume_spelled(target, |v, var| {
                    on_val!(v, param p => spelling::move_module(p, var, fork, &dev, &spelled_device),
                        tensor t => spelling::move_module(t, var, fork, &dev, &spelled_device))
                })
            }
            Op::ModuleClone { name } => self.module_clone(name),
            Op::Forward { name, layer, input } => self.forward(name, layer, input),
            // Module mode changes rebind the model, as `model = model.valid()` does.
            Op::Valid {} => self.spelled_model_op(|m| call!([model = m => "model"] model.valid())),
            Op::Train {} => self.spelled_model_op(|m| call!([model = m => "model"] model.train())),
            Op::NoGrad {} => self.spelled_model_op(|m| call!([model = m => "model"] model.no_grad())),
            Op::Freeze {} => self.spelled_model_op(|m| call!([model = m => "model"] model.freeze())),
            // A read of the values (forcing a lazy param's initialisation, as any read does).
            Op::Read { target } => match self.get(target) {
                Ok(v) => {
                    let spelled = self.value_spelling(target);
                    let (r, text) = on_val!(v, param p => {
                        let value = p.val();
                        call!([value = value => spelled] value.to_data())
                    }, tensor t => call!([value = t => spelled] value.to_data()));
                    self.tx.line(format!("let _ = {text};"));
                    match r {
                        Ok(_) => Outcome::Ok,
                        Err(o) => o,
                    }
                }
                Err(o) => o,
            },
        }
    }

    fn names(&self) -> Vec<String> {
        self.order.clone()
    }

    fn begin_op(&mut self) {
        self.tx.begin_op();
    }

    /// The transcript, where every call so far is in it.
    fn transcript(&self) -> Option<serde_json::Value> {
        self.complete.then(|| self.tx.to_json())
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
