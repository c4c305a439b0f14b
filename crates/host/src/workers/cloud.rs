//! The cloud's side of a local run: it kills instances on its own clock,
//! independent of the host's loop, so a preemption can land in the middle of a
//! step or a transfer, as it does for real.
//!
//! When it kills a worker it also closes the host's connection to it and tells
//! every other worker to give up the step attempt in flight (the stand-in for
//! the cloud's termination event; without it the survivors would notice only
//! through timeouts, which still works, only slower).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use parcae_cluster::WorkerId;
use parcae_cluster::protocol::Cancel;
use parcae_net::{StreamHeader, StreamKind};
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::timeline::{FleetEvent, TimedEvent};

/// What the cloud did, for the host's loop to act on.
#[derive(Debug, Clone)]
pub enum CloudNote {
    /// The cloud granted trace node `node`: start a worker for it.
    Allocate {
        /// The trace node.
        node: String,
    },
    /// The cloud will reclaim `node` after the grace period.
    Notice {
        /// The trace node.
        node: String,
    },
    /// The cloud killed `node`'s process.
    Killed {
        /// The trace node.
        node: String,
        /// Whether a notice came first.
        announced: bool,
    },
}

/// State the cloud and the fleet share.
#[derive(Default)]
pub struct Shared {
    /// Running worker processes by trace node: (worker, pid).
    processes: Mutex<HashMap<String, (WorkerId, u32)>>,
    /// The host's connection to each connected worker.
    conns: Mutex<HashMap<WorkerId, quinn::Connection>>,
    /// The step attempt in flight (0: none).
    attempt: AtomicU64,
    /// The reconfiguration epoch in flight (0: none).
    epoch: AtomicU64,
    /// Workers taking part in the attempt or epoch in flight: only their loss cancels it.
    participants: Mutex<HashSet<WorkerId>>,
    /// Serving: the decode iterations in flight, one per replica, with their workers (a
    /// loss cancels only the iteration of its own replica).
    iterations: Mutex<Vec<(u64, HashSet<WorkerId>)>>,
}

impl Shared {
    /// Records the process the cloud kills when it reclaims `node`.
    pub fn register_process(&self, node: &str, worker: WorkerId, pid: u32) {
        self.processes.lock().expect("cloud lock").insert(node.to_string(), (worker, pid));
    }

    /// Records the host's connection to `worker`, closed when the cloud kills it.
    pub fn register_conn(&self, worker: WorkerId, conn: quinn::Connection) {
        self.conns.lock().expect("cloud lock").insert(worker, conn);
    }

    /// Forgets a worker that is gone.
    pub fn forget(&self, worker: WorkerId) {
        self.conns.lock().expect("cloud lock").remove(&worker);
        self.processes.lock().expect("cloud lock").retain(|_, (w, _)| *w != worker);
    }

    /// The step attempt now in flight (0: none) and the workers taking part.
    pub fn set_attempt(&self, attempt: u64, participants: impl IntoIterator<Item = WorkerId>) {
        *self.participants.lock().expect("cloud lock") = participants.into_iter().collect();
        self.attempt.store(attempt, Ordering::SeqCst);
    }

    /// The reconfiguration now in flight (0: none) and the workers taking part.
    pub fn set_epoch(&self, epoch: u64, participants: impl IntoIterator<Item = WorkerId>) {
        *self.participants.lock().expect("cloud lock") = participants.into_iter().collect();
        self.epoch.store(epoch, Ordering::SeqCst);
    }

    /// The serving iterations now in flight (empty: none), each with its replica's workers.
    pub fn set_iterations(&self, iterations: Vec<(u64, HashSet<WorkerId>)>) {
        *self.iterations.lock().expect("cloud lock") = iterations;
    }

    /// SIGKILLs the process of `node`; closes the host's connection to it and
    /// cancels the step attempt in flight on everyone else.
    async fn kill_node(&self, node: &str) -> Option<WorkerId> {
        let (worker, pid) = self.processes.lock().expect("cloud lock").get(node).copied()?;
        // SAFETY: kill(2) on a pid this run started; at worst the process already exited.
        let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        if rc != 0 {
            warn!(%node, pid, "kill failed (already exited?)");
        }
        let others: Vec<(WorkerId, quinn::Connection)> = {
            let mut conns = self.conns.lock().expect("cloud lock");
            if let Some(conn) = conns.remove(&worker) {
                conn.close(0u32.into(), b"instance preempted");
            }
            conns.iter().map(|(w, c)| (*w, c.clone())).collect()
        };
        // A serving replica's iteration: only that replica's workers give it up.
        for (iteration, members) in self.iterations.lock().expect("cloud lock").iter() {
            if members.contains(&worker) {
                let targets = others.iter().filter(|(w, _)| members.contains(w)).map(|(_, c)| c.clone());
                send_cancels(targets, Cancel::StepAttempt(*iteration));
            }
        }
        if !self.participants.lock().expect("cloud lock").contains(&worker) {
            // An idle or leaving worker: nothing in flight depends on it.
            return Some(worker);
        }
        let attempt = self.attempt.load(Ordering::SeqCst);
        let epoch = self.epoch.load(Ordering::SeqCst);
        let cancels = [
            (attempt > 0).then_some(Cancel::StepAttempt(attempt)),
            (epoch > 0).then_some(Cancel::Epoch(epoch)),
        ];
        for cancel in cancels.into_iter().flatten() {
            send_cancels(others.iter().map(|(_, c)| c.clone()), cancel);
        }
        Some(worker)
    }
}

/// Sends `cancel` to each connection on its own urgent stream, without waiting.
fn send_cancels(conns: impl Iterator<Item = quinn::Connection>, cancel: Cancel) {
    for conn in conns {
        tokio::spawn(async move {
            if let Ok(mut send) = conn.open_uni().await {
                let header = StreamHeader::new(StreamKind::Control, Cancel::STREAM_TAG);
                if header.write(&mut send).await.is_ok() {
                    let _ = parcae_net::send_msg(&mut send, &cancel).await;
                }
                let _ = send.finish();
            }
        });
    }
}

/// Plays the timeline from `start`: allocations and notices go to the host's
/// loop; kills happen here, on time.
pub async fn play(
    events: Vec<TimedEvent>,
    start: Instant,
    grace: Duration,
    shared: Arc<Shared>,
    notes: mpsc::UnboundedSender<CloudNote>,
) {
    for event in events {
        tokio::time::sleep_until((start + event.at).into()).await;
        match event.event {
            FleetEvent::Allocate { node } => {
                let _ = notes.send(CloudNote::Allocate { node });
            }
            FleetEvent::Preempt { node, notice: false } => {
                if shared.kill_node(&node).await.is_some() {
                    info!(%node, "preempted without notice");
                    let _ = notes.send(CloudNote::Killed { node, announced: false });
                }
            }
            FleetEvent::Preempt { node, notice: true } => {
                let _ = notes.send(CloudNote::Notice { node: node.clone() });
                let (shared, notes) = (shared.clone(), notes.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(grace).await;
                    if shared.kill_node(&node).await.is_some() {
                        info!(%node, "grace period over: killed");
                        let _ = notes.send(CloudNote::Killed { node, announced: true });
                    }
                });
            }
        }
    }
}
