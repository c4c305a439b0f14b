//! The run's checkpoints in the checkpoint store (`--checkpoint-url`): the stage holders
//! write their stages there directly; the host then writes each checkpoint's completion
//! marker, last, and the pointer to the newest complete one, and reads them back to resume.
//!
//! Layout, under the store's URL:
//!
//! ```text
//! checkpoints/step-00000042/stage-00/layer-0000-step-000000000042.bin ... manifest.txt
//! checkpoints/step-00000042/stage-01/...
//! checkpoints/step-00000042/COMPLETE     the JobCheckpoint (JSON), written after every stage
//! checkpoints/LATEST                     the newest complete JobCheckpoint, written after its marker
//! ```
//!
//! A checkpoint without its marker is not one: a writer that died half-way (or an upload cut
//! off) leaves at most some stage objects, which nothing reads.

use bytes::Bytes;
use parcae_cluster::job::{CHECKPOINTS, COMPLETE_MARKER, JobCheckpoint, LATEST_POINTER};
use parcae_cluster::protocol::CheckpointStore;
use parcae_store::{Store, StoreError, StoreSpec};
use tracing::{info, warn};

/// The checkpoint store of a run.
#[derive(Debug, Clone)]
pub struct Checkpoints {
    store: Store,
}

/// Why the store's checkpoints could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointsError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A marker or pointer that is not a checkpoint's JSON.
    #[error("{location}: not a checkpoint record: {reason}")]
    Malformed {
        /// The object.
        location: String,
        /// The parse error.
        reason: String,
    },
}

impl Checkpoints {
    /// Opens the store at `url` (a directory, `s3://...`), with an S3 endpoint override.
    pub fn open(url: &str, endpoint: Option<&str>) -> Result<Checkpoints, StoreError> {
        let spec = StoreSpec { url: url.to_string(), endpoint: endpoint.map(String::from) };
        Ok(Checkpoints { store: Store::open(&spec)? })
    }

    /// The store itself.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The store as the workers are told it.
    pub fn for_workers(&self) -> CheckpointStore {
        let spec = self.store.spec();
        CheckpointStore { url: spec.url.clone(), endpoint: spec.endpoint.clone() }
    }

    /// Where `prefix` lives, for logs and the event log.
    pub fn location(&self, prefix: &str) -> String {
        self.store.location(prefix)
    }

    /// Deletes every checkpoint (a fresh run at a URL a previous run used); returns how many
    /// objects there were.
    pub async fn clear(&self) -> Result<usize, StoreError> {
        self.store.delete_prefix(CHECKPOINTS).await
    }

    /// Makes `checkpoint`, whose stages are all written, complete: its marker, then the
    /// pointer to it.
    pub async fn complete(&self, checkpoint: &JobCheckpoint) -> Result<(), CheckpointsError> {
        let record = Bytes::from(serde_json::to_vec_pretty(checkpoint).expect("a checkpoint serialises"));
        self.store.put(&checkpoint.marker(), record.clone()).await?;
        self.store.put(LATEST_POINTER, record).await?;
        Ok(())
    }

    /// Deletes a checkpoint that was replaced or never completed (failures are logged: a
    /// leftover costs space, never correctness).
    pub async fn discard(&self, prefix: &str) {
        if let Err(e) = self.store.delete_prefix(prefix).await {
            warn!(%e, "could not delete an old checkpoint");
        }
    }

    async fn read(&self, key: &str) -> Result<Option<JobCheckpoint>, CheckpointsError> {
        let Some(bytes) = self.store.get_opt(key).await? else { return Ok(None) };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| CheckpointsError::Malformed { location: self.location(key), reason: e.to_string() })
    }

    /// The newest complete checkpoint: the one the pointer names when its marker is there,
    /// unless a newer marker exists (the pointer lags its marker by one write, so a host
    /// killed between the two leaves it one checkpoint behind).
    pub async fn latest(&self) -> Result<Option<JobCheckpoint>, CheckpointsError> {
        let pointed = match self.read(LATEST_POINTER).await {
            Ok(Some(p)) if self.store.exists(&p.marker()).await? => Some(p),
            Ok(_) => None,
            Err(e) => {
                warn!(%e, "unreadable checkpoint pointer; looking for completion markers");
                None
            }
        };
        let mut newest = pointed;
        for key in self.store.list(CHECKPOINTS).await? {
            if !key.ends_with(&format!("/{COMPLETE_MARKER}")) {
                continue;
            }
            match self.read(&key).await {
                Ok(Some(c)) if c.marker() == key && newest.as_ref().is_none_or(|n| n.step < c.step) => {
                    newest = Some(c)
                }
                Ok(_) => {}
                Err(e) => warn!(%e, "ignoring an unreadable completion marker"),
            }
        }
        if let Some(c) = &newest {
            info!(step = c.step, location = %self.location(&c.prefix), "newest complete checkpoint");
        }
        Ok(newest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("parcae-checkpoints-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn checkpoint(step: u64) -> JobCheckpoint {
        JobCheckpoint { step, prefix: JobCheckpoint::prefix_for(step), stages: vec![0..3, 3..6] }
    }

    async fn stage(store: &Store, c: &JobCheckpoint, stage: usize) {
        let prefix = JobCheckpoint::stage_prefix(&c.prefix, stage);
        store
            .put(&format!("{prefix}/manifest.txt"), Bytes::from_static(b"parcae-checkpoint 1\n"))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn only_a_checkpoint_with_its_marker_counts_and_the_pointer_may_lag() {
        let dir = scratch("latest");
        let checkpoints = Checkpoints::open(dir.to_str().unwrap(), None).unwrap();
        assert_eq!(checkpoints.latest().await.unwrap(), None, "an empty store");
        let five = checkpoint(5);
        stage(checkpoints.store(), &five, 0).await;
        stage(checkpoints.store(), &five, 1).await;
        checkpoints.complete(&five).await.unwrap();
        assert_eq!(checkpoints.latest().await.unwrap(), Some(five.clone()));
        assert!(dir.join("checkpoints/step-00000005/COMPLETE").exists());

        // Step 9: only one stage written, no marker (the other writer died): not a checkpoint.
        let nine = checkpoint(9);
        stage(checkpoints.store(), &nine, 0).await;
        assert_eq!(checkpoints.latest().await.unwrap(), Some(five.clone()));

        // Step 12: marker written, the host died before the pointer: the marker wins.
        let twelve = checkpoint(12);
        stage(checkpoints.store(), &twelve, 0).await;
        stage(checkpoints.store(), &twelve, 1).await;
        checkpoints
            .store()
            .put(&twelve.marker(), Bytes::from(serde_json::to_vec(&twelve).unwrap()))
            .await
            .unwrap();
        assert_eq!(checkpoints.latest().await.unwrap(), Some(twelve.clone()));

        // A pointer to a checkpoint whose marker is gone (deleted): the newest marker instead.
        checkpoints.discard(&twelve.prefix).await;
        assert_eq!(checkpoints.latest().await.unwrap(), Some(five.clone()));
        // A garbled pointer is skipped, not trusted.
        checkpoints.store().put(LATEST_POINTER, Bytes::from_static(b"{not json")).await.unwrap();
        assert_eq!(checkpoints.latest().await.unwrap(), Some(five));
        assert!(checkpoints.clear().await.unwrap() >= 3);
        assert_eq!(checkpoints.latest().await.unwrap(), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
