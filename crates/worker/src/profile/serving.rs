//! `parcae-worker profile-serving`: measures inference of the built-in GPT on this machine and
//! writes a serving profile (`parcae_profile::ServingProfileFile`, the format SpotServe's
//! latency model in `parcae-serving-core` reads), so serving plans can be made for the model
//! `parcae-host run` trains, on the machine it runs on.
//!
//! What is measured, and how (every figure also named in the file's `source`):
//!
//! - **per-layer prefill and decode**, per batch size, tensor-parallel width 1 only (the worker
//!   has no tensor parallelism yet): the model's blocks run through [`crate::infer`] (the
//!   training code's layer functions with a KV cache). Prefill: the blocks over a prompt of
//!   `input_tokens` positions (its embedding computed beforehand, untimed), divided by the
//!   number of blocks; decode: one step of the blocks at mid-generation (`input_tokens +
//!   output_tokens / 2` positions cached, a window of steps around it), divided likewise.
//!   Medians over `repeats` rounds after `warmup` untimed ones, every batch size taking its
//!   turn in each round (as the training profile interleaves layouts), so other load on the
//!   machine hits them alike. The embedding and head are not timed: the latency model counts
//!   transformer layers only;
//! - **pipeline hops**: one micro-batch's hidden state (f32; prefill `batch x input_tokens x
//!   d_model`, decode `batch x 1 x d_model`) sent between two parcae-net QUIC endpoints on
//!   loopback ([`measure_transfer`], the training profile's transfer curve), at the largest
//!   batch measured (the file has one hop time per phase; the largest is the conservative one);
//! - **transfer rate**: the same QUIC transfer at a large size (at least the model's weights
//!   and 4 MiB);
//! - **load rate**: the model's weights (wire-encoded tensors) written to a temporary file and
//!   fsync'd, its pages dropped from the page cache (`posix_fadvise(DONTNEED)`, so the read
//!   comes from storage where the file system honours it), read back and decoded into
//!   tensors; bytes over the read-and-decode time, median over `repeats` (the write rate is
//!   reported too);
//! - **reinit**: building the model's one-stage trainer ([`measure_model_build`], the training
//!   profile's stage-build measurement: deterministic initialisation of every layer);
//!   **instance start**: a worker process start ([`super::measure_process_start`], when the caller
//!   measured it) plus that build;
//! - **sizes** from the `ModelSpec`: weights (f32, every layer), KV cache per token (K and V,
//!   f32: `n_blocks x d_model x 4 x 2`);
//! - **memory**: [`MEMORY_FRACTION`] of this machine's RAM (a CPU instance); **prices** 0 (a
//!   local machine); **workload**: `input_tokens` in, `seq_len - input_tokens` out.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use parcae_cluster::ModelSpec;
use parcae_profile::{
    PipelineHop, Reconfiguration, ServingInstance, ServingProfileData, ServingProfileFile, TimingEntry,
    WorkloadEntry,
};
use serde::Serialize;
use tch::{Device, Tensor};

use super::{ProfilingError, Timings, measure_model_build, measure_transfer};
use crate::infer;
use crate::tensor::TensorData;

/// Share of this machine's RAM written as one instance's usable accelerator memory: a CPU
/// instance holds weights and KV cache in RAM, and half is left to the OS, the process and
/// libtorch's workspaces.
pub const MEMORY_FRACTION: f64 = 0.5;

/// Smallest message timed for the transfer rate (smaller ones measure latency, not bandwidth).
const MIN_RATE_BYTES: u64 = 4 << 20;

/// What to measure and how to label the serving profile.
#[derive(Debug, Clone)]
pub struct ServingProfileOptions {
    /// The model (the one `parcae-host run` trains by default: `ModelSpec::default()`).
    pub spec: ModelSpec,
    /// The model's name in the profile.
    pub model_name: String,
    /// Batch sizes to measure (distinct, each >= 1).
    pub batches: Vec<u32>,
    /// Prompt length of the prefill measurements, tokens (1 ..= `seq_len - 1`).
    pub input_tokens: usize,
    /// Timed rounds of every batch size's prefill and decode (medians are written); the load
    /// measurement is repeated this many times, at most 5.
    pub repeats: usize,
    /// Untimed rounds before the timed ones.
    pub warmup: usize,
    /// Timed QUIC transfers per message size.
    pub transfer_reps: usize,
    /// The instance type written in the profile.
    pub instance_type: String,
    /// The hardware one instance stands for, for the `source` note.
    pub hardware: String,
    /// libtorch threads the measurements ran with, for the `source` note.
    pub threads: i32,
    /// Measured worker process start, ms ([`super::measure_process_start`]), if the caller
    /// measured it.
    pub proc_init_ms: Option<f64>,
    /// Directory for the load measurement's temporary file.
    pub temp_dir: PathBuf,
}

