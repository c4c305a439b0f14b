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
//! b_o - T)` is non-decreasing in `c` (so is a pause's `max(0, c - T)`),
//! so by induction the best value of the rest of the horizon is non-increasing
//! in `c`, and a dominated pair can never lead to a better plan than the pair
//! that dominates it. Without a cap on the fronts the program returns an optimal
//! plan under the cost model (the tests check it against brute-force
//! enumeration of every plan).
//!
//! **Work at risk.** Under [`crate::at_risk`]'s rule ([`PlanOptions::at_risk`]:
//! the Oracle's and liveput-truth's, the simulator's) a rollback takes back at
//! most what was trained since the last one, so the state also carries the
//! expected samples at risk `r`, and a pair is `(value, leftover, r)`. A pair
//! dominates another of no less leftover when its value is ahead by at least
//! the extra it risks: the rest of the plan is non-increasing in the carry and
//! loses at most `r - r'` more from `r` than from `r' < r` (every sample at
//! risk is rolled back at most once: a rollback's probability is also the
//! probability that `r` resets), by induction over the intervals; a carry
//! that trains less now also risks less next, but never by more than it
//! trained less. So the fronts stay exact (checked against every decision
//! sequence in `crates/sim/tests/simulate.rs`). Without the rule every `r` is
//! infinite and value alone decides, as above, bit for bit. The fronts are
//! larger with it (up to 49 pairs on the p3-shaped trace of `timing`), so the
//! Oracle keeps up to 1,024 (`parcae_sim::oracle_options`) and takes 2x to 23x
//! as long as without the rule. The online policy, which is not told when the
//! job last rolled back, plans without it (planning with it from the steady
//! state chose the same layouts on the p3 segments in 12x the time).
//!
//! **A pause's write.** A pause protects the state once its write lands
//! ([`crate::recovery`], "A pause's write"); when the largest stage of the
//! layout it paused from takes longer than an interval to write (beyond the
//! notice), the state of the pause remembers that layout and how many of the
//! exposed boundaries are behind it: one "parked" state per layout and
//! exposed boundary, after the pause `S`. A parked state moves on to the next
//! (the last to `S`) or resumes, and every transition out of it also rolls
//! back what that layout's holders lose at the boundary it crosses. So the
//! program stays exact (checked against every decision sequence in
//! `crates/sim/tests/simulate.rs` with writes of one and two boundaries); where every write fits an interval (every p3 model at
//! minute-long intervals) there are no parked states and the plans are those
//! of before the rule, bit for bit.
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
//!   layouts of its depth, the pause, and the `PRUNE_CROSS` = 4 predecessors
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
//! instances are preempted
//! ([`transition_distribution`](crate::liveput::transition_distribution))
//! depends on the old and new layouts, `instances_before` and `preempted`, but
//! not on `arrived` (which only decides whether the new layout fits), nor, when
//! nobody is preempted, on `instances_before`. [`TransitionCache`] memoises the distributions per
//! `(instances_before, preempted)` in a table indexed by `(from, to)`, across
//! calls, and the program evaluates each one for every carried leftover with
//! the same arithmetic, in the same order, as `liveput()` does: the numbers are
//! identical, not just close (tested).
//!
//! Five things keep this fast without changing a bit of it:
//! - **Plans recalled.** A program asked again with exactly the inputs of one
//!   of the last few is answered with that plan (`recall`): the online
//!   policy's shadows and deferred plan often repeat its plan's program.
//! - **Stopping the search for predecessors early.** Predecessors are tried
//!   in tie order. Once even the most valuable front left, plus the most one
//!   interval can train, cannot beat the best pair found, none of them can,
//!   so the search for that state stops (`Work::live_tops`).
//! - **Tables found by a multiply.** A scenario's table is found by its key
//!   with one multiply per word, not a tree search.
//! - **Sums at rest remembered.** A pair that carries nothing in, planned
//!   without the work-at-risk rule, is priced by the distribution, the speed,
//!   the lost work's scale and the interval alone: a fixed table keeps those
//!   sums by all of them, bit for bit (`at_rest`), and gives them back to the
//!   next program that prices the same pair.
//! - **A threshold sweep resumed.** The distribution of the slowest stage's
//!   time sums over the preemption counts once per threshold; each run after
//!   the first resumes at the first stage whose allowed counts changed
//!   (`liveput::exact`), the stages before it being the same sums.
//!
//! # Conventions
//!
//! - **Pauses.** `None` is a state like any layout: it trains nothing and, as
//!   in `liveput()`, lets the in-flight migration run on (state must be
//!   consistent before anything can resume), carrying `max(0, c - T)` into
//!   the next interval; leaving a pause is a cold start. Work lost to a
//!   restart is charged as negative samples at the restart, whatever runs
//!   next, so a pause cannot erase it.
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
//! # Recourse at bursts
//!
//! A hedged plan ([`best_plan_hedged`]) is one sequence of layouts, yet the
//! job re-plans every interval: when a burst takes some of a layout's
//! instances, it chooses its response with the burst observed. Priced as the
//! plan stands, every burst on a layout the plan keeps is a refill (spares
//! joining the stages that lost replicas), which for a large model moves a
//! whole stage's state and pays the joining instances' rendezvous: about 45 s
//! for GPT-6.7B on the p3 profile, where shedding a stage onto the survivors
//! costs about 19 s. So a layout with room to shed looked no more robust
//! than one without, and the plan never chose one. With
//! [`PlanOptions::recourse`] (the online planners' setting,
//! [`crate::robust::RobustLiveput::recourse`]), the program credits each
//! stay, per burst scenario, with the best shed's gain over the refill:
//!
//! - a plan over varying speeds (a mixed fleet) or a pruned profile is not
//!   credited;
//! - only the eight layouts most promising at each interval are credited
//!   (what one interval in each and what it earns after with no burst can
//!   add up to): crediting every layout doubled the default's time over the
//!   p3 trace and, on the table and the bounded-lifetime fleets, changed no
//!   decision;
//! - a shed is a layout of fewer replicas of the same stages, or of the same
//!   replicas of fewer stages, that fits then (a forced first layout,
//!   [`PlanOptions::first`], does not bind it: the job answers a burst
//!   whatever it chose before); each side is valued as one interval from no
//!   carried migration (the migration's expected time at the target's speed)
//!   plus what the target earns from the next interval to the end of the
//!   horizon and its terminal value with no further burst (a backward pass
//!   over the steps as forecast): a shed onto a layout the job would soon
//!   leave again, to refill when the fleet is whole, gains nothing;
//! - the gain is weighted by the scenario's chance and by the chance that no
//!   burst came in the horizon's earlier intervals: the plan stays in the
//!   layout, so it may shed only once, at the first burst;
//! - and by the share of the churn estimate the run has seen: the estimate's
//!   prior is a caution for a run with no history, so what it fears is
//!   priced in full but nothing is credited for it. Measured: crediting the
//!   prior's bursts as well held a random fleet's GPT-1.5B (p3, 20-21
//!   instances, unannounced) in 2x10 rather than reactive's 3x7 from the
//!   start, and the first burst, of 7, cut a stage: 0.9935 of reactive.
//!
//! Only the weights depend on the churn. The backward pass and each shed's
//! gain depend on the steps and instances as forecast alone, so they are
//! kept between the programs of one call (the plan, the real job's from its
//! work at risk, the deferred one) and between calls while the forecast
//! stays the same (`RecourseMemo`).
//!
//! The rest of the plan is still priced from the layout kept, so this is an
//! approximation of the job's recourse, not the program's exact objective;
//! without bursts (a point forecast, the Oracle) nothing is credited and
//! every plan is bit for bit as without it (`hedged_without_risk_is_bit_identical`;
//! `recourse_credits_the_best_shed_at_the_first_burst` checks the credit
//! against every plan of three intervals). The README (*The default
//! policy*, mechanism 10) has what it was measured to do.
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
//! bound and the pair models; 14-970 ms under the work-at-risk rule, measured
//! later beside 7-43 ms without it).
//!
//! # Modules
//!
//! - `cache`: the [`TransitionCache`], distributions kept across calls;
//! - `layouts`: the layouts a plan may use and the order that breaks ties;
//! - `pruning`: the candidate states of large profiles;
//! - `scenarios`: the [`Churn`] hedged against, as a mixture of steps;
//! - `program`: the dynamic program itself.

