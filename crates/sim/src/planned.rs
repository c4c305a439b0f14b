//! Baselines that plan with the true future: the Oracle (one plan over the
//! whole trace) and liveput with the true future over a receding horizon.
//! Both use the dynamic-programming planner `parcae_policy_core::plan`.

use parcae_policy_core::plan::{self, Step, TransitionCache};
use parcae_policy_core::{IntervalStats, ModelProfile, ParallelConfig};

use crate::{SimError, Simulator};

/// The planner's view of a series: per interval, the instances alive before
/// it (the previous interval's, 0 for the first), its preemptions and arrivals.
pub fn plan_steps(series: &[IntervalStats]) -> Vec<Step> {
    let mut before = 0;
    series
        .iter()
        .map(|s| {
            let step = Step { instances_before: before, preempted: s.preemptions, arrived: s.arrivals };
            before = s.instances;
            step
        })
        .collect()
}

/// The Oracle: the plan that maximises the expected samples of the whole trace,
/// knowing every future preemption count, from a cold start.
pub fn oracle(
    profile: &ModelProfile,
    series: &[IntervalStats],
    interval_ms: u64,
) -> Result<Vec<Option<ParallelConfig>>, SimError> {
    if interval_ms == 0 {
        return Err(SimError::ZeroInterval);
    }
    let mut cache = TransitionCache::default();
    let planned = plan::best_plan(profile, None, 0.0, &plan_steps(series), interval_ms, &mut cache)
        .map_err(|source| SimError::CostModel { interval: 0, source })?;
    Ok(planned.iter().map(|p| p.config).collect())
}

/// Liveput with the true future over a receding horizon: at each interval,
/// plan the next `horizon` true intervals from the state the simulator is in
/// (running layout and carried migration time), apply the first step.
pub fn liveput_truth(
    profile: &ModelProfile,
    series: &[IntervalStats],
    interval_ms: u64,
    horizon: usize,
) -> Result<Vec<Option<ParallelConfig>>, SimError> {
    let steps = plan_steps(series);
    let horizon = horizon.max(1);
    let mut simulator = Simulator::new(profile, interval_ms)?;
    let mut cache = TransitionCache::default();
    let mut decisions = Vec::with_capacity(series.len());
    for (k, stats) in series.iter().enumerate() {
        let window = &steps[k..(k + horizon).min(steps.len())];
        let planned = plan::best_plan(
            profile,
            simulator.current(),
            simulator.carried_ms(),
            window,
            interval_ms,
            &mut cache,
        )
        .map_err(|source| SimError::CostModel { interval: k, source })?;
        let config = planned.first().and_then(|p| p.config);
        simulator.step(*stats, config)?;
        decisions.push(config);
    }
    Ok(decisions)
}
