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
//! - `W`: the largest stage of the profile's deepest partition (the layouts a
//!   large fleet runs; every stage holder writes its own stage in parallel)
//!   written at the deployment's checkpoint write rate
//!   ([`Recovery::checkpoint_write_bytes_per_ms`]); without a write rate the
//!   profile is returned unchanged.
//! - `C`: what one checkpoint costs training. `run` snapshots the state into
//!   host memory and writes it in the background, so with a snapshot rate
//!   (`checkpoint_snapshot_gb_per_s` in the cost constants) `C` is that
//!   copy; without one, the write is priced as synchronous (`C = W`).
//! - `M`: the trace's length over the expected number of losses that roll
//!   back: for each interval, the chance that its preemptions take every
//!   replica of some stage of the throughput-optimal layout for the fleet
//!   before it (exact, from the cost model's distribution over which
//!   instances go), counting only the losses the notice cannot cover (the
//!   recovery rules of [`Recovery`]: a stage evacuated or checkpointed within
//!   the notice rolls nothing back). Replicated layouts rarely lose a whole
//!   stage, so a fleet of single preemptions needs few checkpoints; with a
//!   notice long enough for every stage none are needed and the cadence
//!   stays at the profile's. A notice too short for the largest stages (30 s
//!   for GPT-6.7B's, whose write takes longer) still needs them: before this
//!   counted the notice's losses, a 30 s notice rolled back more work than
//!   none (SkyPilot trace, GPT-6.7B, reactive: 158,302 samples against
//!   86,579 unannounced), the cadence staying at 30 minutes.
//! - The interval is `T = sqrt(2 C M)` (it minimises `C / T + (T / 2 + W) / M`),
//!   no shorter than `4 C` nor than the write `W` (a worker writes one
//!   checkpoint at a time), and every layout's throughput pays the share of
//!   time spent on checkpoints, `C / T`. A loss rolls back the work since the
//!   last checkpoint that finished writing: `T / 2` on average, plus `W` when
//!   the writes are asynchronous (a loss during a write falls back to the one
//!   before). The profile's `checkpoint_interval_ms` becomes `T` (synchronous)
//!   or `T + 2 W` (asynchronous), whose half is that rollback
//!   ([`parcae_policy_core::liveput::lost_work_ms`]).

//!
//! # Which losses: those seen so far
//!
//! `run` knows only the losses it has seen, so by default
//! ([`CadenceRule::SeenSoFar`], `bench --cadence seen-so-far`) each interval
//! `k` checkpoints at the cadence of the losses expected over intervals
//! `0..=k` (its own preemptions have happened when it starts) over the time
//! elapsed, `M = (k + 1) T / losses`, shorter as they come.
//!
//! Before the first loss there is no rate to go on, and the profile's 30
//! minutes (an MTBF of 15 days for GPT-6.7B's 1.3 s snapshot) left every cold
//! start exposed: on the g4dn look-alike, GPT-6.7B unannounced, the first loss
//! came at minute 16 and rolled back everything trained, which only the
//! Oracle, pausing the minute before, avoided (0.5% of its samples). So the
//! count is at least the chance that the *next* preemption rolls back, as if
//! it were due now ([`next_preemption_chances`]: for the throughput-optimal
//! layout of the fleet, under the notice): having run `t` without one, a
//! preemption within another `t` is taken as likely as not, the scale-free
//! guess, and the estimate the first loss will give, so the cadence grows as
//! `sqrt(t)` from a cold start and meets the observed one without a jump. A
//! replicated layout (no single preemption takes a whole stage) or a notice
//! that saves every stage counts nothing and keeps the profile's cadence, as
//! before; `run` keeps the same rule on its own layout
//! (`parcae_cluster::recovery::checkpoint_interval_steps`).
//!
//! The cadence is rounded to a grid of quarter
//! octaves below the profile's interval, so a plan's profile changes only when
//! the cadence moves by a step (a policy told a new profile every interval
//! would re-price every transition every interval). A rollback takes back
//! what the cadence of the interval that trained the work left at risk
//! ([`Cadenced`]; the simulator's `simulate_cadenced`, and the Oracle's plan
//! over the same profiles, `oracle_cadenced`), and the policies are told each
//! interval's profile. [`CadenceRule::WholeTrace`] is one cadence from the
//! whole trace's losses: a figure the first interval would not know, which
//! told the policy from the start how often the trace would lose a stage
//! (the tables of earlier rounds were measured under it).

