//! `parcae-host bench` end to end: the binary on the project's demo trace with
//! the example profile (table, JSON, CSV, SVG), determinism, a public p3
//! reference segment with the p3 profile (`data/`), and `bench` with no
//! arguments run outside the repository (everything it needs is embedded).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn shared() -> PathBuf {
    let dir = root().join("data");
    assert!(
        dir.join("profiles/p3-v100-parcae.json").exists(),
        "{}: these tests expect the `shared` folder beside the checkout",
        dir.display()
    );
    dir
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("bench-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `parcae-host bench ARGS` from the workspace root; returns stdout.
fn bench(args: &[&str]) -> String {
    bench_in(&root(), args)
}

/// Runs `parcae-host bench ARGS` from `dir`; returns stdout.
fn bench_in(dir: &Path, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_parcae-host"))
        .current_dir(dir)
        .arg("bench")
        .args(args)
        .output()
        .expect("running parcae-host");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "parcae-host bench {args:?} failed:\n{stdout}\n{stderr}");
    stdout
}

/// Runs `parcae-host trace synth ARGS` from the workspace root.
fn synth(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_parcae-host"))
        .current_dir(root())
        .args(["trace", "synth"])
        .args(args)
        .output()
        .expect("running parcae-host")
}

fn records(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str::<Vec<Value>>(&text).unwrap()
}

fn by_policy<'a>(records: &'a [Value], policy: &str) -> &'a Value {
    records.iter().find(|r| r["policy"] == policy).unwrap_or_else(|| panic!("no record for {policy}"))
}

fn samples(record: &Value) -> f64 {
    record["samples"].as_f64().unwrap()
}

/// The project's demo trace with the example profile.
const DEMO: [&str; 4] =
    ["--trace", "data/traces/demo-8node.csv", "--profile", "data/profiles/example-small.json"];

