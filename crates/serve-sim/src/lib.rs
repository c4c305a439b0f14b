//! The serving simulator: replays a spot availability series and a request
//! arrival process through a queueing model of LLM serving, on the
//! configuration a serving policy chooses each interval, and measures
//! end-to-end latency, SLO attainment, instance-hours and cost.
//!
//! Why: scoring a serving policy (SpotServe's optimizer, a cost-aware one, a
//! guest component) against restart and reroute baselines on a real
//! availability trace takes seconds here instead of hours of GPUs. Pure
//! library, no I/O: the host parses traces and rate files.
//!
//! # The model (all times ms)
//!
//! **Requests.** Every request has `workload.input_tokens` prompt and
//! `workload.output_tokens` output tokens. Its end-to-end latency is
//! `done - arrival`, queueing included (like SpotServe's artifact). One FIFO
//! queue feeds all replicas; requests that were interrupted go back to its
//! head, in arrival order. Requests are never lost: those still unfinished at
//! the end of the trace are *dropped*; while nothing can serve (no instances,
//! no configuration) they wait.
//!
//! **Service.** A configuration `(dp, tp, pp, batch, M1, M2)` runs `dp`
//! replicas. [`parcae_serving_core::estimate()`] gives its `prefill_ms` and
//! `decode_step_ms`. Batching is static, like FasterTransformer: an idle
//! replica takes up to `batch` requests from the head of the queue (it does not
//! wait to fill a batch) and serves them together in
//! `(prefill_ms if any of them still needs its prompt processed, else 0) +
//! decode_step_ms x (most tokens any of them still has to generate, less the
//! one the prefill's iteration yields for every member)`; a
//! partial batch takes the full batch's times (conservative). A request's
//! first token comes at the end of its batch's prefill, its last after its own
//! remaining steps. Where replicas share a machine's cores ([`SharedMachine`], the
//! profile's `contention`), a batch advances at the measured slowdown for its
//! batch size and the replicas busy at each moment, retimed whenever that
//! count changes; a batch started with no request left waiting (an engine
//! that is not saturated) also pays the profile's `light_load` per iteration,
//! and in a lock-step engine (`contention.lockstep`, one host driving every
//! replica) a prefill that starts beside running batches holds them up for
//! as long as it outlasts a decode step. The simulation is event-driven (a binary heap of batch
//! completions, replica start-ups, preemption notices and stops), not
//! time-stepped.
//!
//! **Fleet.** Interval `k` starts at `k x interval_ms`; its preemptions and
//! arrivals happen at its start. Which instances are preempted is drawn
//! uniformly among those alive, with a fixed seed, before the simulation (the
//! same victims whatever the policy); preemptions beyond the instances alive
//! before the interval take instances that arrived in it. A new instance can be
//! used `profile.instance_start_ms` after it arrives (the first interval's
//! instances too: the trace starts cold).
//!
//! **Placement.** Replicas are packed GPU by GPU in tensor-parallel chunks
//! that never straddle an instance; pipeline stages may. GPU `j` of a replica
//! holds stage `j / tp`, tensor slice `j % tp` (the artifact's mapping, tensor
//! parallelism innermost). New replicas go first onto instances the deployment
//! already uses, then onto started ones, then onto ones still starting, and
//! (token-level only, which reads the notice) last onto instances under a
//! preemption notice.
//!
//! **Billing.** Each interval bills the instances the deployment's replicas
//! occupy at its start (instances no replica uses are released), for the whole
//! interval, at the spot price: `instance_hours = Σ used x interval`. That is
//! `config.instances(gpus_per_instance)` except when kept replicas fragment
//! the instances (a replica shape that does not tile an instance, after
//! preemptions), where it counts the instances really occupied.
//!
//! **Reconfiguration** happens at an interval start when the chosen
//! configuration differs from the running one or a preemption took GPUs that
//! a replica used. Costs come from the profile: a weight slice of a GPU is the
//! layers of its stage times its `1/tp` share of each layer
//! (`weight_bytes / layers / tp` per layer); bytes into one instance move at
//! `transfer_bytes_per_ms` from peers or `load_bytes_per_ms` from storage, all
//! instances in parallel; every new replica pays `reinit_ms` once its
//! instances hold their state.
//!
//! - [`Recovery::TokenLevel`] (SpotServe). Same `(tp, pp)` as before: kept
//!   replicas keep serving without a pause; added replicas join after their
//!   missing weights arrive from peers (+ reinit); replicas dropped by a
//!   scale-in hand their in-flight requests over with their KV cache. A new
//!   shape: every replica stops at the end of its current prefill (or at once
//!   while decoding), its in-flight requests keep their tokens, and the new
//!   configuration starts when each instance has received the bytes it lacks
//!   plus an even share of the interrupted requests' KV cache (+ reinit).
//!   *Migration bytes on a shape change:* a GPU needs, for every layer of its
//!   new stage, the part of its new tensor slice that no old position on the
//!   **same instance** covers (old positions of one shape are disjoint, so
//!   their overlaps add up exactly; copies inside an instance are treated as
//!   free next to the network). Placement keeps the old instance order, so a
//!   position usually lands where its weights already are; no Kuhn-Munkres
//!   search is made, so this is never better than the artifact's matching.
//!   Peers serve the missing bytes when a complete old replica survives;
//!   otherwise they come from storage. *Preemption notice:* when the notice
//!   arrives, a doomed replica starts only batches whose prefill (and one
//!   decode step) ends before `preemption - its KV migration time` (its full
//!   batch's KV cache over its instances' links), keeps decoding until then,
//!   and its in-flight requests then move with their KV cache: they resume at
//!   their last token on another replica (`migrations`), never recomputing
//!   their prompt. With no notice, or one shorter than the migration, the
//!   in-flight requests of preempted replicas lose their progress and go back
//!   to the head of the queue (`restarts`). The reconfiguration itself starts
//!   at the interval start (the policy decides then), not during the notice.
//! - [`Recovery::Restart`] (reparallelization with restart, the paper's
//!   baseline): any change of the deployment stops every replica; in-flight
//!   requests go back to the queue head and recompute from scratch; each new
//!   replica serves once its instances have started (new ones) and loaded
//!   their slices from storage, + reinit. It ignores the notice.
//! - [`Recovery::Reroute`] (rerouting only): the replica shape
//!   `(tp, pp, batch, M1, M2)` is fixed to the policy's choice for the
//!   trace's mean fleet at its mean rate, asked once before the first
//!   interval (the artifact's rerouting baseline solves once over every host
//!   it may get, which on a trace that swings far below its maximum fleet
//!   cannot carry the load: the mean fleet is the stronger baseline);
//!   `dp` is always the number of whole replicas the alive GPUs hold (later
//!   decisions are ignored). Survivors keep serving; preempted replicas'
//!   in-flight requests go back to the queue head and recompute; new replicas
//!   load from storage after their instances start. It ignores the notice.
//!
//! The first deployment (and any deployment after every copy of the weights
//! was lost) loads from storage in every mode. An interval is *paused* while
//! a configuration is chosen but none of its replicas can serve yet.
//!
//! **The policy loop** ([`simulate`]): at every interval start the simulator
//! builds a [`ServeRequest`]: the instances now, repeated as a persistence
//! forecast over the horizon; the arrival rate observed over the previous
//! five intervals (fewer at the start), repeated (before the first interval,
//! the trace's mean rate: the
//! load a deployment is provisioned for, like the artifact's
//! `--required-tpt`); the configuration that served the previous interval. An error or a plan that fails
//! [`parcae_serving_core::validate::check_plan`] counts in
//! [`ServeOutcome::policy_errors`] and is replaced by the native
//! [`SpotServe`] optimizer's plan for that interval.

