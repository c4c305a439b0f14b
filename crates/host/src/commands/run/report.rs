//! What a run tells its user: a live progress line, the event log (JSON), a
//! final summary and an SVG of loss and throughput over time.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use parcae_cluster::job::RollbackCause;
use parcae_cluster::{MigrationKind, WorkerId};
use serde::{Deserialize, Serialize};

use crate::record::{BenchRecord, PolicyHealth, RowKind};
use crate::svg::{Area, Svg};

/// One thing that happened, as written to the event log (and read back from the
/// durable job state on `run --resume`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum RunEvent {
    Allocated {
        worker: WorkerId,
        node: String,
    },
    Joined {
        worker: WorkerId,
        /// The instance type it reported (a mixed fleet); empty when it said none.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        instance_type: String,
    },
    Refused {
        remote: String,
        reason: String,
    },
    /// A preemption notice: from the replayed trace (`source` "trace") or read by the
    /// worker from its cloud's metadata service (`source` "aws", "gcp", "azure"; `detail`
    /// is what the service said).
    Notice {
        worker: WorkerId,
        node: String,
        grace_ms: u64,
        source: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    Killed {
        worker: WorkerId,
        node: String,
        announced: bool,
    },
    Lost {
        worker: WorkerId,
    },
    /// `replan`: made mid-interval because the fleet changed.
    Decision {
        interval: usize,
        instances: u32,
        config: Option<(u32, u32)>,
        source: String,
        replan: bool,
        /// The checkpoint interval the policy was told, ms (the run's own; `None`: the
        /// profile's, and in logs of older runs).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        checkpoint_interval_ms: Option<f64>,
    },
    Reconfigured {
        epoch: u64,
        /// The job's first layout (nothing to migrate yet).
        cold_start: bool,
        /// Committed steps undone by a restart from the checkpoint.
        rolled_back_steps: u64,
        step: u64,
        kind: MigrationKind,
        data_parallel: usize,
        pipeline_stages: usize,
        bytes_moved: u64,
        bytes_sent: u64,
        bytes_from_checkpoint: u64,
        resent_chunks: u64,
        millis: f64,
        /// State moved off leaving workers during a pause (no training layout).
        parked: bool,
        /// The stage each worker holds afterwards (worker, stage): the run's prediction of
        /// itself tells a preempted holder from a spare by it. Empty in logs of older runs.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        holders: Vec<(WorkerId, usize)>,
        /// Micro-batches per replica when the replicas run at different speeds (a mixed
        /// fleet); empty for the even split.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        shares: Vec<usize>,
    },
    Paused {
        step: u64,
        available: usize,
    },
    Step {
        step: u64,
        loss: f64,
        samples: u64,
        millis: f64,
        data_parallel: usize,
        pipeline_stages: usize,
    },
    Aborted {
        step: u64,
        reason: String,
    },
    /// A checkpoint became complete (its marker is written).
    Checkpointed {
        step: u64,
        bytes: u64,
        /// Wall time training waited for it (the in-memory snapshot, for a periodic one).
        millis: f64,
        /// Wall time of the slowest stage's write (overlapping training, for a periodic one).
        write_millis: f64,
        reason: CheckpointReason,
        /// Where it is: a directory, or a URL (`s3://bucket/prefix/checkpoints/step-...`).
        location: String,
    },
    /// Committed work undone by a restart from an older checkpoint.
    RolledBack {
        steps: u64,
        samples: u64,
        cause: RollbackCause,
    },
    /// The periodic checkpoint cadence changed (Young/Daly on the observed losses).
    Cadence {
        every_steps: u64,
        unannounced_losses: u32,
        /// Notices whose stranded state could not be saved in time.
        #[serde(default)]
        failed_notice_saves: u32,
    },
    Failure {
        what: String,
    },
    /// The job resumed after its host died (`run --resume`): from the newest complete
    /// checkpoint, losing the steps committed after it.
    Resumed {
        /// The step training goes on from (the checkpoint's).
        from_step: u64,
        /// The last step the dead host recorded as committed.
        last_committed_step: u64,
        /// Committed steps lost (trained again from the same samples).
        lost_steps: u64,
        /// The checkpoint resumed from (None: none existed, back to step 0).
        checkpoint: Option<String>,
    },
}

