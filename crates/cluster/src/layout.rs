//! Model shape and the (replica, stage) slots of a (D, P) configuration.
//!
//! A model is a list of *layers*: layer 0 is the embedding (token + position),
//! layers `1..=n_blocks` are transformer blocks, and the last layer is the
//! final layer norm plus the output head. A stage owns a contiguous range of
//! layers; state moves between workers layer by layer, so a repartition is just
//! a different set of ranges.

use std::ops::Range;

use serde::{Deserialize, Serialize};

/// Bytes of one f32.
const F32: u64 = 4;
/// A layer's migratable state: parameters plus Adam's first and second moments.
const STATE_COPIES: u64 = 3;

/// The GPT-style decoder both sides agree on, and the fixed global batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    pub vocab: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub n_blocks: usize,
    pub seq_len: usize,
    /// Sequences per optimizer step, whatever the configuration (gradient accumulation).
    pub global_batch: usize,
    /// Sequences per micro-batch; `global_batch / micro_batch` micro-batches per step.
    pub micro_batch: usize,
    pub learning_rate: f64,
    /// Seeds parameter initialisation (per layer) and the synthetic data.
    pub seed: u64,
}

impl Default for ModelSpec {
    /// Small enough to train on two CPU cores in tests; the loss falls within tens of steps.
    fn default() -> Self {
        ModelSpec {
            vocab: 64,
            d_model: 64,
            n_heads: 4,
            n_blocks: 6,
            seq_len: 32,
            global_batch: 16,
            micro_batch: 2,
            learning_rate: 3e-3,
            seed: 7,
        }
    }
}

/// Why a spec or layout cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LayoutError {
    #[error("model spec field `{field}`: {reason}")]
    Spec { field: &'static str, reason: String },
    #[error("configuration D={d} P={p}: {reason}")]
    Config { d: usize, p: usize, reason: String },
}

impl ModelSpec {
    /// Checks the invariants the workers rely on.
    pub fn validate(&self) -> Result<(), LayoutError> {
        let fail = |field, reason: &str| Err(LayoutError::Spec { field, reason: reason.to_string() });
        for (field, value) in [
            ("vocab", self.vocab),
            ("d_model", self.d_model),
            ("n_heads", self.n_heads),
            ("n_blocks", self.n_blocks),
            ("seq_len", self.seq_len),
            ("global_batch", self.global_batch),
            ("micro_batch", self.micro_batch),
        ] {
            if value == 0 {
                return fail(field, "must be at least 1");
            }
        }
        if !self.d_model.is_multiple_of(self.n_heads) {
            return fail("n_heads", "must divide d_model");
        }
        if !self.global_batch.is_multiple_of(self.micro_batch) {
            return fail("micro_batch", "must divide global_batch");
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return fail("learning_rate", "must be a positive number");
        }
        Ok(())
    }

    /// Layers in the model: embedding, blocks, head.
    pub fn num_layers(&self) -> usize {
        self.n_blocks + 2
    }

    /// Micro-batches in one optimizer step.
    pub fn micro_batches(&self) -> usize {
        self.global_batch / self.micro_batch
    }

    /// Parameters (f32 scalars) of one layer; the worker's tch model must match this.
    pub fn layer_params(&self, layer: usize) -> u64 {
        let d = self.d_model as u64;
        let v = self.vocab as u64;
        let s = self.seq_len as u64;
        if layer == 0 {
            v * d + s * d
        } else if layer <= self.n_blocks {
            // ln1 (2d), qkv (3d² + 3d), attn proj (d² + d), ln2 (2d), fc (4d² + 4d), mlp proj (4d² + d)
            12 * d * d + 13 * d
        } else {
            // final layer norm (2d) and the untied head (v·d, no bias)
            2 * d + v * d
        }
    }

    /// Bytes of a layer's migratable state (parameters + Adam moments).
    pub fn layer_state_bytes(&self, layer: usize) -> u64 {
        self.layer_params(layer) * F32 * STATE_COPIES
    }

