//! Bamboo (Thorpe et al., NSDI'23), following the paper's mechanism and its
//! released simulator (`uclasystem/bamboo`, `project_pactum/simulation/
//! simulator.py`, also the Bamboo model of the Oobleck artifact):
//!
//! - **Layout.** Fixed-depth pipelines, `D = ` as many as the ready instances
//!   fill; the others wait. Node `(i, j)` (pipeline `i`, stage `j`) also holds
//!   stage `j + 1` (its successor's, cyclically) and runs its forward pass
//!   eagerly (forward redundant computation), so each node holds two stages'
//!   state: the depth is at least `memory_depth_factor x` the shallowest
//!   memory-feasible (profiled) depth; among the profiled depths that qualify,
//!   the one fastest at the trace's peak fleet is used throughout.
//! - **Speed** ([`BambooSpeed`]). By default the profile's throughput of `(D,
//!   P)`, slowed by the redundant forward passes that do not fit into the
//!   pipeline bubbles: with `M = global batch / (D x micro-batch)`
//!   micro-batches per pipeline, an iteration takes `(M + P - 1)` stage-slots
//!   of which `M` are useful; the redundant work adds `forward_fraction x M`,
//!   so the step time grows by `max(1, (1 + forward_fraction) M / (M + P -
//!   1))`. The sensitivity variant divides the throughput by
//!   `artifact_slowdown` instead (the Oobleck artifact's Bamboo table).
//! - **A preemption** of node `(i, j)` is absorbed by its predecessor `(i, j -
//!   1)`, which already holds stage `j`: no pause, but while a node runs two
//!   stages every step is `fallback_slowdown` times longer. If the predecessor
//!   is gone too (two consecutive stages lost), or the preempted node was
//!   itself covering for its successor, the failure is fatal: a global
//!   rendezvous (`global_rendezvous_ms`; both released simulators resume
//!   training when its timeout fires, with no local reconfiguration on top);
//!   when no surviving node holds some stage, the job also loses the work
//!   since the deployment's last periodic checkpoint and restarts from it, at
//!   the cost model's restart from a checkpoint (as every system; no less
//!   than the rendezvous and the reload); it takes those checkpoints as Parcae
//!   does and pays their share of throughput ([`PeerSettings::cadence`]). The
//!   preemption notice changes nothing: Bamboo's recovery is its redundant
//!   computation, and neither simulator takes a notice.
//! - **Reconfiguration** (`reconfigure_ms`, every node gets fresh coordinates)
//!   when, after the interval's events, the simulator's rule says so: there are
//!   waiting instances to replace every overloaded node, or the chance that the
//!   next preemption is fatal (`2 x overloaded / active`) exceeds
//!   `overloaded_fraction_limit`, or the waiting instances can form another
//!   pipeline.
//!
//! Which node a preemption takes matters, so the result is the mean over
//! [`PeerSettings::runs`] seeded draws (uniform among the live instances, as in
//! the liveput model); [`bamboo_with_victims`] runs one given scenario.

use std::collections::BTreeMap;

use parcae_policy_core::liveput::MigrationKind;
use parcae_policy_core::{IntervalStats, ModelProfile, ParallelConfig};

use super::rng::SplitMix64;
use super::{
    BambooConstants, BambooModel, BambooSpeed, CheckpointCost, Peer, PeerCheckpoints, PeerError, PeerRun,
    PeerSettings, cap_rollbacks, check_series, cold_start_ms, model_entry, never_runs, record, train,
};
use crate::{IntervalRecord, KindProbabilities, PeerConstants, summarize};

/// The pipeline depth Bamboo runs and its speed per number of pipelines.
#[derive(Debug, Clone, PartialEq)]
pub struct BambooPlan {
    /// Pipeline depth `P` used throughout.
    pub depth: u32,
    /// The least depth that holds two stages per node.
    pub required_depth: u32,
    /// `(D, step-time factor of redundant computation, samples/s after it)`
    /// for every profiled `D` at `depth`, by increasing `D`.
    pub layouts: Vec<(u32, f64, f64)>,
}