/// Why a checkpoint was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckpointReason {
    /// The cadence was due (snapshot in memory, written in the background).
    Periodic,
    /// A notice would have left some layer without a holder.
    Emergency,
    /// The end of the run.
    Final,
    /// Training paused: the state written while nothing trains.
    Pause,
}

/// An event with its time since the start of the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Timed {
    pub t_s: f64,
    #[serde(flatten)]
    pub event: RunEvent,
}

/// The run's totals.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub wall_seconds: f64,
    pub steps: u64,
    pub samples: u64,
    pub samples_per_second: f64,
    pub first_loss: Option<f64>,
    pub final_loss: Option<f64>,
    pub reconfigurations: usize,
    pub migrations_none: usize,
    pub migrations_intra_stage: usize,
    pub migrations_inter_stage: usize,
    pub migrations_repartition: usize,
    pub migrations_restart: usize,
    pub cold_starts: usize,
    pub bytes_moved: u64,
    pub resent_chunks: u64,
    pub aborted_steps: usize,
    pub preemptions: usize,
    pub unannounced_kills: usize,
    pub allocations: usize,
    /// Wall time spent in reconfigurations (live migrations and restarts).
    pub migration_seconds: f64,
    /// Wall time training waited for checkpoints (all reasons).
    pub checkpoint_seconds: f64,
    pub periodic_checkpoints: usize,
    pub emergency_checkpoints: usize,
    /// Checkpoints written as training paused (no training time lost).
    pub pause_checkpoints: usize,
    /// Wall time training waited for periodic checkpoints over the training
    /// wall time (steps plus those waits): what the cadence costs.
    pub periodic_checkpoint_fraction: f64,
    /// Committed work undone because a holder vanished without notice.
    pub rolled_back_steps_unannounced: u64,
    pub rolled_back_samples_unannounced: u64,
    /// Committed work undone because a notice was too short to save the state.
    pub rolled_back_steps_notice_too_short: u64,
    pub rolled_back_samples_notice_too_short: u64,
    /// Mean time from starting a worker process to its joining.
    pub worker_start_seconds: Option<f64>,
    /// What checkpoint-restart would have spent at the same fleet changes:
    /// per change, a worker start plus a checkpoint load plus redoing the
    /// steps since the last checkpoint, all measured in this run.
    pub checkpoint_restart_estimate_seconds: f64,
    /// Where the newest complete checkpoint is (a directory, or a URL).
    pub last_checkpoint: Option<String>,
    /// Times the job resumed after its host died, and the committed steps those resumes lost.
    pub resumes: usize,
    pub steps_lost_to_host_failures: u64,
    /// The run as a `parcae-host bench --json` record, in trace time, so a
    /// real run and its simulation line up field by field.
    pub bench: Option<BenchRecord>,
    /// The simulator's prediction of this run (kind `simulated`), in the same units as
    /// `bench`: the run's fleet and layouts replayed at its wall-clock interval.
    pub simulated: Option<BenchRecord>,
    /// Measured against simulated, figure by figure, and how often the policy replayed
    /// on the run's fleet chose the run's layout.
    pub fidelity: Option<super::fidelity::Fidelity>,
}

/// What the run was, for the bench-shaped record.
#[derive(Debug, Clone)]
pub struct RunContext {
    pub trace: String,
    pub trace_path: String,
    pub model: String,
    pub policy: String,
    pub interval_ms: u64,
    pub horizon: u32,
    pub intervals: usize,
    /// Trace seconds per wall second.
    pub time_scale: f64,
    pub global_batch: u64,
    pub prices: parcae_sim::Prices,
}

/// Collects events, shows progress and writes the outputs.
pub struct RunLog {
    context: Option<RunContext>,
    /// Metrics served for scrapes (`--metrics-addr`), updated with every event.
    metrics: Option<std::sync::Arc<super::metrics::RunMetrics>>,
    start: Instant,
    /// The wall clock at `start`, so event times line up with other clocks (a worker's, a
    /// test's).
    started: std::time::SystemTime,
    /// The run's clock at `start`.
    offset: std::time::Duration,
    events: Vec<Timed>,
    /// The fleet per interval as the policy last saw it (for the run's simulation).
    history: Vec<parcae_policy_core::IntervalStats>,
    bar: Option<ProgressBar>,
    summary: Summary,
}

