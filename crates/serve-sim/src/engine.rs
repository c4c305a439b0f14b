//! The event loop of the serving simulator: requests, replicas, instances and
//! the reconfiguration rules of each [`Recovery`] (the model is documented in
//! the crate doc). Kept in one place because the rules share every piece of
//! state; the geometry lives in `placement`.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use parcae_serving_core::validate::check_plan;
use parcae_serving_core::{
    Estimate, ServePlan, ServeRequest, ServingConfig, ServingOptimizer, SpotServe, estimate,
};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::placement::{Gpu, Held, Slicing, place, position};
use crate::{
    Fleet, IntervalRecord, MAX_HORIZON, Recovery, RequestRecord, ServeOutcome, ServeSetup, ServeSimError,
    SharedMachine, summarize,
};

/// Intervals the observed arrival rate is averaged over: one interval of a
/// Poisson process at a few requests per second is too noisy to size a
/// deployment on (its count's relative error is `1/sqrt(count)`).
pub(crate) const RATE_WINDOW: usize = 5;

/// Seed of the preemption victims: fixed, so every policy and recovery mode
/// loses the same instances.
const VICTIM_SEED: u64 = 0x5EB7_E5E1_0000_0001;

/// Most instances a fleet may bring over its whole trace.
const MAX_INSTANCES: u64 = 10_000_000;

/// One request's state.
#[derive(Debug, Clone)]
struct Req {
    arrival: f64,
    /// Output tokens generated and kept.
    committed: u32,
    /// Its prompt is processed and its KV cache exists somewhere.
    has_kv: bool,
    /// When its KV cache is usable by another replica.
    kv_ready: f64,
    first_token: Option<f64>,
    done: Option<f64>,
    restarts: u32,
    migrations: u32,
}

impl Req {
    /// Its progress is lost: back to the prompt.
    fn lose(&mut self) {
        self.restarts += 1;
        self.committed = 0;
        self.has_kv = false;
    }
}

#[derive(Debug, Clone)]
struct Inst {
    ready: f64,
    /// When the cloud takes it back (infinity: never in the trace).
    preempt: f64,
    alive: bool,
}

#[derive(Debug, Clone, Copy)]
struct Member {
    req: u32,
    had_kv: bool,
    /// Tokens it still had to generate when the batch started.
    rem: u32,
}

/// How a batch's work maps onto time while the replicas busy around it change: breakpoints
/// `(time, work, slowdown from then on)`, work in uncontended milliseconds. Without
/// contention it is one breakpoint with slowdown 1, i.e. work and time advance together.
#[derive(Debug, Clone)]
struct Pace {
    points: Vec<(f64, f64, f64)>,
}

impl Pace {
    fn new(start: f64, slowdown: f64) -> Self {
        Pace { points: vec![(start, 0.0, slowdown)] }
    }

    /// When the batch has done `work`.
    fn time_at(&self, work: f64) -> f64 {
        let &(t, w, s) = self.points.iter().rev().find(|p| p.1 <= work).unwrap_or(&self.points[0]);
        t + (work - w).max(0.0) * s
    }

    /// The work done by `time`.
    fn work_at(&self, time: f64) -> f64 {
        let &(t, w, s) = self.points.iter().rev().find(|p| p.0 <= time).unwrap_or(&self.points[0]);
        w + (time - t).max(0.0) / s
    }

    /// The slowdown in effect now.
    fn slowdown(&self) -> f64 {
        self.points.last().map_or(1.0, |p| p.2)
    }

    /// From `time` on, work advances `slowdown` times slower than time.
    fn change(&mut self, time: f64, slowdown: f64) {
        let first = self.points[0];
        if time <= first.0 {
            // Not started yet: it starts at the new pace.
            self.points = vec![(first.0, 0.0, slowdown)];
        } else {
            let work = self.work_at(time);
            self.points.push((time, work, slowdown));
        }
    }
}

#[derive(Debug, Clone)]
struct Batch {
    members: Vec<Member>,
    start: f64,
    /// Uncontended time of the prefill (0 without one) and of one decode step, ms.
    prefill_work: f64,
    step_work: f64,
    /// Tokens every member has once the prefill is done: 1 when the batch began with a
    /// prefill (its iteration yields a token for every member, as `serve`'s engine does),
    /// else 0.
    first: u32,
    /// Started with nobody waiting (the light-load terms apply).
    light: bool,
    pace: Pace,
    /// Where (in the pace's work) and for how much work it stood still while another
    /// replica's prefill held up a lock-step iteration, in order.
    stalls: Vec<(f64, f64)>,
}

impl Batch {
    /// The pace's work by which the batch has done `useful` work of its own.
    fn total(&self, useful: f64) -> f64 {
        self.stalls.iter().fold(useful, |total, &(at, extra)| if at < total { total + extra } else { total })
    }

    /// The batch's own work within `total` of the pace's.
    fn useful(&self, total: f64) -> f64 {
        total - self.stalls.iter().map(|&(at, extra)| (total - at).clamp(0.0, extra)).sum::<f64>()
    }

    /// Decode steps after the prefill that `m` still needs.
    fn steps(&self, m: &Member) -> u32 {
        m.rem.saturating_sub(self.first)
    }

    /// When the prefill ends.
    fn prefill_end(&self) -> f64 {
        self.pace.time_at(self.total(self.prefill_work))
    }

    /// When member `m` has its last token.
    fn done_at(&self, m: &Member) -> f64 {
        self.pace.time_at(self.total(self.prefill_work + self.step_work * f64::from(self.steps(m))))
    }

    /// When the last member is done.
    fn end(&self) -> f64 {
        let most = self.members.iter().map(|m| self.steps(m)).max().unwrap_or(0);
        self.pace.time_at(self.total(self.prefill_work + self.step_work * f64::from(most)))
    }

    /// Whole decode steps done by `time` after the prefill.
    fn steps_by(&self, time: f64) -> f64 {
        if self.step_work > 0.0 {
            ((self.useful(self.pace.work_at(time)) - self.prefill_work) / self.step_work + 1e-9)
                .floor()
                .max(0.0)
        } else {
            f64::INFINITY
        }
    }
}

