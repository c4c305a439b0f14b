//! Command-line interface of `parcae-host`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use parcae_runtime::{PolicyRuntime, SandboxLimits};

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
    fn load(&self, path: &Path) -> anyhow::Result<parcae_traces::Trace> {
        Ok(match self.format {
            Some(format) => parcae_traces::load_as(path, format)?,
            None => parcae_traces::load(path)?,
        })
    }

    fn interval_ms(&self) -> anyhow::Result<u64> {
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
    fn runtime(&self) -> anyhow::Result<PolicyRuntime> {
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
    /// Policy component serving every interface it exports (`.wasm` or
    /// `builtin:NAME`; default: builtin:reactive).
    #[arg(long)]
    pub policy: Option<String>,
    /// Predictor component (overrides --policy's predictor).
    #[arg(long)]
    pub predictor: Option<String>,
    /// Optimizer component (overrides --policy's optimizer).
    #[arg(long)]
    pub optimizer: Option<String>,
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
        Command::Trace(TraceCommand::Stats { traces, input, json }) => trace_stats(&traces, &input, json),
        Command::Trace(TraceCommand::Convert { trace, output, to, input }) => {
            trace_convert(&trace, &output, to, &input)
        }
        Command::Replay(args) => replay(&args),
    }
}

fn policy_check(policies: &[String], sandbox: &SandboxArgs) -> anyhow::Result<()> {
    let runtime = sandbox.runtime()?;
    let mut failed = 0;
    for spec in policies {
        match load_policy(&runtime, spec) {
            Ok(component) => {
                let exports = component.exports();
                println!("{spec}: ok, implements world {} of {}", exports.world(), parcae_runtime::WIT_PACKAGE);
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

fn trace_stats(traces: &[PathBuf], input: &TraceInput, json: bool) -> anyhow::Result<()> {
    let interval_ms = input.interval_ms()?;
    let mut all = Vec::new();
    for path in traces {
        let trace = input.load(path)?;
        let stats = trace.stats(interval_ms)?;
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
    match to {
        ConvertTarget::Events => parcae_traces::write_events_csv(&loaded, &mut sink),
        ConvertTarget::Series => parcae_traces::write_series_csv(&loaded.series(input.interval_ms()?)?, &mut sink),
    }
    .and_then(|()| sink.flush())
    .with_context(|| format!("writing {}", output.display()))
}

fn replay(args: &ReplayArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("replay: wired once the profile loader lands")
}
