//! `parcae-host bench-mixed`: does the mixed-fleet model (`parcae_policy_core::mixed`)
//! predict a real run whose workers have two speeds?
//!
//! Each instance type is profiled on its own with real worker processes (`run --script`,
//! layouts (1, 1) and (2, 1), every worker of that type; `run --emulate-types` makes one
//! type's compute take `--slowdown` times as long), then one worker of each type trains
//! (2, 1) with the batch split by speed. The model's prediction of the mixed step, from the
//! two types' profiles, is set beside the measured one, and the mixed fleet's throughput
//! beside each type's alone. The runs alternate types (fast, slow, fast, slow, mixed), and
//! each repeat runs them in the reverse order of the one before (ABBA), with every figure
//! the median over all its repeats' steps, so a drift of the machine's speed touches every
//! figure alike.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use clap::Args;
use parcae_policy_core::mixed::{MixedConfig, mixed_step};
use parcae_policy_core::{ConfigProfile, ModelProfile, ParallelConfig};
use serde::Serialize;

use crate::processes::{run_child, this_binary};

/// Options of `parcae-host bench-mixed`.
#[derive(Debug, Args)]
pub struct MixedBenchArgs {
    /// How many times as long the slow type's compute takes.
    #[arg(long, default_value_t = 3.0)]
    pub slowdown: f64,
    /// Wall-clock seconds of each run (three intervals of a third of it).
    #[arg(long, default_value_t = 15.0)]
    pub seconds: f64,
    /// Runs of each fleet, in alternating order.
    #[arg(long, default_value_t = 2)]
    pub repeats: u32,
    /// Where the runs and the report go.
    #[arg(long, default_value = "out/bench-mixed")]
    pub out_dir: PathBuf,
    /// The worker binary (default: `parcae-worker` next to this executable).
    #[arg(long)]
    pub worker_bin: Option<PathBuf>,
}

/// What `bench-mixed` measured.
#[derive(Debug, Clone, Serialize)]
pub struct MixedBench {
    /// Step periods of the fast type alone, (1, 1) and (2, 1), ms.
    pub fast_ms: [f64; 2],
    /// Step periods of the slow type alone, (1, 1) and (2, 1), ms.
    pub slow_ms: [f64; 2],
    /// Measured step period of one worker of each type, (2, 1), ms.
    pub mixed_ms: f64,
    /// The model's prediction of it, ms.
    pub predicted_ms: f64,
    /// `mixed_ms / predicted_ms - 1`.
    pub error: f64,
    /// Micro-batches per replica the run used.
    pub shares: Vec<u64>,
}

/// Step periods of a run's log, ms (the first steps, warm-up, left out).
fn step_periods(log: &Path) -> anyhow::Result<Vec<f64>> {
    let text = std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not an event log", log.display()))?;
    let times: Vec<f64> = value["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["event"] == "step")
        .filter_map(|e| e["t_s"].as_f64())
        .collect();
    let gaps: Vec<f64> = times.windows(2).skip(3).map(|w| (w[1] - w[0]) * 1000.0).collect();
    anyhow::ensure!(gaps.len() >= 5, "{}: only {} steps timed", log.display(), gaps.len());
    Ok(gaps)
}

/// The micro-batch shares of the run's first reconfiguration.
fn shares(log: &Path) -> anyhow::Result<Vec<u64>> {
    let text = std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text)?;
    Ok(value["events"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["event"] == "reconfigured")
        .and_then(|e| e["shares"].as_array())
        .map(|s| s.iter().filter_map(serde_json::Value::as_u64).collect())
        .unwrap_or_default())
}

/// A type's profile from its measured (1, 1) and (2, 1) step periods (the worker's
/// default batch: 16 samples in micro-batches of 2).
fn profile(ms: [f64; 2]) -> ModelProfile {
    let entry = |d, ms: f64| ConfigProfile {
        config: ParallelConfig::new(d, 1),
        samples_per_second: 16.0 / (ms / 1000.0),
        iteration_ms: ms,
        comm_rebuild_add_ms: 0.0,
        comm_rebuild_remove_ms: 0.0,
        model_build_ms: 0.0,
    };
    ModelProfile {
        configs: vec![entry(1, ms[0]), entry(2, ms[1])],
        ..ModelProfile::empty("worker-gpt", 16, 2)
    }
}

