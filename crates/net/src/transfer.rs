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

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::frame::{self, FrameError, IncomingStream, StreamHeader, StreamKind};

/// Default chunk size: small enough that a resend is cheap, large enough to amortise headers.
pub const DEFAULT_CHUNK_SIZE: usize = 1 << 20;
/// Smallest accepted chunk size.
pub const MIN_CHUNK_SIZE: usize = 4 << 10;
/// Largest accepted chunk size.
pub const MAX_CHUNK_SIZE: usize = 64 << 20;
/// Most parallel streams per transfer.
pub const MAX_STREAMS: usize = 16;
/// Stream error code used when a transfer is aborted locally.
pub const TRANSFER_ABORTED: u32 = 1;

const END_INDEX: u32 = u32::MAX;
const RECORD_HEADER_LEN: usize = 12;

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

/// The first message on part 0.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StateBegin {
    total_len: u64,
    chunk_size: u64,
    chunks: u64,
}

/// The receiver's answer after each round.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum StateReply {
    Resend { chunks: Vec<u32> },
    Done,
    Abort { reason: String },
}

fn chunk_count(total: u64, chunk_size: u64) -> u64 {
    total.div_ceil(chunk_size)
}

/// Polls all futures on the current task, returning their outputs in order, or the first error
/// (dropping the rest). Keeps borrowed buffers usable without spawning.
async fn try_join_all<F, T, E>(futs: Vec<F>) -> Result<Vec<T>, E>
where
    F: Future<Output = Result<T, E>>,
{
    let mut futs: Vec<Option<Pin<Box<F>>>> = futs.into_iter().map(|f| Some(Box::pin(f))).collect();
    let mut out: Vec<Option<T>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, fut) in out.iter_mut().zip(futs.iter_mut()) {
            if let Some(f) = fut {
                match f.as_mut().poll(cx) {
                    Poll::Ready(Ok(v)) => {
                        *slot = Some(v);
                        *fut = None;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(Ok(out.iter_mut().map(|o| o.take().expect("done")).collect()))
        }
    })
    .await
}

async fn with_stall<T, E>(
    id: u64,
    after: Duration,
    what: &'static str,
    fut: impl Future<Output = Result<T, E>>,
) -> Result<T, TransferError>
where
    E: Into<TransferErrorSource>,
{
    match tokio::time::timeout(after, fut).await {
        Err(_) => Err(TransferError::Stalled { id, after, what }),
        Ok(Err(e)) => Err(e.into().into_error(id)),
        Ok(Ok(v)) => Ok(v),
    }
}

/// Internal: errors from the various quinn/frame calls, tagged with the id later.
enum TransferErrorSource {
    Io(std::io::Error),
    Frame(FrameError),
}

impl TransferErrorSource {
    fn into_error(self, id: u64) -> TransferError {
        match self {
            TransferErrorSource::Io(source) => TransferError::Stream { id, source },
            TransferErrorSource::Frame(source) => TransferError::Frame { id, source },
        }
    }
}

/// An I/O error whose message says why a connection was lost (quinn's says only "connection lost").
fn lost(kind: std::io::ErrorKind, e: &quinn::ConnectionError) -> std::io::Error {
    std::io::Error::new(kind, format!("connection lost: {e}"))
}

impl From<quinn::WriteError> for TransferErrorSource {
    fn from(e: quinn::WriteError) -> Self {
        TransferErrorSource::Io(match &e {
            quinn::WriteError::ConnectionLost(c) => lost(std::io::ErrorKind::ConnectionReset, c),
            _ => e.into(),
        })
    }
}

impl From<quinn::ReadExactError> for TransferErrorSource {
    fn from(e: quinn::ReadExactError) -> Self {
        match e {
            quinn::ReadExactError::FinishedEarly(n) => TransferErrorSource::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("stream ended {n} bytes into a record"),
            )),
            quinn::ReadExactError::ReadError(e) => e.into(),
        }
    }
}

impl From<quinn::ReadError> for TransferErrorSource {
    fn from(e: quinn::ReadError) -> Self {
        TransferErrorSource::Io(match &e {
            quinn::ReadError::ConnectionLost(c) => lost(std::io::ErrorKind::ConnectionReset, c),
            _ => e.into(),
        })
    }
}

