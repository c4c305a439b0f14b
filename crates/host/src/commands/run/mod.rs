//! `parcae-host run`: real training on a (replayed) spot fleet.
//!
//! Local mode (the default) starts one `parcae-worker` process per instance of
//! the trace on loopback, replays the trace in accelerated time (a preemption
//! is a notice, then SIGKILL; an allocation is a new process) and drives the
//! job with the loaded policy. Remote workers may join at any time with
//! `parcae-worker --join ADDR --token T`.

mod durable;
mod fidelity;
mod metrics;
mod orchestrator;
mod report;
mod told_cadence;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use parcae_cluster::{AssignmentStrategy, ModelSpec};
use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::{info, warn};

pub use crate::workers::timeline::{FleetEvent, TimeScale, TimedEvent, resume_at, timeline};
pub use fidelity::{Comparison, Fidelity};
pub use report::{CheckpointReason, RunEvent, Summary, Timed};

use crate::args::{PolicyArgs, ProfileArgs, ReplayArgs, SandboxArgs};
use crate::checkpoints;
use crate::workers::cloud;
use crate::workers::fleet::{Arrival, Fleet};
use orchestrator::RunSettings;
use report::{RunContext, RunLog};

/// Options of `parcae-host run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub replay: ReplayArgs,
    #[command(flatten)]
    pub policies: PolicyArgs,
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Intervals each forecast and plan covers.
    #[arg(long, default_value_t = 8)]
    pub horizon: u32,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Model and batch (JSON, the fields of the worker's ModelSpec; default: the built-in small GPT).
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Take a periodic checkpoint every N committed steps (default: a Young/Daly
    /// cadence from the observed rate of losses that roll back: unannounced ones and
    /// notices too short to save the state; before the first, the next counted by the
    /// chance it rolls back on the running layout, and 20 steps where it cannot).
    #[arg(long)]
    pub checkpoint_every: Option<u64>,
    /// Stop after N committed steps.
    #[arg(long)]
    pub max_steps: Option<u64>,
    /// Directory for worker identities, logs and the event log (and checkpoints, unless
    /// --checkpoint-url puts them elsewhere).
    #[arg(long, default_value = "out/run")]
    pub run_dir: PathBuf,
    /// Where the stage holders write checkpoints, directly: `file:///dir` (default: the run
    /// directory), `s3://bucket/prefix` (credentials and region from the usual AWS
    /// environment), `gs://bucket/prefix` or `az://container/prefix`.
    #[arg(long, value_name = "URL")]
    pub checkpoint_url: Option<String>,
    /// An S3-compatible endpoint for an s3:// checkpoint URL (MinIO, moto, ...), passed on to
    /// every worker; default: AWS_ENDPOINT_URL, else AWS.
    #[arg(long, value_name = "URL")]
    pub checkpoint_endpoint: Option<String>,
    /// Address the host listens on (workers and joiners connect here).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Start no local workers: wait for workers to join with the printed token.
    #[arg(long)]
    pub remote: bool,
    /// Workers to wait for in remote mode before training starts (also the least fleet size
    /// the forecasts may reach).
    #[arg(long, default_value_t = 1)]
    pub remote_workers: usize,
    /// The worker binary (default: `parcae-worker` next to this executable).
    #[arg(long)]
    pub worker_bin: Option<PathBuf>,
    /// Device the local workers train on: cpu, cuda, or auto (CUDA when present).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// A mixed fleet tried out on one machine: local workers take these instance types in
    /// turn, each emulating its speed (`NAME=SLOWDOWN,...`, e.g. `p3=1,g4dn=2.8`: a g4dn
    /// worker's compute takes 2.8 times as long); the batch is split by speed.
    #[arg(long, value_name = "NAME=SLOWDOWN,...", value_parser = parse_emulated_types)]
    pub emulate_types: Option<EmulatedTypes>,
    /// Seconds a worker may take to answer one command before it is counted lost.
    #[arg(long, default_value_t = 60.0)]
    pub command_timeout: f64,
    /// Match workers to slots naively instead of by Kuhn-Munkres (for comparison).
    #[arg(long)]
    pub naive_assignment: bool,
    /// Write the event log and summary as JSON here (default: RUN_DIR/events.json).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the loss/throughput plot here (default: RUN_DIR/run.svg).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics while the run lasts (port 0:
    /// any free port; the address is printed as `metrics: http://ADDR/metrics`).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<SocketAddr>,
    /// Go on with the job whose host died: RUN_DIR, or the --checkpoint-url of its run. It
    /// restarts from the newest complete checkpoint with the run's own arguments (trace,
    /// policy, profile, ...), at the trace position and with the history it had; other
    /// flags are ignored except --worker-bin and --checkpoint-endpoint.
    #[arg(long, value_name = "RUN_DIR|URL")]
    pub resume: Option<String>,
    /// Layouts per interval given instead of asked of the policy: a JSON array with one
    /// `[D, P]` (or `null`: pause) per interval. `parcae-host profile` runs every layout
    /// of the deployment in turn with it.
    #[arg(long, hide = true, value_name = "FILE")]
    pub script: Option<PathBuf>,
}

/// The layouts of a `--script` file, one per interval.
fn load_script(path: &std::path::Path) -> anyhow::Result<Vec<Option<parcae_policy_core::ParallelConfig>>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let layouts: Vec<Option<(u32, u32)>> = serde_json::from_str(&text).with_context(|| {
        format!("{}: expected a JSON array of [D, P] or null per interval", path.display())
    })?;
    layouts
        .into_iter()
        .enumerate()
        .map(|(k, layout)| match layout {
            Some((d, p)) if d == 0 || p == 0 => {
                anyhow::bail!("{}: interval {k}: [{d}, {p}] has a zero degree", path.display())
            }
            other => Ok(other.map(|(d, p)| parcae_policy_core::ParallelConfig::new(d, p))),
        })
        .collect()
}

