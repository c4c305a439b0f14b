//! Mixed fleets (spotDNN, IWQoS'23) in the simulator: one availability trace per instance
//! type, one job whose data-parallel replicas run on every type at once
//! ([`parcae_policy_core::mixed`]).
//!
//! # The model
//!
//! The traces are aligned from their starts and scored over the shortest. The job sees
//! the union fleet (instances, arrivals and preemptions summed over the types); what a
//! layout `(D, P)` trains in an interval depends on the interval's *composition*, the
//! instances of each type: the fastest split of its `D` replicas over the types that the
//! composition can hold ([`composition_profile`]). Transitions are priced with the first
//! type's costs, and a change of composition that keeps the layout is not charged (the
//! replicas keep their places).
//!
//! Each composition has two views ([`Compositions`]):
//!
//! - the **planning** view lists only the layouts the composition can run: what a policy
//!   or the reactive baseline chooses from;
//! - the **scoring** view lists every layout of the union (every layout some composition
//!   of the trace runs), at zero throughput where this one cannot run it, so the simulator
//!   and the planner price a transition from a layout the fleet can no longer hold.
//!
//! Work a restart rolls back is valued at the speed the old layout had when it trained it
//! (the previous interval's composition), in the simulator
//! ([`crate::Simulator::set_profile`]) and in the planner
//! ([`parcae_policy_core::plan::best_plan_varying`]) alike, so the Oracle is exact here
//! too: no decision sequence scores more than its plan.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use parcae_policy_core::at_risk;
use parcae_policy_core::mixed::{best_mixed, composition_profile};
use parcae_policy_core::plan::{self, PlanOptions, TransitionCache};
use parcae_policy_core::robust::default_terminal_ms;
use parcae_policy_core::{ConfigProfile, IntervalStats, ModelProfile, ParallelConfig, Recovery};

use crate::{
    CadenceRule, Cadenced, MigrationMode, Prices, SimError, SimResult, Simulator, plan_steps, summarize,
};

/// The fleet several per-type traces give one job.
#[derive(Debug, Clone, PartialEq)]
pub struct MixedFleet {
    /// Per interval, the instances of each type.
    pub counts: Vec<Vec<u32>>,
    /// The union fleet, arrivals and preemptions summed over the types.
    pub series: Vec<IntervalStats>,
}

impl MixedFleet {
    /// The fleet of `per_type[t]` instances of each type `t`, over the shortest series.
    pub fn new(per_type: &[&[IntervalStats]]) -> Self {
        let len = per_type.iter().map(|s| s.len()).min().unwrap_or(0);
        let counts = (0..len).map(|k| per_type.iter().map(|s| s[k].instances).collect()).collect();
        let series = (0..len)
            .map(|k| IntervalStats {
                instances: per_type.iter().map(|s| s[k].instances).sum(),
                arrivals: per_type.iter().map(|s| s[k].arrivals).sum(),
                preemptions: per_type.iter().map(|s| s[k].preemptions).sum(),
            })
            .collect();
        MixedFleet { counts, series }
    }

    /// Mean instances of each type.
    pub fn mean_instances(&self) -> Vec<f64> {
        let types = self.counts.first().map_or(0, Vec::len);
        let n = self.counts.len().max(1) as f64;
        (0..types).map(|t| self.counts.iter().map(|c| f64::from(c[t])).sum::<f64>() / n).collect()
    }

    /// Dollars of interval `k` of `interval_ms` at `prices[t]` per instance-hour of type `t`.
    pub fn usd_of_interval(&self, k: usize, interval_ms: u64, prices: &[f64]) -> f64 {
        let hours = interval_ms as f64 / 3_600_000.0;
        self.counts.get(k).map_or(0.0, |c| c.iter().zip(prices).map(|(&n, p)| f64::from(n) * p * hours).sum())
    }

