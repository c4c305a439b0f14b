//! Compiles guest policy crates to WebAssembly components from a build script,
//! so that `cargo build` and `cargo test` need no separate step to produce the
//! `.wasm` files they embed or load.
//!
//! The guest build runs a nested `cargo build --target wasm32-wasip2` with its
//! own target directory, so it never waits on the outer build's lock; the
//! helpers that keep the outer build's variables out of a nested one are shared
//! with the tests that run nested builds.

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
        without_outer_build(&mut command);
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

/// Variables (by prefix) that cargo sets for the one package whose build script
/// or test is running; a nested cargo build must not see them. A build script
/// that watches one (ring's watches `CARGO_MANIFEST_DIR` and `OUT_DIR`) would find
/// it changed and rebuild itself and everything above it.
const PACKAGE_VARS: &[&str] = &[
    "CARGO_MANIFEST_",
    "CARGO_PKG_",
    "CARGO_CFG_",
    "CARGO_FEATURE_",
    "CARGO_BIN_",
    "CARGO_CRATE_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "OUT_DIR",
];

/// Settings of the outer build that a guest build (another target, its own target
/// dir, no jobserver of ours) must not inherit.
const OUTER_BUILD_VARS: &[&str] = &[
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "CARGO_MAKEFLAGS",
    "MAKEFLAGS",
    "MFLAGS",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_LLVM_COV",
];

/// Prepares `command`, a nested cargo build of this workspace run from a build
/// script or a test, to build what the outer build would: it drops the variables
/// cargo set for the calling package, so the nested build finds the outer one's
/// artefacts fresh instead of rebuilding them.
pub fn without_package_vars(command: &mut Command) -> &mut Command {
    for (var, _) in std::env::vars_os() {
        if var.to_str().is_some_and(|v| PACKAGE_VARS.iter().any(|p| v.starts_with(p))) {
            command.env_remove(var);
        }
    }
    command
}

/// Prepares `command`, a nested guest build (another target, its own target dir),
/// so that nothing of the outer build reaches it: neither the calling package's
/// variables nor the outer build's flags, target dir and jobserver.
pub fn without_outer_build(command: &mut Command) -> &mut Command {
    for var in OUTER_BUILD_VARS {
        command.env_remove(var);
    }
    without_package_vars(command)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What `command` will have removed from the inherited environment.
    fn removed(command: &Command) -> Vec<String> {
        command
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(key, _)| key.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn a_nested_build_does_not_see_the_calling_package_s_variables() {
        // Cargo sets these for this very test process.
        assert!(
            std::env::var_os("CARGO_MANIFEST_DIR").is_some() && std::env::var_os("CARGO_PKG_NAME").is_some()
        );
        let mut command = Command::new("cargo");
        let gone = removed(without_package_vars(&mut command));
        assert!(gone.iter().any(|v| v == "CARGO_MANIFEST_DIR"), "{gone:?}");
        assert!(gone.iter().any(|v| v == "CARGO_PKG_NAME"), "{gone:?}");
        // Only cargo's per-package variables: the user's settings stay.
        assert!(gone.iter().all(|v| PACKAGE_VARS.iter().any(|p| v.starts_with(p))), "{gone:?}");
    }

    #[test]
    fn a_guest_build_sees_neither_the_package_s_variables_nor_the_outer_build_s() {
        let mut command = Command::new("cargo");
        let gone = removed(without_outer_build(&mut command));
        for var in OUTER_BUILD_VARS.iter().chain(&["CARGO_MANIFEST_DIR"]) {
            assert!(gone.iter().any(|v| v == var), "{var} is inherited: {gone:?}");
        }
    }
}
