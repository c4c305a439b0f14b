//! `simulate` on small cases computed by hand from the cost model's rules
//! (`parcae_policy_core::liveput`), the baselines that need no planner, and
//! the work-at-risk rule (`parcae_policy_core::at_risk`): a rollback takes
//! back no more than was trained since the last one, and the Oracle, which
//! plans under the rule, is still the best decision sequence there is
//! (checked against every sequence on small random series); and a pause's
//! write, until which the paused layout's holders stay exposed.

use parcae_policy_core::plan::{self, ParkedPause, PlanOptions, TransitionCache};
use parcae_policy_core::{
    ConfigProfile, IntervalStats, ModelProfile, ParallelConfig, Recovery, StagePartition,
};
use parcae_sim::{
    ArtifactStrategy, CadenceRule, Cadenced, IssueReason, MigrationMode, Prices, SimError, Simulator,
    artifact, ideal, ideal_samples, oracle_cadenced, oracle_options, oracle_under, oracle_without_pauses,
    plan_steps, reactive, simulate, simulate_cadenced, simulate_under,
};
use parcae_traces::{IntervalSeries, ReferenceDecision, Strategy};

const T: u64 = 60_000;
const PRICES: Prices = Prices { spot_usd_per_hour: 1.0, on_demand_usd_per_hour: 3.0 };

/// Layouts (1,1) 10/s, (2,1) 18/s, (1,2) 12/s. Reconfiguration pieces (ms):
/// rendezvous 1000, process start 300, communicator rebuild 500 on add / 100
/// on remove, model build 200, checkpoint reload `checkpoint_ms`; no transfer
/// curve, so moving state is free. Hence `R_add = 1000 + 500 + 300 + 200 =
/// 2000`, `R_remove = 100 + 300 + 200 = 600`, intra-stage `100 + 300 = 400`, a
/// restart `R + checkpoint_ms`.
fn toy(checkpoint_ms: f64, checkpoint_interval_ms: f64) -> ModelProfile {
    let entry = |d, p, sps| ConfigProfile {
        config: ParallelConfig::new(d, p),
        samples_per_second: sps,
        iteration_ms: 1000.0,
        comm_rebuild_add_ms: 500.0,
        comm_rebuild_remove_ms: 100.0,
        model_build_ms: 200.0,
    };
    ModelProfile {
        model: "toy".into(),
        global_batch_size: 8,
        micro_batch_size: 1,
        configs: vec![entry(1, 1, 10.0), entry(2, 1, 18.0), entry(1, 2, 12.0)],
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
        transfer_curve: vec![],
        rendezvous_ms: 1000.0,
        process_start_ms: 300.0,
        add_extra_ms: 0.0,
        checkpoint_restart_ms: checkpoint_ms,
        checkpoint_interval_ms,
    }
}

