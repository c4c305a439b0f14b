//! The liveput optimizer of the Parcae paper: plan the layout of every
//! forecast interval to maximise the expected samples over the horizon, net of
//! migration costs ([`crate::plan::best_plan`]), apply the first, re-plan next
//! interval (receding horizon).

use crate::plan::{Churn, PlanOptions, Step, TransitionCache, best_plan_scored};
use crate::reactive::best_config_for;
use crate::{OptimizeRequest, Optimizer, Plan, PlanStep};

/// Liveput-optimal planning over the request's forecast.
///
/// The steps of the program follow the request (see `wit/policy.wit`):
///
/// - step 0 is the interval that starts now: `current` ran on
///   `forecast[0].instances - arrivals + preemptions` instances, then
///   `forecast[0]`'s preemptions and arrivals happened, leaving
///   `instances-now`;
/// - step `i > 0` goes from `forecast[i - 1].instances` to
///   `forecast[i].instances` with `forecast[i]`'s preemptions.
///
/// Each step ends exactly at the instances the host checks the plan against
/// ([`OptimizeRequest::instances_at`]); counts that do not add up are repaired
/// by [`Step::between`] (preemptions clamped or raised, arrivals make up the
/// rest). A `current` layout that does not fit the instances it ran on, or
/// that is not in the profile, is treated as a cold start.
#[derive(Debug, Clone, Default)]
pub struct Liveput {
    /// Transition distributions, memoised across calls.
    cache: TransitionCache,
    /// Migration time still running from earlier intervals when the next plan
    /// starts, ms. The host does not report it, so a guest keeps it at 0
    /// (every plan starts as if the last migration had finished); a native
    /// caller that tracks it may set it.
    pub carried_ms: f64,
    /// Knobs of the program (default: [`PlanOptions::default`], `liveput()`'s
    /// pause rule). Its `recovery` and `terminal_ms` are set on every call,
    /// from the request and [`Liveput::terminal_intervals`].
    pub options: PlanOptions,
    /// Preemptions that may hit each forecast interval on top of the
    /// forecast's own, with their chance per interval (each replaced by an
    /// arrival; [`crate::plan::best_plan_hedged`]). Applied to every step but
    /// the first, whose preemptions have been observed, and after the last,
    /// where the terminal value is charged for it. Empty (the default):
    /// the forecast is taken as certain, as in the paper.
    pub churn: Vec<Churn>,
    /// The churn at the low end of its estimate's confidence interval
    /// ([`crate::churn::ChurnEstimator::estimate_with_lower`]). With deference on,
    /// where the best plan moves, it also defers to reactive's layout when,
    /// at this churn, the best plan starting with it is within the margin of
    /// the best plan: a move whose edge over reactive rests on a risk the
    /// history cannot tell from noise is not worth making. `None`: no such
    /// check.
    pub churn_low: Option<Vec<Churn>>,
    /// Terminal value of a plan, in intervals: the last planned layout is
    /// credited with what it would train for this many more intervals
    /// ([`PlanOptions::terminal_ms`]; with [`Liveput::churn`], less the work
    /// that churn's wipes would roll back). Counted in intervals, not in
    /// horizons: how long a layout is held past the plan does not grow with
    /// how far the planner looks. 0 (the default, the paper's optimizer)
    /// credits nothing past the horizon.
    pub terminal_intervals: f64,
    /// The shortest terminal time, ms, whenever [`Liveput::terminal_intervals`]
    /// is on. A layout is held for tens of minutes however often the host
    /// plans, but intervals shrink in time with the interval length, and with
    /// them the payback the plan can see. 0 (the default): intervals alone.
    pub min_terminal_ms: f64,
    /// Defer to the reactive baseline's layout unless the best plan beats the
    /// best plan that starts with it by more than this fraction of its
    /// objective. A plan's edge over reactive rests on the forecast and the
    /// churn estimate; where that edge is within the model's error, following
    /// reactive loses nothing the model can see and cannot fall behind the
    /// baseline on a fleet the estimate misjudges. 0 (the default, the
    /// paper's optimizer): the best plan always.
    pub defer_margin: f64,
    /// Defer only where the best plan itself leaves the current layout:
    /// deference then redirects a move the planner chose to reactive's
    /// layout, and never makes the job migrate where the planner would stay.
    pub defer_only_moves: bool,
    /// Whether the last call's decision could depend on
    /// [`Liveput::churn_low`]: its best plan left both the current layout and
    /// reactive's by more than the deference margin at the estimate. Where it
    /// did not, the same request decides the same at any low end, so the
    /// regret guard reuses the decision for its proving shadow
    /// ([`crate::guard`]) instead of planning it again.
    pub low_end_mattered: bool,
}

