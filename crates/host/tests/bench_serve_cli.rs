//! `parcae-host bench-serve` end to end: the binary on the project's g4dn
//! trace with the embedded SpotServe profile (table, JSON, CSV, SVG,
//! per-request latencies), the measured profile of the built-in GPT, and the
//! errors a user meets (a training policy, a malformed rate file).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("bench-serve-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn bench_serve(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_parcae-host"))
        .current_dir(root())
        .arg("bench-serve")
        .args(args)
        .output()
        .expect("running parcae-host")
}

fn ok(args: &[&str]) -> String {
    let output = bench_serve(args);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "bench-serve {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn every_row_accounts_for_every_request_and_the_outputs_agree() {
    let dir = scratch("g4dn");
    let json = dir.join("serve.json");
    let csv = dir.join("serve.csv");
    let stdout = ok(&[
        "--trace",
        "data/traces/aws-g4dn/g4dn-events.csv",
        "--json",
        json.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
        "--plot",
        dir.to_str().unwrap(),
        "--requests",
        dir.to_str().unwrap(),
        "--load",
        "0.25",
    ]);
    for row in ["builtin:spotserve", "builtin:cost-aware-serving", "restart", "reroute", "on-demand"] {
        assert!(stdout.contains(&format!("| {row} ")), "no row {row}:\n{stdout}");
    }
    assert!(stdout.contains("x lower than restart") && stdout.contains("on demand"), "{stdout}");
    let records: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(records.len(), 5);
    let requests = records[0]["requests"].as_u64().unwrap();
    assert!(requests > 1000, "{requests}");
    for r in &records {
        // Every arrival of the same process is either completed or dropped.
        assert_eq!(r["requests"].as_u64(), Some(requests), "{r}");
        assert_eq!(r["completed"].as_u64().unwrap() + r["dropped"].as_u64().unwrap(), requests, "{r}");
        let (p50, p90, p99) =
            (r["p50_ms"].as_f64().unwrap(), r["p90_ms"].as_f64().unwrap(), r["p99_ms"].as_f64().unwrap());
        assert!(p50 > 0.0 && p50 <= p90 && p90 <= p99, "{r}");
        assert_eq!(r["policy_errors"].as_u64(), Some(0), "{r}");
    }
    // The cost-aware policy never pays for more instances than SpotServe's.
    let hours =
        |row: &str| records.iter().find(|r| r["row"] == row).unwrap()["instance_hours"].as_f64().unwrap();
    assert!(hours("builtin:cost-aware-serving") <= hours("builtin:spotserve"));
    let csv_text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(csv_text.lines().count(), 6, "header + 5 rows");
    let svg = std::fs::read_to_string(dir.join("g4dn-events-serve-gpt-20b.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("latency (s)"));
    let per_request =
        std::fs::read_to_string(dir.join("g4dn-events-builtin_spotserve-requests.csv")).unwrap();
    assert_eq!(per_request.lines().count() as u64, requests + 1);
}

#[test]
fn the_measured_profile_of_the_built_in_gpt_serves_the_demo_trace() {
    let stdout = ok(&[
        "--trace",
        "data/traces/demo-8node.csv",
        "--profile",
        "data/profiles/serving-worker-gpt-cpu-measured.json",
        "--baselines",
        "restart",
    ]);
    assert!(stdout.contains("model worker-gpt"), "{stdout}");
    assert!(stdout.contains("| builtin:spotserve ") && stdout.contains("| restart "), "{stdout}");
}

/// The deployment profile (with its contention table) at `serve`'s replay speed: 4 s per
/// trace minute, the 30 s notice scaled with it.
#[test]
fn the_deployment_profile_replays_at_serves_speed() {
    let stdout = ok(&[
        "--trace",
        "data/traces/demo-8node.csv",
        "--profile",
        "data/profiles/serving-worker-gpt-deployment-measured.json",
        "--rate",
        "30",
        "--wall-seconds-per-interval",
        "4",
        "--baselines",
        "restart",
    ]);
    assert!(stdout.contains("(60 intervals of 4 s,"), "{stdout}");
    assert!(stdout.contains("replayed at 2.000 s"), "{stdout}");
    let output = bench_serve(&["--trace", "data/traces/demo-8node.csv", "--wall-seconds-per-interval", "0"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--wall-seconds-per-interval 0"));
}

#[test]
fn wrong_policies_and_rate_files_are_refused_by_name() {
    let output =
        bench_serve(&["--trace", "data/traces/demo-8node.csv", "--policy", "builtin:guarded-liveput"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("serving-policy"), "{stderr}");

    let dir = scratch("rates");
    let rates = dir.join("rates.csv");
    std::fs::write(&rates, "0.3\n0.4, oops\n").unwrap();
    let output =
        bench_serve(&["--trace", "data/traces/demo-8node.csv", "--rate-file", rates.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("rates.csv: line 2: `oops` is not a number"), "{stderr}");
}
