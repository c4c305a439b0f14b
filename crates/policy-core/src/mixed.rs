//! Mixed fleets (spotDNN, IWQoS'23): data-parallel replicas on several instance types at
//! once, so a job whose spot capacity of one type dries up can go on with another.
//!
//! # The model
//!
//! Each replica is one whole pipeline of `P` stages on instances of one type. A step splits
//! the global batch's `M` micro-batches among the `D` replicas; replica `r` on type `t`
//! runs its `k_r` micro-batches through the GPipe schedule in `k_r + P - 1` ticks of
//! `tick_t(P)` (one micro-batch through its slowest stage), then the replicas add up their
//! gradients. A step takes
//!
//! `max_r (k_r + P - 1) tick_t(r)(P) + sync(D, P)`
//!
//! and the split that balances it ([`balanced_split`]) hands out the micro-batches one at a
//! time to the replica that would finish the next one first, which minimises the slowest
//! replica's time (the costs are separable and increasing). So faster replicas take a
//! larger share of the batch and every replica finishes at about the same time.
//!
//! Both terms come from each type's own profile, so a fleet of one type gets exactly its
//! profiled step time:
//!
//! - `tick_t(P) = iteration_t(1, P) / (M + P - 1)`, the single pipeline's step over its
//!   ticks (from the narrowest profiled width at that depth when `(1, P)` is not profiled,
//!   which then counts that width's synchronisation as compute: an upper bound);
//! - `sync_t(D, P) = iteration_t(D, P) - (ceil(M / D) + P - 1) tick_t(P)`, what the
//!   homogeneous layout takes beyond the ticks of its busiest replica.
//!
//! Gradients that cross types travel at the slower network, so a mixed step pays the
//! largest `sync_t(D, P)` of the types present that profiled that width; a width no type
//! present profiled is not predicted. A type runs depth `P` only if its profile lists some
//! layout of that depth (its memory holds a `1 / P` share of the model).

use crate::{ConfigProfile, ModelProfile, ParallelConfig};

/// A layout over several instance types: `pipeline_stages` stages per replica, and the
/// replicas (whole pipelines) on each type, in the order of the profiles given.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct MixedConfig {
    /// Pipeline depth P.
    pub pipeline_stages: u32,
    /// Replicas on each type.
    pub replicas: Vec<u32>,
}

impl MixedConfig {
    /// All replicas, D.
    pub fn data_parallel(&self) -> u32 {
        self.replicas.iter().sum()
    }

    /// The single-type layout with the same shape.
    pub fn shape(&self) -> ParallelConfig {
        ParallelConfig::new(self.data_parallel(), self.pipeline_stages)
    }

    /// Instances of each type it occupies.
    pub fn instances(&self) -> Vec<u64> {
        self.replicas.iter().map(|&d| u64::from(d) * u64::from(self.pipeline_stages)).collect()
    }
}

/// A mixed layout's predicted step.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct MixedStep {
    /// One step, ms.
    pub iteration_ms: f64,
    /// Global batch per second.
    pub samples_per_second: f64,
    /// Micro-batches of each replica, type by type (replicas of one type in order).
    pub micro_batches: Vec<Vec<u32>>,
}

/// Why a mixed layout has no prediction.
#[derive(Debug, Clone, PartialEq)]
pub enum MixedError {
    /// No type, or as many replica counts as types.
    Shape {
        /// Profiles given.
        types: usize,
        /// Replica counts given.
        counts: usize,
    },
    /// The profiles train different batches, so their steps cannot be mixed.
    Batch {
        /// The disagreeing type.
        index: usize,
        /// Its global batch.
        global: u32,
        /// Its micro-batch.
        micro: u32,
    },
    /// Nothing to run, or more replicas than micro-batches.
    Width {
        /// Replicas, D.
        replicas: u32,
        /// Micro-batches per step, M.
        micro_batches: u32,
    },
    /// A type with replicas cannot hold a stage of this depth.
    Depth {
        /// The type.
        index: usize,
        /// The depth.
        depth: u32,
    },
    /// No type present profiled this width, so its synchronisation is unknown.
    Sync {
        /// Replicas, D.
        replicas: u32,
        /// The depth.
        depth: u32,
    },
}

