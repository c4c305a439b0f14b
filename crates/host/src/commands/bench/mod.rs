//! `parcae-host bench`: scores policies and reference baselines on traces under
//! the liveput cost model ([`parcae_sim`]).
//!
//! For every trace, every requested baseline and every policy produces one
//! decision per interval; [`parcae_sim::simulate`] turns each sequence into
//! expected samples, migrations, time lost and money. Policies run through the
//! same control loop as `replay` ([`crate::control::replay`]), sandbox and
//! fallbacks included.
//!
//! Baselines:
//! - `ideal`: not a decision sequence; the fastest layout that fits, every
//!   interval, with no overhead at all (an upper bound);
//! - `oracle`: the plan that maximises expected samples over the whole trace,
//!   knowing the future (the DP planner);
//! - `liveput-truth`: at each interval, plan the next H true intervals, apply
//!   the first step (receding horizon);
//! - `reactive`: the throughput-optimal layout for the instances alive now,
//!   reached by live migration;
//! - `reactive-restart`: the same decisions, but every availability change
//!   restarts the job from a checkpoint, as the Parcae artifact's reactive
//!   baseline (`parcae_sim::simulate_with` with
//!   [`parcae_sim::MigrationMode::RestartOnChange`]);
//! - `artifact`: the Parcae artifact's recorded decisions
//!   (`artifact:throughput-opt`, `artifact:liveput-truth`,
//!   `artifact:liveput-predict`) when the trace file carries them.
//!
//! Peers (`--peers`): the published systems modelled on the same profile with
//! their own overheads ([`parcae_sim::peers`]): `bamboo`, `varuna`, `oobleck`
//! and `on-demand` (a fixed fleet at the on-demand price, the cost
//! reference), with constants from `profiles/peer-constants.json` (embedded;
//! `--peer-constants` for another file).

mod intervals;
mod mixed;
mod peers;
mod plots;
mod score;
mod table;

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

pub use peers::{PEER_CONSTANTS, PeerArg, covers, load_peer_constants, parse_peer_constants};
pub use score::{Baseline, BenchSettings, PolicyEntry, Row, TraceBench, bench_trace};
pub use table::{LEGEND, records, table};

use intervals::IntervalsWriter;
use score::baseline_units;
use table::describe;

use crate::args::{NoticeArgs, ProfileArgs, SandboxArgs, TraceInput};
use crate::embedded::{self, DEFAULT_POLICY, P3_DEFAULT_MODEL, P3_PROFILE, P3_TRACE};
use crate::policies::load_policy;
use crate::progress;
use crate::record::{write_csv, write_json};
use parcae_sim::CadenceRule;

