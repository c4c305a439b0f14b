//! The GPT-style decoder, layer by layer, as plain functions of explicit tensors.
//!
//! No `nn::Module`: a layer is just its parameter list (in the fixed order of
//! [`param_shapes`]), so the trainer can move, serialise and update every tensor of its state
//! explicitly. Layer 0 is the token + position embedding, layers `1..=n_blocks` are pre-LN
//! transformer blocks, and the last layer is the final LayerNorm plus an untied head; this is
//! the model whose sizes [`ModelSpec::layer_params`] counts.

use parcae_cluster::ModelSpec;
use tch::{Device, Kind, Tensor};

use crate::rng::{STREAM_INIT, SplitMix64};
use crate::tensor::TensorData;

/// Standard deviation of GPT-2's weight initialisation.
const INIT_STD: f64 = 0.02;
/// LayerNorm's epsilon (PyTorch's default).
const LN_EPS: f64 = 1e-5;

/// What a layer index holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    /// Token + position embedding; consumes token ids.
    Embedding,
    /// One pre-LN transformer block; maps hidden states to hidden states.
    Block,
    /// Final LayerNorm + output head; produces logits.
    Head,
}

/// The kind of layer `layer` of `spec` (indices past the head are treated as the head; callers
/// check ranges against [`ModelSpec::num_layers`]).
pub fn layer_kind(spec: &ModelSpec, layer: usize) -> LayerKind {
    if layer == 0 {
        LayerKind::Embedding
    } else if layer <= spec.n_blocks {
        LayerKind::Block
    } else {
        LayerKind::Head
    }
}

/// How a parameter is initialised.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Init {
    Normal(f64),
    Zeros,
    Ones,
}

fn param_specs(spec: &ModelSpec, layer: usize) -> Vec<(&'static str, Vec<usize>, Init)> {
    let (d, v, s) = (spec.d_model, spec.vocab, spec.seq_len);
    // GPT-2 scales the residual projections by 1/sqrt(2 * blocks) so the residual stream's
    // variance does not grow with depth.
    let residual = Init::Normal(INIT_STD / (2.0 * spec.n_blocks as f64).sqrt());
    let normal = Init::Normal(INIT_STD);
    match layer_kind(spec, layer) {
        LayerKind::Embedding => vec![("wte", vec![v, d], normal), ("wpe", vec![s, d], normal)],
        LayerKind::Block => vec![
            ("ln1.weight", vec![d], Init::Ones),
            ("ln1.bias", vec![d], Init::Zeros),
            ("attn.qkv.weight", vec![3 * d, d], normal),
            ("attn.qkv.bias", vec![3 * d], Init::Zeros),
            ("attn.proj.weight", vec![d, d], residual),
            ("attn.proj.bias", vec![d], Init::Zeros),
            ("ln2.weight", vec![d], Init::Ones),
            ("ln2.bias", vec![d], Init::Zeros),
            ("mlp.fc.weight", vec![4 * d, d], normal),
            ("mlp.fc.bias", vec![4 * d], Init::Zeros),
            ("mlp.proj.weight", vec![d, 4 * d], residual),
            ("mlp.proj.bias", vec![d], Init::Zeros),
        ],
        LayerKind::Head => vec![
            ("ln_f.weight", vec![d], Init::Ones),
            ("ln_f.bias", vec![d], Init::Zeros),
            ("head.weight", vec![v, d], normal),
        ],
    }
}

/// Names and shapes of a layer's parameters, in the order every API of this crate uses
/// (state files, Adam moments, the all-reduce buffer).
pub fn param_shapes(spec: &ModelSpec, layer: usize) -> Vec<(&'static str, Vec<usize>)> {
    param_specs(spec, layer).into_iter().map(|(name, shape, _)| (name, shape)).collect()
}

/// The initial parameters of `layer`: a pure function of `(spec.seed, layer)` and the model
/// shape, never of the partition, so every (D, P) configuration starts from the same weights.
pub fn init_layer(spec: &ModelSpec, layer: usize) -> Vec<TensorData> {
    let mut rng = SplitMix64::for_stream(&[spec.seed, STREAM_INIT, layer as u64]);
    param_specs(spec, layer)
        .into_iter()
        .map(|(_, shape, init)| {
            let n = shape.iter().product();
            let data = match init {
                Init::Normal(std) => (0..n).map(|_| (rng.normal() * std) as f32).collect(),
                Init::Zeros => vec![0.0; n],
                Init::Ones => vec![1.0; n],
            };
            TensorData { shape, data }
        })
        .collect()
}

/// Applies layer `layer` to `x`: token ids `[batch, seq]` (int64) for the embedding, hidden
/// states `[batch, seq, d_model]` otherwise. Returns hidden states, or logits
/// `[batch, seq, vocab]` for the head. `params` are in [`param_shapes`] order.
pub fn forward_layer(spec: &ModelSpec, layer: usize, params: &[Tensor], x: &Tensor) -> Tensor {
    let d = spec.d_model as i64;
    match layer_kind(spec, layer) {
        LayerKind::Embedding => embed(params, x, 0),
        LayerKind::Block => block(spec, params, x, None).0,
        LayerKind::Head => {
            let h = x.layer_norm([d], Some(&params[0]), Some(&params[1]), LN_EPS, false);
            h.linear::<&Tensor>(&params[2], None)
        }
    }
}

/// The embedding of token ids `x` (`[batch, t]`) at positions `start..start + t`. The caller
/// keeps `start + t` within `spec.seq_len` (the rows of `wpe`).
pub(crate) fn embed(params: &[Tensor], x: &Tensor, start: i64) -> Tensor {
    let (wte, wpe) = (&params[0], &params[1]);
    let t = x.size()[1];
    Tensor::embedding(wte, x, -1, false, false) + wpe.narrow(0, start, t)
}

