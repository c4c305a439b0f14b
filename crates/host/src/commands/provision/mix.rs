//! Mixed fleets in `provision` (spotDNN, IWQoS'23): a request of `n_1 x type_1 + n_2 x
//! type_2` spot instances, each type receiving `min(N_t(t), n_t)` of what its market gave,
//! trained as one job whose data-parallel replicas run on both types with the batch split
//! by speed ([`parcae_policy_core::mixed`]).
//!
//! The markets are aligned from their starts and scored over the shorter one. In each
//! interval the fleet's composition sets what every layout trains: the policy plans, and
//! the simulator scores, with the composition's profile
//! ([`parcae_policy_core::mixed::composition_profile`]): every shape `(D, P)` some split
//! of the replicas over the types can run, at its best split's throughput. The cost
//! model's transfers and overheads are the first type's, and a change of composition
//! that keeps the shape is not charged (the replicas keep their places).

use std::collections::HashMap;

use parcae_policy_core::mixed::{best_mixed, composition_profile};
use parcae_policy_core::{IntervalStats, ModelProfile};

use super::MarketTrace;

/// One type's part of a mixed request.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Part {
    /// The offer's name.
    pub offer: String,
    /// Instances of it requested.
    pub requested: u32,
    /// Mean instances of it received.
    pub mean_instances: f64,
}

/// The fleet a mixed request receives.
pub struct MixedFleet {
    /// Per interval, the instances of each type.
    pub counts: Vec<Vec<u32>>,
    /// The union fleet, arrivals and preemptions summed over the types.
    pub series: Vec<IntervalStats>,
}

impl MixedFleet {
    /// What requesting `requested[t]` of each market `markets[t]` gives, over the
    /// shortest market.
    pub fn new(markets: &[&MarketTrace], requested: &[u32]) -> Self {
        let len = markets.iter().map(|m| m.series.len()).min().unwrap_or(0);
        let capped: Vec<Vec<IntervalStats>> =
            markets.iter().zip(requested).map(|(m, &n)| m.capped(n)[..len].to_vec()).collect();
        let counts = (0..len).map(|k| capped.iter().map(|s| s[k].instances).collect()).collect();
        let series = (0..len)
            .map(|k| IntervalStats {
                instances: capped.iter().map(|s| s[k].instances).sum(),
                arrivals: capped.iter().map(|s| s[k].arrivals).sum(),
                preemptions: capped.iter().map(|s| s[k].preemptions).sum(),
            })
            .collect();
        MixedFleet { counts, series }
    }

    /// Mean instances of each type.
    pub fn mean_instances(&self) -> Vec<f64> {
        let types = self.counts.first().map_or(0, Vec::len);
        let n = self.counts.len().max(1) as f64;
        (0..types).map(|t| self.counts.iter().map(|c| f64::from(c[t])).sum::<f64>() / n).collect()
    }

    /// Dollars of interval `k` of `interval_ms` at `prices[t]` per instance-hour of type `t`.
    pub fn usd_of_interval(&self, k: usize, interval_ms: u64, prices: &[f64]) -> f64 {
        let hours = interval_ms as f64 / 3_600_000.0;
        self.counts.get(k).map_or(0.0, |c| c.iter().zip(prices).map(|(&n, p)| f64::from(n) * p * hours).sum())
    }
}

/// The types' profiles and what each composition trains, computed once per composition
/// (a trace revisits few).
pub struct Compositions<'a> {
    profiles: Vec<&'a ModelProfile>,
    best: HashMap<Vec<u32>, f64>,
    views: HashMap<Vec<u32>, ModelProfile>,
    /// What a composition that runs nothing plans with: the first type's profile, no layout.
    empty: ModelProfile,
}

impl<'a> Compositions<'a> {
    /// For types profiled by `profiles` (one model, one batch).
    pub fn new(profiles: Vec<&'a ModelProfile>) -> Self {
        let mut empty =
            profiles.first().map(|p| (*p).clone()).unwrap_or_else(|| ModelProfile::empty("", 1, 1));
        empty.configs.clear();
        Compositions { profiles, best: HashMap::new(), views: HashMap::new(), empty }
    }

    /// Samples per second of the fastest mixed layout on `counts` (0 when none runs).
    pub fn samples_per_second(&mut self, counts: &[u32]) -> f64 {
        if let Some(v) = self.best.get(counts) {
            return *v;
        }
        let v = best_mixed(&self.profiles, counts).map_or(0.0, |(_, step)| step.samples_per_second);
        self.best.insert(counts.to_vec(), v);
        v
    }

    /// Computes the profiles of every composition in `counts` (then [`Self::profile`]).
    pub fn prepare(&mut self, counts: &[Vec<u32>]) {
        for c in counts {
            if !self.views.contains_key(c)
                && let Some(p) = composition_profile(&self.profiles, c)
            {
                self.views.insert(c.clone(), p);
            }
        }
    }

    /// The profile a composition plans and is scored with ([`Self::prepare`]d first; one
    /// that runs nothing lists no layout).
    pub fn profile(&self, counts: &[u32]) -> &ModelProfile {
        self.views.get(counts).unwrap_or(&self.empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fleet_is_each_market_capped_and_summed() {
        let a = MarketTrace { series: IntervalStats::chain_from(0, &[2, 3, 1, 4]), interval_ms: 60_000 };
        let b = MarketTrace { series: IntervalStats::chain_from(0, &[5, 5, 0]), interval_ms: 60_000 };
        let fleet = MixedFleet::new(&[&a, &b], &[2, 4]);
        assert_eq!(fleet.counts, [vec![2, 4], vec![2, 4], vec![1, 0]]);
        let totals: Vec<(u32, u32, u32)> =
            fleet.series.iter().map(|s| (s.instances, s.arrivals, s.preemptions)).collect();
        assert_eq!(totals, [(6, 6, 0), (6, 0, 0), (1, 0, 5)]);
        assert_eq!(fleet.mean_instances(), [5.0 / 3.0, 8.0 / 3.0]);
        // One hour at $1 and $0.5 per instance-hour: 2 + 2 in the first minute.
        assert!((fleet.usd_of_interval(0, 3_600_000, &[1.0, 0.5]) - 4.0).abs() < 1e-12);
    }
}
