//! The serving engine: turns completion jobs from the HTTP front end into decode
//! iterations on the worker processes, and keeps serving while the fleet changes under it.
//!
//! One task owns the fleet. Its loop: admit workers that connected, act on what the cloud
//! did (allocations, notices, kills), pick up new jobs, reconfigure when the interval's
//! configuration, a kill or a notice calls for it, fill idle replicas with a batch from the
//! queue (static batching, as FasterTransformer and SpotServe do), and run one decode
//! iteration on every busy replica at once.
//!
//! Recovery ([`RecoveryMode`]) decides what a reconfiguration does to requests in flight:
//! - **token** (SpotServe's): on a notice the replicas keep decoding until the notice's
//!   end minus the expected migration time and one iteration, then every request's
//!   generated tokens stay with the host and its KV cache moves, piece by piece
//!   ([`placement`]), to the replica that holds most of it already; it resumes at the next
//!   token. A request whose cache was on a worker that died without notice recomputes it
//!   from its prompt and the tokens it already has.
//! - **restart**: the same configurations, but every interrupted request starts over from
//!   its prompt (tokens already streamed are not sent twice).
//! - **reroute**: the first configuration's tensor and pipeline shape is kept; a replica that
//!   loses a worker is dissolved and its requests start over on the survivors; new workers
//!   form new replicas.

pub mod placement;

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::time::{Duration, Instant};

use parcae_cluster::protocol::{Reply, WorkerCommand};
use parcae_cluster::serving::{
    KvSend, SeqStep, ServeConfiguration, ServePeer, ServeShape, ServeSlot, WeightSource,
};
use parcae_cluster::{ModelSpec, WorkerId};
use parcae_runtime::GuardedServingPolicy;
use parcae_serving_core::{ServeRequest, ServingConfig, ServingProfile, Workload};
use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use super::api::{CompletionJob, EngineStatus, FinishReason, JobEvent};
use crate::workers::cloud::CloudNote;
use crate::workers::fleet::{Arrival, Fleet};
use crate::workers::timeline::TimeScale;
use placement::{Move, Placement};

/// What a reconfiguration does to the requests in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum RecoveryMode {
    /// SpotServe's: KV caches move, requests resume at their next token.
    Token,
    /// Interrupted requests start over from their prompt.
    Restart,
    /// No reparallelization: the first shape is kept, survivors take the load.
    Reroute,
}

/// A configuration given instead of asked of the policy (tests, drills).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, Serialize)]
pub struct ScriptedConfig {
    /// Replicas.
    pub dp: usize,
    /// Tensor-parallel ranks per stage.
    pub tp: usize,
    /// Pipeline stages.
    pub pp: usize,
    /// Requests per replica batch.
    pub batch: usize,
}

/// Who chooses each interval's configuration.
pub enum Chooser {
    /// A serving policy (a sandboxed component, SpotServe by default) given the fleet, the
    /// observed arrival rate and the model's serving profile.
    Policy {
        /// The guarded policy.
        policy: Box<GuardedServingPolicy>,
        /// The model's serving profile (the policy's cost model).
        profile: ServingProfile,
        /// The requests' shape the policy plans for.
        workload: Workload,
        /// Latency objective, ms.
        slo_ms: f64,
        /// The arrival rate to plan the first interval for (requests per second), before any
        /// was observed (`serve --load-rate`); unknown: planned for almost none.
        expected_rate: Option<f64>,
    },
    /// One configuration (or a pause) per interval.
    Script(Vec<Option<ScriptedConfig>>),
}

/// How the engine runs.
pub struct EngineSettings {
    /// The model.
    pub spec: ModelSpec,
    /// Where workers get the weights.
    pub weights: WeightSource,
    /// What reconfigurations do to requests in flight.
    pub recovery: RecoveryMode,
    /// Trace time onto wall time.
    pub scale: TimeScale,
    /// Intervals to serve (the replay's length).
    pub intervals: usize,
    /// The preemption notice, wall time.
    pub grace: Duration,
    /// How long a worker may take to answer one command.
    pub command_timeout: Duration,
    /// How long requests still in flight at the end may take to finish.
    pub drain: Duration,
    /// Who picks the configurations.
    pub chooser: Chooser,
}

/// What the engine did, for the summary and the JSON report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EngineStats {
    /// Jobs taken from the front end.
    pub accepted: u64,
    /// Jobs that got all their tokens.
    pub completed: u64,
    /// Jobs answered with an error (counted, never silently dropped).
    pub failed: u64,
    /// Jobs whose client went away before they finished (their computation stopped).
    pub cancelled: u64,
    /// Decode iterations run (over all replicas).
    pub iterations: u64,
    /// Iterations that failed (a worker lost or cancelled).
    pub failed_iterations: u64,
    /// Reconfigurations, by what caused them.
    pub reconfigurations: BTreeMap<String, u64>,
    /// Requests whose KV cache moved to another replica or shard and resumed at their token.
    pub migrated_requests: u64,
    /// KV bytes sent between workers.
    pub kv_bytes_moved: u64,
    /// Requests interrupted and put back in the queue.
    pub requeued_requests: u64,
    /// Requests that recomputed their cache from the prompt and the tokens they had.
    pub recomputed_requests: u64,
    /// Tokens generated again after a restart (restart and reroute modes).
    pub regenerated_tokens: u64,
    /// Tokens sent to clients.
    pub tokens: u64,
    /// Wall time spent reconfiguring, ms.
    pub reconfigure_ms: f64,
    /// Every configuration taken, in order.
    pub configurations: Vec<ConfigurationRecord>,
    /// Completed requests' latencies measured at the engine: (time to first token,
    /// end to end) in seconds.
    pub latencies: Vec<(f64, f64)>,
    /// End-to-end latencies (seconds) of the completed requests a reconfiguration caught in
    /// flight (migrated, recomputed or restarted at least once): where recovery modes differ.
    pub disrupted_latencies: Vec<f64>,
    /// Wall time of the iterations, by what ran in them: what `profile-serving` fits the
    /// deployment's serving profile to.
    pub iteration_times: IterationTimes,
}

