//! The transition cache: the exact distributions of `(from, to)` transitions,
//! memoised across planning calls per `(instances_before, preempted)`, and the
//! program's work buffers that live with it between calls.

use std::collections::{BTreeMap, HashMap};

use super::Step;
use super::layouts::PlanContext;
use super::program::Work;
use crate::liveput::{LiveputError, MigrationKind, PairModel, lost_samples};
use crate::{ModelProfile, Recovery};

/// Largest `(from, to)` table kept dense (`(S + 1)^2` entries); larger
/// profiles use a hash map holding only the transitions visited.
const DENSE_TABLE_MAX: usize = 1 << 16;

/// Bound on the `(from, to)` cost models a [`TransitionCache`] keeps (a few
/// hundred bytes to a few KB each; every p3 profile needs at most 63 x 63).
const MAX_PAIR_MODELS: usize = 1 << 14;

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
    /// Times the cache was emptied (bound reached or profile changed).
    pub clears: u64,
    /// Times a Pareto front was thinned to [`MAX_FRONT`](super::MAX_FRONT)
    /// pairs (each one may cost optimality).
    pub front_truncations: u64,
    /// Largest Pareto front seen (before thinning).
    pub largest_front: usize,
    /// Calls of [`best_plan`](super::best_plan) (and its variants).
    pub plans: u64,
    /// Predecessors skipped because they could not improve a layout's best
    /// pair (no transition looked up).
    pub pruned: u64,
}

/// Memoised transition distributions, kept across calls of
/// [`best_plan`](super::best_plan), and
/// the program's work buffers.
///
/// Distributions are stored per `(instances_before, preempted)` in a table
/// indexed by `(from, to)` (the distribution does not depend on `arrived`), for
/// one profile at a time: a call with a different profile (compared by value)
/// empties the cache. Its size is bounded: when, at the start of a call, the
/// stored outcomes or table entries exceed the bounds, everything is dropped
/// and rebuilt on demand (a single call may go past the bounds; it is emptied
/// at the next).
#[derive(Debug, Clone)]
pub struct TransitionCache {
    /// The profile and recovery rules the stored distributions are for.
    profile: Option<(ModelProfile, Recovery)>,
    store: DistributionStore,
    work: Work,
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
            profile: None,
            store: DistributionStore {
                max_outcomes,
                max_table_entries,
                keys: BTreeMap::new(),
                tables: Vec::new(),
                heads: Vec::new(),
                outs: Vec::new(),
                table_entries: 0,
                models: HashMap::new(),
                stats: CacheStats::default(),
            },
            work: Work::default(),
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
        self.profile = None;
    }

    /// Start one planning call: make the cache fit `profile` under
    /// `recovery`, count the call, and lend the program its two halves.
    pub(super) fn begin(
        &mut self,
        profile: &ModelProfile,
        recovery: &Recovery,
    ) -> (&mut DistributionStore, &mut Work) {
        self.prepare(profile, recovery);
        self.store.stats.plans += 1;
        (&mut self.store, &mut self.work)
    }

    /// Make the cache fit `profile` under `recovery`, within its bounds.
    fn prepare(&mut self, profile: &ModelProfile, recovery: &Recovery) {
        if self.profile.as_ref().is_none_or(|(p, r)| p != profile || r != recovery) {
            if !self.store.heads.is_empty() || !self.store.tables.is_empty() {
                self.store.clear();
                self.store.stats.clears += 1;
            }
            self.profile = Some((profile.clone(), *recovery));
        } else if self.store.outs.len() > self.store.max_outcomes
            || self.store.table_entries > self.store.max_table_entries
            || self.store.models.len() > MAX_PAIR_MODELS
        {
            self.store.clear();
            self.store.stats.clears += 1;
        }
    }
}

/// One outcome, reduced to what the value of an interval needs.
#[derive(Debug, Clone, Copy)]
pub(super) struct OutcomeTerms {
    /// Probability.
    pub(super) p: f64,
    /// Migration time, ms.
    pub(super) d: f64,
    /// Samples lost to a restart (0 unless the outcome loses work).
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
    keys: BTreeMap<(u32, u32), usize>,
    /// Per key, `(S + 1) x (S + 1)` entries (`from`, `to`, the pause last):
    /// index in `heads` or [`MISSING`].
    tables: Vec<PairTable>,
    /// `(start, len)` of a distribution's outcomes in `outs`.
    heads: Vec<(usize, usize)>,
    /// Every stored distribution's outcomes, back to back.
    pub(super) outs: Vec<OutcomeTerms>,
    /// Table entries held: allocated for dense tables, filled for sparse ones.
    table_entries: usize,
    /// Per `(from, to)` slot, the pair's cost model: shared by every
    /// `(instances_before, preempted)` table, so a new fleet size or
    /// preemption count does not rebuild it.
    models: HashMap<usize, PairModel>,
    /// What [`TransitionCache::stats`] reports.
    pub(super) stats: CacheStats,
}

impl DistributionStore {
    /// Drop every distribution, table and pair model (the counters stay).
    fn clear(&mut self) {
        self.keys.clear();
        self.tables.clear();
        self.heads.clear();
        self.outs.clear();
        self.models.clear();
        self.table_entries = 0;
    }

    /// Index of the `(from, to)` table of `key`, created empty with room for
    /// `entries` slots on first use.
    pub(super) fn table(&mut self, key: (u32, u32), entries: usize) -> usize {
        if let Some(&t) = self.keys.get(&key) {
            return t;
        }
        let t = self.tables.len();
        if entries <= DENSE_TABLE_MAX {
            self.tables.push(PairTable::Dense(vec![MISSING; entries]));
            self.table_entries += entries;
        } else {
            self.tables.push(PairTable::Sparse(HashMap::new()));
        }
        self.keys.insert(key, t);
        t
    }

    /// The outcomes of `from -> to` in `step` (`from` = `None` for a cold
    /// start; `to` = `S` for a pause), computed on a miss.
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
            return Ok(self.heads[head as usize]);
        }
        self.stats.misses += 1;
        let from_cfg = from.map(|f| ctx.layouts[f].config);
        let model = match self.models.entry(slot) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(PairModel::new(
                ctx.profile,
                &ctx.recovery,
                from_cfg,
                ctx.layouts.get(to).map(|c| c.config),
            )?),
        };
        let dist = model.distribution(step.instances_before, step.preempted, step.arrived)?;
        let lost = lost_samples(ctx.profile, from_cfg, &dist)?;
        let start = self.outs.len();
        self.outs.extend(dist.outcomes.iter().map(|o| OutcomeTerms {
            p: o.probability,
            d: o.duration_ms,
            lost: if o.lost_work { lost } else { 0.0 },
            abandon: if o.kind == MigrationKind::Restart { o.concurrent_ms } else { f64::INFINITY },
            resets: o.lost_work,
        }));
        let head = (start, self.outs.len() - start);
        let index = u32::try_from(self.heads.len())
            .ok()
            .filter(|&i| i != MISSING)
            .ok_or(LiveputError::Numerical { reason: "transition cache index overflow" })?;
        self.heads.push(head);
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
