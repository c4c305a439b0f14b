//! How likely the next interval is to take instances, estimated from the
//! history: the per-interval distribution of preemption counts.
//!
//! # Why
//!
//! A count forecast (ARIMA, persistence) says how many instances the fleet
//! will have, not whether some will be taken and replaced on the way. On the
//! p3 trace ARIMA(1,1,0) forecasts a nearly flat fleet, so the forecast
//! records (arrivals = rises, preemptions = falls) carry no preemption at all,
//! and the liveput optimizer planned against them sees no risk in a layout
//! that one preemption would cut (a single replica of some stage): a restart
//! from the checkpoint, losing the work since it (15 minutes at the default
//! 30-minute checkpoint interval, about 15 intervals of training). Yet 79 of
//! the trace's 683 minutes take instances, two at a time on average. The
//! timing of the next burst is not predictable from the counts; its chance
//! per interval is. [`ChurnEstimator::estimate`] measures it, and the hedged
//! optimizer ([`crate::plan::best_plan_hedged`]) weighs every layout by it.
//!
//! # The estimate
//!
//! The share of the observed intervals that took exactly `k` instances, per
//! `k >= 1` (counts above [`ChurnEstimator::max_extra`] pooled into it), with
//! a prior of [`ChurnEstimator::prior_intervals`] pseudo-intervals in which a
//! burst of [`ChurnEstimator::prior_extra`] instances came at the rate
//! [`ChurnEstimator::prior_rate`]. Every observed interval weighs the same,
//! or, with a [`ChurnEstimator::half_life`], less the older it is.
//!
//! The prior matters only while the history is short (a run that just
//! started): with none, the first burst of a run would find the job in
//! whatever layout was fastest, however fragile. The default (one burst of 2
//! instances per 10 intervals, worth 20 intervals of history) is about the
//! p3 trace's own rate (79 of its 683 minutes take instances, 2.1 on
//! average); after an hour of history it weighs 25%, after the whole trace
//! 3%. Measured with [`crate::robust`] (GPT-1.5B, H = 8) on the p3 trace's
//! one-hour segments, which start with no history: no prior leaves the
//! low-availability, high-preemption segment at 84% of the Oracle, 10 to 30
//! pseudo-intervals of bursts of 2 or 3 at 90%; bursts of 1 are no help
//! (they cannot cut a stage with two replicas). The whole trace moves by
//! half a point either way; on the g4dn trace, whose bursts are rarer, the
//! prior costs 1.3 points (74.4% to 73.1%).
//!
//! # Per-instance hazards and market-wide bursts
//!
//! Every interval's bursts count the same whatever the fleet was then and is
//! now. An estimate that let each burst size follow the fleet where its
//! history did (per size, the likelihood ratio of a rate proportional to the
//! fleet over a constant one) was measured in the leave-one-family-out grid
//! (`crates/sim/examples/generalisation.rs`) and removed: it did not remove the
//! long-calm near tie it was built for (that family's preemptions are its
//! wave taking capacity back, about one instance every 20-30 minutes whatever
//! the fleet) and took p3's GPT-6.7B unannounced below 97% of the Oracle.
//! Scaling every chance by the fleet took the g4dn look-alike, whose bursts
//! are market-wide, from 98.5% to 95.5%.
//!
//! A uniform weight was kept over a half-life because, measured the same way,
//! half-lives of 30 to 240 intervals did no better on the whole trace and its
//! segments; neither did telling the estimator each segment's own burst
//! distribution in advance (only the timing, which no estimate of a rate
//! has, separates it from the Oracle).

use crate::IntervalStats;
use crate::plan::Churn;

/// Estimates the per-interval distribution of preemptions from a history
/// (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChurnEstimator {
    /// Pseudo-intervals of prior (0: none).
    pub prior_intervals: f64,
    /// Share of the prior's intervals that take [`Self::prior_extra`] instances.
    pub prior_rate: f64,
    /// Instances a prior burst takes.
    pub prior_extra: u32,
    /// Largest burst told apart: larger ones count as this many. It bounds
    /// the scenarios the optimizer weighs per interval, hence its work per
    /// call (and a guest's fuel). Default 3: a burst of 3 already cuts any
    /// stage a layout with fewer than 3 replicas can lose, and measured on
    /// the p3 trace (GPT-1.5B, where bursts reach 6) telling 4 to 8 apart did
    /// no better, in the whole trace or its segments. The default policy
    /// tells them apart to 6 ([`crate::guard::DEFAULT_MAX_BURST`] says why:
    /// since the terminal value is charged for wipes, the sizes matter).
    pub max_extra: u32,
    /// Weight of an observation halves every this many intervals of age;
    /// `None` weighs every interval the same.
    pub half_life: Option<f64>,
}

