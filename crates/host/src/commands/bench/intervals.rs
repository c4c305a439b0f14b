//! `bench --intervals`: every row's layout and samples interval by interval.
//!
//! The table gives totals; when a policy ends a few hundred samples behind
//! reactive, the question is where: which interval it ran another layout,
//! what that earned, and how far behind it was at each point. One CSV row per
//! (trace, row, interval) answers it with a spreadsheet or a one-line filter,
//! for every row of the table, the Ideal bound and the peers included.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

use super::score::TraceBench;
use crate::record::{create, layout_name};

/// One row's one interval, as written.
#[derive(Debug, Serialize)]
struct IntervalLine<'a> {
    trace: &'a str,
    model: &'a str,
    policy: &'a str,
    interval: usize,
    /// Seconds from the trace's start to the interval's.
    start_s: f64,
    instances: u32,
    arrivals: u32,
    preemptions: u32,
    /// `DxP`, or `pause`.
    layout: String,
    /// Expected net samples of the interval (what a rollback took is off).
    samples: f64,
    /// The row's samples up to and including this interval.
    cumulative_samples: f64,
    /// Expected samples a restart rolled back in this interval.
    lost_samples: f64,
    /// Expected seconds of the interval spent migrating.
    migration_s: f64,
    /// Probability that the interval began with a restart from checkpoint.
    p_restart: f64,
}

/// The `--intervals` file, written one trace at a time as `bench` scores them.
pub struct IntervalsWriter {
    writer: csv::Writer<BufWriter<File>>,
    path: PathBuf,
}

impl IntervalsWriter {
    /// Creates (or truncates) `path`.
    pub fn create(path: &Path) -> anyhow::Result<Self> {
        Ok(Self { writer: csv::Writer::from_writer(create(path)?), path: path.to_path_buf() })
    }

    /// Appends every row of `bench`, each interval in order.
    pub fn write(&mut self, bench: &TraceBench, model: &str) -> anyhow::Result<()> {
        let interval_s = bench.series.interval_ms as f64 / 1000.0;
        for row in &bench.rows {
            for (record, cumulative) in row.result.intervals.iter().zip(row.result.cumulative_samples()) {
                let line = IntervalLine {
                    trace: &bench.name,
                    model,
                    policy: &row.name,
                    interval: record.interval,
                    start_s: record.interval as f64 * interval_s,
                    instances: record.instances,
                    arrivals: record.arrivals,
                    preemptions: record.preemptions,
                    layout: layout_name(record.config),
                    samples: record.samples,
                    cumulative_samples: cumulative,
                    lost_samples: record.lost_samples,
                    migration_s: record.migration_ms / 1000.0,
                    p_restart: record.p_restart,
                };
                self.writer.serialize(line).with_context(|| format!("writing {}", self.path.display()))?;
            }
        }
        Ok(())
    }

    /// Flushes the file; returns its path.
    pub fn finish(mut self) -> anyhow::Result<PathBuf> {
        self.writer.flush().with_context(|| format!("writing {}", self.path.display()))?;
        Ok(self.path)
    }
}
