//! The control loop of a real run: replay the fleet's events, ask the policy
//! for a configuration each interval, migrate state at iteration boundaries and
//! drive two-phase training steps across the workers.
//!
//! The rules live in `parcae_cluster::job` (which layout, which commands, commit
//! or abort) and `parcae_cluster::recovery` (checkpoint cadence, what a notice
//! calls for); this module only does the I/O around them.
//!
//! Consistency rule: every worker's parameters change only at `Commit`, and the
//! host sends `Commit` only after every slot's worker finished computing the
//! step. A worker that dies before that point makes the host abort the step on
//! the others, so the survivors all sit at the last committed step.
//!
//! Recovery: a notice that would leave some layer without a holder either
//! evacuates the state to workers that stay (when the transfer fits the notice)
//! or writes an emergency checkpoint at the current step within the notice, so
//! only an unannounced loss rolls work back (to the last periodic checkpoint,
//! taken asynchronously at a Young/Daly cadence).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Context;
use parcae_cluster::job::{
    JobCheckpoint, JobState, ReconfigureDecision, ReconfigureStats, RollbackCause, StepReport, StepVerdict,
    WorkerContact, effective_layout, settle_step,
};
use parcae_cluster::protocol::{BackgroundWrite, Reply, WorkerCommand, WorkerReport};
use parcae_cluster::recovery::{
    LossObservations, NoticeRecovery, checkpoint_interval_steps, notice_recovery,
};
use parcae_cluster::{AssignmentStrategy, Layout, ModelSpec, WorkerId};
use parcae_policy_core::{IntervalStats, ModelProfile, ParallelConfig};
use parcae_runtime::GuardedPolicy;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::durable::{Persister, Progress};
use super::report::{CheckpointReason, RunEvent, RunLog};
use super::told_cadence;
use crate::checkpoints::Checkpoints;
use crate::control::{self, ControlSettings};
use crate::record::PolicyHealth;
use crate::workers::cloud::CloudNote;
use crate::workers::fleet::{Arrival, Fleet};
use crate::workers::timeline::TimeScale;

/// Everything the loop needs besides the fleet.
pub struct RunSettings {
    pub spec: ModelSpec,
    pub profile: ModelProfile,
    pub scale: TimeScale,
    /// Control intervals to replay.
    pub intervals: usize,
    pub horizon: u32,
    pub fleet_max: u32,
    /// Wall-clock notice before a preemption's kill.
    pub grace: Duration,
    /// Periodic checkpoint every N committed steps (None: Young/Daly on the observed losses).
    pub checkpoint_every: Option<u64>,
    /// Where checkpoints go (the stage holders write there directly).
    pub checkpoints: Checkpoints,
    /// The run's clock when this host started (non-zero on `run --resume`: the dead host's
    /// clock at its last durable write).
    pub clock_offset: Duration,
    /// Stop after this many committed steps (None: run the whole trace).
    pub max_steps: Option<u64>,
    /// How long a worker may take to answer one command before it counts as lost.
    pub command_timeout: Duration,
    pub strategy: AssignmentStrategy,
    /// Layouts given per interval instead of asked of the policy (deployment profiling:
    /// `parcae-host profile` runs every layout in turn); an interval past its end, or
    /// whose layout does not fit the workers there, pauses.
    pub script: Option<Vec<Option<ParallelConfig>>>,
    /// The cost-model constants the profile was loaded with (`--cost-constants`): the
    /// checkpoint write rate the policy is told.
    pub cost_constants: parcae_profile::CostConstants,
}

impl RunSettings {
    /// What the policy is told each interval. The profile's times are wall-clock times of
    /// this deployment, so the interval and the notice are the wall-clock time the job
    /// really has (4 s of a replayed minute, not the minute): told the trace's minute, the
    /// policy priced every migration at a fifteenth of what it costs the run. The
    /// checkpoint write rate is the run's cost constants'.
    pub fn control(&self) -> ControlSettings {
        let notice_ms = self.grace.as_secs_f64() * 1000.0;
        let recovery =
            self.cost_constants.recovery(notice_ms).unwrap_or(parcae_policy_core::Recovery::UNANNOUNCED);
        ControlSettings {
            interval_ms: self.scale.wall_interval_ms(),
            horizon: self.horizon,
            fleet_max: self.fleet_max,
            recovery,
        }
    }
}

/// Why the loop stopped early.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("reconfiguration failed {attempts} times in a row; last error: {last}")]
    ReconfigureExhausted { attempts: u32, last: String },
}

/// A periodic checkpoint whose stages are still being written in the background.
struct PendingCheckpoint {
    checkpoint: JobCheckpoint,
    /// Writers that have not reported their stage yet.
    waiting: BTreeSet<WorkerId>,
    bytes: u64,
    /// Wall time training waited for the snapshots.
    blocking_millis: f64,
    write_millis: f64,
}

/// What the loop knows about losses and checkpoints, beyond the job's state.
struct Recovery {
    /// Workers that got a notice, and when the cloud will kill them.
    deadlines: BTreeMap<WorkerId, Instant>,
    /// Workers lost without notice.
    unannounced: BTreeSet<WorkerId>,
    /// Restarts that rolled back though every lost holder had a notice (neither the
    /// evacuation nor the emergency checkpoint finished within it).
    failed_notice_saves: u32,
    /// Aggregate peer-to-peer transfer rate seen in migrations, bytes/s.
    transfer_rate: Option<f64>,
    pending: Option<PendingCheckpoint>,
    /// Step of the last periodic checkpoint started (complete or not).
    last_periodic_step: u64,
    /// Periodic checkpoint waits and step times so far, for the cadence.
    checkpoint_waits: Vec<Duration>,
    step_times: Vec<Duration>,
    /// Background write times of the periodic checkpoints completed so far.
    checkpoint_writes: Vec<Duration>,
    cadence: u64,
}

