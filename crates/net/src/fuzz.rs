//! Property tests of the decoders any peer holding a cluster certificate can reach: stream
//! headers and message frames here, migration state chunks in `transfer::fuzz`. Inputs are
//! valid streams that are then truncated, given oversized length prefixes, reordered,
//! duplicated or corrupted; the decoders must never panic, must return exactly what was
//! sent when nothing was damaged, and must never allocate more than their limit, whatever
//! length a frame announces. A counting global allocator (this test build only) records
//! the largest single allocation each test thread makes.
//!
//! `cargo test -p parcae-net fuzz -- --nocapture` prints how many frames each property fed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, ReadBuf};

use crate::frame::{self, FrameError, STREAM_HEADER_LEN, StreamHeader};

/// The system allocator, noting the largest request per thread.
struct PeakAllocator;

thread_local! {
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: allocations during thread teardown are not measured.
    let _ = PEAK.try_with(|peak| peak.set(peak.get().max(size)));
}

// SAFETY: every call forwards to `System` with the caller's arguments unchanged; the only
// addition is a thread-local counter that neither allocates nor panics.
unsafe impl GlobalAlloc for PeakAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` shares.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: `ptr` and `layout` come from this allocator, i.e. from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` and `layout` come from this allocator, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: PeakAllocator = PeakAllocator;

/// Runs `f` and returns its result with the largest single allocation it made on this thread.
pub(crate) fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    PEAK.with(|peak| peak.set(0));
    let result = f();
    (result, PEAK.with(Cell::get))
}

/// Frames fed to the decoders by a property, for the report.
pub(crate) struct FrameCount {
    name: &'static str,
    frames: AtomicU64,
}

impl FrameCount {
    pub(crate) const fn new(name: &'static str) -> Self {
        FrameCount { name, frames: AtomicU64::new(0) }
    }

    pub(crate) fn add(&self, frames: usize) {
        self.frames.fetch_add(frames as u64, Ordering::Relaxed);
    }

    /// Prints the total (visible with `--nocapture`) and returns it.
    pub(crate) fn report(&self) -> u64 {
        let frames = self.frames.load(Ordering::Relaxed);
        println!("{}: fuzzed {frames} frames", self.name);
        frames
    }
}

/// Cases per property: a few seconds for all of them in a debug build.
pub(crate) const CASES: u32 = 512;

/// A reader that hands out at most `step` bytes per read, as a network does.
pub(crate) struct Trickle<'a> {
    data: &'a [u8],
    step: usize,
}

impl<'a> Trickle<'a> {
    pub(crate) fn new(data: &'a [u8], step: usize) -> Self {
        Trickle { data, step: step.max(1) }
    }
}

impl AsyncRead for Trickle<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = self.step.min(buf.remaining()).min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        buf.put_slice(head);
        self.data = rest;
        Poll::Ready(Ok(()))
    }
}

/// Runs a future that does no real I/O to completion.
pub(crate) fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().build().expect("a current-thread runtime").block_on(future)
}

/// A control-message-like frame body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Msg {
    step: u64,
    what: String,
    data: Vec<u8>,
}

fn msg() -> impl Strategy<Value = Msg> {
    (
        any::<u64>(),
        prop::collection::vec(any::<char>(), 0..40).prop_map(String::from_iter),
        prop::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(step, what, data)| Msg { step, what, data })
}

/// What is done to a valid sequence of frames.
#[derive(Debug, Clone)]
enum Damage {
    None,
    /// Frames in another order (each still whole).
    Reorder(Vec<prop::sample::Index>),
    /// One frame sent twice.
    Duplicate(prop::sample::Index),
    /// The stream cut short.
    Truncate(prop::sample::Index),
    /// A frame's length prefix replaced.
    Oversize(prop::sample::Index, u32),
    /// Bytes overwritten anywhere.
    Corrupt(Vec<(prop::sample::Index, u8)>),
    /// Random bytes inserted.
    Splice(prop::sample::Index, Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        Just(Damage::None),
        prop::collection::vec(any::<prop::sample::Index>(), 1..8).prop_map(Damage::Reorder),
        any::<prop::sample::Index>().prop_map(Damage::Duplicate),
        any::<prop::sample::Index>().prop_map(Damage::Truncate),
        (any::<prop::sample::Index>(), any::<u32>()).prop_map(|(i, len)| Damage::Oversize(i, len)),
        (any::<prop::sample::Index>(), (MAX_TEST_FRAME - 64..MAX_TEST_FRAME + 64))
            .prop_map(|(i, len)| Damage::Oversize(i, len)),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6).prop_map(Damage::Corrupt),
        (any::<prop::sample::Index>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(i, bytes)| Damage::Splice(i, bytes)),
    ]
}

/// The decoder's limit in these tests (a small one, so oversized frames are common).
const MAX_TEST_FRAME: u32 = 4096;

fn encode(msg: &Msg) -> Vec<u8> {
    let mut out = Vec::new();
    block_on(frame::send_msg(&mut out, msg)).expect("a test message encodes");
    out
}

