//! Malformed profiles and constants files are rejected with the file, the
//! field path and the reason; nothing panics.

use std::path::{Path, PathBuf};

use parcae_profile::{CostConstants, Profile, ProfileError};
use serde_json::{Value, json};

fn profiles_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/profiles")
}

fn example_text() -> String {
    std::fs::read_to_string(profiles_dir().join("example-small.json")).unwrap()
}

fn constants_text() -> String {
    std::fs::read_to_string(profiles_dir().join("cost-constants.json")).unwrap()
}

/// The example profile with `edit` applied, as JSON text.
fn edited(edit: impl FnOnce(&mut Value)) -> String {
    let mut v: Value = serde_json::from_str(&example_text()).unwrap();
    edit(&mut v);
    serde_json::to_string_pretty(&v).unwrap()
}

fn model(v: &mut Value) -> &mut Value {
    &mut v["models"]["tiny-gpt"]
}

/// Load `text` as `bad.json` and return the error message.
fn profile_err(text: &str) -> String {
    match Profile::from_json(text, "bad.json") {
        Ok(_) => panic!("accepted a malformed profile"),
        Err(e) => e.to_string(),
    }
}

fn constants_err(text: &str) -> String {
    match CostConstants::from_json(text, "consts.json") {
        Ok(_) => panic!("accepted malformed constants"),
        Err(e) => e.to_string(),
    }
}

#[track_caller]
fn assert_starts(msg: &str, prefix: &str) {
    assert!(msg.starts_with(prefix), "expected `{prefix}...`, got `{msg}`");
}

#[test]
fn zero_data_parallel_degree() {
    let msg = profile_err(&edited(|v| model(v)["throughput"][3]["dp"] = json!(0)));
    assert_eq!(msg, "bad.json: models.tiny-gpt.throughput[3].dp: must be >= 1");
}

#[test]
fn zero_pipeline_depth() {
    let msg = profile_err(&edited(|v| model(v)["throughput"][0]["pp"] = json!(0)));
    assert_eq!(msg, "bad.json: models.tiny-gpt.throughput[0].pp: must be >= 1");
}

#[test]
fn wrong_types_name_the_field_and_line() {
    let msg = profile_err(&edited(|v| model(v)["throughput"][3]["dp"] = json!("two")));
    assert_starts(&msg, "bad.json: models.tiny-gpt.throughput[3].dp (line ");
    assert!(msg.contains("invalid type: string \"two\", expected u32"), "{msg}");

    let msg = profile_err(&edited(|v| model(v)["throughput"][1]["pp"] = json!(-2)));
    assert_starts(&msg, "bad.json: models.tiny-gpt.throughput[1].pp (line ");

    let msg = profile_err(&edited(|v| model(v)["throughput"][1]["pp"] = json!(2.5)));
    assert_starts(&msg, "bad.json: models.tiny-gpt.throughput[1].pp (line ");

    let msg = profile_err(&edited(|v| v["layer_params"]["tiny-gpt"]["layers"][2] = json!(-1)));
    assert_starts(&msg, "bad.json: layer_params.tiny-gpt.layers[2] (line ");

    let msg = profile_err(&edited(|v| model(v)["throughput"] = json!({"dp": 1})));
    assert_starts(&msg, "bad.json: models.tiny-gpt.throughput (line ");
}

#[test]
fn missing_and_unknown_fields() {
    let msg = profile_err(&edited(|v| {
        model(v)["throughput"][2].as_object_mut().unwrap().remove("iteration_ms");
    }));
    assert_starts(&msg, "bad.json: models.tiny-gpt.throughput[2] (line ");
    assert!(msg.contains("missing field `iteration_ms`"), "{msg}");

    let msg = profile_err(&edited(|v| model(v)["proc_init_sm"] = json!(30)));
    assert_starts(&msg, "bad.json: models.tiny-gpt (line ");
    assert!(msg.contains("unknown field `proc_init_sm`"), "{msg}");

    let msg = profile_err(&edited(|v| v["modles"] = json!({})));
    assert_starts(&msg, "bad.json: line ");
    assert!(msg.contains("unknown field `modles`"), "{msg}");

    let msg = profile_err(&edited(|v| {
        v.as_object_mut().unwrap().remove("instance");
    }));
    assert!(msg.contains("missing field `instance`"), "{msg}");
}

