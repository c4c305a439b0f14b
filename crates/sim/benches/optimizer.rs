//! How fast the liveput optimizer decides, natively (the guest runs the same
//! code). Run with `cargo bench -p parcae-sim --bench optimizer`.
//!
//! - `whole-trace/all-models`: the paper's policy (ARIMA forecast + liveput
//!   plan, exact expectations, H = 12) at every interval of the 11.4 h p3
//!   trace, for all five models, with a fresh transition cache per model.
//! - `whole-trace/default-policy`: the default policy (guarded liveput: the
//!   hedged plan, the terminal value, and the three shadows of the regret
//!   guard) the same way, H = 8, under AWS's 120 s notice; `/no-deference`,
//!   `/at-the-estimate` (deference without the low-churn check of its own
//!   moves), `/bursts-to-3`, `/no-proving` (no proving shadow, the low end
//!   unscaled throughout) and `/no-work-at-risk` (the real job planned as if
//!   the ceiling were at risk) without each of its costliest knobs;
//!   `/unannounced`, where the work-at-risk plan runs (a cold start), with
//!   `/whole-at-risk-fronts` (that plan's fronts not thinned per interval)
//!   and `/no-work-at-risk`.
//! - `decision/N=32`, `decision/N=1024`: one interval's decision (H = 12) on
//!   a fleet that just lost instances, with a cold cache (first decision of a
//!   run) and a warm one (steady state). N = 1024 uses the GPT-1.5B profile
//!   scaled to every width that fits ([`scaled_to`], 1,806 layouts), which
//!   the planner prunes (`parcae_policy_core::plan`, *Pruning*).

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use parcae_policy_core::arima::Arima;
use parcae_policy_core::guard::GuardedLiveput;
use parcae_policy_core::optimizer::Liveput;
use parcae_policy_core::{
    ConfigProfile, IntervalStats, ModelProfile, OptimizeRequest, Optimizer, ParallelConfig, PredictRequest,
    Predictor, Recovery,
};
use parcae_profile::{CostConstants, Profile};
use parcae_sim::drive_native;

const MODELS: [&str; 5] = ["gpt-1.5b", "gpt-6.7b", "bert", "resnet152", "vgg19"];

/// The workspace root (this crate is `crates/sim`).
fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
const HORIZON: u32 = 12;
const INTERVAL_MS: u64 = 60_000;

fn profiles() -> Vec<ModelProfile> {
    let root = workspace_root();
    let profile = Profile::load(root.join("data/profiles/p3-v100-parcae.json")).unwrap();
    let constants = CostConstants::load(root.join("data/profiles/cost-constants.json")).unwrap();
    MODELS.iter().map(|m| profile.model_profile(m, &constants).unwrap()).collect()
}

/// `profile` for a fleet of `n`: every profiled depth `P` gets every width up
/// to `n / P`; a width beyond the depth's widest profiled one (`d0`, `thr0`)
/// runs at 90% efficiency per doubling, `thr0 x (D / d0) x 0.9^log2(D / d0)`.
/// Communicators follow the GPT rule of the artifact (`(d + p + 1 + d x p)
/// x 500 + 35` ms to add, `x 39.3 + 35` to remove); model build time and the
/// partitions are the depth's own.
fn scaled_to(profile: &ModelProfile, n: u32) -> ModelProfile {
    let mut out = profile.clone();
    let mut widest: Vec<ConfigProfile> = Vec::new();
    for c in &profile.configs {
        let p = c.config.pipeline_stages;
        match widest.iter_mut().find(|w| w.config.pipeline_stages == p) {
            Some(w) if w.config.data_parallel < c.config.data_parallel => *w = c.clone(),
            Some(_) => {}
            None => widest.push(c.clone()),
        }
    }
    for w in &widest {
        let (d0, p) = (w.config.data_parallel, w.config.pipeline_stages);
        for d in d0 + 1..=n / p {
            let ratio = f64::from(d) / f64::from(d0);
            let thr = w.samples_per_second * ratio * 0.9f64.powf(ratio.log2());
            out.configs.push(ConfigProfile {
                config: ParallelConfig::new(d, p),
                samples_per_second: thr,
                iteration_ms: f64::from(out.global_batch_size) * 1000.0 / thr,
                ..w.clone()
            });
        }
    }
    for c in &mut out.configs {
        let (d, p) = (c.config.data_parallel, c.config.pipeline_stages);
        let groups = f64::from(d + p + 1 + d * p);
        c.comm_rebuild_add_ms = groups * 500.0 + 35.0;
        c.comm_rebuild_remove_ms = groups * 39.3 + 35.0;
    }
    out
}

fn p3_series() -> Vec<IntervalStats> {
    let path = workspace_root().join("data/traces/aws-p3/p3-events.csv");
    parcae_traces::load(&path).unwrap().series(INTERVAL_MS).unwrap().intervals
}

/// The control loop of `parcae-host replay`, natively: returns the samples the
/// plans expect, so the work cannot be optimised away.
fn run_policy(profile: &ModelProfile, series: &[IntervalStats]) -> f64 {
    let (mut arima, mut liveput) = (Arima::default(), Liveput::default());
    let fleet_max = series.iter().map(|s| s.instances).max().unwrap_or(0);
    let mut current = None;
    let mut expected = 0.0;
    for k in 0..series.len() {
        let predict = PredictRequest {
            history_by_type: Vec::new(),
            history: series[..=k].to_vec(),
            horizon: HORIZON - 1,
            interval_ms: INTERVAL_MS,
            fleet_min: 0,
            fleet_max,
        };
        let mut forecast = vec![series[k]];
        forecast.extend(arima.predict(&predict).unwrap());
        let plan = liveput
            .optimize(&OptimizeRequest {
                instances_now_by_type: Vec::new(),
                forecast,
                instances_now: series[k].instances,
                current,
                interval_ms: INTERVAL_MS,
                profile: profile.clone(),
                recovery: Recovery::UNANNOUNCED,
            })
            .unwrap();
        current = plan.steps[0].config;
        expected += plan.steps[0].expected_samples;
    }
    expected
}

