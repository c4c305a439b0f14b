//! The transition cache: the exact distributions of `(from, to)` transitions,
//! memoised across planning calls per `(instances_before, preempted)`, and the
//! program's work buffers that live with it between calls.
//!
//! A distribution depends on the two layouts' reconfiguration costs, the
//! partitions of their depths, the profile's fixed costs and the recovery
//! rules, never on a layout's speed or the checkpoint cadence (an outcome only
//! flags a rollback; the program prices it). So profiles that agree on those
//! (`CostBasis`) share what is stored, whichever layouts each lists: a mixed
//! fleet's compositions list other layouts at other speeds every few intervals
//! (202 profile changes in the 647 intervals of the p3 + g4dn fleet), and a
//! cadence that follows the losses moves every layout's speed. Emptying the
//! cache at each such change made the default policy's calls on that fleet
//! 25 times slower than on one type (median 5 ms, up to 0.14 s), and its
//! guest ran out of fuel there, unannounced, until it was quarantined.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::at_rest::AtRest;
use super::layouts::PlanContext;
use super::program::Work;
use super::recall::{PlanInputs, RecentPlans};
use super::{ScoredPlan, Step};
use crate::liveput::{LiveputError, MigrationKind, PairModel, SharedByFrom};
use crate::{ModelProfile, ParallelConfig, Recovery, StagePartition};

/// Largest `(from, to)` table kept dense (`(S + 1)^2` entries); larger
/// profiles use a hash map holding only the transitions visited.
const DENSE_TABLE_MAX: usize = 1 << 16;

/// Bound on the `(from, to)` cost models a [`TransitionCache`] keeps (a few
/// hundred bytes to a few KB each; every p3 profile needs at most 63 x 63).
const MAX_PAIR_MODELS: usize = 1 << 14;

/// Bound on the `(from, step)` parts shared by every pair of one old layout
/// that a [`TransitionCache`] keeps (under a KB each; each serves every new
/// layout of its old one, so there are far fewer than distributions).
const MAX_SHARED_BY_FROM: usize = 1 << 15;

/// Default bound on the outcomes a [`TransitionCache`] stores (24 bytes each).
pub const DEFAULT_MAX_CACHED_OUTCOMES: usize = 1 << 20;

/// Default bound on the `(from, to)` table entries a [`TransitionCache`]
/// stores (4 bytes each).
pub const DEFAULT_MAX_TABLE_ENTRIES: usize = 1 << 22;

/// Counters of a [`TransitionCache`] since it was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Transition distributions found in the cache.
    pub hits: u64,
    /// Transition distributions computed.
    pub misses: u64,
    /// Times the cache was emptied (a profile whose costs differ, or a bound
    /// reached that evicting could not meet).
    pub clears: u64,
    /// Times a bound was reached and the tables used least recently were
    /// dropped ([`TransitionCache`]).
    pub evictions: u64,
    /// Times the stored distributions were carried over to a profile of the
    /// same costs that lists other layouts (a mixed fleet's new composition).
    pub carried_over: u64,
    /// Times a Pareto front was thinned to [`MAX_FRONT`](super::MAX_FRONT)
    /// pairs (each one may cost optimality).
    pub front_truncations: u64,
    /// Largest Pareto front seen (before thinning).
    pub largest_front: usize,
    /// Calls of [`best_plan`](super::best_plan) (and its variants).
    pub plans: u64,
    /// Calls answered with a plan found before from the very same inputs
    /// (no program run: `plan::recall`).
    pub recalled: u64,
    /// Predecessors skipped because they could not improve a layout's best
    /// pair (no transition looked up).
    pub pruned: u64,
    /// Outcome terms weighed: per predecessor pair offered, the outcomes of
    /// its transition summed over the interval's scenarios. Deterministic
    /// (the same in a guest as natively), and with [`CacheStats::computed`]
    /// the measure of a plan's work.
    pub weighed: u64,
    /// Outcome terms of the transition distributions computed (misses).
    pub computed: u64,
    /// Candidate pairs sorted into fronts.
    pub sorted: u64,
    /// Pairs compared for dominance while fronts were kept (under the
    /// work-at-risk rule, each candidate against the pairs kept before it).
    pub compared: u64,
    /// Pair cost models built (each serves every fleet size of its pair).
    pub models_built: u64,
}

