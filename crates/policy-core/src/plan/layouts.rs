//! The layouts the program chooses from: the profile's valid layouts, in
//! profile order, and the order that breaks ties between equally good plans.

use crate::liveput::{LiveputError, MAX_INSTANCES};
use crate::{ModelProfile, ParallelConfig, Recovery};

/// A layout the program may choose.
#[derive(Debug, Clone, Copy)]
pub(super) struct LayoutChoice {
    /// The profiled layout.
    pub(super) config: ParallelConfig,
    /// Instances it occupies (`D x P`).
    pub(super) instances: u64,
    /// Its throughput, samples/s.
    pub(super) thr: f64,
}

/// What every interval of one planning call shares: the profile, the
/// recovery rules and the layouts to choose from (index `S` is the pause).
pub(super) struct PlanContext<'a> {
    /// The model and cluster cost profile.
    pub(super) profile: &'a ModelProfile,
    /// How a stage that loses every holder is recovered.
    pub(super) recovery: Recovery,
    /// The layouts to choose from ([`candidates`]).
    pub(super) layouts: Vec<LayoutChoice>,
    /// The plan's [`super::PlanOptions::work_limit`]: no transition
    /// distribution is computed once the work count passes it (one interval
    /// at a fleet size not seen yet computes hundreds of them).
    pub(super) work_limit: Option<u64>,
}

/// The layouts the program may choose, in profile order (first occurrence).
pub(super) fn candidates(profile: &ModelProfile) -> Result<Vec<LayoutChoice>, LiveputError> {
    let mut layouts: Vec<LayoutChoice> = Vec::with_capacity(profile.configs.len());
    for entry in &profile.configs {
        let config = entry.config;
        let instances = config.instances();
        if config.data_parallel == 0
            || config.pipeline_stages == 0
            || instances > u64::from(MAX_INSTANCES)
            || layouts.iter().any(|c| c.config == config)
        {
            continue;
        }
        let thr = entry.samples_per_second;
        if !(thr.is_finite() && thr >= 0.0) {
            return Err(LiveputError::BadProfileValue {
                field: format!("configs[{config}].samples_per_second"),
                value: thr,
            });
        }
        layouts.push(LayoutChoice { config, instances, thr });
    }
    Ok(layouts)
}

/// Every state in the order that breaks ties between plans of equal value:
/// higher throughput, fewer instances, fewer stages, fewer replicas; the
/// pause (index `layouts.len()`) last.
pub(super) fn tie_order(layouts: &[LayoutChoice]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..layouts.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&layouts[a], &layouts[b]);
        y.thr
            .total_cmp(&x.thr)
            .then(x.instances.cmp(&y.instances))
            .then(x.config.pipeline_stages.cmp(&y.config.pipeline_stages))
            .then(x.config.data_parallel.cmp(&y.config.data_parallel))
    });
    order.push(layouts.len());
    order
}
