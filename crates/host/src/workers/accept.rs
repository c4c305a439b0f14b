//! The host's listener: every connection a worker opens, checked and turned into an
//! [`Arrival`] for the fleet to admit.

use std::sync::Arc;
use std::time::Duration;

use parcae_cluster::protocol::Hello;
use parcae_net::{Accepted, JoinAuthority, NetEndpoint, StreamKind};
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::fleet::Arrival;

/// Accepts connections: workers with a cluster certificate open their control
/// stream and say hello; a certificate-less peer may only join with the token,
/// anything else is refused (and logged by the endpoint).
pub async fn accept_loop(
    endpoint: Arc<NetEndpoint>,
    authority: Arc<JoinAuthority>,
    arrivals: mpsc::Sender<Arrival>,
) {
    while let Some(incoming) = endpoint.accept().await {
        let acceptor = endpoint.acceptor();
        let (arrivals, authority) = (arrivals.clone(), authority.clone());
        tokio::spawn(async move {
            let remote = incoming.remote_address();
            let (conn, cert_name) = match acceptor.accept(incoming, Some(&authority)).await {
                Ok(Accepted::Peer { conn, name }) => (conn, name),
                Ok(Accepted::Joined { name }) => {
                    info!(%remote, %name, "a worker joined the cluster (it reconnects with its certificate)");
                    return;
                }
                Err(e) => {
                    warn!(%remote, %e, "connection refused");
                    return;
                }
            };
            let hello = async {
                let stream = parcae_net::accept_stream(&conn).await?;
                anyhow::ensure!(stream.header.kind == StreamKind::Control, "expected a control stream first");
                let send =
                    stream.send.ok_or_else(|| anyhow::anyhow!("control stream must be bidirectional"))?;
                let mut recv = stream.recv;
                let hello: Hello = parcae_net::recv_msg(&mut recv).await?;
                anyhow::Ok((send, recv, hello))
            };
            match tokio::time::timeout(Duration::from_secs(10), hello).await {
                Ok(Ok((send, recv, hello))) => {
                    let _ = arrivals.send(Arrival { hello, cert_name, conn, send, recv }).await;
                }
                Ok(Err(e)) => warn!(%remote, %cert_name, %e, "no hello; connection dropped"),
                Err(_) => warn!(%remote, %cert_name, "no hello within 10 s; connection dropped"),
            }
        });
    }
}