mod arrivals;
mod engine;
mod placement;

pub use arrivals::{MAX_ARRIVALS, gamma_arrivals, scheduled_arrivals};
pub use parcae_serving_core::{ServePlan, ServeRequest, ServingConfig, ServingProfile, Workload};

use std::fmt;

use parcae_serving_core::{ServingOptimizer, SpotServe};

/// Longest decision horizon accepted, intervals (a forecast longer than this
/// is almost certainly a mistake and would only cost memory).
pub const MAX_HORIZON: usize = 10_000;

/// Why a simulation could not run: the offending field and the reason.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ServeSimError {
    /// An input is out of range.
    #[error("{field}: {reason}")]
    Invalid {
        /// The field, e.g. `fleet.instances[3]` or `cv`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The native SpotServe optimizer, the fallback for a failed policy
    /// answer, failed too.
    #[error("interval {interval}: the fallback SpotServe optimizer failed: {reason}")]
    Fallback {
        /// The interval of the decision.
        interval: usize,
        /// The optimizer's error.
        reason: String,
    },
}

impl ServeSimError {
    pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ServeSimError::Invalid { field: field.into(), reason: reason.into() }
    }
}

/// How a deployment recovers from preemptions and reconfigurations (see the
/// crate doc for the exact rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Recovery {
    /// SpotServe: live migration of weights and KV cache; interrupted requests
    /// resume at their last token.
    TokenLevel,
    /// Reparallelization with a restart: every change restarts the engine
    /// from storage; interrupted requests recompute from scratch.
    Restart,
    /// No reparallelization: the first replica shape is kept, preempted
    /// replicas' requests are rerouted to the survivors and recomputed.
    Reroute,
}

