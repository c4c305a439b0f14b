//! Serving compute on a worker: one shard of the GPT (a pipeline stage's layers, one
//! tensor-parallel rank of them) that runs decode iterations for a batch of requests with a
//! per-request KV cache, and exports/imports that cache in (layers x heads) pieces so the host
//! can move requests between serving configurations (`parcae_cluster::serving`).
//!
//! - [`ServingShard`] holds its part of the weights and the KV caches of the requests it
//!   serves. [`ServingShard::forward`] runs one iteration ("iteration-level batching"): the new
//!   tokens of all sequences are packed into one `[N, d_model]` matrix, so LayerNorm, the
//!   projections and the tensor-parallel reductions are one operation for the whole batch;
//!   only attention runs per sequence, against that sequence's own cache.
//! - The tensor-parallel split is Megatron's: rank `r` of `tp` holds the q, k and v rows of its
//!   heads and the matching columns of the attention output projection, and its `4d/tp` slice
//!   of the MLP's hidden columns; each block needs two sums over the ranks ([`TpReduce`]),
//!   after attention and after the MLP. LayerNorms, the embedding and the head are replicated.
//! - [`reference_generate`] is single-process uninterrupted generation through the same code
//!   (tp = 1, pp = 1): what a distributed, reconfigured run must reproduce token for token.
//!
//! **Everything runs in f64** (weights are converted from the f32 [`TensorData`] on load).
//! Greedy tokens must be identical whatever the tp/pp split and whatever reconfigurations a
//! request went through, but a split adds partial sums in a different order than the whole
//! model does, so the logits differ in their last bits. In f64 those differences (~1e-16
//! relative) cannot flip an argmax (or a sampled token's CDF interval) in practice; in f32
//! (~1e-7) they sometimes do, and the split would change the text.
//!
//! A failed [`ServingShard::forward`] leaves every cache as it was: the whole iteration is
//! computed (and sampled) from the current caches first, and the new keys and values are
//! committed only after everything succeeded, so the host can retry the iteration elsewhere.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::mpsc;
use std::time::Duration;

use parcae_cluster::ModelSpec;
use parcae_cluster::serving::{KvPiece, MAX_TP, Sampling, SeqStep};
use tch::{Device, Kind, Tensor};

use crate::infer::sample_row;
use crate::model::{LayerKind, layer_kind, param_shapes};
use crate::rng::{STREAM_SAMPLE, SplitMix64};
use crate::tensor::TensorData;

/// LayerNorm's epsilon: the same as `model`'s (PyTorch's default).
const LN_EPS: f64 = 1e-5;

/// First bytes of an encoded KV piece.
const KV_MAGIC: [u8; 4] = *b"PKVC";
/// Version of the KV piece encoding.
const KV_VERSION: u32 = 1;
/// Magic, version, then request, layers (start, end), heads (start, end), positions and
/// head_dim as u64.
const KV_HEADER_BYTES: usize = 4 + 4 + 7 * 8;
/// The FNV-1a checksum after the payload.
const KV_TRAILER_BYTES: usize = 8;

/// Why a serving call was refused or failed. Every refusal happens before any cache changes.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The shard does not fit the model (tp, rank or layer range).
    #[error("shard {shard:?}: {reason}")]
    Shard {
        /// The shard asked for.
        shard: ShardSpec,
        /// What is wrong with it.
        reason: String,
    },
    /// A layer's parameters are not the model's (count, shape or data length).
    #[error("layer {layer}, parameter {param}: expected {expected}, found {found}")]
    Params {
        /// Model layer index.
        layer: usize,
        /// Parameter name (as in `model::param_shapes`), or "parameters" for the list itself.
        param: String,
        /// What the model needs.
        expected: String,
        /// What was given.
        found: String,
    },
    /// The iteration's input (the batch or the hidden states) does not fit this shard.
    #[error("input of layers {layers:?}: expected {expected}, found {found}")]
    Input {
        /// The shard's layers.
        layers: Range<usize>,
        /// What the shard takes.
        expected: String,
        /// What was given.
        found: String,
    },
    /// A sequence of the batch is malformed (no tokens, or listed twice).
    #[error("request {request}: {reason}")]
    Sequence {
        /// The request.
        request: u64,
        /// What is wrong.
        reason: String,
    },
    /// A token id is not in the vocabulary.
    #[error("request {request}: token {token} is outside the vocabulary 0..{vocab}")]
    Token {
        /// The request.
        request: u64,
        /// The offending id.
        token: i64,
        /// `ModelSpec::vocab`.
        vocab: usize,
    },
    /// The sequence would need a position the model has no embedding for.
    #[error("request {request}: {needed} positions needed, past the model's context: seq_len is {seq_len}")]
    ContextExceeded {
        /// The request.
        request: u64,
        /// Positions needed (cached plus new).
        needed: usize,
        /// `ModelSpec::seq_len`.
        seq_len: usize,
    },
    /// The sequence does not start where this shard's cache of the request ends.
    #[error("request {request}: starts at position {found}, but this shard has {expected} positions cached")]
    Start {
        /// The request.
        request: u64,
        /// Positions cached here (0: no cache).
        expected: usize,
        /// `SeqStep::start`.
        found: usize,
    },
    /// Sampling temperature not usable.
    #[error("request {request}: temperature {temperature} must be a finite number > 0")]
    Temperature {
        /// The request.
        request: u64,
        /// The temperature given.
        temperature: f64,
    },
    /// The request has no KV cache on this shard.
    #[error("request {request}: no KV cache on this shard")]
    UnknownRequest {
        /// The request.
        request: u64,
    },
    /// A KV piece cannot be exported from this shard.
    #[error("KV piece {piece:?}: {reason}")]
    Piece {
        /// The piece asked for.
        piece: KvPiece,
        /// Why not.
        reason: String,
    },
    /// An encoded KV piece is corrupt or not for this request.
    #[error("KV piece #{index} for request {request}: {reason}")]
    KvDecode {
        /// The request being imported.
        request: u64,
        /// The piece's index in the list given.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// The pieces do not tile this shard's (block layers x heads) exactly once, consistently.
    #[error("KV pieces for request {request}: {reason}")]
    KvTiling {
        /// The request being imported.
        request: u64,
        /// What is missing, overlapping or inconsistent.
        reason: String,
    },
    /// A tensor-parallel reduction failed (a peer left, or disagreed about the round).
    #[error("tensor-parallel reduction, round {round}: {reason}")]
    Reduce {
        /// The reduction's number within the forward call.
        round: u32,
        /// What happened.
        reason: String,
    },
    /// The prompt of [`reference_generate`] is unusable.
    #[error("prompt: {0}")]
    Prompt(String),
    /// libtorch refused an operation.
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

/// One shard of a serving configuration: a pipeline stage's contiguous `layers`, as
/// tensor-parallel rank `rank` of `tp` (`parcae_cluster::serving::ServeSlot` says which).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ShardSpec {
    /// Model layers of the stage (0 = embedding, then blocks, last = head).
    pub layers: Range<usize>,
    /// Tensor-parallel ranks of the stage, 1..=4 and dividing the heads.
    pub tp: usize,
    /// This shard's rank, `0..tp`.
    pub rank: usize,
}

impl ShardSpec {
    /// The global attention heads this rank holds: `rank*H/tp..(rank+1)*H/tp`, the same rule
    /// as `ServeShape::heads`.
    pub fn heads(&self, spec: &ModelSpec) -> Range<usize> {
        parcae_cluster::serving::ServeShape { dp: 1, tp: self.tp, pp: 1 }.heads(spec, self.rank)
    }
}

/// What one [`ServingShard::forward`] produces.
#[derive(Debug)]
pub enum StageOutput {
    /// Hidden states `[N, d_model]` (f64, on the shard's device) of all new positions, packed
    /// in batch order: the next stage's input.
    Hidden(Tensor),
    /// The last stage's answer: the next token of each sequence, `(request, token)` in batch
    /// order.
    Tokens(Vec<(u64, i64)>),
}

/// Sums a buffer over the tensor-parallel ranks of a stage: the two all-reduces per block.
///
/// `round` numbers the reductions within one forward call (0, 1, 2, ...: two per block, after
/// the attention and after the MLP), so a network implementation can key its messages. Every
/// rank must end with bit-identical sums (e.g. by adding the ranks' buffers in rank order),
/// or the ranks' hidden states would drift apart. A shard with `tp = 1` never calls it.
pub trait TpReduce {
    /// Replaces `values` by their element-wise sum over the stage's ranks.
    fn all_reduce_sum(&mut self, round: u32, values: &mut [f64]) -> Result<(), ServeError>;
}

/// The reducer for `tp = 1` shards, which never reduce: calling it (from a shard with
/// `tp > 1`, i.e. a wiring mistake) is an error rather than a silently wrong sum.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoReduce;

impl TpReduce for NoReduce {
    fn all_reduce_sum(&mut self, round: u32, _values: &mut [f64]) -> Result<(), ServeError> {
        Err(ServeError::Reduce {
            round,
            reason: "NoReduce has no peers: a shard with tp > 1 needs a real reduction".into(),
        })
    }
}

/// A buffer sent between ranks of a [`LocalTpGroup`]: the round and the rank's values.
type RoundBuffer = (u32, Vec<f64>);

/// In-process tensor parallelism: one member per rank, each used by the thread running that
/// rank's shard; members exchange their buffers over channels and each adds all of them in
/// rank order, so every rank gets the same bits. For tests and single-machine drivers.
#[derive(Debug)]
pub struct LocalTpGroup {
    rank: usize,
    /// Senders to each other rank (None at this rank's own index).
    to_peers: Vec<Option<mpsc::Sender<RoundBuffer>>>,
    /// Receivers from each other rank (None at this rank's own index).
    from_peers: Vec<Option<mpsc::Receiver<RoundBuffer>>>,
    timeout: Duration,
}

