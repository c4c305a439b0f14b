//! The periodic checkpoint cadence a deployment runs at, as the cost model
//! sees it: how much work an unannounced loss rolls back, and what the
//! checkpoints themselves cost.
//!
//! # Why
//!
//! The profile's `checkpoint_interval_ms` is a fixed 30 minutes: an
//! unannounced loss of a stage then rolls back 15 minutes on average, whatever
//! the preemption rate. `parcae-host run` instead checkpoints at the
//! Young/Daly interval `sqrt(2 C M)` for a checkpoint cost `C` and a mean time
//! `M` between unannounced losses (issue 16), as Varuna does. Scoring the runs
//! of a trace with the fixed interval would charge the system for rollbacks it
//! does not have, and charge them to every row alike except the peers that
//! model their own cadence.
//!
//! # The model
//!
//! - `C`: the largest stage of the profile's deepest partition (the layouts a
//!   large fleet runs; every stage holder writes its own stage in parallel)
//!   written at the deployment's checkpoint write rate
//!   ([`Recovery::checkpoint_write_bytes_per_ms`]); without a write rate the
//!   profile is returned unchanged.
//! - `M`: the trace's length over the expected number of losses that roll
//!   back: for each interval, the chance that its preemptions take every
//!   replica of some stage of the throughput-optimal layout for the fleet
//!   before it (exact, from the cost model's distribution over which
//!   instances go). Replicated layouts rarely lose a whole stage, so a fleet
//!   of single preemptions needs few checkpoints. With a notice no loss rolls
//!   back (the stage is evacuated or checkpointed in the notice) and the
//!   cadence stays at the profile's.
//! - The interval is `sqrt(2 C M)`, clamped to `[4 C, profile's interval]`,
//!   and every layout's throughput pays the share of time spent writing,
//!   `C / interval` (a synchronous write: an upper bound on the asynchronous
//!   snapshots `run` takes). The rollback of an unannounced loss is then half
//!   that interval ([`parcae_policy_core::liveput::lost_work_ms`]).

use parcae_policy_core::liveput::transition_distribution_under;
use parcae_policy_core::reactive::best_config_for;
use parcae_policy_core::{IntervalStats, ModelProfile, Recovery};

/// The profile's checkpoint cadence and throughputs adjusted to the Young/Daly
/// interval for `series` under `recovery` (see the module documentation).
pub fn with_young_daly_cadence(
    profile: &ModelProfile,
    series: &[IntervalStats],
    interval_ms: u64,
    recovery: &Recovery,
) -> ModelProfile {
    let mut adjusted = profile.clone();
    let Some(cost_ms) = checkpoint_cost_ms(profile, recovery) else {
        return adjusted;
    };
    let losses = if recovery.announced() { 0.0 } else { expected_rollbacks(profile, series) };
    if losses <= 0.0 || cost_ms <= 0.0 {
        return adjusted;
    }
    let mean_between_ms = series.len() as f64 * interval_ms as f64 / losses;
    let ceiling = profile.checkpoint_interval_ms;
    let cadence = (2.0 * cost_ms * mean_between_ms).sqrt().max(4.0 * cost_ms).min(ceiling);
    if !(cadence.is_finite() && cadence > 0.0) || cadence >= ceiling {
        return adjusted;
    }
    adjusted.checkpoint_interval_ms = cadence;
    let keep = 1.0 - cost_ms / cadence;
    for config in &mut adjusted.configs {
        config.samples_per_second *= keep;
        config.iteration_ms /= keep;
    }
    adjusted
}

/// Expected unannounced losses that roll back over `series`: per interval,
/// the chance that the throughput-optimal layout of the fleet before it loses
/// every replica of some stage to the interval's preemptions.
pub fn expected_rollbacks(profile: &ModelProfile, series: &[IntervalStats]) -> f64 {
    let mut before = 0u32;
    let mut expected = 0.0;
    for stats in series {
        if stats.preemptions > 0
            && let Some(layout) = best_config_for(profile, before).map(|c| c.config)
        {
            let preempted = stats.preemptions.min(before);
            let after = best_config_for(profile, stats.instances).map(|c| c.config);
            if let Ok(dist) = transition_distribution_under(
                profile,
                &Recovery::UNANNOUNCED,
                Some(layout),
                before,
                preempted,
                stats.arrivals,
                after,
            ) {
                expected += dist.outcomes.iter().filter(|o| o.lost_work).map(|o| o.probability).sum::<f64>();
            }
        }
        before = stats.instances;
    }
    expected
}