impl BambooPlan {
    /// Chooses the depth for a fleet that peaks at `peak` instances; `Err`
    /// says why Bamboo cannot run this model on this profile.
    pub fn choose(profile: &ModelProfile, c: &BambooConstants, peak: u32) -> Result<BambooPlan, String> {
        let Some(shallowest) = profile.configs.iter().map(|e| e.config.pipeline_stages).min() else {
            return Err("the profile has no layouts".to_string());
        };
        let required = ((f64::from(shallowest) * c.memory_depth_factor).ceil() as u32).max(2);
        let mut depths: Vec<u32> =
            profile.configs.iter().map(|e| e.config.pipeline_stages).filter(|&p| p >= required).collect();
        depths.sort_unstable();
        depths.dedup();
        let plans: Vec<BambooPlan> =
            depths.iter().map(|&depth| Self::at_depth(profile, c, depth, required)).collect();
        let deepest = profile.configs.iter().map(|e| e.config.pipeline_stages).max().unwrap_or(0);
        let mut best: Option<(f64, BambooPlan)> = None;
        for plan in plans {
            let speed = plan.best(peak as usize).map_or(0.0, |(_, s)| s);
            if best.as_ref().is_none_or(|(s, _)| speed > *s) {
                best = Some((speed, plan));
            }
        }
        best.map(|(_, plan)| plan).ok_or_else(|| {
            format!(
                "out of memory: each node holds its own and its successor's stage, so pipelines need at least \
                 {required} stages ({} x the shallowest profiled depth {shallowest}); the profile's deepest is {deepest}",
                c.memory_depth_factor
            )
        })
    }

    fn at_depth(profile: &ModelProfile, c: &BambooConstants, depth: u32, required: u32) -> BambooPlan {
        let mut layouts: Vec<(u32, f64, f64)> = profile
            .configs
            .iter()
            .filter(|e| e.config.pipeline_stages == depth)
            .map(|e| {
                let d = e.config.data_parallel;
                let micro = f64::from(profile.global_batch_size)
                    / (f64::from(d) * f64::from(profile.micro_batch_size.max(1)));
                let p = f64::from(depth);
                let factor = match c.speed {
                    BambooSpeed::RedundantCompute => {
                        ((1.0 + c.forward_fraction) * micro / (micro + p - 1.0)).max(1.0)
                    }
                    BambooSpeed::OobleckArtifact => c.artifact_slowdown,
                };
                (d, factor, e.samples_per_second / factor)
            })
            .collect();
        layouts.sort_by_key(|l| l.0);
        BambooPlan { depth, required_depth: required, layouts }
    }

    /// The fastest `(D, samples/s)` whose pipelines fit in `nodes` instances.
    pub fn best(&self, nodes: usize) -> Option<(u32, f64)> {
        self.layouts
            .iter()
            .filter(|(d, _, _)| u64::from(*d) * u64::from(self.depth) <= nodes as u64)
            .max_by(|a, b| a.2.total_cmp(&b.2).then_with(|| b.0.cmp(&a.0)))
            .map(|&(d, _, s)| (d, s))
    }
}

/// Counts of Bamboo's own events in one run.
#[derive(Debug, Clone, Copy, Default)]
struct Events {
    failovers: u64,
    fatal: u64,
    reconfigurations: u64,
    wiped: u64,
}

/// One draw of which nodes are preempted: `pick(interval, alive, count)`
/// returns `count` distinct indices into the live nodes, in the order they go.
type Victims<'a> = dyn FnMut(usize, usize, usize) -> Result<Vec<usize>, PeerError> + 'a;

struct Run<'a> {
    profile: &'a ModelProfile,
    plan: &'a BambooPlan,
    model: &'a BambooModel,
    c: &'a BambooConstants,
    interval_ms: f64,
    /// Per live node: the coordinates it runs (empty: waiting; two: covering).
    nodes: Vec<Vec<(u32, u32)>>,
    config: Option<ParallelConfig>,
    speed: f64,
    started: bool,
    /// The job stopped after losing some stage's state (a restart reloads the checkpoint).
    stopped_wiped: bool,
    fallback: bool,
    carried: f64,
    events: Events,
    checkpoints: PeerCheckpoints<'a>,
}

