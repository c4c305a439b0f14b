//! A stage's checkpoint written straight to the checkpoint store and read back: a local
//! directory and a real S3-compatible server (moto's server mode, started here). An upload
//! cut off half-way (the writing instance reclaimed mid-write) leaves no manifest, so the
//! stage never looks saved, and reading it fails with the location named.

use std::time::Duration;

use parcae_cluster::ModelSpec;
use parcae_store::moto::{MotoServer, StallingProxy};
use parcae_store::{Store, StoreSpec};
use parcae_worker::{LayerState, load_checkpoint, load_checkpoint_from, save_checkpoint_to};

/// Layers 0..3 of the default model at step 7, with state that differs from the seed's.
fn layers(spec: &ModelSpec) -> Vec<LayerState> {
    (0..3)
        .map(|layer| {
            let mut state = LayerState::initial(spec, layer).unwrap();
            state.step = 7;
            state.exp_avg[0].data[0] = 0.5 + layer as f32;
            state
        })
        .collect()
}

fn s3(endpoint: &str, moto: &MotoServer) -> Store {
    let spec = StoreSpec { url: "s3://checkpoints/run".into(), endpoint: Some(endpoint.into()) };
    let env: Vec<(&str, String)> = moto.env().iter().map(|(k, v)| (*k, v.clone())).collect();
    Store::open_with_env(&spec, &env).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_round_trips_through_a_directory_and_through_s3() {
    let spec = ModelSpec::default();
    let saved = layers(&spec);
    let dir = std::env::temp_dir().join(format!("parcae-ckpt-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let local = Store::open(&StoreSpec::local(&dir)).unwrap();
    let moto = MotoServer::start(&["checkpoints"]).expect("moto");
    let remote = s3(&moto.endpoint, &moto);
    for store in [&local, &remote] {
        let bytes = save_checkpoint_to(store, "checkpoints/step-00000007/stage-00", 7, spec.seed, &saved)
            .await
            .unwrap();
        let expected: u64 = saved.iter().map(|l| l.to_bytes().len() as u64).sum();
        assert!(bytes > expected, "layers plus the manifest: {bytes} vs {expected}");
        let loaded =
            load_checkpoint_from(store, "checkpoints/step-00000007/stage-00", Some(&spec)).await.unwrap();
        assert_eq!((loaded.step, loaded.layers), (7, saved.clone()));
    }
    // A local store writes what the directory reader reads.
    let from_dir = load_checkpoint(&dir.join("checkpoints/step-00000007/stage-00"), Some(&spec)).unwrap();
    assert_eq!(from_dir.layers, saved);
    // A layer at another step is refused before anything is written.
    let mut stale = saved.clone();
    stale[1].step = 6;
    assert!(
        save_checkpoint_to(&remote, "checkpoints/step-00000008/stage-00", 7, spec.seed, &stale)
            .await
            .is_err()
    );
    assert!(remote.list("checkpoints/step-00000008").await.unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_cut_off_half_way_leaves_no_usable_looking_stage() {
    let spec = ModelSpec::default();
    let saved = layers(&spec);
    let moto = MotoServer::start(&["checkpoints"]).expect("moto");
    let direct = s3(&moto.endpoint, &moto);
    // The first layer goes through whole; the connection stalls inside the second one.
    let first = saved[0].to_bytes().len() as u64;
    let budget = first + 4096 + saved[1].to_bytes().len() as u64 / 2;
    let proxy = StallingProxy::start(moto.endpoint.trim_start_matches("http://"), budget).await.unwrap();
    let through_proxy = s3(&proxy.endpoint, &moto);
    let prefix = "checkpoints/step-00000007/stage-01";
    let write = save_checkpoint_to(&through_proxy, prefix, 7, spec.seed, &saved);
    let finished = tokio::time::timeout(Duration::from_secs(20), async {
        tokio::select! {
            result = write => Some(result),
            _ = async {
                while proxy.forwarded() < budget {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            } => None, // the writer dies here
        }
    })
    .await
    .expect("the proxy never forwarded its budget");
    assert!(finished.is_none(), "the write finished through a stalled connection: {finished:?}");
    let objects = direct.list(prefix).await.unwrap();
    assert!(
        objects.iter().all(|k| !k.ends_with("manifest.txt")),
        "a manifest after a cut-off write: {objects:?}"
    );
    assert!(objects.len() < saved.len(), "every layer arrived: {objects:?}");
    let err = load_checkpoint_from(&direct, prefix, Some(&spec)).await.unwrap_err().to_string();
    assert!(err.contains("s3://checkpoints/run/checkpoints/step-00000007/stage-01/manifest.txt"), "{err}");
    // Written again in full, the same stage is whole.
    save_checkpoint_to(&direct, prefix, 7, spec.seed, &saved).await.unwrap();
    assert_eq!(load_checkpoint_from(&direct, prefix, Some(&spec)).await.unwrap().layers, saved);
}
