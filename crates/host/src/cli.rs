//! Command-line interface of `parcae-host`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use parcae_runtime::{PolicyRuntime, SandboxLimits};

use parcae_policy_core::{ModelProfile, ParallelConfig};
use parcae_profile::{CostConstants, Profile};
use parcae_sim::Prices;

use crate::commands::replay::ReplaySettings;
use crate::embedded::{COST_CONSTANTS, DEFAULT_POLICY, DEMO_TRACE, EXAMPLE_PROFILE};
use crate::policies::{guarded_policy, load_policy};

/// Parcae: train on spot instances, reconfiguring before preemptions hit.
#[derive(Debug, Parser)]
#[command(name = "parcae-host", version, about)]
pub struct Cli {
    /// Log debug messages (RUST_LOG overrides this).
    #[arg(short, long, global = true)]
    pub verbose: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect and validate policy components.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Inspect and convert availability traces.
    #[command(subcommand)]
    Trace(TraceCommand),
    /// Replay the control loop over a trace: forecast, plan and record each
    /// interval's decision with the given policies.
    Replay(ReplayArgs),
    /// Score policies and reference baselines on traces under the liveput
    /// cost model: samples, migrations, time lost, cost.
    Bench(crate::commands::bench::BenchArgs),
    /// Recommend how many instances of which type to request (spot or
    /// on-demand) to meet a goal at the least cost; predicted vs simulated.
    Provision(crate::commands::provision::ProvisionArgs),
    /// Bytes moved by reconfigurations when workers are matched to slots by
    /// Kuhn-Munkres versus in naive order, over a policy's decisions on a trace.
    BenchMigration(crate::commands::bench_migration::MigrationBenchArgs),
    /// Train for real: start (or accept) workers, replay a trace's preemptions
    /// and allocations against them, and migrate live state as the policy plans.
    Run(Box<crate::commands::run::RunArgs>),
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Report the WIT world a component implements, or why it does not fit.
    Check {
        /// Components to check (`.wasm` files or `builtin:NAME`).
        #[arg(required = true)]
        policies: Vec<String>,
        #[command(flatten)]
        sandbox: SandboxArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Availability and preemption statistics of traces.
    Stats {
        #[arg(required = true)]
        traces: Vec<PathBuf>,
        #[command(flatten)]
        input: TraceInput,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Write lifetime-CDF and preemptions-by-hour SVG plots of each trace
        /// into this directory (created if missing).
        #[arg(long, value_name = "DIR")]
        plot: Option<PathBuf>,
    },
    /// Write a trace in the canonical event CSV, or as a per-interval series.
    Convert {
        trace: PathBuf,
        /// Output file ('-' for standard output).
        #[arg(short, long)]
        output: PathBuf,
        /// What to write.
        #[arg(long, value_enum, default_value_t = ConvertTarget::Events)]
        to: ConvertTarget,
        #[command(flatten)]
        input: TraceInput,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ConvertTarget {
    /// `t_ms,op,node` rows: lossless, the canonical format.
    Events,
    /// `interval,start_ms,instances,arrivals,preemptions` at the chosen interval.
    Series,
}

/// How to read a trace.
#[derive(Debug, Args)]
pub struct TraceInput {
    /// Force the input format instead of detecting it (events-csv, counts-csv,
    /// segments-jsonl, decisions-json, ticks-json, timestamped-counts).
    #[arg(long)]
    pub format: Option<parcae_traces::Format>,
    /// Length of one control interval, seconds.
    #[arg(long, default_value_t = 60)]
    pub interval_seconds: u64,
}

impl TraceInput {
    pub(crate) fn load(&self, path: &Path) -> anyhow::Result<parcae_traces::Trace> {
        Ok(match self.format {
            Some(format) => parcae_traces::load_as(path, format)?,
            None => parcae_traces::load(path)?,
        })
    }

    pub(crate) fn interval_ms(&self) -> anyhow::Result<u64> {
        anyhow::ensure!(self.interval_seconds > 0, "--interval-seconds must be at least 1");
        Ok(self.interval_seconds * 1000)
    }
}

/// Budgets each policy call runs under.
#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// Fuel (about one unit per Wasm instruction) one policy call may use.
    #[arg(long, default_value_t = SandboxLimits::default().fuel_per_call)]
    pub fuel: u64,
    /// Wall-clock limit of one policy call, milliseconds.
    #[arg(long, default_value_t = SandboxLimits::default().deadline_per_call.as_millis() as u64)]
    pub deadline_ms: u64,
    /// Memory one policy may hold, MiB.
    #[arg(long, default_value_t = SandboxLimits::default().memory_bytes >> 20)]
    pub memory_mib: usize,
}

impl SandboxArgs {
    pub(crate) fn runtime(&self) -> anyhow::Result<PolicyRuntime> {
        Ok(PolicyRuntime::new(SandboxLimits {
            fuel_per_call: self.fuel,
            deadline_per_call: Duration::from_millis(self.deadline_ms),
            memory_bytes: self.memory_mib << 20,
            ..SandboxLimits::default()
        })?)
    }
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Trace to replay (default: the embedded demo trace).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    #[command(flatten)]
    pub input: TraceInput,
    #[command(flatten)]
    pub policies: PolicyArgs,
    #[command(flatten)]
    pub profile: crate::cli::ProfileArgs,
    /// Intervals each forecast and plan covers.
    #[arg(long, default_value_t = 8)]
    pub horizon: u32,
    /// Write every decision as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// Which policy components decide.
#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// Policy component serving every interface it exports (`.wasm` or
    /// `builtin:NAME`; default: builtin:robust-liveput).
    #[arg(long)]
    pub policy: Option<String>,
    /// Predictor component (overrides --policy's predictor).
    #[arg(long)]
    pub predictor: Option<String>,
    /// Optimizer component (overrides --policy's optimizer).
    #[arg(long)]
    pub optimizer: Option<String>,
}

impl PolicyArgs {
    /// The policy argument in effect (`--policy` or the default).
    pub fn policy_spec(&self) -> &str {
        self.policy.as_deref().unwrap_or(DEFAULT_POLICY)
    }

    /// Loads the components into one guarded policy.
    pub fn guarded(&self, runtime: &PolicyRuntime) -> anyhow::Result<parcae_runtime::GuardedPolicy> {
        guarded_policy(
            runtime,
            Some(self.policy_spec()),
            self.predictor.as_deref(),
            self.optimizer.as_deref(),
        )
    }
}

/// Which model and cost profile to plan for.
#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// Profile file (default: the embedded example profile).
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Model in the profile (default: the profile's first model).
    #[arg(long)]
    pub model: Option<String>,
    /// Cost-model constants file (default: the embedded one).
    #[arg(long)]
    pub cost_constants: Option<PathBuf>,
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Policy(PolicyCommand::Check { policies, sandbox }) => policy_check(&policies, &sandbox),
        Command::Trace(TraceCommand::Stats { traces, input, json, plot }) => {
            trace_stats(&traces, &input, json, plot.as_deref())
        }
        Command::Trace(TraceCommand::Convert { trace, output, to, input }) => {
            trace_convert(&trace, &output, to, &input)
        }
        Command::Replay(args) => replay(&args),
        Command::Bench(args) => crate::commands::bench::run(&args),
        Command::Provision(args) => crate::commands::provision::run(&args),
        Command::BenchMigration(args) => crate::commands::bench_migration::run(&args),
        Command::Run(args) => crate::commands::run::run(&args),
    }
}

fn policy_check(policies: &[String], sandbox: &SandboxArgs) -> anyhow::Result<()> {
    let runtime = sandbox.runtime()?;
    let mut failed = 0;
    for spec in policies {
        match load_policy(&runtime, spec) {
            Ok(component) => {
                let exports = component.exports();
                println!(
                    "{spec}: ok, implements world {} of {}",
                    exports.world(),
                    parcae_runtime::WIT_PACKAGE
                );
                println!("  predictor: {}", if exports.predictor { "exported" } else { "-" });
                println!("  optimizer: {}", if exports.optimizer { "exported" } else { "-" });
                let (wasi, other): (Vec<_>, Vec<_>) =
                    component.imports().iter().partition(|i| i.starts_with("wasi:"));
                for import in other {
                    println!("  imports {import}");
                }
                if !wasi.is_empty() {
                    println!("  imports {} WASI interfaces (linked, no capability granted)", wasi.len());
                }
            }
            Err(error) => {
                failed += 1;
                println!("{spec}: REJECTED: {error:#}");
            }
        }
    }
    anyhow::ensure!(failed == 0, "{failed} of {} components rejected", policies.len());
    Ok(())
}

fn trace_stats(
    traces: &[PathBuf],
    input: &TraceInput,
    json: bool,
    plot: Option<&Path>,
) -> anyhow::Result<()> {
    let interval_ms = input.interval_ms()?;
    let mut all = Vec::new();
    for path in traces {
        let trace = input.load(path)?;
        let stats = trace.stats(interval_ms)?;
        if let Some(dir) = plot {
            for file in crate::commands::trace_plots::write_plots(&trace, dir)? {
                // Standard output stays valid JSON with --json.
                eprintln!("plot: {}", file.display());
            }
        }
        if json {
            all.push(stats);
        } else {
            println!("{stats}");
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&all)?);
    }
    Ok(())
}

