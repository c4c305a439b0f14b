//! Framing on QUIC streams: a stream header to route streams, and length-prefixed messages.
//!
//! # Wire format
//!
//! Every stream a peer opens starts with a fixed 16-byte [`StreamHeader`], so the receiver can
//! route it (control, activations, gradients, collectives, migration state, join) before reading
//! anything else. All integers are big-endian.
//!
//! ```text
//! stream header:  "PN" | version u8 (=1) | kind u8 | tag u64 | part u16 | parts u16
//! message frame:  len u32 | len bytes of JSON            (len <= MAX_FRAME_LEN)
//! payload frame:  message frame (header) | len u64 | len raw bytes
//! ```
//!
//! `kind` is [`StreamKind`]; `tag` is free for the kind (transfer id, micro-batch id, ...);
//! `part`/`parts` number the parallel streams of one logical transfer (0/1 for a single stream).
//! Control messages are JSON (small, debuggable); bulk bytes go raw after a JSON header
//! ([`send_with_payload`]) so tensors are never JSON-encoded. Every read is bounded and every
//! malformed input is an error, never a panic.

use std::io;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest JSON message frame accepted (16 MiB): control messages are small; bulk data goes in
/// payload frames or state transfers.
pub const MAX_FRAME_LEN: u32 = 16 << 20;

/// Size of the fixed stream header.
pub const STREAM_HEADER_LEN: usize = 16;
const MAGIC: &[u8; 2] = b"PN";
const VERSION: u8 = 1;

/// Errors reading or writing frames.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream or connection failed (including the peer vanishing).
    #[error("stream I/O failed: {}", error_chain(.0))]
    Io(#[from] io::Error),
    /// The stream ended cleanly where a frame was expected.
    #[error("stream ended before a frame")]
    Closed,
    /// The stream ended in the middle of a frame.
    #[error("stream ended in the middle of a frame ({what})")]
    Truncated {
        /// Which part of the frame was cut short.
        what: &'static str,
    },
    /// A length prefix over the allowed maximum (garbage or a hostile peer).
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// The announced length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// The message is not valid JSON for the expected type.
    #[error("malformed message: {0}")]
    Decode(serde_json::Error),
    /// The message could not be encoded.
    #[error("message could not be encoded: {0}")]
    Encode(serde_json::Error),
    /// A stream header that is not ours.
    #[error("bad stream header: {0}")]
    BadHeader(String),
    /// Nothing arrived within the allowed time.
    #[error("timed out after {0:?} waiting for the peer")]
    Timeout(Duration),
    /// The connection failed while accepting or opening a stream.
    #[error("connection failed: {0}")]
    Connection(#[from] quinn::ConnectionError),
}

/// An error and its causes, e.g. "connection lost: timed out" rather than "connection lost".
fn error_chain(e: &io::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.get_ref().and_then(|inner| inner.source());
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

impl FrameError {
    fn from_read(e: io::Error, what: &'static str) -> Self {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            FrameError::Truncated { what }
        } else {
            FrameError::Io(e)
        }
    }
}

/// What a stream carries; the first byte that matters when routing incoming streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[repr(u8)]
pub enum StreamKind {
    /// Control messages (host <-> worker, or peer coordination).
    Control = 0,
    /// Pipeline activations (forward pass) between stages.
    Activation = 1,
    /// Pipeline gradients (backward pass) between stages.
    Gradient = 2,
    /// Collective operations (gradient all-reduce within a stage's replicas).
    Collective = 3,
    /// Migration state (see [`crate::transfer`]).
    State = 4,
    /// The join protocol: the only thing a certificate-less client may do.
    Join = 5,
}

impl StreamKind {
    fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            0 => StreamKind::Control,
            1 => StreamKind::Activation,
            2 => StreamKind::Gradient,
            3 => StreamKind::Collective,
            4 => StreamKind::State,
            5 => StreamKind::Join,
            _ => return None,
        })
    }
}

/// The fixed header at the start of every stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamHeader {
    /// What the stream carries.
    pub kind: StreamKind,
    /// Free for the kind: transfer id, micro-batch id, ...
    pub tag: u64,
    /// Index of this stream among the parallel streams of one logical transfer.
    pub part: u16,
    /// Number of parallel streams of the logical transfer (at least 1).
    pub parts: u16,
}

