//! The training-loop ops of a [`CandleSession`]: the live optimizers (`step`, `backward`,
//! `backward_of`, `set_lr`) and the model's checkpoints (`save`, `load`), each the candle calls a
//! user writes.
//!
//! A step's loss is the sum over the model's params of `sum(var * grad)`, each param's `var`
//! the Var the VarMap holds under its name and `grad` its gradient tensor (the transcript's
//! `<name>_grad`, made at open). A batch norm's running statistics are not in the loss: a
//! training loss never reads them, so they get no gradient.

// A struct literal spells each field `f: f`: the transcript puts the value in for the second.
#![allow(clippy::redundant_field_names)]

use super::{CandleSession, Handle, R};
use aliasfuzz_protocol::transcript::{f64_lit, str_lit};
use aliasfuzz_protocol::{CheckpointStore, OptimizerKind, OptimizerSpec, Outcome};
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use candle_nn::{AdamW, Optimizer, SGD};
use std::collections::HashMap;
use std::path::PathBuf;

/// The optimizers candle-nn has.
pub(super) enum Opt {
    Sgd(SGD),
    AdamW(AdamW),
}

/// What a `save` kept, with the variable that holds it.
pub(super) enum Checkpoint {
    /// The VarMap's map as it was: the model's own `Var`s under their names.
    Memory(HashMap<String, Var>, String),
    /// The safetensors file `VarMap::save` wrote, and the variable of its path.
    File(PathBuf, String),
}

impl CandleSession {
    /// The live optimizer of `spec` and its variable, made over the VarMap's vars if none is:
    /// `sgd` is `SGD` (no momentum: candle-nn has none), `adam` is `AdamW` with weight_decay 0
    /// (candle's AdamW decays decoupled; L2 decay would need another optimizer), `adamw` is
    /// `AdamW`.
    fn optimizer(&mut self, spec: &OptimizerSpec) -> R<String> {
        let key = spec.key();
        if let Some((_, v)) = self.optimizers.get(&key) {
            return Ok(v.clone());
        }
        let weight_decay = match spec.optimizer {
            OptimizerKind::SgdMomentum => {
                return Err(Outcome::Unsupported(
                    "candle_nn::SGD has no momentum (optim.rs: \"this version does not support \
                     momentum\") and candle-nn has no other SGD"
                        .into(),
                ))
            }
            OptimizerKind::Adam if spec.weight_decay != 0.0 => {
                return Err(Outcome::Unsupported(
                    "candle has no Adam with L2 weight decay: candle_nn::AdamW decays \
                     decoupled (theta * (1 - lr*wd)), which is AdamW, not Adam"
                        .into(),
                ))
            }
            OptimizerKind::Adam => 0.0,
            _ => spec.weight_decay,
        };
        let v = self.tx.helper("opt");
        let lr = spec.lr;
        let (opt, text) = match spec.optimizer {
            OptimizerKind::Sgd => {
                let (r, text) = call!([varmap = &self.varmap => "&varmap", lr = lr => f64_lit(lr)]
                    candle_nn::SGD::new(varmap.all_vars(), lr)?);
                (r.map(Opt::Sgd), text)
            }
            _ => {
                let [beta1, beta2] = spec.betas;
                let (r, text) = call!([varmap = &self.varmap => "&varmap", lr = lr => f64_lit(lr),
                    beta1 = beta1 => f64_lit(beta1), beta2 = beta2 => f64_lit(beta2), eps = spec.eps => f64_lit(spec.eps),
                    weight_decay = weight_decay => f64_lit(weight_decay)]
                    candle_nn::AdamW::new(
                        varmap.all_vars(),
                        candle_nn::ParamsAdamW { lr: lr, beta1: beta1, beta2: beta2, eps: eps, weight_decay: weight_decay },
                    )?);
                (r.map(Opt::AdamW), text)
            }
        };
        self.tx.line(format!("let mut {v} = {text};"));
        self.optimizers.insert(key, (opt?, v.clone()));
        Ok(v)
    }

    /// The loss of a `step` or `backward` (`let loss = ...;`, a line per param; None: no
    /// params, nothing to train). A param is spelled by its name's variable while that holds
    /// the VarMap's Var, else read from the VarMap.
    fn loss(&mut self) -> R<Option<Tensor>> {
        let mut total: Option<Tensor> = None;
        for p in self.params.clone() {
            let Some((g, gv)) = self.grads.get(&p).cloned() else {
                continue;
            };
            let Some(var) = self.varmap.data().lock().unwrap().get(&p).cloned() else {
                continue;
            };
            let ws = match self.bound.get(&p) {
                Some(Handle::Var(b)) if b.as_tensor().id() == var.as_tensor().id() => {
                    format!("{}.as_tensor()", self.tx.var(&p))
                }
                _ => format!("varmap.data().lock().unwrap()[{}].as_tensor()", str_lit(&p)),
            };
            let gs = format!("&{gv}");
            let (term, text) = match &total {
                None => call!([w = var.as_tensor() => ws, g = &g => gs] (w * g)?.sum_all()?),
                Some(l) => call!([loss = l => "&loss", w = var.as_tensor() => ws, g = &g => gs]
                    (loss + (w * g)?.sum_all()?)?),
            };
            self.tx.line(format!("let loss = {text};"));
            total = Some(term?);
        }
        Ok(total)
    }

