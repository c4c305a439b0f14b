//! The one data model every trace shape is normalised to.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::TraceError;
use crate::format::Format;

/// Upper bound on the intervals one normalisation may produce, so a trace
/// with an absurd timestamp cannot make [`Trace::series`] allocate gigabytes.
pub const MAX_INTERVALS: u64 = 10_000_000;

/// Milliseconds in an hour.
pub const HOUR_MS: u64 = 3_600_000;

/// Whether an instance joined or left the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// An instance became available (allocation).
    Add,
    /// An instance went away (preemption).
    Remove,
}

impl EventKind {
    /// The spelling used in event CSV files: `add` / `remove`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Add => "add",
            EventKind::Remove => "remove",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One availability change.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Event {
    /// Milliseconds since the start of the trace.
    pub t_ms: u64,
    /// Addition or removal.
    pub kind: EventKind,
    /// Instance id: from the file, or synthesized (`n1`, `n2`, ...) for count-only sources.
    pub node: String,
}

/// A parallel layout chosen by a reference policy: `data_parallel` replicas of a
/// `pipeline_stages`-deep pipeline (the artifact's `[D, P]` pairs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Strategy {
    /// D: data-parallel replicas.
    pub data_parallel: u32,
    /// P: pipeline stages.
    pub pipeline_stages: u32,
}

impl Strategy {
    /// Instances the layout occupies (D x P), widened so it cannot overflow.
    pub fn instances(&self) -> u64 {
        u64::from(self.data_parallel) * u64::from(self.pipeline_stages)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.data_parallel, self.pipeline_stages)
    }
}

/// What the Parcae artifact decided for one interval, kept so a benchmark can
/// replay and compare against it.
///
/// The decision applies to `[start_ms, start_ms + duration_ms)` and was made
/// *after* that interval's arrivals and preemptions (the events at `start_ms`):
/// in every public file `D x P` never exceeds the post-event instance count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReferenceDecision {
    /// Start of the interval, ms since the start of the trace.
    pub start_ms: u64,
    /// Length of the interval in ms.
    pub duration_ms: u64,
    /// Throughput-optimal layout (`throughput_opt_strategy` / `"throughut-opt"`).
    pub throughput_opt: Strategy,
    /// Liveput-optimal layout with perfect foresight (`liveput_truth_strategy` / `"liveput-truth"`).
    pub liveput_truth: Strategy,
    /// Liveput-optimal layout under predicted availability (`liveput_predict_strategy` / `"liveput-predict"`).
    pub liveput_predict: Strategy,
    /// The artifact logged a `migration` (layout change without availability
    /// change) here. Only segment files record this; always `false` for decision arrays.
    pub migration: bool,
}

/// A loaded availability trace.
///
/// Invariants (guaranteed by every loader): events are sorted by time
/// (stable: file order within one timestamp), no node is added while alive or
/// removed while not alive, and `end_ms` is at or after the last event.
/// Time 0 is the start of the trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trace {
    pub(crate) source: PathBuf,
    pub(crate) format: Format,
    pub(crate) events: Vec<Event>,
    pub(crate) end_ms: u64,
    pub(crate) node_ids_inferred: bool,
    pub(crate) reference: Option<Vec<ReferenceDecision>>,
}

/// One instance's stay in the fleet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lifetime {
    /// Instance id.
    pub node: String,
    /// When it was added.
    pub start_ms: u64,
    /// How long it stayed: until its removal, or until the end of the trace if censored.
    pub duration_ms: u64,
    /// Still alive at the end of the trace, so the true lifetime is at least `duration_ms`
    /// (right-censored).
    pub censored: bool,
}

/// Availability in one fixed-length interval: the type policies receive.
pub use parcae_policy_core::IntervalStats;

/// A trace cut into fixed-length intervals: what a per-interval scheduler sees.
///
/// Interval `k` covers `[k * interval_ms, (k + 1) * interval_ms)`: an event at
/// exactly `t = k * interval_ms` belongs to interval `k` (the one it opens),
/// never to interval `k - 1`. This matches the Parcae artifact, whose
/// per-minute `[prev_N, in, out]` triples count the events at the start of
/// each minute. An interval never preempts more instances than it started
/// with: removals beyond those took instances that joined within the
/// interval, and cancel against its arrivals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IntervalSeries {
    /// Interval length in ms.
    pub interval_ms: u64,
    /// One entry per interval, starting at t = 0.
    pub intervals: Vec<IntervalStats>,
}

impl IntervalSeries {
    /// Number of intervals.
    pub fn len(&self) -> usize {
        self.intervals.len()
    }

    /// Whether there are no intervals (never the case for a series built from a trace).
    pub fn is_empty(&self) -> bool {
        self.intervals.is_empty()
    }

    /// Start of interval `k` in ms.
    pub fn start_ms(&self, k: usize) -> u64 {
        (k as u64).saturating_mul(self.interval_ms)
    }

    /// Instances alive when interval `k` begins, before its events (the artifact's
    /// `prev_N`): the previous interval's `instances`, or 0 for the first.
    pub fn instances_before(&self, k: usize) -> u32 {
        match k.checked_sub(1).and_then(|p| self.intervals.get(p)) {
            Some(prev) => prev.instances,
            None => 0,
        }
    }
}

