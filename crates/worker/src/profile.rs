//! `parcae-worker profile`: measures this machine, fits a performance model and writes a
//! profile the host's planner reads (`profiles/README.md`, crate `parcae-profile`).
//!
//! The planner needs the iteration time of every (D, P) layout it may choose and the cost of
//! moving state. A small machine cannot run every layout the way a fleet would (one instance
//! per slot), so this module
//!
//! 1. **measures** the real trainer: each candidate layout is trained in this process by
//!    [`train_local`] (one thread per slot, one libtorch thread each, in-process links and
//!    all-reduce), `warmup_steps` untimed steps, then `steps` timed ones, the layouts taking
//!    turns step by step so that other load on the machine hits them alike (median, min, max);
//!    in-process rather than worker processes because it needs no host, is deterministic and
//!    runs exactly the compute code (`StageTrainer`) the workers run; the network is measured
//!    separately (below);
//! 2. **fits** a performance model in the spirit of CM-DARE's regression models: linear in six
//!    per-layer compute and communication terms ([`TERMS`]) on the critical path of the GPipe
//!    schedule, fitted by non-negative least squares on relative errors. The measurements of
//!    layouts with more slots than cores are contended, so the model on the profiling machine
//!    is `max(critical path, total work / C)`, `C` (effective cores, searched between 1 and the
//!    cores given) fitted too; the profile uses the critical path alone (one core per
//!    instance);
//! 3. **validates** it on held-out layouts (leave-one-out, and fitting the small layouts to
//!    predict the large ones), since a model that predicts unrun layouts is only as good as
//!    its error on layouts it did not see;
//! 4. **measures the transfer curve** (`p2p_us_by_bytes`) through parcae-net's QUIC state
//!    transfer (mutual TLS, checksummed chunks) between two endpoints on loopback, with the
//!    worker's own transfer options, at the model's layer-state sizes;
//! 5. **writes the profile**: measured step times for the layouts that fit the machine (one
//!    core per slot: at most `cores` slots, and no more than the fitted effective cores, which
//!    other load on the machine lowers), model predictions for the others; its `source` lists
//!    which are which (the format has no per-entry field for it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parcae_cluster::{Layout, LayoutError, ModelSpec, Slot};
use parcae_profile::{Arch, Instance, LayerParams, ModelEntry, Profile, ProfileFile, ThroughputEntry};
use serde::Serialize;
use tch::Device;

use crate::error::WorkerError;
use crate::local::train_local;
use crate::stage::StageTrainer;

/// Names of the performance model's terms, in coefficient order (see [`LayoutFeatures`]).
pub const TERMS: [&str; N_TERMS] = [
    "compute_per_mparam",
    "compute_per_layer",
    "pipeline_hop_per_mb",
    "allreduce_per_mb",
    "optimizer_per_mparam",
    "fixed",
];
/// Number of terms of the performance model.
pub const N_TERMS: usize = 6;

/// Prices of the example profile (`profiles/example-small.json`): made up, used when none are
/// given, and said so in the written profile.
pub const EXAMPLE_SPOT_USD_PER_HOUR: f64 = 0.12;
/// See [`EXAMPLE_SPOT_USD_PER_HOUR`].
pub const EXAMPLE_ON_DEMAND_USD_PER_HOUR: f64 = 0.4;

/// Why profiling failed.
#[derive(Debug, thiserror::Error)]
pub enum ProfilingError {
    /// Training a layout failed.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// The spec or a layout is unusable.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// The profile built does not pass the cost model's checks (a bug here, or bad options).
    #[error("the profile built does not validate: {0}")]
    Profile(#[from] parcae_profile::ProfileError),
    /// The QUIC transfer measurement failed.
    #[error("measuring transfers over QUIC: {0}")]
    Transfer(String),
    /// The options cannot give a profile (e.g. nothing to measure).
    #[error("{0}")]
    Options(String),
    /// Starting a process or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or program.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
}

/// What to measure and how to label the profile.
#[derive(Debug, Clone)]
pub struct ProfileOptions {
    /// The model and batch to profile (the one `parcae-host run --spec` trains).
    pub spec: ModelSpec,
    /// The model's name in the profile (`parcae-host bench --model NAME`).
    pub model_name: String,
    /// Where the trainers compute.
    pub device: Device,
    /// Untimed steps before the timed ones (allocator, caches, first-touch).
    pub warmup_steps: u64,
    /// Timed steps per layout.
    pub steps: u64,
    /// Largest D x P the profile covers (the host's planning range).
    pub max_instances: usize,
    /// Largest D x P actually trained; larger candidates are only predicted.
    pub measure_max: usize,
    /// Cores (or accelerators) the slots share: layouts with at most this many slots (and no
    /// more than the effective cores the fit finds) fit the machine and are written as measured.
    pub cores: usize,
    /// Message sizes of the transfer curve (bytes); empty: [`default_transfer_sizes`].
    pub transfer_sizes: Vec<u64>,
    /// Timed transfers per size (after one warm-up transfer).
    pub transfer_reps: usize,
    /// Builds of each depth timed for `model_build_ms_by_pp`.
    pub build_reps: usize,
    /// Spot price, US$ per instance-hour.
    pub spot_usd_per_hour: f64,
    /// On-demand price, US$ per instance-hour.
    pub on_demand_usd_per_hour: f64,
    /// Where the prices come from.
    pub price_source: String,
    /// The instance type written in the profile.
    pub instance_type: String,
    /// The hardware one instance stands for, for readers.
    pub hardware: String,
    /// Measured worker start time (ms), if the caller measured it ([`measure_process_start`]).
    pub proc_init_ms: Option<f64>,
    /// Rendezvous time written in the profile (not measured here).
    pub rendezvous_ms: f64,
    /// Extra restart time written in the profile (not measured here).
    pub restart_extra_ms: f64,
}

impl ProfileOptions {
    /// Defaults for `spec` on `device`: 2 warm-up and 10 timed steps, layouts up to 8
    /// instances, all of them trained, the machine's cores (one slot per accelerator on CUDA),
    /// the example profile's prices and start-up constants.
    pub fn new(spec: ModelSpec, device: Device) -> Self {
        let cores = match device {
            Device::Cpu => std::thread::available_parallelism().map_or(1, usize::from),
            _ => 1,
        };
        ProfileOptions {
            spec,
            model_name: "worker-gpt".to_string(),
            device,
            warmup_steps: 2,
            steps: 10,
            max_instances: 8,
            measure_max: 8,
            cores,
            transfer_sizes: Vec::new(),
            transfer_reps: 5,
            build_reps: 3,
            spot_usd_per_hour: EXAMPLE_SPOT_USD_PER_HOUR,
            on_demand_usd_per_hour: EXAMPLE_ON_DEMAND_USD_PER_HOUR,
            price_source: "made up: the example profile's prices (profiles/example-small.json); \
                           pass --spot-usd-per-hour / --on-demand-usd-per-hour"
                .to_string(),
            instance_type: match device {
                Device::Cpu => "local-cpu-1core".to_string(),
                _ => "local-accelerator".to_string(),
            },
            hardware: hardware_name(device),
            proc_init_ms: None,
            rendezvous_ms: 1500.0,
            restart_extra_ms: 0.0,
        }
    }
}

/// A readable name for what one instance is: the CPU model (one core of it) or the device.
pub fn hardware_name(device: Device) -> String {
    match device {
        Device::Cpu => {
            let model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|text| {
                text.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            });
            format!("1 core of {}", model.unwrap_or_else(|| "an unknown CPU".to_string()))
        }
        other => format!("{other:?}"),
    }
}