/// What one group of iterations ran: the shape, the batch cap, how many replicas were busy
/// at once, and whether a prompt was processed (prefill) in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
pub struct IterationKey {
    /// Tensor-parallel ranks per stage.
    pub tp: usize,
    /// Pipeline stages.
    pub pp: usize,
    /// The configuration's batch cap.
    pub batch: usize,
    /// Sequences in the fullest replica's batch this iteration.
    pub largest: usize,
    /// Replicas that iterated together (their workers compete for the machine's cores).
    pub busy: usize,
    /// Some replica processed a prompt (its first iteration of a batch).
    pub prefill: bool,
    /// Requests waited in the queue as it started: the engine was saturated, its processes
    /// never idle. Without, they sleep between requests and wake for each (what
    /// `profile-serving` measures as the light-load extra).
    pub queued: bool,
}

/// Iteration wall times (the engine's loop and the host's round trip included: from the top
/// of the loop pass to having every replica's tokens) grouped by [`IterationKey`].
#[derive(Debug, Clone, Default)]
pub struct IterationTimes {
    samples: BTreeMap<IterationKey, (Vec<f64>, Vec<f64>)>,
}

/// One group's summary.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct IterationGroup {
    /// What ran.
    #[serde(flatten)]
    pub key: IterationKey,
    /// Iterations in the group.
    pub count: usize,
    /// Median wall time, ms.
    pub median_ms: f64,
    /// Mean wall time, ms.
    pub mean_ms: f64,
    /// Median of the slowest worker's own compute time in each iteration, ms.
    pub worker_median_ms: f64,
}

impl IterationTimes {
    /// Records one iteration: `wall_ms` at the host, `worker_ms` the slowest worker's own time.
    pub fn record(&mut self, key: IterationKey, wall_ms: f64, worker_ms: f64) {
        let (wall, worker) = self.samples.entry(key).or_default();
        wall.push(wall_ms);
        worker.push(worker_ms);
    }

    /// Every group, in key order.
    pub fn groups(&self) -> Vec<IterationGroup> {
        self.samples
            .iter()
            .map(|(key, (wall, worker))| IterationGroup {
                key: *key,
                count: wall.len(),
                median_ms: crate::stats::median(wall),
                mean_ms: wall.iter().sum::<f64>() / wall.len().max(1) as f64,
                worker_median_ms: crate::stats::median(worker),
            })
            .collect()
    }
}

impl Serialize for IterationTimes {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.groups().serialize(serializer)
    }
}

/// One configuration the engine moved to.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ConfigurationRecord {
    /// Seconds since the replay started.
    pub at_s: f64,
    /// `dp{}xtp{}xpp{}`, or `paused`.
    pub shape: String,
    /// Requests per replica batch.
    pub batch: usize,
    /// Workers it uses.
    pub workers: usize,
    /// What caused it: `interval`, `notice`, `loss`.
    pub cause: String,
    /// Requests in flight that resumed at their next token with their KV cache moved.
    pub migrated: u64,
    /// Requests in flight that kept their cache in place (their replica did not change).
    pub kept: u64,
    /// Requests in flight that lost their cache (recomputed or started over); a loss also
    /// counts those whose iteration failed when the worker died under them.
    pub interrupted: u64,
    /// KV bytes sent between workers.
    pub kv_bytes: u64,
    /// Wall time of the reconfiguration, ms.
    pub millis: f64,
}

/// A request the engine holds.
struct Request {
    job: CompletionJob,
    /// Tokens generated on the current attempt.
    generated: Vec<i64>,
    /// Tokens already sent to the client (a restart regenerates without resending).
    sent: usize,
    /// Positions in its replica's cache (0: none there).
    cached: usize,
    /// Its cache on the workers is stale: drop it before the next iteration.
    stale: bool,
    first_token: Option<Instant>,
    /// A reconfiguration caught it in flight (its cache moved or was lost).
    disrupted: bool,
}

impl Request {
    fn context(&self) -> Vec<i64> {
        self.job.prompt.iter().chain(&self.generated).copied().collect()
    }

    /// Puts the request back to be computed again: `keep_tokens` (token-level recovery
    /// without a cache) recomputes the cache from the prompt and the tokens it has;
    /// otherwise it starts over.
    fn interrupt(&mut self, keep_tokens: bool, stats: &mut EngineStats) {
        self.disrupted |= self.cached > 0 || !self.generated.is_empty();
        if keep_tokens {
            stats.recomputed_requests += 1;
        } else {
            stats.regenerated_tokens += self.generated.len() as u64;
            self.generated.clear();
        }
        self.stale = self.cached > 0 || self.stale;
        self.cached = 0;
    }
}

/// A replica's current batch.
#[derive(Default)]
struct Replica {
    batch: Vec<Request>,
    /// Requests whose caches to drop at the next iteration.
    release: Vec<u64>,
}

