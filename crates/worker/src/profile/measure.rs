//! Measuring on this machine: layouts trained in-process, stage builds and worker process
//! starts, each summarised as [`Timings`].

use std::path::Path;
use std::time::{Duration, Instant};

use parcae_cluster::{Layout, ModelSpec, Slot};
use serde::Serialize;
use tch::Device;

use super::ProfilingError;
use crate::local::train_local;
use crate::stage::StageTrainer;

/// Summary of repeated timings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timings {
    /// Every timing, in the order taken, ms (or us for transfers).
    pub samples: Vec<f64>,
    /// Median.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Timings {
    /// Summarises `samples` (at least one).
    pub fn new(samples: Vec<f64>) -> Self {
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = match n {
            0 => f64::NAN,
            n if n % 2 == 1 => sorted[n / 2],
            n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        };
        let (min, max) =
            (sorted.first().copied().unwrap_or(f64::NAN), sorted.last().copied().unwrap_or(f64::NAN));
        Timings { samples, median, min, max }
    }
}

/// One layout trained for real.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measurement {
    /// Data-parallel degree.
    pub dp: usize,
    /// Pipeline depth.
    pub pp: usize,
    /// Wall time of each timed step, ms.
    pub step_ms: Timings,
    /// Mean loss of the last step (a sanity check that it trained).
    pub last_loss: f64,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Trains each of `layouts` of `spec` in this process ([`train_local`]): `warmup` untimed steps
/// each, then `steps` rounds in which every layout takes one timed step (a `train_local` call
/// of one step, so a step's time includes starting its slot threads, well under a
/// millisecond). Interleaving the layouts spreads slow phases of other load on the machine
/// over all of them instead of penalising whichever layout was running; the price is that
/// every layout's trainers stay in memory together. `on_unit` is called after each layout's
/// warm-up and after each timed step of each layout (`layouts x (steps + 1)` calls with a
/// warm-up, `layouts x steps` without), for a progress bar.
pub fn measure_layouts(
    spec: &ModelSpec,
    layouts: &[(usize, usize)],
    device: Device,
    warmup: u64,
    steps: u64,
    on_unit: &mut dyn FnMut(),
) -> Result<Vec<Measurement>, ProfilingError> {
    if steps == 0 {
        return Err(ProfilingError::Options("at least one timed step is needed".into()));
    }
    let mut runs: Vec<(Layout, Vec<StageTrainer>, Vec<f64>, f64)> = Vec::with_capacity(layouts.len());
    for &(d, p) in layouts {
        let layout = Layout::new(spec, d, p)?;
        let mut trainers: Vec<StageTrainer> = layout
            .slots()
            .map(|s| StageTrainer::for_slot(spec.clone(), &layout, s, device))
            .collect::<Result<_, _>>()?;
        if warmup > 0 {
            trainers = train_local(&layout, trainers, warmup)?.trainers;
            on_unit();
        }
        runs.push((layout, trainers, Vec::with_capacity(steps as usize), f64::NAN));
    }
    for _ in 0..steps {
        for (layout, trainers, samples, last_loss) in runs.iter_mut() {
            let start = Instant::now();
            let run = train_local(layout, std::mem::take(trainers), 1)?;
            samples.push(ms(start.elapsed()));
            *trainers = run.trainers;
            *last_loss = run.losses.first().copied().unwrap_or(f64::NAN);
            on_unit();
        }
    }
    Ok(runs
        .into_iter()
        .map(|(layout, _, samples, last_loss)| Measurement {
            dp: layout.data_parallel,
            pp: layout.pipeline_stages,
            step_ms: Timings::new(samples),
            last_loss,
        })
        .collect())
}

/// Time to build the slowest stage of a `p`-stage pipeline ([`StageTrainer::for_slot`]:
/// deterministic initialisation of its layers), ms, median over `reps` builds of every stage.
pub fn measure_model_build(
    spec: &ModelSpec,
    p: usize,
    device: Device,
    reps: usize,
) -> Result<f64, ProfilingError> {
    let layout = Layout::new(spec, 1, p)?;
    let mut samples = Vec::new();
    for _ in 0..reps.max(1) {
        let mut slowest: f64 = 0.0;
        for stage in 0..p {
            let start = Instant::now();
            let trainer = StageTrainer::for_slot(spec.clone(), &layout, Slot { replica: 0, stage }, device)?;
            slowest = slowest.max(ms(start.elapsed()));
            drop(trainer);
        }
        samples.push(slowest);
    }
    Ok(Timings::new(samples).median)
}

/// Time to start a worker process and have it exit (`exe --version`: exec, dynamic loading of
/// libtorch, argument parsing), ms, median over `reps` starts after one untimed start.
pub fn measure_process_start(exe: &Path, reps: usize) -> Result<f64, ProfilingError> {
    let io = |source| ProfilingError::Io { path: exe.to_path_buf(), source };
    let mut samples = Vec::new();
    for i in 0..=reps.max(1) {
        let start = Instant::now();
        let out = std::process::Command::new(exe).arg("--version").output().map_err(io)?;
        if !out.status.success() {
            return Err(io(std::io::Error::other(format!("`--version` exited with {}", out.status))));
        }
        if i > 0 {
            samples.push(ms(start.elapsed()));
        }
    }
    Ok(Timings::new(samples).median)
}
