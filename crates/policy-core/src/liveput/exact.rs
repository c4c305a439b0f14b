//! The exact distribution of a transition's cost over the preemption scenarios.
//!
//! With `n` of the `N` instances preempted uniformly without replacement, the
//! numbers `k_j` preempted in each stage (of `D` replicas) and `k_s` among the
//! `S` spares have probability `prod_j C(D, k_j) C(S, k_s) / C(N, n)` with
//! `sum = n`. Every quantity needed is a sum of that product over a set of
//! vectors `k` that is a product of per-stage sets, possibly weighted by a sum
//! of per-stage terms, and split by `c = sum_j k_j` (which decides add or
//! remove). Such a sum is a coefficient of a product of per-stage polynomials:
//! one pass over the stages with the running `c` as state, then one pass over
//! `c` against the spares' weights. The binomial coefficients are replaced by
//! binomial probabilities with `pi = n / N` (a common factor that cancels), so
//! every partial sum lies in `[0, 1]` and nothing overflows for any `N`.

use super::plan::{Model, Rule, Wiped};
use super::{LiveputError, MigrationKind, MigrationMode, Outcome, TransitionDistribution};
use crate::ParallelConfig;

/// Preemption weights for one old layout and one number of preemptions.
#[derive(Debug, Clone)]
struct Hyper {
    /// Preempted instances `n`.
    n: usize,
    /// Old stages `P`.
    stages: usize,
    /// `w[k]`, `k = 0..=min(D, n)`: weight of `k` preemptions in one stage.
    w: Vec<f64>,
    /// `spare[k]`, `k = 0..=min(S, n)`: weight of `k` preemptions among spares.
    spare: Vec<f64>,
    /// The dynamic program's rows, reused by every [`Hyper::run`] (a sweep
    /// runs one per threshold, and the distributions of every new layout of
    /// one [`FromStep`] run theirs here; in a guest each allocation costs
    /// fuel).
    rows: std::cell::RefCell<Rows>,
}

/// The running sums of [`Hyper::run`]: masses and moments by count, current
/// and next stage.
#[derive(Debug, Clone, Default)]
struct Rows {
    cur: Vec<f64>,
    next: Vec<f64>,
    cur_m: Vec<f64>,
    next_m: Vec<f64>,
    /// `cur` after each stage (`n + 1` per stage) of the last run that saved
    /// them: where a threshold sweep's next run may resume.
    saved: Vec<f64>,
}

/// Where [`Hyper::program_from`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resume {
    /// From the first stage, nothing saved.
    Afresh,
    /// From this stage, on the rows the last saving run left after the one
    /// before (that run's allowed counts being the same for every stage
    /// before it), saving the rows after each stage it runs. `At(0)` runs
    /// every stage.
    At(usize),
}

/// Stage-holder preemptions `c <= split` leave enough holders for the new
/// layout (type remove); `None`: it always needs new members (type add).
type Split = Option<u64>;

/// The masses by number `c` of stage holders preempted (before the spares'
/// weights), for `c` in `lo..lo + by_count.len()`: a [`Hyper::run`] stopped
/// before it splits by type, which is the only part that depends on the new
/// layout.
#[derive(Debug, Clone, Default)]
struct Counts {
    lo: usize,
    by_count: Vec<f64>,
}

impl Counts {
    /// `[mass of type remove, mass of type add]`: the end of [`Hyper::run`]
    /// ([`Hyper::fold`], so the same bits).
    fn split(&self, h: &Hyper, split: Split) -> [f64; 2] {
        let [r, a, _] = h.fold(self.lo, &self.by_count, &[], split);
        [r, a]
    }
}

impl Hyper {
    fn new(instances: usize, d_old: usize, stages: usize, n: usize) -> Hyper {
        let spares = instances - d_old * stages;
        Hyper {
            n,
            stages,
            w: binomial_weights(d_old, n, instances),
            spare: binomial_weights(spares, n, instances),
            rows: std::cell::RefCell::default(),
        }
    }

