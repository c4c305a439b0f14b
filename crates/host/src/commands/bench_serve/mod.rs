//! `parcae-host bench-serve`: scores serving policies on spot traces in
//! seconds, without a cluster ([`parcae_serve_sim`]).
//!
//! Each trace's availability and a request arrival process (Gamma
//! inter-arrivals at a rate and coefficient of variation, or a per-minute rate
//! file) are replayed through the serving simulator's queueing model. Every
//! policy (a `serving-policy` component, sandboxed like the training ones)
//! chooses the configuration each interval and recovers SpotServe's way
//! (token-level: interrupted requests resume from their last token on the new
//! configuration). Baselines:
//! - `restart`: SpotServe's configurations, but every reparallelization
//!   restarts the engine and interrupted requests recompute from scratch;
//! - `reroute`: no reparallelization: the first configuration's replica shape
//!   is kept, preempted replicas' requests are rerouted to the survivors;
//! - `on-demand`: a fixed on-demand fleet, never preempted: the fewest
//!   instances on which a configuration meets the latency objective at the
//!   mean arrival rate (`--on-demand-instances` to choose).

mod plots;

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, ValueEnum};
use comfy_table::{CellAlignment, Table, presets};
use parcae_profile::ServingProfileData;
use parcae_serve_sim::{Fleet, LightLoad, Recovery, ServeOutcome, ServeSetup, SharedMachine};
use parcae_serving_core::{CostAware, ServeRequest, ServingOptimizer, SpotServe, Workload, shapes};
use serde::Serialize;

use crate::args::{NoticeArgs, SandboxArgs, TraceInput};
use crate::embedded::{self, P3_TRACE, SERVING_PROFILE};
use crate::policies::load_serving;
use crate::progress;

/// The serving policies `bench-serve` scores when none is named.
pub const DEFAULT_SERVING_POLICIES: [&str; 2] = ["builtin:spotserve", "builtin:cost-aware-serving"];

/// Arguments of `parcae-host bench-serve`.
#[derive(Debug, Args)]
pub struct ServeBenchArgs {
    /// Availability traces to replay (default: the Parcae paper's AWS p3 trace,
    /// embedded); each instance of the trace is one serving instance of the profile.
    #[arg(long, num_args = 1.., value_name = "FILE")]
    pub trace: Vec<PathBuf>,
    #[command(flatten)]
    /// How to read the traces.
    pub input: TraceInput,
    /// Serving policy to score (`.wasm` with world `serving-policy`, or
    /// `builtin:NAME`); repeatable (default: builtin:spotserve and
    /// builtin:cost-aware-serving).
    #[arg(long = "policy", value_name = "POLICY")]
    pub policies: Vec<String>,
    /// Serving profile (default: GPT-20B on g4dn.12xlarge from the SpotServe
    /// artifact, embedded).
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Mean arrival rate, requests per second (default: `--load` of what the
    /// highest-throughput configuration serves on the trace's mean fleet).
    #[arg(long, value_name = "REQ/S")]
    pub rate: Option<f64>,
    /// Without `--rate`: the arrival rate as a fraction of the highest
    /// throughput any configuration reaches on the trace's mean fleet.
    #[arg(long, default_value_t = 0.5, value_name = "FRACTION", conflicts_with_all = ["rate", "rate_file"])]
    pub load: f64,
    /// Per-minute arrival rates instead of one rate: a file of numbers
    /// (requests per second), one per minute, separated by commas or newlines.
    #[arg(long, value_name = "FILE", conflicts_with = "rate")]
    pub rate_file: Option<PathBuf>,
    /// Coefficient of variation of the Gamma inter-arrival times (1: Poisson).
    #[arg(long, default_value_t = 1.0)]
    pub cv: f64,
    /// Seed of the arrival process.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// End-to-end latency objective, seconds (default: 5 x the lowest service
    /// latency any configuration reaches on the trace's largest fleet).
    #[arg(long, value_name = "SECONDS")]
    pub slo_seconds: Option<f64>,
    /// Prompt tokens per request (default: the profile's workload).
    #[arg(long)]
    pub input_tokens: Option<u32>,
    /// Generated tokens per request (default: the profile's workload).
    #[arg(long)]
    pub output_tokens: Option<u32>,
    /// Intervals each decision covers (now and the forecast).
    #[arg(long, default_value_t = 4)]
    pub horizon: usize,
    /// Baselines to score, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "LIST", default_values_t = ServeBaseline::ALL)]
    pub baselines: Vec<ServeBaseline>,
    /// Instances of the on-demand baseline (default: the fewest that meet the
    /// objective at the mean rate).
    #[arg(long, value_name = "N")]
    pub on_demand_instances: Option<u32>,
    #[command(flatten)]
    /// The preemption notice.
    pub notice: NoticeArgs,
    /// Replay each trace interval (`--interval-seconds` of trace time) in this many seconds,
    /// the notice scaled with it, as `serve --wall-seconds-per-interval` does: to predict a
    /// `serve` run of the same trace.
    #[arg(long, value_name = "SECONDS")]
    pub wall_seconds_per_interval: Option<f64>,
    /// Write one JSON record per (trace, row) to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write one CSV row per (trace, row) to this file.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Write each row's per-request latencies (CSV) into this directory.
    #[arg(long, value_name = "DIR")]
    pub requests: Option<PathBuf>,
    /// Write one SVG per trace (latency CDF; instances and configuration over
    /// time) into this directory.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    #[command(flatten)]
    /// Budgets of each policy call.
    pub sandbox: SandboxArgs,
}

/// A reference row of `bench-serve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum ServeBaseline {
    /// SpotServe's configurations, restarting on every reparallelization.
    Restart,
    /// No reparallelization: survivors take the load.
    Reroute,
    /// A fixed on-demand fleet.
    OnDemand,
}

