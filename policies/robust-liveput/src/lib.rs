//! Robust liveput as a guest component: the Parcae paper's ARIMA(1,1,0)
//! forecast and liveput optimizer, with every forecast interval hedged by the
//! chance, measured on the history, that it takes instances the count forecast
//! does not show (`parcae_policy_core::robust`).
//!
//! The algorithms live in `parcae-policy-core` (also linked natively by the
//! host); this crate binds them to the WIT world. One policy value serves both
//! interfaces and lives as long as the instance: the predictor hands its
//! estimate of the preemption risk to the optimizer through it (a forecast
//! record can only carry integer counts), and the optimizer keeps its
//! transition cache in it.

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
use parcae_policy_core::robust::RobustLiveput;
use parcae_policy_core::wit_convert::Convert;
use parcae_policy_core::{Optimizer, Predictor};

parcae_policy_core::impl_wit_conversions!();

thread_local! {
    /// The policy, shared by both interfaces; re-created with the instance
    /// after a fault (the next forecast restores the estimate).
    static POLICY: RefCell<RobustLiveput> = RefCell::new(RobustLiveput::default());
}

struct Robust;

impl wit_predictor::Guest for Robust {
    fn predict(request: wit_predictor::PredictRequest) -> Result<Vec<wit::IntervalStats>, String> {
        POLICY.with(|policy| policy.borrow_mut().predict(&request.convert())).map(Convert::convert)
    }
}

impl wit_optimizer::Guest for Robust {
    fn optimize(request: wit_optimizer::OptimizeRequest) -> Result<wit::Plan, String> {
        let request = request.convert();
        let (plan, churn) = POLICY.with(|policy| {
            let mut policy = policy.borrow_mut();
            let churn = policy.churn_for(&request);
            (policy.optimize(&request), churn)
        });
        let plan = plan?;
        if let Some(first) = plan.steps.first() {
            let chosen = first.config.map_or_else(|| "pause".to_string(), |c| c.to_string());
            let risk: f64 = churn.iter().map(|c| c.probability).sum();
            log(
                Level::Debug,
                &format!(
                    "robust liveput: {chosen} now, {:.0} samples expected over {} intervals, \
                     {:.1}% chance of preemptions per interval",
                    plan.expected_samples(),
                    plan.steps.len(),
                    100.0 * risk
                ),
            );
        }
        Ok(plan.convert())
    }
}

// Only a Wasm build exports the interfaces: natively the export names (which
// contain `:` and `/`) are not valid linker symbols, and nothing calls them.
#[cfg(target_arch = "wasm32")]
bindings::export!(Robust with_types_in bindings);
