//! The baselines on the project's traces (`traces/`) and on the public p3
//! segments (`shared/` beside the checkout): the Ideal bound holds against
//! every decision sequence, the Oracle against every other one, the planner's
//! own value agrees with the simulator, and everything is deterministic.

use std::path::{Path, PathBuf};

use parcae_policy_core::plan::{self, TransitionCache};
use parcae_policy_core::{IntervalStats, ModelProfile, ParallelConfig, Recovery};
use parcae_profile::{CostConstants, Profile};
use parcae_sim::{
    ArtifactStrategy, MigrationMode, Prices, SimResult, artifact, drive_native, ideal, liveput_truth_under,
    oracle, oracle_under, reactive, simulate, simulate_under,
};
use parcae_traces::Trace;

const T: u64 = 60_000;
const PRICES: Prices = Prices { spot_usd_per_hour: 0.918, on_demand_usd_per_hour: 3.06 };

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn shared() -> PathBuf {
    let dir = root().join("data");
    assert!(
        dir.join("profiles/p3-v100-parcae.json").exists(),
        "{}: these tests expect the `shared` folder beside the checkout",
        dir.display()
    );
    dir
}

/// AWS's spot interruption notice, ms (DESIGN.md).
const AWS_NOTICE_MS: f64 = 120_000.0;

/// GCP's and Azure's notice, ms (DESIGN.md): too short to write some stages
/// (GPT-6.7B's), so announced losses can still roll back.
const GCP_AZURE_NOTICE_MS: f64 = 30_000.0;

/// Unannounced preemptions, GCP's and Azure's notice and AWS's, with the
/// constants' write rate.
fn recoveries() -> [Recovery; 3] {
    [
        Recovery::UNANNOUNCED,
        constants().recovery(GCP_AZURE_NOTICE_MS).unwrap(),
        constants().recovery(AWS_NOTICE_MS).unwrap(),
    ]
}

fn constants() -> CostConstants {
    CostConstants::load(root().join("data/profiles/cost-constants.json")).unwrap()
}

fn example() -> ModelProfile {
    Profile::load(root().join("data/profiles/example-small.json"))
        .unwrap()
        .model_profile("tiny-gpt", &constants())
        .unwrap()
}

fn p3(model: &str) -> ModelProfile {
    Profile::load(shared().join("profiles/p3-v100-parcae.json"))
        .unwrap()
        .model_profile(model, &constants())
        .unwrap()
}

fn load(path: &Path) -> Trace {
    parcae_traces::load(path).unwrap()
}

fn segment(model: &str, name: &str) -> Trace {
    load(&shared().join(format!("traces/aws-p3/parcae-reference/{model}/trace_{name}.txt")))
}

/// Every decision sequence we can make without a policy component, by name,
/// planned under `recovery` where a planner is involved.
fn sequences(
    profile: &ModelProfile,
    trace: &Trace,
    recovery: Recovery,
) -> Vec<(String, Vec<Option<ParallelConfig>>)> {
    let series = trace.series(T).unwrap();
    let s = &series.intervals;
    let mut out = vec![
        ("reactive".to_string(), reactive(profile, s)),
        ("liveput-truth H=8".to_string(), liveput_truth_under(profile, s, T, 8, recovery).unwrap()),
        ("liveput-truth H=1".to_string(), liveput_truth_under(profile, s, T, 1, recovery).unwrap()),
        ("always pause".to_string(), vec![None; s.len()]),
    ];
    if let Some(reference) = trace.reference() {
        for strategy in ArtifactStrategy::ALL {
            let replay = artifact(profile, &series, reference, strategy);
            out.push((format!("artifact:{strategy}"), replay.decisions));
        }
    }
    out
}

fn score(
    profile: &ModelProfile,
    series: &[IntervalStats],
    decisions: &[Option<ParallelConfig>],
) -> SimResult {
    simulate(profile, series, T, decisions, PRICES).unwrap()
}