mod at_rest;
mod cache;
mod layouts;
mod program;
mod pruning;
mod recall;
mod scenarios;
#[cfg(test)]
pub(crate) mod tests;

pub use cache::{
    COMPARED_PAIRS_PER_WORK, COMPUTED_TERM_WORK, CacheStats, DEFAULT_MAX_CACHED_OUTCOMES,
    DEFAULT_MAX_TABLE_ENTRIES, MODEL_BUILT_WORK, SORTED_PAIR_WORK, TransitionCache,
};
pub use scenarios::Churn;

use crate::liveput::{LiveputError, MAX_INSTANCES};
use crate::{IntervalStats, ModelProfile, ParallelConfig, Recovery};
use layouts::{PlanContext, candidates};
use program::Horizon;

/// Largest Pareto front of `(value, leftover)` pairs kept per interval and
/// layout; see the module documentation.
pub const MAX_FRONT: usize = 32;

/// Profiles with more layouts than this are planned over pruned candidates
/// (see [`PlanOptions::prune_above`]); smaller ones, such as every p3 profile
/// (at most 62 layouts), exactly as without pruning.
pub const PRUNE_ABOVE: usize = 64;

/// Depths kept per interval when pruning (see [`PlanOptions::prune_depths`]).
pub const PRUNE_DEPTHS: usize = 3;

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
    /// below the reactive baseline on calm fleets. A hedged plan also charges
    /// the layout for what the last interval's churn would roll back over
    /// that time (its wipes: the work since the checkpoint and the restart):
    /// else a layout one unannounced preemption cuts looks safe for the whole
    /// terminal time, and the plan drifts to it where preemptions are
    /// frequent. 0 (the default, and the Oracle's: its horizon is the whole
    /// trace) credits nothing.
    pub terminal_ms: f64,
    /// The layout the first interval must run (`None`, the default: free).
    /// Lets a caller price a plan that starts as another policy would, against
    /// the unconstrained best ([`best_plan_scored`]); a layout not in the
    /// profile, or that does not fit the first interval's instances, is an
    /// error.
    pub first: Option<ParallelConfig>,
    /// The samples at risk before the first interval, under the rule of
    /// [`crate::at_risk`]: a rollback takes back at most what was trained since
    /// the job last (re)started, and the program keeps it as a third
    /// coordinate of its fronts. `None` (the default, and the online policy's:
    /// it is not told when the job last restarted) charges every rollback its
    /// steady-state share, bit for bit as before the rule. The Oracle starts
    /// at `Some(0.0)` (a cold start), a receding-horizon planner at what the
    /// simulator carries.
    pub at_risk: Option<f64>,
    /// When nothing runs before the first interval because the job paused and
    /// the pause's write has not landed yet ([`crate::recovery`], "A pause's
    /// write"): the layout it paused from and how many exposed boundaries are
    /// left, the next one included. The plan then starts in that parked
    /// state, so its first boundaries roll back what those holders lose, as
    /// the simulator charges them. `None` (the default, and the online
    /// policy's: it is told only that nothing runs): the plain pause. Ignored
    /// when `current` runs a layout or the pause from that layout is not
    /// exposed for that many boundaries.
    pub parked: Option<ParkedPause>,
    /// Stop planning with [`LiveputError::WorkLimit`] once the cache's work
    /// count ([`CacheStats::work`]) passes this: a caller held to a budget
    /// per call (a guest's fuel) plans again more coarsely instead of
    /// running out. Checked after each interval of the program and before
    /// each transition distribution it computes. `None` (the default): no
    /// limit.
    pub work_limit: Option<u64>,
    /// Price a hedged plan's bursts as the job meets them (see *Recourse at
    /// bursts* above): where the plan stays in a layout and a burst
    /// ([`Churn`]) takes some of its instances, the receding-horizon job
    /// re-plans with the burst observed and may shed onto the survivors
    /// rather than refill the layout from spares. This is the share of each
    /// burst's shed gain the plan is credited (clamped to `0..=1`): the
    /// online planner's is the share of the churn estimate its history
    /// showed ([`crate::churn::ChurnEstimator::estimate_seen`]). 0 (the default,
    /// the Oracle's: it knows every burst) prices the plan as given.
    pub recourse: f64,
    /// Whether the plan may pause while a layout fits. A plan that knows
    /// when an unannounced loss strikes can pause just before it and lose
    /// nothing, which no policy that is not told can do; `false` leaves the
    /// pause to intervals where no layout fits: a reference plan that knows
    /// the counts but cannot stop early (`parcae_sim::oracle_without_pauses`;
    /// the recourse's sheds, which it does not credit, are priced as
    /// before). `true` (the default, the Oracle's and every policy's): a
    /// pause is a state like any layout.
    pub pause_by_choice: bool,
}

