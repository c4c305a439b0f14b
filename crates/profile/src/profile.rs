//! A cluster's throughput profile: instance prices, the point-to-point
//! transfer curve, and per model its measured throughput per layout, start-up
//! times and parameters per layer (format of `shared/profiles/p3-v100-parcae.json`,
//! documented in `profiles/README.md`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use parcae_policy_core::{ConfigProfile, ModelProfile, ParallelConfig, StagePartition, TransferPoint};
use serde::{Deserialize, Serialize};

use crate::constants::CostConstants;
use crate::error::{ProfileError, join_index, join_key};
use crate::jsonloc::{parse, unique_map};
use crate::partition::{max_stages, stage_partition};
use crate::transfer::{CurveError, TransferCurve};

/// Largest relative gap tolerated between `samples_per_s` and
/// `global_batch_size / iteration_ms` (the WIT defines one as the other; the
/// shared profile agrees to 1e-4, rounding included).
const THROUGHPUT_TOLERANCE: f64 = 0.01;

/// A profile file exactly as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFile {
    /// Where the measurements come from, free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The instance type the cluster is made of.
    pub instance: Instance,
    /// Units of the fields, for human readers (not interpreted).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", deserialize_with = "unique_map")]
    pub units: BTreeMap<String, String>,
    /// Measured point-to-point transfer time (microseconds) by message size (bytes).
    #[serde(deserialize_with = "unique_map")]
    pub p2p_us_by_bytes: BTreeMap<u64, f64>,
    /// Throughput and start-up figures per model name.
    #[serde(deserialize_with = "unique_map")]
    pub models: BTreeMap<String, ModelEntry>,
    /// Parameters per layer per model name (one entry per model in `models`).
    #[serde(deserialize_with = "unique_map")]
    pub layer_params: BTreeMap<String, LayerParams>,
}

/// The instance type: what one spot or on-demand instance is and costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Instance {
    /// Cloud instance type, e.g. `p3.2xlarge`.
    #[serde(rename = "type")]
    pub instance_type: String,
    /// Accelerators per instance.
    #[serde(default = "one")]
    pub gpus: u32,
    /// Accelerator model, e.g. `V100-16GB`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// Network bandwidth per instance, Gb/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_gbps: Option<f64>,
    /// On-demand price, US dollars per instance-hour.
    pub on_demand_usd_per_hour: f64,
    /// Spot price, US dollars per instance-hour.
    pub spot_usd_per_hour: f64,
    /// Where the prices come from, free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_source: Option<String>,
}

fn one() -> u32 {
    1
}

/// Measured figures for one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// Samples per micro-batch.
    pub micro_batch_size: u32,
    /// Samples per global batch (constant across layouts).
    pub global_batch_size: u32,
    /// Time to start a worker process, ms.
    pub proc_init_ms: f64,
    /// Time for workers to agree on a new layout, ms.
    pub rendezvous_ms: f64,
    /// Extra time a restart of this model pays (engine/data-set set-up), ms.
    pub restart_extra_ms: f64,
    /// Time to build one stage's model, ms, by pipeline depth.
    #[serde(deserialize_with = "unique_map")]
    pub model_build_ms_by_pp: BTreeMap<u32, f64>,
    /// Measured throughput per layout.
    pub throughput: Vec<ThroughputEntry>,
}

/// Measured throughput of one layout.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThroughputEntry {
    /// Data-parallel degree D.
    pub dp: u32,
    /// Pipeline depth P.
    pub pp: u32,
    /// Time of one iteration (one global batch), ms.
    pub iteration_ms: f64,
    /// Samples per second (= global batch / iteration time).
    pub samples_per_s: f64,
}

/// Parameters per layer and the size of their training state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerParams {
    /// Parameters per layer in model order; the first entry is the embedding
    /// (or stem), which always sits on stage 0.
    pub layers: Vec<u64>,
    /// Optimizer values kept per parameter (2 for Adam's moments).
    pub optimizer_states_per_param: u32,
    /// Bytes per stored value (4 for fp32).
    pub bytes_per_value: u32,
    /// Architecture details, informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<Arch>,
}