/// The Ideal bounds the Oracle, the planner's value of the Oracle's plan is
/// the simulator's, and no decision sequence scores above the Oracle under
/// either mode (live migration or restart on every change): the same
/// recovery rules for every row.
fn check_bounds(profile: &ModelProfile, trace: &Trace, recovery: Recovery) {
    let name = format!("{} ({} ms notice)", trace.name(), recovery.preemption_notice_ms);
    let series = trace.series(T).unwrap().intervals;
    let run = |decisions: &[Option<ParallelConfig>], mode| {
        simulate_under(profile, &series, T, decisions, PRICES, mode, recovery).unwrap().totals.samples
    };
    let bound = ideal(profile, &series, T, PRICES).unwrap().totals.samples;
    let best_decisions = oracle_under(profile, &series, T, recovery).unwrap();
    let best = run(&best_decisions, MigrationMode::Live);
    let slack = 1e-9 * bound.max(1.0);
    assert!(best <= bound + slack, "{name}: oracle {best} above ideal {bound}");
    let options = parcae_sim::oracle_options(recovery);
    let planned = plan::best_plan_with(
        profile,
        None,
        0.0,
        &parcae_sim::plan_steps(&series),
        T,
        options,
        &mut TransitionCache::default(),
    )
    .unwrap();
    let planned_value: f64 = planned.iter().map(|p| p.expected_samples).sum();
    assert!((planned_value - best).abs() <= slack, "{name}: planner says {planned_value}, simulator {best}");
    for (what, decisions) in sequences(profile, trace, recovery) {
        for mode in [MigrationMode::Live, MigrationMode::RestartOnChange] {
            let samples = run(&decisions, mode);
            let what = format!("{what} ({})", mode.as_str());
            assert!(samples <= bound + slack, "{name}: {what} {samples} above ideal {bound}");
            assert!(samples <= best + slack, "{name}: {what} {samples} above the oracle {best}");
        }
    }
}

#[test]
fn bounds_on_the_project_traces() {
    for file in ["data/traces/demo-8node.csv", "data/traces/calm-4node.csv"] {
        for recovery in recoveries() {
            check_bounds(&example(), &load(&root().join(file)), recovery);
        }
    }
}

#[test]
fn bounds_on_the_p3_segments() {
    for model in ["gpt-1.5b", "gpt-6.7b", "bert"] {
        let profile = p3(model);
        for name in ["hh_55_65", "hl_15_25", "lh_80_90", "ll_10_11"] {
            let Ok(path) = std::fs::canonicalize(
                shared().join(format!("traces/aws-p3/parcae-reference/{model}/trace_{name}.txt")),
            ) else {
                continue; // no recorded segment for this model
            };
            for recovery in recoveries() {
                check_bounds(&profile, &load(&path), recovery);
            }
        }
    }
}

/// The default policy on `file`'s trace, unannounced, at the Young/Daly
/// checkpoint cadence of the losses seen so far, as `bench` scores it:
/// `(default, best reactive row, Oracle)` samples.
fn default_unannounced(file: &str, model: &str) -> (f64, f64, f64) {
    let series = load(&shared().join(file)).series(T).unwrap().intervals;
    // No notice, and the constants' write rate for the periodic checkpoints.
    let recovery = constants().recovery(0.0).unwrap();
    let mut policies = [parcae_policy_core::guard::GuardedLiveput::default()];
    let (oracle, best_reactive, defaults) = against_oracle(&series, model, recovery, &mut policies);
    (defaults[0], best_reactive, oracle)
}

