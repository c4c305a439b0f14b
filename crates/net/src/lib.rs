//! QUIC transport for Parcae: how the host and workers find, trust and talk to each other.
//!
//! - [`ca`]: the per-cluster certificate authority the host creates at start, and member
//!   [`Identity`]s (certificate + key + trusted CA), saved as PEM files.
//! - [`token`]: [`JoinToken`]s that admit new workers (secret + CA fingerprint, one string).
//! - [`endpoint`]: QUIC endpoints with mutual TLS; certificate-less clients may only join.
//! - [`mod@join`]: the join protocol (host: [`JoinAuthority`]; worker: [`join()`]).
//! - [`frame`]: stream headers for routing and length-prefixed messages on QUIC streams.
//! - [`transfer`]: migration state in checksummed chunks over parallel streams, with resends.
//!
//! Every connection is one QUIC connection per pair of members; each exchange (a control
//! conversation, an activation, a state transfer) is a stream of its own, identified by a
//! small [`StreamHeader`] so a worker can route what arrives.

pub mod ca;
pub mod endpoint;
pub mod frame;
pub mod join;
pub mod token;
pub mod transfer;

#[cfg(test)]
mod fuzz;

pub use ca::{CaError, ClusterCa, Fingerprint, Identity};
pub use endpoint::{
    Accepted, Acceptor, CloseCode, EndpointError, HOST_NAME, NetEndpoint, ServerMode, TransportOptions,
    conn_span, peer_name,
};
pub use frame::{FrameError, IncomingStream, StreamHeader, StreamKind, accept_stream, recv_msg, send_msg};
pub use join::{JoinAuthority, JoinError, join};
pub use token::{JoinToken, TokenError};
pub use transfer::{
    IncomingState, Routed, StreamRouter, TransferError, TransferOptions, TransferStats, recv_state,
    send_state, send_state_bytes,
};
