//! `parcae-host bench-migration`: bytes a reconfiguration moves when workers are
//! matched to slots by Kuhn-Munkres versus in naive order, over every
//! reconfiguration a policy makes on a trace.
//!
//! The fleet is the trace's own: each instance keeps its identity, a preempted
//! instance takes its layers with it, a new one holds nothing. At each interval
//! the policy's configuration is laid out with the profile's partition, and the
//! planner maps the instances alive onto it; both strategies replay the same
//! decisions on their own (diverging) holdings.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use comfy_table::Table;
use parcae_cluster::{AssignmentStrategy, Holding, Layout, MigrationKind, WorkerId, plan_migration};
use parcae_policy_core::ParallelConfig;
use parcae_profile::Profile;
use parcae_traces::EventKind;
use serde::Serialize;

use crate::args::{NoticeArgs, PolicyArgs, ProfileArgs, SandboxArgs, TraceInput};
use crate::control::{ControlSettings, replay};

/// Options of `parcae-host bench-migration`.
#[derive(Debug, Args)]
pub struct MigrationBenchArgs {
    /// Trace to replay (default: the embedded demo trace).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// How to read the trace.
    #[command(flatten)]
    pub input: TraceInput,
    /// Which model to plan for.
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// The policies whose decisions are replayed.
    #[command(flatten)]
    pub policies: PolicyArgs,
    /// Intervals each forecast and plan covers.
    #[arg(long, default_value_t = 8)]
    pub horizon: u32,
    /// Budgets of each policy call.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// The preemption notice the policy plans with.
    #[command(flatten)]
    pub notice: NoticeArgs,
    /// Write the totals as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// What one strategy moved over the whole trace.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StrategyTotals {
    /// How workers were matched to slots.
    pub strategy: String,
    /// Reconfigurations that moved state.
    pub reconfigurations: usize,
    /// Those by kind (`intra-stage`, `inter-stage`, ...).
    pub by_kind: BTreeMap<String, usize>,
    /// Bytes sent between workers.
    pub bytes_moved: u64,
    /// Bytes loaded from the checkpoint.
    pub bytes_from_checkpoint: u64,
    /// Transfer time of the moved bytes at the profile's point-to-point curve,
    /// one transfer per layer, serialised (an upper bound).
    pub transfer_seconds: f64,
}

/// Replays `decisions` over the trace's fleet with one strategy.
fn replay_strategy(
    strategy: AssignmentStrategy,
    layer_bytes: &[u64],
    partitions: &BTreeMap<u32, Vec<Range<usize>>>,
    events_by_interval: &[Vec<(EventKind, String)>],
    configs: &[Option<ParallelConfig>],
    profile: &Profile,
) -> anyhow::Result<StrategyTotals> {
    let mut ids: BTreeMap<String, WorkerId> = BTreeMap::new();
    let mut next_id: WorkerId = 1;
    let mut holdings: BTreeMap<WorkerId, Range<usize>> = BTreeMap::new();
    let mut current: Option<Layout> = None;
    let mut totals = StrategyTotals { strategy: format!("{strategy:?}"), ..StrategyTotals::default() };
    for (k, (events, config)) in events_by_interval.iter().zip(configs).enumerate() {
        for (kind, node) in events {
            match kind {
                EventKind::Add => {
                    ids.insert(node.clone(), next_id);
                    holdings.insert(next_id, 0..0);
                    next_id += 1;
                }
                EventKind::Remove => {
                    if let Some(id) = ids.remove(node) {
                        holdings.remove(&id);
                    }
                }
            }
        }
        let Some(config) = config else {
            // A pause keeps whatever state survives on the instances.
            continue;
        };
        let stages = partitions
            .get(&config.pipeline_stages)
            .with_context(|| format!("interval {k}: no partition for P={}", config.pipeline_stages))?
            .clone();
        let target = Layout {
            data_parallel: config.data_parallel as usize,
            pipeline_stages: config.pipeline_stages as usize,
            stages,
            shares: Vec::new(),
        };
        // Same layout and every slot's worker still alive: nothing to do.
        let unchanged = current.as_ref() == Some(&target)
            && holdings.values().filter(|r| !r.is_empty()).count() == target.workers();
        if unchanged {
            continue;
        }
        let list: Vec<Holding> =
            holdings.iter().map(|(&worker, layers)| Holding::new(worker, layers.clone(), false)).collect();
        let plan = match plan_migration(layer_bytes, current.as_ref(), &list, &target, strategy) {
            Ok(plan) => plan,
            // The policy never plans beyond the fleet; if the trace disagrees, skip the interval.
            Err(parcae_cluster::migration::MigrationError::TooFewWorkers { .. }) => continue,
            Err(e) => return Err(e).with_context(|| format!("interval {k}")),
        };
        if plan.kind != MigrationKind::None {
            totals.reconfigurations += 1;
            *totals.by_kind.entry(plan.kind.as_str().to_string()).or_default() += 1;
        }
        totals.bytes_moved += plan.bytes_moved;
        totals.bytes_from_checkpoint += plan.bytes_from_checkpoint;
        totals.transfer_seconds += plan
            .transfers
            .iter()
            .filter(|t| matches!(t.from, parcae_cluster::TransferSource::Worker(_)))
            .map(|t| profile.transfer_ms(t.bytes) / 1000.0)
            .sum::<f64>();
        for id in holdings.keys().copied().collect::<Vec<_>>() {
            let keep = plan.slot_of(id).map_or(0..0, |slot| target.layers(slot));
            holdings.insert(id, keep);
        }
        current = Some(target);
    }
    Ok(totals)
}

