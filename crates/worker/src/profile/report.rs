//! What `profile` found: one row per candidate layout, the model and its held-out errors, the
//! transfer curve and build times, and the table printed for people.

use std::collections::BTreeMap;

use parcae_cluster::ModelSpec;
use parcae_profile::ProfileFile;
use serde::Serialize;

use super::{HoldoutReport, Measurement, PerfModel, TERMS, Timings};

/// Whether a profile entry was measured or predicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntrySource {
    /// The layout fits the machine (one core per slot) and its measured median is written.
    Measured,
    /// The model's critical-path prediction is written (the layout needs more cores, or was
    /// not trained).
    Predicted,
}

/// One candidate layout in the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayoutRow {
    /// Data-parallel degree.
    pub dp: usize,
    /// Pipeline depth.
    pub pp: usize,
    /// The measurement, if the layout was trained.
    pub measured: Option<Measurement>,
    /// The model fitted on every measurement, on the profiling machine, ms.
    pub fitted_shared_ms: f64,
    /// The leave-one-out prediction (fitted without this layout), ms.
    pub held_out_ms: Option<f64>,
    /// The model's prediction with one core per slot, ms.
    pub isolated_ms: f64,
    /// What the profile holds, ms.
    pub profile_ms: f64,
    /// Where `profile_ms` comes from.
    pub source: EntrySource,
}

/// Everything `profile` found, and the profile it wrote.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileReport {
    /// The profiled model's name.
    pub model_name: String,
    /// The profiled model and batch.
    pub spec: ModelSpec,
    /// Device, cores and build.
    pub machine: String,
    /// Cores the slots share (layouts with more slots are contended).
    pub cores: usize,
    /// Largest D x P written as measured: `cores`, or fewer if the fit found fewer effective
    /// cores.
    pub fitting_slots: usize,
    /// One row per candidate layout.
    pub rows: Vec<LayoutRow>,
    /// The model fitted to every measurement.
    pub model: PerfModel,
    /// Mean absolute relative error of `model` on the measurements it was fitted to.
    pub fit_mean_abs_rel_error: f64,
    /// Leave-one-out held-out errors.
    pub leave_one_out: Option<HoldoutReport>,
    /// Small-to-large held-out errors.
    pub extrapolation: Option<HoldoutReport>,
    /// Transfer time by size, us.
    pub transfer_us: BTreeMap<u64, Timings>,
    /// Slowest stage's build time by depth, ms.
    pub model_build_ms_by_pp: BTreeMap<u32, f64>,
    /// The profile (validated by `parcae_profile::Profile::from_data`).
    pub profile: ProfileFile,
}

/// A fraction as a percentage with one decimal.
pub(super) fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn fmt_size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// The report as a table for people: per layout the measurement (median [min-max]), the fit,
/// the held-out prediction and its error, and what the profile holds; then the model, the
/// held-out summaries, the transfer curve and the build times.
pub fn render_table(report: &ProfileReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let params: u64 = (0..report.spec.num_layers()).map(|l| report.spec.layer_params(l)).sum();
    let _ = writeln!(
        out,
        "model {} ({} layers, {} parameters, global batch {} = {} micro-batches of {}) on {}",
        report.model_name,
        report.spec.num_layers(),
        params,
        report.spec.global_batch,
        report.spec.micro_batches(),
        report.spec.micro_batch,
        report.machine
    );
    let _ = writeln!(
        out,
        "{:>2} {:>2} {:>5}  {:>26}  {:>8}  {:>9} {:>7}  {:>10}  entry",
        "D", "P", "slots", "measured ms median [min-max]", "fit ms", "held-out", "error", "profile ms",
    );
    for r in &report.rows {
        let measured = match &r.measured {
            Some(m) => format!("{:.1} [{:.1}-{:.1}]", m.step_ms.median, m.step_ms.min, m.step_ms.max),
            None => "-".to_string(),
        };
        let (held, err) = match (r.held_out_ms, &r.measured) {
            (Some(h), Some(m)) => {
                (format!("{h:.1}"), format!("{:+.1}%", (h / m.step_ms.median - 1.0) * 100.0))
            }
            _ => ("-".to_string(), "-".to_string()),
        };
        let entry = match r.source {
            EntrySource::Measured => "measured",
            EntrySource::Predicted if r.measured.is_some() => "predicted (measured contended)",
            EntrySource::Predicted => "predicted (not run)",
        };
        let _ = writeln!(
            out,
            "{:>2} {:>2} {:>5}  {:>26}  {:>8.1}  {:>9} {:>7}  {:>10.1}  {}",
            r.dp,
            r.pp,
            r.dp * r.pp,
            measured,
            r.fitted_shared_ms,
            held,
            err,
            r.profile_ms,
            entry
        );
    }
    let _ = writeln!(
        out,
        "performance model (ms; one core per slot = critical path; on this machine max(critical, work / {:.2} \
         effective cores)):",
        report.model.effective_cores
    );
    for (t, c) in TERMS.iter().zip(report.model.coefficients) {
        let _ = writeln!(out, "  {t:>22} {c:10.4}");
    }
    let _ =
        writeln!(out, "fit error on the fitted layouts: mean |error| {}", pct(report.fit_mean_abs_rel_error));
    for h in [&report.leave_one_out, &report.extrapolation] {
        match h {
            Some(h) => {
                let worst = h.worst().map(|w| format!(" (D={} P={})", w.dp, w.pp)).unwrap_or_default();
                let _ = writeln!(
                    out,
                    "held-out, {}: mean |error| {}, max {}{}",
                    h.method,
                    pct(h.mean_abs_rel_error),
                    pct(h.max_abs_rel_error),
                    worst
                );
            }
            None => {
                let _ = writeln!(out, "held-out: not enough measured layouts");
            }
        }
    }
    let transfer = report
        .transfer_us
        .iter()
        .map(|(s, t)| format!("{} {:.0} us", fmt_size(*s), t.median))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(out, "transfer (QUIC on loopback, median): {transfer}");
    if let Some((&size, t)) = report.transfer_us.iter().next_back() {
        let _ = writeln!(out, "  bandwidth at {}: {:.0} MB/s", fmt_size(size), size as f64 / t.median);
    }
    let build = report
        .model_build_ms_by_pp
        .iter()
        .map(|(p, ms)| format!("P={p} {ms:.1} ms"))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(out, "model build (slowest stage): {build}");
    out
}
