//! The serving side of a worker (`parcae-host serve`): holds one shard of the model (a
//! pipeline stage's layers, one tensor-parallel rank of them) and the KV caches of the
//! requests its replica serves, and carries out the host's serving commands.
//!
//! - [`Serving::configure`] takes a place in a new (dp, tp, pp) configuration: it exports
//!   the KV pieces other workers need from its old shard and sends them, (re)builds its
//!   shard when its layers or rank changed (weights kept in memory across changes, loaded
//!   from the seed or a checkpoint only when new to it), then gathers its requests' pieces.
//! - [`Serving::step`] runs one decode iteration: hidden states from the previous stage
//!   (or the tokens, on the first stage), the tensor-parallel reductions with the stage's
//!   other ranks, the hidden states on to the next stage; the last stage's rank 0 answers
//!   with the next tokens.
//!
//! Activations travel as `Activation` streams tagged `(iteration, 0)`; reductions as
//! `Collective` streams tagged `(iteration, round * MAX_TP + rank)`, so the host's cancel
//! of an iteration (a peer killed) wakes every waiter at once, as in training.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parcae_cluster::ModelSpec;
use parcae_cluster::protocol::Reply;
use parcae_cluster::serving::{
    KvFetch, MAX_TP, SeqStep, ServeConfiguration, ServePeer, ServeShape, ServeSlot, WeightSource,
};
use parcae_net::StreamKind;
use parcae_store::Store;
use parcae_worker::serving::{ServeError, ServingShard, ShardSpec, StageOutput, TpReduce};
use parcae_worker::tch::{Device, Kind, Tensor};
use parcae_worker::{TensorData, WorkerError, load_checkpoint_from, model};
use tokio::runtime::Handle;
use tracing::info;

use super::links::{Group, Neighbour, exchange_with_all};
use super::mailbox::Key;
use super::peers::{PeerNet, tag};

/// What the serving commands need from the worker around them.
pub struct ServeContext<'a> {
    /// The model every worker builds.
    pub spec: &'a ModelSpec,
    /// The peer plane.
    pub net: &'a Arc<PeerNet>,
    /// The async runtime the compute thread blocks on.
    pub rt: &'a Handle,
    /// How long to wait for a peer.
    pub timeout: Duration,
    /// Where checkpoints are read from.
    pub store: &'a Store,
    /// The device to compute on.
    pub device: Device,
    /// This worker's id (a KV fetch from itself is a copy out of its own old cache).
    pub me: parcae_cluster::WorkerId,
}

/// This worker's place in the serving configuration.
struct Place {
    shape: ServeShape,
    slot: ServeSlot,
    peers: Vec<ServePeer>,
    shard: ServingShard,
}

/// The serving state of a worker.
#[derive(Default)]
pub struct Serving {
    place: Option<Place>,
    /// Full f32 weights of the layers this worker held, kept so a change of rank or stage
    /// boundary reshards without reloading.
    weights: BTreeMap<usize, Vec<TensorData>>,
}

fn serve_error(e: ServeError) -> WorkerError {
    WorkerError::Comm(format!("serving: {e}"))
}

