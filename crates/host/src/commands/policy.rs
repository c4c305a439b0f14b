//! `parcae-host policy`: inspect and validate policy components, list and
//! export the embedded ones, and scaffold new ones.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Subcommand;

use crate::args::SandboxArgs;
use crate::embedded::{BUILTIN_POLICIES, BUILTIN_PREFIX, DEFAULT_POLICY, builtin_policy};
use crate::policies::load_component;
use crate::templates::{self, Lang};

/// The `policy` subcommands.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Report the WIT world a component implements, or why it does not fit.
    Check {
        /// Components to check (`.wasm` files or `builtin:NAME`).
        #[arg(required = true)]
        policies: Vec<String>,
        /// Budgets the components are loaded under.
        #[command(flatten)]
        sandbox: SandboxArgs,
    },
    /// List the policies embedded in this binary (`builtin:NAME`), with their
    /// worlds and what they do.
    List,
    /// Write an embedded policy to a `.wasm` file, to run, share or inspect
    /// like any other component (`parcae-host --policy FILE.wasm`).
    Export {
        /// The embedded policy (`NAME` or `builtin:NAME`; `policy list` names them).
        name: String,
        /// The file to write (default: NAME.wasm with `-` as `_`).
        #[arg(short, long, value_name = "FILE.wasm")]
        output: Option<PathBuf>,
    },
    /// Create a ready-to-build policy project: the WIT contract, the language's
    /// bindings setup, a persistence predictor with a throughput-optimal
    /// optimizer, a build script and a README.
    New {
        /// The policy's name (its package name, and the component NAME.wasm).
        name: String,
        /// The language to write it in.
        #[arg(long, value_enum)]
        lang: Lang,
        /// The directory to create (default: ./NAME); it must be absent or empty.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// Runs a `policy` subcommand.
pub fn run(command: &PolicyCommand) -> anyhow::Result<()> {
    match command {
        PolicyCommand::Check { policies, sandbox } => check(policies, sandbox),
        PolicyCommand::List => list(),
        PolicyCommand::Export { name, output } => export(name, output.as_deref()),
        PolicyCommand::New { name, lang, dir } => new(name, *lang, dir.as_deref()),
    }
}

/// `policy list`: every embedded policy, its world and what it does.
fn list() -> anyhow::Result<()> {
    let runtime = parcae_runtime::PolicyRuntime::new(parcae_runtime::SandboxLimits::default())?;
    let default = DEFAULT_POLICY.strip_prefix(BUILTIN_PREFIX).unwrap_or(DEFAULT_POLICY);
    let width = BUILTIN_POLICIES.iter().map(|p| p.name.len()).max().unwrap_or(0) + BUILTIN_PREFIX.len();
    for policy in BUILTIN_POLICIES {
        let spec = format!("{BUILTIN_PREFIX}{}", policy.name);
        let component = load_component(&runtime, &spec)?;
        println!(
            "{spec:<width$}  {:<16}  {:>4} KiB  {}{}",
            component.exports().world(),
            policy.bytes.len().div_ceil(1024),
            policy.description,
            if policy.name == default { " (default)" } else { "" }
        );
    }
    println!(
        "\nuse one as `--policy builtin:NAME` (a serving-policy one with a serving command); \
         `parcae-host policy export NAME -o FILE.wasm` writes it to a file"
    );
    Ok(())
}

/// `policy export`: writes an embedded component to a file.
fn export(name: &str, output: Option<&Path>) -> anyhow::Result<()> {
    let bare = name.strip_prefix(BUILTIN_PREFIX).unwrap_or(name);
    let Some(policy) = builtin_policy(bare) else {
        let names: Vec<&str> = BUILTIN_POLICIES.iter().map(|p| p.name).collect();
        anyhow::bail!(
            "no embedded policy '{bare}'; embedded: {} (see `parcae-host policy list`)",
            names.join(", ")
        );
    };
    let output =
        output.map_or_else(|| PathBuf::from(format!("{}.wasm", bare.replace('-', "_"))), Path::to_path_buf);
    std::fs::write(&output, policy.bytes).with_context(|| format!("writing {}", output.display()))?;
    println!("wrote {} ({} bytes, {}{})", output.display(), policy.bytes.len(), BUILTIN_PREFIX, policy.name);
    if policy.serving {
        println!(
            "next: parcae-host policy check {} (a serving policy: world serving-policy of {})",
            output.display(),
            parcae_runtime::SERVING_WIT_PACKAGE
        );
    } else {
        println!("next: parcae-host --policy {}", output.display());
    }
    Ok(())
}

/// `policy new`: writes a project from the language's template.
fn new(name: &str, lang: Lang, dir: Option<&Path>) -> anyhow::Result<()> {
    let dir = dir.map_or_else(|| PathBuf::from(name), Path::to_path_buf);
    let files = templates::scaffold(name, lang, &dir)?;
    println!(
        "created {} ({} policy, world full-policy of {}):",
        dir.display(),
        lang.as_str(),
        parcae_runtime::WIT_PACKAGE
    );
    for file in &files {
        println!("  {file}");
    }
    let wasm = dir.join(format!("{name}.wasm"));
    println!("next:");
    println!("  {}/build.sh", dir.display());
    println!("  parcae-host policy check {}", wasm.display());
    println!("  parcae-host bench --policy {}", wasm.display());
    Ok(())
}

/// `policy check`: loads each component and prints what it implements.
fn check(policies: &[String], sandbox: &SandboxArgs) -> anyhow::Result<()> {
    let runtime = sandbox.runtime()?;
    let mut failed = 0;
    for spec in policies {
        match load_component(&runtime, spec) {
            Ok(component) => {
                let exports = component.exports();
                println!("{spec}: ok, implements world {} of {}", exports.world(), exports.package());
                let exported = |yes: bool| if yes { "exported" } else { "-" };
                if exports.is_training() {
                    println!("  predictor: {}", exported(exports.predictor));
                    println!("  optimizer: {}", exported(exports.optimizer));
                }
                if exports.is_serving() {
                    println!("  configurator: exported (a serving policy, for `parcae-host bench-serve`)");
                }
                let stubbed = component.stubbed_imports();
                let (wasi, other): (Vec<_>, Vec<_>) = component
                    .imports()
                    .iter()
                    .filter(|i| !stubbed.contains(i))
                    .partition(|i| i.starts_with("wasi:"));
                for import in other {
                    println!("  imports {import}");
                }
                if !wasi.is_empty() {
                    println!("  imports {} WASI interfaces (linked, no capability granted)", wasi.len());
                }
                for import in stubbed {
                    println!("  imports {import} (not provided: a stub that traps if called)");
                }
            }
            Err(error) => {
                failed += 1;
                println!("{spec}: REJECTED: {}", parcae_logging::error_line(error.as_ref()));
            }
        }
    }
    anyhow::ensure!(failed == 0, "{failed} of {} components rejected", policies.len());
    Ok(())
}
