//! Behavioural tests of the serving simulator: exact service latency and
//! billing on a calm fleet, queueing under and over capacity, token-level
//! recovery against restart and reroute under preemptions, request
//! conservation over random fleets, and the fallback for a failing policy.

use parcae_serve_sim::{
    Fleet, LightLoad, Recovery, ServeOutcome, ServeSetup, ServeSimError, SharedMachine, gamma_arrivals,
    simulate, simulate_on_demand,
};
use parcae_serving_core::{
    ServePlan, ServeRequest, ServingConfig, ServingOptimizer, ServingProfile, SpotServe, Workload, estimate,
};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const WORK: Workload = Workload { input_tokens: 512, output_tokens: 64 };
const MINUTE: u64 = 60_000;

/// The small synthetic profile of serving-core's tests: 8 layers, 4 GPUs per
/// instance, 4 GB of weights (one tp-4 replica per instance).
fn profile() -> ServingProfile {
    parcae_serving_core::toy_profile()
}

fn setup() -> ServeSetup {
    ServeSetup {
        profile: profile(),
        workload: WORK,
        latency_slo_ms: 2_000.0,
        horizon: 3,
        spot_price_per_hour: 1.5,
        on_demand_price_per_hour: 4.0,
        machine: SharedMachine::default(),
    }
}

fn config(dp: u32, tp: u32, pp: u32, b: u32) -> ServingConfig {
    ServingConfig {
        data_parallel: dp,
        tensor_parallel: tp,
        pipeline_stages: pp,
        batch_size: b,
        prefill_micro_batches: 1,
        decode_micro_batches: 1,
    }
}

/// A fleet from instance counts: rises are arrivals, falls preemptions.
fn fleet(counts: &[u32], notice_ms: f64) -> Fleet {
    let mut previous = 0;
    let (mut arrivals, mut preemptions) = (Vec::new(), Vec::new());
    for &n in counts {
        arrivals.push(n.saturating_sub(previous));
        preemptions.push(previous.saturating_sub(n));
        previous = n;
    }
    Fleet { instances: counts.to_vec(), preemptions, arrivals, interval_ms: MINUTE, notice_ms }
}

fn fixed(c: ServingConfig) -> impl FnMut(&ServeRequest) -> Result<ServePlan, String> {
    move |r: &ServeRequest| Ok(ServePlan { configs: vec![Some(c); r.instances.len()] })
}

fn spotserve(
    setup: &ServeSetup,
    fleet: &Fleet,
    arrivals: &[f64],
    recovery: Recovery,
) -> Result<ServeOutcome, ServeSimError> {
    let mut native = SpotServe::default();
    simulate(setup, fleet, arrivals, recovery, &mut |r| native.configure(r))
}

/// Invariants every outcome keeps.
fn check_invariants(o: &ServeOutcome, arrivals: &[f64], fleet: &Fleet, setup: &ServeSetup) {
    let s = &o.summary;
    let end = fleet.instances.len() as f64 * fleet.interval_ms as f64;
    assert_eq!(s.requests, arrivals.len());
    assert_eq!(o.requests.len(), arrivals.len());
    assert_eq!(s.completed + s.dropped, s.requests, "every request completes or is dropped");
    assert_eq!(s.completed, o.requests.iter().filter(|r| r.done_ms.is_some()).count());
    assert_eq!(s.requeued, o.requests.iter().filter(|r| r.restarts > 0).count());
    assert_eq!(s.migrated, o.requests.iter().filter(|r| r.migrations > 0).count());
    assert_eq!(s.tokens, s.completed as u64 * u64::from(setup.workload.output_tokens));
    for (r, &a) in o.requests.iter().zip(arrivals) {
        assert_eq!(r.arrival_ms, a);
        if let Some(done) = r.done_ms {
            let first = r.first_token_ms.expect("a completed request had a first token");
            assert!(a <= first && first <= done && done <= end, "{r:?}");
        }
    }
    assert_eq!(o.intervals.len(), fleet.instances.len());
    for (k, i) in o.intervals.iter().enumerate() {
        assert_eq!(i.instances_available, fleet.instances[k]);
        assert!(i.instances_used <= i.instances_available, "interval {k}: {i:?}");
        assert!(i.paused_ms >= 0.0 && i.paused_ms <= fleet.interval_ms as f64);
        if let Some(c) = i.config {
            // Equal unless survivors fragment the instances (then more are occupied).
            assert!(i.instances_used >= c.instances(setup.profile.gpus_per_instance), "interval {k}: {c}");
        } else {
            assert_eq!(i.instances_used, 0);
        }
    }
    let hours: f64 = o.intervals.iter().map(|i| f64::from(i.instances_used)).sum::<f64>()
        * fleet.interval_ms as f64
        / 3_600_000.0;
    assert!((s.instance_hours - hours).abs() < 1e-9);
    assert!((s.cost_usd - hours * setup.spot_price_per_hour).abs() < 1e-9);
}

