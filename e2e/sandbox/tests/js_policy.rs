//! A policy written in JavaScript (componentize-js) runs through the same host
//! path as Rust guests: it decides exactly as the Rust reactive policy does,
//! passes `policy check`, `replay` and `bench` through the `parcae-host`
//! command line (run in this process), and a hostile JavaScript guest (endless loop, unbounded
//! allocation, a `fetch` through the stubbed wasi:http) is contained and
//! falls back. The tests share one compile cache, so the 12 MB component is
//! compiled about once.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use parcae_e2e_sandbox::{build_component, optimize_request, predict_request};
use parcae_policy_core::reactive::{Persistence, ThroughputOptimal};
use parcae_policy_core::{IntervalStats, Optimizer, Predictor};
use parcae_runtime::{FaultKind, GuardedPolicy, PolicyRuntime, SandboxLimits, Source};

/// The compile cache every load of this file uses (in-process and the binary's).
fn cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("js-compile-cache")
}

/// Runs the `parcae-host` command line `args` (without the program name) in
/// this process with this file's compile cache: the binary's parsing and
/// commands, without building the binary for another feature set.
fn host(args: &[&str]) {
    let cache = cache();
    let mut argv = vec!["parcae-host"];
    argv.extend_from_slice(args);
    argv.extend(["--compile-cache", cache.to_str().expect("a UTF-8 path")]);
    let cli =
        parcae_host::cli::Cli::try_parse_checked(argv.clone()).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    parcae_host::cli::run(cli).unwrap_or_else(|e| panic!("parcae-host {args:?} failed: {e:#}"));
}

const SETUP_HINT: &str =
    "run scripts/setup.sh first (it installs componentize-js into tools/componentize-js)";

/// `policies/js-reactive` built and compiled into [`cache`] once for every
/// test of this file (every later load reads the machine code back).
fn js_reactive() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let output = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("js_reactive.wasm");
        build_component("policies/js-reactive/build.sh", &output, SETUP_HINT);
        let runtime = PolicyRuntime::new(SandboxLimits::default()).unwrap().with_compile_cache(cache());
        runtime.load_file(&output).expect("the JavaScript component loads");
        output
    })
}

#[test]
fn js_policy_matches_the_rust_policy_through_the_sandbox() {
    let runtime = PolicyRuntime::new(SandboxLimits::default()).unwrap().with_compile_cache(cache());
    let component = runtime.load_file(js_reactive()).expect("the JavaScript component loads");
    assert!(component.from_cache(), "compiled once, read back");
    assert_eq!(component.exports().world(), "full-policy");
    assert!(component.uses_log());
    assert!(
        component.stubbed_imports().is_empty(),
        "built without wasi:http: {:?}",
        component.stubbed_imports()
    );

    let mut policy = GuardedPolicy::new(Some(component.clone()), Some(component));
    for counts in [&[][..], &[3], &[8, 8, 5], &[16, 2, 0, 9]] {
        let request = predict_request(counts, 5);
        let answer = policy.predict(&request);
        assert_eq!(answer.source, Source::Guest, "{:?}", answer.fault);
        assert_eq!(answer.value, Persistence.predict(&request).unwrap(), "history {counts:?}");
    }
    for instances in 0..=17 {
        let mut request = optimize_request(instances, 4);
        // Vary the forecast so later steps differ from the first (and some pause).
        for (i, step) in request.forecast.iter_mut().enumerate() {
            *step = IntervalStats { instances: (instances + 3 * i as u32) % 18, arrivals: 0, preemptions: 0 };
        }
        let answer = policy.optimize(&request);
        assert_eq!(answer.source, Source::Guest, "{:?}", answer.fault);
        assert_eq!(answer.value, ThroughputOptimal.optimize(&request).unwrap(), "{instances} instances");
    }
    assert_eq!(policy.optimizer_counts().total_faults(), 0);
}