#[derive(Debug, Clone)]
struct Replica {
    gpus: Vec<Gpu>,
    /// Distinct instances, in order of first use.
    instances: Vec<usize>,
    tp: u32,
    /// When it can take its first batch.
    avail: f64,
    /// Earliest preemption among its instances.
    preempt: f64,
    /// Time to move a full batch's KV cache off its instances.
    kv_mig_ms: f64,
    notice_seen: bool,
    /// When it stops to migrate its requests (infinity: no migration planned).
    stop_at: f64,
    /// Takes no more batches.
    stopped: bool,
    destroyed: bool,
    batch: Option<Batch>,
    seq: u64,
    listed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Done,
    Ready,
    Notice,
    Stop,
}

#[derive(Debug, Clone, Copy)]
struct Event {
    time: f64,
    order: u64,
    kind: Kind,
    replica: usize,
    seq: u64,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    /// Reversed: the heap pops the earliest event, ties in scheduling order.
    fn cmp(&self, other: &Self) -> Ordering {
        other.time.total_cmp(&self.time).then(other.order.cmp(&self.order))
    }
}

/// The shared-machine terms: every slowdown a finite positive number, the per-batch tables
/// for distinct ascending batch sizes, the light-load extras finite and not negative.
fn validate_machine(machine: &SharedMachine) -> Result<(), ServeSimError> {
    let tables = [
        ("slowdown_by_busy_replicas".to_string(), &machine.slowdown_by_busy_replicas),
        ("light_load.slowdown_by_busy_replicas".to_string(), &machine.light_load.slowdown_by_busy_replicas),
    ]
    .into_iter()
    .chain(
        machine
            .slowdown_by_batch
            .iter()
            .enumerate()
            .map(|(k, (_, t))| (format!("slowdown_by_batch[{k}]"), t)),
    );
    for (field, table) in tables {
        for (i, &value) in table.iter().enumerate() {
            if !(value.is_finite() && value > 0.0) {
                return Err(ServeSimError::invalid(
                    format!("{field}[{i}]"),
                    format!("{value} must be a finite number > 0"),
                ));
            }
        }
    }
    for (k, pair) in machine.slowdown_by_batch.windows(2).enumerate() {
        if pair[0].0 >= pair[1].0 {
            return Err(ServeSimError::invalid(
                format!("slowdown_by_batch[{}]", k + 1),
                format!("batch {} after batch {}: sizes must ascend", pair[1].0, pair[0].0),
            ));
        }
    }
    if let Some((k, _)) = machine.slowdown_by_batch.iter().enumerate().find(|(_, (b, _))| *b == 0) {
        return Err(ServeSimError::invalid(format!("slowdown_by_batch[{k}]"), "batch 0: must be at least 1"));
    }
    for (field, value) in [
        ("light_load.prefill_extra_ms", machine.light_load.prefill_extra_ms),
        ("light_load.decode_extra_ms", machine.light_load.decode_extra_ms),
    ] {
        if !(value.is_finite() && value >= 0.0) {
            return Err(ServeSimError::invalid(field, format!("{value} must be a finite number >= 0")));
        }
    }
    Ok(())
}

/// Checks every input; the first problem found, naming its field.
fn validate(setup: &ServeSetup, fleet: &Fleet, arrivals_ms: &[f64]) -> Result<(), ServeSimError> {
    let p = &setup.profile;
    if !(1..=64).contains(&p.gpus_per_instance) {
        return Err(ServeSimError::invalid(
            "profile.gpus_per_instance",
            format!("{} must be in 1..=64", p.gpus_per_instance),
        ));
    }
    if p.layers == 0 {
        return Err(ServeSimError::invalid("profile.layers", "must be at least 1"));
    }
    for (field, value) in [
        ("profile.transfer_bytes_per_ms", p.transfer_bytes_per_ms),
        ("profile.load_bytes_per_ms", p.load_bytes_per_ms),
    ] {
        if !(value.is_finite() && value > 0.0) {
            return Err(ServeSimError::invalid(field, format!("{value} must be a finite number > 0")));
        }
    }
    for (field, value) in
        [("profile.reinit_ms", p.reinit_ms), ("profile.instance_start_ms", p.instance_start_ms)]
    {
        if !(value.is_finite() && value >= 0.0) {
            return Err(ServeSimError::invalid(field, format!("{value} must be a finite number >= 0")));
        }
    }
    if setup.workload.output_tokens == 0 {
        return Err(ServeSimError::invalid("workload.output_tokens", "must be at least 1"));
    }
    if !(setup.latency_slo_ms.is_finite() && setup.latency_slo_ms > 0.0) {
        return Err(ServeSimError::invalid(
            "latency_slo_ms",
            format!("{} must be a finite number > 0", setup.latency_slo_ms),
        ));
    }
    validate_machine(&setup.machine)?;
    if !(1..=MAX_HORIZON).contains(&setup.horizon) {
        return Err(ServeSimError::invalid(
            "horizon",
            format!("{} must be in 1..={MAX_HORIZON}", setup.horizon),
        ));
    }
    for (field, value) in [
        ("spot_price_per_hour", setup.spot_price_per_hour),
        ("on_demand_price_per_hour", setup.on_demand_price_per_hour),
    ] {
        if !(value.is_finite() && value >= 0.0) {
            return Err(ServeSimError::invalid(field, format!("{value} must be a finite number >= 0")));
        }
    }
    let n = fleet.instances.len();
    if n == 0 {
        return Err(ServeSimError::invalid("fleet.instances", "the series is empty"));
    }
    if fleet.preemptions.len() != n || fleet.arrivals.len() != n {
        return Err(ServeSimError::invalid(
            "fleet",
            format!(
                "{n} instance counts, {} preemption counts and {} arrival counts: one of each per interval",
                fleet.preemptions.len(),
                fleet.arrivals.len()
            ),
        ));
    }
    if fleet.interval_ms == 0 {
        return Err(ServeSimError::invalid("fleet.interval_ms", "must be at least 1 ms"));
    }
    if (n as f64) * (fleet.interval_ms as f64) > 1e15 {
        return Err(ServeSimError::invalid("fleet.interval_ms", "the trace is longer than 1e15 ms"));
    }
    if !(fleet.notice_ms.is_finite() && fleet.notice_ms >= 0.0) {
        return Err(ServeSimError::invalid(
            "fleet.notice_ms",
            format!("{} must be a finite number >= 0", fleet.notice_ms),
        ));
    }
    let mut previous: u64 = 0;
    let mut brought: u64 = 0;
    for k in 0..n {
        let expected =
            (previous + u64::from(fleet.arrivals[k])).saturating_sub(u64::from(fleet.preemptions[k]));
        if u64::from(fleet.instances[k]) != expected {
            return Err(ServeSimError::invalid(
                format!("fleet.instances[{k}]"),
                format!(
                    "{} but {previous} before + {} arrivals - {} preemptions = {expected}",
                    fleet.instances[k], fleet.arrivals[k], fleet.preemptions[k]
                ),
            ));
        }
        previous = expected;
        brought += u64::from(fleet.arrivals[k]);
    }
    if brought > MAX_INSTANCES {
        return Err(ServeSimError::invalid(
            "fleet.arrivals",
            format!("{brought} instances in all, more than {MAX_INSTANCES}"),
        ));
    }
    if arrivals_ms.len() > u32::MAX as usize {
        return Err(ServeSimError::invalid("arrivals_ms", "more than 2^32 - 1 requests"));
    }
    let mut last = 0.0;
    for (i, &t) in arrivals_ms.iter().enumerate() {
        if !(t.is_finite() && t >= 0.0) {
            return Err(ServeSimError::invalid(
                format!("arrivals_ms[{i}]"),
                format!("{t} must be a finite time >= 0"),
            ));
        }
        if t < last {
            return Err(ServeSimError::invalid(
                format!("arrivals_ms[{i}]"),
                format!("{t} comes before the previous arrival {last}"),
            ));
        }
        last = t;
    }
    Ok(())
}

