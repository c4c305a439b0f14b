//! In-process implementations of [`PipeLink`] and [`Collective`] (std threads + channels),
//! and a driver that trains a whole layout in one process.
//!
//! Tests use them to check that every (D, P) configuration computes the same model; they are
//! public so that end-to-end tests and local experiments can reuse them. Tensors cross the
//! channels in the wire encoding ([`crate::tensor_to_bytes`]), so the encoding is exercised too.

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex};

use parcae_cluster::{Layout, Slot};
use tch::{Device, Tensor};

use crate::error::WorkerError;
use crate::stage::{Collective, PipeLink, StageTrainer, StepOutcome};
use crate::tensor::{tensor_from_bytes, tensor_to_bytes};

/// One message on an in-process pipe: which micro-batch of which step, and the tensor bytes.
type Message = (u64, usize, Vec<u8>);

/// A slot's channels to its pipeline neighbours.
pub struct LocalLink {
    device: Device,
    activations_out: Option<Sender<Message>>,
    activations_in: Option<Receiver<Message>>,
    grads_out: Option<Sender<Message>>,
    grads_in: Option<Receiver<Message>>,
}

impl LocalLink {
    fn send(
        tx: &Option<Sender<Message>>,
        what: &str,
        step: u64,
        mb: usize,
        t: &Tensor,
    ) -> Result<(), WorkerError> {
        let tx =
            tx.as_ref().ok_or_else(|| WorkerError::Comm(format!("no pipeline peer to send {what} to")))?;
        tx.send((step, mb, tensor_to_bytes(t)?))
            .map_err(|_| WorkerError::Comm(format!("pipeline peer for {what} has gone")))
    }

    fn recv(
        &self,
        rx: &Option<Receiver<Message>>,
        what: &str,
        step: u64,
        mb: usize,
    ) -> Result<Tensor, WorkerError> {
        let rx = rx
            .as_ref()
            .ok_or_else(|| WorkerError::Comm(format!("no pipeline peer to receive {what} from")))?;
        let (s, m, bytes) =
            rx.recv().map_err(|_| WorkerError::Comm(format!("pipeline peer for {what} has gone")))?;
        if (s, m) != (step, mb) {
            return Err(WorkerError::Comm(format!(
                "expected {what} of step {step} micro-batch {mb}, got step {s} micro-batch {m}"
            )));
        }
        tensor_from_bytes(&bytes, self.device)
    }
}

impl PipeLink for LocalLink {
    fn send_activation(&mut self, step: u64, micro_batch: usize, t: &Tensor) -> Result<(), WorkerError> {
        Self::send(&self.activations_out, "activations", step, micro_batch, t)
    }

    fn recv_activation(&mut self, step: u64, micro_batch: usize) -> Result<Tensor, WorkerError> {
        self.recv(&self.activations_in, "activations", step, micro_batch)
    }

    fn send_grad(&mut self, step: u64, micro_batch: usize, t: &Tensor) -> Result<(), WorkerError> {
        Self::send(&self.grads_out, "gradients", step, micro_batch, t)
    }

    fn recv_grad(&mut self, step: u64, micro_batch: usize) -> Result<Tensor, WorkerError> {
        self.recv(&self.grads_in, "gradients", step, micro_batch)
    }
}

/// Shared state of one in-process all-reduce group.
struct Group {
    size: usize,
    state: Mutex<GroupState>,
    changed: Condvar,
}

#[derive(Default)]
struct GroupState {
    /// Each member's contribution to the current round.
    contributions: Vec<Option<(u64, Vec<f32>)>>,
    /// The round's sum, once every member has contributed; cleared when all have read it.
    result: Option<Result<Vec<f32>, String>>,
    readers: usize,
    /// A member has gone (dropped): every later call fails instead of waiting forever.
    broken: bool,
}

/// One replica's handle on an in-process all-reduce group. Sums in replica order, so every
/// member gets bit-identical results. Dropping a handle breaks the group (peers get errors).
pub struct LocalCollective {
    group: Arc<Group>,
    rank: usize,
}

impl LocalCollective {
    /// Handles for a group of `size` members, rank order.
    pub fn group(size: usize) -> Vec<LocalCollective> {
        let state = GroupState { contributions: vec![None; size], ..GroupState::default() };
        let group = Arc::new(Group { size, state: Mutex::new(state), changed: Condvar::new() });
        (0..size).map(|rank| LocalCollective { group: group.clone(), rank }).collect()
    }
}

impl Drop for LocalCollective {
    fn drop(&mut self) {
        if let Ok(mut st) = self.group.state.lock() {
            st.broken = true;
        }
        self.group.changed.notify_all();
    }
}