/// Runs `parcae-host bench-mixed`.
pub fn run(args: &MixedBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.slowdown.is_finite() && args.slowdown >= 1.0, "--slowdown must be at least 1");
    anyhow::ensure!(args.seconds >= 3.0, "--seconds must be at least 3");
    anyhow::ensure!(args.repeats >= 1, "--repeats must be at least 1");
    let out = &args.out_dir;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let host = this_binary()?;
    let trace = out.join("trace.csv");
    std::fs::write(&trace, "t_ms,op,node\n0,add,n1\n0,add,n2\n180000,add,n3\n")
        .with_context(|| format!("writing {}", trace.display()))?;
    let fast = "fast=1".to_string();
    let slow = format!("slow={}", args.slowdown);
    let both = format!("fast=1,slow={}", args.slowdown);
    let one_run = |name: &str, d: u32, types: &str| -> anyhow::Result<PathBuf> {
        let script = out.join(format!("{name}.json"));
        std::fs::write(&script, format!("[[{d},1],[{d},1],[{d},1]]"))?;
        let run_dir = out.join(name);
        let mut command = Command::new(&host);
        command
            .args(["run", "--trace"])
            .arg(&trace)
            .arg("--script")
            .arg(&script)
            .args(["--intervals", "3", "--wall-seconds-per-interval", &(args.seconds / 3.0).to_string()])
            .args(["--emulate-types", types, "--run-dir"])
            .arg(&run_dir);
        if let Some(bin) = &args.worker_bin {
            command.arg("--worker-bin").arg(bin);
        }
        eprintln!("bench-mixed: {name} ({types}, D={d})");
        run_child(&mut command, &format!("parcae-host run ({name})"))?;
        Ok(run_dir.join("events.json"))
    };
    let fleets: [(&str, u32, &str); 5] = [
        ("fast-1", 1, &fast),
        ("slow-1", 1, &slow),
        ("fast-2", 2, &fast),
        ("slow-2", 2, &slow),
        ("mixed", 2, &both),
    ];
    let mut periods: Vec<Vec<f64>> = vec![Vec::new(); fleets.len()];
    let mut mixed_log = None;
    for repeat in 0..args.repeats {
        let order: Vec<usize> =
            if repeat % 2 == 0 { (0..fleets.len()).collect() } else { (0..fleets.len()).rev().collect() };
        for i in order {
            let (name, d, types) = fleets[i];
            let log = one_run(&format!("{name}-{}", repeat + 1), d, types)?;
            periods[i].extend(step_periods(&log)?);
            if name == "mixed" {
                mixed_log = Some(log);
            }
        }
    }
    let [fast_1, slow_1, fast_2, slow_2, mixed_ms] =
        [0, 1, 2, 3, 4].map(|i| crate::stats::median(&periods[i]));
    let mixed_log = mixed_log.context("no mixed run")?;
    let (fast_p, slow_p) = (profile([fast_1, fast_2]), profile([slow_1, slow_2]));
    let predicted =
        mixed_step(&[&fast_p, &slow_p], &MixedConfig { pipeline_stages: 1, replicas: vec![1, 1] })
            .map_err(|e| anyhow::anyhow!("the mixed model has no prediction: {e}"))?;
    let bench = MixedBench {
        fast_ms: [fast_1, fast_2],
        slow_ms: [slow_1, slow_2],
        mixed_ms,
        predicted_ms: predicted.iteration_ms,
        error: mixed_ms / predicted.iteration_ms - 1.0,
        shares: shares(&mixed_log)?,
    };
    let json = out.join("bench-mixed.json");
    std::fs::write(&json, serde_json::to_vec_pretty(&bench)?)
        .with_context(|| format!("writing {}", json.display()))?;
    println!("{}", render(&bench, args.slowdown));
    println!("report: {}", json.display());
    Ok(())
}

/// The report as a table.
pub fn render(b: &MixedBench, slowdown: f64) -> String {
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header(["fleet (D=2, P=1)", "step ms", "samples/s"]);
    let rate = |ms: f64| format!("{:.1}", 16.0 / (ms / 1000.0));
    table.add_row(["2 fast".to_string(), format!("{:.1}", b.fast_ms[1]), rate(b.fast_ms[1])]);
    table.add_row([format!("2 slow (x{slowdown})"), format!("{:.1}", b.slow_ms[1]), rate(b.slow_ms[1])]);
    table.add_row([
        format!("1 fast + 1 slow, shares {:?}", b.shares),
        format!("{:.1}", b.mixed_ms),
        rate(b.mixed_ms),
    ]);
    table.add_row([
        "  the model's prediction".to_string(),
        format!("{:.1}", b.predicted_ms),
        rate(b.predicted_ms),
    ]);
    format!(
        "{table}\nmixed step: measured {:.1} ms, predicted {:.1} ms ({:+.1}%); (1, 1): fast {:.1} ms, slow {:.1} ms",
        b.mixed_ms,
        b.predicted_ms,
        b.error * 100.0,
        b.fast_ms[0],
        b.slow_ms[0]
    )
}
