//! One pipeline stage of one data-parallel replica: GPipe forward/backward over the
//! replica's micro-batches, gradient all-reduce, and a two-phase Adam step.
//!
//! # Why every (D, P) computes the same update
//!
//! Each micro-batch's mean token loss is divided by the micro-batches per *step*
//! (`spec.micro_batches()`), not per replica; gradients accumulate over the replica's
//! micro-batches and are then summed across the stage's replicas. Every micro-batch of the
//! step is trained exactly once (`Layout::micro_batches_of`), its computation does not depend
//! on where the layer boundaries are, and the data is a pure function of (seed, step,
//! micro-batch), so the summed gradient is the gradient of the global-batch mean loss whatever
//! the configuration (up to float summation order).
//!
//! # Why two phases
//!
//! [`StageTrainer::compute_step`] leaves the parameters untouched; only
//! [`StageTrainer::commit`] applies Adam. When a peer dies mid-step the host can
//! [`StageTrainer::abort`] everywhere and every survivor still holds the consistent state of
//! the last committed step, ready to migrate.

use std::collections::BTreeMap;
use std::ops::Range;

use parcae_cluster::{Layout, ModelSpec, Slot};
use tch::{Device, Kind, Tensor};
use tracing::{debug, trace};

use crate::data;
use crate::error::WorkerError;
use crate::model;
use crate::state::LayerState;
use crate::tensor::TensorData;

/// Adam's decay rate of the first moment.
pub const ADAM_BETA1: f64 = 0.9;
/// Adam's decay rate of the second moment.
pub const ADAM_BETA2: f64 = 0.999;
/// Adam's denominator epsilon.
pub const ADAM_EPS: f64 = 1e-8;

/// The links of a slot to the neighbouring stages of its replica. Blocking; the host's QUIC
/// implementation and the in-process one ([`crate::local`]) both satisfy it.
///
/// Activations flow to stage + 1, gradients to stage - 1; a first stage never has activations
/// to receive, a last stage never has gradients to receive. Messages are identified by
/// `(step, micro_batch)` so an implementation can check it got what the schedule expects.
pub trait PipeLink {
    /// Sends the output of this stage for `micro_batch` downstream.
    fn send_activation(&mut self, step: u64, micro_batch: usize, t: &Tensor) -> Result<(), WorkerError>;
    /// Receives this stage's input for `micro_batch` from upstream.
    fn recv_activation(&mut self, step: u64, micro_batch: usize) -> Result<Tensor, WorkerError>;
    /// Sends the gradient of the loss w.r.t. this stage's input for `micro_batch` upstream.
    fn send_grad(&mut self, step: u64, micro_batch: usize, t: &Tensor) -> Result<(), WorkerError>;
    /// Receives the gradient of the loss w.r.t. this stage's output for `micro_batch`.
    fn recv_grad(&mut self, step: u64, micro_batch: usize) -> Result<Tensor, WorkerError>;
}

/// Collective operations among the data-parallel replicas of one stage. Called exactly once
/// per step by every replica, with buffers of equal length; a group of one is a no-op.
pub trait Collective {
    /// Replaces `buffer` by the element-wise sum of every replica's `buffer`.
    fn all_reduce_sum(&mut self, step: u64, buffer: &mut [f32]) -> Result<(), WorkerError>;
}

/// What one slot computed in a step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepOutcome {
    /// The step the gradients are for.
    pub step: u64,
    /// On a last stage: the sum over this replica's sequences of their mean token loss
    /// (divide the sum over replicas by the total `samples` for the step's mean loss).
    pub loss_sum: Option<f64>,
    /// Sequences this replica trained on.
    pub samples: usize,
    /// Micro-batches this replica trained on.
    pub micro_batches: usize,
}

/// A held layer: parameters (tracking gradients) and Adam moments, on the trainer's device.
struct HeldLayer {
    params: Vec<Tensor>,
    exp_avg: Vec<Tensor>,
    exp_avg_sq: Vec<Tensor>,
}

/// Gradients computed and all-reduced, waiting for `commit` or `abort`.
struct Pending {
    step: u64,
    grads: BTreeMap<usize, Vec<Tensor>>,
}

/// A micro-batch whose forward pass is done and whose backward pass is still to come.
struct InFlight {
    micro_batch: usize,
    /// The received activation (a leaf tracking gradients); `None` on a first stage.
    input: Option<Tensor>,
    /// The scaled loss on a last stage, the output sent downstream otherwise.
    output: Tensor,
}