impl Trace {
    /// The file the trace came from (or the name given to [`crate::parse`]).
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// A short display name: the file name of [`Trace::source`].
    pub fn name(&self) -> String {
        self.source
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.source.display().to_string())
    }

    /// The format the trace was parsed as.
    pub fn format(&self) -> Format {
        self.format
    }

    /// All availability changes, sorted by time (stable).
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// End of the observed period in ms.
    ///
    /// For formats with durations (segments, decisions, ticks) this is the end
    /// of the last interval/tick; for point formats (event and count CSV,
    /// timestamped counts) it is the time of the last row.
    pub fn end_ms(&self) -> u64 {
        self.end_ms
    }

    /// Whether node ids were synthesized because the source only had counts.
    ///
    /// Synthesized ids follow LIFO: a removal takes the most recently added
    /// alive node. Lifetimes of such traces are an assumption, not data.
    pub fn node_ids_inferred(&self) -> bool {
        self.node_ids_inferred
    }

    /// The reference decisions recorded in segment and decision files, in time order.
    pub fn reference(&self) -> Option<&[ReferenceDecision]> {
        self.reference.as_deref()
    }

    /// Number of alive instances after all events (at `end_ms`).
    pub fn final_instances(&self) -> usize {
        let mut n: i64 = 0;
        for e in &self.events {
            n += match e.kind {
                EventKind::Add => 1,
                EventKind::Remove => -1,
            };
        }
        usize::try_from(n).unwrap_or(0)
    }

    /// Number of intervals of length `interval_ms` the trace spans: every
    /// interval that overlaps `[0, end_ms)`, plus the interval opened by an
    /// event sitting exactly at `end_ms` (point formats end on their last event).
    /// At least one.
    pub fn interval_count(&self, interval_ms: u64) -> Result<u64, TraceError> {
        if interval_ms == 0 {
            return Err(self.interval_error(interval_ms, "the interval must be at least 1 ms".into()));
        }
        let by_end = self.end_ms.div_ceil(interval_ms);
        let by_events = self.events.last().map_or(0, |e| e.t_ms / interval_ms + 1);
        let n = by_end.max(by_events).max(1);
        if n > MAX_INTERVALS {
            return Err(self.interval_error(
                interval_ms,
                format!("the trace would span {n} intervals (more than the supported {MAX_INTERVALS})"),
            ));
        }
        Ok(n)
    }

    /// Normalises the trace to fixed-length intervals (see [`IntervalSeries`]
    /// for the boundary rule). Fails only for `interval_ms == 0` or when the
    /// series would exceed [`MAX_INTERVALS`].
    pub fn series(&self, interval_ms: u64) -> Result<IntervalSeries, TraceError> {
        let mut intervals = self.event_counts(interval_ms)?;
        let mut alive: u32 = 0;
        for slot in &mut intervals {
            // Removals beyond the instances alive at the interval's start took
            // instances that joined within it: they never ran at a boundary,
            // where layouts are chosen, so they cancel against arrivals
            // instead of preempting instances that were not there.
            let blips = slot.preemptions.saturating_sub(alive).min(slot.arrivals);
            slot.arrivals -= blips;
            slot.preemptions -= blips;
            alive = alive.saturating_add(slot.arrivals).saturating_sub(slot.preemptions);
            slot.instances = alive;
        }
        Ok(IntervalSeries { interval_ms, intervals })
    }

    /// The additions and removals in each interval, as the file has them
    /// (`instances` left 0): what [`Trace::stats`] describes.
    pub(crate) fn event_counts(&self, interval_ms: u64) -> Result<Vec<IntervalStats>, TraceError> {
        let n = self.interval_count(interval_ms)?;
        let mut intervals = vec![IntervalStats::default(); n as usize];
        for e in &self.events {
            let k = (e.t_ms / interval_ms) as usize;
            if let Some(slot) = intervals.get_mut(k) {
                match e.kind {
                    EventKind::Add => slot.arrivals = slot.arrivals.saturating_add(1),
                    EventKind::Remove => slot.preemptions = slot.preemptions.saturating_add(1),
                }
            }
        }
        Ok(intervals)
    }

    /// Every instance's stay, in order of addition. A node id that is removed
    /// and later added again yields two lifetimes. Instances still alive at
    /// `end_ms` are right-censored (`censored: true`, duration up to `end_ms`).
    pub fn lifetimes(&self) -> Vec<Lifetime> {
        let mut out: Vec<Lifetime> = Vec::new();
        let mut open: HashMap<&str, usize> = HashMap::new();
        for e in &self.events {
            match e.kind {
                EventKind::Add => {
                    open.insert(&e.node, out.len());
                    out.push(Lifetime {
                        node: e.node.clone(),
                        start_ms: e.t_ms,
                        duration_ms: 0,
                        censored: true,
                    });
                }
                EventKind::Remove => {
                    if let Some(i) = open.remove(e.node.as_str())
                        && let Some(l) = out.get_mut(i)
                    {
                        l.duration_ms = e.t_ms.saturating_sub(l.start_ms);
                        l.censored = false;
                    }
                }
            }
        }
        for l in out.iter_mut().filter(|l| l.censored) {
            l.duration_ms = self.end_ms.saturating_sub(l.start_ms);
        }
        out
    }

    /// Removals per trace hour: entry `h` counts removals in
    /// `[h * 3600 s, (h + 1) * 3600 s)` (same boundary rule as [`Trace::series`]); empty
    /// only if the trace is too long to cut into hours (more than [`MAX_INTERVALS`]).
    pub fn preemptions_by_hour_of_trace(&self) -> Vec<u32> {
        match self.event_counts(HOUR_MS) {
            Ok(counts) => counts.iter().map(|i| i.preemptions).collect(),
            Err(_) => Vec::new(),
        }
    }

    fn interval_error(&self, interval_ms: u64, reason: String) -> TraceError {
        TraceError::Interval { path: self.source.clone(), interval_ms, reason }
    }
}
