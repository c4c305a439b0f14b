//! The peer systems' constants, as written in `profiles/peer-constants.json`.
//!
//! Every number comes with its source: each section has a `sources` map with
//! one citation per scalar field, and each per-model entry a `source` string.
//! [`PeerConstants::validate`] refuses a file where a constant has no citation,
//! a citation names no field, or a value is out of range, naming the field
//! path. Parsing the JSON text is the caller's job (the host uses serde_json);
//! this crate only defines the schema and the checks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Why a peer-constants file was refused: the field path and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct ConstantsError {
    /// JSON path of the offending field, e.g. `bamboo.models.bert.reconfigure_ms`.
    pub path: String,
    /// Why it was refused.
    pub reason: String,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConstants {
    /// Overall provenance, free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Bamboo's figures.
    pub bamboo: BambooConstants,
    /// Varuna's figures.
    pub varuna: VarunaConstants,
    /// Oobleck's figures.
    pub oobleck: OobleckConstants,
    /// The on-demand reference's settings.
    pub on_demand: OnDemandConstants,
}

/// Bamboo (NSDI'23): redundant computation of the successor's stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BambooConstants {
    /// One citation per scalar field below.
    pub sources: BTreeMap<String, String>,
    /// Each node holds its own stage and its successor's: Bamboo's pipelines
    /// must be at least this many times deeper than the shallowest profiled
    /// (memory-feasible) depth.
    pub memory_depth_factor: f64,
    /// Share of a stage's compute (forward + backward) that is its forward
    /// pass: the work eager forward redundant computation adds per micro-batch.
    pub forward_fraction: f64,
    /// Step-time factor while a node also runs a preempted successor's stage.
    pub fallback_slowdown: f64,
    /// Global rendezvous after a fatal failure, ms.
    pub global_rendezvous_ms: f64,
    /// Reconfigure when `2 x overloaded / active nodes` exceeds this (the
    /// chance that the next preemption is fatal).
    pub overloaded_fraction_limit: f64,
    /// Which of the two contested figures for Bamboo's speed is used.
    pub speed: BambooSpeed,
    /// Oobleck's throughput over Bamboo's at the same fleet in the Oobleck
    /// artifact's tables: the step-time factor of [`BambooSpeed::OobleckArtifact`].
    pub artifact_slowdown: f64,
    /// Per model (profile model names).
    pub models: BTreeMap<String, BambooModel>,
}

/// Bamboo's speed on a layout: sources disagree, so the choice is explicit
/// and the other one stays available as a sensitivity variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BambooSpeed {
    /// The profile's throughput slowed by the redundant forward passes that
    /// do not fit the pipeline bubbles (derived from Bamboo's mechanism).
    RedundantCompute,
    /// The profile's throughput divided by `artifact_slowdown` (the Oobleck
    /// artifact's measured Bamboo-versus-Oobleck ratio).
    OobleckArtifact,
}

/// Bamboo's figures for one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BambooModel {
    /// The model of the published measurements this entry stands for.
    pub paper_model: String,
    /// A reconfiguration (local rendezvous, layers moved to new coordinates), ms.
    pub reconfigure_ms: f64,
    /// Where the numbers come from.
    pub source: String,
}

/// Varuna (EuroSys'22): periodic checkpoints, restart on every fleet change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VarunaConstants {
    /// One citation per scalar field below.
    pub sources: BTreeMap<String, String>,
    /// Checkpoint every this many iterations; `null`: Young's optimum
    /// `sqrt(2 x checkpoint_ms x mean time between preemptions)` of the trace.
    pub checkpoint_every_iterations: Option<u32>,
    /// Per model (profile model names).
    pub models: BTreeMap<String, VarunaModel>,
}

/// Varuna's figures for one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VarunaModel {
    /// The model of the published measurements this entry stands for.
    pub paper_model: String,
    /// A restart from a checkpoint in a new configuration, ms.
    pub restart_ms: f64,
    /// Writing one checkpoint (training waits), ms.
    pub checkpoint_ms: f64,
    /// Where the numbers come from.
    pub source: String,
}

/// Oobleck (SOSP'23): pipeline templates, `f + 1` replicas, no checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OobleckConstants {
    /// One citation per scalar field below.
    pub sources: BTreeMap<String, String>,
    /// `f`: simultaneous failures tolerated; at least `f + 1` pipelines run.
    pub fault_tolerance: u32,
    /// What a reconfiguration costs: the published time per model, or the
    /// profile's live-migration cost of the same transition (for comparison).
    pub reconfiguration: OobleckReconfiguration,
    /// Per model (profile model names).
    pub models: BTreeMap<String, OobleckModel>,
}

/// The cost of an Oobleck reconfiguration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OobleckReconfiguration {
    /// The model's `reconfigure_ms`.
    Published,
    /// The liveput cost model's migration time for the same transition
    /// (rendezvous, communicators, model build, state transfer on this profile).
    CostModel,
}

/// Oobleck's figures for one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OobleckModel {
    /// The model of the published measurements this entry stands for.
    pub paper_model: String,
    /// Re-instantiating pipelines from templates and surviving replicas, ms.
    pub reconfigure_ms: f64,
    /// Where the numbers come from.
    pub source: String,
}

