//! Serving on the workers (`parcae-host serve`): the (dp, tp, pp) shape of a serving
//! configuration, a worker's place in it, and what one decode iteration and one
//! reconfiguration carry. Shared by host and workers, like [`crate::protocol`].
//!
//! A configuration has `dp` replicas of `pp` pipeline stages, each stage split over `tp`
//! tensor-parallel ranks: rank `r` holds the attention heads [`ServeShape::heads`] and the
//! matching quarter (or half, ...) of every MLP's columns of its stage's blocks; the
//! embedding and the head are replicated on every rank of their stage. Keys and values of a
//! request live where its heads and layers do, so moving a request between configurations
//! moves [`KvPiece`]s: (layers x heads) rectangles of its cache.

use std::net::SocketAddr;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::layout::{LayoutError, ModelSpec};
use crate::migration::WorkerId;

/// Largest tensor-parallel degree served (heads and MLP columns split over at most 4 workers).
pub const MAX_TP: usize = 4;

/// Replicas, tensor-parallel ranks per stage and pipeline stages of a serving configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ServeShape {
    /// Data-parallel replicas (each serves its own batch of requests).
    pub dp: usize,
    /// Tensor-parallel ranks per stage.
    pub tp: usize,
    /// Pipeline stages per replica.
    pub pp: usize,
}

impl ServeShape {
    /// Workers the configuration needs.
    pub fn workers(&self) -> usize {
        self.dp * self.tp * self.pp
    }

    /// Checks the shape against the model: tp divides the heads and the MLP width and is at
    /// most [`MAX_TP`]; pp is at most the model's layers.
    pub fn validate(&self, spec: &ModelSpec) -> Result<(), LayoutError> {
        let fail = |reason: String| LayoutError::Config { d: self.dp, p: self.pp, reason };
        if self.dp == 0 || self.tp == 0 || self.pp == 0 {
            return Err(fail(format!(
                "dp, tp and pp must be at least 1 (got {}x{}x{})",
                self.dp, self.tp, self.pp
            )));
        }
        if self.tp > MAX_TP {
            return Err(fail(format!("tp={} is above the largest supported, {MAX_TP}", self.tp)));
        }
        if !spec.n_heads.is_multiple_of(self.tp) {
            return Err(fail(format!(
                "tp={} does not divide the model's {} attention heads",
                self.tp, spec.n_heads
            )));
        }
        if self.pp > spec.num_layers() {
            return Err(fail(format!(
                "pp={} is more than the model's {} layers",
                self.pp,
                spec.num_layers()
            )));
        }
        Ok(())
    }

    /// The layers of each stage (the same balanced rule as training).
    pub fn stage_layers(&self, spec: &ModelSpec) -> Result<Vec<Range<usize>>, LayoutError> {
        spec.balanced_partition(self.pp)
    }

    /// The attention heads tensor-parallel rank `rank` holds.
    pub fn heads(&self, spec: &ModelSpec, rank: usize) -> Range<usize> {
        let per = spec.n_heads / self.tp.max(1);
        rank * per..(rank + 1) * per
    }

    /// Every slot, replica-major, then stage, then rank.
    pub fn slots(&self) -> impl Iterator<Item = ServeSlot> + '_ {
        (0..self.dp).flat_map(move |replica| {
            (0..self.pp)
                .flat_map(move |stage| (0..self.tp).map(move |rank| ServeSlot { replica, stage, rank }))
        })
    }
}

impl std::fmt::Display for ServeShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "dp{}xtp{}xpp{}", self.dp, self.tp, self.pp)
    }
}

/// One worker's place in a serving configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ServeSlot {
    /// Data-parallel replica, `0..dp`.
    pub replica: usize,
    /// Pipeline stage, `0..pp`.
    pub stage: usize,
    /// Tensor-parallel rank, `0..tp`.
    pub rank: usize,
}

/// How a request picks its next token.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Sampling {
    /// The most likely token (ties: the lowest id).
    Greedy,
    /// Drawn from `softmax(logits / temperature)`; the draw for the token at position `p`
    /// depends only on `(seed, p)`, so a request resumed elsewhere draws the same tokens.
    Random {
        /// Softmax temperature, finite and > 0.
        temperature: f64,
        /// The request's seed.
        seed: u64,
    },
}

/// One request's part of a decode iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeqStep {
    /// The request (its KV cache's key on every worker).
    pub request: u64,
    /// Tokens fed this iteration at positions `start..start + tokens.len()`: the prompt (and
    /// any tokens already generated) when the cache is empty, else the last token.
    pub tokens: Vec<i64>,
    /// Positions already in the request's cache on this replica.
    pub start: usize,
    /// How the last stage picks the next token.
    pub sampling: Sampling,
}

/// Where the weights of a serving shard come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WeightSource {
    /// The model's initial weights from its seed (what `run` would start training from).
    Fresh,
    /// A checkpoint `run` wrote: per stage prefix, the layers it holds (read from the
    /// worker's checkpoint store).
    Checkpoint {
        /// Stage prefixes in the checkpoint store and the layers each holds.
        stages: Vec<(String, Range<usize>)>,
    },
}

/// A rectangle of one request's KV cache: some blocks' keys and values for some heads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvPiece {
    /// The request.
    pub request: u64,
    /// Model layers (block layers only carry a cache).
    pub layers: Range<usize>,
    /// Attention heads, global indices.
    pub heads: Range<usize>,
}

/// A piece this worker exports from its cache and sends before it changes shard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KvSend {
    /// What to send.
    pub piece: KvPiece,
    /// The receiver's number for it in this reconfiguration (its mailbox key).
    pub index: u32,
    /// The receiving worker.
    pub to: WorkerId,
    /// The receiver's certificate name.
    pub name: String,
    /// The receiver's QUIC endpoint.
    pub addr: SocketAddr,
}

/// A piece this worker needs for its new shard, from a peer or from its own old cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KvFetch {
    /// What arrives.
    pub piece: KvPiece,
    /// This worker's number for it in this reconfiguration.
    pub index: u32,
    /// The worker that has it (this worker itself: copied from its own old cache).
    pub from: WorkerId,
}

/// A peer in the serving configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServePeer {
    /// The peer's id.
    pub worker: WorkerId,
    /// The name on its cluster certificate.
    pub name: String,
    /// Its place.
    pub slot: ServeSlot,
    /// Its QUIC endpoint.
    pub addr: SocketAddr,
}

/// Everything a worker needs to take its place in a new serving configuration: send the
/// pieces others need, load its shard's weights (kept when the shard is unchanged), gather
/// its requests' pieces, drop every other request's cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServeConfiguration {
    /// Numbers reconfigurations (transfer keys).
    pub epoch: u64,
    /// The new shape.
    pub shape: ServeShape,
    /// None: the worker holds nothing afterwards.
    pub slot: Option<ServeSlot>,
    /// Where weights it does not hold yet come from.
    pub weights: WeightSource,
    /// Every worker with a slot.
    pub peers: Vec<ServePeer>,
    /// Pieces to send (exported before the shard changes).
    pub kv_sends: Vec<KvSend>,
    /// Pieces to gather; afterwards the worker caches exactly the requests named here (plus
    /// those it keeps when its shard is unchanged and `keep` names them).
    pub kv_fetches: Vec<KvFetch>,
    /// Requests whose cache stays as it is (the shard is unchanged); all others are dropped.
    pub keep: Vec<u64>,
}
