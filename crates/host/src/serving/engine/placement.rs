//! Where a serving configuration's slots go and which KV pieces move: SpotServe's device
//! mapping, pure (no I/O), so it is tested on its own.
//!
//! - [`assign`] matches workers to the new configuration's slots by Kuhn-Munkres (the same
//!   [`max_weight_assignment`] training's migration planner uses), the weight of a pair being
//!   the bytes already in place if that worker takes that slot: the weights of the layers
//!   and heads its old slot shares with the new one, plus the KV cache of its replica's
//!   requests in that overlap (SpotServe's "a kept replica's cache counts").
//! - [`map_replicas`] then sends each old replica's requests to the new replica that already
//!   holds most of their cache (a second matching, over replicas).
//! - [`plan_kv_moves`] cuts each moving request's cache into (layers x heads) pieces: the
//!   intersections of its old holders' rectangles with its new holders', each sent by the
//!   old holder (or copied by the worker itself when it is both).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use parcae_cluster::assignment::max_weight_assignment;
use parcae_cluster::serving::{KvFetch, KvPiece, ServeShape, ServeSlot};
use parcae_cluster::{ModelSpec, WorkerId};

/// Which worker holds which slot of a configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// The configuration's shape.
    pub shape: ServeShape,
    /// Each worker's slot.
    pub slots: BTreeMap<WorkerId, ServeSlot>,
}

impl Placement {
    /// The worker at `slot`, if any.
    pub fn worker_at(&self, slot: ServeSlot) -> Option<WorkerId> {
        self.slots.iter().find(|(_, s)| **s == slot).map(|(w, _)| *w)
    }

    /// The workers of replica `replica`.
    pub fn replica_workers(&self, replica: usize) -> Vec<WorkerId> {
        self.slots.iter().filter(|(_, s)| s.replica == replica).map(|(w, _)| *w).collect()
    }

    /// The replica `worker` belongs to.
    pub fn replica_of(&self, worker: WorkerId) -> Option<usize> {
        self.slots.get(&worker).map(|s| s.replica)
    }
}

/// A slot's rectangle of the model: its stage's layers and its rank's heads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rect {
    /// Model layers of the stage.
    pub layers: Range<usize>,
    /// Attention heads of the rank.
    pub heads: Range<usize>,
}

/// The rectangle `slot` of `shape` holds.
pub fn rect(spec: &ModelSpec, shape: ServeShape, slot: ServeSlot) -> Rect {
    let layers = spec.balanced_partition(shape.pp).map(|p| p[slot.stage].clone()).unwrap_or(0..0);
    Rect { layers, heads: shape.heads(spec, slot.rank) }
}

fn intersect(a: &Range<usize>, b: &Range<usize>) -> Range<usize> {
    a.start.max(b.start)..a.end.min(b.end).max(a.start.max(b.start))
}

/// Weight bytes two rectangles share: whole embedding/head layers (replicated on every
/// rank), the shared heads' fraction of each shared block.
fn weight_overlap(spec: &ModelSpec, a: &Rect, b: &Rect) -> u64 {
    let layers = intersect(&a.layers, &b.layers);
    let heads = intersect(&a.heads, &b.heads).len() as u64;
    layers
        .map(|l| {
            let bytes = 4 * spec.layer_params(l);
            if spec.block_layers().contains(&l) { bytes * heads / spec.n_heads as u64 } else { bytes }
        })
        .sum()
}

/// KV bytes per cached position of one head of one block (keys and values, f64).
pub fn kv_bytes_per_position_head(spec: &ModelSpec) -> u64 {
    2 * (spec.d_model / spec.n_heads) as u64 * 8
}

/// KV bytes two rectangles share for `positions` cached positions.
fn kv_overlap(spec: &ModelSpec, a: &Rect, b: &Rect, positions: u64) -> u64 {
    let blocks = intersect(&intersect(&a.layers, &b.layers), &spec.block_layers()).len() as u64;
    let heads = intersect(&a.heads, &b.heads).len() as u64;
    blocks * heads * positions * kv_bytes_per_position_head(spec)
}

