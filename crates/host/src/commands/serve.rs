//! `parcae-host serve`: LLM inference on spot instances (SpotServe). Starts worker
//! processes as the trace allocates instances, replays its notices and kills against them,
//! serves an OpenAI-compatible HTTP API from them, and reparallelizes (dp x tp x pp) as
//! the serving policy decides, moving KV caches so interrupted requests resume at their
//! next token.
//!
//! With `--load-rate` it also drives itself with the load generator for the whole replay
//! and prints the latency report; `--compare token,restart,reroute` replays the same trace
//! and the same seeded load once per recovery mode and tables them side by side.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use parcae_cluster::ModelSpec;
use parcae_cluster::serving::WeightSource;
use parcae_profile::ServingProfileData;
use parcae_serve_sim::{Fleet, Recovery, ServeSetup};
use parcae_serving_core::estimate::shapes;
use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use crate::args::{LocalWorkerArgs, ReplayArgs, SandboxArgs};
use crate::checkpoints::Checkpoints;
use crate::embedded::WORKER_SERVING_PROFILE;
use crate::policies::load_serving;
use crate::serving::api::{EngineHandle, EngineStatus, ModelCard, until_ready};
use crate::serving::engine::{Chooser, EngineSettings, EngineStats, RecoveryMode, ScriptedConfig};
use crate::serving::loadgen::{LatencySummary, LoadReport, LoadSpec, RequestOutcome, run_load};
use crate::serving::local::{LocalOptions, LocalServing};
use crate::stats::median;
use crate::workers::timeline::TimeScale;
use crate::workers::{TimedEvent, timeline};

/// Options of `parcae-host serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    /// Which trace, how fast, how long, and how the cloud warns.
    pub replay: ReplayArgs,
    /// What reconfigurations do to requests in flight.
    #[arg(long, value_enum, default_value_t = RecoveryMode::Token)]
    pub recovery: RecoveryMode,
    /// Replay once per recovery mode with the same load and table them side by side
    /// (needs --load-rate).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "MODES", requires = "load_rate")]
    pub compare: Vec<RecoveryMode>,
    /// Replays per mode, the modes taking turns (token, restart, reroute, token, ...), so a
    /// slow spell of a shared machine does not land on one mode only; the comparison
    /// table gives each mode's median over them.
    #[arg(long, default_value_t = 1)]
    pub repeats: usize,
    /// Serving policy (`.wasm` with world `serving-policy`, or `builtin:NAME`).
    #[arg(long, default_value = "builtin:spotserve")]
    pub policy: String,
    /// Serving profile the policy plans with (default: the built-in GPT measured on one CPU
    /// core, embedded).
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// End-to-end latency objective the policy plans for, seconds (default: 5 x the lowest
    /// latency of any configuration in the profile).
    #[arg(long, value_name = "SECONDS")]
    pub slo_seconds: Option<f64>,
    /// Configurations per interval given instead of asked of the policy: a JSON array of
    /// `{"dp":1,"tp":2,"pp":2,"batch":4}` or `null` (pause), one per interval.
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// Model (JSON, the fields of the worker's ModelSpec; default: the built-in small GPT).
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Serve the newest complete checkpoint a `run` wrote here (its run directory or
    /// --checkpoint-url) instead of the model's initial weights.
    #[arg(long, value_name = "RUN_DIR|URL")]
    pub checkpoint: Option<String>,
    /// An S3-compatible endpoint for an s3:// --checkpoint.
    #[arg(long, value_name = "URL")]
    pub checkpoint_endpoint: Option<String>,
    /// Where the HTTP API listens (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub http: SocketAddr,
    /// Directory for worker identities and logs.
    #[arg(long, default_value = "out/serve")]
    pub run_dir: PathBuf,
    #[command(flatten)]
    /// The local worker processes.
    pub workers: LocalWorkerArgs,
    /// Seconds requests still in flight when the replay ends may take to finish.
    #[arg(long, default_value_t = 10.0)]
    pub drain_seconds: f64,
    /// Drive the server with the load generator at this many requests per second for the
    /// whole replay, and print the latency report.
    #[arg(long, value_name = "REQ/S")]
    pub load_rate: Option<f64>,
    /// Coefficient of variation of the load's Gamma inter-arrival times (1: Poisson).
    #[arg(long, default_value_t = 1.0)]
    pub load_cv: f64,
    /// Prompt tokens per generated request.
    #[arg(long, default_value_t = 8)]
    pub load_prompt_tokens: usize,
    /// Tokens each generated request asks for.
    #[arg(long, default_value_t = 16)]
    pub load_max_tokens: usize,
    /// Seed of the load (arrivals and prompts).
    #[arg(long, default_value_t = 1)]
    pub load_seed: u64,
    /// Write the report (engine counters, latencies, per mode) as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write every generated request's latencies as CSV here (with --compare: one file per
    /// mode, the mode's name added before the extension).
    #[arg(long)]
    pub csv: Option<PathBuf>,
    #[command(flatten)]
    /// Budgets of each policy call.
    pub sandbox: SandboxArgs,
}