impl LocalTpGroup {
    /// The members of a group of `tp` ranks, member `r` for rank `r`. A member waits at most
    /// a minute for a peer's buffer.
    pub fn new(tp: usize) -> Vec<LocalTpGroup> {
        let mut members: Vec<LocalTpGroup> = (0..tp)
            .map(|rank| LocalTpGroup {
                rank,
                to_peers: (0..tp).map(|_| None).collect(),
                from_peers: (0..tp).map(|_| None).collect(),
                timeout: Duration::from_secs(60),
            })
            .collect();
        for from in 0..tp {
            for to in (0..tp).filter(|&to| to != from) {
                let (tx, rx) = mpsc::channel();
                members[from].to_peers[to] = Some(tx);
                members[to].from_peers[from] = Some(rx);
            }
        }
        members
    }

    /// The rank this member reduces for.
    pub fn rank(&self) -> usize {
        self.rank
    }

    fn receive(&self, peer: usize, round: u32, len: usize) -> Result<Vec<f64>, ServeError> {
        let fail = |reason: String| ServeError::Reduce { round, reason };
        let rx = self.from_peers[peer].as_ref().expect("a receiver for every other rank");
        let (their_round, values) = rx.recv_timeout(self.timeout).map_err(|e| match e {
            mpsc::RecvTimeoutError::Timeout => {
                fail(format!("rank {peer} sent nothing for {:?}", self.timeout))
            }
            mpsc::RecvTimeoutError::Disconnected => fail(format!("rank {peer} left the group")),
        })?;
        if their_round != round {
            return Err(fail(format!("rank {peer} is at round {their_round}")));
        }
        if values.len() != len {
            return Err(fail(format!("rank {peer} sent {} values, this rank has {len}", values.len())));
        }
        Ok(values)
    }
}

impl TpReduce for LocalTpGroup {
    fn all_reduce_sum(&mut self, round: u32, values: &mut [f64]) -> Result<(), ServeError> {
        for (peer, tx) in self.to_peers.iter().enumerate() {
            if let Some(tx) = tx {
                tx.send((round, values.to_vec())).map_err(|_| ServeError::Reduce {
                    round,
                    reason: format!("rank {peer} left the group"),
                })?;
            }
        }
        // ((v0 + v1) + v2) + v3, element-wise, on every rank.
        let mut sum = if self.rank == 0 { values.to_vec() } else { self.receive(0, round, values.len())? };
        for peer in 1..self.to_peers.len() {
            if peer == self.rank {
                sum.iter_mut().zip(values.iter()).for_each(|(s, v)| *s += v);
            } else {
                let theirs = self.receive(peer, round, values.len())?;
                sum.iter_mut().zip(theirs).for_each(|(s, v)| *s += v);
            }
        }
        values.copy_from_slice(&sum);
        Ok(())
    }
}

/// One block's parameters as held by one tensor-parallel rank (f64, on the shard's device).
#[derive(Debug)]
struct BlockShard {
    ln1_w: Tensor,
    ln1_b: Tensor,
    /// The q rows of the rank's heads, then their k rows, then their v rows: `[3 d/tp, d]`.
    qkv_w: Tensor,
    qkv_b: Tensor,
    /// The columns of the rank's heads: `[d, d/tp]`.
    proj_w: Tensor,
    /// Added once, after the reduction.
    proj_b: Tensor,
    ln2_w: Tensor,
    ln2_b: Tensor,
    /// The rank's slice of the MLP's hidden units: `[4d/tp, d]`.
    fc_w: Tensor,
    fc_b: Tensor,
    /// The matching columns: `[d, 4d/tp]`.
    mlp_proj_w: Tensor,
    /// Added once, after the reduction.
    mlp_proj_b: Tensor,
}

/// A layer of a shard.
#[derive(Debug)]
enum ShardLayer {
    Embedding { wte: Tensor, wpe: Tensor },
    Block(Box<BlockShard>),
    Head { ln_w: Tensor, ln_b: Tensor, head: Tensor },
}

/// The keys and values of one request on one shard.
#[derive(Debug)]
struct RequestKv {
    /// Positions cached.
    len: usize,
    /// Per block of the shard, keys and values `[local heads, len, head_dim]`.
    kv: Vec<(Tensor, Tensor)>,
}

/// What [`ServingShard::compute`] produced, not yet committed.
struct Computed {
    /// Hidden states `[N, d]`, or the logits `[batch, vocab]` of each sequence's last position
    /// when the shard holds the head.
    out: Tensor,
    /// Per sequence, per block of the shard: the full keys and values after this iteration.
    kv: Vec<Vec<(Tensor, Tensor)>>,
}

/// One forward call's batch layout and running state.
struct Pass<'a> {
    seqs: &'a [SeqStep],
    /// (first row, rows) of each sequence in the packed `[N, d]` matrix.
    rows: Vec<(i64, i64)>,
    /// Per sequence, per block done so far: the full keys and values after this iteration.
    kv: Vec<Vec<(Tensor, Tensor)>>,
    reduce: &'a mut dyn TpReduce,
    /// The next reduction's number.
    round: u32,
}

/// One shard of the model for serving: its layers' weights (split for its tensor-parallel
/// rank) and the KV caches of the requests it serves, keyed by request id.
#[derive(Debug)]
pub struct ServingShard {
    spec: ModelSpec,
    shard: ShardSpec,
    heads: Range<usize>,
    device: Device,
    layers: Vec<ShardLayer>,
    caches: BTreeMap<u64, RequestKv>,
}