fn trace_convert(trace: &Path, output: &Path, to: ConvertTarget, input: &TraceInput) -> anyhow::Result<()> {
    let loaded = input.load(trace)?;
    let mut sink: Box<dyn Write> = if output == Path::new("-") {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(std::io::BufWriter::new(
            std::fs::File::create(output).with_context(|| format!("creating {}", output.display()))?,
        ))
    };
    let written = match to {
        ConvertTarget::Events => parcae_traces::write_events_csv(&loaded, &mut sink),
        ConvertTarget::Series => {
            parcae_traces::write_series_csv(&loaded.series(input.interval_ms()?)?, &mut sink)
        }
    }
    .and_then(|()| sink.flush());
    match written {
        // A closed pipe (`| head`) is the reader's choice, not a failure.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.with_context(|| format!("writing {}", output.display())),
    }
}

impl ProfileArgs {
    /// The policy-level profile of the chosen model.
    pub fn load(&self) -> anyhow::Result<ModelProfile> {
        Ok(self.load_with_prices()?.0)
    }

    /// The policy-level profile of the chosen model and the instance prices.
    pub fn load_with_prices(&self) -> anyhow::Result<(ModelProfile, Prices)> {
        let profile = match &self.profile {
            Some(path) => Profile::load(path)?,
            None => Profile::from_json(EXAMPLE_PROFILE.1, EXAMPLE_PROFILE.0)?,
        };
        let constants = match &self.cost_constants {
            Some(path) => CostConstants::load(path)?,
            None => CostConstants::from_json(COST_CONSTANTS.1, COST_CONSTANTS.0)?,
        };
        let model = match &self.model {
            Some(model) => model.clone(),
            None => profile
                .model_names()
                .first()
                .map(|m| m.to_string())
                .with_context(|| format!("{}: has no models", profile.file().display()))?,
        };
        let prices = Prices {
            spot_usd_per_hour: profile.spot_usd_per_hour(),
            on_demand_usd_per_hour: profile.on_demand_usd_per_hour(),
        };
        Ok((profile.model_profile(&model, &constants)?, prices))
    }
}

