//! The wasmtime engine and how one call runs.
//!
//! One [`Engine`] for the process: component model, the pooling allocator with
//! copy-on-write memory images, epoch interruption driven by a ticker thread.
//! One [`Prepared`] (an `InstancePre`) per release, built once. One fresh
//! [`wasmtime::Store`] per call, dropped after it: nothing a call leaves in
//! memory reaches the next.
//!
//! This module decides nothing about whether a call may run: the gate did that
//! before. It gives a call exactly the [`CallPlan`] it was handed.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
pub use wasmtime::Engine;
use wasmtime::component::{Component, HasSelf, InstancePre, Linker, ResourceTable};
use wasmtime::{
    InstanceAllocationStrategy, PoolingAllocationConfig, Store, StoreLimits, StoreLimitsBuilder, Trap, UpdateDeadline,
};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::caps;
use crate::config::Config;
use crate::gate::Pass;

pub use crate::bindings::AppError;
use crate::bindings::app as bindings;

/// The most a guest may write to its stdout and stderr in one call; the rest is
/// dropped. Guards the host's memory against a guest that prints forever.
pub const GUEST_OUTPUT_CAP: usize = 64 * 1024;

/// How much of a freed instance's linear memory is reset in place (only the
/// pages it wrote, found with PAGEMAP_SCAN) instead of returned to the kernel.
const MEMORY_KEEP_RESIDENT: usize = 2 << 20;

/// The same for its tables.
const TABLE_KEEP_RESIDENT: usize = 64 << 10;

/// Everything one call is given, decided before it starts.
pub struct CallPlan {
    /// When the call must have ended: waiting for a slot or for the app's
    /// write permit counts towards it.
    pub deadline: Instant,
    /// The app's store, opened for this call in the mode the effect allows.
    pub store: caps::store::CallStore,
    pub log: caps::log::CallLog,
    pub network: caps::network::CallNetwork,
    pub files: caps::files::CallFiles,
    pub spawn: caps::spawn::CallSpawn,
}

/// The state of one call's [`Store`].
pub struct CallState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    limits: StoreLimits,
    pub(crate) store: caps::store::CallStore,
    pub(crate) log: caps::log::CallLog,
    pub(crate) network: caps::network::CallNetwork,
    pub(crate) spawn: caps::spawn::CallSpawn,
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.network }
    }
}

/// Every interface of the world, for every component: what a call was not
/// given answers with a denial at run time, never a link error. Each of our
/// interfaces is added by its capability, given a projection of the call's
/// state onto that capability's per-call value.
fn link(linker: &mut Linker<CallState>) -> anyhow::Result<()> {
    use bindings::autoapp::app;
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    app::types::add_to_linker::<CallState, HasSelf<CallState>>(linker, |s| s)?;
    caps::store::add_to_linker(linker, |s| &mut s.store)?;
    caps::log::add_to_linker(linker, |s| &mut s.log)?;
    caps::spawn::add_to_linker(linker, |s| &mut s.spawn)?;
    Ok(())
}

/// The `types` interface has no functions.
impl bindings::autoapp::app::types::Host for CallState {}

/// A component compiled for this engine.
pub struct Compiled(Component);

/// A release's component, linked and ready to instantiate many times.
#[derive(Clone)]
pub struct Prepared {
    pre: InstancePre<CallState>,
    /// Where each interface's functions are, found once per release: a call
    /// looks up (and type-checks) only the functions of the interface it
    /// calls.
    routes: Arc<bindings::exports::autoapp::app::routes::GuestIndices>,
    views: Arc<bindings::exports::autoapp::app::views::GuestIndices>,
}

/// How a call ended.
#[derive(Debug)]
pub enum Outcome {
    /// The route (or view) answered; the text is what it returned.
    Ok(String),
    /// The guest returned an error value.
    Error(AppError),
    /// The guest was stopped: a trap, its deadline, a limit.
    Trap(Stopped),
}

/// Why a guest was stopped.
#[derive(Debug, Clone)]
pub enum Stopped {
    Deadline(Duration),
    StackOverflow,
    Trap { message: String, stderr_tail: String },
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stopped::Deadline(d) => write!(f, "ran past its deadline of {} ms and was stopped", d.as_millis()),
            Stopped::StackOverflow => f.write_str("overflowed its stack and was stopped"),
            Stopped::Trap { message, stderr_tail } => {
                write!(f, "trapped ({message})")?;
                if let Some(line) = last_words(stderr_tail) {
                    write!(f, " after printing \"{line}\"")?;
                }
                Ok(())
            }
        }
    }
}

/// The line of a guest's stderr that says most about why it stopped: a Rust
/// panic's message, else the last line that is not a hint.
fn last_words(tail: &str) -> Option<String> {
    let lines: Vec<&str> = tail.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let pick = lines
        .iter()
        .rev()
        .position(|l| l.contains("panicked at"))
        .map(|i| {
            let at = lines.len() - 1 - i;
            // Rust prints the location on one line and the message on the next.
            match lines.get(at + 1) {
                Some(next) if !next.starts_with("note:") => format!("{} {next}", lines[at]),
                _ => lines[at].to_string(),
            }
        })
        .or_else(|| lines.iter().rev().find(|l| !l.starts_with("note:")).map(|l| l.to_string()))?;
    let pick: String = pick.chars().take(300).collect();
    Some(crate::sanitize::secrets(&pick).into_owned())
}

