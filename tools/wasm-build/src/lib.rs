//! Compiles guest policy crates to WebAssembly components from a build script,
//! so that `cargo build` and `cargo test` need no separate step to produce the
//! `.wasm` files they embed or load.
//!
//! The guest build runs a nested `cargo build --target wasm32-wasip2` with its
//! own target directory, so it never waits on the outer build's lock.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Rust target guest policies are built for; it emits components directly.
pub const GUEST_TARGET: &str = "wasm32-wasip2";
/// Cargo profile used for guests (see the workspace `Cargo.toml`).
pub const GUEST_PROFILE: &str = "guest";

/// One guest component to build.
pub struct Guest<'a> {
    /// Cargo package name of the guest crate.
    pub package: &'a str,
    /// File name of the component in the output directory (e.g. `reactive.wasm`).
    pub output: &'a str,
}

/// Build `guests` from the workspace at `workspace_root` and copy each component
/// to `out_dir`. Returns the paths of the components, in order.
///
/// Fails with a message that says what to do when the Rust target is missing.
pub fn build(workspace_root: &Path, out_dir: &Path, guests: &[Guest<'_>]) -> Result<Vec<PathBuf>, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    // Keep guest artefacts beside the outer target dir, not inside OUT_DIR, so
    // they survive `cargo clean -p` and are shared by every crate that builds guests.
    let target_dir = guest_target_dir(workspace_root);
    let mut built = Vec::with_capacity(guests.len());
    for guest in guests {
        let mut command = Command::new(&cargo);
        command
            .current_dir(workspace_root)
            .args(["build", "--quiet", "--locked", "--package", guest.package])
            .args(["--target", GUEST_TARGET, "--profile", GUEST_PROFILE])
            .arg("--target-dir")
            .arg(&target_dir);
        // The outer build's settings (flags meant for the host target, the
        // jobserver, the outer target dir) must not leak into the guest build.
        for var in [
            "RUSTFLAGS",
            "CARGO_ENCODED_RUSTFLAGS",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_TARGET",
            "CARGO_MAKEFLAGS",
            "MAKEFLAGS",
            "MFLAGS",
            "RUSTC_WORKSPACE_WRAPPER",
            "CARGO_LLVM_COV",
        ] {
            command.env_remove(var);
        }
        let output = command
            .output()
            .map_err(|e| format!("cannot run {cargo} to build guest '{}': {e}", guest.package))?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let hint =
                if stderr.contains("may not be installed") || stderr.contains("can't find crate for `std`") {
                    format!("\nhint: install the guest target with `rustup target add {GUEST_TARGET}`")
                } else {
                    String::new()
                };
            return Err(format!("building guest policy '{}' failed:\n{stderr}{hint}", guest.package));
        }
        let artifact = target_dir
            .join(GUEST_TARGET)
            .join(GUEST_PROFILE)
            .join(format!("{}.wasm", guest.package.replace('-', "_")));
        std::fs::create_dir_all(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
        let destination = out_dir.join(guest.output);
        std::fs::copy(&artifact, &destination)
            .map_err(|e| format!("copying {} to {}: {e}", artifact.display(), destination.display()))?;
        built.push(destination);
    }
    Ok(built)
}

/// Where guest builds put their artefacts: `<target>/guests`.
pub fn guest_target_dir(workspace_root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root.join("target"))
        .join("guests")
}

/// Ask Cargo to rerun the calling build script when guest sources change.
pub fn rerun_if_changed(workspace_root: &Path, dirs: &[&str]) {
    for dir in dirs {
        println!("cargo:rerun-if-changed={}", workspace_root.join(dir).display());
    }
    println!("cargo:rerun-if-changed={}", workspace_root.join("wit").display());
    println!("cargo:rerun-if-changed={}", workspace_root.join("Cargo.lock").display());
}
