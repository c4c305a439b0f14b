//! `parcae-host trace`: availability and preemption statistics of traces
//! (with plots), and conversion to the canonical event CSV or a per-interval
//! series.

mod plots;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Subcommand, ValueEnum};

pub use plots::{CdfStep, HourRate, ended_cdf, hourly, hourly_svg, kaplan_meier, lifetime_svg, write_plots};

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
}

/// What `trace convert` writes.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ConvertTarget {
    /// `t_ms,op,node` rows: lossless, the canonical format.
    Events,
    /// `interval,start_ms,instances,arrivals,preemptions` at the chosen interval.
    Series,
}

/// Runs a `trace` subcommand.
pub fn run(command: &TraceCommand) -> anyhow::Result<()> {
    match command {
        TraceCommand::Stats { traces, input, json, plot } => stats(traces, input, *json, plot.as_deref()),
        TraceCommand::Convert { trace, output, to, input } => convert(trace, output, *to, input),
    }
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
