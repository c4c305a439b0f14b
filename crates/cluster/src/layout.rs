//! Model shape and the (replica, stage) slots of a (D, P) configuration.
//!
//! A model is a list of *layers*: layer 0 is the embedding (token + position),
//! layers `1..=n_blocks` are transformer blocks, and the last layer is the
//! final layer norm plus the output head. A stage owns a contiguous range of
//! layers; state moves between workers layer by layer, so a repartition is just
//! a different set of ranges.

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Bytes of one f32.
const F32: u64 = 4;
/// A layer's migratable state: parameters plus Adam's first and second moments.
const STATE_COPIES: u64 = 3;

/// The GPT-style decoder both sides agree on, and the fixed global batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    /// Token vocabulary size (embedding rows and output logits).
    pub vocab: usize,
    /// Width of the residual stream.
    pub d_model: usize,
    /// Attention heads per block; must divide `d_model`.
    pub n_heads: usize,
    /// Transformer blocks (the model has `n_blocks + 2` layers).
    pub n_blocks: usize,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Sequences per optimizer step, whatever the configuration (gradient accumulation).
    pub global_batch: usize,
    /// Sequences per micro-batch; `global_batch / micro_batch` micro-batches per step.
    pub micro_batch: usize,
    /// Adam's step size, the same on every stage.
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
    /// The model spec itself is unusable.
    #[error("model spec field `{field}`: {reason}")]
    Spec {
        /// The offending field's name in the spec.
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// The spec is fine but this (D, P) cannot be laid out over it.
    #[error("configuration D={d} P={p}: {reason}")]
    Config {
        /// Data-parallel replicas asked for.
        d: usize,
        /// Pipeline stages asked for.
        p: usize,
        /// Why they do not fit the model or batch.
        reason: String,
    },
}

/// Why a model spec file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SpecFileError {
    /// The file could not be read.
    #[error("reading model spec {path}: {source}")]
    Read {
        /// The spec file.
        path: PathBuf,
        /// The I/O failure.
        source: std::io::Error,
    },
    /// The file is not JSON of the spec's shape.
    #[error("{path}: not a model spec (line {line}, column {column}): {reason}")]
    Parse {
        /// The spec file.
        path: PathBuf,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// The parser's message.
        reason: String,
    },
    /// The file parses but its values are unusable.
    #[error("model spec {path}: {source}")]
    Invalid {
        /// The spec file.
        path: PathBuf,
        /// Which field is wrong and why.
        source: LayoutError,
    },
}

impl ModelSpec {
    /// The spec in a JSON file (the fields of this struct), validated; None: the
    /// built-in default. The one loader host (`run --spec`) and worker
    /// (`profile --spec`) share, so both accept and refuse the same files.
    pub fn load(path: Option<&Path>) -> Result<ModelSpec, SpecFileError> {
        let Some(path) = path else { return Ok(ModelSpec::default()) };
        let text = std::fs::read_to_string(path)
            .map_err(|source| SpecFileError::Read { path: path.to_path_buf(), source })?;
        let spec: ModelSpec = serde_json::from_str(&text).map_err(|e| SpecFileError::Parse {
            path: path.to_path_buf(),
            line: e.line(),
            column: e.column(),
            reason: e.to_string(),
        })?;
        spec.validate().map_err(|source| SpecFileError::Invalid { path: path.to_path_buf(), source })?;
        Ok(spec)
    }

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

    /// The transformer blocks' layer indices (the layers with a KV cache; layer 0 is the
    /// embedding, the last the head).
    pub fn block_layers(&self) -> Range<usize> {
        1..self.n_blocks + 1
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
    ///
    /// This is the rule `run` trains with. It differs on purpose from
    /// `parcae_profile::partition` (the Parcae artifact's layer-count rule, which the
    /// cost model and `bench-migration` use so their byte counts match the paper's):
    /// this model's embedding and head are far from the size of a block, so
    /// counting layers would leave real stages badly unbalanced.
    pub fn balanced_partition(&self, p: usize) -> Result<Vec<Range<usize>>, LayoutError> {
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
    /// Data-parallel replica index, `0..D`.
    pub replica: usize,
    /// Pipeline stage index, `0..P`.
    pub stage: usize,
}

/// A (D, P) configuration laid out over a model: which layers each stage owns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// D: replicas, each training on its share of the micro-batches.
    pub data_parallel: usize,
    /// P: stages per replica.
    pub pipeline_stages: usize,
    /// The layer range each stage owns, in order, covering every layer once.
    pub stages: Vec<Range<usize>>,
    /// Micro-batches each replica trains per step, when replicas run on instances of
    /// different speeds (a mixed fleet: the faster take more, so all finish together);
    /// empty for the even split.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<usize>,
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
        let stages = spec.balanced_partition(p).map_err(|e| match e {
            LayoutError::Config { reason, .. } => LayoutError::Config { d, p, reason },
            other => other,
        })?;
        Ok(Layout { data_parallel: d, pipeline_stages: p, stages, shares: Vec::new() })
    }

    /// This layout with replica `r` training `shares[r]` micro-batches per step: one share
    /// per replica, each at least one, together every micro-batch of the step.
    pub fn with_shares(mut self, spec: &ModelSpec, shares: Vec<usize>) -> Result<Layout, LayoutError> {
        let (d, p) = (self.data_parallel, self.pipeline_stages);
        let m = spec.micro_batches();
        if shares.len() != d || shares.contains(&0) || shares.iter().sum::<usize>() != m {
            return Err(LayoutError::Config {
                d,
                p,
                reason: format!(
                    "shares {shares:?}: need one per replica, each at least 1, summing to the {m} micro-batches per step"
                ),
            });
        }
        self.shares = shares;
        Ok(self)
    }

