//! A policy that loops, allocates without bound, traps, blocks or answers
//! nonsense must not take the host down: the host reports the right cause and
//! falls back to the built-in policy.

use std::sync::Arc;
use std::time::Duration;

use parcae_e2e_sandbox::{hostile_runtime as runtime, optimize_request, policy_wasm, predict_request};
use parcae_policy_core::reactive::{Persistence, ThroughputOptimal};
use parcae_policy_core::{Optimizer, Predictor};
use parcae_runtime::{
    FaultKind, GuardedPolicy, PolicyComponent, PolicyInstance, PolicyRuntime, SandboxLimits, Source,
};

fn load(runtime: &PolicyRuntime, file: &str) -> Arc<PolicyComponent> {
    runtime.load_file(&policy_wasm(file)).unwrap_or_else(|e| panic!("{file} loads: {e}"))
}

/// Drive an optimizer-only fixture through the guarded policy and check that
/// every call falls back with `kind`, and the fallback answer is the built-in one.
fn assert_optimizer_contained(file: &str, kind: FaultKind, detail: &str) {
    let runtime = runtime();
    let component = load(&runtime, file);
    let mut policy = GuardedPolicy::new(None, Some(component)).with_quarantine_after(0);
    let request = optimize_request(8, 4);
    let expected = ThroughputOptimal.optimize(&request).unwrap();
    for _ in 0..2 {
        let answer = policy.optimize(&request);
        assert_eq!(answer.source, Source::Fallback, "{file}");
        assert_eq!(answer.value, expected, "{file}: the fallback plan is served");
        let fault = answer.fault.expect("the fault is reported");
        assert_eq!(fault.kind, kind, "{file}: {fault}");
        assert!(fault.detail.contains(detail), "{file}: '{}' lacks '{detail}'", fault.detail);
        assert_eq!(fault.call, "optimize");
    }
    let counts = policy.optimizer_counts();
    assert_eq!((counts.fallbacks, counts.count(kind), counts.guest_answers), (2, 2, 0));
}

#[test]
fn endless_loop_runs_out_of_fuel() {
    assert_optimizer_contained("looping.wasm", FaultKind::FuelExhausted, "200000000 fuel");
}

#[test]
fn endless_loop_hits_the_deadline_when_fuel_is_plentiful() {
    let runtime = PolicyRuntime::new(SandboxLimits {
        fuel_per_call: u64::MAX,
        deadline_per_call: Duration::from_millis(200),
        ..SandboxLimits::default()
    })
    .unwrap();
    let mut instance = PolicyInstance::new(load(&runtime, "looping.wasm"));
    let started = std::time::Instant::now();
    let fault = instance.optimize(&optimize_request(8, 4)).unwrap_err();
    assert_eq!(fault.kind, FaultKind::DeadlineExceeded, "{fault}");
    assert!(started.elapsed() < Duration::from_secs(5), "stopped promptly");
}

#[test]
fn log_flood_runs_out_of_fuel() {
    assert_optimizer_contained("flooding.wasm", FaultKind::FuelExhausted, "log calls of");
}

#[test]
fn unbounded_allocation_hits_the_memory_limit() {
    assert_optimizer_contained("allocating.wasm", FaultKind::MemoryLimit, "the limit is 32 MiB");
}

#[test]
fn panic_is_a_trap_with_the_guest_message() {
    assert_optimizer_contained("trapping.wasm", FaultKind::Trap, "deliberate panic");
}

#[test]
fn oversized_plan_is_rejected() {
    assert_optimizer_contained("oversized.wasm", FaultKind::InvalidAnswer, "returned 9 steps, expected 4");
}

#[test]
fn sleeping_is_refused_without_waiting() {
    let runtime = runtime();
    let mut policy = GuardedPolicy::new(Some(load(&runtime, "sleeping.wasm")), None);
    let request = predict_request(&[4, 6, 6], 3);
    let started = std::time::Instant::now();
    let answer = policy.predict(&request);
    assert!(started.elapsed() < Duration::from_secs(5), "the host did not sleep");
    assert_eq!(answer.source, Source::Fallback);
    assert_eq!(answer.value, Persistence.predict(&request).unwrap());
    assert_eq!(answer.fault.unwrap().kind, FaultKind::Blocked);
}