/// The whole simulation (see [`crate::simulate`]); `price_per_hour` bills
/// `cost_usd`.
/// The policy's plan for `request`, or (counted in `errors`) the native
/// SpotServe optimizer's when the policy errs or answers an invalid plan.
fn plan_or_fallback(
    decide: &mut dyn FnMut(&ServeRequest) -> Result<ServePlan, String>,
    native: &mut SpotServe,
    request: &ServeRequest,
    interval: usize,
    errors: &mut u32,
) -> Result<ServePlan, ServeSimError> {
    match decide(request) {
        Ok(plan) if check_plan(request, &plan).is_ok() => Ok(plan),
        _ => {
            *errors += 1;
            native.configure(request).map_err(|reason| ServeSimError::Fallback { interval, reason })
        }
    }
}

pub(crate) fn run(
    setup: &ServeSetup,
    fleet: &Fleet,
    arrivals_ms: &[f64],
    recovery: Recovery,
    decide: &mut dyn FnMut(&ServeRequest) -> Result<ServePlan, String>,
    price_per_hour: f64,
) -> Result<ServeOutcome, ServeSimError> {
    validate(setup, fleet, arrivals_ms)?;
    let mut sim = Sim::new(setup, fleet, arrivals_ms, recovery);
    let n = fleet.instances.len();
    let interval = fleet.interval_ms as f64;
    // Arrivals per interval, for the observed rate.
    let mut counts = vec![0u64; n];
    for &t in arrivals_ms {
        if let Some(c) = counts.get_mut((t / interval) as usize) {
            *c += 1;
        }
    }
    // Before any observation, the load the deployment is provisioned for (the
    // artifact's `--required-tpt`): the trace's mean rate.
    let mean_rate = arrivals_ms.len() as f64 / (n as f64 * interval / 1000.0);
    let mut native = SpotServe::default();
    let mut policy_errors = 0;
    let mut intervals = Vec::with_capacity(n);
    if recovery == Recovery::Reroute {
        // Rerouting never reparallelizes: its replica shape is the policy's
        // choice for the trace's mean fleet at the provisioned load. (The
        // artifact's rerouting baseline solves once over every host it may get;
        // on traces whose fleet swings far below its maximum that shape cannot
        // carry the load on the typical fleet, so the mean fleet makes the
        // stronger baseline.)
        let mean_fleet = fleet.instances.iter().map(|&i| f64::from(i)).sum::<f64>() / n.max(1) as f64;
        let typical = (mean_fleet.round() as u32).max(1);
        let request = ServeRequest {
            instances: vec![typical; setup.horizon],
            arrival_rates: vec![mean_rate; setup.horizon],
            latency_slo_ms: setup.latency_slo_ms,
            interval_ms: fleet.interval_ms,
            current: None,
            workload: setup.workload,
            profile: setup.profile.clone(),
        };
        let plan = plan_or_fallback(decide, &mut SpotServe::default(), &request, 0, &mut policy_errors)?;
        sim.fixed = plan.configs.first().copied().flatten();
    }
    for k in 0..n {
        let t = k as f64 * interval;
        sim.advance(t, false);
        let queue_len = sim.queue.len();
        sim.fleet_events(k);
        let rate = if k == 0 {
            mean_rate
        } else {
            let window = &counts[k.saturating_sub(RATE_WINDOW)..k];
            window.iter().sum::<u64>() as f64 / (window.len() as f64 * interval / 1000.0)
        };
        let request = ServeRequest {
            instances: vec![fleet.instances[k]; setup.horizon],
            arrival_rates: vec![rate; setup.horizon],
            latency_slo_ms: setup.latency_slo_ms,
            interval_ms: fleet.interval_ms,
            current: sim.config,
            workload: setup.workload,
            profile: setup.profile.clone(),
        };
        let plan = plan_or_fallback(decide, &mut native, &request, k, &mut policy_errors)?;
        let chosen = plan.configs.first().copied().flatten();
        sim.reconfigure(t, chosen, fleet.instances[k]);
        sim.repace(t);
        let (used, min_avail) = sim.footprint();
        let paused_ms = if sim.config.is_some() { (min_avail - t).clamp(0.0, interval) } else { 0.0 };
        intervals.push(IntervalRecord {
            start_ms: t,
            instances_available: fleet.instances[k],
            config: sim.config,
            instances_used: used,
            arrival_rate: rate,
            paused_ms,
            queue_len,
        });
        sim.dispatch(t);
    }
    sim.advance(sim.t_end, true);
    let t_end = sim.t_end;
    let requests: Vec<RequestRecord> = sim
        .reqs
        .iter()
        .map(|r| RequestRecord {
            arrival_ms: r.arrival,
            first_token_ms: r.first_token.filter(|&f| f <= t_end),
            done_ms: r.done.filter(|&d| d <= t_end),
            restarts: r.restarts,
            migrations: r.migrations,
        })
        .collect();
    let summary = summarize(setup, &requests, &intervals, interval, sim.reconfigurations, price_per_hour);
    Ok(ServeOutcome { requests, intervals, summary, policy_errors })
}