/// What computing one outcome term of a transition distribution costs, in
/// terms weighed ([`CacheStats::work`]).
///
/// The weights of [`CacheStats::work`] are fitted to a guest's fuel (about
/// 220 fuel a unit): least squares over every call above 3e8 fuel of the
/// default policy's guest on seven runs (the p3 trace, GPT-1.5B unannounced
/// and GPT-6.7B under AWS's notice; the diurnal fleet's BERT cold start;
/// fleets of instances living minutes on both profiles, one of them
/// unannounced at horizon 16 whose fronts carry the work at risk; 16 places
/// living an hour, GPT-6.7B): within 20% of the fuel on every such call. Terms
/// weighed alone undercounted the unannounced fleet's calls by half: there
/// sorting and comparing the fronts' pairs is most of the work.
pub const COMPUTED_TERM_WORK: u64 = 64;

/// What sorting one candidate pair into a front costs, in terms weighed.
pub const SORTED_PAIR_WORK: u64 = 4;

/// Pairs compared for dominance per term weighed.
pub const COMPARED_PAIRS_PER_WORK: u64 = 2;

/// What building one pair's cost model costs, in terms weighed (a cold
/// start builds hundreds).
pub const MODEL_BUILT_WORK: u64 = 600;

impl CacheStats {
    /// The planning work done so far, in outcome terms weighed (with what
    /// computing distributions, sorting and comparing fronts' pairs and
    /// building cost models add, [`COMPUTED_TERM_WORK`] and the others):
    /// deterministic, so a guest and a native caller count the same, and
    /// close to proportional to a guest's fuel.
    pub fn work(&self) -> u64 {
        self.weighed
            .saturating_add(self.computed.saturating_mul(COMPUTED_TERM_WORK))
            .saturating_add(self.sorted.saturating_mul(SORTED_PAIR_WORK))
            .saturating_add(self.compared / COMPARED_PAIRS_PER_WORK)
            .saturating_add(self.models_built.saturating_mul(MODEL_BUILT_WORK))
    }
}

/// Memoised transition distributions, kept across calls of
/// [`best_plan`](super::best_plan), and
/// the program's work buffers.
///
/// Distributions are stored per `(instances_before, preempted)` in a table
/// indexed by `(from, to)` (the distribution does not depend on `arrived`), for
/// one cost basis (`CostBasis`) at a time: a call whose profile differs in its costs
/// empties the cache, one that lists other layouts at the same costs keeps
/// every distribution of the layouts it still lists (the tables are re-indexed
/// to its layouts), and one that differs only in speeds or cadence keeps
/// everything. Its size is bounded: when, at the start of a call, the
/// stored outcomes or table entries exceed the bounds, the tables of the
/// `(instances_before, preempted)` pairs used least recently are dropped
/// until what is left holds half of each (a single call may go past the
/// bounds; it is trimmed at the next). Emptying it all instead made the next
/// call recompute every distribution of the fleet sizes it plans through:
/// where instances live minutes that call did twice the work of its
/// neighbours, past a guest's fuel, and the sandbox's fresh instance started
/// cold and ran out again until the policy was quarantined.
#[derive(Debug, Clone)]
pub struct TransitionCache {
    /// What the stored distributions were computed from.
    basis: Option<CostBasis>,
    /// The layouts of the last call, in order.
    last_layouts: Vec<ParallelConfig>,
    store: DistributionStore,
    work: Work,
    /// The last plans found and their inputs ([`super::recall`]): `plan`
    /// keeps each plan it finds here.
    pub(super) recent: RecentPlans,
}

impl Default for TransitionCache {
    fn default() -> Self {
        TransitionCache::with_bounds(DEFAULT_MAX_CACHED_OUTCOMES, DEFAULT_MAX_TABLE_ENTRIES)
    }
}

