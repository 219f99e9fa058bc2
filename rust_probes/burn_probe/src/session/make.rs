//! A declared tensor as burn makes it, in the program's dtype, spelled: a `Param` (`param`,
//! `lazy`, pushed into the model) or a plain `Tensor` (`buffer`).

use super::spelling::{dims_lit, erased, Spelled};
use crate::vals::{IntoVal, Val};
use aliasfuzz_protocol::transcript::{f32_lit, f32_vec, f64_lit};
use aliasfuzz_protocol::{LazyInit, TensorKind, TensorSpec};
use burn::module::{Param, ParamId};
use burn::nn::Initializer;
use burn::tensor::{DType, Device, Distribution, FloatDType, Shape, Tensor, TensorData};

fn param<const D: usize>(r: Spelled<Param<Tensor<D>>>) -> Spelled<Param<Tensor<D>>> {
    r
}

fn tensor<const D: usize>(r: Spelled<Tensor<D>>) -> Spelled<Tensor<D>> {
    r
}

/// The tensor `spec` declares, of rank `D`, and the expression that makes it. An error is a
/// malformed spec (checked before calling burn).
pub fn make<const D: usize>(spec: &TensorSpec, dtype: FloatDType, home: &Device) -> Result<Spelled<Val>, String>
where
    Tensor<D>: IntoVal,
    Param<Tensor<D>>: IntoVal,
{
    let dims: [usize; D] = spec
        .shape
        .clone()
        .try_into()
        .map_err(|_| format!("{}: shape {:?} is not rank {D}", spec.name, spec.shape))?;
    let numel: usize = dims.iter().product();
    let data = || -> Result<Vec<f32>, String> {
        let value = spec.value.clone().ok_or_else(|| format!("{}: no value", spec.name))?;
        if value.len() != numel {
            return Err(format!(
                "{}: {} values for shape {:?}",
                spec.name,
                value.len(),
                spec.shape
            ));
        }
        Ok(value)
    };
    if let Some(g) = &spec.grad {
        if g.len() != numel {
            return Err(format!(
                "{}: grad has {} values for shape {:?}",
                spec.name,
                g.len(),
                dims
            ));
        }
    }
    let dl = dims_lit(&dims);
    let f32 = dtype == FloatDType::F32;
    Ok(match spec.kind {
        // Param::from_data: a leaf requiring grad on an autodiff device (burn-core
        // param/tensor.rs); it takes no dtype (the device's default), so another dtype's is
        // `Param::from_tensor` of the tensor made in it.
        TensorKind::Param => {
            let values = data()?;
            let vl = f32_vec(&values);
            erased(param::<D>(if f32 {
                call!([values = values => vl, dims = dims => dl, dev = home => "&dev"]
                    Param::from_data(TensorData::new(values, dims), dev))
            } else {
                call!([values = values => vl, dims = dims => dl, dev = home => "&dev", dtype = dtype => "dtype"]
                    Param::from_tensor(Tensor::from_data(TensorData::new(values, dims), (dev, DType::from(dtype)))))
            }))
        }
        TensorKind::Buffer => {
            let values = data()?;
            let vl = f32_vec(&values);
            erased(tensor::<D>(if f32 {
                call!([values = values => vl, dims = dims => dl, dev = home => "&dev"]
                    Tensor::from_data(TensorData::new(values, dims), dev))
            } else {
                call!([values = values => vl, dims = dims => dl, dev = home => "&dev", dtype = dtype => "dtype"]
                    Tensor::from_data(TensorData::new(values, dims), (dev, DType::from(dtype))))
            }))
        }
        // A lazy param: `Param::uninitialized`, whose initializer runs on the first `val()`
        // (burn-core module/param/base.rs), requiring grad.
        TensorKind::Lazy => match spec.init {
            Some(LazyInit::Const) => {
                let value = spec.fill.ok_or_else(|| format!("{}: const needs fill", spec.name))?;
                // burn-nn initializer.rs `Initializer::Constant`, which takes no dtype (`full` in
                // the device's default): another dtype's is `full` in it.
                erased(param::<D>(if f32 {
                    call!([value = value as f64 => f64_lit(value as f64), dims = dims => dl, dev = home => "&dev"]
                        Initializer::Constant { value: value }.init(dims, dev))
                } else {
                    call!([value = value => f32_lit(value), dims = dims => dl, dev = home => "&dev", dtype = dtype => "dtype"]
                    Param::uninitialized(
                        ParamId::new(),
                        move |device: &Device, require_grad: bool| {
                            let t = Tensor::full(dims, value, (device, DType::from(dtype)));
                            if require_grad { t.require_grad() } else { t }
                        },
                        dev.clone(),
                        true,
                        Shape::new(dims),
                    ))
                }))
            }
            // Uniform in [-1, 1), burn's sampler seeded when the param initialises: the value
            // depends on the seed only, not on what ran before the first read.
            Some(LazyInit::Uniform) => {
                let seed = spec.seed.unwrap_or(0);
                erased(param::<D>(
                    call!([seed = seed => seed.to_string(), dims = dims => dl, dev = home => "&dev", dtype = dtype => "dtype"]
                    Param::uninitialized(
                        ParamId::new(),
                        move |device: &Device, require_grad: bool| {
                            device.seed(seed);
                            let t = Tensor::random(dims, Distribution::Uniform(-1.0, 1.0), (device, DType::from(dtype)));
                            if require_grad { t.require_grad() } else { t }
                        },
                        dev.clone(),
                        true,
                        Shape::new(dims),
                    )),
                ))
            }
            // From the device's generator as it stands when the param initialises (seeded once
            // per program at open): the values depend on the draws before this param's first read.
            Some(LazyInit::ProgramRng) => erased(param::<D>(
                call!([dims = dims => dl, dev = home => "&dev", dtype = dtype => "dtype"]
                Param::uninitialized(
                    ParamId::new(),
                    move |device: &Device, require_grad: bool| {
                        let t = Tensor::random(dims, Distribution::Uniform(-1.0, 1.0), (device, DType::from(dtype)));
                        if require_grad { t.require_grad() } else { t }
                    },
                    dev.clone(),
                    true,
                    Shape::new(dims),
                )),
            )),
            None => return Err(format!("{}: lazy tensor without init", spec.name)),
        },
    })
}
