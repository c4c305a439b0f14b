//! `parcae-host policy list | export | new` end to end: the embedded policies
//! listed with their worlds, one exported and loaded back from its file, and
//! for each language a scaffolded project built with its own build script,
//! accepted by `policy check` and scored by a short `bench` (it is the
//! reactive baseline, so it scores exactly as the native one).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the workspace root")
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("policy-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `parcae-host ARGS` in `dir`, with a compile cache of this test
/// binary's (`check` compiles a Python or JavaScript component, `bench` reads
/// it back); returns stdout, or panics with both streams.
fn host_in(dir: &Path, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_parcae-host"))
        .current_dir(dir)
        .env("PARCAE_CACHE_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("policy-compile-cache"))
        .args(args)
        .output()
        .expect("running parcae-host");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "parcae-host {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn list_names_every_embedded_policy_with_its_world() {
    let stdout = host_in(&root(), &["policy", "list"]);
    let worlds = [
        ("guarded-liveput", " full-policy "),
        ("arima-liveput", " full-policy "),
        ("robust-liveput", " full-policy "),
        ("reactive", " full-policy "),
        ("spotserve", " serving-policy "),
        ("cost-aware-serving", " serving-policy "),
    ];
    for (name, world) in worlds {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("builtin:{name} ")))
            .unwrap_or_else(|| panic!("no line for {name}:\n{stdout}"));
        assert!(line.contains(world), "{line}");
    }
    assert_eq!(stdout.lines().filter(|l| l.starts_with("builtin:")).count(), 6, "{stdout}");
    assert!(stdout.lines().next().unwrap().ends_with("(default)"), "the default comes first:\n{stdout}");
}

