//! The main job's own policy must plan the whole run itself: `parcae-host run` on the
//! embedded defaults (the demo trace, whose preemptions come with notices, and the
//! default policy `builtin:guarded-liveput`) with no fallback answer. A `run` reports
//! an interval's counts without the instances under notice while the job still runs on
//! them; the guard once took that for an impossible transition and failed ten optimize
//! calls of the demo run.

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
    let _ = std::fs::remove_dir_all(&dir);
}
