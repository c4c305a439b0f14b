//! Mirrors of the records in `wit/policy.wit`; see that file for field units.

/// One control interval of fleet availability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct IntervalStats {
    pub instances: u32,
    pub arrivals: u32,
    pub preemptions: u32,
}

impl IntervalStats {
    /// Consistent interval records for a sequence of counts chained from `last`
    /// (the count before the first): arrivals are the rises, preemptions the
    /// falls. Turns a count forecast or a count history into records.
    pub fn chain_from(last: u32, counts: &[u32]) -> Vec<IntervalStats> {
        let mut previous = last;
        counts
            .iter()
            .map(|&instances| {
                let stats = IntervalStats {
                    instances,
                    arrivals: instances.saturating_sub(previous),
                    preemptions: previous.saturating_sub(instances),
                };
                previous = instances;
                stats
            })
            .collect()
    }
}

/// A parallel layout: `data_parallel` replicas of a `pipeline_stages`-deep pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ParallelConfig {
    pub data_parallel: u32,
    pub pipeline_stages: u32,
}

impl ParallelConfig {
    pub const fn new(data_parallel: u32, pipeline_stages: u32) -> Self {
        Self { data_parallel, pipeline_stages }
    }

    /// Instances the layout occupies (D x P), widened so it cannot overflow.
    pub fn instances(&self) -> u64 {
        u64::from(self.data_parallel) * u64::from(self.pipeline_stages)
    }
}

impl std::fmt::Display for ParallelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.data_parallel, self.pipeline_stages)
    }
}

/// Throughput and reconfiguration costs of one layout (durations in ms).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ConfigProfile {
    pub config: ParallelConfig,
    pub samples_per_second: f64,
    pub iteration_ms: f64,
    pub comm_rebuild_add_ms: f64,
    pub comm_rebuild_remove_ms: f64,
    pub model_build_ms: f64,
}

/// How training state is spread over the stages of a pipeline of one depth.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct StagePartition {
    pub pipeline_stages: u32,
    pub layers_per_stage: Vec<u32>,
    pub state_bytes_per_stage: Vec<u64>,
}

/// One measured point of the point-to-point transfer curve.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TransferPoint {
    pub bytes: u64,
    pub micros: f64,
}

/// The model and cluster cost profile handed to optimizers.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ModelProfile {
    pub model: String,
    pub global_batch_size: u32,
    pub micro_batch_size: u32,
    pub configs: Vec<ConfigProfile>,
    pub partitions: Vec<StagePartition>,
    pub transfer_curve: Vec<TransferPoint>,
    pub rendezvous_ms: f64,
    pub process_start_ms: f64,
    pub add_extra_ms: f64,
    pub checkpoint_restart_ms: f64,
    pub checkpoint_interval_ms: f64,
}

impl ModelProfile {
    /// The profiled entry for `config`, if it was profiled.
    pub fn config(&self, config: ParallelConfig) -> Option<&ConfigProfile> {
        self.configs.iter().find(|c| c.config == config)
    }

    /// Highest throughput of any layout, samples/s (0 when nothing is profiled).
    pub fn peak_samples_per_second(&self) -> f64 {
        self.configs.iter().map(|c| c.samples_per_second).fold(0.0, f64::max)
    }
}

/// One step of a plan.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PlanStep {
    /// `None` pauses training for the interval.
    pub config: Option<ParallelConfig>,
    pub expected_samples: f64,
}

/// One step per forecast interval; the host applies the first.
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Plan {
    pub steps: Vec<PlanStep>,
}

impl Plan {
    /// Samples the plan expects over its whole horizon.
    pub fn expected_samples(&self) -> f64 {
        self.steps.iter().map(|s| s.expected_samples).sum()
    }
}

/// Input of one forecast.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PredictRequest {
    pub history: Vec<IntervalStats>,
    pub horizon: u32,
    pub interval_ms: u64,
    pub fleet_min: u32,
    pub fleet_max: u32,
}

/// Input of one planning step.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct OptimizeRequest {
    pub forecast: Vec<IntervalStats>,
    pub instances_now: u32,
    pub current: Option<ParallelConfig>,
    pub interval_ms: u64,
    pub profile: ModelProfile,
    /// How a stage that loses every holder is recovered (the cloud's notice).
    pub recovery: crate::Recovery,
}

impl OptimizeRequest {
    /// Instances available in plan step `step`: now for the first, forecast after.
    pub fn instances_at(&self, step: usize) -> u32 {
        if step == 0 { self.instances_now } else { self.forecast.get(step).map_or(0, |s| s.instances) }
    }
}