/// Restart times beyond a day are unit slips or placeholders, not measurements.
#[test]
fn restart_times_beyond_a_day() {
    let msg = profile_err(&edited(|v| model(v)["proc_init_ms"] = json!(1e300)));
    assert_eq!(
        msg,
        "bad.json: models.tiny-gpt.proc_init_ms: 1e300 ms is more than a day (86400000 ms); is it in milliseconds?"
    );
    let msg = profile_err(&edited(|v| model(v)["model_build_ms_by_pp"]["2"] = json!(9e7)));
    assert_starts(&msg, "bad.json: models.tiny-gpt.model_build_ms_by_pp.2: 90000000 ms is more than a day");
}

#[test]
fn non_positive_or_inconsistent_throughput() {
    let msg = profile_err(&edited(|v| model(v)["throughput"][0]["samples_per_s"] = json!(-64.0)));
    assert_eq!(
        msg,
        "bad.json: models.tiny-gpt.throughput[0].samples_per_s: must be a finite number > 0, got -64"
    );

    let msg = profile_err(&edited(|v| model(v)["throughput"][0]["iteration_ms"] = json!(0)));
    assert_starts(&msg, "bad.json: models.tiny-gpt.throughput[0].iteration_ms: must be a finite number > 0");

    let msg = profile_err(&edited(|v| model(v)["throughput"][5]["samples_per_s"] = json!(200.0)));
    assert_starts(&msg, "bad.json: models.tiny-gpt.throughput[5].samples_per_s: 200 disagrees with");

    let msg = profile_err(&edited(|v| {
        let rows = model(v)["throughput"].as_array_mut().unwrap();
        let copy = rows[1].clone();
        rows.push(copy);
    }));
    assert_eq!(
        msg,
        "bad.json: models.tiny-gpt.throughput[12]: layout dp=1 pp=2 is also measured at throughput[1]"
    );

    let msg = profile_err(&edited(|v| model(v)["throughput"] = json!([])));
    assert_eq!(msg, "bad.json: models.tiny-gpt.throughput: needs at least one measured layout");
}

#[test]
fn missing_model_build_time_names_the_depth() {
    let msg = profile_err(&edited(|v| {
        model(v)["model_build_ms_by_pp"].as_object_mut().unwrap().remove("8");
    }));
    assert_eq!(
        msg,
        "bad.json: models.tiny-gpt.model_build_ms_by_pp: no entry for pp=8 (used by throughput[4])"
    );

    let msg = profile_err(&edited(|v| model(v)["model_build_ms_by_pp"]["0"] = json!(5)));
    assert_eq!(msg, "bad.json: models.tiny-gpt.model_build_ms_by_pp.0: pipeline depth must be >= 1");

    let msg = profile_err(&edited(|v| model(v)["model_build_ms_by_pp"]["deep"] = json!(5)));
    assert_starts(&msg, "bad.json: models.tiny-gpt.model_build_ms_by_pp (line ");
}

#[test]
fn too_few_layers_for_the_depth() {
    let msg = profile_err(&edited(|v| v["layer_params"]["tiny-gpt"]["layers"] = json!([10, 20, 30, 40, 50])));
    assert_eq!(
        msg,
        "bad.json: models.tiny-gpt.throughput[4].pp: layer_params.tiny-gpt.layers has 5 entries, \
         which can fill at most 4 stages (the first entry rides with stage 0)"
    );
    let msg = profile_err(&edited(|v| v["layer_params"]["tiny-gpt"]["layers"] = json!([])));
    assert_eq!(msg, "bad.json: layer_params.tiny-gpt.layers: needs at least one layer");
}

