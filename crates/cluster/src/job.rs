//! The job as the host sees it, and the pure rules that move it forward: which
//! layout to run, how a migration plan becomes one command per worker (parking
//! state held only by leaving workers on workers that stay), which workers
//! write a checkpoint, and whether a step commits or aborts.
//!
//! Nothing here does I/O: `parcae-host run`'s orchestrator sends the commands
//! this module builds and feeds the replies back, so every rule is testable
//! without processes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::ops::Range;

use parcae_policy_core::reactive::best_config_for;
use parcae_policy_core::{ModelProfile, ParallelConfig};

use crate::layout::{Layout, ModelSpec, Slot};
use crate::migration::{
    AssignmentStrategy, Holding, MigrationError, MigrationKind, MigrationPlan, TransferSource, WorkerId,
    plan_migration,
};
use crate::protocol::{Fetch, PeerAddress, Reconfiguration, SendLayer};

/// Where checkpoints live inside the checkpoint store.
pub const CHECKPOINTS: &str = "checkpoints";
/// The object, inside a checkpoint's prefix, whose presence makes it complete: written
/// last, after every stage's manifest. It holds the [`JobCheckpoint`] as JSON.
pub const COMPLETE_MARKER: &str = "COMPLETE";
/// The pointer to the newest complete checkpoint (a [`JobCheckpoint`] as JSON), replaced
/// after each completion marker.
pub const LATEST_POINTER: &str = "checkpoints/LATEST";

/// A complete checkpoint in the checkpoint store: one prefix per stage of the partition it
/// was written in, plus a completion marker written last.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobCheckpoint {
    /// The step training resumes from when restarting from it.
    pub step: u64,
    /// Its key prefix, holding the stage prefixes and the marker.
    pub prefix: String,
    /// The layer ranges of its stages, in order.
    pub stages: Vec<Range<usize>>,
}

impl JobCheckpoint {
    /// The key prefix of the checkpoint at `step`.
    pub fn prefix_for(step: u64) -> String {
        format!("{CHECKPOINTS}/step-{step:08}")
    }

    /// The key prefix stage `stage` of a checkpoint at `root` writes under.
    pub fn stage_prefix(root: &str, stage: usize) -> String {
        format!("{root}/stage-{stage:02}")
    }

    /// The key of this checkpoint's completion marker.
    pub fn marker(&self) -> String {
        format!("{}/{COMPLETE_MARKER}", self.prefix)
    }

    /// The stage prefix holding `layer`, None when no stage covers it.
    pub fn prefix_of(&self, layer: usize) -> Option<String> {
        let stage = self.stages.iter().position(|r| r.contains(&layer))?;
        Some(Self::stage_prefix(&self.prefix, stage))
    }
}

/// How the host reaches a worker (what a peer dials and checks).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerContact {
    /// The name on its cluster certificate.
    pub name: String,
    /// Where it listens for the host and its peers.
    pub addr: SocketAddr,
    /// How many times as long its compute takes as the nominal worker's (its instance
    /// type's speed; 1 in a fleet of one type): the batch is split by it.
    pub slowdown: f64,
}

/// Why the job cannot move on as asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JobError {
    /// No valid migration plan from the current holdings to the target layout.
    #[error(transparent)]
    Migration(#[from] MigrationError),
    /// A worker chosen for a slot never told the host where it listens.
    #[error("worker {0} is in the plan but the host has no address for it")]
    NoContact(WorkerId),
    /// A restart needs a layer the newest checkpoint does not hold.
    #[error("layer {layer} must come from the checkpoint of step {step}, which has no stage holding it")]
    CheckpointGap {
        /// The layer nothing can supply.
        layer: usize,
        /// The checkpoint's step.
        step: u64,
    },
    /// The staying workers cannot park the leaving workers' state.
    #[error("the parking layout for {workers} workers: {reason}")]
    Parking {
        /// How many workers stay to hold the state.
        workers: usize,
        /// Why no one-replica layout fits them.
        reason: String,
    },
    /// The batch cannot be split by the assigned workers' speeds.
    #[error("splitting the batch by the workers' speeds: {0}")]
    Split(String),
    /// Some workers reported failure, so the epoch does not commit.
    #[error("reconfiguration epoch {epoch} failed on {}", failures.join("; "))]
    ReconfigureFailed {
        /// The epoch that failed.
        epoch: u64,
        /// One "worker: reason" line per failing worker.
        failures: Vec<String>,
    },
}

