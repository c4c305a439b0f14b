//! QUIC endpoints with mutual TLS against the cluster CA.
//!
//! One [`NetEndpoint`] is both a server and a client: workers accept connections from the host
//! and from peers, and dial peers themselves. Rules:
//!
//! - A client must present a certificate signed by the cluster CA. One from another CA fails the
//!   TLS handshake.
//! - Only an endpoint bound with [`ServerMode::AllowJoin`] (the host) lets a client *without* a
//!   certificate finish the handshake, and such a connection may only run the join protocol
//!   ([`mod@crate::join`]); anything else is refused by [`accept_incoming`]: the connection is closed
//!   with a [`CloseCode`] and a `warn!` log naming the remote address and the reason.
//! - Clients check that the server's certificate chains to the cluster CA and names the peer
//!   they meant to reach (the member name is a DNS SAN of its certificate).
//!
//! Transport tuning (see [`TransportOptions`]), measured on loopback where one stream with
//! quinn's defaults moved state at ~0.5 GB/s:
//!
//! - Loopback carries ~64 KiB datagrams: the initial MTU towards loopback peers is 65 487 bytes
//!   (the endpoint must also *advertise* that it accepts such datagrams, which quinn's default
//!   `max_udp_payload_size` of 1472 prevents, and the initial congestion window must hold more
//!   than one such datagram). Fewer, larger packets roughly halve the CPU cost per byte.
//! - GSO is used only where it works: quinn sends up to 10 datagrams per GSO call, and the
//!   kernel rejects calls over 64 KiB (quinn then drops the datagrams silently, which looks like
//!   loss and collapses the MTU), so GSO is off for datagrams over 6.5 KB.
//! - Flow-control windows (4 MiB per stream, 8 MiB per connection) are fitted to the UDP receive
//!   buffer actually granted: a window larger than the socket buffer lets bursts overflow it.
//! - Keep-alives (1 s) and an idle timeout (5 s) detect a dead peer within seconds.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{IdleTimeout, MtuDiscoveryConfig, TransportConfig, VarInt};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use tracing::{Instrument, debug, info, info_span, warn};

use crate::ca::{Fingerprint, Identity, cert_name};
use crate::join::JoinAuthority;

/// ALPN protocol id of Parcae's QUIC transport.
pub const ALPN: &[u8] = b"parcae/1";

/// The member name the host's identity carries; workers dial the host by it.
pub const HOST_NAME: &str = "parcae-host";

/// Largest UDP payload the kernel accepts in one GSO send (64 KiB minus IP/UDP headers).
const MAX_GSO_BATCH: u32 = 65_507;

/// Application error codes sent when closing a connection, so the peer knows why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum CloseCode {
    /// Normal end of a conversation.
    Normal = 0,
    /// A client without a certificate tried something other than joining.
    NotAuthenticated = 1,
    /// A join request with a wrong token.
    BadToken = 2,
    /// The peer broke the protocol (garbage, wrong stream kind, timeout).
    Protocol = 3,
    /// A join request with a valid token that could not be served (bad name or CSR).
    JoinFailed = 4,
    /// The endpoint is shutting down.
    Shutdown = 5,
}

impl CloseCode {
    /// The QUIC application error code.
    pub fn code(self) -> VarInt {
        VarInt::from_u32(self as u32)
    }

    /// The code a close frame carried, if it is one of ours.
    pub fn from_code(code: VarInt) -> Option<Self> {
        Some(match u64::from(code) {
            0 => CloseCode::Normal,
            1 => CloseCode::NotAuthenticated,
            2 => CloseCode::BadToken,
            3 => CloseCode::Protocol,
            4 => CloseCode::JoinFailed,
            5 => CloseCode::Shutdown,
            _ => return None,
        })
    }
}

