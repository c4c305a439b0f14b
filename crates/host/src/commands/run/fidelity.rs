//! Every run predicts itself: after the job, the simulator replays the fleet the run
//! actually had (its per-interval history: the instances it had and when, at the
//! wall-clock interval the job had) with the run's profile and the layouts the run
//! chose, and the policy decides once more on that history as `bench` would. The
//! summary and `events.json` then show measured against simulated, so every number
//! `bench`, `replay` and `provision` print comes with a check of the model behind it.

use parcae_cluster::MigrationKind;
use parcae_policy_core::{IntervalStats, ModelProfile, ParallelConfig};
use parcae_runtime::GuardedPolicy;
use std::collections::{BTreeMap, BTreeSet};

use parcae_cluster::WorkerId;
use parcae_policy_core::liveput::Placement;
use parcae_sim::{MigrationMode, Prices, SimResult, Simulator, Totals};
use serde::Serialize;

use super::report::{CheckpointReason, RunContext, RunEvent, Timed};
use super::told_cadence;
use crate::control::{self, ControlSettings};
use crate::record::{BenchRecord, RowKind, RowLabel};

/// One figure of the run, measured and simulated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// What is compared.
    pub metric: String,
    /// Its unit.
    pub unit: &'static str,
    /// What the run measured.
    pub measured: f64,
    /// What the simulator predicts for the same fleet and layouts.
    pub simulated: f64,
    /// `(simulated - measured) / measured`; `None` when nothing was measured.
    pub relative_error: Option<f64>,
}

impl Comparison {
    fn new(metric: impl Into<String>, unit: &'static str, measured: f64, simulated: f64) -> Self {
        let relative_error = (measured.abs() > 1e-9).then(|| (simulated - measured) / measured);
        Comparison { metric: metric.into(), unit, measured, simulated, relative_error }
    }
}

/// An interval where the run's layout and the replayed policy's differ.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Disagreement {
    /// The interval.
    pub interval: usize,
    /// The run's layout (D, P); `None`: paused.
    pub run: Option<(u32, u32)>,
    /// The layout the policy chose when replayed on the run's history.
    pub replayed: Option<(u32, u32)>,
}

/// How well the simulator predicted the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fidelity {
    /// The interval simulated, ms of wall-clock time (the run's replayed interval).
    pub interval_ms: u64,
    /// Intervals compared.
    pub intervals: usize,
    /// Measured against simulated, figure by figure.
    pub comparisons: Vec<Comparison>,
    /// Intervals in which the policy, replayed on the run's history, chose the run's layout.
    pub layouts_agree: usize,
    /// `layouts_agree / intervals`.
    pub layout_agreement: f64,
    /// The intervals where they differ (at most 20, the first ones).
    pub disagreements: Vec<Disagreement>,
    /// The replayed fleet was not exactly the history the run recorded: intervals whose
    /// counts were made consistent (an arrival or preemption the run did not count).
    pub adjusted_intervals: usize,
    /// Intervals whose preemptions the simulator scored with the run's own victims (which
    /// stage each preempted worker held); the others, in expectation over the victims.
    pub realized_intervals: usize,
    /// The inputs the simulator priced the run with that were not measured on this
    /// deployment (the embedded example profile, the embedded cost constants): its
    /// simulated times are theirs, so a reader is told why they differ and what measures
    /// this one.
    pub not_measured_here: Vec<String>,
}

/// What [`predict`] needs besides the events.
pub struct Inputs<'a> {
    /// The run's history: one entry per interval as its policy last saw it.
    pub history: &'a [IntervalStats],
    /// The run's profile.
    pub profile: &'a ModelProfile,
    /// What the run's policy was told (interval, horizon, largest fleet, recovery).
    pub control: &'a ControlSettings,
    /// The run's prices.
    pub prices: Prices,
}

