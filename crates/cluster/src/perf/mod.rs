//! The performance model of a layout's step time: per-layout regressors on the GPipe
//! critical path and the total work, fitted by non-negative least squares with the
//! measuring machine's effective cores (`fit.rs`), and its held-out errors (`holdout.rs`).
//! Here because both sides use it: `parcae-worker profile` fits in-process measurements,
//! `parcae-host profile` fits layouts trained by real worker processes.

mod fit;
mod holdout;

pub use fit::{
    FitError, GradientExchange, LayoutFeatures, N_TERMS, Observation, PerfModel, TERMS, fit, layout_features,
    nnls,
};
pub use holdout::{HeldOut, HoldoutReport, extrapolation, leave_one_out};
