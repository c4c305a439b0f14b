//! Prints a trace's statistics: `cargo run -p parcae-traces --example trace_stats -- FILE [INTERVAL_MS] [--json] [--format NAME]`.

use std::path::PathBuf;
use std::process::ExitCode;

use parcae_traces::Format;

fn main() -> ExitCode {
    let mut path: Option<PathBuf> = None;
    let mut interval_ms = 60_000;
    let mut json = false;
    let mut format: Option<Format> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--json" => json = true,
            "--format" => match args.next().map(|f| f.parse::<Format>()) {
                Some(Ok(f)) => format = Some(f),
                Some(Err(e)) => {
                    eprintln!("{e}");
                    return ExitCode::FAILURE;
                }
                None => {
                    eprintln!("--format needs a value");
                    return ExitCode::FAILURE;
                }
            },
            other if path.is_none() => path = Some(PathBuf::from(other)),
            other => match other.parse() {
                Ok(ms) => interval_ms = ms,
                Err(_) => {
                    eprintln!("interval '{other}' is not a number of milliseconds");
                    return ExitCode::FAILURE;
                }
            },
        }
    }
    let Some(path) = path else {
        eprintln!("usage: trace_stats FILE [INTERVAL_MS] [--json] [--format NAME]");
        return ExitCode::FAILURE;
    };
    let loaded = match format {
        Some(f) => parcae_traces::load_as(&path, f),
        None => parcae_traces::load(&path),
    };
    let stats = loaded.and_then(|t| t.stats(interval_ms));
    match stats {
        Ok(s) if json => match serde_json::to_string_pretty(&s) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        },
        Ok(s) => print!("{s}"),
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
