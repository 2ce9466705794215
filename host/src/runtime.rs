//! The wasmtime engine and how one call runs.
//!
//! One [`Engine`] for the process: component model, the pooling allocator with
//! copy-on-write memory images, epoch interruption driven by a ticker thread
//! that ticks while any store exists (a call's, a spare's) and sleeps, waking
//! nobody, while none does.
//! One [`Prepared`] (an `InstancePre`) per release, built once. One fresh
//! [`wasmtime::Store`] per call, dropped after it: nothing a call leaves in
//! memory reaches the next.
//!
//! An instance is made with nothing given: code a component runs while it is
//! instantiated (a start function) finds no store, no log, no network, no
//! programs, no folders. The call's [`CallPlan`] is given to the instance
//! after, just before the route is entered. So an instance can be made ahead
//! of the call that will use it: after each call, one thread of the process
//! (`autoapp-instances`) makes the release's next instances (*spares*, never
//! used by any call; [`SPARES_EACH`] per release, so that each has a whole
//! call's time to be made) and frees the used one, off the calls' path.
//! Spares are few ([`SPARES_MOST`]), freed when unused for [`SPARE_KEEP`],
//! and given up at once when a call finds no free instance slot.
//!
//! This module decides nothing about whether a call may run: the gate did that
//! before. It gives a call exactly the [`CallPlan`] it was handed.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::sync::OwnedSemaphorePermit;
pub use wasmtime::Engine;
use wasmtime::component::{Component, HasSelf, Instance, InstancePre, Linker, ResourceTable};
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

/// The most instances made ahead of calls at once (of all releases): each
/// holds an instance slot and a little memory.
const SPARES_MOST: usize = 8;

/// The most instances made ahead of one release's calls. Calls that come
/// one after another each take the spare made while the call before last
/// ran, which has had a whole call's time to be made: with one spare, a
/// call right after another came before its spare was ready and made its
/// own instance in 58 of 100 calls, with two in 27 (measured,
/// docs/performance.md).
const SPARES_EACH: usize = 2;

/// How long a spare waits for a call before it is freed.
const SPARE_KEEP: Duration = Duration::from_secs(10);

/// How often the instance thread looks for spares kept too long.
const SPARE_SWEEP: Duration = Duration::from_secs(1);

/// The longest a spare's instantiation may take. Instantiating runs no guest
/// code for most components; one whose start function runs longer gets no
/// spares (its calls instantiate as they come, under their own deadlines).
const SPARE_MAKING_MOST: Duration = Duration::from_millis(100);

/// The longest the instance thread looks for its next job before it
/// sleeps. It looks for twice the time jobs have lately been apart (an
/// average of the last few gaps, each counted as at most
/// [`INSTANCE_GAP_MOST`]), up to this: calls that come one after another
/// find their instance made without paying to wake the thread (on a virtual
/// machine, about 8 µs of the caller's time per wake-up, measured), and
/// calls that come seldom cost no looking at all.
const INSTANCE_THREAD_SPIN: Duration = Duration::from_micros(500);

/// The most one gap between jobs counts for in that average, so that after
/// a pause the thread looks again within a few jobs.
const INSTANCE_GAP_MOST: Duration = Duration::from_millis(1);

/// The most jobs the instance thread may have waiting. A call that finds
/// this many frees its used instance itself and asks for no spare: when the
/// thread falls behind (it shares two cores with the calls and the stores'
/// checkpoints), used instances would otherwise pile up in its queue, each
/// holding an instance slot, until calls wait for slots (measured: 101 of
/// 3,000 writes one after another waited, every slot held by the queue).
const JOBS_MOST: usize = 4;

/// How many times in a row making a release's spare may fail (or be slow)
/// before none is tried again for it.
const SPARE_FAILURES_MOST: usize = 3;

/// A spare's making that takes longer than this counts as a failure.
const SPARE_SLOW: Duration = Duration::from_millis(20);

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
    pub(crate) store: caps::store::Given,
    pub(crate) log: caps::log::CallLog,
    pub(crate) network: caps::network::CallNetwork,
    pub(crate) spawn: caps::spawn::CallSpawn,
    /// Keeps the epoch ticker ticking while this store lives.
    _ticking: Ticking,
}

/// The epoch ticker's state: the thread `autoapp-epoch` advances the
/// engine's epoch every tick while any store exists, and sleeps while none
/// does, so an idle host wakes nobody (before: 200 wake-ups a second).
/// Every store is made by [`unarmed`], which counts it ([`Ticking`]).
#[derive(Default)]
struct Ticker {
    /// Stores alive now.
    stores: AtomicUsize,
    /// The thread is asleep, or about to be, with no store to tick for.
    idle: AtomicBool,
    stop: AtomicBool,
    /// The thread, set by itself before it first sleeps.
    thread: std::sync::OnceLock<std::thread::Thread>,
    /// Ticks so far (read by tests).
    ticks: std::sync::atomic::AtomicU64,
}