fn stats(instances: u32, arrivals: u32, preemptions: u32) -> IntervalStats {
    IntervalStats { instances, arrivals, preemptions }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

macro_rules! assert_close {
    ($a:expr, $b:expr) => {{
        let (a, b) = ($a, $b);
        assert!(close(a, b), "{} = {a}, expected {b}", stringify!($a));
    }};
}

#[test]
fn no_preemption_pays_one_cold_start() {
    let profile = toy(2000.0, 0.0);
    let series = [stats(2, 2, 0), stats(2, 0, 0), stats(2, 0, 0)];
    let run = Some(ParallelConfig::new(2, 1));
    let result = simulate(&profile, &series, T, &[run; 3], PRICES).unwrap();
    // Cold start: R_add 2000 + checkpoint 2000 = 4000 ms; then nothing.
    assert_close!(result.intervals[0].samples, 18.0 * 56.0);
    assert_close!(result.intervals[0].migration_ms, 4000.0);
    assert_close!(result.intervals[0].transition_ms, 4000.0);
    assert_eq!(result.intervals[0].kinds.restart, 1.0);
    assert_eq!(result.intervals[1].kinds.none, 1.0);
    assert_close!(result.intervals[1].samples, 18.0 * 60.0);
    let t = &result.totals;
    assert_close!(t.samples, 18.0 * (56.0 + 60.0 + 60.0));
    assert_close!(t.hours, 0.05);
    assert_close!(t.samples_per_hour, t.samples / 0.05);
    assert_close!(t.migration_hours, 4000.0 / 3_600_000.0);
    assert_eq!(t.migrations.restart, 1.0);
    assert_eq!(t.migrations.total, 1.0);
    assert_eq!((t.cold_starts, t.config_changes, t.paused_intervals), (1, 0, 0));
    // 2 instances x 3 minutes, every alive instance paid.
    assert_close!(t.instance_hours, 0.1);
    assert_close!(t.usd_spot, 0.1);
    assert_close!(t.usd_on_demand, 0.3);
    assert_close!(t.usd_per_million_samples_spot.unwrap(), 0.1 / t.samples * 1e6);
    assert_close!(t.usd_per_million_samples_on_demand.unwrap(), 0.3 / t.samples * 1e6);
}

#[test]
fn losing_a_whole_stage_restarts_and_redoes_lost_work() {
    // Checkpoints every minute: a restart loses 30 s of work on average.
    let profile = toy(2000.0, 60_000.0);
    // (1,2) on 2 instances; one is preempted and replaced in interval 1.
    let series = [stats(2, 2, 0), stats(2, 1, 1), stats(2, 0, 0)];
    let run = Some(ParallelConfig::new(1, 2));
    let result = simulate(&profile, &series, T, &[run; 3], PRICES).unwrap();
    let r = &result.intervals[1];
    // A stage lost its only replica: restart of type add (the new layout needs
    // 2 holders, 1 survived) 2000 + checkpoint 2000, plus 30 s redone at the
    // same speed.
    assert_eq!(r.kinds.restart, 1.0);
    assert_eq!(r.p_restart, 1.0);
    assert_eq!(r.p_lost_work, 1.0);
    assert_close!(r.transition_ms, 4000.0);
    assert_close!(r.samples, 12.0 * (60.0 - 34.0));
    assert_close!(r.migration_ms, 4000.0);
    assert_close!(r.lost_samples, 12.0 * 30.0);
    assert_close!(result.totals.samples, 12.0 * (56.0 + 26.0 + 60.0));
    assert_eq!(result.totals.migrations.restart, 2.0, "the cold start and the restart");
    assert_eq!(result.totals.cold_starts, 1);
}

#[test]
fn a_migration_longer_than_the_interval_carries_over() {
    // Cold start 2000 + 68000 = 70 s: 10 s spill into interval 1.
    let profile = toy(68_000.0, 0.0);
    let series = [stats(1, 1, 0), stats(1, 0, 0)];
    let run = Some(ParallelConfig::new(1, 1));
    let result = simulate(&profile, &series, T, &[run; 2], PRICES).unwrap();
    assert_eq!(result.intervals[0].samples, 0.0);
    assert_close!(result.intervals[0].leftover_ms, 10_000.0);
    assert_close!(result.intervals[0].migration_ms, 60_000.0);
    assert_close!(result.intervals[1].carried_in_ms, 10_000.0);
    assert_close!(result.intervals[1].samples, 10.0 * 50.0);
    assert_close!(result.totals.migration_hours, 70_000.0 / 3_600_000.0);
}

#[test]
fn expectation_over_which_instance_is_preempted() {
    let profile = toy(2000.0, 0.0);
    // (1,2) on 2 of 3 instances (one spare); one of the 3 is preempted: the
    // spare (1/3: nothing to do) or a stage holder (2/3: that stage is gone,
    // restart: 1 holder left, 2 needed, R_add 2000 + checkpoint 2000).
    let series = [stats(3, 3, 0), stats(2, 0, 1)];
    let run = Some(ParallelConfig::new(1, 2));
    let result = simulate(&profile, &series, T, &[run; 2], PRICES).unwrap();
    let r = &result.intervals[1];
    assert_close!(r.kinds.none, 1.0 / 3.0);
    assert_close!(r.kinds.restart, 2.0 / 3.0);
    assert_close!(r.transition_ms, 2.0 / 3.0 * 4000.0);
    assert_close!(r.samples, 12.0 * (60.0 / 3.0 + 2.0 / 3.0 * 56.0));
    assert_close!(result.totals.migrations.total, 1.0 + 2.0 / 3.0);
}

#[test]
fn intra_stage_and_pause() {
    let profile = toy(2000.0, 0.0);
    // (2,1) -> one replica lost -> (1,1): intra-stage, 400 ms; then 0 alive: pause.
    let series = [stats(2, 2, 0), stats(1, 0, 1), stats(0, 0, 1), stats(1, 1, 0)];
    let decisions = [
        Some(ParallelConfig::new(2, 1)),
        Some(ParallelConfig::new(1, 1)),
        None,
        Some(ParallelConfig::new(1, 1)),
    ];
    let result = simulate(&profile, &series, T, &decisions, PRICES).unwrap();
    assert_eq!(result.intervals[1].kinds.intra_stage, 1.0);
    assert_close!(result.intervals[1].samples, 10.0 * 59.6);
    assert_eq!(result.intervals[2].samples, 0.0);
    assert_eq!(result.intervals[2].kinds.none, 1.0);
    // Resuming after a pause is a cold start again.
    assert_eq!(result.intervals[3].kinds.restart, 1.0);
    let t = &result.totals;
    assert_eq!((t.cold_starts, t.config_changes, t.paused_intervals), (2, 3, 1));
    assert_close!(t.migrations.intra_stage, 1.0);
    assert_close!(t.migrations.restart, 2.0);
    assert_eq!(result.decisions(), decisions);
    assert_close!(*result.cumulative_samples().last().unwrap(), t.samples);
}

#[test]
fn errors_name_the_interval() {
    let profile = toy(2000.0, 0.0);
    let series = [stats(2, 2, 0), stats(1, 0, 1)];
    let two = Some(ParallelConfig::new(2, 1));
    let error = simulate(&profile, &series, T, &[two, two], PRICES).unwrap_err();
    assert_eq!(error, SimError::DoesNotFit { interval: 1, config: ParallelConfig::new(2, 1), instances: 1 });
    assert!(error.to_string().starts_with("interval 1: layout 2x1 needs 2 instances"), "{error}");
    let error = simulate(&profile, &series, T, &[Some(ParallelConfig::new(2, 2)), None], PRICES);
    assert!(matches!(error, Err(SimError::DoesNotFit { interval: 0, .. })));
    let error = simulate(&profile, &[stats(3, 3, 0)], T, &[Some(ParallelConfig::new(3, 1))], PRICES);
    assert!(matches!(error, Err(SimError::NotProfiled { interval: 0, .. })));
    let error = simulate(&profile, &[stats(3, 2, 0)], T, &[None], PRICES);
    assert!(matches!(error, Err(SimError::InconsistentSeries { interval: 0, .. })));
    let error = simulate(&profile, &series, T, &[None], PRICES);
    assert_eq!(error, Err(SimError::Length { decisions: 1, intervals: 2 }));
    assert_eq!(simulate(&profile, &series, 0, &[None, None], PRICES), Err(SimError::ZeroInterval));
}

#[test]
fn simulator_steps_match_simulate_and_leave_state_alone_on_error() {
    let profile = toy(2000.0, 60_000.0);
    let series = [stats(3, 3, 0), stats(2, 0, 1), stats(3, 1, 0)];
    let decisions =
        [Some(ParallelConfig::new(1, 2)), Some(ParallelConfig::new(2, 1)), Some(ParallelConfig::new(1, 1))];
    let whole = simulate(&profile, &series, T, &decisions, PRICES).unwrap();
    let mut sim = Simulator::new(&profile, T).unwrap();
    for (k, (s, d)) in series.iter().zip(decisions).enumerate() {
        assert!(sim.step(*s, Some(ParallelConfig::new(4, 4))).is_err());
        assert_eq!(sim.next_interval(), k);
        assert_eq!(sim.step(*s, d).unwrap(), whole.intervals[k]);
        assert_eq!(sim.current(), d);
        assert_eq!(sim.carried_ms(), whole.intervals[k].leftover_ms);
    }
}

#[test]
fn ideal_and_reactive() {
    let profile = toy(2000.0, 0.0);
    let series = [stats(2, 2, 0), stats(1, 0, 1), stats(0, 0, 1), stats(3, 3, 0)];
    let decisions = reactive(&profile, &series);
    assert_eq!(
        decisions,
        [
            Some(ParallelConfig::new(2, 1)),
            Some(ParallelConfig::new(1, 1)),
            None,
            Some(ParallelConfig::new(2, 1))
        ]
    );
    let bound = ideal(&profile, &series, T, PRICES).unwrap();
    assert_close!(bound.totals.samples, 60.0 * (18.0 + 10.0 + 0.0 + 18.0));
    assert_eq!(bound.totals.samples, ideal_samples(&profile, &series, T));
    assert_eq!(bound.totals.migrations.total, 0.0);
    assert_eq!(bound.totals.migration_hours, 0.0);
    assert_eq!(bound.decisions(), decisions);
    let scored = simulate(&profile, &series, T, &decisions, PRICES).unwrap();
    assert!(scored.totals.samples < bound.totals.samples);
    assert_eq!(scored.totals.instance_hours, bound.totals.instance_hours);
}

#[test]
fn artifact_decisions_are_reported_not_changed() {
    let profile = toy(2000.0, 0.0);
    let series =
        IntervalSeries { interval_ms: T, intervals: vec![stats(2, 2, 0), stats(1, 0, 1), stats(1, 0, 0)] };
    let s = |d, p| Strategy { data_parallel: d, pipeline_stages: p };
    let row = |k: u64, duration_ms, strategy| ReferenceDecision {
        start_ms: k * T,
        duration_ms,
        throughput_opt: strategy,
        liveput_truth: s(1, 1),
        liveput_predict: s(9, 9),
        migration: false,
    };
    // Interval 0 fine, interval 1 does not fit (2x1 on 1), interval 2 has
    // only an off-grid row.
    let reference = [row(0, T, s(2, 1)), row(1, T, s(2, 1)), row(2, T / 2, s(1, 1))];
    let replay = artifact(&profile, &series, &reference, ArtifactStrategy::ThroughputOpt);
    assert_eq!(replay.decisions, [Some(ParallelConfig::new(2, 1)), None, None]);
    assert_eq!(replay.issues.len(), 1);
    assert_eq!(replay.issues[0].interval, 1);
    assert_eq!(replay.issues[0].reason, IssueReason::DoesNotFit);
    assert_eq!((replay.missing_intervals, replay.misaligned_rows), (1, 1));
    let predict = artifact(&profile, &series, &reference, ArtifactStrategy::LiveputPredict);
    assert_eq!(predict.issues.len(), 2);
    assert!(predict.issues.iter().all(|i| i.reason == IssueReason::NotProfiled));
    assert_eq!(predict.issues[0].to_string(), "interval 0: layout 9x9 is not in the profile");
    let truth = artifact(&profile, &series, &reference, ArtifactStrategy::LiveputTruth);
    assert!(truth.issues.is_empty());
    assert!(simulate(&profile, &series.intervals, T, &replay.decisions, PRICES).is_ok());
}

/// A realized step with the victims known scores that one scenario: with no holder lost it
/// equals the expectation of a transition that cannot lose one, and losing a holder costs
/// what the cost model charges that scenario.
#[test]
fn realized_victims_score_their_own_scenario() {
    use parcae_policy_core::liveput::{Placement, scenario_cost};
    let profile = toy(2000.0, 0.0);
    let two = ParallelConfig::new(2, 1);
    let start = IntervalStats { instances: 3, arrivals: 3, preemptions: 0 };
    let lose_one = IntervalStats { instances: 2, arrivals: 0, preemptions: 1 };
    let run = |placement: Option<Placement>| {
        let mut sim = parcae_sim::Simulator::new(&profile, 60_000).unwrap();
        sim.step(start, Some(two)).unwrap();
        match placement {
            Some(p) => sim.step_realized(lose_one, Some(two), &p).unwrap(),
            None => sim.step(lose_one, Some(two)).unwrap(),
        }
    };
    let spare_lost = run(Some(Placement { survivors_per_stage: vec![2], spare_survivors: 0 }));
    assert_eq!((spare_lost.transition_ms, spare_lost.kinds.none), (0.0, 1.0));
    let holder_lost = run(Some(Placement { survivors_per_stage: vec![1], spare_survivors: 1 }));
    let cost = scenario_cost(&profile, Some(two), &[1], 1, 0, Some(two)).unwrap();
    assert_eq!(holder_lost.transition_ms, cost.duration_ms);
    assert!(holder_lost.transition_ms > 0.0 && holder_lost.samples < spare_lost.samples);
    // The expectation lies between the two (a third of the victims are spares).
    let expected = run(None);
    let mix = (spare_lost.samples + 2.0 * holder_lost.samples) / 3.0;
    assert!((expected.samples - mix).abs() < 1e-6, "{} vs {mix}", expected.samples);
}

/// Per-interval profiles (a mixed fleet's compositions): each interval is scored with its
/// own, and a list of the wrong length is refused by name.
#[test]
fn each_interval_is_scored_with_its_own_profile() {
    let slow = toy(0.0, 0.0);
    let mut fast = slow.clone();
    for c in &mut fast.configs {
        c.samples_per_second *= 2.0;
    }
    let series = [stats(1, 1, 0), stats(1, 0, 0), stats(1, 0, 0)];
    let decisions = [Some(ParallelConfig::new(1, 1)); 3];
    let recovery = parcae_policy_core::Recovery::UNANNOUNCED;
    let profiles = [&slow, &fast, &slow];
    let live = parcae_sim::MigrationMode::Live;
    let r = parcae_sim::mixed::simulate(&fast, &profiles, &series, T, &decisions, live, recovery).unwrap();
    // No reconfiguration after the start: the second interval trains twice as much.
    assert!(close(r.intervals[1].samples, 2.0 * r.intervals[2].samples), "{:?}", r.intervals);
    let e = parcae_sim::mixed::simulate(&fast, &profiles[..2], &series, T, &decisions, live, recovery)
        .unwrap_err();
    assert!(matches!(e, SimError::Profiles { profiles: 2, intervals: 3 }), "{e}");
}

#[test]
fn a_rollback_soon_after_a_start_loses_only_what_was_trained_since() {
    // A checkpoint every 20 minutes: a steady-state rollback is 10 minutes of
    // training, 6,000 samples at (1, 1)'s 10/s; only one interval has run.
    let profile = toy(5000.0, 1_200_000.0);
    let one = Some(ParallelConfig::new(1, 1));
    let series = [stats(2, 2, 0), stats(1, 0, 1)];
    let mut sim = Simulator::with_recovery(&profile, T, MigrationMode::Live, Recovery::UNANNOUNCED).unwrap();
    assert_eq!(sim.at_risk(), 0.0);
    let first = sim.step(series[0], one).unwrap();
    assert!(first.samples > 0.0 && first.samples < 600.0);
    assert!(close(sim.at_risk(), first.samples), "{} at risk after {}", sim.at_risk(), first.samples);
    let second = sim.step(series[1], one).unwrap();
    // The holder is one of the two instances: half a chance of a rollback,
    // which takes back what the first interval trained, not 6,000 samples.
    assert_eq!(second.p_lost_work, 0.5);
    assert!(close(second.lost_samples, 0.5 * first.samples), "{}", second.lost_samples);

    // Long after the start the whole steady-state share is at risk again.
    let long: Vec<IntervalStats> =
        std::iter::once(stats(2, 2, 0)).chain(std::iter::repeat_n(stats(2, 0, 0), 12)).collect();
    let mut sim = Simulator::with_recovery(&profile, T, MigrationMode::Live, Recovery::UNANNOUNCED).unwrap();
    for s in &long {
        sim.step(*s, one).unwrap();
    }
    assert!(sim.at_risk() > 6000.0, "{}", sim.at_risk());
    let wiped = sim.step(stats(1, 0, 1), one).unwrap();
    assert!(close(wiped.lost_samples, 0.5 * 6000.0), "{}", wiped.lost_samples);
}

/// Unannounced preemptions and a checkpoint write so slow that the toy's
/// one-stage state (1,000 bytes) takes 150 s to write, two boundaries of a
/// minute-long interval, and its two-stage state 75 s, one.
const SLOW_WRITE: Recovery =
    Recovery { preemption_notice_ms: 0.0, checkpoint_write_bytes_per_ms: 1000.0 / 150_000.0 };

#[test]
fn a_pause_protects_the_state_only_once_its_write_lands() {
    let profile = toy(5000.0, 600_000.0);
    let one = Some(ParallelConfig::new(1, 1));
    // Train on one of two instances, pause, then lose one of the two (the holder
    // half the time), then nothing happens.
    let series = [stats(2, 2, 0), stats(2, 0, 0), stats(1, 0, 1), stats(1, 0, 0), stats(0, 0, 1)];
    let decisions = [one, None, None, None, None];
    let run = |recovery| {
        simulate_under(&profile, &series, T, &decisions, PRICES, MigrationMode::Live, recovery).unwrap()
    };
    let slow = run(SLOW_WRITE);
    let trained = slow.intervals[0].samples;
    assert!(trained > 0.0);
    // The write (150 s) has not landed at the first boundary after the pause:
    // the holder's loss rolls back what was trained.
    assert_eq!(slow.intervals[1].lost_samples, 0.0);
    assert!(close(slow.intervals[2].lost_samples, 0.5 * trained), "{}", slow.intervals[2].lost_samples);
    assert!(close(slow.intervals[2].samples, -0.5 * trained));
    // The second boundary loses nobody; after it the write has landed, and the
    // last instance's loss costs nothing.
    assert_eq!(slow.intervals[3].lost_samples, 0.0);
    assert_eq!(slow.intervals[4].lost_samples, 0.0);
    // Written within the interval (or without a write rate, as before the
    // rule, or within a notice long enough for the write): nothing is lost.
    for covered in [
        Recovery { preemption_notice_ms: 0.0, checkpoint_write_bytes_per_ms: 1.0 },
        Recovery::UNANNOUNCED,
        Recovery { preemption_notice_ms: 150_000.0, ..SLOW_WRITE },
    ] {
        assert_eq!(run(covered).totals.lost_samples, 0.0, "{covered:?}");
    }
    // Resuming at the exposed boundary still loses there, and ends the exposure:
    // the next interval's loss is the running layout's only.
    let resumed = [one, None, one, one];
    let series = [stats(2, 2, 0), stats(2, 0, 0), stats(2, 1, 1), stats(2, 1, 1)];
    let run =
        simulate_under(&profile, &series, T, &resumed, PRICES, MigrationMode::Live, SLOW_WRITE).unwrap();
    assert!(close(run.intervals[2].lost_samples, 0.5 * trained), "{}", run.intervals[2].lost_samples);
    assert_eq!(run.intervals[2].p_lost_work, 0.5);
    assert_eq!(run.intervals[3].p_lost_work, 0.5);
}

#[test]
fn a_plan_from_a_parked_pause_charges_its_holders_as_the_simulator_does() {
    let profile = toy(5000.0, 600_000.0);
    let one = Some(ParallelConfig::new(1, 1));
    let series = [stats(2, 2, 0), stats(2, 0, 0), stats(1, 0, 1), stats(2, 1, 0), stats(2, 0, 0)];
    let mut sim = Simulator::with_recovery(&profile, T, MigrationMode::Live, SLOW_WRITE).unwrap();
    sim.step(series[0], one).unwrap();
    sim.step(series[1], None).unwrap();
    assert_eq!(sim.parked(), Some(ParkedPause { layout: ParallelConfig::new(1, 1), boundaries_left: 2 }));
    // Plan the rest from where the simulator is, as a receding-horizon planner does.
    let steps = plan_steps(&series);
    let plan_rest = |parked| {
        let options = PlanOptions { at_risk: Some(sim.at_risk()), parked, ..oracle_options(SLOW_WRITE) };
        let cache = &mut TransitionCache::default();
        plan::best_plan_with(&profile, sim.current(), sim.carried_ms(), &steps[2..], T, options, cache)
            .unwrap()
    };
    let planned = plan_rest(sim.parked());
    let value: f64 = planned.iter().map(|p| p.expected_samples).sum();
    let told_nothing: f64 = plan_rest(None).iter().map(|p| p.expected_samples).sum();
    let mut scored = 0.0;
    for (s, p) in series[2..].iter().zip(&planned) {
        scored += sim.step(*s, p.config).unwrap().samples;
    }
    assert!(close(value, scored), "planner {value}, simulator {scored}");
    // Told nothing of the write, the planner values the same boundaries as safe.
    assert!(told_nothing > value + 1.0, "{told_nothing} against {value}");
}

/// A tiny deterministic generator, so the random cases are the same every run.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u32) -> u32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) % u64::from(n)) as u32
    }
}

