//! Helpers shared by the end-to-end tests: where the built policy components
//! are, and small requests (training and serving) to drive them with.

use std::path::PathBuf;

use parcae_policy_core::{
    ConfigProfile, IntervalStats, ModelProfile, OptimizeRequest, ParallelConfig, PredictRequest,
};

/// A runtime with the tight budgets the hostile-fixture tests name in their
/// checks: 200,000,000 fuel and 10 s a call, 32 MiB of memory.
pub fn hostile_runtime() -> parcae_runtime::PolicyRuntime {
    parcae_runtime::PolicyRuntime::new(parcae_runtime::SandboxLimits {
        fuel_per_call: 200_000_000,
        deadline_per_call: std::time::Duration::from_secs(10),
        memory_bytes: 32 << 20,
        ..parcae_runtime::SandboxLimits::default()
    })
    .expect("runtime starts")
}

/// Path of a guest component built by this crate's build script.
pub fn policy_wasm(file: &str) -> PathBuf {
    PathBuf::from(env!("PARCAE_TEST_POLICY_DIR")).join(file)
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("e2e/sandbox/ is two levels below the workspace root")
        .to_path_buf()
}

/// A small profile: every (D,P) with D*P <= 16 and P in {1,2,4}, throughput
/// growing with D and slightly penalised by P.
pub fn toy_profile() -> ModelProfile {
    let mut configs = Vec::new();
    for pipeline_stages in [1u32, 2, 4] {
        for data_parallel in 1..=16 / pipeline_stages {
            let samples_per_second = 10.0 * f64::from(data_parallel) * f64::from(pipeline_stages).powf(0.9);
            configs.push(ConfigProfile {
                config: ParallelConfig::new(data_parallel, pipeline_stages),
                samples_per_second,
                iteration_ms: 64_000.0 / samples_per_second,
                comm_rebuild_add_ms: 1000.0,
                comm_rebuild_remove_ms: 500.0,
                model_build_ms: 800.0,
            });
        }
    }
    ModelProfile {
        model: "toy".into(),
        global_batch_size: 64,
        micro_batch_size: 4,
        configs,
        partitions: vec![],
        transfer_curve: vec![],
        rendezvous_ms: 6600.0,
        process_start_ms: 240.0,
        add_extra_ms: 0.0,
        checkpoint_restart_ms: 14_000.0,
        checkpoint_interval_ms: 600_000.0,
    }
}

/// A history of `counts` with arrivals and preemptions derived from the steps.
pub fn history(counts: &[u32]) -> Vec<IntervalStats> {
    IntervalStats::chain_from(0, counts)
}

/// A forecast request over `counts` with horizon `horizon`.
pub fn predict_request(counts: &[u32], horizon: u32) -> PredictRequest {
    PredictRequest {
        history_by_type: Vec::new(),
        history: history(counts),
        horizon,
        interval_ms: 60_000,
        fleet_min: counts.iter().copied().min().unwrap_or(0),
        fleet_max: 16,
    }
}

/// An optimize request for a flat forecast of `instances`.
pub fn optimize_request(instances: u32, horizon: usize) -> OptimizeRequest {
    OptimizeRequest {
        instances_now_by_type: Vec::new(),
        forecast: vec![IntervalStats { instances, arrivals: 0, preemptions: 0 }; horizon],
        instances_now: instances,
        current: None,
        interval_ms: 60_000,
        profile: toy_profile(),
        recovery: parcae_policy_core::Recovery::UNANNOUNCED,
    }
}

/// Runs `script` (a component build script of the repository, e.g.
/// `policies/js-reactive/build.sh`) with `output` as its argument and returns
/// `output`; `hint` says what to do when it fails.
pub fn build_component(script: &str, output: &std::path::Path, hint: &str) -> PathBuf {
    let status = std::process::Command::new("bash")
        .arg(workspace_root().join(script))
        .arg(output)
        .status()
        .unwrap_or_else(|e| panic!("cannot run bash {script}: {e}"));
    assert!(status.success(), "{script} failed; {hint}");
    output.to_path_buf()
}

/// A serving request on [`parcae_serving_core::toy_profile`]: `instances` and `rates` per
/// interval (same length), the latency objective `slo_ms`, nothing serving now.
pub fn serve_request(instances: &[u32], rates: &[f64], slo_ms: f64) -> parcae_serving_core::ServeRequest {
    parcae_serving_core::ServeRequest {
        instances: instances.to_vec(),
        arrival_rates: rates.to_vec(),
        latency_slo_ms: slo_ms,
        interval_ms: 60_000,
        current: None,
        workload: parcae_serving_core::Workload { input_tokens: 512, output_tokens: 64 },
        profile: parcae_serving_core::toy_profile(),
    }
}
