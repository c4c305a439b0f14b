//! Request arrival processes: Gamma renewal arrivals at one rate or at a
//! per-minute rate schedule.
//!
//! Why here: the simulator needs arrival times, and the host must be able to
//! reproduce them from a seed. SpotServe's artifact draws Gamma inter-arrivals
//! too, but its `cv` parameter is the Gamma *scale in ms* (the true coefficient
//! of variation of its traces is about 0.05); here `cv` is the true
//! coefficient of variation (1 = Poisson), so burstiness is a parameter one
//! can reason about.
//!
//! A rate schedule is followed by time rescaling: gaps are drawn in
//! "operational time" (unit-mean Gamma gaps of shape `1/cv²`), and mapped back
//! through the cumulative rate `Λ(t)`. Each minute then receives on average
//! exactly its rate's share of arrivals, a minute at rate 0 receives none, and
//! the coefficient of variation holds within each constant-rate stretch.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::ServeSimError;

/// Most arrivals one call may generate (about 400 MB of times): more is
/// refused with an error instead of exhausting memory.
pub const MAX_ARRIVALS: f64 = 50_000_000.0;

/// One minute, ms: the step of a rate schedule.
const MINUTE_MS: f64 = 60_000.0;

/// Arrival times of requests, ms from the start, ascending: a Gamma renewal
/// process with mean inter-arrival `1000 / rate_per_s` ms and coefficient of
/// variation `cv` (shape `1/cv²`), over `[0, duration_ms)`, reproducible from
/// `seed`.
pub fn gamma_arrivals(
    rate_per_s: f64,
    cv: f64,
    duration_ms: f64,
    seed: u64,
) -> Result<Vec<f64>, ServeSimError> {
    if !(rate_per_s.is_finite() && rate_per_s > 0.0) {
        return Err(ServeSimError::invalid(
            "rate_per_s",
            format!("{rate_per_s} must be a finite number > 0"),
        ));
    }
    scheduled_arrivals(&[rate_per_s], cv, duration_ms, seed)
}

/// Arrival times with a per-minute rate schedule: `rates_per_minute[k]`
/// requests per second during minute `k` (beyond the end, the last rate), ms
/// from the start, ascending, over `[0, duration_ms)`. Gamma inter-arrivals
/// with the given true coefficient of variation (shape `1/cv²`, mean `1/rate`),
/// drawn piecewise by time rescaling (see the module doc).
pub fn scheduled_arrivals(
    rates_per_minute: &[f64],
    cv: f64,
    duration_ms: f64,
    seed: u64,
) -> Result<Vec<f64>, ServeSimError> {
    if rates_per_minute.is_empty() {
        return Err(ServeSimError::invalid("rates_per_minute", "the schedule is empty"));
    }
    for (k, &rate) in rates_per_minute.iter().enumerate() {
        if !(rate.is_finite() && rate >= 0.0) {
            return Err(ServeSimError::invalid(
                format!("rates_per_minute[{k}]"),
                format!("{rate} must be a finite number >= 0"),
            ));
        }
    }
    if !(cv.is_finite() && cv > 0.0) {
        return Err(ServeSimError::invalid("cv", format!("{cv} must be a finite number > 0")));
    }
    if !(duration_ms.is_finite() && duration_ms >= 0.0) {
        return Err(ServeSimError::invalid(
            "duration_ms",
            format!("{duration_ms} must be a finite number >= 0"),
        ));
    }
    let schedule = Schedule { rates: rates_per_minute };
    let expected = schedule.cumulative(duration_ms);
    if expected > MAX_ARRIVALS {
        return Err(ServeSimError::invalid(
            "rates_per_minute",
            format!(
                "about {expected:.0} arrivals over {duration_ms} ms, more than the {MAX_ARRIVALS:.0} allowed"
            ),
        ));
    }
    let shape = 1.0 / (cv * cv);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity((expected * 1.05) as usize + 16);
    let mut cursor = Cursor::default();
    let mut operational = 0.0;
    loop {
        // Unit-mean gap: Gamma(shape, scale = 1 / shape).
        operational += gamma(&mut rng, shape) / shape;
        let Some(t) = schedule.invert(&mut cursor, operational) else { break };
        if t >= duration_ms {
            break;
        }
        out.push(t);
    }
    Ok(out)
}

/// A per-minute rate schedule, requests per second, the last rate held forever.
struct Schedule<'a> {
    rates: &'a [f64],
}

/// Where [`Schedule::invert`] left off: arrivals come in order, so the inverse
/// walks the minutes once.
#[derive(Default)]
struct Cursor {
    minute: usize,
    /// Expected arrivals before `minute` starts.
    before: f64,
}

impl Schedule<'_> {
    fn rate(&self, minute: usize) -> f64 {
        self.rates.get(minute).or(self.rates.last()).copied().unwrap_or(0.0)
    }

    /// Expected arrivals in `[0, t_ms)`.
    fn cumulative(&self, t_ms: f64) -> f64 {
        let listed = self.rates.len();
        let whole = (t_ms / MINUTE_MS).floor();
        if whole < listed as f64 {
            let minute = whole as usize;
            let before: f64 = self.rates.iter().take(minute).map(|r| r * 60.0).sum();
            before + self.rate(minute) * (t_ms - whole * MINUTE_MS) / 1000.0
        } else {
            let all: f64 = self.rates.iter().map(|r| r * 60.0).sum();
            all + self.rate(listed) * (t_ms - listed as f64 * MINUTE_MS) / 1000.0
        }
    }

    /// The time (ms) at which the cumulative rate reaches `target`, or `None`
    /// when it never does (the rate stays 0 from some minute on).
    fn invert(&self, cursor: &mut Cursor, target: f64) -> Option<f64> {
        loop {
            let rate = self.rate(cursor.minute);
            if cursor.minute + 1 >= self.rates.len() {
                // The last listed rate holds from here on.
                if rate <= 0.0 {
                    return None;
                }
                return Some(cursor.minute as f64 * MINUTE_MS + (target - cursor.before) / rate * 1000.0);
            }
            let in_minute = rate * 60.0;
            if target < cursor.before + in_minute {
                return Some(cursor.minute as f64 * MINUTE_MS + (target - cursor.before) / rate * 1000.0);
            }
            cursor.before += in_minute;
            cursor.minute += 1;
        }
    }
}

