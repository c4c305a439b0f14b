//! Oobleck (Jang et al., SOSP'23): pipeline templates planned ahead for every
//! fleet size, instantiated so that at least `f + 1` pipelines (replicas of
//! the model) run; after a preemption the pipelines are re-instantiated from
//! the templates and the surviving replicas' state in seconds, with no
//! checkpoint restart. As in the Oobleck artifact's simulator
//! (`tools/simulator/oobleck_simulator.py`), a preemption also wastes the
//! iteration in flight.
//!
//! Layouts come from the same profile as every other system: a template is a
//! profiled pipeline depth, and the instantiated set is the fastest profiled
//! layout `(D, P)` with `D >= f + 1` that fits the fleet (Oobleck's
//! heterogeneous pipelines would also use the instances left over; the
//! profile measures homogeneous layouts only, so they idle here). When no such
//! layout fits, no template set fits: training stops until enough instances
//! return. When a preemption takes every replica of some stage, state is lost
//! beyond what the replicas can restore: the job restarts from a checkpoint
//! and loses the work since it, as Parcae does in that case. It takes the
//! deployment's periodic checkpoints for that, as Parcae does, and pays their
//! share of throughput ([`PeerSettings::cadence`]).
//!
//! The expectation over which instances are preempted is exact: it is the
//! liveput cost model's distribution of the transition
//! ([`liveput::transition_distribution`]), with Oobleck's own reconfiguration
//! time in place of live migration's.

use parcae_policy_core::liveput::{self, MigrationKind};
use parcae_policy_core::{IntervalStats, ModelProfile, ParallelConfig};

use super::OobleckReconfiguration;
use super::{
    Peer, PeerCheckpoints, PeerError, PeerRun, PeerSettings, cap_rollbacks, check_series, cold_start_ms,
    model_entry, throughput,
};
use crate::{IntervalRecord, KindProbabilities, PeerConstants, SimError, summarize};

/// The fastest profiled layout with at least `replicas` pipelines within `instances`.
pub(super) fn layout(profile: &ModelProfile, instances: u32, replicas: u32) -> Option<ParallelConfig> {
    profile
        .configs
        .iter()
        .filter(|c| c.config.data_parallel >= replicas && c.config.instances() <= u64::from(instances))
        .max_by(|a, b| {
            a.samples_per_second
                .total_cmp(&b.samples_per_second)
                .then_with(|| b.config.instances().cmp(&a.config.instances()))
                .then_with(|| b.config.pipeline_stages.cmp(&a.config.pipeline_stages))
        })
        .map(|c| c.config)
}

