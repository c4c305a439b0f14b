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

/// Where the first kill is among the log's events, and the steps committed before it.
fn committed_before_the_kill(log: &serde_json::Value) -> (usize, u64) {
    let all = log["events"].as_array().expect("events");
    let killed_at = all.iter().position(|e| e["event"] == "killed").expect("a kill");
    let committed = all[..killed_at]
        .iter()
        .filter(|e| e["event"] == "step")
        .map(|e| e["step"].as_u64().unwrap() + 1)
        .max()
        .expect("steps before the kill");
    (killed_at, committed)
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
    // Committed before the wipe, and covered by the last periodic checkpoint completed before it.
    let (killed_at, committed) = committed_before_the_kill(&log);
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

/// A notice too short for the emergency checkpoint (1 ms of trace time): the wipe rolls
/// back like an unannounced one, and counts like one for the periodic cadence.
#[test]
fn a_fleet_wipe_whose_notice_is_too_short_rolls_back_and_counts_for_the_cadence() {
    let dir = scratch("fleet-wipe-short-notice");
    let log =
        run_host(&dir, &trace(), &["--wall-seconds-per-interval", "4", "--grace-seconds", "0.001"], &[]);
    let summary = &log["summary"];
    // Four preemptions, all with notice (read too late to act on: still counted).
    assert_eq!(count(summary, "preemptions"), 4, "{summary}");
    assert_eq!(count(summary, "unannounced_kills"), 0, "{summary}");
    assert_eq!(count(summary, "rolled_back_steps_unannounced"), 0, "{summary}");
    let rolled_back: Vec<&serde_json::Value> = events(&log, "rolled-back");
    assert!(!rolled_back.is_empty(), "nothing rolled back: {summary}");
    assert!(rolled_back.iter().all(|e| e["cause"] == "notice-too-short"), "{rolled_back:?}");
    let lost: u64 = rolled_back.iter().map(|e| e["steps"].as_u64().unwrap()).sum();
    assert_eq!(count(summary, "rolled_back_steps_notice_too_short"), lost);
    // The cadence was 20 steps with no loss seen; the loss makes it shorter.
    let cadences = events(&log, "cadence");
    assert_eq!(cadences[0]["every_steps"], 20, "{cadences:?}");
    let after = cadences.iter().find(|e| e["failed_notice_saves"].as_u64() >= Some(1));
    let after = after.unwrap_or_else(|| panic!("no cadence counted the loss: {cadences:?}"));
    assert!(after["every_steps"].as_u64().unwrap() < 20, "{after}");
    // The policy was told the checkpoint interval the run keeps (a few steps), not the
    // profile's 30 minutes: a loss it cannot save costs seconds, and it plans so.
    // (Where no layout fits the fleet, as at the start, there is nothing to tell.)
    let decisions: Vec<_> = events(&log, "decision").into_iter().filter(|d| !d["config"].is_null()).collect();
    assert!(!decisions.is_empty(), "{summary}");
    for d in &decisions {
        let told = d["checkpoint_interval_ms"].as_f64().unwrap_or_else(|| panic!("nothing told: {d}"));
        assert!(told > 0.0 && told < 60_000.0, "told {told} ms: {d}");
    }
    // The simulator's replay rolls back no more than it trained: at the profile's 30
    // minutes it once rolled back more than the run ever trained. Under the work-at-risk
    // rule (`parcae_policy_core::at_risk`) a rollback takes back at most what was trained
    // since the last one, so its net samples are never negative (here its cold start
    // outlasts the short run, so it trains, and rolls back, nothing).
    let fidelity = summary["fidelity"]["comparisons"].as_array().expect("fidelity comparisons");
    let metric = |name: &str| fidelity.iter().find(|c| c["metric"] == name).expect(name);
    let simulated_rollback = metric("work rolled back")["simulated"].as_f64().unwrap();
    let simulated = metric("samples (net of rollbacks)")["simulated"].as_f64().unwrap();
    let trained = metric("samples (net of rollbacks)")["measured"].as_f64().unwrap();
    assert!(simulated >= 0.0, "simulated {simulated} samples net of {simulated_rollback} rolled back");
    assert!(simulated_rollback < trained / 4.0, "{simulated_rollback} of {trained}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The job pauses (a script says so) the interval before the whole fleet is
/// preempted without notice: a paused job trains nothing, so it writes its
/// state as it pauses (unless a periodic checkpoint already holds that step),
/// and the wipe then rolls nothing back; the job resumes
/// from that checkpoint on the workers that arrive. The cost model prices a
/// pause so (a loss while paused loses nothing); without the checkpoint the
/// wipe would roll back to the last periodic one.
#[test]
fn a_job_paused_before_an_unannounced_wipe_loses_nothing() {
    let dir = scratch("fleet-wipe-paused");
    let script = dir.join("script.json");
    // Interval 0 trains, 1 pauses, the wipe opens 2; the arrivals train from 2 on.
    std::fs::write(&script, "[[2,2],null,[1,2],[1,2],[1,2],[1,2]]").unwrap();
    let script = script.to_str().unwrap().to_string();
    let mut args = vec!["--script", &script, "--intervals", "5", "--wall-seconds-per-interval", "4"];
    for node in ["n1", "n2", "n3", "n4"] {
        args.extend(["--unannounced", node]);
    }
    let log = run_host(&dir, &trace(), &args, &[]);
    let summary = &log["summary"];
    assert_eq!(count(summary, "unannounced_kills"), 4, "{summary}");
    let (_, trained) = committed_before_the_kill(&log);
    // The paused state is on disk: written as the job paused, or, when a periodic
    // checkpoint landed at that very step (a slow machine trains exactly one cadence
    // in the first interval), by that one, and the pause writes none.
    let checkpoints = events(&log, "checkpointed");
    let pauses: Vec<&serde_json::Value> =
        checkpoints.iter().copied().filter(|e| e["reason"] == "pause").collect();
    let at_the_pause: Vec<&serde_json::Value> =
        checkpoints.iter().copied().filter(|e| e["step"].as_u64() == Some(trained)).collect();
    assert_eq!(at_the_pause.len(), 1, "one checkpoint holds every committed step: {checkpoints:?}");
    let reason = at_the_pause[0]["reason"].as_str().unwrap();
    assert!(reason == "pause" || reason == "periodic", "{reason}");
    assert_eq!(pauses.len(), usize::from(reason == "pause"), "{pauses:?}");
    assert_eq!(count(summary, "pause_checkpoints"), u64::from(reason == "pause"), "{summary}");
    assert!(events(&log, "rolled-back").is_empty(), "the wipe rolled work back: {summary}");
    assert_eq!(count(summary, "rolled_back_steps_unannounced"), 0, "{summary}");
    let resumed = events(&log, "reconfigured")
        .into_iter()
        .find(|e| e["kind"] == "restart" && e["cold_start"] == false)
        .expect("a restart after the wipe");
    assert_eq!(resumed["step"].as_u64(), Some(trained), "resumed elsewhere than the pause's checkpoint");
    let steps = count(summary, "steps");
    assert!(steps > trained, "no training after the wipe: {summary}");
    let worst = max_diff_from_uninterrupted(summary, steps);
    assert!(worst < 1e-3, "parameters diverged from the uninterrupted run by {worst}");
    let _ = std::fs::remove_dir_all(&dir);
}
