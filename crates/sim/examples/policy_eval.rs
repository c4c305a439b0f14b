//! Scores native policies against the Oracle and the baselines on traces, fast
//! (no sandbox): the development loop behind the generalisation table.
//!
//! `cargo run --release -p parcae-sim --example policy_eval -- PROFILE CONSTANTS MODEL TRACE...`

use std::path::Path;

use parcae_policy_core::guard::GuardedLiveput;
use parcae_policy_core::liveput::MigrationMode;
use parcae_policy_core::robust::RobustLiveput;
use parcae_policy_core::{
    IntervalStats, ModelProfile, OptimizeRequest, Optimizer, ParallelConfig, PredictRequest, Predictor,
};
use parcae_profile::{CostConstants, Profile};
use parcae_sim::{Prices, liveput_truth, oracle, reactive, simulate, simulate_with};

const INTERVAL_MS: u64 = 60_000;
const HORIZON: u32 = 8;

fn drive<P: Predictor + Optimizer>(
    policy: &mut P,
    series: &[IntervalStats],
    profile: &ModelProfile,
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
            })
            .unwrap();
        current = plan.steps.first().and_then(|s| s.config);
        out.push(current);
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (profile, constants, model, traces) = (&args[0], &args[1], &args[2], &args[3..]);
    let constants = CostConstants::load(profile_path(constants)).unwrap();
    let profile = Profile::load(profile_path(profile)).unwrap().model_profile(model, &constants).unwrap();
    let prices = Prices { spot_usd_per_hour: 1.0, on_demand_usd_per_hour: 3.0 };
    println!("| trace | oracle | truth | reactive | restart | robust | guarded |");
    for trace in traces {
        let series = parcae_traces::load(Path::new(trace)).unwrap().series(INTERVAL_MS).unwrap().intervals;
        let score = |d: &[Option<ParallelConfig>]| {
            simulate(&profile, &series, INTERVAL_MS, d, prices).unwrap().totals.samples
        };
        let o = score(&oracle(&profile, &series, INTERVAL_MS).unwrap());
        let t = score(&liveput_truth(&profile, &series, INTERVAL_MS, HORIZON as usize).unwrap());
        let r = score(&reactive(&profile, &series));
        let rr = simulate_with(
            &profile,
            &series,
            INTERVAL_MS,
            &reactive(&profile, &series),
            prices,
            MigrationMode::RestartOnChange,
        )
        .unwrap()
        .totals
        .samples;
        let rob = score(&drive(&mut RobustLiveput::default(), &series, &profile));
        let g = score(&drive(&mut GuardedLiveput::default(), &series, &profile));
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

fn profile_path(p: &str) -> &Path {
    Path::new(p)
}
