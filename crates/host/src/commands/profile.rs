//! `parcae-host profile`: measures the deployment `run` actually uses and writes a profile
//! and cost constants that `bench`, `provision` and `run` load.
//!
//! `parcae-worker profile` times layouts in one process (threads, in-process links): the
//! compute of a real step, but neither QUIC between processes nor the contention of many
//! worker processes on few cores, nor what a reconfiguration of live workers costs. This
//! command measures those with the real thing:
//!
//! 1. `parcae-worker profile` (briefly) for what it measures well: the model's layer
//!    sizes and the QUIC transfer curve between two endpoints;
//! 2. `parcae-host run` on loopback with real worker processes, a fleet of `--instances`
//!    that the script (`run --script`) walks through every layout in turn, one interval
//!    each, then a preemption of the whole fleet and a restart from its checkpoint;
//! 3. from the run's event log: each layout's median step time (the first step after a
//!    reconfiguration left out), the overheads of live reconfigurations beyond their
//!    transfers (fitted to the cost model's terms: a fixed cost on every
//!    reconfiguration, a set-up cost on those that move state, a rendezvous on those that
//!    add holders), the restart's cost beyond its transfers, and the checkpoint
//!    snapshot and write rates;
//! 4. leave-one-layout-out: the performance model fitted to all measured layouts but
//!    one predicts that one (`parcae_cluster::perf`), the held-out error of the profile.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use clap::Args;
use parcae_cluster::{Layout, MigrationKind, ModelSpec};
use parcae_policy_core::liveput::scenario_cost;
use parcae_policy_core::{ModelProfile, ParallelConfig};
use parcae_profile::{CommRebuildKind, CommRebuildSpec, CostConstants, Profile, ThroughputEntry};
use serde::Serialize;

use super::run::{RunEvent, Timed};
use crate::embedded;
use crate::processes::{run_child, this_binary, worker_bin};

/// Options of `parcae-host profile`.
#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// Worker processes of the profiled fleet: every layout with D x P up to this runs.
    #[arg(long, default_value_t = 8)]
    pub instances: usize,
    /// Wall-clock seconds each layout trains per pass (one replayed interval).
    #[arg(long, default_value_t = 5.0)]
    pub seconds_per_layout: f64,
    /// Passes over the layouts (every other one in reverse order): a layout timed at
    /// several moments is less at the mercy of a slow one on a shared machine.
    #[arg(long, default_value_t = 2)]
    pub passes: usize,
    /// Model and batch (JSON, the fields of ModelSpec, as `run --spec`; default: the
    /// built-in small GPT).
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// The model's name in the profile (`run --model`, `bench --model`).
    #[arg(long, default_value = "worker-gpt")]
    pub model_name: String,
    /// Device the workers train on: cpu, cuda, or auto.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// The worker binary (default: `parcae-worker` next to this executable).
    #[arg(long)]
    pub worker_bin: Option<PathBuf>,
    /// Where to write the profile.
    #[arg(long, default_value = "out/deployment-profile.json")]
    pub out: PathBuf,
    /// Where to write the cost constants measured with it.
    #[arg(long, default_value = "out/deployment-constants.json")]
    pub constants_out: PathBuf,
    /// Working directory: the in-process profile, the profiling run's trace, script and logs.
    #[arg(long, default_value = "out/profile-run")]
    pub work_dir: PathBuf,
    /// Write the report (layouts, overheads, held-out errors) as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One layout as measured with real worker processes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayoutRow {
    /// Data-parallel degree.
    pub dp: u32,
    /// Pipeline depth.
    pub pp: u32,
    /// Mean period of one step with worker processes (one step to the next), ms.
    pub step_ms: f64,
    /// Steps timed.
    pub steps: usize,
    /// What the performance model fitted without this layout predicts, ms.
    pub held_out_ms: Option<f64>,
}

/// One live reconfiguration of the profiling run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reconfiguration {
    /// Its kind.
    pub kind: MigrationKind,
    /// Layout before.
    pub from: (u32, u32),
    /// Layout after.
    pub to: (u32, u32),
    /// Measured wall time, ms.
    pub measured_ms: f64,
    /// What the cost model charges for its transfers alone, ms.
    pub transfer_ms: f64,
}