    /// `result`'s money, each type at its own prices (`prices[t]` of type `t`): the
    /// simulator's one-price totals replaced.
    pub fn price(&self, result: &mut SimResult, interval_ms: u64, prices: &[Prices]) {
        let spot: Vec<f64> = prices.iter().map(|p| p.spot_usd_per_hour).collect();
        let on_demand: Vec<f64> = prices.iter().map(|p| p.on_demand_usd_per_hour).collect();
        let n = result.intervals.len().min(self.counts.len());
        let t = &mut result.totals;
        t.usd_spot = (0..n).map(|k| self.usd_of_interval(k, interval_ms, &spot)).sum();
        t.usd_on_demand = (0..n).map(|k| self.usd_of_interval(k, interval_ms, &on_demand)).sum();
        let per_million = |usd: f64| (t.samples > 0.0).then(|| usd / t.samples * 1e6);
        t.usd_per_million_samples_spot = per_million(t.usd_spot);
        t.usd_per_million_samples_on_demand = per_million(t.usd_on_demand);
    }
}

/// The types' profiles and what each composition trains, computed once per composition
/// (a trace revisits few); see the module documentation for the two views.
pub struct Compositions<'a> {
    profiles: Vec<&'a ModelProfile>,
    best: HashMap<Vec<u32>, f64>,
    /// Every composition prepared, whether or not it runs anything.
    prepared: BTreeSet<Vec<u32>>,
    planning: HashMap<Vec<u32>, ModelProfile>,
    scoring: HashMap<Vec<u32>, ModelProfile>,
    /// Every layout some prepared composition runs, at its best throughput.
    union: ModelProfile,
    /// The union at zero throughput: a composition that runs nothing.
    stopped: ModelProfile,
    /// What a composition that runs nothing plans with: the first type's profile, no layout.
    empty: ModelProfile,
}

impl<'a> Compositions<'a> {
    /// For types profiled by `profiles` (one model, one batch).
    pub fn new(profiles: Vec<&'a ModelProfile>) -> Self {
        let mut empty =
            profiles.first().map(|p| (*p).clone()).unwrap_or_else(|| ModelProfile::empty("", 1, 1));
        empty.configs.clear();
        Compositions {
            profiles,
            best: HashMap::new(),
            prepared: BTreeSet::new(),
            planning: HashMap::new(),
            scoring: HashMap::new(),
            union: empty.clone(),
            stopped: empty.clone(),
            empty,
        }
    }

    /// Samples per second of the fastest mixed layout on `counts` (0 when none runs).
    pub fn samples_per_second(&mut self, counts: &[u32]) -> f64 {
        if let Some(v) = self.best.get(counts) {
            return *v;
        }
        let v = best_mixed(&self.profiles, counts).map_or(0.0, |(_, step)| step.samples_per_second);
        self.best.insert(counts.to_vec(), v);
        v
    }

    /// Computes both views of every composition in `counts` (then [`Self::planning`],
    /// [`Self::scoring`], [`Self::union`]); the union covers every composition prepared so
    /// far, and the scoring views are rebuilt over it.
    pub fn prepare(&mut self, counts: &[Vec<u32>]) {
        for c in counts {
            if self.prepared.insert(c.clone())
                && let Some(p) = composition_profile(&self.profiles, c)
            {
                self.planning.insert(c.clone(), p);
            }
        }
        // The union: every layout of a planning view, at its best throughput, with the
        // costs of the first view that lists it (they follow the first type's profile).
        let mut layouts: BTreeMap<ParallelConfig, ConfigProfile> = BTreeMap::new();
        let mut keys: Vec<&Vec<u32>> = self.planning.keys().collect();
        keys.sort();
        for key in &keys {
            for entry in &self.planning[*key].configs {
                layouts
                    .entry(entry.config)
                    .and_modify(|e| {
                        if entry.samples_per_second > e.samples_per_second {
                            e.samples_per_second = entry.samples_per_second;
                            e.iteration_ms = entry.iteration_ms;
                        }
                    })
                    .or_insert_with(|| entry.clone());
            }
        }
        let mut union = self.empty.clone();
        union.configs = layouts.into_values().collect();
        for key in &keys {
            for partition in &self.planning[*key].partitions {
                if !union.partitions.iter().any(|p| p.pipeline_stages == partition.pipeline_stages) {
                    union.partitions.push(partition.clone());
                }
            }
        }
        self.scoring.clear();
        for key in &self.prepared {
            let view = self.planning.get(key);
            let mut scoring = union.clone();
            for entry in &mut scoring.configs {
                match view.and_then(|v| v.config(entry.config)) {
                    Some(runs) => {
                        entry.samples_per_second = runs.samples_per_second;
                        entry.iteration_ms = runs.iteration_ms;
                    }
                    None => {
                        entry.samples_per_second = 0.0;
                        entry.iteration_ms = 0.0;
                    }
                }
            }
            self.scoring.insert(key.clone(), scoring);
        }
        self.stopped = union.clone();
        for entry in &mut self.stopped.configs {
            entry.samples_per_second = 0.0;
            entry.iteration_ms = 0.0;
        }
        self.union = union;
    }

