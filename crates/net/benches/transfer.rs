//! Moving one stage's migration state between two endpoints on loopback: QUIC (our transfer
//! protocol, mutual TLS, checksums, tuned transport) side by side with a raw TCP copy of the
//! same bytes, plus quinn's default transport as the untuned baseline.
//!
//! `cargo bench -p parcae-net --bench transfer` measures 8 MiB and 64 MiB; under `cargo test`
//! (test mode) it runs each case once on 1 MiB so CI stays quick.

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use parcae_net::endpoint::{client_crypto, server_crypto};
use parcae_net::{
    ClusterCa, HOST_NAME, NetEndpoint, Routed, ServerMode, StreamRouter, TransferOptions, TransportOptions,
    send_state, send_state_bytes,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;

const MIB: usize = 1 << 20;

fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn sizes() -> Vec<usize> {
    if bench_mode() { vec![8 * MIB, 64 * MIB] } else { vec![MIB] }
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Receives state transfers forever (dropping the bytes after verification).
fn spawn_state_sink(conn: quinn::Connection) {
    tokio::spawn(async move {
        let router = StreamRouter::new(conn);
        while let Ok(Routed::State(incoming)) = router.accept().await {
            tokio::spawn(async move {
                let (_, bytes, _) = incoming.receive(&TransferOptions::default()).await.unwrap();
                black_box(bytes);
            });
        }
    });
}

/// A connected pair of tuned endpoints: returns the sender's connection.
async fn tuned_pair(
    ca: &ClusterCa,
    options: TransportOptions,
) -> (NetEndpoint, NetEndpoint, quinn::Connection) {
    let host = ca.issue(HOST_NAME, &[]).unwrap();
    let worker = ca.issue("worker-1", &[]).unwrap();
    let local: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let server = NetEndpoint::bind(local, &host, ServerMode::MembersOnly, options.clone()).unwrap();
    let client = NetEndpoint::bind(local, &worker, ServerMode::MembersOnly, options).unwrap();
    let addr = server.local_addr().unwrap();
    let (conn, accepted) = tokio::join!(client.connect(addr, HOST_NAME), async {
        let incoming = server.accept().await.unwrap();
        server.accept_incoming(incoming, None).await.unwrap()
    });
    match accepted {
        parcae_net::Accepted::Peer { conn, .. } => spawn_state_sink(conn),
        other => panic!("{other:?}"),
    }
    (server, client, conn.unwrap())
}

/// The same pair with quinn's default transport settings (the untuned baseline).
async fn default_pair(ca: &ClusterCa) -> (quinn::Endpoint, quinn::Endpoint, quinn::Connection) {
    let host = ca.issue(HOST_NAME, &[]).unwrap();
    let worker = ca.issue("worker-1", &[]).unwrap();
    let server_config =
        quinn::ServerConfig::with_crypto(server_crypto(&host, ServerMode::MembersOnly).unwrap());
    let server = quinn::Endpoint::server(server_config, "127.0.0.1:0".parse().unwrap()).unwrap();
    let mut client = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    client.set_default_client_config(quinn::ClientConfig::new(client_crypto(&worker).unwrap()));
    let addr = server.local_addr().unwrap();
    let (conn, accepted) =
        tokio::join!(async { client.connect(addr, HOST_NAME).unwrap().await.unwrap() }, async {
            server.accept().await.unwrap().await.unwrap()
        });
    spawn_state_sink(accepted);
    (server, client, conn)
}

/// A TCP loopback pair whose server reads each `len`-byte message into a fresh buffer and acks.
async fn tcp_pair(len: usize) -> TcpStream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        sock.set_nodelay(true).unwrap();
        loop {
            let mut buf = vec![0u8; len];
            if sock.read_exact(&mut buf).await.is_err() {
                break;
            }
            black_box(&buf);
            sock.write_all(&[1]).await.unwrap();
        }
    });
    let sock = TcpStream::connect(addr).await.unwrap();
    sock.set_nodelay(true).unwrap();
    sock
}

fn transfer(c: &mut Criterion) {
    let rt = runtime();
    let ca = ClusterCa::generate("bench").unwrap();
    let mut group = c.benchmark_group("state_transfer");
    group.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    for len in sizes() {
        let payload: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        group.throughput(Throughput::Bytes(len as u64));
        let label = format!("{}MiB", len / MIB);

        let mut sock = rt.block_on(tcp_pair(len));
        group.bench_function(BenchmarkId::new("tcp", &label), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        sock.write_all(&payload).await.unwrap();
                        let mut ack = [0u8; 1];
                        sock.read_exact(&mut ack).await.unwrap();
                    }
                    start.elapsed()
                })
            })
        });

        let (_s, _c, conn) = rt.block_on(default_pair(&ca));
        let opts = TransferOptions { streams: 1, ..TransferOptions::default() };
        group.bench_function(BenchmarkId::new("quic-quinn-defaults-1stream", &label), |b| {
            b.iter_custom(|iters| time_quic(&rt, &conn, &payload, &opts, iters))
        });
        drop((_s, _c, conn));

        let (_s, _c, conn) = rt.block_on(tuned_pair(&ca, TransportOptions::default()));
        for streams in [1, 4] {
            let opts = TransferOptions { streams, ..TransferOptions::default() };
            group.bench_function(BenchmarkId::new(format!("quic-tuned-{streams}stream"), &label), |b| {
                b.iter_custom(|iters| time_quic(&rt, &conn, &payload, &opts, iters))
            });
        }
        // The zero-copy sender path (state already in a `Bytes`).
        let shared = Bytes::from(payload.clone());
        let opts = TransferOptions::default();
        group.bench_function(BenchmarkId::new("quic-tuned-4stream-bytes", &label), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for i in 0..iters {
                        black_box(send_state_bytes(&conn, i, shared.clone(), &opts).await.unwrap());
                    }
                    start.elapsed()
                })
            })
        });
    }
    group.finish();
}

fn time_quic(
    rt: &Runtime,
    conn: &quinn::Connection,
    payload: &[u8],
    opts: &TransferOptions,
    iters: u64,
) -> Duration {
    rt.block_on(async {
        let start = Instant::now();
        for i in 0..iters {
            black_box(send_state(conn, i, payload, opts).await.unwrap());
        }
        start.elapsed()
    })
}

criterion_group!(benches, transfer);
criterion_main!(benches);