impl TransitionCache {
    /// A cache that holds at most about `max_outcomes` outcomes and
    /// `max_table_entries` table entries between calls.
    pub fn with_bounds(max_outcomes: usize, max_table_entries: usize) -> TransitionCache {
        TransitionCache {
            basis: None,
            last_layouts: Vec::new(),
            store: DistributionStore {
                max_outcomes,
                max_table_entries,
                keys: HashMap::default(),
                tables: Vec::new(),
                heads: Vec::new(),
                busy: Vec::new(),
                outs: Vec::new(),
                table_entries: 0,
                used: Vec::new(),
                table_outs: Vec::new(),
                models: HashMap::new(),
                shared: SharedByFrom::default(),
                at_rest: AtRest::default(),
                stats: CacheStats::default(),
                columns: Vec::new(),
                width: 0,
            },
            work: Work::default(),
            recent: RecentPlans::default(),
        }
    }

    /// Counters since the cache was created.
    pub fn stats(&self) -> CacheStats {
        self.store.stats
    }

    /// Distributions currently stored.
    pub fn len(&self) -> usize {
        self.store.heads.len()
    }

    /// Whether no distribution is stored.
    pub fn is_empty(&self) -> bool {
        self.store.heads.is_empty()
    }

    /// Drop every stored distribution (the counters stay).
    pub fn clear(&mut self) {
        self.store.clear();
        self.basis = None;
    }

    /// Start one planning call: make the cache fit `profile` under
    /// `recovery` and the program's `layouts` (its states in order, the pause
    /// after them), and count the call.
    pub(super) fn begin(&mut self, profile: &ModelProfile, recovery: &Recovery, layouts: &[ParallelConfig]) {
        self.prepare(profile, recovery, layouts);
        self.store.stats.plans += 1;
    }

    /// The plan found before from exactly `inputs`, if it is still kept
    /// (counted in [`CacheStats::recalled`]).
    pub(super) fn recall(
        &mut self,
        inputs: &PlanInputs,
        profile: &ModelProfile,
        speeds: Option<&[&ModelProfile]>,
    ) -> Option<ScoredPlan> {
        let plan = self.recent.recall(inputs, profile, speeds).cloned();
        self.store.stats.recalled += u64::from(plan.is_some());
        plan
    }

    /// Lend the program its two halves: the distributions and its buffers.
    pub(super) fn parts(&mut self) -> (&mut DistributionStore, &mut Work) {
        (&mut self.store, &mut self.work)
    }

    /// Make the cache fit `profile` under `recovery` and `layouts`, within its
    /// bounds.
    fn prepare(&mut self, profile: &ModelProfile, recovery: &Recovery, layouts: &[ParallelConfig]) {
        let models_over =
            self.store.models.len() > MAX_PAIR_MODELS || self.store.shared.len() > MAX_SHARED_BY_FROM;
        let mut fits = !models_over && self.basis.as_mut().is_some_and(|b| b.admits(profile, recovery));
        if fits
            && (self.store.outs.len() > self.store.max_outcomes
                || self.store.table_entries > self.store.max_table_entries)
        {
            // Nothing kept (one table alone over half a bound): start afresh.
            fits = self.store.evict_least_recent();
        }
        match self.basis.as_mut().filter(|_| fits) {
            Some(basis) => {
                // Layouts new to the basis get columns of their own; every
                // stored distribution keeps its pair. (The last call's
                // layouts are all columns already.)
                if self.last_layouts != layouts {
                    let known: std::collections::HashSet<ParallelConfig> =
                        basis.layouts.iter().copied().collect();
                    let added: Vec<ParallelConfig> =
                        layouts.iter().copied().filter(|c| !known.contains(c)).collect();
                    if !added.is_empty() {
                        self.store.widen(basis.layouts.len(), basis.layouts.len() + added.len());
                        basis.layouts.extend(added);
                    }
                    self.store.stats.carried_over += 1;
                }
            }
            None => {
                if !self.store.heads.is_empty() || !self.store.tables.is_empty() {
                    self.store.clear();
                    self.store.stats.clears += 1;
                }
                self.work.forget_recourse();
                let mut basis = CostBasis {
                    recovery: *recovery,
                    fixed: FixedCosts::of(profile),
                    costs: HashMap::new(),
                    partitions: HashMap::new(),
                    layouts: layouts.to_vec(),
                    seen: std::collections::HashSet::new(),
                    admitted: None,
                };
                // A profile that does not agree with itself (a layout listed
                // twice at other costs, a depth without its partition) keeps
                // no basis: the next call starts afresh, and the cost model
                // reports what is wrong when it reads it.
                self.basis = basis.admits(profile, recovery).then_some(basis);
            }
        }
        let columns = self.basis.as_ref().map_or(layouts, |b| b.layouts.as_slice());
        self.store.set_columns(columns, layouts);
        self.last_layouts.clear();
        self.last_layouts.extend_from_slice(layouts);
    }
}