impl Default for RunLog {
    fn default() -> Self {
        Self::new()
    }
}

impl RunLog {
    pub fn new() -> Self {
        RunLog {
            context: None,
            metrics: None,
            start: Instant::now(),
            started: std::time::SystemTime::now(),
            offset: std::time::Duration::ZERO,
            events: Vec::new(),
            history: Vec::new(),
            bar: None,
            summary: Summary::default(),
        }
    }

    /// What the run is, for the bench-shaped record of the summary.
    pub fn with_context(mut self, context: RunContext) -> Self {
        self.context = Some(context);
        self
    }

    /// Updates `metrics` with every event from now on.
    pub fn with_metrics(mut self, metrics: std::sync::Arc<super::metrics::RunMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The policy's call and fault counters so far (for the metrics).
    pub fn policy_counts(
        &self,
        predictor: &parcae_runtime::FaultCounts,
        optimizer: &parcae_runtime::FaultCounts,
    ) {
        if let Some(metrics) = &self.metrics {
            metrics.observe_policy(predictor, optimizer);
        }
    }

    /// Starts the clock and, on a terminal, the progress line. `offset`: the run's clock
    /// at `start` (non-zero when the job resumed after its host died), so event times go on
    /// from the dead host's.
    pub fn start(&mut self, start: Instant, offset: std::time::Duration) {
        self.start = start;
        self.offset = offset;
        self.started = std::time::SystemTime::now() - start.elapsed() - offset;
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if !bar.is_hidden() {
            bar.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}").expect("valid template"),
            );
            bar.enable_steady_tick(std::time::Duration::from_millis(200));
            self.bar = Some(bar);
        }
    }

    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// The events so far, the dead host's first on a resumed run.
    pub fn events(&self) -> &[Timed] {
        &self.events
    }

    /// The fleet per interval as the policy last saw it, once the job is over.
    pub fn set_history(&mut self, history: Vec<parcae_policy_core::IntervalStats>) {
        self.history = history;
    }

    /// The fleet per interval as the policy last saw it ([`RunLog::set_history`]).
    pub fn history(&self) -> &[parcae_policy_core::IntervalStats] {
        &self.history
    }

    /// The run's context (trace, model, scale), if given.
    pub fn context(&self) -> Option<&RunContext> {
        self.context.as_ref()
    }

    /// Adds the simulator's prediction of the run to the summary.
    pub fn set_fidelity(&mut self, fidelity: super::fidelity::Fidelity, simulated: BenchRecord) {
        self.summary.fidelity = Some(fidelity);
        self.summary.simulated = Some(simulated);
    }

    /// Takes over the events a dead host recorded (`run --resume`).
    pub fn restore(&mut self, events: Vec<Timed>) {
        self.events = events;
    }

    /// Records an event and updates the progress line.
    pub fn event(&mut self, event: RunEvent) {
        let t_s = (self.start.elapsed() + self.offset).as_secs_f64();
        tracing::debug!(?event, "run event");
        self.events.push(Timed { t_s, event });
        if let (Some(metrics), Some(last)) = (&self.metrics, self.events.last()) {
            metrics.observe(&last.event, rate_over_last(&self.events, 10.0));
        }
        if let Some(bar) = &self.bar {
            bar.set_message(self.progress_line());
        }
    }

    /// step, loss, samples/s, instances, configuration, migrations.
    fn progress_line(&self) -> String {
        let mut step = 0;
        let mut loss = None;
        let mut config = None;
        let mut migrations = 0;
        let mut instances = 0i64;
        for e in &self.events {
            match &e.event {
                RunEvent::Step { step: s, loss: l, data_parallel, pipeline_stages, .. } => {
                    step = s + 1;
                    loss = Some(*l);
                    config = Some((*data_parallel, *pipeline_stages));
                }
                RunEvent::Reconfigured { kind, .. } if *kind != MigrationKind::None => migrations += 1,
                RunEvent::Joined { .. } => instances += 1,
                RunEvent::Killed { .. } | RunEvent::Lost { .. } => instances -= 1,
                _ => {}
            }
        }
        let rate = rate_over_last(&self.events, 10.0);
        format!(
            "step {step} | loss {} | {rate:.1} samples/s | {instances} workers | {} | {migrations} migrations",
            loss.map_or("-".to_string(), |l| format!("{l:.4}")),
            config.map_or("paused".to_string(), |(d, p)| format!("D={d} P={p}")),
        )
    }

    /// Closes the log: computes the summary.
    pub fn finish(&mut self, steps: u64, last_checkpoint: Option<String>, health: Option<PolicyHealth>) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        let wall_seconds = (self.start.elapsed() + self.offset).as_secs_f64();
        self.summary = summarise(&self.events, wall_seconds, steps, last_checkpoint);
        self.summary.bench =
            self.context.as_ref().map(|c| bench_record(c, &self.events, &self.summary, health));
    }

    /// The event log and summary as one JSON document.
    pub fn write_json(&self, path: &Path, settings: serde_json::Value) -> anyhow::Result<()> {
        let started_unix_ms =
            self.started.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let doc = serde_json::json!({
            "settings": settings,
            "started_unix_ms": started_unix_ms,
            "summary": self.summary,
            "events": self.events,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))
    }

    /// Loss and throughput over time.
    pub fn write_svg(&self, path: &Path) -> anyhow::Result<()> {
        std::fs::write(path, plot(&self.events)).with_context(|| format!("writing {}", path.display()))
    }
}

