//! The profile file `profile` writes (`profiles/README.md` has the format): its entries, the
//! `source` note saying which are measured and which predicted, and writing it back-checked.

use std::collections::BTreeMap;
use std::path::Path;

use parcae_profile::{Arch, Instance, LayerParams, ModelEntry, Profile, ProfileFile, ThroughputEntry};

use super::report::{EntrySource, LayoutRow, ProfileReport, pct};
use super::{HoldoutReport, ProfileOptions, ProfilingError, TERMS};

/// Rounds to three decimals, the precision the profile file keeps.
pub(super) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A placeholder the report holds until [`build_profile`] fills it in.
pub(super) fn empty_profile() -> ProfileFile {
    ProfileFile {
        source: None,
        instance: Instance {
            instance_type: String::new(),
            gpus: 1,
            gpu: None,
            network_gbps: None,
            on_demand_usd_per_hour: 0.0,
            spot_usd_per_hour: 0.0,
            price_source: None,
        },
        units: BTreeMap::new(),
        p2p_us_by_bytes: BTreeMap::new(),
        models: BTreeMap::new(),
        layer_params: BTreeMap::new(),
    }
}

/// The layouts of `rows` as `(D,P)` pairs, for the `source` note.
fn list(rows: &[&LayoutRow]) -> String {
    if rows.is_empty() {
        return "none".to_string();
    }
    rows.iter().map(|r| format!("({},{})", r.dp, r.pp)).collect::<Vec<_>>().join(" ")
}

/// The profile file for `report` (see `profiles/README.md` for the format).
pub(super) fn build_profile(opts: &ProfileOptions, report: &ProfileReport) -> ProfileFile {
    let spec = &opts.spec;
    let name = &opts.model_name;
    let measured: Vec<&LayoutRow> =
        report.rows.iter().filter(|r| r.source == EntrySource::Measured).collect();
    let predicted: Vec<&LayoutRow> =
        report.rows.iter().filter(|r| r.source == EntrySource::Predicted).collect();
    let coefficients = TERMS
        .iter()
        .zip(report.model.coefficients)
        .map(|(t, c)| format!("{t} {c:.4}"))
        .collect::<Vec<_>>()
        .join(", ");
    let holdout = |r: &Option<HoldoutReport>| match r {
        Some(r) => format!(
            "{}: mean |error| {}, max {}",
            r.method,
            pct(r.mean_abs_rel_error),
            pct(r.max_abs_rel_error)
        ),
        None => "not enough layouts".to_string(),
    };
    let proc_init = match opts.proc_init_ms {
        Some(_) => "proc_init_ms MEASURED (worker binary start and exit)",
        None => "proc_init_ms NOT MEASURED (example profile's value)",
    };
    let source = format!(
        "MEASURED AND PREDICTED by `parcae-worker profile` on this machine ({machine}; one instance = {hw}, \
         one libtorch thread per slot). Model `{name}` = parcae_cluster::{spec:?}. Layouts trained \
         in-process (train_local: one thread per slot, in-process links and all-reduce, the real StageTrainer), \
         {warm} warm-up then {steps} timed steps, median. MEASURED entries (D*P <= {fit}, one core per slot): \
         {m}. PREDICTED entries (critical-path model, one core per slot): {p}. Model: iteration_ms = sum of \
         coefficient x term ({coefficients}; terms in parcae_worker::profile::LayoutFeatures), on this machine \
         max(that, total work / {c_eff:.2} effective cores). Held-out error: {loo}; {ext}. p2p_us_by_bytes \
         MEASURED: parcae-net QUIC state transfer (mutual TLS, checksummed chunks) on 127.0.0.1, median of {reps}. \
         model_build_ms_by_pp MEASURED (slowest stage's StageTrainer build). {proc_init}; rendezvous_ms and \
         restart_extra_ms NOT MEASURED (defaults). Prices: {prices}.",
        machine = report.machine,
        hw = opts.hardware,
        warm = opts.warmup_steps,
        steps = opts.steps,
        fit = report.fitting_slots,
        m = list(&measured),
        p = list(&predicted),
        c_eff = report.model.effective_cores,
        loo = holdout(&report.leave_one_out),
        ext = holdout(&report.extrapolation),
        reps = opts.transfer_reps,
        prices = opts.price_source,
    );
    let throughput = report
        .rows
        .iter()
        .map(|r| {
            let iteration_ms = round3(r.profile_ms);
            ThroughputEntry {
                dp: r.dp as u32,
                pp: r.pp as u32,
                iteration_ms,
                samples_per_s: round3(spec.global_batch as f64 * 1000.0 / iteration_ms),
            }
        })
        .collect();
    let units = [
        ("iteration_ms", "ms"),
        ("samples_per_s", "samples/s"),
        ("p2p_us", "microseconds per transfer of that many bytes"),
        ("model_build_ms", "ms"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let entry = ModelEntry {
        micro_batch_size: spec.micro_batch as u32,
        global_batch_size: spec.global_batch as u32,
        proc_init_ms: round3(opts.proc_init_ms.unwrap_or(30.0)),
        rendezvous_ms: opts.rendezvous_ms,
        restart_extra_ms: opts.restart_extra_ms,
        model_build_ms_by_pp: report.model_build_ms_by_pp.clone(),
        throughput,
    };
    let layer_params = LayerParams {
        layers: (0..spec.num_layers()).map(|l| spec.layer_params(l)).collect(),
        optimizer_states_per_param: 2,
        bytes_per_value: 4,
        arch: Some(Arch {
            micro_batch_size: Some(spec.micro_batch as u32),
            nlayers: Some(spec.n_blocks as u32),
            seq_length: Some(spec.seq_len as u32),
            hidden_size: Some(spec.d_model as u32),
            nheads: Some(spec.n_heads as u32),
            vocab_size: Some(spec.vocab as u32),
            stage_p2p_num: Some((spec.micro_batch * spec.seq_len * spec.d_model) as u64),
            extra: BTreeMap::new(),
        }),
    };
    ProfileFile {
        source: Some(source),
        instance: Instance {
            instance_type: opts.instance_type.clone(),
            gpus: 1,
            gpu: Some(opts.hardware.clone()),
            network_gbps: None,
            on_demand_usd_per_hour: opts.on_demand_usd_per_hour,
            spot_usd_per_hour: opts.spot_usd_per_hour,
            price_source: Some(opts.price_source.clone()),
        },
        units,
        p2p_us_by_bytes: report.transfer_us.iter().map(|(&s, t)| (s, round3(t.median.max(0.001)))).collect(),
        models: [(name.clone(), entry)].into_iter().collect(),
        layer_params: [(name.clone(), layer_params)].into_iter().collect(),
    }
}

/// Writes `profile` as pretty JSON to `path` (creating its directory) and checks that the cost
/// model loads the file back, as `parcae-host bench/run --profile` will.
pub fn write_profile(profile: &ProfileFile, path: &Path) -> Result<(), ProfilingError> {
    let io = |source| ProfilingError::Io { path: path.to_path_buf(), source };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let text = serde_json::to_string_pretty(profile).map_err(|e| io(std::io::Error::other(e)))?;
    std::fs::write(path, text + "\n").map_err(io)?;
    Profile::load(path)?;
    Ok(())
}
