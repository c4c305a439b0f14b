//! The records a serving policy receives and returns; they mirror the records
//! of `wit/serving/serving.wit` one to one.

use std::fmt;

/// How one serving deployment splits the model over GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ServingConfig {
    /// Independent model replicas, each serving its own batches (>= 1).
    pub data_parallel: u32,
    /// GPUs each layer is split over (attention heads and MLP columns), all
    /// inside one instance (>= 1).
    pub tensor_parallel: u32,
    /// Pipeline stages each replica's layers are split into (>= 1).
    pub pipeline_stages: u32,
    /// Requests one replica serves together (>= 1).
    pub batch_size: u32,
    /// Micro-batches the batch is split into during prefill; divides `batch_size`.
    pub prefill_micro_batches: u32,
    /// Micro-batches the batch is split into during decode; divides `batch_size`.
    pub decode_micro_batches: u32,
}

impl ServingConfig {
    /// GPUs one replica occupies.
    pub fn gpus_per_replica(&self) -> u32 {
        self.tensor_parallel * self.pipeline_stages
    }

    /// GPUs the whole deployment occupies.
    pub fn gpus(&self) -> u32 {
        self.data_parallel * self.gpus_per_replica()
    }

    /// Instances the deployment occupies when each has `gpus_per_instance` GPUs:
    /// positions are packed instance by instance, tensor-parallel groups never
    /// straddle two instances (tp <= GPUs per instance, and both are powers of
    /// two in every profile here, so packing leaves no group split).
    pub fn instances(&self, gpus_per_instance: u32) -> u32 {
        self.gpus().div_ceil(gpus_per_instance.max(1))
    }

    /// The same parallel shape, i.e. a change between the two only adds or
    /// removes replicas (or changes batching) and keeps every kept replica's
    /// model state and KV cache where they are.
    pub fn same_shape(&self, other: &ServingConfig) -> bool {
        self.tensor_parallel == other.tensor_parallel && self.pipeline_stages == other.pipeline_stages
    }
}

impl fmt::Display for ServingConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "dp{} tp{} pp{} b{}",
            self.data_parallel, self.tensor_parallel, self.pipeline_stages, self.batch_size
        )?;
        if self.prefill_micro_batches > 1 || self.decode_micro_batches > 1 {
            write!(f, " m{}/{}", self.prefill_micro_batches, self.decode_micro_batches)?;
        }
        Ok(())
    }
}

/// Per-layer times of one transformer layer at one tensor-parallel width and
/// batch size, measured on the serving hardware.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LayerTiming {
    /// Tensor-parallel width the layer was measured at.
    pub tensor_parallel: u32,
    /// Requests in the measured batch.
    pub batch_size: u32,
    /// Time for the layer to process the whole prompt of every request of the
    /// batch (prefill, `ServingProfile::profiled_input_tokens` tokens), ms.
    pub prefill_ms: f64,
    /// Time for the layer to decode one more token of every request, ms.
    pub decode_ms: f64,
}

/// What the latency model and the reconfiguration cost need to know about a
/// model on a kind of instance.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ServingProfile {
    /// Model name (e.g. "gpt-20b").
    pub model: String,
    /// Transformer layers of the model.
    pub layers: u32,
    /// GPUs in one instance.
    pub gpus_per_instance: u32,
    /// Memory of one GPU usable for weights and KV cache, bytes.
    pub gpu_memory_bytes: u64,
    /// Bytes of all the model's weights (as served, e.g. fp16).
    pub weight_bytes: u64,
    /// Bytes of KV cache one token of one request takes, over all layers.
    pub kv_bytes_per_token: u64,
    /// Prompt length the prefill times were measured at, tokens.
    pub profiled_input_tokens: u32,
    /// Time to pass one micro-batch's activations between two pipeline stages
    /// during prefill, ms.
    pub pp_prefill_comm_ms: f64,
    /// Time to pass one micro-batch's activations between two pipeline stages
    /// for one decode step, ms.
    pub pp_decode_comm_ms: f64,
    /// Measured per-layer times; a configuration is only estimated where its
    /// (tp, micro-batch size) was measured.
    pub timings: Vec<LayerTiming>,
    /// Rate at which an instance reads model weights from storage on a cold
    /// start, bytes per ms.
    pub load_bytes_per_ms: f64,
    /// Rate at which one instance receives state (weights, KV cache) from
    /// another, bytes per ms.
    pub transfer_bytes_per_ms: f64,
    /// Fixed time to set a new configuration up once its state is in place
    /// (communicators, engine), ms.
    pub reinit_ms: f64,
    /// Time to start serving on a fresh instance (process and runtime start),
    /// before any weights are loaded, ms.
    pub instance_start_ms: f64,
}

impl ServingProfile {
    /// The measured per-layer timing at `tensor_parallel` and `batch_size`.
    pub fn timing(&self, tensor_parallel: u32, batch_size: u32) -> Option<&LayerTiming> {
        self.timings.iter().find(|t| t.tensor_parallel == tensor_parallel && t.batch_size == batch_size)
    }

    /// Largest measured tensor-parallel width that fits in one instance.
    pub fn max_tensor_parallel(&self) -> u32 {
        self.timings
            .iter()
            .map(|t| t.tensor_parallel)
            .filter(|&tp| tp <= self.gpus_per_instance)
            .max()
            .unwrap_or(0)
    }

    /// Measured batch sizes, ascending.
    pub fn batch_sizes(&self) -> Vec<u32> {
        let mut sizes: Vec<u32> = self.timings.iter().map(|t| t.batch_size).collect();
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    }

    /// Bytes of weights one GPU holds in a replica of `tensor_parallel` x
    /// `pipeline_stages` GPUs (stages get `ceil(L / pp)` layers, so the
    /// heaviest stage bounds the memory).
    pub fn weight_bytes_per_gpu(&self, tensor_parallel: u32, pipeline_stages: u32) -> u64 {
        let layers = u64::from(self.layers.max(1));
        let per_stage = u64::from(self.layers.div_ceil(pipeline_stages.max(1)));
        (self.weight_bytes * per_stage).div_ceil(layers * u64::from(tensor_parallel.max(1)))
    }
}

/// The shape of the requests served: every request has the same prompt and
/// output length (SpotServe's workloads do too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Workload {
    /// Prompt tokens of a request.
    pub input_tokens: u32,
    /// Tokens a request generates.
    pub output_tokens: u32,
}

/// Input of one serving decision.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ServeRequest {
    /// Instances available per interval, nearest first: the first entry is
    /// now (observed), the others forecast. Length H >= 1.
    pub instances: Vec<u32>,
    /// Arrival rate per interval, requests per second, same length: the first
    /// is the rate observed over the last interval, the others forecast.
    pub arrival_rates: Vec<f64>,
    /// End-to-end latency objective of a request, ms.
    pub latency_slo_ms: f64,
    /// Length of one interval, ms.
    pub interval_ms: u64,
    /// The configuration serving in the interval that just ended; `None`
    /// before serving started or while it was stopped.
    pub current: Option<ServingConfig>,
    /// The requests' shape.
    pub workload: Workload,
    /// The model on this kind of instance.
    pub profile: ServingProfile,
}

/// A serving policy's answer: one configuration per interval of the request.
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ServePlan {
    /// One entry per interval of `ServeRequest::instances`; `None` stops serving.
    pub configs: Vec<Option<ServingConfig>>,
}