impl Liveput {
    /// The terminal time of a plan at intervals of `interval_ms`:
    /// [`Liveput::terminal_intervals`] intervals, at least
    /// [`Liveput::min_terminal_ms`] (none when the intervals are 0),
    /// whatever the plan's horizon.
    pub fn terminal_ms(&self, interval_ms: u64) -> f64 {
        let intervals = self.terminal_intervals * interval_ms as f64;
        if self.terminal_intervals > 0.0 { intervals.max(self.min_terminal_ms) } else { intervals }
    }

    /// Counters of the transition cache.
    pub fn cache_stats(&self) -> crate::plan::CacheStats {
        self.cache.stats()
    }
}

/// The program's steps for `request` (one per forecast interval).
pub fn steps_of(request: &OptimizeRequest) -> Vec<Step> {
    let mut steps = Vec::with_capacity(request.forecast.len());
    for (i, s) in request.forecast.iter().enumerate() {
        let after = request.instances_at(i);
        let before = if i == 0 {
            let ran_on = i64::from(s.instances) - i64::from(s.arrivals) + i64::from(s.preemptions);
            u32::try_from(ran_on.max(0)).unwrap_or(u32::MAX)
        } else {
            request.forecast[i - 1].instances
        };
        steps.push(Step::between(before, after, s.preemptions));
    }
    steps
}

