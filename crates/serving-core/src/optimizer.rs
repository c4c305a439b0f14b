//! The configuration optimizers: SpotServe's (lowest latency that keeps up
//! with the arrivals) and a cost-aware one (fewest instances that meet the
//! latency objective).

use crate::estimate::{Estimate, estimate, shapes, with_replicas};
use crate::{ServePlan, ServeRequest, ServingConfig, ServingOptimizer, ServingProfile, Workload};

/// The feasible replica shapes of one (profile, workload), computed once and
/// reused across calls while neither changes.
#[derive(Debug, Default, Clone)]
struct ShapeCache {
    key: Option<(ServingProfile, Workload, u32)>,
    shapes: Vec<(ServingConfig, Estimate)>,
}

impl ShapeCache {
    fn get(&mut self, request: &ServeRequest) -> &[(ServingConfig, Estimate)] {
        let max_instances = request.instances.iter().copied().max().unwrap_or(0);
        let gpus = max_instances.saturating_mul(request.profile.gpus_per_instance);
        let fresh = match &self.key {
            Some((profile, workload, covered)) => {
                *profile == request.profile && *workload == request.workload && *covered >= gpus
            }
            None => false,
        };
        if !fresh {
            self.shapes = shapes(&request.profile, gpus, &request.workload);
            self.key = Some((request.profile.clone(), request.workload, gpus));
        }
        &self.shapes
    }
}

/// SpotServe's configuration optimizer: among the configurations whose
/// throughput covers the arrival rate, the one with the lowest latency (on all
/// the instances there are: more replicas of a shape cost no latency and
/// shorten queues); if none covers it, the highest throughput.
///
/// Like the artifact's controller, it re-solves when the fleet changes (the
/// artifact solves at every availability event and keeps the configuration in
/// between), and also when the running configuration no longer fits or no
/// longer covers the arrival rate; otherwise it keeps the running
/// configuration, so noise in the observed rate does not trigger
/// reparallelizations.
#[derive(Debug, Default, Clone)]
pub struct SpotServe {
    cache: ShapeCache,
    /// Instances available at the last decision.
    last_instances: Option<u32>,
}

/// The estimate of `config` if it runs on `instances` instances now.
fn running(request: &ServeRequest, config: &ServingConfig, instances: u32) -> Option<Estimate> {
    estimate(&request.profile, config, &request.workload).filter(|e| e.instances <= instances)
}

/// Orders by lower latency, then higher throughput, then fewer instances.
fn faster(a: &Estimate, b: &Estimate) -> bool {
    (a.latency_ms, -a.requests_per_second, a.instances) < (b.latency_ms, -b.requests_per_second, b.instances)
}

/// SpotServe's choice for one interval: `instances` available, `rate`
/// requests per second to serve.
pub fn spotserve_choice(
    profile: &ServingProfile,
    shapes: &[(ServingConfig, Estimate)],
    instances: u32,
    rate: f64,
) -> Option<ServingConfig> {
    let gpus = instances.saturating_mul(profile.gpus_per_instance);
    let mut covering: Option<(ServingConfig, Estimate)> = None;
    let mut fastest: Option<(ServingConfig, Estimate)> = None;
    for (shape, one) in shapes {
        let replicas = gpus / shape.gpus_per_replica();
        if replicas == 0 {
            continue;
        }
        let (config, estimate) = with_replicas(profile, shape, one, replicas);
        if estimate.requests_per_second >= rate
            && covering.as_ref().is_none_or(|(_, best)| faster(&estimate, best))
        {
            covering = Some((config, estimate));
        }
        let more = fastest.as_ref().is_none_or(|(_, best)| {
            (estimate.requests_per_second, -estimate.latency_ms)
                > (best.requests_per_second, -best.latency_ms)
        });
        if more {
            fastest = Some((config, estimate));
        }
    }
    covering.or(fastest).map(|(config, _)| config)
}

impl ServingOptimizer for SpotServe {
    fn configure(&mut self, request: &ServeRequest) -> Result<ServePlan, String> {
        check_lengths(request)?;
        let (now, rate_now) = (request.instances[0], request.arrival_rates[0]);
        let keep = request.current.filter(|current| {
            self.last_instances == Some(now)
                && running(request, current, now).is_some_and(|e| e.requests_per_second >= rate_now)
        });
        self.last_instances = Some(now);
        let shapes = self.cache.get(request);
        let configs = request
            .instances
            .iter()
            .zip(&request.arrival_rates)
            .enumerate()
            .map(|(i, (&instances, &rate))| match keep {
                Some(current) if i == 0 => Some(current),
                _ => spotserve_choice(&request.profile, shapes, instances, rate),
            })
            .collect();
        Ok(ServePlan { configs })
    }
}

