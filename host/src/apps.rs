//! The apps of a root as every adapter sees them: the one call path
//! ([`Apps::call`], [`Apps::render`]) and the lifecycle steps (build,
//! activate). Adapters (the command line, the page, the control connection)
//! hold one `Apps` and never reach the runtime another way.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;

use crate::caps;
use crate::caps::store::{AppStore, Mode};
use crate::config::Config;
use crate::gate::record::{Recorder, Row};
use crate::gate::{Caller, Decision, Gate, Knock, Pass};
use crate::manifest::{AppId, Effect, Manifest};
use crate::release;
use crate::root::AppPaths;
use crate::root::Root;
use crate::runtime::{AppError, CallPlan, Entry, Outcome, Prepared, Runtime, Stopped};

pub use crate::error::ErrorKind;

/// A call that did not succeed: one sentence for a person, and its kind.
#[derive(Debug, Clone, thiserror::Error, Serialize, serde::Deserialize)]
#[error("{message}")]
pub struct CallError {
    pub kind: ErrorKind,
    pub message: String,
    /// In this process only, never said: the release could not be loaded
    /// because the compiled cache lacks its code and this process may not
    /// compile (an app's worker: [`crate::runtime::NOT_IN_CACHE`]). Set by
    /// the host alone — no app's or server's words can set it.
    #[serde(skip)]
    pub(crate) code_missing: bool,
}

impl CallError {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> CallError {
        CallError { kind, message: message.into(), code_missing: false }
    }
}

/// A successful call: the route's JSON answer and what ran.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Answer {
    pub output: serde_json::Value,
    pub release: String,
    pub effect: Effect,
    pub duration_ms: f64,
}

/// A release loaded for serving: its contract, its linked component and its
/// compiled input schemas.
struct Loaded {
    manifest: Manifest,
    prepared: Prepared,
    validators: HashMap<String, jsonschema::Validator>,
}

/// The apps of one root.
pub struct Apps {
    root: Root,
    runtime: Arc<Runtime>,
    gate: Arc<Gate>,
    /// The agents' plans and the runs the person started.
    plans: Arc<crate::plans::Plans>,
    /// Shared with the steps that put a write's row beside it (`RowBeside`).
    recorder: Arc<Recorder>,
    /// Per app, the text of its activation file, and the releases whose
    /// writes have nothing to note while the file holds it: the one it
    /// names once it holds the activation's first write, and those judged
    /// under the app's lock to have nothing to note (`note_first_write`).
    /// A set, not the last one alone: a worker taken by an escape naming two
    /// releases in turn took the app's lock for each, which the person's
    /// activate, rollback and prune then found taken.
    written: Mutex<HashMap<AppId, (String, std::collections::HashSet<String>)>>,
    /// The activations (app, `activated_at`, or `release:<id>` for one whose
    /// file was not written yet) whose first write a thread waits to note
    /// while another change holds the app's lock: one thread each, whatever
    /// the number of writes meanwhile.
    first_write_waits: Arc<Mutex<std::collections::HashSet<(AppId, String)>>>,
    /// How spawned programs are contained, probed once.
    containment: std::sync::OnceLock<caps::spawn::Containment>,
    /// Where the person's keys for this root are (`crate::secrets`), found
    /// once; it remembers each value read, until the person sets it again.
    vault: std::sync::OnceLock<Result<crate::secrets::Vault, String>>,
    /// Releases loaded for serving, by id.
    loaded: Mutex<HashMap<String, Arc<tokio::sync::OnceCell<Arc<Loaded>>>>>,
    /// By data folder (as bytes: hashing a `Path` walks its components).
    stores: Arc<Mutex<HashMap<std::ffi::OsString, Arc<AppStore>>>>,
    /// In an app's worker: what its parent read for it before it was
    /// confined (`crate::worker`); none in a process that reads for itself.
    ahead: Option<Ahead>,
    /// In the launcher: where a call the gate passed runs — the app's
    /// worker (`crate::worker::pool`); none where calls run in this process.
    elsewhere: std::sync::OnceLock<Arc<dyn Elsewhere>>,
    /// In a worker that serves its app's pages: who notes a write's first
    /// write in the app's journal (its launcher).
    noter: std::sync::OnceLock<Arc<dyn Noter>>,
    /// In an app's worker: who compiles a release's code that the cache
    /// lost (its launcher); a worker may only read the cache.
    compiler: std::sync::OnceLock<Arc<dyn Compiler>>,
    /// In the launcher: where the compiled code of each release a worker
    /// asked for is (one entry a release that is there; a release's
    /// component never changes), so that asking again costs a look at the
    /// file, not a read and a hash of the component.
    compiled_for_workers: Arc<Mutex<HashMap<(AppId, String), PathBuf>>>,
}

/// Notes the first write of an activation for a worker, which may not
/// write its app's journal: its launcher, over its channel.
pub trait Noter: Send + Sync {
    fn note(&self, app: &AppId, release: &str) -> BoxFuture<()>;
}

/// Compiles, for an app's worker, the code of one of its app's releases
/// that the compiled cache lost (emptied while the launcher ran): its
/// launcher, over its channel, confined as every compile of a component
/// from elsewhere is (`Runtime::compile_elsewhere`).
pub trait Compiler: Send + Sync {
    fn compile(self: Arc<Self>, app: &AppId, release: &str) -> BoxFuture<Result<(), CallError>>;
}

/// Where the launcher's calls run once its gate passed them: a process of
/// the app's own, confined to it (`crate::worker::pool`, issue 54). It
/// runs the call, settles its transaction and records its row there; the
/// launcher keeps what a person touches: the gate, its questions, the grants
/// and the activation.
pub trait Elsewhere: Send + Sync {
    /// Runs `call` in its app's worker; `manifest` is its release's. `Ok`:
    /// the worker's answer, recorded there; `Err`: the call did not reach
    /// its worker, or its worker ended before it answered — for the
    /// launcher to record.
    fn run(&self, call: Carried, manifest: &Manifest) -> BoxFuture<Result<Answered, CallError>>;
    /// Makes `release` of `app` ready in its worker before its activation.
    fn prepare(&self, app: &AppId, release: &str, manifest: &Manifest) -> BoxFuture<Result<(), CallError>>;
    /// The workers running now, as `autoapp status` shows them.
    fn shown(&self) -> serde_json::Value;
    /// Retires the workers that hold `data` open (before its contents are
    /// copied: an activation's snapshot; before a preview's folder goes),
    /// and any of its app that is starting.
    fn retire_holding(&self, data: &Path);
    /// `data` is about to be moved (a rollback, a removal): its workers are
    /// retired, and no worker of the app it is the data folder of starts
    /// until [`Elsewhere::moved`].
    fn moving(&self, data: &Path);
    /// `data` moved, or its move failed: a worker that started before the
    /// move began is retired too, and the starts held back go on.
    fn moved(&self, data: &Path);
}

/// A data folder being moved ([`Apps::moving_store`]): its app's workers
/// start again when this is dropped, however the move ended.
pub(crate) struct MovingStore<'a> {
    apps: &'a Apps,
    data: PathBuf,
}

impl Drop for MovingStore<'_> {
    fn drop(&mut self) {
        if let Some(elsewhere) = self.apps.elsewhere.get() {
            elsewhere.moved(&self.data);
        }
    }
}

/// What a call that did not run is told when its app's release changed
/// while it waited for its worker ([`Elsewhere::run`]).
pub(crate) const RELEASE_CHANGED: &str = "changed while this call waited (an activation or rollback); nothing ran";

/// The most JSON an app's answer (a route's output, a page's view) may be.
/// Its worker holds it, and then its launcher, once for each call it runs:
/// an answer as large as the guest's memory (`memory_max_mib`) would be
/// held by both for every call at once.
pub const MAX_ANSWER_BYTES: usize = 32 << 20;

/// The most values an app's answer may hold, counted before it is parsed
/// ([`crate::elsewhere::json::values`]): each takes 32 bytes or more parsed
/// whatever its length, so `[0,0,…]` would be held at 16 to 32 times its
/// size. A million is a full page of a query (10,000 rows) of a hundred
/// columns.
pub const MAX_ANSWER_VALUES: usize = 1_000_000;

/// The longest error an app's call passes on, in characters: an app's own
/// error (cut where it is taken in), and a worker's (cut again by its
/// launcher).
pub const MOST_SAID: usize = 16 * 1024;

/// What a worker answered a call.
pub type Answered = Result<serde_json::Value, CallError>;

/// A boxed future the launcher awaits.
pub type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'static>>;

/// A call the launcher's gate passed, carried to the app's worker: what runs,
/// on which release and data, and the row that records it (its caller,
/// decision and who answered, made by the launcher; its outcome set where it
/// ran).
#[derive(Serialize, serde::Deserialize)]
pub struct Carried {
    pub app: AppId,
    pub release: String,
    /// The data folder it runs against: the app's, or a preview's copy.
    pub data: PathBuf,
    pub entry: CarriedEntry,
    pub row: Row,
    /// An external call's grants, as the launcher read them to make its
    /// worker's rules: the worker gives the call these, never reads them.
    #[serde(default)]
    pub grants: Option<crate::grants::Grants>,
    /// The keys of an external call, read by the launcher (a worker cannot
    /// reach the keyring), which adds them to the requests it sends for the
    /// call: never carried to the worker.
    #[serde(skip)]
    pub keys: Vec<crate::secrets::Given>,
}

/// What an external call carried to a worker is handed: the grants its
/// launcher read, and its launcher as the sender of its requests (which
/// adds the keys, checks every address and takes the keys out of what comes
/// back: the worker holds no socket and no key, issue 72).
pub(crate) struct Handed {
    pub grants: crate::grants::Grants,
    pub relay: Option<Arc<dyn caps::network::relay::Relay>>,
}

/// What a carried call enters: a route with the input the gate hashed, or a
/// page with its query.
#[derive(Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CarriedEntry {
    Route { route: String, input: String },
    View { page: String, query: String },
}

/// What the launcher that starts an app's worker tells it, which the worker
/// itself may not find out: how this machine contains programs. A worker
/// notes no first write in the app's journal (it may not write there): its
/// launcher does. It is given no key: its launcher sends its requests
/// ([`Handed::relay`]).
pub(crate) struct Ahead {
    pub containment: caps::spawn::Containment,
}