    /// Contiguous layer ranges for `p` stages, balancing parameters: each stage
    /// gets at least one layer, and the largest stage is as small as possible.
    pub fn partition(&self, p: usize) -> Result<Vec<Range<usize>>, LayoutError> {
        let n = self.num_layers();
        if p == 0 || p > n {
            return Err(LayoutError::Config {
                d: 0,
                p,
                reason: format!("P must be between 1 and the {n} layers of the model"),
            });
        }
        let weights: Vec<u64> = (0..n).map(|l| self.layer_params(l)).collect();
        // Binary search the smallest feasible max-stage weight, then cut greedily
        // from the back so the first stage (the embedding) is not overloaded.
        let (mut lo, mut hi) = (*weights.iter().max().unwrap_or(&0), weights.iter().sum::<u64>());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if greedy_cuts(&weights, p, mid).is_some() {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        greedy_cuts(&weights, p, lo).ok_or_else(|| LayoutError::Config {
            d: 0,
            p,
            reason: "no partition found".to_string(),
        })
    }
}

/// Cuts `weights` into exactly `p` contiguous non-empty ranges, each at most `cap`.
fn greedy_cuts(weights: &[u64], p: usize, cap: u64) -> Option<Vec<Range<usize>>> {
    let n = weights.len();
    let mut ranges = Vec::with_capacity(p);
    let mut end = n;
    for stage in (0..p).rev() {
        // Leave at least one layer for each stage still to fill.
        let min_start = stage;
        let mut start = end;
        let mut sum = 0;
        while start > min_start && sum + weights[start - 1] <= cap {
            start -= 1;
            sum += weights[start];
        }
        if start == end {
            return None;
        }
        if stage == 0 && start != 0 {
            return None;
        }
        ranges.push(start..end);
        end = start;
    }
    ranges.reverse();
    Some(ranges)
}

/// One place in a configuration: data-parallel replica `replica`, pipeline stage `stage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Slot {
    pub replica: usize,
    pub stage: usize,
}

/// A (D, P) configuration laid out over a model: which layers each stage owns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub data_parallel: usize,
    pub pipeline_stages: usize,
    pub stages: Vec<Range<usize>>,
}

impl Layout {
    /// The layout for `d` replicas of `p` stages; `d` may not exceed the micro-batches per step.
    pub fn new(spec: &ModelSpec, d: usize, p: usize) -> Result<Layout, LayoutError> {
        spec.validate()?;
        if d == 0 || d > spec.micro_batches() {
            return Err(LayoutError::Config {
                d,
                p,
                reason: format!(
                    "D must be between 1 and the {} micro-batches per step",
                    spec.micro_batches()
                ),
            });
        }
        let stages = spec.partition(p).map_err(|e| match e {
            LayoutError::Config { reason, .. } => LayoutError::Config { d, p, reason },
            other => other,
        })?;
        Ok(Layout { data_parallel: d, pipeline_stages: p, stages })
    }

    /// Workers the layout needs.
    pub fn workers(&self) -> usize {
        self.data_parallel * self.pipeline_stages
    }

    /// Every slot, replica-major.
    pub fn slots(&self) -> impl Iterator<Item = Slot> + '_ {
        (0..self.data_parallel)
            .flat_map(move |replica| (0..self.pipeline_stages).map(move |stage| Slot { replica, stage }))
    }

    /// Layers a slot's worker holds.
    pub fn layers(&self, slot: Slot) -> Range<usize> {
        self.stages[slot.stage].clone()
    }

    /// The micro-batches (indices into the step's global batch) a replica trains on:
    /// a contiguous share, so any D covers every micro-batch exactly once.
    pub fn micro_batches_of(&self, spec: &ModelSpec, replica: usize) -> Range<usize> {
        let m = spec.micro_batches();
        let d = self.data_parallel;
        (replica * m / d)..((replica + 1) * m / d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_contiguous_cover_every_layer_and_balance() {
        let spec = ModelSpec::default();
        for p in 1..=spec.num_layers() {
            let ranges = spec.partition(p).unwrap();
            assert_eq!(ranges.len(), p);
            assert_eq!(ranges[0].start, 0);
            assert_eq!(ranges[p - 1].end, spec.num_layers());
            for w in ranges.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
            assert!(ranges.iter().all(|r| !r.is_empty()));
        }
        // Six equal blocks between two lighter ends: P=2 splits them 3/3 around the middle.
        let two = spec.partition(2).unwrap();
        assert_eq!(two, vec![0..4, 4..8]);
        assert!(spec.partition(0).is_err());
        assert!(spec.partition(spec.num_layers() + 1).is_err());
    }

    #[test]
    fn micro_batches_split_exactly_once_for_any_d() {
        let spec = ModelSpec::default();
        for d in 1..=spec.micro_batches() {
            let layout = Layout::new(&spec, d, 2).unwrap();
            let covered: Vec<usize> = (0..d).flat_map(|r| layout.micro_batches_of(&spec, r)).collect();
            assert_eq!(covered, (0..spec.micro_batches()).collect::<Vec<_>>());
        }
        assert!(Layout::new(&spec, spec.micro_batches() + 1, 1).is_err());
    }

    #[test]
    fn bad_specs_name_the_field() {
        let spec = ModelSpec { micro_batch: 3, ..ModelSpec::default() };
        assert!(spec.validate().unwrap_err().to_string().contains("micro_batch"));
        let spec = ModelSpec { n_heads: 5, ..ModelSpec::default() };
        assert!(spec.validate().unwrap_err().to_string().contains("n_heads"));
    }
}
