//! A serving policy that traps, loops, allocates without bound, answers with
//! a plan of the wrong length or an infeasible configuration, or returns an
//! error must not take the host down: each call is answered by the built-in
//! SpotServe optimizer, the right fault kind is counted, the guest answers
//! again on the next good request, and three faults in a row quarantine it.
//! One fixture (`e2e/fixtures/hostile-serving`) does all of it, selected by
//! the request's latency objective.

use std::time::Duration;

use parcae_e2e_sandbox::{hostile_runtime as runtime, policy_wasm, serve_request};
use parcae_runtime::{FaultKind, GuardedServingPolicy, PolicyRuntime, SandboxLimits, Source};
use parcae_serving_core::{ServeRequest, ServingOptimizer, SpotServe};

// The fixture's selectors (`e2e/fixtures/hostile-serving/src/lib.rs`).
const SLO_TRAP: f64 = 1.0;
const SLO_LOOP: f64 = 2.0;
const SLO_ALLOCATE: f64 = 3.0;
const SLO_WRONG_LENGTH: f64 = 4.0;
const SLO_INFEASIBLE: f64 = 5.0;
const SLO_ERR: f64 = 6.0;
/// Any other objective: the fixture answers SpotServe's plan.
const SLO_GOOD: f64 = 20_000.0;

fn hostile(runtime: &PolicyRuntime) -> GuardedServingPolicy {
    let component =
        runtime.load_file(&policy_wasm("hostile_serving.wasm")).expect("hostile_serving.wasm loads");
    assert_eq!(component.exports().world(), "serving-policy");
    GuardedServingPolicy::new(component)
}

fn request(slo_ms: f64) -> ServeRequest {
    serve_request(&[3, 2, 4], &[2.0, 1.0, 3.0], slo_ms)
}

/// SpotServe's plan for `request`: what the fallback must serve.
fn spotserve(request: &ServeRequest) -> parcae_serving_core::ServePlan {
    SpotServe::default().configure(request).unwrap()
}

#[test]
fn every_misbehaviour_is_contained_with_its_own_fault_kind() {
    let runtime = runtime();
    let mut policy = hostile(&runtime);
    let cases = [
        (SLO_TRAP, FaultKind::Trap, "deliberate panic"),
        (SLO_LOOP, FaultKind::FuelExhausted, "200000000 fuel"),
        (SLO_ALLOCATE, FaultKind::MemoryLimit, "the limit is 32 MiB"),
        (
            SLO_WRONG_LENGTH,
            FaultKind::InvalidAnswer,
            "plan has 4 configurations, the request has 3 intervals",
        ),
        (SLO_INFEASIBLE, FaultKind::InvalidAnswer, "interval 0: configuration dp1 tp1 pp1 b0 cannot run"),
        (SLO_ERR, FaultKind::GuestError, "deliberate error"),
    ];
    for (k, (slo, kind, detail)) in cases.into_iter().enumerate() {
        let bad = request(slo);
        let answer = policy.configure(&bad);
        assert_eq!(answer.source, Source::Fallback, "slo {slo}");
        assert_eq!(answer.value, spotserve(&bad), "slo {slo}: SpotServe's plan is served");
        let fault = answer.fault.expect("the fault is reported");
        assert_eq!((fault.kind, fault.call), (kind, "configure"), "slo {slo}: {fault}");
        assert!(fault.detail.contains(detail), "slo {slo}: '{}' lacks '{detail}'", fault.detail);
        // The host keeps working, and so does the guest: re-instantiated after
        // a trap, it answers the next good request itself (which also ends the
        // streak, so no case here reaches the quarantine).
        let good = request(SLO_GOOD);
        let answer = policy.configure(&good);
        assert_eq!((answer.source, answer.fault), (Source::Guest, None), "after slo {slo}");
        assert_eq!(answer.value, spotserve(&good));
        assert_eq!(policy.counts().guest_answers, k as u64 + 1);
    }
    let counts = policy.counts();
    assert_eq!(counts.fallbacks, 6, "{counts}");
    for (kind, n) in [
        (FaultKind::Trap, 1),
        (FaultKind::FuelExhausted, 1),
        (FaultKind::MemoryLimit, 1),
        (FaultKind::InvalidAnswer, 2),
        (FaultKind::GuestError, 1),
        (FaultKind::Quarantined, 0),
    ] {
        assert_eq!(counts.count(kind), n, "{kind}: {counts}");
    }
}

#[test]
fn an_endless_loop_hits_the_deadline_when_fuel_is_plentiful() {
    let runtime = PolicyRuntime::new(SandboxLimits {
        fuel_per_call: u64::MAX,
        deadline_per_call: Duration::from_millis(200),
        ..SandboxLimits::default()
    })
    .unwrap();
    let mut policy = hostile(&runtime);
    let started = std::time::Instant::now();
    let answer = policy.configure(&request(SLO_LOOP));
    assert!(started.elapsed() < Duration::from_secs(5), "stopped promptly");
    assert_eq!(answer.fault.map(|f| f.kind), Some(FaultKind::DeadlineExceeded));
    assert_eq!(answer.value, spotserve(&request(SLO_LOOP)));
}

#[test]
fn three_faults_in_a_row_quarantine_the_guest() {
    let runtime = runtime();
    let mut policy = hostile(&runtime);
    let kinds: Vec<FaultKind> = [SLO_TRAP, SLO_ERR, SLO_WRONG_LENGTH, SLO_GOOD, SLO_GOOD]
        .into_iter()
        .map(|slo| {
            let request = request(slo);
            let answer = policy.configure(&request);
            assert_eq!(answer.value, spotserve(&request), "slo {slo}: the fallback serves");
            answer.fault.expect("a fault").kind
        })
        .collect();
    assert_eq!(
        kinds,
        [
            FaultKind::Trap,
            FaultKind::GuestError,
            FaultKind::InvalidAnswer,
            FaultKind::Quarantined,
            FaultKind::Quarantined
        ],
        "a good request is not even tried once quarantined"
    );
    let counts = policy.counts();
    assert_eq!((counts.guest_answers, counts.fallbacks, counts.count(FaultKind::Quarantined)), (0, 5, 2));
    assert!(policy.name().ends_with("hostile_serving.wasm"));
}
