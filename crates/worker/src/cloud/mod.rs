//! Preemption notices from the cloud the worker runs on, read from the instance metadata
//! service the way each cloud documents it:
//!
//! | cloud | request | notice |
//! |---|---|---|
//! | AWS | IMDSv2: `PUT /latest/api/token` (`X-aws-ec2-metadata-token-ttl-seconds`), then `GET /latest/meta-data/spot/instance-action` with `X-aws-ec2-metadata-token` | 404 until a notice exists, then `{"action": "terminate", "time": "2025-01-01T12:02:00Z"}` (2 minutes ahead) |
//! | GCP | `GET /computeMetadata/v1/instance/preempted` and `.../instance/maintenance-event` with `Metadata-Flavor: Google` | `TRUE` (30 s before the stop); `TERMINATE_ON_HOST_MAINTENANCE` |
//! | Azure | Scheduled Events: `GET /metadata/scheduledevents?api-version=2020-07-01` with `Metadata: true` | an event of type `Preempt` (or `Terminate`) naming this VM, `NotBefore` its deadline (at least 30 s ahead) |
//!
//! [`MetadataClient::poll`] asks once; [`watch`] polls until the notice appears and hands
//! each new notice to its caller (the worker forwards it to the host, which re-plans
//! exactly as for a notice of a replayed trace). [`detect`] finds which cloud answers
//! (`--cloud auto`). The metadata services are plain HTTP on a link-local address; an
//! endpoint override points a client at another server ([`emulator`] is one that speaks
//! all three protocols, for tests and for trying this out without a cloud).

pub mod emulator;

use std::time::{Duration, Instant, SystemTime};

use parcae_cluster::protocol::CloudNotice;
use serde::Deserialize;
use tracing::{debug, info, warn};

/// The clouds whose notices a worker can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloudKind {
    /// Amazon EC2 spot instances (IMDSv2).
    Aws,
    /// Google Compute Engine spot and preemptible VMs.
    Gcp,
    /// Azure spot VMs (Scheduled Events).
    Azure,
}

impl CloudKind {
    /// Every cloud, in the order [`detect`] tries them.
    pub const ALL: [CloudKind; 3] = [CloudKind::Aws, CloudKind::Gcp, CloudKind::Azure];

    /// Lower-case name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            CloudKind::Aws => "aws",
            CloudKind::Gcp => "gcp",
            CloudKind::Azure => "azure",
        }
    }

    /// Where the metadata service answers on a real instance.
    pub fn default_endpoint(self) -> &'static str {
        match self {
            CloudKind::Aws | CloudKind::Azure => "http://169.254.169.254",
            CloudKind::Gcp => "http://metadata.google.internal",
        }
    }

    /// The notice the cloud documents, used when a notice names no deadline: AWS 2 minutes,
    /// GCP 30 s (preemption), Azure at least 30 s.
    pub fn documented_notice(self) -> Duration {
        match self {
            CloudKind::Aws => Duration::from_secs(120),
            CloudKind::Gcp | CloudKind::Azure => Duration::from_secs(30),
        }
    }
}

impl std::fmt::Display for CloudKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A notice as read from the metadata service.
#[derive(Debug, Clone, PartialEq)]
pub struct PreemptionNotice {
    /// The cloud that announced it.
    pub cloud: CloudKind,
    /// What the cloud will do (AWS `action`, GCP "preempted" or the maintenance event,
    /// Azure `EventType`).
    pub action: String,
    /// When the instance goes away, if the cloud says.
    pub deadline: Option<SystemTime>,
    /// When this client first saw it.
    pub seen: SystemTime,
    /// The response body that carried it.
    pub detail: String,
}

impl PreemptionNotice {
    /// Time left at `now`: until the cloud's deadline, or the documented notice counted
    /// from when it was first seen.
    pub fn grace_at(&self, now: SystemTime) -> Duration {
        let deadline = self.deadline.unwrap_or(self.seen + self.cloud.documented_notice());
        deadline.duration_since(now).unwrap_or(Duration::ZERO)
    }

    /// The notice as the host's protocol carries it.
    pub fn to_report(&self, now: SystemTime) -> CloudNotice {
        CloudNotice {
            cloud: self.cloud.name().to_string(),
            action: self.action.clone(),
            grace_ms: self.grace_at(now).as_millis() as u64,
            seen_unix_ms: unix_ms(self.seen),
            detail: self.detail.clone(),
        }
    }

