//! The workers of a run: their processes (local mode), their control
//! connections, preemption notices and kills, and concurrent command calls.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use futures_util::future::join_all;
use parcae_cluster::protocol::{
    CheckpointStore, Hello, PROTOCOL_VERSION, Reply, Welcome, WorkerCommand, WorkerReport,
};
use parcae_cluster::{ModelSpec, WorkerId};
use std::sync::Arc;

use parcae_net::{ClusterCa, StreamKind};
use tokio::process::{Child, Command as Process};
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::cloud::Shared;

/// A worker that connected and said hello, before the host admits it.
pub struct Arrival {
    /// What the worker said first.
    pub hello: Hello,
    /// The name on the worker's cluster certificate.
    pub cert_name: String,
    /// Its connection.
    pub conn: quinn::Connection,
    /// The control stream's sending half.
    pub send: quinn::SendStream,
    /// The control stream's receiving half.
    pub recv: quinn::RecvStream,
}

/// Why a command got no answer.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The worker did not answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The connection failed.
    #[error("connection lost: {0}")]
    Lost(String),
    /// The worker is not (or no longer) connected.
    #[error("worker {0} is not connected")]
    NotConnected(WorkerId),
}

/// One worker's control stream: one command in flight at a time.
pub struct ControlLink {
    conn: quinn::Connection,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
}

impl ControlLink {
    async fn call(&mut self, command: &WorkerCommand, timeout: Duration) -> Result<Reply, LinkError> {
        let exchange = async {
            parcae_net::send_msg(&mut self.send, command)
                .await
                .map_err(|e| LinkError::Lost(e.to_string()))?;
            parcae_net::recv_msg::<_, Reply>(&mut self.recv).await.map_err(|e| LinkError::Lost(e.to_string()))
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(LinkError::Timeout(timeout)),
        }
    }

    fn is_closed(&self) -> bool {
        self.conn.close_reason().is_some()
    }
}

/// A connected worker.
pub struct WorkerHandle {
    link: ControlLink,
    /// The name on its certificate (what peers check when they dial it).
    name: String,
    peer_addr: SocketAddr,
    /// Under a preemption notice (the cloud kills it when the grace period ends).
    leaving: bool,
    /// Its compute time relative to the nominal worker's (its instance type's speed).
    slowdown: f64,
    /// The instance type it reported (empty: none said).
    instance_type: String,
}

/// How local workers are started.
pub struct LocalLaunch {
    /// The `parcae-worker` binary.
    pub worker_bin: PathBuf,
    /// Where workers reach the host.
    pub host_addr: SocketAddr,
    /// Where each worker's certificate and key are written.
    pub identities: PathBuf,
    /// Where each worker's log goes.
    pub logs: PathBuf,
    /// The device workers compute on (`cpu`, `cuda`, `auto`).
    pub device: String,
    /// The cluster's CA, which issues each worker's certificate.
    pub ca: Arc<ClusterCa>,
    /// Instance types the local workers take in turn, with the slowdown each emulates
    /// (`run --emulate-types`); empty: one type, full speed.
    pub types: Vec<(String, f64)>,
}

/// Every worker of the run, local or joined.
pub struct Fleet {
    launch: Option<LocalLaunch>,
    next_id: WorkerId,
    processes: BTreeMap<WorkerId, (Child, String)>,
    workers: BTreeMap<WorkerId, WorkerHandle>,
    dead: BTreeSet<WorkerId>,
    /// Peer timeout the workers use inside a step (shorter than the host's command timeout).
    pub peer_timeout: Duration,
    /// What the cloud's kill switch needs to know (pids, connections, the attempt in flight).
    pub shared: Arc<Shared>,
    /// Where the workers write and read checkpoints (told at welcome).
    checkpoints: CheckpointStore,
    /// What workers reported unprompted (their cloud's notices), in arrival order.
    reports_tx: mpsc::UnboundedSender<(WorkerId, WorkerReport)>,
    reports: mpsc::UnboundedReceiver<(WorkerId, WorkerReport)>,
}

