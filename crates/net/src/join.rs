//! Admitting a new worker: the join protocol.
//!
//! A joining worker has no certificate yet. It connects to the host with TLS that pins the host's
//! CA by the join token's fingerprint, opens one bidirectional stream with a
//! [`StreamKind::Join`] header and sends a [`JoinRequest`]
//! (token secret, desired name, CSR). The host checks the secret in constant time, signs the
//! CSR for that name and answers with a [`JoinResponse`] (certificate + CA certificate); the
//! worker then closes the connection and reconnects with mutual TLS. The worker's private key
//! never leaves it. A bad token, anything that is not a join request, or a silent client gets the
//! connection closed with a [`CloseCode`] and a `warn!` on the host.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::ca::{ClusterCa, Identity, make_csr};
use crate::endpoint::{
    CloseCode, EndpointError, HOST_NAME, TransportOptions, client_config_for, client_only_endpoint,
    join_client_crypto, refuse,
};
use crate::frame::{self, FrameError, StreamHeader, StreamKind};
use crate::token::JoinToken;

/// Largest join request accepted from an unauthenticated client.
const MAX_JOIN_REQUEST: u32 = 64 << 10;

/// What a joining worker sends.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinRequest {
    /// The token's secret, hex.
    pub token_secret: String,
    /// The member name the worker asks for.
    pub name: String,
    /// A PEM CSR for the worker's own key.
    pub csr_pem: String,
}

/// What the host answers to a valid request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinResponse {
    /// The signed leaf certificate, PEM.
    pub cert_pem: String,
    /// The cluster CA certificate, PEM.
    pub ca_pem: String,
}

/// Errors of the join protocol.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// Setting up or completing the connection failed.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// The host refused the request and said why.
    #[error("the host refused to admit us ({code:?}): {reason}")]
    Refused {
        /// The close code the host sent.
        code: Option<CloseCode>,
        /// The host's reason.
        reason: String,
    },
    /// The exchange broke off.
    #[error("join exchange failed: {0}")]
    Frame(#[from] FrameError),
    /// Creating our key/CSR or reading the answer failed.
    #[error("join credentials: {0}")]
    Credentials(String),
}

/// The host side: holds the CA and the current token, and serves join requests.
#[derive(Debug)]
pub struct JoinAuthority {
    ca: Arc<ClusterCa>,
    token: JoinToken,
    timeout: Duration,
}

impl JoinAuthority {
    /// A join authority for `ca` admitting holders of `token`.
    pub fn new(ca: Arc<ClusterCa>, token: JoinToken) -> Self {
        JoinAuthority { ca, token, timeout: Duration::from_secs(10) }
    }

    /// The token to print for users.
    pub fn token(&self) -> &JoinToken {
        &self.token
    }

    /// The CA.
    pub fn ca(&self) -> &Arc<ClusterCa> {
        &self.ca
    }

    /// Serves the join protocol on a certificate-less connection; returns the new member's
    /// name. On any failure the connection is closed with a [`CloseCode`] and a `warn!` is
    /// logged naming the remote address and why.
    pub async fn serve(&self, conn: &quinn::Connection) -> Result<String, EndpointError> {
        let exchange = async {
            // A unidirectional stream (or anything but one bidi Join stream) is refused.
            let (mut send, mut recv) = tokio::select! {
                bi = conn.accept_bi() => bi.map_err(|e| (CloseCode::Protocol, format!("no join request: {e}")))?,
                _ = conn.accept_uni() => {
                    return Err((CloseCode::NotAuthenticated, "no client certificate (opened a unidirectional stream)".into()));
                }
            };
            let header = StreamHeader::read(&mut recv).await.map_err(|e| {
                (CloseCode::NotAuthenticated, format!("no client certificate and no join header: {e}"))
            })?;
            if header.kind != StreamKind::Join {
                return Err((
                    CloseCode::NotAuthenticated,
                    format!("no client certificate (opened a {:?} stream)", header.kind),
                ));
            }
            let request: JoinRequest = frame::recv_msg_limited(&mut recv, MAX_JOIN_REQUEST)
                .await
                .map_err(|e| (CloseCode::Protocol, format!("bad join request: {e}")))?;
            if !self.token.secret_matches(&request.token_secret) {
                return Err((
                    CloseCode::BadToken,
                    format!("bad join token (asked for name {:?})", request.name),
                ));
            }
            let cert = self
                .ca
                .sign_csr(&request.csr_pem, &request.name)
                .map_err(|e| (CloseCode::JoinFailed, format!("cannot admit {:?}: {e}", request.name)))?;
            let response = JoinResponse { cert_pem: pem(&cert), ca_pem: self.ca.cert_pem() };
            frame::send_msg(&mut send, &response)
                .await
                .map_err(|e| (CloseCode::Protocol, format!("cannot answer: {e}")))?;
            let _ = send.finish();
            Ok(request.name)
        };
        let addr = conn.remote_address();
        match tokio::time::timeout(self.timeout, exchange).await {
            Err(_) => Err(refuse(conn, CloseCode::Protocol, "join request timed out")),
            Ok(Err((code, reason))) => Err(refuse(conn, code, &reason)),
            Ok(Ok(name)) => {
                // The worker closes once it has the answer; wait for that (bounded) so the
                // answer is not cut off by our own close.
                let _ = tokio::time::timeout(self.timeout, conn.closed()).await;
                conn.close(CloseCode::Normal.code(), b"joined");
                info!(remote = %addr, name, "worker joined");
                Ok(name)
            }
        }
    }
}