impl LayerParams {
    /// Training-state bytes per parameter: the value plus its optimizer
    /// states, `(1 + optimizer_states_per_param) x bytes_per_value`
    /// (12 for fp32 Adam).
    pub fn state_bytes_per_param(&self) -> u64 {
        (1 + u64::from(self.optimizer_states_per_param)) * u64::from(self.bytes_per_value)
    }
}

/// Architecture of a model. Only `micro_batch_size` is checked (against the
/// model entry's); other fields are kept for readers and tools.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Arch {
    /// Samples per micro-batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub micro_batch_size: Option<u32>,
    /// Transformer layers (embedding and head excluded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nlayers: Option<u32>,
    /// Tokens per sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq_length: Option<u32>,
    /// Hidden size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden_size: Option<u32>,
    /// Attention heads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nheads: Option<u32>,
    /// Vocabulary size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocab_size: Option<u32>,
    /// Activation values sent between stages per micro-batch (0 when not modelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_p2p_num: Option<u64>,
    /// Any other fields, kept as written.
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

/// A validated profile: every model has consistent throughput entries, a
/// build time for every depth it uses, and enough layers for that depth.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    file: PathBuf,
    data: ProfileFile,
    curve: TransferCurve,
}

impl Profile {
    /// Read and validate a profile file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ProfileError> {
        let file = path.as_ref();
        let text = ProfileError::read(file)?;
        Self::from_json(&text, file)
    }

    /// Parse and validate a profile from JSON text; `file` names it in errors.
    pub fn from_json(text: &str, file: impl AsRef<Path>) -> Result<Self, ProfileError> {
        let data = parse(file.as_ref(), text)?;
        Self::from_data(data, file)
    }

    /// Validate a profile built in code (e.g. by a profiling tool); `file`
    /// names it in errors.
    pub fn from_data(data: ProfileFile, file: impl AsRef<Path>) -> Result<Self, ProfileError> {
        let file = file.as_ref();
        let curve = validate(&data, file)?;
        Ok(Self { file: file.to_path_buf(), data, curve })
    }

    /// The file the profile was loaded from.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The profile as written.
    pub fn data(&self) -> &ProfileFile {
        &self.data
    }

    /// The instance type, with its prices.
    pub fn instance(&self) -> &Instance {
        &self.data.instance
    }

    /// Spot price, US dollars per instance-hour.
    pub fn spot_usd_per_hour(&self) -> f64 {
        self.data.instance.spot_usd_per_hour
    }

    /// On-demand price, US dollars per instance-hour.
    pub fn on_demand_usd_per_hour(&self) -> f64 {
        self.data.instance.on_demand_usd_per_hour
    }

    /// Names of the profiled models, sorted.
    pub fn model_names(&self) -> Vec<&str> {
        self.data.models.keys().map(String::as_str).collect()
    }

    /// The measured figures of `model`; an unknown name lists the known ones.
    pub fn model(&self, model: &str) -> Result<&ModelEntry, ProfileError> {
        self.data.models.get(model).ok_or_else(|| self.unknown(model))
    }

    /// The parameters per layer of `model`.
    pub fn layer_params(&self, model: &str) -> Result<&LayerParams, ProfileError> {
        self.data.layer_params.get(model).ok_or_else(|| self.unknown(model))
    }

    /// The measured point-to-point transfer curve.
    pub fn transfer_curve(&self) -> &TransferCurve {
        &self.curve
    }

    /// Time to move `bytes` between two instances, ms (see [`crate::transfer_us`]).
    pub fn transfer_ms(&self, bytes: u64) -> f64 {
        self.curve.transfer_ms(bytes)
    }

    /// How `model` is split at depth `pp` and the state bytes of each stage
    /// (see [`crate::partition()`] for the rule).
    pub fn partition(&self, model: &str, pp: u32) -> Result<StagePartition, ProfileError> {
        let lp = self.layer_params(model)?;
        stage_partition(&lp.layers, pp, lp.state_bytes_per_param()).map_err(|e| {
            ProfileError::invalid(
                &self.file,
                join_key(&join_key("layer_params", model), "layers"),
                e.to_string(),
            )
        })
    }

    /// Training-state bytes of the whole model (what a restart moves when
    /// every stage is reloaded).
    pub fn full_state_bytes(&self, model: &str) -> Result<u64, ProfileError> {
        let lp = self.layer_params(model)?;
        lp.layers
            .iter()
            .try_fold(0u64, |acc, &p| acc.checked_add(p))
            .and_then(|params| params.checked_mul(lp.state_bytes_per_param()))
            .ok_or_else(|| {
                ProfileError::invalid(
                    &self.file,
                    join_key("layer_params", model),
                    "state bytes overflow 64 bits",
                )
            })
    }

    /// The policy-level profile of `model`: one `ConfigProfile` per measured
    /// layout (sorted by D then P) with communicator rebuild times from
    /// `constants`, one partition per depth used, the transfer curve, and the
    /// start-up and checkpoint times. The model's `restart_extra_ms` is
    /// `add_extra_ms`: the artifact charges it on every reconfiguration that
    /// adds instances (restarts included), not only on restarts.
    pub fn model_profile(
        &self,
        model: &str,
        constants: &CostConstants,
    ) -> Result<ModelProfile, ProfileError> {
        let entry = self.model(model)?;
        let rule = constants.comm_rebuild(model)?;
        let mut configs = Vec::with_capacity(entry.throughput.len());
        for t in &entry.throughput {
            let config = ParallelConfig::new(t.dp, t.pp);
            // Validation guarantees the entry; stay panic-free anyway.
            let model_build_ms = *entry.model_build_ms_by_pp.get(&t.pp).ok_or_else(|| {
                ProfileError::invalid(
                    &self.file,
                    model_path(model, "model_build_ms_by_pp"),
                    format!("no entry for pp={}", t.pp),
                )
            })?;
            configs.push(ConfigProfile {
                config,
                samples_per_second: t.samples_per_s,
                iteration_ms: t.iteration_ms,
                comm_rebuild_add_ms: rule.add_ms(config),
                comm_rebuild_remove_ms: rule.remove_ms(config),
                model_build_ms,
            });
        }
        configs.sort_by_key(|c| c.config);
        let depths: BTreeSet<u32> = entry.throughput.iter().map(|t| t.pp).collect();
        let partitions =
            depths.into_iter().map(|pp| self.partition(model, pp)).collect::<Result<Vec<_>, _>>()?;
        Ok(ModelProfile {
            model: model.to_string(),
            global_batch_size: entry.global_batch_size,
            micro_batch_size: entry.micro_batch_size,
            configs,
            partitions,
            transfer_curve: self.curve.points().to_vec(),
            rendezvous_ms: entry.rendezvous_ms,
            process_start_ms: entry.proc_init_ms,
            add_extra_ms: entry.restart_extra_ms,
            checkpoint_restart_ms: constants.checkpoint_save_load_ms(),
            checkpoint_interval_ms: constants.checkpoint_interval_ms(),
        })
    }

    fn unknown(&self, model: &str) -> ProfileError {
        ProfileError::UnknownModel {
            file: self.file.clone(),
            model: model.to_string(),
            available: self.data.models.keys().cloned().collect(),
        }
    }
}

