//! The cost model of one transition `from -> to`, reduced to per-stage tables:
//! for old stage `j` keeping `s` live replicas, the time its transfers take and
//! the bytes they move. A scenario's cost is a maximum (time) and a sum (bytes)
//! over those tables plus a few constants, which is what lets
//! [`super::exact`] take the expectation exactly.

use super::{LiveputError, MigrationKind, ScenarioCost, check_config, check_size, transfer_ms};
use crate::recovery::Recovery;
use crate::{ModelProfile, ParallelConfig, StagePartition};

/// Accept a profile figure only if it is a finite number >= 0. The field name
/// is only built on failure (this runs on every call of the optimizer).
pub(crate) fn check_value(field: impl FnOnce() -> String, value: f64) -> Result<f64, LiveputError> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(LiveputError::BadProfileValue { field: field(), value })
    }
}

/// Which rules apply to the transition as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rule {
    /// `to = None`: nothing is migrated.
    Pause,
    /// `from = None`, `to = Some`: load everything from the checkpoint.
    ColdStart,
    /// Same pipeline depth: none, intra-stage or inter-stage (or restart).
    SameDepth {
        /// `to == from`: no cost when no stage lost a replica.
        same_config: bool,
    },
    /// Different pipeline depth: repartition (or restart).
    Repartition,
}

/// How an old stage that lost every replica is recovered in one scenario
/// (`crate::recovery`, rules 1-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wiped {
    /// Its state went to an instance that stays, within the notice.
    Evacuated,
    /// An emergency checkpoint was written within the notice: restart, no
    /// rollback.
    Checkpointed,
    /// No notice covers it: restart and lose the work since the last
    /// periodic checkpoint.
    RolledBack,
}

/// Which recovery the notice allows an old stage, before knowing whether
/// anyone stays (evacuation needs a target).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct StageRecovery {
    /// `t(B_j) <=` notice.
    pub(super) evacuable: bool,
    /// `B_j / write rate <=` notice.
    pub(super) checkpointable: bool,
}

impl StageRecovery {
    /// The recovery of the stage when it loses every replica; `someone_stays`:
    /// fewer preemptions than instances.
    pub(super) fn wiped(self, someone_stays: bool) -> Wiped {
        if self.evacuable && someone_stays {
            Wiped::Evacuated
        } else if self.checkpointable {
            Wiped::Checkpointed
        } else {
            Wiped::RolledBack
        }
    }
}

/// One transition's cost model; see the module documentation of `liveput`.
#[derive(Debug, Clone)]
pub(super) struct Model {
    pub(super) rule: Rule,
    /// Old layout `(D, P)`, if any.
    pub(super) from: Option<ParallelConfig>,
    /// New layout `(d, p)`, if any.
    pub(super) to: Option<ParallelConfig>,
    /// Instances the new layout occupies (`d x p`; 0 for a pause).
    pub(super) new_slots: u64,
    /// New data-parallel degree `d` (0 for a pause).
    pub(super) d_new: u32,
    /// `stage_time[j][s]`: transfer time (ms) attributable to old stage `j` when
    /// it keeps `s` replicas (`s` in `0..=D`); the migration's transfer time is
    /// the maximum over stages and `base_time`. Empty unless same-depth or
    /// repartition.
    pub(super) stage_time: Vec<Vec<f64>>,
    /// `stage_bytes[j][s]`: bytes attributable to old stage `j` keeping `s`
    /// replicas; the migration moves `base_bytes` plus their sum.
    pub(super) stage_bytes: Vec<Vec<u64>>,
    /// Transfer time that does not depend on the survivors, ms.
    pub(super) base_time: f64,
    /// Bytes that move whatever survives.
    pub(super) base_bytes: u64,
    /// `R_add` of the new layout, ms.
    pub(super) r_add: f64,
    /// `R_remove` of the new layout, ms.
    pub(super) r_remove: f64,
    /// Intra-stage migration time into the new layout, ms.
    pub(super) intra_ms: f64,
    /// What a restart pays on top of `R_type`: checkpoint save/load and the
    /// serial transfer of every new stage's state, ms.
    pub(super) restart_extra_ms: f64,
    /// Bytes a restart loads: `d x` the whole state.
    pub(super) restart_bytes: u64,
    /// Per old stage, what the notice allows when it loses every replica
    /// (empty without an old layout; all `false` without a notice).
    pub(super) stage_recovery: Vec<StageRecovery>,
}

