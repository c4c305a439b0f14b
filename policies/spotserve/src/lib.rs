//! SpotServe's configuration optimizer as a guest serving component: every
//! interval, among the configurations whose throughput covers the arrival
//! rate, the one with the lowest latency on the instances there are; if none
//! covers it, the highest throughput.
//!
//! The optimizer lives in `parcae-serving-core` (also linked natively by the
//! host, where it is the fallback of every serving guest); this crate only
//! binds it to the `serving-policy` world, one optimizer per instance (its
//! cache of feasible replica shapes persists across calls), logging one debug
//! line per decision.

parcae_serving_core::serving_guest!(
    wit: "../../wit/serving",
    name: "spotserve",
    optimizer: parcae_serving_core::SpotServe,
);