impl ServingProfileOptions {
    /// Defaults for `spec`: batches 1, 2, 4, 8, a prompt of half the context, 50 timed rounds
    /// after 5 warm-up ones, 20 transfers per size, one CPU core as the instance.
    pub fn new(spec: ModelSpec) -> Self {
        let input_tokens = (spec.seq_len / 2).max(1);
        ServingProfileOptions {
            spec,
            model_name: "worker-gpt".to_string(),
            batches: vec![1, 2, 4, 8],
            input_tokens,
            repeats: 50,
            warmup: 5,
            transfer_reps: 20,
            instance_type: "local-cpu-1core".to_string(),
            hardware: super::hardware_name(Device::Cpu),
            threads: 1,
            proc_init_ms: None,
            temp_dir: std::env::temp_dir(),
        }
    }
}

/// One batch size's measurements.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchMeasurement {
    /// Requests in the batch.
    pub batch: u32,
    /// Prefill of one block over the prompt, ms.
    pub prefill_ms: Timings,
    /// One decode step of one block at mid-generation, ms.
    pub decode_ms: Timings,
    /// Sending the prefill hidden state between two endpoints, ms.
    pub prefill_hop_ms: f64,
    /// Sending one decode step's hidden state, ms.
    pub decode_hop_ms: f64,
}

/// Everything `profile-serving` measured, and the file made of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServingReport {
    /// Per batch size.
    pub batches: Vec<BatchMeasurement>,
    /// Bytes sent for the transfer rate.
    pub transfer_rate_bytes: u64,
    /// Reading and decoding the weights from a file, ms.
    pub load_ms: Timings,
    /// Writing and fsync'ing the weights to a file, ms.
    pub write_ms: Timings,
    /// Bytes of that file.
    pub load_file_bytes: u64,
    /// Building the one-stage trainer, ms.
    pub build_ms: f64,
    /// The serving profile.
    pub profile: ServingProfileFile,
}

/// Bytes of the model's weights as served: every layer's parameters, f32.
pub fn weight_bytes(spec: &ModelSpec) -> u64 {
    (0..spec.num_layers()).map(|l| spec.layer_params(l)).sum::<u64>() * 4
}