struct Sim<'a> {
    setup: &'a ServeSetup,
    recovery: Recovery,
    notice_ms: f64,
    t_end: f64,
    reqs: Vec<Req>,
    next_arrival: usize,
    queue: VecDeque<u32>,
    insts: Vec<Inst>,
    /// Instances preempted and arriving at each interval start.
    victims: Vec<Vec<usize>>,
    newcomers: Vec<Vec<usize>>,
    alive: Vec<usize>,
    replicas: Vec<Replica>,
    /// The deployment: indices into `replicas`.
    active: Vec<usize>,
    config: Option<ServingConfig>,
    est: Option<Estimate>,
    /// The configuration last asked for (before placement).
    wanted: Option<ServingConfig>,
    /// Reroute's replica shape, fixed before the first interval.
    fixed: Option<ServingConfig>,
    ever_deployed: bool,
    reconfigurations: u32,
    heap: BinaryHeap<Event>,
    order: u64,
    idle: Vec<usize>,
    /// Busy-GPU bit masks by instance, all zero between reconfigurations
    /// (only alive instances are ever set).
    masks: Vec<u64>,
}

impl<'a> Sim<'a> {
    fn new(setup: &'a ServeSetup, fleet: &Fleet, arrivals_ms: &[f64], recovery: Recovery) -> Self {
        let interval = fleet.interval_ms as f64;
        let n = fleet.instances.len();
        let mut rng = StdRng::seed_from_u64(VICTIM_SEED);
        let mut insts: Vec<Inst> = Vec::new();
        let mut victims = vec![Vec::new(); n];
        let mut newcomers = vec![Vec::new(); n];
        let mut alive: Vec<usize> = Vec::new();
        for k in 0..n {
            let t = k as f64 * interval;
            let take = (fleet.preemptions[k] as usize).min(alive.len());
            for _ in 0..take {
                let id = alive.swap_remove(rng.random_range(0..alive.len()));
                insts[id].preempt = t;
                victims[k].push(id);
            }
            let within = fleet.preemptions[k] - take as u32;
            for _ in 0..fleet.arrivals[k].saturating_sub(within) {
                let id = insts.len();
                insts.push(Inst {
                    ready: t + setup.profile.instance_start_ms,
                    preempt: f64::INFINITY,
                    alive: false,
                });
                alive.push(id);
                newcomers[k].push(id);
            }
        }
        let reqs = arrivals_ms
            .iter()
            .map(|&arrival| Req {
                arrival,
                committed: 0,
                has_kv: false,
                kv_ready: 0.0,
                first_token: None,
                done: None,
                restarts: 0,
                migrations: 0,
            })
            .collect();
        Sim {
            setup,
            recovery,
            notice_ms: fleet.notice_ms,
            t_end: n as f64 * interval,
            reqs,
            next_arrival: 0,
            queue: VecDeque::new(),
            insts,
            victims,
            newcomers,
            alive: Vec::new(),
            replicas: Vec::new(),
            active: Vec::new(),
            config: None,
            est: None,
            wanted: None,
            fixed: None,
            ever_deployed: false,
            reconfigurations: 0,
            heap: BinaryHeap::new(),
            order: 0,
            idle: Vec::new(),
            masks: Vec::new(),
        }
    }

    fn output_tokens(&self) -> u32 {
        self.setup.workload.output_tokens
    }

    fn push(&mut self, time: f64, kind: Kind, replica: usize, seq: u64) {
        self.order += 1;
        self.heap.push(Event { time, order: self.order, kind, replica, seq });
    }

    /// Processes arrivals and events before `limit` (up to and including it
    /// when `inclusive`).
    fn advance(&mut self, limit: f64, inclusive: bool) {
        let within = |t: f64| if inclusive { t <= limit } else { t < limit };
        loop {
            let event_time = self.heap.peek().map(|e| e.time);
            let arrival_time = self.reqs.get(self.next_arrival).map(|r| r.arrival);
            match (event_time, arrival_time) {
                (Some(te), ta) if within(te) && ta.is_none_or(|ta| te <= ta) => {
                    if let Some(event) = self.heap.pop() {
                        self.handle(event);
                    }
                }
                (_, Some(ta)) if within(ta) => {
                    self.queue.push_back(self.next_arrival as u32);
                    self.next_arrival += 1;
                    if !self.idle.is_empty() {
                        self.dispatch(ta);
                    }
                }
                _ => break,
            }
        }
    }

    fn handle(&mut self, e: Event) {
        let Some(r) = self.replicas.get(e.replica) else { return };
        if r.destroyed {
            return;
        }
        let now = e.time;
        match e.kind {
            Kind::Done => {
                if r.seq != e.seq || r.batch.is_none() {
                    return;
                }
                self.complete(e.replica);
                self.list(e.replica);
                self.dispatch(now);
            }
            Kind::Ready => {
                self.list(e.replica);
                self.dispatch(now);
            }
            Kind::Notice => self.notice(e.replica, now),
            Kind::Stop => {
                let mut out = Vec::new();
                self.interrupt(e.replica, now, true, &mut out);
                self.replicas[e.replica].stopped = true;
                self.requeue(out);
                self.dispatch(now);
            }
        }
        self.repace(now);
    }