/// The fewest instances that serve the arrivals within the latency objective:
/// among configurations whose service latency meets the SLO and whose
/// throughput covers the arrival rate at `target_utilization` (queues grow
/// without bound as utilization nears 1, so capacity is kept above the rate),
/// the one on the fewest instances; ties keep the current shape (no
/// reparallelization), then the lower latency. When none meets both, it
/// serves like [`SpotServe`].
///
/// It keeps the running configuration while that still fits, meets the SLO
/// and runs between [`CostAware::SHRINK_BELOW`] and [`CostAware::GROW_ABOVE`]
/// utilization: resizing on every wiggle of the observed rate would pay a
/// reconfiguration for an instance-minute.
#[derive(Debug, Clone)]
pub struct CostAware {
    /// Fraction of a configuration's throughput the arrivals may use (0, 1].
    pub target_utilization: f64,
    cache: ShapeCache,
}

impl CostAware {
    /// Above this utilization the running configuration is resized up.
    pub const GROW_ABOVE: f64 = 0.9;
    /// Below this utilization the running configuration is shrunk when fewer
    /// instances would do.
    pub const SHRINK_BELOW: f64 = 0.5;
}

impl Default for CostAware {
    fn default() -> Self {
        CostAware { target_utilization: 0.8, cache: ShapeCache::default() }
    }
}

impl ServingOptimizer for CostAware {
    fn configure(&mut self, request: &ServeRequest) -> Result<ServePlan, String> {
        check_lengths(request)?;
        if !(self.target_utilization > 0.0 && self.target_utilization <= 1.0) {
            return Err(format!("target utilization {} is outside (0, 1]", self.target_utilization));
        }
        let utilization = self.target_utilization;
        let shapes = self.cache.get(request);
        let profile = &request.profile;
        let current = request.current;
        let configs = request
            .instances
            .iter()
            .zip(&request.arrival_rates)
            .map(|(&instances, &rate)| {
                let gpus = instances.saturating_mul(profile.gpus_per_instance);
                let mut best: Option<(ServingConfig, Estimate)> = None;
                for (shape, one) in shapes {
                    if one.latency_ms > request.latency_slo_ms || shape.gpus_per_replica() > gpus {
                        continue;
                    }
                    let needed = (rate / (one.requests_per_second * utilization)).ceil().max(1.0);
                    if needed > f64::from(gpus / shape.gpus_per_replica()) {
                        continue;
                    }
                    let (config, estimate) = with_replicas(profile, shape, one, needed as u32);
                    let kept = |c: &ServingConfig| current.is_some_and(|cur| cur.same_shape(c));
                    let better = best.as_ref().is_none_or(|(best_config, best_estimate)| {
                        (estimate.instances, !kept(&config), estimate.latency_ms)
                            < (best_estimate.instances, !kept(best_config), best_estimate.latency_ms)
                    });
                    if better {
                        best = Some((config, estimate));
                    }
                }
                best.map(|(config, _)| config).or_else(|| spotserve_choice(profile, shapes, instances, rate))
            })
            .collect::<Vec<_>>();
        let mut configs = configs;
        if let (Some(current), Some(first)) = (current, configs.first_mut()) {
            let (now, rate) = (request.instances[0], request.arrival_rates[0]);
            let chosen = first.and_then(|c| running(request, &c, now));
            if let Some(e) =
                running(request, &current, now).filter(|e| e.latency_ms <= request.latency_slo_ms)
            {
                let utilization = rate / e.requests_per_second;
                let saves = chosen.is_some_and(|c| c.instances < e.instances);
                if utilization <= Self::GROW_ABOVE && (utilization >= Self::SHRINK_BELOW || !saves) {
                    *first = Some(current);
                }
            }
        }
        Ok(ServePlan { configs })
    }
}

