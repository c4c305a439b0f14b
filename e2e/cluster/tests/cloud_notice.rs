//! A real worker process reads a preemption notice from (an emulation of) its cloud's
//! metadata service and the host reconfigures around it, as it would for a notice of a
//! replayed trace: the path a run on real spot instances takes.
//!
//! The host runs in remote mode (`--remote`), three workers join it with the printed token
//! as they would from cloud instances; one watches an AWS IMDSv2 emulator on loopback. Once
//! training runs, the emulator announces a spot interruption; the host must move the job
//! onto the two other workers before the "cloud" kills the instance at the notice's
//! deadline, so nothing is rolled back and the final parameters equal an uninterrupted
//! run's. The test prints the time from the notice appearing to the host's reconfiguration.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use parcae_e2e_cluster::{binaries, max_diff_from_uninterrupted, scratch, test_profile};
use parcae_worker::cloud::CloudKind;
use parcae_worker::cloud::emulator::{EmulatedNotice, MetadataEmulator};

/// Kills a child process when dropped (a failed assertion must not leave processes behind).
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn unix_ms(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs_f64() * 1000.0
}

fn wait_for_line(path: &Path, needle: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if std::fs::read_to_string(path).is_ok_and(|log| log.contains(needle)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no `{needle}` in {} within {timeout:?}", path.display());
}

#[test]
fn a_notice_from_the_instance_metadata_service_makes_the_host_move_the_job_in_time() {
    let dir = scratch("cloud-notice");
    let (host_bin, worker_bin) = binaries();
    let profile = test_profile(&dir);
    let run_dir = dir.join("run");
    let mut host = Command::new(&host_bin)
        .arg("run")
        .args(["--remote", "--remote-workers", "3", "--listen", "127.0.0.1:0"])
        .args(["--profile", profile.to_str().unwrap(), "--policy", "builtin:reactive"])
        .args(["--intervals", "5", "--wall-seconds-per-interval", "4"])
        .args(["--run-dir", run_dir.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("host.log")).unwrap())
        .spawn()
        .expect("starting parcae-host");
    let stdout = host.stdout.take().unwrap();
    let mut host = Guard(host);
    let mut lines = BufReader::new(stdout).lines();
    let join = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("join with: parcae-worker ").map(str::to_string))
        .expect("the host printed no join command");
    let join: Vec<String> = join.split_whitespace().map(String::from).collect();
    // Keep draining the host's stdout so it never blocks on a full pipe.
    let printed = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>().join("\n"));

    let imds = MetadataEmulator::start(CloudKind::Aws).unwrap();
    let mut workers = Vec::new();
    for i in 1..=3 {
        let log = dir.join(format!("worker-{i}.log"));
        let mut command = Command::new(&worker_bin);
        command.args(&join).args(["--name", &format!("spot-{i}")]);
        if i == 3 {
            command.args([
                "--cloud",
                "aws",
                "--metadata-endpoint",
                &imds.endpoint,
                "--metadata-poll-ms",
                "200",
            ]);
        } else {
            command.args(["--cloud", "none"]);
        }
        let child = command
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(log.with_extension("err")).unwrap())
            .spawn()
            .expect("starting parcae-worker");
        workers.push((Guard(child), log.with_extension("err")));
    }
    // Training runs on all three (the watched worker took part in a reconfiguration and
    // the job trained a few steps), then the cloud announces the interruption.
    wait_for_line(&workers[2].1, "reconfigured", Duration::from_secs(120));
    std::thread::sleep(Duration::from_secs(3));
    let grace = Duration::from_secs(15);
    let announced = SystemTime::now();
    imds.announce(EmulatedNotice::Aws { action: "terminate".into(), time: announced + grace });
    // The cloud reclaims the instance at the deadline.
    std::thread::sleep(grace);
    let _ = workers[2].0.0.kill();

    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(status) = host.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the host did not finish");
        std::thread::sleep(Duration::from_millis(200));
    };
    let printed = printed.join().unwrap();
    let host_log = std::fs::read_to_string(dir.join("host.log")).unwrap_or_default();
    assert!(status.success(), "parcae-host failed\n{printed}\n{host_log}");
    println!("{printed}");

    let log: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("events.json")).unwrap()).unwrap();
    let started = log["started_unix_ms"].as_f64().expect("started_unix_ms");
    let events = log["events"].as_array().unwrap();
    let notice_at = events
        .iter()
        .position(|e| e["event"] == "notice")
        .unwrap_or_else(|| panic!("the host saw no notice\n{host_log}"));
    let notice = &events[notice_at];
    assert_eq!(notice["source"], "aws", "{notice}");
    assert!(notice["detail"].as_str().unwrap().contains("terminate"), "{notice}");
    let grace_ms = notice["grace_ms"].as_u64().unwrap();
    assert!(grace_ms > 0 && grace_ms <= grace.as_millis() as u64, "grace {grace_ms} ms");
    let reconfigured = events[notice_at..]
        .iter()
        .find(|e| e["event"] == "reconfigured")
        .unwrap_or_else(|| panic!("no reconfiguration after the notice: {events:?}"));
    let workers_after =
        reconfigured["data_parallel"].as_u64().unwrap() * reconfigured["pipeline_stages"].as_u64().unwrap();
    assert_eq!(workers_after, 2, "the job should run on the two workers that stay: {reconfigured}");

    let announced_ms = unix_ms(announced);
    let seen_by_host_ms = started + notice["t_s"].as_f64().unwrap() * 1000.0 - announced_ms;
    let reconfigured_ms = started + reconfigured["t_s"].as_f64().unwrap() * 1000.0 - announced_ms;
    println!(
        "notice appeared -> host's notice event: {seen_by_host_ms:.0} ms; -> reconfiguration done: \
         {reconfigured_ms:.0} ms (the move itself {:.0} ms, {})",
        reconfigured["millis"].as_f64().unwrap(),
        reconfigured["kind"],
    );
    assert!(
        reconfigured_ms < grace.as_millis() as f64,
        "the host moved the job {reconfigured_ms:.0} ms after the notice, past its {grace:?} deadline"
    );

    let summary = &log["summary"];
    assert_eq!(summary["unannounced_kills"], 0, "{summary}");
    assert_eq!(summary["rolled_back_steps_unannounced"], 0, "{summary}");
    assert_eq!(summary["rolled_back_steps_notice_too_short"], 0, "{summary}");
    let steps = summary["steps"].as_u64().unwrap();
    let worst = max_diff_from_uninterrupted(summary, steps);
    println!("{steps} steps; max |parameter difference| vs the uninterrupted run: {worst:e}");
    assert!(worst < 1e-3, "parameters diverged from the uninterrupted run by {worst}");
    drop(workers);
    let _ = std::fs::remove_dir_all(&dir);
}