/// What `profile` measured and fitted.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Layouts measured.
    pub layouts: Vec<LayoutRow>,
    /// Mean absolute relative error of the held-out predictions.
    pub held_out_mean_error: Option<f64>,
    /// Live reconfigurations measured.
    pub reconfigurations: Vec<Reconfiguration>,
    /// Fitted: the cost every reconfiguration pays (`proc_init_ms`), ms.
    pub fixed_ms: f64,
    /// Fitted: the set-up a reconfiguration that moves state pays (`model_build_ms_by_pp`), ms.
    pub setup_ms: f64,
    /// Fitted: the extra of one that adds holders (`rendezvous_ms`), ms.
    pub rendezvous_ms: f64,
    /// Fitted: a restart's cost beyond its transfers and the above (`checkpoint_save_load_ms`).
    pub restart_ms: f64,
    /// Restarts measured.
    pub restarts: usize,
    /// Worker process start to joining, mean, ms.
    pub worker_start_ms: Option<f64>,
    /// Periodic checkpoint snapshot rate, GB/s (what training waits for).
    pub snapshot_gb_per_s: Option<f64>,
    /// Checkpoint write rate per stage holder, GB/s.
    pub write_gb_per_s: Option<f64>,
}

/// Runs `parcae-host profile`.
pub fn run(args: &ProfileArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.instances >= 1, "--instances must be at least 1");
    anyhow::ensure!(args.seconds_per_layout > 0.0, "--seconds-per-layout must be positive");
    let spec = ModelSpec::load(args.spec.as_deref())?;
    let work = &args.work_dir;
    std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let host = this_binary()?;
    let worker = worker_bin(args.worker_bin.as_deref())?;

    // 1. The in-process profile: layer sizes and the QUIC transfer curve.
    let base_path = work.join("in-process-profile.json");
    eprintln!("profile: layer sizes and transfer curve (parcae-worker profile)");
    let mut worker_profile = Command::new(&worker);
    worker_profile
        .args(["profile", "--steps", "1", "--warmup", "0", "--measure-max", "1", "--cores", "1"])
        .args(["--max-instances", &args.instances.to_string(), "--model-name", &args.model_name])
        .args(["--device", &args.device, "--out"])
        .arg(&base_path);
    if let Some(spec) = &args.spec {
        worker_profile.arg("--spec").arg(spec);
    }
    run_child(&mut worker_profile, "parcae-worker profile")?;
    let base = Profile::load(&base_path)?;

    // 2. Every layout in turn on real worker processes, then a whole-fleet restart.
    let layouts: Vec<ParallelConfig> = base
        .model(&args.model_name)?
        .throughput
        .iter()
        .map(|t| ParallelConfig::new(t.dp, t.pp))
        .filter(|c| c.instances() <= args.instances as u64)
        .filter(|c| Layout::new(&spec, c.data_parallel as usize, c.pipeline_stages as usize).is_ok())
        .collect();
    anyhow::ensure!(!layouts.is_empty(), "no layout of at most {} instances runs this model", args.instances);
    let (trace, script) = profiling_trace(args.instances, &layouts, args.passes);
    let (trace_path, script_path) = (work.join("trace.csv"), work.join("script.json"));
    std::fs::write(&trace_path, trace).with_context(|| format!("writing {}", trace_path.display()))?;
    std::fs::write(&script_path, serde_json::to_string(&script)?)
        .with_context(|| format!("writing {}", script_path.display()))?;
    let run_dir = work.join("run");
    eprintln!(
        "profile: {} layouts on {} worker processes, {:.0} s each, {} pass(es) (parcae-host run)",
        layouts.len(),
        args.instances,
        args.seconds_per_layout,
        args.passes.max(1)
    );
    let mut cluster = Command::new(&host);
    cluster
        .args(["run", "--trace"])
        .arg(&trace_path)
        .arg("--profile")
        .arg(&base_path)
        .args(["--model", &args.model_name, "--script"])
        .arg(&script_path)
        .args(["--wall-seconds-per-interval", &args.seconds_per_layout.to_string()])
        .args(["--intervals", &script.len().to_string()])
        .args(["--checkpoint-every", "10", "--device", &args.device, "--run-dir"])
        .arg(&run_dir)
        .arg("--worker-bin")
        .arg(&worker);
    if let Some(spec) = &args.spec {
        cluster.arg("--spec").arg(spec);
    }
    run_child(&mut cluster, "parcae-host run")?;
    let events = read_events(&run_dir.join("events.json"))?;

    // 3. and 4.: fit, hold out, write.
    let constants = embedded::constants_or_embedded(None)?;
    let (report, profile, constants) = fit(&spec, &base, &constants, &args.model_name, &events)?;
    let profile_text = serde_json::to_string_pretty(&profile)? + "\n";
    let constants_text = serde_json::to_string_pretty(&constants)? + "\n";
    // Both must load before they are written (a bug here must not leave a bad file).
    Profile::from_json(&profile_text, &args.out)?;
    CostConstants::from_json(&constants_text, &args.constants_out)?;
    for (path, text) in [(&args.out, &profile_text), (&args.constants_out, &constants_text)] {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    println!("{}", render(&report));
    println!(
        "wrote {} and {}\nuse: parcae-host run --profile {} --cost-constants {} --model {}",
        args.out.display(),
        args.constants_out.display(),
        args.out.display(),
        args.constants_out.display(),
        args.model_name
    );
    Ok(())
}

