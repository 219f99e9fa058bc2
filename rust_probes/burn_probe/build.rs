//! Reads the exact burn version this binary is built against from the workspace `Cargo.lock`
//! (the pin in Cargo.toml is `=0.22.1`, the lock file is what cargo really resolved) and exposes
//! it as `BURN_VERSION` for the hello message.

use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let lock = manifest.join("..").join("Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    println!("cargo:rerun-if-changed=build.rs");
    let text = std::fs::read_to_string(&lock).unwrap_or_else(|e| panic!("cannot read {}: {e}", lock.display()));
    let version = locked_version(&text, "burn").unwrap_or_else(|| panic!("no package `burn` in {}", lock.display()));
    println!("cargo:rustc-env=BURN_VERSION={version}");
}

/// The `version` of the `[[package]]` entry named `name` in a Cargo.lock text.
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let wanted = format!("name = \"{name}\"");
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == wanted {
            for next in lines.by_ref() {
                let next = next.trim();
                if let Some(v) = next.strip_prefix("version = ") {
                    return Some(v.trim_matches('"').to_string());
                }
                if next.is_empty() || next.starts_with("[[") {
                    break;
                }
            }
        }
    }
    None
}
