//! Builds the guest components the end-to-end tests load: the Rust training
//! and serving policies and the adversarial fixtures. The Python and JavaScript policies are
//! built by their tests (they need componentize-py and componentize-js, see
//! `scripts/setup-python.sh` and `scripts/setup-js.sh`).

use std::path::Path;

use parcae_wasm_build::{Guest, build, rerun_if_changed};

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest).ancestors().nth(2).expect("e2e/sandbox/ is inside the workspace");
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("policies");
    rerun_if_changed(root, &["policies", "crates/policy-core", "crates/serving-core", "e2e/fixtures", "wit"]);
    let guest = |package, output| Guest { package, output };
    let guests = [
        guest("reactive-policy", "reactive.wasm"),
        guest("arima-liveput-policy", "arima_liveput.wasm"),
        guest("robust-liveput-policy", "robust_liveput.wasm"),
        guest("guarded-liveput-policy", "guarded_liveput.wasm"),
        guest("looping-policy", "looping.wasm"),
        guest("allocating-policy", "allocating.wasm"),
        guest("trapping-policy", "trapping.wasm"),
        guest("oversized-policy", "oversized.wasm"),
        guest("sleeping-policy", "sleeping.wasm"),
        guest("flooding-policy", "flooding.wasm"),
        guest("spotserve-serving-policy", "spotserve.wasm"),
        guest("cost-aware-serving-policy", "cost_aware_serving.wasm"),
        guest("hostile-serving-policy", "hostile_serving.wasm"),
    ];
    if let Err(message) = build(root, &out, &guests) {
        eprintln!("{message}");
        std::process::exit(1);
    }
    println!("cargo:rustc-env=PARCAE_TEST_POLICY_DIR={}", out.display());
}