    /// Weighted sums over the vectors `k` with `allowed(j, k_j)` for every stage
    /// `j`: `[mass of type remove, mass of type add, sum of mass x sum_j
    /// value(j, k_j)]` (unnormalised).
    fn run(
        &self,
        allowed: impl Fn(usize, usize) -> bool,
        value: Option<&dyn Fn(usize, usize) -> f64>,
        split: Split,
    ) -> [f64; 3] {
        self.run_from(Resume::Afresh, allowed, value, split)
    }

    /// [`Hyper::run`] by [`Hyper::program_from`]: a sweep's runs, each after
    /// the first resumed at the first stage whose allowed counts changed (the
    /// stages before it are the same sums, so the same bits).
    fn run_from(
        &self,
        resume: Resume,
        allowed: impl Fn(usize, usize) -> bool,
        value: Option<&dyn Fn(usize, usize) -> f64>,
        split: Split,
    ) -> [f64; 3] {
        let Some((lo, hi)) = self.program_from(resume, allowed, value) else {
            return [0.0; 3];
        };
        let rows = self.rows.borrow();
        self.fold(lo, &rows.cur[lo..=hi], rows.cur_m.get(lo..=hi).unwrap_or(&[]), split)
    }

    /// The end of a run: the masses (and moments, when given) by count `c`
    /// from `lo` on, weighted by the spares' and split by type.
    fn fold(&self, lo: usize, masses: &[f64], moments: &[f64], split: Split) -> [f64; 3] {
        let mut out = [0.0f64; 3];
        for (i, &mass) in masses.iter().enumerate() {
            let c = lo + i;
            let Some(&ws) = self.spare.get(self.n - c) else { continue };
            let adds = split.is_none_or(|t| c as u64 > t);
            out[usize::from(adds)] += mass * ws;
            if let Some(&m) = moments.get(i) {
                out[2] += m * ws;
            }
        }
        out
    }

    /// [`Hyper::run`]'s masses by count, before they are split by type.
    fn counts(&self, allowed: impl Fn(usize, usize) -> bool) -> Counts {
        let Some((lo, hi)) = self.program(allowed, None) else {
            return Counts::default();
        };
        Counts { lo, by_count: self.rows.borrow().cur[lo..=hi].to_vec() }
    }

    /// The dynamic program over the stages: leaves the masses (and moments)
    /// by count `c` in the rows' `cur` (`cur_m`) and returns the range `[lo,
    /// hi]` of `c` they cover (`None`: no vector is allowed).
    ///
    /// The running count `c` after stage `j` is kept within `[lo, hi]`: at most
    /// `n`, and at least what the remaining stages and the spares cannot make
    /// up any more (`n - S - remaining x min(D, n)`).
    fn program(
        &self,
        allowed: impl Fn(usize, usize) -> bool,
        value: Option<&dyn Fn(usize, usize) -> f64>,
    ) -> Option<(usize, usize)> {
        self.program_from(Resume::Afresh, allowed, value)
    }

