//! Tests of the liveput cost model: hand-checked scenarios, the exact
//! expectation against brute-force enumeration (small fleets) and against a
//! Monte Carlo oracle (larger fleets), error handling, and timings.

use super::plan::{self, Model};
use super::*;
use crate::{ConfigProfile, StagePartition};

/// Unannounced preemptions (the rules before issue 16).
const U: Recovery = Recovery::UNANNOUNCED;

// ---------------------------------------------------------------- fixtures

/// The point-to-point curve of the p3 cluster (the artifact's
/// `CostModel.p2p_volume_to_cost`, bytes -> µs).
const P3_CURVE: [(u64, f64); 29] = [
    (4, 142.907),
    (8, 139.679),
    (16, 143.102),
    (32, 139.210),
    (64, 143.954),
    (128, 140.836),
    (256, 141.442),
    (512, 144.788),
    (1024, 137.372),
    (2048, 140.417),
    (4096, 141.651),
    (8192, 145.364),
    (16384, 154.935),
    (32768, 162.665),
    (65536, 194.492),
    (131072, 230.588),
    (262144, 385.104),
    (524288, 689.821),
    (1048576, 1428.108),
    (2097152, 3006.771),
    (4194304, 5182.599),
    (8388608, 9727.047),
    (16777216, 18622.294),
    (33554432, 38560.219),
    (67108864, 74432.216),
    (134217728, 153550.589),
    (268435456, 305811.282),
    (536870912, 601380.752),
    (1073741824, 1198255.900),
];

/// Layers per stage by the artifact's rule (`ModelSpec.partition`).
fn stage_counts(layers: usize, pp: usize) -> Vec<usize> {
    let body = layers - 1;
    let mut counts = vec![body / pp; pp];
    counts[0] += 1;
    for i in 0..body % pp {
        counts[pp - 2 - i] += 1;
    }
    counts
}

fn partition_of(params: &[u64], pp: u32) -> StagePartition {
    let mut start = 0;
    let mut layers_per_stage = Vec::new();
    let mut state_bytes_per_stage = Vec::new();
    for n in stage_counts(params.len(), pp as usize) {
        layers_per_stage.push(n as u32);
        state_bytes_per_stage.push(params[start..start + n].iter().sum::<u64>() * 12);
        start += n;
    }
    StagePartition { pipeline_stages: pp, layers_per_stage, state_bytes_per_stage }
}

/// A profile in the shape the cost-model crate produces: GPT-style
/// communicator rule, model build shrinking with depth, the p3 curve.
fn profile_with(params: &[u64], configs: &[(u32, u32)]) -> ModelProfile {
    let mut depths: Vec<u32> = configs.iter().map(|c| c.1).collect();
    depths.sort_unstable();
    depths.dedup();
    let configs = configs
        .iter()
        .map(|&(d, p)| {
            let groups = f64::from(d + p + 1 + d * p);
            let sps = 40.0 * f64::from(d) / (1.0 + 0.05 * f64::from(p));
            ConfigProfile {
                config: ParallelConfig::new(d, p),
                samples_per_second: sps,
                iteration_ms: 128.0 / sps * 1000.0,
                comm_rebuild_add_ms: 35.0 + groups * 500.0,
                comm_rebuild_remove_ms: 35.0 + groups * 39.3,
                model_build_ms: 300.0 + 430.0 * f64::from(48u32.div_ceil(p)),
            }
        })
        .collect();
    ModelProfile {
        model: "test".into(),
        global_batch_size: 128,
        micro_batch_size: 1,
        configs,
        partitions: depths.iter().map(|&p| partition_of(params, p)).collect(),
        transfer_curve: P3_CURVE.iter().map(|&(bytes, micros)| TransferPoint { bytes, micros }).collect(),
        rendezvous_ms: 6600.0,
        process_start_ms: 240.0,
        add_extra_ms: 2000.0,
        checkpoint_restart_ms: 14_000.0,
        checkpoint_interval_ms: 1_800_000.0,
    }
}

/// Every layout with `d x p <= max` and `p <= max_p`.
fn all_configs(max: u32, max_p: u32) -> Vec<(u32, u32)> {
    let mut v = Vec::new();
    for d in 1..=max {
        for p in 1..=max_p.min(max / d) {
            v.push((d, p));
        }
    }
    v
}

/// Uneven small model: embedding, 8 blocks of different sizes, head.
const SMALL: [u64; 10] =
    [900_000, 100_000, 200_000, 300_000, 150_000, 250_000, 120_000, 80_000, 400_000, 60_000];

/// GPT-1.5B-like: embedding + 48 equal blocks + head (50 entries).
fn gpt_params() -> Vec<u64> {
    let mut v = vec![80_411_200u64];
    v.extend(std::iter::repeat_n(30_740_800u64, 48));
    v.push(3_200);
    v
}

fn cfg(d: u32, p: u32) -> Option<ParallelConfig> {
    Some(ParallelConfig::new(d, p))
}

fn ms(profile: &ModelProfile, bytes: u64) -> f64 {
    transfer_ms(&profile.transfer_curve, bytes)
}

fn entry(profile: &ModelProfile, d: u32, p: u32) -> &ConfigProfile {
    profile.config(ParallelConfig::new(d, p)).unwrap()
}

fn r_add(profile: &ModelProfile, d: u32, p: u32) -> f64 {
    let e = entry(profile, d, p);
    profile.rendezvous_ms
        + profile.add_extra_ms
        + e.comm_rebuild_add_ms
        + profile.process_start_ms
        + e.model_build_ms
}

fn r_remove(profile: &ModelProfile, d: u32, p: u32) -> f64 {
    let e = entry(profile, d, p);
    e.comm_rebuild_remove_ms + profile.process_start_ms + e.model_build_ms
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(1.0)
}

// ---------------------------------------------------------------- transfer curve

#[test]
fn transfer_matches_costmodel_semantics() {
    let pt = |bytes, micros| TransferPoint { bytes, micros };
    let c = [pt(100, 10.0), pt(200, 30.0), pt(400, 50.0)];
    let us = |b| transfer_ms(&c, b) * 1000.0;
    assert_eq!(us(0), 0.0);
    assert_eq!(us(1), 10.0);
    assert_eq!(us(100), 10.0);
    assert_eq!(us(150), 20.0);
    assert_eq!(us(300), 40.0);
    assert_eq!(us(400), 50.0);
    assert_eq!(us(800), 100.0);
    assert_eq!(transfer_ms(&c, 8000), 1.0);
    assert_eq!(transfer_ms(&[], 1 << 20), 0.0);
    assert_eq!(transfer_ms(&[pt(1000, 2.0)], 3000), 0.006);
    // Unsorted or degenerate curves: an answer, not a panic.
    let bad = [pt(400, 5.0), pt(100, 1.0), pt(0, 3.0), pt(800, 9.0)];
    for b in [1, 50, 150, 399, 401, 700, 900] {
        assert!(transfer_ms(&bad, b).is_finite());
    }
    assert!(transfer_ms(&[pt(0, 3.0)], 5).is_finite());
}

// ---------------------------------------------------------------- single scenarios

