//! Inference for the built-in GPT: incremental generation with a KV cache.
//!
//! Why it is here: serving the model (SpotServe-style, with pipeline parallelism across spot
//! instances) and profiling it for the serving planner (`parcae-worker profile-serving`) need
//! the model to generate tokens, and generating by re-running the whole sequence for every new
//! token costs O(t²) per sequence. This module runs the **same layer functions and the same
//! parameters** as training ([`crate::model`]: no separate inference model that could drift
//! from the trained one): the attention of a block takes the keys and values of the positions
//! already seen (`model::block`'s `past`), and each block appends its new keys and values to
//! a [`KvCache`].
//!
//! - [`prefill`] runs a prompt `[batch, t]` through the model, returning the logits of its last
//!   position and the cache; [`decode_step`] feeds one token per sequence and returns the
//!   next logits.
//! - [`prefill_layers`] / [`decode_layers`] run only a contiguous range of layers, hidden states
//!   in and out, so a pipeline stage holds and runs only its layers (and its part of the cache).
//! - [`generate_greedy`] and [`generate_sampled`] (temperature, seeded with the crate's own
//!   [`SplitMix64`], so a seed gives the same tokens on every run) build on them.
//!
//! The model has learned positions for `spec.seq_len` tokens only: a position past that is an
//! [`InferError::ContextExceeded`], not a panic. Everything runs without autograd.

use std::ops::Range;

use parcae_cluster::ModelSpec;
use tch::{Device, Kind, Tensor};

use crate::model::{self, KeyValues, LayerKind, layer_kind, param_shapes};
use crate::rng::{STREAM_SAMPLE, SplitMix64};

/// Why an inference call was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum InferError {
    /// The sequence would need a position the model has no embedding for.
    #[error(
        "{needed} positions needed, past the model's context: seq_len is {seq_len} (positions 0..{seq_len})"
    )]
    ContextExceeded {
        /// Positions the request needs (cached positions plus new ones).
        needed: usize,
        /// The model's context length, `ModelSpec::seq_len`.
        seq_len: usize,
    },
    /// The layer range is empty or not inside the model.
    #[error("layers {layers:?}: must be a non-empty range within the model's 0..{num_layers}")]
    Layers {
        /// The range asked for.
        layers: Range<usize>,
        /// `ModelSpec::num_layers`.
        num_layers: usize,
    },
    /// The parameters given do not match the layer range (one list per layer, in
    /// [`param_shapes`] order).
    #[error("parameters for layers {layers:?}: {reason}")]
    Params {
        /// The range the parameters should cover.
        layers: Range<usize>,
        /// How they do not.
        reason: String,
    },
    /// The input tensor has the wrong shape or kind for the first layer of the range.
    #[error("input of layers {layers:?}: expected {expected}, got {found}")]
    Input {
        /// The range run.
        layers: Range<usize>,
        /// What the first layer takes.
        expected: String,
        /// What was given (shape and kind).
        found: String,
    },
    /// A token id is not in the vocabulary.
    #[error("token {token} is outside the vocabulary 0..{vocab}")]
    Token {
        /// The offending id.
        token: i64,
        /// `ModelSpec::vocab`.
        vocab: usize,
    },
    /// The input's batch is not the cache's.
    #[error("batch of {found} sequences, but the KV cache holds {cached}")]
    Batch {
        /// Sequences in the cache.
        cached: i64,
        /// Sequences in the input.
        found: i64,
    },
    /// A prompt needs at least one token.
    #[error("prompt: needs at least one token per sequence")]
    EmptyPrompt,
    /// Sampling temperature not usable.
    #[error("temperature {0}: must be a finite number > 0 (generate_greedy is temperature 0)")]
    Temperature(f64),
    /// libtorch refused an operation.
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
    /// Building the parameters failed.
    #[error(transparent)]
    Worker(#[from] crate::WorkerError),
}

/// The keys and values of every block of a layer range, for the positions seen so far.
///
/// Made by [`prefill_layers`] (or [`prefill`]) and extended by [`decode_layers`]; it belongs to
/// one layer range and one batch. A pipeline stage keeps the cache of its own layers.
#[derive(Debug)]
pub struct KvCache {
    layers: Range<usize>,
    batch: i64,
    len: usize,
    /// One entry per layer of `layers`: `Some` for a block once it has seen a position.
    kv: Vec<Option<KeyValues>>,
}

