//! Parcae's native worker core: trains one pipeline stage of one data-parallel replica of a
//! GPT-style decoder with libtorch (through tch), and exports/imports its state layer by layer
//! so the host can migrate it between workers.
//!
//! - [`model`]: the decoder as plain functions of explicit tensors, deterministic init.
//! - [`infer`]: generation with a KV cache over the same layers and parameters (whole model or
//!   a pipeline stage's layer range), greedy or seeded sampling.
//! - [`cloud`]: preemption notices from the instance metadata service (AWS, GCP, Azure).
//! - [`data`]: deterministic synthetic data, a pure function of (seed, step, micro-batch).
//! - [`state`]: a layer's migratable state, its byte format, checkpoints.
//! - [`stage`]: [`StageTrainer`] (GPipe schedule, two-phase Adam step) and the
//!   [`PipeLink`] / [`Collective`] traits the network layer implements.
//! - [`local`]: in-process links and collectives (threads + channels) and a local driver.
//! - [`tensor`]: host tensors and the wire encoding of tensors.
//! - [`profile`]: `parcae-worker profile`: measures layouts and transfers on this machine, fits
//!   a performance model and writes a profile for the host's planner; `profile-serving`
//!   measures inference and writes a serving profile.
//!
//! The shared vocabulary (model shape, layouts, slots) is `parcae_cluster::layout`.

pub mod cloud;
pub mod data;
pub mod error;
pub mod infer;
pub mod local;
pub mod model;
pub mod profile;
pub mod rng;
pub mod serving;
pub mod stage;
pub mod state;
pub mod tensor;

pub use error::WorkerError;
pub use stage::{Collective, PipeLink, StageTrainer, StepOutcome};
pub use state::{
    Checkpoint, LayerState, load_checkpoint, load_checkpoint_from, save_checkpoint, save_checkpoint_to,
};
/// The tch this crate is built with, so dependents name the same `Tensor`/`Device` types
/// (e.g. to implement [`PipeLink`]) without pinning tch themselves.
pub use tch;
pub use tensor::{TensorData, tensor_from_bytes, tensor_to_bytes};

use tch::Device;

/// libtorch's shared-library directory this crate was linked against (from torch-sys at build
/// time). Binaries of this package carry it as an rpath; other packages whose binaries link
/// this crate add the same rpath from `DEP_PARCAE_WORKER_LIBTORCH_LIB` in their build script,
/// or a launcher can put it on `LD_LIBRARY_PATH` (see the crate README). Empty if unknown.
pub const LIBTORCH_LIB_DIR: &str = env!("PARCAE_LIBTORCH_LIB");

/// Loads libtorch's CUDA backend if it is installed: tch links only `libtorch_cpu` (the linker
/// drops the unused `libtorch_cuda` under `--as-needed`), so on a GPU machine the CUDA
/// backend has to be loaded explicitly before CUDA can be used. Returns whether a CUDA device
/// is usable afterwards. Cheap and harmless on machines without a GPU.
pub fn load_cuda() -> bool {
    use std::sync::OnceLock;
    static LOADED: OnceLock<bool> = OnceLock::new();
    *LOADED.get_or_init(|| {
        let candidates = [format!("{LIBTORCH_LIB_DIR}/libtorch_cuda.so"), "libtorch_cuda.so".to_string()];
        for path in candidates.iter().filter(|p| !p.starts_with('/') || std::path::Path::new(p).exists()) {
            let Ok(c_path) = std::ffi::CString::new(path.as_str()) else { continue };
            // SAFETY: dlopen with a valid NUL-terminated path; the handle is deliberately kept
            // open for the life of the process (libtorch registers its CUDA hooks on load).
            let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            if !handle.is_null() {
                tracing::debug!(%path, "loaded libtorch's CUDA backend");
                return tch::Cuda::is_available();
            }
        }
        tracing::debug!("libtorch's CUDA backend is not available");
        false
    })
}

/// The device to train on: CUDA device 0 when `want_cuda` and a GPU is usable, else the CPU.
pub fn pick_device(want_cuda: bool) -> Device {
    if want_cuda && load_cuda() { Device::Cuda(0) } else { Device::Cpu }
}
