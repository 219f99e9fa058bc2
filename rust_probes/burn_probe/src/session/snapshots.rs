//! The `snapshot` op of a [`BurnSession`]: each method the burn call a user writes (the table
//! is in README.md), and the records it reads a param or a running statistic back from.

use super::records::{read_entry, Entry};
use super::spelling::{dims_lit, erased, type_of, Spelled};
use super::{BurnSession, Slot};
use crate::model::Model;
use crate::on_val;
use crate::vals::{IntoVal, Val};
use aliasfuzz_protocol::{Method, Outcome};
use burn::module::Module;
use burn::tensor::{Device, FloatDType, Tensor};

/// A one-call method on the value `t` (spelled `var`); `dtype`: the program's, which the dtype
/// conversions end in.
fn snap_tensor<const D: usize>(
    t: Tensor<D>,
    var: &str,
    method: Method,
    dtype: FloatDType,
) -> Result<Spelled<Val>, Outcome>
where
    Tensor<D>: IntoVal,
{
    let dims = t.dims();
    Ok(match method {
        // `Tensor::clone`: a handle on the same primitive.
        Method::Clone => erased(call!([t = t => var] t.clone())),
        Method::Detach => erased(call!([t = t => var] t.detach())),
        Method::Mul1 => erased(call!([t = t => var] t.mul_scalar(1.0))),
        // `to_device` onto the tensor's own device.
        Method::ToHome => erased(call!([t = t => var] {
            let device = t.device();
            t.to_device(&device)
        })),
        Method::ToCpu => erased(call!([t = t => var] t.to_device(&Device::flex().autodiff()))),
        // Every element in one dimension.
        Method::Reshape => {
            let n: usize = dims.iter().product();
            erased(call!([t = t => var, n = n => n.to_string()] t.reshape([n])))
        }
        Method::ViewRow => erased(call!([t = t => var] t.slice([0..1]))),
        Method::Transpose => erased(call!([t = t => var] t.transpose())),
        // `to_data` to host memory and `from_data` back onto the tensor's device, in the data's
        // dtype (`from_data(data, &device)` would convert to the device's default: options.rs).
        Method::ToHost => erased(same_rank::<D>(
            call!([t = t => var] Tensor::from_data(t.to_data(), (&t.device(), t.dtype()))),
        )),
        // cast.rs: a cast to the tensor's own float dtype returns the tensor.
        Method::ToSameDtype => erased(call!([t = t => var, dtype = dtype => "dtype"] t.cast(dtype))),
        // Asked first, as burn's device.rs advises before choosing a reduced precision: a backend
        // without bf16 (ndarray) panics in the cast ("Unsupported dtype: BF16").
        Method::ViaBf16 if !t.device().supports_dtype(FloatDType::BF16) => {
            return Err(Outcome::Unsupported(
                "via_bf16: this backend does not support bf16 (Device::supports_dtype)".into(),
            ))
        }
        Method::ViaBf16 => erased(call!([t = t => var, dtype = dtype => "dtype"] t.cast(FloatDType::BF16).cast(dtype))),
        // Every backend has f32 (flex and ndarray: Device::supports_dtype).
        Method::ViaF32 => erased(call!([t = t => var, dtype = dtype => "dtype"] t.cast(FloatDType::F32).cast(dtype))),
        Method::Flip => erased(call!([t = t => var] t.flip([0]))),
        // Rows 1 to the end.
        Method::Narrow => {
            let rows = dims[0].wrapping_sub(1);
            erased(call!([t = t => var, rows = rows => rows.to_string()] t.narrow(0, 1, rows)))
        }
        // `Tensor::chunk`: the first chunk has ceil(rows / 2) rows, as torch's.
        Method::Chunk => erased(call!([t = t => var] t.chunk(2, 0).remove(0))),
        other => {
            return Err(Outcome::Error(format!(
                "internal: {} is not a tensor method",
                other.as_str()
            )))
        }
    })
}

fn same_rank<const D: usize>(r: Spelled<Tensor<D>>) -> Spelled<Tensor<D>> {
    r
}

