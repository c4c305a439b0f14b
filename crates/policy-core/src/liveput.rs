//! Liveput: what one reconfiguration costs, for one concrete preemption
//! scenario ([`scenario_cost`]) and in expectation over which instances are
//! preempted ([`expected_transition`], [`transition_distribution`]), and the
//! expected samples an interval yields net of that cost ([`liveput`]).
//!
//! # The setting (DESIGN.md sections 3-4)
//!
//! A job runs layout `from = (D, P)` on `N = instances_before` instances: the
//! first `D x P` instances hold pipeline stages (`D` replicas of each of the `P`
//! stages), the other `S = N - D x P` are spares. During the interval `n_out =
//! preempted` of the `N` instances are taken back, a uniform random subset
//! without replacement, and `n_in = arrived` new ones join. The job then moves
//! to `to = (d, p)`, which must fit in `N - n_out + n_in` instances.
//!
//! # Migration kinds and their cost
//!
//! The cost rules follow the Parcae artifact (`JF-D/Parcae`, files
//! `liveput/monte_carlo.py`, `liveput/cost.py`, `liveput/throughput.py`,
//! `liveput/model.py`). Every duration is in ms, all numbers come from the
//! [`ModelProfile`]; `s_j` is the number of live replicas of old stage `j`
//! after the preemptions, `B_j` the state bytes of stage `j`, `t(x)` the
//! point-to-point transfer time of `x` bytes ([`transfer_ms`]).
//!
//! Two building blocks of `cost.py`, both for the *new* layout `(d, p)`:
//!
//! - `R_add = rendezvous + add_extra + comm_rebuild_add + process_start +
//!   model_build` and `R_remove = comm_rebuild_remove + process_start +
//!   model_build` (`CostModel.estimate_restart_cost`, types `'add'` and
//!   `'remove'`). A reconfiguration is of type *add* when the new layout needs
//!   instances that held no stage before, i.e. `d x p > sum_j s_j`, and of type
//!   *remove* otherwise.
//! - `intra = comm_rebuild_remove + process_start`
//!   (`CostModel.estimate_intra_stage_migration`).
//!
//! The kinds ([`MigrationKind`]), checked in this order:
//!
//! 1. **restart** when some old stage lost every replica (`s_j = 0`) and the
//!    preemption notice does not let it be evacuated ([`crate::recovery`]:
//!    an evacuated stage migrates as if it kept one replica, after the
//!    evacuation transfer `t(B_j)`; a stage whose emergency checkpoint fits in
//!    the notice restarts without rolling back). Cost:
//!    `R_type + checkpoint_restart + sum_q t(B'_q)` (the artifact's reactive
//!    restart, `ThroughputOptimized.reconfiguration` in `throughput.py`: restart
//!    cost, 14 s of checkpoint save/load, then every new stage's full state one
//!    after another); bytes `d x sum_q B'_q` (every new instance loads its
//!    stage). Unless the notice covered it, it also **loses the work since the
//!    last checkpoint**
//!    ([`ScenarioCost::lost_work`]), on average half a checkpoint interval
//!    ([`lost_work_ms`]). A cold start (`from = None`) is a restart of type add
//!    that loses nothing (nothing was running).
//! 2. **none** when `to == from` and no stage lost a replica: the running
//!    pipelines are untouched (lost spares and arrivals change nothing). Cost 0.
//! 3. With `p == P`:
//!    - **intra-stage** when every stage still has `s_j >= d` replicas: drop the
//!      surplus replicas and rebuild the communicators. Cost `intra`
//!      (`MonteCarloLiveput.migration`, first branch). No bytes move.
//!    - **inter-stage** otherwise: stage `j` lacks `delta_j = d - s_j` replicas;
//!      each new replica receives stage `j`'s full state from a surviving
//!      replica. The `s_j` survivors send in parallel, each to
//!      `ceil(delta_j / s_j)` receivers one after another; stages run in
//!      parallel. Cost `max_j ceil(delta_j / s_j) t(B_j) + R_type`, bytes
//!      `sum_j delta_j B_j` (`MonteCarloLiveput.estimate_inter_stage_migration`).
//! 4. With `p != P`, **repartition**: layers move to the new stage boundaries
//!    (see below). Cost `transfer + R_type` (`MonteCarloLiveput.repartition`).
//!
//! A live inter-stage migration or repartition whose transfer time exceeds a
//! restart's extra time (`checkpoint_restart + sum_q t(B'_q)`) restarts from a
//! checkpoint instead (no lost work: the job is alive to save it), so the
//! live model's actions include restart-on-change's. A restart also abandons
//! a migration still in flight when its `R_type` is less than the rest
//! ([`Outcome::busy_ms`]).
//!
//! # Restart on change (the reactive baseline)
//!
//! [`MigrationMode::RestartOnChange`] is the artifact's checkpoint-restart
//! baseline instead of live migration: every availability change restarts the
//! job (`R_type + checkpoint + sum_q t(B'_q)`; lost work by the same rules as
//! live migration), and a restart overlapping one in flight pays the new one
//! plus `R_type`. See
//! [`restart_transition`] and [`restart_liveput`]; [`liveput_with_mode`]
//! dispatches on the mode.
//!
//! # Where we deliberately differ from the artifact
//!
//! - **Infeasible scenarios restart.** The artifact never lets a scenario be
//!   infeasible: it treats a stage with no survivor as an inter-stage
//!   migration (its `redundant_cost`) and repartitions from layers nobody holds
//!   any more, so its feasibility probability is always 1. Here such a scenario
//!   is recovered by the deployment's notice ([`crate::recovery`]) or is a
//!   restart that pays the checkpoint reload and loses the work since the
//!   last checkpoint. This is what makes deep, narrow pipelines (many stages, few
//!   replicas each) risky, as they are.
//! - **Repartition volume.** The artifact's `repartition` keeps only the last new
//!   stage's missing parameters (`total_params_need = num_params` instead of
//!   `+=`; `throughput.py` has `+=`), so it under-counts the volume. Here the
//!   bytes come from the partitions themselves: the overlap of old stage `j` and
//!   new stage `q` in bytes follows exactly from the two partitions' cumulative
//!   state at their boundaries (both are contiguous splits of the same layers).
//!   Every new slot (replica `r` of new stage `q`) is filled by one instance and
//!   receives the bytes of `q` it does not already hold. Which survivor fills
//!   which slot is the transportation problem of SpotServe's migration planner;
//!   we solve it exactly at full strength (each old stage offering `D`
//!   instances, each new stage taking `d`), which is a path-structured problem
//!   solved by a small dynamic program, and then give each old stage's
//!   allocated slots to its `s_j` survivors best-overlap first; slots left
//!   unserved receive their full state from a spare or an arrival. The result is
//!   a feasible plan: its bytes are exact at full strength and never below the
//!   planner's optimum otherwise (no under-count). The transfer time is that of
//!   the slowest receiving instance, receivers pulling in parallel (the
//!   artifact's broadcast term `max_q t(B'_q)` is the same idea); sender
//!   contention is not modelled.
//! - **Within-stage rounds.** The artifact charges one transfer per deficient
//!   stage whatever the deficit; we charge `ceil(delta_j / s_j)` transfers, which
//!   is the same as long as every survivor serves at most one receiver. We drop
//!   its special case that serialises the last stage when it keeps exactly one
//!   replica (`stage_id == pp - 1 and nnodes == dp - 1`), which has no stated
//!   reason.
//! - **Add or remove** is decided by `d x p > sum_j s_j` (new members are needed)
//!   instead of the artifact's `dp * pp > D * P - n_out`, which also counts
//!   preempted spares as lost stage holders.
//! - **Lost spares are free.** The artifact charges an intra-stage migration
//!   whenever anything is preempted, even a spare, if the layout is unchanged; we
//!   charge nothing when every stage keeps all its replicas.
//! - **Carried migrations** ([`liveput`]): the artifact, when a migration is
//!   still running and a new one starts, charges the new one plus a fresh restart
//!   instead of the remainder; we charge the remainder plus the new one,
//!   sequentially.
//!
//! # Exact expectation
//!
//! The preempted stage holders per stage `(k_0, .., k_{P-1})` and spares `k_s`
//! follow a multivariate hypergeometric law: `Pr(k) = prod_j C(D, k_j) x C(S,
//! k_s) / C(N, n_out)` with `sum k = n_out`. The kind and the cost depend on
//! `k` only through per-stage terms (a per-stage time whose maximum is taken,
//! per-stage bytes that add up, per-stage membership in a class) and the total
//! `c = sum_j k_j` (add or remove). So every needed quantity is a coefficient
//! of a product of per-stage polynomials, computed by a dynamic program over
//! stages whose state is `c`; the distribution of a maximum comes from its
//! cumulative distribution, one such program per distinct time threshold. To
//! stay in floating-point range for any `N`, `C(m, k)` is replaced by the
//! binomial probability `C(m, k) pi^k (1 - pi)^(m - k)` with `pi = n_out / N`
//! (divided by its sum over the counts kept); the extra factors are the same
//! for every `k` and cancel in the normalisation, and all intermediate sums
//! stay below 1. The weights are built from ratios of consecutive terms with
//! `+ - * /` only, never `ln`/`exp`, whose last bit depends on the platform's
//! maths library: a guest must compute the same bits as the host.
//!
//! Complexity of one call, with `K = min(D, n_out) + 1` possible preemption
//! counts per stage and `H` distinct per-stage transfer times reachable: at most
//! `4 + H` programs of `O(P x K x n_out)` each, which is `O(N x n_out)` since `D
//! x P <= N` (the running count is also pruned to what the remaining stages and
//! spares can still reach); `O(min(max(D, S), n_out))` for the binomial weights;
//! for a repartition, `O((P + p) x D x d)` for the slot allocation. Memory
//! `O(n_out + N)`. Measured in release mode (test `timing`, run with
//! `--release --ignored --nocapture`) on a shared 2-core machine: 2-8 µs per
//! call for N = 32, P = 16; for N = 1024, D x P = 64 x 16: 8-35 µs with 10
//! preemptions, 0.1-0.4 ms with 100, 0.3-1.5 ms with 500.
//!
//! # Errors
//!
//! Nothing here panics. Inputs that make no sense are errors ([`LiveputError`]),
//! never clamped: a zero degree, more preemptions than instances, a layout that
//! does not fit, a missing or inconsistent partition, a non-finite or negative
//! profile figure, or more than [`MAX_INSTANCES`] instances (a bound on the
//! work and memory of one call). `from == to` is not an error.