/// Every (D, P) with D x P <= `max_instances` that the worker can run ([`Layout::new`]
/// accepts it) and the cost model can partition (P at most `parcae_profile::max_stages`),
/// sorted by D then P.
pub fn candidate_layouts(spec: &ModelSpec, max_instances: usize) -> Vec<(usize, usize)> {
    let deepest = parcae_profile::max_stages(spec.num_layers());
    let mut out = Vec::new();
    for d in 1..=max_instances {
        for p in 1..=deepest.min(max_instances / d) {
            if Layout::new(spec, d, p).is_ok() {
                out.push((d, p));
            }
        }
    }
    out
}

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
/// every layout's trainers stay in memory together.
pub fn measure_layouts(
    spec: &ModelSpec,
    layouts: &[(usize, usize)],
    device: Device,
    warmup: u64,
    steps: u64,
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

/// The regressors of one layout, for the critical path of one step (`critical`) and for the
/// total CPU work of the step summed over slots (`work`); both in [`TERMS`] order:
///
/// | term | critical path | total work |
/// |---|---|---|
/// | compute per parameter | `(m_r + P - 1) x S` | `m x total` |
/// | compute per layer | `(m_r + P - 1) x L` | `m x layers` |
/// | pipeline hop | `(m_r + P - 1) x a` if P > 1 | `2 m (P - 1) a` |
/// | all-reduce | `(D - 1) x g` | `(D - 1) x G` |
/// | optimizer | `S` | `D x total` |
/// | fixed | 1 | `D x P` |
///
/// `m` micro-batches per step, `m_r` of them on the busiest replica, `S` / `L` the parameters
/// (millions) / layers of the slowest stage (most parameters), `a` one activation (MB), `g` /
/// `G` the gradient bytes (MB) of the slowest stage / of the model. GPipe runs `m_r + P - 1`
/// forward and as many backward ticks, each as long as the slowest stage. The all-reduce term
/// counts the `D - 1` other replicas' gradients a replica adds: the worker's all-reduce
/// (`node::links`) sends every replica's buffer to every other and each sums them; the
/// in-process one measured here sums them once for all.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LayoutFeatures {
    /// Regressors of the critical path (one core per slot).
    pub critical: [f64; N_TERMS],
    /// Regressors of the work all slots do together.
    pub work: [f64; N_TERMS],
}

/// [`LayoutFeatures`] of `layout`.
pub fn layout_features(spec: &ModelSpec, layout: &Layout) -> LayoutFeatures {
    let (d, p) = (layout.data_parallel as f64, layout.pipeline_stages as f64);
    let m = spec.micro_batches() as f64;
    let m_r =
        (0..layout.data_parallel).map(|r| layout.micro_batches_of(spec, r).len()).max().unwrap_or(0) as f64;
    let stage_params: Vec<(u64, usize)> =
        layout.stages.iter().map(|r| (r.clone().map(|l| spec.layer_params(l)).sum(), r.len())).collect();
    let (s_params, s_layers) = stage_params.iter().copied().max().unwrap_or((0, 0));
    let total_params: u64 = (0..spec.num_layers()).map(|l| spec.layer_params(l)).sum();
    let s = s_params as f64 / 1e6;
    let total = total_params as f64 / 1e6;
    let activation_mb = (spec.micro_batch * spec.seq_len * spec.d_model * 4) as f64 / 1e6;
    let ticks = m_r + p - 1.0;
    let critical = [
        ticks * s,
        ticks * s_layers as f64,
        if p > 1.0 { ticks * activation_mb } else { 0.0 },
        (d - 1.0) * s * 4.0,
        s,
        1.0,
    ];
    let work = [
        m * total,
        m * spec.num_layers() as f64,
        2.0 * m * (p - 1.0) * activation_mb,
        (d - 1.0) * total * 4.0,
        d * total,
        d * p,
    ];
    LayoutFeatures { critical, work }
}

fn dot(a: &[f64; N_TERMS], b: &[f64; N_TERMS]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The fitted performance model: coefficients of [`TERMS`] (ms per unit) and the effective
/// cores of the profiling machine.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PerfModel {
    /// ms per unit of each term, all >= 0.
    pub coefficients: [f64; N_TERMS],
    /// Cores the slots effectively shared while measuring (between 1 and the cores given).
    pub effective_cores: f64,
}

impl PerfModel {
    /// Iteration time with one core (or accelerator) per slot, ms: the critical path. What the
    /// profile holds for layouts not measured.
    pub fn predict_isolated(&self, f: &LayoutFeatures) -> f64 {
        dot(&self.coefficients, &f.critical)
    }

    /// Iteration time on the profiling machine, ms: the critical path, or the total work spread
    /// over the effective cores when that is longer (more slots than cores).
    pub fn predict_shared(&self, f: &LayoutFeatures) -> f64 {
        self.predict_isolated(f).max(dot(&self.coefficients, &f.work) / self.effective_cores)
    }
}

/// A measured layout as the fit sees it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Observation {
    /// Data-parallel degree.
    pub dp: usize,
    /// Pipeline depth.
    pub pp: usize,
    /// Its regressors.
    pub features: LayoutFeatures,
    /// Measured step time (median), ms.
    pub measured_ms: f64,
}

/// Why a fit is impossible.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    /// No observation to fit.
    #[error("no measured layout to fit")]
    Empty,
    /// A step time that is not a positive number.
    #[error("layout D={dp} P={pp}: step time {ms} ms is not a positive number")]
    BadTime {
        /// The layout's D.
        dp: usize,
        /// The layout's P.
        pp: usize,
        /// The bad time.
        ms: f64,
    },
}

/// Sum of squared relative errors of `model` (on the profiling machine) over `obs`.
fn relative_sse(model: &PerfModel, obs: &[Observation]) -> f64 {
    obs.iter().map(|o| ((model.predict_shared(&o.features) - o.measured_ms) / o.measured_ms).powi(2)).sum()
}

/// Fits [`PerfModel`] to `obs` by non-negative least squares on relative errors. The
/// effective cores are searched from `max_cores` down to 1 (quarter steps, at most 25
/// values; the largest of equally good values wins, so an uncontended machine keeps its
/// cores); for each, the branch of the max (critical path or shared work) each layout is on is found by
/// alternating fit and re-assignment, from two starting guesses.
pub fn fit(obs: &[Observation], max_cores: f64) -> Result<PerfModel, FitError> {
    if obs.is_empty() {
        return Err(FitError::Empty);
    }
    if let Some(o) = obs.iter().find(|o| !(o.measured_ms.is_finite() && o.measured_ms > 0.0)) {
        return Err(FitError::BadTime { dp: o.dp, pp: o.pp, ms: o.measured_ms });
    }
    // Quarter steps, or 24 steps on machines with many cores.
    let top = max_cores.max(1.0);
    let step = ((top - 1.0) / 24.0).max(0.25);
    let grid: Vec<f64> = (0..).map(|k| top - step * k as f64).take_while(|&c| c >= 1.0 - 1e-9).collect();
    let mut best: Option<(PerfModel, f64)> = None;
    for cores in grid {
        let (model, sse) = fit_with_cores(obs, cores);
        if best.as_ref().is_none_or(|(_, b)| sse < b * (1.0 - 1e-9) - 1e-15) {
            best = Some((model, sse));
        }
    }
    Ok(best.expect("the grid has at least one value").0)
}

