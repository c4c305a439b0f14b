//! The safe policies: what the host falls back to when a guest fails, and the
//! reactive throughput-optimal baseline of the Parcae paper.

use crate::{
    ConfigProfile, IntervalStats, ModelProfile, OptimizeRequest, Optimizer, Plan, PlanStep, PredictRequest,
    Predictor,
};

/// Predicts that the fleet stays as it was last seen. Never fails.
#[derive(Debug, Default, Clone, Copy)]
pub struct Persistence;

impl Predictor for Persistence {
    fn predict(&mut self, request: &PredictRequest) -> Result<Vec<IntervalStats>, String> {
        let instances = request.history.last().map_or(0, |s| s.instances);
        let steady = IntervalStats { instances, arrivals: 0, preemptions: 0 };
        Ok(vec![steady; request.horizon as usize])
    }
}

/// Picks, for each interval, the layout with the highest profiled throughput that
/// fits the instances available, ignoring migration costs (reactive: it only
/// follows availability). Pauses where nothing fits. Never fails.
#[derive(Debug, Default, Clone, Copy)]
pub struct ThroughputOptimal;

impl Optimizer for ThroughputOptimal {
    fn optimize(&mut self, request: &OptimizeRequest) -> Result<Plan, String> {
        let seconds = request.interval_ms as f64 / 1000.0;
        let mut steps = Vec::with_capacity(request.forecast.len());
        for step in 0..request.forecast.len() {
            let available = request.instances_at(step);
            steps.push(match best_config_for(&request.profile, available) {
                Some(chosen) => PlanStep {
                    config: Some(chosen.config),
                    expected_samples: chosen.samples_per_second * seconds,
                },
                None => PlanStep { config: None, expected_samples: 0.0 },
            });
        }
        Ok(Plan { steps })
    }
}

/// The profiled layout with the highest throughput that fits in `instances`;
/// ties go to fewer instances, then the shallower pipeline, so the choice is
/// deterministic.
pub fn best_config_for(profile: &ModelProfile, instances: u32) -> Option<&ConfigProfile> {
    profile.configs.iter().filter(|c| c.config.instances() <= u64::from(instances)).max_by(|a, b| {
        a.samples_per_second
            .total_cmp(&b.samples_per_second)
            .then_with(|| b.config.instances().cmp(&a.config.instances()))
            .then_with(|| b.config.pipeline_stages.cmp(&a.config.pipeline_stages))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ParallelConfig;

    pub(crate) fn profile() -> ModelProfile {
        let entry = |d, p, sps| ConfigProfile {
            config: ParallelConfig::new(d, p),
            samples_per_second: sps,
            iteration_ms: 1000.0,
            comm_rebuild_add_ms: 0.0,
            comm_rebuild_remove_ms: 0.0,
            model_build_ms: 0.0,
        };
        ModelProfile {
            model: "toy".into(),
            global_batch_size: 8,
            micro_batch_size: 1,
            configs: vec![entry(1, 2, 10.0), entry(2, 2, 19.0), entry(1, 4, 12.0), entry(4, 2, 30.0)],
            partitions: vec![],
            transfer_curve: vec![],
            rendezvous_ms: 0.0,
            process_start_ms: 0.0,
            add_extra_ms: 0.0,
            checkpoint_restart_ms: 0.0,
            checkpoint_interval_ms: 0.0,
        }
    }

    #[test]
    fn picks_fastest_layout_that_fits_each_interval() {
        let forecast = [5u32, 8, 3, 1]
            .map(|instances| IntervalStats { instances, arrivals: 0, preemptions: 0 })
            .to_vec();
        let request = OptimizeRequest {
            instances_now_by_type: Vec::new(),
            forecast,
            instances_now: 4,
            current: None,
            interval_ms: 60_000,
            profile: profile(),
            recovery: crate::Recovery::UNANNOUNCED,
        };
        let plan = ThroughputOptimal.optimize(&request).unwrap();
        let chosen: Vec<_> =
            plan.steps.iter().map(|s| s.config.map_or("pause".into(), |c| c.to_string())).collect();
        assert_eq!(chosen, ["2x2", "4x2", "1x2", "pause"]);
        assert_eq!(plan.steps[0].expected_samples, 19.0 * 60.0);
        assert_eq!(plan.steps[3].expected_samples, 0.0, "nothing fits one instance");
    }

    #[test]
    fn persistence_repeats_last_count() {
        let request = PredictRequest {
            history_by_type: Vec::new(),
            history: vec![IntervalStats { instances: 7, arrivals: 2, preemptions: 1 }],
            horizon: 3,
            interval_ms: 60_000,
            fleet_min: 0,
            fleet_max: 32,
        };
        let forecast = Persistence.predict(&request).unwrap();
        assert_eq!(forecast, vec![IntervalStats { instances: 7, arrivals: 0, preemptions: 0 }; 3]);
    }
}