impl StreamHeader {
    /// A header for a single-stream exchange.
    pub fn new(kind: StreamKind, tag: u64) -> Self {
        StreamHeader { kind, tag, part: 0, parts: 1 }
    }

    /// Encodes the header (16 bytes).
    pub fn encode(&self) -> [u8; STREAM_HEADER_LEN] {
        let mut b = [0u8; STREAM_HEADER_LEN];
        b[..2].copy_from_slice(MAGIC);
        b[2] = VERSION;
        b[3] = self.kind as u8;
        b[4..12].copy_from_slice(&self.tag.to_be_bytes());
        b[12..14].copy_from_slice(&self.part.to_be_bytes());
        b[14..16].copy_from_slice(&self.parts.to_be_bytes());
        b
    }

    /// Decodes and validates a header.
    pub fn decode(b: &[u8; STREAM_HEADER_LEN]) -> Result<Self, FrameError> {
        if &b[..2] != MAGIC {
            return Err(FrameError::BadHeader(format!("bad magic {:02x}{:02x}", b[0], b[1])));
        }
        if b[2] != VERSION {
            return Err(FrameError::BadHeader(format!("unsupported version {}", b[2])));
        }
        let kind = StreamKind::from_u8(b[3])
            .ok_or_else(|| FrameError::BadHeader(format!("unknown kind {}", b[3])))?;
        let tag = u64::from_be_bytes(b[4..12].try_into().expect("8 bytes"));
        let part = u16::from_be_bytes([b[12], b[13]]);
        let parts = u16::from_be_bytes([b[14], b[15]]);
        if parts == 0 || part >= parts {
            return Err(FrameError::BadHeader(format!("part {part} of {parts}")));
        }
        Ok(StreamHeader { kind, tag, part, parts })
    }

    /// Reads a header from the start of a stream.
    pub async fn read<R: AsyncRead + Unpin>(r: &mut R) -> Result<Self, FrameError> {
        let mut b = [0u8; STREAM_HEADER_LEN];
        match read_exact_or_eof(r, &mut b).await? {
            0 => Err(FrameError::Closed),
            STREAM_HEADER_LEN => Self::decode(&b),
            _ => Err(FrameError::Truncated { what: "stream header" }),
        }
    }

    /// Writes this header.
    pub async fn write<W: AsyncWrite + Unpin>(&self, w: &mut W) -> Result<(), FrameError> {
        w.write_all(&self.encode()).await?;
        Ok(())
    }
}

/// Reads until `buf` is full or the stream ends; returns how many bytes were read.
async fn read_exact_or_eof<R: AsyncRead + Unpin>(r: &mut R, buf: &mut [u8]) -> Result<usize, FrameError> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]).await? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Sends one JSON message frame.
pub async fn send_msg<W, T>(w: &mut W, msg: &T) -> Result<(), FrameError>
where
    W: AsyncWrite + Unpin,
    T: Serialize + ?Sized,
{
    let mut buf = vec![0u8; 4];
    serde_json::to_writer(&mut buf, msg).map_err(FrameError::Encode)?;
    let len = buf.len() - 4;
    if len > MAX_FRAME_LEN as usize {
        return Err(FrameError::TooLarge { len: len as u64, max: MAX_FRAME_LEN as u64 });
    }
    buf[..4].copy_from_slice(&(len as u32).to_be_bytes());
    w.write_all(&buf).await?;
    Ok(())
}

/// Receives one JSON message frame; [`FrameError::Closed`] if the stream ended cleanly first.
pub async fn recv_msg<R, T>(r: &mut R) -> Result<T, FrameError>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
    recv_msg_limited(r, MAX_FRAME_LEN).await
}

