//! [`PipeLink`] and [`Collective`] over QUIC: the compute thread blocks on the
//! async peer plane through a runtime handle.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parcae_net::StreamKind;
use parcae_worker::tch::Tensor;
use parcae_worker::{Collective, PipeLink, WorkerError, tensor_from_bytes, tensor_to_bytes};
use tokio::runtime::Handle;

use super::mailbox::Key;
use super::peers::{PeerNet, tag};

/// A neighbour's address and certificate name.
#[derive(Debug, Clone)]
pub struct Neighbour {
    pub addr: SocketAddr,
    pub name: String,
}

fn net_error(what: &str, e: impl std::fmt::Display) -> WorkerError {
    WorkerError::Comm(format!("{what}: {e}"))
}

/// The links of one slot for one step attempt.
pub struct QuicPipeLink {
    pub rt: Handle,
    pub net: Arc<PeerNet>,
    pub attempt: u64,
    pub upstream: Option<Neighbour>,
    pub downstream: Option<Neighbour>,
    pub timeout: Duration,
    pub device: parcae_worker::tch::Device,
}

impl QuicPipeLink {
    fn send(
        &self,
        to: Option<&Neighbour>,
        kind: StreamKind,
        micro_batch: usize,
        t: &Tensor,
    ) -> Result<(), WorkerError> {
        let to = to.ok_or_else(|| WorkerError::Comm(format!("no neighbour to send {kind:?} to")))?;
        let bytes = tensor_to_bytes(t)?;
        self.rt
            .block_on(self.net.send_payload(to.addr, &to.name, kind, tag(self.attempt, micro_batch), &bytes))
            .map_err(|e| net_error("sending to a neighbour stage", e))
    }

    fn recv(&self, key: Key) -> Result<Tensor, WorkerError> {
        let bytes = self
            .net
            .mailbox
            .take(key, self.timeout)
            .map_err(|e| net_error("waiting for a neighbour stage", e))?;
        tensor_from_bytes(&bytes, self.device)
    }
}

impl PipeLink for QuicPipeLink {
    fn send_activation(&mut self, _step: u64, micro_batch: usize, t: &Tensor) -> Result<(), WorkerError> {
        self.send(self.downstream.as_ref(), StreamKind::Activation, micro_batch, t)
    }

    fn recv_activation(&mut self, _step: u64, micro_batch: usize) -> Result<Tensor, WorkerError> {
        self.recv(Key::Activation { attempt: self.attempt, micro_batch: micro_batch as u32 })
    }

    fn send_grad(&mut self, _step: u64, micro_batch: usize, t: &Tensor) -> Result<(), WorkerError> {
        self.send(self.upstream.as_ref(), StreamKind::Gradient, micro_batch, t)
    }

    fn recv_grad(&mut self, _step: u64, micro_batch: usize) -> Result<Tensor, WorkerError> {
        self.recv(Key::Gradient { attempt: self.attempt, micro_batch: micro_batch as u32 })
    }
}

/// All-reduce among a stage's replicas: every replica sends its buffer to every
/// other and sums all of them in replica order, so every replica ends with a
/// bit-identical result (the replicas' parameters never drift apart).
/// Simple and exact for the few replicas of a small cluster; a ring or NCCL
/// implementation can replace it behind the same trait.
pub struct QuicAllReduce {
    pub rt: Handle,
    pub net: Arc<PeerNet>,
    pub attempt: u64,
    pub my_replica: usize,
    /// Every replica of the stage by replica index (including this one).
    pub replicas: Vec<Neighbour>,
    pub timeout: Duration,
}

/// The workers of one exchange, in member order, and which of them this worker is.
pub struct Group<'a> {
    pub members: &'a [Neighbour],
    pub me: usize,
}

/// Sends `mine` to every other member of `group` and gathers every member's payload in member order, this worker's own in its place.
/// `index(m)` is member m's stream index within `generation`, the key its payload arrives
/// under. What the training all-reduce and serving's tensor-parallel sum both do before
/// adding up.
pub fn exchange_with_all(
    rt: &Handle,
    net: &PeerNet,
    generation: u64,
    group: Group<'_>,
    index: impl Fn(usize) -> usize,
    timeout: Duration,
    mine: Vec<u8>,
) -> Result<Vec<Vec<u8>>, String> {
    let Group { members, me } = group;
    let sends = members.iter().enumerate().filter(|(m, _)| *m != me).map(|(_, peer)| {
        net.send_payload(peer.addr, &peer.name, StreamKind::Collective, tag(generation, index(me)), &mine)
    });
    for result in rt.block_on(futures_util::future::join_all(sends)) {
        result.map_err(|e| format!("sending to a member: {e}"))?;
    }
    let mut parts = Vec::with_capacity(members.len());
    for m in 0..members.len() {
        if m == me {
            parts.push(mine.clone());
            continue;
        }
        let key = Key::Reduce { attempt: generation, replica: index(m) as u32 };
        let bytes = net.mailbox.take(key, timeout).map_err(|e| format!("waiting for member {m}: {e}"))?;
        if bytes.len() != mine.len() {
            return Err(format!("member {m} sent {} bytes, expected {}", bytes.len(), mine.len()));
        }
        parts.push(bytes);
    }
    Ok(parts)
}

impl Collective for QuicAllReduce {
    fn all_reduce_sum(&mut self, _step: u64, buffer: &mut [f32]) -> Result<(), WorkerError> {
        if self.replicas.len() <= 1 {
            return Ok(());
        }
        let mine: Vec<u8> = buffer.iter().flat_map(|v| v.to_le_bytes()).collect();
        let parts = exchange_with_all(
            &self.rt,
            &self.net,
            self.attempt,
            Group { members: &self.replicas, me: self.my_replica },
            |r| r,
            self.timeout,
            mine,
        )
        .map_err(|e| net_error("gradient all-reduce", e))?;
        // Summed in replica order on every replica: bit-identical results.
        for (i, out) in buffer.iter_mut().enumerate() {
            let mut sum = 0.0f32;
            for part in &parts {
                sum += f32::from_le_bytes(part[4 * i..4 * i + 4].try_into().expect("4 bytes"));
            }
            *out = sum;
        }
        Ok(())
    }
}
