//! A model trained here can be served: `parcae-host run` trains the built-in GPT for ten
//! steps and checkpoints it; `parcae-host serve --checkpoint RUN_DIR` serves that checkpoint
//! on a tensor-parallel pair of workers, and its greedy tokens are exactly a single-process
//! generation's with the checkpoint's weights (and not the untrained model's).

use std::path::Path;
use std::time::Duration;

use parcae_cluster::ModelSpec;
use parcae_cluster::job::JobCheckpoint;
use parcae_cluster::serving::Sampling;
use parcae_e2e_cluster::{post, run_host, scratch, start_serve};
use parcae_store::{Store, StoreSpec};
use parcae_worker::model::init_layer;
use parcae_worker::serving::reference_generate;
use parcae_worker::{TensorData, load_checkpoint_from};

const TRAIN_TRACE: &str = "t_ms,op,node
0,add,n1
0,add,n2
";

/// Two workers for two intervals, serving dp1 x tp2 x pp1.
const SERVE_TRACE: &str = "t_ms,op,node
0,add,s1
0,add,s2
60000,add,s3
";

/// Every layer's parameters in the newest complete checkpoint under `run_dir`.
fn checkpoint_params(run_dir: &Path, spec: &ModelSpec) -> (u64, Vec<Vec<TensorData>>) {
    let pointer = std::fs::read_to_string(run_dir.join("checkpoints/LATEST")).expect("a LATEST pointer");
    let latest: JobCheckpoint = serde_json::from_str(&pointer).expect("a checkpoint record");
    let url = std::path::absolute(run_dir).unwrap().display().to_string();
    let store = Store::open(&StoreSpec { url, endpoint: None }).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut layers: Vec<Option<Vec<TensorData>>> = vec![None; spec.num_layers()];
    for stage in 0..latest.stages.len() {
        let prefix = JobCheckpoint::stage_prefix(&latest.prefix, stage);
        let checkpoint = rt.block_on(load_checkpoint_from(&store, &prefix, Some(spec))).unwrap();
        for state in checkpoint.layers {
            layers[state.layer] = Some(state.params);
        }
    }
    (latest.step, layers.into_iter().map(|l| l.expect("every layer in the checkpoint")).collect())
}

#[test]
fn a_checkpoint_written_by_run_is_served_token_for_token() {
    let dir = scratch("serve-checkpoint");
    let trace = dir.join("train.csv");
    std::fs::write(&trace, TRAIN_TRACE).unwrap();
    run_host(&dir, &trace, &["--max-steps", "10", "--checkpoint-every", "5"], &[]);
    let spec = ModelSpec::default();
    let (step, trained) = checkpoint_params(&dir.join("run"), &spec);
    assert_eq!(step, 10);

    std::fs::write(dir.join("serve.csv"), SERVE_TRACE).unwrap();
    std::fs::write(dir.join("script.json"), r#"[{"dp": 1, "tp": 2, "pp": 1, "batch": 4}]"#).unwrap();
    let (mut child, addr, log) = start_serve(
        &dir,
        &[
            "--checkpoint",
            dir.join("run").to_str().unwrap(),
            "--trace",
            dir.join("serve.csv").to_str().unwrap(),
            "--script",
            dir.join("script.json").to_str().unwrap(),
            "--wall-seconds-per-interval",
            "4",
        ],
    );
    let fresh: Vec<_> = (0..spec.num_layers()).map(|l| init_layer(&spec, l)).collect();
    let mut differs = false;
    for prompt in [vec![1i64, 2, 3], vec![10, 20, 30, 40], vec![63, 0, 7]] {
        let body = serde_json::json!({"prompt": prompt, "max_tokens": 12}).to_string();
        let (status, answer) = loop {
            let (status, answer) = post(addr, "/v1/completions", &body).expect("the server answers");
            if status != 503 {
                break (status, answer);
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        assert_eq!(status, 200, "{answer}\n{}", log.lock().unwrap());
        let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
        let tokens: Vec<i64> =
            v["choices"][0]["token_ids"].as_array().unwrap().iter().map(|t| t.as_i64().unwrap()).collect();
        let expected = reference_generate(&spec, &trained, &prompt, 12, Sampling::Greedy).unwrap();
        assert_eq!(tokens, expected, "prompt {prompt:?}: not the checkpoint's generation");
        differs |= tokens != reference_generate(&spec, &fresh, &prompt, 12, Sampling::Greedy).unwrap();
    }
    assert!(differs, "the served tokens are the untrained model's: was the checkpoint loaded?");
    let status = child.wait().unwrap();
    assert!(status.success(), "{}", log.lock().unwrap());
    let output = log.lock().unwrap().clone();
    assert!(output.contains("serving the checkpoint of step 10"), "{output}");
    let _ = std::fs::remove_dir_all(&dir);
}
