//! The dynamic program: per interval and state, the Pareto front of
//! `(value so far, leftover)` pairs over the plans that reach it (and, under
//! [`crate::at_risk`]'s rule, the work at risk as a third coordinate), built
//! from the previous interval's fronts with `liveput()`'s arithmetic; then the
//! best final pair, traced back into a plan. See the module documentation of
//! [`super`] for why it is exact.

use super::at_rest::AtRest;
use super::cache::{CacheStats, DistributionStore, OutcomeTerms, table_key};
use super::layouts::{PlanContext, tie_order};
use super::pruning::{pruned_states, tries_predecessor};
use super::scenarios::{Churn, Mixture, mixtures};
use super::{PlanOptions, Step};
use super::{PlannedStep, ScoredPlan};
use crate::ParallelConfig;
use crate::at_risk::{at_risk_after, rolled_back};
use crate::liveput::{LiveputError, lost_work_ms};
use crate::recovery::{exposed_fleet, pause_exposed_boundaries};

/// One pair of a Pareto front, with its back pointer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Point {
    /// Expected samples from the first interval to this one.
    value: f64,
    /// Expected leftover carried out of this interval, ms.
    leftover: f64,
    /// Expected samples at risk after this interval ([`crate::at_risk`]);
    /// infinite when the plan charges every rollback its steady-state share.
    at_risk: f64,
    /// Expected samples of this interval.
    samples: f64,
    /// State of this interval (layout index, or `S` for a pause).
    state: u32,
    /// Index of the predecessor pair in the arena (`u32::MAX` for the start).
    pred: u32,
}

/// The program's buffers, kept in the [`super::TransitionCache`] so that
/// repeated calls do not reallocate them.
#[derive(Debug, Clone, Default)]
pub(super) struct Work {
    /// Arena of every front's pairs.
    points: Vec<Point>,
    /// Each front's span in `points`, per interval and state.
    ranges: Vec<Span>,
    /// Fronts of the previous interval, per state.
    prev: Vec<Span>,
    /// Candidate pairs with a positive leftover.
    scratch: Vec<Point>,
    /// Per scenario of the current interval: its table of distributions.
    scenarios: Vec<ScenarioTable>,
    /// Per scenario of the current transition: where its outcomes lie.
    outcomes: Vec<ScenarioOutcomes>,
    /// Predecessor states with a front, in the order they are tried.
    live: Vec<usize>,
    /// Per rank in `live`: the most value any front from that rank on holds
    /// (a search for a state's best pair stops where even that cannot win).
    live_tops: Vec<f64>,
    /// Per parked pause with a front, per scenario of the current interval:
    /// where the outcomes of its holders at the interval's boundary lie
    /// ([`Parked`]), looked up once per interval.
    exposed: Vec<ScenarioOutcomes>,
    /// Per parked pause (state `S + 1 + k`): its range in `exposed`.
    exposed_ranges: Vec<(usize, usize)>,
    /// With [`PlanOptions::recourse`] and bursts: per interval and layout
    /// (row-major, one row of layouts per interval), what staying in the
    /// layout gains from shedding at a burst rather than refilling; empty
    /// otherwise ([`Program::prepare_recourse`]).
    recourse: Vec<f64>,
    /// What `recourse` is priced from, kept while the horizon's steps and
    /// instances stay the same.
    recourse_memo: RecourseMemo,
}

/// The part of [`Work::recourse`] that the churn's probabilities do not
/// change ([`Program::prepare_recourse`]).
#[derive(Debug, Clone, Default)]
pub(super) struct RecourseMemo {
    /// What it was priced from ([`Program::calm_key`]); empty: nothing.
    key: Vec<u64>,
    /// Per interval boundary (`0..=len`, row-major) and layout: what the
    /// layout earns from there to the end with no burst.
    after_calm: Vec<f64>,
    /// Per interval: the layouts that fit after its change, by the most
    /// they can earn from it ([`Program::by_bound`]).
    order: Vec<Vec<(f64, usize)>>,
    /// Per interval and layout held (row-major), per burst (its table): the
    /// best shed's gain over refilling ([`Program::shed_gain`]). A handful
    /// of bursts each, so searched in order.
    sheds: Vec<Vec<((u32, u32), f64)>>,
}

impl Work {
    /// Forget the memoised recourse ([`Work::recourse_memo`]): the store's
    /// distributions were priced on another cost basis.
    pub(super) fn forget_recourse(&mut self) {
        self.recourse.clear();
        self.recourse_memo = RecourseMemo::default();
    }
}

/// Where one front lies in the arena, and the most value any of its pairs
/// holds: read once per predecessor and state by the skip test, so kept
/// rather than rescanned (under the work-at-risk rule the most valuable pair
/// need not be the last).
#[derive(Debug, Clone, Copy, Default)]
struct Span {
    start: usize,
    len: usize,
    top: f64,
}

/// One scenario of an interval and the distribution table of its step.
#[derive(Debug, Clone, Copy)]
struct ScenarioTable {
    /// Probability of the scenario.
    probability: f64,
    /// The scenario's step.
    step: Step,
    /// Index of its `(from, to)` table in the store.
    table: usize,
}

/// One scenario's outcomes of a transition: `outs[start..end]` of the store.
#[derive(Debug, Clone, Copy)]
struct ScenarioOutcomes {
    /// Probability of the scenario.
    weight: f64,
    /// First outcome.
    start: usize,
    /// One past the last outcome.
    end: usize,
}

/// What one planning call has checked and prepared for the program.
pub(super) struct Horizon<'a> {
    /// Each interval's step as forecast, before the churn.
    pub(super) steps: &'a [Step],
    /// Scenarios of each interval.
    pub(super) mixtures: &'a [Mixture],
    /// Instances after each interval's change (every scenario ends there).
    pub(super) afters: &'a [u64],
    /// Length of one interval, ms.
    pub(super) interval_ms: f64,
    /// Layout running before the first interval.
    pub(super) current: Option<ParallelConfig>,
    /// Migration time still to run before the first interval, ms.
    pub(super) carried_ms: f64,
    /// When throughput or the checkpoint cadence varies between intervals (a mixed
    /// fleet; a cadence that follows the losses seen so far): see [`Speeds`].
    /// `None`: the profile's throughout.
    pub(super) speeds: Option<&'a Speeds>,
    /// The churn of the last interval: with a terminal value, the last layout is
    /// charged for the work this churn's wipes would roll back after the
    /// horizon (empty: nothing).
    pub(super) terminal_churn: &'a [Churn],
}

/// What each interval trains and rolls back when the profile varies between
/// intervals: row 0 is the profile before the first interval, row `i + 1`
/// interval `i`'s.
pub(super) struct Speeds {
    /// Per row and layout, samples/s; 0 where it cannot run.
    pub(super) thr: Vec<Vec<f64>>,
    /// Per row, the work a rollback of what was trained then loses relative to
    /// the profile's (the checkpoint cadence of that row over the profile's).
    pub(super) lost_factor: Vec<f64>,
}

