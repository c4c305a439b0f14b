//! `parcae-host provision`: how many instances of which type to request, at
//! spot or on-demand prices, to meet a goal at the least expected cost, in
//! the spirit of spotDNN's cost-minimising provisioning.
//!
//! Each offer is an instance type with an availability trace of its spot
//! market and its prices (by default those of its profile). Requesting `n`
//! spot instances is modelled as receiving `min(N(t), n)` of them, where
//! `N(t)` is what the market gave in the trace; `n` on-demand instances are
//! always there.
//!
//! **Prediction** (cheap, from the trace's statistics and the cost model): the
//! mean over the trace of the fastest profiled layout's throughput at
//! `min(N(t), n)` instances, reduced by the time the capped fleet's changes
//! cost: per preempted instance, the cost model's expected migration from the
//! best layout at the mean fleet to the best one with one instance fewer
//! (lost work included), and per interval with arrivals, the migration back up.
//! The cost per hour is the mean fleet times the price. For a goal of `S`
//! samples by a deadline, the completion time is `S / throughput` and the
//! cost is the hourly cost until then; for a throughput floor, the hourly cost.
//! The cheapest candidate that meets the goal is recommended.
//!
//! **Simulation** (the check): the recommended candidates are run through the
//! control loop with a policy (default `builtin:guarded-liveput`) on the capped
//! trace (or a constant on-demand fleet) and scored by the liveput simulator;
//! completion time and cost are read off the cumulative samples (extrapolated
//! at the run's average rate when the trace ends first).
//!
//! **Mixed fleets** (spotDNN): with several offers of one model, `provision` also scores
//! every spot request `n_1 x type_1 + n_2 x type_2` over each pair of offers, the job
//! running replicas on both types with the batch split by speed ([`mix`]); the best mix
//! is shown against the best single-type fleet, both predicted and simulated.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use comfy_table::{CellAlignment, Table, presets};
use parcae_policy_core::liveput::{self, Transition};
use parcae_policy_core::reactive::best_config_for;
use parcae_policy_core::{IntervalStats, ModelProfile, ParallelConfig, Recovery};
use parcae_runtime::GuardedPolicy;
use parcae_sim::{CadenceRule, Cadenced, MigrationMode, Prices};
use serde::Serialize;

use crate::args::{NoticeArgs, PolicyArgs, ProfileArgs, SandboxArgs, TraceInput};
use crate::commands::bench::CadenceArg;
use crate::control::{ControlSettings, FleetTypes, replay_profiles};

pub mod mix;

/// Arguments of `parcae-host provision`.
#[derive(Debug, Args)]
pub struct ProvisionArgs {
    /// The model to plan for, and the offers' default profile.
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// An instance type to consider: `NAME=TRACE[,spot=USD][,on-demand=USD][,profile=FILE]`
    /// (trace of its spot availability; prices per instance-hour, default
    /// the profile's; its own profile, default --profile). Repeatable.
    #[arg(long = "offer", required = true, value_name = "NAME=TRACE[,KEY=VALUE]...")]
    pub offers: Vec<String>,
    /// How to read the offers' traces.
    #[command(flatten)]
    pub input: TraceInput,
    /// Goal: train this many samples ...
    #[arg(long, requires = "deadline_hours", conflicts_with = "min_samples_per_hour")]
    pub samples: Option<f64>,
    /// ... within this many hours.
    #[arg(long, requires = "samples")]
    pub deadline_hours: Option<f64>,
    /// Goal: sustain at least this many samples per hour.
    #[arg(long)]
    pub min_samples_per_hour: Option<f64>,
    /// Most instances of one type to request (default: the trace's peak).
    #[arg(long)]
    pub max_instances: Option<u32>,
    /// Consider spot instances only.
    #[arg(long)]
    pub spot_only: bool,
    /// The policies that run the simulated check.
    #[command(flatten)]
    pub policies: PolicyArgs,
    /// Plan horizon of the policy (intervals).
    #[arg(long, default_value_t = 8)]
    pub horizon: u32,
    /// How many of the cheapest candidates meeting the goal to simulate.
    #[arg(long, default_value_t = 3)]
    pub simulate: usize,
    /// Write the candidates and the simulated outcomes as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Budgets of each policy call.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// The preemption notice the policy plans with.
    #[command(flatten)]
    pub notice: NoticeArgs,
    /// Which losses the simulated check's periodic checkpoint cadence follows, as
    /// `bench --cadence`: those seen so far, as `run` sets its own (the policy is told
    /// each interval's), or the whole trace's; a mix of types follows the union fleet's
    /// losses. The prediction always prices the whole trace's (a steady-state figure).
    #[arg(long, value_enum, default_value_t = CadenceArg::SeenSoFar)]
    pub cadence: CadenceArg,
}

/// One `--offer`.
#[derive(Debug, Clone, PartialEq)]
pub struct Offer {
    /// Name of the instance type (as reported).
    pub name: String,
    /// Availability trace of its spot market.
    pub trace: PathBuf,
    /// Spot price per instance-hour (default: the profile's).
    pub spot_usd_per_hour: Option<f64>,
    /// On-demand price per instance-hour (default: the profile's).
    pub on_demand_usd_per_hour: Option<f64>,
    /// Its own profile (default: --profile).
    pub profile: Option<PathBuf>,
}

/// Parses `NAME=TRACE[,spot=USD][,on-demand=USD][,profile=FILE]`.
pub fn parse_offer(text: &str) -> Result<Offer, String> {
    let (name, rest) =
        text.split_once('=').ok_or_else(|| format!("`{text}`: expected NAME=TRACE[,KEY=VALUE...]"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("`{text}`: the instance type name is empty"));
    }
    let mut parts = rest.split(',');
    let trace =
        parts.next().map(str::trim).filter(|t| !t.is_empty()).ok_or_else(|| format!("`{text}`: no trace"))?;
    let mut offer = Offer {
        name: name.to_string(),
        trace: PathBuf::from(trace),
        spot_usd_per_hour: None,
        on_demand_usd_per_hour: None,
        profile: None,
    };
    for part in parts {
        let (key, value) =
            part.split_once('=').ok_or_else(|| format!("`{text}`: `{part}` is not KEY=VALUE"))?;
        let price = |v: &str| -> Result<f64, String> {
            v.trim().parse::<f64>().ok().filter(|p| p.is_finite() && *p >= 0.0).ok_or_else(|| {
                format!("`{text}`: {key}: `{v}` is not a price in USD per hour (a number >= 0)")
            })
        };
        match key.trim() {
            "spot" => offer.spot_usd_per_hour = Some(price(value)?),
            "on-demand" => offer.on_demand_usd_per_hour = Some(price(value)?),
            "profile" => offer.profile = Some(PathBuf::from(value.trim())),
            other => {
                return Err(format!("`{text}`: unknown key `{other}` (expected spot, on-demand, profile)"));
            }
        }
    }
    Ok(offer)
}

/// What the user wants.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Goal {
    /// `samples` samples within `deadline_hours`.
    Samples {
        /// Samples to train.
        samples: f64,
        /// Hours to train them in.
        deadline_hours: f64,
    },
    /// At least `samples_per_hour`.
    Throughput {
        /// The floor, samples per hour.
        samples_per_hour: f64,
    },
}

/// Spot or on-demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Market {
    /// Spot instances: as many as the market gives, up to the request.
    Spot,
    /// On-demand instances: always the request.
    OnDemand,
}

