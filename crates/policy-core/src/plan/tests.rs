//! Tests of the horizon planner: the program against brute-force enumeration
//! of every plan, identical numbers to `liveput()`, conventions (pauses, cold
//! starts, ties), cache behaviour, odd inputs, and timings.

use std::collections::BTreeMap;

use super::*;
use crate::liveput::liveput;
use crate::{ConfigProfile, Recovery, StagePartition, TransferPoint};

/// Unannounced preemptions (the rules before issue 16).
const U: Recovery = Recovery::UNANNOUNCED;

// ---------------------------------------------------------------- fixtures

/// SplitMix64 (Steele, Lea, Flood 2014): small, deterministic, good enough.
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    pub(crate) fn below(&mut self, n: u32) -> u32 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u32
    }
}

/// Contiguous partition of `params` (per layer) into `pp` stages, the first
/// stage holding the embedding, leftovers to the stages before the last.
fn partition_of(params: &[u64], pp: u32) -> StagePartition {
    let body = params.len() - 1;
    let pp_us = pp as usize;
    let mut counts = vec![body / pp_us; pp_us];
    counts[0] += 1;
    for i in 0..body % pp_us {
        counts[pp_us.saturating_sub(2 + i)] += 1;
    }
    let mut start = 0;
    let mut layers_per_stage = Vec::new();
    let mut state_bytes_per_stage = Vec::new();
    for n in counts {
        layers_per_stage.push(n as u32);
        state_bytes_per_stage.push(params[start..start + n].iter().sum::<u64>() * 12);
        start += n;
    }
    StagePartition { pipeline_stages: pp, layers_per_stage, state_bytes_per_stage }
}

/// A profile over `configs` (`(d, p, samples/s)`) whose migrations cost
/// seconds: restarts ~10 s plus transfers at ~1 GB/s of a ~1.7 GB state, and
/// a restart loses half of `checkpoint_interval_ms` of work.
pub(crate) fn profile_of(
    params: &[u64],
    configs: &[(u32, u32, f64)],
    checkpoint_interval_ms: f64,
) -> ModelProfile {
    let mut depths: Vec<u32> = configs.iter().map(|c| c.1).collect();
    depths.sort_unstable();
    depths.dedup();
    ModelProfile {
        model: "toy".into(),
        global_batch_size: 64,
        micro_batch_size: 1,
        configs: configs
            .iter()
            .map(|&(d, p, sps)| {
                let groups = f64::from(d + p + 1 + d * p);
                ConfigProfile {
                    config: ParallelConfig::new(d, p),
                    samples_per_second: sps,
                    iteration_ms: if sps > 0.0 { 64_000.0 / sps } else { 0.0 },
                    comm_rebuild_add_ms: 35.0 + groups * 300.0,
                    comm_rebuild_remove_ms: 35.0 + groups * 40.0,
                    model_build_ms: 200.0 + 2000.0 / f64::from(p),
                }
            })
            .collect(),
        partitions: depths.iter().map(|&p| partition_of(params, p)).collect(),
        transfer_curve: vec![
            TransferPoint { bytes: 1 << 10, micros: 100.0 },
            TransferPoint { bytes: 1 << 30, micros: 1_000_000.0 },
        ],
        rendezvous_ms: 3000.0,
        process_start_ms: 500.0,
        add_extra_ms: 1000.0,
        checkpoint_restart_ms: 5000.0,
        checkpoint_interval_ms,
    }
}

/// Small uneven model: embedding, 7 blocks, head (~1.7 GB of state).
const TOY: [u64; 9] = [
    30_000_000, 10_000_000, 20_000_000, 15_000_000, 10_000_000, 25_000_000, 12_000_000, 8_000_000, 10_000_000,
];

pub(crate) fn toy_profile(configs: &[(u32, u32, f64)], checkpoint_interval_ms: f64) -> ModelProfile {
    profile_of(&TOY, configs, checkpoint_interval_ms)
}

/// Every layout cost zero: no transfer curve, no start-up, no lost work.
fn free_profile(configs: &[(u32, u32, f64)]) -> ModelProfile {
    let mut p = toy_profile(configs, 0.0);
    for c in &mut p.configs {
        c.comm_rebuild_add_ms = 0.0;
        c.comm_rebuild_remove_ms = 0.0;
        c.model_build_ms = 0.0;
    }
    p.transfer_curve.clear();
    p.rendezvous_ms = 0.0;
    p.process_start_ms = 0.0;
    p.add_extra_ms = 0.0;
    p.checkpoint_restart_ms = 0.0;
    p
}

fn cfg(d: u32, p: u32) -> Option<ParallelConfig> {
    Some(ParallelConfig::new(d, p))
}

fn step(instances_before: u32, preempted: u32, arrived: u32) -> Step {
    Step { instances_before, preempted, arrived }
}

/// The program's conventions applied to one transition: the old layout only
/// counts if it is in the profile and fits.
fn from_fit(profile: &ModelProfile, from: Option<ParallelConfig>, before: u32) -> Option<ParallelConfig> {
    from.filter(|c| {
        c.data_parallel > 0
            && c.pipeline_stages > 0
            && profile.config(*c).is_some()
            && c.instances() <= u64::from(before)
    })
}

/// `liveput()` of one interval, with the program's conventions for `from`.
fn value_of(
    profile: &ModelProfile,
    from: Option<ParallelConfig>,
    s: &Step,
    to: Option<ParallelConfig>,
    interval_ms: u64,
    carry: f64,
) -> (f64, f64) {
    let from = from_fit(profile, from, s.instances_before);
    let v =
        liveput(profile, &U, from, s.instances_before, s.preempted, s.arrived, to, interval_ms as f64, carry)
            .unwrap();
    (v.expected_samples, v.expected_leftover_ms)
}

/// `liveput()` along a plan: per-step (samples, leftover).
fn evaluate(
    profile: &ModelProfile,
    current: Option<ParallelConfig>,
    carried_ms: f64,
    steps: &[Step],
    configs: &[Option<ParallelConfig>],
    interval_ms: u64,
) -> Vec<(f64, f64)> {
    let (mut from, mut carry) = (current, carried_ms);
    let mut out = Vec::new();
    for (s, &to) in steps.iter().zip(configs) {
        let v = value_of(profile, from, s, to, interval_ms, carry);
        out.push(v);
        carry = v.1;
        from = to;
    }
    out
}

/// Best total value by enumerating every plan (sharing prefixes).
fn brute_force(
    profile: &ModelProfile,
    current: Option<ParallelConfig>,
    carried_ms: f64,
    steps: &[Step],
    interval_ms: u64,
) -> f64 {
    fn go(
        profile: &ModelProfile,
        steps: &[Step],
        interval_ms: u64,
        from: Option<ParallelConfig>,
        carry: f64,
        acc: f64,
    ) -> f64 {
        let Some((s, rest)) = steps.split_first() else {
            return acc;
        };
        let after = s.instances_after().unwrap();
        let mut best = f64::NEG_INFINITY;
        let mut options: Vec<Option<ParallelConfig>> = vec![None];
        for c in &profile.configs {
            if c.config.instances() <= after && !options.contains(&Some(c.config)) {
                options.push(Some(c.config));
            }
        }
        for to in options {
            let (samples, leftover) = value_of(profile, from, s, to, interval_ms, carry);
            best = best.max(go(profile, rest, interval_ms, to, leftover, acc + samples));
        }
        best
    }
    go(profile, steps, interval_ms, current, carried_ms, 0.0)
}

fn total(plan: &[PlannedStep]) -> f64 {
    plan.iter().fold(0.0, |acc, s| acc + s.expected_samples)
}

fn configs_of(plan: &[PlannedStep]) -> Vec<Option<ParallelConfig>> {
    plan.iter().map(|s| s.config).collect()
}

/// The plan's own numbers are `liveput()`'s along it, bit for bit.
fn assert_self_consistent(
    profile: &ModelProfile,
    current: Option<ParallelConfig>,
    carried_ms: f64,
    steps: &[Step],
    interval_ms: u64,
    plan: &[PlannedStep],
) {
    assert_consistent_with(profile, current, carried_ms, steps, interval_ms, plan);
}

fn assert_consistent_with(
    profile: &ModelProfile,
    current: Option<ParallelConfig>,
    carried_ms: f64,
    steps: &[Step],
    interval_ms: u64,
    plan: &[PlannedStep],
) {
    let numbers = evaluate(profile, current, carried_ms, steps, &configs_of(plan), interval_ms);
    for (k, (s, (samples, leftover))) in plan.iter().zip(numbers).enumerate() {
        assert_eq!(s.expected_samples, samples, "step {k}");
        assert_eq!(s.expected_leftover_ms, leftover, "step {k}");
    }
}

/// Pool of small layouts with distinct shapes (depths 1, 2, 4).
const POOL: [(u32, u32, f64); 9] = [
    (1, 1, 6.0),
    (2, 1, 11.0),
    (1, 2, 9.0),
    (2, 2, 17.0),
    (3, 2, 23.0),
    (1, 4, 12.0),
    (2, 4, 21.0),
    (4, 2, 27.0),
    (3, 1, 14.0),
];

fn random_case(rng: &mut SplitMix64) -> (ModelProfile, Option<ParallelConfig>, f64, Vec<Step>, u64) {
    let n_configs = 4 + rng.below(3) as usize;
    let mut picked: Vec<(u32, u32, f64)> = Vec::new();
    while picked.len() < n_configs {
        let c = POOL[rng.below(POOL.len() as u32) as usize];
        if !picked.iter().any(|p| (p.0, p.1) == (c.0, c.1)) {
            picked.push(c);
        }
    }
    // Lost work of 15-60 s per restart: leftovers above the interval.
    let ckpt = [0.0, 30_000.0, 120_000.0][rng.below(3) as usize];
    let profile = toy_profile(&picked, ckpt);
    let horizon = 1 + rng.below(4) as usize;
    let mut before = rng.below(9);
    let mut steps = Vec::new();
    for _ in 0..horizon {
        let preempted = if rng.below(2) == 0 { 0 } else { rng.below(before + 1) };
        let arrived = if rng.below(3) == 0 { rng.below(4) } else { 0 };
        let s = step(before, preempted, arrived);
        before = s.instances_after().unwrap() as u32;
        steps.push(s);
    }
    let current = match rng.below(4) {
        0 => None,
        _ => {
            let c = picked[rng.below(picked.len() as u32) as usize];
            cfg(c.0, c.1)
        }
    };
    let carried = [0.0, 0.0, 7_000.0, 45_000.0][rng.below(4) as usize];
    let interval_ms = [10_000, 20_000, 60_000][rng.below(3) as usize];
    (profile, current, carried, steps, interval_ms)
}

// ---------------------------------------------------------------- optimality

