//! Property tests of the state-chunk decoder ([`super::receive::receive_parts`]) against a
//! sender whose first round is damaged: records reordered, duplicated, moved to another
//! stream, cut short, given oversized lengths or corrupted data, a header announcing any
//! size. The sender then answers resend requests honestly, over an in-memory stream, on a
//! paused clock (a stalled exchange times out at once).
//!
//! What must hold: no panic; an `Ok` payload is exactly what was sent (nothing unverified is
//! ever returned); damage that only reorders records or corrupts chunk data still ends in
//! the right payload (resends repair it); no allocation exceeds the receiver's
//! `max_state_bytes`, and an oversized header allocates nothing near what it announces.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::sample::Index;
use tokio::io::{AsyncRead, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};

use super::receive::{Part, receive_parts};
use super::wire::{MIN_CHUNK_SIZE, RECORD_HEADER_LEN, RecordHeader, StateBegin, StateReply, chunk_count};
use super::{TransferError, TransferOptions};
use crate::frame;
use crate::fuzz::{FrameCount, Trickle, check, largest_allocation};

/// The receiver's limit in these tests.
const MAX_STATE: u64 = 64 << 10;

/// Buffer of the in-memory stream between the sender and the receiver's part 0.
const DUPLEX_BYTES: usize = 16 << 10;

/// One record on the wire: its 12-byte header and its data.
#[derive(Debug, Clone)]
struct Record {
    header: [u8; RECORD_HEADER_LEN],
    data: Vec<u8>,
}

impl Record {
    fn chunk(index: usize, data: &[u8]) -> Self {
        Record { header: RecordHeader::for_chunk(index as u32, data).encode(), data: data.to_vec() }
    }
}

/// What is done to the sender's first round.
#[derive(Debug, Clone)]
enum Damage {
    None,
    /// Records of each stream in another order (each record whole).
    Shuffle(Vec<(Index, Index)>),
    /// Bytes of chunk data overwritten (headers intact): resends must repair them.
    CorruptData(Vec<(Index, Index, u8)>),
    /// Bytes overwritten anywhere in one stream, headers and frame included.
    CorruptStream(Index, Vec<(Index, u8)>),
    /// One stream cut short.
    Truncate(Index, Index),
    /// A record sent twice.
    Duplicate(Index, Index),
    /// A record moved to another stream.
    Move(Index, Index, Index),
    /// A record header announcing another length.
    RecordLength(Index, Index, u32),
    /// A different transfer header: any size, chunk size and count.
    Begin(StateBegin),
    /// Part 0 without its END record.
    NoEnd,
}

fn damage() -> impl Strategy<Value = Damage> {
    let index = any::<Index>;
    let begin = (
        prop_oneof![any::<u64>(), 0..2 * MAX_STATE, Just(MAX_STATE), Just(MAX_STATE + 1)],
        prop_oneof![any::<u64>(), Just(MIN_CHUNK_SIZE as u64), 0u64..3 * MIN_CHUNK_SIZE as u64],
        prop_oneof![any::<u64>(), 0u64..32],
    )
        .prop_map(|(total_len, chunk_size, chunks)| {
            // Often consistent, so the size checks are reached too.
            let chunks =
                if chunks % 2 == 0 && chunk_size > 0 { chunk_count(total_len, chunk_size) } else { chunks };
            StateBegin { total_len, chunk_size, chunks }
        });
    prop_oneof![
        Just(Damage::None),
        prop::collection::vec((index(), index()), 1..6).prop_map(Damage::Shuffle),
        prop::collection::vec((index(), index(), any::<u8>()), 1..6).prop_map(Damage::CorruptData),
        (index(), prop::collection::vec((index(), any::<u8>()), 1..6))
            .prop_map(|(p, b)| Damage::CorruptStream(p, b)),
        (index(), index()).prop_map(|(p, at)| Damage::Truncate(p, at)),
        (index(), index()).prop_map(|(p, r)| Damage::Duplicate(p, r)),
        (index(), index(), index()).prop_map(|(p, r, to)| Damage::Move(p, r, to)),
        (index(), index(), prop_oneof![any::<u32>(), 0u32..9000])
            .prop_map(|(p, r, l)| Damage::RecordLength(p, r, l)),
        begin.prop_map(Damage::Begin),
        Just(Damage::NoEnd),
    ]
}

