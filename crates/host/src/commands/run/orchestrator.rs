//! The control loop of a real run: replay the fleet's events, ask the policy
//! for a configuration each interval, migrate state at iteration boundaries and
//! drive two-phase training steps across the workers.
//!
//! Consistency rule: every worker's parameters change only at `Commit`, and the
//! host sends `Commit` only after every slot's worker finished computing the
//! step. A worker that dies before that point makes the host abort the step on
//! the others, so the survivors all sit at the last committed step and the next
//! reconfiguration starts from a consistent state. A layer nobody holds any more
//! forces a restart from the last checkpoint (or from the seed before the first).

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use parcae_cluster::migration::MigrationError;
use parcae_cluster::protocol::{Command, Fetch, Peer, Reply, Send};
use parcae_cluster::{
    Holding, Layout, MigrationKind, ModelSpec, Slot, Source, Strategy, WorkerId, plan_migration,
};
use parcae_policy_core::{IntervalStats, ModelProfile, ParallelConfig, reactive::best_config_for};
use parcae_runtime::GuardedPolicy;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::cloud::CloudNote;
use super::fleet::{Arrival, Fleet};
use super::report::{RunEvent, RunLog};
use super::timeline::TimeScale;
use crate::control::{self, ControlSettings};
use crate::record::PolicyHealth;

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
    pub checkpoint_every: u64,
    pub checkpoint_root: PathBuf,
    /// Stop after this many committed steps (None: run the whole trace).
    pub max_steps: Option<u64>,
    /// How long a worker may take to answer one command before it counts as lost.
    pub command_timeout: Duration,
    pub strategy: Strategy,
}

/// The last checkpoint every layer of which is on disk: one directory per
/// stage of the layout it was taken in.
#[derive(Debug, Clone)]
struct Checkpoint {
    step: u64,
    dir: PathBuf,
    stages: Vec<Range<usize>>,
}

impl Checkpoint {
    fn stage_dir(root: &std::path::Path, stage: usize) -> PathBuf {
        root.join(format!("stage-{stage:02}"))
    }

    /// The directory holding `layer`.
    fn dir_of(&self, layer: usize) -> PathBuf {
        let stage = self.stages.iter().position(|r| r.contains(&layer)).unwrap_or(0);
        Self::stage_dir(&self.dir, stage)
    }
}

/// The job as the host sees it.
struct Job {
    step: u64,
    layout: Option<Layout>,
    epoch: u64,
    checkpoint: Option<Checkpoint>,
    /// Layers each live worker holds at `step`.
    holdings: BTreeMap<WorkerId, Range<usize>>,
    /// Slot of each worker in `layout`.
    slots: BTreeMap<WorkerId, Slot>,
    /// What the policy asked for this interval (None: pause).
    desired: Option<ParallelConfig>,
    /// Set when something forces a new plan before the next step.
    dirty: bool,
    /// Step commands sent so far (each attempt gets its own number).
    attempts: u64,
    /// Whether training ever started (the first layout is a cold start, not a restart).
    started: bool,
}

/// Why the loop stopped early.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("reconfiguration failed {attempts} times in a row; last error: {last}")]
    ReconfigureExhausted { attempts: u32, last: String },
}

