//! A native policy driven over a trace exactly as the host drives a guest
//! (`parcae-host`'s `control::decide`): at interval `k` it sees the history up
//! to `k`, forecasts `horizon - 1` more intervals, and plans from the layout
//! that ran; a first step that does not fit the instances pauses. For
//! evaluations that need the policies' decisions fast and without a sandbox
//! (the generalisation table, tests); the host's own loop adds the sandbox
//! and its fallback.

use parcae_policy_core::{
    IntervalStats, ModelProfile, OptimizeRequest, Optimizer, ParallelConfig, PredictRequest, Predictor,
    Recovery,
};

/// The decisions `policy` makes over `series`, one per interval; an error
/// names the interval and the call that failed.
pub fn drive_native<P: Predictor + Optimizer>(
    policy: &mut P,
    series: &[IntervalStats],
    profile: &ModelProfile,
    recovery: Recovery,
    interval_ms: u64,
    horizon: u32,
) -> Result<Vec<Option<ParallelConfig>>, String> {
    drive_native_profiles(policy, series, |_| profile, recovery, interval_ms, horizon)
}

/// [`drive_native`] telling the policy each interval's own profile
/// (`profile_at(k)` for interval `k`): a checkpoint cadence that follows the
/// losses seen so far ([`crate::Cadenced::at`]), as `bench` tells it.
pub fn drive_native_profiles<'p, P: Predictor + Optimizer>(
    policy: &mut P,
    series: &[IntervalStats],
    profile_at: impl Fn(usize) -> &'p ModelProfile,
    recovery: Recovery,
    interval_ms: u64,
    horizon: u32,
) -> Result<Vec<Option<ParallelConfig>>, String> {
    let fleet_max = series.iter().map(|s| s.instances).max().unwrap_or(0);
    let (mut current, mut fleet_min) = (None, u32::MAX);
    let mut decisions = Vec::with_capacity(series.len());
    for (k, observed) in series.iter().enumerate() {
        fleet_min = fleet_min.min(observed.instances);
        let mut planned = vec![*observed];
        if horizon > 1 {
            let request = PredictRequest {
                history_by_type: Vec::new(),
                history: series[..=k].to_vec(),
                horizon: horizon - 1,
                interval_ms,
                fleet_min,
                fleet_max,
            };
            planned.extend(policy.predict(&request).map_err(|e| format!("interval {k}: predict: {e}"))?);
        }
        let plan = policy
            .optimize(&OptimizeRequest {
                instances_now_by_type: Vec::new(),
                forecast: planned,
                instances_now: observed.instances,
                current,
                interval_ms,
                profile: profile_at(k).clone(),
                recovery,
            })
            .map_err(|e| format!("interval {k}: optimize: {e}"))?;
        current = plan
            .steps
            .first()
            .and_then(|s| s.config)
            .filter(|c| c.instances() <= u64::from(observed.instances));
        decisions.push(current);
    }
    Ok(decisions)
}
