//! SpotServe's analytic latency model: prefill and per-token decode time of a
//! configuration from per-layer measurements, pipeline fill and hops.
//!
//! With `L` layers over `pp` stages (`ceil(L / pp)` per stage), `M1` prefill
//! and `M2` decode micro-batches of a batch `b`:
//!
//! - prefill `t1 = prefill(tp, b/M1) x ceil(L/pp) x (pp + M1 - 1) + comm_prefill x (pp - 1)`
//! - one decode step `t2 = decode(tp, b/M2) x ceil(L/pp) x (pp + M2 - 1) + comm_decode x (pp - 1)`
//! - a request's latency `t1 + t2 x (output_tokens - 1)` (the prefill's last
//!   position yields the first token, as in FasterTransformer and `serve`), a
//!   replica's throughput `b / latency`, the deployment's `dp x b / latency`.
//!
//! A pipeline of `M` micro-batches over `pp` stages takes `pp + M - 1` stage
//! times to drain; each hop's transfer is paid once on the critical path.
//! Prefill scales linearly with the prompt length from the profiled one
//! (attention's quadratic term is small at these lengths next to the
//! projections). A configuration is feasible when every GPU holds its weights
//! and the KV cache of its batch at full length.
//!
//! Where this differs from the SpotServe artifact's solver
//! (`elastic-switch/scheduler/parallel/solver.py`), and why:
//! - the artifact divides the prefill term by `M1` (and the hop term by `M1`
//!   and `M2`), which makes more prefill micro-batches look free; here a
//!   pipeline of `M` micro-batches costs `pp + M - 1` stage times at the
//!   micro-batch's measured time, as a GPipe schedule does;
//! - the artifact adds two embedding passes (under 1.1 ms at batch 8 on its
//!   profiles, against seconds of latency) and multiplies by a fixed 1.1
//!   ("final_fix_factor"); neither is a measured term, so neither is here;
//! - the artifact has no memory model (a per-model minimum GPU count instead);
//!   here memory decides, so a profile of other hardware needs no such constant.

use crate::{ServingConfig, ServingProfile, Workload};

/// What a configuration achieves, per the model.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Estimate {
    /// Time to prefill one batch (first token), ms.
    pub prefill_ms: f64,
    /// Time of one decode step of the batch, ms.
    pub decode_step_ms: f64,
    /// A request's service time from the start of its batch to its last token, ms.
    pub latency_ms: f64,
    /// Requests per second the whole deployment completes at full batches.
    pub requests_per_second: f64,
    /// Instances the deployment occupies.
    pub instances: u32,
    /// Bytes one GPU holds (weights and full-length KV cache).
    pub bytes_per_gpu: u64,
}

/// The model's estimate for `config`, or `None` when it cannot run: a
/// (tp, micro-batch size) that was not measured, tp wider than an instance,
/// micro-batches that do not divide the batch, or more memory than a GPU has.
pub fn estimate(profile: &ServingProfile, config: &ServingConfig, workload: &Workload) -> Option<Estimate> {
    let ServingConfig {
        data_parallel,
        tensor_parallel: tp,
        pipeline_stages: pp,
        batch_size: b,
        prefill_micro_batches: m1,
        decode_micro_batches: m2,
    } = *config;
    if data_parallel == 0 || tp == 0 || pp == 0 || b == 0 || m1 == 0 || m2 == 0 {
        return None;
    }
    if tp > profile.gpus_per_instance || pp > profile.layers || b % m1 != 0 || b % m2 != 0 {
        return None;
    }
    let prefill = profile.timing(tp, b / m1)?;
    let decode = profile.timing(tp, b / m2)?;
    let layers_per_stage = f64::from(profile.layers.div_ceil(pp));
    let hops = f64::from(pp - 1);
    let prompt_scale =
        f64::from(workload.input_tokens.max(1)) / f64::from(profile.profiled_input_tokens.max(1));
    let prefill_ms = prefill.prefill_ms * prompt_scale * layers_per_stage * f64::from(pp + m1 - 1)
        + profile.pp_prefill_comm_ms * hops;
    let decode_step_ms =
        decode.decode_ms * layers_per_stage * f64::from(pp + m2 - 1) + profile.pp_decode_comm_ms * hops;
    let latency_ms = prefill_ms + decode_step_ms * f64::from(workload.output_tokens.saturating_sub(1));
    let bytes_per_gpu = bytes_per_gpu(profile, config, workload);
    if bytes_per_gpu > profile.gpu_memory_bytes || latency_ms <= 0.0 || !latency_ms.is_finite() {
        return None;
    }
    Some(Estimate {
        prefill_ms,
        decode_step_ms,
        latency_ms,
        requests_per_second: f64::from(data_parallel) * f64::from(b) * 1000.0 / latency_ms,
        instances: config.instances(profile.gpus_per_instance),
        bytes_per_gpu,
    })
}