/// Runs the job to the end of the trace (or `max_steps`) and returns the log.
pub async fn run_job(
    settings: &RunSettings,
    policy: &mut GuardedPolicy,
    fleet: &mut Fleet,
    start: Instant,
    cloud: &mut mpsc::UnboundedReceiver<CloudNote>,
    arrivals: &mut mpsc::Receiver<Arrival>,
    log: &mut RunLog,
) -> anyhow::Result<()> {
    let layer_bytes: Vec<u64> =
        (0..settings.spec.num_layers()).map(|l| settings.spec.layer_state_bytes(l)).collect();
    let mut job = Job {
        step: 0,
        layout: None,
        epoch: 0,
        checkpoint: None,
        // Workers that joined before the loop (remote mode) hold nothing yet.
        holdings: fleet.connected().into_iter().map(|id| (id, 0..0)).collect(),
        slots: BTreeMap::new(),
        desired: None,
        dirty: true,
        attempts: 0,
        started: false,
    };
    log.start(start);
    let mut history: Vec<IntervalStats> = Vec::new();
    let mut interval_counts = IntervalStats::default();
    let mut next_interval = 0usize;
    let mut failures_in_a_row = 0u32;
    let mut fleet_changed = false;

    loop {
        let now = start.elapsed();
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
                    let Some(id) = fleet.worker_for_node(&node) else {
                        warn!(%node, "notice for an instance that is not running; ignored");
                        continue;
                    };
                    interval_counts.preemptions += 1;
                    fleet_changed = true;
                    job.dirty = true;
                    fleet.notice(id, settings.grace, settings.command_timeout).await;
                    log.event(RunEvent::Notice {
                        worker: id,
                        node,
                        grace_ms: settings.grace.as_millis() as u64,
                    });
                }
                CloudNote::Killed { node, announced } => {
                    let Some(id) = fleet.worker_of_node(&node) else { continue };
                    if !announced {
                        interval_counts.preemptions += 1;
                    }
                    fleet_changed = true;
                    job.dirty = true;
                    fleet.killed(id).await;
                    log.event(RunEvent::Killed { worker: id, node, announced });
                }
            }
        }
        let mut joined = Vec::new();
        // 3. Workers that connected.
        while let Ok(arrival) = arrivals.try_recv() {
            if let Some(id) = fleet.admit(arrival, &settings.spec, settings.command_timeout).await {
                joined.push(id);
            }
        }
        for id in joined {
            log.event(RunEvent::Joined { worker: id });
            job.holdings.insert(id, 0..0);
            interval_counts.arrivals += 1;
            fleet_changed = true;
        }
        // 4. Workers whose process or connection died.
        for id in fleet.reap_dead() {
            log.event(RunEvent::Lost { worker: id });
            job.dirty = true;
            fleet_changed = true;
        }
        job.holdings.retain(|id, _| fleet.is_alive(*id));
        job.slots.retain(|id, _| fleet.is_alive(*id));

        // 5. An interval boundary: observe, forecast, plan. Between boundaries a
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
            let decision = decide(settings, policy, &history, job.layout.as_ref());
            log.event(RunEvent::Decision {
                interval: next_interval - 1,
                instances: available,
                config: decision.config.map(|c| (c.data_parallel, c.pipeline_stages)),
                source: decision.source,
                replan,
            });
            if decision.config != job.desired {
                job.desired = decision.config;
                job.dirty = true;
            }
        }
        if settings.max_steps.is_some_and(|max| job.step >= max) {
            break;
        }

        // 6. Reconfigure at this iteration boundary if anything changed.
        if job.dirty {
            match reconfigure(settings, fleet, &mut job, &layer_bytes, log).await {
                Ok(()) => failures_in_a_row = 0,
                Err(error) => {
                    failures_in_a_row += 1;
                    warn!(%error, "reconfiguration failed; retrying with the workers left");
                    log.event(RunEvent::Failure { what: format!("reconfigure: {error:#}") });
                    if failures_in_a_row >= 5 {
                        return Err(RunError::ReconfigureExhausted {
                            attempts: failures_in_a_row,
                            last: format!("{error:#}"),
                        }
                        .into());
                    }
                    job.dirty = true;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }

        // 7. One training step, or wait for something to happen.
        match job.layout.clone() {
            Some(layout) => {
                if let Err(error) = train_step(settings, fleet, &mut job, &layout, log).await {
                    warn!(%error, step = job.step, "step failed; aborted on the survivors");
                    job.dirty = true;
                }
                let due = job.step > 0
                    && job.step.is_multiple_of(settings.checkpoint_every)
                    && job.checkpoint.as_ref().is_none_or(|c| c.step < job.step);
                if due && let Err(error) = checkpoint(settings, fleet, &mut job, &layout, log).await {
                    warn!(%error, "checkpoint failed; the previous one stays current");
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
                            log.event(RunEvent::Joined { worker: id });
                            job.holdings.insert(id, 0..0);
                            interval_counts.arrivals += 1;
                            fleet_changed = true;
                        }
                    }
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }
    }

    // A final checkpoint so the result is on disk, then a clean shutdown.
    if let Some(layout) = job.layout.clone()
        && job.checkpoint.as_ref().is_none_or(|c| c.step < job.step)
        && let Err(error) = checkpoint(settings, fleet, &mut job, &layout, log).await
    {
        warn!(%error, "final checkpoint failed");
    }
    let health = PolicyHealth::new(&policy.predictor_counts(), &policy.optimizer_counts());
    log.finish(job.step, job.checkpoint.as_ref().map(|c| c.dir.clone()), Some(health));
    Ok(())
}

struct Decision {
    config: Option<ParallelConfig>,
    source: &'static str,
}

