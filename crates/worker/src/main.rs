//! `parcae-worker`: one training process of a Parcae cluster.
//!
//! Started by the host in local mode (`--connect ADDR --identity DIR --id N`),
//! or joining a running host from anywhere (`--join ADDR --token T`). It holds
//! one pipeline stage of one data-parallel replica, talks to its peers over
//! QUIC with mutual TLS and does what the host's control stream says.
//!
//! With `--cloud aws|gcp|azure|auto` it also watches the instance metadata
//! service for a preemption notice and reports it to the host the moment it
//! appears (see `parcae_worker::cloud`).
//!
//! `parcae-worker profile` instead measures this machine and writes a profile for the
//! host's planner (see `parcae_worker::profile`); `parcae-worker profile-serving` measures
//! inference of the model and writes a serving profile (`parcae_worker::profile::run_serving_profile`).

mod node;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use parcae_cluster::protocol::{
    Cancel, Hello, PROTOCOL_VERSION, Reply, Welcome, WorkerCommand, WorkerReport,
};
use parcae_net::{
    HOST_NAME, Identity, JoinToken, NetEndpoint, ServerMode, StreamHeader, StreamKind, TransportOptions,
};
use parcae_worker::cloud::{CloudKind, MetadataClient};
use tracing::{info, warn};

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
    /// The instance type this worker runs on, as the host should know it (a mixed fleet).
    #[arg(long, default_value = "")]
    instance_type: String,
    /// Make compute take this many times as long: stand in for a slower instance type on one
    /// machine (a mixed fleet tried out locally). 1 = as fast as this machine.
    #[arg(long, default_value_t = 1.0)]
    emulate_slowdown: f64,
    /// Logging: `-v` and `--log-format`.
    #[command(flatten)]
    log: parcae_logging::LogOptions,
    /// Whose preemption notices to watch for: aws, gcp, azure, none, or auto (detect; the
    /// default for a worker that joins with --join; one started by the host watches none).
    #[arg(long, value_enum)]
    cloud: Option<CloudChoice>,
    /// The metadata service to ask instead of the cloud's own (an emulator, a proxy).
    #[arg(long, value_name = "URL")]
    metadata_endpoint: Option<String>,
    /// How often to ask the metadata service for a notice, milliseconds.
    #[arg(long, default_value_t = 1000)]
    metadata_poll_ms: u64,
    /// Something else than serving (without one, the flags above start a worker).
    #[command(subcommand)]
    command: Option<Tool>,
}

/// `--cloud`: which metadata service to watch for preemption notices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum CloudChoice {
    Aws,
    Gcp,
    Azure,
    None,
    Auto,
}

/// What the binary can do besides serving as a worker.
#[derive(Debug, Subcommand)]
enum Tool {
    /// Measure step times and transfers on this machine, fit a performance model, write a profile
    /// that `parcae-host bench/run --profile` accept.
    Profile(ProfileArgs),
    /// Measure inference of the model on this machine (per-layer prefill and decode per batch
    /// size, pipeline hops and transfers over QUIC, weight loading, start-up) and write a
    /// serving profile that SpotServe's latency model reads.
    ProfileServing(ProfileServingArgs),
}