/// One replay's outcome.
#[derive(Debug, Serialize)]
pub struct ServeOutcome {
    /// Its recovery mode.
    pub recovery: RecoveryMode,
    /// What the engine counted.
    pub engine: EngineStats,
    /// What the load generator measured, if it ran.
    pub load: Option<LoadReport>,
    /// What `bench-serve`'s model predicts of the same replay and requests (with a policy
    /// and a load).
    pub predicted: Option<Prediction>,
}

/// `parcae-host serve`.
pub fn run(args: &ServeArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: &ServeArgs) -> anyhow::Result<()> {
    if let Some(rate) = args.load_rate {
        anyhow::ensure!(rate.is_finite() && rate > 0.0, "--load-rate {rate}: must be a number > 0");
    }
    anyhow::ensure!(args.repeats >= 1, "--repeats must be at least 1");
    let modes = if args.compare.is_empty() { vec![args.recovery] } else { dedup(&args.compare) };
    let mut outcomes = Vec::new();
    for repeat in 0..args.repeats {
        for &mode in &modes {
            let outcome = serve_once(args, mode).await?;
            print_outcome(&outcome);
            if let (Some(csv), Some(load)) = (&args.csv, &outcome.load) {
                let path = if args.compare.is_empty() && args.repeats == 1 {
                    csv.clone()
                } else {
                    with_suffix(csv, &format!("{}-{}", mode_name(mode), repeat + 1))
                };
                load.write_csv(&path).with_context(|| format!("writing {}", path.display()))?;
                println!("  per-request latencies: {}", path.display());
            }
            outcomes.push(outcome);
        }
    }
    if outcomes.len() > 1 {
        println!("{}", compare_table(&modes, &outcomes));
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&outcomes)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("  report: {}", path.display());
    }
    Ok(())
}

fn dedup(modes: &[RecoveryMode]) -> Vec<RecoveryMode> {
    let mut out: Vec<RecoveryMode> = Vec::new();
    for m in modes {
        if !out.contains(m) {
            out.push(*m);
        }
    }
    out
}

fn mode_name(mode: RecoveryMode) -> &'static str {
    match mode {
        RecoveryMode::Token => "token",
        RecoveryMode::Restart => "restart",
        RecoveryMode::Reroute => "reroute",
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
    let ext = path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
    path.with_file_name(format!("{stem}-{suffix}{ext}"))
}

