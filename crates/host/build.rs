//! Builds the guest policies the host binary embeds, so `parcae-host` runs with
//! no `.wasm` on disk and `cargo build` needs no separate step.

use std::path::Path;

use parcae_wasm_build::{Guest, build, rerun_if_changed};

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest).ancestors().nth(2).expect("crates/host/ is inside the workspace");
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("policies");
    rerun_if_changed(root, &["policies", "crates/policy-core"]);
    let guests = [
        Guest { package: "reactive-policy", output: "reactive.wasm" },
        Guest { package: "arima-liveput-policy", output: "arima_liveput.wasm" },
        Guest { package: "robust-liveput-policy", output: "robust_liveput.wasm" },
        Guest { package: "guarded-liveput-policy", output: "guarded_liveput.wasm" },
    ];
    if let Err(message) = build(root, &out, &guests) {
        eprintln!("{message}");
        std::process::exit(1);
    }
}
