//! `parcae-host profile-serving`: measures the serving deployment `serve` runs (local
//! worker processes, QUIC between stages, the host's engine loop and its round trip, f64
//! compute, every process sharing this machine's cores) and writes the serving profile
//! that `serve`'s policy and `bench-serve` read.
//!
//! Why not `parcae-worker profile-serving` alone: that times one process's layers on an
//! idle core. A real iteration also pays the host's command round trip, the stages' hops
//! and, with several replicas, their contention for the cores; on this machine those are
//! most of an iteration. So this runs the real engine on a constant fleet through a script
//! of configurations, keeps every replica's batch full with streaming HTTP clients on its
//! OpenAI-compatible front end (a closed loop: each client sends its next request when its
//! last one ends, so the front end's cost per token is in every iteration), reads the
//! engine's iteration times and fits the profile's terms to them:
//! - per-layer decode and prefill times at each batch size: a one-replica, one-stage
//!   iteration over the layers (the host round trip is spread over them, so the latency
//!   model's `layers x per-layer` is the measured iteration);
//! - the pipeline hop: the extra time per added stage, least squares over every depth;
//! - contention: the iteration with `n` replicas busy over the one with one, for every `n`
//!   up to the fleet and every batch size (the serving simulator applies it; policies plan
//!   without it);
//! - light load: a last phase sends requests one at a time (an open loop at a fraction of
//!   one replica's capacity) to all the replicas, as a lightly loaded `serve` does; its
//!   processes sleep between requests and wake for each, so its iterations take longer
//!   than the saturated walk's. The extra time per prefill and per decode step is the
//!   profile's `light_load`;
//! - reinit: the median live reconfiguration of the walk.
//!
//! The profile also records that the engine iterates its replicas in lock step (one host
//! drives them all), so that the simulator holds a replica's step up for another's prefill.
//!
//! The rest (memory, storage and transfer rates, process start) comes from a base profile
//! that `parcae-worker profile-serving` measures first for the same model (or `--base`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use comfy_table::{Table, presets};
use parcae_cluster::ModelSpec;
use parcae_cluster::serving::WeightSource;
use parcae_profile::{
    BatchContention, ContentionEntry, LightLoadEntry, PipelineHop, ServingProfileData, TimingEntry,
    WorkloadEntry,
};
use tokio::sync::{mpsc, watch};

use crate::args::LocalWorkerArgs;
use crate::checkpoints::Checkpoints;
use crate::processes::{run_child, worker_bin};
use crate::serving::api::{EngineHandle, EngineStatus, ModelCard, until_ready};
use crate::serving::engine::{
    Chooser, EngineSettings, IterationGroup, IterationKey, RecoveryMode, ScriptedConfig,
};
use crate::serving::loadgen::{LoadSpec, RequestOutcome, run_closed_loop, run_load};
use crate::serving::local::{LocalOptions, LocalServing};
use crate::stats::median;
use crate::workers::TimedEvent;
use crate::workers::timeline::{FleetEvent, TimeScale};

/// Options of `parcae-host profile-serving`.
#[derive(Debug, Args)]
pub struct ProfileServingArgs {
    /// Where to write the serving profile.
    #[arg(long, default_value = "out/serving-deployment-profile.json")]
    pub out: PathBuf,
    /// Worker processes (instances of one device each): the largest fleet measured.
    #[arg(long, default_value_t = 8)]
    pub instances: usize,
    /// Seconds each configuration of the walk serves.
    #[arg(long, default_value_t = 3.0)]
    pub seconds_per_config: f64,
    /// Passes over the walk (the second in reverse order, so each configuration is timed
    /// at two moments apart).
    #[arg(long, default_value_t = 2)]
    pub passes: usize,
    /// Batch sizes to measure, comma-separated: each alone and beside up to `--instances`
    /// replicas; the middle one is used for the pipeline depths. With 1 among them, a
    /// light-load phase is measured too.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub batches: Vec<usize>,
    /// Prompt tokens of every request (the profile's prefill length).
    #[arg(long, default_value_t = 8)]
    pub prompt_tokens: usize,
    /// Tokens every request generates.
    #[arg(long, default_value_t = 16)]
    pub max_tokens: usize,
    /// The profile the measured terms replace theirs in (memory, storage and transfer
    /// rates, process start; default: measured first by `parcae-worker profile-serving`
    /// for the same model).
    #[arg(long, value_name = "FILE")]
    pub base: Option<PathBuf>,
    /// Model (JSON, the fields of the worker's ModelSpec; default: the built-in small GPT).
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// The model's name in the profile (default: the base profile's).
    #[arg(long)]
    pub model_name: Option<String>,
    /// Directory for worker identities and logs.
    #[arg(long, default_value = "out/profile-serving")]
    pub run_dir: PathBuf,
    #[command(flatten)]
    /// The local worker processes.
    pub workers: LocalWorkerArgs,
}