fn replay(args: &ReplayArgs) -> anyhow::Result<()> {
    let trace = match &args.trace {
        Some(path) => args.input.load(path)?,
        None => parcae_traces::parse(Path::new(DEMO_TRACE.0), DEMO_TRACE.1.as_bytes(), args.input.format)?,
    };
    let interval_ms = args.input.interval_ms()?;
    let series = trace.series(interval_ms)?;
    let profile = args.profile.load()?;
    anyhow::ensure!(args.horizon >= 1, "--horizon must be at least 1");
    let runtime = args.sandbox.runtime()?;
    let mut policy = args.policies.guarded(&runtime)?;
    let fleet_max = series.intervals.iter().map(|s| s.instances).max().unwrap_or(0);
    let settings = ReplaySettings { interval_ms, horizon: args.horizon, fleet_max };

    println!(
        "replaying {} ({} intervals of {} s) for model {} with predictor {} and optimizer {}",
        trace.name(),
        series.len(),
        interval_ms / 1000,
        profile.model,
        policy.predictor_name().unwrap_or("built-in persistence"),
        policy.optimizer_name().unwrap_or("built-in throughput-optimal"),
    );
    println!(
        "{:>8} {:>7} {:>4} {:>4} {:>4} {:>8} {:>7} {:>12}  answered by",
        "interval", "t(min)", "N", "+", "-", "forecast", "config", "exp.samples"
    );
    let mut previous: Option<Option<ParallelConfig>> = None;
    let decisions =
        crate::commands::replay::replay(&series.intervals, &profile, &mut policy, &settings, |d| {
            // Print the intervals where something happened, not 60 identical rows.
            let changed =
                previous != Some(d.config) || d.arrivals > 0 || d.preemptions > 0 || d.fault.is_some();
            previous = Some(d.config);
            if changed {
                let config = d.config.map_or_else(|| "pause".to_string(), |c| c.to_string());
                let answered = format!("{}/{}", d.predictor, d.optimizer);
                println!(
                    "{:>8} {:>7.1} {:>4} {:>4} {:>4} {:>8} {:>7} {:>12.0}  {answered}",
                    d.interval,
                    d.start_ms as f64 / 60_000.0,
                    d.instances,
                    d.arrivals,
                    d.preemptions,
                    d.forecast_instances.map_or_else(|| "-".to_string(), |n| n.to_string()),
                    config,
                    d.expected_samples
                );
            }
        });
    let changes = decisions.windows(2).filter(|w| w[0].config != w[1].config).count();
    let expected: f64 = decisions.iter().map(|d| d.expected_samples).sum();
    println!(
        "{} decisions, {changes} configuration changes, {expected:.0} samples expected by the policy (before migration costs)",
        decisions.len()
    );
    println!("predictor: {}", policy.predictor_counts());
    println!("optimizer: {}", policy.optimizer_counts());
    if let Some(path) = &args.json {
        let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        serde_json::to_writer_pretty(std::io::BufWriter::new(file), &decisions)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("decisions written to {}", path.display());
    }
    Ok(())
}
