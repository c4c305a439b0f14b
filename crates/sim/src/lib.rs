//! Scores a sequence of parallel-layout decisions on an availability trace
//! under the liveput cost model (`parcae_policy_core::liveput`).
//!
//! A decision sequence has one entry per interval of a per-interval series
//! (`Some(layout)` runs it, `None` pauses). Interval `k` is scored as the
//! transition from the layout of interval `k - 1` (none for `k = 0`: a cold
//! start), running on the `series[k - 1].instances` alive before the interval
//! (0 for `k = 0`), through the interval's preemptions and arrivals
//! (`series[k]`), to `decisions[k]`, with the migration time left over from
//! interval `k - 1` still to run. [`liveput::liveput`] gives the exact expected
//! samples and leftover over which instances are preempted; nothing is sampled,
//! so a result is deterministic bit for bit. Samples are net: a restart from
//! checkpoint rolls back the work since the last checkpoint, so an interval
//! (and a whole run) can come out negative; no more than was trained since
//! the last rollback ([`Simulator::at_risk`], `parcae_policy_core::at_risk`).
//! A pause protects the state once its write lands: until then a loss of the
//! holders of the layout it paused from rolls back too
//! (`parcae_policy_core::recovery`, "A pause's write").
//!
//! [`simulate_with`] scores the same sequence under another
//! [`MigrationMode`]: [`MigrationMode::RestartOnChange`] is the Parcae
//! artifact's checkpoint-restart baseline (restart on every availability change,
//! deterministic).
//!
//! Reference decision makers: [`ideal`] (an upper bound, not a sequence),
//! [`reactive`], [`artifact`] (the Parcae artifact's recorded decisions),
//! [`oracle`] and [`liveput_truth`] (the DP planner `parcae_policy_core::plan`
//! with the true future, over the whole trace or a receding horizon).
//!
//! Money: every alive instance is paid for the whole interval, whether the
//! layout uses it or not, so a trace's instance-hours (and dollars) are the
//! same for every decision sequence; what differs is the samples they buy.
//!
//! ```
//! use parcae_policy_core::{ConfigProfile, IntervalStats, ModelProfile, ParallelConfig};
//! use parcae_sim::{Prices, simulate};
//! # let profile = ModelProfile {
//! #     model: "toy".into(), global_batch_size: 8, micro_batch_size: 1,
//! #     configs: vec![ConfigProfile { config: ParallelConfig::new(1, 1), samples_per_second: 10.0,
//! #         iteration_ms: 800.0, comm_rebuild_add_ms: 0.0, comm_rebuild_remove_ms: 0.0, model_build_ms: 0.0 }],
//! #     partitions: vec![parcae_policy_core::StagePartition { pipeline_stages: 1,
//! #         layers_per_stage: vec![1], state_bytes_per_stage: vec![0] }],
//! #     transfer_curve: vec![], rendezvous_ms: 0.0, process_start_ms: 0.0, add_extra_ms: 0.0,
//! #     checkpoint_restart_ms: 0.0, checkpoint_interval_ms: 0.0 };
//! let series = [IntervalStats { instances: 1, arrivals: 1, preemptions: 0 }; 1];
//! let prices = Prices { spot_usd_per_hour: 1.0, on_demand_usd_per_hour: 3.0 };
//! let result = simulate(&profile, &series, 60_000, &[Some(ParallelConfig::new(1, 1))], prices)?;
//! assert_eq!(result.totals.samples, 600.0);
//! # Ok::<(), parcae_sim::SimError>(())
//! ```

mod baselines;
pub mod cadence;
pub mod mixed;
mod native;
pub mod peers;
mod planned;

pub use baselines::{
    ArtifactIssue, ArtifactReplay, ArtifactStrategy, IssueReason, artifact, ideal, ideal_samples, reactive,
};
pub use cadence::{CadenceRule, Cadenced};
pub use native::{drive_native, drive_native_profiles};
pub use parcae_policy_core::liveput::MigrationMode;
pub use peers::{Peer, PeerConstants, PeerError, PeerRun, PeerSettings};
pub use planned::{
    liveput_truth, liveput_truth_cadenced, liveput_truth_under, oracle, oracle_cadenced, oracle_options,
    oracle_under, oracle_without_pauses, plan_steps,
};

