//! Reference decision makers that need no policy: the Ideal upper bound, the
//! reactive throughput-optimal baseline, and the Parcae artifact's recorded
//! decisions.

use parcae_policy_core::reactive::best_config_for;
use parcae_policy_core::{IntervalStats, ModelProfile, ParallelConfig};
use parcae_traces::{IntervalSeries, ReferenceDecision, Strategy};
use serde::Serialize;

use crate::{IntervalRecord, KindProbabilities, Prices, SimError, SimResult, summarize};

/// The Ideal upper bound, which is not a decision sequence: every interval
/// runs the fastest profiled layout that fits its instances for the whole
/// interval, with no migration cost at all. Its records carry that layout, the
/// samples, and no migration (kind `none`).
pub fn ideal(
    profile: &ModelProfile,
    series: &[IntervalStats],
    interval_ms: u64,
    prices: Prices,
) -> Result<SimResult, SimError> {
    ideal_by(|_| profile, series, interval_ms, prices)
}

/// [`ideal`] with interval `k`'s layouts from `profile_at(k)` (a mixed fleet's composition).
pub fn ideal_by<'p>(
    profile_at: impl Fn(usize) -> &'p ModelProfile,
    series: &[IntervalStats],
    interval_ms: u64,
    prices: Prices,
) -> Result<SimResult, SimError> {
    if interval_ms == 0 {
        return Err(SimError::ZeroInterval);
    }
    let seconds = interval_ms as f64 / 1000.0;
    let records = series
        .iter()
        .enumerate()
        .map(|(interval, stats)| {
            let best = best_config_for(profile_at(interval), stats.instances);
            IntervalRecord {
                interval,
                instances: stats.instances,
                arrivals: stats.arrivals,
                preemptions: stats.preemptions,
                config: best.map(|c| c.config),
                samples: best.map_or(0.0, |c| c.samples_per_second * seconds),
                lost_samples: 0.0,
                migration_ms: 0.0,
                transition_ms: 0.0,
                carried_in_ms: 0.0,
                leftover_ms: 0.0,
                kinds: KindProbabilities { none: 1.0, ..KindProbabilities::default() },
                transition_ms_by_kind: [0.0; 5],
                p_restart: 0.0,
                p_lost_work: 0.0,
            }
        })
        .collect();
    Ok(summarize(records, interval_ms, prices))
}

/// Total samples of [`ideal`].
pub fn ideal_samples(profile: &ModelProfile, series: &[IntervalStats], interval_ms: u64) -> f64 {
    let seconds = interval_ms as f64 / 1000.0;
    series
        .iter()
        .map(|s| best_config_for(profile, s.instances).map_or(0.0, |c| c.samples_per_second * seconds))
        .sum()
}

/// The reactive throughput-optimal baseline: each interval, the fastest
/// profiled layout that fits the instances alive
/// ([`parcae_policy_core::reactive::best_config_for`]), whatever it costs to
/// get there.
pub fn reactive(profile: &ModelProfile, series: &[IntervalStats]) -> Vec<Option<ParallelConfig>> {
    series.iter().map(|s| best_config_for(profile, s.instances).map(|c| c.config)).collect()
}

/// One of the three strategies the Parcae artifact recorded per interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArtifactStrategy {
    /// `throughput_opt_strategy` / `"throughut-opt"`.
    ThroughputOpt,
    /// `liveput_truth_strategy` / `"liveput-truth"`.
    LiveputTruth,
    /// `liveput_predict_strategy` / `"liveput-predict"`.
    LiveputPredict,
}

impl ArtifactStrategy {
    /// All three, in report order.
    pub const ALL: [ArtifactStrategy; 3] =
        [ArtifactStrategy::ThroughputOpt, ArtifactStrategy::LiveputTruth, ArtifactStrategy::LiveputPredict];

    /// Stable name (tables, JSON): `throughput-opt`, `liveput-truth`, `liveput-predict`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ArtifactStrategy::ThroughputOpt => "throughput-opt",
            ArtifactStrategy::LiveputTruth => "liveput-truth",
            ArtifactStrategy::LiveputPredict => "liveput-predict",
        }
    }

    /// The layout this strategy chose in `decision`.
    pub fn pick(self, decision: &ReferenceDecision) -> Strategy {
        match self {
            ArtifactStrategy::ThroughputOpt => decision.throughput_opt,
            ArtifactStrategy::LiveputTruth => decision.liveput_truth,
            ArtifactStrategy::LiveputPredict => decision.liveput_predict,
        }
    }
}