impl From<FrameError> for TransferErrorSource {
    fn from(e: FrameError) -> Self {
        TransferErrorSource::Frame(e)
    }
}

impl From<quinn::ConnectionError> for TransferErrorSource {
    fn from(e: quinn::ConnectionError) -> Self {
        TransferErrorSource::Io(e.into())
    }
}

fn record_header(index: u32, len: u32, crc: u32) -> [u8; RECORD_HEADER_LEN] {
    let mut h = [0u8; RECORD_HEADER_LEN];
    h[..4].copy_from_slice(&index.to_be_bytes());
    h[4..8].copy_from_slice(&len.to_be_bytes());
    h[8..].copy_from_slice(&crc.to_be_bytes());
    h
}

/// Sender's view of the payload: borrowed (quinn copies each chunk into its send buffer) or
/// shared (chunks are handed to quinn as slices of the same allocation, without a copy).
struct Chunks<'a> {
    payload: &'a [u8],
    shared: Option<Bytes>,
    chunk_size: usize,
}

impl Chunks<'_> {
    fn range(&self, i: usize) -> std::ops::Range<usize> {
        let start = i * self.chunk_size;
        start..(start + self.chunk_size).min(self.payload.len())
    }

    fn get(&self, i: usize) -> &[u8] {
        &self.payload[self.range(i)]
    }
}

async fn write_records(
    id: u64,
    send: &mut quinn::SendStream,
    chunks: &Chunks<'_>,
    indices: impl Iterator<Item = usize>,
    corrupt: &HashSet<usize>,
    end: bool,
    stall: Duration,
) -> Result<(), TransferError> {
    for i in indices {
        let data = chunks.get(i);
        let crc = crc32fast::hash(data);
        let header = record_header(i as u32, data.len() as u32, crc);
        with_stall(id, stall, "writing a chunk", send.write_all(&header)).await?;
        if corrupt.contains(&i) && !data.is_empty() {
            warn!(transfer_id = id, chunk = i, "fault injection: corrupting chunk on its first send");
            let mut bad = data.to_vec();
            bad[0] ^= 0xff;
            with_stall(id, stall, "writing a chunk", send.write_all(&bad)).await?;
        } else if let Some(shared) = &chunks.shared {
            with_stall(id, stall, "writing a chunk", send.write_chunk(shared.slice(chunks.range(i)))).await?;
        } else {
            with_stall(id, stall, "writing a chunk", send.write_all(data)).await?;
        }
    }
    if end {
        with_stall(id, stall, "writing a chunk", send.write_all(&record_header(END_INDEX, 0, 0))).await?;
    }
    Ok(())
}

/// Sends `payload` as migration state `transfer_id` over `conn`, returning once the receiver has
/// verified every chunk. Ids must be unique among the transfers in flight on a connection.
pub async fn send_state(
    conn: &quinn::Connection,
    transfer_id: u64,
    payload: &[u8],
    opts: &TransferOptions,
) -> Result<TransferStats, TransferError> {
    send_chunks(conn, transfer_id, payload, None, opts).await
}

/// Like [`send_state`] for a payload already in shared memory (e.g. `Bytes::from(vec)`):
/// chunks go to quinn without being copied, which saves a copy of the whole state.
pub async fn send_state_bytes(
    conn: &quinn::Connection,
    transfer_id: u64,
    payload: Bytes,
    opts: &TransferOptions,
) -> Result<TransferStats, TransferError> {
    send_chunks(conn, transfer_id, &payload.clone(), Some(payload), opts).await
}