fn fit_with_cores(obs: &[Observation], cores: f64) -> (PerfModel, f64) {
    let mut best: Option<(PerfModel, f64)> = None;
    let starts: [Vec<bool>; 2] =
        [vec![false; obs.len()], obs.iter().map(|o| (o.dp * o.pp) as f64 > cores).collect()];
    for start in starts {
        let mut shared = start;
        for _ in 0..25 {
            let rows: Vec<Vec<f64>> = obs
                .iter()
                .zip(&shared)
                .map(|(o, &on_work)| {
                    let f = if on_work { o.features.work.map(|x| x / cores) } else { o.features.critical };
                    f.iter().map(|x| x / o.measured_ms).collect()
                })
                .collect();
            let x = nnls(&rows, &vec![1.0; obs.len()]);
            let mut coefficients = [0.0; N_TERMS];
            coefficients.copy_from_slice(&x);
            let model = PerfModel { coefficients, effective_cores: cores };
            let sse = relative_sse(&model, obs);
            if best.as_ref().is_none_or(|(_, b)| sse < *b) {
                best = Some((model, sse));
            }
            let next: Vec<bool> = obs
                .iter()
                .map(|o| {
                    dot(&coefficients, &o.features.work) / cores > dot(&coefficients, &o.features.critical)
                })
                .collect();
            if next == shared {
                break;
            }
            shared = next;
        }
    }
    best.expect("at least one fit")
}

/// Non-negative least squares, `argmin |A x - b|` subject to `x >= 0` (Lawson and Hanson's
/// active-set method). Coefficients are costs, so a negative one would be a fitting artefact
/// that predicts nonsense outside the measured layouts. Columns are scaled to unit norm; an
/// all-zero column gets 0.
pub fn nnls(a: &[Vec<f64>], b: &[f64]) -> Vec<f64> {
    let n = a.first().map_or(0, Vec::len);
    let norms: Vec<f64> = (0..n).map(|j| a.iter().map(|row| row[j] * row[j]).sum::<f64>().sqrt()).collect();
    let col = |i: usize, j: usize| if norms[j] > 0.0 { a[i][j] / norms[j] } else { 0.0 };
    let rows = a.len();
    let residual = |x: &[f64]| -> Vec<f64> {
        (0..rows).map(|i| b[i] - (0..n).map(|j| col(i, j) * x[j]).sum::<f64>()).collect()
    };
    let gradient =
        |r: &[f64]| -> Vec<f64> { (0..n).map(|j| (0..rows).map(|i| col(i, j) * r[i]).sum()).collect() };
    let tol = 1e-10 * b.iter().map(|v| v.abs()).sum::<f64>().max(1.0);
    let mut x = vec![0.0; n];
    let mut passive = vec![false; n];
    for _ in 0..3 * n + 3 {
        let w = gradient(&residual(&x));
        let Some(j) = (0..n)
            .filter(|&j| !passive[j] && norms[j] > 0.0 && w[j] > tol)
            .max_by(|&p, &q| w[p].total_cmp(&w[q]))
        else {
            break;
        };
        passive[j] = true;
        for _ in 0..3 * n + 3 {
            let s = least_squares_on(&passive, n, rows, &col, b);
            if (0..n).filter(|&i| passive[i]).all(|i| s[i] > 0.0) {
                x = s;
                break;
            }
            let alpha = (0..n)
                .filter(|&i| passive[i] && s[i] <= 0.0)
                .map(|i| x[i] / (x[i] - s[i]))
                .fold(f64::INFINITY, f64::min);
            for i in 0..n {
                x[i] += alpha * (s[i] - x[i]);
                if passive[i] && x[i] <= 1e-15 {
                    passive[i] = false;
                    x[i] = 0.0;
                }
            }
            if !passive.iter().any(|&p| p) {
                break;
            }
        }
    }
    x.iter().zip(&norms).map(|(v, nrm)| if *nrm > 0.0 { (v / nrm).max(0.0) } else { 0.0 }).collect()
}

/// Unconstrained least squares on the columns marked `passive` (others 0), by the normal
/// equations with a tiny ridge (columns have unit norm) so collinear terms stay solvable.
fn least_squares_on(
    passive: &[bool],
    n: usize,
    rows: usize,
    col: &dyn Fn(usize, usize) -> f64,
    b: &[f64],
) -> Vec<f64> {
    let idx: Vec<usize> = (0..n).filter(|&j| passive[j]).collect();
    let k = idx.len();
    let mut g = vec![vec![0.0; k + 1]; k];
    for (r, &p) in idx.iter().enumerate() {
        for (c, &q) in idx.iter().enumerate() {
            g[r][c] = (0..rows).map(|i| col(i, p) * col(i, q)).sum();
        }
        g[r][r] += 1e-12;
        g[r][k] = (0..rows).map(|i| col(i, p) * b[i]).sum();
    }
    // Gaussian elimination with partial pivoting on the augmented matrix.
    for c in 0..k {
        let pivot = (c..k).max_by(|&i, &j| g[i][c].abs().total_cmp(&g[j][c].abs())).unwrap_or(c);
        g.swap(c, pivot);
        let diag = g[c][c];
        if diag.abs() < 1e-300 {
            continue;
        }
        let pivot_row = g[c].clone();
        for (r, row) in g.iter_mut().enumerate() {
            let f = row[c] / diag;
            if r != c && f != 0.0 {
                for (x, p) in row.iter_mut().zip(&pivot_row).skip(c) {
                    *x -= f * p;
                }
            }
        }
    }
    let mut s = vec![0.0; n];
    for (r, &p) in idx.iter().enumerate() {
        s[p] = if g[r][r].abs() < 1e-300 { 0.0 } else { g[r][k] / g[r][r] };
    }
    s
}

/// One held-out prediction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HeldOut {
    /// Data-parallel degree.
    pub dp: usize,
    /// Pipeline depth.
    pub pp: usize,
    /// Measured step time (median), ms.
    pub measured_ms: f64,
    /// The model's prediction on the profiling machine, fitted without this layout, ms.
    pub predicted_ms: f64,
    /// `(predicted - measured) / measured`.
    pub rel_error: f64,
}

/// Errors of a model on layouts it was not fitted to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HoldoutReport {
    /// How the layouts were held out.
    pub method: String,
    /// Every held-out prediction.
    pub points: Vec<HeldOut>,
    /// Mean of `|rel_error|`.
    pub mean_abs_rel_error: f64,
    /// Largest `|rel_error|`.
    pub max_abs_rel_error: f64,
}

