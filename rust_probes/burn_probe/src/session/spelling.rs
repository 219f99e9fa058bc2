//! The burn calls of a [`super::BurnSession`] that are generic over a tensor's rank, each spelled
//! once through `call!`: the probe runs it, and the transcript records its text with the case's
//! names as variables. burn's ranks are const generics, so each is instantiated per rank (1 to 3)
//! and gives the same text for every rank; where a rank must be written (`unsqueeze_dim::<2>`),
//! the call is spelled per rank.
//!
//! A placeholder never shares its name with a local of the spelled expression: the transcript
//! replaces every free occurrence of a placeholder's name.

use crate::vals::{IntoVal, Val};
use aliasfuzz_protocol::transcript::{f32_lit, f32_vec};
use aliasfuzz_protocol::{MapFn, Outcome};
use burn::module::{Module, Param, ParamId};
use burn::tensor::Tensor;
#[allow(unused_imports)]
use burn::tensor::{DType, Device, FloatDType, Shape, TensorData};

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

/// A spelled call's result and text.
pub type Spelled<T> = (Result<T, Outcome>, String);

/// The text of `move || expression` (how `call!` spells a call) without the closure.
pub fn without_closure(text: String) -> String {
    match text.strip_prefix("move ||") {
        Some(rest) => rest.trim_start().to_string(),
        None => text,
    }
}

/// A shape as burn takes it: an array literal, `[2, 3]`.
pub fn dims_lit(dims: &[usize]) -> String {
    format!(
        "[{}]",
        dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
    )
}

/// `r` as a rank-erased value.
pub fn erased<T: IntoVal>(r: Spelled<T>) -> Spelled<Val> {
    (r.0.map(IntoVal::into_val), r.1)
}

/// The Rust type of a value, as a `let` names it (burn cannot infer a rank from `TensorData`).
pub fn type_of(v: &Val) -> String {
    match v {
        Val::P1(_) => "Param<Tensor<1>>".into(),
        Val::P2(_) => "Param<Tensor<2>>".into(),
        Val::P3(_) => "Param<Tensor<3>>".into(),
        Val::T1(_) => "Tensor<1>".into(),
        Val::T2(_) => "Tensor<2>".into(),
        Val::T3(_) => "Tensor<3>".into(),
    }
}

/// A write, fill or scale of a plain tensor `t` (spelled `var`): a new value to rebind the name
/// to (a burn tensor is a value).
pub fn edit_tensor<const D: usize>(t: Tensor<D>, var: &str, edit: &Edit) -> Spelled<Tensor<D>> {
    let dims = t.dims();
    match edit {
        Edit::Write { index: Some(i), value } => {
            let mut row = dims;
            row[0] = 1;
            call!([t = t => var, values = value.clone() => f32_vec(value), row_dims = row => dims_lit(&row),
            rows = *i..*i + 1 => format!("{i}..{}", i + 1)]
            {
                let row = Tensor::from_data(TensorData::new(values, row_dims), (&t.device(), t.dtype()));
                t.slice_assign([rows], row)
            })
        }
        // The old value is dropped before the new one is made, as the probe always did.
        Edit::Write { index: None, value } => {
            call!([t = t => var, values = value.clone() => f32_vec(value), shape = dims => dims_lit(&dims)]
            {
                let (device, dtype) = (t.device(), t.dtype());
                drop(t);
                Tensor::from_data(TensorData::new(values, shape), (&device, dtype))
            })
        }
        Edit::Fill(x) => {
            call!([t = t => var, rows = 0..dims[0] => format!("0..{}", dims[0]), x = *x => f32_lit(*x)] t.slice_fill([rows], x))
        }
        Edit::Scale(f) => call!([t = t => var, f = *f => f32_lit(*f)] t.mul_scalar(f)),
    }
}