    /// Marks a replica idle (once).
    fn list(&mut self, r: usize) {
        let rep = &mut self.replicas[r];
        if !rep.listed && !rep.stopped && !rep.destroyed && rep.batch.is_none() {
            rep.listed = true;
            self.idle.push(r);
        }
    }

    /// A preemption notice reaches replica `r` at `now`: if its KV cache can
    /// leave before the preemption, it plans to stop in time.
    fn notice(&mut self, r: usize, now: f64) {
        let rep = &mut self.replicas[r];
        rep.notice_seen = true;
        let stop = rep.preempt - rep.kv_mig_ms;
        if stop >= now {
            rep.stop_at = stop;
            let seq = rep.seq;
            self.push(stop, Kind::Stop, r, seq);
        }
    }

    /// Hands batches to idle replicas while requests wait.
    fn dispatch(&mut self, now: f64) {
        let (Some(config), Some(est)) = (self.config, self.est) else { return };
        let output = self.output_tokens();
        let batch_size = config.batch_size.max(1) as usize;
        let machine = &self.setup.machine;
        let contended = machine.contended();
        let mut busy = if contended { self.busy_replicas() } else { 0 };
        // Lock step: the replicas computing before this dispatch, whose next iteration waits
        // for the prefills it starts.
        let before: Vec<usize> = if machine.lockstep {
            (0..self.replicas.len()).filter(|&r| self.replicas[r].batch.is_some()).collect()
        } else {
            Vec::new()
        };
        // The earliest prefill this dispatch starts.
        let mut held_from: Option<f64> = None;
        while !self.queue.is_empty() {
            let Some(r) = self.idle.pop() else { break };
            let rep = &mut self.replicas[r];
            rep.listed = false;
            if rep.destroyed || rep.stopped || rep.batch.is_some() || rep.avail > now {
                continue;
            }
            let take = batch_size.min(self.queue.len());
            let mut members = Vec::with_capacity(take);
            let mut start = now;
            let mut needs_prefill = false;
            let mut most = 0;
            for id in self.queue.drain(..take) {
                let q = &self.reqs[id as usize];
                if q.has_kv {
                    start = start.max(q.kv_ready);
                } else {
                    needs_prefill = true;
                }
                let rem = output.saturating_sub(q.committed);
                most = most.max(rem);
                members.push(Member { req: id, had_kv: q.has_kv, rem });
            }
            // An engine with nobody left waiting sleeps between requests and pays to wake.
            let light = self.queue.is_empty();
            let slowdown = machine.slowdown(busy + 1, members.len(), light);
            let (prefill_extra, step_extra) = if light {
                (machine.light_load.prefill_extra_ms, machine.light_load.decode_extra_ms)
            } else {
                (0.0, 0.0)
            };
            let prefill_work = if needs_prefill { est.prefill_ms + prefill_extra } else { 0.0 };
            let step_work = est.decode_step_ms + step_extra;
            if rep.notice_seen && start + (prefill_work + step_work) * slowdown > rep.stop_at {
                // Too close to its migration to make progress: it takes no
                // more batches; the requests go back in order.
                rep.stopped = true;
                for m in members.iter().rev() {
                    self.queue.push_front(m.req);
                }
                continue;
            }
            rep.seq += 1;
            let seq = rep.seq;
            let first = u32::from(needs_prefill);
            let batch = Batch {
                members,
                start,
                prefill_work,
                step_work,
                first,
                light,
                pace: Pace::new(start, slowdown),
                stalls: Vec::new(),
            };
            if needs_prefill {
                held_from = Some(held_from.map_or(start, |t| t.min(start)));
            }
            let end = batch.end();
            rep.batch = Some(batch);
            busy += 1;
            self.push(end, Kind::Done, r, seq);
        }
        if let Some(start) = held_from {
            // The iteration that holds the others up is the prefill's own, as the saturated
            // walk timed it (a request's light-load extra is mostly outside it: the front end,
            // the wake-up), and it outlasts a step by that much whatever the contention (the
            // host's round trip is in both).
            self.hold_up(&before, start, est.prefill_ms - est.decode_step_ms);
        }
        self.repace(now);
    }

    /// A lock-step engine (the profile's `contention.lockstep`) runs one iteration of every
    /// busy replica at a time, so a prefill started at `start` makes the replicas already
    /// computing wait: that iteration lasts `longer_ms` more than their own step.
    fn hold_up(&mut self, replicas: &[usize], start: f64, longer_ms: f64) {
        if longer_ms <= 0.0 {
            return;
        }
        let mut moved = Vec::new();
        for &r in replicas {
            let rep = &mut self.replicas[r];
            let Some(b) = rep.batch.as_mut() else { continue };
            if rep.destroyed {
                continue;
            }
            // Standing still for `longer_ms` of time is that much work at the current pace.
            let at = b.pace.work_at(start);
            b.stalls.push((at, longer_ms / b.pace.slowdown()));
            moved.push(r);
        }
        self.reschedule(&moved);
    }

    /// Replicas computing a batch now.
    fn busy_replicas(&self) -> usize {
        self.replicas.iter().filter(|r| r.batch.is_some() && !r.destroyed).count()
    }

    /// Where replicas contend (the profile's slowdown), every batch runs at the pace of the
    /// replicas busy now: when that count changes, each batch's remaining work is retimed
    /// and its completion rescheduled.
    fn repace(&mut self, now: f64) {
        let machine = &self.setup.machine;
        if !machine.contended() {
            return;
        }
        let busy = self.busy_replicas();
        let mut moved = Vec::new();
        for (r, rep) in self.replicas.iter_mut().enumerate() {
            let Some(b) = rep.batch.as_mut() else { continue };
            let slowdown = machine.slowdown(busy, b.members.len(), b.light);
            if rep.destroyed || b.pace.slowdown() == slowdown {
                continue;
            }
            b.pace.change(now, slowdown);
            moved.push(r);
        }
        self.reschedule(&moved);
    }