impl fmt::Display for Recovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Recovery::TokenLevel => "spotserve",
            Recovery::Restart => "restart",
            Recovery::Reroute => "reroute",
        })
    }
}

/// The availability the simulator replays, one entry per interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    /// Instances alive during interval `k` (after its start's events).
    pub instances: Vec<u32>,
    /// Instances preempted at the start of interval `k`.
    pub preemptions: Vec<u32>,
    /// Instances that arrived at the start of interval `k`
    /// (`instances[k] = instances[k-1] + arrivals[k] - preemptions[k]`, floored
    /// at 0; `instances[-1] = 0`).
    pub arrivals: Vec<u32>,
    /// Length of one interval, ms (>= 1).
    pub interval_ms: u64,
    /// The cloud's warning before a preemption, ms (0 = unannounced).
    pub notice_ms: f64,
}

/// What is served, on what, at what price.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeSetup {
    /// The model on this kind of instance.
    pub profile: ServingProfile,
    /// The requests' shape.
    pub workload: Workload,
    /// End-to-end latency objective of a request, ms (> 0).
    pub latency_slo_ms: f64,
    /// Intervals per decision, now included (1..=[`MAX_HORIZON`]).
    pub horizon: usize,
    /// Price of one spot instance, USD per hour.
    pub spot_price_per_hour: f64,
    /// Price of one on-demand instance, USD per hour.
    pub on_demand_price_per_hour: f64,
    /// How replicas that share one machine behave (worker processes on fewer cores than
    /// replicas), measured by `parcae-host profile-serving`; the default (nothing measured)
    /// is each replica on its own GPUs.
    pub machine: SharedMachine,
}

/// A deployment whose replicas share a machine: how they slow each other and how an
/// engine that is not saturated pays for waking up. Measured, not modelled: these are the
/// terms of `parcae-host profile-serving`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SharedMachine {
    /// Entry `i` multiplies a batch's prefill and step times while `i + 1` replicas are
    /// busy; past the last entry the last step repeats. Used for batch sizes
    /// [`Self::slowdown_by_batch`] does not cover; empty: no contention.
    pub slowdown_by_busy_replicas: Vec<f64>,
    /// The same table per batch size (ascending): contention depends on the batch (the
    /// host's round trip weighs more beside small batches). A batch between two measured
    /// sizes interpolates linearly; outside them it takes the nearest.
    pub slowdown_by_batch: Vec<(u32, Vec<f64>)>,
    /// What an iteration costs on top when no request waits in the queue.
    pub light_load: LightLoad,
    /// The engine runs one iteration of every busy replica at a time (`serve`'s does: one
    /// host drives every replica), so a replica's prefill holds up the others' steps.
    pub lockstep: bool,
}

/// An engine that is not saturated (no request waiting when a batch starts): its processes
/// sleep between requests and wake for each one, where a saturated engine's stay hot, so
/// its iterations take longer and contend differently. Nothing where that was not measured.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LightLoad {
    /// Added to the prefill iteration of a batch started with an empty queue, ms.
    pub prefill_extra_ms: f64,
    /// Added to every decode step of such a batch, ms.
    pub decode_extra_ms: f64,
    /// Such a batch's slowdown with `i + 1` replicas busy (measured at batch 1); past its
    /// end the saturated table's steps continue from its last entry. Empty: the saturated
    /// tables.
    pub slowdown_by_busy_replicas: Vec<f64>,
}

impl SharedMachine {
    /// Whether replicas slow each other at all (any table, saturated or light).
    pub fn contended(&self) -> bool {
        !self.slowdown_by_busy_replicas.is_empty()
            || !self.slowdown_by_batch.is_empty()
            || !self.light_load.slowdown_by_busy_replicas.is_empty()
    }
    /// The slowdown of a batch of `batch` requests while `busy` replicas (itself included)
    /// compute; `light`: the batch started with nobody waiting.
    pub fn slowdown(&self, busy: usize, batch: usize, light: bool) -> f64 {
        let table = &self.light_load.slowdown_by_busy_replicas;
        if !light || table.is_empty() || busy == 0 {
            return self.saturated(busy, batch);
        }
        if busy <= table.len() {
            return table[busy - 1];
        }
        let last = table.len();
        table[last - 1] * self.saturated(busy, batch) / self.saturated(last, batch)
    }