/// An edit of a parameter, the way burn's own optimizer updates one (burn-optim
/// module_optimizer.rs `ModuleOptimizerMapper::map_float` + parameter_context.rs): `Param::map`
/// (keeps the ParamId), the edit on `tensor.inner()` (outside the graph), then `from_inner` and
/// `require_grad` restored.
pub fn edit_param<const D: usize>(p: Param<Tensor<D>>, var: &str, edit: &Edit) -> Spelled<Param<Tensor<D>>> {
    let dims = p.lazy_shape().as_slice().to_vec();
    match edit {
        Edit::Write { index: Some(i), value } => {
            let mut row = dims.clone();
            row[0] = 1;
            call!([p = p => var, values = value.clone() => f32_vec(value), row_dims = row.clone() => dims_lit(&row),
            rows = *i..*i + 1 => format!("{i}..{}", i + 1)]
            p.map(|t| {
                let (require_grad, autodiff) = (t.is_require_grad(), t.is_autodiff());
                let inner = t.inner();
                let row = Tensor::from_data(TensorData::new(values, row_dims), (&inner.device(), inner.dtype()));
                let out = inner.slice_assign([rows], row);
                let out = if autodiff { Tensor::from_inner(out) } else { out };
                if require_grad { out.require_grad() } else { out }
            }))
        }
        Edit::Write { index: None, value } => {
            call!([p = p => var, values = value.clone() => f32_vec(value), shape = dims.clone() => dims_lit(&dims)]
            p.map(|t| {
                let (require_grad, autodiff) = (t.is_require_grad(), t.is_autodiff());
                let inner = t.inner();
                let (device, dtype) = (inner.device(), inner.dtype());
                drop(inner);
                let out = Tensor::from_data(TensorData::new(values, shape), (&device, dtype));
                let out = if autodiff { Tensor::from_inner(out) } else { out };
                if require_grad { out.require_grad() } else { out }
            }))
        }
        Edit::Fill(x) => {
            call!([p = p => var, rows = 0..dims[0] => format!("0..{}", dims[0]), x = *x => f32_lit(*x)]
            p.map(|t| {
                let (require_grad, autodiff) = (t.is_require_grad(), t.is_autodiff());
                let out = t.inner().slice_fill([rows], x);
                let out = if autodiff { Tensor::from_inner(out) } else { out };
                if require_grad { out.require_grad() } else { out }
            }))
        }
        Edit::Scale(f) => {
            call!([p = p => var, f = *f => f32_lit(*f)]
            p.map(|t| {
                let (require_grad, autodiff) = (t.is_require_grad(), t.is_autodiff());
                let out = t.inner().mul_scalar(f);
                let out = if autodiff { Tensor::from_inner(out) } else { out };
                if require_grad { out.require_grad() } else { out }
            }))
        }
    }
}

/// `map` of a tensor `t` (spelled `var`, a param's `into_value()`): the name's value moved into
/// the element-wise call (`x = x.relu()`), so a handle nobody else holds is unique and burn may
/// compute in place on its buffer.
pub fn map_tensor<const D: usize>(t: Tensor<D>, var: &str, func: MapFn) -> Spelled<Tensor<D>> {
    match func {
        MapFn::Neg => call!([t = t => var] t.neg()),
        MapFn::Relu => call!([t = t => var] burn::tensor::activation::relu(t)),
        MapFn::AddScalar => call!([t = t => var] t.add_scalar(1.0)),
        MapFn::Clamp => call!([t = t => var] t.clamp(-1.0, 1.0)),
    }
}

/// `add`: `t + other`, `other` (spelled `other_var`, taken before `t` was moved) in `t`'s
/// autodiff mode (one burn call takes tensors of one mode); a leading dimension of 1 broadcasts.
pub fn add_tensor<const D: usize>(t: Tensor<D>, var: &str, o: Tensor<D>, other_var: &str) -> Spelled<Tensor<D>> {
    call!([t = t => var, o = o => other_var]
    {
        let other = if t.is_autodiff() { o.autodiff() } else { o.without_autodiff() };
        t + other
    })
}

/// `Module::to_device` or `Module::fork` of a param or tensor (`Param<Tensor<D>>` is a Module,
/// and so is a plain `Tensor<D>`, as a constant whose `fork` is `to_device`).
pub fn move_module<M: Module + IntoVal>(m: M, var: &str, fork: bool, device: &Device, spelled: &str) -> Spelled<Val> {
    if fork {
        erased(call!([m = m => var, device = device => spelled] Module::fork(m, device)))
    } else {
        erased(call!([m = m => var, device = device => spelled] Module::to_device(m, device)))
    }
}

/// One term of a step's loss, `(p * g).sum()`, `g` the param's gradient data (`grad_var`) in the
/// param's dtype on its device, moved to the home device where the param is elsewhere (after a
/// `move`; `to_device` is differentiable, burn-tensor base.rs `Tensor::to_device`).
pub fn loss_term<const D: usize>(
    p: &Param<Tensor<D>>,
    var: &str,
    grad: &TensorData,
    grad_var: &str,
    home: &Device,
) -> Spelled<Tensor<1>> {
    let on_home = p.val().device() == *home;
    if on_home {
        call!([p = p => var, grad = grad => grad_var]
        {
            let value = p.val();
            let g = Tensor::from_data(grad.clone(), (&value.device(), value.dtype()));
            (value * g).sum()
        })
    } else {
        call!([p = p => var, grad = grad => grad_var, home = home => "&dev"]
        {
            let value = p.val();
            let g = Tensor::from_data(grad.clone(), (&value.device(), value.dtype()));
            (value * g).sum().to_device(home)
        })
    }
}

