//! Serving profiles: what SpotServe's latency model needs about one model on
//! one kind of instance (per-layer prefill and decode times per tensor-parallel
//! width and batch size, memory, reconfiguration rates), loaded from a data
//! file so that a user can serve on their own hardware by measuring it.
//!
//! The format is documented in `data/profiles/README.md` ("Serving profiles");
//! every error names the file, the field path and the reason, and unknown
//! fields are rejected.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use parcae_serving_core::{LayerTiming, ServingProfile, Workload};
use serde::{Deserialize, Serialize};

use crate::error::ProfileError;
use crate::jsonloc::parse;

/// A serving profile file as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServingProfileFile {
    /// Where the figures come from (a citation, or "measured on ...").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Model name, e.g. "gpt-20b".
    pub model: String,
    /// The instance the model is served on.
    pub instance: ServingInstance,
    /// Transformer layers of the model.
    pub layers: u32,
    /// Bytes of all the model's weights as served.
    pub weight_bytes: u64,
    /// KV-cache bytes of one token of one request, over all layers.
    pub kv_bytes_per_token: u64,
    /// Prompt length the prefill times were measured at, tokens.
    pub profiled_input_tokens: u32,
    /// One micro-batch's activations between two pipeline stages.
    pub pipeline_hop_ms: PipelineHop,
    /// Per-layer times, one entry per measured (tp, batch).
    pub layer_timings: Vec<TimingEntry>,
    /// What a reconfiguration costs.
    pub reconfiguration: Reconfiguration,
    /// The request shape the figures are usually served with (the default of
    /// `bench-serve`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadEntry>,
    /// How iterations slow down when several replicas compute at once, measured on the
    /// deployment (`parcae-host profile-serving`); absent: replicas never contend (one GPU
    /// each). The serving simulator applies it; policies plan without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contention: Option<ContentionEntry>,
    /// What an iteration costs on top when the engine is not saturated (no request waiting),
    /// measured on the deployment; absent: nothing. The serving simulator applies it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub light_load: Option<LightLoadEntry>,
}

/// Replicas sharing a machine: local worker processes on fewer cores than replicas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentionEntry {
    /// Entry `i`: an iteration's time with `i + 1` replicas iterating together over its
    /// time with one (the first entry is 1); beyond the last entry the last step repeats.
    pub slowdown_by_busy_replicas: Vec<f64>,
    /// The same table per batch size, ascending (contention depends on the batch: the
    /// host's round trip weighs more beside a small one); `slowdown_by_busy_replicas`
    /// covers sizes these do not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_batch: Vec<BatchContention>,
    /// The engine runs one iteration of every busy replica at a time (`serve`'s: one host
    /// drives every replica), so a replica's prefill holds up the others' steps.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lockstep: bool,
}

/// One batch size's contention table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchContention {
    /// Requests per batch.
    pub batch: u32,
    /// Entry `i`: the iteration with `i + 1` replicas busy over the one with one.
    pub slowdown_by_busy_replicas: Vec<f64>,
}

/// An engine with nobody waiting: its processes sleep between requests and wake for each,
/// where a saturated engine's stay hot, so its iterations take longer and contend
/// differently.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LightLoadEntry {
    /// Added to a batch's prefill iteration, ms.
    pub prefill_extra_ms: f64,
    /// Added to each of its decode steps, ms.
    pub decode_extra_ms: f64,
    /// Entry `i`: such an iteration with `i + 1` replicas busy over the one with one, as
    /// far as measured (batch 1); empty: the saturated tables.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slowdown_by_busy_replicas: Vec<f64>,
}

/// The serving instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServingInstance {
    /// Instance type name, e.g. "g4dn.12xlarge".
    #[serde(rename = "type")]
    pub instance_type: String,
    /// GPUs per instance.
    pub gpus: u32,
    /// Memory of one GPU usable for weights and KV cache, bytes.
    pub gpu_memory_usable_bytes: u64,
    /// Spot price, US dollars per instance-hour.
    pub spot_usd_per_hour: f64,
    /// On-demand price, US dollars per instance-hour.
    pub on_demand_usd_per_hour: f64,
}