    /// The batches of `replicas` were retimed: their old completions are void (a new
    /// sequence number) and the new ones are scheduled.
    fn reschedule(&mut self, replicas: &[usize]) {
        for &r in replicas {
            let rep = &mut self.replicas[r];
            let Some(end) = rep.batch.as_ref().map(Batch::end) else { continue };
            rep.seq += 1;
            let seq = rep.seq;
            self.push(end, Kind::Done, r, seq);
        }
    }

    /// Replica `r`'s batch ran to its end.
    fn complete(&mut self, r: usize) {
        let Some(b) = self.replicas[r].batch.take() else { return };
        let output = self.output_tokens();
        for m in &b.members {
            let q = &mut self.reqs[m.req as usize];
            if !m.had_kv && q.first_token.is_none() {
                q.first_token = Some(b.prefill_end());
            }
            q.done = Some(b.done_at(m));
            q.committed = output;
            q.has_kv = false;
        }
    }

    /// Stops replica `r`'s batch at `stop`: requests that finished by then
    /// complete; the others keep their tokens and move with their KV cache
    /// (`migrate`) or lose their progress. Requeued ids go to `out`.
    fn interrupt(&mut self, r: usize, stop: f64, migrate: bool, out: &mut Vec<u32>) {
        let rep = &mut self.replicas[r];
        let Some(b) = rep.batch.take() else { return };
        rep.seq += 1;
        let kv_ready = stop + rep.kv_mig_ms;
        let output = self.setup.workload.output_tokens;
        for m in &b.members {
            let q = &mut self.reqs[m.req as usize];
            if stop <= b.start {
                // Nothing of the batch ran yet.
                if q.has_kv && !migrate {
                    q.lose();
                }
                out.push(m.req);
                continue;
            }
            if stop >= b.prefill_end() {
                if !m.had_kv && q.first_token.is_none() {
                    q.first_token = Some(b.prefill_end());
                }
                let steps = b.steps_by(stop);
                if steps >= f64::from(b.steps(m)) {
                    q.done = Some(b.done_at(m));
                    q.committed = output;
                    q.has_kv = false;
                    continue;
                }
                q.committed += b.first + steps as u32;
                q.has_kv = true;
            }
            if migrate && q.has_kv {
                q.migrations += 1;
                q.kv_ready = kv_ready;
            } else {
                q.lose();
            }
            out.push(m.req);
        }
    }

    /// Puts interrupted requests back at the head of the queue, oldest first.
    fn requeue(&mut self, mut out: Vec<u32>) {
        out.sort_unstable();
        out.dedup();
        for id in out.into_iter().rev() {
            self.queue.push_front(id);
        }
    }

    /// When replica `r` can stop for a reconfiguration at `t` without losing
    /// work: the end of a prefill under way, else `t`.
    fn stop_time(&self, r: usize, t: f64) -> f64 {
        match &self.replicas[r].batch {
            Some(b) if b.start < t && t < b.prefill_end() => b.prefill_end(),
            _ => t,
        }
    }

    /// Preemptions and arrivals at the start of interval `k`.
    fn fleet_events(&mut self, k: usize) {
        for i in 0..self.victims[k].len() {
            let id = self.victims[k][i];
            self.insts[id].alive = false;
        }
        for i in 0..self.newcomers[k].len() {
            let id = self.newcomers[k][i];
            self.insts[id].alive = true;
        }
        let insts = &self.insts;
        self.alive.retain(|&i| insts[i].alive);
        self.alive.extend(self.newcomers[k].iter().copied());
    }

    /// Whether the deployment knows instance `i` is doomed at `t`.
    fn known_doomed(&self, i: usize, t: f64) -> bool {
        self.recovery == Recovery::TokenLevel
            && self.notice_ms > 0.0
            && self.insts[i].preempt.is_finite()
            && self.insts[i].preempt - self.notice_ms <= t
    }

