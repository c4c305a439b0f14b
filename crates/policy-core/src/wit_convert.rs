//! Conversions between the core types and the records that a WIT binding
//! generator (wasmtime's on the host, wit-bindgen's in guests) makes from
//! `wit/policy.wit`. Both sides generate structurally identical records, so one
//! macro serves both and the mapping is written once.

/// Implement [`Convert`] both ways between the core types and generated records.
///
/// Call it where three modules are in scope under these names: `wit` (the
/// generated `types` interface), `wit_predictor` and `wit_optimizer` (the
/// generated predictor and optimizer interfaces).
#[macro_export]
macro_rules! impl_wit_conversions {
    () => {
        $crate::impl_wit_conversions!(@both IntervalStats { instances, arrivals, preemptions });
        $crate::impl_wit_conversions!(@both ParallelConfig { data_parallel, pipeline_stages });
        $crate::impl_wit_conversions!(@both TransferPoint { bytes, micros });
        $crate::impl_wit_conversions!(@both ConfigProfile {
            config, samples_per_second, iteration_ms, comm_rebuild_add_ms,
            comm_rebuild_remove_ms, model_build_ms
        });
        $crate::impl_wit_conversions!(@both StagePartition {
            pipeline_stages, layers_per_stage, state_bytes_per_stage
        });
        $crate::impl_wit_conversions!(@both PlanStep { config, expected_samples });
        $crate::impl_wit_conversions!(@both Plan { steps });
        $crate::impl_wit_conversions!(@both ModelProfile {
            model, global_batch_size, micro_batch_size, configs, partitions, transfer_curve,
            rendezvous_ms, process_start_ms, add_extra_ms, checkpoint_restart_ms, checkpoint_interval_ms
        });
        $crate::impl_wit_conversions!(@both Recovery { preemption_notice_ms, checkpoint_write_bytes_per_ms });
        $crate::impl_wit_conversions!(@both TypeCount { instance_type, instances });
        $crate::impl_wit_conversions!(@request wit_predictor::PredictRequest => PredictRequest {
            history, horizon, interval_ms, fleet_min, fleet_max, history_by_type
        });
        $crate::impl_wit_conversions!(@request wit_optimizer::OptimizeRequest => OptimizeRequest {
            forecast, instances_now, current, interval_ms, profile, recovery, instances_now_by_type
        });
    };
    (@both $name:ident { $($field:ident),* $(,)? }) => {
        $crate::impl_wit_conversions!(@request wit::$name => $name { $($field),* });
    };
    (@request $($wit:ident)::+ => $name:ident { $($field:ident),* $(,)? }) => {
        $crate::impl_wit_conversions!(@record $($wit)::+, $crate::$name { $($field),* });
    };
    // Field by field, both ways, between any generated record and core type
    // (also what `parcae-serving-core`'s macro of the same name expands to).
    (@record $wit:path, $core:path { $($field:ident),* $(,)? }) => {
        impl $crate::wit_convert::Convert<$wit> for $core {
            fn convert(self) -> $wit {
                $wit { $($field: $crate::wit_convert::Convert::convert(self.$field)),* }
            }
        }
        impl $crate::wit_convert::Convert<$core> for $wit {
            fn convert(self) -> $core {
                $core { $($field: $crate::wit_convert::Convert::convert(self.$field)),* }
            }
        }
    };
}

/// Conversion between a core type and its generated twin: identity for plain
/// values, element-wise for lists and options, field-wise for records.
pub trait Convert<T> {
    /// The twin of `self`; lossless both ways, so a round trip is the identity.
    fn convert(self) -> T;
}

macro_rules! identity {
    ($($t:ty),*) => {$(
        impl Convert<$t> for $t {
            fn convert(self) -> $t {
                self
            }
        }
    )*};
}
identity!(u32, u64, f64, String);

impl<A: Convert<B>, B> Convert<Vec<B>> for Vec<A> {
    fn convert(self) -> Vec<B> {
        self.into_iter().map(Convert::convert).collect()
    }
}

impl<A: Convert<B>, B> Convert<Option<B>> for Option<A> {
    fn convert(self) -> Option<B> {
        self.map(Convert::convert)
    }
}