#[test]
fn kinds_and_costs_follow_the_artifact() {
    let p = profile_with(&gpt_params(), &all_configs(32, 32));
    let part8 = partition_of(&gpt_params(), 8);
    let b = &part8.state_bytes_per_stage;

    // Nothing lost, same layout; lost spares and arrivals change nothing.
    let c = scenario_cost(&p, cfg(2, 8), &[2; 8], 3, 5, cfg(2, 8)).unwrap();
    assert_eq!((c.kind, c.duration_ms, c.bytes_moved, c.lost_work), (MigrationKind::None, 0.0, 0, false));

    // Shrinking D with every stage at >= d: intra-stage = rebuild(remove) + process start.
    let c = scenario_cost(&p, cfg(4, 8), &[4, 3, 4, 4, 2, 4, 4, 4], 0, 0, cfg(2, 8)).unwrap();
    assert_eq!(c.kind, MigrationKind::IntraStage);
    assert_eq!(c.duration_ms, entry(&p, 2, 8).comm_rebuild_remove_ms + p.process_start_ms);
    assert_eq!(c.bytes_moved, 0);

    // Stage 0 lost one of two replicas; a spare takes its state. 16 slots > 15
    // surviving holders: type add. One transfer of stage 0's state.
    let mut s = [2u32; 8];
    s[0] = 1;
    let c = scenario_cost(&p, cfg(2, 8), &s, 1, 0, cfg(2, 8)).unwrap();
    assert_eq!(c.kind, MigrationKind::InterStage);
    assert!(close(c.duration_ms, ms(&p, b[0]) + r_add(&p, 2, 8), 1e-12));
    assert_eq!(c.bytes_moved, b[0]);

    // Two stages short, filled by surplus replicas of the others (remove type):
    // the slowest stage's transfer, in parallel.
    let s = [3, 4, 4, 1, 4, 4, 4, 4];
    let c = scenario_cost(&p, cfg(4, 8), &s, 0, 0, cfg(3, 8)).unwrap();
    assert_eq!(c.kind, MigrationKind::InterStage);
    // Stage 3 lacks 2 with 1 survivor: two rounds.
    assert!(close(c.duration_ms, 2.0 * ms(&p, b[3]) + r_remove(&p, 3, 8), 1e-12));
    assert_eq!(c.bytes_moved, 2 * b[3]);

    // A stage with no survivor: restart from checkpoint, losing work.
    let mut s = [2u32; 8];
    s[5] = 0;
    let c = scenario_cost(&p, cfg(2, 8), &s, 4, 0, cfg(2, 8)).unwrap();
    assert_eq!(c.kind, MigrationKind::Restart);
    assert!(c.lost_work);
    let serial: f64 = b.iter().map(|&x| ms(&p, x)).sum();
    assert!(close(c.duration_ms, r_add(&p, 2, 8) + p.checkpoint_restart_ms + serial, 1e-12));
    assert_eq!(c.bytes_moved, 2 * b.iter().sum::<u64>());

    // Cold start: restart of type add that loses nothing.
    let c = scenario_cost(&p, None, &[], 16, 0, cfg(2, 8)).unwrap();
    assert_eq!(c.kind, MigrationKind::Restart);
    assert!(!c.lost_work);
    assert!(close(c.duration_ms, r_add(&p, 2, 8) + p.checkpoint_restart_ms + serial, 1e-12));

    // Pause: nothing to migrate, but a wiped stage still loses the work.
    let c = scenario_cost(&p, cfg(2, 8), &s, 0, 0, None).unwrap();
    assert_eq!((c.kind, c.duration_ms, c.lost_work), (MigrationKind::None, 0.0, true));

    // Depth change with every old stage alive: repartition.
    let c = scenario_cost(&p, cfg(2, 8), &[2; 8], 0, 0, cfg(1, 16)).unwrap();
    assert_eq!(c.kind, MigrationKind::Repartition);
    assert!(!c.lost_work);
    // Splitting stages in two: each old replica already holds its new stage
    // except where the boundaries do not line up.
    assert!(c.bytes_moved < b.iter().sum::<u64>());
}

#[test]
fn repartition_bytes_fix_the_artifacts_under_count() {
    // Embedding 10, four blocks of 1 (x 12 bytes of state per parameter).
    let params = [10u64, 1, 1, 1, 1];
    let p = profile_with(&params, &[(1, 2), (1, 4)]);
    // Old: [0..3) = 12 params, [3..5) = 2. New: [0..2) = 11, [2], [3], [4].
    // Survivors of old stage 0 serve new 0 (holds it all), old 1 serves new 2
    // or 3; new 1 (1 param) and the other (1 param) come whole: 2 params.
    let c = scenario_cost(&p, cfg(1, 2), &[1, 1], 2, 0, cfg(1, 4)).unwrap();
    assert_eq!(c.kind, MigrationKind::Repartition);
    assert_eq!(c.bytes_moved, 2 * 12);
    // The artifact's `repartition` keeps only the last stage it matched
    // (`total_params_need = num_params`): 1 parameter, 12 bytes.
    assert!(c.bytes_moved > 12);
    // Receivers pull in parallel: the slowest gets 12 bytes.
    assert!(close(c.duration_ms, ms(&p, 12) + r_add(&p, 1, 4), 1e-12));
}

/// Minimal bytes over every assignment of surviving instances to new slots
/// (brute force; unassigned slots receive their full stage).
fn brute_force_min_bytes(old: &StagePartition, new: &StagePartition, survivors: &[u32], d_new: u32) -> u64 {
    let segs = plan::segments(old, new).unwrap();
    let overlap = |j: usize, q: usize| segs.iter().find(|s| s.old == j && s.new == q).map_or(0, |s| s.bytes);
    let instances: Vec<usize> =
        survivors.iter().enumerate().flat_map(|(j, &s)| std::iter::repeat_n(j, s as usize)).collect();
    let p_new = new.state_bytes_per_stage.len();
    let total: u64 = new.state_bytes_per_stage.iter().sum::<u64>() * u64::from(d_new);
    let mut best = 0u64;
    let mut fill = vec![0u32; p_new];
    fn go(
        i: usize,
        inst: &[usize],
        fill: &mut [u32],
        d_new: u32,
        acc: u64,
        best: &mut u64,
        overlap: &dyn Fn(usize, usize) -> u64,
    ) {
        if i == inst.len() {
            *best = (*best).max(acc);
            return;
        }
        go(i + 1, inst, fill, d_new, acc, best, overlap);
        for q in 0..fill.len() {
            if fill[q] < d_new {
                fill[q] += 1;
                go(i + 1, inst, fill, d_new, acc + overlap(inst[i], q), best, overlap);
                fill[q] -= 1;
            }
        }
    }
    go(0, &instances, &mut fill, d_new, 0, &mut best, &overlap);
    total - best
}

