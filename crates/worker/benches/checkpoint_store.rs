//! Checkpoint write and read throughput: one stage's state written with
//! `save_checkpoint_to` (one object per layer, then the manifest) and read back with
//! `load_checkpoint_from` (every layer decoded and checksummed), to a local directory and to
//! an S3-compatible server (moto's server mode from the project's venv, on loopback).
//!
//! `cargo bench -p parcae-worker --bench checkpoint_store` writes a stage of about 115 MiB
//! (8 blocks of width 320), three times per store, and prints the median MiB/s;
//! `-- --json FILE` also writes the figures as JSON. Under `cargo test` (test mode) it runs
//! once on about 2 MiB so CI stays quick.
//!
//! moto is a Python server that keeps objects in memory: it is a real S3 protocol endpoint
//! (signed requests, multipart uploads) but no measure of S3's own bandwidth; the figures
//! compare the same client code against the local disk.

use std::time::Instant;

use parcae_cluster::ModelSpec;
use parcae_store::moto::MotoServer;
use parcae_store::{Store, StoreSpec};
use parcae_worker::{LayerState, load_checkpoint_from, save_checkpoint_to};

fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn json_out() -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == "--json").and_then(|i| args.get(i + 1).cloned())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let (spec, reps) = if bench_mode() {
        (
            ModelSpec {
                vocab: 64,
                d_model: 320,
                n_heads: 4,
                n_blocks: 8,
                seq_len: 32,
                ..ModelSpec::default()
            },
            3,
        )
    } else {
        (
            ModelSpec {
                vocab: 64,
                d_model: 96,
                n_heads: 4,
                n_blocks: 4,
                seq_len: 32,
                ..ModelSpec::default()
            },
            1,
        )
    };
    let layers: Vec<LayerState> =
        (0..spec.num_layers()).map(|l| LayerState::initial(&spec, l).unwrap()).collect();
    let bytes: usize = layers.iter().map(|l| l.to_bytes().len()).sum();
    let mib = bytes as f64 / (1 << 20) as f64;
    let dir = std::env::temp_dir().join(format!("parcae-bench-checkpoints-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let moto = MotoServer::start(&["bench"]).expect("moto (run scripts/setup.sh)");
    let env: Vec<(&str, String)> = moto.env();
    let stores = [
        ("local disk", Store::open(&StoreSpec::local(&dir)).unwrap()),
        (
            "S3 (moto)",
            Store::open_with_env(
                &StoreSpec { url: "s3://bench/run".into(), endpoint: Some(moto.endpoint.clone()) },
                &env,
            )
            .unwrap(),
        ),
    ];
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    println!("checkpoint of one stage: {} layers, {mib:.1} MiB, {reps} rep(s), median", layers.len());
    println!("{:<12} {:>12} {:>12}", "store", "write MiB/s", "read MiB/s");
    let mut report = Vec::new();
    for (name, store) in &stores {
        let (mut writes, mut reads) = (Vec::new(), Vec::new());
        for rep in 0..reps {
            let prefix = format!("checkpoints/step-{rep:08}/stage-00");
            let started = Instant::now();
            runtime.block_on(save_checkpoint_to(store, &prefix, 0, spec.seed, &layers)).unwrap();
            writes.push(mib / started.elapsed().as_secs_f64());
            let started = Instant::now();
            let loaded = runtime.block_on(load_checkpoint_from(store, &prefix, Some(&spec))).unwrap();
            reads.push(mib / started.elapsed().as_secs_f64());
            assert_eq!(loaded.layers.len(), layers.len());
            runtime.block_on(store.delete_prefix(&prefix)).unwrap();
        }
        let (write, read) = (median(writes), median(reads));
        println!("{name:<12} {write:>12.1} {read:>12.1}");
        report.push(serde_json::json!({ "store": name, "write_mib_s": write, "read_mib_s": read }));
    }
    if let Some(path) = json_out() {
        let doc = serde_json::json!({ "stage_mib": mib, "reps": reps, "results": report });
        std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