fn read_events(path: &Path) -> anyhow::Result<Vec<Timed>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    #[derive(serde::Deserialize)]
    struct Log {
        events: Vec<Timed>,
    }
    let log: Log =
        serde_json::from_str(&text).with_context(|| format!("{}: not an event log", path.display()))?;
    Ok(log.events)
}

/// The profiling run's trace and script: `instances` nodes from the start, one interval per
/// layout and pass (every other pass in reverse order, so each layout is timed at several
/// moments, apart, and the moves between layouts go both ways), then the whole fleet
/// preempted (with notice) and replaced, and the first layout again from the checkpoint for
/// two intervals.
fn profiling_trace(
    instances: usize,
    layouts: &[ParallelConfig],
    passes: usize,
) -> (String, Vec<Option<(u32, u32)>>) {
    const MINUTE: usize = 60_000;
    let mut csv = String::from("t_ms,op,node\n");
    for n in 0..instances {
        csv += &format!("0,add,a{n}\n");
    }
    let pair = |c: &ParallelConfig| Some((c.data_parallel, c.pipeline_stages));
    let mut script: Vec<Option<(u32, u32)>> = Vec::new();
    for pass in 0..passes.max(1) {
        if pass % 2 == 0 {
            script.extend(layouts.iter().map(pair));
        } else {
            script.extend(layouts.iter().rev().map(pair));
        }
    }
    let wipe = script.len() * MINUTE;
    for n in 0..instances {
        csv += &format!("{wipe},remove,a{n}\n");
    }
    for n in 0..instances {
        csv += &format!("{},add,b{n}\n", wipe + MINUTE);
    }
    script.push(None);
    script.extend([pair(&layouts[0]), pair(&layouts[0])]);
    // The trace must last as long as the script: one more event-free interval.
    csv += &format!("{},add,c0\n", wipe + 3 * MINUTE);
    (csv, script)
}

/// The mean step period without outliers (a gap more than 5x the median spans something
/// other than a step: a pause, a re-plan): the mean, not the median, is what sets the
/// samples a layout trains in an interval.
fn typical_mean(values: &mut [f64]) -> f64 {
    let Some(mid) = median(values) else { return f64::NAN };
    let kept: Vec<f64> = values.iter().copied().filter(|v| *v <= 5.0 * mid).collect();
    kept.iter().sum::<f64>() / kept.len().max(1) as f64
}

fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 })
}