impl std::fmt::Display for MixedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MixedError::Shape { types, counts } => write!(f, "{types} profiles for {counts} replica counts"),
            MixedError::Batch { index, global, micro } => write!(
                f,
                "the profiles disagree on the batch: type {index} trains {global} samples in micro-batches of {micro}"
            ),
            MixedError::Width { replicas, micro_batches } => {
                write!(f, "{replicas} replicas for {micro_batches} micro-batches")
            }
            MixedError::Depth { index, depth } => {
                write!(f, "type {index} has no profiled layout of depth {depth}")
            }
            MixedError::Sync { replicas, depth } => {
                write!(f, "no type present profiled {replicas} replicas of depth {depth}")
            }
        }
    }
}

impl std::error::Error for MixedError {}

fn micro_batches(profile: &ModelProfile) -> u32 {
    (profile.global_batch_size / profile.micro_batch_size.max(1)).max(1)
}

fn at_depth(profile: &ModelProfile, depth: u32) -> impl Iterator<Item = &ConfigProfile> {
    profile.configs.iter().filter(move |c| c.config.pipeline_stages == depth)
}

/// `tick_t(P)`, ms (see the module docs); `None` when the type cannot run depth `P`.
pub fn tick_ms(profile: &ModelProfile, depth: u32) -> Option<f64> {
    let m = f64::from(micro_batches(profile));
    let p = f64::from(depth);
    let narrowest = at_depth(profile, depth).min_by_key(|c| c.config.data_parallel)?;
    let d = f64::from(narrowest.config.data_parallel);
    Some(narrowest.iteration_ms / ((m / d).ceil() + p - 1.0))
}

/// `sync_t(D, P)`, ms (see the module docs); `None` when that layout is not profiled.
pub fn sync_ms(profile: &ModelProfile, layout: ParallelConfig) -> Option<f64> {
    let entry = profile.config(layout)?;
    let tick = tick_ms(profile, layout.pipeline_stages)?;
    let m = f64::from(micro_batches(profile));
    let busiest = (m / f64::from(layout.data_parallel)).ceil();
    Some((entry.iteration_ms - (busiest + f64::from(layout.pipeline_stages) - 1.0) * tick).max(0.0))
}

/// The balanced split of `micro_batches` over replicas whose ticks are `ticks` (ms), at
/// depth `depth`: each replica gets at least one, the rest go one at a time to the replica
/// that would finish its next one first (ties to the earlier replica). `None` when there
/// are more replicas than micro-batches.
pub fn balanced_split(ticks: &[f64], micro_batches: u32, depth: u32) -> Option<Vec<u32>> {
    if ticks.is_empty() || ticks.len() as u64 > u64::from(micro_batches) {
        return None;
    }
    let fill = f64::from(depth.max(1)) - 1.0;
    let mut k = vec![1u32; ticks.len()];
    for _ in ticks.len() as u32..micro_batches {
        let next = (0..ticks.len())
            .min_by(|&a, &b| {
                let finish = |r: usize| (f64::from(k[r] + 1) + fill) * ticks[r];
                finish(a).total_cmp(&finish(b)).then(a.cmp(&b))
            })
            .expect("at least one replica");
        k[next] += 1;
    }
    Some(k)
}

