//! The host's side of a cluster: its CA, its QUIC endpoint, the join token, and the task
//! that accepts workers' connections. `run` and `serve` start one each.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context;
use std::sync::Arc;

use parcae_net::{ClusterCa, JoinAuthority, JoinToken, NetEndpoint, ServerMode, TransportOptions};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::info;

use super::accept_loop;
use super::fleet::{Arrival, LocalLaunch};

/// A listening host: workers connect to `host_addr` and arrive on `arrivals`.
pub struct HostEndpoint {
    /// The cluster's CA (issues every worker's certificate).
    pub ca: Arc<ClusterCa>,
    /// The host's QUIC endpoint.
    pub endpoint: Arc<NetEndpoint>,
    /// Where workers reach the host.
    pub host_addr: SocketAddr,
    /// What a worker without a certificate joins with.
    pub token: JoinToken,
    /// Workers that connected and said hello.
    pub arrivals: mpsc::Receiver<Arrival>,
    accept: JoinHandle<()>,
}

impl HostEndpoint {
    /// A fresh CA, the host's identity and token, the endpoint on `listen`, and the task
    /// accepting connections.
    pub fn start(listen: SocketAddr) -> anyhow::Result<Self> {
        let ca = Arc::new(ClusterCa::generate("parcae-cluster")?);
        let host_identity = ca.issue("parcae-host", &["localhost", "127.0.0.1"])?;
        let token = JoinToken::generate(ca.fingerprint())?;
        let endpoint = Arc::new(NetEndpoint::bind(
            listen,
            &host_identity,
            ServerMode::AllowJoin,
            TransportOptions::default(),
        )?);
        let host_addr = endpoint.local_addr()?;
        info!(%host_addr, "host listening");
        let (arrivals_tx, arrivals) = mpsc::channel(64);
        let authority = Arc::new(JoinAuthority::new(ca.clone(), token.clone()));
        let accept = tokio::spawn(accept_loop(endpoint.clone(), authority, arrivals_tx));
        Ok(HostEndpoint { ca, endpoint, host_addr, token, arrivals, accept })
    }

    /// How to start local workers that connect here: their identities and logs under
    /// `dir`.
    pub fn local_launch(
        &self,
        worker_bin: Option<&Path>,
        dir: &Path,
        device: &str,
        types: Vec<(String, f64)>,
    ) -> anyhow::Result<LocalLaunch> {
        Ok(LocalLaunch {
            worker_bin: crate::processes::worker_bin(worker_bin)?,
            host_addr: self.host_addr,
            identities: dir.join("identities"),
            logs: dir.join("logs"),
            device: device.to_string(),
            ca: self.ca.clone(),
            types,
        })
    }

    /// Stops accepting and closes the endpoint.
    pub fn close(&self) {
        self.accept.abort();
        self.endpoint.close();
    }
}

/// Readies `dir` for local workers: fresh `identities/` (a previous run's certificates
/// belong to another CA) and `logs/` (kept: a previous run's logs stay readable).
pub fn prepare_run_dir(dir: &Path) -> anyhow::Result<()> {
    let identities = dir.join("identities");
    if identities.exists() {
        std::fs::remove_dir_all(&identities).with_context(|| format!("clearing {}", identities.display()))?;
    }
    for sub in [identities, dir.join("logs")] {
        std::fs::create_dir_all(&sub).with_context(|| format!("creating {}", sub.display()))?;
    }
    Ok(())
}
