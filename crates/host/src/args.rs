//! The argument groups several subcommands share, each with the loading it
//! implies: how to read a trace, how to replay one against local workers, the
//! sandbox's budgets, which policies decide, and which model profile to plan for.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use parcae_policy_core::{ModelProfile, Recovery};
use parcae_profile::{CostConstants, Profile};
use parcae_runtime::{PolicyRuntime, SandboxLimits};
use parcae_sim::Prices;

use crate::embedded::{self, DEFAULT_POLICY};
use crate::policies::PolicySet;

/// How a trace is replayed against local worker processes (`run`, `serve`): which trace,
/// how fast, how long, and how the cloud warns.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Trace to replay (default: the embedded demo trace).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Force the trace's format instead of detecting it.
    #[arg(long)]
    pub format: Option<parcae_traces::Format>,
    /// Wall-clock seconds each trace interval is replayed in.
    #[arg(long, default_value_t = 4.0)]
    pub wall_seconds_per_interval: f64,
    /// Length of one trace interval (the policy's control interval), seconds of trace time.
    #[arg(long, default_value_t = 60)]
    pub trace_interval_seconds: u64,
    /// Replay only the first N intervals of the trace (with `run --remote`: run N control
    /// intervals, as many as asked).
    #[arg(long)]
    pub intervals: Option<usize>,
    /// Preemption notice, seconds of trace time (scaled like the trace).
    #[arg(long, default_value_t = 30.0)]
    pub grace_seconds: f64,
    /// Trace nodes whose removal comes without notice (fault drills); repeatable.
    #[arg(long = "unannounced", value_name = "NODE")]
    pub unannounced: Vec<String>,
}

impl ReplayArgs {
    /// The trace (or the embedded demo) and how its time maps onto wall time.
    pub fn load(&self) -> anyhow::Result<(parcae_traces::Trace, crate::workers::TimeScale)> {
        anyhow::ensure!(
            self.wall_seconds_per_interval.is_finite() && self.wall_seconds_per_interval > 0.0,
            "--wall-seconds-per-interval {}: must be a number > 0",
            self.wall_seconds_per_interval
        );
        anyhow::ensure!(self.trace_interval_seconds > 0, "--trace-interval-seconds must be at least 1");
        anyhow::ensure!(
            self.grace_seconds.is_finite() && self.grace_seconds >= 0.0,
            "--grace-seconds {}: must be a number >= 0",
            self.grace_seconds
        );
        let trace = embedded::trace_or_demo(self.trace.as_deref(), self.format)?;
        let scale = crate::workers::TimeScale {
            trace_interval_ms: self.trace_interval_seconds * 1000,
            wall_interval: Duration::from_secs_f64(self.wall_seconds_per_interval),
        };
        Ok((trace, scale))
    }

    /// The preemption notice in wall time.
    pub fn grace(&self, scale: &crate::workers::TimeScale) -> Duration {
        scale.wall_len(Duration::from_secs_f64(self.grace_seconds))
    }

    /// The trace's path as given (or the embedded demo's).
    pub fn trace_path(&self) -> String {
        self.trace.as_ref().map_or(embedded::DEMO_TRACE.0.to_string(), |p| p.display().to_string())
    }
}

/// Where the local worker processes of `serve` and `profile-serving` start and how long
/// each may take to answer.
#[derive(Debug, Args)]
pub struct LocalWorkerArgs {
    /// Address the host listens on for workers.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: std::net::SocketAddr,
    /// The worker binary (default: `parcae-worker` next to this executable).
    #[arg(long)]
    pub worker_bin: Option<PathBuf>,
    /// Device the local workers compute on: cpu, cuda, or auto.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Seconds a worker may take to answer one command before it is counted lost.
    #[arg(long, default_value_t = 30.0)]
    pub command_timeout: f64,
}

impl LocalWorkerArgs {
    /// How long a worker may take to answer one command (errors on a bad number).
    pub fn command_timeout(&self) -> anyhow::Result<Duration> {
        anyhow::ensure!(
            self.command_timeout.is_finite() && self.command_timeout > 0.0,
            "--command-timeout {}: must be a number of seconds > 0",
            self.command_timeout
        );
        Ok(Duration::from_secs_f64(self.command_timeout))
    }
}

/// How to read a trace.
#[derive(Debug, Args)]
pub struct TraceInput {
    /// Force the input format instead of detecting it (events-csv, counts-csv,
    /// segments-jsonl, decisions-json, ticks-json, timestamped-counts).
    #[arg(long)]
    pub format: Option<parcae_traces::Format>,
    /// Length of one control interval, seconds.
    #[arg(long, default_value_t = 60)]
    pub interval_seconds: u64,
}