impl Model {
    /// Build the model of `from -> to`, checking the profile figures it uses.
    pub(super) fn new(
        profile: &ModelProfile,
        recovery: &Recovery,
        from: Option<ParallelConfig>,
        to: Option<ParallelConfig>,
    ) -> Result<Model, LiveputError> {
        if let Some((field, value)) = recovery.invalid_field() {
            return Err(LiveputError::BadProfileValue { field: format!("recovery.{field}"), value });
        }
        if let Some(from) = from {
            check_config(from)?;
        }
        let mut model = Model {
            rule: Rule::Pause,
            from,
            to,
            new_slots: 0,
            d_new: 0,
            stage_time: Vec::new(),
            stage_bytes: Vec::new(),
            base_time: 0.0,
            base_bytes: 0,
            r_add: 0.0,
            r_remove: 0.0,
            intra_ms: 0.0,
            restart_extra_ms: 0.0,
            restart_bytes: 0,
            stage_recovery: Vec::new(),
        };
        if let Some(from) = from {
            model.stage_recovery = vec![StageRecovery::default(); from.pipeline_stages as usize];
            // Without a notice nothing is covered and the old partition is
            // not needed (a pause never needed it).
            if recovery.announced() {
                let old_part = partition(profile, from.pipeline_stages)?;
                for (r, &bytes) in model.stage_recovery.iter_mut().zip(&old_part.state_bytes_per_stage) {
                    r.evacuable = recovery.fits(transfer_ms(&profile.transfer_curve, bytes));
                    r.checkpointable = recovery.fits(recovery.checkpoint_write_ms(bytes));
                }
            }
        }
        let Some(to) = to else {
            return Ok(model);
        };
        check_config(to)?;
        let curve = &profile.transfer_curve;
        for (i, p) in curve.iter().enumerate() {
            check_value(|| format!("transfer_curve[{i}].micros"), p.micros)?;
        }
        let entry = profile.config(to).ok_or(LiveputError::UnknownConfig { config: to })?;
        let field = |name: &'static str| move || format!("configs[{to}].{name}");
        let rebuild_add = check_value(field("comm_rebuild_add_ms"), entry.comm_rebuild_add_ms)?;
        let rebuild_remove = check_value(field("comm_rebuild_remove_ms"), entry.comm_rebuild_remove_ms)?;
        let build = check_value(field("model_build_ms"), entry.model_build_ms)?;
        let rendezvous = check_value(|| "rendezvous_ms".into(), profile.rendezvous_ms)?;
        let process = check_value(|| "process_start_ms".into(), profile.process_start_ms)?;
        let add_extra = check_value(|| "add_extra_ms".into(), profile.add_extra_ms)?;
        let checkpoint = check_value(|| "checkpoint_restart_ms".into(), profile.checkpoint_restart_ms)?;
        check_value(|| "checkpoint_interval_ms".into(), profile.checkpoint_interval_ms)?;

        // `CostModel.estimate_restart_cost` and `estimate_intra_stage_migration`.
        model.r_add = rendezvous + add_extra + rebuild_add + process + build;
        model.r_remove = rebuild_remove + process + build;
        model.intra_ms = rebuild_remove + process;
        model.new_slots = to.instances();
        model.d_new = to.data_parallel;

        // A restart loads every new stage, one after another
        // (`ThroughputOptimized.reconfiguration` without its optimisation).
        let new_part = partition(profile, to.pipeline_stages)?;
        let serial: f64 = new_part.state_bytes_per_stage.iter().map(|&b| transfer_ms(curve, b)).sum();
        model.restart_extra_ms = checkpoint + serial;
        let total: u128 = new_part.state_bytes_per_stage.iter().map(|&b| u128::from(b)).sum();
        model.restart_bytes = saturate(total * u128::from(to.data_parallel));

        let Some(from) = from else {
            model.rule = Rule::ColdStart;
            return Ok(model);
        };
        if from.pipeline_stages == to.pipeline_stages {
            model.rule = Rule::SameDepth { same_config: from == to };
            inter_stage_tables(&mut model, new_part, from.data_parallel, to.data_parallel, curve);
            evacuation_entries(&mut model, new_part, curve);
        } else {
            model.rule = Rule::Repartition;
            let old_part = partition(profile, from.pipeline_stages)?;
            repartition_tables(&mut model, old_part, new_part, from.data_parallel, to.data_parallel, curve)?;
            evacuation_entries(&mut model, old_part, curve);
        }
        Ok(model)
    }

