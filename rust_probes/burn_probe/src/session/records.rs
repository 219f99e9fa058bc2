//! A [`BurnSession`]'s checkpoints read back, spelled: burn 0.22.1's `ModuleRecord` has no public
//! per-tensor reader (burn-core store/mod.rs), so a user reads one by loading it into a model and
//! reading the model. A record (`into_record`) is loaded into the model's params with fresh
//! layers (a load maps the destination's running states in place, running.rs `Module::map`: into
//! the model's own, through a clone); a file (`save_file`) into a fresh model of the same layout,
//! what a user restoring a checkpoint builds from the model's config.

use super::layers::{LayerAt, Stat};
use super::spelling::{dims_lit, erased, Spelled};
use super::BurnSession;
use crate::model::Model;
use crate::vals::Val;
use aliasfuzz_protocol::transcript::f64_lit;
use aliasfuzz_protocol::Outcome;
use burn::module::{Module, Param, ParamId};
use burn::nn::{BatchNorm, Dropout, DropoutConfig, Initializer};
use burn::tensor::{DType, Device, FloatDType, Shape, Tensor};
use std::path::PathBuf;

/// What is read out of a loaded model.
#[derive(Clone, Copy)]
pub(super) enum Entry {
    /// The param `model.p<rank>[i]` (a handle clone).
    Param(usize, usize),
    /// The value of `model.bn[i]`'s running statistic.
    Stat(usize, Stat),
}

/// `model.p1[i].clone()` / `model.bn[i].running_mean.value()` of `read` (spelled `text`).
pub(super) fn read_entry(read: &Model, text: &str, entry: Entry) -> Spelled<Val> {
    match entry {
        Entry::Param(1, i) => erased(call!([m = read => text, i = i => i.to_string()] m.p1[i].clone())),
        Entry::Param(2, i) => erased(call!([m = read => text, i = i => i.to_string()] m.p2[i].clone())),
        Entry::Param(_, i) => erased(call!([m = read => text, i = i => i.to_string()] m.p3[i].clone())),
        Entry::Stat(i, Stat::Mean) => {
            erased(call!([m = read => text, i = i => i.to_string()] m.bn[i].running_mean.value()))
        }
        Entry::Stat(i, Stat::Var) => {
            erased(call!([m = read => text, i = i => i.to_string()] m.bn[i].running_var.value()))
        }
    }
}

/// Spelled values as one `vec![..]`.
fn spelled_vec<T>(items: Vec<Spelled<T>>) -> Spelled<Vec<T>> {
    let texts: Vec<String> = items.iter().map(|(_, t)| t.clone()).collect();
    let text = format!("vec![{}]", texts.join(", "));
    (items.into_iter().map(|(r, _)| r).collect(), text)
}

/// A fresh lazy param shaped like `p`, zeros in `dtype` on `dev` (a new ParamId): what a model
/// built from its config holds before a load. `Initializer::Zeros` takes no dtype (the device's
/// default, f32): another dtype's is `Param::uninitialized` of `zeros` in it.
fn zeros_like<const D: usize>(p: &Param<Tensor<D>>, dtype: FloatDType, dev: &Device) -> Spelled<Param<Tensor<D>>> {
    let dims: [usize; D] = p.lazy_shape().as_slice().try_into().expect("a rank-D param");
    let dl = dims_lit(&dims);
    if dtype == FloatDType::F32 {
        return call!([dims = dims => dl, dev = dev => "&dev"] Initializer::Zeros.init(dims, dev));
    }
    call!([dims = dims => dl, dev = dev => "&dev", dtype = dtype => "dtype"]
    Param::uninitialized(
        ParamId::new(),
        move |device: &Device, require_grad: bool| {
            let t = Tensor::zeros(dims, (device, DType::from(dtype)));
            if require_grad { t.require_grad() } else { t }
        },
        dev.clone(),
        true,
        Shape::new(dims),
    ))
}

impl BurnSession {
    /// The case's layers as the model holds them, built afresh (fresh running statistics):
    /// `vec![BatchNormConfig::new(..)..init(&dev)]` and `vec![DropoutConfig::new(p).init()]`.
    fn fresh_layers(&mut self) -> (Spelled<Vec<BatchNorm>>, Spelled<Vec<Dropout>>) {
        let layers: Vec<_> = self
            .layers
            .iter()
            .map(|l| {
                (
                    matches!(l.at, LayerAt::BatchNorm(_)),
                    matches!(l.at, LayerAt::Dropout(_)),
                    l.spec.clone(),
                )
            })
            .collect();
        let (mut bn, mut dropout) = (vec![], vec![]);
        for (is_bn, is_dropout, spec) in layers {
            if is_bn {
                let (features, momentum) = (spec.features.unwrap_or(1), spec.momentum.unwrap_or(0.1));
                bn.push(self.new_batch_norm(features, momentum));
            } else if is_dropout {
                let p = spec.p.unwrap_or(0.0);
                dropout.push(call!([p = p => f64_lit(p)] DropoutConfig::new(p).init()));
            }
        }
        (spelled_vec(bn), spelled_vec(dropout))
    }

