//! The cost model's constants that a throughput profile does not hold:
//! communicator rebuild times, checkpoint save/load, checkpoint interval and
//! all-reduce bandwidth. They live in a data file (`profiles/cost-constants.json`)
//! so that a user who profiled their own cluster can supply their own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use parcae_policy_core::{ParallelConfig, Recovery};
use serde::{Deserialize, Serialize};

use crate::error::{ProfileError, join_index, join_key};
use crate::jsonloc::{parse, unique_map};
use crate::profile::{check_operation_ms, check_positive};

/// Bytes in the artifact's "MB" (a MiB): its bandwidths are MiB per ms.
const MIB: f64 = 1024.0 * 1024.0;

/// Scalar constants that may be cited in [`CostConstantsFile::sources`].
const SCALARS: [&str; 5] = [
    "checkpoint_save_load_ms",
    "checkpoint_interval_ms",
    "allreduce_gb_per_s",
    "checkpoint_write_gb_per_s",
    "checkpoint_snapshot_gb_per_s",
];

/// The constants file exactly as written (see `profiles/README.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostConstantsFile {
    /// Where the constants come from, free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Citation per scalar constant, keyed by the field's name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", deserialize_with = "unique_map")]
    pub sources: BTreeMap<String, String>,
    /// Time a restart from checkpoint spends saving and loading it, ms.
    pub checkpoint_save_load_ms: f64,
    /// Interval between periodic checkpoints, ms (bounds the work a restart loses).
    pub checkpoint_interval_ms: f64,
    /// All-reduce bandwidth in the artifact's unit: 1 "GB/s" = 1 MiB per ms.
    pub allreduce_gb_per_s: f64,
    /// Rate at which one instance writes an emergency checkpoint of its
    /// stage to durable storage, decimal GB/s. Needed only to score a
    /// deployment with a preemption notice ([`CostConstants::recovery`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_write_gb_per_s: Option<f64>,
    /// Rate at which one instance copies its stage's state into host memory
    /// for an asynchronous periodic checkpoint (training waits only for this
    /// snapshot; the write to storage goes on in the background), decimal
    /// GB/s. Absent: periodic checkpoints are priced as synchronous writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_snapshot_gb_per_s: Option<f64>,
    /// Communicator rebuild rules, per model with a fallback.
    pub comm_rebuild: CommRebuildTable,
}

/// Communicator rebuild rules: one per model, and a default for the others.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommRebuildTable {
    /// Rule for models without their own entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<CommRebuildSpec>,
    /// Rule per model name (as in the profile's `models`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", deserialize_with = "unique_map")]
    pub models: BTreeMap<String, CommRebuildSpec>,
}

/// Which formula a communicator rebuild rule uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommRebuildKind {
    /// `constant + groups(d, p) x per_group_{add,remove}_ms`, `groups = d + p + 1 + d*p`.
    Groups,
    /// `constant + d x p x {add,remove}_ms_per_instance`.
    PerInstance,
    /// `constant + ms[step(d)]`, times `add_factor` on add; `step` counts thresholds <= d.
    StepByDp,
}

/// One communicator rebuild rule as written: `kind` picks which of the
/// optional fields are required (the others must be absent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommRebuildSpec {
    /// The formula.
    pub kind: CommRebuildKind,
    /// `groups`: ms per communication group when instances were added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_group_add_ms: Option<f64>,
    /// `groups`: ms per communication group when instances were removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_group_remove_ms: Option<f64>,
    /// `per_instance`: ms per instance of the new layout (d x p) on add.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_ms_per_instance: Option<f64>,
    /// `per_instance`: ms per instance of the new layout (d x p) on remove.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remove_ms_per_instance: Option<f64>,
    /// `step_by_dp`: data-parallel degrees where the next step starts, increasing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thresholds: Option<Vec<u32>>,
    /// `step_by_dp`: ms per step, one more entry than `thresholds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ms: Option<Vec<f64>>,
    /// `step_by_dp`: multiplier applied to the step's ms on add.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_factor: Option<f64>,
    /// Fixed ms added in every case (communicator initialisation).
    pub constant_ms: f64,
    /// Where the numbers come from, free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// Whether a layout is formed by adding instances or after removing some;
/// the artifact charges communicator rebuilds differently for the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Change {
    /// Instances joined (or the job starts).
    Add,
    /// Instances were preempted or released.
    Remove,
}