use parcae_policy_core::at_risk;
use parcae_policy_core::liveput::{self, LiveputError, MigrationKind};
use parcae_policy_core::plan::ParkedPause;
use parcae_policy_core::recovery::{exposed_fleet, pause_exposed_boundaries};
use parcae_policy_core::{IntervalStats, ModelProfile, ParallelConfig, Recovery};
use serde::Serialize;

/// Milliseconds in an hour.
const HOUR_MS: f64 = 3_600_000.0;

/// What one instance costs per hour.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Prices {
    /// Spot (preemptible) price, USD per instance-hour.
    pub spot_usd_per_hour: f64,
    /// On-demand price, USD per instance-hour.
    pub on_demand_usd_per_hour: f64,
}

/// A probability (or an expected count) per migration kind.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct KindProbabilities {
    /// Nothing to do: same layout, no stage lost a replica (or a pause).
    pub none: f64,
    /// Every stage keeps enough replicas: regroup, rebuild communicators.
    pub intra_stage: f64,
    /// A stage kept too few replicas (but one): its state is copied.
    pub inter_stage: f64,
    /// The pipeline depth changes: layers move to new stage boundaries.
    pub repartition: f64,
    /// A stage lost every replica, or a cold start: reload the checkpoint.
    pub restart: f64,
}

impl KindProbabilities {
    /// From [`liveput::Expected::p_by_kind`] (indexed by [`MigrationKind::index`]).
    pub fn from_array(p: [f64; 5]) -> Self {
        Self {
            none: p[MigrationKind::None.index()],
            intra_stage: p[MigrationKind::IntraStage.index()],
            inter_stage: p[MigrationKind::InterStage.index()],
            repartition: p[MigrationKind::Repartition.index()],
            restart: p[MigrationKind::Restart.index()],
        }
    }

    /// The entry of one kind.
    pub fn get(&self, kind: MigrationKind) -> f64 {
        match kind {
            MigrationKind::None => self.none,
            MigrationKind::IntraStage => self.intra_stage,
            MigrationKind::InterStage => self.inter_stage,
            MigrationKind::Repartition => self.repartition,
            MigrationKind::Restart => self.restart,
        }
    }

    /// Sum over the kinds that move something (everything but `none`).
    pub fn migrations(&self) -> f64 {
        self.intra_stage + self.inter_stage + self.repartition + self.restart
    }

    fn accumulate(&mut self, other: &KindProbabilities) {
        self.none += other.none;
        self.intra_stage += other.intra_stage;
        self.inter_stage += other.inter_stage;
        self.repartition += other.repartition;
        self.restart += other.restart;
    }
}

/// How one interval went, in expectation over which instances were preempted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntervalRecord {
    /// Interval number `k`.
    pub interval: usize,
    /// Instances alive during the interval (after the events at its start).
    pub instances: u32,
    /// Instances that joined at the interval's start.
    pub arrivals: u32,
    /// Instances preempted at the interval's start.
    pub preemptions: u32,
    /// Layout run in the interval; `None`: paused.
    pub config: Option<ParallelConfig>,
    /// Expected net samples of the interval: trained, minus the samples a
    /// restart rolled back ([`IntervalRecord::lost_samples`]); can be negative.
    pub samples: f64,
    /// Expected samples lost by a restart from checkpoint (the work since the
    /// last checkpoint, at the old layout's speed), already taken off `samples`;
    /// with what a pause's holders lose before its write lands.
    pub lost_samples: f64,
    /// Expected time of the interval spent migrating, ms: the carried-in
    /// remainder and this interval's reconfiguration, capped at the interval
    /// (`carried_in + transition - leftover`).
    pub migration_ms: f64,
    /// Expected duration of this interval's own reconfiguration, ms (not
    /// capped; what does not fit is carried).
    pub transition_ms: f64,
    /// Migration time carried in from the previous interval, ms.
    pub carried_in_ms: f64,
    /// Expected migration time carried into the next interval, ms.
    pub leftover_ms: f64,
    /// Probability of each kind of reconfiguration at the start of the interval.
    pub kinds: KindProbabilities,
    /// Expected duration of this interval's reconfiguration by kind, ms (not capped), indexed
    /// by [`MigrationKind::index`]: sums to `transition_ms`.
    pub transition_ms_by_kind: [f64; 5],
    /// Probability of a restart from checkpoint (cold starts included).
    pub p_restart: f64,
    /// Probability that the work since the last checkpoint was lost (by the
    /// transition, or by the holders of a pause whose write had not landed).
    pub p_lost_work: f64,
}