#[test]
fn matches_brute_force() {
    {
        let options = PlanOptions::default();
        let mut rng = SplitMix64(2024);
        let mut cache = TransitionCache::default();
        let (mut with_leftover, mut over_interval, mut restarts_lost, mut pauses, mut cap2_worse) =
            (0, 0, 0, 0, 0);
        let cases = 120;
        for case in 0..cases {
            let (profile, current, carried, steps, interval_ms) = random_case(&mut rng);
            let plan =
                best_plan_with(&profile, current, carried, &steps, interval_ms, options, &mut cache).unwrap();
            assert_eq!(plan.len(), steps.len());
            let brute = brute_force(&profile, current, carried, &steps, interval_ms);
            let dp = total(&plan);
            assert!(
                (dp - brute).abs() <= 1e-9 * brute.abs().max(1.0),
                "case {case}: dp {dp} brute {brute}\n{profile:?}\n{current:?} {carried} {steps:?} \
                 {interval_ms}\n{plan:?}"
            );
            assert_consistent_with(&profile, current, carried, &steps, interval_ms, &plan);
            // A fresh cache gives the same plan.
            let mut fresh = TransitionCache::default();
            let again =
                best_plan_with(&profile, current, carried, &steps, interval_ms, options, &mut fresh).unwrap();
            assert_eq!(again, plan, "case {case}");
            with_leftover += usize::from(plan.iter().any(|s| s.expected_leftover_ms > 0.0));
            over_interval += usize::from(plan.iter().any(|s| s.expected_leftover_ms > interval_ms as f64));
            pauses += usize::from(plan.iter().any(|s| s.config.is_none()));
            restarts_lost +=
                usize::from(profile.checkpoint_interval_ms > 0.0 && steps.iter().any(|s| s.preempted > 0));
            // The smallest cap: never better, and how often worse.
            let small = PlanOptions { max_front: 2, ..PlanOptions::default() };
            let capped =
                best_plan_with(&profile, current, carried, &steps, interval_ms, small, &mut fresh).unwrap();
            assert!(total(&capped) <= dp + 1e-9 * dp.abs().max(1.0));
            cap2_worse += usize::from(total(&capped) < dp - 1e-9 * dp.abs().max(1.0));
        }
        let stats = cache.stats();
        assert_eq!(stats.front_truncations, 0);
        // The cases must exercise what the fronts are for.
        assert!(with_leftover >= 10 && stats.largest_front >= 2, "{with_leftover} {stats:?}");
        assert!(restarts_lost >= 20 && pauses >= 5, "{restarts_lost} {pauses}");
        println!(
            "{with_leftover} plans carry a leftover ({over_interval} above the interval), \
             largest front {}, plans worse with fronts of 2: {cap2_worse}/{cases}",
            stats.largest_front
        );
    }
}

/// Hand-made cases where the best plan is known.
#[test]
fn known_plans() {
    let interval_ms = 20_000;
    // Zero costs: the fastest layout that fits, every step; pause where
    // nothing fits.
    let p = free_profile(&[(1, 2, 10.0), (2, 2, 19.0), (1, 4, 12.0), (4, 2, 30.0)]);
    let steps = [step(4, 0, 0), step(4, 0, 4), step(8, 5, 0), step(3, 2, 0), step(1, 0, 0)];
    let plan = best_plan(&p, None, 0.0, &steps, interval_ms, &mut TransitionCache::default()).unwrap();
    assert_eq!(configs_of(&plan), [cfg(2, 2), cfg(4, 2), cfg(1, 2), None, None]);
    assert_eq!(plan[1].expected_samples, 30.0 * 20.0);
    assert_eq!(plan[3].expected_samples, 0.0);

    // Costly moves: a lasting rise is worth a migration. (A one-interval rise
    // may be too: 3x2 survives the fall with no stage wiped, 2x2 plus two
    // spares loses a whole stage with probability 2/15.)
    let p = toy_profile(&[(1, 2, 10.0), (2, 2, 19.0), (3, 2, 26.0)], 0.0);
    let mut cache = TransitionCache::default();
    let blip = [step(4, 0, 0), step(4, 0, 2), step(6, 2, 0), step(4, 0, 0)];
    let plan = best_plan(&p, cfg(2, 2), 0.0, &blip, interval_ms, &mut cache).unwrap();
    assert_eq!(total(&plan), brute_force(&p, cfg(2, 2), 0.0, &blip, interval_ms));
    let rise = [step(4, 0, 0), step(4, 0, 2), step(6, 0, 0), step(6, 0, 0), step(6, 0, 0)];
    let plan = best_plan(&p, cfg(2, 2), 0.0, &rise, interval_ms, &mut cache).unwrap();
    assert_eq!(configs_of(&plan), [cfg(2, 2), cfg(3, 2), cfg(3, 2), cfg(3, 2), cfg(3, 2)]);
    assert_eq!(plan[0].expected_samples, 19.0 * 20.0, "staying with nothing lost is free");
}

/// A leftover longer than the interval passes through whole intervals, and a
/// pause cannot abandon it: the migration runs on during the pause. A
/// restart can: it reloads the checkpoint and pays its `R_type` instead of
/// the rest (a cold start after a pause does).
#[test]
fn carried_leftover_spans_intervals() {
    let p = toy_profile(&[(1, 2, 10.0), (2, 2, 19.0)], 0.0);
    let steps = [step(4, 0, 0); 4];
    let mut cache = TransitionCache::default();
    let plan = best_plan(&p, cfg(2, 2), 45_000.0, &steps, 20_000, &mut cache).unwrap();
    assert_eq!(total(&plan), brute_force(&p, cfg(2, 2), 45_000.0, &steps, 20_000));
    assert_eq!(configs_of(&plan), [None, cfg(2, 2), cfg(2, 2), cfg(2, 2)], "abandoned by a restart");
    // Staying carries the migration through the intervals.
    let plan: Vec<PlannedStep> = evaluate(&p, cfg(2, 2), 45_000.0, &steps, &[cfg(2, 2); 4], 20_000)
        .into_iter()
        .map(|(expected_samples, expected_leftover_ms)| PlannedStep {
            config: cfg(2, 2),
            expected_samples,
            expected_leftover_ms,
        })
        .collect();
    let leftovers: Vec<f64> = plan.iter().map(|s| s.expected_leftover_ms).collect();
    assert_eq!(leftovers, [25_000.0, 5_000.0, 0.0, 0.0]);
    let samples: Vec<f64> = plan.iter().map(|s| s.expected_samples).collect();
    assert_eq!(samples, [0.0, 0.0, 19.0 * 15.0, 19.0 * 20.0]);
    let pause_first =
        evaluate(&p, cfg(2, 2), 45_000.0, &steps, &[None, cfg(2, 2), cfg(2, 2), cfg(2, 2)], 20_000);
    assert_eq!(pause_first[0], (0.0, 25_000.0), "the pause carries the migration on");
}

// ---------------------------------------------------------------- conventions

#[test]
fn conventions() {
    let p = toy_profile(&[(1, 2, 10.0), (2, 2, 19.0)], 30_000.0);
    let mut cache = TransitionCache::default();
    // Empty horizon.
    assert_eq!(best_plan(&p, cfg(2, 2), 0.0, &[], 1000, &mut cache).unwrap(), vec![]);
    // Nothing fits: pauses; only the first step's wiped stage loses work.
    let plan = best_plan(&p, cfg(2, 2), 0.0, &[step(4, 3, 0), step(1, 0, 0)], 1000, &mut cache).unwrap();
    assert!(plan.iter().all(|s| s.config.is_none()));
    let lost = crate::liveput::lost_work_ms(&p) * 19.0 / 1000.0;
    assert_eq!((plan[0].expected_samples, plan[1].expected_samples), (-lost, 0.0));
    // An empty profile pauses.
    let mut empty = p.clone();
    empty.configs.clear();
    let plan = best_plan(&empty, None, 0.0, &[step(4, 0, 0)], 1000, &mut cache).unwrap();
    assert_eq!(configs_of(&plan), [None]);
    // `current` not in the profile, or not fitting, is a cold start.
    let steps = [step(4, 1, 0), step(3, 0, 1)];
    let cold = best_plan(&p, None, 0.0, &steps, 60_000, &mut cache).unwrap();
    for odd in [cfg(7, 7), cfg(0, 2), cfg(3, 2)] {
        assert_eq!(best_plan(&p, odd, 0.0, &steps, 60_000, &mut cache).unwrap(), cold, "{odd:?}");
    }
    let steps = [step(3, 0, 1), step(4, 0, 0)];
    let cold = best_plan(&p, None, 0.0, &steps, 60_000, &mut cache).unwrap();
    assert_eq!(best_plan(&p, cfg(2, 2), 0.0, &steps, 60_000, &mut cache).unwrap(), cold);
    // Inconsistent steps: a layout that does not fit the next step's
    // `instances_before` restarts cold, no error.
    let plan = best_plan(&p, cfg(2, 2), 0.0, &[step(4, 0, 0), step(2, 0, 2)], 60_000, &mut cache).unwrap();
    assert_self_consistent(&p, cfg(2, 2), 0.0, &[step(4, 0, 0), step(2, 0, 2)], 60_000, &plan);
    // Errors, not panics.
    assert!(matches!(
        best_plan(&p, None, 0.0, &[step(2, 3, 0)], 1000, &mut cache),
        Err(LiveputError::PreemptedAboveInstances { .. })
    ));
    assert!(matches!(
        best_plan(&p, None, 0.0, &[step(MAX_INSTANCES + 1, 0, 0)], 1000, &mut cache),
        Err(LiveputError::TooManyInstances { .. })
    ));
    assert!(matches!(
        best_plan(&p, None, 0.0, &[step(MAX_INSTANCES, 0, 1)], 1000, &mut cache),
        Err(LiveputError::TooManyInstances { .. })
    ));
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            best_plan(&p, None, bad, &[step(4, 0, 0)], 1000, &mut cache),
            Err(LiveputError::BadTime { .. })
        ));
    }
    let mut nan = p.clone();
    nan.configs[0].samples_per_second = f64::NAN;
    assert!(matches!(
        best_plan(&nan, None, 0.0, &[step(4, 0, 0)], 1000, &mut cache),
        Err(LiveputError::BadProfileValue { .. })
    ));
    let mut no_partition = p.clone();
    no_partition.partitions.clear();
    assert!(best_plan(&no_partition, None, 0.0, &[step(4, 0, 0)], 1000, &mut cache).is_err());
}

#[test]
fn ties_are_deterministic() {
    // Equal throughput and zero costs: everything ties.
    let p = free_profile(&[(1, 4, 20.0), (2, 2, 20.0), (4, 1, 20.0), (1, 2, 20.0)]);
    let steps = [step(4, 0, 0); 3];
    let mut cache = TransitionCache::default();
    // Staying in `current` wins a tie.
    let plan = best_plan(&p, cfg(2, 2), 0.0, &steps, 1000, &mut cache).unwrap();
    assert_eq!(configs_of(&plan), [cfg(2, 2); 3]);
    // From nothing: fewer instances, then fewer stages.
    let plan = best_plan(&p, None, 0.0, &steps, 1000, &mut cache).unwrap();
    assert_eq!(configs_of(&plan), [cfg(1, 2); 3]);
    // Profile order does not matter.
    let mut reversed = p.clone();
    reversed.configs.reverse();
    assert_eq!(
        configs_of(&best_plan(&reversed, None, 0.0, &steps, 1000, &mut cache).unwrap()),
        [cfg(1, 2); 3]
    );
    // Zero-length intervals: nothing to gain, stay or pause, never an error.
    let plan = best_plan(&p, cfg(4, 1), 0.0, &steps, 0, &mut cache).unwrap();
    assert_eq!(configs_of(&plan), [cfg(4, 1); 3]);
    // Duplicate entries count once (the first).
    let mut dup = p.clone();
    dup.configs.push(dup.configs[0].clone());
    dup.configs[4].samples_per_second = 99.0;
    assert_eq!(configs_of(&best_plan(&dup, None, 0.0, &steps, 1000, &mut cache).unwrap()), [cfg(1, 2); 3]);
}

