//! What `profile` measures and how it labels the profile: the options and their defaults.

use parcae_cluster::ModelSpec;
use tch::Device;

#[cfg(doc)]
use super::{default_transfer_sizes, measure_process_start};

/// Prices of the example profile (`profiles/example-small.json`): made up, used when none are
/// given, and said so in the written profile.
pub const EXAMPLE_SPOT_USD_PER_HOUR: f64 = 0.12;
/// See [`EXAMPLE_SPOT_USD_PER_HOUR`].
pub const EXAMPLE_ON_DEMAND_USD_PER_HOUR: f64 = 0.4;
/// What to measure and how to label the profile.
#[derive(Debug, Clone)]
pub struct ProfileOptions {
    /// The model and batch to profile (the one `parcae-host run --spec` trains).
    pub spec: ModelSpec,
    /// The model's name in the profile (`parcae-host bench --model NAME`).
    pub model_name: String,
    /// Where the trainers compute.
    pub device: Device,
    /// Untimed steps before the timed ones (allocator, caches, first-touch).
    pub warmup_steps: u64,
    /// Timed steps per layout.
    pub steps: u64,
    /// Largest D x P the profile covers (the host's planning range).
    pub max_instances: usize,
    /// Largest D x P actually trained; larger candidates are only predicted.
    pub measure_max: usize,
    /// Cores (or accelerators) the slots share: layouts with at most this many slots (and no
    /// more than the effective cores the fit finds) fit the machine and are written as measured.
    pub cores: usize,
    /// Message sizes of the transfer curve (bytes); empty: [`default_transfer_sizes`].
    pub transfer_sizes: Vec<u64>,
    /// Timed transfers per size (after one warm-up transfer).
    pub transfer_reps: usize,
    /// Builds of each depth timed for `model_build_ms_by_pp`.
    pub build_reps: usize,
    /// Spot price, US$ per instance-hour.
    pub spot_usd_per_hour: f64,
    /// On-demand price, US$ per instance-hour.
    pub on_demand_usd_per_hour: f64,
    /// Where the prices come from.
    pub price_source: String,
    /// The instance type written in the profile.
    pub instance_type: String,
    /// The hardware one instance stands for, for readers.
    pub hardware: String,
    /// Measured worker start time (ms), if the caller measured it ([`measure_process_start`]).
    pub proc_init_ms: Option<f64>,
    /// Rendezvous time written in the profile (not measured here).
    pub rendezvous_ms: f64,
    /// Extra restart time written in the profile (not measured here).
    pub restart_extra_ms: f64,
}

impl ProfileOptions {
    /// Defaults for `spec` on `device`: 2 warm-up and 10 timed steps, layouts up to 8
    /// instances, all of them trained, the machine's cores (one slot per accelerator on CUDA),
    /// the example profile's prices and start-up constants.
    pub fn new(spec: ModelSpec, device: Device) -> Self {
        let cores = match device {
            Device::Cpu => std::thread::available_parallelism().map_or(1, usize::from),
            _ => 1,
        };
        ProfileOptions {
            spec,
            model_name: "worker-gpt".to_string(),
            device,
            warmup_steps: 2,
            steps: 10,
            max_instances: 8,
            measure_max: 8,
            cores,
            transfer_sizes: Vec::new(),
            transfer_reps: 5,
            build_reps: 3,
            spot_usd_per_hour: EXAMPLE_SPOT_USD_PER_HOUR,
            on_demand_usd_per_hour: EXAMPLE_ON_DEMAND_USD_PER_HOUR,
            price_source: "made up: the example profile's prices (profiles/example-small.json); \
                           pass --spot-usd-per-hour / --on-demand-usd-per-hour"
                .to_string(),
            instance_type: match device {
                Device::Cpu => "local-cpu-1core".to_string(),
                _ => "local-accelerator".to_string(),
            },
            hardware: hardware_name(device),
            proc_init_ms: None,
            rendezvous_ms: 1500.0,
            restart_extra_ms: 0.0,
        }
    }
}

/// A readable name for what one instance is: the CPU model (one core of it) or the device.
pub fn hardware_name(device: Device) -> String {
    match device {
        Device::Cpu => {
            let model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|text| {
                text.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            });
            format!("1 core of {}", model.unwrap_or_else(|| "an unknown CPU".to_string()))
        }
        other => format!("{other:?}"),
    }
}