/// A random series on at most 3 instances: each interval some of those alive
/// go and some arrive.
fn random_series(rng: &mut Lcg, len: usize) -> Vec<IntervalStats> {
    let mut alive = 0u32;
    (0..len)
        .map(|_| {
            let preempted = rng.below(alive + 1);
            let arrived = rng.below(3 - (alive - preempted) + 1);
            alive = alive - preempted + arrived;
            stats(alive, arrived, preempted)
        })
        .collect()
}

/// The most samples any decision sequence trains on `series`, by scoring
/// every one that fits.
fn best_of_every_sequence(profile: &ModelProfile, series: &[IntervalStats], recovery: Recovery) -> f64 {
    best_of_every_sequence_by(profile, series, |decisions| {
        simulate_under(profile, series, T, decisions, PRICES, MigrationMode::Live, recovery)
            .unwrap()
            .totals
            .samples
    })
}

/// The most `score` gives any decision sequence of `profile`'s layouts that
/// fits `series`.
fn best_of_every_sequence_by(
    profile: &ModelProfile,
    series: &[IntervalStats],
    score: impl Fn(&[Option<ParallelConfig>]) -> f64,
) -> f64 {
    let choices: Vec<Option<ParallelConfig>> =
        std::iter::once(None).chain(profile.configs.iter().map(|c| Some(c.config))).collect();
    let mut best = f64::NEG_INFINITY;
    let total = choices.len().pow(series.len() as u32);
    for code in 0..total {
        let mut rest = code;
        let decisions: Vec<Option<ParallelConfig>> = series
            .iter()
            .map(|_| {
                let c = choices[rest % choices.len()];
                rest /= choices.len();
                c
            })
            .collect();
        let fits = decisions
            .iter()
            .zip(series)
            .all(|(d, s)| d.is_none_or(|c| c.instances() <= u64::from(s.instances)));
        if fits {
            best = best.max(score(&decisions));
        }
    }
    best
}

