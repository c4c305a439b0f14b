//! The fit behind `parcae-host profile`: from the profiling run's event log, each layout's
//! step period, what a live reconfiguration costs, what a restart costs, the checkpoint
//! rates, and the held-out error of the performance model.
//!
//! A live reconfiguration is priced by the cost model as a fixed part (`proc_init_ms`),
//! a set-up when it moves state (`model_build_ms_by_pp`), an extra when it adds holders
//! (`rendezvous_ms`), and its transfers on the profile's transfer curve. The curve comes
//! from `parcae-worker profile` (two endpoints, nothing else running); real moves also
//! (de)serialise tensors and share the cores with every other worker process, so the fit
//! scales the curve by what the run's moves show (`transfer_scale`). All four are fitted
//! together, by non-negative least squares over every live reconfiguration, with each
//! move's transfers priced for the holders it really lost (the stages of the workers under
//! notice). An add is priced as an add to a fresh process (one that never held state: a
//! new arrival, as most adds in a spot fleet are), the case the profiling run's churn
//! phase measures; an add to a worker that held state before is fitted apart and reported.

use std::collections::{BTreeMap, BTreeSet};

use parcae_cluster::perf::{self, nnls};
use parcae_cluster::{Layout, MigrationKind, ModelSpec, WorkerId};
use parcae_policy_core::liveput::scenario_cost_under;
use parcae_policy_core::{ModelProfile, ParallelConfig, Recovery};
use parcae_profile::{CommRebuildKind, CommRebuildSpec, CostConstants, Profile, ThroughputEntry};

use super::{LayoutRow, Reconfiguration, Report};
use crate::commands::run::{CheckpointReason, RunEvent, Timed};

/// What the profiling run's events hold, before any fitting.
#[derive(Debug, Default)]
struct Observed {
    /// Step periods per layout (ms), the first step after each reconfiguration left out
    /// and only in the passes (before the first notice), while the whole profiled fleet
    /// was alive.
    steps: BTreeMap<(u32, u32), Vec<f64>>,
    /// Live reconfigurations (transfers not yet priced).
    live: Vec<Reconfiguration>,
    /// Restarts of a running job: the layout restarted into and the wall time, ms.
    restarts: Vec<((u32, u32), f64)>,
    /// Emergency checkpoints' write times, ms.
    emergency_saves: Vec<f64>,
    /// Periodic checkpoints: snapshot and write rates per stage holder, GB/s.
    snapshot: Vec<f64>,
    write: Vec<f64>,
    /// Worker process start to joining, ms.
    starts: Vec<f64>,
    /// The longest notice the run gave, ms.
    notice_ms: f64,
}

