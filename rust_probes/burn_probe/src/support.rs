//! The burn calls behind the ops, shared by the probe and the generated reproducers.
//!
//! This file depends on burn and std only: `harness/targets/burn/reproducer.py` copies it verbatim
//! into every burn reproducer (as `src/support.rs`), so a reproducer runs exactly the code the
//! probe ran and this is the one copy of it. Anything the protocol needs (rank-erased values,
//! observations, error outcomes) stays in `vals.rs` and `session.rs`.

use burn::module::{Module, ModuleMapper, Param, ParamId};
use burn::nn::{BatchNorm, BatchNormConfig, Dropout, DropoutConfig};
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamConfig, AdamWConfig, ModuleOptimizer, SgdConfig};
use burn::store::ModuleRecord;
use burn::tensor::{DType, Device, Distribution, FloatDType, Shape, Tensor, TensorData};
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

/// A lazy param uniform in [-1, 1), drawn in `dtype`, by burn's sampler seeded when it
/// initialises: the value depends on the seed only, not on what ran before the first read.
pub fn uniform_param<const D: usize>(
    dims: [usize; D],
    seed: u64,
    dtype: FloatDType,
    device: &Device,
) -> Param<Tensor<D>> {
    lazy_param(Shape::new(dims), device, move |device| {
        device.seed(seed);
        Tensor::<D>::random(dims, Distribution::Uniform(-1.0, 1.0), (device, DType::from(dtype)))
    })
}

/// A lazy param uniform in [-1, 1), drawn in `dtype` from the device's generator as it stands when
/// the param initialises: `BurnSession::new` seeds it once per program (`PROGRAM_SEED`), so the
/// values depend on how many draws ran before this param's first read.
pub fn program_rng_param<const D: usize>(dims: [usize; D], dtype: FloatDType, device: &Device) -> Param<Tensor<D>> {
    lazy_param(Shape::new(dims), device, move |device| {
        Tensor::<D>::random(dims, Distribution::Uniform(-1.0, 1.0), (device, DType::from(dtype)))
    })
}

/// A lazy param of `value` in a dtype other than f32: `Initializer::Constant` (the f32 call) takes
/// no dtype (burn-nn initializer.rs: `Tensor::full` in the device's default), so its `full` here.
pub fn const_param<const D: usize>(
    dims: [usize; D],
    value: f32,
    dtype: FloatDType,
    device: &Device,
) -> Param<Tensor<D>> {
    lazy_param(Shape::new(dims), device, move |device| {
        Tensor::<D>::full(dims, value, (device, DType::from(dtype)))
    })
}

/// A param of `data`'s values in `dtype`: `Param::from_data` takes no dtype (the device's default,
/// burn-core param/tensor.rs), so another is `Param::from_tensor` of `from_data` in `dtype`.
pub fn param_in<const D: usize>(data: TensorData, dtype: FloatDType, device: &Device) -> Param<Tensor<D>> {
    if dtype == FloatDType::F32 {
        return Param::from_data(data, device);
    }
    Param::from_tensor(Tensor::from_data(data, (device, DType::from(dtype))))
}

/// A tensor of `data`'s values in `dtype` (`from_data` converts them).
pub fn tensor_in<const D: usize>(data: TensorData, dtype: FloatDType, device: &Device) -> Tensor<D> {
    Tensor::from_data(data, (device, DType::from(dtype)))
}

// ---------------------------------------------------------------------------------------------
// Snapshot methods with more than one call.

/// `to_home`: `to_device` onto the tensor's own device.
pub fn to_own_device<const D: usize>(t: Tensor<D>) -> Tensor<D> {
    let device = t.device();
    t.to_device(&device)
}

/// `reshape`: every element in one dimension.
pub fn flatten<const D: usize>(t: Tensor<D>) -> Tensor<1> {
    let n: usize = t.dims().iter().product();
    t.reshape([n])
}

/// `expand`: a new first dimension of 2 over the same elements, `t.unsqueeze_dim(0)` then
/// `expand([2, dims..])` (a broadcast: burn-tensor base.rs `expand`).
pub fn expand_two<const D: usize, const D2: usize>(t: Tensor<D>) -> Tensor<D2> {
    let mut shape = [2usize; D2];
    shape[1..].copy_from_slice(&t.dims());
    t.unsqueeze_dim::<D2>(0).expand(shape)
}

/// `to_host`: `to_data` to host memory and `from_data` back onto the tensor's device, in the
/// data's dtype (`from_data(data, &device)` would convert to the device's default: options.rs).
pub fn through_host<const D: usize>(t: Tensor<D>) -> Tensor<D> {
    let (device, dtype) = (t.device(), t.dtype());
    Tensor::<D>::from_data(t.to_data(), (&device, dtype))
}

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