/// Test 1: no preemptions, arrivals spaced beyond the service time after the
/// cold start: every request completes in exactly the model's latency, and
/// billing is the used instances x time.
#[test]
fn calm_fleet_serves_at_the_model_latency_and_bills_exactly() {
    let setup = setup();
    let fleet = fleet(&[3; 10], 0.0);
    let c = config(2, 4, 1, 1);
    let e = estimate(&setup.profile, &c, &WORK).unwrap();
    let arrivals: Vec<f64> = (60..600).map(|s| f64::from(s) * 1000.0).collect();
    let o = simulate(&setup, &fleet, &arrivals, Recovery::TokenLevel, &mut fixed(c)).unwrap();
    check_invariants(&o, &arrivals, &fleet, &setup);
    let s = &o.summary;
    assert_eq!(s.completed, arrivals.len());
    assert_eq!((s.dropped, s.requeued, s.migrated, s.reconfigurations), (0, 0, 0, 0));
    for p in [s.p50_ms, s.p90_ms, s.p99_ms, s.mean_ms] {
        assert!((p - e.latency_ms).abs() < 1e-6, "{p} vs {}", e.latency_ms);
    }
    for r in &o.requests {
        assert!((r.first_token_ms.unwrap() - r.arrival_ms - e.prefill_ms).abs() < 1e-6);
    }
    assert_eq!(s.slo_attainment, 1.0);
    // Two instances of three for ten minutes.
    assert!((s.instance_hours - 2.0 * 10.0 / 60.0).abs() < 1e-12);
    assert!((s.cost_usd - s.instance_hours * 1.5).abs() < 1e-12);
    assert!((s.cost_on_demand_usd - s.instance_hours * 4.0).abs() < 1e-12);
    assert_eq!(s.tokens, 540 * 64);
    assert!((s.usd_per_1k_tokens - s.cost_usd / (540.0 * 64.0 / 1000.0)).abs() < 1e-12);
    // The cold start: instances start (20 s), load 4 GB at 500 MB/s (8 s), reinit (1 s).
    assert!((o.intervals[0].paused_ms - 29_000.0).abs() < 1e-6, "{}", o.intervals[0].paused_ms);
    assert!(o.intervals[1..].iter().all(|i| i.paused_ms == 0.0 && i.config == Some(c)));
}

/// Pairs of requests far apart (every 60 s) on two replicas of batch 1, the second of each
/// arriving halfway through the first: the outcome, the latency of a request alone, the
/// fleet, the arrivals and the configuration.
fn overlapping_pairs(setup: &ServeSetup) -> (ServeOutcome, f64, Fleet, Vec<f64>, ServingConfig) {
    let fleet = fleet(&[3; 10], 0.0);
    let c = config(2, 4, 1, 1);
    let l = estimate(&setup.profile, &c, &WORK).unwrap().latency_ms;
    let arrivals: Vec<f64> =
        (1..9).flat_map(|m| [f64::from(m) * 60_000.0, f64::from(m) * 60_000.0 + l / 2.0]).collect();
    let o = simulate(setup, &fleet, &arrivals, Recovery::TokenLevel, &mut fixed(c)).unwrap();
    check_invariants(&o, &arrivals, &fleet, setup);
    (o, l, fleet, arrivals, c)
}

