//! A real S3-compatible server for tests and benchmarks: moto's server mode
//! (`moto[server]`, installed into the project's venv by `scripts/setup.sh`),
//! started on `127.0.0.1:0` in a child process and stopped when dropped.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};

/// Starts moto's threaded server on an ephemeral loopback port, creates the buckets named
/// on the command line, prints the port and serves until stdin closes.
const LAUNCHER: &str = r#"
import sys
import boto3
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
host, port = server.get_host_and_port()
s3 = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                  aws_access_key_id="test", aws_secret_access_key="test")
for bucket in sys.argv[1:]:
    s3.create_bucket(Bucket=bucket)
print(port, flush=True)
sys.stdin.read()
server.stop()
"#;

/// A running moto server. Dropping it stops the server.
pub struct MotoServer {
    child: Child,
    /// Kept open: the server exits when it closes.
    _stdin: ChildStdin,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
}

/// Why moto could not be started.
#[derive(Debug, thiserror::Error)]
pub enum MotoError {
    /// The venv's Python could not be run.
    #[error("starting {python}: {source} (run scripts/setup.sh to create the venv with moto[server])")]
    Spawn {
        /// The interpreter tried.
        python: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The launcher exited or printed something other than its port.
    #[error("moto did not start (is moto[server] installed in {venv}? run scripts/setup.sh): {output}")]
    NoPort {
        /// The venv used.
        venv: PathBuf,
        /// What it printed instead.
        output: String,
    },
}

/// The project's Python venv: `$PARCAE_VENV`, else the repository's `.venv`.
pub fn venv() -> PathBuf {
    std::env::var_os("PARCAE_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv"))
}

impl MotoServer {
    /// Starts moto with `buckets` created, and sets nothing in this process's environment
    /// (pass [`MotoServer::endpoint`] and the credentials of [`MotoServer::env`] explicitly).
    pub fn start(buckets: &[&str]) -> Result<MotoServer, MotoError> {
        let venv = venv();
        let python = venv.join("bin/python");
        let mut child = Command::new(&python)
            .arg("-c")
            .arg(LAUNCHER)
            .args(buckets)
            .env_remove("VIRTUAL_ENV")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| MotoError::Spawn { python: python.clone(), source })?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        match line.trim().parse::<u16>() {
            Ok(port) => Ok(MotoServer { child, _stdin: stdin, endpoint: format!("http://127.0.0.1:{port}") }),
            Err(_) => {
                let _ = child.kill();
                let output =
                    child.wait_with_output().map(|o| String::from_utf8_lossy(&o.stderr).into_owned());
                Err(MotoError::NoPort { venv, output: format!("{line}{}", output.unwrap_or_default()) })
            }
        }
    }

    /// The environment an S3 client needs for this server: dummy credentials (moto checks
    /// none), a region, and the endpoint.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP relay in front of a server that forwards the first `budget` bytes clients send (over
/// all connections together) and then stops forwarding, leaving the connections open: an
/// upload cut off half-way, as when the writing instance is reclaimed. Replies are relayed in
/// full.
pub struct StallingProxy {
    /// `http://127.0.0.1:PORT`, to use as the endpoint instead of the server's.
    pub endpoint: String,
    forwarded: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl StallingProxy {
    /// Starts the relay to `target` (`host:port`) on a loopback port, on the current tokio
    /// runtime.
    pub async fn start(target: &str, budget: u64) -> std::io::Result<StallingProxy> {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let forwarded = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let target = target.to_string();
        let counter = forwarded.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (target, counter) = (target.clone(), counter.clone());
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(&target).await else { return };
                    let (mut client_read, mut client_write) = client.into_split();
                    let (mut server_read, mut server_write) = server.into_split();
                    tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                    });
                    let mut buf = vec![0u8; 16 << 10];
                    loop {
                        let Ok(n) = client_read.read(&mut buf).await else { return };
                        if n == 0 {
                            return;
                        }
                        // Take up to n bytes of what is left of the budget.
                        let taken = counter
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |done| {
                                Some(done + (n as u64).min(budget.saturating_sub(done)))
                            })
                            .expect("the update always succeeds");
                        let pass = (n as u64).min(budget.saturating_sub(taken)) as usize;
                        if pass > 0 && server_write.write_all(&buf[..pass]).await.is_err() {
                            return;
                        }
                        if pass < n {
                            // Stalled: hold the connection open, forward nothing more.
                            std::future::pending::<()>().await;
                        }
                    }
                });
            }
        });
        Ok(StallingProxy { endpoint, forwarded })
    }

    /// Client bytes forwarded so far, over every connection.
    pub fn forwarded(&self) -> u64 {
        self.forwarded.load(std::sync::atomic::Ordering::SeqCst)
    }
}