/// With every cost zero, the optimum is the fastest fitting layout per step,
/// so more instances never lower it.
#[test]
fn free_moves_are_monotone_in_instances() {
    let p = free_profile(&POOL);
    let mut cache = TransitionCache::default();
    let mut rng = SplitMix64(5);
    for _ in 0..50 {
        let counts: Vec<u32> = (0..5).map(|_| rng.below(10)).collect();
        let mut last = f64::NEG_INFINITY;
        for extra in 0..4 {
            let lifted: Vec<IntervalStats> = IntervalStats::chain_from(counts[0] + extra, &{
                counts.iter().map(|&c| c + extra).collect::<Vec<_>>()
            });
            let steps = Step::chain(counts[0] + extra, &lifted);
            let plan = best_plan(&p, None, 0.0, &steps, 1000, &mut cache).unwrap();
            let expected: f64 = steps.iter().fold(0.0, |acc, s| {
                let after = s.instances_after().unwrap();
                acc + crate::reactive::best_config_for(&p, after as u32).map_or(0.0, |c| c.samples_per_second)
            });
            assert!((total(&plan) - expected).abs() < 1e-9, "{} vs {expected}", total(&plan));
            assert!(total(&plan) >= last);
            last = total(&plan);
        }
    }
}

#[test]
fn step_helpers() {
    assert_eq!(Step::between(5, 7, 1), step(5, 1, 3));
    assert_eq!(Step::between(5, 2, 1), step(5, 3, 0));
    assert_eq!(Step::between(2, 4, 9), step(2, 2, 4));
    assert_eq!(step(2, 3, 0).instances_after(), None);
    let intervals = IntervalStats::chain_from(4, &[6, 3, 3]);
    assert_eq!(Step::chain(4, &intervals), [step(4, 0, 2), step(6, 3, 0), step(3, 0, 0)]);
}

// ---------------------------------------------------------------- cache

#[test]
fn cache_is_bounded_and_transparent() {
    let mut rng = SplitMix64(99);
    let mut big = TransitionCache::default();
    let mut tiny = TransitionCache::with_bounds(8, 64);
    let mut fresh_calls = 0;
    for _ in 0..40 {
        let (profile, current, carried, steps, interval_ms) = random_case(&mut rng);
        // The same profile twice in a row, then a new one: other layouts of
        // the same pool at the same costs (and another cadence), whose
        // distributions the big cache carries over.
        for _ in 0..2 {
            let a = best_plan(&profile, current, carried, &steps, interval_ms, &mut big).unwrap();
            let b = best_plan(&profile, current, carried, &steps, interval_ms, &mut tiny).unwrap();
            let mut fresh = TransitionCache::default();
            let c = best_plan(&profile, current, carried, &steps, interval_ms, &mut fresh).unwrap();
            assert_eq!(a, b);
            assert_eq!(a, c);
            fresh_calls += 1;
        }
    }
    let (b, t) = (big.stats(), tiny.stats());
    assert!(b.carried_over >= 20 && b.clears == 0 && t.clears > 20, "{b:?} {t:?}");
    assert!(b.hits > b.misses, "{b:?}");
    assert_eq!(b.plans, fresh_calls);
    big.clear();
    assert!(big.is_empty());
}

/// A cache past its bound drops the tables it used least recently, not
/// everything: the fleet it planned last is kept (packed), planned again
/// without a distribution computed, and exactly as a fresh cache plans it.
/// Emptying it all made the call after a bound recompute every fleet size it
/// met, twice its neighbours' work where instances live minutes.
#[test]
fn a_full_cache_drops_the_tables_used_least_recently() {
    let profile = toy_profile(&[(1, 4, 30.0), (2, 2, 24.0), (1, 2, 14.0), (2, 4, 50.0)], 600_000.0);
    let current = Some(ParallelConfig::new(2, 2));
    // Three fleet sizes then another: no table in common.
    let busy = [Step::between(12, 12, 1), Step::between(12, 12, 2), Step::between(12, 12, 3)];
    let calm = [Step::between(10, 10, 1), Step::between(10, 10, 1)];
    let fresh = |steps: &[Step], carried: f64| {
        let mut cache = TransitionCache::default();
        let plan = best_plan(&profile, current, carried, steps, 60_000, &mut cache).unwrap();
        (plan, cache.stats().computed)
    };
    let ((_, busy_outcomes), (_, calm_outcomes)) = (fresh(&busy, 0.0), fresh(&calm, 0.0));
    assert!(busy_outcomes > calm_outcomes, "{busy_outcomes} vs {calm_outcomes}");
    // Room for either, not both; the calm fleet's tables fit in half.
    let bound = busy_outcomes.max(2 * calm_outcomes) as usize;
    let mut cache = TransitionCache::with_bounds(bound, usize::MAX);
    best_plan(&profile, current, 0.0, &busy, 60_000, &mut cache).unwrap();
    best_plan(&profile, current, 0.0, &calm, 60_000, &mut cache).unwrap();
    // Planned again with a migration carried in: the same tables, but not a
    // plan the cache can recall.
    let before = cache.stats();
    let again = best_plan(&profile, current, 1_000.0, &calm, 60_000, &mut cache).unwrap();
    let after = cache.stats();
    assert_eq!(again, fresh(&calm, 1_000.0).0);
    assert_eq!((after.evictions - before.evictions, after.clears, after.recalled), (1, 0, 0), "{after:?}");
    assert_eq!(after.misses, before.misses, "the calm fleet's tables were kept");
    // The busy fleet's were dropped, and are computed again as they were.
    let busy_again = best_plan(&profile, current, 1_000.0, &busy, 60_000, &mut cache).unwrap();
    assert_eq!(busy_again, fresh(&busy, 1_000.0).0);
    assert!(cache.stats().misses > after.misses, "{:?}", cache.stats());
}

/// A cache evicting every few calls (its outcomes packed each time)
/// plans every call exactly as a fresh cache does: nothing remembered by the
/// place of a distribution's outcomes (the sums at rest, `plan::at_rest`)
/// outlives the packing that moves them.
#[test]
fn a_cache_packed_again_and_again_plans_as_afresh() {
    let profile = toy_profile(&POOL, 600_000.0);
    let mut rng = SplitMix64(7);
    let mut cache = TransitionCache::with_bounds(400, usize::MAX);
    for call in 0..60 {
        let before = 6 + rng.below(5);
        let steps: Vec<Step> = (0..3)
            .map(|_| {
                let n = before + rng.below(3);
                step(n, rng.below(3), rng.below(2))
            })
            .collect();
        let current = cfg(1 + rng.below(2), 2);
        let carried = if call % 3 == 0 { 1_000.0 } else { 0.0 };
        let planned = best_plan(&profile, current, carried, &steps, 60_000, &mut cache).unwrap();
        let fresh =
            best_plan(&profile, current, carried, &steps, 60_000, &mut TransitionCache::default()).unwrap();
        assert_eq!(planned, fresh, "call {call}: {steps:?} from {current:?}");
    }
    assert!(cache.stats().evictions > 5, "{:?}", cache.stats());
}

/// A plan held to a work limit stops at the first distribution it would
/// compute past it, not at the end of the interval (one interval at a fleet
/// size not seen yet computes one for every pair of layouts).
#[test]
fn a_work_limit_stops_before_the_next_distribution() {
    let profile = toy_profile(&[(1, 4, 30.0), (2, 2, 24.0), (1, 2, 14.0), (2, 4, 50.0)], 600_000.0);
    let steps = [Step::between(12, 12, 2), Step::between(12, 12, 1)];
    let mut cache = TransitionCache::default();
    let options = PlanOptions { work_limit: Some(0), ..PlanOptions::default() };
    let stopped = best_plan_scored(&profile, None, 0.0, &steps, &[], 60_000, options, &mut cache);
    assert!(matches!(stopped, Err(LiveputError::WorkLimit { limit: 0 })), "{stopped:?}");
    assert_eq!(cache.stats().misses, 1, "{:?}", cache.stats());
    // Without the limit the first interval alone computes several.
    let mut free = TransitionCache::default();
    best_plan(&profile, None, 0.0, &steps[..1], 60_000, &mut free).unwrap();
    assert!(free.stats().misses > 2, "{:?}", free.stats());
}

/// The cache keeps its distributions across profiles of the same costs
/// (other speeds, another cadence, other layouts listed) and empties itself
/// when a layout's costs or the recovery differ, each time planning exactly
/// what a fresh cache plans.
#[test]
fn the_cache_follows_the_costs_not_the_speeds() {
    let steps = [step(4, 1, 0), step(3, 0, 2), step(5, 2, 0)];
    let plan = |profile: &ModelProfile, cache: &mut TransitionCache| {
        best_plan(profile, cfg(2, 2), 0.0, &steps, 60_000, cache).unwrap()
    };
    let base = toy_profile(&POOL, 120_000.0);
    let mut faster = toy_profile(&POOL[..6], 30_000.0);
    for c in &mut faster.configs {
        c.samples_per_second *= 1.5;
    }
    let mut dearer = base.clone();
    dearer.configs[2].comm_rebuild_add_ms += 1.0;
    let mut cache = TransitionCache::default();
    // Fewer layouts first, so the tables widen when the others come.
    for (profile, clears, carried) in [(&faster, 0, 0), (&base, 0, 1), (&faster, 0, 2), (&dearer, 1, 2)] {
        let planned = plan(profile, &mut cache);
        assert_eq!(planned, plan(profile, &mut TransitionCache::default()));
        let stats = cache.stats();
        assert_eq!((stats.clears, stats.carried_over), (clears, carried), "{stats:?}");
    }
}

/// What the shared table of steps without preemptions relies on.
#[test]
fn zero_preemption_distributions_ignore_the_fleet() {
    let p = toy_profile(&POOL, 30_000.0);
    let layouts: Vec<Option<ParallelConfig>> =
        p.configs.iter().map(|c| Some(c.config)).chain([None]).collect();
    for &from in &layouts {
        for &to in &layouts[..layouts.len() - 1] {
            let need = from.map_or(0, |c| c.instances()).max(to.map_or(0, |c| c.instances())) as u32;
            let reference = crate::liveput::transition_distribution(&p, from, need, 0, 0, to).unwrap();
            for n in need..need + 12 {
                let d = crate::liveput::transition_distribution(&p, from, n, 0, 0, to).unwrap();
                assert_eq!(d, reference, "{from:?} -> {to:?} on {n}");
            }
        }
    }
}