mod exact;
mod plan;
#[cfg(test)]
mod tests;

use crate::recovery::Recovery;
use crate::{ModelProfile, ParallelConfig, TransferPoint};

/// Largest fleet one call accepts (instances before or after the interval). The
/// exact expectation costs `O(N x n_out)` per dynamic program and `O(n_out)`
/// memory, so this bounds one call to milliseconds.
pub const MAX_INSTANCES: u32 = 8192;

/// How a job gets from one layout to the next (DESIGN.md section 4). The cost
/// model and the real runtime's migration planner (`parcae-cluster`) share this
/// type, so a run's counts and a simulation's mean the same thing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(rename_all = "kebab-case"))]
pub enum MigrationKind {
    /// Nothing to do: same layout, no stage lost a replica (also: a pause).
    None,
    /// Every stage keeps `>= d` replicas: regroup, rebuild communicators.
    IntraStage,
    /// Some stage has fewer than `d` but at least one replica: copy its state.
    InterStage,
    /// The pipeline depth changes: layers move to new stage boundaries.
    Repartition,
    /// Reload the checkpoint: some stage lost every replica, or a cold start.
    Restart,
}

impl MigrationKind {
    /// All kinds, in the order of [`Expected::p_by_kind`].
    pub const ALL: [MigrationKind; 5] = [
        MigrationKind::None,
        MigrationKind::IntraStage,
        MigrationKind::InterStage,
        MigrationKind::Repartition,
        MigrationKind::Restart,
    ];

