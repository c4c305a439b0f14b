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
    /// A reference decision maker (`bench --baselines`).
    Baseline,
    /// A policy component run in the sandbox.
    Policy,
    /// A published system modelled on the same profile.
    Peer,
    /// A real run of `parcae-host run` (its event log carries this record).
    Run,
    /// The simulator's prediction of a real run: its realized fleet and layouts replayed
    /// (the event log carries it beside the `run` record).
    Simulated,
}

/// How a policy behaved in the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyHealth {
    /// Forecasts the guest answered.
    pub predictor_guest_answers: u64,
    /// Forecasts the built-in fallback answered.
    pub predictor_fallbacks: u64,
    /// Plans the guest answered.
    pub optimizer_guest_answers: u64,
    /// Plans the built-in fallback answered.
    pub optimizer_fallbacks: u64,
    /// Faults of both interfaces.
    pub faults: u64,
    /// Fuel the heaviest forecast the guest answered burned.
    pub predictor_heaviest_fuel: u64,
    /// Fuel the heaviest plan the guest answered burned.
    pub optimizer_heaviest_fuel: u64,
    /// The fuel budget of one call (`--fuel`; 0 when the guest never answered).
    pub fuel_per_call: u64,
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
            predictor_heaviest_fuel: predictor.heaviest_fuel,
            optimizer_heaviest_fuel: optimizer.heaviest_fuel,
            fuel_per_call: predictor.fuel_per_call.max(optimizer.fuel_per_call),
            summary: format!("predictor: {predictor}; optimizer: {optimizer}"),
        }
    }

    /// The notes a table prints under `policy`'s row: its faults when it had
    /// any, and how close its heaviest call came to the fuel budget (a call
    /// over it is answered by the fallback, so a policy near it is one larger
    /// fleet or profile away from falling back).
    pub fn notes(&self, policy: &str) -> Vec<String> {
        let mut notes = Vec::new();
        if self.faults > 0 {
            notes.push(format!("{policy}: {}", self.summary));
        }
        let heaviest = self.predictor_heaviest_fuel.max(self.optimizer_heaviest_fuel);
        if self.fuel_per_call > 0 {
            let call = if self.optimizer_heaviest_fuel >= self.predictor_heaviest_fuel {
                "plan"
            } else {
                "forecast"
            };
            let percent = 100.0 * heaviest as f64 / self.fuel_per_call as f64;
            let warning = if percent >= NEAR_THE_FUEL_BUDGET_PERCENT {
                "; close to the budget: a call over it falls back to the built-in policy (raise --fuel or lighten the policy)"
            } else {
                ""
            };
            notes.push(format!(
                "{policy}: its heaviest call (a {call}) used {percent:.1}% of the fuel budget ({heaviest} of {} units, --fuel){warning}",
                self.fuel_per_call
            ));
        }
        notes
    }
}

/// A heaviest call at or above this share of the fuel budget gets a warning.
const NEAR_THE_FUEL_BUDGET_PERCENT: f64 = 80.0;

/// One (trace, policy) line of `--json` and `--csv`: every figure, flat.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchRecord {
    /// Display name of the trace.
    pub trace: String,
    /// The trace file as given.
    pub trace_path: String,
    /// Model of the profile.
    pub model: String,
    /// Decision maker (baseline, peer, policy or run).
    pub policy: String,
    /// What produced the record.
    pub kind: RowKind,
    /// The policy argument as given (policies only).
    pub policy_spec: Option<String>,
    /// Length of one interval, ms.
    pub interval_ms: u64,
    /// Plan horizon H, intervals.
    pub horizon: u32,
    /// Intervals scored.
    pub intervals: usize,
    /// Trace time scored, hours.
    pub hours: f64,
    /// Net samples trained.
    pub samples: f64,
    /// Samples rolled back by restarts from checkpoint (already off `samples`).
    pub lost_samples: f64,
    /// Samples per trace hour.
    pub samples_per_hour: f64,
    /// Samples as a percentage of the Ideal bound.
    pub pct_of_ideal: Option<f64>,
    /// Samples as a percentage of the Oracle (when scored).
    pub pct_of_oracle: Option<f64>,
    /// Expected intra-stage reconfigurations.
    pub migrations_intra_stage: f64,
    /// Expected inter-stage reconfigurations.
    pub migrations_inter_stage: f64,
    /// Expected repartitions.
    pub migrations_repartition: f64,
    /// Expected restarts from checkpoint.
    pub migrations_restart: f64,
    /// All expected reconfigurations.
    pub migrations_total: f64,
    /// Starts from nothing (first layout, after a pause with no state).
    pub cold_starts: usize,
    /// Intervals whose layout differs from the previous one.
    pub config_changes: usize,
    /// Intervals with no layout.
    pub paused_intervals: usize,
    /// Expected hours spent reconfiguring.
    pub migration_hours: f64,
    /// Instance-hours paid for.
    pub instance_hours: f64,
    /// Cost at the spot price.
    pub usd_spot: f64,
    /// Cost at the on-demand price.
    pub usd_on_demand: f64,
    /// Spot dollars per million samples.
    pub usd_per_million_samples_spot: Option<f64>,
    /// On-demand dollars per million samples.
    pub usd_per_million_samples_on_demand: Option<f64>,
    /// Samples the policy expected itself (before migration costs as it saw them).
    pub policy_expected_samples: Option<f64>,
    /// Forecasts the guest answered.
    pub predictor_guest_answers: Option<u64>,
    /// Forecasts the built-in fallback answered.
    pub predictor_fallbacks: Option<u64>,
    /// Plans the guest answered.
    pub optimizer_guest_answers: Option<u64>,
    /// Plans the built-in fallback answered.
    pub optimizer_fallbacks: Option<u64>,
    /// Faults of both interfaces.
    pub policy_faults: Option<u64>,
    /// Fuel the heaviest forecast the guest answered burned.
    pub predictor_heaviest_fuel: Option<u64>,
    /// Fuel the heaviest plan the guest answered burned.
    pub optimizer_heaviest_fuel: Option<u64>,
    /// The fuel budget of one policy call.
    pub fuel_per_call: Option<u64>,
    /// Recorded layouts not in the profile.
    pub artifact_not_profiled: Option<usize>,
    /// Recorded layouts larger than the fleet.
    pub artifact_does_not_fit: Option<usize>,
    /// Intervals the record has no decision for.
    pub artifact_missing_intervals: Option<usize>,
}

