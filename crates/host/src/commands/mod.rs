//! One module per `parcae-host` subcommand: each turns its parsed arguments
//! into work on the library crates and prints or writes the result. Commands
//! depend on the shared modules ([`crate::args`], [`crate::control`],
//! [`crate::record`], [`crate::svg`], [`crate::embedded`],
//! [`crate::policies`]), never on each other.

pub mod bench;
pub mod bench_migration;
pub mod policy;
pub mod provision;
pub mod replay;
pub mod run;
pub mod trace;