/// KV-cache bytes of one token over all blocks: K and V, `d_model` f32 each, per block.
pub fn kv_bytes_per_token(spec: &ModelSpec) -> u64 {
    (spec.n_blocks * spec.d_model * 4 * 2) as u64
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

fn check(opts: &ServingProfileOptions) -> Result<(), ProfilingError> {
    let spec = &opts.spec;
    spec.validate()?;
    let bad = |m: String| Err(ProfilingError::Options(m));
    if opts.input_tokens == 0 || opts.input_tokens >= spec.seq_len {
        return bad(format!(
            "--input-tokens {}: must be between 1 and seq_len - 1 = {} (the rest of the context is generated)",
            opts.input_tokens,
            spec.seq_len.saturating_sub(1)
        ));
    }
    if opts.batches.is_empty() || opts.batches.contains(&0) {
        return bad(format!("--batches {:?}: needs at least one batch size, each >= 1", opts.batches));
    }
    let mut sorted = opts.batches.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != opts.batches.len() {
        return bad(format!("--batches {:?}: a batch size is listed twice", opts.batches));
    }
    if opts.repeats == 0 {
        return bad("--repeats: at least one timed run is needed".into());
    }
    if spec.n_blocks == 0 {
        return bad("model spec field `n_blocks`: the serving profile needs at least one block".into());
    }
    Ok(())
}

/// Deterministic prompt-and-continuation tokens `[batch, seq_len]` for the measurements.
fn sample_tokens(spec: &ModelSpec, batch: u32) -> Tensor {
    let mut rng = crate::rng::SplitMix64::for_stream(&[spec.seed, 0x5E7E, u64::from(batch)]);
    let n = batch as usize * spec.seq_len;
    let ids: Vec<i64> = (0..n).map(|_| rng.below(spec.vocab as u64) as i64).collect();
    Tensor::from_slice(&ids).view([i64::from(batch), spec.seq_len as i64])
}

/// The positions decoded for the decode timings: a window of up to 4 steps around
/// mid-generation (`input_tokens + output_tokens / 2` positions cached), within the context.
fn decode_window(opts: &ServingProfileOptions) -> std::ops::Range<usize> {
    let mid = opts.input_tokens + (opts.spec.seq_len - opts.input_tokens) / 2;
    mid.saturating_sub(2).max(opts.input_tokens)..(mid + 2).min(opts.spec.seq_len)
}

/// Times the blocks' prefill and decode for every batch size, ms per block: `warmup` untimed
/// rounds, then `repeats` timed ones; in each round every batch size takes one prefill and one
/// decode window in turn, so that other load on the machine hits them alike.
fn measure_compute(
    opts: &ServingProfileOptions,
    params: &[Vec<Tensor>],
) -> Result<Vec<(u32, Timings, Timings)>, ProfilingError> {
    let spec = &opts.spec;
    let blocks = 1..spec.n_blocks + 1;
    let block_params = &params[blocks.clone()];
    let per_block = spec.n_blocks as f64;
    let window = decode_window(opts);
    // The embedding of each batch's whole sequence, untimed: the blocks' inputs at every position.
    let hidden: Vec<Tensor> = opts
        .batches
        .iter()
        .map(|&b| Ok(infer::prefill_layers(spec, 0..1, &params[..1], &sample_tokens(spec, b))?.0))
        .collect::<Result<_, ProfilingError>>()?;
    let mut prefill = vec![Vec::with_capacity(opts.repeats); opts.batches.len()];
    let mut decode = vec![Vec::with_capacity(opts.repeats * window.len()); opts.batches.len()];
    for round in 0..opts.warmup + opts.repeats {
        let timed = round >= opts.warmup;
        for (i, h) in hidden.iter().enumerate() {
            let prompt = h.narrow(1, 0, opts.input_tokens as i64);
            let start = Instant::now();
            let (out, cache) = infer::prefill_layers(spec, blocks.clone(), block_params, &prompt)?;
            drop((out, cache));
            if timed {
                prefill[i].push(ms_since(start) / per_block);
            }
            // The cache up to the window, untimed; then each step of the window, timed.
            let (_, mut cache) = infer::prefill_layers(
                spec,
                blocks.clone(),
                block_params,
                &h.narrow(1, 0, window.start as i64),
            )?;
            for pos in window.clone() {
                let step_input = h.narrow(1, pos as i64, 1);
                let start = Instant::now();
                let out = infer::decode_layers(spec, block_params, &mut cache, &step_input)?;
                drop(out);
                if timed {
                    decode[i].push(ms_since(start) / per_block);
                }
            }
        }
    }
    Ok(opts
        .batches
        .iter()
        .zip(prefill.into_iter().zip(decode))
        .map(|(&b, (p, d))| (b, Timings::new(p), Timings::new(d)))
        .collect())
}

/// Writes the weights to a file in `dir` (fsync'd), drops its pages from the page cache and
/// reads them back into tensors: (write ms, read-and-decode ms, file bytes), medians.
fn measure_load(
    spec: &ModelSpec,
    dir: &Path,
    reps: usize,
) -> Result<(Timings, Timings, u64), ProfilingError> {
    let mut bytes = Vec::new();
    for layer in 0..spec.num_layers() {
        for t in crate::model::init_layer(spec, layer) {
            let encoded = t.encode();
            bytes.extend_from_slice(&(encoded.len() as u64).to_le_bytes());
            bytes.extend_from_slice(&encoded);
        }
    }
    let path = dir.join(format!("parcae-serving-load-{}.bin", std::process::id()));
    let io = |source| ProfilingError::Io { path: path.clone(), source };
    let (mut writes, mut reads) = (Vec::new(), Vec::new());
    let result = (|| -> Result<(), ProfilingError> {
        for _ in 0..reps.max(1) {
            let start = Instant::now();
            let mut file = std::fs::File::create(&path).map_err(io)?;
            file.write_all(&bytes).map_err(io)?;
            file.sync_all().map_err(io)?;
            writes.push(ms_since(start));
            drop_cached_pages(&file);
            drop(file);

            let start = Instant::now();
            let mut read = Vec::with_capacity(bytes.len());
            std::fs::File::open(&path).map_err(io)?.read_to_end(&mut read).map_err(io)?;
            let mut at = 0;
            let mut tensors = Vec::new();
            while at < read.len() {
                let header: [u8; 8] = read
                    .get(at..at + 8)
                    .and_then(|s| s.try_into().ok())
                    .ok_or_else(|| io(std::io::Error::other("truncated weights file")))?;
                let len = u64::from_le_bytes(header) as usize;
                let body = read
                    .get(at + 8..at + 8 + len)
                    .ok_or_else(|| io(std::io::Error::other("truncated weights file")))?;
                tensors.push(TensorData::decode(body)?.to_tensor(Device::Cpu)?);
                at += 8 + len;
            }
            reads.push(ms_since(start));
            drop(tensors);
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&path);
    result?;
    Ok((Timings::new(writes), Timings::new(reads), bytes.len() as u64))
}

/// Asks the kernel to drop `file`'s clean pages from the page cache, so the next read comes
/// from storage; a hint only (ignored where unsupported).
fn drop_cached_pages(file: &std::fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: posix_fadvise on an open descriptor we own; it only gives the kernel a hint.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        tracing::debug!(rc, "posix_fadvise(DONTNEED) refused; the read may come from the page cache");
    }
}

/// This machine's RAM, bytes (`/proc/meminfo`), if it can be read.
fn total_ram_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// Measures everything (see the module docs), builds the profile and checks it with
/// [`ServingProfileData::from_json`]. `progress` gets a line per finished measurement.
pub fn run_serving_profile(
    opts: &ServingProfileOptions,
    progress: &mut dyn FnMut(String),
) -> Result<ServingReport, ProfilingError> {
    check(opts)?;
    let spec = &opts.spec;
    let params = infer::init_params(spec, 0..spec.num_layers(), Device::Cpu)?;
    let d = spec.d_model as u64;
    let input = opts.input_tokens as u64;

    let compute = measure_compute(opts, &params)?;
    for (batch, prefill, decode) in &compute {
        progress(format!(
            "batch {batch}: prefill {:.4} ms/layer (prompt {input}), decode {:.4} ms/layer",
            prefill.median, decode.median
        ));
        tracing::debug!(batch, prefill = prefill.median, decode = decode.median, "measured a batch size");
    }

    let weights = weight_bytes(spec);
    let rate_bytes = weights.max(MIN_RATE_BYTES);
    let hop_bytes = |b: u32| (u64::from(b) * input * d * 4, u64::from(b) * d * 4);
    let mut sizes: Vec<u64> =
        opts.batches.iter().flat_map(|&b| <[u64; 2]>::from(hop_bytes(b))).chain([rate_bytes]).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let transfers = measure_transfer(&sizes, opts.transfer_reps.max(1))?;
    let hop_ms = |bytes: u64| transfers.get(&bytes).map_or(f64::NAN, |t| t.median / 1e3);
    let transfer_bytes_per_ms = rate_bytes as f64 / hop_ms(rate_bytes);
    progress(format!(
        "QUIC on loopback: {rate_bytes} bytes at {:.0} bytes/ms; hops measured for {} sizes",
        transfer_bytes_per_ms,
        sizes.len() - 1
    ));

    let (write_ms, load_ms, load_file_bytes) = measure_load(spec, &opts.temp_dir, opts.repeats.min(5))?;
    let load_bytes_per_ms = load_file_bytes as f64 / load_ms.median;
    progress(format!(
        "weights file of {load_file_bytes} bytes: write+fsync {:.3} ms, read+decode {:.3} ms",
        write_ms.median, load_ms.median
    ));
    let build_ms = measure_model_build(spec, 1, Device::Cpu, 3)?;
    progress(format!("one-stage model build {build_ms:.2} ms"));

    let batches: Vec<BatchMeasurement> = compute
        .into_iter()
        .map(|(batch, prefill_ms, decode_ms)| {
            let (p, dcd) = hop_bytes(batch);
            BatchMeasurement {
                batch,
                prefill_ms,
                decode_ms,
                prefill_hop_ms: hop_ms(p),
                decode_hop_ms: hop_ms(dcd),
            }
        })
        .collect();
    let largest = batches.iter().max_by_key(|b| b.batch).expect("checked: at least one batch size");
    let ram = total_ram_bytes().ok_or_else(|| ProfilingError::Io {
        path: "/proc/meminfo".into(),
        source: std::io::Error::other("no MemTotal line to read this machine's RAM from"),
    })?;
    let start_note = match opts.proc_init_ms {
        Some(p) => format!("a worker process start ({p:.1} ms: exec, loading libtorch) plus the build"),
        None => "the build alone (the process start was not measured)".to_string(),
    };
    let source = format!(
        "measured by `parcae-worker profile-serving` on {hw}, libtorch on the CPU with {threads} thread(s), \
         {date}. Tensor parallelism is not implemented in the worker yet: only tp = 1 is measured. \
         prefill_ms / decode_ms: the {blocks} transformer blocks run through the worker's KV-cache inference \
         (crate parcae-worker, module infer: the training layer functions), divided by {blocks}; prefill of a \
         {input}-token prompt, decode steps with {lo}..{hi} positions cached (mid-generation); medians of \
         {repeats} rounds after {warmup} warm-up ones, the batch sizes taking turns in each round; \
         embedding and head not timed. pipeline_hop_ms: one \
         micro-batch's f32 hidden state (batch {largest} x {input} x {d} prefill, batch {largest} x 1 x {d} \
         decode) sent between two parcae-net QUIC endpoints on loopback (send_state/recv_state, mutual TLS), \
         median of {treps}; the largest batch measured. transfer_bytes_per_ms: the same QUIC transfer of \
         {rate_bytes} bytes. load_bytes_per_ms: the weights ({load_file_bytes} bytes of wire-encoded f32 \
         tensors) read back from an fsync'd file whose pages were dropped from the page cache, and decoded \
         (write+fsync took {write:.3} ms). reinit_ms: building the model's one-stage trainer (deterministic \
         init of every layer); instance_start_ms: {start_note}. gpu_memory_usable_bytes: {frac}% of this \
         machine's {ram} bytes of RAM (a CPU instance). Prices 0: a local machine.",
        hw = opts.hardware,
        threads = opts.threads,
        date = chrono::Utc::now().format("%Y-%m-%d"),
        blocks = spec.n_blocks,
        lo = (opts.input_tokens + (spec.seq_len - opts.input_tokens) / 2)
            .saturating_sub(2)
            .max(opts.input_tokens),
        hi = (opts.input_tokens + (spec.seq_len - opts.input_tokens) / 2 + 2).min(spec.seq_len),
        repeats = opts.repeats,
        warmup = opts.warmup,
        largest = largest.batch,
        treps = opts.transfer_reps.max(1),
        write = write_ms.median,
        frac = MEMORY_FRACTION * 100.0,
    );
    let profile = ServingProfileFile {
        source: Some(source),
        model: opts.model_name.clone(),
        instance: ServingInstance {
            instance_type: opts.instance_type.clone(),
            gpus: 1,
            gpu_memory_usable_bytes: (ram as f64 * MEMORY_FRACTION) as u64,
            spot_usd_per_hour: 0.0,
            on_demand_usd_per_hour: 0.0,
        },
        layers: spec.n_blocks as u32,
        weight_bytes: weights,
        kv_bytes_per_token: kv_bytes_per_token(spec),
        profiled_input_tokens: opts.input_tokens as u32,
        pipeline_hop_ms: PipelineHop {
            prefill: round4(largest.prefill_hop_ms),
            decode: round4(largest.decode_hop_ms),
        },
        layer_timings: batches
            .iter()
            .map(|b| TimingEntry {
                tp: 1,
                batch: b.batch,
                // Rounded, but never to 0: the format wants every time > 0.
                prefill_ms: round4(b.prefill_ms.median).max(1e-4),
                decode_ms: round4(b.decode_ms.median).max(1e-4),
            })
            .collect(),
        reconfiguration: Reconfiguration {
            load_bytes_per_ms: load_bytes_per_ms.round().max(1.0),
            transfer_bytes_per_ms: transfer_bytes_per_ms.round().max(1.0),
            reinit_ms: round4(build_ms),
            instance_start_ms: round4(opts.proc_init_ms.unwrap_or(0.0) + build_ms),
        },
        workload: Some(WorkloadEntry {
            input_tokens: opts.input_tokens as u32,
            output_tokens: (spec.seq_len - opts.input_tokens) as u32,
        }),
        // One process on one core: what several replicas sharing a machine cost is the
        // deployment's (`parcae-host profile-serving`).
        contention: None,
        light_load: None,
    };
    // What the serving planner will load: refuse to hand back a profile it would refuse.
    let text = serde_json::to_string_pretty(&profile).map_err(|e| ProfilingError::Options(e.to_string()))?;
    ServingProfileData::from_json(&text, "<profile-serving>")?;
    Ok(ServingReport {
        batches,
        transfer_rate_bytes: rate_bytes,
        load_ms,
        write_ms,
        load_file_bytes,
        build_ms,
        profile,
    })
}

/// Writes `profile` as pretty JSON to `path` (creating its directory), then reads it back
/// through [`ServingProfileData::load`], the serving planner's loader.
pub fn write_serving_profile(profile: &ServingProfileFile, path: &Path) -> Result<(), ProfilingError> {
    let io = |source| ProfilingError::Io { path: path.to_path_buf(), source };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut text =
        serde_json::to_string_pretty(profile).map_err(|e| ProfilingError::Options(e.to_string()))?;
    text.push('\n');
    std::fs::write(path, text).map_err(io)?;
    ServingProfileData::load(path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_spec() {
        let spec = ModelSpec::default();
        assert_eq!(kv_bytes_per_token(&spec), 6 * 64 * 4 * 2);
        let params: usize =
            (0..spec.num_layers()).flat_map(|l| crate::model::init_layer(&spec, l)).map(|t| t.numel()).sum();
        assert_eq!(weight_bytes(&spec), params as u64 * 4);
    }

    #[test]
    fn bad_options_are_refused_by_name() {
        let spec = ModelSpec::default();
        let mut opts = ServingProfileOptions::new(spec.clone());
        opts.input_tokens = spec.seq_len;
        let err = check(&opts).unwrap_err().to_string();
        assert!(err.contains("--input-tokens") && err.contains("seq_len"), "{err}");
        let mut opts = ServingProfileOptions::new(spec);
        opts.batches = vec![1, 0];
        assert!(check(&opts).unwrap_err().to_string().contains("--batches"));
        opts.batches = vec![2, 2];
        assert!(check(&opts).unwrap_err().to_string().contains("twice"));
    }

    #[test]
    fn a_tiny_run_writes_a_profile_the_serving_loader_accepts() {
        let spec = ModelSpec { n_blocks: 2, seq_len: 12, ..ModelSpec::default() };
        let mut opts = ServingProfileOptions::new(spec.clone());
        opts.batches = vec![1, 3];
        opts.input_tokens = 5;
        opts.repeats = 2;
        opts.warmup = 1;
        opts.transfer_reps = 1;
        let mut lines = Vec::new();
        let report = run_serving_profile(&opts, &mut |l| lines.push(l)).unwrap();
        assert!(lines.len() >= 4, "{lines:?}");
        let dir = std::env::temp_dir().join(format!("parcae-serving-profile-test-{}", std::process::id()));
        let path = dir.join("serving.json");
        write_serving_profile(&report.profile, &path).unwrap();
        let loaded = ServingProfileData::load(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let file = loaded.data();
        assert_eq!(file, &report.profile);
        assert_eq!(file.layers, 2);
        assert_eq!(file.kv_bytes_per_token, 2 * 64 * 8);
        assert_eq!(file.profiled_input_tokens, 5);
        assert_eq!(file.workload.map(|w| (w.input_tokens, w.output_tokens)), Some((5, 7)));
        let batches: Vec<(u32, u32)> = file.layer_timings.iter().map(|t| (t.tp, t.batch)).collect();
        assert_eq!(batches, vec![(1, 1), (1, 3)]);
        assert!(file.source.as_deref().unwrap().contains("tp = 1"));
        let core = loaded.serving_profile();
        assert!(core.timing(1, 3).unwrap().prefill_ms > 0.0);
        assert!(file.pipeline_hop_ms.prefill > 0.0 && file.pipeline_hop_ms.decode > 0.0);
        // SpotServe's latency model can plan with it: some shape of at most 2 instances fits.
        let workload = loaded.workload().unwrap();
        let shapes = parcae_serving_core::shapes(&core, 2, &workload);
        assert!(shapes.iter().any(|(c, _)| c.pipeline_stages == 2 && c.batch_size == 3), "{shapes:?}");
    }
}
