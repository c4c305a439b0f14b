//! The robust liveput policy as a guest component decides exactly as the same
//! code called natively, within the default sandbox budgets, on the real
//! profile; it hedges only when its own forecast was asked for this interval.

use parcae_e2e_sandbox::{history, policy_wasm, workspace_root};
use parcae_policy_core::churn::ChurnEstimator;
use parcae_policy_core::robust::RobustLiveput;
use parcae_policy_core::{
    IntervalStats, ModelProfile, OptimizeRequest, Optimizer, PredictRequest, Predictor,
};
use parcae_profile::{CostConstants, Profile};
use parcae_runtime::{PolicyInstance, PolicyRuntime, SandboxLimits};

fn profile(model: &str) -> ModelProfile {
    let root = workspace_root();
    let profile = Profile::load(root.join("data/profiles/p3-v100-parcae.json"))
        .expect("data/profiles/p3-v100-parcae.json");
    let constants = CostConstants::load(root.join("data/profiles/cost-constants.json")).unwrap();
    profile.model_profile(model, &constants).unwrap()
}

/// A fleet that shrinks in bursts and recovers, as in the p3 trace, with some
/// intervals that lose and regain instances at once (a flat count that still
/// took some: the risk the hedge is for).
fn p3_like_history() -> Vec<IntervalStats> {
    let counts: Vec<u32> = [32, 32, 30, 30, 27, 27, 27, 24, 26, 29, 32, 32, 28, 25, 25, 22, 24, 27, 30, 32]
        .into_iter()
        .cycle()
        .take(40)
        .collect();
    let mut all = history(&counts);
    for (k, s) in all.iter_mut().enumerate() {
        if k % 7 == 3 {
            let churn = (k % 4) as u32 + 1;
            s.arrivals += churn;
            s.preemptions += churn;
        }
    }
    all
}

/// The p3 trace, one record per minute.
fn p3_trace() -> Vec<IntervalStats> {
    let path = workspace_root().join("data/traces/aws-p3/p3-events.csv");
    parcae_traces::load(&path).unwrap().series(60_000).unwrap().intervals
}

/// Runs the control loop over `all` with the guest and natively, checks that
/// they agree bit for bit, and returns the largest fuel one call used.
fn run_guest_against_native(model: &str, all: &[IntervalStats], horizon: u32) -> u64 {
    let runtime = PolicyRuntime::new(SandboxLimits::default()).unwrap();
    let component = runtime.load_file(&policy_wasm("robust_liveput.wasm")).unwrap();
    assert_eq!(component.exports().world(), "full-policy");
    let mut guest = PolicyInstance::new(component);
    let mut native = RobustLiveput::default();
    let profile = profile(model);
    let fleet_max = all.iter().map(|s| s.instances).max().unwrap_or(0);
    let mut fleet_min = u32::MAX;
    let mut current = None;
    let mut max_fuel = 0;
    let mut hedged = 0;
    for k in 0..all.len() {
        fleet_min = fleet_min.min(all[k].instances);
        let predict = PredictRequest {
            history_by_type: Vec::new(),
            history: all[..=k].to_vec(),
            horizon: horizon - 1,
            interval_ms: 60_000,
            fleet_min,
            fleet_max,
        };
        let forecast = guest.predict(&predict).expect("guest forecast");
        assert_eq!(forecast, native.predict(&predict).unwrap(), "{model} interval {k}");
        max_fuel = max_fuel.max(guest.last_fuel_used());

        let mut planned: Vec<IntervalStats> = vec![all[k]];
        planned.extend(forecast);
        let optimize = OptimizeRequest {
            instances_now_by_type: Vec::new(),
            forecast: planned,
            instances_now: all[k].instances,
            current,
            interval_ms: 60_000,
            profile: profile.clone(),
            recovery: parcae_policy_core::Recovery::UNANNOUNCED,
        };
        hedged += usize::from(native.churn_for(&optimize) != ChurnEstimator::default().estimate(&[]));
        let plan = guest.optimize(&optimize).expect("guest plan");
        let expected = native.optimize(&optimize).unwrap();
        // Bit for bit: the same layouts and the same f64 expectations.
        assert_eq!(plan.steps.len(), expected.steps.len());
        for (a, b) in plan.steps.iter().zip(&expected.steps) {
            assert_eq!(a.config, b.config, "{model} interval {k}");
            assert_eq!(a.expected_samples.to_bits(), b.expected_samples.to_bits(), "{model} interval {k}");
        }
        max_fuel = max_fuel.max(guest.last_fuel_used());
        current = plan.steps[0].config;
    }
    assert_eq!(hedged, all.len(), "the history's own estimate was not always used");
    max_fuel
}

#[test]
fn guest_matches_native_within_the_fuel_budget() {
    let budget = SandboxLimits::default().fuel_per_call;
    let (synthetic, p3) = (p3_like_history(), p3_trace());
    let mut used = Vec::new();
    for (model, history, name, horizon) in [
        ("gpt-1.5b", &synthetic, "synthetic", 12),
        ("bert", &synthetic, "synthetic", 12),
        ("gpt-6.7b", &synthetic, "synthetic", 12),
        ("gpt-1.5b", &p3, "p3 trace", 8),
    ] {
        let max_fuel = run_guest_against_native(model, history, horizon);
        println!(
            "{model}, {name}, H = {horizon}: largest call used {max_fuel} fuel ({:.1}% of the default budget)",
            100.0 * max_fuel as f64 / budget as f64
        );
        used.push((model, name, max_fuel));
    }
    for (model, name, max_fuel) in used {
        assert!(max_fuel < budget / 3, "{model}, {name}: headroom below the default budget: {max_fuel}");
    }
}

/// Without its own forecast for the interval (another predictor answered, or
/// none was asked), the optimizer hedges with the prior alone, guest and
/// native alike.
#[test]
fn without_its_forecast_the_guest_hedges_with_the_prior() {
    let runtime = PolicyRuntime::new(SandboxLimits::default()).unwrap();
    let component = runtime.load_file(&policy_wasm("robust_liveput.wasm")).unwrap();
    let mut guest = PolicyInstance::new(component);
    let mut native = RobustLiveput::default();
    let profile = profile("gpt-1.5b");
    let flat = IntervalStats { instances: 20, arrivals: 0, preemptions: 0 };
    let optimize = OptimizeRequest {
        instances_now_by_type: Vec::new(),
        forecast: vec![flat; 8],
        instances_now: 20,
        current: None,
        interval_ms: 60_000,
        profile,
        recovery: parcae_policy_core::Recovery::UNANNOUNCED,
    };
    assert_eq!(native.churn_for(&optimize), ChurnEstimator::default().estimate(&[]));
    let plan = guest.optimize(&optimize).expect("guest plan");
    assert_eq!(plan, native.optimize(&optimize).unwrap());
}
