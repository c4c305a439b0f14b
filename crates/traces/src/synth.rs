//! Synthetic availability traces: stress shapes the public traces do not
//! cover, and look-alikes fitted to a real trace, so that a policy is judged
//! on fleets it was never tuned on.
//!
//! Every trace comes from one small generative model, seeded and
//! deterministic (the same [`SynthSpec`] always gives the same bytes):
//!
//! - a **capacity** `C(t)`: how many instances the cloud would grant now
//!   (flat, or a diurnal wave between a trough and a peak);
//! - **preemption events** arriving as a Poisson process of `rate` per alive
//!   instance-hour; each takes a burst of instances whose size is drawn from
//!   `burst_sizes` (a single instance, a few, or a fraction of the fleet);
//! - **fleet wipes**: with mean gap `wipe_every_hours`, every alive instance
//!   is taken at once (the notice-less worst case of a zone running dry);
//! - **refill**: while fewer than `C(t)` instances are alive, each missing one
//!   arrives after an exponential delay of mean `refill_minutes` (after a
//!   wipe, nothing arrives for `wipe_outage_minutes`); when `C(t)` drops
//!   below the alive count, the surplus is preempted at once.
//!
//! [`Scenario`] names the stress shapes (whole-fleet wipes, diurnal waves,
//! slow churn, long calm); [`SynthSpec::fitted`] reads the rates of a real
//! trace (preemptions per instance-hour, burst sizes per interval, time to
//! replace a preempted instance, peak fleet) so a look-alike can be drawn
//! with other seeds and lengths.
//!
//! [`BoundedLifetimes`] is a second, simpler model outside that one: every
//! instance lives a time drawn from a range (Poisson preemptions have no
//! memory; a lifetime does) and is replaced after a fixed delay.

use std::fmt::Write as _;
use std::path::Path;

use crate::{EventKind, Trace, TraceError};

/// The named stress shapes (see the module documentation for the model).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// Up to 16 instances; single preemptions now and then, and every few
    /// hours the whole fleet taken at once, then refilled over minutes.
    FleetWipes,
    /// Capacity follows a 24 h wave between 8 and 32 instances; the falls
    /// preempt in bursts, the rises refill.
    Diurnal,
    /// 30-80 instances; frequent single preemptions, each replaced within
    /// minutes (a busy pool where nothing big happens).
    SlowChurn,
    /// 17-64 instances; rare preemptions, long quiet stretches.
    LongCalm,
}

impl Scenario {
    /// Every named scenario, in a fixed order.
    pub const ALL: [Scenario; 4] =
        [Scenario::FleetWipes, Scenario::Diurnal, Scenario::SlowChurn, Scenario::LongCalm];

    /// The name used on the command line and in file names.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::FleetWipes => "fleet-wipes",
            Scenario::Diurnal => "diurnal",
            Scenario::SlowChurn => "slow-churn",
            Scenario::LongCalm => "long-calm",
        }
    }

    /// The generator's parameters for this shape, `hours` long.
    pub fn spec(self, hours: f64, seed: u64) -> SynthSpec {
        let base = SynthSpec {
            name: self.name().to_string(),
            seed,
            hours,
            peak: 16,
            trough: 16,
            wave_hours: 24.0,
            start: 16,
            rate_per_instance_hour: 0.02,
            burst_sizes: vec![(1, 1.0)],
            wipe_every_hours: None,
            wipe_outage_minutes: 0.0,
            refill_minutes: 5.0,
        };
        match self {
            Scenario::FleetWipes => SynthSpec {
                rate_per_instance_hour: 0.03,
                burst_sizes: vec![(1, 0.8), (2, 0.2)],
                wipe_every_hours: Some(6.0),
                wipe_outage_minutes: 20.0,
                refill_minutes: 6.0,
                ..base
            },
            Scenario::Diurnal => SynthSpec {
                peak: 32,
                trough: 8,
                start: 20,
                rate_per_instance_hour: 0.04,
                burst_sizes: vec![(1, 0.7), (2, 0.2), (4, 0.1)],
                refill_minutes: 8.0,
                ..base
            },
            Scenario::SlowChurn => SynthSpec {
                peak: 80,
                trough: 30,
                wave_hours: 10.0,
                start: 60,
                rate_per_instance_hour: 0.25,
                burst_sizes: vec![(1, 0.9), (2, 0.1)],
                refill_minutes: 3.0,
                ..base
            },
            Scenario::LongCalm => SynthSpec {
                peak: 64,
                trough: 17,
                wave_hours: 48.0,
                start: 40,
                rate_per_instance_hour: 0.01,
                burst_sizes: vec![(1, 0.85), (3, 0.15)],
                refill_minutes: 12.0,
                ..base
            },
        }
    }
}