/// The best plan over `horizon`, one step per interval.
pub(super) fn run(
    ctx: &PlanContext<'_>,
    horizon: &Horizon<'_>,
    options: PlanOptions,
    store: &mut DistributionStore,
    work: &mut Work,
) -> Result<ScoredPlan, LiveputError> {
    let program = Program::new(ctx, horizon, options);
    program.start(horizon, work);
    program.prepare_recourse(horizon, store, work)?;
    for (i, (mix, &after)) in horizon.mixtures.iter().zip(horizon.afters).enumerate() {
        program.advance(i, mix, after, store, work)?;
        if let Some(limit) = options.work_limit.filter(|&limit| store.stats.work() > limit) {
            return Err(LiveputError::WorkLimit { limit });
        }
    }
    let penalties = program.terminal_penalties(horizon, store)?;
    let best = program.best_final_pair(work, penalties.as_deref()).ok_or(match options.first {
        Some(_) => LiveputError::Numerical { reason: "the forced first layout does not fit its interval" },
        None => LiveputError::Numerical { reason: "no plan reaches the last interval" },
    })?;
    let objective = program.final_value(&work.points[best], penalties.as_deref());
    Ok(ScoredPlan { steps: program.trace_back(&work.points, best, horizon.mixtures.len()), objective })
}

/// What every interval of one run shares.
struct Program<'a> {
    /// The profile, the recovery rules and the layouts.
    ctx: &'a PlanContext<'a>,
    /// Length of one interval, ms.
    interval_ms: f64,
    /// Largest front kept, the terminal value and the pruning knobs.
    options: PlanOptions,
    /// The pause's state index (`S`): layouts are `0..S`, the parked pauses
    /// follow it ([`Program::parked`]).
    pause: usize,
    /// The pauses whose write has not landed yet: entry `k` is state
    /// `S + 1 + k`, a layout's consecutive (boundary 1, 2, ...).
    parked: Vec<Parked>,
    /// Per layout: the state of its first parked pause, when pausing from it
    /// leaves its holders exposed ([`pause_exposed_boundaries`]); `None`: it
    /// pauses into `S`.
    parks_into: Vec<Option<usize>>,
    /// Every state in the order that breaks ties ([`tie_order`]).
    order: Vec<usize>,
    /// The state of `current`: its layout, or the pause when it is none or
    /// not in the profile.
    start_state: usize,
    /// With pruning, per interval and state whether it may be chosen.
    allowed: Option<Vec<bool>>,
    /// The only state the first interval may choose ([`PlanOptions::first`]).
    first: Option<usize>,
    /// Per-interval throughputs and rollbacks ([`Horizon::speeds`]).
    speeds: Option<&'a Speeds>,
    /// The most that can be at risk: the fastest layout's rollback at any
    /// interval's speed ([`crate::at_risk::ceiling`]).
    risk_ceiling: f64,
    /// Per layout, the samples a restart from it rolls back at the profile's
    /// speed and cadence ([`crate::liveput::lost_samples`]).
    lost_units: Vec<f64>,
}

impl<'a> Program<'a> {
    fn new(ctx: &'a PlanContext<'a>, horizon: &Horizon<'a>, options: PlanOptions) -> Self {
        let layouts = &ctx.layouts;
        let pause = layouts.len();
        let start_state =
            horizon.current.and_then(|c| layouts.iter().position(|k| k.config == c)).unwrap_or(pause);
        let allowed = (layouts.len() > options.prune_above).then(|| {
            let start = (start_state != pause).then_some(start_state);
            pruned_states(layouts, start, horizon.mixtures, horizon.afters, options)
        });
        let mut parked = Vec::new();
        let parks_into: Vec<Option<usize>> = layouts
            .iter()
            .enumerate()
            .map(|(layout, choice)| {
                let exposed =
                    pause_exposed_boundaries(ctx.profile, &ctx.recovery, choice.config, horizon.interval_ms);
                let first = (exposed > 0).then(|| pause + 1 + parked.len());
                parked.extend((1..=exposed).map(|boundary| Parked {
                    layout,
                    boundary,
                    last: boundary == exposed,
                }));
                first
            })
            .collect();
        let mut order = tie_order(layouts);
        order.extend(pause + 1..pause + 1 + parked.len());
        // A job still writing the state of its pause starts in that parked
        // state: its `boundaries_left`-th boundary from the end.
        let start_state = options
            .parked
            .filter(|_| start_state == pause)
            .and_then(|p| {
                let layout = layouts.iter().position(|k| k.config == p.layout)?;
                let first = parks_into[layout]?;
                let exposed = parked.iter().filter(|q| q.layout == layout).count();
                let left = p.boundaries_left as usize;
                (1..=exposed).contains(&left).then(|| first + exposed - left)
            })
            .unwrap_or(start_state);
        Program {
            ctx,
            interval_ms: horizon.interval_ms,
            options,
            pause,
            parked,
            parks_into,
            order,
            start_state,
            allowed,
            // `plan` refuses a forced layout outside the profile before this.
            first: options.first.and_then(|c| layouts.iter().position(|k| k.config == c)),
            speeds: horizon.speeds,
            lost_units: {
                let lost_work = lost_work_ms(ctx.profile);
                layouts.iter().map(|l| lost_work * l.thr / 1000.0).collect()
            },
            risk_ceiling: match horizon.speeds {
                None => crate::at_risk::ceiling(ctx.profile),
                Some(speeds) => crate::at_risk::ceiling_at(
                    ctx.profile,
                    speeds.thr.iter().flatten().copied().fold(0.0, f64::max),
                ),
            },
        }
    }

    /// Throughput of layout `t` in interval `i` (`i = 0` is the first), samples/s.
    fn thr(&self, i: usize, t: usize) -> f64 {
        match self.speeds {
            Some(speeds) => speeds.thr[i + 1][t],
            None => self.ctx.layouts[t].thr,
        }
    }

    /// Samples a restart from layout `f` into interval `i` rolls back (before
    /// the work at risk caps it): the profile's lost work at `f`'s speed
    /// ([`Program::lost_units`]), scaled to the speed and checkpoint cadence
    /// `f` trained at in the interval before. The stored outcomes only flag a
    /// loss, so they hold for any speeds and cadence.
    fn lost_scale(&self, i: usize, f: usize) -> f64 {
        let unit = self.lost_units.get(f).copied().unwrap_or(0.0);
        match self.speeds {
            Some(speeds) if f != self.pause => {
                let profiled = self.ctx.layouts[f].thr;
                unit * if profiled > 0.0 { speeds.thr[i][f] / profiled * speeds.lost_factor[i] } else { 0.0 }
            }
            _ => unit,
        }
    }

    /// The share of a burst's shed gain credited ([`PlanOptions::recourse`],
    /// clamped to `0..=1`; not a number: nothing).
    fn recourse_share(&self) -> f64 {
        let share = self.options.recourse;
        if share.is_nan() { 0.0 } else { share.clamp(0.0, 1.0) }
    }

    /// Whether rollbacks are capped by the work at risk ([`PlanOptions::at_risk`]).
    fn capped(&self) -> bool {
        self.options.at_risk.is_some()
    }

