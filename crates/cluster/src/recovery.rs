//! How a job survives losing its workers: when to take periodic checkpoints,
//! and what to do when a notice would leave some layer without a holder.
//!
//! Announced losses (a notice) cost nothing if the state leaves in time:
//! evacuate it to workers that stay when the transfer fits the notice, else
//! write an emergency checkpoint within it. Only unannounced losses, and
//! announced ones whose state the notice could not save (neither finished
//! within it), roll work back, so the periodic cadence is
//! set from their observed rate alone (Young/Daly: interval = sqrt(2 x
//! checkpoint cost x mean time between losses)). Before the first such loss
//! the next one is taken as due now, counted by the chance that it rolls back
//! on the running layout (the cost model's rule, `parcae_sim::cadence`): a
//! layout whose every stage one loss can take checkpoints as if one had come,
//! a replicated one keeps [`DEFAULT_CHECKPOINT_STEPS`].

use std::time::Duration;

/// Steps between periodic checkpoints before any loss that rolls back was
/// seen or could be priced (none could on a replicated layout).
pub const DEFAULT_CHECKPOINT_STEPS: u64 = 20;
/// Fewest steps between periodic checkpoints: even a cheap asynchronous
/// snapshot copies every layer, and a worker writes one checkpoint at a time.
pub const MIN_CHECKPOINT_STEPS: u64 = 5;
/// Most steps between periodic checkpoints: bounds the loss when the rate
/// estimate (from few losses) is too optimistic.
pub const MAX_CHECKPOINT_STEPS: u64 = 200;

/// What the job has observed so far, for the cadence.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LossObservations {
    /// Wall time the job has run.
    pub elapsed: Duration,
    /// Holders lost without notice.
    pub unannounced_losses: u32,
    /// Notices whose stranded state could not be saved in time (neither the
    /// evacuation nor the emergency checkpoint finished within the notice):
    /// they roll back as an unannounced loss does, so they count the same for
    /// the cadence.
    pub failed_notice_saves: u32,
    /// The chance that the next loss of a worker rolls back on the running
    /// layout (the cost model's, under the deployment's notice; 0 when none
    /// would): counted as a loss until one is seen (so only
    /// [`Self::awaits_first_loss`] needs it priced).
    pub next_loss_rollback_chance: f64,
    /// Mean wall time one checkpoint blocks training (the snapshot), if any was taken.
    pub checkpoint_cost: Option<Duration>,
    /// Mean wall time of one committed step, if any.
    pub step_time: Option<Duration>,
}

impl LossObservations {
    /// No loss that rolls back was seen yet: the only time the next one's
    /// chance counts (it is at most 1, one seen loss).
    pub fn awaits_first_loss(&self) -> bool {
        self.unannounced_losses == 0 && self.failed_notice_saves == 0
    }
}

/// Steps between periodic checkpoints: `explicit` when given (`--checkpoint-every`),
/// else Young/Daly from `seen` (its losses, at least the chance that the next
/// rolls back), clamped to [`MIN_CHECKPOINT_STEPS`, `MAX_CHECKPOINT_STEPS`];
/// [`DEFAULT_CHECKPOINT_STEPS`] until a checkpoint and a step were observed, or
/// while no loss was seen and none could roll back.
pub fn checkpoint_interval_steps(explicit: Option<u64>, seen: &LossObservations) -> u64 {
    if let Some(steps) = explicit {
        return steps.max(1);
    }
    let (Some(cost), Some(step)) = (seen.checkpoint_cost, seen.step_time) else {
        return DEFAULT_CHECKPOINT_STEPS;
    };
    let seen_losses = f64::from(seen.unannounced_losses + seen.failed_notice_saves);
    let losses = seen_losses.max(seen.next_loss_rollback_chance);
    if losses <= 0.0 || step.is_zero() {
        return DEFAULT_CHECKPOINT_STEPS;
    }
    let mtbf = seen.elapsed.as_secs_f64() / losses;
    let interval = (2.0 * cost.as_secs_f64() * mtbf).sqrt();
    let steps = (interval / step.as_secs_f64()).round();
    (steps as u64).clamp(MIN_CHECKPOINT_STEPS, MAX_CHECKPOINT_STEPS)
}

/// What to do with state that a notice would strand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeRecovery {
    /// Move it to workers that stay (a live migration or parking).
    Evacuate,
    /// Write it to disk from the leaving holders before they go.
    EmergencyCheckpoint,
}

