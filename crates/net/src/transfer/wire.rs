//! The state transfer's wire format, as pure functions of bytes: no streams, no async, so every
//! rule the two sides must agree on is unit-tested here.
//!
//! The layout itself is drawn in the module docs of [`super`] (`parcae_net::transfer`).

use std::ops::Range;

use serde::{Deserialize, Serialize};

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

/// The index that marks the END record (no chunk can have it: chunk counts stay below it).
const END_INDEX: u32 = u32::MAX;
/// Bytes of a record header: index, length and CRC, each a big-endian u32.
pub(super) const RECORD_HEADER_LEN: usize = 12;

/// The header in front of every chunk on the wire (and the END marker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RecordHeader {
    /// The chunk's index, or [`END_INDEX`].
    pub(super) index: u32,
    /// Bytes of chunk data that follow.
    pub(super) len: u32,
    /// CRC-32 of the correct chunk data.
    pub(super) crc: u32,
}

impl RecordHeader {
    /// Ends a round of records on part 0 (the receiver then replies).
    pub(super) const END: RecordHeader = RecordHeader { index: END_INDEX, len: 0, crc: 0 };

    /// The header for chunk `index` holding `data`.
    pub(super) fn for_chunk(index: u32, data: &[u8]) -> Self {
        RecordHeader { index, len: data.len() as u32, crc: crc32fast::hash(data) }
    }

    /// The bytes sent on the wire.
    pub(super) fn encode(&self) -> [u8; RECORD_HEADER_LEN] {
        let mut h = [0u8; RECORD_HEADER_LEN];
        h[..4].copy_from_slice(&self.index.to_be_bytes());
        h[4..8].copy_from_slice(&self.len.to_be_bytes());
        h[8..].copy_from_slice(&self.crc.to_be_bytes());
        h
    }

    /// The header those bytes encode (any 12 bytes decode; the receiver checks the fields).
    pub(super) fn decode(h: &[u8; RECORD_HEADER_LEN]) -> Self {
        let word = |at: usize| u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        RecordHeader { index: word(0), len: word(4), crc: word(8) }
    }

    /// Whether this is the END marker rather than a chunk.
    pub(super) fn is_end(&self) -> bool {
        self.index == END_INDEX
    }

    /// Whether `data` arrived as sent (its CRC matches).
    pub(super) fn verifies(&self, data: &[u8]) -> bool {
        crc32fast::hash(data) == self.crc
    }
}

/// The first message on part 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct StateBegin {
    /// Payload bytes.
    pub(super) total_len: u64,
    /// Bytes per chunk (the last may be shorter).
    pub(super) chunk_size: u64,
    /// Chunks in the payload, `ceil(total_len / chunk_size)`.
    pub(super) chunks: u64,
}

impl StateBegin {
    /// Why the receiver must refuse this header, if it must: larger than it accepts
    /// (`max_state_bytes`, it allocates the whole state up front), a chunk size outside
    /// [`MIN_CHUNK_SIZE`]..=[`MAX_CHUNK_SIZE`], or a chunk count that does not match.
    pub(super) fn check(&self, max_state_bytes: u64) -> Result<(), String> {
        if self.total_len > max_state_bytes {
            return Err(format!(
                "state of {} bytes exceeds the limit of {}",
                self.total_len, max_state_bytes
            ));
        }
        if !(MIN_CHUNK_SIZE as u64..=MAX_CHUNK_SIZE as u64).contains(&self.chunk_size)
            || self.chunks != chunk_count(self.total_len, self.chunk_size)
        {
            return Err(format!("inconsistent header {self:?}"));
        }
        Ok(())
    }
}

/// The receiver's answer after each round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum StateReply {
    /// These chunks failed their checksum: send them again, then END.
    Resend {
        /// Indices of the failed chunks.
        chunks: Vec<u32>,
    },
    /// Every chunk verified: the transfer is complete.
    Done,
    /// The receiver gave up.
    Abort {
        /// Why, for the sender's error.
        reason: String,
    },
}

/// Chunks of `chunk_size` needed for `total` bytes.
pub(super) fn chunk_count(total: u64, chunk_size: u64) -> u64 {
    total.div_ceil(chunk_size)
}

