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
//!    each; then a churn phase in which holders of a replicated layout get notices and
//!    fresh processes take their state (one holder, then every replica of a stage at
//!    once), as a spot fleet's moves go; then a preemption of the whole fleet and a
//!    restart from its checkpoint;
//! 3. from the run's event log ([`fit`]): each layout's step period, the cost of live
//!    reconfigurations (a fixed part, a set-up for moving state, an extra for adding a
//!    fresh process, and the transfers at the rate the moves really reached), the
//!    restart's cost (the emergency checkpoint's save and the reload), and the checkpoint
//!    snapshot and write rates;
//! 4. leave-one-layout-out: the performance model fitted to all measured layouts but
//!    one predicts that one (`parcae_cluster::perf`), the held-out error of the profile.

mod fit;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use clap::Args;
use parcae_cluster::{Layout, MigrationKind, ModelSpec};
use parcae_policy_core::ParallelConfig;
use parcae_profile::{CostConstants, Profile};
use serde::Serialize;

pub use fit::fit;

use super::run::Timed;
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
    /// Fit again from the profiling run already in --work-dir (its in-process profile and
    /// event log) instead of running anything: to re-read a run after the fit changed.
    #[arg(long)]
    pub refit: bool,
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
    /// Holders of each old stage that stayed (the others were under notice or gone).
    pub survivors: Vec<u32>,
    /// Workers that stayed and held no stage.
    pub spares: u32,
    /// Whether it added holders (a worker that held no stage just before).
    pub adds: bool,
    /// Whether an added holder had never held state: a fresh process, as a new arrival is.
    pub fresh: bool,
    /// What the cost model charges for its transfers alone on the in-process curve, ms.
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
    /// Fitted: real moves' transfer time over the in-process curve's (the profile's curve
    /// is scaled by it).
    pub transfer_scale: f64,
    /// Fitted: the extra of one that adds a fresh process (`rendezvous_ms`), ms.
    pub rendezvous_ms: f64,
    /// Fitted: the extra of one that adds a worker that held state before (reported, not
    /// priced: adds in a spot fleet are mostly new arrivals), ms.
    pub warm_add_ms: f64,
    /// An emergency checkpoint's save, median, ms (part of `checkpoint_save_load_ms`).
    pub save_ms: f64,
    /// Fitted: a restart's cost beyond its transfers and the above (with `save_ms`,
    /// `checkpoint_save_load_ms`).
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
    let base_path = work.join("in-process-profile.json");
    let run_dir = work.join("run");
    if !args.refit {
        profiling_run(args, &spec, &base_path, &run_dir)?;
    }
    let base = Profile::load(&base_path)?;
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