/// Errors setting up endpoints and connections.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The TLS configuration could not be built (bad certificate or key).
    #[error("TLS configuration: {0}")]
    Tls(String),
    /// The UDP socket could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The reason.
        source: std::io::Error,
    },
    /// The connection could not be started (bad name, endpoint closed, ...).
    #[error("cannot connect to {addr} as {name:?}: {source}")]
    Connect {
        /// The address.
        addr: SocketAddr,
        /// The server name used.
        name: String,
        /// The reason.
        source: quinn::ConnectError,
    },
    /// The handshake or connection failed (includes TLS rejections and refusals).
    #[error("connection with {addr} failed: {source}")]
    Connection {
        /// The remote address.
        addr: SocketAddr,
        /// The reason.
        source: quinn::ConnectionError,
    },
    /// The handshake did not finish in time.
    #[error("handshake with {addr} timed out after {after:?}")]
    HandshakeTimeout {
        /// The remote address.
        addr: SocketAddr,
        /// The limit.
        after: Duration,
    },
    /// We refused the connection (it has been closed with `code`).
    #[error("refused connection from {addr}: {reason}")]
    Refused {
        /// The remote address.
        addr: SocketAddr,
        /// The close code sent.
        code: CloseCode,
        /// Why.
        reason: String,
    },
    /// A local I/O error.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// Transport tuning shared by both directions of every connection of an endpoint.
#[derive(Debug, Clone)]
pub struct TransportOptions {
    /// Keep-alive ping interval (must be well below `idle_timeout`).
    pub keep_alive: Duration,
    /// A peer silent for this long is considered dead: its connection fails (never a hang).
    pub idle_timeout: Duration,
    /// Limit for the TLS handshake.
    pub handshake_timeout: Duration,
    /// Per-stream receive window (bytes in flight per stream; at most `receive_window`).
    pub stream_receive_window: u64,
    /// Per-connection receive window across streams (reduced to fit the UDP receive buffer).
    pub receive_window: u64,
    /// Bytes buffered for sending per connection.
    pub send_window: u64,
    /// Initial (and fixed) UDP payload size towards loopback peers; loopback carries ~64 KiB
    /// datagrams, so large packets cut the per-packet cost. Clamped to [1200, 65487].
    pub loopback_mtu: u16,
    /// Upper bound for MTU discovery towards other peers: 1452 suits Ethernet; 8952 uses jumbo
    /// frames where the path has them (discovery falls back safely), at the price of GSO.
    pub mtu_upper_bound: u16,
    /// Use UDP generic segmentation offload where the OS supports it.
    pub gso: bool,
    /// Requested UDP socket buffer sizes (bytes; the OS may cap them). 0 keeps the OS default.
    pub socket_buffer: usize,
}

impl Default for TransportOptions {
    fn default() -> Self {
        TransportOptions {
            keep_alive: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(10),
            stream_receive_window: 4 << 20,
            receive_window: 8 << 20,
            send_window: 16 << 20,
            loopback_mtu: 65_487,
            mtu_upper_bound: 1452,
            gso: true,
            socket_buffer: 8 << 20,
        }
    }
}

impl TransportOptions {
    /// Shrinks the flow-control windows to what the UDP receive buffer can hold: a peer may
    /// send a whole window in one burst, and datagrams beyond the socket buffer are dropped,
    /// which costs far more (loss recovery, congestion back-off) than a smaller window.
    /// `granted` is the kernel-reported buffer (twice the usable payload space).
    pub fn fit_socket_buffer(mut self, granted: usize) -> Self {
        let usable = (granted / 2) as u64;
        if usable == 0 {
            return self;
        }
        if usable < self.receive_window {
            let msg = "UDP receive buffer is small (raise net.core.rmem_max): flow-control windows reduced";
            if usable < 1 << 20 {
                warn!(granted, requested = self.socket_buffer, window = usable, "{msg}");
            } else {
                debug!(granted, requested = self.socket_buffer, window = usable, "{msg}");
            }
            self.receive_window = usable;
        }
        self.stream_receive_window = self.stream_receive_window.min(self.receive_window);
        self
    }