use parcae_policy_core::liveput::transition_distribution_under;
use parcae_policy_core::reactive::best_config_for;
use parcae_policy_core::{IntervalStats, ModelProfile, ParallelConfig, Recovery};

/// The profile's checkpoint cadence and throughputs adjusted to the Young/Daly
/// interval for `series` under `recovery`, for checkpoints snapshotted at
/// `snapshot_bytes_per_ms` and written in the background (`None`: written
/// synchronously); see the module documentation.
pub fn with_young_daly_cadence(
    profile: &ModelProfile,
    series: &[IntervalStats],
    interval_ms: u64,
    recovery: &Recovery,
    snapshot_bytes_per_ms: Option<f64>,
) -> ModelProfile {
    let Some(costs) = CheckpointCosts::of(profile, recovery, snapshot_bytes_per_ms) else {
        return profile.clone();
    };
    let losses = expected_rollbacks(profile, series, recovery);
    match costs.cadence(profile, series.len() as f64 * interval_ms as f64, losses) {
        Some(cadence) => costs.apply(profile, cadence),
        None => profile.clone(),
    }
}

/// What a periodic checkpoint costs a deployment (see the module documentation).
#[derive(Debug, Clone, Copy)]
struct CheckpointCosts {
    /// `W`: writing the largest stage, ms.
    write_ms: f64,
    /// `C`: what one checkpoint takes from training, ms.
    cost_ms: f64,
    /// Whether the write goes on in the background (after a snapshot).
    asynchronous: bool,
}

impl CheckpointCosts {
    /// `None` without a write rate or stage sizes: the profile's cadence stands.
    fn of(profile: &ModelProfile, recovery: &Recovery, snapshot_bytes_per_ms: Option<f64>) -> Option<Self> {
        let bytes = largest_stage_bytes(profile)?;
        if recovery.checkpoint_write_bytes_per_ms <= 0.0 {
            return None;
        }
        let write_ms = recovery.checkpoint_write_ms(bytes);
        let snapshot = snapshot_bytes_per_ms.filter(|r| r.is_finite() && *r > 0.0);
        let cost_ms = snapshot.map_or(write_ms, |rate| bytes as f64 / rate);
        (cost_ms > 0.0).then_some(CheckpointCosts { write_ms, cost_ms, asynchronous: snapshot.is_some() })
    }

    /// The Young/Daly cadence for `losses` expected rollbacks over `elapsed_ms`,
    /// ms; `None` where it is the profile's (no loss, or past its interval).
    fn cadence(&self, profile: &ModelProfile, elapsed_ms: f64, losses: f64) -> Option<f64> {
        if losses <= 0.0 {
            return None;
        }
        let mean_between_ms = elapsed_ms / losses;
        let ceiling = profile.checkpoint_interval_ms;
        let cadence = (2.0 * self.cost_ms * mean_between_ms)
            .sqrt()
            .max(4.0 * self.cost_ms)
            .max(self.write_ms)
            .min(ceiling);
        (cadence.is_finite() && cadence > 0.0 && cadence < ceiling).then_some(cadence)
    }

    /// `profile` checkpointing every `cadence_ms`: its rollbacks and the
    /// throughput its checkpoints leave.
    fn apply(&self, profile: &ModelProfile, cadence_ms: f64) -> ModelProfile {
        let rollback_ms = rollback_interval_ms(cadence_ms, self.write_ms, self.asynchronous);
        checkpointing(profile, rollback_ms, 1.0 - self.cost_ms / cadence_ms)
    }
}

/// `profile` under a cadence whose rollbacks lose `rollback_ms` and whose
/// writes leave `keep` of the throughput, which every layout pays alike.
pub(crate) fn checkpointing(profile: &ModelProfile, rollback_ms: f64, keep: f64) -> ModelProfile {
    let mut adjusted = profile.clone();
    adjusted.checkpoint_interval_ms = rollback_ms;
    for config in &mut adjusted.configs {
        config.samples_per_second *= keep;
        if config.iteration_ms > 0.0 {
            config.iteration_ms /= keep;
        }
    }
    adjusted
}

/// Which losses the deployment's checkpoint cadence follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CadenceRule {
    /// The losses seen so far, as `parcae-host run` sets its own: each
    /// interval checkpoints at the Young/Daly cadence of the trace up to it
    /// (counting at least the chance that the next preemption rolls back, as
    /// if due now), on a grid of quarter octaves so
    /// that a plan's profile changes only when the cadence moves by a step.
    #[default]
    SeenSoFar,
    /// The whole trace's losses, one cadence throughout: a deployment figure
    /// that the first interval already knows (the tables of earlier rounds).
    WholeTrace,
}