/// Arguments of `parcae-host bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Traces to score on (default: the Parcae paper's AWS p3 trace, embedded).
    /// Repeatable, or several after one `--trace`. `NAME=FILE[,profile=FILE][,spot=USD]
    /// [,on-demand=USD]` names each trace's instance type instead: the traces are then one
    /// mixed fleet (`--trace p3=P3.csv --trace g4dn=G4DN.csv,profile=g4dn.json`), each type
    /// with its own profile (default --profile) and prices.
    #[arg(long, num_args = 1.., value_name = "FILE")]
    pub trace: Vec<PathBuf>,
    #[command(flatten)]
    /// How to read the traces.
    pub input: TraceInput,
    /// Policy component to score (`.wasm` or `builtin:NAME`); repeatable
    /// (default: builtin:guarded-liveput).
    #[arg(long = "policy", value_name = "POLICY")]
    pub policies: Vec<String>,
    #[command(flatten)]
    /// Which model to plan for.
    pub profile: ProfileArgs,
    /// Intervals each plan covers (H): for the policies and liveput-truth.
    #[arg(long, default_value_t = 8)]
    pub horizon: u32,
    /// Baselines to score, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "LIST", default_values_t = Baseline::ALL)]
    pub baselines: Vec<Baseline>,
    /// Published systems to compare with, comma-separated (bamboo, varuna,
    /// oobleck, on-demand, all, or none), modelled on the same profile
    /// (default: all when the peer constants have figures for the model, else none).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "LIST")]
    pub peers: Vec<PeerArg>,
    /// The peers' constants (default: the embedded profiles/peer-constants.json).
    #[arg(long, value_name = "FILE")]
    pub peer_constants: Option<PathBuf>,
    /// Seeded draws of which instances are preempted, for the peers that
    /// depend on it (Bamboo).
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub peer_runs: u32,
    /// Write one JSON record per (trace, policy) to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write one CSV row per (trace, policy) to this file.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Write one CSV row per (trace, row, interval) to this file: the layout
    /// each row ran and the samples it earned, to find where two rows part.
    #[arg(long, value_name = "FILE")]
    pub intervals: Option<PathBuf>,
    /// Write one SVG plot per trace into this directory (created if missing;
    /// default: `plots/` when `bench` runs with no arguments, else none).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    #[command(flatten)]
    /// Budgets of each policy call.
    pub sandbox: SandboxArgs,
    #[command(flatten)]
    /// The preemption notice every row is scored under.
    pub notice: NoticeArgs,
    /// Which losses our rows' periodic checkpoint cadence follows: those seen
    /// so far, as `run` sets its own (the policy is told each interval's), or
    /// the whole trace's, one cadence that the first interval already knows
    /// (the earlier tables); a mixed fleet's from the union fleet's losses.
    #[arg(long, value_enum, default_value_t = CadenceArg::SeenSoFar)]
    pub cadence: CadenceArg,
}

/// `--cadence`: [`CadenceRule`] on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CadenceArg {
    /// The Young/Daly cadence of the losses seen up to each interval.
    SeenSoFar,
    /// The Young/Daly cadence of the whole trace's losses.
    WholeTrace,
}

impl From<CadenceArg> for CadenceRule {
    fn from(arg: CadenceArg) -> Self {
        match arg {
            CadenceArg::SeenSoFar => CadenceRule::SeenSoFar,
            CadenceArg::WholeTrace => CadenceRule::WholeTrace,
        }
    }
}

/// A file name for a trace's plot that no other trace of the run takes.
fn plot_name(bench: &TraceBench, model: &str, taken: &mut Vec<String>) -> String {
    let stem =
        bench.path.file_stem().map_or_else(|| "trace".to_string(), |s| s.to_string_lossy().into_owned());
    let clean = |s: &str| -> String {
        s.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect()
    };
    let base = format!("{}-{}", clean(&stem), clean(model));
    let mut name = format!("{base}.svg");
    let mut n = 2;
    while taken.contains(&name) {
        name = format!("{base}-{n}.svg");
        n += 1;
    }
    taken.push(name.clone());
    name
}

/// Where `bench` with no arguments writes its plots.
pub const TOUR_PLOT_DIR: &str = "plots";

impl BenchArgs {
    /// Whether nothing that picks what to compare was given: then `bench`
    /// compares the default policy with every baseline and peer on the paper's
    /// p3 trace and GPT-1.5B, writes plots to [`TOUR_PLOT_DIR`] and suggests
    /// what to try next.
    pub fn is_tour(&self) -> bool {
        self.trace.is_empty()
            && self.policies.is_empty()
            && self.profile.profile.is_none()
            && self.profile.model.is_none()
            && self.peers.is_empty()
            && self.plot.is_none()
            && self.json.is_none()
            && self.csv.is_none()
    }

    /// The policies to score: `--policy`, or the default.
    pub fn policy_specs(&self) -> Vec<String> {
        if self.policies.is_empty() { vec![DEFAULT_POLICY.to_string()] } else { self.policies.clone() }
    }

    /// The plot directory: `--plot`, or [`TOUR_PLOT_DIR`] with no arguments.
    pub fn plot_dir(&self) -> Option<PathBuf> {
        self.plot.clone().or_else(|| self.is_tour().then(|| PathBuf::from(TOUR_PLOT_DIR)))
    }
}

