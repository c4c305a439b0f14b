//! Loading components and checking them against the policy world.

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

/// Export names of the two policy interfaces.
const PREDICTOR_EXPORT: &str = "parcae:policy/predictor@0.3.0";
const OPTIMIZER_EXPORT: &str = "parcae:policy/optimizer@0.3.0";
const LOG_IMPORT: &str = "parcae:policy/log@0.3.0";
const TYPES_IMPORT: &str = "parcae:policy/types@0.3.0";

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
    /// The component implements neither policy interface (or an old version of one).
    #[error(
        "{name}: exports neither {PREDICTOR_EXPORT} nor {OPTIMIZER_EXPORT}{hint}; \
         it exports: [{exports}]"
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
    /// It forecasts availability (`predictor` interface).
    pub predictor: bool,
    /// It chooses configurations (`optimizer` interface).
    pub optimizer: bool,
}

impl Exports {
    /// Name of the WIT world these exports implement.
    pub fn world(self) -> &'static str {
        match (self.predictor, self.optimizer) {
            (true, true) => "full-policy",
            (true, false) => "predictor-policy",
            (false, true) => "optimizer-policy",
            (false, false) => "none",
        }
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
    /// guest only `parcae:policy/log` and a capability-less WASI.
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
        };
        if !exports.predictor && !exports.optimizer {
            let other_version = export_names.iter().find(|n| n.starts_with("parcae:policy/"));
            let hint = other_version
                .map(|n| {
                    let version = n.rsplit_once('@').map_or("an unknown version", |(_, v)| v);
                    format!(
                        " (it exports {n}: it targets parcae:policy@{version}, and this host implements {}; \
                         rebuild it against this repository's wit/policy.wit)",
                        crate::WIT_PACKAGE
                    )
                })
                .unwrap_or_default();
            return Err(LoadError::NoPolicyExport {
                name: name.to_string(),
                exports: export_names.join(", "),
                hint,
            });
        }
        let imports: Vec<String> = ty.imports(&self.engine).map(|(n, _)| n.to_string()).collect();
        // WASI interfaces outside the linked set become trapping stubs, but only
        // when everything else the component imports is WASI or the policy
        // contract: a foreign import stays a load error naming it.
        let stubbed: Vec<String> = imports.iter().filter(|i| is_unlinked_wasi(i)).cloned().collect();
        let only_wasi_and_contract =
            imports.iter().all(|i| i.starts_with("wasi:") || i == LOG_IMPORT || i == TYPES_IMPORT);
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
        let policy = Arc::new(PolicyComponent {
            name: Arc::from(name),
            pre,
            predictor,
            optimizer,
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
                export: if fault.call == "predict" { PREDICTOR_EXPORT } else { OPTIMIZER_EXPORT },
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

    /// Whether it imports the host's log interface.
    pub fn uses_log(&self) -> bool {
        self.imports.iter().any(|i| i == LOG_IMPORT)
    }
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