/// Forecast and optimize for the interval starting now (the last of `history`).
fn decide(
    settings: &RunSettings,
    policy: &mut GuardedPolicy,
    history: &[IntervalStats],
    current: Option<&Layout>,
) -> Decision {
    let Some((now, past)) = history.split_last() else {
        // No interval observed yet: nothing to plan for, so pause.
        return Decision { config: None, source: "-" };
    };
    // The replayed cloud's notice (the grace period), in trace time, with the
    // checkpoint write rate of the embedded cost constants.
    let scale = settings.scale;
    let notice_ms =
        settings.grace.as_secs_f64() / scale.wall_interval.as_secs_f64() * scale.trace_interval_ms as f64;
    let recovery = crate::embedded::constants_or_embedded(None)
        .and_then(|c| c.recovery(notice_ms))
        .unwrap_or(parcae_policy_core::Recovery::UNANNOUNCED);
    let control = ControlSettings {
        interval_ms: scale.trace_interval_ms,
        horizon: settings.horizon,
        fleet_max: settings.fleet_max,
        recovery,
    };
    let current = current.map(|l| ParallelConfig::new(l.data_parallel as u32, l.pipeline_stages as u32));
    let step = control::decide(policy, &control, &settings.profile, past, *now, current);
    Decision { config: step.config, source: step.optimizer }
}

/// The layout to run now: the policy's wish if the workers that stay can hold
/// it, else the best profiled layout that fits them (None: pause).
fn effective_layout(
    settings: &RunSettings,
    desired: Option<ParallelConfig>,
    available: usize,
) -> Option<Layout> {
    let fits = |c: ParallelConfig| {
        c.instances() <= available as u64
            && Layout::new(&settings.spec, c.data_parallel as usize, c.pipeline_stages as usize).is_ok()
    };
    let config = match desired {
        Some(c) if fits(c) => Some(c),
        Some(_) => {
            // The fleet shrank since the decision: the best layout the profile knows that fits.
            let mut fitting = settings.profile.clone();
            fitting.configs.retain(|c| fits(c.config));
            best_config_for(&fitting, available as u32).map(|c| c.config)
        }
        None => None,
    }?;
    Layout::new(&settings.spec, config.data_parallel as usize, config.pipeline_stages as usize).ok()
}