    /// Position in [`MigrationKind::ALL`] and [`Expected::p_by_kind`].
    pub const fn index(self) -> usize {
        match self {
            MigrationKind::None => 0,
            MigrationKind::IntraStage => 1,
            MigrationKind::InterStage => 2,
            MigrationKind::Repartition => 3,
            MigrationKind::Restart => 4,
        }
    }

    /// Stable lower-case name (for logs and JSON).
    pub const fn as_str(self) -> &'static str {
        match self {
            MigrationKind::None => "none",
            MigrationKind::IntraStage => "intra-stage",
            MigrationKind::InterStage => "inter-stage",
            MigrationKind::Repartition => "repartition",
            MigrationKind::Restart => "restart",
        }
    }
}

impl std::fmt::Display for MigrationKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One predicted interval's reconfiguration, as the optimizer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Transition {
    /// Layout running before; `None` when nothing runs (cold start or pause).
    pub from: Option<ParallelConfig>,
    /// Instances alive before the interval (`N`), stage holders and spares.
    pub instances_before: u32,
    /// Instances preempted during the interval, a uniform random subset.
    pub preempted: u32,
    /// Instances that join during the interval.
    pub arrived: u32,
    /// Layout to run after; `None` pauses training.
    pub to: Option<ParallelConfig>,
}

impl Transition {
    /// Instances alive after the interval, or `None` when more instances are
    /// preempted than exist.
    pub fn instances_after(&self) -> Option<u64> {
        let left = self.instances_before.checked_sub(self.preempted)?;
        Some(u64::from(left) + u64::from(self.arrived))
    }

    /// [`transition_distribution_under`] of this transition.
    pub fn distribution(
        &self,
        profile: &ModelProfile,
        recovery: &Recovery,
    ) -> Result<TransitionDistribution, LiveputError> {
        transition_distribution_under(
            profile,
            recovery,
            self.from,
            self.instances_before,
            self.preempted,
            self.arrived,
            self.to,
        )
    }

    /// The expectation of [`Transition::distribution`].
    pub fn expected(&self, profile: &ModelProfile, recovery: &Recovery) -> Result<Expected, LiveputError> {
        self.distribution(profile, recovery).map(|d| d.expected())
    }
}

/// Where the instances that survived a preemption are: live replicas of each old
/// stage, and live spares.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Placement {
    /// Live replicas of each stage of the old layout (length `P`, each `<= D`).
    pub survivors_per_stage: Vec<u32>,
    /// Live instances that held no stage.
    pub spare_survivors: u32,
}

impl Placement {
    /// The placement left when the instances numbered `preempted` (each
    /// `< instances_before`, no repeats) are taken from layout `from`, numbered
    /// as in the artifact's `MonteCarloLiveput.draw`: instance `i < D x P` holds
    /// stage `i mod P` (of replica `i / P`), the others are spares.
    pub fn from_preempted(
        from: ParallelConfig,
        instances_before: u32,
        preempted: &[u32],
    ) -> Result<Placement, LiveputError> {
        check_config(from)?;
        check_size(u64::from(instances_before))?;
        let holders = from.instances();
        if holders > u64::from(instances_before) {
            return Err(LiveputError::FromDoesNotFit { from, instances: instances_before });
        }
        let stages = from.pipeline_stages;
        let mut survivors = vec![from.data_parallel; stages as usize];
        let mut spares = u64::from(instances_before) - holders;
        let mut seen = vec![false; instances_before as usize];
        for &id in preempted {
            let Some(slot) = seen.get_mut(id as usize) else {
                return Err(LiveputError::BadInstanceId { id, instances: instances_before });
            };
            if *slot {
                return Err(LiveputError::DuplicateInstanceId { id });
            }
            *slot = true;
            if u64::from(id) < holders {
                let stage = (id % stages) as usize;
                if let Some(s) = survivors.get_mut(stage) {
                    *s = s.saturating_sub(1);
                }
            } else {
                spares = spares.saturating_sub(1);
            }
        }
        Ok(Placement { survivors_per_stage: survivors, spare_survivors: spares as u32 })
    }
}

/// The realized cost of one concrete scenario.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScenarioCost {
    /// What kind of migration it takes.
    pub kind: MigrationKind,
    /// Wall time of the migration, ms (training stops meanwhile). Excludes the
    /// lost work of a restart.
    pub duration_ms: f64,
    /// Training-state bytes received by instances (transfers and checkpoint loads).
    pub bytes_moved: u64,
    /// The work since the last checkpoint is lost (some stage lost every
    /// replica and no notice covered it); see [`lost_work_ms`].
    pub lost_work: bool,
    /// For a restart, its `R_type` ([`Outcome::concurrent_ms`]); 0 otherwise.
    pub concurrent_ms: f64,
}

/// One possible outcome of a transition and its probability.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// Probability of this outcome (the outcomes of a distribution sum to 1).
    pub probability: f64,
    /// Its migration kind.
    pub kind: MigrationKind,
    /// Its migration time, ms.
    pub duration_ms: f64,
    /// Whether it loses the work since the last checkpoint.
    pub lost_work: bool,
    /// For a restart, its `R_type`, ms: what it pays instead of the rest of a
    /// migration still in flight, which it abandons (it reloads the
    /// checkpoint anyway); 0 for other kinds.
    pub concurrent_ms: f64,
}

impl Outcome {
    /// Busy time of the interval when `carried_ms` of an earlier migration
    /// is still running: the rest of it then this outcome's migration, or,
    /// for a restart, `R_type` in place of the rest when that is less
    /// (`liveput`'s rule).
    pub fn busy_ms(&self, carried_ms: f64) -> f64 {
        let carried =
            if self.kind == MigrationKind::Restart { carried_ms.min(self.concurrent_ms) } else { carried_ms };
        carried + self.duration_ms
    }
}

/// The exact distribution of a transition's migration time and kind over which
/// instances are preempted: enough to take the expectation of any function of
/// the duration (as [`liveput`] does with the interval's leftover).
#[derive(Debug, Clone, PartialEq)]
pub struct TransitionDistribution {
    /// Distinct outcomes with positive probability, in a deterministic order.
    pub outcomes: Vec<Outcome>,
    /// Expected bytes moved.
    pub mean_bytes: f64,
}

