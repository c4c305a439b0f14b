//! The serving guests (`policies/spotserve`, `policies/cost-aware-serving`)
//! load as `serving-policy` components and, through the sandbox, return
//! exactly the plans their optimizers return natively, over a few hundred
//! seeded random requests (instances, rates, latency objective, workload and
//! current configuration all varied), with each guest's shape cache carried
//! from call to call as in a real run. A training command's loader tells them
//! apart from training policies.

use std::collections::BTreeSet;

use parcae_e2e_sandbox::{policy_wasm, serve_request};
use parcae_runtime::{
    GuardedServingPolicy, PolicyRuntime, SERVING_WIT_PACKAGE, SandboxLimits, ServingInstance, Source,
};
use parcae_serving_core::{
    CostAware, ServeRequest, ServingConfig, ServingOptimizer, SpotServe, Workload, shapes,
};

/// Requests checked per guest.
const REQUESTS: usize = 300;

/// A small deterministic generator (xorshift64*): the same requests on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: u32) -> u32 {
        (self.next() % u64::from(n)) as u32
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u32) as usize]
    }
}

/// One random request on the toy profile: 1 to 5 intervals of 0 to 7
/// instances, rates from idle to far beyond any configuration, objectives from
/// unmeetable to lax, three workloads, and a current configuration that is
/// absent or one of the feasible shapes.
fn random_request(rng: &mut Rng) -> ServeRequest {
    let intervals = 1 + rng.below(5) as usize;
    let instances: Vec<u32> = (0..intervals).map(|_| rng.below(8)).collect();
    let rates: Vec<f64> = (0..intervals)
        .map(|_| match rng.below(5) {
            0 => 0.0,
            1 => rng.unit(),
            2 => 10.0 * rng.unit(),
            3 => 40.0 * rng.unit(),
            _ => 1000.0 * rng.unit(),
        })
        .collect();
    let slo = match rng.below(4) {
        0 => rng.pick(&[100.0, 1_000.0, 5_000.0, 60_000.0, 1e9]),
        _ => 200.0 + 30_000.0 * rng.unit(),
    };
    let mut request = serve_request(&instances, &rates, slo);
    request.workload = rng.pick(&[
        Workload { input_tokens: 512, output_tokens: 64 },
        Workload { input_tokens: 128, output_tokens: 16 },
        Workload { input_tokens: 1024, output_tokens: 256 },
    ]);
    if rng.below(3) > 0 {
        let feasible = shapes(&request.profile, 7 * request.profile.gpus_per_instance, &request.workload);
        if !feasible.is_empty() {
            let (shape, _) = feasible[rng.below(feasible.len() as u32) as usize];
            request.current = Some(ServingConfig { data_parallel: 1 + rng.below(3), ..shape });
        }
    }
    request
}

/// Runs `file` and `native` over the same [`REQUESTS`] random requests and
/// checks every guest plan is the native one; returns how many distinct
/// configurations were chosen for the first interval (to show the requests
/// exercised the optimizer, not only its corner cases).
fn guest_matches_native(file: &str, mut native: impl ServingOptimizer, seed: u64) -> usize {
    let runtime = PolicyRuntime::new(SandboxLimits::default()).expect("runtime starts");
    let component = runtime.load_file(&policy_wasm(file)).unwrap_or_else(|e| panic!("{file} loads: {e}"));
    assert_eq!(component.exports().world(), "serving-policy", "{file}");
    assert_eq!(component.exports().package(), SERVING_WIT_PACKAGE);
    assert!(component.uses_log(), "{file} logs its decisions");
    let mut guarded = GuardedServingPolicy::new(component.clone());
    let mut instance = ServingInstance::new(component);
    let mut rng = Rng(seed);
    let mut chosen = BTreeSet::new();
    let mut most_fuel = 0;
    for k in 0..REQUESTS {
        let request = random_request(&mut rng);
        let expected = native.configure(&request).expect("the native optimizer plans every request");
        let answer = guarded.configure(&request);
        assert_eq!(answer.fault, None, "{file}, request {k}: {request:?}");
        assert_eq!(answer.source, Source::Guest);
        assert_eq!(answer.value, expected, "{file}, request {k}: {request:?}");
        // A bare instance answers the same, within the default budgets.
        assert_eq!(instance.configure(&request).unwrap(), expected, "{file}, request {k}");
        most_fuel = most_fuel.max(instance.last_fuel_used());
        chosen.insert(expected.configs[0]);
    }
    let counts = guarded.counts();
    assert_eq!((counts.guest_answers, counts.total_faults()), (REQUESTS as u64, 0), "{counts}");
    println!("{file}: {} distinct first configurations, at most {most_fuel} fuel a call", chosen.len());
    chosen.len()
}

#[test]
fn spotserve_guest_plans_exactly_as_native_spotserve() {
    assert!(guest_matches_native("spotserve.wasm", SpotServe::default(), 0x5eed_5e7e) >= 10);
}

#[test]
fn cost_aware_guest_plans_exactly_as_native_cost_aware() {
    assert!(guest_matches_native("cost_aware_serving.wasm", CostAware::default(), 0xc057_a3a7) >= 10);
}

/// A request the host built wrong (more rates than intervals) is the guest's
/// `err`, reported as such, and the fallback then plans nothing rather than panic.
#[test]
fn a_malformed_request_is_a_guest_error_and_the_fallback_stops_serving() {
    let runtime = PolicyRuntime::new(SandboxLimits::default()).unwrap();
    let component = runtime.load_file(&policy_wasm("spotserve.wasm")).unwrap();
    let mut guarded = GuardedServingPolicy::new(component);
    let request = serve_request(&[2, 2], &[1.0, 1.0, 1.0], 10_000.0);
    let answer = guarded.configure(&request);
    assert_eq!(answer.source, Source::Fallback);
    assert_eq!(answer.value.configs, vec![None, None]);
    let fault = answer.fault.expect("the guest's err is reported");
    assert_eq!(fault.kind, parcae_runtime::FaultKind::GuestError);
    assert!(fault.detail.contains("2 instance counts but 3 arrival rates"), "{fault}");
}

/// A training policy is not a serving one, and the other way round: each
/// reports its own world, and a serving call on a training component is an
/// `unsupported` fault answered by the fallback.
#[test]
fn serving_and_training_components_are_told_apart() {
    let runtime = PolicyRuntime::new(SandboxLimits::default()).unwrap();
    let serving = runtime.load_file(&policy_wasm("spotserve.wasm")).unwrap();
    let training = runtime.load_file(&policy_wasm("reactive.wasm")).unwrap();
    assert!(serving.exports().is_serving() && !serving.exports().is_training());
    assert!(training.exports().is_training() && !training.exports().is_serving());
    assert_eq!(training.exports().package(), parcae_runtime::WIT_PACKAGE);

    let request = serve_request(&[2], &[1.0], 10_000.0);
    let answer = GuardedServingPolicy::new(training).configure(&request);
    assert_eq!(answer.source, Source::Fallback);
    assert_eq!(answer.value, SpotServe::default().configure(&request).unwrap());
    assert_eq!(answer.fault.map(|f| f.kind), Some(parcae_runtime::FaultKind::Unsupported));

    let mut policy = parcae_runtime::GuardedPolicy::new(None, Some(serving));
    let answer = policy.optimize(&parcae_e2e_sandbox::optimize_request(4, 2));
    assert_eq!(answer.source, Source::Fallback);
    assert_eq!(answer.fault.map(|f| f.kind), Some(parcae_runtime::FaultKind::Unsupported));
}