impl Market {
    fn as_str(self) -> &'static str {
        match self {
            Market::Spot => "spot",
            Market::OnDemand => "on-demand",
        }
    }
}

/// The statistics of one offer's spot market that the prediction uses.
#[derive(Debug, Clone)]
pub struct MarketTrace {
    /// The per-interval series of the trace.
    pub series: Vec<IntervalStats>,
    /// Length of one interval, ms.
    pub interval_ms: u64,
}

impl MarketTrace {
    /// Most instances the market gave at once.
    pub fn peak(&self) -> u32 {
        self.series.iter().map(|s| s.instances).max().unwrap_or(0)
    }

    fn hours(&self) -> f64 {
        self.series.len() as f64 * self.interval_ms as f64 / 3_600_000.0
    }

    /// The series of a request for `n` instances: the market's count capped at `n`.
    pub fn capped(&self, n: u32) -> Vec<IntervalStats> {
        let counts: Vec<u32> = self.series.iter().map(|s| s.instances.min(n)).collect();
        IntervalStats::chain_from(0, &counts)
    }

    /// A constant fleet of `n` as long as the trace.
    pub fn constant(&self, n: u32) -> Vec<IntervalStats> {
        IntervalStats::chain_from(0, &vec![n; self.series.len()])
    }
}

/// One candidate's predicted outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// The offer's name.
    pub offer: String,
    /// Spot or on-demand.
    pub market: Market,
    /// Instances requested.
    pub requested: u32,
    /// Mean instances received.
    pub mean_instances: f64,
    /// Fraction of the ideal throughput lost to reconfigurations.
    pub overhead: f64,
    /// Predicted samples per hour.
    pub samples_per_hour: f64,
    /// Predicted cost per hour.
    pub usd_per_hour: f64,
    /// Predicted dollars per million samples.
    pub usd_per_million_samples: Option<f64>,
    /// For a samples goal: hours to train them (`None`: never).
    pub completion_hours: Option<f64>,
    /// For a samples goal: cost until completion; for a throughput goal: cost per hour.
    pub usd: Option<f64>,
    /// Whether the prediction meets the goal.
    pub meets_goal: bool,
    /// What is requested of each type (one part unless the fleet mixes types).
    pub parts: Vec<mix::Part>,
}

impl Prediction {
    /// Whether it mixes instance types.
    pub fn is_mix(&self) -> bool {
        self.parts.len() > 1
    }

    /// How people read the request: `4 x p3 (spot)`, or `2 x p3 + 6 x g4dn (spot)`.
    pub fn name(&self) -> String {
        if self.is_mix() {
            format!("{} ({})", self.offer, self.market.as_str())
        } else {
            format!("{} x {} ({})", self.requested, self.offer, self.market.as_str())
        }
    }
}

/// A samples goal's completion time and cost at `samples_per_hour` and `usd_per_hour`,
/// or a throughput goal's cost per hour; and whether the goal is met.
fn against_goal(goal: Goal, samples_per_hour: f64, usd_per_hour: f64) -> (Option<f64>, Option<f64>, bool) {
    match goal {
        Goal::Samples { samples, deadline_hours } => {
            let completion = (samples_per_hour > 0.0).then(|| samples / samples_per_hour);
            let met = completion.is_some_and(|c| c <= deadline_hours);
            (completion, completion.map(|c| c * usd_per_hour), met)
        }
        Goal::Throughput { samples_per_hour: floor } => (None, Some(usd_per_hour), samples_per_hour >= floor),
    }
}

/// Expected time a capped fleet's changes cost, ms per hour of training, and
/// the mean fleet, under the offer's recovery rules (a preemption whose notice
/// saves the stage rolls nothing back).
fn change_cost_ms_per_hour(
    profile: &ModelProfile,
    series: &[IntervalStats],
    hours: f64,
    recovery: &Recovery,
) -> (f64, f64) {
    if series.is_empty() || hours <= 0.0 {
        return (0.0, 0.0);
    }
    let mean = series.iter().map(|s| f64::from(s.instances)).sum::<f64>() / series.len() as f64;
    let preempted: u64 = series.iter().map(|s| u64::from(s.preemptions)).sum();
    // The first interval's arrivals are the start, not a change.
    let arrival_events = series.iter().skip(1).filter(|s| s.arrivals > 0).count() as f64;
    let n = (mean.round() as u32).max(1);
    let down = match (best_config_for(profile, n), best_config_for(profile, n - 1)) {
        (Some(from), to) => Transition {
            from: Some(from.config),
            instances_before: n,
            preempted: 1,
            arrived: 0,
            to: to.map(|c| c.config),
        }
        .expected(profile, recovery)
        .map_or(0.0, |e| e.mean_duration_ms + e.p_lost_work * liveput::lost_work_ms(profile)),
        _ => 0.0,
    };
    let up = match (best_config_for(profile, n - 1), best_config_for(profile, n)) {
        (Some(from), Some(to)) => Transition {
            from: Some(from.config),
            instances_before: n - 1,
            preempted: 0,
            arrived: 1,
            to: Some(to.config),
        }
        .expected(profile, recovery)
        .map_or(0.0, |e| e.mean_duration_ms),
        _ => 0.0,
    };
    ((preempted as f64 * down + arrival_events * up) / hours, mean)
}

/// How an offer's deployment survives its preemptions: what the prediction and the
/// simulation of its candidates charge for them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Deployment {
    /// Its notice's recovery rules (`--notice-seconds`, else by its trace's cloud).
    pub recovery: Recovery,
    /// How fast a periodic checkpoint is snapshotted (`None`: written synchronously),
    /// for the Young/Daly cadence `run` keeps ([`parcae_sim::cadence`]).
    pub snapshot_bytes_per_ms: Option<f64>,
}

impl Deployment {
    /// `profile` at the checkpoint cadence this deployment keeps on `series`.
    fn at_cadence(&self, profile: &ModelProfile, series: &[IntervalStats], interval_ms: u64) -> ModelProfile {
        parcae_sim::cadence::with_young_daly_cadence(
            profile,
            series,
            interval_ms,
            &self.recovery,
            self.snapshot_bytes_per_ms,
        )
    }
}

/// Predicts one candidate, its preemptions as `deployment` survives them.
#[expect(
    clippy::too_many_arguments,
    reason = "the candidate, its offer's market, prices and deployment, and the goal"
)]
pub fn predict(
    profile: &ModelProfile,
    offer: &str,
    market_trace: &MarketTrace,
    market: Market,
    requested: u32,
    prices: Prices,
    deployment: &Deployment,
    goal: Goal,
) -> Prediction {
    let series = match market {
        Market::Spot => market_trace.capped(requested),
        Market::OnDemand => market_trace.constant(requested),
    };
    let system = deployment.at_cadence(profile, &series, market_trace.interval_ms);
    let profile = &system;
    let hours = market_trace.hours();
    let ideal = if series.is_empty() {
        0.0
    } else {
        series
            .iter()
            .map(|s| best_config_for(profile, s.instances).map_or(0.0, |c| c.samples_per_second))
            .sum::<f64>()
            / series.len() as f64
    };
    let (lost_ms_per_hour, mean) = match market {
        Market::Spot => change_cost_ms_per_hour(profile, &series, hours, &deployment.recovery),
        Market::OnDemand => (0.0, f64::from(requested)),
    };
    let overhead = (lost_ms_per_hour / 3_600_000.0).clamp(0.0, 1.0);
    let samples_per_hour = ideal * 3600.0 * (1.0 - overhead);
    let price = match market {
        Market::Spot => prices.spot_usd_per_hour,
        Market::OnDemand => prices.on_demand_usd_per_hour,
    };
    let usd_per_hour = mean * price;
    let per_million = (samples_per_hour > 0.0).then(|| usd_per_hour / samples_per_hour * 1e6);
    let (completion_hours, usd, meets_goal) = against_goal(goal, samples_per_hour, usd_per_hour);
    Prediction {
        offer: offer.to_string(),
        market,
        requested,
        mean_instances: mean,
        overhead,
        samples_per_hour,
        usd_per_hour,
        usd_per_million_samples: per_million,
        completion_hours,
        usd,
        meets_goal,
        parts: vec![mix::Part { offer: offer.to_string(), requested, mean_instances: mean }],
    }
}

