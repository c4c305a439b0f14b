//! The S3 backend against a real S3-compatible server (moto's server mode, from the
//! project's venv): objects round-trip, large ones go up in parts, and an upload cut off
//! half-way leaves no object behind, neither a small one (one `PUT`) nor a large one
//! (multipart).

use std::time::Duration;

use bytes::Bytes;
use parcae_store::moto::{MotoServer, StallingProxy};
use parcae_store::{MULTIPART_THRESHOLD, Store, StoreError, StoreSpec};

fn open(endpoint: &str, moto: &MotoServer) -> Store {
    let spec = StoreSpec { url: "s3://parcae-test/runs/one".into(), endpoint: Some(endpoint.into()) };
    Store::open_with_env(&spec, &moto.env().iter().map(|(k, v)| (*k, v.clone())).collect::<Vec<_>>())
        .expect("opening the S3 store")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_round_trip_through_an_s3_compatible_server() {
    let moto = MotoServer::start(&["parcae-test"]).expect("moto");
    let store = open(&moto.endpoint, &moto);
    store.put("a/small", Bytes::from_static(b"hello")).await.unwrap();
    let large: Vec<u8> = (0..MULTIPART_THRESHOLD + 12345).map(|i| (i % 251) as u8).collect();
    store.put("a/large", Bytes::from(large.clone())).await.unwrap();
    assert_eq!(store.get("a/small").await.unwrap(), Bytes::from_static(b"hello"));
    assert_eq!(store.get("a/large").await.unwrap(), Bytes::from(large));
    assert_eq!(store.list("a").await.unwrap(), vec!["a/large", "a/small"]);
    assert!(matches!(store.get("a/none").await, Err(StoreError::NotFound { .. })));
    assert_eq!(store.location("a/small"), "s3://parcae-test/runs/one/a/small");
    assert_eq!(store.delete_prefix("a").await.unwrap(), 2);
    assert!(store.list("").await.unwrap().is_empty());
    // A bucket that does not exist: the error names the object.
    let missing = Store::open_with_env(
        &StoreSpec { url: "s3://no-such-bucket/x".into(), endpoint: Some(moto.endpoint.clone()) },
        &moto.env().iter().map(|(k, v)| (*k, v.clone())).collect::<Vec<_>>(),
    )
    .unwrap();
    let err = missing.put("k", Bytes::from_static(b"1")).await.unwrap_err().to_string();
    assert!(err.contains("s3://no-such-bucket/x/k"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_cut_off_half_way_leaves_no_object() {
    let moto = MotoServer::start(&["parcae-test"]).expect("moto");
    let target = moto.endpoint.trim_start_matches("http://").to_string();
    for size in [4 << 20, MULTIPART_THRESHOLD + (4 << 20)] {
        // Forward 1 MiB of the request, then stall; the writer dies (its future is dropped).
        let proxy = StallingProxy::start(&target, 1 << 20).await.unwrap();
        let through_proxy = open(&proxy.endpoint, &moto);
        let key = format!("cut/{size}");
        let upload = through_proxy.put(&key, Bytes::from(vec![1u8; size]));
        let outcome = tokio::time::timeout(Duration::from_secs(20), async {
            tokio::select! {
                result = upload => Some(result),
                _ = async {
                    while proxy.forwarded() < (1 << 20) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    // Give the server time to see the partial body.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                } => None,
            }
        })
        .await
        .expect("the proxy never forwarded its budget");
        assert!(
            outcome.is_none(),
            "the upload of {size} bytes finished through a stalled proxy: {outcome:?}"
        );
        let direct = open(&moto.endpoint, &moto);
        assert!(!direct.exists(&key).await.unwrap(), "a cut-off upload of {size} bytes left an object");
        assert!(direct.list("cut").await.unwrap().is_empty());
    }
}