/// The first round as an honest sender writes it: per stream, its records.
fn first_round(payload: &[u8], chunk_size: usize, parts: usize) -> Vec<Vec<Record>> {
    let mut streams = vec![Vec::new(); parts];
    for (i, data) in payload.chunks(chunk_size).enumerate() {
        streams[i % parts].push(Record::chunk(i, data));
    }
    streams
}

/// A stream's bytes: records (and on part 0 the header frame before them and END after).
fn serialise(records: &[Record], begin: Option<&StateBegin>, end: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(begin) = begin {
        crate::fuzz::block_on(frame::send_msg(&mut out, begin)).expect("a header encodes");
    }
    for r in records {
        out.extend_from_slice(&r.header);
        out.extend_from_slice(&r.data);
    }
    if end {
        out.extend_from_slice(&RecordHeader::END.encode());
    }
    out
}

/// The honest sender after its (damaged) first round on part 0: answers every resend
/// request with the right chunks and END, until the receiver is done or gone.
async fn answer_resends(
    mut replies: ReadHalf<DuplexStream>,
    mut send: WriteHalf<DuplexStream>,
    first: Vec<u8>,
    payload: &[u8],
    chunk_size: usize,
) {
    if send.write_all(&first).await.is_err() {
        return;
    }
    loop {
        match frame::recv_msg::<_, StateReply>(&mut replies).await {
            Ok(StateReply::Resend { chunks }) => {
                let records: Vec<Record> = chunks
                    .iter()
                    .filter_map(|&i| {
                        payload.chunks(chunk_size).nth(i as usize).map(|d| Record::chunk(i as usize, d))
                    })
                    .collect();
                if send.write_all(&serialise(&records, None, true)).await.is_err() {
                    return;
                }
            }
            Ok(StateReply::Done | StateReply::Abort { .. }) | Err(_) => return,
        }
    }
}

type BoxedRead<'a> = Box<dyn AsyncRead + Unpin + 'a>;

