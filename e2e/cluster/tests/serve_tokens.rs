//! `parcae-host serve` end to end: real worker processes on loopback serve the built-in
//! GPT over HTTP while a trace replays allocations, a notice and an unannounced kill, and a
//! script moves the configuration through every kind of reparallelization (dp, tp and pp
//! changes, tp up to 4). Clients keep requests in flight the whole time, so requests are
//! interrupted mid-generation by every change. With greedy decoding, every completed
//! request's tokens must be exactly those of a single-process uninterrupted generation of
//! its prompt, and every accepted request must complete or get an explicit error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use parcae_cluster::ModelSpec;
use parcae_cluster::serving::Sampling;
use parcae_e2e_cluster::{post, scratch, start_serve};
use parcae_worker::model::init_layer;
use parcae_worker::serving::reference_generate;

/// Seconds of wall time per trace interval (60 s of trace).
const WALL_PER_INTERVAL: f64 = 3.0;

/// Node 2 gets a notice at 4.25 intervals, node 4 is killed without one at 5.25; nodes 5
/// and 6 arrive as spares so every configuration still fits; node 7's arrival at 8
/// intervals makes the replay 9 intervals long.
const TRACE: &str = "t_ms,op,node
0,add,node1
0,add,node2
0,add,node3
0,add,node4
210000,add,node5
255000,remove,node2
300000,add,node6
315000,remove,node4
480000,add,node7
";

/// One configuration per interval: dp change, tp change, pp change, then the notice and
/// the kill under dp1 x tp2 x pp2, then dp+pp change and tp = 4.
const SCRIPT: &str = r#"[
  {"dp": 1, "tp": 1, "pp": 1, "batch": 4},
  {"dp": 2, "tp": 1, "pp": 1, "batch": 4},
  {"dp": 1, "tp": 2, "pp": 1, "batch": 4},
  {"dp": 1, "tp": 2, "pp": 2, "batch": 4},
  {"dp": 1, "tp": 2, "pp": 2, "batch": 4},
  {"dp": 1, "tp": 2, "pp": 2, "batch": 4},
  {"dp": 2, "tp": 1, "pp": 2, "batch": 4},
  {"dp": 1, "tp": 4, "pp": 1, "batch": 4}
]"#;

/// Clients sending concurrently: as many as the slots of dp2 x batch 4 (twice dp1's), so a
/// batch that drains finds the next one waiting and most changes find requests in flight.
const CLIENTS: u64 = 8;

#[derive(Debug, Clone)]
struct Done {
    prompt: Vec<i64>,
    max_tokens: usize,
    tokens: Vec<i64>,
}

