//! One module per `parcae-host` subcommand: each turns its parsed arguments
//! into work on the library crates and prints or writes the result. Commands
//! depend on the shared modules ([`crate::args`], [`crate::control`],
//! [`crate::record`], [`crate::svg`], [`crate::embedded`],
//! [`crate::policies`], [`crate::processes`], [`crate::workers`], [`crate::serving`]), never on each other, with one exception: `profile` runs
//! `parcae-host run` as a process and reads its event log with `run`'s event types.

pub mod bench;
pub mod bench_fidelity;
pub mod bench_migration;
pub mod bench_mixed;
pub mod bench_serve;
pub mod loadgen;
pub mod policy;
pub mod profile;
pub mod profile_serving;
pub mod provision;
pub mod replay;
#[expect(
    missing_docs,
    reason = "run/ is being refactored into a state machine in parallel; its field docs come with that change"
)]
pub mod run;
pub mod serve;
pub mod trace;