/// The Oracle's samples, the best reactive row's and each of `policies`'
/// (driven natively, horizon 8) on `series` under `recovery`, at the
/// Young/Daly checkpoint cadence of the losses seen so far, as `bench`
/// scores them (unannounced, some loss must shorten that cadence).
fn against_oracle(
    series: &[IntervalStats],
    model: &str,
    recovery: Recovery,
    policies: &mut [parcae_policy_core::guard::GuardedLiveput],
) -> (f64, f64, Vec<f64>) {
    use parcae_sim::{CadenceRule, Cadenced, drive_native_profiles, oracle_cadenced, simulate_cadenced};

    let system = Cadenced::new(
        CadenceRule::SeenSoFar,
        &p3(model),
        series,
        T,
        &recovery,
        constants().checkpoint_snapshot_bytes_per_ms(),
    );
    if recovery.preemption_notice_ms == 0.0 {
        assert!(!system.is_constant(), "no loss shortens the cadence: nothing tested");
    }
    let score = |decisions: &[Option<ParallelConfig>], mode| {
        simulate_cadenced(&system, series, T, decisions, PRICES, mode, recovery).unwrap().totals.samples
    };
    let oracle = score(&oracle_cadenced(&system, series, T, recovery).unwrap(), MigrationMode::Live);
    let reactive_decisions = reactive(system.base(), series);
    let best_reactive = score(&reactive_decisions, MigrationMode::Live)
        .max(score(&reactive_decisions, MigrationMode::RestartOnChange));
    let scores = policies
        .iter_mut()
        .map(|policy| {
            let decisions = drive_native_profiles(policy, series, |k| system.at(k), recovery, T, 8).unwrap();
            score(&decisions, MigrationMode::Live)
        })
        .collect();
    (oracle, best_reactive, scores)
}

/// Where every instance lives a bounded time and is replaced minutes after
/// it goes, persistence's counts drew the planner to the throughput-best
/// layout on the whole fleet, and it paid a migration at nearly every loss
/// (GPT-1.5B under AWS's notice: 95.6% of the Oracle), because a fixed plan
/// priced every burst as a refill from spares. The guard's ARIMA-fed shadow
/// earned more there, and the planner came to plan on ARIMA's counts (97.4%).
/// Crediting the shed the job makes at a burst (`PlanOptions::recourse`)
/// keeps room on persistence's counts: the default must reach 97% of the
/// Oracle, ahead of reactive and of the same policy pricing bursts as
/// refills, which still switches to ARIMA's counts (mechanism 8 stays the
/// fallback where a forecast earns clearly more).
#[test]
fn the_default_keeps_room_to_shed_where_lost_instances_come_back() {
    use parcae_policy_core::count_forecast::CountPredictor;
    use parcae_policy_core::guard::GuardedLiveput;

    let fleet =
        parcae_traces::synth::BoundedLifetimes::from_spec("32:1-3:5", "bounded-lifetimes".into(), 12.0, 1)
            .unwrap();
    let series = fleet.generate().unwrap().series(T).unwrap().intervals;
    let recovery = constants().recovery(AWS_NOTICE_MS).unwrap();
    let mut refilling = GuardedLiveput::default();
    refilling.planner.recourse = false;
    let mut policies = [GuardedLiveput::default(), refilling];
    let (oracle, best_reactive, scores) = against_oracle(&series, "gpt-1.5b", recovery, &mut policies);
    let [default, refilling] = scores[..] else { unreachable!("two policies") };
    assert_eq!(policies[1].forecast(), CountPredictor::Arima, "pricing refills, the ARIMA-fed shadow leads");
    assert!(default >= 0.97 * oracle, "default {:.1}% of the Oracle", 100.0 * default / oracle);
    assert!(default > refilling, "default {default} vs pricing bursts as refills {refilling}");
    assert!(default > best_reactive, "default {default} vs reactive {best_reactive}");
}

/// A notice is never worse than none: with 30 s, too short to write GPT-6.7B's
/// stages, reactive on the fleet-wipes trace must roll back no more work
/// than unannounced, and train no less. While the cadence counted no losses
/// under any notice, 30 s rolled back to a 30-minute cadence, more than the
/// unannounced Young/Daly one.
#[test]
fn a_notice_too_short_to_save_a_stage_rolls_back_no_more_than_none() {
    use parcae_sim::cadence::with_young_daly_cadence;

    let series = load(&shared().join("traces/synthetic/fleet-wipes.csv")).series(T).unwrap().intervals;
    let profile = p3("gpt-6.7b");
    let reactive_under = |notice_ms: f64| {
        let recovery = constants().recovery(notice_ms).unwrap();
        let system = with_young_daly_cadence(
            &profile,
            &series,
            T,
            &recovery,
            constants().checkpoint_snapshot_bytes_per_ms(),
        );
        simulate_under(
            &system,
            &series,
            T,
            &reactive(&system, &series),
            PRICES,
            MigrationMode::Live,
            recovery,
        )
        .unwrap()
        .totals
    };
    let (unannounced, short) = (reactive_under(0.0), reactive_under(GCP_AZURE_NOTICE_MS));
    assert!(short.lost_samples > 0.0, "30 s saves every GPT-6.7B stage: nothing tested");
    assert!(
        short.lost_samples <= unannounced.lost_samples,
        "rolled back {} samples at 30 s, {} unannounced",
        short.lost_samples,
        unannounced.lost_samples
    );
    assert!(
        short.samples >= unannounced.samples,
        "{} at 30 s, {} unannounced",
        short.samples,
        unannounced.samples
    );
}