/// Replicas that share a machine's cores run at the pace of the replicas busy at each
/// moment: a request alone for the first half of its work and then beside another runs the
/// rest 1.5 times slower; the one that joined halfway finishes its last half alone.
#[test]
fn contending_replicas_run_at_the_pace_of_the_replicas_busy() {
    let setup = ServeSetup { machine: table(vec![1.0, 1.5]), ..setup() };
    let (o, l, fleet, arrivals, c) = overlapping_pairs(&setup);
    for pair in o.requests.chunks(2) {
        // First: l/2 alone, then l/2 of work at 1.5x. Second: 0.75 l beside the first (l/2 of
        // work), then l/2 alone.
        for r in pair {
            let latency = r.latency_ms().unwrap();
            assert!((latency - 1.25 * l).abs() < 1e-6, "{latency} vs 1.25 x {l}");
        }
    }
    // Without a table nothing slows; past the table the last step repeats.
    let calm = simulate(
        &ServeSetup { machine: SharedMachine::default(), ..setup.clone() },
        &fleet,
        &arrivals,
        Recovery::TokenLevel,
        &mut fixed(c),
    )
    .unwrap();
    assert!(calm.requests.iter().all(|r| (r.latency_ms().unwrap() - l).abs() < 1e-6));
    assert!((setup.machine.slowdown(4, 1, false) - 2.5).abs() < 1e-12);
    assert_eq!(SharedMachine::default().slowdown(7, 3, true), 1.0);
}

/// One contention table for every batch size.
fn table(slowdown_by_busy_replicas: Vec<f64>) -> SharedMachine {
    SharedMachine { slowdown_by_busy_replicas, ..SharedMachine::default() }
}

/// Per-batch tables: a batch takes its own size's table, interpolates between measured
/// sizes and takes the nearest outside them; the single table is used only without them.
#[test]
fn contention_follows_the_batch_size() {
    let machine = SharedMachine {
        slowdown_by_busy_replicas: vec![1.0, 9.0],
        slowdown_by_batch: vec![(1, vec![1.0, 1.6, 2.2]), (4, vec![1.0, 1.3])],
        light_load: LightLoad::default(),
        lockstep: false,
    };
    assert_eq!(machine.slowdown(2, 1, false), 1.6);
    assert!((machine.slowdown(2, 2, false) - (1.6 + (1.3 - 1.6) / 3.0)).abs() < 1e-12);
    assert_eq!(machine.slowdown(2, 8, false), 1.3);
    assert!((machine.slowdown(3, 4, false) - 1.6).abs() < 1e-12, "the last step repeats");
    assert_eq!(machine.slowdown(1, 3, false), 1.0);
    assert_eq!(table(vec![1.0, 9.0]).slowdown(2, 4, false), 9.0);
    // A batch started with nobody waiting takes the light table, then the saturated
    // table's steps from its last entry.
    let light = SharedMachine {
        light_load: LightLoad { slowdown_by_busy_replicas: vec![1.0, 2.0], ..LightLoad::default() },
        ..machine.clone()
    };
    assert_eq!(light.slowdown(2, 1, true), 2.0);
    assert!((light.slowdown(3, 1, true) - 2.0 * 2.2 / 1.6).abs() < 1e-12);
    assert_eq!(light.slowdown(2, 1, false), 1.6);
    assert_eq!(machine.slowdown(2, 1, true), 1.6, "no light table: the saturated one");
    // A light table alone is contention too: the overlapping pairs below, each started with
    // nobody waiting, slow by it (1.25 l for both, as with a saturated table of 1.5).
    let light_only = SharedMachine {
        light_load: LightLoad { slowdown_by_busy_replicas: vec![1.0, 1.5], ..LightLoad::default() },
        ..SharedMachine::default()
    };
    let (o, l, ..) = overlapping_pairs(&ServeSetup { machine: light_only, ..setup() });
    assert!(o.requests.iter().all(|r| (r.latency_ms().unwrap() - 1.25 * l).abs() < 1e-6));

    // In the simulator: the overlapping pairs of the test above, at batch size 1, slow by
    // the batch-1 table's 1.6 (not the single table's 9).
    let (o, l, ..) = overlapping_pairs(&ServeSetup { machine, ..setup() });
    for r in &o.requests {
        // l/2 alone and l/2 of work at 1.6x (first), or the mirror image (second).
        let latency = r.latency_ms().unwrap();
        assert!((latency - 1.3 * l).abs() < 1e-6, "{latency} vs 1.3 x {l}");
    }
}

