//! The first hour's promise: `parcae-host policy export arima-liveput -o
//! arima_liveput.wasm && parcae-host --policy arima_liveput.wasm` trains. With
//! no subcommand the host runs `run` with the given options: here a short run
//! of real worker processes on a calm trace, planned by the exported file.

use std::process::Command;

use parcae_e2e_cluster::{binaries, scratch, test_profile};

#[test]
fn the_default_command_trains_with_an_exported_policy_file() {
    let (host, worker) = binaries();
    let dir = scratch("default-command");
    let exported = Command::new(&host)
        .current_dir(&dir)
        .args(["policy", "export", "arima-liveput", "-o", "arima_liveput.wasm"])
        .output()
        .expect("running parcae-host policy export");
    assert!(exported.status.success(), "{}", String::from_utf8_lossy(&exported.stderr));
    let wasm = dir.join("arima_liveput.wasm");
    let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/traces/calm-4node.csv");
    let profile = test_profile(&dir);
    let run_dir = dir.join("run");
    let path = |p: &std::path::Path| p.to_str().expect("utf-8 path").to_string();
    // No subcommand: the run options straight after the program name.
    let output = Command::new(&host)
        .args(["--policy", &path(&wasm)])
        .args(["--worker-bin", &path(&worker), "--trace", &path(&trace), "--profile", &path(&profile)])
        .args(["--run-dir", &path(&run_dir), "--intervals", "3", "--wall-seconds-per-interval", "3"])
        .output()
        .expect("running parcae-host");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "parcae-host --policy failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let log: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("events.json")).expect("events.json")).unwrap();
    assert_eq!(log["settings"]["policy"], path(&wasm), "{}", log["settings"]);
    let summary = &log["summary"];
    assert!(summary["steps"].as_u64().is_some_and(|s| s > 0), "no training step: {summary}");
    // The exported component planned: it answered, the host never fell back.
    let health = &summary["bench"];
    assert_eq!(health["policy_faults"], 0, "{summary}");
    assert!(health["optimizer_guest_answers"].as_u64().is_some_and(|n| n > 0), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}