#[test]
fn js_policy_through_the_host_check_replay_and_bench() {
    let wasm = js_reactive().to_str().expect("utf-8 path");
    // `policy check` fails unless every component loads.
    host(&["policy", "check", wasm]);

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("js-policy-cli");
    std::fs::create_dir_all(&dir).unwrap();
    let root = parcae_e2e_sandbox::workspace_root();
    let demo_trace = root.join("data/traces/demo-8node.csv");
    let example_profile = root.join("data/profiles/example-small.json");
    let demo = ["--trace", demo_trace.to_str().unwrap(), "--profile", example_profile.to_str().unwrap()];
    let replay_json = dir.join("replay.json");
    let mut args = vec!["replay", "--policy", wasm, "--json", replay_json.to_str().unwrap()];
    args.extend(demo);
    host(&args);
    let decisions: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&replay_json).unwrap()).unwrap();
    assert_eq!(decisions.len(), 60, "one decision per interval of the demo trace");
    for d in &decisions {
        assert_eq!((d["predictor"].as_str(), d["optimizer"].as_str()), (Some("guest"), Some("guest")), "{d}");
    }

    let bench_json = dir.join("bench.json");
    let mut args =
        vec!["bench", "--policy", wasm, "--baselines", "reactive", "--json", bench_json.to_str().unwrap()];
    args.extend(demo);
    host(&args);
    let records: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&bench_json).unwrap()).unwrap();
    let row =
        |name: &str| records.iter().find(|r| r["policy"] == name).unwrap_or_else(|| panic!("no {name}"));
    // Rows are named after the component's file.
    let js = row("js_reactive.wasm");
    assert_eq!(js["policy_faults"], 0, "{js}");
    assert_eq!(js["optimizer_guest_answers"], 60, "{js}");
    // The JavaScript reactive policy scores exactly as the native reactive baseline.
    assert_eq!(js["samples"], row("reactive")["samples"]);
}

#[test]
fn hostile_js_guest_is_contained_and_falls_back() {
    let output = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("js_hostile.wasm");
    let wasm = build_component("e2e/fixtures/js-hostile/build.sh", &output, SETUP_HINT);
    let runtime = PolicyRuntime::new(SandboxLimits {
        fuel_per_call: 500_000_000,
        deadline_per_call: Duration::from_secs(30),
        memory_bytes: 128 << 20,
        ..SandboxLimits::default()
    })
    .unwrap();
    let component = runtime.load_file(&wasm).expect("the hostile component loads (wasi:http stubbed)");
    assert_eq!(
        component.stubbed_imports(),
        ["wasi:http/types@0.2.10", "wasi:http/outgoing-handler@0.2.10"],
        "a default componentize-js build imports wasi:http"
    );
    let mut policy = GuardedPolicy::new(Some(component.clone()), Some(component)).with_quarantine_after(0);

    // Unbounded allocation stops at the memory limit; the persistence forecast is served.
    let request = predict_request(&[4, 6, 6], 3);
    let answer = policy.predict(&request);
    assert_eq!(answer.source, Source::Fallback);
    assert_eq!(answer.value, Persistence.predict(&request).unwrap());
    let fault = answer.fault.expect("the fault is reported");
    assert_eq!(fault.kind, FaultKind::MemoryLimit, "{fault}");
    // SpiderMonkey turns the refused growth into an exception, which the
    // component returns as an error: the host still names the limit.
    assert!(fault.detail.contains("the limit is 128 MiB"), "{fault}");
    assert!(fault.detail.contains("the guest reported: out of memory"), "{fault}");

    // An endless loop runs out of fuel; the reactive plan is served.
    let request = optimize_request(8, 4);
    let answer = policy.optimize(&request);
    assert_eq!(answer.source, Source::Fallback);
    assert_eq!(answer.value, ThroughputOptimal.optimize(&request).unwrap());
    let fault = answer.fault.expect("the fault is reported");
    assert_eq!(fault.kind, FaultKind::FuelExhausted, "{fault}");

    // `fetch` reaches a wasi:http stub, which traps naming the interface.
    let request = optimize_request(1, 4);
    let answer = policy.optimize(&request);
    assert_eq!(answer.source, Source::Fallback);
    assert_eq!(answer.value, ThroughputOptimal.optimize(&request).unwrap());
    let fault = answer.fault.expect("the fault is reported");
    assert_eq!(fault.kind, FaultKind::Trap, "{fault}");
    assert!(fault.detail.contains("wasi:http"), "{fault}");
}