impl TransitionDistribution {
    /// The distribution of one outcome known to happen: `cost` of a concrete scenario
    /// ([`scenario_cost_under`]), e.g. the instances a real run lost.
    pub fn certain(cost: ScenarioCost) -> Self {
        TransitionDistribution {
            outcomes: vec![Outcome {
                probability: 1.0,
                kind: cost.kind,
                duration_ms: cost.duration_ms,
                lost_work: cost.lost_work,
                concurrent_ms: cost.concurrent_ms,
            }],
            mean_bytes: cost.bytes_moved as f64,
        }
    }

    /// The chance that the work since the last checkpoint is lost
    /// ([`Expected::p_lost_work`] alone, without the other means).
    pub fn p_lost_work(&self) -> f64 {
        self.outcomes.iter().filter(|o| o.lost_work).map(|o| o.probability).sum()
    }

    /// Means and probabilities of the distribution.
    pub fn expected(&self) -> Expected {
        let mut e = Expected { mean_bytes: self.mean_bytes, ..Expected::default() };
        for o in &self.outcomes {
            e.mean_duration_ms += o.probability * o.duration_ms;
            e.p_by_kind[o.kind.index()] += o.probability;
            e.ms_by_kind[o.kind.index()] += o.probability * o.duration_ms;
            if o.lost_work {
                e.p_lost_work += o.probability;
            }
        }
        e.p_restart = e.p_by_kind[MigrationKind::Restart.index()];
        e
    }
}

/// Expected cost of a transition over which instances are preempted.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Expected {
    /// Expected migration time, ms (lost work excluded).
    pub mean_duration_ms: f64,
    /// Probability of a restart from checkpoint.
    pub p_restart: f64,
    /// Probability of each kind, indexed by [`MigrationKind::index`]; sums to 1.
    pub p_by_kind: [f64; 5],
    /// Expected migration time contributed by each kind, ms (probability times duration,
    /// summed over that kind's outcomes), indexed like `p_by_kind`; sums to
    /// `mean_duration_ms`. A run's time migrating per kind is compared with it.
    pub ms_by_kind: [f64; 5],
    /// Expected training-state bytes moved.
    pub mean_bytes: f64,
    /// Probability that the work since the last checkpoint is lost (a restart
    /// after a stage lost every replica, or a pause after one did; not a cold
    /// start).
    pub p_lost_work: f64,
}

/// What a layout is expected to achieve in one interval.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LiveputValue {
    /// Expected samples trained in the interval (>= 0).
    pub expected_samples: f64,
    /// Expected migration time that does not fit in the interval and carries
    /// into the next one, ms (>= 0).
    pub expected_leftover_ms: f64,
}

/// Why a liveput computation was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum LiveputError {
    /// A layout with zero replicas or zero stages.
    ZeroDegree {
        /// The degenerate layout.
        config: ParallelConfig,
    },
    /// More instances than [`MAX_INSTANCES`].
    TooManyInstances {
        /// Instances asked for.
        instances: u64,
    },
    /// More instances preempted than were alive.
    PreemptedAboveInstances {
        /// Instances said to be preempted.
        preempted: u32,
        /// Instances alive before the interval.
        instances: u32,
    },
    /// The old layout needs more instances than were alive.
    FromDoesNotFit {
        /// The old layout.
        from: ParallelConfig,
        /// Instances alive before the interval.
        instances: u32,
    },
    /// The new layout needs more instances than are alive after the interval.
    ToDoesNotFit {
        /// The new layout.
        to: ParallelConfig,
        /// Instances alive after the interval's churn.
        available: u64,
    },
    /// The new (or, for lost work, the old) layout is not in the profile.
    UnknownConfig {
        /// The unprofiled layout.
        config: ParallelConfig,
    },
    /// The profile has no partition for this pipeline depth.
    MissingPartition {
        /// The pipeline depth without a partition.
        stages: u32,
    },
    /// A partition that cannot be used (lengths do not match its depth...).
    BadPartition {
        /// Pipeline depth of the bad partition.
        stages: u32,
        /// What is wrong with it.
        reason: String,
    },
    /// The partitions of two depths do not split the same model.
    InconsistentPartitions {
        /// Depth of the old layout's partition.
        from_stages: u32,
        /// Depth of the new layout's partition.
        to_stages: u32,
        /// How they disagree.
        reason: String,
    },
    /// A profile figure that is negative or not finite.
    BadProfileValue {
        /// Name of the profile field (with the layout when per-layout).
        field: String,
        /// The rejected value.
        value: f64,
    },
    /// An interval length, carried time or work at risk that is negative or
    /// not finite.
    BadTime {
        /// Which figure (interval length, carried migration, work at risk).
        what: &'static str,
        /// The rejected value (ms; samples for the work at risk).
        value: f64,
    },
    /// `survivors_per_stage` does not have one entry per old stage.
    SurvivorsLength {
        /// Stages of the old layout.
        expected: u32,
        /// Survivor counts given.
        got: usize,
    },
    /// More survivors in a stage than it had replicas.
    SurvivorsAboveDegree {
        /// Index of the offending stage.
        stage: usize,
        /// Survivors given for it.
        survivors: u32,
        /// Replicas the stage had (the old data-parallel degree).
        degree: u32,
    },
    /// A preempted instance number outside `0..instances_before`.
    BadInstanceId {
        /// The out-of-range instance number.
        id: u32,
        /// Instances alive before the interval.
        instances: u32,
    },
    /// The same instance preempted twice.
    DuplicateInstanceId {
        /// The repeated instance number.
        id: u32,
    },
    /// The exact computation lost all precision (should not happen).
    Numerical {
        /// Which step of the computation failed.
        reason: &'static str,
    },
    /// Not one throughput profile per step plus one for before the first
    /// ([`crate::plan::best_plan_varying`]).
    SpeedsLength {
        /// Steps planned.
        steps: usize,
        /// Profiles given.
        speeds: usize,
    },
    /// Churn probabilities of an interval that are negative, not finite, or
    /// sum above 1 ([`crate::plan::best_plan_hedged`]).
    BadChurn {
        /// Index of the interval in the plan horizon.
        interval: usize,
        /// The rejected probability (or their sum).
        probability: f64,
    },
    /// The plan's work passed its limit ([`crate::plan::PlanOptions::work_limit`]).
    WorkLimit {
        /// The work count the plan was held to.
        limit: u64,
    },
}

