//! Varuna (Athlur et al., EuroSys'22), as its authors' comparison models it
//! (the Oobleck artifact, `tools/simulator/varuna_simulator.py`): training
//! writes a checkpoint every k iterations (training waits while it is
//! written); a preemption restarts the job in the throughput-optimal layout
//! for the instances then alive. Instances that only arrive do not restart the
//! job: they wait and join at the next restart (the artifact counts a ready
//! instance as waiting while the job runs, and its reconfiguration rule is
//! off: `simulate_should_reconfigure` returns `False`), or start it when
//! nothing runs. A restart costs the model's published restart time; the first
//! start costs the profile's cold start.
//!
//! Lost work follows the deployment's preemption notice: Varuna checkpoints on
//! the notice signal, so when its checkpoint fits the notice
//! (`checkpoint_ms <= notice_ms`) a preemption loses nothing, the checkpoint
//! being part of the published restart time (the artifact's restart is
//! `local_rendezvous_timeout_delta - checkpointing_overhead`, then the
//! checkpoint at the first step: `restart_ms` in all; its comparison runs
//! Varuna so, `no_small_model_fallback=True` in `eval_gcp_ec2.py`); without a
//! notice long enough it rolls back to its last completed checkpoint (the work
//! since is lost, and so is a checkpoint being written). Deterministic: the
//! outcome does not depend on which instances are preempted.

use parcae_policy_core::liveput::MigrationKind;
use parcae_policy_core::reactive::best_config_for;
use parcae_policy_core::{IntervalStats, ModelProfile, ParallelConfig};

use super::{Peer, PeerError, PeerRun, PeerSettings, check_series, cold_start_ms, model_entry, record};
use crate::{PeerConstants, summarize};

/// Young's first-order optimal checkpoint interval (J. W. Young, "A first order
/// approximation to the optimum checkpoint interval", CACM 17(9), 1974): `sqrt(2
/// x checkpoint_ms x mtbf_ms)`, with the mean time between the series'
/// preemption events (intervals with a preemption). `None` when the series has
/// no preemption (checkpointing is then pure overhead).
pub fn young_interval_ms(series: &[IntervalStats], interval_ms: u64, checkpoint_ms: f64) -> Option<f64> {
    let events = series.iter().filter(|s| s.preemptions > 0).count();
    (events > 0).then(|| {
        let mtbf = series.len() as f64 * interval_ms as f64 / events as f64;
        (2.0 * checkpoint_ms * mtbf).sqrt()
    })
}

/// Where the job stands in its train-k-iterations-then-checkpoint cycle.
#[derive(Debug, Clone, Copy, Default)]
struct Cycle {
    /// Iterations trained since the last completed checkpoint (fractional: time).
    since_checkpoint: f64,
    /// Time still needed to finish the checkpoint being written, ms.
    writing_ms: f64,
}

impl Cycle {
    /// Trains for `ms` at `iteration_ms` per iteration, checkpointing every `k`
    /// iterations for `checkpoint_ms`; returns the iterations trained and the
    /// time spent writing checkpoints.
    fn run(&mut self, mut ms: f64, iteration_ms: f64, k: f64, checkpoint_ms: f64) -> (f64, f64) {
        let mut trained = 0.0;
        let mut writing = 0.0;
        while ms > 0.0 {
            if self.writing_ms > 0.0 {
                let d = ms.min(self.writing_ms);
                self.writing_ms -= d;
                writing += d;
                ms -= d;
                if self.writing_ms <= 0.0 {
                    self.writing_ms = 0.0;
                    self.since_checkpoint = 0.0;
                }
                continue;
            }
            let need = (k - self.since_checkpoint) * iteration_ms;
            if ms < need {
                let done = ms / iteration_ms;
                self.since_checkpoint += done;
                trained += done;
                ms = 0.0;
            } else {
                trained += k - self.since_checkpoint;
                self.since_checkpoint = k;
                ms -= need;
                self.writing_ms = checkpoint_ms;
                if checkpoint_ms <= 0.0 {
                    self.writing_ms = 0.0;
                    self.since_checkpoint = 0.0;
                }
            }
        }
        (trained, writing)
    }
}