/// Trains a set of layers (a stage) on one device. Layers come and go with
/// [`StageTrainer::import_layer`] / [`StageTrainer::drop_layer`] (migration, repartition);
/// a step needs exactly the contiguous range its slot owns in the layout.
pub struct StageTrainer {
    spec: ModelSpec,
    device: Device,
    /// Optimizer steps committed; also the next step to compute and the data position.
    step: u64,
    layers: BTreeMap<usize, HeldLayer>,
    pending: Option<Pending>,
    /// Compute runs this many times as long as it takes (>= 1): emulates a slower instance
    /// type on one machine (a mixed fleet), by waiting after each micro-batch's compute.
    slowdown: f64,
    /// What the emulated slowdown keeps (see [`StageTrainer::set_emulated_slowdown`]).
    emulation: std::sync::Mutex<Emulation>,
}

/// The emulated slowdown's state.
#[derive(Debug, Default)]
struct Emulation {
    /// Running mean of one micro-batch's forward and backward compute, seconds.
    typical: [Option<f64>; 2],
    /// Waiting still owed (negative: waited too long already), seconds: a sleep overruns
    /// its request (by a millisecond or more on a virtual machine), and the overrun is
    /// taken off the next wait instead of adding up over a step's many micro-batches.
    owed: f64,
}

/// The phases of a micro-batch whose compute an emulated slowdown stretches.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Forward = 0,
    Backward = 1,
}

impl std::fmt::Debug for StageTrainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageTrainer")
            .field("device", &self.device)
            .field("step", &self.step)
            .field("layers", &self.held_layers())
            .field("pending", &self.pending.as_ref().map(|p| p.step))
            .finish()
    }
}

impl StageTrainer {
    /// A trainer holding no layers, at step 0 (it adopts the step of the first layer imported).
    pub fn new(spec: ModelSpec, device: Device) -> Result<Self, WorkerError> {
        spec.validate()?;
        Ok(StageTrainer {
            spec,
            device,
            step: 0,
            layers: BTreeMap::new(),
            pending: None,
            slowdown: 1.0,
            emulation: std::sync::Mutex::new(Emulation::default()),
        })
    }

    /// A trainer holding freshly initialised `layers` at step 0.
    pub fn with_initial_layers(
        spec: ModelSpec,
        device: Device,
        layers: Range<usize>,
    ) -> Result<Self, WorkerError> {
        let mut trainer = StageTrainer::new(spec, device)?;
        for layer in layers {
            let state = LayerState::initial(&trainer.spec, layer)?;
            trainer.import_layer(state)?;
        }
        Ok(trainer)
    }

    /// A trainer holding the freshly initialised layers of `slot` in `layout`.
    pub fn for_slot(
        spec: ModelSpec,
        layout: &Layout,
        slot: Slot,
        device: Device,
    ) -> Result<Self, WorkerError> {
        let range = slot_layers(&spec, layout, slot)?;
        StageTrainer::with_initial_layers(spec, device, range)
    }

    /// The model this trainer trains.
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    /// Where the tensors live.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Makes compute take `factor` times as long (>= 1; anything else is 1): a worker that
    /// stands in for a slower instance type on one machine.
    ///
    /// After each micro-batch's forward and backward, the worker waits `factor - 1` times
    /// the running mean of that phase's compute (not of this one's): a slower accelerator
    /// makes every kernel longer, but not the host's scheduling noise, and waiting on each
    /// micro-batch's own time would multiply this machine's noise by `factor` (two such
    /// workers then straggle `factor` times as much as two fast ones). What a sleep overruns
    /// is taken off the next wait, so the overrun does not grow with the micro-batches.
    pub fn set_emulated_slowdown(&mut self, factor: f64) {
        self.slowdown = if factor.is_finite() && factor > 1.0 { factor } else { 1.0 };
    }

    /// Waits `slowdown - 1` times the running mean of `phase`'s compute, after folding in
    /// the compute since `started` (a mean over about ten micro-batches).
    fn emulate_slowdown(&self, phase: Phase, started: std::time::Instant) {
        if self.slowdown > 1.0 {
            let took = started.elapsed().as_secs_f64();
            let mut emulation = self.emulation.lock().unwrap_or_else(|e| e.into_inner());
            let mean = emulation.typical[phase as usize].map_or(took, |m| m + 0.1 * (took - m));
            emulation.typical[phase as usize] = Some(mean);
            emulation.owed += mean * (self.slowdown - 1.0);
            if emulation.owed > 0.0 {
                let asleep = std::time::Instant::now();
                std::thread::sleep(std::time::Duration::from_secs_f64(emulation.owed));
                emulation.owed -= asleep.elapsed().as_secs_f64();
            }
        }
    }