    /// [`Hyper::program`], its rows after each stage saved, or resumed from
    /// those a saving run left ([`Resume`]).
    fn program_from(
        &self,
        resume: Resume,
        allowed: impl Fn(usize, usize) -> bool,
        value: Option<&dyn Fn(usize, usize) -> f64>,
    ) -> Option<(usize, usize)> {
        let n = self.n;
        let width = n + 1;
        let kmax = self.w.len() - 1;
        let spare_max = self.spare.len() - 1;
        let mut rows = self.rows.borrow_mut();
        let Rows { cur, next, cur_m, next_m, saved } = &mut *rows;
        let moments = if value.is_some() { n + 1 } else { 0 };
        for (row, len) in
            [(&mut *cur, n + 1), (&mut *next, n + 1), (&mut *cur_m, moments), (&mut *next_m, moments)]
        {
            row.clear();
            row.resize(len, 0.0);
        }
        // The count's range after each stage depends on nothing allowed.
        let range_after = |j: usize, (lo, hi): (usize, usize)| {
            let remaining = self.stages - 1 - j;
            let new_lo = lo.max(n.saturating_sub(spare_max + remaining * kmax));
            let new_hi = (hi + kmax).min(n);
            (new_lo <= new_hi).then_some((new_lo, new_hi))
        };
        let (mut lo, mut hi) = (0usize, 0usize);
        let (first, save) = match resume {
            Resume::Afresh => (0, false),
            Resume::At(first) => (first.min(self.stages), true),
        };
        if save {
            saved.resize(self.stages * width, 0.0);
        }
        for j in 0..first {
            (lo, hi) = range_after(j, (lo, hi))?;
        }
        if first == 0 {
            cur[0] = 1.0;
        } else {
            let at = (first - 1) * width;
            cur[lo..=hi].copy_from_slice(&saved[at + lo..=at + hi]);
        }
        for j in first..self.stages {
            let (new_lo, new_hi) = range_after(j, (lo, hi))?;
            next[new_lo..=new_hi].fill(0.0);
            if let Some(m) = next_m.get_mut(new_lo..=new_hi) {
                m.fill(0.0);
            }
            for (k, &wk) in self.w.iter().enumerate() {
                if wk == 0.0 || k > new_hi || !allowed(j, k) {
                    continue;
                }
                // Sources c in [lo, hi] whose c + k lands in [new_lo, new_hi].
                let c_lo = lo.max(new_lo.saturating_sub(k));
                let c_hi = hi.min(new_hi - k);
                if c_lo > c_hi {
                    continue;
                }
                let src = &cur[c_lo..=c_hi];
                for (d, &x) in next[c_lo + k..=c_hi + k].iter_mut().zip(src) {
                    *d += x * wk;
                }
                if let Some(value) = value {
                    let v = value(j, k);
                    let dst = &mut next_m[c_lo + k..=c_hi + k];
                    for ((d, &xm), &x) in dst.iter_mut().zip(&cur_m[c_lo..=c_hi]).zip(src) {
                        *d += (xm + x * v) * wk;
                    }
                }
            }
            std::mem::swap(cur, next);
            std::mem::swap(cur_m, next_m);
            lo = new_lo;
            hi = new_hi;
            if save {
                let at = j * width;
                saved[at + lo..=at + hi].copy_from_slice(&cur[lo..=hi]);
            }
        }
        Some((lo, hi))
    }

    fn masses(&self, allowed: impl Fn(usize, usize) -> bool, split: Split) -> [f64; 2] {
        self.masses_from(Resume::Afresh, allowed, split)
    }

    fn masses_from(&self, resume: Resume, allowed: impl Fn(usize, usize) -> bool, split: Split) -> [f64; 2] {
        let [r, a, _] = self.run_from(resume, allowed, None, split);
        [r, a]
    }

    /// Mass of "no stage holder preempted" (every stage keeps all replicas).
    fn untouched(&self) -> f64 {
        let (Some(&w0), Some(&ws)) = (self.w.first(), self.spare.get(self.n)) else {
            return 0.0;
        };
        (0..self.stages).fold(ws, |acc, _| acc * w0)
    }
}

/// `w[k]`, `k = 0..=min(m, n)`: the Binomial(`m`, `pi = n / instances`)
/// probabilities of `k`, up to a factor common to every `k` (here: divided by
/// their sum over the `k` kept), which cancels in the normalisation. Exact at
/// the ends `pi = 0` and `pi = 1`.
///
/// Computed with `+ - * /` only, by the ratio of consecutive terms from the
/// mode outwards, never with `ln` or `exp`: IEEE 754 makes those four
/// operations give the same bits everywhere, while `ln` and `exp` come from
/// the platform's maths library (glibc natively, musl in a Wasm guest), which
/// may differ in the last bit. Guests must decide exactly as the native code
/// does. The terms never overflow (the mode is 1 before the division) and
/// underflow only where the log-space form did too.
fn binomial_weights(m: usize, n: usize, instances: usize) -> Vec<f64> {
    let top = m.min(n);
    if n == 0 {
        return (0..=top).map(|k| f64::from(u8::from(k == 0))).collect();
    }
    if n >= instances {
        return (0..=top).map(|k| f64::from(u8::from(k == m))).collect();
    }
    let rest = (instances - n) as f64;
    let n_f = n as f64;
    // The mode of Binomial(m, pi), floor((m + 1) pi), within 0..=top.
    let mode = (((m as u128 + 1) * n as u128) / instances as u128).min(top as u128) as usize;
    let mut w = vec![0.0f64; top + 1];
    w[mode] = 1.0;
    // w[k] / w[k - 1] = (m - k + 1) pi / (k (1 - pi)).
    for k in mode + 1..=top {
        w[k] = w[k - 1] * (((m - k + 1) as f64 * n_f) / (k as f64 * rest));
    }
    for k in (0..mode).rev() {
        w[k] = w[k + 1] * (((k + 1) as f64 * rest) / ((m - k) as f64 * n_f));
    }
    let sum: f64 = w.iter().sum();
    w.iter_mut().for_each(|x| *x /= sum);
    w
}

