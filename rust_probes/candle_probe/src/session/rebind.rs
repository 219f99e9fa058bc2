//! The ops of a [`CandleSession`] that rebind a model or program name to another tensor:
//! `replace` (a new or tied `Var` in the VarMap), `append` (`Tensor::cat`, candle-nn's KV cache),
//! the element-wise `map` and `add` (a new tensor computed from the name's), and `move`.

use super::{ce, CandleSession, Handle, R};
use crate::support::insert_var;
use aliasfuzz_protocol::{AppendHow, DeviceRole, MapFn, MoveMethod, Outcome, ReplaceHow, CACHE_ROWS};
use candle_core::{Device, Tensor, Var};
use candle_nn::kv_cache::Cache;

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
            insert_var(&self.varmap, target, &var);
            self.bind(target.to_string(), Handle::Var(var));
            return Ok(());
        }
        if how != ReplaceHow::New {
            return Err(Outcome::Unsupported(
                "candle has no call that rebinds a Var's storage (torch's p.data = v, p.set_(v)): \
                 Var::set copies values in, which is `assign`"
                    .into(),
            ));
        }
        self.model_var(target, "replace")?;
        let var = ce(Var::from_tensor(self.get(value)?.tensor()))?;
        insert_var(&self.varmap, target, &var);
        self.bind(target.to_string(), Handle::Var(var));
        Ok(())
    }

    /// `append`: `Tensor::cat`, or candle-nn's KV cache (a buffer of `CACHE_ROWS` rows that
    /// `slice_set`s each source in, read back as `narrow(0, 0, len)`); the name's first cache
    /// append starts one holding the name's rows.
    pub(super) fn append(&mut self, target: &str, source: &str, how: AppendHow) -> R<()> {
        let t = self.get(target)?.tensor().clone();
        let src = self.get(source)?.tensor().clone();
        let src = if src.rank() < t.rank() { ce(src.unsqueeze(0))? } else { src };
        let grown = match how {
            AppendHow::Cat => {
                self.caches.remove(target);
                ce(Tensor::cat(&[&t, &src], 0))?
            }
            AppendHow::Cache => {
                if !self.caches.contains_key(target) {
                    let mut cache = Cache::new(0, CACHE_ROWS);
                    ce(cache.append(&t))?;
                    self.caches.insert(target.to_string(), cache);
                }
                let cache = self.caches.get_mut(target).expect("inserted above");
                ce(cache.append(&src))?;
                ce(cache.current_data())?.expect("an append filled the cache")
            }
        };
        self.bind(target.to_string(), Handle::Tensor(grown));
        Ok(())
    }

    /// `map`: `let x = x.relu()?;` and the like, a new tensor bound to the name.
    pub(super) fn map(&mut self, target: &str, func: MapFn) -> R<()> {
        let t = self.get(target)?.tensor().clone();
        let out = match func {
            MapFn::Neg => t.neg(),
            MapFn::Relu => t.relu(),
            MapFn::AddScalar => &t + 1.0,
            MapFn::Clamp => t.clamp(-1f32, 1f32),
        };
        self.caches.remove(target);
        self.bind(target.to_string(), Handle::Tensor(ce(out)?));
        Ok(())
    }

    /// `add`: `let x = x.add(&other)?;`, or `broadcast_add` for a row (candle's `add` wants equal
    /// shapes), a new tensor bound to the name.
    pub(super) fn add(&mut self, target: &str, other: &str) -> R<()> {
        let t = self.get(target)?.tensor().clone();
        let o = self.get(other)?.tensor().clone();
        let out = if t.dims() == o.dims() { t.add(&o) } else { t.broadcast_add(&o) };
        self.caches.remove(target);
        self.bind(target.to_string(), Handle::Tensor(ce(out)?));
        Ok(())
    }

    /// `move`: `let w = w.to_device(&dev)?`, the name rebound; the VarMap and the optimizers
    /// keep the original Var.
    pub(super) fn move_to(&mut self, target: &str, device: DeviceRole, method: MoveMethod) -> R<()> {
        if method == MoveMethod::Fork {
            return Err(Outcome::Unsupported("candle has no fork (burn only); Tensor::to_device is `to`".into()));
        }
        let dev = match device {
            DeviceRole::Home => self.home.clone(),
            DeviceRole::Cpu => Device::Cpu,
            DeviceRole::Alt => self.alt.clone().ok_or_else(|| {
                Outcome::Unsupported(
                    "no second candle device here (cpu only: build with --features cuda \
                     or metal on a machine that has one)"
                        .into(),
                )
            })?,
        };
        let moved = ce(self.get(target)?.tensor().to_device(&dev))?;
        self.bind(target.to_string(), Handle::Tensor(moved));
        Ok(())
    }
}
