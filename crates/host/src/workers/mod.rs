//! Local worker processes on a replayed trace, shared by `run` (training) and `serve`
//! (inference): the fleet of processes and their control links ([`fleet`]), the cloud's
//! clock that allocates, warns and kills them ([`cloud`]), and the trace mapped onto wall
//! time ([`mod@timeline`]).

pub mod accept;
pub mod cloud;
pub mod fleet;
pub mod local;
pub mod timeline;

pub use accept::accept_loop;
pub use local::{HostEndpoint, prepare_run_dir};
pub use timeline::{FleetEvent, TimeScale, TimedEvent, resume_at, timeline};