/// A `replace`'s new tensor, of the target's rank `D`, from the value `src` held in the variable
/// `held` (taken before the target left its slot): a Param's value moved out of it
/// (`into_value`), or the tensor itself, with a leading 1 where its rank is less.
fn replacement<const D: usize>(src: Val, held: &str) -> Spelled<Tensor<D>> {
    let lower = src.shape().len() < D;
    match src {
        Val::P1(p) => rank_of(call!([p = p => held] p.into_value()), lower),
        Val::P2(p) => rank_of(call!([p = p => held] p.into_value()), lower),
        Val::P3(p) => rank_of(call!([p = p => held] p.into_value()), lower),
        Val::T1(t) => rank_of((Ok(t), held.to_string()), lower),
        Val::T2(t) => rank_of((Ok(t), held.to_string()), lower),
        Val::T3(t) => rank_of((Ok(t), held.to_string()), lower),
    }
}

/// `t` as a rank-`D` tensor: itself, or `t.unsqueeze()` where its rank is less.
fn rank_of<const R: usize, const D: usize>(t: Spelled<Tensor<R>>, lower: bool) -> Spelled<Tensor<D>> {
    let (t, text) = t;
    let t = match t {
        Ok(t) => t,
        Err(o) => return (Err(o), text),
    };
    if lower {
        call!([t = t => text] t.unsqueeze())
    } else {
        (Ok(crate::vals::to_rank(t)), text)
    }
}

/// `replace` of a param `p` (spelled `var`) by the value held in `held`: `Param::from_tensor`
/// (a new ParamId, burn#2428), or with `keep_id`, `Param::map(|_| value)`, which keeps the id.
pub fn replace_param<const D: usize>(
    p: Param<Tensor<D>>,
    var: &str,
    src: Val,
    held: &str,
    keep_id: bool,
) -> Spelled<Param<Tensor<D>>> {
    let (value, text) = replacement::<D>(src, held);
    let value = match value {
        Ok(v) => v,
        Err(o) => return (Err(o), text),
    };
    if keep_id {
        call!([p = p => var, value = value => text] p.map(|_| value))
    } else {
        drop(p);
        call!([value = value => text] Param::from_tensor(value))
    }
}

/// `replace` of a plain tensor: the name rebound to the value (`x = v`).
pub fn replace_tensor<const D: usize>(t: Tensor<D>, src: Val, held: &str) -> Spelled<Tensor<D>> {
    drop(t);
    replacement::<D>(src, held)
}

/// An `assign`'s source, of the target's rank `D`, from the value held in `held`: all of it
/// (as [`replacement`]), or its row `j` (`t.slice([j..j + 1])` reshaped to the row's dimensions
/// with leading 1s: a row of the target keeps the leading 1 that `slice_assign` wants, the whole
/// target drops it).
pub fn assign_source<const D: usize>(src: Val, held: &str, row: Option<usize>) -> Spelled<Tensor<D>> {
    let Some(j) = row else {
        return replacement::<D>(src, held);
    };
    match src {
        Val::P1(p) => row_part(call!([p = p => held] p.into_value()), j),
        Val::P2(p) => row_part(call!([p = p => held] p.into_value()), j),
        Val::P3(p) => row_part(call!([p = p => held] p.into_value()), j),
        Val::T1(t) => row_part((Ok(t), held.to_string()), j),
        Val::T2(t) => row_part((Ok(t), held.to_string()), j),
        Val::T3(t) => row_part((Ok(t), held.to_string()), j),
    }
}

fn row_part<const S: usize, const D: usize>(t: Spelled<Tensor<S>>, j: usize) -> Spelled<Tensor<D>> {
    let (t, text) = t;
    let t = match t {
        Ok(t) => t,
        Err(o) => return (Err(o), text),
    };
    let dims = t.dims();
    let tail = &dims[1..];
    let mut shape = [1usize; D];
    shape[D - tail.len()..].copy_from_slice(tail);
    call!([t = t => text, rows = j..j + 1 => format!("{j}..{}", j + 1), shape = shape => dims_lit(&shape)]
        t.slice([rows]).reshape(shape))
}

/// `assign` into a plain tensor: `slice_assign` of `src` (in the target's autodiff mode: one
/// burn call takes tensors of one mode) over row `index` or every row.
pub fn assign_tensor<const D: usize>(
    t: Tensor<D>,
    var: &str,
    index: Option<usize>,
    src: Spelled<Tensor<D>>,
) -> Spelled<Tensor<D>> {
    let (src, src_text) = src;
    let src = match src {
        Ok(s) => s,
        Err(o) => return (Err(o), src_text),
    };
    let rows = match index {
        Some(i) => i..i + 1,
        None => 0..t.dims()[0],
    };
    let rows_text = format!("{}..{}", rows.start, rows.end);
    call!([t = t => var, src = src => src_text, rows = rows => rows_text]
    {
        let value = if t.is_autodiff() { src.autodiff() } else { src.without_autodiff() };
        t.slice_assign([rows], value)
    })
}