// ---------------------------------------------------------------- odd inputs

#[test]
fn odd_inputs_never_panic() {
    let mut rng = SplitMix64(3);
    let mut cache = TransitionCache::default();
    let mut ok = 0;
    for _ in 0..300 {
        let mut configs: Vec<(u32, u32, f64)> =
            (0..rng.below(6)).map(|_| (rng.below(4), rng.below(5), f64::from(rng.below(30)))).collect();
        if rng.below(5) == 0 {
            configs.push((1, 3, 5.0));
        }
        let mut profile =
            toy_profile(&configs.iter().filter(|c| c.1 > 0).copied().collect::<Vec<_>>(), 10_000.0);
        profile.configs.extend(configs.iter().filter(|c| c.1 == 0).map(|&(d, p, s)| ConfigProfile {
            config: ParallelConfig::new(d, p),
            samples_per_second: s,
            iteration_ms: 1.0,
            comm_rebuild_add_ms: 0.0,
            comm_rebuild_remove_ms: 0.0,
            model_build_ms: 0.0,
        }));
        if rng.below(6) == 0 {
            profile.partitions.pop();
        }
        let steps: Vec<Step> =
            (0..rng.below(5)).map(|_| step(rng.below(12), rng.below(8), rng.below(8))).collect();
        let current = if rng.below(3) == 0 { None } else { cfg(rng.below(4), rng.below(5)) };
        let interval_ms = [0, 1, 1000, 60_000, u64::MAX][rng.below(5) as usize];
        if let Ok(plan) = best_plan(&profile, current, 0.0, &steps, interval_ms, &mut cache) {
            ok += 1;
            assert_eq!(plan.len(), steps.len());
            for (s, p) in steps.iter().zip(&plan) {
                // Samples go below zero only by the work a restart loses.
                let floor =
                    -crate::liveput::lost_work_ms(&profile) * profile.peak_samples_per_second() / 1000.0;
                assert!(p.expected_samples >= floor * (1.0 + 1e-9) && p.expected_leftover_ms >= 0.0);
                if let Some(c) = p.config {
                    assert!(c.instances() <= s.instances_after().unwrap());
                    assert!(profile.config(c).is_some());
                }
            }
        }
    }
    assert!(ok > 100, "{ok}");
}

// ---------------------------------------------------------------- timing

/// The point-to-point curve of the p3 cluster (the artifact's
/// `CostModel.p2p_volume_to_cost`, bytes -> µs), as in the liveput tests.
const P3_CURVE: [(u64, f64); 12] = [
    (4, 142.907),
    (1024, 137.372),
    (65536, 194.492),
    (262144, 385.104),
    (1048576, 1428.108),
    (4194304, 5182.599),
    (16777216, 18622.294),
    (67108864, 74432.216),
    (134217728, 153550.589),
    (268435456, 305811.282),
    (536870912, 601380.752),
    (1073741824, 1198255.900),
];

/// A profile shaped like one model of `p3-v100-parcae.json`: the same
/// layouts, synthetic throughput, the artifact's GPT communicator rule and the
/// p3 constants.
fn p3_like(name: &str) -> ModelProfile {
    let (depths, min_d, layers, per_layer, embed): (Vec<u32>, u32, usize, u64, u64) = match name {
        "gpt-1.5b" => ((6..=32).collect(), 1, 48, 30_740_800, 82_124_800),
        "gpt-6.7b" => ((12..=16).collect(), 1, 32, 201_379_840, 214_433_792),
        "bert" => (vec![2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16], 1, 24, 12_596_224, 31_782_912),
        "resnet152" => (vec![2, 4, 6, 8, 10, 12, 14, 16], 1, 50, 1_000_000, 2_000_000),
        _ => ((2..=9).collect(), 2, 18, 7_000_000, 2_000_000),
    };
    let max_d = if name == "gpt-6.7b" { 2 } else { 32 };
    let mut configs = Vec::new();
    for &p in &depths {
        for d in min_d..=max_d {
            if d * p <= 32 {
                // Sub-linear in d, a pipeline bubble in p, a deterministic wobble.
                let wobble = 1.0 + 0.15 * (f64::from(d * 7 + p * 3)).sin();
                configs.push((d, p, 40.0 * f64::from(d).powf(0.9) * wobble / (1.0 + 2.0 / f64::from(p))));
            }
        }
    }
    let mut params = vec![embed];
    params.extend(std::iter::repeat_n(per_layer, layers));
    params.push(embed);
    let mut profile = profile_of(&params, &configs, 1_800_000.0);
    for c in &mut profile.configs {
        let (d, p) = (c.config.data_parallel, c.config.pipeline_stages);
        let groups = f64::from(d + p + 1 + d * p);
        c.comm_rebuild_add_ms = 35.0 + groups * 500.0;
        c.comm_rebuild_remove_ms = 35.0 + groups * 39.3;
        c.model_build_ms = 234.8 + 430.0 * f64::from(48u32.div_ceil(p));
    }
    profile.transfer_curve =
        P3_CURVE.iter().map(|&(bytes, micros)| TransferPoint { bytes, micros }).collect();
    profile.rendezvous_ms = 6600.0;
    profile.process_start_ms = 240.0;
    profile.add_extra_ms = 2000.0;
    profile.checkpoint_restart_ms = 14_000.0;
    profile
}

/// A 683-interval availability trace of a 32-instance fleet: `p3-events.csv`
/// (`ms,add|remove,node`) when `PARCAE_P3_EVENTS` names it, else a synthetic
/// one with similar statistics (about a quarter of the intervals change, by 1
/// to 6 instances, between 8 and 32).
fn trace() -> (u32, Vec<IntervalStats>) {
    const N: usize = 683;
    if let Ok(path) = std::env::var("PARCAE_P3_EVENTS") {
        let text = std::fs::read_to_string(path).unwrap();
        let mut arrivals = vec![0u32; N];
        let mut preemptions = vec![0u32; N];
        for line in text.lines() {
            let mut it = line.split(',');
            let (Some(t), Some(kind)) = (it.next(), it.next()) else { continue };
            let Ok(t) = t.trim().parse::<u64>() else { continue };
            let i = (t / 60_000) as usize;
            if i < N {
                if kind.trim() == "add" { arrivals[i] += 1 } else { preemptions[i] += 1 }
            }
        }
        let mut n = 0u32;
        let stats = (0..N)
            .map(|i| {
                n = n + arrivals[i] - preemptions[i];
                IntervalStats { instances: n, arrivals: arrivals[i], preemptions: preemptions[i] }
            })
            .collect();
        return (0, stats);
    }
    let mut rng = SplitMix64(683);
    let mut n = 24u32;
    let mut stats = Vec::with_capacity(N);
    for _ in 0..N {
        let (mut out, mut inn) = (0, 0);
        match rng.below(8) {
            0 => out = (1 + rng.below(6)).min(n.saturating_sub(8)),
            1 => inn = (1 + rng.below(6)).min(32 - n),
            2 if rng.below(3) == 0 => {
                out = 1.min(n);
                inn = 1;
            }
            _ => {}
        }
        n = n - out + inn;
        stats.push(IntervalStats { instances: n, arrivals: inn, preemptions: out });
    }
    (24, stats)
}

/// Intervals paused although some layout fits.
fn strategic_pauses(profile: &ModelProfile, steps: &[Step], configs: &[Option<ParallelConfig>]) -> usize {
    steps
        .iter()
        .zip(configs)
        .filter(|(s, c)| {
            c.is_none()
                && profile.configs.iter().any(|k| k.config.instances() <= s.instances_after().unwrap())
        })
        .count()
}

/// Timings in release mode:
/// `cargo test --release -p parcae-policy-core plan::tests::timing -- --ignored --nocapture`.
#[test]
#[ignore = "timing; run in release with --ignored --nocapture"]
fn timing() {
    use std::time::Instant;
    let interval_ms = 60_000;
    let (start, intervals) = trace();
    let steps = Step::chain(start, &intervals);

    // One call, N = 32, H = 12, preemptions of 1-4 instances on the way.
    let gpt = p3_like("gpt-1.5b");
    println!("gpt-1.5b-like profile: {} layouts", gpt.configs.len());
    let h12 = [
        step(32, 2, 0),
        step(30, 0, 0),
        step(30, 0, 2),
        step(32, 4, 0),
        step(28, 0, 0),
        step(28, 1, 1),
        step(28, 0, 4),
        step(32, 3, 0),
        step(29, 0, 0),
        step(29, 0, 3),
        step(32, 0, 0),
        step(32, 2, 0),
    ];
    let current = cfg(2, 16);
    let t = Instant::now();
    let mut cold = TransitionCache::default();
    let plan = best_plan(&gpt, current, 0.0, &h12, interval_ms, &mut cold).unwrap();
    let first = t.elapsed();
    let reps = 200;
    let t = Instant::now();
    for _ in 0..reps {
        best_plan(&gpt, current, 0.0, &h12, interval_ms, &mut cold).unwrap();
    }
    let warm = t.elapsed() / reps;
    println!(
        "one call N=32 H=12: {:.2} ms cold cache ({} distributions), {:.3} ms warm; plan {:?}",
        first.as_secs_f64() * 1e3,
        cold.stats().misses,
        warm.as_secs_f64() * 1e3,
        configs_of(&plan).iter().map(|c| c.map_or("pause".into(), |c| c.to_string())).collect::<Vec<_>>()
    );

    // Receding horizon over the trace, H = 12, per model: true future and a
    // flat (persistence) forecast; the plan's first step is applied and judged
    // by `liveput()` along the true steps with the carry (the optimizer itself
    // starts every plan from 0, as the guest does). Then the Oracle: the whole
    // trace in one program. Both pause rules.
    let mut all = std::time::Duration::ZERO;
    for name in ["gpt-1.5b", "gpt-6.7b", "bert", "resnet152", "vgg19"] {
        let profile = p3_like(name);
        {
            let options = PlanOptions::default();
            // "hedged": the flat forecast with a burst of 1, 2 or 3 instances
            // in 6%, 3% and 3% of the intervals (about the p3 trace's rate).
            let churn_one =
                [(1, 0.06), (2, 0.03), (3, 0.03)].map(|(extra, probability)| Churn { extra, probability });
            for forecast in ["true", "flat", "hedged"] {
                let mut cache = TransitionCache::default();
                let mut chosen = Vec::with_capacity(steps.len());
                let t = Instant::now();
                for k in 0..steps.len() {
                    let mut window: Vec<Step> = steps[k..(k + 12).min(steps.len())].to_vec();
                    if forecast != "true" {
                        let now = window[0].instances_after().unwrap() as u32;
                        window.truncate(1);
                        window.resize(12, step(now, 0, 0));
                    }
                    let churn: Vec<Vec<Churn>> = if forecast == "hedged" {
                        (0..window.len())
                            .map(|i| if i == 0 { Vec::new() } else { churn_one.to_vec() })
                            .collect()
                    } else {
                        Vec::new()
                    };
                    let current = chosen.last().copied().flatten();
                    let plan = best_plan_hedged(
                        &profile,
                        current,
                        0.0,
                        &window,
                        &churn,
                        interval_ms,
                        options,
                        &mut cache,
                    )
                    .unwrap();
                    chosen.push(plan[0].config);
                }
                let e = t.elapsed();
                all += e;
                let s = cache.stats();
                let realised: f64 =
                    evaluate(&profile, None, 0.0, &steps, &chosen, interval_ms).iter().map(|v| v.0).sum();
                println!(
                    "{name:<10} {:>2} layouts, receding H=12, {forecast} forecast: {:>6.1} ms \
                     ({:.3} ms/call), {:>6} distributions, front <= {}, truncations {}, realised {realised:.0}, \
                     pauses where a layout fits {}",
                    profile.configs.len(),
                    e.as_secs_f64() * 1e3,
                    e.as_secs_f64() * 1e3 / 683.0,
                    s.misses,
                    s.largest_front,
                    s.front_truncations,
                    strategic_pauses(&profile, &steps, &chosen),
                );
            }
            // The Oracle as `bench` plans it (under the work-at-risk rule, from
            // a cold start) beside the program without the rule.
            for (rule, options) in [
                ("", options),
                (" (work at risk)", PlanOptions { at_risk: Some(0.0), max_front: 1024, ..options }),
            ] {
                let mut cache = TransitionCache::default();
                let t = Instant::now();
                let plan =
                    best_plan_with(&profile, None, 0.0, &steps, interval_ms, options, &mut cache).unwrap();
                let s = cache.stats();
                let configs = configs_of(&plan);
                println!(
                    "{name:<10} oracle{rule} over 683 steps: {:.1} ms, {:.0} samples, front <= {}, truncations {}, \
                     pauses where a layout fits {}",
                    t.elapsed().as_secs_f64() * 1e3,
                    total(&plan),
                    s.largest_front,
                    s.front_truncations,
                    strategic_pauses(&profile, &steps, &configs),
                );
            }
        }
    }
    println!("all receding runs: {:.2} s", all.as_secs_f64());
}

