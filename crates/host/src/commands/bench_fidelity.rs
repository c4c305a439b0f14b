//! `parcae-host bench-fidelity`: how well the simulator predicts real runs on this machine.
//! It profiles the deployment (`parcae-host profile`), runs the demo trace and the calm
//! trace with that profile (`parcae-host run`, real worker processes), and gathers what
//! each run's summary says of its own simulation (measured against simulated) into one
//! table, checked against the targets: samples within 5%, time migrating within 25%, the
//! policy's layouts agreeing in at least 90% of intervals.
//!
//! The runs are processes of this binary, so each is exactly what a user would run.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use clap::Args;
use comfy_table::{Table, presets};
use serde::Serialize;
use serde_json::Value;

use crate::embedded::CALM_TRACE;
use crate::processes::{run_child, this_binary};

/// Options of `parcae-host bench-fidelity`.
#[derive(Debug, Args)]
pub struct FidelityArgs {
    /// Where the profile, the runs and the table go.
    #[arg(long, default_value = "out/fidelity")]
    pub out_dir: PathBuf,
    /// Use this deployment profile instead of profiling first (with --cost-constants).
    #[arg(long, requires = "cost_constants")]
    pub profile: Option<PathBuf>,
    /// The cost constants measured with --profile.
    #[arg(long, requires = "profile")]
    pub cost_constants: Option<PathBuf>,
    /// The profile's model.
    #[arg(long, default_value = "worker-gpt")]
    pub model: String,
    /// Wall-clock seconds per trace interval of both runs.
    #[arg(long, default_value_t = 4.0)]
    pub wall_seconds_per_interval: f64,
    /// Intervals of the calm trace to run (its first hour by default; it lasts two).
    #[arg(long, default_value_t = 60)]
    pub calm_intervals: usize,
    /// Policy of the runs (default: the default policy).
    #[arg(long)]
    pub policy: Option<String>,
    /// The worker binary (default: `parcae-worker` next to this executable).
    #[arg(long)]
    pub worker_bin: Option<PathBuf>,
}

/// One run's fidelity, as its summary reports it.
#[derive(Debug, Clone, Serialize)]
pub struct TraceFidelity {
    /// Which trace.
    pub trace: String,
    /// The run's summary's `fidelity` record.
    pub fidelity: Value,
    /// Error of the simulated samples (relative).
    pub samples_error: Option<f64>,
    /// Error of the simulated time migrating (relative).
    pub migrating_error: Option<f64>,
    /// Share of intervals where the replayed policy chose the run's layout.
    pub layout_agreement: Option<f64>,
}

/// The targets of the fidelity check.
const SAMPLES_TOLERANCE: f64 = 0.05;
const MIGRATING_TOLERANCE: f64 = 0.25;
const LAYOUT_AGREEMENT: f64 = 0.90;

/// Runs `parcae-host bench-fidelity`.
pub fn run(args: &FidelityArgs) -> anyhow::Result<()> {
    let out = &args.out_dir;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let host = this_binary()?;
    let (profile, constants) = match (&args.profile, &args.cost_constants) {
        (Some(p), Some(c)) => (p.clone(), c.clone()),
        _ => {
            let (p, c) = (out.join("deployment-profile.json"), out.join("deployment-constants.json"));
            let mut command = Command::new(&host);
            command
                .args(["profile", "--model-name", &args.model, "--work-dir"])
                .arg(out.join("profile"))
                .arg("--out")
                .arg(&p)
                .arg("--constants-out")
                .arg(&c)
                .arg("--json")
                .arg(out.join("profile-report.json"));
            if let Some(bin) = &args.worker_bin {
                command.arg("--worker-bin").arg(bin);
            }
            run_child(&mut command, "parcae-host profile")?;
            (p, c)
        }
    };
    let calm = out.join("calm-4node.csv");
    std::fs::write(&calm, CALM_TRACE.1).with_context(|| format!("writing {}", calm.display()))?;
    let mut results = Vec::new();
    for (name, trace, intervals) in
        [("demo", None, None), ("calm", Some(calm.as_path()), Some(args.calm_intervals))]
    {
        let run_dir = out.join(name);
        let mut command = Command::new(&host);
        command
            .args(["run", "--profile"])
            .arg(&profile)
            .arg("--cost-constants")
            .arg(&constants)
            .args(["--model", &args.model])
            .args(["--wall-seconds-per-interval", &args.wall_seconds_per_interval.to_string()])
            .arg("--run-dir")
            .arg(&run_dir);
        if let Some(trace) = trace {
            command.arg("--trace").arg(trace);
        }
        if let Some(n) = intervals {
            command.args(["--intervals", &n.to_string()]);
        }
        if let Some(policy) = &args.policy {
            command.args(["--policy", policy]);
        }
        if let Some(bin) = &args.worker_bin {
            command.arg("--worker-bin").arg(bin);
        }
        eprintln!("bench-fidelity: {name} trace");
        run_child(&mut command, &format!("parcae-host run ({name})"))?;
        results.push(read_fidelity(name, &run_dir.join("events.json"))?);
    }
    let json = out.join("fidelity.json");
    std::fs::write(&json, serde_json::to_vec_pretty(&results)?)
        .with_context(|| format!("writing {}", json.display()))?;
    println!("{}", render(&results));
    println!("profile: {}  constants: {}  table: {}", profile.display(), constants.display(), json.display());
    Ok(())
}