#[test]
fn the_oracle_is_the_best_sequence_under_the_rule() {
    // A checkpoint every 10 minutes: a rollback is worth 5 minutes of training,
    // more than an interval trains, so the rule binds for several intervals
    // after each start or rollback.
    let profile = toy(5000.0, 600_000.0);
    let mut rng = Lcg(16);
    let mut rolled_back = 0;
    for case in 0..40 {
        let series = random_series(&mut rng, 5);
        for recovery in [Recovery::UNANNOUNCED, Recovery::with_notice(30_000.0, 1.0), SLOW_WRITE] {
            let oracle = oracle_under(&profile, &series, T, recovery).unwrap();
            let scored = simulate_under(&profile, &series, T, &oracle, PRICES, MigrationMode::Live, recovery)
                .unwrap()
                .totals;
            let best = best_of_every_sequence(&profile, &series, recovery);
            assert!(
                close(scored.samples, best),
                "case {case} {series:?}: oracle {} < best {best}",
                scored.samples
            );
            // The planner's own value is the simulator's.
            let options = oracle_options(recovery);
            let planned = plan::best_plan_with(
                &profile,
                None,
                0.0,
                &plan_steps(&series),
                T,
                options,
                &mut TransitionCache::default(),
            )
            .unwrap();
            let value: f64 = planned.iter().map(|p| p.expected_samples).sum();
            assert!(
                close(value, scored.samples),
                "case {case}: planner {value}, simulator {}",
                scored.samples
            );
            if scored.lost_samples > 0.0 {
                rolled_back += 1;
            }
        }
    }
    // The random cases do exercise rollbacks.
    assert!(rolled_back >= 5, "only {rolled_back} cases roll back");
}

