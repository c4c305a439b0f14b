//! Our peer rows against the figures the peers' own released simulators give
//! on the same traces (`data/peers/authors-simulators.json`, provenance in
//! `data/peers/PROVENANCE.md`): each peer as a percentage of its own
//! overhead-free throughput ([`peers::own_ideal_samples`]) must be within the
//! file's tolerance of the authors' figure, or of it plus a recorded, explained
//! difference.

use std::path::{Path, PathBuf};

use parcae_policy_core::ModelProfile;
use parcae_profile::{CostConstants, Profile};
use parcae_sim::peers::{self, BambooSpeed, Peer, PeerConstants, PeerSettings};
use parcae_sim::{CadenceRule, Cadenced, Prices};
use serde::Deserialize;

const T: u64 = 60_000;
const PRICES: Prices = Prices { spot_usd_per_hour: 0.918, on_demand_usd_per_hour: 3.06 };

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The data file's shape (only what the test reads; unknown fields refused).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Authors {
    #[allow(dead_code, reason = "provenance, for readers")]
    source: String,
    model: String,
    tolerance_points: f64,
    notice_ms: u64,
    traces: Vec<TraceEntry>,
    figures: Vec<Figure>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TraceEntry {
    name: String,
    path: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Figure {
    peer: String,
    trace: String,
    /// The authors' simulator: percent of its own ideal (a known bug set aside).
    authors_percent: f64,
    #[allow(dead_code, reason = "provenance, for readers")]
    as_released_percent: f64,
    #[allow(dead_code, reason = "provenance, for readers")]
    simulator: String,
    /// Expected ours-minus-theirs, points, when a known difference explains it.
    #[serde(default)]
    explained_difference: Option<Explained>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Explained {
    points: f64,
    reason: String,
    source: String,
}

fn authors() -> Authors {
    let path = root().join("data/peers/authors-simulators.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn constants() -> PeerConstants {
    let path = root().join("data/profiles/peer-constants.json");
    let c: PeerConstants = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    c.validate().unwrap();
    c
}

fn cost_constants() -> CostConstants {
    CostConstants::load(root().join("data/profiles/cost-constants.json")).unwrap()
}

fn profile(model: &str) -> ModelProfile {
    Profile::load(root().join("data/profiles/p3-v100-parcae.json"))
        .unwrap()
        .model_profile(model, &cost_constants())
        .unwrap()
}

/// Our row for `peer` as a percent of its own ideal (`bamboo-slow`: Bamboo
/// with the artifact's speed; `varuna-artifact-cadence`: Varuna checkpointing
/// as often, in samples, as the artifact's).
fn ours(peer: &str, profile: &ModelProfile, trace: &str, constants: &PeerConstants, notice_ms: u64) -> f64 {
    let trace = parcae_traces::load(&root().join(trace)).unwrap();
    let series = trace.series(T).unwrap();
    let s = &series.intervals;
    let (peer, constants) = match peer {
        "bamboo-slow" => (Peer::Bamboo, constants.with_bamboo_speed(BambooSpeed::OobleckArtifact)),
        "bamboo" => (Peer::Bamboo, constants.clone()),
        "varuna" => (Peer::Varuna, constants.clone()),
        // The artifact checkpoints every 10 iterations of 1024 samples: 80 of ours (128 samples).
        "varuna-artifact-cadence" => {
            let mut c = constants.clone();
            c.varuna.checkpoint_every_iterations = Some(80);
            (Peer::Varuna, c)
        }
        // The authors' simulator charges Oobleck's published re-instantiation
        // time, not our cost model's migration (the bench's default).
        "oobleck" => {
            let mut c = constants.clone();
            c.oobleck.reconfiguration = peers::OobleckReconfiguration::Published;
            (Peer::Oobleck, c)
        }
        other => panic!("authors-simulators.json: unknown peer `{other}`"),
    };
    // As `bench` runs them: Bamboo and Oobleck, which restart from a
    // checkpoint after losing a stage, take the deployment's checkpoints at
    // our rows' cadence (seen so far).
    let cost = cost_constants();
    let recovery = cost.recovery(notice_ms as f64).unwrap();
    let cadence = Cadenced::new(
        CadenceRule::SeenSoFar,
        profile,
        s,
        T,
        &recovery,
        cost.checkpoint_snapshot_bytes_per_ms(),
    );
    let settings = PeerSettings { cadence: Some(cadence), ..PeerSettings::new(T, PRICES) };
    let run = peers::run(peer, profile, s, &constants, &settings, notice_ms).unwrap();
    let ideal = peers::own_ideal_samples(peer, profile, s, &constants, T).unwrap();
    assert!(ideal > 0.0, "{peer}: no ideal throughput on {}", trace.source().display());
    100.0 * run.result.totals.samples / ideal
}

#[test]
fn our_peer_rows_match_the_authors_simulators() {
    let a = authors();
    let c = constants();
    let p = profile(&a.model);
    let mut failures = Vec::new();
    for f in &a.figures {
        let trace = a
            .traces
            .iter()
            .find(|t| t.name == f.trace)
            .unwrap_or_else(|| panic!("unknown trace {}", f.trace));
        let ours = ours(&f.peer, &p, &trace.path, &c, a.notice_ms);
        let expected = f.authors_percent + f.explained_difference.as_ref().map_or(0.0, |e| e.points);
        if let Some(e) = &f.explained_difference {
            assert!(
                !e.reason.trim().is_empty() && !e.source.trim().is_empty(),
                "{} {}: unexplained",
                f.peer,
                f.trace
            );
        }
        println!(
            "{:12} {:5} ours {ours:6.2} %  theirs {:6.2} %  difference {:+6.2}  expected {:+6.2}",
            f.peer,
            f.trace,
            f.authors_percent,
            ours - f.authors_percent,
            expected - f.authors_percent
        );
        if (ours - expected).abs() > a.tolerance_points {
            failures.push(format!("{} on {}: ours {ours:.2} %, expected {expected:.2} %", f.peer, f.trace));
        }
    }
    assert!(failures.is_empty(), "beyond {} points: {failures:#?}", a.tolerance_points);
}
