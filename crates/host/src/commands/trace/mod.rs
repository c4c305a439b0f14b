//! `parcae-host trace`: availability and preemption statistics of traces
//! (with plots), conversion to the canonical event CSV or a per-interval
//! series, and synthetic traces (stress shapes, fitted look-alikes and
//! bounded instance lifetimes).

mod plots;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Subcommand, ValueEnum};

pub use plots::{CdfStep, HourRate, ended_cdf, hourly, hourly_svg, kaplan_meier, lifetime_svg, write_plots};

use parcae_traces::synth::{BoundedLifetimes, Scenario, SynthSpec};

use crate::args::TraceInput;

/// The `trace` subcommands.
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Availability and preemption statistics of traces.
    Stats {
        /// Traces to describe.
        #[arg(required = true)]
        traces: Vec<PathBuf>,
        /// How to read them.
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
        /// Trace to convert.
        trace: PathBuf,
        /// Output file ('-' for standard output).
        #[arg(short, long)]
        output: PathBuf,
        /// What to write.
        #[arg(long, value_enum, default_value_t = ConvertTarget::Events)]
        to: ConvertTarget,
        /// How to read the trace.
        #[command(flatten)]
        input: TraceInput,
    },
    /// Generate a synthetic trace (seeded, deterministic): a named stress
    /// shape, a look-alike of a real trace's rates (`--like`), or a fleet of
    /// bounded instance lifetimes (`--lifetimes`).
    Synth {
        /// The stress shape (fleet-wipes, diurnal, slow-churn, long-calm);
        /// not with `--like` or `--lifetimes`.
        #[arg(long, required_unless_present_any = ["like", "lifetimes"], conflicts_with_all = ["like", "lifetimes"])]
        scenario: Option<String>,
        /// Every instance lives a time drawn uniformly from a range and is
        /// replaced after a fixed delay, as preemptible VMs in a managed
        /// group: `PLACES:MIN_H-MAX_H:REFILL_MIN`, e.g. `32:1-3:5` (32 places,
        /// lifetimes of 1 to 3 hours, each refilled 5 minutes after it goes);
        /// not with `--like`.
        #[arg(long, value_name = "PLACES:MIN_H-MAX_H:REFILL_MIN", conflicts_with = "like")]
        lifetimes: Option<String>,
        /// Fit the generator's rates (peak fleet, preemption events per
        /// instance-hour, burst sizes, refill delay) to this trace.
        #[arg(long, value_name = "TRACE")]
        like: Option<PathBuf>,
        /// Length of the trace.
        #[arg(long, default_value_t = 48.0)]
        hours: f64,
        /// Seed of the random draws.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Output file ('-' for standard output).
        #[arg(short, long)]
        output: PathBuf,
        /// How to read the `--like` trace.
        #[command(flatten)]
        input: TraceInput,
    },
}

/// What `trace convert` writes.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ConvertTarget {
    /// `t_ms,op,node` rows (and a last `t_ms,end,` row where the trace runs on
    /// past its last event): lossless, the canonical format.
    Events,
    /// `interval,start_ms,instances,arrivals,preemptions` at the chosen interval.
    Series,
}

/// Runs a `trace` subcommand.
pub fn run(command: &TraceCommand) -> anyhow::Result<()> {
    match command {
        TraceCommand::Stats { traces, input, json, plot } => stats(traces, input, *json, plot.as_deref()),
        TraceCommand::Convert { trace, output, to, input } => convert(trace, output, *to, input),
        TraceCommand::Synth { scenario, like, lifetimes, hours, seed, output, input } => {
            synth(scenario.as_deref(), like.as_deref(), lifetimes.as_deref(), *hours, *seed, output, input)
        }
    }
}

/// `trace synth`.
fn synth(
    scenario: Option<&str>,
    like: Option<&Path>,
    lifetimes: Option<&str>,
    hours: f64,
    seed: u64,
    output: &Path,
    input: &TraceInput,
) -> anyhow::Result<()> {
    let name =
        output.file_stem().map_or_else(|| "synthetic".to_string(), |s| s.to_string_lossy().into_owned());
    let (csv, label) = match (scenario, like, lifetimes) {
        (Some(scenario), _, _) => {
            let spec = scenario.parse::<Scenario>().map_err(anyhow::Error::msg)?.spec(hours, seed);
            (spec.generate_csv()?, spec.name)
        }
        (None, Some(like), _) => {
            let trace = input.load(like)?;
            let spec = SynthSpec::fitted(&trace, input.interval_ms()?, &name, hours, seed)?;
            (spec.generate_csv()?, spec.name)
        }
        (None, None, Some(lifetimes)) => {
            let spec = BoundedLifetimes::from_spec(lifetimes, name, hours, seed).context("--lifetimes")?;
            (spec.generate_csv()?, format!("bounded lifetimes {lifetimes}"))
        }
        (None, None, None) => anyhow::bail!("give --scenario, --like or --lifetimes"),
    };
    if output == Path::new("-") {
        print!("{csv}");
    } else {
        std::fs::write(output, csv).with_context(|| format!("writing {}", output.display()))?;
        eprintln!("{}: {label} ({hours} h, seed {seed})", output.display());
    }
    Ok(())
}

/// `trace stats`.
fn stats(traces: &[PathBuf], input: &TraceInput, json: bool, plot: Option<&Path>) -> anyhow::Result<()> {
    let interval_ms = input.interval_ms()?;
    let mut all = Vec::new();
    for path in traces {
        let trace = input.load(path)?;
        let stats = trace.stats(interval_ms)?;
        if let Some(dir) = plot {
            for file in write_plots(&trace, dir)? {
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

/// `trace convert`.
fn convert(trace: &Path, output: &Path, to: ConvertTarget, input: &TraceInput) -> anyhow::Result<()> {
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
