//! Host-side bindings of `wit/policy.wit` and conversions to the core types.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "full-policy",
});

pub(crate) use exports::parcae::policy::optimizer::{
    Guest as OptimizerExport, GuestIndices as OptimizerIndices,
};
pub(crate) use exports::parcae::policy::predictor::{
    Guest as PredictorExport, GuestIndices as PredictorIndices,
};
pub(crate) use parcae::policy::log;

use exports::parcae::policy::optimizer as wit_optimizer;
use exports::parcae::policy::predictor as wit_predictor;
use parcae::policy::types as wit;

parcae_policy_core::impl_wit_conversions!();
