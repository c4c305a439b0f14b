//! The generalisation table of the default policy: every trace family in
//! `data/traces` (the public AWS traces, the SkyPilot trace, the synthetic
//! stress shapes and the fitted look-alikes), three models, with AWS's notice
//! and unannounced; the policy as % of the Oracle and against the best
//! baseline or peer under the same recovery rules.
//!
//! Leave-one-family-out: the default's settings (terminal value, switching
//! margin and whether a lead must also be significant, the planner's count
//! forecast, its margin for deferring to reactive
//! and how far below the churn estimate its moves must clear it, and the
//! largest burst its churn estimate tells apart) are chosen from a small grid on every family but one, by how far
//! the worst case there falls short of the two targets (at least the
//! best baseline or peer, at least 97% of the Oracle), and the held-out
//! family is scored with that choice. A setting that only wins where it was
//! chosen shows up as a loss on the held-out family.
//!
//! `--settings 0,1` scores only those rows of the grid (they must hold the
//! default). `--fresh-seeds 11,12` also scores the grid on traces generated
//! afresh with those seeds (the stress shapes and the look-alikes, 24 h
//! each): data nothing was chosen on. `--notices 30` scores other notices
//! than AWS's 120 s and none (seconds, comma-separated; 0: unannounced).
//! `--cadence whole-trace` prices every row at the whole trace's checkpoint
//! cadence instead of the losses seen so far (`bench --cadence`).
//!
//! Beside each table, the default against reactive on every prefix of six
//! hours or more of each trace, scored as a trace of its own: whether a
//! policy that hedges ends a trace ahead of one that does not depends on
//! where the trace ends, and this says how much.
//!
//! `cargo run --release -p parcae-sim --example generalisation [-- --fresh-seeds
//! 11,12]` prints the tables as markdown (from the workspace root; about eight
//! minutes on two cores, about four more per fresh seed), and every setting's
//! summary on each set of traces.

use std::collections::BTreeMap;
use std::path::Path;

use parcae_policy_core::IntervalStats;
use parcae_policy_core::ParallelConfig;
use parcae_policy_core::count_forecast::{CountForecaster, ForecastChoice};
use parcae_policy_core::guard::{DEFAULT_FORECAST_MARGIN, GuardSettings, GuardedLiveput};
use parcae_profile::{CostConstants, Profile};
use parcae_sim::peers::PeerConstants;
use parcae_sim::{
    CadenceRule, Cadenced, MigrationMode, Prices, SimResult, drive_native_profiles, oracle_cadenced,
    simulate_cadenced,
};
use parcae_traces::synth::{Scenario, SynthSpec};

mod shared;

const INTERVAL_MS: u64 = 60_000;
const HORIZON: u32 = 8;
const MODELS: [&str; 3] = ["gpt-1.5b", "gpt-6.7b", "bert"];
/// The notices scored unless `--notices` says otherwise: AWS's and none.
const NOTICES_S: [f64; 2] = [120.0, 0.0];

/// `(family, trace file)`.
const TRACES: [(&str, &str); 9] = [
    ("aws-p3", "data/traces/aws-p3/p3-events.csv"),
    ("aws-g4dn", "data/traces/aws-g4dn/g4dn-events.csv"),
    ("skypilot", "data/traces/skypilot/aws-16node-us-east-2b-v100.json"),
    ("fleet-wipes", "data/traces/synthetic/fleet-wipes.csv"),
    ("diurnal", "data/traces/synthetic/diurnal.csv"),
    ("slow-churn", "data/traces/synthetic/slow-churn.csv"),
    ("long-calm", "data/traces/synthetic/long-calm.csv"),
    ("fitted", "data/traces/synthetic/aws-p3-like.csv"),
    ("fitted", "data/traces/synthetic/aws-g4dn-like.csv"),
];