impl ServeBaseline {
    /// Every baseline, in table order.
    pub const ALL: [ServeBaseline; 3] =
        [ServeBaseline::Restart, ServeBaseline::Reroute, ServeBaseline::OnDemand];
}

impl std::fmt::Display for ServeBaseline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ServeBaseline::Restart => "restart",
            ServeBaseline::Reroute => "reroute",
            ServeBaseline::OnDemand => "on-demand",
        })
    }
}

/// One row of a trace's table.
pub struct ServeRow {
    /// Policy spec or baseline name.
    pub name: String,
    /// "policy" or "baseline".
    pub kind: &'static str,
    /// What the simulator measured.
    pub outcome: ServeOutcome,
    /// Whether it pays the on-demand price.
    pub on_demand: bool,
    /// The guest's faults, for policies ("-" for baselines).
    pub faults: String,
}

/// One trace's benchmark.
pub struct ServeBench {
    /// The trace file.
    pub path: PathBuf,
    /// Mean arrival rate, requests per second.
    pub rate: f64,
    /// The latency objective, ms.
    pub slo_ms: f64,
    /// Instances available per interval.
    pub instances: Vec<u32>,
    /// Interval length, ms.
    pub interval_ms: u64,
    /// Rows in table order.
    pub rows: Vec<ServeRow>,
    /// Notes for the reader.
    pub notes: Vec<String>,
}

/// The machine-readable record of one row (flat, so JSON and CSV share it).
#[derive(Debug, Serialize)]
pub struct ServeRecord {
    trace: String,
    model: String,
    row: String,
    kind: &'static str,
    rate_per_s: f64,
    slo_ms: f64,
    notice_s: f64,
    requests: usize,
    completed: usize,
    dropped: usize,
    requeued: usize,
    migrated: usize,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    mean_ms: f64,
    slo_attainment: f64,
    reconfigurations: u32,
    paused_ms: f64,
    instance_hours: f64,
    /// What the row paid: the spot price, or the on-demand price for the
    /// on-demand fleet.
    cost_usd: f64,
    usd_per_1k_tokens: f64,
    tokens: u64,
    policy_errors: u32,
}