/// A lock-step engine: the replica already computing waits out the newcomer's prefill
/// (that iteration lasts the prefill, not its own step); the newcomer is not slowed.
#[test]
fn in_lock_step_a_prefill_holds_up_the_other_replicas() {
    let setup =
        ServeSetup { machine: SharedMachine { lockstep: true, ..SharedMachine::default() }, ..setup() };
    let c = config(2, 4, 1, 1);
    let est = estimate(&setup.profile, &c, &WORK).unwrap();
    let (o, l, ..) = overlapping_pairs(&setup);
    for pair in o.requests.chunks(2) {
        let (first, second) = (pair[0].latency_ms().unwrap(), pair[1].latency_ms().unwrap());
        let held = l + est.prefill_ms - est.decode_step_ms;
        assert!((first - held).abs() < 1e-6, "{first} vs {held}");
        assert!((second - l).abs() < 1e-6, "{second} vs {l}");
    }
}

/// An engine that is not saturated pays the light-load extras on every iteration of a
/// batch started with nobody waiting; batches that leave requests queued do not.
#[test]
fn a_light_engine_pays_to_wake_and_a_saturated_one_does_not() {
    let light =
        LightLoad { prefill_extra_ms: 3.0, decode_extra_ms: 0.5, slowdown_by_busy_replicas: Vec::new() };
    let setup = ServeSetup {
        machine: SharedMachine { light_load: light.clone(), ..SharedMachine::default() },
        ..setup()
    };
    let fleet = fleet(&[1; 10], 0.0);
    let c = config(1, 4, 1, 1);
    let est = estimate(&setup.profile, &c, &WORK).unwrap();
    let steps = f64::from(WORK.output_tokens - 1);
    // Alone: each request far from the last.
    let alone: Vec<f64> = (1..9).map(|m| f64::from(m) * 60_000.0).collect();
    let o = simulate(&setup, &fleet, &alone, Recovery::TokenLevel, &mut fixed(c)).unwrap();
    check_invariants(&o, &alone, &fleet, &setup);
    let woken = est.latency_ms + light.prefill_extra_ms + steps * light.decode_extra_ms;
    for r in &o.requests {
        assert!((r.latency_ms().unwrap() - woken).abs() < 1e-6, "{:?} vs {woken}", r.latency_ms());
    }
    // Three in quick succession on one replica of batch 1: the first starts with nobody
    // waiting (extra), the second when the first ends with one still waiting (no extra),
    // the third with nobody waiting (extra).
    let burst = [60_000.0, 60_001.0, 60_002.0];
    let o = simulate(&setup, &fleet, &burst, Recovery::TokenLevel, &mut fixed(c)).unwrap();
    check_invariants(&o, &burst, &fleet, &setup);
    let done: Vec<f64> = o.requests.iter().map(|r| r.done_ms.unwrap() - 60_000.0).collect();
    let (l, x) = (est.latency_ms, woken - est.latency_ms);
    for (got, want) in done.iter().zip([l + x, 2.0 * l + x, 3.0 * l + 2.0 * x]) {
        assert!((got - want).abs() < 1e-6, "{done:?}");
    }
}

/// Test 2: over capacity the queue grows and latencies rise with time, and
/// the deployment completes requests at its modelled throughput; under
/// capacity latencies stay bounded.
#[test]
fn queues_grow_over_capacity_and_stay_bounded_under_it() {
    let setup = setup();
    let fleet = fleet(&[2; 20], 0.0);
    let c = config(2, 4, 1, 2);
    let e = estimate(&setup.profile, &c, &WORK).unwrap();
    let capacity = e.requests_per_second;

    let over = gamma_arrivals(1.5 * capacity, 1.0, 20.0 * 60_000.0, 11).unwrap();
    let o = simulate(&setup, &fleet, &over, Recovery::TokenLevel, &mut fixed(c)).unwrap();
    check_invariants(&o, &over, &fleet, &setup);
    let queue: Vec<usize> = o.intervals.iter().map(|i| i.queue_len).collect();
    assert!(queue[19] > queue[10] && queue[10] > queue[5], "{queue:?}");
    let latency_of = |from: f64, to: f64| {
        let l: Vec<f64> = o
            .requests
            .iter()
            .filter(|r| r.arrival_ms >= from && r.arrival_ms < to)
            .filter_map(|r| r.latency_ms())
            .collect();
        l.iter().sum::<f64>() / l.len() as f64
    };
    assert!(latency_of(600_000.0, 660_000.0) > 2.0 * latency_of(120_000.0, 180_000.0));
    assert!(o.summary.dropped > 0);
    // Saturated from minute 2 on: full batches back to back on both replicas.
    let done = o.requests.iter().filter_map(|r| r.done_ms).filter(|&d| d >= 300_000.0).count() as f64;
    let expected = capacity * 900.0;
    assert!((done - expected).abs() < 0.01 * expected, "{done} completions vs {expected}");

    let under = gamma_arrivals(0.4 * capacity, 1.0, 20.0 * 60_000.0, 12).unwrap();
    let o = simulate(&setup, &fleet, &under, Recovery::TokenLevel, &mut fixed(c)).unwrap();
    check_invariants(&o, &under, &fleet, &setup);
    let late: Vec<f64> =
        o.requests.iter().filter(|r| r.arrival_ms >= 120_000.0).filter_map(|r| r.latency_ms()).collect();
    let worst = late.iter().copied().fold(0.0, f64::max);
    assert!(worst < 15.0 * e.latency_ms, "worst {worst} ms, service {} ms", e.latency_ms);
    assert!(o.summary.dropped <= 3, "only requests still in service at the end: {}", o.summary.dropped);
    let queue: Vec<usize> = o.intervals.iter().skip(2).map(|i| i.queue_len).collect();
    assert!(queue.iter().all(|&q| q < 20), "{queue:?}");
}

