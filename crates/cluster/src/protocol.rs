//! Control messages between `parcae-host` and a worker: the whole host-worker
//! protocol, typed, in one place.
//!
//! Each worker keeps one bidirectional control stream to the host. The host
//! sends a [`WorkerCommand`] and waits for the matching [`Reply`]; it never has two
//! commands in flight to one worker, so the exchange needs no request ids. Every
//! step is two-phase (compute, then commit or abort) so a peer that dies mid-step
//! leaves every survivor at the last committed step.
//!
//! The worker speaks unprompted only to report what its cloud told it (a
//! [`WorkerReport`], on a uni stream of its own), so a real preemption notice
//! reaches the host the moment the instance's metadata service shows it.

use std::net::SocketAddr;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::layout::{Layout, ModelSpec, Slot};
use crate::migration::WorkerId;
use crate::serving::{SeqStep, ServeConfiguration};

/// Version of this protocol; a worker of another version is refused at hello.
pub const PROTOCOL_VERSION: u32 = 4;

/// The worker's first message on its control stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// The worker's [`PROTOCOL_VERSION`], checked before anything else is read.
    pub protocol: u32,
    /// The id the host gave a locally started worker; None for a worker that joined.
    pub worker: Option<WorkerId>,
    /// Where peers reach this worker's QUIC endpoint.
    pub peer_addr: SocketAddr,
    /// What the worker trains on ("cpu", "cuda:0").
    pub device: String,
    /// Its instance type ("p3.2xlarge"; empty when not said): a mixed fleet splits the
    /// batch by the types' speeds.
    #[serde(default)]
    pub instance_type: String,
    /// How many times as long its compute takes as the fleet's nominal worker (1 unless it
    /// emulates a slower type, `parcae-worker --emulate-slowdown`); what the batch split
    /// weighs replicas by.
    #[serde(default = "nominal_speed")]
    pub slowdown: f64,
}

fn nominal_speed() -> f64 {
    1.0
}

/// The host's answer to [`Hello`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    /// The worker's id for the rest of the job (assigned here to a joining worker).
    pub worker: WorkerId,
    /// The model every worker builds, so all stages agree on shapes and seeds.
    pub spec: ModelSpec,
    /// How long a worker waits for a peer's activations, gradients or state
    /// before it fails the command (shorter than the host's own timeout).
    pub peer_timeout_ms: u64,
    /// Where checkpoints live: the store every stage holder writes its stage to and
    /// reads restarts from, directly (credentials come from the worker's own environment).
    pub checkpoints: CheckpointStore,
}

/// A checkpoint store as `parcae-host run --checkpoint-url/--checkpoint-endpoint` name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointStore {
    /// `file:///dir` (or a plain path), `s3://bucket/prefix`, `gs://...`, `az://...`.
    pub url: String,
    /// An S3-compatible endpoint instead of AWS's, if any.
    pub endpoint: Option<String>,
}

/// Where a peer in the current layout lives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerAddress {
    /// The peer's id, as named in sends and fetches.
    pub worker: WorkerId,
    /// The name on its cluster certificate (what a TLS client checks).
    pub name: String,
    /// Its place in the layout, which decides who exchanges activations with whom.
    pub slot: Slot,
    /// Its QUIC endpoint.
    pub addr: SocketAddr,
}

/// A layer the worker must obtain before the next step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Fetch {
    /// Another worker sends it (the receiver waits for it).
    FromPeer {
        /// The layer to receive.
        layer: usize,
        /// The worker sending it.
        from: WorkerId,
    },
    /// Read it from the checkpoint of the stage that saved it.
    FromCheckpoint {
        /// The layer to load.
        layer: usize,
        /// The stage's key prefix in the checkpoint store.
        prefix: String,
    },
    /// Build it from the seed (a restart before the first checkpoint).
    Fresh {
        /// The layer to initialise.
        layer: usize,
    },
}

/// A layer the worker must send to a peer (named apart from `std::marker::Send`,
/// which a plain `Send` would shadow wherever it is imported).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SendLayer {
    /// The layer to send.
    pub layer: usize,
    /// The receiving worker.
    pub to: WorkerId,
    /// The receiver's certificate name.
    pub name: String,
    /// The receiver's QUIC endpoint.
    pub addr: SocketAddr,
}