#[tracing::instrument(
    level = "info",
    skip_all,
    fields(transfer_id = transfer_id, bytes = payload.len(), remote = %conn.remote_address())
)]
async fn send_chunks(
    conn: &quinn::Connection,
    transfer_id: u64,
    payload: &[u8],
    shared: Option<Bytes>,
    opts: &TransferOptions,
) -> Result<TransferStats, TransferError> {
    let id = transfer_id;
    let start = Instant::now();
    let stall = opts.stall_timeout;
    let chunk_size = opts.chunk_size.clamp(MIN_CHUNK_SIZE, MAX_CHUNK_SIZE);
    let n_chunks = chunk_count(payload.len() as u64, chunk_size as u64);
    if n_chunks > u32::MAX as u64 - 1 {
        return Err(TransferError::Protocol {
            id,
            reason: format!("{} bytes is too many chunks", payload.len()),
        });
    }
    let n_chunks = n_chunks as usize;
    let parts = opts.streams.clamp(1, MAX_STREAMS).min(n_chunks.max(1));
    let chunks = Chunks { payload, shared, chunk_size };
    let corrupt: HashSet<usize> = opts.corrupt_chunks_once.iter().copied().collect();

    let header = |part: usize| StreamHeader {
        kind: StreamKind::State,
        tag: id,
        part: part as u16,
        parts: parts as u16,
    };
    let (mut control, mut replies) =
        with_stall(id, stall, "opening a stream", frame::open_bi(conn, header(0))).await?;
    let begin = StateBegin {
        total_len: payload.len() as u64,
        chunk_size: chunk_size as u64,
        chunks: n_chunks as u64,
    };
    with_stall(id, stall, "writing the header", frame::send_msg(&mut control, &begin)).await?;
    let mut others = Vec::with_capacity(parts - 1);
    for part in 1..parts {
        others.push(with_stall(id, stall, "opening a stream", frame::open_uni(conn, header(part))).await?);
    }

    // Round 1: every part sends its share of the chunks in parallel.
    {
        let mut writers = Vec::with_capacity(parts);
        let mut sends: Vec<&mut quinn::SendStream> = vec![&mut control];
        sends.extend(others.iter_mut());
        for (part, send) in sends.into_iter().enumerate() {
            let (chunks, corrupt) = (&chunks, &corrupt);
            writers.push(async move {
                write_records(id, send, chunks, (part..n_chunks).step_by(parts), corrupt, part == 0, stall)
                    .await?;
                if part > 0 {
                    let _ = send.finish();
                }
                Ok::<_, TransferError>(())
            });
        }
        try_join_all(writers).await?;
    }
    drop(others);

    let mut resent_chunks = 0;
    let mut rounds = 0;
    loop {
        let reply: StateReply =
            with_stall(id, stall, "waiting for the receiver", frame::recv_msg(&mut replies)).await?;
        match reply {
            StateReply::Done => break,
            StateReply::Abort { reason } => return Err(TransferError::Aborted { id, reason }),
            StateReply::Resend { chunks: bad } => {
                rounds += 1;
                if let Some(&i) = bad.iter().find(|&&i| i as usize >= n_chunks) {
                    return Err(TransferError::Protocol {
                        id,
                        reason: format!("resend of chunk {i} of {n_chunks}"),
                    });
                }
                if rounds > opts.max_resend_rounds {
                    control.reset(quinn::VarInt::from_u32(TRANSFER_ABORTED)).ok();
                    return Err(TransferError::ChecksumRetriesExhausted {
                        id,
                        chunks: bad,
                        rounds: rounds - 1,
                    });
                }
                warn!(transfer_id = id, chunks = ?bad, round = rounds, "receiver asked for chunks again");
                resent_chunks += bad.len();
                let clean = HashSet::new();
                write_records(
                    id,
                    &mut control,
                    &chunks,
                    bad.iter().map(|&i| i as usize),
                    &clean,
                    true,
                    stall,
                )
                .await?;
            }
        }
    }
    let _ = control.finish();
    let stats = TransferStats {
        transfer_id: id,
        bytes: payload.len() as u64,
        chunks: n_chunks,
        resent_chunks,
        resend_rounds: rounds,
        streams: parts,
        elapsed: start.elapsed(),
    };
    info!(
        chunks = n_chunks,
        resent = resent_chunks,
        streams = parts,
        ms = stats.elapsed.as_secs_f64() * 1e3,
        gbps = stats.gbytes_per_sec(),
        "state sent"
    );
    Ok(stats)
}

/// Registry of multi-stream transfers being assembled, keyed by transfer id.
type Pending = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<IncomingStream>>>>;

/// Accepts a connection's incoming streams, routing state-transfer parts to their transfer and
/// everything else to the caller (see the module docs).
#[derive(Debug, Clone)]
pub struct StreamRouter {
    conn: quinn::Connection,
    pending: Pending,
}

/// What [`StreamRouter::accept`] yields.
#[derive(Debug)]
pub enum Routed {
    /// A control, activation, gradient, collective (or join) stream, header already read.
    Stream(IncomingStream),
    /// A new state transfer; call [`IncomingState::receive`] (in its own task).
    State(IncomingState),
}

