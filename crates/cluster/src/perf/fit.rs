//! The performance model: per-layout regressors on the GPipe critical path and the total work,
//! and their non-negative least-squares fit with the profiling machine's effective cores.

use crate::{Layout, ModelSpec};
use serde::Serialize;

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
/// The regressors of one layout, for the critical path of one step (`critical`) and for the
/// total CPU work of the step summed over slots (`work`); both in [`TERMS`] order:
///
/// | term | critical path | total work |
/// |---|---|---|
/// | compute per parameter | `(m_r + P - 1) x S` | `m x total` |
/// | compute per layer | `(m_r + P - 1) x L` | `m x layers` |
/// | pipeline hop | `(m_r + P - 1) x a` if P > 1 | `2 m (P - 1) a` |
/// | all-reduce | `(D - 1) x g` | `(D - 1) x G` in process, `D (D - 1) x G` between processes |
/// | optimizer | `S` | `D x total` |
/// | fixed | 1 | `D x P` |
///
/// `m` micro-batches per step, `m_r` of them on the busiest replica, `S` / `L` the parameters
/// (millions) / layers of the slowest stage (most parameters), `a` one activation (MB), `g` /
/// `G` the gradient bytes (MB) of the slowest stage / of the model. GPipe runs `m_r + P - 1`
/// forward and as many backward ticks, each as long as the slowest stage. The all-reduce term
/// counts the `D - 1` other replicas' gradients a replica adds. Its total work depends on
/// where the replicas run ([`GradientExchange`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LayoutFeatures {
    /// Regressors of the critical path (one core per slot).
    pub critical: [f64; N_TERMS],
    /// Regressors of the work all slots do together.
    pub work: [f64; N_TERMS],
}

/// How the replicas of a stage exchange gradients, which sets the all-reduce's total work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GradientExchange {
    /// Threads of one process (`parcae-worker profile`): the buffers are summed once for all,
    /// `(D - 1) x G` of work.
    InProcess,
    /// Worker processes (`node::links`): every replica sends its buffer to every other and
    /// each sums them, `D (D - 1) x G` of work (and as much encrypted traffic).
    BetweenProcesses,
}

/// [`LayoutFeatures`] of `layout` with the replicas exchanging gradients as `exchange` says.
pub fn layout_features(spec: &ModelSpec, layout: &Layout, exchange: GradientExchange) -> LayoutFeatures {
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
        match exchange {
            GradientExchange::InProcess => (d - 1.0) * total * 4.0,
            GradientExchange::BetweenProcesses => d * (d - 1.0) * total * 4.0,
        },
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

/// Synthetic observations from a known model, shared by the fit and hold-out tests.
#[cfg(test)]
pub(super) mod fixtures {
    use super::*;

    /// Every (D, P) of at most 8 slots the worker runs, P below the layer count (the cost
    /// model's deepest split).
    fn candidate_layouts(spec: &ModelSpec) -> Vec<(usize, usize)> {
        let deepest = spec.num_layers().saturating_sub(1).max(1);
        (1..=8usize)
            .flat_map(|d| (1..=deepest.min(8 / d)).map(move |p| (d, p)))
            .filter(|&(d, p)| Layout::new(spec, d, p).is_ok())
            .collect()
    }

    pub(crate) fn observations(spec: &ModelSpec, model: &PerfModel) -> Vec<Observation> {
        candidate_layouts(spec)
            .into_iter()
            .map(|(d, p)| {
                let features =
                    layout_features(spec, &Layout::new(spec, d, p).unwrap(), GradientExchange::InProcess);
                Observation { dp: d, pp: p, features, measured_ms: model.predict_shared(&features) }
            })
            .collect()
    }

    /// With 3.5 effective cores, the deep and narrow layouts are on the critical-path branch, the
    /// wide ones on the shared-work branch (with 2, too few critical-path layouts would be left
    /// to identify all six terms: the fit would match every measurement but not the truth).
    pub(crate) const TRUE: PerfModel =
        PerfModel { coefficients: [90.0, 0.8, 4.0, 6.0, 20.0, 3.0], effective_cores: 3.5 };
}

#[cfg(test)]
mod tests {
    use super::fixtures::{TRUE, observations};
    use super::*;
    use crate::perf::leave_one_out;

    #[test]
    fn features_follow_the_gpipe_schedule() {
        let spec = ModelSpec::default();
        let one = layout_features(&spec, &Layout::new(&spec, 1, 1).unwrap(), GradientExchange::InProcess);
        let total: u64 = (0..spec.num_layers()).map(|l| spec.layer_params(l)).sum();
        // One slot: m ticks of the whole model, no hop, no all-reduce; critical == work.
        assert!((one.critical[0] - 8.0 * total as f64 / 1e6).abs() < 1e-12);
        assert_eq!(one.critical[1], 8.0 * 8.0);
        assert_eq!((one.critical[2], one.critical[3]), (0.0, 0.0));
        assert_eq!(one.critical, one.work);
        let f = layout_features(&spec, &Layout::new(&spec, 2, 2).unwrap(), GradientExchange::InProcess);
        // 4 micro-batches per replica, 2 stages: 5 ticks; the slowest stage has 4 layers.
        assert_eq!(f.critical[1], 5.0 * 4.0);
        assert_eq!(f.work[5], 4.0);
        assert!(f.critical[3] > 0.0 && f.critical[2] > 0.0);
        // Between processes every replica sums every other's buffer: D times the work, the
        // same critical path.
        let g =
            layout_features(&spec, &Layout::new(&spec, 2, 2).unwrap(), GradientExchange::BetweenProcesses);
        assert_eq!(g.critical, f.critical);
        assert_eq!(g.work[3], 2.0 * f.work[3]);
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
}