fn model_path(model: &str, field: &str) -> String {
    join_key(&join_key("models", model), field)
}

/// `v` if it is finite and > 0, else an error at `path`.
pub(crate) fn check_positive(file: &Path, path: &str, v: f64) -> Result<f64, ProfileError> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(ProfileError::invalid(file, path, format!("must be a finite number > 0, got {v}")))
    }
}

/// `v` if it is finite and >= 0, else an error at `path`.
pub(crate) fn check_non_negative(file: &Path, path: &str, v: f64) -> Result<f64, ProfileError> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(ProfileError::invalid(file, path, format!("must be a finite number >= 0, got {v}")))
    }
}

/// The longest a single reconfiguration step may be stated to take: a day.
/// Nothing a restart or a communicator rebuild does takes longer, and a larger
/// figure is a unit slip (microseconds, or a placeholder such as `1e300`)
/// whose sums would swamp every interval: the simulator's time then cancels
/// out in floating point and its tables come out as nonsense, not an error.
pub(crate) const MAX_OPERATION_MS: f64 = 86_400_000.0;

/// `v` if it is a duration in ms from 0 to [`MAX_OPERATION_MS`], else an error at `path`.
pub(crate) fn check_operation_ms(file: &Path, path: &str, v: f64) -> Result<f64, ProfileError> {
    let v = check_non_negative(file, path, v)?;
    if v <= MAX_OPERATION_MS {
        return Ok(v);
    }
    // Plain digits up to a trillion, an exponent beyond (1e300 has 301 digits).
    let shown = if v < 1e12 { format!("{v}") } else { format!("{v:e}") };
    Err(ProfileError::invalid(
        file,
        path,
        format!("{shown} ms is more than a day ({MAX_OPERATION_MS} ms); is it in milliseconds?"),
    ))
}