impl KvCache {
    fn empty(layers: Range<usize>) -> Self {
        let n = layers.len();
        KvCache { layers, batch: 0, len: 0, kv: (0..n).map(|_| None).collect() }
    }

    /// The layers whose keys and values this cache holds.
    pub fn layers(&self) -> Range<usize> {
        self.layers.clone()
    }

    /// Positions cached (the next token goes at this position).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sequences in the batch (0 before the first call).
    pub fn batch(&self) -> i64 {
        self.batch
    }

    /// Bytes the cached keys and values occupy.
    pub fn bytes(&self) -> u64 {
        self.kv
            .iter()
            .flatten()
            .map(|(k, v)| ((k.numel() + v.numel()) * k.kind().elt_size_in_bytes()) as u64)
            .sum()
    }
}

/// The initial parameters of `layers` of `spec` on `device`, for inference (no gradients): one
/// list per layer, in [`param_shapes`] order, the same tensors training starts from
/// ([`model::init_layer`]).
pub fn init_params(
    spec: &ModelSpec,
    layers: Range<usize>,
    device: Device,
) -> Result<Vec<Vec<Tensor>>, InferError> {
    check_layers(spec, &layers)?;
    layers
        .map(|layer| {
            model::init_layer(spec, layer)
                .iter()
                .map(|t| Ok(t.to_tensor(device)?))
                .collect::<Result<Vec<_>, _>>()
        })
        .collect()
}

/// Runs `input` through `layers` of the model with an empty cache: token ids `[batch, t]`
/// (int64) when the range starts at the embedding, hidden states `[batch, t, d_model]`
/// otherwise. Returns the range's output (hidden states, or logits `[batch, t, vocab]` when
/// the range ends with the head) and the cache of its blocks. `params` holds one list per
/// layer of the range.
pub fn prefill_layers(
    spec: &ModelSpec,
    layers: Range<usize>,
    params: &[Vec<Tensor>],
    input: &Tensor,
) -> Result<(Tensor, KvCache), InferError> {
    check_layers(spec, &layers)?;
    let mut cache = KvCache::empty(layers);
    let out = append(spec, params, &mut cache, input)?;
    Ok((out, cache))
}

/// Runs the next position of every sequence through the cache's layers: token ids
/// `[batch, 1]` for a range starting at the embedding, hidden states `[batch, 1, d_model]`
/// otherwise. Appends the blocks' keys and values to `cache` and returns the range's output
/// for that position (as [`prefill_layers`]).
pub fn decode_layers(
    spec: &ModelSpec,
    params: &[Vec<Tensor>],
    cache: &mut KvCache,
    input: &Tensor,
) -> Result<Tensor, InferError> {
    let size = input.size();
    if size.get(1) != Some(&1) {
        return Err(InferError::Input {
            layers: cache.layers(),
            expected: "one position per sequence (dimension 1 of size 1)".into(),
            found: describe(input),
        });
    }
    append(spec, params, cache, input)
}

/// Prefills the whole model with `tokens` `[batch, t]`: the logits of the last position
/// `[batch, vocab]` and the cache. `params` holds one list per layer of the model.
pub fn prefill(
    spec: &ModelSpec,
    params: &[Vec<Tensor>],
    tokens: &Tensor,
) -> Result<(Tensor, KvCache), InferError> {
    let (logits, cache) = prefill_layers(spec, 0..spec.num_layers(), params, tokens)?;
    Ok((logits.select(1, -1), cache))
}

/// One decode step of the whole model: `next_tokens` `[batch]` go at position `cache.len()`;
/// returns their logits `[batch, vocab]`.
pub fn decode_step(
    spec: &ModelSpec,
    params: &[Vec<Tensor>],
    cache: &mut KvCache,
    next_tokens: &Tensor,
) -> Result<Tensor, InferError> {
    if next_tokens.dim() != 1 {
        return Err(InferError::Input {
            layers: cache.layers(),
            expected: "token ids [batch]".into(),
            found: describe(next_tokens),
        });
    }
    if cache.layers != (0..spec.num_layers()) {
        return Err(InferError::Layers { layers: cache.layers(), num_layers: spec.num_layers() });
    }
    Ok(decode_layers(spec, params, cache, &next_tokens.unsqueeze(1))?.select(1, -1))
}

