//! The preemption-notice watcher against a local HTTP server that speaks each cloud's
//! metadata protocol (`parcae_worker::cloud::emulator`): the paths, the required headers,
//! AWS's session tokens, and the bodies each cloud documents. The emulator refuses what the
//! real services refuse (checked first), so a client that left out a header or the token
//! would fail these tests.

use std::time::{Duration, SystemTime};

use parcae_worker::cloud::emulator::{DEFAULT_VM_NAME, EmulatedNotice, MetadataEmulator};
use parcae_worker::cloud::{CloudKind, MetadataClient, PreemptionNotice, detect, watch};

/// Whole seconds: the clouds' timestamps carry no fraction.
fn secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()
}

async fn status(request: reqwest::RequestBuilder) -> u16 {
    request.send().await.expect("the emulator answers").status().as_u16()
}

#[tokio::test]
async fn the_emulators_refuse_what_the_real_services_refuse() {
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let aws = MetadataEmulator::start(CloudKind::Aws).unwrap();
    let action = format!("{}/latest/meta-data/spot/instance-action", aws.endpoint);
    assert_eq!(status(http.get(&action)).await, 401, "IMDSv2: no token, no answer");
    assert_eq!(status(http.put(format!("{}/latest/api/token", aws.endpoint))).await, 400, "no TTL");
    let token = http
        .put(format!("{}/latest/api/token", aws.endpoint))
        .header("X-aws-ec2-metadata-token-ttl-seconds", "60")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(status(http.get(&action).header("X-aws-ec2-metadata-token", "forged")).await, 401);
    assert_eq!(
        status(http.get(&action).header("X-aws-ec2-metadata-token", &token)).await,
        404,
        "no notice yet"
    );

    let gcp = MetadataEmulator::start(CloudKind::Gcp).unwrap();
    let preempted = format!("{}/computeMetadata/v1/instance/preempted", gcp.endpoint);
    assert_eq!(status(http.get(&preempted)).await, 403, "GCP: Metadata-Flavor is required");
    assert_eq!(status(http.get(&preempted).header("Metadata-Flavor", "Google")).await, 200);

    let azure = MetadataEmulator::start(CloudKind::Azure).unwrap();
    let events = format!("{}/metadata/scheduledevents?api-version=2020-07-01", azure.endpoint);
    assert_eq!(status(http.get(&events)).await, 400, "Azure: Metadata: true is required");
    let no_version = format!("{}/metadata/scheduledevents", azure.endpoint);
    assert_eq!(
        status(http.get(&no_version).header("Metadata", "true")).await,
        400,
        "api-version is required"
    );
    assert_eq!(status(http.get(&events).header("Metadata", "true")).await, 200);
}

#[tokio::test]
async fn aws_a_spot_interruption_notice_is_read_with_an_imdsv2_token() {
    let aws = MetadataEmulator::start(CloudKind::Aws).unwrap();
    let mut client = MetadataClient::new(CloudKind::Aws, Some(&aws.endpoint));
    assert_eq!(client.poll().await.unwrap(), None, "404: no notice");
    let asked: Vec<(String, String, u16)> =
        aws.requests().into_iter().map(|r| (r.method, r.uri, r.status)).collect();
    assert_eq!(
        asked,
        vec![
            ("PUT".into(), "/latest/api/token".into(), 200),
            ("GET".into(), "/latest/meta-data/spot/instance-action".into(), 404),
        ]
    );
    let time = SystemTime::now() + Duration::from_secs(120);
    aws.announce(EmulatedNotice::Aws { action: "terminate".into(), time });
    let notice = client.poll().await.unwrap().expect("the notice");
    assert_eq!((notice.cloud, notice.action.as_str()), (CloudKind::Aws, "terminate"));
    assert_eq!(notice.deadline.map(secs), Some(secs(time)));
    let grace = notice.grace_at(SystemTime::now());
    assert!(grace > Duration::from_secs(110) && grace <= Duration::from_secs(120), "{grace:?}");
    assert!(notice.detail.contains("\"action\":\"terminate\""), "{}", notice.detail);
    // The token is reused, not asked for again.
    assert_eq!(aws.requests().iter().filter(|r| r.method == "PUT").count(), 1);

    // A token the service stopped accepting is renewed, within the same poll.
    aws.expire_tokens();
    assert!(client.poll().await.unwrap().is_some());
    let last: Vec<u16> = aws.requests().iter().rev().take(3).map(|r| r.status).collect();
    assert_eq!(last, vec![200, 200, 401], "refused, new token, answered");
}