/// One setting of the default policy: the knobs the held-out selection
/// chooses among.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Setting {
    /// The planner's terminal value, in horizons of this example's H
    /// ([`HORIZON`]; the policy counts it in intervals).
    terminal: f64,
    /// The guard's switching margin.
    margin: f64,
    /// Whether the real job's own regret also hands over to reactive.
    real_regret: bool,
    /// How many standard deviations of the score difference's noise a lead
    /// must also exceed before the guard acts on it (0: the margin alone).
    significance: f64,
    /// The planner's count forecast.
    forecast: ForecastChoice,
    /// The planner's margin for deferring to reactive's layout.
    defer: f64,
    /// The largest burst the churn estimate tells apart.
    max_burst: u32,
    /// Whether the planner defers only where its best plan moves.
    only_moves: bool,
    /// How many standard deviations below the churn estimate the planner's
    /// edge over reactive must also hold (0: at the estimate alone).
    sigmas: f64,
    /// Whether the real job is judged only over the planner's current tenure.
    tenure: bool,
    /// The fraction of the low end the planner's moves must clear until
    /// hedging has paid on the fleet (1: off).
    unproven: f64,
    /// Whether, once hedging has paid, the planner prices its moves at the
    /// estimate alone (else at the low end).
    trust: bool,
    /// Whether the guard keeps a planner shadow fed ARIMA's counts and the
    /// planner plans on whichever forecast's shadow leads.
    forecast_shadow: bool,
    /// The fraction of the score by which the other forecast's shadow must
    /// lead before the planner plans on that forecast.
    forecast_margin: f64,
    /// Whether, after a hand-over, the real job holds the planner's layout
    /// until the move to reactive's pays (else it moves at once).
    lazy_return: bool,
    /// Whether the planner prices a burst as the job meets it, shedding
    /// where that beats refilling (else as a refill of the planned layout).
    recourse: bool,
}

impl Setting {
    /// The default policy's own setting.
    fn of_default() -> Setting {
        let d = GuardedLiveput::default();
        Setting {
            terminal: d.planner.optimizer.terminal_intervals / f64::from(HORIZON),
            margin: d.settings.margin,
            real_regret: d.settings.real_regret,
            significance: d.settings.significance,
            forecast: d.planner.forecast.choice,
            defer: d.planner.optimizer.defer_margin,
            max_burst: d.planner.estimator.max_extra,
            only_moves: d.planner.optimizer.defer_only_moves,
            sigmas: d.planner.defer_sigmas,
            tenure: d.settings.tenure_regret,
            unproven: d.settings.unproven_scale,
            trust: d.settings.trust_when_proven,
            forecast_shadow: d.settings.forecast_shadow,
            forecast_margin: d.settings.forecast_margin,
            lazy_return: d.settings.lazy_return,
            recourse: d.planner.recourse,
        }
    }

    /// The policy with this setting.
    fn policy(self) -> GuardedLiveput {
        let mut guarded = GuardedLiveput::with_settings(GuardSettings {
            margin: self.margin,
            real_regret: self.real_regret,
            significance: self.significance,
            tenure_regret: self.tenure,
            unproven_scale: self.unproven,
            trust_when_proven: self.trust,
            forecast_shadow: self.forecast_shadow,
            forecast_margin: self.forecast_margin,
            lazy_return: self.lazy_return,
            ..GuardSettings::default()
        });
        guarded.planner.optimizer.terminal_intervals = self.terminal * f64::from(HORIZON);
        guarded.planner.forecast = CountForecaster::new(self.forecast);
        guarded.planner.optimizer.defer_margin = self.defer;
        guarded.planner.estimator.max_extra = self.max_burst;
        guarded.planner.optimizer.defer_only_moves = self.only_moves;
        guarded.planner.defer_sigmas = self.sigmas;
        guarded.planner.recourse = self.recourse;
        guarded
    }

    /// The setting as the tables show it.
    fn name(self) -> String {
        format!(
            "{}x, {}{}{}, {}{}, defer {}{}{}{}, bursts to {}{}{}",
            self.terminal,
            self.margin,
            match (self.real_regret, self.tenure) {
                (true, true) => ", real per tenure",
                (true, false) => ", real",
                _ => "",
            },
            if self.significance > 0.0 { format!(" and {} sd", self.significance) } else { String::new() },
            self.forecast.as_str(),
            if self.forecast_shadow {
                format!(" or ARIMA by shadow ({})", self.forecast_margin)
            } else {
                String::new()
            },
            self.defer,
            if self.only_moves { " of moves" } else { "" },
            if self.sigmas > 0.0 { format!(" at -{} sd", self.sigmas) } else { String::new() },
            match (self.unproven < 1.0, self.trust) {
                (true, true) => format!(" (x{} until proven, then the estimate)", self.unproven),
                (true, false) => format!(" (x{} until proven)", self.unproven),
                _ => String::new(),
            },
            self.max_burst,
            if self.lazy_return { "" } else { ", moves at once after a hand-over" },
            if self.recourse { "" } else { ", bursts priced as refills" }
        )
    }
}

