//! The Parcae host: loads sandboxed policies, reads traces and profiles, and
//! drives the control loop (predict, optimize, apply) over them.
//!
//! The binary `parcae-host` is a thin shell over [`cli::run`]; everything it does
//! is reachable from this library so tests and other tools can call it directly.

pub mod cli;
pub mod commands;
pub mod embedded;
pub mod policies;