impl Default for ChurnEstimator {
    fn default() -> Self {
        Self { prior_intervals: 20.0, prior_rate: 0.1, prior_extra: 2, max_extra: 3, half_life: None }
    }
}

/// One minute: the interval length the prior and the half-life are stated in,
/// and the unit of the default policy's other times
/// ([`ChurnEstimator::for_interval`] restates them for another).
pub const STATED_INTERVAL_MS: u64 = 60_000;

impl ChurnEstimator {
    /// This estimator for intervals of `interval_ms`, its prior and
    /// half-life being stated in one-minute intervals
    /// ([`STATED_INTERVAL_MS`]): the prior covers the same time with the same
    /// bursts per minute (as many pseudo-bursts in all), and the half-life
    /// spans the same time, so a host that plans every 30 s or every 5
    /// minutes starts from the same belief about the fleet. The chance of a
    /// burst per interval is capped at 1. One-minute intervals (or 0 ms):
    /// unchanged.
    pub fn for_interval(&self, interval_ms: u64) -> ChurnEstimator {
        if interval_ms == 0 || interval_ms == STATED_INTERVAL_MS {
            return *self;
        }
        let per_stated = STATED_INTERVAL_MS as f64 / interval_ms as f64;
        ChurnEstimator {
            prior_intervals: self.prior_intervals * per_stated,
            prior_rate: (self.prior_rate / per_stated).min(1.0),
            half_life: self.half_life.map(|h| h * per_stated),
            ..*self
        }
    }

    /// The estimated chance that one interval takes `extra` instances, one
    /// entry per `extra >= 1` with a positive chance, in increasing `extra`;
    /// the chances sum to below 1 (the rest: nothing taken). Deterministic: the
    /// same history gives bit-identical numbers. Empty when there is neither
    /// history nor prior, or nothing was ever taken.
    pub fn estimate(&self, history: &[IntervalStats]) -> Vec<Churn> {
        self.estimate_counted(history).0
    }

    /// [`Self::estimate`], and beside it the same with every chance scaled
    /// down to the lower end of its `sigmas`-standard-deviation confidence
    /// interval: the bursts seen (prior included), `n` of them, are a Poisson
    /// count, so the rate's lower bound is `(sqrt(n) - sigmas)^2 / n` of the
    /// estimate (nothing when `n <= sigmas^2`). A plan that only wins at the
    /// estimate, not at this rate, wins on the estimate's noise. `sigmas <= 0`
    /// (or not finite): the estimate itself, twice. One pass over the history.
    pub fn estimate_with_lower(&self, history: &[IntervalStats], sigmas: f64) -> (Vec<Churn>, Vec<Churn>) {
        let (churn, low, _) = self.estimate_seen(history, sigmas);
        let low = low.unwrap_or_else(|| churn.clone());
        (churn, low)
    }

    /// [`Self::estimate`], its low end as [`Self::estimate_with_lower`]
    /// (`None` when `sigmas <= 0` or not finite) and the share seen, from one
    /// pass over the history. The share seen is the part of the bursts the
    /// estimate rests on that `history` showed, the rest being the prior's
    /// pseudo-bursts (weighted alike): 0 with no burst seen, towards 1 as the
    /// history outweighs the prior. The prior is a caution for a run that has
    /// seen nothing, so what a plan may gain from bursts is credited at this
    /// share ([`crate::plan::PlanOptions::recourse`]); what they cost is
    /// priced in full.
    pub fn estimate_seen(
        &self,
        history: &[IntervalStats],
        sigmas: f64,
    ) -> (Vec<Churn>, Option<Vec<Churn>>, f64) {
        let (churn, bursts, seen) = self.estimate_counted(history);
        let share = if bursts > 0.0 { seen / bursts } else { 0.0 };
        if !(sigmas.is_finite() && sigmas > 0.0) {
            return (churn, None, share);
        }
        let root = bursts.sqrt();
        let factor = if root > sigmas { (root - sigmas).powi(2) / bursts } else { 0.0 };
        let low = churn
            .iter()
            .map(|c| Churn { probability: c.probability * factor, ..*c })
            .filter(|c| c.probability > 0.0)
            .collect();
        (churn, Some(low), share)
    }