/// The run's history made consistent for the simulator (`before - preempted + arrived =
/// instances` in every interval: a worker that died without being counted as preempted,
/// or a notice that came after the interval's count, leaves a gap), and how many
/// intervals needed it.
pub fn consistent_series(history: &[IntervalStats]) -> (Vec<IntervalStats>, usize) {
    let mut before = 0u32;
    let mut adjusted = 0;
    let series = history
        .iter()
        .map(|s| {
            let arrivals = s.arrivals.max(s.instances.saturating_sub(before));
            let preemptions = (u64::from(before) + u64::from(arrivals) - u64::from(s.instances)) as u32;
            if (arrivals, preemptions) != (s.arrivals, s.preemptions) {
                adjusted += 1;
            }
            before = s.instances;
            IntervalStats { instances: s.instances, arrivals, preemptions }
        })
        .collect();
    (series, adjusted)
}

/// The layout the run settled on in each interval: its last decision there (a re-plan
/// after a fleet change replaces the boundary's decision); an interval without one keeps
/// the layout before it.
pub fn run_layouts(events: &[Timed], intervals: usize) -> Vec<Option<ParallelConfig>> {
    let mut decided: Vec<Option<Option<ParallelConfig>>> = vec![None; intervals];
    for e in events {
        if let RunEvent::Decision { interval, config, .. } = &e.event
            && let Some(slot) = decided.get_mut(*interval)
        {
            *slot = Some(config.map(|(d, p)| ParallelConfig::new(d, p)));
        }
    }
    let mut current = None;
    decided
        .into_iter()
        .map(|d| {
            if let Some(config) = d {
                current = config;
            }
            current
        })
        .collect()
}

/// Who the run lost, interval by interval: the stage each preempted worker held (`None`: a
/// spare), counted toward the interval of the next decision as the run's history counts
/// them, and the layout the holders ran when each interval's first decision was made.
#[derive(Debug, Default, PartialEq)]
struct Victims {
    by_interval: Vec<Vec<Option<usize>>>,
    layout_at_start: Vec<Option<(usize, usize)>>,
}

fn victims(events: &[Timed], intervals: usize) -> Victims {
    let mut v = Victims { by_interval: vec![Vec::new(); intervals], layout_at_start: vec![None; intervals] };
    let mut holders: BTreeMap<WorkerId, usize> = BTreeMap::new();
    let mut layout = None;
    let mut pending = Vec::new();
    let mut gone = BTreeSet::new();
    let mut decided = vec![false; intervals];
    for e in events {
        match &e.event {
            RunEvent::Reconfigured { parked: false, holders: h, data_parallel, pipeline_stages, .. }
                if !h.is_empty() =>
            {
                holders = h.iter().copied().collect();
                layout = Some((*data_parallel, *pipeline_stages));
            }
            RunEvent::Notice { worker, .. }
            | RunEvent::Killed { worker, announced: false, .. }
            | RunEvent::Lost { worker }
                if gone.insert(*worker) =>
            {
                // A worker counts once: its notice, not the kill after it.
                pending.push(holders.get(worker).copied());
            }
            RunEvent::Decision { interval, .. } if *interval < intervals => {
                if !decided[*interval] {
                    decided[*interval] = true;
                    v.layout_at_start[*interval] = layout;
                }
                v.by_interval[*interval].append(&mut pending);
            }
            _ => {}
        }
    }
    v
}

impl Victims {
    /// The survivors of interval `k` when the run's victims fit the simulated transition
    /// (the same running layout, as many preemptions), else `None`: score the expectation.
    fn placement(
        &self,
        k: usize,
        from: Option<ParallelConfig>,
        before: u32,
        stats: &IntervalStats,
    ) -> Option<Placement> {
        let from = from?;
        let (d, p) = (from.data_parallel as usize, from.pipeline_stages as usize);
        if self.layout_at_start.get(k).copied().flatten() != Some((d, p)) {
            return None;
        }
        let lost = self.by_interval.get(k)?;
        if lost.len() != stats.preemptions as usize {
            return None;
        }
        let mut survivors = vec![from.data_parallel; p];
        let mut spares = before.checked_sub(from.instances() as u32)?;
        for victim in lost {
            match victim {
                Some(stage) => {
                    let s = survivors.get_mut(*stage)?;
                    *s = s.checked_sub(1)?;
                }
                None => spares = spares.checked_sub(1)?,
            }
        }
        Some(Placement { survivors_per_stage: survivors, spare_survivors: spares })
    }
}