#[test]
fn repartition_plan_is_optimal_at_full_strength_and_feasible_otherwise() {
    let params = SMALL;
    let layouts = [(1, 2), (2, 2), (3, 2), (1, 3), (2, 3), (1, 4), (2, 4), (1, 5), (1, 6), (1, 9)];
    let p = profile_with(&params, &layouts);
    let mut checked = 0;
    for &(d_old, p_old) in &layouts {
        for &(d_new, p_new) in &layouts {
            if p_old == p_new || d_old * p_old > 6 || d_new * p_new > 9 || p_new > 6 {
                continue;
            }
            let old = partition_of(&params, p_old);
            let new = partition_of(&params, p_new);
            // Every survivor vector with >= 1 per stage.
            let mut s = vec![1u32; p_old as usize];
            loop {
                let c = scenario_cost(&p, cfg(d_old, p_old), &s, 16, 0, cfg(d_new, p_new)).unwrap();
                assert_eq!(c.kind, MigrationKind::Repartition);
                let best = brute_force_min_bytes(&old, &new, &s, d_new);
                if s.iter().all(|&x| x == d_old) {
                    assert_eq!(c.bytes_moved, best, "{d_old}x{p_old} -> {d_new}x{p_new} at full strength");
                } else {
                    assert!(c.bytes_moved >= best, "{d_old}x{p_old} -> {d_new}x{p_new}, {s:?}");
                }
                checked += 1;
                // Next vector.
                let Some(i) = s.iter().position(|&x| x < d_old) else { break };
                s[i] += 1;
                s[..i].iter_mut().for_each(|x| *x = 1);
            }
        }
    }
    assert!(checked > 50, "{checked}");
}

#[test]
fn allocation_beats_greedy_on_a_path() {
    // Old A = [0..5) overlaps new X = [0..2) by 2 and Y = [2..7) by 3; old B
    // overlaps Y by 2. Greedy takes A-Y (3); the optimum is A-X + B-Y (4).
    let segs = [
        plan::Segment { old: 0, new: 0, bytes: 2 },
        plan::Segment { old: 0, new: 1, bytes: 3 },
        plan::Segment { old: 1, new: 1, bytes: 2 },
    ];
    assert_eq!(plan::allocate(&segs, 1, 1), vec![1, 0, 1]);
    assert_eq!(plan::allocate_greedy(&segs, 1, 1), vec![0, 1, 0]);
}

#[test]
fn allocation_falls_back_to_greedy_on_huge_tables() {
    // One old stage split into 9000 single-layer stages: a feasible plan, fast.
    let segs: Vec<plan::Segment> =
        (0..9000).map(|q| plan::Segment { old: 0, new: q, bytes: 1 + (q as u64 % 7) }).collect();
    let x = plan::allocate(&segs, 8192, 1);
    assert_eq!(x.iter().sum::<u32>(), 8192);
    assert!(x.iter().all(|&v| v <= 1));
}

#[test]
fn placement_uses_the_artifacts_numbering() {
    let from = ParallelConfig::new(2, 3);
    // Instances 0..6 hold stage i % 3; 6..8 are spares.
    let pl = Placement::from_preempted(from, 8, &[0, 3, 4, 7]).unwrap();
    assert_eq!(pl.survivors_per_stage, vec![0, 1, 2]);
    assert_eq!(pl.spare_survivors, 1);
    assert!(matches!(Placement::from_preempted(from, 8, &[8]), Err(LiveputError::BadInstanceId { .. })));
    assert!(matches!(
        Placement::from_preempted(from, 8, &[1, 1]),
        Err(LiveputError::DuplicateInstanceId { id: 1 })
    ));
    assert!(matches!(Placement::from_preempted(from, 5, &[]), Err(LiveputError::FromDoesNotFit { .. })));
}

// ---------------------------------------------------------------- errors

#[test]
fn bad_inputs_are_errors_not_panics() {
    let p = profile_with(&SMALL, &all_configs(8, 9));
    let e = |r: Result<Expected, LiveputError>| r.unwrap_err();
    assert!(matches!(
        e(expected_transition(&p, cfg(0, 2), 8, 0, 0, cfg(1, 2))),
        LiveputError::ZeroDegree { .. }
    ));
    assert!(matches!(
        e(expected_transition(&p, cfg(1, 2), 8, 0, 0, cfg(2, 0))),
        LiveputError::ZeroDegree { .. }
    ));
    assert!(matches!(
        e(expected_transition(&p, cfg(1, 2), 8, 9, 0, cfg(1, 2))),
        LiveputError::PreemptedAboveInstances { preempted: 9, instances: 8 }
    ));
    assert!(matches!(
        e(expected_transition(&p, cfg(4, 2), 7, 0, 0, None)),
        LiveputError::FromDoesNotFit { .. }
    ));
    assert!(matches!(
        e(expected_transition(&p, cfg(2, 2), 8, 3, 0, cfg(2, 3))),
        LiveputError::ToDoesNotFit { available: 5, .. }
    ));
    let mut q = p.clone();
    q.configs.retain(|c| c.config != ParallelConfig::new(2, 3));
    assert!(matches!(
        e(expected_transition(&q, cfg(2, 2), 8, 0, 0, cfg(2, 3))),
        LiveputError::UnknownConfig { .. }
    ));
    assert!(matches!(
        e(expected_transition(&p, cfg(1, 2), u32::MAX, 0, 0, cfg(1, 2))),
        LiveputError::TooManyInstances { .. }
    ));
    assert!(matches!(
        e(expected_transition(&p, cfg(1, 2), 8, 0, u32::MAX, cfg(1, 2))),
        LiveputError::TooManyInstances { .. }
    ));
    let mut q = p.clone();
    q.partitions.retain(|x| x.pipeline_stages != 3);
    assert!(matches!(
        e(expected_transition(&q, cfg(2, 2), 8, 0, 0, cfg(2, 3))),
        LiveputError::MissingPartition { stages: 3 }
    ));
    let mut q = p.clone();
    q.partitions.iter_mut().for_each(|x| {
        if x.pipeline_stages == 3 {
            x.layers_per_stage[0] += 1;
        }
    });
    assert!(matches!(
        e(expected_transition(&q, cfg(2, 2), 8, 0, 0, cfg(2, 3))),
        LiveputError::InconsistentPartitions { .. }
    ));
    q.partitions.iter_mut().for_each(|x| x.layers_per_stage.truncate(1));
    assert!(matches!(
        e(expected_transition(&q, cfg(2, 2), 8, 0, 0, cfg(2, 3))),
        LiveputError::BadPartition { .. }
    ));
    let mut q = p.clone();
    q.rendezvous_ms = f64::NAN;
    assert!(matches!(
        e(expected_transition(&q, cfg(2, 2), 8, 0, 0, cfg(2, 2))),
        LiveputError::BadProfileValue { .. }
    ));
    // Scenario shape errors.
    assert!(matches!(
        scenario_cost(&p, cfg(2, 2), &[2], 0, 0, cfg(2, 2)),
        Err(LiveputError::SurvivorsLength { expected: 2, got: 1 })
    ));
    assert!(matches!(
        scenario_cost(&p, cfg(2, 2), &[2, 3], 0, 0, cfg(2, 2)),
        Err(LiveputError::SurvivorsAboveDegree { stage: 1, .. })
    ));
    assert!(matches!(
        scenario_cost(&p, cfg(2, 2), &[1, 1], 0, 0, cfg(2, 2)),
        Err(LiveputError::ToDoesNotFit { available: 2, .. })
    ));
    // Liveput time checks.
    assert!(matches!(
        liveput(&p, &U, cfg(1, 2), 8, 0, 0, cfg(1, 2), f64::NAN, 0.0),
        Err(LiveputError::BadTime { what: "interval_ms", .. })
    ));
    assert!(matches!(
        liveput(&p, &U, cfg(1, 2), 8, 0, 0, cfg(1, 2), 60_000.0, -1.0),
        Err(LiveputError::BadTime { what: "carried_ms", .. })
    ));
    // Messages say what is wrong.
    let msg = LiveputError::ToDoesNotFit { to: ParallelConfig::new(2, 3), available: 5 }.to_string();
    assert_eq!(msg, "new layout 2x3 needs 6 instances, only 5 are alive");
    assert_eq!(MigrationKind::InterStage.as_str(), "inter-stage");
}

