//! The last few plans and exactly what they were planned from, so that a
//! program asked again with the very same inputs is answered without being
//! run. The online policy asks that often: the planner's shadows, the
//! deferred plan and the proving shadow run the plan's own program whenever
//! their churn or options come out the same as its, and a calm stretch
//! repeats a call's programs in the next call. Over the p3 trace's five
//! models about a third of the default's programs were such repeats.
//!
//! A program's plan depends on its inputs alone, never on what the cache
//! holds (the cache is transparent: tested), so a recalled plan is the plan,
//! bit for bit. Only plans that were found are kept: a program stopped at
//! its work limit is run again. The work limit itself is left out of the
//! key, since it can only stop a program, never change the plan it finds.

use super::scenarios::Churn;
use super::{PlanOptions, ScoredPlan, Step};
use crate::{ModelProfile, ParallelConfig};

/// Plans kept. A call of the default policy runs about three programs and
/// its repeats come from the same call or the one before.
const KEPT: usize = 8;

/// Everything a program's plan is computed from but its profiles (compared
/// as values, and cloned only when a plan is kept), as bits: so `-0.0` and
/// `0.0`, equal as numbers, are different inputs.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct PlanInputs {
    bits: Vec<u64>,
}

impl PlanInputs {
    /// The inputs of one planning call besides its profiles (see `plan`'s
    /// parameters).
    pub(super) fn new(
        current: Option<ParallelConfig>,
        carried_ms: f64,
        steps: &[Step],
        churn: &[Vec<Churn>],
        interval_ms: u64,
        options: &PlanOptions,
    ) -> PlanInputs {
        let mut bits =
            Vec::with_capacity(24 + 3 * steps.len() + 2 * churn.iter().map(Vec::len).sum::<usize>());
        let layout = |bits: &mut Vec<u64>, config: Option<ParallelConfig>| match config {
            Some(c) => bits.extend([1, u64::from(c.data_parallel), u64::from(c.pipeline_stages)]),
            None => bits.push(0),
        };
        let number = |bits: &mut Vec<u64>, value: Option<f64>| match value {
            Some(v) => bits.extend([1, v.to_bits()]),
            None => bits.push(0),
        };
        layout(&mut bits, current);
        bits.extend([carried_ms.to_bits(), interval_ms, steps.len() as u64]);
        for s in steps {
            bits.extend([u64::from(s.instances_before), u64::from(s.preempted), u64::from(s.arrived)]);
        }
        bits.push(churn.len() as u64);
        for interval in churn {
            bits.push(interval.len() as u64);
            for c in interval {
                bits.extend([u64::from(c.extra), c.probability.to_bits()]);
            }
        }
        // Every field named, so a new one must be placed here.
        let PlanOptions {
            recovery,
            max_front,
            prune_above,
            prune_depths,
            terminal_ms,
            first,
            at_risk,
            parked,
            work_limit: _,
            recourse,
            pause_by_choice,
        } = *options;
        bits.extend([
            recovery.preemption_notice_ms.to_bits(),
            recovery.checkpoint_write_bytes_per_ms.to_bits(),
            max_front as u64,
            prune_above as u64,
            prune_depths as u64,
            terminal_ms.to_bits(),
            recourse.to_bits(),
            u64::from(pause_by_choice),
        ]);
        layout(&mut bits, first);
        number(&mut bits, at_risk);
        layout(&mut bits, parked.map(|p| p.layout));
        bits.push(parked.map_or(0, |p| u64::from(p.boundaries_left)));
        PlanInputs { bits }
    }
}

/// One kept plan and what it was planned from.
#[derive(Debug, Clone)]
struct Kept {
    inputs: PlanInputs,
    profile: ModelProfile,
    speeds: Option<Vec<ModelProfile>>,
    plan: ScoredPlan,
}

impl Kept {
    /// Whether it was planned from exactly these inputs and profiles.
    fn matches(&self, inputs: &PlanInputs, profile: &ModelProfile, speeds: Option<&[&ModelProfile]>) -> bool {
        // Cheapest first: the bits differ between most programs.
        self.inputs == *inputs
            && self.profile == *profile
            && match (&self.speeds, speeds) {
                (None, None) => true,
                (Some(kept), Some(given)) => {
                    kept.len() == given.len() && kept.iter().zip(given).all(|(k, &g)| k == g)
                }
                _ => false,
            }
    }
}

/// The last [`KEPT`] plans found, oldest first.
#[derive(Debug, Clone, Default)]
pub(super) struct RecentPlans {
    kept: std::collections::VecDeque<Kept>,
}

impl RecentPlans {
    /// The plan found from exactly `inputs` and these profiles, if it is
    /// still kept.
    pub(super) fn recall(
        &self,
        inputs: &PlanInputs,
        profile: &ModelProfile,
        speeds: Option<&[&ModelProfile]>,
    ) -> Option<&ScoredPlan> {
        self.kept.iter().rev().find(|k| k.matches(inputs, profile, speeds)).map(|k| &k.plan)
    }

    /// Keep `plan`, found from `inputs` and these profiles, dropping the
    /// oldest past [`KEPT`].
    pub(super) fn keep(
        &mut self,
        inputs: PlanInputs,
        profile: &ModelProfile,
        speeds: Option<&[&ModelProfile]>,
        plan: ScoredPlan,
    ) {
        if self.kept.len() == KEPT {
            self.kept.pop_front();
        }
        let speeds = speeds.map(|s| s.iter().map(|&p| p.clone()).collect());
        self.kept.push_back(Kept { inputs, profile: profile.clone(), speeds, plan });
    }
}
