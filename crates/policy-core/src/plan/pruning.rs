//! Candidate pruning for large profiles: per interval, the states the program
//! may choose, and the predecessors it tries for each; see the module
//! documentation of [`super`], *Pruning*.

use std::collections::BTreeMap;

use super::layouts::LayoutChoice;
use super::scenarios::Mixture;
use super::{PlanOptions, Step};

/// When pruning, widths per kept depth on the geometric grid.
const PRUNE_WIDTHS: u32 = 24;

/// When pruning, predecessors of another depth considered per layout: the
/// most valuable ones.
const PRUNE_CROSS: usize = 4;

/// When pruning, whether the program tries predecessor `from`, the `rank`-th
/// most valuable of the interval, for state `to` (the pause is index
/// `layouts.len()`): the [`PRUNE_CROSS`] most valuable, the pause, and the
/// layouts of `to`'s depth.
pub(super) fn tries_predecessor(layouts: &[LayoutChoice], rank: usize, from: usize, to: usize) -> bool {
    let depth = |k: usize| layouts.get(k).map(|c| c.config.pipeline_stages);
    rank < PRUNE_CROSS || from == layouts.len() || depth(from) == depth(to)
}

/// Per interval and state (`mixtures.len() x (S + 1)`, the pause last),
/// whether the pruned program may choose it. `start` is the state of
/// `current` when it is a layout; `afters` the instances after each
/// interval's change. Shrink targets follow each interval's scenario with the
/// most preemptions.
pub(super) fn pruned_states(
    layouts: &[LayoutChoice],
    start: Option<usize>,
    mixtures: &[Mixture],
    afters: &[u64],
    options: PlanOptions,
) -> Vec<bool> {
    let n_states = layouts.len() + 1;
    let index = LayoutIndex::new(layouts);
    let kept = index.kept_depths(start, afters, options.prune_depths);
    let grid = index.geometric_grid(&kept);
    let mut bounds = afters.to_vec();
    bounds.sort_unstable();
    bounds.dedup();
    let mut allowed = vec![false; afters.len() * n_states];
    // Layouts shrunk after preemptions come from these (per interval).
    let mut anchors: Vec<usize> = start.into_iter().collect();
    for (i, (&after, step)) in afters.iter().zip(heaviest_scenarios(mixtures)).enumerate() {
        let row = &mut allowed[i * n_states..(i + 1) * n_states];
        row[n_states - 1] = true;
        if let Some(k) = start {
            row[k] = true;
        }
        for &k in &grid {
            row[k] = layouts[k].instances <= after;
        }
        let mut next = Vec::new();
        for &p in &kept {
            for &bound in bounds.iter().filter(|&&b| b <= after) {
                if let Some(k) = index.best_within(p, bound) {
                    row[k] = true;
                    if bound == after {
                        next.push(k);
                    }
                }
            }
        }
        if step.preempted > 0 && step.instances_before > 0 {
            for &k in &anchors {
                for j in index.shrink_targets(k, step, after) {
                    row[j] = true;
                    next.push(j);
                }
            }
        }
        // The next interval's anchors: `current`, this interval's shrink
        // targets and the best layout of each kept depth that fits.
        anchors = start.into_iter().chain(next).collect();
        anchors.sort_unstable();
        anchors.dedup();
    }
    allowed
}

/// Per interval, the scenario with the most preemptions (the last of equals).
fn heaviest_scenarios(mixtures: &[Mixture]) -> Vec<Step> {
    mixtures
        .iter()
        .map(|m| m.iter().map(|&(_, s)| s).max_by_key(|s| s.preempted).unwrap_or_default())
        .collect()
}

/// The layouts looked up by depth and by `(depth, width)`.
struct LayoutIndex<'a> {
    /// The layouts the program may choose.
    layouts: &'a [LayoutChoice],
    /// Layout indices per pipeline depth, in profile order.
    by_depth: BTreeMap<u32, Vec<usize>>,
    /// Layout index per `(pipeline depth, data-parallel width)`.
    by_width: BTreeMap<(u32, u32), usize>,
}

