//! A policy that floods the host's log (10,000 calls of 1 MiB each per call) is
//! cut off like a looping one: log traffic is charged against the call's fuel, so
//! the call runs out and the built-in policy answers. (A whole `parcae-host replay`
//! with it: `crates/host/tests/log_flood_replay.rs`.)

use std::time::Duration;

use parcae_e2e_sandbox::{optimize_request, policy_wasm, predict_request};
use parcae_policy_core::reactive::{Persistence, ThroughputOptimal};
use parcae_policy_core::{Optimizer, Predictor};
use parcae_runtime::{FaultKind, GuardedPolicy, PolicyRuntime, SandboxLimits, Source};

/// The fuel budget of one call in the first test.
const FUEL: u64 = 200_000_000;
/// Bytes of each of the fixture's messages (`e2e/fixtures/hostile.rs`).
const MESSAGE_BYTES: u64 = 1 << 20;

/// The log calls a fault detail counts ("... with N log calls of ...").
fn logged_calls(detail: &str) -> u64 {
    let (_, rest) = detail.split_once(" with ").unwrap_or_else(|| panic!("no log count in '{detail}'"));
    let count = rest.split(' ').next().unwrap_or_default();
    count.parse().unwrap_or_else(|_| panic!("'{count}' is not a count in '{detail}'"))
}

#[test]
fn a_log_flood_runs_out_of_fuel_and_the_fallback_answers() {
    let runtime = PolicyRuntime::new(SandboxLimits {
        fuel_per_call: FUEL,
        deadline_per_call: Duration::from_secs(60),
        ..SandboxLimits::default()
    })
    .expect("runtime starts");
    let component = runtime.load_file(&policy_wasm("flooding.wasm")).expect("flooding.wasm loads");
    let mut policy = GuardedPolicy::new(Some(component.clone()), Some(component));
    let request = optimize_request(8, 4);
    let answer = policy.optimize(&request);
    assert_eq!(answer.source, Source::Fallback);
    assert_eq!(answer.value, ThroughputOptimal.optimize(&request).unwrap());
    let fault = answer.fault.expect("the flood is reported");
    assert_eq!(fault.kind, FaultKind::FuelExhausted, "{fault}");
    // The call stopped at the log call that no longer fit the budget: with the guest's own
    // (small) fuel use besides, that is the last or the one before of the calls the whole
    // budget would pay for.
    let limits = SandboxLimits::default();
    let cost = limits.log_fuel_per_message + limits.log_fuel_per_byte * MESSAGE_BYTES;
    let most = FUEL / cost + 1;
    let calls = logged_calls(&fault.detail);
    assert!((most - 1..=most).contains(&calls), "{calls} log calls, expected {most} or one fewer: {fault}");
    assert!(fault.detail.contains(&format!("of {} bytes in all", calls * MESSAGE_BYTES)), "{fault}");
    let forecast = predict_request(&[4, 6, 6], 3);
    let answer = policy.predict(&forecast);
    assert_eq!(answer.value, Persistence.predict(&forecast).unwrap());
    assert_eq!(answer.fault.map(|f| f.kind), Some(FaultKind::FuelExhausted));
}
