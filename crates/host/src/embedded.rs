//! What the host carries inside its binary so it runs with nothing on disk: the
//! policy components, the demo trace and example profile (`run`, `replay`),
//! the paper's p3 trace and profile (`bench`), the cost and peer constants,
//! and the one place that falls back to them when no file is given.

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

/// Hedged liveput (persistence forecast + churn estimate) under a regret
/// guard against the reactive baseline, both replayed under the cost model on
/// the fleet actually seen: the default.
pub const GUARDED_LIVEPUT_POLICY: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/policies/guarded_liveput.wasm"));

/// SpotServe's serving configuration optimizer (lowest latency that keeps up
/// with the arrivals), compiled at build time: a `serving-policy` component.
pub const SPOTSERVE_POLICY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/policies/spotserve.wasm"));

/// The cost-aware serving optimizer (fewest instances that meet the latency
/// objective), compiled at build time: a `serving-policy` component.
pub const COST_AWARE_SERVING_POLICY: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/policies/cost_aware_serving.wasm"));

/// The policy used when none is given.
pub const DEFAULT_POLICY: &str = "builtin:guarded-liveput";

/// Name of an embedded policy on the command line: `builtin:NAME`.
pub const BUILTIN_PREFIX: &str = "builtin:";

/// One policy component the binary carries.
#[derive(Debug, Clone, Copy)]
pub struct BuiltinPolicy {
    /// The name used after `builtin:`.
    pub name: &'static str,
    /// The component.
    pub bytes: &'static [u8],
    /// What it does, in one line (`policy list`).
    pub description: &'static str,
    /// A serving policy (world `serving-policy` of `parcae:serving`), not a training one.
    pub serving: bool,
}

/// The embedded policies, the default first, the training ones before the serving ones.
pub const BUILTIN_POLICIES: &[BuiltinPolicy] = &[
    BuiltinPolicy {
        name: "guarded-liveput",
        bytes: GUARDED_LIVEPUT_POLICY,
        description: "hedged liveput (persistence + churn) under a regret guard against the reactive baseline",
        serving: false,
    },
    BuiltinPolicy {
        name: "arima-liveput",
        bytes: ARIMA_LIVEPUT_POLICY,
        description: "the Parcae paper's policy: ARIMA(1,1,0) forecast + liveput dynamic program",
        serving: false,
    },
    BuiltinPolicy {
        name: "robust-liveput",
        bytes: ROBUST_LIVEPUT_POLICY,
        description: "the paper's policy hedged against the preemptions a flat forecast hides",
        serving: false,
    },
    BuiltinPolicy {
        name: "reactive",
        bytes: REACTIVE_POLICY,
        description: "throughput-optimal baseline: persistence forecast, fastest layout that fits now",
        serving: false,
    },
    BuiltinPolicy {
        name: "spotserve",
        bytes: SPOTSERVE_POLICY,
        description: "serving: SpotServe's optimizer, the lowest latency that keeps up with the arrivals",
        serving: true,
    },
    BuiltinPolicy {
        name: "cost-aware-serving",
        bytes: COST_AWARE_SERVING_POLICY,
        description: "serving: the fewest instances that meet the latency objective",
        serving: true,
    },
];

/// The embedded policy called `name`.
pub fn builtin_policy(name: &str) -> Option<&'static BuiltinPolicy> {
    BUILTIN_POLICIES.iter().find(|p| p.name == name)
}

/// The project's demo trace (8 instances, one hour), used when no trace is given.
pub const DEMO_TRACE: (&str, &str) =
    ("data/traces/demo-8node.csv", include_str!("../../../data/traces/demo-8node.csv"));

/// A calm 4-instance trace (two hours, a preemption every half hour or so, each soon
/// replaced): `bench-fidelity`'s second trace.
pub const CALM_TRACE: (&str, &str) =
    ("data/traces/calm-4node.csv", include_str!("../../../data/traces/calm-4node.csv"));

/// The Parcae paper's AWS p3 availability trace (up to 32 p3.2xlarge V100
/// instances over 11.4 h; `data/traces/PROVENANCE.md`): `bench`'s default trace.
pub const P3_TRACE: (&str, &str) =
    ("data/traces/aws-p3/p3-events.csv", include_str!("../../../data/traces/aws-p3/p3-events.csv"));