impl Drop for Apps {
    /// A clean stop: the apps' log lines queued by this process's calls are
    /// written, and the record's rows (the recorder's own drop commits them
    /// too, but a step still parked in a group may hold it a moment longer).
    fn drop(&mut self) {
        self.recorder.flush();
        crate::applog::flush();
    }
}

impl Apps {
    pub fn new(root: Root, config: &Config) -> anyhow::Result<Apps> {
        Apps::made(root, config, Runtime::new(config)?, None)
    }

    /// The apps of an app's worker, in a process already confined: what it
    /// cannot reach is `ahead`, and its runtime never compiles (it may not
    /// write the cache).
    pub(crate) fn confined(root: Root, config: &Config, ahead: Ahead) -> anyhow::Result<Apps> {
        let containment = ahead.containment.clone();
        let apps = Apps::made(root, config, Runtime::new(config)?.without_compiling(), Some(ahead))?;
        // Decided by its parent, or by its own confinement: not probed here.
        let _ = apps.containment.set(containment);
        Ok(apps)
    }

    fn made(root: Root, config: &Config, runtime: Runtime, ahead: Option<Ahead>) -> anyhow::Result<Apps> {
        let stores: Arc<Mutex<HashMap<std::ffi::OsString, Arc<AppStore>>>> = Arc::default();
        checkpoint_in_background(Arc::downgrade(&stores))?;
        let standing = crate::gate::standing::file(&root);
        let plans = Arc::new(crate::plans::Plans::new(&root, std::time::Duration::from_secs(config.run_limit_secs)));
        // A run first: the record then names the plan that answered.
        let stand_ins: Vec<Arc<dyn crate::gate::StandIn>> =
            vec![plans.clone(), Arc::new(crate::gate::Standing(standing))];
        Ok(Apps {
            root,
            runtime: Arc::new(runtime),
            gate: Gate::with_stand_ins(std::time::Duration::from_secs(config.approval_window_secs), stand_ins),
            plans,
            recorder: Arc::new(Recorder::new(config.durability).keeping(crate::gate::record::keep::Bounds::of(config))),
            written: Mutex::default(),
            first_write_waits: Arc::default(),
            compiled_for_workers: Arc::default(),
            containment: std::sync::OnceLock::new(),
            vault: std::sync::OnceLock::new(),
            loaded: Mutex::default(),
            stores,
            ahead,
            elsewhere: std::sync::OnceLock::new(),
            noter: std::sync::OnceLock::new(),
            compiler: std::sync::OnceLock::new(),
        })
    }

    /// From now on, the calls the gate passes run in `elsewhere` (the
    /// launcher's workers), not in this process.
    pub fn run_elsewhere(&self, elsewhere: Arc<dyn Elsewhere>) {
        let _ = self.elsewhere.set(elsewhere);
    }

    /// In a worker that serves its app's pages: its writes' first write is
    /// noted by `noter` (its launcher).
    pub(crate) fn note_through(&self, noter: Arc<dyn Noter>) {
        let _ = self.noter.set(noter);
    }

    /// In an app's worker: code of a release that the compiled cache lost
    /// is compiled by `compiler` (its launcher), then loaded.
    pub(crate) fn compile_through(&self, compiler: Arc<dyn Compiler>) {
        let _ = self.compiler.set(compiler);
    }

    /// In the launcher, for `app`'s worker: compiles the code of `release`
    /// if the compiled cache lost it (confined, within its budget); nothing
    /// when the code is there. The release is one of the app's, named whole.
    pub async fn compile_for_worker(&self, app: &AppId, release: &str) -> Result<(), CallError> {
        // (A worker's words: not echoed, whatever their length.)
        if !release::is_release_id(release) {
            return Err(CallError::new(ErrorKind::InvalidInput, "name the release by its whole id"));
        }
        let (root, runtime, app, release) = (self.root.clone(), self.runtime.clone(), app.clone(), release.to_string());
        let known = self.compiled_for_workers.clone();
        tokio::task::spawn_blocking(move || {
            let id = release::resolve(&root.app(&app), &release)
                .map_err(|e| CallError::new(ErrorKind::NotFound, format!("{e:#}")))?;
            if id != release {
                return Err(CallError::new(ErrorKind::InvalidInput, "name the release by its whole id"));
            }
            // Debug builds only: a test holds a compile here
            // (`AUTOAPP_PAUSE=compile:for-worker`).
            crate::caps::confine::pause("compile:for-worker");
            // Asked again (a worker taken by an escape may ask without end).
            let which = (app.clone(), id.clone());
            if known.lock().expect("compiled").get(&which).is_some_and(|p| p.is_file()) {
                return Ok(());
            }
            let internal = |why: String| {
                CallError::new(ErrorKind::Internal, format!("cannot compile the release {id} of {app}: {why}"))
            };
            let bytes = std::fs::read(root.app(&app).release(&id).join(release::COMPONENT_FILE))
                .map_err(|e| internal(e.to_string()))?;
            let cache = root.compiled_of(&app);
            let path = runtime.compiled_path(&cache, &bytes);
            if !path.is_file() {
                let budget = crate::runtime::Budget::of(runtime.config());
                runtime.compile_elsewhere(&cache, &bytes, &budget).map_err(internal)?;
            }
            known.lock().expect("compiled").insert(which, path);
            Ok(())
        })
        .await
        .unwrap_or_else(|e| Err(CallError::new(ErrorKind::Internal, format!("compiling a release failed: {e}"))))
    }

    /// The workers the calls run in (`autoapp status`); none where the
    /// calls run in this process.
    pub fn workers(&self) -> Option<serde_json::Value> {
        self.elsewhere.get().map(|e| e.shown())
    }

    pub fn root(&self) -> &Root {
        &self.root
    }

    /// The engine every call runs on: the benchmarks compare a bare instance
    /// on the same engine (no way to run guest code comes with it).
    pub fn engine(&self) -> &crate::runtime::Engine {
        self.runtime.engine()
    }

    pub(crate) fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The agents' plans and the runs the person started.
    pub(crate) fn plans(&self) -> &Arc<crate::plans::Plans> {
        &self.plans
    }

    /// The gate every call of these apps passes.
    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// Waits until every decision made so far is in its record, and every
    /// log line queued so far in its file.
    pub fn flush_record(&self) {
        self.recorder.flush();
        crate::applog::flush();
    }

    /// The store of the data folder `data`, opened once per process.
    pub fn store(&self, data: &Path) -> anyhow::Result<Arc<AppStore>> {
        let mut stores = self.stores.lock().expect("stores");
        if let Some(s) = stores.get(data.as_os_str()) {
            return Ok(s.clone());
        }
        let s = AppStore::open_with(data, Some(record_beside(data)))?;
        stores.insert(data.as_os_str().to_owned(), s.clone());
        Ok(s)
    }

    /// Records, once per activation, that `release` committed its first write
    /// since it was activated: from then on a rollback must choose what
    /// happens to writes. An activation is known by its file's text, read
    /// from memory until something changes on its way (`pointer`): the same
    /// release activated again (here or by another process) is a new
    /// activation, whose first write is noted again.
    pub(crate) fn note_first_write(&self, app: &AppId, release_id: &str) {
        if self.ahead.is_some() {
            // A worker's parent notes it (`note_first_write_of`), or its
            // launcher (`Noter`).
            return;
        }
        let paths = self.root.app(app);
        let Some((text, made_under)) = self.first_write_unnoted(app, release_id) else { return };
        let wait = (app.clone(), made_under.key());
        if self.first_write_waits.lock().expect("waits").contains(&wait) {
            // A thread already waits to note this activation's first write.
            return;
        }
        match note_in_journal(&paths, &made_under) {
            Ok(Noted::Busy) => {
                // Another change of the app holds its lock (an activation,
                // a rollback, a prune; a backup): noted once it lets go, off
                // the call's path, unless the activation is gone by then. (A
                // process that ends first, a one-shot `autoapp call`, leaves
                // it to the app's next write.)
                if !self.first_write_waits.lock().expect("waits").insert(wait.clone()) {
                    return;
                }
                let waits = self.first_write_waits.clone();
                let spawned = std::thread::Builder::new().name("autoapp-first-write".into()).spawn({
                    let wait = wait.clone();
                    move || {
                        let deadline = Instant::now() + FIRST_WRITE_PATIENCE;
                        let done = loop {
                            if Instant::now() >= deadline {
                                break Err(anyhow::anyhow!("the app stayed locked"));
                            }
                            std::thread::sleep(std::time::Duration::from_millis(100));
                            match note_in_journal(&paths, &made_under) {
                                Ok(Noted::Busy) => continue,
                                Ok(Noted::Done) => break Ok(()),
                                Err(e) => break Err(e),
                            }
                        };
                        waits.lock().expect("waits").remove(&wait);
                        if let Err(e) = done {
                            tracing::error!(app = %wait.0, "cannot record the first write: {e:#}");
                        }
                    }
                });
                if let Err(e) = spawned {
                    self.first_write_waits.lock().expect("waits").remove(&wait);
                    tracing::error!("cannot record the first write: {e}");
                }
            }
            // Settled with the lock free: while the file holds this text,
            // a write of this release has nothing more to note (not even
            // the lock to take). Where it was noted, the next write reads
            // the file as written (the watch saw it replaced).
            Ok(Noted::Done) => {
                if let MadeUnder::Release(release) = made_under {
                    self.judged(app, text, release);
                }
            }
            Err(e) => tracing::error!(app = %app, "cannot record the first write: {e:#}"),
        }
    }

    /// While `app`'s activation file holds `text`, a write of `release`
    /// has nothing to note (the releases of one text kept together; a new
    /// text starts again).
    fn judged(&self, app: &AppId, text: String, release: String) {
        let mut written = self.written.lock().expect("written");
        match written.get_mut(app) {
            Some((noted, releases)) if *noted == text => {
                releases.insert(release);
            }
            _ => {
                written.insert(app.clone(), (text, std::collections::HashSet::from([release])));
            }
        }
    }