/// Steps 1 and 2: the in-process profile at `base_path`, then the profiling run in `run_dir`.
fn profiling_run(
    args: &ProfileArgs,
    spec: &ModelSpec,
    base_path: &Path,
    run_dir: &Path,
) -> anyhow::Result<()> {
    let work = &args.work_dir;
    let host = this_binary()?;
    let worker = worker_bin(args.worker_bin.as_deref())?;
    // 1. The in-process profile: layer sizes and the QUIC transfer curve.
    eprintln!("profile: layer sizes and transfer curve (parcae-worker profile)");
    let mut worker_profile = Command::new(&worker);
    worker_profile
        .args(["profile", "--steps", "1", "--warmup", "0", "--measure-max", "1", "--cores", "1"])
        .args(["--max-instances", &args.instances.to_string(), "--model-name", &args.model_name])
        .args(["--device", &args.device, "--out"])
        .arg(base_path);
    if let Some(spec) = &args.spec {
        worker_profile.arg("--spec").arg(spec);
    }
    run_child(&mut worker_profile, "parcae-worker profile")?;
    let base = Profile::load(base_path)?;

    // 2. Every layout in turn on real worker processes, then a whole-fleet restart.
    let layouts: Vec<ParallelConfig> = base
        .model(&args.model_name)?
        .throughput
        .iter()
        .map(|t| ParallelConfig::new(t.dp, t.pp))
        .filter(|c| c.instances() <= args.instances as u64)
        .filter(|c| Layout::new(spec, c.data_parallel as usize, c.pipeline_stages as usize).is_ok())
        .collect();
    anyhow::ensure!(!layouts.is_empty(), "no layout of at most {} instances runs this model", args.instances);
    let (trace, script) = profiling_trace(args.instances, &layouts, args.passes);
    let (trace_path, script_path) = (work.join("trace.csv"), work.join("script.json"));
    std::fs::write(&trace_path, trace).with_context(|| format!("writing {}", trace_path.display()))?;
    std::fs::write(&script_path, serde_json::to_string(&script)?)
        .with_context(|| format!("writing {}", script_path.display()))?;
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
        .arg(base_path)
        .args(["--model", &args.model_name, "--script"])
        .arg(&script_path)
        .args(["--wall-seconds-per-interval", &args.seconds_per_layout.to_string()])
        .args(["--intervals", &script.len().to_string()])
        .args(["--checkpoint-every", "10", "--device", &args.device, "--run-dir"])
        .arg(run_dir)
        .arg("--worker-bin")
        .arg(&worker);
    if let Some(spec) = &args.spec {
        cluster.arg("--spec").arg(spec);
    }
    run_child(&mut cluster, "parcae-host run")?;

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
/// moments, apart, and the moves between layouts go both ways); then the churn phase on
/// the first single-stage layout with replicas, if any: the fleet shrinks to that layout's
/// holders, a fresh node arrives, one holder gets a notice (its state goes to the fresh
/// process), fresh nodes arrive for every holder, and every holder gets a notice at once
/// (the stage is evacuated); then the whole fleet is preempted (with notice) and
/// replaced, and the first layout runs again from the checkpoint for two intervals.
fn profiling_trace(
    instances: usize,
    layouts: &[ParallelConfig],
    passes: usize,
) -> (String, Vec<Option<(u32, u32)>>) {
    const MINUTE: usize = 60_000;
    let mut csv = String::from("t_ms,op,node\n");
    let mut alive: Vec<String> = (0..instances).map(|n| format!("a{n}")).collect();
    for node in &alive {
        csv += &format!("0,add,{node}\n");
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
    let churn = layouts
        .iter()
        .filter(|c| c.pipeline_stages == 1 && c.data_parallel >= 2)
        .min_by_key(|c| c.data_parallel);
    if let Some(c) = churn {
        let holders = c.data_parallel as usize;
        let mut fresh = 0;
        // The fleet shrinks to the layout's holders.
        let t = script.len() * MINUTE;
        for node in alive.drain(holders..) {
            csv += &format!("{t},remove,{node}\n");
        }
        script.push(pair(c));
        // Replace one holder, then all of them at once: the fresh processes arrive an
        // interval before the notices, as spares do.
        for replaced in [1, holders] {
            let t = script.len() * MINUTE;
            for _ in 0..replaced {
                let node = format!("f{fresh}");
                fresh += 1;
                csv += &format!("{t},add,{node}\n");
                alive.push(node);
            }
            let t = t + MINUTE;
            for node in alive.drain(..replaced) {
                csv += &format!("{t},remove,{node}\n");
            }
            script.extend([pair(c), pair(c)]);
        }
    }
    let wipe = script.len() * MINUTE;
    for node in &alive {
        csv += &format!("{wipe},remove,{node}\n");
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
        "reconfigurations measured: {}; fitted: every reconfiguration {:.1} ms, moving state +{:.1} \
         ms, transfers at {:.2}x the in-process curve, adding a fresh process +{:.1} ms (a worker \
         that held state before +{:.1} ms); restart: checkpoint save {:.1} ms, beyond its \
         transfers {:.1} ms ({} measured)\n",
        report.reconfigurations.len(),
        report.fixed_ms,
        report.setup_ms,
        report.transfer_scale,
        report.rendezvous_ms,
        report.warm_add_ms,
        report.save_ms,
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

    #[test]
    fn the_profiling_trace_walks_every_layout_churns_then_restarts() {
        let layouts = [ParallelConfig::new(1, 1), ParallelConfig::new(2, 1), ParallelConfig::new(1, 2)];
        let (csv, script) = profiling_trace(3, &layouts, 2);
        let (a, b, c) = (Some((1, 1)), Some((2, 1)), Some((1, 2)));
        // Two passes, the churn phase on (2, 1) (shrink, one holder replaced, both), the
        // wipe and the restart.
        assert_eq!(script, [a, b, c, c, b, a, b, b, b, b, b, None, a, a]);
        let trace = parcae_traces::parse(Path::new("profiling.csv"), csv.as_bytes(), None).unwrap();
        let series = trace.series(60_000).unwrap();
        let counts: Vec<u32> = series.intervals.iter().map(|s| s.instances).collect();
        assert_eq!(&counts[..14], [3, 3, 3, 3, 3, 3, 2, 3, 2, 4, 2, 0, 3, 3]);
        let preempted: Vec<u32> = series.intervals.iter().map(|s| s.preemptions).collect();
        assert_eq!(&preempted[..12], [0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 2, 2]);
    }

    #[test]
    fn without_a_replicated_layout_there_is_no_churn_phase() {
        let layouts = [ParallelConfig::new(1, 1), ParallelConfig::new(1, 2)];
        let (_, script) = profiling_trace(2, &layouts, 1);
        assert_eq!(script, [Some((1, 1)), Some((1, 2)), None, Some((1, 1)), Some((1, 1))]);
    }
}