/// A grid setting; every row keeps the real job's regret on (off lost in
/// earlier selections), judged per tenure as the default judges it.
const fn setting(
    terminal: f64,
    margin: f64,
    forecast: ForecastChoice,
    defer: f64,
    max_burst: u32,
) -> Setting {
    Setting {
        terminal,
        margin,
        real_regret: true,
        significance: 0.0,
        forecast,
        defer,
        max_burst,
        only_moves: false,
        sigmas: 0.0,
        tenure: true,
        unproven: 1.0,
        trust: true,
        forecast_shadow: true,
        forecast_margin: DEFAULT_FORECAST_MARGIN,
        lazy_return: true,
        recourse: true,
    }
}

/// [`setting`] whose planner's edge over reactive must hold `sigmas`
/// standard deviations below the churn estimate.
const fn at_low_churn(setting: Setting, sigmas: f64) -> Setting {
    Setting { sigmas, ..setting }
}

/// [`setting`] whose guard acts only on leads beyond `significance`
/// standard deviations of the score difference's noise.
const fn significant(setting: Setting, significance: f64) -> Setting {
    Setting { significance, ..setting }
}

/// [`setting`] whose guard judges the real job over the whole run (its
/// deficit from a hand-over's own migration only decays), as the default
/// did before the per-tenure regret.
const fn over_the_run(setting: Setting) -> Setting {
    Setting { tenure: false, ..setting }
}

/// [`setting`] whose planner's moves must hold at `scale` of the low end
/// until hedging has paid on the fleet.
const fn until_proven(setting: Setting, scale: f64) -> Setting {
    Setting { unproven: scale, ..setting }
}

/// [`setting`] whose planner, once proven, still checks the low end.
const fn untrusting(setting: Setting) -> Setting {
    Setting { trust: false, ..setting }
}

/// [`setting`] whose planner plans on its own forecast only, with no
/// ARIMA-fed shadow to switch to (the default before the forecast shadow).
const fn one_forecast(setting: Setting) -> Setting {
    Setting { forecast_shadow: false, ..setting }
}

/// [`setting`] whose planner switches forecast only on a lead of `margin`
/// of the score (the default's margin before the held-out fleets chose 1%).
const fn forecast_margin(setting: Setting, margin: f64) -> Setting {
    Setting { forecast_margin: margin, ..setting }
}

/// [`setting`] whose real job takes reactive's layout at once after a
/// hand-over (the default before it held the planner's until the move pays).
const fn hurried(setting: Setting) -> Setting {
    Setting { lazy_return: false, ..setting }
}

/// [`setting`] whose planner prices every burst as a refill of the planned
/// layout (the default before it priced the shed the job would make).
const fn refilling(setting: Setting) -> Setting {
    Setting { recourse: false, ..setting }
}

/// [`setting`] deferring only where the planner's best plan moves.
const fn of_moves(setting: Setting) -> Setting {
    Setting { only_moves: true, ..setting }
}

/// The default's row (the first of [`GRID`]), which several rows vary by one
/// setting.
const DEFAULT_ROW: Setting =
    until_proven(at_low_churn(setting(6.0, 0.002, ForecastChoice::Persistence, 0.0005, 6), 1.0), 0.5);

