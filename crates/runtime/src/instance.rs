//! One live policy: its Store, its exports, and the containment of each call.

use std::sync::Arc;

use parcae_policy_core::wit_convert::Convert;
use parcae_policy_core::{self as core, validate};
use wasmtime::component::{Linker, WasmStr};
use wasmtime::{Store, StoreContextMut};

use crate::bindings::{OptimizerExport, PredictorExport, log};
use crate::component::PolicyComponent;
use crate::fault::{FaultKind, PolicyFault};
use crate::sandbox::GuestState;
use crate::serving::ConfiguratorExport;

/// Error text of the trapping replacements of WASI's blocking calls.
pub(crate) const BLOCKING_FORBIDDEN: &str =
    "policies may not block: wasi:io/poll is disabled in the policy sandbox";

/// Longest guest-provided text kept in a fault report, bytes.
const DETAIL_BYTES: usize = 600;

/// A policy's running instance. Calls run under fresh budgets; after a fault the
/// instance is discarded (a trapped instance cannot be entered again) and the
/// next call re-instantiates from the pre-linked component. A serving
/// component's calls go through [`ServingInstance`](crate::ServingInstance),
/// which runs them here.
pub struct PolicyInstance {
    component: Arc<PolicyComponent>,
    live: Option<Live>,
    last_fuel_used: u64,
}

pub(crate) struct Live {
    pub(crate) store: Store<GuestState>,
    predictor: Option<PredictorExport>,
    optimizer: Option<OptimizerExport>,
    pub(crate) configurator: Option<ConfiguratorExport>,
}

impl PolicyInstance {
    /// An instance of `component`; instantiation happens on the first call.
    pub fn new(component: Arc<PolicyComponent>) -> Self {
        Self { component, live: None, last_fuel_used: 0 }
    }

    /// The component this instance runs.
    pub fn component(&self) -> &Arc<PolicyComponent> {
        &self.component
    }

    /// Fuel the last successful or failed call consumed.
    pub fn last_fuel_used(&self) -> u64 {
        self.last_fuel_used
    }

    /// Instantiate now (normally done lazily by the first call).
    pub fn warm_up(&mut self) -> Result<(), PolicyFault> {
        self.live()?;
        Ok(())
    }

    /// Ask the guest for a forecast; the answer is validated against `request`.
    pub fn predict(
        &mut self,
        request: &core::PredictRequest,
    ) -> Result<Vec<core::IntervalStats>, PolicyFault> {
        const CALL: &str = "predict";
        let wit_request = request.clone().convert();
        let answer = self.call(CALL, |live| match &live.predictor {
            Some(export) => Ok(export.call_predict(&mut live.store, &wit_request)),
            None => Err(FaultKind::Unsupported),
        })?;
        let forecast: Vec<core::IntervalStats> = answer.convert();
        validate::check_forecast(request, &forecast)
            .map_err(|e| self.fault(CALL, FaultKind::InvalidAnswer, e.to_string()))?;
        Ok(forecast)
    }

    /// Ask the guest for a plan; the answer is validated against `request`.
    pub fn optimize(&mut self, request: &core::OptimizeRequest) -> Result<core::Plan, PolicyFault> {
        const CALL: &str = "optimize";
        let wit_request = request.clone().convert();
        let answer = self.call(CALL, |live| match &live.optimizer {
            Some(export) => Ok(export.call_optimize(&mut live.store, &wit_request)),
            None => Err(FaultKind::Unsupported),
        })?;
        let plan: core::Plan = answer.convert();
        validate::check_plan(request, &plan)
            .map_err(|e| self.fault(CALL, FaultKind::InvalidAnswer, e.to_string()))?;
        Ok(plan)
    }

    /// Run one export call under fresh budgets and turn every way it can fail
    /// into a [`PolicyFault`].
    pub(crate) fn call<R>(
        &mut self,
        call: &'static str,
        invoke: impl FnOnce(&mut Live) -> Result<wasmtime::Result<Result<R, String>>, FaultKind>,
    ) -> Result<R, PolicyFault> {
        let fuel = self.component.limits.fuel_per_call;
        let live = self.live()?;
        arm(&mut live.store, fuel)?;
        let outcome = invoke(live);
        let live = self.live.as_mut().expect("instance is live during a call");
        self.last_fuel_used = fuel.saturating_sub(live.store.get_fuel().unwrap_or(0));
        report_dropped_logs(live.store.data_mut());
        match outcome {
            Ok(Ok(Ok(answer))) => Ok(answer),
            // A guest whose engine turns a refused memory growth into an error
            // of its own (a JavaScript "out of memory") hit the memory limit.
            Ok(Ok(Err(message))) => match memory_limit(live.store.data()) {
                Some(detail) => Err(self.fault(
                    call,
                    FaultKind::MemoryLimit,
                    format!("{detail}; the guest reported: {}", clip(&message)),
                )),
                None => Err(self.fault(call, FaultKind::GuestError, clip(&message).to_string())),
            },
            Ok(Err(error)) => {
                let (kind, detail) = classify(&error, live.store.data());
                // A trapped instance is poisoned: start afresh next call.
                self.live = None;
                Err(self.fault(call, kind, detail))
            }
            Err(kind) => {
                Err(self.fault(call, kind, format!("the component does not export the {call} interface")))
            }
        }
    }