/// What the run measured, from its events.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Measured {
    /// Steps committed (a step redone after a rollback counts again).
    steps: usize,
    samples_trained: f64,
    samples_rolled_back: f64,
    step_seconds: f64,
    /// Reconfigurations of a running job, by kind (the job's first start is apart).
    migration_seconds_by_kind: [f64; 5],
    cold_start_seconds: f64,
    reconfigurations: f64,
    paused_seconds: f64,
}

fn measure(events: &[Timed]) -> Measured {
    let mut m = Measured::default();
    // Paused from the start until the first layout runs, and after every pause.
    let mut paused_since = Some(0.0);
    for e in events {
        match &e.event {
            RunEvent::Step { samples, millis, .. } => {
                m.steps += 1;
                m.samples_trained += *samples as f64;
                m.step_seconds += millis / 1000.0;
            }
            RunEvent::RolledBack { samples, .. } => m.samples_rolled_back += *samples as f64,
            RunEvent::Reconfigured { cold_start, kind, millis, parked, .. } => {
                if *cold_start {
                    m.cold_start_seconds += millis / 1000.0;
                } else {
                    m.migration_seconds_by_kind[kind.index()] += millis / 1000.0;
                    if *kind != MigrationKind::None {
                        m.reconfigurations += 1.0;
                    }
                }
                // Moving state off leaving workers during a pause does not end it.
                if !parked && let Some(since) = paused_since.take() {
                    m.paused_seconds += (e.t_s - millis / 1000.0 - since).max(0.0);
                }
            }
            RunEvent::Paused { .. } => {
                paused_since.get_or_insert(e.t_s);
            }
            _ => {}
        }
    }
    m
}

/// The checkpoint interval, ms, whose half is the work a loss rolls back on average in
/// this run: the mean steps between its periodic checkpoints at its mean step period, plus
/// two of their mean writes (a loss during a write falls back to the one before, as
/// `parcae_sim::cadence` prices it). `None` with fewer than two periodic checkpoints.
///
/// The profile's `checkpoint_interval_ms` is a deployment's (30 minutes by default),
/// while `run` checkpoints every few steps (Young/Daly on its losses): simulated with the
/// profile's, one loss rolled back more work than the whole run had trained.
fn run_checkpoint_interval_ms(events: &[Timed], measured: &Measured) -> Option<f64> {
    let periodic: Vec<(u64, f64)> = events
        .iter()
        .filter_map(|e| match &e.event {
            RunEvent::Checkpointed { step, write_millis, reason: CheckpointReason::Periodic, .. } => {
                Some((*step, *write_millis))
            }
            _ => None,
        })
        .collect();
    // A rollback steps back: a checkpoint before an older step is no gap.
    let gaps: Vec<u64> = periodic.windows(2).filter_map(|w| w[1].0.checked_sub(w[0].0)).collect();
    if gaps.is_empty() || measured.steps == 0 {
        return None;
    }
    let mean_gap_steps = gaps.iter().sum::<u64>() as f64 / gaps.len() as f64;
    let step_ms = 1000.0 * measured.step_seconds / measured.steps as f64;
    let write_ms = periodic.iter().map(|(_, w)| w).sum::<f64>() / periodic.len() as f64;
    // `run` snapshots, then writes in the background.
    let interval = parcae_sim::cadence::rollback_interval_ms(mean_gap_steps * step_ms, write_ms, true);
    (interval.is_finite() && interval > 0.0).then_some(interval)
}