    /// Every state: the layouts, the pause and the parked pauses.
    fn n_states(&self) -> usize {
        self.pause + 1 + self.parked.len()
    }

    /// The states the transition store and the pruning know: the layouts and
    /// the pause (a parked pause is a pause to them).
    fn base_states(&self) -> usize {
        self.pause + 1
    }

    /// The parked pause of state `f`, if it is one.
    fn parked_state(&self, f: usize) -> Option<Parked> {
        f.checked_sub(self.pause + 1).map(|k| self.parked[k])
    }

    /// Whether state `f` may precede state `t` in an interval whose change
    /// starts from `before` instances: any state may run a layout; a layout
    /// whose pause is exposed pauses into its first parked state (when it
    /// runs on the instances before, else nothing runs and it pauses into
    /// `S`); a parked pause moves on to the next boundary's, the last into `S`.
    fn leads_to(&self, f: usize, t: usize, before: u64) -> bool {
        let fits = |f: usize| self.ctx.layouts[f].instances <= before;
        if t < self.pause {
            return true;
        }
        if t == self.pause {
            return match self.parked_state(f) {
                Some(parked) => parked.last,
                None => f == self.pause || self.parks_into[f].is_none() || !fits(f),
            };
        }
        match self.parked_state(t) {
            Some(Parked { layout, boundary: 1, .. }) => f == layout && fits(f),
            _ => f + 1 == t,
        }
    }

    /// Empty the buffers and seed the front of the start state with the
    /// single pair (nothing trained, `carried_ms` to run).
    fn start(&self, horizon: &Horizon<'_>, work: &mut Work) {
        let n_states = self.n_states();
        work.points.clear();
        work.ranges.clear();
        work.ranges.resize(horizon.mixtures.len() * n_states, Span::default());
        work.prev.clear();
        work.prev.resize(n_states, Span::default());
        work.points.push(Point {
            value: 0.0,
            leftover: horizon.carried_ms,
            at_risk: self.options.at_risk.unwrap_or(f64::INFINITY),
            samples: 0.0,
            state: self.start_state as u32,
            pred: u32::MAX,
        });
        work.prev[self.start_state] = Span { start: 0, len: 1, top: 0.0 };
    }

    /// Build the fronts of interval `i` (scenarios `mix`, `after` instances
    /// after its change) from those of the interval before.
    fn advance(
        &self,
        i: usize,
        mix: &Mixture,
        after: u64,
        store: &mut DistributionStore,
        work: &mut Work,
    ) -> Result<(), LiveputError> {
        let n_states = self.n_states();
        work.scenarios.clear();
        for &(probability, step) in mix {
            let table = store.table(table_key(step));
            work.scenarios.push(ScenarioTable { probability, step, table });
        }
        let before = u64::from(mix.first().map_or(0, |m| m.1.instances_before));
        self.order_predecessors(work);
        self.expose_all(store, work)?;
        for t in 0..n_states {
            let range = if self.may_choose(i, t, after) {
                self.front(i, t, before, store, work)?
            } else {
                Span { start: work.points.len(), len: 0, top: f64::NEG_INFINITY }
            };
            work.ranges[i * n_states + t] = range;
        }
        work.prev.copy_from_slice(&work.ranges[i * n_states..(i + 1) * n_states]);
        // Back pointers are `u32` (at most `(S + 1) x MAX_FRONT` more pairs
        // per step).
        if work.points.len().saturating_add(n_states.saturating_mul(self.options.max_front))
            >= u32::MAX as usize
        {
            return Err(LiveputError::Numerical { reason: "plan too long for the program's arena" });
        }
        Ok(())
    }

    /// The states with a front in the previous interval, in the order they are
    /// tried as predecessors: the tie order, or, when pruning, the most
    /// valuable first (the others are tried only for a layout of the same
    /// depth, the pause always).
    fn order_predecessors(&self, work: &mut Work) {
        let Work { points, prev, live, live_tops, .. } = work;
        live.clear();
        live.extend(self.order.iter().copied().filter(|&f| prev[f].len > 0));
        if self.allowed.is_some() {
            // The last pair, not the span's `top`: under pruning this rank also
            // decides which predecessors are tried at all (`tries_predecessor`),
            // so ranking by `top` would change plans, not only their speed.
            let peak = |f: usize| points[prev[f].start + prev[f].len - 1].value;
            live.sort_by(|&a, &b| peak(b).total_cmp(&peak(a)));
        }
        live_tops.clear();
        live_tops.resize(live.len(), f64::NEG_INFINITY);
        let mut most = f64::NEG_INFINITY;
        for (rank, &f) in live.iter().enumerate().rev() {
            most = most.max(prev[f].top);
            live_tops[rank] = most;
        }
    }

    /// Whether state `t` may be chosen in interval `i`: not pruned, and a
    /// layout that fits the `after` instances (the pause always fits, and
    /// without [`PlanOptions::pause_by_choice`] is chosen only where no
    /// layout does).
    fn may_choose(&self, i: usize, t: usize, after: u64) -> bool {
        if i == 0 && self.first.is_some_and(|first| first != t) {
            return false;
        }
        let forced = i == 0 && self.first == Some(t);
        let pruned =
            !forced && self.allowed.as_ref().is_some_and(|a| !a[i * self.base_states() + t.min(self.pause)]);
        !pruned
            && if t >= self.pause {
                self.options.pause_by_choice || !(0..self.pause).any(|l| self.fits(i, l, after))
            } else {
                self.fits(i, t, after)
            }
    }

    /// Whether layout `t` runs in interval `i` on the `after` instances.
    fn fits(&self, i: usize, t: usize, after: u64) -> bool {
        self.ctx.layouts[t].instances <= after && self.speeds.is_none_or(|speeds| speeds.thr[i + 1][t] > 0.0)
    }

