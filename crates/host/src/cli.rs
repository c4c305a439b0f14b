//! The command line of `parcae-host`: the subcommands and their dispatch.
//! Each subcommand's arguments and body live in its module under
//! [`crate::commands`]; groups several share live in [`crate::args`].

use clap::{Parser, Subcommand};

use crate::commands::{bench, bench_migration, policy, provision, replay, run as train, trace};

/// Parcae: train on spot instances, reconfiguring before preemptions hit.
#[derive(Debug, Parser)]
#[command(name = "parcae-host", version, about)]
pub struct Cli {
    /// Logging: `-v` and `--log-format`.
    #[command(flatten)]
    pub log: parcae_logging::LogOptions,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect and validate policy components.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Inspect and convert availability traces.
    #[command(subcommand)]
    Trace(trace::TraceCommand),
    /// Replay the control loop over a trace: forecast, plan and record each
    /// interval's decision with the given policies.
    Replay(replay::ReplayArgs),
    /// Score policies and reference baselines on traces under the liveput
    /// cost model: samples, migrations, time lost, cost.
    Bench(bench::BenchArgs),
    /// Recommend how many instances of which type to request (spot or
    /// on-demand) to meet a goal at the least cost; predicted vs simulated.
    Provision(provision::ProvisionArgs),
    /// Bytes moved by reconfigurations when workers are matched to slots by
    /// Kuhn-Munkres versus in naive order, over a policy's decisions on a trace.
    BenchMigration(bench_migration::MigrationBenchArgs),
    /// Train for real: start (or accept) workers, replay a trace's preemptions
    /// and allocations against them, and migrate live state as the policy plans.
    Run(Box<train::RunArgs>),
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Policy(command) => policy::run(&command),
        Command::Trace(command) => trace::run(&command),
        Command::Replay(args) => replay::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Provision(args) => provision::run(&args),
        Command::BenchMigration(args) => bench_migration::run(&args),
        Command::Run(args) => train::run(&args),
    }
}
