//! A trace mapped onto wall-clock time: which instance joins or is preempted when.

use std::time::Duration;

use parcae_traces::{EventKind, Trace};

/// What happens to the fleet at one moment of the replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetEvent {
    /// The cloud grants a new instance: start a worker for `node`.
    Allocate {
        /// The trace node.
        node: String,
    },
    /// The cloud reclaims `node`: a notice now, the kill after the grace period
    /// (at once when the node is listed as unannounced).
    Preempt {
        /// The trace node.
        node: String,
        /// Whether the cloud warns first.
        notice: bool,
    },
}

/// One event at its wall-clock offset from the start of the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedEvent {
    /// Offset from the start of the replay.
    pub at: Duration,
    /// What happens.
    pub event: FleetEvent,
}

/// How trace time maps onto wall time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeScale {
    /// Trace milliseconds per control interval (the trace's own interval, 60 s by default).
    pub trace_interval_ms: u64,
    /// Wall-clock length of one control interval.
    pub wall_interval: Duration,
}

impl TimeScale {
    /// Wall-clock offset of a trace timestamp.
    pub fn wall(&self, trace_ms: u64) -> Duration {
        let ratio = self.wall_interval.as_secs_f64() / (self.trace_interval_ms as f64 / 1000.0);
        Duration::from_secs_f64(trace_ms as f64 / 1000.0 * ratio)
    }

    /// Wall-clock length of one control interval in whole milliseconds (at least 1): the
    /// interval the policy plans and the simulator scores a run with.
    pub fn wall_interval_ms(&self) -> u64 {
        (self.wall_interval.as_secs_f64() * 1000.0).round().max(1.0) as u64
    }

    /// Wall-clock length of a trace duration (grace periods).
    pub fn wall_len(&self, trace: Duration) -> Duration {
        self.wall(trace.as_millis() as u64)
    }
}

/// Every fleet event of `trace`, in order, at wall-clock offsets.
/// Nodes named in `unannounced` are killed without notice.
pub fn timeline(trace: &Trace, scale: TimeScale, unannounced: &[String]) -> Vec<TimedEvent> {
    trace
        .events()
        .iter()
        .map(|e| TimedEvent {
            at: scale.wall(e.t_ms),
            event: match e.kind {
                EventKind::Add => FleetEvent::Allocate { node: e.node.clone() },
                EventKind::Remove => {
                    FleetEvent::Preempt { node: e.node.clone(), notice: !unannounced.contains(&e.node) }
                }
            },
        })
        .collect()
}

/// The rest of `events` for a run that resumes at `at` (`run --resume`): every node the
/// cloud had granted and not yet reclaimed by then is allocated at once, and what comes
/// after `at` follows, shifted to the resumed run's clock (which starts at `at`).
pub fn resume_at(events: &[TimedEvent], at: Duration) -> Vec<TimedEvent> {
    let mut alive: Vec<String> = Vec::new();
    for e in events.iter().filter(|e| e.at < at) {
        match &e.event {
            FleetEvent::Allocate { node } => alive.push(node.clone()),
            FleetEvent::Preempt { node, .. } => alive.retain(|n| n != node),
        }
    }
    let now =
        alive.into_iter().map(|node| TimedEvent { at: Duration::ZERO, event: FleetEvent::Allocate { node } });
    let later =
        events.iter().filter(|e| e.at >= at).map(|e| TimedEvent { at: e.at - at, event: e.event.clone() });
    now.chain(later).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_replay_starts_the_nodes_alive_then_and_plays_the_rest() {
        let s = Duration::from_secs;
        let alloc =
            |at: u64, node: &str| TimedEvent { at: s(at), event: FleetEvent::Allocate { node: node.into() } };
        let preempt = |at: u64, node: &str| TimedEvent {
            at: s(at),
            event: FleetEvent::Preempt { node: node.into(), notice: true },
        };
        let events = vec![alloc(0, "a"), alloc(0, "b"), preempt(4, "a"), alloc(6, "c"), preempt(12, "b")];
        assert_eq!(
            resume_at(&events, s(8)),
            vec![
                TimedEvent { at: s(0), event: FleetEvent::Allocate { node: "b".into() } },
                TimedEvent { at: s(0), event: FleetEvent::Allocate { node: "c".into() } },
                TimedEvent { at: s(4), event: FleetEvent::Preempt { node: "b".into(), notice: true } },
            ]
        );
        assert_eq!(resume_at(&events, Duration::ZERO), events, "resuming at 0 is the whole replay");
    }

    #[test]
    fn scales_trace_time_onto_the_wall_interval() {
        let scale = TimeScale { trace_interval_ms: 60_000, wall_interval: Duration::from_secs(3) };
        assert_eq!(scale.wall(60_000), Duration::from_secs(3));
        assert_eq!(scale.wall(30_000), Duration::from_millis(1500));
        assert_eq!(scale.wall_len(Duration::from_secs(120)), Duration::from_secs(6));
    }
}
