//! The best sequence of layouts over a horizon of intervals: the dynamic
//! program behind the online liveput optimizer ([`crate::optimizer::Liveput`],
//! receding horizon) and the host's offline Oracle (the whole trace at once).
//!
//! # Problem
//!
//! Interval `i` of the horizon starts with `instances_before` instances, of
//! which `preempted` are taken and `arrived` join ([`Step`]); the job then runs
//! the layout chosen for the interval (any profiled layout that fits the
//! instances after the change) or pauses. The value of a plan is the sum over
//! its intervals of [`liveput()`](crate::liveput::liveput) of the transition
//! from the previous interval's layout (`current` before the first), with the
//! migration time left over by the previous interval carried into the next
//! (`carried_ms` before the first). [`best_plan`] maximises it.
//!
//! # The dynamic program and why it is exact
//!
//! The state after interval `i` is the layout chosen for it and the expected
//! leftover migration time `c` carried into interval `i + 1`. The leftover is
//! continuous, so per `(interval, layout)` the program keeps the **Pareto
//! front** of `(value so far, leftover)` pairs over all plans that reach it: a
//! pair dominates another if it has `>=` value and `<=` leftover. This loses
//! nothing: the samples of an interval, `thr x sum_o p_o max(0, T - c - b_o)`,
//! are non-increasing in the carry `c` and its leftover `sum_o p_o max(0, c +
//! b_o - T)` is non-decreasing in `c` (a pause carries nothing whatever `c`),
//! so by induction the best value of the rest of the horizon is non-increasing
//! in `c`, and a dominated pair can never lead to a better plan than the pair
//! that dominates it. Without a cap on the fronts the program returns an optimal
//! plan under the cost model (the tests check it against brute-force
//! enumeration of every plan).
//!
//! **Cap.** A front keeps at most [`MAX_FRONT`] pairs; a longer one is thinned
//! to pairs evenly spaced in leftover order, always keeping both ends (the
//! pair with the least leftover and the one with the most value). Once a front
//! is thinned the plan may be sub-optimal; [`CacheStats::front_truncations`]
//! counts it. It never happened in the tests or the benchmarks with a point
//! forecast: the largest front is 3 in the brute-force tests, and at most 12
//! pairs in the p3-shaped benchmarks (receding horizon H = 12 and the
//! 683-interval Oracle, five models). The fronts do matter: capped at 2
//! pairs, 1 to 2 of the 120 random brute-force cases get a worse plan. Hedged
//! plans ([`best_plan_hedged`]) mix more leftovers: on the GPT-6.7B-shaped
//! profile, whose restarts outlast a minute, fronts reach 39 pairs in
//! `timing`, and 83 decisions of `robust-liveput` (GPT-6.7B, p3 and g4dn
//! traces) were thinned; with a cap of 1024 instead every decision was the
//! same.
//!
//! Most fronts have a single pair: a transition whose migrations all finish
//! within the interval leaves nothing, and of the pairs with no leftover only
//! the most valuable is kept. Pairs with a leftover arise from migrations
//! longer than the interval and, mostly, from restarts, whose lost work is
//! re-trained as carried time.
//!
//! # Pruning (large profiles only)
//!
//! The program is quadratic in the layouts, so a profile with more than
//! [`PlanOptions::prune_above`] layouts ([`PRUNE_ABOVE`] = 64: every p3
//! profile, 10 to 62 layouts, is planned exactly as described above, tested in
//! `p3_sized_profiles_are_never_pruned`) is planned over a subset per
//! interval, and the plan is then only the best within that subset:
//!
//! - **Depths.** Per interval, the [`PlanOptions::prune_depths`] ([`PRUNE_DEPTHS`]
//!   = 3) depths whose best layout that fits has the highest throughput,
//!   united over the horizon, plus the depth of `current`.
//! - **Widths**, per kept depth: 24 widths in geometric progression from 1 to
//!   the widest; per instance count `N_j` after a change in the horizon that
//!   fits the interval, the best layout with at most `N_j` instances (the
//!   largest `D <= N_j / P` when throughput grows with `D`); `current`; and
//!   after preemptions, shrink targets: `D - 1`, `D - (l + sqrt l)`, `D - (l +
//!   2 sqrt l) - 1` (rounded up) for `current`, the previous interval's shrink
//!   targets and best layouts, with `l` the expected replicas a stage loses.
//!   The largest layout that fits is not enough: with the GPT communicator
//!   rule, building one costs about 0.5 s per instance, so past about 100
//!   instances a migration outlasts a minute-long interval and the best plans
//!   use narrower layouts and shed replicas (cheap) rather than rebuild.
//! - **Predecessors.** A layout's front is built from the same layout, the
//!   layouts of its depth, the pause, and the [`PRUNE_CROSS`] = 4 predecessors
//!   with the most value; other transitions are not evaluated.
//! - Large `(from, to)` tables are hash maps of the transitions visited.
//!
//! Loss, measured in `pruning_loss` (the GPT-1.5B-shaped profile scaled to
//! every width, N = 128..256, 216 to 405 layouts, H = 6, random preemptions
//! of up to N / 16 per interval): the pruned plan's value was below the
//! unpruned one in 5 of 6 cases, by 0.9%, 2.6%, 2.7%, 4.4% and 10.5%, in 0.02
//! to 0.1 s instead of 1.3 to 7 s. With N = 1024 (1,806 layouts, H = 12) one
//! cold decision takes about 0.7 s (21,600 distributions), 6 ms warm.
//!
//! # Transitions, exactly as `liveput()` computes them
//!
//! The exact distribution of a transition's migration time over which
//! instances are preempted ([`transition_distribution`]) depends on the old and
//! new layouts, `instances_before` and `preempted`, but not on `arrived` (which
//! only decides whether the new layout fits), nor, when nobody is preempted,
//! on `instances_before`. [`TransitionCache`] memoises the distributions per
//! `(instances_before, preempted)` in a table indexed by `(from, to)`, across
//! calls, and the program evaluates each one for every carried leftover with
//! the same arithmetic, in the same order, as `liveput()` does: the numbers are
//! identical, not just close (tested).
//!
//! # Conventions
//!
//! - **Pauses.** `None` is a state like any layout: it trains nothing and, as
//!   in `liveput()`, carries nothing (the in-flight migration is abandoned;
//!   leaving a pause is a cold start). Work lost to a restart is charged as
//!   negative samples at the restart, whatever runs next, so a pause cannot
//!   erase it.
//! - **Unknown or unfit `current`.** A `current` layout that is not in the
//!   profile, or that needs more instances than the first step's
//!   `instances_before`, is treated as nothing running: the first layout is a
//!   cold start. The same holds for any interval whose `instances_before` is
//!   smaller than the previous interval's layout (inconsistent steps).
//! - **Nothing fits.** An interval in which no profiled layout fits pauses.
//! - **Profile.** Duplicate layouts in the profile count once (the first, as
//!   [`ModelProfile::config`] finds it); layouts with a zero degree or more than
//!   [`MAX_INSTANCES`] instances are never chosen. A throughput that is negative
//!   or not finite is an error, as are the errors of the cost model itself
//!   ([`LiveputError`]), a carried time that is negative or not finite, or a
//!   step that preempts more instances than it has or has more than
//!   [`MAX_INSTANCES`] instances.
//! - **Ties** (plans of exactly equal value) are broken deterministically:
//!   among predecessors, staying in the same layout first, then the layout
//!   order below; for the last interval, less leftover first, then `current`,
//!   then the layout order: higher throughput, fewer instances, fewer stages,
//!   fewer replicas, and a pause last.
//!
//! # Cost
//!
//! Per interval, every pair of a live state and a layout that fits: `O(H x
//! (S + 1)^2 x F x K x M)` for `S` layouts, fronts of `F` pairs, `K` outcomes
//! per distribution (one when nobody is preempted) and `M` scenarios per
//! interval (1 unless hedged), plus the distributions not yet cached (5-10 µs
//! each for 32 instances). Two things keep most of that work from being done,
//! without changing any plan:
//!
//! - **Bound.** A predecessor whose most valuable pair, plus the most one
//!   interval in the target layout can train, does not exceed the best pair
//!   without leftover found so far is skipped before its transition is looked
//!   up (or computed): every pair it could yield would be dropped.
//!   [`CacheStats::pruned`] counts them.
//! - **Pair models.** The transfer tables of a `(from, to)` pair do not depend
//!   on the fleet or the preemptions; the cache builds them once per pair and
//!   reuses them for every `(instances_before, preempted)`.
//!
//! Measured in release mode on a shared 2-core machine (test `timing`: `cargo
//! test --release -p parcae-policy-core plan::tests::timing -- --ignored
//! --nocapture`), with profiles shaped like the five models of
//! `p3-v100-parcae.json` (10 to 62 layouts) and a synthetic 683-interval trace
//! of a 32-instance fleet: one call, 47 layouts, H = 12 with preemptions, 4-6
//! ms with an empty cache (1,023 distributions; 80 ms and 9,500 without the
//! bound), 0.1 ms once cached; a receding-horizon run (683 calls, H = 12)
//! 6-55 ms per model with the true future as the forecast, 3-36 ms with a
//! flat one, 43-83 ms with a flat one hedged by three burst sizes; the Oracle
//! (one call over 683 intervals) 3-22 ms per model (15-420 ms without the
//! bound and the pair models).