    /// Whether a live migration that would spend `transfer_ms` in transfers
    /// is replaced by a checkpoint-restart, which is cheaper (both pay the
    /// same `R_type`). The live model may always restart instead.
    pub(super) fn restart_is_cheaper(&self, transfer_ms: f64) -> bool {
        transfer_ms > self.restart_extra_ms
    }

    /// `R_add` when the new layout needs instances that held no stage
    /// (`d x p > surviving stage holders`), else `R_remove`.
    pub(super) fn reconfigure_ms(&self, surviving_holders: u64) -> f64 {
        if self.new_slots > surviving_holders { self.r_add } else { self.r_remove }
    }

    /// The realized cost of one scenario (see `liveput::scenario_cost`).
    pub(super) fn scenario(
        &self,
        survivors: &[u32],
        spare_survivors: u32,
        arrived: u32,
    ) -> Result<ScenarioCost, LiveputError> {
        let (stages, degree) = self.from.map_or((0, 0), |f| (f.pipeline_stages, f.data_parallel));
        if survivors.len() != stages as usize {
            return Err(LiveputError::SurvivorsLength { expected: stages, got: survivors.len() });
        }
        if let Some((stage, &s)) = survivors.iter().enumerate().find(|&(_, &s)| s > degree) {
            return Err(LiveputError::SurvivorsAboveDegree { stage, survivors: s, degree });
        }
        let holders: u64 = survivors.iter().map(|&s| u64::from(s)).sum();
        let available = holders + u64::from(spare_survivors) + u64::from(arrived);
        check_size(available)?;
        if let Some(to) = self.to
            && to.instances() > available
        {
            return Err(LiveputError::ToDoesNotFit { to, available });
        }
        let someone_stays = holders + u64::from(spare_survivors) > 0;
        let mut worst = None;
        for (j, _) in survivors.iter().enumerate().filter(|&(_, &s)| s == 0) {
            let wiped = self.stage_recovery.get(j).copied().unwrap_or_default().wiped(someone_stays);
            worst = match (worst, wiped) {
                (Some(Wiped::RolledBack), _) | (_, Wiped::RolledBack) => Some(Wiped::RolledBack),
                (Some(Wiped::Checkpointed), _) | (_, Wiped::Checkpointed) => Some(Wiped::Checkpointed),
                _ => Some(Wiped::Evacuated),
            };
        }
        let cost = |kind, duration_ms, bytes_moved, lost_work| ScenarioCost {
            kind,
            duration_ms,
            bytes_moved,
            lost_work,
            concurrent_ms: 0.0,
        };
        let restart = |lost_work| {
            let r_type = self.reconfigure_ms(holders);
            ScenarioCost {
                kind: MigrationKind::Restart,
                duration_ms: r_type + self.restart_extra_ms,
                bytes_moved: self.restart_bytes,
                lost_work,
                concurrent_ms: r_type,
            }
        };
        // A live migration, or the restart that is cheaper.
        let migrate = |kind| {
            let (time, bytes) = self.transfers(survivors);
            if self.restart_is_cheaper(time) {
                restart(false)
            } else {
                cost(kind, time + self.reconfigure_ms(holders), bytes, false)
            }
        };
        Ok(match self.rule {
            Rule::Pause => cost(MigrationKind::None, 0.0, 0, worst == Some(Wiped::RolledBack)),
            Rule::ColdStart => restart(false),
            _ if worst == Some(Wiped::RolledBack) => restart(true),
            _ if worst == Some(Wiped::Checkpointed) => restart(false),
            Rule::SameDepth { same_config } => {
                if same_config && survivors.iter().all(|&s| s == degree) {
                    cost(MigrationKind::None, 0.0, 0, false)
                } else if survivors.iter().all(|&s| s >= self.d_new) {
                    cost(MigrationKind::IntraStage, self.intra_ms, 0, false)
                } else {
                    migrate(MigrationKind::InterStage)
                }
            }
            Rule::Repartition => migrate(MigrationKind::Repartition),
        })
    }