/// The grid the held-out selection chooses from: the default (deference at
/// the churn estimate, and for the planner's own moves one standard deviation
/// below it, at half that rate until hedging has paid on the fleet and at the
/// estimate alone once it has; the real job judged per tenure); the same with
/// the real job judged over the whole run, at the full low end throughout
/// (the default before the proving shadow), with a stricter check of 0.7 of
/// the low end until proven, and at the full low end once proven (the default
/// before trusting a proven planner), with no ARIMA-fed shadow to switch
/// the planner's forecast to (the default before it), and switching only on
/// a 2% lead (the default's margin before), and taking reactive's layout at
/// once after a hand-over (the default before it held the planner's until
/// the move pays), and pricing every burst as a refill of the planned layout
/// (the default before it priced the shed the job would make); and, each with the
/// full low end throughout, deference at the estimate alone and two deviations below; the
/// guard acting only on leads beyond two standard deviations of the score
/// difference's noise, with deference at one deviation and at the estimate;
/// deference only where the planner's own plan moves (it never makes the job
/// migrate: on the mixed p3+g4dn fleet it keeps 0.2 point of the 0.4 that
/// deference costs there); no deference; bursts pooled above 3, ARIMA's
/// forecast, a shorter terminal value, and other guard margins. (Settings
/// that lost in earlier selections are left out: the forecast by recent
/// error, the guard without the real job's regret, a one-horizon terminal
/// value, half-lives of 120 and 360 intervals for the churn estimate, the
/// estimate following the fleet, no deference with bursts pooled above 3.)
const GRID: [Setting; 20] = [
    DEFAULT_ROW,
    over_the_run(DEFAULT_ROW),
    setting(6.0, 0.002, ForecastChoice::Persistence, 0.0005, 6),
    at_low_churn(setting(6.0, 0.002, ForecastChoice::Persistence, 0.0005, 6), 2.0),
    significant(at_low_churn(setting(6.0, 0.002, ForecastChoice::Persistence, 0.0005, 6), 1.0), 2.0),
    significant(setting(6.0, 0.002, ForecastChoice::Persistence, 0.0005, 6), 2.0),
    of_moves(setting(6.0, 0.002, ForecastChoice::Persistence, 0.002, 6)),
    setting(6.0, 0.002, ForecastChoice::Persistence, 0.0, 6),
    at_low_churn(setting(6.0, 0.002, ForecastChoice::Persistence, 0.0005, 3), 1.0),
    one_forecast(at_low_churn(setting(6.0, 0.002, ForecastChoice::Arima, 0.0005, 6), 1.0)),
    at_low_churn(setting(3.0, 0.002, ForecastChoice::Persistence, 0.0005, 6), 1.0),
    at_low_churn(setting(6.0, 0.0, ForecastChoice::Persistence, 0.0005, 6), 1.0),
    at_low_churn(setting(6.0, 0.01, ForecastChoice::Persistence, 0.0005, 6), 1.0),
    at_low_churn(setting(6.0, 0.002, ForecastChoice::Persistence, 0.0005, 6), 1.0),
    until_proven(at_low_churn(setting(6.0, 0.002, ForecastChoice::Persistence, 0.0005, 6), 1.0), 0.7),
    untrusting(DEFAULT_ROW),
    one_forecast(DEFAULT_ROW),
    forecast_margin(DEFAULT_ROW, 0.02),
    hurried(DEFAULT_ROW),
    refilling(DEFAULT_ROW),
];

/// One (trace, model, notice) case: the references and the policy per setting.
struct Case {
    family: &'static str,
    trace: String,
    model: &'static str,
    notice_s: f64,
    oracle: f64,
    /// The best row other than Ideal, the Oracle and on-demand, and its name.
    best_other: (f64, String),
    /// The policy's samples per grid setting.
    policy: Vec<f64>,
    /// The default setting against reactive on the trace's prefixes.
    prefixes: Prefixes,
}

/// The shortest prefix of a trace scored as a trace of its own, in intervals
/// (six hours).
const MIN_PREFIX_INTERVALS: usize = 360;

/// The default setting against reactive on every prefix of a trace of at
/// least [`MIN_PREFIX_INTERVALS`], each scored as a trace of its own. The
/// policy is causal, so its decisions on a prefix are the full run's, and a
/// prefix's samples are the full run's up to its end (the checkpoint cadence
/// stays the whole trace's). Whether the default is behind reactive at the
/// end of a trace depends on where the trace ends; this says how much.
#[derive(Debug, Clone, Copy, Default)]
struct Prefixes {
    /// Prefixes scored.
    count: usize,
    /// Prefixes where the default trails reactive.
    behind: usize,
    /// The lowest ratio of the default's samples to reactive's over them.
    lowest: f64,
    /// The ratio over the whole trace.
    whole: f64,
}

