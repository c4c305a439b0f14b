//! The vocabulary `parcae-host` and `parcae-worker` share. Nothing here touches
//! libtorch or the network, so the host can plan without linking either.

pub mod assignment;
pub mod layout;
pub mod migration;
pub mod protocol;

pub use layout::{Layout, LayoutError, ModelSpec, Slot};
pub use migration::{
    Holding, MigrationKind, MigrationPlan, Source, Strategy, Transfer, WorkerId, plan_migration,
};
