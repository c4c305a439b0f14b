//! The processes commands start: the worker binary (`run` launches one per instance) and
//! this binary itself as a child (`profile` and `bench-fidelity` run `parcae-host run` and
//! `parcae-worker profile` exactly as a user would).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

/// `given` (`--worker-bin`), else `parcae-worker` next to this executable; an error says
/// how to get one when it is missing.
pub fn worker_bin(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(bin) = given {
        return Ok(bin.to_path_buf());
    }
    let exe = std::env::current_exe().context("locating parcae-host")?;
    let bin = exe.with_file_name(format!("parcae-worker{}", std::env::consts::EXE_SUFFIX));
    anyhow::ensure!(
        bin.exists(),
        "{} not found: build it (cargo build -p parcae-worker) or pass --worker-bin",
        bin.display()
    );
    Ok(bin)
}

/// This executable, to run another of its commands as a child.
pub fn this_binary() -> anyhow::Result<PathBuf> {
    std::env::current_exe().context("locating parcae-host")
}

/// Runs `command` to the end, its output going to ours; an error names `what` and its exit
/// status.
pub fn run_child(command: &mut Command, what: &str) -> anyhow::Result<()> {
    let status = command.status().with_context(|| format!("starting {what}"))?;
    anyhow::ensure!(status.success(), "{what} failed ({status})");
    Ok(())
}