/// `assign` into a parameter: `Param::map` (keeping its ParamId) over the `slice_assign` of
/// `src` into its values outside the graph, as [`edit_param`] writes.
pub fn assign_param<const D: usize>(
    p: Param<Tensor<D>>,
    var: &str,
    index: Option<usize>,
    src: Spelled<Tensor<D>>,
) -> Spelled<Param<Tensor<D>>> {
    let (src, src_text) = src;
    let src = match src {
        Ok(s) => s,
        Err(o) => return (Err(o), src_text),
    };
    let rows = match index {
        Some(i) => i..i + 1,
        None => 0..p.lazy_shape().as_slice()[0],
    };
    let rows_text = format!("{}..{}", rows.start, rows.end);
    call!([p = p => var, src = src => src_text, rows = rows => rows_text]
    p.map(|t| {
        let (require_grad, autodiff) = (t.is_require_grad(), t.is_autodiff());
        let inner = t.inner();
        let value = if inner.is_autodiff() { src.autodiff() } else { src.without_autodiff() };
        let out = inner.slice_assign([rows], value);
        let out = if autodiff { Tensor::from_inner(out) } else { out };
        if require_grad { out.require_grad() } else { out }
    }))
}

/// `append` by concatenation: `Tensor::cat(vec![t, src], 0)`, a new tensor (`src`: rows of `t`,
/// held in `held`, taken into `t`'s autodiff mode).
pub fn cat_tensor<const D: usize>(t: Tensor<D>, var: &str, src: Val, held: &str) -> Spelled<Tensor<D>> {
    let (src, src_text) = replacement::<D>(src, held);
    let src = match src {
        Ok(s) => s,
        Err(o) => return (Err(o), src_text),
    };
    call!([t = t => var, src = src => src_text]
    {
        let rows = if t.is_autodiff() { src.autodiff() } else { src.without_autodiff() };
        Tensor::cat(vec![t, rows], 0)
    })
}

/// An empty KV cache of `capacity` rows shaped like `like`'s, on its device, in its dtype and
/// autodiff mode, as burn users keep one (llama-burn's `AutoregressiveCache`: a preallocated
/// tensor each source is `slice_assign`ed into after the filled rows).
pub fn cache_new<const D: usize>(like: &Tensor<D>, like_text: &str, capacity: usize) -> Spelled<Tensor<D>> {
    call!([like = like => like_text, capacity = capacity => capacity.to_string()]
    {
        let mut shape = like.dims();
        shape[0] = capacity;
        let buffer = Tensor::zeros(shape, (&like.device(), like.dtype()));
        if like.is_autodiff() { buffer.autodiff() } else { buffer.without_autodiff() }
    })
}

/// `rows` (spelled `rows_text`) `slice_assign`ed into the cache `buffer` (spelled `var`) from row
/// `start` on, in the buffer's autodiff mode (the buffer moved in: a unique handle, burn's
/// in-place path, where llama-burn's `self.cache.clone()` keeps a second one).
pub fn cache_put<const D: usize>(
    buffer: Tensor<D>,
    var: &str,
    rows: Tensor<D>,
    rows_text: &str,
    start: usize,
) -> Spelled<Tensor<D>> {
    let end = start + rows.dims()[0];
    call!([buffer = buffer => var, rows = rows => rows_text, range = start..end => format!("{start}..{end}")]
    {
        let value = if buffer.is_autodiff() { rows.autodiff() } else { rows.without_autodiff() };
        buffer.slice_assign([range], value)
    })
}

/// The first `end` rows of the cache `buffer`: `buffer.clone().slice([0..end])`.
pub fn cache_rows<const D: usize>(buffer: &Tensor<D>, var: &str, end: usize) -> Spelled<Tensor<D>> {
    call!([buffer = buffer => var, range = 0..end => format!("0..{end}")] buffer.clone().slice([range]))
}

/// What a model slot holds after a failed call consumed its param: an uninitialised param of no
/// elements, never read (the name is lost), so that the model keeps its layout.
pub fn stand_in<const D: usize>() -> Spelled<Param<Tensor<D>>> {
    let dims = [0usize; D];
    call!([dims = dims => dims_lit(&dims)]
    Param::uninitialized(
        ParamId::new(),
        move |device: &Device, _: bool| Tensor::zeros(dims, device),
        Device::flex(),
        false,
        Shape::new(dims),
    ))
}
