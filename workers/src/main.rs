//! `parcae-worker`: one training process of a Parcae cluster.
//!
//! Started by the host in local mode (`--connect ADDR --identity DIR --id N`),
//! or joining a running host from anywhere (`--join ADDR --token T`). It holds
//! one pipeline stage of one data-parallel replica, talks to its peers over
//! QUIC with mutual TLS and does what the host's control stream says.

mod node;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use parcae_cluster::protocol::{Command, Hello, PROTOCOL_VERSION, Reply, Welcome};
use parcae_net::{
    HOST_NAME, Identity, JoinToken, NetEndpoint, ServerMode, StreamHeader, StreamKind, TransportOptions,
};
use tracing::{info, warn};
use tracing_subscriber::EnvFilter;

use node::driver::Driver;
use node::mailbox::Mailbox;
use node::peers::{PeerNet, accept_peers};

/// A Parcae training worker.
#[derive(Debug, Parser)]
#[command(name = "parcae-worker", version, about)]
struct Cli {
    /// The host to connect to (local mode, with --identity and --id).
    #[arg(long, conflicts_with = "join", requires_all = ["identity", "id"])]
    connect: Option<SocketAddr>,
    /// Directory holding this worker's cluster identity (cert, key, CA).
    #[arg(long)]
    identity: Option<PathBuf>,
    /// The id the host gave this worker.
    #[arg(long)]
    id: Option<u64>,
    /// Join a running host at ADDR with a token it printed.
    #[arg(long, requires = "token")]
    join: Option<SocketAddr>,
    /// The join token (`parcae-host run --remote` prints it).
    #[arg(long)]
    token: Option<String>,
    /// Name on the certificate a joining worker asks for.
    #[arg(long, default_value = "worker")]
    name: String,
    /// Address peers reach this worker at (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// cpu, cuda, or auto (CUDA when available).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Threads libtorch may use for this worker's compute.
    #[arg(long, default_value_t = 1)]
    threads: i32,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let device = match cli.device.as_str() {
        "cpu" => parcae_worker::tch::Device::Cpu,
        "cuda" => {
            anyhow::ensure!(parcae_worker::load_cuda(), "--device cuda: no usable CUDA device");
            parcae_worker::tch::Device::Cuda(0)
        }
        "auto" => parcae_worker::pick_device(true),
        other => anyhow::bail!("--device {other}: expected cpu, cuda or auto"),
    };
    parcae_worker::tch::set_num_threads(cli.threads.max(1));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let handle = runtime.handle().clone();
    runtime.block_on(serve(cli, device, handle))
}

async fn serve(
    cli: Cli,
    device: parcae_worker::tch::Device,
    rt: tokio::runtime::Handle,
) -> anyhow::Result<()> {
    // 1. Who am I: a certificate from the host (local) or one obtained by joining.
    let (host, identity, id) = match (cli.connect, cli.join) {
        (Some(host), None) => {
            let dir = cli.identity.as_ref().expect("clap requires --identity");
            let identity =
                Identity::load(dir).with_context(|| format!("loading identity {}", dir.display()))?;
            (host, identity, cli.id)
        }
        (None, Some(host)) => {
            let token: JoinToken =
                cli.token.as_deref().expect("clap requires --token").parse().context("--token")?;
            let identity = parcae_net::join(host, &token, &cli.name).await.context("joining the cluster")?;
            info!(name = identity.name(), "joined the cluster");
            (host, identity, None)
        }
        _ => anyhow::bail!("give either --connect ADDR --identity DIR --id N, or --join ADDR --token T"),
    };
    // 2. One endpoint for the host and the peers.
    let endpoint =
        NetEndpoint::bind(cli.listen, &identity, ServerMode::MembersOnly, TransportOptions::default())?;
    let peer_addr = endpoint.local_addr()?;
    let host_conn = endpoint.connect(host, HOST_NAME).await.context("connecting to the host")?;
    let (mut send, mut recv) =
        parcae_net::frame::open_bi(&host_conn, StreamHeader::new(StreamKind::Control, 0))
            .await
            .context("opening the control stream")?;
    let hello = Hello { protocol: PROTOCOL_VERSION, worker: id, peer_addr, device: format!("{device:?}") };
    parcae_net::send_msg(&mut send, &hello).await?;
    let welcome: Welcome = parcae_net::recv_msg(&mut recv).await.context("waiting for the host's welcome")?;
    info!(worker = welcome.worker, %peer_addr, "welcomed by the host");

    // 3. The peer plane and the compute thread.
    let mailbox = std::sync::Arc::new(Mailbox::new());
    let net = PeerNet::new(endpoint, mailbox);
    tokio::spawn(accept_peers(net.clone()));
    let peer_timeout = Duration::from_millis(welcome.peer_timeout_ms.max(1));
    let (commands_tx, commands_rx) =
        std::sync::mpsc::channel::<(Command, tokio::sync::oneshot::Sender<Reply>)>();
    let compute = {
        let (spec, net, rt) = (welcome.spec.clone(), net.clone(), rt.clone());
        std::thread::Builder::new().name("compute".into()).spawn(move || -> anyhow::Result<()> {
            let mut driver = Driver::new(spec, device, net, rt, peer_timeout)?;
            while let Ok((command, reply)) = commands_rx.recv() {
                let _ = reply.send(driver.handle(command));
            }
            Ok(())
        })?
    };

    // 4. The control loop: one command at a time.
    loop {
        let command: Command = match parcae_net::recv_msg(&mut recv).await {
            Ok(command) => command,
            Err(e) => {
                warn!(%e, "control stream closed; exiting");
                break;
            }
        };
        let shutdown = matches!(command, Command::Shutdown);
        let (tx, rx) = tokio::sync::oneshot::channel();
        commands_tx.send((command, tx)).context("compute thread gone")?;
        let reply = rx.await.context("compute thread dropped a command")?;
        parcae_net::send_msg(&mut send, &reply).await?;
        if shutdown {
            let _ = send.finish();
            // Let the reply reach the host before the connection closes.
            tokio::time::sleep(Duration::from_millis(100)).await;
            break;
        }
    }
    drop(commands_tx);
    match compute.join() {
        Ok(result) => result?,
        Err(_) => anyhow::bail!("compute thread panicked"),
    }
    net.endpoint().close();
    Ok(())
}