/// A validated communicator rebuild rule.
#[derive(Debug, Clone, PartialEq)]
pub enum CommRebuild {
    /// Time per communication group: DeepSpeed/Megatron build one per pipeline
    /// stage, one per replica, the world, and one per instance.
    Groups {
        /// ms per group on add.
        per_group_add_ms: f64,
        /// ms per group on remove.
        per_group_remove_ms: f64,
        /// Fixed ms.
        constant_ms: f64,
    },
    /// Time proportional to the instances of the new layout.
    PerInstance {
        /// ms per instance on add.
        add_ms_per_instance: f64,
        /// ms per instance on remove.
        remove_ms_per_instance: f64,
        /// Fixed ms.
        constant_ms: f64,
    },
    /// A step function of the data-parallel degree.
    StepByDp {
        /// Degrees where the next step starts, strictly increasing.
        thresholds: Vec<u32>,
        /// ms per step (`thresholds.len() + 1` entries).
        ms: Vec<f64>,
        /// Multiplier on add.
        add_factor: f64,
        /// Fixed ms.
        constant_ms: f64,
    },
}

impl CommRebuild {
    /// Communication groups of a `d x p` layout for [`CommRebuild::Groups`]:
    /// `d + p + 1 + d*p`.
    pub fn groups(config: ParallelConfig) -> f64 {
        let (d, p) = (f64::from(config.data_parallel), f64::from(config.pipeline_stages));
        d + p + 1.0 + d * p
    }

    /// Rebuild time in ms for forming `config` by `change`.
    pub fn ms(&self, config: ParallelConfig, change: Change) -> f64 {
        let add = change == Change::Add;
        match self {
            CommRebuild::Groups { per_group_add_ms, per_group_remove_ms, constant_ms } => {
                let per = if add { per_group_add_ms } else { per_group_remove_ms };
                constant_ms + Self::groups(config) * per
            }
            CommRebuild::PerInstance { add_ms_per_instance, remove_ms_per_instance, constant_ms } => {
                let per = if add { add_ms_per_instance } else { remove_ms_per_instance };
                constant_ms + config.instances() as f64 * per
            }
            CommRebuild::StepByDp { thresholds, ms, add_factor, constant_ms } => {
                let step = thresholds.iter().filter(|&&t| config.data_parallel >= t).count();
                let base = ms[step];
                constant_ms + if add { base * add_factor } else { base }
            }
        }
    }

    /// Rebuild time in ms when `config` is formed by adding instances.
    pub fn add_ms(&self, config: ParallelConfig) -> f64 {
        self.ms(config, Change::Add)
    }

    /// Rebuild time in ms when `config` is formed after removing instances.
    pub fn remove_ms(&self, config: ParallelConfig) -> f64 {
        self.ms(config, Change::Remove)
    }

