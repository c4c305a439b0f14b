//! A local HTTP server that speaks one cloud's instance-metadata protocol as the cloud
//! documents it, for tests and for trying `parcae-worker --cloud ... --metadata-endpoint`
//! without a cloud: it checks the headers each cloud requires (refusing a request without
//! them as the real service does), hands out and checks AWS session tokens, and serves a
//! preemption notice once [`MetadataEmulator::announce`] makes one appear.
//!
//! It runs on its own thread (with its own single-threaded tokio runtime) on
//! `127.0.0.1:0`, so synchronous tests can use it as well; dropping it stops it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};

use super::CloudKind;

/// A notice the emulator serves once announced.
#[derive(Debug, Clone, PartialEq)]
pub enum EmulatedNotice {
    /// AWS `spot/instance-action`: `{"action": ..., "time": ...}`.
    Aws {
        /// "terminate", "stop" or "hibernate".
        action: String,
        /// When the instance goes away.
        time: SystemTime,
    },
    /// GCP `instance/preempted` answers `TRUE`.
    GcpPreempted,
    /// GCP `instance/maintenance-event` answers this (e.g. `TERMINATE_ON_HOST_MAINTENANCE`).
    GcpMaintenance(String),
    /// An Azure scheduled event.
    Azure {
        /// "Preempt", "Terminate", "Reboot", ...
        event_type: String,
        /// The VMs it affects.
        resources: Vec<String>,
        /// Its `NotBefore` time.
        not_before: SystemTime,
    },
}

/// One request the emulator answered, for tests to check what a client asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// HTTP method.
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// The status the emulator answered with.
    pub status: u16,
}

struct State {
    cloud: CloudKind,
    vm_name: String,
    notice: Option<EmulatedNotice>,
    /// AWS session tokens and when they expire.
    tokens: HashMap<String, Instant>,
    issued: u64,
    /// Azure's DocumentIncarnation: bumped whenever the event list changes.
    incarnation: u64,
    requests: Vec<Recorded>,
}

/// A running emulator of one cloud's metadata service.
pub struct MetadataEmulator {
    /// `http://127.0.0.1:PORT`: the endpoint override to give a client.
    pub endpoint: String,
    state: Arc<Mutex<State>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The name the emulated Azure VM has unless told otherwise.
pub const DEFAULT_VM_NAME: &str = "parcae-worker-vm";

impl MetadataEmulator {
    /// Starts an emulator of `cloud` (an Azure VM named [`DEFAULT_VM_NAME`]).
    pub fn start(cloud: CloudKind) -> std::io::Result<MetadataEmulator> {
        Self::start_named(cloud, DEFAULT_VM_NAME)
    }

    /// Starts an emulator of `cloud` whose VM is named `vm_name` (what Azure's events name).
    pub fn start_named(cloud: CloudKind, vm_name: &str) -> std::io::Result<MetadataEmulator> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let state = Arc::new(Mutex::new(State {
            cloud,
            vm_name: vm_name.to_string(),
            notice: None,
            tokens: HashMap::new(),
            issued: 0,
            incarnation: 1,
            requests: Vec::new(),
        }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = state.clone();
        let thread = std::thread::Builder::new().name(format!("{cloud}-metadata")).spawn(move || {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().expect("emulator runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("emulator listener");
                let accept = async {
                    while let Ok((stream, _)) = listener.accept().await {
                        let state = served.clone();
                        tokio::spawn(async move {
                            let service = hyper::service::service_fn(move |request| {
                                let state = state.clone();
                                async move { Ok::<_, Infallible>(answer(&state, request)) }
                            });
                            let io = hyper_util::rt::TokioIo::new(stream);
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(io, service)
                                .await;
                        });
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stopped => {}
                }
            });
        })?;
        Ok(MetadataEmulator { endpoint, state, stop: Some(stop), thread: Some(thread) })
    }

    /// Makes `notice` appear (replacing any other).
    pub fn announce(&self, notice: EmulatedNotice) {
        let mut state = self.state.lock().expect("emulator lock");
        state.notice = Some(notice);
        state.incarnation += 1;
    }

    /// Withdraws the notice.
    pub fn withdraw(&self) {
        let mut state = self.state.lock().expect("emulator lock");
        state.notice = None;
        state.incarnation += 1;
    }

    /// Makes every AWS token issued so far invalid (as if it had expired).
    pub fn expire_tokens(&self) {
        self.state.lock().expect("emulator lock").tokens.clear();
    }

    /// Every request answered so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().expect("emulator lock").requests.clone()
    }
}

impl Drop for MetadataEmulator {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("Content-Type", content_type)
        .body(Full::new(body.into()))
        .expect("a valid response")
}

fn header<'a>(request: &'a Request<Incoming>, name: &str) -> Option<&'a str> {
    request.headers().get(name).and_then(|v| v.to_str().ok())
}

fn answer(state: &Mutex<State>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let mut state = state.lock().expect("emulator lock");
    let response = match state.cloud {
        CloudKind::Aws => aws(&mut state, &request),
        CloudKind::Gcp => {
            let mut response = gcp(&state, &request);
            response.headers_mut().insert("Metadata-Flavor", "Google".parse().expect("a header value"));
            response
        }
        CloudKind::Azure => azure(&mut state, &request),
    };
    let uri = request.uri().path_and_query().map_or_else(|| request.uri().to_string(), |p| p.to_string());
    state.requests.push(Recorded {
        method: request.method().to_string(),
        uri,
        status: response.status().as_u16(),
    });
    response
}

