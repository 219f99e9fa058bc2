//! Rank-erased values bound to names, the model's slots, observations, and the rank dispatch of
//! the ops not spelled yet onto the rank-generic burn calls of `support.rs` (the spelled ones are
//! in `session/spelling.rs`).
//!
//! burn tensors carry their rank in the type (`Tensor<D>`); programs use ranks 1 to 3, so a bound
//! value is one of six variants and each op is a generic function instantiated per rank.

use crate::model::{placeholder, Model};
use crate::session::spelling::Edit;
use aliasfuzz_protocol::{Obs, CACHE_ROWS};
use burn::module::Param;
use burn::tensor::{DType, Device, Tensor};

/// A name's value: a burn `Param` (has a `ParamId`, may be lazy) or a plain tensor.
pub enum Val {
    P1(Param<Tensor<1>>),
    P2(Param<Tensor<2>>),
    P3(Param<Tensor<3>>),
    T1(Tensor<1>),
    T2(Tensor<2>),
    T3(Tensor<3>),
}

pub trait IntoVal {
    fn into_val(self) -> Val;
}

macro_rules! into_val {
    ($d:literal, $p:ident, $t:ident) => {
        impl IntoVal for Param<Tensor<$d>> {
            fn into_val(self) -> Val {
                Val::$p(self)
            }
        }
        impl IntoVal for Tensor<$d> {
            fn into_val(self) -> Val {
                Val::$t(self)
            }
        }
    };
}
into_val!(1, P1, T1);
into_val!(2, P2, T2);
into_val!(3, P3, T3);

/// Dispatches on a `Val` (owned or borrowed), binding the param or the tensor of any rank.
#[macro_export]
macro_rules! on_val {
    ($v:expr, param $p:ident => $pe:expr, tensor $t:ident => $te:expr $(,)?) => {
        match $v {
            $crate::vals::Val::P1($p) => $pe,
            $crate::vals::Val::P2($p) => $pe,
            $crate::vals::Val::P3($p) => $pe,
            $crate::vals::Val::T1($t) => $te,
            $crate::vals::Val::T2($t) => $te,
            $crate::vals::Val::T3($t) => $te,
        }
    };
}

impl Val {
    /// A Rust clone of the handle: `Param::clone` (same id, shared lazy state) or `Tensor::clone`
    /// (same primitive, reference counted).
    pub fn handle_clone(&self) -> Val {
        match self {
            Val::P1(p) => Val::P1(p.clone()),
            Val::P2(p) => Val::P2(p.clone()),
            Val::P3(p) => Val::P3(p.clone()),
            Val::T1(t) => Val::T1(t.clone()),
            Val::T2(t) => Val::T2(t.clone()),
            Val::T3(t) => Val::T3(t.clone()),
        }
    }

    /// Shape without forcing a lazy parameter.
    pub fn shape(&self) -> Vec<usize> {
        on_val!(self, param p => p.lazy_shape().as_slice().to_vec(), tensor t => t.dims().to_vec())
    }
}

/// The model's slots: a param is addressed by (rank, index) (`model::Model`).
impl Model {
    /// Appends a param; returns its (rank, index) slot.
    pub fn push(&mut self, v: Val) -> Result<(usize, usize), String> {
        Ok(match v {
            Val::P1(p) => {
                self.p1.push(p);
                (1, self.p1.len() - 1)
            }
            Val::P2(p) => {
                self.p2.push(p);
                (2, self.p2.len() - 1)
            }
            Val::P3(p) => {
                self.p3.push(p);
                (3, self.p3.len() - 1)
            }
            _ => return Err("only params live in the model".into()),
        })
    }

    /// A `Param::clone` of the slot's param (same id, shared lazy state).
    pub fn get(&self, rank: usize, idx: usize) -> Val {
        match rank {
            1 => Val::P1(self.p1[idx].clone()),
            2 => Val::P2(self.p2[idx].clone()),
            _ => Val::P3(self.p3[idx].clone()),
        }
    }

    /// Moves the slot's param out (the model holds a placeholder until `put`).
    pub fn take(&mut self, rank: usize, idx: usize) -> Val {
        match rank {
            1 => Val::P1(std::mem::replace(&mut self.p1[idx], placeholder())),
            2 => Val::P2(std::mem::replace(&mut self.p2[idx], placeholder())),
            _ => Val::P3(std::mem::replace(&mut self.p3[idx], placeholder())),
        }
    }