/// Expected number of reconfigurations of each kind over a run.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct MigrationCounts {
    /// Regroupings within stages (no state copied).
    pub intra_stage: f64,
    /// Migrations that copy a stage's state to new replicas.
    pub inter_stage: f64,
    /// Changes of pipeline depth.
    pub repartition: f64,
    /// Restarts from checkpoint, cold starts (first start, resume after a
    /// pause) included; see [`Totals::cold_starts`].
    pub restart: f64,
    /// Sum of the four.
    pub total: f64,
}

/// Figures of a whole run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Totals {
    /// Intervals scored.
    pub intervals: usize,
    /// Length of the trace, hours.
    pub hours: f64,
    /// Expected net samples trained (restarts' rolled-back work taken off).
    pub samples: f64,
    /// Expected samples rolled back by restarts from checkpoint.
    pub lost_samples: f64,
    /// Samples per trace hour.
    pub samples_per_hour: f64,
    /// Expected time spent migrating instead of training, hours (see
    /// [`IntervalRecord::migration_ms`]).
    pub migration_hours: f64,
    /// Expected reconfigurations by kind (sum of the per-interval probabilities).
    pub migrations: MigrationCounts,
    /// Starts from nothing: intervals that run a layout after none ran.
    pub cold_starts: usize,
    /// Intervals whose layout differs from the previous interval's.
    pub config_changes: usize,
    /// Intervals paused.
    pub paused_intervals: usize,
    /// Instance-hours paid (every alive instance, for the whole interval).
    pub instance_hours: f64,
    /// Cost at the spot price, USD.
    pub usd_spot: f64,
    /// Cost at the on-demand price, USD.
    pub usd_on_demand: f64,
    /// USD per million samples at the spot price (`None` when nothing was trained).
    pub usd_per_million_samples_spot: Option<f64>,
    /// USD per million samples at the on-demand price.
    pub usd_per_million_samples_on_demand: Option<f64>,
}

/// A scored run: one record per interval and the totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimResult {
    /// One record per interval of the series, in order.
    pub intervals: Vec<IntervalRecord>,
    /// The run's figures, summed over `intervals`.
    pub totals: Totals,
}

impl SimResult {
    /// Cumulative expected samples at the end of each interval.
    pub fn cumulative_samples(&self) -> Vec<f64> {
        let mut sum = 0.0;
        self.intervals
            .iter()
            .map(|r| {
                sum += r.samples;
                sum
            })
            .collect()
    }

    /// The layouts run, one per interval.
    pub fn decisions(&self) -> Vec<Option<ParallelConfig>> {
        self.intervals.iter().map(|r| r.config).collect()
    }
}