#[test]
fn demo_trace_table_json_csv_and_svg() {
    let dir = scratch("demo");
    let (json, csv, plots) = (dir.join("out.json"), dir.join("out.csv"), dir.join("plots"));
    let [json_arg, csv_arg, plots_arg] = [&json, &csv, &plots].map(|p| p.to_str().unwrap());
    let outputs = ["--policy", "builtin:reactive", "--json", json_arg, "--csv", csv_arg, "--plot", plots_arg];
    let stdout = bench(&[DEMO.as_slice(), &outputs].concat());
    // The table: one row per baseline and policy.
    assert!(stdout.contains("| policy"), "{stdout}");
    assert!(stdout.contains("% Oracle"), "{stdout}");
    for row in
        ["| ideal", "| oracle", "| liveput-truth", "| reactive", "| reactive-restart", "| builtin:reactive"]
    {
        assert!(stdout.contains(row), "missing row {row}:\n{stdout}");
    }
    assert!(stdout.contains("artifact: the trace file records no decisions"), "{stdout}");

    let records = records(&json);
    assert_eq!(records.len(), 6);
    // Restarting on every change never beats live migration of the same
    // layouts, except by the work live migration rolls back when a stage loses
    // every replica (the restart baseline checkpoints at each change).
    let restart = by_policy(&records, "reactive-restart");
    assert_eq!(restart["kind"], "baseline");
    let live = by_policy(&records, "reactive");
    let rolled_back = live["lost_samples"].as_f64().unwrap();
    assert!(samples(restart) <= samples(live) + rolled_back * (1.0 + 1e-12));
    let ideal = samples(by_policy(&records, "ideal"));
    let oracle = samples(by_policy(&records, "oracle"));
    assert!(oracle > 0.0 && oracle <= ideal);
    for r in &records {
        assert!(samples(r) <= ideal * (1.0 + 1e-12), "{} above ideal", r["policy"]);
        assert!(
            samples(r) <= oracle * (1.0 + 1e-12) || r["policy"] == "ideal",
            "{} above oracle",
            r["policy"]
        );
        assert_eq!(r["trace"], "demo-8node.csv");
        assert_eq!(r["model"], "tiny-gpt");
        // Every alive instance is paid, whatever the layout.
        assert_eq!(r["instance_hours"], records[0]["instance_hours"]);
    }
    // The sandboxed reactive policy decides exactly as the native baseline.
    let policy = by_policy(&records, "builtin:reactive");
    assert_eq!(policy["kind"], "policy");
    assert_eq!(samples(policy), samples(by_policy(&records, "reactive")));
    assert_eq!(policy["policy_faults"], 0);
    assert_eq!(policy["optimizer_guest_answers"], 60);
    // Fuel is counted per instruction, so the heaviest call is the same every run.
    let heaviest = policy["optimizer_heaviest_fuel"].as_u64().unwrap();
    assert!(heaviest > 0 && heaviest < policy["fuel_per_call"].as_u64().unwrap(), "{policy}");
    assert!(policy["predictor_heaviest_fuel"].as_u64().is_some_and(|f| f > 0), "{policy}");
    assert!(by_policy(&records, "reactive")["optimizer_heaviest_fuel"].is_null());
    let fuel_note = format!("of the fuel budget ({heaviest} of 2000000000 units, --fuel)");
    assert!(
        stdout.contains("builtin:reactive: its heaviest call (a plan) used ") && stdout.contains(&fuel_note),
        "{stdout}"
    );
    assert!(!stdout.contains("close to the budget"), "{stdout}");
    assert_eq!(by_policy(&records, "ideal")["pct_of_ideal"].as_f64().map(f64::round), Some(100.0));
    assert_eq!(by_policy(&records, "oracle")["pct_of_oracle"].as_f64().map(f64::round), Some(100.0));

    let csv_text = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = csv_text.lines().collect();
    assert_eq!(lines.len(), 7, "{csv_text}");
    assert!(lines[0].starts_with("trace,trace_path,model,policy,kind,"), "{}", lines[0]);
    assert!(lines[0].contains(",samples,") && lines[0].contains(",usd_per_million_samples_spot,"));

    let svg = std::fs::read_to_string(plots.join("demo-8node-tiny-gpt.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for text in ["(a) instances available", "(b) instances used", "(c) cumulative expected samples", "oracle"]
    {
        assert!(svg.contains(text), "the plot lacks {text}");
    }
}

#[test]
fn with_no_arguments_it_compares_the_default_with_every_baseline_and_peer_on_p3() {
    // Outside the repository: the trace, profile and constants are embedded.
    let dir = scratch("tour");
    let stdout = bench_in(&dir, &[]);
    assert!(
        stdout.contains("p3-events.csv (data/traces/aws-p3/p3-events.csv), model gpt-1.5b: 683 intervals"),
        "{stdout}"
    );
    assert!(stdout.contains("preemption notice 120 s (AWS spot"), "{stdout}");
    for row in [
        "| ideal",
        "| oracle",
        "| liveput-truth",
        "| reactive ",
        "| reactive-restart",
        "| bamboo ",
        "| bamboo-slow",
        "| varuna",
        "| oobleck",
        "| on-demand",
        "| builtin:guarded-liveput",
    ] {
        assert!(stdout.contains(row), "missing row {row}:\n{stdout}");
    }
    // Where the plot went, and what to try next.
    assert!(stdout.contains("plot: plots/p3-events-gpt-1.5b.svg"), "{stdout}");
    let svg = std::fs::read_to_string(dir.join("plots/p3-events-gpt-1.5b.svg")).unwrap();
    assert!(svg.contains("builtin:guarded-liveput") && svg.trim_end().ends_with("</svg>"));
    assert!(
        stdout.contains("next:") && stdout.contains("parcae-host policy new mine --lang rust"),
        "{stdout}"
    );
    // With any argument the hints and the default plot directory are gone.
    let stdout = bench_in(&dir, &["--baselines", "ideal", "--peers", "none", "--policy", "builtin:reactive"]);
    assert!(!stdout.contains("next:") && !stdout.contains("plot:"), "{stdout}");
    assert!(stdout.contains("| builtin:reactive") && !stdout.contains("| oobleck"), "{stdout}");
}

/// `--intervals`: every row of the table, interval by interval, adds up to
/// the row's total; a sandboxed policy that decides as a baseline shows the
/// same layouts; a file that cannot be created is named.
#[test]
fn the_intervals_file_has_every_row_interval_by_interval() {
    let dir = scratch("intervals");
    let (json, intervals) = (dir.join("out.json"), dir.join("intervals.csv"));
    let common =
        [DEMO.as_slice(), &["--policy", "builtin:reactive", "--policy", "builtin:guarded-liveput"]].concat();
    let stdout = bench(
        &[common.as_slice(), &["--json", json.to_str().unwrap(), "--intervals", intervals.to_str().unwrap()]]
            .concat(),
    );
    assert!(stdout.contains(&format!("intervals written to {}", intervals.display())), "{stdout}");
    let records = records(&json);
    let text = std::fs::read_to_string(&intervals).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some(
            "trace,model,policy,interval,start_s,instances,arrivals,preemptions,layout,samples,\
             cumulative_samples,lost_samples,migration_s,p_restart"
        )
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    // The demo trace is an hour of one-minute intervals.
    assert_eq!(rows.len(), records.len() * 60);
    let of = |policy: &str| rows.iter().filter(|r| r[2] == policy).collect::<Vec<_>>();
    for record in &records {
        let policy = record["policy"].as_str().unwrap();
        let mine = of(policy);
        assert_eq!(mine.len(), 60, "{policy}");
        let mut sum = 0.0;
        for (k, row) in mine.iter().enumerate() {
            assert_eq!((row[0], row[1], row[3]), ("demo-8node.csv", "tiny-gpt", k.to_string().as_str()));
            assert_eq!(row[4].parse::<f64>().unwrap(), 60.0 * k as f64);
            let layout = row[8];
            assert!(
                layout == "pause"
                    || layout
                        .split_once('x')
                        .is_some_and(|(d, p)| d.parse::<u32>().is_ok() && p.parse::<u32>().is_ok()),
                "{policy} interval {k}: layout {layout}"
            );
            sum += row[9].parse::<f64>().unwrap();
            assert_eq!(row[10].parse::<f64>().unwrap(), sum, "{policy} interval {k}");
        }
        let total = samples(record);
        assert!((sum - total).abs() <= 1e-9 * total.abs().max(1.0), "{policy}: {sum} against {total}");
    }
    let layouts = |policy: &str| of(policy).iter().map(|r| r[8]).collect::<Vec<_>>();
    assert_eq!(layouts("builtin:reactive"), layouts("reactive"));

    // A file in a folder that does not exist: the error names it.
    let missing = dir.join("no-such-folder").join("intervals.csv");
    let output = Command::new(env!("CARGO_BIN_EXE_parcae-host"))
        .current_dir(root())
        .arg("bench")
        .args(&common)
        .args(["--intervals", missing.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains(&format!("creating {}", missing.display())), "{stderr}");
}

#[test]
fn json_is_deterministic() {
    let dir = scratch("determinism");
    let run = |name: &str| {
        let path = dir.join(name);
        bench(&["--policy", "builtin:reactive", "--json", path.to_str().unwrap()]);
        std::fs::read(path).unwrap()
    };
    assert_eq!(run("a.json"), run("b.json"));
}

#[test]
fn p3_reference_segment_with_the_p3_profile() {
    let shared = shared();
    let dir = scratch("p3");
    let json = dir.join("out.json");
    let trace = shared.join("traces/aws-p3/parcae-reference/gpt-1.5b/trace_hh_55_65.txt");
    let profile = shared.join("profiles/p3-v100-parcae.json");
    let stdout = bench(&[
        "--trace",
        trace.to_str().unwrap(),
        "--profile",
        profile.to_str().unwrap(),
        "--model",
        "gpt-1.5b",
        "--policy",
        "builtin:reactive",
        "--baselines",
        "ideal,oracle,reactive,artifact",
        "--peers",
        "none",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(stdout.contains("| artifact:liveput-truth"), "{stdout}");
    let records = records(&json);
    assert_eq!(records.len(), 7);
    // DESIGN.md section 4: Ideal 143,547 samples per hour on this segment.
    let ideal = by_policy(&records, "ideal");
    assert!((ideal["samples_per_hour"].as_f64().unwrap() - 143_547.0).abs() < 1.0);
    // p3.2xlarge at $0.918 spot, $3.06 on demand.
    let hours = ideal["instance_hours"].as_f64().unwrap();
    assert!((ideal["usd_spot"].as_f64().unwrap() - 0.918 * hours).abs() < 1e-9);
    assert!((ideal["usd_on_demand"].as_f64().unwrap() - 3.06 * hours).abs() < 1e-9);
    let oracle = samples(by_policy(&records, "oracle"));
    for strategy in ["throughput-opt", "liveput-truth", "liveput-predict"] {
        let r = by_policy(&records, &format!("artifact:{strategy}"));
        assert_eq!(r["artifact_missing_intervals"], 0, "{strategy}");
        assert_eq!(r["artifact_does_not_fit"], 0, "{strategy}");
        assert!(samples(r) > 0.0 && samples(r) <= oracle * (1.0 + 1e-12), "{strategy}");
    }
    // The artifact's throughput-optimal choice is the same as ours here.
    assert_eq!(
        samples(by_policy(&records, "artifact:throughput-opt")),
        samples(by_policy(&records, "reactive"))
    );
}

#[test]
fn a_mixed_fleet_of_two_types_is_one_job_priced_per_type() {
    let data = shared();
    let dir = scratch("mixed");
    let json = dir.join("out.json");
    let trace = root().join("data/traces/demo-8node.csv");
    let fast = format!("p3={},spot=1", trace.display());
    let slow = format!(
        "g4dn={},spot=0.5,profile={}",
        trace.display(),
        data.join("profiles/g4dn-t4-derived.json").display()
    );
    // The two types, the reactive policy, the records in `json`, and `extra`.
    let mixed = |json: &Path, extra: &[&str]| {
        let mut args = vec!["--model", "gpt-1.5b", "--trace", &fast, "--trace", &slow];
        args.extend(["--policy", "builtin:reactive", "--json", json.to_str().unwrap()]);
        args.extend(extra);
        bench(&args)
    };
    let stdout = mixed(&json, &[]);
    assert!(stdout.contains("p3 + g4dn ("), "{stdout}");
    assert!(stdout.contains("note: mixed fleet of p3 + g4dn"), "{stdout}");
    let records = records(&json);
    let names: Vec<&str> = records.iter().map(|r| r["policy"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["ideal", "oracle", "liveput-truth", "reactive", "reactive-restart", "builtin:reactive"]
    );
    let (ideal, oracle) = (samples(by_policy(&records, "ideal")), samples(by_policy(&records, "oracle")));
    assert!(oracle > 0.0 && oracle <= ideal, "oracle {oracle}, ideal {ideal}");
    for r in &records {
        let name = r["policy"].as_str().unwrap();
        if name != "ideal" {
            assert!(samples(r) <= oracle * (1.0 + 1e-9), "{name}: {} above the oracle {oracle}", samples(r));
        }
        // Both types have the same counts: half the instance-hours at $1, half at $0.5.
        let (hours, usd) = (r["instance_hours"].as_f64().unwrap(), r["usd_spot"].as_f64().unwrap());
        assert!((usd - 0.75 * hours).abs() < 1e-9 * hours.max(1.0), "{name}: ${usd} for {hours} h");
    }
    // Unannounced, the union fleet checkpoints at the cadence of the losses seen so far
    // (the default) or the whole trace's; the notes say which, the rows differ, and under
    // either the Oracle is the best row.
    let oracle_at = |cadence: &str| {
        let json = dir.join(format!("{cadence}.json"));
        let stdout = mixed(&json, &["--notice-seconds", "0", "--cadence", cadence]);
        let rows = self::records(&json);
        let oracle = samples(by_policy(&rows, "oracle"));
        for r in rows.iter().filter(|r| r["policy"] != "ideal") {
            assert!(samples(r) <= oracle * (1.0 + 1e-9), "{cadence}: {} above the oracle", r["policy"]);
        }
        (stdout, oracle)
    };
    let (seen, seen_oracle) = oracle_at("seen-so-far");
    let (whole, whole_oracle) = oracle_at("whole-trace");
    assert!(
        seen.contains("note: union fleet: checkpoints") && seen.contains("of the losses seen so far"),
        "{seen}"
    );
    assert!(
        whole.contains("note: union fleet: checkpoints") && whole.contains("for the whole trace's"),
        "{whole}"
    );
    assert!(seen_oracle != whole_oracle, "the cadence changed nothing: {seen_oracle}");
    // Every trace names its type, or none does.
    let output = Command::new(env!("CARGO_BIN_EXE_parcae-host"))
        .current_dir(root())
        .args(["bench", "--model", "gpt-1.5b", "--trace", &fast, "--trace", trace.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("names every trace's instance type"), "{stderr}");
}

/// `--cadence`: by default every row checkpoints at the cadence of the
/// unannounced losses seen so far (`run`'s rule), `whole-trace` at the whole
/// trace's; the notes say which, the rows differ, and under either the Oracle
/// is the best row and a policy told each interval's profile scores as its
/// baseline does.
#[test]
fn the_checkpoint_cadence_follows_the_losses_seen_so_far_unless_told_otherwise() {
    let data = shared();
    let dir = scratch("cadence");
    let trace = data.join("traces/aws-g4dn/g4dn-events.csv");
    let run = |cadence: Option<&str>, name: &str| {
        let json = dir.join(name);
        let mut args = vec![
            "--trace",
            trace.to_str().unwrap(),
            "--model",
            "gpt-6.7b",
            "--notice-seconds",
            "0",
            "--policy",
            "builtin:reactive",
            "--baselines",
            "oracle,reactive",
            "--peers",
            "none",
            "--json",
            json.to_str().unwrap(),
        ];
        if let Some(cadence) = cadence {
            args.extend(["--cadence", cadence]);
        }
        let stdout = bench(&args);
        (stdout, records(&json))
    };
    let (seen_out, seen) = run(None, "seen.json");
    let (whole_out, whole) = run(Some("whole-trace"), "whole.json");
    assert!(seen_out.contains("at the Young/Daly cadence of the losses seen so far"), "{seen_out}");
    assert!(whole_out.contains("Young/Daly for the whole trace's"), "{whole_out}");
    for records in [&seen, &whole] {
        let (oracle, reactive) =
            (samples(by_policy(records, "oracle")), samples(by_policy(records, "reactive")));
        assert!(reactive <= oracle * (1.0 + 1e-12), "reactive {reactive} above the Oracle {oracle}");
        assert_eq!(samples(by_policy(records, "builtin:reactive")), reactive);
    }
    let reactive = |records: &[Value]| samples(by_policy(records, "reactive"));
    assert_ne!(reactive(&seen), reactive(&whole), "the cadence changed nothing");
}

/// `trace synth --lifetimes` writes a fleet of bounded instance lifetimes that
/// `bench` scores; a malformed or out-of-range spec is refused naming what is
/// wrong.
#[test]
fn a_bounded_lifetime_fleet_generates_and_benches() {
    let dir = scratch("lifetimes");
    let trace = dir.join("lifetimes.csv");
    let synth = |args: &[&str]| synth(&[&["--hours", "6", "--seed", "2"], args].concat());
    let made = synth(&["--lifetimes", "8:1-3:5", "-o", trace.to_str().unwrap()]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(text.starts_with("t_ms,op,node\n0,add,"), "{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("0,add,")).count(), 8, "every place filled at 0");
    assert!(text.contains(",remove,"), "lifetimes of 1-3 h over 6 h end some instances");
    let json = dir.join("out.json");
    bench(&[
        "--trace",
        trace.to_str().unwrap(),
        "--profile",
        "data/profiles/example-small.json",
        "--baselines",
        "oracle,reactive",
        "--peers",
        "none",
        "--policy",
        "builtin:reactive",
        "--json",
        json.to_str().unwrap(),
    ]);
    let records = records(&json);
    assert_eq!(
        by_policy(&records, "builtin:reactive")["samples"],
        by_policy(&records, "reactive")["samples"]
    );
    // A fleet that loses nothing in its hours still lasts them: the file
    // ends with an `end` row, and `bench` scores every interval.
    let calm = dir.join("calm.csv");
    let made = synth(&["--lifetimes", "8:7-8:5", "-o", calm.to_str().unwrap()]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let text = std::fs::read_to_string(&calm).unwrap();
    assert_eq!(text.lines().last(), Some("21600000,end,"), "{text}");
    let table = bench(&[
        "--trace",
        calm.to_str().unwrap(),
        "--profile",
        "data/profiles/example-small.json",
        "--baselines",
        "reactive",
        "--peers",
        "none",
        "--policy",
        "builtin:reactive",
    ]);
    assert!(table.contains("360 intervals of 60 s (6.00 h)"), "{table}");
    for (spec, expected) in [
        ("8:1-3", "expected PLACES:MIN_H-MAX_H:REFILL_MIN"),
        ("8:3-1:5", "max_hours = 1: must be at least min_hours"),
        ("0:1-3:5", "places = 0"),
        ("8:1-3:-5", "refill_minutes = -5"),
    ] {
        let refused = synth(&["--lifetimes", spec, "-o", dir.join("bad.csv").to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success() && stderr.contains(expected), "{spec}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Planning with the true future through a fleet whose every loss wipes a
/// stage (16 places of 0.5-1.5 h refilled after 2 minutes, GPT-6.7B on 16
/// stages, no notice): an interval that surely rolls back and trains nothing
/// once left its work at risk a rounding error below zero, and `bench` failed
/// planning liveput-truth (`at_risk = -2.8e-14: must be a finite number >= 0`).
#[test]
fn the_true_future_plans_through_a_fleet_where_every_loss_wipes_a_stage() {
    let dir = scratch("wipes-every-loss");
    let trace = dir.join("lifetimes.csv");
    let made =
        synth(&["--hours", "6", "--seed", "3", "--lifetimes", "16:0.5-1.5:2", "-o", trace.to_str().unwrap()]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let json = dir.join("out.json");
    bench(&[
        "--trace",
        trace.to_str().unwrap(),
        "--profile=data/profiles/p3-v100-parcae.json",
        "--model=gpt-6.7b",
        "--notice-seconds=0",
        "--baselines=oracle,liveput-truth",
        "--peers=none",
        "--policy=builtin:reactive",
        "--json",
        json.to_str().unwrap(),
    ]);
    let records = records(&json);
    let truth = samples(by_policy(&records, "liveput-truth"));
    let oracle = samples(by_policy(&records, "oracle"));
    assert!(truth > 0.0 && truth <= oracle, "liveput-truth {truth} samples, the Oracle {oracle}");
    let _ = std::fs::remove_dir_all(&dir);
}