/// Decodes frames until the stream ends or fails: the messages, then the error if any.
fn decode_all(bytes: &[u8], step: usize) -> (Vec<Msg>, Option<FrameError>) {
    block_on(async {
        let mut reader = Trickle::new(bytes, step);
        let mut got = Vec::new();
        loop {
            match frame::recv_msg_limited::<_, Msg>(&mut reader, MAX_TEST_FRAME).await {
                Ok(m) => got.push(m),
                Err(FrameError::Closed) => return (got, None),
                Err(e) => return (got, Some(e)),
            }
        }
    })
}

/// Runs `property` on `CASES` inputs from `strategy` (a fixed seed per property, so a
/// failure reproduces), fails the test on the first counterexample, and reports how many
/// frames the property fed.
pub(crate) fn check<S: Strategy>(
    count: &FrameCount,
    strategy: S,
    property: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let config = ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = proptest::test_runner::TestRunner::new_with_rng(
        config,
        proptest::test_runner::TestRng::from_seed(
            proptest::test_runner::RngAlgorithm::ChaCha,
            &seed_for(count.name),
        ),
    );
    if let Err(failure) = runner.run(&strategy, property) {
        panic!("{}: {failure}", count.name);
    }
    assert!(count.report() >= u64::from(CASES), "{}: every case fed at least one frame", count.name);
}

/// A 32-byte seed derived from a property's name.
fn seed_for(name: &str) -> [u8; 32] {
    let mut seed = [0u8; 32];
    for (i, b) in name.bytes().enumerate() {
        seed[i % 32] ^= b;
    }
    seed
}

/// Sequences of message frames, damaged in every way of [`Damage`], read through a reader
/// that splits them at random places.
#[test]
fn message_frames_survive_any_damage() {
    static FRAMES: FrameCount = FrameCount::new("message frames");
    let input = (prop::collection::vec(msg(), 1..6), damage(), 1usize..200);
    check(&FRAMES, input, |(msgs, damage, step)| {
        let frames: Vec<Vec<u8>> = msgs.iter().map(encode).collect();
        let mut order: Vec<usize> = (0..frames.len()).collect();
        let mut stream: Vec<u8>;
        // What must come out, when the damage lets us know.
        let mut expected: Option<Vec<Msg>> = None;
        match &damage {
            Damage::None => {
                stream = frames.concat();
                expected = Some(msgs.clone());
            }
            Damage::Reorder(swaps) => {
                for (i, j) in swaps.iter().enumerate() {
                    let (a, b) = (i % order.len(), j.index(order.len()));
                    order.swap(a, b);
                }
                stream = order.iter().flat_map(|&i| frames[i].clone()).collect();
                expected = Some(order.iter().map(|&i| msgs[i].clone()).collect());
            }
            Damage::Duplicate(at) => {
                let i = at.index(frames.len());
                order.insert(i, i);
                stream = order.iter().flat_map(|&i| frames[i].clone()).collect();
                expected = Some(order.iter().map(|&i| msgs[i].clone()).collect());
            }
            Damage::Truncate(at) => {
                stream = frames.concat();
                stream.truncate(at.index(stream.len()));
            }
            Damage::Oversize(at, len) => {
                let i = at.index(frames.len());
                let start: usize = frames[..i].iter().map(Vec::len).sum();
                stream = frames.concat();
                stream[start..start + 4].copy_from_slice(&len.to_be_bytes());
            }
            Damage::Corrupt(bytes) => {
                stream = frames.concat();
                for (at, b) in bytes {
                    let i = at.index(stream.len());
                    stream[i] = *b;
                }
            }
            Damage::Splice(at, bytes) => {
                stream = frames.concat();
                let i = at.index(stream.len() + 1);
                stream.splice(i..i, bytes.iter().copied());
            }
        }
        FRAMES.add(order.len());
        let ((got, error), peak) = largest_allocation(|| decode_all(&stream, step));
        // Bounded memory: nothing larger than the limit, whatever a prefix announced.
        prop_assert!(peak <= MAX_TEST_FRAME as usize, "allocated {peak} bytes, limit {MAX_TEST_FRAME}");
        match &damage {
            Damage::Truncate(_) => {
                // A prefix of what was sent, then a clean end or a truncation error.
                prop_assert_eq!(&got[..], &msgs[..got.len()]);
                prop_assert!(matches!(error, None | Some(FrameError::Truncated { .. })), "{:?}", error);
            }
            Damage::Oversize(at, len) => {
                let i = at.index(frames.len());
                let n = i.min(got.len());
                prop_assert_eq!(&got[..n], &msgs[..n]);
                if *len > MAX_TEST_FRAME {
                    prop_assert_eq!(got.len(), i);
                    let too_large = matches!(
                        error,
                        Some(FrameError::TooLarge { len: l, max })
                            if l == u64::from(*len) && max == u64::from(MAX_TEST_FRAME)
                    );
                    prop_assert!(too_large, "{:?}", error);
                }
            }
            _ => {}
        }
        if let Some(expected) = expected {
            prop_assert_eq!(got, expected);
            prop_assert!(error.is_none(), "{:?}", error);
        }
        Ok(())
    });
}

