//! The published systems `bench --peers` compares with, and the constants
//! that model them (`data/profiles/peer-constants.json`, embedded).

use std::path::Path;

use anyhow::Context;
use clap::ValueEnum;
use parcae_sim::{Peer, PeerConstants};

pub use crate::embedded::PEER_CONSTANTS;

/// A peer system to compare with (`--peers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum PeerArg {
    /// Bamboo (NSDI'23): redundant computation of the successor's stage.
    Bamboo,
    /// Varuna (EuroSys'22): checkpoints, restart on every fleet change.
    Varuna,
    /// Oobleck (SOSP'23): pipeline templates, f + 1 replicas.
    Oobleck,
    /// A fixed on-demand fleet (the cost reference).
    OnDemand,
    /// All four.
    All,
    /// No peer (overrides the default).
    None,
}

impl PeerArg {
    /// The peers a list of arguments names, in report order, once each.
    pub fn expand(args: &[PeerArg]) -> Vec<Peer> {
        let mut peers: Vec<Peer> = args
            .iter()
            .flat_map(|a| match a {
                PeerArg::Bamboo => vec![Peer::Bamboo],
                PeerArg::Varuna => vec![Peer::Varuna],
                PeerArg::Oobleck => vec![Peer::Oobleck],
                PeerArg::OnDemand => vec![Peer::OnDemand],
                PeerArg::All => Peer::ALL.to_vec(),
                PeerArg::None => Vec::new(),
            })
            .collect();
        peers.sort();
        peers.dedup();
        peers
    }
}

/// Whether `constants` have figures for `model` for every modelled peer
/// (Bamboo, Varuna, Oobleck), which makes `all` `bench`'s default `--peers`.
pub fn covers(constants: &PeerConstants, model: &str) -> bool {
    constants.bamboo.models.contains_key(model)
        && constants.varuna.models.contains_key(model)
        && constants.oobleck.models.contains_key(model)
}

/// Parses and checks peer constants; errors name the file and the line or field.
pub fn parse_peer_constants(text: &str, file: &Path) -> anyhow::Result<PeerConstants> {
    let constants: PeerConstants = serde_json::from_str(text.strip_prefix('\u{feff}').unwrap_or(text))
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    constants.validate().map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    Ok(constants)
}

/// Loads peer constants from `path`, or the embedded ones.
pub fn load_peer_constants(path: Option<&Path>) -> anyhow::Result<PeerConstants> {
    match path {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            parse_peer_constants(&text, path)
        }
        None => parse_peer_constants(PEER_CONSTANTS.1, Path::new(PEER_CONSTANTS.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_peer_constants_are_valid_and_cover_the_paper_models() {
        let c = load_peer_constants(None).unwrap();
        for model in ["gpt-1.5b", "gpt-6.7b", "bert"] {
            assert!(c.bamboo.models.contains_key(model), "bamboo {model}");
            assert!(c.varuna.models.contains_key(model), "varuna {model}");
            assert!(c.oobleck.models.contains_key(model), "oobleck {model}");
        }
        // The restart times the issue quotes for Varuna.
        assert_eq!(c.varuna.models["bert"].restart_ms, 76_000.0);
        assert_eq!(c.varuna.models["gpt-1.5b"].restart_ms, 83_000.0);
        assert_eq!(c.varuna.models["gpt-6.7b"].restart_ms, 701_000.0);
    }

    #[test]
    fn bad_peer_constants_name_the_file_and_the_field() {
        let file = Path::new("mine.json");
        let good: serde_json::Value = serde_json::from_str(PEER_CONSTANTS.1).unwrap();

        let e = parse_peer_constants("{\"bamboo\": ", file).unwrap_err().to_string();
        assert!(e.starts_with("mine.json: ") && e.contains("line 1"), "{e}");

        let mut v = good.clone();
        v["varuna"]["models"]["bert"]["restart_sec"] = 3.into();
        let e = parse_peer_constants(&v.to_string(), file).unwrap_err().to_string();
        assert!(e.contains("unknown field `restart_sec`"), "{e}");

        let mut v = good.clone();
        v["bamboo"]["sources"].as_object_mut().unwrap().remove("fallback_slowdown");
        let e = parse_peer_constants(&v.to_string(), file).unwrap_err().to_string();
        assert!(e.starts_with("mine.json: bamboo.sources: no citation for `fallback_slowdown`"), "{e}");

        let mut v = good;
        v["oobleck"]["models"]["bert"]["reconfigure_ms"] = (-2.0).into();
        let e = parse_peer_constants(&v.to_string(), file).unwrap_err().to_string();
        assert!(e.starts_with("mine.json: oobleck.models.bert.reconfigure_ms: "), "{e}");
    }
}
