//! Deterministic synthetic training data, made by the project (nothing is downloaded).
//!
//! Each sequence is a walk on a noisy "grammar": a fixed random permutation `next` of the
//! vocabulary (drawn from `spec.seed`) gives each token's successor; with probability
//! [`NOISE`] the successor is instead drawn uniformly. A model that has learned `next`
//! predicts all but the noise, so the loss falls quickly from `ln(vocab)` towards the entropy
//! floor [`loss_floor`] (about 0.73 nats for the default 64-token vocabulary, against
//! ln 64 = 4.16 at the start).
//!
//! The tokens of micro-batch `m` of step `k` are a pure function of `(spec.seed, k, m)` and
//! the spec's shape: any worker can make any micro-batch, and the data-loader position is
//! simply the step counter, so a migrated or restarted trainer sees the same samples.

use parcae_cluster::ModelSpec;
use tch::{Device, Tensor};

use crate::error::WorkerError;
use crate::rng::{STREAM_DATA, STREAM_GRAMMAR, SplitMix64};

/// Probability that a successor token is uniform noise instead of the grammar's choice.
pub const NOISE: f64 = 0.1;

/// The grammar: `table[token]` is the token that usually follows `token` (a permutation).
pub fn transition_table(spec: &ModelSpec) -> Vec<i64> {
    let mut rng = SplitMix64::for_stream(&[spec.seed, STREAM_GRAMMAR]);
    let mut table: Vec<i64> = (0..spec.vocab as i64).collect();
    for i in (1..table.len()).rev() {
        table.swap(i, rng.below(i as u64 + 1) as usize);
    }
    table
}

/// The tokens of micro-batch `micro_batch` of step `step`: `spec.micro_batch` rows of
/// `spec.seq_len + 1` tokens, row-major (inputs are a row's first `seq_len` tokens, targets
/// its last `seq_len`).
pub fn micro_batch_tokens(spec: &ModelSpec, step: u64, micro_batch: usize) -> Vec<i64> {
    let table = transition_table(spec);
    let mut rng = SplitMix64::for_stream(&[spec.seed, STREAM_DATA, step, micro_batch as u64]);
    let vocab = spec.vocab as u64;
    let row = spec.seq_len + 1;
    let mut tokens = Vec::with_capacity(spec.micro_batch * row);
    for _ in 0..spec.micro_batch {
        let mut tok = rng.below(vocab) as i64;
        tokens.push(tok);
        for _ in 1..row {
            tok = if rng.next_f64() < NOISE { rng.below(vocab) as i64 } else { table[tok as usize] };
            tokens.push(tok);
        }
    }
    tokens
}

/// Inputs `[micro_batch, seq_len]` and next-token targets `[micro_batch, seq_len]` (int64) of
/// micro-batch `micro_batch` of step `step`, on `device`.
pub fn micro_batch(
    spec: &ModelSpec,
    step: u64,
    micro_batch: usize,
    device: Device,
) -> Result<(Tensor, Tensor), WorkerError> {
    let tokens = micro_batch_tokens(spec, step, micro_batch);
    let all = Tensor::f_from_slice(&tokens)?.f_view([spec.micro_batch as i64, spec.seq_len as i64 + 1])?;
    let inputs = all.f_narrow(1, 0, spec.seq_len as i64)?.f_contiguous()?.f_to_device(device)?;
    let targets = all.f_narrow(1, 1, spec.seq_len as i64)?.f_contiguous()?.f_to_device(device)?;
    Ok((inputs, targets))
}

/// The lowest expected cross-entropy (nats per token) any model can reach on this data: the
/// entropy of one noisy successor, `-(p ln p) - (V-1) q ln q` with `q = NOISE / V` and
/// `p = 1 - NOISE + q`.
pub fn loss_floor(spec: &ModelSpec) -> f64 {
    let v = spec.vocab as f64;
    let q = NOISE / v;
    let p = 1.0 - NOISE + q;
    -(p * p.ln()) - (v - 1.0) * q * q.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_is_a_pure_function_of_seed_step_and_micro_batch() {
        let spec = ModelSpec::default();
        let a = micro_batch_tokens(&spec, 3, 5);
        assert_eq!(a.len(), spec.micro_batch * (spec.seq_len + 1));
        assert_eq!(a, micro_batch_tokens(&spec, 3, 5));
        assert_ne!(a, micro_batch_tokens(&spec, 3, 6));
        assert_ne!(a, micro_batch_tokens(&spec, 4, 5));
        assert_ne!(a, micro_batch_tokens(&ModelSpec { seed: 8, ..spec.clone() }, 3, 5));
        assert!(a.iter().all(|&t| (0..spec.vocab as i64).contains(&t)));

        let (x, y) = micro_batch(&spec, 3, 5, Device::Cpu).unwrap();
        assert_eq!(x.size(), vec![spec.micro_batch as i64, spec.seq_len as i64]);
        assert_eq!(y.size(), x.size());
        assert_eq!(x.int64_value(&[0, 1]), y.int64_value(&[0, 0]));
    }

    #[test]
    fn the_grammar_is_followed_about_nine_times_in_ten() {
        let spec = ModelSpec::default();
        let table = transition_table(&spec);
        let mut sorted = table.clone();
        sorted.sort();
        assert_eq!(sorted, (0..spec.vocab as i64).collect::<Vec<_>>());
        let (mut follows, mut total) = (0, 0);
        for m in 0..50 {
            for row in micro_batch_tokens(&spec, 0, m).chunks(spec.seq_len + 1) {
                for w in row.windows(2) {
                    total += 1;
                    follows += usize::from(table[w[0] as usize] == w[1]);
                }
            }
        }
        let rate = follows as f64 / total as f64;
        assert!((rate - (1.0 - NOISE + NOISE / spec.vocab as f64)).abs() < 0.02, "{rate}");
        let floor = loss_floor(&spec);
        assert!((0.72..0.74).contains(&floor), "{floor}");
    }
}