    /// The held layers changed: their compute will take another time.
    fn forget_typical_compute(&mut self) {
        self.emulation.get_mut().unwrap_or_else(|e| e.into_inner()).typical = [None; 2];
    }

    /// Committed optimizer steps: the next `compute_step` must be for this step.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Sets the step counter of a trainer that holds no layers yet (e.g. before a restart from
    /// a checkpoint); with layers held, the step comes from their state.
    pub fn set_step(&mut self, step: u64) -> Result<(), WorkerError> {
        if !self.layers.is_empty() && step != self.step {
            return Err(WorkerError::StepMismatch { expected: self.step, found: step });
        }
        self.step = step;
        Ok(())
    }

    /// Layer indices held, in increasing order.
    pub fn held_layers(&self) -> Vec<usize> {
        self.layers.keys().copied().collect()
    }

    /// Whether gradients of a computed step await `commit` or `abort`.
    pub fn has_pending_step(&self) -> bool {
        self.pending.is_some()
    }

    /// A copy of layer `layer`'s state (parameters, moments, step) in host memory.
    pub fn export_layer(&self, layer: usize) -> Result<LayerState, WorkerError> {
        let held = self.layers.get(&layer).ok_or(WorkerError::LayerNotHeld(layer))?;
        let copy = |ts: &[Tensor]| ts.iter().map(TensorData::from_tensor).collect::<Result<Vec<_>, _>>();
        Ok(LayerState {
            layer,
            step: self.step,
            params: copy(&held.params)?,
            exp_avg: copy(&held.exp_avg)?,
            exp_avg_sq: copy(&held.exp_avg_sq)?,
        })
    }

    /// Copies of every held layer's state, in layer order.
    pub fn export_all(&self) -> Result<Vec<LayerState>, WorkerError> {
        self.layers.keys().map(|&l| self.export_layer(l)).collect()
    }

    /// Takes in a layer's state (replacing the layer if already held). The state must fit the
    /// spec and be at the trainer's step; an empty trainer adopts the state's step.
    pub fn import_layer(&mut self, state: LayerState) -> Result<(), WorkerError> {
        self.ensure_no_pending("import a layer")?;
        state.check(&self.spec)?;
        if !self.layers.is_empty() && state.step != self.step {
            return Err(WorkerError::StepMismatch { expected: self.step, found: state.step });
        }
        let load =
            |ts: &[TensorData]| ts.iter().map(|t| t.to_tensor(self.device)).collect::<Result<Vec<_>, _>>();
        let held = HeldLayer {
            params: model::to_params(&state.params, self.device)?,
            exp_avg: load(&state.exp_avg)?,
            exp_avg_sq: load(&state.exp_avg_sq)?,
        };
        if self.layers.insert(state.layer, held).is_some() {
            debug!(layer = state.layer, "replaced a held layer");
        }
        self.forget_typical_compute();
        self.step = state.step;
        Ok(())
    }

    /// Forgets a layer (after it has been handed to its new owner).
    pub fn drop_layer(&mut self, layer: usize) -> Result<(), WorkerError> {
        self.ensure_no_pending("drop a layer")?;
        self.forget_typical_compute();
        self.layers.remove(&layer).map(|_| ()).ok_or(WorkerError::LayerNotHeld(layer))
    }

    /// Exports then drops a layer.
    pub fn take_layer(&mut self, layer: usize) -> Result<LayerState, WorkerError> {
        let state = self.export_layer(layer)?;
        self.drop_layer(layer)?;
        Ok(state)
    }

    fn ensure_no_pending(&self, what: &str) -> Result<(), WorkerError> {
        match &self.pending {
            Some(p) => Err(WorkerError::Sequence(format!(
                "cannot {what}: step {} is computed but neither committed nor aborted",
                p.step
            ))),
            None => Ok(()),
        }
    }