/// The case where the default planner on ARIMA lost to reactive (g4dn,
/// GPT-6.7B, unannounced: 95.5% of the Oracle against reactive's 96.2%):
/// on the persistence forecast it must beat both reactive rows and reach 97%
/// of the Oracle.
#[test]
fn the_default_beats_reactive_where_the_arima_planner_did_not() {
    let (default, best_reactive, oracle) = default_unannounced("traces/aws-g4dn/g4dn-events.csv", "gpt-6.7b");
    assert!(default > best_reactive, "default {default} vs reactive {best_reactive}");
    assert!(default >= 0.97 * oracle, "default {:.1}% of the Oracle", 100.0 * default / oracle);
}

/// p3, GPT-6.7B, unannounced: while the planner's terminal value credited
/// the last layout at its throughput, as if no preemption came after the
/// horizon, it drifted to layouts one preemption cuts and reached 96.5% of
/// the Oracle; priced under the observed churn, it must reach 97%.
#[test]
fn a_terminal_value_priced_under_churn_reaches_97_percent_on_p3() {
    let (default, best_reactive, oracle) = default_unannounced("traces/aws-p3/p3-events.csv", "gpt-6.7b");
    assert!(default > best_reactive, "default {default} vs reactive {best_reactive}");
    assert!(default >= 0.97 * oracle, "default {:.1}% of the Oracle", 100.0 * default / oracle);
}

/// The p3 look-alike, GPT-1.5B, unannounced: with bursts of 3 or more
/// pooled into 3, the planner held 2x13 on 32 instances (a burst of 6 wipes
/// one of its stages about one time in three) where reactive ran 4x8, and
/// reached 96.7% of the Oracle; its churn estimate now tells bursts apart up
/// to 6, and it must reach 97%.
#[test]
fn bursts_told_apart_reach_97_percent_on_the_p3_look_alike() {
    let (default, best_reactive, oracle) =
        default_unannounced("traces/synthetic/aws-p3-like.csv", "gpt-1.5b");
    assert!(default > best_reactive, "default {default} vs reactive {best_reactive}");
    assert!(default >= 0.97 * oracle, "default {:.2}% of the Oracle", 100.0 * default / oracle);
}

/// The whole public traces (p3: 683 intervals, g4dn), every model: run with
/// `cargo test -p parcae-sim --test traces whole -- --ignored` (a few
/// minutes in debug mode).
#[test]
#[ignore = "minutes in debug mode; run explicitly"]
fn bounds_on_the_whole_public_traces() {
    for file in ["traces/aws-p3/p3-events.csv", "traces/aws-g4dn/g4dn-events.csv"] {
        let trace = load(&shared().join(file));
        for model in ["gpt-1.5b", "gpt-6.7b", "bert"] {
            for recovery in recoveries() {
                check_bounds(&p3(model), &trace, recovery);
            }
        }
    }
}

#[test]
fn ideal_of_the_hh_segment_matches_the_artifact() {
    // DESIGN.md section 4: the artifact's Ideal for GPT-1.5B on hh is 143,547
    // samples per hour, BERT 1,806,875.
    for (model, expected) in [("gpt-1.5b", 143_547.0), ("bert", 1_806_875.0)] {
        let series = segment(model, "hh_55_65").series(T).unwrap();
        let result = ideal(&p3(model), &series.intervals, T, PRICES).unwrap();
        assert_eq!(result.totals.hours, 1.0);
        assert!(
            (result.totals.samples_per_hour - expected).abs() < 1.0,
            "{model}: {}",
            result.totals.samples
        );
    }
}