/// Matches `workers` to the slots of `shape`, maximising the bytes already in place.
/// `cached` gives, per old replica, the positions its requests have cached (their KV cache
/// counts only where the old replica keeps its index). Returns None when there are fewer
/// workers than slots.
pub fn assign(
    spec: &ModelSpec,
    old: Option<&Placement>,
    cached: &BTreeMap<usize, u64>,
    workers: &[WorkerId],
    shape: ServeShape,
) -> Option<Placement> {
    let slots: Vec<ServeSlot> = shape.slots().collect();
    if workers.len() < slots.len() {
        return None;
    }
    let weights: Vec<Vec<u64>> = slots
        .iter()
        .map(|slot| {
            let new = rect(spec, shape, *slot);
            workers
                .iter()
                .map(|w| {
                    let Some((old, old_slot)) = old.and_then(|o| o.slots.get(w).map(|s| (o, *s))) else {
                        return 0;
                    };
                    let held = rect(spec, old.shape, old_slot);
                    let kv = if old_slot.replica == slot.replica {
                        kv_overlap(spec, &held, &new, cached.get(&old_slot.replica).copied().unwrap_or(0))
                    } else {
                        0
                    };
                    weight_overlap(spec, &held, &new) + kv
                })
                .collect()
        })
        .collect();
    let chosen = max_weight_assignment(&weights);
    let slots = chosen.iter().enumerate().map(|(i, &w)| (workers[w], slots[i])).collect();
    Some(Placement { shape, slots })
}

/// For each old replica with requests, the new replica that holds most of their cache
/// already (each new replica takes at most one old replica's batch); old replicas left
/// without one are absent (their requests go back to the queue).
pub fn map_replicas(
    spec: &ModelSpec,
    old: &Placement,
    new: &Placement,
    cached: &BTreeMap<usize, u64>,
    alive: &BTreeSet<WorkerId>,
) -> BTreeMap<usize, usize> {
    let olds: Vec<usize> = cached.keys().copied().collect();
    if olds.is_empty() || new.shape.dp == 0 {
        return BTreeMap::new();
    }
    // Rows: new replicas; columns: old replicas (the matcher wants rows <= columns, so pad
    // the columns with "no old replica" when there are more new replicas than old).
    let columns = olds.len().max(new.shape.dp);
    let weights: Vec<Vec<u64>> = (0..new.shape.dp)
        .map(|r_new| {
            (0..columns)
                .map(|c| {
                    let Some(&r_old) = olds.get(c) else { return 0 };
                    // +1 so that any mapping beats none.
                    1 + new
                        .slots
                        .iter()
                        .filter(|(w, s)| s.replica == r_new && alive.contains(w))
                        .filter_map(|(w, s)| {
                            let old_slot = old.slots.get(w).filter(|o| o.replica == r_old)?;
                            Some(kv_overlap(
                                spec,
                                &rect(spec, old.shape, *old_slot),
                                &rect(spec, new.shape, *s),
                                cached[&r_old],
                            ))
                        })
                        .sum::<u64>()
                })
                .collect()
        })
        .collect();
    let chosen = max_weight_assignment(&weights);
    chosen.iter().enumerate().filter_map(|(r_new, &c)| olds.get(c).map(|&r_old| (r_old, r_new))).collect()
}

/// One request moving between replicas (or staying, when its replica's slots changed).
#[derive(Debug, Clone, PartialEq)]
pub struct Move {
    /// The request.
    pub request: u64,
    /// Its replica in the old configuration.
    pub from: usize,
    /// Its replica in the new one.
    pub to: usize,
}