/// A serving policy exports, checks as world `serving-policy` of
/// `parcae:serving`, and is refused by a training command naming the worlds
/// that command takes; the library's serving loader refuses a training policy.
#[test]
fn serving_policies_export_check_and_are_kept_apart_from_training() {
    let dir = scratch("serving");
    let stdout = host_in(&dir, &["policy", "export", "spotserve", "-o", "x.wasm"]);
    assert!(stdout.contains("wrote x.wasm"), "{stdout}");
    assert!(stdout.contains("next: parcae-host policy check x.wasm (a serving policy"), "{stdout}");
    let check = host_in(&dir, &["policy", "check", "x.wasm", "builtin:cost-aware-serving"]);
    assert!(check.contains("x.wasm: ok, implements world serving-policy of parcae:serving@0.1.0"), "{check}");
    assert!(
        check.contains(
            "builtin:cost-aware-serving: ok, implements world serving-policy of parcae:serving@0.1.0"
        ),
        "{check}"
    );
    assert!(check.contains("configurator: exported"), "{check}");
    assert!(check.contains("imports parcae:serving/log@0.1.0"), "{check}");
    assert!(!check.contains("predictor:"), "{check}");

    let output = Command::new(env!("CARGO_BIN_EXE_parcae-host"))
        .current_dir(&dir)
        .args(["replay", "--policy", "x.wasm"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("x.wasm implements world serving-policy of parcae:serving@0.1.0"), "{stderr}");
    assert!(
        stderr.contains("needs a training policy (world full-policy, predictor-policy or optimizer-policy"),
        "{stderr}"
    );

    let runtime = parcae_runtime::PolicyRuntime::new(parcae_runtime::SandboxLimits::default()).unwrap();
    let error = parcae_host::policies::load_serving("builtin:reactive", &runtime).err().expect("refused");
    let error = format!("{error:#}");
    assert!(
        error.contains("builtin:reactive implements world full-policy of parcae:policy@0.3.0"),
        "{error}"
    );
    assert!(
        error.contains("needs a serving policy (world serving-policy of parcae:serving@0.1.0)"),
        "{error}"
    );
    let mut spotserve = parcae_host::policies::load_serving("builtin:spotserve", &runtime).unwrap();
    assert_eq!(spotserve.name(), "builtin:spotserve");
    let request = parcae_serving_core::ServeRequest {
        instances: vec![2],
        arrival_rates: vec![1.0],
        latency_slo_ms: 60_000.0,
        interval_ms: 60_000,
        current: None,
        workload: parcae_serving_core::Workload { input_tokens: 512, output_tokens: 64 },
        profile: parcae_serving_core::toy_profile(),
    };
    let answer = spotserve.configure(&request);
    assert_eq!((answer.source, answer.fault), (parcae_runtime::Source::Guest, None));
    assert!(answer.value.configs[0].is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_exported_policy_loads_from_its_file() {
    let dir = scratch("export");
    let stdout = host_in(&dir, &["policy", "export", "arima-liveput"]);
    assert!(stdout.contains("wrote arima_liveput.wasm"), "{stdout}");
    assert!(stdout.contains("next: parcae-host --policy arima_liveput.wasm"), "{stdout}");
    let check = host_in(&dir, &["policy", "check", "arima_liveput.wasm"]);
    assert!(check.contains("arima_liveput.wasm: ok, implements world full-policy"), "{check}");
    // `-o` and the `builtin:` spelling; an unknown name says what exists.
    host_in(&dir, &["policy", "export", "builtin:reactive", "-o", "sub.wasm"]);
    assert!(std::fs::read(dir.join("sub.wasm")).unwrap().starts_with(b"\0asm"));
    let output = Command::new(env!("CARGO_BIN_EXE_parcae-host"))
        .current_dir(&dir)
        .args(["policy", "export", "nope"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no embedded policy 'nope'; embedded: guarded-liveput, arima-liveput"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `policy new mine-LANG --lang LANG`, its `build.sh` (with `env` added), then
/// `policy check` and a short `bench` on the demo trace; prints each phase's time.
fn scaffold_build_check_bench(lang: &str, env: &[(&str, String)]) {
    let dir = scratch(&format!("new-{lang}"));
    let name = format!("mine-{lang}");
    let started = Instant::now();
    let stdout = host_in(&dir, &["policy", "new", &name, "--lang", lang]);
    assert!(stdout.contains(&format!("next:\n  {name}/build.sh")), "{stdout}");
    let project = dir.join(&name);

    let built = Instant::now();
    let mut build = Command::new("bash");
    build.arg(project.join("build.sh")).current_dir(&dir);
    // The test's own cargo settings must not reach the nested guest build.
    parcae_wasm_build::without_outer_build(&mut build);
    build.envs(env.iter().map(|(k, v)| (k, v)));
    let output = build.output().expect("running build.sh");
    assert!(
        output.status.success(),
        "{name}/build.sh failed (run scripts/setup.sh first):\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let wasm = project.join(format!("{name}.wasm"));
    let wasm = wasm.to_str().unwrap();
    let build_s = built.elapsed().as_secs_f64();

    let checked = Instant::now();
    let check = host_in(&root(), &["policy", "check", wasm]);
    assert!(check.contains("ok, implements world full-policy of parcae:policy@0.3.0"), "{check}");
    assert!(check.contains("imports parcae:policy/log@0.3.0"), "{check}");
    let check_s = checked.elapsed().as_secs_f64();

    let benched = Instant::now();
    let json = dir.join("bench.json");
    let table = host_in(
        &root(),
        &[
            "bench",
            "--policy",
            wasm,
            "--trace",
            "data/traces/demo-8node.csv",
            "--profile",
            "data/profiles/example-small.json",
            "--baselines",
            "reactive",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let bench_s = benched.elapsed().as_secs_f64();
    let records: Vec<Value> = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let row = |policy: &str| {
        records.iter().find(|r| r["policy"] == policy).unwrap_or_else(|| panic!("no {policy} in\n{table}"))
    };
    let mine = row(&format!("{name}.wasm"));
    assert_eq!(mine["policy_faults"], 0, "{mine}");
    assert_eq!(mine["optimizer_guest_answers"], 60, "{mine}");
    assert_eq!(mine["predictor_guest_answers"], 60, "{mine}");
    // As generated, the policy is the reactive baseline.
    assert_eq!(mine["samples"], row("reactive")["samples"], "{table}");
    println!(
        "{lang}: new + build {build_s:.1} s, check {check_s:.1} s, bench {bench_s:.1} s, total {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_rust_scaffold_builds_checks_and_benches() {
    // One target directory for every run, under the workspace's: wit-bindgen compiles once.
    let target = root().join("target/scaffold-rust");
    scaffold_build_check_bench("rust", &[("CARGO_TARGET_DIR", target.display().to_string())]);
}

#[test]
fn a_python_scaffold_builds_checks_and_benches() {
    // As a user with componentize-py installed: the project venv's (scripts/setup.sh) on PATH.
    let venv = std::env::var("PARCAE_VENV").map_or_else(|_| root().join(".venv"), PathBuf::from);
    let path = std::env::var("PATH").unwrap_or_default();
    scaffold_build_check_bench("python", &[("PATH", format!("{}:{path}", venv.join("bin").display()))]);
}

#[test]
fn a_js_scaffold_builds_checks_and_benches() {
    // Its own `npm install` of the locked componentize-js, from npm's cache (scripts/setup.sh filled it).
    scaffold_build_check_bench("js", &[]);
}