    /// The saturated tables' slowdown.
    fn saturated(&self, busy: usize, batch: usize) -> f64 {
        let sizes = &self.slowdown_by_batch;
        let Some(hi) = sizes.iter().position(|(b, _)| *b as usize >= batch) else {
            return match sizes.last() {
                Some((_, table)) => table_slowdown(table, busy),
                None => table_slowdown(&self.slowdown_by_busy_replicas, busy),
            };
        };
        let (b_hi, t_hi) = &sizes[hi];
        if hi == 0 || *b_hi as usize == batch {
            return table_slowdown(t_hi, busy);
        }
        let (b_lo, t_lo) = &sizes[hi - 1];
        let w = (batch as f64 - f64::from(*b_lo)) / f64::from(b_hi - b_lo);
        (1.0 - w) * table_slowdown(t_lo, busy) + w * table_slowdown(t_hi, busy)
    }
}

/// Entry `busy - 1` of `table`, extrapolating its last step; 1 for an empty table.
fn table_slowdown(table: &[f64], busy: usize) -> f64 {
    match (busy, table.len()) {
        (_, 0) | (0, _) => 1.0,
        (n, len) if n <= len => table[n - 1],
        (_, 1) => table[0],
        (n, len) => {
            let step = table[len - 1] - table[len - 2];
            table[len - 1] + step * (n - len) as f64
        }
    }
}

/// What happened to one request.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RequestRecord {
    /// When it arrived, ms.
    pub arrival_ms: f64,
    /// When its first token was produced, ms (`None` if never, before the end).
    pub first_token_ms: Option<f64>,
    /// When its last token was produced, ms (`None`: dropped).
    pub done_ms: Option<f64>,
    /// Times its progress was lost and had to be recomputed.
    pub restarts: u32,
    /// Times it resumed from its last token on another replica.
    pub migrations: u32,
}

impl RequestRecord {
    /// End-to-end latency, ms, if it completed.
    pub fn latency_ms(&self) -> Option<f64> {
        self.done_ms.map(|d| d - self.arrival_ms)
    }
}

/// What happened in one interval.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct IntervalRecord {
    /// Start of the interval, ms.
    pub start_ms: f64,
    /// Instances alive in the interval.
    pub instances_available: u32,
    /// The configuration deployed in it (`dp` = replicas actually placed);
    /// `None`: nothing served.
    pub config: Option<ServingConfig>,
    /// Instances the deployment occupied (and was billed for).
    pub instances_used: u32,
    /// The arrival rate the policy was told (observed over the previous
    /// five intervals; the trace's mean rate for the first), requests per second.
    pub arrival_rate: f64,
    /// Time in the interval the deployment spent reconfiguring with none of
    /// its replicas able to serve, ms.
    pub paused_ms: f64,
    /// Requests waiting in the queue at the interval's start.
    pub queue_len: usize,
}

/// The headline numbers of one simulation.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ServeSummary {
    /// Requests that arrived.
    pub requests: usize,
    /// Requests completed before the end of the trace.
    pub completed: usize,
    /// Requests accepted but not completed by the end of the trace.
    pub dropped: usize,
    /// Requests whose in-flight progress was lost at least once.
    pub requeued: usize,
    /// Requests that resumed from their last token at least once.
    pub migrated: usize,
    /// Median end-to-end latency of completed requests, ms (nearest rank;
    /// NaN when none completed).
    pub p50_ms: f64,
    /// 90th percentile, ms.
    pub p90_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Mean end-to-end latency of completed requests, ms.
    pub mean_ms: f64,
    /// Requests completed within the SLO over all requests (1 when there were none).
    pub slo_attainment: f64,
    /// Changes of the running deployment, the first start-up not counted.
    pub reconfigurations: u32,
    /// Time spent paused for reconfiguration, ms.
    pub paused_ms: f64,
    /// Instance-hours billed.
    pub instance_hours: f64,
    /// What they cost, USD (spot price; the on-demand price for
    /// [`simulate_on_demand`]).
    pub cost_usd: f64,
    /// The same instance-hours at the on-demand price, USD.
    pub cost_on_demand_usd: f64,
    /// Output tokens of completed requests.
    pub tokens: u64,
    /// `cost_usd` per thousand output tokens (NaN when nothing completed).
    pub usd_per_1k_tokens: f64,
}

/// Everything one simulation measured.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ServeOutcome {
    /// One record per arrival, in arrival order.
    pub requests: Vec<RequestRecord>,
    /// One record per interval.
    pub intervals: Vec<IntervalRecord>,
    /// The headline numbers.
    pub summary: ServeSummary,
    /// Decisions the policy got wrong (an error or an invalid plan), replaced
    /// by the native SpotServe optimizer's.
    pub policy_errors: u32,
}