    pub fn put(&mut self, rank: usize, idx: usize, v: Val) -> Result<(), String> {
        match (rank, v) {
            (1, Val::P1(p)) => self.p1[idx] = p,
            (2, Val::P2(p)) => self.p2[idx] = p,
            (3, Val::P3(p)) => self.p3[idx] = p,
            (_, other) => {
                return Err(format!(
                    "a rank-{rank} model param cannot be rebound to a {}",
                    describe(&other)
                ))
            }
        }
        Ok(())
    }
}

pub fn describe(v: &Val) -> String {
    match v {
        Val::P1(_) | Val::P2(_) | Val::P3(_) => format!("Param<Tensor<{}>>", v.shape().len()),
        Val::T1(_) => "Tensor<1>".into(),
        Val::T2(_) => "Tensor<2>".into(),
        Val::T3(_) => "Tensor<3>".into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Devices.

/// The accelerator devices compiled in, by protocol name (constructors, without autodiff).
#[allow(unused_mut, clippy::vec_init_then_push)]
pub fn gpu_constructors() -> Vec<(&'static str, fn() -> Device)> {
    let mut v: Vec<(&'static str, fn() -> Device)> = Vec::new();
    #[cfg(all(feature = "wgpu", not(feature = "vulkan")))]
    v.push(("wgpu", || Device::wgpu(burn::tensor::DeviceKind::DefaultDevice)));
    #[cfg(feature = "vulkan")]
    v.push(("wgpu", || Device::vulkan(burn::tensor::DeviceKind::DefaultDevice)));
    #[cfg(feature = "metal")]
    v.push(("metal", || Device::metal(burn::tensor::DeviceKind::DefaultDevice)));
    #[cfg(feature = "cuda")]
    v.push(("cuda", || Device::cuda(0)));
    v
}

#[allow(deprecated)] // burn-ndarray is deprecated in 0.22 but still shipped; it is our alt CPU device
pub fn ndarray_device() -> Device {
    Device::ndarray()
}

/// The protocol name of a device. Device equality ignores autodiff (burn-tensor device.rs
/// `impl PartialEq for Device`), which is what we want here.
pub fn device_name(d: &Device) -> String {
    if *d == Device::flex() {
        return "flex".into();
    }
    if *d == ndarray_device() {
        return "ndarray".into();
    }
    for (name, make) in gpu_constructors() {
        if *d == make() {
            return name.into();
        }
    }
    format!("{d:?}")
}

// ---------------------------------------------------------------------------------------------
// Observation. Never forces a lazy parameter: `is_initialized`, `lazy_shape` and `lazy_device`
// read the shared lazy state without running the initializer (burn-core module/param/base.rs).

/// The protocol's name of a dtype: the case format's for f32, f16 and bf16, burn's own
/// lowercased for another (`f64`, `flex32`, ...).
pub fn dtype_name(d: DType) -> String {
    match d {
        DType::F32 => "f32".into(),
        DType::F16 => "f16".into(),
        DType::BF16 => "bf16".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}

pub fn obs_tensor<const D: usize>(t: &Tensor<D>, identity: Option<String>) -> Obs {
    let (value, note) = match read_values(t) {
        Ok(v) => (Some(v), None),
        Err(e) => (None, Some(e)),
    };
    Obs {
        shape: t.dims().to_vec(),
        value,
        device: device_name(&t.device()),
        requires_grad: Some(t.is_require_grad()),
        identity,
        initialized: true,
        dtype: Some(dtype_name(t.dtype())),
        note,
    }
}

pub fn obs_param<const D: usize>(p: &Param<Tensor<D>>) -> Obs {
    let identity = Some(p.id.to_string());
    if !p.is_initialized() {
        return Obs {
            shape: p.lazy_shape().as_slice().to_vec(),
            value: None,
            device: device_name(&p.lazy_device()),
            requires_grad: None,
            identity,
            initialized: false,
            // An uninitialised param has no tensor to ask (reading its dtype would create it).
            dtype: None,
            note: None,
        };
    }
    obs_tensor(&p.val(), identity)
}

pub fn observe_val(v: &Val) -> Obs {
    on_val!(v, param p => obs_param(p), tensor t => obs_tensor(t, None))
}

// ---------------------------------------------------------------------------------------------
// Value ops: a burn tensor is a value, so each "in-place" op rebinds the name to the result.

// `Edit` and the burn calls behind it are in `support.rs`; checking one is the probe's own job
// (a reproducer replays a case that was valid).
impl Edit {
    /// Checks the edit against the target's shape before any value is moved into burn, so that
    /// a bad index or length is an error for the op and the name keeps its value.
    pub fn check(&self, shape: &[usize]) -> Result<(), String> {
        if let Edit::Write { index, value } = self {
            let numel: usize = shape.iter().product();
            let rows = shape.first().copied().unwrap_or(1);
            let want = match index {
                Some(i) if *i >= rows => return Err(format!("row {i} out of range for shape {shape:?}")),
                Some(_) => numel / rows.max(1),
                None => numel,
            };
            if value.len() != want {
                return Err(format!(
                    "write of {} values where shape {shape:?} needs {want}",
                    value.len()
                ));
            }
        }
        Ok(())
    }
}

/// The value `v` holds (a param's `val()`, which initialises a lazy one, as reading it does), with
/// leading dimensions of 1 up to rank `D` (`Tensor::unsqueeze`): an `assign`'s source.
pub fn source_tensor<const D: usize>(v: &Val) -> Tensor<D> {
    on_val!(v, param p => to_rank(p.val()), tensor t => to_rank(t.clone()))
}

/// `t` as a rank-`D` tensor: `t` itself when its rank is `D`, else `t.unsqueeze::<D>()`. Only
/// the type changes for the same rank: `unsqueeze` is a `reshape`, a new node of the autodiff
/// graph, so a parameter's `val()` passed through it would no longer be the tracked leaf that the
/// user's `p.val()` is (`Param::from_tensor` of it panics, a `Param::map` onto it stops training).
pub fn to_rank<const R: usize, const D: usize>(t: Tensor<R>) -> Tensor<D> {
    let t: Box<dyn std::any::Any> = Box::new(t);
    match t.downcast::<Tensor<D>>() {
        Ok(same_rank) => *same_rank,
        Err(t) => t.downcast::<Tensor<R>>().expect("a Tensor<R>").unsqueeze::<D>(),
    }
}

// ---------------------------------------------------------------------------------------------
// `append` into a KV cache (`RowCache`; a `cat` append is spelled in
// `session/spelling.rs`). A source of a rank less is one row: `source_tensor` unsqueezes it.

/// A `RowCache` of the rank of the name it grows.
pub enum KvCache {
    R1(RowCache<1>),
    R2(RowCache<2>),
    R3(RowCache<3>),
}

impl KvCache {
    /// An empty cache for rows shaped like `v`'s, on `v`'s device.
    pub fn for_rows_of(v: &Val) -> KvCache {
        match v {
            Val::P1(p) => KvCache::R1(RowCache::new(&p.val(), CACHE_ROWS)),
            Val::T1(t) => KvCache::R1(RowCache::new(t, CACHE_ROWS)),
            Val::P2(p) => KvCache::R2(RowCache::new(&p.val(), CACHE_ROWS)),
            Val::T2(t) => KvCache::R2(RowCache::new(t, CACHE_ROWS)),
            Val::P3(p) => KvCache::R3(RowCache::new(&p.val(), CACHE_ROWS)),
            Val::T3(t) => KvCache::R3(RowCache::new(t, CACHE_ROWS)),
        }
    }

    /// Appends `src` and returns the filled rows.
    pub fn append(&mut self, src: &Val) -> Val {
        match self {
            KvCache::R1(c) => c.append(source_tensor(src)).into_val(),
            KvCache::R2(c) => c.append(source_tensor(src)).into_val(),
            KvCache::R3(c) => c.append(source_tensor(src)).into_val(),
        }
    }
}

/// `t` in `like`'s autodiff mode (one burn call takes tensors of one mode).
fn in_mode_of<const D: usize>(like: &Tensor<D>, t: Tensor<D>) -> Tensor<D> {
    if like.is_autodiff() {
        t.autodiff()
    } else {
        t.without_autodiff()
    }
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

/// The tensor's values, row-major, read to the host.
pub fn read_values<const D: usize>(t: &Tensor<D>) -> Result<Vec<f32>, String> {
    t.to_data()
        .try_to_vec_as::<f32>()
        .map_err(|e| format!("to_data: {e:?}"))
}