/// Greedy generation: `max_new_tokens` tokens after `prompt` `[batch, t]`, each the most
/// likely next token, with the KV cache. Returns prompt and new tokens `[batch, t +
/// max_new_tokens]` (int64, on the parameters' device). The whole sequence must fit the
/// model's context (`t + max_new_tokens <= spec.seq_len`), checked before any compute.
pub fn generate_greedy(
    spec: &ModelSpec,
    params: &[Vec<Tensor>],
    prompt: &Tensor,
    max_new_tokens: usize,
) -> Result<Tensor, InferError> {
    generate(spec, params, prompt, max_new_tokens, |logits| Ok(logits.argmax(-1, false)))
}

/// Sampled generation: like [`generate_greedy`], but each new token is drawn from
/// `softmax(logits / temperature)`, with the crate's [`SplitMix64`] seeded by `seed` (one
/// uniform per sequence and step, in batch order): the same seed, model and prompt give the
/// same tokens. `temperature` must be finite and > 0.
pub fn generate_sampled(
    spec: &ModelSpec,
    params: &[Vec<Tensor>],
    prompt: &Tensor,
    max_new_tokens: usize,
    temperature: f64,
    seed: u64,
) -> Result<Tensor, InferError> {
    if !(temperature.is_finite() && temperature > 0.0) {
        return Err(InferError::Temperature(temperature));
    }
    let mut rng = SplitMix64::for_stream(&[seed, STREAM_SAMPLE]);
    generate(spec, params, prompt, max_new_tokens, |logits| {
        let logits = logits.f_to_device(Device::Cpu)?.f_to_kind(Kind::Double)?.f_contiguous()?;
        let (batch, vocab) = (logits.size()[0] as usize, logits.size()[1] as usize);
        let mut values = vec![0f64; batch * vocab];
        logits.f_copy_data(&mut values, batch * vocab)?;
        let picks: Vec<i64> =
            values.chunks(vocab).map(|row| sample_row(row, temperature, rng.next_f64()) as i64).collect();
        Ok(Tensor::from_slice(&picks).to_device(params_device(params)))
    })
}

/// Index drawn from `softmax(row / temperature)` by inverting its CDF at `u` in [0, 1) (the
/// serving shards draw with it too).
pub(crate) fn sample_row(row: &[f64], temperature: f64, u: f64) -> usize {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = row.iter().map(|x| ((x - max) / temperature).exp()).collect();
    let total: f64 = weights.iter().sum();
    let mut target = u * total;
    for (i, w) in weights.iter().enumerate() {
        if target < *w {
            return i;
        }
        target -= w;
    }
    // Rounding left `target` past the last weight: the last token with any weight.
    weights.iter().rposition(|w| *w > 0.0).unwrap_or(0)
}

fn generate(
    spec: &ModelSpec,
    params: &[Vec<Tensor>],
    prompt: &Tensor,
    max_new_tokens: usize,
    mut pick: impl FnMut(&Tensor) -> Result<Tensor, InferError>,
) -> Result<Tensor, InferError> {
    let size = prompt.size();
    if size.len() != 2 {
        return Err(InferError::Input {
            layers: 0..spec.num_layers(),
            expected: "a prompt of token ids [batch, t]".into(),
            found: describe(prompt),
        });
    }
    if size[1] == 0 {
        return Err(InferError::EmptyPrompt);
    }
    let needed = size[1] as usize + max_new_tokens;
    if needed > spec.seq_len {
        return Err(InferError::ContextExceeded { needed, seq_len: spec.seq_len });
    }
    let prompt = prompt.f_to_device(params_device(params))?;
    if max_new_tokens == 0 {
        return Ok(prompt);
    }
    let (mut logits, mut cache) = prefill(spec, params, &prompt)?;
    let mut out = vec![prompt];
    for produced in 1..=max_new_tokens {
        let next = pick(&logits)?;
        out.push(next.unsqueeze(1));
        if produced == max_new_tokens {
            break;
        }
        logits = decode_step(spec, params, &mut cache, &next)?;
    }
    Ok(Tensor::f_cat(&out, 1)?)
}

fn check_layers(spec: &ModelSpec, layers: &Range<usize>) -> Result<(), InferError> {
    if layers.is_empty() || layers.end > spec.num_layers() {
        return Err(InferError::Layers { layers: layers.clone(), num_layers: spec.num_layers() });
    }
    Ok(())
}

fn params_device(params: &[Vec<Tensor>]) -> Device {
    params.iter().flatten().next().map_or(Device::Cpu, Tensor::device)
}

fn describe(t: &Tensor) -> String {
    format!("{:?} {:?}", t.size(), t.kind())
}

