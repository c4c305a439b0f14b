//! Summary statistics of a trace, for reports and for sanity-checking inputs.

use std::fmt;

use serde::Serialize;

use crate::error::TraceError;
use crate::format::Format;
use crate::model::{EventKind, HOUR_MS, Trace};

/// Distribution summary of uncensored instance lifetimes, in minutes.
///
/// Percentiles use the nearest-rank method: `pX` is the smallest lifetime
/// such that at least X % of lifetimes are at most it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LifetimeDistribution {
    /// Shortest lifetime.
    pub min_minutes: f64,
    /// 10th percentile.
    pub p10_minutes: f64,
    /// Median.
    pub p50_minutes: f64,
    /// 90th percentile.
    pub p90_minutes: f64,
    /// Longest lifetime.
    pub max_minutes: f64,
    /// Arithmetic mean.
    pub mean_minutes: f64,
}

/// Instance lifetimes: completed ones are summarised, censored ones only counted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LifetimeStats {
    /// Instances that were added and later removed within the trace.
    pub ended: usize,
    /// Instances still alive at the end (right-censored): their true lifetime is
    /// unknown, so they are excluded from `distribution`.
    pub censored: usize,
    /// Summary of the `ended` lifetimes; `None` when no instance ended.
    pub distribution: Option<LifetimeDistribution>,
}

/// Summary of a trace at a chosen interval length.
///
/// Instance counts (`min`/`mean`/`max`) are exact over time, from the events,
/// over `[0, end_ms]`: simultaneous events count as one step, so a count that
/// exists for zero time between two same-timestamp events is never seen.
/// The interval length only affects the interval-based fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceStats {
    /// The trace's source path.
    pub source: String,
    /// The format it was parsed as.
    pub format: Format,
    /// Interval length used for the interval-based fields.
    pub interval_ms: u64,
    /// Number of intervals the trace spans (see [`Trace::series`]).
    pub intervals: u64,
    /// `end_ms` of the trace.
    pub duration_ms: u64,
    /// The same in hours.
    pub duration_hours: f64,
    /// Events in the trace.
    pub events: usize,
    /// Fewest instances alive at any time.
    pub min_instances: u32,
    /// Time-weighted mean of instances alive over `[0, end_ms)`.
    pub mean_instances: f64,
    /// Most instances alive at any time.
    pub max_instances: u32,
    /// Instances alive at the end.
    pub final_instances: u32,
    /// Total additions.
    pub arrivals: u64,
    /// Total removals.
    pub preemptions: u64,
    /// Additions per hour of trace (`None` for a zero-length trace).
    pub arrivals_per_hour: Option<f64>,
    /// Removals per hour of trace (`None` for a zero-length trace).
    pub preemptions_per_hour: Option<f64>,
    /// Intervals with at least one removal.
    pub intervals_with_preemptions: u64,
    /// Most removals inside one interval.
    pub max_preemptions_in_interval: u32,
    /// Intervals with both additions and removals.
    pub intervals_with_arrivals_and_preemptions: u64,
    /// Instance lifetimes.
    pub lifetimes: LifetimeStats,
    /// Removals per trace hour (see [`Trace::preemptions_by_hour_of_trace`]).
    pub preemptions_by_hour: Vec<u32>,
    /// Whether node ids (and therefore lifetimes) were synthesized (LIFO).
    pub node_ids_inferred: bool,
}