use std::collections::{BTreeMap, HashMap};

use crate::liveput::{LiveputError, MAX_INSTANCES, MigrationKind, PairModel, lost_samples};
use crate::{IntervalStats, ModelProfile, ParallelConfig, Recovery};

#[cfg(test)]
pub(crate) mod tests;

/// Largest Pareto front of `(value, leftover)` pairs kept per interval and
/// layout; see the module documentation.
pub const MAX_FRONT: usize = 32;

/// Profiles with more layouts than this are planned over pruned candidates
/// (see [`PlanOptions::prune_above`]); smaller ones, such as every p3 profile
/// (at most 62 layouts), exactly as without pruning.
pub const PRUNE_ABOVE: usize = 64;

/// Depths kept per interval when pruning (see [`PlanOptions::prune_depths`]).
pub const PRUNE_DEPTHS: usize = 3;

/// When pruning, widths per kept depth on the geometric grid.
const PRUNE_WIDTHS: u32 = 24;

/// When pruning, predecessors of another depth considered per layout: the
/// most valuable ones.
const PRUNE_CROSS: usize = 4;

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

/// Availability change at the start of one interval:
/// `after = before - preempted + arrived`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Step {
    /// Instances alive before the change (the previous layout runs on them).
    pub instances_before: u32,
    /// Instances taken back, a uniform random subset of `instances_before`.
    pub preempted: u32,
    /// Instances that join.
    pub arrived: u32,
}