impl std::str::FromStr for Scenario {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scenario::ALL.into_iter().find(|sc| sc.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Scenario::ALL.iter().map(|sc| sc.name()).collect();
            format!("unknown scenario '{s}' (expected one of: {})", names.join(", "))
        })
    }
}

/// The generator's parameters (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct SynthSpec {
    /// A label for the trace (the file stem, by convention).
    pub name: String,
    /// Seed of the random draws.
    pub seed: u64,
    /// Length of the trace.
    pub hours: f64,
    /// Capacity at the crest of the wave (and the cap on alive instances).
    pub peak: u32,
    /// Capacity at the trough (`== peak` for a flat capacity).
    pub trough: u32,
    /// Period of the capacity wave.
    pub wave_hours: f64,
    /// Instances alive at t = 0.
    pub start: u32,
    /// Preemption events per alive instance-hour.
    pub rate_per_instance_hour: f64,
    /// `(instances taken, weight)`: the size of one preemption event.
    pub burst_sizes: Vec<(u32, f64)>,
    /// Mean hours between whole-fleet wipes (`None`: never).
    pub wipe_every_hours: Option<f64>,
    /// Nothing arrives for this long after a wipe.
    pub wipe_outage_minutes: f64,
    /// Mean delay before a missing instance is granted again.
    pub refill_minutes: f64,
}

/// Why a [`SynthSpec`] cannot be generated.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SynthError {
    /// A parameter is out of its range.
    #[error("synthetic trace '{name}': {field} = {value}: {reason}")]
    Parameter {
        /// The spec's name.
        name: String,
        /// The offending field.
        field: &'static str,
        /// Its value, printed.
        value: String,
        /// What it must be.
        reason: &'static str,
    },
    /// A bounded-lifetime spec ([`BoundedLifetimes::from_spec`]) not of the
    /// form `PLACES:MIN_H-MAX_H:REFILL_MIN`.
    #[error(
        "'{text}': expected PLACES:MIN_H-MAX_H:REFILL_MIN, e.g. 32:1-3:5 (32 places, lifetimes of 1 to 3 \
         hours, refilled after 5 minutes)"
    )]
    Spec {
        /// The name the trace would have had.
        name: String,
        /// The spec as given.
        text: String,
    },
    /// The trace to fit has no instance-hours to read rates from.
    #[error("{path}: cannot fit a synthetic trace: {reason}")]
    Unfittable {
        /// The trace's source.
        path: String,
        /// Why.
        reason: &'static str,
    },
}

impl SynthError {
    /// The trace the error is about: the synthetic trace's name, or the file fitted.
    pub fn path(&self) -> &Path {
        match self {
            SynthError::Unfittable { path, .. } => Path::new(path),
            SynthError::Parameter { name, .. } | SynthError::Spec { name, .. } => Path::new(name),
        }
    }
}

