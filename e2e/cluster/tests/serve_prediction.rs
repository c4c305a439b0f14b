//! `serve` predicts itself: `parcae-host profile-serving` measures the deployment (real
//! worker processes behind the HTTP front end, walked through batch sizes, pipeline depths
//! and replica counts, then requests one at a time) and writes a serving profile with its
//! contention tables and light-load extras; `serve` plans
//! with that profile under a load and reports `bench-serve`'s prediction of the same run
//! (the same accepted requests, trace, policy and profile) beside what its clients measured.

use std::process::Command;

use parcae_e2e_cluster::{binaries, scratch};
use parcae_profile::ServingProfileData;

#[test]
fn a_measured_deployment_profile_makes_serve_predict_itself() {
    let dir = scratch("serve-prediction");
    let (host, worker) = binaries();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let profile = dir.join("deployment.json");
    let output = Command::new(&host)
        .current_dir(root)
        .arg("profile-serving")
        .args(["--worker-bin", worker.to_str().unwrap()])
        // A second per layout: at 0.6 s a pipeline of three on a loaded 2-core machine once
        // finished too few iterations to take a median of ("too few iterations measured").
        .args(["--instances", "3", "--seconds-per-config", "1.0", "--passes", "1", "--batches", "1,2"])
        // The one-process terms from the committed measurement (`parcae-worker profile-serving`
        // has its own tests), so the test times the deployment only.
        .args(["--base", "data/profiles/serving-worker-gpt-cpu-measured.json"])
        .args(["--run-dir", dir.join("profiling").to_str().unwrap()])
        .arg("--out")
        .arg(&profile)
        .output()
        .expect("running parcae-host profile-serving");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("dp1 pp3 b1") && stdout.contains("dp3 pp1 b1"), "{stdout}");
    let measured = ServingProfileData::load(&profile).expect("profile-serving writes a valid profile");
    let slowdown = measured.slowdown_by_busy_replicas();
    assert_eq!(slowdown.len(), 3, "one entry per replica count up to the fleet: {slowdown:?}");
    assert_eq!(slowdown[0], 1.0);
    let by_batch = measured.slowdown_by_batch();
    assert_eq!(by_batch.iter().map(|(b, _)| *b).collect::<Vec<_>>(), vec![1, 2], "one table per batch size");
    assert!(by_batch.iter().all(|(_, t)| t.len() == 3 && t[0] == 1.0), "{by_batch:?}");
    assert!(measured.lockstep(), "serve's engine iterates its replicas in lock step");
    measured.light_load().expect("batch 1 measured: the light-load phase ran");
    assert!(stdout.contains("light load, b1"), "{stdout}");
    // The light phase timed enough lone requests at their client to take a median of.
    let alone: usize = stdout
        .split("median of ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no lone-request median in {stdout}"));
    assert!(alone >= 10, "{alone} lone requests timed: {stdout}");
    let timings = &measured.data().layer_timings;
    assert_eq!(timings.iter().map(|t| t.batch).collect::<Vec<_>>(), vec![1, 2]);
    assert!(timings.iter().all(|t| t.prefill_ms > 0.0 && t.decode_ms > 0.0));

    let report = dir.join("report.json");
    let output = Command::new(&host)
        .arg("serve")
        .args(["--worker-bin", worker.to_str().unwrap()])
        .args(["--http", "127.0.0.1:0", "--run-dir", dir.join("serve").to_str().unwrap()])
        .arg("--profile")
        .arg(&profile)
        .args(["--intervals", "6", "--wall-seconds-per-interval", "1", "--drain-seconds", "10"])
        .args(["--load-rate", "20", "--load-max-tokens", "12"])
        .arg("--json")
        .arg(&report)
        .output()
        .expect("running parcae-host serve");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("bench-serve's model of this run"), "{stdout}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let run = &report[0];
    let predicted = &run["predicted"];
    let accepted =
        run["load"]["rows"].as_array().unwrap().iter().filter(|r| r["outcome"] != "rejected").count();
    assert!(accepted > 0);
    assert_eq!(predicted["requests"].as_u64(), Some(accepted as u64), "{predicted}");
    for field in ["e2e_p50", "e2e_p90", "e2e_p99", "error_p50", "error_p99"] {
        assert!(predicted[field].as_f64().is_some_and(f64::is_finite), "{field}: {predicted}");
    }
    assert!(predicted["e2e_p50"].as_f64().unwrap() > 0.0);
    // The engine timed its iterations by what ran in them.
    let groups = run["engine"]["iteration_times"].as_array().unwrap();
    assert!(groups.iter().any(|g| g["prefill"] == true) && groups.iter().any(|g| g["prefill"] == false));
}
