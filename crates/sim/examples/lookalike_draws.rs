//! The default policy on many fresh draws of the look-alikes fitted to the
//! public p3 and g4dn traces (`SynthSpec::fitted`, 24 h each), with and
//! without its check of its own moves at the low end of the churn estimate
//! (`RobustLiveput::defer_sigmas`), and without it but with a guard that
//! acts only on significant leads (`GuardSettings::significance`, two
//! standard deviations), and with its guard judging the real job over the
//! whole run rather than per tenure (`GuardSettings::tenure_regret`), and
//! with a proven planner still checking the low end
//! (`GuardSettings::trust_when_proven` off): the
//! generalisation table scores four
//! draws of every family against every baseline and peer; this scores tens of
//! draws of the two families whose bursts are rarest and costliest, against
//! the Oracle and reactive (the best other row on every look-alike case of
//! that table), quickly enough to see the spread.
//!
//! `cargo run --release -p parcae-sim --example lookalike_draws -- MODEL
//! aws-p3-like|aws-g4dn-like NOTICE_MS FIRST_SEED LAST_SEED` (from the
//! workspace root; about a second per draw) prints one line per draw and a
//! summary per setting.

use std::path::Path;

use parcae_policy_core::ParallelConfig;
use parcae_policy_core::guard::{DEFAULT_DEFER_SIGMAS, DEFAULT_GUARD_SIGNIFICANCE, GuardedLiveput};
use parcae_profile::Profile;
use parcae_sim::{
    Cadenced, MigrationMode, Prices, drive_native_profiles, oracle_cadenced, reactive, simulate_cadenced,
};
use parcae_traces::synth::SynthSpec;

mod shared;

const INTERVAL_MS: u64 = 60_000;
const HORIZON: u32 = 8;
/// One variant of the default policy the draws score.
#[derive(Clone, Copy)]
struct Variant {
    name: &'static str,
    /// The low-end check's standard deviations (`RobustLiveput::defer_sigmas`).
    sigmas: f64,
    /// The guard's significance (`GuardSettings::significance`).
    significance: f64,
    /// Whether the guard judges the real job per tenure (`GuardSettings::tenure_regret`).
    tenure: bool,
    /// Whether a proven planner prices its moves at the estimate alone
    /// (`GuardSettings::trust_when_proven`).
    trust: bool,
}

/// The default, the check off, the check off under a guard that needs two
/// standard deviations, the default judging the real job over the whole run,
/// and the default checking the low end once proven.
const SETTINGS: [Variant; 5] = [
    Variant {
        name: "default",
        sigmas: DEFAULT_DEFER_SIGMAS,
        significance: DEFAULT_GUARD_SIGNIFICANCE,
        tenure: true,
        trust: true,
    },
    Variant {
        name: "at the estimate",
        sigmas: 0.0,
        significance: DEFAULT_GUARD_SIGNIFICANCE,
        tenure: true,
        trust: true,
    },
    Variant {
        name: "at the estimate, guard 2 sd",
        sigmas: 0.0,
        significance: 2.0,
        tenure: true,
        trust: true,
    },
    Variant {
        name: "real regret over the run",
        sigmas: DEFAULT_DEFER_SIGMAS,
        significance: DEFAULT_GUARD_SIGNIFICANCE,
        tenure: false,
        trust: true,
    },
    Variant {
        name: "low end once proven",
        sigmas: DEFAULT_DEFER_SIGMAS,
        significance: DEFAULT_GUARD_SIGNIFICANCE,
        tenure: true,
        trust: false,
    },
];

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let cadence = shared::take_cadence(&mut args);
    let usage = "usage: lookalike_draws MODEL aws-p3-like|aws-g4dn-like NOTICE_MS FIRST_SEED LAST_SEED \
                 [--cadence seen-so-far|whole-trace]";
    let [model, family, notice, first, last] = <[String; 5]>::try_from(args).expect(usage);
    let notice_ms: f64 = notice.parse().expect("NOTICE_MS is a number of milliseconds");
    let seeds = first.parse::<u64>().expect("FIRST_SEED")..=last.parse::<u64>().expect("LAST_SEED");
    let source = match family.as_str() {
        "aws-p3-like" => "data/traces/aws-p3/p3-events.csv",
        "aws-g4dn-like" => "data/traces/aws-g4dn/g4dn-events.csv",
        _ => panic!("{usage}"),
    };
    let (constants, _) = shared::constants();
    let profile = Profile::load(Path::new("data/profiles/p3-v100-parcae.json"))
        .and_then(|p| p.model_profile(&model, &constants))
        .expect("the p3 profile has the model");
    let recovery = constants.recovery(notice_ms).expect("the constants give a recovery");
    let real = parcae_traces::load(Path::new(source)).expect("the public trace loads");
    let prices = Prices { spot_usd_per_hour: 0.918, on_demand_usd_per_hour: 3.06 };
    // Per setting: % of the Oracle of every draw, and draws behind reactive.
    let mut shares: [Vec<f64>; SETTINGS.len()] = Default::default();
    let mut behind = [0usize; SETTINGS.len()];
    for seed in seeds {
        let series = SynthSpec::fitted(&real, INTERVAL_MS, &family, 24.0, seed)
            .and_then(|spec| spec.generate())
            .expect("the look-alike generates")
            .series(INTERVAL_MS)
            .expect("a generated trace has a series")
            .intervals;
        let system = Cadenced::new(
            cadence,
            &profile,
            &series,
            INTERVAL_MS,
            &recovery,
            constants.checkpoint_snapshot_bytes_per_ms(),
        );
        let score = |d: &[Option<ParallelConfig>]| {
            simulate_cadenced(&system, &series, INTERVAL_MS, d, prices, MigrationMode::Live, recovery)
                .expect("the decisions fit the trace")
                .totals
                .samples
        };
        let oracle =
            score(&oracle_cadenced(&system, &series, INTERVAL_MS, recovery).expect("the Oracle plans"));
        let baseline = score(&reactive(system.base(), &series));
        let mut line = format!("{family} seed {seed} {model}: reactive {:.2}%", 100.0 * baseline / oracle);
        for (i, variant) in SETTINGS.into_iter().enumerate() {
            let mut policy = GuardedLiveput::default();
            policy.planner.defer_sigmas = variant.sigmas;
            policy.settings.significance = variant.significance;
            policy.settings.tenure_regret = variant.tenure;
            policy.settings.trust_when_proven = variant.trust;
            let decisions =
                drive_native_profiles(&mut policy, &series, |k| system.at(k), recovery, INTERVAL_MS, HORIZON)
                    .expect("the native policy does not fail on a profiled model");
            let samples = score(&decisions);
            shares[i].push(100.0 * samples / oracle);
            behind[i] += usize::from(samples < baseline);
            line += &format!(
                " | {}: {:.2}% ({:.4} of reactive)",
                variant.name,
                100.0 * samples / oracle,
                samples / baseline
            );
        }
        println!("{line}");
    }
    for (i, Variant { name, .. }) in SETTINGS.into_iter().enumerate() {
        let s = &shares[i];
        let mean = s.iter().sum::<f64>() / s.len().max(1) as f64;
        let lowest = s.iter().copied().fold(f64::INFINITY, f64::min);
        let below = s.iter().filter(|&&p| p < 97.0).count();
        println!(
            "{name}: {} draws, mean {mean:.2}% of the Oracle, lowest {lowest:.2}%, {below} below 97%, {} behind reactive",
            s.len(),
            behind[i]
        );
    }
}