// ---------------------------------------------------------------------------------------------
// In-place ops: a burn tensor is a value, so each edit returns the new value to rebind.

/// A write's f32 values are made in the target's dtype (`from_data(data, (device, t.dtype()))`).
#[derive(Clone, Debug)]
pub enum Edit {
    /// `slice_assign` of row `index`, or whole-tensor replacement (`Tensor::from_data`).
    Write { index: Option<usize>, value: Vec<f32> },
    /// `slice_fill` over every row.
    Fill(f32),
    /// `mul_scalar`.
    Scale(f32),
}

pub fn edit_tensor<const D: usize>(t: Tensor<D>, edit: &Edit) -> Tensor<D> {
    match edit {
        Edit::Write { index: Some(i), value } => {
            let mut row = t.dims();
            row[0] = 1;
            let v = Tensor::<D>::from_data(TensorData::new(value.clone(), row), (&t.device(), t.dtype()));
            t.slice_assign([*i..*i + 1], v)
        }
        Edit::Write { index: None, value } => {
            let (dims, device, dtype) = (t.dims(), t.device(), t.dtype());
            drop(t);
            Tensor::<D>::from_data(TensorData::new(value.clone(), dims), (&device, dtype))
        }
        Edit::Fill(x) => {
            let rows = t.dims()[0];
            t.slice_fill([0..rows], *x)
        }
        Edit::Scale(f) => t.mul_scalar(*f),
    }
}

