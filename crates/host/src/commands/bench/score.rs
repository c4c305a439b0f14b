//! Scoring one trace: every baseline, peer and policy turned into decisions
//! and run through the liveput simulator.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::ValueEnum;
use indicatif::ProgressBar;
use parcae_policy_core::{IntervalStats, ModelProfile, ParallelConfig, Recovery};
use parcae_runtime::{GuardedPolicy, PolicyComponent};
use parcae_sim::peers::BambooSpeed;
use parcae_sim::{
    ArtifactReplay, ArtifactStrategy, CadenceRule, Cadenced, IssueReason, MigrationMode, Peer, PeerConstants,
    PeerError, PeerSettings, Prices, SimResult,
};
use parcae_traces::{IntervalSeries, Trace};
use serde::Serialize;

use crate::control::{ControlSettings, replay_profiles};
use crate::embedded::BUILTIN_PREFIX;
use crate::policies::PolicySet;
use crate::record::{PolicyHealth, RowKind};

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
    /// Rate of the asynchronous checkpoint snapshot our rows take, bytes per
    /// ms (`None`: periodic checkpoints are priced as synchronous writes).
    pub snapshot_bytes_per_ms: Option<f64>,
    /// Which losses our rows' checkpoint cadence follows.
    pub cadence: CadenceRule,
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
            snapshot_bytes_per_ms: None,
            cadence: CadenceRule::default(),
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
    /// What produced the row.
    pub kind: RowKind,
    /// The simulator's verdict on its decisions.
    pub result: SimResult,
    /// Samples the policy itself expected (sum of its first plan steps).
    pub policy_expected_samples: Option<f64>,
    /// How the policy behaved in the sandbox (policies only).
    pub health: Option<PolicyHealth>,
    /// Recorded layouts that could not be replayed (artifact rows only).
    pub artifact: Option<ArtifactHealth>,
    /// Which peer, for peer rows.
    pub peer: Option<Peer>,
}

/// Everything scored on one trace.
#[derive(Debug, Clone)]
pub struct TraceBench {
    /// Display name of the trace (its file name).
    pub name: String,
    /// The trace file.
    pub path: PathBuf,
    /// The trace per interval.
    pub series: IntervalSeries,
    /// One per decision maker, in report order.
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
    /// The policy argument as given.
    pub spec: String,
    /// The loaded (compiled) component.
    pub component: Arc<PolicyComponent>,
}

impl PolicyEntry {
    /// Display name: the file name of a path, the spec of a built-in.
    pub fn name(&self) -> String {
        if self.spec.starts_with(BUILTIN_PREFIX) {
            return self.spec.clone();
        }
        Path::new(&self.spec)
            .file_name()
            .map_or_else(|| self.spec.clone(), |n| n.to_string_lossy().into_owned())
    }

    /// A fresh guarded policy (new instance, zero counters): the component
    /// serves every interface it exports, the built-ins the others.
    pub(super) fn guarded(&self) -> GuardedPolicy {
        PolicySet::of(&self.component).guarded()
    }
}

/// Rows the baselines of `settings` produce per trace (sizes the progress bar).
pub(super) fn baseline_units(settings: &BenchSettings) -> u64 {
    settings.baselines.iter().map(|b| if *b == Baseline::Artifact { 3 } else { 1 }).sum::<u64>()
        + peer_units(settings)
}

/// Rows the peers of `settings` produce per trace (Bamboo has two).
pub(super) fn peer_units(settings: &BenchSettings) -> u64 {
    settings.peers.iter().map(|&p| if p == Peer::Bamboo { 2 } else { 1 }).sum::<u64>()
}