/// What the stored distributions depend on (see the module documentation):
/// the recovery rules, the profile's fixed costs, and each layout's
/// reconfiguration costs and each depth's partition as first seen. Profiles
/// that agree on every layout and depth they share are priced alike.
#[derive(Debug, Clone)]
struct CostBasis {
    recovery: Recovery,
    fixed: FixedCosts,
    /// Per layout, `(comm_rebuild_add_ms, comm_rebuild_remove_ms,
    /// model_build_ms)`.
    costs: HashMap<ParallelConfig, (f64, f64, f64)>,
    /// Per depth, its partition.
    partitions: HashMap<u32, StagePartition>,
    /// Every layout seen under the basis, in the order first seen: the
    /// tables' columns (the pause after them).
    layouts: Vec<ParallelConfig>,
    /// Scratch for [`CostBasis::admits`]: the layouts of the profile read so
    /// far.
    seen: std::collections::HashSet<ParallelConfig>,
    /// The layouts and partitions of the last profile admitted: a profile
    /// with the very same ones (nearly every call) is admitted without
    /// reading them one by one.
    admitted: Option<(Vec<crate::ConfigProfile>, Vec<StagePartition>)>,
}

impl CostBasis {
    /// Whether distributions computed under this basis hold for `profile`
    /// under `recovery`; the layouts and depths `profile` adds join the basis.
    fn admits(&mut self, profile: &ModelProfile, recovery: &Recovery) -> bool {
        if *recovery != self.recovery
            || !self.fixed.matches(profile)
            || !(profile.checkpoint_interval_ms.is_finite() && profile.checkpoint_interval_ms >= 0.0)
        {
            return false;
        }
        if self.admitted.as_ref().is_some_and(|(configs, partitions)| {
            *configs == profile.configs && *partitions == profile.partitions
        }) {
            return true;
        }
        // The cost model reads a layout's first entry and its depth's first
        // partition; later ones are skipped. One pass (this runs on every
        // planning call, the guest's included).
        self.seen.clear();
        for entry in &profile.configs {
            if !self.seen.insert(entry.config) {
                continue;
            }
            let costs = (entry.comm_rebuild_add_ms, entry.comm_rebuild_remove_ms, entry.model_build_ms);
            if *self.costs.entry(entry.config).or_insert(costs) != costs {
                return false;
            }
            let depth = entry.config.pipeline_stages;
            let Some(partition) = profile.partitions.iter().find(|p| p.pipeline_stages == depth) else {
                return false;
            };
            match self.partitions.get(&depth) {
                Some(known) if known != partition => return false,
                Some(_) => {}
                None => {
                    self.partitions.insert(depth, partition.clone());
                }
            }
        }
        self.admitted = Some((profile.configs.clone(), profile.partitions.clone()));
        true
    }
}

/// A profile's costs that are not per layout.
#[derive(Debug, Clone, PartialEq)]
struct FixedCosts {
    model: String,
    batches: (u32, u32),
    transfer_curve: Vec<crate::TransferPoint>,
    /// `rendezvous_ms`, `process_start_ms`, `add_extra_ms`,
    /// `checkpoint_restart_ms`.
    times: [f64; 4],
}

impl FixedCosts {
    fn of(profile: &ModelProfile) -> Self {
        let (model, batches, transfer_curve, times) = Self::fields(profile);
        FixedCosts { model: model.to_string(), batches, transfer_curve: transfer_curve.to_vec(), times }
    }

    /// Whether `profile` has these costs; compared field by field, nothing
    /// cloned (this runs on every planning call).
    fn matches(&self, profile: &ModelProfile) -> bool {
        let (model, batches, transfer_curve, times) = Self::fields(profile);
        self.model == model
            && self.batches == batches
            && self.transfer_curve == transfer_curve
            && self.times == times
    }

