//! The end of a run never abandons a checkpoint: when the last step is also the step of a
//! periodic checkpoint still being written in the background, the host waits for that write
//! and makes it current instead of writing a second checkpoint beside it (CI once saw the two
//! collide, leaving the checkpoint of five steps earlier as the run's last).

use std::path::PathBuf;

use parcae_e2e_cluster::{max_diff_from_uninterrupted, run_host, scratch};

const TRACE: &str = "t_ms,op,node
0,add,n1
0,add,n2
";

#[test]
fn a_periodic_checkpoint_pending_at_the_last_step_becomes_the_final_one() {
    let dir = scratch("final-checkpoint");
    let trace = dir.join("trace.csv");
    std::fs::write(&trace, TRACE).unwrap();
    // --max-steps 10 with a checkpoint every 5 steps: the periodic snapshot of step 10 is
    // taken right before the run stops, and is still being written when it does.
    let log = run_host(&dir, &trace, &["--max-steps", "10", "--checkpoint-every", "5"], &[]);
    let summary = &log["summary"];
    assert_eq!(summary["steps"], 10, "{summary}");
    let checkpoints: Vec<_> = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "checkpointed")
        .map(|e| (e["step"].as_u64().unwrap(), e["reason"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(
        checkpoints,
        vec![(5, "periodic".to_string()), (10, "periodic".to_string())],
        "the last step's periodic checkpoint should complete and stand as the final one"
    );
    let last = PathBuf::from(summary["last_checkpoint"].as_str().expect("a last checkpoint"));
    assert!(last.ends_with("step-00000010"), "{}", last.display());
    // Nothing else is left in the checkpoint directory: no abandoned or replaced checkpoint.
    let mut left: Vec<String> = std::fs::read_dir(last.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("step-"))
        .collect();
    left.sort();
    assert_eq!(left, vec!["step-00000010".to_string()]);
    let worst = max_diff_from_uninterrupted(summary, 10);
    assert!(worst < 1e-3, "parameters diverged from the uninterrupted run by {worst}");
    let _ = std::fs::remove_dir_all(&dir);
}