fn check_lengths(request: &ServeRequest) -> Result<(), String> {
    if request.instances.is_empty() {
        return Err("the request has no intervals".into());
    }
    if request.instances.len() != request.arrival_rates.len() {
        return Err(format!(
            "{} instance counts but {} arrival rates",
            request.instances.len(),
            request.arrival_rates.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORK: Workload = Workload { input_tokens: 512, output_tokens: 64 };

    fn request(instances: Vec<u32>, rates: Vec<f64>) -> ServeRequest {
        ServeRequest {
            instances,
            arrival_rates: rates,
            latency_slo_ms: 60_000.0,
            interval_ms: 60_000,
            current: None,
            workload: WORK,
            profile: crate::estimate::tests::profile(),
        }
    }

    /// Brute force over every configuration up to `max_dp` replicas.
    fn all(profile: &ServingProfile, instances: u32) -> Vec<(ServingConfig, Estimate)> {
        let gpus = instances * profile.gpus_per_instance;
        let mut out = Vec::new();
        for (shape, _) in shapes(profile, gpus, &WORK) {
            for dp in 1..=gpus / shape.gpus_per_replica() {
                let c = ServingConfig { data_parallel: dp, ..shape };
                out.push((c, estimate(profile, &c, &WORK).unwrap()));
            }
        }
        out
    }

    #[test]
    fn spotserve_picks_the_lowest_latency_that_covers_the_rate_else_the_highest_throughput() {
        let profile = crate::estimate::tests::profile();
        for instances in [1, 2, 3, 5] {
            let everything = all(&profile, instances);
            for rate in [0.0, 0.5, 2.0, 8.0, 40.0, 1e6] {
                let plan = SpotServe::default().configure(&request(vec![instances], vec![rate])).unwrap();
                let chosen = plan.configs[0].expect("some configuration fits");
                let e = estimate(&profile, &chosen, &WORK).unwrap();
                assert!(e.instances <= instances);
                let covering: Vec<_> =
                    everything.iter().filter(|(_, x)| x.requests_per_second >= rate).collect();
                if covering.is_empty() {
                    let top = everything.iter().map(|(_, x)| x.requests_per_second).fold(0.0, f64::max);
                    assert!((e.requests_per_second - top).abs() < 1e-9, "{instances} x, {rate}/s: {chosen}");
                } else {
                    let low = covering.iter().map(|(_, x)| x.latency_ms).fold(f64::INFINITY, f64::min);
                    assert!(e.requests_per_second >= rate);
                    assert!((e.latency_ms - low).abs() < 1e-9, "{instances} x, {rate}/s: {chosen}");
                }
            }
        }
    }

    #[test]
    fn cost_aware_uses_the_fewest_instances_that_meet_the_slo_and_rate() {
        let profile = crate::estimate::tests::profile();
        let everything = all(&profile, 6);
        for rate in [0.1, 1.0, 3.0, 6.0] {
            let mut policy = CostAware::default();
            let plan = policy.configure(&request(vec![6], vec![rate])).unwrap();
            let chosen = plan.configs[0].unwrap();
            let e = estimate(&profile, &chosen, &WORK).unwrap();
            let fewest = everything
                .iter()
                .filter(|(_, x)| x.latency_ms <= 60_000.0 && x.requests_per_second * 0.8 >= rate)
                .map(|(_, x)| x.instances)
                .min()
                .expect("a configuration meets the objective");
            assert_eq!(e.instances, fewest, "{rate}/s: {chosen}");
            assert!(e.requests_per_second * 0.8 >= rate && e.latency_ms <= 60_000.0);
        }
    }

    #[test]
    fn the_running_configuration_is_kept_until_the_fleet_or_the_load_demands_a_change() {
        let mut spot = SpotServe::default();
        let mut req = request(vec![4], vec![1.0]);
        let first = spot.configure(&req).unwrap().configs[0].unwrap();
        // A slightly different rate on the same fleet: a fresh solve might pick
        // another configuration, the controller keeps the running one.
        req.current = Some(first);
        for rate in [0.2, 0.9, 1.1] {
            req.arrival_rates = vec![rate];
            let e = estimate(&req.profile, &first, &WORK).unwrap();
            let kept = spot.configure(&req).unwrap().configs[0].unwrap();
            if e.requests_per_second >= rate {
                assert_eq!(kept, first, "{rate}/s");
            }
        }
        // The fleet changes: it re-solves (the same answer as a fresh optimizer).
        req.instances = vec![3];
        let fresh = SpotServe::default().configure(&req).unwrap();
        assert_eq!(spot.configure(&req).unwrap(), fresh);

        let mut cost = CostAware::default();
        let mut req = request(vec![6], vec![2.0]);
        let chosen = cost.configure(&req).unwrap().configs[0].unwrap();
        let capacity = estimate(&req.profile, &chosen, &WORK).unwrap().requests_per_second;
        req.current = Some(chosen);
        // Within the band: kept. Far above it: grown.
        req.arrival_rates = vec![capacity * 0.85];
        assert_eq!(cost.configure(&req).unwrap().configs[0], Some(chosen));
        req.arrival_rates = vec![capacity * 1.5];
        let grown = cost.configure(&req).unwrap().configs[0].unwrap();
        assert!(estimate(&req.profile, &grown, &WORK).unwrap().requests_per_second > capacity);
    }

    #[test]
    fn one_configuration_per_interval_and_none_when_nothing_fits() {
        let plan = SpotServe::default().configure(&request(vec![0, 2, 4], vec![1.0, 1.0, 1.0])).unwrap();
        assert_eq!(plan.configs.len(), 3);
        assert_eq!(plan.configs[0], None, "no instances, no configuration");
        assert!(plan.configs[1].is_some() && plan.configs[2].is_some());
        assert!(SpotServe::default().configure(&request(vec![1, 2], vec![1.0])).is_err());
        assert!(CostAware::default().configure(&request(vec![], vec![])).is_err());
    }
}