impl std::fmt::Display for LiveputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LiveputError::SpeedsLength { steps, speeds } => write!(
                f,
                "{speeds} throughput profiles for {steps} steps: one per step and one for before the first"
            ),
            LiveputError::ZeroDegree { config } => {
                write!(f, "layout {config}: data-parallel degree and pipeline depth must be >= 1")
            }
            LiveputError::TooManyInstances { instances } => {
                write!(f, "{instances} instances: at most {MAX_INSTANCES} are supported")
            }
            LiveputError::PreemptedAboveInstances { preempted, instances } => {
                write!(f, "{preempted} instances preempted, but only {instances} were alive")
            }
            LiveputError::FromDoesNotFit { from, instances } => {
                write!(
                    f,
                    "old layout {from} needs {} instances, only {instances} were alive",
                    from.instances()
                )
            }
            LiveputError::ToDoesNotFit { to, available } => {
                write!(f, "new layout {to} needs {} instances, only {available} are alive", to.instances())
            }
            LiveputError::UnknownConfig { config } => write!(f, "layout {config} is not in the profile"),
            LiveputError::MissingPartition { stages } => {
                write!(f, "the profile has no stage partition for pipeline depth {stages}")
            }
            LiveputError::BadPartition { stages, reason } => {
                write!(f, "stage partition for depth {stages}: {reason}")
            }
            LiveputError::InconsistentPartitions { from_stages, to_stages, reason } => {
                write!(f, "stage partitions for depths {from_stages} and {to_stages} disagree: {reason}")
            }
            LiveputError::BadProfileValue { field, value } => {
                write!(f, "profile {field} = {value}: must be a finite number >= 0")
            }
            LiveputError::BadTime { what, value } => {
                write!(f, "{what} = {value}: must be a finite number >= 0")
            }
            LiveputError::SurvivorsLength { expected, got } => {
                write!(f, "{got} survivor counts given, the old layout has {expected} stages")
            }
            LiveputError::SurvivorsAboveDegree { stage, survivors, degree } => {
                write!(f, "stage {stage}: {survivors} survivors, but it had only {degree} replicas")
            }
            LiveputError::BadInstanceId { id, instances } => {
                write!(f, "preempted instance {id} does not exist (instances are 0..{instances})")
            }
            LiveputError::DuplicateInstanceId { id } => write!(f, "instance {id} preempted twice"),
            LiveputError::Numerical { reason } => write!(f, "numerical failure: {reason}"),
            LiveputError::BadChurn { interval, probability } => write!(
                f,
                "interval {interval}: churn probability {probability} (each must be finite and >= 0, \
                 their sum at most 1)"
            ),
            LiveputError::WorkLimit { limit } => {
                write!(f, "planning passed its work limit ({limit} outcome terms counted)")
            }
        }
    }
}

impl std::error::Error for LiveputError {}

/// Point-to-point time to move `bytes` between two instances, ms, on a
/// transfer curve sorted by size (`ModelProfile.transfer_curve`, times in µs).
///
/// Same rule as `parcae_profile::transfer_ms` and the artifact's
/// `CostModel.p2p_cost`: 0 bytes cost 0; up to the smallest point, that point's
/// time (the latency floor); between points, linear interpolation; beyond the
/// largest point, linear extrapolation at its bandwidth. An empty curve costs
/// 0. An unsorted or degenerate curve gives some finite answer, never a panic.
pub fn transfer_ms(curve: &[TransferPoint], bytes: u64) -> f64 {
    let (Some(first), Some(last)) = (curve.first(), curve.last()) else {
        return 0.0;
    };
    if bytes == 0 {
        return 0.0;
    }
    let us = if bytes <= first.bytes {
        first.micros
    } else if bytes >= last.bytes {
        if last.bytes == 0 { last.micros } else { bytes as f64 * (last.micros / last.bytes as f64) }
    } else {
        let hi = curve.partition_point(|p| p.bytes < bytes);
        match (hi.checked_sub(1).and_then(|i| curve.get(i)), curve.get(hi)) {
            (Some(a), Some(b)) if b.bytes > a.bytes && bytes >= a.bytes => {
                let t = (bytes - a.bytes) as f64 / (b.bytes - a.bytes) as f64;
                a.micros + (b.micros - a.micros) * t
            }
            (_, Some(b)) => b.micros,
            _ => last.micros,
        }
    };
    us / 1000.0
}

/// Work lost by a restart that reloads the last checkpoint, ms of training
/// time: half the checkpoint interval, the mean time since the last checkpoint
/// when preemptions fall uniformly between checkpoints. The published artifact
/// has no such term (its reactive baseline checkpoints at every
/// reconfiguration and it never lets a live migration fail).
pub fn lost_work_ms(profile: &ModelProfile) -> f64 {
    let ckpt = profile.checkpoint_interval_ms;
    if ckpt.is_finite() && ckpt > 0.0 { ckpt / 2.0 } else { 0.0 }
}

/// The realized cost of moving from `from` to `to` when the old stages keep
/// `survivors_per_stage` live replicas (length `P`, each `<= D`; empty when
/// `from` is `None`), `spare_survivors` live instances held no stage, and
/// `arrived` instances joined. See the module documentation for the rules.
///
/// `to = None` is a pause: kind [`MigrationKind::None`], no cost, with
/// `lost_work` set when some stage lost every replica.
///
/// Preemptions are unannounced ([`Recovery::UNANNOUNCED`]); see
/// [`scenario_cost_under`] for a deployment with a notice.
pub fn scenario_cost(
    profile: &ModelProfile,
    from: Option<ParallelConfig>,
    survivors_per_stage: &[u32],
    spare_survivors: u32,
    arrived: u32,
    to: Option<ParallelConfig>,
) -> Result<ScenarioCost, LiveputError> {
    scenario_cost_under(
        profile,
        &Recovery::UNANNOUNCED,
        from,
        survivors_per_stage,
        spare_survivors,
        arrived,
        to,
    )
}

