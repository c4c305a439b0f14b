//! Who sends which layers to whom when the configuration changes.
//!
//! Surviving workers already hold the state of some layers. The planner maps
//! workers onto the (replica, stage) slots of the new layout so that as much
//! state as possible is already in place (maximum-weight bipartite matching,
//! solved with Kuhn-Munkres as in SpotServe), then lists the layer transfers
//! that fill in the rest, spreading the sending over every holder of a layer.
//! When some layer has no surviving holder the job restarts from its last
//! checkpoint: every slot loads every layer from there.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::assignment::max_weight_assignment;
use crate::layout::{Layout, Slot};

/// A worker's identity for the lifetime of a job (never reused).
pub type WorkerId = u64;

/// What an available worker holds before the reconfiguration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Holding {
    /// The worker this describes.
    pub worker: WorkerId,
    /// Layers whose current state the worker holds; empty for a worker that just joined.
    pub layers: Range<usize>,
    /// Under a preemption notice: it may still send its state but takes no slot.
    pub leaving: bool,
    /// How many times as long its compute takes as the fleet's nominal worker (its
    /// instance type's speed; 1 = nominal): see [`plan_migration`] on mixed fleets.
    #[serde(default = "nominal_speed")]
    pub slowdown: f64,
}

fn nominal_speed() -> f64 {
    1.0
}

impl Holding {
    /// A worker of nominal speed.
    pub fn new(worker: WorkerId, layers: Range<usize>, leaving: bool) -> Self {
        Holding { worker, layers, leaving, slowdown: 1.0 }
    }
}

/// Where a layer's state comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TransferSource {
    /// A live worker that holds it now (sent over QUIC).
    Worker(WorkerId),
    /// The last checkpoint (at step 0 that is the seeded initial state).
    Checkpoint,
}

/// One layer's state moving to a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    /// The layer whose state moves.
    pub layer: usize,
    /// Who supplies it.
    pub from: TransferSource,
    /// The worker whose new slot needs it.
    pub to: WorkerId,
    /// Its size, for the cost model and the byte counters.
    pub bytes: u64,
}

/// The coarsest thing a reconfiguration does, in the cost model's own terms
/// (the same type `bench` counts): none (same layout, nothing moves),
/// intra-stage (every stage keeps enough holders: regroup only), inter-stage
/// (some stage is short of holders: its state is copied to new ones),
/// repartition (the stage boundaries change), restart (a layer lost every holder).
pub use parcae_policy_core::liveput::MigrationKind;

/// How workers are matched to slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AssignmentStrategy {
    /// Maximum bytes already in place (Kuhn-Munkres).
    KuhnMunkres,
    /// Slots in order to workers in order: the baseline the matching is measured against.
    Naive,
}

/// The complete recipe for one reconfiguration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationPlan {
    /// The costliest kind of move the plan makes (what the cost model charges for).
    pub kind: MigrationKind,
    /// The worker of every slot of the new layout, replica-major.
    pub assignment: Vec<(Slot, WorkerId)>,
    /// Workers left without a slot (they keep nothing and wait).
    pub idle: Vec<WorkerId>,
    /// Every layer a worker must receive before the new layout can train.
    pub transfers: Vec<Transfer>,
    /// Bytes sent worker to worker.
    pub bytes_moved: u64,
    /// Bytes read from the checkpoint.
    pub bytes_from_checkpoint: u64,
}

impl MigrationPlan {
    /// The slot a worker takes, if any.
    pub fn slot_of(&self, worker: WorkerId) -> Option<Slot> {
        self.assignment.iter().find(|(_, w)| *w == worker).map(|(slot, _)| *slot)
    }
}

/// Why no plan exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MigrationError {
    /// The layout has more slots than there are staying workers.
    #[error("the layout needs {needed} workers but only {available} are available")]
    TooFewWorkers {
        /// Slots in the layout.
        needed: usize,
        /// Workers that may take a slot.
        available: usize,
    },
    /// The caller listed a worker twice, so its holding is ambiguous.
    #[error("worker {worker} appears twice among the available workers")]
    DuplicateWorker {
        /// The repeated worker.
        worker: WorkerId,
    },
    /// A worker claims layers the model does not have.
    #[error("layer range {start}..{end} of worker {worker} is outside the model's {layers} layers")]
    BadHolding {
        /// The worker claiming them.
        worker: WorkerId,
        /// First claimed layer.
        start: usize,
        /// One past the last claimed layer.
        end: usize,
        /// Layers in the model.
        layers: usize,
    },
    /// The target layout has gaps or overlaps, so some layer has no owner.
    #[error("the layout's stages do not cover the model's {layers} layers contiguously")]
    BadLayout {
        /// Layers in the model.
        layers: usize,
    },
}