impl<'a> LayoutIndex<'a> {
    fn new(layouts: &'a [LayoutChoice]) -> Self {
        let mut by_depth: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (k, c) in layouts.iter().enumerate() {
            by_depth.entry(c.config.pipeline_stages).or_default().push(k);
        }
        let by_width = layouts
            .iter()
            .enumerate()
            .map(|(k, c)| ((c.config.pipeline_stages, c.config.data_parallel), k))
            .collect();
        LayoutIndex { layouts, by_depth, by_width }
    }

    /// The best layout of `depth` with at most `bound` instances: highest
    /// throughput, then fewer instances, then profile order.
    fn best_within(&self, depth: u32, bound: u64) -> Option<usize> {
        let layouts = self.layouts;
        self.by_depth.get(&depth)?.iter().copied().filter(|&k| layouts[k].instances <= bound).max_by(
            |&x, &y| {
                let (a, b) = (&layouts[x], &layouts[y]);
                a.thr.total_cmp(&b.thr).then(b.instances.cmp(&a.instances)).then(y.cmp(&x))
            },
        )
    }

    /// The depths kept over the horizon, sorted: per interval the
    /// `prune_depths` (at least 1) whose best layout that fits has the highest
    /// throughput, plus the depth of `start`.
    fn kept_depths(&self, start: Option<usize>, afters: &[u64], prune_depths: usize) -> Vec<u32> {
        let mut kept: Vec<u32> = start.map(|k| self.layouts[k].config.pipeline_stages).into_iter().collect();
        for &after in afters {
            let mut scored: Vec<(f64, u32)> = self
                .by_depth
                .keys()
                .filter_map(|&p| self.best_within(p, after).map(|k| (self.layouts[k].thr, p)))
                .collect();
            scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            kept.extend(scored.iter().take(prune_depths.max(1)).map(|&(_, p)| p));
        }
        kept.sort_unstable();
        kept.dedup();
        kept
    }

    /// Per kept depth, the profiled layouts among [`PRUNE_WIDTHS`] widths in
    /// geometric progression from 1 to the widest.
    fn geometric_grid(&self, kept: &[u32]) -> Vec<usize> {
        let mut grid: Vec<usize> = Vec::new();
        for p in kept {
            let top =
                self.by_depth.get(p).into_iter().flatten().map(|&k| self.layouts[k].config.data_parallel);
            let top = top.max().unwrap_or(1);
            for g in 0..PRUNE_WIDTHS {
                let d = f64::from(top).powf(f64::from(g) / f64::from(PRUNE_WIDTHS - 1)).round() as u32;
                if let Some(&k) = self.by_width.get(&(*p, d)) {
                    grid.push(k);
                }
            }
        }
        grid
    }

    /// Dropping replicas is cheap and adding them is not: after `step`'s
    /// preemptions, the layouts of `anchor`'s depth that fit `after` with
    /// `D - 1`, `D - (l + sqrt l)` and `D - (l + 2 sqrt l) - 1` replicas
    /// (rounded up), `l` the replicas a stage of `anchor` is expected to lose.
    fn shrink_targets(&self, anchor: usize, step: Step, after: u64) -> Vec<usize> {
        let c = self.layouts[anchor].config;
        let lam = f64::from(step.preempted) * f64::from(c.data_parallel) / f64::from(step.instances_before);
        let lost = [1, (lam + lam.sqrt()).ceil() as u32, (lam + 2.0 * lam.sqrt()).ceil() as u32 + 1];
        lost.map(|l| c.data_parallel.saturating_sub(l))
            .into_iter()
            .filter_map(|d| self.by_width.get(&(c.pipeline_stages, d)).copied())
            .filter(|&j| self.layouts[j].instances <= after)
            .collect()
    }
}