fn observe(events: &[Timed]) -> Observed {
    let mut o = Observed::default();
    // The passes end at the first notice (the churn phase or the wipe).
    let mut in_passes = true;
    let mut warm = false;
    let mut last_step: Option<f64> = None;
    let mut current: Option<(u32, u32)> = None;
    let mut holders: BTreeMap<WorkerId, usize> = BTreeMap::new();
    let mut ever_held: BTreeSet<WorkerId> = BTreeSet::new();
    let mut alive: BTreeSet<WorkerId> = BTreeSet::new();
    let mut leaving: BTreeSet<WorkerId> = BTreeSet::new();
    let mut allocated = BTreeMap::new();
    for e in events {
        match &e.event {
            RunEvent::Step { data_parallel, pipeline_stages, .. } => {
                // The time from one step to the next: the step and what the host does
                // between steps (commit, the control loop, checkpoint snapshots), which a
                // run pays as often as it steps. Timed in the passes, with the whole fleet
                // alive, so the contention of every worker process is in the number.
                if warm
                    && in_passes
                    && let Some(last) = last_step
                {
                    o.steps
                        .entry((*data_parallel as u32, *pipeline_stages as u32))
                        .or_default()
                        .push((e.t_s - last) * 1000.0);
                }
                last_step = Some(e.t_s);
                warm = true;
            }
            RunEvent::Paused { .. } => warm = false,
            RunEvent::Reconfigured {
                kind,
                millis,
                data_parallel,
                pipeline_stages,
                parked: false,
                cold_start,
                holders: after,
                ..
            } => {
                warm = false;
                let to = (*data_parallel as u32, *pipeline_stages as u32);
                let new: Vec<WorkerId> =
                    after.iter().map(|(w, _)| *w).filter(|w| !holders.contains_key(w)).collect();
                match (kind, current) {
                    (MigrationKind::Restart, _) => o.restarts.push((to, *millis)),
                    (MigrationKind::None, _) => {}
                    (_, Some(from)) if !cold_start => {
                        let mut survivors = vec![from.0; from.1 as usize];
                        for (w, stage) in &holders {
                            if (leaving.contains(w) || !alive.contains(w))
                                && let Some(s) = survivors.get_mut(*stage)
                            {
                                *s = s.saturating_sub(1);
                            }
                        }
                        let spares = alive
                            .iter()
                            .filter(|w| !leaving.contains(*w) && !holders.contains_key(*w))
                            .count() as u32;
                        o.live.push(Reconfiguration {
                            kind: *kind,
                            from,
                            to,
                            measured_ms: *millis,
                            survivors,
                            spares,
                            adds: !new.is_empty(),
                            fresh: new.iter().any(|w| !ever_held.contains(w)),
                            transfer_ms: 0.0,
                        });
                    }
                    _ => {}
                }
                if !after.is_empty() {
                    holders = after.iter().copied().collect();
                    ever_held.extend(holders.keys());
                }
                leaving.clear();
                current = Some(to);
            }
            RunEvent::Checkpointed { bytes, millis, write_millis, reason, .. } => match reason {
                CheckpointReason::Periodic => {
                    let stages = f64::from(current.map_or(1, |c| c.1));
                    // Every stage holder snapshots and writes its own stage, in parallel.
                    if *millis > 0.0 {
                        o.snapshot.push(*bytes as f64 / stages / millis / 1e6);
                    }
                    if *write_millis > 0.0 {
                        o.write.push(*bytes as f64 / stages / write_millis / 1e6);
                    }
                }
                CheckpointReason::Emergency => o.emergency_saves.push(*write_millis),
                _ => {}
            },
            RunEvent::Allocated { worker, .. } => {
                allocated.insert(*worker, e.t_s);
            }
            RunEvent::Joined { worker, .. } => {
                alive.insert(*worker);
                if let Some(t) = allocated.get(worker) {
                    o.starts.push((e.t_s - t) * 1000.0);
                }
            }
            RunEvent::Notice { worker, grace_ms, .. } => {
                in_passes = false;
                leaving.insert(*worker);
                o.notice_ms = o.notice_ms.max(*grace_ms as f64);
            }
            RunEvent::Killed { worker, .. } | RunEvent::Lost { worker } => {
                in_passes = false;
                alive.remove(worker);
            }
            _ => {}
        }
    }
    o
}

/// The fitted cost of live reconfigurations; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct MoveCosts {
    fixed_ms: f64,
    setup_ms: f64,
    transfer_scale: f64,
    fresh_add_ms: f64,
    warm_add_ms: f64,
}