/// Samples per second over the last `window` seconds of steps.
fn rate_over_last(events: &[Timed], window: f64) -> f64 {
    let Some(last) = events.last() else { return 0.0 };
    let from = last.t_s - window;
    let samples: u64 = events
        .iter()
        .filter(|e| e.t_s >= from)
        .filter_map(|e| match e.event {
            RunEvent::Step { samples, .. } => Some(samples),
            _ => None,
        })
        .sum();
    let span = (last.t_s - from.max(0.0)).max(1e-3);
    samples as f64 / span
}

fn summarise(events: &[Timed], wall_seconds: f64, steps: u64, last_checkpoint: Option<String>) -> Summary {
    let mut s = Summary { wall_seconds, steps, last_checkpoint, ..Summary::default() };
    let mut step_millis = Vec::new();
    let mut load_millis = Vec::new();
    let mut allocated_at = std::collections::BTreeMap::new();
    let mut start_times = Vec::new();
    let mut last_checkpoint_step = 0u64;
    let mut changes_steps_lost = Vec::new();
    let mut periodic_wait_seconds = 0.0;
    for e in events {
        match &e.event {
            RunEvent::Step { loss, samples, millis, .. } => {
                s.samples += samples;
                s.first_loss.get_or_insert(*loss);
                s.final_loss = Some(*loss);
                step_millis.push(*millis);
            }
            RunEvent::Reconfigured { cold_start: true, .. } => s.cold_starts += 1,
            RunEvent::Reconfigured { kind, step, bytes_sent, resent_chunks, millis, .. } => {
                s.reconfigurations += 1;
                s.bytes_moved += bytes_sent;
                s.resent_chunks += resent_chunks;
                s.migration_seconds += millis / 1000.0;
                match kind {
                    MigrationKind::None => s.migrations_none += 1,
                    MigrationKind::IntraStage => s.migrations_intra_stage += 1,
                    MigrationKind::InterStage => s.migrations_inter_stage += 1,
                    MigrationKind::Repartition => s.migrations_repartition += 1,
                    MigrationKind::Restart => {
                        s.migrations_restart += 1;
                        load_millis.push(*millis);
                    }
                }
                changes_steps_lost.push(step.saturating_sub(last_checkpoint_step));
            }
            RunEvent::Checkpointed { step, millis, reason, .. } => {
                s.checkpoint_seconds += millis / 1000.0;
                match reason {
                    CheckpointReason::Periodic => {
                        s.periodic_checkpoints += 1;
                        periodic_wait_seconds += millis / 1000.0;
                    }
                    CheckpointReason::Emergency => s.emergency_checkpoints += 1,
                    CheckpointReason::Pause => s.pause_checkpoints += 1,
                    CheckpointReason::Final => {}
                }
                last_checkpoint_step = *step;
            }
            RunEvent::RolledBack { steps, samples, cause } => match cause {
                RollbackCause::Unannounced => {
                    s.rolled_back_steps_unannounced += steps;
                    s.rolled_back_samples_unannounced += samples;
                }
                RollbackCause::NoticeTooShort => {
                    s.rolled_back_steps_notice_too_short += steps;
                    s.rolled_back_samples_notice_too_short += samples;
                }
            },
            RunEvent::Aborted { .. } => s.aborted_steps += 1,
            RunEvent::Resumed { lost_steps, .. } => {
                s.resumes += 1;
                s.steps_lost_to_host_failures += lost_steps;
            }
            RunEvent::Notice { .. } => s.preemptions += 1,
            RunEvent::Killed { announced: false, .. } => {
                s.preemptions += 1;
                s.unannounced_kills += 1;
            }
            RunEvent::Allocated { worker, .. } => {
                s.allocations += 1;
                allocated_at.insert(*worker, e.t_s);
            }
            RunEvent::Joined { worker, .. } => {
                if let Some(t) = allocated_at.get(worker) {
                    start_times.push(e.t_s - t);
                }
            }
            _ => {}
        }
    }
    s.samples_per_second = if wall_seconds > 0.0 { s.samples as f64 / wall_seconds } else { 0.0 };
    let mean = |v: &[f64]| if v.is_empty() { None } else { Some(v.iter().sum::<f64>() / v.len() as f64) };
    s.worker_start_seconds = mean(&start_times);
    let training_seconds = step_millis.iter().sum::<f64>() / 1000.0 + periodic_wait_seconds;
    s.periodic_checkpoint_fraction =
        if training_seconds > 0.0 { periodic_wait_seconds / training_seconds } else { 0.0 };
    let step_s = mean(&step_millis).unwrap_or(0.0) / 1000.0;
    // A checkpoint load is measured by the restarts of this run; without one,
    // use the checkpoint write time as its stand-in (same bytes, same disk).
    let checkpoints = events.iter().filter(|e| matches!(e.event, RunEvent::Checkpointed { .. })).count();
    let load_s = mean(&load_millis).map(|m| m / 1000.0).unwrap_or(if checkpoints > 0 {
        s.checkpoint_seconds / checkpoints as f64
    } else {
        0.0
    });
    let start_s = s.worker_start_seconds.unwrap_or(0.0);
    // A fold from +0.0: an empty f64 `sum()` is -0.0, printed "-0.00 s".
    s.checkpoint_restart_estimate_seconds = changes_steps_lost
        .iter()
        .map(|&lost| start_s + load_s + lost as f64 * step_s)
        .fold(0.0, |a, b| a + b);
    s
}