/// The Oracle without pauses ([`oracle_without_pauses`]) is the best of the
/// decision sequences that pause only where no layout fits, as the simulator
/// scores them: the reference that knows the counts but cannot stop just
/// before an unannounced loss. It never scores more than the Oracle, and the
/// random cases include some where the Oracle gains by pausing while a
/// layout fits.
#[test]
fn the_oracle_without_pauses_is_the_best_sequence_that_pauses_only_where_nothing_fits() {
    let profile = toy(5000.0, 600_000.0);
    let smallest = profile.configs.iter().map(|c| c.config.instances()).min().unwrap();
    let mut rng = Lcg(23);
    let mut oracle_gained = 0;
    for case in 0..40 {
        let series = random_series(&mut rng, 5);
        for recovery in [Recovery::UNANNOUNCED, SLOW_WRITE] {
            let cadenced = Cadenced::new(CadenceRule::SeenSoFar, &profile, &series, T, &recovery, None);
            let score = |decisions: &[Option<ParallelConfig>]| {
                simulate_cadenced(&cadenced, &series, T, decisions, PRICES, MigrationMode::Live, recovery)
                    .unwrap()
                    .totals
                    .samples
            };
            let pauses_by_choice = |decisions: &[Option<ParallelConfig>]| {
                decisions.iter().zip(&series).any(|(d, s)| d.is_none() && u64::from(s.instances) >= smallest)
            };
            let best = best_of_every_sequence_by(&profile, &series, |decisions| {
                if pauses_by_choice(decisions) { f64::NEG_INFINITY } else { score(decisions) }
            });
            let without = oracle_without_pauses(&cadenced, &series, T, recovery).unwrap();
            assert!(
                !pauses_by_choice(&without),
                "case {case} {series:?}: {without:?} pauses while a layout fits"
            );
            assert!(
                close(score(&without), best),
                "case {case} {series:?}: {} < best {best}",
                score(&without)
            );
            let oracle = score(&oracle_cadenced(&cadenced, &series, T, recovery).unwrap());
            assert!(oracle >= best - 1e-6, "case {case} {series:?}: the Oracle {oracle} < {best}");
            if oracle > best + 1e-6 {
                oracle_gained += 1;
            }
        }
    }
    // Some cases do show the Oracle gaining by stopping early.
    assert!(oracle_gained >= 3, "the Oracle gained by a pause in only {oracle_gained} cases");
}