/// `parcae-host bench-serve`.
pub fn run(args: &ServeBenchArgs) -> anyhow::Result<()> {
    let trace_interval_ms = args.input.interval_ms()?;
    let interval_ms = match args.wall_seconds_per_interval {
        Some(s) => {
            anyhow::ensure!(
                s.is_finite() && s >= 0.001,
                "--wall-seconds-per-interval {s}: must be a number >= 0.001"
            );
            (s * 1000.0).round() as u64
        }
        None => trace_interval_ms,
    };
    // Trace time onto replayed time: the notice shrinks with the intervals.
    let time_scale = interval_ms as f64 / trace_interval_ms as f64;
    anyhow::ensure!(args.horizon >= 1, "--horizon must be at least 1");
    anyhow::ensure!(args.cv.is_finite() && args.cv > 0.0, "--cv {}: must be a finite number > 0", args.cv);
    let profile_data = match &args.profile {
        Some(path) => ServingProfileData::load(path)?,
        None => ServingProfileData::from_json(SERVING_PROFILE.1, SERVING_PROFILE.0)?,
    };
    let profile = profile_data.serving_profile();
    let suggested = profile_data.workload().unwrap_or(Workload { input_tokens: 512, output_tokens: 128 });
    let workload = Workload {
        input_tokens: args.input_tokens.unwrap_or(suggested.input_tokens),
        output_tokens: args.output_tokens.unwrap_or(suggested.output_tokens),
    };
    anyhow::ensure!(
        workload.input_tokens >= 1 && workload.output_tokens >= 1,
        "--input-tokens and --output-tokens must be at least 1"
    );
    let rate_schedule = args.rate_file.as_deref().map(read_rate_file).transpose()?;
    let instance = &profile_data.data().instance;
    let runtime = args.sandbox.runtime()?;
    let specs: Vec<String> = if args.policies.is_empty() {
        DEFAULT_SERVING_POLICIES.iter().map(|s| s.to_string()).collect()
    } else {
        args.policies.clone()
    };
    let mut baselines = args.baselines.clone();
    baselines.sort();
    baselines.dedup();
    let traces: Vec<Option<&PathBuf>> =
        if args.trace.is_empty() { vec![None] } else { args.trace.iter().map(Some).collect() };
    let progress = progress::bar((traces.len() * (specs.len() + baselines.len())) as u64, "simulating");
    if let Some(dir) = args.plot.iter().chain(&args.requests).next() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut records = Vec::new();
    for path in traces {
        let trace = match path {
            Some(path) => args.input.load(path)?,
            None => embedded::trace_or(None, args.input.format, P3_TRACE)?,
        };
        let series = trace.series(trace_interval_ms)?;
        anyhow::ensure!(
            !series.intervals.is_empty(),
            "{}: the trace has no intervals",
            trace.source().display()
        );
        let notice = args.notice.notice_for(trace.source())?;
        let fleet = Fleet {
            instances: series.intervals.iter().map(|s| s.instances).collect(),
            preemptions: series.intervals.iter().map(|s| s.preemptions).collect(),
            arrivals: series.intervals.iter().map(|s| s.arrivals).collect(),
            interval_ms,
            notice_ms: notice.seconds * 1000.0 * time_scale,
        };
        let duration_ms = fleet.instances.len() as f64 * interval_ms as f64;
        let max_instances = fleet.instances.iter().copied().max().unwrap_or(0);
        let mean_instances =
            fleet.instances.iter().map(|&n| f64::from(n)).sum::<f64>() / fleet.instances.len() as f64;
        let all_shapes = shapes(&profile, max_instances.saturating_mul(profile.gpus_per_instance), &workload);
        anyhow::ensure!(
            !all_shapes.is_empty(),
            "{}: no configuration of {} fits on the trace's largest fleet ({max_instances} instances of {} GPUs)",
            profile_data.file().display(),
            profile.model,
            profile.gpus_per_instance
        );
        let rate = match (&rate_schedule, args.rate) {
            (Some(rates), _) => rates.iter().sum::<f64>() / rates.len() as f64,
            (None, Some(rate)) => rate,
            (None, None) => {
                anyhow::ensure!(
                    args.load.is_finite() && args.load > 0.0,
                    "--load {}: must be a finite number > 0",
                    args.load
                );
                let n = mean_instances.round().max(1.0) as u32;
                args.load * capacity(&profile, &all_shapes, n)
            }
        };
        anyhow::ensure!(rate.is_finite() && rate > 0.0, "--rate {rate}: must be a finite number > 0");
        let arrivals = match &rate_schedule {
            Some(rates) => parcae_serve_sim::scheduled_arrivals(rates, args.cv, duration_ms, args.seed)?,
            None => parcae_serve_sim::gamma_arrivals(rate, args.cv, duration_ms, args.seed)?,
        };
        let fastest = all_shapes.iter().map(|(_, e)| e.latency_ms).fold(f64::INFINITY, f64::min);
        let slo_ms = match args.slo_seconds {
            Some(s) => {
                anyhow::ensure!(s.is_finite() && s > 0.0, "--slo-seconds {s}: must be a finite number > 0");
                s * 1000.0
            }
            None => 5.0 * fastest,
        };
        let setup = ServeSetup {
            profile: profile.clone(),
            workload,
            latency_slo_ms: slo_ms,
            horizon: args.horizon,
            spot_price_per_hour: instance.spot_usd_per_hour,
            on_demand_price_per_hour: instance.on_demand_usd_per_hour,
            machine: shared_machine(&profile_data),
        };
        let mut rows = Vec::new();
        let mut notes = Vec::new();
        for spec in &specs {
            let mut policy =
                load_serving(spec, &runtime).with_context(|| format!("loading serving policy {spec}"))?;
            let outcome = parcae_serve_sim::simulate(
                &setup,
                &fleet,
                &arrivals,
                Recovery::TokenLevel,
                &mut |request| Ok(policy.configure(request).value),
            )?;
            let counts = policy.counts();
            notes.push(format!("{spec}: {counts}"));
            let faults = counts.total_faults().to_string();
            rows.push(ServeRow { name: spec.clone(), kind: "policy", outcome, on_demand: false, faults });
            progress.inc(1);
        }
        for baseline in &baselines {
            let (outcome, on_demand) = match baseline {
                ServeBaseline::Restart | ServeBaseline::Reroute => {
                    let recovery = if *baseline == ServeBaseline::Restart {
                        Recovery::Restart
                    } else {
                        Recovery::Reroute
                    };
                    let mut native = SpotServe::default();
                    let outcome =
                        parcae_serve_sim::simulate(&setup, &fleet, &arrivals, recovery, &mut |r| {
                            native.configure(r)
                        })?;
                    (outcome, false)
                }
                ServeBaseline::OnDemand => {
                    let n = match args.on_demand_instances {
                        Some(n) => n,
                        None => on_demand_fleet(&setup, max_instances.max(1), rate)?,
                    };
                    anyhow::ensure!(n >= 1, "--on-demand-instances must be at least 1");
                    notes.push(format!("on-demand: {n} instances for the whole trace"));
                    (parcae_serve_sim::simulate_on_demand(&setup, n, duration_ms, &arrivals)?, true)
                }
            };
            rows.push(ServeRow {
                name: baseline.to_string(),
                kind: "baseline",
                outcome,
                on_demand,
                faults: "-".into(),
            });
            progress.inc(1);
        }
        let bench = ServeBench {
            path: trace.source().to_path_buf(),
            rate,
            slo_ms,
            instances: fleet.instances.clone(),
            interval_ms,
            rows,
            notes,
        };
        let mut text = format!(
            "{} ({} intervals of {} s, {}..{} instances), model {} on {} ({} GPUs each); {} requests at \
             {rate:.3} req/s (Gamma, CV {}), {} in / {} out tokens; SLO {:.1} s; preemption notice {} s ({}{})\n\n{}\n",
            trace.source().display(),
            fleet.instances.len(),
            interval_ms as f64 / 1000.0,
            fleet.instances.iter().min().unwrap_or(&0),
            max_instances,
            profile.model,
            instance.instance_type,
            profile.gpus_per_instance,
            arrivals.len(),
            args.cv,
            workload.input_tokens,
            workload.output_tokens,
            slo_ms / 1000.0,
            notice.seconds,
            notice.source,
            if time_scale == 1.0 {
                String::new()
            } else {
                format!("; replayed at {:.3} s", fleet.notice_ms / 1000.0)
            },
            table(&bench),
        );
        text.push_str(&ratios(&bench));
        for note in &bench.notes {
            text.push_str(&format!("note: {note}\n"));
        }
        let stem = file_stem(&bench.path);
        if let Some(dir) = &args.plot {
            let file = dir.join(format!("{stem}-serve-{}.svg", profile.model));
            std::fs::write(&file, plots::plot(&bench, &profile.model))
                .with_context(|| format!("writing {}", file.display()))?;
            text.push_str(&format!("plot: {}\n", file.display()));
        }
        if let Some(dir) = &args.requests {
            for row in &bench.rows {
                let name: String = row
                    .name
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
                    .collect();
                let file = dir.join(format!("{stem}-{name}-requests.csv"));
                write_requests(&row.outcome, &file)?;
            }
            text.push_str(&format!("per-request latencies: {}\n", dir.display()));
        }
        progress.suspend(|| println!("{text}"));
        for row in &bench.rows {
            let s = &row.outcome.summary;
            let cost_usd = if row.on_demand { s.cost_on_demand_usd } else { s.cost_usd };
            records.push(ServeRecord {
                trace: bench.path.display().to_string(),
                model: profile.model.clone(),
                row: row.name.clone(),
                kind: row.kind,
                rate_per_s: rate,
                slo_ms,
                notice_s: notice.seconds,
                requests: s.requests,
                completed: s.completed,
                dropped: s.dropped,
                requeued: s.requeued,
                migrated: s.migrated,
                p50_ms: s.p50_ms,
                p90_ms: s.p90_ms,
                p99_ms: s.p99_ms,
                mean_ms: s.mean_ms,
                slo_attainment: s.slo_attainment,
                reconfigurations: s.reconfigurations,
                paused_ms: s.paused_ms,
                instance_hours: s.instance_hours,
                cost_usd,
                usd_per_1k_tokens: if s.tokens > 0 { cost_usd / (s.tokens as f64 / 1000.0) } else { 0.0 },
                tokens: s.tokens,
                policy_errors: row.outcome.policy_errors,
            });
        }
    }
    progress.finish_and_clear();
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&records)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
        println!("records written to {}", path.display());
    }
    if let Some(path) = &args.csv {
        let mut writer =
            csv::Writer::from_path(path).with_context(|| format!("writing {}", path.display()))?;
        for record in &records {
            writer.serialize(record).with_context(|| format!("writing {}", path.display()))?;
        }
        writer.flush().with_context(|| format!("writing {}", path.display()))?;
        println!("records written to {}", path.display());
    }
    Ok(())
}

