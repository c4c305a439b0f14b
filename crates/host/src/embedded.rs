//! What the host carries inside its binary so it runs with nothing on disk: the
//! policy components, a small trace, and a small profile, and the one place
//! that falls back to them when no file is given.

use std::path::Path;

use parcae_profile::{CostConstants, Profile, ProfileError};
use parcae_traces::{Format, Trace, TraceError};

/// The reactive throughput-optimal policy, compiled to a component at build time.
pub const REACTIVE_POLICY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/policies/reactive.wasm"));

/// The Parcae paper's policy (ARIMA forecast + liveput optimizer), compiled at build time.
pub const ARIMA_LIVEPUT_POLICY: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/policies/arima_liveput.wasm"));

/// The paper's policy hedged against the preemptions its forecast does not
/// show (ARIMA forecast + churn estimate + hedged liveput), compiled at build time.
pub const ROBUST_LIVEPUT_POLICY: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/policies/robust_liveput.wasm"));

/// Robust liveput under a regret guard against the reactive baseline, both
/// replayed under the cost model on the fleet actually seen: the default.
pub const GUARDED_LIVEPUT_POLICY: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/policies/guarded_liveput.wasm"));

/// The policy used when none is given.
pub const DEFAULT_POLICY: &str = "builtin:guarded-liveput";

/// Name of an embedded policy on the command line: `builtin:NAME`.
pub const BUILTIN_PREFIX: &str = "builtin:";

/// The embedded policies, by the name used after `builtin:`.
pub const BUILTIN_POLICIES: &[(&str, &[u8])] = &[
    ("guarded-liveput", GUARDED_LIVEPUT_POLICY),
    ("arima-liveput", ARIMA_LIVEPUT_POLICY),
    ("robust-liveput", ROBUST_LIVEPUT_POLICY),
    ("reactive", REACTIVE_POLICY),
];

/// The embedded policy called `name`.
pub fn builtin_policy(name: &str) -> Option<&'static [u8]> {
    BUILTIN_POLICIES.iter().find(|(n, _)| *n == name).map(|(_, bytes)| *bytes)
}

/// The project's demo trace (8 instances, one hour), used when no trace is given.
pub const DEMO_TRACE: (&str, &str) =
    ("data/traces/demo-8node.csv", include_str!("../../../data/traces/demo-8node.csv"));

/// The project's example profile (an illustrative small GPT on 8 instances).
pub const EXAMPLE_PROFILE: (&str, &str) =
    ("data/profiles/example-small.json", include_str!("../../../data/profiles/example-small.json"));

/// The cost-model constants of the Parcae artifact (see profiles/README.md).
pub const COST_CONSTANTS: (&str, &str) =
    ("data/profiles/cost-constants.json", include_str!("../../../data/profiles/cost-constants.json"));

/// The peer constants of `bench --peers` (`data/profiles/peer-constants.json`).
pub const PEER_CONSTANTS: (&str, &str) =
    ("data/profiles/peer-constants.json", include_str!("../../../data/profiles/peer-constants.json"));

/// The trace at `path` (in `format`, or detected), or the demo trace when
/// no path is given.
pub fn trace_or_demo(path: Option<&Path>, format: Option<Format>) -> Result<Trace, TraceError> {
    match (path, format) {
        (Some(path), Some(format)) => parcae_traces::load_as(path, format),
        (Some(path), None) => parcae_traces::load(path),
        (None, format) => parcae_traces::parse(Path::new(DEMO_TRACE.0), DEMO_TRACE.1.as_bytes(), format),
    }
}

/// The constants file at `path`, or the embedded one when no path is given.
pub fn constants_or_embedded(path: Option<&Path>) -> Result<CostConstants, ProfileError> {
    match path {
        Some(path) => CostConstants::load(path),
        None => CostConstants::from_json(COST_CONSTANTS.1, COST_CONSTANTS.0),
    }
}

/// The profile at `path`, or the example profile when no path is given.
pub fn profile_or_example(path: Option<&Path>) -> Result<Profile, ProfileError> {
    match path {
        Some(path) => Profile::load(path),
        None => Profile::from_json(EXAMPLE_PROFILE.1, EXAMPLE_PROFILE.0),
    }
}
