//! Loading components and checking them against the policy worlds: the
//! training worlds of `wit/policy.wit` and the serving world of
//! `wit/serving/serving.wit`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use wasmtime::component::{Component, InstancePre, Linker};
use wasmtime::{Config, Engine, OptLevel};

use crate::bindings::{OptimizerIndices, PredictorIndices};
use crate::cache::CompileCache;
use crate::instance::PolicyInstance;
use crate::sandbox::{EPOCH_TICK, GuestState, SandboxLimits};
use crate::serving::ConfiguratorIndices;

/// Export names of the two policy interfaces.
const PREDICTOR_EXPORT: &str = "parcae:policy/predictor@0.3.0";
const OPTIMIZER_EXPORT: &str = "parcae:policy/optimizer@0.3.0";
const LOG_IMPORT: &str = "parcae:policy/log@0.3.0";
const TYPES_IMPORT: &str = "parcae:policy/types@0.3.0";
/// Export name of the serving interface and the serving contract's imports.
const CONFIGURATOR_EXPORT: &str = "parcae:serving/configurator@0.1.0";
const SERVING_LOG_IMPORT: &str = "parcae:serving/log@0.1.0";
const SERVING_TYPES_IMPORT: &str = "parcae:serving/serving-types@0.1.0";

/// The contracts a component may implement: the prefix of their interface
/// names, the package this runtime implements, and its WIT file in this repository.
const CONTRACTS: [(&str, &str, &str); 2] = [
    ("parcae:policy/", crate::WIT_PACKAGE, "wit/policy.wit"),
    ("parcae:serving/", crate::SERVING_WIT_PACKAGE, "wit/serving/serving.wit"),
];

/// The WASI packages the sandbox links (wasmtime-wasi's p2 set), granting no
/// capability through them. A component importing another WASI package
/// (`wasi:http`, which a default componentize-js build imports for `fetch`)
/// gets those imports as stubs that trap when called (see
/// [`PolicyComponent::stubbed_imports`]).
const LINKED_WASI_PACKAGES: &[&str] =
    &["wasi:io/", "wasi:clocks/", "wasi:random/", "wasi:cli/", "wasi:filesystem/", "wasi:sockets/"];

/// Whether `import` is a WASI interface outside the linked set.
fn is_unlinked_wasi(import: &str) -> bool {
    import.starts_with("wasi:") && !LINKED_WASI_PACKAGES.iter().any(|p| import.starts_with(p))
}

/// Why a component could not be loaded as a policy.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The component file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The component file.
        path: PathBuf,
        /// The I/O failure.
        source: std::io::Error,
    },
    /// A core module was given where a component is needed (a common build mistake).
    #[error(
        "{name}: is a core WebAssembly module, not a component; build policies with \
         `cargo build --target wasm32-wasip2` (or componentize-py / jco)"
    )]
    CoreModule {
        /// The policy's name (its file or built-in name).
        name: String,
    },
    /// The bytes do not validate or compile as a component.
    #[error("{name}: not a valid WebAssembly component: {reason}")]
    Invalid {
        /// The policy's name.
        name: String,
        /// Wasmtime's message.
        reason: String,
    },
    /// The component implements no policy interface (or another version of one).
    #[error(
        "{name}: exports neither {PREDICTOR_EXPORT} nor {OPTIMIZER_EXPORT} (a training policy) \
         nor {CONFIGURATOR_EXPORT} (a serving policy){hint}; it exports: [{exports}]"
    )]
    NoPolicyExport {
        /// The policy's name.
        name: String,
        /// What it does export, comma-separated.
        exports: String,
        /// A note naming the version mismatch, when that is the cause (else empty).
        hint: String,
    },
    /// The component needs a host capability the sandbox withholds.
    #[error("{name}: imports {import}, which the policy sandbox does not provide: {reason}")]
    UnsupportedImport {
        /// The policy's name.
        name: String,
        /// The import's name.
        import: String,
        /// Why the linker refused it.
        reason: String,
    },
    /// An export exists under the right name but with the wrong types.
    #[error("{name}: export {export} does not match the WIT contract: {reason}")]
    SignatureMismatch {
        /// The policy's name.
        name: String,
        /// The mismatched export.
        export: &'static str,
        /// Wasmtime's type error.
        reason: String,
    },
    /// Instantiation itself faulted (trap, budget) before any call.
    #[error("{name}: {fault}")]
    Instantiate {
        /// The policy's name.
        name: String,
        /// The fault, classified.
        fault: crate::PolicyFault,
    },
    /// The engine could not be configured (a host problem, not the policy's).
    #[error("cannot set up the Wasm engine: {0}")]
    Engine(String),
}