    /// The estimate, the (weighted) count of bursts it rests on, and how many
    /// of those the history showed (the rest are the prior's).
    fn estimate_counted(&self, history: &[IntervalStats]) -> (Vec<Churn>, f64, f64) {
        let cap = self.max_extra.max(1) as usize;
        // weights[k - 1]: weight of the intervals that took k (capped).
        let mut weights = vec![0.0f64; cap];
        let mut total = 0.0f64;
        let n = history.len();
        let decay = self.half_life.filter(|h| h.is_finite() && *h > 0.0).map(|h| 0.5f64.powf(1.0 / h));
        let mut w = 1.0f64;
        // Newest first, so a decaying weight is a running product.
        for s in history.iter().rev() {
            total += w;
            if s.preemptions > 0 {
                weights[(s.preemptions as usize).min(cap) - 1] += w;
            }
            if let Some(d) = decay {
                w *= d;
            }
        }
        debug_assert!(n == 0 || total > 0.0);
        let seen: f64 = weights.iter().sum();
        let mut bursts = seen;
        let prior = if self.prior_intervals.is_finite() { self.prior_intervals.max(0.0) } else { 0.0 };
        let rate = if self.prior_rate.is_finite() { self.prior_rate.clamp(0.0, 1.0) } else { 0.0 };
        if prior > 0.0 && rate > 0.0 && self.prior_extra > 0 {
            weights[(self.prior_extra as usize).min(cap) - 1] += prior * rate;
            bursts += prior * rate;
        }
        total += prior;
        if total <= 0.0 {
            return (Vec::new(), 0.0, 0.0);
        }
        let churn = weights
            .iter()
            .enumerate()
            .filter(|&(_, &w)| w > 0.0)
            .map(|(k, &w)| Churn { extra: k as u32 + 1, probability: w / total })
            .collect();
        (churn, bursts, seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(preemptions: &[u32]) -> Vec<IntervalStats> {
        preemptions.iter().map(|&p| IntervalStats { instances: 20, arrivals: p, preemptions: p }).collect()
    }

    fn no_prior() -> ChurnEstimator {
        ChurnEstimator { prior_intervals: 0.0, ..ChurnEstimator::default() }
    }

    /// The prior and the half-life are stated in one-minute intervals: at
    /// 30 s the prior covers the same 20 minutes with half the chance per
    /// interval (the same two pseudo-bursts), and the half-life the same time.
    #[test]
    fn the_prior_means_the_same_time_at_any_interval_length() {
        let minute = ChurnEstimator { half_life: Some(30.0), ..ChurnEstimator::default() };
        assert_eq!(minute.for_interval(60_000), minute);
        assert_eq!(minute.for_interval(0), minute, "no interval length: unchanged");
        let half = minute.for_interval(30_000);
        assert_eq!((half.prior_intervals, half.prior_rate, half.half_life), (40.0, 0.05, Some(60.0)));
        let (at_minute, at_half) = (minute.estimate(&[]), half.estimate(&[]));
        assert_eq!(at_minute, vec![Churn { extra: 2, probability: 0.1 }]);
        assert_eq!(at_half, vec![Churn { extra: 2, probability: 0.05 }]);
        // A long interval cannot have more than one burst per interval.
        assert_eq!(minute.for_interval(3_600_000).prior_rate, 1.0);
    }
    #[test]
    fn shares_of_a_hand_made_history() {
        // 10 intervals: two took 1, one took 3, one took 12 (pooled into 8).
        let h = history(&[0, 1, 0, 0, 3, 0, 1, 0, 12, 0]);
        let churn = ChurnEstimator { max_extra: 8, ..no_prior() }.estimate(&h);
        assert_eq!(
            churn,
            vec![
                Churn { extra: 1, probability: 0.2 },
                Churn { extra: 3, probability: 0.1 },
                Churn { extra: 8, probability: 0.1 },
            ]
        );
        // A flat count carries risk: the expected preemptions per interval.
        let expected: f64 = churn.iter().map(|c| f64::from(c.extra) * c.probability).sum();
        assert!((expected - 1.3).abs() < 1e-12, "{expected}");
        // By default bursts above 3 count as 3.
        assert_eq!(
            no_prior().estimate(&h),
            vec![Churn { extra: 1, probability: 0.2 }, Churn { extra: 3, probability: 0.2 }]
        );
    }

    #[test]
    fn the_prior_counts_as_pseudo_intervals() {
        let est = ChurnEstimator::default();
        // No history: the prior alone, one burst of 2 per 10 intervals.
        assert_eq!(est.estimate(&[]), vec![Churn { extra: 2, probability: 0.1 }]);
        // 20 prior intervals hold 2 bursts; 10 quiet intervals dilute them.
        let churn = est.estimate(&history(&[0; 10]));
        assert_eq!(churn, vec![Churn { extra: 2, probability: 2.0 / 30.0 }]);
        // 10 intervals, one of which took 2: (2 + 1) / 30.
        let churn = est.estimate(&history(&[0, 0, 2, 0, 0, 0, 0, 0, 0, 0]));
        assert_eq!(churn, vec![Churn { extra: 2, probability: 0.1 }]);
        // And one that took 3: (2 / 30 of 2, 1 / 30 of 3).
        let churn = est.estimate(&history(&[0, 0, 3, 0, 0, 0, 0, 0, 0, 0]));
        assert_eq!(
            churn,
            vec![Churn { extra: 2, probability: 2.0 / 30.0 }, Churn { extra: 3, probability: 1.0 / 30.0 }]
        );
        // Nothing at all: no risk.
        assert!(no_prior().estimate(&[]).is_empty());
        assert!(no_prior().estimate(&history(&[0; 5])).is_empty());
    }

    #[test]
    fn a_half_life_favours_recent_bursts() {
        let est = ChurnEstimator { half_life: Some(5.0), ..no_prior() };
        let old = est.estimate(&history(&[4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]));
        let recent = est.estimate(&history(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4]));
        assert_eq!(old.len(), 1);
        assert_eq!(recent.len(), 1);
        assert!(recent[0].probability > 4.0 * old[0].probability, "{old:?} {recent:?}");
        // The uniform estimator does not care when.
        assert_eq!(
            no_prior().estimate(&history(&[4, 0, 0, 0])),
            no_prior().estimate(&history(&[0, 0, 0, 4]))
        );
    }

    #[test]
    fn the_low_estimate_is_the_poisson_lower_bound_of_the_bursts_seen() {
        let est = no_prior();
        // 25 bursts of 1 in 100 intervals: one standard deviation below is
        // (5 - 1)^2 / 25 of the estimate, two below (5 - 2)^2 / 25.
        let h = history(&(0..100).map(|i| u32::from(i % 4 == 0)).collect::<Vec<_>>());
        assert_eq!(est.estimate(&h), vec![Churn { extra: 1, probability: 0.25 }]);
        let one = est.estimate_with_lower(&h, 1.0).1;
        assert!((one[0].probability - 0.25 * 16.0 / 25.0).abs() < 1e-12, "{one:?}");
        let two = est.estimate_with_lower(&h, 2.0).1;
        assert!((two[0].probability - 0.25 * 9.0 / 25.0).abs() < 1e-12, "{two:?}");
        // Off: the estimate itself.
        assert_eq!(est.estimate_with_lower(&h, 0.0).1, est.estimate(&h));
        assert_eq!(est.estimate_with_lower(&h, f64::NAN).1, est.estimate(&h));
        // One burst cannot be told from none one deviation down: no churn.
        let one_burst = history(&[0, 0, 3, 0]);
        assert!(est.estimate_with_lower(&one_burst, 1.0).1.is_empty());
        // The prior's pseudo-bursts count (2 of them: sqrt(2) > 1).
        assert_eq!(ChurnEstimator::default().estimate_with_lower(&[], 1.0).1.len(), 1);
    }

    #[test]
    fn odd_settings_never_panic_and_stay_a_distribution() {
        let h = history(&[0, 5, u32::MAX, 1, 0]);
        for est in [
            ChurnEstimator { max_extra: 0, ..ChurnEstimator::default() },
            ChurnEstimator {
                prior_intervals: f64::NAN,
                prior_rate: f64::INFINITY,
                ..ChurnEstimator::default()
            },
            ChurnEstimator { prior_rate: 7.0, prior_extra: 100, ..ChurnEstimator::default() },
            ChurnEstimator { half_life: Some(0.0), ..ChurnEstimator::default() },
            ChurnEstimator { half_life: Some(f64::NAN), ..ChurnEstimator::default() },
        ] {
            for hist in [&h[..], &[]] {
                let churn = est.estimate(hist);
                let sum: f64 = churn.iter().map(|c| c.probability).sum();
                assert!(sum <= 1.0 + 1e-12, "{est:?}: {churn:?}");
                assert!(churn.iter().all(|c| c.extra >= 1 && c.extra <= est.max_extra.max(1)));
                assert!(churn.iter().all(|c| c.probability > 0.0 && c.probability.is_finite()));
            }
        }
    }
}