/// Simulates the run (see the module docs) and compares. `policy` is a fresh instance
/// of the run's policy, for the replayed decisions. Errors when the simulator refuses
/// the run's layouts (a layout the profile does not list).
pub fn predict(
    inputs: &Inputs<'_>,
    events: &[Timed],
    policy: &mut GuardedPolicy,
) -> Result<(Fidelity, SimResult), parcae_sim::SimError> {
    let (series, adjusted_intervals) = consistent_series(inputs.history);
    let layouts: Vec<Option<ParallelConfig>> = run_layouts(events, series.len())
        .into_iter()
        .zip(&series)
        // A decision made on a count the history later lowered (a loss counted after it)
        // cannot have run whole: the simulator scores it as a pause, as the run stalled.
        .map(|(c, s)| c.filter(|c| c.instances() <= u64::from(s.instances)))
        .collect();
    let control = inputs.control;
    let victims = victims(events, series.len());
    let m = measure(events);
    // Rollbacks at the run's own checkpoint cadence (the policy is replayed below on the
    // checkpoint intervals it was told, which follow the same cadence).
    let mut profile = inputs.profile.clone();
    if let Some(interval_ms) = run_checkpoint_interval_ms(events, &m) {
        profile.checkpoint_interval_ms = interval_ms;
    }
    let mut simulator =
        Simulator::with_recovery(&profile, control.interval_ms, MigrationMode::Live, control.recovery)?;
    let mut records = Vec::with_capacity(series.len());
    let mut realized_intervals = 0;
    for (k, (stats, &to)) in series.iter().zip(&layouts).enumerate() {
        let placement = victims.placement(k, simulator.current(), simulator.instances_before(), stats);
        records.push(match placement {
            Some(placement) => {
                realized_intervals += 1;
                simulator.step_realized(*stats, to, &placement)?
            }
            None => simulator.step(*stats, to)?,
        });
    }
    let result = parcae_sim::summarize(records, control.interval_ms, inputs.prices);
    // The policy is replayed on what it was told: each interval's checkpoint interval
    // (its last decision's), the profile's where none was recorded.
    let told: Vec<ModelProfile> = told_cadence::told_intervals(events, series.len())
        .into_iter()
        .map(|ms| told_cadence::profile_at(inputs.profile, ms))
        .collect();
    let replayed = control::replay_profiles(&series, |k| &told[k], policy, control, None, |_| {});
    let mut disagreements = Vec::new();
    let mut layouts_agree = 0;
    for (k, (run, again)) in layouts.iter().zip(&replayed).enumerate() {
        if *run == again.config {
            layouts_agree += 1;
        } else if disagreements.len() < 20 {
            let pair = |c: &Option<ParallelConfig>| c.map(|c| (c.data_parallel, c.pipeline_stages));
            disagreements.push(Disagreement { interval: k, run: pair(run), replayed: pair(&again.config) });
        }
    }
    let interval_s = control.interval_ms as f64 / 1000.0;
    let mut sim_by_kind = [0.0; 5];
    let (mut sim_training_s, mut sim_trained, mut sim_cold_s) = (0.0, 0.0, 0.0);
    let mut started = false;
    for r in &result.intervals {
        if !started && r.config.is_some() {
            // The job's first start, apart as in the run's summary.
            started = true;
            sim_cold_s += r.transition_ms / 1000.0;
        } else {
            for (k, ms) in r.transition_ms_by_kind.iter().enumerate() {
                sim_by_kind[k] += ms / 1000.0;
            }
        }
        if r.config.is_some() {
            sim_training_s += (interval_s - r.migration_ms / 1000.0).max(0.0);
            sim_trained += r.samples + r.lost_samples;
        }
    }
    let t = &result.totals;
    let mut comparisons = vec![
        Comparison::new(
            "samples (net of rollbacks)",
            "samples",
            m.samples_trained - m.samples_rolled_back,
            t.samples,
        ),
        Comparison::new(
            "throughput while training",
            "samples/s",
            ratio(m.samples_trained, m.step_seconds),
            ratio(sim_trained, sim_training_s),
        ),
        Comparison::new(
            "time migrating (job running)",
            "s",
            m.migration_seconds_by_kind.iter().sum(),
            sim_by_kind.iter().sum(),
        ),
    ];
    for kind in MigrationKind::ALL.into_iter().filter(|k| *k != MigrationKind::None) {
        let i = kind.index();
        comparisons.push(Comparison::new(
            format!("time migrating: {}", kind.as_str()),
            "s",
            m.migration_seconds_by_kind[i],
            sim_by_kind[i],
        ));
    }
    comparisons.extend([
        Comparison::new(
            "reconfigurations",
            "count",
            m.reconfigurations,
            t.migrations.total - t.cold_starts.min(1) as f64,
        ),
        Comparison::new("first start", "s", m.cold_start_seconds, sim_cold_s),
        Comparison::new("work rolled back", "samples", m.samples_rolled_back, t.lost_samples),
        Comparison::new("time paused", "s", m.paused_seconds, t.paused_intervals as f64 * interval_s),
    ]);
    let intervals = series.len();
    let fidelity = Fidelity {
        interval_ms: control.interval_ms,
        intervals,
        comparisons,
        layouts_agree,
        layout_agreement: if intervals > 0 { layouts_agree as f64 / intervals as f64 } else { 1.0 },
        disagreements,
        adjusted_intervals,
        realized_intervals,
        not_measured_here: Vec::new(),
    };
    Ok((fidelity, result))
}

