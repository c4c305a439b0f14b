//! A policy written in Python (componentize-py) runs through the same host path
//! as Rust guests and decides exactly as the Rust reactive policy does.

use std::path::PathBuf;
use std::process::Command;

use parcae_e2e_sandbox::{optimize_request, predict_request, workspace_root};
use parcae_policy_core::reactive::{Persistence, ThroughputOptimal};
use parcae_policy_core::{IntervalStats, Optimizer, Predictor};
use parcae_runtime::{GuardedPolicy, PolicyRuntime, SandboxLimits, Source};

/// Build the Python policy with real WASI imports (the host links WASI but
/// grants nothing), using the venv that `scripts/setup.sh` prepares.
fn build_python_policy() -> PathBuf {
    let output = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("python_reactive.wasm");
    let root = workspace_root();
    let status = Command::new("bash")
        .arg(root.join("policies/python-reactive/build.sh"))
        .arg("--wasi")
        .arg(&output)
        .status()
        .expect("bash runs");
    assert!(
        status.success(),
        "building the Python policy failed; run scripts/setup.sh first (it installs componentize-py into .venv)"
    );
    output
}

#[test]
fn python_policy_matches_the_rust_policy_through_the_sandbox() {
    let wasm = build_python_policy();
    let runtime = PolicyRuntime::new(SandboxLimits::default()).unwrap();
    let component = runtime.load_file(&wasm).expect("the Python component loads");
    assert_eq!(component.exports().world(), "full-policy");
    assert!(component.uses_log());
    assert!(component.imports().iter().any(|i| i.starts_with("wasi:")), "WASI linked, nothing granted");

    let mut policy = GuardedPolicy::new(Some(component.clone()), Some(component));
    for counts in [&[][..], &[3], &[8, 8, 5], &[16, 2, 0, 9]] {
        let request = predict_request(counts, 5);
        let answer = policy.predict(&request);
        assert_eq!(answer.source, Source::Guest, "{:?}", answer.fault);
        assert_eq!(answer.value, Persistence.predict(&request).unwrap(), "history {counts:?}");
    }
    for instances in 0..=17 {
        let mut request = optimize_request(instances, 4);
        // Vary the forecast so later steps differ from the first.
        for (i, step) in request.forecast.iter_mut().enumerate() {
            *step = IntervalStats { instances: (instances + 3 * i as u32) % 18, arrivals: 0, preemptions: 0 };
        }
        let answer = policy.optimize(&request);
        assert_eq!(answer.source, Source::Guest, "{:?}", answer.fault);
        assert_eq!(answer.value, ThroughputOptimal.optimize(&request).unwrap(), "{instances} instances");
    }
    assert_eq!(policy.optimizer_counts().total_faults(), 0);
}