    /// The live instance, instantiating it if needed.
    fn live(&mut self) -> Result<&mut Live, PolicyFault> {
        if self.live.is_none() {
            self.live = Some(self.instantiate()?);
        }
        Ok(self.live.as_mut().expect("just instantiated"))
    }

    fn instantiate(&mut self) -> Result<Live, PolicyFault> {
        const CALL: &str = "instantiate";
        let component = &self.component;
        let mut store =
            Store::new(component.pre.engine(), GuestState::new(component.name.clone(), &component.limits));
        store.limiter(|state| &mut state.limiter);
        arm(&mut store, component.limits.fuel_per_call)?;
        let instance = match component.pre.instantiate(&mut store) {
            Ok(instance) => instance,
            Err(error) => {
                let (kind, detail) = classify(&error, store.data());
                return Err(self.fault(CALL, kind, detail));
            }
        };
        // Each export the component was checked to have, looked up in this instance.
        let this: &Self = self;
        let unsupported =
            |call| move |e: wasmtime::Error| this.fault(call, FaultKind::Unsupported, format!("{e:#}"));
        let predictor = component.predictor.as_ref().map(|i| i.load(&mut store, &instance));
        let optimizer = component.optimizer.as_ref().map(|i| i.load(&mut store, &instance));
        let configurator = component.configurator.as_ref().map(|i| i.load(&mut store, &instance));
        Ok(Live {
            predictor: predictor.transpose().map_err(unsupported("predict"))?,
            optimizer: optimizer.transpose().map_err(unsupported("optimize"))?,
            configurator: configurator.transpose().map_err(unsupported("configure"))?,
            store,
        })
    }

    pub(crate) fn fault(&self, call: &'static str, kind: FaultKind, detail: String) -> PolicyFault {
        PolicyFault { policy: self.component.name.to_string(), call, kind, detail }
    }
}

/// Give the store a fresh fuel budget, deadline and log allowance.
fn arm(store: &mut Store<GuestState>, fuel: u64) -> Result<(), PolicyFault> {
    store.set_fuel(fuel).map_err(|e| PolicyFault {
        policy: store.data().policy.to_string(),
        call: "instantiate",
        kind: FaultKind::Trap,
        detail: format!("cannot set fuel: {e:#}"),
    })?;
    let ticks = store.data().limiter_deadline_ticks();
    store.set_epoch_deadline(ticks);
    let state = store.data_mut();
    state.limiter.memory_refused = None;
    state.logs_left = state.log_allowance;
    state.logs_dropped = 0;
    state.log_calls = 0;
    state.log_bytes = 0;
    Ok(())
}

fn report_dropped_logs(state: &mut GuestState) {
    if state.logs_dropped > 0 {
        tracing::warn!(
            target: "parcae::guest",
            policy = %state.policy,
            dropped = state.logs_dropped,
            "policy logged more than its per-call allowance; messages dropped"
        );
    }
}