/// An edit of a parameter, the way burn's own optimizer updates one (burn-optim
/// module_optimizer.rs `ModuleOptimizerMapper::map_float` + parameter_context.rs): `Param::map`
/// (keeps the ParamId), the op on `tensor.inner()` (outside the graph), then `from_inner` and
/// `require_grad` restored.
pub fn edit_param<const D: usize>(p: Param<Tensor<D>>, edit: &Edit) -> Param<Tensor<D>> {
    map_values(p, |t| edit_tensor(t, edit))
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

/// `assign`: `dst.slice_assign([rows], src)` over row `index` (`src` with a leading dimension of
/// 1) or over every row. `src` is taken into `dst`'s autodiff mode first (a copy outside the
/// graph into a parameter, as `edit_param` writes one).
pub fn assign_tensor<const D: usize>(dst: Tensor<D>, index: Option<usize>, src: Tensor<D>) -> Tensor<D> {
    let src = in_mode_of(&dst, src);
    let rows = match index {
        Some(i) => i..i + 1,
        None => 0..dst.dims()[0],
    };
    dst.slice_assign([rows], src)
}

/// Row `j` of an `assign`'s source (`dst[i] = src[j]`): `t.slice([j..j + 1])`, reshaped to rank
/// `D` (the row's dimensions with leading 1s: a row of the target keeps the leading 1 that
/// `slice_assign` wants, the whole target drops it).
pub fn row_of<const S: usize, const D: usize>(t: Tensor<S>, j: usize) -> Tensor<D> {
    let dims = t.dims();
    let tail = &dims[1..];
    let mut shape = [1usize; D];
    shape[D - tail.len()..].copy_from_slice(tail);
    t.slice([j..j + 1]).reshape(shape)
}

/// `t` in `like`'s autodiff mode (one burn call takes tensors of one mode).
fn in_mode_of<const D: usize>(like: &Tensor<D>, t: Tensor<D>) -> Tensor<D> {
    if like.is_autodiff() {
        t.autodiff()
    } else {
        t.without_autodiff()
    }
}

/// `append` by concatenation: `Tensor::cat(vec![t, src], 0)`, a new tensor (`src`: rows of `t`,
/// taken into its autodiff mode).
pub fn cat_rows<const D: usize>(t: Tensor<D>, src: Tensor<D>) -> Tensor<D> {
    let src = in_mode_of(&t, src);
    Tensor::cat(vec![t, src], 0)
}

/// `add`: `t + other`, `other` taken into `t`'s autodiff mode (one burn call takes tensors of one
/// mode); a leading dimension of 1 broadcasts.
pub fn add_in_mode<const D: usize>(t: Tensor<D>, other: Tensor<D>) -> Tensor<D> {
    let other = in_mode_of(&t, other);
    t + other
}

/// `append` into a KV cache as burn users keep one (llama-burn's `AutoregressiveCache`): a
/// preallocated tensor, each source `slice_assign`ed in after the filled rows, and the filled rows
/// read back with `slice`. The buffer is moved into each `slice_assign` (a unique handle: burn's
/// in-place path), where llama-burn's `self.cache.clone()` keeps a second handle.
pub struct RowCache<const D: usize> {
    /// `None` only while an append holds it.
    buf: Option<Tensor<D>>,
    rows: usize,
}

impl<const D: usize> RowCache<D> {
    /// An empty cache of `capacity` rows shaped like `like`'s, on its device, in its dtype and
    /// autodiff mode.
    pub fn new(like: &Tensor<D>, capacity: usize) -> RowCache<D> {
        let mut shape = like.dims();
        shape[0] = capacity;
        let buf = in_mode_of(like, Tensor::<D>::zeros(shape, (&like.device(), like.dtype())));
        RowCache {
            buf: Some(buf),
            rows: 0,
        }
    }

    /// Appends `src` (rows of the cache's rank) and returns the filled rows.
    pub fn append(&mut self, src: Tensor<D>) -> Tensor<D> {
        let buf = self.buf.take().expect("a cache holds its buffer between appends");
        let src = in_mode_of(&buf, src);
        let end = self.rows + src.dims()[0];
        let buf = buf.slice_assign([self.rows..end], src);
        self.rows = end;
        let filled = buf.clone().slice([0..end]);
        self.buf = Some(buf);
        filled
    }
}

/// `assign` into a parameter: `Param::map` over `assign_tensor`, keeping its ParamId.
pub fn assign_param<const D: usize>(p: Param<Tensor<D>>, index: Option<usize>, src: Tensor<D>) -> Param<Tensor<D>> {
    map_values(p, |t| assign_tensor(t, index, src))
}

// ---------------------------------------------------------------------------------------------
// Steps.

/// One term of the loss, `(p * g).sum()`, `g` in `p`'s dtype, on the home device (after a `move`
/// a param may be elsewhere; `to_device` is differentiable, burn-tensor base.rs
/// `Tensor::to_device`).
pub fn loss_term<const D: usize>(p: &Param<Tensor<D>>, grad: &[f32], home: &Device) -> Tensor<1> {
    let v = p.val();
    let g = Tensor::<D>::from_data(TensorData::new(grad.to_vec(), v.dims()), (&v.device(), v.dtype()));
    let term = (v * g).sum();
    if term.device() != *home {
        term.to_device(home)
    } else {
        term
    }
}

/// The optimizer of a `step`, by its case-format name (`sgd`, `sgd_momentum`, `adam`, `adamw`).
pub fn make_optimizer(
    kind: &str,
    momentum: f64,
    dampening: f64,
    betas: [f64; 2],
    eps: f64,
    weight_decay: f64,
) -> ModuleOptimizer {
    // L2 weight decay, added to the gradient (burn-optim decay.rs `WeightDecay::transform`).
    let decay = (weight_decay != 0.0).then(|| WeightDecayConfig::new(weight_decay as f32));
    match kind {
        "sgd" => SgdConfig::new().with_weight_decay(decay).init(),
        // MomentumConfig defaults to dampening 0.1 (burn-optim momentum.rs): always set it.
        "sgd_momentum" => SgdConfig::new()
            .with_weight_decay(decay)
            .with_momentum(Some(
                MomentumConfig::new()
                    .with_momentum(momentum)
                    .with_dampening(dampening)
                    .with_nesterov(false),
            ))
            .init(),
        "adam" => AdamConfig::new()
            .with_beta_1(betas[0] as f32)
            .with_beta_2(betas[1] as f32)
            .with_epsilon(eps as f32)
            .with_weight_decay(decay)
            .init(),
        "adamw" => AdamWConfig::new()
            .with_beta_1(betas[0] as f32)
            .with_beta_2(betas[1] as f32)
            .with_epsilon(eps as f32)
            .with_weight_decay(weight_decay as f32)
            .init(),
        other => panic!("unknown optimizer {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Reading values. Never forces a lazy parameter: `is_initialized` reads the shared lazy state
// without running the initializer (burn-core module/param/base.rs).

/// The tensor's values, row-major, read to the host.
pub fn read_values<const D: usize>(t: &Tensor<D>) -> Result<Vec<f32>, String> {
    t.to_data()
        .try_to_vec_as::<f32>()
        .map_err(|e| format!("to_data: {e:?}"))
}

/// Prints `label: name = [values]` (the reproducers' output; the probe observes instead).
#[allow(dead_code)]
pub fn show_t<const D: usize>(label: &str, name: &str, t: &Tensor<D>) {
    match read_values(t) {
        Ok(v) => println!("{label}: {name} = {v:?}"),
        Err(e) => println!("{label}: {name} = unreadable ({e})"),
    }
}

/// `show_t` of a param's value, or `uninitialized` for a lazy param not yet created.
#[allow(dead_code)]
pub fn show_p<const D: usize>(label: &str, name: &str, p: &Param<Tensor<D>>) {
    if !p.is_initialized() {
        println!("{label}: {name} = uninitialized");
    } else {
        show_t(label, name, &p.val());
    }
}
