//! What the sandbox costs: one predictor+optimizer call through a Wasm guest vs
//! the same Rust code called natively, and loading (compile + link) vs
//! instantiating a policy. Run with `cargo bench -p parcae-e2e`.
//!
//! The request is realistic: the example profile's model on a 32-instance
//! history with a 12-interval horizon (or GPT-1.5B from the shared p3 profile
//! when `../shared` is present).

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use parcae_e2e_sandbox::{history, policy_wasm, workspace_root};
use parcae_policy_core::reactive::{Persistence, ThroughputOptimal};
use parcae_policy_core::{ModelProfile, OptimizeRequest, Optimizer, PredictRequest, Predictor};
use parcae_profile::{CostConstants, Profile};
use parcae_runtime::{PolicyInstance, PolicyRuntime, SandboxLimits};

fn profile() -> ModelProfile {
    let root = workspace_root();
    let constants = CostConstants::load(root.join("data/profiles/cost-constants.json")).unwrap();
    let shared = root.join("data/profiles/p3-v100-parcae.json");
    if shared.exists() {
        Profile::load(&shared).unwrap().model_profile("gpt-1.5b", &constants).unwrap()
    } else {
        let example = Profile::load(root.join("data/profiles/example-small.json")).unwrap();
        let model = example.model_names()[0].to_string();
        example.model_profile(&model, &constants).unwrap()
    }
}

fn requests() -> (PredictRequest, OptimizeRequest) {
    let counts: Vec<u32> = (0..17).map(|i| 32 - (i % 5) * 3).collect();
    let predict = PredictRequest {
        history_by_type: Vec::new(),
        history: history(&counts),
        horizon: 12,
        interval_ms: 60_000,
        fleet_min: 20,
        fleet_max: 32,
    };
    let forecast = Persistence.predict(&predict).unwrap();
    let optimize = OptimizeRequest {
        instances_now_by_type: Vec::new(),
        forecast,
        instances_now: *counts.last().unwrap(),
        current: None,
        interval_ms: 60_000,
        profile: profile(),
        recovery: parcae_policy_core::Recovery::UNANNOUNCED,
    };
    (predict, optimize)
}

fn calls(c: &mut Criterion) {
    let (predict, optimize) = requests();
    let runtime = PolicyRuntime::new(SandboxLimits::default()).unwrap();
    let mut group = c.benchmark_group("predict+optimize");
    group.bench_function("native", |b| {
        b.iter(|| {
            let forecast = Persistence.predict(black_box(&predict)).unwrap();
            let plan = ThroughputOptimal.optimize(black_box(&optimize)).unwrap();
            black_box((forecast, plan))
        })
    });
    let reactive = runtime.load_file(&policy_wasm("reactive.wasm")).unwrap();
    let mut instance = PolicyInstance::new(reactive);
    group.bench_function("wasm-rust", |b| {
        b.iter(|| {
            let forecast = instance.predict(black_box(&predict)).unwrap();
            let plan = instance.optimize(black_box(&optimize)).unwrap();
            black_box((forecast, plan))
        })
    });
    // The Python component is built by the python_policy test (componentize-py).
    let python = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python_reactive.wasm");
    if python.exists() {
        let component = runtime.load_file(&python).unwrap();
        let mut instance = PolicyInstance::new(component);
        group.sample_size(20).bench_function("wasm-python", |b| {
            b.iter(|| {
                let forecast = instance.predict(black_box(&predict)).unwrap();
                let plan = instance.optimize(black_box(&optimize)).unwrap();
                black_box((forecast, plan))
            })
        });
    } else {
        eprintln!("skipping wasm-python: run the python_policy test first to build {}", python.display());
    }
    group.finish();
}

fn loading(c: &mut Criterion) {
    let runtime = PolicyRuntime::new(SandboxLimits::default()).unwrap();
    let bytes = std::fs::read(policy_wasm("reactive.wasm")).unwrap();
    let mut group = c.benchmark_group("reactive-policy");
    group.sample_size(10).measurement_time(Duration::from_secs(10));
    group.bench_function("load (compile+link+check)", |b| {
        b.iter(|| black_box(runtime.load_bytes("reactive.wasm", &bytes).unwrap()))
    });
    let component = runtime.load_bytes("reactive.wasm", &bytes).unwrap();
    group.sample_size(100).measurement_time(Duration::from_secs(3));
    group.bench_function("instantiate", |b| {
        b.iter(|| {
            let mut instance = PolicyInstance::new(component.clone());
            instance.warm_up().unwrap();
            black_box(instance)
        })
    });
    group.finish();
}

criterion_group!(benches, calls, loading);
criterion_main!(benches);