/// A pause whose write has not landed ([`PlanOptions::parked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParkedPause {
    /// The layout that held the state when the job paused.
    pub layout: ParallelConfig,
    /// Exposed boundaries left, the next one included (at least 1).
    pub boundaries_left: u32,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            recovery: Recovery::UNANNOUNCED,
            max_front: MAX_FRONT,
            prune_above: PRUNE_ABOVE,
            prune_depths: PRUNE_DEPTHS,
            terminal_ms: 0.0,
            first: None,
            at_risk: None,
            parked: None,
            work_limit: None,
            recourse: 0.0,
            pause_by_choice: true,
        }
    }
}

/// A plan and the value the program maximised to find it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredPlan {
    /// One entry per step.
    pub steps: Vec<PlannedStep>,
    /// The expected samples over the horizon plus the terminal value (if
    /// any): the program's objective, comparable between plans of the same
    /// inputs (e.g. with and without [`PlanOptions::first`]).
    pub objective: f64,
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
/// An entry of `churn` past the last step is the churn after the horizon,
/// what [`PlanOptions::terminal_ms`] charges the last layout for; without
/// one, the last step's. (A plan of one observed interval has no churn of its
/// own, yet its terminal value stands for the intervals after it.)
///
/// Extra preemptions are clamped to the step's `instances_before`. An
/// interval with exactly one scenario (no churn, or one entry of probability
/// 1 covering it) gives bit-identical numbers to [`best_plan_with`].
#[allow(clippy::too_many_arguments, reason = "best_plan_with's inputs plus the churn")]
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
    best_plan_scored(profile, current, carried_ms, steps, churn, interval_ms, options, cache).map(|p| p.steps)
}

