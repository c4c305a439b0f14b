//! `parcae-host bench`: scores policies and reference baselines on traces under
//! the liveput cost model ([`parcae_sim`]).
//!
//! For every trace, every requested baseline and every policy produces one
//! decision per interval; [`parcae_sim::simulate`] turns each sequence into
//! expected samples, migrations, time lost and money. Policies run through the
//! same control loop as `replay` ([`crate::commands::replay::replay`]), sandbox and
//! fallbacks included.
//!
//! Baselines:
//! - `ideal`: not a decision sequence; the fastest layout that fits, every
//!   interval, with no overhead at all (an upper bound);
//! - `oracle`: the plan that maximises expected samples over the whole trace,
//!   knowing the future (the DP planner);
//! - `liveput-truth`: at each interval, plan the next H true intervals, apply
//!   the first step (receding horizon);
//! - `reactive`: the throughput-optimal layout for the instances alive now,
//!   reached by live migration;
//! - `reactive-restart`: the same decisions, but every availability change
//!   restarts the job from a checkpoint, as the Parcae artifact's reactive
//!   baseline (`parcae_sim::simulate_with` with
//!   [`parcae_sim::MigrationMode::RestartOnChange`]);
//! - `artifact`: the Parcae artifact's recorded decisions
//!   (`artifact:throughput-opt`, `artifact:liveput-truth`,
//!   `artifact:liveput-predict`) when the trace file carries them.
//!
//! Peers (`--peers`): the published systems modelled on the same profile with
//! their own overheads ([`parcae_sim::peers`]): `bamboo`, `varuna`, `oobleck`
//! and `on-demand` (a fixed fleet at the on-demand price, the cost
//! reference), with constants from `profiles/peer-constants.json` (embedded;
//! `--peer-constants` for another file).

pub(crate) mod svg;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, ValueEnum};
use comfy_table::{CellAlignment, Table, presets};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use parcae_policy_core::{IntervalStats, ModelProfile, ParallelConfig};
use parcae_runtime::{FaultCounts, GuardedPolicy, PolicyComponent};
use parcae_sim::{
    ArtifactReplay, ArtifactStrategy, IssueReason, Peer, PeerConstants, PeerError, PeerSettings, Prices,
    SimResult,
};
use parcae_traces::{IntervalSeries, Trace};
use serde::Serialize;

use crate::cli::{ProfileArgs, SandboxArgs, TraceInput};
use crate::commands::replay::ReplaySettings;
use crate::embedded::DEMO_TRACE;
use crate::policies::load_policy;

/// A reference decision maker that needs no policy component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Baseline {
    /// Fastest layout that fits, no overhead (upper bound, not a decision sequence).
    Ideal,
    /// Best plan over the whole trace with the true future.
    Oracle,
    /// Throughput-optimal layout for the instances alive now, live migrations.
    Reactive,
    /// The same decisions, restarting from a checkpoint on every availability
    /// change (the Parcae artifact's reactive baseline).
    ReactiveRestart,
    /// The Parcae artifact's recorded decisions (traces that carry them).
    Artifact,
    /// Receding-horizon liveput planning with the true future.
    LiveputTruth,
}

impl Baseline {
    /// Every baseline, the default of `--baselines`.
    pub const ALL: [Baseline; 6] = [
        Baseline::Ideal,
        Baseline::Oracle,
        Baseline::Reactive,
        Baseline::ReactiveRestart,
        Baseline::Artifact,
        Baseline::LiveputTruth,
    ];

    /// Name on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Baseline::Ideal => "ideal",
            Baseline::Oracle => "oracle",
            Baseline::Reactive => "reactive",
            Baseline::ReactiveRestart => "reactive-restart",
            Baseline::Artifact => "artifact",
            Baseline::LiveputTruth => "liveput-truth",
        }
    }
}

/// A peer system to compare with (`--peers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum PeerArg {
    /// Bamboo (NSDI'23): redundant computation of the successor's stage.
    Bamboo,
    /// Varuna (EuroSys'22): checkpoints, restart on every fleet change.
    Varuna,
    /// Oobleck (SOSP'23): pipeline templates, f + 1 replicas.
    Oobleck,
    /// A fixed on-demand fleet (the cost reference).
    OnDemand,
    /// All four.
    All,
}

impl PeerArg {
    /// The peers a list of arguments names, in report order, once each.
    pub fn expand(args: &[PeerArg]) -> Vec<Peer> {
        let mut peers: Vec<Peer> = args
            .iter()
            .flat_map(|a| match a {
                PeerArg::Bamboo => vec![Peer::Bamboo],
                PeerArg::Varuna => vec![Peer::Varuna],
                PeerArg::Oobleck => vec![Peer::Oobleck],
                PeerArg::OnDemand => vec![Peer::OnDemand],
                PeerArg::All => Peer::ALL.to_vec(),
            })
            .collect();
        peers.sort();
        peers.dedup();
        peers
    }
}