/// The Parcae artifact's p3.2xlarge (V100) profile of the paper's models
/// (`data/profiles/PROVENANCE.md`): `bench`'s default profile.
pub const P3_PROFILE: (&str, &str) =
    ("data/profiles/p3-v100-parcae.json", include_str!("../../../data/profiles/p3-v100-parcae.json"));

/// GPT-20B on g4dn.12xlarge (4 x T4) from the SpotServe artifact's published
/// per-layer times (`data/profiles/PROVENANCE.md`): `bench-serve`'s default
/// serving profile.
pub const SERVING_PROFILE: (&str, &str) = (
    "data/profiles/serving-gpt-20b-g4dn12xl-spotserve.json",
    include_str!("../../../data/profiles/serving-gpt-20b-g4dn12xl-spotserve.json"),
);

/// The built-in GPT served by `serve`'s deployment (local worker processes behind the HTTP
/// front end), measured here by `parcae-host profile-serving` (`data/profiles/PROVENANCE.md`):
/// `serve`'s default serving profile, the cost model its policy plans with and its
/// prediction replays.
pub const WORKER_SERVING_PROFILE: (&str, &str) = (
    "data/profiles/serving-worker-gpt-deployment-measured.json",
    include_str!("../../../data/profiles/serving-worker-gpt-deployment-measured.json"),
);

/// The model `bench` plans for by default on [`P3_PROFILE`].
pub const P3_DEFAULT_MODEL: &str = "gpt-1.5b";

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
    let trace = match (path, format) {
        (Some(path), Some(format)) => parcae_traces::load_as(path, format),
        (Some(path), None) => parcae_traces::load(path),
        (None, format) => parcae_traces::parse(Path::new(DEMO_TRACE.0), DEMO_TRACE.1.as_bytes(), format),
    }?;
    warn_if_seconds(&trace);
    Ok(trace)
}

/// Whether `trace` has events at more than one time, all within a minute.
fn spans_under_a_minute(trace: &Trace) -> bool {
    let first = trace.events().first().map(|e| e.t_ms);
    trace.events().iter().any(|e| Some(e.t_ms) != first) && trace.end_ms() < 60_000
}

/// Warns when a trace's events span less than a minute: every published trace
/// spans hours, and times in seconds read as milliseconds (the formats'
/// unit) shrink a day to under 90 s, which would then be scored as one or
/// two intervals without any error.
fn warn_if_seconds(trace: &Trace) {
    if spans_under_a_minute(trace) {
        tracing::warn!(
            trace = %trace.source().display(),
            span_ms = trace.end_ms(),
            "the trace's events span under a minute; its times are read as milliseconds (were they seconds? multiply them by 1000)"
        );
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
    profile_or(path, EXAMPLE_PROFILE)
}

/// The profile at `path`, or the embedded `fallback` (name, JSON) when no path is given.
pub fn profile_or(path: Option<&Path>, fallback: (&str, &str)) -> Result<Profile, ProfileError> {
    match path {
        Some(path) => Profile::load(path),
        None => Profile::from_json(fallback.1, fallback.0),
    }
}

/// The trace at `path` (in `format`, or detected), or the embedded `fallback`
/// (name, text) when no path is given.
pub fn trace_or(
    path: Option<&Path>,
    format: Option<Format>,
    fallback: (&str, &str),
) -> Result<Trace, TraceError> {
    match path {
        Some(_) => trace_or_demo(path, format),
        None => parcae_traces::parse(Path::new(fallback.0), fallback.1.as_bytes(), format),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A day in seconds read as milliseconds spans 86 s of events at most; the
    /// demo trace and a single instant are not flagged.
    #[test]
    fn times_in_seconds_are_flagged() {
        let parse = |text: &str| parcae_traces::parse(Path::new("t.csv"), text.as_bytes(), None).unwrap();
        assert!(spans_under_a_minute(&parse("0,add,a\n60,add,b\n3600,remove,a\n")));
        assert!(!spans_under_a_minute(&parse("0,add,a\n0,add,b\n")));
        assert!(!spans_under_a_minute(&trace_or_demo(None, None).unwrap()));
    }
}
