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

#[cfg(test)]
mod tests {
    use parcae_policy_core::wit_convert::Convert;
    use parcae_policy_core::{self as core, IntervalStats, TypeCount};

    use super::{wit_optimizer, wit_predictor};

    fn mix(p3: u32, g4dn: u32) -> Vec<TypeCount> {
        vec![
            TypeCount { instance_type: "p3.2xlarge".into(), instances: p3 },
            TypeCount { instance_type: "g4dn.xlarge".into(), instances: g4dn },
        ]
    }

    /// WIT 0.3.0 carries a mixed fleet's instance types to the guest and back unchanged.
    #[test]
    fn instance_types_cross_the_wit_boundary() {
        let predict = core::PredictRequest {
            history: IntervalStats::chain_from(0, &[5, 7]),
            horizon: 3,
            interval_ms: 60_000,
            fleet_min: 5,
            fleet_max: 16,
            history_by_type: vec![mix(3, 2), mix(3, 4)],
        };
        let wit: wit_predictor::PredictRequest = predict.clone().convert();
        assert_eq!(wit.history_by_type[1][1].instance_type, "g4dn.xlarge");
        assert_eq!(wit.history_by_type[1][1].instances, 4);
        let back: core::PredictRequest = wit.convert();
        assert_eq!(back, predict);
        let optimize = core::OptimizeRequest {
            forecast: IntervalStats::chain_from(5, &[7]),
            instances_now: 7,
            current: None,
            interval_ms: 60_000,
            profile: core::ModelProfile::empty("toy", 8, 1),
            recovery: core::Recovery::UNANNOUNCED,
            instances_now_by_type: mix(3, 4),
        };
        let wit: wit_optimizer::OptimizeRequest = optimize.clone().convert();
        assert_eq!(wit.instances_now_by_type.len(), 2);
        let back: core::OptimizeRequest = wit.convert();
        assert_eq!(back, optimize);
    }
}