/// `parcae-host profile-serving`.
pub fn run(args: &ProfileServingArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(run_async(args))
}

/// The configurations walked: the batch sizes alone, the pipeline depths at the middle
/// batch and the replica counts at every batch.
fn walk(args: &ProfileServingArgs, batches: &[usize], layers: usize, mid: usize) -> Vec<ScriptedConfig> {
    let one = |dp, pp, batch| ScriptedConfig { dp, tp: 1, pp, batch };
    let mut configs: Vec<ScriptedConfig> = batches.iter().map(|&b| one(1, 1, b)).collect();
    configs.extend(depths(layers, args.instances).map(|pp| one(1, pp, mid)));
    for &b in batches {
        configs.extend((2..=args.instances).map(|dp| one(dp, 1, b)));
    }
    configs
}

/// Fraction of one replica's time the light-load phase keeps it busy, by the base profile's
/// (one process, optimistic) estimate of a request: low enough that requests rarely meet.
const LIGHT_UTILISATION: f64 = 0.1;
/// Requests the light-load phase aims to time.
const LIGHT_REQUESTS: f64 = 40.0;

/// The light-load phase: its arrival rate (requests/s) and how many intervals it lasts
/// (2 to 20). `request_ms` is the base profile's estimate of one request.
fn light_phase(request_ms: f64, seconds_per_config: f64) -> (f64, usize) {
    let rate = LIGHT_UTILISATION / (request_ms.max(1e-3) / 1000.0);
    let intervals = (LIGHT_REQUESTS / rate / seconds_per_config).ceil().clamp(2.0, 20.0) as usize;
    (rate, intervals)
}

/// The pipeline depths measured: every depth above 1 that divides the layers evenly (so the
/// stages are equal) and fits the fleet.
fn depths(layers: usize, instances: usize) -> impl Iterator<Item = usize> {
    (2..=layers.min(instances)).filter(move |pp| layers.is_multiple_of(*pp))
}