/// The simulated run as a `bench --json` record (kind `simulated`) in the units of the
/// run's own record: hours of trace time (the simulation ran at the wall-clock interval,
/// which the replay stretches by the time scale).
pub fn simulated_record(context: &RunContext, control: &ControlSettings, totals: &Totals) -> BenchRecord {
    let scale = context.time_scale;
    let mut t = totals.clone();
    t.hours *= scale;
    t.samples_per_hour = if t.hours > 0.0 { t.samples / t.hours } else { 0.0 };
    t.migration_hours *= scale;
    t.instance_hours *= scale;
    t.usd_spot *= scale;
    t.usd_on_demand *= scale;
    let per_million = |usd: f64| (t.samples > 0.0).then(|| usd / t.samples * 1e6);
    t.usd_per_million_samples_spot = per_million(t.usd_spot);
    t.usd_per_million_samples_on_demand = per_million(t.usd_on_demand);
    let label = RowLabel {
        trace: context.trace.clone(),
        trace_path: context.trace_path.clone(),
        model: context.model.clone(),
        policy: context.policy.clone(),
        kind: RowKind::Simulated,
        policy_spec: Some(context.policy.clone()),
        interval_ms: context.interval_ms,
        horizon: control.horizon,
    };
    BenchRecord::from_totals(label, &t)
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

impl std::fmt::Display for Fidelity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "  simulated vs measured (the simulator replaying this run's fleet, {} intervals of {:.1} s):",
            self.intervals,
            self.interval_ms as f64 / 1000.0
        )?;
        writeln!(f, "    {:<28} {:>12} {:>12} {:>8}", "", "measured", "simulated", "error")?;
        for c in &self.comparisons {
            let error = c.relative_error.map_or("-".to_string(), |e| format!("{:+.1}%", e * 100.0));
            // Each kind's share indents under the total.
            let metric = match c.metric.strip_prefix("time migrating: ") {
                Some(kind) => format!("  of which {kind}"),
                None => c.metric.clone(),
            };
            writeln!(
                f,
                "    {:<28} {:>12} {:>12} {:>8}  {}",
                metric,
                format!("{:.2}", c.measured),
                format!("{:.2}", c.simulated),
                error,
                c.unit
            )?;
        }
        write!(
            f,
            "    layouts: replayed on this fleet, the policy chose the run's layout in {} of {} intervals ({:.0}%)",
            self.layouts_agree,
            self.intervals,
            self.layout_agreement * 100.0
        )?;
        if !self.not_measured_here.is_empty() {
            write!(
                f,
                "\n    priced with {}, not measured on this machine: the simulated times are those \
                 inputs', not this deployment's; `parcae-host profile` measures it (README, \
                 \"Does the simulator predict the run?\")",
                self.not_measured_here.join(" and ")
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(instances: u32, arrivals: u32, preemptions: u32) -> IntervalStats {
        IntervalStats { instances, arrivals, preemptions }
    }

    #[test]
    fn consistent_series_fills_in_uncounted_changes() {
        // 0 -> 4 (4 arrivals); 4 -> 3 with no preemption counted (a death the run saw as a
        // loss); 3 -> 5 with one arrival counted (a join that came after the count).
        let history = [stats(4, 4, 0), stats(3, 0, 0), stats(5, 1, 0), stats(5, 1, 1)];
        let (series, adjusted) = consistent_series(&history);
        assert_eq!(series, [stats(4, 4, 0), stats(3, 0, 1), stats(5, 2, 0), stats(5, 1, 1)]);
        assert_eq!(adjusted, 2);
    }

    fn timed(t_s: f64, event: RunEvent) -> Timed {
        Timed { t_s, event }
    }

    #[test]
    fn rollbacks_are_simulated_at_the_runs_own_checkpoint_cadence() {
        let step = || RunEvent::Step {
            step: 0,
            loss: 1.0,
            samples: 32,
            millis: 100.0,
            data_parallel: 1,
            pipeline_stages: 1,
        };
        let periodic = |step| RunEvent::Checkpointed {
            step,
            bytes: 1,
            millis: 1.0,
            write_millis: 20.0,
            reason: CheckpointReason::Periodic,
            location: String::new(),
        };
        let mut events: Vec<Timed> = (0..10).map(|k| timed(k as f64, step())).collect();
        assert_eq!(run_checkpoint_interval_ms(&events, &measure(&events)), None, "no checkpoint");
        events.push(timed(10.0, periodic(5)));
        assert_eq!(run_checkpoint_interval_ms(&events, &measure(&events)), None, "one checkpoint");
        // Every 5 steps of 100 ms, plus two writes of 20 ms; a rollback to step 5 and a
        // checkpoint at step 8 after it make no gap of their own.
        events.extend([timed(11.0, periodic(10)), timed(12.0, periodic(15)), timed(13.0, periodic(8))]);
        let interval = run_checkpoint_interval_ms(&events, &measure(&events)).unwrap();
        assert!((interval - 540.0).abs() < 1e-9, "{interval}");
    }

    #[test]
    fn measured_figures_come_from_the_events() {
        let reconfigured = |kind, millis: f64, parked| RunEvent::Reconfigured {
            epoch: 1,
            cold_start: kind == MigrationKind::Restart && millis == 500.0,
            rolled_back_steps: 0,
            step: 0,
            kind,
            data_parallel: 1,
            pipeline_stages: 1,
            bytes_moved: 0,
            bytes_sent: 0,
            bytes_from_checkpoint: 0,
            resent_chunks: 0,
            millis,
            parked,
            holders: Vec::new(),
            shares: Vec::new(),
        };
        let step = |samples| RunEvent::Step {
            step: 0,
            loss: 1.0,
            samples,
            millis: 500.0,
            data_parallel: 1,
            pipeline_stages: 1,
        };
        // The 500 ms restart is the job's first start (the closure marks it cold).
        let events = [
            timed(1.0, reconfigured(MigrationKind::Restart, 500.0, false)),
            timed(3.0, reconfigured(MigrationKind::Restart, 1000.0, false)),
            timed(3.5, step(32)),
            timed(4.0, step(32)),
            timed(5.0, RunEvent::Paused { step: 2, available: 0 }),
            timed(6.0, reconfigured(MigrationKind::InterStage, 250.0, true)),
            timed(9.0, reconfigured(MigrationKind::Repartition, 500.0, false)),
            timed(9.5, step(32)),
            timed(
                9.6,
                RunEvent::RolledBack {
                    steps: 1,
                    samples: 32,
                    cause: parcae_cluster::job::RollbackCause::Unannounced,
                },
            ),
        ];
        let m = measure(&events);
        assert_eq!(m.samples_trained, 96.0);
        assert_eq!(m.samples_rolled_back, 32.0);
        assert_eq!(m.step_seconds, 1.5);
        assert_eq!(m.reconfigurations, 3.0);
        assert_eq!(m.cold_start_seconds, 0.5);
        // Paused 0..0.5 s (the first start began at 0.5 s) and 5..8.5 s (the parking move
        // does not end the pause; the repartition began at 8.5 s).
        assert!((m.paused_seconds - 4.0).abs() < 1e-9, "{m:?}");
        let i = |k: MigrationKind| m.migration_seconds_by_kind[k.index()];
        assert_eq!((i(MigrationKind::Restart), i(MigrationKind::InterStage)), (1.0, 0.25));
    }

    #[test]
    fn victims_are_the_stages_the_preempted_workers_held() {
        let held = |holders: Vec<(WorkerId, usize)>| RunEvent::Reconfigured {
            epoch: 1,
            cold_start: false,
            rolled_back_steps: 0,
            step: 0,
            kind: MigrationKind::InterStage,
            data_parallel: 2,
            pipeline_stages: 2,
            bytes_moved: 0,
            bytes_sent: 0,
            bytes_from_checkpoint: 0,
            resent_chunks: 0,
            millis: 1.0,
            parked: false,
            holders,
            shares: Vec::new(),
        };
        let decision = |interval| RunEvent::Decision {
            interval,
            instances: 5,
            config: Some((2, 2)),
            source: "guest".into(),
            replan: false,
            checkpoint_interval_ms: None,
        };
        let notice = |worker| RunEvent::Notice {
            worker,
            node: format!("n{worker}"),
            grace_ms: 1000,
            source: "trace".into(),
            detail: None,
        };
        let events = [
            timed(0.0, decision(0)),
            timed(0.1, held(vec![(1, 0), (2, 1), (3, 0), (4, 1)])),
            // Interval 1: worker 2 (stage 1) under notice, then killed (counted once), and
            // spare 5 lost without notice.
            timed(4.0, notice(2)),
            timed(4.0, decision(1)),
            timed(5.0, RunEvent::Killed { worker: 2, node: "n2".into(), announced: true }),
            timed(5.5, RunEvent::Killed { worker: 5, node: "n5".into(), announced: false }),
            timed(5.6, decision(1)),
        ];
        let v = victims(&events, 3);
        assert_eq!(v.by_interval, [vec![], vec![Some(1), None], vec![]]);
        assert_eq!(v.layout_at_start, [None, Some((2, 2)), None]);
        let (from, lost_two) = (ParallelConfig::new(2, 2), stats(3, 0, 2));
        assert_eq!(
            v.placement(1, Some(from), 5, &lost_two),
            Some(Placement { survivors_per_stage: vec![2, 1], spare_survivors: 0 })
        );
        // Counts that do not match the run's victims, or another running layout: the
        // expectation instead.
        assert_eq!(v.placement(1, Some(from), 5, &stats(4, 0, 1)), None);
        assert_eq!(v.placement(1, Some(ParallelConfig::new(1, 2)), 5, &lost_two), None);
    }

    #[test]
    fn the_last_decision_of_an_interval_is_its_layout() {
        let decision = |interval, config| RunEvent::Decision {
            interval,
            instances: 4,
            config,
            source: "guest".into(),
            replan: false,
            checkpoint_interval_ms: None,
        };
        let events = [
            timed(0.0, decision(0, None)),
            timed(1.0, decision(0, Some((2, 2)))),
            timed(4.0, decision(2, Some((1, 4)))),
        ];
        assert_eq!(
            run_layouts(&events, 3),
            [
                Some(ParallelConfig::new(2, 2)),
                Some(ParallelConfig::new(2, 2)),
                Some(ParallelConfig::new(1, 4))
            ]
        );
    }

    /// A run priced with inputs measured elsewhere (the embedded example profile and the
    /// artifact's cost constants, as `scripts/run.sh` runs) shows time migrating off by
    /// orders of magnitude; the summary says why and what measures this machine, and
    /// says nothing when both were given.
    #[test]
    fn the_summary_names_inputs_not_measured_here() {
        let mut fidelity = Fidelity {
            interval_ms: 4_000,
            intervals: 2,
            comparisons: vec![Comparison::new("time migrating (job running)", "s", 0.5, 60.0)],
            layouts_agree: 2,
            layout_agreement: 1.0,
            disagreements: Vec::new(),
            adjusted_intervals: 0,
            realized_intervals: 0,
            not_measured_here: Vec::new(),
        };
        let measured = fidelity.to_string();
        assert!(!measured.contains("not measured"), "{measured}");
        fidelity.not_measured_here =
            vec!["the embedded example profile".into(), "the embedded cost constants".into()];
        let text = fidelity.to_string();
        assert!(
            text.contains(
                "priced with the embedded example profile and the embedded cost constants, not measured on this machine"
            ) && text.contains("`parcae-host profile` measures it"),
            "{text}"
        );
        assert!(text.starts_with(&measured), "the note comes after the table");
    }
}