/// Which interfaces a component exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exports {
    /// It forecasts availability (training `predictor` interface).
    pub predictor: bool,
    /// It chooses training configurations (training `optimizer` interface).
    pub optimizer: bool,
    /// It chooses serving configurations (serving `configurator` interface).
    pub configurator: bool,
}

impl Exports {
    /// Name of the WIT world these exports implement.
    pub fn world(self) -> &'static str {
        match (self.predictor, self.optimizer, self.configurator) {
            (true, true, false) => "full-policy",
            (true, false, false) => "predictor-policy",
            (false, true, false) => "optimizer-policy",
            (false, false, true) => "serving-policy",
            (false, false, false) => "none",
            // No world of either contract exports both; name what it does.
            (true, true, true) => "full-policy+serving-policy",
            (true, false, true) => "predictor-policy+serving-policy",
            (false, true, true) => "optimizer-policy+serving-policy",
        }
    }

    /// Whether it implements the training contract (a predictor or an optimizer).
    pub fn is_training(self) -> bool {
        self.predictor || self.optimizer
    }

    /// Whether it implements the serving contract (a configurator).
    pub fn is_serving(self) -> bool {
        self.configurator
    }

    /// The WIT package of the world it implements (the training one first).
    pub fn package(self) -> &'static str {
        if self.is_serving() && !self.is_training() { crate::SERVING_WIT_PACKAGE } else { crate::WIT_PACKAGE }
    }
}

/// The engine, linker and epoch ticker shared by every policy of a process.
/// Each loaded policy still gets its own Store (see [`PolicyInstance`]).
pub struct PolicyRuntime {
    engine: Engine,
    linker: Linker<GuestState>,
    limits: SandboxLimits,
    cache: Option<CompileCache>,
    ticker: Option<EpochTicker>,
}

impl PolicyRuntime {
    /// An engine with fuel and epoch interruption, and a linker that offers the
    /// guest only `parcae:policy/log`, `parcae:serving/log` and a capability-less WASI.
    pub fn new(limits: SandboxLimits) -> Result<Self, LoadError> {
        let engine_err = |e: wasmtime::Error| LoadError::Engine(format!("{e:#}"));
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .consume_fuel(true)
            .epoch_interruption(true)
            .cranelift_opt_level(OptLevel::Speed)
            .parallel_compilation(true);
        let engine = Engine::new(&config).map_err(engine_err)?;

        let mut linker = Linker::<GuestState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(engine_err)?;
        forbid_blocking(&mut linker).map_err(engine_err)?;
        crate::instance::add_log_to_linker(&mut linker, LOG_IMPORT).map_err(engine_err)?;
        crate::instance::add_log_to_linker(&mut linker, SERVING_LOG_IMPORT).map_err(engine_err)?;

        let ticker = EpochTicker::start(engine.clone())
            .map_err(|e| LoadError::Engine(format!("cannot start the epoch thread: {e}")))?;
        let ticker = Some(ticker);
        Ok(Self { engine, linker, limits, cache: None, ticker })
    }

    /// Keeps the machine code of components of at least
    /// [`CACHE_MIN_BYTES`](crate::CACHE_MIN_BYTES) in `dir` (created when
    /// needed), so that the next load of the same component, by this process
    /// or another with the same engine settings, skips compiling. `dir` must be
    /// writable by this user only: its entries are executed.
    pub fn with_compile_cache(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.cache = Some(CompileCache::new(dir.into(), &self.engine));
        self
    }

    /// The compile cache directory, if any.
    pub fn compile_cache(&self) -> Option<&Path> {
        self.cache.as_ref().map(CompileCache::dir)
    }

    /// The limits every policy loaded here runs under.
    pub fn limits(&self) -> &SandboxLimits {
        &self.limits
    }