/// The highest throughput any configuration reaches on `instances`, req/s.
/// The simulator's shared-machine terms of a serving profile (all empty for a profile of
/// GPUs that do not share: the published-scale ones).
pub fn shared_machine(data: &ServingProfileData) -> SharedMachine {
    SharedMachine {
        slowdown_by_busy_replicas: data.slowdown_by_busy_replicas(),
        slowdown_by_batch: data.slowdown_by_batch(),
        light_load: data.light_load().map_or_else(LightLoad::default, |l| LightLoad {
            prefill_extra_ms: l.prefill_extra_ms,
            decode_extra_ms: l.decode_extra_ms,
            slowdown_by_busy_replicas: l.slowdown_by_busy_replicas,
        }),
        lockstep: data.lockstep(),
    }
}

fn capacity(
    profile: &parcae_serving_core::ServingProfile,
    shapes: &[(parcae_serving_core::ServingConfig, parcae_serving_core::Estimate)],
    instances: u32,
) -> f64 {
    let gpus = instances.saturating_mul(profile.gpus_per_instance);
    shapes
        .iter()
        .map(|(shape, one)| one.requests_per_second * f64::from(gpus / shape.gpus_per_replica()))
        .fold(0.0, f64::max)
}

/// The fewest instances on which some configuration meets the objective at
/// `rate` with the cost-aware optimizer's headroom; all of `max` when none does.
fn on_demand_fleet(setup: &ServeSetup, max: u32, rate: f64) -> anyhow::Result<u32> {
    let request = ServeRequest {
        instances: vec![max],
        arrival_rates: vec![rate],
        latency_slo_ms: setup.latency_slo_ms,
        interval_ms: 60_000,
        current: None,
        workload: setup.workload,
        profile: setup.profile.clone(),
    };
    let mut optimizer = CostAware::default();
    let plan = optimizer.configure(&request).map_err(anyhow::Error::msg)?;
    let Some(config) = plan.configs.first().copied().flatten() else { return Ok(max) };
    let estimate = parcae_serving_core::estimate(&setup.profile, &config, &setup.workload);
    let meets = estimate.is_some_and(|e| {
        e.latency_ms <= setup.latency_slo_ms && e.requests_per_second * optimizer.target_utilization >= rate
    });
    Ok(if meets { config.instances(setup.profile.gpus_per_instance) } else { max })
}