/// `parcae-host run`'s arguments alone, to parse a recorded command line.
#[derive(Debug, clap::Parser)]
#[command(name = "parcae-host run")]
struct RecordedRun {
    #[command(flatten)]
    args: RunArgs,
}

/// Runs `parcae-host run`.
pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match &args.resume {
        None => runtime.block_on(run_async(args, None)),
        Some(target) => runtime.block_on(resume(args, target)),
    }
}

/// `run --resume TARGET`: reads the dead host's durable state and runs the job on from it.
async fn resume(given: &RunArgs, target: &str) -> anyhow::Result<()> {
    let spec =
        parcae_store::StoreSpec { url: target.to_string(), endpoint: given.checkpoint_endpoint.clone() };
    let store = parcae_store::Store::open(&spec).with_context(|| format!("--resume {target}"))?;
    let job = durable::load(&store).await.with_context(|| {
        format!(
            "--resume {target}: no job state there (give the run directory, or the run's --checkpoint-url)"
        )
    })?;
    anyhow::ensure!(
        !job.progress.finished,
        "--resume {target}: the run finished at step {}; nothing to resume",
        job.progress.step
    );
    if std::env::current_dir().ok().as_ref() != Some(&job.cwd) {
        info!(cwd = %job.cwd.display(), "resuming in the run's own working directory");
        std::env::set_current_dir(&job.cwd)
            .with_context(|| format!("changing to the run's working directory {}", job.cwd.display()))?;
    }
    let line = std::iter::once("parcae-host run".to_string()).chain(job.args.iter().cloned());
    let mut args = <RecordedRun as clap::Parser>::try_parse_from(line)
        .with_context(|| format!("the recorded arguments of the run in {target}: {:?}", job.args))?
        .args;
    // The checkpoints are where the job state was found; a new binary path or endpoint may be given.
    args.checkpoint_url = Some(target.to_string());
    args.checkpoint_endpoint = given.checkpoint_endpoint.clone().or(args.checkpoint_endpoint);
    args.worker_bin = given.worker_bin.clone().or(args.worker_bin);
    run_async(&args, Some(job)).await
}