    /// Gradient accumulation as candle users write it (candle has no accumulator): `acc` plus
    /// the gradients of `loss`'s backward pass, var by var over the VarMap's vars (a Var under
    /// two keys once). A var `acc` has and the map no longer holds keeps its gradient.
    fn add_grads(&mut self, mut acc: GradStore, loss: &Tensor) -> R<GradStore> {
        let spelled = call!([loss = loss => "&loss", varmap = &self.varmap => "&varmap", grads = &mut acc => "grads"] {
            let new = loss.backward()?;
            let mut seen = std::collections::HashSet::new();
            for var in varmap.all_vars() {
                let t = var.as_tensor();
                if !seen.insert(t.id()) {
                    continue;
                }
                if let Some(g) = new.get(t) {
                    let sum = match grads.get(t) {
                        Some(old) => (old + g)?,
                        None => g.clone(),
                    };
                    grads.insert(t, sum);
                }
            }
        });
        self.stmt(spelled)?;
        Ok(acc)
    }

    /// `opt.backward_step(&loss)`, or after `backward` ops the sum of their gradients and this
    /// pass's (`add_grads`) given to `opt.step(&grads)`.
    pub(super) fn step(&mut self, spec: &OptimizerSpec) -> R<()> {
        // `momentum` and `dampening` only matter to `sgd_momentum`, which candle does not have.
        let v = self.optimizer(spec)?;
        let pending = self.pending.take();
        let Some(loss) = self.loss()? else {
            return Ok(()); // a model without params: nothing to train
        };
        let grads = match pending {
            None => None,
            Some(acc) => Some(self.add_grads(acc, &loss)?),
        };
        let (opt, _) = self.optimizers.get_mut(&spec.key()).expect("made above");
        let spelled = match (opt, &grads) {
            (Opt::Sgd(o), None) => call!([opt = o => v, loss = &loss => "&loss"] opt.backward_step(loss)?),
            (Opt::AdamW(o), None) => call!([opt = o => v, loss = &loss => "&loss"] opt.backward_step(loss)?),
            (Opt::Sgd(o), Some(g)) => call!([opt = o => v, grads = g => "&grads"] opt.step(grads)?),
            (Opt::AdamW(o), Some(g)) => call!([opt = o => v, grads = g => "&grads"] opt.step(grads)?),
        };
        self.stmt(spelled)
    }

    /// `loss.backward()` without a step, its GradStore added to the pending one: candle has no
    /// gradient accumulator, and this is what its users write (`add_grads`).
    pub(super) fn backward(&mut self) -> R<()> {
        let pending = self.pending.take();
        let Some(loss) = self.loss()? else {
            self.pending = pending; // a model without params: nothing to differentiate
            return Ok(());
        };
        self.accumulate(pending, &loss)
    }

    /// `backward` with the loss `of.sum_all()`: a backward pass through the graph that made the
    /// bound tensor `of`. candle has no version counter and frees no graph after a pass (an op
    /// holds its inputs), so a pass after an in-place `Var::set` of a saved tensor, or a second
    /// pass, runs as candle runs it; a loss whose graph has no var gives a GradStore without
    /// vars, nothing to add (`Tensor::backward` does not refuse it).
    pub(super) fn backward_of(&mut self, of: &str) -> R<()> {
        let t = self.get(of)?.tensor().clone();
        let ts = self.t(of);
        let (loss, text) = call!([t = &t => ts] t.sum_all()?);
        self.tx.line(format!("let loss = {text};"));
        let loss = loss?;
        let pending = self.pending.take();
        self.accumulate(pending, &loss)
    }

    /// The gradients of `loss` as the pending GradStore: `loss.backward()` (`let mut grads`),
    /// or added to `pending` (`add_grads`).
    fn accumulate(&mut self, pending: Option<GradStore>, loss: &Tensor) -> R<()> {
        self.pending = Some(match pending {
            None => {
                let (g, text) = call!([loss = loss => "&loss"] loss.backward()?);
                self.tx.line(format!("let mut grads = {text};"));
                g?
            }
            Some(acc) => self.add_grads(acc, loss)?,
        });
        Ok(())
    }