    /// The fixed fields of `profile`, borrowed.
    fn fields(profile: &ModelProfile) -> (&str, (u32, u32), &[crate::TransferPoint], [f64; 4]) {
        // Every field named, so a new one must be placed here or above.
        let ModelProfile {
            model,
            global_batch_size,
            micro_batch_size,
            configs: _,
            partitions: _,
            transfer_curve,
            rendezvous_ms,
            process_start_ms,
            add_extra_ms,
            checkpoint_restart_ms,
            checkpoint_interval_ms: _,
        } = profile;
        (
            model,
            (*global_batch_size, *micro_batch_size),
            transfer_curve,
            [*rendezvous_ms, *process_start_ms, *add_extra_ms, *checkpoint_restart_ms],
        )
    }
}

/// Hashes a table key, `(instances_before, preempted)`, with a multiply per
/// word: the tables are looked up once per scenario of every interval of
/// every program (millions over a trace), where a B-tree's search or SipHash
/// cost more than the rest of the lookup. Keys come from the forecast, not
/// from an adversary.
#[derive(Debug, Clone, Copy, Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, word: u32) {
        self.write_u64(u64::from(word));
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(29) ^ word).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        // The multiply mixes upwards only; fold the high half into the low
        // bits that pick the bucket.
        self.0 ^ (self.0 >> 32)
    }
}

/// One outcome, reduced to what the value of an interval needs.
#[derive(Debug, Clone, Copy)]
pub(super) struct OutcomeTerms {
    /// Probability.
    pub(super) p: f64,
    /// Migration time, ms.
    pub(super) d: f64,
    /// 1 when the outcome rolls back work trained before it (a restart from
    /// the checkpoint out of a layout), else 0: the program prices it at the
    /// speed and cadence the work was trained at (`Program::lost_scale`).
    pub(super) lost: f64,
    /// A restart's `R_type`, paid instead of a longer carried remainder
    /// ([`crate::liveput::Outcome::busy_ms`]); infinite for other kinds, so
    /// `carried.min(abandon) + d` is `liveput()`'s busy time bit for bit.
    pub(super) abandon: f64,
    /// Whether the outcome rolls back to the last checkpoint: what is at
    /// risk starts again from nothing ([`crate::at_risk`]).
    pub(super) resets: bool,
}

/// Table entry of a transition not computed yet.
const MISSING: u32 = u32::MAX;

/// One `(from, to)` table: dense for small profiles, sparse (the transitions
/// visited) for large ones.
#[derive(Debug, Clone)]
enum PairTable {
    Dense(Vec<u32>),
    Sparse(HashMap<usize, u32>),
}

impl PairTable {
    #[inline]
    fn get(&self, slot: usize) -> u32 {
        match self {
            PairTable::Dense(v) => v[slot],
            PairTable::Sparse(m) => m.get(&slot).copied().unwrap_or(MISSING),
        }
    }
}