/// A checkpoint cadence that follows the losses seen so far gives every
/// interval its own profile (shorter rollbacks, a share of the throughput for
/// the checkpoints): the Oracle planned over those profiles is still the best
/// of every decision sequence, as the simulator scores them.
#[test]
fn the_oracle_is_the_best_sequence_when_the_cadence_follows_the_losses() {
    let profile = toy(5000.0, 600_000.0);
    // Writes of 10 s, taken synchronously: each loss seen shortens the cadence.
    let recovery = Recovery { preemption_notice_ms: 0.0, checkpoint_write_bytes_per_ms: 0.1 };
    let mut rng = Lcg(61);
    let (mut varied, mut moved) = (0, 0);
    for case in 0..40 {
        let series = random_series(&mut rng, 5);
        let cadenced = Cadenced::new(CadenceRule::SeenSoFar, &profile, &series, T, &recovery, None);
        let best = best_of_every_sequence_by(&profile, &series, |decisions| {
            let run =
                simulate_cadenced(&cadenced, &series, T, decisions, PRICES, MigrationMode::Live, recovery);
            run.unwrap().totals.samples
        });
        let oracle = oracle_cadenced(&cadenced, &series, T, recovery).unwrap();
        let scored =
            simulate_cadenced(&cadenced, &series, T, &oracle, PRICES, MigrationMode::Live, recovery).unwrap();
        assert!(
            close(scored.totals.samples, best),
            "case {case} {series:?}: oracle {} < best {best}",
            scored.totals.samples
        );
        if !cadenced.is_constant() {
            varied += 1;
            let at_profile =
                simulate_under(&profile, &series, T, &oracle, PRICES, MigrationMode::Live, recovery).unwrap();
            if !close(at_profile.totals.samples, scored.totals.samples) {
                moved += 1;
            }
        }
    }
    // The cases do change cadence, and the cadence changes what they train.
    assert!(varied >= 10 && moved >= 5, "{varied} cases vary the cadence, {moved} score differently");
}

