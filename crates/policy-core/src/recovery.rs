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
//!
//! # A pause's write
//!
//! A job that pauses writes its state to durable storage (`parcae-host run`
//! does), and until the write lands the state lives only in the memory of the
//! layout that held it: a loss of every holder of a stage meanwhile rolls back
//! as rule 3 says (or is covered by the notice as rules 1 and 2 say). A pause
//! from layout `f` therefore keeps `f`'s holders exposed at the
//! [`pause_exposed_boundaries`] interval boundaries that come before its
//! write (the largest stage of `f` at the write rate) lands, counting a
//! boundary only when the write still left then outlasts the notice. The
//! exposure ends when the job resumes (the boundary it resumes at is still
//! exposed: the resume comes after that boundary's preemptions). Before this
//! rule a pause was priced as a checkpoint taken at once, which credited the
//! Oracle with protection it could not have where a stage's write outlasts
//! an interval (GPT-6.7B at 20-second intervals: 31 to 41 s). Without a
//! write rate the cost constants do not say how long the write takes, and a
//! pause is priced as before (the simulator's periodic cadence likewise stays
//! at the profile's without one).

use crate::{ModelProfile, ParallelConfig};

/// The most boundaries [`pause_exposed_boundaries`] counts: a write longer
/// than this many intervals is charged for its first ones only, which bounds
/// the planner's extra states (one per layout and exposed boundary).
pub const MAX_EXPOSED_BOUNDARIES: u32 = 16;

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

    /// Whether the notice saves every stage of every layout of `profile` (each
    /// stage's emergency checkpoint fits in it), so that no loss can roll
    /// back: the work at risk then costs nothing, and a planner need not
    /// carry it.
    pub fn saves_every_stage(&self, profile: &ModelProfile) -> bool {
        self.announced()
            && profile.configs.iter().all(|c| {
                let depth = c.config.pipeline_stages;
                profile.partitions.iter().find(|p| p.pipeline_stages == depth).is_some_and(|p| {
                    p.state_bytes_per_stage.iter().all(|&bytes| self.fits(self.checkpoint_write_ms(bytes)))
                })
            })
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

/// The instances an exposed boundary's preemptions are drawn from, for a pause
/// from `layout` with `instances_before` alive: those alive or, when fewer are
/// left than the layout held, the layout's own. One rule for the simulator and
/// the planner, which must charge the same exposure.
pub fn exposed_fleet(instances_before: u32, layout: ParallelConfig) -> u32 {
    instances_before.max(u32::try_from(layout.instances()).unwrap_or(u32::MAX))
}

/// How many interval boundaries after a pause from `config` begins its
/// holders stay exposed ([module documentation](self#a-pauses-write)): the
/// boundaries `m = 1, 2, ...` (each `interval_ms` after the one before) at
/// which the write of `config`'s largest stage, begun at the pause's own
/// boundary, still has more than the notice left. 0 when the write lands
/// within the pause's first interval, without a write rate, or when the
/// profile has no partition of `config`'s depth; at most
/// [`MAX_EXPOSED_BOUNDARIES`].
pub fn pause_exposed_boundaries(
    profile: &ModelProfile,
    recovery: &Recovery,
    config: ParallelConfig,
    interval_ms: f64,
) -> u32 {
    if recovery.checkpoint_write_bytes_per_ms <= 0.0 || interval_ms.is_nan() || interval_ms <= 0.0 {
        return 0;
    }
    let largest = profile
        .partitions
        .iter()
        .find(|p| p.pipeline_stages == config.pipeline_stages)
        .and_then(|p| p.state_bytes_per_stage.iter().copied().max())
        .unwrap_or(0);
    let beyond_notice = recovery.checkpoint_write_ms(largest) - recovery.preemption_notice_ms;
    if beyond_notice <= interval_ms {
        return 0;
    }
    // Boundary `m` is exposed when `m x interval < write - notice`.
    let boundaries = (beyond_notice / interval_ms).ceil() - 1.0;
    if boundaries >= f64::from(MAX_EXPOSED_BOUNDARIES) { MAX_EXPOSED_BOUNDARIES } else { boundaries as u32 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StagePartition;

    /// A profile of one depth-2 partition whose larger stage holds 1,500 bytes.
    fn two_stages() -> ModelProfile {
        let mut profile = crate::plan::tests::toy_profile(&[(1, 2, 10.0)], 0.0);
        profile.partitions = vec![StagePartition {
            pipeline_stages: 2,
            layers_per_stage: vec![1, 1],
            state_bytes_per_stage: vec![500, 1500],
        }];
        profile
    }

    #[test]
    fn a_pause_stays_exposed_until_its_largest_stage_is_written() {
        let profile = two_stages();
        let config = ParallelConfig::new(1, 2);
        // 1 byte per 100 ms: the larger stage takes 150 s.
        let unannounced = Recovery { preemption_notice_ms: 0.0, checkpoint_write_bytes_per_ms: 0.01 };
        let boundaries = |recovery: &Recovery, interval_ms| {
            pause_exposed_boundaries(&profile, recovery, config, interval_ms)
        };
        // Boundaries at 60 and 120 s come before the write lands; at 30-s
        // intervals those at 30, 60, 90 and 120 s.
        assert_eq!(boundaries(&unannounced, 60_000.0), 2);
        assert_eq!(boundaries(&unannounced, 30_000.0), 4);
        // A boundary when the write lands does not count; a write within the
        // interval exposes none.
        assert_eq!(boundaries(&unannounced, 75_000.0), 1);
        assert_eq!(boundaries(&unannounced, 150_000.0), 0);
        assert_eq!(boundaries(&unannounced, 200_000.0), 0);
        // The notice finishes the write: with 40 s, a boundary counts while
        // more than 40 s of the write is left (at 60 s; not at 120 s).
        let noticed = Recovery { preemption_notice_ms: 40_000.0, ..unannounced };
        assert_eq!(boundaries(&noticed, 60_000.0), 1);
        // Without a write rate, as before the rule; no partition of the
        // depth, nothing to write; a very long write is capped.
        assert_eq!(boundaries(&Recovery::UNANNOUNCED, 60_000.0), 0);
        assert_eq!(pause_exposed_boundaries(&profile, &unannounced, ParallelConfig::new(1, 3), 60_000.0), 0);
        assert_eq!(boundaries(&unannounced, 1_000.0), MAX_EXPOSED_BOUNDARIES);
    }

    #[test]
    fn a_notice_saves_every_stage_only_when_every_write_fits() {
        let profile = two_stages();
        // 1,500 bytes at 1 byte/ms: 1.5 s.
        let enough = Recovery { preemption_notice_ms: 1_500.0, checkpoint_write_bytes_per_ms: 1.0 };
        assert!(enough.saves_every_stage(&profile));
        let short = Recovery { preemption_notice_ms: 1_499.0, ..enough };
        assert!(!short.saves_every_stage(&profile));
        assert!(!Recovery { preemption_notice_ms: 0.0, ..enough }.saves_every_stage(&profile));
        assert!(!Recovery { checkpoint_write_bytes_per_ms: 0.0, ..enough }.saves_every_stage(&profile));
        // A layout whose depth has no partition has no known stage to save.
        let mut unknown = profile.clone();
        unknown.partitions.clear();
        assert!(!enough.saves_every_stage(&unknown));
    }
}