impl SynthSpec {
    /// Rates read from `trace` (cut into `interval_ms` intervals): the peak
    /// fleet, preemption events per alive instance-hour (an interval with
    /// preemptions counts as one event of that size), the burst-size mix, and
    /// the mean time from a preemption to the next arrival (the refill delay).
    pub fn fitted(
        trace: &Trace,
        interval_ms: u64,
        name: &str,
        hours: f64,
        seed: u64,
    ) -> Result<Self, TraceError> {
        let unfittable = |reason| {
            TraceError::from(SynthError::Unfittable { path: trace.source().display().to_string(), reason })
        };
        let series = trace.series(interval_ms)?;
        let mut instance_hours = 0.0;
        let mut events = 0u64;
        let mut bursts: Vec<(u32, f64)> = Vec::new();
        let mut peak = 0u32;
        for (k, stats) in series.intervals.iter().enumerate() {
            let before = series.instances_before(k);
            peak = peak.max(before).max(stats.instances);
            instance_hours += f64::from(before) * interval_ms as f64 / 3_600_000.0;
            if stats.preemptions > 0 {
                events += 1;
                match bursts.iter_mut().find(|(size, _)| *size == stats.preemptions) {
                    Some((_, weight)) => *weight += 1.0,
                    None => bursts.push((stats.preemptions, 1.0)),
                }
            }
        }
        if instance_hours <= 0.0 || peak == 0 {
            return Err(unfittable("the trace never has an instance alive"));
        }
        bursts.sort_by_key(|&(size, _)| size);
        if bursts.is_empty() {
            bursts.push((1, 1.0));
        }
        // Refill delay: from each removal to the next addition after it.
        let mut delays = Vec::new();
        let removal_times: Vec<u64> =
            trace.events().iter().filter(|e| e.kind == EventKind::Remove).map(|e| e.t_ms).collect();
        let additions: Vec<u64> =
            trace.events().iter().filter(|e| e.kind == EventKind::Add).map(|e| e.t_ms).collect();
        for t in removal_times {
            if let Some(&a) = additions.iter().find(|&&a| a > t) {
                delays.push((a - t) as f64 / 60_000.0);
            }
        }
        let refill_minutes =
            if delays.is_empty() { 10.0 } else { delays.iter().sum::<f64>() / delays.len() as f64 };
        let start = series.intervals.first().map_or(peak, |s| s.instances).max(1);
        Ok(SynthSpec {
            name: name.to_string(),
            seed,
            hours,
            peak,
            trough: peak,
            wave_hours: 24.0,
            start: start.min(peak),
            rate_per_instance_hour: events as f64 / instance_hours,
            burst_sizes: bursts,
            wipe_every_hours: None,
            wipe_outage_minutes: 0.0,
            refill_minutes: refill_minutes.max(0.5),
        })
    }

    fn check(&self) -> Result<(), SynthError> {
        let bad = |field, value: String, reason| {
            Err(SynthError::Parameter { name: self.name.clone(), field, value, reason })
        };
        if !(self.hours.is_finite() && self.hours > 0.0 && self.hours <= 10_000.0) {
            return bad("hours", self.hours.to_string(), "must be in (0, 10000]");
        }
        if self.peak == 0 || self.peak > 8192 {
            return bad("peak", self.peak.to_string(), "must be in 1..=8192");
        }
        if self.trough > self.peak {
            return bad("trough", self.trough.to_string(), "must not exceed peak");
        }
        if self.start > self.peak {
            return bad("start", self.start.to_string(), "must not exceed peak");
        }
        if !(self.wave_hours.is_finite() && self.wave_hours > 0.0) {
            return bad("wave_hours", self.wave_hours.to_string(), "must be positive");
        }
        if !(self.rate_per_instance_hour.is_finite() && self.rate_per_instance_hour >= 0.0) {
            return bad("rate_per_instance_hour", self.rate_per_instance_hour.to_string(), "must be >= 0");
        }
        if self.burst_sizes.is_empty()
            || self.burst_sizes.iter().any(|&(size, w)| size == 0 || !(w.is_finite() && w > 0.0))
        {
            return bad(
                "burst_sizes",
                format!("{:?}", self.burst_sizes),
                "needs sizes >= 1 with positive weights",
            );
        }
        if let Some(h) = self.wipe_every_hours
            && !(h.is_finite() && h > 0.0)
        {
            return bad("wipe_every_hours", h.to_string(), "must be positive");
        }
        if !(self.refill_minutes.is_finite() && self.refill_minutes > 0.0) {
            return bad("refill_minutes", self.refill_minutes.to_string(), "must be positive");
        }
        if !(self.wipe_outage_minutes.is_finite() && self.wipe_outage_minutes >= 0.0) {
            return bad("wipe_outage_minutes", self.wipe_outage_minutes.to_string(), "must be >= 0");
        }
        Ok(())
    }

    /// Capacity at time `t_ms`.
    fn capacity(&self, t_ms: u64) -> u32 {
        if self.trough == self.peak {
            return self.peak;
        }
        let phase = t_ms as f64 / (self.wave_hours * 3_600_000.0) * std::f64::consts::TAU;
        let mid = f64::from(self.peak + self.trough) / 2.0;
        let amplitude = f64::from(self.peak - self.trough) / 2.0;
        // Starts at the crest.
        (mid + amplitude * phase.cos()).round().clamp(f64::from(self.trough), f64::from(self.peak)) as u32
    }

