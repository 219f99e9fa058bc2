//! The model's layers (a program's `[layers]`) and the `forward` op of a [`CandleSession`]:
//! candle-nn's `BatchNorm` and `Dropout`, run with `ModuleT::forward_t(&x, train)`.
//!
//! candle has no module modes: a candle user threads a `train: bool` through `forward_t` (the
//! session's `train` flag, which `valid` and `train` set).

use super::{msg, CandleSession, Handle, R};
use crate::support::{batch_norm_layer, var_of};
use aliasfuzz_protocol::{LayerKind, LayerSpec, Outcome, BATCH_NORM_EPS};
use candle_nn::{BatchNorm, Dropout, ModuleT};

/// One built layer.
pub(super) enum Layer {
    BatchNorm(BatchNorm),
    /// The layer and its `p` (`Dropout` keeps it private), to name candle's refusal of p = 1.
    Dropout(Dropout, f32),
}

impl CandleSession {
    /// Builds `spec`'s layer. A batch norm's running statistics are bound under their names to
    /// the Vars the VarMap holds (the model's names, after the params).
    pub(super) fn add_layer(&mut self, spec: &LayerSpec) -> Result<(), String> {
        let name = &spec.name;
        if self.layers.contains_key(name) {
            return Err(format!("duplicate layer name {name:?}"));
        }
        if let Some(taken) = spec.state_names().into_iter().find(|n| self.bound.contains_key(n)) {
            return Err(format!("layer {name:?}: {taken:?} is already a tensor name"));
        }
        let layer = match spec.kind {
            LayerKind::BatchNorm => {
                let features = spec.features.ok_or_else(|| format!("batch norm {name:?} has no features"))?;
                let momentum = spec.momentum.ok_or_else(|| format!("batch norm {name:?} has no momentum"))?;
                let bn = batch_norm_layer(&self.varmap, name, features, momentum, BATCH_NORM_EPS, self.dtype, &self.home)
                    .map_err(|e| format!("creating layer {name:?}: {}", msg(e)))?;
                for stat in spec.state_names() {
                    let var = var_of(&self.varmap, &stat).expect("candle_nn::batch_norm puts its stats in the VarMap");
                    self.stats.push(stat.clone());
                    self.bind(stat, Handle::Var(var));
                }
                Layer::BatchNorm(bn)
            }
            LayerKind::Dropout => {
                let p = spec.p.ok_or_else(|| format!("dropout {name:?} has no p"))? as f32;
                // `Dropout::new` takes any p (candle-nn ops.rs): only the training forward checks it.
                Layer::Dropout(Dropout::new(p), p)
            }
        };
        self.layers.insert(name.clone(), layer);
        Ok(())
    }

    /// `let y = layer.forward_t(&x, train)?`. A batch norm in training normalises with the
    /// batch's statistics and `Var::set`s its running ones (batch_norm.rs `forward_train`); in
    /// eval it reads them (`forward_eval`). A dropout in eval returns `xs.clone()` (the input's
    /// own storage), in training `ops::dropout` (a product with a random mask).
    pub(super) fn forward(&mut self, name: &str, layer: &str, input: &str) -> R<()> {
        let x = self.get(input)?.tensor().clone();
        let train = self.train;
        let y = match self.layers.get(layer) {
            None => return Err(Outcome::Error(format!("no layer {layer:?}"))),
            Some(Layer::BatchNorm(bn)) => bn.forward_t(&x, train).map_err(|e| Outcome::Error(msg(e)))?,
            Some(Layer::Dropout(d, p)) => d.forward_t(&x, train).map_err(|e| dropout_refusal(e, *p, train))?,
        };
        self.bind(name.to_string(), Handle::Tensor(y));
        Ok(())
    }
}

/// candle-nn ops.rs `dropout` bails for p outside [0, 1) ("dropout probability has to be in
/// [0, 1)"): a p candle does not take is `unsupported`, with candle's own message. Any other
/// error stays an error.
fn dropout_refusal(e: candle_core::Error, p: f32, train: bool) -> Outcome {
    let text = msg(e);
    if train && !(0.0..1.0).contains(&p) {
        Outcome::Unsupported(format!("{text} (candle-nn ops.rs `dropout`, which Dropout::forward_t calls in training)"))
    } else {
        Outcome::Error(text)
    }
}