impl Prefixes {
    /// The prefixes of two runs' per-interval samples, `policy` against `reactive`.
    fn of(policy: &[f64], reactive: &[f64]) -> Prefixes {
        let (mut p, mut r) = (0.0, 0.0);
        let mut prefixes = Prefixes { lowest: f64::INFINITY, ..Prefixes::default() };
        for (k, (a, b)) in policy.iter().zip(reactive).enumerate() {
            (p, r) = (p + a, r + b);
            if k + 1 >= MIN_PREFIX_INTERVALS && r > 0.0 {
                prefixes.count += 1;
                prefixes.behind += usize::from(p < r);
                prefixes.lowest = prefixes.lowest.min(p / r);
            }
        }
        prefixes.whole = p / r;
        prefixes
    }
}

impl Case {
    /// How `setting` meets the two targets in this case: its samples
    /// over the best other row's and over 97% of the Oracle's, whichever is
    /// less (at least 1: both met).
    fn score(&self, setting: usize) -> f64 {
        let p = self.policy[setting];
        (p / self.best_other.0.max(1.0)).min(p / (0.97 * self.oracle))
    }

    /// A table row's first columns: the case and its best other row.
    fn columns(&self) -> String {
        format!(
            "{} | {} | {} | {} | {:.1}",
            self.trace,
            self.model,
            self.notice_s,
            self.best_other.1,
            100.0 * self.best_other.0 / self.oracle
        )
    }
}

#[allow(clippy::too_many_arguments, reason = "one case's coordinates and the shared inputs")]
fn run_case(
    family: &'static str,
    trace: String,
    series: &[IntervalStats],
    model: &'static str,
    notice_s: f64,
    constants: &CostConstants,
    peer_constants: &PeerConstants,
    grid: &[Setting],
    cadence: CadenceRule,
) -> Case {
    let profile = Profile::load(Path::new("data/profiles/p3-v100-parcae.json"))
        .and_then(|p| p.model_profile(model, constants))
        .expect("the p3 profile loads");
    let recovery = constants.recovery(notice_s * 1000.0).expect("the constants give a recovery");
    let prices = Prices { spot_usd_per_hour: 0.918, on_demand_usd_per_hour: 3.06 };
    // Our rows run at the Young/Daly checkpoint cadence (as `bench` scores
    // them); the peers model their own.
    let system = Cadenced::new(
        cadence,
        &profile,
        series,
        INTERVAL_MS,
        &recovery,
        constants.checkpoint_snapshot_bytes_per_ms(),
    );
    let run = |d: &[Option<ParallelConfig>], mode| {
        simulate_cadenced(&system, series, INTERVAL_MS, d, prices, mode, recovery).unwrap()
    };
    let score = |d: &[Option<ParallelConfig>], mode| run(d, mode).totals.samples;
    let per_interval = |r: &SimResult| r.intervals.iter().map(|i| i.samples).collect::<Vec<f64>>();
    let oracle =
        score(&oracle_cadenced(&system, series, INTERVAL_MS, recovery).unwrap(), MigrationMode::Live);
    let others = shared::other_rows(
        &system,
        &profile,
        series,
        INTERVAL_MS,
        prices,
        recovery,
        notice_s * 1000.0,
        peer_constants,
    );
    let reactive_per_interval = per_interval(&others[0].1);
    let mut prefixes = Prefixes::default();
    let best_other = others
        .into_iter()
        .map(|(name, result)| (result.totals.samples, name))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .unwrap();
    let policy = grid
        .iter()
        .map(|setting| {
            let mut guarded = setting.policy();
            let decisions =
                drive_native_profiles(&mut guarded, series, |k| system.at(k), recovery, INTERVAL_MS, HORIZON)
                    .expect("the native policy does not fail on a profiled model");
            let result = run(&decisions, MigrationMode::Live);
            if *setting == Setting::of_default() {
                prefixes = Prefixes::of(&per_interval(&result), &reactive_per_interval);
            }
            result.totals.samples
        })
        .collect();
    Case { family, trace, model, notice_s, oracle, best_other, policy, prefixes }
}

/// One trace to score: its family, file name and intervals.
struct ScoredTrace {
    family: &'static str,
    name: String,
    series: Vec<IntervalStats>,
}

