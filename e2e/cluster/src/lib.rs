//! End-to-end tests of `parcae-host run` with real worker processes live in
//! `tests/` (apart from the sandbox tests, which must not need libtorch); this
//! library holds what they share: building the binaries, the test profile,
//! running the host, and comparing a run's final checkpoint with an
//! uninterrupted run over the same samples; starting `parcae-host serve` and posting to it.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use parcae_cluster::{Layout, ModelSpec, Slot};
use parcae_store::Store;
use parcae_worker::local::train_local;
use parcae_worker::tch::Device;
use parcae_worker::{LayerState, StageTrainer, load_checkpoint, load_checkpoint_from};

/// `target/<profile>/` of the running test binary (`target/<profile>/deps/<test>`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// The host and worker binaries, brought up to date (`cargo test -p parcae-e2e-cluster`
/// alone does not build other packages' binaries; when they are current this
/// is a no-op).
pub fn binaries() -> (PathBuf, PathBuf) {
    let dir = target_dir();
    let release = dir.file_name().is_some_and(|n| n == "release");
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo.args(["build", "--quiet", "-p", "parcae-host", "-p", "parcae-worker"]);
    parcae_wasm_build::without_package_vars(&mut cargo);
    if release {
        cargo.arg("--release");
    }
    let status = cargo.status().expect("running cargo build");
    assert!(status.success(), "building parcae-host and parcae-worker failed");
    (dir.join("parcae-host"), dir.join("parcae-worker"))
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("parcae-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating the scratch directory");
    dir
}

/// Throughputs chosen so the throughput-optimal policy picks, for N workers:
/// 2 -> (1,2), 3 -> (1,3), 4 or 5 -> (2,2), 6 -> (3,2).
pub fn test_profile(dir: &Path) -> PathBuf {
    let example = include_str!("../../../data/profiles/example-small.json");
    let mut profile: serde_json::Value = serde_json::from_str(example).expect("example profile is JSON");
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
    std::fs::write(&path, serde_json::to_vec_pretty(&profile).expect("profile serialises"))
        .expect("writing the test profile");
    path
}

/// Runs `parcae-host run` with the reactive policy and the test profile on
/// `trace`, plus `extra` arguments; returns its event log (`events.json`).
pub fn run_host(dir: &Path, trace: &Path, extra: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let (host, worker) = binaries();
    let profile = test_profile(dir);
    let run_dir = dir.join("run");
    let output = Command::new(&host)
        .arg("run")
        .args(["--worker-bin", worker.to_str().expect("utf-8 path")])
        .args(["--trace", trace.to_str().expect("utf-8 path")])
        .args(["--profile", profile.to_str().expect("utf-8 path")])
        .args(["--policy", "builtin:reactive"])
        .args(["--run-dir", run_dir.to_str().expect("utf-8 path")])
        .args(extra)
        .envs(env.iter().copied())
        .output()
        .expect("running parcae-host");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "parcae-host run failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    println!("{stdout}");
    let log = std::fs::read(run_dir.join("events.json")).expect("reading events.json");
    serde_json::from_slice(&log).expect("events.json is JSON")
}

/// Loads the run's last checkpoint (a local directory; it must hold every layer at `steps`)
/// and returns the largest parameter difference from one worker training the same samples
/// uninterrupted for `steps` steps.
pub fn max_diff_from_uninterrupted(summary: &serde_json::Value, steps: u64) -> f32 {
    let spec = ModelSpec::default();
    let root = PathBuf::from(summary["last_checkpoint"].as_str().expect("a final checkpoint"));
    let mut saved = Vec::new();
    for entry in
        std::fs::read_dir(&root).expect("reading the checkpoint").flatten().filter(|e| e.path().is_dir())
    {
        let checkpoint = load_checkpoint(&entry.path(), Some(&spec)).expect("loading a checkpoint stage");
        assert_eq!(checkpoint.step, steps);
        saved.extend(checkpoint.layers);
    }
    max_diff(saved, steps)
}

/// [`max_diff_from_uninterrupted`] for a checkpoint in a store (S3, ...): `prefix` is the
/// checkpoint's key prefix there (`checkpoints/step-00000042`).
pub fn max_diff_from_uninterrupted_in(store: &Store, prefix: &str, steps: u64) -> f32 {
    let spec = ModelSpec::default();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let saved = runtime.block_on(async {
        let keys = store.list(prefix).await.expect("listing the checkpoint");
        let stages: BTreeSet<String> =
            keys.iter().filter_map(|k| k.strip_suffix("/manifest.txt")).map(String::from).collect();
        let mut saved = Vec::new();
        for stage in stages {
            let checkpoint = load_checkpoint_from(store, &stage, Some(&spec)).await.expect("loading a stage");
            assert_eq!(checkpoint.step, steps);
            saved.extend(checkpoint.layers);
        }
        saved
    });
    max_diff(saved, steps)
}

/// The largest difference between `saved` (every layer once) and the same model trained
/// uninterrupted on one worker for `steps` steps.
fn max_diff(mut saved: Vec<LayerState>, steps: u64) -> f32 {
    let spec = ModelSpec::default();
    saved.sort_by_key(|l| l.layer);
    assert_eq!(saved.iter().map(|l| l.layer).collect::<Vec<_>>(), (0..spec.num_layers()).collect::<Vec<_>>());
    let layout = Layout::new(&spec, 1, 1).expect("a (1,1) layout");
    let trainer = StageTrainer::for_slot(spec.clone(), &layout, Slot { replica: 0, stage: 0 }, Device::Cpu)
        .expect("a reference trainer");
    let reference = train_local(&layout, vec![trainer], steps).expect("the uninterrupted run");
    let expected = reference.trainers[0].export_all().expect("exporting the reference");
    saved.iter().zip(&expected).map(|(a, b)| a.max_abs_diff(b)).fold(0.0f32, f32::max)
}

/// A minimal HTTP/1.1 POST (the tests need no client library): status and body.
pub fn post(addr: SocketAddr, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

/// Starts `parcae-host serve` (HTTP on a free port, its report in `DIR/report.json`, its
/// workers under `DIR/serve`) with `extra` arguments, and waits for the line that gives
/// its HTTP address. Returns the process, the address and its output so far (kept up to
/// date by reader threads).
pub fn start_serve(dir: &Path, extra: &[&str]) -> (Child, SocketAddr, Arc<Mutex<String>>) {
    let (host, worker) = binaries();
    let mut child = Command::new(&host)
        .arg("serve")
        .args(["--worker-bin", worker.to_str().unwrap()])
        .args(["--http", "127.0.0.1:0"])
        .args(["--run-dir", dir.join("serve").to_str().unwrap()])
        .args(["--json", dir.join("report.json").to_str().unwrap()])
        .args(["--drain-seconds", "20"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting parcae-host serve");
    let stdout = child.stdout.take().unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let log = log.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("http://").nth(1) {
                    let addr = rest.split('/').next().unwrap_or_default().to_string();
                    let _ = tx.send(addr);
                }
                log.lock().unwrap().push_str(&(line + "\n"));
            }
        });
    }
    let stderr = child.stderr.take().unwrap();
    {
        let log = log.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                log.lock().unwrap().push_str(&(line + "\n"));
            }
        });
    }
    let addr = rx.recv_timeout(Duration::from_secs(120)).expect("the server printed its address");
    (child, addr.parse().expect("an address"), log)
}
