//! Checks on what a policy returns. The host runs these on every guest answer;
//! a failed check makes the host fall back for that interval.

use crate::{IntervalStats, OptimizeRequest, Plan, PredictRequest};

/// Why a forecast or plan was rejected.
#[derive(Debug, Clone, PartialEq)]
pub enum Invalid {
    /// The answer has the wrong number of entries.
    WrongLength {
        /// Entries the request asked for.
        expected: usize,
        /// Entries the policy returned.
        got: usize,
    },
    /// A forecast step exceeds the fleet's maximum size.
    AboveFleetMax {
        /// Index of the offending forecast step.
        step: usize,
        /// Instances the step forecasts.
        instances: u32,
        /// Largest fleet the job may hold.
        fleet_max: u32,
    },
    /// A forecast step does not follow from the one before it.
    Inconsistent {
        /// Index of the offending forecast step.
        step: usize,
        /// Instances of the step before (the last observed one for step 0).
        previous: u32,
        /// Arrivals the step claims.
        arrivals: u32,
        /// Preemptions the step claims.
        preemptions: u32,
        /// Instances the step claims, which `previous + arrivals - preemptions` contradicts.
        instances: u32,
    },
    /// A plan step names a layout that was never profiled.
    UnknownConfig {
        /// Index of the offending plan step.
        step: usize,
        /// Data-parallel degree of the unknown layout.
        data_parallel: u32,
        /// Pipeline depth of the unknown layout.
        pipeline_stages: u32,
    },
    /// A plan step needs more instances than are available then.
    TooManyInstances {
        /// Index of the offending plan step.
        step: usize,
        /// Instances the step's layout occupies.
        needed: u64,
        /// Instances available in that step.
        available: u32,
    },
    /// A plan step's expected samples is not finite or physically impossible.
    ImplausibleSamples {
        /// Index of the offending plan step.
        step: usize,
        /// Samples the step claims.
        expected: f64,
        /// Lowest plausible value (the worst checkpoint rollback).
        floor: f64,
        /// Highest plausible value (peak throughput for a whole interval).
        ceiling: f64,
    },
    /// A paused step claims to train samples.
    PausedWithSamples {
        /// Index of the offending plan step.
        step: usize,
        /// Samples the paused step claims.
        expected: f64,
    },
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Invalid::WrongLength { expected, got } => {
                write!(f, "returned {got} steps, expected {expected}")
            }
            Invalid::AboveFleetMax { step, instances, fleet_max } => {
                write!(f, "step {step}: forecasts {instances} instances, above the fleet maximum {fleet_max}")
            }
            Invalid::Inconsistent { step, previous, arrivals, preemptions, instances } => write!(
                f,
                "step {step}: {previous} + {arrivals} arrivals - {preemptions} preemptions != {instances} instances"
            ),
            Invalid::UnknownConfig { step, data_parallel, pipeline_stages } => {
                write!(f, "step {step}: layout {data_parallel}x{pipeline_stages} is not in the profile")
            }
            Invalid::TooManyInstances { step, needed, available } => {
                write!(f, "step {step}: layout needs {needed} instances, only {available} available")
            }
            Invalid::ImplausibleSamples { step, expected, floor, ceiling } => {
                write!(f, "step {step}: expected samples {expected} outside [{floor}, {ceiling}]")
            }
            Invalid::PausedWithSamples { step, expected } => {
                write!(f, "step {step}: pauses training but expects {expected} samples")
            }
        }
    }
}

impl std::error::Error for Invalid {}

/// Accept a forecast only if it has `horizon` entries, stays within the fleet and
/// each step follows from the previous one (the last observed interval first).
pub fn check_forecast(request: &PredictRequest, forecast: &[IntervalStats]) -> Result<(), Invalid> {
    let expected = request.horizon as usize;
    if forecast.len() != expected {
        return Err(Invalid::WrongLength { expected, got: forecast.len() });
    }
    let mut previous = request.history.last().map(|s| s.instances);
    for (step, s) in forecast.iter().enumerate() {
        if s.instances > request.fleet_max {
            return Err(Invalid::AboveFleetMax {
                step,
                instances: s.instances,
                fleet_max: request.fleet_max,
            });
        }
        if let Some(prev) = previous {
            let implied = i64::from(prev) + i64::from(s.arrivals) - i64::from(s.preemptions);
            if implied != i64::from(s.instances) {
                return Err(Invalid::Inconsistent {
                    step,
                    previous: prev,
                    arrivals: s.arrivals,
                    preemptions: s.preemptions,
                    instances: s.instances,
                });
            }
        }
        previous = Some(s.instances);
    }
    Ok(())
}