async fn run_async(args: &RunArgs, resumed: Option<durable::DurableJob>) -> anyhow::Result<()> {
    anyhow::ensure!(args.checkpoint_every != Some(0), "--checkpoint-every must be at least 1");
    anyhow::ensure!(args.horizon >= 1, "--horizon must be at least 1");
    let spec = ModelSpec::load(args.spec.as_deref())?;
    if let Some(job) = &resumed {
        anyhow::ensure!(job.spec == spec, "the model spec changed since the run started: cannot resume it");
    }
    let (profile, prices) = args.profile.load_with_prices()?;
    for c in &profile.configs {
        parcae_cluster::Layout::new(
            &spec,
            c.config.data_parallel as usize,
            c.config.pipeline_stages as usize,
        )
        .with_context(|| {
            format!("profile '{}' lists {} which the worker's model cannot run", profile.model, c.config)
        })?;
    }
    let (trace, scale) = args.replay.load()?;
    let trace_interval_ms = scale.trace_interval_ms;
    let series = trace.series(trace_interval_ms)?;
    // A replayed fleet ends with its trace; a remote one (a real cloud) runs as long as asked.
    let intervals = match args.replay.intervals {
        Some(n) if args.remote => n,
        n => n.unwrap_or(series.len()).min(series.len()),
    };
    let end = scale.wall_interval * intervals as u32;
    let events: Vec<TimedEvent> =
        timeline(&trace, scale, &args.replay.unannounced).into_iter().filter(|e| e.at < end).collect();
    // A resumed run's clock goes on from the dead host's last durable write.
    let clock_offset =
        resumed.as_ref().map_or(Duration::ZERO, |j| Duration::from_millis(j.progress.clock_ms));
    let events = if resumed.is_some() { resume_at(&events, clock_offset) } else { events };

    // Fresh run directory (a previous run's checkpoints are not resumed).
    let run_dir = &args.run_dir;
    crate::workers::prepare_run_dir(run_dir)?;
    let checkpoint_url = match &args.checkpoint_url {
        Some(url) => url.clone(),
        None => std::path::absolute(run_dir)
            .with_context(|| format!("locating {}", run_dir.display()))?
            .display()
            .to_string(),
    };
    let checkpoints = checkpoints::Checkpoints::open(&checkpoint_url, args.checkpoint_endpoint.as_deref())
        .context("--checkpoint-url")?;
    // A fresh run replaces whatever a previous run left there; a resumed one reads it.
    let cleared = if resumed.is_some() {
        0
    } else {
        checkpoints.clear().await.with_context(|| {
            format!("clearing the previous run's checkpoints in {}", checkpoints.location("checkpoints"))
        })?
    };
    let resume_from = match &resumed {
        Some(job) => Some(orchestrator::ResumeFrom {
            progress: job.progress.clone(),
            told_checkpoint_ms: told_cadence::told_intervals(&job.events, job.progress.history.len()),
            checkpoint: checkpoints.latest().await.context("reading the newest complete checkpoint")?,
        }),
        None => None,
    };
    if cleared > 0 {
        info!(objects = cleared, location = %checkpoints.location("checkpoints"), "deleted a previous run's checkpoints");
    }
    if args.remote && checkpoints.store().is_local() {
        warn!(
            location = %checkpoints.location("checkpoints"),
            "remote workers write checkpoints to this path on their own machines: give --checkpoint-url \
             s3://... (or a shared filesystem) so that a restart can read them"
        );
    }

    // The cluster's CA, the host's identity, the join token, the listener.
    let mut host = crate::workers::HostEndpoint::start(args.listen)?;
    if args.remote {
        println!("join with: parcae-worker --join {} --token {}", host.host_addr, host.token);
    }
    let run_metrics = Arc::new(metrics::RunMetrics::new());
    let metrics_server = match args.metrics_addr {
        Some(addr) => {
            let listener = metrics::bind(addr).await?;
            let bound = listener.local_addr().context("the metrics listener's address")?;
            println!("metrics: http://{bound}/metrics");
            Some(tokio::spawn(metrics::serve(listener, run_metrics.clone())))
        }
        None => None,
    };
    let launch = if args.remote {
        None
    } else {
        Some(host.local_launch(
            args.worker_bin.as_deref(),
            run_dir,
            &args.device,
            args.emulate_types.clone().map(|t| t.0).unwrap_or_default(),
        )?)
    };
    let command_timeout = Duration::from_secs_f64(args.command_timeout);
    let mut fleet = Fleet::new(launch, command_timeout / 2, checkpoints.for_workers());
    if let Some(job) = &resumed {
        fleet.start_ids_at(job.progress.next_worker);
    }

    let runtime = args.sandbox.runtime()?;
    let mut policy = args.policies.guarded(&runtime)?;
    let settings = RunSettings {
        spec: spec.clone(),
        profile: profile.clone(),
        scale,
        intervals,
        horizon: args.horizon,
        fleet_max: series
            .intervals
            .iter()
            .map(|s| s.instances)
            .max()
            .unwrap_or(0)
            .max(if args.remote { args.remote_workers as u32 } else { 1 })
            .max(1),
        grace: args.replay.grace(&scale),
        checkpoint_every: args.checkpoint_every,
        checkpoints: checkpoints.clone(),
        clock_offset,
        max_steps: args.max_steps,
        command_timeout,
        strategy: if args.naive_assignment {
            AssignmentStrategy::Naive
        } else {
            AssignmentStrategy::KuhnMunkres
        },
        script: args.script.as_deref().map(load_script).transpose()?,
        cost_constants: args.profile.constants()?,
    };
    let events = if args.remote {
        // No trace-driven processes: wait for joiners, then train on whoever is there.
        wait_for_joiners(&mut fleet, &mut host.arrivals, &spec, args.remote_workers, command_timeout).await?;
        Vec::new()
    } else {
        events
    };
    let trace_path = args.replay.trace_path();
    let mut log = RunLog::new().with_context(RunContext {
        trace: trace.name(),
        trace_path: trace_path.clone(),
        model: profile.model.clone(),
        policy: args.policies.policy_spec().to_string(),
        interval_ms: trace_interval_ms,
        horizon: args.horizon,
        intervals,
        time_scale: trace_interval_ms as f64 / 1000.0 / args.replay.wall_seconds_per_interval,
        global_batch: spec.global_batch as u64,
        prices,
    });
    if metrics_server.is_some() {
        log = log.with_metrics(run_metrics.clone());
    }
    // The job's durable state, for `run --resume` should this host die.
    let (recorded_args, cwd, prior_events) = match resumed {
        Some(job) => (job.args, job.cwd, job.events),
        None => {
            (durable::run_arguments(), std::env::current_dir().context("the working directory")?, Vec::new())
        }
    };
    log.restore(prior_events.clone());
    let mut persister = durable::Persister::start(
        checkpoints.store().clone(),
        durable::DurableJob {
            format: durable::FORMAT,
            args: recorded_args,
            cwd,
            spec: spec.clone(),
            progress: resume_from.as_ref().map(|r| r.progress.clone()).unwrap_or_default(),
            events: prior_events,
        },
    );
    // The cloud plays the trace on its own clock; the host's loop reacts to it.
    let start = std::time::Instant::now();
    let (notes_tx, mut notes) = mpsc::unbounded_channel();
    let cloud = tokio::spawn(cloud::play(events, start, settings.grace, fleet.shared.clone(), notes_tx));
    let outcome = orchestrator::run_job(
        &settings,
        &mut policy,
        &mut fleet,
        start,
        &mut notes,
        &mut host.arrivals,
        &mut log,
        resume_from,
        &mut persister,
    )
    .await;
    persister.finish().await;
    cloud.abort();
    fleet.shutdown(Duration::from_secs(5)).await;
    host.close();
    if outcome.is_err() {
        log.finish(0, None, None);
    } else if !log.history().is_empty() && args.script.is_none() {
        predict_run(args, &settings, &runtime, prices, &mut log);
    }

    let json = args.json.clone().unwrap_or_else(|| run_dir.join("events.json"));
    let plot = args.plot.clone().unwrap_or_else(|| run_dir.join("run.svg"));
    let settings_json = serde_json::json!({
        "trace": trace_path,
        "intervals": intervals,
        "wall_seconds_per_interval": args.replay.wall_seconds_per_interval,
        "trace_interval_seconds": args.replay.trace_interval_seconds,
        "grace_seconds": args.replay.grace_seconds,
        "model": profile.model,
        "spec": spec,
        "policy": args.policies.policy_spec(),
        "strategy": format!("{:?}", settings.strategy),
        "checkpoint_url": checkpoint_url,
    });
    log.write_json(&json, settings_json)?;
    log.write_svg(&plot)?;
    println!("{}", log.summary());
    println!("  event log: {}  plot: {}", json.display(), plot.display());
    if let Some(server) = metrics_server {
        server.abort();
    }
    outcome
}