    /// Load a policy component from a `.wasm` file.
    pub fn load_file(&self, path: &Path) -> Result<Arc<PolicyComponent>, LoadError> {
        let bytes =
            std::fs::read(path).map_err(|source| LoadError::Read { path: path.to_path_buf(), source })?;
        self.load_bytes(&path.display().to_string(), &bytes)
    }

    /// Load a policy component from bytes; `name` identifies it in reports.
    pub fn load_bytes(&self, name: &str, bytes: &[u8]) -> Result<Arc<PolicyComponent>, LoadError> {
        if !bytes.starts_with(b"\0asm") {
            return Err(LoadError::Invalid {
                name: name.to_string(),
                reason: "not a WebAssembly file (it does not start with the \\0asm magic bytes)".into(),
            });
        }
        if is_core_module(bytes) {
            return Err(LoadError::CoreModule { name: name.to_string() });
        }
        let compiled = match &self.cache {
            Some(cache) => cache.load(&self.engine, bytes),
            None => Component::new(&self.engine, bytes).map(|c| (c, false)),
        };
        let (component, from_cache) = compiled.map_err(|e| LoadError::Invalid {
            name: name.to_string(),
            // One line: wasmtime's messages may embed multi-line debug output.
            reason: format!("{e:#}").split_whitespace().collect::<Vec<_>>().join(" "),
        })?;
        self.check_and_link(name, component, from_cache)
    }

    fn check_and_link(
        &self,
        name: &str,
        component: Component,
        from_cache: bool,
    ) -> Result<Arc<PolicyComponent>, LoadError> {
        let ty = component.component_type();
        let export_names: Vec<String> = ty.exports(&self.engine).map(|(n, _)| n.to_string()).collect();
        let exports = Exports {
            predictor: export_names.iter().any(|n| n == PREDICTOR_EXPORT),
            optimizer: export_names.iter().any(|n| n == OPTIMIZER_EXPORT),
            configurator: export_names.iter().any(|n| n == CONFIGURATOR_EXPORT),
        };
        if !exports.is_training() && !exports.is_serving() {
            return Err(LoadError::NoPolicyExport {
                name: name.to_string(),
                exports: export_names.join(", "),
                hint: version_hint(&export_names),
            });
        }
        let imports: Vec<String> = ty.imports(&self.engine).map(|(n, _)| n.to_string()).collect();
        // WASI interfaces outside the linked set become trapping stubs, but only
        // when everything else the component imports is WASI or the policy
        // contract: a foreign import stays a load error naming it.
        let stubbed: Vec<String> = imports.iter().filter(|i| is_unlinked_wasi(i)).cloned().collect();
        let only_wasi_and_contract = imports.iter().all(|i| {
            i.starts_with("wasi:")
                || [LOG_IMPORT, TYPES_IMPORT, SERVING_LOG_IMPORT, SERVING_TYPES_IMPORT].contains(&i.as_str())
        });
        let stubbing_linker;
        let (linker, stubbed) = if !stubbed.is_empty() && only_wasi_and_contract {
            let mut linker = self.linker.clone();
            stub_unlinked_wasi(&mut linker, &self.engine, &component).map_err(|e| {
                LoadError::UnsupportedImport {
                    name: name.to_string(),
                    import: stubbed.join(", "),
                    reason: format!("cannot stub it: {e:#}"),
                }
            })?;
            stubbing_linker = linker;
            (&stubbing_linker, stubbed)
        } else {
            (&self.linker, Vec::new())
        };
        let pre = linker.instantiate_pre(&component).map_err(|e| {
            let reason = format!("{e:#}");
            let import = imports
                .iter()
                .find(|i| reason.contains(i.as_str()))
                .cloned()
                .unwrap_or_else(|| "an interface".to_string());
            LoadError::UnsupportedImport { name: name.to_string(), import, reason }
        })?;
        let mismatch = |export: &'static str| {
            move |e: wasmtime::Error| LoadError::SignatureMismatch {
                name: name.to_string(),
                export,
                reason: format!("{e:#}"),
            }
        };
        let predictor = exports
            .predictor
            .then(|| PredictorIndices::new(&pre).map_err(mismatch(PREDICTOR_EXPORT)))
            .transpose()?;
        let optimizer = exports
            .optimizer
            .then(|| OptimizerIndices::new(&pre).map_err(mismatch(OPTIMIZER_EXPORT)))
            .transpose()?;
        let configurator = exports
            .configurator
            .then(|| ConfiguratorIndices::new(&pre).map_err(mismatch(CONFIGURATOR_EXPORT)))
            .transpose()?;
        let policy = Arc::new(PolicyComponent {
            name: Arc::from(name),
            pre,
            predictor,
            optimizer,
            configurator,
            exports,
            imports,
            stubbed,
            from_cache,
            limits: self.limits.clone(),
        });
        // Instantiate once now so that type mismatches and failing start-up
        // code are load errors, not first-call surprises.
        PolicyInstance::new(policy.clone()).warm_up().map_err(|fault| match fault.kind {
            crate::FaultKind::Unsupported => LoadError::SignatureMismatch {
                name: name.to_string(),
                export: match fault.call {
                    "predict" => PREDICTOR_EXPORT,
                    "configure" => CONFIGURATOR_EXPORT,
                    _ => OPTIMIZER_EXPORT,
                },
                reason: fault.detail,
            },
            _ => LoadError::Instantiate { name: name.to_string(), fault },
        })?;
        Ok(policy)
    }
}