/// Like [`recv_msg`] but `Ok(None)` when the stream ended cleanly at a frame boundary.
pub async fn try_recv_msg<R, T>(r: &mut R) -> Result<Option<T>, FrameError>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
    match recv_msg(r).await {
        Ok(m) => Ok(Some(m)),
        Err(FrameError::Closed) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Receives one JSON message frame no longer than `max` bytes (for untrusted peers).
pub async fn recv_msg_limited<R, T>(r: &mut R, max: u32) -> Result<T, FrameError>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
    let mut len = [0u8; 4];
    match read_exact_or_eof(r, &mut len).await? {
        0 => return Err(FrameError::Closed),
        4 => {}
        _ => return Err(FrameError::Truncated { what: "length prefix" }),
    }
    let len = u32::from_be_bytes(len);
    if len > max.min(MAX_FRAME_LEN) {
        return Err(FrameError::TooLarge { len: len as u64, max: max.min(MAX_FRAME_LEN) as u64 });
    }
    let buf = read_body(r, len as u64, "message body").await?;
    serde_json::from_slice(&buf).map_err(FrameError::Decode)
}

/// Bytes allocated up front for a frame body; the rest grows as the bytes arrive, so a peer
/// that announces a large frame and sends less costs no more than what it sent.
pub(crate) const BODY_PREALLOCATION: u64 = 64 << 10;

/// Reads exactly `len` bytes (already checked against the caller's limit), allocating as
/// they arrive rather than for the announced length, and never more than `len` in all.
async fn read_body<R: AsyncRead + Unpin>(
    r: &mut R,
    len: u64,
    what: &'static str,
) -> Result<Vec<u8>, FrameError> {
    let len = usize::try_from(len).map_err(|_| FrameError::TooLarge { len, max: usize::MAX as u64 })?;
    let mut buf: Vec<u8> = Vec::with_capacity(len.min(BODY_PREALLOCATION as usize));
    while buf.len() < len {
        if buf.len() == buf.capacity() {
            // Double, but never past the announced length.
            let target = (buf.capacity() * 2).clamp(1, len);
            buf.reserve_exact(target - buf.len());
        }
        let filled = buf.len();
        let room = buf.capacity().min(len);
        buf.resize(room, 0);
        let read = r.read(&mut buf[filled..]).await.map_err(|e| FrameError::from_read(e, what));
        match read {
            Ok(0) => return Err(FrameError::Truncated { what }),
            Ok(n) => buf.truncate(filled + n),
            Err(e) => return Err(e),
        }
    }
    Ok(buf)
}

/// Sends a JSON header followed by raw bytes (tensors, activations) without JSON-encoding them.
pub async fn send_with_payload<W, T>(w: &mut W, header: &T, payload: &[u8]) -> Result<(), FrameError>
where
    W: AsyncWrite + Unpin,
    T: Serialize + ?Sized,
{
    send_msg(w, header).await?;
    w.write_all(&(payload.len() as u64).to_be_bytes()).await?;
    w.write_all(payload).await?;
    Ok(())
}

/// Receives what [`send_with_payload`] sent; the payload may be at most `max_payload` bytes.
pub async fn recv_with_payload<R, T>(r: &mut R, max_payload: u64) -> Result<(T, Vec<u8>), FrameError>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
    let header = recv_msg(r).await?;
    let mut len = [0u8; 8];
    r.read_exact(&mut len).await.map_err(|e| FrameError::from_read(e, "payload length"))?;
    let len = u64::from_be_bytes(len);
    if len > max_payload {
        return Err(FrameError::TooLarge { len, max: max_payload });
    }
    let payload = read_body(r, len, "payload").await?;
    Ok((header, payload))
}

/// A stream opened by the peer, with its header already read.
#[derive(Debug)]
pub struct IncomingStream {
    /// The routing header.
    pub header: StreamHeader,
    /// The reply direction; `None` for a unidirectional stream.
    pub send: Option<quinn::SendStream>,
    /// The data from the peer (positioned after the header).
    pub recv: quinn::RecvStream,
}

/// How long [`accept_stream`] waits for the header of a stream once it has been opened.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts the next stream (bidirectional or unidirectional) the peer opens and reads its header,
/// so a worker can route control, activation, gradient, collective and state streams.
///
/// Note: in QUIC a stream becomes visible when its first bytes arrive, so the header is normally
/// already there; a peer that opens a stream and stalls gets [`FrameError::Timeout`].
pub async fn accept_stream(conn: &quinn::Connection) -> Result<IncomingStream, FrameError> {
    // Both accept futures are cancel-safe: a stream is only taken from quinn when one completes.
    let (send, mut recv) = tokio::select! {
        bi = conn.accept_bi() => { let (s, r) = bi?; (Some(s), r) }
        uni = conn.accept_uni() => (None, uni?),
    };
    let header = tokio::time::timeout(HEADER_TIMEOUT, StreamHeader::read(&mut recv))
        .await
        .map_err(|_| FrameError::Timeout(HEADER_TIMEOUT))??;
    Ok(IncomingStream { header, send, recv })
}

