//! Mixed fleets in the simulator: the Oracle's plan over per-interval throughputs is exact
//! (no decision sequence scores more), with the checkpoint cadence of the losses seen so
//! far as with the whole trace's; every row chooses only layouts the composition can
//! run, and work rolled back is valued at the speed it was trained at.

use parcae_policy_core::{
    ConfigProfile, IntervalStats, ModelProfile, ParallelConfig, Recovery, StagePartition,
};
use parcae_sim::mixed::{self, CadencedViews, Compositions, MixedFleet};
use parcae_sim::{CadenceRule, MigrationMode};

const T: u64 = 60_000;

/// A type whose layouts follow the mixed-fleet model: `tick` ms per micro-batch at depth 1
/// (1/P of it at depth P), `sync` ms per extra replica; 8 micro-batches per step.
fn typed(tick: f64, sync: f64, depths: &[u32]) -> ModelProfile {
    let mut configs = Vec::new();
    for &p in depths {
        for d in 1..=4u32 {
            let iteration = ((8.0 / f64::from(d)).ceil() + f64::from(p) - 1.0) * tick / f64::from(p)
                + sync * f64::from(d - 1);
            configs.push(ConfigProfile {
                config: ParallelConfig::new(d, p),
                samples_per_second: 8.0 / iteration * 1000.0,
                iteration_ms: iteration,
                comm_rebuild_add_ms: 500.0,
                comm_rebuild_remove_ms: 100.0,
                model_build_ms: 200.0,
            });
        }
    }
    ModelProfile {
        configs,
        partitions: vec![
            StagePartition {
                pipeline_stages: 1,
                layers_per_stage: vec![2],
                state_bytes_per_stage: vec![1000],
            },
            StagePartition {
                pipeline_stages: 2,
                layers_per_stage: vec![1, 1],
                state_bytes_per_stage: vec![500, 500],
            },
        ],
        rendezvous_ms: 1000.0,
        process_start_ms: 300.0,
        checkpoint_restart_ms: 5_000.0,
        checkpoint_interval_ms: 240_000.0,
        ..ModelProfile::empty("toy", 8, 1)
    }
}

/// Per-type series of `n` intervals, 0..=4 instances each, with churn.
fn market(seed: u64, n: usize) -> Vec<IntervalStats> {
    let mut state = seed;
    let mut next = move |k: u64| {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % k
    };
    let mut before = 0u32;
    (0..n)
        .map(|_| {
            let preemptions = if before > 0 && next(3) == 0 { 1 + next(u64::from(before)) as u32 } else { 0 };
            let left = before - preemptions.min(before);
            let arrivals = if next(2) == 0 { next(u64::from(5 - left)) as u32 } else { 0 };
            before = left + arrivals;
            IntervalStats { instances: before, arrivals, preemptions: preemptions.min(left + preemptions) }
        })
        .collect()
}

#[test]
fn the_mixed_oracle_beats_every_decision_sequence() {
    // Unannounced losses without checkpoint writes (the profile's cadence), and written
    // at 1 byte/ms (a second per checkpoint of the largest stage): the cadence follows the
    // losses seen so far (several cadences over a trace), or the whole trace's.
    let writes = Recovery { preemption_notice_ms: 0.0, checkpoint_write_bytes_per_ms: 1.0 };
    let cases = [
        (Recovery::UNANNOUNCED, CadenceRule::SeenSoFar),
        (writes, CadenceRule::SeenSoFar),
        (writes, CadenceRule::WholeTrace),
    ];
    let mut cadences_seen = 0;
    // The fast type only holds half the model (depth 2): a lone fast instance runs nothing,
    // though the union lists a one-instance layout (the slow type's).
    for (fast, slow) in [
        (typed(10.0, 2.0, &[1, 2]), typed(25.0, 6.0, &[1])),
        (typed(10.0, 2.0, &[2]), typed(25.0, 6.0, &[1])),
    ] {
        for seed in 0..6u64 {
            for (recovery, rule) in cases {
                let (a, b) = (market(seed * 2 + 1, 30), market(seed * 2 + 2, 30));
                let fleet = MixedFleet::new(&[&a, &b]);
                let mut compositions = Compositions::new(vec![&fast, &slow]);
                compositions.prepare(&fleet.counts);
                let views = CadencedViews::new(&compositions, &fleet, rule, T, &recovery, None);
                cadences_seen = cadences_seen.max(views.cadence().changes().len());
                let (planning, scoring, union) = (views.planning(), views.scoring(), views.union());
                let series = &fleet.series;
                let case = format!("seed {seed}, {rule:?}, write {}", recovery.checkpoint_write_bytes_per_ms);
                for (k, counts) in fleet.counts.iter().enumerate() {
                    // Each interval plans with the layouts its composition runs, at its cadence.
                    let layouts = |p: &ModelProfile| p.configs.iter().map(|c| c.config).collect::<Vec<_>>();
                    assert_eq!(layouts(planning[k]), layouts(compositions.planning(counts)), "{case}");
                    let at = views.cadence().at(k).checkpoint_interval_ms;
                    assert_eq!(scoring[k].checkpoint_interval_ms, at, "{case}, interval {k}");
                    assert_eq!(planning[k].checkpoint_interval_ms, at, "{case}, interval {k}");
                }
                let score = |d: &[Option<ParallelConfig>]| {
                    mixed::simulate(union, &scoring, series, T, d, MigrationMode::Live, recovery)
                        .unwrap()
                        .totals
                        .samples
                };
                let oracle = mixed::oracle(union, &scoring, series, T, recovery).unwrap();
                // Only layouts the composition runs.
                for (k, d) in oracle.iter().enumerate() {
                    if let Some(c) = d {
                        assert!(planning[k].config(*c).is_some(), "{case}, interval {k}: {c} cannot run");
                    }
                }
                let best = score(&oracle);
                let reactive = mixed::reactive(&planning, series);
                let truth = mixed::liveput_truth(union, &scoring, series, T, 4, recovery).unwrap();
                let plain: Vec<&ModelProfile> =
                    fleet.counts.iter().map(|c| compositions.planning(c)).collect();
                let ideal = mixed::ideal(&plain, series, T).unwrap().totals.samples;
                let mut rivals = vec![("reactive", score(&reactive)), ("liveput-truth", score(&truth))];
                // Random sequences of layouts the compositions run.
                let mut state = seed + 99;
                for r in 0..40 {
                    let d: Vec<Option<ParallelConfig>> = planning
                        .iter()
                        .map(|p| {
                            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                            let n = p.configs.len() as u64 + 1;
                            let pick = ((state >> 33) % n) as usize;
                            p.configs.get(pick).map(|c| c.config)
                        })
                        .collect();
                    rivals.push((if r == 0 { "random" } else { "random'" }, score(&d)));
                }
                assert!(best <= ideal * (1.0 + 1e-9), "{case}: oracle {best} above ideal {ideal}");
                for (name, samples) in rivals {
                    assert!(
                        samples <= best + 1e-6 * best.abs().max(1.0),
                        "{case}: {name} {samples} > oracle {best}"
                    );
                }
                assert!(ideal > 0.0);
            }
        }
    }
    // The losses seen so far moved the cadence on some trace (the case the views exist for).
    assert!(cadences_seen > 2, "at most {cadences_seen} cadences on any trace");
}

