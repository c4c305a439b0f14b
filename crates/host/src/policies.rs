//! Turning command-line policy arguments into components and [`GuardedPolicy`]s.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use parcae_runtime::{GuardedPolicy, PolicyComponent, PolicyRuntime};

use crate::embedded::{BUILTIN_POLICIES, BUILTIN_PREFIX, builtin_policy};

/// Load one policy argument: a path to a `.wasm` component or `builtin:NAME`.
pub fn load_policy(runtime: &PolicyRuntime, spec: &str) -> anyhow::Result<Arc<PolicyComponent>> {
    if let Some(name) = spec.strip_prefix(BUILTIN_PREFIX) {
        let Some(builtin) = builtin_policy(name) else {
            let names: Vec<&str> = BUILTIN_POLICIES.iter().map(|p| p.name).collect();
            bail!("unknown built-in policy '{name}'; available: {}", names.join(", "));
        };
        return Ok(runtime.load_bytes(spec, builtin.bytes)?);
    }
    Ok(runtime.load_file(Path::new(spec))?)
}

/// The components that serve each policy interface (`None`: the built-in
/// fallback serves it). Loaded (compiled) once; [`PolicySet::guarded`] makes
/// as many fresh instances as a command needs.
#[derive(Clone)]
pub struct PolicySet {
    /// Serves `predict`.
    pub predictor: Option<Arc<PolicyComponent>>,
    /// Serves `optimize`.
    pub optimizer: Option<Arc<PolicyComponent>>,
}

impl PolicySet {
    /// One component serving every interface it exports.
    pub fn of(component: &Arc<PolicyComponent>) -> PolicySet {
        let exports = component.exports();
        PolicySet {
            predictor: exports.predictor.then(|| component.clone()),
            optimizer: exports.optimizer.then(|| component.clone()),
        }
    }

    /// Loads `policy` (serves every interface it exports) and the more
    /// specific `predictor` / `optimizer`, which take precedence.
    pub fn load(
        runtime: &PolicyRuntime,
        policy: Option<&str>,
        predictor: Option<&str>,
        optimizer: Option<&str>,
    ) -> anyhow::Result<PolicySet> {
        let main = policy.map(|spec| load_policy(runtime, spec)).transpose()?;
        let pick = |spec: Option<&str>, wanted: fn(&PolicyComponent) -> bool, role: &str| match spec {
            Some(spec) => {
                let component = load_policy(runtime, spec)?;
                if !wanted(&component) {
                    bail!(
                        "{spec} does not export the {role} interface (its world is {})",
                        component.exports().world()
                    );
                }
                Ok(Some(component))
            }
            None => Ok(main.clone().filter(|c| wanted(c))),
        };
        let predictor =
            pick(predictor, |c| c.exports().predictor, "predictor").context("loading the predictor")?;
        let optimizer =
            pick(optimizer, |c| c.exports().optimizer, "optimizer").context("loading the optimizer")?;
        Ok(PolicySet { predictor, optimizer })
    }

    /// A fresh guarded policy over these components (new instances, zero counters).
    pub fn guarded(&self) -> GuardedPolicy {
        GuardedPolicy::new(self.predictor.clone(), self.optimizer.clone())
    }
}