/// The peer constants embedded in the binary (`profiles/peer-constants.json`).
pub const PEER_CONSTANTS: (&str, &str) =
    ("data/profiles/peer-constants.json", include_str!("../../../../data/profiles/peer-constants.json"));

/// Parses and checks peer constants; errors name the file and the line or field.
pub fn parse_peer_constants(text: &str, file: &Path) -> anyhow::Result<PeerConstants> {
    let constants: PeerConstants = serde_json::from_str(text.strip_prefix('\u{feff}').unwrap_or(text))
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    constants.validate().map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    Ok(constants)
}

/// Loads peer constants from `path`, or the embedded ones.
pub fn load_peer_constants(path: Option<&Path>) -> anyhow::Result<PeerConstants> {
    match path {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            parse_peer_constants(&text, path)
        }
        None => parse_peer_constants(PEER_CONSTANTS.1, Path::new(PEER_CONSTANTS.0)),
    }
}

/// Arguments of `parcae-host bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Traces to score on (default: the embedded demo trace). Repeatable, or
    /// several after one `--trace`.
    #[arg(long, num_args = 1.., value_name = "FILE")]
    pub trace: Vec<PathBuf>,
    #[command(flatten)]
    pub input: TraceInput,
    /// Policy component to score (`.wasm` or `builtin:NAME`); repeatable.
    #[arg(long = "policy", value_name = "POLICY")]
    pub policies: Vec<String>,
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Intervals each plan covers (H): for the policies and liveput-truth.
    #[arg(long, default_value_t = 8)]
    pub horizon: u32,
    /// Baselines to score, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "LIST", default_values_t = Baseline::ALL)]
    pub baselines: Vec<Baseline>,
    /// Published systems to compare with, comma-separated (bamboo, varuna,
    /// oobleck, on-demand, or all), modelled on the same profile.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "LIST")]
    pub peers: Vec<PeerArg>,
    /// The peers' constants (default: the embedded profiles/peer-constants.json).
    #[arg(long, value_name = "FILE")]
    pub peer_constants: Option<PathBuf>,
    /// Seeded draws of which instances are preempted, for the peers that
    /// depend on it (Bamboo).
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub peer_runs: u32,
    /// Write one JSON record per (trace, policy) to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write one CSV row per (trace, policy) to this file.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Write one SVG plot per trace into this directory (created if missing).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// How one benchmark runs.
#[derive(Debug, Clone)]
pub struct BenchSettings {
    /// Length of one interval, ms.
    pub interval_ms: u64,
    /// Plan horizon H (intervals).
    pub horizon: u32,
    /// Baselines to score.
    pub baselines: Vec<Baseline>,
    /// Prices of one instance.
    pub prices: Prices,
    /// Peer systems to compare with.
    pub peers: Vec<Peer>,
    /// Their constants (needed when `peers` is not empty).
    pub peer_constants: Option<PeerConstants>,
    /// Seeded draws for the peers that depend on who is preempted.
    pub peer_runs: u32,
}

impl BenchSettings {
    /// Settings with no peers.
    pub fn new(interval_ms: u64, horizon: u32, baselines: Vec<Baseline>, prices: Prices) -> Self {
        Self {
            interval_ms,
            horizon,
            baselines,
            prices,
            peers: Vec::new(),
            peer_constants: None,
            peer_runs: 64,
        }
    }
}

/// What produced a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RowKind {
    Baseline,
    Policy,
    /// A published system modelled on the same profile.
    Peer,
    /// A real run of `parcae-host run` (its event log carries this record).
    Run,
}

/// How a policy behaved in the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyHealth {
    pub predictor_guest_answers: u64,
    pub predictor_fallbacks: u64,
    pub optimizer_guest_answers: u64,
    pub optimizer_fallbacks: u64,
    /// Faults of both interfaces.
    pub faults: u64,
    /// Human-readable counters (`predictor: ...; optimizer: ...`).
    pub summary: String,
}

impl PolicyHealth {
    pub(crate) fn new(predictor: &FaultCounts, optimizer: &FaultCounts) -> Self {
        Self {
            predictor_guest_answers: predictor.guest_answers,
            predictor_fallbacks: predictor.fallbacks,
            optimizer_guest_answers: optimizer.guest_answers,
            optimizer_fallbacks: optimizer.fallbacks,
            faults: predictor.total_faults() + optimizer.total_faults(),
            summary: format!("predictor: {predictor}; optimizer: {optimizer}"),
        }
    }
}