impl TraceInput {
    /// Reads the trace at `path` in the forced or detected format.
    pub fn load(&self, path: &Path) -> anyhow::Result<parcae_traces::Trace> {
        Ok(embedded::trace_or_demo(Some(path), self.format)?)
    }

    /// Reads the trace at `path`, or the embedded demo trace when none is given.
    pub fn load_or_demo(&self, path: Option<&Path>) -> anyhow::Result<parcae_traces::Trace> {
        Ok(embedded::trace_or_demo(path, self.format)?)
    }

    /// The control interval, ms (errors on zero).
    pub fn interval_ms(&self) -> anyhow::Result<u64> {
        anyhow::ensure!(self.interval_seconds > 0, "--interval-seconds must be at least 1");
        Ok(self.interval_seconds * 1000)
    }
}

/// Budgets each policy call runs under.
#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// Fuel (about one unit per Wasm instruction) one policy call may use.
    #[arg(long, default_value_t = SandboxLimits::default().fuel_per_call)]
    pub fuel: u64,
    /// Wall-clock limit of one policy call, milliseconds.
    #[arg(long, default_value_t = SandboxLimits::default().deadline_per_call.as_millis() as u64)]
    pub deadline_ms: u64,
    /// Memory one policy may hold, MiB.
    #[arg(long, default_value_t = SandboxLimits::default().memory_bytes >> 20)]
    pub memory_mib: usize,
    /// Where compiled policy components (1 MiB or more: Python, JavaScript)
    /// are kept between runs, or `off` (default: $PARCAE_CACHE_DIR, else
    /// $XDG_CACHE_HOME/parcae/components, else ~/.cache/parcae/components).
    #[arg(long, value_name = "DIR|off")]
    pub compile_cache: Option<PathBuf>,
}

impl SandboxArgs {
    /// The policy runtime enforcing these budgets, with the compile cache of
    /// `--compile-cache`, else [`compile_cache_dir`].
    pub fn runtime(&self) -> anyhow::Result<PolicyRuntime> {
        let runtime = PolicyRuntime::new(SandboxLimits {
            fuel_per_call: self.fuel,
            deadline_per_call: Duration::from_millis(self.deadline_ms),
            memory_bytes: self.memory_mib << 20,
            ..SandboxLimits::default()
        })?;
        let cache = match &self.compile_cache {
            Some(dir) if dir.as_os_str() == "off" => None,
            Some(dir) => Some(dir.clone()),
            None => compile_cache_dir(),
        };
        Ok(match cache {
            Some(dir) => runtime.with_compile_cache(dir),
            None => runtime,
        })
    }
}

/// Environment variable naming the compile cache directory (empty: no cache).
pub const CACHE_DIR_ENV: &str = "PARCAE_CACHE_DIR";

/// Where compiled policy components are kept between runs: `$PARCAE_CACHE_DIR`
/// (set but empty: nowhere), else `$XDG_CACHE_HOME/parcae/components`, else
/// `$HOME/.cache/parcae/components`.
pub fn compile_cache_dir() -> Option<PathBuf> {
    let non_empty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(value) = std::env::var_os(CACHE_DIR_ENV) {
        return (!value.is_empty()).then(|| PathBuf::from(value));
    }
    non_empty("XDG_CACHE_HOME")
        .or_else(|| non_empty("HOME").map(|home| home.join(".cache")))
        .map(|cache| cache.join("parcae").join("components"))
}

/// Which policy components decide.
#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// Policy component serving every interface it exports (`.wasm` or
    /// `builtin:NAME`; default: builtin:guarded-liveput).
    #[arg(long)]
    pub policy: Option<String>,
    /// Predictor component (overrides --policy's predictor).
    #[arg(long)]
    pub predictor: Option<String>,
    /// Optimizer component (overrides --policy's optimizer).
    #[arg(long)]
    pub optimizer: Option<String>,
}

impl PolicyArgs {
    /// The policy argument in effect (`--policy` or the default).
    pub fn policy_spec(&self) -> &str {
        self.policy.as_deref().unwrap_or(DEFAULT_POLICY)
    }

    /// Loads the components once (see [`PolicySet::guarded`] for instances).
    pub fn load(&self, runtime: &PolicyRuntime) -> anyhow::Result<PolicySet> {
        PolicySet::load(
            runtime,
            Some(self.policy_spec()),
            self.predictor.as_deref(),
            self.optimizer.as_deref(),
        )
    }

    /// Loads the components into one guarded policy.
    pub fn guarded(&self, runtime: &PolicyRuntime) -> anyhow::Result<parcae_runtime::GuardedPolicy> {
        Ok(self.load(runtime)?.guarded())
    }
}

