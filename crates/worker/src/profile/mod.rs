//! `parcae-worker profile`: measures this machine, fits a performance model and writes a
//! profile the host's planner reads (`profiles/README.md`, crate `parcae-profile`).
//!
//! The planner needs the iteration time of every (D, P) layout it may choose and the cost of
//! moving state. A small machine cannot run every layout the way a fleet would (one instance
//! per slot), so this module
//!
//! 1. **measures** the real trainer: each candidate layout is trained in this process by
//!    [`train_local`](crate::local::train_local) (one thread per slot, one libtorch thread
//!    each, in-process links and all-reduce), `warmup_steps` untimed steps, then `steps` timed
//!    ones, the layouts taking turns step by step so that other load on the machine hits them
//!    alike (median, min, max); in-process rather than worker processes because it needs no
//!    host, is deterministic and runs exactly the compute code (`StageTrainer`) the workers
//!    run; the network is measured separately (below);
//! 2. **fits** a performance model in the spirit of CM-DARE's regression models: linear in six
//!    per-layer compute and communication terms ([`TERMS`]) on the critical path of the GPipe
//!    schedule, fitted by non-negative least squares on relative errors. The measurements of
//!    layouts with more slots than cores are contended, so the model on the profiling machine
//!    is `max(critical path, total work / C)`, `C` (effective cores, searched between 1 and the
//!    cores given) fitted too; the profile uses the critical path alone (one core per
//!    instance);
//! 3. **validates** it on held-out layouts (leave-one-out, and fitting the small layouts to
//!    predict the large ones), since a model that predicts unrun layouts is only as good as
//!    its error on layouts it did not see;
//! 4. **measures the transfer curve** (`p2p_us_by_bytes`) through parcae-net's QUIC state
//!    transfer (mutual TLS, checksummed chunks) between two endpoints on loopback, with the
//!    worker's own transfer options, at the model's layer-state sizes;
//! 5. **writes the profile**: measured step times for the layouts that fit the machine (one
//!    core per slot: at most `cores` slots, and no more than the fitted effective cores, which
//!    other load on the machine lowers), model predictions for the others; its `source` lists
//!    which are which (the format has no per-entry field for it).
//!
//! One submodule per step: `measure.rs` (training layouts, stage builds, process
//! starts), the fit and its held-out errors (`parcae_cluster::perf`, shared with `parcae-host profile`),
//! `transfer.rs` (the QUIC transfer curve), `run.rs` (the whole pipeline), `file.rs` (the
//! profile file written) and `report.rs` (what `profile` prints). Everything public is
//! re-exported here, so callers name `parcae_worker::profile::X` whatever file it lives in.
//!
//! `serving.rs` is `parcae-worker profile-serving`: inference of the model measured the same
//! way (per-layer prefill and decode, pipeline hops over the same QUIC transfer) and written
//! as a serving profile for SpotServe's latency model (see its module docs).

mod file;
mod measure;
mod options;
mod report;
mod run;
mod serving;
mod transfer;

use std::path::PathBuf;

use parcae_cluster::{Layout, LayoutError, ModelSpec};

use crate::error::WorkerError;

pub use file::write_profile;
pub use measure::{Measurement, Timings, measure_layouts, measure_model_build, measure_process_start};
pub use options::{EXAMPLE_ON_DEMAND_USD_PER_HOUR, EXAMPLE_SPOT_USD_PER_HOUR, ProfileOptions, hardware_name};
pub use parcae_cluster::perf::{
    FitError, GradientExchange, HeldOut, HoldoutReport, LayoutFeatures, N_TERMS, Observation, PerfModel,
    TERMS, extrapolation, fit, layout_features, leave_one_out, nnls,
};
pub use report::{EntrySource, LayoutRow, ProfileReport, render_table};
pub use run::{Progress, run_profile};
pub use serving::{
    BatchMeasurement, MEMORY_FRACTION, ServingProfileOptions, ServingReport, kv_bytes_per_token,
    run_serving_profile, weight_bytes, write_serving_profile,
};
pub use transfer::{default_transfer_sizes, measure_transfer};

/// Why profiling failed.
#[derive(Debug, thiserror::Error)]
pub enum ProfilingError {
    /// Training a layout failed.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// The spec or a layout is unusable.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// The profile built does not pass the cost model's checks (a bug here, or bad options).
    #[error("the profile built does not validate: {0}")]
    Profile(#[from] parcae_profile::ProfileError),
    /// Running the model for inference failed.
    #[error(transparent)]
    Infer(#[from] crate::infer::InferError),
    /// The QUIC transfer measurement failed.
    #[error("measuring transfers over QUIC: {0}")]
    Transfer(String),
    /// The options cannot give a profile (e.g. nothing to measure).
    #[error("{0}")]
    Options(String),
    /// Starting a process or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or program.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
}

/// Every (D, P) with D x P <= `max_instances` that the worker can run ([`Layout::new`]
/// accepts it) and the cost model can partition (P at most `parcae_profile::max_stages`),
/// sorted by D then P.
pub fn candidate_layouts(spec: &ModelSpec, max_instances: usize) -> Vec<(usize, usize)> {
    let deepest = parcae_profile::max_stages(spec.num_layers());
    let mut out = Vec::new();
    for d in 1..=max_instances {
        for p in 1..=deepest.min(max_instances / d) {
            if Layout::new(spec, d, p).is_ok() {
                out.push((d, p));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_runnable_and_within_the_cost_models_depth() {
        let spec = ModelSpec::default();
        let c = candidate_layouts(&spec, 8);
        // 8 layers: P <= 7 for the cost model; D <= 8 micro-batches.
        assert_eq!(c.len(), 7 + 4 + 2 + 2 + 4);
        assert!(c.iter().all(|&(d, p)| d * p <= 8 && p <= 7 && Layout::new(&spec, d, p).is_ok()));
        assert_eq!(c.first(), Some(&(1, 1)));
    }
}
