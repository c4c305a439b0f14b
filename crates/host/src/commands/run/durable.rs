//! The job's durable state, kept in the checkpoint store next to the checkpoints
//! (`job.json`), so that `parcae-host run --resume RUN_DIR|URL` can go on after the host
//! died: the run's own arguments (so the same trace, policy and profile), the trace clock
//! and the intervals observed so far, the committed step, layout and checkpoint, and the
//! event log.
//!
//! The control loop hands the [`Persister`] its progress after every step; a background
//! task writes the newest state, one write at a time and at most one per
//! [`WRITE_INTERVAL`] (updates that arrive meanwhile are folded into the next write), so a
//! slow store never holds training back, an object store is not asked for a write per step,
//! and the object lags the job by about a second. Each write replaces the whole object, so
//! a reader sees the previous state or the new one, never a mix.

use std::path::PathBuf;

use bytes::Bytes;
use parcae_cluster::job::JobCheckpoint;
use parcae_cluster::{ModelSpec, WorkerId};
use parcae_policy_core::IntervalStats;
use parcae_store::{Store, StoreError};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::report::{RunLog, Timed};

/// The object holding the job's state, at the root of the checkpoint store.
pub const JOB_STATE: &str = "job.json";

/// The format this build writes and reads.
pub const FORMAT: u32 = 1;

/// The least time between two writes of the job's state.
pub const WRITE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Everything a resumed host needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DurableJob {
    /// [`FORMAT`].
    pub format: u32,
    /// The original run's `parcae-host run` arguments (after `run`).
    pub args: Vec<String>,
    /// Its working directory (relative paths in `args` are relative to it).
    pub cwd: PathBuf,
    /// The model it trains (a resumed run must build the same one).
    pub spec: ModelSpec,
    /// Where the job stood.
    pub progress: Progress,
    /// The event log so far.
    pub events: Vec<Timed>,
}

/// Where the job stood at its last write.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Committed steps.
    pub step: u64,
    /// The layout training ran, (D, P).
    pub layout: Option<(usize, usize)>,
    /// What the policy asked for last, (D, P).
    pub desired: Option<(u32, u32)>,
    /// The newest complete checkpoint.
    pub checkpoint: Option<JobCheckpoint>,
    /// The last reconfiguration epoch and step attempt (numbers go on from them).
    pub epoch: u64,
    /// Step attempts so far.
    pub attempts: u64,
    /// The run's clock: wall milliseconds of replay since the run began (the time a dead
    /// host was down is not counted: the trace goes on where it stopped).
    pub clock_ms: u64,
    /// The next control interval to observe.
    pub next_interval: usize,
    /// The intervals observed so far (what the policy forecasts from).
    pub history: Vec<IntervalStats>,
    /// Arrivals and preemptions in the interval under way.
    pub interval_counts: IntervalStats,
    /// The next worker id to hand out (ids are never reused, so the event log stays clear).
    pub next_worker: WorkerId,
    /// Workers lost without notice so far (the checkpoint cadence depends on their number).
    pub unannounced: Vec<WorkerId>,
    /// Notices whose stranded state could not be saved in time (they count as losses
    /// for the cadence too). Absent from job states written before it: none.
    #[serde(default)]
    pub failed_notice_saves: u32,
    /// The run ended normally: nothing to resume.
    pub finished: bool,
}

/// Why the job's state could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    /// The store failed, or holds no job state.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The object is not a job state this build reads.
    #[error("{location}: {reason}")]
    Malformed {
        /// The object.
        location: String,
        /// What is wrong.
        reason: String,
    },
}

/// Reads the job's state from `store`.
pub async fn load(store: &Store) -> Result<DurableJob, DurableError> {
    let bytes = store.get(JOB_STATE).await?;
    let location = store.location(JOB_STATE);
    let job: DurableJob = serde_json::from_slice(&bytes)
        .map_err(|e| DurableError::Malformed { location: location.clone(), reason: e.to_string() })?;
    if job.format != FORMAT {
        return Err(DurableError::Malformed {
            location,
            reason: format!("format {} (this build reads {FORMAT})", job.format),
        });
    }
    Ok(job)
}

