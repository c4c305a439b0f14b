//! The Parcae paper's policy as a guest component: an ARIMA(1,1,0) forecast of
//! the fleet size and a liveput optimizer that plans the layout of every
//! forecast interval by dynamic programming over expected samples, net of
//! migration costs (exact expectations over which instances are preempted).
//!
//! The algorithms live in `parcae-policy-core` (also linked natively by the
//! host for its Oracle and benchmarks); this crate binds them to the WIT world
//! and keeps the optimizer's transition cache alive between calls.

/// Rust bindings of the `full-policy` world of `wit/policy.wit`.
#[allow(missing_docs, reason = "generated bindings")]
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "full-policy",
    });
}

use std::cell::RefCell;

use bindings::exports::parcae::policy::optimizer as wit_optimizer;
use bindings::exports::parcae::policy::predictor as wit_predictor;
use bindings::parcae::policy::log::{Level, log};
use bindings::parcae::policy::types as wit;
use parcae_policy_core::arima::Arima;
use parcae_policy_core::optimizer::Liveput;
use parcae_policy_core::wit_convert::Convert;
use parcae_policy_core::{Optimizer, Predictor};

parcae_policy_core::impl_wit_conversions!();

thread_local! {
    /// The optimizer memoises transition distributions across calls; the
    /// instance lives as long as the host keeps it (re-created after a fault).
    static OPTIMIZER: RefCell<Liveput> = RefCell::new(Liveput::default());
}

struct ArimaLiveput;

impl wit_predictor::Guest for ArimaLiveput {
    fn predict(request: wit_predictor::PredictRequest) -> Result<Vec<wit::IntervalStats>, String> {
        Arima::default().predict(&request.convert()).map(Convert::convert)
    }
}

impl wit_optimizer::Guest for ArimaLiveput {
    fn optimize(request: wit_optimizer::OptimizeRequest) -> Result<wit::Plan, String> {
        let plan = OPTIMIZER.with(|optimizer| optimizer.borrow_mut().optimize(&request.convert()))?;
        if let Some(first) = plan.steps.first() {
            let chosen = first.config.map_or_else(|| "pause".to_string(), |c| c.to_string());
            log(
                Level::Debug,
                &format!(
                    "liveput: {chosen} now, {:.0} samples expected over {} intervals",
                    plan.expected_samples(),
                    plan.steps.len()
                ),
            );
        }
        Ok(plan.convert())
    }
}

// Only a Wasm build exports the interfaces: natively the export names (which
// contain `:` and `/`) are not valid linker symbols, and nothing calls them.
#[cfg(target_arch = "wasm32")]
bindings::export!(ArimaLiveput with_types_in bindings);