/// What to try after `bench` with no arguments.
pub const NEXT_STEPS: &str = "\
next:
  the paper's own policy against the default:
    parcae-host bench --policy builtin:guarded-liveput --policy builtin:arima-liveput
  another model or notice, or another trace (data/traces/ in the repository):
    parcae-host bench --model gpt-6.7b --notice-seconds 0
    parcae-host bench --trace data/traces/aws-g4dn/g4dn-events.csv
  write your own policy (rust, python or js), build it, score it:
    parcae-host policy new mine --lang rust && (cd mine && ./build.sh)
    parcae-host bench --policy mine/mine.wasm
  train for real with a policy file (a local cluster on loopback):
    parcae-host policy export arima-liveput -o arima_liveput.wasm && parcae-host --policy arima_liveput.wasm";

/// `parcae-host bench`.
pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let interval_ms = args.input.interval_ms()?;
    anyhow::ensure!(args.horizon >= 1, "--horizon must be at least 1");
    let tour = args.is_tour();
    let types = if args.trace.iter().any(|t| mixed::is_typed(t)) {
        mixed::load_types(&args.trace, &args.profile, &args.input, interval_ms)?
    } else {
        Vec::new()
    };
    let (profile, prices) = match types.first() {
        Some(first) => (first.profile.clone(), first.prices),
        None => args.profile.load_with_prices_or(P3_PROFILE, P3_DEFAULT_MODEL)?,
    };
    let constants = args.profile.constants()?;
    let mut baselines = args.baselines.clone();
    baselines.sort();
    baselines.dedup();
    let peer_constants = load_peer_constants(args.peer_constants.as_deref())?;
    let peers = if args.peers.is_empty() {
        if types.is_empty() && peers::covers(&peer_constants, &profile.model) {
            PeerArg::expand(&[PeerArg::All])
        } else {
            Vec::new()
        }
    } else {
        PeerArg::expand(&args.peers)
    };
    let settings = BenchSettings {
        peer_constants: (!peers.is_empty()).then_some(peer_constants),
        peers,
        peer_runs: args.peer_runs,
        snapshot_bytes_per_ms: constants.checkpoint_snapshot_bytes_per_ms(),
        cadence: args.cadence.into(),
        ..BenchSettings::new(interval_ms, args.horizon, baselines, prices)
    };
    let runtime = args.sandbox.runtime()?;
    let mut policies = Vec::new();
    for spec in args.policy_specs() {
        let component = load_policy(&runtime, &spec).with_context(|| format!("loading policy {spec}"))?;
        policies.push(PolicyEntry { spec, component });
    }
    let traces: Vec<Option<&PathBuf>> = if args.trace.is_empty() {
        vec![None]
    } else if !types.is_empty() {
        vec![Some(&args.trace[0])]
    } else {
        args.trace.iter().map(Some).collect()
    };
    let per_trace = baseline_units(&settings) + policies.len() as u64;
    let progress = progress::bar(per_trace * traces.len() as u64, "scoring");
    let plot_dir = args.plot_dir();
    if let Some(dir) = &plot_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut intervals = args.intervals.as_deref().map(IntervalsWriter::create).transpose()?;
    let mut all_records = Vec::new();
    let mut plot_names = Vec::new();
    progress.suspend(|| println!("{LEGEND}\n"));
    for path in traces {
        let (bench, notice) = if types.is_empty() {
            let trace = match path {
                Some(path) => args.input.load(path)?,
                None => embedded::trace_or(None, args.input.format, P3_TRACE)?,
            };
            let (recovery, notice) = args.notice.recovery_for(trace.source(), &constants)?;
            (bench_trace(&trace, &profile, &policies, &settings, recovery, &progress)?, notice)
        } else {
            // The notice of the first type's cloud (the types of one job share a cloud).
            let (recovery, notice) = args.notice.recovery_for(&types[0].offer.trace, &constants)?;
            (mixed::bench_mixed(&types, &policies, &settings, recovery, &progress)?, notice)
        };
        let mut text = format!(
            "{}; preemption notice {} s ({})\n\n{}\n",
            describe(&bench, &profile.model),
            notice.seconds,
            notice.source,
            table(&bench)
        );
        for note in &bench.notes {
            text.push_str(&format!("note: {note}\n"));
        }
        if let Some(dir) = &plot_dir {
            let file = dir.join(plot_name(&bench, &profile.model, &mut plot_names));
            std::fs::write(&file, plots::plot(&bench, &profile.model))
                .with_context(|| format!("writing {}", file.display()))?;
            text.push_str(&format!("plot: {}\n", file.display()));
        }
        if let Some(writer) = &mut intervals {
            writer.write(&bench, &profile.model)?;
        }
        progress.suspend(|| println!("{text}"));
        all_records.extend(records(&bench, &profile.model, &settings));
    }
    progress.finish_and_clear();
    if let Some(path) = &args.json {
        write_json(&all_records, path)?;
        println!("records written to {}", path.display());
    }
    if let Some(path) = &args.csv {
        write_csv(&all_records, path)?;
        println!("records written to {}", path.display());
    }
    if let Some(writer) = intervals {
        println!("intervals written to {}", writer.finish()?.display());
    }
    if tour {
        println!("{NEXT_STEPS}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded::DEMO_TRACE;
    use indicatif::ProgressBar;
    use parcae_policy_core::Recovery;
    use parcae_sim::Peer;
    use std::path::Path;

    #[test]
    fn peers_join_the_table_or_say_why_not() {
        let trace = parcae_traces::parse(Path::new(DEMO_TRACE.0), DEMO_TRACE.1.as_bytes(), None).unwrap();
        let profile_args = ProfileArgs { profile: None, model: None, cost_constants: None };
        let (profile, prices) = profile_args.load_with_prices().unwrap();
        let mut constants = load_peer_constants(None).unwrap();
        let settings = BenchSettings {
            peers: Peer::ALL.to_vec(),
            peer_constants: Some(constants.clone()),
            peer_runs: 4,
            ..BenchSettings::new(60_000, 8, vec![Baseline::Ideal], prices)
        };
        // The example model has no published peer figures: rows skipped, said so.
        let bench =
            bench_trace(&trace, &profile, &[], &settings, Recovery::UNANNOUNCED, &ProgressBar::hidden())
                .unwrap();
        let names: Vec<&str> = bench.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["ideal", "on-demand"]);
        assert!(
            bench
                .notes
                .iter()
                .any(|n| n.contains("bamboo: the peer constants have no entry for model `tiny-gpt`"))
        );
        // With figures for it, every peer has a row, and on-demand has no spot price.
        let bamboo = constants.bamboo.models["bert"].clone();
        let varuna = constants.varuna.models["bert"].clone();
        let oobleck = constants.oobleck.models["bert"].clone();
        constants.bamboo.models.insert("tiny-gpt".into(), bamboo);
        constants.varuna.models.insert("tiny-gpt".into(), varuna);
        constants.oobleck.models.insert("tiny-gpt".into(), oobleck);
        let settings = BenchSettings { peer_constants: Some(constants), ..settings };
        let bench =
            bench_trace(&trace, &profile, &[], &settings, Recovery::UNANNOUNCED, &ProgressBar::hidden())
                .unwrap();
        let names: Vec<&str> = bench.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["ideal", "bamboo", "bamboo-slow", "varuna", "oobleck", "on-demand"]);
        for row in &bench.rows {
            assert!(
                row.result.totals.samples <= bench.ideal_samples || row.name == "on-demand",
                "{}",
                row.name
            );
        }
        let text = table(&bench).to_string();
        let on_demand = text.lines().find(|l| l.starts_with("| on-demand")).unwrap();
        let cells: Vec<&str> = on_demand.split('|').map(str::trim).collect();
        // policy, samples, ..., $ spot (12th), $ on-demand, $/M spot, $/M on-demand.
        assert_eq!(cells[12], "-");
        assert_eq!(cells[14], "-");
        assert_ne!(cells[15], "-");
    }
}
