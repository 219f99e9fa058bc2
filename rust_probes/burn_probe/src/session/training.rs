//! The training-loop ops of a [`BurnSession`]: the live optimizers (`step`, `backward`, `set_lr`) and the
//! model's checkpoints (`save`, `load`, the layers' running statistics with the params), each the
//! burn call a user writes.

use super::{BurnSession, Saved, Slot};
use crate::support::{loss_term, make_optimizer, read_record, save_and_load, Model};
use crate::vals::Val;
use aliasfuzz_protocol::{panic_message, CheckpointStore, OptimizerSpec, Outcome};
use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use std::panic::{catch_unwind, AssertUnwindSafe};

impl BurnSession {
    /// Where the live optimizer of `spec` is in `optims`, made if none is.
    fn optimizer_at(&mut self, spec: &OptimizerSpec) -> usize {
        let key = spec.key();
        match self.optims.iter().position(|(k, _)| *k == key) {
            Some(at) => at,
            None => {
                let opt = make_optimizer(
                    spec.optimizer.into(),
                    spec.momentum,
                    spec.dampening,
                    spec.betas,
                    spec.eps,
                    spec.weight_decay,
                );
                self.optims.push((key, opt));
                self.optims.len() - 1
            }
        }
    }

    /// loss = sum over the model's params of (p * g).sum(); backward; `GradientsParams`.
    fn backward_grads(&self) -> Result<GradientsParams, Outcome> {
        let mut loss: Option<Tensor<1>> = None;
        for mp in &self.params {
            if self.lost.contains(&(mp.rank, mp.idx)) {
                continue;
            }
            let term = match mp.rank {
                1 => loss_term(&self.model.p1[mp.idx], &mp.grad, &self.home),
                2 => loss_term(&self.model.p2[mp.idx], &mp.grad, &self.home),
                _ => loss_term(&self.model.p3[mp.idx], &mp.grad, &self.home),
            };
            loss = Some(match loss {
                None => term,
                Some(l) => l + term,
            });
        }
        let Some(loss) = loss else {
            return Err(Outcome::Error("the model has no params".into()));
        };
        Ok(GradientsParams::from_grads(loss.backward(), &self.model))
    }

    /// The live optimizer's `step(lr, model, grads)`; after `backward` ops, with the grads of
    /// this pass accumulated into theirs (`GradientsAccumulator::accumulate`, then `grads()`).
    pub(super) fn step(&mut self, spec: &OptimizerSpec) -> Outcome {
        let mut gp = match self.backward_grads() {
            Ok(gp) => gp,
            Err(o) => return o,
        };
        if let Some(mut acc) = self.accumulated.take() {
            acc.accumulate(&self.model, gp);
            gp = acc.grads();
        }
        let at = self.optimizer_at(spec);
        // The optimizer leaves the list while it steps (model_op borrows self), then goes back
        // to the same place, so its state persists.
        let (key, mut opt) = self.optims.remove(at);
        let lr = spec.lr;
        let outcome = self.model_op(|m| opt.step(lr, m, gp));
        self.optims.insert(at, (key, opt));
        outcome
    }

    /// Gradient accumulation as the burn book writes it: the pass's `GradientsParams` given to a
    /// `GradientsAccumulator` (keyed by ParamId, over the params the model holds now).
    pub(super) fn backward(&mut self) -> Outcome {
        let gp = match self.backward_grads() {
            Ok(gp) => gp,
            Err(o) => return o,
        };
        let mut acc = self.accumulated.take().unwrap_or_default();
        acc.accumulate(&self.model, gp);
        self.accumulated = Some(acc);
        Outcome::Ok
    }

    /// A burn optimizer holds no learning rate (`Optimizer::step(lr, ..)` takes it each time):
    /// the live optimizer is refiled under `to`, so the next `step` with lr `to` passes `to` to it.
    pub(super) fn set_lr(&mut self, spec: &OptimizerSpec, to: f64) -> Outcome {
        let at = self.optimizer_at(spec);
        self.optims[at].0 = spec.with_lr(to).key();
        Outcome::Ok
    }

    /// `save`: `model.clone().into_record()` or `save_file`, and `<name>.<p>` bound to what the
    /// checkpoint holds, read by loading it into a model (a ModuleRecord has no per-tensor
    /// reader): a clone of the model with fresh layers for a record (support.rs `read_record`:
    /// a load into the clone's own layers would write into the model's running states), a fresh
    /// one for a file. `<name>.<layer>.<stat>` follow the params.
    pub(super) fn save(&mut self, name: &str, to: CheckpointStore) -> Outcome {
        if let Err(o) = self.refuse_lost_params() {
            return o;
        }
        let taken = catch_unwind(AssertUnwindSafe(|| -> Result<(Saved, Model), String> {
            match to {
                CheckpointStore::Memory => {
                    let record = self.model.clone().into_record();
                    let read = read_record(self.model.clone(), record.clone())?;
                    Ok((Saved::Record(record), read))
                }
                CheckpointStore::File => {
                    let path = self.checkpoints.next()?;
                    let read = save_and_load(self.model.clone(), &path, &self.home, self.dtype)?;
                    Ok((Saved::File(path), read))
                }
            }
        }));
        let (saved, read) = match taken {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => return Outcome::Error(e),
            Err(p) => return Outcome::Error(panic_message(p)),
        };
        self.saved.insert(name.to_string(), saved);
        let entries: Vec<(String, Val)> = self
            .params
            .iter()
            .filter(|mp| !self.lost.contains(&(mp.rank, mp.idx)))
            .map(|mp| (format!("{name}.{}", mp.name), read.get(mp.rank, mp.idx)))
            .collect();
        for (n, v) in entries {
            self.bind(n, Slot::Own(v));
        }
        self.bind_stats(name, &read, false);
        Outcome::Ok
    }

    /// `load`: `model.load_record(record)` or `model.load_file(path)`, rebinding the model. The
    /// layers' running states take the record's values in place (running.rs `Module::map`): a
    /// module clone still sharing them sees the load too.
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
            Some(Saved::Record(record)) => {
                let record = record.clone();
                self.model_op(|m| m.load_record(record))
            }
            Some(Saved::File(path)) => {
                let path = path.clone();
                self.model_op(|m| m.load_file(&path))
            }
        }
    }
}