    /// The layouts a composition can run ([`Self::prepare`]d first; one that runs nothing
    /// lists no layout): what a policy plans with.
    pub fn planning(&self, counts: &[u32]) -> &ModelProfile {
        self.planning.get(counts).unwrap_or(&self.empty)
    }

    /// Every layout of the union at this composition's throughput, zero where it cannot
    /// run: what the simulator and the Oracle score with ([`Self::prepare`]d first; one
    /// that was not runs nothing).
    pub fn scoring(&self, counts: &[u32]) -> &ModelProfile {
        self.scoring.get(counts).unwrap_or(&self.stopped)
    }

    /// Every layout some prepared composition runs, at its best throughput; the costs
    /// every transition is priced with.
    pub fn union(&self) -> &ModelProfile {
        &self.union
    }
}

/// Each interval's two views of a mixed fleet with the deployment's checkpoint cadence
/// priced in: its composition's view ([`Compositions`]) at the cadence
/// [`CadenceRule`] gives that interval, computed from the union's costs as a
/// single-type fleet's ([`Cadenced`] of the union). Under
/// [`CadenceRule::SeenSoFar`] the cadence follows the losses seen so far, as `run`
/// keeps it, so an interval's view depends on its composition *and* on how many
/// losses came before it; a rollback takes back what the cadence of the interval
/// that trained the work left at risk, in the simulator and in the Oracle's plan alike.
#[derive(Debug, Clone)]
pub struct CadencedViews {
    /// The union's cadences, interval by interval.
    cadence: Cadenced,
    /// The distinct views (planning and scoring).
    views: Vec<ModelProfile>,
    /// Per interval, its planning view's entry of `views`.
    planning: Vec<usize>,
    /// Per interval, its scoring view's entry of `views`.
    scoring: Vec<usize>,
}

impl CadencedViews {
    /// The views of every interval of `fleet` (`compositions` [`Compositions::prepare`]d
    /// for it) under `rule`, for checkpoints written at `recovery`'s rate (snapshotted
    /// at `snapshot_bytes_per_ms` and written in the background; `None`: written
    /// synchronously).
    pub fn new(
        compositions: &Compositions<'_>,
        fleet: &MixedFleet,
        rule: CadenceRule,
        interval_ms: u64,
        recovery: &Recovery,
        snapshot_bytes_per_ms: Option<f64>,
    ) -> Self {
        let union = compositions.union();
        let cadence = Cadenced::new(rule, union, &fleet.series, interval_ms, recovery, snapshot_bytes_per_ms);
        let mut views = Vec::new();
        let mut known: HashMap<(bool, &[u32], u64), usize> = HashMap::new();
        let mut planning = Vec::with_capacity(fleet.counts.len());
        let mut scoring = Vec::with_capacity(fleet.counts.len());
        for (k, counts) in fleet.counts.iter().enumerate() {
            let at = cadence.at(k);
            for is_scoring in [false, true] {
                let key = (is_scoring, counts.as_slice(), at.checkpoint_interval_ms.to_bits());
                let index = *known.entry(key).or_insert_with(|| {
                    let view =
                        if is_scoring { compositions.scoring(counts) } else { compositions.planning(counts) };
                    views.push(at_cadence_of(view, union, at));
                    views.len() - 1
                });
                if is_scoring { scoring.push(index) } else { planning.push(index) }
            }
        }
        CadencedViews { cadence, views, planning, scoring }
    }

