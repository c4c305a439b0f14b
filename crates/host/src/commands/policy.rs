//! `parcae-host policy`: inspect and validate policy components.

use clap::Subcommand;

use crate::args::SandboxArgs;
use crate::policies::load_policy;

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
}

/// Runs a `policy` subcommand.
pub fn run(command: &PolicyCommand) -> anyhow::Result<()> {
    match command {
        PolicyCommand::Check { policies, sandbox } => check(policies, sandbox),
    }
}

/// `policy check`: loads each component and prints what it implements.
fn check(policies: &[String], sandbox: &SandboxArgs) -> anyhow::Result<()> {
    let runtime = sandbox.runtime()?;
    let mut failed = 0;
    for spec in policies {
        match load_policy(&runtime, spec) {
            Ok(component) => {
                let exports = component.exports();
                println!(
                    "{spec}: ok, implements world {} of {}",
                    exports.world(),
                    parcae_runtime::WIT_PACKAGE
                );
                println!("  predictor: {}", if exports.predictor { "exported" } else { "-" });
                println!("  optimizer: {}", if exports.optimizer { "exported" } else { "-" });
                let (wasi, other): (Vec<_>, Vec<_>) =
                    component.imports().iter().partition(|i| i.starts_with("wasi:"));
                for import in other {
                    println!("  imports {import}");
                }
                if !wasi.is_empty() {
                    println!("  imports {} WASI interfaces (linked, no capability granted)", wasi.len());
                }
            }
            Err(error) => {
                failed += 1;
                println!("{spec}: REJECTED: {error:#}");
            }
        }
    }
    anyhow::ensure!(failed == 0, "{failed} of {} components rejected", policies.len());
    Ok(())
}