impl Fleet {
    /// A fleet with no workers yet; `launch` None: workers join from elsewhere.
    pub fn new(launch: Option<LocalLaunch>, peer_timeout: Duration, checkpoints: CheckpointStore) -> Self {
        let (reports_tx, reports) = mpsc::unbounded_channel();
        Fleet {
            checkpoints,
            reports_tx,
            reports,
            launch,
            next_id: 1,
            processes: BTreeMap::new(),
            workers: BTreeMap::new(),
            dead: BTreeSet::new(),
            peer_timeout,
            shared: Arc::new(Shared::default()),
        }
    }

    /// Starts a local worker process for trace node `node`; it joins later.
    pub async fn allocate(&mut self, node: &str) -> anyhow::Result<WorkerId> {
        let launch = self
            .launch
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("remote mode: allocations come from workers that join"))?;
        let id = self.next_id;
        self.next_id += 1;
        let dir = launch.identities.join(format!("worker-{id}"));
        let identity = launch.ca.issue(&format!("worker-{id}"), &["localhost", "127.0.0.1"])?;
        identity.save(&dir)?;
        let log_path = launch.logs.join(format!("worker-{id}.log"));
        let log = std::fs::File::create(&log_path)?;
        let child = Process::new(&launch.worker_bin)
            .arg("--connect")
            .arg(launch.host_addr.to_string())
            .arg("--identity")
            .arg(&dir)
            .arg("--id")
            .arg(id.to_string())
            .arg("--device")
            .arg(&launch.device)
            .args(match launch.types.get(id.saturating_sub(1) as usize % launch.types.len().max(1)) {
                Some((name, slowdown)) => {
                    vec![
                        "--instance-type".to_string(),
                        name.clone(),
                        "--emulate-slowdown".to_string(),
                        slowdown.to_string(),
                    ]
                }
                None => Vec::new(),
            })
            .args(parcae_logging::current().worker_args())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| anyhow::anyhow!("starting {}: {e}", launch.worker_bin.display()))?;
        info!(worker = id, node, log = %log_path.display(), "worker process started");
        if let Some(pid) = child.id() {
            self.shared.register_process(node, id, pid);
        }
        self.processes.insert(id, (child, node.to_string()));
        Ok(id)
    }

    /// The worker ever started for trace node `node`, alive or dead (a kill
    /// report may arrive after the host already counted the worker lost).
    pub fn worker_started_for(&self, node: &str) -> Option<WorkerId> {
        self.processes.iter().find(|(_, (_, n))| n == node).map(|(id, _)| *id)
    }

    /// The worker running trace node `node`, only while it is alive (a notice
    /// for a dead one is meaningless).
    pub fn live_worker_for(&self, node: &str) -> Option<WorkerId> {
        self.processes.iter().find(|(id, (_, n))| n == node && !self.dead.contains(id)).map(|(id, _)| *id)
    }

    /// Tells a worker the cloud will kill it after `grace`; it takes no new slot.
    pub async fn notice(&mut self, id: WorkerId, grace: Duration, timeout: Duration) {
        if let Some(handle) = self.workers.get_mut(&id) {
            handle.leaving = true;
            let grace_ms = grace.as_millis() as u64;
            if let Err(e) = handle.link.call(&WorkerCommand::Notice { grace_ms }, timeout.min(grace)).await {
                warn!(worker = id, %e, "notice not acknowledged");
            }
        }
    }

    /// SIGKILLs a worker the host gave up on (it did not answer in time).
    pub async fn kill(&mut self, id: WorkerId) {
        if let Some((child, node)) = self.processes.get_mut(&id) {
            if let Err(e) = child.start_kill() {
                warn!(worker = id, %node, %e, "kill failed (already exited?)");
            }
            let _ = child.wait().await;
        }
        self.forget(id);
    }

    /// Records that the cloud killed `id`'s process.
    pub async fn killed(&mut self, id: WorkerId) {
        if let Some((child, _)) = self.processes.get_mut(&id) {
            let _ = child.wait().await;
        }
        self.forget(id);
    }

    fn forget(&mut self, id: WorkerId) {
        if let Some(handle) = self.workers.remove(&id) {
            handle.link.conn.close(0u32.into(), b"gone");
        }
        self.shared.forget(id);
        self.dead.insert(id);
    }

    /// Admits a worker that said hello: checks it, answers with the spec.
    pub async fn admit(&mut self, arrival: Arrival, spec: &ModelSpec, timeout: Duration) -> Option<WorkerId> {
        let Arrival { hello, cert_name, conn, send, recv } = arrival;
        let refuse = |reason: String| {
            warn!(remote = %conn.remote_address(), %cert_name, %reason, "worker refused");
            conn.close(1u32.into(), reason.as_bytes());
            None
        };
        if hello.protocol != PROTOCOL_VERSION {
            return refuse(format!("protocol {} (host speaks {PROTOCOL_VERSION})", hello.protocol));
        }
        let id = match hello.worker {
            Some(id) => {
                if cert_name != format!("worker-{id}") {
                    return refuse(format!("certificate {cert_name} does not belong to worker {id}"));
                }
                if !self.processes.contains_key(&id)
                    || self.dead.contains(&id)
                    || self.workers.contains_key(&id)
                {
                    return refuse(format!("worker {id} was not started by this host or is gone"));
                }
                id
            }
            None => {
                let id = self.next_id;
                self.next_id += 1;
                id
            }
        };
        let mut link = ControlLink { conn, send, recv };
        let welcome = Welcome {
            worker: id,
            spec: spec.clone(),
            peer_timeout_ms: self.peer_timeout.as_millis() as u64,
            checkpoints: self.checkpoints.clone(),
        };
        let sent = tokio::time::timeout(timeout, parcae_net::send_msg(&mut link.send, &welcome)).await;
        if !matches!(sent, Ok(Ok(()))) {
            warn!(worker = id, "welcome not delivered");
            return None;
        }
        info!(
            worker = id,
            addr = %hello.peer_addr,
            device = %hello.device,
            instance_type = %hello.instance_type,
            slowdown = hello.slowdown,
            "worker joined"
        );
        self.shared.register_conn(id, link.conn.clone());
        tokio::spawn(forward_reports(id, link.conn.clone(), self.reports_tx.clone()));
        self.workers.insert(
            id,
            WorkerHandle {
                link,
                name: cert_name,
                peer_addr: hello.peer_addr,
                leaving: false,
                slowdown: if hello.slowdown.is_finite() && hello.slowdown >= 1.0 {
                    hello.slowdown
                } else {
                    1.0
                },
                instance_type: hello.instance_type.clone(),
            },
        );
        Some(id)
    }

    /// The id the next worker gets.
    pub fn next_id(&self) -> WorkerId {
        self.next_id
    }

    /// Hands out ids from `id` on (a resumed run goes on from the dead host's ids).
    pub fn start_ids_at(&mut self, id: WorkerId) {
        self.next_id = self.next_id.max(id);
    }

    /// What workers reported since the last call (their cloud's preemption notices).
    pub fn reports(&mut self) -> Vec<(WorkerId, WorkerReport)> {
        std::iter::from_fn(|| self.reports.try_recv().ok()).collect()
    }

    /// A worker under a notice it read from its cloud: it takes no new slot.
    pub fn leaving(&mut self, id: WorkerId) {
        if let Some(handle) = self.workers.get_mut(&id) {
            handle.leaving = true;
        }
    }

    /// The certificate name of a worker, connected or not (for logs).
    pub fn name_of(&self, id: WorkerId) -> String {
        self.workers.get(&id).map_or_else(|| format!("worker-{id}"), |h| h.name.clone())
    }

    /// Workers whose process exited or whose connection closed since the last call.
    pub fn reap_dead(&mut self) -> Vec<WorkerId> {
        let mut gone = Vec::new();
        for (id, (child, _)) in self.processes.iter_mut() {
            if !self.dead.contains(id) && matches!(child.try_wait(), Ok(Some(_))) {
                gone.push(*id);
            }
        }
        for (id, handle) in &self.workers {
            if handle.link.is_closed() && !gone.contains(id) {
                gone.push(*id);
            }
        }
        for id in &gone {
            if let Some((child, _)) = self.processes.get_mut(id) {
                let _ = child.start_kill();
            }
            self.forget(*id);
        }
        gone
    }

    /// Local workers started but not yet connected (and not dead).
    pub fn pending(&self) -> usize {
        self.processes.keys().filter(|id| !self.workers.contains_key(id) && !self.dead.contains(id)).count()
    }

    /// Connected and not counted lost.
    pub fn is_alive(&self, id: WorkerId) -> bool {
        self.workers.contains_key(&id) && !self.dead.contains(&id)
    }

    /// Connected workers not under notice: those a new layout may use.
    pub fn available(&self) -> Vec<WorkerId> {
        self.workers.iter().filter(|(_, h)| !h.leaving).map(|(id, _)| *id).collect()
    }

    /// Every connected worker, including those under notice.
    pub fn connected(&self) -> Vec<WorkerId> {
        self.workers.keys().copied().collect()
    }

    /// A connected worker's QUIC endpoint for its peers.
    pub fn peer_addr(&self, id: WorkerId) -> Option<SocketAddr> {
        self.workers.get(&id).map(|h| h.peer_addr)
    }

    /// A connected worker's compute time relative to the nominal worker's.
    pub fn slowdown(&self, id: WorkerId) -> Option<f64> {
        self.workers.get(&id).map(|h| h.slowdown)
    }

    /// The instance type a connected worker reported.
    pub fn instance_type(&self, id: WorkerId) -> Option<String> {
        self.workers.get(&id).map(|h| h.instance_type.clone())
    }

    /// The certificate name of a connected worker.
    pub fn peer_name(&self, id: WorkerId) -> Option<String> {
        self.workers.get(&id).map(|h| h.name.clone())
    }

    /// Sends each worker its command concurrently and collects the replies. A
    /// worker that does not answer is killed and counted lost, so it can never
    /// act on a step the host has given up on.
    pub async fn call_many(
        &mut self,
        commands: BTreeMap<WorkerId, WorkerCommand>,
        timeout: Duration,
    ) -> BTreeMap<WorkerId, Result<Reply, LinkError>> {
        let mut results: BTreeMap<WorkerId, Result<Reply, LinkError>> = BTreeMap::new();
        for id in commands.keys() {
            if !self.workers.contains_key(id) {
                results.insert(*id, Err(LinkError::NotConnected(*id)));
            }
        }
        let calls = self.workers.iter_mut().filter_map(|(id, handle)| {
            let command = commands.get(id)?;
            Some(async move { (*id, handle.link.call(command, timeout).await) })
        });
        for (id, result) in join_all(calls).await {
            results.insert(id, result);
        }
        let failed: Vec<WorkerId> = results
            .iter()
            .filter(|(_, r)| matches!(r, Err(LinkError::Timeout(_) | LinkError::Lost(_))))
            .map(|(id, _)| *id)
            .collect();
        for id in failed {
            warn!(worker = id, "no answer; treating the worker as lost");
            self.kill(id).await;
        }
        results
    }

    /// Asks every worker to stop, then makes sure the processes are gone.
    pub async fn shutdown(&mut self, timeout: Duration) {
        let commands = self.workers.keys().map(|&id| (id, WorkerCommand::Shutdown)).collect();
        let _ = self.call_many(commands, timeout).await;
        for (id, (child, _)) in self.processes.iter_mut() {
            match tokio::time::timeout(timeout, child.wait()).await {
                Ok(_) => {}
                Err(_) => {
                    warn!(worker = id, "did not exit after shutdown; killing");
                    let _ = child.start_kill();
                }
            }
        }
        self.workers.clear();
    }
}

/// Reads what worker `id` reports on uni streams of its own (tag [`WorkerReport::STREAM_TAG`])
/// until its connection closes.
async fn forward_reports(
    id: WorkerId,
    conn: quinn::Connection,
    reports: mpsc::UnboundedSender<(WorkerId, WorkerReport)>,
) {
    while let Ok(mut stream) = parcae_net::accept_stream(&conn).await {
        if stream.header.kind != StreamKind::Control || stream.header.tag != WorkerReport::STREAM_TAG {
            warn!(worker = id, header = ?stream.header, "unexpected stream from a worker; ignored");
            continue;
        }
        match parcae_net::frame::recv_msg_limited::<_, WorkerReport>(&mut stream.recv, 64 << 10).await {
            Ok(report) => {
                if reports.send((id, report)).is_err() {
                    return;
                }
            }
            Err(e) => warn!(worker = id, %e, "unreadable report from a worker; ignored"),
        }
    }
}
