//! The project's own data files: the illustrative example profile, the derived
//! g4dn profile and the constants file load on their own (no `shared` folder
//! needed) and work together.

use std::path::{Path, PathBuf};

use parcae_policy_core::ParallelConfig;
use parcae_profile::{CommRebuild, CostConstants, Profile, ProfileFile, partition};

fn profiles_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/profiles")
}

fn example() -> Profile {
    Profile::load(profiles_dir().join("example-small.json")).unwrap_or_else(|e| panic!("{e}"))
}

fn constants() -> CostConstants {
    CostConstants::load(profiles_dir().join("cost-constants.json")).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn example_profile_gives_a_tiny_gpt() {
    let profile = example();
    assert_eq!(profile.model_names(), ["tiny-gpt"]);
    let source = profile.data().source.as_deref().unwrap_or_default();
    assert!(source.contains("ILLUSTRATIVE"), "{source}");
    assert!(profile.spot_usd_per_hour() < profile.on_demand_usd_per_hour());

    let mp = profile.model_profile("tiny-gpt", &constants()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(mp.configs.len(), 12);
    assert!(mp.configs.iter().all(|c| c.config.instances() <= 8));
    // The global batch splits into whole micro-batches on every replica.
    assert!(
        mp.configs
            .iter()
            .all(|c| { mp.global_batch_size.is_multiple_of(c.config.data_parallel * mp.micro_batch_size) })
    );
    let depths: Vec<u32> = mp.partitions.iter().map(|p| p.pipeline_stages).collect();
    assert_eq!(depths, [1, 2, 3, 4, 8]);
    let p8 = &mp.partitions[4];
    // Embedding + 8 layers + head: 9 shared out over 8 stages, leftover to stage 6.
    assert_eq!(p8.layers_per_stage, [2, 1, 1, 1, 1, 1, 2, 1]);
    assert_eq!(p8.state_bytes_per_stage[0], (40_960 + 198_272) * 12);
    assert_eq!(p8.state_bytes_per_stage[7], 41_216 * 12);
    // More hardware never makes this made-up model slower.
    let tput = |d, p| mp.config(ParallelConfig::new(d, p)).unwrap().samples_per_second;
    assert!(tput(1, 1) < tput(2, 1) && tput(2, 1) < tput(4, 1) && tput(4, 1) < tput(8, 1));
    assert!(tput(1, 1) < tput(1, 2) && tput(1, 2) < tput(1, 4) && tput(1, 4) < tput(1, 8));
    // No own rule for tiny-gpt: the default step rule applies (d = 8 is in the 6..12 step).
    let c = mp.config(ParallelConfig::new(8, 1)).unwrap();
    assert_eq!((c.comm_rebuild_add_ms, c.comm_rebuild_remove_ms), (1500.0 * 1.5 + 35.0, 1535.0));
    assert_eq!(mp.checkpoint_restart_ms, 14_000.0);
}

#[test]
fn example_profile_round_trips_through_serde() {
    let profile = example();
    let text = serde_json::to_string_pretty(profile.data()).unwrap();
    let again: ProfileFile = serde_json::from_str(&text).unwrap();
    assert_eq!(&again, profile.data());
    let reloaded = Profile::from_data(again, "round-trip.json").unwrap();
    assert_eq!(reloaded.data(), profile.data());
}

#[test]
fn constants_file_cites_every_constant() {
    let c = constants();
    let data = c.data();
    assert!(data.source.as_deref().is_some_and(|s| s.contains("DESIGN.md")));
    for key in ["checkpoint_save_load_ms", "checkpoint_interval_ms", "allreduce_gb_per_s"] {
        assert!(data.sources.contains_key(key), "no source for {key}");
    }
    let rules = data.comm_rebuild.models.values().chain(data.comm_rebuild.default.as_ref());
    for rule in rules {
        assert!(rule.source.as_deref().is_some_and(|s| !s.is_empty()), "{rule:?}");
    }
    assert_eq!(c.checkpoint_save_load_ms(), 14_000.0);
    assert_eq!(c.checkpoint_interval_ms(), 30.0 * 60_000.0);
    assert_eq!(c.allreduce_gb_per_s(), 1.25);
    assert!(matches!(c.comm_rebuild("gpt-1.5b").unwrap(), CommRebuild::Groups { .. }));
    assert!(matches!(c.comm_rebuild("vgg19").unwrap(), CommRebuild::PerInstance { .. }));
    assert!(matches!(c.comm_rebuild("anything-else").unwrap(), CommRebuild::StepByDp { .. }));
}

#[test]
fn partition_rule_on_plain_lists() {
    let layers = vec![1u64; 49]; // 48 transformer layers + embedding
    let lens = |pp| partition(&layers, pp).unwrap().iter().map(|r| r.len()).collect::<Vec<_>>();
    assert_eq!(lens(5), [10, 10, 10, 10, 9]);
    assert_eq!(lens(6), [9, 8, 8, 8, 8, 8]);
    assert_eq!(lens(7), [8, 7, 7, 7, 7, 7, 6]);
    assert_eq!(lens(8), [7, 6, 6, 6, 6, 6, 6, 6]);
    assert_eq!(partition(&layers, 5).unwrap()[0], 0..10);
    assert_eq!(partition(&layers, 5).unwrap()[4], 40..49);
}

/// The derived g4dn profile loads and is the p3 profile under the mixed-fleet model's
/// decomposition (`parcae_policy_core::mixed`): ticks at 0.356x, synchronisation at 2.5x,
/// as its `source` and `tools/derive-profile/derive.py` say.
#[test]
fn derived_g4dn_profile_follows_the_mixed_fleet_decomposition() {
    use parcae_policy_core::mixed::{sync_ms, tick_ms};
    let c = constants();
    let p3 = Profile::load(profiles_dir().join("p3-v100-parcae.json")).unwrap_or_else(|e| panic!("{e}"));
    let g4dn = Profile::load(profiles_dir().join("g4dn-t4-derived.json")).unwrap_or_else(|e| panic!("{e}"));
    assert!(g4dn.data().source.as_deref().unwrap_or("").starts_with("DERIVED, NOT MEASURED"));
    for model in ["gpt-1.5b", "gpt-6.7b", "bert"] {
        let (a, b) = (p3.model_profile(model, &c).unwrap(), g4dn.model_profile(model, &c).unwrap());
        assert_eq!(a.configs.len(), b.configs.len(), "{model}");
        let m = f64::from(a.global_batch_size / a.micro_batch_size);
        for (x, y) in a.configs.iter().zip(&b.configs) {
            let (d, p) = (x.config.data_parallel, x.config.pipeline_stages);
            let ticks = (m / f64::from(d)).ceil() + f64::from(p) - 1.0;
            let expected = ticks * tick_ms(&a, p).unwrap() / 0.356 + sync_ms(&a, x.config).unwrap() / 2.5;
            assert!(
                (y.iteration_ms - expected).abs() < 0.01,
                "{model} ({d}, {p}): {} vs {expected}",
                y.iteration_ms
            );
            assert!(y.samples_per_second < x.samples_per_second, "{model} ({d}, {p})");
        }
    }
}

/// The deployment measured on a GPU loads with its own constants, and the
/// layouts it trained are there as measured.
#[test]
fn the_gpu_deployment_profile_loads_with_its_constants() {
    let profile = Profile::load(profiles_dir().join("gpt-gpu-h200-deployment-measured.json"))
        .unwrap_or_else(|e| panic!("{e}"));
    let constants = CostConstants::load(profiles_dir().join("gpt-gpu-h200-deployment-constants.json"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(profile.model_names(), ["gpt-gpu"]);
    let source = profile.data().source.as_deref().unwrap_or_default();
    assert!(source.contains("MEASURED DEPLOYMENT"), "{source}");
    let mp = profile.model_profile("gpt-gpu", &constants).unwrap_or_else(|e| panic!("{e}"));
    assert!(mp.configs.len() >= 17, "{} layouts", mp.configs.len());
    assert!(mp.configs.iter().all(|c| c.samples_per_second > 0.0 && c.config.instances() <= 8));
}
