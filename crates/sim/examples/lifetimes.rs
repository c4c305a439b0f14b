//! The default policy on fleets of bounded instance lifetimes
//! (`parcae_traces::synth::BoundedLifetimes`): every instance lives a time
//! drawn from a range and is replaced a few minutes after it goes, as
//! preemptible VMs in a managed group do. None of the generalisation table's
//! families has this shape: it is the held-out check of the default's choice
//! of count forecast, where the default still falls short in part (README,
//! *Bounded lifetimes: partly covered*). This scores it against the Oracle,
//! every baseline and peer, and its predecessor robust-liveput, so a change
//! meant to close the gap can be measured, and checked against the table
//! (`generalisation`) for what it costs elsewhere. Beside the Oracle, the
//! Oracle without pauses (`parcae_sim::oracle_without_pauses`): where every
//! loss rolls back, much of the Oracle's lead is stopping just before a loss
//! no notice announces, which no online policy can do.
//!
//! `cargo run --release -p parcae-sim --example lifetimes [-- --seeds 1,2]
//! [--cadence whole-trace]` (from the workspace root; about a minute per
//! seed) prints one markdown table per seed and a summary.

use std::path::Path;

use parcae_policy_core::guard::GuardedLiveput;
use parcae_policy_core::robust::RobustLiveput;
use parcae_policy_core::{IntervalStats, Optimizer, ParallelConfig, Predictor, Recovery};
use parcae_profile::Profile;
use parcae_sim::{
    Cadenced, MigrationMode, Prices, drive_native_profiles, oracle_cadenced, oracle_without_pauses,
    simulate_cadenced,
};
use parcae_traces::synth::BoundedLifetimes;

mod shared;

/// The layouts `policy` runs over `series`, natively, told each interval's
/// profile at the system's cadence.
fn decide<P: Predictor + Optimizer>(
    mut policy: P,
    system: &Cadenced,
    series: &[IntervalStats],
    recovery: Recovery,
) -> Vec<Option<ParallelConfig>> {
    drive_native_profiles(&mut policy, series, |k| system.at(k), recovery, INTERVAL_MS, HORIZON)
        .expect("the policies do not fail on a profiled model")
}

const INTERVAL_MS: u64 = 60_000;
const HORIZON: u32 = 8;
const HOURS: f64 = 12.0;
const MODELS: [&str; 3] = ["gpt-1.5b", "gpt-6.7b", "bert"];
/// AWS's two minutes, GCP's and Azure's 30 s (a managed group of preemptible VMs,
/// this shape, is GCP's) and none.
const NOTICES_S: [f64; 3] = [120.0, 30.0, 0.0];
/// `(places, shortest and longest lifetime in hours, refill delay in minutes)`.
const SHAPES: [(u32, f64, f64, f64); 5] = [
    (32, 1.0, 3.0, 5.0),
    (32, 1.0, 3.0, 10.0),
    (24, 0.2, 4.0, 5.0),
    (16, 0.5, 1.5, 2.0),
    (64, 2.0, 6.0, 10.0),
];

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let cadence = shared::take_cadence(&mut args);
    if !(args.is_empty() || args.len() == 2 && args[0] == "--seeds") {
        eprintln!("usage: lifetimes [--seeds 1,2] [--cadence seen-so-far|whole-trace]");
        std::process::exit(2)
    }
    let seeds: Vec<u64> = shared::list_arg(&args, "--seeds", "seeds (unsigned integers)").unwrap_or(vec![1]);
    let (constants, peer_constants) = shared::constants();
    let p3 = Profile::load(Path::new("data/profiles/p3-v100-parcae.json")).expect("the p3 profile loads");
    let prices = Prices { spot_usd_per_hour: 0.918, on_demand_usd_per_hour: 3.06 };
    let (mut cases, mut below, mut behind, mut behind_robust, mut below_unpaused) = (0, 0, 0, 0, 0);
    for seed in seeds {
        println!("\nSeed {seed}, {HOURS} h per fleet, % of the Oracle:\n");
        println!(
            "| fleet | model | notice s | best other row | its % | default % | default / best other | \
             robust-liveput % | Oracle without pauses % | default / it |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for (places, min_hours, max_hours, refill_minutes) in SHAPES {
            let fleet = format!("{places} places, {min_hours}-{max_hours} h, refill {refill_minutes} min");
            let spec = BoundedLifetimes {
                name: "bounded-lifetimes".into(),
                seed,
                hours: HOURS,
                places,
                min_hours,
                max_hours,
                refill_minutes,
            };
            let series = spec
                .generate()
                .and_then(|t| t.series(INTERVAL_MS))
                .expect("a bounded-lifetime fleet generates")
                .intervals;
            for model in MODELS {
                let profile = p3.model_profile(model, &constants).expect("the p3 profile has the model");
                for notice_s in NOTICES_S {
                    let recovery =
                        constants.recovery(notice_s * 1000.0).expect("the constants give a recovery");
                    let system = Cadenced::new(
                        cadence,
                        &profile,
                        &series,
                        INTERVAL_MS,
                        &recovery,
                        constants.checkpoint_snapshot_bytes_per_ms(),
                    );
                    let score = |d: &[Option<ParallelConfig>]| {
                        simulate_cadenced(
                            &system,
                            &series,
                            INTERVAL_MS,
                            d,
                            prices,
                            MigrationMode::Live,
                            recovery,
                        )
                        .expect("the layouts are the profile's")
                        .totals
                        .samples
                    };
                    let oracle = score(&oracle_cadenced(&system, &series, INTERVAL_MS, recovery).unwrap());
                    let unpaused =
                        score(&oracle_without_pauses(&system, &series, INTERVAL_MS, recovery).unwrap());
                    let (best, best_name) = shared::other_rows(
                        &system,
                        &profile,
                        &series,
                        INTERVAL_MS,
                        prices,
                        recovery,
                        notice_s * 1000.0,
                        &peer_constants,
                    )
                    .into_iter()
                    .map(|(name, result)| (result.totals.samples, name))
                    .max_by(|a, b| a.0.total_cmp(&b.0))
                    .expect("reactive is always a row");
                    let default = score(&decide(GuardedLiveput::default(), &system, &series, recovery));
                    let robust = score(&decide(RobustLiveput::default(), &system, &series, recovery));
                    let pct = |x: f64| 100.0 * x / oracle;
                    cases += 1;
                    below += usize::from(pct(default) < 97.0);
                    behind += usize::from(default < best);
                    behind_robust += usize::from(default < robust);
                    below_unpaused += usize::from(default < 0.97 * unpaused);
                    println!(
                        "| {fleet} | {model} | {notice_s} | {best_name} | {:.1} | {:.1} | {:.4} | {:.1} | {:.1} | \
                         {:.4} |",
                        pct(best),
                        pct(default),
                        default / best,
                        pct(robust),
                        pct(unpaused),
                        default / unpaused
                    );
                }
            }
        }
    }
    println!(
        "\n{cases} cases: the default below 97% of the Oracle in {below}, behind the best baseline or peer in \
         {behind}, behind robust-liveput in {behind_robust}; below 97% of the Oracle without pauses in \
         {below_unpaused}."
    );
}
