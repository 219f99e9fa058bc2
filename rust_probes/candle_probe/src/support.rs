//! The candle calls behind the ops that take more than one call, shared by the probe and the
//! generated reproducers.
//!
//! This file depends on candle and std only: `harness/targets/candle/reproducer.py` copies it
//! verbatim into every candle reproducer (as `src/support.rs`), so a reproducer runs exactly the
//! code the probe ran and this is the one copy of it. What the protocol needs (handles, error
//! outcomes, observations) stays in `session.rs`.

use candle_core::backprop::GradStore;
use candle_core::scalar::Scalar;
use candle_core::{CpuStorage, DType, Device, Result, Storage, Tensor, Var};
use candle_nn::{AdamW, BatchNorm, BatchNormConfig, Init, Optimizer, ParamsAdamW, VarBuilder, VarMap, SGD};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// Registers a param in the model's VarMap under its name, as a user building a model does.
pub fn insert_var(varmap: &VarMap, name: &str, var: &Var) {
    varmap.data().lock().unwrap().insert(name.to_string(), var.clone());
}

/// The Var the VarMap holds under `name` (the same Var, not a copy).
pub fn var_of(varmap: &VarMap, name: &str) -> Option<Var> {
    varmap.data().lock().unwrap().get(name).cloned()
}

/// A lazy param: candle has none, so it is created now through the VarMap in `dtype`, as
/// `VarBuilder::get_with_hints` does.
pub fn lazy_var(varmap: &VarMap, shape: Vec<usize>, name: &str, init: Init, dtype: DType, device: &Device) -> Result<Var> {
    varmap.get(shape, name, init, dtype, device)?;
    Ok(var_of(varmap, name).expect("VarMap::get inserts the var"))
}