    /// Builds quinn's transport config for a connection to a loopback or a remote peer.
    pub fn transport_config(&self, loopback: bool) -> TransportConfig {
        let mut t = TransportConfig::default();
        let idle = IdleTimeout::try_from(self.idle_timeout).unwrap_or_else(|_| VarInt::MAX.into());
        t.max_idle_timeout(Some(idle));
        t.keep_alive_interval(Some(self.keep_alive));
        t.stream_receive_window(VarInt::from_u64(self.stream_receive_window).unwrap_or(VarInt::MAX));
        t.receive_window(VarInt::from_u64(self.receive_window).unwrap_or(VarInt::MAX));
        t.send_window(self.send_window);
        // quinn batches up to 10 datagrams per GSO send, and the kernel refuses batches over
        // 64 KiB (quinn then drops them silently): GSO only pays with datagrams <= 6.5 KB.
        let largest = if loopback { self.loopback_mtu } else { self.mtu_upper_bound };
        t.enable_segmentation_offload(self.gso && (largest as u32) * 10 <= MAX_GSO_BATCH);
        if loopback {
            let mtu = self.loopback_mtu.clamp(1200, 65_487);
            t.initial_mtu(mtu);
            // The default initial congestion window (12 000 bytes) is smaller than one large
            // datagram, which would block the very first packet: scale it with the MTU.
            let mut cubic = quinn::congestion::CubicConfig::default();
            cubic.initial_window(10 * mtu as u64);
            t.congestion_controller_factory(Arc::new(cubic));
            // Nothing to discover, but keep discovery on so that the MTU climbs back after a
            // black-hole fallback to 1200.
            let mut discovery = MtuDiscoveryConfig::default();
            discovery.upper_bound(mtu);
            t.mtu_discovery_config(Some(discovery));
            t.initial_rtt(Duration::from_millis(10));
        } else {
            let mut mtu = MtuDiscoveryConfig::default();
            mtu.upper_bound(self.mtu_upper_bound.max(1200));
            t.mtu_discovery_config(Some(mtu));
        }
        t
    }
}

/// Whether certificate-less clients may finish the handshake (only to join).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerMode {
    /// Only cluster members (workers talking peer to peer).
    MembersOnly,
    /// Members, plus certificate-less clients that may only run the join protocol (the host).
    AllowJoin,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_err(e: impl std::fmt::Display) -> EndpointError {
    EndpointError::Tls(e.to_string())
}

fn roots(ca: &CertificateDer<'static>) -> Result<Arc<RootCertStore>, EndpointError> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.clone()).map_err(tls_err)?;
    Ok(Arc::new(roots))
}

/// The chain a member presents: its leaf(s), then the CA (so a joining worker can pin it).
fn presented_chain(identity: &Identity) -> Vec<CertificateDer<'static>> {
    let mut chain = identity.cert_chain().to_vec();
    chain.push(identity.ca_cert().clone());
    chain
}

/// Server-side TLS config for `identity`.
pub fn server_crypto(identity: &Identity, mode: ServerMode) -> Result<Arc<QuicServerConfig>, EndpointError> {
    let provider = provider();
    let mut verifier =
        WebPkiClientVerifier::builder_with_provider(roots(identity.ca_cert())?, provider.clone());
    if mode == ServerMode::AllowJoin {
        verifier = verifier.allow_unauthenticated();
    }
    let verifier = verifier.build().map_err(tls_err)?;
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls_err)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(presented_chain(identity), identity.private_key())
        .map_err(tls_err)?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(QuicServerConfig::try_from(tls).map_err(tls_err)?))
}

/// Client-side TLS config for a member: trusts the cluster CA, presents `identity`.
pub fn client_crypto(identity: &Identity) -> Result<Arc<QuicClientConfig>, EndpointError> {
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls_err)?
        .with_root_certificates(roots(identity.ca_cert())?)
        .with_client_auth_cert(identity.cert_chain().to_vec(), identity.private_key())
        .map_err(tls_err)?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(QuicClientConfig::try_from(tls).map_err(tls_err)?))
}

/// Client-side TLS config for joining: no client certificate; the server's CA is pinned by
/// the join token's fingerprint.
pub fn join_client_crypto(ca_fingerprint: Fingerprint) -> Result<Arc<QuicClientConfig>, EndpointError> {
    let provider = provider();
    let verifier = Arc::new(PinnedCaVerifier { fingerprint: ca_fingerprint, provider: provider.clone() });
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls_err)?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(QuicClientConfig::try_from(tls).map_err(tls_err)?))
}

