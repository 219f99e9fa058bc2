//! The training-loop ops of a [`BurnSession`]: the live optimizers (`step`, `backward`,
//! `backward_of`, `set_lr`) and the model's checkpoints (`save`, `load`, the layers' running
//! statistics with the params), each the burn call a user writes.

use super::records::read_entry;
use super::spelling;
use super::{BurnSession, Saved, Slot};
use crate::on_val;
use aliasfuzz_protocol::transcript::{f32_lit, f64_lit};
use aliasfuzz_protocol::{CheckpointStore, OptimizerSpec, Outcome};
use burn::module::Module;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::GradientsParams;
#[allow(unused_imports)]
use burn::optim::Optimizer;
use burn::optim::{AdamConfig, AdamWConfig, GradientsAccumulator, ModuleOptimizer, SgdConfig};
use burn::tensor::Tensor;
use burn::tensor::TensorData;

impl BurnSession {
    /// Where the live optimizer of `spec` is in `optims`, made if none is
    /// (`let mut adam = AdamConfig::new()...init();`).
    fn optimizer_at(&mut self, spec: &OptimizerSpec) -> Result<usize, Outcome> {
        let key = spec.key();
        if let Some(at) = self.optims.iter().position(|(k, _)| *k == key) {
            return Ok(at);
        }
        let kind: &str = spec.optimizer.into();
        let var = self.tx.helper(kind);
        let (momentum, dampening, wd) = (spec.momentum, spec.dampening, spec.weight_decay);
        let (beta_1, beta_2, eps) = (spec.betas[0] as f32, spec.betas[1] as f32, spec.eps as f32);
        // L2 weight decay, added to the gradient (burn-optim decay.rs `WeightDecay::transform`).
        let decay = (wd != 0.0).then(|| WeightDecayConfig::new(wd as f32));
        let decay_text = match decay {
            Some(_) => format!("Some(WeightDecayConfig::new({}))", f32_lit(wd as f32)),
            None => "None".into(),
        };
        let (opt, text) = match kind {
            "sgd" => call!([decay = decay => decay_text] SgdConfig::new().with_weight_decay(decay).init()),
            // MomentumConfig defaults to dampening 0.1 (burn-optim momentum.rs): always set it.
            "sgd_momentum" => call!([decay = decay => decay_text, momentum = momentum => f64_lit(momentum),
                dampening = dampening => f64_lit(dampening)]
                SgdConfig::new()
                    .with_weight_decay(decay)
                    .with_momentum(Some(
                        MomentumConfig::new().with_momentum(momentum).with_dampening(dampening).with_nesterov(false),
                    ))
                    .init()),
            "adam" => call!([decay = decay => decay_text, beta_1 = beta_1 => f32_lit(beta_1),
                beta_2 = beta_2 => f32_lit(beta_2), eps = eps => f32_lit(eps)]
                AdamConfig::new()
                    .with_beta_1(beta_1)
                    .with_beta_2(beta_2)
                    .with_epsilon(eps)
                    .with_weight_decay(decay)
                    .init()),
            "adamw" => call!([wd = wd as f32 => f32_lit(wd as f32), beta_1 = beta_1 => f32_lit(beta_1),
                beta_2 = beta_2 => f32_lit(beta_2), eps = eps => f32_lit(eps)]
                AdamWConfig::new()
                    .with_beta_1(beta_1)
                    .with_beta_2(beta_2)
                    .with_epsilon(eps)
                    .with_weight_decay(wd)
                    .init()),
            other => return Err(Outcome::Error(format!("unknown optimizer {other:?}"))),
        };
        self.tx.line(format!("let mut {var} = {text};"));
        let opt: ModuleOptimizer = opt?;
        self.optim_vars.insert(key.clone(), var);
        self.optims.push((key, opt));
        Ok(self.optims.len() - 1)
    }

