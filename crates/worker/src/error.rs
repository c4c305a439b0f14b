//! The worker library's one error type.

use std::ops::Range;
use std::path::PathBuf;

use parcae_cluster::LayoutError;

/// Everything that can go wrong in the worker's training core. Variants carry what the
/// caller needs to act on (a corrupt peer message is the peer's fault, a step mismatch is the
/// host's), so messages name the layer, tensor, step or file concerned.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The model spec or the (D, P) layout is unusable.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// libtorch refused an operation (shape or device errors surfaced by tch's `f_` calls).
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
    /// Bytes that should hold a tensor, a layer's state or a checkpoint manifest do not.
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// What the bytes should have been ("tensor", "layer state", "manifest").
        what: &'static str,
        /// How they fall short.
        reason: String,
    },
    /// A layer's state (or a file) was for another layer than the one expected.
    #[error("layer state is for layer {found}, expected layer {expected}")]
    WrongLayer {
        /// The layer asked for.
        expected: usize,
        /// The layer the state names.
        found: usize,
    },
    /// A tensor does not have the shape the model spec gives it.
    #[error("layer {layer}, tensor `{tensor}`: shape {found:?}, expected {expected:?}")]
    WrongShape {
        /// The layer the tensor belongs to.
        layer: usize,
        /// The tensor's name within the layer.
        tensor: String,
        /// The shape the spec gives it.
        expected: Vec<usize>,
        /// The shape it has.
        found: Vec<usize>,
    },
    /// State or a request belongs to another optimizer step than the trainer's.
    #[error("step mismatch: expected step {expected}, found step {found}")]
    StepMismatch {
        /// The trainer's step.
        expected: u64,
        /// The step the state or request carries.
        found: u64,
    },
    /// The trainer does not hold a layer it was asked about.
    #[error("layer {0} is not held by this trainer")]
    LayerNotHeld(usize),
    /// The trainer's layers are not the ones the layout gives its slot.
    #[error("slot needs layers {expected:?}, trainer holds {held:?}")]
    WrongLayers {
        /// The layers the slot owns in the layout.
        expected: Range<usize>,
        /// The layers the trainer holds.
        held: Vec<usize>,
    },
    /// `commit`/`abort` without a computed step, or a new step/import while one is pending.
    #[error("{0}")]
    Sequence(String),
    /// A peer (pipeline neighbour or data-parallel group) failed or went away.
    #[error("communication failed: {0}")]
    Comm(String),
    /// The checkpoint store refused or failed an operation (the error names the object).
    #[error(transparent)]
    Store(#[from] parcae_store::StoreError),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The I/O failure.
        source: std::io::Error,
    },
}

impl WorkerError {
    pub(crate) fn malformed(what: &'static str, reason: impl Into<String>) -> Self {
        WorkerError::Malformed { what, reason: reason.into() }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        WorkerError::Io { path: path.into(), source }
    }
}
