//! How fast the serving simulator replays a long trace: 647 one-minute
//! intervals (the length of the Parcae paper's p3 trace) of a seeded random
//! fleet of 20 to 60 instances, 10 requests per second (about 390k requests),
//! the 20B model of the SpotServe artifact on g4dn.12xlarge, under each
//! recovery mode with the native SpotServe optimizer. Prints the wall time of
//! each run and its headline numbers. Arguments (optional): the rate in
//! requests per second, the preemption notice in seconds (default 30, the
//! artifact's grace period).
//!
//! Why an example and not a test: timings depend on the machine; this is the
//! performance check to run in release mode:
//! `cargo run --release -p parcae-serve-sim --example serve_sim_speed`.

use std::time::Instant;

use parcae_serve_sim::{Fleet, Recovery, ServeSetup, gamma_arrivals, simulate, simulate_on_demand};
use parcae_serving_core::{LayerTiming, ServingOptimizer, ServingProfile, SpotServe, Workload};

const INTERVALS: usize = 647;
const INTERVAL_MS: u64 = 60_000;
/// Default arrival rate, requests per second (first argument overrides).
const RATE: f64 = 10.0;

/// `megatron_h6144` (the "20B": h = 6144, 44 layers) on 4 T4 GPUs per
/// instance, from the SpotServe artifact (tp 1, 2 and 4: wider groups do not
/// fit one instance), fp32 weights, KV cache `2 x 44 x 6144 x 4` bytes per
/// token; reconfiguration rates as in
/// `data/profiles/serving-gpt-20b-g4dn12xl-spotserve.json`.
fn profile() -> ServingProfile {
    let table: [(u32, [(f64, f64); 4]); 3] = [
        (1, [(107.203, 7.144), (224.025, 7.259), (454.014, 7.949), (912.695, 9.919)]),
        (2, [(54.478, 3.808), (115.698, 3.759), (244.748, 4.076), (509.399, 4.702)]),
        (4, [(37.562, 1.968), (64.61, 1.938), (132.855, 2.13), (275.512, 2.484)]),
    ];
    let mut timings = Vec::new();
    for (tp, row) in table {
        for (i, (prefill_ms, decode_ms)) in row.into_iter().enumerate() {
            timings.push(LayerTiming { tensor_parallel: tp, batch_size: 1 << i, prefill_ms, decode_ms });
        }
    }
    ServingProfile {
        model: "gpt-20b".into(),
        layers: 44,
        gpus_per_instance: 4,
        gpu_memory_bytes: 9_000_000_000,
        weight_bytes: 82_271_748_096,
        kv_bytes_per_token: 2 * 44 * 6144 * 4,
        profiled_input_tokens: 512,
        pp_prefill_comm_ms: 7.0,
        pp_decode_comm_ms: 0.1,
        timings,
        load_bytes_per_ms: 360_000.0,
        transfer_bytes_per_ms: 6_250_000.0,
        reinit_ms: 500.0,
        instance_start_ms: 30_000.0,
    }
}

/// A seeded random walk between 20 and 60 instances (SplitMix64 steps).
fn fleet(notice_ms: f64) -> Fleet {
    let mut state: u64 = 0x5EED;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut counts = Vec::with_capacity(INTERVALS);
    let mut alive: i64 = 40;
    for _ in 0..INTERVALS {
        counts.push(alive as u32);
        let r = next() % 100;
        let step = match r {
            0..=69 => 0,
            70..=84 => (next() % 3) as i64 + 1,
            _ => -((next() % 3) as i64 + 1),
        };
        alive = (alive + step).clamp(20, 60);
    }
    let mut previous = 0;
    let (mut arrivals, mut preemptions) = (Vec::new(), Vec::new());
    for &n in &counts {
        arrivals.push(n.saturating_sub(previous));
        preemptions.push(previous.saturating_sub(n));
        previous = n;
    }
    Fleet { instances: counts, preemptions, arrivals, interval_ms: INTERVAL_MS, notice_ms }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let rate: f64 = args.next().map_or(Ok(RATE), |a| a.parse())?;
    let notice_s: f64 = args.next().map_or(Ok(30.0), |a| a.parse())?;
    let setup = ServeSetup {
        profile: profile(),
        workload: Workload { input_tokens: 512, output_tokens: 128 },
        latency_slo_ms: 60_000.0,
        horizon: 4,
        spot_price_per_hour: 1.9046,
        on_demand_price_per_hour: 3.912,
        machine: Default::default(),
    };
    let fleet = fleet(notice_s * 1000.0);
    let duration = INTERVALS as f64 * INTERVAL_MS as f64;
    let started = Instant::now();
    let arrivals = gamma_arrivals(rate, 1.0, duration, 1)?;
    println!(
        "{} intervals of {} s, {}..{} instances (mean {:.1}), {} preemptions, notice {notice_s} s; {} requests at \
         {rate} req/s (generated in {:.3} s)",
        INTERVALS,
        INTERVAL_MS / 1000,
        fleet.instances.iter().min().unwrap_or(&0),
        fleet.instances.iter().max().unwrap_or(&0),
        fleet.instances.iter().map(|&n| f64::from(n)).sum::<f64>() / INTERVALS as f64,
        fleet.preemptions.iter().sum::<u32>(),
        arrivals.len(),
        started.elapsed().as_secs_f64()
    );
    for recovery in [Recovery::TokenLevel, Recovery::Restart, Recovery::Reroute] {
        let mut native = SpotServe::default();
        let started = Instant::now();
        let o = simulate(&setup, &fleet, &arrivals, recovery, &mut |r| native.configure(r))?;
        report(&recovery.to_string(), started.elapsed().as_secs_f64(), &o.summary);
    }
    let started = Instant::now();
    let o = simulate_on_demand(&setup, 60, duration, &arrivals)?;
    report("on-demand x60", started.elapsed().as_secs_f64(), &o.summary);
    Ok(())
}

fn report(name: &str, seconds: f64, s: &parcae_serve_sim::ServeSummary) {
    println!(
        "{name:>14}: {seconds:.3} s wall | completed {} dropped {} requeued {} migrated {} | P50 {:.1} s P99 {:.1} s \
         mean {:.1} s | reconfig {} paused {:.0} s | {:.1} inst-h ${:.2}",
        s.completed,
        s.dropped,
        s.requeued,
        s.migrated,
        s.p50_ms / 1000.0,
        s.p99_ms / 1000.0,
        s.mean_ms / 1000.0,
        s.reconfigurations,
        s.paused_ms / 1000.0,
        s.instance_hours,
        s.cost_usd
    );
}