fn pem(der: &CertificateDer<'_>) -> String {
    crate::ca::pem_of_der(der)
}

/// Joins the cluster whose host listens at `host_addr`, as `worker_name`, with `token`.
/// Returns the worker's new identity (its key was generated here and never sent).
pub async fn join(
    host_addr: SocketAddr,
    token: &JoinToken,
    worker_name: &str,
) -> Result<Identity, JoinError> {
    join_with(host_addr, token, worker_name, &TransportOptions::default()).await
}

/// [`join`] with explicit transport options.
pub async fn join_with(
    host_addr: SocketAddr,
    token: &JoinToken,
    worker_name: &str,
    options: &TransportOptions,
) -> Result<Identity, JoinError> {
    let csr = make_csr(worker_name).map_err(|e| JoinError::Credentials(e.to_string()))?;
    let crypto = join_client_crypto(token.ca_fingerprint())?;
    let endpoint = client_only_endpoint(host_addr)?;
    let config = client_config_for(crypto, options, host_addr);
    let connecting = endpoint
        .connect_with(config, host_addr, HOST_NAME)
        .map_err(|source| EndpointError::Connect { addr: host_addr, name: HOST_NAME.to_string(), source })?;
    let conn = tokio::time::timeout(options.handshake_timeout, connecting)
        .await
        .map_err(|_| EndpointError::HandshakeTimeout { addr: host_addr, after: options.handshake_timeout })?
        .map_err(|source| EndpointError::Connection { addr: host_addr, source })?;
    let result = async {
        let (mut send, mut recv) = frame::open_bi(&conn, StreamHeader::new(StreamKind::Join, 0)).await?;
        let request = JoinRequest {
            token_secret: token.secret_hex(),
            name: worker_name.to_string(),
            csr_pem: csr.csr_pem,
        };
        frame::send_msg(&mut send, &request).await?;
        let _ = send.finish();
        frame::recv_msg::<_, JoinResponse>(&mut recv).await
    }
    .await;
    let response = match result {
        Ok(r) => r,
        Err(e) => {
            // Prefer the host's stated reason over the stream error it caused.
            if let Some(quinn::ConnectionError::ApplicationClosed(close)) = conn.close_reason() {
                return Err(JoinError::Refused {
                    code: CloseCode::from_code(close.error_code),
                    reason: String::from_utf8_lossy(&close.reason).into_owned(),
                });
            }
            return Err(e.into());
        }
    };
    conn.close(CloseCode::Normal.code(), b"thanks");
    endpoint.wait_idle().await;
    let bad = |what: &str, e: String| JoinError::Credentials(format!("host sent a bad {what}: {e}"));
    let chain = CertificateDer::pem_slice_iter(response.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("certificate", e.to_string()))?;
    let ca =
        CertificateDer::from_pem_slice(response.ca_pem.as_bytes()).map_err(|e| bad("CA", e.to_string()))?;
    if crate::ca::Fingerprint::of_der(&ca) != token.ca_fingerprint() {
        return Err(bad("CA", "its fingerprint does not match the token".into()));
    }
    let identity = Identity::from_parts(chain, csr.key, ca).map_err(|e| bad("certificate", e.to_string()))?;
    if identity.name() != worker_name {
        warn!(asked = worker_name, got = identity.name(), "host issued a different name");
    }
    info!(name = identity.name(), host = %host_addr, "joined the cluster");
    Ok(identity)
}