impl HoldoutReport {
    /// Summarises `points` (mean and max of the absolute relative errors).
    pub fn new(method: impl Into<String>, points: Vec<HeldOut>) -> Self {
        let abs: Vec<f64> = points.iter().map(|p| p.rel_error.abs()).collect();
        let mean = if abs.is_empty() { f64::NAN } else { abs.iter().sum::<f64>() / abs.len() as f64 };
        let max = abs.iter().copied().fold(f64::NAN, f64::max);
        HoldoutReport { method: method.into(), points, mean_abs_rel_error: mean, max_abs_rel_error: max }
    }

    /// The held-out point with the largest error.
    pub fn worst(&self) -> Option<&HeldOut> {
        self.points.iter().max_by(|a, b| a.rel_error.abs().total_cmp(&b.rel_error.abs()))
    }
}

fn held_out(model: &PerfModel, o: &Observation) -> HeldOut {
    let predicted_ms = model.predict_shared(&o.features);
    HeldOut {
        dp: o.dp,
        pp: o.pp,
        measured_ms: o.measured_ms,
        predicted_ms,
        rel_error: (predicted_ms - o.measured_ms) / o.measured_ms,
    }
}

/// Fits on every observation but one and predicts that one, for each; `None` with fewer than
/// three observations.
pub fn leave_one_out(obs: &[Observation], max_cores: f64) -> Option<HoldoutReport> {
    if obs.len() < 3 {
        return None;
    }
    let points = (0..obs.len())
        .map(|i| {
            let rest: Vec<Observation> =
                obs.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, o)| *o).collect();
            fit(&rest, max_cores).map(|m| held_out(&m, &obs[i]))
        })
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    Some(HoldoutReport::new(format!("leave-one-out over {} measured layouts", obs.len()), points))
}

/// Fits on the layouts of at most `split` slots and predicts the larger ones (what the profile
/// does beyond the machine); `None` when either side has too few layouts (3 to fit, 1 to test).
pub fn extrapolation(obs: &[Observation], max_cores: f64, split: usize) -> Option<HoldoutReport> {
    let (small, large): (Vec<Observation>, Vec<Observation>) = obs.iter().partition(|o| o.dp * o.pp <= split);
    if small.len() < 3 || large.is_empty() {
        return None;
    }
    let model = fit(&small, max_cores).ok()?;
    let points = large.iter().map(|o| held_out(&model, o)).collect();
    Some(HoldoutReport::new(
        format!("fit on the {} layouts with D*P <= {split}, predict the {} larger", small.len(), large.len()),
        points,
    ))
}

/// Sizes of the transfer curve for `spec`: 1 KiB and 64 KiB (latency), every distinct layer
/// state size (what a migration moves, layer by layer), and powers of 4 from 256 KiB up to the
/// whole model's state (the cost model extrapolates beyond the last point at its bandwidth).
pub fn default_transfer_sizes(spec: &ModelSpec) -> Vec<u64> {
    let full: u64 = (0..spec.num_layers()).map(|l| spec.layer_state_bytes(l)).sum();
    let mut sizes: BTreeSet<u64> = [1 << 10, 64 << 10].into_iter().collect();
    sizes.extend((0..spec.num_layers()).map(|l| spec.layer_state_bytes(l)));
    let mut s: u64 = 256 << 10;
    loop {
        sizes.insert(s);
        if s >= full {
            break;
        }
        s *= 4;
    }
    sizes.into_iter().filter(|&s| s > 0).collect()
}

/// Times state transfers of each size through parcae-net's QUIC path (`send_state` /
/// `recv_state`, the worker's default [`parcae_net::TransferOptions`]) between two endpoints
/// of a fresh cluster CA on 127.0.0.1: one untimed transfer, then `reps` timed ones per size,
/// each from the first byte sent to the receiver's verification of the last chunk. Returns
/// microseconds by size.
pub fn measure_transfer(sizes: &[u64], reps: usize) -> Result<BTreeMap<u64, Timings>, ProfilingError> {
    let err = |what: &str, e: &dyn std::fmt::Display| ProfilingError::Transfer(format!("{what}: {e}"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| err("starting the async runtime", &e))?;
    runtime.block_on(async {
        use parcae_net::{Accepted, ClusterCa, NetEndpoint, ServerMode, TransferOptions, TransportOptions};
        let ca = ClusterCa::generate("parcae-profile").map_err(|e| err("making a cluster CA", &e))?;
        let (a, b) = (
            ca.issue("profile-sender", &[]).map_err(|e| err("issuing a certificate", &e))?,
            ca.issue("profile-receiver", &[]).map_err(|e| err("issuing a certificate", &e))?,
        );
        let local: std::net::SocketAddr = ([127, 0, 0, 1], 0).into();
        let sender = NetEndpoint::bind(local, &a, ServerMode::MembersOnly, TransportOptions::default())
            .map_err(|e| err("binding", &e))?;
        let receiver = NetEndpoint::bind(local, &b, ServerMode::MembersOnly, TransportOptions::default())
            .map_err(|e| err("binding", &e))?;
        let addr = receiver.local_addr().map_err(|e| err("binding", &e))?;
        let accept = async {
            let incoming = receiver.accept().await.ok_or_else(|| err("accepting", &"endpoint closed"))?;
            match receiver.accept_incoming(incoming, None).await {
                Ok(Accepted::Peer { conn, .. }) => Ok(conn),
                Ok(other) => Err(err("accepting", &format!("{other:?}"))),
                Err(e) => Err(err("accepting", &e)),
            }
        };
        let (conn, server_conn) = tokio::join!(sender.connect(addr, "profile-receiver"), accept);
        let (conn, server_conn) = (conn.map_err(|e| err("connecting", &e))?, server_conn?);
        let opts = TransferOptions::default();
        let mut out = BTreeMap::new();
        let mut id = 0u64;
        for &size in sizes {
            let payload: Vec<u8> = (0..size).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8).collect();
            let mut samples = Vec::with_capacity(reps);
            for rep in 0..=reps.max(1) {
                id += 1;
                let start = Instant::now();
                let (sent, received) = tokio::join!(
                    parcae_net::send_state(&conn, id, &payload, &opts),
                    parcae_net::recv_state(&server_conn, &opts)
                );
                let elapsed = start.elapsed();
                sent.map_err(|e| err("sending", &e))?;
                let (_, bytes, _) = received.map_err(|e| err("receiving", &e))?;
                if bytes.len() as u64 != size {
                    return Err(err("receiving", &format!("{} bytes arrived, {size} sent", bytes.len())));
                }
                if rep > 0 {
                    samples.push(elapsed.as_secs_f64() * 1e6);
                }
            }
            out.insert(size, Timings::new(samples));
        }
        conn.close(0u32.into(), b"done");
        sender.quinn().wait_idle().await;
        Ok(out)
    })
}

/// Whether a profile entry was measured or predicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntrySource {
    /// The layout fits the machine (one core per slot) and its measured median is written.
    Measured,
    /// The model's critical-path prediction is written (the layout needs more cores, or was
    /// not trained).
    Predicted,
}