/// The predicted step of `config` on types profiled by `profiles` (see the module docs).
pub fn mixed_step(profiles: &[&ModelProfile], config: &MixedConfig) -> Result<MixedStep, MixedError> {
    if profiles.is_empty() || profiles.len() != config.replicas.len() {
        return Err(MixedError::Shape { types: profiles.len(), counts: config.replicas.len() });
    }
    let first = profiles[0];
    for (index, p) in profiles.iter().enumerate() {
        if (p.global_batch_size, p.micro_batch_size) != (first.global_batch_size, first.micro_batch_size) {
            return Err(MixedError::Batch { index, global: p.global_batch_size, micro: p.micro_batch_size });
        }
    }
    let depth = config.pipeline_stages;
    let d = config.data_parallel();
    let m = micro_batches(first);
    if d == 0 || d > m || depth == 0 {
        return Err(MixedError::Width { replicas: d, micro_batches: m });
    }
    let mut ticks = Vec::with_capacity(d as usize);
    for (index, (&replicas, profile)) in config.replicas.iter().zip(profiles).enumerate() {
        if replicas == 0 {
            continue;
        }
        let tick = tick_ms(profile, depth).ok_or(MixedError::Depth { index, depth })?;
        ticks.extend(std::iter::repeat_n(tick, replicas as usize));
    }
    let shape = ParallelConfig::new(d, depth);
    let sync = config
        .replicas
        .iter()
        .zip(profiles)
        .filter(|(r, _)| **r > 0)
        .filter_map(|(_, p)| sync_ms(p, shape))
        .fold(None, |acc: Option<f64>, s| Some(acc.map_or(s, |a| a.max(s))))
        .ok_or(MixedError::Sync { replicas: d, depth })?;
    let split =
        balanced_split(&ticks, m, depth).ok_or(MixedError::Width { replicas: d, micro_batches: m })?;
    let fill = f64::from(depth) - 1.0;
    let compute = split.iter().zip(&ticks).map(|(&k, &t)| (f64::from(k) + fill) * t).fold(0.0, f64::max);
    let iteration_ms = compute + sync;
    let mut micro_batches = Vec::with_capacity(config.replicas.len());
    let mut next = 0;
    for &replicas in &config.replicas {
        micro_batches.push(split[next..next + replicas as usize].to_vec());
        next += replicas as usize;
    }
    Ok(MixedStep {
        iteration_ms,
        samples_per_second: f64::from(first.global_batch_size) / (iteration_ms / 1000.0),
        micro_batches,
    })
}

/// Every mixed layout that runs on `counts` instances of each type, with its step.
pub fn feasible(profiles: &[&ModelProfile], counts: &[u32]) -> Vec<(MixedConfig, MixedStep)> {
    let mut out = Vec::new();
    if profiles.is_empty() || profiles.len() != counts.len() {
        return out;
    }
    let mut depths: Vec<u32> =
        profiles.iter().flat_map(|p| p.configs.iter().map(|c| c.config.pipeline_stages)).collect();
    depths.sort_unstable();
    depths.dedup();
    for depth in depths {
        let limits: Vec<u32> = counts
            .iter()
            .zip(profiles)
            .map(|(&n, p)| if tick_ms(p, depth).is_some() { n / depth } else { 0 })
            .collect();
        let mut replicas = vec![0u32; limits.len()];
        // Every combination of replicas per type within the limits (odometer order).
        loop {
            let config = MixedConfig { pipeline_stages: depth, replicas: replicas.clone() };
            if config.data_parallel() > 0
                && let Ok(step) = mixed_step(profiles, &config)
            {
                out.push((config, step));
            }
            let Some(i) = (0..replicas.len()).find(|&i| replicas[i] < limits[i]) else { break };
            replicas[i] += 1;
            replicas[..i].iter_mut().for_each(|r| *r = 0);
        }
    }
    out
}

/// The fastest mixed layout on `counts` instances of each type, if any runs.
pub fn best_mixed(profiles: &[&ModelProfile], counts: &[u32]) -> Option<(MixedConfig, MixedStep)> {
    feasible(profiles, counts)
        .into_iter()
        .reduce(|best, next| if next.1.samples_per_second > best.1.samples_per_second { next } else { best })
}