/// The bytes of chunk `index` in a payload of `total` bytes.
pub(super) fn chunk_range(index: usize, chunk_size: usize, total: usize) -> Range<usize> {
    let start = index * chunk_size;
    start..(start + chunk_size).min(total)
}

/// The chunks part `part` of `parts` sends in the first round (round-robin, so the streams
/// carry equal shares).
pub(super) fn chunks_of_part(part: usize, parts: usize, chunks: usize) -> impl Iterator<Item = usize> {
    (part..chunks).step_by(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_headers_are_big_endian_and_round_trip() {
        let h = RecordHeader { index: 0x0102_0304, len: 0x0506_0708, crc: 0x090a_0b0c };
        assert_eq!(h.encode(), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert_eq!(RecordHeader::decode(&h.encode()), h);
        assert!(!h.is_end());
        let end = RecordHeader::END.encode();
        assert_eq!(end, [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert!(RecordHeader::decode(&end).is_end());
    }

    #[test]
    fn a_chunk_header_verifies_its_data_and_nothing_else() {
        let data = b"123456789";
        let h = RecordHeader::for_chunk(7, data);
        // The CRC-32 (IEEE) check value of "123456789".
        assert_eq!((h.index, h.len, h.crc), (7, 9, 0xCBF4_3926));
        assert!(h.verifies(data));
        assert!(!h.verifies(b"123456780"));
        assert!(!h.verifies(b"12345678"));
    }

    #[test]
    fn chunks_tile_the_payload_and_parts_share_them_once() {
        assert_eq!(chunk_count(0, 4096), 0);
        assert_eq!(chunk_count(4096, 4096), 1);
        assert_eq!(chunk_count(4097, 4096), 2);
        let (total, size) = (10_000usize, 4096usize);
        let n = chunk_count(total as u64, size as u64) as usize;
        let ranges: Vec<_> = (0..n).map(|i| chunk_range(i, size, total)).collect();
        assert_eq!(ranges, vec![0..4096, 4096..8192, 8192..10_000]);
        let mut seen: Vec<usize> = (0..2).flat_map(|p| chunks_of_part(p, 2, n)).collect();
        assert_eq!(chunks_of_part(0, 2, n).collect::<Vec<_>>(), vec![0, 2]);
        seen.sort_unstable();
        assert_eq!(seen, (0..n).collect::<Vec<_>>());
    }

    #[test]
    fn the_receiver_refuses_oversized_or_inconsistent_headers() {
        let ok = StateBegin { total_len: 10_000, chunk_size: 4096, chunks: 3 };
        assert_eq!(ok.check(10_000), Ok(()));
        assert_eq!(ok.check(9_999), Err("state of 10000 bytes exceeds the limit of 9999".into()));
        let wrong_count = StateBegin { chunks: 2, ..ok.clone() };
        assert!(wrong_count.check(u64::MAX).unwrap_err().starts_with("inconsistent header"));
        let tiny_chunks = StateBegin { chunk_size: 1024, chunks: 10, ..ok.clone() };
        assert!(tiny_chunks.check(u64::MAX).is_err());
        let huge_chunks = StateBegin { chunk_size: MAX_CHUNK_SIZE as u64 + 1, chunks: 1, ..ok };
        assert!(huge_chunks.check(u64::MAX).is_err());
    }

    /// The JSON both sides exchange: pinned, since a change breaks workers of another build.
    #[test]
    fn control_messages_keep_their_json_shape() {
        let begin = StateBegin { total_len: 5, chunk_size: 4096, chunks: 1 };
        assert_eq!(serde_json::to_string(&begin).unwrap(), r#"{"total_len":5,"chunk_size":4096,"chunks":1}"#);
        let replies = [
            (StateReply::Resend { chunks: vec![1, 3] }, r#"{"Resend":{"chunks":[1,3]}}"#),
            (StateReply::Done, r#""Done""#),
            (StateReply::Abort { reason: "x".into() }, r#"{"Abort":{"reason":"x"}}"#),
        ];
        for (reply, json) in replies {
            assert_eq!(serde_json::to_string(&reply).unwrap(), json);
            assert_eq!(serde_json::from_str::<StateReply>(json).unwrap(), reply);
        }
    }
}