/// [`best_plan_hedged`] with the program's objective: what a caller needs to
/// weigh the best plan against one constrained by [`PlanOptions::first`].
#[allow(clippy::too_many_arguments, reason = "best_plan_hedged's inputs")]
pub fn best_plan_scored(
    profile: &ModelProfile,
    current: Option<ParallelConfig>,
    carried_ms: f64,
    steps: &[Step],
    churn: &[Vec<Churn>],
    interval_ms: u64,
    options: PlanOptions,
    cache: &mut TransitionCache,
) -> Result<ScoredPlan, LiveputError> {
    plan(profile, None, current, carried_ms, steps, churn, interval_ms, options, cache)
}

/// [`best_plan_with`] when what each layout trains changes from interval to interval: a
/// mixed fleet, whose composition of instance types sets every layout's throughput
/// ([`crate::mixed`]), or a checkpoint cadence that follows the losses seen so far
/// (each interval's `checkpoint_interval_ms` and the throughput its checkpoints leave).
/// `profile` lists every layout the plan may use and prices every transition;
/// `speeds[0]` is the profile `current` ran under (its lost work is valued at that
/// speed and cadence) and `speeds[i + 1]` the one interval `i` trains under: a layout
/// it does not list, or lists at zero throughput, cannot run there. With every entry
/// `profile` itself, the plan is [`best_plan_with`]'s, number for number.
#[allow(clippy::too_many_arguments, reason = "best_plan_with's inputs plus the speeds")]
pub fn best_plan_varying(
    profile: &ModelProfile,
    speeds: &[&ModelProfile],
    current: Option<ParallelConfig>,
    carried_ms: f64,
    steps: &[Step],
    interval_ms: u64,
    options: PlanOptions,
    cache: &mut TransitionCache,
) -> Result<Vec<PlannedStep>, LiveputError> {
    if speeds.len() != steps.len() + 1 {
        return Err(LiveputError::SpeedsLength { steps: steps.len(), speeds: speeds.len() });
    }
    plan(profile, Some(speeds), current, carried_ms, steps, &[], interval_ms, options, cache).map(|p| p.steps)
}