    /// Transfer time (max) and bytes (sum) of the per-stage tables.
    fn transfers(&self, survivors: &[u32]) -> (f64, u64) {
        let mut time = self.base_time;
        let mut bytes = u128::from(self.base_bytes);
        for (j, &s) in survivors.iter().enumerate() {
            let s = s as usize;
            if let Some(&t) = self.stage_time.get(j).and_then(|row| row.get(s)) {
                time = time.max(t);
            }
            if let Some(&b) = self.stage_bytes.get(j).and_then(|row| row.get(s)) {
                bytes += u128::from(b);
            }
        }
        (time, saturate(bytes))
    }
}

fn saturate(x: u128) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

/// The profile's partition for depth `stages`, checked for shape.
fn partition(profile: &ModelProfile, stages: u32) -> Result<&StagePartition, LiveputError> {
    let part = profile
        .partitions
        .iter()
        .find(|p| p.pipeline_stages == stages)
        .ok_or(LiveputError::MissingPartition { stages })?;
    let n = stages as usize;
    if part.layers_per_stage.len() != n || part.state_bytes_per_stage.len() != n {
        return Err(LiveputError::BadPartition {
            stages,
            reason: format!(
                "{} layer counts and {} state sizes, expected {n} of each",
                part.layers_per_stage.len(),
                part.state_bytes_per_stage.len()
            ),
        });
    }
    Ok(part)
}

/// Entry `s = 0` of every stage's tables: the stage evacuated to an instance
/// that stays (`t(B_j)` bytes of its old state), then served from there as
/// by one survivor (entry `s = 1`). Used only when the notice allows it.
fn evacuation_entries(model: &mut Model, old: &StagePartition, curve: &[crate::TransferPoint]) {
    let rows = model.stage_time.iter_mut().zip(model.stage_bytes.iter_mut());
    for ((times, bytes), &stage_bytes) in rows.zip(&old.state_bytes_per_stage) {
        if let (Some(&t1), Some(&b1)) = (times.get(1), bytes.get(1)) {
            times[0] = transfer_ms(curve, stage_bytes) + t1;
            bytes[0] = saturate(u128::from(stage_bytes) + u128::from(b1));
        }
    }
}

/// Same depth: old stage `j` keeping `1 <= s < d` replicas lacks `delta = d -
/// s`; its survivors each send the full stage state to `ceil(delta / s)`
/// receivers in turn. No cost for `s >= d`; entry `s = 0` is the evacuated
/// stage's ([`evacuation_entries`]).
fn inter_stage_tables(
    model: &mut Model,
    part: &StagePartition,
    d_old: u32,
    d_new: u32,
    curve: &[crate::TransferPoint],
) {
    for &stage_bytes in &part.state_bytes_per_stage {
        let one = transfer_ms(curve, stage_bytes);
        let mut times = vec![0.0; d_old as usize + 1];
        let mut bytes = vec![0u64; d_old as usize + 1];
        for s in 1..=d_old.min(d_new.saturating_sub(1)) {
            let deficit = d_new - s;
            let rounds = deficit.div_ceil(s);
            times[s as usize] = f64::from(rounds) * one;
            bytes[s as usize] = saturate(u128::from(deficit) * u128::from(stage_bytes));
        }
        model.stage_time.push(times);
        model.stage_bytes.push(bytes);
    }
}

/// The overlap of old stage `old` and new stage `new`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Segment {
    pub(super) old: usize,
    pub(super) new: usize,
    pub(super) bytes: u64,
}