impl Step {
    /// Instances alive after the change, or `None` when more instances are
    /// preempted than exist.
    pub fn instances_after(&self) -> Option<u64> {
        let left = self.instances_before.checked_sub(self.preempted)?;
        Some(u64::from(left) + u64::from(self.arrived))
    }

    /// The step from `before` to exactly `after` instances with (about)
    /// `preempted` preemptions: `preempted` is clamped to `before`, arrivals
    /// make up the difference, and when even that cannot reach `after` (fewer
    /// instances left than `before - preempted`) the preemptions are raised to
    /// `before - after` with no arrivals.
    pub fn between(before: u32, after: u32, preempted: u32) -> Step {
        let preempted = preempted.min(before);
        let left = before - preempted;
        if after >= left {
            Step { instances_before: before, preempted, arrived: after - left }
        } else {
            Step { instances_before: before, preempted: before - after, arrived: 0 }
        }
    }

    /// One step per interval, chained from `instances_before`: each interval
    /// starts with the previous one's `instances` and ends with its own, with
    /// its `preemptions` ([`Step::between`] repairs inconsistent records).
    pub fn chain(instances_before: u32, intervals: &[IntervalStats]) -> Vec<Step> {
        let mut before = instances_before;
        intervals
            .iter()
            .map(|s| {
                let step = Step::between(before, s.instances, s.preemptions);
                before = s.instances;
                step
            })
            .collect()
    }
}

/// One interval of the best plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlannedStep {
    /// Layout for the interval; `None` pauses.
    pub config: Option<ParallelConfig>,
    /// Expected samples trained in the interval along the plan (>= 0).
    pub expected_samples: f64,
    /// Expected migration time carried out of the interval into the next, ms.
    pub expected_leftover_ms: f64,
}

/// Counters of a [`TransitionCache`] since it was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Transition distributions found in the cache.
    pub hits: u64,
    /// Transition distributions computed.
    pub misses: u64,
    /// Times the cache was emptied (bound reached or profile changed).
    pub clears: u64,
    /// Times a Pareto front was thinned to [`MAX_FRONT`] pairs (each one may
    /// cost optimality).
    pub front_truncations: u64,
    /// Largest Pareto front seen (before thinning).
    pub largest_front: usize,
    /// Calls of [`best_plan`].
    pub plans: u64,
    /// Predecessors skipped because they could not improve a layout's best
    /// pair (no transition looked up).
    pub pruned: u64,
}

/// Memoised transition distributions, kept across calls of [`best_plan`], and
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
struct OutcomeTerms {
    /// Probability.
    p: f64,
    /// Migration time, ms.
    d: f64,
    /// Samples lost to a restart (0 unless the outcome loses work).
    lost: f64,
    /// A restart's `R_type`, paid instead of a longer carried remainder
    /// ([`crate::liveput::Outcome::busy_ms`]); infinite for other kinds, so
    /// `carried.min(abandon) + d` is `liveput()`'s busy time bit for bit.
    abandon: f64,
}

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
struct DistributionStore {
    max_outcomes: usize,
    max_table_entries: usize,
    /// `(instances_before, preempted)` -> index in `tables`.
    keys: BTreeMap<(u32, u32), usize>,
    /// Per key, `(S + 1) x (S + 1)` entries (`from`, `to`, the pause last):
    /// index in `heads` or [`MISSING`].
    tables: Vec<PairTable>,
    /// `(start, len)` of a distribution's outcomes in `outs`.
    heads: Vec<(usize, usize)>,
    outs: Vec<OutcomeTerms>,
    table_entries: usize,
    /// Per `(from, to)` slot, the pair's cost model: shared by every
    /// `(instances_before, preempted)` table, so a new fleet size or
    /// preemption count does not rebuild it.
    models: HashMap<usize, PairModel>,
    stats: CacheStats,
}

