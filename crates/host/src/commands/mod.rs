//! One module per `parcae-host` subcommand: each turns its parsed arguments
//! into work on the library crates and prints or writes the result.

pub mod bench;
pub mod bench_migration;
pub mod provision;
pub mod replay;
pub mod run;
pub mod trace_plots;