/// Verifies a server whose CA we know only by fingerprint (a joining worker has no CA file yet):
/// the CA certificate must be in the presented chain with the pinned SHA-256; the leaf is then
/// verified against it as usual (name, validity, signature), as are the handshake signatures.
#[derive(Debug)]
struct PinnedCaVerifier {
    fingerprint: Fingerprint,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedCaVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ca =
            intermediates.iter().find(|c| Fingerprint::of_der(c) == self.fingerprint).ok_or_else(|| {
                rustls::Error::General(format!(
                    "the server's CA does not match the join token (expected CA sha256 {})",
                    self.fingerprint
                ))
            })?;
        let mut roots = RootCertStore::empty();
        roots.add(ca.clone().into_owned())?;
        let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            self.provider.clone(),
        )
        .build()
        .map_err(|e| rustls::Error::General(e.to_string()))?;
        inner.verify_server_cert(end_entity, &[], server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// The authenticated peer's member name (certificate CN, else DNS SAN); `None` for a peer
/// without a certificate (only possible on the join path).
pub fn peer_name(conn: &quinn::Connection) -> Option<String> {
    let identity = conn.peer_identity()?;
    let chain = identity.downcast::<Vec<CertificateDer<'static>>>().ok()?;
    cert_name(chain.first()?)
}

/// A tracing span for a connection (remote address and peer name), for the tasks serving it.
pub fn conn_span(conn: &quinn::Connection) -> tracing::Span {
    let peer = peer_name(conn).unwrap_or_else(|| "<no certificate>".into());
    info_span!("conn", remote = %conn.remote_address(), peer = %peer, id = conn.stable_id())
}

/// Closes `conn` with `code`, logs a warning naming the remote address and why, and returns the
/// matching error.
pub fn refuse(conn: &quinn::Connection, code: CloseCode, reason: &str) -> EndpointError {
    let addr = conn.remote_address();
    warn!(remote = %addr, ?code, reason, "refusing connection");
    conn.close(code.code(), reason.as_bytes());
    EndpointError::Refused { addr, code, reason: reason.to_string() }
}

/// What [`accept_incoming`] made of a connection attempt.
#[derive(Debug)]
pub enum Accepted {
    /// An authenticated cluster member.
    Peer {
        /// The connection.
        conn: quinn::Connection,
        /// The member's name from its certificate.
        name: String,
    },
    /// A certificate-less client that joined (it received its certificate; the connection
    /// has served its purpose and is closed).
    Joined {
        /// The new member's name.
        name: String,
    },
}

/// Per-connection server configs (loopback vs other), chosen when a connection arrives.
#[derive(Clone)]
struct ServerConfigs {
    loopback: Arc<quinn::ServerConfig>,
    remote: Arc<quinn::ServerConfig>,
}

/// A QUIC endpoint that serves and dials cluster members.
pub struct NetEndpoint {
    endpoint: quinn::Endpoint,
    server: ServerConfigs,
    client_loopback: quinn::ClientConfig,
    client_remote: quinn::ClientConfig,
    options: TransportOptions,
    name: String,
}

impl std::fmt::Debug for NetEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetEndpoint")
            .field("name", &self.name)
            .field("local_addr", &self.endpoint.local_addr().ok())
            .finish_non_exhaustive()
    }
}

/// Binds the UDP socket with the requested buffers; returns it and the receive buffer the OS
/// actually granted (as reported by the kernel, which doubles the request for bookkeeping).
fn udp_socket(addr: SocketAddr, buffer: usize) -> Result<(std::net::UdpSocket, usize), EndpointError> {
    let bind = |source| EndpointError::Bind { addr, source };
    let domain = if addr.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 };
    let socket =
        socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP)).map_err(bind)?;
    if buffer > 0 {
        // Best effort: the OS caps these (net.core.rmem_max / wmem_max).
        let _ = socket.set_recv_buffer_size(buffer);
        let _ = socket.set_send_buffer_size(buffer);
    }
    let granted = socket.recv_buffer_size().unwrap_or(0);
    socket.bind(&addr.into()).map_err(bind)?;
    socket.set_nonblocking(true).map_err(bind)?;
    Ok((socket.into(), granted))
}