/// The weights the workers serve: the seed's, or a run's newest complete checkpoint.
async fn weights(args: &ServeArgs) -> anyhow::Result<(WeightSource, Option<Checkpoints>)> {
    let Some(url) = &args.checkpoint else { return Ok((WeightSource::Fresh, None)) };
    let url = if Path::new(url).is_dir() {
        std::path::absolute(url).with_context(|| format!("--checkpoint {url}"))?.display().to_string()
    } else {
        url.clone()
    };
    let checkpoints = Checkpoints::open(&url, args.checkpoint_endpoint.as_deref())
        .with_context(|| format!("--checkpoint {url}"))?;
    let latest = checkpoints
        .latest()
        .await
        .with_context(|| format!("--checkpoint {url}: reading its checkpoints"))?
        .ok_or_else(|| {
            anyhow::anyhow!("--checkpoint {url}: no complete checkpoint there (has a run written one?)")
        })?;
    println!("serving the checkpoint of step {} ({})", latest.step, checkpoints.location(&latest.prefix));
    let stages = latest
        .stages
        .iter()
        .enumerate()
        .map(|(i, layers)| {
            (parcae_cluster::job::JobCheckpoint::stage_prefix(&latest.prefix, i), layers.clone())
        })
        .collect();
    Ok((WeightSource::Checkpoint { stages }, Some(checkpoints)))
}

fn load_script(path: &Path) -> anyhow::Result<Vec<Option<ScriptedConfig>>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let script: Vec<Option<ScriptedConfig>> = serde_json::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "{}:{}:{}: not a serving script (a JSON array of {{\"dp\",\"tp\",\"pp\",\"batch\"}} or null): {e}",
            path.display(),
            e.line(),
            e.column()
        )
    })?;
    anyhow::ensure!(!script.is_empty(), "{}: the script has no intervals", path.display());
    for (i, c) in script.iter().enumerate() {
        if let Some(c) = c {
            anyhow::ensure!(
                c.dp >= 1 && c.tp >= 1 && c.pp >= 1 && c.batch >= 1,
                "{}: interval {i}: dp, tp, pp and batch must be at least 1",
                path.display()
            );
        }
    }
    Ok(script)
}

