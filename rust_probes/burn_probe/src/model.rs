//! The probe's model (`Model`: the case's params by rank, its layers by kind) and what the probe
//! keeps beside its transcript: the stand-in of a model slot whose param is moved out for an op,
//! the checkpoint files of the session, the layers it rebuilds after the model was consumed by a
//! failed call, and the record and file round trips of a module clone's running statistic, which
//! the transcript does not spell (it holds the clone's `RunningState`, not its layer).

use burn::module::{Module, ModuleMapper, Param, ParamId};
use burn::nn::{BatchNorm, BatchNormConfig, Dropout, DropoutConfig};
use burn::store::ModuleRecord;
use burn::tensor::{DType, Device, FloatDType, Shape, Tensor};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The program's model: its trainable parameters, by rank, in program order within each rank,
/// and its layers, by kind, in program order within each kind (the probe keeps the case's layer
/// order beside it). Buffers are not in the model: they are plain tensors bound outside it (a
/// plain `Tensor` field would be a module *constant*, which burn neither records nor trains).
/// The layers are fields so that every `Module` call on the model (clone, record, file, valid,
/// train, no_grad, freeze, to_device) carries them, as it does a user's model.
#[derive(Module, Debug, Default)]
pub struct Model {
    pub p1: Vec<Param<Tensor<1>>>,
    pub p2: Vec<Param<Tensor<2>>>,
    pub p3: Vec<Param<Tensor<3>>>,
    pub bn: Vec<BatchNorm>,
    pub dropout: Vec<Dropout>,
}

impl Model {
    pub fn empty() -> Model {
        Model {
            p1: vec![],
            p2: vec![],
            p3: vec![],
            bn: vec![],
            dropout: vec![],
        }
    }

    /// The same layout with fresh, lazily zero-initialised params (new ParamIds, in `dtype`) and
    /// freshly configured layers on `device`: what a user builds from the model's config before
    /// `load_file`.
    pub fn skeleton(&self, device: &Device, dtype: FloatDType) -> Model {
        fn fresh<const D: usize>(p: &Param<Tensor<D>>, device: &Device, dtype: FloatDType) -> Param<Tensor<D>> {
            let shape = p.lazy_shape();
            let dims = shape.clone();
            lazy_param(shape, device, move |device| {
                Tensor::<D>::zeros(dims, (device, DType::from(dtype)))
            })
        }
        Model {
            p1: self.p1.iter().map(|p| fresh(p, device, dtype)).collect(),
            p2: self.p2.iter().map(|p| fresh(p, device, dtype)).collect(),
            p3: self.p3.iter().map(|p| fresh(p, device, dtype)).collect(),
            bn: self.bn.iter().map(|bn| fresh_batch_norm(bn, device)).collect(),
            dropout: self.dropout.iter().map(|d| dropout(d.prob)).collect(),
        }
    }

    /// The same params with freshly configured layers (each on its running state's device):
    /// the model a record is loaded into to read it. Loading into the model itself, or into a
    /// clone, would write into the model's running states: a `RunningState` is an `Arc` shared
    /// by every clone of its module, and a load maps its value in place (burn-core
    /// module/param/running.rs `Module::map`).
    pub fn with_fresh_layers(self) -> Model {
        let bn = self
            .bn
            .iter()
            .map(|bn| fresh_batch_norm(bn, &bn.running_mean.value().device()))
            .collect();
        let dropout = self.dropout.iter().map(|d| dropout(d.prob)).collect();
        Model { bn, dropout, ..self }
    }
}

/// A batch-norm layer: `BatchNormConfig::new(features).with_momentum(momentum)`, epsilon at its
/// default (1e-5), its floats in `dtype` ([`in_dtype`]). burn's BatchNorm always has `gamma`
/// (ones) and `beta` (zeros) params (burn-nn modules/norm/batch.rs): the program gives them no
/// gradient, so steps leave them.
pub fn batch_norm(features: usize, momentum: f64, dtype: FloatDType, device: &Device) -> BatchNorm {
    in_dtype(
        BatchNormConfig::new(features).with_momentum(momentum).init(device),
        dtype,
    )
}

/// `module` with every float cast to `dtype`: a config's `init` makes them in the device's default
/// dtype (f32) and burn-core 0.22.1 has no module cast (store/mod.rs names a `module.cast` it
/// lacks), so a `ModuleMapper`: params through [`map_values`], running states by their `map`.
pub fn in_dtype<M: Module>(module: M, dtype: FloatDType) -> M {
    struct Cast(FloatDType);
    impl ModuleMapper for Cast {
        fn map_float<const D: usize>(&mut self, p: Param<Tensor<D>>) -> Param<Tensor<D>> {
            let dtype = self.0;
            map_values(p, |t| t.cast(dtype))
        }
    }
    if dtype == FloatDType::F32 {
        return module;
    }
    module.map(&mut Cast(dtype))
}

/// `f` on a parameter's values, outside the graph: `Param::map` (keeps the ParamId), `f` on
/// `tensor.inner()`, then `from_inner` and `require_grad` restored.
pub fn map_values<const D: usize>(p: Param<Tensor<D>>, f: impl FnOnce(Tensor<D>) -> Tensor<D>) -> Param<Tensor<D>> {
    p.map(|t| {
        let require_grad = t.is_require_grad();
        let autodiff = t.is_autodiff();
        let out = f(t.inner());
        let out = if autodiff { Tensor::from_inner(out) } else { out };
        if require_grad {
            out.require_grad()
        } else {
            out
        }
    })
}