fn check_at_least_one(file: &Path, path: &str, v: u32) -> Result<(), ProfileError> {
    if v >= 1 { Ok(()) } else { Err(ProfileError::invalid(file, path, "must be >= 1")) }
}

/// Check everything the cost model relies on; returns the transfer curve.
fn validate(data: &ProfileFile, file: &Path) -> Result<TransferCurve, ProfileError> {
    let inst = &data.instance;
    if inst.instance_type.trim().is_empty() {
        return Err(ProfileError::invalid(file, "instance.type", "must not be empty"));
    }
    check_at_least_one(file, "instance.gpus", inst.gpus)?;
    if let Some(gbps) = inst.network_gbps {
        check_positive(file, "instance.network_gbps", gbps)?;
    }
    check_non_negative(file, "instance.on_demand_usd_per_hour", inst.on_demand_usd_per_hour)?;
    check_non_negative(file, "instance.spot_usd_per_hour", inst.spot_usd_per_hour)?;

    let points: Vec<TransferPoint> =
        data.p2p_us_by_bytes.iter().map(|(&bytes, &micros)| TransferPoint { bytes, micros }).collect();
    let curve = TransferCurve::new(points.clone()).map_err(|e| {
        let path = match e {
            CurveError::Empty => "p2p_us_by_bytes".to_string(),
            CurveError::ZeroBytes { index }
            | CurveError::BadTime { index, .. }
            | CurveError::NotSorted { index, .. } => {
                join_key("p2p_us_by_bytes", &points[index].bytes.to_string())
            }
        };
        let reason = match e {
            CurveError::Empty => "needs at least one measured point".to_string(),
            CurveError::ZeroBytes { .. } => "size must be >= 1 byte".to_string(),
            CurveError::BadTime { micros, .. } => {
                format!("time must be a finite number of microseconds > 0, got {micros}")
            }
            CurveError::NotSorted { .. } => e.to_string(),
        };
        ProfileError::invalid(file, path, reason)
    })?;

    if data.models.is_empty() {
        return Err(ProfileError::invalid(file, "models", "needs at least one model"));
    }
    for (name, entry) in &data.models {
        if name.is_empty() {
            return Err(ProfileError::invalid(file, "models", "a model name must not be empty"));
        }
        let lp = data.layer_params.get(name).ok_or_else(|| {
            ProfileError::invalid(
                file,
                "layer_params",
                format!("no entry for model `{name}` (every model in `models` needs one)"),
            )
        })?;
        validate_model(file, name, entry, lp)?;
    }
    if let Some(orphan) = data.layer_params.keys().find(|k| !data.models.contains_key(*k)) {
        return Err(ProfileError::invalid(
            file,
            join_key("layer_params", orphan),
            format!(
                "no model `{orphan}` in `models`; models: {}",
                data.models.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    Ok(curve)
}

fn validate_model(file: &Path, name: &str, m: &ModelEntry, lp: &LayerParams) -> Result<(), ProfileError> {
    let at = |field: &str| model_path(name, field);
    check_at_least_one(file, &at("micro_batch_size"), m.micro_batch_size)?;
    check_at_least_one(file, &at("global_batch_size"), m.global_batch_size)?;
    if !m.global_batch_size.is_multiple_of(m.micro_batch_size) {
        return Err(ProfileError::invalid(
            file,
            at("global_batch_size"),
            format!("must be a multiple of micro_batch_size ({})", m.micro_batch_size),
        ));
    }
    check_operation_ms(file, &at("proc_init_ms"), m.proc_init_ms)?;
    check_operation_ms(file, &at("rendezvous_ms"), m.rendezvous_ms)?;
    check_operation_ms(file, &at("restart_extra_ms"), m.restart_extra_ms)?;
    for (&pp, &ms) in &m.model_build_ms_by_pp {
        let path = join_key(&at("model_build_ms_by_pp"), &pp.to_string());
        if pp == 0 {
            return Err(ProfileError::invalid(file, path, "pipeline depth must be >= 1"));
        }
        check_operation_ms(file, &path, ms)?;
    }

    // Layer parameters first: depths are checked against them below.
    let lp_at = |field: &str| join_key(&join_key("layer_params", name), field);
    if lp.layers.is_empty() {
        return Err(ProfileError::invalid(file, lp_at("layers"), "needs at least one layer"));
    }
    check_at_least_one(file, &lp_at("bytes_per_value"), lp.bytes_per_value)?;
    if let Some(mbs) = lp.arch.as_ref().and_then(|a| a.micro_batch_size)
        && mbs != m.micro_batch_size
    {
        return Err(ProfileError::invalid(
            file,
            join_key(&lp_at("arch"), "micro_batch_size"),
            format!("{mbs} disagrees with models.{name}.micro_batch_size ({})", m.micro_batch_size),
        ));
    }
    let total = lp.layers.iter().try_fold(0u64, |acc, &p| acc.checked_add(p));
    if total.and_then(|t| t.checked_mul(lp.state_bytes_per_param())).is_none() {
        return Err(ProfileError::invalid(file, lp_at("layers"), "state bytes overflow 64 bits"));
    }
    let deepest = max_stages(lp.layers.len());

    if m.throughput.is_empty() {
        return Err(ProfileError::invalid(file, at("throughput"), "needs at least one measured layout"));
    }
    let mut seen: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for (i, t) in m.throughput.iter().enumerate() {
        let row = join_index(&at("throughput"), i);
        let field = |f: &str| join_key(&row, f);
        check_at_least_one(file, &field("dp"), t.dp)?;
        check_at_least_one(file, &field("pp"), t.pp)?;
        check_positive(file, &field("iteration_ms"), t.iteration_ms)?;
        check_positive(file, &field("samples_per_s"), t.samples_per_s)?;
        let implied = f64::from(m.global_batch_size) * 1000.0 / t.iteration_ms;
        if ((t.samples_per_s - implied) / implied).abs() > THROUGHPUT_TOLERANCE {
            return Err(ProfileError::invalid(
                file,
                field("samples_per_s"),
                format!(
                    "{} disagrees with global_batch_size / iteration_ms = {implied:.3} by more than {}%",
                    t.samples_per_s,
                    THROUGHPUT_TOLERANCE * 100.0
                ),
            ));
        }
        if let Some(first) = seen.insert((t.dp, t.pp), i) {
            return Err(ProfileError::invalid(
                file,
                row,
                format!("layout dp={} pp={} is also measured at throughput[{first}]", t.dp, t.pp),
            ));
        }
        if !m.model_build_ms_by_pp.contains_key(&t.pp) {
            return Err(ProfileError::invalid(
                file,
                at("model_build_ms_by_pp"),
                format!("no entry for pp={} (used by throughput[{i}])", t.pp),
            ));
        }
        if t.pp as usize > deepest {
            return Err(ProfileError::invalid(
                file,
                field("pp"),
                format!(
                    "layer_params.{name}.layers has {} entries, which can fill at most {deepest} stages \
                     (the first entry rides with stage 0)",
                    lp.layers.len()
                ),
            ));
        }
    }
    Ok(())
}