/// Time to write the largest stage of the profile's deepest partition, ms
/// (`None` without partitions or a write rate).
fn checkpoint_cost_ms(profile: &ModelProfile, recovery: &Recovery) -> Option<f64> {
    if recovery.checkpoint_write_bytes_per_ms <= 0.0 {
        return None;
    }
    let deepest = profile.partitions.iter().max_by_key(|p| p.pipeline_stages)?;
    let largest = deepest.state_bytes_per_stage.iter().copied().max()?;
    Some(recovery.checkpoint_write_ms(largest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use parcae_policy_core::{ConfigProfile, ParallelConfig, StagePartition};

    fn profile() -> ModelProfile {
        ModelProfile {
            model: "toy".into(),
            global_batch_size: 8,
            micro_batch_size: 1,
            configs: vec![ConfigProfile {
                config: ParallelConfig::new(2, 2),
                samples_per_second: 100.0,
                iteration_ms: 80.0,
                comm_rebuild_add_ms: 0.0,
                comm_rebuild_remove_ms: 0.0,
                model_build_ms: 0.0,
            }],
            partitions: vec![StagePartition {
                pipeline_stages: 2,
                layers_per_stage: vec![1, 1],
                state_bytes_per_stage: vec![1_000_000, 2_000_000],
            }],
            transfer_curve: vec![],
            rendezvous_ms: 0.0,
            process_start_ms: 0.0,
            add_extra_ms: 0.0,
            checkpoint_restart_ms: 14_000.0,
            checkpoint_interval_ms: 1_800_000.0,
        }
    }

    /// Four instances (layout 2x2) that all go and come back every
    /// `every` intervals: every such interval wipes every stage.
    fn churning(n: usize, every: usize) -> Vec<IntervalStats> {
        (0..n)
            .map(|k| {
                let lost = if k > 0 && k % every == 0 { 4 } else { 0 };
                IntervalStats { instances: 4, arrivals: if k == 0 { 4 } else { lost }, preemptions: lost }
            })
            .collect()
    }

    #[test]
    fn unannounced_losses_shorten_the_cadence_and_cost_throughput() {
        // 2 MB at 1 kB/ms: C = 2 s; a wipe every 10 minutes (59 in 600
        // intervals): M = 600 / 59 min; Young/Daly sqrt(2 C M).
        let recovery = Recovery { preemption_notice_ms: 0.0, checkpoint_write_bytes_per_ms: 1_000.0 };
        let series = churning(600, 10);
        assert!((expected_rollbacks(&profile(), &series) - 59.0).abs() < 1e-9);
        let adjusted = with_young_daly_cadence(&profile(), &series, 60_000, &recovery);
        let expected = (2.0f64 * 2_000.0 * 600.0 * 60_000.0 / 59.0).sqrt();
        assert!(
            (adjusted.checkpoint_interval_ms - expected).abs() < 1e-6,
            "{}",
            adjusted.checkpoint_interval_ms
        );
        let keep = 1.0 - 2_000.0 / expected;
        assert!((adjusted.configs[0].samples_per_second - 100.0 * keep).abs() < 1e-9);
    }

    #[test]
    fn single_preemptions_of_a_replicated_layout_roll_nothing_back() {
        let single: Vec<IntervalStats> = (0..600)
            .map(|k| {
                let lost = u32::from(k > 0 && k % 10 == 0);
                IntervalStats { instances: 4, arrivals: if k == 0 { 4 } else { lost }, preemptions: lost }
            })
            .collect();
        assert_eq!(expected_rollbacks(&profile(), &single), 0.0);
    }

    #[test]
    fn a_notice_or_a_calm_fleet_keeps_the_profile() {
        let noticed = Recovery { preemption_notice_ms: 120_000.0, checkpoint_write_bytes_per_ms: 1_000.0 };
        assert_eq!(with_young_daly_cadence(&profile(), &churning(600, 10), 60_000, &noticed), profile());
        let unannounced = Recovery { preemption_notice_ms: 0.0, checkpoint_write_bytes_per_ms: 1_000.0 };
        // One loss in 10 days: Young/Daly is past the profile's 30 minutes.
        assert_eq!(
            with_young_daly_cadence(&profile(), &churning(14_400, 14_400), 60_000, &unannounced),
            profile()
        );
        // No write rate: nothing to compute with.
        let no_rate = Recovery::UNANNOUNCED;
        assert_eq!(with_young_daly_cadence(&profile(), &churning(600, 10), 60_000, &no_rate), profile());
    }
}
