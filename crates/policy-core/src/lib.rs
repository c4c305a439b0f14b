//! Policy types and algorithms in plain Rust.
//!
//! The same code runs in two places: compiled into guest components (behind the
//! WIT bindings) and linked natively into the host, where it serves as the safe
//! fallback when a guest misbehaves and as the native side of benchmarks. Keeping
//! one implementation means the sandbox overhead is the only difference between
//! the two.

pub mod arima;
pub mod at_risk;
pub mod churn;
pub mod count_forecast;
pub mod guard;
pub mod liveput;
pub mod mixed;
pub mod optimizer;
pub mod plan;
pub mod reactive;
pub mod recovery;
pub mod robust;
pub mod types;
pub mod validate;
pub mod wit_convert;

pub use recovery::Recovery;
pub use types::*;

/// Forecasts fleet availability for the next intervals.
pub trait Predictor {
    /// Forecast `request.horizon` intervals, nearest first.
    fn predict(&mut self, request: &PredictRequest) -> Result<Vec<IntervalStats>, String>;
}

/// Plans one parallel layout per forecast interval.
pub trait Optimizer {
    /// Plan exactly one step per interval of `request.forecast`.
    fn optimize(&mut self, request: &OptimizeRequest) -> Result<Plan, String>;
}