#[test]
fn layer_params_must_match_models() {
    let msg = profile_err(&edited(|v| {
        v["layer_params"].as_object_mut().unwrap().remove("tiny-gpt");
    }));
    assert_eq!(
        msg,
        "bad.json: layer_params: no entry for model `tiny-gpt` (every model in `models` needs one)"
    );

    let msg = profile_err(&edited(|v| {
        let lp = v["layer_params"]["tiny-gpt"].clone();
        v["layer_params"]["small.gpt"] = lp;
    }));
    assert_eq!(
        msg,
        "bad.json: layer_params[\"small.gpt\"]: no model `small.gpt` in `models`; models: tiny-gpt"
    );

    let msg = profile_err(&edited(|v| v["layer_params"]["tiny-gpt"]["arch"]["micro_batch_size"] = json!(8)));
    assert_eq!(
        msg,
        "bad.json: layer_params.tiny-gpt.arch.micro_batch_size: 8 disagrees with models.tiny-gpt.micro_batch_size (4)"
    );

    let msg = profile_err(&edited(|v| v["layer_params"]["tiny-gpt"]["bytes_per_value"] = json!(0)));
    assert_eq!(msg, "bad.json: layer_params.tiny-gpt.bytes_per_value: must be >= 1");

    let msg = profile_err(&edited(|v| v["layer_params"]["tiny-gpt"]["layers"][0] = json!(u64::MAX)));
    assert_eq!(msg, "bad.json: layer_params.tiny-gpt.layers: state bytes overflow 64 bits");
}

#[test]
fn batch_sizes() {
    let msg = profile_err(&edited(|v| model(v)["global_batch_size"] = json!(30)));
    assert_eq!(
        msg,
        "bad.json: models.tiny-gpt.global_batch_size: must be a multiple of micro_batch_size (4)"
    );
    let msg = profile_err(&edited(|v| model(v)["micro_batch_size"] = json!(0)));
    assert_eq!(msg, "bad.json: models.tiny-gpt.micro_batch_size: must be >= 1");
}

#[test]
fn model_names_with_dots_are_quoted_in_paths() {
    let msg = profile_err(&edited(|v| {
        let m = v["models"].as_object_mut().unwrap().remove("tiny-gpt").unwrap();
        v["models"]["gpt-1.5b"] = m;
        let lp = v["layer_params"].as_object_mut().unwrap().remove("tiny-gpt").unwrap();
        v["layer_params"]["gpt-1.5b"] = lp;
        v["models"]["gpt-1.5b"]["throughput"][0]["dp"] = json!(0);
    }));
    assert_eq!(msg, "bad.json: models[\"gpt-1.5b\"].throughput[0].dp: must be >= 1");
}

#[test]
fn bad_transfer_curves() {
    let msg = profile_err(&edited(|v| v["p2p_us_by_bytes"] = json!({})));
    assert_eq!(msg, "bad.json: p2p_us_by_bytes: needs at least one measured point");

    let msg = profile_err(&edited(|v| v["p2p_us_by_bytes"]["0"] = json!(10.0)));
    assert_eq!(msg, "bad.json: p2p_us_by_bytes.0: size must be >= 1 byte");

    let msg = profile_err(&edited(|v| v["p2p_us_by_bytes"]["1024"] = json!(0.0)));
    assert_eq!(
        msg,
        "bad.json: p2p_us_by_bytes.1024: time must be a finite number of microseconds > 0, got 0"
    );

    let msg = profile_err(&edited(|v| v["p2p_us_by_bytes"]["1 KiB"] = json!(10.0)));
    assert_starts(&msg, "bad.json: p2p_us_by_bytes (line ");

    let msg = profile_err(&edited(|v| v["p2p_us_by_bytes"] = json!([[1024, 50.0]])));
    assert_starts(&msg, "bad.json: p2p_us_by_bytes (line ");
}

#[test]
fn bad_instance() {
    let msg = profile_err(&edited(|v| v["instance"]["spot_usd_per_hour"] = json!(-0.1)));
    assert_eq!(msg, "bad.json: instance.spot_usd_per_hour: must be a finite number >= 0, got -0.1");
    let msg = profile_err(&edited(|v| v["instance"]["gpus"] = json!(0)));
    assert_eq!(msg, "bad.json: instance.gpus: must be >= 1");
    let msg = profile_err(&edited(|v| v["instance"]["type"] = json!(" ")));
    assert_eq!(msg, "bad.json: instance.type: must not be empty");
}