/// Steps per octave of the grid a causal cadence is rounded to.
const CADENCE_STEPS_PER_OCTAVE: f64 = 4.0;

/// The profiles our rows train under, interval by interval: the checkpoint
/// cadence of [`CadenceRule`] priced into each (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct Cadenced {
    /// The distinct profiles of the intervals. The first is the base, what
    /// every transition is priced with and a rollback's ceiling is read off:
    /// the profile at its own cadence (causal) or at the trace's; every other
    /// one is a shorter cadence of it.
    profiles: Vec<ModelProfile>,
    /// Per interval, its entry of `profiles`.
    at: Vec<usize>,
}

impl Cadenced {
    /// `profile` under `rule` for `series` (see [`with_young_daly_cadence`]).
    pub fn new(
        rule: CadenceRule,
        profile: &ModelProfile,
        series: &[IntervalStats],
        interval_ms: u64,
        recovery: &Recovery,
        snapshot_bytes_per_ms: Option<f64>,
    ) -> Self {
        match rule {
            CadenceRule::WholeTrace => Self::constant(
                with_young_daly_cadence(profile, series, interval_ms, recovery, snapshot_bytes_per_ms),
                series.len(),
            ),
            CadenceRule::SeenSoFar => {
                Self::seen_so_far(profile, series, interval_ms, recovery, snapshot_bytes_per_ms)
            }
        }
    }

    /// `profile` in every one of `intervals`.
    pub fn constant(profile: ModelProfile, intervals: usize) -> Self {
        Cadenced { profiles: vec![profile], at: vec![0; intervals] }
    }

    fn seen_so_far(
        profile: &ModelProfile,
        series: &[IntervalStats],
        interval_ms: u64,
        recovery: &Recovery,
        snapshot_bytes_per_ms: Option<f64>,
    ) -> Self {
        let mut cadenced = Self::constant(profile.clone(), series.len());
        let Some(costs) = CheckpointCosts::of(profile, recovery, snapshot_bytes_per_ms) else {
            return cadenced;
        };
        let ceiling = profile.checkpoint_interval_ms;
        let mut steps: Vec<Option<i32>> = vec![None];
        let mut losses = 0.0;
        let due = next_preemption_chances(profile, series, recovery);
        for (k, chance) in rollback_chances(profile, series, recovery).into_iter().enumerate() {
            losses += chance;
            let elapsed_ms = (k + 1) as f64 * interval_ms as f64;
            // Quarter octaves below the profile's interval.
            let step = costs
                .cadence(profile, elapsed_ms, losses.max(due[k]))
                .map(|cadence| (CADENCE_STEPS_PER_OCTAVE * (ceiling / cadence).log2()).round() as i32)
                .filter(|&step| step > 0);
            let index = match steps.iter().position(|s| *s == step) {
                Some(index) => index,
                None => {
                    let step_down = f64::from(step.unwrap_or(0)) / CADENCE_STEPS_PER_OCTAVE;
                    let cadence = (ceiling / step_down.exp2()).max(4.0 * costs.cost_ms).max(costs.write_ms);
                    cadenced.profiles.push(costs.apply(profile, cadence));
                    steps.push(step);
                    steps.len() - 1
                }
            };
            cadenced.at[k] = index;
        }
        cadenced
    }

    /// The profile every transition is priced with (the layouts, their
    /// costs, and the lost work the planner scales per interval).
    pub fn base(&self) -> &ModelProfile {
        &self.profiles[0]
    }

    /// The profile interval `k` trains under (the base past the last).
    pub fn at(&self, k: usize) -> &ModelProfile {
        &self.profiles[self.at.get(k).copied().unwrap_or(0)]
    }

    /// Whether every interval trains under the base (one cadence throughout).
    pub fn is_constant(&self) -> bool {
        self.profiles.len() == 1
    }

    /// The planner's speeds for intervals `from..to` (`best_plan_varying`):
    /// the profile of the interval before `from` (the base before the first),
    /// then each interval's.
    pub fn speeds(&self, from: usize, to: usize) -> Vec<&ModelProfile> {
        let before = if from == 0 { self.base() } else { self.at(from - 1) };
        std::iter::once(before).chain((from..to).map(|k| self.at(k))).collect()
    }