/// `--emulate-types`: instance types and how many times as slow each one's compute is.
#[derive(Debug, Clone, PartialEq)]
pub struct EmulatedTypes(pub Vec<(String, f64)>);

/// Parses `NAME=SLOWDOWN,...` (each slowdown a number >= 1).
pub fn parse_emulated_types(text: &str) -> Result<EmulatedTypes, String> {
    let types = text
        .split(',')
        .map(|part| {
            let (name, factor) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}`: expected NAME=SLOWDOWN (e.g. g4dn=2.8)"))?;
            let factor: f64 = factor
                .trim()
                .parse()
                .ok()
                .filter(|f: &f64| f.is_finite() && *f >= 1.0)
                .ok_or_else(|| format!("`{part}`: the slowdown must be a number >= 1"))?;
            let name = name.trim();
            if name.is_empty() {
                return Err(format!("`{part}`: the instance type name is empty"));
            }
            Ok((name.to_string(), factor))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(EmulatedTypes(types))
}

/// Adds the simulator's prediction of the finished run to its summary (see
/// `fidelity.rs`); a prediction that cannot be made is logged, the run's results stand.
fn predict_run(
    args: &RunArgs,
    settings: &RunSettings,
    runtime: &parcae_runtime::PolicyRuntime,
    prices: parcae_sim::Prices,
    log: &mut RunLog,
) {
    let control = settings.control();
    let inputs =
        fidelity::Inputs { history: log.history(), profile: &settings.profile, control: &control, prices };
    let predicted =
        args.policies.guarded(runtime).map_err(|e| format!("loading the policy again: {e:#}")).and_then(
            |mut policy| fidelity::predict(&inputs, log.events(), &mut policy).map_err(|e| e.to_string()),
        );
    match predicted {
        Ok((mut fidelity, result)) => {
            if args.profile.profile.is_none() {
                fidelity.not_measured_here.push("the embedded example profile".to_string());
            }
            if args.profile.cost_constants.is_none() {
                fidelity.not_measured_here.push("the embedded cost constants".to_string());
            }
            let Some(context) = log.context() else { return };
            let simulated = fidelity::simulated_record(context, &control, &result.totals);
            log.set_fidelity(fidelity, simulated);
        }
        Err(error) => warn!(%error, "the run could not be simulated; its summary has no prediction"),
    }
}

async fn wait_for_joiners(
    fleet: &mut Fleet,
    arrivals: &mut mpsc::Receiver<Arrival>,
    spec: &ModelSpec,
    wanted: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    while fleet.connected().len() < wanted {
        let Some(arrival) = arrivals.recv().await else { anyhow::bail!("listener stopped") };
        fleet.admit(arrival, spec, timeout).await;
    }
    Ok(())
}