/// Accept a plan only if it has one step per forecast interval, every layout was
/// profiled and fits the instances available in its interval, and no step claims
/// more samples than the fastest layout could train in one interval.
pub fn check_plan(request: &OptimizeRequest, plan: &Plan) -> Result<(), Invalid> {
    let expected = request.forecast.len();
    if plan.steps.len() != expected {
        return Err(Invalid::WrongLength { expected, got: plan.steps.len() });
    }
    let seconds = request.interval_ms as f64 / 1000.0;
    let peak = request.profile.peak_samples_per_second();
    // No interval can train faster than the fastest layout, and none can lose
    // more than a checkpoint interval of work at that speed (a restart rolls
    // back to the last checkpoint); allow rounding slack.
    let ceiling = peak * seconds * (1.0 + 1e-9) + 1e-6;
    let floor = -peak * request.profile.checkpoint_interval_ms / 1000.0 * (1.0 + 1e-9) - 1e-6;
    for (step, s) in plan.steps.iter().enumerate() {
        match s.config {
            // A pause trains nothing (it may still lose work to a restart).
            None if s.expected_samples > 0.0 => {
                return Err(Invalid::PausedWithSamples { step, expected: s.expected_samples });
            }
            None => {}
            Some(config) => {
                if request.profile.config(config).is_none() {
                    return Err(Invalid::UnknownConfig {
                        step,
                        data_parallel: config.data_parallel,
                        pipeline_stages: config.pipeline_stages,
                    });
                }
                let available = request.instances_at(step);
                if config.instances() > u64::from(available) {
                    return Err(Invalid::TooManyInstances { step, needed: config.instances(), available });
                }
            }
        }
        if !(s.expected_samples.is_finite() && (floor..=ceiling).contains(&s.expected_samples)) {
            return Err(Invalid::ImplausibleSamples { step, expected: s.expected_samples, floor, ceiling });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reactive::{Persistence, ThroughputOptimal};
    use crate::{ConfigProfile, ModelProfile, Optimizer, ParallelConfig, PlanStep, Predictor};

    fn profile() -> ModelProfile {
        ModelProfile {
            model: "toy".into(),
            global_batch_size: 8,
            micro_batch_size: 1,
            configs: vec![ConfigProfile {
                config: ParallelConfig::new(2, 2),
                samples_per_second: 10.0,
                iteration_ms: 800.0,
                comm_rebuild_add_ms: 0.0,
                comm_rebuild_remove_ms: 0.0,
                model_build_ms: 0.0,
            }],
            partitions: vec![],
            transfer_curve: vec![],
            rendezvous_ms: 0.0,
            process_start_ms: 0.0,
            add_extra_ms: 0.0,
            checkpoint_restart_ms: 0.0,
            checkpoint_interval_ms: 0.0,
        }
    }

    fn stats(instances: u32, arrivals: u32, preemptions: u32) -> IntervalStats {
        IntervalStats { instances, arrivals, preemptions }
    }

    fn optimize_request() -> OptimizeRequest {
        OptimizeRequest {
            instances_now_by_type: Vec::new(),
            forecast: vec![stats(4, 0, 0), stats(3, 0, 1)],
            instances_now: 4,
            current: None,
            interval_ms: 1000,
            profile: profile(),
            recovery: crate::Recovery::UNANNOUNCED,
        }
    }

    #[test]
    fn forecasts_must_be_consistent_and_bounded() {
        let request = PredictRequest {
            history_by_type: Vec::new(),
            history: vec![stats(5, 5, 0)],
            horizon: 2,
            interval_ms: 1000,
            fleet_min: 0,
            fleet_max: 6,
        };
        assert_eq!(check_forecast(&request, &Persistence.predict(&request).unwrap()), Ok(()));
        assert_eq!(check_forecast(&request, &[stats(6, 1, 0), stats(4, 0, 2)]), Ok(()));
        assert!(matches!(
            check_forecast(&request, &[stats(5, 0, 0)]),
            Err(Invalid::WrongLength { expected: 2, got: 1 })
        ));
        assert!(matches!(
            check_forecast(&request, &[stats(7, 2, 0), stats(7, 0, 0)]),
            Err(Invalid::AboveFleetMax { step: 0, .. })
        ));
        assert!(matches!(
            check_forecast(&request, &[stats(5, 0, 0), stats(2, 0, 0)]),
            Err(Invalid::Inconsistent { step: 1, .. })
        ));
    }

    #[test]
    fn plans_must_fit_profile_and_fleet() {
        let request = optimize_request();
        assert_eq!(check_plan(&request, &ThroughputOptimal.optimize(&request).unwrap()), Ok(()));
        let step =
            |d, p, samples| PlanStep { config: Some(ParallelConfig::new(d, p)), expected_samples: samples };
        let pause = PlanStep { config: None, expected_samples: 0.0 };
        let plan = |steps: Vec<PlanStep>| Plan { steps };
        assert_eq!(check_plan(&request, &plan(vec![step(2, 2, 10.0), pause])), Ok(()));
        assert!(matches!(
            check_plan(&request, &plan(vec![step(2, 2, 1.0); 3])),
            Err(Invalid::WrongLength { .. })
        ));
        assert!(matches!(
            check_plan(&request, &plan(vec![step(1, 4, 1.0), pause])),
            Err(Invalid::UnknownConfig { step: 0, .. })
        ));
        assert!(matches!(
            check_plan(&request, &plan(vec![step(2, 2, 1.0), step(2, 2, 1.0)])),
            Err(Invalid::TooManyInstances { step: 1, needed: 4, available: 3 })
        ));
        assert!(matches!(
            check_plan(&request, &plan(vec![step(2, 2, 11.0), pause])),
            Err(Invalid::ImplausibleSamples { step: 0, .. })
        ));
        assert!(matches!(
            check_plan(&request, &plan(vec![step(2, 2, f64::NAN), pause])),
            Err(Invalid::ImplausibleSamples { step: 0, .. })
        ));
        assert!(matches!(
            check_plan(&request, &plan(vec![PlanStep { config: None, expected_samples: 1.0 }, pause])),
            Err(Invalid::PausedWithSamples { step: 0, .. })
        ));
    }
}
