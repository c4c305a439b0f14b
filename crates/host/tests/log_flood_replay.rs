//! A whole `parcae-host replay` of the demo trace with a policy that floods the
//! host's log (`e2e/fixtures/flooding`: 10,000 `log` calls of 1 MiB per call) finishes
//! with the guest contained: log traffic is charged against each call's fuel, so every
//! call the guest gets runs out, the built-in policy answers, and after three faults in
//! a row the guest is quarantined. (The replay's time is measured separately, not here.)

use std::path::{Path, PathBuf};
use std::process::Command;

use parcae_wasm_build::{Guest, build};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The flooding fixture, built (or found up to date) in the shared guest target directory.
fn flooding_wasm() -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("log-flood");
    let guest = Guest { package: "flooding-policy", output: "flooding.wasm" };
    let built = build(&root(), &out, &[guest]).unwrap_or_else(|e| panic!("{e}"));
    built.into_iter().next().expect("one component")
}

#[test]
fn a_whole_replay_with_a_flooding_policy_finishes_with_the_guest_quarantined() {
    let output = Command::new(env!("CARGO_BIN_EXE_parcae-host"))
        .current_dir(root())
        .args(["replay", "--policy"])
        .arg(flooding_wasm())
        .output()
        .expect("running parcae-host replay");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "replay failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("60 decisions"), "{stdout}");
    // Predictor and optimizer each fault three times (out of fuel), then are quarantined
    // for the other 57 intervals: the guest never answers.
    for slot in ["predictor", "optimizer"] {
        let line = format!("{slot}: 0 guest answers, 60 fallbacks (3 fuel-exhausted, 57 quarantined)");
        assert!(stdout.contains(&line), "missing '{line}' in:\n{stdout}");
    }
    assert!(stderr.contains("log calls of"), "the fault names the log traffic:\n{stderr}");
    assert!(stderr.contains("policy quarantined"), "{stderr}");
}
