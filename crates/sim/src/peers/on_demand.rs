//! The on-demand reference: a fixed fleet bought at the on-demand price for
//! the whole trace, never preempted, running the fastest layout that fits it.

use parcae_policy_core::liveput::MigrationKind;
use parcae_policy_core::reactive::best_config_for;
use parcae_policy_core::{IntervalStats, ModelProfile};

use super::{Peer, PeerError, PeerRun, PeerSettings, check_series, cold_start_ms, never_runs, record, train};
use crate::{PeerConstants, Prices, summarize};

/// The on-demand fleet over the length of `series`: `fleet_instances`
/// instances (or the series' peak), one cold start, then the fastest layout
/// for the whole time. Every interval is paid at the on-demand price (both
/// price columns of the result hold it).
pub fn on_demand(
    profile: &ModelProfile,
    series: &[IntervalStats],
    constants: &PeerConstants,
    settings: &PeerSettings,
) -> Result<PeerRun, PeerError> {
    check_series(series)?;
    let fleet = constants
        .on_demand
        .fleet_instances
        .unwrap_or_else(|| series.iter().map(|s| s.instances).max().unwrap_or(0));
    let price = settings.prices.on_demand_usd_per_hour;
    let prices = Prices { spot_usd_per_hour: price, on_demand_usd_per_hour: price };
    let settings = PeerSettings { prices, ..settings.clone() };
    let fixed: Vec<IntervalStats> = (0..series.len())
        .map(|k| IntervalStats { instances: fleet, arrivals: if k == 0 { fleet } else { 0 }, preemptions: 0 })
        .collect();
    let Some(best) = best_config_for(profile, fleet) else {
        return Ok(never_runs(
            Peer::OnDemand,
            &fixed,
            &settings,
            format!("on-demand: no profiled layout fits {fleet} instances"),
        ));
    };
    let config = best.config;
    let t = settings.interval_ms as f64;
    let mut carried = 0.0;
    let mut records = Vec::with_capacity(fixed.len());
    for (k, stats) in fixed.iter().enumerate() {
        let (transition, kind) = if k == 0 {
            (cold_start_ms(profile, config, 0)?, MigrationKind::Restart)
        } else {
            (0.0, MigrationKind::None)
        };
        let busy = carried + transition;
        let (samples, leftover) = train(best.samples_per_second, busy, t);
        records.push(record(k, *stats, Some(config), samples, 0.0, carried, transition, busy, t, kind));
        carried = leftover;
    }
    let notes = vec![format!(
        "on-demand: {fleet} instances at ${price:.3}/h for the whole trace, layout {config}, never preempted"
    )];
    Ok(PeerRun { peer: Peer::OnDemand, result: summarize(records, settings.interval_ms, prices), notes })
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn cost_is_fleet_times_price_times_hours() {
        let p = profile(0.0, 0.0);
        // A spot trace peaking at 6 instances, 90 intervals of 60 s (1.5 h).
        let mut series = vec![stats(6, 6, 0)];
        series.extend(std::iter::repeat_n(stats(6, 0, 0), 29));
        series.push(stats(2, 0, 4));
        series.extend(std::iter::repeat_n(stats(2, 0, 0), 59));
        let prices = Prices { spot_usd_per_hour: 1.0, on_demand_usd_per_hour: 3.0 };
        let run = on_demand(&p, &series, &constants(), &PeerSettings::new(60_000, prices)).unwrap();
        let t = &run.result.totals;
        assert_eq!(t.instance_hours, 6.0 * 1.5);
        assert!((t.usd_on_demand - 6.0 * 3.0 * 1.5).abs() < 1e-9);
        assert!((t.usd_spot - t.usd_on_demand).abs() < 1e-12, "on-demand is paid on demand");
        // Fastest layout within 6 instances: (1,4) or (3,2)/(2,2)... 10 d p:
        // best is d x p = 6 -> (3, 2) at 60/s; no cold-start cost here.
        assert_eq!(t.samples, 60.0 * 90.0 * 60.0);
        assert_eq!(run.result.intervals[0].config, Some(parcae_policy_core::ParallelConfig::new(3, 2)));
        assert!(t.migrations.restart == 1.0 && t.cold_starts == 1);

        // A fixed fleet size from the constants.
        let mut c = constants();
        c.on_demand.fleet_instances = Some(4);
        let run = on_demand(&p, &series, &c, &PeerSettings::new(60_000, prices)).unwrap();
        assert!((run.result.totals.usd_on_demand - 4.0 * 3.0 * 1.5).abs() < 1e-9);
    }
}
