//! End-to-end tests of the transport on 127.0.0.1 with real QUIC and real TLS.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use parcae_net::endpoint::join_client_crypto;
use parcae_net::frame::{self, StreamHeader, StreamKind};
use parcae_net::join::join_with;
use parcae_net::transfer::IncomingState;
use parcae_net::{
    Accepted, CloseCode, ClusterCa, EndpointError, HOST_NAME, Identity, JoinAuthority, JoinError, JoinToken,
    NetEndpoint, Routed, ServerMode, StreamRouter, TransferError, TransferOptions, TransportOptions,
    peer_name, recv_state, send_state,
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

const IDLE: Duration = Duration::from_secs(1);

fn options() -> TransportOptions {
    TransportOptions {
        idle_timeout: IDLE,
        keep_alive: Duration::from_millis(250),
        ..TransportOptions::default()
    }
}

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn bind(identity: &Identity, mode: ServerMode) -> NetEndpoint {
    NetEndpoint::bind(local(), identity, mode, options()).unwrap()
}

/// A serving endpoint whose accept results come out of a channel.
struct Server {
    endpoint: Arc<NetEndpoint>,
    addr: SocketAddr,
    accepted: mpsc::UnboundedReceiver<Result<Accepted, EndpointError>>,
}

fn serve(identity: &Identity, mode: ServerMode, join: Option<Arc<JoinAuthority>>) -> Server {
    let endpoint = Arc::new(bind(identity, mode));
    let addr = endpoint.local_addr().unwrap();
    let (tx, accepted) = mpsc::unbounded_channel();
    let ep = endpoint.clone();
    tokio::spawn(async move {
        while let Some(incoming) = ep.accept().await {
            let (acceptor, join, tx) = (ep.acceptor(), join.clone(), tx.clone());
            tokio::spawn(async move {
                let _ = tx.send(acceptor.accept(incoming, join.as_deref()).await);
            });
        }
    });
    Server { endpoint, addr, accepted }
}

impl Server {
    async fn next(&mut self) -> Result<Accepted, EndpointError> {
        tokio::time::timeout(Duration::from_secs(10), self.accepted.recv())
            .await
            .expect("accept result")
            .unwrap()
    }

    async fn next_peer(&mut self) -> (quinn::Connection, String) {
        match self.next().await {
            Ok(Accepted::Peer { conn, name }) => (conn, name),
            other => panic!("expected a peer, got {other:?}"),
        }
    }
}

struct Cluster {
    ca: Arc<ClusterCa>,
    host: Identity,
}

fn cluster() -> Cluster {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let ca = Arc::new(ClusterCa::generate("test").unwrap());
    let host = ca.issue(HOST_NAME, &["127.0.0.1", "localhost"]).unwrap();
    Cluster { ca, host }
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Ping {
    n: u64,
}

async fn ping(conn: &quinn::Connection, n: u64) -> u64 {
    let (mut send, mut recv) = frame::open_bi(conn, StreamHeader::new(StreamKind::Control, n)).await.unwrap();
    frame::send_msg(&mut send, &Ping { n }).await.unwrap();
    send.finish().unwrap();
    frame::recv_msg::<_, Ping>(&mut recv).await.unwrap().n
}

/// Answers control pings on `conn` with n + 1 until the connection ends.
fn answer_pings(conn: quinn::Connection) {
    tokio::spawn(async move {
        while let Ok(mut s) = frame::accept_stream(&conn).await {
            assert_eq!(s.header.kind, StreamKind::Control);
            let Ping { n } = frame::recv_msg(&mut s.recv).await.unwrap();
            let mut send = s.send.unwrap();
            frame::send_msg(&mut send, &Ping { n: n + 1 }).await.unwrap();
            send.finish().unwrap();
        }
    });
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    std::env::temp_dir().join(format!("parcae-net-{tag}-{}-{nanos}", std::process::id()))
}

fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_connection_and_peer_names() {
    let c = cluster();
    let mut host = serve(&c.host, ServerMode::AllowJoin, None);
    let w1 = c.ca.issue("worker-1", &[]).unwrap();
    let w2 = c.ca.issue("worker-2", &[]).unwrap();
    let mut ep1 = serve(&w1, ServerMode::MembersOnly, None);
    let ep2 = bind(&w2, ServerMode::MembersOnly);

    // Worker -> host, both sides see the other's certificate name.
    let conn = ep1.endpoint.connect(host.addr, HOST_NAME).await.unwrap();
    assert_eq!(peer_name(&conn).as_deref(), Some(HOST_NAME));
    let (host_side, name) = host.next_peer().await;
    assert_eq!(name, "worker-1");
    assert_eq!(peer_name(&host_side).as_deref(), Some("worker-1"));
    answer_pings(host_side);
    assert_eq!(ping(&conn, 41).await, 42);

    // Peer to peer: one endpoint is both server and client.
    let p2p = ep2.connect(ep1.addr, "worker-1").await.unwrap();
    assert_eq!(peer_name(&p2p).as_deref(), Some("worker-1"));
    let (w1_side, name) = ep1.next_peer().await;
    assert_eq!(name, "worker-2");
    answer_pings(w1_side);
    assert_eq!(ping(&p2p, 1).await, 2);

    // Dialling worker-1 under another member's name fails verification.
    let err = ep2.connect(ep1.addr, "worker-3").await.unwrap_err();
    assert!(matches!(err, EndpointError::Connection { .. }), "{err}");
}

/// Captures log output of the current thread (the test runs on a current-thread runtime).
#[derive(Clone, Default)]
struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn certless_connect(
    addr: SocketAddr,
    fingerprint: parcae_net::Fingerprint,
) -> (quinn::Endpoint, quinn::Connection) {
    let mut client = quinn::Endpoint::client(local()).unwrap();
    client.set_default_client_config(quinn::ClientConfig::new(join_client_crypto(fingerprint).unwrap()));
    let conn = client.connect(addr, HOST_NAME).unwrap().await.unwrap();
    (client, conn)
}

#[tokio::test]
async fn certless_client_may_only_join() {
    let logs = LogBuf::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let c = cluster();
    let token = JoinToken::generate(c.ca.fingerprint()).unwrap();
    let authority = Arc::new(JoinAuthority::new(c.ca.clone(), token));
    let mut host = serve(&c.host, ServerMode::AllowJoin, Some(authority));

    // A client without a certificate gets through TLS, but a control stream is refused.
    let (client, conn) = certless_connect(host.addr, c.ca.fingerprint()).await;
    assert_eq!(peer_name(&conn).as_deref(), Some(HOST_NAME));
    let client_addr = client.local_addr().unwrap();
    let (mut send, _recv) = frame::open_bi(&conn, StreamHeader::new(StreamKind::Control, 0)).await.unwrap();
    frame::send_msg(&mut send, &Ping { n: 1 }).await.unwrap();
    let err = conn.closed().await;
    match err {
        quinn::ConnectionError::ApplicationClosed(close) => {
            assert_eq!(CloseCode::from_code(close.error_code), Some(CloseCode::NotAuthenticated));
            assert!(String::from_utf8_lossy(&close.reason).contains("no client certificate"));
        }
        other => panic!("expected an application close, got {other}"),
    }
    let refused = host.next().await.unwrap_err();
    assert!(matches!(refused, EndpointError::Refused { code: CloseCode::NotAuthenticated, .. }), "{refused}");

    // So is a unidirectional stream.
    let (_client, conn) = certless_connect(host.addr, c.ca.fingerprint()).await;
    let mut uni = frame::open_uni(&conn, StreamHeader::new(StreamKind::Activation, 0)).await.unwrap();
    uni.write_all(b"tensor bytes").await.unwrap();
    assert!(matches!(conn.closed().await, quinn::ConnectionError::ApplicationClosed(_)));
    assert!(host.next().await.is_err());

    // The host keeps serving members.
    let w = c.ca.issue("worker-1", &[]).unwrap();
    let ep = bind(&w, ServerMode::MembersOnly);
    let conn = ep.connect(host.addr, HOST_NAME).await.unwrap();
    let (host_side, name) = host.next_peer().await;
    assert_eq!(name, "worker-1");
    answer_pings(host_side);
    assert_eq!(ping(&conn, 9).await, 10);

    // The refusals were logged with the remote address and the reason.
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let line = text.lines().find(|l| l.contains("refusing connection")).expect(&text);
    assert!(line.contains("WARN") && line.contains("no client certificate"), "{line}");
    assert!(line.contains(&format!("remote={client_addr}")), "{line}");
    assert!(text.contains("opened a unidirectional stream"), "{text}");

    // An endpoint that does not admit joins rejects a certificate-less client in the handshake.
    let mut members_only = serve(&w, ServerMode::MembersOnly, None);
    let mut client = quinn::Endpoint::client(local()).unwrap();
    client
        .set_default_client_config(quinn::ClientConfig::new(join_client_crypto(c.ca.fingerprint()).unwrap()));
    let res = client.connect(members_only.addr, "worker-1").unwrap().await;
    // TLS 1.3: the client may finish its side before the server's rejection arrives.
    if let Ok(conn) = res {
        conn.closed().await;
    }
    assert!(matches!(members_only.next().await, Err(EndpointError::Connection { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_from_another_ca_fails_handshake() {
    let c = cluster();
    let mut host = serve(&c.host, ServerMode::AllowJoin, None);
    let other = ClusterCa::generate("other").unwrap();
    let intruder = other.issue("worker-1", &[]).unwrap();
    let ep = bind(&intruder, ServerMode::MembersOnly);
    let key = match intruder.private_key() {
        rustls::pki_types::PrivateKeyDer::Pkcs8(k) => k,
        _ => unreachable!(),
    };
    // Such a certificate cannot even be assembled into an identity of our cluster.
    let err = Identity::from_parts(intruder.cert_chain().to_vec(), key.clone_key(), c.ca.cert_der().clone());
    assert!(err.unwrap_err().to_string().contains("not valid under the CA"));
    // A client that trusts our host's CA but presents the other CA's certificate: only the
    // host's check of the client certificate stands in its way.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(c.ca.cert_der().clone()).unwrap();
    let mut tls =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(intruder.cert_chain().to_vec(), key.into())
            .unwrap();
    tls.alpn_protocols = vec![parcae_net::endpoint::ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let mut ep_trusting = quinn::Endpoint::client(local()).unwrap();
    ep_trusting.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    let res = ep_trusting.connect(host.addr, HOST_NAME).unwrap().await;
    if let Ok(conn) = res {
        // TLS 1.3 lets the client finish first; the server's rejection closes it.
        let err = conn.closed().await;
        assert!(matches!(err, quinn::ConnectionError::ConnectionClosed(_)), "{err}");
    }
    assert!(matches!(host.next().await, Err(EndpointError::Connection { .. })));
    // And with its own CA it does not even accept the host.
    assert!(ep.connect(host.addr, HOST_NAME).await.is_err());
    let _ = host.next().await;

    // Members still get in.
    let w = c.ca.issue("worker-2", &[]).unwrap();
    let conn = bind(&w, ServerMode::MembersOnly).connect(host.addr, HOST_NAME).await.unwrap();
    let (host_side, name) = host.next_peer().await;
    assert_eq!(name, "worker-2");
    answer_pings(host_side);
    assert_eq!(ping(&conn, 0).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_token_is_refused() {
    let c = cluster();
    let token = JoinToken::generate(c.ca.fingerprint()).unwrap();
    let authority = Arc::new(JoinAuthority::new(c.ca.clone(), token.clone()));
    let mut host = serve(&c.host, ServerMode::AllowJoin, Some(authority));

    // Right CA, wrong secret.
    let wrong = JoinToken::generate(c.ca.fingerprint()).unwrap();
    let err = join_with(host.addr, &wrong, "worker-9", &options()).await.unwrap_err();
    match &err {
        JoinError::Refused { code, reason } => {
            assert_eq!(*code, Some(CloseCode::BadToken));
            assert!(reason.contains("bad join token"), "{reason}");
        }
        other => panic!("expected a refusal, got {other}"),
    }
    assert!(matches!(host.next().await, Err(EndpointError::Refused { code: CloseCode::BadToken, .. })));

    // A token for another cluster: the worker does not trust the host.
    let other = ClusterCa::generate("other").unwrap();
    let foreign = JoinToken::generate(other.fingerprint()).unwrap();
    let err = join_with(host.addr, &foreign, "worker-9", &options()).await.unwrap_err();
    assert!(err.to_string().contains("does not match the join token"), "{err}");
    let _ = host.next().await;

    // A valid token with an invalid name is refused with a reason.
    let err = join_with(host.addr, &token, "Worker_9", &options()).await.unwrap_err();
    assert!(err.to_string().contains("invalid name"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_then_mutual_tls() {
    let c = cluster();
    let token = JoinToken::generate(c.ca.fingerprint()).unwrap();
    let authority = Arc::new(JoinAuthority::new(c.ca.clone(), token.clone()));
    let mut host = serve(&c.host, ServerMode::AllowJoin, Some(authority));

    // The user pastes the printed token.
    let pasted: JoinToken = token.to_string().parse().unwrap();
    let identity = join_with(host.addr, &pasted, "worker-new", &options()).await.unwrap();
    assert_eq!(identity.name(), "worker-new");
    assert_eq!(identity.ca_fingerprint(), c.ca.fingerprint());
    match host.next().await {
        Ok(Accepted::Joined { name }) => assert_eq!(name, "worker-new"),
        other => panic!("expected a join, got {other:?}"),
    }

    // Saved and loaded back (key file private).
    let dir = temp_dir("join");
    identity.save(&dir).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join(parcae_net::ca::KEY_FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let loaded = Identity::load(&dir).unwrap();
    assert_eq!(loaded.name(), "worker-new");

    let ep = bind(&loaded, ServerMode::MembersOnly);
    let conn = ep.connect(host.addr, HOST_NAME).await.unwrap();
    let (host_side, name) = host.next_peer().await;
    assert_eq!(name, "worker-new");
    answer_pings(host_side);
    assert_eq!(ping(&conn, 5).await, 6);

    // Load errors name the file and the reason.
    std::fs::write(dir.join(parcae_net::ca::KEY_FILE), "not a key").unwrap();
    let err = Identity::load(&dir).unwrap_err().to_string();
    assert!(err.contains("key.pem") && err.contains("private key"), "{err}");
    identity.save(&dir).unwrap();
    std::fs::remove_file(dir.join(parcae_net::ca::CA_CERT_FILE)).unwrap();
    let err = Identity::load(&dir).unwrap_err().to_string();
    assert!(err.contains("ca.pem") && err.contains("No such file"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn ca_saves_and_loads() {
    let ca = ClusterCa::generate("saved").unwrap();
    let dir = temp_dir("ca");
    ca.save(&dir).unwrap();
    let loaded = ClusterCa::load(&dir).unwrap();
    assert_eq!(loaded.fingerprint(), ca.fingerprint());
    assert_eq!(loaded.cluster_name(), "saved");
    // The loaded CA issues identities that the original trusts.
    let id = loaded.issue("worker-1", &["10.0.0.7"]).unwrap();
    assert_eq!(id.ca_fingerprint(), ca.fingerprint());
    assert!(ca.issue("Not A Name", &[]).is_err());
    assert!(ca.issue("10.0.0.1", &[]).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A connected pair of members: (sender side, receiver side).
async fn pair() -> (Cluster, NetEndpoint, quinn::Connection, Server, quinn::Connection) {
    let c = cluster();
    let mut server = serve(&c.host, ServerMode::MembersOnly, None);
    let w = c.ca.issue("worker-1", &[]).unwrap();
    let client = bind(&w, ServerMode::MembersOnly);
    let conn = client.connect(server.addr, HOST_NAME).await.unwrap();
    let (server_conn, _) = server.next_peer().await;
    (c, client, conn, server, server_conn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_transfer_round_trips_byte_exact() {
    let (_c, _client, conn, _server, server_conn) = pair().await;
    let data = payload(5 * 1024 * 1024 + 12_345, 1);
    let opts = TransferOptions { streams: 4, ..TransferOptions::default() };
    let receiver = tokio::spawn({
        let (opts, server_conn) = (opts.clone(), server_conn.clone());
        async move { recv_state(&server_conn, &opts).await }
    });
    let sent = send_state(&conn, 77, &data, &opts).await.unwrap();
    let (id, bytes, stats) = receiver.await.unwrap().unwrap();
    assert_eq!(id, 77);
    assert!(bytes == data, "payload differs");
    assert_eq!((sent.chunks, sent.streams, sent.resent_chunks), (6, 4, 0));
    assert_eq!((stats.bytes, stats.chunks, stats.resent_chunks, stats.streams), (data.len() as u64, 6, 0, 4));

    // The zero-copy sender path.
    let shared = bytes::Bytes::from(data.clone());
    let (sent, received) =
        tokio::join!(parcae_net::send_state_bytes(&conn, 78, shared, &opts), recv_state(&server_conn, &opts));
    assert_eq!(sent.unwrap().bytes, data.len() as u64);
    assert!(received.unwrap().1 == data);

    // Empty and single-stream transfers, in the other direction.
    for (id, len, streams) in [(1u64, 0usize, 4usize), (2, 300_000, 1), (3, 300_000, 16)] {
        let data = payload(len, id);
        let opts = TransferOptions { streams, chunk_size: 64 << 10, ..TransferOptions::default() };
        let (sent, received) =
            tokio::join!(send_state(&server_conn, id, &data, &opts), recv_state(&conn, &opts));
        let (rid, bytes, stats) = received.unwrap();
        assert_eq!((rid, bytes.len()), (id, len));
        assert!(bytes == data);
        assert_eq!(sent.unwrap().chunks, stats.chunks);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_transfer_shares_a_connection_with_other_streams() {
    let (_c, _client, conn, _server, server_conn) = pair().await;
    // The receiving worker routes streams by their header.
    let router = StreamRouter::new(server_conn);
    let (states_tx, mut states) = mpsc::unbounded_channel();
    let (acts_tx, mut acts) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(routed) = router.accept().await {
            match routed {
                Routed::State(incoming) => {
                    let tx = states_tx.clone();
                    tokio::spawn(async move {
                        let _ = tx.send(incoming.receive(&TransferOptions::default()).await);
                    });
                }
                Routed::Stream(mut s) => {
                    assert_eq!(s.header.kind, StreamKind::Activation);
                    let (Ping { n }, bytes) =
                        frame::recv_with_payload::<_, Ping>(&mut s.recv, 1 << 20).await.unwrap();
                    acts_tx.send((s.header.tag, n, bytes.len())).unwrap();
                }
            }
        }
    });
    let a = payload(3 << 20, 5);
    let b = payload(2 << 20, 6);
    let opts = TransferOptions { streams: 3, ..TransferOptions::default() };
    let activations = async {
        for mb in 0..20u64 {
            let mut send =
                frame::open_uni(&conn, StreamHeader::new(StreamKind::Activation, mb)).await.unwrap();
            frame::send_with_payload(&mut send, &Ping { n: mb }, &[mb as u8; 1000]).await.unwrap();
            send.finish().unwrap();
        }
    };
    let (ra, rb, ()) =
        tokio::join!(send_state(&conn, 10, &a, &opts), send_state(&conn, 11, &b, &opts), activations);
    assert_eq!(ra.unwrap().streams, 3);
    assert_eq!(rb.unwrap().streams, 2);
    let mut got = Vec::new();
    for _ in 0..2 {
        let (id, bytes, _) = states.recv().await.unwrap().unwrap();
        got.push((id, bytes));
    }
    got.sort_by_key(|(id, _)| *id);
    assert!(got[0] == (10, a) && got[1] == (11, b));
    let mut seen: Vec<u64> = Vec::new();
    for _ in 0..20 {
        let (tag, n, len) = acts.recv().await.unwrap();
        assert_eq!((tag, len), (n, 1000));
        seen.push(tag);
    }
    seen.sort();
    assert_eq!(seen, (0..20).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_chunk_is_resent() {
    let (_c, _client, conn, _server, server_conn) = pair().await;
    let data = payload(4 << 20, 2);
    let opts = TransferOptions { corrupt_chunks_once: vec![2], ..TransferOptions::default() };
    let (sent, received) = tokio::join!(send_state(&conn, 5, &data, &opts), recv_state(&server_conn, &opts));
    let sent = sent.unwrap();
    let (_, bytes, stats) = received.unwrap();
    assert!(bytes == data, "payload differs after resend");
    assert_eq!((sent.resent_chunks, sent.resend_rounds), (1, 1));
    assert_eq!((stats.resent_chunks, stats.resend_rounds), (1, 1));

    // With no resends allowed, the corruption is a clear error on both sides.
    let opts = TransferOptions {
        corrupt_chunks_once: vec![0, 3],
        max_resend_rounds: 0,
        ..TransferOptions::default()
    };
    let (sent, received) = tokio::join!(send_state(&conn, 6, &data, &opts), recv_state(&server_conn, &opts));
    match received.unwrap_err() {
        TransferError::ChecksumRetriesExhausted { id, chunks, .. } => {
            assert_eq!((id, chunks), (6, vec![0, 3]))
        }
        other => panic!("unexpected {other}"),
    }
    let err = sent.unwrap_err();
    assert!(matches!(err, TransferError::Aborted { .. }) && err.to_string().contains("checksum"), "{err}");
}

/// Starts a transfer by hand and stops in the middle of a chunk; returns the sender's pieces.
async fn half_transfer(conn: &quinn::Connection) -> quinn::SendStream {
    let header = StreamHeader { kind: StreamKind::State, tag: 9, part: 0, parts: 1 };
    let (mut send, _recv) = frame::open_bi(conn, header).await.unwrap();
    #[derive(Serialize)]
    struct Begin {
        total_len: u64,
        chunk_size: u64,
        chunks: u64,
    }
    frame::send_msg(&mut send, &Begin { total_len: 1 << 20, chunk_size: 1 << 20, chunks: 1 }).await.unwrap();
    let mut record = Vec::new();
    record.extend_from_slice(&0u32.to_be_bytes());
    record.extend_from_slice(&(1u32 << 20).to_be_bytes());
    record.extend_from_slice(&0u32.to_be_bytes());
    record.extend_from_slice(&[7u8; 1000]);
    send.write_all(&record).await.unwrap();
    std::mem::forget(_recv);
    send
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_closing_mid_transfer_is_an_error() {
    let (_c, client, conn, _server, server_conn) = pair().await;
    let receiver = tokio::spawn(async move { recv_state(&server_conn, &TransferOptions::default()).await });
    let send = half_transfer(&conn).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let start = Instant::now();
    client.close();
    drop(send);
    let err =
        tokio::time::timeout(Duration::from_secs(5), receiver).await.expect("no hang").unwrap().unwrap_err();
    assert!(start.elapsed() < IDLE, "closing is noticed at once, took {:?}", start.elapsed());
    assert!(matches!(err, TransferError::Stream { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vanished_peer_times_out_within_idle_timeout() {
    let c = cluster();
    let mut server = serve(&c.host, ServerMode::MembersOnly, None);
    let addr = server.addr;
    let w = c.ca.issue("worker-1", &[]).unwrap();
    // The sender lives on its own runtime, which is then torn down: no close, no more packets.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let sender = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let ep = bind(&w, ServerMode::MembersOnly);
            let conn = ep.connect(addr, HOST_NAME).await.unwrap();
            let send = half_transfer(&conn).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            ready_tx.send(()).unwrap();
            // Vanish: keep every handle alive (no implicit close) until the runtime dies.
            std::mem::forget((ep, conn, send));
        });
        stop_rx.recv().unwrap();
        rt.shutdown_background();
    });
    let (server_conn, _) = server.next_peer().await;
    let receiver = tokio::spawn(async move { recv_state(&server_conn, &TransferOptions::default()).await });
    ready_rx.recv().unwrap();
    stop_tx.send(()).unwrap();
    sender.join().unwrap();
    let start = Instant::now();
    let err = tokio::time::timeout(IDLE * 5, receiver).await.expect("no hang").unwrap().unwrap_err();
    let took = start.elapsed();
    assert!(took <= IDLE + Duration::from_millis(500), "took {took:?}");
    assert!(err.to_string().contains("timed out"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_streams_is_an_error() {
    let (_c, _client, conn, _server, server_conn) = pair().await;
    // A stream that does not start with our header.
    let mut send = conn.open_uni().await.unwrap();
    send.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    send.finish().unwrap();
    let err = frame::accept_stream(&server_conn).await.unwrap_err();
    assert!(matches!(err, frame::FrameError::BadHeader(_)), "{err}");

    // A state stream whose transfer header is garbage.
    let header = StreamHeader::new(StreamKind::State, 3);
    let (mut send, _recv) = frame::open_bi(&conn, header).await.unwrap();
    send.write_all(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3]).await.unwrap();
    let err = recv_state(&server_conn, &TransferOptions::default()).await.unwrap_err();
    assert!(matches!(err, TransferError::Frame { source: frame::FrameError::TooLarge { .. }, .. }), "{err}");

    // A state stream with a valid header but a chunk that lies about its size.
    let (mut send, _recv) = frame::open_bi(&conn, StreamHeader::new(StreamKind::State, 4)).await.unwrap();
    frame::send_msg(&mut send, &serde_json::json!({"total_len": 8192, "chunk_size": 4096, "chunks": 2}))
        .await
        .unwrap();
    let mut record = 1u32.to_be_bytes().to_vec();
    record.extend_from_slice(&100u32.to_be_bytes());
    record.extend_from_slice(&0u32.to_be_bytes());
    send.write_all(&record).await.unwrap();
    let err = recv_state(&server_conn, &TransferOptions::default()).await.unwrap_err();
    assert!(err.to_string().contains("chunk 1 has 100 bytes, expected 4096"), "{err}");

    // A state header that is inconsistent.
    let (mut send, _recv) = frame::open_bi(&conn, StreamHeader::new(StreamKind::State, 5)).await.unwrap();
    frame::send_msg(&mut send, &serde_json::json!({"total_len": 8192, "chunk_size": 4096, "chunks": 7}))
        .await
        .unwrap();
    let err = recv_state(&server_conn, &TransferOptions::default()).await.unwrap_err();
    assert!(err.to_string().contains("inconsistent header"), "{err}");

    // The connection still works afterwards.
    let data = payload(100_000, 3);
    let opts = TransferOptions::default();
    let (sent, received) = tokio::join!(send_state(&conn, 6, &data, &opts), recv_state(&server_conn, &opts));
    sent.unwrap();
    assert!(received.unwrap().1 == data);
}

/// Compile-time check only (never called): `IncomingState::receive`'s future must be `Send`.
fn _assert_send(s: IncomingState) -> impl std::future::Future + Send {
    async move { s.receive(&TransferOptions::default()).await }
}