async fn run_async(args: &ProfileServingArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.instances >= 1, "--instances must be at least 1");
    anyhow::ensure!(args.passes >= 1, "--passes must be at least 1");
    anyhow::ensure!(
        args.seconds_per_config.is_finite() && args.seconds_per_config >= 0.5,
        "--seconds-per-config {}: must be at least 0.5",
        args.seconds_per_config
    );
    anyhow::ensure!(!args.batches.is_empty(), "--batches: give at least one batch size");
    anyhow::ensure!(args.batches.iter().all(|&b| b >= 1), "--batches: every batch size must be at least 1");
    let spec = ModelSpec::load(args.spec.as_deref())?;
    anyhow::ensure!(
        args.prompt_tokens >= 1
            && args.max_tokens >= 2
            && args.prompt_tokens + args.max_tokens <= spec.seq_len,
        "--prompt-tokens {} and --max-tokens {}: need a prompt of at least 1 token and at least 2 tokens \
         generated, together within the model's {}-token context",
        args.prompt_tokens,
        args.max_tokens,
        spec.seq_len
    );
    crate::workers::prepare_run_dir(&args.run_dir)?;
    let base = match &args.base {
        Some(path) => ServingProfileData::load(path)?,
        None => {
            // One process's layers, the QUIC hop and transfer, weight loading and process
            // start, for this model on this machine.
            let path = args.run_dir.join("worker-serving-profile.json");
            eprintln!(
                "profile-serving: one worker's layers, transfers and start (parcae-worker profile-serving)"
            );
            let mut worker = Command::new(worker_bin(args.workers.worker_bin.as_deref())?);
            worker
                .args(["profile-serving", "--input-tokens", &args.prompt_tokens.to_string(), "--out"])
                .arg(&path);
            if let Some(spec) = &args.spec {
                worker.arg("--spec").arg(spec);
            }
            if let Some(name) = &args.model_name {
                worker.args(["--model-name", name]);
            }
            worker.stdout(std::process::Stdio::null());
            run_child(&mut worker, "parcae-worker profile-serving")?;
            ServingProfileData::load(&path)?
        }
    };
    let layers = spec.n_blocks;
    anyhow::ensure!(
        base.data().layers as usize == layers,
        "{}: the base profile has {} layers, the model {layers}",
        base.file().display(),
        base.data().layers
    );
    let mut batches = args.batches.clone();
    batches.sort_unstable();
    batches.dedup();
    let mid = batches[(batches.len() - 1) / 2];

    // The script: a warm-up interval, then the walk, forth and back.
    let configs = walk(args, &batches, layers, mid);
    let mut script = vec![Some(ScriptedConfig { dp: 1, tp: 1, pp: 1, batch: mid })];
    for pass in 0..args.passes {
        let mut order = configs.clone();
        if pass % 2 == 1 {
            order.reverse();
        }
        script.extend(order.into_iter().map(Some));
    }
    let walked = script.len();
    // The light-load phase: every replica at batch 1, requests one at a time.
    let core = base.serving_profile();
    // The base profile's smallest batch on one rank (a validated profile has one) prices a
    // request; only its order of magnitude matters.
    let smallest = core.timings.iter().filter(|t| t.tensor_parallel == 1).min_by_key(|t| t.batch_size);
    let light = smallest.filter(|_| batches.contains(&1)).map(|one| {
        let request_ms = layers as f64 * (one.prefill_ms + (args.max_tokens - 1) as f64 * one.decode_ms);
        light_phase(request_ms, args.seconds_per_config)
    });
    if let Some((_, n)) = light {
        let all = ScriptedConfig { dp: args.instances, tp: 1, pp: 1, batch: 1 };
        script.extend(std::iter::repeat_n(Some(all), n));
    }
    let intervals = script.len();
    let scale = TimeScale {
        trace_interval_ms: 60_000,
        wall_interval: Duration::from_secs_f64(args.seconds_per_config),
    };
    let events: Vec<TimedEvent> = (1..=args.instances)
        .map(|i| TimedEvent { at: Duration::ZERO, event: FleetEvent::Allocate { node: format!("node{i}") } })
        .collect();
    eprintln!(
        "profile-serving: {} configurations x {} passes, {} s each, then {} at light load, on {} worker \
         processes (about {:.0} s)",
        configs.len(),
        args.passes,
        args.seconds_per_config,
        light.map_or_else(|| "none (no batch 1 measured)".to_string(), |(_, n)| format!("{n} intervals")),
        args.instances,
        intervals as f64 * args.seconds_per_config + 5.0
    );

    let command_timeout = args.workers.command_timeout()?;
    let store = Checkpoints::open(
        &std::path::absolute(&args.run_dir).context("locating the run directory")?.display().to_string(),
        None,
    )?
    .for_workers();
    let mut local = LocalServing::start(LocalOptions {
        listen: args.workers.listen,
        worker_bin: args.workers.worker_bin.as_deref(),
        run_dir: &args.run_dir,
        device: &args.workers.device,
        command_timeout,
        store,
    })?;
    let settings = EngineSettings {
        spec: spec.clone(),
        weights: WeightSource::Fresh,
        recovery: RecoveryMode::Token,
        scale,
        intervals,
        grace: Duration::ZERO,
        command_timeout,
        drain: Duration::from_secs(1),
        chooser: Chooser::Script(script),
    };
    // The front end `serve` has, with twice as many streaming clients as the widest
    // configuration holds requests, so an idle replica always finds a batch.
    let clients = 2 * configs.iter().map(|c| c.dp * c.batch).max().unwrap_or(1);
    let (jobs_tx, mut jobs) = mpsc::channel(clients.max(1));
    let (status_tx, status) = watch::channel(EngineStatus::Starting);
    let handle = EngineHandle { jobs: jobs_tx, status: status.clone(), model: ModelCard::of(&spec) };
    let listener =
        tokio::net::TcpListener::bind("127.0.0.1:0").await.context("binding the HTTP front end")?;
    let url = format!("http://{}", listener.local_addr()?);
    let (stop_http, stopped) = tokio::sync::oneshot::channel::<()>();
    let http = tokio::spawn(crate::serving::http::serve_http(listener, handle, async {
        let _ = stopped.await;
    }));
    let start = Instant::now();
    let end = scale.wall_interval * intervals as u32;
    let walk_end = scale.wall_interval * walked as u32;
    let load = LoadSpec {
        url,
        rate: 1.0,
        cv: 1.0,
        requests: usize::MAX,
        duration: end,
        prompt_tokens: args.prompt_tokens,
        prompt: None,
        max_tokens: args.max_tokens,
        temperature: 0.0,
        vocab: spec.vocab,
        seed: 7,
    };
    let load = tokio::spawn(async move {
        let mut status = status;
        until_ready(&mut status).await;
        let closed = LoadSpec { duration: walk_end.saturating_sub(start.elapsed()), ..load.clone() };
        // (Requests still queued when the walk ends fail by design: the clients keep every
        // replica full to the last moment.)
        let _ = run_closed_loop(&closed, clients).await;
        let Some((rate, _)) = light else { return anyhow::Ok(None) };
        tokio::time::sleep_until((start + walk_end).into()).await;
        let open = LoadSpec { rate, duration: end.saturating_sub(start.elapsed()), seed: 8, ..load };
        let report = run_load(&open).await?;
        let e2e: Vec<f64> = report
            .rows
            .iter()
            .filter(|r| r.outcome == RequestOutcome::Completed && r.tokens == open.max_tokens)
            .filter_map(|r| r.e2e_s.map(|s| s * 1000.0))
            .collect();
        anyhow::Ok((!e2e.is_empty()).then(|| LightRequests {
            e2e_median_ms: median(&e2e),
            requests: e2e.len(),
            tokens: open.max_tokens,
        }))
    });
    let stats = local.serve(settings, events, Duration::ZERO, start, &mut jobs, status_tx).await;
    let light_requests = load.await.context("the load generator panicked")?;
    let _ = stop_http.send(());
    let _ = http.await;
    local.close().await;
    let light_requests = light_requests.context("the light-load phase's requests")?;
    anyhow::ensure!(
        stats.failed_iterations == 0,
        "the profiling run had {} failed iterations: see the worker logs in {}",
        stats.failed_iterations,
        args.run_dir.display()
    );

    let groups = stats.iteration_times.groups();
    if light.is_some() && light_requests.is_none() {
        anyhow::bail!(
            "light load: no request of the light-load phase completed; see the worker logs in {}",
            args.run_dir.display()
        );
    }
    let fit = fit(&groups, &batches, mid, layers, args.instances, light_requests)?;
    let reinit = median(
        &stats
            .configurations
            .iter()
            .skip(1)
            .filter(|c| c.cause == "interval")
            .map(|c| c.millis)
            .collect::<Vec<_>>(),
    );
    println!("{}", fit.table());

    let mut data = base.data().clone();
    let name = args.model_name.clone().unwrap_or(data.model.clone());
    data.source = Some(format!(
        "measured by `parcae-host profile-serving` on this machine ({cores} cores): the real serving \
         engine on {n} local worker processes (QUIC between processes, f64 compute, the host's round trip), \
         every replica kept full by a closed loop of streaming HTTP clients sending {p}-token prompts that generate {t} tokens; {walked} \
         configurations x {passes} passes of {secs} s, medians of {iters} iterations. layer_timings: the \
         one-replica, one-stage iteration over the {layers} layers (the host round trip spread over them); \
         pipeline_hop_ms: the extra time per added stage at batch {mid}, least squares over every depth; \
         contention: the iteration with n replicas busy over one (slowdown_by_busy_replicas at batch {mid}, \
         by_batch at each); light_load: {light}; reconfiguration.reinit_ms: the median live reconfiguration of the walk. Memory, storage and transfer rates, process start: from {base}.",
        cores = std::thread::available_parallelism().map_or(0, |n| n.get()),
        n = args.instances,
        p = args.prompt_tokens,
        t = args.max_tokens,
        walked = configs.len(),
        passes = args.passes,
        secs = args.seconds_per_config,
        iters = stats.iterations,
        base = base.file().display(),
        light = match light {
            Some((rate, n)) => format!(
                "{n} intervals of {rate:.1} requests/s (Poisson) to {} replicas of batch 1, the decode \
                 step with nobody waiting less the walk's at batch 1 alone, and the rest of a request alone \
                 (the median at its client) beyond the walk's iterations charged to its prefill; its \
                 slowdown_by_busy_replicas: its decode step with n replicas busy over one, as far as requests met",
                args.instances
            ),
            None => "not measured (no batch 1)".to_string(),
        },
    ));
    data.model = name;
    data.profiled_input_tokens = args.prompt_tokens as u32;
    data.pipeline_hop_ms =
        PipelineHop { prefill: round4(fit.hop_prefill_ms), decode: round4(fit.hop_decode_ms) };
    data.layer_timings = fit
        .per_batch
        .iter()
        .map(|(&batch, t)| TimingEntry {
            tp: 1,
            batch: batch as u32,
            prefill_ms: round4(t.prefill_ms / layers as f64).max(1e-4),
            decode_ms: round4(t.decode_ms / layers as f64).max(1e-4),
        })
        .collect();
    if reinit.is_finite() {
        data.reconfiguration.reinit_ms = round4(reinit);
    }
    data.workload = Some(WorkloadEntry {
        input_tokens: args.prompt_tokens as u32,
        output_tokens: args.max_tokens as u32,
    });
    let table = |t: &[f64]| t.iter().map(|&s| round4(s)).collect::<Vec<_>>();
    data.contention = Some(ContentionEntry {
        slowdown_by_busy_replicas: table(&fit.slowdown[&mid]),
        by_batch: fit
            .slowdown
            .iter()
            .map(|(&batch, t)| BatchContention { batch: batch as u32, slowdown_by_busy_replicas: table(t) })
            .collect(),
        // `serve`'s engine: one host drives every replica, an iteration at a time.
        lockstep: true,
    });
    data.light_load = fit.light.as_ref().map(|l| LightLoadEntry {
        prefill_extra_ms: round4(l.prefill_extra_ms),
        decode_extra_ms: round4(l.decode_extra_ms),
        slowdown_by_busy_replicas: table(&l.slowdown),
    });
    let text = serde_json::to_string_pretty(&data)? + "\n";
    ServingProfileData::from_json(&text, &args.out)
        .context("the measured profile does not validate (a bug: please report it)")?;
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&args.out, text).with_context(|| format!("writing {}", args.out.display()))?;
    println!("serving profile: {}", args.out.display());
    Ok(())
}

