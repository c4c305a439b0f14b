//! Control messages between `parcae-host` and a worker: the whole host-worker
//! protocol, typed, in one place.
//!
//! Each worker keeps one bidirectional control stream to the host. The host
//! sends a [`WorkerCommand`] and waits for the matching [`Reply`]; it never has two
//! commands in flight to one worker, so the exchange needs no request ids. Every
//! step is two-phase (compute, then commit or abort) so a peer that dies mid-step
//! leaves every survivor at the last committed step.

use std::net::SocketAddr;
use std::ops::Range;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::layout::{Layout, ModelSpec, Slot};
use crate::migration::WorkerId;

/// Version of this protocol; a worker of another version is refused at hello.
pub const PROTOCOL_VERSION: u32 = 1;

/// The worker's first message on its control stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol: u32,
    /// The id the host gave a locally started worker; None for a worker that joined.
    pub worker: Option<WorkerId>,
    /// Where peers reach this worker's QUIC endpoint.
    pub peer_addr: SocketAddr,
    /// What the worker trains on ("cpu", "cuda:0").
    pub device: String,
}

/// The host's answer to [`Hello`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    pub worker: WorkerId,
    pub spec: ModelSpec,
    /// How long a worker waits for a peer's activations, gradients or state
    /// before it fails the command (shorter than the host's own timeout).
    pub peer_timeout_ms: u64,
}

/// Where a peer in the current layout lives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerAddress {
    pub worker: WorkerId,
    /// The name on its cluster certificate (what a TLS client checks).
    pub name: String,
    pub slot: Slot,
    pub addr: SocketAddr,
}

/// A layer the worker must obtain before the next step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Fetch {
    /// Another worker sends it (the receiver waits for it).
    FromPeer { layer: usize, from: WorkerId },
    /// Read it from the checkpoint directory of the stage that saved it.
    FromCheckpoint { layer: usize, dir: PathBuf },
    /// Build it from the seed (a restart before the first checkpoint).
    Fresh { layer: usize },
}

/// A layer the worker must send to a peer (named apart from `std::marker::Send`,
/// which a plain `Send` would shadow wherever it is imported).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SendLayer {
    pub layer: usize,
    pub to: WorkerId,
    /// The receiver's certificate name.
    pub name: String,
    pub addr: SocketAddr,
}

/// Everything a worker needs to move to a new configuration: send, fetch, then
/// keep only `keep` and train from `step`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reconfiguration {
    /// Numbers reconfigurations (transfer ids, cancellation).
    pub epoch: u64,
    pub step: u64,
    pub layout: Layout,
    /// None: the worker is idle in this configuration (it holds nothing afterwards).
    pub slot: Option<Slot>,
    pub keep: Range<usize>,
    pub sends: Vec<SendLayer>,
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
    Step { step: u64, attempt: u64 },
    /// Apply the computed update of `step`.
    Commit { step: u64 },
    /// Discard the gradients of `step` (a peer failed).
    Abort { step: u64 },
    /// Write the held layers' state at the current step into `dir` (one
    /// directory per stage, so writers never share a manifest) before replying.
    Checkpoint { step: u64, dir: PathBuf },
    /// Copy the held layers' state at the current step in memory and write it
    /// into `dir` in the background (training goes on meanwhile); the worker
    /// reports the finished write in a later [`Reply::Stepped`].
    Snapshot { step: u64, dir: PathBuf },
    /// A preemption notice: the worker will be killed after `grace_ms`.
    Notice { grace_ms: u64 },
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

/// The outcome of one background checkpoint write ([`WorkerCommand::Snapshot`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackgroundWrite {
    pub step: u64,
    pub dir: PathBuf,
    /// Bytes written, or why the write failed.
    pub result: Result<u64, String>,
    /// Wall time of the write (it overlapped training).
    pub millis: f64,
}

/// A worker's answer to one [`WorkerCommand`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    Reconfigured {
        bytes_sent: u64,
        bytes_received: u64,
        resent_chunks: u64,
        millis: f64,
    },
    /// `loss_sum` is the summed per-micro-batch mean loss on a last stage (None elsewhere).
    Stepped {
        step: u64,
        loss_sum: Option<f64>,
        micro_batches: usize,
        millis: f64,
        /// Background checkpoint writes that finished since the last report.
        written: Vec<BackgroundWrite>,
    },
    Committed {
        step: u64,
    },
    Aborted {
        step: u64,
    },
    Checkpointed {
        step: u64,
        bytes: u64,
    },
    /// The snapshot is in memory; training may go on while it is written.
    SnapshotTaken {
        step: u64,
        millis: f64,
    },
    Noted,
    Bye,
    /// The command failed; the worker is still consistent at its last committed step.
    Failed {
        reason: String,
    },
}
