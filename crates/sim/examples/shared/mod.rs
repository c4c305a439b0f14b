//! What the examples that score the default against every baseline and
//! peer share: the project's constants, loaded from `data/profiles` (the
//! examples run from the workspace root) and checked.

use std::path::Path;

use parcae_profile::CostConstants;
use parcae_sim::peers::PeerConstants;

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