impl ServingShard {
    /// Loads shard `shard` of the model: `layers[i]` holds the full f32 parameters of layer
    /// `shard.layers.start + i` in `model::param_shapes` order; this rank's part of them is
    /// converted to f64 and moved to `device`. Checks the shard against the model (tp in
    /// 1..=4 dividing the heads, rank < tp, layers inside the model) and every parameter's
    /// shape.
    pub fn new(
        spec: &ModelSpec,
        shard: ShardSpec,
        layers: &[Vec<TensorData>],
        device: Device,
    ) -> Result<Self, ServeError> {
        let fail = |reason: String| Err(ServeError::Shard { shard: shard.clone(), reason });
        if shard.tp == 0 || shard.tp > MAX_TP {
            return fail(format!("tp must be between 1 and {MAX_TP}"));
        }
        if shard.rank >= shard.tp {
            return fail(format!("rank {} is not below tp={}", shard.rank, shard.tp));
        }
        if spec.n_heads == 0 || !spec.d_model.is_multiple_of(spec.n_heads) {
            return fail(format!("d_model {} is not a multiple of n_heads {}", spec.d_model, spec.n_heads));
        }
        if !spec.n_heads.is_multiple_of(shard.tp) || !(4 * spec.d_model).is_multiple_of(shard.tp) {
            return fail(format!("tp={} does not divide the model's {} heads", shard.tp, spec.n_heads));
        }
        if shard.layers.is_empty() || shard.layers.end > spec.num_layers() {
            return fail(format!(
                "layers must be a non-empty range within the model's 0..{}",
                spec.num_layers()
            ));
        }
        if layers.len() != shard.layers.len() {
            return fail(format!("{} parameter lists given, one per layer needed", layers.len()));
        }
        for (layer, params) in shard.layers.clone().zip(layers) {
            check_params(spec, layer, params)?;
        }
        let heads = shard.heads(spec);
        let loaded = shard
            .layers
            .clone()
            .zip(layers)
            .map(|(layer, params)| load_layer(spec, &shard, &heads, layer, params, device))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ServingShard { spec: spec.clone(), shard, heads, device, layers: loaded, caches: BTreeMap::new() })
    }

    /// Which shard this is.
    pub fn shard(&self) -> &ShardSpec {
        &self.shard
    }

    /// The global attention heads this shard holds (and caches keys and values for).
    pub fn heads(&self) -> Range<usize> {
        self.heads.clone()
    }

    /// The device the weights and caches live on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Positions cached for `request` on this shard (None: no cache).
    pub fn cached_len(&self, request: u64) -> Option<usize> {
        self.caches.get(&request).map(|c| c.len)
    }

    /// The requests this shard holds a cache for, ascending.
    pub fn cached_requests(&self) -> Vec<u64> {
        self.caches.keys().copied().collect()
    }

    /// Bytes of keys and values cached for `request` on this shard (0 without a cache).
    pub fn kv_bytes(&self, request: u64) -> u64 {
        self.caches.get(&request).map_or(0, |c| {
            c.kv.iter().map(|(k, v)| ((k.numel() + v.numel()) * std::mem::size_of::<f64>()) as u64).sum()
        })
    }

    /// Drops the caches of `requests` (finished or moved away); unknown ids are ignored.
    pub fn release(&mut self, requests: &[u64]) {
        for request in requests {
            self.caches.remove(request);
        }
    }

    /// Runs one decode iteration of `seqs` through this shard's layers and appends the new
    /// keys and values to each request's cache.
    ///
    /// A sequence feeds `tokens` at positions `start..start + tokens.len()`; `start` must be
    /// the positions cached here (0 for a new request). The shard holding the embedding takes
    /// no `input` (it embeds the tokens); any other takes the previous stage's hidden states
    /// `[N, d_model]` (f64), N being all new tokens of the batch, packed in batch order. The
    /// shard holding the head returns each sequence's next token, picked from the logits of
    /// its last new position ([`Sampling::Greedy`]: argmax, ties to the lowest id;
    /// [`Sampling::Random`]: an inverse-CDF draw from `softmax(logits / temperature)` with a
    /// uniform that depends only on the seed and the position generated); any other returns
    /// hidden states. `reduce` sums over the stage's tensor-parallel ranks (not called when
    /// `tp = 1`). On error no cache has changed.
    pub fn forward(
        &mut self,
        seqs: &[SeqStep],
        input: Option<&Tensor>,
        reduce: &mut dyn TpReduce,
    ) -> Result<StageOutput, ServeError> {
        let computed = self.compute(seqs, input, reduce)?;
        let output = if self.holds_head() {
            StageOutput::Tokens(self.pick(seqs, &computed.out)?)
        } else {
            StageOutput::Hidden(computed.out)
        };
        self.commit(seqs, computed.kv);
        Ok(output)
    }

    /// Encodes the keys and values of `piece.request` for the block layers in `piece.layers`
    /// (inside this shard's layers; embedding and head layers carry no cache and add nothing)
    /// and the global heads `piece.heads` (inside this shard's heads), to send to the worker
    /// that serves that rectangle next. The encoding is self-describing (request, layers,
    /// heads, positions, head_dim), little-endian f64, with a checksum.
    pub fn export_kv(&self, piece: &KvPiece) -> Result<Vec<u8>, ServeError> {
        let fail = |reason: String| Err(ServeError::Piece { piece: piece.clone(), reason });
        let cache =
            self.caches.get(&piece.request).ok_or(ServeError::UnknownRequest { request: piece.request })?;
        let (layers, heads) = (&piece.layers, &piece.heads);
        if layers.is_empty() || layers.start < self.shard.layers.start || layers.end > self.shard.layers.end {
            return fail(format!(
                "layers must be a non-empty range within this shard's {:?}",
                self.shard.layers
            ));
        }
        if heads.is_empty() || heads.start < self.heads.start || heads.end > self.heads.end {
            return fail(format!("heads must be a non-empty range within this shard's {:?}", self.heads));
        }
        let blocks = block_layers(&self.spec, layers);
        let first_block = block_layers(&self.spec, &self.shard.layers).start;
        let hd = self.head_dim();
        let size = Self::kv_piece_bytes(&self.spec, layers.clone(), heads.clone(), cache.len);
        let mut out = Vec::with_capacity(size as usize);
        out.extend_from_slice(&KV_MAGIC);
        out.extend_from_slice(&KV_VERSION.to_le_bytes());
        let (request, positions) = (piece.request, cache.len as u64);
        let (l0, l1, h0, h1) = (layers.start as u64, layers.end as u64, heads.start as u64, heads.end as u64);
        for field in [request, l0, l1, h0, h1, positions, hd as u64] {
            out.extend_from_slice(&field.to_le_bytes());
        }
        let (h0, hn) = ((heads.start - self.heads.start) as i64, heads.len() as i64);
        let mut buf: Vec<f64> = Vec::new();
        for layer in blocks {
            let (k, v) = &cache.kv[layer - first_block];
            for t in [k, v] {
                let part = t.f_narrow(0, h0, hn)?.f_to_device(Device::Cpu)?.f_contiguous()?;
                let n = part.numel();
                buf.resize(n, 0.0);
                part.f_copy_data(&mut buf, n)?;
                for x in &buf {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
        let checksum = fnv1a64(&out);
        out.extend_from_slice(&checksum.to_le_bytes());
        Ok(out)
    }

    /// Installs the cache of `request` from `pieces` (as [`ServingShard::export_kv`] wrote
    /// them, possibly by shards of another shape): together they must cover this shard's
    /// (block layers x heads) exactly once, each inside this shard's layers and heads, all
    /// with the same number of positions. Replaces any cache the request had here; on error
    /// nothing changes. A shard without blocks still needs one piece (e.g. of its embedding
    /// or head layer): it only carries the positions.
    pub fn import_kv(&mut self, request: u64, pieces: &[Vec<u8>]) -> Result<(), ServeError> {
        let tiling = |reason: String| ServeError::KvTiling { request, reason };
        if pieces.is_empty() {
            return Err(tiling("no pieces given".into()));
        }
        let decoded = pieces
            .iter()
            .enumerate()
            .map(|(index, bytes)| decode_piece(&self.spec, request, index, bytes))
            .collect::<Result<Vec<_>, _>>()?;
        let positions = decoded[0].positions;
        for (i, p) in decoded.iter().enumerate() {
            if p.positions != positions {
                return Err(tiling(format!(
                    "piece #{i} has {} positions, piece #0 has {positions}",
                    p.positions
                )));
            }
            let (layers, heads) = (&self.shard.layers, &self.heads);
            if p.layers.start < layers.start
                || p.layers.end > layers.end
                || p.heads.start < heads.start
                || p.heads.end > heads.end
            {
                return Err(tiling(format!(
                    "piece #{i} covers layers {:?} x heads {:?}, outside this shard's layers {layers:?} x heads {heads:?}",
                    p.layers, p.heads
                )));
            }
        }
        // Which piece covers each (block, local head) cell.
        let blocks = block_layers(&self.spec, &self.shard.layers);
        let hl = self.heads.len();
        let mut owner: Vec<Option<usize>> = vec![None; blocks.len() * hl];
        for (i, p) in decoded.iter().enumerate() {
            for layer in block_layers(&self.spec, &p.layers) {
                for head in p.heads.clone() {
                    let cell = &mut owner[(layer - blocks.start) * hl + head - self.heads.start];
                    if let Some(j) = *cell {
                        return Err(tiling(format!(
                            "layer {layer}, head {head} is in both piece #{j} and #{i}"
                        )));
                    }
                    *cell = Some(i);
                }
            }
        }
        let missing: Vec<String> = owner
            .iter()
            .enumerate()
            .filter(|(_, o)| o.is_none())
            .map(|(c, _)| format!("layer {} head {}", blocks.start + c / hl, self.heads.start + c % hl))
            .collect();
        if !missing.is_empty() {
            let shown = missing.iter().take(4).cloned().collect::<Vec<_>>().join(", ");
            let more =
                if missing.len() > 4 { format!(" and {} more", missing.len() - 4) } else { String::new() };
            return Err(tiling(format!("no piece covers {shown}{more}")));
        }
        // Assemble each block's [hl, positions, hd] keys and values, heads in order.
        let hd = self.head_dim();
        let span = positions * hd; // values of one head of one tensor
        let mut kv = Vec::with_capacity(blocks.len());
        for layer in blocks.clone() {
            let mut tensors = [vec![0f64; hl * span], vec![0f64; hl * span]];
            for local in 0..hl {
                let p = &decoded[owner[(layer - blocks.start) * hl + local].expect("checked above")];
                let li = layer - block_layers(&self.spec, &p.layers).start;
                let hi = self.heads.start + local - p.heads.start;
                for (which, dst) in tensors.iter_mut().enumerate() {
                    let at = ((li * 2 + which) * p.heads.len() + hi) * span * 8;
                    let src = &p.payload[at..at + span * 8];
                    for (d, s) in dst[local * span..(local + 1) * span].iter_mut().zip(src.chunks_exact(8)) {
                        *d = f64::from_le_bytes(s.try_into().expect("8 bytes"));
                    }
                }
            }
            let shape = [hl as i64, positions as i64, hd as i64];
            let [k, v] = tensors;
            kv.push((
                Tensor::f_from_slice(&k)?.f_view(shape)?.f_to_device(self.device)?,
                Tensor::f_from_slice(&v)?.f_view(shape)?.f_to_device(self.device)?,
            ));
        }
        self.caches.insert(request, RequestKv { len: positions, kv });
        Ok(())
    }

    /// Bytes of the encoding [`ServingShard::export_kv`] writes for a piece of `layers` x
    /// `heads` with `positions` cached positions (exact), for planners weighing migrations.
    pub fn kv_piece_bytes(
        spec: &ModelSpec,
        layers: Range<usize>,
        heads: Range<usize>,
        positions: usize,
    ) -> u64 {
        let hd = (spec.d_model / spec.n_heads.max(1)) as u64;
        let payload =
            block_layers(spec, &layers).len() as u64 * heads.len() as u64 * positions as u64 * hd * 2 * 8;
        (KV_HEADER_BYTES + KV_TRAILER_BYTES) as u64 + payload
    }

    fn head_dim(&self) -> usize {
        self.spec.d_model / self.spec.n_heads
    }

    fn holds_embedding(&self) -> bool {
        matches!(self.layers.first(), Some(ShardLayer::Embedding { .. }))
    }

    fn holds_head(&self) -> bool {
        matches!(self.layers.last(), Some(ShardLayer::Head { .. }))
    }

    /// Checks the batch and the input against this shard and its caches.
    fn check_batch(&self, seqs: &[SeqStep], input: Option<&Tensor>) -> Result<(), ServeError> {
        let input_error = |expected: String, found: String| ServeError::Input {
            layers: self.shard.layers.clone(),
            expected,
            found,
        };
        if seqs.is_empty() {
            return Err(input_error("at least one sequence".into(), "an empty batch".into()));
        }
        let mut seen = BTreeSet::new();
        for seq in seqs {
            let request = seq.request;
            if !seen.insert(request) {
                return Err(ServeError::Sequence { request, reason: "appears twice in the batch".into() });
            }
            if seq.tokens.is_empty() {
                return Err(ServeError::Sequence { request, reason: "no tokens to feed".into() });
            }
            let expected = self.cached_len(request).unwrap_or(0);
            if seq.start != expected {
                return Err(ServeError::Start { request, expected, found: seq.start });
            }
            let needed = seq.start + seq.tokens.len();
            if needed > self.spec.seq_len {
                return Err(ServeError::ContextExceeded { request, needed, seq_len: self.spec.seq_len });
            }
            if let Sampling::Random { temperature, .. } = seq.sampling
                && !(temperature.is_finite() && temperature > 0.0)
            {
                return Err(ServeError::Temperature { request, temperature });
            }
            if self.holds_embedding()
                && let Some(&token) = seq.tokens.iter().find(|&&t| t < 0 || t >= self.spec.vocab as i64)
            {
                return Err(ServeError::Token { request, token, vocab: self.spec.vocab });
            }
        }
        let n: usize = seqs.iter().map(|s| s.tokens.len()).sum();
        let d = self.spec.d_model;
        match (self.holds_embedding(), input) {
            (true, None) => {}
            (true, Some(t)) => {
                return Err(input_error("no input: this shard embeds the tokens itself".into(), describe(t)));
            }
            (false, None) => {
                return Err(input_error(format!("hidden states [{n}, {d}] (f64)"), "none".into()));
            }
            (false, Some(t)) => {
                if t.size() != [n as i64, d as i64] || t.kind() != Kind::Double {
                    return Err(input_error(format!("hidden states [{n}, {d}] (f64)"), describe(t)));
                }
            }
        }
        Ok(())
    }

    /// The whole iteration from the current caches, changing nothing.
    fn compute(
        &self,
        seqs: &[SeqStep],
        input: Option<&Tensor>,
        reduce: &mut dyn TpReduce,
    ) -> Result<Computed, ServeError> {
        self.check_batch(seqs, input)?;
        let _no_grad = tch::no_grad_guard();
        let mut rows = Vec::with_capacity(seqs.len());
        let mut offset = 0i64;
        for seq in seqs {
            let t = seq.tokens.len() as i64;
            rows.push((offset, t));
            offset += t;
        }
        let kv = seqs.iter().map(|_| Vec::new()).collect();
        let mut pass = Pass { seqs, rows, kv, reduce, round: 0 };
        let mut layers = self.layers.iter();
        // check_batch: no input exactly when the shard starts with the embedding.
        let mut h = match (input, layers.as_slice().first()) {
            (Some(t), _) => t.f_to_device(self.device)?,
            (None, Some(ShardLayer::Embedding { wte, wpe })) => {
                layers.next();
                let tokens: Vec<i64> = seqs.iter().flat_map(|s| s.tokens.iter().copied()).collect();
                let positions: Vec<i64> =
                    seqs.iter().flat_map(|s| (s.start..s.start + s.tokens.len()).map(|p| p as i64)).collect();
                let tokens = Tensor::f_from_slice(&tokens)?.f_to_device(self.device)?;
                let positions = Tensor::f_from_slice(&positions)?.f_to_device(self.device)?;
                wte.f_index_select(0, &tokens)?.f_add(&wpe.f_index_select(0, &positions)?)?
            }
            (None, _) => unreachable!("check_batch requires an input without the embedding"),
        };
        let mut block = 0;
        for layer in layers {
            h = match layer {
                ShardLayer::Embedding { .. } => unreachable!("the embedding is the first layer"),
                ShardLayer::Block(b) => {
                    block += 1;
                    self.block(b, &h, block - 1, &mut pass)?
                }
                ShardLayer::Head { ln_w, ln_b, head } => {
                    let last: Vec<i64> = pass.rows.iter().map(|(o, t)| o + t - 1).collect();
                    let last = Tensor::f_from_slice(&last)?.f_to_device(self.device)?;
                    let d = self.spec.d_model as i64;
                    h.f_index_select(0, &last)?
                        .f_layer_norm([d], Some(ln_w), Some(ln_b), LN_EPS, false)?
                        .f_linear::<&Tensor>(head, None)?
                }
            };
        }
        Ok(Computed { out: h, kv: pass.kv })
    }

    /// Block `block` of the shard over the packed rows `x` `[N, d]`: attention per sequence
    /// against its cache (the full keys and values after this iteration go to `pass.kv`),
    /// everything else batched.
    fn block(
        &self,
        b: &BlockShard,
        x: &Tensor,
        block: usize,
        pass: &mut Pass<'_>,
    ) -> Result<Tensor, ServeError> {
        let d = self.spec.d_model as i64;
        let hd = self.head_dim() as i64;
        let hl = self.heads.len() as i64;
        let dl = hl * hd;
        let qkv = x
            .f_layer_norm([d], Some(&b.ln1_w), Some(&b.ln1_b), LN_EPS, false)?
            .f_linear(&b.qkv_w, Some(&b.qkv_b))?;
        let mut ys = Vec::with_capacity(pass.seqs.len());
        for (i, (seq, &(offset, t))) in pass.seqs.iter().zip(&pass.rows).enumerate() {
            let own = qkv.f_narrow(0, offset, t)?;
            // [t, dl] -> [hl, t, hd], contiguous so the cache holds no view of `qkv`.
            let part = |j: i64| {
                own.f_narrow(1, j * dl, dl)?.f_reshape([t, hl, hd])?.f_transpose(0, 1)?.f_contiguous()
            };
            let (q, k_new, v_new) = (part(0)?, part(1)?, part(2)?);
            let (k, v) = match self.caches.get(&seq.request) {
                Some(cache) => {
                    let (past_k, past_v) = &cache.kv[block];
                    (Tensor::f_cat(&[past_k, &k_new], 1)?, Tensor::f_cat(&[past_v, &v_new], 1)?)
                }
                None => (k_new, v_new),
            };
            let past = seq.start as i64;
            let scores = q.f_matmul(&k.f_transpose(1, 2)?)?.f_mul_scalar(1.0 / (hd as f64).sqrt())?;
            // New position i (absolute past + i) sees keys 0..=past + i.
            let future = Tensor::f_ones([t, past + t], (Kind::Bool, self.device))?.f_triu(1 + past)?;
            let att = scores.f_masked_fill(&future, f64::NEG_INFINITY)?.f_softmax(-1, Kind::Double)?;
            ys.push(att.f_matmul(&v)?.f_transpose(0, 1)?.f_contiguous()?.f_view([t, dl])?);
            pass.kv[i].push((k, v));
        }
        let y = Tensor::f_cat(&ys, 0)?;
        let attn = self.reduced(y.f_linear::<&Tensor>(&b.proj_w, None)?, pass)?;
        let x = x.f_add(&attn.f_add(&b.proj_b)?)?;
        let m = x
            .f_layer_norm([d], Some(&b.ln2_w), Some(&b.ln2_b), LN_EPS, false)?
            .f_linear(&b.fc_w, Some(&b.fc_b))?
            .f_gelu("none")?
            .f_linear::<&Tensor>(&b.mlp_proj_w, None)?;
        let m = self.reduced(m, pass)?;
        Ok(x.f_add(&m.f_add(&b.mlp_proj_b)?)?)
    }

    /// `partial` summed over the stage's ranks (as is when tp = 1); numbers the round.
    fn reduced(&self, partial: Tensor, pass: &mut Pass<'_>) -> Result<Tensor, ServeError> {
        let round = pass.round;
        pass.round += 1;
        if self.shard.tp == 1 {
            return Ok(partial);
        }
        let size = partial.size();
        let host = partial.f_to_device(Device::Cpu)?.f_contiguous()?;
        let n = host.numel();
        let mut values = vec![0f64; n];
        host.f_copy_data(&mut values, n)?;
        pass.reduce.all_reduce_sum(round, &mut values)?;
        Ok(Tensor::f_from_slice(&values)?.f_view(size.as_slice())?.f_to_device(self.device)?)
    }

    /// Each sequence's next token from its last position's logits `[batch, vocab]`.
    fn pick(&self, seqs: &[SeqStep], logits: &Tensor) -> Result<Vec<(u64, i64)>, ServeError> {
        let vocab = self.spec.vocab;
        let host = logits.f_to_device(Device::Cpu)?.f_contiguous()?;
        let mut values = vec![0f64; seqs.len() * vocab];
        host.f_copy_data(&mut values, seqs.len() * vocab)?;
        Ok(seqs
            .iter()
            .zip(values.chunks(vocab))
            .map(|(seq, row)| {
                let token = match seq.sampling {
                    Sampling::Greedy => argmax(row),
                    Sampling::Random { temperature, seed } => {
                        let position = (seq.start + seq.tokens.len()) as u64;
                        let u = SplitMix64::for_stream(&[seed, STREAM_SAMPLE, position]).next_f64();
                        sample_row(row, temperature, u)
                    }
                };
                (seq.request, token as i64)
            })
            .collect())
    }

    /// Installs the keys and values an iteration computed.
    fn commit(&mut self, seqs: &[SeqStep], kv: Vec<Vec<(Tensor, Tensor)>>) {
        for (seq, kv) in seqs.iter().zip(kv) {
            self.caches.insert(seq.request, RequestKv { len: seq.start + seq.tokens.len(), kv });
        }
    }
}

/// Single-process, uninterrupted generation (tp = 1, pp = 1, on the CPU) with a
/// [`ServingShard`] over all layers: prefills `prompt`, then feeds one token at a time until
/// `max_tokens` tokens are generated or the sequence (prompt plus generated tokens) fills the
/// model's context of `seq_len` positions, whichever comes first. Returns the generated
/// tokens only. What a distributed, reconfigured run of the same request must reproduce.
pub fn reference_generate(
    spec: &ModelSpec,
    params: &[Vec<TensorData>],
    prompt: &[i64],
    max_tokens: usize,
    sampling: Sampling,
) -> Result<Vec<i64>, ServeError> {
    if prompt.is_empty() {
        return Err(ServeError::Prompt("needs at least one token".into()));
    }
    if prompt.len() > spec.seq_len {
        return Err(ServeError::Prompt(format!(
            "{} tokens do not fit the model's context of {} positions",
            prompt.len(),
            spec.seq_len
        )));
    }
    let layers = 0..spec.num_layers();
    let mut shard = ServingShard::new(spec, ShardSpec { layers, tp: 1, rank: 0 }, params, Device::Cpu)?;
    let budget = max_tokens.min(spec.seq_len - prompt.len());
    let (mut out, mut tokens, mut start) = (Vec::with_capacity(budget), prompt.to_vec(), 0);
    while out.len() < budget {
        let step = SeqStep { request: 0, tokens, start, sampling };
        let StageOutput::Tokens(next) = shard.forward(std::slice::from_ref(&step), None, &mut NoReduce)?
        else {
            unreachable!("a shard over the whole model ends with the head");
        };
        start += step.tokens.len();
        out.push(next[0].1);
        tokens = vec![next[0].1];
    }
    Ok(out)
}

/// The block layers (those with a KV cache) among `layers`.
fn block_layers(spec: &ModelSpec, layers: &Range<usize>) -> Range<usize> {
    let blocks = spec.block_layers();
    let start = layers.start.max(blocks.start);
    start..layers.end.min(blocks.end).max(start)
}

fn check_params(spec: &ModelSpec, layer: usize, params: &[TensorData]) -> Result<(), ServeError> {
    let expected = param_shapes(spec, layer);
    if params.len() != expected.len() {
        let names: Vec<&str> = expected.iter().map(|(name, _)| *name).collect();
        return Err(ServeError::Params {
            layer,
            param: "parameters".into(),
            expected: format!("{} ({})", expected.len(), names.join(", ")),
            found: format!("{}", params.len()),
        });
    }
    for (t, (name, shape)) in params.iter().zip(&expected) {
        if &t.shape != shape {
            return Err(ServeError::Params {
                layer,
                param: (*name).into(),
                expected: format!("shape {shape:?}"),
                found: format!("shape {:?}", t.shape),
            });
        }
        let n: usize = shape.iter().product();
        if t.data.len() != n {
            return Err(ServeError::Params {
                layer,
                param: (*name).into(),
                expected: format!("{n} elements"),
                found: format!("{} elements", t.data.len()),
            });
        }
    }
    Ok(())
}

/// This rank's part of one layer's (checked) parameters, in f64 on `device`.
fn load_layer(
    spec: &ModelSpec,
    shard: &ShardSpec,
    heads: &Range<usize>,
    layer: usize,
    params: &[TensorData],
    device: Device,
) -> Result<ShardLayer, ServeError> {
    let full = |i: usize| -> Result<Tensor, ServeError> {
        let shape: Vec<i64> = params[i].shape.iter().map(|&d| d as i64).collect();
        Ok(Tensor::f_from_slice(&params[i].data)?.f_reshape(shape)?)
    };
    // Converting the kind copies, so a slice keeps nothing of the full f32 tensor alive.
    let finish = |t: Tensor| -> Result<Tensor, ServeError> {
        Ok(t.f_to_kind(Kind::Double)?.f_contiguous()?.f_to_device(device)?)
    };
    let whole = |i: usize| finish(full(i)?);
    Ok(match layer_kind(spec, layer) {
        LayerKind::Embedding => ShardLayer::Embedding { wte: whole(0)?, wpe: whole(1)? },
        LayerKind::Head => ShardLayer::Head { ln_w: whole(0)?, ln_b: whole(1)?, head: whole(2)? },
        LayerKind::Block => {
            let d = spec.d_model as i64;
            let hd = (spec.d_model / spec.n_heads) as i64;
            let (h0, dl) = (heads.start as i64 * hd, heads.len() as i64 * hd);
            let m = 4 * d / shard.tp as i64;
            let m0 = shard.rank as i64 * m;
            // q, k, v rows of this rank's heads, in that order.
            let qkv = |t: Tensor| -> Result<Tensor, ServeError> {
                let parts =
                    [t.f_narrow(0, h0, dl)?, t.f_narrow(0, d + h0, dl)?, t.f_narrow(0, 2 * d + h0, dl)?];
                finish(Tensor::f_cat(&parts, 0)?)
            };
            ShardLayer::Block(Box::new(BlockShard {
                ln1_w: whole(0)?,
                ln1_b: whole(1)?,
                qkv_w: qkv(full(2)?)?,
                qkv_b: qkv(full(3)?)?,
                proj_w: finish(full(4)?.f_narrow(1, h0, dl)?)?,
                proj_b: whole(5)?,
                ln2_w: whole(6)?,
                ln2_b: whole(7)?,
                fc_w: finish(full(8)?.f_narrow(0, m0, m)?)?,
                fc_b: finish(full(9)?.f_narrow(0, m0, m)?)?,
                mlp_proj_w: finish(full(10)?.f_narrow(1, m0, m)?)?,
                mlp_proj_b: whole(11)?,
            }))
        }
    })
}

/// A KV piece's header, checked, and its payload.
struct DecodedPiece<'a> {
    layers: Range<usize>,
    heads: Range<usize>,
    positions: usize,
    /// Per block layer of `layers`: keys then values, `[heads, positions, head_dim]` each.
    payload: &'a [u8],
}

fn decode_piece<'a>(
    spec: &ModelSpec,
    request: u64,
    index: usize,
    bytes: &'a [u8],
) -> Result<DecodedPiece<'a>, ServeError> {
    let fail = |reason: String| Err(ServeError::KvDecode { request, index, reason });
    let min = KV_HEADER_BYTES + KV_TRAILER_BYTES;
    if bytes.len() < min {
        return fail(format!("truncated: {} bytes, a piece has at least {min}", bytes.len()));
    }
    let (body, trailer) = bytes.split_at(bytes.len() - KV_TRAILER_BYTES);
    let stored = u64::from_le_bytes(trailer.try_into().expect("8 bytes"));
    if fnv1a64(body) != stored {
        return fail("checksum mismatch: the piece was corrupted or truncated".into());
    }
    if body[..4] != KV_MAGIC {
        return fail("not a KV piece (bad magic)".into());
    }
    let version = u32::from_le_bytes(body[4..8].try_into().expect("4 bytes"));
    if version != KV_VERSION {
        return fail(format!("encoding version {version}, this worker reads {KV_VERSION}"));
    }
    let field = |i: usize| u64::from_le_bytes(body[8 + 8 * i..16 + 8 * i].try_into().expect("8 bytes"));
    let small = |i: usize| usize::try_from(field(i)).unwrap_or(usize::MAX);
    let (layers, heads) = (small(1)..small(2), small(3)..small(4));
    let (positions, head_dim) = (small(5), small(6));
    if field(0) != request {
        return fail(format!("carries request {}", field(0)));
    }
    if layers.is_empty() || layers.end > spec.num_layers() {
        return fail(format!("layers {layers:?} are not a non-empty range within 0..{}", spec.num_layers()));
    }
    if heads.is_empty() || heads.end > spec.n_heads {
        return fail(format!("heads {heads:?} are not a non-empty range within 0..{}", spec.n_heads));
    }
    if head_dim != spec.d_model / spec.n_heads {
        return fail(format!("head_dim {head_dim}, the model's is {}", spec.d_model / spec.n_heads));
    }
    if positions > spec.seq_len {
        return fail(format!("{positions} positions, past the model's seq_len {}", spec.seq_len));
    }
    let expected = ServingShard::kv_piece_bytes(spec, layers.clone(), heads.clone(), positions);
    if bytes.len() as u64 != expected {
        return fail(format!("{} bytes, its header describes {expected}", bytes.len()));
    }
    Ok(DecodedPiece { layers, heads, positions, payload: &body[KV_HEADER_BYTES..] })
}