/// Median iteration times of one batch size, one replica, one stage.
#[derive(Debug, Clone, Copy)]
struct BatchTimes {
    prefill_ms: f64,
    decode_ms: f64,
    iterations: usize,
}

/// What the light-load phase's clients measured.
#[derive(Debug, Clone, Copy)]
struct LightRequests {
    /// Median end-to-end latency of its completed requests (nearly all alone), ms.
    e2e_median_ms: f64,
    requests: usize,
    /// Tokens each generated.
    tokens: usize,
}

/// The light-load extras. A decode step: the engine's batch-1 step with nobody waiting less
/// the saturated one. A prefill: the rest of what a request alone took at its client
/// beyond the saturated iterations and the decode extras, so that the simulator's request
/// alone takes what the measured one took (the HTTP front end, the engine waking for the
/// request and its first iteration on a cold replica are all in it).
#[derive(Debug, Clone)]
struct LightFit {
    requests: LightRequests,
    prefill_ms: f64,
    decode_ms: f64,
    prefill_extra_ms: f64,
    decode_extra_ms: f64,
    /// Its decode step with `i + 1` replicas busy over the one with one, as far as the
    /// phase met enough of them.
    slowdown: Vec<f64>,
    /// Those steps, ms.
    by_busy: Vec<(usize, f64)>,
}