fn decision_request(
    profile: &ModelProfile,
    before: u32,
    lost: u32,
    current: ParallelConfig,
) -> OptimizeRequest {
    let now = before - lost;
    let mut forecast = vec![IntervalStats { instances: now, arrivals: 0, preemptions: lost }];
    let mut n = now;
    for i in 1..HORIZON {
        // Keep shrinking for a while, then recover: exercises preemptions and arrivals.
        let next = if i < 4 { n - n / 16 } else { (n + n / 8).min(before) };
        forecast.push(IntervalStats {
            instances: next,
            arrivals: next.saturating_sub(n),
            preemptions: n.saturating_sub(next),
        });
        n = next;
    }
    OptimizeRequest {
        instances_now_by_type: Vec::new(),
        forecast,
        instances_now: now,
        current: Some(current),
        interval_ms: INTERVAL_MS,
        profile: profile.clone(),
        recovery: Recovery::UNANNOUNCED,
    }
}

fn whole_trace(c: &mut Criterion) {
    let profiles = profiles();
    let series = p3_series();
    let mut group = c.benchmark_group("whole-trace");
    group.sample_size(10).measurement_time(Duration::from_secs(60));
    group.bench_function("all-models", |b| {
        b.iter(|| profiles.iter().map(|p| run_policy(p, black_box(&series))).sum::<f64>())
    });
    let constants = CostConstants::load(workspace_root().join("data/profiles/cost-constants.json")).unwrap();
    let aws = constants.recovery(120_000.0).unwrap();
    // The default, and without each of its costliest knobs: what deferring to
    // reactive (a second plan whenever the first layouts differ), checking its
    // own moves at the low end of the churn (two more where the plan moves)
    // and telling bursts apart up to 6 (up to 7 scenarios per interval
    // instead of 4) cost, what the proving shadow costs (a third plan
    // where its decision could differ from the planner shadow's) and what
    // the ARIMA-fed shadow costs (another plan wherever ARIMA's forecast
    // differs from persistence's or the two shadows' layouts do), and what
    // holding it to its work allowance costs (the work is counted either
    // way; on this trace no call passes the allowance), and what crediting
    // the shed at a burst costs (a backward pass over the horizon and the
    // sheds' prices).
    type Adjust = fn(&mut GuardedLiveput);
    let unannounced = Recovery::UNANNOUNCED;
    let variants: [(&str, Recovery, Adjust); 13] = [
        ("default-policy", aws, |_| {}),
        ("default-policy/no-deference", aws, |p| p.planner.optimizer.defer_margin = 0.0),
        ("default-policy/at-the-estimate", aws, |p| p.planner.defer_sigmas = 0.0),
        ("default-policy/bursts-to-3", aws, |p| p.planner.estimator.max_extra = 3),
        ("default-policy/no-proving", aws, |p| p.settings.unproven_scale = 1.0),
        ("default-policy/no-work-at-risk", aws, |p| p.settings.plan_at_risk = false),
        ("default-policy/one-forecast", aws, |p| p.settings.forecast_shadow = false),
        ("default-policy/no-work-allowance", aws, |p| p.planner.work_allowance = None),
        ("default-policy/no-recourse", aws, |p| p.planner.recourse = false),
        // Unannounced, where the real job plans from its work at risk while it
        // is below the ceiling (a cold start): the default, with every
        // layout's front kept whole in that plan, and without the plan.
        ("default-policy/unannounced", unannounced, |_| {}),
        ("default-policy/unannounced/whole-at-risk-fronts", unannounced, |p| {
            p.settings.at_risk_pairs = usize::MAX
        }),
        ("default-policy/unannounced/no-work-at-risk", unannounced, |p| p.settings.plan_at_risk = false),
        ("default-policy/unannounced/one-forecast", unannounced, |p| p.settings.forecast_shadow = false),
    ];
    for (name, recovery, adjust) in variants {
        group.bench_function(name, |b| {
            b.iter(|| {
                profiles
                    .iter()
                    .map(|p| {
                        let mut policy = GuardedLiveput::default();
                        adjust(&mut policy);
                        drive_native(&mut policy, black_box(&series), p, recovery, INTERVAL_MS, 8)
                            .unwrap()
                            .len()
                    })
                    .sum::<usize>()
            })
        });
    }
    group.finish();
}

fn decisions(c: &mut Criterion) {
    let gpt = profiles().remove(0);
    let big = scaled_to(&gpt, 1024);
    let cases = [
        ("N=32", decision_request(&gpt, 32, 3, ParallelConfig::new(4, 8)), &gpt),
        ("N=1024", decision_request(&big, 1024, 32, ParallelConfig::new(64, 16)), &big),
    ];
    let mut group = c.benchmark_group("decision");
    group.sample_size(10).measurement_time(Duration::from_secs(20));
    for (name, request, _) in &cases {
        group.bench_function(format!("{name}/cold-cache"), |b| {
            b.iter(|| Liveput::default().optimize(black_box(request)).unwrap())
        });
        let mut warm = Liveput::default();
        warm.optimize(request).unwrap();
        group.bench_function(format!("{name}/warm-cache"), |b| {
            b.iter(|| warm.optimize(black_box(request)).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, whole_trace, decisions);
criterion_main!(benches);