/// Reads a per-minute rate file: numbers separated by commas, whitespace or
/// newlines (`#` starts a comment); errors name the line.
fn read_rate_file(path: &Path) -> anyhow::Result<Vec<f64>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut rates = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        for field in line.split(|c: char| c == ',' || c.is_whitespace()).filter(|f| !f.is_empty()) {
            let rate: f64 = field.parse().map_err(|_| {
                anyhow::anyhow!("{}: line {}: `{field}` is not a number", path.display(), n + 1)
            })?;
            anyhow::ensure!(
                rate.is_finite() && rate >= 0.0,
                "{}: line {}: rate {rate} must be a finite number >= 0",
                path.display(),
                n + 1
            );
            rates.push(rate);
        }
    }
    anyhow::ensure!(!rates.is_empty(), "{}: no rates in the file", path.display());
    anyhow::ensure!(rates.iter().any(|&r| r > 0.0), "{}: every rate is zero", path.display());
    Ok(rates)
}

fn file_stem(path: &Path) -> String {
    let stem = path.file_stem().map_or_else(|| "trace".to_string(), |s| s.to_string_lossy().into_owned());
    stem.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect()
}

fn write_requests(outcome: &ServeOutcome, file: &Path) -> anyhow::Result<()> {
    let mut writer = csv::Writer::from_path(file).with_context(|| format!("writing {}", file.display()))?;
    for request in &outcome.requests {
        writer.serialize(request).with_context(|| format!("writing {}", file.display()))?;
    }
    writer.flush().with_context(|| format!("writing {}", file.display()))
}

