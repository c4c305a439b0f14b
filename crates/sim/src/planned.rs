//! Baselines that plan with the true future: the Oracle (one plan over the
//! whole trace) and liveput with the true future over a receding horizon.
//! Both use the dynamic-programming planner `parcae_policy_core::plan`.

use crate::MigrationMode;
use parcae_policy_core::plan::{self, PlanOptions, Step, TransitionCache};
use parcae_policy_core::robust::default_terminal_ms;
use parcae_policy_core::{IntervalStats, ModelProfile, ParallelConfig, Recovery};

use crate::cadence::Cadenced;
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
    best_whole_trace(profile, None, series, interval_ms, oracle_options(recovery))
}

/// [`oracle_under`] when each interval trains under its own profile of
/// `cadenced` (a checkpoint cadence that follows the losses seen so far): the
/// plan [`crate::simulate_cadenced`] scores highest. With one cadence
/// throughout, [`oracle_under`] on it.
pub fn oracle_cadenced(
    cadenced: &Cadenced,
    series: &[IntervalStats],
    interval_ms: u64,
    recovery: Recovery,
) -> Result<Vec<Option<ParallelConfig>>, SimError> {
    best_cadenced(cadenced, series, interval_ms, oracle_options(recovery))
}

/// [`oracle_cadenced`] that pauses only where no layout fits
/// ([`PlanOptions::pause_by_choice`] off): it knows every count but cannot
/// stop just before an unannounced loss. Where instances live an hour and
/// every loss rolls back, that stopping is about half of the Oracle's lead
/// over the default (the README's *Bounded lifetimes*), and no online policy
/// can do it. A reference, not a row every policy is held to: it scores at
/// most the Oracle.
pub fn oracle_without_pauses(
    cadenced: &Cadenced,
    series: &[IntervalStats],
    interval_ms: u64,
    recovery: Recovery,
) -> Result<Vec<Option<ParallelConfig>>, SimError> {
    let options = PlanOptions { pause_by_choice: false, ..oracle_options(recovery) };
    best_cadenced(cadenced, series, interval_ms, options)
}

/// The whole trace's best plan under `options`, each interval at its
/// profile of `cadenced`.
fn best_cadenced(
    cadenced: &Cadenced,
    series: &[IntervalStats],
    interval_ms: u64,
    options: PlanOptions,
) -> Result<Vec<Option<ParallelConfig>>, SimError> {
    let speeds = (!cadenced.is_constant()).then(|| cadenced.speeds(0, series.len()));
    best_whole_trace(cadenced.base(), speeds.as_deref(), series, interval_ms, options)
}

/// The whole trace's best plan under `options` from a cold start, at
/// `profile`'s speeds or at `speeds` (one profile per interval and one after).
fn best_whole_trace(
    profile: &ModelProfile,
    speeds: Option<&[&ModelProfile]>,
    series: &[IntervalStats],
    interval_ms: u64,
    options: PlanOptions,
) -> Result<Vec<Option<ParallelConfig>>, SimError> {
    if interval_ms == 0 {
        return Err(SimError::ZeroInterval);
    }
    let mut cache = TransitionCache::default();
    let steps = plan_steps(series);
    let planned = match speeds {
        None => plan::best_plan_with(profile, None, 0.0, &steps, interval_ms, options, &mut cache),
        Some(speeds) => {
            plan::best_plan_varying(profile, speeds, None, 0.0, &steps, interval_ms, options, &mut cache)
        }
    }
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
    let simulator = Simulator::with_recovery(profile, interval_ms, MigrationMode::Live, recovery)?;
    receding(
        simulator,
        series,
        horizon,
        |_| None,
        |window, _, current, carried, options, cache| {
            plan::best_plan_with(profile, current, carried, window, interval_ms, options, cache)
        },
    )
}

/// The receding-horizon loop of liveput with the true future: at each
/// interval `k`, `plan` the window of true steps from where `simulator` is
/// (`plan(window, k, current, carried, options, cache)`), apply the first
/// step under `profile_at(k)` (when it names one).
fn receding<'a>(
    mut simulator: Simulator<'a>,
    series: &[IntervalStats],
    horizon: usize,
    profile_at: impl Fn(usize) -> Option<&'a ModelProfile>,
    mut plan: impl FnMut(
        &[Step],
        usize,
        Option<ParallelConfig>,
        f64,
        PlanOptions,
        &mut TransitionCache,
    ) -> Result<Vec<plan::PlannedStep>, parcae_policy_core::liveput::LiveputError>,
) -> Result<Vec<Option<ParallelConfig>>, SimError> {
    let steps = plan_steps(series);
    let horizon = horizon.max(1);
    let mut cache = TransitionCache::default();
    let mut decisions = Vec::with_capacity(series.len());
    // The same terminal value as the default policy's planner.
    let terminal_ms = default_terminal_ms(simulator.interval_ms);
    let recovery = simulator.recovery();
    for (k, stats) in series.iter().enumerate() {
        let window = &steps[k..(k + horizon).min(steps.len())];
        let options = PlanOptions {
            recovery,
            terminal_ms,
            at_risk: Some(simulator.at_risk()),
            parked: simulator.parked(),
            ..PlanOptions::default()
        };
        let planned = plan(window, k, simulator.current(), simulator.carried_ms(), options, &mut cache)
            .map_err(|source| SimError::CostModel { interval: k, source })?;
        let config = planned.first().and_then(|p| p.config);
        if let Some(profile) = profile_at(k) {
            simulator.set_profile(profile);
        }
        simulator.step(*stats, config)?;
        decisions.push(config);
    }
    Ok(decisions)
}

/// [`liveput_truth_under`] when each interval trains under its own profile of
/// `cadenced`: each window is planned at the true future's profiles, from
/// where the simulator scoring it is. With one cadence throughout,
/// [`liveput_truth_under`] on it.
pub fn liveput_truth_cadenced(
    cadenced: &Cadenced,
    series: &[IntervalStats],
    interval_ms: u64,
    horizon: usize,
    recovery: Recovery,
) -> Result<Vec<Option<ParallelConfig>>, SimError> {
    if cadenced.is_constant() {
        return liveput_truth_under(cadenced.base(), series, interval_ms, horizon, recovery);
    }
    let mut simulator =
        Simulator::with_recovery(cadenced.base(), interval_ms, MigrationMode::Live, recovery)?;
    simulator.set_at_risk_ceiling(cadenced.risk_ceiling());
    let profile_at = |k| Some(cadenced.at(k));
    receding(simulator, series, horizon, profile_at, |window, k, current, carried, options, cache| {
        let speeds = cadenced.speeds(k, k + window.len());
        plan::best_plan_varying(
            cadenced.base(),
            &speeds,
            current,
            carried,
            window,
            interval_ms,
            options,
            cache,
        )
    })
}