/// Everything a worker needs to move to a new configuration: send, fetch, then
/// keep only `keep` and train from `step`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reconfiguration {
    /// Numbers reconfigurations (transfer ids, cancellation).
    pub epoch: u64,
    /// The step every worker trains next (older than the current one after a restart).
    pub step: u64,
    /// The whole new layout, so the worker knows its stage's neighbours.
    pub layout: Layout,
    /// None: the worker is idle in this configuration (it holds nothing afterwards).
    pub slot: Option<Slot>,
    /// The layers it holds afterwards; everything else is dropped.
    pub keep: Range<usize>,
    /// Layers it must send before it may drop them.
    pub sends: Vec<SendLayer>,
    /// Layers it must obtain before the next step.
    pub fetches: Vec<Fetch>,
    /// Every worker with a slot, so the pipeline and collective can find each other.
    pub peers: Vec<PeerAddress>,
}

/// What the host asks a worker to do (named apart from the host's CLI `Command`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum WorkerCommand {
    /// Move state for a new configuration.
    Reconfigure(Reconfiguration),
    /// Compute the gradients of `step` (parameters unchanged until [`WorkerCommand::Commit`]).
    /// `attempt` is unique per step command, so messages of an aborted attempt
    /// can never be mistaken for those of its retry.
    Step {
        /// The step to compute.
        step: u64,
        /// This attempt's unique number.
        attempt: u64,
    },
    /// Apply the computed update of `step`.
    Commit {
        /// The step whose gradients to apply.
        step: u64,
    },
    /// Discard the gradients of `step` (a peer failed).
    Abort {
        /// The step whose gradients to drop.
        step: u64,
    },
    /// Write the held layers' state at the current step under `prefix` in the
    /// checkpoint store (one prefix per stage, so writers never share a manifest)
    /// before replying.
    Checkpoint {
        /// The step the host expects the worker to be at.
        step: u64,
        /// The stage's key prefix in the checkpoint store.
        prefix: String,
    },
    /// Copy the held layers' state at the current step in memory and write it
    /// under `prefix` in the background (training goes on meanwhile); the worker
    /// reports the finished write in a later [`Reply::Stepped`].
    Snapshot {
        /// The step the host expects the worker to be at.
        step: u64,
        /// The stage's key prefix in the checkpoint store.
        prefix: String,
    },
    /// A preemption notice: the worker will be killed after `grace_ms`.
    Notice {
        /// Milliseconds until the cloud reclaims the instance.
        grace_ms: u64,
    },
    /// Wait for every background checkpoint write and report them (the end of
    /// a run completes its pending periodic checkpoint instead of abandoning it).
    Flush,
    /// Take a place in a serving configuration (`parcae-host serve`).
    ServeConfigure(ServeConfiguration),
    /// Run one decode iteration of the replica: every worker of the replica gets the same
    /// sequences; the first stage embeds their tokens, hidden states flow stage to stage,
    /// the last stage's rank 0 answers with each request's next token.
    ServeStep {
        /// Unique per iteration and increasing (the key of its activations and reductions).
        iteration: u64,
        /// The requests of the replica's batch, each with the tokens it feeds.
        seqs: Vec<SeqStep>,
        /// Requests whose caches to drop first (finished or moved away).
        release: Vec<u64>,
    },
    /// Stop cleanly.
    Shutdown,
}

/// An urgent signal from the host, sent on its own control-kind uni stream
/// (tag [`Cancel::STREAM_TAG`]) so it overtakes the command in flight: the
/// cloud killed a participant, so give up that work at once instead of
/// waiting for peer timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cancel {
    /// Give up step attempt N.
    StepAttempt(u64),
    /// Give up reconfiguration epoch N.
    Epoch(u64),
}

impl Cancel {
    /// Tag of the control-kind uni stream that carries one [`Cancel`].
    pub const STREAM_TAG: u64 = 1;
}