/// The memoised transition distributions of a [`TransitionCache`]: per
/// `(instances_before, preempted)` a [`PairTable`] of `(from, to)` slots
/// pointing at outcome ranges, and the pair cost models they came from.
#[derive(Debug, Clone)]
pub(super) struct DistributionStore {
    /// Bound on `outs`, checked at the start of a call.
    max_outcomes: usize,
    /// Bound on `table_entries`, checked at the start of a call.
    max_table_entries: usize,
    /// `(instances_before, preempted)` -> index in `tables`.
    keys: HashMap<(u32, u32), usize, BuildHasherDefault<KeyHasher>>,
    /// Per key, `(S + 1) x (S + 1)` entries (`from`, `to`, the pause last):
    /// index in `heads` or [`MISSING`].
    tables: Vec<PairTable>,
    /// `(start, len)` of a distribution's outcomes in `outs`, as `u32`s:
    /// half the bytes of `usize`s on the hit path, whose loads miss the
    /// processor's caches (`outs` is bounded far below `u32::MAX`).
    heads: Vec<(u32, u32)>,
    /// Per head, the expected migration time of its distribution (`sum p x
    /// d`, ms): what [`DistributionStore::busy`] answers without reading the
    /// outcomes again.
    busy: Vec<f64>,
    /// Every stored distribution's outcomes, back to back.
    pub(super) outs: Vec<OutcomeTerms>,
    /// Table entries held: allocated for dense tables, filled for sparse ones.
    table_entries: usize,
    /// Per table, the [`CacheStats::plans`] count when it was last looked up:
    /// which tables to drop first when a bound is reached.
    used: Vec<u64>,
    /// Per table, the outcomes its distributions hold in `outs`.
    table_outs: Vec<usize>,
    /// Per `(from, to)` pair of layouts (`None`: nothing, or the pause), the
    /// pair's cost model: shared by every `(instances_before, preempted)`
    /// table, so a new fleet size or preemption count does not rebuild it.
    models: HashMap<(Option<ParallelConfig>, Option<ParallelConfig>), PairModel>,
    /// What the distributions of one old layout's pairs share under one step,
    /// kept as long as the pair models.
    shared: SharedByFrom,
    /// What transitions with nothing carried in trained, by the place of
    /// their outcomes in `outs`: emptied whenever those are dropped or moved.
    pub(super) at_rest: AtRest,
    /// What [`TransitionCache::stats`] reports.
    pub(super) stats: CacheStats,
    /// Per program state of the current call (its layouts, then the pause),
    /// its column in the tables ([`DistributionStore::slot`]).
    columns: Vec<usize>,
    /// Columns per table row: the basis' layouts and the pause.
    width: usize,
}

impl DistributionStore {
    /// Drop every distribution, table and pair model (the counters stay).
    fn clear(&mut self) {
        self.keys.clear();
        self.tables.clear();
        self.heads.clear();
        self.busy.clear();
        self.outs.clear();
        self.used.clear();
        self.table_outs.clear();
        self.models.clear();
        self.shared.clear();
        self.at_rest.clear();
        self.table_entries = 0;
    }

    /// Widen every table from `old` layout columns to `new` (the basis gained
    /// layouts, appended after the old ones): each stored pair keeps its
    /// distribution, the pause moving to the new last column.
    fn widen(&mut self, old: usize, new: usize) {
        let (old_width, new_width) = (old + 1, new + 1);
        let column = |c: usize| if c == old { new } else { c };
        let moved_slot = |slot: usize| column(slot / old_width) * new_width + column(slot % old_width);
        let entries = new_width * new_width;
        self.table_entries = 0;
        for table in &mut self.tables {
            let stored: Vec<(usize, u32)> = match table {
                PairTable::Dense(slots) => {
                    slots.iter().enumerate().filter(|&(_, &h)| h != MISSING).map(|(s, &h)| (s, h)).collect()
                }
                PairTable::Sparse(map) => map.iter().map(|(&s, &h)| (s, h)).collect(),
            };
            *table = if entries <= DENSE_TABLE_MAX {
                let mut dense = vec![MISSING; entries];
                for (slot, head) in stored {
                    dense[moved_slot(slot)] = head;
                }
                self.table_entries += entries;
                PairTable::Dense(dense)
            } else {
                self.table_entries += stored.len();
                PairTable::Sparse(stored.into_iter().map(|(slot, head)| (moved_slot(slot), head)).collect())
            };
        }
    }