/// Runs `parcae-host bench-migration`.
pub fn run(args: &MigrationBenchArgs) -> anyhow::Result<()> {
    let trace = args.input.load_or_demo(args.trace.as_deref())?;
    let interval_ms = args.input.interval_ms()?;
    let series = trace.series(interval_ms)?;
    let raw = args.profile.raw()?;
    let (profile, _) = args.profile.load_with_prices()?;
    let layer_params = raw.layer_params(&profile.model)?;
    let per_param = layer_params.state_bytes_per_param();
    let layer_bytes: Vec<u64> = layer_params.layers.iter().map(|p| p * per_param).collect();
    let mut partitions = BTreeMap::new();
    for c in &profile.configs {
        let pp = c.config.pipeline_stages;
        if let std::collections::btree_map::Entry::Vacant(slot) = partitions.entry(pp) {
            let ranges = parcae_profile::partition(&layer_params.layers, pp)
                .with_context(|| format!("partitioning {} into {pp} stages", profile.model))?;
            slot.insert(ranges);
        }
    }

    let runtime = args.sandbox.runtime()?;
    let mut policy = args.policies.guarded(&runtime)?;
    let fleet_max = series.intervals.iter().map(|s| s.instances).max().unwrap_or(0);
    let (recovery, _) = args.notice.recovery_for(trace.source(), &args.profile.constants()?)?;
    let settings = ControlSettings { interval_ms, horizon: args.horizon, fleet_max, recovery };
    let decisions = replay(&series.intervals, &profile, &mut policy, &settings, |_| {});
    let configs: Vec<Option<ParallelConfig>> = decisions.iter().map(|d| d.config).collect();
    let mut events_by_interval = vec![Vec::new(); series.len()];
    for e in trace.events() {
        let k = ((e.t_ms / interval_ms) as usize).min(series.len().saturating_sub(1));
        events_by_interval[k].push((e.kind, e.node.clone()));
    }

    let km = replay_strategy(
        AssignmentStrategy::KuhnMunkres,
        &layer_bytes,
        &partitions,
        &events_by_interval,
        &configs,
        &raw,
    )?;
    let naive = replay_strategy(
        AssignmentStrategy::Naive,
        &layer_bytes,
        &partitions,
        &events_by_interval,
        &configs,
        &raw,
    )?;

    println!(
        "{}: {} intervals, model {}, decisions of {}",
        trace.name(),
        series.len(),
        profile.model,
        args.policies.policy_spec()
    );
    let mut table = Table::new();
    table.set_header(vec![
        "assignment",
        "reconfigurations",
        "intra",
        "inter",
        "repartition",
        "restart",
        "GiB moved",
        "GiB from checkpoint",
        "transfer s",
    ]);
    let gib = |b: u64| format!("{:.2}", b as f64 / (1u64 << 30) as f64);
    for t in [&km, &naive] {
        let n = |k: &str| t.by_kind.get(k).copied().unwrap_or(0).to_string();
        table.add_row(vec![
            t.strategy.clone(),
            t.reconfigurations.to_string(),
            n("intra-stage"),
            n("inter-stage"),
            n("repartition"),
            n("restart"),
            gib(t.bytes_moved),
            gib(t.bytes_from_checkpoint),
            format!("{:.1}", t.transfer_seconds),
        ]);
    }
    println!("{table}");
    if km.bytes_moved > 0 {
        println!(
            "naive / Kuhn-Munkres bytes moved: {:.2}x ({} vs {} bytes)",
            naive.bytes_moved as f64 / km.bytes_moved as f64,
            naive.bytes_moved,
            km.bytes_moved
        );
    }
    if let Some(path) = &args.json {
        let doc = serde_json::json!({ "trace": trace.name(), "model": profile.model, "policy": args.policies.policy_spec(), "kuhn_munkres": km, "naive": naive });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_never_moves_more_than_naive_order_on_a_churning_fleet() {
        let raw = crate::embedded::profile_or_example(None).unwrap();
        let lp = raw.layer_params("tiny-gpt").unwrap();
        let layer_bytes: Vec<u64> = lp.layers.iter().map(|p| p * lp.state_bytes_per_param()).collect();
        let partitions: BTreeMap<u32, Vec<Range<usize>>> =
            [1, 2, 4].into_iter().map(|p| (p, parcae_profile::partition(&lp.layers, p).unwrap())).collect();
        // Eight instances, then churn that leaves stage holders out of slot order.
        let add = |n: &str| (EventKind::Add, n.to_string());
        let remove = |n: &str| (EventKind::Remove, n.to_string());
        let events = vec![
            (1..=8).map(|i| add(&format!("n{i}"))).collect(),
            vec![remove("n1"), remove("n3"), add("n9"), add("n10")],
            vec![remove("n2"), remove("n5")],
            vec![add("n11"), add("n12")],
        ];
        let c = |d, p| Some(ParallelConfig::new(d, p));
        let configs = vec![c(2, 4), c(2, 4), c(3, 2), c(4, 2)];
        let km = replay_strategy(
            AssignmentStrategy::KuhnMunkres,
            &layer_bytes,
            &partitions,
            &events,
            &configs,
            &raw,
        )
        .unwrap();
        let naive =
            replay_strategy(AssignmentStrategy::Naive, &layer_bytes, &partitions, &events, &configs, &raw)
                .unwrap();
        assert!(km.bytes_moved < naive.bytes_moved, "{} vs {}", km.bytes_moved, naive.bytes_moved);
        assert_eq!(km.reconfigurations, naive.reconfigurations);
        assert!(km.by_kind.contains_key("repartition"));
    }
}