fn client_config(
    crypto: Arc<QuicClientConfig>,
    options: &TransportOptions,
    loopback: bool,
) -> quinn::ClientConfig {
    let mut c = quinn::ClientConfig::new(crypto);
    c.transport_config(Arc::new(options.transport_config(loopback)));
    c
}

impl NetEndpoint {
    /// Binds a UDP socket at `addr` and serves/dials as `identity`.
    pub fn bind(
        addr: SocketAddr,
        identity: &Identity,
        mode: ServerMode,
        options: TransportOptions,
    ) -> Result<Self, EndpointError> {
        let (socket, granted) = udp_socket(addr, options.socket_buffer)?;
        let options = options.fit_socket_buffer(granted);
        let crypto = server_crypto(identity, mode)?;
        let server_config = |loopback| {
            let mut s = quinn::ServerConfig::with_crypto(crypto.clone());
            s.transport_config(Arc::new(options.transport_config(loopback)));
            Arc::new(s)
        };
        let server = ServerConfigs { loopback: server_config(true), remote: server_config(false) };
        let client = client_crypto(identity)?;
        let runtime = Arc::new(quinn::TokioRuntime);
        // Advertise that we can receive datagrams as large as we may send (quinn's default
        // caps peers at 1472 bytes, which would defeat the loopback MTU).
        let mut config = quinn::EndpointConfig::default();
        let max_payload = options.loopback_mtu.max(options.mtu_upper_bound).clamp(1200, 65_527);
        config.max_udp_payload_size(max_payload).map_err(tls_err)?;
        let endpoint = quinn::Endpoint::new(config, Some((*server.remote).clone()), socket, runtime)
            .map_err(|source| EndpointError::Bind { addr, source })?;
        info!(name = identity.name(), addr = %endpoint.local_addr()?, ?mode, "endpoint bound");
        Ok(NetEndpoint {
            endpoint,
            server,
            client_loopback: client_config(client.clone(), &options, true),
            client_remote: client_config(client, &options, false),
            options,
            name: identity.name().to_string(),
        })
    }

    /// The bound address (useful after binding port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, EndpointError> {
        Ok(self.endpoint.local_addr()?)
    }

    /// The transport options in use.
    pub fn options(&self) -> &TransportOptions {
        &self.options
    }

    /// The underlying quinn endpoint.
    pub fn quinn(&self) -> &quinn::Endpoint {
        &self.endpoint
    }

    /// Dials the member called `peer_name` at `addr`; TLS checks that it is that member.
    pub async fn connect(
        &self,
        addr: SocketAddr,
        peer_name: &str,
    ) -> Result<quinn::Connection, EndpointError> {
        let config =
            if addr.ip().is_loopback() { self.client_loopback.clone() } else { self.client_remote.clone() };
        let connecting = self
            .endpoint
            .connect_with(config, addr, peer_name)
            .map_err(|source| EndpointError::Connect { addr, name: peer_name.to_string(), source })?;
        let conn = tokio::time::timeout(self.options.handshake_timeout, connecting)
            .await
            .map_err(|_| EndpointError::HandshakeTimeout { addr, after: self.options.handshake_timeout })?
            .map_err(|source| EndpointError::Connection { addr, source })?;
        debug!(parent: &conn_span(&conn), "connected");
        Ok(conn)
    }

    /// Waits for the next connection attempt (`None` once the endpoint is closed). Pass it to
    /// [`NetEndpoint::accept_incoming`], typically in a task of its own.
    pub async fn accept(&self) -> Option<quinn::Incoming> {
        self.endpoint.accept().await
    }

    /// Completes an incoming connection: see [`accept_incoming`].
    pub async fn accept_incoming(
        &self,
        incoming: quinn::Incoming,
        join: Option<&JoinAuthority>,
    ) -> Result<Accepted, EndpointError> {
        accept_incoming_with(incoming, &self.server, self.options.handshake_timeout, join).await
    }

    /// A cloneable handle for accepting in spawned tasks.
    pub fn acceptor(&self) -> Acceptor {
        Acceptor { server: self.server.clone(), handshake_timeout: self.options.handshake_timeout }
    }

    /// Closes every connection with [`CloseCode::Shutdown`].
    pub fn close(&self) {
        self.endpoint.close(CloseCode::Shutdown.code(), b"shutting down");
    }

    /// Waits until all connections are closed and their close frames sent.
    pub async fn wait_idle(&self) {
        self.endpoint.wait_idle().await;
    }
}