impl DistributionStore {
    fn clear(&mut self) {
        self.keys.clear();
        self.tables.clear();
        self.heads.clear();
        self.outs.clear();
        self.models.clear();
        self.table_entries = 0;
    }

    fn table(&mut self, key: (u32, u32), entries: usize) -> usize {
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
    fn entry(
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

/// One pair of a Pareto front, with its back pointer.
#[derive(Debug, Clone, Copy)]
struct Point {
    /// Expected samples from the first interval to this one.
    value: f64,
    /// Expected leftover carried out of this interval, ms.
    leftover: f64,
    /// Expected samples of this interval.
    samples: f64,
    /// State of this interval (layout index, or `S` for a pause).
    state: u32,
    /// Index of the predecessor pair in the arena (`u32::MAX` for the start).
    pred: u32,
}

#[derive(Debug, Clone, Default)]
struct Work {
    /// Arena of every front's pairs.
    points: Vec<Point>,
    /// `(start, len)` in `points` per interval and state.
    ranges: Vec<(usize, usize)>,
    /// Fronts of the previous interval, per state.
    prev: Vec<(usize, usize)>,
    /// Candidate pairs with a positive leftover.
    scratch: Vec<Point>,
}

/// The cache key of a step's distributions. With nobody preempted the
/// distribution of every `from -> to` is the same whatever the number of
/// instances (every preemption weight is exactly 0 or 1, tested in
/// `zero_preemption_distributions_ignore_the_fleet`), so those steps share one
/// table.
fn table_key(step: Step) -> (u32, u32) {
    if step.preempted == 0 { (0, 0) } else { (step.instances_before, step.preempted) }
}

/// A layout the program may choose.
#[derive(Debug, Clone, Copy)]
struct LayoutChoice {
    config: ParallelConfig,
    /// Instances it occupies (`D x P`).
    instances: u64,
    /// Its throughput, samples/s.
    thr: f64,
}

/// What every interval of one planning call shares: the profile, the
/// recovery rules and the layouts to choose from (index `S` is the pause).
struct PlanContext<'a> {
    profile: &'a ModelProfile,
    recovery: Recovery,
    layouts: Vec<LayoutChoice>,
}

/// The layouts the program may choose, in profile order (first occurrence).
fn candidates(profile: &ModelProfile) -> Result<Vec<LayoutChoice>, LiveputError> {
    let mut layouts: Vec<LayoutChoice> = Vec::with_capacity(profile.configs.len());
    for entry in &profile.configs {
        let config = entry.config;
        let instances = config.instances();
        if config.data_parallel == 0
            || config.pipeline_stages == 0
            || instances > u64::from(MAX_INSTANCES)
            || layouts.iter().any(|c| c.config == config)
        {
            continue;
        }
        let thr = entry.samples_per_second;
        if !(thr.is_finite() && thr >= 0.0) {
            return Err(LiveputError::BadProfileValue {
                field: format!("configs[{config}].samples_per_second"),
                value: thr,
            });
        }
        layouts.push(LayoutChoice { config, instances, thr });
    }
    Ok(layouts)
}

/// Knobs of the program; [`PlanOptions::default`] is what [`best_plan`] uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanOptions {
    /// How a stage that loses every replica is recovered (the deployment's
    /// preemption notice). Default [`Recovery::UNANNOUNCED`].
    pub recovery: Recovery,
    /// Largest Pareto front kept per interval and layout (clamped to `2..=65536`;
    /// see the module documentation). Default [`MAX_FRONT`].
    pub max_front: usize,
    /// Prune the candidate layouts when the profile has more than this many
    /// (see the module documentation, *Pruning*); `usize::MAX` never prunes.
    /// Default [`PRUNE_ABOVE`].
    pub prune_above: usize,
    /// When pruning, the pipeline depths kept per interval (at least 1).
    /// Default [`PRUNE_DEPTHS`].
    pub prune_depths: usize,
    /// Terminal value: the plan's last layout is credited with the samples it
    /// trains for this long after the horizon (less its leftover migration),
    /// ms. A receding-horizon planner without it undervalues any migration
    /// whose payback lies past the horizon, and holds layouts that a reactive
    /// policy would already have left: with the true future and H = 8 it fell
    /// below the reactive baseline on calm fleets. 0 (the default, and the
    /// Oracle's: its horizon is the whole trace) credits nothing.
    pub terminal_ms: f64,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            recovery: Recovery::UNANNOUNCED,
            max_front: MAX_FRONT,
            prune_above: PRUNE_ABOVE,
            prune_depths: PRUNE_DEPTHS,
            terminal_ms: 0.0,
        }
    }
}