#[test]
fn edge_transitions() {
    let p = profile_with(&SMALL, &all_configs(8, 9));
    // from == to, nothing preempted: certain "none".
    let e = expected_transition(&p, cfg(2, 2), 8, 0, 3, cfg(2, 2)).unwrap();
    assert_eq!(e.p_by_kind, [1.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(e.mean_duration_ms, 0.0);
    // Everyone preempted and a cold reload on arrivals: certain restart.
    let e = expected_transition(&p, cfg(2, 2), 8, 8, 4, cfg(1, 4)).unwrap();
    assert!(close(e.p_restart, 1.0, 1e-12));
    assert!(close(e.p_lost_work, 1.0, 1e-12));
    // Nothing before and nothing after.
    let e = expected_transition(&p, None, 0, 0, 0, None).unwrap();
    assert_eq!(e.p_by_kind[0], 1.0);
    // Cold start.
    let e = expected_transition(&p, None, 0, 0, 4, cfg(2, 2)).unwrap();
    assert_eq!(e.p_restart, 1.0);
    assert_eq!(e.p_lost_work, 0.0);
    // Single-stage, single-replica layouts.
    let e = expected_transition(&p, cfg(1, 1), 1, 1, 1, cfg(1, 1)).unwrap();
    assert!(close(e.p_restart, 1.0, 1e-12));
}

// ---------------------------------------------------------------- liveput semantics

#[test]
fn liveput_charges_time_leftover_and_lost_work() {
    let p = profile_with(&SMALL, &all_configs(8, 9));
    let thr = entry(&p, 2, 2).samples_per_second;
    // Nothing happens: the whole interval trains.
    let v = liveput(&p, &U, cfg(2, 2), 8, 0, 0, cfg(2, 2), 60_000.0, 0.0).unwrap();
    assert!(close(v.expected_samples, thr * 60.0, 1e-12));
    assert_eq!(v.expected_leftover_ms, 0.0);
    // A carried migration longer than the interval: no samples, rest carried.
    let v = liveput(&p, &U, cfg(2, 2), 8, 0, 0, cfg(2, 2), 60_000.0, 75_000.0).unwrap();
    assert_eq!(v.expected_samples, 0.0);
    assert!(close(v.expected_leftover_ms, 15_000.0, 1e-12));
    // Certain restart: the migration takes time, and the work since the
    // checkpoint is lost (at the old layout's speed), whatever runs next.
    let v = liveput(&p, &U, cfg(2, 2), 4, 4, 4, cfg(2, 2), 60_000.0, 0.0).unwrap();
    let c = scenario_cost(&p, cfg(2, 2), &[0, 0], 0, 4, cfg(2, 2)).unwrap();
    let lost = lost_work_ms(&p) * thr / 1000.0;
    let trained = thr * (60_000.0 - c.duration_ms).max(0.0) / 1000.0;
    assert!(close(v.expected_samples, trained - lost, 1e-9));
    assert!(close(v.expected_leftover_ms, (c.duration_ms - 60_000.0).max(0.0), 1e-12));
    // A pause trains nothing and carries nothing, but cannot escape the loss.
    let v = liveput(&p, &U, cfg(2, 2), 8, 0, 0, None, 60_000.0, 5_000.0).unwrap();
    assert_eq!(v, LiveputValue::default());
    let v = liveput(&p, &U, cfg(2, 2), 4, 4, 4, None, 60_000.0, 0.0).unwrap();
    assert!(close(v.expected_samples, -lost, 1e-9));
    assert_eq!(v.expected_leftover_ms, 0.0);
}

// ---------------------------------------------------------------- exact vs enumeration

#[derive(Debug, Default, Clone, Copy)]
struct Sums {
    weight: f64,
    duration: f64,
    bytes: f64,
    kinds: [f64; 5],
    lost: f64,
    samples: f64,
    leftover: f64,
}

/// Per-scenario liveput, written independently of `liveput`.
fn scenario_liveput(
    p: &ModelProfile,
    from: Option<ParallelConfig>,
    to: Option<ParallelConfig>,
    c: &ScenarioCost,
    interval: f64,
    carried: f64,
) -> (f64, f64) {
    let lost = match from {
        Some(f) if c.lost_work => lost_work_ms(p) * p.config(f).unwrap().samples_per_second / 1000.0,
        _ => 0.0,
    };
    let Some(to) = to else { return (-lost, 0.0) };
    let thr_to = p.config(to).unwrap().samples_per_second;
    // A restart abandons a longer carried migration for its `R_type`.
    let carried = if c.kind == MigrationKind::Restart { carried.min(c.concurrent_ms) } else { carried };
    let busy = carried + c.duration_ms;
    (thr_to * (interval - busy).max(0.0) / 1000.0 - lost, (busy - interval).max(0.0))
}

fn add(s: &mut Sums, w: f64, c: &ScenarioCost, lp: (f64, f64)) {
    s.weight += w;
    s.duration += w * c.duration_ms;
    s.bytes += w * c.bytes_moved as f64;
    s.kinds[c.kind.index()] += w;
    s.lost += w * f64::from(u8::from(c.lost_work));
    s.samples += w * lp.0;
    s.leftover += w * lp.1;
}

const INTERVAL: f64 = 60_000.0;
const CARRIED: f64 = 1_500.0;

/// Recoveries that split the stages of `SMALL` and GPT-shaped profiles
/// between the three rules (`crate::recovery`): none, a notice that lets
/// small stages evacuate and the others write a fast emergency checkpoint or
/// roll back, and one that covers everything.
const RECOVERIES: [Recovery; 4] = [
    Recovery::UNANNOUNCED,
    Recovery { preemption_notice_ms: 15.0, checkpoint_write_bytes_per_ms: 2e6 },
    Recovery { preemption_notice_ms: 15.0, checkpoint_write_bytes_per_ms: 5e5 },
    Recovery { preemption_notice_ms: 1e9, checkpoint_write_bytes_per_ms: 1e9 },
];

/// Restart-on-change's cost of one scenario, written from its rules: the
/// live model's restart (type from the surviving holders), or nothing when
/// nothing happened; lost work as the live model's.
#[allow(clippy::too_many_arguments, reason = "the model, the live cost and the scenario's five fields")]
fn restart_on_change_scenario(
    model: &Model,
    live: &ScenarioCost,
    from: Option<ParallelConfig>,
    surv: &[u32],
    n_out: u32,
    arrived: u32,
    to: Option<ParallelConfig>,
) -> ScenarioCost {
    let none = ScenarioCost {
        kind: MigrationKind::None,
        duration_ms: 0.0,
        bytes_moved: 0,
        lost_work: live.lost_work,
        concurrent_ms: 0.0,
    };
    if to.is_none() || (from == to && n_out == 0 && arrived == 0) {
        return none;
    }
    let holders: u64 = surv.iter().map(|&s| u64::from(s)).sum();
    let r_type = model.reconfigure_ms(holders);
    ScenarioCost {
        kind: MigrationKind::Restart,
        duration_ms: r_type + model.restart_extra_ms,
        bytes_moved: model.restart_bytes,
        lost_work: live.lost_work,
        concurrent_ms: r_type,
    }
}

/// Per-scenario restart-on-change samples and leftover (the artifact's carry).
fn restart_scenario_liveput(
    p: &ModelProfile,
    from: Option<ParallelConfig>,
    to: Option<ParallelConfig>,
    c: &ScenarioCost,
    interval: f64,
    carried: f64,
) -> (f64, f64) {
    let lost = match from {
        Some(f) if c.lost_work => lost_work_ms(p) * p.config(f).unwrap().samples_per_second / 1000.0,
        _ => 0.0,
    };
    let busy = match c.kind {
        MigrationKind::Restart if carried > 0.0 => c.duration_ms + c.concurrent_ms,
        MigrationKind::Restart => c.duration_ms,
        _ => carried,
    };
    let thr_to = to.map_or(0.0, |t| p.config(t).unwrap().samples_per_second);
    (thr_to * (interval - busy).max(0.0) / 1000.0 - lost, (busy - interval).max(0.0))
}

#[test]
fn exact_matches_enumeration_of_every_subset() {
    let configs = all_configs(10, 9);
    let p = profile_with(&SMALL, &configs);
    let mut cases = 0;
    let mut covered = [0usize; 3]; // scenarios evacuated, checkpointed, rolled back
    for rec in &RECOVERIES {
        for n_all in [1u32, 3, 6, 8, 10] {
            let froms: Vec<_> = configs
                .iter()
                .filter(|c| c.0 * c.1 <= n_all)
                .map(|&(d, p)| cfg(d, p))
                .chain([None])
                .collect();
            for from in froms {
                for n_out in 0..=n_all {
                    for arrived in [0u32, 2] {
                        let available = n_all - n_out + arrived;
                        let tos: Vec<_> = configs
                            .iter()
                            .filter(|c| c.0 * c.1 <= available)
                            .map(|&(d, p)| cfg(d, p))
                            .chain([None])
                            .collect();
                        for &to in &tos {
                            check_against_enumeration(&p, rec, from, n_all, n_out, arrived, to, &mut covered);
                            cases += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(cases > 4000, "{cases}");
    assert!(covered.iter().all(|&c| c > 1000), "every rule is exercised: {covered:?}");
}

/// Every subset of `n_out` preempted instances, scored one by one, against
/// the exact distributions of live migration and restart-on-change.
#[allow(
    clippy::too_many_arguments,
    reason = "the deployment, the transition's fields and the coverage tally"
)]
fn check_against_enumeration(
    p: &ModelProfile,
    rec: &Recovery,
    from: Option<ParallelConfig>,
    n_all: u32,
    n_out: u32,
    arrived: u32,
    to: Option<ParallelConfig>,
    covered: &mut [usize; 3],
) {
    let model = Model::new(p, rec, from, to).unwrap();
    let (mut sums, mut restart_sums) = (Sums::default(), Sums::default());
    for mask in 0u32..(1 << n_all) {
        if mask.count_ones() != n_out {
            continue;
        }
        let ids: Vec<u32> = (0..n_all).filter(|i| mask >> i & 1 == 1).collect();
        let (surv, spare) = match from {
            Some(f) => {
                let pl = Placement::from_preempted(f, n_all, &ids).unwrap();
                (pl.survivors_per_stage, pl.spare_survivors)
            }
            None => (vec![], n_all - n_out),
        };
        let c = scenario_cost_under(p, rec, from, &surv, spare, arrived, to).unwrap();
        if surv.contains(&0) && to.is_some() {
            let slot = if c.lost_work {
                2
            } else if c.kind == MigrationKind::Restart {
                1
            } else {
                0
            };
            covered[slot] += 1;
        }
        let lp = scenario_liveput(p, from, to, &c, INTERVAL, CARRIED);
        add(&mut sums, 1.0, &c, lp);
        let r = restart_on_change_scenario(&model, &c, from, &surv, n_out, arrived, to);
        let rp = restart_scenario_liveput(p, from, to, &r, INTERVAL, CARRIED);
        add(&mut restart_sums, 1.0, &r, rp);
    }
    let what = format!("{rec:?}: {from:?} on {n_all}, -{n_out} +{arrived} -> {to:?}");
    let e = transition_distribution_under(p, rec, from, n_all, n_out, arrived, to).unwrap().expected();
    let v = liveput(p, rec, from, n_all, n_out, arrived, to, INTERVAL, CARRIED).unwrap();
    check_sums(&what, &e, &v, &sums);
    let e = restart_transition(p, rec, from, n_all, n_out, arrived, to).unwrap().expected();
    let v = restart_liveput(p, rec, from, n_all, n_out, arrived, to, INTERVAL, CARRIED).unwrap();
    check_sums(&format!("restart on change, {what}"), &e, &v, &restart_sums);
}

fn check_sums(what: &str, e: &Expected, v: &LiveputValue, sums: &Sums) {
    let w = sums.weight;
    for k in 0..5 {
        assert!(close(e.p_by_kind[k], sums.kinds[k] / w, 1e-9), "{what}: kind {k}: {e:?}");
    }
    assert!(close(e.p_by_kind.iter().sum(), 1.0, 1e-12), "{what}");
    assert!(close(e.mean_duration_ms, sums.duration / w, 1e-9), "{what}: {e:?}");
    assert!(close(e.mean_bytes, sums.bytes / w, 1e-9), "{what}: {e:?} vs {}", sums.bytes / w);
    assert!(close(e.p_lost_work, sums.lost / w, 1e-9), "{what}");
    assert!(close(v.expected_samples, sums.samples / w, 1e-9), "{what}: {v:?}");
    assert!(close(v.expected_leftover_ms, sums.leftover / w, 1e-9), "{what}: {v:?}");
}

// ---------------------------------------------------------------- Monte Carlo oracle

/// SplitMix64 (Steele, Lea, Flood 2014): small, deterministic, good enough.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (multiply-shift; bias below 2^-32 for these sizes).
    fn below(&mut self, n: u32) -> u32 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u32
    }
}

/// Monte Carlo estimate: means and standard errors of each metric, from
/// `draws` uniform subsets of `n_out` of `n_all` instances.
#[allow(
    clippy::too_many_arguments,
    reason = "the model, the transition's fields, the draw count and the seed"
)]
fn monte_carlo(
    p: &ModelProfile,
    model: &Model,
    from: Option<ParallelConfig>,
    to: Option<ParallelConfig>,
    n_all: u32,
    n_out: u32,
    arrived: u32,
    draws: usize,
    seed: u64,
) -> (Sums, Sums) {
    let mut rng = SplitMix64(seed);
    let mut ids: Vec<u32> = (0..n_all).collect();
    let (mut s1, mut s2) = (Sums::default(), Sums::default());
    for _ in 0..draws {
        // Partial Fisher-Yates: the first n_out entries are a uniform subset.
        for i in 0..n_out as usize {
            let j = i + rng.below(n_all - i as u32) as usize;
            ids.swap(i, j);
        }
        let chosen = &ids[..n_out as usize];
        let (surv, spare) = match from {
            Some(f) => {
                let pl = Placement::from_preempted(f, n_all, chosen).unwrap();
                (pl.survivors_per_stage, pl.spare_survivors)
            }
            None => (vec![], n_all - n_out),
        };
        let c = model.scenario(&surv, spare, arrived).unwrap();
        let lp = scenario_liveput(p, from, to, &c, INTERVAL, CARRIED);
        add(&mut s1, 1.0, &c, lp);
        // Second moments.
        let sq = ScenarioCost { duration_ms: c.duration_ms * c.duration_ms, ..c };
        s2.duration += sq.duration_ms;
        s2.bytes += (c.bytes_moved as f64).powi(2);
        s2.samples += lp.0 * lp.0;
        s2.leftover += lp.1 * lp.1;
    }
    (s1, s2)
}

#[test]
fn exact_agrees_with_monte_carlo_within_four_standard_errors() {
    let draws = 4000usize;
    let mut checked = 0;
    let mut seed = 0x5EED_u64;
    let check = |name: &str, exact: f64, mean: f64, se: f64, what: &str| {
        let tol = 4.0 * se + 1e-9 * exact.abs().max(1.0);
        assert!((exact - mean).abs() <= tol, "{what}: {name}: exact {exact} vs MC {mean} (se {se})");
    };
    let gpt = profile_with(&gpt_params(), &all_configs(32, 32));
    let small = profile_with(&SMALL, &all_configs(24, 9));
    // (profile, instances, from, targets)
    type Case<'a> = (&'a ModelProfile, u32, (u32, u32), Vec<(u32, u32)>);
    let grid: Vec<Case> = vec![
        (&gpt, 32, (2, 16), vec![(2, 16), (1, 16), (2, 8), (1, 8), (3, 8), (1, 24), (4, 6)]),
        (&gpt, 32, (4, 8), vec![(4, 8), (3, 8), (2, 8), (2, 16), (5, 6), (1, 12)]),
        (&gpt, 24, (2, 8), vec![(2, 8), (3, 8), (1, 8), (2, 12), (4, 4), (1, 16)]),
        (&small, 20, (4, 4), vec![(4, 4), (3, 4), (5, 4), (2, 8), (6, 3), (2, 6), (1, 9)]),
        (&small, 16, (1, 9), vec![(1, 9), (2, 4), (3, 5), (1, 6)]),
    ];
    for (p, n_all, (d, pp), tos) in grid {
        let from = cfg(d, pp);
        let mut outs: Vec<u32> = vec![0, 1, 2, 3, 5, 8, n_all / 2, n_all - d * pp, n_all - 1, n_all];
        outs.sort_unstable();
        outs.dedup();
        for n_out in outs {
            for &(d2, p2) in &tos {
                for arrived in [0u32, 4] {
                    if d2 * p2 > n_all - n_out + arrived {
                        continue;
                    }
                    let to = cfg(d2, p2);
                    let what = format!("{d}x{pp} on {n_all}, -{n_out} +{arrived} -> {d2}x{p2}, seed {seed}");
                    let rec = &RECOVERIES[(seed % 4) as usize];
                    let model = Model::new(p, rec, from, to).unwrap();
                    seed += 1;
                    let (s1, s2) = monte_carlo(p, &model, from, to, n_all, n_out, arrived, draws, seed);
                    let m = draws as f64;
                    let dist =
                        transition_distribution_under(p, rec, from, n_all, n_out, arrived, to).unwrap();
                    let e = dist.expected();
                    let v = liveput(p, rec, from, n_all, n_out, arrived, to, INTERVAL, CARRIED).unwrap();
                    assert!(close(e.p_by_kind.iter().sum(), 1.0, 1e-12), "{what}");
                    // Standard errors from the exact distribution (the MC sample
                    // variance misses rare outcomes, such as no stage being wiped
                    // out when half the fleet goes); one count of slack for the
                    // discreteness of the kind frequencies.
                    for k in 0..5 {
                        let q = e.p_by_kind[k];
                        check(
                            "p_by_kind",
                            q,
                            s1.kinds[k] / m,
                            (q * (1.0 - q) / m).max(0.0).sqrt() + 0.25 / m,
                            &what,
                        );
                    }
                    let exact_se = |f: &dyn Fn(&Outcome) -> f64, mean: f64| {
                        let var: f64 =
                            dist.outcomes.iter().map(|o| o.probability * (f(o) - mean).powi(2)).sum();
                        (var / m).sqrt()
                    };
                    let lp = |o: &Outcome| {
                        let c = ScenarioCost {
                            kind: o.kind,
                            duration_ms: o.duration_ms,
                            bytes_moved: 0,
                            lost_work: o.lost_work,
                            concurrent_ms: o.concurrent_ms,
                        };
                        scenario_liveput(p, from, to, &c, INTERVAL, CARRIED)
                    };
                    let se_dur = exact_se(&|o| o.duration_ms, e.mean_duration_ms);
                    check("duration", e.mean_duration_ms, s1.duration / m, se_dur, &what);
                    let se_samples = exact_se(&|o| lp(o).0, v.expected_samples);
                    check("samples", v.expected_samples, s1.samples / m, se_samples, &what);
                    let se_left = exact_se(&|o| lp(o).1, v.expected_leftover_ms);
                    check("leftover", v.expected_leftover_ms, s1.leftover / m, se_left, &what);
                    // Bytes are not in the outcome distribution: the sample
                    // standard error, plus the most that kinds the draws never
                    // saw can move the mean (every byte count is at most
                    // d x the whole state).
                    let se_mc = ((s2.bytes / m - (s1.bytes / m).powi(2)).max(0.0) / m).sqrt();
                    let whole = model.restart_bytes as f64;
                    let unseen: f64 = (0..5).filter(|&k| s1.kinds[k] == 0.0).map(|k| e.p_by_kind[k]).sum();
                    check("bytes", e.mean_bytes, s1.bytes / m, se_mc + unseen * whole / 4.0, &what);
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 150, "{checked}");
}

#[test]
fn public_scenario_cost_equals_model_scenario() {
    let p = profile_with(&gpt_params(), &all_configs(32, 32));
    let mut rng = SplitMix64(7);
    for _ in 0..200 {
        let (d, pp) = [(2, 16), (4, 8), (2, 8)][rng.below(3) as usize];
        let (d2, p2) = [(2, 16), (1, 16), (3, 8), (2, 8), (4, 6)][rng.below(5) as usize];
        let s: Vec<u32> = (0..pp).map(|_| rng.below(d + 1)).collect();
        let a = scenario_cost(&p, cfg(d, pp), &s, 32, 0, cfg(d2, p2)).unwrap();
        let b = Model::new(&p, &U, cfg(d, pp), cfg(d2, p2)).unwrap().scenario(&s, 32, 0).unwrap();
        assert_eq!(a, b);
    }
}

#[test]
fn probabilities_sum_to_one_at_scale() {
    let params: Vec<u64> = std::iter::repeat_n(1_000_000u64, 129).collect();
    let configs = [(64, 16), (60, 16), (32, 32), (128, 8), (1000, 1), (16, 64), (8, 128)];
    let p = profile_with(&params, &configs);
    for &(d, pp) in &configs {
        for &(d2, p2) in &configs {
            for n_out in [0u32, 1, 7, 100, 512, 1000, 1024] {
                let arrived = 1024;
                let Ok(e) = expected_transition(&p, cfg(d, pp), 1024, n_out, arrived, cfg(d2, p2)) else {
                    continue;
                };
                let what = format!("{d}x{pp} -{n_out} -> {d2}x{p2}: {e:?}");
                assert!(close(e.p_by_kind.iter().sum(), 1.0, 1e-9), "{what}");
                assert!(e.p_by_kind.iter().all(|&q| (0.0..=1.0 + 1e-12).contains(&q)), "{what}");
                assert!(e.mean_duration_ms.is_finite() && e.mean_duration_ms >= 0.0, "{what}");
                assert!(e.mean_bytes.is_finite() && e.mean_bytes >= 0.0, "{what}");
            }
        }
    }
}

// ---------------------------------------------------------------- timings

/// Timings of the exact expectation; run with
/// `cargo test --release -p parcae-policy-core liveput::tests::timing -- --ignored --nocapture`.
#[test]
#[ignore = "timing, run explicitly in release mode"]
fn timing() {
    use std::time::Instant;
    let time = |p: &ModelProfile, from, n_all, n_out, to, label: &str| {
        let iters = 2000;
        let start = Instant::now();
        let mut acc = 0.0;
        for _ in 0..iters {
            acc += expected_transition(p, from, n_all, n_out, n_out, to).unwrap().mean_duration_ms;
        }
        let us = start.elapsed().as_secs_f64() * 1e6 / f64::from(iters);
        println!("{label:<48} {us:>9.2} us/call  (checksum {acc:.1})");
    };
    let gpt = profile_with(&gpt_params(), &all_configs(32, 32));
    for n_out in [1, 4, 16] {
        time(&gpt, cfg(2, 16), 32, n_out, cfg(2, 16), &format!("N=32 2x16 -{n_out} -> 2x16 (same)"));
        time(&gpt, cfg(2, 16), 32, n_out, cfg(1, 16), &format!("N=32 2x16 -{n_out} -> 1x16 (intra)"));
        time(&gpt, cfg(2, 16), 32, n_out, cfg(2, 8), &format!("N=32 2x16 -{n_out} -> 2x8 (repart.)"));
        time(&gpt, cfg(4, 8), 32, n_out, cfg(3, 8), &format!("N=32 4x8 -{n_out} -> 3x8 (same depth)"));
    }
    let params: Vec<u64> = std::iter::repeat_n(1_000_000u64, 129).collect();
    let big = profile_with(&params, &[(64, 16), (48, 16), (32, 32), (56, 16), (128, 8)]);
    for n_out in [10, 100, 500] {
        time(&big, cfg(64, 16), 1024, n_out, cfg(48, 16), &format!("N=1024 64x16 -{n_out} -> 48x16"));
        time(&big, cfg(64, 16), 1024, n_out, cfg(32, 16 * 2), &format!("N=1024 64x16 -{n_out} -> 32x32"));
        time(&big, cfg(64, 16), 1024, n_out, cfg(56, 16), &format!("N=1024 64x16 -{n_out} -> 56x16"));
    }
}

#[test]
fn random_inputs_never_panic() {
    let mut rng = SplitMix64(42);
    let mut p = profile_with(&SMALL, &all_configs(12, 9));
    p.transfer_curve.clear();
    let mut ok = 0;
    for _ in 0..3000 {
        let pick = |rng: &mut SplitMix64| {
            if rng.below(6) == 0 { None } else { cfg(rng.below(5), rng.below(10)) }
        };
        let (from, to) = (pick(&mut rng), pick(&mut rng));
        let n_all = rng.below(14);
        let n_out = rng.below(16);
        let arrived = rng.below(6);
        if expected_transition(&p, from, n_all, n_out, arrived, to).is_ok() {
            ok += 1;
            let v = liveput(&p, &U, from, n_all, n_out, arrived, to, 60_000.0, 0.0).unwrap();
            let floor = -lost_work_ms(&p) * p.peak_samples_per_second() / 1000.0;
            assert!(v.expected_samples >= floor * (1.0 + 1e-9) && v.expected_leftover_ms >= 0.0);
        }
        let s: Vec<u32> = (0..rng.below(10)).map(|_| rng.below(5)).collect();
        let _ = scenario_cost(&p, from, &s, rng.below(4), arrived, to);
    }
    assert!(ok > 100, "{ok}");
}

// ---------------------------------------------------------------- restart on change

#[test]
fn restart_on_change_follows_the_artifacts_reactive_baseline() {
    // SMALL in 2 stages: [6, 4] layers, 1,900,000 and 660,000 parameters,
    // 22,800,000 and 7,920,000 bytes of state. On the p3 curve:
    // t(22.8 MB) = 18622.294 + (38560.219 - 18622.294) x 6022784 / 16777216 µs
    //            = 25.779728 ms, t(7.92 MB) = 5182.599 + (9727.047 - 5182.599)
    //            x 3725696 / 4194304 µs = 9.219319 ms; serial sum 34.999047 ms.
    let profile = profile_with(&SMALL, &all_configs(4, 2));
    let serial = 34.999_047_180_671_7;
    // (1,2) has 1 + 2 + 1 + 2 = 6 groups: R_remove = 35 + 6 x 39.3 + 240 +
    // (300 + 430 x 24) = 11130.8; R_add = 6600 + 2000 + 35 + 6 x 500 + 240 +
    // 10620 = 22495. (2,2) has 9 groups: R_add = 23995.
    assert!(close(r_remove(&profile, 1, 2), 11_130.8, 1e-12));
    assert!(close(r_add(&profile, 1, 2), 22_495.0, 1e-12));
    assert!(close(r_add(&profile, 2, 2), 23_995.0, 1e-12));

    let only = |d: TransitionDistribution| {
        assert_eq!(d.outcomes.len(), 1, "{d:?}");
        (d.outcomes[0], d.mean_bytes)
    };
    // A preemption, no arrival, every stage keeps a replica: remove,
    // checkpoint 14 s, serial transfer.
    let (c, bytes) = only(restart_transition(&profile, &U, cfg(2, 2), 4, 1, 0, cfg(1, 2)).unwrap());
    assert_eq!(c.kind, MigrationKind::Restart);
    assert!(!c.lost_work);
    assert!(close(c.duration_ms, 11_130.8 + 14_000.0 + serial, 1e-12), "{c:?}");
    assert!(close(c.concurrent_ms, 11_130.8, 1e-12));
    assert_eq!(bytes, (22_800_000 + 7_920_000) as f64);

    // The new layout needs more than the surviving holders: add. A stage of
    // (1, 2) preempted without notice (2 of the 3 instances are holders)
    // rolls back, as under live migration.
    let e = restart_transition(&profile, &U, cfg(1, 2), 3, 1, 2, cfg(2, 2)).unwrap().expected();
    assert_eq!(e.p_restart, 1.0);
    assert!(close(e.mean_duration_ms, 23_995.0 + 14_000.0 + serial, 1e-12), "{e:?}");
    assert!(close(e.p_lost_work, 2.0 / 3.0, 1e-12), "{e:?}");
    assert_eq!(e.mean_bytes, (2 * (22_800_000 + 7_920_000)) as f64);
    // With a notice that covers the evacuation nothing is lost.
    let notice = Recovery { preemption_notice_ms: 120_000.0, checkpoint_write_bytes_per_ms: 0.0 };
    let e = restart_transition(&profile, &notice, cfg(1, 2), 3, 1, 2, cfg(2, 2)).unwrap().expected();
    assert_eq!((e.p_restart, e.p_lost_work), (1.0, 0.0));

    // Any event restarts, even a lost spare with the layout unchanged: type
    // remove when the spare goes (1/3), add when a holder goes.
    let e = restart_transition(&profile, &U, cfg(1, 2), 3, 1, 0, cfg(1, 2)).unwrap().expected();
    assert_eq!(e.p_restart, 1.0);
    let mean = (11_130.8 + 2.0 * 22_495.0) / 3.0 + 14_000.0 + serial;
    assert!(close(e.mean_duration_ms, mean, 1e-12), "{e:?}");

    // Nothing happened, same layout: free. A pause: free (the lost work of a
    // wiped stage still lost).
    let (c, _) = only(restart_transition(&profile, &U, cfg(2, 2), 4, 0, 0, cfg(2, 2)).unwrap());
    assert_eq!((c.kind, c.duration_ms), (MigrationKind::None, 0.0));
    let e = restart_transition(&profile, &U, cfg(2, 2), 4, 3, 0, None).unwrap().expected();
    assert_eq!((e.p_by_kind[0], e.mean_duration_ms, e.p_lost_work), (1.0, 0.0, 1.0));

    // A start: add and the checkpoint, as a live cold start.
    let (c, _) = only(restart_transition(&profile, &U, None, 0, 0, 4, cfg(2, 2)).unwrap());
    assert!(close(c.duration_ms, 23_995.0 + 14_000.0 + serial, 1e-12), "{c:?}");

    // Errors are the live model's.
    assert!(matches!(
        restart_transition(&profile, &U, cfg(2, 2), 4, 1, 0, cfg(2, 2)),
        Err(LiveputError::ToDoesNotFit { .. })
    ));
    assert!(matches!(
        restart_transition(&profile, &U, cfg(2, 2), 4, 5, 0, cfg(1, 2)),
        Err(LiveputError::PreemptedAboveInstances { .. })
    ));
}

#[test]
fn restart_liveput_carries_as_the_artifact() {
    let profile = profile_with(&SMALL, &all_configs(4, 2));
    let serial = 34.999_047_180_671_7;
    let sps = 40.0 / 1.1; // (1,2)
    let cost = 11_130.8 + 14_000.0 + serial;
    // No carry: the restart's own cost.
    let v = restart_liveput(&profile, &U, cfg(2, 2), 4, 1, 0, cfg(1, 2), 60_000.0, 0.0).unwrap();
    assert!(close(v.expected_samples, sps * (60_000.0 - cost) / 1000.0, 1e-12), "{v:?}");
    assert_eq!(v.expected_leftover_ms, 0.0);
    // A restart in flight: dropped, the new one pays R_remove on top.
    let v = restart_liveput(&profile, &U, cfg(2, 2), 4, 1, 0, cfg(1, 2), 30_000.0, 50_000.0).unwrap();
    assert_eq!(v.expected_samples, 0.0);
    assert!(close(v.expected_leftover_ms, cost + 11_130.8 - 30_000.0, 1e-12), "{v:?}");
    // No event: the carried time runs on.
    let v = restart_liveput(&profile, &U, cfg(1, 2), 3, 0, 0, cfg(1, 2), 60_000.0, 10_000.0).unwrap();
    assert!(close(v.expected_samples, sps * 50.0, 1e-12));
    assert_eq!(v.expected_leftover_ms, 0.0);
    // The mode dispatch: live is `liveput`, bit for bit.
    let live = liveput(&profile, &U, cfg(2, 2), 4, 1, 0, cfg(1, 2), 60_000.0, 0.0).unwrap();
    let with =
        liveput_with_mode(MigrationMode::Live, &profile, &U, cfg(2, 2), 4, 1, 0, cfg(1, 2), 60_000.0, 0.0)
            .unwrap();
    assert_eq!(live, with);
    let restart = liveput_with_mode(
        MigrationMode::RestartOnChange,
        &profile,
        &U,
        cfg(2, 2),
        4,
        1,
        0,
        cfg(1, 2),
        60_000.0,
        0.0,
    )
    .unwrap();
    assert!(restart.expected_samples <= live.expected_samples);
    assert!(matches!(
        restart_liveput(&profile, &U, cfg(2, 2), 4, 1, 0, cfg(1, 2), f64::NAN, 0.0),
        Err(LiveputError::BadTime { .. })
    ));
}

/// The planner's cache reads a pair's outcomes without their expected bytes
/// (`PairModel::outcomes`, which skips the bytes' dynamic programs): the
/// same outcomes, bit for bit, as the full distribution, for every pair of
/// a profile, preemptions from none to the whole fleet, arrivals and every
/// recovery rule (cold starts, pauses, same-depth moves, repartitions).
#[test]
fn the_planners_outcomes_are_the_full_distributions() {
    let configs = all_configs(12, 6);
    for (params, name) in [(SMALL.to_vec(), "small"), (gpt_params(), "gpt")] {
        let profile = profile_with(&params, &configs);
        let layouts: Vec<Option<ParallelConfig>> =
            std::iter::once(None).chain(configs.iter().map(|&(d, p)| cfg(d, p))).collect();
        for recovery in RECOVERIES {
            // One store of the parts every pair of an old layout shares, as
            // the planner's cache keeps it: each is computed for the first
            // new layout and reused by the others.
            let mut shared = SharedByFrom::default();
            for &from in &layouts {
                for &to in &layouts {
                    let pair = PairModel::new(&profile, &recovery, from, to).unwrap();
                    let before = from.map_or(0, |c| u32::try_from(c.instances()).unwrap()).max(1) + 2;
                    for preempted in 0..=before {
                        let arrived = u32::from(preempted % 2 == 1);
                        let full = transition_distribution_under(
                            &profile, &recovery, from, before, preempted, arrived, to,
                        );
                        let outcomes = pair.outcomes(before, preempted, arrived, &mut shared);
                        match (full, outcomes) {
                            (Ok(full), Ok(outcomes)) => assert_eq!(
                                format!("{:?}", full.outcomes),
                                format!("{outcomes:?}"),
                                "{name} {recovery:?} {from:?} -> {to:?}, {preempted} of {before} preempted"
                            ),
                            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                            (a, b) => panic!("{name} {from:?} -> {to:?}: {a:?} against {b:?}"),
                        }
                    }
                }
            }
            // One per old layout and step (no more: the pairs did share them).
            let steps: u32 = configs.iter().map(|&(d, p)| d * p + 3).sum();
            assert_eq!(shared.len(), steps as usize, "{name} {recovery:?}");
        }
    }
}