/// What the job should do about the layout at an iteration boundary.
#[derive(Debug, Clone, PartialEq)]
pub enum ReconfigureDecision {
    /// The current layout and slots stand.
    Keep,
    /// No layout fits and no state needs a new home: stop training until one fits.
    Pause,
    /// Send these commands.
    Execute(Box<ReconfigurePlan>),
}

/// One reconfiguration, ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct ReconfigurePlan {
    /// Tags every command and reply, so stale replies are told apart.
    pub epoch: u64,
    /// The layout the job runs once the commands succeed.
    pub target: Layout,
    /// Which layers move from where to where.
    pub migration: MigrationPlan,
    /// The step the job trains from afterwards (the checkpoint's on a restart).
    pub step: u64,
    /// Only moving state off leaving workers (no layout fits): pause afterwards.
    pub parking: bool,
    /// One command per worker taking part.
    pub commands: BTreeMap<WorkerId, Reconfiguration>,
}

/// A worker's part of a finished reconfiguration.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ReconfigureStats {
    /// State bytes the worker sent to peers.
    pub bytes_sent: u64,
    /// Chunks resent after a checksum mismatch or a lost stream.
    pub resent_chunks: u64,
}

/// What a successful reconfiguration did to the job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReconfigureOutcome {
    /// The job's first layout (nothing to migrate yet).
    pub cold_start: bool,
    /// Committed steps undone (a restart from an older checkpoint).
    pub rolled_back_steps: u64,
    /// Why they were undone (None when nothing was).
    pub rollback_cause: Option<RollbackCause>,
    /// State bytes moved between workers, summed over all of them.
    pub bytes_sent: u64,
    /// Chunks resent, summed over all workers (a sign of a lossy network).
    pub resent_chunks: u64,
}

/// Why committed work was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RollbackCause {
    /// A holder vanished without notice (or its connection died).
    Unannounced,
    /// Every holder had a notice, but neither evacuation nor an emergency
    /// checkpoint finished within it.
    NoticeTooShort,
}

/// A worker's answer to a step command, reduced to what the commit rule needs.
#[derive(Debug, Clone, PartialEq)]
pub enum StepReport {
    /// Computed; a last stage reports its summed loss.
    Computed {
        /// The summed loss, only from a last stage.
        loss_sum: Option<f64>,
    },
    /// Could not compute the step; the reason is reported with the abort.
    Failed(String),
}

/// Whether a step may be applied.
#[derive(Debug, Clone, PartialEq)]
pub enum StepVerdict {
    /// Every slot computed: commit everywhere. `loss_sum` over every last stage.
    Commit {
        /// Summed loss over every last stage's micro-batches.
        loss_sum: f64,
    },
    /// Some slot failed: abort on the survivors, who stay at the last committed step.
    Abort {
        /// One line per failing worker.
        reasons: Vec<String>,
    },
}

/// The commit rule: commit only when every slot's worker computed the step.
pub fn settle_step(reports: &BTreeMap<WorkerId, StepReport>) -> StepVerdict {
    let reasons: Vec<String> = reports
        .iter()
        .filter_map(|(id, r)| match r {
            StepReport::Failed(reason) => Some(format!("worker {id}: {reason}")),
            StepReport::Computed { .. } => None,
        })
        .collect();
    if reports.is_empty() {
        return StepVerdict::Abort { reasons: vec!["no worker holds a slot".into()] };
    }
    if !reasons.is_empty() {
        return StepVerdict::Abort { reasons };
    }
    let loss_sum = reports
        .values()
        .filter_map(|r| match r {
            StepReport::Computed { loss_sum } => *loss_sum,
            StepReport::Failed(_) => None,
        })
        .sum();
    StepVerdict::Commit { loss_sum }
}

/// The layout to run now: the policy's wish if the workers that stay can hold
/// it, else the best profiled layout that fits them (None: pause).
pub fn effective_layout(
    spec: &ModelSpec,
    profile: &ModelProfile,
    desired: Option<ParallelConfig>,
    available: usize,
) -> Option<Layout> {
    let fits = |c: ParallelConfig| {
        c.instances() <= available as u64
            && Layout::new(spec, c.data_parallel as usize, c.pipeline_stages as usize).is_ok()
    };
    let config = match desired {
        Some(c) if fits(c) => Some(c),
        Some(_) => {
            // The fleet shrank since the decision: the best layout the profile knows that fits.
            let mut fitting = profile.clone();
            fitting.configs.retain(|c| fits(c.config));
            best_config_for(&fitting, available as u32).map(|c| c.config)
        }
        None => None,
    }?;
    Layout::new(spec, config.data_parallel as usize, config.pipeline_stages as usize).ok()
}