    /// Instances to place replicas on, best first: `prefer` (alive ones), then
    /// started, starting, and known-doomed ones.
    fn order(&self, t: f64, prefer: &[usize]) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::with_capacity(self.alive.len());
        let mut taken = HashMap::with_capacity(self.alive.len());
        for &i in prefer {
            if self.insts[i].alive && !self.known_doomed(i, t) && taken.insert(i, ()).is_none() {
                out.push(i);
            }
        }
        let mut rest: Vec<usize> = self.alive.iter().copied().filter(|i| !taken.contains_key(i)).collect();
        rest.sort_by(|&a, &b| {
            let key = |i: usize| (self.known_doomed(i, t), self.insts[i].ready > t);
            key(a).cmp(&key(b)).then(self.insts[a].ready.total_cmp(&self.insts[b].ready)).then(a.cmp(&b))
        });
        out.extend(rest);
        out
    }

    /// Creates a replica on `gpus`, serving from `avail`.
    fn create(&mut self, gpus: Vec<Gpu>, tp: u32, avail: f64, now: f64) -> usize {
        let mut instances: Vec<usize> = Vec::new();
        for g in &gpus {
            if !instances.contains(&g.instance) {
                instances.push(g.instance);
            }
        }
        let preempt = instances.iter().map(|&i| self.insts[i].preempt).fold(f64::INFINITY, f64::min);
        let p = &self.setup.profile;
        let w = &self.setup.workload;
        let batch = self.config.map_or(1, |c| c.batch_size);
        let kv_bytes = f64::from(batch)
            * f64::from(w.input_tokens.saturating_add(w.output_tokens))
            * p.kv_bytes_per_token as f64;
        let kv_mig_ms = kv_bytes / (instances.len().max(1) as f64 * p.transfer_bytes_per_ms);
        let id = self.replicas.len();
        self.replicas.push(Replica {
            gpus,
            instances,
            tp,
            avail,
            preempt,
            kv_mig_ms,
            notice_seen: false,
            stop_at: f64::INFINITY,
            stopped: false,
            destroyed: false,
            batch: None,
            seq: 0,
            listed: false,
        });
        if avail <= now {
            self.list(id);
        } else {
            self.push(avail, Kind::Ready, id, 0);
        }
        if self.recovery == Recovery::TokenLevel && self.notice_ms > 0.0 && preempt.is_finite() {
            let notice_at = preempt - self.notice_ms;
            if notice_at <= now {
                self.notice(id, now);
            } else {
                self.push(notice_at, Kind::Notice, id, 0);
            }
        }
        id
    }

    /// Instances the deployment occupies, and when its first replica can serve.
    fn footprint(&self) -> (u32, f64) {
        let mut seen: Vec<usize> = Vec::new();
        let mut first = f64::INFINITY;
        for &r in &self.active {
            let rep = &self.replicas[r];
            first = first.min(rep.avail);
            for &i in &rep.instances {
                if !seen.contains(&i) {
                    seen.push(i);
                }
            }
        }
        (seen.len() as u32, first)
    }

    /// Applies the policy's choice at interval start `t` (`available`
    /// instances alive) under the recovery rules.
    fn reconfigure(&mut self, t: f64, chosen: Option<ServingConfig>, available: u32) {
        let old_config = self.config;
        let old_active = std::mem::take(&mut self.active);
        // What the alive instances hold, and whether a whole copy survives.
        let mut held: HashMap<usize, Held> = HashMap::new();
        let mut full_copy = false;
        let mut old_order: Vec<usize> = Vec::new();
        for &r in &old_active {
            let rep = &self.replicas[r];
            let intact = rep.instances.iter().all(|&i| self.insts[i].alive);
            if rep.avail <= t {
                full_copy |= intact;
                for (j, g) in rep.gpus.iter().enumerate() {
                    if self.insts[g.instance].alive {
                        held.entry(g.instance).or_default().add(position(j, rep.tp));
                    }
                }
            }
            for &i in &rep.instances {
                if !old_order.contains(&i) {
                    old_order.push(i);
                }
            }
        }
        // Replicas on preempted instances are gone; their requests migrated
        // already (a notice and time to move) or lose their progress now.
        let mut out = Vec::new();
        let mut lost = false;
        let mut survivors = Vec::new();
        for &r in &old_active {
            let rep = &self.replicas[r];
            let intact = rep.instances.iter().all(|&i| self.insts[i].alive);
            if intact && !rep.stopped {
                survivors.push(r);
                continue;
            }
            lost = true;
            let migrate = self.recovery == Recovery::TokenLevel && rep.notice_seen && rep.stop_at <= t;
            self.interrupt(r, t, migrate, &mut out);
            self.destroy(r);
        }
        let want = match self.recovery {
            Recovery::Reroute => {
                if self.fixed.is_none() {
                    self.fixed = chosen;
                }
                self.fixed.and_then(|shape| {
                    let gpus = available.saturating_mul(self.setup.profile.gpus_per_instance);
                    let dp = gpus / shape.gpus_per_replica().max(1);
                    (dp > 0).then_some(ServingConfig { data_parallel: dp, ..shape })
                })
            }
            _ => chosen,
        };
        let want = want.filter(|c| {
            estimate(&self.setup.profile, c, &self.setup.workload)
                .is_some_and(|e| e.prefill_ms >= 0.0 && e.decode_step_ms >= 0.0)
        });
        let old_wanted = std::mem::replace(&mut self.wanted, want);
        let mut added = 0;
        let mut removed = 0;
        match want {
            None => {
                removed += survivors.len();
                for &r in &survivors {
                    self.interrupt(r, t, false, &mut out);
                    self.destroy(r);
                }
                self.config = None;
            }
            Some(w) => {
                self.config = Some(w);
                let incremental = match self.recovery {
                    Recovery::TokenLevel => old_config.is_some_and(|o| o.same_shape(&w)),
                    Recovery::Reroute => true,
                    Recovery::Restart => false,
                };
                let unchanged = old_config.is_some() && old_wanted == Some(w) && !lost;
                if self.recovery == Recovery::Restart && unchanged {
                    self.active = survivors;
                } else if incremental {
                    // Keep survivors (not-yet-warned ones first), up to dp.
                    let mut keep = survivors.clone();
                    keep.sort_by_key(|&r| self.replicas[r].notice_seen);
                    let dropped = keep.split_off((w.data_parallel as usize).min(keep.len()));
                    removed += dropped.len();
                    for r in dropped {
                        let migrate = self.recovery == Recovery::TokenLevel;
                        let stop = if migrate { self.stop_time(r, t) } else { t };
                        self.interrupt(r, stop, migrate, &mut out);
                        self.destroy(r);
                    }
                    added += self.grow(t, w, &keep, &held, full_copy, old_config);
                } else {
                    removed += survivors.len();
                    let migrate = self.recovery == Recovery::TokenLevel;
                    let mut sources_free = t;
                    let before = out.len();
                    for &r in &survivors {
                        let stop = if migrate { self.stop_time(r, t) } else { t };
                        sources_free = sources_free.max(stop);
                        self.interrupt(r, stop, migrate, &mut out);
                        self.destroy(r);
                    }
                    let p = &self.setup.profile;
                    let w_in = self.setup.workload.input_tokens;
                    let kv_bytes: f64 = out[before..]
                        .iter()
                        .map(|&id| &self.reqs[id as usize])
                        .filter(|q| q.has_kv)
                        .map(|q| (f64::from(w_in) + f64::from(q.committed)) * p.kv_bytes_per_token as f64)
                        .sum();
                    added +=
                        self.rebuild(t, sources_free, w, &old_order, &held, full_copy, old_config, kv_bytes);
                }
                if self.active.is_empty() {
                    self.config = None;
                } else {
                    self.config = Some(ServingConfig { data_parallel: self.active.len() as u32, ..w });
                }
            }
        }
        if self.config.is_none() && self.recovery == Recovery::TokenLevel {
            // No replica left to hold a KV cache.
            for &id in &self.queue {
                let q = &mut self.reqs[id as usize];
                if q.has_kv {
                    q.lose();
                }
            }
        }
        for &id in &out {
            let q = &self.reqs[id as usize];
            if self.config.is_none() && q.has_kv {
                self.reqs[id as usize].lose();
            }
        }
        self.requeue(out);
        self.est = self.config.and_then(|c| estimate(&self.setup.profile, &c, &self.setup.workload));
        let changed = lost || added > 0 || removed > 0 || self.config != old_config;
        if changed && self.ever_deployed {
            self.reconfigurations += 1;
        }
        self.ever_deployed |= self.config.is_some();
        // The idle list may hold destroyed replicas; they are skipped lazily.
    }

    /// The zeroed mask scratch, one entry per instance.
    fn take_masks(&mut self) -> Vec<u64> {
        let mut masks = std::mem::take(&mut self.masks);
        masks.resize(self.insts.len(), 0);
        masks
    }

    /// Returns the scratch, zeroed again.
    fn put_masks(&mut self, mut masks: Vec<u64>) {
        for &i in &self.alive {
            masks[i] = 0;
        }
        self.masks = masks;
    }

    fn destroy(&mut self, r: usize) {
        let rep = &mut self.replicas[r];
        rep.destroyed = true;
        rep.batch = None;
        rep.gpus = Vec::new();
    }

    /// Weight bytes each instance of `gpus` lacks for shape `(tp, pp)`.
    fn missing(
        &self,
        gpus: &[Gpu],
        slicing: &Slicing,
        held: Option<&HashMap<usize, Held>>,
    ) -> Vec<(usize, f64)> {
        let mut per: Vec<(usize, f64)> = Vec::new();
        for (j, g) in gpus.iter().enumerate() {
            let bytes =
                slicing.missing_bytes(position(j, slicing.new.0), held.and_then(|h| h.get(&g.instance)));
            match per.iter_mut().find(|(i, _)| *i == g.instance) {
                Some(entry) => entry.1 += bytes,
                None => per.push((g.instance, bytes)),
            }
        }
        per
    }

    fn slicing(&self, old: Option<ServingConfig>, new: &ServingConfig) -> Slicing {
        Slicing {
            layers: self.setup.profile.layers,
            weight_bytes: self.setup.profile.weight_bytes as f64,
            old: old.map(|o| (o.tensor_parallel, o.pipeline_stages)),
            new: (new.tensor_parallel, new.pipeline_stages),
        }
    }

    /// When a new replica on `gpus` can serve: each instance starts receiving
    /// at `from` (or when it has started), its missing weights at `rate`, its
    /// `kv_share` at the transfer rate; then reinit.
    fn join_time(&self, per: &[(usize, f64)], from: f64, rate: f64, kv_share: f64) -> f64 {
        let p = &self.setup.profile;
        let ready = per
            .iter()
            .map(|&(i, bytes)| {
                from.max(self.insts[i].ready) + bytes / rate + kv_share / p.transfer_bytes_per_ms
            })
            .fold(from, f64::max);
        ready + p.reinit_ms
    }

    /// Adds replicas of `w`'s shape next to `keep` (kept as they are) up to
    /// `w.data_parallel`; returns how many were added.
    fn grow(
        &mut self,
        t: f64,
        w: ServingConfig,
        keep: &[usize],
        held: &HashMap<usize, Held>,
        full_copy: bool,
        old: Option<ServingConfig>,
    ) -> usize {
        let gpi = self.setup.profile.gpus_per_instance;
        let mut used = self.take_masks();
        let mut prefer = Vec::new();
        for &r in keep {
            for g in &self.replicas[r].gpus {
                used[g.instance] |= 1u64 << g.index;
                if !prefer.contains(&g.instance) {
                    prefer.push(g.instance);
                }
            }
        }
        let order = self.order(t, &prefer);
        let missing = w.data_parallel.saturating_sub(keep.len() as u32);
        let placed = place(&order, &mut used, gpi, w.tensor_parallel, w.pipeline_stages, missing);
        self.put_masks(used);
        self.active = keep.to_vec();
        let count = placed.len();
        // Token-level copies from peers when a whole copy survives; the
        // baselines (and token-level without a copy) load from storage.
        let from_peers = self.recovery == Recovery::TokenLevel && full_copy;
        let slicing = self.slicing(old, &w);
        let p = &self.setup.profile;
        let rate = if from_peers { p.transfer_bytes_per_ms } else { p.load_bytes_per_ms };
        let held = (self.recovery == Recovery::TokenLevel).then_some(held);
        for gpus in placed {
            let per = self.missing(&gpus, &slicing, held);
            let avail = self.join_time(&per, t, rate, 0.0);
            let id = self.create(gpus, w.tensor_parallel, avail, t);
            self.active.push(id);
        }
        count
    }

    /// Places all of `w` afresh (a new shape, a restart, the first start);
    /// sources are free from `sources_free`; `kv_bytes` of interrupted
    /// requests travel too. Returns how many replicas were placed.
    #[allow(
        clippy::too_many_arguments,
        reason = "the reconfiguration's inputs, each distinct; one call site"
    )]
    fn rebuild(
        &mut self,
        t: f64,
        sources_free: f64,
        w: ServingConfig,
        old_order: &[usize],
        held: &HashMap<usize, Held>,
        full_copy: bool,
        old: Option<ServingConfig>,
        kv_bytes: f64,
    ) -> usize {
        let gpi = self.setup.profile.gpus_per_instance;
        let mut used = self.take_masks();
        let order = self.order(t, old_order);
        let placed = place(&order, &mut used, gpi, w.tensor_parallel, w.pipeline_stages, w.data_parallel);
        self.put_masks(used);
        let token_level = self.recovery == Recovery::TokenLevel;
        let slicing = self.slicing(old, &w);
        let p = &self.setup.profile;
        let rate = if token_level && full_copy { p.transfer_bytes_per_ms } else { p.load_bytes_per_ms };
        let held = token_level.then_some(held);
        let mut instances: Vec<usize> = placed.iter().flatten().map(|g| g.instance).collect();
        instances.sort_unstable();
        instances.dedup();
        let kv_share = if token_level { kv_bytes / instances.len().max(1) as f64 } else { 0.0 };
        let count = placed.len();
        for gpus in placed {
            let per = self.missing(&gpus, &slicing, held);
            let avail = self.join_time(&per, sources_free, rate, kv_share);
            let id = self.create(gpus, w.tensor_parallel, avail, t);
            self.active.push(id);
        }
        count
    }
}