/// Varuna on `series` with unannounced preemptions (`notice_ms = 0`); see
/// [`varuna_with_notice`].
pub fn varuna(
    profile: &ModelProfile,
    series: &[IntervalStats],
    constants: &PeerConstants,
    settings: &PeerSettings,
) -> Result<PeerRun, PeerError> {
    varuna_with_notice(profile, series, constants, settings, 0)
}

/// Varuna on `series` when each preemption is announced `notice_ms` ahead (0:
/// unannounced); see the module documentation.
pub fn varuna_with_notice(
    profile: &ModelProfile,
    series: &[IntervalStats],
    constants: &PeerConstants,
    settings: &PeerSettings,
    notice_ms: u64,
) -> Result<PeerRun, PeerError> {
    let model = model_entry(Peer::Varuna, &constants.varuna.models, &profile.model)?;
    check_series(series)?;
    let t = settings.interval_ms as f64;
    let batch = f64::from(profile.global_batch_size);
    let young = young_interval_ms(series, settings.interval_ms, model.checkpoint_ms);
    let checkpoint_on_notice = model.checkpoint_ms <= notice_ms as f64;
    // Checkpoint period in iterations for a layout.
    let every = |config: ParallelConfig| -> f64 {
        match constants.varuna.checkpoint_every_iterations {
            Some(k) => f64::from(k),
            None => {
                let iteration_ms = iteration_ms(profile, config);
                young.map_or(f64::INFINITY, |tau| (tau / iteration_ms).round().max(1.0))
            }
        }
    };
    let mut current: Option<ParallelConfig> = None;
    let mut started = false;
    let mut cycle = Cycle::default();
    let mut carried = 0.0;
    let mut records = Vec::with_capacity(series.len());
    let (mut restarts, mut lost_total, mut writing_total) = (0u64, 0.0, 0.0);
    let mut arrivals_waited = 0u64;
    for (k, stats) in series.iter().enumerate() {
        let best = best_config_for(profile, stats.instances).map(|c| c.config);
        // Only a preemption (or a start from nothing) changes the layout.
        let restart = current.is_none() || stats.preemptions > 0;
        let target = if restart { best } else { current };
        if !restart && stats.arrivals > 0 {
            arrivals_waited += 1;
        }
        let mut lost = 0.0;
        let mut transition = 0.0;
        let mut kind = MigrationKind::None;
        let mut busy = carried;
        let carried_in = carried;
        if current.is_some() && stats.preemptions > 0 {
            if checkpoint_on_notice {
                // Written within the restart time (see the module documentation).
                if cycle.since_checkpoint > 0.0 {
                    writing_total += model.checkpoint_ms;
                }
            } else {
                lost = cycle.since_checkpoint * batch;
            }
            cycle = Cycle::default();
        }
        match target {
            Some(config) if restart => {
                transition += if started { model.restart_ms } else { cold_start_ms(profile, config, k)? };
                // A restart supersedes one still in flight.
                busy = transition;
                kind = MigrationKind::Restart;
                restarts += u64::from(started);
                started = true;
            }
            // Paused: nothing runs; the next start restarts anyway.
            None => busy = 0.0,
            Some(_) => {}
        }
        let mut trained = 0.0;
        if let Some(config) = target {
            let available = (t - busy).max(0.0);
            let (iterations, writing) =
                cycle.run(available, iteration_ms(profile, config), every(config), model.checkpoint_ms);
            trained = iterations * batch;
            writing_total += writing;
        }
        lost_total += lost;
        records.push(record(k, *stats, target, trained, lost, carried_in, transition, busy, t, kind));
        carried = (busy - t).max(0.0);
        current = target;
    }
    let period = match (constants.varuna.checkpoint_every_iterations, young) {
        (Some(k), _) => format!("every {k} iterations"),
        (None, Some(tau)) => {
            format!("every {:.0} s of training (Young's optimum for this trace)", tau / 1000.0)
        }
        (None, None) => "never (no preemption in the trace)".to_string(),
    };
    let on_preemption = if checkpoint_on_notice {
        format!("checkpoints on the {:.0} s notice (nothing rolled back)", notice_ms as f64 / 1000.0)
    } else {
        format!(
            "rolls back to its last checkpoint ({:.0} s notice < {:.1} s checkpoint)",
            notice_ms as f64 / 1000.0,
            model.checkpoint_ms / 1000.0
        )
    };
    let notes = vec![format!(
        "varuna ({}): checkpoint {period}, {:.1} s each; on a preemption it {on_preemption}; {restarts} \
         restarts of {:.0} s; {arrivals_waited} interval(s) whose arrivals waited for the next restart; {:.2} h \
         writing checkpoints; {:.0} samples rolled back",
        model.paper_model,
        model.checkpoint_ms / 1000.0,
        model.restart_ms / 1000.0,
        writing_total / 3_600_000.0,
        lost_total
    )];
    Ok(PeerRun {
        peer: Peer::Varuna,
        result: summarize(records, settings.interval_ms, settings.prices),
        notes,
    })
}