/// Bytes one GPU of `config` holds: its slice of the heaviest stage's weights
/// and of the KV cache of a full batch at full length.
pub fn bytes_per_gpu(profile: &ServingProfile, config: &ServingConfig, workload: &Workload) -> u64 {
    let tp = u64::from(config.tensor_parallel.max(1));
    let layers = u64::from(profile.layers.max(1));
    let per_stage = u64::from(profile.layers.div_ceil(config.pipeline_stages.max(1)));
    let tokens = u64::from(config.batch_size) * u64::from(workload.input_tokens + workload.output_tokens);
    let kv = (profile.kv_bytes_per_token * tokens * per_stage).div_ceil(layers * tp);
    profile.weight_bytes_per_gpu(config.tensor_parallel, config.pipeline_stages) + kv
}

/// Every feasible replica shape (dp = 1) with its estimate: tp and batch sizes
/// as measured, pp up to the layer count and what `max_gpus` allows,
/// micro-batches dividing the batch (at most `pp` of them: more only lengthen
/// the pipeline). More replicas of a shape keep its latency and multiply its
/// throughput, so the optimizers choose dp per shape instead of enumerating
/// it. Sorted by configuration, so ties broken by order are deterministic.
pub fn shapes(
    profile: &ServingProfile,
    max_gpus: u32,
    workload: &Workload,
) -> Vec<(ServingConfig, Estimate)> {
    let mut tps: Vec<u32> = profile.timings.iter().map(|t| t.tensor_parallel).collect();
    tps.sort_unstable();
    tps.dedup();
    let batches = profile.batch_sizes();
    let mut out = Vec::new();
    for &tp in &tps {
        for pp in 1..=profile.layers {
            if tp.saturating_mul(pp) > max_gpus {
                break;
            }
            for &b in &batches {
                for m1 in (1..=pp.min(b)).filter(|m| b % m == 0) {
                    for m2 in (1..=pp.min(b)).filter(|m| b % m == 0) {
                        let shape = ServingConfig {
                            data_parallel: 1,
                            tensor_parallel: tp,
                            pipeline_stages: pp,
                            batch_size: b,
                            prefill_micro_batches: m1,
                            decode_micro_batches: m2,
                        };
                        if let Some(e) = estimate(profile, &shape, workload) {
                            out.push((shape, e));
                        }
                    }
                }
            }
        }
    }
    out.sort_by_key(|(config, _)| *config);
    out
}

/// `shape` (an estimate at dp = 1) scaled to `data_parallel` replicas.
pub fn with_replicas(
    profile: &ServingProfile,
    shape: &ServingConfig,
    one: &Estimate,
    data_parallel: u32,
) -> (ServingConfig, Estimate) {
    let config = ServingConfig { data_parallel, ..*shape };
    let estimate = Estimate {
        requests_per_second: one.requests_per_second * f64::from(data_parallel),
        instances: config.instances(profile.gpus_per_instance),
        ..*one
    };
    (config, estimate)
}

