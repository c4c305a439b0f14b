//! `parcae-host replay`: the control loop replayed over a trace. At each
//! interval boundary the predictor forecasts, the optimizer plans and the
//! first step is recorded ([`crate::control::replay`]); this shows what a
//! policy decides and whether it stays healthy, while `bench` scores those
//! decisions against a cost model.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use parcae_policy_core::ParallelConfig;

use crate::args::{NoticeArgs, PolicyArgs, ProfileArgs, SandboxArgs, TraceInput};
use crate::control::{ControlSettings, replay};
use crate::record::layout_name;

/// Arguments of `parcae-host replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Trace to replay (default: the embedded demo trace).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// How to read the trace.
    #[command(flatten)]
    pub input: TraceInput,
    /// Which policies decide.
    #[command(flatten)]
    pub policies: PolicyArgs,
    /// Which model to plan for.
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Intervals each forecast and plan covers.
    #[arg(long, default_value_t = 8)]
    pub horizon: u32,
    /// Write every decision as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Budgets of each policy call.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// The preemption notice the policy plans with.
    #[command(flatten)]
    pub notice: NoticeArgs,
}

/// Runs `parcae-host replay`.
pub fn run(args: &ReplayArgs) -> anyhow::Result<()> {
    let trace = args.input.load_or_demo(args.trace.as_deref())?;
    let interval_ms = args.input.interval_ms()?;
    let series = trace.series(interval_ms)?;
    let profile = args.profile.load()?;
    anyhow::ensure!(args.horizon >= 1, "--horizon must be at least 1");
    let runtime = args.sandbox.runtime()?;
    let mut policy = args.policies.guarded(&runtime)?;
    let fleet_max = series.intervals.iter().map(|s| s.instances).max().unwrap_or(0);
    let (recovery, notice) = args.notice.recovery_for(trace.source(), &args.profile.constants()?)?;
    let settings = ControlSettings { interval_ms, horizon: args.horizon, fleet_max, recovery };
    println!("preemption notice {} s ({})", notice.seconds, notice.source);

    println!(
        "replaying {} ({} intervals of {} s) for model {} with predictor {} and optimizer {}",
        trace.name(),
        series.len(),
        interval_ms / 1000,
        profile.model,
        policy.predictor_name().unwrap_or("built-in persistence"),
        policy.optimizer_name().unwrap_or("built-in throughput-optimal"),
    );
    println!(
        "{:>8} {:>7} {:>4} {:>4} {:>4} {:>8} {:>7} {:>12}  answered by",
        "interval", "t(min)", "N", "+", "-", "forecast", "config", "exp.samples"
    );
    let mut previous: Option<Option<ParallelConfig>> = None;
    let decisions = replay(&series.intervals, &profile, &mut policy, &settings, |d| {
        // Print the intervals where something happened, not 60 identical rows.
        let changed = previous != Some(d.config) || d.arrivals > 0 || d.preemptions > 0 || d.fault.is_some();
        previous = Some(d.config);
        if changed {
            let config = layout_name(d.config);
            let answered = format!("{}/{}", d.predictor, d.optimizer);
            println!(
                "{:>8} {:>7.1} {:>4} {:>4} {:>4} {:>8} {:>7} {:>12.0}  {answered}",
                d.interval,
                d.start_ms as f64 / 60_000.0,
                d.instances,
                d.arrivals,
                d.preemptions,
                d.forecast_instances.map_or_else(|| "-".to_string(), |n| n.to_string()),
                config,
                d.expected_samples
            );
        }
    });
    let changes = decisions.windows(2).filter(|w| w[0].config != w[1].config).count();
    let expected: f64 = decisions.iter().map(|d| d.expected_samples).sum();
    println!(
        "{} decisions, {changes} configuration changes, {expected:.0} samples expected by the policy (before migration costs)",
        decisions.len()
    );
    println!("predictor: {}", policy.predictor_counts());
    println!("optimizer: {}", policy.optimizer_counts());
    if let Some(path) = &args.json {
        let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        serde_json::to_writer_pretty(std::io::BufWriter::new(file), &decisions)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("decisions written to {}", path.display());
    }
    Ok(())
}