    /// The activation a write of `release_id` would note as its first
    /// write, with its file's text, when it is not noted yet: read from
    /// memory while the activation file is unchanged (`pointer`).
    fn first_write_unnoted(&self, app: &AppId, release_id: &str) -> Option<(String, MadeUnder)> {
        let paths = self.root.app(app);
        let file = crate::release::journal::activation_file(&paths);
        // No activation to note it in (or none readable): nothing to do.
        let text = crate::pointer::read_through(&file, || std::fs::read_to_string(&file)).ok()?;
        // While another activation is under way, a write noted already in
        // this one may be its first (after its snapshot): judged once it
        // is done.
        let under_way = crate::release::journal::under_way(&paths);
        if !under_way
            && self
                .written
                .lock()
                .expect("written")
                .get(app)
                .is_some_and(|(noted, releases)| *noted == text && releases.contains(release_id))
        {
            return None;
        }
        match to_note(app, &file, &text, release_id, under_way) {
            ToNote::Damaged => None,
            ToNote::Already => {
                self.judged(app, text, release_id.to_string());
                None
            }
            ToNote::Note(made_under) => Some((text, made_under)),
        }
    }

    /// How spawned programs are contained on this machine, decided once.
    pub fn containment(&self) -> caps::spawn::Containment {
        self.containment.get_or_init(|| caps::spawn::Containment::decide(self.runtime.config())).clone()
    }

    /// The person's keys for this root (`crate::secrets::vault`).
    pub(crate) fn vault(&self) -> anyhow::Result<&crate::secrets::Vault> {
        let found = self.vault.get_or_init(|| {
            crate::secrets::Vault::of(self.root.dir(), self.runtime.config().secrets_kept_in)
                .map_err(|e| format!("{e:#}"))
        });
        found.as_ref().map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Forgets the open store of `data` and closes its record, its workers
    /// retired (before its contents are copied, or a preview's folder goes).
    pub(crate) fn close_store(&self, data: &Path) {
        if let Some(elsewhere) = self.elsewhere.get() {
            elsewhere.retire_holding(data);
        }
        self.let_go(data);
    }

    /// The launcher's own hold on `data`: its open store, its record.
    fn let_go(&self, data: &Path) {
        self.stores.lock().expect("stores").remove(data.as_os_str());
        self.recorder.close(data);
        crate::applog::flush();
    }

    /// Closes the store of `data` as [`Apps::close_store`] does, before its
    /// folder is moved (a rollback, a removal); until the answer is
    /// dropped, no worker of its app starts (one would make the folder
    /// again where the move needs none, or be confined to the folder moved
    /// aside), and when it is, one that started before the move began is
    /// retired too.
    pub(crate) fn moving_store(&self, data: &Path) -> MovingStore<'_> {
        if let Some(elsewhere) = self.elsewhere.get() {
            elsewhere.moving(data);
        }
        // Made at once: whatever happens next, its drop ends the move.
        let moving = MovingStore { apps: self, data: data.to_path_buf() };
        self.let_go(data);
        moving
    }

    /// Loads (compiles, links) a release, to know it can be served. Blocks:
    /// for the command line and blocking tasks, never an async worker.
    pub(crate) fn load_release(&self, app: &AppId, release_id: &str) -> anyhow::Result<()> {
        let cell = self.loading(release_id);
        let (root, runtime) = (&self.root, &self.runtime);
        futures::executor::block_on(
            cell.get_or_try_init(|| async { load(root, runtime, app, release_id).map(Arc::new) }),
        )
        .map(|_| ())
        .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Loads `release` of `app` ahead of its first call: a running launcher
    /// does it when `autoapp activate` in another process asks, before the
    /// switch. Only a release of that app is loaded.
    pub async fn prepare(&self, app: &AppId, release: &str) -> Result<(), CallError> {
        let paths = self.root.app(app);
        let id =
            release::resolve(&paths, release).map_err(|e| CallError::new(ErrorKind::NotFound, format!("{e:#}")))?;
        if id != release {
            return Err(CallError::new(ErrorKind::InvalidInput, "name the release by its whole id"));
        }
        let loaded = self.load(app, &id).await?;
        if let Some(elsewhere) = self.elsewhere.get() {
            // Its worker loads it, and makes its first instance.
            return elsewhere.prepare(app, &id, &loaded.manifest).await;
        }
        // Its first call then finds an instance made.
        self.runtime.make_ahead(&loaded.prepared);
        Ok(())
    }

    /// In an app's worker: runs a call its launcher's gate passed
    /// ([`Carried`]), and records it in the record of its data; an
    /// external call's requests go through `relay` (its launcher).
    pub(crate) async fn run_carried(
        &self,
        call: Carried,
        relay: Option<Arc<dyn caps::network::relay::Relay>>,
    ) -> Result<serde_json::Value, CallError> {
        // (A carried call's keys are its launcher's: never sent with it.)
        let Carried { app, release, data, entry, row, grants, keys: _ } = call;
        let paths = self.root.app(&app);
        if !(data == paths.data() || data.starts_with(paths.dir.join("previews"))) {
            return Err(CallError::new(ErrorKind::Internal, "the call names data that is not its app's"));
        }
        let started = Instant::now();
        let loaded = match self.load(&app, &release).await {
            Ok(loaded) => loaded,
            Err(e) => {
                // Passed by its launcher's gate and never run: its row says
                // so (the launcher leaves what a worker answers to the
                // worker to record).
                let effect = if row.effect == Effect::Read.as_str() { Effect::Read } else { Effect::Write };
                // (Its duration: the launcher's part, in the row, and this.)
                let before = std::time::Duration::try_from_secs_f64(row.duration_ms / 1000.0).ok();
                let started = before.and_then(|d| started.checked_sub(d)).unwrap_or(started);
                return Err(self.record_unrun(&data, effect, row, started, e).await);
            }
        };
        match entry {
            CarriedEntry::Route { route, input } => {
                let Some(effect) = loaded.manifest.route(&route).map(|r| r.effect) else {
                    return Err(CallError::new(
                        ErrorKind::NotFound,
                        format!("{app} has no route `{}`", route.escape_debug()),
                    ));
                };
                if effect == Effect::External && grants.is_none() {
                    return Err(CallError::new(ErrorKind::Internal, "an external call came without its grants"));
                }
                let pass = Pass::carried(input);
                let handed = Handed { grants: grants.unwrap_or_default(), relay };
                self.settle_call(&pass, &loaded, &app, &data, effect, &route, row, Some(&handed)).await
            }
            CarriedEntry::View { page, query } => {
                let pass = Pass::carried(String::new());
                self.settle_render(&pass, &loaded, &app, &data, &page, &query, row).await
            }
        }
    }

    /// In an app's worker: loads `release` and makes its first instance.
    pub(crate) async fn prepare_carried(&self, app: &AppId, release: &str) -> Result<(), CallError> {
        let loaded = self.load(app, release).await?;
        self.runtime.make_ahead(&loaded.prepared);
        Ok(())
    }

    /// The releases loaded in this process (ready for a call), by id, sorted.
    pub fn loaded_releases(&self) -> Vec<String> {
        let loaded = self.loaded.lock().expect("loaded");
        let mut ids: Vec<String> = loaded.iter().filter(|(_, c)| c.initialized()).map(|(id, _)| id.clone()).collect();
        ids.sort();
        ids
    }

    /// The cell a release is loaded into, once however many calls want it.
    fn loading(&self, release_id: &str) -> Arc<tokio::sync::OnceCell<Arc<Loaded>>> {
        let mut loaded = self.loaded.lock().expect("loaded");
        // Every call comes here: look up before making an owned key.
        if let Some(cell) = loaded.get(release_id) {
            return cell.clone();
        }
        loaded.entry(release_id.to_string()).or_default().clone()
    }

    /// The release, loaded at its first call: the calls that arrive meanwhile
    /// wait for that one load (asynchronously), and the compiling runs on a
    /// blocking thread, never on an async worker other calls need.
    async fn load(&self, app: &AppId, release_id: &str) -> Result<Arc<Loaded>, CallError> {
        let cell = self.loading(release_id);
        if let Some(l) = cell.get() {
            return Ok(l.clone());
        }
        let (root, runtime, app, id) = (self.root.clone(), self.runtime.clone(), app.clone(), release_id.to_string());
        let compiler = self.compiler.get().cloned();
        cell.get_or_try_init(|| async move {
            let load_once = || {
                let (root, runtime, app, id) = (root.clone(), runtime.clone(), app.clone(), id.clone());
                async move {
                    tokio::task::spawn_blocking(move || load(&root, &runtime, &app, &id).map(Arc::new))
                        .await
                        .unwrap_or_else(|e| {
                            Err(CallError::new(ErrorKind::Internal, format!("loading a release failed: {e}")))
                        })
                }
            };
            match (load_once().await, compiler) {
                // A worker, which may not compile: its launcher compiles
                // what the cache lost, and it loads again.
                (Err(e), Some(compiler)) if e.code_missing => {
                    compiler.compile(&app, &id).await?;
                    load_once().await
                }
                (loaded, _) => loaded,
            }
        })
        .await
        .cloned()
    }

    fn active(&self, app: &AppId, paths: &AppPaths) -> Result<String, CallError> {
        // The pointer is replaced whenever it changes (here, by another
        // process, or by hand): read again only after a change on its way.
        crate::pointer::read_through(&paths.active_file(), || self.read_active(app, paths))
    }

    fn read_active(&self, app: &AppId, paths: &AppPaths) -> Result<String, CallError> {
        if !paths.exists() {
            return Err(CallError::new(ErrorKind::NotFound, crate::error::no_such_app(app)));
        }
        match release::active(paths) {
            Ok(Some(id)) => Ok(id),
            Ok(None) => Err(CallError::new(
                ErrorKind::NotFound,
                format!(
                    "{app} has no active release; build it with `autoapp build {app}` and activate a candidate with `autoapp activate {app} RELEASE`"
                ),
            )),
            Err(e) => {
                Err(self.replaced(app, &e).unwrap_or_else(|| CallError::new(ErrorKind::Internal, format!("{e:#}"))))
            }
        }
    }

    /// In an app's worker, a file its policy named that it may no longer
    /// read was replaced since it was confined (Landlock's rule holds the
    /// file it named, not the one renamed over it): the active pointer, the
    /// grants. The call is then of an app that changed while it started.
    fn replaced(&self, app: &AppId, e: &anyhow::Error) -> Option<CallError> {
        let denied = e.chain().any(|c| {
            c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)
        });
        (self.ahead.is_some() && denied)
            .then(|| CallError::new(ErrorKind::Conflict, format!("{app} changed while the call started; try again")))
    }

