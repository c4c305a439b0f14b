//! What `bench` prints and records for one trace: the table, its legend, the
//! one-line description of the trace, and the flat records of `--json`/`--csv`.

use comfy_table::{CellAlignment, Table, presets};
use parcae_sim::Peer;

use super::score::{BenchSettings, TraceBench};
use crate::record::{BenchRecord, RowLabel};

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
            let label = RowLabel {
                trace: bench.name.clone(),
                trace_path: bench.path.display().to_string(),
                model: model.to_string(),
                policy: row.name.clone(),
                kind: row.kind,
                policy_spec: row.spec.clone(),
                interval_ms: settings.interval_ms,
                horizon: settings.horizon,
            };
            BenchRecord {
                pct_of_ideal: percent(t.samples, Some(bench.ideal_samples)),
                pct_of_oracle: percent(t.samples, bench.oracle_samples),
                policy_expected_samples: row.policy_expected_samples,
                predictor_guest_answers: row.health.as_ref().map(|h| h.predictor_guest_answers),
                predictor_fallbacks: row.health.as_ref().map(|h| h.predictor_fallbacks),
                optimizer_guest_answers: row.health.as_ref().map(|h| h.optimizer_guest_answers),
                optimizer_fallbacks: row.health.as_ref().map(|h| h.optimizer_fallbacks),
                policy_faults: row.health.as_ref().map(|h| h.faults),
                predictor_heaviest_fuel: row.health.as_ref().map(|h| h.predictor_heaviest_fuel),
                optimizer_heaviest_fuel: row.health.as_ref().map(|h| h.optimizer_heaviest_fuel),
                fuel_per_call: row.health.as_ref().map(|h| h.fuel_per_call),
                artifact_not_profiled: row.artifact.as_ref().map(|a| a.not_profiled),
                artifact_does_not_fit: row.artifact.as_ref().map(|a| a.does_not_fit),
                artifact_missing_intervals: row.artifact.as_ref().map(|a| a.missing_intervals),
                ..BenchRecord::from_totals(label, t)
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
pub(super) fn describe(bench: &TraceBench, model: &str) -> String {
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