/// A dropout layer: `DropoutConfig::new(p).init()`, which panics for p outside [0, 1)
/// (burn-nn modules/dropout.rs).
pub fn dropout(p: f64) -> Dropout {
    DropoutConfig::new(p).init()
}

/// A batch norm configured as `bn` is (its dtype included), with fresh running statistics (zeros
/// and ones), on `device`.
fn fresh_batch_norm(bn: &BatchNorm, device: &Device) -> BatchNorm {
    let features = bn.gamma.lazy_shape().as_slice()[0];
    let config = BatchNormConfig::new(features)
        .with_momentum(bn.momentum)
        .with_epsilon(bn.epsilon);
    in_dtype(config.init(device), bn.running_mean.value().dtype().into())
}

/// A lazy param requiring grad: `Param::uninitialized` with a new ParamId, whose `init` runs on
/// the first `val()` (burn-core module/param/base.rs).
fn lazy_param<const D: usize>(
    shape: Shape,
    device: &Device,
    init: impl FnOnce(&Device) -> Tensor<D> + Send + Sync + 'static,
) -> Param<Tensor<D>> {
    let init = move |device: &Device, require_grad: bool| {
        let t = init(device);
        if require_grad {
            t.require_grad()
        } else {
            t
        }
    };
    Param::uninitialized(ParamId::new(), init, device.clone(), true, shape)
}

/// An uninitialised stand-in put in a model slot while its param is moved out for an op (burn
/// calls consume their argument).
pub fn placeholder<const D: usize>() -> Param<Tensor<D>> {
    Param::uninitialized(
        ParamId::new(),
        |device, _| Tensor::<D>::zeros([0; D], device),
        Device::flex(),
        false,
        Shape::new([0; D]),
    )
}

/// The framework's CPU device (`move` to `cpu`, the `to_cpu` snapshot): flex, with autodiff.
pub fn cpu_device() -> Device {
    Device::flex().autodiff()
}

// ---------------------------------------------------------------------------------------------
// A module clone's running statistic through a record or a file (not spelled: the transcript
// holds the clone's RunningState, not its layer; session/records.rs reads the model's own).

/// `state_dict`: the model's record (`into_record`) applied back onto it with
/// `try_load_record` (a ModuleRecord has no public per-tensor reader in 0.22.1: burn-core
/// store/mod.rs), so the caller reads the param out of the loaded model. Its layers are fresh
/// ones (`Model::with_fresh_layers`), so that the load does not write into the model's own
/// running states.
pub fn record_round_trip(model: Model) -> Result<Model, String> {
    let record = model.clone().into_record();
    read_record(model, record)
}

/// What `record` holds, loaded into `model` with fresh layers (`Model::with_fresh_layers`).
pub fn read_record(model: Model, record: ModuleRecord) -> Result<Model, String> {
    model
        .with_fresh_layers()
        .try_load_record(record)
        .map_err(|e| format!("load_record: {e}"))
}

/// `save_load`: `save_file` to `path`, `load_file` into a fresh model of the same layout on
/// `device` (new ParamIds, lazy zeros in `dtype`), what a user restoring a checkpoint writes. The
/// loaded params carry the ParamIds stored in the file, and the file's dtypes (the default
/// `DTypePolicy::FromRecord`, burn-core store/mod.rs), and read the file on access: keep it (see
/// [`Checkpoints`]).
pub fn save_and_load(
    model: Model,
    path: &std::path::Path,
    device: &Device,
    dtype: FloatDType,
) -> Result<Model, String> {
    let fresh = model.skeleton(device, dtype);
    model.save_file(path).map_err(|e| format!("save_file: {e}"))?;
    fresh.try_load_file(path).map_err(|e| format!("load_file: {e}"))
}

/// Checkpoint files written by `save_file`, removed when this is dropped: a tensor loaded by
/// `load_file` is backed by the file and reads it on access (observed: deleting it early makes
/// `to_data` panic with `host access failed`). They live in a directory of their own, made on
/// first use with `create_dir`, which fails rather than reuse a path someone else made.
#[derive(Default)]
pub struct Checkpoints {
    dir: Option<PathBuf>,
    files: usize,
}

/// Distinguishes the checkpoint directories of one process (one per program it runs).
static DIRS: AtomicUsize = AtomicUsize::new(0);

impl Checkpoints {
    /// A path for the next checkpoint file.
    pub fn next(&mut self) -> Result<PathBuf, String> {
        let (dir, n) = self.numbered()?;
        Ok(dir.join(format!("{n}.bpk")))
    }

    /// The directory of the next checkpoint file, and the file's number.
    pub fn numbered(&mut self) -> Result<(PathBuf, usize), String> {
        while self.dir.is_none() {
            let n = DIRS.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("aliasfuzz-burn-{}-{n}", std::process::id()));
            match std::fs::create_dir(&dir) {
                Ok(()) => self.dir = Some(dir),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(format!("checkpoint directory {}: {e}", dir.display())),
            }
        }
        self.files += 1;
        Ok((self.dir.clone().unwrap(), self.files))
    }
}

impl Drop for Checkpoints {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