fn bench_record(c: &RunContext, events: &[Timed], s: &Summary, health: Option<PolicyHealth>) -> BenchRecord {
    let hours = c.intervals as f64 * c.interval_ms as f64 / 3.6e6;
    let (mut alive, mut last_t, mut alive_seconds) = (0i64, 0.0, 0.0);
    let mut rolled_back = 0u64;
    let mut config_changes = 0;
    let mut paused_intervals = 0;
    let mut last_config = None;
    for e in events {
        alive_seconds += alive.max(0) as f64 * (e.t_s - last_t);
        last_t = e.t_s;
        match &e.event {
            RunEvent::Joined { .. } => alive += 1,
            RunEvent::Killed { .. } | RunEvent::Lost { .. } => alive -= 1,
            RunEvent::Decision { config: None, replan: false, .. } => paused_intervals += 1,
            RunEvent::Reconfigured {
                rolled_back_steps,
                data_parallel,
                pipeline_stages,
                parked: false,
                ..
            } => {
                rolled_back += rolled_back_steps;
                let config = Some((*data_parallel, *pipeline_stages));
                if last_config.is_some() && config != last_config {
                    config_changes += 1;
                }
                last_config = config;
            }
            _ => {}
        }
    }
    let samples = (s.steps * c.global_batch) as f64;
    let instance_hours = alive_seconds * c.time_scale / 3600.0;
    let usd_spot = instance_hours * c.prices.spot_usd_per_hour;
    let usd_on_demand = instance_hours * c.prices.on_demand_usd_per_hour;
    let per_million = |usd: f64| (samples > 0.0).then(|| usd / samples * 1e6);
    let migrations =
        [s.migrations_intra_stage, s.migrations_inter_stage, s.migrations_repartition, s.migrations_restart];
    BenchRecord {
        trace: c.trace.clone(),
        trace_path: c.trace_path.clone(),
        model: c.model.clone(),
        policy: c.policy.clone(),
        kind: RowKind::Run,
        policy_spec: Some(c.policy.clone()),
        interval_ms: c.interval_ms,
        horizon: c.horizon,
        intervals: c.intervals,
        hours,
        samples,
        lost_samples: (rolled_back * c.global_batch) as f64,
        samples_per_hour: if hours > 0.0 { samples / hours } else { 0.0 },
        pct_of_ideal: None,
        pct_of_oracle: None,
        migrations_intra_stage: s.migrations_intra_stage as f64,
        migrations_inter_stage: s.migrations_inter_stage as f64,
        migrations_repartition: s.migrations_repartition as f64,
        migrations_restart: s.migrations_restart as f64,
        migrations_total: migrations.iter().sum::<usize>() as f64,
        cold_starts: s.cold_starts,
        config_changes,
        paused_intervals,
        migration_hours: s.migration_seconds * c.time_scale / 3600.0,
        instance_hours,
        usd_spot,
        usd_on_demand,
        usd_per_million_samples_spot: per_million(usd_spot),
        usd_per_million_samples_on_demand: per_million(usd_on_demand),
        policy_expected_samples: None,
        predictor_guest_answers: health.as_ref().map(|h| h.predictor_guest_answers),
        predictor_fallbacks: health.as_ref().map(|h| h.predictor_fallbacks),
        optimizer_guest_answers: health.as_ref().map(|h| h.optimizer_guest_answers),
        optimizer_fallbacks: health.as_ref().map(|h| h.optimizer_fallbacks),
        policy_faults: health.as_ref().map(|h| h.faults),
        predictor_heaviest_fuel: health.as_ref().map(|h| h.predictor_heaviest_fuel),
        optimizer_heaviest_fuel: health.as_ref().map(|h| h.optimizer_heaviest_fuel),
        fuel_per_call: health.as_ref().map(|h| h.fuel_per_call),
        artifact_not_profiled: None,
        artifact_does_not_fit: None,
        artifact_missing_intervals: None,
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "run finished in {:.1} s", self.wall_seconds)?;
        writeln!(
            f,
            "  steps {}  samples {}  throughput {:.2} samples/s",
            self.steps, self.samples, self.samples_per_second
        )?;
        if let (Some(a), Some(b)) = (self.first_loss, self.final_loss) {
            writeln!(f, "  loss {a:.4} -> {b:.4}")?;
        }
        writeln!(
            f,
            "  fleet: {} allocations, {} preemptions ({} without notice)",
            self.allocations, self.preemptions, self.unannounced_kills
        )?;
        writeln!(
            f,
            "  reconfigurations {}: intra-stage {}, inter-stage {}, repartition {}, restart {}, none {}",
            self.reconfigurations,
            self.migrations_intra_stage,
            self.migrations_inter_stage,
            self.migrations_repartition,
            self.migrations_restart,
            self.migrations_none
        )?;
        writeln!(
            f,
            "  moved {:.2} MiB peer to peer ({} chunks resent), {} steps aborted",
            self.bytes_moved as f64 / (1 << 20) as f64,
            self.resent_chunks,
            self.aborted_steps
        )?;
        writeln!(
            f,
            "  time migrating {:.2} s vs checkpoint-restart estimate {:.2} s; checkpoints {:.2} s",
            self.migration_seconds, self.checkpoint_restart_estimate_seconds, self.checkpoint_seconds
        )?;
        writeln!(
            f,
            "  checkpoints: {} periodic ({:.2}% of training time), {} emergency, {} at pauses; rolled back \
             {} steps ({} samples) after unannounced losses, {} steps ({} samples) after notices too short",
            self.periodic_checkpoints,
            self.periodic_checkpoint_fraction * 100.0,
            self.emergency_checkpoints,
            self.pause_checkpoints,
            self.rolled_back_steps_unannounced,
            self.rolled_back_samples_unannounced,
            self.rolled_back_steps_notice_too_short,
            self.rolled_back_samples_notice_too_short
        )?;
        if self.resumes > 0 {
            writeln!(
                f,
                "  resumed {} time(s) after the host died, losing {} committed steps",
                self.resumes, self.steps_lost_to_host_failures
            )?;
        }
        if let Some(fidelity) = &self.fidelity {
            writeln!(f, "{fidelity}")?;
        }
        if let Some(location) = &self.last_checkpoint {
            write!(f, "  last checkpoint: {location}")?;
        }
        Ok(())
    }
}