/// The methods whose result has another rank than the source (`expand`, `unsqueeze`: one more;
/// `squeeze`, `select`: one less) or that take one rank only (`permute`): burn's ranks are const
/// generics, so each is spelled per rank (1 to 3, vals.rs). The case validator sends no other.
fn snap_rank(v: Val, var: &str, method: Method) -> Result<Spelled<Val>, Outcome> {
    let shape = v.shape();
    // `expand`: a new first dimension of 2 over the same elements (a broadcast: burn-tensor
    // base.rs `expand`).
    let expanded: Vec<usize> = std::iter::once(2).chain(shape.iter().copied()).collect();
    let el = dims_lit(&expanded);
    Ok(match (method, v) {
        (Method::Expand, Val::T1(t)) => {
            erased(call!([t = t => var, shape = [2, shape[0]] => el] t.unsqueeze_dim::<2>(0).expand(shape)))
        }
        (Method::Expand, Val::T2(t)) => {
            erased(call!([t = t => var, shape = [2, shape[0], shape[1]] => el] t.unsqueeze_dim::<3>(0).expand(shape)))
        }
        (Method::Permute, Val::T3(t)) => erased(call!([t = t => var] t.permute([1, 2, 0]))),
        (Method::Unsqueeze, Val::T1(t)) => erased(call!([t = t => var] t.unsqueeze_dim::<2>(0))),
        (Method::Unsqueeze, Val::T2(t)) => erased(call!([t = t => var] t.unsqueeze_dim::<3>(0))),
        (Method::Squeeze, Val::T2(t)) => erased(call!([t = t => var] t.squeeze_dim::<1>(0))),
        (Method::Squeeze, Val::T3(t)) => erased(call!([t = t => var] t.squeeze_dim::<2>(0))),
        // Row 0 with the rank dropped: `select_dim` ("a dimension index, and then squeezing that
        // dim", burn-tensor base.rs); `select` takes an index tensor and keeps the rank.
        (Method::Select, Val::T2(t)) => erased(call!([t = t => var] t.select_dim::<1>(0, 0))),
        (Method::Select, Val::T3(t)) => erased(call!([t = t => var] t.select_dim::<2>(0, 0))),
        (m, v) => {
            return Err(Outcome::Error(format!(
                "internal: {} of a rank-{} tensor",
                m.as_str(),
                v.shape().len()
            )))
        }
    })
}

impl BurnSession {
    /// The model `of` is read from, spelled, and where `of` is in it: the model itself for its
    /// param or statistic; for a Param bound outside it, a one-param model
    /// (`let s_model = Model { p1: vec![a.clone()], ..Model::default() };`).
    fn record_base(&mut self, name: &str, of: &str, src: Val) -> Result<(Model, String, Entry), Outcome> {
        let entry = match self.slots.get(of) {
            Some(Slot::Model(r, i)) => Some(Entry::Param(*r, *i)),
            Some(Slot::ModelStat(i, stat)) => Some(Entry::Stat(*i, *stat)),
            _ => None,
        };
        if let Some(entry) = entry {
            self.refuse_lost_params()?;
            return Ok((self.model.clone(), "model".into(), entry));
        }
        let spelled = format!("{}.clone()", self.tx.var(of));
        let ((model, text), rank) = match src {
            Val::P1(p) => (call!([p = p => spelled] Model { p1: vec![p], ..Model::default() }), 1),
            Val::P2(p) => (call!([p = p => spelled] Model { p2: vec![p], ..Model::default() }), 2),
            Val::P3(p) => (call!([p = p => spelled] Model { p3: vec![p], ..Model::default() }), 3),
            _ => {
                return Err(Outcome::Unsupported(
                    "burn records hold module params only: a plain Tensor in a module is a \
                     constant whose visit records nothing (burn-core module/param/constant.rs, \
                     `TODO: tensor record should persist`)"
                        .into(),
                ))
            }
        };
        let var = self.tx.var(name);
        let mv = self.tx.helper(&format!("{var}_model"));
        self.tx.line(format!("let {mv} = {text};"));
        Ok((model?, mv, Entry::Param(rank, 0)))
    }

    /// An error when a param was lost to an earlier failed call: its slot holds this probe's
    /// placeholder, which no user's model has, so a record or file of the model would show it.
    pub(super) fn refuse_lost_params(&self) -> Result<(), Outcome> {
        if let Some(why) = &self.layers_lost {
            return Err(Outcome::Error(format!("the model's layers were lost: {why}")));
        }
        match self.params.iter().find(|mp| self.lost.contains(&(mp.rank, mp.idx))) {
            Some(mp) => Err(Outcome::Error(format!(
                "{} was lost to an earlier failed call: the model cannot be recorded",
                mp.name
            ))),
            None => Ok(()),
        }
    }