/// What a worker tells the host unprompted, each on its own control-kind uni stream
/// (tag [`WorkerReport::STREAM_TAG`]) so it never waits behind the command in flight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum WorkerReport {
    /// The instance's cloud announced that it will reclaim the instance.
    Notice(CloudNotice),
}

impl WorkerReport {
    /// Tag of the control-kind uni stream that carries one [`WorkerReport`].
    pub const STREAM_TAG: u64 = 2;
}

/// A preemption notice read from the cloud's instance metadata service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CloudNotice {
    /// Which cloud said so ("aws", "gcp", "azure").
    pub cloud: String,
    /// What the cloud will do: AWS's `action` ("terminate", "stop", "hibernate"), GCP's
    /// "preempted" or maintenance event, Azure's event type ("Preempt").
    pub action: String,
    /// Milliseconds from the moment the worker sent this until the instance goes away (the
    /// cloud's deadline, or its documented notice when it names none).
    pub grace_ms: u64,
    /// When the worker first saw the notice, milliseconds since the Unix epoch (its clock).
    pub seen_unix_ms: u64,
    /// The metadata service's own words (its response body), for the event log.
    pub detail: String,
}

/// The outcome of one background checkpoint write ([`WorkerCommand::Snapshot`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackgroundWrite {
    /// The step the snapshot was taken at.
    pub step: u64,
    /// The stage's key prefix it was written under.
    pub prefix: String,
    /// Bytes written, or why the write failed.
    pub result: Result<u64, String>,
    /// Wall time of the write (it overlapped training).
    pub millis: f64,
}

/// A worker's answer to one [`WorkerCommand`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// Every send and fetch finished; the worker holds exactly `keep`.
    Reconfigured {
        /// State bytes sent to peers.
        bytes_sent: u64,
        /// State bytes received from peers.
        bytes_received: u64,
        /// Chunks resent after a checksum mismatch or a lost stream.
        resent_chunks: u64,
        /// Wall time of the whole reconfiguration.
        millis: f64,
    },
    /// `loss_sum` is the summed per-micro-batch mean loss on a last stage (None elsewhere).
    Stepped {
        /// The step computed.
        step: u64,
        /// Summed loss (last stage only).
        loss_sum: Option<f64>,
        /// Micro-batches this replica ran.
        micro_batches: usize,
        /// Wall time of forward plus backward.
        millis: f64,
        /// Background checkpoint writes that finished since the last report.
        written: Vec<BackgroundWrite>,
    },
    /// The update is applied; the worker is at `step + 1`.
    Committed {
        /// The step applied.
        step: u64,
    },
    /// The gradients are dropped; the worker is still at `step`.
    Aborted {
        /// The step discarded.
        step: u64,
    },
    /// The checkpoint is on disk (synchronous write).
    Checkpointed {
        /// The step written.
        step: u64,
        /// Bytes written.
        bytes: u64,
    },
    /// The snapshot is in memory; training may go on while it is written.
    SnapshotTaken {
        /// The step copied.
        step: u64,
        /// Time the in-memory copy took (training was blocked for it).
        millis: f64,
    },
    /// The notice is recorded.
    Noted,
    /// Every background write has ended; these are the ones not reported before.
    Flushed {
        /// The writes that ended since the last report.
        written: Vec<BackgroundWrite>,
    },
    /// The worker holds its serving shard and the caches it was told to.
    ServeConfigured {
        /// KV-cache bytes sent to peers.
        bytes_sent: u64,
        /// KV-cache bytes received (from peers and its own old cache).
        bytes_received: u64,
        /// Weight bytes it had to load (0 when its shard was unchanged).
        weight_bytes_loaded: u64,
        /// Wall time of the whole reconfiguration.
        millis: f64,
    },
    /// One iteration done.
    ServeStepped {
        /// The iteration.
        iteration: u64,
        /// Each request's next token (the last stage's rank 0 only; empty elsewhere).
        tokens: Vec<(u64, i64)>,
        /// Wall time of this worker's part.
        millis: f64,
    },
    /// The worker is shutting down cleanly.
    Bye,
    /// The command failed; the worker is still consistent at its last committed step.
    Failed {
        /// What went wrong, for the host's log and abort reasons.
        reason: String,
    },
}
