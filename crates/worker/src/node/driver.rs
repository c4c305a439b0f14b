//! The compute side of a worker: owns the [`StageTrainer`] on its own thread
//! and carries out the host's commands one at a time. Checkpoints go straight
//! to the checkpoint store (a directory, S3, ...); periodic ones are written by
//! background threads from an in-memory snapshot, so training goes on while
//! they are written.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parcae_cluster::protocol::{BackgroundWrite, Fetch, PeerAddress, Reconfiguration, Reply, WorkerCommand};
use parcae_cluster::{Layout, ModelSpec, Slot};
use parcae_store::Store;
use parcae_worker::tch::Device;
use parcae_worker::{LayerState, StageTrainer, WorkerError, load_checkpoint_from, save_checkpoint_to};
use tokio::runtime::Handle;
use tracing::{info, warn};

use super::links::{Neighbour, QuicAllReduce, QuicPipeLink};
use super::mailbox::Key;
use super::peers::PeerNet;
use super::serve::{ServeContext, Serving};

/// Where this worker sits in the current configuration.
struct Placement {
    layout: Layout,
    slot: Slot,
    peers: Vec<PeerAddress>,
}

/// A checkpoint being written from a snapshot.
struct PendingWrite {
    step: u64,
    prefix: String,
    /// Bytes written and the write's wall time in ms.
    thread: std::thread::JoinHandle<Result<(u64, f64), WorkerError>>,
}

impl PendingWrite {
    /// Waits for the write (at once when it is finished) and reports how it went.
    fn join(self) -> BackgroundWrite {
        let (result, millis) = match self.thread.join() {
            Ok(Ok((bytes, millis))) => (Ok(bytes), millis),
            Ok(Err(e)) => (Err(e.to_string()), 0.0),
            Err(_) => (Err("the checkpoint writer panicked".to_string()), 0.0),
        };
        BackgroundWrite { step: self.step, prefix: self.prefix, result, millis }
    }
}

/// Carries out commands against the trainer.
pub struct Driver {
    spec: ModelSpec,
    trainer: StageTrainer,
    placement: Option<Placement>,
    net: Arc<PeerNet>,
    rt: Handle,
    peer_timeout: Duration,
    /// Where checkpoints are written and read.
    store: Store,
    /// The attempt whose gradients are pending, if any.
    pending_attempt: Option<u64>,
    /// Background checkpoint writes not yet reported to the host.
    writes: Vec<PendingWrite>,
    /// The serving shard and caches, when the host serves.
    serving: Serving,
    /// This worker's id (given at welcome).
    worker: parcae_cluster::WorkerId,
}

impl Driver {
    pub fn new(
        spec: ModelSpec,
        device: Device,
        net: Arc<PeerNet>,
        rt: Handle,
        peer_timeout: Duration,
        store: Store,
        slowdown: f64,
    ) -> Result<Self, WorkerError> {
        let mut trainer = StageTrainer::new(spec.clone(), device)?;
        trainer.set_emulated_slowdown(slowdown);
        Ok(Driver {
            spec,
            trainer,
            placement: None,
            net,
            rt,
            peer_timeout,
            store,
            pending_attempt: None,
            writes: Vec::new(),
            serving: Serving::default(),
            worker: 0,
        })
    }

    /// The id the host welcomed this worker with (serving copies KV pieces a worker needs
    /// from itself instead of sending them).
    pub fn with_worker_id(mut self, worker: parcae_cluster::WorkerId) -> Self {
        self.worker = worker;
        self
    }

    /// Runs one command; failures become [`Reply::Failed`] with the state left consistent.
    pub fn handle(&mut self, command: WorkerCommand) -> Reply {
        let result = match command {
            WorkerCommand::Reconfigure(reconfiguration) => self.reconfigure(reconfiguration),
            WorkerCommand::Step { step, attempt } => self.step(step, attempt),
            WorkerCommand::Commit { step } => self.commit(step),
            WorkerCommand::Abort { step } => {
                self.trainer.abort();
                self.pending_attempt = None;
                Ok(Reply::Aborted { step })
            }
            WorkerCommand::Checkpoint { step, prefix } => self.checkpoint(step, &prefix),
            WorkerCommand::Snapshot { step, prefix } => self.snapshot(step, prefix),
            WorkerCommand::Notice { grace_ms } => {
                warn!(grace_ms, "preemption notice: the host will move or save my state before the kill");
                Ok(Reply::Noted)
            }
            WorkerCommand::Flush => {
                let written = std::mem::take(&mut self.writes).into_iter().map(PendingWrite::join).collect();
                Ok(Reply::Flushed { written })
            }
            WorkerCommand::ServeConfigure(configuration) => {
                self.with_serving(|serving, cx| serving.configure(cx, configuration))
            }
            WorkerCommand::ServeStep { iteration, seqs, release } => {
                self.with_serving(|serving, cx| serving.step(cx, iteration, &seqs, &release))
            }
            WorkerCommand::Shutdown => {
                // Let background writes finish: a clean stop loses no checkpoint.
                for write in std::mem::take(&mut self.writes).into_iter().map(PendingWrite::join) {
                    if let Err(e) = write.result {
                        warn!(step = write.step, %e, "background checkpoint write failed");
                    }
                }
                Ok(Reply::Bye)
            }
        };
        result.unwrap_or_else(|e| {
            warn!(%e, "command failed");
            Reply::Failed { reason: e.to_string() }
        })
    }