/// A fleet with several preemptions and arrivals, every instance in use.
fn stormy() -> Vec<u32> {
    vec![6, 6, 6, 6, 4, 4, 6, 6, 5, 6, 6, 4, 4, 5, 6]
}

/// Test 3: with a 120 s notice token-level recovery loses no work and
/// migrates requests; without a notice it restarts some; restart recovery
/// loses more and has a higher tail; reroute keeps its first shape.
#[test]
fn token_level_migrates_with_notice_and_beats_restart() {
    let setup = setup();
    let counts = stormy();
    let duration = counts.len() as f64 * 60_000.0;
    // From minute 1 on, after the cold start, so the tail is the preemptions'.
    let arrivals: Vec<f64> =
        gamma_arrivals(14.0, 1.0, duration, 5).unwrap().into_iter().filter(|&t| t >= 60_000.0).collect();

    let warned = fleet(&counts, 120_000.0);
    let token = spotserve(&setup, &warned, &arrivals, Recovery::TokenLevel).unwrap();
    check_invariants(&token, &arrivals, &warned, &setup);
    assert_eq!(token.summary.requeued, 0, "no request loses progress with a notice");
    assert!(token.requests.iter().all(|r| r.restarts == 0));
    assert!(token.summary.migrated > 0, "preempted replicas' requests move with their KV cache");
    assert!(token.summary.reconfigurations >= 5);

    let unannounced = fleet(&counts, 0.0);
    let cold = spotserve(&setup, &unannounced, &arrivals, Recovery::TokenLevel).unwrap();
    check_invariants(&cold, &arrivals, &unannounced, &setup);
    assert!(cold.summary.requeued > 0, "in-flight requests of preempted replicas restart");
    assert_eq!(cold.summary.migrated, 0);

    let restart = spotserve(&setup, &warned, &arrivals, Recovery::Restart).unwrap();
    check_invariants(&restart, &arrivals, &warned, &setup);

    assert!(restart.summary.requeued > cold.summary.requeued, "every change recomputes all in flight");
    assert!(restart.summary.p99_ms > token.summary.p99_ms);
    assert!(restart.summary.paused_ms > token.summary.paused_ms);
    assert!(
        restart.summary.p99_ms > 2.0 * token.summary.p99_ms,
        "{} vs {}",
        restart.summary.p99_ms,
        token.summary.p99_ms
    );

    let reroute = spotserve(&setup, &warned, &arrivals, Recovery::Reroute).unwrap();
    check_invariants(&reroute, &arrivals, &warned, &setup);
    let first = reroute.intervals.iter().find_map(|i| i.config).unwrap();
    for (i, n) in reroute.intervals.iter().zip(&counts) {
        let c = i.config.unwrap();
        assert_eq!(ServingConfig { data_parallel: first.data_parallel, ..c }, first, "the shape is fixed");
        assert_eq!(c.data_parallel, n * 4 / c.gpus_per_replica(), "as many replicas as the GPUs hold");
    }
    assert!(reroute.summary.requeued > 0 && reroute.summary.migrated == 0);
}