/// Every (trace, model, notice) case of `traces`, the policy scored with
/// each of `grid`, on up to four threads; in the order of `traces`.
fn run_all(
    traces: &[ScoredTrace],
    notices_s: &[f64],
    grid: &[Setting],
    constants: &CostConstants,
    peer_constants: &PeerConstants,
    cadence: CadenceRule,
) -> Vec<Case> {
    let jobs: Vec<(&ScoredTrace, &'static str, f64)> = traces
        .iter()
        .flat_map(|t| MODELS.iter().flat_map(move |&m| notices_s.iter().map(move |&n| (t, m, n))))
        .collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let cases = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&(t, m, n)) = jobs.get(i) else { break };
                    let case = run_case(
                        t.family,
                        t.name.clone(),
                        &t.series,
                        m,
                        n,
                        constants,
                        peer_constants,
                        grid,
                        cadence,
                    );
                    eprintln!("{}/{}: {} {} {} s", i + 1, jobs.len(), case.trace, m, n);
                    cases.lock().unwrap().push((i, case));
                }
            });
        }
    });
    let mut cases = cases.into_inner().unwrap();
    cases.sort_by_key(|(i, _)| *i);
    cases.into_iter().map(|(_, c)| c).collect()
}

/// Traces generated afresh with each of `seeds` (none is in the repository,
/// so nothing was chosen on them): the four stress shapes and look-alikes of
/// the public AWS traces, 24 h each.
fn fresh_traces(seeds: &[u64]) -> Vec<ScoredTrace> {
    let mut traces = Vec::new();
    for &seed in seeds {
        let mut specs: Vec<(&'static str, SynthSpec)> =
            Scenario::ALL.iter().map(|s| (s.name(), s.spec(24.0, seed))).collect();
        for (family, path) in [
            ("aws-p3-like", "data/traces/aws-p3/p3-events.csv"),
            ("aws-g4dn-like", "data/traces/aws-g4dn/g4dn-events.csv"),
        ] {
            let real = parcae_traces::load(Path::new(path)).expect("public trace loads");
            let spec =
                SynthSpec::fitted(&real, INTERVAL_MS, family, 24.0, seed).expect("the public trace fits");
            specs.push((family, spec));
        }
        for (family, spec) in specs {
            let trace = spec.generate().expect("a synthetic trace generates");
            traces.push(ScoredTrace {
                family,
                name: format!("{family} seed {seed}"),
                series: trace.series(INTERVAL_MS).expect("a synthetic trace has a series").intervals,
            });
        }
    }
    traces
}

/// The flags this example takes, each followed by a comma-separated list.
const FLAGS: [&str; 3] = ["--fresh-seeds", "--notices", "--settings"];
const USAGE: &str = "usage: generalisation [--settings ROWS] [--fresh-seeds SEEDS] [--notices SECONDS] \
                     [--cadence seen-so-far|whole-trace] \
                     (each a comma-separated list; see the file's documentation)";

/// Exits with the usage on `--help` or on an argument that is not one of
/// [`FLAGS`] with its list: a misspelt flag would otherwise score the whole
/// default grid for minutes and print tables that silently ignored it.
fn check_args(args: &[String]) {
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        if arg == "--help" || arg == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        if !FLAGS.contains(&arg.as_str()) {
            eprintln!("generalisation: unknown argument {arg:?}\n{USAGE}");
            std::process::exit(2);
        }
        rest.next();
    }
}