    /// Which release and data a call of `target` runs against.
    fn resolve_target(&self, app: &AppId, target: &Target) -> Result<Resolved, CallError> {
        match target {
            Target::Active => {
                let paths = self.root.app(app);
                Ok(Resolved { release: self.active(app, &paths)?, data: paths.data(), preview: false })
            }
            Target::Preview(prefix) => {
                let (p, data) = self
                    .find_preview(app, prefix.as_deref())
                    .map_err(|e| CallError::new(ErrorKind::NotFound, format!("{e:#}")))?;
                Ok(Resolved { release: p.release, data, preview: true })
            }
        }
    }

    /// Calls `route` of the app's active release with `input` (JSON text), as
    /// `caller`.
    pub async fn call(&self, caller: &Caller, app: &AppId, route: &str, input: &str) -> Result<Answer, CallError> {
        self.call_at(caller, app, &Target::Active, route, input).await
    }

    /// Calls `route` of `target` with `input` (JSON text), as `caller`: the
    /// route and input are checked, the gate decides (and may wait for the
    /// person), the call runs, and the decision and outcome are recorded in
    /// the record of the data it ran against.
    pub async fn call_at(
        &self,
        caller: &Caller,
        app: &AppId,
        target: &Target,
        route: &str,
        input: &str,
    ) -> Result<Answer, CallError> {
        self.call_with(caller, app, target, route, input, None, true, false).await?.ok_or_else(not_here)
    }

    /// In a worker that serves its app's pages: a page's call of the active
    /// release, answered here — or `None` for an external route, which its
    /// launcher's gate and the app's other worker run (nothing is run or
    /// recorded here).
    pub(crate) async fn call_page(&self, app: &AppId, route: &str, input: &str) -> Result<Option<Answer>, CallError> {
        self.call_with(&Caller::page(), app, &Target::Active, route, input, None, false, false).await
    }

    /// Runs `workflow` of the app's active release on channel `workflow`.
    /// `approved_for` is the release the person approved it for, when the
    /// runner found an approval (the gate honors it only for that release).
    pub async fn call_workflow(
        &self,
        app: &AppId,
        workflow: &crate::manifest::Workflow,
        approved_for: Option<&str>,
    ) -> Result<Answer, CallError> {
        let caller = Caller::workflow(&workflow.name);
        let input = workflow.input.to_string();
        self.call_with(&caller, app, &Target::Active, &workflow.route, &input, approved_for, true, false)
            .await?
            .ok_or_else(not_here)
    }

    /// Records that a run of `workflow` was skipped because its previous run
    /// was still going.
    pub(crate) fn record_workflow_skip(
        &self,
        app: &AppId,
        release_id: &str,
        workflow: &crate::manifest::Workflow,
        effect: Effect,
    ) {
        let row = Row {
            arguments_hash: crate::gate::arguments_hash(&workflow.input),
            decision: Decision::Refused.as_str().to_string(),
            reason: "skipped: the previous run of this workflow was still going".into(),
            outcome: "not-run".into(),
            ..Row::of(&Caller::workflow(&workflow.name), app, release_id, &workflow.route, effect.as_str())
        };
        self.recorder.write(&self.root.app(app).data(), row);
    }

    /// Refuses a call to a route the release does not have, recorded too: a
    /// caller probing for routes leaves a trace. The name is the caller's, so
    /// it is kept escaped and short.
    #[allow(clippy::too_many_arguments)]
    fn no_such_route(
        &self,
        caller: &Caller,
        app: &AppId,
        release_id: &str,
        data: &Path,
        loaded: &Loaded,
        route: &str,
        started: Instant,
    ) -> CallError {
        let names: Vec<&str> = loaded.manifest.routes.iter().map(|r| r.name.as_str()).collect();
        let asked: String = route.escape_debug().take(crate::manifest::MAX_ROUTE_NAME + 16).collect();
        self.recorder.write(
            data,
            Row {
                decision: Decision::Refused.as_str().to_string(),
                reason: "no such route".into(),
                outcome: "not-run".into(),
                duration_ms: started.elapsed().as_secs_f64() * 1000.0,
                ..Row::of(caller, app, release_id, &asked, "unknown")
            },
        );
        CallError::new(
            ErrorKind::NotFound,
            format!(
                "{app} has no route `{}`; its routes are {}",
                route.escape_debug(),
                if names.is_empty() { "none".to_string() } else { names.join(", ") }
            ),
        )
    }

    /// `external_here`: an external route runs in this process (else the
    /// call answers `None` before anything is decided or recorded). A read
    /// that did not run because its app's release changed while it waited
    /// for its worker (an activation, a rollback: [`RELEASE_CHANGED`]) is
    /// passed again, once (`again`), from the start — for the release now
    /// active; a write is not (the person may have answered for the other
    /// release): its caller is told to call again.
    #[allow(clippy::too_many_arguments)]
    async fn call_with(
        &self,
        caller: &Caller,
        app: &AppId,
        target: &Target,
        route: &str,
        input: &str,
        approved_for: Option<&str>,
        external_here: bool,
        again: bool,
    ) -> Result<Option<Answer>, CallError> {
        let started = Instant::now();
        let Resolved { release: release_id, data, preview } = self.resolve_target(app, target)?;
        let loaded = self.load(app, &release_id).await?;
        let Some(r) = loaded.manifest.route(route) else {
            return Err(self.no_such_route(caller, app, &release_id, &data, &loaded, route, started));
        };
        let effect = r.effect;
        if effect == Effect::External && !external_here {
            return Ok(None);
        }
        let row = |decision: Decision, reason: &str, outcome: &str, request_id: &str, hash: &str| Row {
            request_id: request_id.to_string(),
            arguments_hash: hash.to_string(),
            decision: decision.as_str().to_string(),
            reason: reason.to_string(),
            outcome: outcome.to_string(),
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            ..Row::of(caller, app, &release_id, route, effect.as_str())
        };
        let value = match check_input(&loaded, route, input) {
            Ok(v) => v,
            Err(e) => {
                let reason = "the input did not fit the route's schema";
                let _ = self.record(&data, effect, row(Decision::Refused, reason, "not-run", "", "")).await;
                return Err(e);
            }
        };
        // The keys an external call would carry, named in its question.
        let keys = match effect == Effect::External && !preview {
            true => crate::secrets::named(&loaded.manifest),
            false => Vec::new(),
        };
        let knock = Knock {
            caller,
            app,
            release: &release_id,
            route,
            effect,
            preview,
            input: &value,
            approved_for,
            tool: false,
            change: None,
            keys: &keys,
        };
        let pass = match self.gate.guard(knock).await {
            Ok(pass) => pass,
            Err(refusal) => {
                let refused = Row {
                    answered_by: refusal.answered_by.to_string(),
                    ..row(refusal.decision, &refusal.reason, "not-run", &refusal.request_id, &refusal.arguments_hash)
                };
                let _ = self.record(&data, effect, refused).await;
                return Err(CallError::new(ErrorKind::Denied, refusal.reason));
            }
        };
        // What the input was parsed into is not held while the call runs
        // (the call carries its canonical text).
        drop(value);
        // The row that records it: who called, what the gate decided and who
        // answered; its outcome is set where it ran.
        let template = Row {
            answered_by: pass.answered_by().to_string(),
            ..row(pass.decision(), "", "ok", pass.request_id(), pass.arguments_hash())
        };
        let result = match self.elsewhere.get() {
            Some(elsewhere) => {
                let keys = match effect == Effect::External && !preview {
                    true => self.keys_of(app, &loaded.manifest),
                    false => Ok(Vec::new()),
                };
                let keys = match keys {
                    Ok(keys) => keys,
                    Err(e) => return Err(self.record_unrun(&data, effect, template, started, e).await),
                };
                let entry = CarriedEntry::Route { route: route.to_string(), input: pass.input().to_string() };
                let call = Carried {
                    app: app.clone(),
                    release: release_id.clone(),
                    data: data.clone(),
                    entry,
                    row: template.clone(),
                    grants: None,
                    keys,
                };
                match elsewhere.run(call, &loaded.manifest).await {
                    Ok(answered) => answered,
                    Err(e)
                        if !again
                            && effect == Effect::Read
                            && e.kind == ErrorKind::Conflict
                            && e.message.contains(RELEASE_CHANGED) =>
                    {
                        let _ = self.record_unrun(&data, effect, template, started, e).await;
                        let again =
                            self.call_with(caller, app, target, route, input, approved_for, external_here, true);
                        return Box::pin(again).await;
                    }
                    Err(e) => Err(self.record_unrun(&data, effect, template, started, e).await),
                }
            }
            None => self.settle_call(&pass, &loaded, app, &data, effect, route, template, None).await,
        };
        let output = result?;
        if effect.writes() && !preview {
            match self.noter.get() {
                // A worker that serves its app's pages: its launcher notes
                // it (before the call is answered), when not noted yet.
                Some(noter) => {
                    if self.first_write_unnoted(app, &release_id).is_some() {
                        noter.note(app, &release_id).await;
                    }
                }
                None => self.note_first_write(app, &release_id),
            }
        }
        Ok(Some(Answer { output, release: release_id, effect, duration_ms: started.elapsed().as_secs_f64() * 1000.0 }))
    }

    /// Runs a route the gate passed and records it: a call that wrote has
    /// its row committed with its write; any other's row is recorded after
    /// (a read's batched). `handed`: what its launcher gave it, in a worker.
    #[allow(clippy::too_many_arguments)]
    async fn settle_call(
        &self,
        pass: &Pass,
        loaded: &Loaded,
        app: &AppId,
        data: &Path,
        effect: Effect,
        route: &str,
        template: Row,
        handed: Option<&Handed>,
    ) -> Result<serde_json::Value, CallError> {
        let started = Instant::now();
        let row_of = |result: &Result<serde_json::Value, CallError>| {
            let (outcome, reason) = outcome_of(result);
            Row {
                outcome: outcome.to_string(),
                reason,
                duration_ms: template.duration_ms + started.elapsed().as_secs_f64() * 1000.0,
                ..template.clone()
            }
        };
        // The guest receives the canonical form of what was checked and hashed.
        let entry = Entry::Route { route, input: pass.input() };
        let (result, row) = self.run(pass, loaded, app, data, effect, entry, route, Some(&row_of), handed).await;
        let recorded = match row {
            None => self.recorder.synced(data).await,
            Some(row) => self.record(data, effect, row).await,
        };
        if let Err(e) = recorded
            && result.is_ok()
        {
            // Not acknowledged as done: the person could not find it later.
            return Err(CallError::new(
                ErrorKind::Internal,
                format!("{app} ran `{route}` and kept what it wrote, but the call could not be recorded ({e:#})"),
            ));
        }
        result
    }

