//! The worker's peer-to-peer plane: one QUIC endpoint that accepts other
//! workers' streams into the [`Mailbox`] and dials them (connections cached per
//! address) for activations, gradients, all-reduce buffers and layer state.
//!
//! Stream tags: activations and gradients carry `attempt << 20 | micro_batch`,
//! all-reduce buffers `attempt << 20 | replica`, state transfers
//! `epoch << 20 | layer`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use parcae_net::{
    Accepted, NetEndpoint, Routed, StreamHeader, StreamKind, StreamRouter, TransferOptions, TransferStats,
};
use tokio::sync::Mutex;
use tracing::{Instrument, debug, warn};

use super::mailbox::{Key, Mailbox};

/// Low bits of a stream tag that hold the micro-batch, replica or layer.
const INDEX_BITS: u32 = 20;
/// Largest tensor or buffer a peer may send in one stream.
const MAX_PAYLOAD: usize = 1 << 30;

/// Packs a generation (attempt or epoch) and an index into a stream tag.
pub fn tag(generation: u64, index: usize) -> u64 {
    (generation << INDEX_BITS) | (index as u64 & ((1 << INDEX_BITS) - 1))
}

fn untag(tag: u64) -> (u64, u32) {
    (tag >> INDEX_BITS, (tag & ((1 << INDEX_BITS) - 1)) as u32)
}

/// Why a peer exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum PeerLinkError {
    #[error("connecting to {name} at {addr}: {reason}")]
    Connect { name: String, addr: SocketAddr, reason: String },
    #[error("sending to {addr}: {reason}")]
    Send { addr: SocketAddr, reason: String },
}

/// Bytes a layer's encoded state may take beyond its parameters and moments (the format's
/// header, shapes and checksum: well under this).
const STATE_ENCODING_SLACK: u64 = 64 << 10;

/// The endpoint, its connection cache and the mailbox it fills.
pub struct PeerNet {
    endpoint: NetEndpoint,
    conns: Mutex<HashMap<SocketAddr, quinn::Connection>>,
    pub mailbox: Arc<Mailbox>,
    pub transfer: TransferOptions,
}

impl PeerNet {
    /// `PARCAE_DRILL_CORRUPT_FIRST_CHUNK=1` is a fault drill: every state
    /// transfer this worker sends corrupts its first chunk once, so the
    /// receiver's checksum check and the resend path run for real.
    ///
    /// A state transfer carries one layer of `spec`, so a peer announcing more than the
    /// largest layer's encoded state is refused before anything is allocated.
    pub fn new(endpoint: NetEndpoint, mailbox: Arc<Mailbox>, spec: &parcae_cluster::ModelSpec) -> Arc<Self> {
        let largest_layer = (0..spec.num_layers()).map(|l| spec.layer_state_bytes(l)).max().unwrap_or(0);
        let mut transfer = TransferOptions {
            max_state_bytes: largest_layer + STATE_ENCODING_SLACK,
            ..TransferOptions::default()
        };
        if std::env::var("PARCAE_DRILL_CORRUPT_FIRST_CHUNK").is_ok_and(|v| v == "1") {
            warn!("fault drill: the first chunk of every state transfer is sent corrupted once");
            transfer.corrupt_chunks_once = vec![0];
        }
        Arc::new(PeerNet { endpoint, conns: Mutex::new(HashMap::new()), mailbox, transfer })
    }

    pub fn endpoint(&self) -> &NetEndpoint {
        &self.endpoint
    }

    /// The cached connection to `addr`, dialled if missing or closed.
    pub async fn conn(&self, addr: SocketAddr, name: &str) -> Result<quinn::Connection, PeerLinkError> {
        let mut conns = self.conns.lock().await;
        if let Some(conn) = conns.get(&addr)
            && conn.close_reason().is_none()
        {
            return Ok(conn.clone());
        }
        let conn = self.endpoint.connect(addr, name).await.map_err(|e| PeerLinkError::Connect {
            name: name.to_string(),
            addr,
            reason: e.to_string(),
        })?;
        // Serve the streams this peer opens on our dialled connection too.
        tokio::spawn(serve_connection(conn.clone(), self.mailbox.clone(), self.transfer.clone()));
        conns.insert(addr, conn.clone());
        Ok(conn)
    }

