//! What went wrong in a guest call, in terms a user can act on.

use std::fmt;

/// The class of a policy failure. Each has its own counter so a report can say
/// "3 timeouts, 1 invalid plan" rather than "4 errors".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// The guest executed a trap (panic, `unreachable`, out-of-bounds access...).
    Trap,
    /// The call burnt its whole fuel budget (typically an endless loop).
    FuelExhausted,
    /// The call ran past its wall-clock deadline.
    DeadlineExceeded,
    /// The guest asked for more memory or table space than it is allowed.
    MemoryLimit,
    /// The guest tried to block (sleep or wait), which no policy may do.
    Blocked,
    /// The guest answered, but the answer failed validation.
    InvalidAnswer,
    /// The guest returned `err(..)` itself.
    GuestError,
    /// The guest does not export the interface that was called.
    Unsupported,
    /// The policy was disabled after too many consecutive faults.
    Quarantined,
}

impl FaultKind {
    /// Every kind, in report order.
    pub const ALL: [FaultKind; 9] = [
        FaultKind::Trap,
        FaultKind::FuelExhausted,
        FaultKind::DeadlineExceeded,
        FaultKind::MemoryLimit,
        FaultKind::Blocked,
        FaultKind::InvalidAnswer,
        FaultKind::GuestError,
        FaultKind::Unsupported,
        FaultKind::Quarantined,
    ];

    /// A short stable name for logs, tables and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Trap => "trap",
            FaultKind::FuelExhausted => "fuel-exhausted",
            FaultKind::DeadlineExceeded => "deadline-exceeded",
            FaultKind::MemoryLimit => "memory-limit",
            FaultKind::Blocked => "blocked",
            FaultKind::InvalidAnswer => "invalid-answer",
            FaultKind::GuestError => "guest-error",
            FaultKind::Unsupported => "unsupported",
            FaultKind::Quarantined => "quarantined",
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One failed guest call: which policy, which call, what kind, and the details.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy '{policy}' {call}: {kind}: {detail}")]
pub struct PolicyFault {
    /// The policy's name, so logs say which guest misbehaved.
    pub policy: String,
    /// `instantiate`, `predict`, `optimize` or `configure`.
    pub call: &'static str,
    /// The class of fault, which the counters and the fallback decision use.
    pub kind: FaultKind,
    /// The specifics (trap message, budget exceeded, invalid field).
    pub detail: String,
}

/// Counters of a policy's calls and faults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Calls answered by the guest.
    pub guest_answers: u64,
    /// Calls answered by the fallback policy.
    pub fallbacks: u64,
    /// Fuel the heaviest call the guest answered burned: how close the policy
    /// runs to its budget, where a call over it falls back (0 before any answer).
    pub heaviest_fuel: u64,
    /// The fuel budget of each call (0 before any answer).
    pub fuel_per_call: u64,
    by_kind: [u64; FaultKind::ALL.len()],
}

impl FaultCounts {
    pub(crate) fn answered(&mut self, fuel_used: u64, fuel_per_call: u64) {
        self.guest_answers += 1;
        self.heaviest_fuel = self.heaviest_fuel.max(fuel_used);
        self.fuel_per_call = fuel_per_call;
    }

    /// The heaviest answered call's share of the budget, `0..=1` (`None`
    /// before the guest answered).
    pub fn heaviest_fuel_share(&self) -> Option<f64> {
        (self.guest_answers > 0 && self.fuel_per_call > 0)
            .then(|| self.heaviest_fuel as f64 / self.fuel_per_call as f64)
    }

    pub(crate) fn record(&mut self, kind: FaultKind) {
        self.fallbacks += 1;
        self.by_kind[kind as usize] += 1;
    }

    /// Faults of one kind so far.
    pub fn count(&self, kind: FaultKind) -> u64 {
        self.by_kind[kind as usize]
    }

    /// All faults so far.
    pub fn total_faults(&self) -> u64 {
        self.by_kind.iter().sum()
    }

    /// Non-zero counters as `(kind, count)`, in report order.
    pub fn nonzero(&self) -> impl Iterator<Item = (FaultKind, u64)> + '_ {
        FaultKind::ALL.into_iter().map(|k| (k, self.count(k))).filter(|&(_, n)| n > 0)
    }
}

impl fmt::Display for FaultCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} guest answers, {} fallbacks", self.guest_answers, self.fallbacks)?;
        let mut kinds = self.nonzero().peekable();
        if kinds.peek().is_some() {
            f.write_str(" (")?;
            for (i, (kind, n)) in kinds.enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{n} {kind}")?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}
