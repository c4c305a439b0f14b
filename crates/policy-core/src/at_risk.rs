//! The work a rollback can take back. A stage that loses every replica with
//! nothing to save it restarts from the last checkpoint and loses the work
//! since it; in steady state that is half a checkpoint interval
//! ([`crate::liveput::lost_work_ms`]) at the running layout's speed. Right after
//! a restart less than that has been trained since the checkpoint it loaded, so
//! a second loss soon after the first cannot take back a whole steady-state
//! share: charging it one over-prices bursts of losses and lets a row that
//! pauses through them look better than one that trains through them.
//!
//! # The rule
//!
//! The job carries the expected samples at risk `r`: trained since it last
//! rolled back to a checkpoint, at most the largest steady-state rollback of
//! any layout of the profile, `C` ([`ceiling`]). An interval that rolls back
//! with probability `p_reset` and trains `g` samples gross (before what it
//! rolls back) leaves `r' = min(C, (1 - p_reset) r + g)`; a rollback in it
//! loses `min(steady(from), r)` samples. A cold start begins at `r = 0`.
//!
//! `r` is an expectation over which instances the interval's preemptions
//! took, so after a rollback of probability `p` it keeps `(1 - p) r`: the
//! ceiling keeps that close to the mixture's own expectation (without it, a
//! job that trained for hours would keep hours at risk after a likely
//! rollback). One ceiling for every layout, not each layout's own share, so
//! that two plans that trained the same since the last rollback risk the same
//! whatever layouts they went through: the planner's fronts stay small.
//!
//! Only rollbacks reset it. A restart that writes a checkpoint first
//! (restart-on-change at every change, an emergency checkpoint within a
//! notice) leaves less at risk still, but the rule does not count it: such a
//! restart is charged as before, so no row gains from the rule by restarting
//! more often, and live migration, which cannot choose to restart, keeps its
//! bound over restart-on-change (`crates/sim/tests/traces.rs`). It errs on the
//! side of charging those rows too much, as every row was charged before.
//!
//! Every row is scored under this rule (the simulator, the peers), and the
//! planner can plan under it (`plan::PlanOptions::at_risk`): the rollback is
//! non-decreasing and 1-Lipschitz in `r` and `r'` is too, so a plan with at
//! least the value, at most the leftover and at most the work at risk of
//! another can never do worse, and the planner's Pareto fronts over the three
//! stay exact.

use crate::ModelProfile;
use crate::liveput::lost_work_ms;

/// Samples a rollback takes back: the steady-state share `steady` (the
/// layout's speed times [`crate::liveput::lost_work_ms`]), or less when less is
/// at risk.
pub fn rolled_back(steady: f64, at_risk: f64) -> f64 {
    steady.min(at_risk)
}

/// The samples at risk after an interval that rolls back with probability
/// `p_reset` and trains `trained` samples gross, at most `ceiling` and never
/// below 0: an interval that trains nothing and surely rolls back reports its
/// gross samples as the difference of two equal sums, which rounding can
/// leave a hair below zero, and a planner told a negative amount at risk
/// rejects the request.
pub fn at_risk_after(at_risk: f64, p_reset: f64, trained: f64, ceiling: f64) -> f64 {
    let kept = if p_reset >= 1.0 { 0.0 } else { (1.0 - p_reset) * at_risk };
    (kept + trained).min(ceiling).max(0.0)
}

/// The most a rollback can take back on `profile`: its fastest layout's
/// steady-state share, samples (0 without periodic checkpoints or layouts).
pub fn ceiling(profile: &ModelProfile) -> f64 {
    let fastest =
        profile.configs.iter().map(|c| c.samples_per_second).filter(|v| v.is_finite()).fold(0.0, f64::max);
    ceiling_at(profile, fastest)
}

/// [`ceiling`] when the fastest speed is not the profile's own: a mixed
/// fleet's, or a plan whose speeds change per interval. `fastest` in samples/s.
pub fn ceiling_at(profile: &ModelProfile, fastest: f64) -> f64 {
    lost_work_ms(profile) * fastest / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollback_takes_back_at_most_what_was_trained_since_the_checkpoint() {
        assert_eq!(rolled_back(600.0, 250.0), 250.0);
        assert_eq!(rolled_back(600.0, 900.0), 600.0);
        assert_eq!(rolled_back(600.0, f64::INFINITY), 600.0);
    }

    #[test]
    fn the_work_at_risk_grows_with_training_resets_with_restarts_and_saturates() {
        // A certain rollback forgets everything before it, even an unbounded risk.
        assert_eq!(at_risk_after(f64::INFINITY, 1.0, 40.0, 600.0), 40.0);
        // Half a chance of a rollback keeps half.
        assert_eq!(at_risk_after(200.0, 0.5, 40.0, 600.0), 140.0);
        // Steady state: never more than the ceiling.
        assert_eq!(at_risk_after(590.0, 0.0, 40.0, 600.0), 600.0);
        // A pause trains nothing and keeps what does not roll back.
        assert_eq!(at_risk_after(300.0, 0.25, 0.0, 600.0), 225.0);
        // A certain rollback in an interval whose gross samples round to a
        // hair below zero (bounded lifetimes, GPT-6.7B, no notice: 2.8e-14
        // made `bench` fail planning liveput-truth): nothing is at risk.
        assert_eq!(at_risk_after(300.0, 1.0, -2.842_170_943_040_401e-14, 600.0), 0.0);
    }
}
