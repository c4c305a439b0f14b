//! The Parcae artifact's availability predictor: ARIMA(1,1,0) on the
//! per-interval instance count, fitted natively (no statistics library exists
//! inside a Wasm guest).
//!
//! Behaviour follows the public artifact (`JF-D/Parcae`, `liveput/trace.py`
//! for the window and the short-history fallback, `liveput/trace_prediction.py`
//! `TracePrediction.predict_next_intervals(method='ARIMA')` for the rest):
//!
//! 1. History window `W` from the horizon `H` ([`window_for_horizon`]). With
//!    `W` or fewer intervals of history the artifact does not fit: it repeats the
//!    last count (persistence).
//! 2. Clean the last `W` counts: remove spikes of at most 3 intervals
//!    ([`remove_spikes`], the artifact's `remove_outlier_all(size=3)`), then
//!    flatten everything before a turning point ([`flatten_turnpoint`], its
//!    `handle_turnpoint`).
//! 3. If the cleaned window is monotone, damp forecast moves in that direction
//!    ([`trend_penalties`]).
//! 4. Fit ARIMA(1,1,0) with a constant (statsmodels' `ARIMA(order=(1,1,0))`,
//!    whose default `trend='c'` is a drift: the mean of the differences), or
//!    repeat the last count when the cleaned window is constant. Forecast the
//!    levels and round them half to even (`np.rint`).
//! 5. Clamp every step after the first to within `+-3` of the first, then every
//!    step to `[min, max]` of the fleet. The artifact's bounds are the fleet's
//!    (`lower_bound=8`, `upper_bound=32` for its 32-instance cluster), not the
//!    history's: here they are the request's `fleet_min` and `fleet_max`.
//! 6. Re-chain the steps from the last observed count, scaling each step's
//!    rise by the arrival penalty and each fall by the preemption penalty,
//!    rounding half to even (Python's `round`).
//!
//! The fit is the exact Gaussian likelihood of a stationary AR(1) with mean on
//! the differenced window (what statsmodels' default `css-mle` converges to),
//! not conditional least squares: with the artifact's windows of 8 to 17 counts
//! there are only 7 to 16 differences, and there conditional least squares drops
//! the first one and ignores the stationarity of the start, so the two can differ
//! noticeably. The exact likelihood is cheap here: the mean and the variance
//! have closed forms for a given `phi` (concentrated likelihood), which leaves a
//! one-dimensional search over `phi` in `(-1, 1)`.
//!
//! Deliberate departures from the artifact, each because the original is not
//! something a deterministic, stateless guest should do:
//! - The trend penalties are worked out afresh for every forecast. The artifact
//!   stores them on the predictor object and never resets them, so once any
//!   window was monotone every later forecast stays damped.
//! - When the clamped forecast is flat but the window is not, the artifact adds
//!   `np.random.poisson` preemptions (unseeded) drawn from the window's removal
//!   counts; that random term is left out.
//! - Every forecast, the persistence fallback included, ends clamped to
//!   `[fleet_min, fleet_max]` so that it passes [`crate::validate::check_forecast`]
//!   (the artifact's fallback is not clamped, and its damping step can in rare
//!   cases leave the bounds).
//! - Horizons the artifact refuses (below 5, or 6) get a window of 8.

use crate::{IntervalStats, PredictRequest, Predictor};

/// The largest `|phi|` the fit may return: the likelihood is unbounded at the
/// unit circle for series an AR(1) fits exactly (e.g. alternating differences).
pub const PHI_LIMIT: f64 = 0.999;

/// ARIMA(1,1,0) forecast of the instance count (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arima {
    /// Intervals of history to fit on; `None` chooses from the horizon like the
    /// artifact ([`window_for_horizon`]). At least 3 are used.
    pub window: Option<usize>,
    /// Steps after the first stay within this many instances of the first (3).
    pub clamp_step: u32,
    /// Spikes of up to this many intervals are removed before fitting (3).
    pub max_spike_len: usize,
}

impl Default for Arima {
    fn default() -> Self {
        Self { window: None, clamp_step: 3, max_spike_len: 3 }
    }
}

impl Predictor for Arima {
    fn predict(&mut self, request: &PredictRequest) -> Result<Vec<IntervalStats>, String> {
        let counts: Vec<u32> = request.history.iter().map(|s| s.instances).collect();
        let forecast = self.forecast_counts(&counts, request.horizon, request.fleet_min, request.fleet_max);
        Ok(IntervalStats::chain_from(counts.last().copied().unwrap_or(0), &forecast))
    }
}