/// Per interval and state (`steps.len() x (S + 1)`, the pause last), whether
/// the pruned program may choose it; see the module documentation, *Pruning*.
fn pruned_states(
    layouts: &[LayoutChoice],
    start: Option<usize>,
    steps: &[Step],
    afters: &[u64],
    options: PlanOptions,
) -> Vec<bool> {
    let n_states = layouts.len() + 1;
    let mut by_depth: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (k, c) in layouts.iter().enumerate() {
        by_depth.entry(c.config.pipeline_stages).or_default().push(k);
    }
    let width: BTreeMap<(u32, u32), usize> = layouts
        .iter()
        .enumerate()
        .map(|(k, c)| ((c.config.pipeline_stages, c.config.data_parallel), k))
        .collect();
    let mut bounds = afters.to_vec();
    bounds.sort_unstable();
    bounds.dedup();
    // The best layout of a depth with at most `bound` instances: highest
    // throughput, then fewer instances, then profile order.
    let best_within = |ks: &[usize], bound: u64| -> Option<usize> {
        ks.iter().copied().filter(|&k| layouts[k].instances <= bound).max_by(|&x, &y| {
            let (a, b) = (&layouts[x], &layouts[y]);
            a.thr.total_cmp(&b.thr).then(b.instances.cmp(&a.instances)).then(y.cmp(&x))
        })
    };
    let mut kept: Vec<u32> = start.map(|k| layouts[k].config.pipeline_stages).into_iter().collect();
    for &after in afters {
        let mut scored: Vec<(f64, u32)> = by_depth
            .iter()
            .filter_map(|(&p, ks)| best_within(ks, after).map(|k| (layouts[k].thr, p)))
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        kept.extend(scored.iter().take(options.prune_depths.max(1)).map(|&(_, p)| p));
    }
    kept.sort_unstable();
    kept.dedup();
    // Per kept depth, `PRUNE_WIDTHS` widths in geometric progression from 1
    // to the widest.
    let mut grid: Vec<usize> = Vec::new();
    for p in &kept {
        let top = by_depth[p].iter().map(|&k| layouts[k].config.data_parallel).max().unwrap_or(1);
        for g in 0..PRUNE_WIDTHS {
            let d = f64::from(top).powf(f64::from(g) / f64::from(PRUNE_WIDTHS - 1)).round() as u32;
            if let Some(&k) = width.get(&(*p, d)) {
                grid.push(k);
            }
        }
    }
    let mut allowed = vec![false; afters.len() * n_states];
    // Layouts shrunk after preemptions come from these (per interval).
    let mut anchors: Vec<usize> = start.into_iter().collect();
    for (i, (&after, step)) in afters.iter().zip(steps).enumerate() {
        let row = &mut allowed[i * n_states..(i + 1) * n_states];
        row[n_states - 1] = true;
        if let Some(k) = start {
            row[k] = true;
        }
        for &k in &grid {
            row[k] = layouts[k].instances <= after;
        }
        let mut next = Vec::new();
        for p in &kept {
            for &bound in bounds.iter().filter(|&&b| b <= after) {
                if let Some(k) = best_within(&by_depth[p], bound) {
                    row[k] = true;
                    if bound == after {
                        next.push(k);
                    }
                }
            }
        }
        // Dropping replicas is cheap and adding them is not: after
        // preemptions, an anchor minus up to about the most replicas a stage
        // is likely to lose.
        if step.preempted > 0 && step.instances_before > 0 {
            for &k in &anchors {
                let c = layouts[k].config;
                let lam =
                    f64::from(step.preempted) * f64::from(c.data_parallel) / f64::from(step.instances_before);
                let lost = [1, (lam + lam.sqrt()).ceil() as u32, (lam + 2.0 * lam.sqrt()).ceil() as u32 + 1];
                for d in lost.map(|l| c.data_parallel.saturating_sub(l)) {
                    if let Some(&j) = width.get(&(c.pipeline_stages, d))
                        && layouts[j].instances <= after
                    {
                        row[j] = true;
                        next.push(j);
                    }
                }
            }
        }
        // The next interval's anchors: `current`, this interval's shrink
        // targets and the best layout of each kept depth that fits.
        anchors = start.into_iter().chain(next).collect();
        anchors.sort_unstable();
        anchors.dedup();
    }
    allowed
}

/// The plan of layouts over `steps` that maximises the expected samples,
/// starting from `current` with `carried_ms` of migration still to run; one
/// entry per step. See the module documentation for the model, the
/// conventions and the exactness. `cache` memoises transitions across calls.
pub fn best_plan(
    profile: &ModelProfile,
    current: Option<ParallelConfig>,
    carried_ms: f64,
    steps: &[Step],
    interval_ms: u64,
    cache: &mut TransitionCache,
) -> Result<Vec<PlannedStep>, LiveputError> {
    best_plan_with(profile, current, carried_ms, steps, interval_ms, PlanOptions::default(), cache)
}