fn main() {
    let mut args: Vec<String> = std::env::args().collect();
    let cadence = shared::take_cadence(&mut args);
    check_args(&args);
    let (constants, peer_constants) = shared::constants();
    let fresh_seeds: Vec<u64> =
        shared::list_arg(&args, "--fresh-seeds", "seeds (unsigned integers)").unwrap_or_default();
    // `--notices 30` scores other notices (seconds; 0: unannounced).
    let notices_s: Vec<f64> = shared::list_arg(&args, "--notices", "seconds (numbers; 0: unannounced)")
        .unwrap_or_else(|| NOTICES_S.to_vec());
    let traces: Vec<ScoredTrace> = TRACES
        .iter()
        .map(|&(family, path)| ScoredTrace {
            family,
            name: path.rsplit('/').next().unwrap().to_string(),
            series: parcae_traces::load(Path::new(path))
                .expect("trace loads")
                .series(INTERVAL_MS)
                .unwrap()
                .intervals,
        })
        .collect();
    // `--settings 0,1` scores only those rows of the grid (quicker).
    let grid: Vec<Setting> =
        match shared::list_arg::<usize>(&args, "--settings", "grid rows (indices from 0)") {
            Some(rows) => rows
                .into_iter()
                .map(|row| {
                    *GRID
                        .get(row)
                        .unwrap_or_else(|| panic!("--settings: row {row}: the grid has {}", GRID.len()))
                })
                .collect(),
            None => GRID.to_vec(),
        };
    let cases = run_all(&traces, &notices_s, &grid, &constants, &peer_constants, cadence);

    // Leave one family out: on the remaining families, the setting that falls
    // least short of the two targets (the best other row, and 97% of
    // the Oracle) in its worst case, then in its next worst, and so on
    // (leximin); an exact tie keeps the earlier setting of the grid.
    let families: Vec<&str> = {
        let mut f: Vec<&str> = cases.iter().map(|c| c.family).collect();
        f.dedup();
        f
    };
    let shortfalls = |setting: usize, keep: &dyn Fn(&Case) -> bool| {
        let mut scores: Vec<f64> = cases.iter().filter(|c| keep(c)).map(|c| c.score(setting)).collect();
        scores.sort_by(f64::total_cmp);
        scores
    };
    let mut chosen: BTreeMap<&str, usize> = BTreeMap::new();
    for &held_out in &families {
        let training = |c: &Case| c.family != held_out;
        let mut best = (0, shortfalls(0, &training));
        for setting in 1..grid.len() {
            let scores = shortfalls(setting, &training);
            let better = scores
                .iter()
                .zip(&best.1)
                .map(|(a, b)| a.total_cmp(b))
                .find(|o| o.is_ne())
                .is_some_and(|o| o.is_gt());
            if better {
                best = (setting, scores);
            }
        }
        chosen.insert(held_out, best.0);
    }
    println!(
        "Leave-one-family-out: the setting (terminal horizons, guard margin, `real` when the real \
         job's own regret also hands over and `and N sd` when the guard acts only on leads beyond N \
         standard deviations of their noise, the planner's count forecast, its margin for deferring to \
         reactive and how many standard deviations below the churn estimate its moves must also \
         clear it (`xF until proven`: F of that low end until hedging has paid on the fleet, `then the \
         estimate` when a proven planner is trusted), and the largest burst its churn estimate tells \
         apart) chosen without each family, and that family scored with it; beside \
         it, the default setting on every family.\n"
    );
    println!(
        "| family | trace | model | notice s | best other row | its % of Oracle | default: % of Oracle | \
         default / best other | held out: chosen setting | held out: % of Oracle | held out / best other |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let default =
        grid.iter().position(|&s| s == Setting::of_default()).expect("the default setting is in the grid");
    let (mut worst, mut worst_default, mut below_97, mut below_97_default) =
        (f64::INFINITY, f64::INFINITY, 0, 0);
    for c in &cases {
        let s = chosen[c.family];
        let (p, d) = (c.policy[s], c.policy[default]);
        let other = c.best_other.0.max(1.0);
        worst = worst.min(p / other);
        worst_default = worst_default.min(d / other);
        below_97 += usize::from(p < 0.97 * c.oracle);
        below_97_default += usize::from(d < 0.97 * c.oracle);
        println!(
            "| {} | {} | {:.1} | {:.4} | {} | {:.1} | {:.4} |",
            c.family,
            c.columns(),
            100.0 * d / c.oracle,
            d / other,
            grid[s].name(),
            100.0 * p / c.oracle,
            p / other
        );
    }
    println!(
        "\ndefault ({}): worst policy / best other row {worst_default:.4}, {below_97_default} of {} cases \
         below 97% of the Oracle; held out: worst {worst:.4}, {below_97} below 97%",
        grid[default].name(),
        cases.len()
    );
    print_prefixes("the table's traces", &cases);
    print_settings("the table's traces", &grid, &cases);
    if !fresh_seeds.is_empty() {
        print_fresh(
            &fresh_traces(&fresh_seeds),
            &notices_s,
            &grid,
            default,
            &fresh_seeds,
            &constants,
            &peer_constants,
            cadence,
        );
    }
}

/// Every grid setting's worst case, cases behind the best other row and below
/// 97% of the Oracle, and its mean ratio to the best other row, over `cases`.
fn print_settings(what: &str, grid: &[Setting], cases: &[Case]) {
    println!("\nEvery setting on {what}:\n");
    println!(
        "| setting | worst / best other | cases behind | below 97% | mean / best other | behind | below 97% of the Oracle |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (i, &setting) in grid.iter().enumerate() {
        let ratios: Vec<f64> = cases.iter().map(|c| c.policy[i] / c.best_other.0.max(1.0)).collect();
        let worst = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let behind = ratios.iter().filter(|&&r| r < 1.0).count();
        let below = cases.iter().filter(|c| c.policy[i] < 0.97 * c.oracle).count();
        let mean = ratios.iter().sum::<f64>() / ratios.len().max(1) as f64;
        let which: Vec<String> = cases
            .iter()
            .zip(&ratios)
            .filter(|&(_, &r)| r < 1.0)
            .map(|(c, r)| format!("{} {} {} s: {r:.4}", c.trace, c.model, c.notice_s))
            .collect();
        let low: Vec<String> = cases
            .iter()
            .filter(|c| c.policy[i] < 0.97 * c.oracle)
            .map(|c| {
                format!("{} {} {} s: {:.1}%", c.trace, c.model, c.notice_s, 100.0 * c.policy[i] / c.oracle)
            })
            .collect();
        println!(
            "| {} | {worst:.4} | {behind} | {below} | {mean:.4} | {} | {} |",
            setting.name(),
            which.join("; "),
            low.join("; ")
        );
    }
}

/// The default setting alone on traces generated afresh ([`fresh_traces`]).
#[allow(clippy::too_many_arguments, reason = "the traces, what to score and the shared inputs")]
fn print_fresh(
    traces: &[ScoredTrace],
    notices_s: &[f64],
    grid: &[Setting],
    default: usize,
    seeds: &[u64],
    constants: &CostConstants,
    peer_constants: &PeerConstants,
    cadence: CadenceRule,
) {
    let cases = run_all(traces, notices_s, grid, constants, peer_constants, cadence);
    println!("\nThe default on traces generated afresh (seeds {seeds:?}, none in the repository):\n");
    println!(
        "| trace | model | notice s | best other row | its % of Oracle | default: % of Oracle | default / best other |"
    );
    println!("|---|---|---|---|---|---|---|");
    let (mut worst, mut below_97) = (f64::INFINITY, 0);
    for c in &cases {
        let (d, other) = (c.policy[default], c.best_other.0.max(1.0));
        worst = worst.min(d / other);
        below_97 += usize::from(d < 0.97 * c.oracle);
        println!("| {} | {:.1} | {:.4} |", c.columns(), 100.0 * d / c.oracle, d / other);
    }
    println!(
        "\nfresh traces: worst default / best other row {worst:.4}, {below_97} of {} cases below 97% of the Oracle",
        cases.len()
    );
    print_prefixes("the fresh traces", &cases);
    print_settings("the fresh traces", grid, &cases);
}

/// The default against reactive on every prefix of `cases`' traces
/// ([`Prefixes`]): the cases where it trails at some prefix.
fn print_prefixes(what: &str, cases: &[Case]) {
    let trailing: Vec<&Case> = cases.iter().filter(|c| c.prefixes.behind > 0).collect();
    let (count, behind) =
        cases.iter().fold((0, 0), |(n, b), c| (n + c.prefixes.count, b + c.prefixes.behind));
    let lowest = cases.iter().map(|c| c.prefixes.lowest).fold(f64::INFINITY, f64::min);
    println!(
        "\nThe default against reactive on every prefix of {what} of {} h or more, each scored as a trace \
         of its own: behind at some prefix in {} of {} cases, at {behind} of {count} prefixes, lowest \
         {lowest:.4}.\n",
        MIN_PREFIX_INTERVALS as u64 * INTERVAL_MS / 3_600_000,
        trailing.len(),
        cases.len()
    );
    if trailing.is_empty() {
        return;
    }
    println!("| trace | model | notice s | whole trace / reactive | prefixes behind | lowest |");
    println!("|---|---|---|---|---|---|");
    for c in trailing {
        println!(
            "| {} | {} | {} | {:.4} | {} of {} | {:.4} |",
            c.trace,
            c.model,
            c.notice_s,
            c.prefixes.whole,
            c.prefixes.behind,
            c.prefixes.count,
            c.prefixes.lowest
        );
    }
}
