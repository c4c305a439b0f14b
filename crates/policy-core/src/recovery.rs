//! How a deployment recovers the state of a stage whose every holder is
//! preempted (issue 16): the preemption notice the cloud gives and how fast an
//! instance writes an emergency checkpoint. Every cost function of
//! [`crate::liveput`] applies the same rules with it, so every row of a
//! comparison (live migration, the Oracle, reactive restarts) is measured
//! under the same recovery.
//!
//! # The rules
//!
//! When old stage `j` (state `B_j` bytes) loses every replica:
//!
//! 1. **Evacuate**, when the notice is positive, some instance stays (fewer
//!    preemptions than instances) and `t(B_j) <=` notice (`t` the profile's
//!    transfer curve): the stage's state is sent to an instance that stays
//!    before the preemption lands. Nothing is rolled back; the migration then
//!    proceeds as if the stage kept one replica, and pays the evacuation
//!    transfer `t(B_j)` before that stage's own transfers (training stops
//!    meanwhile: the copy must be consistent).
//! 2. Else **emergency checkpoint**, when the notice is positive and the save
//!    time `B_j / checkpoint write bandwidth` fits in it: the job restarts from
//!    that checkpoint (restart cost, nothing rolled back).
//! 3. Else **roll back**: the job restarts from the last periodic checkpoint
//!    and loses the work since it (`lost_work_ms`).
//!
//! With no notice (`preemption_notice_ms = 0`, [`Recovery::UNANNOUNCED`]) only
//! rule 3 applies, for live migration and for restart-on-change alike.

/// The recovery parameters of a deployment; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Recovery {
    /// Warning the cloud gives before it takes an instance back, ms (AWS 120
    /// s, GCP and Azure 30 s; `DESIGN.md`); 0 when preemptions are unannounced.
    pub preemption_notice_ms: f64,
    /// Rate at which one instance writes its training state to durable
    /// storage, bytes per ms (an emergency checkpoint of stage `j` takes
    /// `B_j / rate`); 0 when emergency checkpoints are impossible.
    pub checkpoint_write_bytes_per_ms: f64,
}

impl Recovery {
    /// Unannounced preemptions: every stage that loses all its replicas rolls
    /// back to the last periodic checkpoint (the cost model before issue 16).
    pub const UNANNOUNCED: Recovery =
        Recovery { preemption_notice_ms: 0.0, checkpoint_write_bytes_per_ms: 0.0 };

    /// A deployment whose preemptions come `notice_ms` ahead, whose instances
    /// write checkpoints at `write_gb_per_s` (decimal GB, as cloud storage
    /// bandwidths are quoted).
    pub fn with_notice(notice_ms: f64, write_gb_per_s: f64) -> Recovery {
        Recovery { preemption_notice_ms: notice_ms, checkpoint_write_bytes_per_ms: write_gb_per_s * 1e6 }
    }

    /// `Some(field name)` of the first figure that is negative or not finite.
    pub fn invalid_field(&self) -> Option<(&'static str, f64)> {
        [
            ("preemption_notice_ms", self.preemption_notice_ms),
            ("checkpoint_write_bytes_per_ms", self.checkpoint_write_bytes_per_ms),
        ]
        .into_iter()
        .find(|(_, v)| !(v.is_finite() && *v >= 0.0))
    }

    /// Whether a preemption comes with any notice at all.
    pub fn announced(&self) -> bool {
        self.preemption_notice_ms > 0.0
    }

    /// Whether `ms` of work fits in the notice (never without a notice).
    pub fn fits(&self, ms: f64) -> bool {
        self.announced() && ms <= self.preemption_notice_ms
    }

    /// Time to write `bytes` as an emergency checkpoint, ms (infinite when
    /// the deployment cannot write one).
    pub fn checkpoint_write_ms(&self, bytes: u64) -> f64 {
        if bytes == 0 {
            0.0
        } else if self.checkpoint_write_bytes_per_ms > 0.0 {
            bytes as f64 / self.checkpoint_write_bytes_per_ms
        } else {
            f64::INFINITY
        }
    }
}
