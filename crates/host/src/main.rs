//! `parcae-host`: the orchestrator's command line. All logic lives in the
//! library; this file parses arguments, sets up logging and reports errors.

use tracing_subscriber::EnvFilter;

fn main() -> std::process::ExitCode {
    let cli = parcae_host::cli::Cli::parse_checked();
    let filter = EnvFilter::try_from_env("RUST_LOG")
        .unwrap_or_else(|_| EnvFilter::new(if cli.verbose { "debug" } else { "warn,parcae=info" }));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    match parcae_host::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
