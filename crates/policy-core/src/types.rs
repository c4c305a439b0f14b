//! Mirrors of the records in `wit/policy.wit`; see that file for field units.

/// One control interval of fleet availability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct IntervalStats {
    /// Instances alive at the end of the interval; what a layout must fit in.
    pub instances: u32,
    /// Instances that joined during the interval; they cost a scale-up.
    pub arrivals: u32,
    /// Instances the cloud took back during the interval; they cost a migration.
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

    /// Instances alive before the interval: those after it, plus those it
    /// took, less those that joined; `None` when more joined than are alive
    /// after it (not a consistent interval).
    pub fn instances_before(&self) -> Option<u32> {
        (self.instances + self.preemptions).checked_sub(self.arrivals)
    }
}

/// A parallel layout: `data_parallel` replicas of a `pipeline_stages`-deep pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ParallelConfig {
    /// Data-parallel degree D: pipeline replicas (>= 1).
    pub data_parallel: u32,
    /// Pipeline depth P: stages per replica (>= 1).
    pub pipeline_stages: u32,
}

impl ParallelConfig {
    /// A `data_parallel` x `pipeline_stages` layout, usable in `const` tables.
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
    /// The layout this entry describes.
    pub config: ParallelConfig,
    /// Training throughput (global batch / iteration time), what liveput weighs.
    pub samples_per_second: f64,
    /// Time of one iteration (one global batch), ms.
    pub iteration_ms: f64,
    /// Communication-group rebuild when the layout is formed by adding instances, ms.
    pub comm_rebuild_add_ms: f64,
    /// Communication-group rebuild when the layout is formed after removals, ms.
    pub comm_rebuild_remove_ms: f64,
    /// Time to instantiate the model for one stage of this layout, ms.
    pub model_build_ms: f64,
}

/// How training state is spread over the stages of a pipeline of one depth.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct StagePartition {
    /// Pipeline depth P this partition is for.
    pub pipeline_stages: u32,
    /// Model layers held by each stage, in stage order (length P).
    pub layers_per_stage: Vec<u32>,
    /// Training-state bytes (parameters plus optimizer moments) per stage, in
    /// stage order (length P); what a migration moves.
    pub state_bytes_per_stage: Vec<u64>,
}

/// One measured point of the point-to-point transfer curve.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TransferPoint {
    /// Message size, bytes.
    pub bytes: u64,
    /// Time to move it between two instances, microseconds.
    pub micros: f64,
}

/// The model and cluster cost profile handed to optimizers.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ModelProfile {
    /// Model name as in the profile file, for messages and reports.
    pub model: String,
    /// Samples in one global batch; constant across layouts.
    pub global_batch_size: u32,
    /// Samples in one micro-batch.
    pub micro_batch_size: u32,
    /// Every profiled layout; a plan may only use these.
    pub configs: Vec<ConfigProfile>,
    /// One stage partition per pipeline depth in `configs`.
    pub partitions: Vec<StagePartition>,
    /// Point-to-point transfer curve, sorted by `bytes`; prices state moves.
    pub transfer_curve: Vec<TransferPoint>,
    /// Time for workers to agree on a new layout, ms.
    pub rendezvous_ms: f64,
    /// Time to start a worker process on a new instance, ms.
    pub process_start_ms: f64,
    /// Model-specific time a scale-up pays on top of the rendezvous, ms.
    pub add_extra_ms: f64,
    /// Extra time a restart from checkpoint pays over a live migration, ms.
    pub checkpoint_restart_ms: f64,
    /// Time between periodic checkpoints, ms; bounds the work a restart loses.
    pub checkpoint_interval_ms: f64,
}

impl ModelProfile {
    /// A profile of `model` with no layout, no partition and no costs: what a caller fills
    /// with what it measured (and what a fleet that can run nothing plans with).
    pub fn empty(model: &str, global_batch_size: u32, micro_batch_size: u32) -> ModelProfile {
        ModelProfile {
            model: model.to_string(),
            global_batch_size,
            micro_batch_size,
            configs: Vec::new(),
            partitions: Vec::new(),
            transfer_curve: Vec::new(),
            rendezvous_ms: 0.0,
            process_start_ms: 0.0,
            add_extra_ms: 0.0,
            checkpoint_restart_ms: 0.0,
            checkpoint_interval_ms: 0.0,
        }
    }

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
    /// Net samples the step adds after migration costs; negative when a
    /// restart rolls back more than the interval trains.
    pub expected_samples: f64,
}

/// One step per forecast interval; the host applies the first.
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Plan {
    /// Exactly one step per forecast interval, nearest first.
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
    /// Observed intervals, oldest first; the last is the one starting now.
    pub history: Vec<IntervalStats>,
    /// Intervals to forecast after the last history entry (>= 1).
    pub horizon: u32,
    /// Length of one interval, ms.
    pub interval_ms: u64,
    /// Smallest fleet size seen so far (instances).
    pub fleet_min: u32,
    /// Largest fleet the job may hold; forecasts above it are invalid.
    pub fleet_max: u32,
    /// The instance types of each history entry's instances (one list per entry; empty
    /// for a fleet of one type).
    #[cfg_attr(feature = "serde", serde(default))]
    pub history_by_type: Vec<Vec<TypeCount>>,
}

/// Instances of one instance type: one part of a mixed fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TypeCount {
    /// The instance type's name as the host knows it.
    pub instance_type: String,
    /// Its instances alive.
    pub instances: u32,
}

/// Input of one planning step.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct OptimizeRequest {
    /// Availability of the intervals to plan, nearest first; the first is
    /// the interval starting now, as observed, the rest are forecast.
    pub forecast: Vec<IntervalStats>,
    /// Instances alive now; the first step's layout must fit in these.
    pub instances_now: u32,
    /// Layout of the interval that just ended (`None` before start or while
    /// paused); where the first step's migration starts from.
    pub current: Option<ParallelConfig>,
    /// Length of one interval, ms.
    pub interval_ms: u64,
    /// The model and cluster cost profile.
    pub profile: ModelProfile,
    /// How a stage that loses every holder is recovered (the cloud's notice).
    pub recovery: crate::Recovery,
    /// The instances alive now by instance type (empty for a fleet of one type); on a
    /// mixed fleet `profile` describes this composition.
    #[cfg_attr(feature = "serde", serde(default))]
    pub instances_now_by_type: Vec<TypeCount>,
}

impl OptimizeRequest {
    /// Instances available in plan step `step`: now for the first, forecast after.
    pub fn instances_at(&self, step: usize) -> u32 {
        if step == 0 { self.instances_now } else { self.forecast.get(step).map_or(0, |s| s.instances) }
    }
}