impl Arima {
    /// The window this predictor fits on for `horizon`.
    pub fn window_for(&self, horizon: u32) -> usize {
        self.window.unwrap_or_else(|| window_for_horizon(horizon)).max(3)
    }

    /// Forecast the instance count for the next `horizon` intervals from the
    /// per-interval counts `counts` (oldest first), within
    /// `[min(fleet_min, fleet_max), fleet_max]`.
    pub fn forecast_counts(&self, counts: &[u32], horizon: u32, fleet_min: u32, fleet_max: u32) -> Vec<u32> {
        let mut steps = Steps::ARTIFACT;
        self.forecast_counts_with(counts, horizon, fleet_min, fleet_max, &mut steps)
    }

    fn forecast_counts_with(
        &self,
        counts: &[u32],
        horizon: u32,
        fleet_min: u32,
        fleet_max: u32,
        steps: &mut Steps,
    ) -> Vec<u32> {
        let h = horizon as usize;
        let (lo, hi) = (fleet_min.min(fleet_max), fleet_max);
        let last = counts.last().copied().unwrap_or(0);
        let w = self.window_for(horizon);
        // trace.py: history up to and including interval i is used only once
        // i >= num_past_intervals, i.e. with more than W intervals observed.
        if h == 0 || counts.len() <= w {
            return vec![last.clamp(lo, hi); h];
        }

        let mut window = remove_spikes(&counts[counts.len() - w..], self.max_spike_len);
        if steps.turnpoint {
            window = flatten_turnpoint(&window);
        }
        let (in_penalty, out_penalty) = match &mut steps.penalties {
            Penalties::Off => (1.0, 1.0),
            Penalties::PerCall => trend_penalties(&window),
            Penalties::Sticky(state) => {
                let (fresh_in, fresh_out) = trend_penalties(&window);
                if fresh_in < 1.0 {
                    state.0 = fresh_in;
                }
                if fresh_out < 1.0 {
                    state.1 = fresh_out;
                }
                *state
            }
        };

        let levels: Vec<f64> = window.iter().map(|&c| f64::from(c)).collect();
        let last_f = f64::from(last);
        let mut estimate: Vec<f64> = if window.iter().all(|&c| c == window[0]) {
            vec![last_f; h]
        } else {
            let fit = fit_ar1_differenced(&levels);
            let last_diff = levels[levels.len() - 1] - levels[levels.len() - 2];
            fit.forecast_levels(last_f, last_diff, h)
                .into_iter()
                .map(|x| if x.is_finite() { x.round_ties_even() } else { last_f })
                .collect()
        };

        // Control the range of change per prediction, then the fleet bounds.
        let first = estimate[0];
        let step = f64::from(self.clamp_step);
        for x in estimate.iter_mut().skip(1) {
            *x = x.min(first + step).max(first - step);
        }
        let (lo_f, hi_f) = (f64::from(lo), f64::from(hi));
        for x in &mut estimate {
            *x = x.min(hi_f).max(lo_f);
        }

        // Re-chain from the last count with damped rises and falls.
        let (mut previous_estimate, mut current) = (last_f, last_f);
        estimate
            .into_iter()
            .map(|x| {
                let rise = (x - previous_estimate).max(0.0);
                let fall = (previous_estimate - x).max(0.0);
                previous_estimate = x;
                current = (current + rise * in_penalty - fall * out_penalty).round_ties_even();
                current.clamp(lo_f, hi_f) as u32
            })
            .collect()
    }
}

/// Which of the artifact's extra steps to apply (tests compare variants).
#[derive(Debug, Clone, Copy)]
struct Steps {
    turnpoint: bool,
    penalties: Penalties,
}

#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(test), allow(dead_code, reason = "only tests build the variants other than `PerCall`"))]
enum Penalties {
    Off,
    /// Worked out afresh for each forecast (what [`Arima`] does).
    PerCall,
    /// The artifact's: once lowered, a penalty stays (arrival, preemption).
    Sticky((f64, f64)),
}

impl Steps {
    const ARTIFACT: Steps = Steps { turnpoint: true, penalties: Penalties::PerCall };
}