/// Predicts a mixed spot request: `requested[t]` of each offer `offers[t]` (see [`mix`]).
/// The throughput is the mean over the aligned markets of the fastest mixed layout on
/// each interval's composition; the changes cost what they cost the mean composition's
/// profile.
fn predict_mix(
    offers: &[&LoadedOffer],
    requested: &[u32],
    compositions: &mut mix::Compositions<'_>,
    interval_ms: u64,
    deployment: &Deployment,
    goal: Goal,
) -> Prediction {
    let markets: Vec<&MarketTrace> = offers.iter().map(|o| &o.market).collect();
    let fleet = mix::requested_fleet(&markets, requested);
    let hours = fleet.series.len() as f64 * interval_ms as f64 / 3_600_000.0;
    let means = fleet.mean_instances();
    let typical: Vec<u32> = means.iter().map(|m| m.round() as u32).collect();
    compositions.prepare(std::slice::from_ref(&typical));
    // The typical composition at the cadence the deployment keeps; every composition
    // pays its share of throughput for the checkpoints, as the simulation scores it.
    let planning = compositions.planning(&typical);
    let system = deployment.at_cadence(planning, &fleet.series, interval_ms);
    let keep = parcae_sim::cadence::throughput_kept(planning, &system);
    let (lost_ms_per_hour, mean) =
        change_cost_ms_per_hour(&system, &fleet.series, hours, &deployment.recovery);
    let ideal = if fleet.counts.is_empty() {
        0.0
    } else {
        keep * fleet.counts.iter().map(|c| compositions.samples_per_second(c)).sum::<f64>()
            / fleet.counts.len() as f64
    };
    let overhead = (lost_ms_per_hour / 3_600_000.0).clamp(0.0, 1.0);
    let samples_per_hour = ideal * 3600.0 * (1.0 - overhead);
    let usd_per_hour: f64 = means.iter().zip(offers).map(|(m, o)| m * o.prices.spot_usd_per_hour).sum();
    let (completion_hours, usd, meets_goal) = against_goal(goal, samples_per_hour, usd_per_hour);
    let parts: Vec<mix::Part> = offers
        .iter()
        .zip(requested)
        .zip(&means)
        .map(|((o, &n), &m)| mix::Part { offer: o.offer.name.clone(), requested: n, mean_instances: m })
        .collect();
    Prediction {
        offer: parts.iter().map(|p| format!("{} x {}", p.requested, p.offer)).collect::<Vec<_>>().join(" + "),
        market: Market::Spot,
        requested: requested.iter().sum(),
        mean_instances: mean,
        overhead,
        samples_per_hour,
        usd_per_hour,
        usd_per_million_samples: (samples_per_hour > 0.0).then(|| usd_per_hour / samples_per_hour * 1e6),
        completion_hours,
        usd,
        meets_goal,
        parts,
    }
}

/// Candidates meeting the goal, cheapest first (then fastest), followed by the
/// others, fastest first.
pub fn rank(mut candidates: Vec<Prediction>) -> Vec<Prediction> {
    candidates.sort_by(|a, b| {
        b.meets_goal.cmp(&a.meets_goal).then_with(|| {
            if a.meets_goal {
                let cost = |p: &Prediction| p.usd.unwrap_or(f64::INFINITY);
                cost(a).total_cmp(&cost(b)).then_with(|| b.samples_per_hour.total_cmp(&a.samples_per_hour))
            } else {
                b.samples_per_hour.total_cmp(&a.samples_per_hour)
            }
        })
    });
    candidates
}

/// A candidate run through the control loop and the simulator.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Simulated {
    /// The offer's name.
    pub offer: String,
    /// Spot or on-demand.
    pub market: Market,
    /// Instances requested.
    pub requested: u32,
    /// Hours of trace simulated.
    pub hours: f64,
    /// Samples trained over the trace.
    pub samples: f64,
    /// Samples per hour.
    pub samples_per_hour: f64,
    /// Cost per hour.
    pub usd_per_hour: f64,
    /// Dollars per million samples.
    pub usd_per_million_samples: Option<f64>,
    /// For a samples goal: hours to train them (`None`: no progress).
    pub completion_hours: Option<f64>,
    /// Whether the completion time is extrapolated beyond the trace.
    pub extrapolated: bool,
    /// For a samples goal: cost until completion; for a throughput goal: cost per hour.
    pub usd: Option<f64>,
    /// Whether the simulated run meets the goal.
    pub meets_goal: bool,
}

/// Completion time and cost of `goal` read off a simulated run whose interval costs
/// `usd_of(record)` dollars.
fn outcome(
    result: &parcae_sim::SimResult,
    interval_ms: u64,
    usd_of: impl Fn(&parcae_sim::IntervalRecord) -> f64,
    goal: Goal,
) -> (Option<f64>, bool, Option<f64>) {
    let t = &result.totals;
    let total_usd: f64 = result.intervals.iter().map(&usd_of).sum();
    let rate_usd = if t.hours > 0.0 { total_usd / t.hours } else { 0.0 };
    match goal {
        Goal::Throughput { .. } => (None, false, Some(rate_usd)),
        Goal::Samples { samples, .. } => {
            let interval_h = interval_ms as f64 / 3_600_000.0;
            let mut cumulative = 0.0;
            let mut paid = 0.0;
            for r in &result.intervals {
                let next = cumulative + r.samples;
                if next >= samples && r.samples > 0.0 {
                    let frac = ((samples - cumulative) / r.samples).clamp(0.0, 1.0);
                    let hours = (r.interval as f64 + frac) * interval_h;
                    return (Some(hours), false, Some(paid + usd_of(r) * frac));
                }
                cumulative = next;
                paid += usd_of(r);
            }
            if t.samples_per_hour > 0.0 {
                let hours = samples / t.samples_per_hour;
                (Some(hours), true, Some(hours * rate_usd))
            } else {
                (None, false, None)
            }
        }
    }
}

/// What an interval of a single-type fleet costs at `price` per instance-hour.
fn per_instance(price: f64, interval_ms: u64) -> impl Fn(&parcae_sim::IntervalRecord) -> f64 {
    let hours = interval_ms as f64 / 3_600_000.0;
    move |r| f64::from(r.instances) * hours * price
}

