//! Mixed fleets in `provision` (spotDNN, IWQoS'23): a request of `n_1 x type_1 + n_2 x
//! type_2` spot instances, each type receiving `min(N_t(t), n_t)` of what its market gave,
//! trained as one job whose data-parallel replicas run on both types with the batch split
//! by speed ([`parcae_policy_core::mixed`]).
//!
//! The markets are aligned from their starts and scored over the shorter one; what each
//! composition of the fleet trains, and how the simulator scores it, is
//! [`parcae_sim::mixed`]'s model.

use parcae_policy_core::IntervalStats;
pub use parcae_sim::mixed::{CadencedViews, Compositions, MixedFleet};

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

/// What requesting `requested[t]` of each market `markets[t]` gives, over the shortest
/// market.
pub fn requested_fleet(markets: &[&MarketTrace], requested: &[u32]) -> MixedFleet {
    let capped: Vec<Vec<IntervalStats>> = markets.iter().zip(requested).map(|(m, &n)| m.capped(n)).collect();
    let views: Vec<&[IntervalStats]> = capped.iter().map(Vec::as_slice).collect();
    MixedFleet::new(&views)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fleet_is_each_market_capped_and_summed() {
        let a = MarketTrace { series: IntervalStats::chain_from(0, &[2, 3, 1, 4]), interval_ms: 60_000 };
        let b = MarketTrace { series: IntervalStats::chain_from(0, &[5, 5, 0]), interval_ms: 60_000 };
        let fleet = requested_fleet(&[&a, &b], &[2, 4]);
        assert_eq!(fleet.counts, [vec![2, 4], vec![2, 4], vec![1, 0]]);
        let totals: Vec<(u32, u32, u32)> =
            fleet.series.iter().map(|s| (s.instances, s.arrivals, s.preemptions)).collect();
        assert_eq!(totals, [(6, 6, 0), (6, 0, 0), (1, 0, 5)]);
        assert_eq!(fleet.mean_instances(), [5.0 / 3.0, 8.0 / 3.0]);
        // One hour at $1 and $0.5 per instance-hour: 2 + 2 in the first minute.
        assert!((fleet.usd_of_interval(0, 3_600_000, &[1.0, 0.5]) - 4.0).abs() < 1e-12);
    }
}