impl Trace {
    /// Computes [`TraceStats`] with `interval_ms` intervals; fails like [`Trace::series`].
    pub fn stats(&self, interval_ms: u64) -> Result<TraceStats, TraceError> {
        // The file's own additions and removals per interval (not the
        // series, whose intervals cancel instances that came and went).
        let counts = self.event_counts(interval_ms)?;

        // Exact step function over time.
        let mut alive: i64 = 0;
        let mut min = i64::MAX;
        let mut max = 0i64;
        let mut area: f64 = 0.0;
        let mut prev_t: u64 = 0;
        let mut arrivals = 0u64;
        let mut preemptions = 0u64;
        if self.events.first().is_none_or(|e| e.t_ms > 0) {
            min = 0;
        }
        let mut i = 0;
        while let Some(first) = self.events.get(i) {
            let t = first.t_ms;
            area += alive as f64 * t.saturating_sub(prev_t) as f64;
            while let Some(e) = self.events.get(i).filter(|e| e.t_ms == t) {
                match e.kind {
                    EventKind::Add => {
                        alive += 1;
                        arrivals += 1;
                    }
                    EventKind::Remove => {
                        alive -= 1;
                        preemptions += 1;
                    }
                }
                i += 1;
            }
            min = min.min(alive);
            max = max.max(alive);
            prev_t = t;
        }
        area += alive as f64 * self.end_ms.saturating_sub(prev_t) as f64;
        let mean = if self.end_ms > 0 { area / self.end_ms as f64 } else { alive as f64 };
        let to_u32 = |v: i64| u32::try_from(v.max(0)).unwrap_or(u32::MAX);

        let hours = self.end_ms as f64 / HOUR_MS as f64;
        let per_hour = |n: u64| (self.end_ms > 0).then(|| n as f64 / hours);

        let mut ended: Vec<u64> = Vec::new();
        let mut censored = 0;
        for l in self.lifetimes() {
            if l.censored {
                censored += 1;
            } else {
                ended.push(l.duration_ms);
            }
        }
        ended.sort_unstable();
        let minutes = |ms: u64| ms as f64 / 60_000.0;
        let rank = |p: f64| {
            let n = ended.len();
            let r = ((p / 100.0) * n as f64).ceil() as usize;
            ended.get(r.clamp(1, n.max(1)) - 1).copied().unwrap_or(0)
        };
        let distribution = (!ended.is_empty()).then(|| LifetimeDistribution {
            min_minutes: minutes(ended.first().copied().unwrap_or(0)),
            p10_minutes: minutes(rank(10.0)),
            p50_minutes: minutes(rank(50.0)),
            p90_minutes: minutes(rank(90.0)),
            max_minutes: minutes(ended.last().copied().unwrap_or(0)),
            mean_minutes: minutes(ended.iter().sum::<u64>()) / ended.len() as f64,
        });

        let iv = &counts;
        Ok(TraceStats {
            source: self.source.display().to_string(),
            format: self.format,
            interval_ms,
            intervals: iv.len() as u64,
            duration_ms: self.end_ms,
            duration_hours: hours,
            events: self.events.len(),
            min_instances: to_u32(min),
            mean_instances: mean,
            max_instances: to_u32(max),
            final_instances: to_u32(alive),
            arrivals,
            preemptions,
            arrivals_per_hour: per_hour(arrivals),
            preemptions_per_hour: per_hour(preemptions),
            intervals_with_preemptions: iv.iter().filter(|s| s.preemptions > 0).count() as u64,
            max_preemptions_in_interval: iv.iter().map(|s| s.preemptions).max().unwrap_or(0),
            intervals_with_arrivals_and_preemptions: iv
                .iter()
                .filter(|s| s.preemptions > 0 && s.arrivals > 0)
                .count() as u64,
            lifetimes: LifetimeStats { ended: ended.len(), censored, distribution },
            preemptions_by_hour: self.preemptions_by_hour_of_trace(),
            node_ids_inferred: self.node_ids_inferred,
        })
    }
}

fn rate(r: Option<f64>) -> String {
    r.map_or_else(|| "n/a".to_string(), |r| format!("{r:.2}/h"))
}

impl fmt::Display for TraceStats {
    /// An aligned `key  value` block for terminals and logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rows: Vec<(&str, String)> = vec![
            ("trace", format!("{} ({})", self.source, self.format)),
            (
                "duration",
                format!("{:.2} h ({} ms, {} events)", self.duration_hours, self.duration_ms, self.events),
            ),
            ("intervals", format!("{} x {} s", self.intervals, self.interval_ms as f64 / 1000.0)),
            (
                "instances",
                format!(
                    "min {}  mean {:.2} (time-weighted)  max {}  final {}",
                    self.min_instances, self.mean_instances, self.max_instances, self.final_instances
                ),
            ),
            ("arrivals", format!("{} total, {}", self.arrivals, rate(self.arrivals_per_hour))),
            (
                "preemptions",
                format!(
                    "{} total, {}; in {} interval(s), at most {} in one",
                    self.preemptions,
                    rate(self.preemptions_per_hour),
                    self.intervals_with_preemptions,
                    self.max_preemptions_in_interval
                ),
            ),
            (
                "mixed intervals",
                format!(
                    "{} with both arrivals and preemptions",
                    self.intervals_with_arrivals_and_preemptions
                ),
            ),
            (
                "lifetimes",
                match &self.lifetimes.distribution {
                    Some(d) => format!(
                        "{} ended: min {:.1}  p10 {:.1}  p50 {:.1}  p90 {:.1}  max {:.1}  mean {:.1} min",
                        self.lifetimes.ended,
                        d.min_minutes,
                        d.p10_minutes,
                        d.p50_minutes,
                        d.p90_minutes,
                        d.max_minutes,
                        d.mean_minutes
                    ),
                    None => "no instance ended within the trace".to_string(),
                },
            ),
            (
                "",
                format!(
                    "{} still alive at the end (right-censored, excluded above)",
                    self.lifetimes.censored
                ),
            ),
            (
                "node ids",
                if self.node_ids_inferred {
                    "inferred (LIFO: removals take the newest instance); lifetimes are an assumption"
                        .to_string()
                } else {
                    "from the file".to_string()
                },
            ),
        ];
        // One trace day per line keeps long traces readable.
        let hourly: Vec<String> = self
            .preemptions_by_hour
            .chunks(24)
            .map(|day| day.iter().map(|n| format!("{n:>2}")).collect::<Vec<_>>().join(" "))
            .collect();
        if hourly.is_empty() {
            rows.push(("preemptions/hour", "none".to_string()));
        }
        for (i, line) in hourly.into_iter().enumerate() {
            rows.push((if i == 0 { "preemptions/hour" } else { "" }, line));
        }
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (k, v) in rows {
            writeln!(f, "{k:<width$}  {v}")?;
        }
        Ok(())
    }
}