/// Keys and values of one block's attention, `[batch, heads, positions, head_dim]` each.
pub(crate) type KeyValues = (Tensor, Tensor);

/// One pre-LN block: `x + attn(ln1(x))`, then `x + mlp(ln2(x))`.
///
/// With `past` (the keys and values of the `P` positions before `x`, from earlier calls), the
/// `t` new positions attend to those and causally to each other; without, `x` is the whole
/// sequence, as in training (the same operations as ever: the past path only adds a
/// concatenation and widens the mask). Returns the output and this call's keys and values,
/// past included, so an incremental caller keeps them for the next call.
pub(crate) fn block(
    spec: &ModelSpec,
    p: &[Tensor],
    x: &Tensor,
    past: Option<&KeyValues>,
) -> (Tensor, KeyValues) {
    let d = spec.d_model as i64;
    let heads = spec.n_heads as i64;
    let hd = d / heads;
    let (b, t) = (x.size()[0], x.size()[1]);

    let h = x.layer_norm([d], Some(&p[0]), Some(&p[1]), LN_EPS, false);
    let qkv = h.linear(&p[2], Some(&p[3])); // [b, t, 3d]
    let split = |i: i64| qkv.narrow(2, i * d, d).view([b, t, heads, hd]).transpose(1, 2); // [b, h, t, hd]
    let (q, mut k, mut v) = (split(0), split(1), split(2));
    let mut offset = 0;
    if let Some((past_k, past_v)) = past {
        offset = past_k.size()[2];
        k = Tensor::cat(&[past_k, &k], 2);
        v = Tensor::cat(&[past_v, &v], 2);
    }
    let scores = q.matmul(&k.transpose(-2, -1)) * (1.0 / (hd as f64).sqrt()); // [b, h, t, offset + t]
    // New position i (absolute offset + i) sees keys 0..=offset + i.
    let future = Tensor::ones([t, offset + t], (Kind::Bool, x.device())).triu(1 + offset);
    let att = scores.masked_fill(&future, f64::NEG_INFINITY).softmax(-1, Kind::Float);
    let y = att.matmul(&v).transpose(1, 2).contiguous().view([b, t, d]);
    let x = x + y.linear(&p[4], Some(&p[5]));

    let h = x.layer_norm([d], Some(&p[6]), Some(&p[7]), LN_EPS, false);
    let h = h.linear(&p[8], Some(&p[9])).gelu("none").linear(&p[10], Some(&p[11]));
    (x + h, (k, v))
}

/// Parameters of a layer, as loaded onto a device and tracking gradients.
pub(crate) fn to_params(data: &[TensorData], device: Device) -> Result<Vec<Tensor>, crate::WorkerError> {
    data.iter().map(|t| Ok(t.to_tensor(device)?.set_requires_grad(true))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_counts_match_the_shared_spec() {
        for spec in [
            ModelSpec::default(),
            ModelSpec { vocab: 50, d_model: 24, n_heads: 3, n_blocks: 2, seq_len: 9, ..ModelSpec::default() },
        ] {
            for layer in 0..spec.num_layers() {
                let params = init_layer(&spec, layer);
                let count: usize = params.iter().map(TensorData::numel).sum();
                assert_eq!(count as u64, spec.layer_params(layer), "layer {layer} of {spec:?}");
                let shapes: Vec<Vec<usize>> =
                    param_shapes(&spec, layer).into_iter().map(|(_, s)| s).collect();
                assert_eq!(shapes, params.iter().map(|p| p.shape.clone()).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn init_depends_only_on_seed_and_layer() {
        let spec = ModelSpec::default();
        assert_eq!(init_layer(&spec, 2), init_layer(&spec, 2));
        assert_ne!(init_layer(&spec, 2), init_layer(&spec, 3));
        let other = ModelSpec { seed: spec.seed + 1, ..spec.clone() };
        assert_ne!(init_layer(&spec, 2), init_layer(&other, 2));
        // Std of the embedding close to 0.02.
        let wte = &init_layer(&spec, 0)[0].data;
        let var = wte.iter().map(|x| (*x as f64).powi(2)).sum::<f64>() / wte.len() as f64;
        assert!((var.sqrt() - INIT_STD).abs() < 0.002, "std {}", var.sqrt());
    }

    #[test]
    fn forward_shapes_and_causality() {
        let spec = ModelSpec { n_blocks: 1, ..ModelSpec::default() };
        let params: Vec<Vec<Tensor>> =
            (0..spec.num_layers()).map(|l| to_params(&init_layer(&spec, l), Device::Cpu).unwrap()).collect();
        let run = |tokens: &Tensor| {
            (0..spec.num_layers())
                .fold(tokens.shallow_clone(), |x, l| forward_layer(&spec, l, &params[l], &x))
        };
        let a: Vec<i64> = (0..spec.seq_len as i64).map(|i| i % spec.vocab as i64).collect();
        let mut b = a.clone();
        *b.last_mut().unwrap() = 5; // change only the last token
        let la = run(&Tensor::from_slice(&a).view([1, -1]));
        let lb = run(&Tensor::from_slice(&b).view([1, -1]));
        assert_eq!(la.size(), vec![1, spec.seq_len as i64, spec.vocab as i64]);
        let t = spec.seq_len as i64;
        // Earlier positions cannot see the change; the last one does.
        let early = (la.narrow(1, 0, t - 1) - lb.narrow(1, 0, t - 1)).abs().max().double_value(&[]);
        let last = (la.narrow(1, t - 1, 1) - lb.narrow(1, t - 1, 1)).abs().max().double_value(&[]);
        assert!(early < 1e-6 && last > 1e-6, "early {early} last {last}");
    }
}