/// Runs `series` through the policy, telling it each interval's profile at the
/// deployment's cadence (`system`), and scores it as `bench` does; `progress`
/// advances one unit per interval.
#[expect(clippy::too_many_arguments, reason = "one call site; the settings of one simulated candidate")]
fn simulate_candidate(
    system: &Cadenced,
    series: &[IntervalStats],
    interval_ms: u64,
    prices: Prices,
    policy: &mut GuardedPolicy,
    horizon: u32,
    recovery: Recovery,
    progress: &indicatif::ProgressBar,
) -> anyhow::Result<parcae_sim::SimResult> {
    let fleet_max = series.iter().map(|s| s.instances).max().unwrap_or(0);
    let settings = ControlSettings { interval_ms, horizon, fleet_max, recovery };
    let decisions = replay_profiles(series, |k| system.at(k), policy, &settings, None, |_| progress.inc(1));
    let configs: Vec<Option<ParallelConfig>> = decisions.iter().map(|d| d.config).collect();
    Ok(parcae_sim::simulate_cadenced(
        system,
        series,
        interval_ms,
        &configs,
        prices,
        MigrationMode::Live,
        recovery,
    )?)
}

/// The simulated outcome of candidate `c`, whose intervals cost `usd_of(record)`.
fn simulated_row(
    c: &Prediction,
    result: &parcae_sim::SimResult,
    usd_of: impl Fn(&parcae_sim::IntervalRecord) -> f64,
    interval_ms: u64,
    goal: Goal,
) -> Simulated {
    let t = &result.totals;
    let total_usd: f64 = result.intervals.iter().map(&usd_of).sum();
    let usd_per_hour = if t.hours > 0.0 { total_usd / t.hours } else { 0.0 };
    let (completion_hours, extrapolated, usd) = outcome(result, interval_ms, usd_of, goal);
    let meets_goal = match goal {
        Goal::Samples { deadline_hours, .. } => completion_hours.is_some_and(|h| h <= deadline_hours),
        Goal::Throughput { samples_per_hour } => t.samples_per_hour >= samples_per_hour,
    };
    Simulated {
        offer: c.offer.clone(),
        market: c.market,
        requested: c.requested,
        hours: t.hours,
        samples: t.samples,
        samples_per_hour: t.samples_per_hour,
        usd_per_hour,
        usd_per_million_samples: (t.samples > 0.0).then(|| total_usd / t.samples * 1e6),
        completion_hours,
        extrapolated,
        usd,
        meets_goal,
    }
}

/// Runs a mixed request through the policy and scores it, each interval with its
/// composition's profile (see [`mix`]) at the Young/Daly checkpoint cadence of `rule`,
/// as `bench` scores a mixed fleet; `progress` advances one unit per interval.
#[expect(clippy::too_many_arguments, reason = "one call site; the settings of one simulated mix")]
fn simulate_mix(
    offers: &[&LoadedOffer],
    requested: &[u32],
    interval_ms: u64,
    policy: &mut GuardedPolicy,
    horizon: u32,
    deployment: &Deployment,
    rule: CadenceRule,
    progress: &indicatif::ProgressBar,
) -> anyhow::Result<(mix::MixedFleet, parcae_sim::SimResult)> {
    let Deployment { recovery, snapshot_bytes_per_ms } = *deployment;
    let markets: Vec<&MarketTrace> = offers.iter().map(|o| &o.market).collect();
    let fleet = mix::requested_fleet(&markets, requested);
    let mut compositions = mix::Compositions::new(offers.iter().map(|o| &o.profile).collect());
    compositions.prepare(&fleet.counts);
    let views =
        mix::CadencedViews::new(&compositions, &fleet, rule, interval_ms, &recovery, snapshot_bytes_per_ms);
    let planning = views.planning();
    let fleet_max = fleet.series.iter().map(|s| s.instances).max().unwrap_or(0);
    let settings = ControlSettings { interval_ms, horizon, fleet_max, recovery };
    let names: Vec<String> = offers.iter().map(|o| o.offer.name.clone()).collect();
    let types = FleetTypes { names: &names, counts: &fleet.counts };
    let decisions =
        replay_profiles(&fleet.series, |k| planning[k], policy, &settings, Some(types), |_| progress.inc(1));
    let configs: Vec<Option<ParallelConfig>> = decisions.iter().map(|d| d.config).collect();
    // Each type is priced on its own ([`mix::MixedFleet::usd_of_interval`]); the simulator's
    // one-price totals are not read.
    let result = parcae_sim::mixed::simulate(
        views.union(),
        &views.scoring(),
        &fleet.series,
        interval_ms,
        &configs,
        MigrationMode::Live,
        recovery,
    )?;
    Ok((fleet, result))
}

/// Everything `provision` found, for `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The goal asked for.
    pub goal: Goal,
    /// The model planned for.
    pub model: String,
    /// The policy that ran the simulated check.
    pub policy: String,
    /// Which losses the simulated checkpoint cadence followed: `seen-so-far` or
    /// `whole-trace` (a mix of types: the union fleet's).
    pub cadence: CadenceArg,
    /// Every candidate, best first.
    pub candidates: Vec<Prediction>,
    /// The simulated outcomes of the best candidates.
    pub simulated: Vec<Simulated>,
}

/// An instance type with its profile, prices and spot market, ready to score.
pub(crate) struct LoadedOffer {
    /// What was asked for.
    pub(crate) offer: Offer,
    /// Its profile (its own, or the default one).
    pub(crate) profile: ModelProfile,
    /// Its prices (the offer's, or its profile's).
    pub(crate) prices: Prices,
    /// Its availability per interval.
    pub(crate) market: MarketTrace,
}

impl LoadedOffer {
    /// Parses `NAME=TRACE[,KEY=VALUE]...` ([`parse_offer`]) given as `flag`, and loads the
    /// profile (the offer's own, else `profile`'s, else the embedded `fallback`: profile
    /// and model), the prices and the trace.
    pub(crate) fn load(
        text: &str,
        flag: &str,
        profile: &ProfileArgs,
        fallback: Option<((&str, &str), &str)>,
        input: &TraceInput,
        interval_ms: u64,
    ) -> anyhow::Result<Self> {
        let offer = parse_offer(text).map_err(|e| anyhow::anyhow!("{flag} {e}"))?;
        let profile_args = ProfileArgs {
            profile: offer.profile.clone().or_else(|| profile.profile.clone()),
            model: profile.model.clone(),
            cost_constants: profile.cost_constants.clone(),
        };
        let loaded = match fallback {
            Some((embedded, model)) => profile_args.load_with_prices_or(embedded, model),
            None => profile_args.load_with_prices(),
        };
        let (profile, mut prices) =
            loaded.with_context(|| format!("{flag} {}: loading its profile", offer.name))?;
        if let Some(p) = offer.spot_usd_per_hour {
            prices.spot_usd_per_hour = p;
        }
        if let Some(p) = offer.on_demand_usd_per_hour {
            prices.on_demand_usd_per_hour = p;
        }
        let trace = input.load(&offer.trace).with_context(|| format!("{flag} {}", offer.name))?;
        let series = trace.series(interval_ms)?;
        anyhow::ensure!(
            !series.is_empty(),
            "{flag} {}: {}: the trace is empty",
            offer.name,
            offer.trace.display()
        );
        let market = MarketTrace { series: series.intervals, interval_ms };
        Ok(LoadedOffer { offer, profile, prices, market })
    }
}

