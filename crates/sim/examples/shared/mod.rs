//! What the examples that score the default against every baseline and
//! peer share: the project's constants, loaded from `data/profiles` (the
//! examples run from the workspace root) and checked, and the rows the
//! default is held against.

use std::path::Path;

use parcae_policy_core::{IntervalStats, ModelProfile, Recovery};
use parcae_profile::CostConstants;
use parcae_sim::peers::{self, PeerConstants};
use parcae_sim::{
    CadenceRule, Cadenced, MigrationMode, Peer, PeerSettings, Prices, SimResult, reactive, simulate_cadenced,
};

/// The cost model's constants and the peers' (every peer constant cited and
/// in range), from `data/profiles/cost-constants.json` and
/// `data/profiles/peer-constants.json`.
pub fn constants() -> (CostConstants, PeerConstants) {
    let constants = CostConstants::load(Path::new("data/profiles/cost-constants.json")).expect("constants");
    let text = std::fs::read_to_string("data/profiles/peer-constants.json")
        .expect("data/profiles/peer-constants.json");
    let peer_constants: PeerConstants = serde_json::from_str(&text).expect("peer constants parse");
    peer_constants.validate().expect("peer constants are valid");
    (constants, peer_constants)
}

/// Which losses our rows' checkpoint cadence follows, taken out of `args`:
/// `--cadence seen-so-far` (the default, as `bench`) or `--cadence
/// whole-trace`; exits with a message on any other value.
pub fn take_cadence(args: &mut Vec<String>) -> CadenceRule {
    let Some(i) = args.iter().position(|a| a == "--cadence") else {
        return CadenceRule::SeenSoFar;
    };
    let value = args.get(i + 1).cloned();
    let rule = match value.as_deref() {
        Some("seen-so-far") => CadenceRule::SeenSoFar,
        Some("whole-trace") => CadenceRule::WholeTrace,
        other => {
            eprintln!("--cadence: {other:?}: expected seen-so-far or whole-trace");
            std::process::exit(2);
        }
    };
    args.drain(i..i + 2);
    rule
}

/// Every row the default is held against, scored on `series` as `bench`
/// scores them: reactive with live migrations and with a restart on every
/// change (both on `system`, the profiles at our checkpoint cadence), and the
/// three peers, which model their own recovery on `profile` (Bamboo and
/// Oobleck taking `system`'s checkpoints; a peer that cannot run the model is
/// left out). `(row name, its simulation)`.
#[allow(clippy::too_many_arguments, reason = "the case's trace, profiles, deployment and prices")]
#[allow(dead_code, reason = "lookalike_draws holds the default against reactive alone")]
pub fn other_rows(
    system: &Cadenced,
    profile: &ModelProfile,
    series: &[IntervalStats],
    interval_ms: u64,
    prices: Prices,
    recovery: Recovery,
    notice_ms: f64,
    peer_constants: &PeerConstants,
) -> Vec<(String, SimResult)> {
    let decisions = reactive(system.base(), series);
    let run = |mode| {
        simulate_cadenced(system, series, interval_ms, &decisions, prices, mode, recovery)
            .expect("reactive's layouts are the profile's")
    };
    let mut rows = vec![
        ("reactive".to_string(), run(MigrationMode::Live)),
        ("reactive-restart".to_string(), run(MigrationMode::RestartOnChange)),
    ];
    // The peers that restart from checkpoints take the deployment's, as ours do.
    let settings = PeerSettings { interval_ms, prices, runs: 16, seed: 1, cadence: Some(system.clone()) };
    for peer in [Peer::Bamboo, Peer::Varuna, Peer::Oobleck] {
        if let Ok(run) = peers::run(peer, profile, series, peer_constants, &settings, notice_ms as u64) {
            rows.push((peer.as_str().to_string(), run.result));
        }
    }
    rows
}

/// The comma-separated list after `flag` in `args` (`None` without the flag);
/// exits with a message naming the flag on a value that does not parse.
#[allow(dead_code, reason = "the examples that take lists of seeds or notices use it")]
pub fn list_arg<T: std::str::FromStr>(args: &[String], flag: &str, what: &str) -> Option<Vec<T>> {
    let i = args.iter().position(|a| a == flag)?;
    let list = args.get(i + 1).unwrap_or_else(|| panic!("{flag} takes a comma-separated list of {what}"));
    Some(
        list.split(',')
            .map(|s| s.trim().parse().unwrap_or_else(|_| panic!("{flag}: {s:?}: expected {what}")))
            .collect(),
    )
}
