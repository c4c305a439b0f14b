//! A Parcae scheduling policy, compiled to a WebAssembly component of world
//! `full-policy` (see `wit/policy.wit`): a predictor that forecasts how many
//! instances the cloud will leave the job, and an optimizer that picks a
//! parallel layout (data-parallel degree D x pipeline depth P) per interval.
//!
//! As written it is Parcae's reactive baseline: a persistence forecast (the
//! fleet stays as it is) and, every interval, the fastest profiled layout that
//! fits the instances available (throughput-optimal, ignoring migration
//! costs). Change `predict` and `optimize` to try your own ideas; `./build.sh`
//! rebuilds the component, `parcae-host bench --policy <it>` scores it.

/// Rust bindings of the `full-policy` world, generated from `wit/` at compile time.
mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "full-policy",
    });
}

use bindings::exports::parcae::policy::optimizer::{Guest as Optimizer, OptimizeRequest};
use bindings::exports::parcae::policy::predictor::{Guest as Predictor, PredictRequest};
use bindings::parcae::policy::log::{Level, log};
use bindings::parcae::policy::types::{ConfigProfile, IntervalStats, ModelProfile, Plan, PlanStep};

/// The policy: one type implements both exported interfaces.
struct Policy;

impl Predictor for Policy {
    /// Persistence: the next `horizon` intervals look like the last one seen,
    /// with no arrivals and no preemptions.
    fn predict(request: PredictRequest) -> Result<Vec<IntervalStats>, String> {
        let instances = request.history.last().map_or(0, |last| last.instances);
        Ok((0..request.horizon).map(|_| IntervalStats { instances, arrivals: 0, preemptions: 0 }).collect())
    }
}

impl Optimizer for Policy {
    /// Throughput-optimal: per interval, the fastest profiled layout that fits
    /// the instances available (`instances_now` for the first step, the
    /// forecast after), or a pause when none fits.
    fn optimize(request: OptimizeRequest) -> Result<Plan, String> {
        let seconds = request.interval_ms as f64 / 1000.0;
        let steps: Vec<PlanStep> = request
            .forecast
            .iter()
            .enumerate()
            .map(|(step, interval)| {
                let available = if step == 0 { request.instances_now } else { interval.instances };
                match fastest_fitting(&request.profile, available) {
                    Some(entry) => PlanStep {
                        config: Some(entry.config),
                        expected_samples: entry.samples_per_second * seconds,
                    },
                    None => PlanStep { config: None, expected_samples: 0.0 },
                }
            })
            .collect();
        if let Some(PlanStep { config: Some(first), .. }) = steps.first() {
            let message = format!(
                "{}x{} for {} instances",
                first.data_parallel, first.pipeline_stages, request.instances_now
            );
            log(Level::Debug, &message);
        }
        Ok(Plan { steps })
    }
}

/// Instances a layout occupies (D x P).
fn size(entry: &ConfigProfile) -> u64 {
    u64::from(entry.config.data_parallel) * u64::from(entry.config.pipeline_stages)
}

/// The profiled layout with the highest throughput that fits in `instances`;
/// ties go to fewer instances, then to the shallower pipeline.
fn fastest_fitting(profile: &ModelProfile, instances: u32) -> Option<&ConfigProfile> {
    profile.configs.iter().filter(|entry| size(entry) <= u64::from(instances)).max_by(|a, b| {
        a.samples_per_second
            .total_cmp(&b.samples_per_second)
            .then_with(|| size(b).cmp(&size(a)))
            .then_with(|| b.config.pipeline_stages.cmp(&a.config.pipeline_stages))
    })
}

bindings::export!(Policy with_types_in bindings);
