//! The default policy on the Parcae paper's four one-hour segments of the p3
//! trace (`data/traces/aws-p3/parcae-reference/<model>/trace_<segment>.txt`,
//! the hours its evaluation zooms into), scored two ways:
//!
//! - **cold**: `bench` on the segment file, as a user would run it: the
//!   policy starts the hour with no history (its churn estimate is the
//!   prior alone), against the Oracle, every baseline and peer, and the
//!   artifact's recorded decisions for that hour;
//! - **in the run**: the same hour inside one run over the whole trace
//!   (`parcae-reference/<model>_*.json`, 11 h), each row's samples summed
//!   over the hour's intervals: the history before the hour is the one the
//!   artifact's recorded decisions were made with (the segment files carry
//!   the whole-trace run's decisions for those minutes), so only here do the
//!   artifact rows and the default see the same past.
//!
//! The generalisation table scores the whole p3 trace; a policy that plans
//! well over 11 hours can still start an hour badly, and these are the hours
//! the paper reports. Nothing is chosen here.
//!
//! `cargo run --release -p parcae-sim --example segments` (from the
//! workspace root; a few seconds) prints one table row per model, segment
//! and notice (120 s, AWS's, and 0, unannounced) and a summary.

use std::path::Path;

use parcae_policy_core::guard::GuardedLiveput;
use parcae_policy_core::{ModelProfile, ParallelConfig};
use parcae_profile::{CostConstants, Profile};
use parcae_sim::peers::PeerConstants;
use parcae_sim::{
    ArtifactStrategy, CadenceRule, Cadenced, MigrationMode, Prices, SimResult, drive_native_profiles,
    oracle_cadenced, simulate_cadenced,
};
use parcae_traces::{IntervalSeries, Trace};

mod shared;

const INTERVAL_MS: u64 = 60_000;
const HORIZON: u32 = 8;
const REFERENCE: &str = "data/traces/aws-p3/parcae-reference";
/// `(model, the artifact's whole-trace decisions file)`.
const MODELS: [(&str, &str); 5] = [
    ("gpt-1.5b", "gpt-1.5b_p3_gbs128_mbs1.json"),
    ("gpt-6.7b", "gpt-6.7b_gbs64_mbs1.json"),
    ("bert", "bert_p3_gbs1024_mbs8.json"),
    ("resnet152", "resnet152_gbs2048_mbs32.json"),
    ("vgg19", "vgg19_gbs2048_mbs32.json"),
];
/// `(segment, its first minute in the whole trace)`: the name gives hours x
/// 10 (`hh_55_65` starts at 5.5 h), except `ll_10_11`, which starts at 10 h
/// (`crates/traces/tests/public_traces.rs` checks every offset against the
/// whole-trace decisions).
const SEGMENTS: [(&str, usize); 4] =
    [("hh_55_65", 330), ("hl_15_25", 90), ("lh_80_90", 480), ("ll_10_11", 600)];
const NOTICES_S: [f64; 2] = [120.0, 0.0];
const PRICES: Prices = Prices { spot_usd_per_hour: 0.918, on_demand_usd_per_hour: 3.06 };

/// Every row's samples per interval of one run over a trace.
struct Rows {
    oracle: Vec<f64>,
    default: Vec<f64>,
    /// `(name, samples per interval)` of every baseline and peer.
    others: Vec<(String, Vec<f64>)>,
}

impl Rows {
    /// Every row on `trace` for `profile` under a notice of `notice_s`.
    fn of(
        trace: &Trace,
        profile: &ModelProfile,
        constants: &CostConstants,
        peer_constants: &PeerConstants,
        notice_s: f64,
        cadence: CadenceRule,
    ) -> Rows {
        let series: IntervalSeries = trace.series(INTERVAL_MS).expect("the trace has a series");
        let intervals = &series.intervals;
        let recovery = constants.recovery(notice_s * 1000.0).expect("the constants give a recovery");
        // Our rows run at the Young/Daly checkpoint cadence (as `bench`
        // scores them); the peers model their own.
        let system = Cadenced::new(
            cadence,
            profile,
            intervals,
            INTERVAL_MS,
            &recovery,
            constants.checkpoint_snapshot_bytes_per_ms(),
        );
        let samples = |r: &SimResult| r.intervals.iter().map(|i| i.samples).collect::<Vec<f64>>();
        let run = |d: &[Option<ParallelConfig>], mode| {
            samples(&simulate_cadenced(&system, intervals, INTERVAL_MS, d, PRICES, mode, recovery).unwrap())
        };
        let oracle =
            run(&oracle_cadenced(&system, intervals, INTERVAL_MS, recovery).unwrap(), MigrationMode::Live);
        let mut default = GuardedLiveput::default();
        let decisions =
            drive_native_profiles(&mut default, intervals, |k| system.at(k), recovery, INTERVAL_MS, HORIZON)
                .expect("the native policy does not fail on a profiled model");
        let default = run(&decisions, MigrationMode::Live);
        let mut others: Vec<(String, Vec<f64>)> = shared::other_rows(
            &system,
            profile,
            intervals,
            INTERVAL_MS,
            PRICES,
            recovery,
            notice_s * 1000.0,
            peer_constants,
        )
        .into_iter()
        .map(|(name, result)| (name, samples(&result)))
        .collect();
        // The artifact's rows that decide without the true future.
        let reference = trace.reference().expect("the artifact's files carry its decisions");
        for strategy in [ArtifactStrategy::ThroughputOpt, ArtifactStrategy::LiveputPredict] {
            let replay = parcae_sim::artifact(system.base(), &series, reference, strategy);
            others.push((
                format!("artifact:{}", strategy.as_str()),
                run(&replay.decisions, MigrationMode::Live),
            ));
        }
        Rows { oracle, default, others }
    }

