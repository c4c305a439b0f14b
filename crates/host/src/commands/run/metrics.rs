//! `parcae-host run --metrics-addr HOST:PORT`: the run's state in the Prometheus /
//! OpenMetrics text format (`prometheus-client`), served over plain HTTP on tokio at
//! `GET /metrics`.
//!
//! Every metric is derived from the run's event log ([`RunEvent`]) as events happen, plus
//! the policy's fault counters at each decision, so what a scrape shows and what
//! `events.json` records cannot disagree. Names (all prefixed `parcae_`):
//!
//! | metric | type | what |
//! |---|---|---|
//! | `parcae_step` | gauge | committed training steps |
//! | `parcae_samples` | counter | samples trained (`parcae_samples_total`) |
//! | `parcae_samples_per_second` | gauge | over the last 10 s of steps |
//! | `parcae_loss` | gauge | the last step's mean loss |
//! | `parcae_fleet_instances` | gauge | instances available at the last decision |
//! | `parcae_data_parallel`, `parcae_pipeline_stages` | gauge | the layout training runs (0 when paused) |
//! | `parcae_migrations{kind}` | counter | reconfigurations by migration kind (`cold-start` for the first layout) |
//! | `parcae_bytes_moved` | counter | state bytes the reconfigurations moved |
//! | `parcae_rolled_back_steps{cause}` | counter | committed steps undone (`unannounced`, `notice-too-short`) |
//! | `parcae_checkpoints{reason}` | counter | complete checkpoints (`periodic`, `emergency`, `final`) |
//! | `parcae_preemptions{announced}` | counter | workers the cloud took (`true`: after a notice) |
//! | `parcae_policy_calls{slot,answer}` | counter | predictor/optimizer calls answered by the `guest` or the `fallback` |
//! | `parcae_policy_faults{slot,kind}` | counter | guest faults by kind (`fuel-exhausted`, `trap`, `quarantined`, ...) |
//! | `parcae_policy_heaviest_fuel_ratio{slot}` | gauge | the heaviest answered call's fuel over the budget (alert before it nears 1: a call over it falls back) |

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use parcae_cluster::MigrationKind;
use parcae_cluster::job::RollbackCause;
use parcae_runtime::{FaultCounts, FaultKind};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, info, warn};

use super::report::{CheckpointReason, RunEvent};

/// Labels of a metric family: (name, value) pairs.
type Labels = Vec<(&'static str, String)>;

fn label(name: &'static str, value: impl Into<String>) -> Labels {
    vec![(name, value.into())]
}

/// The run's metrics; cheap to update from the control loop, encoded per scrape.
pub struct RunMetrics {
    registry: Registry,
    step: Gauge,
    samples: Counter,
    samples_per_second: Gauge<f64, AtomicU64>,
    loss: Gauge<f64, AtomicU64>,
    fleet_instances: Gauge,
    data_parallel: Gauge,
    pipeline_stages: Gauge,
    migrations: Family<Labels, Counter>,
    bytes_moved: Counter,
    rolled_back_steps: Family<Labels, Counter>,
    checkpoints: Family<Labels, Counter>,
    preemptions: Family<Labels, Counter>,
    policy_calls: Family<Labels, Counter>,
    policy_faults: Family<Labels, Counter>,
    policy_heaviest_fuel: Family<Labels, Gauge<f64, AtomicU64>>,
    /// The policy counters at the last update (the families count the differences).
    last_policy: std::sync::Mutex<[FaultCounts; 2]>,
}

/// The policy slots, as labelled.
const SLOTS: [&str; 2] = ["predictor", "optimizer"];

fn rollback_cause(cause: RollbackCause) -> &'static str {
    match cause {
        RollbackCause::Unannounced => "unannounced",
        RollbackCause::NoticeTooShort => "notice-too-short",
    }
}

fn checkpoint_reason(reason: CheckpointReason) -> &'static str {
    match reason {
        CheckpointReason::Periodic => "periodic",
        CheckpointReason::Emergency => "emergency",
        CheckpointReason::Final => "final",
        CheckpointReason::Pause => "pause",
    }
}