#[test]
fn the_reference_segments_align_with_their_series() {
    let profile = p3("gpt-1.5b");
    for name in ["hh_55_65", "hl_15_25", "lh_80_90", "ll_10_11"] {
        let trace = segment("gpt-1.5b", name);
        let series = trace.series(T).unwrap();
        let reference = trace.reference().expect("segment files record decisions");
        assert_eq!(series.len(), 60, "{name}");
        for strategy in ArtifactStrategy::ALL {
            let replay = artifact(&profile, &series, reference, strategy);
            assert_eq!((replay.missing_intervals, replay.misaligned_rows), (0, 0), "{name} {strategy}");
            // Every recorded layout fits the instances of its interval; the
            // ones not profiled are reported (none in these segments).
            assert!(
                replay.issues.iter().all(|i| i.reason != parcae_sim::IssueReason::DoesNotFit),
                "{name} {strategy}: {:?}",
                replay.issues
            );
            score(&profile, &series.intervals, &replay.decisions);
        }
    }
}

#[test]
fn the_whole_trace_decision_arrays_replay() {
    // The artifact's per-minute decisions over the whole p3 trace, for the
    // batch size of the profile (gbs 128, mbs 1), align with the event trace.
    let profile = p3("gpt-1.5b");
    let decisions = load(&shared().join("traces/aws-p3/parcae-reference/gpt-1.5b_p3_gbs128_mbs1.json"));
    let events = load(&shared().join("traces/aws-p3/p3-events.csv"));
    let series = decisions.series(T).unwrap();
    let from_events = events.series(T).unwrap();
    let n = series.len().min(from_events.len());
    assert_eq!(series.intervals[..n], from_events.intervals[..n]);
    let reference = decisions.reference().unwrap();
    for strategy in ArtifactStrategy::ALL {
        let replay = artifact(&profile, &series, reference, strategy);
        assert_eq!(replay.missing_intervals, 0);
        let result = score(&profile, &series.intervals, &replay.decisions);
        assert!(result.totals.samples > 0.0);
    }
}

#[test]
fn deterministic() {
    let profile = p3("gpt-1.5b");
    let trace = segment("gpt-1.5b", "lh_80_90");
    let series = trace.series(T).unwrap().intervals;
    let run = || {
        let mut all = Vec::new();
        for (_, decisions) in sequences(&profile, &trace, Recovery::UNANNOUNCED) {
            all.push(score(&profile, &series, &decisions));
        }
        all.push(score(&profile, &series, &oracle(&profile, &series, T).unwrap()));
        serde_json::to_vec(&all).unwrap()
    };
    assert_eq!(run(), run());
}

/// `reactive` under live migration and under restart-on-change.
fn reactive_both_ways(profile: &ModelProfile, trace: &Trace, recovery: Recovery) -> (SimResult, SimResult) {
    let series = trace.series(T).unwrap().intervals;
    let decisions = reactive(profile, &series);
    let run = |mode| simulate_under(profile, &series, T, &decisions, PRICES, mode, recovery).unwrap();
    (run(MigrationMode::Live), run(MigrationMode::RestartOnChange))
}

#[test]
fn restarting_never_beats_live_migration_for_reactive() {
    let mut cases: Vec<(ModelProfile, Trace)> = ["data/traces/demo-8node.csv", "data/traces/calm-4node.csv"]
        .iter()
        .map(|f| (example(), load(&root().join(f))))
        .collect();
    for model in ["gpt-1.5b", "bert"] {
        for name in ["hh_55_65", "hl_15_25", "lh_80_90", "ll_10_11"] {
            cases.push((p3(model), segment(model, name)));
        }
    }
    for (profile, trace) in &cases {
        for recovery in recoveries() {
            let (live, restart) = reactive_both_ways(profile, trace, recovery);
            let name = format!("{} ({} ms notice)", trace.name(), recovery.preemption_notice_ms);
            // Same recovery rules, and the live model may restart whenever
            // that is cheaper: restarting never wins.
            let slack = 1e-9 * live.totals.samples.abs().max(1.0);
            assert!(
                restart.totals.samples <= live.totals.samples + slack,
                "{name}: reactive-restart {} above reactive {}",
                restart.totals.samples,
                live.totals.samples
            );
            // Every interval with an availability change restarts, none other
            // (the reactive layouts only change with the fleet); with AWS's
            // notice every wiped stage is evacuated, nothing rolls back.
            for r in &restart.intervals {
                let changed = r.interval == 0 || r.arrivals + r.preemptions > 0;
                let expected = if changed && r.config.is_some() { 1.0 } else { 0.0 };
                assert!((r.p_restart - expected).abs() < 1e-12, "{name} {r:?}");
                if recovery.announced() {
                    assert_eq!(r.lost_samples, 0.0, "{name} {r:?}");
                }
            }
            let bound =
                ideal(profile, &trace.series(T).unwrap().intervals, T, PRICES).unwrap().totals.samples;
            assert!(restart.totals.samples <= bound);
        }
    }
}