impl Drop for PolicyRuntime {
    fn drop(&mut self) {
        self.ticker.take();
    }
}

/// A loaded, linked and checked policy component. Cheap to instantiate.
pub struct PolicyComponent {
    pub(crate) name: Arc<str>,
    pub(crate) pre: InstancePre<GuestState>,
    pub(crate) predictor: Option<PredictorIndices>,
    pub(crate) optimizer: Option<OptimizerIndices>,
    pub(crate) configurator: Option<ConfiguratorIndices>,
    exports: Exports,
    imports: Vec<String>,
    stubbed: Vec<String>,
    from_cache: bool,
    pub(crate) limits: SandboxLimits,
}

impl PolicyComponent {
    /// The name it was loaded under (the file path for files).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The policy interfaces it exports.
    pub fn exports(&self) -> Exports {
        self.exports
    }

    /// Every interface it imports (WASI ones are linked but grant nothing).
    pub fn imports(&self) -> &[String] {
        &self.imports
    }

    /// The imports of WASI packages the sandbox does not link (e.g.
    /// `wasi:http`), satisfied by stubs that trap when called: the guest loads,
    /// and a call that reaches one faults and falls back.
    pub fn stubbed_imports(&self) -> &[String] {
        &self.stubbed
    }

    /// Whether its machine code came from the compile cache (see
    /// [`PolicyRuntime::with_compile_cache`]) rather than a compilation now.
    pub fn from_cache(&self) -> bool {
        self.from_cache
    }

    /// Whether it imports the host's log interface (of its contract).
    pub fn uses_log(&self) -> bool {
        self.imports.iter().any(|i| i == LOG_IMPORT || i == SERVING_LOG_IMPORT)
    }
}

/// When a component exports an interface of one of the contracts, but of
/// another version than this runtime implements: a note naming both versions
/// and the WIT file to rebuild against (else empty).
fn version_hint(export_names: &[String]) -> String {
    CONTRACTS
        .iter()
        .find_map(|&(prefix, implemented, wit)| {
            let export = export_names.iter().find(|n| n.starts_with(prefix))?;
            let version = export.rsplit_once('@').map_or("an unknown version", |(_, v)| v);
            let package = prefix.trim_end_matches('/');
            Some(format!(
                " (it exports {export}: it targets {package}@{version}, and this host implements \
                 {implemented}; rebuild it against this repository's {wit})"
            ))
        })
        .unwrap_or_default()
}

/// Whether `bytes` is a core module (layer 0) rather than a component (layer 1).
fn is_core_module(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[6..8] == [0, 0]
}

/// Replace WASI's blocking entry points (`poll`, `pollable.block`) with ones that
/// fail at once. Epoch deadlines interrupt Wasm code but not a host call that
/// sleeps, so without this a guest could hold the host in a `sleep`.
fn forbid_blocking(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut poll = linker.instance("wasi:io/poll@0.2.12")?;
    for func in ["poll", "[method]pollable.block"] {
        poll.func_new(func, |_store, _ty, _params, _results| {
            Err(wasmtime::Error::msg(crate::instance::BLOCKING_FORBIDDEN))
        })?;
    }
    linker.allow_shadowing(false);
    Ok(())
}