impl Default for RunMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl RunMetrics {
    /// Every metric registered, each labelled series present from the start (at 0).
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("parcae");
        let m = RunMetrics {
            step: Gauge::default(),
            samples: Counter::default(),
            samples_per_second: Gauge::default(),
            loss: Gauge::default(),
            fleet_instances: Gauge::default(),
            data_parallel: Gauge::default(),
            pipeline_stages: Gauge::default(),
            migrations: Family::default(),
            bytes_moved: Counter::default(),
            rolled_back_steps: Family::default(),
            checkpoints: Family::default(),
            preemptions: Family::default(),
            policy_calls: Family::default(),
            policy_faults: Family::default(),
            policy_heaviest_fuel: Family::default(),
            last_policy: std::sync::Mutex::new(Default::default()),
            registry: Registry::default(),
        };
        registry.register("step", "Committed training steps", m.step.clone());
        registry.register("samples", "Samples trained", m.samples.clone());
        registry.register(
            "samples_per_second",
            "Training throughput over the last 10 s of steps",
            m.samples_per_second.clone(),
        );
        registry.register("loss", "Mean loss of the last committed step", m.loss.clone());
        registry.register(
            "fleet_instances",
            "Instances available at the last decision (interval boundary or re-plan)",
            m.fleet_instances.clone(),
        );
        registry.register(
            "data_parallel",
            "Data-parallel degree D of the layout (0: paused)",
            m.data_parallel.clone(),
        );
        registry.register(
            "pipeline_stages",
            "Pipeline depth P of the layout (0: paused)",
            m.pipeline_stages.clone(),
        );
        registry.register("migrations", "Reconfigurations by migration kind", m.migrations.clone());
        registry.register("bytes_moved", "State bytes moved by reconfigurations", m.bytes_moved.clone());
        registry.register(
            "rolled_back_steps",
            "Committed steps undone by restarts from an older checkpoint, by cause",
            m.rolled_back_steps.clone(),
        );
        registry.register("checkpoints", "Complete checkpoints by reason", m.checkpoints.clone());
        registry.register(
            "preemptions",
            "Workers the cloud took, with (true) or without (false) a notice",
            m.preemptions.clone(),
        );
        registry.register(
            "policy_calls",
            "Policy calls by slot and by who answered (guest or fallback)",
            m.policy_calls.clone(),
        );
        registry.register("policy_faults", "Guest policy faults by slot and kind", m.policy_faults.clone());
        registry.register(
            "policy_heaviest_fuel_ratio",
            "The heaviest call the guest answered: its fuel over the budget of one call",
            m.policy_heaviest_fuel.clone(),
        );
        for kind in MigrationKind::ALL.iter().map(|k| k.as_str()).chain(["cold-start"]) {
            let _ = m.migrations.get_or_create(&label("kind", kind));
        }
        for cause in [RollbackCause::Unannounced, RollbackCause::NoticeTooShort] {
            let _ = m.rolled_back_steps.get_or_create(&label("cause", rollback_cause(cause)));
        }
        for reason in [
            CheckpointReason::Periodic,
            CheckpointReason::Emergency,
            CheckpointReason::Final,
            CheckpointReason::Pause,
        ] {
            let _ = m.checkpoints.get_or_create(&label("reason", checkpoint_reason(reason)));
        }
        for announced in ["true", "false"] {
            let _ = m.preemptions.get_or_create(&label("announced", announced));
        }
        for slot in SLOTS {
            for answer in ["guest", "fallback"] {
                let _ = m
                    .policy_calls
                    .get_or_create(&vec![("slot", slot.to_string()), ("answer", answer.to_string())]);
            }
            let _ = m.policy_heaviest_fuel.get_or_create(&vec![("slot", slot.to_string())]);
            for kind in FaultKind::ALL {
                let _ = m
                    .policy_faults
                    .get_or_create(&vec![("slot", slot.to_string()), ("kind", kind.as_str().to_string())]);
            }
        }
        RunMetrics { registry, ..m }
    }

    /// Updates the metrics an event changes; `samples_per_second` is the log's current rate.
    pub fn observe(&self, event: &RunEvent, samples_per_second: f64) {
        match event {
            RunEvent::Step { step, loss, samples, data_parallel, pipeline_stages, .. } => {
                self.step.set(*step as i64 + 1);
                self.samples.inc_by(*samples);
                self.loss.set(*loss);
                self.samples_per_second.set(samples_per_second);
                self.data_parallel.set(*data_parallel as i64);
                self.pipeline_stages.set(*pipeline_stages as i64);
            }
            RunEvent::Decision { instances, .. } => {
                self.fleet_instances.set(i64::from(*instances));
            }
            RunEvent::Reconfigured {
                cold_start,
                kind,
                data_parallel,
                pipeline_stages,
                bytes_moved,
                step,
                ..
            } => {
                let kind = if *cold_start { "cold-start" } else { kind.as_str() };
                self.migrations.get_or_create(&label("kind", kind)).inc();
                self.bytes_moved.inc_by(*bytes_moved);
                // A restart may roll the job back to the checkpoint's step.
                self.step.set(*step as i64);
                self.data_parallel.set(*data_parallel as i64);
                self.pipeline_stages.set(*pipeline_stages as i64);
            }
            RunEvent::Paused { .. } => {
                self.data_parallel.set(0);
                self.pipeline_stages.set(0);
                self.samples_per_second.set(0.0);
            }
            RunEvent::RolledBack { steps, cause, .. } => {
                self.rolled_back_steps.get_or_create(&label("cause", rollback_cause(*cause))).inc_by(*steps);
            }
            RunEvent::Checkpointed { reason, .. } => {
                self.checkpoints.get_or_create(&label("reason", checkpoint_reason(*reason))).inc();
            }
            RunEvent::Killed { announced, .. } => {
                self.preemptions.get_or_create(&label("announced", announced.to_string())).inc();
            }
            RunEvent::Resumed { from_step, .. } => {
                self.step.set(*from_step as i64);
            }
            RunEvent::Allocated { .. }
            | RunEvent::Joined { .. }
            | RunEvent::Refused { .. }
            | RunEvent::Notice { .. }
            | RunEvent::Lost { .. }
            | RunEvent::Aborted { .. }
            | RunEvent::Cadence { .. }
            | RunEvent::Failure { .. } => {}
        }
    }

    /// Brings the policy counters up to the guarded policy's totals.
    pub fn observe_policy(&self, predictor: &FaultCounts, optimizer: &FaultCounts) {
        let mut last = self.last_policy.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (i, (now, before)) in [predictor, optimizer].into_iter().zip(last.iter()).enumerate() {
            let slot = SLOTS[i].to_string();
            let calls = |answer: &str| vec![("slot", slot.clone()), ("answer", answer.to_string())];
            self.policy_calls.get_or_create(&calls("guest")).inc_by(now.guest_answers - before.guest_answers);
            self.policy_calls.get_or_create(&calls("fallback")).inc_by(now.fallbacks - before.fallbacks);
            for kind in FaultKind::ALL {
                let labels = vec![("slot", slot.clone()), ("kind", kind.as_str().to_string())];
                self.policy_faults.get_or_create(&labels).inc_by(now.count(kind) - before.count(kind));
            }
            if let Some(share) = now.heaviest_fuel_share() {
                self.policy_heaviest_fuel.get_or_create(&vec![("slot", slot.clone())]).set(share);
            }
        }
        *last = [predictor.clone(), optimizer.clone()];
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text
    }
}

