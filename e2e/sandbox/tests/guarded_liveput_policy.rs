//! The default policy, guarded liveput, as a guest component decides exactly
//! as the same code called natively (its shadows, its leader, its plans bit
//! for bit) on the real profile, under AWS's notice and unannounced, within
//! half the default fuel budget (a cold start on BERT's 62 layouts too), and it hands over to the reactive candidate
//! on a fleet where the forecast planner falls behind.

use parcae_e2e_sandbox::{policy_wasm, workspace_root};
use parcae_policy_core::guard::{Candidate, GuardedLiveput};
use parcae_policy_core::{
    IntervalStats, ModelProfile, OptimizeRequest, Optimizer, PredictRequest, Predictor, Recovery,
};
use parcae_profile::{CostConstants, Profile};
use parcae_runtime::{PolicyInstance, PolicyRuntime, SandboxLimits};

fn constants() -> CostConstants {
    CostConstants::load(workspace_root().join("data/profiles/cost-constants.json")).unwrap()
}

fn profile(model: &str) -> ModelProfile {
    let profile = Profile::load(workspace_root().join("data/profiles/p3-v100-parcae.json")).unwrap();
    profile.model_profile(model, &constants()).unwrap()
}

fn trace(path: &str) -> Vec<IntervalStats> {
    parcae_traces::load(&workspace_root().join(path)).unwrap().series(60_000).unwrap().intervals
}

/// Runs the control loop over `all` with the guest and natively, checks that
/// they agree bit for bit; returns the largest fuel one call used and how
/// many intervals the reactive candidate led.
fn run_guest_against_native(model: &str, all: &[IntervalStats], recovery: Recovery) -> (u64, usize) {
    let runtime = PolicyRuntime::new(SandboxLimits::default()).unwrap();
    let component = runtime.load_file(&policy_wasm("guarded_liveput.wasm")).unwrap();
    assert_eq!(component.exports().world(), "full-policy");
    let mut guest = PolicyInstance::new(component);
    let mut native = GuardedLiveput::default();
    let profile = profile(model);
    let fleet_max = all.iter().map(|s| s.instances).max().unwrap_or(0);
    let mut fleet_min = u32::MAX;
    let (mut current, mut max_fuel, mut reactive_led) = (None, 0, 0);
    for k in 0..all.len() {
        fleet_min = fleet_min.min(all[k].instances);
        let predict = PredictRequest {
            history_by_type: Vec::new(),
            history: all[..=k].to_vec(),
            horizon: 7,
            interval_ms: 60_000,
            fleet_min,
            fleet_max,
        };
        let forecast = guest.predict(&predict).expect("guest forecast");
        assert_eq!(forecast, native.predict(&predict).unwrap(), "{model} interval {k}");
        max_fuel = max_fuel.max(guest.last_fuel_used());
        let mut planned = vec![all[k]];
        planned.extend(forecast);
        let optimize = OptimizeRequest {
            instances_now_by_type: Vec::new(),
            forecast: planned,
            instances_now: all[k].instances,
            current,
            interval_ms: 60_000,
            profile: profile.clone(),
            recovery,
        };
        let plan = guest.optimize(&optimize).expect("guest plan");
        let expected = native.optimize(&optimize).unwrap();
        assert_eq!(plan.steps.len(), expected.steps.len());
        for (a, b) in plan.steps.iter().zip(&expected.steps) {
            assert_eq!(a.config, b.config, "{model} interval {k}");
            assert_eq!(a.expected_samples.to_bits(), b.expected_samples.to_bits(), "{model} interval {k}");
        }
        max_fuel = max_fuel.max(guest.last_fuel_used());
        reactive_led += usize::from(native.leader() == Candidate::Reactive);
        current = plan.steps[0].config;
    }
    (max_fuel, reactive_led)
}

#[test]
fn guest_matches_native_within_the_fuel_budget() {
    let budget = SandboxLimits::default().fuel_per_call;
    let aws = constants().recovery(120_000.0).unwrap();
    let p3 = trace("data/traces/aws-p3/p3-events.csv");
    // A cold start on a wide profile, unannounced: the real job plans from its
    // work at risk, whose fronts fill up (one call used the whole budget
    // before they were thinned, `guard::at_risk_front`, and every pair of a
    // front is read when the planner skips a predecessor).
    let diurnal = trace("data/traces/synthetic/diurnal.csv");
    let mut used = Vec::new();
    for (model, recovery, name, intervals) in [
        ("gpt-1.5b", aws, "notice 120 s", &p3[..240]),
        ("gpt-6.7b", aws, "notice 120 s", &p3[..240]),
        ("gpt-1.5b", Recovery::UNANNOUNCED, "unannounced", &p3[..240]),
        // A narrow profile keeps more pairs per layout at risk (10 layouts: 51).
        ("gpt-6.7b", Recovery::UNANNOUNCED, "unannounced", &p3[..240]),
        ("bert", Recovery::UNANNOUNCED, "unannounced, diurnal cold start", &diurnal[..30]),
    ] {
        let (fuel, _) = run_guest_against_native(model, intervals, recovery);
        assert!(fuel < budget / 2, "{model} {name}: the heaviest call used {fuel} of {budget} fuel");
        used.push(format!("{model} {name}: {:.1}%", 100.0 * fuel as f64 / budget as f64));
    }
    println!("heaviest call, share of the fuel budget: {}", used.join(", "));
}

/// On the g4dn trace, GPT-1.5B, unannounced, the forecast planner falls
/// behind the reactive candidate after about an hour and a half (interval 84
/// of the trace); the guard notices and hands over, in the guest exactly as
/// natively (the identity is checked at every interval).
#[test]
fn the_guard_hands_over_in_the_guest_too() {
    let g4dn = trace("data/traces/aws-g4dn/g4dn-events.csv");
    let (_, reactive_led) = run_guest_against_native("gpt-1.5b", &g4dn[..120], Recovery::UNANNOUNCED);
    assert!(reactive_led > 0, "the reactive candidate never led on the g4dn trace");
}