    /// The predecessors tried for state `t`: staying first (no rank), then
    /// `live` in order with their ranks (the first of equal pairs wins).
    fn predecessors<'w>(
        &'w self,
        live: &'w [usize],
        t: usize,
    ) -> impl Iterator<Item = (Option<usize>, usize)> + 'w {
        let pruning = self.allowed.is_some();
        // A parked pause is tried as the pause is.
        let others = live.iter().copied().enumerate().filter(move |&(rank, f)| {
            f != t
                && (!pruning
                    || tries_predecessor(&self.ctx.layouts, rank, f.min(self.pause), t.min(self.pause)))
        });
        std::iter::once((None, t)).chain(others.map(|(rank, f)| (Some(rank), f)))
    }

    /// Most samples one interval in state `t` can yield (no migration, nothing
    /// lost), with room for rounding: the sums over outcomes cannot exceed it.
    fn most_samples(&self, i: usize, t: usize) -> f64 {
        if t >= self.pause { 0.0 } else { self.thr(i, t) * self.interval_ms / 1000.0 * (1.0 + 1e-9) + 1e-9 }
    }

    /// Build the front of state `t` in the current interval (whose change
    /// starts from `before` instances), append it to the arena and return its
    /// span.
    fn front(
        &self,
        i: usize,
        t: usize,
        before: u64,
        store: &mut DistributionStore,
        work: &mut Work,
    ) -> Result<Span, LiveputError> {
        let Work {
            points,
            prev,
            scratch,
            scenarios,
            outcomes,
            live,
            live_tops,
            exposed,
            exposed_ranges,
            recourse,
            ..
        } = work;
        let layouts = &self.ctx.layouts;
        // What the store knows `t` as: a parked pause is a pause.
        let to = t.min(self.pause);
        scratch.clear();
        let mut found = Found { best: None, with_leftover: &mut *scratch, capped: self.capped() };
        // A stay may be credited its recourse on top (only a stay: the bound
        // of every other predecessor stays as tight).
        let credit = recourse.get(i * self.pause + t).copied().filter(|_| t < self.pause).unwrap_or(0.0);
        let bound = self.most_samples(i, t);
        // The least work at risk a pair of this front can carry: nothing after
        // a reset under the rule, else every pair's is infinite.
        let least_at_risk = if self.capped() { 0.0 } else { f64::INFINITY };
        for (rank, f) in self.predecessors(live, t) {
            // No front from this rank on can beat the best pair found: the
            // rest would all be skipped below, one by one. Exact too, and the
            // test that follows is the same one's.
            if let Some(rank) = rank
                && found.dominated(live_tops[rank] + bound, least_at_risk)
            {
                store.stats.pruned += (live.len() - rank) as u64;
                break;
            }
            let Span { start, len, top } = prev[f];
            if len == 0 || !self.leads_to(f, t, before) {
                continue;
            }
            // A predecessor whose most valuable pair, plus the most one
            // interval can train in `t`, cannot beat the best pair without
            // leftover found so far: every pair it yields would be dropped, so
            // skip it before looking up (or computing) its transition. Exact:
            // the plan is the same, only faster. Without the work-at-risk rule
            // a front's values rise along it; under it a later pair may be worth
            // less (it risks less): the span keeps the front's most.
            if found.dominated(top + bound + if f == t { credit } else { 0.0 }, least_at_risk) {
                store.stats.pruned += 1;
                continue;
            }
            // A layout that does not fit the instances before the change
            // (inconsistent steps, or `current`) counts as nothing running.
            let from = (f < self.pause && layouts[f].instances <= before).then_some(f);
            let slot = store.slot(from.unwrap_or(self.pause), to);
            outcomes.clear();
            for s in scenarios.iter() {
                let (o_start, o_len) = store.entry(s.table, slot, self.ctx, s.step, from, to)?;
                outcomes.push(ScenarioOutcomes {
                    weight: s.probability,
                    start: o_start,
                    end: o_start + o_len,
                });
            }
            let exposure = match self.parked_state(f) {
                Some(parked) => {
                    let (first, len) = exposed_ranges[f - self.pause - 1];
                    Rollbacks {
                        scenarios: &exposed[first..first + len],
                        // The pause began `boundary` intervals before this
                        // one (before the first: the speed before it).
                        lost_scale: self
                            .lost_scale(i.saturating_sub(parked.boundary as usize), parked.layout),
                    }
                }
                None => Rollbacks { scenarios: &[], lost_scale: 1.0 },
            };
            let preds = &points[start..start + len];
            let terms: usize = outcomes.iter().map(|o| o.end - o.start).sum();
            store.stats.weighed += (preds.len() * terms) as u64;
            // A cold start (or a layout that no longer fits) loses nothing.
            let lost_scale = from.map_or(0.0, |f| self.lost_scale(i, f));
            if t >= self.pause {
                let pause = Pause {
                    outs: &store.outs,
                    scenarios: outcomes,
                    lost_scale,
                    ceiling: self.risk_ceiling,
                    exposure,
                };
                found.offer_pauses(preds, start, &pause, self.interval_ms, t);
            } else {
                let into = Move {
                    outs: &store.outs,
                    scenarios: outcomes,
                    bonus: if f == t { credit } else { 0.0 },
                    thr: self.thr(i, t),
                    lost_scale,
                    ceiling: self.risk_ceiling,
                    exposure,
                };
                found.offer_moves(preds, start, &into, &mut store.at_rest, self.interval_ms, t);
            }
        }
        let best = found.best;
        Ok(commit_front(points, best, scratch, self.options.max_front, self.capped(), &mut store.stats))
    }

    /// The layouts that fit interval `i` (`after` instances after its
    /// change) and earn something after it (`next`, per layout), most
    /// promising first: each with the most one interval into it and what it
    /// earns after can add up to (no migration at all). A search for the best
    /// target stops at the first bound it already has: exact, and most
    /// targets are never priced. Only the recourse reads it, on programs with
    /// no pruning and the profile's speeds; a forced first layout does not
    /// bind it (the job answers a burst whatever it chose before).
    fn by_bound(&self, i: usize, after: u64, next: &[f64], order: &mut Vec<(f64, usize)>) {
        order.clear();
        order.extend(
            (0..self.pause)
                .filter(|&r| next[r] > f64::NEG_INFINITY && self.ctx.layouts[r].instances <= after)
                .map(|r| (self.thr(i, r) * self.interval_ms / 1000.0 + next[r], r)),
        );
        // The layouts break ties, so no two entries are equal: the stable
        // sort's order without its scratch buffer.
        order.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    }

    /// What one interval `i` of scenario `step` (its distribution table
    /// `table`) trains moving from layout `f` into `r` with no migration
    /// carried in: the migration's time costs `r`'s speed, a time past the
    /// interval included (the work rolled back is `f`'s whatever `r` is, so
    /// it is left out: these values are only compared between targets).
    fn one_interval(
        &self,
        i: usize,
        store: &mut DistributionStore,
        table: usize,
        step: Step,
        f: usize,
        r: usize,
    ) -> Result<f64, LiveputError> {
        let (len, busy) = store.busy(table, store.slot(f, r), self.ctx, step, Some(f), r)?;
        // Counted as the program's own terms are, so a caller held to a work
        // limit (a guest's fuel) counts this too.
        store.stats.weighed += len as u64;
        Ok(self.thr(i, r) * (self.interval_ms - busy) / 1000.0)
    }

    /// With [`PlanOptions::recourse`] and a burst anywhere in the horizon,
    /// fill [`Work::recourse`]: per interval and layout that fits before and
    /// after it (the [`RECOURSE_LAYOUTS`] most promising), what staying gains
    /// from shedding at the interval's bursts: per burst scenario, the best
    /// shed's gain over refilling ([`Program::shed_gain`]), weighted by the
    /// scenario's probability, by the chance that no burst came in the
    /// intervals before (a stay sheds once) and by the share credited.
    ///
    /// Everything but the weights depends on the horizon's steps and
    /// instances alone, not on its churn: it is kept in [`RecourseMemo`]
    /// while those stay the same, which they do between the programs of one
    /// call (the plan, the real job's from its work at risk, the deferred
    /// one, the shadows at other churn) and between calls over a calm
    /// forecast.
    fn prepare_recourse(
        &self,
        horizon: &Horizon<'_>,
        store: &mut DistributionStore,
        work: &mut Work,
    ) -> Result<(), LiveputError> {
        let len = horizon.mixtures.len();
        let any_burst =
            horizon.mixtures.iter().zip(horizon.steps).any(|(mix, step)| bursts(mix, step).next().is_some());
        let share = self.recourse_share();
        // A mixed fleet's speeds vary with its composition and a pruned
        // profile plans over a subset of its layouts: neither is credited
        // (the widest profiles and the mixed fleet's plans are the guest's
        // heaviest calls already).
        let plain = horizon.speeds.is_none() && self.allowed.is_none();
        work.recourse.clear();
        if share <= 0.0 || !any_burst || len == 0 || !plain {
            return Ok(());
        }
        self.price_calm(horizon, store, &mut work.recourse_memo)?;
        let n = self.pause;
        let mut gains = vec![0.0; len * n];
        let mut none_yet = 1.0f64;
        for (i, (mix, step)) in horizon.mixtures.iter().zip(horizon.steps).enumerate() {
            let burst_chance: f64 = bursts(mix, step).map(|(p, _)| p).sum();
            if burst_chance > 0.0 {
                let before = if i == 0 { u64::from(step.instances_before) } else { horizon.afters[i - 1] };
                // Only the most promising layouts are credited
                // ([`RECOURSE_LAYOUTS`]).
                let credited = work.recourse_memo.order[i].iter().take(RECOURSE_LAYOUTS).map(|&(_, f)| f);
                let credited: Vec<usize> =
                    credited.filter(|&f| self.ctx.layouts[f].instances <= before).collect();
                for f in credited {
                    let mut gain = 0.0f64;
                    for &(probability, s) in bursts(mix, step) {
                        gain += probability * self.shed_gain(i, f, s, store, &mut work.recourse_memo)?;
                    }
                    gains[i * n + f] = gain * none_yet * share;
                }
            }
            none_yet *= (1.0 - burst_chance).max(0.0);
        }
        work.recourse = gains;
        Ok(())
    }

    /// Fill `memo` for this horizon unless it holds it already: what each
    /// layout earns from each interval to the end with no burst, backwards
    /// from the terminal value (each layout's speed over
    /// [`PlanOptions::terminal_ms`]), the best of moving into any layout that
    /// fits then, by [`Program::one_interval`] of the step as forecast, plus
    /// what that layout earns after; and per interval the layouts by bound
    /// ([`Program::by_bound`]). What a shed leaves the job with is this, not
    /// the rest of the plan: a shed onto a layout the job would soon leave
    /// again (to refill when the fleet is whole) gains little.
    fn price_calm(
        &self,
        horizon: &Horizon<'_>,
        store: &mut DistributionStore,
        memo: &mut RecourseMemo,
    ) -> Result<(), LiveputError> {
        let key = self.calm_key(horizon);
        if key == memo.key {
            return Ok(());
        }
        let (len, n, layouts) = (horizon.mixtures.len(), self.pause, &self.ctx.layouts);
        // Per interval `j` and its end (`j = len`): what each layout earns
        // from the start of `j` to the end with no burst.
        let mut after_calm = vec![f64::NEG_INFINITY; (len + 1) * n];
        for (t, w) in after_calm[len * n..].iter_mut().enumerate() {
            if layouts[t].instances <= horizon.afters[len - 1] {
                *w = self.thr(len - 1, t) * self.options.terminal_ms / 1000.0;
            }
        }
        let mut order = vec![Vec::new(); len];
        for j in (0..len).rev() {
            let next = (j + 1) * n;
            self.by_bound(j, horizon.afters[j], &after_calm[next..next + n], &mut order[j]);
            if j == 0 {
                break;
            }
            let step = horizon.steps[j];
            let table = store.table(table_key(step));
            let (before, after) = (horizon.afters[j - 1], horizon.afters[j]);
            for f in (0..n).filter(|&f| layouts[f].instances <= before) {
                let mut best = f64::NEG_INFINITY;
                if layouts[f].instances <= after && after_calm[next + f] > f64::NEG_INFINITY {
                    best = self.one_interval(j, store, table, step, f, f)? + after_calm[next + f];
                }
                for &(bound, r) in order[j].iter().filter(|&&(_, r)| r != f) {
                    if bound <= best {
                        break;
                    }
                    best = best.max(self.one_interval(j, store, table, step, f, r)? + after_calm[next + r]);
                }
                after_calm[j * n + f] = best;
            }
        }
        *memo = RecourseMemo { key, after_calm, order, sheds: vec![Vec::new(); len * n] };
        Ok(())
    }

    /// What shedding from layout `f` at interval `i`'s burst `s` gains over
    /// refilling `f`: the best layout that sheds part of `f` ([`sheds`]) and
    /// fits, each valued as one interval from no carried migration plus what
    /// it earns after with no further burst; 0 where refilling is best.
    /// Memoised in `memo`, which [`Program::price_calm`] filled.
    fn shed_gain(
        &self,
        i: usize,
        f: usize,
        s: Step,
        store: &mut DistributionStore,
        memo: &mut RecourseMemo,
    ) -> Result<f64, LiveputError> {
        let (n, layouts) = (self.pause, &self.ctx.layouts);
        let burst = table_key(s);
        if let Some(&(_, gain)) = memo.sheds[i * n + f].iter().find(|&&(b, _)| b == burst) {
            return Ok(gain);
        }
        let next = &memo.after_calm[(i + 1) * n..(i + 2) * n];
        let table = store.table(burst);
        let refill = self.one_interval(i, store, table, s, f, f)? + next[f];
        let mut best = refill;
        for &(bound, r) in &memo.order[i] {
            if bound <= best {
                break;
            }
            if sheds(layouts[f].config, layouts[r].config) {
                best = best.max(self.one_interval(i, store, table, s, f, r)? + next[r]);
            }
        }
        memo.sheds[i * n + f].push((burst, best - refill));
        Ok(best - refill)
    }

    /// Everything [`Program::price_calm`] reads, as bits: two horizons with
    /// the same key price the same calm continuation and sheds (the layouts,
    /// their speeds and the recovery stand for the store's distributions,
    /// which a new cost basis also makes it forget:
    /// [`Work::forget_recourse`]; a step stands for its table, whose
    /// distributions are all it is read through). The first interval's step
    /// is not read: only its bursts are, and they are keyed per shed.
    fn calm_key(&self, horizon: &Horizon<'_>) -> Vec<u64> {
        let r = &self.ctx.recovery;
        let mut key = vec![
            self.options.terminal_ms.to_bits(),
            self.interval_ms.to_bits(),
            r.preemption_notice_ms.to_bits(),
            r.checkpoint_write_bytes_per_ms.to_bits(),
            horizon.mixtures.len() as u64,
        ];
        for l in &self.ctx.layouts {
            key.extend([
                u64::from(l.config.data_parallel),
                u64::from(l.config.pipeline_stages),
                l.thr.to_bits(),
            ]);
        }
        key.extend(horizon.afters.iter().copied());
        for step in horizon.steps.iter().skip(1) {
            let (before, preempted) = table_key(*step);
            key.push(u64::from(before) << 32 | u64::from(preempted));
        }
        key
    }

    /// Look up, for every parked pause with a front in the previous interval
    /// and per scenario of this one, the outcomes of its holders at the
    /// boundary: the distribution of the pause from its layout under the
    /// scenario's preemptions, drawn over [`exposed_fleet`] (as the simulator
    /// draws them).
    fn expose_all(&self, store: &mut DistributionStore, work: &mut Work) -> Result<(), LiveputError> {
        let Work { prev, scenarios, exposed, exposed_ranges, .. } = work;
        exposed.clear();
        exposed_ranges.clear();
        exposed_ranges.resize(self.parked.len(), (0, 0));
        for (k, parked) in self.parked.iter().enumerate() {
            if prev[self.pause + 1 + k].len == 0 {
                continue;
            }
            let first = exposed.len();
            let config = self.ctx.layouts[parked.layout].config;
            let slot = store.slot(parked.layout, self.pause);
            for s in scenarios.iter() {
                let step =
                    Step { instances_before: exposed_fleet(s.step.instances_before, config), ..s.step };
                let table = store.table(table_key(step));
                let (start, len) =
                    store.entry(table, slot, self.ctx, step, Some(parked.layout), self.pause)?;
                exposed.push(ScenarioOutcomes { weight: s.probability, start, end: start + len });
            }
            exposed_ranges[k] = (first, exposed.len() - first);
        }
        Ok(())
    }

    /// With a terminal value and churn, what each state loses per ms after the
    /// horizon to the churn's wipes: staying in its layout on the fleet the
    /// horizon ends with, under the last interval's churn, the expected work
    /// rolled back and the restart's time when some stage loses every replica,
    /// over the interval. Crediting the throughput alone would value a layout
    /// one unannounced preemption cuts as if none came for the whole terminal
    /// time, and draw the plan to it where preemptions come often. Only wipes
    /// are charged: the work they roll back is lost whatever the plans after
    /// the horizon do, while the migrations a thinned stage needs are theirs to
    /// choose (charging those too cost the default 1.3 points of the Oracle on
    /// the mixed p3+g4dn fleet). `None` (no terminal value, or no churn, as
    /// for a mixed fleet's varying speeds): nothing is charged.
    fn terminal_penalties(
        &self,
        horizon: &Horizon<'_>,
        store: &mut DistributionStore,
    ) -> Result<Option<Vec<f64>>, LiveputError> {
        let Some(&after) = horizon.afters.last() else { return Ok(None) };
        if self.options.terminal_ms <= 0.0 || horizon.terminal_churn.is_empty() {
            return Ok(None);
        }
        let fleet = u32::try_from(after).unwrap_or(u32::MAX);
        let steady = mixtures(&[Step::between(fleet, fleet, 0)], &[horizon.terminal_churn.to_vec()])?;
        let mut penalties = vec![0.0; self.n_states()];
        for (t, penalty) in penalties.iter_mut().enumerate().take(self.pause) {
            if self.ctx.layouts[t].instances > after {
                continue;
            }
            let thr = self.ctx.layouts[t].thr;
            let unit = self.lost_units[t];
            let mut lost = 0.0f64;
            for &(probability, step) in &steady[0] {
                let table = store.table(table_key(step));
                let (start, len) = store.entry(table, store.slot(t, t), self.ctx, step, Some(t), t)?;
                for o in store.outs[start..start + len].iter().filter(|o| o.lost * unit > 0.0) {
                    let restarting = thr * o.d.min(self.interval_ms) / 1000.0;
                    lost += probability * o.p * (restarting + o.lost * unit);
                }
            }
            *penalty = lost / self.interval_ms;
        }
        Ok(Some(penalties))
    }

    /// The best pair of the last interval: most value (with the terminal
    /// value, if any), then least leftover, then `current`, then the tie
    /// order. `None` when no front is left (cannot happen: the pause always
    /// fits).
    fn best_final_pair(&self, work: &Work, penalties: Option<&[f64]>) -> Option<usize> {
        let points = &work.points;
        let mut best: Option<usize> = None;
        let final_order = std::iter::once(self.start_state)
            .filter(|&f| f != self.pause)
            .chain(self.order.iter().copied().filter(|&f| f != self.start_state || f == self.pause));
        for f in final_order {
            let Span { start, len, .. } = work.prev[f];
            for k in start..start + len {
                let p = &points[k];
                let better = best.is_none_or(|b| {
                    let b = &points[b];
                    let (pv, bv) = (self.final_value(p, penalties), self.final_value(b, penalties));
                    pv > bv || (pv == bv && p.leftover < b.leftover)
                });
                if better {
                    best = Some(k);
                }
            }
        }
        best
    }

    /// A final pair's value; with a terminal value, the last layout is also
    /// credited with what it trains over `terminal_ms` after the horizon,
    /// once its leftover is done, less what wipes take from it then
    /// (`penalties`, per ms: [`Program::terminal_penalties`]).
    fn final_value(&self, p: &Point, penalties: Option<&[f64]>) -> f64 {
        let terminal_ms = self.options.terminal_ms;
        if terminal_ms <= 0.0 {
            return p.value;
        }
        let state = p.state as usize;
        let last = self.speeds.map_or(0, |speeds| speeds.thr.len().saturating_sub(2));
        let thr = if state < self.pause { self.thr(last, state) } else { 0.0 };
        let remaining = (terminal_ms - p.leftover).max(0.0);
        let penalty = penalties.map_or(0.0, |v| v[state]);
        p.value + thr * remaining / 1000.0 - penalty * remaining
    }

    /// The plan of `len` steps that ends in pair `last`, following the back
    /// pointers.
    fn trace_back(&self, points: &[Point], last: usize, len: usize) -> Vec<PlannedStep> {
        let mut plan =
            vec![PlannedStep { config: None, expected_samples: 0.0, expected_leftover_ms: 0.0 }; len];
        let mut at = last;
        for slot in plan.iter_mut().rev() {
            let p = points[at];
            *slot = PlannedStep {
                config: self.ctx.layouts.get(p.state as usize).map(|c| c.config),
                expected_samples: p.samples,
                expected_leftover_ms: p.leftover,
            };
            at = p.pred as usize;
        }
        plan
    }
}

