//! `parcae-host profile` measures the deployment with real worker processes: every layout
//! of a 2-worker fleet, the reconfigurations between them and a whole-fleet restart; the
//! profile and constants it writes load in `run`, whose summary then predicts the run.

use std::process::Command;

use parcae_e2e_cluster::{binaries, scratch};

fn path(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

fn succeed(command: &mut Command, what: &str) -> String {
    let output = command.output().unwrap_or_else(|e| panic!("starting {what}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{what} failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn a_measured_deployment_profile_loads_and_runs() {
    let (host, worker) = binaries();
    let dir = scratch("deployment-profile");
    let (profile, constants, report) =
        (dir.join("deployment.json"), dir.join("constants.json"), dir.join("report.json"));
    let stdout = succeed(
        Command::new(&host)
            .args(["profile", "--instances", "2", "--seconds-per-layout", "2"])
            .args(["--worker-bin", path(&worker), "--work-dir", path(&dir.join("work"))])
            .args(["--out", path(&profile), "--constants-out", path(&constants), "--json", path(&report)]),
        "parcae-host profile",
    );
    assert!(stdout.contains("held-out"), "{stdout}");
    let read = |p: &std::path::Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
    };
    let report = read(&report);
    let layouts: Vec<(u64, u64)> = report["layouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["dp"].as_u64().unwrap(), l["pp"].as_u64().unwrap()))
        .collect();
    assert_eq!(layouts, [(1, 1), (1, 2), (2, 1)], "{report}");
    assert!(report["layouts"].as_array().unwrap().iter().all(|l| l["steps"].as_u64() > Some(2)), "{report}");
    let moves = report["reconfigurations"].as_array().unwrap();
    assert!(moves.len() >= 2, "{report}");
    // The churn phase: a fresh process took the state of a holder under notice.
    assert!(
        moves
            .iter()
            .any(|r| r["fresh"] == true
                && r["survivors"].as_array().unwrap().iter().any(|s| s.as_u64() < Some(2))),
        "{report}"
    );
    assert!(report["transfer_scale"].as_f64() > Some(0.0), "{report}");
    assert!(
        report["restarts"].as_u64() >= Some(2),
        "the first start and the restart after the wipe: {report}"
    );
    let file = read(&profile);
    let entry = &file["models"]["worker-gpt"];
    assert_eq!(entry["throughput"].as_array().unwrap().len(), 3, "{file}");
    assert!(file["source"].as_str().unwrap().contains("MEASURED DEPLOYMENT"), "{file}");
    assert!(read(&constants)["comm_rebuild"]["models"]["worker-gpt"].is_object());

    // The files drive a run, which predicts itself with them.
    let run_dir = dir.join("run");
    succeed(
        Command::new(&host)
            .args(["run", "--worker-bin", path(&worker), "--run-dir", path(&run_dir)])
            .args([
                "--profile",
                path(&profile),
                "--cost-constants",
                path(&constants),
                "--model",
                "worker-gpt",
            ])
            .args(["--intervals", "3", "--wall-seconds-per-interval", "2"]),
        "parcae-host run with the measured profile",
    );
    let log = read(&run_dir.join("events.json"));
    assert_eq!(log["summary"]["simulated"]["model"], "worker-gpt", "{}", log["summary"]);
    let _ = std::fs::remove_dir_all(&dir);
}