    /// What each interval's policy plans with: the layouts its composition runs.
    pub fn planning(&self) -> Vec<&ModelProfile> {
        self.planning.iter().map(|&i| &self.views[i]).collect()
    }

    /// What each interval is scored with: every layout of the union, at zero throughput
    /// where its composition cannot run it.
    pub fn scoring(&self) -> Vec<&ModelProfile> {
        self.scoring.iter().map(|&i| &self.views[i]).collect()
    }

    /// The union at the base cadence: what every transition is priced with and a
    /// rollback's ceiling is read off.
    pub fn union(&self) -> &ModelProfile {
        self.cadence.base()
    }

    /// The union's cadences, interval by interval (for a note).
    pub fn cadence(&self) -> &Cadenced {
        &self.cadence
    }
}

/// `view` (a view of `union`) at the cadence of `cadenced` (`union` at some cadence):
/// its rollback interval, and the share of throughput its checkpoints leave, which
/// every composition pays alike.
fn at_cadence_of(view: &ModelProfile, union: &ModelProfile, cadenced: &ModelProfile) -> ModelProfile {
    let keep = crate::cadence::throughput_kept(union, cadenced);
    crate::cadence::checkpointing(view, cadenced.checkpoint_interval_ms, keep)
}

/// The scoring view of each interval of `fleet` ([`Compositions::prepare`]d for it).
pub fn scoring_views<'c>(compositions: &'c Compositions<'_>, fleet: &MixedFleet) -> Vec<&'c ModelProfile> {
    fleet.counts.iter().map(|c| compositions.scoring(c)).collect()
}

/// The planner's throughput profiles for the intervals `from..to` of `views`, with the one
/// before first (see [`plan::best_plan_varying`]).
fn speeds<'c>(views: &[&'c ModelProfile], from: usize, to: usize) -> Vec<&'c ModelProfile> {
    let before = views[from.saturating_sub(1)];
    std::iter::once(before).chain(views[from..to].iter().copied()).collect()
}

/// The Oracle on a mixed fleet: the plan that maximises the expected samples of the whole
/// trace, each interval at its composition's throughput (`views`, one per interval), every
/// transition priced by `union`.
pub fn oracle(
    union: &ModelProfile,
    views: &[&ModelProfile],
    series: &[IntervalStats],
    interval_ms: u64,
    recovery: Recovery,
) -> Result<Vec<Option<ParallelConfig>>, SimError> {
    check_lengths(views, series)?;
    if interval_ms == 0 {
        return Err(SimError::ZeroInterval);
    }
    if series.is_empty() {
        return Ok(Vec::new());
    }
    let mut cache = TransitionCache::default();
    let options = crate::planned::oracle_options(recovery);
    let planned = plan::best_plan_varying(
        union,
        &speeds(views, 0, series.len()),
        None,
        0.0,
        &plan_steps(series),
        interval_ms,
        options,
        &mut cache,
    )
    .map_err(|source| SimError::CostModel { interval: 0, source })?;
    Ok(planned.iter().map(|p| p.config).collect())
}

/// Liveput with the true future on a mixed fleet, over a receding horizon of `horizon`
/// intervals (see [`crate::liveput_truth_under`]), each interval at its composition's
/// throughput.
pub fn liveput_truth(
    union: &ModelProfile,
    views: &[&ModelProfile],
    series: &[IntervalStats],
    interval_ms: u64,
    horizon: usize,
    recovery: Recovery,
) -> Result<Vec<Option<ParallelConfig>>, SimError> {
    check_lengths(views, series)?;
    let steps = plan_steps(series);
    let horizon = horizon.max(1);
    let Some(first) = views.first() else { return Ok(Vec::new()) };
    let mut simulator = Simulator::with_recovery(first, interval_ms, MigrationMode::Live, recovery)?;
    simulator.set_at_risk_ceiling(fleet_at_risk_ceiling(union, views));
    let mut cache = TransitionCache::default();
    let mut decisions = Vec::with_capacity(series.len());
    let terminal_ms = default_terminal_ms(interval_ms);
    for (k, stats) in series.iter().enumerate() {
        let end = (k + horizon).min(steps.len());
        let options = PlanOptions {
            recovery,
            terminal_ms,
            at_risk: Some(simulator.at_risk()),
            parked: simulator.parked(),
            ..PlanOptions::default()
        };
        let planned = plan::best_plan_varying(
            union,
            &speeds(views, k, end),
            simulator.current(),
            simulator.carried_ms(),
            &steps[k..end],
            interval_ms,
            options,
            &mut cache,
        )
        .map_err(|source| SimError::CostModel { interval: k, source })?;
        let config = planned.first().and_then(|p| p.config);
        simulator.set_profile(views[k]);
        simulator.step(*stats, config)?;
        decisions.push(config);
    }
    Ok(decisions)
}