#[tokio::test]
async fn gcp_preemption_and_terminating_maintenance_are_notices_a_live_migration_is_not() {
    let gcp = MetadataEmulator::start(CloudKind::Gcp).unwrap();
    let mut client = MetadataClient::new(CloudKind::Gcp, Some(&gcp.endpoint));
    assert_eq!(client.poll().await.unwrap(), None);
    gcp.announce(EmulatedNotice::GcpMaintenance("MIGRATE_ON_HOST_MAINTENANCE".into()));
    assert_eq!(client.poll().await.unwrap(), None, "a live migration keeps the VM");
    gcp.announce(EmulatedNotice::GcpPreempted);
    let first = client.poll().await.unwrap().expect("preempted");
    assert_eq!((first.cloud, first.action.as_str()), (CloudKind::Gcp, "preempted"));
    let grace = first.grace_at(SystemTime::now());
    assert!(grace > Duration::from_secs(25) && grace <= Duration::from_secs(30), "{grace:?}");
    // Asked again, the deadline stays where the first sighting put it.
    let again = client.poll().await.unwrap().expect("still preempted");
    assert!(first.same_as(&again), "{first:?} vs {again:?}");
    gcp.announce(EmulatedNotice::GcpMaintenance("TERMINATE_ON_HOST_MAINTENANCE".into()));
    let maintenance = client.poll().await.unwrap().expect("maintenance");
    assert_eq!(maintenance.action, "TERMINATE_ON_HOST_MAINTENANCE");
    assert!(gcp.requests().iter().all(|r| r.status == 200), "{:?}", gcp.requests());
}

#[tokio::test]
async fn azure_a_preempt_event_counts_only_for_the_vm_it_names() {
    let azure = MetadataEmulator::start(CloudKind::Azure).unwrap();
    let mut client = MetadataClient::new(CloudKind::Azure, Some(&azure.endpoint));
    assert_eq!(client.poll().await.unwrap(), None);
    let not_before = SystemTime::now() + Duration::from_secs(30);
    azure.announce(EmulatedNotice::Azure {
        event_type: "Preempt".into(),
        resources: vec!["another-vm".into()],
        not_before,
    });
    assert_eq!(client.poll().await.unwrap(), None, "another VM's eviction");
    azure.announce(EmulatedNotice::Azure {
        event_type: "Reboot".into(),
        resources: vec![DEFAULT_VM_NAME.into()],
        not_before,
    });
    assert_eq!(client.poll().await.unwrap(), None, "a reboot is not a preemption");
    azure.announce(EmulatedNotice::Azure {
        event_type: "Preempt".into(),
        resources: vec!["another-vm".into(), DEFAULT_VM_NAME.into()],
        not_before,
    });
    let notice = client.poll().await.unwrap().expect("our eviction");
    assert_eq!((notice.cloud, notice.action.as_str()), (CloudKind::Azure, "Preempt"));
    assert_eq!(notice.deadline.map(secs), Some(secs(not_before)));
    let uris: Vec<String> = azure.requests().into_iter().map(|r| r.uri).collect();
    assert!(uris.contains(&"/metadata/instance/compute/name?api-version=2021-02-01&format=text".to_string()));
    assert!(uris.contains(&"/metadata/scheduledevents?api-version=2020-07-01".to_string()));
}

#[tokio::test]
async fn auto_detection_names_the_cloud_whose_protocol_answers() {
    for cloud in CloudKind::ALL {
        let emulator = MetadataEmulator::start(cloud).unwrap();
        assert_eq!(detect(Some(&emulator.endpoint)).await, Some(cloud), "{cloud}");
    }
    // Nothing listening: no cloud.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    assert_eq!(detect(Some(&format!("http://127.0.0.1:{port}"))).await, None);
}

#[tokio::test]
async fn the_watcher_reports_a_notice_once_and_again_when_the_cloud_changes_it() {
    let aws = MetadataEmulator::start(CloudKind::Aws).unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<PreemptionNotice>();
    let client = MetadataClient::new(CloudKind::Aws, Some(&aws.endpoint));
    let watcher = tokio::spawn(watch(client, Duration::from_millis(50), move |n| {
        let _ = tx.send(n);
    }));
    let time = SystemTime::now() + Duration::from_secs(120);
    aws.announce(EmulatedNotice::Aws { action: "stop".into(), time });
    let first = next(&mut rx).await;
    assert_eq!(first.action, "stop");
    // Polled many more times: no repeat.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(rx.try_recv().is_err(), "the same notice was reported twice");
    aws.announce(EmulatedNotice::Aws { action: "terminate".into(), time: time - Duration::from_secs(60) });
    let changed = next(&mut rx).await;
    assert_eq!(changed.action, "terminate");
    assert_eq!(changed.deadline.map(secs), Some(secs(time) - 60));
    watcher.abort();
}

async fn next(rx: &mut tokio::sync::mpsc::UnboundedReceiver<PreemptionNotice>) -> PreemptionNotice {
    tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("a notice in time")
        .expect("the watcher runs")
}