/// Overlaps of two contiguous partitions of the same layers, in layer order.
///
/// The cumulative state in bytes is known at every stage boundary of either
/// partition (prefix sums of its stages' bytes), and every overlap lies between
/// two such boundaries, so its bytes follow exactly: no per-layer sizes are
/// needed. Fails when the partitions disagree on the total layers or bytes.
pub(super) fn segments(old: &StagePartition, new: &StagePartition) -> Result<Vec<Segment>, LiveputError> {
    let prefix = |part: &StagePartition| {
        let mut layers = vec![0u64];
        let mut bytes = vec![0u128];
        for (&l, &b) in part.layers_per_stage.iter().zip(&part.state_bytes_per_stage) {
            layers.push(layers.last().copied().unwrap_or(0) + u64::from(l));
            bytes.push(bytes.last().copied().unwrap_or(0) + u128::from(b));
        }
        (layers, bytes)
    };
    let (a, fa) = prefix(old);
    let (c, fc) = prefix(new);
    let inconsistent = |reason: String| LiveputError::InconsistentPartitions {
        from_stages: old.pipeline_stages,
        to_stages: new.pipeline_stages,
        reason,
    };
    let (la, lc) = (a.last().copied().unwrap_or(0), c.last().copied().unwrap_or(0));
    if la != lc {
        return Err(inconsistent(format!("{la} layers against {lc}")));
    }
    let (ba, bc) = (fa.last().copied().unwrap_or(0), fc.last().copied().unwrap_or(0));
    if ba != bc {
        return Err(inconsistent(format!("{ba} state bytes against {bc}")));
    }
    let (p_old, p_new) = (a.len() - 1, c.len() - 1);
    let mut out = Vec::with_capacity(p_old + p_new);
    let (mut j, mut q) = (0, 0);
    while j < p_old && q < p_new {
        let lo = a[j].max(c[q]);
        let hi = a[j + 1].min(c[q + 1]);
        if hi > lo {
            let f_lo = if a[j] >= c[q] { fa[j] } else { fc[q] };
            let f_hi = if a[j + 1] <= c[q + 1] { fa[j + 1] } else { fc[q + 1] };
            out.push(Segment { old: j, new: q, bytes: saturate(f_hi.saturating_sub(f_lo)) });
        }
        match a[j + 1].cmp(&c[q + 1]) {
            std::cmp::Ordering::Less => j += 1,
            std::cmp::Ordering::Greater => q += 1,
            std::cmp::Ordering::Equal => {
                j += 1;
                q += 1;
            }
        }
    }
    Ok(out)
}

/// How the two ends of consecutive segments are shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Old,
    New,
    Neither,
}

fn link(a: &Segment, b: &Segment) -> Link {
    if a.old == b.old {
        Link::Old
    } else if a.new == b.new {
        Link::New
    } else {
        Link::Neither
    }
}

/// Optimal slot allocation at full strength: `x[i]` instances of old stage
/// `segs[i].old` fill slots of new stage `segs[i].new`, with at most
/// `old_cap` instances per old stage and `new_cap` slots per new stage, so
/// that the bytes already in place, `sum_i x[i] x segs[i].bytes`, are maximal.
///
/// The overlap graph of two contiguous partitions is a path (consecutive
/// segments share their old or their new stage, and a stage's segments are
/// consecutive), so a dynamic program along it whose state is how much of the
/// shared stage's capacity is used solves the problem exactly (greedy by
/// weight does not). Ties go to the smaller `x`. Work `O(m x cap x cap)`,
/// memory `O(m x cap)`; beyond [`ALLOCATION_BUDGET`] table entries (thousands
/// of stages on both sides) it falls back to [`allocate_greedy`], still a
/// feasible plan.
pub(super) fn allocate(segs: &[Segment], old_cap: u32, new_cap: u32) -> Vec<u32> {
    let m = segs.len();
    let table = m as u64 * (u64::from(old_cap.max(new_cap)) + 1);
    if table > ALLOCATION_BUDGET {
        return allocate_greedy(segs, old_cap, new_cap);
    }
    let mut value: Vec<Option<u128>> = vec![Some(0)];
    let mut back: Vec<Vec<(u32, u32)>> = Vec::with_capacity(m);
    for i in 0..m {
        let in_link = if i == 0 { Link::Neither } else { link(&segs[i - 1], &segs[i]) };
        let out_link = if i + 1 < m { link(&segs[i], &segs[i + 1]) } else { Link::Neither };
        let out_cap = match out_link {
            Link::Old => old_cap,
            Link::New => new_cap,
            Link::Neither => 0,
        };
        let mut next: Vec<Option<u128>> = vec![None; out_cap as usize + 1];
        let mut choice = vec![(0u32, 0u32); out_cap as usize + 1];
        let weight = u128::from(segs[i].bytes);
        for (u, v) in value.iter().enumerate() {
            let Some(v) = *v else { continue };
            let u = u as u32;
            let old_used = if in_link == Link::Old { u } else { 0 };
            let new_used = if in_link == Link::New { u } else { 0 };
            let x_max = old_cap.saturating_sub(old_used).min(new_cap.saturating_sub(new_used));
            for x in 0..=x_max {
                let val = v + u128::from(x) * weight;
                let state = match out_link {
                    Link::Old => old_used + x,
                    Link::New => new_used + x,
                    Link::Neither => 0,
                } as usize;
                if let Some(slot) = next.get_mut(state)
                    && slot.is_none_or(|cur| val > cur)
                {
                    *slot = Some(val);
                    choice[state] = (u, x);
                }
            }
        }
        back.push(choice);
        value = next;
    }
    let mut x = vec![0u32; m];
    let mut state = 0usize;
    for i in (0..m).rev() {
        let (u, xi) = back[i].get(state).copied().unwrap_or((0, 0));
        x[i] = xi;
        state = u as usize;
    }
    x
}