/// [`scenario_cost`] under the recovery rules of `recovery`
/// ([`crate::recovery`]): a stage with no survivor is evacuated, restarted
/// from an emergency checkpoint, or rolled back. Evacuation needs an instance
/// that stays: a surviving holder or spare.
pub fn scenario_cost_under(
    profile: &ModelProfile,
    recovery: &Recovery,
    from: Option<ParallelConfig>,
    survivors_per_stage: &[u32],
    spare_survivors: u32,
    arrived: u32,
    to: Option<ParallelConfig>,
) -> Result<ScenarioCost, LiveputError> {
    let model = plan::Model::new(profile, recovery, from, to)?;
    model.scenario(survivors_per_stage, spare_survivors, arrived)
}

/// The exact distribution of the migration over which `preempted` of the
/// `instances_before` instances are taken (uniformly, without replacement),
/// when `from` runs on them, `arrived` join, and the job moves to `to`.
///
/// Preemptions are unannounced ([`Recovery::UNANNOUNCED`]); see
/// [`transition_distribution_under`] for a deployment with a notice.
pub fn transition_distribution(
    profile: &ModelProfile,
    from: Option<ParallelConfig>,
    instances_before: u32,
    preempted: u32,
    arrived: u32,
    to: Option<ParallelConfig>,
) -> Result<TransitionDistribution, LiveputError> {
    transition_distribution_under(
        profile,
        &Recovery::UNANNOUNCED,
        from,
        instances_before,
        preempted,
        arrived,
        to,
    )
}

/// [`transition_distribution`] under the recovery rules of `recovery`.
pub fn transition_distribution_under(
    profile: &ModelProfile,
    recovery: &Recovery,
    from: Option<ParallelConfig>,
    instances_before: u32,
    preempted: u32,
    arrived: u32,
    to: Option<ParallelConfig>,
) -> Result<TransitionDistribution, LiveputError> {
    transition_distribution_in(
        MigrationMode::Live,
        profile,
        recovery,
        from,
        instances_before,
        preempted,
        arrived,
        to,
    )
}

/// The exact distribution of the transition when the job reconfigures as
/// `mode` says: [`transition_distribution_under`] for
/// [`MigrationMode::Live`], [`restart_transition`] for
/// [`MigrationMode::RestartOnChange`].
#[allow(clippy::too_many_arguments, reason = "the mode, the deployment and the transition's six fields")]
pub fn transition_distribution_in(
    mode: MigrationMode,
    profile: &ModelProfile,
    recovery: &Recovery,
    from: Option<ParallelConfig>,
    instances_before: u32,
    preempted: u32,
    arrived: u32,
    to: Option<ParallelConfig>,
) -> Result<TransitionDistribution, LiveputError> {
    check_transition(from, instances_before, preempted, arrived, to)?;
    let model = plan::Model::new(profile, recovery, from, to)?;
    exact::distribution(&model, instances_before, preempted, arrived, mode, exact::Bytes::Mean, None)
}

/// The cost model of one `from -> to` pair, which does not depend on the
/// instances or the preemptions: built once, it gives
/// [`transition_distribution`] for any of them without rebuilding the
/// pair's transfer tables (the horizon planner asks for the same pair under
/// many fleet sizes and preemption counts).
#[derive(Debug, Clone)]
pub(crate) struct PairModel(plan::Model);

impl PairModel {
    /// The model of `from -> to`, checking the profile figures it uses.
    pub(crate) fn new(
        profile: &ModelProfile,
        recovery: &Recovery,
        from: Option<ParallelConfig>,
        to: Option<ParallelConfig>,
    ) -> Result<PairModel, LiveputError> {
        plan::Model::new(profile, recovery, from, to).map(PairModel)
    }

    /// Exactly the outcomes of [`transition_distribution_under`] of the pair
    /// (same checks, same numbers), without its expected bytes, which the
    /// planner does not read and which cost two more dynamic programs. What
    /// every new layout of the pair's old layout shares under this step is
    /// taken from `shared` (computed there on its first use).
    pub(crate) fn outcomes(
        &self,
        instances_before: u32,
        preempted: u32,
        arrived: u32,
        shared: &mut SharedByFrom,
    ) -> Result<Vec<Outcome>, LiveputError> {
        check_transition(self.0.from, instances_before, preempted, arrived, self.0.to)?;
        let from_step = self.0.from.map(|from| {
            &*shared
                .0
                .entry((from, instances_before, preempted))
                .or_insert_with(|| exact::FromStep::new(&self.0, from, instances_before, preempted))
        });
        let dist = exact::distribution(
            &self.0,
            instances_before,
            preempted,
            arrived,
            MigrationMode::Live,
            exact::Bytes::Skip,
            from_step,
        )?;
        Ok(dist.outcomes)
    }
}

/// The parts of the distributions that every new layout of one old layout
/// shares under one step (`(from, instances before, preempted)`), kept by the
/// planner's cache beside its pair models and valid as long as they are (the
/// same profile costs and recovery).
#[derive(Debug, Clone, Default)]
pub(crate) struct SharedByFrom(std::collections::HashMap<(ParallelConfig, u32, u32), exact::FromStep>);

impl SharedByFrom {
    /// Old layouts and steps held.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Drop them all (the pair models they came from are dropped).
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }
}

/// The exact expected cost of a transition (see [`transition_distribution`];
/// unannounced preemptions, [`Transition::expected`] takes a recovery).
pub fn expected_transition(
    profile: &ModelProfile,
    from: Option<ParallelConfig>,
    instances_before: u32,
    preempted: u32,
    arrived: u32,
    to: Option<ParallelConfig>,
) -> Result<Expected, LiveputError> {
    transition_distribution(profile, from, instances_before, preempted, arrived, to).map(|d| d.expected())
}