/// Options of `parcae-worker profile-serving`.
#[derive(Debug, clap::Args)]
struct ProfileServingArgs {
    /// Where to write the serving profile.
    #[arg(long, default_value = "out/serving-profile.json")]
    out: PathBuf,
    /// Batch sizes to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    batches: Vec<u32>,
    /// Prompt length of the prefill measurements (default: half the model's seq_len; the rest
    /// of the context is the workload's output).
    #[arg(long)]
    input_tokens: Option<usize>,
    /// Timed rounds of every batch size's prefill and decode (medians are written).
    #[arg(long, default_value_t = 50)]
    repeats: usize,
    /// Untimed rounds before the timed ones.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Timed QUIC transfers per message size.
    #[arg(long, default_value_t = 20)]
    transfer_reps: usize,
    /// libtorch threads: the cores one serving instance stands for.
    #[arg(long, default_value_t = 1)]
    threads: i32,
    /// Model (JSON, the fields of ModelSpec, as `parcae-host run --spec`; default: the built-in
    /// small GPT that `run` trains).
    #[arg(long)]
    spec: Option<PathBuf>,
    /// The model's name in the profile.
    #[arg(long, default_value = "worker-gpt")]
    model_name: String,
    /// Print everything measured as JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// Options of `parcae-worker profile`.
#[derive(Debug, clap::Args)]
struct ProfileArgs {
    /// Where to write the profile.
    #[arg(long, default_value = "out/profile.json")]
    out: PathBuf,
    /// Timed training steps per layout (after --warmup untimed ones).
    #[arg(long, default_value_t = 10)]
    steps: u64,
    /// Untimed steps per layout before timing.
    #[arg(long, default_value_t = 2)]
    warmup: u64,
    /// Largest D x P in the profile (the host's planning range).
    #[arg(long, default_value_t = 8)]
    max_instances: usize,
    /// Largest D x P to train (larger layouts are only predicted; default: --max-instances).
    #[arg(long)]
    measure_max: Option<usize>,
    /// Cores the slots share; layouts with at most this many slots (and no more than the
    /// effective cores the fit finds) are written as measured (default: this machine's cores
    /// on cpu, 1 on cuda).
    #[arg(long)]
    cores: Option<usize>,
    /// Model and batch (JSON, the fields of ModelSpec, as `parcae-host run --spec`; default:
    /// the built-in small GPT).
    #[arg(long)]
    spec: Option<PathBuf>,
    /// The model's name in the profile.
    #[arg(long, default_value = "worker-gpt")]
    model_name: String,
    /// cpu, cuda, or auto (CUDA when available).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Spot price, US$ per instance-hour (default: the example profile's made-up 0.12).
    #[arg(long)]
    spot_usd_per_hour: Option<f64>,
    /// On-demand price, US$ per instance-hour (default: the example profile's made-up 0.40).
    #[arg(long)]
    on_demand_usd_per_hour: Option<f64>,
    /// Timed QUIC transfers per message size.
    #[arg(long, default_value_t = 5)]
    transfer_reps: usize,
    /// Print the whole report as JSON instead of the table.
    #[arg(long)]
    json: bool,
}

fn main() -> anyhow::Result<()> {
    let mut cli = Cli::parse();
    // Profiling prints its own progress; the transfers it times would log every chunk at info.
    parcae_logging::init(cli.log, if cli.command.is_some() { "warn" } else { "info" });
    match cli.command.take() {
        Some(Tool::Profile(args)) => return profile(args),
        Some(Tool::ProfileServing(args)) => return profile_serving(args),
        None => {}
    }
    let device = parse_device(&cli.device)?;
    parcae_worker::tch::set_num_threads(cli.threads.max(1));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let handle = runtime.handle().clone();
    runtime.block_on(serve(cli, device, handle))
}

fn parse_device(name: &str) -> anyhow::Result<parcae_worker::tch::Device> {
    Ok(match name {
        "cpu" => parcae_worker::tch::Device::Cpu,
        "cuda" => {
            anyhow::ensure!(parcae_worker::load_cuda(), "--device cuda: no usable CUDA device");
            parcae_worker::tch::Device::Cuda(0)
        }
        "auto" => parcae_worker::pick_device(true),
        other => anyhow::bail!("--device {other}: expected cpu, cuda or auto"),
    })
}

/// `parcae-worker profile`: progress on stderr, the table (or JSON) on stdout.
fn profile(args: ProfileArgs) -> anyhow::Result<()> {
    use parcae_worker::profile::{
        ProfileOptions, Progress, measure_process_start, render_table, run_profile, write_profile,
    };
    use std::io::IsTerminal;
    let device = parse_device(&args.device)?;
    let spec = parcae_cluster::ModelSpec::load(args.spec.as_deref())?;
    let mut opts = ProfileOptions::new(spec, device);
    opts.model_name = args.model_name;
    opts.steps = args.steps;
    opts.warmup_steps = args.warmup;
    opts.max_instances = args.max_instances;
    opts.measure_max = args.measure_max.unwrap_or(args.max_instances);
    if let Some(cores) = args.cores {
        anyhow::ensure!(cores >= 1, "--cores must be at least 1");
        opts.cores = cores;
    }
    opts.transfer_reps = args.transfer_reps;
    if args.spot_usd_per_hour.is_some() || args.on_demand_usd_per_hour.is_some() {
        opts.spot_usd_per_hour = args.spot_usd_per_hour.unwrap_or(opts.spot_usd_per_hour);
        opts.on_demand_usd_per_hour = args.on_demand_usd_per_hour.unwrap_or(opts.on_demand_usd_per_hour);
        opts.price_source = format!(
            "given on the command line (spot {}, on-demand {} US$/h; a price not given is the example \
             profile's made-up one)",
            opts.spot_usd_per_hour, opts.on_demand_usd_per_hour
        );
    }
    let exe = std::env::current_exe().context("locating this executable")?;
    opts.proc_init_ms = Some(measure_process_start(&exe, 3)?);
    eprintln!(
        "profiling {} on {:?} ({} cores): layouts up to {} instances, {} warm-up + {} timed steps each",
        opts.model_name, device, opts.cores, opts.max_instances, opts.warmup_steps, opts.steps
    );
    // A bar on a terminal (lines printed above it); plain lines otherwise.
    let bar = if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("measuring {bar:30} {pos}/{len} [{elapsed}]")
        {
            bar.set_style(style);
        }
        Some(bar)
    } else {
        None
    };
    let report = run_profile(&opts, &mut |event| match (event, &bar) {
        (Progress::Planned(units), Some(bar)) => bar.set_length(units),
        (Progress::Unit, Some(bar)) => bar.inc(1),
        (Progress::Line(line), Some(bar)) => bar.println(format!("  {line}")),
        (Progress::Line(line), None) => eprintln!("  {line}"),
        (_, None) => {}
    });
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let report = report?;
    write_profile(&report.profile, &args.out)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_table(&report));
    }
    let measured = report.rows.iter().filter(|r| r.measured.is_some()).count();
    eprintln!(
        "wrote {} ({} layouts: {} written as measured, {} predicted; {} trained)",
        args.out.display(),
        report.rows.len(),
        report.rows.iter().filter(|r| r.source == parcae_worker::profile::EntrySource::Measured).count(),
        report.rows.iter().filter(|r| r.source == parcae_worker::profile::EntrySource::Predicted).count(),
        measured
    );
    Ok(())
}