// ---------------------------------------------------------------- pruning

/// `profile` with every depth scaled to `D` up to `n / P`: a layout not in it
/// gets the throughput of the depth's widest profiled one, times `D / d0`, at
/// 90% efficiency per doubling; the communicators of the GPT rule.
pub(crate) fn scaled(profile: &ModelProfile, n: u32) -> ModelProfile {
    let mut out = profile.clone();
    let mut widest: BTreeMap<u32, (u32, f64, f64)> = BTreeMap::new();
    for c in &profile.configs {
        let (d, p) = (c.config.data_parallel, c.config.pipeline_stages);
        let e = widest.entry(p).or_insert((d, c.samples_per_second, c.model_build_ms));
        if d > e.0 {
            *e = (d, c.samples_per_second, c.model_build_ms);
        }
    }
    for (&p, &(d0, thr0, build)) in &widest {
        for d in d0 + 1..=n / p {
            let ratio = f64::from(d) / f64::from(d0);
            let thr = thr0 * ratio * 0.9f64.powf(ratio.log2());
            let groups = f64::from(d + p + 1 + d * p);
            out.configs.push(ConfigProfile {
                config: ParallelConfig::new(d, p),
                samples_per_second: thr,
                iteration_ms: f64::from(out.global_batch_size) * 1000.0 / thr,
                comm_rebuild_add_ms: groups * 500.0 + 35.0,
                comm_rebuild_remove_ms: groups * 39.3 + 35.0,
                model_build_ms: build,
            });
        }
    }
    out
}

/// A horizon of `h` steps from `n` instances: losses and recoveries.
fn wobbly_steps(rng: &mut SplitMix64, n: u32, h: usize) -> Vec<Step> {
    let mut before = n;
    let mut steps = Vec::new();
    for _ in 0..h {
        let preempted = if rng.below(2) == 0 { 0 } else { rng.below(n / 16 + 1) };
        let arrived = if rng.below(3) == 0 { rng.below(n / 16 + 1).min(n - (before - preempted)) } else { 0 };
        let s = step(before, preempted, arrived);
        before = s.instances_after().unwrap() as u32;
        steps.push(s);
    }
    steps
}

#[test]
fn p3_sized_profiles_are_never_pruned() {
    let unpruned = PlanOptions { prune_above: usize::MAX, ..PlanOptions::default() };
    let forced = PlanOptions { prune_above: 0, ..PlanOptions::default() };
    let mut rng = SplitMix64(64);
    let mut differs = 0;
    for name in ["gpt-1.5b", "gpt-6.7b", "bert", "resnet152", "vgg19"] {
        let profile = p3_like(name);
        assert!(profile.configs.len() <= PRUNE_ABOVE);
        for _ in 0..3 {
            let steps = wobbly_steps(&mut rng, 32, 6);
            let c = &profile.configs[rng.below(profile.configs.len() as u32) as usize];
            let current = Some(c.config).filter(|c| c.instances() <= 32);
            let run = |options| {
                best_plan_with(
                    &profile,
                    current,
                    0.0,
                    &steps,
                    60_000,
                    options,
                    &mut TransitionCache::default(),
                )
                .unwrap()
            };
            let plan = run(PlanOptions::default());
            assert_eq!(plan, run(unpruned), "{name}");
            assert_self_consistent(&profile, current, 0.0, &steps, 60_000, &plan);
            if total(&run(forced)) < total(&plan) {
                differs += 1;
            }
        }
    }
    println!("forced pruning worse on {differs} of 15 p3-sized cases");
}

#[test]
fn pruned_plans_are_consistent() {
    let profile = scaled(&p3_like("gpt-1.5b"), 96);
    assert!(profile.configs.len() > PRUNE_ABOVE);
    let mut rng = SplitMix64(96);
    for _ in 0..4 {
        let steps = wobbly_steps(&mut rng, 96, 4);
        let current = cfg(8, 8);
        let mut cache = TransitionCache::default();
        let plan = best_plan(&profile, current, 0.0, &steps, 60_000, &mut cache).unwrap();
        assert_self_consistent(&profile, current, 0.0, &steps, 60_000, &plan);
        // A warm cache gives the same plan.
        assert_eq!(plan, best_plan(&profile, current, 0.0, &steps, 60_000, &mut cache).unwrap());
        let unpruned = PlanOptions { prune_above: usize::MAX, ..PlanOptions::default() };
        let full =
            best_plan_with(&profile, current, 0.0, &steps, 60_000, unpruned, &mut TransitionCache::default())
                .unwrap();
        assert!(total(&plan) <= total(&full) * (1.0 + 1e-12) + 1e-9);
    }
}