    /// The trace as canonical event CSV (`t_ms,op,node`, see `data/traces/README.md`).
    pub fn generate_csv(&self) -> Result<String, SynthError> {
        self.check()?;
        const STEP_MS: u64 = 1_000;
        let end_ms = (self.hours * 3_600_000.0).round() as u64;
        let mut rng = SplitMix64(self.seed ^ 0x5EED_0F7E_ACE5);
        let mut out = String::from("t_ms,op,node\n");
        let mut alive: Vec<u64> = Vec::new();
        let mut next_id = 1u64;
        // Arrival times of instances already granted but not yet joined.
        let mut pending: Vec<u64> = Vec::new();
        let mut outage_until = 0u64;
        let total_weight: f64 = self.burst_sizes.iter().map(|&(_, w)| w).sum();
        let per_step = |rate_per_hour: f64| rate_per_hour * STEP_MS as f64 / 3_600_000.0;
        let mut add = |t: u64, alive: &mut Vec<u64>, out: &mut String| {
            alive.push(next_id);
            let _ = writeln!(out, "{t},add,n{next_id}");
            next_id += 1;
        };
        for _ in 0..self.start {
            add(0, &mut alive, &mut out);
        }
        let mut t = STEP_MS;
        while t < end_ms {
            let capacity = self.capacity(t);
            // Fleet wipe.
            if let Some(h) = self.wipe_every_hours
                && !alive.is_empty()
                && rng.unit() < per_step(1.0 / h)
            {
                let everyone = alive.len();
                remove(&mut rng, &mut alive, everyone, t, &mut out);
                pending.clear();
                outage_until = t + (self.wipe_outage_minutes * 60_000.0) as u64;
            }
            // Preemption events: rate per alive instance-hour.
            if !alive.is_empty() && rng.unit() < per_step(self.rate_per_instance_hour * alive.len() as f64) {
                let mut pick = rng.unit() * total_weight;
                let mut size = self.burst_sizes[0].0;
                for &(s, w) in &self.burst_sizes {
                    size = s;
                    if pick < w {
                        break;
                    }
                    pick -= w;
                }
                remove(&mut rng, &mut alive, size as usize, t, &mut out);
            }
            // Capacity fell below the fleet: the surplus goes now.
            if alive.len() > capacity as usize {
                let surplus = alive.len() - capacity as usize;
                remove(&mut rng, &mut alive, surplus, t, &mut out);
            }
            // Refill: each missing instance is granted after an exponential delay.
            let missing = (capacity as usize).saturating_sub(alive.len() + pending.len());
            if t >= outage_until {
                for _ in 0..missing {
                    let delay = -self.refill_minutes * 60_000.0 * (1.0 - rng.unit()).ln();
                    pending.push(t + (delay.round() as u64).max(STEP_MS));
                }
            }
            pending.sort_unstable();
            while pending.first().is_some_and(|&p| p <= t) {
                pending.remove(0);
                if alive.len() < self.capacity(t) as usize {
                    add(t, &mut alive, &mut out);
                }
            }
            t += STEP_MS;
        }
        end_row(&mut out, end_ms);
        Ok(out)
    }

    /// The trace, parsed back through the canonical loader (so it obeys every
    /// invariant a file would), named `<name>.csv`.
    pub fn generate(&self) -> Result<Trace, TraceError> {
        let csv = self.generate_csv()?;
        crate::parse(Path::new(&format!("{}.csv", self.name)), csv.as_bytes(), Some(crate::Format::EventsCsv))
    }
}