    /// The person's keys an external call of `manifest` carries to the
    /// origins granted now (`crate::secrets`).
    fn keys_of(&self, app: &AppId, manifest: &Manifest) -> Result<Vec<crate::secrets::Given>, CallError> {
        if manifest.capabilities.secret.is_empty() {
            return Ok(Vec::new());
        }
        crate::grants::load(&self.root.app(app))
            .and_then(|grants| self.read_keys(app, manifest, &grants.network))
            .map_err(|e| CallError::new(ErrorKind::Internal, format!("{e:#}")))
    }

    /// The person's keys `manifest` declares, for the origins `granted`,
    /// from the keyring. It may take seconds to answer (its first unlock, up
    /// to the vault's deadline): the tasks this worker thread holds move to
    /// another meanwhile, so no other call waits.
    fn read_keys(
        &self,
        app: &AppId,
        manifest: &Manifest,
        granted: &[crate::manifest::Origin],
    ) -> anyhow::Result<Vec<crate::secrets::Given>> {
        let read = || crate::secrets::given(self.vault()?, app, manifest, granted);
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(read),
            _ => read(),
        }
    }

    /// Records a call the gate passed that did not run where it was sent
    /// (its keys could not be read, it never reached its worker, or its
    /// worker ended before it answered), and hands its error back.
    async fn record_unrun(
        &self,
        data: &Path,
        effect: Effect,
        template: Row,
        started: Instant,
        e: CallError,
    ) -> CallError {
        let (outcome, reason) = outcome_of::<()>(&Err(e.clone()));
        let row =
            Row { outcome: outcome.into(), reason, duration_ms: started.elapsed().as_secs_f64() * 1000.0, ..template };
        let _ = self.record(data, effect, row).await;
        e
    }

    /// Records a decision in the record of `data`: the row of a `write` or
    /// `external` call is on disk when this returns (group commit), the row of
    /// a read is queued for the next batch.
    pub(crate) async fn record(&self, data: &Path, effect: Effect, row: Row) -> anyhow::Result<()> {
        if effect == Effect::Read {
            self.recorder.write(data, row);
            Ok(())
        } else {
            self.recorder.write_durable(data, row).await
        }
    }

    /// Renders `page` of the app's active release for `query` (JSON text).
    pub async fn render(
        &self,
        caller: &Caller,
        app: &AppId,
        page: &str,
        query: &str,
    ) -> Result<serde_json::Value, CallError> {
        self.render_at(caller, app, &Target::Active, page, query).await
    }

    /// Renders `page` of `target` for `query` (JSON text); a render runs as a
    /// read, and is recorded as one (route `page:<name>`).
    pub async fn render_at(
        &self,
        caller: &Caller,
        app: &AppId,
        target: &Target,
        page: &str,
        query: &str,
    ) -> Result<serde_json::Value, CallError> {
        let started = Instant::now();
        let Resolved { release: release_id, data, .. } = self.resolve_target(app, target)?;
        let loaded = self.load(app, &release_id).await?;
        let query: serde_json::Value = serde_json::from_str(query)
            .map_err(|e| CallError::new(ErrorKind::InvalidInput, format!("the page query is not JSON ({e})")))?;
        if !query.is_object() {
            return Err(CallError::new(ErrorKind::InvalidInput, "the page query must be a JSON object"));
        }
        let hash = crate::gate::arguments_hash(&query);
        let query = query.to_string();
        let pass = self.gate.view();
        let page_route =
            format!("page:{}", page.escape_debug().take(crate::manifest::MAX_ROUTE_NAME + 16).collect::<String>());
        let template = Row {
            request_id: pass.request_id().to_string(),
            arguments_hash: hash,
            decision: pass.decision().as_str().to_string(),
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            ..Row::of(caller, app, &release_id, &page_route, Effect::Read.as_str())
        };
        match self.elsewhere.get() {
            Some(elsewhere) => {
                let entry = CarriedEntry::View { page: page.to_string(), query };
                let call = Carried {
                    app: app.clone(),
                    release: release_id,
                    data: data.clone(),
                    entry,
                    row: template.clone(),
                    grants: None,
                    keys: Vec::new(),
                };
                let result = match elsewhere.run(call, &loaded.manifest).await {
                    Ok(answered) => answered,
                    Err(e) => Err(self.record_unrun(&data, Effect::Read, template, started, e).await),
                };
                // Checked here too: the page a person sees is never only a
                // worker's word.
                result.and_then(|spec| valid_view(app, page, spec, &loaded))
            }
            None => self.settle_render(&pass, &loaded, app, &data, page, &query, template).await,
        }
    }

    /// Renders a page the gate let through (`Gate::view`), checks the view it
    /// returned against the release, and records it (batched, as a read).
    #[allow(clippy::too_many_arguments)]
    async fn settle_render(
        &self,
        pass: &Pass,
        loaded: &Loaded,
        app: &AppId,
        data: &Path,
        page: &str,
        query: &str,
        template: Row,
    ) -> Result<serde_json::Value, CallError> {
        let started = Instant::now();
        let result = self
            .run(pass, loaded, app, data, Effect::Read, Entry::View { page, query }, page, None, None)
            .await
            .0
            .and_then(|spec| {
                // Why a page is not drawn is in the app's log as well as in
                // its tab: its developer's way to see it from a terminal.
                valid_view(app, page, spec, loaded).inspect_err(|e| {
                    let log = crate::applog::dir_of(&self.root.app(app).dir);
                    crate::applog::queue(&log, crate::applog::Line::new("warn", "page", &e.message));
                })
            });
        let (outcome, reason) = outcome_of(&result);
        let row = Row {
            reason,
            outcome: outcome.to_string(),
            duration_ms: template.duration_ms + started.elapsed().as_secs_f64() * 1000.0,
            ..template
        };
        self.recorder.write(data, row);
        result
    }

    /// Runs `entry` of a loaded release. `row_of` makes the row that
    /// records the call from its result: a call that committed a write has
    /// it committed in the same transaction, and hands back `None`; any other
    /// hands the row back for the caller to record.
    #[allow(clippy::too_many_arguments)]
    async fn run(
        &self,
        pass: &Pass,
        loaded: &Loaded,
        app: &AppId,
        data: &Path,
        effect: Effect,
        entry: Entry<'_>,
        what: &str,
        row_of: Option<&RowOf<'_>>,
        handed: Option<&Handed>,
    ) -> (Result<serde_json::Value, CallError>, Option<Row>) {
        let plan = match self.plan(loaded, app, data, effect, what, handed) {
            Ok(plan) => plan,
            Err(e) => {
                let result = Err(e);
                let row = row_of.map(|f| f(&result));
                return (result, row);
            }
        };
        let kind = match entry {
            Entry::Route { .. } => "route",
            Entry::View { .. } => "page",
        };
        let keys = plan.network.keys_used();
        let (outcome, settle) = self.runtime.run(pass, &loaded.prepared, plan, entry).await;
        let owed_to = Owed { recorder: &self.recorder, data };
        settled(app, kind, what, outcome, settle, row_of, owed_to, &keys).await
    }

    /// Everything one call is given, decided before it starts: the store in
    /// the mode the effect allows, and for an external route what was
    /// declared and granted; nothing else.
    fn plan(
        &self,
        loaded: &Loaded,
        app: &AppId,
        data: &Path,
        effect: Effect,
        what: &str,
        handed: Option<&Handed>,
    ) -> Result<CallPlan, CallError> {
        let config = self.runtime.config();
        let store = self.store(data).map_err(|e| CallError::new(ErrorKind::Internal, format!("{e:#}")))?;
        let mode = if effect.writes() { Mode::ReadWrite } else { Mode::ReadOnly };
        let deadline = Instant::now() + config.call_deadline();
        let call_store = store.begin(mode, deadline).map_err(|e| {
            CallError::new(ErrorKind::Conflict, format!("the store of {app} is not available ({e:#}); try again"))
        })?;
        // A `write` route's call reaches the store soon: a group of writes
        // ending meanwhile waits for it (group commit, `caps::store`). An
        // `external` call may first spend seconds on the network: not it.
        let call_store = if effect == Effect::Write { call_store.on_its_way() } else { call_store };
        // A preview's calls write to the app's log too, saying so.
        let paths = self.root.app(app);
        let label = match data.parent().filter(|_| data != paths.data()) {
            Some(preview) => format!(
                "{what} (preview {})",
                release::short(&preview.file_name().unwrap_or_default().to_string_lossy())
            ),
            None => what.to_string(),
        };
        let log = caps::log::CallLog::new(
            app.as_str(),
            &label,
            config.log_lines_per_call,
            Some(crate::applog::dir_of(&paths.dir)),
        );
        if effect != Effect::External {
            return Ok(CallPlan {
                deadline,
                store: call_store,
                log,
                network: caps::network::CallNetwork::none(),
                files: caps::files::CallFiles::none(),
                spawn: caps::spawn::CallSpawn::none(false),
            });
        }
        // A preview runs against a copy of the data: no key of the person's
        // goes out from it.
        let preview = data != paths.data();
        let given = self.given(app, &loaded.manifest, preview, handed).map_err(|e| {
            self.replaced(app, &e).unwrap_or_else(|| CallError::new(ErrorKind::Internal, format!("{e:#}")))
        })?;
        let hands: Arc<dyn caps::network::KeyHands> = Arc::new(crate::secrets::outgoing::Keys::new(given.keys));
        let network = caps::network::CallNetwork::new(given.network, deadline, caps::network::NetLimits::of(config));
        let network = match handed.and_then(|h| h.relay.clone()) {
            // In a worker: its launcher sends (with the keys, which this
            // process never holds).
            Some(relay) => network.relayed(relay),
            None => network.with_keys(hands.clone()),
        };
        Ok(CallPlan {
            deadline,
            store: call_store,
            log: log.with_redactor(hands),
            network,
            files: caps::files::CallFiles::new(given.folders),
            spawn: caps::spawn::CallSpawn::new(given.spawn, deadline, self.containment()),
        })
    }

    /// What an external call of `app` is given: each capability its release
    /// declares **and** the person granted, decided by the capability itself
    /// (read now, so a revocation holds from the next call on).
    fn given(&self, app: &AppId, manifest: &Manifest, preview: bool, handed: Option<&Handed>) -> anyhow::Result<Given> {
        let grants = match handed {
            Some(h) => h.grants.clone(),
            None => crate::grants::load(&self.root.app(app))?,
        };
        let keys = match preview || manifest.capabilities.secret.is_empty() || handed.is_some() || self.ahead.is_some()
        {
            // None in a preview; none in a worker, whose launcher adds them
            // to the requests it sends for it.
            true => Vec::new(),
            false => self.read_keys(app, manifest, &grants.network)?,
        };
        let declared = &manifest.capabilities;
        let network = caps::network::configure(&declared.network, &grants.network);
        let folders = caps::files::configure(&declared.files, &grants.files);
        let scratch = scratch_of(&self.root, app);
        let config = self.runtime.config();
        let spawn = caps::spawn::configure(&declared.spawn, &grants.spawn, &folders, &network, config, scratch);
        Ok(Given { network, folders, spawn, keys })
    }
}