#[test]
fn restart_mode_is_deterministic() {
    let profile = p3("gpt-1.5b");
    let trace = segment("gpt-1.5b", "hh_55_65");
    let run = || serde_json::to_vec(&reactive_both_ways(&profile, &trace, Recovery::UNANNOUNCED).1).unwrap();
    assert_eq!(run(), run());
}

#[test]
fn reactive_restart_of_the_segments_matches_the_artifact() {
    // DESIGN.md section 4, "throughput-optimal, reactive", samples per hour.
    // Within 3%: restart-on-change follows the live model's rules where the
    // artifact's differ (type add/remove from the surviving holders, not from
    // arrivals; the first start charges the checkpoint load), so that no row
    // is measured under other rules than the Oracle's (issue 16).
    for (model, name, expected) in [
        ("gpt-1.5b", "hh_55_65", 107_545.0),
        ("gpt-1.5b", "lh_80_90", 73_255.0),
        ("bert", "hh_55_65", 1_603_703.0),
    ] {
        // Under AWS's notice nothing rolls back, as in the artifact.
        let recovery = constants().recovery(AWS_NOTICE_MS).unwrap();
        let (_, restart) = reactive_both_ways(&p3(model), &segment(model, name), recovery);
        let got = restart.totals.samples_per_hour;
        assert!(
            (got - expected).abs() <= 0.03 * expected,
            "{model} {name}: {got} vs the artifact's {expected}"
        );
    }
}

/// The issue 16 table: % of the Oracle for each row, per trace, model and
/// notice. Run with `cargo test -p parcae-sim --test traces recovery_table
/// -- --ignored --nocapture`.
#[test]
#[ignore = "minutes; prints a measurement table"]
fn recovery_table() {
    use parcae_policy_core::arima::Arima;
    use parcae_policy_core::optimizer::Liveput;
    use parcae_policy_core::robust::RobustLiveput;

    /// arima forecast, plain liveput optimizer.
    #[derive(Default)]
    struct ArimaLiveput(Arima, Liveput);
    impl parcae_policy_core::Predictor for ArimaLiveput {
        fn predict(&mut self, r: &parcae_policy_core::PredictRequest) -> Result<Vec<IntervalStats>, String> {
            self.0.predict(r)
        }
    }
    impl parcae_policy_core::Optimizer for ArimaLiveput {
        fn optimize(
            &mut self,
            r: &parcae_policy_core::OptimizeRequest,
        ) -> Result<parcae_policy_core::Plan, String> {
            self.1.optimize(r)
        }
    }

    const H: u32 = 12;
    println!(
        "trace  model     notice  reactive  reactive-restart  liveput-truth  arima-liveput  robust-liveput"
    );
    for (trace_name, file) in
        [("p3", "traces/aws-p3/p3-events.csv"), ("g4dn", "traces/aws-g4dn/g4dn-events.csv")]
    {
        let series = load(&shared().join(file)).series(T).unwrap().intervals;
        for model in ["gpt-1.5b", "gpt-6.7b", "bert"] {
            let profile = p3(model);
            for notice_ms in [AWS_NOTICE_MS, 0.0] {
                let recovery = constants().recovery(notice_ms).unwrap();
                let run = |decisions: &[Option<ParallelConfig>], mode| {
                    simulate_under(&profile, &series, T, decisions, PRICES, mode, recovery)
                        .unwrap()
                        .totals
                        .samples
                };
                let best = run(&oracle_under(&profile, &series, T, recovery).unwrap(), MigrationMode::Live);
                let reactive_decisions = reactive(&profile, &series);
                let mut arima = ArimaLiveput::default();
                let mut robust = RobustLiveput::default();
                let rows = [
                    run(&reactive_decisions, MigrationMode::Live),
                    run(&reactive_decisions, MigrationMode::RestartOnChange),
                    run(
                        &liveput_truth_under(&profile, &series, T, H as usize, recovery).unwrap(),
                        MigrationMode::Live,
                    ),
                    run(
                        &drive_native(&mut arima, &series, &profile, recovery, T, H).unwrap(),
                        MigrationMode::Live,
                    ),
                    run(
                        &drive_native(&mut robust, &series, &profile, recovery, T, H).unwrap(),
                        MigrationMode::Live,
                    ),
                ];
                let pct: Vec<String> = rows.iter().map(|r| format!("{:>6.1}%", 100.0 * r / best)).collect();
                println!("{trace_name:<6} {model:<9} {:>4.0} s  {}", notice_ms / 1000.0, pct.join("  "));
                for (r, what) in rows.iter().zip([
                    "reactive",
                    "reactive-restart",
                    "liveput-truth",
                    "arima-liveput",
                    "robust-liveput",
                ]) {
                    assert!(
                        *r <= best * (1.0 + 1e-9),
                        "{trace_name} {model} {notice_ms}: {what} above the oracle"
                    );
                }
            }
        }
    }
}

