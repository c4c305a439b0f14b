//! The record of one scored (trace, decision maker) pair, shared by `bench`
//! (one per row of its tables) and `run` (a real run summarised in the same
//! fields), so a run and its simulation line up field by field; and the
//! `--json`/`--csv` writers of those records.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use parcae_runtime::FaultCounts;
use serde::Serialize;

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