/// Why a decision sequence could not be scored.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// The interval length is zero.
    #[error("the interval length must be at least 1 ms")]
    ZeroInterval,
    /// Not one decision per interval.
    #[error("{decisions} decisions for a series of {intervals} intervals")]
    Length {
        /// Decisions given.
        decisions: usize,
        /// Intervals in the series.
        intervals: usize,
    },
    /// Not one profile per interval ([`mixed::simulate`]).
    #[error("{profiles} profiles for a series of {intervals} intervals")]
    Profiles {
        /// Profiles given.
        profiles: usize,
        /// Intervals in the series.
        intervals: usize,
    },
    /// A layout that needs more instances than are alive.
    #[error("interval {interval}: layout {config} needs {} instances, only {instances} are alive", config.instances())]
    DoesNotFit {
        /// Interval of the series.
        interval: usize,
        /// The layout decided.
        config: ParallelConfig,
        /// Instances alive in that interval.
        instances: u32,
    },
    /// A layout the profile does not have.
    #[error("interval {interval}: layout {config} is not in the profile")]
    NotProfiled {
        /// Interval of the series.
        interval: usize,
        /// The layout decided.
        config: ParallelConfig,
    },
    /// The series breaks `instances = previous + arrivals - preemptions`.
    #[error(
        "interval {interval}: inconsistent series: {instances_before} alive before, +{arrivals} -{preemptions}, but {instances} after"
    )]
    InconsistentSeries {
        /// Interval of the series.
        interval: usize,
        /// Instances of the interval before.
        instances_before: u32,
        /// Arrivals the interval records.
        arrivals: u32,
        /// Preemptions the interval records.
        preemptions: u32,
        /// Instances the interval records, which the others contradict.
        instances: u32,
    },
    /// The cost model refused the transition.
    #[error("interval {interval}: cost model: {source}")]
    CostModel {
        /// Interval of the series.
        interval: usize,
        /// The cost model's reason.
        #[source]
        source: LiveputError,
    },
}

/// Scores decisions one interval at a time, carrying the running layout and
/// the unfinished migration time: what [`simulate`] does in a loop, exposed so a
/// baseline that decides as it goes (receding horizon) sees the true state.
#[derive(Debug, Clone)]
pub struct Simulator<'a> {
    profile: &'a ModelProfile,
    /// The profile the running layout trained under (the last interval's).
    trained_under: &'a ModelProfile,
    interval_ms: u64,
    next: usize,
    instances_before: u32,
    current: Option<ParallelConfig>,
    carried_ms: f64,
    mode: MigrationMode,
    recovery: Recovery,
    /// Expected samples trained since the job last rolled back: the most a
    /// rollback can take back ([`at_risk`]).
    at_risk: f64,
    /// The most that can be at risk ([`at_risk::ceiling`] of the profile).
    at_risk_ceiling: f64,
    /// The pause whose write has not landed yet, if the job is in one.
    parked: Option<Parked<'a>>,
}

/// A pause whose write has not landed: the state is still only in the memory of
/// the layout it paused from (`parcae_policy_core::recovery`, "A pause's write").
#[derive(Debug, Clone, Copy)]
struct Parked<'a> {
    /// The layout it paused from and the boundaries still exposed.
    pause: ParkedPause,
    /// The profile its work was trained under (what a rollback takes back).
    trained_under: &'a ModelProfile,
}

impl<'a> Simulator<'a> {
    /// A simulator at interval 0: nothing running, no instances; live
    /// migrations ([`MigrationMode::Live`]).
    pub fn new(profile: &'a ModelProfile, interval_ms: u64) -> Result<Self, SimError> {
        Self::with_mode(profile, interval_ms, MigrationMode::Live)
    }

    /// A simulator at interval 0 that reconfigures as `mode` says, under
    /// unannounced preemptions ([`Recovery::UNANNOUNCED`]).
    pub fn with_mode(
        profile: &'a ModelProfile,
        interval_ms: u64,
        mode: MigrationMode,
    ) -> Result<Self, SimError> {
        Self::with_recovery(profile, interval_ms, mode, Recovery::UNANNOUNCED)
    }

