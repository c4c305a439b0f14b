//! Errors: every one names the file, where in it, and why.

use std::fmt;
use std::path::PathBuf;

/// Where in a trace file a problem sits.
///
/// Line-based formats report 1-based line numbers; whole-document JSON
/// formats report a JSON path such as `[17].interval[1]` because a parsed
/// JSON value no longer knows its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A 1-based line number.
    Line(usize),
    /// A 1-based line number and a JSON path inside that line (JSON-lines files).
    LineJson {
        /// 1-based line number.
        line: usize,
        /// JSON path inside the line, e.g. `[2].duration`.
        path: String,
    },
    /// A JSON path inside a whole-document JSON file, e.g. `data[3]`.
    Json(String),
}

impl fmt::Display for Location {
    /// Renders the suffix that follows the file path: `:17`, `:17: at [2].nodes`, `: at data[3]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Line(line) => write!(f, ":{line}"),
            Location::LineJson { line, path } => write!(f, ":{line}: at {path}"),
            Location::Json(path) => write!(f, ": at {path}"),
        }
    }
}

/// Everything that can go wrong loading or normalising a trace.
///
/// Messages follow the compiler convention `file:line: reason` so they can be
/// clicked in editors and grepped in CI logs.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be read.
    #[error("{}: cannot read trace: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file holds no data rows at all (blank, only comments, only a header, `[]`).
    #[error("{}: empty trace: {reason}", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
        /// What was missing.
        reason: String,
    },
    /// The file is malformed or describes an impossible availability history.
    #[error("{}{location}: {reason}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// Where in the file.
        location: Location,
        /// Why it was rejected.
        reason: String,
    },
    /// A normalisation was asked for with an unusable interval length.
    #[error("{}: cannot normalise at interval {interval_ms} ms: {reason}", path.display())]
    Interval {
        /// The trace's source file.
        path: PathBuf,
        /// The requested interval length.
        interval_ms: u64,
        /// Why it cannot be used.
        reason: String,
    },
    /// A synthetic trace could not be generated or fitted.
    #[error(transparent)]
    Synth(#[from] crate::synth::SynthError),
}

impl TraceError {
    /// The 1-based line number the error points at, if it points at a line.
    pub fn line(&self) -> Option<usize> {
        match self {
            TraceError::Malformed {
                location: Location::Line(line) | Location::LineJson { line, .. },
                ..
            } => Some(*line),
            _ => None,
        }
    }

    /// The file the error is about.
    pub fn path(&self) -> &std::path::Path {
        match self {
            TraceError::Io { path, .. }
            | TraceError::Empty { path, .. }
            | TraceError::Malformed { path, .. }
            | TraceError::Interval { path, .. } => path,
            TraceError::Synth(e) => e.path(),
        }
    }
}

/// A [`crate::Format`] name that is not one of the supported ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown trace format '{0}' (expected one of events-csv, counts-csv, segments-jsonl, decisions-json, ticks-json, timestamped-counts)"
)]
pub struct UnknownFormat(pub String);