    /// Drop the tables looked up least recently until the rest hold at most
    /// half of each bound, and pack what is kept (every distribution kept is
    /// bit for bit what was stored). Returns whether any table was kept; the
    /// pair models stay either way.
    fn evict_least_recent(&mut self) -> bool {
        let entries_of = |table: &PairTable| match table {
            PairTable::Dense(slots) => slots.len(),
            PairTable::Sparse(map) => map.len(),
        };
        // Most recent first; a tie keeps the older table first (deterministic).
        let mut order: Vec<usize> = (0..self.tables.len()).collect();
        order.sort_by_key(|&t| std::cmp::Reverse(self.used[t]));
        let (max_outs, max_entries) = (self.max_outcomes / 2, self.max_table_entries / 2);
        let mut keep = vec![false; self.tables.len()];
        let (mut outs, mut entries) = (0usize, 0usize);
        for t in order {
            let (o, e) = (outs + self.table_outs[t], entries + entries_of(&self.tables[t]));
            if o > max_outs || e > max_entries {
                break;
            }
            (outs, entries) = (o, e);
            keep[t] = true;
        }
        if !keep.contains(&true) {
            return false;
        }
        // The sums at rest name outcomes by their place, which moves.
        self.at_rest.clear();
        let old_outs = std::mem::take(&mut self.outs);
        let old_heads = std::mem::take(&mut self.heads);
        let old_busy = std::mem::take(&mut self.busy);
        let old_tables = std::mem::take(&mut self.tables);
        let old_used = std::mem::take(&mut self.used);
        let old_table_outs = std::mem::take(&mut self.table_outs);
        let mut renumbered = vec![usize::MAX; old_tables.len()];
        for (t, table) in old_tables.into_iter().enumerate().filter(|&(t, _)| keep[t]) {
            let mut move_head = |head: &mut u32| {
                let (start, len) = old_heads[*head as usize];
                // Fewer outcomes than before, so the start fits as it did.
                self.heads.push((self.outs.len() as u32, len));
                self.busy.push(old_busy[*head as usize]);
                let start = start as usize;
                self.outs.extend_from_slice(&old_outs[start..start + len as usize]);
                // Fewer heads than before, so the index fits as it did.
                *head = (self.heads.len() - 1) as u32;
            };
            let table = match table {
                PairTable::Dense(mut slots) => {
                    slots.iter_mut().filter(|h| **h != MISSING).for_each(&mut move_head);
                    PairTable::Dense(slots)
                }
                PairTable::Sparse(mut map) => {
                    // In slot order, so the packing is the same every run.
                    let mut slots: Vec<usize> = map.keys().copied().collect();
                    slots.sort_unstable();
                    slots.into_iter().for_each(|slot| move_head(map.get_mut(&slot).expect("listed")));
                    PairTable::Sparse(map)
                }
            };
            renumbered[t] = self.tables.len();
            self.tables.push(table);
            self.used.push(old_used[t]);
            self.table_outs.push(old_table_outs[t]);
        }
        self.keys.retain(|_, t| keep[*t]);
        self.keys.values_mut().for_each(|t| *t = renumbered[*t]);
        self.table_entries = entries;
        self.stats.evictions += 1;
        true
    }

    /// Map the program's states (`layouts`, then the pause) to the tables'
    /// columns (`columns`, every layout they know, then the pause).
    fn set_columns(&mut self, columns: &[ParallelConfig], layouts: &[ParallelConfig]) {
        self.width = columns.len() + 1;
        self.columns.clear();
        if columns == layouts {
            self.columns.extend(0..self.width);
        } else {
            let position: HashMap<ParallelConfig, usize> =
                columns.iter().enumerate().map(|(i, &c)| (c, i)).collect();
            // Every layout of the call is a column (the basis admitted them).
            self.columns.extend(layouts.iter().map(|c| position.get(c).copied().unwrap_or(columns.len())));
            self.columns.push(columns.len());
        }
    }

    /// The table slot of the transition from state `from` to state `to` of
    /// the current call (a layout's index, or the pause after them).
    pub(super) fn slot(&self, from: usize, to: usize) -> usize {
        self.columns[from] * self.width + self.columns[to]
    }

    /// Index of the `(from, to)` table of `key`, created empty on first use.
    pub(super) fn table(&mut self, key: (u32, u32)) -> usize {
        if let Some(&t) = self.keys.get(&key) {
            self.used[t] = self.stats.plans;
            return t;
        }
        let entries = self.width * self.width;
        let t = self.tables.len();
        if entries <= DENSE_TABLE_MAX {
            self.tables.push(PairTable::Dense(vec![MISSING; entries]));
            self.table_entries += entries;
        } else {
            self.tables.push(PairTable::Sparse(HashMap::new()));
        }
        self.used.push(self.stats.plans);
        self.table_outs.push(0);
        self.keys.insert(key, t);
        t
    }