    /// A simulator at interval 0 that reconfigures as `mode` says and
    /// recovers stages that lose every replica as `recovery` allows (the
    /// deployment's preemption notice; `parcae_policy_core::recovery`).
    pub fn with_recovery(
        profile: &'a ModelProfile,
        interval_ms: u64,
        mode: MigrationMode,
        recovery: Recovery,
    ) -> Result<Self, SimError> {
        if interval_ms == 0 {
            return Err(SimError::ZeroInterval);
        }
        Ok(Self {
            profile,
            trained_under: profile,
            interval_ms,
            next: 0,
            instances_before: 0,
            current: None,
            carried_ms: 0.0,
            mode,
            recovery,
            at_risk: 0.0,
            at_risk_ceiling: at_risk::ceiling(profile),
            parked: None,
        })
    }

    /// Caps the work at risk at `ceiling` samples instead of the first
    /// profile's [`at_risk::ceiling`]: a mixed fleet's, over every
    /// composition, as its Oracle plans with.
    pub fn set_at_risk_ceiling(&mut self, ceiling: f64) {
        self.at_risk_ceiling = ceiling;
    }

    /// Scores the next intervals with `profile`: a mixed fleet whose composition changed
    /// trains each layout at another speed ([`mixed`]'s scoring views). Work a restart
    /// rolls back is valued at the speed the old layout had when it trained it (the
    /// profile of the interval before); `profile` must list that layout too.
    pub fn set_profile(&mut self, profile: &'a ModelProfile) {
        self.profile = profile;
    }

    /// The recovery rules this simulator scores under.
    pub fn recovery(&self) -> Recovery {
        self.recovery
    }

    /// How this simulator reconfigures.
    pub fn mode(&self) -> MigrationMode {
        self.mode
    }

    /// The interval the next [`Simulator::step`] scores.
    pub fn next_interval(&self) -> usize {
        self.next
    }

    /// Layout of the last interval scored (`None` before the first or after a pause).
    pub fn current(&self) -> Option<ParallelConfig> {
        self.current
    }

    /// Instances alive in the last interval scored (0 before the first).
    pub fn instances_before(&self) -> u32 {
        self.instances_before
    }

    /// Expected migration time carried into the next interval, ms.
    pub fn carried_ms(&self) -> f64 {
        self.carried_ms
    }

    /// The pause whose write has not landed, if the job is in one: the layout
    /// it paused from and the exposed boundaries left (for a planner that
    /// starts where the simulator is, [`PlanOptions::parked`](parcae_policy_core::plan::PlanOptions::parked)).
    pub fn parked(&self) -> Option<ParkedPause> {
        self.parked.map(|p| p.pause)
    }

    /// Expected samples at risk of a rollback in the next interval
    /// ([`at_risk`]): 0 before the first.
    pub fn at_risk(&self) -> f64 {
        self.at_risk
    }

    /// Scores the next interval, whose availability is `stats`, running `to`.
    /// On error the simulator is unchanged.
    pub fn step(
        &mut self,
        stats: IntervalStats,
        to: Option<ParallelConfig>,
    ) -> Result<IntervalRecord, SimError> {
        self.step_given(stats, to, None)
    }

    /// [`Simulator::step`] with the victims known instead of drawn: `survivors` gives the
    /// live replicas of each stage of the running layout after the interval's
    /// preemptions and the spares left, as a real run had them (`parcae-host run`'s
    /// prediction of itself). Live migration only; other modes score the expectation.
    pub fn step_realized(
        &mut self,
        stats: IntervalStats,
        to: Option<ParallelConfig>,
        survivors: &liveput::Placement,
    ) -> Result<IntervalRecord, SimError> {
        self.step_given(stats, to, Some(survivors))
    }