/// A fleet of instances that each live a bounded time and are replaced a fixed
/// delay after they go: `places` places, each holding one instance at a time
/// whose lifetime is drawn uniformly from `[min_hours, max_hours]`, refilled
/// `refill_minutes` after it is taken. Preemptible VMs in a managed group
/// behave so (GCP's live at most 24 h and the group recreates them). Not one
/// of the stress [`Scenario`]s of the tables: the held-out check of the
/// default policy's choice of count forecast (README, *Bounded lifetimes*;
/// `crates/sim/examples/lifetimes.rs` scores it).
#[derive(Debug, Clone, PartialEq)]
pub struct BoundedLifetimes {
    /// A label for the trace (the file stem, by convention).
    pub name: String,
    /// Seed of the random draws.
    pub seed: u64,
    /// Length of the trace.
    pub hours: f64,
    /// Instances alive at once when every place is filled.
    pub places: u32,
    /// Shortest lifetime of an instance.
    pub min_hours: f64,
    /// Longest lifetime of an instance.
    pub max_hours: f64,
    /// Delay from an instance's loss to its replacement.
    pub refill_minutes: f64,
}

impl BoundedLifetimes {
    /// The generator `PLACES:MIN_H-MAX_H:REFILL_MIN` names (`32:1-3:5`: 32
    /// places, lifetimes of 1 to 3 hours, refilled after 5 minutes), as
    /// `trace synth --lifetimes` and the tests write it. Only the form is
    /// checked here; the ranges are checked when it generates, naming the
    /// field.
    pub fn from_spec(text: &str, name: String, hours: f64, seed: u64) -> Result<Self, SynthError> {
        let form = || SynthError::Spec { name: name.clone(), text: text.to_string() };
        let [places, range, refill] = text.split(':').collect::<Vec<_>>()[..] else { return Err(form()) };
        let (min, max) = range.split_once('-').ok_or_else(form)?;
        let number = |s: &str| s.trim().parse::<f64>().map_err(|_| form());
        let places = places.trim().parse().map_err(|_| form())?;
        let (min_hours, max_hours, refill_minutes) = (number(min)?, number(max)?, number(refill)?);
        Ok(BoundedLifetimes { name, seed, hours, places, min_hours, max_hours, refill_minutes })
    }

    fn check(&self) -> Result<(), SynthError> {
        let bad = |field, value: String, reason| {
            Err(SynthError::Parameter { name: self.name.clone(), field, value, reason })
        };
        if !(self.hours.is_finite() && self.hours > 0.0 && self.hours <= 10_000.0) {
            return bad("hours", self.hours.to_string(), "must be in (0, 10000]");
        }
        if self.places == 0 || self.places > 8192 {
            return bad("places", self.places.to_string(), "must be in 1..=8192");
        }
        if !(self.min_hours.is_finite() && self.min_hours > 0.0) {
            return bad("min_hours", self.min_hours.to_string(), "must be positive");
        }
        if !(self.max_hours.is_finite() && self.max_hours >= self.min_hours) {
            return bad("max_hours", self.max_hours.to_string(), "must be at least min_hours");
        }
        if !(self.refill_minutes.is_finite() && self.refill_minutes >= 0.0) {
            return bad("refill_minutes", self.refill_minutes.to_string(), "must be >= 0");
        }
        Ok(())
    }

    /// The trace as canonical event CSV (`t_ms,op,node`, see `data/traces/README.md`).
    pub fn generate_csv(&self) -> Result<String, SynthError> {
        self.check()?;
        let hour_ms = 3_600_000.0;
        let end_ms = (self.hours * hour_ms).round() as u64;
        let refill_ms = (self.refill_minutes * 60_000.0).round() as u64;
        let mut rng = SplitMix64(self.seed ^ 0x11FE_71E5);
        // `(t_ms, removes first, node)`; each place's instances one after another.
        let mut events: Vec<(u64, bool, u64)> = Vec::new();
        let mut next_id = 1u64;
        for _ in 0..self.places {
            let mut t = 0u64;
            while t < end_ms {
                let id = next_id;
                next_id += 1;
                events.push((t, false, id));
                let life = self.min_hours + (self.max_hours - self.min_hours) * rng.unit();
                let gone = t + ((life * hour_ms).round() as u64).max(1);
                if gone >= end_ms {
                    break;
                }
                events.push((gone, true, id));
                t = gone + refill_ms;
            }
        }
        // By time, losses before arrivals at the same time (a place refilled
        // at once frees its slot first), then by node.
        events.sort_unstable_by_key(|&(t, removes, id)| (t, !removes, id));
        let mut out = String::from("t_ms,op,node\n");
        for (t, removes, id) in events {
            let _ = writeln!(out, "{t},{},n{id}", if removes { "remove" } else { "add" });
        }
        end_row(&mut out, end_ms);
        Ok(out)
    }