/// FNV-1a, 64 bits: detects corruption of a KV piece (not an adversary).
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The index of the largest value, the lowest on ties.
fn argmax(row: &[f64]) -> usize {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best
}

fn describe(t: &Tensor) -> String {
    format!("{:?} {:?}", t.size(), t.kind())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infer;
    use crate::model::init_layer;

    /// The default model with its matrices scaled up (as `infer`'s tests do): attention far
    /// from uniform and logits spread, so generation does not just repeat one token and a
    /// wrong split, mask or cache entry changes the tokens. The blocks' biases get a little
    /// noise (they start at 0), so a bias added on every rank or a wrong slice of one changes
    /// the tokens too.
    fn sharp_params(spec: &ModelSpec) -> Vec<Vec<TensorData>> {
        let mut rng = SplitMix64::new(77);
        (0..spec.num_layers())
            .map(|layer| {
                let names = param_shapes(spec, layer);
                init_layer(spec, layer)
                    .into_iter()
                    .zip(names)
                    .map(|(mut t, (name, _))| {
                        if t.shape.len() == 2 {
                            t.data.iter_mut().for_each(|x| *x *= 8.0);
                        } else if name.ends_with(".bias") && layer_kind(spec, layer) == LayerKind::Block {
                            t.data.iter_mut().for_each(|x| *x += (0.02 * rng.normal()) as f32);
                        }
                        t
                    })
                    .collect()
            })
            .collect()
    }

    fn prompt(spec: &ModelSpec, len: usize, seed: u64) -> Vec<i64> {
        let mut rng = SplitMix64::new(seed);
        (0..len).map(|_| rng.below(spec.vocab as u64) as i64).collect()
    }

    /// A serving replica: `stages[s][r]` is stage s, tensor-parallel rank r.
    struct Replica {
        stages: Vec<Vec<ServingShard>>,
    }

    impl Replica {
        fn new(spec: &ModelSpec, params: &[Vec<TensorData>], tp: usize, pp: usize) -> Self {
            Self::with_stages(spec, params, tp, spec.balanced_partition(pp).unwrap())
        }

        fn with_stages(
            spec: &ModelSpec,
            params: &[Vec<TensorData>],
            tp: usize,
            stages: Vec<Range<usize>>,
        ) -> Self {
            let stages = stages
                .into_iter()
                .map(|layers| {
                    (0..tp)
                        .map(|rank| {
                            let shard = ShardSpec { layers: layers.clone(), tp, rank };
                            ServingShard::new(spec, shard, &params[layers.clone()], Device::Cpu).unwrap()
                        })
                        .collect()
                })
                .collect();
            Replica { stages }
        }

        /// One iteration through every stage; the ranks of a stage must agree bit for bit.
        fn step(&mut self, seqs: &[SeqStep]) -> Result<Vec<(u64, i64)>, ServeError> {
            let mut input: Option<Tensor> = None;
            for stage in &mut self.stages {
                let mut outs =
                    run_stage(stage, seqs, input.as_ref()).into_iter().collect::<Result<Vec<_>, _>>()?;
                for other in &outs[1..] {
                    match (&outs[0], other) {
                        (StageOutput::Hidden(a), StageOutput::Hidden(b)) => {
                            assert!(a.equal(b), "ranks disagree")
                        }
                        (StageOutput::Tokens(a), StageOutput::Tokens(b)) => {
                            assert_eq!(a, b, "ranks disagree")
                        }
                        _ => panic!("ranks returned different kinds of output"),
                    }
                }
                match outs.swap_remove(0) {
                    StageOutput::Hidden(h) => input = Some(h),
                    StageOutput::Tokens(tokens) => return Ok(tokens),
                }
            }
            panic!("no stage produced tokens");
        }

        fn shards(&self) -> impl Iterator<Item = &ServingShard> {
            self.stages.iter().flatten()
        }

        fn release(&mut self, requests: &[u64]) {
            self.stages.iter_mut().flatten().for_each(|s| s.release(requests));
        }
    }

    /// Runs the ranks of one stage on threads, reducing over a [`LocalTpGroup`].
    fn run_stage(
        shards: &mut [ServingShard],
        seqs: &[SeqStep],
        input: Option<&Tensor>,
    ) -> Vec<Result<StageOutput, ServeError>> {
        if shards.len() == 1 {
            return vec![shards[0].forward(seqs, input, &mut NoReduce)];
        }
        let group = LocalTpGroup::new(shards.len());
        std::thread::scope(|s| {
            let handles: Vec<_> = shards
                .iter_mut()
                .zip(group)
                .map(|(shard, mut member)| {
                    let input = input.map(Tensor::shallow_clone);
                    s.spawn(move || shard.forward(seqs, input.as_ref(), &mut member))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    /// A request as the host tracks it.
    #[derive(Debug, Clone)]
    struct Req {
        id: u64,
        prompt: Vec<i64>,
        sampling: Sampling,
        out: Vec<i64>,
        cached: usize,
    }

    impl Req {
        fn new(id: u64, prompt: Vec<i64>, sampling: Sampling) -> Self {
            Req { id, prompt, sampling, out: Vec::new(), cached: 0 }
        }

        fn step(&self) -> SeqStep {
            let tokens = if self.cached == 0 { self.prompt.clone() } else { vec![*self.out.last().unwrap()] };
            SeqStep { request: self.id, tokens, start: self.cached, sampling: self.sampling }
        }

        fn reference(&self, spec: &ModelSpec, params: &[Vec<TensorData>], n: usize) -> Vec<i64> {
            reference_generate(spec, params, &self.prompt, n, self.sampling).unwrap()
        }
    }

    /// One iteration of `reqs` together.
    fn iterate(replica: &mut Replica, reqs: &mut [&mut Req]) {
        let steps: Vec<SeqStep> = reqs.iter().map(|r| r.step()).collect();
        let tokens = replica.step(&steps).unwrap();
        assert_eq!(tokens.len(), reqs.len());
        for ((req, step), (id, token)) in reqs.iter_mut().zip(&steps).zip(tokens) {
            assert_eq!(req.id, id);
            req.cached += step.tokens.len();
            req.out.push(token);
        }
    }

    fn iterate_all(replica: &mut Replica, reqs: &mut [Req]) {
        iterate(replica, &mut reqs.iter_mut().collect::<Vec<_>>());
    }

    fn three_requests(spec: &ModelSpec, sampling: [Sampling; 3]) -> Vec<Req> {
        [3, 7, 5]
            .into_iter()
            .zip(sampling)
            .enumerate()
            .map(|(i, (len, s))| Req::new(100 + i as u64, prompt(spec, len, 40 + i as u64), s))
            .collect()
    }

    const GREEDY: [Sampling; 3] = [Sampling::Greedy; 3];
    const RANDOM: [Sampling; 3] = [
        Sampling::Random { temperature: 1.0, seed: 7 },
        Sampling::Random { temperature: 2.0, seed: 8 },
        Sampling::Random { temperature: 0.7, seed: 9 },
    ];

    #[test]
    fn reference_matches_the_f32_single_process_inference() {
        let spec = ModelSpec::default();
        let params = sharp_params(&spec);
        let f32_params: Vec<Vec<Tensor>> = params
            .iter()
            .map(|layer| layer.iter().map(|t| t.to_tensor(Device::Cpu).unwrap()).collect())
            .collect();
        for (len, seed) in [(1, 1), (4, 2), (9, 3)] {
            let prompt = prompt(&spec, len, seed);
            let new = 12;
            let ours = reference_generate(&spec, &params, &prompt, new, Sampling::Greedy).unwrap();
            let theirs =
                infer::generate_greedy(&spec, &f32_params, &Tensor::from_slice(&prompt).view([1, -1]), new)
                    .unwrap();
            let theirs: Vec<i64> = Vec::try_from(theirs.flatten(0, -1)).unwrap();
            assert_eq!(ours, theirs[len..], "prompt {prompt:?}");

            // The logits of every step agree with infer's f32 ones (fed the same tokens).
            let mut shard = ServingShard::new(
                &spec,
                ShardSpec { layers: 0..spec.num_layers(), tp: 1, rank: 0 },
                &params,
                Device::Cpu,
            )
            .unwrap();
            let (mut expected, mut cache) =
                infer::prefill(&spec, &f32_params, &Tensor::from_slice(&prompt).view([1, -1])).unwrap();
            let mut step =
                SeqStep { request: 1, tokens: prompt.clone(), start: 0, sampling: Sampling::Greedy };
            for (i, &token) in ours.iter().enumerate() {
                let computed = shard.compute(std::slice::from_ref(&step), None, &mut NoReduce).unwrap();
                let diff = (computed.out.to_kind(Kind::Float) - &expected).abs().max().double_value(&[]);
                assert!(diff < 1e-4, "prompt {prompt:?}, step {i}: logits differ by {diff}");
                shard.commit(std::slice::from_ref(&step), computed.kv);
                step = SeqStep {
                    request: 1,
                    tokens: vec![token],
                    start: step.start + step.tokens.len(),
                    ..step
                };
                expected = infer::decode_step(&spec, &f32_params, &mut cache, &Tensor::from_slice(&[token]))
                    .unwrap();
            }
        }
    }

    #[test]
    fn reference_generation_stops_at_the_context() {
        let spec = ModelSpec::default();
        let params = sharp_params(&spec);
        let n = spec.seq_len;
        let out = reference_generate(&spec, &params, &prompt(&spec, n - 4, 1), 10, Sampling::Greedy).unwrap();
        assert_eq!(out.len(), 4, "prompt + generated tokens fill seq_len positions, no more");
        let long = reference_generate(&spec, &params, &prompt(&spec, n - 4, 1), 2, Sampling::Greedy).unwrap();
        assert_eq!(long, out[..2]);
        assert!(
            reference_generate(&spec, &params, &prompt(&spec, n, 1), 3, Sampling::Greedy).unwrap().is_empty()
        );
        for bad in [vec![], prompt(&spec, n + 1, 1)] {
            let err = reference_generate(&spec, &params, &bad, 3, Sampling::Greedy).unwrap_err();
            assert!(matches!(err, ServeError::Prompt(_)), "{err}");
        }
        let err =
            reference_generate(&spec, &params, &[1, 2], 3, Sampling::Random { temperature: 0.0, seed: 1 })
                .unwrap_err();
        assert!(matches!(err, ServeError::Temperature { temperature: 0.0, .. }), "{err}");
    }

    #[test]
    fn every_split_generates_the_reference_tokens() {
        let spec = ModelSpec::default();
        let params = sharp_params(&spec);
        let iterations = 11; // prefill + 10 decodes
        for sampling in [GREEDY, RANDOM] {
            let reqs = three_requests(&spec, sampling);
            let reference: Vec<Vec<i64>> =
                reqs.iter().map(|r| r.reference(&spec, &params, iterations)).collect();
            // The model is sharp but not degenerate: the requests do not just repeat a token.
            for out in &reference {
                assert!(out.iter().collect::<BTreeSet<_>>().len() > 2, "{reference:?}");
            }
            // Balanced splits, and stages holding only the embedding or only the head.
            let mut splits: Vec<Vec<Range<usize>>> =
                (1..=3).map(|pp| spec.balanced_partition(pp).unwrap()).collect();
            splits.push(vec![0..1, 1..7, 7..8]);
            for tp in [1, 2, 4] {
                for stages in &splits {
                    let mut replica = Replica::with_stages(&spec, &params, tp, stages.clone());
                    let mut reqs = reqs.clone();
                    for _ in 0..iterations {
                        iterate_all(&mut replica, &mut reqs);
                    }
                    for (req, expected) in reqs.iter().zip(&reference) {
                        assert_eq!(&req.out, expected, "tp {tp} stages {stages:?}, {:?}", req.sampling);
                    }
                    // Every shard caches each request's positions, its blocks' keys and
                    // values for its heads: together K and V of every block for every head.
                    let positions = 7 + iterations - 1;
                    let per_position = (spec.n_blocks * spec.d_model * 2 * 8) as u64;
                    let bytes: u64 = replica.shards().map(|s| s.kv_bytes(101)).sum();
                    assert_eq!(bytes, per_position * positions as u64);
                    assert!(replica.shards().all(|s| s.cached_len(101) == Some(positions)));
                }
            }
        }
        // Sampling at these temperatures is not just greedy.
        let greedy: Vec<Vec<i64>> =
            three_requests(&spec, GREEDY).iter().map(|r| r.reference(&spec, &params, iterations)).collect();
        let random: Vec<Vec<i64>> =
            three_requests(&spec, RANDOM).iter().map(|r| r.reference(&spec, &params, iterations)).collect();
        assert_ne!(greedy, random);
    }

    #[test]
    fn batching_and_joining_mid_way_do_not_change_tokens() {
        let spec = ModelSpec::default();
        let params = sharp_params(&spec);
        let mixed = [Sampling::Greedy, RANDOM[0], Sampling::Greedy];
        let reqs = three_requests(&spec, mixed);
        let reference: Vec<Vec<i64>> = reqs.iter().map(|r| r.reference(&spec, &params, 12)).collect();

        // One at a time, each request alone in its iterations.
        let mut replica = Replica::new(&spec, &params, 2, 2);
        let mut alone = reqs.clone();
        for req in &mut alone {
            for _ in 0..8 {
                iterate(&mut replica, &mut [req]);
            }
        }
        // All together.
        let mut replica = Replica::new(&spec, &params, 2, 2);
        let mut together = reqs.clone();
        for _ in 0..8 {
            iterate_all(&mut replica, &mut together);
        }
        for ((a, b), expected) in alone.iter().zip(&together).zip(&reference) {
            assert_eq!(a.out, b.out);
            assert_eq!(a.out, expected[..8]);
        }

        // Joining mid-way: A decodes alone, B's prefill joins A's decode, then C's joins
        // both; A finishes and is released while B and C go on.
        let mut replica = Replica::new(&spec, &params, 2, 3);
        let [mut a, mut b, mut c] = <[Req; 3]>::try_from(reqs.clone()).unwrap();
        for _ in 0..3 {
            iterate(&mut replica, &mut [&mut a]);
        }
        for _ in 0..3 {
            iterate(&mut replica, &mut [&mut a, &mut b]);
        }
        for _ in 0..3 {
            iterate(&mut replica, &mut [&mut c, &mut a, &mut b]);
        }
        replica.release(&[a.id]);
        assert!(replica.shards().all(|s| s.cached_requests() == vec![b.id, c.id]));
        for _ in 0..3 {
            iterate(&mut replica, &mut [&mut b, &mut c]);
        }
        assert_eq!(a.out, reference[0][..9]);
        assert_eq!(b.out, reference[1][..9]);
        assert_eq!(c.out, reference[2][..6]);
    }

    /// Moves every request of `old` into `new`: for each new shard, the pieces of each old
    /// shard cut along the intersection of their (layers x heads) rectangles.
    fn migrate(spec: &ModelSpec, old: &Replica, new: &mut Replica, requests: &[u64]) {
        for shard in new.stages.iter_mut().flatten() {
            let (layers, heads) = (shard.shard().layers.clone(), shard.heads());
            for &request in requests {
                let mut pieces = Vec::new();
                for from in old.shards() {
                    let l =
                        layers.start.max(from.shard().layers.start)..layers.end.min(from.shard().layers.end);
                    let h = heads.start.max(from.heads().start)..heads.end.min(from.heads().end);
                    if l.is_empty() || h.is_empty() {
                        continue;
                    }
                    let piece = KvPiece { request, layers: l.clone(), heads: h.clone() };
                    let bytes = from.export_kv(&piece).unwrap();
                    let positions = from.cached_len(request).unwrap();
                    assert_eq!(bytes.len() as u64, ServingShard::kv_piece_bytes(spec, l, h, positions));
                    pieces.push(bytes);
                }
                shard.import_kv(request, &pieces).unwrap();
            }
        }
    }

    #[test]
    fn kv_migrates_between_shapes() {
        let spec = ModelSpec::default();
        let params = sharp_params(&spec);
        let reqs = three_requests(&spec, [Sampling::Greedy, RANDOM[1], Sampling::Greedy]);
        let reference: Vec<Vec<i64>> = reqs.iter().map(|r| r.reference(&spec, &params, 12)).collect();
        let ids: Vec<u64> = reqs.iter().map(|r| r.id).collect();
        let mut old = Replica::new(&spec, &params, 2, 2);
        let mut before = reqs.clone();
        for _ in 0..5 {
            iterate_all(&mut old, &mut before);
        }
        let targets = [
            (4, spec.balanced_partition(1).unwrap()),
            (1, spec.balanced_partition(3).unwrap()),
            (2, spec.balanced_partition(2).unwrap()),
            // Stages without blocks get pieces that only carry the positions.
            (4, vec![0..1, 1..3, 3..7, 7..8]),
        ];
        for (tp, stages) in targets {
            let mut new = Replica::with_stages(&spec, &params, tp, stages.clone());
            migrate(&spec, &old, &mut new, &ids);
            for &id in &ids {
                let old_bytes: u64 = old.shards().map(|s| s.kv_bytes(id)).sum();
                assert_eq!(new.shards().map(|s| s.kv_bytes(id)).sum::<u64>(), old_bytes);
                assert!(
                    new.shards().all(|s| s.cached_len(id) == old.shards().next().unwrap().cached_len(id))
                );
            }
            let mut after = before.clone();
            for _ in 0..7 {
                iterate_all(&mut new, &mut after);
            }
            for (req, expected) in after.iter().zip(&reference) {
                assert_eq!(&req.out, expected, "after moving from tp 2 pp 2 to tp {tp} stages {stages:?}");
            }
        }
    }

    #[test]
    fn bad_kv_pieces_are_refused() {
        let spec = ModelSpec::default();
        let params = sharp_params(&spec);
        let mut old = Replica::new(&spec, &params, 2, 2);
        let mut reqs = three_requests(&spec, GREEDY);
        for _ in 0..3 {
            iterate_all(&mut old, &mut reqs);
        }
        let request = reqs[0].id;
        // Into a tp=1 shard of layers 0..4 (old stage 0): the two old ranks' halves.
        let layers = old.stages[0][0].shard().layers.clone();
        let export = |rank: usize, heads: Range<usize>| {
            old.stages[0][rank].export_kv(&KvPiece { request, layers: layers.clone(), heads }).unwrap()
        };
        let (left, right) = (export(0, 0..2), export(1, 2..4));
        let mut target = ServingShard::new(
            &spec,
            ShardSpec { layers: layers.clone(), tp: 1, rank: 0 },
            &params[layers.clone()],
            Device::Cpu,
        )
        .unwrap();
        let good = [left.clone(), right.clone()];
        target.import_kv(request, &good).unwrap();
        let installed = target.export_kv(&KvPiece { request, layers: layers.clone(), heads: 0..4 }).unwrap();
        let check = |target: &mut ServingShard, pieces: &[Vec<u8>], needle: &str| {
            let err = target.import_kv(request, pieces).unwrap_err();
            assert!(err.to_string().contains(needle), "expected '{needle}' in: {err}");
            // A refused import leaves the cache as it was.
            let now = target.export_kv(&KvPiece { request, layers: layers.clone(), heads: 0..4 }).unwrap();
            assert_eq!(now, installed);
        };
        let mut corrupt = left.clone();
        let at = corrupt.len() / 2;
        corrupt[at] ^= 0x10;
        check(&mut target, &[corrupt, right.clone()], "checksum");
        let mut header = left.clone();
        header[9] ^= 1; // the request id
        check(&mut target, &[header, right.clone()], "checksum");
        check(&mut target, &[left[..left.len() - 3].to_vec(), right.clone()], "checksum");
        check(&mut target, &[left[..20].to_vec(), right.clone()], "truncated");
        check(&mut target, std::slice::from_ref(&left), "no piece covers layer 1 head 2");
        check(&mut target, &[left.clone(), right.clone(), right.clone()], "in both piece #1 and #2");
        check(&mut target, &[], "no pieces");
        // Another request's piece.
        let other =
            old.stages[0][0].export_kv(&KvPiece { request: reqs[1].id, layers: 0..4, heads: 0..2 }).unwrap();
        check(&mut target, &[other, right.clone()], &format!("carries request {}", reqs[1].id));
        // A piece outside the importing shard.
        let stage1 = old.stages[1][0].export_kv(&KvPiece { request, layers: 4..6, heads: 0..2 }).unwrap();
        check(&mut target, &[left.clone(), right.clone(), stage1], "outside this shard");
        // Pieces of different ages.
        iterate_all(&mut old, &mut reqs);
        let newer = old.stages[0][1].export_kv(&KvPiece { request, layers: 0..4, heads: 2..4 }).unwrap();
        check(&mut target, &[left.clone(), newer], "piece #1 has 6 positions, piece #0 has 5");

        // Export refuses what the shard does not hold.
        let shard = &old.stages[0][1];
        for piece in [
            KvPiece { request, layers: 0..5, heads: 2..4 },
            KvPiece { request, layers: 0..4, heads: 1..3 },
            KvPiece { request, layers: 2..2, heads: 2..4 },
        ] {
            assert!(matches!(shard.export_kv(&piece), Err(ServeError::Piece { .. })), "{piece:?}");
        }
        let unknown = KvPiece { request: 999, layers: 0..4, heads: 2..4 };
        assert!(matches!(shard.export_kv(&unknown), Err(ServeError::UnknownRequest { request: 999 })));
    }

    /// Fails the reduction of one round (after some of the iteration has run).
    struct FailAt(u32);

    impl TpReduce for FailAt {
        fn all_reduce_sum(&mut self, round: u32, _values: &mut [f64]) -> Result<(), ServeError> {
            if round == self.0 {
                return Err(ServeError::Reduce { round, reason: "peer lost".into() });
            }
            Ok(())
        }
    }

    #[test]
    fn a_failed_iteration_leaves_the_caches_unchanged() {
        let spec = ModelSpec::default();
        let params = sharp_params(&spec);
        let reqs = three_requests(&spec, GREEDY);
        let reference: Vec<Vec<i64>> = reqs.iter().map(|r| r.reference(&spec, &params, 6)).collect();
        let mut replica = Replica::new(&spec, &params, 2, 1);
        let mut first = vec![reqs[0].clone(), reqs[1].clone()];
        for _ in 0..2 {
            iterate_all(&mut replica, &mut first);
        }
        let snapshot = |replica: &Replica| -> Vec<Vec<u8>> {
            replica
                .shards()
                .flat_map(|s| {
                    first.iter().map(|r| {
                        s.export_kv(&KvPiece {
                            request: r.id,
                            layers: s.shard().layers.clone(),
                            heads: s.heads(),
                        })
                        .unwrap()
                    })
                })
                .collect()
        };
        let before = snapshot(&replica);
        let mut steps: Vec<SeqStep> = first.iter().map(Req::step).collect();
        steps.push(reqs[2].step()); // a new request joining

        // A reduction failing mid-way (block 2's attention) on one rank.
        let err = replica.stages[0][0].forward(&steps, None, &mut FailAt(4)).unwrap_err();
        assert!(matches!(err, ServeError::Reduce { round: 4, .. }), "{err}");
        // A sequence refused after others were checked.
        let mut bad = steps.clone();
        bad[2].tokens[1] = spec.vocab as i64;
        let err = replica.step(&bad).unwrap_err();
        assert!(matches!(err, ServeError::Token { request: 102, token: 64, vocab: 64 }), "{err}");
        // A wrong start.
        let mut bad = steps.clone();
        bad[1].start -= 1;
        let err = replica.step(&bad).unwrap_err();
        let expected = first[1].cached;
        assert!(
            matches!(err, ServeError::Start { request: 101, expected: e, found } if e == expected && found == e - 1),
            "{err}"
        );
        assert!(err.to_string().contains("request 101"), "{err}");
        let mut bad = steps.clone();
        bad[2].start = 3;
        assert!(matches!(replica.step(&bad), Err(ServeError::Start { request: 102, expected: 0, found: 3 })));

        assert_eq!(snapshot(&replica), before, "caches changed by failed iterations");
        assert!(replica.shards().all(|s| s.cached_requests() == vec![100, 101]));
        // The retried iteration goes on as if nothing happened.
        let mut all = vec![first[0].clone(), first[1].clone(), reqs[2].clone()];
        for _ in 0..4 {
            iterate_all(&mut replica, &mut all);
        }
        assert_eq!(all[0].out, reference[0]);
        assert_eq!(all[1].out, reference[1]);
        assert_eq!(all[2].out, reference[2][..4]);
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let spec = ModelSpec::default();
        let params = sharp_params(&spec);
        let mut replica = Replica::new(&spec, &params, 1, 2);
        let step = |request: u64, tokens: Vec<i64>, start: usize| SeqStep {
            request,
            tokens,
            start,
            sampling: Sampling::Greedy,
        };
        let [first, second] = &mut replica.stages[..] else { panic!("two stages") };
        let (first, second) = (&mut first[0], &mut second[0]);
        let forward = |shard: &mut ServingShard, seqs: &[SeqStep], input: Option<&Tensor>| {
            shard.forward(seqs, input, &mut NoReduce).unwrap_err()
        };
        let err = forward(first, &[step(1, vec![1, -1], 0)], None);
        assert!(matches!(err, ServeError::Token { request: 1, token: -1, .. }), "{err}");
        let err = forward(first, &[step(1, vec![3; spec.seq_len + 1], 0)], None);
        assert!(matches!(err, ServeError::ContextExceeded { request: 1, needed: 33, seq_len: 32 }), "{err}");
        assert!(matches!(forward(first, &[], None), ServeError::Input { .. }));
        assert!(matches!(
            forward(first, &[step(1, vec![], 0)], None),
            ServeError::Sequence { request: 1, .. }
        ));
        let twice = [step(1, vec![2], 0), step(1, vec![3], 0)];
        assert!(matches!(forward(first, &twice, None), ServeError::Sequence { request: 1, .. }));
        let hot =
            SeqStep { sampling: Sampling::Random { temperature: f64::NAN, seed: 1 }, ..step(1, vec![1], 0) };
        assert!(matches!(forward(first, &[hot], None), ServeError::Temperature { request: 1, .. }));
        let hidden = Tensor::zeros([2, spec.d_model as i64], (Kind::Double, Device::Cpu));
        assert!(matches!(forward(first, &[step(1, vec![1, 2], 0)], Some(&hidden)), ServeError::Input { .. }));

        // The second stage takes hidden states [N, d] f64.
        let seqs = [step(1, vec![1, 2], 0), step(2, vec![5], 0)];
        let StageOutput::Hidden(h) = first.forward(&seqs, None, &mut NoReduce).unwrap() else { panic!() };
        assert_eq!(h.size(), [3, spec.d_model as i64]);
        for bad in [
            None,
            Some(h.narrow(0, 0, 2)),
            Some(h.narrow(1, 0, 10)),
            Some(h.to_kind(Kind::Float)),
            Some(h.view([3, 1, -1])),
        ] {
            let err = forward(second, &seqs, bad.as_ref());
            assert!(matches!(err, ServeError::Input { .. }), "{err}");
            assert!(err.to_string().contains("[3, 64] (f64)"), "{err}");
        }
        let StageOutput::Tokens(tokens) = second.forward(&seqs, Some(&h), &mut NoReduce).unwrap() else {
            panic!()
        };
        assert_eq!(tokens.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 2]);
        // Running the request up to the end of the context, then one past it.
        let err = forward(first, &[step(1, vec![4; spec.seq_len - 1], 2)], None);
        assert!(matches!(err, ServeError::ContextExceeded { request: 1, needed: 33, .. }), "{err}");
        assert_eq!(first.cached_len(1), Some(2));
    }

    #[test]
    fn shards_are_checked_on_load() {
        let spec = ModelSpec::default();
        let params = sharp_params(&spec);
        let new = |layers: Range<usize>, tp: usize, rank: usize, params: &[Vec<TensorData>]| {
            ServingShard::new(&spec, ShardSpec { layers, tp, rank }, params, Device::Cpu)
        };
        for (tp, rank) in [(3, 0), (2, 2), (8, 0), (0, 0)] {
            let err = new(0..2, tp, rank, &params[0..2]).unwrap_err();
            assert!(matches!(err, ServeError::Shard { .. }), "tp {tp} rank {rank}: {err}");
        }
        for layers in [3..3, 7..9] {
            let err = new(layers.clone(), 1, 0, &params[0..2]).unwrap_err();
            assert!(matches!(err, ServeError::Shard { .. }), "{layers:?}: {err}");
        }
        let err = new(0..3, 1, 0, &params[0..2]).unwrap_err();
        assert!(err.to_string().contains("2 parameter lists"), "{err}");
        let mut wrong = params[2..4].to_vec();
        wrong[1][4] = TensorData::zeros(&[64, 32]);
        let err = new(2..4, 2, 1, &wrong).unwrap_err();
        assert!(
            matches!(&err, ServeError::Params { layer: 3, param, .. } if param == "attn.proj.weight"),
            "{err}"
        );
        assert!(err.to_string().contains("[64, 64]"), "{err}");
        wrong[1].pop();
        let err = new(2..4, 2, 1, &wrong).unwrap_err();
        assert!(matches!(&err, ServeError::Params { layer: 3, .. }), "{err}");
        let mut short = params[7..8].to_vec();
        short[0][2].data.pop();
        let err = new(7..8, 1, 0, &short).unwrap_err();
        assert!(
            matches!(&err, ServeError::Params { layer: 7, param, .. } if param == "head.weight"),
            "{err}"
        );
        // A valid one.
        let shard = new(2..4, 4, 3, &params[2..4]).unwrap();
        assert_eq!(shard.heads(), 3..4);
        assert_eq!(shard.shard(), &ShardSpec { layers: 2..4, tp: 4, rank: 3 });
    }

    #[test]
    fn local_tp_group_sums_in_rank_order_on_every_rank() {
        let tp = 4;
        // Values whose sum depends on the order of addition.
        let inputs: Vec<Vec<f64>> =
            (0..tp).map(|r| vec![1e16 * (r as f64 - 1.5), 1.0 + r as f64, 0.1 * r as f64 + 1e-17]).collect();
        let expected: Vec<f64> =
            (0..3).map(|i| ((inputs[0][i] + inputs[1][i]) + inputs[2][i]) + inputs[3][i]).collect();
        let results: Vec<Vec<f64>> = std::thread::scope(|s| {
            let handles: Vec<_> = LocalTpGroup::new(tp)
                .into_iter()
                .zip(&inputs)
                .map(|(mut member, input)| {
                    s.spawn(move || {
                        let mut v = input.clone();
                        member.all_reduce_sum(0, &mut v).unwrap();
                        // A second round with other values: rounds stay in step.
                        let mut w = vec![member.rank() as f64; 2];
                        member.all_reduce_sum(1, &mut w).unwrap();
                        assert_eq!(w, [6.0, 6.0]);
                        v
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for r in &results {
            assert!(
                r.iter().zip(&expected).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{r:?} vs {expected:?}"
            );
        }

        // A peer at another round, or gone, is an error.
        let mut group = LocalTpGroup::new(2);
        let (mut b, mut a) = (group.pop().unwrap(), group.pop().unwrap());
        let t = std::thread::spawn(move || b.all_reduce_sum(1, &mut [1.0]));
        let err = a.all_reduce_sum(0, &mut [1.0]).unwrap_err();
        assert!(err.to_string().contains("rank 1 is at round 1"), "{err}");
        assert!(t.join().unwrap().is_err());
        let mut group = LocalTpGroup::new(2);
        drop(group.pop());
        let err = group[0].all_reduce_sum(0, &mut [1.0]).unwrap_err();
        assert!(err.to_string().contains("left the group"), "{err}");
        assert!(NoReduce.all_reduce_sum(0, &mut [1.0]).is_err());
    }

    #[test]
    fn greedy_ties_go_to_the_lowest_id_and_sampling_inverts_the_cdf() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
        assert_eq!(argmax(&[2.0, 2.0]), 0);
        let row = [0.0, (3.0f64).ln()]; // probabilities 1/4, 3/4
        assert_eq!(sample_row(&row, 1.0, 0.24), 0);
        assert_eq!(sample_row(&row, 1.0, 0.26), 1);
        assert_eq!(sample_row(&row, 1.0, 0.999_999), 1);
    }
}