    fn step_given(
        &mut self,
        stats: IntervalStats,
        to: Option<ParallelConfig>,
        survivors: Option<&liveput::Placement>,
    ) -> Result<IntervalRecord, SimError> {
        let interval = self.next;
        let before = self.instances_before;
        let consistent = stats.preemptions <= before
            && u64::from(before - stats.preemptions) + u64::from(stats.arrivals)
                == u64::from(stats.instances);
        if !consistent {
            return Err(SimError::InconsistentSeries {
                interval,
                instances_before: before,
                arrivals: stats.arrivals,
                preemptions: stats.preemptions,
                instances: stats.instances,
            });
        }
        if let Some(config) = to {
            if config.instances() > u64::from(stats.instances) {
                return Err(SimError::DoesNotFit { interval, config, instances: stats.instances });
            }
            if self.profile.config(config).is_none() {
                return Err(SimError::NotProfiled { interval, config });
            }
        }
        let cost = |source| SimError::CostModel { interval, source };
        let interval_ms = self.interval_ms as f64;
        let transition = (self.current, before, stats.preemptions, stats.arrivals, to);
        let (from, before, preempted, arrived, to) = transition;
        let realized = survivors.filter(|_| self.mode == MigrationMode::Live && from.is_some());
        let dist = match realized {
            Some(placement) => liveput::TransitionDistribution::certain(
                liveput::scenario_cost_under(
                    self.profile,
                    &self.recovery,
                    from,
                    &placement.survivors_per_stage,
                    placement.spare_survivors,
                    arrived,
                    to,
                )
                .map_err(cost)?,
            ),
            None => liveput::transition_distribution_in(
                self.mode,
                self.profile,
                &self.recovery,
                from,
                before,
                preempted,
                arrived,
                to,
            )
            .map_err(cost)?,
        };
        let expected = dist.expected();
        // What the cost model charges a rollback (the steady-state share, at this
        // interval's profile) and what it takes back: the work trained under the
        // interval before's profile (a mixed fleet's composition may have changed
        // the old layout's speed since), and no more than is at risk.
        let charged = liveput::lost_samples(self.profile, from, &dist).map_err(cost)? * expected.p_lost_work;
        let per_rollback = liveput::lost_samples(self.trained_under, from, &dist).map_err(cost)?;
        let lost = at_risk::rolled_back(per_rollback, self.at_risk) * expected.p_lost_work;
        let mut value = match realized {
            Some(_) => liveput::liveput_over(self.profile, from, to, &dist, interval_ms, self.carried_ms),
            None => liveput::liveput_with_mode(
                self.mode,
                self.profile,
                &self.recovery,
                from,
                before,
                preempted,
                arrived,
                to,
                interval_ms,
                self.carried_ms,
            ),
        }
        .map_err(cost)?;
        // Samples are linear in the work rolled back.
        value.expected_samples += charged - lost;
        let gross = value.expected_samples + lost;
        let mut p_reset = dist.p_lost_work();
        let mut lost = lost;
        if let Some(parked) = self.parked {
            let (parked_lost, parked_reset) = self.exposure(parked, &stats).map_err(cost)?;
            value.expected_samples -= parked_lost;
            lost += parked_lost;
            p_reset += parked_reset;
        }
        let at_risk = at_risk::at_risk_after(self.at_risk, p_reset, gross, self.at_risk_ceiling);
        // The busy time each outcome gives the interval, by the mode's carry
        // rule; E[min(b, T)] = E[b] - E[max(b - T, 0)].
        let busy: f64 = dist
            .outcomes
            .iter()
            .map(|o| {
                o.probability
                    * match self.mode {
                        MigrationMode::Live => o.busy_ms(self.carried_ms),
                        MigrationMode::RestartOnChange => liveput::restart_busy_ms(o, self.carried_ms),
                    }
            })
            .sum();
        let migration_ms = (busy - value.expected_leftover_ms).clamp(0.0, interval_ms);
        let record = IntervalRecord {
            interval,
            instances: stats.instances,
            arrivals: stats.arrivals,
            preemptions: stats.preemptions,
            config: to,
            samples: value.expected_samples,
            lost_samples: lost,
            migration_ms,
            transition_ms: expected.mean_duration_ms,
            carried_in_ms: self.carried_ms,
            leftover_ms: value.expected_leftover_ms,
            kinds: KindProbabilities::from_array(expected.p_by_kind),
            transition_ms_by_kind: expected.ms_by_kind,
            p_restart: expected.p_restart,
            p_lost_work: p_reset,
        };
        self.at_risk = at_risk;
        self.parked = match (from, to) {
            (Some(layout), None) => {
                let boundaries_left =
                    pause_exposed_boundaries(self.profile, &self.recovery, layout, interval_ms);
                (boundaries_left > 0).then_some(Parked {
                    pause: ParkedPause { layout, boundaries_left },
                    trained_under: self.trained_under,
                })
            }
            (None, None) => self.parked.filter(|p| p.pause.boundaries_left > 1).map(|mut p| {
                p.pause.boundaries_left -= 1;
                p
            }),
            (_, Some(_)) => None,
        };
        Ok(self.advance(record))
    }