#[test]
fn rolled_back_work_is_valued_at_the_speed_it_was_trained_at() {
    // Checkpoints every 20 s: the first interval trains more than a rollback
    // takes back, so the work at risk does not cap it.
    let mut fast = typed(10.0, 2.0, &[1]);
    let mut slow = typed(40.0, 2.0, &[1]);
    fast.checkpoint_interval_ms = 20_000.0;
    slow.checkpoint_interval_ms = 20_000.0;
    // Two fast instances run (2, 1); then one fast is preempted unannounced and a slow one
    // arrives: the composition (1 fast, 1 slow) runs (2, 1) slower, but the work rolled
    // back was trained by two fast replicas.
    let a = [
        IntervalStats { instances: 2, arrivals: 2, preemptions: 0 },
        IntervalStats { instances: 1, arrivals: 0, preemptions: 1 },
    ];
    let b = [
        IntervalStats { instances: 0, arrivals: 0, preemptions: 0 },
        IntervalStats { instances: 1, arrivals: 1, preemptions: 0 },
    ];
    let fleet = MixedFleet::new(&[&a, &b]);
    let mut compositions = Compositions::new(vec![&fast, &slow]);
    compositions.prepare(&fleet.counts);
    let scoring = mixed::scoring_views(&compositions, &fleet);
    let two = Some(ParallelConfig::new(2, 1));
    let one = Some(ParallelConfig::new(1, 1));
    let r = mixed::simulate(
        compositions.union(),
        &scoring,
        &fleet.series,
        T,
        &[two, one],
        MigrationMode::Live,
        Recovery::UNANNOUNCED,
    )
    .unwrap();
    // (2, 1) loses a replica of its only stage, not the stage: nothing rolls back. Make it
    // lose the stage instead: (1, 1) on two fast instances, the holder preempted.
    assert_eq!(r.intervals[1].lost_samples, 0.0);
    let a1 = [
        IntervalStats { instances: 1, arrivals: 1, preemptions: 0 },
        IntervalStats { instances: 0, arrivals: 0, preemptions: 1 },
    ];
    let fleet = MixedFleet::new(&[&a1, &b]);
    compositions.prepare(&fleet.counts);
    let scoring = mixed::scoring_views(&compositions, &fleet);
    let r = mixed::simulate(
        compositions.union(),
        &scoring,
        &fleet.series,
        T,
        &[one, one],
        MigrationMode::Live,
        Recovery::UNANNOUNCED,
    )
    .unwrap();
    let fast_rate = fast.config(ParallelConfig::new(1, 1)).unwrap().samples_per_second;
    let lost_ms = parcae_policy_core::liveput::lost_work_ms(&fast);
    let lost = r.intervals[1].lost_samples;
    assert!((lost - fast_rate * lost_ms / 1000.0).abs() < 1e-6, "lost {lost}: not at the fast speed");
}