    /// The same layout with the even split.
    pub fn without_shares(&self) -> Layout {
        Layout { shares: Vec::new(), ..self.clone() }
    }

    /// This layout with its shares balancing replicas of these speeds: `tick_ms[r]` is how
    /// long replica `r` takes per micro-batch through its slowest stage
    /// ([`parcae_policy_core::mixed::balanced_split`]).
    pub fn split_by_speed(self, spec: &ModelSpec, tick_ms: &[f64]) -> Result<Layout, LayoutError> {
        let m = spec.micro_batches();
        let split = parcae_policy_core::mixed::balanced_split(tick_ms, m as u32, self.pipeline_stages as u32)
            .ok_or_else(|| LayoutError::Config {
                d: tick_ms.len(),
                p: self.pipeline_stages,
                reason: format!("{} speeds for the {m} micro-batches per step", tick_ms.len()),
            })?;
        self.with_shares(spec, split.into_iter().map(|k| k as usize).collect())
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
    /// a contiguous share (its [`Layout::shares`], or an even split), so any D covers every
    /// micro-batch exactly once.
    pub fn micro_batches_of(&self, spec: &ModelSpec, replica: usize) -> Range<usize> {
        if self.shares.len() == self.data_parallel {
            let start: usize = self.shares[..replica.min(self.shares.len())].iter().sum();
            return start..start + self.shares.get(replica).copied().unwrap_or(0);
        }
        let m = spec.micro_batches();
        let d = self.data_parallel;
        (replica * m / d)..((replica + 1) * m / d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_split_the_micro_batches_by_speed_and_cover_each_once() {
        let spec = ModelSpec::default();
        let m = spec.micro_batches();
        // A replica three times as fast as the other takes three quarters of the batch.
        let layout = Layout::new(&spec, 2, 1).unwrap().split_by_speed(&spec, &[1.0, 3.0]).unwrap();
        assert_eq!(layout.shares, [m * 3 / 4, m / 4]);
        assert_eq!(layout.micro_batches_of(&spec, 0), 0..m * 3 / 4);
        assert_eq!(layout.micro_batches_of(&spec, 1), m * 3 / 4..m);
        let uneven = Layout::new(&spec, 3, 2).unwrap().with_shares(&spec, vec![1, m - 3, 2]).unwrap();
        let covered: Vec<usize> = (0..3).flat_map(|r| uneven.micro_batches_of(&spec, r)).collect();
        assert_eq!(covered, (0..m).collect::<Vec<_>>());
        // Shares that leave a replica idle, miss micro-batches or do not fit D are refused.
        for bad in [vec![0, m], vec![1, 1], vec![m]] {
            let e = Layout::new(&spec, 2, 1).unwrap().with_shares(&spec, bad.clone()).unwrap_err();
            assert!(e.to_string().contains("shares"), "{bad:?}: {e}");
        }
        // An even layout serialises as before (no shares field).
        let json = serde_json::to_string(&Layout::new(&spec, 2, 1).unwrap()).unwrap();
        assert!(!json.contains("shares"), "{json}");
    }

    #[test]
    fn partitions_are_contiguous_cover_every_layer_and_balance() {
        let spec = ModelSpec::default();
        for p in 1..=spec.num_layers() {
            let ranges = spec.balanced_partition(p).unwrap();
            assert_eq!(ranges.len(), p);
            assert_eq!(ranges[0].start, 0);
            assert_eq!(ranges[p - 1].end, spec.num_layers());
            for w in ranges.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
            assert!(ranges.iter().all(|r| !r.is_empty()));
        }
        // Six equal blocks between two lighter ends: P=2 splits them 3/3 around the middle.
        let two = spec.balanced_partition(2).unwrap();
        assert_eq!(two, vec![0..4, 4..8]);
        assert!(spec.balanced_partition(0).is_err());
        assert!(spec.balanced_partition(spec.num_layers() + 1).is_err());
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
    fn spec_files_load_or_say_which_file_and_why() {
        let dir = std::env::temp_dir().join(format!("parcae-spec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(ModelSpec::load(None).unwrap(), ModelSpec::default());
        let good = dir.join("good.json");
        let spec = ModelSpec { n_blocks: 2, ..ModelSpec::default() };
        std::fs::write(&good, serde_json::to_vec(&spec).unwrap()).unwrap();
        assert_eq!(ModelSpec::load(Some(&good)).unwrap(), spec);
        let invalid = dir.join("invalid.json");
        let bad = ModelSpec { micro_batch: 3, ..ModelSpec::default() };
        std::fs::write(&invalid, serde_json::to_vec(&bad).unwrap()).unwrap();
        let e = ModelSpec::load(Some(&invalid)).unwrap_err().to_string();
        assert!(e.contains("invalid.json") && e.contains("micro_batch"), "{e}");
        let garbage = dir.join("garbage.json");
        std::fs::write(&garbage, "{\n  \"vocab\": \"many\"\n}").unwrap();
        let e = ModelSpec::load(Some(&garbage)).unwrap_err().to_string();
        assert!(e.contains("garbage.json") && e.contains("line 2"), "{e}");
        assert!(
            ModelSpec::load(Some(&dir.join("missing.json"))).unwrap_err().to_string().contains("missing")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_specs_name_the_field() {
        let spec = ModelSpec { micro_batch: 3, ..ModelSpec::default() };
        assert!(spec.validate().unwrap_err().to_string().contains("micro_batch"));
        let spec = ModelSpec { n_heads: 5, ..ModelSpec::default() };
        assert!(spec.validate().unwrap_err().to_string().contains("n_heads"));
    }
}
