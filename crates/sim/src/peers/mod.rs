//! Published peer systems, each modelled from its published mechanism on the
//! same profile (throughput per layout, transfer curve, start-up times) as
//! Parcae, with its own overheads layered on top:
//!
//! - [`bamboo`] (Thorpe et al., NSDI'23): every node also holds and runs its
//!   successor's stage (redundant computation), so pipelines are deeper and
//!   steps slower; a single preemption is absorbed by the predecessor at a
//!   slowdown; losing two consecutive stages, or a node already covering for
//!   its successor, is a fatal failure (global rendezvous, reconfiguration).
//! - [`varuna`] (Athlur et al., EuroSys'22): checkpoint every k iterations;
//!   a preemption restarts the job in the best layout for the instances left
//!   (arrivals wait for that restart), losing the work since the last
//!   checkpoint unless the preemption notice leaves time to write one.
//! - [`oobleck`] (Jang et al., SOSP'23): pipeline templates with at least `f +
//!   1` replicas, reconfiguration in seconds from surviving replicas; it
//!   cannot run when no template set fits.
//! - [`on_demand`]: a fixed fleet at the on-demand price, never preempted: the
//!   cost reference.
//!
//! The constants (restart and reconfiguration times, slowdowns...) come from a
//! data file ([`PeerConstants`], `data/profiles/peer-constants.json`) where
//! each one cites its source.
//!
//! # Library API for the bench
//!
//! - [`run`] simulates one peer given the deployment's preemption notice (ms,
//!   0 = unannounced); the per-peer functions are the same without a notice.
//! - [`own_ideal_samples`] is a peer's own overhead-free throughput (its
//!   layout rule and speed, no reconfiguration of any kind): the denominator
//!   the authors' simulators are compared with (`data/peers/`).
//! - [`PeerConstants::with_bamboo_speed`] gives the sensitivity variant of
//!   Bamboo's contested speed ([`BambooSpeed`]); the bench shows it as an
//!   extra row (e.g. `bamboo-slow`).
//!
//! # Common rules (the same for every system, Parcae included)
//!
//! - Time runs in the series' intervals; an interval's events happen at its
//!   start; a reconfiguration stops training for its duration, and what does not
//!   fit in the interval carries into the next.
//! - Instances are usable from the moment the trace adds them, and paid while
//!   alive (the on-demand fleet: all the time, at the on-demand price).
//! - Which instances a preemption takes is uniform among those alive, as in the
//!   liveput cost model: Oobleck's expectation is exact (the liveput
//!   distribution), Bamboo's (which depends on who covers whom) is the mean
//!   over [`PeerSettings::runs`] seeded draws, Varuna and on-demand do not
//!   depend on it.
//! - The first start costs the profile's cold start (the liveput cost model's
//!   restart from nothing) for every system, and so does every restart from a
//!   checkpoint after some stage's state was lost (Oobleck's and Bamboo's, as
//!   Parcae's; Bamboo's no less than its own rendezvous and reload); other
//!   restarts cost each system's own published figure.
//! - Periodic checkpoints are the deployment's ([`PeerSettings::cadence`]):
//!   Bamboo and Oobleck, which restart from one after losing a stage's state,
//!   take the same checkpoints as Parcae at the same cadence and pay the same
//!   share of throughput for them (Varuna checkpoints every k iterations of
//!   its own).
//! - Work that no surviving instance holds any more is lost back to the last
//!   checkpoint (half the checkpoint interval of the cadence that trained it,
//!   [`parcae_policy_core::liveput::lost_work_ms`]), and no more than was
//!   trained since the last rollback ([`parcae_policy_core::at_risk`]), as for
//!   Parcae (Varuna: the iterations since its own last checkpoint).
//!
//! Records reuse [`IntervalRecord`]; the kinds mean: `intra_stage` = a
//! preemption absorbed without reconfiguring (Bamboo's fail-over),
//! `inter_stage`/`repartition` = a reconfiguration from surviving state
//! (Bamboo's re-balance, Oobleck's re-instantiation), `restart` = a restart
//! (Varuna's checkpoint restarts, Bamboo's fatal failures, cold starts).

