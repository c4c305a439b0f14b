//! The correctness bar of `parcae-host run`: real worker processes on loopback,
//! a trace that adds and preempts instances (with and without notice), every
//! migration kind, and at the end the same parameters as an uninterrupted run
//! over the same samples.

use parcae_e2e_cluster::{max_diff_from_uninterrupted, run_host, scratch};

/// Workers 1-4 start as (2,2) in slot order (n1, n3 hold stage 0; n2, n4 stage 1).
/// n5/n6 join as a third replica whose state is copied (inter-stage); losing
/// replica 1 (n3, n4) with notice leaves two holders of each stage for (2,2),
/// which only regroup (intra-stage); losing n2 leaves three workers for (1,3)
/// (repartition); killing n1 without notice loses a stage outright (restart
/// from the checkpoint); n7/n8 join for (2,2).
const TRACE: &str = "t_ms,op,node
0,add,n1
0,add,n2
0,add,n3
0,add,n4
60000,add,n5
60000,add,n6
120000,remove,n3
120000,remove,n4
180000,remove,n2
240000,remove,n1
300000,add,n7
300000,add,n8
";

#[test]
fn a_preempted_run_ends_with_the_parameters_of_an_uninterrupted_one() {
    let dir = scratch("run-cluster");
    let trace = dir.join("trace.csv");
    std::fs::write(&trace, TRACE).unwrap();
    let log = run_host(
        &dir,
        &trace,
        &[
            "--wall-seconds-per-interval",
            "4",
            "--intervals",
            "6",
            "--checkpoint-every",
            "5",
            "--unannounced",
            "n1",
        ],
        // A fault drill on top: every state transfer's first chunk arrives corrupted once.
        &[("PARCAE_DRILL_CORRUPT_FIRST_CHUNK", "1")],
    );
    let summary = &log["summary"];
    let count =
        |field: &str| summary[field].as_u64().unwrap_or_else(|| panic!("summary.{field} in {summary}"));
    for kind in
        ["migrations_intra_stage", "migrations_inter_stage", "migrations_repartition", "migrations_restart"]
    {
        assert!(count(kind) >= 1, "no {kind} in {summary}");
    }
    assert_eq!(count("unannounced_kills"), 1, "{summary}");
    assert!(count("resent_chunks") >= 1, "the corrupted chunks were not resent: {summary}");
    let steps = count("steps");
    assert!(steps >= 10, "too few steps trained: {summary}");
    let first = summary["first_loss"].as_f64().unwrap();
    let last = summary["final_loss"].as_f64().unwrap();
    assert!(last < first, "loss did not fall: {first} -> {last}");

    // The final checkpoint holds every layer at the last committed step, equal
    // to the same samples on one worker, uninterrupted.
    let worst = max_diff_from_uninterrupted(summary, steps);
    println!("{steps} steps; max |parameter difference| vs the uninterrupted run: {worst:e}");
    assert!(worst < 1e-3, "parameters diverged from the uninterrupted run by {worst}");
    let _ = std::fs::remove_dir_all(&dir);
}