/// Name the cause of a failed call. A refused memory growth is blamed first:
/// guests usually react to it with a trap of their own (an allocator abort).
fn classify(error: &wasmtime::Error, state: &GuestState) -> (FaultKind, String) {
    let stderr = state.stderr_tail();
    let with_stderr = |detail: String| {
        if stderr.is_empty() { detail } else { format!("{detail}; guest stderr: {}", clip(&stderr)) }
    };
    let limits = state.limits();
    if let Some(detail) = memory_limit(state) {
        return (FaultKind::MemoryLimit, detail);
    }
    match error.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::OutOfFuel) => {
            let mut detail = format!("used its whole budget of {} fuel units", limits.fuel_per_call);
            if state.log_calls > 0 {
                detail.push_str(&format!(
                    ", with {} log calls of {} bytes in all (each costs {} fuel units plus {} per byte)",
                    state.log_calls, state.log_bytes, limits.log_fuel_per_message, limits.log_fuel_per_byte
                ));
            }
            (FaultKind::FuelExhausted, detail)
        }
        Some(wasmtime::Trap::Interrupt) => {
            (FaultKind::DeadlineExceeded, format!("still running after {:?}", limits.deadline_per_call))
        }
        Some(trap) => (FaultKind::Trap, with_stderr(trap.to_string())),
        None => {
            let text = format!("{error:#}");
            if text.contains(BLOCKING_FORBIDDEN) {
                (FaultKind::Blocked, BLOCKING_FORBIDDEN.to_string())
            } else {
                (FaultKind::Trap, with_stderr(clip(&text).to_string()))
            }
        }
    }
}

/// What the limiter refused during the call, if it refused a memory growth.
fn memory_limit(state: &GuestState) -> Option<String> {
    state.limiter.memory_refused.map(|requested| {
        format!(
            "asked for {} MiB of memory in total, the limit is {} MiB",
            requested >> 20,
            state.limits().memory_bytes >> 20
        )
    })
}

/// At most [`DETAIL_BYTES`] of guest-controlled text, cut on a char boundary.
fn clip(text: &str) -> &str {
    clip_to(text, DETAIL_BYTES)
}

/// At most `bytes` of `text`, cut on a char boundary.
fn clip_to(text: &str, bytes: usize) -> &str {
    let mut end = text.len().min(bytes);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Links `parcae:policy/log` (instance `import`): every call is charged against the
/// call's fuel budget before anything else happens, at
/// [`SandboxLimits::log_fuel_per_message`](crate::SandboxLimits) plus
/// [`SandboxLimits::log_fuel_per_byte`](crate::SandboxLimits) for each byte of the message
/// (the whole message, not only the part kept). A guest that floods the host with log
/// traffic thus runs out of fuel (a `fuel-exhausted` fault, then the fallback and
/// quarantine) instead of holding the control loop for as long as the copying takes.
/// The message is read in place from the guest's memory; only the kept prefix is copied.
pub(crate) fn add_log_to_linker(linker: &mut Linker<GuestState>, import: &str) -> wasmtime::Result<()> {
    let mut instance = linker.instance(import)?;
    instance.func_wrap(
        "log",
        |mut store: StoreContextMut<'_, GuestState>, (level, message): (log::Level, WasmStr)| {
            let (bytes, kept) = {
                let text = message.to_str(&store)?;
                let keep = store.data().log_message_bytes;
                (text.len(), (store.data().logs_left > 0).then(|| clip_to(&text, keep).to_string()))
            };
            charge_log(&mut store, bytes)?;
            store.data_mut().emit_log(level, kept);
            Ok(())
        },
    )
}

/// Takes a log call's fuel from the budget, or ends the call as out of fuel.
fn charge_log(store: &mut StoreContextMut<'_, GuestState>, bytes: usize) -> wasmtime::Result<()> {
    let (per_message, per_byte) = {
        let limits = store.data().limits();
        (limits.log_fuel_per_message, limits.log_fuel_per_byte)
    };
    let state = store.data_mut();
    state.log_calls += 1;
    state.log_bytes = state.log_bytes.saturating_add(bytes as u64);
    let cost = per_message.saturating_add(per_byte.saturating_mul(bytes as u64));
    let left = store.get_fuel()?;
    if cost > left {
        store.set_fuel(0)?;
        return Err(wasmtime::Trap::OutOfFuel.into());
    }
    store.set_fuel(left - cost)?;
    Ok(())
}

impl GuestState {
    /// Emits one guest log message (already clipped), or counts it dropped once the
    /// per-call allowance is spent.
    fn emit_log(&mut self, level: log::Level, message: Option<String>) {
        let Some(message) = message.filter(|_| self.logs_left > 0) else {
            self.logs_dropped += 1;
            return;
        };
        self.logs_left -= 1;
        let policy = &*self.policy;
        match level {
            log::Level::Trace => tracing::trace!(target: "parcae::guest", policy, "{message}"),
            log::Level::Debug => tracing::debug!(target: "parcae::guest", policy, "{message}"),
            log::Level::Info => tracing::info!(target: "parcae::guest", policy, "{message}"),
            log::Level::Warn => tracing::warn!(target: "parcae::guest", policy, "{message}"),
            log::Level::Error => tracing::error!(target: "parcae::guest", policy, "{message}"),
        }
    }
}