/// The pace (largest slowdown) each replica of `target` gets when the fastest `D x P`
/// candidates are dealt out `P` at a time, fastest first; `None` when every candidate has
/// the same speed (nothing to place).
fn replica_paces(holdings: &[Holding], candidates: &[usize], target: &Layout) -> Option<Vec<f64>> {
    let mut speeds: Vec<f64> = candidates.iter().map(|&i| holdings[i].slowdown).collect();
    if speeds.iter().all(|s| *s == speeds[0]) {
        return None;
    }
    speeds.sort_by(f64::total_cmp);
    let p = target.pipeline_stages.max(1);
    Some((0..target.data_parallel).map(|r| speeds[(r + 1) * p - 1]).collect())
}

fn overlap_bytes(layer_bytes: &[u64], a: &Range<usize>, b: &Range<usize>) -> u64 {
    let (start, end) = (a.start.max(b.start), a.end.min(b.end));
    if start >= end { 0 } else { layer_bytes[start..end].iter().sum() }
}

/// Plans the move from `holdings` (every available worker, survivors and
/// newcomers alike) to `target`. `previous` is the layout the job ran before
/// (None at the start or after a pause), used to classify the move.
///
/// **Mixed fleets.** A replica steps at the pace of its slowest worker, so when the
/// workers differ in speed ([`Holding::slowdown`]) the Kuhn-Munkres assignment places
/// replicas by type before it saves bytes: the fastest `D x P` workers are the ones used,
/// taken `P` at a time (fastest first) to set each replica's pace, and a slot's weight
/// for a worker no slower than its replica's pace exceeds any state in place. Among such
/// placements the one that moves the fewest bytes wins, as with one speed.
pub fn plan_migration(
    layer_bytes: &[u64],
    previous: Option<&Layout>,
    holdings: &[Holding],
    target: &Layout,
    strategy: AssignmentStrategy,
) -> Result<MigrationPlan, MigrationError> {
    let layers = layer_bytes.len();
    let covers = target.stages.first().map(|r| r.start) == Some(0)
        && target.stages.last().map(|r| r.end) == Some(layers)
        && target.stages.windows(2).all(|w| w[0].end == w[1].start)
        && target.stages.iter().all(|r| !r.is_empty())
        && target.stages.len() == target.pipeline_stages;
    if !covers {
        return Err(MigrationError::BadLayout { layers });
    }
    let mut seen = std::collections::BTreeSet::new();
    for h in holdings {
        if !seen.insert(h.worker) {
            return Err(MigrationError::DuplicateWorker { worker: h.worker });
        }
        if h.layers.end > layers || h.layers.start > h.layers.end {
            return Err(MigrationError::BadHolding {
                worker: h.worker,
                start: h.layers.start,
                end: h.layers.end,
                layers,
            });
        }
    }
    let slots: Vec<Slot> = target.slots().collect();
    // Only workers that stay can take a slot; leaving ones still send.
    let candidates: Vec<usize> = (0..holdings.len()).filter(|&i| !holdings[i].leaving).collect();
    if slots.len() > candidates.len() {
        return Err(MigrationError::TooFewWorkers { needed: slots.len(), available: candidates.len() });
    }

    // Which layers survive somewhere?
    let lost = (0..layers).any(|l| !holdings.iter().any(|h| h.layers.contains(&l)));

    let columns: Vec<usize> = match strategy {
        // Nothing in place to keep: the fastest workers, replica by replica (slots are
        // replica-major), so each replica's workers share a pace.
        _ if lost => {
            let mut by_speed = candidates.clone();
            by_speed.sort_by(|&a, &b| holdings[a].slowdown.total_cmp(&holdings[b].slowdown));
            by_speed[..slots.len()].to_vec()
        }
        AssignmentStrategy::Naive => candidates[..slots.len()].to_vec(),
        AssignmentStrategy::KuhnMunkres => {
            let pace = replica_paces(holdings, &candidates, target);
            // More than all the state there is: keeping a replica at its pace comes first.
            let coherent: u64 = layer_bytes.iter().sum::<u64>().saturating_add(1);
            let weights: Vec<Vec<u64>> = slots
                .iter()
                .map(|&slot| {
                    let want = target.layers(slot);
                    candidates
                        .iter()
                        .map(|&i| {
                            let in_place = overlap_bytes(layer_bytes, &holdings[i].layers, &want);
                            let keeps_pace =
                                pace.as_ref().is_none_or(|p| holdings[i].slowdown <= p[slot.replica]);
                            in_place + if keeps_pace { coherent } else { 0 }
                        })
                        .collect()
                })
                .collect();
            max_weight_assignment(&weights).into_iter().map(|c| candidates[c]).collect()
        }
    };
    let assignment: Vec<(Slot, WorkerId)> =
        slots.iter().zip(&columns).map(|(&slot, &col)| (slot, holdings[col].worker)).collect();
    let idle: Vec<WorkerId> =
        candidates.iter().filter(|i| !columns.contains(i)).map(|&i| holdings[i].worker).collect();

    let mut transfers = Vec::new();
    let mut sent: BTreeMap<WorkerId, u64> = BTreeMap::new();
    for (&(slot, worker), &col) in assignment.iter().zip(&columns) {
        let held = if lost { 0..0 } else { holdings[col].layers.clone() };
        for layer in target.layers(slot) {
            if held.contains(&layer) {
                continue;
            }
            let bytes = layer_bytes[layer];
            let from = if lost {
                TransferSource::Checkpoint
            } else {
                // The least-loaded holder sends; ties go to the lowest id.
                let sender = holdings
                    .iter()
                    .filter(|h| h.layers.contains(&layer))
                    .min_by_key(|h| (sent.get(&h.worker).copied().unwrap_or(0), h.worker))
                    .expect("a surviving holder exists when nothing is lost")
                    .worker;
                *sent.entry(sender).or_default() += bytes;
                TransferSource::Worker(sender)
            };
            transfers.push(Transfer { layer, from, to: worker, bytes });
        }
    }

    // The cost model's rules (liveput.rs): restart when state is lost,
    // repartition when the boundaries move, inter-stage when some stage must be
    // copied to new holders, intra-stage when the holders only regroup.
    let kind = if lost {
        MigrationKind::Restart
    } else if previous.is_some_and(|prev| prev.stages != target.stages) {
        MigrationKind::Repartition
    } else if !transfers.is_empty() {
        MigrationKind::InterStage
    } else if previous != Some(target) {
        MigrationKind::IntraStage
    } else {
        MigrationKind::None
    };
    let bytes_moved =
        transfers.iter().filter(|t| matches!(t.from, TransferSource::Worker(_))).map(|t| t.bytes).sum();
    let bytes_from_checkpoint =
        transfers.iter().filter(|t| t.from == TransferSource::Checkpoint).map(|t| t.bytes).sum();
    Ok(MigrationPlan { kind, assignment, idle, transfers, bytes_moved, bytes_from_checkpoint })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(d: usize, stages: Vec<Range<usize>>) -> Layout {
        Layout { data_parallel: d, pipeline_stages: stages.len(), stages, shares: Vec::new() }
    }

    fn h(worker: WorkerId, layers: Range<usize>) -> Holding {
        Holding::new(worker, layers, false)
    }

    const BYTES: [u64; 4] = [10, 10, 10, 10];

    #[test]
    fn unchanged_fleet_moves_nothing() {
        let target = layout(2, vec![0..2, 2..4]);
        let holdings = [h(1, 0..2), h(2, 2..4), h(3, 0..2), h(4, 2..4)];
        let plan = plan_migration(&BYTES, Some(&target), &holdings, &target, AssignmentStrategy::KuhnMunkres)
            .unwrap();
        assert_eq!(plan.kind, MigrationKind::None);
        assert!(plan.transfers.is_empty());
        assert_eq!(plan.bytes_moved, 0);
    }

    #[test]
    fn a_replacement_replica_copies_from_a_survivor_of_its_stage() {
        let target = layout(2, vec![0..2, 2..4]);
        // Worker 4 (stage 1 of replica 1) died; worker 5 joined.
        let holdings = [h(1, 0..2), h(2, 2..4), h(3, 0..2), h(5, 0..0)];
        let plan = plan_migration(&BYTES, Some(&target), &holdings, &target, AssignmentStrategy::KuhnMunkres)
            .unwrap();
        assert_eq!(plan.kind, MigrationKind::InterStage);
        assert_eq!(plan.bytes_moved, 20);
        assert!(plan.transfers.iter().all(|t| t.to == 5 && t.from == TransferSource::Worker(2)));
    }

    #[test]
    fn matching_beats_naive_order_when_survivors_are_shuffled() {
        let target = layout(2, vec![0..2, 2..4]);
        // Listed so that slot order disagrees with what each worker holds.
        let holdings = [h(1, 2..4), h(2, 0..2), h(3, 2..4), h(4, 0..2)];
        let km = plan_migration(&BYTES, Some(&target), &holdings, &target, AssignmentStrategy::KuhnMunkres)
            .unwrap();
        let naive =
            plan_migration(&BYTES, Some(&target), &holdings, &target, AssignmentStrategy::Naive).unwrap();
        assert_eq!(km.bytes_moved, 0);
        assert_eq!(km.kind, MigrationKind::None);
        assert_eq!(naive.bytes_moved, 80);
        assert_eq!(naive.kind, MigrationKind::InterStage);
    }

    #[test]
    fn shrinking_the_pipeline_is_a_repartition_that_reuses_overlaps() {
        let old = layout(1, vec![0..1, 1..2, 2..3, 3..4]);
        let target = layout(1, vec![0..2, 2..4]);
        let holdings = [h(1, 0..1), h(2, 1..2), h(3, 2..3), h(4, 3..4)];
        let plan =
            plan_migration(&BYTES, Some(&old), &holdings, &target, AssignmentStrategy::KuhnMunkres).unwrap();
        assert_eq!(plan.kind, MigrationKind::Repartition);
        assert_eq!(plan.bytes_moved, 20);
        assert_eq!(plan.idle.len(), 2);
    }

    #[test]
    fn losing_every_holder_of_a_layer_restarts_from_the_checkpoint() {
        let target = layout(1, vec![0..2, 2..4]);
        let holdings = [h(1, 0..2), h(7, 0..0)];
        let plan = plan_migration(&BYTES, Some(&target), &holdings, &target, AssignmentStrategy::KuhnMunkres)
            .unwrap();
        assert_eq!(plan.kind, MigrationKind::Restart);
        assert_eq!(plan.bytes_from_checkpoint, 40);
        assert_eq!(plan.bytes_moved, 0);
    }

    #[test]
    fn a_worker_under_notice_hands_off_its_state_and_takes_no_slot() {
        let target = layout(1, vec![0..2, 2..4]);
        let leaving = Holding::new(2, 2..4, true);
        let holdings = [h(1, 0..2), leaving, h(3, 0..0)];
        let plan = plan_migration(&BYTES, Some(&target), &holdings, &target, AssignmentStrategy::KuhnMunkres)
            .unwrap();
        assert_eq!(plan.kind, MigrationKind::InterStage);
        assert_eq!(plan.slot_of(2), None);
        assert_eq!(plan.slot_of(3), Some(Slot { replica: 0, stage: 1 }));
        assert!(plan.transfers.iter().all(|t| t.from == TransferSource::Worker(2) && t.to == 3));
        assert!(plan.idle.is_empty());
    }

    #[test]
    fn losing_a_replica_with_enough_holders_left_only_regroups() {
        let before = layout(3, vec![0..2, 2..4]);
        let target = layout(2, vec![0..2, 2..4]);
        // Replica 1 (workers 3 and 4) is gone; every stage keeps two holders.
        let holdings = [h(1, 0..2), h(2, 2..4), h(5, 0..2), h(6, 2..4)];
        let plan = plan_migration(&BYTES, Some(&before), &holdings, &target, AssignmentStrategy::KuhnMunkres)
            .unwrap();
        assert_eq!(plan.kind, MigrationKind::IntraStage);
        assert!(plan.transfers.is_empty());
    }

    #[test]
    fn bad_inputs_are_errors() {
        let target = layout(2, vec![0..2, 2..4]);
        let few = [h(1, 0..2)];
        assert!(matches!(
            plan_migration(&BYTES, None, &few, &target, AssignmentStrategy::KuhnMunkres),
            Err(MigrationError::TooFewWorkers { needed: 4, available: 1 })
        ));
        let dup = [h(1, 0..2), h(1, 2..4), h(2, 0..0), h(3, 0..0)];
        assert!(matches!(
            plan_migration(&BYTES, None, &dup, &target, AssignmentStrategy::KuhnMunkres),
            Err(MigrationError::DuplicateWorker { worker: 1 })
        ));
        let gap = layout(1, vec![0..2, 3..4]);
        assert!(matches!(
            plan_migration(&BYTES, None, &[h(1, 0..0), h(2, 0..0)], &gap, AssignmentStrategy::KuhnMunkres),
            Err(MigrationError::BadLayout { .. })
        ));
    }

    fn typed(worker: WorkerId, layers: Range<usize>, slowdown: f64) -> Holding {
        Holding { slowdown, ..h(worker, layers) }
    }

    /// The speeds of each replica's workers in `plan`.
    fn replica_speeds(plan: &MigrationPlan, holdings: &[Holding], d: usize) -> Vec<Vec<f64>> {
        let mut speeds = vec![Vec::new(); d];
        for &(slot, worker) in &plan.assignment {
            speeds[slot.replica].push(holdings.iter().find(|h| h.worker == worker).unwrap().slowdown);
        }
        speeds
    }

    #[test]
    fn mixed_speeds_place_each_replica_on_one_type_and_still_keep_state_in_place() {
        let target = layout(2, vec![0..2, 2..4]);
        // Each old replica had a fast and a slow worker: replica 0 = (1 fast, 3 slow),
        // replica 1 = (4 slow, 2 fast). Regrouped by type, every worker keeps its stage.
        let holdings = [typed(1, 0..2, 1.0), typed(3, 2..4, 3.0), typed(4, 0..2, 3.0), typed(2, 2..4, 1.0)];
        let plan = plan_migration(&BYTES, Some(&target), &holdings, &target, AssignmentStrategy::KuhnMunkres)
            .unwrap();
        for speeds in replica_speeds(&plan, &holdings, 2) {
            assert!(speeds.iter().all(|s| *s == speeds[0]), "a replica mixes speeds: {plan:?}");
        }
        assert_eq!(plan.bytes_moved, 0);
        // With one speed the same holdings keep their old places (nothing to regroup for).
        let same: Vec<Holding> = holdings.iter().map(|x| Holding { slowdown: 1.0, ..x.clone() }).collect();
        let plan =
            plan_migration(&BYTES, Some(&target), &same, &target, AssignmentStrategy::KuhnMunkres).unwrap();
        assert_eq!(plan.bytes_moved, 0);
    }

    #[test]
    fn a_slow_worker_idles_while_faster_ones_can_take_its_place() {
        let whole = std::iter::once(0..4).collect();
        let target = layout(2, whole);
        // The slow worker 1 holds the state; fast newcomers 2 and 3 take both slots.
        let holdings = [typed(1, 0..4, 3.0), typed(2, 0..0, 1.0), typed(3, 0..0, 1.0)];
        let plan = plan_migration(&BYTES, Some(&target), &holdings, &target, AssignmentStrategy::KuhnMunkres)
            .unwrap();
        assert_eq!(plan.idle, [1]);
        assert_eq!(replica_speeds(&plan, &holdings, 2), [vec![1.0], vec![1.0]]);
        // Every fast worker busy, the slow one gets the second replica and keeps its state.
        let holdings = [typed(1, 0..4, 3.0), typed(2, 0..0, 1.0)];
        let plan = plan_migration(&BYTES, Some(&target), &holdings, &target, AssignmentStrategy::KuhnMunkres)
            .unwrap();
        assert!(plan.idle.is_empty());
        assert_eq!(plan.bytes_moved, 40);
        // After a restart (state lost) too: the fastest workers, replica by replica.
        let deep = layout(2, vec![0..2, 2..4]);
        let holdings = [
            typed(1, 0..0, 3.0),
            typed(2, 0..0, 1.0),
            typed(3, 0..0, 2.0),
            typed(4, 0..0, 1.0),
            typed(5, 0..0, 2.0),
        ];
        let plan = plan_migration(&BYTES, None, &holdings, &deep, AssignmentStrategy::KuhnMunkres).unwrap();
        assert_eq!(plan.kind, MigrationKind::Restart);
        assert_eq!(plan.idle, [1]);
        assert_eq!(replica_speeds(&plan, &holdings, 2), [vec![1.0, 1.0], vec![2.0, 2.0]]);
    }
}