/// History window for a horizon, as in the artifact's `SpotTrace` (`trace.py`):
/// 14 -> 17, 12 -> 12, 10 -> 10, 9 -> 9, 8 -> 8, 7 -> 8, 5 -> 10, and the
/// horizon itself for 11, 13 and 15 or more. The artifact rejects the other
/// horizons (below 5, and 6); they get 8 here.
pub fn window_for_horizon(h: u32) -> usize {
    match h {
        14 => 17,
        12 => 12,
        10 => 10,
        9 => 9,
        8 => 8,
        7 => 8,
        5 => 10,
        11 | 13 => h as usize,
        h if h >= 15 => h as usize,
        _ => 8,
    }
}

/// Remove spikes (and dips) of at most `max_len` intervals: a run of `len`
/// values that all differ from the equal values on both sides of it is set to
/// those values. Longest runs first, each length in one left-to-right pass that
/// sees its own earlier repairs (the artifact's `remove_outlier_all`). A change
/// at either end of the series is never a spike.
pub fn remove_spikes(counts: &[u32], max_len: usize) -> Vec<u32> {
    let mut a = counts.to_vec();
    let longest = max_len.min(a.len().saturating_sub(2));
    for size in (1..=longest).rev() {
        for i in 0..a.len() - 1 - size {
            let edge = a[i];
            if a[i + 1 + size] == edge && a[i + 1..=i + size].iter().all(|&x| x != edge) {
                a[i + 1..=i + size].fill(edge);
            }
        }
    }
    a
}

/// The artifact's `handle_turnpoint`: if the series dips below both of its ends,
/// everything before the last occurrence of the minimum is set to the minimum;
/// otherwise, if it rises above both ends, everything before the last maximum is
/// set to the maximum. A fit then sees only the most recent trend.
pub fn flatten_turnpoint(counts: &[u32]) -> Vec<u32> {
    let mut a = counts.to_vec();
    let (Some(&first), Some(&last)) = (a.first(), a.last()) else { return a };
    let (min, max) = (a.iter().copied().min().unwrap_or(0), a.iter().copied().max().unwrap_or(0));
    let target = if min < first.min(last) {
        min
    } else if max > first.max(last) {
        max
    } else {
        return a;
    };
    let pos = a.iter().rposition(|&x| x == target).unwrap_or(0);
    a[..pos].fill(target);
    a
}

/// Damping of forecast (rises, falls): a non-decreasing window that rose by 5
/// to 9 instances over its minimum damps rises to 0.75, by 10 or more to 0.5;
/// falls alike for a non-increasing window. 1.0 means undamped.
pub fn trend_penalties(counts: &[u32]) -> (f64, f64) {
    let damping = |delta: u32| match delta {
        0..=4 => 1.0,
        5..=9 => 0.75,
        _ => 0.5,
    };
    let (Some(&last), Some(&min), Some(&max)) = (counts.last(), counts.iter().min(), counts.iter().max())
    else {
        return (1.0, 1.0);
    };
    let rising = counts.windows(2).all(|p| p[0] <= p[1]);
    let falling = counts.windows(2).all(|p| p[0] >= p[1]);
    let in_penalty = if rising { damping(last - min) } else { 1.0 };
    let out_penalty = if falling { damping(max - last) } else { 1.0 };
    (in_penalty, out_penalty)
}

/// AR(1) with mean fitted to the first differences `d` of a series:
/// `d[t] - intercept = phi * (d[t-1] - intercept) + e[t]`, `e ~ N(0, sigma2)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ar1Fit {
    /// Autoregressive coefficient, within `[-PHI_LIMIT, PHI_LIMIT]`.
    pub phi: f64,
    /// The drift: the mean change per interval (statsmodels' `const` of an
    /// ARIMA(1,1,0) with `trend='c'`). The regression constant is
    /// `intercept * (1 - phi)`.
    pub intercept: f64,
    /// Innovation variance (maximum likelihood, divided by the number of
    /// differences); 0 for an exact fit.
    pub sigma2: f64,
}

impl Ar1Fit {
    const FLAT: Ar1Fit = Ar1Fit { phi: 0.0, intercept: 0.0, sigma2: 0.0 };

    /// Forecast `steps` levels after a series that ended at `last_level` with
    /// last change `last_diff`: the differences decay geometrically from
    /// `last_diff` towards the drift and are summed onto `last_level`.
    pub fn forecast_levels(&self, last_level: f64, last_diff: f64, steps: usize) -> Vec<f64> {
        let (mut level, mut deviation) = (last_level, last_diff - self.intercept);
        (0..steps)
            .map(|_| {
                deviation *= self.phi;
                level += self.intercept + deviation;
                level
            })
            .collect()
    }
}