    /// The hour from interval `start`: the Oracle's samples, the default's,
    /// and the best other row's (name, samples).
    fn hour(&self, start: usize) -> (f64, f64, (String, f64)) {
        let sum = |v: &[f64]| v[start.min(v.len())..(start + 60).min(v.len())].iter().sum::<f64>();
        let best = self
            .others
            .iter()
            .map(|(name, v)| (name.clone(), sum(v)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .expect("reactive is always scored");
        (sum(&self.oracle), sum(&self.default), best)
    }
}

/// One scoring of a segment: % of the Oracle, best other row and % of the
/// Oracle, the default's ratio to it.
struct Score {
    of_oracle: f64,
    best: String,
    best_of_oracle: f64,
    ratio: f64,
}

impl Score {
    fn of((oracle, default, (best, other)): (f64, f64, (String, f64))) -> Score {
        Score {
            of_oracle: 100.0 * default / oracle,
            best,
            best_of_oracle: 100.0 * other / oracle,
            ratio: default / other.max(1.0),
        }
    }

    fn cells(&self) -> String {
        format!("{:.1}% | {} {:.1}% | {:.4}", self.of_oracle, self.best, self.best_of_oracle, self.ratio)
    }
}

fn load(path: &str) -> Trace {
    parcae_traces::load(Path::new(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let cadence = shared::take_cadence(&mut args);
    assert!(args.is_empty(), "usage: segments [--cadence seen-so-far|whole-trace]");
    let (constants, peer_constants) = shared::constants();
    let profiles =
        Profile::load(Path::new("data/profiles/p3-v100-parcae.json")).expect("the p3 profile loads");
    println!(
        "| model | segment | notice s | cold: default, % of Oracle | best other row | default / best other \
         | in the run: default, % of Oracle | best other row | default / best other |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut scores: Vec<(&str, Score, Score)> = Vec::new();
    for (model, whole_file) in MODELS {
        let profile = profiles.model_profile(model, &constants).expect("the model is profiled");
        let whole = load(&format!("{REFERENCE}/{whole_file}"));
        for notice_s in NOTICES_S {
            let whole_rows = Rows::of(&whole, &profile, &constants, &peer_constants, notice_s, cadence);
            for (segment, start) in SEGMENTS {
                let trace = load(&format!("{REFERENCE}/{model}/trace_{segment}.txt"));
                let cold = Score::of(
                    Rows::of(&trace, &profile, &constants, &peer_constants, notice_s, cadence).hour(0),
                );
                let in_run = Score::of(whole_rows.hour(start));
                println!("| {model} | {segment} | {notice_s:.0} | {} | {} |", cold.cells(), in_run.cells());
                scores.push((model, cold, in_run));
            }
        }
    }
    println!();
    println!(
        "| model | cases | cold: below 97% of the Oracle (the best other row too) | behind the best other row | \
         worst ratio | in the run: below 97% (best other too) | behind | worst ratio |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let models = MODELS.iter().map(|(m, _)| *m).chain(std::iter::once("all"));
    for model in models {
        let cases: Vec<&(&str, Score, Score)> =
            scores.iter().filter(|(m, _, _)| model == "all" || *m == model).collect();
        let summary = |in_run: bool| {
            let scores: Vec<&Score> = cases.iter().map(|c| if in_run { &c.2 } else { &c.1 }).collect();
            let below = scores.iter().filter(|s| s.of_oracle < 97.0).count();
            let both = scores.iter().filter(|s| s.of_oracle < 97.0 && s.best_of_oracle < 97.0).count();
            let behind = scores.iter().filter(|s| s.ratio < 1.0).count();
            let worst = scores.iter().map(|s| s.ratio).fold(f64::INFINITY, f64::min);
            format!("{below} ({both}) | {behind} | {worst:.4}")
        };
        println!("| {model} | {} | {} | {} |", cases.len(), summary(false), summary(true));
    }
}