/// Reroute ignores later decisions: a policy that changes its mind every
/// interval still gets its first shape.
#[test]
fn reroute_keeps_the_first_shape_whatever_the_policy_says() {
    let setup = setup();
    let fleet = fleet(&[4, 4, 3, 4, 4, 2], 0.0);
    let arrivals = gamma_arrivals(5.0, 1.0, 360_000.0, 2).unwrap();
    let mut k = 0;
    let mut flip = |r: &ServeRequest| {
        k += 1;
        let c = if k % 2 == 1 { config(1, 2, 2, 1) } else { config(1, 4, 1, 4) };
        Ok(ServePlan { configs: vec![Some(c); r.instances.len()] })
    };
    let o = simulate(&setup, &fleet, &arrivals, Recovery::Reroute, &mut flip).unwrap();
    check_invariants(&o, &arrivals, &fleet, &setup);
    for (i, n) in o.intervals.iter().zip([4u32, 4, 3, 4, 4, 2]) {
        assert_eq!(i.config, Some(config(n * 4 / 4, 2, 2, 1)));
    }
    assert_eq!(o.policy_errors, 0);
}

/// A shape change under token-level recovery pauses the deployment for the
/// weights an instance lacks (plus the interrupted requests' KV cache and the
/// reinit) but keeps every request's tokens.
#[test]
fn token_level_shape_changes_pause_for_missing_weights_but_keep_tokens() {
    let setup = setup();
    let fleet = fleet(&[2; 9], 0.0);
    let arrivals = gamma_arrivals(6.0, 1.0, 9.0 * 60_000.0, 3).unwrap();
    // Odd decisions: one replica over both instances (each holds half the
    // layers); even: a replica per instance (each needs every layer).
    let alternate = || {
        let mut k = 0;
        move |r: &ServeRequest| {
            k += 1;
            let c = if k % 2 == 1 { config(1, 4, 2, 2) } else { config(2, 4, 1, 2) };
            Ok(ServePlan { configs: vec![Some(c); r.instances.len()] })
        }
    };
    let o = simulate(&setup, &fleet, &arrivals, Recovery::TokenLevel, &mut alternate()).unwrap();
    check_invariants(&o, &arrivals, &fleet, &setup);
    assert_eq!(o.summary.reconfigurations, 8);
    assert_eq!(o.summary.requeued, 0, "interrupted requests keep their tokens");
    assert!(o.summary.migrated > 0);
    // At most 4 interrupted requests' KV cache (576 tokens x 100 kB) over 2
    // instances at 1 MB/ms, plus waiting for a prefill under way to end.
    let slack = 4.0 * 576.0 * 100_000.0 / 2.0 / 1_000_000.0 + 100.0;
    for (k, i) in o.intervals.iter().enumerate().skip(1) {
        // To pp 1: half the model (2 GB) arrives at 1 MB/ms, then reinit.
        // To pp 2: every instance already holds its stage; only reinit.
        let base = if k % 2 == 1 { 2000.0 + 1000.0 } else { 1000.0 };
        assert!(i.paused_ms >= base && i.paused_ms <= base + slack, "interval {k}: {i:?}");
    }
    let restart = simulate(&setup, &fleet, &arrivals, Recovery::Restart, &mut alternate()).unwrap();
    check_invariants(&restart, &arrivals, &fleet, &setup);
    // Restart reloads its slices from storage: 2 or 4 GB per instance at 500 MB/s.
    for (k, i) in restart.intervals.iter().enumerate().skip(1) {
        let base = if k % 2 == 1 { 8000.0 + 1000.0 } else { 4000.0 + 1000.0 };
        assert!((i.paused_ms - base).abs() < 1e-6, "interval {k}: {i:?}");
    }
    assert!(restart.summary.requeued > 0 && restart.summary.migrated == 0);
}