#[test]
fn greedy_tokens_survive_every_reparallelization_notice_and_kill() {
    let dir = scratch("serve-tokens");
    std::fs::write(dir.join("trace.csv"), TRACE).unwrap();
    std::fs::write(dir.join("script.json"), SCRIPT).unwrap();
    let (mut child, addr, log) = start_serve(
        &dir,
        &[
            "--trace",
            dir.join("trace.csv").to_str().unwrap(),
            "--script",
            dir.join("script.json").to_str().unwrap(),
            "--wall-seconds-per-interval",
            &WALL_PER_INTERVAL.to_string(),
            "--unannounced",
            "node4",
        ],
    );
    let spec = ModelSpec::default();
    let stop = Arc::new(AtomicBool::new(false));
    let done: Arc<Mutex<Vec<Done>>> = Arc::default();
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (stop, done, errors) = (stop.clone(), done.clone(), errors.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    // Prompts of 3..8 tokens, 18..24 new tokens: long enough to be cut mid-way.
                    let len = 3 + ((c * 7 + i * 3) % 6) as usize;
                    let prompt: Vec<i64> =
                        (0..len).map(|k| ((c * 31 + i * 17 + k as u64 * 5) % 64) as i64).collect();
                    let max_tokens = (18 + (i % 7) as usize).min(32 - len);
                    let body = serde_json::json!({"prompt": prompt, "max_tokens": max_tokens}).to_string();
                    match post(addr, "/v1/completions", &body) {
                        Ok((200, body)) => {
                            let v: serde_json::Value = serde_json::from_str(&body).expect("JSON body");
                            let tokens = v["choices"][0]["token_ids"]
                                .as_array()
                                .expect("token_ids")
                                .iter()
                                .map(|t| t.as_i64().unwrap())
                                .collect();
                            done.lock().unwrap().push(Done { prompt, max_tokens, tokens });
                        }
                        Ok((503, _)) => std::thread::sleep(Duration::from_millis(200)),
                        Ok((status, body)) => errors.lock().unwrap().push(format!("{status}: {body}")),
                        Err(e) if stop.load(Ordering::Relaxed) => {
                            let _ = e;
                        }
                        Err(e) => {
                            errors.lock().unwrap().push(format!("transport: {e}"));
                            std::thread::sleep(Duration::from_millis(200));
                        }
                    }
                }
            })
        })
        .collect();
    // The replay lasts 9 intervals; stop sending a little before its end.
    let started = Instant::now();
    let replay = Duration::from_secs_f64(9.0 * WALL_PER_INTERVAL);
    while started.elapsed() < replay.saturating_sub(Duration::from_secs(2)) {
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let status = child.wait().expect("the server exits at the end of the replay");
    let log = log.lock().unwrap().clone();
    assert!(status.success(), "parcae-host serve failed:\n{log}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let engine = &report[0]["engine"];
    println!(
        "{}",
        serde_json::to_string_pretty(engine).unwrap().lines().take(12).collect::<Vec<_>>().join("\n")
    );

    // Every completed request's tokens are the uninterrupted single-process generation's.
    let params: Vec<_> = (0..spec.num_layers()).map(|l| init_layer(&spec, l)).collect();
    let done = done.lock().unwrap().clone();
    assert!(done.len() >= 10, "too few requests completed ({}):\n{log}", done.len());
    for d in &done {
        let expected = reference_generate(&spec, &params, &d.prompt, d.max_tokens, Sampling::Greedy).unwrap();
        assert_eq!(
            d.tokens, expected,
            "prompt {:?}: tokens differ from the uninterrupted generation",
            d.prompt
        );
    }
    let errors = errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "requests failed: {errors:?}\n{log}");

    // Nothing lost: accepted = completed + failed (explicit errors) + cancelled (the client
    // left), and every kind of
    // change happened with requests in flight.
    let n = |field: &str| engine[field].as_u64().unwrap_or_else(|| panic!("engine.{field}: {engine}"));
    assert_eq!(n("accepted"), n("completed") + n("failed") + n("cancelled"), "{engine}");
    assert!(n("migrated_requests") > 0, "no request migrated its KV cache: {engine}");
    assert!(n("recomputed_requests") > 0, "the unannounced kill made no request recompute: {engine}");
    let causes = &engine["reconfigurations"];
    assert!(causes["notice"].as_u64().unwrap_or(0) >= 1, "no reconfiguration on the notice: {causes}");
    assert!(causes["loss"].as_u64().unwrap_or(0) >= 1, "no reconfiguration on the kill: {causes}");
    let configurations = engine["configurations"].as_array().unwrap();
    for c in configurations {
        println!(
            "{:>7.2} s {:<8} {:<12} migrated {} kept {} interrupted {}",
            c["at_s"].as_f64().unwrap(),
            c["cause"].as_str().unwrap(),
            c["shape"].as_str().unwrap(),
            c["migrated"],
            c["kept"],
            c["interrupted"]
        );
    }
    let shapes: Vec<&str> = configurations.iter().map(|c| c["shape"].as_str().unwrap()).collect();
    for shape in ["dp1xtp1xpp1", "dp2xtp1xpp1", "dp1xtp2xpp1", "dp1xtp2xpp2", "dp2xtp1xpp2", "dp1xtp4xpp1"] {
        assert!(shapes.contains(&shape), "{shape} never served: {shapes:?}");
    }
    // Requests were cut mid-generation and resumed at their next token elsewhere in the
    // tp, pp and dp+pp changes alike: no replica keeps its workers' shards across a tp or
    // pp change, so each such change that caught requests with a cache moved them. A
    // replica takes a new batch only once its last one drained, so a change that lands in
    // that gap (one iteration) catches nothing; a quorum of 3 of the 4 allows for one.
    // (The dp growth to dp2 keeps its batch in place, so it is not among them.)
    let field = |c: &serde_json::Value, f: &str| c[f].as_u64().unwrap();
    let reshards = ["dp1xtp2xpp1", "dp1xtp2xpp2", "dp2xtp1xpp2", "dp1xtp4xpp1"];
    let moved_into = |shape: &str| {
        configurations
            .iter()
            .filter(|c| c["shape"] == shape && c["cause"] == "interval")
            .map(|c| field(c, "migrated"))
            .sum::<u64>()
    };
    let with_migration = reshards.iter().filter(|s| moved_into(s) > 0).count();
    assert!(with_migration >= 3, "too few changes moved requests in flight: {configurations:?}");
    // The notice and the kill caught requests in flight too (the notice's migration starts
    // an iteration early, so requests with caches move; the kill's failed iteration counts
    // as its loss).
    let caught: u64 = configurations
        .iter()
        .filter(|c| c["cause"] == "notice" || c["cause"] == "loss")
        .map(|c| field(c, "migrated") + field(c, "kept") + field(c, "interrupted"))
        .sum();
    assert!(caught > 0, "the notice and the kill found no request in flight: {configurations:?}");
    println!("{} requests, all identical to the uninterrupted generation", done.len());
    let _ = std::fs::remove_dir_all(&dir);
}