/// The engine's state.
pub struct Engine<'a> {
    settings: EngineSettings,
    fleet: &'a mut Fleet,
    status: watch::Sender<EngineStatus>,
    queue: VecDeque<Request>,
    replicas: BTreeMap<usize, Replica>,
    placement: Option<Placement>,
    batch: usize,
    /// The shape reroute keeps.
    fixed: Option<(usize, usize, usize)>,
    epoch: u64,
    iteration: u64,
    /// When each worker under notice is killed.
    deadlines: BTreeMap<WorkerId, Instant>,
    /// Expected duration of a migration (the last one's, with a margin).
    migration_estimate: Duration,
    /// Wall times of the last iterations: a notice's migration must start one iteration
    /// (the slowest seen lately) before it is due, or the kill lands mid-iteration and the
    /// caches it was to move are lost.
    recent_iterations: VecDeque<Duration>,
    /// Requests in flight whose iteration failed since the last configuration record: a
    /// worker that died mid-iteration shows there first, so the loss that follows counts them.
    failed_in_flight: u64,
    /// Workers available at the last decision (a paused engine retries when it changes).
    last_available: usize,
    /// Arrivals per interval (the rate the policy sees).
    arrivals_per_interval: Vec<u64>,
    start: Instant,
    stats: EngineStats,
}

/// The least time kept for a migration at the end of a notice.
const MIN_MIGRATION: Duration = Duration::from_millis(150);

/// Iterations whose slowest sets the margin kept before a notice's migration.
const RECENT_ITERATIONS: usize = 16;

impl<'a> Engine<'a> {
    /// An engine over `fleet`, reporting its state on `status`.
    pub fn new(settings: EngineSettings, fleet: &'a mut Fleet, status: watch::Sender<EngineStatus>) -> Self {
        Engine {
            settings,
            fleet,
            status,
            queue: VecDeque::new(),
            replicas: BTreeMap::new(),
            placement: None,
            batch: 1,
            fixed: None,
            epoch: 0,
            iteration: 0,
            deadlines: BTreeMap::new(),
            migration_estimate: MIN_MIGRATION * 2,
            recent_iterations: VecDeque::new(),
            failed_in_flight: 0,
            last_available: 0,
            arrivals_per_interval: Vec::new(),
            start: Instant::now(),
            stats: EngineStats::default(),
        }
    }

    fn elapsed_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn interval_now(&self) -> usize {
        (self.start.elapsed().as_secs_f64() / self.settings.scale.wall_interval.as_secs_f64()) as usize
    }