/// How many layouts [`Program::prepare_recourse`] credits per interval: the
/// most promising then (the most an interval in each and what it earns after
/// with no burst can add up to). A stay in any other is far from the best
/// plan, and pricing every layout's sheds under every burst doubled the
/// default policy's time over the p3 trace (the optimizer bench, five
/// models: 2.85 s against 1.41 s without the credit; with this cap 2.05 s
/// against 1.51 s). With 8, the generalisation table and the bounded-lifetime
/// fleets decide exactly as with every layout credited, and six of 920
/// random fleets differ.
const RECOURSE_LAYOUTS: usize = 8;

/// The scenarios of `mix` that are bursts of the churn: more preemptions
/// than the interval's `step` as forecast.
fn bursts<'m>(mix: &'m Mixture, step: &Step) -> impl Iterator<Item = &'m (f64, Step)> {
    let forecast = step.preempted;
    mix.iter().filter(move |(_, s)| s.preempted > forecast)
}

/// Whether `to` sheds part of `from`: fewer replicas of the same stages, or
/// the same replicas of fewer stages. The recourse at a burst is priced over
/// these alone ([`PlanOptions::recourse`]): they are what a job does with
/// the survivors of a burst, and pricing every smaller layout under every
/// burst cost the guest a third more fuel on the p3 trace.
fn sheds(from: ParallelConfig, to: ParallelConfig) -> bool {
    (to.pipeline_stages == from.pipeline_stages && to.data_parallel < from.data_parallel)
        || (to.data_parallel == from.data_parallel && to.pipeline_stages < from.pipeline_stages)
}

