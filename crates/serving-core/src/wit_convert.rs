//! Conversions between the core types and the records that a WIT binding
//! generator (wasmtime's on the host, wit-bindgen's in guests) makes from
//! `wit/serving/serving.wit`. Both sides generate structurally identical
//! records, so one macro serves both and the mapping is written once.
//!
//! The [`Convert`] trait is `parcae-policy-core`'s (identity for plain values,
//! element-wise for lists and options), so a crate binding both contracts has
//! one trait in scope. A plan crosses the boundary as its list of
//! configurations: `plan.configs.convert()` one way,
//! `ServePlan { configs: answer.convert() }` the other.

/// `parcae-policy-core`'s conversion macro, whose `@record` arm implements
/// [`Convert`] field by field for the records of either contract.
#[doc(hidden)]
pub use parcae_policy_core::impl_wit_conversions as record_conversions;
pub use parcae_policy_core::wit_convert::Convert;

use crate::{ServePlan, ServeRequest, ServingOptimizer};

/// Implement [`Convert`] both ways between the core serving types and
/// generated records.
///
/// Call it where two modules are in scope under these names: `wit` (the
/// generated `serving-types` interface) and `wit_configurator` (the generated
/// `configurator` interface).
#[macro_export]
macro_rules! impl_wit_conversions {
    () => {
        $crate::impl_wit_conversions!(@record wit::ServingConfig => ServingConfig {
            data_parallel, tensor_parallel, pipeline_stages, batch_size,
            prefill_micro_batches, decode_micro_batches
        });
        $crate::impl_wit_conversions!(@record wit::LayerTiming => LayerTiming {
            tensor_parallel, batch_size, prefill_ms, decode_ms
        });
        $crate::impl_wit_conversions!(@record wit::ServingProfile => ServingProfile {
            model, layers, gpus_per_instance, gpu_memory_bytes, weight_bytes, kv_bytes_per_token,
            profiled_input_tokens, pp_prefill_comm_ms, pp_decode_comm_ms, timings, load_bytes_per_ms,
            transfer_bytes_per_ms, reinit_ms, instance_start_ms
        });
        $crate::impl_wit_conversions!(@record wit::Workload => Workload { input_tokens, output_tokens });
        $crate::impl_wit_conversions!(@record wit_configurator::ServeRequest => ServeRequest {
            instances, arrival_rates, latency_slo_ms, interval_ms, current, workload, profile
        });
    };
    (@record $($wit:ident)::+ => $name:ident { $($field:ident),* $(,)? }) => {
        $crate::wit_convert::record_conversions!(@record $($wit)::+, $crate::$name { $($field),* });
    };
}

/// The guest side of `wit/serving/serving.wit` in one call: generates the
/// `serving-policy` world's bindings (module `bindings`) with wit-bindgen from
/// the WIT directory `$wit` (relative to the guest crate), names their
/// interfaces `wit` and `wit_configurator`, and implements the conversions
/// ([`impl_wit_conversions!`](crate::impl_wit_conversions)). The guest crate
/// depends on `wit-bindgen` and this crate; [`serving_guest!`](crate::serving_guest)
/// builds a whole guest on it.
#[macro_export]
macro_rules! serving_bindings {
    ($wit:literal) => {
        /// Rust bindings of the `serving-policy` world of `wit/serving/serving.wit`.
        #[allow(missing_docs, reason = "generated bindings")]
        mod bindings {
            wit_bindgen::generate!({
                path: $wit,
                world: "serving-policy",
            });
        }

        use bindings::exports::parcae::serving::configurator as wit_configurator;
        use bindings::parcae::serving::serving_types as wit;

        $crate::impl_wit_conversions!();
    };
}

/// A whole serving guest: [`serving_bindings!`](crate::serving_bindings) from
/// `wit`, and a `configurator` export that plans with one `optimizer` (a
/// [`ServingOptimizer`] with a `Default`) per instance, so that its cache of
/// feasible shapes persists across calls (a fault re-creates it with the
/// instance), and logs one debug line per decision, tagged `name`
/// ([`configure_guest`]).
#[macro_export]
macro_rules! serving_guest {
    (wit: $wit:literal, name: $name:literal, optimizer: $optimizer:ty $(,)?) => {
        $crate::serving_bindings!($wit);

        thread_local! {
            /// The optimizer and its shape cache, for the instance's life.
            static OPTIMIZER: ::std::cell::RefCell<$optimizer> =
                ::std::cell::RefCell::new(<$optimizer>::default());
        }

        /// The exported policy.
        struct ServingGuest;

        impl wit_configurator::Guest for ServingGuest {
            fn configure(
                request: wit_configurator::ServeRequest,
            ) -> Result<Vec<Option<wit::ServingConfig>>, String> {
                use bindings::parcae::serving::log::{Level, log};
                OPTIMIZER.with(|optimizer| {
                    let optimizer = &mut *optimizer.borrow_mut();
                    $crate::wit_convert::configure_guest($name, optimizer, request, |line| log(Level::Debug, line))
                })
            }
        }

        // Only a Wasm build exports the interface: natively the export names
        // (which contain `:` and `/`) are not valid linker symbols.
        #[cfg(target_arch = "wasm32")]
        bindings::export!(ServingGuest with_types_in bindings);
    };
}

/// The body of a guest's `configure` export: converts the generated request,
/// asks `optimizer`, hands a one-line summary of the decision to `log` (the
/// guest's debug log) and converts the plan back. Generic over the guest's
/// generated types, so each serving guest is only its bindings and this call.
pub fn configure_guest<R, C, O>(
    policy: &str,
    optimizer: &mut O,
    request: R,
    log: impl FnOnce(&str),
) -> Result<Vec<Option<C>>, String>
where
    R: Convert<ServeRequest>,
    crate::ServingConfig: Convert<C>,
    O: ServingOptimizer,
{
    let request: ServeRequest = request.convert();
    let plan = optimizer.configure(&request)?;
    log(&decision_line(policy, &request, &plan));
    Ok(plan.configs.convert())
}

/// One line describing a decision: the configuration chosen now, on how many
/// of the instances, for which arrival rate, and the plan's length.
pub fn decision_line(policy: &str, request: &ServeRequest, plan: &ServePlan) -> String {
    let now = plan.configs.first().copied().flatten();
    let chosen = now.map_or_else(|| "stop".to_string(), |c| c.to_string());
    let instances = request.instances.first().copied().unwrap_or(0);
    let used = now.map_or(0, |c| c.instances(request.profile.gpus_per_instance));
    let rate = request.arrival_rates.first().copied().unwrap_or(0.0);
    format!(
        "{policy}: {chosen} now on {used} of {instances} instances for {rate:.2} req/s, \
         {} intervals planned",
        plan.configs.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SpotServe;

    #[test]
    fn the_decision_line_names_the_choice_and_the_instances() {
        let request = ServeRequest {
            arrival_rates: vec![1.5, 1.0],
            latency_slo_ms: 60_000.0,
            ..crate::validate::tests::request()
        };
        let plan = SpotServe::default().configure(&request).unwrap();
        let line = decision_line("spotserve", &request, &plan);
        assert!(line.starts_with("spotserve: dp"), "{line}");
        assert!(line.contains("of 2 instances for 1.50 req/s, 2 intervals planned"), "{line}");
        let stopped = ServePlan { configs: vec![None, None] };
        assert!(decision_line("x", &request, &stopped).starts_with("x: stop now on 0 of 2"));
    }
}