/// On traces too long to try every sequence, the Oracle planned under the
/// work-at-risk rule still scores at least what liveput with the true future
/// and reactive score. Under the rule a front's pairs are not in order of
/// value (a later pair may be worth less and risk less); the planner once read
/// a predecessor's last pair as its most valuable when it skipped
/// predecessors that could not win, and on such traces dropped the better
/// path (liveput with the true future beat the Oracle by up to 2%).
#[test]
fn the_oracle_beats_the_rows_on_long_traces_under_the_work_at_risk_rule() {
    use parcae_sim::{liveput_truth_cadenced, oracle_cadenced, simulate_cadenced};
    let profile = toy(5000.0, 600_000.0);
    let mut rng = Lcg(2024);
    let mut compared = 0;
    for recovery in
        [Recovery::UNANNOUNCED, Recovery { preemption_notice_ms: 0.0, checkpoint_write_bytes_per_ms: 0.1 }]
    {
        for case in 0..60 {
            let series = random_series(&mut rng, 30);
            for rule in [CadenceRule::SeenSoFar, CadenceRule::WholeTrace] {
                let cadenced = Cadenced::new(rule, &profile, &series, T, &recovery, None);
                let score = |decisions: &[Option<ParallelConfig>]| {
                    simulate_cadenced(&cadenced, &series, T, decisions, PRICES, MigrationMode::Live, recovery)
                        .unwrap()
                        .totals
                        .samples
                };
                let best = score(&oracle_cadenced(&cadenced, &series, T, recovery).unwrap());
                let truth = liveput_truth_cadenced(&cadenced, &series, T, 4, recovery).unwrap();
                for (name, decisions) in
                    [("liveput-truth", truth), ("reactive", reactive(cadenced.base(), &series))]
                {
                    let samples = score(&decisions);
                    assert!(
                        samples <= best + 1e-9 * best.abs().max(1.0),
                        "case {case} {rule:?} {series:?}: {name} {samples} > oracle {best}"
                    );
                    compared += 1;
                }
            }
        }
    }
    assert_eq!(compared, 480);
}

