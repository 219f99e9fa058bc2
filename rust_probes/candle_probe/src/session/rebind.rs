//! The ops of a [`CandleSession`] that rebind a model or program name to another tensor:
//! `replace` (a new or tied `Var` in the VarMap), `append` (`Tensor::cat`, candle-nn's KV cache),
//! the element-wise `map` and `add` (a new tensor computed from the name's), and `move`.

use super::{device_spelling, CandleSession, Handle, R};
use aliasfuzz_protocol::{AppendHow, DeviceRole, MapFn, MoveMethod, Outcome, ReplaceHow, CACHE_ROWS};
use candle_core::{Device, Tensor, Var};

impl CandleSession {
    /// `replace` with a new `Var`: `Var::from_tensor(&value)` (the value's own Var when it is one,
    /// candle#2124; a copy otherwise) inserted in the VarMap under the param's name. Optimizers
    /// made before keep the old Var.
    pub(super) fn replace(&mut self, target: &str, value: &str, how: ReplaceHow) -> R<()> {
        if how == ReplaceHow::Tie {
            // One Var under two VarMap keys: what tying two layers' weights is in candle.
            self.model_var(target, "replace")?;
            let Handle::Var(var) = self.get(value)? else {
                return Err(Outcome::Unsupported(
                    "a VarMap holds Vars: a plain tensor cannot be tied in (Var::from_tensor would \
                     copy it, which is `new`)"
                        .into(),
                ));
            };
            let v = self.tx.var(value);
            self.insert_var(target, &var, &v)?;
            let (r, text) = call!([w = &var => v] w.clone());
            return self.let_bind(target, (r.map(Handle::Var), text));
        }
        if how != ReplaceHow::New {
            return Err(Outcome::Unsupported(
                "candle has no call that rebinds a Var's storage (torch's p.data = v, p.set_(v)): \
                 Var::set copies values in, which is `assign`"
                    .into(),
            ));
        }
        self.model_var(target, "replace")?;
        let value_tensor = self.get(value)?.tensor().clone();
        let vs = self.t(value);
        let (var, text) = call!([value = &value_tensor => vs] Var::from_tensor(value)?);
        let v = self.tx.var(target);
        self.tx.line(format!("let {v} = {text};"));
        let var: Var = var?;
        self.insert_var(target, &var, &v)?;
        self.bind(target.to_string(), Handle::Var(var));
        Ok(())
    }

    /// `append`: `Tensor::cat`, or candle-nn's KV cache (a buffer of `CACHE_ROWS` rows that
    /// `slice_set`s each source in, read back as `narrow(0, 0, len)`); the name's first cache
    /// append starts one holding the name's rows. A source of lower rank is a row, given a
    /// leading dimension of 1.
    pub(super) fn append(&mut self, target: &str, source: &str, how: AppendHow) -> R<()> {
        let t = self.get(target)?.tensor().clone();
        let src = self.get(source)?.tensor().clone();
        let (ts, ss) = (self.t(target), self.t(source));
        let row = src.rank() < t.rank();
        let grown = match how {
            AppendHow::Cat => {
                self.caches.remove(target);
                if row {
                    call!([t = &t => ts, src = &src => ss] Tensor::cat(&[t, &src.unsqueeze(0)?], 0)?)
                } else {
                    call!([t = &t => ts, src = &src => ss] Tensor::cat(&[t, src], 0)?)
                }
            }
            AppendHow::Cache => {
                if !self.caches.contains_key(target) {
                    let var = self.tx.var(target);
                    let cv = self.tx.helper(&format!("{var}_cache"));
                    let (cache, text) =
                        call!([rows = CACHE_ROWS => CACHE_ROWS.to_string()] candle_nn::kv_cache::Cache::new(0, rows));
                    self.tx.line(format!("let mut {cv} = {text};"));
                    let mut cache = cache?;
                    self.stmt(call!([cache = &mut cache => cv.clone(), t = &t => ts.clone()] cache.append(t)?))?;
                    self.caches.insert(target.to_string(), (cache, cv));
                }
                let (cache, cv) = self.caches.get_mut(target).expect("inserted above");
                let cv = cv.clone();
                let (r, text) = if row {
                    call!([cache = cache => cv.clone(), src = &src => ss] cache.append(&src.unsqueeze(0)?)?)
                } else {
                    call!([cache = cache => cv.clone(), src = &src => ss] cache.append(src)?)
                };
                self.tx.line(format!("{text};"));
                r?;
                let (cache, _) = self.caches.get(target).expect("inserted above");
                call!([cache = cache => cv] cache.current_data()?.expect("an append filled the cache"))
            }
        };
        self.let_bind(target, (grown.0.map(Handle::Tensor), grown.1))
    }

    /// `map`: `let x = x.relu()?;` and the like, a new tensor bound to the name.
    pub(super) fn map(&mut self, target: &str, func: MapFn) -> R<()> {
        let t = self.get(target)?.tensor().clone();
        let ts = self.t(target);
        let out = match func {
            MapFn::Neg => call!([t = &t => ts] t.neg()?),
            MapFn::Relu => call!([t = &t => ts] t.relu()?),
            MapFn::AddScalar => call!([t = &t => ts] (t + 1.0)?),
            MapFn::Clamp => call!([t = &t => ts] t.clamp(-1f32, 1f32)?),
        };
        self.caches.remove(target);
        self.let_bind(target, (out.0.map(Handle::Tensor), out.1))
    }

    /// `add`: `let x = x.add(&other)?;`, or `broadcast_add` for a row (candle's `add` wants equal
    /// shapes), a new tensor bound to the name.
    pub(super) fn add(&mut self, target: &str, other: &str) -> R<()> {
        let t = self.get(target)?.tensor().clone();
        let o = self.get(other)?.tensor().clone();
        let (ts, os) = (self.t(target), self.t(other));
        let out = if t.dims() == o.dims() {
            call!([t = &t => ts, o = &o => os] t.add(o)?)
        } else {
            call!([t = &t => ts, o = &o => os] t.broadcast_add(o)?)
        };
        self.caches.remove(target);
        self.let_bind(target, (out.0.map(Handle::Tensor), out.1))
    }

    /// `move`: `let w = w.to_device(&dev)?`, the name rebound; the VarMap and the optimizers
    /// keep the original Var.
    pub(super) fn move_to(&mut self, target: &str, device: DeviceRole, method: MoveMethod) -> R<()> {
        if method == MoveMethod::Fork {
            return Err(Outcome::Unsupported(
                "candle has no fork (burn only); Tensor::to_device is `to`".into(),
            ));
        }
        let (dev, spelled) = match device {
            DeviceRole::Home => (self.home.clone(), "&dev".to_string()),
            DeviceRole::Cpu => (Device::Cpu, "&Device::Cpu".to_string()),
            DeviceRole::Alt => {
                let alt = self.alt.clone().ok_or_else(|| {
                    Outcome::Unsupported(
                        "no second candle device here (cpu only: build with --features cuda \
                         or metal on a machine that has one)"
                            .into(),
                    )
                })?;
                if !self.alt_spelled {
                    // The probe opened its devices once (`main.rs`); a reproducer opens it here.
                    self.tx.line(format!("let alt = {};", device_spelling(&alt)));
                    self.alt_spelled = true;
                }
                (alt, "&alt".to_string())
            }
        };
        let t = self.get(target)?.tensor().clone();
        let ts = self.t(target);
        let (r, text) = call!([t = &t => ts, dev = &dev => spelled] t.to_device(dev)?);
        self.let_bind(target, (r.map(Handle::Tensor), text))
    }
}
