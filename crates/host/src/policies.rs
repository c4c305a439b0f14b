//! Turning command-line policy arguments into components, [`GuardedPolicy`]s
//! (training) and [`GuardedServingPolicy`]s (serving).

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use parcae_runtime::{
    GuardedPolicy, GuardedServingPolicy, PolicyComponent, PolicyRuntime, SERVING_WIT_PACKAGE, WIT_PACKAGE,
};

use crate::embedded::{BUILTIN_POLICIES, BUILTIN_PREFIX, builtin_policy};

/// The worlds a training command accepts, for its errors.
const TRAINING_WORLDS: &str = "full-policy, predictor-policy or optimizer-policy";
/// The world a serving command accepts, for its errors.
const SERVING_WORLD: &str = "serving-policy";

/// Load one training policy argument (a path to a `.wasm` component or
/// `builtin:NAME`); a serving component is refused, naming the worlds expected.
pub fn load_policy(runtime: &PolicyRuntime, spec: &str) -> anyhow::Result<Arc<PolicyComponent>> {
    load_expecting(runtime, spec, false)
}

/// Load one serving policy argument (a path to a `.wasm` component or
/// `builtin:NAME`, e.g. `builtin:spotserve`); a training component is refused,
/// naming the world expected. Loaded (compiled) once: make as many
/// [`GuardedServingPolicy`]s of it as a command needs.
pub fn load_serving_component(spec: &str, runtime: &PolicyRuntime) -> anyhow::Result<Arc<PolicyComponent>> {
    load_expecting(runtime, spec, true)
}

/// [`load_component`], refusing a component of the other contract than `serving` says.
fn load_expecting(
    runtime: &PolicyRuntime,
    spec: &str,
    serving: bool,
) -> anyhow::Result<Arc<PolicyComponent>> {
    let component = load_component(runtime, spec)?;
    let exports = component.exports();
    let (fits, other, needed, worlds, package) = if serving {
        (exports.is_serving(), "training", "serving", SERVING_WORLD, SERVING_WIT_PACKAGE)
    } else {
        (exports.is_training(), "serving", "training", TRAINING_WORLDS, WIT_PACKAGE)
    };
    if !fits {
        bail!(
            "{spec} implements world {} of {}: it is a {other} policy, and this command needs a \
             {needed} policy (world {worlds} of {package})",
            exports.world(),
            exports.package()
        );
    }
    Ok(component)
}

/// A serving policy argument, guarded: every answer validated, SpotServe's
/// optimizer when the guest faults, quarantine after 3 faults in a row.
pub fn load_serving(spec: &str, runtime: &PolicyRuntime) -> anyhow::Result<GuardedServingPolicy> {
    Ok(GuardedServingPolicy::new(load_serving_component(spec, runtime)?))
}

/// Load one component of any world: a path to a `.wasm` component or `builtin:NAME`.
pub fn load_component(runtime: &PolicyRuntime, spec: &str) -> anyhow::Result<Arc<PolicyComponent>> {
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