/// The host type behind every stubbed resource (never constructed: no stub
/// function returns one).
struct StubResource;

/// Defines, in `linker`, every function of `component`'s imports from WASI
/// packages outside [`LINKED_WASI_PACKAGES`] as a function that traps, and
/// every resource those interfaces introduce as an opaque host resource. A
/// resource such an interface only re-uses (`use wasi:io/streams.{input-stream}`
/// in `wasi:http/types`) is left to its owner's definition, so the linked WASI
/// types still match.
fn stub_unlinked_wasi(
    linker: &mut Linker<GuestState>,
    engine: &Engine,
    component: &Component,
) -> wasmtime::Result<()> {
    use wasmtime::component::ResourceType;
    use wasmtime::component::types::ComponentItem;
    let ty = component.component_type();
    // Resources already introduced by an earlier import, in import order.
    let mut seen: Vec<ResourceType> = Vec::new();
    for (import, item) in ty.imports(engine) {
        let ComponentItem::ComponentInstance(instance) = item.ty else { continue };
        let mut stub = if is_unlinked_wasi(import) { Some(linker.instance(import)?) } else { None };
        for (export, item) in instance.exports(engine) {
            match item.ty {
                ComponentItem::Resource(resource) => {
                    if seen.contains(&resource) {
                        continue;
                    }
                    seen.push(resource);
                    if let Some(stub) = &mut stub {
                        stub.resource(export, ResourceType::host::<StubResource>(), |_, _| Ok(()))?;
                    }
                }
                ComponentItem::ComponentFunc(_) => {
                    if let Some(stub) = &mut stub {
                        let message = format!(
                            "{import}#{export} was called: the policy sandbox does not provide {import}"
                        );
                        stub.func_new(export, move |_store, _ty, _params, _results| {
                            Err(wasmtime::Error::msg(message.clone()))
                        })?;
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Advances the engine's epoch every [`EPOCH_TICK`] so per-call deadlines fire.
struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    fn start(engine: Engine) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new().name("parcae-epoch".into()).spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(EPOCH_TICK);
                engine.increment_epoch();
            }
        })?;
        Ok(Self { stop, thread: Some(thread) })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The export names this file matches on belong to the packages the crate exports.
    #[test]
    fn export_names_carry_the_implemented_versions() {
        for name in [PREDICTOR_EXPORT, OPTIMIZER_EXPORT, LOG_IMPORT, TYPES_IMPORT] {
            assert!(name.ends_with(crate::WIT_PACKAGE.rsplit_once('@').unwrap().1), "{name}");
            assert!(name.starts_with("parcae:policy/"), "{name}");
        }
        for name in [CONFIGURATOR_EXPORT, SERVING_LOG_IMPORT, SERVING_TYPES_IMPORT] {
            assert!(name.ends_with(crate::SERVING_WIT_PACKAGE.rsplit_once('@').unwrap().1), "{name}");
            assert!(name.starts_with("parcae:serving/"), "{name}");
        }
    }

    #[test]
    fn another_version_of_either_contract_is_named_with_both_versions() {
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let serving = version_hint(&names(&["wasi:cli/run@0.2.0", "parcae:serving/configurator@0.2.0"]));
        assert!(serving.contains("it targets parcae:serving@0.2.0"), "{serving}");
        assert!(serving.contains("this host implements parcae:serving@0.1.0"), "{serving}");
        assert!(serving.contains("wit/serving/serving.wit"), "{serving}");
        let training = version_hint(&names(&["parcae:policy/optimizer@0.1.0"]));
        assert!(
            training.contains("targets parcae:policy@0.1.0, and this host implements parcae:policy@0.3.0")
        );
        assert_eq!(version_hint(&names(&["wasi:cli/run@0.2.0"])), "");
    }

    #[test]
    fn worlds_and_packages() {
        let exports = |predictor, optimizer, configurator| Exports { predictor, optimizer, configurator };
        assert_eq!(exports(true, true, false).world(), "full-policy");
        assert_eq!(exports(false, false, true).world(), "serving-policy");
        assert_eq!(exports(false, false, true).package(), crate::SERVING_WIT_PACKAGE);
        assert_eq!(exports(false, true, false).package(), crate::WIT_PACKAGE);
        assert!(!exports(false, false, true).is_training());
    }
}