/// Loss of pruning against the full program, and N = 1024 timings:
/// `cargo test --release -p parcae-policy-core plan::tests::pruning_loss -- --ignored --nocapture`.
#[test]
#[ignore = "timing; run in release with --ignored --nocapture"]
fn pruning_loss() {
    use std::time::Instant;
    let base = p3_like("gpt-1.5b");
    let unpruned = PlanOptions { prune_above: usize::MAX, ..PlanOptions::default() };
    let cases: usize = std::env::var("PRUNE_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(6);
    let h: usize = std::env::var("PRUNE_H").ok().and_then(|v| v.parse().ok()).unwrap_or(6);
    let mut rng = SplitMix64(128);
    let (mut worse, mut worst) = (0, 0.0f64);
    let (mut t_full, mut t_pruned) = (0.0, 0.0);
    for case in 0..cases {
        let n = 128 + rng.below(129);
        let profile = scaled(&base, n);
        let steps = wobbly_steps(&mut rng, n, h);
        let cur = &profile.configs[rng.below(profile.configs.len() as u32) as usize].config;
        let current = Some(*cur).filter(|c| c.instances() <= u64::from(n));
        let t = Instant::now();
        let pruned =
            best_plan(&profile, current, 0.0, &steps, 60_000, &mut TransitionCache::default()).unwrap();
        let tp = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let full =
            best_plan_with(&profile, current, 0.0, &steps, 60_000, unpruned, &mut TransitionCache::default())
                .unwrap();
        let tf = t.elapsed().as_secs_f64();
        t_pruned += tp;
        t_full += tf;
        let (a, b) = (total(&pruned), total(&full));
        let loss = if b > 0.0 { (b - a) / b } else { 0.0 };
        if a < b {
            worse += 1;
            worst = worst.max(loss);
        }
        let show = |p: &[PlannedStep]| {
            configs_of(p)
                .iter()
                .map(|c| c.map_or("pause".into(), |c| c.to_string()))
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!("  pruned [{}]\n  full   [{}]", show(&pruned), show(&full));
        println!(
            "case {case}: N={n} {} layouts H={h} current {:?}: pruned {a:.1} in {tp:.3} s, full {b:.1} in {tf:.2} s, \
             loss {:.4}%",
            profile.configs.len(),
            current.map(|c| c.to_string()),
            loss * 100.0
        );
    }
    println!(
        "pruned below full on {worse} of {cases} cases, worst {:.4}%; total {t_pruned:.2} s pruned, {t_full:.1} s full",
        worst * 100.0
    );

    // One N = 1024 decision, H = 12.
    let big = scaled(&base, 1024);
    let steps = wobbly_steps(&mut SplitMix64(1024), 1024, 12);
    let current = cfg(64, 16);
    let mut cache = TransitionCache::default();
    let t = Instant::now();
    let plan = best_plan(&big, current, 0.0, &steps, 60_000, &mut cache).unwrap();
    let cold = t.elapsed();
    let t = Instant::now();
    best_plan(&big, current, 0.0, &steps, 60_000, &mut cache).unwrap();
    println!(
        "N=1024 {} layouts H=12: {:.3} s cold ({} distributions), {:.2} ms warm; plan {:?}",
        big.configs.len(),
        cold.as_secs_f64(),
        cache.stats().misses,
        t.elapsed().as_secs_f64() * 1e3,
        configs_of(&plan).iter().map(|c| c.map_or("pause".into(), |c| c.to_string())).collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------- hedging

/// The scenarios of one interval under `churn`, built independently of the
/// program's own code: the step as given with the rest of the probability,
/// then each entry with `extra` more preemptions (clamped) and as many more
/// arrivals.
fn scenarios_of(s: &Step, churn: &[Churn]) -> Vec<(f64, Step)> {
    let rest = 1.0 - churn.iter().map(|c| c.probability).sum::<f64>();
    let mut out = vec![(rest, *s)];
    for c in churn {
        let preempted = (s.preempted + c.extra).min(s.instances_before);
        let extra = preempted - s.preempted;
        out.push((c.probability, step(s.instances_before, preempted, s.arrived + extra)));
    }
    out
}

/// The probability-weighted `liveput()` of one interval over its scenarios.
fn mixed_value_of(
    profile: &ModelProfile,
    from: Option<ParallelConfig>,
    s: &Step,
    churn: &[Churn],
    to: Option<ParallelConfig>,
    interval_ms: u64,
    carry: f64,
) -> (f64, f64) {
    let (mut samples, mut leftover) = (0.0, 0.0);
    for (w, sc) in scenarios_of(s, churn) {
        let (v, l) = value_of(profile, from, &sc, to, interval_ms, carry);
        samples += w * v;
        leftover += w * l;
    }
    (samples, leftover)
}

/// Best expected value over the scenarios by enumerating every plan.
fn brute_force_mixed(
    profile: &ModelProfile,
    current: Option<ParallelConfig>,
    carried_ms: f64,
    steps: &[Step],
    churn: &[Vec<Churn>],
    interval_ms: u64,
) -> (f64, Vec<Option<ParallelConfig>>) {
    #[allow(
        clippy::too_many_arguments,
        reason = "a recursive search: the inputs, the position and the best so far"
    )]
    fn go(
        profile: &ModelProfile,
        steps: &[Step],
        churn: &[Vec<Churn>],
        interval_ms: u64,
        from: Option<ParallelConfig>,
        carry: f64,
        acc: f64,
        path: &mut Vec<Option<ParallelConfig>>,
        best: &mut (f64, Vec<Option<ParallelConfig>>),
    ) {
        let Some((s, rest)) = steps.split_first() else {
            if acc > best.0 {
                *best = (acc, path.clone());
            }
            return;
        };
        let here = churn.first().map_or(&[][..], Vec::as_slice);
        let later = churn.get(1..).unwrap_or(&[]);
        let after = s.instances_after().unwrap();
        let mut options: Vec<Option<ParallelConfig>> = vec![None];
        for c in &profile.configs {
            if c.config.instances() <= after && !options.contains(&Some(c.config)) {
                options.push(Some(c.config));
            }
        }
        for to in options {
            let (samples, leftover) = mixed_value_of(profile, from, s, here, to, interval_ms, carry);
            path.push(to);
            go(profile, rest, later, interval_ms, to, leftover, acc + samples, path, best);
            path.pop();
        }
    }
    let mut best = (f64::NEG_INFINITY, Vec::new());
    go(profile, steps, churn, interval_ms, current, carried_ms, 0.0, &mut Vec::new(), &mut best);
    best
}

fn random_churn(rng: &mut SplitMix64, intervals: usize) -> Vec<Vec<Churn>> {
    (0..intervals)
        .map(|_| {
            let entries = rng.below(3) as usize;
            let mut left = 1.0;
            (0..entries)
                .map(|_| {
                    let probability = left * f64::from(rng.below(60)) / 100.0;
                    left -= probability;
                    Churn { extra: 1 + rng.below(3), probability }
                })
                .collect()
        })
        .collect()
}

#[test]
fn hedged_matches_brute_force_over_the_scenarios() {
    let mut rng = SplitMix64(77);
    let mut cache = TransitionCache::default();
    let options = PlanOptions::default();
    let (mut differ, mut hedged_cases) = (0, 0);
    for case in 0..150 {
        let (profile, current, carried, steps, interval_ms) = random_case(&mut rng);
        let churn = random_churn(&mut rng, steps.len());
        let plan =
            best_plan_hedged(&profile, current, carried, &steps, &churn, interval_ms, options, &mut cache)
                .unwrap();
        let (brute, brute_configs) =
            brute_force_mixed(&profile, current, carried, &steps, &churn, interval_ms);
        let dp = total(&plan);
        assert!(
            (dp - brute).abs() <= 1e-9 * brute.abs().max(1.0),
            "case {case}: dp {dp} brute {brute} ({brute_configs:?})\n{steps:?} {churn:?}\n{plan:?}"
        );
        // The plan's own numbers are the mixture's along it.
        let (mut from, mut carry) = (current, carried);
        for (k, (p, s)) in plan.iter().zip(&steps).enumerate() {
            let (samples, leftover) =
                mixed_value_of(&profile, from, s, &churn[k], p.config, interval_ms, carry);
            assert!((p.expected_samples - samples).abs() <= 1e-9 * samples.abs().max(1.0), "case {case}");
            assert!((p.expected_leftover_ms - leftover).abs() <= 1e-9 * leftover.max(1.0), "case {case}");
            (from, carry) = (p.config, p.expected_leftover_ms);
        }
        let plain =
            best_plan_with(&profile, current, carried, &steps, interval_ms, options, &mut cache).unwrap();
        hedged_cases += usize::from(churn.iter().any(|c| c.iter().any(|e| e.probability > 0.0)));
        differ += usize::from(configs_of(&plain) != configs_of(&plan));
    }
    // The scenarios must change some plans, or the test shows nothing; and the
    // bound must have skipped predecessors in plans checked to be optimal.
    assert!(hedged_cases > 100 && differ >= 10, "{hedged_cases} hedged, {differ} plans changed");
    assert!(cache.stats().pruned > 100, "{:?}", cache.stats());
    println!("{differ} of 150 plans changed by hedging");
}

/// Also with [`PlanOptions::recourse`]: without a burst nothing is credited.
#[test]
fn hedged_without_risk_is_bit_identical() {
    let mut rng = SplitMix64(78);
    let options = PlanOptions::default();
    for case in 0..120 {
        let (profile, current, carried, steps, interval_ms) = random_case(&mut rng);
        let mut cache = TransitionCache::default();
        let plain =
            best_plan_with(&profile, current, carried, &steps, interval_ms, options, &mut cache).unwrap();
        // No churn, churn of probability 0, and one certain scenario that is
        // the step itself (nothing left to preempt, or nothing extra).
        let none: Vec<Vec<Churn>> = vec![Vec::new(); steps.len()];
        let zero: Vec<Vec<Churn>> = vec![vec![Churn { extra: 3, probability: 0.0 }]; steps.len()];
        let nothing: Vec<Vec<Churn>> = vec![vec![Churn { extra: 0, probability: 1.0 }]; steps.len()];
        for churn in [&none[..], &[][..], &zero[..], &nothing[..]] {
            for recourse in [0.0, 1.0] {
                let options = PlanOptions { recourse, ..options };
                let mut fresh = TransitionCache::default();
                let hedged = best_plan_hedged(
                    &profile,
                    current,
                    carried,
                    &steps,
                    churn,
                    interval_ms,
                    options,
                    &mut fresh,
                )
                .unwrap();
                assert_eq!(hedged, plain, "case {case}, recourse {recourse}: {churn:?}");
            }
        }
    }
}

#[test]
fn hedged_rejects_bad_probabilities() {
    let profile = toy_profile(&[(1, 2, 10.0), (2, 2, 19.0)], 60_000.0);
    let steps = [step(4, 0, 0), step(4, 0, 0)];
    let mut cache = TransitionCache::default();
    for bad in [-0.1, f64::NAN, f64::INFINITY] {
        let churn = vec![Vec::new(), vec![Churn { extra: 1, probability: bad }]];
        let e =
            best_plan_hedged(&profile, None, 0.0, &steps, &churn, 1000, PlanOptions::default(), &mut cache);
        assert!(matches!(e, Err(LiveputError::BadChurn { interval: 1, .. })), "{bad}: {e:?}");
    }
    let churn = vec![vec![Churn { extra: 1, probability: 0.7 }, Churn { extra: 2, probability: 0.4 }]];
    let e = best_plan_hedged(&profile, None, 0.0, &steps, &churn, 1000, PlanOptions::default(), &mut cache);
    assert!(matches!(e, Err(LiveputError::BadChurn { interval: 0, .. })), "{e:?}");
    // More churn entries than steps are ignored; fewer leave the rest certain.
    let long = vec![Vec::new(); 5];
    assert!(
        best_plan_hedged(&profile, None, 0.0, &steps, &long, 1000, PlanOptions::default(), &mut cache)
            .is_ok()
    );
}

/// With a forecast of no preemptions the program takes the fastest layout,
/// a single replica of a deep pipeline; once each interval may take an
/// instance, a layout that one preemption cuts risks the work since the last
/// checkpoint, and the program keeps two replicas of every stage.
#[test]
fn risk_buys_replicas() {
    // 1x4 is the fastest layout on 4..8 instances; 2x2 is slower but survives
    // any single preemption. A restart loses 5 minutes of work.
    let profile = toy_profile(&[(1, 4, 30.0), (2, 2, 24.0), (1, 2, 14.0)], 600_000.0);
    let steps = vec![step(0, 0, 6); 1].into_iter().chain(vec![step(6, 0, 0); 7]).collect::<Vec<_>>();
    let mut cache = TransitionCache::default();
    let options = PlanOptions::default();
    let calm = best_plan_with(&profile, None, 0.0, &steps, 60_000, options, &mut cache).unwrap();
    assert_eq!(calm[0].config, cfg(1, 4), "{calm:?}");
    let mut churn = vec![vec![Churn { extra: 1, probability: 0.1 }]; steps.len()];
    churn[0].clear();
    let hedged = best_plan_hedged(&profile, None, 0.0, &steps, &churn, 60_000, options, &mut cache).unwrap();
    // The last interval's layout meets no risk within the horizon.
    let exposed = &hedged[..hedged.len() - 1];
    assert!(exposed.iter().all(|s| s.config.is_some_and(|c| c.data_parallel >= 2)), "{hedged:?}");
    // A rare enough burst is worth the risk again.
    let rare: Vec<Vec<Churn>> =
        churn.iter().map(|c| c.iter().map(|e| Churn { probability: 0.001, ..*e }).collect()).collect();
    let bold = best_plan_hedged(&profile, None, 0.0, &steps, &rare, 60_000, options, &mut cache).unwrap();
    assert_eq!(bold[0].config, cfg(1, 4), "{bold:?}");
}

/// A terminal value credits the last layout with what it trains after the
/// horizon, less, under churn, the work the churn's wipes would roll back
/// (a stage it cannot spare restarts), so the last interval keeps the
/// replicas the others keep. Without churn nothing is charged.
#[test]
fn a_terminal_value_prices_the_churn() {
    let profile = toy_profile(&[(1, 4, 30.0), (2, 2, 24.0), (1, 2, 14.0)], 600_000.0);
    let steps = [step(0, 0, 6), step(6, 0, 0), step(6, 0, 0)];
    let mut cache = TransitionCache::default();
    let options = PlanOptions { terminal_ms: 100.0 * 60_000.0, ..PlanOptions::default() };
    let burst = Churn { extra: 1, probability: 0.1 };
    let churn = vec![vec![], vec![burst], vec![burst]];
    let hedged = best_plan_hedged(&profile, None, 0.0, &steps, &churn, 60_000, options, &mut cache).unwrap();
    assert!(hedged.iter().all(|s| s.config == cfg(2, 2)), "{hedged:?}");
    // Why, from the cost model itself: one interval of staying in each layout
    // on 6 instances, hedged the same way.
    let stay = |c| {
        let value = |k| liveput(&profile, &U, c, 6, k, k, c, 60_000.0, 0.0).unwrap().expected_samples;
        0.9 * value(0) + 0.1 * value(1)
    };
    assert!(stay(cfg(2, 2)) > stay(cfg(1, 4)), "{} vs {}", stay(cfg(2, 2)), stay(cfg(1, 4)));
    // No churn: the fastest layout, and the terminal value is its throughput.
    let calm = best_plan_hedged(&profile, None, 0.0, &steps, &[], 60_000, options, &mut cache).unwrap();
    assert!(calm.iter().all(|s| s.config == cfg(1, 4)), "{calm:?}");
    // With a notice a lone replica is evacuated, nothing rolls back, and the
    // terminal value charges nothing: the fastest layout again at the end.
    let noticed = Recovery { preemption_notice_ms: 120_000.0, checkpoint_write_bytes_per_ms: 1e6 };
    let options = PlanOptions { recovery: noticed, ..options };
    let warned = best_plan_hedged(&profile, None, 0.0, &steps, &churn, 60_000, options, &mut cache).unwrap();
    assert_eq!(warned.last().unwrap().config, cfg(1, 4), "{warned:?}");
}

/// A plan of the observed interval alone has no churn of its own, yet its
/// terminal value stands for the intervals after it: an entry of the churn
/// past the last step is charged there, so the plan keeps the replicas a
/// longer horizon keeps; without it, nothing is charged.
#[test]
fn a_plan_of_one_interval_charges_the_churn_after_it() {
    let profile = toy_profile(&[(1, 4, 30.0), (2, 2, 24.0), (1, 2, 14.0)], 600_000.0);
    let steps = [step(0, 0, 6)];
    let mut cache = TransitionCache::default();
    let options = PlanOptions { terminal_ms: 100.0 * 60_000.0, ..PlanOptions::default() };
    let burst = Churn { extra: 1, probability: 0.1 };
    let plan = |churn: &[Vec<Churn>], cache: &mut TransitionCache| {
        best_plan_scored(&profile, None, 0.0, &steps, churn, 60_000, options, cache).unwrap()
    };
    let after = plan(&[vec![], vec![burst]], &mut cache);
    assert_eq!(after.steps[0].config, cfg(2, 2), "{after:?}");
    let uncharged = plan(&[vec![]], &mut cache);
    assert_eq!(uncharged.steps[0].config, cfg(1, 4), "{uncharged:?}");
    assert!(after.objective < uncharged.objective, "{after:?} {uncharged:?}");
    // On a longer horizon the entry past the last step is the last step's
    // churn, so giving it changes nothing.
    let three = [step(0, 0, 6), step(6, 0, 0), step(6, 0, 0)];
    let longer = |churn: &[Vec<Churn>], cache: &mut TransitionCache| {
        best_plan_scored(&profile, None, 0.0, &three, churn, 60_000, options, cache).unwrap()
    };
    let given = longer(&[vec![], vec![burst], vec![burst], vec![burst]], &mut cache);
    let implied = longer(&[vec![], vec![burst], vec![burst]], &mut TransitionCache::default());
    assert_eq!(given, implied);
}

// ------------------------------------------------------- varying throughputs

/// `profile` with every layout's throughput scaled by `factors[k]` (0: it cannot run).
fn scaled_speeds(profile: &ModelProfile, factors: &[f64]) -> ModelProfile {
    let mut out = profile.clone();
    for (c, f) in out.configs.iter_mut().zip(factors.iter().cycle()) {
        c.samples_per_second *= f;
    }
    out
}

/// Best total value by enumerating every plan when interval `i` trains under
/// `speeds[i + 1]` and a restart loses work at the old layout's speed and cadence in
/// `speeds[i]`.
fn brute_force_varying(
    profile: &ModelProfile,
    speeds: &[&ModelProfile],
    current: Option<ParallelConfig>,
    carried_ms: f64,
    steps: &[Step],
    interval_ms: u64,
) -> f64 {
    let thr = |p: &ModelProfile, c: ParallelConfig| p.config(c).unwrap().samples_per_second;
    let mut best = f64::NEG_INFINITY;
    let mut stack = vec![(0usize, current, carried_ms, 0.0f64)];
    while let Some((i, from, carry, acc)) = stack.pop() {
        let Some(s) = steps.get(i) else {
            best = best.max(acc);
            continue;
        };
        let after = s.instances_after().unwrap();
        let now = speeds[i + 1];
        let mut options: Vec<Option<ParallelConfig>> = vec![None];
        for c in &profile.configs {
            if c.config.instances() <= after && thr(now, c.config) > 0.0 && !options.contains(&Some(c.config))
            {
                options.push(Some(c.config));
            }
        }
        let old = from_fit(profile, from, s.instances_before);
        for to in options {
            let v = liveput(
                now,
                &U,
                old,
                s.instances_before,
                s.preempted,
                s.arrived,
                to,
                interval_ms as f64,
                carry,
            )
            .unwrap();
            // The cost model charged the lost work at `now`'s speed and cadence; it was
            // trained at the speed and cadence the old layout had before.
            let mut samples = v.expected_samples;
            if let Some(o) = old {
                let dist = crate::liveput::transition_distribution_under(
                    now,
                    &U,
                    old,
                    s.instances_before,
                    s.preempted,
                    s.arrived,
                    to,
                )
                .unwrap();
                let p_lost: f64 = dist.outcomes.iter().filter(|x| x.lost_work).map(|x| x.probability).sum();
                let charged = crate::liveput::lost_work_ms(now) * thr(now, o);
                let trained = crate::liveput::lost_work_ms(speeds[i]) * thr(speeds[i], o);
                samples += p_lost * (charged - trained) / 1000.0;
            }
            stack.push((i + 1, to, v.expected_leftover_ms, acc + samples));
        }
    }
    best
}

#[test]
fn varying_with_one_profile_is_bit_identical() {
    let mut rng = SplitMix64(4242);
    let options = PlanOptions::default();
    for case in 0..120 {
        let (profile, current, carried, steps, interval_ms) = random_case(&mut rng);
        let mut cache = TransitionCache::default();
        let plain =
            best_plan_with(&profile, current, carried, &steps, interval_ms, options, &mut cache).unwrap();
        let speeds = vec![&profile; steps.len() + 1];
        let varying =
            best_plan_varying(&profile, &speeds, current, carried, &steps, interval_ms, options, &mut cache)
                .unwrap();
        assert_eq!(varying, plain, "case {case}");
    }
}

/// One random case of [`random_case`] planned over `speeds`: the plan, checked
/// against [`brute_force_varying`] (whose value is returned).
#[allow(clippy::too_many_arguments, reason = "a random case's parts and its label")]
fn plan_varying_exactly(
    profile: &ModelProfile,
    speeds: &[&ModelProfile],
    current: Option<ParallelConfig>,
    carried: f64,
    steps: &[Step],
    interval_ms: u64,
    case: usize,
) -> (Vec<PlannedStep>, f64) {
    let mut cache = TransitionCache::default();
    let options = PlanOptions::default();
    let plan = best_plan_varying(profile, speeds, current, carried, steps, interval_ms, options, &mut cache)
        .unwrap();
    let want = brute_force_varying(profile, speeds, current, carried, steps, interval_ms);
    let got = total(&plan);
    assert!((got - want).abs() <= 1e-6 * want.abs().max(1.0), "case {case}: {got} vs brute force {want}");
    (plan, want)
}

#[test]
fn varying_matches_brute_force() {
    let mut rng = SplitMix64(777);
    let factors = [0.0, 0.5, 1.0, 1.7];
    for case in 0..150 {
        let (profile, current, carried, steps, interval_ms) = random_case(&mut rng);
        let speeds: Vec<ModelProfile> = (0..=steps.len())
            .map(|_| {
                let f: Vec<f64> =
                    (0..profile.configs.len()).map(|_| factors[rng.below(4) as usize]).collect();
                scaled_speeds(&profile, &f)
            })
            .collect();
        let refs: Vec<&ModelProfile> = speeds.iter().collect();
        let (plan, _) = plan_varying_exactly(&profile, &refs, current, carried, &steps, interval_ms, case);
        // Every chosen layout runs where it is chosen.
        for (i, p) in plan.iter().enumerate() {
            if let Some(c) = p.config {
                assert!(refs[i + 1].config(c).unwrap().samples_per_second > 0.0, "case {case} step {i}");
            }
        }
    }
}

/// A checkpoint cadence that changes from interval to interval (one that follows the
/// losses seen so far: shorter checkpoint intervals, each taking a share of the
/// throughput) is planned exactly: a rollback loses what the cadence of the interval
/// that trained it left at risk.
#[test]
fn varying_cadence_matches_brute_force() {
    let mut rng = SplitMix64(9191);
    let mut differs = 0;
    for case in 0..150 {
        let (profile, current, carried, steps, interval_ms) = random_case(&mut rng);
        let speeds: Vec<ModelProfile> = (0..=steps.len())
            .map(|_| {
                let keep = [1.0, 0.97, 0.9][rng.below(3) as usize];
                let mut p = scaled_speeds(&profile, &[keep]);
                p.checkpoint_interval_ms *= [1.0, 0.5, 0.1, 0.0][rng.below(4) as usize];
                p
            })
            .collect();
        let refs: Vec<&ModelProfile> = speeds.iter().collect();
        let (_, want) = plan_varying_exactly(&profile, &refs, current, carried, &steps, interval_ms, case);
        // The cadence is not ignored: planning at the profile's own cadence misvalues some.
        let constant = vec![&profile; steps.len() + 1];
        let (_, unvaried) =
            plan_varying_exactly(&profile, &constant, current, carried, &steps, interval_ms, case);
        if (want - unvaried).abs() > 1e-6 * want.abs().max(1.0) {
            differs += 1;
        }
    }
    assert!(differs > 30, "only {differs} of 150 cases depend on the cadence");
}

#[test]
fn varying_needs_one_speed_profile_per_step_and_one_before() {
    let profile = toy_profile(&POOL[..3], 0.0);
    let steps = [step(0, 0, 2), step(2, 0, 0)];
    let mut cache = TransitionCache::default();
    let e = best_plan_varying(
        &profile,
        &[&profile; 2],
        None,
        0.0,
        &steps,
        60_000,
        PlanOptions::default(),
        &mut cache,
    )
    .unwrap_err();
    assert_eq!(e, LiveputError::SpeedsLength { steps: 2, speeds: 2 });
}

/// A forced first layout: the plan starts there, its objective is the best
/// of the plans that start there (brute force), never above the free plan's,
/// and equal to it when forced to the free plan's own first layout; a layout
/// that does not fit the first interval is an error.
#[test]
fn a_forced_first_layout_is_the_best_plan_that_starts_there() {
    let mut rng = SplitMix64(4242);
    let mut cache = TransitionCache::default();
    let mut forced_cases = 0;
    for case in 0..60 {
        let (profile, current, carried, steps, interval_ms) = random_case(&mut rng);
        let score = |first, cache: &mut TransitionCache| {
            let options = PlanOptions { first, ..PlanOptions::default() };
            best_plan_scored(&profile, current, carried, &steps, &[], interval_ms, options, cache)
        };
        let free = score(None, &mut cache).unwrap();
        assert!((free.objective - total(&free.steps)).abs() <= 1e-9 * free.objective.abs().max(1.0));
        let after = steps[0].instances_after().unwrap();
        for c in &profile.configs {
            let first = Some(c.config);
            if c.config.instances() > after {
                assert!(score(first, &mut cache).is_err(), "case {case}: {first:?} does not fit {after}");
                continue;
            }
            let forced = score(first, &mut cache).unwrap();
            assert_eq!(forced.steps[0].config, first, "case {case}");
            assert_consistent_with(&profile, current, carried, &steps, interval_ms, &forced.steps);
            let (samples, leftover) = value_of(&profile, current, &steps[0], first, interval_ms, carried);
            let brute = samples + brute_force(&profile, first, leftover, &steps[1..], interval_ms);
            let tolerance = 1e-9 * brute.abs().max(1.0);
            assert!((forced.objective - brute).abs() <= tolerance, "case {case}: {forced:?} vs {brute}");
            assert!(forced.objective <= free.objective + tolerance, "case {case}");
            if free.steps[0].config == first {
                assert!((forced.objective - free.objective).abs() <= tolerance, "case {case}");
            }
            forced_cases += 1;
        }
    }
    assert!(forced_cases > 100, "{forced_cases}");
    // A layout the profile does not have is refused by name, not planned as a pause.
    let (profile, current, carried, steps, interval_ms) = random_case(&mut rng);
    let missing = ParallelConfig::new(97, 3);
    let options = PlanOptions { first: Some(missing), ..PlanOptions::default() };
    let e = best_plan_scored(&profile, current, carried, &steps, &[], interval_ms, options, &mut cache);
    assert!(matches!(e, Err(LiveputError::UnknownConfig { config }) if config == missing), "{e:?}");
}

/// With recourse, a plan that stays in a layout is credited at each burst the
/// best shed's gain over refilling it: one interval from no carried
/// migration, plus what the layout shed into earns after with no burst,
/// weighted by the chance that no burst came before (a stay sheds once).
/// Checked against every plan of three intervals, priced by hand from
/// `liveput()`.
#[test]
fn recourse_credits_the_best_shed_at_the_first_burst() {
    // No lost work (checkpoint interval 0): one interval's samples are then
    // the speed times the interval less the expected migration time.
    let profile = toy_profile(&[(2, 2, 50.0), (2, 3, 78.0), (2, 4, 80.0)], 0.0);
    let layouts = [cfg(2, 2), cfg(2, 3), cfg(2, 4)];
    let interval_ms = 60_000;
    let (calm, burst, p) = (step(9, 0, 0), step(9, 1, 1), 0.25);
    let steps = [calm, calm, calm];
    let churn =
        vec![vec![], vec![Churn { extra: 1, probability: p }], vec![Churn { extra: 1, probability: p }]];
    let one = |from: Option<ParallelConfig>, s: Step, to: Option<ParallelConfig>| {
        let (samples, leftover) = value_of(&profile, from, &s, to, interval_ms, 0.0);
        assert_eq!(leftover, 0.0, "every migration of the toy fits an interval");
        samples
    };
    let mixed = |from, to| (1.0 - p) * one(from, calm, to) + p * one(from, burst, to);
    // What a layout earns from the last interval's start with no burst, and
    // after the horizon (no terminal value).
    let after_second = |r| layouts.iter().map(|&r2| one(r, calm, r2)).fold(f64::NEG_INFINITY, f64::max);
    let after_third = |_| 0.0;
    let gain = |f: Option<ParallelConfig>, after: &dyn Fn(Option<ParallelConfig>) -> f64| {
        let refill = one(f, burst, f) + after(f);
        let (f_d, f_p) = (f.unwrap().data_parallel, f.unwrap().pipeline_stages);
        let sheds = layouts.iter().filter(|r| {
            let (d, p) = (r.unwrap().data_parallel, r.unwrap().pipeline_stages);
            (p == f_p && d < f_d) || (d == f_d && p < f_p)
        });
        sheds.map(|&r| one(f, burst, r) + after(r)).fold(refill, f64::max) - refill
    };
    assert!(gain(cfg(2, 4), &after_second) > 0.0, "the toy's largest layout gains from shedding");
    let current = cfg(2, 4);
    let mut best = (f64::NEG_INFINITY, [None; 3]);
    for &t0 in &layouts {
        for &t1 in &layouts {
            for &t2 in &layouts {
                let mut value = one(current, calm, t0) + mixed(t0, t1) + mixed(t1, t2);
                if t1 == t0 {
                    value += p * gain(t0, &after_second);
                }
                if t2 == t1 {
                    value += (1.0 - p) * p * gain(t1, &after_third);
                }
                if value > best.0 {
                    best = (value, [t0, t1, t2]);
                }
            }
        }
    }
    let plan = |recourse| {
        let options = PlanOptions { recourse, ..PlanOptions::default() };
        let mut cache = TransitionCache::default();
        best_plan_scored(&profile, current, 0.0, &steps, &churn, interval_ms, options, &mut cache).unwrap()
    };
    let (with, without) = (plan(1.0), plan(0.0));
    assert!((with.objective - best.0).abs() <= 1e-9 * best.0.abs(), "{} vs {}", with.objective, best.0);
    assert_eq!(with.steps.iter().map(|s| s.config).collect::<Vec<_>>(), best.1);
    assert!(with.objective > without.objective);
}

#[test]
fn recourse_kept_between_calls_prices_as_afresh() {
    // The recourse's continuation and sheds are kept in the cache while the
    // steps and instances stay the same: every call must price exactly as a
    // fresh cache does, whatever ran before (other churn, another share, a
    // forced first layout, another forecast).
    let profile = toy_profile(
        &[(1, 2, 26.0), (2, 2, 50.0), (3, 2, 70.0), (1, 4, 45.0), (2, 3, 78.0), (2, 4, 80.0), (1, 3, 40.0)],
        0.0,
    );
    let interval_ms = 60_000;
    let calm = [step(9, 0, 0), step(9, 0, 0), step(9, 0, 0), step(9, 0, 0)];
    let falling = [step(9, 1, 0), step(8, 0, 0), step(8, 0, 1), step(9, 0, 0)];
    let churn = |p: f64| {
        vec![
            vec![Churn { extra: 1, probability: p }],
            vec![Churn { extra: 1, probability: p }, Churn { extra: 3, probability: p / 3.0 }],
            vec![],
            vec![Churn { extra: 2, probability: p }],
        ]
    };
    let calls: [(&[Step], f64, f64, Option<ParallelConfig>); 8] = [
        (&calm, 0.2, 1.0, None),
        (&calm, 0.2, 1.0, cfg(2, 4)),
        (&calm, 0.2, 1.0, cfg(2, 3)),
        (&calm, 0.05, 0.5, None),
        (&falling, 0.2, 1.0, None),
        (&calm, 0.3, 1.0, cfg(3, 2)),
        (&falling, 0.1, 0.7, cfg(2, 2)),
        // Not the first call's inputs again: that plan would be recalled
        // (`a_repeated_call_is_recalled_bit_for_bit`), not priced.
        (&calm, 0.25, 1.0, None),
    ];
    let (mut kept, mut credited) = (TransitionCache::default(), 0);
    for (k, &(steps, p, share, first)) in calls.iter().enumerate() {
        let plan = |cache: &mut TransitionCache, recourse| {
            let options = PlanOptions { recourse, first, ..PlanOptions::default() };
            best_plan_scored(&profile, cfg(2, 4), 0.0, steps, &churn(p), interval_ms, options, cache).unwrap()
        };
        let (again, afresh) = (plan(&mut kept, share), plan(&mut TransitionCache::default(), share));
        assert_eq!(again.objective.to_bits(), afresh.objective.to_bits(), "call {k}");
        assert_eq!(again.steps, afresh.steps, "call {k}");
        credited += usize::from(afresh.objective > plan(&mut TransitionCache::default(), 0.0).objective);
    }
    assert!(credited >= 3, "the credit changes several calls' objective ({credited} of 8)");
}

/// A call with exactly the inputs of one of the last few is answered with
/// that plan, bit for bit, without running the program; a change to any
/// input the plan depends on (a sign of zero included) runs it, and the work
/// limit, which can only stop a program, is not such an input.
#[test]
fn a_repeated_call_is_recalled_bit_for_bit() {
    let profile = toy_profile(&[(1, 2, 26.0), (2, 2, 50.0), (1, 4, 45.0), (2, 3, 78.0), (2, 4, 80.0)], 0.0);
    let steps = [step(9, 1, 0), step(8, 0, 0), step(8, 0, 1), step(9, 0, 0)];
    let churn = vec![
        vec![Churn { extra: 1, probability: 0.2 }],
        vec![],
        vec![],
        vec![Churn { extra: 2, probability: 0.1 }],
    ];
    let base = PlanOptions { recourse: 1.0, terminal_ms: 600_000.0, ..PlanOptions::default() };
    type Change = fn(&mut PlanOptions, &mut f64, &mut Vec<Vec<Churn>>);
    let changes: [(&str, Change); 9] = [
        ("carried", |_, c, _| *c = 500.0),
        ("churn probability", |_, _, ch| ch[0][0].probability = 0.25),
        ("churn burst", |_, _, ch| ch[3][0].extra = 3),
        ("terminal", |o, _, _| o.terminal_ms = 300_000.0),
        ("recourse share", |o, _, _| o.recourse = 0.5),
        ("first layout", |o, _, _| o.first = cfg(2, 3)),
        ("at risk", |o, _, _| o.at_risk = Some(100.0)),
        ("notice", |o, _, _| o.recovery = Recovery::with_notice(120_000.0, 1.0)),
        ("negative zero", |o, _, _| o.recourse = -0.0),
    ];
    let plan = |cache: &mut TransitionCache, options: PlanOptions, carried: f64, churn: &[Vec<Churn>]| {
        best_plan_scored(&profile, cfg(2, 4), carried, &steps, churn, 60_000, options, cache).unwrap()
    };
    let mut cache = TransitionCache::default();
    let first = plan(&mut cache, base, 0.0, &churn);
    let before = cache.stats();
    // Again, and again under another work limit: recalled.
    assert_eq!(plan(&mut cache, base, 0.0, &churn), first);
    let limited = PlanOptions { work_limit: Some(u64::MAX / 2), ..base };
    assert_eq!(plan(&mut cache, limited, 0.0, &churn), first);
    let after = cache.stats();
    assert_eq!(
        (after.recalled, after.plans - before.plans, after.weighed),
        (2, 2, before.weighed),
        "{after:?}"
    );
    for (name, change) in changes {
        let (mut options, mut carried, mut changed) = (base, 0.0, churn.clone());
        change(&mut options, &mut carried, &mut changed);
        let recalled = cache.stats().recalled;
        let planned = plan(&mut cache, options, carried, &changed);
        assert_eq!(cache.stats().recalled, recalled, "{name}: recalled");
        assert_eq!(planned, plan(&mut TransitionCache::default(), options, carried, &changed), "{name}");
        assert_eq!(
            planned.objective.to_bits(),
            plan(&mut TransitionCache::default(), options, carried, &changed).objective.to_bits(),
            "{name}"
        );
    }
    // Nine plans since: the base plan is no longer kept, and the program
    // finds it again.
    let recalled = cache.stats().recalled;
    assert_eq!(plan(&mut cache, base, 0.0, &churn), first);
    assert_eq!(cache.stats().recalled, recalled, "more than eight plans since: run again");
}