/// A frame that announces up to the 16 MiB maximum and sends less (or garbage): the decoder
/// holds no more than what arrived (twice over, as the buffer doubles), not what was announced.
#[test]
fn announced_lengths_cost_only_what_arrives() {
    static FRAMES: FrameCount = FrameCount::new("frames announcing more than they send");
    let announced = prop_oneof![0..=frame::MAX_FRAME_LEN, frame::MAX_FRAME_LEN - 1000..=frame::MAX_FRAME_LEN];
    let input = (announced, prop::collection::vec(any::<u8>(), 0..20_000), 1usize..5000);
    check(&FRAMES, input, |(announced, body, step)| {
        let mut stream = announced.to_be_bytes().to_vec();
        stream.extend_from_slice(&body);
        FRAMES.add(1);
        let (result, peak) = largest_allocation(|| {
            block_on(frame::recv_msg::<_, serde_json::Value>(&mut Trickle::new(&stream, step)))
        });
        let bound = (frame::BODY_PREALLOCATION as usize).max(2 * body.len());
        prop_assert!(peak <= bound, "announced {announced}, sent {}: allocated {peak} bytes", body.len());
        if (announced as usize) > body.len() {
            prop_assert!(
                matches!(result, Err(FrameError::Truncated { what: "message body" })),
                "{:?}",
                result
            );
        }
        Ok(())
    });
}

/// Any 16 bytes: a header is accepted only when it is one we would write.
#[test]
fn stream_headers_decode_only_what_encodes() {
    static FRAMES: FrameCount = FrameCount::new("stream headers");
    check(&FRAMES, (any::<[u8; STREAM_HEADER_LEN]>(), any::<bool>()), |(mut bytes, valid)| {
        if valid {
            // Often a real magic and version, so the other fields are exercised too.
            bytes[..3].copy_from_slice(b"PN\x01");
        }
        FRAMES.add(1);
        match StreamHeader::decode(&bytes) {
            Ok(header) => {
                prop_assert!(header.parts >= 1 && header.part < header.parts);
                prop_assert_eq!(header.encode(), bytes);
            }
            Err(e) => prop_assert!(matches!(e, FrameError::BadHeader(_)), "{e}"),
        }
        // Cut short, the async reader says so rather than guessing.
        let cut = usize::from(bytes[15]) % STREAM_HEADER_LEN;
        let result = block_on(StreamHeader::read(&mut Trickle::new(&bytes[..cut], 3)));
        prop_assert!(
            matches!(result, Err(FrameError::Closed | FrameError::Truncated { .. })),
            "{:?}",
            result
        );
        Ok(())
    });
}

/// A header frame and a raw payload whose announced length is anything.
#[test]
fn payload_frames_respect_their_limit() {
    static FRAMES: FrameCount = FrameCount::new("payload frames");
    const MAX_PAYLOAD: u64 = 4096;
    let announced = prop_oneof![Just(None), any::<u64>().prop_map(Some), (0u64..10_000).prop_map(Some)];
    let input = (
        msg(),
        prop::collection::vec(any::<u8>(), 0..5000),
        announced,
        any::<prop::sample::Index>(),
        any::<bool>(),
        1usize..300,
    );
    check(&FRAMES, input, |(header, payload, announced, cut, truncate, step)| {
        let mut stream = Vec::new();
        block_on(frame::send_with_payload(&mut stream, &header, &payload)).expect("encodes");
        let at = encode(&header).len();
        if let Some(len) = announced {
            stream[at..at + 8].copy_from_slice(&len.to_be_bytes());
        }
        if truncate {
            stream.truncate(cut.index(stream.len() + 1));
        }
        FRAMES.add(2);
        let (result, peak) = largest_allocation(|| {
            block_on(frame::recv_with_payload::<_, Msg>(&mut Trickle::new(&stream, step), MAX_PAYLOAD))
        });
        prop_assert!(peak as u64 <= MAX_PAYLOAD, "allocated {peak} bytes, limit {MAX_PAYLOAD}");
        let len = announced.unwrap_or(payload.len() as u64);
        match result {
            Ok((h, p)) => {
                prop_assert_eq!(h, header);
                prop_assert!(len <= MAX_PAYLOAD && p.len() as u64 == len);
                prop_assert_eq!(&p[..], &payload[..p.len()]);
            }
            Err(FrameError::TooLarge { len: l, max }) => {
                prop_assert!(l == len && l > max && max == MAX_PAYLOAD)
            }
            Err(FrameError::Truncated { .. } | FrameError::Closed) => {
                prop_assert!(truncate || len > payload.len() as u64)
            }
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
        Ok(())
    });
}