/// The program over `steps`, hedged by `churn`, each interval at the throughputs of
/// `speeds` when given (see [`best_plan_varying`]).
#[allow(clippy::too_many_arguments, reason = "the public entry points' inputs together")]
fn plan(
    profile: &ModelProfile,
    speeds: Option<&[&ModelProfile]>,
    current: Option<ParallelConfig>,
    carried_ms: f64,
    steps: &[Step],
    churn: &[Vec<Churn>],
    interval_ms: u64,
    options: PlanOptions,
    cache: &mut TransitionCache,
) -> Result<ScoredPlan, LiveputError> {
    if !(carried_ms.is_finite() && carried_ms >= 0.0) {
        return Err(LiveputError::BadTime { what: "carried_ms", value: carried_ms });
    }
    if let Some(at_risk) = options.at_risk.filter(|r| !(r.is_finite() && *r >= 0.0)) {
        return Err(LiveputError::BadTime { what: "at_risk", value: at_risk });
    }
    let afters = instances_after_each(steps)?;
    if steps.is_empty() {
        return Ok(ScoredPlan { steps: Vec::new(), objective: 0.0 });
    }
    let mixtures = scenarios::mixtures(steps, churn)?;
    let ctx = PlanContext {
        profile,
        recovery: options.recovery,
        layouts: candidates(profile)?,
        work_limit: options.work_limit,
    };
    if let Some(config) = options.first.filter(|&c| ctx.layouts.iter().all(|l| l.config != c)) {
        return Err(LiveputError::UnknownConfig { config });
    }
    let states: Vec<ParallelConfig> = ctx.layouts.iter().map(|l| l.config).collect();
    cache.begin(profile, &options.recovery, &states);
    let options = PlanOptions { max_front: options.max_front.clamp(2, 1 << 16), ..options };
    let inputs = recall::PlanInputs::new(current, carried_ms, steps, churn, interval_ms, &options);
    if let Some(plan) = cache.recall(&inputs, profile, speeds) {
        return Ok(plan);
    }
    let rows = speeds.map(|speeds| speed_rows(&ctx, speeds)).transpose()?;
    let horizon = Horizon {
        steps,
        mixtures: &mixtures,
        afters: &afters,
        interval_ms: interval_ms as f64,
        current,
        carried_ms,
        speeds: rows.as_ref(),
        terminal_churn: churn.get(steps.len()).or(churn.get(steps.len() - 1)).map_or(&[][..], Vec::as_slice),
    };
    let (store, work) = cache.parts();
    let plan = program::run(&ctx, &horizon, options, store, work)?;
    cache.recent.keep(inputs, profile, speeds, plan.clone());
    Ok(plan)
}

/// Per profile of `speeds`, the throughput of each of the program's layouts (0 where it
/// is not listed) and its rollbacks relative to the program's profile.
fn speed_rows(ctx: &PlanContext<'_>, speeds: &[&ModelProfile]) -> Result<program::Speeds, LiveputError> {
    let thr = speeds
        .iter()
        .map(|p| {
            ctx.layouts
                .iter()
                .map(|l| {
                    let thr = p.config(l.config).map_or(0.0, |c| c.samples_per_second);
                    if thr.is_finite() && thr >= 0.0 {
                        Ok(thr)
                    } else {
                        Err(LiveputError::BadProfileValue {
                            field: format!("configs[{}].samples_per_second", l.config),
                            value: thr,
                        })
                    }
                })
                .collect()
        })
        .collect::<Result<_, _>>()?;
    let profiled = crate::liveput::lost_work_ms(ctx.profile);
    let lost_factor = speeds
        .iter()
        .map(|p| {
            let lost = crate::liveput::lost_work_ms(p);
            if profiled > 0.0 && lost != profiled { lost / profiled } else { 1.0 }
        })
        .collect();
    Ok(program::Speeds { thr, lost_factor })
}

/// The instances after each step's change; an error for a step that preempts
/// more instances than it has, or has more than [`MAX_INSTANCES`] before or
/// after.
fn instances_after_each(steps: &[Step]) -> Result<Vec<u64>, LiveputError> {
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
    Ok(afters)
}