    /// Serves until the replay ends (then drains what is in flight) and returns the stats.
    pub async fn run(
        mut self,
        start: Instant,
        jobs: &mut mpsc::Receiver<CompletionJob>,
        notes: &mut mpsc::UnboundedReceiver<CloudNote>,
        arrivals: &mut mpsc::Receiver<Arrival>,
    ) -> EngineStats {
        self.start = start;
        let end = self.settings.scale.wall_interval * self.settings.intervals as u32;
        let mut decided_interval: Option<usize> = None;
        loop {
            let now = Instant::now();
            if now >= start + end {
                break;
            }
            // A pass that only iterates times the whole loop, its own overhead included;
            // one that also handled the fleet times the iteration alone.
            let mut quiet = true;
            // 1. Workers and the cloud.
            while let Ok(arrival) = arrivals.try_recv() {
                quiet = false;
                self.fleet.admit(arrival, &self.settings.spec, self.settings.command_timeout).await;
            }
            let mut lost = false;
            while let Ok(note) = notes.try_recv() {
                quiet = false;
                lost |= self.on_cloud(note).await;
            }
            for id in self.fleet.reap_dead() {
                warn!(worker = id, "worker gone");
                lost = true;
            }
            // 2. Jobs.
            while let Ok(job) = jobs.try_recv() {
                self.accept(job);
            }
            // 3. The configuration: each interval's choice, and whatever a loss or notice
            //    forces (or a fleet that grew while paused).
            let k = self.interval_now();
            let available = self.fleet.available().len();
            // Migrate when the next iteration could no longer finish before the migration
            // must start (the margin is only worked out while a notice is pending).
            let doomed = !self.deadlines.is_empty() && {
                let slowest = self.recent_iterations.iter().max().copied().unwrap_or_default();
                let margin = self.migration_estimate + slowest;
                self.placement.as_ref().is_some_and(|p| {
                    p.slots.keys().any(|w| self.deadlines.get(w).is_some_and(|d| now + margin >= *d))
                })
            };
            let broken = lost
                && self.placement.as_ref().is_some_and(|p| p.slots.keys().any(|w| !self.fleet.is_alive(*w)));
            let regrown = self.placement.is_none() && available != self.last_available;
            if decided_interval != Some(k) || doomed || broken || regrown {
                quiet = false;
                decided_interval = Some(k);
                self.last_available = available;
                let cause = if doomed {
                    "notice"
                } else if broken {
                    "loss"
                } else {
                    "interval"
                };
                match self.choose(k) {
                    Some((shape, batch)) => {
                        let same =
                            self.placement.as_ref().is_some_and(|p| p.shape == shape && self.batch == batch);
                        if !same || doomed || broken {
                            self.reconfigure(shape, batch, cause).await;
                        }
                    }
                    None if self.placement.is_some() => self.pause(cause).await,
                    None => {}
                }
            }
            self.publish_status();
            // 4. Fill idle replicas, then one iteration everywhere.
            self.fill_replicas();
            if self.replicas.values().any(|r| !r.batch.is_empty()) {
                self.iterate(if quiet { now } else { Instant::now() }).await;
                continue;
            }
            // 5. Nothing to compute: wait for something to happen.
            let next_interval = start + self.settings.scale.wall_interval * (k as u32 + 1);
            tokio::select! {
                job = jobs.recv() => if let Some(job) = job { self.accept(job) },
                note = notes.recv() => if let Some(note) = note { self.on_cloud(note).await; },
                arrival = arrivals.recv() => if let Some(arrival) = arrival {
                    self.fleet.admit(arrival, &self.settings.spec, self.settings.command_timeout).await;
                },
                _ = tokio::time::sleep_until(next_interval.min(start + end).into()) => {}
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        self.finish(jobs).await
    }

    /// The end of the replay: no new jobs, what is in flight gets `drain` to finish.
    async fn finish(mut self, jobs: &mut mpsc::Receiver<CompletionJob>) -> EngineStats {
        let _ = self.status.send(EngineStatus::Stopping);
        jobs.close();
        while let Ok(job) = jobs.try_recv() {
            self.accept(job);
        }
        let deadline = Instant::now() + self.settings.drain;
        while Instant::now() < deadline && self.placement.is_some() {
            let pass = Instant::now();
            self.fill_replicas();
            if self.replicas.values().all(|r| r.batch.is_empty()) {
                break;
            }
            self.iterate(pass).await;
        }
        let mut left: Vec<Request> = self.queue.drain(..).collect();
        for replica in self.replicas.values_mut() {
            left.append(&mut replica.batch);
        }
        for request in left {
            self.stats.failed += 1;
            let _ = request.job.events.send(JobEvent::Failed {
                message: "the server stopped before this request finished (the replay ended)".into(),
                retry_after_s: None,
            });
        }
        self.stats
    }

    fn accept(&mut self, job: CompletionJob) {
        self.stats.accepted += 1;
        let k = self.interval_now();
        if self.arrivals_per_interval.len() <= k {
            self.arrivals_per_interval.resize(k + 1, 0);
        }
        self.arrivals_per_interval[k] += 1;
        self.queue.push_back(Request {
            job,
            generated: Vec::new(),
            sent: 0,
            cached: 0,
            stale: false,
            first_token: None,
            disrupted: false,
        });
    }

    fn publish_status(&self) {
        let status = match &self.placement {
            Some(_) => EngineStatus::Ready,
            None => {
                EngineStatus::Paused { retry_after_s: self.settings.scale.wall_interval.as_secs().max(1) }
            }
        };
        self.status.send_if_modified(|s| {
            if *s != status {
                *s = status;
                true
            } else {
                false
            }
        });
    }

    /// Acts on what the cloud did; true when a worker was lost.
    async fn on_cloud(&mut self, note: CloudNote) -> bool {
        match note {
            CloudNote::Allocate { node } => {
                if let Err(e) = self.fleet.allocate(&node).await {
                    warn!(%node, %e, "could not start a worker");
                }
            }
            CloudNote::Notice { node } => {
                if let Some(id) = self.fleet.live_worker_for(&node) {
                    let grace = self.settings.grace;
                    info!(worker = id, %node, ?grace, "preemption notice");
                    self.deadlines.insert(id, Instant::now() + grace);
                    self.fleet.notice(id, grace, self.settings.command_timeout).await;
                }
            }
            CloudNote::Killed { node, announced } => {
                if let Some(id) = self.fleet.worker_started_for(&node) {
                    info!(worker = id, %node, announced, "worker killed");
                    self.fleet.killed(id).await;
                    self.deadlines.remove(&id);
                    return true;
                }
            }
        }
        false
    }

    /// The configuration for interval `k`: the script's, or the policy's for the workers
    /// available now and the arrival rate seen over the last intervals.
    fn choose(&mut self, k: usize) -> Option<(ServeShape, usize)> {
        let available = self.fleet.available().len();
        let spec = self.settings.spec.clone();
        let chosen = match &mut self.settings.chooser {
            Chooser::Script(script) => {
                let c = (*script.get(k).or(script.last())?)?;
                Some((ServeShape { dp: c.dp, tp: c.tp, pp: c.pp }, c.batch))
            }
            Chooser::Policy { policy, profile, workload, slo_ms, expected_rate } => {
                if available == 0 {
                    return None;
                }
                // The rate over the last five complete intervals (the one just begun has
                // hardly any arrivals yet), as `bench-serve`'s simulator observes it.
                let interval_s = self.settings.scale.wall_interval.as_secs_f64();
                let rate = if k == 0 {
                    expected_rate.unwrap_or(0.0)
                } else {
                    let first = k.saturating_sub(5);
                    let arrived: u64 = (first..k).filter_map(|i| self.arrivals_per_interval.get(i)).sum();
                    arrived as f64 / ((k - first) as f64 * interval_s)
                };
                let current = self.placement.as_ref().map(|p| ServingConfig {
                    data_parallel: p.shape.dp as u32,
                    tensor_parallel: p.shape.tp as u32,
                    pipeline_stages: p.shape.pp as u32,
                    batch_size: self.batch as u32,
                    prefill_micro_batches: 1,
                    decode_micro_batches: 1,
                });
                let request = ServeRequest {
                    instances: vec![available as u32],
                    arrival_rates: vec![rate.max(0.01)],
                    latency_slo_ms: *slo_ms,
                    interval_ms: self.settings.scale.wall_interval_ms(),
                    current,
                    workload: *workload,
                    profile: profile.clone(),
                };
                let answer = policy.configure(&request);
                if let Some(fault) = &answer.fault {
                    warn!(%fault, "the serving policy faulted; SpotServe's answer is used");
                }
                let c = answer.value.configs.first().copied().flatten()?;
                Some((
                    ServeShape {
                        dp: c.data_parallel as usize,
                        tp: c.tensor_parallel as usize,
                        pp: c.pipeline_stages as usize,
                    },
                    c.batch_size as usize,
                ))
            }
        };
        let (mut shape, batch) = chosen?;
        if let Err(e) = shape.validate(&spec) {
            warn!(%shape, %e, "the chosen configuration does not fit the model; serving on one stage instead");
            shape = ServeShape { dp: 1, tp: 1, pp: 1 };
        }
        if self.settings.recovery == RecoveryMode::Reroute {
            let (tp, pp, batch) = *self.fixed.get_or_insert((shape.tp, shape.pp, batch));
            return Some((ServeShape { dp: (available / (tp * pp)).max(1), tp, pp }, batch));
        }
        Some((shape, batch.max(1)))
    }

    /// Moves to `shape` with `batch` requests per replica, on the workers available now
    /// (fewer replicas when they do not suffice; paused when not even one fits).
    async fn reconfigure(&mut self, wanted: ServeShape, batch: usize, cause: &str) {
        let started = Instant::now();
        let spec = self.settings.spec.clone();
        let mode = self.settings.recovery;
        let available = self.fleet.available();
        let alive: BTreeSet<WorkerId> = self.fleet.connected().into_iter().collect();
        let per_replica = wanted.tp * wanted.pp;
        let dp = wanted.dp.min(available.len() / per_replica);
        let old = self.placement.take();
        // Cached positions per old replica: what the matching counts as already in place.
        let cached: BTreeMap<usize, u64> = self
            .replicas
            .iter()
            .filter(|(_, r)| !r.batch.is_empty())
            .map(|(i, r)| (*i, r.batch.iter().map(|q| q.cached as u64).sum()))
            .collect();
        let new = if dp == 0 {
            None
        } else {
            self.place(old.as_ref(), &cached, &available, ServeShape { dp, ..wanted })
        };
        // What happens to each replica's batch.
        let mut batches: BTreeMap<usize, Vec<Request>> =
            std::mem::take(&mut self.replicas).into_iter().map(|(i, r)| (i, r.batch)).collect();
        let mut moves: Vec<(Move, u64)> = Vec::new();
        let mapping: BTreeMap<usize, usize> = match (&old, &new, mode) {
            (Some(old), Some(new), RecoveryMode::Token) => {
                placement::map_replicas(&spec, old, new, &cached, &alive)
            }
            (Some(old), Some(new), RecoveryMode::Restart | RecoveryMode::Reroute) => {
                // Only a replica whose workers all keep their (stage, rank), together, keeps its batch.
                cached.keys().filter_map(|r| intact_replica(&spec, old, new, *r).map(|to| (*r, to))).collect()
            }
            _ => BTreeMap::new(),
        };
        let mut kept: BTreeMap<usize, Vec<Request>> = BTreeMap::new();
        let mut interrupted_before = 0u64;
        for (from, requests) in batches.iter_mut() {
            match mapping.get(from) {
                Some(to) => {
                    for q in requests.iter() {
                        if q.cached > 0 {
                            moves.push((Move { request: q.job.id, from: *from, to: *to }, q.cached as u64));
                        }
                    }
                    kept.insert(*to, std::mem::take(requests));
                }
                None => {
                    for mut q in std::mem::take(requests) {
                        q.interrupt(mode == RecoveryMode::Token, &mut self.stats);
                        self.stats.requeued_requests += 1;
                        interrupted_before += 1;
                        self.queue.push_front(q);
                    }
                }
            }
        }
        let (plan, lost) = match (&old, &new) {
            (Some(old), Some(new)) => placement::plan_kv_moves(&spec, old, new, &moves, &alive),
            _ => (placement::KvPlan::default(), moves.iter().map(|(m, _)| m.request).collect()),
        };
        for requests in kept.values_mut() {
            for q in requests.iter_mut().filter(|q| lost.contains(&q.job.id)) {
                q.interrupt(mode == RecoveryMode::Token, &mut self.stats);
            }
        }
        let moving: BTreeSet<u64> = plan.fetches.values().flatten().map(|f| f.piece.request).collect();
        let moved = moves.iter().filter(|(m, _)| moving.contains(&m.request)).count();
        for q in kept.values_mut().flatten().filter(|q| moving.contains(&q.job.id)) {
            q.disrupted = true;
        }
        // The commands: every connected worker learns its place (or that it has none).
        let Some(new) = new else {
            self.drop_all_caches(&alive).await;
            for (_, requests) in kept {
                for mut q in requests {
                    q.interrupt(mode == RecoveryMode::Token, &mut self.stats);
                    self.queue.push_front(q);
                }
            }
            warn!(workers = available.len(), %wanted, "not enough workers for one replica: paused");
            self.note_configuration(None, 0, cause, started);
            return;
        };
        let ok = self.configure_workers(&new, &plan, &alive).await;
        let (new, mut kept) = if ok {
            self.stats.migrated_requests += moved as u64;
            self.stats.kv_bytes_moved += plan.bytes_moved;
            (new, kept)
        } else {
            // A worker failed mid-migration: every request recomputes; configure again
            // without moving caches.
            warn!("reconfiguration failed; retrying without moving KV caches");
            let mut kept = kept;
            for requests in kept.values_mut() {
                for q in requests.iter_mut() {
                    q.interrupt(mode == RecoveryMode::Token, &mut self.stats);
                }
            }
            let alive: BTreeSet<WorkerId> = self.fleet.connected().into_iter().collect();
            let available = self.fleet.available();
            let retry = self.place(Some(&new), &BTreeMap::new(), &available, new.shape);
            match retry {
                Some(retry)
                    if self.configure_workers(&retry, &placement::KvPlan::default(), &alive).await =>
                {
                    (retry, kept)
                }
                _ => {
                    for (_, requests) in kept {
                        for q in requests {
                            self.queue.push_front(q);
                        }
                    }
                    self.note_configuration(None, 0, cause, started);
                    return;
                }
            }
        };
        self.batch = batch;
        let in_flight: u64 = kept.values().map(|b| b.len() as u64).sum();
        let resumed = if ok { moved as u64 } else { 0 };
        let kept_in_place = kept.values().flatten().filter(|q| q.cached > 0).count() as u64;
        let kept_in_place = kept_in_place.saturating_sub(resumed);
        let interrupted = interrupted_before + if ok { lost.len() as u64 } else { in_flight };
        for r in 0..new.shape.dp {
            self.replicas
                .insert(r, Replica { batch: kept.remove(&r).unwrap_or_default(), release: Vec::new() });
        }
        let shape = new.shape;
        self.placement = Some(new);
        self.note(ConfigurationRecord {
            shape: shape.to_string(),
            batch,
            workers: shape.workers(),
            cause: cause.to_string(),
            migrated: resumed,
            kept: kept_in_place,
            interrupted,
            kv_bytes: if ok { plan.bytes_moved } else { 0 },
            millis: started.elapsed().as_secs_f64() * 1000.0,
            ..ConfigurationRecord::default()
        });
        self.migration_estimate = (started.elapsed() * 3 / 2).max(MIN_MIGRATION);
    }

    /// Where `shape`'s slots go: reroute keeps intact replicas where they are; the other
    /// modes match by Kuhn-Munkres (None: too few workers).
    fn place(
        &self,
        old: Option<&Placement>,
        cached: &BTreeMap<usize, u64>,
        available: &[WorkerId],
        shape: ServeShape,
    ) -> Option<Placement> {
        match self.settings.recovery {
            RecoveryMode::Reroute => Some(reroute_placement(old, available, shape)),
            _ => placement::assign(&self.settings.spec, old, cached, available, shape),
        }
    }

    fn note_configuration(&mut self, shape: Option<ServeShape>, batch: usize, cause: &str, started: Instant) {
        self.note(ConfigurationRecord {
            shape: shape.map_or("paused".to_string(), |s| s.to_string()),
            batch,
            workers: shape.map_or(0, |s| s.workers()),
            cause: cause.to_string(),
            millis: started.elapsed().as_secs_f64() * 1000.0,
            ..ConfigurationRecord::default()
        });
    }

    fn note(&mut self, mut record: ConfigurationRecord) {
        record.at_s = self.elapsed_s();
        if record.cause == "loss" {
            record.interrupted += self.failed_in_flight;
        }
        self.failed_in_flight = 0;
        self.stats.reconfigure_ms += record.millis;
        *self.stats.reconfigurations.entry(record.cause.clone()).or_default() += 1;
        info!(
            shape = %record.shape,
            batch = record.batch,
            cause = %record.cause,
            migrated = record.migrated,
            kept = record.kept,
            interrupted = record.interrupted,
            millis = record.millis,
            "serving configuration"
        );
        self.stats.configurations.push(record);
    }

    /// Tells every connected worker its place in `new` and the pieces it sends and
    /// gathers; false when any of them failed.
    async fn configure_workers(
        &mut self,
        new: &Placement,
        plan: &placement::KvPlan,
        alive: &BTreeSet<WorkerId>,
    ) -> bool {
        self.epoch += 1;
        let epoch = self.epoch;
        let peers: Vec<ServePeer> = new
            .slots
            .iter()
            .filter_map(|(w, slot)| {
                Some(ServePeer {
                    worker: *w,
                    name: self.fleet.peer_name(*w)?,
                    slot: *slot,
                    addr: self.fleet.peer_addr(*w)?,
                })
            })
            .collect();
        let mut commands = BTreeMap::new();
        for w in alive {
            let kv_sends = plan
                .sends
                .get(w)
                .into_iter()
                .flatten()
                .filter_map(|(piece, to, index)| {
                    Some(KvSend {
                        piece: piece.clone(),
                        index: *index,
                        to: *to,
                        name: self.fleet.peer_name(*to)?,
                        addr: self.fleet.peer_addr(*to)?,
                    })
                })
                .collect();
            commands.insert(
                *w,
                WorkerCommand::ServeConfigure(ServeConfiguration {
                    epoch,
                    shape: new.shape,
                    slot: new.slots.get(w).copied(),
                    weights: self.settings.weights.clone(),
                    peers: peers.clone(),
                    kv_sends,
                    kv_fetches: plan.fetches.get(w).cloned().unwrap_or_default(),
                    keep: plan.keep.get(w).cloned().unwrap_or_default(),
                }),
            );
        }
        self.fleet.shared.set_epoch(epoch, alive.iter().copied());
        let replies = self.fleet.call_many(commands, self.settings.command_timeout).await;
        self.fleet.shared.set_epoch(0, []);
        let mut ok = true;
        for (w, reply) in replies {
            match reply {
                Ok(Reply::ServeConfigured { .. }) => {}
                Ok(Reply::Failed { reason }) => {
                    warn!(worker = w, %reason, "serving reconfiguration failed");
                    ok &= !new.slots.contains_key(&w) && !plan.sends.contains_key(&w);
                }
                Ok(other) => {
                    warn!(worker = w, ?other, "unexpected answer to a serving reconfiguration");
                    ok = false;
                }
                Err(e) => {
                    warn!(worker = w, %e, "no answer to a serving reconfiguration");
                    ok &= !new.slots.contains_key(&w) && !plan.sends.contains_key(&w);
                }
            }
        }
        ok
    }

    /// Stops serving (the policy chose no configuration): requests in flight go back to the
    /// queue with the tokens they have.
    async fn pause(&mut self, cause: &str) {
        let started = Instant::now();
        let alive: BTreeSet<WorkerId> = self.fleet.connected().into_iter().collect();
        self.placement = None;
        let mode = self.settings.recovery;
        for (_, replica) in std::mem::take(&mut self.replicas) {
            for mut q in replica.batch {
                q.interrupt(mode == RecoveryMode::Token, &mut self.stats);
                self.stats.requeued_requests += 1;
                self.queue.push_front(q);
            }
        }
        self.drop_all_caches(&alive).await;
        self.note_configuration(None, 0, cause, started);
    }

    /// Every worker drops its shard and caches (serving pauses).
    async fn drop_all_caches(&mut self, alive: &BTreeSet<WorkerId>) {
        self.epoch += 1;
        let commands = alive
            .iter()
            .map(|w| {
                (
                    *w,
                    WorkerCommand::ServeConfigure(ServeConfiguration {
                        epoch: self.epoch,
                        shape: ServeShape { dp: 1, tp: 1, pp: 1 },
                        slot: None,
                        weights: self.settings.weights.clone(),
                        peers: Vec::new(),
                        kv_sends: Vec::new(),
                        kv_fetches: Vec::new(),
                        keep: Vec::new(),
                    }),
                )
            })
            .collect();
        let _ = self.fleet.call_many(commands, self.settings.command_timeout).await;
    }

    /// Idle replicas take their next batch from the queue.
    fn fill_replicas(&mut self) {
        // A client that went away no longer waits for its tokens: stop computing them.
        let before = self.queue.len();
        self.queue.retain(|q| !q.job.events.is_closed());
        self.stats.cancelled += (before - self.queue.len()) as u64;
        for replica in self.replicas.values_mut() {
            let before = replica.batch.len();
            let (gone, staying): (Vec<Request>, Vec<Request>) =
                std::mem::take(&mut replica.batch).into_iter().partition(|q| q.job.events.is_closed());
            replica.batch = staying;
            replica.release.extend(gone.iter().filter(|q| q.cached > 0 || q.stale).map(|q| q.job.id));
            self.stats.cancelled += (before - replica.batch.len()) as u64;
        }
        for replica in self.replicas.values_mut() {
            if !replica.batch.is_empty() {
                continue;
            }
            while replica.batch.len() < self.batch {
                let Some(q) = self.queue.pop_front() else { break };
                replica.batch.push(q);
            }
        }
    }

    /// One decode iteration on every busy replica, concurrently; its time is recorded from
    /// `started`.
    async fn iterate(&mut self, started: Instant) {
        let Some(placement) = self.placement.clone() else { return };
        let queued = !self.queue.is_empty();
        let mut largest = 0;
        let mut prefill = false;
        let mut commands = BTreeMap::new();
        let mut in_flight: Vec<(usize, u64, HashSet<WorkerId>)> = Vec::new();
        for (r, replica) in self.replicas.iter_mut() {
            if replica.batch.is_empty() {
                continue;
            }
            self.iteration += 1;
            let mut release = std::mem::take(&mut replica.release);
            let seqs: Vec<SeqStep> = replica
                .batch
                .iter_mut()
                .map(|q| {
                    if q.stale {
                        release.push(q.job.id);
                        q.stale = false;
                    }
                    prefill |= q.cached == 0;
                    let tokens =
                        if q.cached == 0 { q.context() } else { vec![*q.generated.last().expect("cached")] };
                    SeqStep { request: q.job.id, tokens, start: q.cached, sampling: q.job.sampling }
                })
                .collect();
            largest = largest.max(seqs.len());
            let workers: HashSet<WorkerId> = placement.replica_workers(*r).into_iter().collect();
            for w in &workers {
                commands.insert(
                    *w,
                    WorkerCommand::ServeStep {
                        iteration: self.iteration,
                        seqs: seqs.clone(),
                        release: release.clone(),
                    },
                );
            }
            in_flight.push((*r, self.iteration, workers));
        }
        self.fleet.shared.set_iterations(in_flight.iter().map(|(_, i, w)| (*i, w.clone())).collect());
        let replies = self.fleet.call_many(commands, self.settings.command_timeout).await;
        self.fleet.shared.set_iterations(Vec::new());
        let worker_ms = replies
            .values()
            .filter_map(|reply| match reply {
                Ok(Reply::ServeStepped { millis, .. }) => Some(*millis),
                _ => None,
            })
            .fold(0.0, f64::max);
        let key = IterationKey {
            tp: placement.shape.tp,
            pp: placement.shape.pp,
            batch: self.batch,
            largest,
            busy: in_flight.len(),
            prefill,
            queued,
        };
        let mode = self.settings.recovery;
        let mut any_failed = false;
        for (r, _, workers) in in_flight {
            self.stats.iterations += 1;
            let last = placement.worker_at(ServeSlot { replica: r, stage: placement.shape.pp - 1, rank: 0 });
            let mut tokens: Option<Vec<(u64, i64)>> = None;
            let mut failed = false;
            for w in &workers {
                match replies.get(w) {
                    Some(Ok(Reply::ServeStepped { tokens: t, .. })) => {
                        if Some(*w) == last {
                            tokens = Some(t.clone());
                        }
                    }
                    Some(Ok(Reply::Failed { reason })) => {
                        warn!(worker = w, replica = r, %reason, "serving iteration failed");
                        failed = true;
                    }
                    other => {
                        warn!(worker = w, replica = r, ?other, "no answer to a serving iteration");
                        failed = true;
                    }
                }
            }
            let replica = self.replicas.get_mut(&r).expect("busy replica");
            let tokens = match (failed, tokens) {
                (false, Some(tokens)) => tokens,
                _ => {
                    // The replica's caches may be half-updated: every request recomputes.
                    self.stats.failed_iterations += 1;
                    self.failed_in_flight += replica.batch.len() as u64;
                    any_failed = true;
                    for q in replica.batch.iter_mut() {
                        q.interrupt(mode == RecoveryMode::Token, &mut self.stats);
                    }
                    continue;
                }
            };
            let tokens: BTreeMap<u64, i64> = tokens.into_iter().collect();
            let mut finished = Vec::new();
            for (i, q) in replica.batch.iter_mut().enumerate() {
                let Some(&token) = tokens.get(&q.job.id) else {
                    warn!(
                        request = q.job.id,
                        replica = r,
                        "no token for a request in the batch; it recomputes"
                    );
                    q.interrupt(mode == RecoveryMode::Token, &mut self.stats);
                    continue;
                };
                q.cached += if q.cached == 0 { q.job.prompt.len() + q.generated.len() } else { 1 };
                q.generated.push(token);
                if q.generated.len() > q.sent {
                    q.sent = q.generated.len();
                    q.first_token.get_or_insert_with(Instant::now);
                    self.stats.tokens += 1;
                    let _ = q.job.events.send(JobEvent::Token(token));
                }
                let context_full = q.job.prompt.len() + q.generated.len() >= self.settings.spec.seq_len;
                if q.generated.len() >= q.job.max_tokens || context_full {
                    finished.push((
                        i,
                        if context_full && q.generated.len() < q.job.max_tokens {
                            FinishReason::Context
                        } else {
                            FinishReason::Length
                        },
                    ));
                }
            }
            for (i, reason) in finished.into_iter().rev() {
                let q = replica.batch.remove(i);
                replica.release.push(q.job.id);
                let now = Instant::now();
                let ttft = q.first_token.unwrap_or(now).duration_since(q.job.accepted).as_secs_f64();
                let e2e = now.duration_since(q.job.accepted).as_secs_f64();
                self.stats.latencies.push((ttft, e2e));
                if q.disrupted {
                    self.stats.disrupted_latencies.push(e2e);
                }
                self.stats.completed += 1;
                let _ = q.job.events.send(JobEvent::Done { reason });
            }
        }
        // A failed iteration times the failure, not the model: it is no profile data.
        if !any_failed {
            let took = started.elapsed();
            self.stats.iteration_times.record(key, took.as_secs_f64() * 1000.0, worker_ms);
            if self.recent_iterations.len() == RECENT_ITERATIONS {
                self.recent_iterations.pop_front();
            }
            self.recent_iterations.push_back(took);
        }
    }
}

/// The new replica that replica `r` of `old` became unchanged (the same workers, each with
/// the same layers and heads, and nobody else), if any.
fn intact_replica(spec: &ModelSpec, old: &Placement, new: &Placement, r: usize) -> Option<usize> {
    let workers = old.replica_workers(r);
    let to = new.replica_of(*workers.first()?)?;
    let same = workers.iter().all(|w| {
        new.slots.get(w).is_some_and(|s| {
            s.replica == to
                && placement::rect(spec, new.shape, *s) == placement::rect(spec, old.shape, old.slots[w])
        })
    });
    (same && new.replica_workers(to).len() == workers.len()).then_some(to)
}

/// Reroute's placement: replicas whose workers are all still available keep their slots;
/// the remaining workers form new replicas of the same shape.
fn reroute_placement(old: Option<&Placement>, available: &[WorkerId], shape: ServeShape) -> Placement {
    let mut slots = BTreeMap::new();
    let mut used: BTreeSet<WorkerId> = BTreeSet::new();
    let mut replica = 0;
    if let Some(old) = old.filter(|o| o.shape.tp == shape.tp && o.shape.pp == shape.pp) {
        for r in 0..old.shape.dp {
            let workers = old.replica_workers(r);
            if replica < shape.dp && !workers.is_empty() && workers.iter().all(|w| available.contains(w)) {
                for w in workers {
                    let s = old.slots[&w];
                    slots.insert(w, ServeSlot { replica, ..s });
                    used.insert(w);
                }
                replica += 1;
            }
        }
    }
    let mut free = available.iter().filter(|w| !used.contains(w));
    while replica < shape.dp {
        for stage in 0..shape.pp {
            for rank in 0..shape.tp {
                let Some(w) = free.next() else {
                    return Placement { shape: ServeShape { dp: replica, ..shape }, slots };
                };
                slots.insert(*w, ServeSlot { replica, stage, rank });
            }
        }
        replica += 1;
    }
    Placement { shape, slots }
}