/// A small synthetic profile for tests and examples: a 2B-parameter-like
/// model of 8 layers on instances of 4 GPUs, tp 1, 2 and 4 measured at batch
/// sizes 1, 2, 4 and 8; its weights (4 GB) need at least two 3 GB GPUs.
pub fn toy_profile() -> ServingProfile {
    let mut timings = Vec::new();
    for (tp, scale) in [(1, 1.0), (2, 0.55), (4, 0.32)] {
        for b in [1u32, 2, 4, 8] {
            timings.push(crate::LayerTiming {
                tensor_parallel: tp,
                batch_size: b,
                prefill_ms: 10.0 * f64::from(b) * scale,
                decode_ms: (1.0 + 0.05 * f64::from(b)) * scale,
            });
        }
    }
    ServingProfile {
        model: "test-2b".into(),
        layers: 8,
        gpus_per_instance: 4,
        gpu_memory_bytes: 3_000_000_000,
        weight_bytes: 4_000_000_000,
        kv_bytes_per_token: 100_000,
        profiled_input_tokens: 512,
        pp_prefill_comm_ms: 2.0,
        pp_decode_comm_ms: 0.1,
        timings,
        load_bytes_per_ms: 500_000.0,
        transfer_bytes_per_ms: 1_000_000.0,
        reinit_ms: 1000.0,
        instance_start_ms: 20_000.0,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn profile() -> ServingProfile {
        toy_profile()
    }

    const WORK: Workload = Workload { input_tokens: 512, output_tokens: 64 };

    fn config(dp: u32, tp: u32, pp: u32, b: u32, m1: u32, m2: u32) -> ServingConfig {
        ServingConfig {
            data_parallel: dp,
            tensor_parallel: tp,
            pipeline_stages: pp,
            batch_size: b,
            prefill_micro_batches: m1,
            decode_micro_batches: m2,
        }
    }

    /// The formula of the module doc, worked by hand for one configuration.
    #[test]
    fn latency_follows_the_formula() {
        let e = estimate(&profile(), &config(2, 2, 2, 4, 2, 1), &WORK).unwrap();
        // prefill: timing(2, 2) = 10 * 2 * 0.55 = 11 ms per layer, 4 layers, 3 stage times, 1 hop.
        assert!((e.prefill_ms - (11.0 * 4.0 * 3.0 + 2.0)).abs() < 1e-9, "{}", e.prefill_ms);
        // decode: timing(2, 4) = 1.2 * 0.55 = 0.66 ms per layer, 4 layers, 2 stage times, 1 hop.
        assert!((e.decode_step_ms - (0.66 * 4.0 * 2.0 + 0.1)).abs() < 1e-9, "{}", e.decode_step_ms);
        // The prefill yields the first of the 64 tokens.
        assert!((e.latency_ms - (e.prefill_ms + 63.0 * e.decode_step_ms)).abs() < 1e-9);
        assert!((e.requests_per_second - 2.0 * 4.0 * 1000.0 / e.latency_ms).abs() < 1e-9);
        assert_eq!(e.instances, 2);
    }

    #[test]
    fn what_does_not_fit_or_was_not_measured_is_infeasible() {
        let p = profile();
        // 4 GB of weights on one 3 GB GPU.
        assert!(estimate(&p, &config(1, 1, 1, 1, 1, 1), &WORK).is_none());
        // tp 8 is wider than an instance and was never measured.
        assert!(estimate(&p, &config(1, 8, 1, 1, 1, 1), &WORK).is_none());
        // batch 3 was not measured; 2 micro-batches do not divide batch 1.
        assert!(estimate(&p, &config(1, 2, 1, 3, 1, 1), &WORK).is_none());
        assert!(estimate(&p, &config(1, 2, 1, 1, 2, 1), &WORK).is_none());
        assert!(estimate(&p, &config(1, 2, 1, 1, 1, 1), &WORK).is_some());
    }

    #[test]
    fn shapes_are_the_feasible_single_replicas_and_scale_with_dp() {
        let p = profile();
        let all = shapes(&p, 8, &WORK);
        assert!(!all.is_empty());
        for (c, e) in &all {
            assert_eq!(c.data_parallel, 1);
            assert!(c.gpus() <= 8);
            assert_eq!(estimate(&p, c, &WORK).as_ref(), Some(e));
            let (three, scaled) = with_replicas(&p, c, e, 3);
            let direct = estimate(&p, &three, &WORK).expect("replicas of a feasible shape are feasible");
            assert!((direct.requests_per_second - scaled.requests_per_second).abs() < 1e-9);
            assert_eq!(direct.instances, scaled.instances);
        }
        assert!(all.windows(2).all(|w| w[0].0 < w[1].0), "sorted and unique");
        assert!(shapes(&p, 0, &WORK).is_empty());
    }
}
