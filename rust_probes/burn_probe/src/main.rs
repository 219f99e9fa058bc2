//! The burn probe: interprets aliasfuzz programs on burn 0.22 and reports what burn really does.
//!
//! Mapping of every op and snapshot method onto burn calls: see `README.md` beside this crate.
//! The protocol (handshake, parsing, skipped ops, caught panics, delta encoding) is the shared
//! `aliasfuzz_protocol::serve` driver; this crate implements `Probe` and `Session` only.

mod model;
mod session;
mod vals;

use aliasfuzz_protocol::{DeviceInfo, Hello, Probe, Program, Refusal, ALL_OPS};
use std::collections::BTreeMap;

/// The burn version compiled in, read from the workspace Cargo.lock by build.rs.
pub const BURN_VERSION: &str = env!("BURN_VERSION");

/// Snapshot methods this probe interprets. `contiguous`, `copy` and `deepcopy` have no burn call
/// and answer `unsupported` if sent anyway.
pub const METHODS: &[&str] = &[
    "alias",
    "clone",
    "detach",
    "mul1",
    "to_home",
    "to_cpu",
    "reshape",
    "view_row",
    "transpose",
    "state_dict",
    "to_host",
    "save_load",
    "expand",
    "permute",
    "flip",
    "narrow",
    "unsqueeze",
    "squeeze",
    "chunk",
    "select",
    "to_same_dtype",
    "via_bf16",
    "via_f32",
];

pub struct BurnProbe {
    /// Accelerator devices that answered at start-up (name → constructor).
    gpus: Vec<(&'static str, fn() -> burn::tensor::Device)>,
}

impl BurnProbe {
    pub fn new() -> BurnProbe {
        let gpus = vals::gpu_constructors()
            .into_iter()
            .filter(|(name, _)| gpu_answers(name))
            .collect();
        BurnProbe { gpus }
    }
}

impl Default for BurnProbe {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether an accelerator device works: checked in a child process (this binary with
/// `--check-device NAME`), so that a driver that aborts or hangs instead of panicking cannot
/// take the probe down. `BURN_PROBE_NO_GPU=1` skips the check and lists no accelerator.
fn gpu_answers(name: &str) -> bool {
    if std::env::var_os("BURN_PROBE_NO_GPU").is_some_and(|v| v == "1") {
        return false;
    }
    let Ok(exe) = std::env::current_exe() else { return false };
    let Ok(mut child) = std::process::Command::new(exe)
        .args(["--check-device", name])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    else {
        return false;
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

/// Child side of `gpu_answers`: a small computation on the device, read back and checked.
fn check_device(name: &str) -> i32 {
    use burn::tensor::Tensor;
    std::panic::set_hook(Box::new(|_| {}));
    let Some((_, make)) = vals::gpu_constructors().into_iter().find(|(n, _)| *n == name) else {
        return 2;
    };
    let ok = std::panic::catch_unwind(|| {
        let device = make().autodiff();
        let t = Tensor::<1>::from_floats([1.0, 2.0], &device).require_grad();
        let grads = t.clone().mul_scalar(3.0).sum().backward();
        let g = t.grad(&grads).and_then(|g| g.to_data().try_to_vec_as::<f32>().ok());
        let y = t.mul_scalar(2.0).to_data().try_to_vec_as::<f32>().ok();
        y == Some(vec![2.0, 4.0]) && g == Some(vec![3.0, 3.0])
    });
    if ok.unwrap_or(false) {
        0
    } else {
        1
    }
}

impl Probe for BurnProbe {
    type S = session::BurnSession;

    fn hello(&self) -> Hello {
        let mut versions = BTreeMap::new();
        versions.insert("burn".to_string(), BURN_VERSION.to_string());
        versions.insert("burn_probe".to_string(), env!("CARGO_PKG_VERSION").to_string());
        let mut devices = vec![
            DeviceInfo {
                name: "flex".into(),
                alt: Some("ndarray".into()),
                kind: "cpu".into(),
            },
            DeviceInfo {
                name: "ndarray".into(),
                alt: Some("flex".into()),
                kind: "cpu".into(),
            },
        ];
        for (name, _) in &self.gpus {
            devices.push(DeviceInfo {
                name: (*name).into(),
                alt: Some("flex".into()),
                kind: "gpu".into(),
            });
        }
        Hello {
            protocol: aliasfuzz_protocol::PROTOCOL_VERSION,
            framework: "burn".into(),
            versions,
            devices,
            ops: ALL_OPS.iter().map(|s| s.to_string()).collect(),
            methods: METHODS.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn open(&mut self, device: &str, program: &Program) -> Result<session::BurnSession, Refusal> {
        use burn::tensor::Device;
        let (home, alt) = match device {
            "flex" => (Device::flex(), Some(vals::ndarray_device())),
            "ndarray" => (vals::ndarray_device(), Some(Device::flex())),
            other => match self.gpus.iter().find(|(n, _)| *n == other) {
                Some((_, make)) => (make(), Some(Device::flex())),
                None => {
                    let known: Vec<&str> = ["flex", "ndarray"]
                        .into_iter()
                        .chain(self.gpus.iter().map(|(n, _)| *n))
                        .collect();
                    return Err(format!("unknown device {other:?}; this probe has {known:?}").into());
                }
            },
        };
        // One dtype per program: a backend without it (ndarray has no f16 nor bf16) refuses the
        // whole program, as burn's device.rs advises asking before choosing a reduced precision.
        let dtype = session::program_dtype(program);
        if !home.supports_dtype(dtype) {
            return Err(Refusal::Unsupported(format!(
                "{device} has no {} (Device::supports_dtype)",
                program.dtype.as_str()
            )));
        }
        let devices = session::DeviceSpelling {
            home: device_spelling(device),
            alt: alt
                .as_ref()
                .map(|_| device_spelling(if device == "flex" { "ndarray" } else { "flex" })),
        };
        Ok(session::BurnSession::new(
            home.autodiff(),
            alt.map(|d| d.autodiff()),
            program,
            devices,
        )?)
    }
}

/// How the transcript makes the device of a protocol name, with autodiff (as the probe opens it).
fn device_spelling(name: &str) -> String {
    match name {
        "flex" => "Device::flex().autodiff()".into(),
        "ndarray" => "Device::ndarray().autodiff()".into(),
        "cuda" => "Device::cuda(0).autodiff()".into(),
        "metal" => "Device::metal(burn::tensor::DeviceKind::DefaultDevice).autodiff()".into(),
        _ if cfg!(feature = "vulkan") => "Device::vulkan(burn::tensor::DeviceKind::DefaultDevice).autodiff()".into(),
        _ => "Device::wgpu(burn::tensor::DeviceKind::DefaultDevice).autodiff()".into(),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 3 && args[1] == "--check-device" {
        std::process::exit(check_device(&args[2]));
    }
    aliasfuzz_protocol::serve(BurnProbe::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The version reported is the one cargo resolved, and it is the pinned one.
    #[test]
    fn burn_version_is_the_pinned_one() {
        let toml = include_str!("../Cargo.toml");
        assert!(
            toml.contains(&format!("version = \"={BURN_VERSION}\"")),
            "{BURN_VERSION}"
        );
        let lock = include_str!("../../Cargo.lock");
        assert!(lock.contains(&format!("name = \"burn\"\nversion = \"{BURN_VERSION}\"")));
    }

    #[test]
    fn methods_are_protocol_methods() {
        for m in METHODS {
            assert!(aliasfuzz_protocol::ALL_METHODS.contains(m), "{m}");
        }
    }
}