/// The process's wasmtime engine, linker and epoch ticker.
pub struct Runtime {
    engine: Engine,
    linker: Linker<CallState>,
    config: Config,
    ticker: Arc<AtomicBool>,
    /// The pooling allocator's instance slots: a call takes one before it
    /// instantiates and waits (asynchronously, in arrival order) when all
    /// are taken, instead of failing to instantiate.
    slots: Arc<tokio::sync::Semaphore>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker.store(true, Ordering::Relaxed);
    }
}

impl Runtime {
    pub fn new(config: &Config) -> anyhow::Result<Runtime> {
        let mut wc = wasmtime::Config::new();
        wc.wasm_component_model(true);
        wc.epoch_interruption(true);
        wc.max_wasm_stack(config.stack_max_bytes());
        wc.memory_init_cow(true);
        let mut pool = PoolingAllocationConfig::default();
        let slots = config.max_instances;
        pool.total_component_instances(slots);
        // A component is several core instances; Rust guests use a handful,
        // dynamic-language runtimes a dozen or more.
        pool.total_core_instances(slots.saturating_mul(16));
        pool.total_memories(slots.saturating_mul(2));
        pool.total_tables(slots.saturating_mul(4));
        pool.total_stacks(slots);
        pool.max_memory_size(config.memory_max_bytes());
        pool.table_elements(100_000);
        pool.max_component_instance_size(1 << 20);
        pool.max_core_instance_size(1 << 20);
        // A freed instance's memory and tables are put back to their original
        // contents page by page: the kernel's PAGEMAP_SCAN (Linux 6.7+) finds
        // the pages the call wrote, and only those are copied back from the
        // image or zeroed, up to the amounts below; past them (and where the
        // kernel lacks the scan) the rest is given back with `madvise`. Pages
        // stay mapped, so the next instance takes no page faults for them and
        // no other core is interrupted to flush its TLB (docs/performance.md).
        pool.pagemap_scan(wasmtime::Enabled::Auto);
        pool.linear_memory_keep_resident(MEMORY_KEEP_RESIDENT);
        pool.table_keep_resident(TABLE_KEEP_RESIDENT);
        wc.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&wc).map_err(anyhow::Error::from).context("cannot start the WebAssembly engine")?;

        let mut linker: Linker<CallState> = Linker::new(&engine);
        link(&mut linker).context("cannot link the host's interfaces")?;