/// `parcae-worker profile-serving`: progress on stderr, the table (or JSON) on stdout.
fn profile_serving(args: ProfileServingArgs) -> anyhow::Result<()> {
    use parcae_worker::profile::{
        ServingProfileOptions, measure_process_start, run_serving_profile, write_serving_profile,
    };
    let spec = parcae_cluster::ModelSpec::load(args.spec.as_deref())?;
    anyhow::ensure!(args.threads >= 1, "--threads {}: must be at least 1", args.threads);
    parcae_worker::tch::set_num_threads(args.threads);
    let mut opts = ServingProfileOptions::new(spec);
    opts.model_name = args.model_name;
    opts.batches = args.batches;
    if let Some(n) = args.input_tokens {
        opts.input_tokens = n;
    }
    opts.repeats = args.repeats;
    opts.warmup = args.warmup;
    opts.transfer_reps = args.transfer_reps;
    opts.threads = args.threads;
    opts.instance_type = format!("local-cpu-{}core", args.threads);
    if args.threads > 1 {
        opts.hardware = opts.hardware.replacen("1 core of", &format!("{} cores of", args.threads), 1);
    }
    let exe = std::env::current_exe().context("locating this executable")?;
    opts.proc_init_ms = Some(measure_process_start(&exe, 3)?);
    eprintln!(
        "profiling inference of {} on {} ({} thread(s)): batches {:?}, prompt {} tokens, {} warm-up + {} timed rounds",
        opts.model_name,
        opts.hardware,
        opts.threads,
        opts.batches,
        opts.input_tokens,
        opts.warmup,
        opts.repeats
    );
    let report = run_serving_profile(&opts, &mut |line| eprintln!("  {line}"))?;
    write_serving_profile(&report.profile, &args.out)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("batch  prefill ms/layer  decode ms/layer  prefill hop ms  decode hop ms");
        for b in &report.batches {
            println!(
                "{:>5}  {:>16.4}  {:>15.4}  {:>14.3}  {:>13.3}",
                b.batch, b.prefill_ms.median, b.decode_ms.median, b.prefill_hop_ms, b.decode_hop_ms
            );
        }
        let r = &report.profile.reconfiguration;
        println!(
            "load {:.0} bytes/ms, transfer {:.0} bytes/ms, reinit {:.2} ms, instance start {:.1} ms",
            r.load_bytes_per_ms, r.transfer_bytes_per_ms, r.reinit_ms, r.instance_start_ms
        );
    }
    eprintln!("wrote {}", args.out.display());
    Ok(())
}