/// Replays `fleet` and `arrivals_ms` (ms, ascending) under `recovery`,
/// asking `decide` for the configuration at every interval start (see the
/// crate doc); a failed or invalid answer is replaced by SpotServe's.
pub fn simulate(
    setup: &ServeSetup,
    fleet: &Fleet,
    arrivals_ms: &[f64],
    recovery: Recovery,
    decide: &mut dyn FnMut(&ServeRequest) -> Result<ServePlan, String>,
) -> Result<ServeOutcome, ServeSimError> {
    engine::run(setup, fleet, arrivals_ms, recovery, decide, setup.spot_price_per_hour)
}

/// The on-demand baseline: `instances` on-demand instances for the whole
/// `duration_ms`, never preempted, on the configuration SpotServe picks for
/// them at the mean arrival rate, billed at the on-demand price (`cost_usd`
/// and `cost_on_demand_usd` agree). They start cold at 0, like the spot fleet.
pub fn simulate_on_demand(
    setup: &ServeSetup,
    instances: u32,
    duration_ms: f64,
    arrivals_ms: &[f64],
) -> Result<ServeOutcome, ServeSimError> {
    if instances == 0 {
        return Err(ServeSimError::invalid("instances", "the on-demand fleet needs at least 1 instance"));
    }
    if !(1.0..1e15).contains(&duration_ms) {
        return Err(ServeSimError::invalid(
            "duration_ms",
            format!("{duration_ms} must be a finite number in [1, 1e15)"),
        ));
    }
    let fleet = Fleet {
        instances: vec![instances],
        preemptions: vec![0],
        arrivals: vec![instances],
        interval_ms: duration_ms.ceil() as u64,
        notice_ms: 0.0,
    };
    let mean_rate = arrivals_ms.len() as f64 / (duration_ms / 1000.0);
    let mut native = SpotServe::default();
    let mut decide = |request: &ServeRequest| {
        let mut at_mean = request.clone();
        at_mean.arrival_rates.iter_mut().for_each(|r| *r = mean_rate);
        native.configure(&at_mean)
    };
    engine::run(setup, &fleet, arrivals_ms, Recovery::TokenLevel, &mut decide, setup.on_demand_price_per_hour)
}

/// Nearest-rank percentile of ascending `sorted` (NaN when empty).
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// The summary of a finished simulation.
fn summarize(
    setup: &ServeSetup,
    requests: &[RequestRecord],
    intervals: &[IntervalRecord],
    interval_ms: f64,
    reconfigurations: u32,
    price_per_hour: f64,
) -> ServeSummary {
    let mut latencies: Vec<f64> = requests.iter().filter_map(RequestRecord::latency_ms).collect();
    latencies.sort_by(f64::total_cmp);
    let completed = latencies.len();
    let within = latencies.iter().filter(|&&l| l <= setup.latency_slo_ms).count();
    let instance_hours: f64 =
        intervals.iter().map(|i| f64::from(i.instances_used) * interval_ms).sum::<f64>() / 3_600_000.0;
    let cost_usd = instance_hours * price_per_hour;
    let tokens = completed as u64 * u64::from(setup.workload.output_tokens);
    ServeSummary {
        requests: requests.len(),
        completed,
        dropped: requests.len() - completed,
        requeued: requests.iter().filter(|r| r.restarts > 0).count(),
        migrated: requests.iter().filter(|r| r.migrations > 0).count(),
        p50_ms: percentile(&latencies, 50.0),
        p90_ms: percentile(&latencies, 90.0),
        p99_ms: percentile(&latencies, 99.0),
        mean_ms: if completed > 0 { latencies.iter().sum::<f64>() / completed as f64 } else { f64::NAN },
        slo_attainment: if requests.is_empty() { 1.0 } else { within as f64 / requests.len() as f64 },
        reconfigurations,
        paused_ms: intervals.iter().map(|i| i.paused_ms).sum(),
        instance_hours,
        cost_usd,
        cost_on_demand_usd: instance_hours * setup.on_demand_price_per_hour,
        tokens,
        usd_per_1k_tokens: if tokens > 0 { cost_usd / (tokens as f64 / 1000.0) } else { f64::NAN },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[7.0], 1.0), 7.0);
        assert!(percentile(&[], 50.0).is_nan());
        assert_eq!(Recovery::TokenLevel.to_string(), "spotserve");
        assert_eq!(Recovery::Restart.to_string(), "restart");
        assert_eq!(Recovery::Reroute.to_string(), "reroute");
    }
}