/// Largest dynamic-program table [`allocate`] builds (entries of 8 bytes).
pub(super) const ALLOCATION_BUDGET: u64 = 4 << 20;

/// Largest overlaps first, each as far as the capacities allow: feasible, not
/// always optimal (see [`allocate`]).
pub(super) fn allocate_greedy(segs: &[Segment], old_cap: u32, new_cap: u32) -> Vec<u32> {
    let mut order: Vec<usize> = (0..segs.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(segs[i].bytes), i));
    let stages = |f: fn(&Segment) -> usize| segs.iter().map(f).max().map_or(0, |x| x + 1);
    let mut old_left = vec![old_cap; stages(|s| s.old)];
    let mut new_left = vec![new_cap; stages(|s| s.new)];
    let mut x = vec![0u32; segs.len()];
    for i in order {
        let (o, n) = (segs[i].old, segs[i].new);
        let take = old_left[o].min(new_left[n]);
        if segs[i].bytes > 0 && take > 0 {
            x[i] = take;
            old_left[o] -= take;
            new_left[n] -= take;
        }
    }
    x
}

/// Repartition tables from the full-strength allocation: old stage `j` offers
/// its `s` survivors to its allocated slots, best overlap first; unserved
/// slots (and slots allocated to nobody) receive their new stage's full state.
fn repartition_tables(
    model: &mut Model,
    old: &StagePartition,
    new: &StagePartition,
    d_old: u32,
    d_new: u32,
    curve: &[crate::TransferPoint],
) -> Result<(), LiveputError> {
    let segs = segments(old, new)?;
    let x = allocate(&segs, d_old, d_new);
    let full = &new.state_bytes_per_stage;

    /// Slots of one new stage served by one old stage.
    struct Group {
        missing_ms: f64,
        full_ms: f64,
        missing: u64,
        overlap: u64,
        count: u32,
    }
    let mut groups: Vec<Vec<Group>> = (0..old.layers_per_stage.len()).map(|_| Vec::new()).collect();
    let mut taken = vec![0u64; full.len()];
    let mut reused: u128 = 0;
    for (seg, &count) in segs.iter().zip(&x) {
        if count == 0 {
            continue;
        }
        let whole = full.get(seg.new).copied().unwrap_or(0);
        let missing = whole.saturating_sub(seg.bytes);
        if let (Some(g), Some(t)) = (groups.get_mut(seg.old), taken.get_mut(seg.new)) {
            g.push(Group {
                missing_ms: transfer_ms(curve, missing),
                full_ms: transfer_ms(curve, whole),
                missing,
                overlap: seg.bytes,
                count,
            });
            *t += u64::from(count);
            reused += u128::from(count) * u128::from(seg.bytes);
        }
    }
    let total: u128 = full.iter().map(|&b| u128::from(b)).sum::<u128>() * u128::from(d_new);
    model.base_bytes = saturate(total.saturating_sub(reused));
    model.base_time = full
        .iter()
        .zip(&taken)
        .filter(|&(_, &t)| t < u64::from(d_new))
        .map(|(&b, _)| transfer_ms(curve, b))
        .fold(0.0, f64::max);
    for mut g in groups {
        g.sort_by_key(|g| g.missing);
        let mut times = Vec::with_capacity(d_old as usize + 1);
        let mut bytes = Vec::with_capacity(d_old as usize + 1);
        for s in 0..=d_old {
            let mut left = s;
            let (mut time, mut unserved_bytes) = (0.0f64, 0u128);
            for g in &g {
                let served = left.min(g.count);
                left -= served;
                if served > 0 {
                    time = time.max(g.missing_ms);
                }
                if served < g.count {
                    time = time.max(g.full_ms);
                    unserved_bytes += u128::from(g.count - served) * u128::from(g.overlap);
                }
            }
            times.push(time);
            bytes.push(saturate(unserved_bytes));
        }
        model.stage_time.push(times);
        model.stage_bytes.push(bytes);
    }
    Ok(())
}