/// An external route's call asked of a process that runs them (never
/// answered `None`).
fn not_here() -> CallError {
    CallError::new(ErrorKind::Internal, "an external route's call was not run")
}

/// Where each program an app's call runs gets a scratch folder of its own:
/// beneath a folder of the app's (a worker writes there, and nowhere another
/// app's programs do).
pub fn scratch_of(root: &Root, app: &AppId) -> PathBuf {
    root.dir().join("cache").join("scratch").join(app.as_str())
}

/// Notes the first write of `release`'s activation for a call that ran in
/// an app's worker, which may not write the app's journal: what
/// `Apps::note_first_write` does in a process that runs its own calls. When
/// another change of the app holds its lock, it waits up to two seconds,
/// then leaves it to the app's next write (as a one-shot call always did).
pub fn note_first_write_of(root: &Root, app: &AppId, release_id: &str) {
    let paths = root.app(app);
    let file = crate::release::journal::activation_file(&paths);
    let Ok(text) = std::fs::read_to_string(&file) else { return };
    let under_way = crate::release::journal::under_way(&paths);
    let ToNote::Note(made_under) = to_note(app, &file, &text, release_id, under_way) else { return };
    let deadline = Instant::now() + std::time::Duration::from_secs(2);
    loop {
        match note_in_journal(&paths, &made_under) {
            Ok(Noted::Busy) if Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(50)),
            Ok(_) => return,
            Err(e) => {
                tracing::error!(app = %app, "cannot record the first write: {e:#}");
                return;
            }
        }
    }
}

/// What a write of a release has to note, from its app's activation file.
enum ToNote {
    /// The file is damaged (said once here).
    Damaged,
    /// The activation of this release holds its first write already.
    Already,
    Note(MadeUnder),
}

/// What a write of `release_id` has to note, from the activation file's
/// `text`; `under_way`: an activation or rollback of the app is under way.
fn to_note(app: &AppId, file: &Path, text: &str, release_id: &str, under_way: bool) -> ToNote {
    let seen: crate::release::journal::Activation = match serde_json::from_str(text) {
        Ok(a) => a,
        Err(e) => {
            tracing::error!(app = %app, "cannot record the first write: {} is damaged: {e}", file.display());
            return ToNote::Damaged;
        }
    };
    match seen.release == release_id {
        true if seen.first_write_at.is_some() && !under_way => ToNote::Already,
        true => ToNote::Note(MadeUnder::Seen(seen)),
        // The file names another release: either this call began before
        // another release was activated, or an activation of this one has
        // switched the pointer and not yet written its file (it holds the
        // app's lock meanwhile). Judged once the lock is free.
        false => ToNote::Note(MadeUnder::Release(release_id.to_string())),
    }
}

/// How long a first write waits, off the call's path, for another change
/// of its app to let go of the app's lock before it is noted.
const FIRST_WRITE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(600);

/// What became of a first write to be noted.
enum Noted {
    /// Noted, or nothing to note any more (the activation the write was made
    /// under is gone, or it holds a first write already).
    Done,
    /// Another change of the app holds its lock.
    Busy,
}

/// The activation a write was made under, as far as its call could tell.
enum MadeUnder {
    /// The one the activation file named (its release and time).
    Seen(crate::release::journal::Activation),
    /// One of this release, when the file named another: an activation of
    /// it switches the pointer before it writes its file, so a write can run
    /// on it in between. Noted in the activation of this release the file
    /// names once the app's lock is free, if any (noting an activation that
    /// did not write only makes a rollback ask; not noting one that did
    /// would let a rollback set its writes aside without asking).
    Release(String),
}

impl MadeUnder {
    fn key(&self) -> String {
        match self {
            MadeUnder::Seen(a) => a.activated_at.clone(),
            MadeUnder::Release(r) => format!("release:{r}"),
        }
    }
}

/// Notes the first write of the activation `made_under` in the app's
/// journal, under the app's lock and from the file as it is then: an
/// activation or rollback under way (in this process or another) is never
/// overwritten with the activation it replaces, and a first write is only
/// noted in an activation it was made under (the same release activated
/// again since is another activation: another `activated_at`), or, for
/// [`MadeUnder::Release`], in the activation of its release the file names.
fn note_in_journal(paths: &crate::root::AppPaths, made_under: &MadeUnder) -> anyhow::Result<Noted> {
    use crate::release::journal;
    let Ok(_lock) = journal::lock(paths, true) else { return Ok(Noted::Busy) };
    if journal::journal(paths)?.is_some() {
        // Half done, its process gone: noted once its recovery (the next
        // command's, or the launcher's) has decided the activation.
        return Ok(Noted::Busy);
    }
    let Some(a) = journal::activation(paths)? else { return Ok(Noted::Done) };
    // Or the activation that replaced the release that wrote: a write
    // noted after that activation began may have come after its snapshot,
    // which a plain rollback would put back without it.
    let same = match made_under {
        MadeUnder::Seen(seen) => {
            (a.release == seen.release && a.activated_at == seen.activated_at)
                || (a.previous.as_deref() == Some(seen.release.as_str()) && a.release != seen.release)
        }
        MadeUnder::Release(release) => a.release == *release || a.previous.as_deref() == Some(release.as_str()),
    };
    if !same || a.first_write_at.is_some() {
        return Ok(Noted::Done);
    }

    journal::note_first_write(paths, a)?;
    Ok(Noted::Done)
}

/// How often the open stores' write-ahead logs are checkpointed. Each
/// checkpoint syncs the log, so this also bounds what an operating-system
/// crash can lose (a process crash loses no committed call). More often
/// costs writes: the sync stalls the calls appending to the log (measured in
/// docs/performance.md, P3).
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Checkpoints every open store once a second, on a thread of its own,
/// so that no call pays for it; the thread ends with the `Apps`.
fn checkpoint_in_background(
    stores: std::sync::Weak<Mutex<HashMap<std::ffi::OsString, Arc<AppStore>>>>,
) -> anyhow::Result<()> {
    std::thread::Builder::new().name("autoapp-checkpoint".into()).spawn(move || {
        loop {
            std::thread::sleep(CHECKPOINT_EVERY);
            let Some(stores) = stores.upgrade() else { return };
            let open: Vec<Arc<AppStore>> = stores.lock().expect("stores").values().cloned().collect();
            drop(stores);
            for s in open {
                if let Err(e) = s.checkpoint() {
                    tracing::warn!("cannot checkpoint a store: {e:#}");
                }
            }
        }
    })?;
    Ok(())
}

/// Reads, compiles (or takes from the compile cache) and links a release, and
/// compiles its input schemas.
fn load(root: &Root, runtime: &Runtime, app: &AppId, release_id: &str) -> Result<Loaded, CallError> {
    let internal =
        |e: anyhow::Error| CallError::new(ErrorKind::Internal, format!("cannot load the release of {app}: {e:#}"));
    let paths = root.app(app);
    let manifest = release::manifest(&paths, release_id).map_err(internal)?;
    let bytes =
        std::fs::read(paths.release(release_id).join(release::COMPONENT_FILE)).map_err(|e| internal(e.into()))?;
    // Compiled when it was checked; compiled again only when the cache lost
    // it (another engine, the cache emptied): then confined, within the
    // budget, as a component from elsewhere (issue 51, rule 1): whoever made
    // it, the launcher never compiles in its own process.
    let budget = crate::runtime::Budget::of(runtime.config());
    let component = runtime.compile_elsewhere(&root.compiled_of(app), &bytes, &budget).map_err(|why| CallError {
        // (Said by a runtime that never compiles: nothing was compiled.)
        code_missing: !runtime.compiles() && why == crate::runtime::NOT_IN_CACHE,
        ..internal(anyhow::anyhow!("{why}"))
    })?;
    let prepared = runtime.prepare(&component).map_err(internal)?;
    let mut validators = HashMap::new();
    for r in &manifest.routes {
        let v = crate::manifest::input_validator(&r.input).map_err(|e| internal(anyhow::anyhow!("{e}")))?;
        validators.insert(r.name.clone(), v);
    }
    Ok(Loaded { manifest, prepared, validators })
}

/// Which release and data a call runs against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The active release on the app's data.
    Active,
    /// A preview (the one whose release starts with the prefix, or the
    /// newest) on its copy of the data.
    Preview(Option<String>),
}

/// What a [`Target`] is now: the release that answers, the data folder it
/// runs against, and whether that is a preview's copy.
struct Resolved {
    release: String,
    data: PathBuf,
    preview: bool,
}

/// The capabilities one external call is given.
struct Given {
    /// The keys its requests carry, each to its own origin (`crate::secrets`).
    keys: Vec<crate::secrets::Given>,
    network: Vec<crate::manifest::Origin>,
    folders: Vec<caps::files::Folder>,
    spawn: caps::spawn::Plan,
}