impl Run<'_> {
    fn assign(&mut self, d: u32, speed: f64) {
        let p = self.plan.depth;
        for (idx, coords) in self.nodes.iter_mut().enumerate() {
            let idx = idx as u64;
            *coords = if idx < u64::from(d) * u64::from(p) {
                vec![((idx / u64::from(p)) as u32, (idx % u64::from(p)) as u32)]
            } else {
                Vec::new()
            };
        }
        self.config = Some(ParallelConfig::new(d, p));
        self.speed = speed;
        self.fallback = false;
    }

    /// Whether some stage's state survives on no live node (each node holds
    /// its own stage and its successor's).
    fn wiped(&self, dead: &[bool]) -> bool {
        let p = self.plan.depth as usize;
        let mut held = vec![false; p];
        for (coords, _) in self.nodes.iter().zip(dead).filter(|(_, d)| !**d) {
            if let Some(&(_, s)) = coords.first() {
                held[s as usize % p] = true;
                held[(s as usize + 1) % p] = true;
            }
        }
        held.contains(&false)
    }

    fn should_reconfigure(&self) -> bool {
        let Some(config) = self.config else { return false };
        let overloaded = self.nodes.iter().filter(|c| c.len() > 1).count();
        let waiting = self.nodes.iter().filter(|c| c.is_empty()).count();
        let active = (config.instances() as usize).saturating_sub(overloaded);
        if overloaded > 0 && waiting >= overloaded {
            return true;
        }
        if overloaded > 0
            && (active == 0 || 2.0 * overloaded as f64 / active as f64 > self.c.overloaded_fraction_limit)
        {
            return true;
        }
        self.plan.best(active + waiting).is_some_and(|(d, _)| d > config.data_parallel)
    }

    fn step(
        &mut self,
        k: usize,
        stats: IntervalStats,
        victims: &mut Victims<'_>,
    ) -> Result<IntervalRecord, PeerError> {
        let p = self.plan.depth;
        let running = self.config.is_some();
        // Bamboo's own speed before the events: what the lost work was worth.
        let before_speed = self.speed;
        let mut dead = vec![false; self.nodes.len()];
        let mut fatal = false;
        let mut failovers = 0;
        for v in victims(k, self.nodes.len(), stats.preemptions as usize)? {
            dead[v] = true;
            if !running || fatal {
                continue;
            }
            match self.nodes[v].as_slice() {
                [] => {}
                [(i, j)] => {
                    let (i, j) = (*i, *j);
                    let pred = (i, (j + p - 1) % p);
                    let holder = (0..self.nodes.len()).find(|&u| !dead[u] && self.nodes[u].contains(&pred));
                    match holder {
                        Some(u) if self.nodes[u].len() == 1 => {
                            self.nodes[u].push((i, j));
                            failovers += 1;
                        }
                        _ => fatal = true,
                    }
                }
                _ => fatal = true,
            }
        }
        let fits_after = {
            let alive = dead.iter().filter(|d| !**d).count() + stats.arrivals as usize;
            self.plan.best(alive)
        };
        let wiped = running && (fatal || fits_after.is_none()) && self.wiped(&dead);
        let mut keep = dead.iter().map(|d| !d);
        self.nodes.retain(|_| keep.next().unwrap_or(true));
        self.nodes.extend(std::iter::repeat_n(Vec::new(), stats.arrivals as usize));

        let best = self.plan.best(self.nodes.len());
        let t = self.interval_ms;
        let mut lost = 0.0;
        let mut transition = None;
        let mut kind = MigrationKind::None;
        let restart_ms = self.c.global_rendezvous_ms;
        // A restart that reloads the checkpoint (some stage's state lost) is a
        // restart from a checkpoint as every row pays it: the cost model's
        // restart from nothing into the new layout (processes, model, every
        // stage's state), and no less than Bamboo's own rendezvous and reload.
        let profile = self.profile;
        let reload = profile.checkpoint_restart_ms;
        let restart_after = move |wiped: bool, config: ParallelConfig| -> Result<f64, PeerError> {
            Ok(if wiped {
                (restart_ms + reload).max(cold_start_ms(profile, config, k).map_err(PeerError::Sim)?)
            } else {
                restart_ms
            })
        };
        if running && (fatal || best.is_none()) {
            if fatal {
                self.events.fatal += 1;
            }
            if wiped {
                self.events.wiped += 1;
                lost = self.checkpoints.lost_samples(before_speed);
            }
            match best {
                Some((d, speed)) => {
                    self.assign(d, speed);
                    transition = Some(restart_after(wiped, ParallelConfig::new(d, p))?);
                    kind = MigrationKind::Restart;
                }
                None => {
                    self.config = None;
                    self.stopped_wiped = wiped;
                }
            }
        } else if !running {
            if let Some((d, speed)) = best {
                self.assign(d, speed);
                let config = self.config.unwrap_or(ParallelConfig::new(d, p));
                transition = Some(if self.started {
                    restart_after(self.stopped_wiped, config)?
                } else {
                    cold_start_ms(self.profile, config, k).map_err(PeerError::Sim)?
                });
                kind = MigrationKind::Restart;
                self.started = true;
                self.stopped_wiped = false;
            }
        } else if self.should_reconfigure() {
            if let Some((d, speed)) = best {
                self.assign(d, speed);
                self.events.reconfigurations += 1;
                transition = Some(self.model.reconfigure_ms);
                kind = MigrationKind::InterStage;
            }
        } else if failovers > 0 {
            self.fallback = true;
            kind = MigrationKind::IntraStage;
        }
        self.events.failovers += failovers;
        let carried_in = self.carried;
        // A new reconfiguration supersedes one still in flight.
        let busy = transition.unwrap_or(if self.config.is_some() { self.carried } else { 0.0 });
        let keep = self.checkpoints.advance(k);
        let speed = keep
            * match self.config {
                Some(_) if self.fallback => self.speed / self.c.fallback_slowdown,
                Some(_) => self.speed,
                None => 0.0,
            };
        let (samples, leftover) = train(speed, busy, t);
        self.carried = leftover;
        Ok(record(k, stats, self.config, samples, lost, carried_in, transition.unwrap_or(0.0), busy, t, kind))
    }
}

