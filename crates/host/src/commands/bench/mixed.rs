//! `bench` on a mixed fleet (spotDNN): `--trace p3=FILE --trace g4dn=FILE` gives one
//! availability trace per instance type, and one job trains on their union, its replicas
//! on every type with the batch split by speed ([`parcae_sim::mixed`]).
//!
//! Every row is scored under the mixed model: each interval's composition sets what each
//! layout trains; the Oracle and liveput-truth plan with those per-interval throughputs
//! ([`parcae_policy_core::plan::best_plan_varying`]); reactive takes the fastest layout
//! each composition runs; a policy plans with its interval's composition (the layouts it
//! can run now) and is scored like the baselines. Each type is paid at its own prices.
//! Every row but Ideal trains at the checkpoint cadence of `--cadence`, computed from the
//! union fleet's losses ([`CadencedViews`]): by default each interval's view is its
//! composition at the cadence of the losses seen so far.
//! The peers (Bamboo, Varuna, Oobleck) train on one instance type, and the Parcae
//! artifact recorded single-type decisions: neither has a mixed-fleet row.

use std::path::{Path, PathBuf};

use anyhow::Context;
use indicatif::ProgressBar;
use parcae_policy_core::{ModelProfile, ParallelConfig, Recovery};
use parcae_sim::mixed::{self as sim_mixed, CadencedViews, Compositions, MixedFleet};
use parcae_sim::{MigrationMode, Prices, SimResult};
use parcae_traces::IntervalSeries;

use super::score::{Baseline, BenchSettings, PolicyEntry, Row, TraceBench, cadence_note};
use crate::commands::provision::LoadedOffer;
use crate::control::{ControlSettings, FleetTypes, replay_profiles};
use crate::embedded::{P3_DEFAULT_MODEL, P3_PROFILE};
use crate::record::{PolicyHealth, RowKind};

/// Whether a `--trace` argument names an instance type (`NAME=FILE[,KEY=VALUE]...`) rather
/// than a trace file: it has an `=` before any path separator and is not itself a file.
pub fn is_typed(arg: &Path) -> bool {
    let Some(text) = arg.to_str() else { return false };
    match text.split_once('=') {
        Some((name, _)) => !name.is_empty() && !name.contains(['/', '\\']) && !arg.exists(),
        None => false,
    }
}

/// The types of a mixed `bench`, loaded from `--trace NAME=FILE[,profile=FILE][,spot=USD]
/// [,on-demand=USD]` arguments (profile default: `--profile`, else the embedded p3 one).
pub fn load_types(
    traces: &[PathBuf],
    profile: &crate::args::ProfileArgs,
    input: &crate::args::TraceInput,
    interval_ms: u64,
) -> anyhow::Result<Vec<LoadedOffer>> {
    let mut types: Vec<LoadedOffer> = Vec::new();
    for arg in traces {
        let text = arg.to_str().context("--trace: not UTF-8")?;
        anyhow::ensure!(
            is_typed(arg),
            "--trace {text}: a mixed fleet names every trace's instance type (NAME=FILE); \
             score single-type traces in another run"
        );
        let fallback = Some((P3_PROFILE, P3_DEFAULT_MODEL));
        let loaded = LoadedOffer::load(text, "--trace", profile, fallback, input, interval_ms)?;
        anyhow::ensure!(
            types.iter().all(|t| t.offer.name != loaded.offer.name),
            "--trace {}: the instance type is given twice",
            loaded.offer.name
        );
        if let Some(first) = types.first() {
            let (a, b) = (&first.profile, &loaded.profile);
            anyhow::ensure!(
                (a.global_batch_size, a.micro_batch_size) == (b.global_batch_size, b.micro_batch_size),
                "--trace {}: its profile trains batches of {} in micro-batches of {}, {}'s {} in {}: \
                 one job cannot mix them",
                loaded.offer.name,
                b.global_batch_size,
                b.micro_batch_size,
                first.offer.name,
                a.global_batch_size,
                a.micro_batch_size
            );
        }
        types.push(loaded);
    }
    Ok(types)
}

