//! A serving engine on a local fleet of worker processes replaying a trace: what `serve`
//! and `profile-serving` share, so that the profile is measured on exactly the deployment
//! `serve` runs (the same processes, links, engine loop and host round trip).

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::api::{CompletionJob, EngineStatus};
use super::engine::{Engine, EngineSettings, EngineStats};
use crate::workers::cloud;
use crate::workers::fleet::Fleet;
use crate::workers::{HostEndpoint, TimedEvent};
use parcae_cluster::protocol::CheckpointStore;

/// Where and how the local worker processes start.
pub struct LocalOptions<'a> {
    /// Address the host listens on for workers.
    pub listen: SocketAddr,
    /// The worker binary (default: `parcae-worker` next to this executable).
    pub worker_bin: Option<&'a Path>,
    /// Directory for worker identities and logs (prepared by the caller).
    pub run_dir: &'a Path,
    /// Device the workers compute on.
    pub device: &'a str,
    /// How long a worker may take to answer one command.
    pub command_timeout: Duration,
    /// Where workers read and write checkpoints.
    pub store: CheckpointStore,
}

/// The host's endpoint and the fleet of worker processes it launches as the trace allocates
/// instances.
pub struct LocalServing {
    host: HostEndpoint,
    fleet: Fleet,
}

impl LocalServing {
    /// Starts the endpoint; workers are launched as the replayed trace allocates them.
    pub fn start(options: LocalOptions<'_>) -> anyhow::Result<Self> {
        let host = HostEndpoint::start(options.listen)?;
        let launch = host.local_launch(options.worker_bin, options.run_dir, options.device, Vec::new())?;
        let fleet = Fleet::new(Some(launch), options.command_timeout / 2, options.store);
        Ok(LocalServing { host, fleet })
    }

    /// Replays `events` (kills on time, notices `grace` ahead) from `start` while the engine
    /// serves the jobs, until the replay and its drain end.
    pub async fn serve(
        &mut self,
        settings: EngineSettings,
        events: Vec<TimedEvent>,
        grace: Duration,
        start: Instant,
        jobs: &mut mpsc::Receiver<CompletionJob>,
        status: watch::Sender<EngineStatus>,
    ) -> EngineStats {
        let (notes_tx, mut notes) = mpsc::unbounded_channel();
        let cloud = tokio::spawn(cloud::play(events, start, grace, self.fleet.shared.clone(), notes_tx));
        let stats = Engine::new(settings, &mut self.fleet, status)
            .run(start, jobs, &mut notes, &mut self.host.arrivals)
            .await;
        cloud.abort();
        stats
    }

    /// Stops every worker process and the endpoint.
    pub async fn close(mut self) {
        self.fleet.shutdown(Duration::from_secs(5)).await;
        self.host.close();
    }
}