/// One replay of the trace in recovery mode `mode`.
async fn serve_once(args: &ServeArgs, mode: RecoveryMode) -> anyhow::Result<ServeOutcome> {
    let spec = ModelSpec::load(args.spec.as_deref())?;
    let (trace, scale) = args.replay.load()?;
    let series = trace.series(scale.trace_interval_ms)?;
    let intervals = args.replay.intervals.unwrap_or(series.len()).min(series.len());
    let end = scale.wall_interval * intervals as u32;
    let events: Vec<TimedEvent> =
        timeline(&trace, scale, &args.replay.unannounced).into_iter().filter(|e| e.at < end).collect();
    let grace = args.replay.grace(&scale);
    let (weights, checkpoints) = weights(args).await?;

    // What the policy plans with, kept for the prediction at the end.
    let mut planned: Option<Planned> = None;
    let chooser = match &args.script {
        Some(path) => Chooser::Script(load_script(path)?),
        None => {
            let profile_data = match &args.profile {
                Some(path) => ServingProfileData::load(path)?,
                None => ServingProfileData::from_json(WORKER_SERVING_PROFILE.1, WORKER_SERVING_PROFILE.0)?,
            };
            let profile = profile_data.serving_profile();
            let workload = parcae_serving_core::Workload {
                input_tokens: args.load_prompt_tokens as u32,
                output_tokens: args.load_max_tokens as u32,
            };
            let max_fleet = series.intervals.iter().map(|s| s.instances).max().unwrap_or(1).max(1);
            let fastest = shapes(&profile, max_fleet * profile.gpus_per_instance, &workload)
                .iter()
                .map(|(_, e)| e.latency_ms)
                .fold(f64::INFINITY, f64::min);
            let slo_ms = match args.slo_seconds {
                Some(s) => {
                    anyhow::ensure!(s.is_finite() && s > 0.0, "--slo-seconds {s}: must be a number > 0");
                    s * 1000.0
                }
                None if fastest.is_finite() => 5.0 * fastest,
                None => anyhow::bail!(
                    "the serving profile has no configuration for this fleet: give --slo-seconds"
                ),
            };
            let runtime = args.sandbox.runtime()?;
            let policy =
                load_serving(&args.policy, &runtime).with_context(|| format!("loading {}", args.policy))?;
            planned = Some(Planned { data: profile_data, workload, slo_ms });
            Chooser::Policy {
                policy: Box::new(policy),
                profile,
                workload,
                slo_ms,
                expected_rate: args.load_rate,
            }
        }
    };

    let run_dir = args.run_dir.join(mode_name(mode));
    crate::workers::prepare_run_dir(&run_dir)?;
    let command_timeout = args.workers.command_timeout()?;
    let store = match &checkpoints {
        Some(c) => c.for_workers(),
        None => Checkpoints::open(
            &std::path::absolute(&run_dir).context("locating the run directory")?.display().to_string(),
            None,
        )?
        .for_workers(),
    };
    let mut local = LocalServing::start(LocalOptions {
        listen: args.workers.listen,
        worker_bin: args.workers.worker_bin.as_deref(),
        run_dir: &run_dir,
        device: &args.workers.device,
        command_timeout,
        store,
    })?;

    // The HTTP front end, talking to the engine through a bounded job queue.
    let (jobs_tx, mut jobs) = mpsc::channel(1024);
    let (status_tx, status) = watch::channel(EngineStatus::Starting);
    let handle = EngineHandle { jobs: jobs_tx, status: status.clone(), model: ModelCard::of(&spec) };
    let listener = tokio::net::TcpListener::bind(args.http)
        .await
        .with_context(|| format!("--http {}: cannot listen", args.http))?;
    let http_addr = listener.local_addr()?;
    println!("serving ({}) at http://{http_addr}/v1/completions", mode_name(mode));
    let (stop_http, stopped) = tokio::sync::oneshot::channel::<()>();
    let http = tokio::spawn(crate::serving::http::serve_http(listener, handle, async {
        let _ = stopped.await;
    }));

    // The cloud plays the trace; the load (if any) starts once the engine serves.
    let start = Instant::now();
    let (load_started_tx, load_started) = tokio::sync::oneshot::channel::<Duration>();
    let load = args.load_rate.map(|rate| {
        let spec = LoadSpec {
            url: format!("http://{http_addr}"),
            rate,
            cv: args.load_cv,
            requests: usize::MAX,
            duration: end,
            prompt_tokens: args.load_prompt_tokens,
            prompt: None,
            max_tokens: args.load_max_tokens,
            temperature: 0.0,
            vocab: spec.vocab,
            seed: args.load_seed,
        };
        let mut status = status.clone();
        tokio::spawn(async move {
            until_ready(&mut status).await;
            // The load ends with the replay, not a start-up's length later.
            let _ = load_started_tx.send(start.elapsed());
            let spec = LoadSpec { duration: end.saturating_sub(start.elapsed()), ..spec };
            run_load(&spec).await
        })
    });
    let settings = EngineSettings {
        spec: spec.clone(),
        weights,
        recovery: mode,
        scale,
        intervals,
        grace,
        command_timeout,
        drain: Duration::from_secs_f64(args.drain_seconds.max(0.0)),
        chooser,
    };
    info!(intervals, ?grace, recovery = mode_name(mode), "serving starts");
    let stats = local.serve(settings, events, grace, start, &mut jobs, status_tx).await;
    let load = match load {
        Some(task) => Some(task.await.context("the load generator")??),
        None => None,
    };
    let _ = stop_http.send(());
    let _ = http.await;
    local.close().await;
    let predicted = match (&planned, &load, load_started.await) {
        (Some(planned), Some(load), Ok(offset)) => {
            let replay = Replayed { series: &series, intervals, scale, grace, offset };
            // The measurement stands whatever the prediction does.
            predict(args, planned, &replay, load)
                .inspect_err(|e| warn!("predicting the run with bench-serve's model: {e:#}"))
                .ok()
        }
        _ => None,
    };
    Ok(ServeOutcome { recovery: mode, engine: stats, load, predicted })
}

/// The serving profile, workload and objective the policy planned with.
struct Planned {
    data: ServingProfileData,
    workload: parcae_serving_core::Workload,
    slo_ms: f64,
}

