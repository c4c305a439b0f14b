//! A policy that always answers: the guest's answer when it is valid, the
//! built-in safe policy's otherwise.

use std::sync::Arc;

use parcae_policy_core::reactive::{Persistence, ThroughputOptimal};
use parcae_policy_core::{self as core, Optimizer, Predictor};

use crate::component::PolicyComponent;
use crate::fault::{FaultCounts, FaultKind, PolicyFault};
use crate::instance::PolicyInstance;

/// Who produced an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The loaded guest policy.
    Guest,
    /// The built-in safe policy (training: persistence forecast, reactive
    /// throughput-optimal plan; serving: SpotServe's optimizer).
    Fallback,
}

/// An answer and, when the fallback produced it, why.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer<T> {
    /// The forecast or plan to act on.
    pub value: T,
    /// Whether the guest or the fallback produced it.
    pub source: Source,
    /// Why the guest's answer was not used (None when it was).
    pub fault: Option<PolicyFault>,
}

/// Consecutive faults after which a guest is no longer called.
pub const DEFAULT_QUARANTINE_AFTER: u32 = 3;

/// A guest slot: the instance, its counters and its fault streak.
pub(crate) struct Slot {
    pub(crate) instance: usize,
    pub(crate) counts: FaultCounts,
    pub(crate) streak: u32,
}

/// Predictor and optimizer, each either a guest or the fallback. A guest that
/// faults `quarantine_after` times in a row is quarantined: later calls go
/// straight to the fallback, so a looping policy costs one budget, not one per
/// interval for the rest of the run.
pub struct GuardedPolicy {
    instances: Vec<PolicyInstance>,
    predictor: Option<Slot>,
    optimizer: Option<Slot>,
    quarantine_after: u32,
}

impl GuardedPolicy {
    /// Use `predictor` and `optimizer` (each optional: `None` means the built-in
    /// policy). The same component may serve both; it then runs as one instance.
    pub fn new(predictor: Option<Arc<PolicyComponent>>, optimizer: Option<Arc<PolicyComponent>>) -> Self {
        let mut instances: Vec<PolicyInstance> = Vec::new();
        let mut slot_for = |component: Option<Arc<PolicyComponent>>| {
            component.map(|c| {
                let instance =
                    instances.iter().position(|i| Arc::ptr_eq(i.component(), &c)).unwrap_or_else(|| {
                        instances.push(PolicyInstance::new(c));
                        instances.len() - 1
                    });
                Slot { instance, counts: FaultCounts::default(), streak: 0 }
            })
        };
        let predictor = slot_for(predictor);
        let optimizer = slot_for(optimizer);
        Self { instances, predictor, optimizer, quarantine_after: DEFAULT_QUARANTINE_AFTER }
    }

    /// Change how many consecutive faults quarantine a guest (0 = never).
    pub fn with_quarantine_after(mut self, faults: u32) -> Self {
        self.quarantine_after = faults;
        self
    }

    /// Name of the guest predictor, if any.
    pub fn predictor_name(&self) -> Option<&str> {
        self.predictor.as_ref().map(|s| self.instances[s.instance].component().name())
    }

    /// Name of the guest optimizer, if any.
    pub fn optimizer_name(&self) -> Option<&str> {
        self.optimizer.as_ref().map(|s| self.instances[s.instance].component().name())
    }

    /// Counters of the predictor slot (all zero when it is built in).
    pub fn predictor_counts(&self) -> FaultCounts {
        self.predictor.as_ref().map(|s| s.counts.clone()).unwrap_or_default()
    }

    /// Counters of the optimizer slot (all zero when it is built in).
    pub fn optimizer_counts(&self) -> FaultCounts {
        self.optimizer.as_ref().map(|s| s.counts.clone()).unwrap_or_default()
    }

    /// A valid forecast for `request`, always.
    pub fn predict(&mut self, request: &core::PredictRequest) -> Answer<Vec<core::IntervalStats>> {
        let quarantine_after = self.quarantine_after;
        let outcome = self.predictor.as_mut().map(|slot| {
            guarded_call(slot, quarantine_after, &mut self.instances[slot.instance], |i| i.predict(request))
        });
        finish(outcome, || Persistence.predict(request).expect("the persistence predictor cannot fail"))
    }

    /// A valid plan for `request`, always.
    pub fn optimize(&mut self, request: &core::OptimizeRequest) -> Answer<core::Plan> {
        let quarantine_after = self.quarantine_after;
        let outcome = self.optimizer.as_mut().map(|slot| {
            guarded_call(slot, quarantine_after, &mut self.instances[slot.instance], |i| i.optimize(request))
        });
        finish(outcome, || {
            ThroughputOptimal.optimize(request).expect("the throughput-optimal optimizer cannot fail")
        })
    }
}

/// Call the guest `instance` (the slot's) unless quarantined; count and log what happened.
pub(crate) fn guarded_call<T>(
    slot: &mut Slot,
    quarantine_after: u32,
    instance: &mut PolicyInstance,
    call: impl FnOnce(&mut PolicyInstance) -> Result<T, PolicyFault>,
) -> Result<T, PolicyFault> {
    if quarantine_after > 0 && slot.streak >= quarantine_after {
        slot.counts.record(FaultKind::Quarantined);
        return Err(PolicyFault {
            policy: instance.component().name().to_string(),
            call: "call",
            kind: FaultKind::Quarantined,
            detail: format!("disabled after {} consecutive faults", slot.streak),
        });
    }
    match call(instance) {
        Ok(value) => {
            slot.streak = 0;
            slot.counts.answered(instance.last_fuel_used(), instance.component().limits.fuel_per_call);
            Ok(value)
        }
        Err(fault) => {
            slot.streak += 1;
            slot.counts.record(fault.kind);
            tracing::warn!(
                target: "parcae::policy",
                policy = %fault.policy,
                call = fault.call,
                kind = %fault.kind,
                "{}; falling back to the built-in policy for this interval",
                fault.detail
            );
            if quarantine_after > 0 && slot.streak == quarantine_after {
                tracing::error!(
                    target: "parcae::policy",
                    policy = %fault.policy,
                    "{quarantine_after} consecutive faults: policy quarantined, built-in policy takes over"
                );
            }
            Err(fault)
        }
    }
}

/// The guest's answer, or the fallback's with the fault that made it needed.
pub(crate) fn finish<T>(outcome: Option<Result<T, PolicyFault>>, fallback: impl FnOnce() -> T) -> Answer<T> {
    match outcome {
        Some(Ok(value)) => Answer { value, source: Source::Guest, fault: None },
        Some(Err(fault)) => Answer { value: fallback(), source: Source::Fallback, fault: Some(fault) },
        None => Answer { value: fallback(), source: Source::Fallback, fault: None },
    }
}