/// The model's Vars by name, as the VarMap holds them (a snapshot of the map, not copies).
pub fn model_vars(varmap: &VarMap) -> Vec<(String, Var)> {
    varmap.data().lock().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// A batch-norm layer without affine weight and bias, built through the model's VarMap as a
/// candle model builds its layers: `candle_nn::batch_norm` gets `running_mean` (zeros) and
/// `running_var` (ones) from `vb.pp(name)`, so the VarMap holds them as Vars under
/// `<name>.running_mean` / `<name>.running_var`, and the layer keeps those very Vars
/// (`Var::from_tensor` of a variable's tensor is that variable: candle#1504, candle#2124).
/// `forward_t(.., true)` updates them in place with `Var::set` (batch_norm.rs `forward_train`).
/// The statistics are made in `dtype`, the VarBuilder's.
pub fn batch_norm_layer(varmap: &VarMap, name: &str, features: usize, momentum: f64, eps: f64, dtype: DType, device: &Device) -> Result<BatchNorm> {
    let vb = VarBuilder::from_varmap(varmap, dtype, device);
    let config = BatchNormConfig { eps, remove_mean: true, affine: false, momentum };
    candle_nn::batch_norm(features, config, vb.pp(name))
}

/// The tensor's values, row-major, read to the host and widened to f32 (`to_vec1::<f32>` refuses
/// another dtype; f32 holds every f16 and bf16 value exactly; `to_dtype` to F32 of an f32 tensor
/// is the tensor itself).
pub fn values(t: &Tensor) -> Result<Vec<f32>> {
    t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()
}

/// `to_host`: the values read to host memory and a new tensor made from them on the tensor's
/// device, in its shape and dtype (read widened to f32, which is exact for f16 and bf16, and
/// converted back with `to_dtype`).
pub fn through_host(t: &Tensor) -> Result<Tensor> {
    Tensor::new(values(t)?, t.device())?.reshape(t.shape())?.to_dtype(t.dtype())
}

/// A new tensor of `values` (f32, exact in `dtype`) in `dtype`: made in f32 and converted with
/// candle's own conversion (`to_dtype`, the tensor itself when `dtype` is F32).
pub fn tensor_in(values: Vec<f32>, shape: &[usize], dtype: DType, device: &Device) -> Result<Tensor> {
    Tensor::from_vec(values, shape, device)?.to_dtype(dtype)
}

/// `value` as the `Scalar` of `dtype` that `const_set` takes: it refuses a scalar of another
/// dtype than the tensor's ("const_set dtype mismatch"). A candle user writes
/// `half::bf16::from_f32(v).into()`; a reproducer depends on candle only, so the value is
/// converted by candle (`to_dtype`) and its element, typed by the storage it sits in, made the
/// scalar.
pub fn scalar_in(dtype: DType, value: f32) -> Result<Scalar> {
    let t = Tensor::new(&[value], &Device::Cpu)?.to_dtype(dtype)?;
    let (storage, _) = t.storage_and_layout();
    Ok(match &*storage {
        Storage::Cpu(CpuStorage::BF16(x)) => x[0].into(),
        Storage::Cpu(CpuStorage::F16(x)) => x[0].into(),
        Storage::Cpu(CpuStorage::F32(x)) => x[0].into(),
        Storage::Cpu(CpuStorage::F64(x)) => x[0].into(),
        _ => candle_core::bail!("no float scalar of {dtype:?}"),
    })
}

/// `expand`: a new first dimension of 2 over the same storage, `t.unsqueeze(0)?.expand(..)`
/// (`expand` is `broadcast_as`: a stride-0 layout over the tensor's storage, tensor.rs).
pub fn expand_two(t: &Tensor) -> Result<Tensor> {
    let mut shape = vec![2];
    shape.extend_from_slice(t.dims());
    t.unsqueeze(0)?.expand(shape)
}

/// `write` of row `index`: `slice_set` of a `[1, rest...]` tensor at `index` along dim 0.
pub fn write_row(t: &Tensor, index: usize, value: &[f32]) -> Result<()> {
    let mut row_shape = t.dims().to_vec();
    if row_shape.is_empty() {
        candle_core::bail!("write: a rank-0 tensor has no rows");
    }
    row_shape[0] = 1;
    // In the tensor's dtype: `slice_set` refuses a source of another dtype.
    let row = tensor_in(value.to_vec(), &row_shape, t.dtype(), t.device())?;
    t.slice_set(&row, 0, index)
}

/// `assign`: `dst.slice_set(&src, 0, 0)` over the whole tensor, or `slice_set` of `src` with a
/// leading dimension of 1 (`unsqueeze(0)`) at row `index`. `slice_set` writes into `dst`'s
/// storage, so every tensor sharing it sees the copy; it refuses a non-contiguous `src` and a
/// `src` over `dst`'s own storage (candle#2733).
pub fn assign_from(dst: &Tensor, index: Option<usize>, src: &Tensor) -> Result<()> {
    match index {
        None => dst.slice_set(src, 0, 0),
        Some(i) => dst.slice_set(&src.unsqueeze(0)?, 0, i),
    }
}

/// `save_load`: `VarMap::save` of the model to `path`, then `VarMap::load` into a fresh VarMap.
/// `load` only fills variables already in the map (var_map.rs: "values for variables that are
/// currently not in the map are not kept"), so the fresh map is first given the model's
/// structure with `VarMap::get(.., Init::Const(0.), ..)`, as a user rebuilding the model through
/// a `VarBuilder` would. The fresh map's Vars are new (new ids, their own storage).
pub fn save_and_load(varmap: &VarMap, path: &Path) -> Result<VarMap> {
    varmap.save(path)?;
    let mut fresh = VarMap::new();
    for (k, v) in &model_vars(varmap) {
        fresh.get(v.shape(), k, Init::Const(0.0), v.dtype(), v.device())?;
    }
    fresh.load(path)?;
    Ok(fresh)
}

/// The loss of a `step`: the sum over the VarMap's vars of `sum(var * grad)` (`None`: no vars,
/// nothing to train). A var without a gradient in `grads` (a batch norm's running statistics)
/// is not in the loss: a training loss never reads them, so they get no gradient.
pub fn loss(varmap: &VarMap, grads: &HashMap<String, Vec<f32>>) -> Result<Option<Tensor>> {
    let mut total: Option<Tensor> = None;
    for (name, var) in &model_vars(varmap) {
        let Some(grad) = grads.get(name) else { continue };
        // In the var's dtype (the program's): `mul` refuses two dtypes.
        let g = tensor_in(grad.clone(), var.dims(), var.dtype(), var.device())?;
        let term = (var.as_tensor() * &g)?.sum_all()?;
        total = Some(match total {
            None => term,
            Some(l) => (l + term)?,
        });
    }
    Ok(total)
}

/// Gradient accumulation as candle users write it (candle has no accumulator): `acc` plus the
/// gradients of a second backward pass, var by var over the VarMap's vars (a Var under two keys
/// once). A var `acc` has and the map no longer holds keeps its accumulated gradient.
pub fn add_grads(mut acc: GradStore, g: &GradStore, varmap: &VarMap) -> Result<GradStore> {
    let mut seen = HashSet::new();
    for var in varmap.all_vars() {
        let t = var.as_tensor();
        if !seen.insert(t.id()) {
            continue;
        }
        if let Some(new) = g.get(t) {
            let sum = match acc.get(t) {
                Some(old) => (old + new)?,
                None => new.clone(),
            };
            acc.insert(t, sum);
        }
    }
    Ok(acc)
}

/// One backward pass of `loss` added to the `pending` gradients (`add_grads`); `pending` as it
/// is for a model without params (no loss).
pub fn accumulate(pending: Option<GradStore>, loss: Option<Tensor>, varmap: &VarMap) -> Result<Option<GradStore>> {
    let Some(loss) = loss else {
        return Ok(pending);
    };
    let g = loss.backward()?;
    Ok(Some(match pending {
        None => g,
        Some(acc) => add_grads(acc, &g, varmap)?,
    }))
}

/// The optimizers candle-nn has.
pub enum Opt {
    Sgd(SGD),
    AdamW(AdamW),
}

impl Opt {
    /// The optimizer of a `step` over the VarMap's vars, by its case-format name: `sgd` is
    /// `SGD` (no momentum: candle-nn has none), `adam` is `AdamW` with weight_decay 0 (candle's
    /// AdamW decays decoupled; L2 decay would need another optimizer), `adamw` is `AdamW`.
    pub fn new(kind: &str, varmap: &VarMap, lr: f64, betas: [f64; 2], eps: f64, weight_decay: f64) -> Result<Opt> {
        let weight_decay = match kind {
            "sgd" => return Ok(Opt::Sgd(SGD::new(varmap.all_vars(), lr)?)),
            "adam" => 0.0,
            "adamw" => weight_decay,
            other => candle_core::bail!("candle-nn has no optimizer for {other:?}"),
        };
        let params = ParamsAdamW { lr, beta1: betas[0], beta2: betas[1], eps, weight_decay };
        Ok(Opt::AdamW(AdamW::new(varmap.all_vars(), params)?))
    }

    /// `Optimizer::set_learning_rate`: the optimizer keeps its state.
    pub fn set_learning_rate(&mut self, lr: f64) {
        match self {
            Opt::Sgd(o) => o.set_learning_rate(lr),
            Opt::AdamW(o) => o.set_learning_rate(lr),
        }
    }

    pub fn backward_step(&mut self, loss: &Tensor) -> Result<()> {
        match self {
            Opt::Sgd(o) => o.backward_step(loss),
            Opt::AdamW(o) => o.backward_step(loss),
        }
    }

    pub fn step(&mut self, grads: &GradStore) -> Result<()> {
        match self {
            Opt::Sgd(o) => o.step(grads),
            Opt::AdamW(o) => o.step(grads),
        }
    }
}

/// Prints `label: name = [values]` (the reproducers' output; the probe observes instead).
#[allow(dead_code)]
pub fn show(label: &str, name: &str, t: &Tensor) {
    match values(t) {
        Ok(v) => println!("{label}: {name} = {v:?}"),
        Err(e) => println!("{label}: {name} = unreadable ({e})"),
    }
}