/// Evacuate when some worker stays and the stranded bytes fit the time left of
/// the notice at the transfer rate seen so far (an unknown rate counts as
/// fitting: the first evacuation measures it); otherwise checkpoint.
pub fn notice_recovery(
    stranded_bytes: u64,
    workers_staying: usize,
    bytes_per_second: Option<f64>,
    time_left: Duration,
) -> NoticeRecovery {
    if workers_staying == 0 {
        return NoticeRecovery::EmergencyCheckpoint;
    }
    match bytes_per_second {
        Some(rate) if rate > 0.0 && stranded_bytes as f64 / rate > time_left.as_secs_f64() => {
            NoticeRecovery::EmergencyCheckpoint
        }
        _ => NoticeRecovery::Evacuate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(losses: u32, elapsed_s: u64, cost_ms: u64, step_ms: u64) -> LossObservations {
        LossObservations {
            elapsed: Duration::from_secs(elapsed_s),
            unannounced_losses: losses,
            failed_notice_saves: 0,
            next_loss_rollback_chance: 0.0,
            checkpoint_cost: Some(Duration::from_millis(cost_ms)),
            step_time: Some(Duration::from_millis(step_ms)),
        }
    }

    #[test]
    fn the_cadence_follows_young_daly_within_its_bounds() {
        assert_eq!(checkpoint_interval_steps(Some(7), &seen(3, 100, 10, 100)), 7, "explicit wins");
        assert_eq!(checkpoint_interval_steps(None, &LossObservations::default()), DEFAULT_CHECKPOINT_STEPS);
        assert_eq!(checkpoint_interval_steps(None, &seen(0, 600, 50, 100)), DEFAULT_CHECKPOINT_STEPS);
        // One loss in 400 s, 0.5 s per checkpoint: sqrt(2 * 0.5 * 400) = 20 s = 100 steps of 0.2 s.
        assert_eq!(checkpoint_interval_steps(None, &seen(1, 400, 500, 200)), 100);
        // Four times the loss rate halves the interval.
        assert_eq!(checkpoint_interval_steps(None, &seen(4, 400, 500, 200)), 50);
        assert_eq!(checkpoint_interval_steps(None, &seen(50, 10, 1, 200)), MIN_CHECKPOINT_STEPS);
        assert_eq!(checkpoint_interval_steps(None, &seen(1, 100_000, 5_000, 10)), MAX_CHECKPOINT_STEPS);
    }

    #[test]
    fn before_the_first_loss_the_next_counts_by_its_chance_to_roll_back() {
        // No loss in 400 s, but the next takes a whole stage with chance 1/4: M = 1600 s,
        // sqrt(2 * 0.5 * 1600) = 40 s = 200 steps of 0.2 s.
        let exposed = LossObservations { next_loss_rollback_chance: 0.25, ..seen(0, 400, 500, 200) };
        assert_eq!(checkpoint_interval_steps(None, &exposed), 200);
        // Every loss would: M = 400 s, as after one loss.
        let bare = LossObservations { next_loss_rollback_chance: 1.0, ..seen(0, 400, 500, 200) };
        assert_eq!(
            checkpoint_interval_steps(None, &bare),
            checkpoint_interval_steps(None, &seen(1, 400, 500, 200))
        );
        // Early in the run the cadence is short; it lengthens as the run goes on without one.
        let early = LossObservations { next_loss_rollback_chance: 1.0, ..seen(0, 10, 500, 200) };
        assert!(checkpoint_interval_steps(None, &early) < checkpoint_interval_steps(None, &bare));
        assert!(bare.awaits_first_loss() && !seen(1, 400, 500, 200).awaits_first_loss());
        // Seen losses count once they outnumber the chance.
        let seen_two = LossObservations { next_loss_rollback_chance: 0.25, ..seen(4, 400, 500, 200) };
        assert_eq!(checkpoint_interval_steps(None, &seen_two), 50);
    }

    #[test]
    fn a_notice_that_could_not_save_the_state_counts_as_a_loss() {
        let failed =
            LossObservations { unannounced_losses: 0, failed_notice_saves: 4, ..seen(0, 400, 500, 200) };
        assert_eq!(checkpoint_interval_steps(None, &failed), 50);
        let mixed =
            LossObservations { unannounced_losses: 2, failed_notice_saves: 2, ..seen(0, 400, 500, 200) };
        assert_eq!(checkpoint_interval_steps(None, &mixed), 50);
    }

    #[test]
    fn a_notice_evacuates_only_when_someone_stays_and_the_transfer_fits() {
        let left = Duration::from_secs(2);
        assert_eq!(notice_recovery(1_000, 0, Some(1e9), left), NoticeRecovery::EmergencyCheckpoint);
        assert_eq!(notice_recovery(1_000, 1, Some(1e6), left), NoticeRecovery::Evacuate);
        assert_eq!(notice_recovery(10_000_000, 1, Some(1e6), left), NoticeRecovery::EmergencyCheckpoint);
        assert_eq!(notice_recovery(10_000_000, 1, None, left), NoticeRecovery::Evacuate);
    }
}