    /// The most a rollback can take back: the base's interval at the fastest
    /// speed of any interval ([`parcae_policy_core::at_risk::ceiling_at`]), as
    /// the planner caps it.
    pub fn risk_ceiling(&self) -> f64 {
        let fastest = self
            .profiles
            .iter()
            .flat_map(|p| p.configs.iter().map(|c| c.samples_per_second))
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        parcae_policy_core::at_risk::ceiling_at(self.base(), fastest)
    }

    /// The interval ranges of each distinct cadence, for a note: `(first
    /// interval, rollback interval ms, share of throughput kept)`, in order.
    pub fn changes(&self) -> Vec<(usize, f64, f64)> {
        let mut out: Vec<(usize, f64, f64)> = Vec::new();
        let mut last = None;
        for (k, &i) in self.at.iter().enumerate() {
            if last != Some(i) {
                let p = &self.profiles[i];
                out.push((k, p.checkpoint_interval_ms, throughput_kept(self.base(), p)));
                last = Some(i);
            }
        }
        out
    }
}

/// The checkpoint interval whose half is the work a loss rolls back on
/// average, for checkpoints taken every `cadence_ms` whose writes take
/// `write_ms`: the cadence itself when written synchronously; asynchronously,
/// two writes more (a loss during a write falls back to the one before).
pub fn rollback_interval_ms(cadence_ms: f64, write_ms: f64, asynchronous: bool) -> f64 {
    if asynchronous { cadence_ms + 2.0 * write_ms } else { cadence_ms }
}

/// The share of `before`'s throughput `after` keeps (its checkpoints' cost),
/// read off the first layout; 1 when there is none to compare.
pub fn throughput_kept(before: &ModelProfile, after: &ModelProfile) -> f64 {
    match (after.configs.first(), before.configs.first()) {
        (Some(a), Some(b)) if b.samples_per_second > 0.0 => a.samples_per_second / b.samples_per_second,
        _ => 1.0,
    }
}

/// Expected losses that roll back over `series` under `recovery`: per
/// interval, the chance that the throughput-optimal layout of the fleet
/// before it loses every replica of some stage to the interval's preemptions
/// and the notice (if any) can neither evacuate that stage nor checkpoint it.
pub fn expected_rollbacks(profile: &ModelProfile, series: &[IntervalStats], recovery: &Recovery) -> f64 {
    rollback_chances(profile, series, recovery).into_iter().sum()
}

/// Per interval of `series`, the chance of a loss that rolls back
/// ([`expected_rollbacks`]' terms).
pub fn rollback_chances(profile: &ModelProfile, series: &[IntervalStats], recovery: &Recovery) -> Vec<f64> {
    let mut before = 0u32;
    series
        .iter()
        .map(|stats| {
            let best = (stats.preemptions > 0).then(|| best_config_for(profile, before)).flatten();
            let chance = best.map_or(0.0, |best| {
                let preempted = Preempted { count: stats.preemptions.min(before), arrivals: stats.arrivals };
                let after = best_config_for(profile, stats.instances).map(|c| c.config);
                rollback_chance(profile, recovery, best.config, before, preempted, after)
            });
            before = stats.instances;
            chance
        })
        .collect()
}

/// Per interval of `series`, the chance that one preemption of the fleet it
/// ends with rolls back ([`next_preemption_rollback_chance`] of that fleet's
/// throughput-optimal layout): the losses a cadence counts at least, the next
/// preemption taken as due now.
pub fn next_preemption_chances(
    profile: &ModelProfile,
    series: &[IntervalStats],
    recovery: &Recovery,
) -> Vec<f64> {
    let mut by_fleet = std::collections::HashMap::new();
    series
        .iter()
        .map(|stats| {
            *by_fleet.entry(stats.instances).or_insert_with(|| {
                best_config_for(profile, stats.instances).map_or(0.0, |best| {
                    next_preemption_rollback_chance(profile, recovery, best.config, stats.instances)
                })
            })
        })
        .collect()
}

/// The chance that one preemption of a fleet of `fleet` instances running
/// `layout` rolls back under `recovery`: it takes every replica of some stage
/// and the notice (if any) can neither evacuate that stage nor checkpoint it.
/// 0 for a replicated layout, or where the notice saves every stage; 0 too
/// where the cost model cannot price it.
pub fn next_preemption_rollback_chance(
    profile: &ModelProfile,
    recovery: &Recovery,
    layout: ParallelConfig,
    fleet: u32,
) -> f64 {
    let after = best_config_for(profile, fleet.saturating_sub(1)).map(|c| c.config);
    rollback_chance(profile, recovery, layout, fleet, Preempted { count: 1, arrivals: 0 }, after)
}

