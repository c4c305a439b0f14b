//! The host dies: `parcae-host run` is SIGKILLed mid-run, its workers notice that their host
//! is gone and exit within a bounded time, and `parcae-host run --resume RUN_DIR` goes on
//! from the newest complete checkpoint, at the trace position the dead host had reached
//! (the trace's later allocation and preemption still happen). The final parameters equal an
//! uninterrupted run's over the same samples; the test prints the committed steps the kill
//! cost.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use parcae_e2e_cluster::{binaries, max_diff_from_uninterrupted, scratch, test_profile};

/// Four workers, a fifth at 4 minutes and a preemption (with notice) at 4.5 minutes: with 4 s
/// per minute the host is killed well before either (a few seconds in), so both belong to
/// the resumed run.
const TRACE: &str = "t_ms,op,node
0,add,n1
0,add,n2
0,add,n3
0,add,n4
240000,add,n5
270000,remove,n2
";

/// Worker processes (alive, not zombies) whose command line names `needle`.
fn workers_naming(needle: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains("parcae-worker") && cmdline.contains(needle) && alive(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// Whether `pid` runs (an exited child nobody reaped yet is a zombie: not running).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()))
        .is_some_and(|state| state != 'Z' && state != 'X')
}

fn job_state(run_dir: &Path) -> Option<serde_json::Value> {
    serde_json::from_slice(&std::fs::read(run_dir.join("job.json")).ok()?).ok()
}

#[test]
fn a_killed_host_resumes_from_its_last_checkpoint_and_ends_with_the_uninterrupted_parameters() {
    let dir = scratch("resume");
    let (host_bin, worker_bin) = binaries();
    let trace = dir.join("trace.csv");
    std::fs::write(&trace, TRACE).unwrap();
    let profile = test_profile(&dir);
    let run_dir = dir.join("run");
    let mut host = Command::new(&host_bin)
        .arg("run")
        .args(["--worker-bin", worker_bin.to_str().unwrap()])
        .args(["--trace", trace.to_str().unwrap(), "--profile", profile.to_str().unwrap()])
        .args(["--policy", "builtin:reactive", "--run-dir", run_dir.to_str().unwrap()])
        .args(["--wall-seconds-per-interval", "4", "--intervals", "5", "--checkpoint-every", "5"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("host-1.log")).unwrap())
        .spawn()
        .expect("starting parcae-host");

    // Kill it once it has trained past a checkpoint, before the trace's later events.
    let deadline = Instant::now() + Duration::from_secs(180);
    let killed_at = loop {
        let state = job_state(&run_dir);
        let progress = state.as_ref().map(|s| &s["progress"]);
        let step = progress.and_then(|p| p["step"].as_u64()).unwrap_or(0);
        let checkpoint = progress.and_then(|p| p["checkpoint"]["step"].as_u64()).unwrap_or(0);
        if checkpoint >= 5 && step > checkpoint {
            host.kill().unwrap(); // SIGKILL
            host.wait().unwrap();
            break progress.unwrap().clone();
        }
        let log = std::fs::read_to_string(dir.join("host-1.log")).unwrap_or_default();
        assert!(host.try_wait().unwrap().is_none(), "the host exited before it was killed\n{log}");
        assert!(Instant::now() < deadline, "no checkpoint within 180 s\n{log}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let clock_s = killed_at["clock_ms"].as_f64().unwrap() / 1000.0;
    assert!(clock_s < 16.0, "killed at {clock_s} s, after the trace's allocation at 16 s");

    // Its workers must not linger: they exit once their host is gone.
    let orphans = workers_naming(run_dir.to_str().unwrap());
    assert!(!orphans.is_empty(), "no worker processes of the killed host found");
    let gone = Instant::now();
    while orphans.iter().any(|&pid| alive(pid)) {
        assert!(gone.elapsed() < Duration::from_secs(90), "workers {orphans:?} outlived their host by 90 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "{} workers of the killed host exited {:.1} s after it died",
        orphans.len(),
        gone.elapsed().as_secs_f64()
    );

    let output = Command::new(&host_bin)
        .args(["run", "--resume", run_dir.to_str().unwrap()])
        .args(["--worker-bin", worker_bin.to_str().unwrap()])
        .output()
        .expect("resuming parcae-host");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the resumed run failed\n{stdout}\n{stderr}");
    println!("{stdout}");

    let log: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("events.json")).unwrap()).unwrap();
    let events = log["events"].as_array().unwrap();
    let at = events.iter().position(|e| e["event"] == "resumed").expect("a resumed event");
    let resumed = &events[at];
    let lost = resumed["lost_steps"].as_u64().unwrap();
    assert_eq!(resumed["last_committed_step"], killed_at["step"], "{resumed}");
    assert_eq!(resumed["from_step"].as_u64().unwrap() + lost, killed_at["step"].as_u64().unwrap());
    assert!(resumed["from_step"].as_u64().unwrap() >= 5, "not resumed from a checkpoint: {resumed}");
    assert!(events[..at].iter().any(|e| e["event"] == "step"), "the dead host's events are kept");
    // The trace went on from where it was: n5 joins and n2 is preempted after the resume.
    let after = &events[at..];
    assert!(after.iter().any(|e| e["event"] == "allocated" && e["node"] == "n5"), "n5 never allocated");
    assert!(after.iter().any(|e| e["event"] == "notice" && e["node"] == "n2"), "n2 never preempted");
    // It restarts from the checkpoint as soon as its workers are in, not only once the
    // trace changes the fleet (n5 at 16 s): a resumed host once waited for that change.
    let restart = after
        .iter()
        .find(|e| e["event"] == "reconfigured" && e["kind"] == "restart")
        .unwrap_or_else(|| panic!("no restart after the resume"));
    let first_allocation = after.iter().find(|e| e["event"] == "allocated").expect("workers allocated");
    let restart_s = restart["t_s"].as_f64().unwrap();
    assert!(restart_s < 16.0, "restarted at {restart_s} s, only when the fleet changed: {restart}");
    println!(
        "resumed host: restart from the checkpoint {:.2} s after its first worker was allocated",
        restart_s - first_allocation["t_s"].as_f64().unwrap()
    );
    let summary = &log["summary"];
    assert_eq!(summary["resumes"], 1, "{summary}");
    assert_eq!(summary["steps_lost_to_host_failures"], lost, "{summary}");
    let steps = summary["steps"].as_u64().unwrap();
    assert!(steps > killed_at["step"].as_u64().unwrap(), "no training after the resume: {summary}");
    let worst = max_diff_from_uninterrupted(summary, steps);
    println!(
        "killed at step {} (trace clock {clock_s:.1} s), resumed from step {}: {lost} committed steps lost; \
         {steps} steps, max |parameter difference| vs the uninterrupted run: {worst:e}",
        killed_at["step"], resumed["from_step"]
    );
    assert!(worst < 1e-3, "parameters diverged from the uninterrupted run by {worst}");
    let _ = std::fs::remove_dir_all(&dir);
}