mod bamboo;
mod constants;
mod on_demand;
mod oobleck;
mod rng;
mod varuna;

use parcae_policy_core::at_risk;
use parcae_policy_core::liveput::{self, MigrationKind};
use parcae_policy_core::reactive::best_config_for;
use parcae_policy_core::{IntervalStats, ModelProfile, ParallelConfig};
use serde::Serialize;

pub use bamboo::{BambooPlan, bamboo, bamboo_with_victims};
pub use constants::{
    BambooConstants, BambooModel, BambooSpeed, ConstantsError, OnDemandConstants, OobleckConstants,
    OobleckModel, OobleckReconfiguration, PeerConstants, VarunaConstants, VarunaModel,
};
pub use on_demand::on_demand;
pub use oobleck::oobleck;
pub use varuna::{varuna, varuna_with_notice, young_interval_ms};

use crate::cadence::throughput_kept;
use crate::{Cadenced, IntervalRecord, KindProbabilities, Prices, SimError, SimResult};

/// A published peer system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Peer {
    /// Bamboo (NSDI'23): redundant computation, no migration.
    Bamboo,
    /// Varuna (EuroSys'22): periodic checkpoints, restart on every fleet change.
    Varuna,
    /// Oobleck (SOSP'23): pipeline templates, `f + 1` replicas.
    Oobleck,
    /// A fixed on-demand fleet: the no-preemption reference.
    OnDemand,
}

impl Peer {
    /// All of them, in report order.
    pub const ALL: [Peer; 4] = [Peer::Bamboo, Peer::Varuna, Peer::Oobleck, Peer::OnDemand];

    /// Stable name: `bamboo`, `varuna`, `oobleck`, `on-demand`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Peer::Bamboo => "bamboo",
            Peer::Varuna => "varuna",
            Peer::Oobleck => "oobleck",
            Peer::OnDemand => "on-demand",
        }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a peer is simulated.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerSettings {
    /// Length of one interval, ms.
    pub interval_ms: u64,
    /// Prices of one instance.
    pub prices: Prices,
    /// Seeded draws of which instances are preempted (Bamboo), >= 1.
    pub runs: u32,
    /// Seed of the first draw.
    pub seed: u64,
    /// The deployment's periodic checkpoints, as our rows take them (their
    /// [`Cadenced`] profiles, built from the same profile): the peers that
    /// restart from a checkpoint after losing a stage (Bamboo, Oobleck) take
    /// the same checkpoints, pay the same share of throughput for them and
    /// roll back to the last of them. `None`: checkpoints every
    /// `checkpoint_interval_ms` of the profile, at no cost.
    pub cadence: Option<Cadenced>,
}

impl PeerSettings {
    /// 60 s intervals, 64 draws, seed 1, the profile's checkpoints at no cost.
    pub fn new(interval_ms: u64, prices: Prices) -> Self {
        Self { interval_ms, prices, runs: 64, seed: 1, cadence: None }
    }
}

/// The deployment's periodic checkpoints as a peer that restarts from them
/// meets them, interval by interval ([`PeerSettings::cadence`]). A restart
/// from a checkpoint needs checkpoints taken: without this the peers trained
/// at the profile's full speed and still restarted from one, and so could
/// train more than the Oracle, which pays for them (Oobleck, 58 places living
/// 3 min, p3, GPT-6.7B, 5 s notice: 298 samples against 289).
#[derive(Debug, Clone)]
struct PeerCheckpoints<'a> {
    /// The peer's own profile: what the shares of throughput are read against.
    profile: &'a ModelProfile,
    cadence: Option<&'a Cadenced>,
    /// The profile of the interval trained last (its cadence): what a loss
    /// now rolls back, and the share of throughput its checkpoints left.
    trained: &'a ModelProfile,
    cost: CheckpointCost,
}