    /// What the holders of a parked pause roll back at this interval's
    /// boundary, `(expected samples, probability)`: the pause from their layout
    /// under the interval's preemptions, drawn over `exposed_fleet` (as the
    /// planner draws them), each rollback taking back at most what is at risk.
    fn exposure(&self, parked: Parked<'_>, stats: &IntervalStats) -> Result<(f64, f64), LiveputError> {
        let layout = parked.pause.layout;
        let dist = liveput::transition_distribution_under(
            self.profile,
            &self.recovery,
            Some(layout),
            exposed_fleet(self.instances_before, layout),
            stats.preemptions,
            stats.arrivals,
            None,
        )?;
        let p_reset = dist.p_lost_work();
        let per_rollback = liveput::lost_samples(parked.trained_under, Some(layout), &dist)?;
        Ok((at_risk::rolled_back(per_rollback, self.at_risk) * p_reset, p_reset))
    }

    /// Moves the simulator past the interval `record` describes (both cost
    /// models end an interval the same way).
    fn advance(&mut self, record: IntervalRecord) -> IntervalRecord {
        self.next += 1;
        self.trained_under = self.profile;
        self.instances_before = record.instances;
        self.current = record.config;
        self.carried_ms = record.leftover_ms;
        record
    }
}

/// Scores `decisions` (one per interval of `series`) under the cost model of
/// `profile`; see the crate documentation for the rules.
pub fn simulate(
    profile: &ModelProfile,
    series: &[IntervalStats],
    interval_ms: u64,
    decisions: &[Option<ParallelConfig>],
    prices: Prices,
) -> Result<SimResult, SimError> {
    simulate_with(profile, series, interval_ms, decisions, prices, MigrationMode::Live)
}

/// [`simulate`] with the reconfigurations done as `mode` says:
/// [`MigrationMode::Live`] is [`simulate`];
/// [`MigrationMode::RestartOnChange`] restarts from a checkpoint on every
/// availability change, as the Parcae artifact's reactive baseline
/// ([`liveput::restart_transition`], [`liveput::restart_liveput`]).
pub fn simulate_with(
    profile: &ModelProfile,
    series: &[IntervalStats],
    interval_ms: u64,
    decisions: &[Option<ParallelConfig>],
    prices: Prices,
    mode: MigrationMode,
) -> Result<SimResult, SimError> {
    simulate_under(profile, series, interval_ms, decisions, prices, mode, Recovery::UNANNOUNCED)
}

/// [`simulate_with`] under the recovery rules of `recovery` (the
/// deployment's preemption notice): every mode applies the same rules to a
/// stage that loses all its replicas.
pub fn simulate_under(
    profile: &ModelProfile,
    series: &[IntervalStats],
    interval_ms: u64,
    decisions: &[Option<ParallelConfig>],
    prices: Prices,
    mode: MigrationMode,
    recovery: Recovery,
) -> Result<SimResult, SimError> {
    let simulator = Simulator::with_recovery(profile, interval_ms, mode, recovery)?;
    run_simulator(simulator, series, decisions, prices, |_| None)
}