        let ticker = Arc::new(AtomicBool::new(false));
        {
            let engine = engine.clone();
            let stop = ticker.clone();
            let tick = config.epoch_tick();
            std::thread::Builder::new()
                .name("autoapp-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(tick);
                        engine.increment_epoch();
                    }
                })
                .context("cannot start the epoch ticker")?;
        }
        let slots = Arc::new(tokio::sync::Semaphore::new(config.max_instances as usize));
        Ok(Runtime { engine, linker, config: config.clone(), ticker, slots })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Compiles `wasm`, or loads the code compiled for it earlier from
    /// `cache_dir` (keyed by the component's hash and this engine).
    pub fn compile_cached(&self, cache_dir: &Path, wasm: &[u8]) -> anyhow::Result<Compiled> {
        use sha2::Digest as _;
        let sha = hex::encode(sha2::Sha256::digest(wasm));
        let path = cache_dir.join(format!("{sha}-{}.cwasm", self.compatibility_key()));
        if path.is_file()
            && let Ok(c) = self.load_compiled(&path)
        {
            return Ok(Compiled(c));
        }
        let compiled = self.engine.precompile_component(wasm)?;
        crate::root::write_atomic(&path, &compiled)?;
        Ok(Compiled(self.load_compiled(&path)?))
    }

    /// A hex name for this engine's compiled code: artifacts of another engine
    /// configuration or wasmtime version are never loaded.
    fn compatibility_key(&self) -> String {
        use sha2::Digest as _;
        use std::hash::{Hash as _, Hasher as _};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut h);
        let digest = sha2::Sha256::digest(h.finish().to_le_bytes());
        hex::encode(&digest[..8])
    }

    /// Loads compiled code that `compile_cached` wrote to `path`.
    fn load_compiled(&self, path: &Path) -> anyhow::Result<Component> {
        // SAFETY: `path` is only ever a file in the root's compile cache, written
        // by `compile_cached` of an engine with the same compatibility key (it is
        // in the file name), through an atomic rename; nothing else writes there.
        // wasmtime also checks the artifact's header against this engine.
        #[allow(unsafe_code)]
        unsafe {
            Ok(Component::deserialize_file(&self.engine, path)?)
        }
    }

    /// Links `component` and checks that it exports the world's interfaces.
    pub fn prepare(&self, component: &Compiled) -> anyhow::Result<Prepared> {
        let pre: InstancePre<CallState> = self.linker.instantiate_pre(&component.0)?;
        // The whole world's exports are checked here, once.
        bindings::AppPre::new(pre.clone())?;
        let routes = Arc::new(bindings::exports::autoapp::app::routes::GuestIndices::new(&pre)?);
        let views = Arc::new(bindings::exports::autoapp::app::views::GuestIndices::new(&pre)?);
        Ok(Prepared { pre, routes, views })
    }

    /// The import names of `component` (interfaces, with versions).
    pub fn imports(&self, component: &Compiled) -> Vec<String> {
        component.0.component_type().imports(&self.engine).map(|(n, _)| n.to_string()).collect()
    }

    /// The export names of `component`.
    pub fn exports(&self, component: &Compiled) -> Vec<String> {
        component.0.component_type().exports(&self.engine).map(|(n, _)| n.to_string()).collect()
    }

    /// Runs `entry` (a route or a page) in a fresh instance with what `plan`
    /// gives. Guest code runs only with a [`Pass`] from the gate.
    pub async fn run(&self, _pass: &Pass, prepared: &Prepared, plan: CallPlan, entry: Entry<'_>) -> (Outcome, Settle) {
        let deadline_len = self.config.call_deadline();
        let deadline = plan.deadline;
        // A slot of the pool; when all are taken, waited for until the
        // call's deadline (no timer at all when one is free).
        let slot = match self.slots.try_acquire() {
            Ok(slot) => Ok(slot),
            Err(_) => match tokio::time::timeout_at(deadline.into(), self.slots.acquire()).await {
                Ok(Ok(slot)) => Ok(slot),
                _ => Err(()),
            },
        };
        let Ok(_slot) = slot else {
            let busy = format!(
                "the host is running {} calls at once, its most (max_instances); try again",
                self.config.max_instances
            );
            return (Outcome::Error(AppError::Conflict(busy)), Settle { store: plan.store, log: plan.log });
        };
        let stderr = caps::log::GuestOutput::new(GUEST_OUTPUT_CAP);
        let mut wasi = WasiCtx::builder();
        wasi.stderr(stderr.clone());
        // No sockets, no name lookups, no preopens, no environment, no args:
        // everything a call reaches is given explicitly below.
        wasi.allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false);
        plan.files.apply(&mut wasi);
        let state = CallState {
            wasi: wasi.build(),
            http: WasiHttpCtx::new(),
            table: ResourceTable::new(),
            limits: StoreLimitsBuilder::new()
                .memory_size(self.config.memory_max_bytes())
                .trap_on_grow_failure(false)
                .build(),
            store: plan.store,
            log: plan.log,
            network: plan.network,
            spawn: plan.spawn,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        store.epoch_deadline_callback(move |_| {
            if Instant::now() >= deadline {
                Ok(UpdateDeadline::Interrupt)
            } else {
                // Let other calls on this thread run once per tick.
                Ok(UpdateDeadline::Yield(1))
            }
        });
        store.set_epoch_deadline(1);

        let work = async {
            let instance = prepared.pre.instantiate_async(&mut store).await?;
            match entry {
                Entry::Route { route, input } => {
                    prepared.routes.load(&mut store, &instance)?.call_handle(&mut store, route, input).await
                }
                Entry::View { page, query } => {
                    prepared.views.load(&mut store, &instance)?.call_render(&mut store, page, query).await
                }
            }
        };
        // The epoch stops guest code; this also bounds time spent waiting in
        // the host on the guest's behalf (a slow network peer, say).
        let result = match tokio::time::timeout_at((deadline + Duration::from_millis(250)).into(), work).await {
            Ok(r) => r,
            Err(_) => Err(wasmtime::Error::from(Trap::Interrupt)),
        };
        let outcome = match result {
            Ok(Ok(text)) => Outcome::Ok(text),
            Ok(Err(app_error)) => Outcome::Error(app_error),
            Err(e) => Outcome::Trap(classify(&e, deadline_len, &stderr)),
        };
        let state = store.into_data();
        (outcome, Settle { store: state.store, log: state.log })
    }
}

/// What a call runs: a route of `routes` or a page of `views`.
#[derive(Debug, Clone, Copy)]
pub enum Entry<'a> {
    Route { route: &'a str, input: &'a str },
    View { page: &'a str, query: &'a str },
}

/// What a finished call hands back for the caller to settle: the store (to
/// commit or roll back) and the log (to count dropped lines).
pub struct Settle {
    pub store: caps::store::CallStore,
    pub log: caps::log::CallLog,
}

fn classify(e: &wasmtime::Error, deadline: Duration, stderr: &caps::log::GuestOutput) -> Stopped {
    match e.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => Stopped::Deadline(deadline),
        Some(Trap::StackOverflow) => Stopped::StackOverflow,
        Some(t) => Stopped::Trap { message: t.to_string(), stderr_tail: stderr.tail() },
        None => {
            // A host function failed in a way the guest cannot handle, or
            // instantiation failed; keep the first line only (no paths).
            let message = e.to_string().lines().next().unwrap_or("unknown error").to_string();
            Stopped::Trap { message, stderr_tail: stderr.tail() }
        }
    }
}
