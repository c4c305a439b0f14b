//! The control step every command runs: at an interval boundary, forecast the
//! intervals ahead with the predictor, plan with the optimizer, and record
//! whether the guest or the built-in fallback answered each. [`decide`] is the
//! one step (`run` calls it live); [`replay`] runs it over a whole trace for
//! `replay`, `bench`, `provision` and `bench-migration`.

use parcae_policy_core::{
    IntervalStats, ModelProfile, OptimizeRequest, ParallelConfig, PredictRequest, Recovery, TypeCount,
};
use parcae_runtime::{Answer, GuardedPolicy, Source};
use serde::Serialize;

/// How the loop runs.
#[derive(Debug, Clone)]
pub struct ControlSettings {
    /// Length of one control interval, ms.
    pub interval_ms: u64,
    /// Intervals each plan covers (H): the one starting now and H-1 forecast.
    pub horizon: u32,
    /// Largest fleet the job may hold; forecasts above it are invalid.
    pub fleet_max: u32,
    /// How the deployment recovers a stage that loses every holder (the
    /// cloud's preemption notice), told to the optimizer.
    pub recovery: Recovery,
}

/// The instance types of a mixed fleet's intervals, told to the policy (WIT 0.3.0's
/// `history-by-type` and `instances-now-by-type`).
#[derive(Debug, Clone, Copy)]
pub struct FleetTypes<'a> {
    /// The types' names.
    pub names: &'a [String],
    /// Per interval of the series, the instances of each type (in `names`' order).
    pub counts: &'a [Vec<u32>],
}

impl FleetTypes<'_> {
    /// Interval `k`'s instances by type (empty past the series).
    fn at(&self, k: usize) -> Vec<TypeCount> {
        self.counts.get(k).map_or_else(Vec::new, |c| {
            self.names
                .iter()
                .zip(c)
                .map(|(name, &instances)| TypeCount { instance_type: name.clone(), instances })
                .collect()
        })
    }
}

/// What one control step decided and who answered.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlStep {
    /// The layout for the interval starting now (`None`: pause).
    pub config: Option<ParallelConfig>,
    /// Samples the plan's first step expects.
    pub expected_samples: f64,
    /// The forecast for the next interval (`None` when H = 1: nothing forecast).
    pub forecast_instances: Option<u32>,
    /// Who forecast: `guest`, `fallback`, or `-` when H = 1 (nothing asked).
    pub predictor: &'static str,
    /// Who planned: `guest` or `fallback`.
    pub optimizer: &'static str,
    /// Why a fallback answered, if one did (the optimizer's reason first).
    pub fault: Option<String>,
}

/// Forecasts and plans for the interval starting now, `now` (its events
/// happen at its start, so it is observed), after the intervals `past`;
/// `current` is the layout the job runs now; `types`, on a mixed fleet, the
/// instance types of `past` and `now` (in that order).
pub fn decide(
    policy: &mut GuardedPolicy,
    settings: &ControlSettings,
    profile: &ModelProfile,
    past: &[IntervalStats],
    now: IntervalStats,
    current: Option<ParallelConfig>,
    types: Option<FleetTypes<'_>>,
) -> ControlStep {
    let fleet_min = past.iter().map(|h| h.instances).fold(now.instances, u32::min);
    let forecast = if settings.horizon > 1 {
        let mut history = Vec::with_capacity(past.len() + 1);
        history.extend_from_slice(past);
        history.push(now);
        policy.predict(&PredictRequest {
            history_by_type: types.map_or_else(Vec::new, |t| (0..=past.len()).map(|k| t.at(k)).collect()),
            history,
            horizon: settings.horizon - 1,
            interval_ms: settings.interval_ms,
            fleet_min,
            fleet_max: settings.fleet_max,
        })
    } else {
        Answer { value: Vec::new(), source: Source::Fallback, fault: None }
    };
    let mut planned = Vec::with_capacity(settings.horizon as usize);
    planned.push(now);
    planned.extend_from_slice(&forecast.value);
    let plan = policy.optimize(&OptimizeRequest {
        instances_now_by_type: types.map_or_else(Vec::new, |t| t.at(past.len())),
        forecast: planned,
        instances_now: now.instances,
        current,
        interval_ms: settings.interval_ms,
        profile: profile.clone(),
        recovery: settings.recovery,
    });
    let first = plan.value.steps.first().copied();
    ControlStep {
        config: first.and_then(|s| s.config),
        expected_samples: first.map_or(0.0, |s| s.expected_samples),
        forecast_instances: forecast.value.first().map(|s| s.instances),
        predictor: if settings.horizon > 1 { source_name(forecast.source) } else { "-" },
        optimizer: source_name(plan.source),
        fault: plan.fault.as_ref().or(forecast.fault.as_ref()).map(ToString::to_string),
    }
}

