//! Scores native policies against the Oracle and the baselines on traces, fast
//! (no sandbox): the development loop behind the generalisation table.
//!
//! `cargo run --release -p parcae-sim --example policy_eval -- PROFILE CONSTANTS MODEL NOTICE_S TRACE...`

use std::path::Path;

use parcae_policy_core::guard::GuardedLiveput;
use parcae_policy_core::recovery::Recovery;
use parcae_policy_core::robust::RobustLiveput;
use parcae_policy_core::{
    IntervalStats, ModelProfile, OptimizeRequest, Optimizer, ParallelConfig, PredictRequest, Predictor,
};
use parcae_profile::{CostConstants, Profile};
use parcae_sim::{MigrationMode, Prices, liveput_truth_under, oracle_under, reactive, simulate_under};

const INTERVAL_MS: u64 = 60_000;
const HORIZON: u32 = 8;

fn drive<P: Predictor + Optimizer>(
    policy: &mut P,
    series: &[IntervalStats],
    profile: &ModelProfile,
    recovery: Recovery,
) -> Vec<Option<ParallelConfig>> {
    let fleet_max = series.iter().map(|s| s.instances).max().unwrap_or(0);
    let mut current = None;
    let mut fleet_min = u32::MAX;
    let mut out = Vec::with_capacity(series.len());
    for (k, observed) in series.iter().enumerate() {
        fleet_min = fleet_min.min(observed.instances);
        let forecast = policy
            .predict(&PredictRequest {
                history: series[..=k].to_vec(),
                horizon: HORIZON - 1,
                interval_ms: INTERVAL_MS,
                fleet_min,
                fleet_max,
            })
            .unwrap();
        let mut planned = vec![*observed];
        planned.extend(forecast);
        let plan = policy
            .optimize(&OptimizeRequest {
                forecast: planned,
                instances_now: observed.instances,
                current,
                interval_ms: INTERVAL_MS,
                profile: profile.clone(),
                recovery,
            })
            .unwrap();
        current = plan.steps.first().and_then(|s| s.config);
        out.push(current);
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (profile, constants, model, notice_s, traces) = (&args[0], &args[1], &args[2], &args[3], &args[4..]);
    let constants = CostConstants::load(Path::new(constants)).unwrap();
    let recovery: Recovery = constants.recovery(notice_s.parse::<f64>().unwrap() * 1000.0).unwrap();
    let profile = Profile::load(Path::new(profile)).unwrap().model_profile(model, &constants).unwrap();
    let prices = Prices { spot_usd_per_hour: 1.0, on_demand_usd_per_hour: 3.0 };
    println!("{model}, notice {notice_s} s: % of the Oracle");
    println!("| trace | oracle | truth | reactive | restart | robust | guarded |");
    for trace in traces {
        let series = parcae_traces::load(Path::new(trace)).unwrap().series(INTERVAL_MS).unwrap().intervals;
        let run = |d: &[Option<ParallelConfig>], mode| {
            simulate_under(&profile, &series, INTERVAL_MS, d, prices, mode, recovery).unwrap().totals.samples
        };
        let o = run(&oracle_under(&profile, &series, INTERVAL_MS, recovery).unwrap(), MigrationMode::Live);
        let t = run(
            &liveput_truth_under(&profile, &series, INTERVAL_MS, HORIZON as usize, recovery).unwrap(),
            MigrationMode::Live,
        );
        let r = run(&reactive(&profile, &series), MigrationMode::Live);
        let rr = run(&reactive(&profile, &series), MigrationMode::RestartOnChange);
        let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<f64>().ok());
        let mut robust = RobustLiveput::default();
        if let Some(t) = env("TERMINAL") {
            robust.optimizer.terminal_horizons = t;
        }
        let rob = run(&drive(&mut robust, &series, &profile, recovery), MigrationMode::Live);
        let mut guarded = GuardedLiveput::default();
        if let Some(t) = env("TERMINAL") {
            guarded.planner.optimizer.terminal_horizons = t;
        }
        if let Some(m) = env("MARGIN") {
            guarded.settings.margin = m;
        }
        if let Some(w) = env("WINDOW") {
            guarded.settings.window_intervals = w;
        }
        let g = run(&drive(&mut guarded, &series, &profile, recovery), MigrationMode::Live);
        let pct = |x: f64| format!("{:.1}", 100.0 * x / o);
        println!(
            "| {} | {:.0} | {} | {} | {} | {} | {} |",
            Path::new(trace).file_name().unwrap().to_string_lossy(),
            o,
            pct(t),
            pct(r),
            pct(rr),
            pct(rob),
            pct(g)
        );
    }
}
