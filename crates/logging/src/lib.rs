//! Log set-up shared by `parcae-host` and `parcae-worker`.
//!
//! - The filter: `RUST_LOG` when set (full `EnvFilter` syntax, e.g.
//!   `RUST_LOG=parcae=debug,wasmtime=info`); otherwise warnings from every crate and the
//!   project's own targets (`parcae*`: `parcae_host::...`, `parcae_net::...`,
//!   `parcae::guest`, ...) at `info`, or at `debug` with `-v`. Dependencies' internals
//!   (cranelift, wasmtime, quinn, rustls) stay at `warn` unless `RUST_LOG` asks for them.
//! - Colours only when stderr is a terminal (and `NO_COLOR` is unset), so a log redirected
//!   to a file holds no ANSI escapes.
//! - `--log-format json`: one JSON object per line (timestamp, level, target, fields,
//!   span), for log shippers.
//!
//! [`init`] installs the subscriber once per process; [`LogOptions::worker_args`] repeats
//! the choice on the command line of a worker the host starts.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (coloured on a terminal only).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// The flag value that selects this format.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// The logging flags both binaries take (`#[command(flatten)]`).
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct LogOptions {
    /// Log the project's own debug messages (targets `parcae*`; dependencies stay at warn:
    /// set RUST_LOG for those, e.g. RUST_LOG=wasmtime=debug). RUST_LOG overrides this.
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// Log line format: text (coloured only on a terminal) or json (one object per line).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
}

impl LogOptions {
    /// The filter directives used when `RUST_LOG` is unset: `default_level` for the
    /// project's targets (`debug` with `-v`), `warn` for everything else.
    pub fn default_directives(&self, default_level: &str) -> String {
        let level = if self.verbose { "debug" } else { default_level };
        format!("warn,parcae={level}")
    }

    /// Arguments that give a child `parcae-worker` the same choice.
    pub fn worker_args(&self) -> Vec<String> {
        let mut args = vec!["--log-format".to_string(), self.log_format.as_str().to_string()];
        if self.verbose {
            args.push("--verbose".to_string());
        }
        args
    }
}

static CURRENT: std::sync::OnceLock<LogOptions> = std::sync::OnceLock::new();

/// The options [`init`] installed (the defaults before it ran).
pub fn current() -> LogOptions {
    CURRENT.get().copied().unwrap_or_default()
}

/// Whether log lines on stderr should carry ANSI colours: only on a terminal, and not when
/// `NO_COLOR` is set (<https://no-color.org>).
pub fn stderr_wants_colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Installs the process's log subscriber on stderr: `RUST_LOG` if set, else
/// [`LogOptions::default_directives`] with `default_level` (e.g. `info`). A second call
/// (or another subscriber already installed) leaves the first in place.
pub fn init(options: LogOptions, default_level: &str) {
    let _ = CURRENT.set(options);
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(options.default_directives(default_level)));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match options.log_format {
        LogFormat::Text => builder.with_ansi(stderr_wants_colour()).try_init(),
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(false).try_init(),
    };
}

/// One line for a person: `error` and each of its causes joined by `": "`, leaving out a
/// cause whose text the line already holds. Many of the workspace's errors print their
/// source in their own message (so that `to_string()` alone says why), and walking the
/// chain as well would say it twice ("cannot read trace: No such file or directory (os
/// error 2): No such file or directory (os error 2)").
pub fn error_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        let text = next.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = next.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error whose message may or may not repeat its source's.
    #[derive(Debug)]
    struct Outer {
        message: String,
        source: std::io::Error,
    }

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.message)
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn a_cause_already_in_the_message_is_said_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let repeats = Outer { message: "t.csv: cannot read trace: no such file".into(), source: io() };
        assert_eq!(error_line(&repeats), "t.csv: cannot read trace: no such file");
        let terse = Outer { message: "t.csv: cannot read trace".into(), source: io() };
        assert_eq!(error_line(&terse), "t.csv: cannot read trace: no such file");
    }

    #[test]
    fn verbose_raises_only_the_projects_targets() {
        let quiet = LogOptions::default();
        assert_eq!(quiet.default_directives("info"), "warn,parcae=info");
        let verbose = LogOptions { verbose: true, ..quiet };
        assert_eq!(verbose.default_directives("info"), "warn,parcae=debug");
        assert_eq!(verbose.default_directives("warn"), "warn,parcae=debug");
    }

    #[test]
    fn worker_args_repeat_the_choice() {
        let options = LogOptions { verbose: true, log_format: LogFormat::Json };
        assert_eq!(options.worker_args(), ["--log-format", "json", "--verbose"]);
        assert_eq!(LogOptions::default().worker_args(), ["--log-format", "text"]);
    }
}