/// What the deployment's checkpoints cost a peer over a run, for its notes.
#[derive(Debug, Clone, Copy)]
struct CheckpointCost {
    /// Whether checkpoints were priced at all ([`PeerSettings::cadence`]).
    priced: bool,
    /// Intervals whose checkpoints took a share of throughput.
    charged: usize,
    /// The largest share taken.
    most_taken: f64,
}

impl<'a> PeerCheckpoints<'a> {
    fn new(profile: &'a ModelProfile, settings: &'a PeerSettings) -> Self {
        PeerCheckpoints {
            profile,
            cadence: settings.cadence.as_ref(),
            trained: profile,
            cost: CheckpointCost { priced: settings.cadence.is_some(), charged: 0, most_taken: 0.0 },
        }
    }

    /// The share of throughput the checkpoints of the interval trained last left.
    fn keep(&self) -> f64 {
        throughput_kept(self.profile, self.trained)
    }

    /// Samples a loss now rolls back on average, of work trained at
    /// `samples_per_second` before the checkpoints took their share.
    fn lost_samples(&self, samples_per_second: f64) -> f64 {
        liveput::lost_work_ms(self.trained) * samples_per_second * self.keep() / 1000.0
    }

    /// Moves to interval `k`: the share of throughput its checkpoints leave.
    fn advance(&mut self, k: usize) -> f64 {
        if let Some(cadence) = self.cadence {
            self.trained = cadence.at(k);
            let taken = 1.0 - self.keep();
            if taken > 0.0 {
                self.cost.charged += 1;
                self.cost.most_taken = self.cost.most_taken.max(taken);
            }
        }
        self.keep()
    }

    /// The most a rollback can take back, as our rows are capped
    /// ([`Cadenced::risk_ceiling`]; without a cadence, the profile's).
    fn risk_ceiling(&self) -> f64 {
        self.cadence.map_or_else(|| at_risk::ceiling(self.profile), Cadenced::risk_ceiling)
    }
}

impl CheckpointCost {
    /// Adds another draw's counts (Bamboo's runs), for a note over several.
    fn absorb(&mut self, other: CheckpointCost) {
        self.charged += other.charged;
        self.most_taken = self.most_taken.max(other.most_taken);
    }

    /// A note on what the checkpoints cost `peer` over `intervals`, the mean
    /// of `draws` runs absorbed.
    fn note(&self, peer: Peer, intervals: usize, draws: usize) -> String {
        if !self.priced {
            format!("{peer}: the profile's periodic checkpoints, at no cost")
        } else if self.charged == 0 {
            format!("{peer}: the deployment's periodic checkpoints, at the profile's cadence throughout")
        } else {
            format!(
                "{peer}: the deployment's periodic checkpoints (as our rows take them) cost it throughput in \
                 {:.0} of {intervals} intervals, up to {:.1}% of it",
                self.charged as f64 / draws.max(1) as f64,
                100.0 * self.most_taken
            )
        }
    }
}

/// A peer scored on one series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerRun {
    /// The peer simulated.
    pub peer: Peer,
    /// Per-interval records and totals, as for any decision sequence.
    pub result: SimResult,
    /// What the reader should know: the layout rule, overhead factors,
    /// counts of the peer's own events, why it could not run.
    pub notes: Vec<String>,
}