    /// Validate a rule as written at `path` of `file`.
    fn from_spec(spec: &CommRebuildSpec, file: &Path, path: &str) -> Result<Self, ProfileError> {
        let kind_name = match spec.kind {
            CommRebuildKind::Groups => "groups",
            CommRebuildKind::PerInstance => "per_instance",
            CommRebuildKind::StepByDp => "step_by_dp",
        };
        let used: &[&str] = match spec.kind {
            CommRebuildKind::Groups => &["per_group_add_ms", "per_group_remove_ms"],
            CommRebuildKind::PerInstance => &["add_ms_per_instance", "remove_ms_per_instance"],
            CommRebuildKind::StepByDp => &["thresholds", "ms", "add_factor"],
        };
        let present = [
            ("per_group_add_ms", spec.per_group_add_ms.is_some()),
            ("per_group_remove_ms", spec.per_group_remove_ms.is_some()),
            ("add_ms_per_instance", spec.add_ms_per_instance.is_some()),
            ("remove_ms_per_instance", spec.remove_ms_per_instance.is_some()),
            ("thresholds", spec.thresholds.is_some()),
            ("ms", spec.ms.is_some()),
            ("add_factor", spec.add_factor.is_some()),
        ];
        for (name, is_present) in present {
            if is_present && !used.contains(&name) {
                return Err(ProfileError::invalid(
                    file,
                    join_key(path, name),
                    format!("not used by kind \"{kind_name}\" (it uses {})", used.join(", ")),
                ));
            }
            if !is_present && used.contains(&name) {
                return Err(ProfileError::invalid(
                    file,
                    join_key(path, name),
                    format!("required for kind \"{kind_name}\""),
                ));
            }
        }
        let at = |name: &str| join_key(path, name);
        let constant_ms = check_operation_ms(file, &at("constant_ms"), spec.constant_ms)?;
        // Present-ness was checked above; `unwrap_or_default` only satisfies the types.
        Ok(match spec.kind {
            CommRebuildKind::Groups => CommRebuild::Groups {
                per_group_add_ms: check_operation_ms(
                    file,
                    &at("per_group_add_ms"),
                    spec.per_group_add_ms.unwrap_or_default(),
                )?,
                per_group_remove_ms: check_operation_ms(
                    file,
                    &at("per_group_remove_ms"),
                    spec.per_group_remove_ms.unwrap_or_default(),
                )?,
                constant_ms,
            },
            CommRebuildKind::PerInstance => CommRebuild::PerInstance {
                add_ms_per_instance: check_operation_ms(
                    file,
                    &at("add_ms_per_instance"),
                    spec.add_ms_per_instance.unwrap_or_default(),
                )?,
                remove_ms_per_instance: check_operation_ms(
                    file,
                    &at("remove_ms_per_instance"),
                    spec.remove_ms_per_instance.unwrap_or_default(),
                )?,
                constant_ms,
            },
            CommRebuildKind::StepByDp => {
                let thresholds = spec.thresholds.clone().unwrap_or_default();
                let ms = spec.ms.clone().unwrap_or_default();
                for (i, &t) in thresholds.iter().enumerate() {
                    if t == 0 {
                        return Err(ProfileError::invalid(
                            file,
                            join_index(&at("thresholds"), i),
                            "must be >= 1 (a data-parallel degree)",
                        ));
                    }
                    if i > 0 && thresholds[i - 1] >= t {
                        return Err(ProfileError::invalid(
                            file,
                            join_index(&at("thresholds"), i),
                            format!("must be greater than the one before ({})", thresholds[i - 1]),
                        ));
                    }
                }
                if ms.len() != thresholds.len() + 1 {
                    return Err(ProfileError::invalid(
                        file,
                        at("ms"),
                        format!(
                            "needs {} entries (one more than `thresholds`), has {}",
                            thresholds.len() + 1,
                            ms.len()
                        ),
                    ));
                }
                for (i, &v) in ms.iter().enumerate() {
                    check_operation_ms(file, &join_index(&at("ms"), i), v)?;
                }
                let add_factor =
                    check_positive(file, &at("add_factor"), spec.add_factor.unwrap_or_default())?;
                CommRebuild::StepByDp { thresholds, ms, add_factor, constant_ms }
            }
        })
    }
}

/// The validated constants of the cost model, loaded from a constants file.
#[derive(Debug, Clone, PartialEq)]
pub struct CostConstants {
    file: PathBuf,
    data: CostConstantsFile,
    default: Option<CommRebuild>,
    rules: BTreeMap<String, CommRebuild>,
}

