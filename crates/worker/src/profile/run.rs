//! The whole `profile` pipeline: measure, fit, hold out, measure transfers, then build and
//! validate the profile.

use std::collections::{BTreeMap, BTreeSet};

use parcae_cluster::{Layout, LayoutError};
use parcae_profile::Profile;

use super::file::{build_profile, empty_profile, round3};
use super::measure::{Measurement, measure_layouts, measure_model_build};
use super::report::{EntrySource, LayoutRow, ProfileReport};
use super::transfer::{default_transfer_sizes, measure_transfer};
use super::{ProfileOptions, ProfilingError, candidate_layouts};
use parcae_cluster::perf::{
    GradientExchange, LayoutFeatures, Observation, extrapolation, fit, layout_features, leave_one_out,
};

#[cfg(doc)]
use super::write_profile;

/// What [`run_profile`] reports while it works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress<'a> {
    /// The work ahead, in units: each layout's warm-up and each of its timed steps, the stage
    /// builds of each pipeline depth, and the transfer curve. Sent once, first.
    Planned(u64),
    /// One unit done.
    Unit,
    /// A finished measurement, one line of text.
    Line(&'a str),
}

/// Measures, fits and builds the profile (see the module docs). `progress` hears the work
/// planned, each unit done, and one line per finished measurement. The profile is validated
/// but not written ([`write_profile`]).
pub fn run_profile(
    opts: &ProfileOptions,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<ProfileReport, ProfilingError> {
    let spec = &opts.spec;
    spec.validate()?;
    if opts.steps == 0 {
        return Err(ProfilingError::Options("--steps must be at least 1".into()));
    }
    let candidates = candidate_layouts(spec, opts.max_instances);
    if candidates.is_empty() {
        return Err(ProfilingError::Options(format!(
            "no layout with at most {} instances can run this model",
            opts.max_instances
        )));
    }
    let to_measure: Vec<(usize, usize)> =
        candidates.iter().copied().filter(|(d, p)| d * p <= opts.measure_max).collect();
    let depths: BTreeSet<usize> = candidates.iter().map(|&(_, p)| p).collect();
    let per_layout = opts.steps + u64::from(opts.warmup_steps > 0);
    progress(Progress::Planned(to_measure.len() as u64 * per_layout + depths.len() as u64 + 1));
    let mut measured: BTreeMap<(usize, usize), Measurement> = BTreeMap::new();
    let mut unit = || progress(Progress::Unit);
    let measurements =
        measure_layouts(spec, &to_measure, opts.device, opts.warmup_steps, opts.steps, &mut unit)?;
    for m in measurements {
        progress(Progress::Line(&format!(
            "measured D={} P={}: median {:.1} ms [{:.1} - {:.1}] over {} steps, loss {:.3}",
            m.dp, m.pp, m.step_ms.median, m.step_ms.min, m.step_ms.max, opts.steps, m.last_loss
        )));
        measured.insert((m.dp, m.pp), m);
    }
    if measured.is_empty() {
        return Err(ProfilingError::Options(format!(
            "--measure-max {} leaves no layout to measure",
            opts.measure_max
        )));
    }
    let features: BTreeMap<(usize, usize), LayoutFeatures> = candidates
        .iter()
        .map(|&(d, p)| {
            Ok(((d, p), layout_features(spec, &Layout::new(spec, d, p)?, GradientExchange::InProcess)))
        })
        .collect::<Result<_, LayoutError>>()?;
    let obs: Vec<Observation> = measured
        .values()
        .map(|m| Observation {
            dp: m.dp,
            pp: m.pp,
            features: features[&(m.dp, m.pp)],
            measured_ms: m.step_ms.median,
        })
        .collect();
    let cores = opts.cores.max(1) as f64;
    let model = fit(&obs, cores).map_err(|e| ProfilingError::Options(e.to_string()))?;
    let fit_err = obs
        .iter()
        .map(|o| ((model.predict_shared(&o.features) - o.measured_ms) / o.measured_ms).abs())
        .sum::<f64>()
        / obs.len() as f64;
    let loo = leave_one_out(&obs, cores);
    let largest = obs.iter().map(|o| o.dp * o.pp).max().unwrap_or(1);
    let extra = extrapolation(&obs, cores, (largest / 2).max(1));

    let mut build = BTreeMap::new();
    for &p in &depths {
        build.insert(p as u32, round3(measure_model_build(spec, p, opts.device, opts.build_reps)?));
        progress(Progress::Unit);
    }
    progress(Progress::Line(&format!("model build (slowest stage) by depth: {build:?} ms")));

    let sizes = if opts.transfer_sizes.is_empty() {
        default_transfer_sizes(spec)
    } else {
        opts.transfer_sizes.clone()
    };
    let transfer = measure_transfer(&sizes, opts.transfer_reps)?;
    progress(Progress::Unit);
    progress(Progress::Line(&format!(
        "transfer over QUIC: {}",
        transfer.iter().map(|(s, t)| format!("{s} B {:.0} us", t.median)).collect::<Vec<_>>().join(", ")
    )));

    // A layout fits the machine when each slot had a core of its own while measured: at most
    // `cores` slots, and no more than the effective cores the fit found (other load on the
    // machine leaves fewer).
    let fitting_slots = opts.cores.max(1).min((model.effective_cores + 1e-9).floor() as usize).max(1);
    let rows: Vec<LayoutRow> = candidates
        .iter()
        .map(|&(d, p)| {
            let f = &features[&(d, p)];
            let m = measured.get(&(d, p)).cloned();
            let isolated_ms = model.predict_isolated(f);
            let fits = d * p <= fitting_slots;
            let (profile_ms, source) = match &m {
                Some(m) if fits => (m.step_ms.median, EntrySource::Measured),
                _ => (isolated_ms, EntrySource::Predicted),
            };
            let held_out_ms = loo
                .as_ref()
                .and_then(|r| r.points.iter().find(|h| (h.dp, h.pp) == (d, p)))
                .map(|h| h.predicted_ms);
            LayoutRow {
                dp: d,
                pp: p,
                measured: m,
                fitted_shared_ms: model.predict_shared(f),
                held_out_ms,
                isolated_ms,
                profile_ms,
                source,
            }
        })
        .collect();

    let machine = format!(
        "{:?}, {} cores, {} build",
        opts.device,
        opts.cores,
        if cfg!(debug_assertions) { "debug" } else { "release" }
    );
    let mut report = ProfileReport {
        model_name: opts.model_name.clone(),
        spec: spec.clone(),
        machine,
        cores: opts.cores,
        fitting_slots,
        rows,
        model,
        fit_mean_abs_rel_error: fit_err,
        leave_one_out: loo,
        extrapolation: extra,
        transfer_us: transfer,
        model_build_ms_by_pp: build,
        profile: empty_profile(),
    };
    report.profile = build_profile(opts, &report);
    Profile::from_data(report.profile.clone(), "<parcae-worker profile>")?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use parcae_cluster::ModelSpec;
    use tch::Device;

    use super::*;
    use crate::profile::{render_table, write_profile};

    /// A real, tiny run: three layouts, two timed steps each, QUIC transfers of two sizes;
    /// the profile validates and marks what fits two cores as measured.
    #[test]
    fn tiny_real_profile_validates() {
        let spec = ModelSpec {
            vocab: 16,
            d_model: 16,
            n_heads: 2,
            n_blocks: 2,
            seq_len: 8,
            global_batch: 4,
            micro_batch: 1,
            learning_rate: 1e-3,
            seed: 3,
        };
        let opts = ProfileOptions {
            warmup_steps: 1,
            steps: 2,
            max_instances: 4,
            measure_max: 2,
            cores: 2,
            transfer_sizes: vec![1024, 64 << 10],
            transfer_reps: 2,
            build_reps: 1,
            proc_init_ms: Some(12.5),
            model_name: "tiny".into(),
            ..ProfileOptions::new(spec.clone(), Device::Cpu)
        };
        let (mut lines, mut planned, mut units) = (Vec::new(), Vec::new(), 0);
        let report = run_profile(&opts, &mut |event| match event {
            Progress::Planned(n) => planned.push(n),
            Progress::Unit => units += 1,
            Progress::Line(l) => lines.push(l.to_string()),
        })
        .unwrap();
        assert_eq!(lines.len(), 3 + 2, "{lines:?}");
        // Three layouts of a warm-up and two steps each, the builds of the three depths of
        // the layouts up to 4 instances, the transfers.
        assert_eq!(planned, [3 * 3 + 3 + 1]);
        assert_eq!(units, planned[0], "every planned unit is reported done");
        // What fits two cores, or fewer if other load left less than two effective cores.
        let measured: Vec<(usize, usize)> =
            report.rows.iter().filter(|r| r.source == EntrySource::Measured).map(|r| (r.dp, r.pp)).collect();
        assert_eq!(report.rows.iter().filter(|r| r.measured.is_some()).count(), 3);
        assert!(
            measured.first() == Some(&(1, 1)) && measured.iter().all(|&(d, p)| d * p <= 2),
            "{measured:?}"
        );
        assert_eq!(measured.len(), if report.fitting_slots == 2 { 3 } else { 1 });
        assert!(report.rows.iter().any(|r| r.source == EntrySource::Predicted && r.measured.is_none()));
        assert!(report.leave_one_out.is_some());
        let profile = Profile::from_data(report.profile.clone(), "tiny.json").unwrap();
        let entry = profile.model("tiny").unwrap();
        assert_eq!(entry.throughput.len(), report.rows.len());
        assert_eq!((entry.micro_batch_size, entry.global_batch_size, entry.proc_init_ms), (1, 4, 12.5));
        let lp = profile.layer_params("tiny").unwrap();
        assert_eq!(lp.layers, (0..spec.num_layers()).map(|l| spec.layer_params(l)).collect::<Vec<_>>());
        assert_eq!(profile.data().p2p_us_by_bytes.len(), 2);
        let source = profile.data().source.as_deref().unwrap();
        assert!(source.contains("MEASURED entries") && source.contains("(2,2)"), "{source}");
        let table = render_table(&report);
        assert!(table.contains("held-out") && table.contains("measured"), "{table}");
        let path = std::env::temp_dir().join(format!("parcae-profile-test-{}.json", std::process::id()));
        write_profile(&report.profile, &path).unwrap();
        assert_eq!(Profile::load(&path).unwrap().data(), &report.profile);
        let _ = std::fs::remove_file(&path);
    }
}