/// Scores every baseline of `settings` and every policy on the union of `types`' traces.
pub fn bench_mixed(
    types: &[LoadedOffer],
    policies: &[PolicyEntry],
    settings: &BenchSettings,
    recovery: Recovery,
    progress: &ProgressBar,
) -> anyhow::Result<TraceBench> {
    let interval_ms = settings.interval_ms;
    let name = types.iter().map(|t| t.offer.name.as_str()).collect::<Vec<_>>().join(" + ");
    let path = PathBuf::from(
        types
            .iter()
            .map(|t| format!("{}={}", t.offer.name, t.offer.trace.display()))
            .collect::<Vec<_>>()
            .join(","),
    );
    let series: Vec<&[parcae_policy_core::IntervalStats]> =
        types.iter().map(|t| t.market.series.as_slice()).collect();
    let fleet = MixedFleet::new(&series);
    let prices: Vec<Prices> = types.iter().map(|t| t.prices).collect();
    let mut compositions = Compositions::new(types.iter().map(|t| &t.profile).collect());
    compositions.prepare(&fleet.counts);
    let intervals = &fleet.series;
    let wants = |b: Baseline| settings.baselines.contains(&b);
    let mut notes = vec![format!(
        "mixed fleet of {}: {} intervals (the shortest trace), mean instances {}",
        name,
        intervals.len(),
        fleet
            .mean_instances()
            .iter()
            .zip(types)
            .map(|(m, t)| format!("{m:.1} {}", t.offer.name))
            .collect::<Vec<_>>()
            .join(", ")
    )];
    let priced = |mut result: SimResult| {
        fleet.price(&mut result, interval_ms, &prices);
        result
    };
    let row = |name: &str, kind: RowKind, result: SimResult| Row {
        name: name.to_string(),
        spec: None,
        kind,
        result,
        policy_expected_samples: None,
        health: None,
        artifact: None,
        peer: None,
    };
    let step = |what: &str| progress.set_message(format!("{name}: {what}"));
    let mut rows = Vec::new();

    step("ideal");
    let planning: Vec<&ModelProfile> = fleet.counts.iter().map(|c| compositions.planning(c)).collect();
    let ideal = priced(sim_mixed::ideal(&planning, intervals, interval_ms)?);
    let ideal_samples = ideal.totals.samples;
    if wants(Baseline::Ideal) {
        rows.push(row("ideal", RowKind::Baseline, ideal));
        progress.inc(1);
    }

    // The same Young/Daly cadence as a single-type bench (`--cadence`), from the union's
    // costs; every composition pays the same share of its throughput for it.
    let views = CadencedViews::new(
        &compositions,
        &fleet,
        settings.cadence,
        interval_ms,
        &recovery,
        settings.snapshot_bytes_per_ms,
    );
    if let Some(note) = cadence_note(compositions.union(), views.cadence(), intervals, &recovery, settings) {
        notes.push(format!("union fleet: {note}"));
    }
    let planning = views.planning();
    let scoring = views.scoring();
    let union = views.union();
    let simulate = |decisions: &[Option<ParallelConfig>], what: &str, mode: MigrationMode| {
        sim_mixed::simulate(union, &scoring, intervals, interval_ms, decisions, mode, recovery)
            .map(&priced)
            .with_context(|| format!("{name}: scoring {what}"))
    };

    let mut oracle_samples = None;
    if wants(Baseline::Oracle) {
        step("oracle");
        let decisions = sim_mixed::oracle(union, &scoring, intervals, interval_ms, recovery)
            .with_context(|| format!("{name}: planning the oracle"))?;
        let result = simulate(&decisions, "the oracle", MigrationMode::Live)?;
        oracle_samples = Some(result.totals.samples);
        rows.push(row("oracle", RowKind::Baseline, result));
        progress.inc(1);
    }
    if wants(Baseline::LiveputTruth) {
        step("liveput-truth");
        let decisions = sim_mixed::liveput_truth(
            union,
            &scoring,
            intervals,
            interval_ms,
            settings.horizon as usize,
            recovery,
        )
        .with_context(|| format!("{name}: planning liveput-truth"))?;
        rows.push(row(
            "liveput-truth",
            RowKind::Baseline,
            simulate(&decisions, "liveput-truth", MigrationMode::Live)?,
        ));
        progress.inc(1);
    }
    let reactive = sim_mixed::reactive(&planning, intervals);
    if wants(Baseline::Reactive) {
        step("reactive");
        rows.push(row("reactive", RowKind::Baseline, simulate(&reactive, "reactive", MigrationMode::Live)?));
        progress.inc(1);
    }
    if wants(Baseline::ReactiveRestart) {
        step("reactive-restart");
        let result = simulate(&reactive, "reactive-restart", MigrationMode::RestartOnChange)?;
        rows.push(row("reactive-restart", RowKind::Baseline, result));
        progress.inc(1);
    }
    if wants(Baseline::Artifact) {
        notes.push("artifact: the Parcae artifact recorded single-type decisions; no mixed row".into());
        progress.inc(3);
    }
    if !settings.peers.is_empty() {
        notes.push(
            "peers: Bamboo, Varuna and Oobleck train on one instance type; score each type's trace \
             alone for their rows"
                .into(),
        );
        progress.inc(super::score::peer_units(settings));
    }

    let fleet_max = intervals.iter().map(|s| s.instances).max().unwrap_or(0);
    let replay_settings = ControlSettings { interval_ms, horizon: settings.horizon, fleet_max, recovery };
    let names: Vec<String> = types.iter().map(|t| t.offer.name.clone()).collect();
    let fleet_types = FleetTypes { names: &names, counts: &fleet.counts };
    for policy in policies {
        let policy_name = policy.name();
        let mut guarded = policy.guarded();
        let total = intervals.len();
        let decisions = replay_profiles(
            intervals,
            |k| planning[k],
            &mut guarded,
            &replay_settings,
            Some(fleet_types),
            |d| {
                if d.interval % 16 == 0 || d.interval + 1 == total {
                    progress.set_message(format!("{name}: {policy_name} {}/{total}", d.interval + 1));
                }
            },
        );
        let configs: Vec<Option<ParallelConfig>> = decisions.iter().map(|d| d.config).collect();
        let expected: f64 = decisions.iter().map(|d| d.expected_samples).sum();
        let result = simulate(&configs, &policy_name, MigrationMode::Live)?;
        let health = PolicyHealth::new(&guarded.predictor_counts(), &guarded.optimizer_counts());
        notes.extend(health.notes(&policy_name));
        rows.push(Row {
            spec: Some(policy.spec.clone()),
            policy_expected_samples: Some(expected),
            health: Some(health),
            ..row(&policy_name, RowKind::Policy, result)
        });
        progress.inc(1);
    }

    Ok(TraceBench {
        name,
        path,
        series: IntervalSeries { interval_ms, intervals: fleet.series.clone() },
        rows,
        ideal_samples,
        oracle_samples,
        notes,
    })
}