/// Fits the deployment profile and constants to the profiling run's events (see the
/// module docs).
pub fn fit(
    spec: &ModelSpec,
    base: &Profile,
    constants: &CostConstants,
    model: &str,
    events: &[Timed],
) -> anyhow::Result<(Report, parcae_profile::ProfileFile, parcae_profile::CostConstantsFile)> {
    // Step times per layout, the first step after each reconfiguration left out.
    let mut steps: BTreeMap<(u32, u32), Vec<f64>> = BTreeMap::new();
    let mut warm = false;
    let mut last_step: Option<f64> = None;
    let mut current: Option<(u32, u32)> = None;
    // Live reconfigurations; their transfer share is priced below.
    let mut live: Vec<Reconfiguration> = Vec::new();
    let mut restarts: Vec<((u32, u32), f64)> = Vec::new();
    let (mut snapshot, mut write) = (Vec::new(), Vec::new());
    let mut allocated = BTreeMap::new();
    let mut starts = Vec::new();
    for e in events {
        match &e.event {
            RunEvent::Step { data_parallel, pipeline_stages, .. } => {
                // The time from one step to the next: the step and what the host does
                // between steps (commit, the control loop, checkpoint snapshots), which a
                // run pays as often as it steps.
                if warm && let Some(last) = last_step {
                    steps
                        .entry((*data_parallel as u32, *pipeline_stages as u32))
                        .or_default()
                        .push((e.t_s - last) * 1000.0);
                }
                last_step = Some(e.t_s);
                warm = true;
            }
            RunEvent::Paused { .. } => warm = false,
            RunEvent::Reconfigured {
                kind,
                millis,
                data_parallel,
                pipeline_stages,
                parked: false,
                cold_start,
                ..
            } => {
                warm = false;
                let to = (*data_parallel as u32, *pipeline_stages as u32);
                match (kind, current) {
                    (MigrationKind::Restart, _) => restarts.push((to, *millis)),
                    (MigrationKind::None, _) => {}
                    (_, Some(from)) if !cold_start => live.push(Reconfiguration {
                        kind: *kind,
                        from,
                        to,
                        measured_ms: *millis,
                        transfer_ms: 0.0,
                    }),
                    _ => {}
                }
                current = Some(to);
            }
            RunEvent::Checkpointed { bytes, millis, write_millis, reason, .. }
                if *reason == super::run::CheckpointReason::Periodic =>
            {
                let stages = f64::from(current.map_or(1, |c| c.1));
                // Every stage holder snapshots and writes its own stage, in parallel.
                if *millis > 0.0 {
                    snapshot.push(*bytes as f64 / stages / millis / 1e6);
                }
                if *write_millis > 0.0 {
                    write.push(*bytes as f64 / stages / write_millis / 1e6);
                }
            }
            RunEvent::Allocated { worker, .. } => {
                allocated.insert(*worker, e.t_s);
            }
            RunEvent::Joined { worker } => {
                if let Some(t) = allocated.get(worker) {
                    starts.push((e.t_s - t) * 1000.0);
                }
            }
            _ => {}
        }
    }
    anyhow::ensure!(!steps.is_empty(), "the profiling run timed no step");

    // What the cost model charges for transfers alone: the base profile with every
    // overhead zero.
    let mut free = base.model_profile(model, constants)?;
    zero_overheads(&mut free);
    let transfer = |from: (u32, u32), to: (u32, u32), instances: u32| -> f64 {
        let from = ParallelConfig::new(from.0, from.1);
        let survivors = vec![from.data_parallel; from.pipeline_stages as usize];
        let spares = instances.saturating_sub(from.instances() as u32);
        scenario_cost(&free, Some(from), &survivors, spares, 0, Some(ParallelConfig::new(to.0, to.1)))
            .map_or(0.0, |c| c.duration_ms)
    };
    // The profiled fleet: the most workers alive at once (the restart's replacements join
    // after the first fleet is gone).
    let fleet = events
        .iter()
        .scan(0i64, |alive, e| {
            match e.event {
                RunEvent::Joined { .. } => *alive += 1,
                RunEvent::Killed { .. } | RunEvent::Lost { .. } => *alive -= 1,
                _ => {}
            }
            Some(*alive)
        })
        .max()
        .unwrap_or(0)
        .max(0) as u32;
    let reconfigurations: Vec<Reconfiguration> = live
        .into_iter()
        .map(|r| Reconfiguration {
            transfer_ms: transfer(r.from, r.to, fleet.max(r.from.0 * r.from.1).max(r.to.0 * r.to.1)),
            ..r
        })
        .collect();
    let residual = |r: &Reconfiguration| (r.measured_ms - r.transfer_ms).max(0.0);
    let mut intra: Vec<f64> =
        reconfigurations.iter().filter(|r| r.kind == MigrationKind::IntraStage).map(residual).collect();
    let fixed_ms = median(&mut intra).unwrap_or(0.0);
    let adds = |r: &Reconfiguration| r.to.0 * r.to.1 > r.from.0 * r.from.1;
    let mut removes: Vec<f64> = reconfigurations
        .iter()
        .filter(|r| r.kind != MigrationKind::IntraStage && !adds(r))
        .map(residual)
        .collect();
    let mut all_moves: Vec<f64> =
        reconfigurations.iter().filter(|r| r.kind != MigrationKind::IntraStage).map(residual).collect();
    let setup_ms = (median(&mut removes).or(median(&mut all_moves)).unwrap_or(0.0) - fixed_ms).max(0.0);
    let mut add_moves: Vec<f64> = reconfigurations
        .iter()
        .filter(|r| r.kind != MigrationKind::IntraStage && adds(r))
        .map(residual)
        .collect();
    let rendezvous_ms = median(&mut add_moves).map_or(0.0, |m| (m - fixed_ms - setup_ms).max(0.0));
    // A restart: everything above plus the restart's own transfers (every new stage's state).
    let mut restart_residuals: Vec<f64> = restarts
        .iter()
        .map(|&(to, ms)| {
            let to = ParallelConfig::new(to.0, to.1);
            let cold = scenario_cost(&free, None, &[], 0, to.instances() as u32, Some(to))
                .map_or(0.0, |c| c.duration_ms);
            (ms - cold - fixed_ms - setup_ms - rendezvous_ms).max(0.0)
        })
        .collect();
    let restart_ms = median(&mut restart_residuals).unwrap_or(0.0);

    // Held-out: the performance model fitted without each layout predicts it.
    let mut rows: Vec<LayoutRow> = steps
        .iter_mut()
        .map(|(&(dp, pp), times)| LayoutRow {
            dp,
            pp,
            steps: times.len(),
            step_ms: typical_mean(times),
            held_out_ms: None,
        })
        .collect();
    let observations: Vec<parcae_cluster::perf::Observation> = rows
        .iter()
        .filter_map(|r| {
            let layout = Layout::new(spec, r.dp as usize, r.pp as usize).ok()?;
            Some(parcae_cluster::perf::Observation {
                dp: r.dp as usize,
                pp: r.pp as usize,
                features: parcae_cluster::perf::layout_features(spec, &layout),
                measured_ms: r.step_ms,
            })
        })
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let held_out = parcae_cluster::perf::leave_one_out(&observations, cores as f64);
    if let Some(h) = &held_out {
        for row in &mut rows {
            row.held_out_ms = h
                .points
                .iter()
                .find(|p| (p.dp, p.pp) == (row.dp as usize, row.pp as usize))
                .map(|p| p.predicted_ms);
        }
    }

    let worker_start_ms = median(&mut starts);
    let report = Report {
        layouts: rows,
        held_out_mean_error: held_out.as_ref().map(|h| h.mean_abs_rel_error),
        reconfigurations,
        fixed_ms,
        setup_ms,
        rendezvous_ms,
        restart_ms,
        restarts: restarts.len(),
        worker_start_ms,
        snapshot_gb_per_s: median(&mut snapshot),
        write_gb_per_s: median(&mut write),
    };

    // The files: the base profile with measured throughput and fitted overheads.
    let mut file = base.data().clone();
    let entry = file
        .models
        .get_mut(model)
        .ok_or_else(|| anyhow::anyhow!("the in-process profile has no model {model}"))?;
    let global = f64::from(entry.global_batch_size);
    entry.throughput = report
        .layouts
        .iter()
        .map(|r| ThroughputEntry {
            dp: r.dp,
            pp: r.pp,
            iteration_ms: round3(r.step_ms),
            samples_per_s: round3(global / (r.step_ms / 1000.0)),
        })
        .collect();
    entry.proc_init_ms = round3(fixed_ms);
    entry.rendezvous_ms = round3(rendezvous_ms);
    entry.restart_extra_ms = 0.0;
    entry.model_build_ms_by_pp = entry.throughput.iter().map(|t| (t.pp, round3(setup_ms))).collect();
    file.source = Some(format!(
        "MEASURED DEPLOYMENT (parcae-host profile): {} layouts trained by real worker processes on \
         loopback (QUIC with mutual TLS between processes) on {cores} cores; iteration_ms is each \
         layout's mean step period (step to step) with every worker process alive (contention included). proc_init_ms is \
         the fitted cost of every reconfiguration, model_build_ms_by_pp the set-up of one that moves \
         state, rendezvous_ms the extra of one that adds holders (fitted to {} live reconfigurations \
         beyond their transfers). Transfer curve and layer sizes from parcae-worker profile.",
        report.layouts.len(),
        report.reconfigurations.len()
    ));
    let mut constants_file = constants.data().clone();
    constants_file.checkpoint_save_load_ms = round3(restart_ms);
    if let Some(rate) = report.write_gb_per_s {
        constants_file.checkpoint_write_gb_per_s = Some(round3(rate.max(1e-3)));
    }
    if let Some(rate) = report.snapshot_gb_per_s {
        constants_file.checkpoint_snapshot_gb_per_s = Some(round3(rate.max(1e-3)));
    }
    constants_file.comm_rebuild.models.insert(
        model.to_string(),
        CommRebuildSpec {
            kind: CommRebuildKind::Groups,
            per_group_add_ms: Some(0.0),
            per_group_remove_ms: Some(0.0),
            add_ms_per_instance: None,
            remove_ms_per_instance: None,
            thresholds: None,
            ms: None,
            add_factor: None,
            constant_ms: 0.0,
            source: Some(
                "parcae-host profile: the workers' communicators are rebuilt within the measured \
                 reconfigurations, whose whole cost is in the profile's proc_init_ms, \
                 model_build_ms_by_pp and rendezvous_ms"
                    .to_string(),
            ),
        },
    );
    constants_file.source = Some(format!(
        "parcae-host profile: checkpoint_save_load_ms is the measured restart's cost beyond its \
         transfers ({} restart(s)); checkpoint rates from the run's periodic checkpoints; the other \
         constants are the embedded ones ({})",
        report.restarts,
        constants.data().source.as_deref().unwrap_or("cost-constants.json")
    ));
    for key in ["checkpoint_save_load_ms", "checkpoint_write_gb_per_s", "checkpoint_snapshot_gb_per_s"] {
        constants_file
            .sources
            .insert(key.to_string(), "measured by parcae-host profile on this deployment".to_string());
    }
    Ok((report, file, constants_file))
}