impl StreamRouter {
    /// A router for `conn`'s incoming streams. Use one router per connection.
    pub fn new(conn: quinn::Connection) -> Self {
        StreamRouter { conn, pending: Arc::default() }
    }

    /// The connection.
    pub fn connection(&self) -> &quinn::Connection {
        &self.conn
    }

    /// Accepts streams until one is for the caller; extra parts of a known transfer are handed
    /// to it. Errors when the connection fails or a stream's header is bad.
    pub async fn accept(&self) -> Result<Routed, FrameError> {
        loop {
            let stream = frame::accept_stream(&self.conn).await?;
            let header = stream.header;
            if header.kind != StreamKind::State {
                return Ok(Routed::Stream(stream));
            }
            let id = header.tag;
            let (tx, rx) = {
                let mut pending = self.pending.lock().expect("router lock");
                if let Some(tx) = pending.get(&id) {
                    if tx.send(stream).is_err() {
                        // Its receiver is gone (finished or failed): the stream is dropped.
                        pending.remove(&id);
                    }
                    continue;
                }
                if header.parts == 1 {
                    return Ok(Routed::State(IncomingState::new(id, stream, None, Weak::new())));
                }
                let (tx, rx) = mpsc::unbounded_channel();
                pending.insert(id, tx.clone());
                (tx, rx)
            };
            drop(tx);
            return Ok(Routed::State(IncomingState::new(
                id,
                stream,
                Some(rx),
                Arc::downgrade(&self.pending),
            )));
        }
    }
}

/// A state transfer that has started arriving; [`IncomingState::receive`] completes it.
#[derive(Debug)]
pub struct IncomingState {
    id: u64,
    first: Option<IncomingStream>,
    rest: Option<mpsc::UnboundedReceiver<IncomingStream>>,
    registry: Weak<Mutex<HashMap<u64, mpsc::UnboundedSender<IncomingStream>>>>,
}

impl Drop for IncomingState {
    fn drop(&mut self) {
        if let Some(registry) = self.registry.upgrade() {
            registry.lock().expect("router lock").remove(&self.id);
        }
    }
}

/// Receiver-side state of one part stream.
struct Part {
    part: usize,
    send: Option<quinn::SendStream>,
    recv: quinn::RecvStream,
}

/// Outcome of reading one part's records.
struct PartResult {
    good: Vec<u32>,
    bad: Vec<u32>,
}

/// Reads records into `slots` (indexed by chunk; `Some` for the chunks this reader may fill)
/// until END (when `until_end`) or the end of the stream.
async fn read_records(
    id: u64,
    recv: &mut quinn::RecvStream,
    mut slots: Vec<Option<&mut [u8]>>,
    until_end: bool,
    stall: Duration,
) -> Result<PartResult, TransferError> {
    let mut result = PartResult { good: Vec::new(), bad: Vec::new() };
    let protocol = |reason: String| TransferError::Protocol { id, reason };
    loop {
        let mut h = [0u8; RECORD_HEADER_LEN];
        let got = with_stall(id, stall, "reading a chunk", async {
            let mut n = 0;
            while n < h.len() {
                match recv.read(&mut h[n..]).await? {
                    None => break,
                    Some(k) => n += k,
                }
            }
            Ok::<_, TransferErrorSource>(n)
        })
        .await?;
        if got == 0 && !until_end {
            return Ok(result);
        }
        if got < RECORD_HEADER_LEN {
            return Err(protocol(format!("stream ended {got} bytes into a record header")));
        }
        let index = u32::from_be_bytes(h[..4].try_into().expect("4"));
        let len = u32::from_be_bytes(h[4..8].try_into().expect("4"));
        let crc = u32::from_be_bytes(h[8..].try_into().expect("4"));
        if index == END_INDEX {
            if until_end {
                return Ok(result);
            }
            return Err(protocol("END record on a secondary stream".into()));
        }
        let slot = slots
            .get_mut(index as usize)
            .and_then(Option::take)
            .ok_or_else(|| protocol(format!("unexpected or duplicate chunk {index}")))?;
        if slot.len() != len as usize {
            return Err(protocol(format!("chunk {index} has {len} bytes, expected {}", slot.len())));
        }
        with_stall(id, stall, "reading a chunk", recv.read_exact(slot)).await?;
        if crc32fast::hash(slot) == crc {
            result.good.push(index);
        } else {
            warn!(transfer_id = id, chunk = index, "chunk failed its checksum");
            result.bad.push(index);
        }
    }
}