/// Expected samples of running `to` for one interval of `interval_ms`, after
/// the transition from `from`, with `carried_ms` of an earlier migration still
/// to run at the start of the interval.
///
/// For each outcome (exactly, over the preemption scenarios):
///
/// - busy time `b = carried_ms + duration_ms`; the in-flight migration
///   finishes before the new one starts, except that a restart from the
///   checkpoint may abandon it and pay its `R_type` instead when that is
///   less ([`Outcome::busy_ms`]; the artifact always abandons and pays
///   `R_type`);
/// - samples `throughput(to) x max(0, T - b)` (samples/s x s), minus, when the
///   outcome restarts from the checkpoint, the samples trained since it:
///   [`lost_work_ms`] at the old layout's speed. The job rolls back, so an
///   interval's net samples can be negative, and the loss does not depend on
///   what runs next: pausing cannot escape it;
/// - leftover `max(0, b - T)`, carried into the next interval by the caller.
///
/// A pause (`to = None`) trains nothing; an in-flight migration still runs to
/// its end (state must be consistent before anything can resume), so
/// `max(0, carried_ms - T)` is carried on, and lost work is still lost.
/// Resuming later pays a cold start. Both results are expectations over the
/// outcomes.
#[allow(clippy::too_many_arguments, reason = "the transition's six fields plus the interval and carry")]
pub fn liveput(
    profile: &ModelProfile,
    recovery: &Recovery,
    from: Option<ParallelConfig>,
    instances_before: u32,
    preempted: u32,
    arrived: u32,
    to: Option<ParallelConfig>,
    interval_ms: f64,
    carried_ms: f64,
) -> Result<LiveputValue, LiveputError> {
    check_times(interval_ms, carried_ms)?;
    let dist =
        transition_distribution_under(profile, recovery, from, instances_before, preempted, arrived, to)?;
    liveput_over(profile, from, to, &dist, interval_ms, carried_ms)
}

/// [`liveput`] of a given distribution of outcomes: the exact one `liveput` computes, or a
/// single known outcome ([`TransitionDistribution::certain`]: the victims a real run had).
/// One scoring rule for both, so a replayed run and the model add up alike.
pub fn liveput_over(
    profile: &ModelProfile,
    from: Option<ParallelConfig>,
    to: Option<ParallelConfig>,
    dist: &TransitionDistribution,
    interval_ms: f64,
    carried_ms: f64,
) -> Result<LiveputValue, LiveputError> {
    check_times(interval_ms, carried_ms)?;
    let lost = lost_samples(profile, from, dist)?;
    let mut value = LiveputValue::default();
    let Some(to) = to else {
        for o in dist.outcomes.iter().filter(|o| o.lost_work) {
            value.expected_samples -= o.probability * lost;
        }
        value.expected_leftover_ms = (carried_ms - interval_ms).max(0.0);
        return Ok(value);
    };
    let thr_to = samples_per_second(profile, to)?;
    Ok(expected_over(dist, thr_to, lost, interval_ms, |o| o.busy_ms(carried_ms)))
}

/// The expected samples and leftover of running at `thr_to` samples/s after
/// each outcome of `dist`, busy for `busy(outcome)` ms of the interval first;
/// an outcome that rolls back also loses `lost` samples. The one scoring loop
/// of [`liveput`] and [`restart_liveput`], so both modes add up alike.
fn expected_over(
    dist: &TransitionDistribution,
    thr_to: f64,
    lost: f64,
    interval_ms: f64,
    busy: impl Fn(&Outcome) -> f64,
) -> LiveputValue {
    let mut value = LiveputValue::default();
    for o in &dist.outcomes {
        let busy = busy(o);
        let trained = thr_to * (interval_ms - busy).max(0.0) / 1000.0;
        value.expected_samples += o.probability * (trained - if o.lost_work { lost } else { 0.0 });
        value.expected_leftover_ms += o.probability * (busy - interval_ms).max(0.0);
    }
    value
}

/// How the simulated job reconfigures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum MigrationMode {
    /// Live migration: the cost model of this module ([`liveput`]).
    #[default]
    Live,
    /// Checkpoint-restart on every availability change: the Parcae artifact's
    /// reactive baseline ([`restart_transition`], [`restart_liveput`]).
    RestartOnChange,
}

impl MigrationMode {
    /// Stable lower-case name (for logs and JSON).
    pub const fn as_str(self) -> &'static str {
        match self {
            MigrationMode::Live => "live",
            MigrationMode::RestartOnChange => "restart-on-change",
        }
    }
}

/// The distribution of the interval's reconfiguration when the job restarts
/// from a checkpoint on every change, the Parcae artifact's reactive
/// ("throughput-optimal") baseline: `ThroughputOptimized.optimize` and
/// `ThroughputOptimized.reconfiguration` in `liveput/throughput.py`
/// (`JF-D/Parcae`), with `CostModel.estimate_restart_cost` of
/// `liveput/cost.py`, under the same recovery rules as live migration.
///
/// - **When**: the job restarts whenever anything happened in the interval
///   (`preempted + arrived > 0`, even if only a spare left or the layout stays
///   the same: the artifact's `n_add + n_remove > 0`), on a start (`from =
///   None`), and, beyond the artifact (which cannot change layout without an
///   event), whenever `to != from`. Otherwise nothing happens (kind `none`).
/// - **Cost**: a restart of the live model, `R_type + checkpoint_restart_ms +
///   sum_q t(B'_q)`: checkpoint save and load, then every new stage's full
///   state one after another (the artifact's `apply_optimization = False`
///   branch). Its type follows the live model's rule (*add* when the new
///   layout needs instances that held no stage), not the artifact's `n_add >
///   0`, and a start charges the checkpoint like a live cold start (the
///   artifact skips it at `cur_t == 0`): one rule for every row.
/// - **Lost work**: the checkpoint of every change is taken at
///   reconfiguration time, within the notice. A stage whose every holder is
///   preempted loses the work since the last periodic checkpoint unless the
///   notice covers it ([`crate::recovery`]: evacuation or an emergency
///   checkpoint), exactly as under live migration; the artifact never loses
///   work.
///
/// The carry of a restart still in flight is [`restart_liveput`]'s.
pub fn restart_transition(
    profile: &ModelProfile,
    recovery: &Recovery,
    from: Option<ParallelConfig>,
    instances_before: u32,
    preempted: u32,
    arrived: u32,
    to: Option<ParallelConfig>,
) -> Result<TransitionDistribution, LiveputError> {
    transition_distribution_in(
        MigrationMode::RestartOnChange,
        profile,
        recovery,
        from,
        instances_before,
        preempted,
        arrived,
        to,
    )
}

