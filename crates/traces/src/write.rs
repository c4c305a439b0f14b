//! Writers for the canonical event CSV and for normalised series.

use std::io::{self, Write};

use crate::model::{IntervalSeries, Trace};

/// Writes `trace` in the canonical event CSV: a `t_ms,op,node` header, then
/// one `t_ms,add|remove,node` row per event in time order, and a last
/// `t_ms,end,` row where the trace runs on past its last event. Loading the
/// output gives back the same events and the same end (node ids are
/// validated at load time so they never contain commas or line breaks).
pub fn write_events_csv(trace: &Trace, mut out: impl Write) -> io::Result<()> {
    writeln!(out, "t_ms,op,node")?;
    for e in trace.events() {
        writeln!(out, "{},{},{}", e.t_ms, e.kind.as_str(), e.node)?;
    }
    if trace.events().last().is_some_and(|e| trace.end_ms() > e.t_ms) {
        writeln!(out, "{},end,", trace.end_ms())?;
    }
    out.flush()
}

/// Writes a series as CSV: `interval,start_ms,instances,arrivals,preemptions`,
/// one row per interval (`instances` is the count at the end of the interval).
pub fn write_series_csv(series: &IntervalSeries, mut out: impl Write) -> io::Result<()> {
    writeln!(out, "interval,start_ms,instances,arrivals,preemptions")?;
    for (k, s) in series.intervals.iter().enumerate() {
        writeln!(out, "{k},{},{},{},{}", series.start_ms(k), s.instances, s.arrivals, s.preemptions)?;
    }
    out.flush()
}