async fn serve(
    cli: Cli,
    device: parcae_worker::tch::Device,
    rt: tokio::runtime::Handle,
) -> anyhow::Result<()> {
    // 1. Who am I: a certificate from the host (local) or one obtained by joining.
    let cloud = cli.cloud.unwrap_or(if cli.join.is_some() { CloudChoice::Auto } else { CloudChoice::None });
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
    let slowdown = cli.emulate_slowdown;
    anyhow::ensure!(
        slowdown.is_finite() && slowdown >= 1.0,
        "--emulate-slowdown {slowdown}: must be at least 1"
    );
    let hello = Hello {
        protocol: PROTOCOL_VERSION,
        worker: id,
        peer_addr,
        device: format!("{device:?}"),
        instance_type: cli.instance_type.clone(),
        slowdown,
    };
    parcae_net::send_msg(&mut send, &hello).await?;
    let welcome: Welcome = parcae_net::recv_msg(&mut recv).await.context("waiting for the host's welcome")?;
    info!(worker = welcome.worker, %peer_addr, "welcomed by the host");

    // 3. The peer plane and the compute thread.
    let mailbox = std::sync::Arc::new(Mailbox::new());
    // The host's urgent signals: "give up step attempt N" when the cloud kills a peer.
    {
        let (conn, mailbox) = (host_conn.clone(), mailbox.clone());
        tokio::spawn(async move {
            while let Ok(mut stream) = parcae_net::accept_stream(&conn).await {
                if stream.header.kind != StreamKind::Control || stream.header.tag != Cancel::STREAM_TAG {
                    continue;
                }
                match parcae_net::recv_msg::<_, Cancel>(&mut stream.recv).await {
                    Ok(Cancel::StepAttempt(attempt)) => {
                        warn!(attempt, "the host cancelled the step attempt in flight");
                        mailbox.cancel_attempt(attempt);
                    }
                    Ok(Cancel::Epoch(epoch)) => {
                        warn!(epoch, "the host cancelled the reconfiguration in flight");
                        mailbox.cancel_epoch(epoch);
                    }
                    Err(e) => warn!(%e, "unreadable cancel message from the host; ignored"),
                }
            }
        });
    }
    // The cloud's preemption notices, reported to the host as they appear.
    if cloud != CloudChoice::None {
        let (conn, endpoint) = (host_conn.clone(), cli.metadata_endpoint.clone());
        let interval = Duration::from_millis(cli.metadata_poll_ms.max(10));
        tokio::spawn(watch_cloud(cloud, endpoint, interval, conn));
    }
    let net = PeerNet::new(endpoint, mailbox, &welcome.spec);
    tokio::spawn(accept_peers(net.clone()));
    let peer_timeout = Duration::from_millis(welcome.peer_timeout_ms.max(1));
    let (commands_tx, commands_rx) =
        std::sync::mpsc::channel::<(WorkerCommand, tokio::sync::oneshot::Sender<Reply>)>();
    let store_spec = parcae_store::StoreSpec {
        url: welcome.checkpoints.url.clone(),
        endpoint: welcome.checkpoints.endpoint.clone(),
    };
    let store = parcae_store::Store::open(&store_spec)
        .with_context(|| format!("opening the checkpoint store {store_spec}"))?;
    info!(store = %store_spec, "checkpoints go to the store");
    let compute = {
        let (spec, net, rt, worker) = (welcome.spec.clone(), net.clone(), rt.clone(), welcome.worker);
        std::thread::Builder::new().name("compute".into()).spawn(move || -> anyhow::Result<()> {
            let mut driver =
                Driver::new(spec, device, net, rt, peer_timeout, store, slowdown)?.with_worker_id(worker);
            while let Ok((command, reply)) = commands_rx.recv() {
                let _ = reply.send(driver.handle(command));
            }
            Ok(())
        })?
    };

    // 4. The control loop: one command at a time.
    loop {
        let command: WorkerCommand = match parcae_net::recv_msg(&mut recv).await {
            Ok(command) => command,
            Err(e) => {
                warn!(%e, "control stream closed; exiting");
                break;
            }
        };
        let shutdown = matches!(command, WorkerCommand::Shutdown);
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

/// Finds the cloud (for `auto`), then watches its metadata service and reports each notice to
/// the host on a uni stream of its own.
async fn watch_cloud(
    choice: CloudChoice,
    endpoint: Option<String>,
    interval: Duration,
    host: quinn::Connection,
) {
    let cloud = match choice {
        CloudChoice::Aws => CloudKind::Aws,
        CloudChoice::Gcp => CloudKind::Gcp,
        CloudChoice::Azure => CloudKind::Azure,
        CloudChoice::None => return,
        CloudChoice::Auto => match parcae_worker::cloud::detect(endpoint.as_deref()).await {
            Some(cloud) => {
                info!(%cloud, "detected the cloud");
                cloud
            }
            None => {
                info!("no cloud metadata service answers: no preemption notices to watch for");
                return;
            }
        },
    };
    let client = MetadataClient::new(cloud, endpoint.as_deref());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watcher = tokio::spawn(parcae_worker::cloud::watch(client, interval, move |notice| {
        let _ = tx.send(notice);
    }));
    while let Some(notice) = rx.recv().await {
        let report = WorkerReport::Notice(notice.to_report(std::time::SystemTime::now()));
        let sent = async {
            let mut send = parcae_net::frame::open_uni(
                &host,
                StreamHeader::new(StreamKind::Control, WorkerReport::STREAM_TAG),
            )
            .await?;
            parcae_net::send_msg(&mut send, &report).await?;
            let _ = send.finish();
            anyhow::Ok(())
        };
        match sent.await {
            Ok(()) => info!(cloud = %notice.cloud, action = %notice.action, "notice reported to the host"),
            Err(e) => warn!(%e, "could not report the notice to the host"),
        }
    }
    watcher.abort();
}