/// The Ideal bound on a mixed fleet: each interval the fastest layout its composition
/// runs (`planning[k]`, the planning views), with no overhead.
pub fn ideal(
    planning: &[&ModelProfile],
    series: &[IntervalStats],
    interval_ms: u64,
) -> Result<SimResult, SimError> {
    check_lengths(planning, series)?;
    let unpriced = Prices { spot_usd_per_hour: 0.0, on_demand_usd_per_hour: 0.0 };
    crate::baselines::ideal_by(|k| planning[k], series, interval_ms, unpriced)
}

/// The reactive baseline on a mixed fleet: each interval the fastest layout its
/// composition runs (`planning[k]`).
pub fn reactive(planning: &[&ModelProfile], series: &[IntervalStats]) -> Vec<Option<ParallelConfig>> {
    series
        .iter()
        .zip(planning)
        .map(|(s, p)| parcae_policy_core::reactive::best_config_for(p, s.instances).map(|c| c.config))
        .collect()
}

/// [`crate::simulate_under`] on a mixed fleet: interval `k` scored with `views[k]` (the
/// scoring views, so a layout the fleet can no longer hold is still priced), a
/// rollback capped where the Oracle's plan over `union` caps it.
pub fn simulate(
    union: &ModelProfile,
    views: &[&ModelProfile],
    series: &[IntervalStats],
    interval_ms: u64,
    decisions: &[Option<ParallelConfig>],
    mode: MigrationMode,
    recovery: Recovery,
) -> Result<SimResult, SimError> {
    if decisions.len() != series.len() {
        return Err(SimError::Length { decisions: decisions.len(), intervals: series.len() });
    }
    check_lengths(views, series)?;
    let unpriced = Prices { spot_usd_per_hour: 0.0, on_demand_usd_per_hour: 0.0 };
    let Some(first) = views.first() else {
        return Ok(summarize(Vec::new(), interval_ms, unpriced));
    };
    let mut simulator = Simulator::with_recovery(first, interval_ms, mode, recovery)?;
    simulator.set_at_risk_ceiling(fleet_at_risk_ceiling(union, views));
    let mut records = Vec::with_capacity(series.len());
    for ((stats, &to), profile) in series.iter().zip(decisions).zip(views) {
        simulator.set_profile(profile);
        records.push(simulator.step(*stats, to)?);
    }
    Ok(summarize(records, interval_ms, unpriced))
}

/// The most a rollback can take back in a mixed fleet: `union`'s rollback at the
/// fastest speed of any interval's view ([`at_risk::ceiling_at`]), where the planner
/// over `union` and these views caps it, so the simulator caps the work at risk where
/// the fleet's Oracle plans with it (the union's cadence is the longest any view has).
fn fleet_at_risk_ceiling(union: &ModelProfile, views: &[&ModelProfile]) -> f64 {
    let fastest = views
        .iter()
        .flat_map(|v| v.configs.iter().map(|c| c.samples_per_second))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    at_risk::ceiling_at(union, fastest)
}

fn check_lengths(views: &[&ModelProfile], series: &[IntervalStats]) -> Result<(), SimError> {
    if views.len() != series.len() {
        return Err(SimError::Profiles { profiles: views.len(), intervals: series.len() });
    }
    Ok(())
}