/// A pause whose write has not landed at its `boundary`-th boundary
/// ([`crate::recovery`]'s pause rule): the state is still only in the memory
/// of `layout`'s holders there.
#[derive(Debug, Clone, Copy)]
struct Parked {
    /// The layout that held the state when the job paused.
    layout: usize,
    /// Which boundary after the pause's own the next transition crosses (1
    /// for the first).
    boundary: u32,
    /// Whether the write lands after this boundary (the pause then goes on
    /// as `S`).
    last: bool,
}

/// Outcomes per scenario whose rollbacks a transition charges, and the scale
/// of their lost work: a pause's own (the layout it pauses from, at the
/// interval's boundary), or a parked predecessor's holders at the boundary it
/// crosses (empty for any other predecessor; scaled by [`Program::lost_scale`]
/// of the interval the pause began).
struct Rollbacks<'a> {
    /// Where each scenario's outcomes lie in the store's.
    scenarios: &'a [ScenarioOutcomes],
    /// Scale of the outcomes' lost work.
    lost_scale: f64,
}

impl Rollbacks<'_> {
    /// The expected samples rolled back (at most `at_risk` each time) and the
    /// probability of a rollback, weighted over the scenarios as
    /// [`Move::value`]; `(0, 0)` for no outcomes.
    fn rolled_back(&self, outs: &[OutcomeTerms], at_risk: f64) -> (f64, f64) {
        let single = self.scenarios.len() == 1;
        let (mut lost, mut resets) = (0.0f64, 0.0f64);
        for s in self.scenarios {
            let (mut part, mut r) = (0.0f64, 0.0f64);
            for o in outs[s.start..s.end].iter().filter(|o| o.resets) {
                part += o.p * rolled_back(o.lost * self.lost_scale, at_risk);
                r += o.p;
            }
            if single {
                (lost, resets) = (part, r);
            } else {
                lost += s.weight * part;
                resets += s.weight * r;
            }
        }
        (lost, resets)
    }
}