impl IncomingState {
    fn new(
        id: u64,
        first: IncomingStream,
        rest: Option<mpsc::UnboundedReceiver<IncomingStream>>,
        registry: Weak<Mutex<HashMap<u64, mpsc::UnboundedSender<IncomingStream>>>>,
    ) -> Self {
        IncomingState { id, first: Some(first), rest, registry }
    }

    /// The transfer id.
    pub fn transfer_id(&self) -> u64 {
        self.id
    }

    /// Receives the whole state, verifying every chunk (and asking for bad ones again) before
    /// returning the bytes. The other parts arrive through the [`StreamRouter`], which must keep
    /// accepting meanwhile.
    #[tracing::instrument(level = "info", skip_all, fields(transfer_id = self.id))]
    pub async fn receive(
        mut self,
        opts: &TransferOptions,
    ) -> Result<(u64, Vec<u8>, TransferStats), TransferError> {
        let id = self.id;
        let start = Instant::now();
        let first = self.first.take().expect("first stream");
        let parts_n = first.header.parts as usize;
        let protocol = |reason: String| TransferError::Protocol { id, reason };
        if parts_n > MAX_STREAMS {
            return Err(protocol(format!("{parts_n} streams, at most {MAX_STREAMS} allowed")));
        }
        let mut parts: Vec<Option<Part>> = (0..parts_n).map(|_| None).collect();
        let mut add = |s: IncomingStream| -> Result<(), TransferError> {
            let p = s.header.part as usize;
            if s.header.parts as usize != parts_n || parts[p].is_some() {
                return Err(protocol(format!("stream part {p} of {} does not fit", s.header.parts)));
            }
            parts[p] = Some(Part { part: p, send: s.send, recv: s.recv });
            Ok(())
        };
        add(first)?;
        for _ in 1..parts_n {
            let rest = self.rest.as_mut().ok_or_else(|| protocol("parts without a router".into()))?;
            match tokio::time::timeout(opts.stall_timeout, rest.recv()).await {
                Err(_) => {
                    return Err(TransferError::Stalled {
                        id,
                        after: opts.stall_timeout,
                        what: "the other streams",
                    });
                }
                Ok(None) => return Err(protocol("the router stopped before all streams arrived".into())),
                Ok(Some(s)) => add(s)?,
            }
        }
        let mut parts: Vec<Part> = parts.into_iter().map(|p| p.expect("all parts")).collect();
        let result = receive_parts(id, &mut parts, opts, start).await;
        if let Err(e) = &result {
            let reason = e.to_string();
            warn!(transfer_id = id, error = %reason, "state transfer failed");
            for part in &mut parts {
                let _ = part.recv.stop(quinn::VarInt::from_u32(TRANSFER_ABORTED));
            }
            if let Some(send) = parts[0].send.as_mut() {
                // Best effort: tell the sender why before giving up.
                let abort = StateReply::Abort { reason };
                let _ = tokio::time::timeout(Duration::from_secs(1), frame::send_msg(send, &abort)).await;
                let _ = send.finish();
            }
        }
        result
    }
}

