//! The receiving side: routes a connection's streams, reads each part's records into the
//! payload, verifies them and asks for failed chunks again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::io::{TransferErrorSource, try_join_all, with_stall};
use super::wire::{MAX_STREAMS, RECORD_HEADER_LEN, RecordHeader, StateBegin, StateReply, TRANSFER_ABORTED};
use super::{TransferError, TransferOptions, TransferStats};
use crate::frame::{self, FrameError, IncomingStream, StreamKind};

/// Largest `StateBegin` frame accepted: three integers in JSON take under 100 bytes.
const MAX_BEGIN_FRAME: u32 = 1024;

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

/// Receiver-side state of one part stream: quinn's streams in a transfer, any byte streams
/// in the decoder's tests.
pub(crate) struct Part<R, W> {
    /// Index of the part (0 carries the header, END markers and the replies).
    pub(crate) part: usize,
    /// The reply direction (part 0 only).
    pub(crate) send: Option<W>,
    /// The records from the sender.
    pub(crate) recv: R,
}

/// Outcome of reading one part's records.
struct PartResult {
    good: Vec<u32>,
    bad: Vec<u32>,
}

/// Reads records into `slots` (indexed by chunk; `Some` for the chunks this reader may fill)
/// until END (when `until_end`) or the end of the stream.
async fn read_records<R: AsyncRead + Unpin>(
    id: u64,
    recv: &mut R,
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
                    0 => break,
                    k => n += k,
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
        let header = RecordHeader::decode(&h);
        let (index, len) = (header.index, header.len);
        if header.is_end() {
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
        if header.verifies(slot) {
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
        let mut parts: Vec<Option<Part<quinn::RecvStream, quinn::SendStream>>> =
            (0..parts_n).map(|_| None).collect();
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
        let mut parts: Vec<Part<_, _>> = parts.into_iter().map(|p| p.expect("all parts")).collect();
        let result = receive_parts(id, &mut parts, opts, start).await;
        if result.is_ok()
            && let Some(send) = parts[0].send.as_mut()
        {
            let _ = send.finish();
        }
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

/// The receiving side's decoder: reads the header and every part's records, verifies each
/// chunk, asks for the failed ones again (on part 0's reply direction) and returns the payload
/// only once every chunk verified. Never allocates more than the header's `total_len`, and
/// only after [`StateBegin::check`] accepted it against `opts.max_state_bytes`.
pub(crate) async fn receive_parts<R, W>(
    id: u64,
    parts: &mut [Part<R, W>],
    opts: &TransferOptions,
    start: Instant,
) -> Result<(u64, Vec<u8>, TransferStats), TransferError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let stall = opts.stall_timeout;
    let protocol = |reason: String| TransferError::Protocol { id, reason };
    let n_parts = parts.len();
    let begin: StateBegin = with_stall(
        id,
        stall,
        "the transfer header",
        frame::recv_msg_limited(&mut parts[0].recv, MAX_BEGIN_FRAME),
    )
    .await?;
    begin.check(opts.max_state_bytes).map_err(protocol)?;
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
