//! Per-store state of a guest and the limits that contain it.

use std::time::Duration;

use rand::SeedableRng;
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

/// What one policy may consume. Every call starts with a fresh fuel budget and
/// deadline; memory and tables are capped for the instance's whole life.
#[derive(Debug, Clone)]
pub struct SandboxLimits {
    /// Wasm fuel (roughly instructions) one call may burn. Deterministic: a
    /// policy that runs out does so on every machine.
    pub fuel_per_call: u64,
    /// Wall-clock backstop for one call, for host calls that burn no fuel.
    pub deadline_per_call: Duration,
    /// Linear memory of all the guest's memories together, bytes.
    pub memory_bytes: usize,
    /// Elements of all the guest's tables together.
    pub table_elements: usize,
    /// Core instances, tables and memories a component may create (a Python
    /// component holds several core instances).
    pub instances: usize,
    /// Tables a component may create.
    pub tables: usize,
    /// Memories a component may create.
    pub memories: usize,
    /// Log messages a guest may emit per call; the rest are dropped and counted.
    pub log_messages_per_call: u32,
    /// Longest log message kept, bytes; longer ones are truncated.
    pub log_message_bytes: usize,
    /// Fuel one `log` call costs before its bytes are counted: the host's work per
    /// message, charged even when the message is dropped.
    pub log_fuel_per_message: u64,
    /// Fuel each byte of a `log` message costs (all of it, not only the part kept):
    /// log traffic comes out of the call's fuel budget, so a guest that floods the
    /// host with messages runs out of fuel like one that loops.
    pub log_fuel_per_byte: u64,
    /// Guest stderr kept for fault reports (a Rust guest's panic message), bytes.
    pub stderr_bytes: usize,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            fuel_per_call: 2_000_000_000,
            deadline_per_call: Duration::from_secs(5),
            memory_bytes: 256 << 20,
            table_elements: 100_000,
            instances: 64,
            tables: 64,
            memories: 16,
            log_messages_per_call: 64,
            log_message_bytes: 1024,
            log_fuel_per_message: 10_000,
            log_fuel_per_byte: 1,
            stderr_bytes: 16 << 10,
        }
    }
}

/// How often the epoch ticker advances the engine's epoch.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

impl SandboxLimits {
    /// The call deadline expressed in epoch ticks (at least one).
    pub(crate) fn deadline_ticks(&self) -> u64 {
        (self.deadline_per_call.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64
    }
}

/// Caps memory and tables across all of a guest's memories and tables, and
/// remembers when it refused a growth so a later trap can be blamed on it.
pub(crate) struct GuestLimiter {
    limits: SandboxLimits,
    memory_in_use: usize,
    table_elements_in_use: usize,
    pub(crate) memory_refused: Option<usize>,
}

impl GuestLimiter {
    fn new(limits: SandboxLimits) -> Self {
        Self { limits, memory_in_use: 0, table_elements_in_use: 0, memory_refused: None }
    }
}

impl ResourceLimiter for GuestLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let growth = desired.saturating_sub(current);
        let total = self.memory_in_use.saturating_add(growth);
        if total > self.limits.memory_bytes || maximum.is_some_and(|max| desired > max) {
            self.memory_refused = Some(total);
            return Ok(false);
        }
        self.memory_in_use = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.table_elements_in_use.saturating_add(desired.saturating_sub(current));
        if total > self.limits.table_elements || maximum.is_some_and(|max| desired > max) {
            return Ok(false);
        }
        self.table_elements_in_use = total;
        Ok(true)
    }

    fn instances(&self) -> usize {
        self.limits.instances
    }

    fn tables(&self) -> usize {
        self.limits.tables
    }

    fn memories(&self) -> usize {
        self.limits.memories
    }
}

/// Everything one guest's Store holds.
pub(crate) struct GuestState {
    pub(crate) policy: std::sync::Arc<str>,
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: GuestLimiter,
    pub(crate) stderr: MemoryOutputPipe,
    pub(crate) logs_left: u32,
    pub(crate) logs_dropped: u32,
    pub(crate) log_allowance: u32,
    pub(crate) log_message_bytes: usize,
    /// `log` calls and their bytes in the current call (for fault reports).
    pub(crate) log_calls: u64,
    pub(crate) log_bytes: u64,
}

impl GuestState {
    pub(crate) fn new(policy: std::sync::Arc<str>, limits: &SandboxLimits) -> Self {
        let stderr = MemoryOutputPipe::new(limits.stderr_bytes);
        // Nothing is inherited or granted: no preopens, env, args, stdin or
        // network. Clocks are frozen and randomness seeded so that a policy
        // cannot make its decisions depend on when or where it runs.
        let wasi = WasiCtx::builder()
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .wall_clock(FrozenClock)
            .monotonic_clock(FrozenClock)
            .secure_random(rand::rngs::StdRng::seed_from_u64(0x5eed_0001))
            .insecure_random(rand::rngs::StdRng::seed_from_u64(0x5eed_0002))
            .insecure_random_seed(0x5eed_0003)
            .build();
        Self {
            policy,
            wasi,
            table: ResourceTable::new(),
            limiter: GuestLimiter::new(limits.clone()),
            stderr,
            logs_left: limits.log_messages_per_call,
            logs_dropped: 0,
            log_allowance: limits.log_messages_per_call,
            log_message_bytes: limits.log_message_bytes,
            log_calls: 0,
            log_bytes: 0,
        }
    }

    /// The limits this guest runs under.
    pub(crate) fn limits(&self) -> &SandboxLimits {
        &self.limiter.limits
    }

    /// The per-call deadline in epoch ticks.
    pub(crate) fn limiter_deadline_ticks(&self) -> u64 {
        self.limiter.limits.deadline_ticks()
    }

    /// The last bytes the guest wrote to stderr, as text, for fault reports.
    pub(crate) fn stderr_tail(&self) -> String {
        let bytes = self.stderr.contents();
        let text = String::from_utf8_lossy(&bytes);
        let text = text.trim();
        let start = text.len().saturating_sub(512);
        let start = (start..text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        text[start..].to_string()
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// A clock that never moves: time is not an input a policy may use.
struct FrozenClock;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}
