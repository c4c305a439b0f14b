//! Builds the guest policies the host binary embeds, so `parcae-host` runs with
//! no `.wasm` on disk and `cargo build` needs no separate step; and lists the
//! `policy new` project templates (`templates/policy-*/`) for the binary to
//! embed file by file (`OUT_DIR/templates.rs`, included by `src/templates.rs`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use parcae_wasm_build::{Guest, build, rerun_if_changed};

/// Directory names never taken into a template (what building one in place leaves).
const SKIPPED_DIRS: &[&str] = &["target", "node_modules", "out", "__pycache__", ".venv", "bindings"];

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest).ancestors().nth(2).expect("crates/host/ is inside the workspace");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let out = out_dir.join("policies");
    rerun_if_changed(root, &["policies", "crates/policy-core", "crates/serving-core", "templates", "wit"]);
    let guests = [
        Guest { package: "reactive-policy", output: "reactive.wasm" },
        Guest { package: "arima-liveput-policy", output: "arima_liveput.wasm" },
        Guest { package: "robust-liveput-policy", output: "robust_liveput.wasm" },
        Guest { package: "guarded-liveput-policy", output: "guarded_liveput.wasm" },
        Guest { package: "spotserve-serving-policy", output: "spotserve.wasm" },
        Guest { package: "cost-aware-serving-policy", output: "cost_aware_serving.wasm" },
    ];
    if let Err(message) = build(root, &out, &guests) {
        eprintln!("{message}");
        std::process::exit(1);
    }
    if let Err(message) = list_templates(&root.join("templates"), &out_dir.join("templates.rs")) {
        eprintln!("listing the policy templates: {message}");
        std::process::exit(1);
    }
}

/// Writes `TEMPLATE_FILES`, one `(template, relative path, include_str!(...))`
/// per file under `templates/<template>/`, sorted.
fn list_templates(templates: &Path, output: &Path) -> Result<(), String> {
    let mut files = Vec::new();
    let mut dirs: Vec<PathBuf> = read_dir(templates)?.into_iter().filter(|p| p.is_dir()).collect();
    dirs.sort();
    for dir in dirs {
        let name =
            dir.file_name().and_then(|n| n.to_str()).ok_or_else(|| format!("{}: bad name", dir.display()))?;
        collect(&dir, &dir, name, &mut files)?;
    }
    files.sort();
    let mut code = String::from(
        "/// Every file of every template: (template directory, path inside it, contents).\n\
         pub const TEMPLATE_FILES: &[(&str, &str, &str)] = &[\n",
    );
    for (template, relative, absolute) in &files {
        writeln!(code, "    ({template:?}, {relative:?}, include_str!({absolute:?})),")
            .map_err(|e| e.to_string())?;
    }
    code.push_str("];\n");
    std::fs::write(output, code).map_err(|e| format!("{}: {e}", output.display()))
}

fn collect(
    base: &Path,
    dir: &Path,
    template: &str,
    files: &mut Vec<(String, String, String)>,
) -> Result<(), String> {
    for path in read_dir(dir)? {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if path.is_dir() {
            if !SKIPPED_DIRS.contains(&name) {
                collect(base, &path, template, files)?;
            }
            continue;
        }
        if name.ends_with(".wasm") {
            continue;
        }
        let relative = path.strip_prefix(base).map_err(|e| e.to_string())?;
        let relative = relative.to_str().ok_or_else(|| format!("{}: not UTF-8", path.display()))?;
        let absolute = path.to_str().ok_or_else(|| format!("{}: not UTF-8", path.display()))?;
        files.push((template.to_string(), relative.replace('\\', "/"), absolute.to_string()));
    }
    Ok(())
}

fn read_dir(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    entries.map(|e| e.map(|e| e.path()).map_err(|e| format!("{}: {e}", dir.display()))).collect()
}