/// Distinct values of `f`, sorted. Unstable: `total_cmp` ties only equal
/// bits, so the order is the stable sort's, without its scratch buffer.
fn sorted_distinct(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_unstable_by(f64::total_cmp);
    values.dedup();
    values
}

/// What every new layout's distribution shares for one old layout and one
/// step (instances before, preempted): the preemption weights, how each stage
/// recovers when it loses every replica, and the masses by number of stage
/// holders preempted of every scenario, of those that migrate live and of
/// those that lose no work. Only the split of those masses by type (whether the
/// new layout needs new members) depends on the new layout. The planner asks
/// for every new layout of one old layout under each step, so its cache keeps
/// these (`plan::cache`) instead of running the same three dynamic programs
/// once per pair.
#[derive(Debug, Clone)]
pub(crate) struct FromStep {
    h: Hyper,
    /// The old layout's replicas per stage `D`.
    d_old: usize,
    wiped: Vec<Wiped>,
    all: Counts,
    live: Counts,
    /// `None`: the same as `live` (nothing is saved by a notice).
    unlost: Option<Counts>,
}

impl FromStep {
    /// The shared part of `model`'s distributions (its old layout `from`).
    /// The caller keys it by `from` and the step: a model's stage recovery
    /// depends on nothing else (the profile and recovery being the same).
    pub(crate) fn new(
        model: &Model,
        from: ParallelConfig,
        instances_before: u32,
        preempted: u32,
    ) -> FromStep {
        let h = Hyper::new(
            instances_before as usize,
            from.data_parallel as usize,
            from.pipeline_stages as usize,
            preempted as usize,
        );
        // How each stage recovers when it loses every replica.
        let someone_stays = preempted < instances_before;
        let wiped: Vec<Wiped> = model.stage_recovery.iter().map(|r| r.wiped(someone_stays)).collect();
        let mut shared = FromStep {
            h,
            d_old: from.data_parallel as usize,
            wiped,
            all: Counts::default(),
            live: Counts::default(),
            unlost: None,
        };
        shared.all = shared.h.counts(|_, _| true);
        shared.live = shared.h.counts(|j, k| shared.live(j, k));
        if !shared.wiped.iter().all(|&w| w == Wiped::RolledBack) {
            shared.unlost = Some(shared.h.counts(|j, k| shared.unlost(j, k)));
        }
        shared
    }

    /// A stage with `k` of its replicas preempted migrates live: it keeps a
    /// replica or was evacuated.
    fn live(&self, j: usize, k: usize) -> bool {
        k < self.d_old || self.wiped.get(j) == Some(&Wiped::Evacuated)
    }

    /// A stage with `k` preempted loses no work: it keeps a replica, or its
    /// state was evacuated or checkpointed within the notice.
    fn unlost(&self, j: usize, k: usize) -> bool {
        k < self.d_old || self.wiped.get(j) != Some(&Wiped::RolledBack)
    }
}

/// Whether [`distribution`] also computes the expected bytes moved: reports
/// want them, the planner reads only the outcomes (and the bytes cost two
/// more dynamic programs per distribution).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bytes {
    /// Compute [`TransitionDistribution::mean_bytes`].
    Mean,
    /// Leave it out (0 where it would need the dynamic programs): only the
    /// outcomes are read.
    Skip,
}