/// The profile's terms fitted to the iteration times.
#[derive(Debug)]
struct Fit {
    per_batch: BTreeMap<usize, BatchTimes>,
    hop_decode_ms: f64,
    hop_prefill_ms: f64,
    /// Measured decode iteration per pipeline depth at the middle batch (depth 1 included).
    by_depth: Vec<(usize, f64)>,
    /// Per batch size, entry `i`: `i + 1` replicas busy, over one.
    slowdown: BTreeMap<usize, Vec<f64>>,
    /// Measured decode iteration per batch size and busy replica count.
    by_busy: BTreeMap<usize, Vec<(usize, f64)>>,
    light: Option<LightFit>,
    mid: usize,
}

/// The group of full-batch iterations of `key`'s kind, if it was measured often enough.
/// `queued`: the saturated walk (requests waiting), or the light-load phase (none).
fn group(
    groups: &[IterationGroup],
    pp: usize,
    batch: usize,
    busy: usize,
    prefill: bool,
    queued: bool,
) -> Option<&IterationGroup> {
    let key = IterationKey { tp: 1, pp, batch, largest: batch, busy, prefill, queued };
    groups.iter().find(|g| g.key == key && g.count >= if prefill { 3 } else { 10 })
}

fn fit(
    groups: &[IterationGroup],
    batches: &[usize],
    mid: usize,
    layers: usize,
    instances: usize,
    light: Option<LightRequests>,
) -> anyhow::Result<Fit> {
    let mut per_batch = BTreeMap::new();
    for &b in batches {
        let (Some(decode), Some(prefill)) =
            (group(groups, 1, b, 1, false, true), group(groups, 1, b, 1, true, true))
        else {
            anyhow::bail!(
                "batch {b}: too few full-batch iterations measured; give --seconds-per-config more time"
            );
        };
        per_batch.insert(
            b,
            BatchTimes {
                prefill_ms: prefill.median_ms,
                decode_ms: decode.median_ms,
                iterations: decode.count + prefill.count,
            },
        );
    }
    let base = per_batch[&mid];
    // The hop: least squares through the origin of the extra time over the extra stages.
    let (mut num_d, mut num_p, mut den) = (0.0, 0.0, 0.0);
    let mut by_depth = vec![(1, base.decode_ms)];
    for pp in depths(layers, instances) {
        let (Some(d), Some(p)) =
            (group(groups, pp, mid, 1, false, true), group(groups, pp, mid, 1, true, true))
        else {
            anyhow::bail!("pipeline depth {pp}: too few iterations measured");
        };
        let extra = (pp - 1) as f64;
        num_d += extra * (d.median_ms - base.decode_ms);
        num_p += extra * (p.median_ms - base.prefill_ms);
        den += extra * extra;
        by_depth.push((pp, d.median_ms));
    }
    let (hop_decode_ms, hop_prefill_ms) =
        if den > 0.0 { ((num_d / den).max(0.0), (num_p / den).max(0.0)) } else { (0.0, 0.0) };
    let mut slowdown = BTreeMap::new();
    let mut by_busy = BTreeMap::new();
    for (&b, alone) in &per_batch {
        let mut table = vec![1.0];
        let mut measured = vec![(1, alone.decode_ms)];
        for n in 2..=instances {
            let Some(g) = group(groups, 1, b, n, false, true) else {
                anyhow::bail!("{n} replicas busy at batch {b}: too few iterations measured");
            };
            table.push((g.median_ms / alone.decode_ms).max(1.0));
            measured.push((n, g.median_ms));
        }
        slowdown.insert(b, table);
        by_busy.insert(b, measured);
    }
    let light = if let Some(requests) = light {
        let (Some(decode), Some(prefill)) =
            (group(groups, 1, 1, 1, false, false), group(groups, 1, 1, 1, true, false))
        else {
            anyhow::bail!(
                "light load: too few iterations with nobody waiting measured; give --seconds-per-config more time"
            );
        };
        let Some(saturated) = per_batch.get(&1) else {
            anyhow::bail!("light load: batch 1 was not measured saturated");
        };
        let decode_extra_ms = (decode.median_ms - saturated.decode_ms).max(0.0);
        let steps = requests.tokens.saturating_sub(1) as f64;
        let prefill_extra_ms =
            (requests.e2e_median_ms - saturated.prefill_ms - steps * (saturated.decode_ms + decode_extra_ms))
                .max(0.0);
        // Requests sent one at a time still meet now and then: as far as they met often
        // enough, how they slowed each other.
        let by_busy: Vec<(usize, f64)> = (2..=instances)
            .map_while(|n| group(groups, 1, 1, n, false, false).map(|g| (n, g.median_ms)))
            .collect();
        let slowdown = std::iter::once(1.0)
            .chain(by_busy.iter().map(|(_, ms)| (ms / decode.median_ms).max(1.0)))
            .collect();
        Some(LightFit {
            requests,
            prefill_ms: prefill.median_ms,
            decode_ms: decode.median_ms,
            prefill_extra_ms,
            decode_extra_ms,
            slowdown,
            by_busy,
        })
    } else {
        None
    };
    Ok(Fit { per_batch, hop_decode_ms, hop_prefill_ms, by_depth, slowdown, by_busy, light, mid })
}

