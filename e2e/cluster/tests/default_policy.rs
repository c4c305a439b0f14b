//! The main job's own policy must plan the whole run itself: `parcae-host run` on the
//! embedded defaults (the demo trace, whose preemptions come with notices, and the
//! default policy `builtin:guarded-liveput`) with no fallback answer. A `run` reports
//! an interval's counts without the instances under notice while the job still runs on
//! them; the guard once took that for an impossible transition and failed ten optimize
//! calls of the demo run.
//!
//! The same run predicts itself: its summary carries the simulator's replay of the
//! run's fleet (a `simulated` record beside the `run` one, and the figures compared).

use std::process::Command;

use parcae_e2e_cluster::{binaries, scratch};

#[test]
fn the_default_policy_answers_every_call_of_a_run_with_notices() {
    let (host, worker) = binaries();
    let dir = scratch("default-policy");
    let run_dir = dir.join("run");
    let output = Command::new(&host)
        .args(["run", "--worker-bin", worker.to_str().unwrap(), "--run-dir", run_dir.to_str().unwrap()])
        .args(["--intervals", "10", "--wall-seconds-per-interval", "3"])
        .output()
        .expect("running parcae-host");
    assert!(
        output.status.success(),
        "parcae-host run failed\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let log: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("events.json")).expect("events.json")).unwrap();
    let summary = &log["summary"];
    let health = &summary["bench"];
    assert_eq!(health["policy"], "builtin:guarded-liveput", "{health}");
    assert!(
        summary["preemptions"].as_u64().is_some_and(|n| n > 0),
        "no preemption to plan around: {summary}"
    );
    assert_eq!(health["policy_faults"], 0, "the default policy faulted: {health}");
    assert_eq!(health["optimizer_fallbacks"], 0, "{health}");
    assert!(health["optimizer_guest_answers"].as_u64().is_some_and(|n| n >= 10), "{health}");
    // How close the guest ran to its fuel budget: some fuel, within the budget.
    let budget = health["fuel_per_call"].as_u64().expect("the run records the fuel budget");
    let heaviest = health["optimizer_heaviest_fuel"].as_u64().expect("the run records the heaviest plan");
    assert!(heaviest > 0 && heaviest < budget, "{health}");
    // The run's prediction of itself, in the shape of `bench --json`.
    let simulated = &summary["simulated"];
    assert_eq!(simulated["kind"], "simulated", "{summary}");
    assert_eq!(health["kind"], "run", "{summary}");
    assert_eq!(simulated["intervals"], health["intervals"], "{simulated}");
    assert!(simulated["samples"].as_f64().is_some_and(|s| s > 0.0), "{simulated}");
    let fidelity = &summary["fidelity"];
    assert_eq!(fidelity["interval_ms"], 3000, "simulated at the run's wall-clock interval: {fidelity}");
    let metrics: Vec<&str> =
        fidelity["comparisons"].as_array().unwrap().iter().map(|c| c["metric"].as_str().unwrap()).collect();
    for wanted in ["samples (net of rollbacks)", "time migrating (job running)", "first start", "time paused"]
    {
        assert!(metrics.contains(&wanted), "{wanted} missing: {metrics:?}");
    }
    let measured_samples = fidelity["comparisons"][0]["measured"].as_f64().unwrap();
    let rolled_back = summary["rolled_back_samples_unannounced"].as_f64().unwrap()
        + summary["rolled_back_samples_notice_too_short"].as_f64().unwrap();
    assert_eq!(measured_samples, summary["samples"].as_f64().unwrap() - rolled_back, "{fidelity}");
    assert!(fidelity["layout_agreement"].as_f64().is_some_and(|a| (0.0..=1.0).contains(&a)), "{fidelity}");
    // Priced with the embedded profile and constants (no --profile, no
    // --cost-constants): the summary says so, in the record and to the reader.
    assert_eq!(
        fidelity["not_measured_here"],
        serde_json::json!(["the embedded example profile", "the embedded cost constants"]),
        "{fidelity}"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("simulated vs measured"), "{stdout}");
    assert!(stdout.contains("not measured on this machine"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}
