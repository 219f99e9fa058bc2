//! The candle probe: interprets aliasfuzz programs on candle-core / candle-nn (issue #3).
//!
//! The protocol driver (`aliasfuzz_protocol::serve`) does the handshake, parsing, skipped ops,
//! panics and delta encoding; this crate only maps each op onto the candle call a user writes.
//! See `session.rs` for the op-by-op mapping and `docs/SEMANTICS.md` for the contract. Each call
//! is spelled once there, and recorded in the session's transcript: the candle reproducer.
//!
//! The code is device generic: the only device-specific lines are the ones constructing a
//! `Device` in [`CandleProbe::new`]. Without the `cuda`/`metal` cargo feature,
//! `Device::new_cuda`/`Device::new_metal` return `Err(NotCompiledWith…Support)`, which reads as
//! "device not available", so no `cfg` is needed anywhere.

mod session;

use aliasfuzz_protocol::{DeviceInfo, Hello, Probe, Program, Refusal, PROGRAM_SEED, PROTOCOL_VERSION};
use candle_core::{DType, Device, Tensor};
use std::collections::BTreeMap;

pub use session::{CandleSession, METHODS, OPS};

/// The candle-core version this probe is built against: the `=` pin in `Cargo.toml`, checked
/// against `rust_probes/Cargo.lock` by the unit test `candle_version_matches_lock`.
pub const CANDLE_CORE_VERSION: &str = "0.11.1";
/// The candle-nn version (pinned to the same release; checked by the same test).
pub const CANDLE_NN_VERSION: &str = "0.11.1";

/// One opened device under its protocol name.
struct NamedDevice {
    name: String,
    kind: &'static str,
    device: Device,
}

pub struct CandleProbe {
    /// Opened once and reused for every run: every `Device::new_cuda` call makes a new device
    /// object with its own id, and candle treats two such objects as different devices (see
    /// `to_device` and upstream #3312), so a fresh object per run would change `to_home`.
    devices: Vec<NamedDevice>,
}

impl CandleProbe {
    pub fn new() -> Self {
        let mut devices = vec![NamedDevice {
            name: "cpu".into(),
            kind: "cpu",
            device: Device::Cpu,
        }];
        if let Ok(d) = Device::new_cuda(0) {
            devices.push(NamedDevice {
                name: "cuda".into(),
                kind: "gpu",
                device: d,
            });
        }
        if let Ok(d) = Device::new_metal(0) {
            devices.push(NamedDevice {
                name: "metal".into(),
                kind: "gpu",
                device: d,
            });
        }
        CandleProbe { devices }
    }

    /// The device `move {device: "alt"}` goes to from `name`: cpu <-> the first accelerator.
    fn alt_name(&self, name: &str) -> Option<String> {
        let accel = self.devices.iter().find(|d| d.kind == "gpu").map(|d| d.name.clone())?;
        if name == "cpu" {
            Some(accel)
        } else if name == accel {
            Some("cpu".into())
        } else {
            None
        }
    }

    fn device(&self, name: &str) -> Option<&Device> {
        self.devices.iter().find(|d| d.name == name).map(|d| &d.device)
    }
}

impl Default for CandleProbe {
    fn default() -> Self {
        Self::new()
    }
}

impl Probe for CandleProbe {
    type S = CandleSession;

    fn hello(&self) -> Hello {
        let mut versions = BTreeMap::new();
        versions.insert("candle-core".to_string(), CANDLE_CORE_VERSION.to_string());
        versions.insert("candle-nn".to_string(), CANDLE_NN_VERSION.to_string());
        versions.insert("candle_probe".to_string(), env!("CARGO_PKG_VERSION").to_string());
        Hello {
            protocol: PROTOCOL_VERSION,
            framework: "candle".into(),
            versions,
            devices: self
                .devices
                .iter()
                .map(|d| DeviceInfo {
                    name: d.name.clone(),
                    alt: self.alt_name(&d.name),
                    kind: d.kind.into(),
                })
                .collect(),
            ops: OPS.iter().map(|s| s.to_string()).collect(),
            methods: METHODS.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn open(&mut self, device: &str, program: &Program) -> Result<CandleSession, Refusal> {
        let Some(home) = self.device(device).cloned() else {
            let known: Vec<&str> = self.devices.iter().map(|d| d.name.as_str()).collect();
            return Err(format!("unknown device {device:?} (this probe has {})", known.join(", ")).into());
        };
        let dtype = session::candle_dtype(program.dtype);
        if dtype != DType::F32 {
            // candle has no query for the dtypes a device has (`Device::supports_bf16` is false
            // on the CPU, whose storage and kernels have bf16: it picks a default dtype), so the
            // device is asked by converting to it.
            if let Err(e) = Tensor::zeros(1, DType::F32, &home).and_then(|t| t.to_dtype(dtype)) {
                return Err(Refusal::Unsupported(format!(
                    "candle {device} has no {} (Tensor::to_dtype: {})",
                    program.dtype.as_str(),
                    session::msg(e)
                )));
            }
        }
        let alt = self.alt_name(device).and_then(|n| self.device(&n).cloned());
        // One generator seeded once per program (the session's first call).
        let seed = program.uses_program_rng().then_some(PROGRAM_SEED);
        CandleSession::open(home, alt, program, seed)
    }
}

fn main() {
    // candle attaches a captured backtrace to every error when RUST_BACKTRACE is set; the probe
    // reports errors as one-line messages, and capturing costs more than a whole small program.
    // RUST_LIB_BACKTRACE only affects `std::backtrace::Backtrace::capture`, not panics.
    // (Single-threaded here: nothing has been spawned yet.)
    std::env::set_var("RUST_LIB_BACKTRACE", "0");
    aliasfuzz_protocol::serve(CandleProbe::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The version reported in the hello must be the one actually compiled in.
    #[test]
    fn candle_version_matches_lock() {
        let lock = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock"));
        for (krate, want) in [("candle-core", CANDLE_CORE_VERSION), ("candle-nn", CANDLE_NN_VERSION)] {
            let header = format!("name = \"{krate}\"\nversion = \"");
            let start = lock
                .find(&header)
                .unwrap_or_else(|| panic!("{krate} not in Cargo.lock"))
                + header.len();
            let got = &lock[start..start + lock[start..].find('"').unwrap()];
            assert_eq!(got, want, "{krate}: Cargo.lock has {got}, the probe reports {want}");
        }
        let manifest = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
        assert!(manifest.contains(&format!("candle-core = \"={CANDLE_CORE_VERSION}\"")));
    }

    #[test]
    fn hello_lists_cpu_and_known_ops() {
        let h = CandleProbe::new().hello();
        assert_eq!(h.devices[0].name, "cpu");
        for op in &h.ops {
            assert!(aliasfuzz_protocol::ALL_OPS.contains(&op.as_str()), "{op}");
        }
        for m in &h.methods {
            assert!(aliasfuzz_protocol::ALL_METHODS.contains(&m.as_str()), "{m}");
        }
    }
}