impl Serving {
    /// Takes the place `c` gives this worker (or none).
    pub fn configure(&mut self, cx: &ServeContext<'_>, c: ServeConfiguration) -> Result<Reply, WorkerError> {
        let started = Instant::now();
        let ServeConfiguration { epoch, shape, slot, weights, peers, kv_sends, kv_fetches, keep } = c;
        shape.validate(cx.spec)?;
        cx.net.mailbox.discard_epochs_before(epoch);
        // 1. Export what others need (and what this worker needs from its own old shard)
        //    before the shard changes, then send it.
        let old = self.place.as_ref().map(|p| &p.shard);
        let export = |piece| -> Result<Vec<u8>, WorkerError> {
            old.ok_or_else(|| WorkerError::Sequence("KV piece asked of a worker with no shard".into()))?
                .export_kv(piece)
                .map_err(serve_error)
        };
        let mut outgoing = Vec::with_capacity(kv_sends.len());
        for send in &kv_sends {
            outgoing.push((send.clone(), export(&send.piece)?));
        }
        let mut own: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
        for fetch in kv_fetches.iter().filter(|f| f.from == cx.me) {
            own.insert(fetch.index, export(&fetch.piece)?);
        }
        let net = cx.net.clone();
        let sending = cx.rt.spawn(async move {
            let transfers = outgoing.into_iter().map(|(send, bytes)| {
                let net = net.clone();
                async move {
                    let n = bytes.len() as u64;
                    net.send_state(send.addr, &send.name, epoch, send.index as usize, bytes).await.map(|_| n)
                }
            });
            futures_util::future::join_all(transfers).await
        });
        // 2. The new shard: unchanged, rebuilt from weights in memory, or loaded.
        let mut weight_bytes_loaded = 0u64;
        let new_shard = match slot {
            None => None,
            Some(slot) => {
                let layers = shape.stage_layers(cx.spec)?[slot.stage].clone();
                let spec = ShardSpec { layers: layers.clone(), tp: shape.tp, rank: slot.rank };
                let unchanged = self.place.as_ref().is_some_and(|p| *p.shard.shard() == spec);
                if unchanged {
                    None
                } else {
                    weight_bytes_loaded = self.ensure_weights(cx, &layers, &weights)?;
                    let full: Vec<Vec<TensorData>> =
                        layers.clone().map(|l| self.weights[&l].clone()).collect();
                    Some(ServingShard::new(cx.spec, spec, &full, cx.device).map_err(serve_error)?)
                }
            }
        };
        // 3. Gather the pieces of the requests this worker serves next.
        let mut pieces: BTreeMap<u64, Vec<Vec<u8>>> = BTreeMap::new();
        let mut bytes_received = 0u64;
        for KvFetch { piece, index, from } in &kv_fetches {
            let bytes = match own.remove(index) {
                Some(bytes) => bytes,
                None => {
                    cx.net.mailbox.take(Key::State { epoch, layer: *index }, cx.timeout).map_err(|e| {
                        WorkerError::Comm(format!(
                            "KV piece {index} of request {} from worker {from}: {e}",
                            piece.request
                        ))
                    })?
                }
            };
            bytes_received += bytes.len() as u64;
            pieces.entry(piece.request).or_default().push(bytes);
        }
        let sent = cx.rt.block_on(sending).map_err(|e| WorkerError::Comm(format!("send task: {e}")))?;
        let mut bytes_sent = 0;
        for result in sent {
            bytes_sent += result.map_err(|e| WorkerError::Comm(e.to_string()))?;
        }
        // 4. Swap in the new shard and caches.
        match (slot, new_shard) {
            (None, _) => self.place = None,
            (Some(slot), Some(shard)) => self.place = Some(Place { shape, slot, peers, shard }),
            (Some(slot), None) => {
                let place = self.place.as_mut().expect("unchanged shard implies a place");
                let drop: Vec<u64> =
                    place.shard.cached_requests().into_iter().filter(|r| !keep.contains(r)).collect();
                place.shard.release(&drop);
                place.shape = shape;
                place.slot = slot;
                place.peers = peers;
            }
        }
        if let Some(place) = self.place.as_mut() {
            for (request, parts) in pieces {
                place.shard.import_kv(request, &parts).map_err(serve_error)?;
            }
        }
        // Weights of layers this worker no longer holds are dropped (memory stays bounded).
        let held = self.place.as_ref().map(|p| p.shard.shard().layers.clone()).unwrap_or(0..0);
        self.weights.retain(|l, _| held.contains(l));
        let millis = started.elapsed().as_secs_f64() * 1000.0;
        info!(epoch, %shape, ?slot, bytes_sent, bytes_received, weight_bytes_loaded, millis, "serving reconfigured");
        Ok(Reply::ServeConfigured { bytes_sent, bytes_received, weight_bytes_loaded, millis })
    }