/// Recorded artifact layouts that could not be replayed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArtifactHealth {
    /// Layouts not in the profile (paused instead).
    pub not_profiled: usize,
    /// Layouts that need more instances than the series has (paused instead).
    pub does_not_fit: usize,
    /// Intervals with no recorded decision (paused).
    pub missing_intervals: usize,
    /// Rows off the interval grid (ignored).
    pub misaligned_rows: usize,
    /// The first few problems, spelled out.
    pub examples: Vec<String>,
}

impl ArtifactHealth {
    fn new(replay: &ArtifactReplay) -> Self {
        let count = |reason| replay.issues.iter().filter(|i| i.reason == reason).count();
        Self {
            not_profiled: count(IssueReason::NotProfiled),
            does_not_fit: count(IssueReason::DoesNotFit),
            missing_intervals: replay.missing_intervals,
            misaligned_rows: replay.misaligned_rows,
            examples: replay.issues.iter().take(3).map(ToString::to_string).collect(),
        }
    }

    fn is_clean(&self) -> bool {
        self.not_profiled == 0
            && self.does_not_fit == 0
            && self.missing_intervals == 0
            && self.misaligned_rows == 0
    }
}

/// One scored decision maker on one trace.
#[derive(Debug, Clone)]
pub struct Row {
    /// Display name (`ideal`, `artifact:liveput-truth`, `policy.wasm`...).
    pub name: String,
    /// The policy argument as given, for policies.
    pub spec: Option<String>,
    pub kind: RowKind,
    pub result: SimResult,
    /// Samples the policy itself expected (sum of its first plan steps).
    pub policy_expected_samples: Option<f64>,
    pub health: Option<PolicyHealth>,
    pub artifact: Option<ArtifactHealth>,
    /// Which peer, for peer rows.
    pub peer: Option<Peer>,
}

/// Everything scored on one trace.
#[derive(Debug, Clone)]
pub struct TraceBench {
    /// Display name of the trace (its file name).
    pub name: String,
    pub path: PathBuf,
    pub series: IntervalSeries,
    pub rows: Vec<Row>,
    /// Samples of the Ideal bound.
    pub ideal_samples: f64,
    /// Samples of the Oracle, when it was scored.
    pub oracle_samples: Option<f64>,
    /// Things the reader should know (unavailable baselines...).
    pub notes: Vec<String>,
}

/// A policy to score: its argument and its loaded component.
#[derive(Clone)]
pub struct PolicyEntry {
    pub spec: String,
    pub component: Arc<PolicyComponent>,
}

impl PolicyEntry {
    /// Display name: the file name of a path, the spec of a built-in.
    pub fn name(&self) -> String {
        if self.spec.starts_with(crate::embedded::BUILTIN_PREFIX) {
            return self.spec.clone();
        }
        Path::new(&self.spec)
            .file_name()
            .map_or_else(|| self.spec.clone(), |n| n.to_string_lossy().into_owned())
    }

    /// A fresh guarded policy (new instance, zero counters): the component
    /// serves every interface it exports, the built-ins the others.
    fn guarded(&self) -> GuardedPolicy {
        let exports = self.component.exports();
        GuardedPolicy::new(
            exports.predictor.then(|| self.component.clone()),
            exports.optimizer.then(|| self.component.clone()),
        )
    }
}

/// Rows the baselines of `settings` produce per trace (sizes the progress bar).
fn baseline_units(settings: &BenchSettings) -> u64 {
    settings.baselines.iter().map(|b| if *b == Baseline::Artifact { 3 } else { 1 }).sum::<u64>()
        + settings.peers.len() as u64
}