fn goal(args: &ProvisionArgs) -> anyhow::Result<Goal> {
    match (args.samples, args.deadline_hours, args.min_samples_per_hour) {
        (Some(samples), Some(deadline_hours), None) => {
            anyhow::ensure!(samples > 0.0 && samples.is_finite(), "--samples must be a number > 0");
            anyhow::ensure!(
                deadline_hours > 0.0 && deadline_hours.is_finite(),
                "--deadline-hours must be a number > 0"
            );
            Ok(Goal::Samples { samples, deadline_hours })
        }
        (None, None, Some(floor)) => {
            anyhow::ensure!(floor > 0.0 && floor.is_finite(), "--min-samples-per-hour must be a number > 0");
            Ok(Goal::Throughput { samples_per_hour: floor })
        }
        _ => bail!("give a goal: --samples N --deadline-hours H, or --min-samples-per-hour X"),
    }
}

fn fmt_opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

fn right_align(table: &mut Table, from: usize, to: usize) {
    for column in from..to {
        if let Some(c) = table.column_mut(column) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
}

/// `parcae-host provision`.
pub fn run(args: &ProvisionArgs) -> anyhow::Result<()> {
    let goal = goal(args)?;
    let interval_ms = args.input.interval_ms()?;
    anyhow::ensure!(args.horizon >= 1, "--horizon must be at least 1");
    let mut loaded = Vec::new();
    for text in &args.offers {
        let offer = LoadedOffer::load(text, "--offer", &args.profile, None, &args.input, interval_ms)?;
        anyhow::ensure!(
            loaded.iter().all(|l: &LoadedOffer| l.offer.name != offer.offer.name),
            "--offer {}: the name is given twice",
            offer.offer.name
        );
        loaded.push(offer);
    }
    let model = loaded.first().map(|l| l.profile.model.clone()).unwrap_or_default();
    let constants = args.profile.constants()?;
    // Each offer's notice (`--notice-seconds`, else by its trace's cloud) and checkpoint
    // cadence: what its preemptions cost the prediction, as the simulation below.
    let deployments: Vec<Deployment> = loaded
        .iter()
        .map(|l| {
            let (recovery, _) = args.notice.recovery_for(&l.offer.trace, &constants)?;
            Ok(Deployment { recovery, snapshot_bytes_per_ms: constants.checkpoint_snapshot_bytes_per_ms() })
        })
        .collect::<anyhow::Result<_>>()?;

    let mut candidates = Vec::new();
    for (l, deployment) in loaded.iter().zip(&deployments) {
        let peak = l.market.peak();
        let most = args.max_instances.unwrap_or(peak).max(1);
        for n in 1..=most.min(peak) {
            if best_config_for(&l.profile, n).is_some() {
                candidates.push(predict(
                    &l.profile,
                    &l.offer.name,
                    &l.market,
                    Market::Spot,
                    n,
                    l.prices,
                    deployment,
                    goal,
                ));
            }
        }
        if !args.spot_only {
            for n in 1..=most {
                if best_config_for(&l.profile, n).is_some() {
                    candidates.push(predict(
                        &l.profile,
                        &l.offer.name,
                        &l.market,
                        Market::OnDemand,
                        n,
                        l.prices,
                        deployment,
                        goal,
                    ));
                }
            }
        }
    }
    // Mixed spot fleets over every pair of offers of one model and batch.
    for (i, (a, deployment)) in loaded.iter().zip(&deployments).enumerate() {
        for b in &loaded[i + 1..] {
            let same_batch = (a.profile.global_batch_size, a.profile.micro_batch_size)
                == (b.profile.global_batch_size, b.profile.micro_batch_size);
            if a.profile.model != b.profile.model || !same_batch {
                continue;
            }
            let mut compositions = mix::Compositions::new(vec![&a.profile, &b.profile]);
            let most = |l: &LoadedOffer| args.max_instances.unwrap_or(l.market.peak()).min(l.market.peak());
            // Fewer instances of a type than its shallowest pipeline never hold a replica:
            // such a "mix" pays for idle instances.
            let least = |l: &LoadedOffer| {
                l.profile.configs.iter().map(|c| c.config.pipeline_stages).min().unwrap_or(1).max(1)
            };
            for n_a in least(a)..=most(a) {
                for n_b in least(b)..=most(b) {
                    let p =
                        predict_mix(&[a, b], &[n_a, n_b], &mut compositions, interval_ms, deployment, goal);
                    if p.samples_per_hour > 0.0 {
                        candidates.push(p);
                    }
                }
            }
        }
    }
    anyhow::ensure!(
        !candidates.is_empty(),
        "no candidate: no profiled layout fits any fleet the offers allow"
    );
    let candidates = rank(candidates);

    println!("{}", describe_goal(goal, &model));
    let mut table = Table::new();
    table.load_preset(presets::ASCII_MARKDOWN);
    table.set_header(vec![
        "rank",
        "offer",
        "market",
        "request",
        "mean alive",
        "overhead",
        "samples/h",
        "$/h",
        "$/M samples",
        "hours",
        "$",
        "meets goal",
    ]);
    for (i, c) in candidates.iter().take(10).enumerate() {
        table.add_row(vec![
            (i + 1).to_string(),
            c.offer.clone(),
            c.market.as_str().to_string(),
            c.requested.to_string(),
            format!("{:.1}", c.mean_instances),
            format!("{:.1}%", 100.0 * c.overhead),
            format!("{:.0}", c.samples_per_hour),
            format!("{:.2}", c.usd_per_hour),
            fmt_opt(c.usd_per_million_samples, 2),
            fmt_opt(c.completion_hours, 2),
            fmt_opt(c.usd, 2),
            if c.meets_goal { "yes" } else { "no" }.to_string(),
        ]);
    }
    right_align(&mut table, 3, 11);
    println!(
        "Predicted from the traces' statistics and the cost model ({} candidates, best 10):\n\n{table}\n",
        candidates.len()
    );

    let runtime = args.sandbox.runtime()?;
    let spec = args.policies.policy_spec();
    let policies = args.policies.load(&runtime).with_context(|| format!("loading policy {spec}"))?;
    let mut simulated = Vec::new();
    let chosen: Vec<&Prediction> = candidates.iter().filter(|c| c.meets_goal).take(args.simulate).collect();
    let mut chosen: Vec<&Prediction> =
        if chosen.is_empty() { candidates.iter().take(args.simulate.min(1)).collect() } else { chosen };
    // The best mix is shown against the best single-type fleet: both are simulated.
    if args.simulate > 0 {
        for best in [candidates.iter().find(|c| c.is_mix()), candidates.iter().find(|c| !c.is_mix())]
            .into_iter()
            .flatten()
        {
            if !chosen.iter().any(|c| std::ptr::eq(*c, best)) {
                chosen.push(best);
            }
        }
    }
    // One unit per simulated interval: a policy that plans slowly makes this the long part.
    let intervals: usize = chosen
        .iter()
        .filter_map(|c| {
            c.parts
                .iter()
                .filter_map(|p| loaded.iter().find(|l| l.offer.name == p.offer))
                .map(|l| l.market.series.len())
                .min()
        })
        .sum();
    let progress = crate::progress::bar(intervals as u64, "simulating");
    for c in chosen {
        if c.is_mix() {
            progress.set_message(c.offer.clone());
            let parts: Vec<usize> =
                c.parts.iter().filter_map(|p| loaded.iter().position(|l| l.offer.name == p.offer)).collect();
            let offers: Vec<&LoadedOffer> = parts.iter().map(|&i| &loaded[i]).collect();
            let requested: Vec<u32> = c.parts.iter().map(|p| p.requested).collect();
            let mut policy = policies.guarded();
            let (fleet, result) = simulate_mix(
                &offers,
                &requested,
                interval_ms,
                &mut policy,
                args.horizon,
                &deployments[parts[0]],
                args.cadence.into(),
                &progress,
            )
            .with_context(|| format!("simulating {}", c.offer))?;
            let prices: Vec<f64> = offers.iter().map(|o| o.prices.spot_usd_per_hour).collect();
            let usd_of =
                |r: &parcae_sim::IntervalRecord| fleet.usd_of_interval(r.interval, interval_ms, &prices);
            simulated.push(simulated_row(c, &result, usd_of, interval_ms, goal));
            continue;
        }
        progress.set_message(format!("{} x {} ({})", c.requested, c.offer, c.market.as_str()));
        let Some(i) = loaded.iter().position(|l| l.offer.name == c.offer) else { continue };
        let (l, deployment) = (&loaded[i], &deployments[i]);
        let series = match c.market {
            Market::Spot => l.market.capped(c.requested),
            Market::OnDemand => l.market.constant(c.requested),
        };
        let price = match c.market {
            Market::Spot => l.prices.spot_usd_per_hour,
            Market::OnDemand => l.prices.on_demand_usd_per_hour,
        };
        let mut policy = policies.guarded();
        // Checkpoints at the cadence `run` keeps and `bench` scores: Young/Daly on the
        // losses the notice cannot save, those seen so far unless told otherwise.
        let system = Cadenced::new(
            args.cadence.into(),
            &l.profile,
            &series,
            interval_ms,
            &deployment.recovery,
            deployment.snapshot_bytes_per_ms,
        );
        let result = simulate_candidate(
            &system,
            &series,
            interval_ms,
            l.prices,
            &mut policy,
            args.horizon,
            deployment.recovery,
            &progress,
        )
        .with_context(|| format!("simulating {} x {} {}", c.requested, c.offer, c.market.as_str()))?;
        simulated.push(simulated_row(c, &result, per_instance(price, interval_ms), interval_ms, goal));
    }
    progress.finish_and_clear();

    let mut table = Table::new();
    table.load_preset(presets::ASCII_MARKDOWN);
    table.set_header(vec!["candidate", "", "samples/h", "$/h", "$/M samples", "hours", "$", "meets goal"]);
    for s in &simulated {
        let Some(p) = candidates
            .iter()
            .find(|c| c.offer == s.offer && c.market == s.market && c.requested == s.requested)
        else {
            continue;
        };
        let name = p.name();
        table.add_row(vec![
            name.clone(),
            "predicted".to_string(),
            format!("{:.0}", p.samples_per_hour),
            format!("{:.2}", p.usd_per_hour),
            fmt_opt(p.usd_per_million_samples, 2),
            fmt_opt(p.completion_hours, 2),
            fmt_opt(p.usd, 2),
            if p.meets_goal { "yes" } else { "no" }.to_string(),
        ]);
        table.add_row(vec![
            String::new(),
            format!("simulated ({:.1} h)", s.hours),
            format!("{:.0}", s.samples_per_hour),
            format!("{:.2}", s.usd_per_hour),
            fmt_opt(s.usd_per_million_samples, 2),
            format!("{}{}", fmt_opt(s.completion_hours, 2), if s.extrapolated { "*" } else { "" }),
            fmt_opt(s.usd, 2),
            if s.meets_goal { "yes" } else { "no" }.to_string(),
        ]);
    }
    right_align(&mut table, 2, 7);
    println!(
        "Predicted vs simulated ({} through the control loop, liveput simulator, checkpoints at the cadence of \
         the losses {}; * = extrapolated at the run's average rate beyond the trace):\n\n{table}\n",
        spec,
        match args.cadence {
            CadenceArg::SeenSoFar => "seen so far (a mix of types: the union fleet's)",
            CadenceArg::WholeTrace => "of the whole trace",
        }
    );
    match (candidates.first(), simulated.first()) {
        (Some(best), Some(sim)) if best.meets_goal => println!(
            "recommendation: request {}: predicted {}, simulated {}",
            best.name(),
            summary(goal, best.completion_hours, best.usd, best.samples_per_hour),
            summary(goal, sim.completion_hours, sim.usd, sim.samples_per_hour),
        ),
        (Some(best), _) => println!(
            "no candidate meets the goal; the fastest is {} at {:.0} samples/h",
            best.name(),
            best.samples_per_hour
        ),
        _ => {}
    }
    if let Some(line) = mix_against_single(&candidates, &simulated, goal) {
        println!("{line}");
    }
    if let Some(path) = &args.json {
        let report =
            Report { goal, model, policy: spec.to_string(), cadence: args.cadence, candidates, simulated };
        let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        serde_json::to_writer_pretty(std::io::BufWriter::new(file), &report)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("report written to {}", path.display());
    }
    Ok(())
}

/// The best mix against the best single-type fleet, simulated, when both were.
fn mix_against_single(candidates: &[Prediction], simulated: &[Simulated], goal: Goal) -> Option<String> {
    let sim_of = |p: &Prediction| {
        simulated.iter().find(|s| s.offer == p.offer && s.market == p.market && s.requested == p.requested)
    };
    let mix = candidates.iter().find(|c| c.is_mix())?;
    let single = candidates.iter().find(|c| !c.is_mix())?;
    let (sm, ss) = (sim_of(mix)?, sim_of(single)?);
    let verdict = match (sm.usd, ss.usd, sm.meets_goal, ss.meets_goal) {
        (Some(m), Some(s), true, true) if s > 0.0 => {
            format!("the mix costs {:+.1}% against the single type", (m / s - 1.0) * 100.0)
        }
        (_, _, true, false) => "only the mix meets the goal".to_string(),
        (_, _, false, true) => "only the single type meets the goal".to_string(),
        _ => "neither meets the goal in simulation".to_string(),
    };
    Some(format!(
        "best mix {}: simulated {}; best single type {}: simulated {}; {verdict}",
        mix.name(),
        summary(goal, sm.completion_hours, sm.usd, sm.samples_per_hour),
        single.name(),
        summary(goal, ss.completion_hours, ss.usd, ss.samples_per_hour),
    ))
}

fn describe_goal(goal: Goal, model: &str) -> String {
    match goal {
        Goal::Samples { samples, deadline_hours } => {
            format!(
                "goal: {samples:.0} samples of {model} within {deadline_hours} h, at the least expected cost"
            )
        }
        Goal::Throughput { samples_per_hour } => {
            format!("goal: at least {samples_per_hour:.0} samples/h of {model}, at the least cost per hour")
        }
    }
}

fn summary(goal: Goal, hours: Option<f64>, usd: Option<f64>, samples_per_hour: f64) -> String {
    match goal {
        Goal::Samples { .. } => format!("{} h for ${}", fmt_opt(hours, 2), fmt_opt(usd, 2)),
        Goal::Throughput { .. } => format!("{samples_per_hour:.0} samples/h for ${}/h", fmt_opt(usd, 2)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parcae_policy_core::{ConfigProfile, StagePartition};

    /// No notice and no checkpoint writes: the profile's cadence stands.
    const UNANNOUNCED: Deployment =
        Deployment { recovery: Recovery::UNANNOUNCED, snapshot_bytes_per_ms: None };

    #[test]
    fn offers_parse_and_errors_name_the_problem() {
        let o = parse_offer("p3=traces/a.csv,spot=0.9,on-demand=3.06,profile=p.json").unwrap();
        assert_eq!(o.name, "p3");
        assert_eq!(o.trace, PathBuf::from("traces/a.csv"));
        assert_eq!(o.spot_usd_per_hour, Some(0.9));
        assert_eq!(o.on_demand_usd_per_hour, Some(3.06));
        assert_eq!(o.profile, Some(PathBuf::from("p.json")));
        assert_eq!(parse_offer("g4dn=t.csv").unwrap().spot_usd_per_hour, None);
        assert!(parse_offer("t.csv").unwrap_err().contains("expected NAME=TRACE"));
        assert!(parse_offer("=t.csv").unwrap_err().contains("name is empty"));
        assert!(parse_offer("a=t.csv,spto=1").unwrap_err().contains("unknown key `spto`"));
        assert!(parse_offer("a=t.csv,spot=-1").unwrap_err().contains("not a price"));
        assert!(parse_offer("a=").unwrap_err().contains("no trace"));
    }

    /// Layouts (1, 1) and (2, 1) at 10 and 20 samples/s, all costs zero.
    fn toy() -> ModelProfile {
        let entry = |d, sps| ConfigProfile {
            config: ParallelConfig::new(d, 1),
            samples_per_second: sps,
            iteration_ms: 1000.0,
            comm_rebuild_add_ms: 0.0,
            comm_rebuild_remove_ms: 0.0,
            model_build_ms: 0.0,
        };
        ModelProfile {
            configs: vec![entry(1, 10.0), entry(2, 20.0)],
            partitions: vec![StagePartition {
                pipeline_stages: 1,
                layers_per_stage: vec![1],
                state_bytes_per_stage: vec![0],
            }],
            ..ModelProfile::empty("toy", 10, 1)
        }
    }

    /// One instance, taken every ten minutes and back a minute later: unannounced, each
    /// loss rolls back half the checkpoint interval; with a notice in which the (empty)
    /// state is written, none does, as the simulation scores it.
    #[test]
    fn a_notice_that_saves_the_state_costs_the_prediction_no_rollback() {
        let profile = ModelProfile { checkpoint_interval_ms: 600_000.0, ..toy() };
        let counts: Vec<u32> = (0..60).map(|k| u32::from(k % 10 != 9)).collect();
        let series = IntervalStats::chain_from(0, &counts);
        let market = MarketTrace { series, interval_ms: 60_000 };
        let prices = Prices { spot_usd_per_hour: 1.0, on_demand_usd_per_hour: 4.0 };
        let goal = Goal::Throughput { samples_per_hour: 1.0 };
        let predict_under = |recovery: Recovery| {
            let deployment = Deployment { recovery, snapshot_bytes_per_ms: None };
            predict(&profile, "t", &market, Market::Spot, 1, prices, &deployment, goal)
        };
        let unannounced = predict_under(Recovery::UNANNOUNCED);
        // Six losses of 5 minutes each in the hour.
        assert!((unannounced.overhead - 0.5).abs() < 1e-9, "{}", unannounced.overhead);
        assert_eq!(predict_under(Recovery::with_notice(30_000.0, 1.0)).overhead, 0.0);
    }

    #[test]
    fn prediction_caps_the_fleet_and_prices_it() {
        // One hour: 2 instances for 30 min, 1 for 30 min.
        let counts: Vec<u32> = [2u32; 30].into_iter().chain([1u32; 30]).collect();
        let market = MarketTrace { series: IntervalStats::chain_from(0, &counts), interval_ms: 60_000 };
        let prices = Prices { spot_usd_per_hour: 1.0, on_demand_usd_per_hour: 4.0 };
        let goal = Goal::Samples { samples: 54_000.0, deadline_hours: 1.0 };
        let spot2 = predict(&toy(), "t", &market, Market::Spot, 2, prices, &UNANNOUNCED, goal);
        assert_eq!(spot2.mean_instances, 1.5);
        // (20 + 10) / 2 samples/s, no reconfiguration cost in this profile.
        assert_eq!(spot2.samples_per_hour, 15.0 * 3600.0);
        assert_eq!(spot2.usd_per_hour, 1.5);
        assert_eq!(spot2.completion_hours, Some(1.0));
        assert_eq!(spot2.usd, Some(1.5));
        assert!(spot2.meets_goal);
        let spot1 = predict(&toy(), "t", &market, Market::Spot, 1, prices, &UNANNOUNCED, goal);
        assert_eq!(spot1.samples_per_hour, 36_000.0);
        assert!(!spot1.meets_goal);
        let od2 = predict(&toy(), "t", &market, Market::OnDemand, 2, prices, &UNANNOUNCED, goal);
        assert_eq!(od2.samples_per_hour, 72_000.0);
        assert_eq!(od2.completion_hours, Some(0.75));
        assert_eq!(od2.usd, Some(0.75 * 8.0));
        let ranked = rank(vec![spot1.clone(), od2.clone(), spot2.clone()]);
        assert_eq!(ranked[0], spot2, "the cheapest meeting the goal comes first");
        assert_eq!(ranked[1], od2);
        assert_eq!(ranked[2], spot1);
        // A throughput floor ranks by cost per hour.
        let floor = Goal::Throughput { samples_per_hour: 40_000.0 };
        let od1 = predict(&toy(), "t", &market, Market::OnDemand, 1, prices, &UNANNOUNCED, floor);
        assert!(!od1.meets_goal);
        assert_eq!(
            predict(&toy(), "t", &market, Market::Spot, 2, prices, &UNANNOUNCED, floor).usd,
            Some(1.5)
        );
    }

    /// `(D, samples/s)` at depth 1, iteration times consistent with a batch of 10.
    fn consistent(layouts: &[(u32, f64)]) -> ModelProfile {
        let mut p = toy();
        p.configs = layouts
            .iter()
            .map(|&(d, sps)| ConfigProfile {
                config: ParallelConfig::new(d, 1),
                samples_per_second: sps,
                iteration_ms: 10.0 / sps * 1000.0,
                comm_rebuild_add_ms: 0.0,
                comm_rebuild_remove_ms: 0.0,
                model_build_ms: 0.0,
            })
            .collect();
        p
    }

    #[test]
    fn a_mixed_request_is_predicted_from_both_markets() {
        let offer = |name: &str, profile: ModelProfile, spot: f64, counts: &[u32]| LoadedOffer {
            offer: parse_offer(&format!("{name}=x.csv")).unwrap(),
            profile,
            prices: Prices { spot_usd_per_hour: spot, on_demand_usd_per_hour: 4.0 * spot },
            market: MarketTrace { series: IntervalStats::chain_from(0, counts), interval_ms: 60_000 },
        };
        let a = offer("a", consistent(&[(1, 10.0), (2, 19.0)]), 1.0, &[1; 60]);
        let b = offer("b", consistent(&[(1, 5.0), (2, 9.5)]), 0.25, &[2; 60]);
        let mut compositions = mix::Compositions::new(vec![&a.profile, &b.profile]);
        let goal = Goal::Throughput { samples_per_hour: 1.0 };
        let p = predict_mix(&[&a, &b], &[1, 1], &mut compositions, 60_000, &UNANNOUNCED, goal);
        // A steady fleet of one of each: the best mixed layout all along, nothing lost.
        let (config, step) =
            parcae_policy_core::mixed::best_mixed(&[&a.profile, &b.profile], &[1, 1]).unwrap();
        assert_eq!(config.replicas, [1, 1]);
        assert!((p.samples_per_hour - step.samples_per_second * 3600.0).abs() < 1e-6, "{p:?}");
        assert!(p.samples_per_hour > 10.0 * 3600.0, "the mix beats the fast type alone: {p:?}");
        assert_eq!(p.usd_per_hour, 1.25);
        assert_eq!((p.requested, p.mean_instances), (2, 2.0));
        assert!(p.is_mix());
        assert_eq!(p.name(), "1 x a + 1 x b (spot)");
        assert!(p.meets_goal);
    }

    #[test]
    fn simulated_outcome_reads_completion_off_the_run() {
        let profile = toy();
        let series = IntervalStats::chain_from(0, &[2u32; 60]);
        let configs = vec![Some(ParallelConfig::new(2, 1)); 60];
        let prices = Prices { spot_usd_per_hour: 1.0, on_demand_usd_per_hour: 4.0 };
        let result = parcae_sim::simulate(&profile, &series, 60_000, &configs, prices).unwrap();
        // 20/s: 1200 samples per minute; 6000 samples after 5 minutes.
        let goal = Goal::Samples { samples: 6000.0, deadline_hours: 1.0 };
        let (hours, extrapolated, usd) = outcome(&result, 60_000, per_instance(1.0, 60_000), goal);
        assert!((hours.unwrap() - 5.0 / 60.0).abs() < 1e-12);
        assert!(!extrapolated);
        assert!((usd.unwrap() - 2.0 * 5.0 / 60.0).abs() < 1e-12);
        // Beyond the trace: extrapolated at the run's rate.
        let goal = Goal::Samples { samples: 72_000.0 * 2.0, deadline_hours: 3.0 };
        let (hours, extrapolated, usd) = outcome(&result, 60_000, per_instance(1.0, 60_000), goal);
        assert_eq!(hours, Some(2.0));
        assert!(extrapolated);
        // Two instances at $1/h for two hours (summed interval by interval).
        assert!((usd.unwrap() - 4.0).abs() < 1e-9, "{usd:?}");
    }

    #[test]
    fn end_to_end_on_the_demo_trace() {
        let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/traces/demo-8node.csv");
        let json = std::env::temp_dir().join(format!("parcae-provision-{}.json", std::process::id()));
        let make =
            |offers: Vec<String>, json: Option<PathBuf>, spot_only: bool, simulate: usize| ProvisionArgs {
                profile: ProfileArgs { profile: None, model: None, cost_constants: None },
                offers,
                input: TraceInput { format: None, interval_seconds: 60 },
                samples: Some(20_000.0),
                deadline_hours: Some(2.0),
                min_samples_per_hour: None,
                max_instances: None,
                spot_only,
                policies: PolicyArgs { policy: None, predictor: None, optimizer: None },
                horizon: 8,
                simulate,
                json,
                sandbox: SandboxArgs {
                    fuel: 10_000_000_000,
                    deadline_ms: 5_000,
                    memory_mib: 256,
                    compile_cache: None,
                },
                notice: NoticeArgs { notice_seconds: None },
                cadence: CadenceArg::SeenSoFar,
            };
        let args = make(vec![format!("small={demo},spot=0.5,on-demand=2")], Some(json.clone()), false, 2);
        run(&args).unwrap();
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let _ = std::fs::remove_file(&json);
        let candidates = report["candidates"].as_array().unwrap();
        // Spot 1..=8 and on-demand 1..=8 where a layout fits (every count here).
        assert_eq!(candidates.len(), 16);
        let best = &candidates[0];
        assert_eq!(best["meets_goal"], true);
        let simulated = report["simulated"].as_array().unwrap();
        assert_eq!(simulated.len(), 2);
        assert_eq!(simulated[0]["offer"], "small");
        assert_eq!(simulated[0]["requested"], best["requested"]);
        // Spot at $0.5/h beats on-demand at $2/h for the same fleet.
        let cost = |c: &serde_json::Value| c["usd"].as_f64().unwrap();
        let od = candidates.iter().find(|c| c["market"] == "on-demand" && c["meets_goal"] == true).unwrap();
        assert!(cost(best) < cost(od));
        // The prediction is in the simulated run's neighbourhood.
        let (p, s) =
            (best["samples_per_hour"].as_f64().unwrap(), simulated[0]["samples_per_hour"].as_f64().unwrap());
        assert!(s > 0.5 * p && s < 1.5 * p, "predicted {p}, simulated {s}");

        // Two types: every mix of the two is predicted, and the best mix and the best single
        // type are both simulated.
        let offers =
            vec![format!("small={demo},spot=0.5,on-demand=2"), format!("other={demo},spot=0.4,on-demand=2")];
        let two = make(offers, Some(json.clone()), true, 1);
        run(&two).unwrap();
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let _ = std::fs::remove_file(&json);
        let candidates = report["candidates"].as_array().unwrap();
        let mixes = candidates.iter().filter(|c| c["parts"].as_array().unwrap().len() == 2).count();
        // The example profile's shallowest pipeline is one stage: 1..=8 of each type.
        assert_eq!(mixes, 64);
        let simulated = report["simulated"].as_array().unwrap();
        assert!(simulated.iter().any(|s| s["offer"].as_str().unwrap().contains(" + ")), "{simulated:?}");
        assert!(simulated.iter().any(|s| !s["offer"].as_str().unwrap().contains(" + ")), "{simulated:?}");
        for s in simulated {
            assert!(s["samples_per_hour"].as_f64().unwrap() > 0.0, "{s}");
        }

        // Unannounced, the simulated check follows the losses seen so far unless told the
        // whole trace's (as `bench`): the two cadences score the same decisions apart.
        let simulated_at = |cadence: CadenceArg| {
            let args = ProvisionArgs {
                notice: NoticeArgs { notice_seconds: Some(0.0) },
                cadence,
                ..make(vec![format!("small={demo},spot=0.5,on-demand=2")], Some(json.clone()), true, 1)
            };
            run(&args).unwrap();
            let report: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
            let _ = std::fs::remove_file(&json);
            (
                report["cadence"].as_str().unwrap().to_string(),
                report["simulated"][0]["samples_per_hour"].as_f64().unwrap(),
            )
        };
        let (seen, seen_rate) = simulated_at(CadenceArg::SeenSoFar);
        let (whole, whole_rate) = simulated_at(CadenceArg::WholeTrace);
        assert_eq!((seen.as_str(), whole.as_str()), ("seen-so-far", "whole-trace"));
        assert!(
            seen_rate > 0.0 && whole_rate > 0.0 && seen_rate != whole_rate,
            "{seen_rate} vs {whole_rate}"
        );

        // Errors name the offer.
        let bad = make(vec!["small=/nonexistent.csv".into()], None, false, 2);
        let e = format!("{:#}", run(&bad).unwrap_err());
        assert!(e.contains("--offer small") && e.contains("nonexistent.csv"), "{e}");
    }
}