impl CostConstants {
    /// Read and validate a constants file such as `profiles/cost-constants.json`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ProfileError> {
        let file = path.as_ref();
        let text = ProfileError::read(file)?;
        Self::from_json(&text, file)
    }

    /// Parse and validate constants from JSON text; `file` names it in errors.
    pub fn from_json(text: &str, file: impl AsRef<Path>) -> Result<Self, ProfileError> {
        let data = parse(file.as_ref(), text)?;
        Self::from_data(data, file)
    }

    /// Validate constants built in code (e.g. by a profiling tool); `file`
    /// names them in errors.
    pub fn from_data(data: CostConstantsFile, file: impl AsRef<Path>) -> Result<Self, ProfileError> {
        let file = file.as_ref();
        check_operation_ms(file, "checkpoint_save_load_ms", data.checkpoint_save_load_ms)?;
        check_positive(file, "checkpoint_interval_ms", data.checkpoint_interval_ms)?;
        check_positive(file, "allreduce_gb_per_s", data.allreduce_gb_per_s)?;
        if let Some(rate) = data.checkpoint_write_gb_per_s {
            check_positive(file, "checkpoint_write_gb_per_s", rate)?;
        }
        if let Some(rate) = data.checkpoint_snapshot_gb_per_s {
            check_positive(file, "checkpoint_snapshot_gb_per_s", rate)?;
        }
        for key in data.sources.keys() {
            if !SCALARS.contains(&key.as_str()) {
                return Err(ProfileError::invalid(
                    file,
                    join_key("sources", key),
                    format!("not a constant of this file (expected one of {})", SCALARS.join(", ")),
                ));
            }
        }
        let default = data
            .comm_rebuild
            .default
            .as_ref()
            .map(|spec| CommRebuild::from_spec(spec, file, "comm_rebuild.default"))
            .transpose()?;
        let mut rules = BTreeMap::new();
        for (model, spec) in &data.comm_rebuild.models {
            let path = join_key("comm_rebuild.models", model);
            if model.is_empty() {
                return Err(ProfileError::invalid(file, path, "model name must not be empty"));
            }
            rules.insert(model.clone(), CommRebuild::from_spec(spec, file, &path)?);
        }
        if default.is_none() && rules.is_empty() {
            return Err(ProfileError::invalid(
                file,
                "comm_rebuild",
                "needs a `default` rule or at least one entry in `models`",
            ));
        }
        Ok(Self { file: file.to_path_buf(), data, default, rules })
    }

    /// The file the constants were loaded from.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The constants as written.
    pub fn data(&self) -> &CostConstantsFile {
        &self.data
    }

    /// Time a restart from checkpoint spends saving and loading it, ms.
    pub fn checkpoint_save_load_ms(&self) -> f64 {
        self.data.checkpoint_save_load_ms
    }

    /// Interval between periodic checkpoints, ms.
    pub fn checkpoint_interval_ms(&self) -> f64 {
        self.data.checkpoint_interval_ms
    }

    /// The recovery rules of a deployment whose preemptions come `notice_ms`
    /// ahead (0: unannounced), with this file's emergency-checkpoint write
    /// rate. A positive notice needs `checkpoint_write_gb_per_s` in the file:
    /// its absence is an error, not a default.
    pub fn recovery(&self, notice_ms: f64) -> Result<Recovery, ProfileError> {
        if !(notice_ms.is_finite() && notice_ms >= 0.0) {
            return Err(ProfileError::invalid(
                &self.file,
                "preemption notice",
                format!("{notice_ms} ms: must be a finite number >= 0"),
            ));
        }
        if notice_ms == 0.0 {
            // No emergency checkpoint without a notice; the write rate still
            // prices the periodic ones (`parcae_sim::cadence`).
            let rate = self.data.checkpoint_write_gb_per_s.unwrap_or(0.0);
            return Ok(Recovery { checkpoint_write_bytes_per_ms: rate * 1e6, ..Recovery::UNANNOUNCED });
        }
        let rate = self.data.checkpoint_write_gb_per_s.ok_or_else(|| {
            ProfileError::invalid(
                &self.file,
                "checkpoint_write_gb_per_s",
                format!(
                    "missing: a preemption notice of {notice_ms} ms needs the emergency-checkpoint write rate"
                ),
            )
        })?;
        Ok(Recovery::with_notice(notice_ms, rate))
    }

    /// Rate of the asynchronous checkpoint snapshot, bytes per ms (`None`:
    /// periodic checkpoints block training for the whole write).
    pub fn checkpoint_snapshot_bytes_per_ms(&self) -> Option<f64> {
        self.data.checkpoint_snapshot_gb_per_s.map(|rate| rate * 1e6)
    }

    /// All-reduce bandwidth, MiB per ms (the artifact's "GB/s").
    pub fn allreduce_gb_per_s(&self) -> f64 {
        self.data.allreduce_gb_per_s
    }

    /// The communicator rebuild rule for `model`: its own entry, else the default.
    pub fn comm_rebuild(&self, model: &str) -> Result<&CommRebuild, ProfileError> {
        self.rules.get(model).or(self.default.as_ref()).ok_or_else(|| {
            ProfileError::invalid(
                &self.file,
                "comm_rebuild.models",
                format!(
                    "no entry for model `{model}` and no `comm_rebuild.default`; entries: {}",
                    self.rules.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            )
        })
    }

    /// Communicator rebuild time in ms for forming `config` of `model` by `change`.
    pub fn comm_rebuild_ms(
        &self,
        model: &str,
        config: ParallelConfig,
        change: Change,
    ) -> Result<f64, ProfileError> {
        Ok(self.comm_rebuild(model)?.ms(config, change))
    }

    /// Ring all-reduce of `bytes` among `world` instances, ms:
    /// `bytes / MiB / allreduce_gb_per_s x 2(w-1)/w` (the artifact's
    /// `all_reduce_cost`). Zero for a world of 0 or 1 (nothing to reduce with).
    pub fn allreduce_ms(&self, bytes: u64, world: u32) -> f64 {
        if world <= 1 {
            return 0.0;
        }
        let w = f64::from(world);
        bytes as f64 / MIB / self.data.allreduce_gb_per_s * (2.0 * (w - 1.0) / w)
    }
}
