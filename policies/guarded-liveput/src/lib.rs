//! Guarded liveput as a guest component, the default policy: hedged liveput
//! (a persistence count forecast, or ARIMA's where the planner fed it has
//! lately earned more, the observed churn's risk, the liveput program;
//! `parcae_policy_core::count_forecast` says why persistence first)
//! followed only while it earns at
//! least what the reactive baseline would have earned on the same fleet, both
//! replayed under the cost model on the intervals actually observed
//! (`parcae_policy_core::guard`).
//!
//! The algorithms live in `parcae-policy-core` (also linked natively by the
//! host); this crate binds them to the WIT world. One policy value serves both
//! interfaces and lives as long as the instance: it holds the forecast's risk
//! estimate, the guard's shadows and the transition cache. After a
//! fault the instance is re-created and the guard starts over from the next
//! interval.

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
use parcae_policy_core::guard::GuardedLiveput;
use parcae_policy_core::wit_convert::Convert;
use parcae_policy_core::{Optimizer, Predictor};

parcae_policy_core::impl_wit_conversions!();

thread_local! {
    /// The policy, shared by both interfaces.
    static POLICY: RefCell<GuardedLiveput> = RefCell::new(GuardedLiveput::default());
}

struct Guarded;

impl wit_predictor::Guest for Guarded {
    fn predict(request: wit_predictor::PredictRequest) -> Result<Vec<wit::IntervalStats>, String> {
        POLICY.with(|policy| policy.borrow_mut().predict(&request.convert())).map(Convert::convert)
    }
}

impl wit_optimizer::Guest for Guarded {
    fn optimize(request: wit_optimizer::OptimizeRequest) -> Result<wit::Plan, String> {
        let request = request.convert();
        let (plan, leader, forecast) = POLICY.with(|policy| {
            let mut policy = policy.borrow_mut();
            let plan = policy.optimize(&request);
            (plan, policy.leader(), policy.forecast())
        });
        let plan = plan?;
        if let Some(first) = plan.steps.first() {
            let chosen = first.config.map_or_else(|| "pause".to_string(), |c| c.to_string());
            log(
                Level::Debug,
                &format!(
                    "guarded liveput: {chosen} now, {leader:?} in charge, planning on {forecast:?} counts"
                ),
            );
        }
        Ok(plan.convert())
    }
}

// Only a Wasm build exports the interfaces: natively the export names (which
// contain `:` and `/`) are not valid linker symbols, and nothing calls them.
#[cfg(target_arch = "wasm32")]
bindings::export!(Guarded with_types_in bindings);