/// Busy time of an interval under [`MigrationMode::RestartOnChange`] for
/// outcome `o` with `carried_ms` still running: the artifact's carry rule
/// (`ThroughputOptimized.optimize`): a restart over one still running
/// abandons it and pays its full cost plus a concurrent restart (`+ R_type`);
/// otherwise the carried time runs on.
pub fn restart_busy_ms(o: &Outcome, carried_ms: f64) -> f64 {
    match o.kind {
        MigrationKind::Restart if carried_ms > 0.0 => o.duration_ms + o.concurrent_ms,
        MigrationKind::Restart => o.duration_ms,
        _ => carried_ms,
    }
}

/// Samples of running `to` for one interval of `interval_ms` under
/// [`MigrationMode::RestartOnChange`], with `carried_ms` of an earlier restart
/// still to run: per outcome of [`restart_transition`], busy time
/// [`restart_busy_ms`], samples `throughput(to) x max(0, T - busy)` minus the
/// lost work ([`lost_samples`]) of an outcome that rolls back, leftover
/// `max(0, busy - T)`. A pause trains nothing and lets the carried time run
/// out (lost work still lost).
#[allow(
    clippy::too_many_arguments,
    reason = "the deployment, the transition's six fields, the interval and carry"
)]
pub fn restart_liveput(
    profile: &ModelProfile,
    recovery: &Recovery,
    from: Option<ParallelConfig>,
    instances_before: u32,
    preempted: u32,
    arrived: u32,
    to: Option<ParallelConfig>,
    interval_ms: f64,
    carried_ms: f64,
) -> Result<LiveputValue, LiveputError> {
    check_times(interval_ms, carried_ms)?;
    let dist = restart_transition(profile, recovery, from, instances_before, preempted, arrived, to)?;
    let lost = lost_samples(profile, from, &dist)?;
    let thr_to = match to {
        Some(to) => samples_per_second(profile, to)?,
        None => 0.0,
    };
    Ok(expected_over(&dist, thr_to, lost, interval_ms, |o| restart_busy_ms(o, carried_ms)))
}

/// [`liveput`] or [`restart_liveput`], as `mode` says.
#[allow(
    clippy::too_many_arguments,
    reason = "the mode, the deployment, the transition's six fields, the interval and carry"
)]
pub fn liveput_with_mode(
    mode: MigrationMode,
    profile: &ModelProfile,
    recovery: &Recovery,
    from: Option<ParallelConfig>,
    instances_before: u32,
    preempted: u32,
    arrived: u32,
    to: Option<ParallelConfig>,
    interval_ms: f64,
    carried_ms: f64,
) -> Result<LiveputValue, LiveputError> {
    match mode {
        MigrationMode::Live => liveput(
            profile,
            recovery,
            from,
            instances_before,
            preempted,
            arrived,
            to,
            interval_ms,
            carried_ms,
        ),
        MigrationMode::RestartOnChange => restart_liveput(
            profile,
            recovery,
            from,
            instances_before,
            preempted,
            arrived,
            to,
            interval_ms,
            carried_ms,
        ),
    }
}

fn check_times(interval_ms: f64, carried_ms: f64) -> Result<(), LiveputError> {
    if !(interval_ms.is_finite() && interval_ms >= 0.0) {
        return Err(LiveputError::BadTime { what: "interval_ms", value: interval_ms });
    }
    if !(carried_ms.is_finite() && carried_ms >= 0.0) {
        return Err(LiveputError::BadTime { what: "carried_ms", value: carried_ms });
    }
    Ok(())
}

/// Samples a restart from `from` loses: the work since the last checkpoint
/// ([`lost_work_ms`]) at `from`'s speed; 0 when nothing can be lost.
pub fn lost_samples(
    profile: &ModelProfile,
    from: Option<ParallelConfig>,
    dist: &TransitionDistribution,
) -> Result<f64, LiveputError> {
    match from {
        Some(from) if dist.outcomes.iter().any(|o| o.lost_work && o.probability > 0.0) => {
            Ok(lost_work_ms(profile) * samples_per_second(profile, from)? / 1000.0)
        }
        _ => Ok(0.0),
    }
}

fn samples_per_second(profile: &ModelProfile, config: ParallelConfig) -> Result<f64, LiveputError> {
    let entry = profile.config(config).ok_or(LiveputError::UnknownConfig { config })?;
    plan::check_value(|| format!("configs[{config}].samples_per_second"), entry.samples_per_second)
}

fn check_config(config: ParallelConfig) -> Result<(), LiveputError> {
    if config.data_parallel == 0 || config.pipeline_stages == 0 {
        return Err(LiveputError::ZeroDegree { config });
    }
    check_size(config.instances())
}

fn check_size(instances: u64) -> Result<(), LiveputError> {
    if instances > u64::from(MAX_INSTANCES) {
        return Err(LiveputError::TooManyInstances { instances });
    }
    Ok(())
}

/// Checks the counts of a transition; the profile is checked by `plan::Model`.
fn check_transition(
    from: Option<ParallelConfig>,
    instances_before: u32,
    preempted: u32,
    arrived: u32,
    to: Option<ParallelConfig>,
) -> Result<(), LiveputError> {
    check_size(u64::from(instances_before))?;
    if preempted > instances_before {
        return Err(LiveputError::PreemptedAboveInstances { preempted, instances: instances_before });
    }
    let available = u64::from(instances_before - preempted) + u64::from(arrived);
    check_size(available)?;
    if let Some(from) = from {
        check_config(from)?;
        if from.instances() > u64::from(instances_before) {
            return Err(LiveputError::FromDoesNotFit { from, instances: instances_before });
        }
    }
    if let Some(to) = to {
        check_config(to)?;
        if to.instances() > available {
            return Err(LiveputError::ToDoesNotFit { to, available });
        }
    }
    Ok(())
}