/// Oobleck on `series`: see the module documentation.
pub fn oobleck(
    profile: &ModelProfile,
    series: &[IntervalStats],
    constants: &PeerConstants,
    settings: &PeerSettings,
) -> Result<PeerRun, PeerError> {
    let model = model_entry(Peer::Oobleck, &constants.oobleck.models, &profile.model)?;
    check_series(series)?;
    let replicas = constants.oobleck.fault_tolerance.saturating_add(1);
    let t = settings.interval_ms as f64;
    let smallest = profile
        .configs
        .iter()
        .filter(|c| c.config.data_parallel >= replicas)
        .map(|c| c.config.instances())
        .min();
    let mut current: Option<ParallelConfig> = None;
    let mut before = 0u32;
    let mut started = false;
    // Probability that the state was lost while training was stopped.
    let mut stopped_wiped = 0.0;
    let mut carried = 0.0;
    let mut records = Vec::with_capacity(series.len());
    let mut no_template = 0usize;
    let mut p_restarts = 0.0;
    let mut checkpoints = PeerCheckpoints::new(profile, settings);
    for (k, stats) in series.iter().enumerate() {
        let target = layout(profile, stats.instances, replicas);
        if target.is_none() {
            no_template += 1;
        }
        let cost_err = |source| SimError::CostModel { interval: k, source };
        // (probability, kind, reconfiguration ms, lost samples)
        let mut branches: Vec<(f64, MigrationKind, f64, f64)> = Vec::new();
        match (current, target) {
            (Some(from), to) => {
                let dist = liveput::transition_distribution(
                    profile,
                    Some(from),
                    before,
                    stats.preemptions,
                    stats.arrivals,
                    to,
                )
                .map_err(cost_err)?;
                let lost = checkpoints.lost_samples(throughput(profile, from));
                let in_flight = if stats.preemptions > 0 {
                    f64::from(profile.global_batch_size) * 1000.0
                        / throughput(profile, from).max(f64::MIN_POSITIVE)
                } else {
                    0.0
                };
                for o in &dist.outcomes {
                    let branch = if to.is_none() {
                        (o.probability, MigrationKind::None, 0.0, if o.lost_work { lost } else { 0.0 })
                    } else if o.lost_work {
                        (o.probability, MigrationKind::Restart, o.duration_ms, lost)
                    } else if o.kind == MigrationKind::None {
                        (o.probability, MigrationKind::None, 0.0, 0.0)
                    } else {
                        let reconfigure = match constants.oobleck.reconfiguration {
                            OobleckReconfiguration::Published => model.reconfigure_ms,
                            OobleckReconfiguration::CostModel => o.duration_ms,
                        };
                        (o.probability, o.kind, reconfigure + in_flight, 0.0)
                    };
                    branches.push(branch);
                }
                if to.is_none() {
                    stopped_wiped = dist.expected().p_lost_work;
                }
            }
            (None, Some(to)) => {
                let restart = cold_start_ms(profile, to, k)?;
                if started {
                    branches.push((
                        1.0 - stopped_wiped,
                        MigrationKind::InterStage,
                        model.reconfigure_ms,
                        0.0,
                    ));
                    branches.push((stopped_wiped, MigrationKind::Restart, restart, 0.0));
                } else {
                    branches.push((1.0, MigrationKind::Restart, restart, 0.0));
                }
                started = true;
                stopped_wiped = 0.0;
            }
            (None, None) => branches.push((1.0, MigrationKind::None, 0.0, 0.0)),
        }
        let thr_to = target.map_or(0.0, |c| throughput(profile, c)) * checkpoints.advance(k);
        let carried_in = if target.is_some() { carried } else { 0.0 };
        let mut rec = IntervalRecord {
            interval: k,
            instances: stats.instances,
            arrivals: stats.arrivals,
            preemptions: stats.preemptions,
            config: target,
            samples: 0.0,
            lost_samples: 0.0,
            migration_ms: 0.0,
            transition_ms: 0.0,
            carried_in_ms: carried_in,
            leftover_ms: 0.0,
            kinds: KindProbabilities::default(),
            transition_ms_by_kind: [0.0; 5],
            p_restart: 0.0,
            p_lost_work: 0.0,
        };
        let mut p = [0.0; 5];
        for &(prob, kind, cost, lost) in branches.iter().filter(|b| b.0 > 0.0) {
            let busy = carried_in + cost;
            rec.samples += prob * (thr_to * (t - busy).max(0.0) / 1000.0 - lost);
            rec.lost_samples += prob * lost;
            rec.migration_ms += prob * busy.clamp(0.0, t);
            rec.transition_ms += prob * cost;
            rec.transition_ms_by_kind[kind.index()] += prob * cost;
            rec.leftover_ms += prob * (busy - t).max(0.0);
            p[kind.index()] += prob;
            if lost > 0.0 {
                rec.p_lost_work += prob;
            }
        }
        rec.kinds = KindProbabilities::from_array(p);
        rec.p_restart = rec.kinds.restart;
        if current.is_some() {
            p_restarts += rec.kinds.restart;
        }
        carried = rec.leftover_ms;
        records.push(rec);
        current = target;
        before = stats.instances;
    }
    let mut notes = vec![format!(
        "oobleck ({}): f = {} (at least {replicas} pipelines), reconfiguration from surviving replicas in {}, \
         the smallest fleet that runs is {} instances",
        model.paper_model,
        replicas - 1,
        match constants.oobleck.reconfiguration {
            OobleckReconfiguration::Published =>
                format!("{:.0} s (published)", model.reconfigure_ms / 1000.0),
            OobleckReconfiguration::CostModel => "the profile's live-migration time".to_string(),
        },
        smallest
            .map_or_else(|| "none (no profiled layout has enough pipelines)".to_string(), |n| n.to_string())
    )];
    notes.push(checkpoints.cost.note(Peer::Oobleck, series.len(), 1));
    if no_template > 0 {
        notes.push(format!(
            "oobleck: no template set fits in {no_template} interval(s): training stopped there"
        ));
    }
    if p_restarts >= 0.005 {
        notes.push(format!(
            "oobleck: {p_restarts:.2} expected restarts from a checkpoint after a stage lost every replica"
        ));
    }
    cap_rollbacks(checkpoints.risk_ceiling(), &mut records);
    Ok(PeerRun {
        peer: Peer::Oobleck,
        result: summarize(records, settings.interval_ms, settings.prices),
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::{Cadenced, Prices};

    const PRICES: Prices = Prices { spot_usd_per_hour: 1.0, on_demand_usd_per_hour: 3.0 };

    #[test]
    fn stops_when_no_template_fits_and_resumes_in_seconds() {
        let p = profile(0.0, 0.0);
        let c = constants(); // f = 1: at least 2 pipelines; reconfiguration 2 s.
        // 4 instances: (4, 1) 40/s. Then 1 instance: no layout with 2
        // pipelines fits. Then 2 again: (2, 1).
        let series = [stats(4, 4, 0), stats(1, 0, 3), stats(2, 1, 0)];
        let run = oobleck(&p, &series, &c, &PeerSettings::new(60_000, PRICES)).unwrap();
        let r = &run.result.intervals;
        assert_eq!(r[0].config, Some(ParallelConfig::new(4, 1)));
        assert_eq!(r[0].samples, 40.0 * 60.0);
        assert_eq!(r[1].config, None);
        assert_eq!(r[1].samples, 0.0);
        // 3 of (4, 1)'s 4 replicas preempted: the one stage keeps a replica,
        // nothing is lost; the restart resumes from it in 2 s.
        assert_eq!(r[1].lost_samples, 0.0);
        assert_eq!(r[2].config, Some(ParallelConfig::new(2, 1)));
        assert_eq!(r[2].samples, 20.0 * 58.0);
        assert!(
            run.notes.iter().any(|n| n.contains("no template set fits in 1 interval")),
            "{:?}",
            run.notes
        );
    }

    #[test]
    fn a_preemption_costs_the_reconfiguration_and_the_iteration_in_flight() {
        let p = profile(0.0, 0.0);
        let c = constants();
        // 8 instances: (4, 2) 80/s. One preempted: 7 left, fastest with >= 2
        // pipelines: (3, 2) 60/s. Reconfiguration 2 s + the iteration in flight
        // at (4, 2): 40 samples / 80/s = 0.5 s.
        let series = [stats(8, 8, 0), stats(7, 0, 1)];
        let run = oobleck(&p, &series, &c, &PeerSettings::new(60_000, PRICES)).unwrap();
        let r = &run.result.intervals;
        assert_eq!(r[1].config, Some(ParallelConfig::new(3, 2)));
        assert!((r[1].samples - 60.0 * 57.5).abs() < 1e-9, "{}", r[1].samples);
        assert_eq!(r[1].kinds.none, 0.0);
        // With the profile's migration cost instead (all zero in the toy
        // profile), only the iteration in flight is lost.
        let mut cm = constants();
        cm.oobleck.reconfiguration = OobleckReconfiguration::CostModel;
        let run = oobleck(&p, &series, &cm, &PeerSettings::new(60_000, PRICES)).unwrap();
        assert!((run.result.intervals[1].samples - 60.0 * 59.5).abs() < 1e-9);
        // An arrival that changes nothing costs nothing.
        let series = [stats(8, 8, 0), stats(9, 1, 0)];
        let run = oobleck(&p, &series, &c, &PeerSettings::new(60_000, PRICES)).unwrap();
        assert_eq!(run.result.intervals[1].samples, 80.0 * 60.0);
    }

    #[test]
    fn losing_every_replica_of_a_stage_restarts_from_a_checkpoint() {
        // Checkpoint reload 10 s, checkpoint interval 20 min: 10 min lost.
        let p = profile(10_000.0, 1_200_000.0);
        let mut c = constants();
        c.oobleck.fault_tolerance = 0;
        // 4 instances: (4, 1) at 40/s with f = 0... use f = 0 so (1, 4) is
        // allowed? No: the fastest is (4, 1). Preempt all but one: 1 left.
        // Every stage of (4, 1) (one stage, 4 replicas) keeps >= 1: nothing lost.
        // With (1, 4) forced by a 4-deep-only profile, losing any instance
        // wipes a stage.
        let mut deep = p.clone();
        deep.configs.retain(|e| e.config.pipeline_stages == 4 || e.config == ParallelConfig::new(1, 2));
        let series = [stats(4, 4, 0), stats(3, 0, 1)];
        let run = oobleck(&deep, &series, &c, &PeerSettings::new(60_000, PRICES)).unwrap();
        let r = &run.result.intervals;
        assert_eq!(r[0].config, Some(ParallelConfig::new(1, 4)));
        assert_eq!(r[1].config, Some(ParallelConfig::new(1, 2)));
        assert_eq!(r[1].p_lost_work, 1.0);
        // 10 minutes at (1, 4)'s 40/s would be rolled back, but no more than
        // was trained since the cold start.
        assert_eq!(r[1].lost_samples, r[0].samples);
        assert!(r[0].samples > 0.0 && r[0].samples < 600.0 * 40.0);
        assert_eq!(r[1].kinds.restart, 1.0);
        // Checkpoints every 20 s: 10 s lost, less than what was trained.
        deep.checkpoint_interval_ms = 20_000.0;
        let run = oobleck(&deep, &series, &c, &PeerSettings::new(60_000, PRICES)).unwrap();
        assert_eq!(run.result.intervals[1].lost_samples, 10.0 * 40.0);
    }

    #[test]
    fn it_takes_the_deployments_checkpoints_it_restarts_from() {
        // The deployment checkpoints so that a loss rolls back 10 s on
        // average (interval 20 s) and keeps 90% of the throughput: Oobleck,
        // which restarts from those checkpoints, trains at 90% and a loss of
        // every replica of a stage rolls back 10 s of that slower training.
        let mut deep = profile(10_000.0, 1_200_000.0);
        deep.configs.retain(|e| e.config.pipeline_stages == 4 || e.config == ParallelConfig::new(1, 2));
        let mut c = constants();
        c.oobleck.fault_tolerance = 0;
        let series = [stats(4, 4, 0), stats(4, 0, 0), stats(3, 0, 1)];
        let free = oobleck(&deep, &series, &c, &PeerSettings::new(60_000, PRICES)).unwrap();
        let deployment = crate::cadence::checkpointing(&deep, 20_000.0, 0.9);
        let settings = PeerSettings {
            cadence: Some(Cadenced::constant(deployment, series.len())),
            ..PeerSettings::new(60_000, PRICES)
        };
        let paid = oobleck(&deep, &series, &c, &settings).unwrap();
        let (free, paid) = (&free.result.intervals, &paid.result.intervals);
        assert_eq!(paid[1].samples, 0.9 * free[1].samples);
        assert_eq!(free[1].samples, 40.0 * 60.0);
        assert_eq!(paid[2].lost_samples, 10.0 * 40.0 * 0.9);
        // The profile's 20 min cadence would have rolled back all it trained.
        assert_eq!(free[2].lost_samples, free[0].samples + free[1].samples);
    }
}