/// Scores every baseline of `settings` and every policy on one trace.
pub fn bench_trace(
    trace: &Trace,
    profile: &ModelProfile,
    policies: &[PolicyEntry],
    settings: &BenchSettings,
    recovery: Recovery,
    progress: &ProgressBar,
) -> anyhow::Result<TraceBench> {
    let name = trace.name();
    let interval_ms = settings.interval_ms;
    let series = trace.series(interval_ms)?;
    let intervals = &series.intervals;
    let wants = |b: Baseline| settings.baselines.contains(&b);
    // Our system checkpoints at the Young/Daly cadence of the losses the
    // notice does not cover (those seen so far, or the whole trace's); every
    // row but Ideal, Varuna (which checkpoints every k iterations of its own)
    // and the on-demand fleet trains under it, our rows under the same
    // recovery rules, and the policies are told each interval's profile.
    let system = Cadenced::new(
        settings.cadence,
        profile,
        intervals,
        interval_ms,
        &recovery,
        settings.snapshot_bytes_per_ms,
    );
    let mut notes = Vec::new();
    if let Some(note) = cadence_note(profile, &system, intervals, &recovery, settings) {
        notes.push(note);
    }
    let simulate_as = |decisions: &[Option<ParallelConfig>], what: &str, mode: MigrationMode| {
        parcae_sim::simulate_cadenced(
            &system,
            intervals,
            interval_ms,
            decisions,
            settings.prices,
            mode,
            recovery,
        )
        .with_context(|| format!("{name}: scoring {what}"))
    };
    let simulate =
        |decisions: &[Option<ParallelConfig>], what: &str| simulate_as(decisions, what, MigrationMode::Live);
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
        let decisions = parcae_sim::oracle_cadenced(&system, intervals, interval_ms, recovery)
            .with_context(|| format!("{name}: planning the oracle"))?;
        let result = simulate(&decisions, "the oracle")?;
        oracle_samples = Some(result.totals.samples);
        rows.push(baseline_row("oracle", result));
        progress.inc(1);
    }

    if wants(Baseline::LiveputTruth) {
        step("liveput-truth");
        let decisions = parcae_sim::liveput_truth_cadenced(
            &system,
            intervals,
            interval_ms,
            settings.horizon as usize,
            recovery,
        )
        .with_context(|| format!("{name}: planning liveput-truth"))?;
        rows.push(baseline_row("liveput-truth", simulate(&decisions, "liveput-truth")?));
        progress.inc(1);
    }

    if wants(Baseline::Reactive) {
        step("reactive");
        let decisions = parcae_sim::reactive(system.base(), intervals);
        rows.push(baseline_row("reactive", simulate(&decisions, "reactive")?));
        progress.inc(1);
    }

    if wants(Baseline::ReactiveRestart) {
        step("reactive-restart");
        let decisions = parcae_sim::reactive(system.base(), intervals);
        let result = simulate_as(&decisions, "reactive-restart", MigrationMode::RestartOnChange)?;
        rows.push(baseline_row("reactive-restart", result));
        progress.inc(1);
    }

    if wants(Baseline::Artifact) {
        match trace.reference() {
            Some(reference) => {
                for strategy in ArtifactStrategy::ALL {
                    step(&format!("artifact:{strategy}"));
                    let replay = parcae_sim::artifact(system.base(), &series, reference, strategy);
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
        // The peers that restart from checkpoints (Bamboo, Oobleck) take the
        // deployment's, as our rows do.
        let peer_settings = PeerSettings {
            interval_ms,
            prices: settings.prices,
            runs: settings.peer_runs.max(1),
            seed: 1,
            cadence: Some(system.clone()),
        };
        // Each peer keeps only the recovery its paper describes, given the
        // same notice. Bamboo's speed is contested between sources: the
        // chosen derivation is its row, the other a `bamboo-slow` row.
        let notice_ms = recovery.preemption_notice_ms.round() as u64;
        let slow_bamboo = constants.with_bamboo_speed(BambooSpeed::OobleckArtifact);
        let runs = settings.peers.iter().flat_map(|&peer| {
            let variant = (peer == Peer::Bamboo).then_some(("bamboo-slow", &slow_bamboo));
            std::iter::once((peer, peer.as_str(), constants)).chain(variant.map(|(n, c)| (peer, n, c)))
        });
        for (peer, row_name, peer_constants) in runs {
            step(row_name);
            let run =
                parcae_sim::peers::run(peer, profile, intervals, peer_constants, &peer_settings, notice_ms);
            progress.inc(1);
            match run {
                Ok(run) => {
                    notes.extend(run.notes.iter().map(|n| {
                        if row_name == peer.as_str() { n.clone() } else { format!("{row_name}: {n}") }
                    }));
                    rows.push(Row {
                        kind: RowKind::Peer,
                        peer: Some(peer),
                        ..baseline_row(row_name, run.result)
                    });
                }
                // No published figures for this model: say so, skip the row.
                Err(e @ PeerError::MissingModel { .. }) => notes.push(format!("{e}: row skipped")),
                Err(e) => {
                    return Err(anyhow::Error::from(e).context(format!("{name}: simulating {row_name}")));
                }
            }
        }
    }

    let fleet_max = intervals.iter().map(|s| s.instances).max().unwrap_or(0);
    let replay_settings = ControlSettings { interval_ms, horizon: settings.horizon, fleet_max, recovery };
    for policy in policies {
        let policy_name = policy.name();
        let mut guarded = policy.guarded();
        let total = intervals.len();
        let decisions = replay_profiles(
            intervals,
            |k| system.at(k),
            &mut guarded,
            &replay_settings,
            None,
            |d| {
                if d.interval % 16 == 0 || d.interval + 1 == total {
                    progress.set_message(format!("{name}: {policy_name} {}/{total}", d.interval + 1));
                }
            },
        );
        let configs: Vec<Option<ParallelConfig>> = decisions.iter().map(|d| d.config).collect();
        let expected: f64 = decisions.iter().map(|d| d.expected_samples).sum();
        let result = simulate(&configs, &policy_name)?;
        let health = PolicyHealth::new(&guarded.predictor_counts(), &guarded.optimizer_counts());
        notes.extend(health.notes(&policy_name));
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

/// What `bench` says of our rows' checkpoint cadence (`None` where it is the
/// profile's throughout).
pub(super) fn cadence_note(
    profile: &ModelProfile,
    system: &Cadenced,
    intervals: &[IntervalStats],
    recovery: &Recovery,
    settings: &BenchSettings,
) -> Option<String> {
    let how = if settings.snapshot_bytes_per_ms.is_some() {
        "snapshotted into memory and written in the background"
    } else {
        "written synchronously"
    };
    let expected = parcae_sim::cadence::expected_rollbacks(profile, intervals, recovery);
    let lost_s = |p: &ModelProfile| parcae_policy_core::liveput::lost_work_ms(p) / 1000.0;
    match settings.cadence {
        CadenceRule::WholeTrace if system.base().checkpoint_interval_ms != profile.checkpoint_interval_ms => {
            Some(format!(
                "checkpoints {how} (Young/Daly for the whole trace's {expected:.1} expected losses of a \
                 whole stage that the notice cannot save), costing {:.1}% of throughput; such a loss \
                 rolls back {:.0} s on average",
                100.0 * (1.0 - parcae_sim::cadence::throughput_kept(profile, system.base())),
                lost_s(system.base()),
            ))
        }
        CadenceRule::SeenSoFar if !system.is_constant() => {
            let changes = system.changes();
            let first = changes.iter().find(|c| c.1 != profile.checkpoint_interval_ms).map_or(0, |c| c.0);
            let kept = changes.iter().map(|c| c.2).fold(1.0, f64::min);
            let shortest = changes.iter().map(|c| c.1).fold(f64::INFINITY, f64::min);
            let start = if first == 0 {
                "shorter than the profile's from the start, the next preemption counted as due \
                 before the first loss"
                    .to_string()
            } else {
                format!("the profile's cadence until interval {first}")
            };
            Some(format!(
                "checkpoints {how} at the Young/Daly cadence of the losses seen so far ({expected:.1} \
                 expected losses of a whole stage that the notice cannot save over the trace; \
                 {start}, {} changes of cadence): a loss rolls back \
                 {:.0} s on average at the shortest, checkpoints cost at most {:.1}% of throughput",
                changes.len().saturating_sub(1),
                shortest / 2000.0,
                100.0 * (1.0 - kept),
            ))
        }
        _ => None,
    }
}

/// The series of a trace's instances as a plain vector (for plots).
pub(super) fn instances(series: &[IntervalStats]) -> Vec<u32> {
    series.iter().map(|s| s.instances).collect()
}