/// Two panels: loss per step, and throughput (samples/s over 5 s windows),
/// with reconfigurations marked; drawn with [`crate::svg`].
fn plot(events: &[Timed]) -> String {
    const W: f64 = 900.0;
    const LEFT: f64 = 70.0;
    const PW: f64 = 780.0;
    const PH: f64 = 200.0;
    let steps: Vec<(f64, f64)> = events
        .iter()
        .filter_map(|e| match e.event {
            RunEvent::Step { loss, .. } => Some((e.t_s, loss)),
            _ => None,
        })
        .collect();
    let t_max = events.last().map_or(1.0, |e| e.t_s).max(1.0);
    let window = 5.0;
    let buckets = (t_max / window).ceil() as usize;
    let mut rate = vec![0.0; buckets.max(1)];
    for e in events {
        if let RunEvent::Step { samples, .. } = e.event {
            let b = ((e.t_s / window) as usize).min(rate.len() - 1);
            rate[b] += samples as f64 / window;
        }
    }
    let loss_max = steps.iter().map(|s| s.1).fold(0.0f64, f64::max).max(1e-9);
    let rate_max = rate.iter().copied().fold(0.0f64, f64::max).max(1e-9);
    let x = |t: f64| LEFT + PW * t.min(t_max) / t_max;
    let mut svg = Svg::new(W, 2.0 * PH + 150.0, None);
    for (panel, (title, max)) in
        [("training loss", loss_max), ("throughput, samples/s (5 s windows)", rate_max)]
            .into_iter()
            .enumerate()
    {
        let area = Area { left: LEFT, top: 40.0 + panel as f64 * (PH + 60.0), width: PW, height: PH };
        svg.text(LEFT, area.top - 10.0, r#"font-size="14""#, title);
        svg.rect(area.left, area.top, PW, PH, r##"fill="none" stroke="#888""##);
        for i in 0..=4 {
            let v = max * i as f64 / 4.0;
            let y = area.bottom() - PH * i as f64 / 4.0;
            svg.text(LEFT - 6.0, y + 4.0, r#"text-anchor="end""#, &format!("{v:.2}"));
        }
        // Reconfigurations and kills as vertical marks.
        for e in events {
            let colour = match &e.event {
                RunEvent::Reconfigured { cold_start: true, .. } => continue,
                RunEvent::Reconfigured { kind: MigrationKind::Restart, .. } => "#e15759",
                RunEvent::Reconfigured { kind: MigrationKind::None, .. } => continue,
                RunEvent::Reconfigured { .. } => "#59a14f",
                RunEvent::Killed { .. } => "#bab0ac",
                _ => continue,
            };
            let style = format!(r#"stroke="{colour}" stroke-dasharray="3 2""#);
            svg.line((x(e.t_s), area.top), (x(e.t_s), area.bottom()), &style);
        }
        let points: Vec<(f64, f64)> = if panel == 0 {
            steps.iter().map(|(t, l)| (x(*t), area.bottom() - PH * l / loss_max)).collect()
        } else {
            rate.iter()
                .enumerate()
                .map(|(i, r)| (x((i as f64 + 0.5) * window), area.bottom() - PH * r / rate_max))
                .collect()
        };
        svg.polyline(&points, r##"fill="none" stroke="#4e79a7" stroke-width="1.8""##);
    }
    svg.text(
        LEFT,
        40.0 + 2.0 * (PH + 60.0) - 30.0,
        "",
        &format!(
            "time, s (0 to {t_max:.0}); green: live migration, red: restart from checkpoint, grey: instance killed"
        ),
    );
    svg.finish()
}