impl Ticker {
    /// Counts one more store for as long as the answer lives, waking the
    /// thread when it sleeps.
    fn ticking(self: &Arc<Self>) -> Ticking {
        // Counted before `idle` is read, and the thread sets `idle` before it
        // reads the count again: one of the two sees the other (SeqCst).
        self.stores.fetch_add(1, Ordering::SeqCst);
        if self.idle.load(Ordering::SeqCst)
            && let Some(t) = self.thread.get()
        {
            t.unpark();
        }
        Ticking(self.clone())
    }

    fn serve(&self, engine: &Engine, tick: Duration) {
        self.thread.get_or_init(std::thread::current);
        while !self.stop.load(Ordering::SeqCst) {
            if self.stores.load(Ordering::SeqCst) == 0 {
                self.idle.store(true, Ordering::SeqCst);
                if self.stores.load(Ordering::SeqCst) == 0 && !self.stop.load(Ordering::SeqCst) {
                    // An unpark that came first makes this return at once.
                    std::thread::park();
                }
                self.idle.store(false, Ordering::SeqCst);
                continue;
            }
            std::thread::sleep(tick);
            engine.increment_epoch();
            self.ticks.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Ends the thread.
    fn end(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }
}

/// One store counted by the [`Ticker`].
struct Ticking(Arc<Ticker>);

impl Drop for Ticking {
    fn drop(&mut self) {
        self.0.stores.fetch_sub(1, Ordering::SeqCst);
    }
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
    // Debug builds only (`tests/all/tidy.rs`): the probe a test's guest
    // imports to play a runtime escape from its own call (`crate::probe`).
    #[cfg(debug_assertions)]
    linker
        .instance(crate::probe::INTERFACE)?
        .func_wrap(crate::probe::FUNCTION, |_, (asked,): (String,)| Ok((crate::probe::answer(&asked),)))?;
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
    /// This release's instances made ahead of its next calls, if any.
    spare: Arc<SpareCell>,
}

/// Where a release's spares wait, the oldest first.
#[derive(Default)]
struct SpareCell {
    ready: Mutex<std::collections::VecDeque<Spare>>,
    /// Times in a row making a spare failed or was slow (a start function
    /// that traps or runs long); from [`SPARE_FAILURES_MOST`] on, none is
    /// made for this release.
    failures: AtomicUsize,
}

/// An instance made ahead of a call, given nothing yet.
struct Spare {
    store: Store<CallState>,
    instance: Instance,
    stderr: caps::log::GuestOutput,
    slot: OwnedSemaphorePermit,
    made: Instant,
    _counted: Counted,
}

/// Counts a spare among [`Spares::live`] while it exists.
struct Counted(Arc<Spares>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The spares of the process.
#[derive(Default)]
struct Spares {
    /// Every release's cell (weakly: a release unloaded takes its spare
    /// with it). Held while a spare is put in a cell and while spares are
    /// given up, so that neither misses the other.
    cells: Mutex<Vec<Weak<SpareCell>>>,
    /// Spares that exist.
    live: AtomicUsize,
    /// Calls waiting for an instance slot: no spare is kept meanwhile.
    waiting: AtomicUsize,
}

impl Spares {
    /// Frees every spare (their slots go back to the pool), or only those
    /// made before `before`.
    fn give_up(&self, before: Option<Instant>) {
        let mut freed = Vec::new();
        let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        cells.retain(|weak| {
            let Some(cell) = weak.upgrade() else { return false };
            let mut spares = cell.ready.lock().unwrap_or_else(|p| p.into_inner());
            // The oldest first: those made before `before` are at the front.
            while spares.front().is_some_and(|s| before.is_none_or(|b| s.made < b)) {
                freed.extend(spares.pop_front());
            }
            true
        });
        drop(cells);
        drop(freed);
    }
}

/// Counts a call among those waiting for a slot while it waits.
struct Waiting<'a>(&'a Spares);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Work for the instance thread.
struct Job {
    pre: InstancePre<CallState>,
    cell: Arc<SpareCell>,
    /// A call's instance, to free after the spare is made.
    used: Option<(Store<CallState>, OwnedSemaphorePermit)>,
}

/// What the instance thread needs of the runtime.
struct Maker {
    engine: Engine,
    config: Config,
    ticker: Arc<Ticker>,
    slots: Arc<tokio::sync::Semaphore>,
    spares: Arc<Spares>,
    /// Jobs sent and not yet done ([`JOBS_MOST`]).
    queued: Arc<AtomicUsize>,
    /// Held by a test to keep the thread from its jobs.
    #[cfg(test)]
    hold: Arc<Mutex<()>>,
}

/// How far apart the instance thread's jobs have lately been.
#[derive(Default)]
struct Gaps {
    /// The average gap, in nanoseconds (each new gap weighs an eighth).
    average: u64,
}

impl Gaps {
    /// How long to look for the next job before sleeping: twice the
    /// average gap, or nothing when that is longer than
    /// [`INSTANCE_THREAD_SPIN`].
    fn look(&self) -> Duration {
        let look = Duration::from_nanos(self.average.saturating_mul(2));
        if look <= INSTANCE_THREAD_SPIN { look } else { Duration::ZERO }
    }

    /// One more gap: the time from the end of a job to the next one (or to
    /// the sweep's timeout).
    fn saw(&mut self, gap: Duration) {
        let gap = u64::try_from(gap.min(INSTANCE_GAP_MOST).as_nanos()).unwrap_or(u64::MAX);
        self.average = (self.average.saturating_mul(7).saturating_add(gap)) / 8;
    }
}

impl Maker {
    /// Runs until the runtime is dropped.
    fn serve(self, jobs: std::sync::mpsc::Receiver<Job>) {
        use std::sync::mpsc::RecvTimeoutError;
        // Work ahead of calls takes a core only when no call needs it: a
        // woken instance thread never preempts the call that woke it. (No
        // id: this thread alone, on Linux; a worker's filter allows no
        // other.)
        let _ = rustix::process::setpriority_process(None, 19);
        // Tasks that instantiating starts (a stream's worker, when a start
        // function takes stderr) must go on running after it, while a call
        // uses the spare: a runtime with a worker thread of its own.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("autoapp-instances-io")
            .enable_all()
            .build();
        let Ok(rt) = runtime else {
            // No spares; calls instantiate as they come, and used instances
            // are freed here as they arrive.
            while let Ok(job) = jobs.recv() {
                drop(job);
                self.queued.fetch_sub(1, Ordering::AcqRel);
            }
            return;
        };
        let mut swept = Instant::now();
        let mut gaps = Gaps::default();
        loop {
            // Calls that come one after another send a job every few tens of
            // microseconds: look for the next for a moment before sleeping,
            // so that neither the sender pays a wake-up nor the spare comes
            // late by one.
            let spun = Instant::now();
            let look = gaps.look();
            let mut next = jobs.try_recv();
            while matches!(next, Err(std::sync::mpsc::TryRecvError::Empty)) && spun.elapsed() < look {
                std::hint::spin_loop();
                next = jobs.try_recv();
            }
            let next = match next {
                Ok(job) => Ok(job),
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
                Err(std::sync::mpsc::TryRecvError::Empty) => jobs.recv_timeout(SPARE_SWEEP),
            };
            gaps.saw(spun.elapsed());
            match next {
                Ok(Job { pre, cell, used }) => {
                    #[cfg(test)]
                    drop(self.hold.lock());
                    let _in = rt.enter();
                    self.make(&rt, &pre, &cell);
                    drop(used);
                    self.queued.fetch_sub(1, Ordering::AcqRel);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if swept.elapsed() >= SPARE_SWEEP {
                swept = Instant::now();
                self.spares.give_up(Instant::now().checked_sub(SPARE_KEEP));
            }
        }
    }

    /// Makes spares for `cell` until it holds [`SPARES_EACH`], while there
    /// is room for one and no call waits for a slot. Each is put in the cell
    /// as soon as it is made, for a call that comes meanwhile.
    fn make(&self, rt: &tokio::runtime::Runtime, pre: &InstancePre<CallState>, cell: &Arc<SpareCell>) {
        for _ in 0..SPARES_EACH {
            if !self.make_one(rt, pre, cell) {
                return;
            }
        }
    }

    /// Makes one spare for `cell` when it holds fewer than [`SPARES_EACH`],
    /// there is room for one, and no call waits for a slot; says whether it
    /// was made and kept.
    fn make_one(&self, rt: &tokio::runtime::Runtime, pre: &InstancePre<CallState>, cell: &Arc<SpareCell>) -> bool {
        let spares = &self.spares;
        let room = cell.ready.lock().map(|s| s.len() < SPARES_EACH).unwrap_or(false);
        if !room
            || cell.failures.load(Ordering::Acquire) >= SPARE_FAILURES_MOST
            || spares.live.load(Ordering::Acquire) >= SPARES_MOST
            || spares.waiting.load(Ordering::Acquire) > 0
        {
            return false;
        }
        let Ok(slot) = self.slots.clone().try_acquire_owned() else { return false };
        let deadline = Instant::now() + SPARE_MAKING_MOST;
        let (mut store, stderr) = unarmed(&self.engine, &self.config, &self.ticker, deadline);
        let began = Instant::now();
        let made =
            rt.block_on(async { tokio::time::timeout_at(deadline.into(), pre.instantiate_async(&mut store)).await });
        let Ok(Ok(instance)) = made else {
            cell.failures.fetch_add(1, Ordering::AcqRel);
            return false;
        };
        // A start function that runs long holds up this thread (and the
        // freeing of every app's used instances): a slow making counts as a
        // failure, though the spare is kept; a quick one clears the count.
        if began.elapsed() > SPARE_SLOW {
            cell.failures.fetch_add(1, Ordering::AcqRel);
        } else {
            cell.failures.store(0, Ordering::Release);
        }
        spares.live.fetch_add(1, Ordering::AcqRel);
        let spare = Spare { store, instance, stderr, slot, made: Instant::now(), _counted: Counted(spares.clone()) };
        let cells = spares.cells.lock().unwrap_or_else(|p| p.into_inner());
        if spares.waiting.load(Ordering::Acquire) == 0 {
            let mut there = cell.ready.lock().unwrap_or_else(|p| p.into_inner());
            if there.len() < SPARES_EACH {
                there.push_back(spare);
                return true;
            }
        }
        drop(cells);
        false
    }
}

/// A store with nothing given: no store, no log, no network, no programs,
/// no folders, no sockets; only a stderr kept for the call's report.
fn unarmed(
    engine: &Engine,
    config: &Config,
    ticker: &Arc<Ticker>,
    deadline: Instant,
) -> (Store<CallState>, caps::log::GuestOutput) {
    let stderr = caps::log::GuestOutput::new(GUEST_OUTPUT_CAP);
    let state = CallState {
        wasi: wasi_ctx(&stderr, &caps::files::CallFiles::none()),
        http: WasiHttpCtx::new(),
        table: ResourceTable::new(),
        limits: StoreLimitsBuilder::new().memory_size(config.memory_max_bytes()).trap_on_grow_failure(false).build(),
        store: caps::store::Given(None),
        log: caps::log::CallLog::none(),
        network: caps::network::CallNetwork::none(),
        spawn: caps::spawn::CallSpawn::none(false),
        _ticking: ticker.ticking(),
    };
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limits);
    until(&mut store, deadline);
    (store, stderr)
}

/// WASI as a call sees it: `stderr` kept; no sockets, no name lookups, no
/// environment, no args; the folders `files` gives and nothing else.
fn wasi_ctx(stderr: &caps::log::GuestOutput, files: &caps::files::CallFiles) -> WasiCtx {
    let mut wasi = WasiCtx::builder();
    wasi.stderr(stderr.clone());
    wasi.allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false);
    files.apply(&mut wasi);
    wasi.build()
}

/// Guest code in `store` is stopped at `deadline`, and lets other calls on
/// its thread run once per epoch tick until then.
fn until(store: &mut Store<CallState>, deadline: Instant) {
    store.epoch_deadline_callback(move |_| {
        if Instant::now() >= deadline { Ok(UpdateDeadline::Interrupt) } else { Ok(UpdateDeadline::Yield(1)) }
    });
    store.set_epoch_deadline(1);
}

/// Gives an instance's store what `plan` gives the call.
fn arm(store: &mut Store<CallState>, stderr: &caps::log::GuestOutput, plan: CallPlan) {
    let state = store.data_mut();
    // The store was made by `unarmed` with this very context (no folders,
    // this `stderr`): made again only for a call given folders (a
    // measurable part of a write's own cost otherwise, docs/performance.md).
    if !plan.files.is_empty() {
        state.wasi = wasi_ctx(stderr, &plan.files);
    }
    state.store = caps::store::Given(Some(plan.store));
    state.log = plan.log;
    state.network = plan.network;
    state.spawn = plan.spawn;
    until(store, plan.deadline);
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

mod compile;
pub use compile::{Budget, COMPILE_COMMAND, NOT_IN_CACHE, compile_main};

/// What the engine compiles code for, whoever compiles it: the launcher's
/// engine (with its pooling allocator) and the process that compiles a
/// component from elsewhere ([`compile`]) make the same code, so the one
/// loads what the other compiled.
fn engine_settings(stack_max_bytes: usize) -> wasmtime::Config {
    let mut wc = wasmtime::Config::new();
    wc.wasm_component_model(true);
    wc.epoch_interruption(true);
    wc.max_wasm_stack(stack_max_bytes);
    wc.memory_init_cow(true);
    wc
}

/// The process's wasmtime engine, linker and epoch ticker.
pub struct Runtime {
    engine: Engine,
    linker: Linker<CallState>,
    config: Config,
    ticker: Arc<Ticker>,
    /// The pooling allocator's instance slots: a call takes one before it
    /// instantiates and waits (asynchronously, in arrival order) when all
    /// are taken, instead of failing to instantiate.
    slots: Arc<tokio::sync::Semaphore>,
    spares: Arc<Spares>,
    /// The instance thread's work; none when it could not be started.
    jobs: Option<std::sync::mpsc::Sender<Job>>,
    /// Jobs sent to it and not yet done.
    queued: Arc<AtomicUsize>,
    /// Whether a component whose code the cache lacks is compiled (in a
    /// process of its own); an app's worker, which may not write the cache,
    /// answers [`NOT_IN_CACHE`] instead.
    compiles: bool,
    #[cfg(test)]
    hold: Arc<Mutex<()>>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker.end();
    }
}

/// The settings of a runtime's engine for `config`: [`engine_settings`]
/// and its pooling allocator.
fn engine_config(config: &Config) -> wasmtime::Config {
    let mut wc = engine_settings(config.stack_max_bytes());
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
    wc
}

/// The key of the engine a runtime for `config` makes, which names the
/// code it compiled (`<sha>-<key>.cwasm`): code of another key (another
/// version of autoapp, other settings) it never loads (`autoapp prune`).
pub fn engine_key(config: &Config) -> anyhow::Result<String> {
    let engine = Engine::new(&engine_config(config)).map_err(anyhow::Error::from)?;
    Ok(key_of(&engine))
}

fn key_of(engine: &Engine) -> String {
    use sha2::Digest as _;
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    let digest = sha2::Sha256::digest(h.finish().to_le_bytes());
    hex::encode(&digest[..8])
}

impl Runtime {
    pub fn new(config: &Config) -> anyhow::Result<Runtime> {
        let wc = engine_config(config);
        let engine = Engine::new(&wc).map_err(anyhow::Error::from).context("cannot start the WebAssembly engine")?;

        let mut linker: Linker<CallState> = Linker::new(&engine);
        link(&mut linker).context("cannot link the host's interfaces")?;

        let ticker = Arc::new(Ticker::default());
        {
            let engine = engine.clone();
            let ticker = ticker.clone();
            let tick = config.epoch_tick();
            std::thread::Builder::new()
                .name("autoapp-epoch".into())
                .spawn(move || ticker.serve(&engine, tick))
                .context("cannot start the epoch ticker")?;
        }
        let slots = Arc::new(tokio::sync::Semaphore::new(config.max_instances as usize));
        let spares = Arc::new(Spares::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        #[cfg(test)]
        let hold = Arc::new(Mutex::new(()));
        let maker = Maker {
            engine: engine.clone(),
            config: config.clone(),
            ticker: ticker.clone(),
            slots: slots.clone(),
            spares: spares.clone(),
            queued: queued.clone(),
            #[cfg(test)]
            hold: hold.clone(),
        };
        let jobs = std::thread::Builder::new()
            .name("autoapp-instances".into())
            .spawn(move || maker.serve(rx))
            .map_err(|e| tracing::warn!("no instances are made ahead of calls: {e}"))
            .ok()
            .map(|_| tx);
        Ok(Runtime {
            engine,
            linker,
            config: config.clone(),
            ticker,
            slots,
            spares,
            jobs,
            queued,
            compiles: true,
            #[cfg(test)]
            hold,
        })
    }

    /// A runtime that never compiles: code the cache lacks is an error
    /// saying [`NOT_IN_CACHE`] (an app's worker, whose process may only read
    /// the cache: its parent compiles it — `autoapp call` then starts it
    /// again, a launcher answers its ask, `apps::Compiler`).
    pub fn without_compiling(mut self) -> Runtime {
        self.compiles = false;
        self
    }

    /// Whether it compiles what the cache lacks ([`Runtime::without_compiling`]).
    pub fn compiles(&self) -> bool {
        self.compiles
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Where the code compiled for `wasm` by this engine is kept in
    /// `cache_dir` (keyed by the component's hash and this engine).
    /// Where the code compiled for `wasm` is (or would be) in `cache_dir`.
    pub fn compiled_path(&self, cache_dir: &Path, wasm: &[u8]) -> std::path::PathBuf {
        use sha2::Digest as _;
        let sha = hex::encode(sha2::Sha256::digest(wasm));
        cache_dir.join(format!("{sha}-{}.cwasm", self.compatibility_key()))
    }

    /// Forgets the code compiled for `wasm` in `cache_dir`: a component
    /// refused after it was compiled leaves nothing behind.
    pub fn forget_compiled(&self, cache_dir: &Path, wasm: &[u8]) {
        let _ = std::fs::remove_file(self.compiled_path(cache_dir, wasm));
    }

    /// Whether code compiled for `wasm` is in `cache_dir` already.
    pub fn is_compiled(&self, cache_dir: &Path, wasm: &[u8]) -> bool {
        self.compiled_path(cache_dir, wasm).is_file()
    }

    /// Compiles `wasm`, or loads the code compiled for it earlier from
    /// `cache_dir` (keyed by the component's hash and this engine).
    pub fn compile_cached(&self, cache_dir: &Path, wasm: &[u8]) -> anyhow::Result<Compiled> {
        let path = self.compiled_path(cache_dir, wasm);
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
        key_of(&self.engine)
    }

    /// Loads compiled code that `compile_cached` wrote to `path`.
    fn load_compiled(&self, path: &Path) -> anyhow::Result<Component> {
        // SAFETY: `path` is only ever a file in the root's compile cache, written
        // through an atomic rename by `compile_cached` of an engine with the same
        // compatibility key (it is in the file name), or by `compile_elsewhere`
        // from the confined compiling process (`runtime::compile`), whose engine
        // has the same compile settings; nothing else writes there. wasmtime
        // also checks the artifact's header against this engine. What the
        // confined process made from a hostile component is trusted as much as
        // the compiler it ran: the budget bounds exhaustion, not a compiler bug
        // exploited there (docs/security.md says so).
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
        let spare = Arc::new(SpareCell::default());
        let mut cells = self.spares.cells.lock().unwrap_or_else(|p| p.into_inner());
        cells.retain(|c| c.strong_count() > 0);
        cells.push(Arc::downgrade(&spare));
        drop(cells);
        Ok(Prepared { pre, routes, views, spare })
    }

    /// Has an instance of `prepared` made ahead of its next call (on the
    /// instance thread), and frees `used` after; frees `used` here, and asks
    /// for no spare, when the thread has [`JOBS_MOST`] jobs waiting.
    fn ahead(&self, prepared: &Prepared, used: Option<(Store<CallState>, OwnedSemaphorePermit)>) {
        self.ahead_of(&prepared.pre, &prepared.spare, used);
    }

    fn ahead_of(
        &self,
        pre: &InstancePre<CallState>,
        cell: &Arc<SpareCell>,
        used: Option<(Store<CallState>, OwnedSemaphorePermit)>,
    ) {
        let Some(jobs) = &self.jobs else { return };
        if self.queued.fetch_add(1, Ordering::AcqRel) >= JOBS_MOST {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            drop(used);
            return;
        }
        let job = Job { pre: pre.clone(), cell: cell.clone(), used };
        if jobs.send(job).is_err() {
            // The thread is gone: the job (and the instance) was dropped here.
            self.queued.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Makes an instance of `prepared` ahead of its first call (a release
    /// being activated).
    pub fn make_ahead(&self, prepared: &Prepared) {
        self.ahead(prepared, None);
    }

    /// An instance slot, waited for until `deadline` (in arrival order, no
    /// timer at all when one is free). Spares are given up first: a call
    /// never waits for a slot a spare holds.
    async fn slot(&self, deadline: Instant) -> Option<OwnedSemaphorePermit> {
        if let Ok(slot) = self.slots.clone().try_acquire_owned() {
            return Some(slot);
        }
        let waiting = {
            let _cells = self.spares.cells.lock().unwrap_or_else(|p| p.into_inner());
            self.spares.waiting.fetch_add(1, Ordering::AcqRel);
            Waiting(&self.spares)
        };
        self.spares.give_up(None);
        let slot = tokio::time::timeout_at(deadline.into(), self.slots.clone().acquire_owned()).await;
        drop(waiting);
        slot.ok().and_then(Result::ok)
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
        // The spare made for this call, or an instance made now.
        let spare = prepared.spare.ready.lock().ok().and_then(|mut s| s.pop_front());
        // (`slot` first: bindings drop in reverse, so a call dropped midway
        // gives its pool slot back before its permit lets another call in.)
        let (slot, mut store, stderr, instance) = match spare {
            Some(s) => (s.slot, s.store, s.stderr, Some(s.instance)),
            None => {
                let Some(slot) = self.slot(deadline).await else {
                    let busy = format!(
                        "the host is running {} calls at once, its most (max_instances); try again",
                        self.config.max_instances
                    );
                    return (Outcome::Error(AppError::Conflict(busy)), Settle { store: plan.store, log: plan.log });
                };
                let (store, stderr) = unarmed(&self.engine, &self.config, &self.ticker, deadline);
                (slot, store, stderr, None)
            }
        };
        // The epoch stops guest code; the timeout also bounds time spent
        // waiting in the host on the guest's behalf (a slow network peer).
        let hard = (deadline + Duration::from_millis(250)).into();
        let instance = match instance {
            Some(instance) => Ok(instance),
            None => match tokio::time::timeout_at(hard, prepared.pre.instantiate_async(&mut store)).await {
                Ok(made) => made,
                Err(_) => Err(wasmtime::Error::from(Trap::Interrupt)),
            },
        };
        let instance = match instance {
            Ok(instance) => instance,
            Err(e) => {
                let outcome = Outcome::Trap(classify(&e, deadline_len, &stderr));
                self.ahead(prepared, Some((store, slot)));
                return (outcome, Settle { store: plan.store, log: plan.log });
            }
        };
        arm(&mut store, &stderr, plan);
        let work = async {
            match entry {
                Entry::Route { route, input } => {
                    prepared.routes.load(&mut store, &instance)?.call_handle(&mut store, route, input).await
                }
                Entry::View { page, query } => {
                    prepared.views.load(&mut store, &instance)?.call_render(&mut store, page, query).await
                }
            }
        };
        let result = match tokio::time::timeout_at(hard, work).await {
            Ok(r) => r,
            Err(_) => Err(wasmtime::Error::from(Trap::Interrupt)),
        };
        let outcome = match result {
            Ok(Ok(text)) => Outcome::Ok(text),
            Ok(Err(app_error)) => Outcome::Error(app_error),
            Err(e) => Outcome::Trap(classify(&e, deadline_len, &stderr)),
        };
        let state = store.data_mut();
        let (given, log) = (state.store.0.take(), std::mem::replace(&mut state.log, caps::log::CallLog::none()));
        // The instance is freed, and the next one made, off the call's path.
        self.ahead(prepared, Some((store, slot)));
        let store = given.expect("a call's store is given before the guest runs and taken back only here");
        (outcome, Settle { store, log })
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

/// What a process that confines itself (an app's worker) does before it is
/// confined: open the process's page map (`/proc/self/pagemap`, which its
/// rules do not name), through which the pooling allocator finds the pages
/// a call wrote and resets a freed instance in place. Without it a freed
/// instance's memory is given back to the kernel and mapped again, and the
/// worker's threads interrupt each other's cores to flush their TLBs: a
/// third of P2's requests (docs/performance.md).
pub fn before_confinement() {
    let _ = resets_in_place();
}

/// Whether this process's runtime resets a freed instance in place (it has
/// its page map, on a kernel with `PAGEMAP_SCAN`: Linux 6.7 and later).
pub fn resets_in_place() -> bool {
    wasmtime::PoolingAllocationConfig::is_pagemap_scan_available()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component whose start function writes a log line while it is
    /// instantiated, before any call.
    const LOGS_AT_START: &str = r#"
        (component
          (import "autoapp:app/log@0.1.0" (instance $log
            (type $level (enum "debug" "info" "warn" "error"))
            (export "level" (type $l (eq $level)))
            (export "write" (func (param "level" $l) (param "message" string)))))
          (core module $mem (memory (export "memory") 1))
          (core instance $m (instantiate $mem))
          (alias core export $m "memory" (core memory $memory))
          (core func $write (canon lower (func $log "write") (memory $memory)))
          (core module $main
            (import "m" "memory" (memory 1))
            (import "log" "write" (func $write (param i32 i32 i32)))
            (data (i32.const 8) "from the start function")
            (func $start (call $write (i32.const 1) (i32.const 8) (i32.const 23)))
            (start $start))
          (core instance (instantiate $main
            (with "m" (instance $m))
            (with "log" (instance (export "write" (func $write)))))))
    "#;

    #[test]
    fn the_instance_thread_looks_for_jobs_only_while_they_come_often() {
        let mut gaps = Gaps::default();
        for _ in 0..32 {
            gaps.saw(Duration::from_micros(60));
        }
        let often = gaps.look();
        assert!(often >= Duration::from_micros(110) && often <= Duration::from_micros(120), "{often:?}");
        // One pause alone changes little; jobs far apart twice: no looking.
        gaps.saw(Duration::from_secs(1));
        assert!(gaps.look() > Duration::ZERO, "{:?}", gaps.look());
        gaps.saw(Duration::from_secs(1));
        assert_eq!(gaps.look(), Duration::ZERO);
        // Back to often: looking again within a few jobs.
        let mut jobs = 0;
        while gaps.look() == Duration::ZERO {
            gaps.saw(Duration::from_micros(60));
            jobs += 1;
        }
        assert!(jobs <= 16, "{jobs} jobs before looking again");
        let mut seldom = Gaps::default();
        for _ in 0..32 {
            seldom.saw(Duration::from_millis(5));
        }
        assert_eq!(seldom.look(), Duration::ZERO);
    }

    #[tokio::test]
    async fn code_run_while_an_instance_is_made_is_given_nothing() {
        let config = Config { max_instances: 4, ..Config::default() };
        let rt = Runtime::new(&config).unwrap();
        let component = Component::new(&rt.engine, LOGS_AT_START).unwrap();
        let pre = rt.linker.instantiate_pre(&component).unwrap();
        let (mut store, _stderr) = unarmed(&rt.engine, &config, &rt.ticker, Instant::now() + Duration::from_secs(5));
        pre.instantiate_async(&mut store).await.expect("the start function ran");
        let state = store.data();
        assert_eq!(state.log.dropped(), 1, "the line went to a log that keeps nothing");
        assert!(state.store.0.is_none(), "no store");
    }

    /// The epoch ticker sleeps while no store exists (an idle host wakes
    /// nobody), and ticks again for the next: a guest that loops forever is
    /// still stopped at its deadline.
    #[tokio::test]
    async fn the_epoch_ticker_sleeps_while_no_store_exists_and_a_loop_is_still_stopped() {
        let config = Config { max_instances: 4, ..Config::default() };
        let rt = Runtime::new(&config).unwrap();
        let since = Instant::now();
        while !rt.ticker.idle.load(Ordering::SeqCst) {
            assert!(since.elapsed() < Duration::from_secs(5), "the ticker never went to sleep");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let before = rt.ticker.ticks.load(Ordering::Relaxed);
        tokio::time::sleep(config.epoch_tick() * 10).await;
        assert_eq!(rt.ticker.ticks.load(Ordering::Relaxed), before, "a tick with no store");
        let component = Component::new(
            &rt.engine,
            r#"(component
                (core module $m (func (export "spin") (loop $l (br $l))))
                (core instance $i (instantiate $m))
                (func (export "spin") (canon lift (core func $i "spin"))))"#,
        )
        .unwrap();
        let pre = rt.linker.instantiate_pre(&component).unwrap();
        let (mut store, _stderr) =
            unarmed(&rt.engine, &config, &rt.ticker, Instant::now() + Duration::from_millis(100));
        let instance = pre.instantiate_async(&mut store).await.unwrap();
        let spin = instance.get_typed_func::<(), ()>(&mut store, "spin").unwrap();
        let started = Instant::now();
        let stopped = spin.call_async(&mut store, ()).await.expect_err("a loop forever is stopped");
        assert_eq!(stopped.downcast_ref::<wasmtime::Trap>(), Some(&wasmtime::Trap::Interrupt), "{stopped:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "stopped at its deadline: {:?}", started.elapsed());
        assert!(rt.ticker.ticks.load(Ordering::Relaxed) > before, "ticks while a store exists");
        drop(store);
        let since = Instant::now();
        while !rt.ticker.idle.load(Ordering::SeqCst) {
            assert!(since.elapsed() < Duration::from_secs(5), "the ticker sleeps again when the store is gone");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Calls that end while the instance thread is behind: their used
    /// instances do not pile up in its queue (each would hold a slot).
    #[tokio::test]
    async fn a_call_frees_its_instance_itself_while_the_instance_thread_is_behind() {
        let (config, rt, pre, cell) = an_empty_release(64);
        let in_use = || 64 - rt.slots.available_permits();
        let mut used = Vec::new();
        for _ in 0..20 {
            let slot = rt.slot(Instant::now() + Duration::from_secs(5)).await.expect("a free slot");
            let (mut store, _stderr) =
                unarmed(&rt.engine, &config, &rt.ticker, Instant::now() + Duration::from_secs(5));
            pre.instantiate_async(&mut store).await.unwrap();
            used.push((store, slot));
        }
        // Twenty calls end while the thread is held.
        let held = rt.hold.lock().unwrap();
        for u in used {
            rt.ahead_of(&pre, &cell, Some(u));
        }
        assert_eq!(in_use(), JOBS_MOST, "only the queued jobs' instances are held");
        // The thread catches up: every slot comes back but its spares'.
        drop(held);
        caught_up(&rt).await;
        assert_eq!(in_use(), SPARES_EACH, "the spares");
    }

    /// A runtime of `slots` instance slots, a release of an empty component,
    /// and a cell for its spares.
    fn an_empty_release(slots: u32) -> (Config, Runtime, InstancePre<CallState>, Arc<SpareCell>) {
        let config = Config { max_instances: slots, ..Config::default() };
        let rt = Runtime::new(&config).unwrap();
        let component = Component::new(&rt.engine, "(component)").unwrap();
        let pre = rt.linker.instantiate_pre(&component).unwrap();
        (config, rt, pre, Arc::new(SpareCell::default()))
    }

    /// Waits until the instance thread has done every job sent to it.
    async fn caught_up(rt: &Runtime) {
        let since = Instant::now();
        while rt.queued.load(Ordering::Acquire) > 0 {
            assert!(since.elapsed() < Duration::from_secs(10), "the instance thread never caught up");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// A call takes the oldest of its release's spares and leaves the next
    /// one ready for the call after it, while the instance thread makes a
    /// new one: a call that comes right after another need not wait for (or
    /// make) its instance.
    #[tokio::test]
    async fn a_call_finds_a_second_spare_ready_while_the_first_ones_follower_is_made() {
        let (_config, rt, pre, cell) = an_empty_release(8);
        let kept = || cell.ready.lock().unwrap().len();
        // As `make_ahead` does when a release is activated.
        rt.ahead_of(&pre, &cell, None);
        caught_up(&rt).await;
        assert_eq!(kept(), 2, "two spares made ahead of the first call");
        // A call takes one (as `run` does): the other is there for the next
        // call even while the thread is kept from making a follower.
        let held = rt.hold.lock().unwrap();
        let taken = cell.ready.lock().unwrap().pop_front().expect("a spare");
        assert_eq!(kept(), 1, "the next call's spare is ready");
        let older = taken.made;
        rt.ahead_of(&pre, &cell, Some((taken.store, taken.slot)));
        assert_eq!(kept(), 1);
        drop(held);
        caught_up(&rt).await;
        let spares = cell.ready.lock().unwrap();
        assert_eq!(spares.len(), 2, "the call's job made the follower");
        assert!(spares[1].made > older, "the follower is new; the used instance is never a spare");
        assert!(spares[0].made <= spares[1].made, "the oldest first");
        assert_eq!(8 - rt.slots.available_permits(), 2, "the used instance's slot is back");
    }
}