/// Fit an AR(1) with mean to the first differences of `levels` by exact
/// Gaussian maximum likelihood (stationary start). For a given `phi` the
/// likelihood is maximised by a closed-form mean and variance, so only `phi`
/// is searched: a grid over `(-1, 1)` refined by golden section. Ties (flat
/// likelihoods, e.g. constant differences) go to the `phi` nearest 0. Fewer than
/// two differences, or non-finite input, give `phi = 0` with the mean change as
/// the drift (0 when unknown).
pub fn fit_ar1_differenced(levels: &[f64]) -> Ar1Fit {
    if levels.iter().any(|x| !x.is_finite()) {
        return Ar1Fit::FLAT;
    }
    let diffs: Vec<f64> = levels.windows(2).map(|p| p[1] - p[0]).collect();
    let n = diffs.len();
    if n < 2 {
        return Ar1Fit { intercept: diffs.first().copied().unwrap_or(0.0), ..Ar1Fit::FLAT };
    }
    // Work in units of the largest change: phi is scale-free, the mean and the
    // variance scale back, and nothing can overflow.
    let scale = diffs.iter().fold(0.0f64, |m, d| m.max(d.abs()));
    if !(scale > 0.0 && scale.is_finite()) {
        return Ar1Fit::FLAT;
    }
    let x: Vec<f64> = diffs.iter().map(|d| d / scale).collect();
    let profile = ConcentratedAr1 { x: &x };

    // Grid 0, +-1/200, +-2/200, ... so the first of equal values is nearest 0.
    const GRID: i32 = 199;
    let mut best = (0.0, profile.log_likelihood(0.0));
    for k in 1..=GRID {
        for phi in [f64::from(k) / 200.0, -f64::from(k) / 200.0] {
            let ll = profile.log_likelihood(phi);
            if ll > best.1 {
                best = (phi, ll);
            }
        }
    }
    let (mut a, mut b) = ((best.0 - 0.005).max(-PHI_LIMIT), (best.0 + 0.005).min(PHI_LIMIT));
    let ratio = (5f64.sqrt() - 1.0) / 2.0;
    let (mut c, mut d) = (b - ratio * (b - a), a + ratio * (b - a));
    let (mut fc, mut fd) = (profile.log_likelihood(c), profile.log_likelihood(d));
    for _ in 0..60 {
        if fc >= fd {
            (b, d, fd) = (d, c, fc);
            c = b - ratio * (b - a);
            fc = profile.log_likelihood(c);
        } else {
            (a, c, fc) = (c, d, fd);
            d = a + ratio * (b - a);
            fd = profile.log_likelihood(d);
        }
    }
    let (refined, refined_ll) = if fc >= fd { (c, fc) } else { (d, fd) };
    let phi = if refined_ll > best.1 { refined } else { best.0 };
    let mean = profile.mean(phi);
    let sigma2 = profile.sum_of_squares(phi, mean) / n as f64;
    Ar1Fit { phi, intercept: mean * scale, sigma2: sigma2 * scale * scale }
}

/// The exact AR(1) log-likelihood with the mean and the variance concentrated out.
struct ConcentratedAr1<'a> {
    x: &'a [f64],
}