    /// `opt.set_learning_rate(to)` (candle#687: the optimizer keeps its state), refiled under
    /// the new learning rate.
    pub(super) fn set_lr(&mut self, spec: &OptimizerSpec, to: f64) -> R<()> {
        let v = self.optimizer(spec)?;
        let (opt, _) = self.optimizers.get_mut(&spec.key()).expect("made above");
        let spelled = match opt {
            Opt::Sgd(o) => call!([opt = o => v, to = to => f64_lit(to)] opt.set_learning_rate(to)),
            Opt::AdamW(o) => call!([opt = o => v, to = to => f64_lit(to)] opt.set_learning_rate(to)),
        };
        self.stmt(spelled)?;
        let opt = self.optimizers.remove(&spec.key()).expect("made above");
        self.optimizers.insert(spec.with_lr(to).key(), opt);
        Ok(())
    }

    /// `save`: the checkpoint, and `<name>.<p>` bound to what it holds for every param and layer
    /// stat (`model_names`): in memory, a clone of the VarMap's map (the model's own Vars); to a
    /// file, `VarMap::save` and the tensors `candle_core::safetensors::load` reads back.
    pub(super) fn save(&mut self, name: &str, to: CheckpointStore) -> R<()> {
        let cv = self.tx.var(name);
        match to {
            CheckpointStore::Memory => {
                let (map, text) = call!([varmap = &self.varmap => "&varmap"] varmap.data().lock().unwrap().clone());
                self.tx.line(format!("let {cv} = {text};"));
                let map = map?;
                self.checkpoints
                    .insert(name.to_string(), Checkpoint::Memory(map.clone(), cv.clone()));
                for p in self.model_names() {
                    if map.contains_key(&p) {
                        let (r, text) =
                            call!([map = &map => cv.clone(), key = p.as_str() => str_lit(&p)] map[key].clone());
                        self.let_bind(&format!("{name}.{p}"), (r.map(Handle::Var), text))?;
                    }
                }
            }
            CheckpointStore::File => {
                if self.checkpoint_dir.is_none() {
                    let dir = tempfile::tempdir().map_err(|e| Outcome::Error(format!("tempdir: {e}")))?;
                    self.checkpoint_dir = Some(dir);
                }
                let dir = self.checkpoint_dir.as_ref().unwrap().path().to_path_buf();
                let pv = self.tx.helper(&format!("{cv}_path"));
                let file = format!("{name}.safetensors");
                let (path, text) = call!([dir = &dir => "std::env::temp_dir()", file = file.as_str() => str_lit(&file)]
                    dir.join(format!("aliasfuzz-repro-{}-{}", std::process::id(), file)));
                self.tx.line(format!("let {pv} = {text};"));
                let path = path?;
                self.stmt(
                    call!([varmap = &self.varmap => "&varmap", path = &path => format!("&{pv}")] varmap.save(path)?),
                )?;
                let (read, text) = call!([path = &path => format!("&{pv}"), dev = &self.home => "&dev"]
                    candle_core::safetensors::load(path, dev)?);
                self.tx.line(format!("let {cv} = {text};"));
                let read = read?;
                self.checkpoints.insert(name.to_string(), Checkpoint::File(path, pv));
                for p in self.model_names() {
                    if read.contains_key(&p) {
                        let (r, text) =
                            call!([map = &read => cv.clone(), key = p.as_str() => str_lit(&p)] map[key].clone());
                        self.let_bind(&format!("{name}.{p}"), (r.map(Handle::Tensor), text))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// `load` into the live VarMap: `VarMap::set` (memory) or `VarMap::load` (file), both
    /// `Var::set` into the map's existing Vars.
    pub(super) fn load(&mut self, from: &str, assign: bool) -> R<()> {
        if assign {
            return Err(Outcome::Unsupported(
                "candle loads only into the existing Vars (VarMap::load and VarMap::set call \
                 Var::set); it has no load that installs the loaded tensors, as torch's assign=True"
                    .into(),
            ));
        }
        let spelled = match self.checkpoints.get(from) {
            None => {
                return Err(Outcome::Skipped(format!(
                    "no checkpoint named {from} (its save did not run here)"
                )))
            }
            Some(Checkpoint::Memory(map, cv)) => {
                call!([varmap = &mut self.varmap => "varmap", map = map => cv.clone()]
                    varmap.set(map.iter().map(|(k, v)| (k, v.as_tensor())))?)
            }
            Some(Checkpoint::File(path, pv)) => {
                call!([varmap = &mut self.varmap => "varmap", path = path => format!("&{pv}")] varmap.load(path)?)
            }
        };
        self.stmt(spelled)
    }
}