/// [`best_plan`] with explicit [`PlanOptions`].
pub fn best_plan_with(
    profile: &ModelProfile,
    current: Option<ParallelConfig>,
    carried_ms: f64,
    steps: &[Step],
    interval_ms: u64,
    options: PlanOptions,
    cache: &mut TransitionCache,
) -> Result<Vec<PlannedStep>, LiveputError> {
    best_plan_hedged(profile, current, carried_ms, steps, &[], interval_ms, options, cache)
}

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

/// [`best_plan_with`] when the preemptions of each interval are uncertain:
/// interval `i` is the mixture of its step as given and, for each entry of
/// `churn[i]` (missing entries: none), the same step with `extra` more
/// preemptions and as many more arrivals, with that entry's probability. The
/// program maximises the expected samples over the mixture: the value and the
/// carried leftover of a transition are the probability-weighted sums of the
/// scenarios' (liveput is linear in the outcome distribution, and every
/// scenario ends at the same instances, so the same layouts fit).
///
/// Why: a point forecast of the fleet says nothing about *when* the next burst
/// of preemptions comes, and planned against a forecast with no preemptions
/// the program sees no risk at all in a single-replica or barely replicated
/// layout. Weighting a few burst sizes by their chance per interval makes a
/// layout that a burst would cut (a restart from the checkpoint, losing the
/// work since it) cost what it is expected to cost. A certain burst (`1.0`)
/// is not the same: planned against one in every interval, pausing (which
/// risks nothing) looks best for ever.
///
/// Extra preemptions are clamped to the step's `instances_before`. An
/// interval with exactly one scenario (no churn, or one entry of probability
/// 1 covering it) gives bit-identical numbers to [`best_plan_with`].
#[allow(clippy::too_many_arguments)] // best_plan_with's inputs plus the churn
pub fn best_plan_hedged(
    profile: &ModelProfile,
    current: Option<ParallelConfig>,
    carried_ms: f64,
    steps: &[Step],
    churn: &[Vec<Churn>],
    interval_ms: u64,
    options: PlanOptions,
    cache: &mut TransitionCache,
) -> Result<Vec<PlannedStep>, LiveputError> {
    if !(carried_ms.is_finite() && carried_ms >= 0.0) {
        return Err(LiveputError::BadTime { what: "carried_ms", value: carried_ms });
    }
    let mut afters = Vec::with_capacity(steps.len());
    for s in steps {
        if s.instances_before > MAX_INSTANCES {
            return Err(LiveputError::TooManyInstances { instances: u64::from(s.instances_before) });
        }
        let after = s.instances_after().ok_or(LiveputError::PreemptedAboveInstances {
            preempted: s.preempted,
            instances: s.instances_before,
        })?;
        if after > u64::from(MAX_INSTANCES) {
            return Err(LiveputError::TooManyInstances { instances: after });
        }
        afters.push(after);
    }
    if steps.is_empty() {
        return Ok(Vec::new());
    }
    let mixes = mixtures(steps, churn)?;
    let ctx = PlanContext { profile, recovery: options.recovery, layouts: candidates(profile)? };
    cache.prepare(profile, &options.recovery);
    cache.store.stats.plans += 1;
    let TransitionCache { store, work, .. } = cache;
    let options = PlanOptions { max_front: options.max_front.clamp(2, 1 << 16), ..options };
    run(&ctx, current, carried_ms, &mixes, &afters, interval_ms as f64, store, work, options)
}

/// One interval as the program sees it: scenarios `(probability, step)`, all
/// from the same instances to the same instances.
type Mixture = Vec<(f64, Step)>;