/// Scores every baseline of `settings` and every policy on one trace.
pub fn bench_trace(
    trace: &Trace,
    profile: &ModelProfile,
    policies: &[PolicyEntry],
    settings: &BenchSettings,
    progress: &ProgressBar,
) -> anyhow::Result<TraceBench> {
    let name = trace.name();
    let interval_ms = settings.interval_ms;
    let series = trace.series(interval_ms)?;
    let intervals = &series.intervals;
    let wants = |b: Baseline| settings.baselines.contains(&b);
    let simulate = |decisions: &[Option<ParallelConfig>], what: &str| {
        parcae_sim::simulate(profile, intervals, interval_ms, decisions, settings.prices)
            .with_context(|| format!("{name}: scoring {what}"))
    };
    let baseline_row = |name: &str, result: SimResult| Row {
        name: name.to_string(),
        spec: None,
        kind: RowKind::Baseline,
        result,
        policy_expected_samples: None,
        health: None,
        artifact: None,
        peer: None,
    };
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let step = |what: &str| progress.set_message(format!("{name}: {what}"));

    step("ideal");
    let ideal = parcae_sim::ideal(profile, intervals, interval_ms, settings.prices)?;
    let ideal_samples = ideal.totals.samples;
    if wants(Baseline::Ideal) {
        rows.push(baseline_row("ideal", ideal));
        progress.inc(1);
    }

    let mut oracle_samples = None;
    if wants(Baseline::Oracle) {
        step("oracle");
        let decisions = parcae_sim::oracle(profile, intervals, interval_ms)
            .with_context(|| format!("{name}: planning the oracle"))?;
        let result = simulate(&decisions, "the oracle")?;
        oracle_samples = Some(result.totals.samples);
        rows.push(baseline_row("oracle", result));
        progress.inc(1);
    }

    if wants(Baseline::LiveputTruth) {
        step("liveput-truth");
        let decisions = parcae_sim::liveput_truth(profile, intervals, interval_ms, settings.horizon as usize)
            .with_context(|| format!("{name}: planning liveput-truth"))?;
        rows.push(baseline_row("liveput-truth", simulate(&decisions, "liveput-truth")?));
        progress.inc(1);
    }

    if wants(Baseline::Reactive) {
        step("reactive");
        let decisions = parcae_sim::reactive(profile, intervals);
        rows.push(baseline_row("reactive", simulate(&decisions, "reactive")?));
        progress.inc(1);
    }

    if wants(Baseline::ReactiveRestart) {
        step("reactive-restart");
        let decisions = parcae_sim::reactive(profile, intervals);
        let result = parcae_sim::simulate_with(
            profile,
            intervals,
            interval_ms,
            &decisions,
            settings.prices,
            parcae_sim::MigrationMode::RestartOnChange,
        )
        .with_context(|| format!("{name}: scoring reactive-restart"))?;
        rows.push(baseline_row("reactive-restart", result));
        progress.inc(1);
    }

    if wants(Baseline::Artifact) {
        match trace.reference() {
            Some(reference) => {
                for strategy in ArtifactStrategy::ALL {
                    step(&format!("artifact:{strategy}"));
                    let replay = parcae_sim::artifact(profile, &series, reference, strategy);
                    let health = ArtifactHealth::new(&replay);
                    let result = simulate(&replay.decisions, &format!("artifact:{strategy}"))?;
                    if !health.is_clean() {
                        notes.push(format!(
                            "artifact:{strategy}: {} recorded layouts not in the profile, {} that do not fit, \
                             {} intervals without a decision, {} rows off the grid: paused there{}",
                            health.not_profiled,
                            health.does_not_fit,
                            health.missing_intervals,
                            health.misaligned_rows,
                            match health.examples.first() {
                                Some(e) => format!(" (first: {e})"),
                                None => String::new(),
                            }
                        ));
                    }
                    rows.push(Row {
                        artifact: Some(health),
                        ..baseline_row(&format!("artifact:{strategy}"), result)
                    });
                    progress.inc(1);
                }
            }
            None => {
                notes.push("artifact: the trace file records no decisions".to_string());
                progress.inc(3);
            }
        }
    }

    if !settings.peers.is_empty() {
        let constants =
            settings.peer_constants.as_ref().context("peers asked for without their constants")?;
        let peer_settings =
            PeerSettings { interval_ms, prices: settings.prices, runs: settings.peer_runs.max(1), seed: 1 };
        for &peer in &settings.peers {
            step(peer.as_str());
            let run = match peer {
                Peer::Bamboo => parcae_sim::peers::bamboo(profile, intervals, constants, &peer_settings),
                Peer::Varuna => parcae_sim::peers::varuna(profile, intervals, constants, &peer_settings),
                Peer::Oobleck => parcae_sim::peers::oobleck(profile, intervals, constants, &peer_settings),
                Peer::OnDemand => parcae_sim::peers::on_demand(profile, intervals, constants, &peer_settings),
            };
            progress.inc(1);
            match run {
                Ok(run) => {
                    notes.extend(run.notes.iter().cloned());
                    rows.push(Row {
                        kind: RowKind::Peer,
                        peer: Some(peer),
                        ..baseline_row(peer.as_str(), run.result)
                    });
                }
                // No published figures for this model: say so, skip the row.
                Err(e @ PeerError::MissingModel { .. }) => notes.push(format!("{e}: row skipped")),
                Err(e) => return Err(anyhow::Error::from(e).context(format!("{name}: simulating {peer}"))),
            }
        }
    }

    let fleet_max = intervals.iter().map(|s| s.instances).max().unwrap_or(0);
    let replay_settings = ReplaySettings { interval_ms, horizon: settings.horizon, fleet_max };
    for policy in policies {
        let policy_name = policy.name();
        let mut guarded = policy.guarded();
        let total = intervals.len();
        let decisions =
            crate::commands::replay::replay(intervals, profile, &mut guarded, &replay_settings, |d| {
                if d.interval % 16 == 0 || d.interval + 1 == total {
                    progress.set_message(format!("{name}: {policy_name} {}/{total}", d.interval + 1));
                }
            });
        let configs: Vec<Option<ParallelConfig>> = decisions.iter().map(|d| d.config).collect();
        let expected: f64 = decisions.iter().map(|d| d.expected_samples).sum();
        let result = simulate(&configs, &policy_name)?;
        let health = PolicyHealth::new(&guarded.predictor_counts(), &guarded.optimizer_counts());
        if health.faults > 0 {
            notes.push(format!("{policy_name}: {}", health.summary));
        }
        rows.push(Row {
            name: policy_name,
            spec: Some(policy.spec.clone()),
            kind: RowKind::Policy,
            result,
            policy_expected_samples: Some(expected),
            health: Some(health),
            artifact: None,
            peer: None,
        });
        progress.inc(1);
    }

    Ok(TraceBench {
        name,
        path: trace.source().to_path_buf(),
        series,
        rows,
        ideal_samples,
        oracle_samples,
        notes,
    })
}