    /// The trace, parsed back through the canonical loader (so it obeys every
    /// invariant a file would), named `<name>.csv`.
    pub fn generate(&self) -> Result<Trace, TraceError> {
        let csv = self.generate_csv()?;
        crate::parse(Path::new(&format!("{}.csv", self.name)), csv.as_bytes(), Some(crate::Format::EventsCsv))
    }
}

/// Ends a generated events CSV at `end_ms`, its hours: the canonical format
/// otherwise ends at the last event, and a fleet calm in its last hour (or in
/// all of a short trace) would lose that hour.
fn end_row(out: &mut String, end_ms: u64) {
    let _ = writeln!(out, "{end_ms},end,");
}

/// Takes `count` random instances (all of them when `count >= alive`).
fn remove(rng: &mut SplitMix64, alive: &mut Vec<u64>, count: usize, t: u64, out: &mut String) {
    for _ in 0..count.min(alive.len()) {
        let i = (rng.unit() * alive.len() as f64) as usize % alive.len();
        let id = alive.swap_remove(i);
        let _ = writeln!(out, "{t},remove,n{id}");
    }
}

/// SplitMix64 (Steele et al., OOPSLA'14): tiny, seeded, reproducible bit for bit.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: u64 = 60_000;

    #[test]
    fn same_spec_same_bytes_other_seed_other_bytes() {
        let a = Scenario::SlowChurn.spec(6.0, 1).generate_csv().unwrap();
        let b = Scenario::SlowChurn.spec(6.0, 1).generate_csv().unwrap();
        let c = Scenario::SlowChurn.spec(6.0, 2).generate_csv().unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn fleet_wipes_take_the_whole_fleet_at_once() {
        let trace = Scenario::FleetWipes.spec(48.0, 7).generate().unwrap();
        let series = trace.series(MINUTE).unwrap();
        let wipes = (0..series.len())
            .filter(|&k| {
                let before = series.instances_before(k);
                before >= 8 && series.intervals[k].preemptions >= before
            })
            .count();
        assert!(wipes >= 3, "expected several whole-fleet wipes in 48 h, saw {wipes}");
        let stats = trace.stats(MINUTE).unwrap();
        assert_eq!(stats.max_instances, 16);
        assert_eq!(stats.min_instances, 0);
    }

    #[test]
    fn diurnal_follows_the_wave() {
        let spec = Scenario::Diurnal.spec(48.0, 3);
        let trace = spec.generate().unwrap();
        let series = trace.series(MINUTE).unwrap();
        let at = |hour: usize| series.intervals[hour * 60].instances;
        // Crest at 0 h and 24 h, trough at 12 h and 36 h.
        assert!(at(12) + 10 < at(1).max(at(23)), "trough {} vs crest {}", at(12), at(23));
        assert!(at(36) + 10 < at(25), "trough {} vs crest {}", at(36), at(25));
        assert!(series.intervals.iter().all(|s| s.instances <= spec.peak));
    }

    #[test]
    fn churn_is_busier_than_calm() {
        let churn = Scenario::SlowChurn.spec(24.0, 5).generate().unwrap().stats(MINUTE).unwrap();
        let calm = Scenario::LongCalm.spec(24.0, 5).generate().unwrap().stats(MINUTE).unwrap();
        let per_instance_hour =
            |s: &crate::TraceStats| s.preemptions as f64 / (s.mean_instances * s.duration_hours);
        assert!(per_instance_hour(&churn) > 4.0 * per_instance_hour(&calm));
        assert!(churn.min_instances >= 20 && churn.max_instances <= 80, "{churn}");
        assert!(calm.min_instances >= 10 && calm.max_instances <= 64, "{calm}");
    }

    #[test]
    fn fitted_reads_the_rates_back() {
        // Flat capacity, so every preemption comes from the rate being fitted.
        let original = SynthSpec { trough: 80, ..Scenario::SlowChurn.spec(24.0, 11) };
        let trace = original.generate().unwrap();
        let fitted = SynthSpec::fitted(&trace, MINUTE, "look-alike", 24.0, 12).unwrap();
        assert_eq!(fitted.peak, trace.stats(MINUTE).unwrap().max_instances);
        // Interval-level events are a little rarer than the 1 s draws (two in one
        // minute merge), so the fitted rate is close to, not above, the truth.
        let ratio = fitted.rate_per_instance_hour / original.rate_per_instance_hour;
        assert!((0.6..=1.1).contains(&ratio), "fitted rate ratio {ratio}");
        assert!(fitted.refill_minutes > 0.5 && fitted.refill_minutes < 30.0, "{}", fitted.refill_minutes);
        let again = fitted.generate().unwrap();
        assert!(again.stats(MINUTE).unwrap().preemptions > 0);
    }

    #[test]
    fn bad_parameters_are_named() {
        let mut spec = Scenario::LongCalm.spec(1.0, 1);
        spec.trough = spec.peak + 1;
        let err = spec.generate_csv().unwrap_err();
        assert!(err.to_string().contains("trough"), "{err}");
        let mut spec = Scenario::LongCalm.spec(1.0, 1);
        spec.burst_sizes = vec![(0, 1.0)];
        assert!(spec.generate_csv().unwrap_err().to_string().contains("burst_sizes"));
        let mut spec = Scenario::LongCalm.spec(1.0, 1);
        spec.hours = f64::NAN;
        assert!(spec.generate_csv().unwrap_err().to_string().contains("hours"));
    }

    #[test]
    fn bounded_lifetimes_keep_every_place_filled_but_for_its_refills() {
        let spec = BoundedLifetimes::from_spec("8:1-3:5", "lifetimes".into(), 12.0, 5).unwrap();
        assert_eq!(
            spec,
            BoundedLifetimes {
                name: "lifetimes".into(),
                seed: 5,
                hours: 12.0,
                places: 8,
                min_hours: 1.0,
                max_hours: 3.0,
                refill_minutes: 5.0,
            }
        );
        for malformed in ["8:1-3", "8:1:3:5", "eight:1-3:5", "8:1-x:5", "8:13:5", ""] {
            let err = BoundedLifetimes::from_spec(malformed, "x".into(), 1.0, 1).unwrap_err();
            assert!(matches!(&err, SynthError::Spec { text, .. } if text == malformed), "{malformed}: {err}");
            assert_eq!(err.path(), Path::new("x"), "the error names the trace");
            assert!(err.to_string().contains("expected PLACES:MIN_H-MAX_H:REFILL_MIN"), "{err}");
        }
        assert_eq!(spec.generate_csv().unwrap(), spec.generate_csv().unwrap(), "seeded");
        let series = spec.generate().unwrap().series(60_000).unwrap().intervals;
        // The canonical format ends at the last event, within the 12 h.
        assert!(series.len() <= 12 * 60 && series.len() > 11 * 60, "{} intervals", series.len());
        assert_eq!(series[0].instances, 8);
        // Each place is empty only during its refills, at most 5 minutes after
        // each loss: never more places empty than losses in the last 5 minutes.
        let preempted: u32 = series.iter().map(|s| s.preemptions).sum();
        let arrived: u32 = series.iter().map(|s| s.arrivals).sum();
        assert!(preempted >= 8 * 3, "lifetimes of 1-3 h over 12 h: {preempted} losses");
        for (k, s) in series.iter().enumerate() {
            let recent: u32 = series[k.saturating_sub(5)..=k].iter().map(|s| s.preemptions).sum();
            assert!(s.instances <= 8 && 8 - s.instances <= recent, "interval {k}: {s:?}");
        }
        assert!(arrived >= preempted, "every loss refilled, and the first 8 arrive at 0");
        let err = BoundedLifetimes { max_hours: 0.5, ..spec.clone() }.generate_csv().unwrap_err();
        assert!(err.to_string().contains("max_hours") && err.to_string().contains("lifetimes"), "{err}");
        let err = BoundedLifetimes { places: 0, ..spec }.generate_csv().unwrap_err();
        assert!(err.to_string().contains("places"), "{err}");
    }

    #[test]
    fn named_scenarios_parse() {
        for sc in Scenario::ALL {
            assert_eq!(sc.name().parse::<Scenario>().unwrap(), sc);
        }
        assert!("nope".parse::<Scenario>().unwrap_err().contains("fleet-wipes"));
    }
}
