//! Errors: every one names the file, the field path inside it and the reason,
//! so a user who profiled their own cluster can fix their file without reading
//! this crate.

use std::fmt;
use std::path::{Path, PathBuf};

/// A 1-based line and column in a JSON file, as reported by the parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// 1-based line.
    pub line: usize,
    /// Column on that line (bytes).
    pub column: usize,
}

/// Everything that can go wrong loading a profile or a constants file, or
/// deriving a [`parcae_policy_core::ModelProfile`] from them.
///
/// Rendered as `file: field.path: reason`, e.g.
/// `p3-v100-parcae.json: models.bert.throughput[3].dp: must be >= 1`.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    #[error("{}: cannot read: {source}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid JSON, does not match the schema, or holds a
    /// value the cost model cannot use.
    #[error("{}: {}{reason}", file.display(), Where(path, position))]
    Invalid {
        /// The file.
        file: PathBuf,
        /// JSON path of the offending field, e.g. `models.bert.throughput[3].dp`;
        /// empty for the document as a whole.
        path: String,
        /// Where the parser stopped, for syntax and schema errors.
        position: Option<Position>,
        /// Why it was rejected.
        reason: String,
    },
    /// A model was asked for that the file does not describe.
    #[error("{}: unknown model `{model}`; available: {}", file.display(), available.join(", "))]
    UnknownModel {
        /// The file.
        file: PathBuf,
        /// The name asked for.
        model: String,
        /// Every model the file does describe, sorted.
        available: Vec<String>,
    },
}

impl ProfileError {
    /// A validation failure at `path` (no parser position: the value parsed fine).
    pub(crate) fn invalid(file: &Path, path: impl Into<String>, reason: impl Into<String>) -> Self {
        ProfileError::Invalid {
            file: file.to_path_buf(),
            path: path.into(),
            position: None,
            reason: reason.into(),
        }
    }

    /// The text of `file`, or an [`ProfileError::Io`] naming it.
    pub(crate) fn read(file: &Path) -> Result<String, Self> {
        std::fs::read_to_string(file).map_err(|source| ProfileError::Io { file: file.to_path_buf(), source })
    }

    /// The field path this error points at, if any (empty for the whole document).
    pub fn path(&self) -> Option<&str> {
        match self {
            ProfileError::Invalid { path, .. } => Some(path),
            _ => None,
        }
    }
}

/// Renders the `path (line L, column C): ` part of an [`ProfileError::Invalid`].
struct Where<'a>(&'a String, &'a Option<Position>);

impl fmt::Display for Where<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0.is_empty(), self.1) {
            (true, None) => Ok(()),
            (true, Some(p)) => write!(f, "line {}, column {}: ", p.line, p.column),
            (false, None) => write!(f, "{}: ", self.0),
            (false, Some(p)) => write!(f, "{} (line {}, column {}): ", self.0, p.line, p.column),
        }
    }
}

/// Appends an object key to a JSON path: `.key` for plain names, `["a.b"]`
/// for names that would be ambiguous (dots, brackets, quotes, spaces, empty).
pub(crate) fn join_key(parent: &str, key: &str) -> String {
    let plain = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    match (parent.is_empty(), plain) {
        (true, true) => key.to_string(),
        (false, true) => format!("{parent}.{key}"),
        (_, false) => format!("{parent}[{}]", serde_json::Value::String(key.to_string())),
    }
}

/// Appends an array index to a JSON path: `parent[i]`.
pub(crate) fn join_index(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}