impl Fit {
    /// What was measured and what the fitted model says of it.
    fn table(&self) -> String {
        let mut table = Table::new();
        table.load_preset(presets::UTF8_BORDERS_ONLY);
        table.set_header(vec!["configuration", "iterations", "prefill ms", "decode ms", "model decode ms"]);
        for (b, t) in &self.per_batch {
            table.add_row(vec![
                format!("dp1 pp1 b{b}"),
                t.iterations.to_string(),
                format!("{:.3}", t.prefill_ms),
                format!("{:.3}", t.decode_ms),
                format!("{:.3}", t.decode_ms),
            ]);
        }
        let base = self.per_batch[&self.mid].decode_ms;
        for &(pp, ms) in self.by_depth.iter().skip(1) {
            table.add_row(vec![
                format!("dp1 pp{pp} b{}", self.mid),
                String::new(),
                String::new(),
                format!("{ms:.3}"),
                format!("{:.3}", base + (pp - 1) as f64 * self.hop_decode_ms),
            ]);
        }
        for (b, measured) in &self.by_busy {
            let alone = self.per_batch[b].decode_ms;
            for (&(n, ms), s) in measured.iter().zip(&self.slowdown[b]).skip(1) {
                table.add_row(vec![
                    format!("dp{n} pp1 b{b} (x{s:.2})"),
                    String::new(),
                    String::new(),
                    format!("{ms:.3}"),
                    format!("{:.3}", alone * s),
                ]);
            }
        }
        if let Some(l) = &self.light {
            let step = self.per_batch[&1].decode_ms + l.decode_extra_ms;
            table.add_row(vec![
                "light load, b1 (nobody waiting)".to_string(),
                String::new(),
                format!("{:.3}", l.prefill_ms),
                format!("{:.3}", l.decode_ms),
                format!("{step:.3}"),
            ]);
            for (&(n, ms), s) in l.by_busy.iter().zip(l.slowdown.iter().skip(1)) {
                table.add_row(vec![
                    format!("light load, b1, {n} busy (x{s:.2})"),
                    String::new(),
                    String::new(),
                    format!("{ms:.3}"),
                    format!("{:.3}", step * s),
                ]);
            }
        }
        let light = self.light.as_ref().map_or_else(String::new, |l| {
            format!(
                "\nlight load: +{:.3} ms per prefill, +{:.3} ms per decode step (a request alone: {:.3} ms at \
                 the client, median of {})",
                l.prefill_extra_ms, l.decode_extra_ms, l.requests.e2e_median_ms, l.requests.requests
            )
        });
        format!(
            "{table}\npipeline hop: {:.3} ms per decode step, {:.3} ms per prefill{light}",
            self.hop_decode_ms, self.hop_prefill_ms
        )
    }
}