#[test]
fn invalid_forecast_is_rejected() {
    let runtime = runtime();
    let mut policy = GuardedPolicy::new(Some(load(&runtime, "oversized.wasm")), None);
    let answer = policy.predict(&predict_request(&[4, 6], 2));
    assert_eq!(answer.source, Source::Fallback);
    let fault = answer.fault.unwrap();
    assert_eq!(fault.kind, FaultKind::InvalidAnswer);
    assert!(fault.detail.contains("returned 3 steps, expected 2"), "{fault}");
}

#[test]
fn repeated_faults_quarantine_the_guest() {
    let runtime = runtime();
    let mut policy = GuardedPolicy::new(None, Some(load(&runtime, "trapping.wasm")));
    let request = optimize_request(8, 2);
    let kinds: Vec<_> = (0..5).map(|_| policy.optimize(&request).fault.unwrap().kind).collect();
    assert_eq!(
        kinds,
        [FaultKind::Trap, FaultKind::Trap, FaultKind::Trap, FaultKind::Quarantined, FaultKind::Quarantined]
    );
}

#[test]
fn a_guest_recovers_after_a_fault() {
    // The reactive guest answers; feeding it a request that makes validation
    // fail must not break later calls.
    let runtime = runtime();
    let mut instance = PolicyInstance::new(load(&runtime, "reactive.wasm"));
    let mut bad = predict_request(&[4], 2);
    bad.fleet_max = 2; // persistence forecasts 4 > fleet max
    assert_eq!(instance.predict(&bad).unwrap_err().kind, FaultKind::InvalidAnswer);
    let good = predict_request(&[4], 2);
    assert_eq!(instance.predict(&good).unwrap(), Persistence.predict(&good).unwrap());
}

#[test]
fn load_errors_name_the_file_and_the_reason() {
    let runtime = runtime();
    let err = |bytes: &[u8]| runtime.load_bytes("bad.wasm", bytes).err().expect("rejected").to_string();
    let core_module = b"\0asm\x01\0\0\0";
    assert!(err(core_module).contains("bad.wasm: is a core WebAssembly module"), "{}", err(core_module));
    assert_eq!(
        err(b"not wasm at all"),
        "bad.wasm: not a valid WebAssembly component: not a WebAssembly file (it does not start with the \\0asm magic bytes)"
    );
    assert!(err(b"\0asm\x0d\0\x01\0garbage").starts_with("bad.wasm: not a valid WebAssembly component"));
    let missing = runtime.load_file(std::path::Path::new("/nonexistent/p.wasm")).err().unwrap();
    assert!(missing.to_string().starts_with("/nonexistent/p.wasm: cannot read"), "{missing}");
    // An empty component exports nothing the host can call.
    let empty_component = b"\0asm\x0d\0\x01\0";
    let e = err(empty_component);
    assert!(e.contains("exports neither parcae:policy/predictor@0.3.0"), "{e}");
}

/// A component built against the previous contract (`parcae:policy@0.1.0`,
/// kept as built in `e2e/fixtures/wit-0.1.0`) is refused at load time with
/// both versions named, never called with records it does not know.
#[test]
fn a_component_of_the_previous_contract_is_refused_by_name() {
    let runtime = runtime();
    let path = parcae_e2e_sandbox::workspace_root().join("e2e/fixtures/wit-0.1.0/reactive.wasm");
    let e = runtime.load_file(&path).err().expect("a 0.1.0 component must not load").to_string();
    assert!(e.contains("targets parcae:policy@0.1.0"), "{e}");
    assert!(e.contains("this host implements parcae:policy@0.3.0"), "{e}");
    assert!(e.contains("rebuild it"), "{e}");
}

#[test]
fn reactive_guest_reports_its_world_and_imports() {
    let runtime = runtime();
    let reactive = load(&runtime, "reactive.wasm");
    assert_eq!(reactive.exports().world(), "full-policy");
    assert!(reactive.uses_log());
    assert!(!load(&runtime, "looping.wasm").uses_log());
}