    /// Phase one of step `step` for `slot` of `layout`: GPipe forward over the replica's
    /// micro-batches (activations downstream), backward in reverse (gradients upstream), loss
    /// on the last stage, then the all-reduce of the gradients across the stage's replicas.
    /// Parameters are not changed: follow with [`StageTrainer::commit`] or
    /// [`StageTrainer::abort`]. On error nothing is pending and the parameters are untouched.
    pub fn compute_step(
        &mut self,
        step: u64,
        layout: &Layout,
        slot: Slot,
        link: &mut dyn PipeLink,
        collective: &mut dyn Collective,
    ) -> Result<StepOutcome, WorkerError> {
        self.ensure_no_pending("compute a step")?;
        if step != self.step {
            return Err(WorkerError::StepMismatch { expected: self.step, found: step });
        }
        let range = slot_layers(&self.spec, layout, slot)?;
        if !self.layers.keys().copied().eq(range.clone()) {
            return Err(WorkerError::WrongLayers { expected: range, held: self.held_layers() });
        }
        let result = self.compute(step, layout, slot, range, link, collective);
        // Whatever happened, leave no gradient behind in the parameters.
        for held in self.layers.values_mut() {
            for p in held.params.iter_mut() {
                p.zero_grad();
            }
        }
        let (outcome, grads) = result?;
        self.pending = Some(Pending { step, grads });
        Ok(outcome)
    }

    fn compute(
        &self,
        step: u64,
        layout: &Layout,
        slot: Slot,
        range: Range<usize>,
        link: &mut dyn PipeLink,
        collective: &mut dyn Collective,
    ) -> Result<(StepOutcome, BTreeMap<usize, Vec<Tensor>>), WorkerError> {
        let spec = &self.spec;
        let first = range.start == 0;
        let last = range.end == spec.num_layers();
        let micro_batches = layout.micro_batches_of(spec, slot.replica);
        let scale = 1.0 / spec.micro_batches() as f64;
        let hidden = [spec.micro_batch as i64, spec.seq_len as i64, spec.d_model as i64];
        let _span = tracing::debug_span!("step", step, replica = slot.replica, stage = slot.stage).entered();

        // Forward every micro-batch, keeping its graph for the backward pass.
        let mut in_flight = Vec::with_capacity(micro_batches.len());
        let mut loss_sum = 0.0;
        for m in micro_batches.clone() {
            let mut targets = None;
            let (input, x) = if first {
                let (tokens, next) = data::micro_batch(spec, step, m, self.device)?;
                targets = Some(next);
                (None, tokens)
            } else {
                let a = link.recv_activation(step, m)?;
                check_shape("activation", m, &a, &hidden)?;
                let a =
                    a.f_to_device(self.device)?.f_to_kind(Kind::Float)?.f_detach()?.set_requires_grad(true);
                (Some(a.shallow_clone()), a)
            };
            let started = std::time::Instant::now();
            let mut h = x;
            for layer in range.clone() {
                h = model::forward_layer(spec, layer, &self.layers[&layer].params, &h);
            }
            let output = if last {
                // The last stage makes the targets itself: the data is a pure function.
                let targets = match targets {
                    Some(t) => t,
                    None => data::micro_batch(spec, step, m, self.device)?.1,
                };
                let loss = h
                    .f_view([-1, spec.vocab as i64])?
                    .f_log_softmax(-1, Kind::Float)?
                    .f_nll_loss::<Tensor>(&targets.f_view([-1])?, None, tch::Reduction::Mean, -100)?;
                loss_sum += loss.f_double_value(&[])? * spec.micro_batch as f64;
                self.emulate_slowdown(Phase::Forward, started);
                loss * scale
            } else {
                self.emulate_slowdown(Phase::Forward, started);
                link.send_activation(step, m, &h.f_detach()?)?;
                h
            };
            trace!(micro_batch = m, "forward done");
            in_flight.push(InFlight { micro_batch: m, input, output });
        }

        // Backward in reverse order; parameter gradients accumulate in `.grad`.
        for f in in_flight.into_iter().rev() {
            let m = f.micro_batch;
            if last {
                let started = std::time::Instant::now();
                f.output.f_backward()?;
                self.emulate_slowdown(Phase::Backward, started);
            } else {
                let g = link.recv_grad(step, m)?;
                check_shape("gradient", m, &g, &hidden)?;
                let g = g.f_to_device(self.device)?.f_to_kind(Kind::Float)?;
                let started = std::time::Instant::now();
                f.output.f_mul(&g)?.f_sum(Kind::Float)?.f_backward()?;
                self.emulate_slowdown(Phase::Backward, started);
            }
            if let Some(input) = f.input {
                link.send_grad(step, m, &input.grad())?;
            }
            trace!(micro_batch = m, "backward done");
        }

        // Sum gradients across the stage's replicas in one flat buffer (layer order, then
        // parameter order).
        let mut flat = Vec::new();
        let mut shapes = Vec::new();
        for (&layer, held) in &self.layers {
            for p in &held.params {
                let g = p.grad();
                let g = if g.defined() { g } else { p.f_zeros_like()? };
                shapes.push((layer, g.size()));
                flat.push(g.f_flatten(0, -1)?);
            }
        }
        let mut buffer = TensorData::from_tensor(&Tensor::f_cat(&flat, 0)?)?.data;
        collective.all_reduce_sum(step, &mut buffer)?;
        let reduced = Tensor::f_from_slice(&buffer)?.f_to_device(self.device)?;
        let mut grads: BTreeMap<usize, Vec<Tensor>> = BTreeMap::new();
        let mut offset = 0i64;
        for (layer, shape) in shapes {
            let n: i64 = shape.iter().product();
            grads.entry(layer).or_default().push(reduced.f_narrow(0, offset, n)?.f_view(shape.as_slice())?);
            offset += n;
        }
        let outcome = StepOutcome {
            step,
            loss_sum: last.then_some(loss_sum),
            samples: micro_batches.len() * spec.micro_batch,
            micro_batches: micro_batches.len(),
        };
        debug!(loss_sum = ?outcome.loss_sum, samples = outcome.samples, "step computed");
        Ok((outcome, grads))
    }