/// Why a peer could not be simulated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PeerError {
    /// The constants have no entry for the profile's model.
    #[error("{peer}: the peer constants have no entry for model `{model}` (they have: {})", available.join(", "))]
    MissingModel {
        /// The peer whose constants lack the model.
        peer: Peer,
        /// The profile's model name.
        model: String,
        /// The models the constants have.
        available: Vec<String>,
    },
    /// Invalid constants.
    #[error("peer constants: {0}")]
    Constants(#[from] ConstantsError),
    /// A scenario given to [`bamboo_with_victims`] that does not fit the series.
    #[error("bamboo: interval {interval}: bad victims {reason}")]
    BadVictims {
        /// Interval of the series.
        interval: usize,
        /// What is wrong with its victims.
        reason: String,
    },
    /// A simulation error (inconsistent series, cost model...).
    #[error(transparent)]
    Sim(#[from] SimError),
}

/// Simulates `peer` on `series` when each preemption is announced
/// `notice_ms` ahead (0: unannounced). Only Varuna's recovery uses the notice
/// (it checkpoints on the signal); Bamboo and Oobleck recover the same way
/// either way (see their modules), and the on-demand fleet is never preempted.
pub fn run(
    peer: Peer,
    profile: &ModelProfile,
    series: &[IntervalStats],
    constants: &PeerConstants,
    settings: &PeerSettings,
    notice_ms: u64,
) -> Result<PeerRun, PeerError> {
    match peer {
        Peer::Bamboo => bamboo(profile, series, constants, settings),
        Peer::Varuna => varuna_with_notice(profile, series, constants, settings, notice_ms),
        Peer::Oobleck => oobleck(profile, series, constants, settings),
        Peer::OnDemand => on_demand(profile, series, constants, settings),
    }
}

/// Samples `peer` would train on `series` with no overhead at all: in every
/// interval, its own layout rule's speed for the instances alive (Bamboo: its
/// pipeline depth and speed, 0 when it cannot run the model; Varuna: the
/// fastest profiled layout; Oobleck: the fastest with `f + 1` pipelines;
/// on-demand: its fixed fleet). A peer's result over this is "percent of its
/// own ideal", the figure its authors' simulators are compared on.
pub fn own_ideal_samples(
    peer: Peer,
    profile: &ModelProfile,
    series: &[IntervalStats],
    constants: &PeerConstants,
    interval_ms: u64,
) -> Result<f64, PeerError> {
    check_series(series)?;
    let seconds = interval_ms as f64 / 1000.0;
    let speed_of = |instances: u32| -> Result<f64, PeerError> {
        Ok(match peer {
            Peer::Bamboo => {
                model_entry(peer, &constants.bamboo.models, &profile.model)?;
                let peak = series.iter().map(|s| s.instances).max().unwrap_or(0);
                BambooPlan::choose(profile, &constants.bamboo, peak)
                    .ok()
                    .and_then(|plan| plan.best(instances as usize))
                    .map_or(0.0, |(_, speed)| speed)
            }
            Peer::Varuna => {
                model_entry(peer, &constants.varuna.models, &profile.model)?;
                best_config_for(profile, instances).map_or(0.0, |c| c.samples_per_second)
            }
            Peer::Oobleck => {
                model_entry(peer, &constants.oobleck.models, &profile.model)?;
                let replicas = constants.oobleck.fault_tolerance.saturating_add(1);
                oobleck::layout(profile, instances, replicas).map_or(0.0, |c| throughput(profile, c))
            }
            Peer::OnDemand => {
                let fleet = constants
                    .on_demand
                    .fleet_instances
                    .unwrap_or_else(|| series.iter().map(|s| s.instances).max().unwrap_or(0));
                best_config_for(profile, fleet).map_or(0.0, |c| c.samples_per_second)
            }
        })
    };
    series.iter().map(|s| speed_of(s.instances).map(|speed| speed * seconds)).sum()
}

/// The model entry of one peer's table, or [`PeerError::MissingModel`].
fn model_entry<'a, M>(
    peer: Peer,
    models: &'a std::collections::BTreeMap<String, M>,
    model: &str,
) -> Result<&'a M, PeerError> {
    models.get(model).ok_or_else(|| PeerError::MissingModel {
        peer,
        model: model.to_string(),
        available: models.keys().cloned().collect(),
    })
}

