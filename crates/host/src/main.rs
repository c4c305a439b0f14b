//! `parcae-host`: the orchestrator's command line. All logic lives in the
//! library; this file parses arguments, sets up logging and reports errors.

fn main() -> std::process::ExitCode {
    let cli = parcae_host::cli::Cli::parse_checked();
    parcae_logging::init(cli.log, "info");
    match parcae_host::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", parcae_logging::error_line(error.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}
