//! The model's layers of a [`BurnSession`]: burn's `BatchNorm` and `Dropout` in the model's
//! `bn` / `dropout` fields, their running statistics bound as names, and the `forward` op.
//!
//! A statistic name reads the layer's `RunningState::value()` each time it is observed, never a
//! copy: a `RunningState` is an `Arc` shared by every clone of its module (burn-core
//! module/param/running.rs, `#[derive(Clone)]`), so whether a module clone's statistics follow
//! the original's forward is burn's to say.

use super::outcome_text;
use super::spelling::{erased, type_of, Spelled};
use super::{BurnSession, Slot};
use crate::model::{batch_norm, dropout, record_round_trip, save_and_load, Model};
use crate::vals::{IntoVal, Val};
use aliasfuzz_protocol::transcript::f64_lit;
use aliasfuzz_protocol::{LayerKind, LayerSpec, Method, Outcome};
use burn::module::{Module, ModuleMapper, Param, RunningState};
use burn::nn::BatchNorm;
use burn::nn::{BatchNormConfig, DropoutConfig};
use burn::tensor::FloatDType;
use burn::tensor::Tensor;

/// One declared layer, in the case's order, and where the model holds it.
pub(super) struct ModelLayer {
    pub name: String,
    pub spec: LayerSpec,
    pub at: LayerAt,
}

pub(super) enum LayerAt {
    /// `model.bn[i]`.
    BatchNorm(usize),
    /// `model.dropout[i]`.
    Dropout(usize),
    /// A layer burn refused to build (`DropoutConfig::init` panics for p outside [0, 1)): not in
    /// the model; its forward answers `unsupported` with burn's message.
    Refused(String),
}

/// A batch norm's running statistic, by the case's name for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stat {
    Mean,
    Var,
}

impl Stat {
    pub const ALL: [Stat; 2] = [Stat::Mean, Stat::Var];

    pub fn name(self) -> &'static str {
        match self {
            Stat::Mean => "running_mean",
            Stat::Var => "running_var",
        }
    }

    /// The layer's `RunningState` of this statistic.
    pub fn of(self, bn: &BatchNorm) -> &RunningState<Tensor<1>> {
        match self {
            Stat::Mean => &bn.running_mean,
            Stat::Var => &bn.running_var,
        }
    }

    /// Its current value: `RunningState::value()`, which "might be outdated by one update"
    /// (running.rs): an update waits in a per-thread map until the next `value_sync`, `valid`,
    /// `train` or update on the thread. Read as burn gives it, without syncing (a sync would
    /// change what a later record holds).
    pub fn value(self, bn: &BatchNorm) -> Tensor<1> {
        self.of(bn).value()
    }
}

impl BurnSession {
    /// Builds the layer into the model and binds its statistics (`<layer>.running_mean`,
    /// `<layer>.running_var`), after the params.
    pub(super) fn add_layer(&mut self, spec: &LayerSpec) -> Result<(), String> {
        if self.slots.contains_key(&spec.name) || self.layers.iter().any(|l| l.name == spec.name) {
            return Err(format!(
                "layer {:?} is declared twice or named like a tensor",
                spec.name
            ));
        }
        let at = match spec.kind {
            LayerKind::BatchNorm => {
                let features = spec
                    .features
                    .ok_or_else(|| format!("{}: a batch norm needs features", spec.name))?;
                let momentum = spec
                    .momentum
                    .ok_or_else(|| format!("{}: a batch norm needs momentum", spec.name))?;
                let (layer, text) = self.new_batch_norm(features, momentum);
                self.tx.line(format!("model.bn.push({text});"));
                let layer = layer.map_err(|o| format!("{}: BatchNormConfig::init: {}", spec.name, outcome_text(&o)))?;
                self.model.bn.push(layer);
                LayerAt::BatchNorm(self.model.bn.len() - 1)
            }
            LayerKind::Dropout => {
                let p = spec.p.ok_or_else(|| format!("{}: a dropout needs p", spec.name))?;
                // burn's own check decides, at the call a user makes; a refusal keeps the session
                // open and is the forward's answer.
                let (layer, text) = call!([p = p => f64_lit(p)] DropoutConfig::new(p).init());
                match layer {
                    Ok(layer) => {
                        self.tx.line(format!("model.dropout.push({text});"));
                        self.model.dropout.push(layer);
                        LayerAt::Dropout(self.model.dropout.len() - 1)
                    }
                    Err(e) => {
                        let why = format!(
                            "burn-nn DropoutConfig::init refuses p = {p} ({}; modules/dropout.rs), so no \
                             Dropout layer exists to run",
                            outcome_text(&e)
                        );
                        // Not made in the reproducer either: its forward is `unsupported`.
                        self.tx.line(format!("// {text} panics: {}", why.replace('\n', " ")));
                        LayerAt::Refused(why)
                    }
                }
            }
        };
        if let LayerAt::BatchNorm(i) = at {
            for stat in Stat::ALL {
                self.bind(format!("{}.{}", spec.name, stat.name()), Slot::ModelStat(i, stat));
            }
        }
        self.layers.push(ModelLayer {
            name: spec.name.clone(),
            spec: spec.clone(),
            at,
        });
        Ok(())
    }