/// What an interval takes from and brings to a fleet.
#[derive(Debug, Clone, Copy)]
struct Preempted {
    count: u32,
    arrivals: u32,
}

/// The chance that `layout` on `fleet` instances loses work to `preempted`
/// (moving to `after`) under `recovery`; 0 where the cost model cannot price it.
fn rollback_chance(
    profile: &ModelProfile,
    recovery: &Recovery,
    layout: ParallelConfig,
    fleet: u32,
    preempted: Preempted,
    after: Option<ParallelConfig>,
) -> f64 {
    transition_distribution_under(
        profile,
        recovery,
        Some(layout),
        fleet,
        preempted.count,
        preempted.arrivals,
        after,
    )
    .map_or(0.0, |dist| dist.p_lost_work())
}

/// Bytes of the largest stage of the profile's deepest partition (`None`
/// without partitions).
fn largest_stage_bytes(profile: &ModelProfile) -> Option<u64> {
    let deepest = profile.partitions.iter().max_by_key(|p| p.pipeline_stages)?;
    deepest.state_bytes_per_stage.iter().copied().max()
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
        assert!((expected_rollbacks(&profile(), &series, &recovery) - 59.0).abs() < 1e-9);
        let adjusted = with_young_daly_cadence(&profile(), &series, 60_000, &recovery, None);
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
    fn an_asynchronous_snapshot_checkpoints_more_often_for_less_and_rolls_back_past_the_write() {
        // Snapshot at 10 kB/ms: C = 0.2 s; the write (2 s) goes on in the background.
        let recovery = Recovery { preemption_notice_ms: 0.0, checkpoint_write_bytes_per_ms: 1_000.0 };
        let series = churning(600, 10);
        let synchronous = with_young_daly_cadence(&profile(), &series, 60_000, &recovery, None);
        let snapshot = with_young_daly_cadence(&profile(), &series, 60_000, &recovery, Some(10_000.0));
        let cadence = (2.0f64 * 200.0 * 600.0 * 60_000.0 / 59.0).sqrt();
        // Half of the effective interval is the rollback: T / 2 + W.
        assert!((snapshot.checkpoint_interval_ms - (cadence + 2.0 * 2_000.0)).abs() < 1e-6);
        let keep = 1.0 - 200.0 / cadence;
        assert!((snapshot.configs[0].samples_per_second - 100.0 * keep).abs() < 1e-9);
        assert!(snapshot.configs[0].samples_per_second > synchronous.configs[0].samples_per_second);
        assert!(snapshot.checkpoint_interval_ms < synchronous.checkpoint_interval_ms);
        // A snapshot never checkpoints faster than one write takes.
        let fast = with_young_daly_cadence(&profile(), &churning(600, 2), 60_000, &recovery, Some(1e9));
        assert!((fast.checkpoint_interval_ms - (2_000.0 + 2.0 * 2_000.0)).abs() < 1e-6);
    }

    /// [`profile`] with one layout, 1x2: every stage has a single holder.
    fn unreplicated() -> ModelProfile {
        let mut profile = profile();
        profile.configs[0].config = ParallelConfig::new(1, 2);
        profile
    }

    fn calm(instances: u32, n: usize) -> Vec<IntervalStats> {
        (0..n)
            .map(|k| IntervalStats {
                instances,
                arrivals: if k == 0 { instances } else { 0 },
                preemptions: 0,
            })
            .collect()
    }

    #[test]
    fn the_next_preemption_rolls_back_only_where_one_loss_takes_a_whole_stage() {
        let unannounced = Recovery { preemption_notice_ms: 0.0, checkpoint_write_bytes_per_ms: 1_000.0 };
        let one_by_two = ParallelConfig::new(1, 2);
        let chance = |profile: &ModelProfile, recovery: &Recovery, layout, fleet| {
            next_preemption_rollback_chance(profile, recovery, layout, fleet)
        };
        // Both instances hold a stage; of four, half do.
        assert!((chance(&unreplicated(), &unannounced, one_by_two, 2) - 1.0).abs() < 1e-12);
        assert!((chance(&unreplicated(), &unannounced, one_by_two, 4) - 0.5).abs() < 1e-12);
        // Two replicas of each stage: one loss takes none.
        assert_eq!(chance(&profile(), &unannounced, ParallelConfig::new(2, 2), 4), 0.0);
        // A notice long enough to write the larger stage (2 s) saves it.
        let noticed = Recovery { preemption_notice_ms: 2_000.0, ..unannounced };
        assert_eq!(chance(&unreplicated(), &noticed, one_by_two, 2), 0.0);
    }

    #[test]
    fn before_the_first_loss_an_exposed_layout_checkpoints_as_if_one_were_due() {
        let unannounced = Recovery { preemption_notice_ms: 0.0, checkpoint_write_bytes_per_ms: 1_000.0 };
        let series = calm(2, 600);
        let cadenced =
            Cadenced::new(CadenceRule::SeenSoFar, &unreplicated(), &series, 60_000, &unannounced, None);
        let interval = |k: usize| cadenced.at(k).checkpoint_interval_ms;
        // C = 2 s; after 600 calm minutes Young/Daly on M = 600 min is about 6.3 minutes,
        // on the quarter-octave grid below the profile's 30.
        let young_daly = (2.0f64 * 2_000.0 * 600.0 * 60_000.0).sqrt();
        assert!((interval(599) / young_daly).log2().abs() <= 0.125 + 1e-9, "{}", interval(599));
        // Shorter at the start, longer as the run goes on without a loss; never longer than
        // the profile's.
        assert!(interval(0) < interval(60) && interval(60) < interval(599), "{:?}", cadenced.changes());
        assert!((0..600).all(|k| interval(k) <= unreplicated().checkpoint_interval_ms));
        // A replicated layout, or a notice that saves every stage, keeps the profile's.
        let replicated =
            Cadenced::new(CadenceRule::SeenSoFar, &profile(), &calm(4, 600), 60_000, &unannounced, None);
        assert!(replicated.is_constant());
        let noticed = Recovery { preemption_notice_ms: 2_000.0, ..unannounced };
        assert!(
            Cadenced::new(CadenceRule::SeenSoFar, &unreplicated(), &series, 60_000, &noticed, None)
                .is_constant()
        );
    }

    #[test]
    fn single_preemptions_of_a_replicated_layout_roll_nothing_back() {
        let single: Vec<IntervalStats> = (0..600)
            .map(|k| {
                let lost = u32::from(k > 0 && k % 10 == 0);
                IntervalStats { instances: 4, arrivals: if k == 0 { 4 } else { lost }, preemptions: lost }
            })
            .collect();
        assert_eq!(expected_rollbacks(&profile(), &single, &Recovery::UNANNOUNCED), 0.0);
    }

    #[test]
    fn a_notice_too_short_to_save_a_stage_checkpoints_as_if_unannounced() {
        // The larger stage takes 2 s to write; wipes leave no one to evacuate to.
        let unannounced = Recovery { preemption_notice_ms: 0.0, checkpoint_write_bytes_per_ms: 1_000.0 };
        let short = Recovery { preemption_notice_ms: 1_000.0, ..unannounced };
        let series = churning(600, 10);
        assert!((expected_rollbacks(&profile(), &series, &short) - 59.0).abs() < 1e-9);
        assert_eq!(
            with_young_daly_cadence(&profile(), &series, 60_000, &short, None),
            with_young_daly_cadence(&profile(), &series, 60_000, &unannounced, None),
        );
        // Long enough for the write: nothing rolls back.
        let enough = Recovery { preemption_notice_ms: 2_000.0, ..unannounced };
        assert_eq!(expected_rollbacks(&profile(), &series, &enough), 0.0);
    }

    #[test]
    fn a_notice_or_a_calm_fleet_keeps_the_profile() {
        let noticed = Recovery { preemption_notice_ms: 120_000.0, checkpoint_write_bytes_per_ms: 1_000.0 };
        assert_eq!(
            with_young_daly_cadence(&profile(), &churning(600, 10), 60_000, &noticed, None),
            profile()
        );
        let unannounced = Recovery { preemption_notice_ms: 0.0, checkpoint_write_bytes_per_ms: 1_000.0 };
        // One loss in 10 days: Young/Daly is past the profile's 30 minutes.
        assert_eq!(
            with_young_daly_cadence(&profile(), &churning(14_400, 14_400), 60_000, &unannounced, None),
            profile()
        );
        // No write rate: nothing to compute with.
        let no_rate = Recovery::UNANNOUNCED;
        assert_eq!(
            with_young_daly_cadence(&profile(), &churning(600, 10), 60_000, &no_rate, None),
            profile()
        );
    }
}