/// Content type of the OpenMetrics text format (Prometheus scrapes it natively).
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Longest request head read from a client.
const MAX_REQUEST: usize = 8 << 10;

/// Binds `addr` (port 0: any free port); the caller prints the bound address.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| anyhow::anyhow!("--metrics-addr {addr}: cannot listen: {e}"))
}

/// Serves `GET /metrics` (and `/`) on `listener` until the task is aborted.
pub async fn serve(listener: TcpListener, metrics: Arc<RunMetrics>) {
    let addr = listener.local_addr().ok();
    info!(addr = ?addr, "serving metrics");
    loop {
        match listener.accept().await {
            Ok((stream, remote)) => {
                let metrics = metrics.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(Duration::from_secs(10), answer(stream, &metrics)).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => debug!(%remote, %e, "metrics request failed"),
                        Err(_) => debug!(%remote, "metrics request timed out"),
                    }
                });
            }
            Err(e) => {
                warn!(%e, "metrics listener failed; no more scrapes");
                return;
            }
        }
    }
}

/// Reads one request head and answers it; the connection closes after the answer.
async fn answer(mut stream: TcpStream, metrics: &RunMetrics) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_REQUEST {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                "request too large\n",
            )
            .await;
        }
    }
    let line = String::from_utf8_lossy(head.split(|&b| b == b'\r').next().unwrap_or_default()).into_owned();
    let mut words = line.split(' ');
    let (method, path) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    match (method, path.split('?').next().unwrap_or_default()) {
        ("GET", "/metrics" | "/") => respond(&mut stream, "200 OK", CONTENT_TYPE, &metrics.encode()).await,
        ("GET", _) => respond(&mut stream, "404 Not Found", "text/plain", "not found: try /metrics\n").await,
        _ => respond(&mut stream, "405 Method Not Allowed", "text/plain", "only GET\n").await,
    }
}

async fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &str,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn events_move_the_metrics() {
        let m = RunMetrics::new();
        let step = |step| RunEvent::Step {
            step,
            loss: 2.5,
            samples: 32,
            millis: 10.0,
            data_parallel: 2,
            pipeline_stages: 3,
        };
        m.observe(&step(0), 3.0);
        m.observe(&step(1), 4.0);
        m.observe(&RunEvent::RolledBack { steps: 2, samples: 64, cause: RollbackCause::NoticeTooShort }, 0.0);
        let text = m.encode();
        assert_eq!(value(&text, "parcae_step"), Some(2.0), "{text}");
        assert_eq!(value(&text, "parcae_samples_total"), Some(64.0), "{text}");
        assert_eq!(value(&text, "parcae_samples_per_second"), Some(4.0), "{text}");
        assert_eq!(value(&text, "parcae_data_parallel"), Some(2.0), "{text}");
        assert_eq!(value(&text, "parcae_rolled_back_steps_total{cause=\"notice-too-short\"}"), Some(2.0));
        assert_eq!(value(&text, "parcae_rolled_back_steps_total{cause=\"unannounced\"}"), Some(0.0));
        assert_eq!(value(&text, "parcae_migrations_total{kind=\"repartition\"}"), Some(0.0), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