    /// Sends one payload (a tensor or buffer) on its own stream.
    pub async fn send_payload(
        &self,
        addr: SocketAddr,
        name: &str,
        kind: StreamKind,
        tag: u64,
        payload: &[u8],
    ) -> Result<(), PeerLinkError> {
        let conn = self.conn(addr, name).await?;
        let fail = |reason: String| PeerLinkError::Send { addr, reason };
        let mut send = conn.open_uni().await.map_err(|e| fail(e.to_string()))?;
        StreamHeader::new(kind, tag).write(&mut send).await.map_err(|e| fail(e.to_string()))?;
        send.write_all(payload).await.map_err(|e| fail(e.to_string()))?;
        send.finish().map_err(|e| fail(e.to_string()))?;
        Ok(())
    }

    /// Sends a layer's state in checksummed chunks.
    pub async fn send_state(
        &self,
        addr: SocketAddr,
        name: &str,
        epoch: u64,
        layer: usize,
        bytes: Vec<u8>,
    ) -> Result<TransferStats, PeerLinkError> {
        let conn = self.conn(addr, name).await?;
        parcae_net::send_state(&conn, tag(epoch, layer), &bytes, &self.transfer)
            .await
            .map_err(|e| PeerLinkError::Send { addr, reason: e.to_string() })
    }
}

/// Accepts peers' connections for as long as the endpoint lives.
pub async fn accept_peers(net: Arc<PeerNet>) {
    while let Some(incoming) = net.endpoint.accept().await {
        let acceptor = net.endpoint.acceptor();
        let (mailbox, transfer) = (net.mailbox.clone(), net.transfer.clone());
        tokio::spawn(async move {
            // Workers serve members only: no join authority here.
            match acceptor.accept(incoming, None).await {
                Ok(Accepted::Peer { conn, name }) => {
                    debug!(%name, remote = %conn.remote_address(), "peer connected");
                    serve_connection(conn, mailbox, transfer).await;
                }
                Ok(Accepted::Joined { name }) => warn!(%name, "join request at a worker; ignored"),
                Err(e) => warn!(%e, "peer connection refused"),
            }
        });
    }
}

/// Routes every stream a peer opens on `conn` into the mailbox.
async fn serve_connection(conn: quinn::Connection, mailbox: Arc<Mailbox>, transfer: TransferOptions) {
    let span = parcae_net::conn_span(&conn);
    let router = StreamRouter::new(conn);
    async move {
        loop {
            match router.accept().await {
                Ok(Routed::Stream(mut stream)) => {
                    let mailbox = mailbox.clone();
                    tokio::spawn(async move {
                        let (generation, index) = untag(stream.header.tag);
                        let key = match stream.header.kind {
                            StreamKind::Activation => {
                                Key::Activation { attempt: generation, micro_batch: index }
                            }
                            StreamKind::Gradient => Key::Gradient { attempt: generation, micro_batch: index },
                            StreamKind::Collective => Key::Reduce { attempt: generation, replica: index },
                            other => {
                                warn!(?other, "unexpected stream from a peer; dropped");
                                return;
                            }
                        };
                        match stream.recv.read_to_end(MAX_PAYLOAD).await {
                            Ok(payload) => mailbox.put(key, payload),
                            Err(e) => warn!(?key, %e, "peer stream failed"),
                        }
                    });
                }
                Ok(Routed::State(incoming)) => {
                    let mailbox = mailbox.clone();
                    let transfer = transfer.clone();
                    tokio::spawn(async move {
                        match incoming.receive(&transfer).await {
                            Ok((id, bytes, stats)) => {
                                let (epoch, layer) = untag(id);
                                debug!(
                                    epoch,
                                    layer,
                                    bytes = stats.bytes,
                                    resent = stats.resent_chunks,
                                    "state received"
                                );
                                mailbox.put(Key::State { epoch, layer }, bytes);
                            }
                            Err(e) => warn!(%e, "state transfer failed"),
                        }
                    });
                }
                Err(e) => {
                    debug!(%e, "peer connection ended");
                    return;
                }
            }
        }
    }
    .instrument(span)
    .await
}