/// The fidelity record of the run whose event log is `path`.
pub fn read_fidelity(trace: &str, path: &Path) -> anyhow::Result<TraceFidelity> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let log: Value = serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let fidelity = log["summary"]["fidelity"].clone();
    anyhow::ensure!(
        fidelity.is_object(),
        "{}: summary.fidelity: missing (the run made no prediction)",
        path.display()
    );
    let error_of = |metric: &str| {
        fidelity["comparisons"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["metric"] == metric))
            .and_then(|r| r["relative_error"].as_f64())
    };
    Ok(TraceFidelity {
        trace: trace.to_string(),
        samples_error: error_of("samples (net of rollbacks)"),
        migrating_error: error_of("time migrating (job running)"),
        layout_agreement: fidelity["layout_agreement"].as_f64(),
        fidelity,
    })
}

/// Every comparison of every run, then the targets met or missed.
pub fn render(results: &[TraceFidelity]) -> String {
    let mut table = Table::new();
    table.load_preset(presets::UTF8_FULL_CONDENSED);
    table.set_header(["trace", "figure", "measured", "simulated", "error"]);
    for r in results {
        for c in r.fidelity["comparisons"].as_array().into_iter().flatten() {
            let number = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.2}"));
            table.add_row([
                r.trace.clone(),
                format!("{} ({})", c["metric"].as_str().unwrap_or("?"), c["unit"].as_str().unwrap_or("")),
                number(&c["measured"]),
                number(&c["simulated"]),
                c["relative_error"].as_f64().map_or("-".to_string(), |e| format!("{:+.1}%", e * 100.0)),
            ]);
        }
        table.add_row([
            r.trace.clone(),
            "layouts agreeing with the replayed policy".to_string(),
            String::new(),
            String::new(),
            r.layout_agreement.map_or("-".to_string(), |a| format!("{:.0}%", a * 100.0)),
        ]);
    }
    let mut out = table.to_string();
    for r in results {
        let check = |value: Option<f64>, ok: &dyn Fn(f64) -> bool| match value {
            Some(v) if ok(v) => "met",
            Some(_) => "MISSED",
            None => "-",
        };
        out += &format!(
            "\n{}: samples within 5%: {}; time migrating within 25%: {}; layouts agree in >= 90%: {}",
            r.trace,
            check(r.samples_error, &|e| e.abs() <= SAMPLES_TOLERANCE),
            check(r.migrating_error, &|e| e.abs() <= MIGRATING_TOLERANCE),
            check(r.layout_agreement, &|a| a >= LAYOUT_AGREEMENT),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_log_without_a_prediction_is_an_error_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("parcae-fidelity-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("events.json");
        std::fs::write(&path, r#"{"summary": {}, "events": []}"#).unwrap();
        let error = read_fidelity("demo", &path).unwrap_err().to_string();
        assert!(error.contains("events.json") && error.contains("summary.fidelity"), "{error}");
        std::fs::write(
            &path,
            r#"{"summary": {"fidelity": {"layout_agreement": 0.95, "comparisons": [
                {"metric": "samples (net of rollbacks)", "unit": "samples", "measured": 100.0, "simulated": 103.0, "relative_error": 0.03},
                {"metric": "time migrating (job running)", "unit": "s", "measured": 1.0, "simulated": 1.5, "relative_error": 0.5}]}}}"#,
        )
        .unwrap();
        let r = read_fidelity("demo", &path).unwrap();
        assert_eq!(
            (r.samples_error, r.migrating_error, r.layout_agreement),
            (Some(0.03), Some(0.5), Some(0.95))
        );
        let text = render(&[r]);
        assert!(
            text.contains("samples within 5%: met")
                && text.contains("time migrating within 25%: MISSED")
                && text.contains(">= 90%: met"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