    /// Makes sure the full weights of `layers` are in memory; returns the bytes loaded.
    fn ensure_weights(
        &mut self,
        cx: &ServeContext<'_>,
        layers: &Range<usize>,
        source: &WeightSource,
    ) -> Result<u64, WorkerError> {
        let missing: Vec<usize> = layers.clone().filter(|l| !self.weights.contains_key(l)).collect();
        let mut loaded = 0u64;
        match source {
            WeightSource::Fresh => {
                for layer in missing {
                    let params = model::init_layer(cx.spec, layer);
                    loaded += params.iter().map(|p| 4 * p.numel() as u64).sum::<u64>();
                    self.weights.insert(layer, params);
                }
            }
            WeightSource::Checkpoint { stages } => {
                for (prefix, held) in stages {
                    if !missing.iter().any(|l| held.contains(l)) {
                        continue;
                    }
                    let checkpoint = cx.rt.block_on(load_checkpoint_from(cx.store, prefix, Some(cx.spec)))?;
                    for state in checkpoint.layers {
                        if missing.contains(&state.layer) && !self.weights.contains_key(&state.layer) {
                            loaded += state.params.iter().map(|p| 4 * p.numel() as u64).sum::<u64>();
                            self.weights.insert(state.layer, state.params);
                        }
                    }
                }
                if let Some(layer) = missing.iter().find(|l| !self.weights.contains_key(l)) {
                    return Err(WorkerError::Sequence(format!(
                        "the checkpoint's stages ({}) hold no layer {layer}",
                        stages.iter().map(|(p, r)| format!("{p}: {r:?}")).collect::<Vec<_>>().join(", ")
                    )));
                }
            }
        }
        Ok(loaded)
    }