/// Who and what a record describes: the fields that are not figures.
#[derive(Debug, Clone)]
pub struct RowLabel {
    /// Display name of the trace.
    pub trace: String,
    /// The trace file as given.
    pub trace_path: String,
    /// Model of the profile.
    pub model: String,
    /// Decision maker.
    pub policy: String,
    /// What produced the record.
    pub kind: RowKind,
    /// The policy argument as given (policies only).
    pub policy_spec: Option<String>,
    /// Length of one interval, ms.
    pub interval_ms: u64,
    /// Plan horizon H, intervals.
    pub horizon: u32,
}

impl BenchRecord {
    /// The record of simulated `totals`, with no percentages, policy health or artifact
    /// counts (callers that have them set them), so every producer of simulated records
    /// fills the shared figures the same way.
    pub fn from_totals(label: RowLabel, t: &parcae_sim::Totals) -> Self {
        BenchRecord {
            trace: label.trace,
            trace_path: label.trace_path,
            model: label.model,
            policy: label.policy,
            kind: label.kind,
            policy_spec: label.policy_spec,
            interval_ms: label.interval_ms,
            horizon: label.horizon,
            intervals: t.intervals,
            hours: t.hours,
            samples: t.samples,
            lost_samples: t.lost_samples,
            samples_per_hour: t.samples_per_hour,
            pct_of_ideal: None,
            pct_of_oracle: None,
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
            policy_expected_samples: None,
            predictor_guest_answers: None,
            predictor_fallbacks: None,
            optimizer_guest_answers: None,
            optimizer_fallbacks: None,
            policy_faults: None,
            predictor_heaviest_fuel: None,
            optimizer_heaviest_fuel: None,
            fuel_per_call: None,
            artifact_not_profiled: None,
            artifact_does_not_fit: None,
            artifact_missing_intervals: None,
        }
    }
}

/// How every output names an interval's layout: `DxP`, or `pause` for none,
/// so `replay`'s table and `bench --intervals` read alike.
pub fn layout_name(config: Option<parcae_policy_core::ParallelConfig>) -> String {
    config.map_or_else(|| "pause".to_string(), |c| c.to_string())
}

/// Creates (or truncates) `path` for writing; the error names it.
pub fn create(path: &Path) -> anyhow::Result<std::io::BufWriter<std::fs::File>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn health(predictor: u64, optimizer: u64, faults: u64) -> PolicyHealth {
        PolicyHealth {
            predictor_guest_answers: 10,
            predictor_fallbacks: 0,
            optimizer_guest_answers: 10,
            optimizer_fallbacks: faults,
            faults,
            predictor_heaviest_fuel: predictor,
            optimizer_heaviest_fuel: optimizer,
            fuel_per_call: 1_000,
            summary: "counters".into(),
        }
    }

    #[test]
    fn the_notes_say_how_near_the_fuel_budget_a_policy_runs() {
        let calm = health(10, 250, 0).notes("p.wasm");
        assert_eq!(
            calm,
            ["p.wasm: its heaviest call (a plan) used 25.0% of the fuel budget (250 of 1000 units, --fuel)"]
        );
        let near = health(800, 20, 2).notes("p.wasm");
        assert_eq!(near[0], "p.wasm: counters");
        assert!(near[1].starts_with("p.wasm: its heaviest call (a forecast) used 80.0% "), "{near:?}");
        assert!(near[1].contains("close to the budget"), "{near:?}");
        assert!(!health(10, 799, 0).notes("p.wasm")[0].contains("close to the budget"));
        // A guest that never answered has no heaviest call to report.
        let silent = PolicyHealth { fuel_per_call: 0, ..health(0, 0, 3) };
        assert_eq!(silent.notes("p.wasm"), ["p.wasm: counters"]);
    }
}