/// What each worker sends and fetches, and which requests it keeps as they are.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KvPlan {
    /// Pieces each worker sends: (piece, receiver, receiver's index).
    pub sends: BTreeMap<WorkerId, Vec<(KvPiece, WorkerId, u32)>>,
    /// Pieces each worker gathers.
    pub fetches: BTreeMap<WorkerId, Vec<KvFetch>>,
    /// Requests each worker keeps in place (its shard is unchanged and the request stays).
    pub keep: BTreeMap<WorkerId, Vec<u64>>,
    /// Bytes that cross between workers.
    pub bytes_moved: u64,
}

/// Plans the pieces of every moving request. A request one of whose old holders is not in
/// `alive` cannot move (its cache is incomplete): it is returned in the second list, for the
/// caller to recompute.
pub fn plan_kv_moves(
    spec: &ModelSpec,
    old: &Placement,
    new: &Placement,
    moves: &[(Move, u64)],
    alive: &BTreeSet<WorkerId>,
) -> (KvPlan, Vec<u64>) {
    let mut plan = KvPlan::default();
    let mut lost = Vec::new();
    let mut next_index: BTreeMap<WorkerId, u32> = BTreeMap::new();
    for (m, positions) in moves {
        let holders: Vec<(WorkerId, Rect)> = old
            .slots
            .iter()
            .filter(|(_, s)| s.replica == m.from)
            .map(|(w, s)| (*w, rect(spec, old.shape, *s)))
            .collect();
        if holders.is_empty() || holders.iter().any(|(w, _)| !alive.contains(w)) {
            lost.push(m.request);
            continue;
        }
        for (h, slot) in new.slots.iter().filter(|(_, s)| s.replica == m.to) {
            let target = rect(spec, new.shape, *slot);
            let in_place =
                old.slots.get(h).is_some_and(|s| s.replica == m.from && rect(spec, old.shape, *s) == target);
            if in_place {
                plan.keep.entry(*h).or_default().push(m.request);
                continue;
            }
            // A stage without blocks (only the embedding or the head) caches no keys or
            // values but must still learn how many positions the request has: it gets one
            // piece with no block in it (just the header).
            let blockless = intersect(&target.layers, &spec.block_layers()).is_empty();
            let mut header_sent = false;
            for (o, held) in &holders {
                let shared = intersect(&held.layers, &target.layers);
                let heads = intersect(&held.heads, &target.heads);
                let layers = if blockless {
                    if shared.is_empty() || heads.is_empty() || header_sent {
                        continue;
                    }
                    header_sent = true;
                    shared
                } else {
                    let layers = intersect(&shared, &spec.block_layers());
                    if layers.is_empty() || heads.is_empty() {
                        continue;
                    }
                    layers
                };
                let piece = KvPiece { request: m.request, layers: layers.clone(), heads: heads.clone() };
                let index = next_index.entry(*h).or_insert(0);
                let this = *index;
                *index += 1;
                if o != h {
                    let blocks = intersect(&layers, &spec.block_layers()).len() as u64;
                    plan.bytes_moved +=
                        blocks * heads.len() as u64 * positions * kv_bytes_per_position_head(spec);
                    plan.sends.entry(*o).or_default().push((piece.clone(), *h, this));
                }
                plan.fetches.entry(*h).or_default().push(KvFetch { piece, index: this, from: *o });
            }
        }
    }
    (plan, lost)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ModelSpec {
        ModelSpec::default()
    }

    fn placement(shape: ServeShape, workers: &[WorkerId]) -> Placement {
        Placement { shape, slots: workers.iter().copied().zip(shape.slots()).collect() }
    }

    #[test]
    fn survivors_keep_their_slots_when_the_shape_stays() {
        let spec = spec();
        let shape = ServeShape { dp: 2, tp: 1, pp: 2 };
        let old = placement(shape, &[1, 2, 3, 4]);
        // Worker 2 leaves, 5 arrives: 1, 3, 4 keep their slots, 5 takes 2's.
        let cached = BTreeMap::from([(0, 10), (1, 10)]);
        let new = assign(&spec, Some(&old), &cached, &[1, 3, 4, 5], shape).unwrap();
        for w in [1, 3, 4] {
            assert_eq!(new.slots[&w], old.slots[&w], "worker {w}");
        }
        assert_eq!(new.slots[&5], old.slots[&2]);
        assert!(assign(&spec, Some(&old), &cached, &[1, 3, 4], shape).is_none());
    }

    #[test]
    fn pieces_tile_every_new_rectangle_exactly() {
        let spec = spec();
        for (from, to) in [
            (ServeShape { dp: 1, tp: 2, pp: 2 }, ServeShape { dp: 1, tp: 4, pp: 1 }),
            (ServeShape { dp: 1, tp: 2, pp: 2 }, ServeShape { dp: 1, tp: 1, pp: 3 }),
            (ServeShape { dp: 1, tp: 4, pp: 1 }, ServeShape { dp: 1, tp: 1, pp: 8 }),
            (ServeShape { dp: 2, tp: 1, pp: 1 }, ServeShape { dp: 1, tp: 2, pp: 2 }),
        ] {
            let old = placement(from, &(1..=from.workers() as u64).collect::<Vec<_>>());
            let new = placement(to, &(3..3 + to.workers() as u64).collect::<Vec<_>>());
            let alive: BTreeSet<WorkerId> = (1..20).collect();
            let moves = vec![(Move { request: 9, from: 0, to: 0 }, 12)];
            let (plan, lost) = plan_kv_moves(&spec, &old, &new, &moves, &alive);
            assert!(lost.is_empty());
            for (w, slot) in &new.slots {
                let target = rect(&spec, to, *slot);
                let blocks = intersect(&target.layers, &spec.block_layers());
                let mut covered = 0usize;
                let fetched = plan.fetches.get(w).cloned().unwrap_or_default();
                let kept = plan.keep.get(w).is_some_and(|k| k.contains(&9));
                for f in &fetched {
                    assert!(
                        f.piece.layers.start >= target.layers.start
                            && f.piece.layers.end <= target.layers.end
                    );
                    assert!(
                        f.piece.heads.start >= target.heads.start && f.piece.heads.end <= target.heads.end
                    );
                    covered += intersect(&f.piece.layers, &blocks).len() * f.piece.heads.len();
                    if f.from != *w {
                        let sent = &plan.sends[&f.from];
                        assert!(sent.iter().any(|(p, to, i)| p == &f.piece && to == w && *i == f.index));
                    }
                }
                let need = blocks.len() * target.heads.len();
                assert!(kept || covered == need, "{from} -> {to}: worker {w} covers {covered} of {need}");
                assert!(
                    kept || !fetched.is_empty(),
                    "{from} -> {to}: worker {w} learns nothing of the request"
                );
            }
        }
    }

    #[test]
    fn a_request_with_a_dead_holder_is_lost_and_a_whole_replica_maps_to_itself() {
        let spec = spec();
        let shape = ServeShape { dp: 2, tp: 1, pp: 2 };
        let old = placement(shape, &[1, 2, 3, 4]);
        let alive: BTreeSet<WorkerId> = [1, 3, 4].into();
        let moves = vec![(Move { request: 1, from: 0, to: 0 }, 5), (Move { request: 2, from: 1, to: 1 }, 5)];
        let (plan, lost) = plan_kv_moves(&spec, &old, &old, &moves, &alive);
        assert_eq!(lost, vec![1]);
        assert_eq!(plan.keep[&3], vec![2]);
        assert_eq!(plan.bytes_moved, 0);
        let cached = BTreeMap::from([(0, 5), (1, 5)]);
        let mapping = map_replicas(&spec, &old, &old, &cached, &alive);
        assert_eq!(mapping[&1], 1);
    }
}
