//! How a model's layers are split into pipeline stages, and how much training
//! state each stage holds (what a migration has to move).

use std::ops::Range;

use parcae_policy_core::StagePartition;

/// Why a model cannot be split into the requested number of stages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    /// Zero stages were asked for.
    #[error("pipeline depth must be >= 1")]
    ZeroStages,
    /// The model has no layers.
    #[error("the model has no layers")]
    NoLayers,
    /// Some stage would hold no layer at all.
    #[error(
        "{layers} layers cannot fill {stages} stages: the first layer rides with stage 0, \
         so at most {} stages are possible",
        max_stages(*layers)
    )]
    TooFewLayers {
        /// Layers in the model (first/embedding entry included).
        layers: usize,
        /// Stages asked for.
        stages: u32,
    },
    /// A stage's state does not fit in 64 bits.
    #[error("stage {stage}: state bytes overflow 64 bits")]
    Overflow {
        /// The stage.
        stage: usize,
    },
}

/// The deepest pipeline a model of `layers` entries can be split into with
/// every stage holding at least one layer (see [`partition`]).
pub fn max_stages(layers: usize) -> usize {
    match layers {
        0 => 0,
        1 => 1,
        n => n - 1,
    }
}

/// Split `layers` (parameters per layer, in model order) into `pp` contiguous
/// stages; returns each stage's range of layer indices.
///
/// This is the rule of the Parcae artifact (`ModelSpec.partition` in
/// `liveput/model.py`), summarised in DESIGN.md as "the first stage gets the
/// embedding as an extra layer, leftover layers go to the stages before the
/// last":
///
/// 1. The first entry of `layers` is the embedding. It is set aside and always
///    belongs to stage 0, on top of stage 0's share.
/// 2. The other `n = layers.len() - 1` entries (for GPT/BERT this includes the
///    final head entry, which counts as an ordinary layer) are shared out
///    evenly: every stage gets `n / pp`.
/// 3. The `n % pp` leftover layers go one each to the stages *before the last*,
///    starting with the second-to-last and walking towards the first (so when
///    `n % pp == pp - 1`, stage 0 gets one too). The last stage, which also
///    computes the loss, never gets a leftover.
///
/// Layer counts only; parameter sizes do not move boundaries. The artifact
/// applies the rule to every model, CNNs included (their first entry is the
/// stem), and so do we. The workers of `parcae-host run` split their model with
/// another rule, `parcae_cluster::ModelSpec::balanced_partition` (balanced by
/// parameters, for a small model whose embedding and head weigh as much as
/// blocks); this one stays the cost model's so its figures match the paper's.
///
/// Example, 48 transformer layers + embedding (49 entries): pp=5 gives
/// `[10, 10, 10, 10, 9]`, pp=7 gives `[8, 7, 7, 7, 7, 7, 6]`.
///
/// Fails when `pp == 0`, `layers` is empty, or some stage would be empty
/// (`pp > layers.len() - 1` for `pp >= 2`); see [`max_stages`].
pub fn partition(layers: &[u64], pp: u32) -> Result<Vec<Range<usize>>, PartitionError> {
    let counts = stage_layer_counts(layers.len(), pp)?;
    let mut start = 0;
    Ok(counts
        .into_iter()
        .map(|n| {
            let r = start..start + n;
            start += n;
            r
        })
        .collect())
}

/// Layers per stage for a model of `layers` entries at depth `pp` (see [`partition`]).
pub fn stage_layer_counts(layers: usize, pp: u32) -> Result<Vec<usize>, PartitionError> {
    if pp == 0 {
        return Err(PartitionError::ZeroStages);
    }
    if layers == 0 {
        return Err(PartitionError::NoLayers);
    }
    let stages = pp as usize;
    if stages > max_stages(layers) {
        return Err(PartitionError::TooFewLayers { layers, stages: pp });
    }
    let body = layers - 1;
    let mut counts = vec![body / stages; stages];
    counts[0] += 1; // the embedding
    for i in 0..body % stages {
        counts[stages - 2 - i] += 1;
    }
    Ok(counts)
}