#[test]
fn state_chunks_survive_any_damage() {
    static FRAMES: FrameCount = FrameCount::new("state transfer frames");
    let input = (
        prop::collection::vec(any::<u8>(), 0..40_000),
        prop_oneof![Just(MIN_CHUNK_SIZE), Just(2 * MIN_CHUNK_SIZE), Just(5000usize)],
        1usize..=4,
        damage(),
        1usize..5000,
    );
    check(&FRAMES, input, |(payload, chunk_size, parts, damage, step)| {
        let n_chunks = chunk_count(payload.len() as u64, chunk_size as u64) as usize;
        let parts = parts.min(n_chunks.max(1));
        let mut begin = StateBegin {
            total_len: payload.len() as u64,
            chunk_size: chunk_size as u64,
            chunks: n_chunks as u64,
        };
        let mut streams = first_round(&payload, chunk_size, parts);
        let mut end = true;
        // Whether the receiver must still end with the payload.
        let mut repairable = false;
        let mut stream_damage: Option<(usize, Vec<(Index, u8)>)> = None;
        let mut truncate: Option<(usize, Index)> = None;
        let nonempty: Vec<usize> = (0..parts).filter(|&p| !streams[p].is_empty()).collect();
        let pick = |i: &Index| nonempty.get(i.index(nonempty.len().max(1))).copied();
        match &damage {
            Damage::None => repairable = true,
            Damage::Shuffle(swaps) => {
                for (p, r) in swaps {
                    if let Some(p) = pick(p) {
                        let len = streams[p].len();
                        streams[p].swap(r.index(len), 0);
                    }
                }
                repairable = true;
            }
            Damage::CorruptData(bytes) => {
                for (p, r, b) in bytes {
                    if let Some(p) = pick(p) {
                        let len = streams[p].len();
                        let record = &mut streams[p][r.index(len)];
                        if !record.data.is_empty() {
                            let at = usize::from(*b) % record.data.len();
                            record.data[at] ^= b | 1;
                        }
                    }
                }
                repairable = true;
            }
            Damage::CorruptStream(p, bytes) => stream_damage = Some((p.index(parts), bytes.clone())),
            Damage::Truncate(p, at) => truncate = Some((p.index(parts), *at)),
            Damage::Duplicate(p, r) => {
                if let Some(p) = pick(p) {
                    let at = r.index(streams[p].len());
                    let record = streams[p][at].clone();
                    streams[p].push(record);
                }
            }
            Damage::Move(p, r, to) => {
                if let Some(p) = pick(p) {
                    let at = r.index(streams[p].len());
                    let record = streams[p].remove(at);
                    streams[to.index(parts)].push(record);
                }
            }
            Damage::RecordLength(p, r, len) => {
                if let Some(p) = pick(p) {
                    let at = r.index(streams[p].len());
                    streams[p][at].header[4..8].copy_from_slice(&len.to_be_bytes());
                }
            }
            Damage::Begin(b) => begin = b.clone(),
            Damage::NoEnd => end = false,
        }
        let mut bytes: Vec<Vec<u8>> =
            (0..parts).map(|p| serialise(&streams[p], (p == 0).then_some(&begin), p == 0 && end)).collect();
        if let Some((p, damage)) = stream_damage {
            for (at, b) in damage {
                let i = at.index(bytes[p].len());
                bytes[p][i] = b;
            }
        }
        if let Some((p, at)) = truncate {
            let len = at.index(bytes[p].len());
            bytes[p].truncate(len);
        }
        FRAMES.add(2 + streams.iter().map(Vec::len).sum::<usize>());

        let opts = TransferOptions {
            max_state_bytes: MAX_STATE,
            stall_timeout: Duration::from_secs(30),
            max_resend_rounds: 3,
            ..TransferOptions::default()
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime");
        let (receiver_end, sender_end) = tokio::io::duplex(DUPLEX_BYTES);
        let first = bytes[0].clone();
        let (result, peak) = largest_allocation(|| {
            runtime.block_on(async {
                let (recv0, send0) = tokio::io::split(receiver_end);
                let (replies, send) = tokio::io::split(sender_end);
                let receive = async {
                    // Owned here, so the sender sees the streams close once the receiver is done.
                    let mut receiver: Vec<Part<BoxedRead<'_>, WriteHalf<DuplexStream>>> =
                        vec![Part { part: 0, send: Some(send0), recv: Box::new(recv0) }];
                    for (p, b) in bytes.iter().enumerate().skip(1) {
                        receiver.push(Part { part: p, send: None, recv: Box::new(Trickle::new(b, step)) });
                    }
                    receive_parts(7, &mut receiver, &opts, Instant::now()).await
                };
                let sender = answer_resends(replies, send, first, &payload, chunk_size);
                tokio::join!(receive, sender).0
            })
        });
        match &result {
            Ok((id, got, stats)) => {
                prop_assert_eq!(*id, 7);
                prop_assert!(got == &payload, "a payload other than the one sent came out");
                prop_assert_eq!(stats.bytes, payload.len() as u64);
            }
            Err(e) => {
                prop_assert!(!repairable, "{damage:?} must be repaired, got: {e}");
                let known = matches!(
                    e,
                    TransferError::Protocol { .. }
                        | TransferError::Frame { .. }
                        | TransferError::Stream { .. }
                        | TransferError::Stalled { .. }
                        | TransferError::ChecksumRetriesExhausted { .. }
                );
                prop_assert!(known, "unexpected error kind: {e}");
            }
        }
        prop_assert!(peak as u64 <= MAX_STATE, "allocated {peak} bytes, limit {MAX_STATE}");
        if let Damage::Begin(b) = &damage
            && b.total_len > MAX_STATE
        {
            let refused = matches!(&result, Err(TransferError::Protocol { reason, .. }) if reason.contains("exceeds the limit"));
            prop_assert!(refused, "{b:?}: {result:?}");
            // The in-memory stream's buffer is the largest allocation left.
            prop_assert!(peak <= 2 * DUPLEX_BYTES, "{b:?}: allocated {peak} bytes before refusing");
        }
        Ok(())
    });
}