/// Pipeline hop times.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineHop {
    /// During prefill, ms.
    pub prefill: f64,
    /// Per decode step, ms.
    pub decode: f64,
}

/// One measured (tp, batch).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimingEntry {
    /// Tensor-parallel width.
    pub tp: u32,
    /// Requests in the batch.
    pub batch: u32,
    /// One layer's prefill of the whole batch, ms.
    pub prefill_ms: f64,
    /// One layer's decode step of the whole batch, ms.
    pub decode_ms: f64,
}

/// Reconfiguration rates and fixed times.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reconfiguration {
    /// An instance reading weights from storage, bytes per ms.
    pub load_bytes_per_ms: f64,
    /// An instance receiving state from another, bytes per ms.
    pub transfer_bytes_per_ms: f64,
    /// Setting a configuration up once its state is in place, ms.
    pub reinit_ms: f64,
    /// Starting the serving engine on a fresh instance, ms.
    pub instance_start_ms: f64,
}

/// Request shape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadEntry {
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Generated tokens.
    pub output_tokens: u32,
}

/// A validated serving profile.
#[derive(Debug, Clone, PartialEq)]
pub struct ServingProfileData {
    file: PathBuf,
    data: ServingProfileFile,
}

impl ServingProfileData {
    /// Read and validate a serving profile file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ProfileError> {
        let file = path.as_ref();
        let text = ProfileError::read(file)?;
        Self::from_json(&text, file)
    }

    /// Parse and validate from JSON text; `file` names it in errors.
    pub fn from_json(text: &str, file: impl AsRef<Path>) -> Result<Self, ProfileError> {
        let file = file.as_ref();
        let data: ServingProfileFile = parse(file, text)?;
        validate(&data, file)?;
        Ok(Self { file: file.to_path_buf(), data })
    }

    /// The file it was loaded from.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The profile as written.
    pub fn data(&self) -> &ServingProfileFile {
        &self.data
    }

    /// The profile as the latency model and serving policies take it.
    pub fn serving_profile(&self) -> ServingProfile {
        let d = &self.data;
        ServingProfile {
            model: d.model.clone(),
            layers: d.layers,
            gpus_per_instance: d.instance.gpus,
            gpu_memory_bytes: d.instance.gpu_memory_usable_bytes,
            weight_bytes: d.weight_bytes,
            kv_bytes_per_token: d.kv_bytes_per_token,
            profiled_input_tokens: d.profiled_input_tokens,
            pp_prefill_comm_ms: d.pipeline_hop_ms.prefill,
            pp_decode_comm_ms: d.pipeline_hop_ms.decode,
            timings: d
                .layer_timings
                .iter()
                .map(|t| LayerTiming {
                    tensor_parallel: t.tp,
                    batch_size: t.batch,
                    prefill_ms: t.prefill_ms,
                    decode_ms: t.decode_ms,
                })
                .collect(),
            load_bytes_per_ms: d.reconfiguration.load_bytes_per_ms,
            transfer_bytes_per_ms: d.reconfiguration.transfer_bytes_per_ms,
            reinit_ms: d.reconfiguration.reinit_ms,
            instance_start_ms: d.reconfiguration.instance_start_ms,
        }
    }

    /// Iteration slowdown per number of replicas busy at once (entry `i`: `i + 1` busy);
    /// empty when the profile measured none.
    pub fn slowdown_by_busy_replicas(&self) -> Vec<f64> {
        self.data.contention.as_ref().map(|c| c.slowdown_by_busy_replicas.clone()).unwrap_or_default()
    }

    /// Per-batch contention tables, ascending by batch size (empty when not measured).
    pub fn slowdown_by_batch(&self) -> Vec<(u32, Vec<f64>)> {
        self.data.contention.as_ref().map_or_else(Vec::new, |c| {
            c.by_batch.iter().map(|b| (b.batch, b.slowdown_by_busy_replicas.clone())).collect()
        })
    }

    /// Whether the deployment's engine iterates its replicas in lock step.
    pub fn lockstep(&self) -> bool {
        self.data.contention.as_ref().is_some_and(|c| c.lockstep)
    }

    /// The light-load extras, if measured.
    pub fn light_load(&self) -> Option<LightLoadEntry> {
        self.data.light_load.clone()
    }

    /// The request shape the file suggests, if it names one.
    pub fn workload(&self) -> Option<Workload> {
        self.data.workload.map(|w| Workload { input_tokens: w.input_tokens, output_tokens: w.output_tokens })
    }
}