/// Bamboo on `series`, the mean over `settings.runs` seeded draws of which
/// instances are preempted; see the module documentation.
pub fn bamboo(
    profile: &ModelProfile,
    series: &[IntervalStats],
    constants: &PeerConstants,
    settings: &PeerSettings,
) -> Result<PeerRun, PeerError> {
    let runs = settings.runs.max(1);
    let mut all = Vec::with_capacity(runs as usize);
    let mut notes = Vec::new();
    let mut totals = Events::default();
    let mut checkpoint_totals: Option<CheckpointCost> = None;
    for r in 0..runs {
        let mut rng = SplitMix64::new(settings.seed.wrapping_add(u64::from(r).wrapping_mul(0x9E37_79B9)));
        let mut pick = |_k: usize, alive: usize, count: usize| Ok(rng.choose(alive, count));
        match simulate(profile, series, constants, settings, &mut pick)? {
            Outcome::Ran { records, events, plan_note, checkpoints } => {
                match &mut checkpoint_totals {
                    Some(totals) => totals.absorb(checkpoints),
                    None => checkpoint_totals = Some(checkpoints),
                }
                totals.failovers += events.failovers;
                totals.fatal += events.fatal;
                totals.reconfigurations += events.reconfigurations;
                totals.wiped += events.wiped;
                if notes.is_empty() {
                    notes.push(plan_note);
                }
                all.push(records);
            }
            Outcome::Cannot(run) => return Ok(run),
        }
    }
    let n = f64::from(runs);
    notes.push(format!(
        "bamboo: per run (mean of {runs} draws) {:.1} preemptions absorbed by a predecessor, {:.1} fatal failures \
         ({:.2} losing some stage's state), {:.1} re-balancing reconfigurations",
        totals.failovers as f64 / n,
        totals.fatal as f64 / n,
        totals.wiped as f64 / n,
        totals.reconfigurations as f64 / n
    ));
    notes.extend(checkpoint_totals.map(|c| c.note(Peer::Bamboo, series.len(), runs as usize)));
    let records = average(all);
    Ok(PeerRun {
        peer: Peer::Bamboo,
        result: summarize(records, settings.interval_ms, settings.prices),
        notes,
    })
}

