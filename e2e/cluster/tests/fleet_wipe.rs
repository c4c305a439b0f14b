//! The whole fleet preempted at once (`data/traces/fleet-wipe-4node.csv`): no
//! worker stays to take the state. With a notice, the holders write an
//! emergency checkpoint within it and the job resumes from it when workers
//! come back, losing no committed step. Without notice, at most the work since
//! the last periodic checkpoint is lost.

use std::path::PathBuf;

use parcae_e2e_cluster::{max_diff_from_uninterrupted, run_host, scratch};

fn trace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/traces/fleet-wipe-4node.csv")
}

/// Events of one kind, in order.
fn events<'a>(log: &'a serde_json::Value, kind: &str) -> Vec<&'a serde_json::Value> {
    log["events"].as_array().expect("events").iter().filter(|e| e["event"] == kind).collect()
}

fn count(summary: &serde_json::Value, field: &str) -> u64 {
    summary[field].as_u64().unwrap_or_else(|| panic!("summary.{field} in {summary}"))
}

#[test]
fn a_fleet_wipe_with_notice_loses_no_committed_step() {
    let dir = scratch("fleet-wipe-notice");
    let log = run_host(&dir, &trace(), &["--wall-seconds-per-interval", "4"], &[]);
    let summary = &log["summary"];
    assert!(count(summary, "emergency_checkpoints") >= 1, "no emergency checkpoint: {summary}");
    assert!(events(&log, "rolled-back").is_empty(), "work was rolled back: {summary}");
    assert_eq!(count(summary, "rolled_back_steps_notice_too_short"), 0, "{summary}");
    assert_eq!(count(summary, "rolled_back_steps_unannounced"), 0, "{summary}");
    for e in events(&log, "reconfigured") {
        assert_eq!(e["rolled_back_steps"], 0, "{e}");
    }
    // The new workers resumed from the emergency checkpoint at the step the fleet left at.
    let emergency = events(&log, "checkpointed").into_iter().find(|e| e["reason"] == "emergency").unwrap();
    let resumed = events(&log, "reconfigured")
        .into_iter()
        .find(|e| e["kind"] == "restart" && e["cold_start"] == false)
        .expect("a restart after the wipe");
    assert_eq!(resumed["step"], emergency["step"], "resumed elsewhere than the emergency checkpoint");
    let steps = count(summary, "steps");
    assert!(steps > emergency["step"].as_u64().unwrap(), "no training after the wipe: {summary}");
    let worst = max_diff_from_uninterrupted(summary, steps);
    println!("{steps} steps; max |parameter difference| vs the uninterrupted run: {worst:e}");
    assert!(worst < 1e-3, "parameters diverged from the uninterrupted run by {worst}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_fleet_wipe_without_notice_loses_at_most_the_work_since_the_last_periodic_checkpoint() {
    let dir = scratch("fleet-wipe-unannounced");
    let mut args = vec!["--wall-seconds-per-interval", "4"];
    for node in ["n1", "n2", "n3", "n4"] {
        args.extend(["--unannounced", node]);
    }
    let log = run_host(&dir, &trace(), &args, &[]);
    let summary = &log["summary"];
    assert_eq!(count(summary, "emergency_checkpoints"), 0, "{summary}");
    assert_eq!(count(summary, "unannounced_kills"), 4, "{summary}");
    let all: &Vec<serde_json::Value> = log["events"].as_array().unwrap();
    let killed_at = all.iter().position(|e| e["event"] == "killed").expect("a kill");
    // Committed before the wipe, and covered by the last periodic checkpoint completed before it.
    let committed = all[..killed_at]
        .iter()
        .filter(|e| e["event"] == "step")
        .map(|e| e["step"].as_u64().unwrap() + 1)
        .max()
        .expect("steps before the wipe");
    let saved = all[..killed_at]
        .iter()
        .filter(|e| e["event"] == "checkpointed" && e["reason"] == "periodic")
        .map(|e| e["step"].as_u64().unwrap())
        .max()
        .unwrap_or(0);
    let rolled_back: Vec<&serde_json::Value> = events(&log, "rolled-back");
    assert_eq!(rolled_back.len(), 1, "one rollback expected: {rolled_back:?}");
    assert_eq!(rolled_back[0]["cause"], "unannounced");
    let lost = rolled_back[0]["steps"].as_u64().unwrap();
    assert!(
        lost <= committed - saved,
        "lost {lost} steps, more than the {} since step {saved}",
        committed - saved
    );
    assert_eq!(count(summary, "rolled_back_steps_unannounced"), lost);
    assert_eq!(count(summary, "rolled_back_steps_notice_too_short"), 0);
    // Redone steps train on the same samples: the result still matches.
    let steps = count(summary, "steps");
    let worst = max_diff_from_uninterrupted(summary, steps);
    println!("{steps} steps, {lost} rolled back; max |parameter difference|: {worst:e}");
    assert!(worst < 1e-3, "parameters diverged from the uninterrupted run by {worst}");
    let _ = std::fs::remove_dir_all(&dir);
}
