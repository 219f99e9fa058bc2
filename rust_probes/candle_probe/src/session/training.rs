//! The training-loop ops of a [`CandleSession`]: the live optimizers (`step`, `backward`, `set_lr`) and the
//! model's checkpoints (`save`, `load`), each the candle call a user writes.

use super::{ce, Checkpoint, CandleSession, Handle, R};
use crate::support::{accumulate, add_grads, loss, Opt};
use aliasfuzz_protocol::{CheckpointStore, OptimizerKind, OptimizerSpec, Outcome};
use std::collections::HashMap;

impl CandleSession {
    /// The live optimizer of `spec`, made over the VarMap's vars if none is.
    fn optimizer(&mut self, spec: &OptimizerSpec) -> R<&mut Opt> {
        let key = spec.key();
        if !self.optimizers.contains_key(&key) {
            let opt = match spec.optimizer {
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
                kind => ce(Opt::new(kind.into(), &self.varmap, spec.lr, spec.betas, spec.eps, spec.weight_decay))?,
            };
            self.optimizers.insert(key.clone(), opt);
        }
        Ok(self.optimizers.get_mut(&key).unwrap())
    }

    /// `opt.backward_step(&loss)`, or after `backward` ops the sum of their gradients and this
    /// pass's (`add_grads`) given to `opt.step(&grads)`.
    pub(super) fn step(&mut self, spec: &OptimizerSpec) -> R<()> {
        // `momentum` and `dampening` only matter to `sgd_momentum`, which candle does not have.
        self.optimizer(spec)?;
        let pending = self.pending.take();
        let Some(loss) = ce(loss(&self.varmap, &self.grads))? else {
            return Ok(()); // a model without params: nothing to train
        };
        match pending {
            None => ce(self.optimizer(spec)?.backward_step(&loss)),
            Some(acc) => {
                let sum = ce(loss.backward().and_then(|g| add_grads(acc, &g, &self.varmap)))?;
                ce(self.optimizer(spec)?.step(&sum))
            }
        }
    }

    /// `loss.backward()` without a step, its GradStore added to the pending one: candle has no
    /// gradient accumulator, and this is what its users write (`support::accumulate`).
    pub(super) fn backward(&mut self) -> R<()> {
        let loss = ce(loss(&self.varmap, &self.grads))?;
        self.pending = ce(accumulate(self.pending.take(), loss, &self.varmap))?;
        Ok(())
    }

    /// `opt.set_learning_rate(to)` (candle#687: the optimizer keeps its state), refiled under
    /// the new learning rate.
    pub(super) fn set_lr(&mut self, spec: &OptimizerSpec, to: f64) -> R<()> {
        self.optimizer(spec)?.set_learning_rate(to);
        let opt = self.optimizers.remove(&spec.key()).expect("made above");
        self.optimizers.insert(spec.with_lr(to).key(), opt);
        Ok(())
    }

    /// `save`: the checkpoint, and `<name>.<p>` bound to what it holds for every param and layer
    /// stat (`model_names`).
    pub(super) fn save(&mut self, name: &str, to: CheckpointStore) -> R<()> {
        let (checkpoint, entries): (Checkpoint, HashMap<String, Handle>) = match to {
            CheckpointStore::Memory => {
                let map = self.varmap.data().lock().unwrap().clone();
                let entries = map.iter().map(|(k, v)| (k.clone(), Handle::Var(v.clone()))).collect();
                (Checkpoint::Memory(map), entries)
            }
            CheckpointStore::File => {
                if self.checkpoint_dir.is_none() {
                    let dir = tempfile::tempdir().map_err(|e| Outcome::Error(format!("tempdir: {e}")))?;
                    self.checkpoint_dir = Some(dir);
                }
                let path = self.checkpoint_dir.as_ref().unwrap().path().join(format!("{name}.safetensors"));
                ce(self.varmap.save(&path))?;
                let read = ce(candle_core::safetensors::load(&path, &self.home))?;
                let entries = read.into_iter().map(|(k, t)| (k, Handle::Tensor(t))).collect();
                (Checkpoint::File(path), entries)
            }
        };
        self.checkpoints.insert(name.to_string(), checkpoint);
        for p in self.model_names() {
            if let Some(h) = entries.get(&p) {
                self.bind(format!("{name}.{p}"), h.clone());
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
        match self.checkpoints.get(from) {
            None => Err(Outcome::Skipped(format!("no checkpoint named {from} (its save did not run here)"))),
            Some(Checkpoint::Memory(map)) => {
                let map = map.clone();
                ce(self.varmap.set(map.iter().map(|(k, v)| (k, v.as_tensor()))))
            }
            Some(Checkpoint::File(path)) => {
                let path = path.clone();
                ce(self.varmap.load(&path))
            }
        }
    }
}