/// The arguments this process was given after `run` (what a resumed run replays).
pub fn run_arguments() -> Vec<String> {
    std::env::args().skip(1).skip_while(|a| a != "run").skip(1).collect()
}

enum Update {
    Progress(Progress),
    Events(Vec<Timed>),
}

/// Writes the job's state in the background.
pub struct Persister {
    tx: mpsc::UnboundedSender<Update>,
    task: tokio::task::JoinHandle<()>,
    /// Events of the run log already handed over.
    sent_events: usize,
}

impl Persister {
    /// Starts writing `job` (at once, then after every update) to `store`.
    pub fn start(store: Store, job: DurableJob) -> Persister {
        let sent_events = job.events.len();
        let (tx, mut rx) = mpsc::unbounded_channel::<Update>();
        let task = tokio::spawn(async move {
            let mut job = job;
            let mut failing = false;
            loop {
                let bytes = Bytes::from(serde_json::to_vec(&job).expect("the job state serialises"));
                match store.put(JOB_STATE, bytes).await {
                    Ok(n) => {
                        failing = false;
                        debug!(bytes = n, step = job.progress.step, "job state written");
                    }
                    Err(e) if !failing => {
                        failing = true;
                        warn!(%e, "could not write the job's state; a resume would start from an older one");
                    }
                    Err(_) => {}
                }
                tokio::time::sleep(WRITE_INTERVAL).await;
                // Wait for the next update, then fold in every one already queued.
                let Some(first) = rx.recv().await else { break };
                let mut apply = |update: Update| match update {
                    Update::Progress(progress) => job.progress = progress,
                    Update::Events(events) => job.events.extend(events),
                };
                apply(first);
                while let Ok(update) = rx.try_recv() {
                    apply(update);
                }
            }
        });
        Persister { tx, task, sent_events }
    }

    /// Hands over where the job stands and the events `log` recorded since the last call.
    pub fn update(&mut self, progress: Progress, log: &RunLog) {
        let events = log.events();
        if events.len() > self.sent_events {
            let _ = self.tx.send(Update::Events(events[self.sent_events..].to_vec()));
            self.sent_events = events.len();
        }
        let _ = self.tx.send(Update::Progress(progress));
    }

    /// Writes what is pending and stops.
    pub async fn finish(self) {
        drop(self.tx);
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::run::report::RunEvent;

    #[tokio::test]
    async fn the_newest_state_is_written_and_read_back() {
        let dir = std::env::temp_dir().join(format!("parcae-durable-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open(&parcae_store::StoreSpec::local(&dir)).unwrap();
        let job = DurableJob {
            format: FORMAT,
            args: vec!["--trace".into(), "t.csv".into()],
            cwd: dir.clone(),
            spec: ModelSpec::default(),
            progress: Progress::default(),
            events: Vec::new(),
        };
        let mut persister = Persister::start(store.clone(), job);
        let mut log = RunLog::new();
        log.event(RunEvent::Joined { worker: 1, instance_type: String::new() });
        for step in 1..=50 {
            let progress = Progress { step, clock_ms: step * 10, next_worker: 2, ..Progress::default() };
            persister.update(progress, &log);
        }
        log.event(RunEvent::Lost { worker: 1 });
        persister.update(Progress { step: 51, finished: true, ..Progress::default() }, &log);
        persister.finish().await;
        let read = load(&store).await.unwrap();
        assert_eq!(read.args, vec!["--trace", "t.csv"]);
        assert_eq!((read.progress.step, read.progress.finished), (51, true));
        assert_eq!(read.events.len(), 2, "each event once");
        assert!(matches!(read.events[1].event, RunEvent::Lost { worker: 1 }));
        // Not a job state: the error names the object.
        store.put(JOB_STATE, Bytes::from_static(b"{}")).await.unwrap();
        let err = load(&store).await.unwrap_err().to_string();
        assert!(err.contains("job.json") && err.contains("missing field"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