/// Which model and cost profile to plan for.
#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// Profile file (default: the embedded example profile; for `bench`, the
    /// embedded p3 V100 profile of the Parcae paper).
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Model in the profile (default: the profile's first model; for `bench`
    /// on its default profile, gpt-1.5b).
    #[arg(long)]
    pub model: Option<String>,
    /// Cost-model constants file (default: the embedded one).
    #[arg(long)]
    pub cost_constants: Option<PathBuf>,
}

impl ProfileArgs {
    /// The profile file as measured (`--profile` or the embedded example).
    pub fn raw(&self) -> anyhow::Result<Profile> {
        Ok(embedded::profile_or_example(self.profile.as_deref())?)
    }

    /// The policy-level profile of the chosen model.
    pub fn load(&self) -> anyhow::Result<ModelProfile> {
        Ok(self.load_with_prices()?.0)
    }

    /// The cost-model constants (`--cost-constants` or the embedded file).
    pub fn constants(&self) -> anyhow::Result<CostConstants> {
        Ok(embedded::constants_or_embedded(self.cost_constants.as_deref())?)
    }

    /// The policy-level profile of the chosen model and the instance prices.
    pub fn load_with_prices(&self) -> anyhow::Result<(ModelProfile, Prices)> {
        self.load_with_prices_from(self.raw()?, None)
    }

    /// As [`ProfileArgs::load_with_prices`], with the embedded `fallback`
    /// profile (name, JSON) and its `fallback_model` when `--profile` is not given.
    pub fn load_with_prices_or(
        &self,
        fallback: (&str, &str),
        fallback_model: &str,
    ) -> anyhow::Result<(ModelProfile, Prices)> {
        match &self.profile {
            Some(_) => self.load_with_prices(),
            None => self.load_with_prices_from(embedded::profile_or(None, fallback)?, Some(fallback_model)),
        }
    }

    fn load_with_prices_from(
        &self,
        profile: Profile,
        default_model: Option<&str>,
    ) -> anyhow::Result<(ModelProfile, Prices)> {
        let constants = self.constants()?;
        let model = match self.model.as_deref().or(default_model) {
            Some(model) => model.to_string(),
            None => profile
                .model_names()
                .first()
                .map(|m| m.to_string())
                .with_context(|| format!("{}: has no models", profile.file().display()))?,
        };
        let prices = Prices {
            spot_usd_per_hour: profile.spot_usd_per_hour(),
            on_demand_usd_per_hour: profile.on_demand_usd_per_hour(),
        };
        Ok((profile.model_profile(&model, &constants)?, prices))
    }
}

/// The preemption notice the deployment gets, which decides how a stage that
/// loses every holder is recovered (evacuated, checkpointed in the notice, or
/// rolled back), for every row of a comparison alike.
#[derive(Debug, Args)]
pub struct NoticeArgs {
    /// Seconds of warning before a preemption (0: unannounced). Default: by
    /// the trace's cloud, read from its path (`aws`: 120, `gcp`/`google` or
    /// `azure`: 30), else 30, the shortest notice the three clouds give.
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub notice_seconds: Option<f64>,
}

/// A notice and where it came from, for the report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Notice {
    /// Seconds of warning.
    pub seconds: f64,
    /// Why this value: `--notice-seconds`, or the cloud the trace is from.
    pub source: &'static str,
}

impl NoticeArgs {
    /// The notice for `trace` (its path names the cloud when no
    /// `--notice-seconds` is given).
    pub fn notice_for(&self, trace: &Path) -> anyhow::Result<Notice> {
        if let Some(seconds) = self.notice_seconds {
            anyhow::ensure!(
                seconds.is_finite() && seconds >= 0.0,
                "--notice-seconds {seconds}: must be a finite number >= 0"
            );
            return Ok(Notice { seconds, source: "--notice-seconds" });
        }
        let path = trace.to_string_lossy().to_ascii_lowercase();
        let has = |word: &str| path.split(|c: char| !c.is_ascii_alphanumeric()).any(|part| part == word);
        Ok(if has("aws") {
            Notice { seconds: 120.0, source: "AWS spot (from the trace path)" }
        } else if has("gcp") || has("google") {
            Notice { seconds: 30.0, source: "GCP spot (from the trace path)" }
        } else if has("azure") {
            Notice { seconds: 30.0, source: "Azure spot (from the trace path)" }
        } else {
            Notice { seconds: 30.0, source: "cloud unknown: the shortest of AWS, GCP and Azure" }
        })
    }

    /// The recovery rules for `trace` under `constants` (the checkpoint write
    /// rate comes from the constants file).
    pub fn recovery_for(
        &self,
        trace: &Path,
        constants: &CostConstants,
    ) -> anyhow::Result<(Recovery, Notice)> {
        let notice = self.notice_for(trace)?;
        Ok((constants.recovery(notice.seconds * 1000.0)?, notice))
    }
}