    /// Whether `other` announces the same thing (a repeat of this notice, not a new one).
    pub fn same_as(&self, other: &PreemptionNotice) -> bool {
        self.cloud == other.cloud && self.action == other.action && self.deadline == other.deadline
    }
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Why a metadata request failed (the watcher logs it and tries again).
#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    /// No answer, or not HTTP.
    #[error("{url}: {source}")]
    Http {
        /// The request's URL.
        url: String,
        /// What went wrong.
        source: reqwest::Error,
    },
    /// An answer the protocol does not allow.
    #[error("{url}: HTTP {status}: {body}")]
    Status {
        /// The request's URL.
        url: String,
        /// Its status code.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// A body that is not what the cloud documents.
    #[error("{url}: unexpected answer `{body}`: {reason}")]
    Malformed {
        /// The request's URL.
        url: String,
        /// The body.
        body: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// IMDSv2 tokens are asked for with this lifetime (the maximum AWS allows).
const AWS_TOKEN_TTL_S: u64 = 21_600;
/// Azure API versions: Scheduled Events (the version its documentation uses), and one for the
/// instance metadata (the VM's own name).
const AZURE_EVENTS_API: &str = "2020-07-01";
const AZURE_INSTANCE_API: &str = "2021-02-01";

/// One cloud's metadata service.
pub struct MetadataClient {
    cloud: CloudKind,
    base: String,
    http: reqwest::Client,
    /// AWS: the session token and when to renew it.
    token: Option<(String, Instant)>,
    /// Azure: this VM's name (events name the VMs they affect).
    vm_name: Option<String>,
    /// GCP: when each notice was first seen (GCP names no deadline).
    first_seen: Option<(String, SystemTime)>,
}

impl MetadataClient {
    /// A client for `cloud`'s metadata service at `endpoint` (None: the real one).
    pub fn new(cloud: CloudKind, endpoint: Option<&str>) -> Self {
        let http = reqwest::Client::builder()
            // The metadata service is link-local: never through a proxy.
            .no_proxy()
            .timeout(Duration::from_secs(2))
            .connect_timeout(Duration::from_secs(1))
            .build()
            .expect("a plain HTTP client always builds");
        MetadataClient {
            cloud,
            base: endpoint.unwrap_or(cloud.default_endpoint()).trim_end_matches('/').to_string(),
            http,
            token: None,
            vm_name: None,
            first_seen: None,
        }
    }

    /// The cloud this client speaks to.
    pub fn cloud(&self) -> CloudKind {
        self.cloud
    }

    /// Asks once whether a notice exists.
    pub async fn poll(&mut self) -> Result<Option<PreemptionNotice>, CloudError> {
        match self.cloud {
            CloudKind::Aws => self.poll_aws().await,
            CloudKind::Gcp => self.poll_gcp().await,
            CloudKind::Azure => self.poll_azure().await,
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder, url: &str) -> Result<(u16, String), CloudError> {
        let response = request.send().await.map_err(|source| CloudError::Http { url: url.into(), source })?;
        let status = response.status().as_u16();
        let body = response.text().await.map_err(|source| CloudError::Http { url: url.into(), source })?;
        Ok((status, body))
    }

    fn unexpected(url: &str, status: u16, body: &str) -> CloudError {
        CloudError::Status { url: url.into(), status, body: body.chars().take(200).collect() }
    }

    /// An IMDSv2 session token, renewed a minute before it expires.
    async fn aws_token(&mut self) -> Result<String, CloudError> {
        if let Some((token, renew)) = &self.token
            && Instant::now() < *renew
        {
            return Ok(token.clone());
        }
        let url = format!("{}/latest/api/token", self.base);
        let request =
            self.http.put(&url).header("X-aws-ec2-metadata-token-ttl-seconds", AWS_TOKEN_TTL_S.to_string());
        let (status, body) = self.send(request, &url).await?;
        if status != 200 || body.trim().is_empty() {
            return Err(Self::unexpected(&url, status, &body));
        }
        let token = body.trim().to_string();
        self.token = Some((token.clone(), Instant::now() + Duration::from_secs(AWS_TOKEN_TTL_S - 60)));
        Ok(token)
    }

    async fn poll_aws(&mut self) -> Result<Option<PreemptionNotice>, CloudError> {
        let url = format!("{}/latest/meta-data/spot/instance-action", self.base);
        // A token the service no longer accepts (401) is renewed once.
        for attempt in 0..2 {
            let token = self.aws_token().await?;
            let request = self.http.get(&url).header("X-aws-ec2-metadata-token", token);
            let (status, body) = self.send(request, &url).await?;
            match status {
                404 => return Ok(None),
                401 if attempt == 0 => {
                    debug!("IMDSv2 token refused; asking for a new one");
                    self.token = None;
                }
                200 => {
                    #[derive(Deserialize)]
                    struct InstanceAction {
                        action: String,
                        time: String,
                    }
                    let malformed = |reason: String| CloudError::Malformed {
                        url: url.clone(),
                        body: body.clone(),
                        reason,
                    };
                    let parsed: InstanceAction =
                        serde_json::from_str(&body).map_err(|e| malformed(e.to_string()))?;
                    let deadline = chrono::DateTime::parse_from_rfc3339(&parsed.time)
                        .map_err(|e| malformed(format!("time `{}`: {e}", parsed.time)))?;
                    return Ok(Some(PreemptionNotice {
                        cloud: CloudKind::Aws,
                        action: parsed.action,
                        deadline: Some(SystemTime::from(deadline)),
                        seen: SystemTime::now(),
                        detail: body,
                    }));
                }
                _ => return Err(Self::unexpected(&url, status, &body)),
            }
        }
        unreachable!("the loop returns on its second attempt")
    }

    async fn gcp_get(&self, path: &str) -> Result<String, CloudError> {
        let url = format!("{}/computeMetadata/v1/{path}", self.base);
        let (status, body) = self.send(self.http.get(&url).header("Metadata-Flavor", "Google"), &url).await?;
        if status != 200 {
            return Err(Self::unexpected(&url, status, &body));
        }
        Ok(body.trim().to_string())
    }

    async fn poll_gcp(&mut self) -> Result<Option<PreemptionNotice>, CloudError> {
        let preempted = self.gcp_get("instance/preempted").await?;
        let action = match preempted.as_str() {
            "TRUE" => Some("preempted".to_string()),
            "FALSE" => {
                // A host maintenance that stops the VM is a notice too; a live migration is not.
                let event = self.gcp_get("instance/maintenance-event").await?;
                match event.as_str() {
                    "TERMINATE_ON_HOST_MAINTENANCE" => Some(event),
                    "NONE" => None,
                    other => {
                        debug!(event = other, "GCP maintenance event that keeps the VM running");
                        None
                    }
                }
            }
            other => {
                let url = format!("{}/computeMetadata/v1/instance/preempted", self.base);
                return Err(CloudError::Malformed {
                    url,
                    body: other.into(),
                    reason: "expected TRUE or FALSE".into(),
                });
            }
        };
        let Some(action) = action else {
            self.first_seen = None;
            return Ok(None);
        };
        let seen = match &self.first_seen {
            Some((seen_action, at)) if *seen_action == action => *at,
            _ => {
                let now = SystemTime::now();
                self.first_seen = Some((action.clone(), now));
                now
            }
        };
        // GCP names no deadline: 30 s from the notice for a preemption, 60 s for maintenance.
        let notice =
            if action == "preempted" { CloudKind::Gcp.documented_notice() } else { Duration::from_secs(60) };
        Ok(Some(PreemptionNotice {
            cloud: CloudKind::Gcp,
            detail: action.clone(),
            action,
            deadline: Some(seen + notice),
            seen,
        }))
    }

    async fn azure_get(&self, path_and_query: &str) -> Result<(String, String), CloudError> {
        let url = format!("{}/metadata/{path_and_query}", self.base);
        let (status, body) = self.send(self.http.get(&url).header("Metadata", "true"), &url).await?;
        if status != 200 {
            return Err(Self::unexpected(&url, status, &body));
        }
        Ok((url, body))
    }

    async fn poll_azure(&mut self) -> Result<Option<PreemptionNotice>, CloudError> {
        if self.vm_name.is_none() {
            let (_, name) = self
                .azure_get(&format!("instance/compute/name?api-version={AZURE_INSTANCE_API}&format=text"))
                .await?;
            self.vm_name = Some(name.trim().to_string());
        }
        let (url, body) = self.azure_get(&format!("scheduledevents?api-version={AZURE_EVENTS_API}")).await?;
        #[derive(Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Document {
            events: Vec<Event>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Event {
            event_type: String,
            #[serde(default)]
            resources: Vec<String>,
            #[serde(default)]
            not_before: String,
            #[serde(default)]
            event_status: String,
        }
        let malformed =
            |reason: String| CloudError::Malformed { url: url.clone(), body: body.clone(), reason };
        let document: Document = serde_json::from_str(&body).map_err(|e| malformed(e.to_string()))?;
        let me = self.vm_name.as_deref().unwrap_or_default();
        let Some(event) = document.events.iter().find(|e| {
            matches!(e.event_type.as_str(), "Preempt" | "Terminate")
                && e.resources.iter().any(|r| r == me)
                && e.event_status != "Completed"
        }) else {
            return Ok(None);
        };
        // NotBefore is an RFC 1123 date; empty once the event has started.
        let deadline = if event.not_before.is_empty() {
            Some(SystemTime::now())
        } else {
            let parsed = chrono::DateTime::parse_from_rfc2822(&event.not_before)
                .map_err(|e| malformed(format!("NotBefore `{}`: {e}", event.not_before)))?;
            Some(SystemTime::from(parsed))
        };
        Ok(Some(PreemptionNotice {
            cloud: CloudKind::Azure,
            action: event.event_type.clone(),
            deadline,
            seen: SystemTime::now(),
            detail: body.clone(),
        }))
    }

    /// Whether this cloud's metadata service answers at the client's endpoint, as only it
    /// would (AWS hands out a token, GCP answers with `Metadata-Flavor: Google`, Azure
    /// serves its instance document).
    pub async fn answers(&mut self) -> bool {
        match self.cloud {
            CloudKind::Aws => self.aws_token().await.is_ok(),
            CloudKind::Gcp => {
                let url = format!("{}/computeMetadata/v1/instance/id", self.base);
                let request = self.http.get(&url).header("Metadata-Flavor", "Google");
                match request.send().await {
                    Ok(r) => {
                        r.status().is_success()
                            && r.headers().get("Metadata-Flavor").is_some_and(|v| v.as_bytes() == b"Google")
                    }
                    Err(_) => false,
                }
            }
            CloudKind::Azure => self
                .azure_get(&format!("instance/compute/vmId?api-version={AZURE_INSTANCE_API}&format=text"))
                .await
                .is_ok(),
        }
    }
}

/// What the machine's firmware says about its maker (`/sys/class/dmi/id`), when it names one
/// of the clouds: a quick answer that needs no network.
fn cloud_from_dmi() -> Option<CloudKind> {
    let read = |name: &str| std::fs::read_to_string(format!("/sys/class/dmi/id/{name}")).unwrap_or_default();
    let vendor = format!("{} {} {}", read("sys_vendor"), read("product_name"), read("bios_vendor"));
    if vendor.contains("Amazon EC2") || read("product_version").contains("amazon") {
        Some(CloudKind::Aws)
    } else if vendor.contains("Google") {
        Some(CloudKind::Gcp)
    } else if read("chassis_asset_tag").trim() == "7783-7084-3265-9085-8269-3286-77" {
        Some(CloudKind::Azure)
    } else {
        None
    }
}

/// Which cloud this machine runs on (`--cloud auto`): with an endpoint override, whichever
/// protocol the server there speaks; otherwise the firmware's vendor, else whichever
/// metadata service answers. None: no cloud (a laptop, a local run).
pub async fn detect(endpoint: Option<&str>) -> Option<CloudKind> {
    if endpoint.is_none()
        && let Some(cloud) = cloud_from_dmi()
    {
        return Some(cloud);
    }
    for cloud in CloudKind::ALL {
        if MetadataClient::new(cloud, endpoint).answers().await {
            return Some(cloud);
        }
    }
    None
}

/// Polls `client` every `interval` until the task is dropped; calls `report` with each new
/// notice (again when the cloud changes its action or deadline). Errors are logged (the
/// first of a run of them at warn) and polling goes on.
pub async fn watch(mut client: MetadataClient, interval: Duration, mut report: impl FnMut(PreemptionNotice)) {
    info!(cloud = %client.cloud(), endpoint = %client.base, ?interval, "watching for preemption notices");
    let mut last: Option<PreemptionNotice> = None;
    let mut failing = false;
    loop {
        match client.poll().await {
            Ok(Some(notice)) => {
                failing = false;
                if last.as_ref().is_none_or(|l| !l.same_as(&notice)) {
                    warn!(cloud = %notice.cloud, action = %notice.action, grace = ?notice.grace_at(SystemTime::now()), "preemption notice from the cloud");
                    last = Some(notice.clone());
                    report(notice);
                }
            }
            Ok(None) => {
                failing = false;
                if last.take().is_some() {
                    info!("the cloud withdrew its notice");
                }
            }
            Err(e) if !failing => {
                failing = true;
                warn!(%e, "metadata service unreachable; still watching");
            }
            Err(e) => debug!(%e, "metadata service still unreachable"),
        }
        tokio::time::sleep(interval).await;
    }
}