/// The cost model's view of a mixed fleet of `counts` instances: a single-type profile
/// listing every shape `(D, P)` some split of `D` replicas over the types can run on those
/// instances, at the throughput of the best such split. Transfers, start-up and
/// checkpoint costs are the first type's. What a policy plans with and the simulator
/// scores an interval with while the fleet has that composition. `None` when no shape runs.
pub fn composition_profile(profiles: &[&ModelProfile], counts: &[u32]) -> Option<ModelProfile> {
    let first = profiles.first()?;
    let mut best: std::collections::BTreeMap<ParallelConfig, f64> = Default::default();
    for (config, step) in feasible(profiles, counts) {
        let entry = best.entry(config.shape()).or_insert(0.0);
        *entry = entry.max(step.samples_per_second);
    }
    if best.is_empty() {
        return None;
    }
    let mut profile = (*first).clone();
    let global = f64::from(first.global_batch_size);
    // Rebuild costs and model build follow the first type's entry of that shape, or of its
    // depth when that shape is not profiled there (a shape that runs has a profiled depth).
    profile.configs = best
        .into_iter()
        .filter_map(|(config, samples_per_second)| {
            let template = first
                .config(config)
                .or_else(|| profiles.iter().find_map(|p| p.config(config)))
                .or_else(|| at_depth(first, config.pipeline_stages).next())
                .or_else(|| profiles.iter().find_map(|p| at_depth(p, config.pipeline_stages).next()))?;
            Some(ConfigProfile {
                config,
                samples_per_second,
                iteration_ms: global / samples_per_second * 1000.0,
                ..template.clone()
            })
        })
        .collect();
    // Every depth planned needs its partition; a depth only another type runs brings its own.
    for config in &profile.configs {
        let depth = config.config.pipeline_stages;
        if !profile.partitions.iter().any(|p| p.pipeline_stages == depth)
            && let Some(partition) =
                profiles.iter().flat_map(|p| &p.partitions).find(|p| p.pipeline_stages == depth)
        {
            profile.partitions.push(partition.clone());
        }
    }
    Some(profile)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::toy_profile;

    /// A type whose layouts follow the model exactly: `tick` ms per tick at depth 1 (1/P of
    /// it at depth P), `sync_per_replica` ms of synchronisation per extra replica.
    fn typed(tick: f64, sync_per_replica: f64, widths: u32, depths: &[u32]) -> ModelProfile {
        let mut configs = Vec::new();
        for &p in depths {
            for d in 1..=widths {
                let t = tick / f64::from(p);
                let iteration = ((64.0 / f64::from(d)).ceil() + f64::from(p) - 1.0) * t
                    + sync_per_replica * f64::from(d - 1);
                configs.push((d, p, 64_000.0 / iteration));
            }
        }
        toy_profile(&configs, 0.0)
    }

    #[test]
    fn one_type_gets_exactly_its_profiled_step() {
        let fast = typed(10.0, 3.0, 4, &[1, 2]);
        for c in &fast.configs {
            let config = MixedConfig {
                pipeline_stages: c.config.pipeline_stages,
                replicas: vec![c.config.data_parallel],
            };
            let step = mixed_step(&[&fast], &config).unwrap();
            assert!((step.iteration_ms - c.iteration_ms).abs() < 1e-9, "{c:?} {step:?}");
            // With the other type present but unused, nothing changes.
            let slow = typed(30.0, 9.0, 4, &[1, 2]);
            let both = MixedConfig {
                pipeline_stages: config.pipeline_stages,
                replicas: vec![config.replicas[0], 0],
            };
            assert_eq!(mixed_step(&[&fast, &slow], &both).unwrap().iteration_ms, step.iteration_ms);
        }
    }

    #[test]
    fn the_batch_is_split_by_speed_and_a_mix_beats_either_type_alone() {
        let (fast, slow) = (typed(10.0, 1.0, 4, &[1]), typed(20.0, 1.0, 4, &[1]));
        let mix = MixedConfig { pipeline_stages: 1, replicas: vec![1, 1] };
        let step = mixed_step(&[&fast, &slow], &mix).unwrap();
        // 64 micro-batches, the fast replica twice as fast: 43 and 21 (finishing at 430 and
        // 420 ms), then one sync of 1 ms.
        assert_eq!(step.micro_batches, [vec![43], vec![21]]);
        assert!((step.iteration_ms - 431.0).abs() < 1e-9, "{step:?}");
        let alone = |p: &ModelProfile| p.config(ParallelConfig::new(1, 1)).unwrap().samples_per_second;
        assert!(step.samples_per_second > alone(&fast) && step.samples_per_second > alone(&slow));
        // The best layout on one fast and one slow instance is that mix.
        let (best, _) = best_mixed(&[&fast, &slow], &[1, 1]).unwrap();
        assert_eq!(best, mix);
        // Sync dearer than what the slow replica adds: the fast one alone.
        let slow_net = typed(20.0, 400.0, 4, &[1]);
        let (best, _) = best_mixed(&[&fast, &slow_net], &[1, 1]).unwrap();
        assert_eq!(best.replicas, [1, 0]);
    }

    #[test]
    fn balanced_split_minimises_the_slowest_replica() {
        assert_eq!(balanced_split(&[1.0, 1.0, 1.0], 8, 1).unwrap(), [3, 3, 2]);
        assert_eq!(balanced_split(&[1.0, 3.0], 8, 1).unwrap(), [6, 2]);
        // A deep pipeline's fill is paid by every replica: (k + 3) ticks each.
        assert_eq!(balanced_split(&[1.0, 2.0], 9, 4).unwrap(), [7, 2]);
        assert_eq!(balanced_split(&[1.0, 1.0], 1, 1), None);
        assert_eq!(balanced_split(&[], 4, 1), None);
    }

    #[test]
    fn layouts_without_a_prediction_are_refused() {
        let (a, b) = (typed(10.0, 1.0, 2, &[1, 2]), typed(20.0, 1.0, 2, &[1]));
        let deep = MixedConfig { pipeline_stages: 2, replicas: vec![1, 1] };
        assert_eq!(mixed_step(&[&a, &b], &deep), Err(MixedError::Depth { index: 1, depth: 2 }));
        let wide = MixedConfig { pipeline_stages: 1, replicas: vec![2, 1] };
        assert_eq!(mixed_step(&[&a, &b], &wide), Err(MixedError::Sync { replicas: 3, depth: 1 }));
        let none = MixedConfig { pipeline_stages: 1, replicas: vec![0, 0] };
        assert!(matches!(mixed_step(&[&a, &b], &none), Err(MixedError::Width { .. })));
        let mut other_batch = b.clone();
        other_batch.global_batch_size = 32;
        let one_each = MixedConfig { pipeline_stages: 1, replicas: vec![1, 1] };
        assert!(matches!(
            mixed_step(&[&a, &other_batch], &one_each),
            Err(MixedError::Batch { index: 1, .. })
        ));
        assert!(matches!(mixed_step(&[&a], &one_each), Err(MixedError::Shape { types: 1, counts: 2 })));
        assert!(mixed_step(&[&a, &b], &deep).unwrap_err().to_string().contains("depth 2"));
    }

    #[test]
    fn the_composition_profile_lists_what_the_fleet_can_run_at_its_best_split() {
        let (fast, slow) = (typed(10.0, 1.0, 4, &[1, 2]), typed(20.0, 1.0, 4, &[1]));
        let profile = composition_profile(&[&fast, &slow], &[2, 2]).unwrap();
        let shapes: Vec<(u32, u32)> =
            profile.configs.iter().map(|c| (c.config.data_parallel, c.config.pipeline_stages)).collect();
        // Depth 1: up to 2 + 2 replicas; depth 2: only the fast type, one replica.
        assert_eq!(shapes, [(1, 1), (1, 2), (2, 1), (3, 1), (4, 1)]);
        let one = &profile.configs[0];
        assert_eq!(
            one.samples_per_second,
            fast.config(ParallelConfig::new(1, 1)).unwrap().samples_per_second
        );
        let four = profile.config(ParallelConfig::new(4, 1)).unwrap();
        let mixed =
            mixed_step(&[&fast, &slow], &MixedConfig { pipeline_stages: 1, replicas: vec![2, 2] }).unwrap();
        assert_eq!(four.samples_per_second, mixed.samples_per_second);
        assert!((four.iteration_ms - mixed.iteration_ms).abs() < 1e-9);
        assert!(profile.partitions.iter().any(|p| p.pipeline_stages == 2));
        assert!(composition_profile(&[&fast, &slow], &[0, 0]).is_none());
    }
}