/// Uniform in (0, 1].
fn unit(rng: &mut StdRng) -> f64 {
    1.0 - rng.random::<f64>()
}

/// Standard normal (Box-Muller).
fn normal(rng: &mut StdRng) -> f64 {
    let u = unit(rng);
    let v = rng.random::<f64>();
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// Gamma(shape, scale 1) by Marsaglia and Tsang (2000); shapes below 1 by
/// boosting: `G(a) = G(a + 1) * U^(1/a)`.
fn gamma(rng: &mut StdRng, shape: f64) -> f64 {
    if shape < 1.0 {
        let boosted = gamma(rng, shape + 1.0);
        return boosted * unit(rng).powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = 1.0 + c * x;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u = unit(rng);
        if u < 1.0 - 0.0331 * x.powi(4) || u.ln() < 0.5 * x * x + d * (1.0 - v + v.ln()) {
            return d * v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moments(times: &[f64]) -> (f64, f64) {
        let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
        let n = gaps.len() as f64;
        let mean = gaps.iter().sum::<f64>() / n;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, var.sqrt() / mean)
    }

    /// 20k samples: mean inter-arrival within 3% of 1/rate, sample CV within
    /// 10% of cv, for bursty, Poisson and near-periodic processes.
    #[test]
    fn gamma_gaps_have_the_asked_mean_and_cv() {
        for (rate, cv) in [(10.0, 1.0), (2.0, 0.3), (5.0, 2.0), (0.5, 0.05)] {
            let duration = 20_000.0 / rate * 1000.0;
            let times = gamma_arrivals(rate, cv, duration, 7).unwrap();
            assert!(
                (times.len() as f64 - 20_000.0).abs() < 20_000.0 * 0.06,
                "{rate}/s cv {cv}: {}",
                times.len()
            );
            assert!(
                times.windows(2).all(|w| w[0] <= w[1])
                    && times[0] >= 0.0
                    && *times.last().unwrap() < duration
            );
            let (mean, sample_cv) = moments(&times);
            assert!((mean - 1000.0 / rate).abs() < 0.03 * 1000.0 / rate, "{rate}/s cv {cv}: mean gap {mean}");
            assert!((sample_cv - cv).abs() < 0.1 * cv, "{rate}/s cv {cv}: sample cv {sample_cv}");
        }
    }

    #[test]
    fn same_seed_same_times_other_seed_other_times() {
        let a = gamma_arrivals(3.0, 1.0, 60_000.0, 1).unwrap();
        assert_eq!(a, gamma_arrivals(3.0, 1.0, 60_000.0, 1).unwrap());
        assert_ne!(a, gamma_arrivals(3.0, 1.0, 60_000.0, 2).unwrap());
    }

    #[test]
    fn bad_rates_and_cvs_are_errors_naming_the_field() {
        for (rate, cv, field) in
            [(0.0, 1.0, "rate_per_s"), (-1.0, 1.0, "rate_per_s"), (f64::NAN, 1.0, "rate_per_s")]
                .into_iter()
                .chain([(1.0, 0.0, "cv"), (1.0, -0.5, "cv"), (1.0, f64::INFINITY, "cv")])
        {
            let err = gamma_arrivals(rate, cv, 1000.0, 0).unwrap_err().to_string();
            assert!(err.starts_with(field), "{rate} {cv}: {err}");
        }
        assert!(gamma_arrivals(1.0, 1.0, -1.0, 0).unwrap_err().to_string().starts_with("duration_ms"));
        assert!(
            scheduled_arrivals(&[], 1.0, 1000.0, 0).unwrap_err().to_string().starts_with("rates_per_minute")
        );
        let err = scheduled_arrivals(&[1.0, -2.0], 1.0, 1000.0, 0).unwrap_err().to_string();
        assert!(err.starts_with("rates_per_minute[1]"), "{err}");
        assert!(gamma_arrivals(1e9, 1.0, 1e9, 0).is_err(), "too many arrivals is refused");
    }

    /// Each minute gets its own rate; a zero minute gets nothing; the last
    /// rate holds beyond the schedule.
    #[test]
    fn schedules_follow_their_minutes() {
        let rates = [20.0, 0.0, 5.0];
        let times = scheduled_arrivals(&rates, 1.0, 5.0 * MINUTE_MS, 3).unwrap();
        let per_minute = |m: usize| {
            times.iter().filter(|&&t| t >= m as f64 * MINUTE_MS && t < (m + 1) as f64 * MINUTE_MS).count()
                as f64
        };
        assert!((per_minute(0) - 1200.0).abs() < 120.0, "{}", per_minute(0));
        assert_eq!(per_minute(1), 0.0);
        for m in 2..5 {
            assert!((per_minute(m) - 300.0).abs() < 60.0, "minute {m}: {}", per_minute(m));
        }
        assert!(scheduled_arrivals(&[0.0], 1.0, 1e6, 0).unwrap().is_empty());
        assert!(scheduled_arrivals(&[1.0], 1.0, 0.0, 0).unwrap().is_empty());
    }
}
