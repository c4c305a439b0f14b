//! The Parcae host: loads sandboxed policies, reads traces and profiles, and
//! drives the control loop (predict, optimize, apply) over them.
//!
//! The binary `parcae-host` is a thin shell over [`cli::run`]; everything it does
//! is reachable from this library so tests and other tools can call it directly.
//!
//! Layout: [`cli`] parses and dispatches; [`commands`] holds one module per
//! subcommand; the modules they share are [`args`] (argument groups),
//! [`checkpoints`] (a run's checkpoints in the store),
//! [`control`] (the control step), [`record`] (scored-run records),
//! [`svg`] (the figures' builder), [`policies`] (loading components),
//! [`progress`] (progress bars), [`templates`] (the `policy new` scaffolds),
//! [`processes`] (the worker binary, child commands), [`workers`] (local worker
//! processes on a replayed trace) and [`embedded`] (what the
//! binary carries, and the fallbacks to it).

pub mod args;
pub mod checkpoints;
pub mod cli;
pub mod commands;
pub mod control;
pub mod embedded;
pub mod policies;
pub mod processes;
pub mod progress;
pub mod record;
pub mod serving;
pub mod stats;
pub mod svg;
pub mod templates;
pub mod workers;