/// Checks `instances = previous + arrivals - preemptions` along the series.
fn check_series(series: &[IntervalStats]) -> Result<(), SimError> {
    let mut before = 0u32;
    for (interval, s) in series.iter().enumerate() {
        let ok = s.preemptions <= before
            && u64::from(before - s.preemptions) + u64::from(s.arrivals) == u64::from(s.instances);
        if !ok {
            return Err(SimError::InconsistentSeries {
                interval,
                instances_before: before,
                arrivals: s.arrivals,
                preemptions: s.preemptions,
                instances: s.instances,
            });
        }
        before = s.instances;
    }
    Ok(())
}

/// Samples per second of a profiled layout (0 when it is not profiled).
fn throughput(profile: &ModelProfile, config: ParallelConfig) -> f64 {
    profile.config(config).map_or(0.0, |c| c.samples_per_second)
}

/// The profile's cold start into `config`: the liveput cost model's restart
/// from nothing (`R_add` + checkpoint load + every stage's state).
fn cold_start_ms(profile: &ModelProfile, config: ParallelConfig, interval: usize) -> Result<f64, SimError> {
    let arrived = u32::try_from(config.instances()).unwrap_or(u32::MAX);
    liveput::scenario_cost(profile, None, &[], 0, arrived, Some(config))
        .map(|c| c.duration_ms)
        .map_err(|source| SimError::CostModel { interval, source })
}

/// One interval of training at `samples_per_second` with `busy_ms` of
/// reconfiguration first: (samples, leftover ms).
fn train(samples_per_second: f64, busy_ms: f64, interval_ms: f64) -> (f64, f64) {
    (samples_per_second * (interval_ms - busy_ms).max(0.0) / 1000.0, (busy_ms - interval_ms).max(0.0))
}

/// A record of one interval whose reconfiguration is deterministic.
#[allow(clippy::too_many_arguments, reason = "the fields of one record")]
fn record(
    interval: usize,
    stats: IntervalStats,
    config: Option<ParallelConfig>,
    samples: f64,
    lost_samples: f64,
    carried_in_ms: f64,
    transition_ms: f64,
    busy_ms: f64,
    interval_ms: f64,
    kind: MigrationKind,
) -> IntervalRecord {
    let mut p = [0.0; 5];
    p[kind.index()] = 1.0;
    let restart = if kind == MigrationKind::Restart { 1.0 } else { 0.0 };
    IntervalRecord {
        interval,
        instances: stats.instances,
        arrivals: stats.arrivals,
        preemptions: stats.preemptions,
        config,
        samples: samples - lost_samples,
        lost_samples,
        migration_ms: busy_ms.clamp(0.0, interval_ms),
        transition_ms,
        carried_in_ms,
        leftover_ms: (busy_ms - interval_ms).max(0.0),
        kinds: KindProbabilities::from_array(p),
        transition_ms_by_kind: p.map(|q| q * transition_ms),
        p_restart: restart,
        p_lost_work: if lost_samples > 0.0 { 1.0 } else { 0.0 },
    }
}

/// Caps each record's rollback at the work at risk, as the simulator does for
/// Parcae's rows ([`parcae_policy_core::at_risk`]): the same rule for every
/// row that charges the profile's steady-state rollback (Varuna counts the
/// iterations since its own last checkpoint, which a restart resets, so its
/// rollbacks need no cap). A peer's record is one expectation per interval,
/// so the rule runs on it: a record that loses work with probability
/// `p_lost_work` loses `lost_samples / p_lost_work` each time in steady state;
/// a rollback starts the work at risk again from nothing. `ceiling` is the
/// most that can be at risk, the deployment's as for our rows
/// ([`PeerCheckpoints::risk_ceiling`]).
fn cap_rollbacks(ceiling: f64, records: &mut [IntervalRecord]) {
    let mut risk = 0.0;
    for r in records.iter_mut() {
        if r.p_lost_work > 0.0 {
            let lost = at_risk::rolled_back(r.lost_samples / r.p_lost_work, risk) * r.p_lost_work;
            r.samples += r.lost_samples - lost;
            r.lost_samples = lost;
        }
        risk = at_risk::at_risk_after(risk, r.p_lost_work, r.samples + r.lost_samples, ceiling);
    }
}