/// `target` with its batch split by the speeds of the workers assigned to it: a replica
/// runs at its slowest worker's pace, and the faster replicas take more micro-batches
/// ([`Layout::split_by_speed`]). Workers of one speed keep the even split.
fn shares_by_speed(
    spec: &ModelSpec,
    target: Layout,
    assignment: &[(Slot, WorkerId)],
    contacts: &BTreeMap<WorkerId, WorkerContact>,
) -> Result<Layout, JobError> {
    let mut ticks = vec![1.0f64; target.data_parallel];
    for &(slot, worker) in assignment {
        let slowdown = contacts.get(&worker).ok_or(JobError::NoContact(worker))?.slowdown;
        if let Some(t) = ticks.get_mut(slot.replica) {
            *t = t.max(slowdown);
        }
    }
    if ticks.iter().all(|t| *t == ticks[0]) {
        return Ok(target.without_shares());
    }
    target.split_by_speed(spec, &ticks).map_err(|e| JobError::Split(e.to_string()))
}

/// The job's state between commands.
#[derive(Debug, Clone, Default)]
pub struct JobState {
    /// The next step to train (= committed steps).
    pub step: u64,
    /// The layout the slots follow (None before the first one, or paused).
    pub layout: Option<Layout>,
    /// The last reconfiguration's epoch.
    pub epoch: u64,
    /// The newest complete checkpoint.
    pub checkpoint: Option<JobCheckpoint>,
    /// Layers each live worker holds at `step`.
    pub holdings: BTreeMap<WorkerId, Range<usize>>,
    /// Slot of each worker in `layout`.
    pub slots: BTreeMap<WorkerId, Slot>,
    /// What the policy asked for this interval (None: pause).
    pub desired: Option<ParallelConfig>,
    /// Set when something forces a new plan before the next step.
    pub dirty: bool,
    /// Step commands sent so far (each attempt gets its own number).
    pub attempts: u64,
    /// Whether training ever started (the first layout is a cold start, not a restart).
    pub started: bool,
    /// A holder was lost without notice since the state last proved whole.
    pub unannounced_loss: bool,
    /// Workers whose layers were dropped because they did not acknowledge a
    /// commit: they held state until then, so losing them later without
    /// notice is what rolls the job back.
    pub unacknowledged: BTreeSet<WorkerId>,
}

impl JobState {
    /// A job that has trained nothing; `workers` are connected and hold nothing.
    pub fn new(workers: impl IntoIterator<Item = WorkerId>) -> Self {
        JobState {
            holdings: workers.into_iter().map(|id| (id, 0..0)).collect(),
            dirty: true,
            ..Default::default()
        }
    }

    /// A worker connected (it holds nothing yet).
    pub fn joined(&mut self, id: WorkerId) {
        self.holdings.insert(id, 0..0);
    }

    /// Forgets workers that are gone: their state with them.
    pub fn retain_alive(&mut self, alive: impl Fn(WorkerId) -> bool) {
        self.holdings.retain(|id, _| alive(*id));
        self.slots.retain(|id, _| alive(*id));
        self.unacknowledged.retain(|id| alive(*id));
    }

    /// A worker went without notice. It costs work only if it held state: its
    /// layers now, or until it failed to acknowledge a commit (a kill between
    /// a step's compute and its commit drops the holdings before the loss is
    /// seen).
    pub fn lost_without_notice(&mut self, id: WorkerId) {
        if self.holdings.get(&id).is_some_and(|r| !r.is_empty()) || self.unacknowledged.contains(&id) {
            self.unannounced_loss = true;
        }
    }

    /// Whether any worker holds trained (or seeded) state.
    pub fn holds_state(&self) -> bool {
        self.holdings.values().any(|r| !r.is_empty())
    }

    /// Layers none of `staying` holds: they live only on leaving workers or nowhere.
    pub fn stranded_layers(&self, num_layers: usize, staying: &[WorkerId]) -> Vec<usize> {
        (0..num_layers)
            .filter(|l| !staying.iter().any(|id| self.holdings.get(id).is_some_and(|r| r.contains(l))))
            .collect()
    }

