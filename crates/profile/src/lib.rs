//! Profiles and the cost model's constants, loaded from data files.
//!
//! Parcae's optimizer needs, per model and cluster, the measured throughput of
//! every parallel layout and what it costs to move between layouts. The
//! measurements live in a *profile* (e.g. `shared/profiles/p3-v100-parcae.json`,
//! or `profiles/example-small.json` here); the remaining constants of the cost
//! model (communicator rebuild formulas, checkpoint save/load, all-reduce
//! bandwidth) live in a *constants* file (`profiles/cost-constants.json`).
//! Neither is compiled in, so a user can profile their own cluster and supply
//! their own files. `profiles/README.md` documents both formats.
//!
//! ```no_run
//! use parcae_profile::{CostConstants, Profile};
//! let profile = Profile::load("profiles/example-small.json")?;
//! let constants = CostConstants::load("profiles/cost-constants.json")?;
//! let model = profile.model_profile("tiny-gpt", &constants)?;
//! println!("{} layouts, peak {:.1} samples/s", model.configs.len(), model.peak_samples_per_second());
//! # Ok::<(), parcae_profile::ProfileError>(())
//! ```

mod constants;
mod error;
mod jsonloc;
mod partition;
mod profile;
mod serving;
mod transfer;

pub use constants::{
    Change, CommRebuild, CommRebuildKind, CommRebuildSpec, CommRebuildTable, CostConstants, CostConstantsFile,
};
pub use error::{Position, ProfileError};
pub use partition::{PartitionError, max_stages, partition, stage_layer_counts, stage_partition};
pub use profile::{Arch, Instance, LayerParams, ModelEntry, Profile, ProfileFile, ThroughputEntry};
pub use serving::{
    BatchContention, ContentionEntry, LightLoadEntry, PipelineHop, Reconfiguration, ServingInstance,
    ServingProfileData, ServingProfileFile, TimingEntry, WorkloadEntry,
};
pub use transfer::{CurveError, TransferCurve, transfer_ms, transfer_us};
