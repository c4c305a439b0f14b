//! The control loop replayed over a trace: at each interval boundary, forecast
//! with the predictor, plan with the optimizer, record the first step. This
//! shows what a policy decides and whether it stays healthy; the liveput
//! simulator scores those decisions against a cost model.

use parcae_policy_core::{IntervalStats, ModelProfile, OptimizeRequest, ParallelConfig, PredictRequest};
use parcae_runtime::{Answer, GuardedPolicy, Source};
use serde::Serialize;

/// How the loop runs.
#[derive(Debug, Clone)]
pub struct ReplaySettings {
    /// Length of one control interval, ms.
    pub interval_ms: u64,
    /// Intervals each plan covers (H): the one starting now and H-1 forecast.
    pub horizon: u32,
    /// Largest fleet the job may hold; forecasts above it are invalid.
    pub fleet_max: u32,
}

/// What was decided for one interval.
#[derive(Debug, Clone, Serialize)]
pub struct Decision {
    pub interval: usize,
    pub start_ms: u64,
    /// Instances alive when the decision was made (after the boundary's events).
    pub instances: u32,
    pub arrivals: u32,
    pub preemptions: u32,
    /// The forecast for the next interval (`None` when H = 1: nothing forecast).
    pub forecast_instances: Option<u32>,
    /// `None`: training paused.
    #[serde(serialize_with = "config_text")]
    pub config: Option<ParallelConfig>,
    pub expected_samples: f64,
    pub predictor: &'static str,
    pub optimizer: &'static str,
    /// Why a fallback answered, if one did.
    pub fault: Option<String>,
}

fn config_text<S: serde::Serializer>(config: &Option<ParallelConfig>, s: S) -> Result<S::Ok, S::Error> {
    match config {
        Some(c) => s.serialize_str(&c.to_string()),
        None => s.serialize_none(),
    }
}

fn source_name(source: Source) -> &'static str {
    match source {
        Source::Guest => "guest",
        Source::Fallback => "fallback",
    }
}

/// Run the loop over `series` (one entry per interval, as normalised from a trace).
/// `on_decision` sees each decision as it is made (for progress output).
pub fn replay(
    series: &[IntervalStats],
    profile: &ModelProfile,
    policy: &mut GuardedPolicy,
    settings: &ReplaySettings,
    mut on_decision: impl FnMut(&Decision),
) -> Vec<Decision> {
    let mut decisions = Vec::with_capacity(series.len());
    let mut current: Option<ParallelConfig> = None;
    let mut fleet_min = u32::MAX;
    for (k, observed) in series.iter().enumerate() {
        // The interval starting now has been observed (its events happen at its
        // start); the predictor forecasts the H-1 intervals after it.
        let history = &series[..=k];
        fleet_min = fleet_min.min(observed.instances);
        let forecast = if settings.horizon > 1 {
            policy.predict(&PredictRequest {
                history: history.to_vec(),
                horizon: settings.horizon - 1,
                interval_ms: settings.interval_ms,
                fleet_min,
                fleet_max: settings.fleet_max,
            })
        } else {
            Answer { value: Vec::new(), source: Source::Fallback, fault: None }
        };
        let mut planned = Vec::with_capacity(settings.horizon as usize);
        planned.push(*observed);
        planned.extend_from_slice(&forecast.value);
        let plan = policy.optimize(&OptimizeRequest {
            forecast: planned,
            instances_now: observed.instances,
            current,
            interval_ms: settings.interval_ms,
            profile: profile.clone(),
        });
        let first = plan.value.steps.first().copied();
        let config = first.and_then(|s| s.config);
        let fault = plan.fault.as_ref().or(forecast.fault.as_ref()).map(ToString::to_string);
        let decision = Decision {
            interval: k,
            start_ms: k as u64 * settings.interval_ms,
            instances: observed.instances,
            arrivals: observed.arrivals,
            preemptions: observed.preemptions,
            forecast_instances: forecast.value.first().map(|s| s.instances),
            config,
            expected_samples: first.map_or(0.0, |s| s.expected_samples),
            predictor: if settings.horizon > 1 { source_name(forecast.source) } else { "-" },
            optimizer: source_name(plan.source),
            fault,
        };
        on_decision(&decision);
        decisions.push(decision);
        current = config;
    }
    decisions
}