fn check_input(loaded: &Loaded, route: &str, input: &str) -> Result<serde_json::Value, CallError> {
    let value: serde_json::Value = serde_json::from_str(input).map_err(|e| {
        CallError::new(
            ErrorKind::InvalidInput,
            format!("the input of `{route}` is not JSON ({e}); give a JSON object like '{{}}'"),
        )
    })?;
    let validator = loaded.validators.get(route).expect("every route has a validator");
    // The quick look first: what fits is not walked again for its errors.
    if validator.is_valid(&value) {
        return Ok(value);
    }
    let problems: Vec<String> = validator
        .iter_errors(&value)
        .take(5)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() { e.to_string() } else { format!("{at}: {e}") }
        })
        .collect();
    if !problems.is_empty() {
        return Err(CallError::new(
            ErrorKind::InvalidInput,
            format!(
                "the input does not fit route `{route}`: {}; `autoapp explain` shows its schema",
                problems.join("; ")
            ),
        ));
    }
    Ok(value)
}

/// Every string of `value` (and every key of its objects) with the call's
/// keys taken out, as the caller reads it after parsing.
pub(crate) fn keys_out_of_strings(value: &mut serde_json::Value, hands: &dyn caps::network::KeyHands) {
    use serde_json::Value;
    match value {
        Value::String(s) => {
            if let std::borrow::Cow::Owned(clean) = hands.text(s) {
                *s = clean;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| keys_out_of_strings(v, hands)),
        Value::Object(map) => {
            let entries: Vec<(String, Value)> = std::mem::take(map).into_iter().collect();
            for (k, mut v) in entries {
                keys_out_of_strings(&mut v, hands);
                map.insert(hands.text(&k).into_owned(), v);
            }
        }
        _ => {}
    }
}

fn app_error(e: AppError) -> CallError {
    let (kind, msg) = match e {
        AppError::InvalidInput(m) => (ErrorKind::InvalidInput, m),
        AppError::NotFound(m) => (ErrorKind::NotFound, m),
        AppError::Conflict(m) => (ErrorKind::Conflict, m),
        AppError::Denied(m) => (ErrorKind::Denied, m),
        AppError::Internal(m) => (ErrorKind::Internal, m),
    };
    // The app's words reach the person and the logs: cut short, and no
    // secret in them.
    CallError::new(kind, crate::sanitize::secrets(&crate::elsewhere::text::cut(&msg, MOST_SAID)))
}

/// The outcome column of a call's row, and the reason for a failure.
/// `spec` when it is a view the release's page may show.
fn valid_view(
    app: &AppId,
    page: &str,
    spec: serde_json::Value,
    loaded: &Loaded,
) -> Result<serde_json::Value, CallError> {
    match crate::view::validate(&spec, &loaded.manifest, &|route, input| {
        loaded.validators.get(route).is_some_and(|v| v.is_valid(input))
    }) {
        Ok(()) => Ok(spec),
        Err(why) => Err(CallError::new(
            ErrorKind::Internal,
            format!("{app} returned a page `{page}` that cannot be shown: {why}"),
        )),
    }
}

fn outcome_of<T>(result: &Result<T, CallError>) -> (&'static str, String) {
    match result {
        Ok(_) => ("ok", String::new()),
        Err(e) if e.kind == ErrorKind::Trap => ("trap", "the guest was stopped".to_string()),
        Err(e) => ("error", format!("{:?}", e.kind).to_lowercase()),
    }
}

/// What a call came to: its answer, or the error the caller hears; its store
/// transaction is committed only on success.
#[allow(clippy::too_many_arguments)]
async fn settled(
    app: &AppId,
    kind: &str,
    what: &str,
    outcome: Outcome,
    settle: crate::runtime::Settle,
    row_of: Option<&RowOf<'_>>,
    owed_to: Owed<'_>,
    keys: &caps::network::KeysUsed,
) -> (Result<serde_json::Value, CallError>, Option<Row>) {
    if settle.log.dropped() > 0 {
        tracing::warn!(
            app = app.as_str(),
            what,
            dropped = settle.log.dropped(),
            "log lines over the per-call cap were dropped"
        );
    }
    let result = match outcome {
        // Whatever the guest made of it, a call whose deadline passed while
        // it waited for its turn to write was too busy to run.
        _ if settle.store.waited_out() => Err(CallError::new(
            ErrorKind::Conflict,
            format!(
                "{}: other writes of {app} kept it busy until this call's deadline; nothing it wrote was kept",
                caps::store::BUSY
            ),
        )),
        // Its turn came, but too late to finish: busy too, not a fault.
        Outcome::Trap(Stopped::Deadline(d)) if settle.store.waited() >= d / 2 => Err(CallError::new(
            ErrorKind::Conflict,
            format!(
                "{}: this call waited {} ms of its {} ms for other writes of {app} to finish and then ran out of time; nothing it wrote was kept",
                caps::store::BUSY,
                settle.store.waited().as_millis(),
                d.as_millis()
            ),
        )),
        // Weighed before it is parsed: held parsed, a heavy answer costs its
        // worker and its launcher many times its size.
        Outcome::Ok(text) if text.len() > MAX_ANSWER_BYTES => Err(CallError::new(
            ErrorKind::Internal,
            format!(
                "{app} answered {kind} `{what}` with {} MiB of JSON, more than the {} MiB an answer may be; nothing it wrote was kept",
                text.len() >> 20,
                MAX_ANSWER_BYTES >> 20
            ),
        )),
        Outcome::Ok(text) if crate::elsewhere::json::values(text.as_bytes()) > MAX_ANSWER_VALUES => {
            Err(CallError::new(
                ErrorKind::Internal,
                format!(
                    "{app} answered {kind} `{what}` with more than the {MAX_ANSWER_VALUES} JSON values an answer may hold (a long list is paged); nothing it wrote was kept"
                ),
            ))
        }
        Outcome::Ok(text) => match serde_json::from_str::<serde_json::Value>(&keys.hands.text(&text)) {
            // And again once parsed: a string the JSON text spelled another
            // way is checked as the caller will read it (issue 72, rule 5).
            Ok(mut v) => {
                if !keys.hands.is_empty() {
                    keys_out_of_strings(&mut v, keys.hands.as_ref());
                }
                Ok(v)
            }
            Err(_) => Err(CallError::new(
                ErrorKind::Internal,
                format!("{app} answered {kind} `{what}` with something that is not JSON; nothing it wrote was kept"),
            )),
        },
        Outcome::Error(e) => Err(app_error(e)),
        Outcome::Trap(stopped) => Err(CallError::new(
            ErrorKind::Trap,
            format!("{app} was stopped in {kind} `{what}`: it {stopped}; nothing it wrote was kept"),
        )),
    };
    // No key the call was given leaves in its error either.
    let result = result.map_err(|e| CallError { message: keys.hands.text(&e.message).into_owned(), ..e });
    // Only a write's row can go in with its transaction: a read's is not
    // wrapped for it (no allocation on the read path).
    let mut row = row_of.map(|f| f(&result)).map(|r| noted(r, keys));
    let writes = settle.store.mode() == caps::store::Mode::ReadWrite;
    let shared = row.take_if(|_| writes).map(Arc::new);
    let insert = shared.clone().map(|row| {
        Box::new(crate::gate::record::insert_beside(row, owed_to.recorder, owed_to.data)) as caps::store::HostStep
    });
    let finished = settle.store.finish_with(result.is_ok(), insert).await;
    match finished {
        Ok(true) => (result, None),
        Ok(false) => (result, row.or(shared.map(Arc::unwrap_or_clone))),
        Err(e) => {
            // Nothing was kept: the row says so.
            let failed = Err(CallError::new(ErrorKind::Internal, format!("{e:#}")));
            let row = row_of.map(|f| f(&failed)).map(|r| noted(r, keys));
            (failed, row)
        }
    }
}

/// A call's row, saying where the host replaced what the app put in a key's
/// place.
fn noted(mut row: Row, keys: &caps::network::KeysUsed) -> Row {
    let said = keys.said();
    if !said.is_empty() {
        row.reason = if row.reason.is_empty() { said } else { format!("{}; {said}", row.reason) };
    }
    row
}

/// Where the row of a write goes when the write was kept without it and its
/// call is no longer there to record it: the record's writer of `data`
/// (`gate::record::RowBeside`).
#[derive(Clone, Copy)]
struct Owed<'a> {
    recorder: &'a Arc<Recorder>,
    data: &'a Path,
}

/// The record of the data folder `data`, beside its store: the row that
/// records a write is committed just before the write.
fn record_beside(data: &Path) -> caps::store::Beside {
    caps::store::Beside {
        name: crate::gate::record::BESIDE,
        path: data.join(crate::gate::record::RUNS_FILE),
        make: crate::gate::record::make,
        statement: crate::gate::record::INSERT_BESIDE,
    }
}