/// Non-negative least squares of `measured = fixed + setup [moves state] + scale x
/// transfers + fresh [adds a fresh process] + warm [adds one that held state]`.
fn fit_moves(moves: &[Reconfiguration]) -> MoveCosts {
    if moves.is_empty() {
        return MoveCosts { transfer_scale: 1.0, ..MoveCosts::default() };
    }
    let indicator = |b: bool| if b { 1.0 } else { 0.0 };
    let a: Vec<Vec<f64>> = moves
        .iter()
        .map(|r| {
            let moving = r.kind != MigrationKind::IntraStage;
            vec![
                1.0,
                indicator(moving),
                r.transfer_ms,
                indicator(moving && r.adds && r.fresh),
                indicator(moving && r.adds && !r.fresh),
            ]
        })
        .collect();
    let b: Vec<f64> = moves.iter().map(|r| r.measured_ms).collect();
    let x = nnls(&a, &b);
    // Without a move that transfers anything the scale is unknown: keep the curve.
    let scale = if moves.iter().any(|r| r.transfer_ms > 0.0) && x[2] > 0.0 { x[2] } else { 1.0 };
    MoveCosts { fixed_ms: x[0], setup_ms: x[1], transfer_scale: scale, fresh_add_ms: x[3], warm_add_ms: x[4] }
}

pub(super) fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 })
}

/// The mean step period without outliers (a gap more than 5x the median spans something
/// other than a step: a pause, a re-plan): the mean, not the median, is what sets the
/// samples a layout trains in an interval.
fn typical_mean(values: &mut [f64]) -> f64 {
    let Some(mid) = median(values) else { return f64::NAN };
    let kept: Vec<f64> = values.iter().copied().filter(|v| *v <= 5.0 * mid).collect();
    kept.iter().sum::<f64>() / kept.len().max(1) as f64
}

fn zero_overheads(profile: &mut ModelProfile) {
    profile.rendezvous_ms = 0.0;
    profile.process_start_ms = 0.0;
    profile.add_extra_ms = 0.0;
    profile.checkpoint_restart_ms = 0.0;
    for c in &mut profile.configs {
        c.comm_rebuild_add_ms = 0.0;
        c.comm_rebuild_remove_ms = 0.0;
        c.model_build_ms = 0.0;
    }
}