    /// Runs this worker's part of one decode iteration.
    pub fn step(
        &mut self,
        cx: &ServeContext<'_>,
        iteration: u64,
        seqs: &[SeqStep],
        release: &[u64],
    ) -> Result<Reply, WorkerError> {
        let started = Instant::now();
        let place =
            self.place.as_mut().ok_or_else(|| WorkerError::Sequence("serve step without a place".into()))?;
        cx.net.mailbox.discard_attempts_before(iteration);
        place.shard.release(release);
        let ServeSlot { replica, stage, rank } = place.slot;
        let find = |stage: usize, rank: usize| {
            place.peers.iter().find(|p| p.slot == ServeSlot { replica, stage, rank }).cloned()
        };
        let input = if stage == 0 {
            None
        } else {
            let bytes = cx
                .net
                .mailbox
                .take(Key::Activation { attempt: iteration, micro_batch: 0 }, cx.timeout)
                .map_err(|e| {
                    WorkerError::Comm(format!("waiting for stage {}'s hidden states: {e}", stage - 1))
                })?;
            Some(hidden_from_bytes(&bytes, cx.device)?)
        };
        let ranks = (0..place.shape.tp)
            .map(|r| {
                find(stage, r)
                    .ok_or_else(|| WorkerError::Sequence(format!("no peer at stage {stage} rank {r}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut reduce = QuicTpReduce { cx, iteration, rank, ranks };
        let output = place.shard.forward(seqs, input.as_ref(), &mut reduce).map_err(serve_error)?;
        let tokens = match output {
            StageOutput::Hidden(hidden) => {
                let next = find(stage + 1, rank).ok_or_else(|| {
                    WorkerError::Sequence(format!("no peer at stage {} rank {rank}", stage + 1))
                })?;
                let bytes = hidden_to_bytes(&hidden)?;
                cx.rt
                    .block_on(cx.net.send_payload(
                        next.addr,
                        &next.name,
                        StreamKind::Activation,
                        tag(iteration, 0),
                        &bytes,
                    ))
                    .map_err(|e| {
                        WorkerError::Comm(format!("sending hidden states to stage {}: {e}", stage + 1))
                    })?;
                Vec::new()
            }
            StageOutput::Tokens(tokens) if rank == 0 => tokens,
            StageOutput::Tokens(_) => Vec::new(),
        };
        Ok(Reply::ServeStepped { iteration, tokens, millis: started.elapsed().as_secs_f64() * 1000.0 })
    }
}

/// The sum over a stage's tensor-parallel ranks, over QUIC: every rank sends its buffer to
/// every other and adds all of them in rank order, so every rank ends bit-identical.
struct QuicTpReduce<'a, 'b> {
    cx: &'a ServeContext<'b>,
    iteration: u64,
    rank: usize,
    ranks: Vec<ServePeer>,
}

impl TpReduce for QuicTpReduce<'_, '_> {
    fn all_reduce_sum(&mut self, round: u32, values: &mut [f64]) -> Result<(), ServeError> {
        if self.ranks.len() <= 1 {
            return Ok(());
        }
        let members: Vec<Neighbour> =
            self.ranks.iter().map(|p| Neighbour { addr: p.addr, name: p.name.clone() }).collect();
        let mine: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let parts = exchange_with_all(
            self.cx.rt,
            self.cx.net,
            self.iteration,
            Group { members: &members, me: self.rank },
            |rank| round as usize * MAX_TP + rank,
            self.cx.timeout,
            mine,
        )
        .map_err(|reason| ServeError::Reduce { round, reason })?;
        // Summed in rank order on every rank: bit-identical results.
        for (i, out) in values.iter_mut().enumerate() {
            let mut sum = 0.0f64;
            for part in &parts {
                sum += f64::from_le_bytes(part[8 * i..8 * i + 8].try_into().expect("8 bytes"));
            }
            *out = sum;
        }
        Ok(())
    }
}

/// Hidden states `[n, d]` (f64) as bytes: n and d as u64, then the values, little-endian.
fn hidden_to_bytes(t: &Tensor) -> Result<Vec<u8>, WorkerError> {
    let t = t.f_to_device(Device::Cpu)?.f_to_kind(Kind::Double)?.f_contiguous()?;
    let size = t.size();
    if size.len() != 2 {
        return Err(WorkerError::Sequence(format!("hidden states of shape {size:?}, expected [n, d]")));
    }
    let n = (size[0] * size[1]) as usize;
    let mut values = vec![0f64; n];
    t.f_copy_data(&mut values, n)?;
    let mut out = Vec::with_capacity(16 + 8 * n);
    out.extend_from_slice(&(size[0] as u64).to_le_bytes());
    out.extend_from_slice(&(size[1] as u64).to_le_bytes());
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
    Ok(out)
}

fn hidden_from_bytes(bytes: &[u8], device: Device) -> Result<Tensor, WorkerError> {
    let malformed = |reason: String| WorkerError::Malformed { what: "hidden states", reason };
    if bytes.len() < 16 {
        return Err(malformed(format!("{} bytes, shorter than the 16-byte header", bytes.len())));
    }
    let n = u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes")) as usize;
    let d = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")) as usize;
    let expected = n.checked_mul(d).and_then(|c| c.checked_mul(8)).and_then(|c| c.checked_add(16));
    if expected != Some(bytes.len()) {
        return Err(malformed(format!("[{n}, {d}] needs {expected:?} bytes, got {}", bytes.len())));
    }
    let values: Vec<f64> =
        bytes[16..].chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
    Ok(Tensor::from_slice(&values).view([n as i64, d as i64]).to_device(device))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_states_round_trip_and_refuse_bad_lengths() {
        let t = Tensor::from_slice(&[1.0f64, -2.5, 3.25, 0.0, 1e-300, 7.0]).view([2, 3]);
        let bytes = hidden_to_bytes(&t).unwrap();
        let back = hidden_from_bytes(&bytes, Device::Cpu).unwrap();
        assert_eq!(back.size(), vec![2, 3]);
        assert_eq!((back - t).abs().max().double_value(&[]), 0.0);
        assert!(hidden_from_bytes(&bytes[..bytes.len() - 1], Device::Cpu).is_err());
        assert!(hidden_from_bytes(&[0u8; 3], Device::Cpu).is_err());
    }
}