fn round4(v: f64) -> f64 {
    (v * 1e4).round() / 1e4
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(pp: usize, batch: usize, busy: usize, prefill: bool, median_ms: f64) -> IterationGroup {
        IterationGroup {
            key: IterationKey { tp: 1, pp, batch, largest: batch, busy, prefill, queued: true },
            count: 50,
            median_ms,
            mean_ms: median_ms,
            worker_median_ms: median_ms / 2.0,
        }
    }

    fn light(mut g: IterationGroup) -> IterationGroup {
        g.key.queued = false;
        g
    }

    /// Iteration times made from known terms (6 layers, a 0.3 ms hop, a slowdown per batch
    /// size, light-load extras) give those terms back; a missing measurement is an error
    /// that names it.
    #[test]
    fn the_fit_recovers_the_terms_the_iterations_were_made_of() {
        let decode = |b: usize| 0.4 + 0.1 * b as f64;
        let prefill = |b: usize| 0.6 + 0.3 * b as f64;
        let slowdown = |b: usize| [1.0, 1.2 + 0.4 / b as f64, 2.0, 2.6];
        let mut groups = Vec::new();
        for b in [1, 2, 4] {
            groups.push(group(1, b, 1, false, decode(b)));
            groups.push(group(1, b, 1, true, prefill(b)));
            for (n, s) in slowdown(b).iter().enumerate().skip(1) {
                groups.push(group(1, b, n + 1, false, decode(b) * s));
            }
        }
        for pp in [2, 3, 6] {
            groups.push(group(pp, 2, 1, false, decode(2) + 0.3 * (pp - 1) as f64));
            groups.push(group(pp, 2, 1, true, prefill(2) + 0.5 * (pp - 1) as f64));
        }
        groups.push(light(group(1, 1, 1, false, decode(1) + 0.08)));
        groups.push(light(group(1, 1, 1, true, prefill(1) + 0.7)));
        groups.push(light(group(1, 1, 2, false, (decode(1) + 0.08) * 1.7)));
        // Partial batches and rare groups are not used.
        groups.push(group(1, 4, 1, false, 99.0));
        groups.last_mut().unwrap().key.largest = 3;
        // A request alone of 16 tokens took its iterations' time plus 0.7 ms at its client.
        let alone = LightRequests {
            e2e_median_ms: prefill(1) + 15.0 * (decode(1) + 0.08) + 0.7,
            requests: 40,
            tokens: 16,
        };
        let fit = fit(&groups, &[1, 2, 4], 2, 6, 4, Some(alone)).unwrap();
        assert!((fit.hop_decode_ms - 0.3).abs() < 1e-9, "{}", fit.hop_decode_ms);
        assert!((fit.hop_prefill_ms - 0.5).abs() < 1e-9, "{}", fit.hop_prefill_ms);
        for (b, t) in &fit.per_batch {
            assert!((t.decode_ms - decode(*b)).abs() < 1e-12);
            assert!((t.prefill_ms - prefill(*b)).abs() < 1e-12);
            for (got, want) in fit.slowdown[b].iter().zip(slowdown(*b)) {
                assert!((got - want).abs() < 1e-9, "batch {b}: {got} vs {want}");
            }
        }
        let l = fit.light.clone().unwrap();
        assert_eq!(l.slowdown.len(), 2, "measured as far as the phase met busy replicas: {l:?}");
        assert!((l.slowdown[1] - 1.7).abs() < 1e-9, "{l:?}");
        assert!((l.decode_extra_ms - 0.08).abs() < 1e-9 && (l.prefill_extra_ms - 0.7).abs() < 1e-9, "{l:?}");
        let table = fit.table();
        assert!(table.contains("dp4 pp1 b2 (x2.60)") && table.contains("dp2 pp1 b1 (x1.60)"), "{table}");
        assert!(table.contains("+0.700 ms per prefill"), "{table}");

        let without: Vec<IterationGroup> = groups.iter().filter(|g| g.key.busy != 3).cloned().collect();
        let err = fit_err(&without);
        assert!(err.contains("3 replicas busy at batch 1"), "{err}");
        let without: Vec<IterationGroup> = groups.iter().filter(|g| g.key.pp != 3).cloned().collect();
        assert!(fit_err(&without).contains("pipeline depth 3"));
        let without: Vec<IterationGroup> = groups.iter().filter(|g| g.key.queued).cloned().collect();
        assert!(fit_err(&without).contains("light load"));
        assert!(super::fit(&without, &[1, 2, 4], 2, 6, 4, None).unwrap().light.is_none());
    }

    fn fit_err(groups: &[IterationGroup]) -> String {
        let alone = LightRequests { e2e_median_ms: 9.0, requests: 40, tokens: 16 };
        fit(groups, &[1, 2, 4], 2, 6, 4, Some(alone)).unwrap_err().to_string()
    }

    /// The light phase keeps a replica busy a tenth of the time and lasts 2 to 20
    /// intervals, long enough for about 40 requests.
    #[test]
    fn the_light_phase_is_sparse_and_bounded() {
        let (rate, n) = light_phase(5.0, 3.0);
        assert!((rate - 20.0).abs() < 1e-9 && n == 2, "{rate} {n}");
        let (rate, n) = light_phase(500.0, 3.0);
        assert!((rate - 0.2).abs() < 1e-9 && n == 20, "{rate} {n}");
    }
}