fn zero_overheads(profile: &mut ModelProfile) {
    profile.rendezvous_ms = 0.0;
    profile.process_start_ms = 0.0;
    profile.add_extra_ms = 0.0;
    profile.checkpoint_restart_ms = 0.0;
    for c in &mut profile.configs {
        c.comm_rebuild_add_ms = 0.0;
        c.comm_rebuild_remove_ms = 0.0;
        c.model_build_ms = 0.0;
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The report as text: layouts, then overheads.
pub fn render(report: &Report) -> String {
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header(["D", "P", "steps", "step period ms (processes)", "held-out ms", "held-out error"]);
    for r in &report.layouts {
        let err = r.held_out_ms.map(|h| format!("{:+.1}%", (h - r.step_ms) / r.step_ms * 100.0));
        table.add_row([
            r.dp.to_string(),
            r.pp.to_string(),
            r.steps.to_string(),
            format!("{:.1}", r.step_ms),
            r.held_out_ms.map_or("-".into(), |h| format!("{h:.1}")),
            err.unwrap_or_else(|| "-".into()),
        ]);
    }
    let mut out = table.to_string();
    out += &format!(
        "\nheld-out (leave one layout out) mean error: {}\n",
        report.held_out_mean_error.map_or("-".to_string(), |e| format!("{:.1}%", e * 100.0))
    );
    out += &format!(
        "reconfigurations measured: {}; fitted overheads: every reconfiguration {:.1} ms, moving state \
         +{:.1} ms, adding holders +{:.1} ms; restart beyond its transfers {:.1} ms ({} measured)\n",
        report.reconfigurations.len(),
        report.fixed_ms,
        report.setup_ms,
        report.rendezvous_ms,
        report.restart_ms,
        report.restarts
    );
    out += &format!(
        "worker start {}; checkpoint snapshot {} GB/s, write {} GB/s per holder",
        report.worker_start_ms.map_or("-".to_string(), |m| format!("{m:.0} ms")),
        report.snapshot_gb_per_s.map_or("-".to_string(), |r| format!("{r:.3}")),
        report.write_gb_per_s.map_or("-".to_string(), |r| format!("{r:.3}")),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::run::CheckpointReason;

    fn at(t_s: f64, event: RunEvent) -> Timed {
        Timed { t_s, event }
    }

    fn reconfigured(kind: MigrationKind, to: (usize, usize), millis: f64, cold_start: bool) -> RunEvent {
        RunEvent::Reconfigured {
            epoch: 1,
            cold_start,
            rolled_back_steps: 0,
            step: 0,
            kind,
            data_parallel: to.0,
            pipeline_stages: to.1,
            bytes_moved: 0,
            bytes_sent: 0,
            bytes_from_checkpoint: 0,
            resent_chunks: 0,
            millis,
            parked: false,
            holders: Vec::new(),
        }
    }

    fn step(layout: (usize, usize)) -> RunEvent {
        RunEvent::Step {
            step: 0,
            loss: 1.0,
            samples: 32,
            millis: 1.0,
            data_parallel: layout.0,
            pipeline_stages: layout.1,
        }
    }

    /// Steps every `period` s from `t` (the first a warm-up).
    fn steps(out: &mut Vec<Timed>, t: f64, layout: (usize, usize), period: f64, n: usize) -> f64 {
        for i in 0..n {
            out.push(at(t + i as f64 * period, step(layout)));
        }
        t + n as f64 * period
    }

    #[test]
    fn step_periods_and_overheads_are_fitted_from_the_run() {
        let base = embedded::profile_or_example(None).unwrap();
        let constants = embedded::constants_or_embedded(None).unwrap();
        let spec = ModelSpec::default();
        let mut events =
            vec![at(0.0, RunEvent::Joined { worker: 1 }), at(0.0, RunEvent::Joined { worker: 2 })];
        events.push(at(0.1, reconfigured(MigrationKind::Restart, (1, 1), 40.0, true)));
        let t = steps(&mut events, 0.2, (1, 1), 0.050, 11);
        events.push(at(t, reconfigured(MigrationKind::Repartition, (1, 2), 25.0, false)));
        let t = steps(&mut events, t + 0.1, (1, 2), 0.030, 11);
        events.push(at(
            t,
            RunEvent::Checkpointed {
                step: 20,
                bytes: 2_000_000,
                millis: 1.0,
                write_millis: 10.0,
                reason: CheckpointReason::Periodic,
                location: "x".into(),
            },
        ));
        events.push(at(t + 0.01, reconfigured(MigrationKind::Repartition, (2, 1), 25.0, false)));
        let t = steps(&mut events, t + 0.1, (2, 1), 0.040, 11);
        events.push(at(t, RunEvent::Paused { step: 30, available: 0 }));
        events.push(at(t + 1.0, reconfigured(MigrationKind::Restart, (1, 1), 90.0, false)));
        steps(&mut events, t + 1.1, (1, 1), 0.050, 3);

        let (report, file, constants_file) = fit(&spec, &base, &constants, "tiny-gpt", &events).unwrap();
        let period = |d, p| report.layouts.iter().find(|r| (r.dp, r.pp) == (d, p)).unwrap().step_ms;
        // Step to step, the first step after each reconfiguration left out.
        assert!((period(1, 1) - 50.0).abs() < 1e-6 && (period(1, 2) - 30.0).abs() < 1e-6, "{report:?}");
        assert!((period(2, 1) - 40.0).abs() < 1e-6, "{report:?}");
        assert_eq!(report.layouts.iter().map(|r| r.steps).sum::<usize>(), 10 + 10 + 10 + 2);
        assert_eq!(report.reconfigurations.len(), 2);
        // No intra-stage move: nothing fixed; the moves' set-up is their cost beyond transfers.
        assert_eq!(report.fixed_ms, 0.0);
        let r = &report.reconfigurations[0];
        assert!(r.transfer_ms > 0.0 && r.transfer_ms < 25.0, "{r:?}");
        assert!(report.setup_ms > 0.0 && report.setup_ms < 25.0, "{report:?}");
        assert_eq!(report.restarts, 2);
        // 2 MB of a two-stage layout: each holder snapshots 1 MB in 1 ms and writes it in 10 ms.
        assert_eq!((report.write_gb_per_s, report.snapshot_gb_per_s), (Some(0.1), Some(1.0)));
        let entry = &file.models["tiny-gpt"];
        let throughput: Vec<(u32, u32, f64)> =
            entry.throughput.iter().map(|t| (t.dp, t.pp, t.iteration_ms)).collect();
        assert_eq!(throughput, [(1, 1, 50.0), (1, 2, 30.0), (2, 1, 40.0)]);
        assert_eq!(entry.throughput[0].samples_per_s, 640.0);
        assert!(entry.model_build_ms_by_pp.values().all(|&b| b == round3(report.setup_ms)));
        let rule = &constants_file.comm_rebuild.models["tiny-gpt"];
        assert_eq!((rule.per_group_add_ms, rule.constant_ms), (Some(0.0), 0.0));
        assert_eq!(constants_file.checkpoint_write_gb_per_s, Some(0.1));
        // Both files load, and the profile's model plans only the layouts measured.
        let text = serde_json::to_string(&file).unwrap();
        let profile = Profile::from_json(&text, "deployment.json").unwrap();
        let constants =
            CostConstants::from_json(&serde_json::to_string(&constants_file).unwrap(), "c.json").unwrap();
        let model = profile.model_profile("tiny-gpt", &constants).unwrap();
        assert_eq!(model.configs.len(), 3);
        assert_eq!(model.checkpoint_restart_ms, round3(report.restart_ms));
    }

    #[test]
    fn a_run_without_steps_is_an_error() {
        let base = embedded::profile_or_example(None).unwrap();
        let constants = embedded::constants_or_embedded(None).unwrap();
        let events = [at(0.0, reconfigured(MigrationKind::Restart, (1, 1), 40.0, true))];
        let error = fit(&ModelSpec::default(), &base, &constants, "tiny-gpt", &events).unwrap_err();
        assert!(error.to_string().contains("timed no step"), "{error}");
    }

    #[test]
    fn the_profiling_trace_walks_every_layout_then_restarts() {
        let layouts = [ParallelConfig::new(1, 1), ParallelConfig::new(2, 1), ParallelConfig::new(1, 2)];
        let (csv, script) = profiling_trace(2, &layouts, 2);
        let (a, b, c) = (Some((1, 1)), Some((2, 1)), Some((1, 2)));
        assert_eq!(script, [a, b, c, c, b, a, None, a, a]);
        let trace = parcae_traces::parse(Path::new("profiling.csv"), csv.as_bytes(), None).unwrap();
        let series = trace.series(60_000).unwrap();
        let counts: Vec<u32> = series.intervals.iter().map(|s| s.instances).collect();
        assert_eq!(&counts[..9], [2, 2, 2, 2, 2, 2, 0, 2, 2]);
    }
}