pub(super) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Fits the deployment profile and constants to the profiling run's events (see the
/// module docs).
pub fn fit(
    spec: &ModelSpec,
    base: &Profile,
    constants: &CostConstants,
    model: &str,
    events: &[Timed],
) -> anyhow::Result<(Report, parcae_profile::ProfileFile, parcae_profile::CostConstantsFile)> {
    let mut o = observe(events);
    anyhow::ensure!(!o.steps.is_empty(), "the profiling run timed no step");

    // What the cost model charges for transfers alone: the base profile with every
    // overhead zero. A live move is priced live (the run moved live), so restarts are
    // priced out of that copy; the notice is the run's, so a stage whose every holder was
    // under notice is evacuated as the run did.
    let mut free = base.model_profile(model, constants)?;
    zero_overheads(&mut free);
    let mut live_only = free.clone();
    live_only.checkpoint_restart_ms = 1e12;
    let recovery = Recovery { preemption_notice_ms: o.notice_ms, checkpoint_write_bytes_per_ms: 0.0 };
    let transfer = |r: &Reconfiguration| -> f64 {
        let from = ParallelConfig::new(r.from.0, r.from.1);
        let to = ParallelConfig::new(r.to.0, r.to.1);
        scenario_cost_under(&live_only, &recovery, Some(from), &r.survivors, r.spares, 0, Some(to))
            .map_or(0.0, |c| c.duration_ms)
    };
    for r in &mut o.live {
        r.transfer_ms = transfer(r);
    }
    let costs = fit_moves(&o.live);
    let s = costs.transfer_scale;
    // A restart: the emergency checkpoint's save, then everything above plus the
    // restart's own transfers (every new stage's state) at the fitted rate.
    let mut restart_residuals: Vec<f64> = o
        .restarts
        .iter()
        .map(|&(to, ms)| {
            let to = ParallelConfig::new(to.0, to.1);
            let cold = scenario_cost_under(&free, &recovery, None, &[], 0, to.instances() as u32, Some(to))
                .map_or(0.0, |c| c.duration_ms);
            (ms - s * cold - costs.fixed_ms - costs.setup_ms - costs.fresh_add_ms).max(0.0)
        })
        .collect();
    let restart_ms = median(&mut restart_residuals).unwrap_or(0.0);
    let save_ms = median(&mut o.emergency_saves).unwrap_or(0.0);

    // Held-out: the performance model fitted without each layout predicts it.
    let mut rows: Vec<LayoutRow> = o
        .steps
        .iter_mut()
        .map(|(&(dp, pp), times)| LayoutRow {
            dp,
            pp,
            steps: times.len(),
            step_ms: typical_mean(times),
            held_out_ms: None,
        })
        .collect();
    let observations: Vec<perf::Observation> = rows
        .iter()
        .filter_map(|r| {
            let layout = Layout::new(spec, r.dp as usize, r.pp as usize).ok()?;
            Some(perf::Observation {
                dp: r.dp as usize,
                pp: r.pp as usize,
                features: perf::layout_features(spec, &layout, perf::GradientExchange::BetweenProcesses),
                measured_ms: r.step_ms,
            })
        })
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let held_out = perf::leave_one_out(&observations, cores as f64);
    if let Some(h) = &held_out {
        for row in &mut rows {
            row.held_out_ms = h
                .points
                .iter()
                .find(|p| (p.dp, p.pp) == (row.dp as usize, row.pp as usize))
                .map(|p| p.predicted_ms);
        }
    }

    let report = Report {
        layouts: rows,
        held_out_mean_error: held_out.as_ref().map(|h| h.mean_abs_rel_error),
        reconfigurations: o.live,
        fixed_ms: costs.fixed_ms,
        setup_ms: costs.setup_ms,
        transfer_scale: s,
        rendezvous_ms: costs.fresh_add_ms,
        warm_add_ms: costs.warm_add_ms,
        save_ms,
        restart_ms,
        restarts: o.restarts.len(),
        worker_start_ms: median(&mut o.starts),
        snapshot_gb_per_s: median(&mut o.snapshot),
        write_gb_per_s: median(&mut o.write),
    };

    // The files: the base profile with measured throughput, the transfer curve at the
    // moves' rate, and the fitted overheads.
    let mut file = base.data().clone();
    for micros in file.p2p_us_by_bytes.values_mut() {
        *micros = round3(*micros * s);
    }
    let entry = file
        .models
        .get_mut(model)
        .ok_or_else(|| anyhow::anyhow!("the in-process profile has no model {model}"))?;
    let global = f64::from(entry.global_batch_size);
    entry.throughput = report
        .layouts
        .iter()
        .map(|r| ThroughputEntry {
            dp: r.dp,
            pp: r.pp,
            iteration_ms: round3(r.step_ms),
            samples_per_s: round3(global / (r.step_ms / 1000.0)),
        })
        .collect();
    entry.proc_init_ms = round3(report.fixed_ms);
    entry.rendezvous_ms = round3(report.rendezvous_ms);
    entry.restart_extra_ms = 0.0;
    entry.model_build_ms_by_pp = entry.throughput.iter().map(|t| (t.pp, round3(report.setup_ms))).collect();
    file.source = Some(format!(
        "MEASURED DEPLOYMENT (parcae-host profile): {} layouts trained by real worker processes on \
         loopback (QUIC with mutual TLS between processes) on {cores} cores; iteration_ms is each \
         layout's mean step period (step to step) with every worker process alive (contention \
         included). Fitted to {} live reconfigurations: proc_init_ms on every one, \
         model_build_ms_by_pp on one that moves state, rendezvous_ms on one that adds a fresh \
         process, and the transfer curve of parcae-worker profile scaled by {:.2} to the moves' \
         real rate. Layer sizes from parcae-worker profile.",
        report.layouts.len(),
        report.reconfigurations.len(),
        s
    ));
    let mut constants_file = constants.data().clone();
    constants_file.checkpoint_save_load_ms = round3(save_ms + restart_ms);
    if let Some(rate) = report.write_gb_per_s {
        constants_file.checkpoint_write_gb_per_s = Some(round3(rate.max(1e-3)));
    }
    if let Some(rate) = report.snapshot_gb_per_s {
        constants_file.checkpoint_snapshot_gb_per_s = Some(round3(rate.max(1e-3)));
    }
    constants_file.comm_rebuild.models.insert(
        model.to_string(),
        CommRebuildSpec {
            kind: CommRebuildKind::Groups,
            per_group_add_ms: Some(0.0),
            per_group_remove_ms: Some(0.0),
            add_ms_per_instance: None,
            remove_ms_per_instance: None,
            thresholds: None,
            ms: None,
            add_factor: None,
            constant_ms: 0.0,
            source: Some(
                "parcae-host profile: the workers' communicators are rebuilt within the measured \
                 reconfigurations, whose whole cost is in the profile's proc_init_ms, \
                 model_build_ms_by_pp and rendezvous_ms"
                    .to_string(),
            ),
        },
    );
    constants_file.source = Some(format!(
        "parcae-host profile: checkpoint_save_load_ms is the measured emergency checkpoint's save \
         plus the restart's cost beyond its transfers ({} restart(s)); checkpoint rates from the \
         run's periodic checkpoints; the other constants are the embedded ones ({})",
        report.restarts,
        constants.data().source.as_deref().unwrap_or("cost-constants.json")
    ));
    for key in ["checkpoint_save_load_ms", "checkpoint_write_gb_per_s", "checkpoint_snapshot_gb_per_s"] {
        constants_file
            .sources
            .insert(key.to_string(), "measured by parcae-host profile on this deployment".to_string());
    }
    Ok((report, file, constants_file))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded;

    fn at(t_s: f64, event: RunEvent) -> Timed {
        Timed { t_s, event }
    }

    fn reconfigured(
        kind: MigrationKind,
        to: (usize, usize),
        millis: f64,
        cold_start: bool,
        holders: &[(WorkerId, usize)],
    ) -> RunEvent {
        RunEvent::Reconfigured {
            epoch: 1,
            cold_start,
            rolled_back_steps: 0,
            step: 0,
            kind,
            data_parallel: to.0,
            pipeline_stages: to.1,
            bytes_moved: 0,
            bytes_sent: 0,
            bytes_from_checkpoint: 0,
            resent_chunks: 0,
            millis,
            parked: false,
            holders: holders.to_vec(),
            shares: Vec::new(),
        }
    }

    fn step(layout: (usize, usize)) -> RunEvent {
        RunEvent::Step {
            step: 0,
            loss: 1.0,
            samples: 32,
            millis: 1.0,
            data_parallel: layout.0,
            pipeline_stages: layout.1,
        }
    }

    /// Steps every `period` s from `t` (the first a warm-up).
    fn steps(out: &mut Vec<Timed>, t: f64, layout: (usize, usize), period: f64, n: usize) -> f64 {
        for i in 0..n {
            out.push(at(t + i as f64 * period, step(layout)));
        }
        t + n as f64 * period
    }

    fn checkpointed(reason: CheckpointReason, millis: f64, write_millis: f64) -> RunEvent {
        RunEvent::Checkpointed {
            step: 20,
            bytes: 2_000_000,
            millis,
            write_millis,
            reason,
            location: "x".into(),
        }
    }

    #[test]
    fn step_periods_and_overheads_are_fitted_from_the_run() {
        let base = embedded::profile_or_example(None).unwrap();
        let constants = embedded::constants_or_embedded(None).unwrap();
        let spec = ModelSpec::default();
        let mut events = vec![
            at(0.0, RunEvent::Joined { worker: 1, instance_type: String::new() }),
            at(0.0, RunEvent::Joined { worker: 2, instance_type: String::new() }),
            at(0.0, RunEvent::Joined { worker: 3, instance_type: String::new() }),
        ];
        events.push(at(0.1, reconfigured(MigrationKind::Restart, (1, 1), 40.0, true, &[(1, 0)])));
        let t = steps(&mut events, 0.2, (1, 1), 0.050, 11);
        events.push(at(t, reconfigured(MigrationKind::Repartition, (1, 2), 25.0, false, &[(1, 0), (2, 1)])));
        let t = steps(&mut events, t + 0.1, (1, 2), 0.030, 11);
        events.push(at(t, checkpointed(CheckpointReason::Periodic, 1.0, 10.0)));
        events.push(at(
            t + 0.01,
            reconfigured(MigrationKind::Repartition, (2, 1), 25.0, false, &[(1, 0), (2, 0)]),
        ));
        let t = steps(&mut events, t + 0.1, (2, 1), 0.040, 11);
        // Worker 2 gets a notice; its replica goes to worker 3, which never held state.
        let notice = RunEvent::Notice {
            worker: 2,
            node: "n2".into(),
            grace_ms: 2000,
            source: "trace".into(),
            detail: None,
        };
        events.push(at(t, notice));
        events.push(at(
            t + 0.01,
            reconfigured(MigrationKind::InterStage, (2, 1), 30.0, false, &[(1, 0), (3, 0)]),
        ));
        events.push(at(t + 0.02, RunEvent::Killed { worker: 2, node: "n2".into(), announced: true }));
        // Steps after the first notice are not timed (the fleet's contention changed).
        let t = steps(&mut events, t + 0.1, (2, 1), 0.020, 11);
        events.push(at(t, checkpointed(CheckpointReason::Emergency, 12.0, 12.0)));
        events.push(at(t, RunEvent::Paused { step: 30, available: 0 }));
        events.push(at(t + 1.0, reconfigured(MigrationKind::Restart, (1, 1), 90.0, false, &[(4, 0)])));
        steps(&mut events, t + 1.1, (1, 1), 0.050, 3);

        let (report, file, constants_file) = fit(&spec, &base, &constants, "tiny-gpt", &events).unwrap();
        let period = |d, p| report.layouts.iter().find(|r| (r.dp, r.pp) == (d, p)).unwrap().step_ms;
        // Step to step, the first step after each reconfiguration left out.
        assert!((period(1, 1) - 50.0).abs() < 1e-6 && (period(1, 2) - 30.0).abs() < 1e-6, "{report:?}");
        assert!((period(2, 1) - 40.0).abs() < 1e-6, "{report:?}");
        assert_eq!(report.layouts.iter().map(|r| r.steps).sum::<usize>(), 10 + 10 + 10);
        // The moves: what each lost and added.
        let moves: Vec<(Vec<u32>, u32, bool, bool)> = report
            .reconfigurations
            .iter()
            .map(|r| (r.survivors.clone(), r.spares, r.adds, r.fresh))
            .collect();
        assert_eq!(
            moves,
            [(vec![1], 2, true, true), (vec![1, 1], 1, false, false), (vec![1], 1, true, true)],
            "{report:?}"
        );
        assert!(report.reconfigurations.iter().all(|r| r.transfer_ms > 0.0), "{report:?}");
        assert!(report.transfer_scale > 0.0, "{report:?}");
        assert_eq!(report.restarts, 2);
        assert_eq!(report.save_ms, 12.0);
        // 2 MB of a two-stage layout: each holder snapshots 1 MB in 1 ms and writes it in 10 ms.
        assert_eq!((report.write_gb_per_s, report.snapshot_gb_per_s), (Some(0.1), Some(1.0)));
        let entry = &file.models["tiny-gpt"];
        let throughput: Vec<(u32, u32, f64)> =
            entry.throughput.iter().map(|t| (t.dp, t.pp, t.iteration_ms)).collect();
        assert_eq!(throughput, [(1, 1, 50.0), (1, 2, 30.0), (2, 1, 40.0)]);
        assert_eq!(entry.throughput[0].samples_per_s, 640.0);
        assert!(entry.model_build_ms_by_pp.values().all(|&b| b == round3(report.setup_ms)));
        // The transfer curve is the in-process one at the moves' rate.
        for (bytes, micros) in &file.p2p_us_by_bytes {
            let before = base.data().p2p_us_by_bytes[bytes];
            assert!((micros - round3(before * report.transfer_scale)).abs() < 1e-9, "{bytes}");
        }
        let rule = &constants_file.comm_rebuild.models["tiny-gpt"];
        assert_eq!((rule.per_group_add_ms, rule.constant_ms), (Some(0.0), 0.0));
        assert_eq!(constants_file.checkpoint_write_gb_per_s, Some(0.1));
        assert_eq!(constants_file.checkpoint_save_load_ms, round3(report.save_ms + report.restart_ms));
        // Both files load, and the profile's model plans only the layouts measured.
        let text = serde_json::to_string(&file).unwrap();
        let profile = Profile::from_json(&text, "deployment.json").unwrap();
        let constants =
            CostConstants::from_json(&serde_json::to_string(&constants_file).unwrap(), "c.json").unwrap();
        let model = profile.model_profile("tiny-gpt", &constants).unwrap();
        assert_eq!(model.configs.len(), 3);
        assert_eq!(model.checkpoint_restart_ms, constants_file.checkpoint_save_load_ms);
    }

    fn synthetic(
        kind: MigrationKind,
        transfer_ms: f64,
        adds: bool,
        fresh: bool,
        costs: &MoveCosts,
    ) -> Reconfiguration {
        let moving = kind != MigrationKind::IntraStage;
        let mut ms =
            costs.fixed_ms + if moving { costs.setup_ms + costs.transfer_scale * transfer_ms } else { 0.0 };
        if moving && adds {
            ms += if fresh { costs.fresh_add_ms } else { costs.warm_add_ms };
        }
        Reconfiguration {
            kind,
            from: (1, 1),
            to: (1, 1),
            measured_ms: ms,
            survivors: vec![1],
            spares: 0,
            adds,
            fresh,
            transfer_ms,
        }
    }

    #[test]
    fn move_costs_are_recovered_from_their_sum() {
        let truth = MoveCosts {
            fixed_ms: 1.5,
            setup_ms: 4.0,
            transfer_scale: 2.5,
            fresh_add_ms: 6.0,
            warm_add_ms: 1.0,
        };
        use MigrationKind::{InterStage, IntraStage, Repartition};
        let moves = [
            synthetic(IntraStage, 0.0, false, false, &truth),
            synthetic(IntraStage, 0.0, false, false, &truth),
            synthetic(Repartition, 1.0, false, false, &truth),
            synthetic(Repartition, 3.0, false, false, &truth),
            synthetic(Repartition, 2.0, true, false, &truth),
            synthetic(InterStage, 3.5, true, true, &truth),
            synthetic(InterStage, 7.0, true, true, &truth),
            synthetic(Repartition, 5.0, true, false, &truth),
        ];
        let fitted = fit_moves(&moves);
        for (got, want) in [
            (fitted.fixed_ms, truth.fixed_ms),
            (fitted.setup_ms, truth.setup_ms),
            (fitted.transfer_scale, truth.transfer_scale),
            (fitted.fresh_add_ms, truth.fresh_add_ms),
            (fitted.warm_add_ms, truth.warm_add_ms),
        ] {
            assert!((got - want).abs() < 1e-6, "{fitted:?}");
        }
        // Nothing measured: the curve stays as it is.
        assert_eq!(fit_moves(&[]).transfer_scale, 1.0);
    }

    #[test]
    fn a_run_without_steps_is_an_error() {
        let base = embedded::profile_or_example(None).unwrap();
        let constants = embedded::constants_or_embedded(None).unwrap();
        let events = [at(0.0, reconfigured(MigrationKind::Restart, (1, 1), 40.0, true, &[]))];
        let error = fit(&ModelSpec::default(), &base, &constants, "tiny-gpt", &events).unwrap_err();
        assert!(error.to_string().contains("timed no step"), "{error}");
    }
}