/// Test 4: over random fleets, notices and modes, every request is either
/// completed or dropped, and the records are consistent.
#[test]
fn requests_are_conserved_over_random_fleets() {
    // Every other round on a shared machine (lock step, contention per batch, light load),
    // whose retimed and held-up batches must conserve requests just the same.
    let shared = SharedMachine {
        slowdown_by_busy_replicas: vec![1.0, 1.4],
        slowdown_by_batch: vec![(1, vec![1.0, 1.7, 2.5]), (4, vec![1.0, 1.2])],
        light_load: LightLoad {
            prefill_extra_ms: 2.0,
            decode_extra_ms: 0.3,
            slowdown_by_busy_replicas: vec![1.0, 1.9],
        },
        lockstep: true,
    };
    let mut rng = StdRng::seed_from_u64(42);
    for round in 0..12 {
        let setup = if round % 2 == 1 { ServeSetup { machine: shared.clone(), ..setup() } } else { setup() };
        let n = rng.random_range(4..14);
        let mut counts = Vec::with_capacity(n);
        let mut alive: u32 = rng.random_range(0..6);
        for _ in 0..n {
            counts.push(alive);
            alive = (alive as i32 + rng.random_range(-3..=3)).clamp(0, 8) as u32;
        }
        let notice = [0.0, 5_000.0, 30_000.0, 120_000.0][round % 4];
        let f = fleet(&counts, notice);
        let rate = rng.random_range(1.0..30.0);
        let arrivals =
            gamma_arrivals(rate, rng.random_range(0.3..3.0), n as f64 * 60_000.0, round as u64).unwrap();
        for recovery in [Recovery::TokenLevel, Recovery::Restart, Recovery::Reroute] {
            let o = spotserve(&setup, &f, &arrivals, recovery).unwrap();
            check_invariants(&o, &arrivals, &f, &setup);
            assert_eq!(o.policy_errors, 0, "{recovery} {counts:?}");
        }
    }
}

/// Test 6: a policy that fails or answers nonsense is replaced by SpotServe
/// for that interval and counted.
#[test]
fn failing_policies_fall_back_to_spotserve_and_are_counted() {
    let setup = setup();
    let counts = stormy();
    let f = fleet(&counts, 30_000.0);
    let arrivals = gamma_arrivals(8.0, 1.0, counts.len() as f64 * 60_000.0, 9).unwrap();
    let native = spotserve(&setup, &f, &arrivals, Recovery::TokenLevel).unwrap();
    assert_eq!(native.policy_errors, 0);

    let failing = simulate(&setup, &f, &arrivals, Recovery::TokenLevel, &mut |_| Err("boom".into())).unwrap();
    assert_eq!(failing.policy_errors, counts.len() as u32);
    assert_eq!(failing.summary, native.summary);
    assert_eq!(failing.intervals, native.intervals);

    // Wrong length, then too many instances, then unmeasured, then fine.
    let mut k = 0;
    let mut broken = |r: &ServeRequest| {
        k += 1;
        let configs = match k % 4 {
            1 => vec![],
            2 => vec![Some(config(r.instances[0] + 1, 4, 1, 1)); r.instances.len()],
            3 => vec![Some(config(1, 4, 1, 3)); r.instances.len()],
            _ => return SpotServe::default().configure(r),
        };
        Ok(ServePlan { configs })
    };
    let o = simulate(&setup, &f, &arrivals, Recovery::TokenLevel, &mut broken).unwrap();
    check_invariants(&o, &arrivals, &f, &setup);
    let bad = (1..=counts.len()).filter(|k| k % 4 != 0).count() as u32;
    assert_eq!(o.policy_errors, bad);
    assert_eq!(o.summary, native.summary, "the fallback answers like the native optimizer");
}

#[test]
fn on_demand_is_never_preempted_and_billed_on_demand() {
    let setup = setup();
    let arrivals = gamma_arrivals(8.0, 1.0, 600_000.0, 4).unwrap();
    let o = simulate_on_demand(&setup, 3, 600_000.0, &arrivals).unwrap();
    assert_eq!(o.intervals.len(), 1);
    assert_eq!((o.summary.requeued, o.summary.migrated, o.summary.reconfigurations), (0, 0, 0));
    let c = o.intervals[0].config.unwrap();
    let used = f64::from(c.instances(4));
    assert!((o.summary.instance_hours - used * 600_000.0 / 3_600_000.0).abs() < 1e-12);
    assert!((o.summary.cost_usd - o.summary.instance_hours * 4.0).abs() < 1e-12);
    assert_eq!(o.summary.cost_usd, o.summary.cost_on_demand_usd);
    let e = estimate(&setup.profile, &c, &WORK).unwrap();
    assert!(e.requests_per_second >= 8.0, "SpotServe's choice at the mean rate covers it: {c}");
    assert!(simulate_on_demand(&setup, 0, 600_000.0, &arrivals).is_err());
    assert!(simulate_on_demand(&setup, 2, f64::NAN, &arrivals).is_err());
}