/// The transition into one layout: its outcomes per scenario and the
/// layout's throughput.
struct Move<'a> {
    /// The store's outcomes.
    outs: &'a [OutcomeTerms],
    /// Where each scenario's outcomes lie in `outs`.
    scenarios: &'a [ScenarioOutcomes],
    /// Value credited on top of the samples (a stay's recourse at bursts,
    /// [`PlanOptions::recourse`]): it raises the plan's value, not the
    /// samples the step reports, which stay what the layout can train.
    bonus: f64,
    /// Throughput of the layout moved into, samples/s.
    thr: f64,
    /// Scale of the outcomes' lost work ([`Program::lost_scale`]).
    lost_scale: f64,
    /// The most that can be at risk ([`Program::risk_ceiling`]).
    ceiling: f64,
    /// A parked predecessor's holders at this boundary.
    exposure: Rollbacks<'a>,
}

/// What one transition does to a pair: `(samples, leftover, at_risk)` after it.
type Moved = (f64, f64, f64);

impl Move<'_> {
    /// `liveput()` of the transition, operation for operation, with `carried`
    /// ms in flight and `at_risk` samples at risk (every rollback takes back
    /// at most that; infinite: exactly `liveput()`), and the work at risk
    /// after it (infinite stays infinite). One scenario: exactly its numbers;
    /// several: the probability-weighted sum of theirs. Out of a parked pause,
    /// less what its holders roll back at the boundary ([`Rollbacks`]).
    fn value(&self, carried: f64, at_risk: f64, interval_ms: f64, memo: &mut AtRest) -> Moved {
        let single = self.scenarios.len() == 1;
        // Uncapped (the online policy's path) the work at risk stays infinite:
        // what it would need is not summed.
        let tracked = at_risk.is_finite();
        let (mut samples, mut leftover, mut gross, mut resets) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        // Nothing carried in and nothing tracked: the sums depend on the
        // outcomes, the speed, the lost work's scale and the interval alone.
        let at_rest = !tracked && carried.to_bits() == 0;
        for s in self.scenarios {
            let (part, left, g, r) = if at_rest {
                let (part, left) =
                    memo.sums((s.start, s.end - s.start), self.thr, self.lost_scale, interval_ms, || {
                        let (part, left, _, _) = self.scenario_sums(s, carried, at_risk, interval_ms);
                        (part, left)
                    });
                (part, left, 0.0, 0.0)
            } else {
                self.scenario_sums(s, carried, at_risk, interval_ms)
            };
            if single {
                (samples, leftover, gross, resets) = (part, left, g, r);
            } else {
                samples += s.weight * part;
                leftover += s.weight * left;
                gross += s.weight * g;
                resets += s.weight * r;
            }
        }
        let (exposed_lost, exposed_resets) = self.exposure.rolled_back(self.outs, at_risk);
        samples -= exposed_lost;
        resets += exposed_resets;
        let after = if tracked { at_risk_after(at_risk, resets, gross, self.ceiling) } else { at_risk };
        (samples, leftover, after)
    }

    /// One scenario's `(samples, leftover, gross samples, probability of a
    /// reset)` ([`Move::value`]; the last two only when `at_risk` is tracked).
    #[inline]
    fn scenario_sums(
        &self,
        s: &ScenarioOutcomes,
        carried: f64,
        at_risk: f64,
        interval_ms: f64,
    ) -> (f64, f64, f64, f64) {
        let tracked = at_risk.is_finite();
        let (mut part, mut left, mut g, mut r) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        for o in &self.outs[s.start..s.end] {
            let busy = carried.min(o.abandon) + o.d;
            let trained = self.thr * (interval_ms - busy).max(0.0) / 1000.0;
            part += o.p * (trained - rolled_back(o.lost * self.lost_scale, at_risk));
            left += o.p * (busy - interval_ms).max(0.0);
            if tracked {
                g += o.p * trained;
                if o.resets {
                    r += o.p;
                }
            }
        }
        (part, left, g, r)
    }
}

/// The transition into a pause.
struct Pause<'a> {
    /// The store's outcomes.
    outs: &'a [OutcomeTerms],
    /// Where each scenario's outcomes lie in `outs`.
    scenarios: &'a [ScenarioOutcomes],
    /// Scale of the outcomes' lost work ([`Program::lost_scale`]).
    lost_scale: f64,
    /// The most that can be at risk ([`Program::risk_ceiling`]).
    ceiling: f64,
    /// A parked predecessor's holders at this boundary.
    exposure: Rollbacks<'a>,
}