/// The default policy plans the real job from its work at risk: the guard
/// carries it from the intervals it scores exactly as the simulator does
/// (entering each interval, the same number), so a cold start or a likely
/// rollback is planned as the simulator will score it.
#[test]
fn the_default_carries_the_real_jobs_work_at_risk_as_the_simulator_does() {
    use parcae_policy_core::guard::GuardedLiveput;
    use parcae_policy_core::{OptimizeRequest, Optimizer, PredictRequest, Predictor};
    let profile = toy(5000.0, 600_000.0);
    let mut rng = Lcg(7);
    let mut below_ceiling = 0;
    for case in 0..6 {
        let series = random_series(&mut rng, 80);
        let mut guard = GuardedLiveput::default();
        let mut sim =
            Simulator::with_recovery(&profile, T, MigrationMode::Live, Recovery::UNANNOUNCED).unwrap();
        let mut current = None;
        for (k, observed) in series.iter().enumerate() {
            let predict = PredictRequest {
                history_by_type: Vec::new(),
                history: series[..=k].to_vec(),
                horizon: 3,
                interval_ms: T,
                fleet_min: 0,
                fleet_max: 3,
            };
            let mut forecast = vec![*observed];
            forecast.extend(guard.predict(&predict).unwrap());
            let plan = guard
                .optimize(&OptimizeRequest {
                    instances_now_by_type: Vec::new(),
                    forecast,
                    instances_now: observed.instances,
                    current,
                    interval_ms: T,
                    profile: profile.clone(),
                    recovery: Recovery::UNANNOUNCED,
                })
                .unwrap();
            let (carried, simulated) = (guard.real_at_risk(), sim.at_risk());
            assert!(
                close(carried, simulated),
                "case {case} interval {k}: guard {carried}, simulator {simulated}"
            );
            if simulated < parcae_policy_core::at_risk::ceiling(&profile) {
                below_ceiling += 1;
            }
            current = plan
                .steps
                .first()
                .and_then(|s| s.config)
                .filter(|c| c.instances() <= u64::from(observed.instances));
            sim.step(*observed, current).unwrap();
        }
    }
    // The series do start, pause and roll back often enough to leave the ceiling.
    assert!(below_ceiling > 50, "only {below_ceiling} intervals below the ceiling");
}
