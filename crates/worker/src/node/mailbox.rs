//! Where messages from peers wait until the compute thread asks for them.
//!
//! Network tasks deposit payloads under a key as they arrive, in any order;
//! the (blocking) compute thread takes them by key with a timeout, so a dead
//! peer turns into an error instead of a hang.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// What a payload is, and for which step attempt / micro-batch / layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    /// Activations into this stage: (attempt, micro-batch).
    Activation { attempt: u64, micro_batch: u32 },
    /// Gradients into this stage from downstream: (attempt, micro-batch).
    Gradient { attempt: u64, micro_batch: u32 },
    /// A replica's gradient buffer for the all-reduce: (attempt, from replica).
    Reduce { attempt: u64, replica: u32 },
    /// A layer's migrated state: (reconfiguration epoch, layer).
    State { epoch: u64, layer: u32 },
}

impl Key {
    /// The attempt or epoch the key belongs to (for discarding stale payloads).
    fn generation(&self) -> (bool, u64) {
        match *self {
            Key::Activation { attempt, .. } | Key::Gradient { attempt, .. } | Key::Reduce { attempt, .. } => {
                (true, attempt)
            }
            Key::State { epoch, .. } => (false, epoch),
        }
    }
}

/// The mailbox could not deliver.
#[derive(Debug, thiserror::Error)]
pub enum MailboxError {
    #[error("nothing arrived for {key:?} within {timeout:?} (peer lost?)")]
    Timeout { key: Key, timeout: Duration },
    #[error("step attempt {attempt} was cancelled (a peer was preempted)")]
    Cancelled { attempt: u64 },
    #[error("reconfiguration {epoch} was cancelled (a peer was preempted)")]
    CancelledEpoch { epoch: u64 },
}

#[derive(Default)]
struct Inner {
    slots: HashMap<Key, Vec<u8>>,
    /// Training payloads of attempts up to this one will never come.
    cancelled_through: u64,
    /// State of reconfiguration epochs up to this one will never come.
    cancelled_epochs_through: u64,
}

/// Payloads by key, with a condition variable for waiting takers.
#[derive(Default)]
pub struct Mailbox {
    inner: Mutex<Inner>,
    arrived: Condvar,
}

impl Mailbox {
    pub fn new() -> Self {
        Self::default()
    }

    /// Deposits a payload (a duplicate key replaces the older payload).
    pub fn put(&self, key: Key, payload: Vec<u8>) {
        let mut inner = self.inner.lock().expect("mailbox lock");
        inner.slots.insert(key, payload);
        self.arrived.notify_all();
    }

    /// Takes the payload for `key`, waiting up to `timeout`, or failing at once
    /// when the key's step attempt is cancelled.
    pub fn take(&self, key: Key, timeout: Duration) -> Result<Vec<u8>, MailboxError> {
        let deadline = Instant::now() + timeout;
        let mut inner = self.inner.lock().expect("mailbox lock");
        loop {
            if let Some(payload) = inner.slots.remove(&key) {
                return Ok(payload);
            }
            match key.generation() {
                (true, attempt) if attempt <= inner.cancelled_through => {
                    return Err(MailboxError::Cancelled { attempt });
                }
                (false, epoch) if epoch <= inner.cancelled_epochs_through => {
                    return Err(MailboxError::CancelledEpoch { epoch });
                }
                _ => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(MailboxError::Timeout { key, timeout });
            }
            inner = self.arrived.wait_timeout(inner, deadline - now).expect("mailbox lock").0;
        }
    }

    /// Gives up step attempt `attempt` (and earlier): waiting takers fail now.
    pub fn cancel_attempt(&self, attempt: u64) {
        let mut inner = self.inner.lock().expect("mailbox lock");
        inner.cancelled_through = inner.cancelled_through.max(attempt);
        self.arrived.notify_all();
    }

    /// Gives up reconfiguration `epoch` (and earlier): state takers fail now.
    pub fn cancel_epoch(&self, epoch: u64) {
        let mut inner = self.inner.lock().expect("mailbox lock");
        inner.cancelled_epochs_through = inner.cancelled_epochs_through.max(epoch);
        self.arrived.notify_all();
    }

    /// Drops training payloads of attempts before `attempt` (an aborted step's leftovers).
    pub fn discard_attempts_before(&self, attempt: u64) {
        let mut inner = self.inner.lock().expect("mailbox lock");
        inner.slots.retain(|k, _| !matches!(k.generation(), (true, a) if a < attempt));
    }

    /// Drops migrated state of epochs before `epoch`.
    pub fn discard_epochs_before(&self, epoch: u64) {
        let mut inner = self.inner.lock().expect("mailbox lock");
        inner.slots.retain(|k, _| !matches!(k.generation(), (false, e) if e < epoch));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn take_waits_for_a_later_put_and_times_out_otherwise() {
        let mailbox = Arc::new(Mailbox::new());
        let key = Key::Activation { attempt: 3, micro_batch: 1 };
        let writer = {
            let mailbox = mailbox.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                mailbox.put(key, vec![1, 2, 3]);
            })
        };
        assert_eq!(mailbox.take(key, Duration::from_secs(5)).unwrap(), vec![1, 2, 3]);
        writer.join().unwrap();
        let missing = mailbox.take(Key::Gradient { attempt: 3, micro_batch: 0 }, Duration::from_millis(20));
        assert!(matches!(missing, Err(MailboxError::Timeout { .. })));
    }

    #[test]
    fn stale_attempts_and_epochs_are_discarded() {
        let mailbox = Mailbox::new();
        mailbox.put(Key::Reduce { attempt: 1, replica: 0 }, vec![1]);
        mailbox.put(Key::Reduce { attempt: 2, replica: 0 }, vec![2]);
        mailbox.put(Key::State { epoch: 1, layer: 0 }, vec![3]);
        mailbox.discard_attempts_before(2);
        let short = Duration::from_millis(1);
        assert!(mailbox.take(Key::Reduce { attempt: 1, replica: 0 }, short).is_err());
        assert_eq!(mailbox.take(Key::Reduce { attempt: 2, replica: 0 }, short).unwrap(), vec![2]);
        mailbox.discard_epochs_before(2);
        assert!(mailbox.take(Key::State { epoch: 1, layer: 0 }, short).is_err());
    }

    #[test]
    fn cancelling_an_attempt_wakes_its_takers_at_once() {
        let mailbox = Arc::new(Mailbox::new());
        let canceller = {
            let mailbox = mailbox.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                mailbox.cancel_attempt(7);
            })
        };
        let started = Instant::now();
        let result = mailbox.take(Key::Gradient { attempt: 7, micro_batch: 0 }, Duration::from_secs(30));
        assert!(matches!(result, Err(MailboxError::Cancelled { attempt: 7 })));
        assert!(started.elapsed() < Duration::from_secs(5));
        canceller.join().unwrap();
        // A later attempt is unaffected.
        mailbox.put(Key::Gradient { attempt: 8, micro_batch: 0 }, vec![1]);
        assert!(mailbox.take(Key::Gradient { attempt: 8, micro_batch: 0 }, Duration::from_millis(1)).is_ok());
    }
}
