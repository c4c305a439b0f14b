//! A mixed fleet on one machine (issue 15): workers of two speeds (one emulating an
//! instance type three times as slow, `run --emulate-types`) train one job, the batch split
//! by speed: the slow replica takes a quarter of the batch, and the run trains the model an
//! uninterrupted one does. (How much faster it steps than two slow workers, and how close
//! the step is to the mixed-fleet model's prediction, are measured by `parcae-host
//! bench-mixed`, not asserted here: timings on a shared machine are a benchmark's business.)

use std::path::Path;

use parcae_e2e_cluster::{max_diff_from_uninterrupted, run_host, scratch};

const TRACE: &str = "t_ms,op,node
0,add,n1
0,add,n2
180000,add,n3
";

/// Runs `layout` for the whole (short) run with `types` emulated; returns the event log.
fn run(dir: &Path, name: &str, layout: (u32, u32), types: &str) -> serde_json::Value {
    let dir = dir.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.csv");
    std::fs::write(&trace, TRACE).unwrap();
    let script = dir.join("script.json");
    std::fs::write(&script, format!("[[{0},{1}],[{0},{1}],[{0},{1}]]", layout.0, layout.1)).unwrap();
    let script = script.to_str().unwrap().to_string();
    run_host(
        &dir,
        &trace,
        &[
            "--script",
            &script,
            "--intervals",
            "3",
            "--wall-seconds-per-interval",
            "3",
            "--emulate-types",
            types,
        ],
        &[],
    )
}

/// Median step period, ms, the first steps (warm-up) left out.
fn step_ms(log: &serde_json::Value) -> f64 {
    let times: Vec<f64> = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "step")
        .map(|e| e["t_s"].as_f64().unwrap())
        .collect();
    let mut gaps: Vec<f64> = times.windows(2).skip(3).map(|w| (w[1] - w[0]) * 1000.0).collect();
    assert!(gaps.len() > 5, "too few steps: {}", gaps.len());
    gaps.sort_by(f64::total_cmp);
    gaps[gaps.len() / 2]
}

#[test]
fn workers_of_two_speeds_split_the_batch_and_train_the_same_model() {
    let dir = scratch("mixed-fleet");
    let fast = step_ms(&run(&dir, "fast", (2, 1), "fast=1"));
    let slow = step_ms(&run(&dir, "slow", (2, 1), "slow=3"));
    let mixed = run(&dir, "mixed", (2, 1), "fast=1,slow=3");
    let shares: Vec<Vec<u64>> = mixed["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "reconfigured")
        .map(|e| {
            e["shares"].as_array().map_or(Vec::new(), |s| s.iter().map(|v| v.as_u64().unwrap()).collect())
        })
        .collect();
    // The workers reported their types, and the run log says which joined.
    let mut types: Vec<&str> = mixed["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "joined")
        .filter_map(|e| e["instance_type"].as_str())
        .collect();
    types.sort_unstable();
    types.dedup();
    assert_eq!(types, ["fast", "slow"], "{}", mixed["events"]);
    let mut first = shares.first().cloned().unwrap_or_default();
    first.sort_unstable();
    assert_eq!(first, [2, 6], "the slow replica takes a quarter of the batch: {shares:?}");
    // The speeds are printed, not asserted: three runs one after another on a
    // shared machine are not a measurement (under load the mixed run once
    // took 139 ms a step against the slow run's 106). `parcae-host
    // bench-mixed` measures them side by side (ABBA, medians).
    let measured = step_ms(&mixed);
    println!("(2, 1) step: fast {fast:.1} ms, slow {slow:.1} ms, one of each {measured:.1} ms");
    // The same model as one worker training the same samples uninterrupted.
    let summary = &mixed["summary"];
    let steps = summary["steps"].as_u64().unwrap();
    let worst = max_diff_from_uninterrupted(summary, steps);
    assert!(worst < 1e-3, "parameters diverged from the uninterrupted run by {worst}");
    let _ = std::fs::remove_dir_all(&dir);
}