/// Bamboo on one given scenario: `victims[k]` lists the indices (into the
/// live nodes, in the order they joined; a reconfiguration gives node `n` of
/// that order coordinates `(n / P, n mod P)`) preempted at interval `k`, in
/// the order they go. Its length must match the series' preemptions.
pub fn bamboo_with_victims(
    profile: &ModelProfile,
    series: &[IntervalStats],
    constants: &PeerConstants,
    settings: &PeerSettings,
    victims: &[Vec<usize>],
) -> Result<PeerRun, PeerError> {
    let mut pick = |k: usize, alive: usize, count: usize| {
        let chosen = victims.get(k).cloned().unwrap_or_default();
        let mut seen = vec![false; alive];
        let ok = chosen.len() == count
            && chosen.iter().all(|&v| v < alive && !std::mem::replace(&mut seen[v], true));
        if ok {
            Ok(chosen)
        } else {
            Err(PeerError::BadVictims {
                interval: k,
                reason: format!("{chosen:?}: need {count} distinct indices below {alive}"),
            })
        }
    };
    match simulate(profile, series, constants, settings, &mut pick)? {
        Outcome::Ran { records, plan_note, .. } => Ok(PeerRun {
            peer: Peer::Bamboo,
            result: summarize(records, settings.interval_ms, settings.prices),
            notes: vec![plan_note],
        }),
        Outcome::Cannot(run) => Ok(run),
    }
}

enum Outcome {
    Ran { records: Vec<IntervalRecord>, events: Events, plan_note: String, checkpoints: CheckpointCost },
    Cannot(PeerRun),
}

fn simulate(
    profile: &ModelProfile,
    series: &[IntervalStats],
    constants: &PeerConstants,
    settings: &PeerSettings,
    victims: &mut Victims<'_>,
) -> Result<Outcome, PeerError> {
    let c = &constants.bamboo;
    let model = model_entry(Peer::Bamboo, &c.models, &profile.model)?;
    check_series(series)?;
    let peak = series.iter().map(|s| s.instances).max().unwrap_or(0);
    let plan = match BambooPlan::choose(profile, c, peak) {
        Ok(plan) => plan,
        Err(why) => {
            return Ok(Outcome::Cannot(never_runs(Peer::Bamboo, series, settings, format!("bamboo: {why}"))));
        }
    };
    let plan_note = {
        let at_peak = plan.best(peak as usize);
        let factor = at_peak
            .and_then(|(d, _)| plan.layouts.iter().find(|l| l.0 == d))
            .map_or_else(|| "-".to_string(), |l| format!("x{:.3}", l.1));
        format!(
            "bamboo ({}): {}-stage pipelines (at least {} to hold a successor's stage too); {} slow steps by \
             {factor} at the peak layout; fail-over slowdown x{}, fatal failure {:.0} s global rendezvous, \
             re-balancing {:.0} s",
            model.paper_model,
            plan.depth,
            plan.required_depth,
            match c.speed {
                BambooSpeed::RedundantCompute => "redundant forward passes",
                BambooSpeed::OobleckArtifact => "the Oobleck artifact's Bamboo-versus-Oobleck ratio",
            },
            c.fallback_slowdown,
            c.global_rendezvous_ms / 1000.0,
            model.reconfigure_ms / 1000.0
        )
    };
    let mut run = Run {
        profile,
        plan: &plan,
        model,
        c,
        interval_ms: settings.interval_ms as f64,
        nodes: Vec::new(),
        config: None,
        speed: 0.0,
        started: false,
        stopped_wiped: false,
        fallback: false,
        carried: 0.0,
        events: Events::default(),
        checkpoints: PeerCheckpoints::new(profile, settings),
    };
    let mut records = Vec::with_capacity(series.len());
    for (k, stats) in series.iter().enumerate() {
        records.push(run.step(k, *stats, victims)?);
    }
    cap_rollbacks(run.checkpoints.risk_ceiling(), &mut records);
    Ok(Outcome::Ran { records, events: run.events, plan_note, checkpoints: run.checkpoints.cost })
}

