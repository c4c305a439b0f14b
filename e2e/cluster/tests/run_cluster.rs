//! The correctness bar of `parcae-host run`: real worker processes on loopback,
//! a trace that adds and preempts instances (with and without notice), every
//! migration kind, and at the end the same parameters as an uninterrupted run
//! over the same samples.

use std::path::{Path, PathBuf};
use std::process::Command;

use parcae_cluster::{Layout, ModelSpec, Slot};
use parcae_worker::local::train_local;
use parcae_worker::tch::Device;
use parcae_worker::{StageTrainer, load_checkpoint};

/// `target/<profile>/` of this test binary (`target/<profile>/deps/<test>`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// The host and worker binaries, brought up to date (`cargo test -p parcae-e2e`
/// alone does not build other packages' binaries; when they are current this
/// is a no-op).
fn binaries() -> (PathBuf, PathBuf) {
    let dir = target_dir();
    let release = dir.file_name().is_some_and(|n| n == "release");
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo.args(["build", "--quiet", "-p", "parcae-host", "-p", "parcae-worker"]);
    if release {
        cargo.arg("--release");
    }
    let status = cargo.status().expect("running cargo build");
    assert!(status.success(), "building parcae-host and parcae-worker failed");
    (dir.join("parcae-host"), dir.join("parcae-worker"))
}

/// Throughputs chosen so the throughput-optimal policy picks, for N workers:
/// 2 -> (1,2), 3 -> (1,3), 4 or 5 -> (2,2), 6 -> (3,2).
fn test_profile(dir: &Path) -> PathBuf {
    let example = include_str!("../../../data/profiles/example-small.json");
    let mut profile: serde_json::Value = serde_json::from_str(example).unwrap();
    let model = &mut profile["models"]["tiny-gpt"];
    let entry = |dp: u32, pp: u32, samples: f64| serde_json::json!({"dp": dp, "pp": pp, "iteration_ms": 32_000.0 / samples, "samples_per_s": samples});
    model["throughput"] = serde_json::json!([
        entry(1, 1, 10.0),
        entry(2, 1, 15.0),
        entry(1, 2, 18.0),
        entry(1, 3, 25.0),
        entry(2, 2, 30.0),
        entry(3, 2, 40.0),
    ]);
    model["model_build_ms_by_pp"] = serde_json::json!({"1": 700, "2": 500, "3": 433});
    let path = dir.join("profile.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&profile).unwrap()).unwrap();
    path
}

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
    let (host, worker) = binaries();
    let dir = std::env::temp_dir().join(format!("parcae-run-cluster-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.csv");
    std::fs::write(&trace, TRACE).unwrap();
    let profile = test_profile(&dir);
    let run_dir = dir.join("run");
    let output = Command::new(&host)
        .arg("run")
        .args(["--worker-bin", worker.to_str().unwrap()])
        .args(["--trace", trace.to_str().unwrap()])
        .args(["--profile", profile.to_str().unwrap()])
        .args(["--policy", "builtin:reactive"])
        .args(["--wall-seconds-per-interval", "4", "--intervals", "6", "--checkpoint-every", "5"])
        .args(["--unannounced", "n1"])
        .args(["--run-dir", run_dir.to_str().unwrap()])
        // A fault drill on top: every state transfer's first chunk arrives corrupted once.
        .env("PARCAE_DRILL_CORRUPT_FIRST_CHUNK", "1")
        .output()
        .expect("running parcae-host");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "parcae-host run failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    println!("{stdout}");

    let log: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("events.json")).unwrap()).unwrap();
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

    // The final checkpoint holds every layer at the last committed step.
    let spec = ModelSpec::default();
    let root = PathBuf::from(summary["last_checkpoint"].as_str().expect("a final checkpoint"));
    let mut saved = Vec::new();
    for entry in std::fs::read_dir(&root).unwrap().flatten().filter(|e| e.path().is_dir()) {
        let checkpoint = load_checkpoint(&entry.path(), Some(&spec)).unwrap();
        assert_eq!(checkpoint.step, steps);
        saved.extend(checkpoint.layers);
    }
    saved.sort_by_key(|l| l.layer);
    assert_eq!(saved.iter().map(|l| l.layer).collect::<Vec<_>>(), (0..spec.num_layers()).collect::<Vec<_>>());

    // The same samples on one worker, uninterrupted.
    let layout = Layout::new(&spec, 1, 1).unwrap();
    let trainer =
        StageTrainer::for_slot(spec.clone(), &layout, Slot { replica: 0, stage: 0 }, Device::Cpu).unwrap();
    let reference = train_local(&layout, vec![trainer], steps).unwrap();
    let expected = reference.trainers[0].export_all().unwrap();
    let worst = saved.iter().zip(&expected).map(|(a, b)| a.max_abs_diff(b)).fold(0.0f32, f32::max);
    println!("{steps} steps; max |parameter difference| vs the uninterrupted run: {worst:e}");
    assert!(worst < 1e-3, "parameters diverged from the uninterrupted run by {worst}");
    let _ = std::fs::remove_dir_all(&dir);
}