/// The replay as it ran: the trace's intervals at wall-clock length and when the load began.
struct Replayed<'a> {
    series: &'a parcae_traces::IntervalSeries,
    intervals: usize,
    scale: TimeScale,
    grace: Duration,
    /// From the replay's start to the load's first moment.
    offset: Duration,
}

/// What `bench-serve`'s model predicted of this run, next to what the load generator measured.
#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    /// Requests simulated: the ones the server accepted, at the times they were sent.
    pub requests: usize,
    /// Completed in the simulation.
    pub completed: usize,
    /// Reconfigurations in the simulation.
    pub reconfigurations: u32,
    /// Simulated end-to-end latency percentiles, seconds.
    pub e2e_p50: f64,
    /// 90th percentile.
    pub e2e_p90: f64,
    /// 99th percentile.
    pub e2e_p99: f64,
    /// Simulated over measured (the load generator's), minus 1, per percentile: the
    /// prediction's error relative to what was measured (-0.2: 20% low).
    pub error_p50: f64,
    /// At P90.
    pub error_p90: f64,
    /// At P99.
    pub error_p99: f64,
}

/// Replays the run through the serving simulator (`bench-serve`'s model): the trace's
/// fleet at the run's wall-clock interval and notice, the requests the server accepted at
/// the times they were sent, the same policy, profile (its contention included), workload
/// and objective, deciding once per interval on the fleet now (the engine's horizon).
fn predict(
    args: &ServeArgs,
    planned: &Planned,
    replay: &Replayed<'_>,
    load: &LoadReport,
) -> anyhow::Result<Prediction> {
    let k = replay.intervals.min(replay.series.intervals.len());
    let fleet = Fleet {
        instances: replay.series.intervals[..k].iter().map(|s| s.instances).collect(),
        preemptions: replay.series.intervals[..k].iter().map(|s| s.preemptions).collect(),
        arrivals: replay.series.intervals[..k].iter().map(|s| s.arrivals).collect(),
        interval_ms: replay.scale.wall_interval_ms().max(1),
        notice_ms: replay.grace.as_secs_f64() * 1000.0,
    };
    let offset_ms = replay.offset.as_secs_f64() * 1000.0;
    let mut arrivals: Vec<f64> = load
        .rows
        .iter()
        .filter(|r| r.outcome != RequestOutcome::Rejected)
        .map(|r| offset_ms + r.sent_at_s * 1000.0)
        .collect();
    arrivals.sort_by(f64::total_cmp);
    let setup = ServeSetup {
        profile: planned.data.serving_profile(),
        workload: planned.workload,
        latency_slo_ms: planned.slo_ms,
        horizon: 1,
        spot_price_per_hour: planned.data.data().instance.spot_usd_per_hour,
        on_demand_price_per_hour: planned.data.data().instance.on_demand_usd_per_hour,
        machine: super::bench_serve::shared_machine(&planned.data),
    };
    let runtime = args.sandbox.runtime()?;
    let mut policy =
        load_serving(&args.policy, &runtime).with_context(|| format!("loading {}", args.policy))?;
    let outcome =
        parcae_serve_sim::simulate(&setup, &fleet, &arrivals, Recovery::TokenLevel, &mut |request| {
            Ok(policy.configure(request).value)
        })?;
    let s = &outcome.summary;
    let measured = &load.summary.e2e;
    let error = |m: f64, p_ms: f64| (p_ms / 1000.0) / m - 1.0;
    Ok(Prediction {
        requests: s.requests,
        completed: s.completed,
        reconfigurations: s.reconfigurations,
        e2e_p50: s.p50_ms / 1000.0,
        e2e_p90: s.p90_ms / 1000.0,
        e2e_p99: s.p99_ms / 1000.0,
        error_p50: error(measured.p50, s.p50_ms),
        error_p90: error(measured.p90, s.p90_ms),
        error_p99: error(measured.p99, s.p99_ms),
    })
}