/// Plans and executes the move to the layout the job should run now.
async fn reconfigure(
    settings: &RunSettings,
    fleet: &mut Fleet,
    job: &mut Job,
    layer_bytes: &[u64],
    log: &mut RunLog,
) -> anyhow::Result<()> {
    let staying = fleet.available();
    let target = effective_layout(settings, job.desired, staying.len());
    let current_ok = job.layout.is_some()
        && job.layout == target
        && job.slots.len() == target.as_ref().map_or(0, Layout::workers)
        && job.slots.keys().all(|id| staying.contains(id));
    if current_ok {
        job.dirty = false;
        return Ok(());
    }
    // A pause trains nothing, but state that only leaving workers hold must
    // still move to workers that stay ("parking" it in a one-replica layout),
    // or the job would have to restart from the checkpoint later.
    let stranded = (0..settings.spec.num_layers())
        .any(|l| !staying.iter().any(|id| job.holdings.get(id).is_some_and(|r| r.contains(&l))));
    let parking =
        target.is_none() && stranded && !staying.is_empty() && job.holdings.values().any(|r| !r.is_empty());
    let target = match target {
        Some(target) => target,
        None if parking => {
            let p = job.layout.as_ref().map_or(1, |l| l.pipeline_stages).clamp(1, staying.len());
            Layout::new(&settings.spec, 1, p)?
        }
        None => {
            if job.layout.is_some() {
                log.event(RunEvent::Paused { step: job.step, available: staying.len() });
            }
            job.layout = None;
            job.slots.clear();
            job.dirty = false;
            return Ok(());
        }
    };
    let holdings: Vec<Holding> = fleet
        .connected()
        .into_iter()
        .map(|id| Holding {
            worker: id,
            layers: job.holdings.get(&id).cloned().unwrap_or(0..0),
            leaving: !staying.contains(&id),
        })
        .collect();
    let plan = plan_migration(layer_bytes, job.layout.as_ref(), &holdings, &target, settings.strategy)
        .map_err(|e: MigrationError| anyhow::anyhow!(e))?;
    let started = Instant::now();
    let step = if plan.kind == MigrationKind::Restart {
        job.checkpoint.as_ref().map_or(0, |c| c.step)
    } else {
        job.step
    };
    job.epoch += 1;
    let epoch = job.epoch;
    let peers: Vec<Peer> = plan
        .assignment
        .iter()
        .map(|&(slot, worker)| Peer {
            worker,
            name: fleet.peer_name(worker).expect("planned worker is connected"),
            slot,
            addr: fleet.peer_addr(worker).expect("planned worker is connected"),
        })
        .collect();
    let mut commands: BTreeMap<WorkerId, Command> = BTreeMap::new();
    for holding in &holdings {
        let id = holding.worker;
        let slot = plan.slot_of(id);
        let keep = slot.map_or(0..0, |s| target.layers(s));
        let sends: Vec<Send> = plan
            .transfers
            .iter()
            .filter(|t| t.from == Source::Worker(id))
            .map(|t| Send {
                layer: t.layer,
                to: t.to,
                name: fleet.peer_name(t.to).expect("receiver is connected"),
                addr: fleet.peer_addr(t.to).expect("receiver is connected"),
            })
            .collect();
        let fetches: Vec<Fetch> = plan
            .transfers
            .iter()
            .filter(|t| t.to == id)
            .map(|t| match (t.from, &job.checkpoint) {
                (Source::Worker(from), _) => Fetch::FromPeer { layer: t.layer, from },
                (Source::Checkpoint, Some(c)) => {
                    Fetch::FromCheckpoint { layer: t.layer, dir: c.dir_of(t.layer) }
                }
                (Source::Checkpoint, None) => Fetch::Fresh { layer: t.layer },
            })
            .collect();
        commands.insert(
            id,
            Command::Reconfigure {
                epoch,
                step,
                layout: target.clone(),
                slot,
                keep,
                sends,
                fetches,
                peers: peers.clone(),
            },
        );
    }
    fleet.shared.set_epoch(epoch, commands.keys().copied());
    let replies = fleet.call_many(commands, settings.command_timeout).await;
    fleet.shared.set_epoch(0, []);
    let mut failed = Vec::new();
    let (mut sent, mut resent) = (0u64, 0u64);
    for (id, reply) in &replies {
        match reply {
            Ok(Reply::Reconfigured { bytes_sent, resent_chunks, .. }) => {
                sent += bytes_sent;
                resent += resent_chunks;
            }
            Ok(other) => failed.push(format!("worker {id}: {}", describe(other))),
            Err(e) => failed.push(format!("worker {id}: {e}")),
        }
    }
    // Workers that finished hold their new layers; the others kept their old
    // state (a worker swaps state in only when every fetch arrived).
    for (id, reply) in &replies {
        if matches!(reply, Ok(Reply::Reconfigured { .. })) {
            let keep = plan.slot_of(*id).map_or(0..0, |s| target.layers(s));
            job.holdings.insert(*id, keep);
        }
    }
    if !failed.is_empty() {
        // Nobody trains on a half-applied plan.
        job.layout = None;
        job.slots.clear();
        if plan.kind == MigrationKind::Restart {
            // Survivors that did reload are at the checkpoint step; the rest would be ahead.
            job.holdings.clear();
        }
        anyhow::bail!("{}", failed.join("; "));
    }
    let millis = started.elapsed().as_secs_f64() * 1000.0;
    let rolled_back_steps = job.step - step;
    job.step = step;
    if parking {
        job.slots.clear();
        job.layout = None;
    } else {
        job.slots = plan.assignment.iter().map(|&(slot, id)| (id, slot)).collect();
        job.layout = Some(target.clone());
    }
    job.dirty = false;
    info!(
        kind = plan.kind.as_str(),
        d = target.data_parallel,
        p = target.pipeline_stages,
        bytes = plan.bytes_moved,
        millis,
        "reconfigured"
    );
    let cold_start = !job.started;
    job.started = true;
    log.event(RunEvent::Reconfigured {
        epoch,
        cold_start,
        step,
        rolled_back_steps,
        kind: plan.kind,
        data_parallel: target.data_parallel,
        pipeline_stages: target.pipeline_stages,
        bytes_moved: plan.bytes_moved,
        bytes_sent: sent,
        bytes_from_checkpoint: plan.bytes_from_checkpoint,
        resent_chunks: resent,
        millis,
        parked: parking,
    });
    if parking {
        log.event(RunEvent::Paused { step: job.step, available: staying.len() });
    }
    Ok(())
}

fn describe(reply: &Reply) -> String {
    match reply {
        Reply::Failed { reason } => reason.clone(),
        other => format!("unexpected reply {other:?}"),
    }
}