impl Collective for LocalCollective {
    fn all_reduce_sum(&mut self, step: u64, buffer: &mut [f32]) -> Result<(), WorkerError> {
        let g = &*self.group;
        let gone = || WorkerError::Comm("a data-parallel peer has gone".to_string());
        let mut st = g.state.lock().map_err(|_| gone())?;
        // Wait for the previous round to be read by everyone.
        while st.result.is_some() && !st.broken {
            st = g.changed.wait(st).map_err(|_| gone())?;
        }
        if st.broken {
            return Err(gone());
        }
        st.contributions[self.rank] = Some((step, buffer.to_vec()));
        if st.contributions.iter().all(Option::is_some) {
            let parts: Vec<(u64, Vec<f32>)> =
                st.contributions.iter_mut().map(|c| c.take().expect("all in")).collect();
            let result = if parts.iter().any(|(s, b)| *s != step || b.len() != buffer.len()) {
                Err(format!(
                    "all-reduce members disagree: (step, length) = {:?}",
                    parts.iter().map(|(s, b)| (*s, b.len())).collect::<Vec<_>>()
                ))
            } else {
                let mut sum = vec![0f32; buffer.len()];
                for (_, part) in &parts {
                    for (acc, x) in sum.iter_mut().zip(part) {
                        *acc += x;
                    }
                }
                Ok(sum)
            };
            st.result = Some(result);
            st.readers = 0;
            g.changed.notify_all();
        } else {
            while st.result.is_none() && !st.broken {
                st = g.changed.wait(st).map_err(|_| gone())?;
            }
            if st.result.is_none() {
                return Err(gone());
            }
        }
        let outcome = match st.result.as_ref().expect("result present") {
            Ok(sum) => {
                buffer.copy_from_slice(sum);
                Ok(())
            }
            Err(e) => Err(WorkerError::Comm(e.clone())),
        };
        st.readers += 1;
        if st.readers == g.size {
            st.result = None;
            g.changed.notify_all();
        }
        outcome
    }
}

/// Links and collectives for every slot of `layout`, in `layout.slots()` order. Tensors
/// received are placed on `device`.
pub fn local_mesh(layout: &Layout, device: Device) -> Vec<(Slot, LocalLink, LocalCollective)> {
    let (d, p) = (layout.data_parallel, layout.pipeline_stages);
    let mut links: BTreeMap<Slot, LocalLink> = layout
        .slots()
        .map(|s| {
            let link = LocalLink {
                device,
                activations_out: None,
                activations_in: None,
                grads_out: None,
                grads_in: None,
            };
            (s, link)
        })
        .collect();
    for replica in 0..d {
        for stage in 0..p.saturating_sub(1) {
            let (up, down) = (Slot { replica, stage }, Slot { replica, stage: stage + 1 });
            let (act_tx, act_rx) = channel();
            let (grad_tx, grad_rx) = channel();
            let l = links.get_mut(&up).expect("slot");
            l.activations_out = Some(act_tx);
            l.grads_in = Some(grad_rx);
            let l = links.get_mut(&down).expect("slot");
            l.activations_in = Some(act_rx);
            l.grads_out = Some(grad_tx);
        }
    }
    let mut groups: Vec<std::vec::IntoIter<LocalCollective>> =
        (0..p).map(|_| LocalCollective::group(d).into_iter()).collect();
    layout
        .slots()
        .map(|s| {
            let link = links.remove(&s).expect("slot");
            let coll = groups[s.stage].next().expect("one handle per replica");
            (s, link, coll)
        })
        .collect()
}

/// The result of [`train_local`].
#[derive(Debug)]
pub struct LocalRun {
    /// The trainers, in `layout.slots()` order.
    pub trainers: Vec<StageTrainer>,
    /// The mean token loss of each step run.
    pub losses: Vec<f64>,
}

/// Trains `steps` steps of `layout` in this process, one thread per slot (each limited to one
/// libtorch intra-op thread, so the slots share the cores). `trainers` must be in
/// `layout.slots()` order and hold their slots' layers at the same step.
pub fn train_local(
    layout: &Layout,
    trainers: Vec<StageTrainer>,
    steps: u64,
) -> Result<LocalRun, WorkerError> {
    let slots: Vec<Slot> = layout.slots().collect();
    if trainers.len() != slots.len() {
        return Err(WorkerError::Sequence(format!("{} trainers for {} slots", trainers.len(), slots.len())));
    }
    let device = trainers.first().map(StageTrainer::device).unwrap_or(Device::Cpu);
    let mesh = local_mesh(layout, device);
    let results: Vec<Result<(StageTrainer, Vec<StepOutcome>), WorkerError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = trainers
            .into_iter()
            .zip(mesh)
            .map(|(mut trainer, (slot, mut link, mut coll))| {
                scope.spawn(move || {
                    tch::set_num_threads(1);
                    let start = trainer.step();
                    let mut outcomes = Vec::new();
                    for step in start..start + steps {
                        outcomes.push(trainer.compute_step(step, layout, slot, &mut link, &mut coll)?);
                        trainer.commit()?;
                    }
                    Ok((trainer, outcomes))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("trainer thread panicked")).collect()
    });
    // Report the root cause, not the "peer has gone" errors it caused in the other threads.
    if results.iter().any(Result::is_err) {
        let mut errors: Vec<WorkerError> = results.into_iter().filter_map(Result::err).collect();
        let root = errors.iter().position(|e| !matches!(e, WorkerError::Comm(_))).unwrap_or(0);
        return Err(errors.swap_remove(root));
    }
    let mut trainers = Vec::new();
    let mut per_step: Vec<(f64, usize)> = vec![(0.0, 0); steps as usize];
    for result in results {
        let (trainer, outcomes) = result?;
        for (i, o) in outcomes.iter().enumerate() {
            if let Some(loss) = o.loss_sum {
                per_step[i].0 += loss;
                per_step[i].1 += o.samples;
            }
        }
        trainers.push(trainer);
    }
    let losses = per_step.into_iter().map(|(sum, n)| sum / n.max(1) as f64).collect();
    Ok(LocalRun { trainers, losses })
}