/// The mean of `v` (`None` when empty).
fn mean(v: &[Duration]) -> Option<Duration> {
    (!v.is_empty()).then(|| v.iter().sum::<Duration>() / v.len() as u32)
}

impl Recovery {
    /// What was observed by `elapsed` (the next loss's chance left at 0: see
    /// [`update_cadence`]).
    fn observations(&self, elapsed: Duration) -> LossObservations {
        LossObservations {
            elapsed,
            next_loss_rollback_chance: 0.0,
            unannounced_losses: self.unannounced.len() as u32,
            failed_notice_saves: self.failed_notice_saves,
            checkpoint_cost: mean(&self.checkpoint_waits),
            // The last 20 steps: the layout changes what a step costs.
            step_time: mean(&self.step_times[self.step_times.len().saturating_sub(20)..]),
        }
    }

    /// A holder went without notice.
    fn lost_without_notice(&mut self, id: WorkerId, job: &mut JobState) {
        if !self.deadlines.contains_key(&id) && self.unannounced.insert(id) {
            job.lost_without_notice(id);
        }
    }
}

/// Where a dead host's job stood, for `run --resume`.
pub struct ResumeFrom {
    /// Its durable state.
    pub progress: Progress,
    /// Per interval of its history, the checkpoint interval its policy was told (from its
    /// durable events, [`told_cadence::told_intervals`]), so the policy decides the past
    /// again as it did.
    pub told_checkpoint_ms: Vec<Option<f64>>,
    /// The newest complete checkpoint in the store (None: none was ever completed).
    pub checkpoint: Option<JobCheckpoint>,
}

