//! The vocabulary `parcae-host` and `parcae-worker` share. Nothing here touches
//! libtorch or the network, so the host can plan without linking either.

pub mod layout;

pub use layout::{Layout, LayoutError, ModelSpec, Slot};