/// The policy-level partition of `layers` at depth `pp`: layers per stage and
/// training-state bytes per stage, where one parameter carries
/// `bytes_per_param` bytes of state (see [`crate::LayerParams::state_bytes_per_param`]:
/// 12 for fp32 Adam = value + 2 moments, 4 bytes each).
pub fn stage_partition(
    layers: &[u64],
    pp: u32,
    bytes_per_param: u64,
) -> Result<StagePartition, PartitionError> {
    let ranges = partition(layers, pp)?;
    let mut layers_per_stage = Vec::with_capacity(ranges.len());
    let mut state_bytes_per_stage = Vec::with_capacity(ranges.len());
    for (stage, r) in ranges.into_iter().enumerate() {
        let bytes = layers[r.clone()]
            .iter()
            .try_fold(0u64, |acc, &p| acc.checked_add(p))
            .and_then(|params| params.checked_mul(bytes_per_param))
            .ok_or(PartitionError::Overflow { stage })?;
        let count = u32::try_from(r.len()).map_err(|_| PartitionError::Overflow { stage })?;
        layers_per_stage.push(count);
        state_bytes_per_stage.push(bytes);
    }
    Ok(StagePartition { pipeline_stages: pp, layers_per_stage, state_bytes_per_stage })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(layers: usize, pp: u32) -> Vec<usize> {
        stage_layer_counts(layers, pp).unwrap()
    }

    #[test]
    fn forty_eight_layers_plus_embedding() {
        // 48 transformer layers + embedding = 49 entries, 48 shared out.
        assert_eq!(counts(49, 5), [10, 10, 10, 10, 9]); // 48 = 5x9 + 3
        assert_eq!(counts(49, 6), [9, 8, 8, 8, 8, 8]); // 48 = 6x8
        assert_eq!(counts(49, 7), [8, 7, 7, 7, 7, 7, 6]); // 48 = 7x6 + 6
        assert_eq!(counts(49, 8), [7, 6, 6, 6, 6, 6, 6, 6]); // 48 = 8x6
    }

    #[test]
    fn gpt_with_head_entry() {
        // gpt-1.5b in the shared profile: embedding + 48 layers + head = 50 entries.
        assert_eq!(counts(50, 5), [11, 10, 10, 10, 9]); // 49 = 5x9 + 4
        assert_eq!(counts(50, 6), [9, 8, 8, 8, 9, 8]); // 49 = 6x8 + 1
        assert_eq!(counts(50, 7), [8, 7, 7, 7, 7, 7, 7]); // 49 = 7x7
        assert_eq!(counts(50, 8), [7, 6, 6, 6, 6, 6, 7, 6]); // 49 = 8x6 + 1
    }

    #[test]
    fn ranges_are_contiguous_and_cover_everything() {
        for layers in 1..60usize {
            for pp in 1..=max_stages(layers) as u32 {
                let params: Vec<u64> = (0..layers as u64).collect();
                let ranges = partition(&params, pp).unwrap();
                assert_eq!(ranges.len(), pp as usize);
                assert_eq!(ranges[0].start, 0);
                assert_eq!(ranges.last().unwrap().end, layers);
                for w in ranges.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                }
                assert!(ranges.iter().all(|r| !r.is_empty()), "{layers} at {pp}: {ranges:?}");
                // The last stage holds the fewest layers of all (it gets no leftover).
                let last = ranges.last().unwrap().len();
                assert!(ranges.iter().all(|r| r.len() >= last));
            }
        }
    }

    #[test]
    fn single_stage_holds_all() {
        assert_eq!(partition(&[5], 1).unwrap(), vec![0..1]);
        assert_eq!(partition(&[5, 6, 7], 1).unwrap(), vec![0..3]);
    }

    #[test]
    fn rejects_impossible_depths() {
        assert_eq!(partition(&[1, 2], 0), Err(PartitionError::ZeroStages));
        assert_eq!(partition(&[], 1), Err(PartitionError::NoLayers));
        assert_eq!(partition(&[1, 2, 3], 3), Err(PartitionError::TooFewLayers { layers: 3, stages: 3 }));
        assert_eq!(partition(&[1, 2, 3], 2).unwrap(), vec![0..2, 2..3]);
        let msg = PartitionError::TooFewLayers { layers: 19, stages: 20 }.to_string();
        assert!(msg.contains("at most 18 stages"), "{msg}");
    }

    #[test]
    fn state_bytes_are_params_times_bytes_per_param() {
        let p = stage_partition(&[100, 10, 10, 10, 100], 2, 12).unwrap();
        // body = 4 layers, 2 each; stage 0 also has the embedding.
        assert_eq!(p.layers_per_stage, [3, 2]);
        assert_eq!(p.state_bytes_per_stage, [120 * 12, 110 * 12]);
        assert_eq!(p.pipeline_stages, 2);
    }

    #[test]
    fn overflow_is_an_error_not_a_panic() {
        assert_eq!(stage_partition(&[u64::MAX, 1], 1, 12), Err(PartitionError::Overflow { stage: 0 }));
        assert_eq!(stage_partition(&[1, 1, u64::MAX / 2], 2, 12), Err(PartitionError::Overflow { stage: 1 }));
    }
}