    /// Workers among `eligible` whose held layers together cover the model once,
    /// in layer order: the writers of a checkpoint at `step` (None when no such
    /// cover exists, i.e. some layer has no holder). Prefers the holder with the
    /// longest range, then the lowest id, so the choice is deterministic.
    pub fn checkpoint_writers(
        &self,
        num_layers: usize,
        eligible: &[WorkerId],
    ) -> Option<Vec<(WorkerId, Range<usize>)>> {
        let mut writers = Vec::new();
        let mut layer = 0;
        while layer < num_layers {
            let (id, range) = eligible
                .iter()
                .filter_map(|id| self.holdings.get(id).map(|r| (*id, r.clone())))
                .filter(|(_, r)| r.start == layer && !r.is_empty())
                .max_by_key(|(id, r)| (r.end, std::cmp::Reverse(*id)))?;
            layer = range.end;
            writers.push((id, range));
        }
        Some(writers)
    }

    /// Decides what to do about the layout, given the layout that should run
    /// (`target`, from [`effective_layout`]), the workers that stay, and every
    /// connected worker's contact. An `Execute` plan takes the next epoch.
    #[expect(
        clippy::too_many_arguments,
        reason = "each input is an independent fact about the fleet; a struct would only rename them"
    )]
    pub fn plan_reconfiguration(
        &mut self,
        spec: &ModelSpec,
        layer_bytes: &[u64],
        target: Option<Layout>,
        connected: &[WorkerId],
        staying: &[WorkerId],
        contacts: &BTreeMap<WorkerId, WorkerContact>,
        strategy: AssignmentStrategy,
    ) -> Result<ReconfigureDecision, JobError> {
        let current_ok = self.layout.is_some()
            && self.layout.as_ref().map(Layout::without_shares)
                == target.as_ref().map(Layout::without_shares)
            && self.slots.len() == target.as_ref().map_or(0, Layout::workers)
            && self.slots.keys().all(|id| staying.contains(id));
        if current_ok {
            return Ok(ReconfigureDecision::Keep);
        }
        // A pause trains nothing, but state that only leaving workers hold must
        // still move to workers that stay ("parking" it in a one-replica layout),
        // or the job would have to restart from a checkpoint later.
        let stranded = !self.stranded_layers(spec.num_layers(), staying).is_empty();
        let parking = target.is_none() && stranded && !staying.is_empty() && self.holds_state();
        let target = match target {
            Some(target) => target,
            None if parking => {
                let p = self.layout.as_ref().map_or(1, |l| l.pipeline_stages).clamp(1, staying.len());
                Layout::new(spec, 1, p)
                    .map_err(|e| JobError::Parking { workers: staying.len(), reason: e.to_string() })?
            }
            None => return Ok(ReconfigureDecision::Pause),
        };
        let holdings: Vec<Holding> = connected
            .iter()
            .map(|&id| Holding {
                worker: id,
                layers: self.holdings.get(&id).cloned().unwrap_or(0..0),
                leaving: !staying.contains(&id),
                slowdown: contacts.get(&id).map_or(1.0, |c| c.slowdown),
            })
            .collect();
        let migration = plan_migration(layer_bytes, self.layout.as_ref(), &holdings, &target, strategy)?;
        let step = if migration.kind == MigrationKind::Restart {
            self.checkpoint.as_ref().map_or(0, |c| c.step)
        } else {
            self.step
        };
        let contact = |id: WorkerId| contacts.get(&id).ok_or(JobError::NoContact(id));
        let target = shares_by_speed(spec, target, &migration.assignment, contacts)?;
        let peers = migration
            .assignment
            .iter()
            .map(|&(slot, worker)| {
                let c = contact(worker)?;
                Ok(PeerAddress { worker, name: c.name.clone(), slot, addr: c.addr })
            })
            .collect::<Result<Vec<_>, JobError>>()?;
        let epoch = self.epoch + 1;
        let mut commands = BTreeMap::new();
        for holding in &holdings {
            let id = holding.worker;
            let slot = migration.slot_of(id);
            let mut sends = Vec::new();
            let mut fetches = Vec::new();
            for t in &migration.transfers {
                if t.from == TransferSource::Worker(id) {
                    let to = contact(t.to)?;
                    sends.push(SendLayer { layer: t.layer, to: t.to, name: to.name.clone(), addr: to.addr });
                }
                if t.to == id {
                    fetches.push(match (t.from, &self.checkpoint) {
                        (TransferSource::Worker(from), _) => Fetch::FromPeer { layer: t.layer, from },
                        (TransferSource::Checkpoint, Some(c)) => Fetch::FromCheckpoint {
                            layer: t.layer,
                            prefix: c
                                .prefix_of(t.layer)
                                .ok_or(JobError::CheckpointGap { layer: t.layer, step: c.step })?,
                        },
                        (TransferSource::Checkpoint, None) => Fetch::Fresh { layer: t.layer },
                    });
                }
            }
            commands.insert(
                id,
                Reconfiguration {
                    epoch,
                    step,
                    layout: target.clone(),
                    slot,
                    keep: slot.map_or(0..0, |s| target.layers(s)),
                    sends,
                    fetches,
                    peers: peers.clone(),
                },
            );
        }
        self.epoch = epoch;
        Ok(ReconfigureDecision::Execute(Box::new(ReconfigurePlan {
            epoch,
            target,
            migration,
            step,
            parking,
            commands,
        })))
    }

    /// Stops training (no layout fits); returns whether a layout was running.
    pub fn pause(&mut self) -> bool {
        let was_running = self.layout.is_some();
        self.layout = None;
        self.slots.clear();
        self.dirty = false;
        was_running
    }

    /// Applies the workers' answers to `plan`. Workers that finished hold their
    /// new layers; the others kept their old state (a worker swaps state in only
    /// when every fetch arrived). Any failure leaves the job without a layout:
    /// nobody trains on a half-applied plan.
    pub fn settle_reconfiguration(
        &mut self,
        plan: &ReconfigurePlan,
        outcomes: &BTreeMap<WorkerId, Result<ReconfigureStats, String>>,
    ) -> Result<ReconfigureOutcome, JobError> {
        let mut failures = Vec::new();
        let (mut bytes_sent, mut resent_chunks) = (0, 0);
        for (id, outcome) in outcomes {
            match outcome {
                Ok(stats) => {
                    bytes_sent += stats.bytes_sent;
                    resent_chunks += stats.resent_chunks;
                    self.holdings.insert(*id, plan.commands.get(id).map_or(0..0, |c| c.keep.clone()));
                }
                Err(reason) => failures.push(format!("worker {id}: {reason}")),
            }
        }
        for id in plan.commands.keys().filter(|id| !outcomes.contains_key(id)) {
            failures.push(format!("worker {id}: no answer"));
        }
        if !failures.is_empty() {
            self.layout = None;
            self.slots.clear();
            if plan.migration.kind == MigrationKind::Restart {
                // Survivors that did reload are at the checkpoint step; the rest would be ahead.
                self.holdings.clear();
            }
            return Err(JobError::ReconfigureFailed { epoch: plan.epoch, failures });
        }
        let rolled_back_steps = self.step - plan.step;
        let rollback_cause = (rolled_back_steps > 0).then_some(if self.unannounced_loss {
            RollbackCause::Unannounced
        } else {
            RollbackCause::NoticeTooShort
        });
        // The state is whole again: a later restart has a later cause.
        self.unannounced_loss = false;
        self.unacknowledged.clear();
        self.step = plan.step;
        if plan.parking {
            self.slots.clear();
            self.layout = None;
        } else {
            self.slots = plan.migration.assignment.iter().map(|&(slot, id)| (id, slot)).collect();
            self.layout = Some(plan.target.clone());
        }
        self.dirty = false;
        let cold_start = !self.started;
        self.started = true;
        Ok(ReconfigureOutcome { cold_start, rolled_back_steps, rollback_cause, bytes_sent, resent_chunks })
    }

    /// The next step attempt's number.
    pub fn next_attempt(&mut self) -> u64 {
        self.attempts += 1;
        self.attempts
    }

    /// Records a committed step. A worker that did not acknowledge the commit
    /// is not trusted with its layers any more (they live on in its replicas or
    /// in a checkpoint) and the job re-plans.
    pub fn committed(&mut self, unacknowledged: &[WorkerId]) {
        for id in unacknowledged {
            if self.holdings.remove(id).is_some_and(|r| !r.is_empty()) {
                self.unacknowledged.insert(*id);
            }
            self.dirty = true;
        }
        self.step += 1;
    }

    /// Makes `checkpoint` the current one; returns the one it replaces (to delete).
    pub fn checkpoint_completed(&mut self, checkpoint: JobCheckpoint) -> Option<JobCheckpoint> {
        match &self.checkpoint {
            Some(current) if current.step > checkpoint.step => Some(checkpoint),
            _ => self.checkpoint.replace(checkpoint),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migration::AssignmentStrategy::KuhnMunkres;

    fn spec() -> ModelSpec {
        ModelSpec::default()
    }

    fn layer_bytes() -> Vec<u64> {
        let spec = spec();
        (0..spec.num_layers()).map(|l| spec.layer_state_bytes(l)).collect()
    }

    fn contacts(ids: &[WorkerId]) -> BTreeMap<WorkerId, WorkerContact> {
        ids.iter()
            .map(|&id| {
                let addr = SocketAddr::from(([127, 0, 0, 1], 9000 + id as u16));
                (id, WorkerContact { name: format!("worker-{id}"), addr, slowdown: 1.0 })
            })
            .collect()
    }

    fn ok_all(plan: &ReconfigurePlan) -> BTreeMap<WorkerId, Result<ReconfigureStats, String>> {
        plan.commands.keys().map(|&id| (id, Ok(ReconfigureStats::default()))).collect()
    }

    fn execute(decision: ReconfigureDecision) -> ReconfigurePlan {
        match decision {
            ReconfigureDecision::Execute(plan) => *plan,
            other => panic!("expected a plan, got {other:?}"),
        }
    }

    /// A job running (1, 2) on workers 1 and 2 at step 7.
    fn running_1x2() -> JobState {
        let spec = spec();
        let mut job = JobState::new([1, 2]);
        let target = Layout::new(&spec, 1, 2).unwrap();
        let plan = execute(
            job.plan_reconfiguration(
                &spec,
                &layer_bytes(),
                Some(target),
                &[1, 2],
                &[1, 2],
                &contacts(&[1, 2]),
                KuhnMunkres,
            )
            .unwrap(),
        );
        job.settle_reconfiguration(&plan, &ok_all(&plan)).unwrap();
        job.step = 7;
        job
    }

    #[test]
    fn a_cold_start_builds_every_layer_fresh_and_gives_each_worker_its_stage() {
        let spec = spec();
        let mut job = JobState::new([1, 2]);
        let target = Layout::new(&spec, 1, 2).unwrap();
        let plan = execute(
            job.plan_reconfiguration(
                &spec,
                &layer_bytes(),
                Some(target.clone()),
                &[1, 2],
                &[1, 2],
                &contacts(&[1, 2]),
                KuhnMunkres,
            )
            .unwrap(),
        );
        assert_eq!(plan.epoch, 1);
        let fetched: usize = plan.commands.values().map(|c| c.fetches.len()).sum();
        assert_eq!(fetched, spec.num_layers());
        assert!(plan.commands.values().flat_map(|c| &c.fetches).all(|f| matches!(f, Fetch::Fresh { .. })));
        let outcome = job.settle_reconfiguration(&plan, &ok_all(&plan)).unwrap();
        assert!(outcome.cold_start);
        assert_eq!(job.layout, Some(target.clone()));
        let held: Vec<Range<usize>> = job.holdings.values().cloned().collect();
        assert_eq!(held, target.stages);
        // Same fleet, same wish: nothing to do.
        let again = job
            .plan_reconfiguration(
                &spec,
                &layer_bytes(),
                Some(target),
                &[1, 2],
                &[1, 2],
                &contacts(&[1, 2]),
                KuhnMunkres,
            )
            .unwrap();
        assert_eq!(again, ReconfigureDecision::Keep);
    }

    #[test]
    fn state_held_only_by_leaving_workers_is_parked_on_a_worker_that_stays() {
        let spec = spec();
        let mut job = running_1x2();
        job.joined(3);
        // Workers 1 and 2 are under notice; only 3 stays, too few for any layout.
        let plan = execute(
            job.plan_reconfiguration(
                &spec,
                &layer_bytes(),
                None,
                &[1, 2, 3],
                &[3],
                &contacts(&[1, 2, 3]),
                KuhnMunkres,
            )
            .unwrap(),
        );
        assert!(plan.parking);
        assert_eq!(plan.step, 7);
        let parked = &plan.commands[&3];
        assert_eq!(parked.keep, 0..spec.num_layers());
        assert!(parked.fetches.iter().all(|f| matches!(f, Fetch::FromPeer { .. })));
        assert_eq!(plan.commands[&1].keep, 0..0);
        assert!(!plan.commands[&1].sends.is_empty() && !plan.commands[&2].sends.is_empty());
        let outcome = job.settle_reconfiguration(&plan, &ok_all(&plan)).unwrap();
        assert_eq!(outcome.rolled_back_steps, 0);
        assert_eq!(job.layout, None, "parking trains nothing");
        assert_eq!(job.holdings[&3], 0..spec.num_layers());
        assert!(job.stranded_layers(spec.num_layers(), &[3]).is_empty());
    }

    #[test]
    fn nobody_staying_pauses_and_a_lost_stage_restarts_from_the_checkpoint() {
        let spec = spec();
        let mut job = running_1x2();
        let pause = job
            .plan_reconfiguration(&spec, &layer_bytes(), None, &[1, 2], &[], &contacts(&[1, 2]), KuhnMunkres)
            .unwrap();
        assert_eq!(pause, ReconfigureDecision::Pause);
        assert!(job.pause());
        // Both workers die; a checkpoint at step 5 exists; two new workers join.
        job.retain_alive(|id| id > 2);
        job.unannounced_loss = true;
        job.checkpoint = Some(JobCheckpoint {
            step: 5,
            prefix: JobCheckpoint::prefix_for(5),
            stages: vec![0..4, 4..spec.num_layers()],
        });
        job.joined(3);
        job.joined(4);
        let target = Layout::new(&spec, 1, 2).unwrap();
        let plan = execute(
            job.plan_reconfiguration(
                &spec,
                &layer_bytes(),
                Some(target),
                &[3, 4],
                &[3, 4],
                &contacts(&[3, 4]),
                KuhnMunkres,
            )
            .unwrap(),
        );
        assert_eq!(plan.migration.kind, MigrationKind::Restart);
        assert_eq!(plan.step, 5);
        let prefixes: Vec<String> = plan
            .commands
            .values()
            .flat_map(|c| &c.fetches)
            .map(|f| match f {
                Fetch::FromCheckpoint { prefix, .. } => prefix.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(prefixes.contains(&"checkpoints/step-00000005/stage-00".to_string()), "{prefixes:?}");
        assert!(prefixes.contains(&"checkpoints/step-00000005/stage-01".to_string()), "{prefixes:?}");
        let outcome = job.settle_reconfiguration(&plan, &ok_all(&plan)).unwrap();
        assert_eq!(outcome.rolled_back_steps, 2);
        assert_eq!(outcome.rollback_cause, Some(RollbackCause::Unannounced));
        assert_eq!(job.step, 5);
    }

    #[test]
    fn holders_killed_between_compute_and_commit_are_an_unannounced_loss() {
        let mut job = running_1x2();
        // Both die after computing step 7: neither acknowledges the commit.
        job.committed(&[1, 2]);
        assert!(!job.holdings.contains_key(&1) && !job.holdings.contains_key(&2));
        assert!(!job.unannounced_loss);
        job.lost_without_notice(1);
        assert!(job.unannounced_loss, "a holder until the commit it missed");
        // A worker that never held anything costs nothing.
        let mut fresh = JobState::new([9]);
        fresh.lost_without_notice(9);
        assert!(!fresh.unannounced_loss);
    }

    #[test]
    fn a_restart_from_an_emergency_checkpoint_at_the_current_step_loses_nothing() {
        let spec = spec();
        let mut job = running_1x2();
        let writers = job.checkpoint_writers(spec.num_layers(), &[1, 2]).unwrap();
        assert_eq!(writers.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![1, 2]);
        job.checkpoint_completed(JobCheckpoint {
            step: 7,
            prefix: JobCheckpoint::prefix_for(7),
            stages: writers.into_iter().map(|(_, r)| r).collect(),
        });
        job.retain_alive(|_| false);
        job.joined(5);
        let target = Layout::new(&spec, 1, 1).unwrap();
        let plan = execute(
            job.plan_reconfiguration(
                &spec,
                &layer_bytes(),
                Some(target),
                &[5],
                &[5],
                &contacts(&[5]),
                KuhnMunkres,
            )
            .unwrap(),
        );
        let outcome = job.settle_reconfiguration(&plan, &ok_all(&plan)).unwrap();
        assert_eq!((outcome.rolled_back_steps, outcome.rollback_cause), (0, None));
        assert_eq!(job.step, 7);
    }

    #[test]
    fn a_failed_worker_leaves_the_job_without_a_layout_and_keeps_old_holdings() {
        let spec = spec();
        let mut job = running_1x2();
        job.joined(3);
        job.joined(4);
        let target = Layout::new(&spec, 2, 2).unwrap();
        let plan = execute(
            job.plan_reconfiguration(
                &spec,
                &layer_bytes(),
                Some(target),
                &[1, 2, 3, 4],
                &[1, 2, 3, 4],
                &contacts(&[1, 2, 3, 4]),
                KuhnMunkres,
            )
            .unwrap(),
        );
        let mut outcomes = ok_all(&plan);
        outcomes.insert(4, Err("peer timeout".into()));
        let err = job.settle_reconfiguration(&plan, &outcomes).unwrap_err();
        assert!(err.to_string().contains("worker 4: peer timeout"), "{err}");
        assert_eq!(job.layout, None);
        assert_eq!(job.holdings[&4], 0..0, "a failed fetch keeps the old (empty) state");
        assert_eq!(job.step, 7);
    }

    #[test]
    fn a_worker_without_an_address_is_an_error_not_a_panic() {
        let spec = spec();
        let mut job = JobState::new([1, 2]);
        let target = Layout::new(&spec, 1, 2).unwrap();
        let err = job
            .plan_reconfiguration(
                &spec,
                &layer_bytes(),
                Some(target),
                &[1, 2],
                &[1, 2],
                &contacts(&[1]),
                KuhnMunkres,
            )
            .unwrap_err();
        assert_eq!(err, JobError::NoContact(2));
        assert_eq!(job.epoch, 0, "no epoch is spent on a plan that was never sent");
    }

    #[test]
    fn a_step_commits_only_when_every_slot_computed() {
        let mut reports = BTreeMap::new();
        reports.insert(1, StepReport::Computed { loss_sum: None });
        reports.insert(2, StepReport::Computed { loss_sum: Some(3.5) });
        reports.insert(4, StepReport::Computed { loss_sum: Some(1.5) });
        assert_eq!(settle_step(&reports), StepVerdict::Commit { loss_sum: 5.0 });
        reports.insert(3, StepReport::Failed("connection lost".into()));
        assert_eq!(
            settle_step(&reports),
            StepVerdict::Abort { reasons: vec!["worker 3: connection lost".into()] }
        );
        assert!(matches!(settle_step(&BTreeMap::new()), StepVerdict::Abort { .. }));
        let mut job = running_1x2();
        job.committed(&[2]);
        assert_eq!(job.step, 8);
        assert!(job.dirty && !job.holdings.contains_key(&2));
    }

    #[test]
    fn checkpoint_writers_cover_every_layer_once_or_none_exist() {
        let mut job = JobState::new([]);
        job.holdings = BTreeMap::from([(1, 0..4), (2, 4..8), (3, 0..4), (4, 0..0)]);
        let writers = job.checkpoint_writers(8, &[1, 2, 3, 4]).unwrap();
        assert_eq!(writers, vec![(1, 0..4), (2, 4..8)]);
        assert_eq!(job.checkpoint_writers(8, &[3, 4]), None, "layers 4..8 have no eligible holder");
        // An older checkpoint never replaces a newer one.
        let newer = JobCheckpoint { step: 9, prefix: "a".into(), stages: vec![0..4, 4..8] };
        let older = JobCheckpoint { step: 3, prefix: "b".into(), stages: vec![0..4, 4..8] };
        assert_eq!(job.checkpoint_completed(newer.clone()), None);
        assert_eq!(job.checkpoint_completed(older.clone()), Some(older));
        assert_eq!(job.checkpoint, Some(newer));
    }

    #[test]
    fn a_shrunken_fleet_runs_the_best_profiled_layout_that_fits() {
        let spec = spec();
        let entry = |d: u32, p: u32, samples_per_second: f64| parcae_policy_core::ConfigProfile {
            config: ParallelConfig::new(d, p),
            samples_per_second,
            iteration_ms: 100.0,
            comm_rebuild_add_ms: 0.0,
            comm_rebuild_remove_ms: 0.0,
            model_build_ms: 0.0,
        };
        let profile = ModelProfile {
            configs: vec![entry(1, 2, 10.0), entry(2, 2, 30.0)],
            ..ModelProfile::empty("tiny", 16, 2)
        };
        let wish = Some(ParallelConfig::new(2, 2));
        assert_eq!(effective_layout(&spec, &profile, wish, 4).map(|l| l.workers()), Some(4));
        assert_eq!(
            effective_layout(&spec, &profile, wish, 3).map(|l| (l.data_parallel, l.pipeline_stages)),
            Some((1, 2))
        );
        assert_eq!(effective_layout(&spec, &profile, wish, 1), None);
        assert_eq!(effective_layout(&spec, &profile, None, 4), None);
    }
}