/// The exact outcome distribution of `model` with `preempted` of
/// `instances_before` instances taken and `arrived` joining (counts already
/// checked by the caller), when the job reconfigures as `mode` says; its
/// expected bytes as `bytes` says (the outcomes are the same either way).
pub(super) fn distribution(
    model: &Model,
    instances_before: u32,
    preempted: u32,
    arrived: u32,
    mode: MigrationMode,
    bytes_wanted: Bytes,
    shared: Option<&FromStep>,
) -> Result<TransitionDistribution, LiveputError> {
    let single = |kind, duration_ms, concurrent_ms, mean_bytes| TransitionDistribution {
        outcomes: vec![Outcome { probability: 1.0, kind, duration_ms, lost_work: false, concurrent_ms }],
        mean_bytes,
    };
    let from = match (model.rule, model.from) {
        (Rule::ColdStart, _) => {
            return Ok(single(
                MigrationKind::Restart,
                model.r_add + model.restart_extra_ms,
                model.r_add,
                model.restart_bytes as f64,
            ));
        }
        (_, None) => return Ok(single(MigrationKind::None, 0.0, 0.0, 0.0)),
        (_, Some(from)) => from,
    };
    let restart_on_change = mode == MigrationMode::RestartOnChange;
    if restart_on_change && model.to == Some(from) && preempted == 0 && arrived == 0 {
        return Ok(single(MigrationKind::None, 0.0, 0.0, 0.0));
    }
    let owned;
    let shared = match shared {
        Some(shared) => shared,
        None => {
            owned = FromStep::new(model, from, instances_before, preempted);
            &owned
        }
    };
    let h = &shared.h;
    let d_old = from.data_parallel as usize;
    let split: Split = (d_old as u64 * u64::from(from.pipeline_stages)).checked_sub(model.new_slots);
    let live = |j: usize, k: usize| shared.live(j, k);
    // Stage preemption counts that migrate live, and the times those produce
    // (the maximum's candidate thresholds).
    let k_top = h.w.len() - 1;
    let time =
        |j: usize, k: usize| model.stage_time.get(j).and_then(|r| r.get(d_old - k)).copied().unwrap_or(0.0);
    let bytes = |j: usize, k: usize| {
        model.stage_bytes.get(j).and_then(|r| r.get(d_old - k)).copied().unwrap_or(0) as f64
    };
    let reachable_times = || {
        let mut v = Vec::with_capacity(h.stages * (k_top + 1));
        for j in 0..h.stages {
            v.extend((0..=k_top.min(d_old)).filter(|&k| live(j, k)).map(|k| time(j, k)));
        }
        v
    };

    let all = shared.all.split(h, split);
    let z = all[0] + all[1];
    if !(z.is_finite() && z > 0.0) {
        return Err(LiveputError::Numerical { reason: "preemption weights vanished" });
    }
    let nz = shared.live.split(h, split);
    // Without any notice cover the unlost stages are exactly the live ones.
    let kept = shared.unlost.as_ref().map_or(nz, |unlost| unlost.split(h, split));
    let rolled_back = [(all[0] - kept[0]).max(0.0), (all[1] - kept[1]).max(0.0)];
    let checkpointed = [(kept[0] - nz[0]).max(0.0), (kept[1] - nz[1]).max(0.0)];
    let reconfigure = [model.r_remove, model.r_add];

    let mut outcomes = Vec::new();
    let mut push = |mass: f64, kind, duration_ms, lost_work, concurrent_ms| {
        if mass > 0.0 {
            let probability = (mass / z).min(1.0);
            outcomes.push(Outcome { probability, kind, duration_ms, lost_work, concurrent_ms });
        }
    };
    let mut mean_bytes = 0.0;
    if model.rule == Rule::Pause {
        push(kept[0] + kept[1], MigrationKind::None, 0.0, false, 0.0);
        push(rolled_back[0] + rolled_back[1], MigrationKind::None, 0.0, true, 0.0);
        return Ok(TransitionDistribution { outcomes, mean_bytes });
    }
    let restart_ms = |ty: usize| reconfigure[ty] + model.restart_extra_ms;
    if restart_on_change {
        // Every outcome restarts; only the lost work and the type differ.
        for ty in 0..2 {
            push(kept[ty], MigrationKind::Restart, restart_ms(ty), false, reconfigure[ty]);
            push(rolled_back[ty], MigrationKind::Restart, restart_ms(ty), true, reconfigure[ty]);
        }
        mean_bytes = model.restart_bytes as f64;
        return Ok(TransitionDistribution { outcomes, mean_bytes });
    }

    // Threshold sweep over the cumulative distribution of the maximum stage
    // time: `A(t)` = mass migrating live with every stage time `<= t`. Past
    // the restart's own extra time a checkpoint-restart is cheaper: the rest
    // of the mass restarts.
    // The first run computes every stage; each after it resumes at the first
    // stage with a time between the last threshold and its own.
    let sweep = |thresholds: &[f64],
                 start: [f64; 2],
                 kind,
                 push: &mut dyn FnMut(f64, MigrationKind, f64, bool, f64)| {
        let mut first_changed = vec![usize::MAX; thresholds.len()];
        if let Some(first) = first_changed.first_mut() {
            *first = 0;
        }
        for j in 0..h.stages {
            for k in (0..=k_top.min(d_old)).filter(|&k| live(j, k)) {
                let i = thresholds.partition_point(|&t| t < time(j, k));
                if let Some(first) = first_changed.get_mut(i) {
                    *first = (*first).min(j);
                }
            }
        }
        let mut prev = start;
        for (i, &t) in thresholds.iter().enumerate() {
            if model.restart_is_cheaper(t) {
                break;
            }
            let a = if i + 1 == thresholds.len() {
                nz
            } else {
                h.masses_from(Resume::At(first_changed[i]), |j, k| live(j, k) && time(j, k) <= t, split)
            };
            for ty in 0..2 {
                push((a[ty] - prev[ty]).max(0.0), kind, t + reconfigure[ty], false, 0.0);
            }
            prev = a;
        }
        for ty in 0..2 {
            push(
                (nz[ty] - prev[ty]).max(0.0),
                MigrationKind::Restart,
                restart_ms(ty),
                false,
                reconfigure[ty],
            );
        }
    };
    match model.rule {
        Rule::SameDepth { same_config } => {
            let d_new = model.d_new as usize;
            let intra = if d_new <= d_old { h.masses(|_, k| k <= d_old - d_new, split) } else { [0.0; 2] };
            let none = if same_config { h.untouched() } else { 0.0 };
            push(none, MigrationKind::None, 0.0, false, 0.0);
            push(
                (intra[0] + intra[1] - none).max(0.0),
                MigrationKind::IntraStage,
                model.intra_ms,
                false,
                0.0,
            );
            let thresholds = sorted_distinct(reachable_times());
            sweep(&thresholds, intra, MigrationKind::InterStage, &mut push);
        }
        Rule::Repartition => {
            let mut times = reachable_times();
            times.iter_mut().for_each(|t| *t = t.max(model.base_time));
            let thresholds = sorted_distinct(times);
            sweep(&thresholds, [0.0; 2], MigrationKind::Repartition, &mut push);
        }
        Rule::Pause | Rule::ColdStart => {}
    }
    for ty in 0..2 {
        push(checkpointed[ty], MigrationKind::Restart, restart_ms(ty), false, reconfigure[ty]);
        push(rolled_back[ty], MigrationKind::Restart, restart_ms(ty), true, reconfigure[ty]);
    }
    if bytes_wanted == Bytes::Skip {
        return Ok(TransitionDistribution { outcomes, mean_bytes });
    }
    // Bytes: the live migrations that stay below the restart's cost move
    // their transfers, every restart loads the checkpoint.
    let migrates = |j: usize, k: usize| live(j, k) && !model.restart_is_cheaper(time(j, k));
    let base_migrates = !model.restart_is_cheaper(model.base_time);
    let [_, _, moment] = if base_migrates { h.run(migrates, Some(&bytes), split) } else { [0.0; 3] };
    let never_cheaper = reachable_times().into_iter().all(|t| !model.restart_is_cheaper(t));
    let migrating = match (base_migrates, never_cheaper) {
        (false, _) => [0.0; 2],
        (true, true) => nz,
        (true, false) => h.masses(migrates, split),
    };
    let migrating = migrating[0] + migrating[1];
    if model.rule == Rule::Repartition {
        mean_bytes += model.base_bytes as f64 * migrating / z;
    }
    mean_bytes += moment / z + model.restart_bytes as f64 * ((z - migrating) / z).max(0.0);
    Ok(TransitionDistribution { outcomes, mean_bytes })
}