/// The mean of several runs' records, interval by interval; the layout shown
/// is the most frequent one (the first in layout order on a tie).
fn average(runs: Vec<Vec<IntervalRecord>>) -> Vec<IntervalRecord> {
    let Some(first) = runs.first() else { return Vec::new() };
    let n = runs.len() as f64;
    (0..first.len())
        .map(|k| {
            let mut out = first[k].clone();
            let mut counts: BTreeMap<Option<ParallelConfig>, usize> = BTreeMap::new();
            let mut kinds = [0.0; 5];
            let (mut samples, mut lost, mut migration, mut transition, mut carried, mut leftover) =
                (0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
            let (mut p_restart, mut p_lost) = (0.0, 0.0);
            for run in &runs {
                let r = &run[k];
                *counts.entry(r.config).or_default() += 1;
                samples += r.samples;
                lost += r.lost_samples;
                migration += r.migration_ms;
                transition += r.transition_ms;
                carried += r.carried_in_ms;
                leftover += r.leftover_ms;
                p_restart += r.p_restart;
                p_lost += r.p_lost_work;
                for kind in MigrationKind::ALL {
                    kinds[kind.index()] += r.kinds.get(kind);
                }
            }
            let top = counts.values().copied().max().unwrap_or(0);
            out.config = counts.iter().find(|(_, c)| **c == top).and_then(|(config, _)| *config);
            out.samples = samples / n;
            out.lost_samples = lost / n;
            out.migration_ms = migration / n;
            out.transition_ms = transition / n;
            out.carried_in_ms = carried / n;
            out.leftover_ms = leftover / n;
            out.p_restart = p_restart / n;
            out.p_lost_work = p_lost / n;
            out.kinds = KindProbabilities::from_array(kinds.map(|x| x / n));
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::Prices;

    const PRICES: Prices = Prices { spot_usd_per_hour: 1.0, on_demand_usd_per_hour: 3.0 };

    fn settings() -> PeerSettings {
        PeerSettings::new(60_000, PRICES)
    }

    /// Toy profile, factor 1 (so 2-deep pipelines qualify), no redundant
    /// slowdown, fail-over x2, fatal 3 s, re-balance 6 s, never re-balance for risk.
    /// Peak 4: (2, 2) and (1, 4) both 40/s; the shallower is used: P = 2.
    /// Nodes 0..4 get (0,0) (0,1) (1,0) (1,1).
    #[test]
    fn a_single_loss_is_absorbed_without_a_rendezvous() {
        let p = profile(0.0, 0.0);
        let c = constants();
        let series = [stats(4, 4, 0), stats(3, 0, 1), stats(3, 0, 0)];
        // Node 1 (stage (0,1)) goes: node 0 (0,0) holds its stage and covers.
        let run = bamboo_with_victims(&p, &series, &c, &settings(), &[vec![], vec![1], vec![]]).unwrap();
        let r = &run.result.intervals;
        assert_eq!(r[0].config, Some(ParallelConfig::new(2, 2)));
        assert_eq!(r[0].samples, 40.0 * 60.0);
        assert_eq!(r[1].config, Some(ParallelConfig::new(2, 2)));
        assert_eq!(r[1].migration_ms, 0.0, "no rendezvous");
        assert_eq!(r[1].kinds.intra_stage, 1.0);
        assert_eq!(r[1].samples, 20.0 * 60.0, "x2 slower while node 0 runs two stages");
        assert_eq!(r[2].samples, 20.0 * 60.0);
    }

    #[test]
    fn two_consecutive_losses_force_a_global_rendezvous() {
        let p = profile(0.0, 0.0);
        let c = constants();
        let series = [stats(4, 4, 0), stats(2, 0, 2)];
        for order in [vec![1, 0], vec![0, 1]] {
            let run = bamboo_with_victims(&p, &series, &c, &settings(), &[vec![], order.clone()]).unwrap();
            let r = &run.result.intervals;
            // Pipeline 1 survives whole: nothing lost; 2 nodes: (1, 2) at 20/s
            // after the 3 s global rendezvous.
            assert_eq!(r[1].config, Some(ParallelConfig::new(1, 2)), "{order:?}");
            assert_eq!(r[1].kinds.restart, 1.0);
            assert_eq!(r[1].migration_ms, 3000.0);
            assert_eq!(r[1].lost_samples, 0.0);
            assert_eq!(r[1].samples, 20.0 * 57.0);
        }
        // Two losses in different pipelines are absorbed (no fatal failure),
        // but with 2 of the 2 remaining active nodes overloaded the risk rule
        // re-balances at once: (1, 2) after the 6 s reconfiguration.
        let run = bamboo_with_victims(&p, &series, &c, &settings(), &[vec![], vec![1, 3]]).unwrap();
        let r = &run.result.intervals;
        assert_eq!(r[1].kinds.restart, 0.0);
        assert_eq!(r[1].kinds.inter_stage, 1.0);
        assert_eq!(r[1].samples, 20.0 * 54.0);
    }

    #[test]
    fn losing_a_covering_node_is_fatal() {
        let p = profile(0.0, 0.0);
        let c = constants();
        let series = [stats(4, 4, 0), stats(3, 0, 1), stats(2, 0, 1)];
        // Interval 1: node 1 goes, node 0 covers. Interval 2: node 0 (index 0
        // of the survivors [0, 2, 3]) goes while covering: fatal.
        let run = bamboo_with_victims(&p, &series, &c, &settings(), &[vec![], vec![1], vec![0]]).unwrap();
        let r = &run.result.intervals;
        assert_eq!(r[1].kinds.intra_stage, 1.0);
        assert_eq!(r[2].kinds.restart, 1.0);
        assert_eq!(r[2].migration_ms, 3000.0);
        assert_eq!(r[2].samples, 20.0 * 57.0);
        // Losing a node that covers no one is absorbed again instead.
        let run = bamboo_with_victims(&p, &series, &c, &settings(), &[vec![], vec![1], vec![2]]).unwrap();
        assert_eq!(run.result.intervals[2].kinds.restart, 0.0);
    }

    #[test]
    fn losing_every_copy_of_a_stage_reloads_the_checkpoint() {
        // Checkpoint reload 10 s (also the cold start), 20 min interval: 10 min lost.
        let p = profile(10_000.0, 1_200_000.0);
        let c = constants();
        let series = [stats(2, 2, 0), stats(0, 0, 2), stats(2, 2, 0)];
        let run = bamboo_with_victims(&p, &series, &c, &settings(), &[vec![], vec![0, 1], vec![]]).unwrap();
        let r = &run.result.intervals;
        assert_eq!(r[0].config, Some(ParallelConfig::new(1, 2)));
        assert_eq!(r[0].samples, 20.0 * 50.0);
        assert_eq!(r[1].config, None);
        // 10 minutes at 20/s would be 12,000 samples, but only the 50 s since
        // the cold start were trained: that is all a rollback takes back.
        assert_eq!(r[1].lost_samples, 20.0 * 50.0);
        // Back with 2: rendezvous 3 s + reload 10 s.
        assert_eq!(r[2].migration_ms, 13_000.0);
        assert_eq!(r[2].samples, 20.0 * 47.0);
        // Checkpoints every minute: 30 s lost, less than what was trained.
        let p = profile(10_000.0, 60_000.0);
        let run = bamboo_with_victims(&p, &series, &c, &settings(), &[vec![], vec![0, 1], vec![]]).unwrap();
        assert_eq!(run.result.intervals[1].lost_samples, 30.0 * 20.0);
    }

    #[test]
    fn a_restart_that_reloads_the_checkpoint_pays_a_restart_from_it() {
        // As above, but the fresh processes take 30 s to start: bringing the
        // job back from its checkpoint costs what it costs every row (the
        // cost model's restart from nothing), more than Bamboo's rendezvous
        // and reload alone (13 s).
        let mut p = profile(10_000.0, 1_200_000.0);
        p.process_start_ms = 30_000.0;
        let c = constants();
        let series = [stats(2, 2, 0), stats(0, 0, 2), stats(2, 2, 0)];
        let run = bamboo_with_victims(&p, &series, &c, &settings(), &[vec![], vec![0, 1], vec![]]).unwrap();
        let r = &run.result.intervals;
        let cold = cold_start_ms(&p, ParallelConfig::new(1, 2), 2).unwrap();
        assert!(cold > 13_000.0, "{cold}");
        assert_eq!(r[2].migration_ms, cold);
        assert_eq!(r[0].migration_ms, cold, "the first start is the same restart");
    }

    #[test]
    fn it_takes_the_deployments_checkpoints_it_reloads() {
        // The deployment checkpoints every minute at 10% of throughput: Bamboo
        // trains at 90% and losing both copies of a stage rolls back 30 s of
        // that slower training.
        let p = profile(10_000.0, 1_200_000.0);
        let c = constants();
        let series = [stats(2, 2, 0), stats(2, 0, 0), stats(0, 0, 2)];
        let victims = [vec![], vec![], vec![0, 1]];
        let free = bamboo_with_victims(&p, &series, &c, &settings(), &victims).unwrap();
        let deployment = crate::cadence::checkpointing(&p, 60_000.0, 0.9);
        let paid_settings =
            PeerSettings { cadence: Some(crate::Cadenced::constant(deployment, series.len())), ..settings() };
        let paid = bamboo_with_victims(&p, &series, &c, &paid_settings, &victims).unwrap();
        let (free, paid) = (&free.result.intervals, &paid.result.intervals);
        assert_eq!(free[1].samples, 20.0 * 60.0);
        assert_eq!(paid[1].samples, 0.9 * free[1].samples);
        assert_eq!(paid[2].lost_samples, 30.0 * 20.0 * 0.9);
    }

    #[test]
    fn waiting_instances_trigger_a_reconfiguration() {
        let p = profile(0.0, 0.0);
        let c = constants();
        // Peak 4 -> P = 2; 2 then 4 instances: a second pipeline is formed
        // (6 s), then nothing.
        let series = [stats(2, 2, 0), stats(4, 2, 0), stats(4, 0, 0)];
        let run = bamboo_with_victims(&p, &series, &c, &settings(), &[vec![], vec![], vec![]]).unwrap();
        let r = &run.result.intervals;
        assert_eq!(r[1].config, Some(ParallelConfig::new(2, 2)));
        assert_eq!(r[1].kinds.inter_stage, 1.0);
        assert_eq!(r[1].samples, 40.0 * 54.0);
        assert_eq!(r[2].samples, 40.0 * 60.0);
    }

    #[test]
    fn redundant_computation_and_memory() {
        let p = profile(0.0, 0.0);
        let mut c = constants();
        c.bamboo.forward_fraction = 1.0 / 3.0;
        // Peak 4: (2, 2) has M = 40 / 2 = 20 micro-batches per pipeline, so
        // its steps grow by (4/3) 20 / 21 = 1.270 (31.5/s); (1, 4) has M = 40
        // and P - 1 = 3 bubble slots: (4/3) 40 / 43 = 1.240 (32.25/s): the
        // deeper pipeline hides more of the redundant work and wins.
        let plan = BambooPlan::choose(&p, &c.bamboo, 4).unwrap();
        assert_eq!(plan.depth, 4);
        let (d, factor, speed) = plan.layouts[0];
        assert_eq!(d, 1);
        assert!((factor - 160.0 / 129.0).abs() < 1e-12);
        assert!((speed - 40.0 / factor).abs() < 1e-12);
        assert_eq!(plan.best(4), Some((1, speed)));
        // Depth 1 can never hold a successor: at least 2.
        c.bamboo.memory_depth_factor = 4.5;
        let why = BambooPlan::choose(&p, &c.bamboo, 8).unwrap_err();
        assert!(why.contains("out of memory") && why.contains("at least 5 stages"), "{why}");
        let run = bamboo(&p, &[stats(4, 4, 0)], &c, &settings()).unwrap();
        assert_eq!(run.result.totals.samples, 0.0);
        assert!(run.notes[0].contains("out of memory"), "{:?}", run.notes);
    }

    #[test]
    fn monte_carlo_is_deterministic_and_exact_when_the_draw_cannot_matter() {
        let p = profile(0.0, 0.0);
        let c = constants();
        // Losing 2 of a single 2-deep pipeline: always fatal whichever order.
        let series = [stats(6, 6, 0), stats(6, 0, 0), stats(4, 0, 2)];
        let a = bamboo(&p, &series, &c, &settings()).unwrap();
        let b = bamboo(&p, &series, &c, &settings()).unwrap();
        assert_eq!(a, b);
        // P = 2 (D = 3 at 60/s). Two preemptions among 6 nodes in 3
        // pipelines: fatal iff both are in the same pipeline (3 of 15 pairs).
        let fatal = a.result.intervals[2].kinds.restart;
        assert!((fatal - 0.2).abs() < 0.15, "{fatal}");
        let bad = bamboo_with_victims(&p, &series, &c, &settings(), &[vec![], vec![], vec![1, 1]]);
        assert!(matches!(bad, Err(PeerError::BadVictims { interval: 2, .. })));
    }
}