fn print_outcome(outcome: &ServeOutcome) {
    let e = &outcome.engine;
    println!(
        "{}: {} accepted, {} completed, {} failed, {} cancelled by their client; {} tokens in {} iterations ({} failed)",
        mode_name(outcome.recovery),
        e.accepted,
        e.completed,
        e.failed,
        e.cancelled,
        e.tokens,
        e.iterations,
        e.failed_iterations
    );
    let causes: Vec<String> = e.reconfigurations.iter().map(|(k, v)| format!("{v} on {k}")).collect();
    println!(
        "  reconfigurations: {} ({:.0} ms in all); {} requests migrated ({} KV bytes), {} requeued, {} recomputed, {} tokens regenerated",
        causes.join(", "),
        e.reconfigure_ms,
        e.migrated_requests,
        e.kv_bytes_moved,
        e.requeued_requests,
        e.recomputed_requests,
        e.regenerated_tokens
    );
    if let Some(load) = &outcome.load {
        println!("{}", load.table());
    }
    if let (Some(p), Some(load)) = (&outcome.predicted, &outcome.load) {
        let m = &load.summary.e2e;
        println!(
            "  bench-serve's model of this run ({} requests, {} reconfigurations): E2E P50 {:.4} s (measured {:.4}, {:+.1}%), \
             P90 {:.4} s (measured {:.4}, {:+.1}%), P99 {:.4} s (measured {:.4}, {:+.1}%)",
            p.requests,
            p.reconfigurations,
            p.e2e_p50,
            m.p50,
            100.0 * p.error_p50,
            p.e2e_p90,
            m.p90,
            100.0 * p.error_p90,
            p.e2e_p99,
            m.p99,
            100.0 * p.error_p99
        );
    }
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// The modes side by side: each mode's median latency percentiles over its replays, its
/// P99's ratio to the first mode's, and the requests reconfigurations caught in flight
/// (pooled over the replays).
fn compare_table(modes: &[RecoveryMode], outcomes: &[ServeOutcome]) -> String {
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_BORDERS_ONLY);
    table.set_header(vec![
        "recovery",
        "replays",
        "completed",
        "failed",
        "TTFT P50 s",
        "E2E P50 s",
        "E2E P90 s",
        "E2E P99 s",
        "P99 / first",
        "caught in flight",
        "their mean E2E s",
        "their max E2E s",
    ]);
    let of = |mode: RecoveryMode| -> Vec<(&LatencySummary, &EngineStats)> {
        outcomes
            .iter()
            .filter(|o| o.recovery == mode)
            .filter_map(|o| o.load.as_ref().map(|l| (&l.summary, &o.engine)))
            .collect()
    };
    let p99 = |runs: &[(&LatencySummary, &EngineStats)]| {
        median(&runs.iter().map(|(s, _)| s.e2e.p99).collect::<Vec<_>>())
    };
    let first = modes.first().map(|m| p99(&of(*m)));
    for &mode in modes {
        let runs = of(mode);
        if runs.is_empty() {
            continue;
        }
        let med =
            |f: &dyn Fn(&LatencySummary) -> f64| median(&runs.iter().map(|(s, _)| f(s)).collect::<Vec<_>>());
        let caught: Vec<f64> = runs.iter().flat_map(|(_, e)| e.disrupted_latencies.iter().copied()).collect();
        table.add_row(vec![
            mode_name(mode).to_string(),
            runs.len().to_string(),
            runs.iter().map(|(s, _)| s.completed).sum::<usize>().to_string(),
            runs.iter().map(|(s, _)| s.failed).sum::<usize>().to_string(),
            format!("{:.3}", med(&|s| s.ttft.p50)),
            format!("{:.3}", med(&|s| s.e2e.p50)),
            format!("{:.3}", med(&|s| s.e2e.p90)),
            format!("{:.3}", p99(&runs)),
            first.map_or("-".to_string(), |f| format!("{:.2}x", p99(&runs) / f)),
            caught.len().to_string(),
            mean(&caught).map_or("-".into(), |m| format!("{m:.3}")),
            caught.iter().copied().reduce(f64::max).map_or("-".into(), |m| format!("{m:.3}")),
        ]);
    }
    table.to_string()
}
