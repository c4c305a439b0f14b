//! The shared p3 profile (`shared/profiles/p3-v100-parcae.json`, beside the
//! checkout) with our constants file: all five models load and give
//! consistent policy-level profiles whose costs match the artifact's formulas.

use std::path::{Path, PathBuf};

use parcae_policy_core::{ModelProfile, ParallelConfig};
use parcae_profile::{Change, CostConstants, Profile, ProfileError};

const MODELS: [&str; 5] = ["bert", "gpt-1.5b", "gpt-6.7b", "resnet152", "vgg19"];

fn shared_profile_path() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/profiles/p3-v100-parcae.json");
    assert!(
        path.is_file(),
        "shared profile not found at {}: these tests expect the `shared` folder beside the checkout",
        path.display()
    );
    path.canonicalize().unwrap_or(path)
}

fn constants_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/profiles/cost-constants.json")
}

fn load() -> (Profile, CostConstants) {
    let profile = Profile::load(shared_profile_path()).unwrap_or_else(|e| panic!("{e}"));
    let constants = CostConstants::load(constants_path()).unwrap_or_else(|e| panic!("{e}"));
    (profile, constants)
}

fn model(name: &str) -> ModelProfile {
    let (profile, constants) = load();
    profile.model_profile(name, &constants).unwrap_or_else(|e| panic!("{e}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn cfg(d: u32, p: u32) -> ParallelConfig {
    ParallelConfig::new(d, p)
}

#[test]
fn loads_all_five_models_and_the_instance() {
    let (profile, _) = load();
    assert_eq!(profile.model_names(), MODELS);
    assert_eq!(profile.instance().instance_type, "p3.2xlarge");
    assert_eq!(profile.spot_usd_per_hour(), 0.918);
    assert_eq!(profile.on_demand_usd_per_hour(), 3.06);
    assert_eq!(profile.transfer_curve().points().len(), 29);
}

#[test]
fn model_profiles_are_consistent() {
    let (profile, constants) = load();
    for name in MODELS {
        let entry = profile.model(name).unwrap();
        let lp = profile.layer_params(name).unwrap();
        let mp = profile.model_profile(name, &constants).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(mp.model, name);
        assert_eq!(mp.global_batch_size, entry.global_batch_size);
        assert_eq!(mp.micro_batch_size, entry.micro_batch_size);
        assert_eq!(mp.configs.len(), entry.throughput.len(), "{name}");
        assert!(mp.configs.windows(2).all(|w| w[0].config < w[1].config), "{name}: sorted, unique");
        for c in &mp.configs {
            // Throughput is the global batch over the iteration time.
            let implied = f64::from(mp.global_batch_size) * 1000.0 / c.iteration_ms;
            assert!((c.samples_per_second / implied - 1.0).abs() < 1e-3, "{name} {}", c.config);
            assert_eq!(c.model_build_ms, entry.model_build_ms_by_pp[&c.config.pipeline_stages]);
            assert!(c.comm_rebuild_add_ms >= c.comm_rebuild_remove_ms, "{name} {}", c.config);
            assert!(c.comm_rebuild_remove_ms > 0.0);
            assert!(c.config.instances() <= 32);
            let part = mp.partitions.iter().find(|p| p.pipeline_stages == c.config.pipeline_stages);
            assert!(part.is_some(), "{name}: partition for {}", c.config);
        }
        let total_params: u64 = lp.layers.iter().sum();
        for part in &mp.partitions {
            let p = part.pipeline_stages as usize;
            assert_eq!(part.layers_per_stage.len(), p);
            assert_eq!(part.state_bytes_per_stage.len(), p);
            assert_eq!(part.layers_per_stage.iter().sum::<u32>() as usize, lp.layers.len());
            assert!(part.layers_per_stage.iter().all(|&n| n >= 1));
            assert_eq!(part.state_bytes_per_stage.iter().sum::<u64>(), total_params * 12, "{name} pp={p}");
        }
        assert!(mp.partitions.windows(2).all(|w| w[0].pipeline_stages < w[1].pipeline_stages));
        assert_eq!(profile.full_state_bytes(name).unwrap(), total_params * 12);
        assert!(mp.transfer_curve.windows(2).all(|w| w[0].bytes < w[1].bytes));
        assert_eq!(mp.transfer_curve.len(), 29);
        assert_eq!(mp.rendezvous_ms, 6600.0);
        assert_eq!(mp.process_start_ms, entry.proc_init_ms);
        assert_eq!(mp.checkpoint_restart_ms, 14_000.0);
        assert_eq!(mp.add_extra_ms, entry.restart_extra_ms);
        assert_eq!(mp.checkpoint_interval_ms, 1_800_000.0);
    }
}

#[test]
fn per_model_figures_from_the_file() {
    let gpt = model("gpt-1.5b");
    assert_eq!((gpt.global_batch_size, gpt.micro_batch_size), (128, 1));
    assert_eq!(gpt.process_start_ms, 240.0);
    assert_eq!(gpt.checkpoint_restart_ms, 14_000.0);
    let best = gpt.config(cfg(4, 8)).unwrap();
    assert_eq!((best.iteration_ms, best.samples_per_second), (2944.728, 43.468));
    assert_eq!(gpt.peak_samples_per_second(), 43.468);

    assert_eq!(model("gpt-6.7b").add_extra_ms, 2000.0);
    assert_eq!(model("resnet152").add_extra_ms, 3360.374);
    assert_eq!(model("vgg19").add_extra_ms, 2000.0);
    assert_eq!(gpt.add_extra_ms, 0.0);
    assert_eq!(model("bert").process_start_ms, 30.0);
    // VGG-19 was not profiled at dp=1.
    assert!(model("vgg19").configs.iter().all(|c| c.config.data_parallel >= 2));
}

#[test]
fn gpt_model_build_times_follow_the_artifact_estimate() {
    // The artifact estimates gpt-1.5b's build time as the transfer of a
    // 50257 x 1024 x 4-byte message plus 430 ms per ceil(48 / pp) layers.
    let (profile, _) = load();
    let comm = profile.transfer_ms(50257 * 1024 * 4);
    for (&pp, &ms) in &profile.model("gpt-1.5b").unwrap().model_build_ms_by_pp {
        let expected = comm + 430.0 * f64::from(48u32.div_ceil(pp));
        assert!((ms - expected).abs() < 1e-6, "pp={pp}: {ms} vs {expected}");
    }
}

#[test]
fn comm_rebuild_matches_the_formulas_by_hand() {
    let gpt = model("gpt-1.5b");
    // (4 + 8 + 1 + 32) = 45 groups.
    let c = gpt.config(cfg(4, 8)).unwrap();
    assert!(close(c.comm_rebuild_add_ms, 45.0 * 500.0 + 35.0));
    assert!(close(c.comm_rebuild_remove_ms, 45.0 * 39.3 + 35.0));
    // (1 + 6 + 1 + 6) = 14 groups.
    let c = gpt.config(cfg(1, 6)).unwrap();
    assert!(close(c.comm_rebuild_add_ms, 7035.0));
    assert!(close(c.comm_rebuild_remove_ms, 14.0 * 39.3 + 35.0));

    let gpt67 = model("gpt-6.7b");
    // (2 + 16 + 1 + 32) = 51 groups.
    let c = gpt67.config(cfg(2, 16)).unwrap();
    assert!(close(c.comm_rebuild_add_ms, 51.0 * 500.0 + 35.0));
    assert!(close(c.comm_rebuild_remove_ms, 51.0 * 115.6 + 35.0));

    let vgg = model("vgg19");
    let c = vgg.config(cfg(8, 4)).unwrap();
    assert!(close(c.comm_rebuild_add_ms, 440.0 * 32.0 + 35.0));
    assert!(close(c.comm_rebuild_remove_ms, 340.0 * 32.0 + 35.0));

    let bert = model("bert");
    for (d, p, step) in [(5, 6, 1000.0), (6, 5, 1500.0), (11, 2, 1500.0), (12, 2, 2000.0), (16, 2, 2000.0)] {
        let c = bert.config(cfg(d, p)).unwrap();
        assert!(close(c.comm_rebuild_add_ms, step * 1.5 + 35.0), "{d}x{p}");
        assert!(close(c.comm_rebuild_remove_ms, step + 35.0), "{d}x{p}");
    }
    let resnet = model("resnet152");
    let c = resnet.config(cfg(1, 2)).unwrap();
    assert!(close(c.comm_rebuild_add_ms, 1535.0));
    assert!(close(c.comm_rebuild_remove_ms, 1035.0));

    let (_, constants) = load();
    let ms = constants.comm_rebuild_ms("gpt-1.5b", cfg(2, 3), Change::Remove).unwrap();
    assert!(close(ms, (2.0 + 3.0 + 1.0 + 6.0) * 39.3 + 35.0));
}

#[test]
fn gpt_partitions_and_state_bytes() {
    let (profile, _) = load();
    let lp = profile.layer_params("gpt-1.5b").unwrap();
    assert_eq!(lp.layers.len(), 50); // embedding + 48 layers + head
    assert_eq!(lp.state_bytes_per_param(), 12);
    let (emb, layer, head) = (82_124_800u64, 30_740_800u64, 82_128_000u64);
    assert_eq!((lp.layers[0], lp.layers[1], lp.layers[49]), (emb, layer, head));

    let p = profile.partition("gpt-1.5b", 6).unwrap();
    assert_eq!(p.layers_per_stage, [9, 8, 8, 8, 9, 8]);
    assert_eq!(p.state_bytes_per_stage[0], (emb + 8 * layer) * 12);
    assert_eq!(p.state_bytes_per_stage[4], 9 * layer * 12);
    assert_eq!(p.state_bytes_per_stage[5], (7 * layer + head) * 12);

    let p = profile.partition("gpt-1.5b", 32).unwrap();
    // 49 = 32 x 1 + 17: stages 14..=30 get a second layer.
    let expected: Vec<u32> =
        (0..32).map(|s| u32::from(s == 0) + 1 + u32::from((14..=30).contains(&s))).collect();
    assert_eq!(p.layers_per_stage, expected);

    // Too deep for the model: the error names the file and the layers.
    let err = profile.partition("vgg19", 19).unwrap_err().to_string();
    assert!(err.contains("p3-v100-parcae.json: layer_params.vgg19.layers:"), "{err}");
    assert!(err.contains("at most 18 stages"), "{err}");
}

#[test]
fn transfer_times_interpolate_the_curve() {
    let (profile, _) = load();
    assert_eq!(profile.transfer_ms(0), 0.0);
    assert!(close(profile.transfer_ms(1), 0.142907));
    assert!(close(profile.transfer_ms(1 << 20), 1.428108));
    // Halfway between 1 MiB and 2 MiB.
    assert!(close(profile.transfer_ms(3 << 19), (1428.108 + 3006.771) / 2000.0));
    // Beyond 1 GiB: the 1 GiB point's bandwidth.
    assert!(close(profile.transfer_ms(1 << 31), 2.0 * 1198.2559));
    // A GPT-1.5B stage at pp=6 (8 layers: 246 M parameters, 2.95 GB of
    // state) takes about 3.3 s over the 10 Gb/s link.
    let stage = profile.partition("gpt-1.5b", 6).unwrap().state_bytes_per_stage[1];
    assert_eq!(stage, 8 * 30_740_800 * 12);
    let ms = profile.transfer_ms(stage);
    assert!(close(ms, stage as f64 * 1198.2559 / (1u64 << 30) as f64), "{ms}");
    assert!((3200.0..3400.0).contains(&ms), "{ms}");
}

#[test]
fn allreduce_follows_the_artifact() {
    let (_, constants) = load();
    let mib = 1u64 << 20;
    assert_eq!(constants.allreduce_ms(mib, 1), 0.0);
    assert_eq!(constants.allreduce_ms(mib, 0), 0.0);
    // 1.25 MiB per ms; a pair moves 2(w-1)/w = 1 times the data.
    assert!(close(constants.allreduce_ms(5 * mib, 2), 4.0));
    assert!(close(constants.allreduce_ms(5 * mib, 4), 4.0 * 1.5));
}

#[test]
fn unknown_model_lists_the_known_ones() {
    let (profile, constants) = load();
    let err = profile.model_profile("gpt-175b", &constants).unwrap_err();
    assert!(matches!(err, ProfileError::UnknownModel { .. }));
    let msg = err.to_string();
    assert!(msg.contains("p3-v100-parcae.json: unknown model `gpt-175b`"), "{msg}");
    assert!(msg.contains("bert, gpt-1.5b, gpt-6.7b, resnet152, vgg19"), "{msg}");
}
