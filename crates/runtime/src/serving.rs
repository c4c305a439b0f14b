//! Serving policies: components of the `serving-policy` world of
//! `wit/serving/serving.wit` (`parcae:serving`), run in the same sandbox as
//! training policies (same engine, linker, store, limits and fault
//! classification), with SpotServe's native optimizer as their fallback.

use std::sync::Arc;

use parcae_serving_core::wit_convert::Convert;
use parcae_serving_core::{ServePlan, ServeRequest, ServingOptimizer, SpotServe, validate};

use crate::component::PolicyComponent;
use crate::fault::{FaultCounts, FaultKind, PolicyFault};
use crate::guarded::{Answer, DEFAULT_QUARANTINE_AFTER, Slot, finish, guarded_call};
use crate::instance::PolicyInstance;

/// Host-side bindings of `wit/serving/serving.wit` and conversions to the core types.
mod bindings {
    wasmtime::component::bindgen!({
        path: "../../wit/serving",
        world: "serving-policy",
    });

    pub(crate) use exports::parcae::serving::configurator as wit_configurator;
    use parcae::serving::serving_types as wit;

    parcae_serving_core::impl_wit_conversions!();
}

pub(crate) use bindings::wit_configurator::{
    Guest as ConfiguratorExport, GuestIndices as ConfiguratorIndices,
};

/// A serving component's running instance: [`PolicyInstance`]'s containment
/// (fresh fuel and deadline per call, memory limits, re-instantiation after a
/// trap) around the `configure` call, whose answer is validated.
pub struct ServingInstance {
    inner: PolicyInstance,
}

impl ServingInstance {
    /// An instance of `component`; instantiation happens on the first call.
    pub fn new(component: Arc<PolicyComponent>) -> Self {
        Self { inner: PolicyInstance::new(component) }
    }

    /// The component this instance runs.
    pub fn component(&self) -> &Arc<PolicyComponent> {
        self.inner.component()
    }

    /// Fuel the last call consumed.
    pub fn last_fuel_used(&self) -> u64 {
        self.inner.last_fuel_used()
    }

    /// Ask the guest for a serving plan; the answer is validated against
    /// `request` ([`validate::check_plan`]).
    pub fn configure(&mut self, request: &ServeRequest) -> Result<ServePlan, PolicyFault> {
        configure(&mut self.inner, request)
    }
}

/// `configure` on `instance`, which must run a serving component (else an
/// `unsupported` fault).
fn configure(instance: &mut PolicyInstance, request: &ServeRequest) -> Result<ServePlan, PolicyFault> {
    const CALL: &str = "configure";
    let wit_request: bindings::wit_configurator::ServeRequest = request.clone().convert();
    let answer = instance.call(CALL, |live| match &live.configurator {
        Some(export) => Ok(export.call_configure(&mut live.store, &wit_request)),
        None => Err(FaultKind::Unsupported),
    })?;
    let plan = ServePlan { configs: answer.convert() };
    validate::check_plan(request, &plan)
        .map_err(|e| instance.fault(CALL, FaultKind::InvalidAnswer, e.to_string()))?;
    Ok(plan)
}

/// A serving policy that always answers: the guest's plan when it is valid,
/// the built-in SpotServe optimizer's otherwise (a trap, an exhausted budget,
/// a memory limit, an `err`, or a plan that fails [`validate::check_plan`]).
/// Like [`GuardedPolicy`](crate::GuardedPolicy), a guest that faults
/// `quarantine_after` times in a row is quarantined: later calls go straight
/// to the fallback.
pub struct GuardedServingPolicy {
    instance: ServingInstance,
    slot: Slot,
    quarantine_after: u32,
    fallback: SpotServe,
}

impl GuardedServingPolicy {
    /// Guard `component` (a serving component; see [`Exports::is_serving`](crate::Exports::is_serving)).
    pub fn new(component: Arc<PolicyComponent>) -> Self {
        Self {
            instance: ServingInstance::new(component),
            slot: Slot { instance: 0, counts: FaultCounts::default(), streak: 0 },
            quarantine_after: DEFAULT_QUARANTINE_AFTER,
            fallback: SpotServe::default(),
        }
    }

    /// Change how many consecutive faults quarantine the guest (0 = never).
    pub fn with_quarantine_after(mut self, faults: u32) -> Self {
        self.quarantine_after = faults;
        self
    }

    /// Name of the guest.
    pub fn name(&self) -> &str {
        self.instance.component().name()
    }

    /// Counters of the guest's calls and faults.
    pub fn counts(&self) -> FaultCounts {
        self.slot.counts.clone()
    }

    /// A valid plan for `request`, always: the guest's, or SpotServe's. When
    /// even SpotServe refuses the request (no intervals, or not one rate per
    /// interval), the plan stops serving in every interval.
    pub fn configure(&mut self, request: &ServeRequest) -> Answer<ServePlan> {
        let outcome = guarded_call(&mut self.slot, self.quarantine_after, &mut self.instance.inner, |i| {
            configure(i, request)
        });
        let fallback = &mut self.fallback;
        finish(Some(outcome), || {
            fallback
                .configure(request)
                .unwrap_or_else(|_| ServePlan { configs: vec![None; request.instances.len()] })
        })
    }
}

#[cfg(test)]
mod tests {
    use parcae_serving_core::wit_convert::Convert;
    use parcae_serving_core::{LayerTiming, ServeRequest, ServingConfig, ServingProfile, Workload};

    use super::bindings::wit_configurator;

    /// Every field of a request crosses the WIT boundary and comes back unchanged.
    #[test]
    fn a_serve_request_round_trips_through_the_generated_records() {
        let config = ServingConfig {
            data_parallel: 2,
            tensor_parallel: 4,
            pipeline_stages: 3,
            batch_size: 8,
            prefill_micro_batches: 2,
            decode_micro_batches: 4,
        };
        let request = ServeRequest {
            instances: vec![3, 5],
            arrival_rates: vec![1.5, 2.25],
            latency_slo_ms: 4000.0,
            interval_ms: 60_000,
            current: Some(config),
            workload: Workload { input_tokens: 512, output_tokens: 128 },
            profile: ServingProfile {
                model: "gpt-20b".into(),
                layers: 44,
                gpus_per_instance: 4,
                gpu_memory_bytes: 16 << 30,
                weight_bytes: 40 << 30,
                kv_bytes_per_token: 1 << 20,
                profiled_input_tokens: 512,
                pp_prefill_comm_ms: 3.5,
                pp_decode_comm_ms: 0.25,
                timings: vec![LayerTiming {
                    tensor_parallel: 4,
                    batch_size: 2,
                    prefill_ms: 7.0,
                    decode_ms: 0.5,
                }],
                load_bytes_per_ms: 1e6,
                transfer_bytes_per_ms: 2e6,
                reinit_ms: 900.0,
                instance_start_ms: 30_000.0,
            },
        };
        let wit: wit_configurator::ServeRequest = request.clone().convert();
        assert_eq!(wit.current.unwrap().decode_micro_batches, 4);
        assert_eq!(wit.profile.timings[0].prefill_ms, 7.0);
        let back: ServeRequest = wit.convert();
        assert_eq!(back, request);
    }
}