/// A run where the peer never trains (every interval paused).
fn never_runs(peer: Peer, series: &[IntervalStats], settings: &PeerSettings, note: String) -> PeerRun {
    let records = series
        .iter()
        .enumerate()
        .map(|(k, s)| {
            record(k, *s, None, 0.0, 0.0, 0.0, 0.0, 0.0, settings.interval_ms as f64, MigrationKind::None)
        })
        .collect();
    PeerRun {
        peer,
        result: crate::summarize(records, settings.interval_ms, settings.prices),
        notes: vec![note],
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A small profile whose figures make hand computation easy.
    use parcae_policy_core::{ConfigProfile, IntervalStats, ModelProfile, ParallelConfig, StagePartition};

    use super::constants::*;
    use std::collections::BTreeMap;

    /// Layouts `(d, p)` for `d` in 1..=4 and `p` in {1, 2, 4}: `10 x d x p`
    /// samples/s, iterations of 1 s (global batch `10 d p`, micro-batch 1 is
    /// irrelevant to the tests that use it). Every reconfiguration piece costs
    /// 0 except the checkpoint reload `checkpoint_ms`; no transfer curve.
    /// Checkpoint interval `checkpoint_interval_ms` (lost work = half of it).
    pub fn profile(checkpoint_ms: f64, checkpoint_interval_ms: f64) -> ModelProfile {
        let mut configs = Vec::new();
        for d in 1..=4u32 {
            for p in [1u32, 2, 4] {
                let sps = 10.0 * f64::from(d * p);
                configs.push(ConfigProfile {
                    config: ParallelConfig::new(d, p),
                    samples_per_second: sps,
                    iteration_ms: 1000.0,
                    comm_rebuild_add_ms: 0.0,
                    comm_rebuild_remove_ms: 0.0,
                    model_build_ms: 0.0,
                });
            }
        }
        let partitions = [1u32, 2, 4]
            .into_iter()
            .map(|p| StagePartition {
                pipeline_stages: p,
                layers_per_stage: vec![4 / p; p as usize],
                state_bytes_per_stage: vec![1000 / u64::from(p); p as usize],
            })
            .collect();
        ModelProfile {
            model: "toy".into(),
            global_batch_size: 40,
            micro_batch_size: 1,
            configs,
            partitions,
            transfer_curve: vec![],
            rendezvous_ms: 0.0,
            process_start_ms: 0.0,
            add_extra_ms: 0.0,
            checkpoint_restart_ms: checkpoint_ms,
            checkpoint_interval_ms,
        }
    }

    pub fn stats(instances: u32, arrivals: u32, preemptions: u32) -> IntervalStats {
        IntervalStats { instances, arrivals, preemptions }
    }

    fn cite(fields: &[&str]) -> BTreeMap<String, String> {
        fields.iter().map(|f| (f.to_string(), "test".to_string())).collect()
    }

    /// Constants for model `toy`.
    pub fn constants() -> PeerConstants {
        PeerConstants {
            source: None,
            bamboo: BambooConstants {
                sources: cite(&[
                    "memory_depth_factor",
                    "forward_fraction",
                    "fallback_slowdown",
                    "global_rendezvous_ms",
                    "overloaded_fraction_limit",
                    "speed",
                    "artifact_slowdown",
                ]),
                memory_depth_factor: 1.0,
                forward_fraction: 0.0,
                fallback_slowdown: 2.0,
                global_rendezvous_ms: 3000.0,
                overloaded_fraction_limit: 1.0,
                speed: BambooSpeed::RedundantCompute,
                artifact_slowdown: 4.0,
                models: [(
                    "toy".to_string(),
                    BambooModel { paper_model: "toy".into(), reconfigure_ms: 6000.0, source: "test".into() },
                )]
                .into(),
            },
            varuna: VarunaConstants {
                sources: cite(&["checkpoint_every_iterations"]),
                checkpoint_every_iterations: Some(10),
                models: [(
                    "toy".to_string(),
                    VarunaModel {
                        paper_model: "toy".into(),
                        restart_ms: 20_000.0,
                        checkpoint_ms: 5000.0,
                        source: "test".into(),
                    },
                )]
                .into(),
            },
            oobleck: OobleckConstants {
                sources: cite(&["fault_tolerance", "reconfiguration"]),
                fault_tolerance: 1,
                reconfiguration: OobleckReconfiguration::Published,
                models: [(
                    "toy".to_string(),
                    OobleckModel { paper_model: "toy".into(), reconfigure_ms: 2000.0, source: "test".into() },
                )]
                .into(),
            },
            on_demand: OnDemandConstants { sources: cite(&["fleet_instances"]), fleet_instances: None },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn validation_names_the_field() {
        let mut c = constants();
        assert_eq!(c.validate(), Ok(()));
        c.bamboo.sources.remove("fallback_slowdown");
        let e = c.validate().unwrap_err();
        assert_eq!(e.path, "bamboo.sources");
        assert!(e.reason.contains("fallback_slowdown"), "{e}");

        let mut c = constants();
        c.varuna.sources.insert("checkpoint_ms".into(), "x".into());
        assert_eq!(c.validate().unwrap_err().path, "varuna.sources.checkpoint_ms");

        let mut c = constants();
        c.oobleck.models.get_mut("toy").unwrap().reconfigure_ms = -1.0;
        assert_eq!(c.validate().unwrap_err().path, "oobleck.models.toy.reconfigure_ms");

        let mut c = constants();
        c.varuna.models.get_mut("toy").unwrap().source = " ".into();
        assert_eq!(c.validate().unwrap_err().path, "varuna.models.toy.source");

        let mut c = constants();
        c.bamboo.fallback_slowdown = 0.5;
        assert_eq!(c.validate().unwrap_err().path, "bamboo.fallback_slowdown");

        let mut c = constants();
        c.on_demand.fleet_instances = Some(0);
        assert_eq!(c.validate().unwrap_err().path, "on_demand.fleet_instances");
    }

    #[test]
    fn a_missing_model_is_named() {
        let mut p = profile(0.0, 0.0);
        p.model = "other".into();
        let series = [stats(2, 2, 0)];
        let settings =
            PeerSettings::new(60_000, Prices { spot_usd_per_hour: 1.0, on_demand_usd_per_hour: 3.0 });
        let e = varuna(&p, &series, &constants(), &settings).unwrap_err();
        assert_eq!(
            e.to_string(),
            "varuna: the peer constants have no entry for model `other` (they have: toy)"
        );
    }

    #[test]
    fn an_inconsistent_series_is_refused() {
        let p = profile(0.0, 0.0);
        let series = [stats(2, 2, 0), stats(3, 0, 0)];
        let settings =
            PeerSettings::new(60_000, Prices { spot_usd_per_hour: 1.0, on_demand_usd_per_hour: 3.0 });
        for peer in Peer::ALL {
            let r = match peer {
                Peer::Bamboo => bamboo(&p, &series, &constants(), &settings),
                Peer::Varuna => varuna(&p, &series, &constants(), &settings),
                Peer::Oobleck => oobleck(&p, &series, &constants(), &settings),
                Peer::OnDemand => on_demand(&p, &series, &constants(), &settings),
            };
            assert!(
                matches!(r, Err(PeerError::Sim(SimError::InconsistentSeries { interval: 1, .. }))),
                "{peer}"
            );
        }
    }
}