#[test]
fn text_level_problems() {
    // Duplicate keys would otherwise be merged silently.
    let text = example_text().replace(r#""2": 500,"#, r#""2": 500, "2": 9,"#);
    let msg = profile_err(&text);
    assert_starts(&msg, "bad.json: models.tiny-gpt.model_build_ms_by_pp (line ");
    assert!(msg.contains("duplicate key `2`"), "{msg}");

    let original: Value = serde_json::from_str(&example_text()).unwrap();
    let copy = format!(r#""models": {{"tiny-gpt": {},"#, original["models"]["tiny-gpt"]);
    let text = example_text().replacen(r#""models": {"#, &copy, 1);
    let msg = profile_err(&text);
    assert_starts(&msg, "bad.json: models (line ");
    assert!(msg.contains("duplicate key `tiny-gpt`"), "{msg}");

    // A syntax error names the line (and, where it can, the enclosing value).
    let text =
        example_text().replace(r#""pp": 2, "iteration_ms": 281.394"#, r#""pp": 2 "iteration_ms": 281.394"#);
    let msg = profile_err(&text);
    assert_starts(&msg, "bad.json: models.tiny-gpt.throughput[1] (line 41, column ");
    assert!(msg.contains("expected `,` or `}`"), "{msg}");

    for text in ["", "   ", "null", "[]", "{", "\"profile\"", "{\"models\": "] {
        let msg = profile_err(text);
        assert_starts(&msg, "bad.json: ");
    }

    // Pathologically deep nesting is an error, not a stack overflow.
    let nested = format!(r#""arch": {{"notes": {}{}, "#, "[".repeat(100_000), "]".repeat(100_000));
    let deep = example_text().replacen(r#""arch": {"#, &nested, 1);
    let msg = profile_err(&deep);
    assert_starts(&msg, "bad.json: ");
    assert!(msg.contains("recursion limit"), "{msg}");
    let msg = profile_err(&"[".repeat(100_000));
    assert_starts(&msg, "bad.json: ");
}

#[test]
fn unreadable_files() {
    let err = Profile::load("/nonexistent/profile.json").unwrap_err();
    assert!(matches!(err, ProfileError::Io { .. }));
    assert_starts(&err.to_string(), "/nonexistent/profile.json: cannot read: ");

    let dir = std::env::temp_dir().join(format!("parcae-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("latin1.json");
    std::fs::write(&file, b"{\"source\": \"caf\xe9\"}").unwrap();
    let msg = Profile::load(&file).unwrap_err().to_string();
    assert!(msg.contains("latin1.json: cannot read"), "{msg}");
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- constants files ----

fn constants_edited(edit: impl FnOnce(&mut Value)) -> String {
    let mut v: Value = serde_json::from_str(&constants_text()).unwrap();
    edit(&mut v);
    serde_json::to_string_pretty(&v).unwrap()
}

#[test]
fn bad_constants_scalars() {
    let msg = constants_err(&constants_edited(|v| v["allreduce_gb_per_s"] = json!(0)));
    assert_eq!(msg, "consts.json: allreduce_gb_per_s: must be a finite number > 0, got 0");
    let msg = constants_err(&constants_edited(|v| v["checkpoint_interval_ms"] = json!(-1)));
    assert_eq!(msg, "consts.json: checkpoint_interval_ms: must be a finite number > 0, got -1");
    let msg = constants_err(&constants_edited(|v| v["checkpoint_save_load_ms"] = json!("14 s")));
    assert_starts(&msg, "consts.json: checkpoint_save_load_ms (line ");
    // A placeholder or a unit slip: more than a day for one restart.
    let msg = constants_err(&constants_edited(|v| v["checkpoint_save_load_ms"] = json!(1e300)));
    assert_eq!(
        msg,
        "consts.json: checkpoint_save_load_ms: 1e300 ms is more than a day (86400000 ms); is it in milliseconds?"
    );
    let msg = constants_err(&constants_edited(|v| {
        v["comm_rebuild"]["models"]["gpt-1.5b"]["per_group_add_ms"] = json!(5e8)
    }));
    assert_starts(
        &msg,
        "consts.json: comm_rebuild.models[\"gpt-1.5b\"].per_group_add_ms: 500000000 ms is more than a day",
    );
    let msg = constants_err(&constants_edited(|v| v["sources"]["checkpoint_ms"] = json!("typo")));
    assert_starts(&msg, "consts.json: sources.checkpoint_ms: not a constant of this file");
}

#[test]
fn bad_comm_rebuild_rules() {
    let msg = constants_err(&constants_edited(|v| {
        v["comm_rebuild"]["models"]["vgg19"]["kind"] = json!("per_node")
    }));
    assert_starts(&msg, "consts.json: comm_rebuild.models.vgg19.kind (line ");
    assert!(msg.contains("unknown variant `per_node`"), "{msg}");

    let msg = constants_err(&constants_edited(|v| {
        v["comm_rebuild"]["models"]["vgg19"].as_object_mut().unwrap().remove("add_ms_per_instance");
    }));
    assert_eq!(
        msg,
        "consts.json: comm_rebuild.models.vgg19.add_ms_per_instance: required for kind \"per_instance\""
    );

    let msg =
        constants_err(&constants_edited(|v| v["comm_rebuild"]["models"]["vgg19"]["add_factor"] = json!(1.5)));
    assert_eq!(
        msg,
        "consts.json: comm_rebuild.models.vgg19.add_factor: not used by kind \"per_instance\" \
         (it uses add_ms_per_instance, remove_ms_per_instance)"
    );

    let msg =
        constants_err(&constants_edited(|v| v["comm_rebuild"]["default"]["thresholds"] = json!([12, 6])));
    assert_eq!(
        msg,
        "consts.json: comm_rebuild.default.thresholds[1]: must be greater than the one before (12)"
    );

    let msg = constants_err(&constants_edited(|v| v["comm_rebuild"]["default"]["ms"] = json!([1000, 1500])));
    assert_eq!(
        msg,
        "consts.json: comm_rebuild.default.ms: needs 3 entries (one more than `thresholds`), has 2"
    );

    let msg = constants_err(&constants_edited(|v| {
        v["comm_rebuild"]["models"]["gpt-1.5b"]["per_group_remove_ms"] = json!(-39.3)
    }));
    assert_eq!(
        msg,
        "consts.json: comm_rebuild.models[\"gpt-1.5b\"].per_group_remove_ms: must be a finite number >= 0, got -39.3"
    );

    let msg = constants_err(&constants_edited(|v| {
        v["comm_rebuild"]["models"]["bert"].as_object_mut().unwrap().remove("constant_ms");
    }));
    assert_starts(&msg, "consts.json: comm_rebuild.models.bert (line ");
    assert!(msg.contains("missing field `constant_ms`"), "{msg}");

    let msg = constants_err(&constants_edited(|v| v["comm_rebuild"] = json!({})));
    assert_eq!(msg, "consts.json: comm_rebuild: needs a `default` rule or at least one entry in `models`");
}

#[test]
fn a_model_without_a_rule_names_the_constants_file() {
    let text = constants_edited(|v| {
        v["comm_rebuild"].as_object_mut().unwrap().remove("default");
    });
    let constants = CostConstants::from_json(&text, "consts.json").unwrap();
    let profile = Profile::load(profiles_dir().join("example-small.json")).unwrap();
    let msg = profile.model_profile("tiny-gpt", &constants).unwrap_err().to_string();
    assert_eq!(
        msg,
        "consts.json: comm_rebuild.models: no entry for model `tiny-gpt` and no `comm_rebuild.default`; \
         entries: bert, gpt-1.5b, gpt-6.7b, resnet152, vgg19"
    );
}
