//! Checkpoints on S3-compatible object storage (`--checkpoint-url s3://...`) with real host
//! and worker processes and a real S3-compatible server (moto's server mode): the whole fleet
//! is preempted with notice, so the holders write an emergency checkpoint straight to the
//! bucket, and the workers that come back restart from it, reading it from the bucket. Nothing
//! is lost, nothing lands on the local disk, and the final checkpoint in the bucket holds the
//! parameters of an uninterrupted run.

use std::path::PathBuf;

use parcae_e2e_cluster::{max_diff_from_uninterrupted_in, run_host, scratch};
use parcae_store::moto::MotoServer;
use parcae_store::{Store, StoreSpec};

#[test]
fn a_fleet_wipe_restarts_from_an_emergency_checkpoint_in_an_s3_bucket() {
    let dir = scratch("s3-checkpoints");
    let moto = MotoServer::start(&["parcae-e2e"]).expect("moto");
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/traces/fleet-wipe-4node.csv");
    let env: Vec<(&str, String)> = moto.env().into_iter().filter(|(k, _)| *k != "AWS_ENDPOINT_URL").collect();
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let log = run_host(
        &dir,
        &trace,
        &[
            "--wall-seconds-per-interval",
            "4",
            "--intervals",
            "4",
            "--checkpoint-url",
            "s3://parcae-e2e/runs/wipe",
            "--checkpoint-endpoint",
            &moto.endpoint,
        ],
        &env_refs,
    );
    let summary = &log["summary"];
    let events = log["events"].as_array().unwrap();
    let emergency = events
        .iter()
        .find(|e| e["event"] == "checkpointed" && e["reason"] == "emergency")
        .unwrap_or_else(|| panic!("no emergency checkpoint: {summary}"));
    let location = emergency["location"].as_str().unwrap();
    assert!(location.starts_with("s3://parcae-e2e/runs/wipe/checkpoints/step-"), "{location}");
    let restart = events
        .iter()
        .find(|e| e["event"] == "reconfigured" && e["kind"] == "restart" && e["cold_start"] == false)
        .unwrap_or_else(|| panic!("no restart after the wipe: {summary}"));
    assert_eq!(restart["step"], emergency["step"], "restarted elsewhere than the emergency checkpoint");
    assert!(restart["bytes_from_checkpoint"].as_u64().unwrap() > 0, "{restart}");
    assert_eq!(summary["rolled_back_steps_notice_too_short"], 0, "{summary}");
    assert_eq!(summary["rolled_back_steps_unannounced"], 0, "{summary}");
    assert!(!dir.join("run/checkpoints").exists(), "checkpoints landed on the local disk");

    // The final checkpoint is complete in the bucket: marker, pointer, every stage.
    let store = Store::open_with_env(
        &StoreSpec { url: "s3://parcae-e2e/runs/wipe".into(), endpoint: Some(moto.endpoint.clone()) },
        &env,
    )
    .unwrap();
    let last = summary["last_checkpoint"].as_str().expect("a final checkpoint");
    let prefix =
        last.strip_prefix("s3://parcae-e2e/runs/wipe/").expect("the final checkpoint is in the bucket");
    let keys = list(&store, "checkpoints");
    assert!(keys.contains(&format!("{prefix}/COMPLETE")), "{keys:?}");
    assert!(keys.contains(&"checkpoints/LATEST".to_string()), "{keys:?}");
    assert!(
        keys.iter().all(|k| k.starts_with(prefix) || k == "checkpoints/LATEST"),
        "older checkpoints were not deleted: {keys:?}"
    );
    let steps = summary["steps"].as_u64().unwrap();
    let worst = max_diff_from_uninterrupted_in(&store, prefix, steps);
    println!("{steps} steps; max |parameter difference| vs the uninterrupted run: {worst:e}");
    assert!(worst < 1e-3, "parameters diverged from the uninterrupted run by {worst}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn list(store: &Store, prefix: &str) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(store.list(prefix)).expect("listing the bucket")
}
