//! The checkpoint interval `run` tells its policy: the one the run keeps, not
//! the profile's.
//!
//! # Why
//!
//! The policy prices a loss that rolls back at half the profile's
//! `checkpoint_interval_ms` of training ([`parcae_policy_core::liveput::lost_work_ms`]).
//! A profile states a deployment's interval (30 minutes by default), while
//! `run` checkpoints every few steps (Young/Daly on the losses it has seen,
//! `parcae_cluster::recovery`). Told the profile's, the policy believed every
//! unannounced loss would cost 15 minutes and planned for that: in the
//! simulator, the default policy told 30 minutes where the deployment
//! checkpoints at its Young/Daly cadence trained 0.40 of the samples on the
//! g4dn trace with GPT-6.7B unannounced and 0.08 on the g4dn look-alike.
//! `bench` tells the policy the cadence it scores every row at; `run` now
//! tells the one it runs at.

use parcae_policy_core::ModelProfile;
use parcae_policy_core::reactive::best_config_for;

use super::report::{RunEvent, Timed};

/// The checkpoint interval whose half is what a loss rolls back in this run,
/// ms: `cadence_steps` steps of `step_ms` each (the mean of the recent steps;
/// before any, the profile's iteration time of the fastest layout that fits
/// `instances_now`, what the job is about to run), plus two background writes
/// of `write_ms` (a loss during a write falls back to the checkpoint before,
/// as `parcae_sim::cadence` prices it; 0 before any write finished). `None`
/// when nothing gives a step time: the profile's interval stands.
pub fn checkpoint_interval_ms(
    profile: &ModelProfile,
    cadence_steps: u64,
    step_ms: Option<f64>,
    write_ms: Option<f64>,
    instances_now: u32,
) -> Option<f64> {
    let step_ms = step_ms
        .filter(|ms| ms.is_finite() && *ms > 0.0)
        .or_else(|| best_config_for(profile, instances_now).map(|c| c.iteration_ms))?;
    let write_ms = write_ms.filter(|ms| ms.is_finite() && *ms >= 0.0).unwrap_or(0.0);
    let interval = parcae_sim::cadence::rollback_interval_ms(cadence_steps as f64 * step_ms, write_ms, true);
    (interval.is_finite() && interval > 0.0).then_some(interval)
}

/// `profile` with `checkpoint_interval_ms` (when given) as the one the run keeps.
pub fn profile_at(profile: &ModelProfile, checkpoint_interval_ms: Option<f64>) -> ModelProfile {
    let mut told = profile.clone();
    if let Some(ms) = checkpoint_interval_ms {
        told.checkpoint_interval_ms = ms;
    }
    told
}

/// Per interval, the checkpoint interval the policy was told when it last decided it
/// (`None`: the profile's, as in logs of runs before the run told its own).
pub fn told_intervals(events: &[Timed], intervals: usize) -> Vec<Option<f64>> {
    let mut told = vec![None; intervals];
    for e in events {
        if let RunEvent::Decision { interval, checkpoint_interval_ms, .. } = &e.event
            && let Some(slot) = told.get_mut(*interval)
        {
            *slot = *checkpoint_interval_ms;
        }
    }
    told
}

#[cfg(test)]
mod tests {
    use super::*;
    use parcae_policy_core::liveput::lost_work_ms;
    use parcae_policy_core::{ConfigProfile, ParallelConfig};

    fn timed(t_s: f64, event: RunEvent) -> Timed {
        Timed { t_s, event }
    }

    fn profile() -> ModelProfile {
        let config = |d, p, iteration_ms: f64| ConfigProfile {
            config: ParallelConfig::new(d, p),
            samples_per_second: 1000.0 / iteration_ms * f64::from(d),
            iteration_ms,
            comm_rebuild_add_ms: 0.0,
            comm_rebuild_remove_ms: 0.0,
            model_build_ms: 0.0,
        };
        ModelProfile {
            checkpoint_interval_ms: 1_800_000.0,
            configs: vec![config(1, 2, 400.0), config(2, 2, 500.0)],
            ..ModelProfile::empty("toy", 8, 1)
        }
    }

    #[test]
    fn the_run_s_steps_and_writes_set_the_interval() {
        // 20 steps of 250 ms and two writes of 100 ms: a loss rolls back 2.6 s on average.
        let ms = checkpoint_interval_ms(&profile(), 20, Some(250.0), Some(100.0), 4).unwrap();
        assert_eq!(ms, 5_200.0);
        let told = profile_at(&profile(), Some(ms));
        assert_eq!(lost_work_ms(&told), 2_600.0);
        assert_eq!(told.configs, profile().configs, "only the interval changes");
    }

    #[test]
    fn before_any_step_the_profile_s_fastest_fitting_layout_gives_the_step_time() {
        // 4 instances fit 2x2 (faster than 1x2): 10 steps of its 500 ms, no write yet.
        assert_eq!(checkpoint_interval_ms(&profile(), 10, None, None, 4), Some(5_000.0));
        // 2 instances fit only 1x2.
        assert_eq!(checkpoint_interval_ms(&profile(), 10, None, None, 2), Some(4_000.0));
        // Nothing fits and no step was seen: the profile's interval stands.
        assert_eq!(checkpoint_interval_ms(&profile(), 10, None, None, 1), None);
        assert_eq!(profile_at(&profile(), None).checkpoint_interval_ms, 1_800_000.0);
    }

    #[test]
    fn a_step_time_that_is_no_time_is_not_believed() {
        assert_eq!(checkpoint_interval_ms(&profile(), 10, Some(0.0), None, 4), Some(5_000.0));
        assert_eq!(checkpoint_interval_ms(&profile(), 10, Some(f64::NAN), Some(f64::NAN), 2), Some(4_000.0));
    }

    /// The policy is replayed on the checkpoint interval it was told when it last decided
    /// each interval; where nothing was recorded (older logs), on the profile's.
    #[test]
    fn the_last_decision_of_an_interval_says_what_the_policy_was_told() {
        let decision = |interval, told| RunEvent::Decision {
            interval,
            instances: 4,
            config: Some((2, 2)),
            source: "guest".into(),
            replan: false,
            checkpoint_interval_ms: told,
        };
        let events = [
            timed(0.0, decision(0, Some(9_000.0))),
            timed(1.0, decision(0, Some(6_000.0))),
            timed(4.0, decision(2, None)),
            timed(5.0, decision(7, Some(1.0))),
        ];
        assert_eq!(told_intervals(&events, 3), [Some(6_000.0), None, None]);
    }
}