/// Opens a bidirectional stream and writes its header.
pub async fn open_bi(
    conn: &quinn::Connection,
    header: StreamHeader,
) -> Result<(quinn::SendStream, quinn::RecvStream), FrameError> {
    let (mut send, recv) = conn.open_bi().await?;
    header.write(&mut send).await?;
    Ok((send, recv))
}

/// Opens a unidirectional stream and writes its header.
pub async fn open_uni(
    conn: &quinn::Connection,
    header: StreamHeader,
) -> Result<quinn::SendStream, FrameError> {
    let mut send = conn.open_uni().await?;
    header.write(&mut send).await?;
    Ok(send)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Msg {
        step: u64,
        what: String,
    }

    #[tokio::test]
    async fn messages_and_payloads_round_trip() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let msg = Msg { step: 7, what: "go".into() };
        send_msg(&mut a, &msg).await.unwrap();
        send_with_payload(&mut a, &msg, &[1, 2, 3]).await.unwrap();
        drop(a);
        assert_eq!(recv_msg::<_, Msg>(&mut b).await.unwrap(), msg);
        let (h, p) = recv_with_payload::<_, Msg>(&mut b, 10).await.unwrap();
        assert_eq!((h, p), (msg, vec![1, 2, 3]));
        assert!(try_recv_msg::<_, Msg>(&mut b).await.unwrap().is_none());
    }

    async fn parse(bytes: &[u8]) -> FrameError {
        let mut r = bytes;
        recv_msg::<_, Msg>(&mut r).await.unwrap_err()
    }

    #[tokio::test]
    async fn garbage_frames_are_errors() {
        assert!(matches!(parse(&[]).await, FrameError::Closed));
        assert!(matches!(parse(&[0, 0]).await, FrameError::Truncated { what: "length prefix" }));
        assert!(matches!(parse(&[0xff, 0xff, 0xff, 0xff]).await, FrameError::TooLarge { .. }));
        assert!(matches!(parse(&[0, 0, 0, 9, b'{']).await, FrameError::Truncated { what: "message body" }));
        assert!(matches!(parse(&[0, 0, 0, 3, b'{', b'x', b'}']).await, FrameError::Decode(_)));
        assert!(matches!(parse(b"\0\0\0\x02{}").await, FrameError::Decode(_)), "missing fields");
        let mut r: &[u8] = b"\0\0\0\x02{}\0\0\0\0\0\0\0\xff\x01";
        let err = recv_with_payload::<_, serde_json::Value>(&mut r, 1 << 20).await.unwrap_err();
        assert!(matches!(err, FrameError::Truncated { what: "payload" }), "{err}");
        let mut r: &[u8] = b"\0\0\0\x02{}\xff\0\0\0\0\0\0\0";
        let err = recv_with_payload::<_, serde_json::Value>(&mut r, 1 << 20).await.unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { .. }), "{err}");
    }

    #[tokio::test]
    async fn stream_headers_validate() {
        let h = StreamHeader { kind: StreamKind::State, tag: 42, part: 1, parts: 3 };
        assert_eq!(StreamHeader::decode(&h.encode()).unwrap(), h);
        let mut bad = h.encode();
        bad[0] = b'X';
        assert!(matches!(StreamHeader::decode(&bad), Err(FrameError::BadHeader(_))));
        let mut bad = h.encode();
        bad[3] = 99;
        assert!(StreamHeader::decode(&bad).unwrap_err().to_string().contains("unknown kind 99"));
        let mut bad = h.encode();
        bad[13] = 3;
        assert!(StreamHeader::decode(&bad).is_err());
        let mut short: &[u8] = &h.encode()[..5];
        assert!(matches!(StreamHeader::read(&mut short).await, Err(FrameError::Truncated { .. })));
    }
}
