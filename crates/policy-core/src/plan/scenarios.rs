//! Uncertain preemptions: the [`Churn`] a caller hedges against, and the
//! scenarios (a mixture of steps) it turns each interval into.

use super::Step;
use crate::liveput::LiveputError;

/// Extra preemptions that may hit one interval on top of its [`Step`], each
/// replaced by an arrival in the same interval (churn: the fleet ends at the
/// same size, but the running layout loses instances), with their probability.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Churn {
    /// Instances preempted on top of the step's own (and as many arrivals).
    pub extra: u32,
    /// Probability of this outcome; the outcomes of one interval sum to at
    /// most 1, the rest is the step as given.
    pub probability: f64,
}

/// One interval as the program sees it: scenarios `(probability, step)`, all
/// from the same instances to the same instances.
pub(super) type Mixture = Vec<(f64, Step)>;

/// The scenarios of every interval: the step as given with the probability
/// `churn` leaves, then one per churn entry (entries of probability 0 and
/// extras clamped to nothing dropped; equal steps merged).
pub(super) fn mixtures(steps: &[Step], churn: &[Vec<Churn>]) -> Result<Vec<Mixture>, LiveputError> {
    let mut out = Vec::with_capacity(steps.len());
    for (i, &step) in steps.iter().enumerate() {
        let entries = churn.get(i).map_or(&[][..], Vec::as_slice);
        let mut total = 0.0f64;
        for c in entries {
            if !(c.probability.is_finite() && c.probability >= 0.0) {
                return Err(LiveputError::BadChurn { interval: i, probability: c.probability });
            }
            total += c.probability;
        }
        if total > 1.0 + 1e-9 {
            return Err(LiveputError::BadChurn { interval: i, probability: total });
        }
        let mut mix: Mixture = Vec::with_capacity(entries.len() + 1);
        let mut add = |p: f64, s: Step| {
            if p <= 0.0 {
                return;
            }
            match mix.iter_mut().find(|(_, t)| *t == s) {
                Some(slot) => slot.0 += p,
                None => mix.push((p, s)),
            }
        };
        add((1.0 - total).max(0.0), step);
        for c in entries {
            let preempted = step.preempted.saturating_add(c.extra).min(step.instances_before);
            let extra = preempted - step.preempted;
            add(c.probability, Step { preempted, arrived: step.arrived.saturating_add(extra), ..step });
        }
        if mix.is_empty() {
            mix.push((1.0, step));
        }
        out.push(mix);
    }
    Ok(out)
}