    /// Runs a serving command with the serving state and what it needs of the worker.
    fn with_serving<T>(&mut self, f: impl FnOnce(&mut Serving, &ServeContext<'_>) -> T) -> T {
        let cx = ServeContext {
            spec: &self.spec,
            net: &self.net,
            rt: &self.rt,
            timeout: self.peer_timeout,
            store: &self.store,
            device: self.trainer.device(),
            me: self.worker,
        };
        f(&mut self.serving, &cx)
    }

    fn reconfigure(&mut self, reconfiguration: Reconfiguration) -> Result<Reply, WorkerError> {
        let Reconfiguration { epoch, step, layout, slot, keep, sends, fetches, peers } = reconfiguration;
        let started = Instant::now();
        if self.trainer.has_pending_step() {
            self.trainer.abort();
        }
        self.net.mailbox.discard_epochs_before(epoch);
        // 1. Send what others need, from the state as it is now (all at the same step).
        let mut outgoing = Vec::new();
        for send in &sends {
            let bytes = self.trainer.export_layer(send.layer)?.to_bytes();
            outgoing.push((send.clone(), bytes));
        }
        let net = self.net.clone();
        let sending = self.rt.spawn(async move {
            let transfers = outgoing.into_iter().map(|(send, bytes)| {
                let net = net.clone();
                async move { net.send_state(send.addr, &send.name, epoch, send.layer, bytes).await }
            });
            futures_util::future::join_all(transfers).await
        });
        // 2. Gather what this worker needs; nothing changes until all of it arrived.
        let mut incoming: BTreeMap<usize, LayerState> = BTreeMap::new();
        let mut received = 0u64;
        let mut checkpoints: BTreeMap<String, parcae_worker::Checkpoint> = BTreeMap::new();
        for fetch in &fetches {
            let state = match fetch {
                Fetch::FromPeer { layer, from } => {
                    let key = Key::State { epoch, layer: *layer as u32 };
                    let bytes =
                        self.net.mailbox.take(key, self.peer_timeout).map_err(|e| {
                            WorkerError::Comm(format!("layer {layer} from worker {from}: {e}"))
                        })?;
                    received += bytes.len() as u64;
                    LayerState::decode_for(&self.spec, *layer, &bytes)?
                }
                Fetch::FromCheckpoint { layer, prefix } => {
                    if !checkpoints.contains_key(prefix) {
                        let loaded =
                            self.rt.block_on(load_checkpoint_from(&self.store, prefix, Some(&self.spec)))?;
                        checkpoints.insert(prefix.clone(), loaded);
                    }
                    let checkpoint = &checkpoints[prefix];
                    checkpoint.layers.iter().find(|s| s.layer == *layer).cloned().ok_or_else(|| {
                        WorkerError::Sequence(format!(
                            "checkpoint {} has no layer {layer}",
                            self.store.location(prefix)
                        ))
                    })?
                }
                Fetch::Fresh { layer } => LayerState::initial(&self.spec, *layer)?,
            };
            incoming.insert(state.layer, state);
        }
        let sent = self.rt.block_on(sending).map_err(|e| WorkerError::Comm(format!("send task: {e}")))?;
        let mut bytes_sent = 0;
        let mut resent_chunks = 0;
        for result in sent {
            let stats = result.map_err(|e| WorkerError::Comm(e.to_string()))?;
            bytes_sent += stats.bytes;
            resent_chunks += stats.resent_chunks as u64;
        }
        if let Some(state) = incoming.values().find(|s| s.step != step) {
            return Err(WorkerError::StepMismatch { expected: step, found: state.step });
        }
        // 3. Swap: drop what is not kept or is being replaced, import the rest.
        for layer in self.trainer.held_layers() {
            if !keep.contains(&layer) || incoming.contains_key(&layer) {
                self.trainer.drop_layer(layer)?;
            }
        }
        for (_, state) in incoming {
            self.trainer.import_layer(state)?;
        }
        if !self.trainer.held_layers().is_empty() || slot.is_some() {
            self.trainer.set_step(step)?;
        }
        let held = self.trainer.held_layers();
        if held != keep.clone().collect::<Vec<_>>() {
            return Err(WorkerError::WrongLayers { expected: keep, held });
        }
        self.placement = slot.map(|slot| Placement { layout, slot, peers });
        let millis = started.elapsed().as_secs_f64() * 1000.0;
        info!(epoch, step, ?slot, bytes_sent, received, millis, "reconfigured");
        Ok(Reply::Reconfigured { bytes_sent, bytes_received: received, resent_chunks, millis })
    }

    fn neighbour(&self, placement: &Placement, replica: usize, stage: usize) -> Option<Neighbour> {
        placement
            .peers
            .iter()
            .find(|p| p.slot == Slot { replica, stage })
            .map(|p| Neighbour { addr: p.addr, name: p.name.clone() })
    }

    fn step(&mut self, step: u64, attempt: u64) -> Result<Reply, WorkerError> {
        let started = Instant::now();
        let placement =
            self.placement.as_ref().ok_or_else(|| WorkerError::Sequence("step without a slot".into()))?;
        if self.trainer.step() != step {
            return Err(WorkerError::StepMismatch { expected: self.trainer.step(), found: step });
        }
        self.net.mailbox.discard_attempts_before(attempt);
        let Slot { replica, stage } = placement.slot;
        let layout = placement.layout.clone();
        let mut link = QuicPipeLink {
            rt: self.rt.clone(),
            net: self.net.clone(),
            attempt,
            upstream: stage.checked_sub(1).and_then(|s| self.neighbour(placement, replica, s)),
            downstream: self.neighbour(placement, replica, stage + 1),
            timeout: self.peer_timeout,
            device: self.trainer.device(),
        };
        let replicas = (0..layout.data_parallel)
            .map(|r| {
                self.neighbour(placement, r, stage)
                    .ok_or_else(|| WorkerError::Sequence(format!("no peer in slot ({r}, {stage})")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut collective = QuicAllReduce {
            rt: self.rt.clone(),
            net: self.net.clone(),
            attempt,
            my_replica: replica,
            replicas,
            timeout: self.peer_timeout,
        };
        let slot = placement.slot;
        let outcome = self.trainer.compute_step(step, &layout, slot, &mut link, &mut collective)?;
        self.pending_attempt = Some(attempt);
        Ok(Reply::Stepped {
            step,
            loss_sum: outcome.loss_sum,
            micro_batches: outcome.micro_batches,
            millis: started.elapsed().as_secs_f64() * 1000.0,
            written: self.finished_writes(),
        })
    }

    fn commit(&mut self, step: u64) -> Result<Reply, WorkerError> {
        if !self.trainer.has_pending_step() {
            return Err(WorkerError::Sequence(format!("commit of step {step} with nothing pending")));
        }
        self.trainer.commit()?;
        self.pending_attempt = None;
        Ok(Reply::Committed { step })
    }

    fn checkpoint(&mut self, step: u64, prefix: &str) -> Result<Reply, WorkerError> {
        if self.trainer.step() != step {
            return Err(WorkerError::StepMismatch { expected: self.trainer.step(), found: step });
        }
        let layers = self.trainer.export_all()?;
        let bytes =
            self.rt.block_on(save_checkpoint_to(&self.store, prefix, step, self.spec.seed, &layers))?;
        Ok(Reply::Checkpointed { step, bytes })
    }

    /// Copies the held state now and writes it on a background thread.
    fn snapshot(&mut self, step: u64, prefix: String) -> Result<Reply, WorkerError> {
        let started = Instant::now();
        if self.trainer.step() != step {
            return Err(WorkerError::StepMismatch { expected: self.trainer.step(), found: step });
        }
        let layers = self.trainer.export_all()?;
        let seed = self.spec.seed;
        let (target, store, rt) = (prefix.clone(), self.store.clone(), self.rt.clone());
        let thread = std::thread::Builder::new()
            .name(format!("checkpoint-{step}"))
            .spawn(move || -> Result<(u64, f64), WorkerError> {
                let writing = Instant::now();
                let bytes = rt.block_on(save_checkpoint_to(&store, &target, step, seed, &layers))?;
                Ok((bytes, writing.elapsed().as_secs_f64() * 1000.0))
            })
            .map_err(|e| WorkerError::Sequence(format!("starting the checkpoint writer: {e}")))?;
        self.writes.push(PendingWrite { step, prefix, thread });
        Ok(Reply::SnapshotTaken { step, millis: started.elapsed().as_secs_f64() * 1000.0 })
    }

    /// Background writes that are done, for the host to complete its checkpoints.
    fn finished_writes(&mut self) -> Vec<BackgroundWrite> {
        let (done, running): (Vec<PendingWrite>, Vec<PendingWrite>) =
            std::mem::take(&mut self.writes).into_iter().partition(|w| w.thread.is_finished());
        self.writes = running;
        done.into_iter().map(PendingWrite::join).collect()
    }
}