/// The on-demand reference: a fixed fleet, no preemptions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnDemandConstants {
    /// One citation per scalar field below.
    pub sources: BTreeMap<String, String>,
    /// Instances of the fleet; `null`: the trace's peak (what the spot job asked for).
    pub fleet_instances: Option<u32>,
}

fn invalid(path: impl Into<String>, reason: impl Into<String>) -> ConstantsError {
    ConstantsError { path: path.into(), reason: reason.into() }
}

/// Checks that `sources` cites exactly the scalar fields `fields`.
fn check_sources(
    section: &str,
    sources: &BTreeMap<String, String>,
    fields: &[&str],
) -> Result<(), ConstantsError> {
    for field in fields {
        match sources.get(*field) {
            Some(text) if !text.trim().is_empty() => {}
            Some(_) => return Err(invalid(format!("{section}.sources.{field}"), "empty citation")),
            None => {
                return Err(invalid(
                    format!("{section}.sources"),
                    format!("no citation for `{field}`: every constant must say where it comes from"),
                ));
            }
        }
    }
    if let Some(key) = sources.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(invalid(
            format!("{section}.sources.{key}"),
            format!("cites no field of `{section}` (fields: {})", fields.join(", ")),
        ));
    }
    Ok(())
}

fn check_range(path: String, value: f64, min: f64, min_inclusive: bool) -> Result<(), ConstantsError> {
    let ok = value.is_finite() && if min_inclusive { value >= min } else { value > min };
    if ok {
        Ok(())
    } else {
        Err(invalid(
            path,
            format!("{value} must be a finite number {} {min}", if min_inclusive { ">=" } else { ">" }),
        ))
    }
}

fn check_text(path: String, text: &str) -> Result<(), ConstantsError> {
    if text.trim().is_empty() { Err(invalid(path, "must not be empty")) } else { Ok(()) }
}

fn check_models<M>(
    section: &str,
    models: &BTreeMap<String, M>,
    mut each: impl FnMut(&str, &M) -> Result<(), ConstantsError>,
) -> Result<(), ConstantsError> {
    if models.is_empty() {
        return Err(invalid(format!("{section}.models"), "at least one model is needed"));
    }
    for (name, model) in models {
        each(&format!("{section}.models.{name}"), model)?;
    }
    Ok(())
}

impl PeerConstants {
    /// The same constants with Bamboo's speed taken from `speed`: the bench's
    /// sensitivity row for the figure not chosen in the file.
    pub fn with_bamboo_speed(&self, speed: BambooSpeed) -> PeerConstants {
        let mut out = self.clone();
        out.bamboo.speed = speed;
        out
    }

    /// Checks every value and that every constant is cited.
    pub fn validate(&self) -> Result<(), ConstantsError> {
        let b = &self.bamboo;
        check_sources(
            "bamboo",
            &b.sources,
            &[
                "memory_depth_factor",
                "forward_fraction",
                "fallback_slowdown",
                "global_rendezvous_ms",
                "overloaded_fraction_limit",
                "speed",
                "artifact_slowdown",
            ],
        )?;
        check_range("bamboo.memory_depth_factor".into(), b.memory_depth_factor, 1.0, true)?;
        check_range("bamboo.forward_fraction".into(), b.forward_fraction, 0.0, true)?;
        check_range("bamboo.fallback_slowdown".into(), b.fallback_slowdown, 1.0, true)?;
        check_range("bamboo.global_rendezvous_ms".into(), b.global_rendezvous_ms, 0.0, true)?;
        check_range("bamboo.overloaded_fraction_limit".into(), b.overloaded_fraction_limit, 0.0, true)?;
        check_range("bamboo.artifact_slowdown".into(), b.artifact_slowdown, 1.0, true)?;
        check_models("bamboo", &b.models, |path, m| {
            check_text(format!("{path}.paper_model"), &m.paper_model)?;
            check_text(format!("{path}.source"), &m.source)?;
            check_range(format!("{path}.reconfigure_ms"), m.reconfigure_ms, 0.0, true)
        })?;

        let v = &self.varuna;
        check_sources("varuna", &v.sources, &["checkpoint_every_iterations"])?;
        if v.checkpoint_every_iterations == Some(0) {
            return Err(invalid(
                "varuna.checkpoint_every_iterations",
                "must be >= 1 (or null for Young's rule)",
            ));
        }
        check_models("varuna", &v.models, |path, m| {
            check_text(format!("{path}.paper_model"), &m.paper_model)?;
            check_text(format!("{path}.source"), &m.source)?;
            check_range(format!("{path}.restart_ms"), m.restart_ms, 0.0, true)?;
            check_range(format!("{path}.checkpoint_ms"), m.checkpoint_ms, 0.0, true)
        })?;

        let o = &self.oobleck;
        check_sources("oobleck", &o.sources, &["fault_tolerance", "reconfiguration"])?;
        check_models("oobleck", &o.models, |path, m| {
            check_text(format!("{path}.paper_model"), &m.paper_model)?;
            check_text(format!("{path}.source"), &m.source)?;
            check_range(format!("{path}.reconfigure_ms"), m.reconfigure_ms, 0.0, true)
        })?;

        let d = &self.on_demand;
        check_sources("on_demand", &d.sources, &["fleet_instances"])?;
        if d.fleet_instances == Some(0) {
            return Err(invalid("on_demand.fleet_instances", "must be >= 1 (or null for the trace's peak)"));
        }
        Ok(())
    }
}