impl std::fmt::Display for ArtifactStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a recorded layout could not be replayed (the interval pauses instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IssueReason {
    /// The layout is not in the profile (e.g. the file was made for another
    /// batch size, or with a zero degree).
    NotProfiled,
    /// The layout needs more instances than the series has in that interval.
    DoesNotFit,
}

/// A recorded layout that could not be replayed as is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ArtifactIssue {
    /// Interval of the series.
    pub interval: usize,
    /// The recorded layout (D x P).
    pub strategy: Strategy,
    /// Instances the series has in that interval.
    pub instances: u32,
    /// Why it could not be replayed.
    pub reason: IssueReason,
}

impl std::fmt::Display for ArtifactIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.reason {
            IssueReason::NotProfiled => {
                write!(f, "interval {}: layout {} is not in the profile", self.interval, self.strategy)
            }
            IssueReason::DoesNotFit => write!(
                f,
                "interval {}: layout {} needs {} instances, only {} are alive",
                self.interval,
                self.strategy,
                self.strategy.instances(),
                self.instances
            ),
        }
    }
}

/// The artifact's decisions for one strategy, mapped onto a series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArtifactReplay {
    /// Which of the artifact's recorded strategies this replays.
    pub strategy: ArtifactStrategy,
    /// One per interval of the series; `None` where the recorded layout could
    /// not be used ([`ArtifactReplay::issues`]) or nothing was recorded.
    pub decisions: Vec<Option<ParallelConfig>>,
    /// Recorded layouts replaced by a pause, in interval order.
    pub issues: Vec<ArtifactIssue>,
    /// Intervals of the series with no recorded decision (paused).
    pub missing_intervals: usize,
    /// Recorded rows that do not cover exactly one interval of the series
    /// (another interval length, or off the grid); ignored.
    pub misaligned_rows: usize,
}

/// Maps the recorded decisions of `strategy` onto `series`: the row starting at
/// `k x interval_ms` and lasting one interval is interval `k`'s decision. A
/// layout that is not profiled or does not fit is never changed into another
/// one: it is reported in [`ArtifactReplay::issues`] and that interval pauses.
pub fn artifact(
    profile: &ModelProfile,
    series: &IntervalSeries,
    reference: &[ReferenceDecision],
    strategy: ArtifactStrategy,
) -> ArtifactReplay {
    let interval_ms = series.interval_ms;
    let mut recorded: Vec<Option<Strategy>> = vec![None; series.len()];
    let mut misaligned_rows = 0;
    for row in reference {
        let aligned = interval_ms > 0 && row.duration_ms == interval_ms && row.start_ms % interval_ms == 0;
        let slot = if aligned { recorded.get_mut((row.start_ms / interval_ms) as usize) } else { None };
        match slot {
            Some(slot @ None) => *slot = Some(strategy.pick(row)),
            _ => misaligned_rows += 1,
        }
    }
    let mut decisions = Vec::with_capacity(series.len());
    let mut issues = Vec::new();
    let mut missing_intervals = 0;
    for (interval, (stats, chosen)) in series.intervals.iter().zip(&recorded).enumerate() {
        let Some(chosen) = *chosen else {
            missing_intervals += 1;
            decisions.push(None);
            continue;
        };
        let config = ParallelConfig::new(chosen.data_parallel, chosen.pipeline_stages);
        let reason = if profile.config(config).is_none() {
            Some(IssueReason::NotProfiled)
        } else if config.instances() > u64::from(stats.instances) {
            Some(IssueReason::DoesNotFit)
        } else {
            None
        };
        match reason {
            Some(reason) => {
                issues.push(ArtifactIssue { interval, strategy: chosen, instances: stats.instances, reason });
                decisions.push(None);
            }
            None => decisions.push(Some(config)),
        }
    }
    ArtifactReplay { strategy, decisions, issues, missing_intervals, misaligned_rows }
}
