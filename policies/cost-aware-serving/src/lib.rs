//! The cost-aware configuration optimizer as a guest serving component: every
//! interval, the configuration on the fewest instances whose latency meets the
//! objective and whose throughput covers the arrivals at 80% utilization
//! (ties keep the current shape); when none does, SpotServe's choice.
//!
//! The optimizer lives in `parcae-serving-core`; this crate only binds it to
//! the `serving-policy` world, one optimizer per instance (its cache of
//! feasible replica shapes persists across calls), logging one debug line per
//! decision.

parcae_serving_core::serving_guest!(
    wit: "../../wit/serving",
    name: "cost-aware",
    optimizer: parcae_serving_core::CostAware,
);
