//! The vocabulary `parcae-host` and `parcae-worker` share. Nothing here touches
//! libtorch or the network, so the host can plan without linking either.

pub mod assignment;
pub mod job;
pub mod layout;
pub mod migration;
pub mod perf;
pub mod protocol;
pub mod recovery;
pub mod serving;

pub use layout::{Layout, LayoutError, ModelSpec, Slot, SpecFileError};
pub use migration::{
    AssignmentStrategy, Holding, MigrationKind, MigrationPlan, Transfer, TransferSource, WorkerId,
    plan_migration,
};