/// Steps `simulator` through `series` running `decisions` (one per interval),
/// each interval `k` under `profile_at(k)` when that names one.
fn run_simulator<'a>(
    mut simulator: Simulator<'a>,
    series: &[IntervalStats],
    decisions: &[Option<ParallelConfig>],
    prices: Prices,
    profile_at: impl Fn(usize) -> Option<&'a ModelProfile>,
) -> Result<SimResult, SimError> {
    if decisions.len() != series.len() {
        return Err(SimError::Length { decisions: decisions.len(), intervals: series.len() });
    }
    let mut records = Vec::with_capacity(series.len());
    for (k, (stats, &to)) in series.iter().zip(decisions).enumerate() {
        if let Some(profile) = profile_at(k) {
            simulator.set_profile(profile);
        }
        records.push(simulator.step(*stats, to)?);
    }
    Ok(summarize(records, simulator.interval_ms, prices))
}

/// [`simulate_under`] with each interval trained under its own profile of
/// `cadenced` (a checkpoint cadence that follows the losses seen so far), a
/// rollback taking back what the cadence of the interval that trained it left
/// at risk, as [`oracle_cadenced`] plans. With one cadence throughout, the
/// same as [`simulate_under`] on it.
pub fn simulate_cadenced(
    cadenced: &Cadenced,
    series: &[IntervalStats],
    interval_ms: u64,
    decisions: &[Option<ParallelConfig>],
    prices: Prices,
    mode: MigrationMode,
    recovery: Recovery,
) -> Result<SimResult, SimError> {
    if cadenced.is_constant() {
        return simulate_under(cadenced.base(), series, interval_ms, decisions, prices, mode, recovery);
    }
    let mut simulator = Simulator::with_recovery(cadenced.base(), interval_ms, mode, recovery)?;
    simulator.set_at_risk_ceiling(cadenced.risk_ceiling());
    run_simulator(simulator, series, decisions, prices, |k| Some(cadenced.at(k)))
}

/// Totals of per-interval records (in their order, so the sums are reproducible).
pub fn summarize(records: Vec<IntervalRecord>, interval_ms: u64, prices: Prices) -> SimResult {
    let interval_h = interval_ms as f64 / HOUR_MS;
    let mut samples = 0.0;
    let mut lost_samples = 0.0;
    let mut migration_ms = 0.0;
    let mut instance_intervals: u64 = 0;
    let mut kinds = KindProbabilities::default();
    let mut cold_starts = 0;
    let mut config_changes = 0;
    let mut paused_intervals = 0;
    let mut previous: Option<Option<ParallelConfig>> = None;
    for r in &records {
        samples += r.samples;
        lost_samples += r.lost_samples;
        migration_ms += r.migration_ms;
        instance_intervals += u64::from(r.instances);
        kinds.accumulate(&r.kinds);
        let before = previous.flatten();
        if r.config.is_some() && before.is_none() {
            cold_starts += 1;
        }
        if previous.is_some_and(|p| p != r.config) {
            config_changes += 1;
        }
        if r.config.is_none() {
            paused_intervals += 1;
        }
        previous = Some(r.config);
    }
    let hours = records.len() as f64 * interval_h;
    let instance_hours = instance_intervals as f64 * interval_h;
    let usd_spot = instance_hours * prices.spot_usd_per_hour;
    let usd_on_demand = instance_hours * prices.on_demand_usd_per_hour;
    let per_million = |usd: f64| (samples > 0.0).then(|| usd / samples * 1e6);
    let totals = Totals {
        intervals: records.len(),
        hours,
        samples,
        lost_samples,
        samples_per_hour: if hours > 0.0 { samples / hours } else { 0.0 },
        migration_hours: migration_ms / HOUR_MS,
        migrations: MigrationCounts {
            intra_stage: kinds.intra_stage,
            inter_stage: kinds.inter_stage,
            repartition: kinds.repartition,
            restart: kinds.restart,
            total: kinds.migrations(),
        },
        cold_starts,
        config_changes,
        paused_intervals,
        instance_hours,
        usd_spot,
        usd_on_demand,
        usd_per_million_samples_spot: per_million(usd_spot),
        usd_per_million_samples_on_demand: per_million(usd_on_demand),
    };
    SimResult { intervals: records, totals }
}