/// A cheap, cloneable handle to complete incoming connections from spawned tasks.
#[derive(Clone)]
pub struct Acceptor {
    server: ServerConfigs,
    handshake_timeout: Duration,
}

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acceptor").finish_non_exhaustive()
    }
}

impl Acceptor {
    /// Completes an incoming connection: see [`accept_incoming`].
    pub async fn accept(
        &self,
        incoming: quinn::Incoming,
        join: Option<&JoinAuthority>,
    ) -> Result<Accepted, EndpointError> {
        accept_incoming_with(incoming, &self.server, self.handshake_timeout, join).await
    }
}

/// Completes a connection attempt: a member is returned as [`Accepted::Peer`]; a client without
/// a certificate is served the join protocol when `join` is given ([`Accepted::Joined`]) and is
/// otherwise refused (closed with [`CloseCode::NotAuthenticated`], logged with `warn!`).
pub async fn accept_incoming(
    endpoint: &NetEndpoint,
    incoming: quinn::Incoming,
    join: Option<&JoinAuthority>,
) -> Result<Accepted, EndpointError> {
    endpoint.accept_incoming(incoming, join).await
}

async fn accept_incoming_with(
    incoming: quinn::Incoming,
    server: &ServerConfigs,
    handshake_timeout: Duration,
    join: Option<&JoinAuthority>,
) -> Result<Accepted, EndpointError> {
    let addr = incoming.remote_address();
    let config = if addr.ip().is_loopback() { server.loopback.clone() } else { server.remote.clone() };
    let connecting =
        incoming.accept_with(config).map_err(|source| EndpointError::Connection { addr, source })?;
    let conn = match tokio::time::timeout(handshake_timeout, connecting).await {
        Err(_) => {
            warn!(remote = %addr, "handshake timed out");
            return Err(EndpointError::HandshakeTimeout { addr, after: handshake_timeout });
        }
        Ok(Err(source)) => {
            // TLS rejections (e.g. a certificate from another CA) land here.
            warn!(remote = %addr, error = %source, "handshake failed");
            return Err(EndpointError::Connection { addr, source });
        }
        Ok(Ok(conn)) => conn,
    };
    let span = conn_span(&conn);
    async {
        match peer_name(&conn) {
            Some(name) => {
                info!("member connected");
                Ok(Accepted::Peer { conn, name })
            }
            None => match join {
                Some(authority) => {
                    let name = authority.serve(&conn).await?;
                    Ok(Accepted::Joined { name })
                }
                None => Err(refuse(&conn, CloseCode::NotAuthenticated, "no client certificate")),
            },
        }
    }
    .instrument(span)
    .await
}

/// A client-only endpoint on an ephemeral port of the right address family (for joining).
pub(crate) fn client_only_endpoint(remote: SocketAddr) -> Result<quinn::Endpoint, EndpointError> {
    let bind: SocketAddr = match remote.ip() {
        IpAddr::V4(ip) if ip.is_loopback() => (Ipv4Addr::LOCALHOST, 0).into(),
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(ip) if ip.is_loopback() => (Ipv6Addr::LOCALHOST, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    quinn::Endpoint::client(bind).map_err(|source| EndpointError::Bind { addr: bind, source })
}

/// Builds a quinn client config from a TLS config and the options, for a given remote.
pub(crate) fn client_config_for(
    crypto: Arc<QuicClientConfig>,
    options: &TransportOptions,
    remote: SocketAddr,
) -> quinn::ClientConfig {
    client_config(crypto, options, remote.ip().is_loopback())
}