/// Where instances live minutes (41 places of 6-9 minutes refilled after one,
/// g4dn, GPT-1.5B, 30 s intervals and notice, horizon 16), every burst size
/// is seen and the count changes every interval: unbounded, one call of the
/// default once planned about 58 million units of work (1.19e10 fuel, six
/// times a guest's budget; the sandbox quarantined it and the run was
/// reactive's, 14.5% of the Oracle). With repeated programs recalled it
/// still plans about 21 million, three and a half allowances, so the
/// allowance must bind. Past its work allowance a call finishes with bursts
/// pooled, and the next starts pooled; past a tenth more it plans the
/// observed interval alone: no call here comes near that.
#[test]
fn the_default_bounds_its_work_where_instances_live_minutes() {
    use parcae_policy_core::guard::GuardedLiveput;
    use parcae_policy_core::robust::DEFAULT_WORK_ALLOWANCE;
    use parcae_policy_core::{OptimizeRequest, Optimizer, Plan, PredictRequest, Predictor};

    /// The default, the work of each of its calls counted.
    struct Counted(GuardedLiveput, Vec<u64>, bool);
    impl Predictor for Counted {
        fn predict(&mut self, request: &PredictRequest) -> Result<Vec<IntervalStats>, String> {
            self.0.predict(request)
        }
    }
    impl Optimizer for Counted {
        fn optimize(&mut self, request: &OptimizeRequest) -> Result<Plan, String> {
            let before = self.0.planner.optimizer.cache_stats().work();
            let plan = self.0.optimize(request);
            self.1.push(self.0.planner.optimizer.cache_stats().work() - before);
            self.2 |= self.0.planner.pooling() > 0;
            plan
        }
    }
    const INTERVAL_MS: u64 = 30_000;
    let fleet =
        parcae_traces::synth::BoundedLifetimes::from_spec("41:0.1-0.15:1", "minutes".into(), 6.0, 182)
            .unwrap();
    let series = fleet.generate().unwrap().series(INTERVAL_MS).unwrap().intervals;
    let profile = Profile::load(shared().join("profiles/g4dn-t4-derived.json"))
        .unwrap()
        .model_profile("gpt-1.5b", &constants())
        .unwrap();
    let recovery = constants().recovery(GCP_AZURE_NOTICE_MS).unwrap();
    let heaviest = |mut policy: Counted| {
        drive_native(&mut policy, &series[..60], &profile, recovery, INTERVAL_MS, 16).unwrap();
        (policy.1.into_iter().max().unwrap(), policy.2)
    };
    let (bounded, pooled) = heaviest(Counted(GuardedLiveput::default(), Vec::new(), false));
    let mut free = GuardedLiveput::default();
    free.planner.work_allowance = None;
    let (unbounded, _) = heaviest(Counted(free, Vec::new(), false));
    println!("heaviest call of the first half hour: {unbounded} units unbounded, {bounded} bounded");
    assert!(pooled, "the allowance never pooled the bursts");
    assert!(unbounded > 3 * DEFAULT_WORK_ALLOWANCE, "unbounded, the heaviest call did {unbounded}");
    // The pooled limit (a tenth past the allowance), overshot by at most
    // an interval's work.
    assert!(bounded < 6 * DEFAULT_WORK_ALLOWANCE / 5, "bounded, the heaviest call did {bounded}");
}

