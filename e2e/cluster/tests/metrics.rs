//! `parcae-host run --metrics-addr 127.0.0.1:0` with real workers: the host prints the
//! address it bound, a scraper reads `/metrics` over HTTP while the run lasts, and the
//! values move (steps, samples, a migration when a worker joins, a checkpoint). The same
//! run logs as JSON lines (`--log-format json`) to files: the host's stderr and every
//! worker's log hold one JSON object per line and no ANSI escapes.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use parcae_e2e_cluster::{binaries, scratch, test_profile};

/// Three workers from the start ((1,3) with the test profile), a fourth after one
/// interval ((2,2): a repartition that moves state).
const TRACE: &str = "t_ms,op,node
0,add,n1
0,add,n2
0,add,n3
60000,add,n4
";

/// One complete scrape: every sample line as `series -> value`.
type Scrape = BTreeMap<String, f64>;

fn scrape(addr: SocketAddr) -> Option<Scrape> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains("Content-Type: application/openmetrics-text"), "{head}");
    if !body.ends_with("# EOF\n") {
        // Cut off: the host exited during this scrape.
        return None;
    }
    let samples = body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect();
    Some(samples)
}

fn get(scrape: &Scrape, series: &str) -> f64 {
    *scrape.get(series).unwrap_or_else(|| panic!("no {series} in {scrape:?}"))
}

/// The largest value a series took over the scrapes.
fn max(scrapes: &[Scrape], series: &str) -> f64 {
    scrapes.iter().map(|s| get(s, series)).fold(f64::MIN, f64::max)
}

#[test]
fn metrics_are_scraped_over_http_during_a_run_and_logs_are_json_lines() {
    let dir = scratch("metrics");
    let trace = dir.join("trace.csv");
    std::fs::write(&trace, TRACE).unwrap();
    let (host, worker) = binaries();
    let profile = test_profile(&dir);
    let run_dir = dir.join("run");
    let stderr_path = dir.join("host-stderr.log");
    let mut child = Command::new(&host)
        .args(["--log-format", "json", "run"])
        .args(["--worker-bin", worker.to_str().unwrap()])
        .args(["--trace", trace.to_str().unwrap()])
        .args(["--profile", profile.to_str().unwrap()])
        .args(["--policy", "builtin:reactive"])
        .args(["--run-dir", run_dir.to_str().unwrap()])
        .args(["--wall-seconds-per-interval", "4", "--intervals", "2", "--checkpoint-every", "2"])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .expect("starting parcae-host run");

    // The host prints the address it bound; the rest of stdout is drained meanwhile.
    let (addr_tx, addr_rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if let Some(url) = line.strip_prefix("metrics: http://") {
                let addr: SocketAddr = url.trim_end_matches("/metrics").parse().expect("an address");
                let _ = addr_tx.send(addr);
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let addr = addr_rx.recv_timeout(Duration::from_secs(120)).expect("the host printed its metrics address");

    // Scrape until the host exits (bounded: the run takes two 4 s intervals plus start-up).
    let mut scrapes = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the run did not end");
        if let Some(s) = scrape(addr) {
            scrapes.push(s);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let stdout = reader.join().unwrap();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    assert!(status.success(), "parcae-host run failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    println!("{} scrapes\n{stdout}", scrapes.len());
    assert!(scrapes.len() >= 3, "too few scrapes: {}", scrapes.len());

    // The values moved while the run lasted.
    let steps: Vec<f64> = scrapes.iter().map(|s| get(s, "parcae_step")).collect();
    assert!(steps.windows(2).all(|w| w[0] <= w[1]), "steps went back without a rollback: {steps:?}");
    assert!(steps.last() > steps.first(), "no step between the first and the last scrape: {steps:?}");
    let last = scrapes.last().unwrap();
    assert!(get(last, "parcae_samples_total") > 0.0, "{last:?}");
    assert!(max(&scrapes, "parcae_samples_per_second") > 0.0);
    let loss = get(last, "parcae_loss");
    assert!(loss.is_finite() && loss > 0.0, "loss {loss}");
    assert_eq!(max(&scrapes, "parcae_fleet_instances"), 4.0, "the fourth worker was seen");
    assert!(max(&scrapes, "parcae_data_parallel") * max(&scrapes, "parcae_pipeline_stages") >= 3.0);
    assert_eq!(get(last, "parcae_migrations_total{kind=\"cold-start\"}"), 1.0, "{last:?}");
    assert!(get(last, "parcae_migrations_total{kind=\"repartition\"}") >= 1.0, "{last:?}");
    assert!(get(last, "parcae_bytes_moved_total") > 0.0, "{last:?}");
    assert!(get(last, "parcae_checkpoints_total{reason=\"periodic\"}") >= 1.0, "{last:?}");
    assert!(get(last, "parcae_policy_calls_total{slot=\"optimizer\",answer=\"guest\"}") >= 2.0, "{last:?}");
    assert_eq!(get(last, "parcae_policy_faults_total{slot=\"optimizer\",kind=\"trap\"}"), 0.0);
    let fuel = get(last, "parcae_policy_heaviest_fuel_ratio{slot=\"optimizer\"}");
    assert!(fuel > 0.0 && fuel < 1.0, "the heaviest plan's share of the fuel budget: {fuel}");
    assert_eq!(get(last, "parcae_rolled_back_steps_total{cause=\"unannounced\"}"), 0.0);

    // What the scrapes saw agrees with the run's own record.
    let log: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("events.json")).unwrap()).unwrap();
    let summary = &log["summary"];
    assert!(get(last, "parcae_step") <= summary["steps"].as_f64().unwrap(), "{summary}");
    assert!(get(last, "parcae_bytes_moved_total") <= summary["bytes_moved"].as_f64().unwrap(), "{summary}");

    // Logs: JSON lines, no colour, in the host's stderr and in every worker's log file.
    let mut files = vec![stderr_path.clone()];
    files.extend(std::fs::read_dir(run_dir.join("logs")).unwrap().map(|e| e.unwrap().path()));
    assert!(files.len() >= 5, "the host's and four workers' logs: {files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(!text.contains('\x1b'), "{}: ANSI escapes", file.display());
        let mut ours = 0;
        for line in text.lines().filter(|l| l.starts_with('{')) {
            let value: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{}: {e}: {line}", file.display()));
            if value["target"].as_str().is_some_and(|t| t.starts_with("parcae")) {
                ours += 1;
            }
        }
        assert!(ours >= 1, "{}: no JSON log line of ours:\n{text}", file.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
