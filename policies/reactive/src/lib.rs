//! Parcae's reactive baseline as a guest component: the fleet is assumed to stay
//! as it is (persistence forecast) and each interval runs the layout with the
//! highest profiled throughput for the instances available, ignoring migration
//! costs. The logic lives in `parcae-policy-core`, shared with the host's
//! built-in fallback; this crate only binds it to the WIT world.

/// Rust bindings of the `full-policy` world of `wit/policy.wit`.
#[allow(missing_docs, reason = "generated bindings")]
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "full-policy",
    });
}

use bindings::exports::parcae::policy::optimizer as wit_optimizer;
use bindings::exports::parcae::policy::predictor as wit_predictor;
use bindings::parcae::policy::log::{Level, log};
use bindings::parcae::policy::types as wit;
use parcae_policy_core::reactive::{Persistence, ThroughputOptimal};
use parcae_policy_core::wit_convert::Convert;
use parcae_policy_core::{Optimizer, Predictor};

parcae_policy_core::impl_wit_conversions!();

struct Reactive;

impl wit_predictor::Guest for Reactive {
    fn predict(request: wit_predictor::PredictRequest) -> Result<Vec<wit::IntervalStats>, String> {
        Persistence.predict(&request.convert()).map(Convert::convert)
    }
}

impl wit_optimizer::Guest for Reactive {
    fn optimize(request: wit_optimizer::OptimizeRequest) -> Result<wit::Plan, String> {
        let plan = ThroughputOptimal.optimize(&request.convert())?;
        if let Some(first) = plan.steps.first() {
            let chosen = first.config.map_or_else(|| "pause".to_string(), |c| c.to_string());
            log(Level::Debug, &format!("reactive: {chosen} for the next interval"));
        }
        Ok(plan.convert())
    }
}

// Only a Wasm build exports the interfaces: natively the export names (which
// contain `:` and `/`) are not valid linker symbols, and nothing calls them.
#[cfg(target_arch = "wasm32")]
bindings::export!(Reactive with_types_in bindings);