/// One (trace, policy) line of `--json` and `--csv`: every figure, flat.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchRecord {
    pub trace: String,
    pub trace_path: String,
    pub model: String,
    pub policy: String,
    pub kind: RowKind,
    /// The policy argument as given (policies only).
    pub policy_spec: Option<String>,
    pub interval_ms: u64,
    pub horizon: u32,
    pub intervals: usize,
    pub hours: f64,
    pub samples: f64,
    /// Samples rolled back by restarts from checkpoint (already off `samples`).
    pub lost_samples: f64,
    pub samples_per_hour: f64,
    pub pct_of_ideal: Option<f64>,
    pub pct_of_oracle: Option<f64>,
    pub migrations_intra_stage: f64,
    pub migrations_inter_stage: f64,
    pub migrations_repartition: f64,
    pub migrations_restart: f64,
    pub migrations_total: f64,
    pub cold_starts: usize,
    pub config_changes: usize,
    pub paused_intervals: usize,
    pub migration_hours: f64,
    pub instance_hours: f64,
    pub usd_spot: f64,
    pub usd_on_demand: f64,
    pub usd_per_million_samples_spot: Option<f64>,
    pub usd_per_million_samples_on_demand: Option<f64>,
    /// Samples the policy expected itself (before migration costs as it saw them).
    pub policy_expected_samples: Option<f64>,
    pub predictor_guest_answers: Option<u64>,
    pub predictor_fallbacks: Option<u64>,
    pub optimizer_guest_answers: Option<u64>,
    pub optimizer_fallbacks: Option<u64>,
    pub policy_faults: Option<u64>,
    pub artifact_not_profiled: Option<usize>,
    pub artifact_does_not_fit: Option<usize>,
    pub artifact_missing_intervals: Option<usize>,
}

fn percent(part: f64, whole: Option<f64>) -> Option<f64> {
    whole.filter(|w| *w > 0.0).map(|w| 100.0 * part / w)
}

/// The records of one trace's rows.
pub fn records(bench: &TraceBench, model: &str, settings: &BenchSettings) -> Vec<BenchRecord> {
    bench
        .rows
        .iter()
        .map(|row| {
            let t = &row.result.totals;
            BenchRecord {
                trace: bench.name.clone(),
                trace_path: bench.path.display().to_string(),
                model: model.to_string(),
                policy: row.name.clone(),
                kind: row.kind,
                policy_spec: row.spec.clone(),
                interval_ms: settings.interval_ms,
                horizon: settings.horizon,
                intervals: t.intervals,
                hours: t.hours,
                samples: t.samples,
                lost_samples: t.lost_samples,
                samples_per_hour: t.samples_per_hour,
                pct_of_ideal: percent(t.samples, Some(bench.ideal_samples)),
                pct_of_oracle: percent(t.samples, bench.oracle_samples),
                migrations_intra_stage: t.migrations.intra_stage,
                migrations_inter_stage: t.migrations.inter_stage,
                migrations_repartition: t.migrations.repartition,
                migrations_restart: t.migrations.restart,
                migrations_total: t.migrations.total,
                cold_starts: t.cold_starts,
                config_changes: t.config_changes,
                paused_intervals: t.paused_intervals,
                migration_hours: t.migration_hours,
                instance_hours: t.instance_hours,
                usd_spot: t.usd_spot,
                usd_on_demand: t.usd_on_demand,
                usd_per_million_samples_spot: t.usd_per_million_samples_spot,
                usd_per_million_samples_on_demand: t.usd_per_million_samples_on_demand,
                policy_expected_samples: row.policy_expected_samples,
                predictor_guest_answers: row.health.as_ref().map(|h| h.predictor_guest_answers),
                predictor_fallbacks: row.health.as_ref().map(|h| h.predictor_fallbacks),
                optimizer_guest_answers: row.health.as_ref().map(|h| h.optimizer_guest_answers),
                optimizer_fallbacks: row.health.as_ref().map(|h| h.optimizer_fallbacks),
                policy_faults: row.health.as_ref().map(|h| h.faults),
                artifact_not_profiled: row.artifact.as_ref().map(|a| a.not_profiled),
                artifact_does_not_fit: row.artifact.as_ref().map(|a| a.does_not_fit),
                artifact_missing_intervals: row.artifact.as_ref().map(|a| a.missing_intervals),
            }
        })
        .collect()
}