    pub(super) fn snapshot(&mut self, name: &str, of: &str, method: Method) -> Outcome {
        let src = match self.get(of) {
            Ok(v) => v,
            Err(o) => return o,
        };
        let of_stat = matches!(self.slots.get(of), Some(Slot::ModelStat(..) | Slot::LayerStat(..)));
        let result: Result<Val, Outcome> = match method {
            // A module clone's running statistic, read back as a tensor (layers.rs).
            Method::StateDict | Method::SaveLoad if matches!(self.slots.get(of), Some(Slot::LayerStat(..))) => {
                self.snapshot_stat(of, method)
            }
            // The same handle bound to the name: `Param::clone` (same ParamId, shared lazy state)
            // or `Tensor::clone`.
            Method::Alias => {
                let var = self.tx.var(of);
                let spelled = if of_stat {
                    format!("{var}.value()")
                } else {
                    format!("{var}.clone()")
                };
                return self.let_spelled(name, Ok((Ok(src), spelled)));
            }
            Method::Contiguous => Err(Outcome::Unsupported(
                "burn has no contiguous call: layout is internal to each backend (burn-tensor \
                 0.22.1 Tensor API)"
                    .into(),
            )),
            Method::Copy => Err(Outcome::Unsupported(
                "burn has no copy-into call (no copy_/copy_from in the burn-tensor 0.22.1 Tensor \
                 API): tensors are values"
                    .into(),
            )),
            Method::Data => Err(Outcome::Unsupported(
                "burn has no `.data` (a tensor over the same storage outside autograd and a \
                 version counter; Tensor::detach is the `detach` method)"
                    .into(),
            )),
            Method::Deepcopy => Err(Outcome::Unsupported(
                "burn has no deep copy: Tensor::clone and Param::clone are handle clones and \
                 Module clones share lazy and running state (burn-core module/param/base.rs, \
                 running.rs)"
                    .into(),
            )),
            // The model's record (or file) loaded, then the param or statistic read out of the
            // loaded model (records.rs).
            Method::StateDict | Method::SaveLoad => {
                let spelled = self.record_snapshot(name, of, src, method);
                return self.let_spelled(name, spelled);
            }
            // Tensor methods on the value: `Param::val()` (forces a lazy param) or the tensor.
            m @ (Method::Expand | Method::Permute | Method::Unsqueeze | Method::Squeeze | Method::Select) => {
                let var = self.value_spelling(of);
                return self.let_spelled(
                    name,
                    snap_rank(
                        on_val!(src, param p => p.val().into_val(), tensor t => t.into_val()),
                        &var,
                        m,
                    ),
                );
            }
            m => {
                let var = self.value_spelling(of);
                let dtype = self.dtype;
                return self.let_spelled(
                    name,
                    on_val!(src, param p => snap_tensor(p.val(), &var, m, dtype), tensor t => snap_tensor(t, &var, m, dtype)),
                );
            }
        };
        match result {
            Ok(v) => {
                self.bind(name.to_string(), Slot::Own(v));
                Outcome::Ok
            }
            Err(o) => o,
        }
    }

    /// `let name: T = <call>;` for a spelled snapshot, binding the name to what it gave. An
    /// error before any burn call ran (`Err`) records nothing.
    fn let_spelled(&mut self, name: &str, spelled: Result<Spelled<Val>, Outcome>) -> Outcome {
        let (r, text) = match spelled {
            Ok(s) => s,
            Err(o) => return o,
        };
        let var = self.tx.var(name);
        match r {
            Ok(v) => {
                self.tx.line(format!("let {var}: {} = {text};", type_of(&v)));
                self.bind(name.to_string(), Slot::Own(v));
                Outcome::Ok
            }
            Err(o) => {
                self.tx.line(format!("let {var} = {text};"));
                o
            }
        }
    }

    /// `state_dict`: the record of the model `of` lives in (`into_record`) loaded back into it
    /// with fresh layers; `save_load`: its file (`save_file`) loaded into a fresh model of the
    /// same layout on the home device (the loaded param carries the ParamId stored in the file).
    /// The param, or the statistic's value, is read out of the loaded model (records.rs).
    fn record_snapshot(&mut self, name: &str, of: &str, src: Val, method: Method) -> Result<Spelled<Val>, Outcome> {
        let (base, base_text, entry) = self.record_base(name, of, src)?;
        let var = self.tx.var(name);
        let (read, text) = match method {
            Method::StateDict => {
                let rv = self.tx.helper(&format!("{var}_record"));
                let (record, text) = call!([base = &base => base_text.clone()] base.clone().into_record());
                self.tx.line(format!("let {rv} = {text};"));
                self.read_record(base, &base_text, record?, &rv)
            }
            _ => {
                let (read, text, _, _) = self.file_round_trip(&base, &base_text, &var)?;
                (Ok(read), text)
            }
        };
        Ok(match read {
            Ok(read) => read_entry(&read, &text, entry),
            Err(o) => (Err(o), text),
        })
    }
}