impl ConcentratedAr1<'_> {
    /// The mean maximising the likelihood for `phi`:
    /// `((1+phi) x1 + sum (x_t - phi x_{t-1})) / ((1+phi) + (n-1)(1-phi))`.
    fn mean(&self, phi: f64) -> f64 {
        let n = self.x.len() as f64;
        let inner: f64 = self.x.windows(2).map(|p| p[1] - phi * p[0]).sum();
        ((1.0 + phi) * self.x[0] + inner) / ((1.0 + phi) + (n - 1.0) * (1.0 - phi))
    }

    /// `(1-phi^2)(x1-mu)^2 + sum ((x_t-mu) - phi (x_{t-1}-mu))^2`.
    fn sum_of_squares(&self, phi: f64, mean: f64) -> f64 {
        let first = self.x[0] - mean;
        let rest: f64 = self.x.windows(2).map(|p| ((p[1] - mean) - phi * (p[0] - mean)).powi(2)).sum();
        (1.0 - phi * phi) * first * first + rest
    }

    /// `-n/2 ln(S/n) + 1/2 ln(1-phi^2)` (constants dropped). A residual sum
    /// below a tiny floor counts as the floor, so exact fits stay finite.
    fn log_likelihood(&self, phi: f64) -> f64 {
        let n = self.x.len() as f64;
        let s = self.sum_of_squares(phi, self.mean(phi)).max(1e-24 * n);
        -0.5 * n * (s / n).ln() + 0.5 * (1.0 - phi * phi).ln()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reactive::Persistence;
    use crate::validate::check_forecast;

    /// SplitMix64: a small deterministic generator for test inputs.
    struct Rng(u64);

    impl Rng {
        fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            if n == 0 { 0 } else { self.next_u64() % n }
        }

        fn uniform(&mut self) -> f64 {
            (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
        }

        /// Standard normal (Box-Muller).
        fn normal(&mut self) -> f64 {
            let u = 1.0 - self.uniform();
            let v = self.uniform();
            (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
        }
    }

    fn history(counts: &[u32]) -> Vec<IntervalStats> {
        let mut previous = counts.first().copied().unwrap_or(0);
        counts
            .iter()
            .map(|&instances| {
                let s = IntervalStats {
                    instances,
                    arrivals: instances.saturating_sub(previous),
                    preemptions: previous.saturating_sub(instances),
                };
                previous = instances;
                s
            })
            .collect()
    }

    fn request(counts: &[u32], horizon: u32, fleet_min: u32, fleet_max: u32) -> PredictRequest {
        PredictRequest {
            history_by_type: Vec::new(),
            history: history(counts),
            horizon,
            interval_ms: 60_000,
            fleet_min,
            fleet_max,
        }
    }

    fn predict_checked(arima: &mut Arima, req: &PredictRequest) -> Vec<IntervalStats> {
        let forecast = arima.predict(req).expect("arima never fails");
        check_forecast(req, &forecast).unwrap_or_else(|e| panic!("{e} for {req:?}: {forecast:?}"));
        let (lo, hi) = (req.fleet_min.min(req.fleet_max), req.fleet_max);
        assert!(forecast.iter().all(|s| (lo..=hi).contains(&s.instances)), "{req:?}: {forecast:?}");
        forecast
    }

    #[test]
    fn windows_follow_the_artifact_table() {
        let table = [(5, 10), (7, 8), (8, 8), (9, 9), (10, 10), (11, 11), (12, 12), (13, 13), (14, 17)];
        for (h, w) in table {
            assert_eq!(window_for_horizon(h), w, "H={h}");
        }
        assert_eq!(window_for_horizon(15), 15);
        assert_eq!(window_for_horizon(40), 40);
        for h in [0, 1, 2, 3, 4, 6] {
            assert_eq!(window_for_horizon(h), 8, "H={h}");
        }
        assert_eq!(Arima { window: Some(0), ..Arima::default() }.window_for(8), 3);
    }

    #[test]
    fn forecasts_pass_the_host_check_on_random_histories() {
        let mut rng = Rng(0x5eed);
        let mut arima = Arima::default();
        for case in 0..3000 {
            let fleet_max = match case % 5 {
                0 => 0,
                1 => 1 + rng.below(8) as u32,
                4 => u32::MAX - rng.below(3) as u32,
                _ => 8 + rng.below(40) as u32,
            };
            let fleet_min = if case % 7 == 0 { fleet_max.saturating_add(3) } else { rng.below(10) as u32 };
            let len = rng.below(40) as usize;
            let mut count = rng.below(u64::from(fleet_max) + 1) as i64;
            let mut counts = Vec::with_capacity(len);
            for _ in 0..len {
                count += match rng.below(10) {
                    0 => -(rng.below(6) as i64),
                    1 => rng.below(6) as i64,
                    2 => rng.below(3) as i64 - 1,
                    3 => (rng.below(2001) as i64 - 1000) * 4_000_000,
                    _ => 0,
                };
                // Observed counts may exceed the fleet's declared bounds.
                count = count.clamp(0, i64::from(u32::MAX));
                counts.push(count as u32);
            }
            let horizon = rng.below(20) as u32;
            if case % 3 == 0 {
                arima.window = Some(rng.below(20) as usize);
            } else {
                arima.window = None;
            }
            arima.clamp_step = [0, 1, 3, u32::MAX][case % 4];
            arima.max_spike_len = [0, 3, 5, usize::MAX][(case / 4) % 4];
            predict_checked(&mut arima, &request(&counts, horizon, fleet_min, fleet_max));
        }
    }

    #[test]
    fn linear_trends_are_extrapolated_within_the_clamp() {
        let mut arima = Arima::default();
        let rising: Vec<u32> = (10..=20).collect();
        let up = predict_checked(&mut arima, &request(&rising, 8, 0, 64));
        let up: Vec<u32> = up.iter().map(|s| s.instances).collect();
        assert!(up[0] > 20, "{up:?}");
        assert!(up.windows(2).all(|p| p[0] <= p[1]), "{up:?}");
        assert!(up.iter().all(|&c| c <= up[0] + 3), "{up:?}");
        assert!(*up.last().unwrap() > up[0], "{up:?}");

        let falling: Vec<u32> = (10..=20).rev().collect();
        let down = predict_checked(&mut arima, &request(&falling, 8, 0, 64));
        let down: Vec<u32> = down.iter().map(|s| s.instances).collect();
        assert!(down[0] < 10, "{down:?}");
        assert!(down.windows(2).all(|p| p[0] >= p[1]), "{down:?}");
        assert!(down.iter().all(|&c| c + 3 >= down[0]), "{down:?}");

        // Steep rises: the first step may jump, the rest stay within 3 of it.
        let steep: Vec<u32> = (0..12).map(|i| 5 * i).collect();
        let counts = arima.forecast_counts(&steep, 8, 0, 1000);
        assert!(counts[0] > 55, "{counts:?}");
        assert!(counts.iter().all(|&c| c <= counts[0] + 3), "{counts:?}");
        // ...and the fleet bounds win.
        assert!(arima.forecast_counts(&steep, 8, 0, 57).iter().all(|&c| c <= 57));
        assert!(arima.forecast_counts(&falling, 8, 9, 64).iter().all(|&c| c >= 9));
    }

    #[test]
    fn short_spikes_are_removed_long_ones_kept() {
        assert_eq!(remove_spikes(&[5, 5, 3, 3, 5, 5], 3), [5; 6]);
        assert_eq!(remove_spikes(&[5, 3, 3, 3, 3, 5], 3), [5, 3, 3, 3, 3, 5]);
        assert_eq!(remove_spikes(&[5, 2, 4, 1, 5], 3), [5; 5]);
        assert_eq!(remove_spikes(&[7, 9, 7, 7], 3), [7; 4]);
        assert_eq!(remove_spikes(&[7, 9, 7, 7], 0), [7, 9, 7, 7]);
        // A run touching either end is a change, not a spike.
        assert_eq!(remove_spikes(&[3, 3, 5, 5, 5], 3), [3, 3, 5, 5, 5]);
        assert_eq!(remove_spikes(&[5, 5, 3, 3], 3), [5, 5, 3, 3]);
        assert_eq!(remove_spikes(&[], 3), Vec::<u32>::new());
        assert_eq!(remove_spikes(&[1, 2], usize::MAX), [1, 2]);
        // A run containing the edge value is not one spike.
        assert_eq!(remove_spikes(&[5, 3, 5, 3, 3, 3, 3], 3), [5, 5, 5, 3, 3, 3, 3]);

        // The spike does not reach the fit: a dip in a flat window changes nothing.
        let dipped = [8, 8, 8, 8, 8, 8, 6, 6, 8, 8, 8];
        assert_eq!(Arima::default().forecast_counts(&dipped, 8, 0, 32), [8; 8]);
    }

    #[test]
    fn turnpoints_and_penalties_follow_the_artifact() {
        assert_eq!(flatten_turnpoint(&[10, 8, 6, 5, 7, 9, 12]), [5, 5, 5, 5, 7, 9, 12]);
        assert_eq!(flatten_turnpoint(&[3, 6, 9, 6, 4]), [9, 9, 9, 6, 4]);
        assert_eq!(flatten_turnpoint(&[3, 4, 5]), [3, 4, 5]);
        assert_eq!(flatten_turnpoint(&[]), Vec::<u32>::new());
        assert_eq!(trend_penalties(&[5, 5, 5, 5, 7, 9, 12]), (0.75, 1.0));
        assert_eq!(trend_penalties(&[20, 15, 10]), (1.0, 0.5));
        assert_eq!(trend_penalties(&[7, 7, 7]), (1.0, 1.0));
        assert_eq!(trend_penalties(&[1, 3, 2]), (1.0, 1.0));
        assert_eq!(trend_penalties(&[]), (1.0, 1.0));
    }

    #[test]
    fn exact_likelihood_recovers_ar1_coefficient() {
        let mut rng = Rng(42);
        for (phi, drift) in [(0.6, 0.3), (-0.4, 0.0), (0.0, -1.0)] {
            let mut level = 100.0;
            let mut d = drift;
            let mut levels = vec![level];
            for _ in 0..5000 {
                d = drift + phi * (d - drift) + rng.normal();
                level += d;
                levels.push(level);
            }
            let fit = fit_ar1_differenced(&levels);
            assert!((fit.phi - phi).abs() < 0.1, "phi {phi}: {fit:?}");
            assert!((fit.intercept - drift).abs() < 0.2, "drift {drift}: {fit:?}");
            assert!((fit.sigma2 - 1.0).abs() < 0.1, "{fit:?}");
        }
    }

    #[test]
    fn fit_matches_statsmodels_exact_mle() {
        // statsmodels 0.15 `ARIMA(y, order=(1, 1, 0), trend="t").fit()` (exact
        // likelihood; `trend="t"` on levels is the drift of the differences):
        // (series, ar.L1, drift, sigma2, first and eighth forecast).
        let reference = [
            ("10 12 11 15 14 18 17 20", -0.908_770, 1.259_872, 0.537_361, 19.678_496, 29.635_896),
            ("32 30 31 27 28 24 25 22", -0.908_769, -1.259_883, 0.537_358, 22.321_481, 12.364_015),
            ("5 5 6 9 10 10 14 13 15", -0.589_393, 1.275_546, 1.486_735, 15.848_558, 24.939_634),
            (
                "20 21 23 22 26 24 29 27 31 30 33 31 35 34 37 36 39",
                -0.942_659,
                1.135_031,
                0.440_539,
                38.377_001,
                47.739_527,
            ),
        ];
        for (series, phi, drift, sigma2, first, eighth) in reference {
            let levels: Vec<f64> = series.split(' ').map(|v| v.parse().unwrap()).collect();
            let fit = fit_ar1_differenced(&levels);
            assert!((fit.phi - phi).abs() < 2e-3, "{series}: {fit:?}");
            assert!((fit.intercept - drift).abs() < 2e-3, "{series}: {fit:?}");
            assert!((fit.sigma2 - sigma2).abs() < 2e-3 * sigma2, "{series}: {fit:?}");
            let n = levels.len();
            let forecast = fit.forecast_levels(levels[n - 1], levels[n - 1] - levels[n - 2], 8);
            assert!(
                (forecast[0] - first).abs() < 1e-2 && (forecast[7] - eighth).abs() < 1e-2,
                "{forecast:?}"
            );
        }
    }

    #[test]
    fn fit_is_finite_on_degenerate_series() {
        let cases: Vec<Vec<f64>> = vec![
            vec![],
            vec![3.0],
            vec![3.0, 5.0],
            vec![4.0; 10],
            (0..10).map(f64::from).collect(),
            vec![0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0],
            vec![0.0, f64::from(u32::MAX), 0.0, f64::from(u32::MAX), 1.0],
            vec![1.0, f64::NAN, 2.0],
            vec![1.0, f64::INFINITY],
            vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0],
        ];
        for levels in &cases {
            let fit = fit_ar1_differenced(levels);
            assert!(fit.phi.is_finite() && fit.intercept.is_finite() && fit.sigma2.is_finite(), "{fit:?}");
            assert!(fit.phi.abs() <= PHI_LIMIT && fit.sigma2 >= 0.0, "{fit:?}");
        }
        let constant_steps = fit_ar1_differenced(&cases[4]);
        assert_eq!((constant_steps.phi, constant_steps.intercept, constant_steps.sigma2), (0.0, 1.0, 0.0));
        let alternating = fit_ar1_differenced(&cases[5]);
        assert!(alternating.phi < -0.9, "{alternating:?}");
    }

    #[test]
    fn degenerate_requests_do_not_panic() {
        let mut arima = Arima::default();
        let max = u32::MAX;
        let cases: Vec<(Vec<u32>, u32, u32, u32)> = vec![
            (vec![], 8, 0, 32),
            (vec![], 0, 0, 32),
            (vec![5], 8, 0, 32),
            (vec![40; 3], 8, 0, 32),
            (vec![7; 20], 8, 0, 32),
            (vec![0; 20], 12, 0, 0),
            (vec![3; 20], 8, 0, 0),
            (vec![max; 20], 8, 0, max),
            ((0..20).map(|i| if i % 2 == 0 { 0 } else { max }).collect(), 14, 0, max),
            ((0..20).map(|i| max - i).collect(), 8, 0, max),
            ((0..20).map(|i| i % 2).collect(), 8, 0, 32),
            ((0..20).collect(), 8, 30, 10),
            ((0..20).collect(), 1000, 0, 32),
        ];
        for (counts, horizon, fleet_min, fleet_max) in cases {
            let req = request(&counts, horizon, fleet_min, fleet_max);
            let forecast = predict_checked(&mut arima, &req);
            assert_eq!(forecast.len(), horizon as usize);
        }
        // Too little history: persistence, within the fleet.
        let req = request(&[5, 6, 7], 4, 0, 32);
        assert_eq!(arima.predict(&req).unwrap(), Persistence.predict(&req).unwrap());
        assert_eq!(arima.forecast_counts(&[40; 3], 2, 0, 32), [32, 32]);
    }

    /// Per-minute instance counts of the p3 trace: the count after the last
    /// event of each minute (events fall on minute boundaries).
    fn p3_minute_counts() -> Vec<u32> {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/traces/aws-p3/p3-counts.csv");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("{}: {e} (these tests expect the `shared` folder beside the checkout)", path.display())
        });
        let mut counts: Vec<u32> = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let (t, c) = line.split_once(',').expect("t_ms,count");
            let (Ok(t), Ok(c)) = (t.trim().parse::<u64>(), c.trim().parse::<u32>()) else {
                continue; // a header
            };
            let minute = (t / 60_000) as usize;
            while counts.len() <= minute {
                let carried = counts.last().copied().unwrap_or(0);
                counts.push(carried);
            }
            counts[minute] = c;
        }
        counts
    }

    struct Errors {
        first: f64,
        mean: f64,
        last: f64,
        n: usize,
    }

    fn errors(
        counts: &[u32],
        horizon: usize,
        from: usize,
        mut predict: impl FnMut(&[u32]) -> Vec<u32>,
    ) -> Errors {
        let (mut first, mut mean, mut last, mut n) = (0.0, 0.0, 0.0, 0);
        for t in from..counts.len() - horizon {
            let forecast = predict(&counts[..=t]);
            let truth = &counts[t + 1..=t + horizon];
            let err = |k: usize| (f64::from(forecast[k]) - f64::from(truth[k])).abs();
            first += err(0);
            mean += (0..horizon).map(err).sum::<f64>() / horizon as f64;
            last += err(horizon - 1);
            n += 1;
        }
        let n_f = n as f64;
        Errors { first: first / n_f, mean: mean / n_f, last: last / n_f, n }
    }

    #[test]
    fn accuracy_on_the_p3_trace() {
        let counts = p3_minute_counts();
        assert!(counts.len() > 600, "{} minutes", counts.len());
        let arima = Arima::default();
        let h = 8u32;
        let from = arima.window_for(h); // first forecast that fits (more than W observed)
        println!("p3 trace: {} minutes; forecasts from minute {from}, H = {h}", counts.len());
        println!("{:<48} {:>7} {:>9} {:>9}", "predictor", "step 1", "mean 1-8", "step 8");
        let report = |name: &str, e: Errors| {
            println!("{name:<48} {:>7.3} {:>9.3} {:>9.3}   ({} forecasts)", e.first, e.mean, e.last, e.n);
            assert!(e.first.is_finite() && e.mean.is_finite() && e.last.is_finite());
        };
        report("persistence", errors(&counts, 8, from, |c| vec![*c.last().unwrap(); 8]));
        for (lo, hi) in [(0, 32), (8, 32)] {
            let name = format!("arima (artifact steps), fleet [{lo}, {hi}]");
            report(&name, errors(&counts, 8, from, |c| arima.forecast_counts(c, h, lo, hi)));
        }
        let mut sticky = Steps { turnpoint: true, penalties: Penalties::Sticky((1.0, 1.0)) };
        report(
            "arima, sticky penalties (artifact bug), [8,32]",
            errors(&counts, 8, from, |c| arima.forecast_counts_with(c, h, 8, 32, &mut sticky)),
        );
        let mut plain = Steps { turnpoint: false, penalties: Penalties::Off };
        report(
            "arima, spikes+fit+clamps only, [0, 32]",
            errors(&counts, 8, from, |c| arima.forecast_counts_with(c, h, 0, 32, &mut plain)),
        );
        // The same forecast through the Predictor interface passes the host's check.
        let mut predictor = Arima::default();
        for t in (0..counts.len()).step_by(7) {
            predict_checked(&mut predictor, &request(&counts[..=t], h, 8, 32));
        }
    }
}