async fn receive_parts(
    id: u64,
    parts: &mut [Part],
    opts: &TransferOptions,
    start: Instant,
) -> Result<(u64, Vec<u8>, TransferStats), TransferError> {
    let stall = opts.stall_timeout;
    let protocol = |reason: String| TransferError::Protocol { id, reason };
    let n_parts = parts.len();
    let begin: StateBegin =
        with_stall(id, stall, "the transfer header", frame::recv_msg(&mut parts[0].recv)).await?;
    if begin.total_len > opts.max_state_bytes {
        return Err(protocol(format!(
            "state of {} bytes exceeds the limit of {}",
            begin.total_len, opts.max_state_bytes
        )));
    }
    if !(MIN_CHUNK_SIZE as u64..=MAX_CHUNK_SIZE as u64).contains(&begin.chunk_size)
        || begin.chunks != chunk_count(begin.total_len, begin.chunk_size)
    {
        return Err(protocol(format!("inconsistent header {begin:?}")));
    }
    let chunk_size = begin.chunk_size as usize;
    let n_chunks = begin.chunks as usize;
    let total = usize::try_from(begin.total_len).map_err(|_| protocol("state too large".into()))?;
    debug!(bytes = total, chunks = n_chunks, streams = n_parts, "receiving state");
    let mut buf = vec![0u8; total];
    let mut ok = vec![false; n_chunks];

    // Round 1: all parts in parallel, each into its own chunks of `buf`.
    {
        let mut slots: Vec<Vec<Option<&mut [u8]>>> =
            (0..n_parts).map(|_| (0..n_chunks).map(|_| None).collect()).collect();
        for (i, chunk) in buf.chunks_mut(chunk_size).enumerate() {
            slots[i % n_parts][i] = Some(chunk);
        }
        let readers = parts
            .iter_mut()
            .zip(slots)
            .map(|(part, slots)| read_records(id, &mut part.recv, slots, part.part == 0, stall));
        for result in try_join_all(readers.collect()).await? {
            for i in result.good {
                ok[i as usize] = true;
            }
        }
    }

    let control = &mut parts[0];
    let send = control.send.as_mut().ok_or_else(|| protocol("part 0 must be bidirectional".into()))?;
    let mut resent = 0;
    let mut rounds = 0;
    loop {
        let bad: Vec<u32> = ok.iter().enumerate().filter(|(_, ok)| !**ok).map(|(i, _)| i as u32).collect();
        if bad.is_empty() {
            break;
        }
        if rounds >= opts.max_resend_rounds {
            return Err(TransferError::ChecksumRetriesExhausted { id, chunks: bad, rounds });
        }
        rounds += 1;
        resent += bad.len();
        debug!(chunks = ?bad, round = rounds, "asking for chunks again");
        let reply = StateReply::Resend { chunks: bad };
        with_stall(id, stall, "asking for a resend", frame::send_msg(send, &reply)).await?;
        let mut slots: Vec<Option<&mut [u8]>> =
            buf.chunks_mut(chunk_size).enumerate().map(|(i, c)| if ok[i] { None } else { Some(c) }).collect();
        slots.resize_with(n_chunks, || None);
        let result = read_records(id, &mut control.recv, slots, true, stall).await?;
        for i in result.good {
            ok[i as usize] = true;
        }
    }
    with_stall(id, stall, "confirming", frame::send_msg(send, &StateReply::Done)).await?;
    let _ = send.finish();
    let stats = TransferStats {
        transfer_id: id,
        bytes: total as u64,
        chunks: n_chunks,
        resent_chunks: resent,
        resend_rounds: rounds,
        streams: n_parts,
        elapsed: start.elapsed(),
    };
    info!(
        chunks = n_chunks,
        resent,
        streams = n_parts,
        ms = stats.elapsed.as_secs_f64() * 1e3,
        gbps = stats.gbytes_per_sec(),
        "state received and verified"
    );
    Ok((id, buf, stats))
}

/// Receives the next state transfer on a connection that carries nothing else (other kinds of
/// streams are an error; use a [`StreamRouter`] where they may arrive).
pub async fn recv_state(
    conn: &quinn::Connection,
    opts: &TransferOptions,
) -> Result<(u64, Vec<u8>, TransferStats), TransferError> {
    let router = StreamRouter::new(conn.clone());
    let incoming = match router.accept().await.map_err(TransferError::Accept)? {
        Routed::State(s) => s,
        Routed::Stream(s) => return Err(TransferError::UnexpectedStream(s.header.kind)),
    };
    let id = incoming.transfer_id();
    // Keep accepting so the transfer's other parts reach it; anything else is an error.
    let routing = async {
        match router.accept().await {
            Ok(Routed::Stream(s)) => TransferError::UnexpectedStream(s.header.kind),
            Ok(Routed::State(s)) => TransferError::Protocol {
                id,
                reason: format!("a second transfer ({}) started during this one", s.transfer_id()),
            },
            Err(e) => TransferError::Accept(e),
        }
    };
    tokio::select! {
        biased;
        result = incoming.receive(opts) => result,
        e = routing => Err(e),
    }
}
