//! Serving the model (`parcae-host serve`): why it is split this way.
//!
//! The engine (the lead's [`engine`]) schedules requests onto the worker cluster and
//! survives its reconfigurations; everything a client sees lives in front of it and talks
//! to it only through the small channel contract of [`api`], so the front end can be
//! tested against a stand-in engine and the engine never sees HTTP:
//! - [`api`]: the jobs, events, status and model card the engine and the front end share;
//! - [`tokenizer`]: the reversible character tokenizer of the built-in model (it has no
//!   real vocabulary);
//! - [`http`]: the OpenAI-compatible HTTP API (`/v1/completions`, `/v1/models`, `/health`);
//! - [`loadgen`]: the load generator (`parcae-host loadgen`, and `serve --load-rate`):
//!   Gamma arrivals of streamed requests over real HTTP, with latency percentiles;
//! - [`local`]: the engine on local worker processes replaying a trace, shared by `serve`
//!   and `profile-serving` so the profile measures the deployment `serve` runs.

pub mod api;
pub mod engine;
pub mod http;
pub mod loadgen;
pub mod local;
pub mod tokenizer;