    /// Phase two: applies Adam (bias-corrected, `spec.learning_rate`, betas 0.9/0.999, eps
    /// 1e-8, no weight decay) with the pending gradients and advances the step. Returns the
    /// new step counter.
    pub fn commit(&mut self) -> Result<u64, WorkerError> {
        let pending = self
            .pending
            .take()
            .ok_or_else(|| WorkerError::Sequence("commit without a computed step".to_string()))?;
        let t = (pending.step + 1) as i32;
        let bias1 = 1.0 - ADAM_BETA1.powi(t);
        let bias2 = 1.0 - ADAM_BETA2.powi(t);
        let step_size = self.spec.learning_rate / bias1;
        let result = tch::no_grad(|| -> Result<(), WorkerError> {
            for (layer, grads) in &pending.grads {
                let held = self.layers.get_mut(layer).ok_or(WorkerError::LayerNotHeld(*layer))?;
                for (i, g) in grads.iter().enumerate() {
                    // In-place ops return an alias of their target; nothing to keep.
                    let m = &mut held.exp_avg[i];
                    let _ = m.f_mul_scalar_(ADAM_BETA1)?;
                    let _ = m.f_add_(&g.f_mul_scalar(1.0 - ADAM_BETA1)?)?;
                    let v = &mut held.exp_avg_sq[i];
                    let _ = v.f_mul_scalar_(ADAM_BETA2)?;
                    let _ = v.f_add_(&g.f_mul(g)?.f_mul_scalar(1.0 - ADAM_BETA2)?)?;
                    let denom = v.f_div_scalar(bias2)?.f_sqrt()?.f_add_scalar(ADAM_EPS)?;
                    let update = held.exp_avg[i].f_div(&denom)?.f_mul_scalar(step_size)?;
                    let _ = held.params[i].f_sub_(&update)?;
                }
            }
            Ok(())
        });
        // Only libtorch failures (device errors) land here; the state may be half updated.
        result?;
        self.step = pending.step + 1;
        debug!(step = self.step, "step committed");
        Ok(self.step)
    }

    /// Discards the pending gradients (a peer failed mid-step): parameters, moments and the
    /// step counter stay those of the last committed step. A no-op when nothing is pending.
    pub fn abort(&mut self) {
        if let Some(p) = self.pending.take() {
            debug!(step = p.step, "step aborted");
        }
    }
}

/// The layers `slot` owns in `layout`, after checking the layout fits `spec` and holds `slot`.
fn slot_layers(spec: &ModelSpec, layout: &Layout, slot: Slot) -> Result<Range<usize>, WorkerError> {
    let bad = |reason: String| {
        WorkerError::Layout(parcae_cluster::LayoutError::Config {
            d: layout.data_parallel,
            p: layout.pipeline_stages,
            reason,
        })
    };
    if slot.replica >= layout.data_parallel || slot.stage >= layout.stages.len() {
        return Err(bad(format!("slot {slot:?} is outside the layout")));
    }
    if layout.stages.last().map(|r| r.end) != Some(spec.num_layers()) || layout.stages[0].start != 0 {
        return Err(bad(format!(
            "stages {:?} do not cover the model's {} layers",
            layout.stages,
            spec.num_layers()
        )));
    }
    Ok(layout.layers(slot))
}

fn check_shape(what: &str, micro_batch: usize, t: &Tensor, expected: &[i64]) -> Result<(), WorkerError> {
    if t.size() != expected {
        return Err(WorkerError::Comm(format!(
            "{what} for micro-batch {micro_batch} has shape {:?}, expected {expected:?}",
            t.size()
        )));
    }
    Ok(())
}