fn positive(file: &Path, path: &str, value: f64) -> Result<(), ProfileError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(ProfileError::invalid(file, path, format!("must be a finite number > 0, got {value}")))
    }
}

fn non_negative(file: &Path, path: &str, value: f64) -> Result<(), ProfileError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(ProfileError::invalid(file, path, format!("must be a finite number >= 0, got {value}")))
    }
}

fn at_least_one(file: &Path, path: &str, value: u64) -> Result<(), ProfileError> {
    if value >= 1 { Ok(()) } else { Err(ProfileError::invalid(file, path, "must be >= 1")) }
}

/// A slowdown table: starts at 1 (one replica busy), every entry finite and positive.
fn slowdown_table(file: &Path, path: &str, table: &[f64]) -> Result<(), ProfileError> {
    if table.first() != Some(&1.0) {
        return Err(ProfileError::invalid(file, path, "must start with 1 (one replica busy)"));
    }
    for (i, &s) in table.iter().enumerate() {
        positive(file, &format!("{path}[{i}]"), s)?;
    }
    Ok(())
}

fn validate(d: &ServingProfileFile, file: &Path) -> Result<(), ProfileError> {
    if d.model.trim().is_empty() {
        return Err(ProfileError::invalid(file, "model", "must not be empty"));
    }
    if d.instance.instance_type.trim().is_empty() {
        return Err(ProfileError::invalid(file, "instance.type", "must not be empty"));
    }
    at_least_one(file, "instance.gpus", d.instance.gpus.into())?;
    at_least_one(file, "instance.gpu_memory_usable_bytes", d.instance.gpu_memory_usable_bytes)?;
    non_negative(file, "instance.spot_usd_per_hour", d.instance.spot_usd_per_hour)?;
    non_negative(file, "instance.on_demand_usd_per_hour", d.instance.on_demand_usd_per_hour)?;
    at_least_one(file, "layers", d.layers.into())?;
    at_least_one(file, "weight_bytes", d.weight_bytes)?;
    at_least_one(file, "kv_bytes_per_token", d.kv_bytes_per_token)?;
    at_least_one(file, "profiled_input_tokens", d.profiled_input_tokens.into())?;
    non_negative(file, "pipeline_hop_ms.prefill", d.pipeline_hop_ms.prefill)?;
    non_negative(file, "pipeline_hop_ms.decode", d.pipeline_hop_ms.decode)?;
    if d.layer_timings.is_empty() {
        return Err(ProfileError::invalid(file, "layer_timings", "needs at least one measured (tp, batch)"));
    }
    let mut seen = BTreeSet::new();
    for (i, t) in d.layer_timings.iter().enumerate() {
        let at = |field: &str| format!("layer_timings[{i}].{field}");
        at_least_one(file, &at("tp"), t.tp.into())?;
        at_least_one(file, &at("batch"), t.batch.into())?;
        positive(file, &at("prefill_ms"), t.prefill_ms)?;
        positive(file, &at("decode_ms"), t.decode_ms)?;
        if !seen.insert((t.tp, t.batch)) {
            return Err(ProfileError::invalid(
                file,
                format!("layer_timings[{i}]"),
                format!("tp {} batch {} is measured twice", t.tp, t.batch),
            ));
        }
    }
    if !d.layer_timings.iter().any(|t| t.tp <= d.instance.gpus) {
        return Err(ProfileError::invalid(
            file,
            "layer_timings",
            format!("no measured tp fits in one instance of {} GPUs", d.instance.gpus),
        ));
    }
    let r = &d.reconfiguration;
    positive(file, "reconfiguration.load_bytes_per_ms", r.load_bytes_per_ms)?;
    positive(file, "reconfiguration.transfer_bytes_per_ms", r.transfer_bytes_per_ms)?;
    non_negative(file, "reconfiguration.reinit_ms", r.reinit_ms)?;
    non_negative(file, "reconfiguration.instance_start_ms", r.instance_start_ms)?;
    if let Some(w) = &d.workload {
        at_least_one(file, "workload.input_tokens", w.input_tokens.into())?;
        at_least_one(file, "workload.output_tokens", w.output_tokens.into())?;
    }
    if let Some(c) = &d.contention {
        let path = "contention.slowdown_by_busy_replicas";
        slowdown_table(file, path, &c.slowdown_by_busy_replicas)?;
        for (k, b) in c.by_batch.iter().enumerate() {
            at_least_one(file, &format!("contention.by_batch[{k}].batch"), b.batch.into())?;
            if k > 0 && c.by_batch[k - 1].batch >= b.batch {
                return Err(ProfileError::invalid(
                    file,
                    format!("contention.by_batch[{k}].batch"),
                    format!("batch {} after batch {}: sizes must ascend", b.batch, c.by_batch[k - 1].batch),
                ));
            }
            slowdown_table(
                file,
                &format!("contention.by_batch[{k}].slowdown_by_busy_replicas"),
                &b.slowdown_by_busy_replicas,
            )?;
        }
    }
    if let Some(l) = &d.light_load {
        non_negative(file, "light_load.prefill_extra_ms", l.prefill_extra_ms)?;
        non_negative(file, "light_load.decode_extra_ms", l.decode_extra_ms)?;
        if !l.slowdown_by_busy_replicas.is_empty() {
            slowdown_table(file, "light_load.slowdown_by_busy_replicas", &l.slowdown_by_busy_replicas)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{
        "model": "m",
        "instance": {"type": "x", "gpus": 4, "gpu_memory_usable_bytes": 9000000000,
                     "spot_usd_per_hour": 1.9, "on_demand_usd_per_hour": 3.9},
        "layers": 4,
        "weight_bytes": 1000000000,
        "kv_bytes_per_token": 1000,
        "profiled_input_tokens": 512,
        "pipeline_hop_ms": {"prefill": 7.0, "decode": 0.1},
        "layer_timings": [{"tp": 1, "batch": 1, "prefill_ms": 10.0, "decode_ms": 1.0},
                          {"tp": 2, "batch": 1, "prefill_ms": 6.0, "decode_ms": 0.6}],
        "reconfiguration": {"load_bytes_per_ms": 90000, "transfer_bytes_per_ms": 6250000,
                            "reinit_ms": 500, "instance_start_ms": 20000},
        "workload": {"input_tokens": 512, "output_tokens": 128}
    }"#;

    #[test]
    fn a_good_file_becomes_the_core_profile() {
        let p = ServingProfileData::from_json(GOOD, "good.json").unwrap();
        let core = p.serving_profile();
        assert_eq!(core.gpus_per_instance, 4);
        assert_eq!(core.timing(2, 1).unwrap().decode_ms, 0.6);
        assert_eq!(p.workload(), Some(Workload { input_tokens: 512, output_tokens: 128 }));
        assert!(p.slowdown_by_busy_replicas().is_empty());
        let contended = GOOD.replace(
            "\"workload\"",
            "\"contention\": {\"slowdown_by_busy_replicas\": [1, 1.4, 2.1]}, \"workload\"",
        );
        let p = ServingProfileData::from_json(&contended, "good.json").unwrap();
        assert_eq!(p.slowdown_by_busy_replicas(), vec![1.0, 1.4, 2.1]);
        assert!(p.slowdown_by_batch().is_empty() && p.light_load().is_none());
        let measured = GOOD.replace(
            "\"workload\"",
            "\"contention\": {\"slowdown_by_busy_replicas\": [1, 1.4], \"by_batch\": [\
             {\"batch\": 1, \"slowdown_by_busy_replicas\": [1, 1.6]}, {\"batch\": 4, \"slowdown_by_busy_replicas\": [1, 1.2]}]}, \
             \"light_load\": {\"prefill_extra_ms\": 0.7, \"decode_extra_ms\": 0.09}, \"workload\"",
        );
        let p = ServingProfileData::from_json(&measured, "good.json").unwrap();
        assert_eq!(p.slowdown_by_batch(), vec![(1, vec![1.0, 1.6]), (4, vec![1.0, 1.2])]);
        assert!(!p.lockstep());
        let lockstep = measured.replace("\"by_batch\"", "\"lockstep\": true, \"by_batch\"");
        assert!(ServingProfileData::from_json(&lockstep, "good.json").unwrap().lockstep());
        assert_eq!(
            p.light_load(),
            Some(LightLoadEntry {
                prefill_extra_ms: 0.7,
                decode_extra_ms: 0.09,
                slowdown_by_busy_replicas: vec![]
            })
        );
    }

    #[test]
    fn errors_name_the_file_and_field() {
        let cases = [
            (GOOD.replace("\"decode_ms\": 0.6", "\"decode_ms\": -1"), "layer_timings[1].decode_ms"),
            (GOOD.replace("\"tp\": 2", "\"tp\": 1"), "layer_timings[1]"),
            (GOOD.replace("\"gpus\": 4", "\"gpus\": 0"), "instance.gpus"),
            (GOOD.replace("\"layers\": 4", "\"layers\": \"4\""), "layers"),
            (GOOD.replace("\"reinit_ms\": 500", "\"reinit_ms\": 500, \"typo\": 1"), "reconfiguration"),
            (
                GOOD.replace(
                    "\"workload\"",
                    "\"contention\": {\"slowdown_by_busy_replicas\": [2]}, \"workload\"",
                ),
                "contention.slowdown_by_busy_replicas",
            ),
            (
                GOOD.replace(
                    "\"workload\"",
                    "\"contention\": {\"slowdown_by_busy_replicas\": [1, -3]}, \"workload\"",
                ),
                "contention.slowdown_by_busy_replicas[1]",
            ),
            (
                GOOD.replace(
                    "\"workload\"",
                    "\"contention\": {\"slowdown_by_busy_replicas\": [1], \"by_batch\": [\
                     {\"batch\": 2, \"slowdown_by_busy_replicas\": [1]}, {\"batch\": 2, \"slowdown_by_busy_replicas\": [1]}]}, \"workload\"",
                ),
                "contention.by_batch[1].batch",
            ),
            (
                GOOD.replace(
                    "\"workload\"",
                    "\"contention\": {\"slowdown_by_busy_replicas\": [1], \"by_batch\": [\
                     {\"batch\": 2, \"slowdown_by_busy_replicas\": [1.5]}]}, \"workload\"",
                ),
                "contention.by_batch[0].slowdown_by_busy_replicas",
            ),
            (
                GOOD.replace(
                    "\"workload\"",
                    "\"light_load\": {\"prefill_extra_ms\": -0.1, \"decode_extra_ms\": 0}, \"workload\"",
                ),
                "light_load.prefill_extra_ms",
            ),
            (
                GOOD.replace(
                    "\"workload\"",
                    "\"light_load\": {\"prefill_extra_ms\": 1, \"decode_extra_ms\": 0, \
                     \"slowdown_by_busy_replicas\": [1, 0]}, \"workload\"",
                ),
                "light_load.slowdown_by_busy_replicas[1]",
            ),
        ];
        for (text, path) in cases {
            let err = ServingProfileData::from_json(&text, "bad.json").unwrap_err();
            assert_eq!(err.path(), Some(path), "{err}");
            assert!(err.to_string().starts_with("bad.json: "), "{err}");
        }
    }
}