fn iteration_ms(profile: &ModelProfile, config: ParallelConfig) -> f64 {
    let sps = super::throughput(profile, config);
    if sps > 0.0 { f64::from(profile.global_batch_size) * 1000.0 / sps } else { f64::INFINITY }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::Prices;

    const PRICES: Prices = Prices { spot_usd_per_hour: 1.0, on_demand_usd_per_hour: 3.0 };

    /// Toy profile: 4 instances run (1, 4) or (2, 2) or (4, 1), all 40/s with a
    /// global batch of 40, so an iteration takes 1 s. Checkpoint every 10
    /// iterations for 5 s; restart 20 s; cold start free.
    #[test]
    fn a_preemption_loses_the_work_since_the_last_checkpoint() {
        let p = profile(0.0, 0.0);
        let c = constants();
        // Minute 0: 4 arrive. Minute 1: nothing. Minute 2: one preempted.
        let series = [stats(4, 4, 0), stats(4, 0, 0), stats(3, 0, 1)];
        let run = varuna(&p, &series, &c, &PeerSettings::new(60_000, PRICES)).unwrap();
        let r = &run.result.intervals;
        // Minute 0: a free cold start, then 60 s = four cycles of 10 s
        // training + 5 s checkpoint: 40 iterations, the last checkpoint
        // completes exactly at 60 s.
        assert_eq!(r[0].samples, 40.0 * 40.0);
        assert_eq!(r[0].kinds.restart, 1.0);
        // Minute 1: the same again.
        assert_eq!(r[1].samples, 40.0 * 40.0);
        assert_eq!(r[1].kinds.none, 1.0);
        // Minute 2: nothing to roll back (a checkpoint just completed); restart
        // 20 s, then 40 s: 2 cycles (30 s, 20 iterations) + 10 iterations.
        // 3 instances: best is (1, 2)... no: d x p <= 3 -> (3, 1) at 30/s, an
        // iteration of 40 samples takes 4/3 s.
        assert_eq!(r[2].lost_samples, 0.0);
        assert_eq!(r[2].kinds.restart, 1.0);
        assert_eq!(r[2].migration_ms, 20_000.0);
        // 40 s at 4/3 s per iteration: 10 iterations (13.3 s), 5 s checkpoint,
        // 10 iterations (13.3 s), 5 s checkpoint, then 3.33 s = 2.5 iterations.
        assert!((r[2].samples - 22.5 * 40.0).abs() < 1e-6, "{}", r[2].samples);

        // Preempted in the middle of a cycle: 4 instances for 50 s of training
        // after the cold start... use a 50 s interval: 10 it + 5 s + 10 it +
        // 5 s + 10 it + 5 s + 5 it; then a preemption loses those 5.
        let run = varuna(&p, &series[..], &c, &PeerSettings::new(50_000, PRICES)).unwrap();
        let r = &run.result.intervals;
        assert_eq!(r[0].samples, 35.0 * 40.0);
        // Interval 1 (no change): 5 more iterations finish the cycle (5 s),
        // checkpoint (5 s), 10 it + 5 s, 10 it + 5 s, then 10 it: the
        // interval ends just as the next checkpoint starts being written.
        assert_eq!(r[1].samples, 35.0 * 40.0);
        // Interval 2: the preemption rolls back the 10 iterations whose
        // checkpoint was still being written.
        assert_eq!(r[2].lost_samples, 10.0 * 40.0);
        assert_eq!(run.result.totals.lost_samples, 10.0 * 40.0);
        // Then restart 20 s and 30 s at (3, 1), 4/3 s per iteration: 10 it +
        // 5 s + 8.75 it; net of the rollback.
        assert!((r[2].samples - (18.75 * 40.0 - 400.0)).abs() < 1e-6, "{}", r[2].samples);
    }

    #[test]
    fn arrivals_wait_for_the_next_restart() {
        let p = profile(0.0, 0.0);
        let c = constants();
        // 2 instances, then 2 more arrive, then one is preempted.
        let series = [stats(2, 2, 0), stats(4, 2, 0), stats(3, 0, 1)];
        let run = varuna(&p, &series, &c, &PeerSettings::new(60_000, PRICES)).unwrap();
        let r = &run.result.intervals;
        // (2, 1) at 20/s, 2 s per iteration: 60 s = 10 it (20 s) + 5 s, twice,
        // then 10 s = 5 iterations.
        assert_eq!(r[0].config, Some(ParallelConfig::new(2, 1)));
        assert_eq!(r[0].samples, 25.0 * 40.0);
        // The arrivals wait: same layout, no restart, no pause.
        assert_eq!(r[1].config, Some(ParallelConfig::new(2, 1)));
        assert_eq!(r[1].kinds.none, 1.0);
        assert_eq!(r[1].transition_ms, 0.0);
        // The preemption restarts into the best layout for the 3 left.
        assert_eq!(r[2].config, Some(ParallelConfig::new(3, 1)));
        assert_eq!(r[2].kinds.restart, 1.0);
        assert_eq!(r[2].transition_ms, 20_000.0);
        assert!(run.notes[0].contains("1 interval(s) whose arrivals waited"), "{:?}", run.notes);
    }

    #[test]
    fn a_notice_that_fits_the_checkpoint_loses_nothing() {
        let p = profile(0.0, 0.0);
        let c = constants();
        // As in the 50 s case above: the preemption finds 10 iterations whose
        // checkpoint is still being written.
        let series = [stats(4, 4, 0), stats(4, 0, 0), stats(3, 0, 1)];
        let settings = PeerSettings::new(50_000, PRICES);
        let unannounced = varuna(&p, &series, &c, &settings).unwrap();
        assert_eq!(unannounced.result.intervals[2].lost_samples, 400.0);
        // A 4 s notice is shorter than the 5 s checkpoint: the same rollback.
        let short = varuna_with_notice(&p, &series, &c, &settings, 4_000).unwrap();
        assert_eq!(short.result.intervals[2].lost_samples, 400.0);
        // A 5 s notice fits it: checkpoint on the signal, within the restart.
        let run = varuna_with_notice(&p, &series, &c, &settings, 5_000).unwrap();
        let r = &run.result.intervals[2];
        assert_eq!(r.lost_samples, 0.0);
        assert_eq!(r.transition_ms, 20_000.0);
        // 30 s at (3, 1), 4/3 s per iteration: 10 it + 5 s + 8.75 it.
        assert!((r.samples - 18.75 * 40.0).abs() < 1e-6, "{}", r.samples);
    }

    #[test]
    fn young_interval() {
        let series = [stats(2, 2, 0), stats(1, 0, 1), stats(2, 1, 0), stats(1, 0, 1)];
        // 2 preemption events in 4 minutes: MTBF 120 s; C = 15 s: sqrt(2 x 15 x 120) = 60 s.
        assert_eq!(young_interval_ms(&series, 60_000, 15_000.0), Some(60_000.0));
        assert_eq!(young_interval_ms(&series[..1], 60_000, 15_000.0), None);
    }
}