/// Runs the job to the end of the trace (or `max_steps`) and returns the log.
#[expect(
    clippy::too_many_arguments,
    reason = "the loop's channels, its clock and its durable state are separate concerns of the caller"
)]
pub async fn run_job(
    settings: &RunSettings,
    policy: &mut GuardedPolicy,
    fleet: &mut Fleet,
    start: Instant,
    cloud: &mut mpsc::UnboundedReceiver<CloudNote>,
    arrivals: &mut mpsc::Receiver<Arrival>,
    log: &mut RunLog,
    resume: Option<ResumeFrom>,
    persister: &mut Persister,
) -> anyhow::Result<()> {
    let layer_bytes: Vec<u64> =
        (0..settings.spec.num_layers()).map(|l| settings.spec.layer_state_bytes(l)).collect();
    // Workers that joined before the loop (remote mode) hold nothing yet.
    let mut job = JobState::new(fleet.connected());
    let cadence = checkpoint_interval_steps(settings.checkpoint_every, &LossObservations::default());
    let mut recovery = Recovery {
        deadlines: BTreeMap::new(),
        unannounced: BTreeSet::new(),
        failed_notice_saves: 0,
        transfer_rate: None,
        pending: None,
        last_periodic_step: 0,
        checkpoint_waits: Vec::new(),
        step_times: Vec::new(),
        checkpoint_writes: Vec::new(),
        cadence,
    };
    log.start(start, settings.clock_offset);
    let clock = || start.elapsed() + settings.clock_offset;
    let mut history: Vec<IntervalStats> = Vec::new();
    let mut interval_counts = IntervalStats::default();
    let mut next_interval = 0usize;
    match resume {
        None => log.event(RunEvent::Cadence {
            every_steps: cadence,
            unannounced_losses: 0,
            failed_notice_saves: 0,
        }),
        Some(ResumeFrom { progress, checkpoint, told_checkpoint_ms: told_before }) => {
            // Restart from the newest complete checkpoint (or from the seed), at the trace
            // position and with the history the dead host had.
            let from_step = checkpoint.as_ref().map_or(0, |c| c.step);
            log.event(RunEvent::Resumed {
                from_step,
                last_committed_step: progress.step,
                lost_steps: progress.step.saturating_sub(from_step),
                checkpoint: checkpoint.as_ref().map(|c| settings.checkpoints.location(&c.prefix)),
            });
            info!(from_step, lost_steps = progress.step.saturating_sub(from_step), "resuming the job");
            job.step = from_step;
            job.checkpoint = checkpoint;
            job.started = progress.step > 0 || job.checkpoint.is_some();
            job.epoch = progress.epoch;
            job.attempts = progress.attempts;
            // No layout runs yet: `desired` stays unset so that the first decision once the
            // new workers are in differs from it and restarts the job from the checkpoint
            // (restoring the dead host's wish made that decision look like no change).
            recovery.unannounced = progress.unannounced.into_iter().collect();
            recovery.failed_notice_saves = progress.failed_notice_saves;
            recovery.last_periodic_step = from_step;
            history = progress.history;
            interval_counts = progress.interval_counts;
            next_interval = progress.next_interval;
            // A stateful policy (the default's regret guard) rebuilds its state by deciding
            // once more over every past interval but the current one.
            let mut current = None;
            for k in 0..history.len().saturating_sub(1) {
                let told = told_before.get(k).copied().flatten();
                let decision = decide(settings, policy, &history[..=k], current.as_ref(), told);
                current = decision.config.and_then(|c| {
                    Layout::new(&settings.spec, c.data_parallel as usize, c.pipeline_stages as usize).ok()
                });
            }
            update_cadence(
                settings,
                &mut recovery,
                clock(),
                (job.layout.as_ref(), fleet.available().len()),
                log,
            );
        }
    }
    let mut failures_in_a_row = 0u32;
    let mut fleet_changed = false;

    loop {
        let now = clock();
        let progress = Progress {
            clock_ms: now.as_millis() as u64,
            next_interval,
            history: history.clone(),
            interval_counts,
            next_worker: fleet.next_id(),
            ..progress_of(&job, &recovery)
        };
        persister.update(progress, log);
        // 1. What the cloud did: allocations, notices, kills (it kills on its own clock).
        while let Ok(note) = cloud.try_recv() {
            match note {
                CloudNote::Allocate { node } => {
                    let id = fleet
                        .allocate(&node)
                        .await
                        .with_context(|| format!("starting a worker for {node}"))?;
                    log.event(RunEvent::Allocated { worker: id, node });
                }
                CloudNote::Notice { node } => {
                    let deadline = Instant::now() + settings.grace;
                    let id = match (fleet.live_worker_for(&node), fleet.worker_started_for(&node)) {
                        (Some(id), _) => {
                            fleet.notice(id, settings.grace, settings.command_timeout).await;
                            id
                        }
                        // A notice shorter than one step: the worker died mid-step, before
                        // its notice was read. Still a preemption with (too short a) notice,
                        // unless its loss was counted already.
                        (None, Some(id))
                            if !recovery.unannounced.contains(&id)
                                && !recovery.deadlines.contains_key(&id) =>
                        {
                            warn!(%node, worker = id, "notice read after the worker died: too short to act on");
                            id
                        }
                        _ => {
                            warn!(%node, "notice for an instance that is not running; ignored");
                            continue;
                        }
                    };
                    interval_counts.preemptions += 1;
                    fleet_changed = true;
                    job.dirty = true;
                    recovery.deadlines.insert(id, deadline);
                    log.event(RunEvent::Notice {
                        worker: id,
                        node,
                        grace_ms: settings.grace.as_millis() as u64,
                        source: "trace".into(),
                        detail: None,
                    });
                }
                CloudNote::Killed { node, announced } => {
                    let Some(id) = fleet.worker_started_for(&node) else { continue };
                    if !announced {
                        interval_counts.preemptions += 1;
                        recovery.lost_without_notice(id, &mut job);
                    }
                    fleet_changed = true;
                    job.dirty = true;
                    fleet.killed(id).await;
                    log.event(RunEvent::Killed { worker: id, node, announced });
                }
            }
        }
        // 1b. What the workers' own clouds announced (their metadata services'
        //     notices): the same as a notice of the replayed trace.
        for (id, report) in fleet.reports() {
            let WorkerReport::Notice(notice) = report;
            if !fleet.is_alive(id) || recovery.deadlines.contains_key(&id) {
                continue; // gone already, or a repeat of a notice being acted on
            }
            let grace = Duration::from_millis(notice.grace_ms);
            interval_counts.preemptions += 1;
            fleet_changed = true;
            job.dirty = true;
            recovery.deadlines.insert(id, Instant::now() + grace);
            fleet.leaving(id);
            info!(worker = id, cloud = %notice.cloud, action = %notice.action, ?grace, "preemption notice from the worker's cloud");
            log.event(RunEvent::Notice {
                worker: id,
                node: fleet.name_of(id),
                grace_ms: notice.grace_ms,
                source: notice.cloud.clone(),
                detail: Some(notice.detail.clone()),
            });
        }
        // 2. Workers that connected.
        let mut joined = Vec::new();
        while let Ok(arrival) = arrivals.try_recv() {
            if let Some(id) = fleet.admit(arrival, &settings.spec, settings.command_timeout).await {
                joined.push(id);
            }
        }
        for id in joined {
            log.event(RunEvent::Joined {
                worker: id,
                instance_type: fleet.instance_type(id).unwrap_or_default(),
            });
            job.joined(id);
            interval_counts.arrivals += 1;
            fleet_changed = true;
        }
        // 3. Workers whose process or connection died.
        for id in fleet.reap_dead() {
            recovery.lost_without_notice(id, &mut job);
            log.event(RunEvent::Lost { worker: id });
            job.dirty = true;
            fleet_changed = true;
        }
        job.retain_alive(|id| fleet.is_alive(id));
        if recovery.pending.as_ref().is_some_and(|p| p.waiting.iter().any(|id| !fleet.is_alive(*id))) {
            // A writer died mid-write: that checkpoint can never be completed.
            if let Some(p) = recovery.pending.take() {
                warn!(step = p.checkpoint.step, "a checkpoint writer was lost; the checkpoint is dropped");
                discard_checkpoint(settings, &job, &p.checkpoint.prefix).await;
            }
        }
        update_cadence(settings, &mut recovery, clock(), (job.layout.as_ref(), fleet.available().len()), log);

        // 4. An interval boundary: observe, forecast, plan. Between boundaries a
        //    change of the fleet (a join, a notice, a loss) re-plans the interval
        //    with what is known now, once every started worker has joined.
        let boundary = now >= settings.scale.wall_interval * next_interval as u32;
        if boundary && next_interval >= settings.intervals {
            break;
        }
        let replan = !boundary && fleet_changed && !history.is_empty() && fleet.pending() == 0;
        if boundary || replan {
            let available = fleet.available().len() as u32;
            if boundary {
                history.push(IntervalStats {
                    instances: available,
                    arrivals: interval_counts.arrivals,
                    preemptions: interval_counts.preemptions,
                });
                next_interval += 1;
            } else if let Some(last) = history.last_mut() {
                last.instances = available;
                last.arrivals += interval_counts.arrivals;
                last.preemptions += interval_counts.preemptions;
            }
            interval_counts = IntervalStats::default();
            fleet_changed = false;
            let told = told_checkpoint_interval_ms(settings, &recovery, clock(), available);
            let decision = decide(settings, policy, &history, job.layout.as_ref(), told);
            log.policy_counts(&policy.predictor_counts(), &policy.optimizer_counts());
            log.event(RunEvent::Decision {
                interval: next_interval - 1,
                instances: available,
                config: decision.config.map(|c| (c.data_parallel, c.pipeline_stages)),
                source: decision.source.to_string(),
                replan,
                checkpoint_interval_ms: decision.told_checkpoint_ms,
            });
            if decision.config != job.desired {
                job.desired = decision.config;
                job.dirty = true;
            }
        }
        if settings.max_steps.is_some_and(|max| job.step >= max) {
            break;
        }

        // 5. Reconfigure at this iteration boundary if anything changed.
        if job.dirty {
            save_stranded_state(settings, fleet, &mut job, &mut recovery, &layer_bytes, log).await;
            match reconfigure(settings, fleet, &mut job, &mut recovery, &layer_bytes, log).await {
                Ok(()) => failures_in_a_row = 0,
                Err(error) => {
                    failures_in_a_row += 1;
                    warn!(%error, "reconfiguration failed; retrying with the workers left");
                    log.event(RunEvent::Failure {
                        what: format!("reconfigure: {}", parcae_logging::error_line(error.as_ref())),
                    });
                    if failures_in_a_row >= 5 {
                        return Err(RunError::ReconfigureExhausted {
                            attempts: failures_in_a_row,
                            last: parcae_logging::error_line(error.as_ref()),
                        }
                        .into());
                    }
                    job.dirty = true;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }

        // 6. One training step, or wait for something to happen.
        match job.layout.clone() {
            Some(layout) => {
                match train_step(settings, fleet, &mut job, &layout, log).await {
                    Ok((millis, written)) => {
                        recovery.step_times.push(Duration::from_secs_f64(millis / 1000.0));
                        record_writes(settings, &mut job, &mut recovery, written, log).await;
                    }
                    Err(error) => {
                        warn!(%error, step = job.step, "step failed; aborted on the survivors");
                        job.dirty = true;
                    }
                }
                let due = job.step >= recovery.last_periodic_step + recovery.cadence
                    && recovery.pending.is_none()
                    && job.checkpoint.as_ref().is_none_or(|c| c.step < job.step);
                if due
                    && let Err(error) =
                        start_periodic_checkpoint(settings, fleet, &mut job, &mut recovery).await
                {
                    warn!(%error, "periodic checkpoint failed; the previous one stays current");
                    job.dirty = true;
                }
            }
            None => {
                let wait = Duration::from_millis(50);
                tokio::select! {
                    arrival = arrivals.recv() => {
                        if let Some(arrival) = arrival
                            && let Some(id) = fleet.admit(arrival, &settings.spec, settings.command_timeout).await
                        {
                            log.event(RunEvent::Joined { worker: id, instance_type: fleet.instance_type(id).unwrap_or_default() });
                            job.joined(id);
                            interval_counts.arrivals += 1;
                            fleet_changed = true;
                        }
                    }
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }
    }

    // A periodic checkpoint still being written is completed (or dropped) now, not
    // abandoned; then a final checkpoint unless that one already holds the last step.
    flush_pending_checkpoint(settings, fleet, &mut job, &mut recovery, log).await;
    if job.layout.is_some() && job.checkpoint.as_ref().is_none_or(|c| c.step < job.step) {
        let writers: Vec<WorkerId> = job.slots.keys().copied().collect();
        if let Err(error) = write_checkpoint(
            settings,
            fleet,
            &mut job,
            &writers,
            CheckpointReason::Final,
            settings.command_timeout,
            log,
        )
        .await
        {
            warn!(%error, "final checkpoint failed");
        }
    }
    log.set_history(history.clone());
    let progress = Progress {
        clock_ms: clock().as_millis() as u64,
        next_interval,
        history,
        next_worker: fleet.next_id(),
        finished: true,
        ..progress_of(&job, &recovery)
    };
    persister.update(progress, log);
    let health = PolicyHealth::new(&policy.predictor_counts(), &policy.optimizer_counts());
    log.finish(
        job.step,
        job.checkpoint.as_ref().map(|c| settings.checkpoints.location(&c.prefix)),
        Some(health),
    );
    Ok(())
}

/// The job's part of its durable state (the caller adds the clock and the history).
fn progress_of(job: &JobState, recovery: &Recovery) -> Progress {
    Progress {
        step: job.step,
        layout: job.layout.as_ref().map(|l| (l.data_parallel, l.pipeline_stages)),
        desired: job.desired.map(|c| (c.data_parallel, c.pipeline_stages)),
        checkpoint: job.checkpoint.clone(),
        epoch: job.epoch,
        attempts: job.attempts,
        unannounced: recovery.unannounced.iter().copied().collect(),
        failed_notice_saves: recovery.failed_notice_saves,
        ..Progress::default()
    }
}

/// Re-derives the periodic cadence from what was observed and the running
/// `layout` on `workers` alive; logs a change.
fn update_cadence(
    settings: &RunSettings,
    recovery: &mut Recovery,
    elapsed: Duration,
    (layout, workers): (Option<&Layout>, usize),
    log: &mut RunLog,
) {
    let mut seen = recovery.observations(elapsed);
    // Priced only while it can count: no fixed cadence, no loss seen yet.
    if settings.checkpoint_every.is_none() && seen.awaits_first_loss() {
        seen.next_loss_rollback_chance = next_loss_rollback_chance(settings, layout, workers);
    }
    let every = checkpoint_interval_steps(settings.checkpoint_every, &seen);
    if every != recovery.cadence {
        recovery.cadence = every;
        info!(every_steps = every, "periodic checkpoint cadence changed");
        log.event(RunEvent::Cadence {
            every_steps: every,
            unannounced_losses: recovery.unannounced.len() as u32,
            failed_notice_saves: recovery.failed_notice_saves,
        });
    }
}

/// The chance that the next loss of one of `workers` rolls back on `layout`, by the
/// cost model the policy is told (the profile under the deployment's notice and write
/// rate; `parcae_sim::cadence`, whose seen-so-far cadence counts it the same way): 0
/// while paused or where one loss can take no whole stage, or the notice saves it.
fn next_loss_rollback_chance(settings: &RunSettings, layout: Option<&Layout>, workers: usize) -> f64 {
    let Some(layout) = layout else { return 0.0 };
    let config = ParallelConfig::new(layout.data_parallel as u32, layout.pipeline_stages as u32);
    let fleet = u32::try_from(workers).unwrap_or(u32::MAX).max(config.instances() as u32);
    parcae_sim::cadence::next_preemption_rollback_chance(
        &settings.profile,
        &settings.control().recovery,
        config,
        fleet,
    )
}

struct Decision {
    config: Option<ParallelConfig>,
    source: &'static str,
    /// The checkpoint interval in the profile the policy was handed, ms (`None`: not asked).
    told_checkpoint_ms: Option<f64>,
}

/// The checkpoint interval to tell the policy: the one the run keeps now
/// ([`told_cadence`]), from its cadence, its recent steps and its writes.
fn told_checkpoint_interval_ms(
    settings: &RunSettings,
    recovery: &Recovery,
    elapsed: Duration,
    instances_now: u32,
) -> Option<f64> {
    let ms = |t: Duration| t.as_secs_f64() * 1000.0;
    told_cadence::checkpoint_interval_ms(
        &settings.profile,
        recovery.cadence,
        recovery.observations(elapsed).step_time.map(ms),
        mean(&recovery.checkpoint_writes).map(ms),
        instances_now,
    )
}

/// Forecast and optimize for the interval starting now (the last of `history`),
/// the policy told the checkpoint interval `told_checkpoint_ms` (`None`: the profile's).
fn decide(
    settings: &RunSettings,
    policy: &mut GuardedPolicy,
    history: &[IntervalStats],
    current: Option<&Layout>,
    told_checkpoint_ms: Option<f64>,
) -> Decision {
    let Some((now, past)) = history.split_last() else {
        // No interval observed yet: nothing to plan for, so pause.
        return Decision { config: None, source: "-", told_checkpoint_ms: None };
    };
    if let Some(script) = &settings.script {
        let config =
            script.get(past.len()).copied().flatten().filter(|c| c.instances() <= u64::from(now.instances));
        return Decision { config, source: "script", told_checkpoint_ms: None };
    }
    let control = settings.control();
    let current = current.map(|l| ParallelConfig::new(l.data_parallel as u32, l.pipeline_stages as u32));
    let profile = told_cadence::profile_at(&settings.profile, told_checkpoint_ms);
    let step = control::decide(policy, &control, &profile, past, *now, current, None);
    Decision {
        config: step.config,
        source: step.optimizer,
        told_checkpoint_ms: Some(profile.checkpoint_interval_ms),
    }
}

/// Before a notice strands state (some layer held only by leaving workers),
/// decide how it survives: evacuation by the coming reconfiguration, or an
/// emergency checkpoint at the current step written within the notice.
async fn save_stranded_state(
    settings: &RunSettings,
    fleet: &mut Fleet,
    job: &mut JobState,
    recovery: &mut Recovery,
    layer_bytes: &[u64],
    log: &mut RunLog,
) {
    let staying = fleet.available();
    let stranded = job.stranded_layers(settings.spec.num_layers(), &staying);
    let saved = job.checkpoint.as_ref().is_some_and(|c| c.step == job.step);
    if stranded.is_empty() || !job.holds_state() || saved {
        return;
    }
    let connected = fleet.connected();
    let now = Instant::now();
    let time_left = connected
        .iter()
        .filter_map(|id| recovery.deadlines.get(id))
        .map(|deadline| deadline.saturating_duration_since(now))
        .min()
        .unwrap_or(settings.grace);
    let bytes: u64 = stranded.iter().map(|&l| layer_bytes[l]).sum();
    // Parking needs one staying worker per stage it keeps; a layout needs them all.
    let can_take = effective_layout(&settings.spec, &settings.profile, job.desired, staying.len()).is_some()
        || !staying.is_empty();
    let staying_count = if can_take { staying.len() } else { 0 };
    if notice_recovery(bytes, staying_count, recovery.transfer_rate, time_left) == NoticeRecovery::Evacuate {
        return;
    }
    let Some(writers) = job.checkpoint_writers(settings.spec.num_layers(), &connected) else {
        warn!(?stranded, "state already lost (no holder left for some layer): no emergency checkpoint");
        return;
    };
    let writers: Vec<WorkerId> = writers.into_iter().map(|(id, _)| id).collect();
    info!(step = job.step, bytes, ?time_left, "emergency checkpoint within the notice");
    let timeout = time_left.min(settings.command_timeout);
    if let Err(error) =
        write_checkpoint(settings, fleet, job, &writers, CheckpointReason::Emergency, timeout, log).await
    {
        warn!(%error, "emergency checkpoint failed; the last complete one stays current");
        log.event(RunEvent::Failure {
            what: format!("emergency checkpoint: {}", parcae_logging::error_line(error.as_ref())),
        });
    }
}

/// Plans and executes the move to the layout the job should run now.
async fn reconfigure(
    settings: &RunSettings,
    fleet: &mut Fleet,
    job: &mut JobState,
    recovery: &mut Recovery,
    layer_bytes: &[u64],
    log: &mut RunLog,
) -> anyhow::Result<()> {
    let staying = fleet.available();
    let connected = fleet.connected();
    let target = effective_layout(&settings.spec, &settings.profile, job.desired, staying.len());
    let contacts: BTreeMap<WorkerId, WorkerContact> = connected
        .iter()
        .filter_map(|&id| {
            Some((
                id,
                WorkerContact {
                    name: fleet.peer_name(id)?,
                    addr: fleet.peer_addr(id)?,
                    slowdown: fleet.slowdown(id)?,
                },
            ))
        })
        .collect();
    let plan = match job.plan_reconfiguration(
        &settings.spec,
        layer_bytes,
        target,
        &connected,
        &staying,
        &contacts,
        settings.strategy,
    )? {
        ReconfigureDecision::Keep => {
            job.dirty = false;
            return Ok(());
        }
        ReconfigureDecision::Pause => {
            checkpoint_paused_state(settings, fleet, job, recovery, log).await;
            if job.pause() {
                log.event(RunEvent::Paused { step: job.step, available: staying.len() });
            }
            return Ok(());
        }
        ReconfigureDecision::Execute(plan) => *plan,
    };
    let started = Instant::now();
    let commands: BTreeMap<WorkerId, WorkerCommand> =
        plan.commands.iter().map(|(&id, c)| (id, WorkerCommand::Reconfigure(c.clone()))).collect();
    fleet.shared.set_epoch(plan.epoch, commands.keys().copied());
    let replies = fleet.call_many(commands, settings.command_timeout).await;
    fleet.shared.set_epoch(0, []);
    let outcomes = replies
        .into_iter()
        .map(|(id, reply)| {
            let outcome = match reply {
                Ok(Reply::Reconfigured { bytes_sent, resent_chunks, .. }) => {
                    Ok(ReconfigureStats { bytes_sent, resent_chunks })
                }
                Ok(other) => Err(describe(&other)),
                Err(e) => Err(e.to_string()),
            };
            (id, outcome)
        })
        .collect();
    let outcome = job.settle_reconfiguration(&plan, &outcomes)?;
    let millis = started.elapsed().as_secs_f64() * 1000.0;
    if outcome.bytes_sent > 0 && millis > 0.0 {
        recovery.transfer_rate = Some(outcome.bytes_sent as f64 / (millis / 1000.0));
    }
    let target = &plan.target;
    info!(
        kind = plan.migration.kind.as_str(),
        d = target.data_parallel,
        p = target.pipeline_stages,
        bytes = plan.migration.bytes_moved,
        millis,
        "reconfigured"
    );
    if let Some(cause) = outcome.rollback_cause {
        if cause == RollbackCause::NoticeTooShort {
            // Neither evacuation nor the emergency checkpoint saved the state in time:
            // a loss the periodic cadence must cover, as an unannounced one.
            recovery.failed_notice_saves += 1;
        }
        let steps = outcome.rolled_back_steps;
        log.event(RunEvent::RolledBack { steps, samples: steps * settings.spec.global_batch as u64, cause });
    }
    log.event(RunEvent::Reconfigured {
        epoch: plan.epoch,
        cold_start: outcome.cold_start,
        step: plan.step,
        rolled_back_steps: outcome.rolled_back_steps,
        kind: plan.migration.kind,
        data_parallel: target.data_parallel,
        pipeline_stages: target.pipeline_stages,
        bytes_moved: plan.migration.bytes_moved,
        bytes_sent: outcome.bytes_sent,
        bytes_from_checkpoint: plan.migration.bytes_from_checkpoint,
        resent_chunks: outcome.resent_chunks,
        millis,
        parked: plan.parking,
        holders: job.slots.iter().map(|(id, slot)| (*id, slot.stage)).collect(),
        shares: target.shares.clone(),
    });
    if plan.parking {
        log.event(RunEvent::Paused { step: job.step, available: staying.len() });
        checkpoint_paused_state(settings, fleet, job, recovery, log).await;
    }
    Ok(())
}

/// Writes the state of a job that is about to stop training (or has just
/// parked its state on the workers that stay): paused, it trains nothing, so
/// the write costs no training time, and a holder then preempted without
/// notice loses nothing. The cost model prices a pause so (a loss while
/// paused rolls nothing back). Skipped when the last complete checkpoint
/// already holds this step or the staying workers do not hold every layer
/// (the state is then already lost or saved by the notice's recovery).
async fn checkpoint_paused_state(
    settings: &RunSettings,
    fleet: &mut Fleet,
    job: &mut JobState,
    recovery: &mut Recovery,
    log: &mut RunLog,
) {
    flush_pending_checkpoint(settings, fleet, job, recovery, log).await;
    if !job.holds_state() || job.checkpoint.as_ref().is_some_and(|c| c.step == job.step) {
        return;
    }
    let staying = fleet.available();
    if job.checkpoint_writers(settings.spec.num_layers(), &staying).is_none() {
        return;
    }
    info!(step = job.step, "checkpoint before the pause");
    if let Err(error) = write_checkpoint(
        settings,
        fleet,
        job,
        &staying,
        CheckpointReason::Pause,
        settings.command_timeout,
        log,
    )
    .await
    {
        warn!(%error, "checkpoint before the pause failed; the last complete one stays current");
        log.event(RunEvent::Failure {
            what: format!("checkpoint before the pause: {}", parcae_logging::error_line(error.as_ref())),
        });
    }
}

fn describe(reply: &Reply) -> String {
    match reply {
        Reply::Failed { reason } => reason.clone(),
        other => format!("unexpected reply {other:?}"),
    }
}

/// One two-phase step over every slot's worker; returns its wall time (ms)
/// and the background checkpoint writes the workers reported.
async fn train_step(
    settings: &RunSettings,
    fleet: &mut Fleet,
    job: &mut JobState,
    layout: &Layout,
    log: &mut RunLog,
) -> anyhow::Result<(f64, Vec<(WorkerId, BackgroundWrite)>)> {
    let step = job.step;
    let started = Instant::now();
    let workers: Vec<WorkerId> = job.slots.keys().copied().collect();
    let attempt = job.next_attempt();
    let commands = workers.iter().map(|&id| (id, WorkerCommand::Step { step, attempt })).collect();
    fleet.shared.set_attempt(attempt, workers.iter().copied());
    let replies = fleet.call_many(commands, settings.command_timeout).await;
    fleet.shared.set_attempt(0, []);
    let mut written = Vec::new();
    let reports = replies
        .into_iter()
        .map(|(id, reply)| {
            let report = match reply {
                Ok(Reply::Stepped { loss_sum, written: w, .. }) => {
                    written.extend(w.into_iter().map(|w| (id, w)));
                    StepReport::Computed { loss_sum }
                }
                Ok(other) => StepReport::Failed(describe(&other)),
                Err(e) => StepReport::Failed(e.to_string()),
            };
            (id, report)
        })
        .collect();
    let loss_sum = match settle_step(&reports) {
        StepVerdict::Commit { loss_sum } => loss_sum,
        StepVerdict::Abort { reasons } => {
            let aborts = workers
                .iter()
                .filter(|id| fleet.is_alive(**id))
                .map(|&id| (id, WorkerCommand::Abort { step }))
                .collect();
            let _ = fleet.call_many(aborts, settings.command_timeout).await;
            log.event(RunEvent::Aborted { step, reason: reasons.join("; ") });
            anyhow::bail!("step {step}: {}", reasons.join("; "));
        }
    };
    let commits = workers.iter().map(|&id| (id, WorkerCommand::Commit { step })).collect();
    let replies = fleet.call_many(commits, settings.command_timeout).await;
    // A worker lost between compute and commit: the others committed, the lost
    // one's layers live on in its replicas or in a checkpoint, as after any loss.
    let unacknowledged: Vec<WorkerId> = replies
        .into_iter()
        .filter(|(_, reply)| !matches!(reply, Ok(Reply::Committed { .. })))
        .map(|(id, _)| id)
        .collect();
    for id in &unacknowledged {
        warn!(worker = id, "commit not acknowledged");
    }
    job.committed(&unacknowledged);
    let millis = started.elapsed().as_secs_f64() * 1000.0;
    // Each last stage reports the sum of its sequences' mean token loss.
    log.event(RunEvent::Step {
        step,
        loss: loss_sum / settings.spec.global_batch as f64,
        samples: settings.spec.global_batch as u64,
        millis,
        data_parallel: layout.data_parallel,
        pipeline_stages: layout.pipeline_stages,
    });
    Ok((millis, written))
}

/// Where the checkpoint at `step` written for `reason` goes. Each reason has its own
/// prefix: an emergency (or final) checkpoint can be written at the step of a periodic one
/// still being written in the background, and dropping that one must not touch the other.
fn checkpoint_prefix(step: u64, reason: CheckpointReason) -> String {
    let prefix = JobCheckpoint::prefix_for(step);
    match reason {
        CheckpointReason::Periodic => prefix,
        CheckpointReason::Emergency => format!("{prefix}-emergency"),
        CheckpointReason::Final => format!("{prefix}-final"),
        CheckpointReason::Pause => format!("{prefix}-pause"),
    }
}

/// Deletes a checkpoint that was replaced or never completed, unless it is the current one.
async fn discard_checkpoint(settings: &RunSettings, job: &JobState, prefix: &str) {
    if job.checkpoint.as_ref().is_some_and(|c| c.prefix == prefix) {
        return;
    }
    settings.checkpoints.discard(prefix).await;
}

/// Makes a checkpoint whose stages are all in the store current: writes the
/// marker that makes it usable (last) and the pointer to it, deletes the one it
/// replaces. One older than the current checkpoint is deleted instead.
async fn complete_checkpoint(
    settings: &RunSettings,
    job: &mut JobState,
    checkpoint: JobCheckpoint,
) -> anyhow::Result<()> {
    if job.checkpoint.as_ref().is_some_and(|current| current.step >= checkpoint.step) {
        // One at least as new is current already (an emergency checkpoint at the step of
        // this periodic one).
        discard_checkpoint(settings, job, &checkpoint.prefix).await;
        return Ok(());
    }
    if let Err(e) = settings.checkpoints.complete(&checkpoint).await {
        discard_checkpoint(settings, job, &checkpoint.prefix).await;
        return Err(e).with_context(|| {
            format!("completing checkpoint {}", settings.checkpoints.location(&checkpoint.prefix))
        });
    }
    if let Some(old) = job.checkpoint_completed(checkpoint) {
        // Keep only the newest complete checkpoint.
        discard_checkpoint(settings, job, &old.prefix).await;
    }
    Ok(())
}

/// Writes a checkpoint at the current step from `writers` (whose holdings
/// cover the model once) and waits for it: emergency and final checkpoints.
async fn write_checkpoint(
    settings: &RunSettings,
    fleet: &mut Fleet,
    job: &mut JobState,
    writers: &[WorkerId],
    reason: CheckpointReason,
    timeout: Duration,
    log: &mut RunLog,
) -> anyhow::Result<()> {
    let step = job.step;
    let cover = job
        .checkpoint_writers(settings.spec.num_layers(), writers)
        .ok_or_else(|| anyhow::anyhow!("checkpoint at step {step}: the writers do not hold every layer"))?;
    let prefix = checkpoint_prefix(step, reason);
    let started = Instant::now();
    let commands: BTreeMap<WorkerId, WorkerCommand> = cover
        .iter()
        .enumerate()
        .map(|(stage, (id, _))| {
            (*id, WorkerCommand::Checkpoint { step, prefix: JobCheckpoint::stage_prefix(&prefix, stage) })
        })
        .collect();
    let replies = fleet.call_many(commands, timeout).await;
    let mut bytes = 0;
    for (id, reply) in &replies {
        match reply {
            Ok(Reply::Checkpointed { bytes: b, .. }) => bytes += b,
            Ok(other) => anyhow::bail!("checkpoint at step {step}: worker {id}: {}", describe(other)),
            Err(e) => anyhow::bail!("checkpoint at step {step}: worker {id}: {e}"),
        }
    }
    let stages = cover.into_iter().map(|(_, r)| r).collect();
    let location = settings.checkpoints.location(&prefix);
    complete_checkpoint(settings, job, JobCheckpoint { step, prefix, stages }).await?;
    let millis = started.elapsed().as_secs_f64() * 1000.0;
    log.event(RunEvent::Checkpointed { step, bytes, millis, write_millis: millis, reason, location });
    Ok(())
}

/// Snapshots the state on one worker per stage; they write it in the
/// background while training goes on.
async fn start_periodic_checkpoint(
    settings: &RunSettings,
    fleet: &mut Fleet,
    job: &mut JobState,
    recovery: &mut Recovery,
) -> anyhow::Result<()> {
    let step = job.step;
    let slot_workers: Vec<WorkerId> = job.slots.keys().copied().collect();
    let cover = job
        .checkpoint_writers(settings.spec.num_layers(), &slot_workers)
        .ok_or_else(|| anyhow::anyhow!("checkpoint at step {step}: the slots do not hold every layer"))?;
    let prefix = checkpoint_prefix(step, CheckpointReason::Periodic);
    recovery.last_periodic_step = step;
    let started = Instant::now();
    let commands: BTreeMap<WorkerId, WorkerCommand> = cover
        .iter()
        .enumerate()
        .map(|(stage, (id, _))| {
            (*id, WorkerCommand::Snapshot { step, prefix: JobCheckpoint::stage_prefix(&prefix, stage) })
        })
        .collect();
    let replies = fleet.call_many(commands, settings.command_timeout).await;
    for (id, reply) in &replies {
        match reply {
            Ok(Reply::SnapshotTaken { .. }) => {}
            Ok(other) => anyhow::bail!("snapshot at step {step}: worker {id}: {}", describe(other)),
            Err(e) => anyhow::bail!("snapshot at step {step}: worker {id}: {e}"),
        }
    }
    let blocking = started.elapsed();
    recovery.checkpoint_waits.push(blocking);
    recovery.pending = Some(PendingCheckpoint {
        waiting: cover.iter().map(|(id, _)| *id).collect(),
        checkpoint: JobCheckpoint { step, prefix, stages: cover.into_iter().map(|(_, r)| r).collect() },
        bytes: 0,
        blocking_millis: blocking.as_secs_f64() * 1000.0,
        write_millis: 0.0,
    });
    Ok(())
}

/// Waits for the writers of the pending periodic checkpoint and records their
/// writes, so it becomes current or is discarded; a writer that cannot answer
/// drops it.
async fn flush_pending_checkpoint(
    settings: &RunSettings,
    fleet: &mut Fleet,
    job: &mut JobState,
    recovery: &mut Recovery,
    log: &mut RunLog,
) {
    let Some(pending) = recovery.pending.as_ref() else { return };
    let commands = pending.waiting.iter().map(|&id| (id, WorkerCommand::Flush)).collect();
    let mut written = Vec::new();
    for (id, reply) in fleet.call_many(commands, settings.command_timeout).await {
        match reply {
            Ok(Reply::Flushed { written: w }) => written.extend(w.into_iter().map(|write| (id, write))),
            other => {
                let reason = match other {
                    Ok(reply) => describe(&reply),
                    Err(e) => e.to_string(),
                };
                warn!(worker = id, %reason, "a checkpoint writer did not flush; its checkpoint is dropped");
                if let Some(p) = recovery.pending.take() {
                    discard_checkpoint(settings, job, &p.checkpoint.prefix).await;
                }
                return;
            }
        }
    }
    record_writes(settings, job, recovery, written, log).await;
    if let Some(p) = recovery.pending.take() {
        // A writer reported nothing for this step (its write belonged to an older one).
        warn!(step = p.checkpoint.step, "a periodic checkpoint was not fully written; it is dropped");
        discard_checkpoint(settings, job, &p.checkpoint.prefix).await;
    }
}

/// Applies the background writes the workers reported; completes the pending
/// checkpoint once every stage is in the store (a failure leaves the previous
/// checkpoint current).
async fn record_writes(
    settings: &RunSettings,
    job: &mut JobState,
    recovery: &mut Recovery,
    written: Vec<(WorkerId, BackgroundWrite)>,
    log: &mut RunLog,
) {
    for (id, write) in written {
        let Some(pending) = recovery.pending.as_mut().filter(|p| p.checkpoint.step == write.step) else {
            continue;
        };
        match write.result {
            Ok(bytes) if pending.waiting.remove(&id) => {
                pending.bytes += bytes;
                pending.write_millis = pending.write_millis.max(write.millis);
            }
            Ok(_) => {}
            Err(reason) => {
                warn!(worker = id, step = write.step, %reason, "background checkpoint write failed");
                log.event(RunEvent::Failure {
                    what: format!("checkpoint at step {}: worker {id}: {reason}", write.step),
                });
                let prefix = pending.checkpoint.prefix.clone();
                recovery.pending = None;
                discard_checkpoint(settings, job, &prefix).await;
            }
        }
    }
    if recovery.pending.as_ref().is_some_and(|p| p.waiting.is_empty())
        && let Some(done) = recovery.pending.take()
    {
        let (step, location) = (done.checkpoint.step, settings.checkpoints.location(&done.checkpoint.prefix));
        match complete_checkpoint(settings, job, done.checkpoint).await {
            Ok(()) => {
                recovery.checkpoint_writes.push(Duration::from_secs_f64(done.write_millis.max(0.0) / 1000.0));
                log.event(RunEvent::Checkpointed {
                    step,
                    bytes: done.bytes,
                    millis: done.blocking_millis,
                    write_millis: done.write_millis,
                    reason: CheckpointReason::Periodic,
                    location,
                });
            }
            Err(error) => {
                warn!(%error, "periodic checkpoint not completed; the previous one stays current");
                log.event(RunEvent::Failure { what: parcae_logging::error_line(error.as_ref()) });
            }
        }
    }
}