    /// `Model { bn: vec![..], dropout: vec![..], ..base }`: `base` (spelled `text`) with fresh
    /// layers, what a record is loaded into to read it; `base` itself where it has no layers.
    pub(super) fn with_fresh_layers(&mut self, base: Model, text: &str) -> Spelled<Model> {
        if base.bn.is_empty() && base.dropout.is_empty() {
            return (Ok(base), text.to_string());
        }
        let ((bn, bn_text), (dropout, dropout_text)) = self.fresh_layers();
        let (bn, dropout) = match (bn, dropout) {
            (Ok(bn), Ok(dropout)) => (bn, dropout),
            (Err(o), _) | (_, Err(o)) => return (Err(o), String::new()),
        };
        call!([base = base => text, bn = bn => bn_text, dropout = dropout => dropout_text]
            Model { bn: bn, dropout: dropout, ..base })
    }

    /// A fresh model of `like`'s layout on the home device (lazy zero params with new ParamIds,
    /// fresh layers): `Model { p1: vec![Initializer::Zeros.init([2], &dev)], .. }`.
    pub(super) fn skeleton(&mut self, like: &Model) -> Spelled<Model> {
        let (dtype, dev) = (self.dtype, self.home.clone());
        let (p1, t1) = spelled_vec(like.p1.iter().map(|p| zeros_like(p, dtype, &dev)).collect());
        let (p2, t2) = spelled_vec(like.p2.iter().map(|p| zeros_like(p, dtype, &dev)).collect());
        let (p3, t3) = spelled_vec(like.p3.iter().map(|p| zeros_like(p, dtype, &dev)).collect());
        let ((bn, bn_text), (dropout, dropout_text)) = if like.bn.is_empty() && like.dropout.is_empty() {
            ((Ok(vec![]), "vec![]".to_string()), (Ok(vec![]), "vec![]".to_string()))
        } else {
            self.fresh_layers()
        };
        let parts = (|| Ok::<_, Outcome>((p1?, p2?, p3?, bn?, dropout?)))();
        let (p1, p2, p3, bn, dropout) = match parts {
            Ok(parts) => parts,
            Err(o) => return (Err(o), String::new()),
        };
        call!([p1 = p1 => t1, p2 = p2 => t2, p3 = p3 => t3, bn = bn => bn_text, dropout = dropout => dropout_text]
            Model { p1: p1, p2: p2, p3: p3, bn: bn, dropout: dropout })
    }

    /// `let <var>_path = std::env::temp_dir().join(..);`: a path for a checkpoint file (the probe's
    /// in a directory of its own, the reproducer's in the system temp dir), and its variable.
    pub(super) fn checkpoint_path(&mut self, var: &str) -> Result<(PathBuf, String), Outcome> {
        let (dir, n) = self.checkpoints.numbered().map_err(Outcome::Error)?;
        let pv = self.tx.helper(&format!("{var}_path"));
        let (path, text) = call!([dir = &dir => "std::env::temp_dir()", n = n => n.to_string()]
            dir.join(format!("aliasfuzz-repro-{}-{}.bpk", std::process::id(), n)));
        self.tx.line(format!("let {pv} = {text};"));
        Ok((path?, pv))
    }

    /// `<base>.clone().save_file(&path)?;` into a new checkpoint file (see
    /// [`BurnSession::checkpoint_path`]) named after `var`, then `<skeleton>.load_file(&path)`:
    /// the model a user restoring the file holds, and its text. The loaded params carry the
    /// ParamIds stored in the file, and its dtypes (the default `DTypePolicy::FromRecord`), and
    /// read the file on access: it is kept until the session ends (`Checkpoints`).
    pub(super) fn file_round_trip(
        &mut self,
        base: &Model,
        base_text: &str,
        var: &str,
    ) -> Result<(Model, String, PathBuf, String), Outcome> {
        let (path, pv) = self.checkpoint_path(var)?;
        let (saved, text) =
            call!([base = base => base_text, path = &path => format!("&{pv}")] base.clone().save_file(path));
        self.tx.line(format!("{text}?;"));
        saved?.map_err(|e| Outcome::Error(format!("save_file: {e}")))?;
        let (fresh, text) = self.skeleton(base);
        let (loaded, text) = call!([fresh = fresh? => text, path = &path => format!("&{pv}")] fresh.load_file(path));
        Ok((loaded?, text, path, pv))
    }

    /// `<fresh layers of base>.load_record(record)`: what `record` (spelled `record_text`) holds,
    /// loaded into `base` (spelled `base_text`, a clone of it) with fresh layers.
    pub(super) fn read_record(
        &mut self,
        base: Model,
        base_text: &str,
        record: burn::store::ModuleRecord,
        record_text: &str,
    ) -> Spelled<Model> {
        let (fresh, text) = self.with_fresh_layers(base, &format!("{base_text}.clone()"));
        let fresh = match fresh {
            Ok(f) => f,
            Err(o) => return (Err(o), text),
        };
        call!([fresh = fresh => text, record = record => record_text] fresh.load_record(record))
    }
}

impl BurnSession {
    /// What a checkpoint `prefix` of the model binds, in the case's order: `<prefix>.<p>` for
    /// each param not lost, then `<prefix>.<layer>.<stat>` for each batch norm's statistics.
    pub(super) fn model_entries(&self, prefix: &str) -> Vec<(String, Entry)> {
        let params = self
            .params
            .iter()
            .filter(|mp| !self.lost.contains(&(mp.rank, mp.idx)))
            .map(|mp| (format!("{prefix}.{}", mp.name), Entry::Param(mp.rank, mp.idx)));
        let stats = self.layers.iter().flat_map(|l| match l.at {
            LayerAt::BatchNorm(i) => Stat::ALL
                .iter()
                .map(|stat| (format!("{prefix}.{}.{}", l.name, stat.name()), Entry::Stat(i, *stat)))
                .collect(),
            _ => vec![],
        });
        params.chain(stats).collect()
    }
}
