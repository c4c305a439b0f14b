//! The sending side: opens the parts, writes every chunk's record, and answers resend requests
//! until the receiver says `Done`.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tracing::{info, warn};

use super::io::{try_join_all, with_stall};
use super::wire::{
    MAX_CHUNK_SIZE, MAX_STREAMS, MIN_CHUNK_SIZE, RecordHeader, StateBegin, StateReply, TRANSFER_ABORTED,
    chunk_count, chunk_range, chunks_of_part,
};
use super::{TransferError, TransferOptions, TransferStats};
use crate::frame::{self, StreamHeader, StreamKind};

/// Sender's view of the payload: borrowed (quinn copies each chunk into its send buffer) or
/// shared (chunks are handed to quinn as slices of the same allocation, without a copy).
struct Chunks<'a> {
    payload: &'a [u8],
    shared: Option<Bytes>,
    chunk_size: usize,
}

impl Chunks<'_> {
    fn range(&self, i: usize) -> std::ops::Range<usize> {
        chunk_range(i, self.chunk_size, self.payload.len())
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
        let header = RecordHeader::for_chunk(i as u32, data).encode();
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
        with_stall(id, stall, "writing a chunk", send.write_all(&RecordHeader::END.encode())).await?;
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
                write_records(
                    id,
                    send,
                    chunks,
                    chunks_of_part(part, parts, n_chunks),
                    corrupt,
                    part == 0,
                    stall,
                )
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