/// Who answered a policy call, as reports name it.
pub fn source_name(source: Source) -> &'static str {
    match source {
        Source::Guest => "guest",
        Source::Fallback => "fallback",
    }
}

/// What was decided for one interval of a replayed trace.
#[derive(Debug, Clone, Serialize)]
pub struct Decision {
    /// Index of the interval.
    pub interval: usize,
    /// Its start, ms since the start of the trace.
    pub start_ms: u64,
    /// Instances alive when the decision was made (after the boundary's events).
    pub instances: u32,
    /// Instances that arrived at the boundary.
    pub arrivals: u32,
    /// Instances preempted at the boundary.
    pub preemptions: u32,
    /// The forecast for the next interval (`None` when H = 1: nothing forecast).
    pub forecast_instances: Option<u32>,
    /// `None`: training paused.
    #[serde(serialize_with = "config_text")]
    pub config: Option<ParallelConfig>,
    /// Samples the plan's first step expects.
    pub expected_samples: f64,
    /// Who forecast (`guest`, `fallback`, `-`).
    pub predictor: &'static str,
    /// Who planned (`guest`, `fallback`).
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

/// Runs the control step at every interval of `series` (one entry per
/// interval, as normalised from a trace), each decision becoming the next
/// step's current layout. `on_decision` sees each decision as it is made
/// (for progress output).
pub fn replay(
    series: &[IntervalStats],
    profile: &ModelProfile,
    policy: &mut GuardedPolicy,
    settings: &ControlSettings,
    on_decision: impl FnMut(&Decision),
) -> Vec<Decision> {
    replay_profiles(series, |_| profile, policy, settings, None, on_decision)
}

/// [`replay`] with each interval's own profile (`profile_at(k)` for interval `k`): a mixed
/// fleet, whose composition sets what each layout trains, tells the policy so, and the
/// instances of each type (`types`, one entry per interval of `series`).
pub fn replay_profiles<'p>(
    series: &[IntervalStats],
    profile_at: impl Fn(usize) -> &'p ModelProfile,
    policy: &mut GuardedPolicy,
    settings: &ControlSettings,
    types: Option<FleetTypes<'_>>,
    mut on_decision: impl FnMut(&Decision),
) -> Vec<Decision> {
    let mut decisions = Vec::with_capacity(series.len());
    let mut current: Option<ParallelConfig> = None;
    for (k, observed) in series.iter().enumerate() {
        let step = decide(policy, settings, profile_at(k), &series[..k], *observed, current, types);
        let decision = Decision {
            interval: k,
            start_ms: k as u64 * settings.interval_ms,
            instances: observed.instances,
            arrivals: observed.arrivals,
            preemptions: observed.preemptions,
            forecast_instances: step.forecast_instances,
            config: step.config,
            expected_samples: step.expected_samples,
            predictor: step.predictor,
            optimizer: step.optimizer,
            fault: step.fault,
        };
        on_decision(&decision);
        decisions.push(decision);
        current = step.config;
    }
    decisions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleet_types_name_each_intervals_instances_by_type() {
        let names = ["p3".to_string(), "g4dn".to_string()];
        let counts = [vec![2, 0], vec![2, 3]];
        let types = FleetTypes { names: &names, counts: &counts };
        let at = |k| types.at(k).into_iter().map(|t| (t.instance_type, t.instances)).collect::<Vec<_>>();
        assert_eq!(at(1), [("p3".to_string(), 2), ("g4dn".to_string(), 3)]);
        assert!(types.at(2).is_empty());
    }
}