fn seconds(ms: f64) -> String {
    if ms.is_finite() { format!("{:.2}", ms / 1000.0) } else { "-".into() }
}

/// The table of one trace: rows = policies and baselines.
pub fn table(bench: &ServeBench) -> Table {
    let mut table = Table::new();
    table.load_preset(presets::ASCII_MARKDOWN);
    table.set_header(vec![
        "row", "P50 s", "P90 s", "P99 s", "mean s", "SLO %", "done", "dropped", "requeued", "resumed",
        "reconfig", "paused s", "inst-h", "$", "$/1k tok", "faults",
    ]);
    for row in &bench.rows {
        let s = &row.outcome.summary;
        let usd = if row.on_demand { s.cost_on_demand_usd } else { s.cost_usd };
        let per_1k = if s.tokens > 0 { usd / (s.tokens as f64 / 1000.0) } else { f64::NAN };
        table.add_row(vec![
            row.name.clone(),
            seconds(s.p50_ms),
            seconds(s.p90_ms),
            seconds(s.p99_ms),
            seconds(s.mean_ms),
            format!("{:.1}", 100.0 * s.slo_attainment),
            s.completed.to_string(),
            s.dropped.to_string(),
            s.requeued.to_string(),
            s.migrated.to_string(),
            s.reconfigurations.to_string(),
            format!("{:.0}", s.paused_ms / 1000.0),
            format!("{:.1}", s.instance_hours),
            format!("{usd:.2}"),
            if per_1k.is_finite() { format!("{per_1k:.4}") } else { "-".into() },
            row.faults.clone(),
        ]);
    }
    for column in 1..15 {
        if let Some(c) = table.column_mut(column) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    table
}

/// SpotServe's comparisons as ratios: P99 against restart and reroute, cost
/// against on-demand.
fn ratios(bench: &ServeBench) -> String {
    let find = |name: &str| bench.rows.iter().find(|r| r.name == name);
    let Some(spot) = find("builtin:spotserve").or_else(|| bench.rows.iter().find(|r| r.kind == "policy"))
    else {
        return String::new();
    };
    let s = &spot.outcome.summary;
    let mut out = String::new();
    for name in ["restart", "reroute"] {
        if let Some(row) = find(name) {
            let b = &row.outcome.summary;
            out.push_str(&format!(
                "{}: P99 {:.2}x lower than {name} ({} vs {} s), mean {:.2}x\n",
                spot.name,
                b.p99_ms / s.p99_ms,
                seconds(s.p99_ms),
                seconds(b.p99_ms),
                b.mean_ms / s.mean_ms
            ));
        }
    }
    if let Some(row) = find("on-demand").filter(|r| r.outcome.summary.cost_on_demand_usd > 0.0) {
        let od = row.outcome.summary.cost_on_demand_usd;
        out.push_str(&format!(
            "{}: ${:.2} against ${od:.2} on demand ({:.0}% cheaper), P99 {} vs {} s\n",
            spot.name,
            s.cost_usd,
            100.0 * (1.0 - s.cost_usd / od),
            seconds(s.p99_ms),
            seconds(row.outcome.summary.p99_ms)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_files_parse_or_name_the_line() {
        let dir = std::env::temp_dir().join(format!("parcae-rates-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.csv");
        std::fs::write(&good, "# per minute\n0.5, 0.6\n0.7\n").unwrap();
        assert_eq!(read_rate_file(&good).unwrap(), vec![0.5, 0.6, 0.7]);
        let bad = dir.join("bad.csv");
        std::fs::write(&bad, "0.5\n0.6, x\n").unwrap();
        let err = read_rate_file(&bad).unwrap_err().to_string();
        assert!(err.contains("bad.csv: line 2: `x` is not a number"), "{err}");
        std::fs::write(&bad, "0, 0\n").unwrap();
        assert!(read_rate_file(&bad).unwrap_err().to_string().contains("every rate is zero"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
