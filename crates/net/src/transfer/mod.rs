//! Migration state transfers: chunked, checksummed, over a few parallel streams, with resends.
//!
//! A stage's state (parameters, optimizer moments, counters) is moved between workers as one
//! opaque byte string. It is cut into chunks (1 MiB by default), each sent with its CRC-32.
//! The receiver verifies every chunk before the assembled bytes are handed to the caller, and
//! asks again for the chunks that failed; after a bounded number of resend rounds the transfer
//! fails with a clear error. Nothing unverified is ever returned.
//!
//! # Wire format
//!
//! A transfer with id `T` over `n` parallel streams (all integers big-endian):
//!
//! ```text
//! part 0 (bidirectional, opened by the sender):
//!   -> stream header {kind: State, tag: T, part: 0, parts: n}
//!   -> frame StateBegin {total_len, chunk_size, chunks}          (JSON, see crate::frame)
//!   -> records of chunks i with i % n == 0, then END
//!   <- frame StateReply::Resend{chunks} | Done | Abort{reason}
//!   -> (after Resend) records of the requested chunks, then END; and again <- reply ...
//! part p = 1..n-1 (unidirectional, opened by the sender):
//!   -> stream header {kind: State, tag: T, part: p, parts: n}
//!   -> records of chunks i with i % n == p, then end of stream
//! record: index u32 | len u32 | crc32 u32 | len bytes
//! END:    index 0xFFFF_FFFF | len 0 | crc 0
//! ```
//!
//! The CRC is CRC-32 (IEEE, as in zlib/Ethernet; hardware-accelerated). Chunk `i` covers bytes
//! `[i * chunk_size, min((i + 1) * chunk_size, total_len))`. The sender's transfer is complete
//! only when it reads `Done`, i.e. after the receiver verified every chunk.
//!
//! # Receiving next to other traffic
//!
//! A worker also receives activations, gradients and collectives on the same connection. Use
//! a [`StreamRouter`]: its [`StreamRouter::accept`] yields every non-state stream with its header
//! for the caller to dispatch, yields each state transfer once as an [`IncomingState`], and
//! quietly attaches that transfer's other parallel streams to it. Run
//! [`IncomingState::receive`] in a task of its own while the router loop keeps accepting
//! (the parts arrive through the router). [`recv_state`] does both for a connection that carries
//! nothing else.
//!
//! # Code
//!
//! `wire.rs` holds the wire format as pure functions (record headers, the control messages,
//! chunk arithmetic), unit-tested without a network; `send.rs` and `receive.rs` drive it over
//! quinn streams, sharing the stall and join helpers in `io.rs`.

mod io;
mod receive;
mod send;
mod wire;

#[cfg(test)]
mod fuzz;

use std::time::Duration;

use crate::frame::{FrameError, StreamKind};

pub use receive::{IncomingState, Routed, StreamRouter, recv_state};
pub use send::{send_state, send_state_bytes};
pub use wire::{DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE, MAX_STREAMS, MIN_CHUNK_SIZE, TRANSFER_ABORTED};

/// How a transfer is carried out.
#[derive(Debug, Clone)]
pub struct TransferOptions {
    /// Bytes per checksummed chunk.
    pub chunk_size: usize,
    /// Parallel streams (sender side; the receiver follows the sender).
    pub streams: usize,
    /// Resend rounds allowed before giving up.
    pub max_resend_rounds: u32,
    /// Longest wait for any progress (a chunk written or read, a reply) before failing. Guards
    /// against a live but silent peer; a dead peer is caught sooner by the idle timeout.
    pub stall_timeout: Duration,
    /// Largest state the receiver accepts (it allocates this much up front).
    pub max_state_bytes: u64,
    /// Fault injection, for tests and fault drills only: the sender corrupts each listed chunk
    /// the first time it sends it (the checksum is of the correct data), so the receiver must
    /// detect it and request a resend. Leave empty in production.
    pub corrupt_chunks_once: Vec<usize>,
}

impl Default for TransferOptions {
    fn default() -> Self {
        TransferOptions {
            chunk_size: DEFAULT_CHUNK_SIZE,
            streams: 4,
            max_resend_rounds: 3,
            stall_timeout: Duration::from_secs(30),
            max_state_bytes: 64 << 30,
            corrupt_chunks_once: Vec::new(),
        }
    }
}

/// What a transfer did (both sides report it).
#[derive(Debug, Clone, PartialEq)]
pub struct TransferStats {
    /// The transfer id.
    pub transfer_id: u64,
    /// Payload bytes (not counting resends).
    pub bytes: u64,
    /// Chunks in the payload.
    pub chunks: usize,
    /// Chunks sent again after failing their checksum.
    pub resent_chunks: usize,
    /// Resend rounds needed (0 when everything arrived intact).
    pub resend_rounds: u32,
    /// Parallel streams used.
    pub streams: usize,
    /// Wall time from opening the streams (sender) or receiving the header (receiver) to the end.
    pub elapsed: Duration,
}

impl TransferStats {
    /// Payload throughput in GB/s (10^9 bytes per second).
    pub fn gbytes_per_sec(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64().max(1e-9) / 1e9
    }
}

/// Why a transfer failed.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// A stream or the connection failed (including the peer vanishing).
    #[error("transfer {id}: stream failed: {source}")]
    Stream {
        /// Transfer id.
        id: u64,
        /// The cause.
        source: std::io::Error,
    },
    /// A framed message failed.
    #[error("transfer {id}: {source}")]
    Frame {
        /// Transfer id.
        id: u64,
        /// The cause.
        source: FrameError,
    },
    /// The peer broke the protocol.
    #[error("transfer {id}: protocol violation: {reason}")]
    Protocol {
        /// Transfer id.
        id: u64,
        /// What was wrong.
        reason: String,
    },
    /// Some chunks kept failing their checksum.
    #[error("transfer {id}: chunks {chunks:?} still failed their checksum after {rounds} resend rounds")]
    ChecksumRetriesExhausted {
        /// Transfer id.
        id: u64,
        /// The chunks that never arrived intact.
        chunks: Vec<u32>,
        /// Resend rounds tried.
        rounds: u32,
    },
    /// No progress within the stall timeout.
    #[error("transfer {id}: no progress for {after:?} ({what})")]
    Stalled {
        /// Transfer id.
        id: u64,
        /// The limit.
        after: Duration,
        /// What we were waiting for.
        what: &'static str,
    },
    /// The peer gave up and said why.
    #[error("transfer {id}: aborted by the peer: {reason}")]
    Aborted {
        /// Transfer id.
        id: u64,
        /// The peer's reason.
        reason: String,
    },
    /// Accepting streams failed while waiting for a transfer.
    #[error("waiting for a state transfer: {0}")]
    Accept(FrameError),
    /// Another kind of stream arrived on a connection that should carry only state.
    #[error("unexpected {0:?} stream while waiting for a state transfer (use a StreamRouter)")]
    UnexpectedStream(StreamKind),
}