/// The peers that restart from a checkpoint after losing a stage (Bamboo,
/// Oobleck) take the deployment's checkpoints, as our rows do: at the
/// cadence that follows the losses, paying its share of throughput. Where
/// every instance lives three minutes and the fleet is wiped about every
/// three and a half, Oobleck trained at the profile's full speed and still
/// restarted from a checkpoint, and so trained more than the Oracle (298
/// samples against 289; the Oracle pays 3.1% of its throughput for those
/// checkpoints). No peer may now train more than the Oracle there, under
/// AWS's notice or none.
#[test]
fn no_peer_trains_more_than_the_oracle_where_instances_live_minutes() {
    use parcae_sim::peers::{self, Peer, PeerConstants, PeerSettings};
    use parcae_sim::{CadenceRule, Cadenced, oracle_cadenced, simulate_cadenced};

    const INTERVAL_MS: u64 = 30_000;
    let fleet = parcae_traces::synth::BoundedLifetimes::from_spec(
        "58:0.05-0.05:0.5",
        "three-minute-lives".into(),
        6.0,
        20,
    )
    .unwrap();
    let series = fleet.generate().unwrap().series(INTERVAL_MS).unwrap().intervals;
    let text = std::fs::read_to_string(root().join("data/profiles/peer-constants.json")).unwrap();
    let peer_constants: PeerConstants = serde_json::from_str(&text).unwrap();
    for (model, notice_ms) in
        [("gpt-6.7b", 5_000.0), ("gpt-6.7b", 0.0), ("gpt-1.5b", 5_000.0), ("gpt-1.5b", 0.0)]
    {
        let profile = p3(model);
        let recovery = constants().recovery(notice_ms).unwrap();
        let system = Cadenced::new(
            CadenceRule::SeenSoFar,
            &profile,
            &series,
            INTERVAL_MS,
            &recovery,
            constants().checkpoint_snapshot_bytes_per_ms(),
        );
        assert!(!system.is_constant(), "no loss shortens the cadence: nothing tested");
        let decisions = oracle_cadenced(&system, &series, INTERVAL_MS, recovery).unwrap();
        let oracle = simulate_cadenced(
            &system,
            &series,
            INTERVAL_MS,
            &decisions,
            PRICES,
            MigrationMode::Live,
            recovery,
        )
        .unwrap()
        .totals
        .samples;
        let settings = |cadence| PeerSettings { runs: 4, cadence, ..PeerSettings::new(INTERVAL_MS, PRICES) };
        for peer in Peer::ALL.into_iter().filter(|p| *p != Peer::OnDemand) {
            let run = |cadence| {
                peers::run(peer, &profile, &series, &peer_constants, &settings(cadence), notice_ms as u64)
                    .unwrap()
                    .result
                    .totals
                    .samples
            };
            let samples = run(Some(system.clone()));
            println!("{model}, {notice_ms} ms notice: {peer} {samples:.1} samples, the Oracle {oracle:.1}");
            assert!(
                samples <= oracle * (1.0 + 1e-9),
                "{model}, {notice_ms} ms notice: {peer} {samples} above the Oracle {oracle}"
            );
            if peer == Peer::Oobleck && model == "gpt-6.7b" {
                // The case still shows what it was chosen for: with the
                // profile's checkpoints at no cost Oobleck is above.
                assert!(
                    run(None) > oracle,
                    "{notice_ms} ms notice: oobleck without checkpoints no longer above"
                );
            }
        }
    }
}
