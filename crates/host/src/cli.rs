//! The command line of `parcae-host`: the subcommands and their dispatch.
//! Each subcommand's arguments and body live in its module under
//! [`crate::commands`]; groups several share live in [`crate::args`].
//! Without a subcommand, `parcae-host [run options]` is `parcae-host run`
//! (`parcae-host --policy my.wasm` trains with that policy on the embedded
//! defaults).

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::commands::{
    bench, bench_fidelity, bench_migration, bench_mixed, bench_serve, loadgen, policy, profile,
    profile_serving, provision, replay, run as train, serve, trace,
};

/// Parcae: train on spot instances, reconfiguring before preemptions hit.
///
/// Without a subcommand it trains: `parcae-host [RUN OPTIONS]` is
/// `parcae-host run [RUN OPTIONS]` (the embedded demo trace and policy unless
/// given), e.g. `parcae-host --policy my.wasm`.
#[derive(Debug, Parser)]
#[command(name = "parcae-host", version, about)]
pub struct Cli {
    /// Logging: `-v` and `--log-format`.
    #[command(flatten)]
    pub log: parcae_logging::LogOptions,
    /// What to do (default: `run`).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The options of `run`, for the default command.
    #[command(flatten, next_help_heading = "Run options (without a subcommand)")]
    pub run: Box<train::RunArgs>,
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
    /// Measure this deployment (real worker processes on loopback, every layout, live
    /// reconfigurations, a restart) and write the profile and cost constants `run`,
    /// `bench` and `provision` load.
    Profile(profile::ProfileArgs),
    /// How well the simulator predicts real runs here: profile this deployment, run the
    /// demo and calm traces with it, table each run's measured against simulated figures.
    BenchFidelity(bench_fidelity::FidelityArgs),
    /// Does the mixed-fleet model predict a run whose workers have two speeds? Profile each
    /// type alone (one emulating a slower type), run one of each, compare.
    BenchMixed(bench_mixed::MixedBenchArgs),
    /// Score serving policies (SpotServe's optimizer and others, as Wasm components) on spot
    /// traces with a queueing model: P50/P90/P99 latency, SLO attainment, cost, against
    /// restart-style reparallelization, rerouting only and an on-demand fleet.
    BenchServe(bench_serve::ServeBenchArgs),
    /// Measure the serving deployment `serve` runs (the engine on local worker processes:
    /// batch sizes, pipeline depths, replicas contending for the cores) and write the
    /// serving profile `serve` and `bench-serve` load.
    ProfileServing(profile_serving::ProfileServingArgs),
    /// Drive an OpenAI-compatible completions server with Gamma-distributed streamed
    /// requests and report time to first token, end-to-end latency and rejections.
    Loadgen(loadgen::LoadgenArgs),
    /// Serve the model for real (SpotServe): worker processes on a replayed trace behind an
    /// OpenAI-compatible HTTP API, reparallelized as instances come and go, with KV caches
    /// migrated so interrupted requests resume at their next token.
    Serve(Box<serve::ServeArgs>),
    /// Train for real: start (or accept) workers, replay a trace's preemptions
    /// and allocations against them, and migrate live state as the policy plans.
    Run(Box<train::RunArgs>),
}

impl Cli {
    /// Parses `args` (the program name first), refusing `run` options given
    /// before a subcommand (`parcae-host --policy x.wasm bench`), which the
    /// subcommand would otherwise silently ignore. Global flags (`-v`, `--log-format`) go anywhere.
    pub fn try_parse_checked<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let mut command = Cli::command();
        let matches = command.try_get_matches_from_mut(args)?;
        if let Some(subcommand) = matches.subcommand_name() {
            let misplaced = matches.ids().map(|id| id.as_str()).find(|&id| {
                // Arguments only (not the groups of flattened structs), and not the global ones.
                command.get_arguments().any(|a| a.get_id() == id && !a.is_global_set())
                    && matches.value_source(id) == Some(ValueSource::CommandLine)
            });
            if let Some(id) = misplaced {
                let flag = command
                    .get_arguments()
                    .find(|a| a.get_id() == id)
                    .and_then(|a| a.get_long())
                    .map_or_else(|| id.to_string(), |long| format!("--{long}"));
                return Err(command.error(
                    clap::error::ErrorKind::ArgumentConflict,
                    format!(
                        "{flag} is an option of the default command (run) and cannot come before \
                         `{subcommand}`; write it after the subcommand"
                    ),
                ));
            }
        }
        Cli::from_arg_matches(&matches)
    }

    /// [`Cli::try_parse_checked`] of this process's arguments; prints the
    /// error or help and exits when they do not parse.
    pub fn parse_checked() -> Cli {
        Cli::try_parse_checked(std::env::args_os()).unwrap_or_else(|e| e.exit())
    }
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let Some(command) = cli.command else { return train::run(&cli.run) };
    match command {
        Command::Policy(command) => policy::run(&command),
        Command::Trace(command) => trace::run(&command),
        Command::Replay(args) => replay::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Provision(args) => provision::run(&args),
        Command::BenchMigration(args) => bench_migration::run(&args),
        Command::Profile(args) => profile::run(&args),
        Command::BenchFidelity(args) => bench_fidelity::run(&args),
        Command::BenchMixed(args) => bench_mixed::run(&args),
        Command::BenchServe(args) => bench_serve::run(&args),
        Command::ProfileServing(args) => profile_serving::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Loadgen(args) => loadgen::run(&args),
        Command::Run(args) => train::run(&args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_subcommand_the_run_options_train() {
        let cli =
            Cli::try_parse_checked(["parcae-host", "--policy", "mine.wasm", "--max-steps", "3"]).unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.run.policies.policy.as_deref(), Some("mine.wasm"));
        assert_eq!(cli.run.max_steps, Some(3));
        // No option at all: `run` on the embedded defaults.
        let cli = Cli::try_parse_checked(["parcae-host"]).unwrap();
        assert!(cli.command.is_none() && cli.run.policies.policy.is_none());
    }

    #[test]
    fn subcommands_keep_their_own_options() {
        let cli =
            Cli::try_parse_checked(["parcae-host", "bench", "--policy", "a.wasm", "--policy", "b.wasm"])
                .unwrap();
        let Some(Command::Bench(args)) = cli.command else { panic!("bench expected") };
        assert_eq!(args.policies, ["a.wasm", "b.wasm"]);
        let cli = Cli::try_parse_checked(["parcae-host", "-v", "run", "--policy", "x.wasm"]).unwrap();
        assert!(cli.log.verbose);
        let Some(Command::Run(args)) = cli.command else { panic!("run expected") };
        assert_eq!(args.policies.policy.as_deref(), Some("x.wasm"));
        // Run options before a subcommand are refused, not silently dropped.
        let e = Cli::try_parse_checked(["parcae-host", "--policy", "x.wasm", "bench"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict, "{e}");
        assert!(e.to_string().contains("--policy is an option of the default command (run)"), "{e}");
        // Global logging flags go before a subcommand too.
        let cli = Cli::try_parse_checked(["parcae-host", "--log-format", "json", "-v", "run"]).unwrap();
        assert!(cli.log.verbose && matches!(cli.command, Some(Command::Run(_))));
    }
}
