//! Checks on what a serving policy returns. The host runs these on every
//! guest answer; a failed check makes it fall back for that decision.

use std::fmt;

use crate::{ServePlan, ServeRequest, ServingConfig, estimate};

/// Why a serving plan was rejected.
#[derive(Debug, Clone, PartialEq)]
pub enum Invalid {
    /// The plan has the wrong number of entries.
    WrongLength {
        /// Entries the request asked for (its intervals).
        expected: usize,
        /// Entries the policy returned.
        got: usize,
    },
    /// A configuration the latency model cannot run: a zero degree,
    /// micro-batches that do not divide the batch, an unmeasured (tp, batch),
    /// tp wider than an instance, or more memory than a GPU has.
    Infeasible {
        /// Index of the offending entry.
        step: usize,
        /// The configuration.
        config: ServingConfig,
    },
    /// A configuration needs more instances than the interval has.
    TooManyInstances {
        /// Index of the offending entry.
        step: usize,
        /// Instances the configuration occupies.
        needs: u32,
        /// Instances available in that interval.
        available: u32,
    },
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Invalid::WrongLength { expected, got } => {
                write!(f, "plan has {got} configurations, the request has {expected} intervals")
            }
            Invalid::Infeasible { step, config } => write!(
                f,
                "interval {step}: configuration {config} cannot run (unmeasured tp/batch, micro-batches \
                 that do not divide the batch, tp wider than an instance, or out of GPU memory)"
            ),
            Invalid::TooManyInstances { step, needs, available } => {
                write!(
                    f,
                    "interval {step}: the configuration needs {needs} instances, {available} are available"
                )
            }
        }
    }
}

impl std::error::Error for Invalid {}

/// Checks `plan` against `request`: one entry per interval, each feasible and
/// within that interval's instances.
pub fn check_plan(request: &ServeRequest, plan: &ServePlan) -> Result<(), Invalid> {
    if plan.configs.len() != request.instances.len() {
        return Err(Invalid::WrongLength { expected: request.instances.len(), got: plan.configs.len() });
    }
    for (step, (config, &available)) in plan.configs.iter().zip(&request.instances).enumerate() {
        let Some(config) = config else { continue };
        let Some(e) = estimate(&request.profile, config, &request.workload) else {
            return Err(Invalid::Infeasible { step, config: *config });
        };
        if e.instances > available {
            return Err(Invalid::TooManyInstances { step, needs: e.instances, available });
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{ServingOptimizer, SpotServe, Workload};

    pub(crate) fn request() -> ServeRequest {
        ServeRequest {
            instances: vec![2, 1],
            arrival_rates: vec![1.0, 1.0],
            latency_slo_ms: 10_000.0,
            interval_ms: 60_000,
            current: None,
            workload: Workload { input_tokens: 512, output_tokens: 64 },
            profile: crate::estimate::tests::profile(),
        }
    }

    #[test]
    fn the_optimizers_answers_pass_and_broken_ones_are_named() {
        let request = request();
        let plan = SpotServe::default().configure(&request).unwrap();
        assert_eq!(check_plan(&request, &plan), Ok(()));

        let short = ServePlan { configs: vec![None] };
        assert_eq!(check_plan(&request, &short), Err(Invalid::WrongLength { expected: 2, got: 1 }));

        let big = ServingConfig {
            data_parallel: 2,
            tensor_parallel: 4,
            pipeline_stages: 1,
            batch_size: 1,
            prefill_micro_batches: 1,
            decode_micro_batches: 1,
        };
        let plan = ServePlan { configs: vec![Some(big), None] };
        assert_eq!(check_plan(&request, &plan), Ok(()));
        let plan = ServePlan { configs: vec![None, Some(big)] };
        assert_eq!(
            check_plan(&request, &plan),
            Err(Invalid::TooManyInstances { step: 1, needs: 2, available: 1 })
        );

        let zero = ServingConfig { batch_size: 0, ..big };
        let plan = ServePlan { configs: vec![Some(zero), None] };
        assert!(matches!(check_plan(&request, &plan), Err(Invalid::Infeasible { step: 0, .. })));
        assert!(check_plan(&request, &plan).unwrap_err().to_string().contains("interval 0"));
    }
}