/// IMDSv2 (`docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-service.html`).
fn aws(state: &mut State, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    if path == "/latest/api/token" {
        if request.method() != hyper::Method::PUT {
            return reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "");
        }
        // IMDSv2 refuses token requests that went through a proxy.
        if header(request, "X-Forwarded-For").is_some() {
            return reply(StatusCode::FORBIDDEN, "text/plain", "");
        }
        let ttl = header(request, "X-aws-ec2-metadata-token-ttl-seconds").and_then(|v| v.parse::<u64>().ok());
        let Some(ttl) = ttl.filter(|t| (1..=21_600).contains(t)) else {
            return reply(StatusCode::BAD_REQUEST, "text/plain", "");
        };
        state.issued += 1;
        let token = format!("AQAEAemulated{:08}==", state.issued);
        state.tokens.insert(token.clone(), Instant::now() + Duration::from_secs(ttl));
        let mut response = reply(StatusCode::OK, "text/plain", token);
        response
            .headers_mut()
            .insert("X-aws-ec2-metadata-token-ttl-seconds", ttl.to_string().parse().expect("a header value"));
        return response;
    }
    let Some(item) = path.strip_prefix("/latest/meta-data/") else {
        return reply(StatusCode::NOT_FOUND, "text/html", "Not Found");
    };
    if request.method() != hyper::Method::GET {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "");
    }
    let valid = header(request, "X-aws-ec2-metadata-token")
        .and_then(|t| state.tokens.get(t))
        .is_some_and(|expires| Instant::now() < *expires);
    if !valid {
        return reply(StatusCode::UNAUTHORIZED, "text/plain", "");
    }
    match (item, &state.notice) {
        ("spot/instance-action", Some(EmulatedNotice::Aws { action, time })) => {
            let time = chrono::DateTime::<chrono::Utc>::from(*time).format("%Y-%m-%dT%H:%M:%SZ");
            let body = serde_json::json!({ "action": action, "time": time.to_string() }).to_string();
            reply(StatusCode::OK, "text/plain", body)
        }
        ("instance-id", _) => reply(StatusCode::OK, "text/plain", "i-0123456789abcdef0"),
        _ => reply(StatusCode::NOT_FOUND, "text/html", "Not Found"),
    }
}

/// GCE metadata server (`cloud.google.com/compute/docs/metadata/querying-metadata`).
fn gcp(state: &State, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    if header(request, "X-Forwarded-For").is_some() {
        return reply(StatusCode::FORBIDDEN, "text/html", "Forbidden");
    }
    if header(request, "Metadata-Flavor") != Some("Google") {
        return reply(
            StatusCode::FORBIDDEN,
            "text/html",
            "Your client does not have permission to get URL from this server. Missing Metadata-Flavor:Google header.",
        );
    }
    if request.method() != hyper::Method::GET {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "text/html", "");
    }
    let body = match request.uri().path() {
        "/computeMetadata/v1/instance/preempted" => {
            if matches!(state.notice, Some(EmulatedNotice::GcpPreempted)) { "TRUE" } else { "FALSE" }
                .to_string()
        }
        "/computeMetadata/v1/instance/maintenance-event" => match &state.notice {
            Some(EmulatedNotice::GcpMaintenance(event)) => event.clone(),
            _ => "NONE".to_string(),
        },
        "/computeMetadata/v1/instance/id" => "4520031799277581759".to_string(),
        "/computeMetadata/v1/instance/name" => state.vm_name.clone(),
        _ => return reply(StatusCode::NOT_FOUND, "text/html", "Not Found"),
    };
    reply(StatusCode::OK, "application/text", body)
}

/// Azure IMDS and Scheduled Events (`learn.microsoft.com/azure/virtual-machines/linux/scheduled-events`).
fn azure(state: &mut State, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let bad = |error: &str| {
        reply(StatusCode::BAD_REQUEST, "application/json", serde_json::json!({ "error": error }).to_string())
    };
    if header(request, "X-Forwarded-For").is_some() {
        return bad("Bad request. Requests through a proxy are not allowed.");
    }
    if header(request, "Metadata") != Some("true") {
        return bad("Bad request. Required metadata header not specified");
    }
    let query = request.uri().query().unwrap_or_default();
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|kv| kv.split_once('=').filter(|(k, _)| *k == name).map(|(_, v)| v.to_string()))
    };
    if param("api-version").is_none() {
        return bad("Bad request. api-version was not specified in the request.");
    }
    match request.uri().path() {
        "/metadata/scheduledevents" => {
            let events: Vec<serde_json::Value> = match &state.notice {
                Some(EmulatedNotice::Azure { event_type, resources, not_before }) => {
                    let not_before = chrono::DateTime::<chrono::Utc>::from(*not_before)
                        .format("%a, %d %b %Y %H:%M:%S GMT");
                    vec![serde_json::json!({
                        "EventId": "602d9444-d2cd-49c7-8624-8643e7171297",
                        "EventType": event_type,
                        "ResourceType": "VirtualMachine",
                        "Resources": resources,
                        "EventStatus": "Scheduled",
                        "NotBefore": not_before.to_string(),
                        "Description": "",
                        "EventSource": "Platform",
                        "DurationInSeconds": -1,
                    })]
                }
                _ => Vec::new(),
            };
            let body = serde_json::json!({ "DocumentIncarnation": state.incarnation, "Events": events });
            reply(StatusCode::OK, "application/json", body.to_string())
        }
        "/metadata/instance/compute/name" if param("format").as_deref() == Some("text") => {
            reply(StatusCode::OK, "text/plain", state.vm_name.clone())
        }
        "/metadata/instance/compute/vmId" if param("format").as_deref() == Some("text") => {
            reply(StatusCode::OK, "text/plain", "02aab8a4-74ef-476e-8182-f6d2ba4166a6")
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            "application/json",
            serde_json::json!({ "error": "Not found" }).to_string(),
        ),
    }
}