    /// `let loss = ...;`, the sum over the model's params of `(p * g).sum()`; `loss.backward()`;
    /// `let grads = GradientsParams::from_grads(..)` (`grads_of`).
    fn backward_grads(&mut self) -> Result<GradientsParams, Outcome> {
        let mut loss: Option<Tensor<1>> = None;
        let params: Vec<(String, usize, usize, TensorData, String)> = self
            .params
            .iter()
            .filter(|mp| !self.lost.contains(&(mp.rank, mp.idx)))
            .map(|mp| (mp.name.clone(), mp.rank, mp.idx, mp.grad.clone(), mp.grad_var.clone()))
            .collect();
        if params.is_empty() {
            return Err(Outcome::Error("the model has no params".into()));
        }
        for (name, rank, idx, grad, grad_var) in params {
            let var = self.tx.var(&name);
            let (term, text) = match rank {
                1 => spelling::loss_term(&self.model.p1[idx], &var, &grad, &grad_var, &self.home),
                2 => spelling::loss_term(&self.model.p2[idx], &var, &grad, &grad_var, &self.home),
                _ => spelling::loss_term(&self.model.p3[idx], &var, &grad, &grad_var, &self.home),
            };
            match loss {
                None => {
                    self.tx.line(format!("let loss = {text};"));
                    loss = Some(term?);
                }
                Some(l) => {
                    self.tx.line(format!("let loss = loss + {text};"));
                    let term = term?;
                    let (sum, _) = call!([loss = l => "loss", term = term => "term"] loss + term);
                    loss = Some(sum?);
                }
            }
        }
        self.grads_of(loss.expect("a param's term"))
    }

    /// `let grads = GradientsParams::from_grads(loss.backward(), &model);`: the gradients of one
    /// backward pass of `loss`, by the ParamIds of the params the model holds now.
    fn grads_of(&mut self, loss: Tensor<1>) -> Result<GradientsParams, Outcome> {
        let (grads, text) = call!([loss = loss => "loss", model = &self.model => "&model"]
            GradientsParams::from_grads(loss.backward(), model));
        self.tx.line(format!("let grads = {text};"));
        grads
    }

    /// The live optimizer's `step(lr, model, grads)`; after `backward` ops, with the grads of
    /// this pass accumulated into theirs (`GradientsAccumulator::accumulate`, then `grads()`).
    pub(super) fn step(&mut self, spec: &OptimizerSpec) -> Outcome {
        let mut gp = match self.backward_grads() {
            Ok(gp) => gp,
            Err(o) => return o,
        };
        if self.accumulated.is_some() {
            match self.accumulate(gp) {
                Outcome::Ok => {}
                o => {
                    self.accumulated = None;
                    return o;
                }
            }
            let mut acc = self.accumulated.take().expect("accumulate keeps its accumulator");
            let (r, text) = call!([accumulator = &mut acc => "accumulator"] accumulator.grads());
            self.tx.line(format!("let grads = {text};"));
            gp = match r {
                Ok(gp) => gp,
                Err(o) => return o,
            };
        }
        let at = match self.optimizer_at(spec) {
            Ok(at) => at,
            Err(o) => return o,
        };
        let var = self.optim_vars[&spec.key()].clone();
        // The optimizer leaves the list while it steps (the model op borrows self), then goes
        // back to the same place, so its state persists.
        let (key, mut opt) = self.optims.remove(at);
        let lr = spec.lr;
        let outcome = self.spelled_model_op(|m| {
            call!([optimizer = &mut opt => var, lr = lr => f64_lit(lr), model = m => "model", grads = gp => "grads"]
                optimizer.step(lr, model, grads))
        });
        self.optims.insert(at, (key, opt));
        outcome
    }

    /// Gradient accumulation as the burn book writes it: the pass's `GradientsParams` given to a
    /// `GradientsAccumulator` (keyed by ParamId, over the params the model holds now).
    pub(super) fn backward(&mut self) -> Outcome {
        match self.backward_grads() {
            Ok(gp) => self.accumulate(gp),
            Err(o) => o,
        }
    }

    /// `backward` with the loss `of`'s value summed to one element (`let loss = a.clone().sum();`,
    /// a param's `val()`, a running statistic's `value()`): a backward pass through the graph that
    /// made it. burn has no version counter; whatever `backward` does with a tensor that is not
    /// tracked or a graph a pass already went through is the op's outcome (a panic its error).
    pub(super) fn backward_of(&mut self, of: &str) -> Outcome {
        let v = match self.get(of) {
            Ok(v) => v,
            Err(o) => return o,
        };
        let spelled = self.value_spelling(of);
        let (loss, text) = on_val!(v, param p => {
            let value = p.val();
            call!([value = value => spelled] value.sum())
        }, tensor t => call!([value = t => spelled] value.sum()));
        self.tx.line(format!("let loss = {text};"));
        let grads = loss.and_then(|loss| self.grads_of(loss));
        match grads {
            Ok(gp) => self.accumulate(gp),
            Err(o) => o,
        }
    }

