//! Baselines that plan with the true future: the Oracle (one plan over the
//! whole trace) and liveput with the true future over a receding horizon.
//! Both use the dynamic-programming planner `parcae_policy_core::plan`.

use crate::MigrationMode;
use parcae_policy_core::plan::{self, PlanOptions, Step, TransitionCache};
use parcae_policy_core::robust::default_terminal_ms;
use parcae_policy_core::{IntervalStats, ModelProfile, ParallelConfig, Recovery};

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
/// knowing every future preemption count, from a cold start; unannounced
/// preemptions ([`oracle_under`] takes the deployment's recovery).
pub fn oracle(
    profile: &ModelProfile,
    series: &[IntervalStats],
    interval_ms: u64,
) -> Result<Vec<Option<ParallelConfig>>, SimError> {
    oracle_under(profile, series, interval_ms, Recovery::UNANNOUNCED)
}

/// [`oracle`] under the recovery rules of `recovery`. It is exact under the
/// live cost model (the program keeps full Pareto fronts; see
/// `parcae_policy_core::plan`), whose actions include restart-on-change's,
/// so no decision sequence scores more under either mode (checked in the
/// tests on the public traces).
pub fn oracle_under(
    profile: &ModelProfile,
    series: &[IntervalStats],
    interval_ms: u64,
    recovery: Recovery,
) -> Result<Vec<Option<ParallelConfig>>, SimError> {
    if interval_ms == 0 {
        return Err(SimError::ZeroInterval);
    }
    let mut cache = TransitionCache::default();
    let options = oracle_options(recovery);
    let planned =
        plan::best_plan_with(profile, None, 0.0, &plan_steps(series), interval_ms, options, &mut cache)
            .map_err(|source| SimError::CostModel { interval: 0, source })?;
    Ok(planned.iter().map(|p| p.config).collect())
}

/// How the Oracle plans under `recovery`: from a cold start under the
/// work-at-risk rule (`parcae_policy_core::at_risk`), as every row is scored,
/// with fronts large enough never to be thinned on the public traces (their
/// largest is 49 pairs on the p3 trace, GPT-1.5B; thinned at the default 32,
/// 91 fronts lost pairs), so the plan is exact.
pub fn oracle_options(recovery: Recovery) -> PlanOptions {
    PlanOptions { recovery, at_risk: Some(0.0), max_front: ORACLE_MAX_FRONT, ..PlanOptions::default() }
}

/// Largest Pareto front the Oracle keeps ([`oracle_options`]).
const ORACLE_MAX_FRONT: usize = 1024;

/// Liveput with the true future over a receding horizon: at each interval,
/// plan the next `horizon` true intervals from the state the simulator is in
/// (running layout and carried migration time), apply the first step;
/// unannounced preemptions ([`liveput_truth_under`] takes a recovery).
pub fn liveput_truth(
    profile: &ModelProfile,
    series: &[IntervalStats],
    interval_ms: u64,
    horizon: usize,
) -> Result<Vec<Option<ParallelConfig>>, SimError> {
    liveput_truth_under(profile, series, interval_ms, horizon, Recovery::UNANNOUNCED)
}

/// [`liveput_truth`] under the recovery rules of `recovery`.
pub fn liveput_truth_under(
    profile: &ModelProfile,
    series: &[IntervalStats],
    interval_ms: u64,
    horizon: usize,
    recovery: Recovery,
) -> Result<Vec<Option<ParallelConfig>>, SimError> {
    let steps = plan_steps(series);
    let horizon = horizon.max(1);
    let mut simulator = Simulator::with_recovery(profile, interval_ms, MigrationMode::Live, recovery)?;
    let mut cache = TransitionCache::default();
    let mut decisions = Vec::with_capacity(series.len());
    // The same terminal value as the default policy's planner.
    let terminal_ms = default_terminal_ms(interval_ms);
    for (k, stats) in series.iter().enumerate() {
        let window = &steps[k..(k + horizon).min(steps.len())];
        let options = PlanOptions {
            recovery,
            terminal_ms,
            at_risk: Some(simulator.at_risk()),
            parked: simulator.parked(),
            ..PlanOptions::default()
        };
        let planned = plan::best_plan_with(
            profile,
            simulator.current(),
            simulator.carried_ms(),
            window,
            interval_ms,
            options,
            &mut cache,
        )
        .map_err(|source| SimError::CostModel { interval: k, source })?;
        let config = planned.first().and_then(|p| p.config);
        simulator.step(*stats, config)?;
        decisions.push(config);
    }
    Ok(decisions)
}
