//! What the host carries inside its binary so it runs with nothing on disk: the
//! policy components, a small trace, and a small profile.

/// The reactive throughput-optimal policy, compiled to a component at build time.
pub const REACTIVE_POLICY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/policies/reactive.wasm"));

/// The Parcae paper's policy (ARIMA forecast + liveput optimizer), compiled at build time.
pub const ARIMA_LIVEPUT_POLICY: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/policies/arima_liveput.wasm"));

/// The paper's policy hedged against the preemptions its forecast does not
/// show (ARIMA forecast + churn estimate + hedged liveput), compiled at build time.
pub const ROBUST_LIVEPUT_POLICY: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/policies/robust_liveput.wasm"));

/// The policy used when none is given.
pub const DEFAULT_POLICY: &str = "builtin:robust-liveput";

/// Name of an embedded policy on the command line: `builtin:NAME`.
pub const BUILTIN_PREFIX: &str = "builtin:";

/// The embedded policies, by the name used after `builtin:`.
pub const BUILTIN_POLICIES: &[(&str, &[u8])] = &[
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