impl Pause<'_> {
    /// `liveput()` of a pause: nothing trained, the in-flight migration runs
    /// on, the lost work still lost (at most `at_risk`); weighted over the
    /// scenarios as [`Move::value`], and a parked predecessor's exposure as
    /// there. `(samples, at_risk after)`.
    fn value(&self, at_risk: f64) -> (f64, f64) {
        let own = Rollbacks { scenarios: self.scenarios, lost_scale: self.lost_scale };
        let (lost, own_resets) = own.rolled_back(self.outs, at_risk);
        let (exposed_lost, exposed_resets) = self.exposure.rolled_back(self.outs, at_risk);
        let samples = -lost - exposed_lost;
        let resets = own_resets + exposed_resets;
        let tracked = at_risk.is_finite();
        let after = if tracked { at_risk_after(at_risk, resets, 0.0, self.ceiling) } else { at_risk };
        (samples, after)
    }
}

/// The candidate pairs of one front as they are found: the best pair without
/// leftover, and the other pairs that it did not dominate when they were found.
struct Found<'s> {
    /// Most valuable pair without leftover so far.
    best: Option<Point>,
    /// The other candidates: pairs with a positive leftover and, under the
    /// work-at-risk rule, pairs without one that risk less than `best`.
    with_leftover: &'s mut Vec<Point>,
    /// Whether pairs carry a finite work at risk ([`PlanOptions::at_risk`]).
    capped: bool,
}

impl Found<'_> {
    /// Whether a pair of `value` and `at_risk` (or more) would be dropped: the
    /// best pair without leftover dominates it ([`dominates`]).
    fn dominated(&self, value: f64, at_risk: f64) -> bool {
        self.best.is_some_and(|b| dominates(b.value, b.at_risk, value, at_risk))
    }

    fn offer(&mut self, point: Point) {
        if point.leftover != 0.0 {
            self.with_leftover.push(point);
        } else if self.best.is_none_or(|b| point.value > b.value) {
            // Not dominated, so only a pair that risks less than the old best
            // is kept beside the new one (never without the rule).
            if let Some(old) = self.best.filter(|_| self.capped) {
                self.with_leftover.push(old);
            }
            self.best = Some(point);
        } else {
            self.with_leftover.push(point);
        }
    }

    /// Offer the pairs of pausing in state `t` after each pair of a
    /// predecessor's front (`preds`, from arena index `first`).
    fn offer_pauses(&mut self, preds: &[Point], first: usize, pause: &Pause<'_>, interval_ms: f64, t: usize) {
        // Without the rule every pair pauses to the same samples.
        let uncapped = (!self.capped).then(|| pause.value(f64::INFINITY));
        self.offer_each(preds, first, t, 0.0, |q| {
            let (samples, at_risk) = uncapped.unwrap_or_else(|| pause.value(q.at_risk));
            (samples, (q.leftover - interval_ms).max(0.0), at_risk)
        });
    }

    /// Offer the pairs of moving into layout `t` after each pair of a
    /// predecessor's front (`preds`, from arena index `first`).
    fn offer_moves(
        &mut self,
        preds: &[Point],
        first: usize,
        into: &Move<'_>,
        memo: &mut AtRest,
        interval_ms: f64,
        t: usize,
    ) {
        self.offer_each(preds, first, t, into.bonus, |q| {
            into.value(q.leftover, q.at_risk, interval_ms, memo)
        });
    }

    /// Offer the pair that `step` makes of each pair of a predecessor's front,
    /// its value raised by `bonus`, unless the best pair without leftover
    /// already dominates it.
    fn offer_each(
        &mut self,
        preds: &[Point],
        first: usize,
        t: usize,
        bonus: f64,
        mut step: impl FnMut(&Point) -> Moved,
    ) {
        for (k, q) in preds.iter().enumerate() {
            let (samples, leftover, at_risk) = step(q);
            let value = q.value + samples + bonus;
            if self.dominated(value, at_risk) {
                continue;
            }
            let pred = (first + k) as u32;
            self.offer(Point { value, leftover, at_risk, samples, state: t as u32, pred });
        }
    }
}

/// Whether a pair of `value` and `at_risk` can never lead to a worse plan than
/// one of `other_value` and `other_at_risk`, given it has no more leftover:
/// what is at risk costs at most itself in the rest of the plan (every sample
/// of it is rolled back at most once, [`crate::at_risk`]), so a pair risking
/// more must be ahead by at least the difference, up to rounding (a path that
/// trained more risks exactly as much more, but the two sums round apart).
/// Without the rule (every work at risk infinite), value alone decides.
fn dominates(value: f64, at_risk: f64, other_value: f64, other_at_risk: f64) -> bool {
    let extra = at_risk - other_at_risk;
    if extra > 0.0 {
        value >= other_value + extra - ROUNDING * (other_value.abs() + extra)
    } else {
        value >= other_value
    }
}

/// Relative slack of [`dominates`] for the sums' rounding: far below anything
/// a plan's value is compared at (the tests' 1e-9).
const ROUNDING: f64 = 1e-11;

/// Append the front to the arena: the best pair without leftover, then, in
/// order of leftover (and work at risk), the pairs no pair before them
/// dominates (without the work-at-risk rule: strictly more value), thinned to
/// `max_front` pairs (both ends kept). Returns its span.
fn commit_front(
    points: &mut Vec<Point>,
    best: Option<Point>,
    with_leftover: &mut [Point],
    max_front: usize,
    capped: bool,
    stats: &mut CacheStats,
) -> Span {
    let base = points.len();
    stats.sorted += with_leftover.len() as u64;
    let mut top = f64::NEG_INFINITY;
    if let Some(b) = best {
        top = b.value;
        points.push(b);
    }
    if !with_leftover.is_empty() {
        with_leftover.sort_by(|a, b| {
            a.leftover
                .total_cmp(&b.leftover)
                .then(b.value.total_cmp(&a.value))
                .then(a.at_risk.total_cmp(&b.at_risk))
        });
        for p in with_leftover.iter() {
            // Every pair kept so far has no more leftover than `p`, and none
            // that comes later dominates one kept before it.
            let dominated = if capped {
                let kept = &points[base..];
                let by = kept.iter().position(|q| dominates(q.value, q.at_risk, p.value, p.at_risk));
                stats.compared += by.map_or(kept.len(), |k| k + 1) as u64;
                by.is_some()
            } else {
                p.value <= top
            };
            if !dominated {
                top = top.max(p.value);
                points.push(*p);
            }
        }
    }
    let len = points.len() - base;
    stats.largest_front = stats.largest_front.max(len);
    if len > max_front {
        stats.front_truncations += 1;
        for k in 0..max_front {
            points[base + k] = points[base + k * (len - 1) / (max_front - 1)];
        }
        points.truncate(base + max_front);
    }
    // Thinning may drop the most valuable pair: read what is kept.
    let top = points[base..].iter().map(|p| p.value).fold(f64::NEG_INFINITY, f64::max);
    Span { start: base, len: points.len() - base, top }
}
