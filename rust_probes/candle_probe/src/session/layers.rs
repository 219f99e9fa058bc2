//! The model's layers (a program's `[layers]`) and the `forward` op of a [`CandleSession`]:
//! candle-nn's `BatchNorm` and `Dropout`, run with `ModuleT::forward_t(&x, train)`.
//!
//! candle has no module modes: a candle user threads a `train: bool` through `forward_t` (the
//! session's `train` flag, which `valid` and `train` set).

// A struct literal spells each field `f: f`: the transcript puts the value in for the second.
#![allow(clippy::redundant_field_names)]

use super::{outcome_text, CandleSession, Handle, R};
use aliasfuzz_protocol::transcript::{f32_lit, f64_lit, str_lit};
use aliasfuzz_protocol::{LayerKind, LayerSpec, Outcome, BATCH_NORM_EPS};
use candle_nn::{BatchNorm, Dropout, ModuleT};

/// One built layer, with its variable.
pub(super) enum Layer {
    BatchNorm(BatchNorm, String),
    /// The layer and its `p` (`Dropout` keeps it private), to name candle's refusal of p = 1.
    Dropout(Dropout, f32, String),
}

impl CandleSession {
    /// Builds `spec`'s layer through the model's VarMap, as a candle model builds its layers. A
    /// batch norm without affine weight and bias gets `running_mean` (zeros) and `running_var`
    /// (ones) from `vb.pp(name)`, so the VarMap holds them as Vars under `<name>.running_mean` /
    /// `<name>.running_var`, and the layer keeps those very Vars (`Var::from_tensor` of a
    /// variable's tensor is that variable: candle#1504, candle#2124); they are bound under their
    /// names (the model's names, after the params). `forward_t(.., true)` updates them in place
    /// with `Var::set` (batch_norm.rs `forward_train`). The statistics are made in the
    /// program's dtype, the VarBuilder's.
    pub(super) fn add_layer(&mut self, spec: &LayerSpec) -> Result<(), String> {
        let name = &spec.name;
        if self.layers.contains_key(name) {
            return Err(format!("duplicate layer name {name:?}"));
        }
        if let Some(taken) = spec.state_names().into_iter().find(|n| self.bound.contains_key(n)) {
            return Err(format!("layer {name:?}: {taken:?} is already a tensor name"));
        }
        let v = self.tx.var(name);
        let ctx = |e: Outcome| format!("creating layer {name:?}: {}", outcome_text(e));
        let layer = match spec.kind {
            LayerKind::BatchNorm => {
                let features = spec
                    .features
                    .ok_or_else(|| format!("batch norm {name:?} has no features"))?;
                let momentum = spec
                    .momentum
                    .ok_or_else(|| format!("batch norm {name:?} has no momentum"))?;
                let (bn, text) = call!([features = features => features.to_string(), eps = BATCH_NORM_EPS => f64_lit(BATCH_NORM_EPS),
                    momentum = momentum => f64_lit(momentum), varmap = &self.varmap => "&varmap", dt = self.dtype => "dt",
                    dev = &self.home => "&dev", key = name.as_str() => str_lit(name)]
                    candle_nn::batch_norm(
                        features,
                        candle_nn::BatchNormConfig { eps: eps, remove_mean: true, affine: false, momentum: momentum },
                        candle_nn::VarBuilder::from_varmap(varmap, dt, dev).pp(key),
                    )?);
                self.tx.line(format!("let {v} = {text};"));
                let bn = bn.map_err(ctx)?;
                for stat in spec.state_names() {
                    let sv = self.tx.var(&stat);
                    let var = self.model_var_line(&stat, &sv).map_err(ctx)?;
                    self.stats.push(stat.clone());
                    self.bind(stat, Handle::Var(var));
                }
                Layer::BatchNorm(bn, v)
            }
            LayerKind::Dropout => {
                let p = spec.p.ok_or_else(|| format!("dropout {name:?} has no p"))? as f32;
                // `Dropout::new` takes any p (candle-nn ops.rs): only the training forward checks it.
                let (d, text) = call!([p = p => f32_lit(p)] candle_nn::Dropout::new(p));
                self.tx.line(format!("let {v} = {text};"));
                Layer::Dropout(d.map_err(ctx)?, p, v)
            }
        };
        self.layers.insert(name.clone(), layer);
        if self.layers.len() == 1 {
            self.tx
                .line("let train = true;  // candle has no module modes: what every forward_t is given");
        }
        Ok(())
    }

    /// `let y = layer.forward_t(&x, train)?`. A batch norm in training normalises with the
    /// batch's statistics and `Var::set`s its running ones (batch_norm.rs `forward_train`); in
    /// eval it reads them (`forward_eval`). A dropout in eval returns `xs.clone()` (the input's
    /// own storage), in training `ops::dropout` (a product with a random mask).
    pub(super) fn forward(&mut self, name: &str, layer: &str, input: &str) -> R<()> {
        let x = self.get(input)?.tensor().clone();
        let xs = self.t(input);
        let train = self.train;
        let (r, text) = match self.layers.get(layer) {
            None => return Err(Outcome::Error(format!("no layer {layer:?}"))),
            Some(Layer::BatchNorm(bn, v)) => {
                call!([layer = bn => v.clone(), x = &x => xs, train = train => "train"] layer.forward_t(x, train)?)
            }
            Some(Layer::Dropout(d, p, v)) => {
                let (r, text) =
                    call!([layer = d => v.clone(), x = &x => xs, train = train => "train"] layer.forward_t(x, train)?);
                (r.map_err(|e| dropout_refusal(e, *p, train)), text)
            }
        };
        let v = self.tx.var(name);
        self.tx.line(format!("let {v} = {text};"));
        self.bind(name.to_string(), Handle::Tensor(r?));
        Ok(())
    }
}

/// candle-nn ops.rs `dropout` bails for p outside [0, 1) ("dropout probability has to be in
/// [0, 1)"): a p candle does not take is `unsupported`, with candle's own message. Any other
/// error stays an error.
fn dropout_refusal(e: Outcome, p: f32, train: bool) -> Outcome {
    match e {
        Outcome::Error(text) if train && !(0.0..1.0).contains(&p) => Outcome::Unsupported(format!(
            "{text} (candle-nn ops.rs `dropout`, which Dropout::forward_t calls in training)"
        )),
        other => other,
    }
}