#[test]
fn while_no_instance_is_alive_requests_wait() {
    let setup = setup();
    let f = fleet(&[0, 0, 2, 2, 2], 0.0);
    let arrivals: Vec<f64> = (0..60).map(|s| f64::from(s) * 1000.0).collect();
    let o = spotserve(&setup, &f, &arrivals, Recovery::TokenLevel).unwrap();
    check_invariants(&o, &arrivals, &f, &setup);
    assert_eq!(o.summary.completed, 60, "they wait through two empty minutes, then are served");
    assert!(o.requests.iter().all(|r| r.done_ms.unwrap() > 120_000.0));
    assert_eq!(o.intervals[0].config, None);
    assert_eq!(o.intervals[1].queue_len, 60);
}

#[test]
fn bad_inputs_are_errors_naming_the_field() {
    let setup = setup();
    let good = fleet(&[2, 2], 0.0);
    let run = |s: &ServeSetup, f: &Fleet, a: &[f64]| {
        simulate(s, f, a, Recovery::TokenLevel, &mut fixed(config(1, 4, 1, 1))).unwrap_err().to_string()
    };
    let cases: Vec<(Fleet, &str)> = vec![
        (
            Fleet { instances: vec![], preemptions: vec![], arrivals: vec![], ..good.clone() },
            "fleet.instances",
        ),
        (Fleet { interval_ms: 0, ..good.clone() }, "fleet.interval_ms"),
        (Fleet { notice_ms: -1.0, ..good.clone() }, "fleet.notice_ms"),
        (Fleet { notice_ms: f64::NAN, ..good.clone() }, "fleet.notice_ms"),
        (Fleet { preemptions: vec![0], ..good.clone() }, "fleet"),
        (Fleet { instances: vec![2, 3], ..good.clone() }, "fleet.instances[1]"),
    ];
    for (f, field) in cases {
        let err = run(&setup, &f, &[]);
        assert!(err.starts_with(field), "{field}: {err}");
    }
    assert!(run(&setup, &good, &[5.0, 1.0]).starts_with("arrivals_ms[1]"));
    assert!(run(&setup, &good, &[-1.0]).starts_with("arrivals_ms[0]"));
    assert!(run(&ServeSetup { horizon: 0, ..setup.clone() }, &good, &[]).starts_with("horizon"));
    assert!(
        run(&ServeSetup { latency_slo_ms: 0.0, ..setup.clone() }, &good, &[]).starts_with("latency_slo_ms")
    );
    assert!(
        run(&ServeSetup { spot_price_per_hour: -1.0, ..setup.clone() }, &good, &[]).starts_with("spot_price")
    );
    let mut p = setup.clone();
    p.profile.transfer_bytes_per_ms = 0.0;
    assert!(run(&p, &good, &[]).starts_with("profile.transfer_bytes_per_ms"));
    let mut p = setup.clone();
    p.workload.output_tokens = 0;
    assert!(run(&p, &good, &[]).starts_with("workload.output_tokens"));
    let p = ServeSetup { machine: table(vec![1.0, f64::NAN]), ..setup.clone() };
    assert!(run(&p, &good, &[]).starts_with("slowdown_by_busy_replicas[1]"));
    let unordered =
        SharedMachine { slowdown_by_batch: vec![(4, vec![1.0]), (2, vec![1.0])], ..table(vec![]) };
    let p = ServeSetup { machine: unordered, ..setup.clone() };
    assert!(run(&p, &good, &[]).starts_with("slowdown_by_batch[1]"), "{}", run(&p, &good, &[]));
    let bad_entry = SharedMachine { slowdown_by_batch: vec![(2, vec![1.0, 0.0])], ..table(vec![]) };
    let p = ServeSetup { machine: bad_entry, ..setup.clone() };
    assert!(run(&p, &good, &[]).starts_with("slowdown_by_batch[0][1]"));
    let negative = SharedMachine {
        light_load: LightLoad {
            prefill_extra_ms: 0.0,
            decode_extra_ms: -1.0,
            slowdown_by_busy_replicas: Vec::new(),
        },
        ..table(vec![])
    };
    let p = ServeSetup { machine: negative, ..setup.clone() };
    assert!(run(&p, &good, &[]).starts_with("light_load.decode_extra_ms"));
}