/// The scenarios of every interval: the step as given with the probability
/// `churn` leaves, then one per churn entry (entries of probability 0 and
/// extras clamped to nothing dropped; equal steps merged).
fn mixtures(steps: &[Step], churn: &[Vec<Churn>]) -> Result<Vec<Mixture>, LiveputError> {
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

#[allow(clippy::too_many_arguments)] // the call's inputs plus the cache's two halves
fn run(
    ctx: &PlanContext<'_>,
    current: Option<ParallelConfig>,
    carried_ms: f64,
    steps: &[Mixture],
    afters: &[u64],
    interval_ms: f64,
    store: &mut DistributionStore,
    work: &mut Work,
    options: PlanOptions,
) -> Result<Vec<PlannedStep>, LiveputError> {
    let max_front = options.max_front;
    let layouts = &ctx.layouts;
    let s = layouts.len();
    let pause = s;
    let n_states = s + 1;
    // Layout order for ties: higher throughput, fewer instances, fewer
    // stages, fewer replicas; the pause last.
    let mut order: Vec<usize> = (0..s).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&layouts[a], &layouts[b]);
        y.thr
            .total_cmp(&x.thr)
            .then(x.instances.cmp(&y.instances))
            .then(x.config.pipeline_stages.cmp(&y.config.pipeline_stages))
            .then(x.config.data_parallel.cmp(&y.config.data_parallel))
    });
    order.push(pause);

    let Work { points, ranges, prev, scratch } = work;
    points.clear();
    ranges.clear();
    ranges.resize(steps.len() * n_states, (0, 0));
    prev.clear();
    prev.resize(n_states, (0, 0));
    let start_state = current.and_then(|c| layouts.iter().position(|k| k.config == c)).unwrap_or(pause);
    let allowed = (s > options.prune_above).then(|| {
        // Shrink targets follow the scenario with the most preemptions.
        let heaviest: Vec<Step> = steps
            .iter()
            .map(|m| m.iter().map(|&(_, s)| s).max_by_key(|s| s.preempted).unwrap_or_default())
            .collect();
        pruned_states(layouts, (start_state != pause).then_some(start_state), &heaviest, afters, options)
    });
    // Per scenario of the current interval: probability, table.
    let mut tables: Vec<(f64, Step, usize)> = Vec::new();
    let mut heads: Vec<(f64, usize, usize)> = Vec::new();
    let mut live: Vec<usize> = Vec::with_capacity(n_states);
    points.push(Point {
        value: 0.0,
        leftover: carried_ms,
        samples: 0.0,
        state: start_state as u32,
        pred: u32::MAX,
    });
    prev[start_state] = (0, 1);

    for (i, (mix, &after)) in steps.iter().zip(afters).enumerate() {
        tables.clear();
        for &(p, step) in mix {
            tables.push((p, step, store.table(table_key(step), n_states * n_states)));
        }
        let before = u64::from(mix.first().map_or(0, |m| m.1.instances_before));
        // Predecessors with a front, in the layout order.
        live.clear();
        live.extend(order.iter().copied().filter(|&f| prev[f].1 > 0));
        if allowed.is_some() {
            // Pruned: the most valuable predecessors first; the others only
            // for a layout of the same depth (the pause always).
            let peak = |f: usize| points[prev[f].0 + prev[f].1 - 1].value;
            live.sort_by(|&a, &b| peak(b).total_cmp(&peak(a)));
        }
        for t in 0..n_states {
            let pruned = allowed.as_ref().is_some_and(|a| !a[i * n_states + t]);
            if pruned || (t != pause && layouts[t].instances > after) {
                ranges[i * n_states + t] = (points.len(), 0);
                continue;
            }
            scratch.clear();
            let mut best: Option<Point> = None;
            // Most samples one interval in `t` can yield (no migration, nothing
            // lost), with room for rounding: the sums over outcomes cannot
            // exceed it.
            let bound =
                if t == pause { 0.0 } else { layouts[t].thr * interval_ms / 1000.0 * (1.0 + 1e-9) + 1e-9 };
            // Staying first, then the layout order: the first of equal pairs wins.
            let depth = layouts.get(t).map(|c| c.config.pipeline_stages);
            let candidates = live.iter().copied().enumerate().filter(|&(r, f)| {
                f != t
                    && (allowed.is_none()
                        || r < PRUNE_CROSS
                        || f == pause
                        || layouts.get(f).map(|c| c.config.pipeline_stages) == depth)
            });
            for f in std::iter::once(t).chain(candidates.map(|(_, f)| f)) {
                let (start, len) = prev[f];
                if len == 0 {
                    continue;
                }
                // A predecessor whose most valuable pair, plus the most one
                // interval can train in `t`, cannot beat the best pair without
                // leftover found so far: every pair it yields would be dropped
                // below, so skip it before looking up (or computing) its
                // transition. Exact: the plan is the same, only faster.
                if let Some(b) = best
                    && points[start + len - 1].value + bound <= b.value
                {
                    store.stats.pruned += 1;
                    continue;
                }
                // A layout that does not fit the instances before the change
                // (inconsistent steps, or `current`) counts as nothing running.
                let from = (f != pause && layouts[f].instances <= before).then_some(f);
                let slot = from.unwrap_or(pause) * n_states + t;
                heads.clear();
                for &(p, step, table) in &tables {
                    let (o_start, o_len) = store.entry(table, slot, ctx, step, from, t)?;
                    heads.push((p, o_start, o_start + o_len));
                }
                // One scenario: exactly `liveput()`'s numbers; several: the
                // probability-weighted sum of theirs.
                let single = heads.len() == 1;
                if t == pause {
                    // `liveput()` of a pause: nothing trained, the in-flight
                    // migration runs on, the lost work still lost.
                    let mut samples = 0.0f64;
                    for &(w, a, b) in &heads {
                        let mut part = 0.0f64;
                        for o in &store.outs[a..b] {
                            part -= o.p * o.lost;
                        }
                        samples += if single { part } else { w * part };
                    }
                    for (k, q) in points[start..start + len].iter().enumerate() {
                        let value = q.value + samples;
                        if best.is_some_and(|b| value <= b.value) {
                            continue;
                        }
                        let leftover = (q.leftover - interval_ms).max(0.0);
                        let point =
                            Point { value, leftover, samples, state: t as u32, pred: (start + k) as u32 };
                        if leftover == 0.0 {
                            best = Some(point);
                        } else {
                            scratch.push(point);
                        }
                    }
                    continue;
                }
                let thr_to = layouts[t].thr;
                for (k, q) in points[start..start + len].iter().enumerate() {
                    let (mut samples, mut leftover) = (0.0f64, 0.0f64);
                    for &(w, a, b) in &heads {
                        // `liveput()`, operation for operation.
                        let (mut part, mut left) = (0.0f64, 0.0f64);
                        for o in &store.outs[a..b] {
                            let busy = q.leftover.min(o.abandon) + o.d;
                            let trained = thr_to * (interval_ms - busy).max(0.0) / 1000.0;
                            part += o.p * (trained - o.lost);
                            left += o.p * (busy - interval_ms).max(0.0);
                        }
                        if single {
                            (samples, leftover) = (part, left);
                        } else {
                            samples += w * part;
                            leftover += w * left;
                        }
                    }
                    let value = q.value + samples;
                    if best.is_some_and(|b| value <= b.value) {
                        continue;
                    }
                    let point = Point { value, leftover, samples, state: t as u32, pred: (start + k) as u32 };
                    if leftover == 0.0 {
                        best = Some(point);
                    } else {
                        scratch.push(point);
                    }
                }
            }
            // The front: the best pair without leftover, then the pairs with
            // more leftover and strictly more value, in leftover order.
            let base = points.len();
            let mut top = f64::NEG_INFINITY;
            if let Some(b) = best {
                top = b.value;
                points.push(b);
            }
            if !scratch.is_empty() {
                scratch.sort_by(|a, b| a.leftover.total_cmp(&b.leftover).then(b.value.total_cmp(&a.value)));
                for p in scratch.iter() {
                    if p.value > top {
                        top = p.value;
                        points.push(*p);
                    }
                }
            }
            let len = points.len() - base;
            store.stats.largest_front = store.stats.largest_front.max(len);
            if len > max_front {
                store.stats.front_truncations += 1;
                for k in 0..max_front {
                    points[base + k] = points[base + k * (len - 1) / (max_front - 1)];
                }
                points.truncate(base + max_front);
            }
            ranges[i * n_states + t] = (base, points.len() - base);
        }
        prev.copy_from_slice(&ranges[i * n_states..(i + 1) * n_states]);
        // Back pointers are `u32` (at most `(S + 1) x MAX_FRONT` more pairs
        // per step).
        if points.len().saturating_add(n_states.saturating_mul(max_front)) >= u32::MAX as usize {
            return Err(LiveputError::Numerical { reason: "plan too long for the program's arena" });
        }
    }

    // Best final pair: most value, then least leftover, then `current`, then
    // the layout order.
    // With a terminal value, the last layout is also credited with what it
    // trains over `terminal_ms` after the horizon, once its leftover is done.
    let terminal_ms = options.terminal_ms;
    let final_value = |p: &Point| -> f64 {
        if terminal_ms > 0.0 {
            let thr = layouts.get(p.state as usize).map_or(0.0, |l| l.thr);
            p.value + thr * (terminal_ms - p.leftover).max(0.0) / 1000.0
        } else {
            p.value
        }
    };
    let mut best: Option<usize> = None;
    let final_order = std::iter::once(start_state)
        .filter(|&f| f != pause)
        .chain(order.iter().copied().filter(|&f| f != start_state || f == pause));
    for f in final_order {
        let (start, len) = prev[f];
        for k in start..start + len {
            let p = &points[k];
            let better = best.is_none_or(|b| {
                let b = &points[b];
                let (pv, bv) = (final_value(p), final_value(b));
                pv > bv || (pv == bv && p.leftover < b.leftover)
            });
            if better {
                best = Some(k);
            }
        }
    }
    let mut plan =
        vec![PlannedStep { config: None, expected_samples: 0.0, expected_leftover_ms: 0.0 }; steps.len()];
    let mut at = best.ok_or(LiveputError::Numerical { reason: "no plan reaches the last interval" })?;
    for slot in plan.iter_mut().rev() {
        let p = points[at];
        let state = p.state as usize;
        *slot = PlannedStep {
            config: layouts.get(state).map(|c| c.config),
            expected_samples: p.samples,
            expected_leftover_ms: p.leftover,
        };
        at = p.pred as usize;
    }
    Ok(plan)
}