/// Makes the row that records a call from its result.
type RowOf<'a> = dyn Fn(&Result<serde_json::Value, CallError>) -> Row + Send + Sync + 'a;

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 72, rule 5: an answer is redacted as text, then again once
    /// parsed — a key spelled with JSON escapes the text pass missed, or in
    /// an object's key, is not in what the caller reads.
    #[test]
    fn an_answer_s_strings_are_checked_as_the_caller_reads_them() {
        let given = crate::secrets::Given {
            name: "weather".into(),
            binding: crate::caps::secret::Binding {
                origin: crate::caps::network::Origin::parse("https://api.weather.example").unwrap(),
                place: crate::secrets::Place::Query { query: "k".into() },
            },
            value: crate::secrets::Value::new("sk-test/7Hq2Zr9+vXw4Lm8Pn".into()),
        };
        let hands = crate::secrets::outgoing::Keys::new(vec![given]);
        let mut v = serde_json::json!({
            "a": ["sk-test/7Hq2Zr9+vXw4Lm8Pn", { "b": "x sk-test/7Hq2Zr9+vXw4Lm8Pn y" }],
            "sk-test/7Hq2Zr9+vXw4Lm8Pn": 1,
            "n": 2,
        });
        keys_out_of_strings(&mut v, &hands);
        assert_eq!(
            v,
            serde_json::json!({
                "a": ["[secret weather]", { "b": "x [secret weather] y" }],
                "[secret weather]": 1,
                "n": 2,
            })
        );
    }
    use crate::bindings::app::autoapp::app::store::Value;
    use crate::gate::record::{self, Durability};

    /// At each level, a write and its decision row are both committed, the
    /// row just before the write (the record's own commit, then the store's);
    /// at `power` the group's sync then covers both logs, once for every row
    /// waiting.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_and_its_decision_row_are_committed_in_one_step_at_each_level() {
        for durability in [Durability::Process, Durability::Power] {
            let d = tempfile::tempdir().unwrap();
            let store = AppStore::open_with(d.path(), Some(record_beside(d.path()))).unwrap();
            store
                .migrate(&[caps::store::Migration { name: "0001.sql".into(), sql: "CREATE TABLE t (x)".into() }])
                .unwrap();
            let recorder = Arc::new(Recorder::new(durability));
            let before = record::groups_synced();
            let tasks: Vec<_> = (0..16)
                .map(|i| {
                    let (store, recorder, dir) = (store.clone(), recorder.clone(), d.path().to_path_buf());
                    tokio::spawn(async move {
                        let deadline = Instant::now() + std::time::Duration::from_secs(10);
                        let mut c = store.begin(Mode::ReadWrite, deadline).unwrap();
                        c.execute(
                            "INSERT INTO t (x) VALUES (?1)",
                            vec![crate::bindings::app::autoapp::app::store::Value::Integer(i)],
                        )
                        .await
                        .unwrap();
                        let r = Arc::new(record::test_row(i as usize));
                        let insert = Box::new(record::insert_beside(r.clone(), &recorder, &dir));
                        match c.finish_with(true, Some(insert)).await.unwrap() {
                            true => recorder.synced(&dir).await.unwrap(),
                            false => recorder.write_durable(&dir, Arc::unwrap_or_clone(r)).await.unwrap(),
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            // Every acknowledged write has its row, read by another connection.
            let rows = record::read(d.path(), 100).unwrap();
            assert_eq!(rows.len(), 16, "{durability:?}");
            let c = crate::sqlite::open(&d.path().join(caps::store::STORE_FILE), crate::sqlite::read_only()).unwrap();
            let n: i64 = c.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
            assert_eq!(n, 16);
            let groups = record::groups_synced() - before;
            match durability {
                Durability::Process => assert_eq!(groups, 0, "process: nothing synced"),
                Durability::Power => assert!((1..=16).contains(&groups), "power: {groups} syncs for 16 writes"),
            }
        }
    }

    /// One write call as `Apps::call` makes it (`settled`, then `record`):
    /// its row goes in beside its write, or, when the record was busy, the
    /// call records it itself.
    async fn write_call(store: Arc<AppStore>, recorder: Arc<Recorder>, dir: PathBuf, x: i64) -> anyhow::Result<()> {
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        let mut c = store.begin(Mode::ReadWrite, deadline)?;
        c.execute("INSERT INTO t (x) VALUES (?1)", vec![Value::Integer(x)]).await?;
        write_call_end(c, recorder, dir, x).await
    }

    /// The writes `t` holds, and the request ids of the record's rows, sorted.
    fn writes_and_rows(dir: &Path) -> (Vec<i64>, Vec<String>) {
        let c = crate::sqlite::open(&dir.join(caps::store::STORE_FILE), crate::sqlite::read_only()).unwrap();
        let mut st = c.prepare("SELECT x FROM t ORDER BY x").unwrap();
        let kept = st.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
        let mut rows: Vec<String> = record::read(dir, 100_000).unwrap().into_iter().map(|r| r.request_id).collect();
        rows.sort();
        (kept, rows)
    }

    /// A store of `t (x)` with the record beside it.
    fn store_and_record(dir: &Path) -> Arc<AppStore> {
        let store = AppStore::open_with(dir, Some(record_beside(dir))).unwrap();
        store.migrate(&[caps::store::Migration { name: "0001.sql".into(), sql: "CREATE TABLE t (x)".into() }]).unwrap();
        store
    }

    /// Issue 55: a write call waits in a group for its commit and its
    /// caller goes away (its future dropped: a client that disconnected);
    /// at the group's commit another connection holds the record's write
    /// lock for a moment. The group's rows wait for it, then go in before
    /// the writes: every write is kept with its row, the gone call's too.
    /// (Issue 55's fix wrote the rows after the writes when the record was
    /// busy, the gone one's by its step; issue 54's kill test still found
    /// kept writes without rows, so the rows now go first.)
    #[test]
    fn a_write_kept_after_its_caller_went_away_while_the_record_was_busy_has_its_row() {
        for durability in [Durability::Process, Durability::Power] {
            let d = tempfile::tempdir().unwrap();
            let dir = d.path().to_path_buf();
            let mut store = store_and_record(&dir);
            store.keep_groups_open();
            let recorder = Arc::new(Recorder::new(durability));
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let deadline = Instant::now() + std::time::Duration::from_secs(30);
                // The head holds the write permit…
                let mut head = store.begin(Mode::ReadWrite, deadline).unwrap();
                head.execute("INSERT INTO t (x) VALUES (?1)", vec![Value::Integer(0)]).await.unwrap();
                // …while the member queues behind it, and the last behind both.
                let member = tokio::spawn(write_call(store.clone(), recorder.clone(), dir.clone(), 1));
                tokio::task::yield_now().await;
                let mut last = store.begin(Mode::ReadWrite, deadline).unwrap();
                let mut last_writes = Box::pin(last.execute("INSERT INTO t (x) VALUES (2)", vec![]));
                assert!(futures::poll!(&mut last_writes).is_pending(), "the last waits its turn");
                // The head parks its group for them and waits for the commit.
                let mut head_done = Box::pin(write_call_end(head, recorder.clone(), dir.clone(), 0));
                assert!(futures::poll!(&mut head_done).is_pending(), "the head waits for its group's commit");
                // The member joins, writes and waits too (the last still queued).
                for _ in 0..20 {
                    tokio::task::yield_now().await;
                }
                assert!(!member.is_finished(), "the member waits for its group's commit");
                // Its caller goes away.
                member.abort();
                assert!(member.await.unwrap_err().is_cancelled());
                // Another connection holds the record's write lock for a
                // moment…
                let blocker = crate::sqlite::open(&dir.join(record::RUNS_FILE), crate::sqlite::read_write()).unwrap();
                blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
                let release = std::thread::spawn(move || {
                    std::thread::sleep(std::time::Duration::from_millis(300));
                    blocker.execute_batch("COMMIT").unwrap();
                });
                // …when the last call ends the group: the rows wait for it.
                last_writes.await.unwrap();
                let step = Box::new(record::insert_beside(Arc::new(record::test_row(2)), &recorder, &dir));
                assert!(last.finish_with(true, Some(step)).await.unwrap(), "the rows went in first");
                release.join().unwrap();
                head_done.await.unwrap();
            });
            recorder.flush();
            let (kept, rows) = writes_and_rows(&dir);
            assert_eq!(kept, [0, 1, 2], "{durability:?}: every write was kept");
            for x in kept {
                assert!(rows.contains(&format!("r{x}")), "{durability:?}: the kept write {x} has no row: {rows:?}");
            }
        }
    }

    /// The end of [`write_call`] for a call that has written.
    async fn write_call_end(
        c: caps::store::CallStore,
        recorder: Arc<Recorder>,
        dir: PathBuf,
        x: i64,
    ) -> anyhow::Result<()> {
        let row = Arc::new(record::test_row(x as usize));
        let step = Box::new(record::insert_beside(row.clone(), &recorder, &dir));
        if !c.finish_with(true, Some(step)).await? {
            recorder.write_durable(&dir, Arc::unwrap_or_clone(row)).await?;
        }
        Ok(())
    }

    /// Issue 55, under load: 32 writers at a time, a third of them dropped
    /// by their caller at a moment of its choosing, while another connection
    /// takes the record's write lock again and again. Counted, not timed:
    /// every write in the store has its row, and every write a caller heard
    /// was done is in the store.
    #[test]
    fn under_load_with_callers_going_away_every_kept_write_has_its_row_at_each_level() {
        for durability in [Durability::Process, Durability::Power] {
            let d = tempfile::tempdir().unwrap();
            let dir = d.path().to_path_buf();
            let store = store_and_record(&dir);
            let recorder = Arc::new(Recorder::new(durability));
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let blocker = {
                let (dir, stop) = (dir.clone(), stop.clone());
                std::thread::spawn(move || {
                    let c = crate::sqlite::open(&dir.join(record::RUNS_FILE), crate::sqlite::read_write()).unwrap();
                    c.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
                    for _ in 0..2_000 {
                        if stop.load(std::sync::atomic::Ordering::Acquire) {
                            break;
                        }
                        c.execute_batch("BEGIN IMMEDIATE").unwrap();
                        std::thread::sleep(std::time::Duration::from_millis(3));
                        c.execute_batch("COMMIT").unwrap();
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                })
            };
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            // A small deterministic sequence of choices (which calls go, and when).
            let mut seed = 0x9e37_79b9_u64 ^ durability as u64;
            let mut next = move || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            let mut done = Vec::new();
            rt.block_on(async {
                for round in 0..6i64 {
                    let mut calls = Vec::new();
                    for i in 0..32i64 {
                        let x = round * 100 + i;
                        let call = tokio::spawn(write_call(store.clone(), recorder.clone(), dir.clone(), x));
                        let gone = (next() % 3 == 0).then(|| std::time::Duration::from_micros(next() % 3_000));
                        calls.push((x, call, gone));
                    }
                    // Each caller that goes away does so at its own moment,
                    // while the others run.
                    for (_, call, gone) in &calls {
                        if let Some(after) = *gone {
                            let call = call.abort_handle();
                            tokio::spawn(async move {
                                tokio::time::sleep(after).await;
                                call.abort();
                            });
                        }
                    }
                    for (x, call, _) in calls {
                        if let Ok(Ok(())) = call.await {
                            done.push(x);
                        }
                    }
                }
            });
            stop.store(true, std::sync::atomic::Ordering::Release);
            blocker.join().unwrap();
            recorder.flush();
            let (kept, rows) = writes_and_rows(&dir);
            let gone = kept.iter().filter(|x| !done.contains(x)).count();
            for x in &done {
                assert!(kept.contains(x), "{durability:?}: the acknowledged write {x} is not in the store");
            }
            for x in &kept {
                assert!(rows.contains(&format!("r{x}")), "{durability:?}: the kept write {x} has no row");
            }
            let mut once = rows.clone();
            once.dedup();
            assert_eq!((rows.len(), once.len()), (kept.len(), kept.len()), "{durability:?}: one row a kept write");
            crate::tell!("{durability:?}: {} writes kept, {gone} of them of calls whose caller went away", kept.len());
        }
    }
}
