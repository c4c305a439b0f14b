//! The sandbox that runs scheduling policies.
//!
//! Policies are WebAssembly components implementing `wit/policy.wit`. This crate
//! loads them ([`PolicyRuntime`]), tells what they implement ([`PolicyComponent`]),
//! runs their calls under a fuel budget, a wall-clock deadline and memory limits
//! ([`PolicyInstance`]), and wraps them so that whatever a guest does, the caller
//! gets a valid answer: a guest's answer when it is valid, the built-in safe
//! policy's otherwise ([`GuardedPolicy`]).
//!
//! Serving policies (`wit/serving/serving.wit`, [`SERVING_WIT_PACKAGE`]) load
//! the same way; [`PolicyComponent::exports`] tells them apart, and
//! [`ServingInstance`] and [`GuardedServingPolicy`] run them under the same
//! limits, with SpotServe's optimizer as the fallback.
//!
//! The sandbox grants nothing: the guest sees WASI's interfaces (a std guest
//! imports them even when it does no I/O) but no files, sockets, environment,
//! arguments or inherited stdio; its clocks are frozen and its randomness is
//! seeded, so a policy's decisions are reproducible. WASI packages beyond
//! wasmtime-wasi's p2 set (`wasi:http`, which a default componentize-js build
//! imports for `fetch`) are satisfied by stubs that trap when called
//! ([`PolicyComponent::stubbed_imports`]).
//!
//! Compiling a large component takes seconds; a runtime given a cache
//! directory ([`PolicyRuntime::with_compile_cache`]) keeps the machine code of
//! large components there between runs.

mod bindings;
mod cache;
mod component;
mod fault;
mod guarded;
mod instance;
mod sandbox;
mod serving;

pub use cache::{CACHE_MAX_BYTES, CACHE_MIN_BYTES};
pub use component::{Exports, LoadError, PolicyComponent, PolicyRuntime};
pub use fault::{FaultCounts, FaultKind, PolicyFault};
pub use guarded::{Answer, GuardedPolicy, Source};
pub use instance::PolicyInstance;
pub use sandbox::SandboxLimits;
pub use serving::{GuardedServingPolicy, ServingInstance};

/// WIT package of the training contract this runtime implements; a training
/// component must target it.
pub const WIT_PACKAGE: &str = "parcae:policy@0.3.0";

/// WIT package of the serving contract this runtime implements; a serving
/// component must target it.
pub const SERVING_WIT_PACKAGE: &str = "parcae:serving@0.1.0";