/// One two-phase step over every slot's worker.
async fn train_step(
    settings: &RunSettings,
    fleet: &mut Fleet,
    job: &mut Job,
    layout: &Layout,
    log: &mut RunLog,
) -> anyhow::Result<()> {
    let step = job.step;
    let started = Instant::now();
    let workers: Vec<WorkerId> = job.slots.keys().copied().collect();
    job.attempts += 1;
    let attempt = job.attempts;
    let commands = workers.iter().map(|&id| (id, Command::Step { step, attempt })).collect();
    fleet.shared.set_attempt(attempt, workers.iter().copied());
    let replies = fleet.call_many(commands, settings.command_timeout).await;
    fleet.shared.set_attempt(0, []);
    let mut loss_sum = 0.0;
    let mut failed = Vec::new();
    for (id, reply) in &replies {
        match reply {
            Ok(Reply::Stepped { loss_sum: Some(loss), .. }) => loss_sum += loss,
            Ok(Reply::Stepped { .. }) => {}
            Ok(other) => failed.push(format!("worker {id}: {}", describe(other))),
            Err(e) => failed.push(format!("worker {id}: {e}")),
        }
    }
    if !failed.is_empty() {
        let aborts = workers
            .iter()
            .filter(|id| fleet.is_alive(**id))
            .map(|&id| (id, Command::Abort { step }))
            .collect();
        let _ = fleet.call_many(aborts, settings.command_timeout).await;
        log.event(RunEvent::Aborted { step, reason: failed.join("; ") });
        anyhow::bail!("step {step}: {}", failed.join("; "));
    }
    let commits = workers.iter().map(|&id| (id, Command::Commit { step })).collect();
    let replies = fleet.call_many(commits, settings.command_timeout).await;
    // A worker lost between compute and commit: the others committed, the lost
    // one's layers live on in its replicas or force a restart, as after any loss.
    for (id, reply) in replies {
        if !matches!(reply, Ok(Reply::Committed { .. })) {
            warn!(worker = id, "commit not acknowledged");
            job.holdings.remove(&id);
            job.dirty = true;
        }
    }
    job.step += 1;
    let samples = settings.spec.global_batch as u64;
    // Each last stage reports the sum of its sequences' mean token loss.
    let loss = loss_sum / settings.spec.global_batch as f64;
    log.event(RunEvent::Step {
        step,
        loss,
        samples,
        millis: started.elapsed().as_secs_f64() * 1000.0,
        data_parallel: layout.data_parallel,
        pipeline_stages: layout.pipeline_stages,
    });
    Ok(())
}

/// Replica 0 of every stage writes its layers; the checkpoint counts once all did.
async fn checkpoint(
    settings: &RunSettings,
    fleet: &mut Fleet,
    job: &mut Job,
    layout: &Layout,
    log: &mut RunLog,
) -> anyhow::Result<()> {
    let step = job.step;
    let dir = settings.checkpoint_root.join(format!("step-{step:08}"));
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("creating checkpoint directory {}", dir.display()))?;
    let started = Instant::now();
    let writers: BTreeMap<WorkerId, Command> = job
        .slots
        .iter()
        .filter(|(_, slot)| slot.replica == 0)
        .map(|(&id, slot)| (id, Command::Checkpoint { step, dir: Checkpoint::stage_dir(&dir, slot.stage) }))
        .collect();
    let replies = fleet.call_many(writers, settings.command_timeout).await;
    let mut bytes = 0;
    for (id, reply) in &replies {
        match reply {
            Ok(Reply::Checkpointed { bytes: b, .. }) => bytes += b,
            Ok(other) => anyhow::bail!("checkpoint at step {step}: worker {id}: {}", describe(other)),
            Err(e) => anyhow::bail!("checkpoint at step {step}: worker {id}: {e}"),
        }
    }
    // The marker that makes the checkpoint usable, written last.
    let marker =
        serde_json::json!({ "step": step, "layers": settings.spec.num_layers(), "stages": layout.stages });
    let tmp = dir.join("COMPLETE.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&marker)?)
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, dir.join("COMPLETE"))
        .with_context(|| format!("completing checkpoint {}", dir.display()))?;
    let previous =
        job.checkpoint.replace(Checkpoint { step, dir: dir.clone(), stages: layout.stages.clone() });
    if let Some(old) = previous {
        // Keep only the newest complete checkpoint.
        let _ = std::fs::remove_dir_all(old.dir);
    }
    log.event(RunEvent::Checkpointed { step, bytes, millis: started.elapsed().as_secs_f64() * 1000.0, dir });
    Ok(())
}