/// `1234567.8` -> `1,234,568`.
fn thousands(value: f64) -> String {
    if !value.is_finite() {
        return value.to_string();
    }
    let digits = format!("{:.0}", value.abs());
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if value < -0.5 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn optional(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

/// The table of one trace: rows = decision makers, columns = figures.
pub fn table(bench: &TraceBench) -> Table {
    let mut table = Table::new();
    table.load_preset(presets::ASCII_MARKDOWN);
    table.set_header(vec![
        "policy",
        "samples",
        "samples/h",
        "% Ideal",
        "% Oracle",
        "intra",
        "inter",
        "repart",
        "restart",
        "h lost",
        "rolled back",
        "$ spot",
        "$ on-demand",
        "$/M spot",
        "$/M on-demand",
    ]);
    for row in &bench.rows {
        let t = &row.result.totals;
        // The on-demand fleet is never bought at the spot price.
        let spot = row.peer != Some(Peer::OnDemand);
        table.add_row(vec![
            row.name.clone(),
            thousands(t.samples),
            thousands(t.samples_per_hour),
            optional(percent(t.samples, Some(bench.ideal_samples)), 1),
            optional(percent(t.samples, bench.oracle_samples), 1),
            format!("{:.1}", t.migrations.intra_stage),
            format!("{:.1}", t.migrations.inter_stage),
            format!("{:.1}", t.migrations.repartition),
            format!("{:.1}", t.migrations.restart),
            format!("{:.2}", t.migration_hours),
            thousands(t.lost_samples),
            if spot { format!("{:.2}", t.usd_spot) } else { "-".to_string() },
            format!("{:.2}", t.usd_on_demand),
            optional(t.usd_per_million_samples_spot.filter(|_| spot), 2),
            optional(t.usd_per_million_samples_on_demand, 2),
        ]);
    }
    for column in 1..15 {
        if let Some(c) = table.column_mut(column) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    table
}

/// What the columns of the tables mean.
pub const LEGEND: &str = "Expected values under the liveput cost model (exact over which instances are preempted). \
samples: net samples trained (work rolled back by restarts taken off); intra/inter/repart/restart: expected \
reconfigurations of each kind (restart includes cold starts); h lost: expected hours spent migrating; rolled \
back: samples lost to restarts from checkpoint; $: every alive instance paid at the spot / on-demand price; \
$/M: dollars per million samples. Peers (bamboo, varuna, oobleck: published systems modelled on the same \
profile with their own overheads; on-demand: a fixed fleet bought on demand, never preempted): intra = a \
preemption absorbed without reconfiguring (Bamboo's fail-over), inter/repart = a reconfiguration from surviving \
state, restart = a restart (Varuna's from its checkpoint, Bamboo's fatal failures, cold starts).";

/// A one-line description of a trace's series.
fn describe(bench: &TraceBench, model: &str) -> String {
    let s = &bench.series.intervals;
    let (min, max) = s.iter().fold((u32::MAX, 0), |(lo, hi), x| (lo.min(x.instances), hi.max(x.instances)));
    let preemptions: u64 = s.iter().map(|x| u64::from(x.preemptions)).sum();
    let arrivals: u64 = s.iter().map(|x| u64::from(x.arrivals)).sum();
    let hours = s.len() as f64 * bench.series.interval_ms as f64 / 3_600_000.0;
    format!(
        "{} ({}), model {model}: {} intervals of {} s ({hours:.2} h), {min}..{max} instances, \
         {arrivals} arrivals, {preemptions} preemptions",
        bench.name,
        bench.path.display(),
        s.len(),
        bench.series.interval_ms / 1000,
    )
}

fn create(path: &Path) -> anyhow::Result<std::io::BufWriter<std::fs::File>> {
    let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    Ok(std::io::BufWriter::new(file))
}

/// Writes `records` as a JSON array.
pub fn write_json(records: &[BenchRecord], path: &Path) -> anyhow::Result<()> {
    let mut out = create(path)?;
    serde_json::to_writer_pretty(&mut out, records)
        .map_err(anyhow::Error::from)
        .and_then(|()| Ok(writeln!(out)?))
        .and_then(|()| Ok(out.flush()?))
        .with_context(|| format!("writing {}", path.display()))
}

/// Writes `records` as CSV with a header row.
pub fn write_csv(records: &[BenchRecord], path: &Path) -> anyhow::Result<()> {
    let mut writer = csv::Writer::from_writer(create(path)?);
    for record in records {
        writer.serialize(record).with_context(|| format!("writing {}", path.display()))?;
    }
    writer.flush().with_context(|| format!("writing {}", path.display()))
}

/// A file name for a trace's plot that no other trace of the run takes.
fn plot_name(bench: &TraceBench, model: &str, taken: &mut Vec<String>) -> String {
    let stem =
        bench.path.file_stem().map_or_else(|| "trace".to_string(), |s| s.to_string_lossy().into_owned());
    let clean = |s: &str| -> String {
        s.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect()
    };
    let base = format!("{}-{}", clean(&stem), clean(model));
    let mut name = format!("{base}.svg");
    let mut n = 2;
    while taken.contains(&name) {
        name = format!("{base}-{n}.svg");
        n += 1;
    }
    taken.push(name.clone());
    name
}

fn progress_bar(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} [{elapsed}] {wide_msg}") {
        bar.set_style(style);
    }
    bar
}

/// `parcae-host bench`.
pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let interval_ms = args.input.interval_ms()?;
    anyhow::ensure!(args.horizon >= 1, "--horizon must be at least 1");
    let (profile, prices) = args.profile.load_with_prices()?;
    let mut baselines = args.baselines.clone();
    baselines.sort();
    baselines.dedup();
    let peers = PeerArg::expand(&args.peers);
    let peer_constants =
        if peers.is_empty() { None } else { Some(load_peer_constants(args.peer_constants.as_deref())?) };
    let settings = BenchSettings {
        peers,
        peer_constants,
        peer_runs: args.peer_runs,
        ..BenchSettings::new(interval_ms, args.horizon, baselines, prices)
    };
    let runtime = if args.policies.is_empty() { None } else { Some(args.sandbox.runtime()?) };
    let mut policies = Vec::new();
    if let Some(runtime) = &runtime {
        for spec in &args.policies {
            let component = load_policy(runtime, spec).with_context(|| format!("loading policy {spec}"))?;
            policies.push(PolicyEntry { spec: spec.clone(), component });
        }
    }
    let traces: Vec<Option<&PathBuf>> =
        if args.trace.is_empty() { vec![None] } else { args.trace.iter().map(Some).collect() };
    let per_trace = baseline_units(&settings) + policies.len() as u64;
    let progress = progress_bar(per_trace * traces.len() as u64);
    if let Some(dir) = &args.plot {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut all_records = Vec::new();
    let mut plot_names = Vec::new();
    progress.suspend(|| println!("{LEGEND}\n"));
    for path in traces {
        let trace = match path {
            Some(path) => args.input.load(path)?,
            None => {
                parcae_traces::parse(Path::new(DEMO_TRACE.0), DEMO_TRACE.1.as_bytes(), args.input.format)?
            }
        };
        let bench = bench_trace(&trace, &profile, &policies, &settings, &progress)?;
        let mut text = format!("{}\n\n{}\n", describe(&bench, &profile.model), table(&bench));
        for note in &bench.notes {
            text.push_str(&format!("note: {note}\n"));
        }
        if let Some(dir) = &args.plot {
            let file = dir.join(plot_name(&bench, &profile.model, &mut plot_names));
            std::fs::write(&file, svg::plot(&bench, &profile.model))
                .with_context(|| format!("writing {}", file.display()))?;
            text.push_str(&format!("plot: {}\n", file.display()));
        }
        progress.suspend(|| println!("{text}"));
        all_records.extend(records(&bench, &profile.model, &settings));
    }
    progress.finish_and_clear();
    if let Some(path) = &args.json {
        write_json(&all_records, path)?;
        println!("records written to {}", path.display());
    }
    if let Some(path) = &args.csv {
        write_csv(&all_records, path)?;
        println!("records written to {}", path.display());
    }
    Ok(())
}

/// The series of a trace's instances as a plain vector (for plots).
fn instances(series: &[IntervalStats]) -> Vec<u32> {
    series.iter().map(|s| s.instances).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_peer_constants_are_valid_and_cover_the_paper_models() {
        let c = load_peer_constants(None).unwrap();
        for model in ["gpt-1.5b", "gpt-6.7b", "bert"] {
            assert!(c.bamboo.models.contains_key(model), "bamboo {model}");
            assert!(c.varuna.models.contains_key(model), "varuna {model}");
            assert!(c.oobleck.models.contains_key(model), "oobleck {model}");
        }
        // The restart times the issue quotes for Varuna.
        assert_eq!(c.varuna.models["bert"].restart_ms, 76_000.0);
        assert_eq!(c.varuna.models["gpt-1.5b"].restart_ms, 83_000.0);
        assert_eq!(c.varuna.models["gpt-6.7b"].restart_ms, 701_000.0);
    }

    #[test]
    fn bad_peer_constants_name_the_file_and_the_field() {
        let file = Path::new("mine.json");
        let good: serde_json::Value = serde_json::from_str(PEER_CONSTANTS.1).unwrap();

        let e = parse_peer_constants("{\"bamboo\": ", file).unwrap_err().to_string();
        assert!(e.starts_with("mine.json: ") && e.contains("line 1"), "{e}");

        let mut v = good.clone();
        v["varuna"]["models"]["bert"]["restart_sec"] = 3.into();
        let e = parse_peer_constants(&v.to_string(), file).unwrap_err().to_string();
        assert!(e.contains("unknown field `restart_sec`"), "{e}");

        let mut v = good.clone();
        v["bamboo"]["sources"].as_object_mut().unwrap().remove("fallback_slowdown");
        let e = parse_peer_constants(&v.to_string(), file).unwrap_err().to_string();
        assert!(e.starts_with("mine.json: bamboo.sources: no citation for `fallback_slowdown`"), "{e}");

        let mut v = good;
        v["oobleck"]["models"]["bert"]["reconfigure_ms"] = (-2.0).into();
        let e = parse_peer_constants(&v.to_string(), file).unwrap_err().to_string();
        assert!(e.starts_with("mine.json: oobleck.models.bert.reconfigure_ms: "), "{e}");
    }

    #[test]
    fn peers_join_the_table_or_say_why_not() {
        let trace = parcae_traces::parse(Path::new(DEMO_TRACE.0), DEMO_TRACE.1.as_bytes(), None).unwrap();
        let profile_args = ProfileArgs { profile: None, model: None, cost_constants: None };
        let (profile, prices) = profile_args.load_with_prices().unwrap();
        let mut constants = load_peer_constants(None).unwrap();
        let settings = BenchSettings {
            peers: Peer::ALL.to_vec(),
            peer_constants: Some(constants.clone()),
            peer_runs: 4,
            ..BenchSettings::new(60_000, 8, vec![Baseline::Ideal], prices)
        };
        // The example model has no published peer figures: rows skipped, said so.
        let bench = bench_trace(&trace, &profile, &[], &settings, &ProgressBar::hidden()).unwrap();
        let names: Vec<&str> = bench.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["ideal", "on-demand"]);
        assert!(
            bench
                .notes
                .iter()
                .any(|n| n.contains("bamboo: the peer constants have no entry for model `tiny-gpt`"))
        );
        // With figures for it, every peer has a row, and on-demand has no spot price.
        let bamboo = constants.bamboo.models["bert"].clone();
        let varuna = constants.varuna.models["bert"].clone();
        let oobleck = constants.oobleck.models["bert"].clone();
        constants.bamboo.models.insert("tiny-gpt".into(), bamboo);
        constants.varuna.models.insert("tiny-gpt".into(), varuna);
        constants.oobleck.models.insert("tiny-gpt".into(), oobleck);
        let settings = BenchSettings { peer_constants: Some(constants), ..settings };
        let bench = bench_trace(&trace, &profile, &[], &settings, &ProgressBar::hidden()).unwrap();
        let names: Vec<&str> = bench.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["ideal", "bamboo", "varuna", "oobleck", "on-demand"]);
        for row in &bench.rows {
            assert!(
                row.result.totals.samples <= bench.ideal_samples || row.name == "on-demand",
                "{}",
                row.name
            );
        }
        let text = table(&bench).to_string();
        let on_demand = text.lines().find(|l| l.starts_with("| on-demand")).unwrap();
        let cells: Vec<&str> = on_demand.split('|').map(str::trim).collect();
        // policy, samples, ..., $ spot (12th), $ on-demand, $/M spot, $/M on-demand.
        assert_eq!(cells[12], "-");
        assert_eq!(cells[14], "-");
        assert_ne!(cells[15], "-");
    }
}