/// One candidate layout in the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayoutRow {
    /// Data-parallel degree.
    pub dp: usize,
    /// Pipeline depth.
    pub pp: usize,
    /// The measurement, if the layout was trained.
    pub measured: Option<Measurement>,
    /// The model fitted on every measurement, on the profiling machine, ms.
    pub fitted_shared_ms: f64,
    /// The leave-one-out prediction (fitted without this layout), ms.
    pub held_out_ms: Option<f64>,
    /// The model's prediction with one core per slot, ms.
    pub isolated_ms: f64,
    /// What the profile holds, ms.
    pub profile_ms: f64,
    /// Where `profile_ms` comes from.
    pub source: EntrySource,
}

/// Everything `profile` found, and the profile it wrote.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileReport {
    /// The profiled model's name.
    pub model_name: String,
    /// The profiled model and batch.
    pub spec: ModelSpec,
    /// Device, cores and build.
    pub machine: String,
    /// Cores the slots share (layouts with more slots are contended).
    pub cores: usize,
    /// Largest D x P written as measured: `cores`, or fewer if the fit found fewer effective
    /// cores.
    pub fitting_slots: usize,
    /// One row per candidate layout.
    pub rows: Vec<LayoutRow>,
    /// The model fitted to every measurement.
    pub model: PerfModel,
    /// Mean absolute relative error of `model` on the measurements it was fitted to.
    pub fit_mean_abs_rel_error: f64,
    /// Leave-one-out held-out errors.
    pub leave_one_out: Option<HoldoutReport>,
    /// Small-to-large held-out errors.
    pub extrapolation: Option<HoldoutReport>,
    /// Transfer time by size, us.
    pub transfer_us: BTreeMap<u64, Timings>,
    /// Slowest stage's build time by depth, ms.
    pub model_build_ms_by_pp: BTreeMap<u32, f64>,
    /// The profile (validated by `parcae_profile::Profile::from_data`).
    pub profile: ProfileFile,
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Measures, fits and builds the profile (see the module docs). `progress` receives one line
/// per finished measurement. The profile is validated but not written ([`write_profile`]).
pub fn run_profile(
    opts: &ProfileOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<ProfileReport, ProfilingError> {
    let spec = &opts.spec;
    spec.validate()?;
    if opts.steps == 0 {
        return Err(ProfilingError::Options("--steps must be at least 1".into()));
    }
    let candidates = candidate_layouts(spec, opts.max_instances);
    if candidates.is_empty() {
        return Err(ProfilingError::Options(format!(
            "no layout with at most {} instances can run this model",
            opts.max_instances
        )));
    }
    let to_measure: Vec<(usize, usize)> =
        candidates.iter().copied().filter(|(d, p)| d * p <= opts.measure_max).collect();
    let mut measured: BTreeMap<(usize, usize), Measurement> = BTreeMap::new();
    for m in measure_layouts(spec, &to_measure, opts.device, opts.warmup_steps, opts.steps)? {
        progress(&format!(
            "measured D={} P={}: median {:.1} ms [{:.1} - {:.1}] over {} steps, loss {:.3}",
            m.dp, m.pp, m.step_ms.median, m.step_ms.min, m.step_ms.max, opts.steps, m.last_loss
        ));
        measured.insert((m.dp, m.pp), m);
    }
    if measured.is_empty() {
        return Err(ProfilingError::Options(format!(
            "--measure-max {} leaves no layout to measure",
            opts.measure_max
        )));
    }
    let features: BTreeMap<(usize, usize), LayoutFeatures> = candidates
        .iter()
        .map(|&(d, p)| Ok(((d, p), layout_features(spec, &Layout::new(spec, d, p)?))))
        .collect::<Result<_, LayoutError>>()?;
    let obs: Vec<Observation> = measured
        .values()
        .map(|m| Observation {
            dp: m.dp,
            pp: m.pp,
            features: features[&(m.dp, m.pp)],
            measured_ms: m.step_ms.median,
        })
        .collect();
    let cores = opts.cores.max(1) as f64;
    let model = fit(&obs, cores).map_err(|e| ProfilingError::Options(e.to_string()))?;
    let fit_err = obs
        .iter()
        .map(|o| ((model.predict_shared(&o.features) - o.measured_ms) / o.measured_ms).abs())
        .sum::<f64>()
        / obs.len() as f64;
    let loo = leave_one_out(&obs, cores);
    let largest = obs.iter().map(|o| o.dp * o.pp).max().unwrap_or(1);
    let extra = extrapolation(&obs, cores, (largest / 2).max(1));

    let depths: BTreeSet<usize> = candidates.iter().map(|&(_, p)| p).collect();
    let mut build = BTreeMap::new();
    for &p in &depths {
        build.insert(p as u32, round3(measure_model_build(spec, p, opts.device, opts.build_reps)?));
    }
    progress(&format!("model build (slowest stage) by depth: {build:?} ms"));

    let sizes = if opts.transfer_sizes.is_empty() {
        default_transfer_sizes(spec)
    } else {
        opts.transfer_sizes.clone()
    };
    let transfer = measure_transfer(&sizes, opts.transfer_reps)?;
    progress(&format!(
        "transfer over QUIC: {}",
        transfer.iter().map(|(s, t)| format!("{s} B {:.0} us", t.median)).collect::<Vec<_>>().join(", ")
    ));

    // A layout fits the machine when each slot had a core of its own while measured: at most
    // `cores` slots, and no more than the effective cores the fit found (other load on the
    // machine leaves fewer).
    let fitting_slots = opts.cores.max(1).min((model.effective_cores + 1e-9).floor() as usize).max(1);
    let rows: Vec<LayoutRow> = candidates
        .iter()
        .map(|&(d, p)| {
            let f = &features[&(d, p)];
            let m = measured.get(&(d, p)).cloned();
            let isolated_ms = model.predict_isolated(f);
            let fits = d * p <= fitting_slots;
            let (profile_ms, source) = match &m {
                Some(m) if fits => (m.step_ms.median, EntrySource::Measured),
                _ => (isolated_ms, EntrySource::Predicted),
            };
            let held_out_ms = loo
                .as_ref()
                .and_then(|r| r.points.iter().find(|h| (h.dp, h.pp) == (d, p)))
                .map(|h| h.predicted_ms);
            LayoutRow {
                dp: d,
                pp: p,
                measured: m,
                fitted_shared_ms: model.predict_shared(f),
                held_out_ms,
                isolated_ms,
                profile_ms,
                source,
            }
        })
        .collect();

    let machine = format!(
        "{:?}, {} cores, {} build",
        opts.device,
        opts.cores,
        if cfg!(debug_assertions) { "debug" } else { "release" }
    );
    let mut report = ProfileReport {
        model_name: opts.model_name.clone(),
        spec: spec.clone(),
        machine,
        cores: opts.cores,
        fitting_slots,
        rows,
        model,
        fit_mean_abs_rel_error: fit_err,
        leave_one_out: loo,
        extrapolation: extra,
        transfer_us: transfer,
        model_build_ms_by_pp: build,
        profile: empty_profile(),
    };
    report.profile = build_profile(opts, &report);
    Profile::from_data(report.profile.clone(), "<parcae-worker profile>")?;
    Ok(report)
}

fn empty_profile() -> ProfileFile {
    ProfileFile {
        source: None,
        instance: Instance {
            instance_type: String::new(),
            gpus: 1,
            gpu: None,
            network_gbps: None,
            on_demand_usd_per_hour: 0.0,
            spot_usd_per_hour: 0.0,
            price_source: None,
        },
        units: BTreeMap::new(),
        p2p_us_by_bytes: BTreeMap::new(),
        models: BTreeMap::new(),
        layer_params: BTreeMap::new(),
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn list(rows: &[&LayoutRow]) -> String {
    if rows.is_empty() {
        return "none".to_string();
    }
    rows.iter().map(|r| format!("({},{})", r.dp, r.pp)).collect::<Vec<_>>().join(" ")
}

/// The profile file for `report` (see `profiles/README.md` for the format).
fn build_profile(opts: &ProfileOptions, report: &ProfileReport) -> ProfileFile {
    let spec = &opts.spec;
    let name = &opts.model_name;
    let measured: Vec<&LayoutRow> =
        report.rows.iter().filter(|r| r.source == EntrySource::Measured).collect();
    let predicted: Vec<&LayoutRow> =
        report.rows.iter().filter(|r| r.source == EntrySource::Predicted).collect();
    let coefficients = TERMS
        .iter()
        .zip(report.model.coefficients)
        .map(|(t, c)| format!("{t} {c:.4}"))
        .collect::<Vec<_>>()
        .join(", ");
    let holdout = |r: &Option<HoldoutReport>| match r {
        Some(r) => format!(
            "{}: mean |error| {}, max {}",
            r.method,
            pct(r.mean_abs_rel_error),
            pct(r.max_abs_rel_error)
        ),
        None => "not enough layouts".to_string(),
    };
    let proc_init = match opts.proc_init_ms {
        Some(_) => "proc_init_ms MEASURED (worker binary start and exit)",
        None => "proc_init_ms NOT MEASURED (example profile's value)",
    };
    let source = format!(
        "MEASURED AND PREDICTED by `parcae-worker profile` on this machine ({machine}; one instance = {hw}, \
         one libtorch thread per slot). Model `{name}` = parcae_cluster::{spec:?}. Layouts trained \
         in-process (train_local: one thread per slot, in-process links and all-reduce, the real StageTrainer), \
         {warm} warm-up then {steps} timed steps, median. MEASURED entries (D*P <= {fit}, one core per slot): \
         {m}. PREDICTED entries (critical-path model, one core per slot): {p}. Model: iteration_ms = sum of \
         coefficient x term ({coefficients}; terms in parcae_worker::profile::LayoutFeatures), on this machine \
         max(that, total work / {c_eff:.2} effective cores). Held-out error: {loo}; {ext}. p2p_us_by_bytes \
         MEASURED: parcae-net QUIC state transfer (mutual TLS, checksummed chunks) on 127.0.0.1, median of {reps}. \
         model_build_ms_by_pp MEASURED (slowest stage's StageTrainer build). {proc_init}; rendezvous_ms and \
         restart_extra_ms NOT MEASURED (defaults). Prices: {prices}.",
        machine = report.machine,
        hw = opts.hardware,
        warm = opts.warmup_steps,
        steps = opts.steps,
        fit = report.fitting_slots,
        m = list(&measured),
        p = list(&predicted),
        c_eff = report.model.effective_cores,
        loo = holdout(&report.leave_one_out),
        ext = holdout(&report.extrapolation),
        reps = opts.transfer_reps,
        prices = opts.price_source,
    );
    let throughput = report
        .rows
        .iter()
        .map(|r| {
            let iteration_ms = round3(r.profile_ms);
            ThroughputEntry {
                dp: r.dp as u32,
                pp: r.pp as u32,
                iteration_ms,
                samples_per_s: round3(spec.global_batch as f64 * 1000.0 / iteration_ms),
            }
        })
        .collect();
    let units = [
        ("iteration_ms", "ms"),
        ("samples_per_s", "samples/s"),
        ("p2p_us", "microseconds per transfer of that many bytes"),
        ("model_build_ms", "ms"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let entry = ModelEntry {
        micro_batch_size: spec.micro_batch as u32,
        global_batch_size: spec.global_batch as u32,
        proc_init_ms: round3(opts.proc_init_ms.unwrap_or(30.0)),
        rendezvous_ms: opts.rendezvous_ms,
        restart_extra_ms: opts.restart_extra_ms,
        model_build_ms_by_pp: report.model_build_ms_by_pp.clone(),
        throughput,
    };
    let layer_params = LayerParams {
        layers: (0..spec.num_layers()).map(|l| spec.layer_params(l)).collect(),
        optimizer_states_per_param: 2,
        bytes_per_value: 4,
        arch: Some(Arch {
            micro_batch_size: Some(spec.micro_batch as u32),
            nlayers: Some(spec.n_blocks as u32),
            seq_length: Some(spec.seq_len as u32),
            hidden_size: Some(spec.d_model as u32),
            nheads: Some(spec.n_heads as u32),
            vocab_size: Some(spec.vocab as u32),
            stage_p2p_num: Some((spec.micro_batch * spec.seq_len * spec.d_model) as u64),
            extra: BTreeMap::new(),
        }),
    };
    ProfileFile {
        source: Some(source),
        instance: Instance {
            instance_type: opts.instance_type.clone(),
            gpus: 1,
            gpu: Some(opts.hardware.clone()),
            network_gbps: None,
            on_demand_usd_per_hour: opts.on_demand_usd_per_hour,
            spot_usd_per_hour: opts.spot_usd_per_hour,
            price_source: Some(opts.price_source.clone()),
        },
        units,
        p2p_us_by_bytes: report.transfer_us.iter().map(|(&s, t)| (s, round3(t.median.max(0.001)))).collect(),
        models: [(name.clone(), entry)].into_iter().collect(),
        layer_params: [(name.clone(), layer_params)].into_iter().collect(),
    }
}

/// Writes `profile` as pretty JSON to `path` (creating its directory) and checks that the cost
/// model loads the file back, as `parcae-host bench/run --profile` will.
pub fn write_profile(profile: &ProfileFile, path: &Path) -> Result<(), ProfilingError> {
    let io = |source| ProfilingError::Io { path: path.to_path_buf(), source };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let text = serde_json::to_string_pretty(profile).map_err(|e| io(std::io::Error::other(e)))?;
    std::fs::write(path, text + "\n").map_err(io)?;
    Profile::load(path)?;
    Ok(())
}

fn fmt_size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// The report as a table for people: per layout the measurement (median [min-max]), the fit,
/// the held-out prediction and its error, and what the profile holds; then the model, the
/// held-out summaries, the transfer curve and the build times.
pub fn render_table(report: &ProfileReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let params: u64 = (0..report.spec.num_layers()).map(|l| report.spec.layer_params(l)).sum();
    let _ = writeln!(
        out,
        "model {} ({} layers, {} parameters, global batch {} = {} micro-batches of {}) on {}",
        report.model_name,
        report.spec.num_layers(),
        params,
        report.spec.global_batch,
        report.spec.micro_batches(),
        report.spec.micro_batch,
        report.machine
    );
    let _ = writeln!(
        out,
        "{:>2} {:>2} {:>5}  {:>26}  {:>8}  {:>9} {:>7}  {:>10}  entry",
        "D", "P", "slots", "measured ms median [min-max]", "fit ms", "held-out", "error", "profile ms",
    );
    for r in &report.rows {
        let measured = match &r.measured {
            Some(m) => format!("{:.1} [{:.1}-{:.1}]", m.step_ms.median, m.step_ms.min, m.step_ms.max),
            None => "-".to_string(),
        };
        let (held, err) = match (r.held_out_ms, &r.measured) {
            (Some(h), Some(m)) => {
                (format!("{h:.1}"), format!("{:+.1}%", (h / m.step_ms.median - 1.0) * 100.0))
            }
            _ => ("-".to_string(), "-".to_string()),
        };
        let entry = match r.source {
            EntrySource::Measured => "measured",
            EntrySource::Predicted if r.measured.is_some() => "predicted (measured contended)",
            EntrySource::Predicted => "predicted (not run)",
        };
        let _ = writeln!(
            out,
            "{:>2} {:>2} {:>5}  {:>26}  {:>8.1}  {:>9} {:>7}  {:>10.1}  {}",
            r.dp,
            r.pp,
            r.dp * r.pp,
            measured,
            r.fitted_shared_ms,
            held,
            err,
            r.profile_ms,
            entry
        );
    }
    let _ = writeln!(
        out,
        "performance model (ms; one core per slot = critical path; on this machine max(critical, work / {:.2} \
         effective cores)):",
        report.model.effective_cores
    );
    for (t, c) in TERMS.iter().zip(report.model.coefficients) {
        let _ = writeln!(out, "  {t:>22} {c:10.4}");
    }
    let _ =
        writeln!(out, "fit error on the fitted layouts: mean |error| {}", pct(report.fit_mean_abs_rel_error));
    for h in [&report.leave_one_out, &report.extrapolation] {
        match h {
            Some(h) => {
                let worst = h.worst().map(|w| format!(" (D={} P={})", w.dp, w.pp)).unwrap_or_default();
                let _ = writeln!(
                    out,
                    "held-out, {}: mean |error| {}, max {}{}",
                    h.method,
                    pct(h.mean_abs_rel_error),
                    pct(h.max_abs_rel_error),
                    worst
                );
            }
            None => {
                let _ = writeln!(out, "held-out: not enough measured layouts");
            }
        }
    }
    let transfer = report
        .transfer_us
        .iter()
        .map(|(s, t)| format!("{} {:.0} us", fmt_size(*s), t.median))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(out, "transfer (QUIC on loopback, median): {transfer}");
    if let Some((&size, t)) = report.transfer_us.iter().next_back() {
        let _ = writeln!(out, "  bandwidth at {}: {:.0} MB/s", fmt_size(size), size as f64 / t.median);
    }
    let build = report
        .model_build_ms_by_pp
        .iter()
        .map(|(p, ms)| format!("P={p} {ms:.1} ms"))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(out, "model build (slowest stage): {build}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observations(spec: &ModelSpec, model: &PerfModel) -> Vec<Observation> {
        candidate_layouts(spec, 8)
            .into_iter()
            .map(|(d, p)| {
                let features = layout_features(spec, &Layout::new(spec, d, p).unwrap());
                Observation { dp: d, pp: p, features, measured_ms: model.predict_shared(&features) }
            })
            .collect()
    }

    /// With 3.5 effective cores, the deep and narrow layouts are on the critical-path branch, the
    /// wide ones on the shared-work branch (with 2, too few critical-path layouts would be left
    /// to identify all six terms: the fit would match every measurement but not the truth).
    const TRUE: PerfModel =
        PerfModel { coefficients: [90.0, 0.8, 4.0, 6.0, 20.0, 3.0], effective_cores: 3.5 };

    #[test]
    fn candidates_are_runnable_and_within_the_cost_models_depth() {
        let spec = ModelSpec::default();
        let c = candidate_layouts(&spec, 8);
        // 8 layers: P <= 7 for the cost model; D <= 8 micro-batches.
        assert_eq!(c.len(), 7 + 4 + 2 + 2 + 4);
        assert!(c.iter().all(|&(d, p)| d * p <= 8 && p <= 7 && Layout::new(&spec, d, p).is_ok()));
        assert_eq!(c.first(), Some(&(1, 1)));
    }

    #[test]
    fn features_follow_the_gpipe_schedule() {
        let spec = ModelSpec::default();
        let one = layout_features(&spec, &Layout::new(&spec, 1, 1).unwrap());
        let total: u64 = (0..spec.num_layers()).map(|l| spec.layer_params(l)).sum();
        // One slot: m ticks of the whole model, no hop, no all-reduce; critical == work.
        assert!((one.critical[0] - 8.0 * total as f64 / 1e6).abs() < 1e-12);
        assert_eq!(one.critical[1], 8.0 * 8.0);
        assert_eq!((one.critical[2], one.critical[3]), (0.0, 0.0));
        assert_eq!(one.critical, one.work);
        let f = layout_features(&spec, &Layout::new(&spec, 2, 2).unwrap());
        // 4 micro-batches per replica, 2 stages: 5 ticks; the slowest stage has 4 layers.
        assert_eq!(f.critical[1], 5.0 * 4.0);
        assert_eq!(f.work[5], 4.0);
        assert!(f.critical[3] > 0.0 && f.critical[2] > 0.0);
    }

    #[test]
    fn nnls_matches_least_squares_and_clips_negative_terms() {
        // y = 2 a + 3 b exactly: recovered.
        let a = vec![vec![1.0, 0.0], vec![0.0, 1.0], vec![1.0, 1.0]];
        let x = nnls(&a, &[2.0, 3.0, 5.0]);
        assert!((x[0] - 2.0).abs() < 1e-9 && (x[1] - 3.0).abs() < 1e-9, "{x:?}");
        // Unconstrained optimum has b < 0: NNLS sets b = 0 and fits a alone.
        // (y = x - 0.5 would need a negative intercept; the best through 0 is 11/14.)
        let x = nnls(&[vec![1.0, 1.0], vec![2.0, 1.0], vec![3.0, 1.0]], &[0.5, 1.5, 2.5]);
        assert!((x[0] - 11.0 / 14.0).abs() < 1e-9 && x[1] == 0.0, "{x:?}");
        // Every term would have to be negative: all zero.
        let x = nnls(&[vec![1.0, 2.0], vec![1.0, 2.0]], &[-1.0, -1.0]);
        assert_eq!(x, vec![0.0, 0.0]);
    }

    #[test]
    fn fit_recovers_known_coefficients_and_cores() {
        let spec = ModelSpec::default();
        let obs = observations(&spec, &TRUE);
        // Some layouts on each branch of the max, so both halves are identified.
        let contended = obs
            .iter()
            .filter(|o| TRUE.predict_shared(&o.features) > TRUE.predict_isolated(&o.features))
            .count();
        assert!(contended >= 3 && obs.len() - contended >= 8, "{contended} of {} contended", obs.len());
        let model = fit(&obs, 6.0).unwrap();
        assert_eq!(model.effective_cores, 3.5);
        for o in &obs {
            let (got, want) = (model.predict_shared(&o.features), o.measured_ms);
            assert!((got / want - 1.0).abs() < 1e-6, "D={} P={}: {got} vs {want}", o.dp, o.pp);
            let (got, want) = (model.predict_isolated(&o.features), TRUE.predict_isolated(&o.features));
            assert!((got / want - 1.0).abs() < 1e-4, "isolated D={} P={}: {got} vs {want}", o.dp, o.pp);
        }
        // Left out, every layout is predicted exactly by the others, except the widest: without
        // it, nothing pins the shared branch at D = 8 and the fit lands a little off.
        let loo = leave_one_out(&obs, 6.0).unwrap();
        assert_eq!(loo.points.len(), obs.len());
        for h in &loo.points {
            let bound = if (h.dp, h.pp) == (8, 1) { 0.05 } else { 1e-6 };
            assert!(h.rel_error.abs() < bound, "{h:?}");
        }
    }

    #[test]
    fn uncontended_machine_keeps_its_cores() {
        let spec = ModelSpec::default();
        let truth = PerfModel { effective_cores: 16.0, ..TRUE };
        let obs = observations(&spec, &truth);
        let model = fit(&obs, 16.0).unwrap();
        assert_eq!(model.effective_cores, 16.0);
        for (got, want) in model.coefficients.iter().zip(truth.coefficients) {
            assert!((got - want).abs() < 1e-6 * want.max(1.0), "{:?}", model.coefficients);
        }
    }

    #[test]
    fn held_out_error_is_measured_on_the_point_left_out() {
        let spec = ModelSpec::default();
        let mut obs = observations(&spec, &TRUE);
        // One measurement 50% too slow: left out, the others pin the true model, so its
        // prediction is the true time, 1/3 below what was "measured".
        let i = obs.iter().position(|o| (o.dp, o.pp) == (2, 2)).unwrap();
        obs[i].measured_ms *= 1.5;
        let loo = leave_one_out(&obs, 4.0).unwrap();
        let p = loo.points.iter().find(|h| (h.dp, h.pp) == (2, 2)).unwrap();
        assert!((p.rel_error + 1.0 / 3.0).abs() < 1e-4, "{p:?}");
        assert_eq!(loo.max_abs_rel_error, p.rel_error.abs());
        assert_eq!(loo.worst().map(|w| (w.dp, w.pp)), Some((2, 2)));
        let mean = loo.points.iter().map(|h| h.rel_error.abs()).sum::<f64>() / loo.points.len() as f64;
        assert!((loo.mean_abs_rel_error - mean).abs() < 1e-15);
        // Summary arithmetic on hand-made points.
        let h = |e: f64| HeldOut {
            dp: 1,
            pp: 1,
            measured_ms: 100.0,
            predicted_ms: 100.0 * (1.0 + e),
            rel_error: e,
        };
        let r = HoldoutReport::new("t", vec![h(0.1), h(-0.3), h(0.2)]);
        assert!((r.mean_abs_rel_error - 0.2).abs() < 1e-12 && (r.max_abs_rel_error - 0.3).abs() < 1e-12);
        // Extrapolation fits only small layouts and tests only large ones.
        let ext = extrapolation(&observations(&spec, &TRUE), 4.0, 4).unwrap();
        assert!(ext.points.iter().all(|h| h.dp * h.pp > 4) && !ext.points.is_empty());
        assert!(leave_one_out(&obs[..2], 4.0).is_none());
    }

    #[test]
    fn transfer_sizes_cover_layers_and_the_whole_model() {
        let spec = ModelSpec::default();
        let sizes = default_transfer_sizes(&spec);
        let full: u64 = (0..spec.num_layers()).map(|l| spec.layer_state_bytes(l)).sum();
        assert!(sizes.windows(2).all(|w| w[0] < w[1]));
        assert!(sizes.contains(&spec.layer_state_bytes(1)) && *sizes.last().unwrap() >= full);
    }

    /// A real, tiny run: three layouts, two timed steps each, QUIC transfers of two sizes;
    /// the profile validates and marks what fits two cores as measured.
    #[test]
    fn tiny_real_profile_validates() {
        let spec = ModelSpec {
            vocab: 16,
            d_model: 16,
            n_heads: 2,
            n_blocks: 2,
            seq_len: 8,
            global_batch: 4,
            micro_batch: 1,
            learning_rate: 1e-3,
            seed: 3,
        };
        let opts = ProfileOptions {
            warmup_steps: 1,
            steps: 2,
            max_instances: 4,
            measure_max: 2,
            cores: 2,
            transfer_sizes: vec![1024, 64 << 10],
            transfer_reps: 2,
            build_reps: 1,
            proc_init_ms: Some(12.5),
            model_name: "tiny".into(),
            ..ProfileOptions::new(spec.clone(), Device::Cpu)
        };
        let mut lines = Vec::new();
        let report = run_profile(&opts, &mut |l| lines.push(l.to_string())).unwrap();
        assert_eq!(lines.len(), 3 + 2, "{lines:?}");
        // What fits two cores, or fewer if other load left less than two effective cores.
        let measured: Vec<(usize, usize)> =
            report.rows.iter().filter(|r| r.source == EntrySource::Measured).map(|r| (r.dp, r.pp)).collect();
        assert_eq!(report.rows.iter().filter(|r| r.measured.is_some()).count(), 3);
        assert!(
            measured.first() == Some(&(1, 1)) && measured.iter().all(|&(d, p)| d * p <= 2),
            "{measured:?}"
        );
        assert_eq!(measured.len(), if report.fitting_slots == 2 { 3 } else { 1 });
        assert!(report.rows.iter().any(|r| r.source == EntrySource::Predicted && r.measured.is_none()));
        assert!(report.leave_one_out.is_some());
        let profile = Profile::from_data(report.profile.clone(), "tiny.json").unwrap();
        let entry = profile.model("tiny").unwrap();
        assert_eq!(entry.throughput.len(), report.rows.len());
        assert_eq!((entry.micro_batch_size, entry.global_batch_size, entry.proc_init_ms), (1, 4, 12.5));
        let lp = profile.layer_params("tiny").unwrap();
        assert_eq!(lp.layers, (0..spec.num_layers()).map(|l| spec.layer_params(l)).collect::<Vec<_>>());
        assert_eq!(profile.data().p2p_us_by_bytes.len(), 2);
        let source = profile.data().source.as_deref().unwrap();
        assert!(source.contains("MEASURED entries") && source.contains("(2,2)"), "{source}");
        let table = render_table(&report);
        assert!(table.contains("held-out") && table.contains("measured"), "{table}");
        let path = std::env::temp_dir().join(format!("parcae-profile-test-{}.json", std::process::id()));
        write_profile(&report.profile, &path).unwrap();
        assert_eq!(Profile::load(&path).unwrap().data(), &report.profile);
        let _ = std::fs::remove_file(&path);
    }
}
