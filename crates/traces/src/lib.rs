//! Spot-instance availability traces: load every published shape, normalise
//! them to one model, summarise them.
//!
//! Benchmarks and policies must not care which file shape a trace came in, so
//! every loader produces the same [`Trace`]: time-sorted add/remove [`Event`]s
//! with node ids (synthesized, LIFO, for count-only sources), an end time, and
//! the Parcae artifact's reference decisions where the file has them. A
//! scheduler then sees a trace through [`Trace::series`], the per-interval
//! view (instances, arrivals, preemptions) with one precise boundary rule: an
//! event at exactly `t = k * L` belongs to interval `k`.
//!
//! ```no_run
//! let trace = parcae_traces::load(std::path::Path::new("traces/demo-8node.csv"))?;
//! let series = trace.series(60_000)?;
//! println!("{}", trace.stats(60_000)?);
//! # Ok::<(), parcae_traces::TraceError>(())
//! ```
//!
//! Malformed input never panics: it yields a [`TraceError`] naming the file,
//! the 1-based line (or a JSON path) and the reason.

mod civil;
mod error;
mod format;
mod model;
mod parse;
mod stats;
pub mod synth;
mod write;

use std::path::Path;

pub use error::{Location, TraceError, UnknownFormat};
pub use format::Format;
pub use model::{
    Event, EventKind, HOUR_MS, IntervalSeries, IntervalStats, Lifetime, MAX_INTERVALS, ReferenceDecision,
    Strategy, Trace,
};
pub use parse::{MAX_COUNT, MAX_EVENTS};
pub use stats::{LifetimeDistribution, LifetimeStats, TraceStats};
pub use write::{write_events_csv, write_series_csv};

/// Loads a trace, detecting its format from the content (see [`Format`]).
pub fn load(path: &Path) -> Result<Trace, TraceError> {
    load_impl(path, None)
}

/// Loads a trace as an explicitly chosen format, for files whose content is
/// ambiguous or to get format-specific errors instead of a detection error.
pub fn load_as(path: &Path, format: Format) -> Result<Trace, TraceError> {
    load_impl(path, Some(format))
}

/// Parses in-memory bytes as if they were the file `source` (used in error
/// messages and as [`Trace::source`]); `format: None` detects it.
pub fn parse(source: &Path, data: &[u8], format: Option<Format>) -> Result<Trace, TraceError> {
    parse::parse_bytes(source, data, format)
}

fn load_impl(path: &Path, format: Option<Format>) -> Result<Trace, TraceError> {
    let data = std::fs::read(path).map_err(|source| TraceError::Io { path: path.to_path_buf(), source })?;
    parse::parse_bytes(path, &data, format)
}