impl Optimizer for Liveput {
    fn optimize(&mut self, request: &OptimizeRequest) -> Result<Plan, String> {
        let steps = steps_of(request);
        // The churn applies to every step but the first (observed), and after
        // the horizon (the entry past the last step), where the terminal value
        // is charged for it: a plan of the observed interval alone too.
        let per_step = |churn: &[Churn]| -> Vec<Vec<Churn>> {
            if churn.is_empty() {
                Vec::new()
            } else {
                (0..=steps.len()).map(|i| if i == 0 { Vec::new() } else { churn.to_vec() }).collect()
            }
        };
        let churn = per_step(&self.churn);
        let options = PlanOptions {
            recovery: request.recovery,
            terminal_ms: self.terminal_ms(request.interval_ms),
            ..self.options
        };
        let mut plan_from = |options, churn: &[Vec<Churn>]| {
            best_plan_scored(
                &request.profile,
                request.current,
                self.carried_ms,
                &steps,
                churn,
                request.interval_ms,
                options,
                &mut self.cache,
            )
        };
        let mut planned = plan_from(options, &churn).map_err(|e| format!("liveput optimizer: {e}"))?;
        self.low_end_mattered = false;
        // Reactive's layout is looked up only when deference is on and the plan
        // starts elsewhere; the deferred plan is an alternative, never a reason
        // to fail the call (the best plan stands if it cannot be priced).
        let reactive = || best_config_for(&request.profile, request.instances_at(0)).map(|c| c.config);
        if self.defer_margin > 0.0
            && let Some(own) = planned.steps.first().map(|s| s.config)
            && (!self.defer_only_moves || own != request.current)
            && let Some(first) = reactive().filter(|&r| own != Some(r))
            && let Ok(deferred) = plan_from(PlanOptions { first: Some(first), ..options }, &churn)
        {
            let within = |best: f64, deferred: f64| best - deferred <= self.defer_margin * best.abs();
            let at_estimate = within(planned.objective, deferred.objective);
            self.low_end_mattered = !at_estimate && own != request.current;
            let defer = at_estimate || {
                // The same comparison at the low end of the churn, where the
                // plan moves: a move whose edge does not survive the low end
                // rests on noise. Staying put needs no such edge (deferring
                // there would make the job migrate into reactive's layout).
                own != request.current
                    && self.churn_low.as_deref().map(per_step).is_some_and(|low| {
                        match (
                            plan_from(options, &low),
                            plan_from(PlanOptions { first: Some(first), ..options }, &low),
                        ) {
                            (Ok(best), Ok(deferred)) => within(best.objective, deferred.objective),
                            _ => false,
                        }
                    })
            };
            if defer {
                planned = deferred;
            }
        }
        Ok(Plan {
            steps: planned
                .steps
                .into_iter()
                .map(|p| PlanStep { config: p.config, expected_samples: p.expected_samples })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::liveput::liveput;
    use crate::plan::best_plan_scored;
    use crate::plan::tests::{SplitMix64, toy_profile};
    use crate::reactive::ThroughputOptimal;
    use crate::validate::check_plan;
    use crate::{IntervalStats, ModelProfile, ParallelConfig};

    fn request(
        profile: &ModelProfile,
        counts: &[u32],
        before: u32,
        current: Option<ParallelConfig>,
        interval_ms: u64,
    ) -> OptimizeRequest {
        let forecast = IntervalStats::chain_from(before, counts);
        OptimizeRequest {
            instances_now_by_type: Vec::new(),
            instances_now: forecast.first().map_or(0, |s| s.instances),
            forecast,
            current,
            interval_ms,
            profile: profile.clone(),
            recovery: crate::Recovery::UNANNOUNCED,
        }
    }

    /// Expected samples of running `configs` along `steps` (carry included).
    fn realised(
        profile: &ModelProfile,
        current: Option<ParallelConfig>,
        steps: &[Step],
        configs: &[Option<ParallelConfig>],
        interval_ms: u64,
    ) -> f64 {
        let (mut from, mut carry, mut total) = (current, 0.0, 0.0);
        for (s, &to) in steps.iter().zip(configs) {
            let from_fit = from.filter(|c| c.instances() <= u64::from(s.instances_before));
            let v = liveput(
                profile,
                &crate::Recovery::UNANNOUNCED,
                from_fit,
                s.instances_before,
                s.preempted,
                s.arrived,
                to,
                interval_ms as f64,
                carry,
            )
            .unwrap();
            total += v.expected_samples;
            carry = v.expected_leftover_ms;
            from = to;
        }
        total
    }

    #[test]
    fn steps_follow_the_request() {
        let profile = toy_profile(&[(1, 2, 10.0)], 0.0);
        let forecast = vec![
            IntervalStats { instances: 6, arrivals: 2, preemptions: 1 },
            IntervalStats { instances: 4, arrivals: 0, preemptions: 2 },
            IntervalStats { instances: 7, arrivals: 3, preemptions: 0 },
        ];
        let r = OptimizeRequest {
            instances_now_by_type: Vec::new(),
            forecast,
            instances_now: 6,
            current: None,
            interval_ms: 1000,
            profile,
            recovery: crate::Recovery::UNANNOUNCED,
        };
        assert_eq!(
            steps_of(&r),
            vec![
                Step { instances_before: 5, preempted: 1, arrived: 2 },
                Step { instances_before: 6, preempted: 2, arrived: 0 },
                Step { instances_before: 4, preempted: 0, arrived: 3 },
            ]
        );
        // Inconsistent records are repaired so that every step ends at the
        // instances the plan is checked against.
        let mut bad = r.clone();
        bad.forecast[0] = IntervalStats { instances: 6, arrivals: 9, preemptions: 0 };
        bad.forecast[1] = IntervalStats { instances: 4, arrivals: 0, preemptions: 0 };
        bad.instances_now = 5;
        let steps = steps_of(&bad);
        assert_eq!(steps[0], Step { instances_before: 0, preempted: 0, arrived: 5 });
        assert_eq!(steps[1], Step { instances_before: 6, preempted: 2, arrived: 0 });
        for (i, s) in steps.iter().enumerate() {
            assert_eq!(s.instances_after(), Some(u64::from(bad.instances_at(i))));
        }
    }

    #[test]
    fn plans_pass_the_host_checks() {
        let profile =
            toy_profile(&[(1, 2, 10.0), (2, 2, 19.0), (1, 4, 12.0), (3, 2, 26.0), (2, 4, 25.0)], 9000.0);
        let configs: Vec<_> = profile.configs.iter().map(|c| Some(c.config)).chain([None]).collect();
        let mut rng = SplitMix64(7);
        let mut optimizer = Liveput::default();
        for round in 0..300 {
            let before = rng.below(11);
            let horizon = 1 + rng.below(8) as usize;
            let counts: Vec<u32> = (0..horizon).map(|_| rng.below(11)).collect();
            let current = configs[rng.below(configs.len() as u32) as usize];
            let interval_ms = [0, 1000, 20_000, 60_000][rng.below(4) as usize];
            let mut r = request(&profile, &counts, before, current, interval_ms);
            if round % 7 == 0 {
                // An inconsistent first record: `current` may not fit.
                r.forecast[0].preemptions += 3;
            }
            let plan = optimizer.optimize(&r).unwrap();
            assert_eq!(check_plan(&r, &plan), Ok(()), "{r:?}\n{plan:?}");
        }
        let stats = optimizer.cache_stats();
        assert!(stats.hits > stats.misses, "{stats:?}");
        assert_eq!(stats.front_truncations, 0);
    }

    /// A move's payback stays in view however often the host plans: the
    /// smallest speed-up worth a repartition on a steady fleet is about the
    /// same at 30 s intervals as at one minute with the terminal floor, and
    /// far larger with intervals alone (which halve the terminal time).
    #[test]
    fn the_terminal_floor_keeps_a_move_s_payback_in_view_at_short_intervals() {
        let smallest_gain_taken = |interval_ms: u64, min_terminal_ms: f64| {
            (0..400)
                .map(|i| 0.001 * 1.02f64.powi(i))
                .find(|gain| {
                    let profile = toy_profile(&[(1, 2, 10.0), (1, 3, 10.0 * (1.0 + gain))], 0.0);
                    let r = request(&profile, &[3; 8], 3, Some(ParallelConfig::new(1, 2)), interval_ms);
                    let mut optimizer =
                        Liveput { terminal_intervals: 48.0, min_terminal_ms, ..Liveput::default() };
                    optimizer.optimize(&r).unwrap().steps[0].config == Some(ParallelConfig::new(1, 3))
                })
                .expect("a large enough speed-up is worth the move")
        };
        let floor = 48.0 * 60_000.0;
        let minute = smallest_gain_taken(60_000, floor);
        assert_eq!(
            minute,
            smallest_gain_taken(60_000, 0.0),
            "at one minute the floor is the intervals' own time"
        );
        let (floored, intervals_alone) =
            (smallest_gain_taken(30_000, floor), smallest_gain_taken(30_000, 0.0));
        assert!(floored <= 1.1 * minute, "30 s with the floor: {floored} against {minute} at one minute");
        assert!(
            intervals_alone > 1.5 * minute,
            "30 s with intervals alone: {intervals_alone} against {minute}"
        );
        let liveput = Liveput { terminal_intervals: 48.0, min_terminal_ms: floor, ..Liveput::default() };
        assert_eq!(liveput.terminal_ms(120_000), 96.0 * 60_000.0, "longer intervals keep their intervals");
        assert_eq!(
            Liveput { terminal_intervals: 0.0, ..liveput }.terminal_ms(30_000),
            0.0,
            "no terminal value: no floor"
        );
    }

    /// Looking further ahead does not lengthen the terminal value: the
    /// smallest speed-up worth a repartition on a steady fleet follows the
    /// time the plan credits (horizon plus 48 intervals: 56 at H = 8, 72 at H
    /// = 24), where a terminal value counted in horizons (six: 48 and 144
    /// intervals) would cut it to a third and draw the planner to long holds.
    #[test]
    fn a_longer_horizon_does_not_lengthen_the_terminal_value() {
        let smallest_gain_taken = |horizon: usize| {
            (0..400)
                .map(|i| 0.001 * 1.02f64.powi(i))
                .find(|gain| {
                    let profile = toy_profile(&[(1, 2, 10.0), (1, 3, 10.0 * (1.0 + gain))], 0.0);
                    let r = request(&profile, &vec![3; horizon], 3, Some(ParallelConfig::new(1, 2)), 60_000);
                    let mut optimizer = Liveput {
                        terminal_intervals: 48.0,
                        min_terminal_ms: 48.0 * 60_000.0,
                        ..Liveput::default()
                    };
                    optimizer.optimize(&r).unwrap().steps[0].config == Some(ParallelConfig::new(1, 3))
                })
                .expect("a large enough speed-up is worth the move")
        };
        let (eight, twenty_four) = (smallest_gain_taken(8), smallest_gain_taken(24));
        assert!(twenty_four < eight, "H = 24 sees more of the payback: {twenty_four} against {eight}");
        assert!(twenty_four > 0.6 * eight, "H = 24: {twenty_four} against {eight} at H = 8");
    }

    /// With a deference margin, the optimizer takes reactive's layout when the
    /// best plan's edge over the best plan starting there is within it, and
    /// keeps its own when the edge is larger.
    #[test]
    fn defers_to_reactive_only_within_the_margin() {
        let profile = toy_profile(&[(1, 2, 10.0), (2, 2, 19.0), (3, 2, 26.0)], 0.0);
        let counts: Vec<u32> = (0..8).map(|i| if i % 2 == 0 { 6 } else { 5 }).collect();
        let r = request(&profile, &counts, 6, Some(ParallelConfig::new(2, 2)), 20_000);
        let reactive = ThroughputOptimal.optimize(&r).unwrap().steps[0].config;
        assert_eq!(reactive, Some(ParallelConfig::new(3, 2)));
        let own = Liveput::default().optimize(&r).unwrap();
        assert_eq!(own.steps[0].config, Some(ParallelConfig::new(2, 2)), "liveput stays put: {own:?}");
        let steps = steps_of(&r);
        let edge = {
            let mut cache = TransitionCache::default();
            let mut score = |first| {
                let options = PlanOptions { first, ..PlanOptions::default() };
                best_plan_scored(&profile, r.current, 0.0, &steps, &[], 20_000, options, &mut cache)
                    .unwrap()
                    .objective
            };
            let (best, deferred) = (score(None), score(reactive));
            assert!(best > deferred, "{best} vs {deferred}");
            (best - deferred) / best
        };
        let with_margin = |defer_margin| {
            let mut optimizer = Liveput { defer_margin, ..Liveput::default() };
            let plan = optimizer.optimize(&r).unwrap();
            assert_eq!(check_plan(&r, &plan), Ok(()));
            plan.steps[0].config
        };
        assert_eq!(with_margin(0.5 * edge), own.steps[0].config, "an edge beyond the margin is kept");
        assert_eq!(with_margin(2.0 * edge), reactive, "an edge within the margin defers");
        // Deferring only moves: the plan stays in (2, 2), so nothing defers.
        let mut only_moves =
            Liveput { defer_margin: 2.0 * edge, defer_only_moves: true, ..Liveput::default() };
        assert_eq!(only_moves.optimize(&r).unwrap().steps[0].config, own.steps[0].config);
        // On a fleet of 4 and 6 by turns, from (1, 2), the plan moves itself
        // (to (1, 4), which both counts hold), and the move is redirected to
        // reactive's (2, 2).
        let deeper = toy_profile(&[(1, 2, 10.0), (2, 2, 19.0), (3, 2, 26.0), (1, 4, 18.0)], 0.0);
        let flaps: Vec<u32> = (0..8).map(|i| if i % 2 == 0 { 4 } else { 6 }).collect();
        let flapping = request(&deeper, &flaps, 4, Some(ParallelConfig::new(1, 2)), 20_000);
        let reactive = Some(ParallelConfig::new(2, 2));
        let moved = Liveput::default().optimize(&flapping).unwrap().steps[0].config;
        assert!(moved.is_some() && moved != reactive && moved != flapping.current, "{moved:?}");
        let mut any_margin = Liveput { defer_margin: 0.5, defer_only_moves: true, ..Liveput::default() };
        assert_eq!(any_margin.optimize(&flapping).unwrap().steps[0].config, reactive);
    }

    /// Deference at the low end of the churn: on a steady fleet of 4 with
    /// some chance of one preemption per interval, the plan leaves reactive's
    /// fragile (1, 4) for (2, 2), whose stages survive it. With the low end at
    /// half that chance, the move defers exactly where, at the low end, the
    /// best plan starting with reactive's layout is within the margin of the
    /// best plan: a small risk defers, a large one does not. With no churn at
    /// the low end every move defers; a plan that stays where it is never
    /// defers on the low end (it would make the job migrate).
    #[test]
    fn defers_where_the_edge_does_not_survive_the_low_churn() {
        let profile = toy_profile(&[(1, 4, 20.0), (2, 2, 19.0)], 600_000.0);
        let r = request(&profile, &[4; 8], 4, Some(ParallelConfig::new(1, 4)), 60_000);
        let (reactive, hedged) = (Some(ParallelConfig::new(1, 4)), Some(ParallelConfig::new(2, 2)));
        assert_eq!(ThroughputOptimal.optimize(&r).unwrap().steps[0].config, reactive);
        let steps = steps_of(&r);
        let margin = 0.0005;
        let churn = |probability: f64| vec![Churn { extra: 1, probability }];
        let objective = |first, probability: f64| {
            let per_step: Vec<Vec<Churn>> =
                (0..steps.len()).map(|i| if i == 0 { Vec::new() } else { churn(probability) }).collect();
            let options = PlanOptions { first, recovery: r.recovery, ..PlanOptions::default() };
            let mut cache = TransitionCache::default();
            best_plan_scored(&profile, r.current, 0.0, &steps, &per_step, 60_000, options, &mut cache)
                .unwrap()
                .objective
        };
        let first = |current, probability, churn_low: Option<Vec<Churn>>| {
            let mut optimizer =
                Liveput { churn: churn(probability), churn_low, defer_margin: margin, ..Liveput::default() };
            let r = OptimizeRequest { current, ..r.clone() };
            let plan = optimizer.optimize(&r).unwrap();
            assert_eq!(check_plan(&r, &plan), Ok(()));
            plan.steps[0].config
        };
        let (mut deferred, mut kept) = (0, 0);
        for probability in [0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4] {
            if first(reactive, probability, None) != hedged {
                continue; // no move at the estimate: nothing to defer
            }
            let low = 0.5 * probability;
            let (best, with_reactive) = (objective(None, low), objective(reactive, low));
            let expected = if best - with_reactive <= margin * best.abs() { reactive } else { hedged };
            assert_eq!(first(reactive, probability, Some(churn(low))), expected, "chance {probability}");
            deferred += usize::from(expected == reactive);
            kept += usize::from(expected == hedged);
            assert_eq!(first(reactive, probability, Some(Vec::new())), reactive, "no churn at the low end");
            assert_eq!(first(hedged, probability, Some(Vec::new())), hedged, "staying put never defers");
        }
        assert!(deferred > 0 && kept > 0, "both outcomes covered: {deferred} deferred, {kept} kept");
    }

    #[test]
    fn empty_forecast_and_bad_carry() {
        let profile = toy_profile(&[(1, 2, 10.0)], 0.0);
        let r = request(&profile, &[], 4, None, 1000);
        assert_eq!(Liveput::default().optimize(&r).unwrap(), Plan::default());
        let r = request(&profile, &[4], 4, None, 1000);
        let mut optimizer = Liveput { carried_ms: f64::NAN, ..Liveput::default() };
        assert!(optimizer.optimize(&r).is_err());
    }

    /// One instance comes and goes every interval: the reactive policy chases
    /// it (3 -> 2 replicas and back, paying a migration each time), liveput
    /// stays on the 2-replica layout. Both plans are judged by `liveput()`
    /// along the true steps.
    #[test]
    fn staying_put_beats_chasing_flaps() {
        let profile = toy_profile(&[(1, 2, 10.0), (2, 2, 19.0), (3, 2, 26.0)], 0.0);
        let interval_ms = 20_000;
        let counts: Vec<u32> = (0..8).map(|i| if i % 2 == 0 { 5 } else { 6 }).collect();
        let r = request(&profile, &counts, 6, Some(ParallelConfig::new(3, 2)), interval_ms);
        let steps = steps_of(&r);
        let ours = Liveput::default().optimize(&r).unwrap();
        let theirs = ThroughputOptimal.optimize(&r).unwrap();
        let configs = |p: &Plan| p.steps.iter().map(|s| s.config).collect::<Vec<_>>();
        let a = realised(&profile, r.current, &steps, &configs(&ours), interval_ms);
        let b = realised(&profile, r.current, &steps, &configs(&theirs), interval_ms);
        assert!(a >= b, "liveput {a} < reactive {b}");
        assert!(a > 1.05 * b, "staying should win clearly: {a} vs {b}");
        assert!((a - ours.expected_samples()).abs() <= 1e-9 * a);
        assert!(configs(&ours)[1..].iter().all(|&c| c == Some(ParallelConfig::new(2, 2))), "{ours:?}");

        // Receding horizon over a longer flapping trace, true future as the
        // forecast: apply each plan's first step only (about 4% more samples).
        let trace: Vec<u32> = (0..40).map(|i| if i % 2 == 0 { 6 } else { 5 }).collect();
        let horizon = 6;
        let mut totals = [0.0f64; 2];
        for (k, total) in totals.iter_mut().enumerate() {
            let mut optimizer = Liveput::default();
            let (mut current, mut carry, mut before) = (None, 0.0, 6);
            for i in 0..trace.len() - horizon {
                let r = request(&profile, &trace[i..i + horizon], before, current, interval_ms);
                let plan =
                    if k == 0 { optimizer.optimize(&r) } else { ThroughputOptimal.optimize(&r) }.unwrap();
                let s = steps_of(&r)[0];
                let to = plan.steps[0].config;
                let v = liveput(
                    &profile,
                    &crate::Recovery::UNANNOUNCED,
                    current,
                    s.instances_before,
                    s.preempted,
                    s.arrived,
                    to,
                    20_000.0,
                    carry,
                )
                .unwrap();
                *total += v.expected_samples;
                carry = v.expected_leftover_ms;
                current = to;
                before = trace[i];
            }
        }
        assert!(totals[0] > 1.02 * totals[1], "receding: liveput {} vs reactive {}", totals[0], totals[1]);
        println!(
            "one plan: liveput {a:.0} vs reactive {b:.0}; receding: {:.0} vs {:.0}",
            totals[0], totals[1]
        );
    }
}