    /// The outcomes of `from -> to` in `step` (`from` = `None` for a cold
    /// start; `to` = `S` for a pause), computed on a miss.
    #[inline(always)]
    pub(super) fn entry(
        &mut self,
        table: usize,
        slot: usize,
        ctx: &PlanContext<'_>,
        step: Step,
        from: Option<usize>,
        to: usize,
    ) -> Result<(usize, usize), LiveputError> {
        let head = self.tables[table].get(slot);
        if head != MISSING {
            self.stats.hits += 1;
            let (start, len) = self.heads[head as usize];
            return Ok((start as usize, len as usize));
        }
        self.compute_entry(table, slot, ctx, step, from, to)
    }

    /// How many outcomes `from -> to` in `step` has and their expected
    /// migration time (`sum p x d`, ms, summed in their order once, when the
    /// distribution is stored): what a price of one interval reads.
    #[inline(always)]
    pub(super) fn busy(
        &mut self,
        table: usize,
        slot: usize,
        ctx: &PlanContext<'_>,
        step: Step,
        from: Option<usize>,
        to: usize,
    ) -> Result<(usize, f64), LiveputError> {
        let mut head = self.tables[table].get(slot);
        if head == MISSING {
            self.compute_entry(table, slot, ctx, step, from, to)?;
            head = self.tables[table].get(slot);
        } else {
            self.stats.hits += 1;
        }
        let (_, len) = self.heads[head as usize];
        Ok((len as usize, self.busy[head as usize]))
    }

    /// [`DistributionStore::entry`] on a miss: kept out of line, so that the
    /// hit the program's inner loops take nearly every time inlines.
    #[inline(never)]
    fn compute_entry(
        &mut self,
        table: usize,
        slot: usize,
        ctx: &PlanContext<'_>,
        step: Step,
        from: Option<usize>,
        to: usize,
    ) -> Result<(usize, usize), LiveputError> {
        if let Some(limit) = ctx.work_limit.filter(|&limit| self.stats.work() > limit) {
            return Err(LiveputError::WorkLimit { limit });
        }
        self.stats.misses += 1;
        let from_cfg = from.map(|f| ctx.layouts[f].config);
        let to_cfg = ctx.layouts.get(to).map(|c| c.config);
        let model = match self.models.entry((from_cfg, to_cfg)) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                self.stats.models_built += 1;
                e.insert(PairModel::new(ctx.profile, &ctx.recovery, from_cfg, to_cfg)?)
            }
        };
        let outcomes =
            model.outcomes(step.instances_before, step.preempted, step.arrived, &mut self.shared)?;
        let start = self.outs.len();
        self.stats.computed += outcomes.len() as u64;
        self.outs.extend(outcomes.iter().map(|o| OutcomeTerms {
            p: o.probability,
            d: o.duration_ms,
            lost: if o.lost_work && from_cfg.is_some() { 1.0 } else { 0.0 },
            abandon: if o.kind == MigrationKind::Restart { o.concurrent_ms } else { f64::INFINITY },
            resets: o.lost_work,
        }));
        let head = (start, self.outs.len() - start);
        self.table_outs[table] += head.1;
        // Every index and the outcomes' end fit a `u32` (the heads keep them so).
        let fits = |n: usize| u32::try_from(n).ok().filter(|&i| i != MISSING);
        let (Some(index), Some(packed_start), Some(_), Some(packed_len)) =
            (fits(self.heads.len()), fits(head.0), fits(self.outs.len()), fits(head.1))
        else {
            return Err(LiveputError::Numerical { reason: "transition cache index overflow" });
        };
        self.heads.push((packed_start, packed_len));
        self.busy.push(self.outs[start..].iter().map(|o| o.p * o.d).sum());
        match &mut self.tables[table] {
            PairTable::Dense(v) => v[slot] = index,
            PairTable::Sparse(m) => {
                m.insert(slot, index);
                self.table_entries += 1;
            }
        }
        Ok(head)
    }
}

/// The cache key of a step's distributions. With nobody preempted the
/// distribution of every `from -> to` is the same whatever the number of
/// instances (every preemption weight is exactly 0 or 1, tested in
/// `zero_preemption_distributions_ignore_the_fleet`), so those steps share one
/// table.
pub(super) fn table_key(step: Step) -> (u32, u32) {
    if step.preempted == 0 { (0, 0) } else { (step.instances_before, step.preempted) }
}