    /// `gp` given to the `GradientsAccumulator` of the `backward` ops since the last step (made
    /// at the first: `let mut accumulator = GradientsAccumulator::new();`).
    fn accumulate(&mut self, gp: GradientsParams) -> Outcome {
        let mut acc = match self.accumulated.take() {
            Some(acc) => acc,
            None => {
                let (acc, text) = call!([] GradientsAccumulator::new());
                self.tx.line(format!("let mut accumulator = {text};"));
                match acc {
                    Ok(acc) => acc,
                    Err(o) => return o,
                }
            }
        };
        let (r, text) = call!([accumulator = &mut acc => "accumulator", model = &self.model => "&model", grads = gp => "grads"]
            accumulator.accumulate(model, grads));
        self.tx.line(format!("{text};"));
        self.accumulated = Some(acc);
        match r {
            Ok(()) => Outcome::Ok,
            Err(o) => o,
        }
    }

    /// A burn optimizer holds no learning rate (`Optimizer::step(lr, ..)` takes it each time):
    /// the live optimizer is refiled under `to`, so the next `step` with lr `to` passes `to` to it.
    pub(super) fn set_lr(&mut self, spec: &OptimizerSpec, to: f64) -> Outcome {
        let at = match self.optimizer_at(spec) {
            Ok(at) => at,
            Err(o) => return o,
        };
        let var = self.optim_vars.remove(&spec.key()).expect("made above");
        self.tx.line(format!(
            "// set_lr: burn's optimizer takes the learning rate at each step; {var}'s is {} from here on",
            f64_lit(to)
        ));
        self.optims[at].0 = spec.with_lr(to).key();
        self.optim_vars.insert(spec.with_lr(to).key(), var);
        Outcome::Ok
    }

    /// `save`: `let ckpt = model.clone().into_record();` or `model.clone().save_file(&path)?;`,
    /// and `<name>.<p>` / `<name>.<layer>.<stat>` bound to what the checkpoint holds, read by
    /// loading it (records.rs): a record into a clone of the model with fresh layers, a file into
    /// a fresh model of the same layout.
    pub(super) fn save(&mut self, name: &str, to: CheckpointStore) -> Outcome {
        match self.save_spelled(name, to) {
            Ok(()) => Outcome::Ok,
            Err(o) => o,
        }
    }

    fn save_spelled(&mut self, name: &str, to: CheckpointStore) -> Result<(), Outcome> {
        self.refuse_lost_params()?;
        let cv = self.tx.var(name);
        let (read, text, saved) = match to {
            CheckpointStore::Memory => {
                let (record, text) = call!([model = &self.model => "model"] model.clone().into_record());
                self.tx.line(format!("let {cv} = {text};"));
                let record = record?;
                let base = self.model.clone();
                let (read, text) = self.read_record(base, "model", record.clone(), &format!("{cv}.clone()"));
                (read?, text, Saved::Record(record, cv.clone()))
            }
            CheckpointStore::File => {
                let base = self.model.clone();
                let (read, text, path, pv) = self.file_round_trip(&base, "model", &cv)?;
                (read, text, Saved::File(path, pv))
            }
        };
        let read_var = self.tx.helper(&format!("{cv}_model"));
        self.tx.line(format!("let {read_var} = {text};"));
        self.saved.insert(name.to_string(), saved);
        for (n, entry) in self.model_entries(name) {
            let (v, text) = read_entry(&read, &read_var, entry);
            let v = v?;
            let var = self.tx.var(&n);
            self.tx.line(format!("let {var}: {} = {text};", spelling::type_of(&v)));
            self.bind(n, Slot::Own(v));
        }
        self.tx.line(format!("drop({read_var});"));
        Ok(())
    }

    /// `load`: `let mut model = model.load_record(ckpt.clone());` or
    /// `let mut model = model.load_file(&ckpt_path);`. The layers' running states take the
    /// record's values in place (running.rs `Module::map`): a module clone still sharing them
    /// sees the load too.
    pub(super) fn load(&mut self, from: &str, assign: bool) -> Outcome {
        if assign {
            return Outcome::Unsupported(
                "burn has one load call (load_record / load_file), which installs the record's \
                 params; assign=True is torch's keyword for that"
                    .into(),
            );
        }
        match self.saved.get(from) {
            None => Outcome::Skipped(format!("no checkpoint named {from} (its save did not run here)")),
            Some(Saved::Record(record, cv)) => {
                let (record, spelled) = (record.clone(), format!("{cv}.clone()"));
                self.spelled_model_op(
                    |m| call!([model = m => "model", record = record => spelled] model.load_record(record)),
                )
            }
            Some(Saved::File(path, pv)) => {
                let (path, spelled) = (path.clone(), format!("&{pv}"));
                self.spelled_model_op(|m| call!([model = m => "model", path = &path => spelled] model.load_file(path)))
            }
        }
    }
}
