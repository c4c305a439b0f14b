//! Serving types, the latency model and the configuration optimizers, in plain Rust.
//!
//! Serving an LLM on spot instances means choosing, every interval, how to
//! split the model over the instances the cloud leaves: data-parallel
//! replicas (dp), tensor-parallel width (tp), pipeline depth (pp), the batch
//! size and the micro-batches of prefill and decode. SpotServe (ASPLOS'24)
//! makes that choice with an analytic latency model over a measured per-layer
//! profile; this crate holds that model ([`estimate()`]) and two optimizers
//! ([`SpotServe`], [`CostAware`]).
//!
//! The same code runs in two places, like `parcae-policy-core` for training:
//! compiled into guest components behind `wit/serving/serving.wit`, and
//! linked natively into the host, where it is the safe fallback when a serving
//! guest misbehaves and the model the serving simulator scores with.
//! [`wit_convert`] maps the core types to and from the generated records of
//! either side.

pub mod estimate;
pub mod optimizer;
pub mod types;
pub mod validate;
pub mod wit_convert;

pub use estimate::{Estimate, estimate, shapes, toy_profile, with_replicas};
pub use optimizer::{CostAware, SpotServe};
pub use types::*;

/// Chooses one serving configuration per interval of a request's horizon.
pub trait ServingOptimizer {
    /// Plan exactly one entry per interval of `request.instances` (the first
    /// is now); `None` stops serving for that interval.
    fn configure(&mut self, request: &ServeRequest) -> Result<ServePlan, String>;
}