    /// A batch norm as the case declares one, in the program's dtype:
    /// `BatchNormConfig::new(2).with_momentum(0.1).init(&dev)` (epsilon at its default, 1e-5).
    /// The config makes its floats in the device's default dtype (f32) and burn-core 0.22.1 has
    /// no module cast (store/mod.rs names a `module.cast` it lacks), so in another dtype they are
    /// cast by a `ModuleMapper`: params by `Param::map` outside the graph (as burn's optimizer
    /// updates one), running states by their own `map`.
    pub(super) fn new_batch_norm(&mut self, features: usize, momentum: f64) -> Spelled<BatchNorm> {
        if self.dtype == FloatDType::F32 {
            return call!([features = features => features.to_string(),
                momentum = momentum => f64_lit(momentum), dev = &self.home => "&dev"]
                BatchNormConfig::new(features).with_momentum(momentum).init(dev));
        }
        call!([features = features => features.to_string(), momentum = momentum => f64_lit(momentum),
            dev = &self.home => "&dev", dtype = self.dtype => "dtype"]
        {
            struct Cast(FloatDType);
            impl ModuleMapper for Cast {
                fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
                    let to = self.0;
                    param.map(|t| {
                        let (require_grad, autodiff) = (t.is_require_grad(), t.is_autodiff());
                        let out = t.inner().cast(to);
                        let out = if autodiff { Tensor::from_inner(out) } else { out };
                        if require_grad { out.require_grad() } else { out }
                    })
                }
            }
            BatchNormConfig::new(features).with_momentum(momentum).init(dev).map(&mut Cast(dtype))
        })
    }

    /// `forward`: `BatchNorm::forward(x)` / `Dropout::forward(x)` on a handle to the input (a
    /// param's `val()`), as `layer.forward(x.clone())` in a user's loop. burn decides the mode:
    /// training only when `input.device().is_autodiff()` and the layer's `training` flag is on
    /// (batch.rs, dropout.rs); a training batch norm updates its running states itself.
    pub(super) fn forward(&mut self, name: &str, layer: &str, input: &str) -> Outcome {
        if let Some(why) = &self.layers_lost {
            return Outcome::Skipped(format!("the model's layers were lost earlier ({why})"));
        }
        let Some(l) = self.layers.iter().find(|l| l.name == layer) else {
            return Outcome::Error(format!("no layer named {layer}"));
        };
        let x = match self.get(input) {
            Ok(v) => v,
            Err(o) => return o,
        };
        let at = match &l.at {
            LayerAt::BatchNorm(i) => (true, *i),
            LayerAt::Dropout(i) => (false, *i),
            LayerAt::Refused(why) => return Outcome::Unsupported(why.clone()),
        };
        // `let y: Tensor<2> = model.bn[0].forward(x.clone());`
        let xs = self.value_spelling(input);
        let (r, text) = match at {
            (true, i) => {
                let (layer, spelled) = (&self.model.bn[i], format!("model.bn[{i}]"));
                crate::on_val!(x, param p => erased(call!([layer = layer => spelled.clone(), x = p.val() => xs.clone()] layer.forward(x))),
                    tensor t => erased(call!([layer = layer => spelled.clone(), x = t => xs.clone()] layer.forward(x))))
            }
            (false, i) => {
                let (layer, spelled) = (&self.model.dropout[i], format!("model.dropout[{i}]"));
                crate::on_val!(x, param p => erased(call!([layer = layer => spelled.clone(), x = p.val() => xs.clone()] layer.forward(x))),
                    tensor t => erased(call!([layer = layer => spelled.clone(), x = t => xs.clone()] layer.forward(x))))
            }
        };
        let var = self.tx.var(name);
        match r {
            Ok(out) => {
                self.tx.line(format!("let {var}: {} = {text};", type_of(&out)));
                self.bind(name.to_string(), Slot::Own(out));
                Outcome::Ok
            }
            Err(o) => {
                self.tx.line(format!("let {var} = {text};"));
                o
            }
        }
    }

    /// `let c_bn_running_mean = c_model.bn[0].running_mean.clone();` for every statistic
    /// [`BurnSession::bind_stats`] bound live under `prefix` from the module clone `clone_var`:
    /// a `RunningState` clone shares the layer's state (an `Arc`).
    pub(super) fn spell_live_stats(&mut self, prefix: &str, clone_var: &str) {
        let mut lines = vec![];
        for l in &self.layers {
            if let LayerAt::BatchNorm(i) = l.at {
                for stat in Stat::ALL {
                    lines.push((
                        format!("{prefix}.{}.{}", l.name, stat.name()),
                        format!("{clone_var}.bn[{i}].{}.clone()", stat.name()),
                    ));
                }
            }
        }
        for (name, place) in lines {
            let v = self.tx.var(&name);
            self.tx.line(format!("let {v} = {place};"));
        }
    }

    /// Binds `<prefix>.<layer>.<stat>` to each statistic of `model`'s batch norms, in the case's
    /// layer order: the layer itself (a module clone's, sharing the model's running states as
    /// burn shares them), read when used.
    pub(super) fn bind_stats(&mut self, prefix: &str, model: &Model) {
        let mut bound = vec![];
        for l in &self.layers {
            if let LayerAt::BatchNorm(i) = l.at {
                for stat in Stat::ALL {
                    let slot = Slot::LayerStat(Box::new(model.bn[i].clone()), stat);
                    bound.push((format!("{prefix}.{}.{}", l.name, stat.name()), slot));
                }
            }
        }
        for (n, slot) in bound {
            self.bind(n, slot);
        }
    }

    /// The statistic a slot reads, from the layer that holds it now.
    pub(super) fn stat_value(&self, slot: &Slot) -> Option<Val> {
        match slot {
            Slot::ModelStat(i, stat) => Some(stat.value(&self.model.bn[*i]).into_val()),
            Slot::LayerStat(bn, stat) => Some(stat.value(bn).into_val()),
            _ => None,
        }
    }

    /// `unsupported` for an in-place write into a running statistic. burn has no call that sets
    /// a `RunningState`'s value (running.rs): `update` hands in this thread's contribution to an
    /// average taken at the next sync ("the state value is the average of all updates on all
    /// threads"), a mapper maps every float of the module, and `RunningState::new` builds
    /// another state.
    pub(super) fn refuse_stat_write(&self, target: &str) -> Option<Outcome> {
        matches!(self.slots.get(target), Some(Slot::ModelStat(..) | Slot::LayerStat(..))).then(|| {
            Outcome::Unsupported(format!(
                "{target} is a batch norm's RunningState: burn has no call that writes one in place \
                 (burn-core module/param/running.rs: `update` adds this thread's value to an average \
                 taken at the next sync, `new` builds another state)"
            ))
        })
    }

    /// `state_dict` / `save_load` of a module clone's statistic: the record (or the file) of a
    /// one-layer model read back, and the statistic's value read out of the loaded layer. Not
    /// spelled yet: the transcript holds the clone's `RunningState`, not its layer.
    pub(super) fn snapshot_stat(&mut self, of: &str, method: Method) -> Result<Val, Outcome> {
        self.complete = false;
        let (model, stat) = match self.slots.get(of) {
            Some(Slot::LayerStat(bn, stat)) => (
                Model {
                    bn: vec![BatchNorm::clone(bn)],
                    ..Model::empty()
                },
                *stat,
            ),
            _ => {
                return Err(Outcome::Error(format!(
                    "internal: {of} is not a clone's running statistic"
                )))
            }
        };
        let loaded = match method {
            Method::StateDict => record_round_trip(model),
            _ => self
                .checkpoints
                .next()
                .and_then(|path| save_and_load(model, &path, &self.home, self.dtype)),
        };
        loaded.map(|m| stat.value(&m.bn[0]).into_val()).map_err(Outcome::Error)
    }

    /// After a panic consumed the model: its layers are rebuilt from their specs to keep the
    /// model's layout (never observed: every statistic name is lost, forwards are skipped).
    pub(super) fn lose_layers(&mut self, m: &mut Model, msg: &str) {
        for l in &self.layers {
            match l.at {
                LayerAt::BatchNorm(_) => {
                    let (features, momentum) = (l.spec.features.unwrap_or(1), l.spec.momentum.unwrap_or(0.1));
                    m.bn.push(batch_norm(features, momentum, self.dtype, &self.home))
                }
                LayerAt::Dropout(_) => m.dropout.push(dropout(l.spec.p.unwrap_or(0.0))),
                LayerAt::Refused(_) => {}
            }
        }
        if !self.layers.is_empty() {
            self.layers_lost = Some(format!("the model was consumed by a call that failed: {msg}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aliasfuzz_protocol::{Op, Program, Session};
    use burn::tensor::Device;

    fn session(program: serde_json::Value) -> BurnSession {
        let program: Program = serde_json::from_value(program).unwrap();
        let devices = super::super::DeviceSpelling {
            home: "Device::flex().autodiff()".into(),
            alt: None,
        };
        BurnSession::new(Device::flex().autodiff(), None, &program, devices).unwrap()
    }

    fn op(v: serde_json::Value) -> Op {
        serde_json::from_value(v).unwrap()
    }

    fn values(t: burn::tensor::Tensor<1>) -> Vec<f32> {
        t.to_data().try_to_vec::<f32>().unwrap()
    }

    /// burn's BatchNorm has gamma (ones) and beta (zeros) params that are no names of the case:
    /// the loss is over the case's params only, so a step after a training forward leaves them
    /// (burn-optim: a param without a gradient is not updated).
    #[test]
    fn steps_leave_the_batch_norms_affine_params() {
        let mut s = session(serde_json::json!({
            "tensors": [
                {"name": "w", "kind": "param", "shape": [2], "value": [1.0, 2.0]},
                {"name": "x", "kind": "buffer", "shape": [2, 2], "value": [1.0, 2.0, 3.0, 6.0]}
            ],
            "layers": [{"name": "bn", "kind": "batch_norm", "features": 2, "momentum": 0.5}],
            "ops": []
        }));
        assert_eq!(s.names(), ["w", "x", "bn.running_mean", "bn.running_var"]);
        let forward = op(serde_json::json!({"op": "forward", "name": "y", "layer": "bn", "input": "x"}));
        assert!(matches!(s.apply(&forward), Outcome::Ok));
        let step = op(
            serde_json::json!({"op": "step", "optimizer": "adam", "lr": 0.5, "momentum": 0.0,
            "dampening": 0.0, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1}),
        );
        assert!(matches!(s.apply(&step), Outcome::Ok));
        assert_ne!(s.observe("w").value, Some(vec![1.0, 2.0]), "the step trains w");
        assert_eq!(values(s.model.bn[0].gamma.val()), [1.0, 1.0]);
        assert_eq!(values(s.model.bn[0].beta.val()), [0.0, 0.0]);
    }

    /// A p = 1 dropout is refused by burn at `DropoutConfig::init`: the session opens and the
    /// forward answers unsupported with burn's message.
    #[test]
    fn a_refused_dropout_answers_unsupported() {
        let mut s = session(serde_json::json!({
            "tensors": [{"name": "x", "kind": "buffer", "shape": [2], "value": [1.0, 2.0]}],
            "layers": [{"name": "drop", "kind": "dropout", "p": 1.0}],
            "ops": []
        }));
        let forward = op(serde_json::json!({"op": "forward", "name": "y", "layer": "drop", "input": "x"}));
        match s.apply(&forward) {
            Outcome::Unsupported(why) => assert!(why.contains("range [0, 1)"), "{why}"),
            _ => panic!("the forward of a refused dropout was not unsupported"),
        }
    }
}