/// Checks `params` and `input` against the cache's layer range and context, then runs the
/// input through the range, appending each block's keys and values.
fn append(
    spec: &ModelSpec,
    params: &[Vec<Tensor>],
    cache: &mut KvCache,
    input: &Tensor,
) -> Result<Tensor, InferError> {
    let layers = cache.layers();
    if params.len() != layers.len() {
        return Err(InferError::Params {
            layers,
            reason: format!("{} layer lists given, one per layer needed", params.len()),
        });
    }
    for (layer, p) in layers.clone().zip(params) {
        let expected = param_shapes(spec, layer);
        let shapes_match = p.len() == expected.len()
            && p.iter()
                .zip(&expected)
                .all(|(t, (_, shape))| t.size().iter().map(|&d| d as usize).eq(shape.iter().copied()));
        if !shapes_match {
            let found: Vec<Vec<i64>> = p.iter().map(Tensor::size).collect();
            let expected: Vec<&Vec<usize>> = expected.iter().map(|(_, s)| s).collect();
            return Err(InferError::Params {
                layers,
                reason: format!("layer {layer} has shapes {found:?}, expected {expected:?}"),
            });
        }
    }
    let size = input.size();
    let first = layers.start;
    let (batch, t) = if layer_kind(spec, first) == LayerKind::Embedding {
        if size.len() != 2 || input.kind() != Kind::Int64 {
            return Err(InferError::Input {
                layers,
                expected: "token ids [batch, t] (int64)".into(),
                found: describe(input),
            });
        }
        (size[0], size[1])
    } else {
        let d = spec.d_model as i64;
        if size.len() != 3 || size[2] != d || input.kind() != Kind::Float {
            return Err(InferError::Input {
                layers,
                expected: format!("hidden states [batch, t, {d}] (f32)"),
                found: describe(input),
            });
        }
        (size[0], size[1])
    };
    if batch == 0 || t == 0 {
        return Err(InferError::Input {
            layers,
            expected: "at least one sequence and one position".into(),
            found: describe(input),
        });
    }
    if !cache.is_empty() && batch != cache.batch {
        return Err(InferError::Batch { cached: cache.batch, found: batch });
    }
    let needed = cache.len + t as usize;
    if needed > spec.seq_len {
        return Err(InferError::ContextExceeded { needed, seq_len: spec.seq_len });
    }
    let device = params_device(params);
    let input = input.f_to_device(device)?;
    if input.kind() == Kind::Int64 {
        let (lo, hi) = (input.f_min()?.f_int64_value(&[])?, input.f_max()?.f_int64_value(&[])?);
        if let Some(token) = [lo, hi].into_iter().find(|&x| x < 0 || x >= spec.vocab as i64) {
            return Err(InferError::Token { token, vocab: spec.vocab });
        }
    }
    let start = cache.len as i64;
    let out = tch::no_grad(|| {
        let mut h = input;
        for (i, layer) in layers.clone().enumerate() {
            h = match layer_kind(spec, layer) {
                LayerKind::Embedding => model::embed(&params[i], &h, start),
                LayerKind::Block => {
                    let (out, kv) = model::block(spec, &params[i], &h, cache.kv[i].as_ref());
                    cache.kv[i] = Some(kv);
                    out
                }
                LayerKind::Head => model::forward_layer(spec, layer, &params[i], &h),
            };
        }
        h
    });
    cache.batch = batch;
    cache.len = needed;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default model with its matrices scaled up: attention far from uniform and logits
    /// spread, so a wrong mask, position or cache entry shows far above the tolerance.
    fn sharp_params(spec: &ModelSpec) -> Vec<Vec<Tensor>> {
        init_params(spec, 0..spec.num_layers(), Device::Cpu)
            .unwrap()
            .into_iter()
            .map(|layer| layer.into_iter().map(|t| if t.dim() == 2 { t * 8.0 } else { t }).collect())
            .collect()
    }

    /// Logits `[batch, t, vocab]` of the whole model over `tokens`, the training path.
    fn full_forward(spec: &ModelSpec, params: &[Vec<Tensor>], tokens: &Tensor) -> Tensor {
        tch::no_grad(|| {
            (0..spec.num_layers())
                .fold(tokens.shallow_clone(), |x, l| model::forward_layer(spec, l, &params[l], &x))
        })
    }

    fn tokens(spec: &ModelSpec, batch: usize, len: usize, seed: u64) -> Tensor {
        let mut rng = SplitMix64::new(seed);
        let ids: Vec<i64> = (0..batch * len).map(|_| rng.below(spec.vocab as u64) as i64).collect();
        Tensor::from_slice(&ids).view([batch as i64, len as i64])
    }

    fn assert_close(a: &Tensor, b: &Tensor, what: &str) {
        assert_eq!(a.size(), b.size(), "{what}: shapes");
        let diff = (a - b).abs().max().double_value(&[]);
        assert!(a.allclose(b, 1e-5, 1e-5, false), "{what}: max abs diff {diff}");
    }

    #[test]
    fn cached_decode_matches_the_full_forward_at_every_step() {
        let spec = ModelSpec::default();
        let params = sharp_params(&spec);
        for batch in [1, 3] {
            let seq = tokens(&spec, batch, spec.seq_len, 11 + batch as u64);
            let full = full_forward(&spec, &params, &seq); // [b, seq_len, vocab]
            let prompt_len = 5;
            let (mut logits, mut cache) = prefill(&spec, &params, &seq.narrow(1, 0, prompt_len)).unwrap();
            assert_close(&logits, &full.select(1, prompt_len - 1), &format!("batch {batch}, prefill"));
            for pos in prompt_len..spec.seq_len as i64 {
                logits = decode_step(&spec, &params, &mut cache, &seq.select(1, pos)).unwrap();
                assert_close(&logits, &full.select(1, pos), &format!("batch {batch}, position {pos}"));
            }
            assert_eq!(cache.len(), spec.seq_len);
            // K and V of every block: batch x positions x d_model f32 each.
            let per_token = (spec.n_blocks * spec.d_model * 4 * 2) as u64;
            assert_eq!(cache.bytes(), per_token * (batch * spec.seq_len) as u64);
        }
    }

    #[test]
    fn greedy_with_the_cache_equals_greedy_by_recomputing() {
        let spec = ModelSpec::default();
        let params = sharp_params(&spec);
        let prompt = tokens(&spec, 2, 4, 5);
        let new = spec.seq_len - 4;
        let cached = generate_greedy(&spec, &params, &prompt, new).unwrap();
        let mut seq = prompt.shallow_clone();
        for _ in 0..new {
            let next = full_forward(&spec, &params, &seq).select(1, -1).argmax(-1, false);
            seq = Tensor::cat(&[seq, next.unsqueeze(1)], 1);
        }
        assert_eq!(cached.size(), vec![2, spec.seq_len as i64]);
        assert!(cached.equal(&seq), "cached {cached:?} vs recomputed {seq:?}");
        // A sharp model does not just repeat one token.
        let distinct: std::collections::BTreeSet<i64> =
            Vec::<i64>::try_from(cached.flatten(0, -1)).unwrap().into_iter().collect();
        assert!(distinct.len() > 3, "{distinct:?}");
    }

    #[test]
    fn two_pipeline_stages_give_the_logits_of_one() {
        let spec = ModelSpec::default();
        let params = sharp_params(&spec);
        let all = 0..spec.num_layers();
        let seq = tokens(&spec, 2, 12, 3);
        let (whole, mut cache) = prefill_layers(&spec, all.clone(), &params, &seq.narrow(1, 0, 8)).unwrap();
        let mut whole_steps = Vec::new();
        for pos in 8..12 {
            whole_steps.push(decode_layers(&spec, &params, &mut cache, &seq.narrow(1, pos, 1)).unwrap());
        }
        for k in 1..spec.num_layers() {
            let (p0, p1) = (&params[..k], &params[k..]);
            let (h, mut c0) = prefill_layers(&spec, 0..k, p0, &seq.narrow(1, 0, 8)).unwrap();
            assert_eq!(h.size(), vec![2, 8, spec.d_model as i64]);
            let (logits, mut c1) = prefill_layers(&spec, k..spec.num_layers(), p1, &h).unwrap();
            assert_close(&logits, &whole, &format!("split at {k}, prefill"));
            for (i, pos) in (8..12).enumerate() {
                let h = decode_layers(&spec, p0, &mut c0, &seq.narrow(1, pos, 1)).unwrap();
                let logits = decode_layers(&spec, p1, &mut c1, &h).unwrap();
                assert_close(&logits, &whole_steps[i], &format!("split at {k}, position {pos}"));
            }
            assert_eq!((c0.len(), c1.len()), (12, 12));
            assert_eq!(c0.bytes() + c1.bytes(), cache.bytes());
        }
        // A stage's input must match its first layer.
        let err = prefill_layers(&spec, 2..4, &params[2..4], &seq).unwrap_err();
        assert!(matches!(err, InferError::Input { .. }), "{err}");
        let err = prefill_layers(&spec, 2..4, &params[2..5], &seq).unwrap_err();
        assert!(matches!(err, InferError::Params { .. }), "{err}");
        let err = prefill_layers(&spec, 3..3, &[], &seq).unwrap_err();
        assert!(matches!(err, InferError::Layers { .. }), "{err}");
    }

    #[test]
    fn positions_past_seq_len_are_an_error() {
        let spec = ModelSpec::default();
        let params = sharp_params(&spec);
        let n = spec.seq_len;
        // Generation that would run past the context is refused up front.
        let err = generate_greedy(&spec, &params, &tokens(&spec, 1, n - 2, 1), 3).unwrap_err();
        assert!(
            matches!(err, InferError::ContextExceeded { needed, seq_len } if needed == n + 1 && seq_len == n)
        );
        assert!(err.to_string().contains(&format!("seq_len is {n}")), "{err}");
        assert!(generate_sampled(&spec, &params, &tokens(&spec, 1, 3, 1), n, 1.0, 1).is_err());
        // Exactly filling the context is fine.
        assert_eq!(
            generate_greedy(&spec, &params, &tokens(&spec, 1, n - 2, 1), 2).unwrap().size()[1],
            n as i64
        );
        // Decoding one past a full cache, and a prompt longer than the context.
        let (_, mut cache) = prefill(&spec, &params, &tokens(&spec, 2, n, 2)).unwrap();
        let err = decode_step(&spec, &params, &mut cache, &Tensor::from_slice(&[1i64, 2])).unwrap_err();
        assert!(matches!(err, InferError::ContextExceeded { needed, .. } if needed == n + 1), "{err}");
        assert_eq!(cache.len(), n, "a refused step leaves the cache as it was");
        let err = prefill(&spec, &params, &tokens(&spec, 1, n + 1, 2)).unwrap_err();
        assert!(matches!(err, InferError::ContextExceeded { .. }), "{err}");
        // Other misuse: a token outside the vocabulary, another batch size.
        let err = decode_step(&spec, &params, &mut cache, &Tensor::from_slice(&[1i64])).unwrap_err();
        assert!(matches!(err, InferError::Batch { cached: 2, found: 1 }), "{err}");
        let bad = Tensor::from_slice(&[spec.vocab as i64]).view([1, 1]);
        assert!(matches!(prefill(&spec, &params, &bad), Err(InferError::Token { .. })));
    }

    #[test]
    fn sampling_is_deterministic_per_seed() {
        let spec = ModelSpec::default();
        // The initial model: close to uniform over the vocabulary, far from degenerate.
        let params = init_params(&spec, 0..spec.num_layers(), Device::Cpu).unwrap();
        let prompt = tokens(&spec, 2, 3, 9);
        let (logits, _) = prefill(&spec, &params, &prompt).unwrap();
        let top = logits.softmax(-1, Kind::Float).max().double_value(&[]);
        assert!(top < 0.5, "top probability {top}");
        let a = generate_sampled(&spec, &params, &prompt, 20, 1.0, 42).unwrap();
        let b = generate_sampled(&spec, &params, &prompt, 20, 1.0, 42).unwrap();
        let c = generate_sampled(&spec, &params, &prompt, 20, 1.0, 43).unwrap();
        assert!(a.equal(&b), "same seed, different tokens");
        assert!(!a.equal(&c), "different seeds, same tokens");
        assert!(a.narrow(1, 0, 3).equal(&prompt));
        for t in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let err = generate_sampled(&spec, &params, &prompt, 2, t, 1).unwrap_err();
            assert!(matches!(err, InferError::Temperature(_)), "{err}");
        }
        // A very low temperature is greedy.
        let cold = generate_sampled(&spec, &params, &prompt, 10, 1e-6, 7).unwrap();
        assert!(cold.equal(&generate_greedy(&spec, &params, &prompt, 10).unwrap()));
    }

    #[test]
    fn sample_row_inverts_the_cdf() {
        let row = [0.0, (3.0f64).ln()]; // probabilities 1/4, 3/4
        assert_eq!(sample_row(&row, 1.0, 0.0), 0);
        assert_eq!(sample_row(&row, 1.0, 0.24), 0);
        assert_eq!(sample_row(&row, 1.0, 0.26), 1);
        assert_eq!(sample_row(&row, 1.0, 0.999_999), 1);
    }
}
