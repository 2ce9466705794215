//! The launcher's workers: every call its gate passes runs in a process of
//! its app's own (issue 54), started at the app's first call and kept while
//! it is used.
//!
//! An app has up to two: one for its read and write routes and its pages
//! (its data and logs, no socket, no granted file: [`Side::Inner`]), and one
//! for its external routes (what the person granted them as well:
//! [`Side::Outer`]), so a page never runs with the network an external route
//! was given. Each is `autoapp __worker <policy> serve`, confined from its
//! first instruction as a command line call's worker is (`worker::main`),
//! its policy computed here from the release, the grants and the previews
//! (`worker::reach::policy`). The launcher talks to it over the pipes of its
//! standard streams — a channel nobody else holds —, one JSON line each way
//! per call, each bounded, answered in any order (an id per call).
//!
//! Landlock cannot widen a process's rules: when what a worker may reach
//! changes (a grant, a revoke, a new preview, an activation whose release
//! asks for other things), the next call starts a new worker and the old
//! one is retired: it gets no new call, finishes the ones it has, and ends
//! when its channel closes. A worker that ends on its own (a crash, a kill)
//! fails the calls it had — each recorded by the launcher as ended with its
//! worker — and the next call starts another, after a back-off when it
//! keeps ending. One that does not answer a call by the call's deadline
//! (and a margin) is killed. One with nothing to do for
//! `worker_idle_secs` is retired. Its lines on standard error are said,
//! escaped and bounded; its start and end are written to the app's log.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};

use crate::apps::{Answered, Apps, BoxFuture, CallError, Carried, CarriedEntry, Compiler, ErrorKind};
use crate::caps::confine::{self, Policy};
use crate::config::Config;
use crate::manifest::{AppId, Effect, Manifest};
use crate::root::Root;

use crate::caps::network::CallNetwork;
use crate::caps::network::relay::{self, Failure, Outgoing, Received};

use super::{Held, MAX_SAID_VALUES};

/// Which of an app's workers a call runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Side {
    /// Read and write routes, and pages: no socket, no granted file.
    Inner,
    /// External routes: the origins, folders and programs granted.
    Outer,
}

/// The most a line from a worker may be (an answer, read by the launcher):
/// an answer of [`MAX_ANSWER_BYTES`](crate::apps::MAX_ANSWER_BYTES) as its
/// worker writes it again, with room to spare (a number it parsed may be
/// written longer: `1e15` as `1000000000000000.0`).
const MAX_LINE: u64 = 64 << 20;

/// The most of an app's workers' standard error said at once: its share
/// starts full and fills again by as much an hour, for each of the app's two
/// kinds of worker across all their starts ([`Allowance`]).
const MAX_STDERR: usize = 1 << 20;

/// The longest line of a worker's standard error said as one (the rest of
/// a longer one is the next line).
const MAX_STDERR_LINE: u64 = 16 << 10;

/// What an app's workers may still say on standard error: a worker that
/// says its share and ends, again and again (a crash loop, or one taken by
/// an escape), would else fill the launcher's log by a share a restart.
struct Allowance {
    left: usize,
    at: Instant,
    /// Its end was said (once, until it has a share again).
    told: bool,
}

impl Allowance {
    fn new() -> Allowance {
        Allowance { left: MAX_STDERR, at: Instant::now(), told: false }
    }

    /// Whether `n` bytes may be said now (taken from the share if so).
    fn take(&mut self, n: usize) -> bool {
        let earned = (self.at.elapsed().as_secs_f64() / 3600.0 * MAX_STDERR as f64) as usize;
        if earned > 0 {
            self.left = (self.left + earned).min(MAX_STDERR);
            self.at = Instant::now();
        }
        let may = self.left >= n;
        if may {
            self.left -= n;
            self.told = false;
        }
        may
    }
}

/// A worker's error, as its caller hears it: cut short, then cleaned of
/// what looks like a secret (as an app's error is where it runs).
fn heard(message: &str) -> String {
    crate::sanitize::secrets(&crate::elsewhere::text::cut(message, crate::apps::MOST_SAID)).into_owned()
}

/// How long a worker has to confine itself and say it is ready.
const START_WITHIN: Duration = Duration::from_secs(20);

/// Beyond a call's own deadline, how long its worker has to answer it
/// before it is killed (settling, recording, a loaded machine).
const ANSWER_MARGIN: Duration = Duration::from_secs(15);

/// The first line a worker reads: whose it is.
#[derive(Serialize, Deserialize)]
pub(super) struct Start {
    pub root: PathBuf,
    pub config: Config,
    pub app: AppId,
    /// How its programs are contained, when the launcher knows (it started
    /// it without Landlock); else by whether it confined itself.
    pub containment: Option<crate::caps::spawn::Containment>,
    /// The app's own server, which it serves on the socket it was given
    /// as its descriptor 3 (an inner worker of an app the launcher serves).
    #[serde(default)]
    pub site: Option<SiteStart>,
}

/// What a worker needs to serve its app's own server.
#[derive(Serialize, Deserialize)]
pub(super) struct SiteStart {
    pub port: u16,
    /// The sessions of the app's tabs so far (each later one is sent).
    pub sessions: Vec<String>,
}

/// The descriptor a worker finds its app's listening socket at.
pub(super) const SITE_FD: i32 = 3;

/// A line to a worker.
#[derive(Serialize, Deserialize)]
pub(super) struct Ask {
    pub id: u64,
    pub what: What,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum What {
    /// A call to run (an external call's keys stay with the launcher,
    /// which sends its requests: [`Said::Send`]).
    Call {
        call: Box<Carried>,
    },
    Prepare {
        release: String,
    },
    /// The answer to what the worker asked (`id`: the worker's).
    Reply(Reply),
    /// The sessions of the app's tabs, all of them.
    Sessions(Vec<String>),
    /// It is in place: it serves its app's server from now on, for these
    /// sessions (and those sent later).
    Serve(Vec<String>),
    /// Retired: it takes no new connection of its app's server and ends its
    /// tabs' event streams (the calls it was sent still run).
    StopServing,
    /// Retired, and sent its last call: it finishes what it has, and ends.
    Retire,
}

/// The launcher's answer to what a worker asked.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reply {
    /// A launch token redeemed: the session it opened, none if it was not live.
    Redeemed(Option<String>),
    /// A forwarded request's answer: its head, ...
    Head { status: u16, headers: Vec<(String, String)> },
    /// ... its body, a piece at a time (base64), ...
    Chunk(String),
    /// ... and its end.
    End,
    /// A first write noted.
    Noted,
    /// The release's code compiled (or there already): `None`; or why not.
    Compiled(Option<String>),
    /// A request the worker handed over was sent: its answer's head, then
    /// its body's [`Reply::Chunk`]s, maybe its [`Reply::Trailers`], and
    /// [`Reply::End`] — or [`Reply::Broken`] where it failed part way.
    Sent(Received),
    /// ... or it was not: why, as the app reads it.
    NotSent(Failure),
    /// An answer's trailers (each value in base64).
    Trailers(Vec<(String, String)>),
    /// An answer's body failed part way.
    Broken(Failure),
}

/// A line from a worker: `id` 0 is its start.
#[derive(Serialize, Deserialize)]
pub(super) struct Told {
    pub id: u64,
    pub said: Said,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum Said {
    /// Confined (as `held`) and ready for calls.
    Ready {
        held: HeldAs,
        /// Its runtime resets a freed instance in place (it has its page map).
        #[serde(default)]
        in_place: bool,
    },
    /// It could not confine itself: why.
    Unconfinable(String),
    /// It could not start (after it was confined).
    Failed(String),
    Answer(Result<serde_json::Value, CallError>),
    /// A tab's launch token to redeem (the launcher holds the tokens).
    Redeem(String),
    /// A request of its server that the launcher answers (its questions,
    /// events, the app's information, the panel): sent whole, answered by
    /// [`Reply::Head`], [`Reply::Chunk`]s and [`Reply::End`].
    Forward(Forwarded),
    /// The client of a forwarded request went away.
    Cancel,
    /// A write of `release` that may be its activation's first.
    Note(String),
    /// The code of `release` (one of its app's) is not in the compiled
    /// cache, which it may only read: its launcher compiles it.
    Compile(String),
    /// A write changed the app's data (the pages hear of it).
    Changed,
    /// Its server is used (at most once a second): not idle.
    Used,
    /// An app's request, of the call it runs for `call` (the launcher's id
    /// of it), that the launcher sends through the call's filter with its
    /// keys: a worker holds no socket and no key (issue 72, rule 1).
    /// Answered by [`Reply::Sent`] or [`Reply::NotSent`].
    Send {
        call: u64,
        request: Outgoing,
    },
}

/// A request a worker's server sends on to its launcher.
#[derive(Serialize, Deserialize)]
pub(super) struct Forwarded {
    pub method: String,
    pub uri: String,
    pub headers: Vec<(String, String)>,
    /// base64.
    pub body: String,
}

/// [`Held`], as a worker says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum HeldAs {
    Whole,
    Files,
    Filter,
}

impl From<Held> for HeldAs {
    fn from(h: Held) -> HeldAs {
        match h {
            Held::Whole => HeldAs::Whole,
            Held::Files => HeldAs::Files,
            Held::Filter => HeldAs::Filter,
        }
    }
}

/// A worker as `autoapp status` and the panel show it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Shown {
    pub app: String,
    pub side: Side,
    pub pid: u32,
    /// `running` (calls in it now) or `idle`.
    pub state: String,
    pub calls: usize,
    /// Its resident memory, KiB (from `/proc`), when it could be read.
    pub memory_kib: Option<u64>,
    /// How its confinement holds on this kernel: `landlock`,
    /// `landlock files only`, `filter only`.
    pub confined: String,
    pub started_secs_ago: u64,
    /// The port of the app's own server, when this worker serves it.
    #[serde(default)]
    pub serves_port: Option<u16>,
    /// Its runtime resets a freed instance in place (it opened its page
    /// map before it was confined, on a kernel with `PAGEMAP_SCAN`).
    #[serde(default)]
    pub in_place: bool,
}

/// The workers of one launcher (cloned cheaply: one set, shared).
#[derive(Clone)]
pub struct Workers {
    inner: Arc<Inner>,
}

struct Inner {
    /// Whether each worker's start and end is written to its app's log (a
    /// launcher's), or only an end it did not ask for (a command's).
    log_starts: bool,
    root: Root,
    config: Config,
    me: PathBuf,
    live: Mutex<HashMap<Which, Arc<Live>>>,
    /// One start at a time per worker: the first calls of an app wait for it.
    starting: Mutex<HashMap<Which, Arc<tokio::sync::Mutex<()>>>>,
    /// Policies computed, by what they were computed from, with the grants
    /// read for them (an outer worker's).
    policies: Mutex<HashMap<Which, Computed>>,
    /// Workers that ended on their own: when, and how many in a row.
    ended: Arc<Mutex<HashMap<Which, (Instant, u32)>>>,
    /// What each of an app's workers (its inner one, its outer one) may
    /// still say on standard error, across its starts (a worker that ends
    /// and is started again gets no new share; neither takes the other's).
    words: Arc<Mutex<HashMap<Which, Allowance>>>,
    /// This kernel has no Landlock (found when a worker could not confine
    /// itself): workers run with the filter alone, said at each start.
    without_landlock: Mutex<Option<confine::Support>>,
    /// The thread that starts every worker. A worker ends when the thread
    /// that started it does (its parent-death signal is the thread's, not
    /// the process's): this one lives as long as the launcher's workers,
    /// where a runtime's thread may end with its site or when idle.
    spawner: Mutex<std::sync::mpsc::Sender<Spawn>>,
    /// The launcher is stopping: no worker starts any more.
    stopping: AtomicBool,
    /// The apps whose own server their inner worker serves, on the
    /// launcher's socket.
    sites: Mutex<HashMap<AppId, Arc<Site>>>,
    /// Per app, how many times its workers were retired because what they
    /// hold changed under them (its server no longer served, its folder
    /// moved): a worker that started meanwhile is not put in place.
    eras: Mutex<HashMap<AppId, u64>>,
    /// The apps whose own data folder is being moved (a rollback, a
    /// removal), each with how many moves are under way: no worker of
    /// theirs starts until it is in place again ([`Inner::moved`] wakes
    /// the starts that wait).
    moving: Mutex<HashMap<AppId, usize>>,
    in_place: tokio::sync::Notify,
    /// Who compiles what a worker finds missing from the compiled cache
    /// (the launcher's `Apps`, held weakly: it holds this pool).
    compiler: std::sync::OnceLock<Arc<dyn Compiler>>,
}

/// The launcher's `Apps`, compiling for its workers (held weakly: it holds
/// the pool): one compile at a time for all of them, and a release that
/// could not be compiled is not tried again for [`COMPILE_FAILED_FOR`] (a
/// worker, or an escape in one, cannot keep the launcher compiling).
struct CompilesFor {
    apps: std::sync::Weak<Apps>,
    one: tokio::sync::Semaphore,
    failed: Mutex<HashMap<(AppId, String), (Instant, CallError)>>,
}

/// How long a release whose code could not be compiled for a worker is
/// answered with that failure before it is tried again.
const COMPILE_FAILED_FOR: Duration = Duration::from_secs(60);

impl CompilesFor {
    fn failed_lately(&self, which: &(AppId, String)) -> Option<CallError> {
        let mut failed = self.failed.lock().expect("failed");
        failed.retain(|_, (when, _)| when.elapsed() < COMPILE_FAILED_FOR);
        failed.get(which).map(|(_, e)| e.clone())
    }
}

impl Compiler for CompilesFor {
    fn compile(self: Arc<Self>, app: &AppId, release: &str) -> BoxFuture<Result<(), CallError>> {
        let (this, which) = (self, (app.clone(), release.to_string()));
        Box::pin(async move {
            if let Some(e) = this.failed_lately(&which) {
                return Err(e);
            }
            let Ok(_one) = this.one.acquire().await else {
                return Err(CallError::new(ErrorKind::Internal, "the launcher is stopping"));
            };
            // (It may have failed while this waited.)
            if let Some(e) = this.failed_lately(&which) {
                return Err(e);
            }
            let Some(apps) = this.apps.upgrade() else {
                return Err(CallError::new(ErrorKind::Internal, "the launcher is stopping"));
            };
            let done = apps.compile_for_worker(&which.0, &which.1).await;
            // Remembered only for a release that is there (one entry each):
            // an id that names none is answered at once, and never kept.
            if let Err(e) = &done
                && e.kind == ErrorKind::Internal
            {
                this.failed.lock().expect("failed").insert(which, (Instant::now(), e.clone()));
            }
            done
        })
    }
}

/// An app's own server: the launcher's listening socket (kept, so its port
/// stays while workers come and go), served by the app's inner worker.
struct Site {
    listener: std::net::TcpListener,
    port: u16,
    door: Arc<dyn Door>,
}

/// What the launcher's side of an app's server does for the worker that
/// serves it: the launch tokens and sessions (the launcher's), the
/// requests it answers itself (questions, events, the app's information,
/// the panel), first writes, changes; and the server itself while no
/// worker can start.
pub trait Door: Send + Sync {
    /// The sessions of the app's tabs.
    fn sessions(&self) -> Vec<String>;
    /// Redeems a launch token: the session it opens, none if it is not live.
    fn redeem(&self, token: &str) -> Option<String>;
    /// Answers a request the worker sent on.
    fn forward(&self, request: http::Request<Vec<u8>>) -> BoxFuture<SentBack>;
    /// Notes a write of `release` that may be its activation's first.
    fn note(&self, release: &str);
    /// The app's data changed.
    fn changed(&self);
    /// Serves the app's server in the launcher until `until` (its worker
    /// could not start: each call then fails as its start did).
    fn serve_here(&self, listener: tokio::net::TcpListener, until: BoxFuture<()>) -> BoxFuture<()>;
}

/// The launcher's answer to a request a worker sent on: its head, and its
/// body as it comes (its length, when it is known).
pub struct SentBack {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub length: Option<u64>,
    pub body: futures::stream::BoxStream<'static, Vec<u8>>,
}

/// The most of a request's body a worker's server sends on to its
/// launcher (its routes take less: answers, the panel's address).
pub const MAX_SENT_ON: usize = 2 << 20;

/// [`MAX_SENT_ON`] as base64, as the channel carries it.
const MAX_SENT_ON_B64: usize = MAX_SENT_ON.div_ceil(3) * 4;

/// The most a line a worker says of its own accord may be (all but an
/// answer): a request it sends on, with room for its head.
const MAX_WORD: usize = MAX_SENT_ON_B64 + (1 << 20);

/// The most of the launcher's answers queued for one worker and not yet
/// written to it (its tabs' event streams, answers sent on).
const MAX_UNREAD: usize = 64 << 20;

/// At most this many forwarded requests of one worker at once (its tabs'
/// event streams, questions answered).
const MAX_FORWARDED: usize = 256;

/// At most this much of the bodies of one worker's forwarded requests (as
/// the channel carries them: base64) held by its launcher at once — six
/// inputs of the most a request may send on. A call's input is held while
/// the call runs, with what the launcher makes of it: a worker taken by an
/// escape, sending on [`MAX_FORWARDED`] calls of the most each that its own
/// app then never answers, would otherwise have its launcher hold GiBs.
const MAX_FORWARDED_BYTES: usize = 6 * MAX_SENT_ON_B64;

/// A worker's command, and where its process goes once started.
type Spawn = (std::process::Command, tokio::sync::oneshot::Sender<std::io::Result<std::process::Child>>);

/// One of an app's workers.
type Which = (AppId, Side);

/// A policy, what it was computed from, and the grants read for it.
type Computed = (Stamp, Arc<Policy>, Option<crate::grants::Grants>);

/// What a policy was computed from: the release (an outer worker's), the
/// grants file and the previews folder as they were.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    release: String,
    grants: Option<(u64, i64, i64, u64)>,
    previews: Option<(u64, i64, i64, u64)>,
    /// The app's folder and its data folder, by inode: a rollback, a
    /// restore or a removal puts another folder there, which a worker's
    /// rules (made for the folder, not its name) do not reach.
    folders: (Option<u64>, Option<u64>),
}

fn stamp_of(path: &std::path::Path) -> Option<(u64, i64, i64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path).ok().map(|m| (m.ino(), m.mtime(), m.mtime_nsec(), m.len()))
}

/// One worker process.
struct Live {
    policy: Arc<Policy>,
    shared: Arc<Shared>,
    /// Lines to its standard input; dropped with the last `Live`, which
    /// closes its channel: it finishes its calls and ends.
    lines: tokio::sync::mpsc::UnboundedSender<zeroize::Zeroizing<Vec<u8>>>,
}

/// What a worker's tasks and its calls share.
struct Shared {
    app: AppId,
    side: Side,
    pid: u32,
    started: Instant,
    held: HeldAs,
    next: AtomicU64,
    calls: AtomicUsize,
    last_used: Mutex<Instant>,
    pending: Mutex<Awaited>,
    /// It has ended (its channel closed).
    gone: AtomicBool,
    /// Retired by the launcher: its end is not a crash.
    retired: AtomicBool,
    /// The longest it may take to end once retired ([`linger`]): past it,
    /// it is stopped.
    linger: Duration,
    /// Where its app's log is.
    log_dir: PathBuf,
    /// Asks the task that owns its process to kill it (only that task
    /// reaps it, after the kill: its id is never another's by then).
    kill: tokio::sync::Notify,
    /// Retired or ended: it takes no new connection of its app's server.
    over: tokio::sync::watch::Sender<bool>,
    /// Ended.
    ended: tokio::sync::watch::Sender<bool>,
    /// The port of its app's server, when it serves it.
    site: Option<u16>,
    /// Its runtime resets freed instances in place.
    in_place: bool,
    /// A compile it asked for is under way (one at a time: another ask
    /// meanwhile is refused, so a worker cannot queue work in its launcher).
    compiling: AtomicBool,
    /// The bytes of the launcher's answers queued for it, not yet written.
    unread: AtomicUsize,
    /// Some of them were written: an answer's body waiting for room goes on.
    drained: tokio::sync::Notify,
    /// The launcher's answers to what it asked (its channel's second
    /// queue, open until it ends: a retired worker still hears them).
    replies: tokio::sync::mpsc::UnboundedSender<zeroize::Zeroizing<Vec<u8>>>,
}

/// The longest a worker may take to end once retired: the longest any of
/// its calls may run and be waited for (its time, the margin to answer, and
/// two compiles it may ask its launcher for, as [`Workers::ask`] waits).
fn linger(config: &Config) -> Duration {
    config.call_deadline() + ANSWER_MARGIN + 2 * config.compile_budget()
}

impl Shared {
    fn retire(self: &Arc<Self>) {
        let first = !self.retired.swap(true, Ordering::AcqRel);
        self.over.send_replace(true);
        if self.site.is_some() {
            // At once, while a caller may still hold it: another worker
            // takes the socket now.
            self.reply(0, What::StopServing);
        }
        if !first {
            return;
        }
        // It ends once its calls are done. One that does not (taken by an
        // escape, it would keep its channel, its socket and its process for
        // as long as the launcher runs) is stopped once no call of it can
        // still be running.
        // (Every retirement is on the launcher's runtime.)
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (me, linger, mut ended) = (Arc::downgrade(self), self.linger, self.ended.subscribe());
        runtime.spawn(async move {
            let outlived = tokio::time::timeout(linger, ended.wait_for(|e| *e)).await.is_err();
            if let Some(s) = me.upgrade().filter(|_| outlived) {
                let message = format!(
                    "its {} worker (pid {}) had not ended {} s after it was retired, and was stopped",
                    s.side.word(),
                    s.pid,
                    linger.as_secs()
                );
                crate::applog::queue(&s.log_dir, crate::applog::Line::new("warn", "worker", &message));
                tracing::warn!(app = %s.app, "{message}");
                s.kill.notify_one();
            }
        });
    }

    /// Until its unread answers are under half their bound (or it ended):
    /// an answer's body is sent on no faster than it reads it.
    async fn room(&self) {
        while self.unread.load(Ordering::Acquire) > MAX_UNREAD / 2 && !self.gone.load(Ordering::Acquire) {
            let _ = tokio::time::timeout(Duration::from_millis(20), self.drained.notified()).await;
        }
    }

    /// Sends `what` as the answer to its ask `id`.
    fn reply(&self, id: u64, what: What) {
        if let Some(line) = line_of(id, what) {
            // A worker that stops reading its channel while it asks (an
            // escaped one) does not make the launcher hold its answers
            // without end: past the bound it is ended.
            if self.unread.fetch_add(line.len(), Ordering::AcqRel) + line.len() > MAX_UNREAD {
                self.kill.notify_one();
            }
            let _ = self.replies.send(line);
        }
    }
}

/// A line to a worker.
fn line_of(id: u64, what: What) -> Option<zeroize::Zeroizing<Vec<u8>>> {
    let mut line = zeroize::Zeroizing::new(serde_json::to_vec(&Ask { id, what }).ok()?);
    line.push(b'\n');
    Some(line)
}

/// A worker's ask for compiled code, answered (and its `compiling` let go)
/// however its task ends.
struct Answering {
    shared: Arc<Shared>,
    id: u64,
    /// The answer: `Some(None)` compiled.
    why: Option<Option<String>>,
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.shared.compiling.store(false, Ordering::Release);
        let why = self.why.take().unwrap_or_else(|| Some("its launcher stopped compiling it".into()));
        self.shared.reply(self.id, What::Reply(Reply::Compiled(why)));
    }
}

/// A call a worker has not answered yet.
struct Pending {
    answer: tokio::sync::oneshot::Sender<Result<serde_json::Value, CallError>>,
    /// An external call's network, with its keys: what its worker's
    /// requests are sent through, and what its answer is redacted by.
    network: Option<Arc<CallNetwork>>,
}

/// The calls sent to a worker that its answers may answer: each once.
///
/// A call whose caller stopped waiting (went away, or gave up at its own
/// deadline) may still be answered once, which an honest worker does; any
/// other answer — to a call never sent, or a second one — is not the
/// channel's, and ends the worker (a worker taken by an escape could else
/// have its launcher parse lines of tens of MiB without end).
#[derive(Default)]
struct Awaited {
    pending: HashMap<u64, Pending>,
    /// Calls given up before their answer came.
    given_up: u64,
}

/// An answer that answers no call sent.
#[derive(Debug, PartialEq, Eq)]
struct Unasked;

impl Awaited {
    fn expect(&mut self, id: u64, pending: Pending) {
        self.pending.insert(id, pending);
    }

    /// The caller of `id` stops waiting (its answer came, or not).
    fn give_up(&mut self, id: u64) {
        if self.pending.remove(&id).is_some() {
            self.given_up += 1;
        }
    }

    /// The answer to `id` came: who waits for it, if anyone still does.
    fn answered(&mut self, id: u64) -> Result<Option<Pending>, Unasked> {
        if let Some(p) = self.pending.remove(&id) {
            return Ok(Some(p));
        }
        match self.given_up.checked_sub(1) {
            Some(left) => {
                self.given_up = left;
                Ok(None)
            }
            None => Err(Unasked),
        }
    }

    /// The network of call `id`, while it waits for its answer.
    fn network_of(&self, id: u64) -> Option<Arc<CallNetwork>> {
        self.pending.get(&id).and_then(|p| p.network.clone())
    }

    /// The worker ended: every call still waiting.
    fn drain(&mut self) -> Vec<Pending> {
        self.given_up = 0;
        self.pending.drain().map(|(_, p)| p).collect()
    }
}

impl Workers {
    /// A launcher's workers: each start and end is written to its app's log.
    pub fn new(root: Root, config: Config) -> anyhow::Result<Workers> {
        Workers::made(root, config, true)
    }

    /// The workers of one command (`autoapp call`): its app's log hears of
    /// a worker's end only when it did not end as asked.
    pub fn for_one_command(root: Root, config: Config) -> anyhow::Result<Workers> {
        Workers::made(root, config, false)
    }

    fn made(root: Root, config: Config, log_starts: bool) -> anyhow::Result<Workers> {
        let me = std::env::current_exe()
            .map_err(|e| anyhow::anyhow!("cannot find the autoapp binary to start the apps' workers ({e})"))?;
        let (spawner, commands) = std::sync::mpsc::channel::<Spawn>();
        std::thread::Builder::new().name("autoapp-workers".into()).spawn(move || {
            for (mut command, started) in commands {
                let _ = started.send(command.spawn());
            }
        })?;
        let inner = Arc::new(Inner {
            spawner: Mutex::new(spawner),
            stopping: AtomicBool::new(false),
            root,
            config,
            me,
            live: Mutex::default(),
            starting: Mutex::default(),
            policies: Mutex::default(),
            ended: Arc::default(),
            words: Arc::default(),
            without_landlock: Mutex::new(None),
            sites: Mutex::default(),
            eras: Mutex::default(),
            moving: Mutex::default(),
            in_place: tokio::sync::Notify::new(),
            compiler: std::sync::OnceLock::new(),
            log_starts,
        });
        Ok(Workers { inner })
    }

    /// From now on, what a worker finds missing from the compiled cache is
    /// compiled by `apps` (the launcher's, whose calls run in this pool).
    pub fn compile_with(&self, apps: &Arc<Apps>) {
        let compiler =
            CompilesFor { apps: Arc::downgrade(apps), one: tokio::sync::Semaphore::new(1), failed: Mutex::default() };
        let _ = self.inner.compiler.set(Arc::new(compiler));
    }

    /// Retires the workers idle for `worker_idle_secs`, until `stopping`.
    pub async fn retire_idle(self, mut stopping: tokio::sync::watch::Receiver<bool>) {
        let this = self.inner;
        let idle = Duration::from_secs(this.config.worker_idle_secs.max(1));
        let every = (idle / 4).clamp(Duration::from_millis(250), Duration::from_secs(5));
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stopping.wait_for(|s| *s) => return,
            }
            let mut live = this.live.lock().expect("workers");
            live.retain(|_, w| {
                let quiet = w.shared.calls.load(Ordering::Acquire) == 0
                    && w.shared.last_used.lock().expect("used").elapsed() >= idle;
                if quiet {
                    w.shared.retire();
                }
                !quiet
            });
        }
    }

    /// From now on `app`'s own server is served by its inner worker, on
    /// `listener` (the launcher keeps it: the port stays while workers come
    /// and go). A worker is started at the first connection, and again at
    /// the next one after it retired or ended.
    pub fn serve_site(&self, app: &AppId, listener: std::net::TcpListener, door: Arc<dyn Door>) -> anyhow::Result<()> {
        let port = listener.local_addr()?.port();
        let site = Arc::new(Site { listener, port, door });
        self.inner.sites.lock().expect("sites").insert(app.clone(), site.clone());
        // The one running has no socket: the next call or connection starts one with it.
        self.inner.retire_side(app, Side::Inner);
        tokio::spawn(self.inner.clone().watch_site(app.clone(), site));
        Ok(())
    }

    /// `app`'s own server is served no more (its worker stops taking
    /// connections; the calls it has finish).
    pub fn unserve_site(&self, app: &AppId) {
        if self.inner.sites.lock().expect("sites").remove(app).is_some() {
            // (Before the retirement: a worker starting now, given the
            // socket, is retired as it is put in place.)
            self.inner.next_era(app);
            self.inner.retire_side(app, Side::Inner);
        }
    }

    /// Retires every worker and waits (up to `within`) for each to finish
    /// its calls, write its last rows and end.
    pub async fn stop_all(&self, within: Duration) {
        self.inner.stopping.store(true, Ordering::Release);
        let retired: Vec<Arc<Shared>> = {
            let mut live = self.inner.live.lock().expect("workers");
            let retired = live.values().map(|w| w.shared.clone()).collect();
            for w in live.values() {
                w.shared.retire();
            }
            live.clear();
            retired
        };
        let until = Instant::now() + within;
        while Instant::now() < until && retired.iter().any(|s| !s.gone.load(Ordering::Acquire)) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The workers running now, by app and side.
    pub fn shown(&self) -> Vec<Shown> {
        let live: Vec<Arc<Shared>> =
            self.inner.live.lock().expect("workers").values().map(|w| w.shared.clone()).collect();
        let mut shown: Vec<Shown> = live
            .into_iter()
            .filter(|s| !s.gone.load(Ordering::Acquire))
            .map(|s| {
                let calls = s.calls.load(Ordering::Acquire);
                Shown {
                    app: s.app.to_string(),
                    side: s.side,
                    pid: s.pid,
                    state: if calls > 0 { "running" } else { "idle" }.to_string(),
                    calls,
                    memory_kib: memory_kib(s.pid),
                    confined: match s.held {
                        HeldAs::Whole => "landlock",
                        HeldAs::Files => "landlock files only",
                        HeldAs::Filter => "filter only",
                    }
                    .to_string(),
                    started_secs_ago: s.started.elapsed().as_secs(),
                    serves_port: s.site,
                    in_place: s.in_place,
                }
            })
            .collect();
        shown.sort_by(|a, b| (&a.app, a.side == Side::Outer).cmp(&(&b.app, b.side == Side::Outer)));
        shown
    }
}

/// What a caller is told when its app changed while its worker started.
fn changed(app: &AppId) -> CallError {
    CallError::new(ErrorKind::Conflict, format!("{app} changed while its worker started; nothing ran; try again"))
}

impl Inner {
    fn era(&self, app: &AppId) -> u64 {
        self.eras.lock().expect("eras").get(app).copied().unwrap_or(0)
    }

    fn next_era(&self, app: &AppId) {
        *self.eras.lock().expect("eras").entry(app.clone()).or_default() += 1;
    }

    /// The app whose own data folder is `data` (none for a preview's).
    fn owner_of(&self, data: &std::path::Path) -> Option<AppId> {
        let app = data.strip_prefix(self.root.apps_dir()).ok().and_then(|p| p.components().next())?;
        let app = AppId::parse(&app.as_os_str().to_string_lossy()).ok()?;
        (self.root.app(&app).data() == data).then_some(app)
    }

    /// Waits (up to a minute) until no move of `app`'s data folder is under
    /// way (a worker started meanwhile would be confined to the folder
    /// moved aside, or find none), then says the app's era: read under the
    /// lock a move takes its era under, so a move that begins after the
    /// look changes the era this start is compared with.
    async fn until_in_place(&self, app: &AppId) -> Result<u64, CallError> {
        let until = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let notified = self.in_place.notified();
            tokio::pin!(notified);
            // (Listening before the look: a move that ends in between wakes it.)
            notified.as_mut().enable();
            {
                let moving = self.moving.lock().expect("moving");
                if !moving.contains_key(app) {
                    return Ok(self.era(app));
                }
            }
            if tokio::time::timeout_at(until, notified).await.is_err() {
                return Err(CallError::new(
                    ErrorKind::Conflict,
                    format!("{app}'s data is still being moved (a rollback or removal); try again when it is done"),
                ));
            }
        }
    }

    /// `data` is about to move: its workers are retired, and no worker of
    /// the app it is the data folder of starts until [`Inner::moved`].
    fn moving(&self, data: &std::path::Path) {
        if let Some(app) = self.owner_of(data) {
            let mut moving = self.moving.lock().expect("moving");
            *moving.entry(app.clone()).or_default() += 1;
            // (Under the lock [`Inner::until_in_place`] reads it under.)
            self.next_era(&app);
        }
        self.retire_holding(data);
    }

    /// `data` moved (or the move failed): a worker that started before the
    /// move began and is still starting is retired too, and the starts that
    /// waited go on, for the folder as it is now.
    fn moved(&self, data: &std::path::Path) {
        self.retire_holding(data);
        if let Some(app) = self.owner_of(data) {
            let mut moving = self.moving.lock().expect("moving");
            if let Some(n) = moving.get_mut(&app) {
                *n -= 1;
                if *n == 0 {
                    moving.remove(&app);
                }
            }
        }
        self.in_place.notify_waiters();
    }

    /// [`Inner::worker`], once more (up to three times) when its app
    /// changed while it started: the worker was retired before it took the
    /// call, so nothing ran twice, and the caller is not told to try again
    /// for what the launcher can do itself.
    async fn worker_again(
        self: &Arc<Self>,
        app: &AppId,
        side: Side,
        policy: Arc<Policy>,
    ) -> Result<Arc<Live>, CallError> {
        for _ in 0..3 {
            if let Some(live) = self.worker_or_changed(app, side, policy.clone()).await? {
                return Ok(live);
            }
        }
        self.worker(app, side, policy).await
    }

    fn retire_side(&self, app: &AppId, side: Side) {
        if let Some(w) = self.live.lock().expect("workers").remove(&(app.clone(), side)) {
            w.shared.retire();
        }
    }

    /// Sends the sessions of `app`'s tabs to its workers that serve its server.
    fn sessions_changed(&self, app: &AppId) {
        let Some(site) = self.sites.lock().expect("sites").get(app).cloned() else { return };
        let serving: Vec<Arc<Shared>> = self
            .live
            .lock()
            .expect("workers")
            .values()
            .filter(|w| w.shared.app == *app && w.shared.site.is_some())
            .map(|w| w.shared.clone())
            .collect();
        let sessions = site.door.sessions();
        for s in serving {
            s.reply(0, What::Sessions(sessions.clone()));
        }
    }

    /// Keeps `app`'s server answered while it is served: when no worker
    /// serves it and a connection waits, starts one (and while none can
    /// start, serves it here for a while, each call failing as the start
    /// did).
    async fn watch_site(self: Arc<Self>, app: AppId, site: Arc<Site>) {
        #[allow(deprecated)]
        let waiting = site
            .listener
            .try_clone()
            .and_then(|l| tokio::io::unix::AsyncFd::with_interest(l, tokio::io::Interest::READABLE));
        let waiting = match waiting {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(app = %app, "cannot watch the app's server: {e}");
                return;
            }
        };
        let served = |this: &Inner| {
            !this.stopping.load(Ordering::Acquire)
                && this.sites.lock().expect("sites").get(&app).is_some_and(|s| Arc::ptr_eq(s, &site))
        };
        while served(&self) {
            let serving = self
                .live
                .lock()
                .expect("workers")
                .get(&(app.clone(), Side::Inner))
                .filter(|w| w.shared.site.is_some() && !*w.shared.over.borrow())
                .map(|w| w.shared.clone());
            if let Some(w) = serving {
                // Until it is retired or ends (or, now and then, to see
                // whether the server is still served).
                let mut over = w.over.subscribe();
                let _ = tokio::time::timeout(Duration::from_secs(1), over.wait_for(|o| *o)).await;
                continue;
            }
            // None serves it: wait for a connection.
            let Ok(Ok(mut ready)) = tokio::time::timeout(Duration::from_secs(1), waiting.readable()).await else {
                continue;
            };
            // Readiness the runtime saw while a worker served it may be
            // stale: asked of the socket itself.
            let mut fds = [rustix::event::PollFd::new(waiting.get_ref(), rustix::event::PollFlags::IN)];
            let pending =
                rustix::event::poll(&mut fds, Some(&rustix::event::Timespec::default())).is_ok_and(|n| n == 1);
            if !pending {
                ready.clear_ready();
                continue;
            }
            drop(ready);
            // (`Ok(false)`: the app changed while it started; the next one
            // is for what it is now.)
            if let Err(e) = self.clone().start_serving(&app).await {
                if !served(&self) {
                    return;
                }
                tracing::warn!(app = %app, "its worker cannot serve its page: {}", e.message);
                match site.listener.try_clone().and_then(|l| tokio::net::TcpListener::from_std(l)) {
                    Ok(listener) => {
                        let until: BoxFuture<()> = Box::pin(tokio::time::sleep(Duration::from_secs(2)));
                        // (A tab's event stream would hold it open: not past 3 s.)
                        let _ =
                            tokio::time::timeout(Duration::from_secs(3), site.door.serve_here(listener, until)).await;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
                }
            }
        }
    }

    /// Starts `app`'s inner worker for its active release (it takes the
    /// app's server with it); `false` when the app changed while it started
    /// (it was retired unserved).
    async fn start_serving(self: Arc<Self>, app: &AppId) -> Result<bool, CallError> {
        let internal = |e: anyhow::Error| CallError::new(ErrorKind::Internal, format!("{e:#}"));
        let paths = self.root.app(app);
        let release = crate::release::active(&paths)
            .map_err(internal)?
            .ok_or_else(|| CallError::new(ErrorKind::NotFound, format!("{app} has no active release")))?;
        let manifest = crate::release::manifest(&paths, &release).map_err(internal)?;
        let (policy, _) = self.policy(app, Side::Inner, &release, &manifest, &paths.data())?;
        self.worker_or_changed(app, Side::Inner, policy).await.map(|w| w.is_some())
    }

    /// The policy of `app`'s worker on `side` for `manifest`'s `release`,
    /// computed again only when what it comes from changed; with the
    /// grants it was computed from (an outer worker's), which its calls
    /// carry: a worker never reads a grants file the launcher replaced
    /// after it was confined (its rule holds the file it named), and its
    /// calls are given exactly what its rules were made for.
    fn policy(
        &self,
        app: &AppId,
        side: Side,
        release: &str,
        manifest: &Manifest,
        data: &std::path::Path,
    ) -> Result<(Arc<Policy>, Option<crate::grants::Grants>), CallError> {
        let internal = |e: anyhow::Error| CallError::new(ErrorKind::Internal, format!("{e:#}"));
        let paths = self.root.app(app);
        let stamp = Stamp {
            release: if side == Side::Outer { release.to_string() } else { String::new() },
            // An inner worker's rules do not hold what is granted.
            grants: if side == Side::Outer { stamp_of(&crate::grants::file(&paths)) } else { None },
            previews: stamp_of(&paths.dir.join("previews")),
            folders: (stamp_of(&paths.dir).map(|s| s.0), stamp_of(&paths.data()).map(|s| s.0)),
        };
        let key = (app.clone(), side);
        // (A preview made while its folder's time was read is found by its
        // data folder, which the cached policy does not write.)
        if let Some((s, p, g)) = self.policies.lock().expect("policies").get(&key)
            && *s == stamp
            && p.write.iter().any(|w| w == data)
        {
            return Ok((p.clone(), g.clone()));
        }
        let grants = match side {
            Side::Outer => Some(crate::grants::load(&paths).map_err(internal)?),
            Side::Inner => None,
        };
        let policy = super::reach::policy(&self.root, app, manifest, grants.as_ref(), &self.config, self.me.clone())
            .map_err(internal)?;
        let policy = Arc::new(policy);
        self.policies.lock().expect("policies").insert(key, (stamp, policy.clone(), grants.clone()));
        Ok((policy, grants))
    }

    /// The worker of `app` on `side` for `policy`: the one running, or a
    /// new one (the old one, whose policy differs, retired). A conflict
    /// when the app changed while it started ([`Inner::worker_again`] takes
    /// the next one instead).
    async fn worker(self: &Arc<Self>, app: &AppId, side: Side, policy: Arc<Policy>) -> Result<Arc<Live>, CallError> {
        self.worker_or_changed(app, side, policy).await?.ok_or_else(|| changed(app))
    }

    /// [`Inner::worker`], or `None` when the app changed while its worker
    /// started: what it holds changed (its server is served no more, its
    /// folder moved, its data copied for an activation), and it was
    /// retired as it was put in place, having taken nothing.
    async fn worker_or_changed(
        self: &Arc<Self>,
        app: &AppId,
        side: Side,
        policy: Arc<Policy>,
    ) -> Result<Option<Arc<Live>>, CallError> {
        let key = (app.clone(), side);
        let current = |live: &HashMap<Which, Arc<Live>>| {
            // An inner worker serves its app's server when the launcher serves it.
            let site = side == Side::Inner && self.sites.lock().expect("sites").contains_key(app);
            live.get(&key)
                .filter(|w| !w.shared.gone.load(Ordering::Acquire) && (w.policy == policy || *w.policy == *policy))
                .filter(|w| w.shared.site.is_some() == site)
                .cloned()
        };
        if let Some(w) = current(&self.live.lock().expect("workers")) {
            return Ok(Some(w));
        }
        let gate = self.starting.lock().expect("starting").entry(key.clone()).or_default().clone();
        let _one = gate.lock().await;
        if let Some(w) = current(&self.live.lock().expect("workers")) {
            return Ok(Some(w));
        }
        // One that keeps ending waits longer before each start.
        let wait = match self.ended.lock().expect("ended").get(&key) {
            Some((at, n)) if at.elapsed() < Duration::from_secs(60) => {
                Duration::from_millis(100u64.saturating_mul(1 << (*n).min(6))).min(Duration::from_secs(5))
            }
            _ => Duration::ZERO,
        };
        tokio::time::sleep(wait).await;
        let era = self.until_in_place(app).await?;
        // In a task of its own: a caller that goes away meanwhile (its
        // client disconnected) does not leave a process half started.
        let (this, app, started_key) = (self.clone(), app.clone(), key.clone());
        let started = tokio::spawn(async move {
            if this.stopping.load(Ordering::Acquire) {
                return Err(CallError::new(ErrorKind::Internal, "the launcher is stopping"));
            }
            let live = Arc::new(this.start(&app, side, policy).await?);
            if cfg!(debug_assertions) && std::env::var_os("AUTOAPP_PAUSE").is_some() {
                // Debug builds only: a test holds a started worker here
                // (`AUTOAPP_PAUSE=workers:started`).
                let _ = tokio::task::spawn_blocking(|| crate::release::journal::pause("workers:started")).await;
            }
            let mut all = this.live.lock().expect("workers");
            if this.stopping.load(Ordering::Acquire) {
                live.shared.retire();
                return Err(CallError::new(ErrorKind::Internal, "the launcher is stopping"));
            }
            // What it holds changed while it started (its server is served
            // no more, its folder moved: `unserve_site`, `retire_holding`
            // took the era first, then the workers in place): it would
            // serve a socket or reach a folder the app no longer has.
            if this.era(&app) != era {
                drop(all);
                live.shared.retire();
                return Ok(None);
            }
            if let Some(old) = all.insert(started_key, live.clone()) {
                old.shared.retire();
            }
            drop(all);
            if live.shared.site.is_some() {
                // In place: now it serves the app's server (with the tabs'
                // sessions, those opened while it started too). One retired
                // as it was put in place never took a connection.
                let sessions = this.sites.lock().expect("sites").get(&app).map(|s| s.door.sessions());
                live.shared.reply(0, What::Serve(sessions.unwrap_or_default()));
            }
            Ok(Some(live))
        });
        started
            .await
            .unwrap_or_else(|e| Err(CallError::new(ErrorKind::Internal, format!("starting a worker failed ({e})"))))
    }

    /// Retires the workers of the app whose folder holds `data` (before that
    /// folder is moved: a rollback, a restore, a removal).
    fn retire_holding(&self, data: &std::path::Path) {
        // The app's own data folder takes the next era before the workers
        // in place are retired: one starting now is retired as it is put in
        // place. (A preview's is no worker's own: it changes no era.)
        if let Some(app) = self.owner_of(data) {
            self.next_era(&app);
        }
        self.live.lock().expect("workers").retain(|(app, _), w| {
            let holds = data.starts_with(self.root.app(app).dir);
            if holds {
                w.shared.retire();
            }
            !holds
        });
        self.policies.lock().expect("policies").retain(|(app, _), _| !data.starts_with(self.root.app(app).dir));
    }

    /// Starts a worker and waits until it is confined and ready.
    async fn start(self: &Arc<Self>, app: &AppId, side: Side, policy: Arc<Policy>) -> Result<Live, CallError> {
        let refused = |why: String| CallError::new(ErrorKind::Internal, why);
        let mut without = self.without_landlock.lock().expect("support").clone();
        for _ in 0..2 {
            let unconfined = without.as_ref().is_some_and(|s| !s.enforced);
            if let Some(s) = without.as_ref().filter(|_| unconfined) {
                tell!("autoapp: {app}'s worker runs without Landlock: {}", s.summary);
            }
            match self.spawn(app, side, &policy, unconfined, without.as_ref()).await? {
                Ok(live) => return Ok(live),
                Err(why) => {
                    // Only where the kernel says it has no Landlock does a
                    // worker run without it.
                    // (The kernel's answer comes from a process of its own: off
                    // the runtime's threads.)
                    let here = match without.is_none() {
                        true => {
                            let config = self.config.clone();
                            tokio::task::spawn_blocking(move || super::none_here(&config)).await.ok().flatten()
                        }
                        false => None,
                    };
                    match here {
                        Some(none_here) => {
                            *self.without_landlock.lock().expect("support") = Some(none_here.clone());
                            without = Some(none_here);
                        }
                        None => {
                            return Err(refused(format!(
                                "the call was not run: {app}'s worker could not be confined ({})",
                                super::bounded(why)
                            )));
                        }
                    }
                }
            }
        }
        Err(refused(format!("the call was not run: {app}'s worker could not be started")))
    }

    /// Starts one worker process: `Ok(Err(why))` when it could not confine
    /// itself.
    async fn spawn(
        self: &Arc<Self>,
        app: &AppId,
        side: Side,
        policy: &Arc<Policy>,
        unconfined: bool,
        support: Option<&confine::Support>,
    ) -> Result<Result<Live, String>, CallError> {
        let internal = |why: String| CallError::new(ErrorKind::Internal, why);
        let paths = self.root.app(app);
        // The folders it writes in the root are made if missing (its log's),
        // but never a data folder: one that is missing is being moved or was
        // removed (a rollback that did not finish, a preview stopped, the
        // app removed while this call waited), and a worker that made it
        // again, empty, would run the app on nothing and keep a rollback's
        // snapshot from its place.
        if !paths.data().is_dir() && paths.dir.is_dir() && crate::release::journal::under_way(&paths) {
            // A rollback whose process ended half way (one begun from the
            // command line before this launcher started, which left it to
            // that process) is finished here, as the next command would;
            // one under way holds the app's lock and is left to it. No
            // other worker of the app starts meanwhile, and one that
            // started before is retired (its era is past).
            let data = paths.data();
            self.moving(&data);
            let (root, id) = (self.root.clone(), app.clone());
            let recovered = tokio::task::spawn_blocking(move || crate::lifecycle::recover_app(&root, &id)).await;
            self.moved(&data);
            // (What it did is logged where it is done.)
            match recovered {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(app = %app, "cannot recover an interrupted operation: {e:#}"),
                Err(e) => tracing::warn!(app = %app, "cannot recover an interrupted operation: {e}"),
            }
        }
        if !paths.data().is_dir() {
            return Err(match paths.dir.is_dir() {
                true => CallError::new(
                    ErrorKind::Conflict,
                    format!(
                        "{app}'s data is not in place (a rollback or removal is moving it, or one stopped half way: any `autoapp` command finishes or undoes what a stopped one left); nothing ran"
                    ),
                ),
                false => CallError::new(ErrorKind::NotFound, format!("there is no app `{app}` (it was removed)")),
            });
        }
        let previews = paths.dir.join("previews");
        let a_data_folder = |d: &std::path::Path| {
            *d == paths.data() || (d.starts_with(&previews) && d.file_name().is_some_and(|n| n == "data"))
        };
        let made = policy.write.iter().filter(|d| d.starts_with(self.root.dir()) && !a_data_folder(d));
        super::folders_made(&self.root, app, made);
        let policy_text = serde_json::to_string(&Policy { unconfined, ..(**policy).clone() })
            .map_err(|e| internal(format!("cannot describe the worker's confinement ({e})")))?;
        let mut command = super::command(&self.me, &paths, &policy_text);
        command.arg("serve");
        // An inner worker of an app the launcher serves serves its server:
        // the launcher's listening socket is its descriptor 3.
        let site = match side {
            Side::Inner => self.sites.lock().expect("sites").get(app).cloned(),
            Side::Outer => None,
        };
        if let Some(site) = &site {
            use std::os::fd::AsRawFd as _;
            command.arg(super::SITE);
            use std::os::unix::process::CommandExt as _;
            let fd = site.listener.as_raw_fd();
            // SAFETY: between fork and exec only `dup2` and `fcntl` run,
            // both async-signal-safe; `site` (the socket) outlives the spawn.
            #[allow(unsafe_code)]
            unsafe {
                command.pre_exec(move || {
                    let given = match fd == SITE_FD {
                        true => libc::fcntl(fd, libc::F_SETFD, 0),
                        false => libc::dup2(fd, SITE_FD),
                    };
                    if given < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
                });
            }
        }
        let (started, child) = tokio::sync::oneshot::channel();
        let sent = self.spawner.lock().expect("spawner").send((command, started));
        let mut child = match (sent, child.await) {
            (Ok(()), Ok(Ok(child))) => child,
            (_, Ok(Err(e))) => return Err(internal(format!("cannot start {app}'s worker ({e})"))),
            _ => return Err(internal(format!("cannot start {app}'s worker: the launcher is stopping"))),
        };
        let pid = child.id();
        let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let (Some(stdin), Some(stdout), Some(stderr)) = pipes else {
            end(child, pid).await;
            return Err(internal(format!("cannot start {app}'s worker: its pipes are missing")));
        };
        let tokio_pipes = (
            tokio::process::ChildStdin::from_std(stdin),
            tokio::process::ChildStdout::from_std(stdout),
            tokio::process::ChildStderr::from_std(stderr),
        );
        let (Ok(mut stdin), Ok(stdout), Ok(stderr)) = tokio_pipes else {
            end(child, pid).await;
            return Err(internal(format!("cannot start {app}'s worker: its pipes cannot be read")));
        };
        let mut stdout = tokio::io::BufReader::new(stdout);
        let start = Start {
            root: self.root.dir().to_path_buf(),
            config: self.config.clone(),
            app: app.clone(),
            containment: support.filter(|_| unconfined).map(|s| crate::caps::spawn::Containment::of(s, &self.config)),
            site: site.as_ref().map(|s| SiteStart { port: s.port, sessions: s.door.sessions() }),
        };
        let mut line = serde_json::to_vec(&start).map_err(|e| internal(format!("cannot describe the worker ({e})")))?;
        line.push(b'\n');
        // One that could not confine itself answers without reading it.
        let _ = stdin.write_all(&line).await;
        let first = tokio::time::timeout(START_WITHIN, read_line(&mut stdout)).await;
        let (replies, mut to_reply) = tokio::sync::mpsc::unbounded_channel::<zeroize::Zeroizing<Vec<u8>>>();
        let (held, in_place) = match first {
            Ok(Ok(Some((told, _)))) => match told.said {
                Said::Ready { held, in_place } => (held, in_place),
                Said::Unconfinable(why) => {
                    end(child, pid).await;
                    return Ok(Err(why));
                }
                Said::Failed(why) => {
                    end(child, pid).await;
                    return Err(internal(format!("{app}'s worker could not start: {}", super::bounded(why))));
                }
                _ => {
                    end(child, pid).await;
                    return Err(internal(format!("{app}'s worker did not start as a worker does")));
                }
            },
            Ok(_) => {
                end(child, pid).await;
                return Err(internal(format!("{app}'s worker ended as it started")));
            }
            Err(_) => {
                end(child, pid).await;
                return Err(internal(format!("{app}'s worker did not start within {}s", START_WITHIN.as_secs())));
            }
        };
        let shared = Arc::new(Shared {
            app: app.clone(),
            side,
            pid,
            started: Instant::now(),
            held,
            next: AtomicU64::new(1),
            calls: AtomicUsize::new(0),
            last_used: Mutex::new(Instant::now()),
            pending: Mutex::default(),
            gone: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            linger: linger(&self.config),
            log_dir: crate::applog::dir_of(&paths.dir),
            kill: tokio::sync::Notify::new(),
            over: tokio::sync::watch::Sender::new(false),
            ended: tokio::sync::watch::Sender::new(false),
            site: site.as_ref().map(|s| s.port),
            in_place,
            unread: AtomicUsize::new(0),
            drained: tokio::sync::Notify::new(),
            compiling: AtomicBool::new(false),
            replies,
        });
        if self.log_starts {
            crate::applog::queue(
                &shared.log_dir,
                crate::applog::Line::new("info", "worker", &format!("its {} worker started (pid {pid})", side.word())),
            );
        }
        let (lines, mut to_send) = tokio::sync::mpsc::unbounded_channel::<zeroize::Zeroizing<Vec<u8>>>();
        // Its channel: what the launcher sends, until the last `Live` goes.
        let writing = shared.clone();
        tokio::spawn(async move {
            // The lines queued meanwhile go in one write: under load, one
            // system call and one wake of the worker for many calls.
            let (mut queued, mut answers, mut retiring) = (Vec::new(), Vec::new(), false);
            let mut ended = writing.ended.subscribe();
            loop {
                tokio::select! {
                    n = to_send.recv_many(&mut queued, 256), if !retiring => {
                        if n == 0 {
                            // Retired (the last `Live` went): it is told so,
                            // and still hears the answers to what it asks.
                            retiring = true;
                            queued.extend(line_of(0, What::Retire));
                        }
                    }
                    _ = to_reply.recv_many(&mut answers, 256) => {}
                    _ = ended.wait_for(|e| *e) => break,
                }
                let answered: usize = answers.iter().map(|l| l.len()).sum();
                queued.append(&mut answers);
                let mut batch = zeroize::Zeroizing::new(Vec::new());
                for line in queued.drain(..) {
                    batch.extend_from_slice(&line);
                }
                if stdin.write_all(&batch).await.is_err() {
                    // It closed its channel: a worker that does not read its
                    // calls is ended, and the next call starts another.
                    writing.kill.notify_one();
                    break;
                }
                writing.unread.fetch_sub(answered, Ordering::AcqRel);
                writing.drained.notify_waiters();
            }
            drop(stdin);
        });
        // Its answers, each to the call that waits for it.
        let reading = shared.clone();
        let (pool, door) = (Arc::downgrade(self), site.as_ref().map(|s| s.door.clone()));
        let (most_handed, most_sending) = handed_most(&self.config);
        let reader = tokio::spawn(async move {
            let mut forwarded: HashMap<u64, tokio::task::AbortHandle> = HashMap::new();
            let mut forwarding = tokio::task::JoinSet::new();
            let carried = Arc::new(AtomicUsize::new(0));
            let sending = Arc::new(AtomicUsize::new(0));
            let mut refused = None;
            while let Some(told) = read_line(&mut stdout).await.unwrap_or_else(|e| {
                refused = Some(e);
                None
            }) {
                let (Told { id, said }, length) = told;
                // Only an answer may be long (it answers a call sent); what
                // a worker says of its own accord is short, but a request
                // it sends on.
                let most = match said {
                    Said::Answer(_) => usize::MAX,
                    Said::Send { .. } => most_handed,
                    _ => MAX_WORD,
                };
                if length > most {
                    refused = Some(std::io::Error::other(format!(
                        "it said {length} bytes in a line of its own (at most {MAX_WORD})"
                    )));
                    break;
                }
                match said {
                    Said::Answer(answer) => {
                        let Ok(waits) = reading.pending.lock().expect("pending").answered(id) else {
                            refused = Some(std::io::Error::other(format!(
                                "it answered a call it was not sent, or one it had answered (id {id})"
                            )));
                            break;
                        };
                        if let Some(p) = waits {
                            // Its error reaches the caller, the record and
                            // the logs: cut short, and no secret in it.
                            let answer = answer.map_err(|e| CallError { message: heard(&e.message), ..e });
                            let _ = p.answer.send(keys_out_of(answer, p.network.as_deref()));
                        }
                    }
                    Said::Redeem(token) => {
                        let session = door.as_ref().and_then(|d| d.redeem(&token));
                        reading.reply(id, What::Reply(Reply::Redeemed(session.clone())));
                        if let (Some(_), Some(pool)) = (session, pool.upgrade()) {
                            pool.sessions_changed(&reading.app);
                        }
                    }
                    Said::Forward(request) => {
                        let (shared, door) = (reading.clone(), door.clone());
                        // (The finished ones let go first.)
                        while forwarding.try_join_next().is_some() {}
                        forwarded.retain(|_, a| !a.is_finished());
                        if forwarding.len() >= MAX_FORWARDED
                            || forwarded.contains_key(&id)
                            || request.body.len() > MAX_SENT_ON_B64
                            || carried.load(Ordering::Acquire) + request.body.len() > MAX_FORWARDED_BYTES
                        {
                            shared.reply(id, What::Reply(Reply::Head { status: 503, headers: Vec::new() }));
                            shared.reply(id, What::Reply(Reply::End));
                            continue;
                        }
                        let carrying = Carrying::new(&carried, request.body.len());
                        let task = forwarding.spawn(async move {
                            let _carrying = carrying;
                            forward(&shared, id, door, request).await
                        });
                        forwarded.insert(id, task);
                    }
                    Said::Send { call, request } => {
                        while forwarding.try_join_next().is_some() {}
                        forwarded.retain(|_, a| !a.is_finished());
                        // Only a call it was sent and has not answered, of
                        // an external route, sends: for any other, no
                        // request goes anywhere.
                        let network = reading.pending.lock().expect("pending").network_of(call);
                        let Some(network) = network else {
                            reading.reply(id, What::Reply(Reply::NotSent(Failure::Denied)));
                            continue;
                        };
                        let bytes = request.body.len();
                        if forwarding.len() >= MAX_FORWARDED
                            || forwarded.contains_key(&id)
                            || sending.load(Ordering::Acquire) + bytes > most_sending
                        {
                            reading.reply(id, What::Reply(Reply::NotSent(Failure::Busy)));
                            continue;
                        }
                        let (shared, carrying) = (reading.clone(), Carrying::new(&sending, bytes));
                        let task = forwarding.spawn(async move {
                            let _carrying = carrying;
                            send_on(&shared, id, &network, request).await
                        });
                        forwarded.insert(id, task);
                    }
                    Said::Cancel => {
                        if let Some(task) = forwarded.remove(&id) {
                            task.abort();
                        }
                    }
                    Said::Note(release) => {
                        if let Some(door) = &door {
                            door.note(&release);
                        }
                        reading.reply(id, What::Reply(Reply::Noted));
                    }
                    Said::Compile(release) => {
                        // Its own app's release, as the launcher knows it
                        // (`compile_for_worker` checks it is one).
                        let compiler = pool.upgrade().and_then(|p| p.compiler.get().cloned());
                        let shared = reading.clone();
                        match compiler {
                            Some(compiler) if !shared.compiling.swap(true, Ordering::AcqRel) => {
                                tokio::spawn(async move {
                                    let mut answering = Answering { shared: shared.clone(), id, why: None };
                                    let done = compiler.compile(&shared.app, &release).await;
                                    answering.why = Some(done.err().map(|e| e.message));
                                });
                            }
                            Some(_) => shared.reply(
                                id,
                                What::Reply(Reply::Compiled(Some(
                                    "another compile of its code is under way; try again".into(),
                                ))),
                            ),
                            None => shared.reply(
                                id,
                                What::Reply(Reply::Compiled(Some("its launcher does not compile for it".into()))),
                            ),
                        }
                    }
                    Said::Changed => {
                        // (Its launcher passes on a few a second, at most.)
                        if let Some(door) = &door {
                            door.changed();
                        }
                    }
                    Said::Used => *reading.last_used.lock().expect("used") = Instant::now(),
                    Said::Ready { .. } | Said::Unconfinable(_) | Said::Failed(_) => {}
                }
            }
            // Its end, or a line too long, too heavy or not the channel's:
            // either way it is not heard any more, and ended.
            if let Some(why) = refused {
                let message = format!("its {} worker was ended: {why}", reading.side.word());
                crate::applog::queue(&reading.log_dir, crate::applog::Line::new("warn", "worker", &message));
                tracing::warn!(app = %reading.app, "{message}");
            }
            forwarding.abort_all();
            reading.kill.notify_one();
        });
        // Its words, escaped, and bounded by its share (its app's and side's).
        let (who, side_word, words) = (app.clone(), side.word(), self.words.clone());
        tokio::spawn(async move {
            let (mut stderr, mut line) = (tokio::io::BufReader::new(stderr), Vec::new());
            loop {
                line.clear();
                match (&mut stderr).take(MAX_STDERR_LINE).read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let mut words = words.lock().expect("words");
                let share = words.entry((who.clone(), side)).or_insert_with(Allowance::new);
                if !share.take(line.len()) {
                    // Not read any more: its writes there fail.
                    if !std::mem::replace(&mut share.told, true) {
                        let mib = MAX_STDERR >> 20;
                        tell!(
                            "autoapp: {who}'s {side_word} workers said more on standard error than their share ({mib} MiB, and {mib} MiB more an hour); the rest is not said"
                        );
                    }
                    break;
                }
                drop(words);
                let said = String::from_utf8_lossy(&line);
                tell!("autoapp: {who}'s {side_word} worker: {}", said.trim_end_matches(['\n', '\r']));
            }
        });
        // Its end: the calls it had fail, its process group ends with it,
        // and an end the launcher did not ask for is noted for the back-off.
        let ending = shared.clone();
        let (ended, log_ends) = (Arc::downgrade(&self.ended), self.log_starts);
        tokio::spawn(async move {
            let status = end_when_exits(child, pid, &ending.kill).await;
            // The answers it wrote before it ended are read first.
            let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
            ending.gone.store(true, Ordering::Release);
            ending.ended.send_replace(true);
            ending.over.send_replace(true);
            let failed = ending.pending.lock().expect("pending").drain();
            let retired = ending.retired.load(Ordering::Acquire);
            let how = match status {
                Some(code) => format!("status {code}"),
                None => "killed".to_string(),
            };
            for p in failed {
                let _ = p.answer.send(Err(CallError::new(
                    ErrorKind::Internal,
                    format!(
                        "{}'s worker ended before it answered ({how}); whether the call ran is in the app's record (`autoapp runs {}`)",
                        ending.app, ending.app
                    ),
                )));
            }
            let message = match retired {
                true => format!("its {} worker ended (pid {}, {how})", ending.side.word(), ending.pid),
                false => format!("its {} worker ended on its own (pid {}, {how})", ending.side.word(), ending.pid),
            };
            if log_ends || !retired {
                crate::applog::queue(&ending.log_dir, crate::applog::Line::new("info", "worker", &message));
            }
            if !retired {
                tracing::warn!(app = %ending.app, "{message}");
                if let Some(ended) = ended.upgrade() {
                    let mut ended = ended.lock().expect("ended");
                    let e = ended.entry((ending.app.clone(), ending.side)).or_insert((Instant::now(), 0));
                    *e = (Instant::now(), if e.0.elapsed() < Duration::from_secs(60) { e.1 + 1 } else { 1 });
                }
            }
        });
        Ok(Ok(Live { policy: policy.clone(), shared, lines }))
    }
}

/// The bytes of a forwarded request's body, counted among its worker's
/// ([`MAX_FORWARDED_BYTES`]) until its answer ends, or is given up.
struct Carrying {
    carried: Arc<AtomicUsize>,
    bytes: usize,
}

impl Carrying {
    fn new(carried: &Arc<AtomicUsize>, bytes: usize) -> Carrying {
        carried.fetch_add(bytes, Ordering::AcqRel);
        Carrying { carried: carried.clone(), bytes }
    }
}

impl Drop for Carrying {
    fn drop(&mut self) {
        self.carried.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// The most of a line handing over a request (its body, as the channel
/// carries it, and its head), and the most of the bodies of one worker's
/// requests the launcher holds at once (four of the most each), for
/// `config`'s request bound; within the channel's line.
fn handed_most(config: &Config) -> (usize, usize) {
    let body = usize::try_from(crate::caps::network::NetLimits::of(config).request_max_bytes).unwrap_or(usize::MAX);
    let line = body.div_ceil(3).saturating_mul(4).saturating_add(1 << 20).min(MAX_LINE as usize);
    (line, line.saturating_mul(4))
}

/// An external call's answer with its keys taken out, after parsing: the
/// worker never held them, and what came back from a key's origin was
/// redacted before it reached it; what an encoding the redactor does not
/// read carried through is caught here (issue 72, rule 5).
fn keys_out_of(answer: Answered, network: Option<&CallNetwork>) -> Answered {
    let Some(hands) = network.map(|n| n.keys_used().hands).filter(|h| !h.is_empty()) else {
        return answer;
    };
    match answer {
        Ok(mut value) => {
            crate::apps::keys_out_of_strings(&mut value, hands.as_ref());
            Ok(value)
        }
        Err(e) => Err(CallError { message: hands.text(&e.message).into_owned(), ..e }),
    }
}

/// Sends a request its worker handed over through the call's `network` (its
/// origins, its keys, its deadline), and gives back the answer's head and
/// then its body as it comes, no faster than the worker reads it.
async fn send_on(shared: &Shared, id: u64, network: &CallNetwork, request: Outgoing) {
    use http_body_util::BodyExt as _;
    let reply = |r: Reply| shared.reply(id, What::Reply(r));
    let until = tokio::time::Instant::from_std(network.deadline());
    let (received, mut body) = match tokio::time::timeout_at(until, relay::send_for(network, request)).await {
        Ok(Ok(sent)) => sent,
        Ok(Err(e)) => return reply(Reply::NotSent(Failure::of(&e))),
        Err(_) => return reply(Reply::NotSent(Failure::ReadTimeout)),
    };
    reply(Reply::Sent(received));
    loop {
        shared.room().await;
        match tokio::time::timeout_at(until, body.frame()).await {
            Err(_) => return reply(Reply::Broken(Failure::ReadTimeout)),
            Ok(None) => return reply(Reply::End),
            Ok(Some(Err(e))) => return reply(Reply::Broken(Failure::of(&e))),
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => reply(Reply::Chunk(relay::bytes_out(&data))),
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        reply(Reply::Trailers(relay::headers_out(&trailers)));
                    }
                }
            },
        }
    }
}

/// Answers a request a worker sent on: through the launcher's side of its
/// app's server (`door`), its head, body and end sent back as they come.
async fn forward(shared: &Shared, id: u64, door: Option<Arc<dyn Door>>, request: Forwarded) {
    use base64::Engine as _;
    let b64 = &base64::engine::general_purpose::STANDARD;
    let reply = |r: Reply| shared.reply(id, What::Reply(r));
    let made = (move || {
        let Forwarded { method, uri, headers, body } = request;
        let mut builder = http::Request::builder().method(method.as_str()).uri(uri.as_str());
        for (name, value) in &headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        builder.body(b64.decode(body.as_bytes()).ok()?).ok()
    })();
    let (door, request) = match (door, made) {
        (Some(door), Some(request)) => (door, request),
        (door, _) => {
            // A worker that serves no server, or a request that is not one.
            reply(Reply::Head { status: if door.is_none() { 404 } else { 400 }, headers: Vec::new() });
            reply(Reply::End);
            return;
        }
    };
    let SentBack { status, mut headers, length, mut body } = door.forward(request).await;
    // A body of known length is said so (sent on whole); a stream (the
    // events) as it comes.
    if let Some(length) = length
        && !headers.iter().any(|(k, _)| k == "content-length")
    {
        headers.push(("content-length".into(), length.to_string()));
    }
    reply(Reply::Head { status, headers });
    while let Some(chunk) = futures::StreamExt::next(&mut body).await {
        // A tab's open event stream keeps its worker from being idle.
        *shared.last_used.lock().expect("used") = Instant::now();
        reply(Reply::Chunk(b64.encode(&chunk)));
    }
    reply(Reply::End);
}

impl Side {
    fn word(self) -> &'static str {
        match self {
            Side::Inner => "reads and writes",
            Side::Outer => "external calls'",
        }
    }
}

/// A call waiting for its worker's answer: counted while it waits, and
/// taken out of the worker's pending calls however its wait ends.
struct Waiting<'a> {
    shared: &'a Shared,
    id: u64,
}

impl<'a> Waiting<'a> {
    fn new(shared: &'a Shared, id: u64) -> Waiting<'a> {
        shared.calls.fetch_add(1, Ordering::AcqRel);
        *shared.last_used.lock().expect("used") = Instant::now();
        Waiting { shared, id }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.shared.pending.lock().expect("pending").give_up(self.id);
        *self.shared.last_used.lock().expect("used") = Instant::now();
        self.shared.calls.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Reads one line from a worker, bounded: `None` at its end, an error when
/// it is too long or not a line the launcher understands.
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(reader: &mut R) -> std::io::Result<Option<(Told, usize)>> {
    let mut line = Vec::new();
    let n = (&mut *reader).take(MAX_LINE + 1).read_until(b'\n', &mut line).await?;
    if n == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        return Err(std::io::Error::other("a worker's line is too long or cut"));
    }
    if crate::elsewhere::json::values(&line) > MAX_SAID_VALUES {
        return Err(std::io::Error::other(format!("a worker's line holds more than {MAX_SAID_VALUES} values")));
    }
    // (Where, not what: serde's own words may quote the line.)
    serde_json::from_slice(&line).map(|told| Some((told, n))).map_err(|e| {
        std::io::Error::other(format!("a worker's line is malformed ({:?} at byte {})", e.classify(), e.column()))
    })
}

/// Kills a worker's process group and reaps it.
async fn end(child: std::process::Child, pid: u32) {
    let kill = tokio::sync::Notify::new();
    kill.notify_one();
    let _ = end_when_exits(child, pid, &kill).await;
}

/// Waits for a worker to exit — killing its process group whenever `kill`
/// asks —, then, before it is reaped (so its id cannot be another's yet),
/// kills what it started (its process group); its exit status, or `None`
/// when a signal ended it.
async fn end_when_exits(mut child: std::process::Child, pid: u32, kill: &tokio::sync::Notify) -> Option<i32> {
    let id = rustix::process::Pid::from_raw(pid as i32)?;
    let group = || {
        let _ = rustix::process::kill_process_group(id, rustix::process::Signal::KILL);
    };
    // Its exit, seen through a pidfd (no thread held per worker), or where
    // the kernel has none (before Linux 5.3) by a blocking wait. (The pidfd
    // is owned by the `AsyncFd`: what made `with_interest` deprecated, a
    // descriptor closed under it, cannot happen here.)
    #[allow(deprecated)]
    let exited = async {
        match rustix::process::pidfd_open(id, rustix::process::PidfdFlags::NONBLOCK)
            .map_err(std::io::Error::from)
            .and_then(|fd| tokio::io::unix::AsyncFd::with_interest(fd, tokio::io::Interest::READABLE))
        {
            Ok(fd) => {
                let _ = fd.readable().await;
            }
            Err(_) => {
                let _ = tokio::task::spawn_blocking(move || {
                    rustix::process::waitid(
                        rustix::process::WaitId::Pid(id),
                        rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOWAIT,
                    )
                })
                .await;
            }
        }
    };
    tokio::pin!(exited);
    loop {
        tokio::select! {
            _ = &mut exited => break,
            _ = kill.notified() => group(),
        }
    }
    group();
    tokio::task::spawn_blocking(move || child.wait().ok().and_then(|s| s.code())).await.ok().flatten()
}

/// A process's resident memory, KiB.
fn memory_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

impl crate::apps::Elsewhere for Workers {
    fn retire_holding(&self, data: &std::path::Path) {
        self.inner.retire_holding(data);
    }

    fn moving(&self, data: &std::path::Path) {
        self.inner.moving(data);
    }

    fn moved(&self, data: &std::path::Path) {
        self.inner.moved(data);
    }

    fn shown(&self) -> serde_json::Value {
        serde_json::to_value(Workers::shown(self)).unwrap_or_default()
    }

    fn run(&self, call: Carried, manifest: &Manifest) -> BoxFuture<Result<Answered, CallError>> {
        let side = match &call.entry {
            CarriedEntry::Route { route, .. }
                if manifest.route(route).is_some_and(|r| r.effect == Effect::External) =>
            {
                Side::Outer
            }
            _ => Side::Inner,
        };
        let policy = self.inner.policy(&call.app, side, &call.release, manifest, &call.data);
        let this = self.inner.clone();
        let declared = manifest.capabilities.network.clone();
        Box::pin(async move {
            let (policy, grants) = policy?;
            this.call(side, policy, Carried { grants, ..call }, declared).await
        })
    }

    fn prepare(&self, app: &AppId, release: &str, manifest: &Manifest) -> BoxFuture<Result<(), CallError>> {
        let policy = self.inner.policy(app, Side::Inner, release, manifest, &self.inner.root.app(app).data());
        let (this, app, release) = (self.inner.clone(), app.clone(), release.to_string());
        Box::pin(async move {
            let live = this.worker_again(&app, Side::Inner, policy?.0).await?;
            match this.ask(&live, What::Prepare { release }, Duration::from_secs(60), None).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) | Err(e) => Err(e),
            }
        })
    }
}

impl Inner {
    /// Runs `call` in its app's worker on `side`: `Ok` with what the worker
    /// answered (recorded there), `Err` when it never ran there or its
    /// worker ended first (recorded by the caller).
    /// An external call's requests are sent here, to the origins `declared`
    /// and granted, with its keys.
    async fn call(
        self: &Arc<Self>,
        side: Side,
        policy: Arc<Policy>,
        call: Carried,
        declared: Vec<crate::manifest::Origin>,
    ) -> Result<Answered, CallError> {
        let live = self.worker_again(&call.app, side, policy).await?;
        // Debug builds only: a test holds it here (`AUTOAPP_PAUSE=worker:call`).
        if cfg!(debug_assertions) && std::env::var_os("AUTOAPP_PAUSE").is_some() {
            let _ = tokio::task::spawn_blocking(|| crate::release::journal::pause("worker:call")).await;
        }
        // A call on the app's own data runs only if the release it was
        // passed for is still the one its data is for: the app may have
        // changed since (an activation or rollback while the call waited
        // for its worker, or for the person's answer).
        // (The pointer read as `Apps` reads it for every call: from memory
        // until something on its way changes.)
        let paths = self.root.app(&call.app);
        let active = || {
            crate::pointer::read_through(&paths.active_file(), || {
                crate::release::active(&paths)?.ok_or_else(|| anyhow::anyhow!("no active release"))
            })
        };
        if call.data == paths.data() && active().ok().as_deref() != Some(call.release.as_str()) {
            let app = &call.app;
            let why = crate::apps::RELEASE_CHANGED;
            return Err(CallError::new(ErrorKind::Conflict, format!("{app} {why}; call it again")));
        }
        let network = match (side, &call.grants) {
            (Side::Outer, Some(grants)) => Some(Arc::new(self.network_for(&declared, grants, &call.keys))),
            _ => None,
        };
        let deadline = self.config.call_deadline() + ANSWER_MARGIN;
        self.ask(&live, What::Call { call: Box::new(call) }, deadline, network).await
    }

    /// An external call's network, as its worker's requests are sent
    /// through it: the origins its release declares and the person granted,
    /// the keys bound to those, and the call's deadline from now.
    fn network_for(
        &self,
        declared: &[crate::manifest::Origin],
        grants: &crate::grants::Grants,
        keys: &[crate::secrets::Given],
    ) -> CallNetwork {
        let allowed = crate::caps::network::configure(declared, &grants.network);
        let keys: Vec<_> = keys.iter().filter(|k| grants.network.contains(&k.binding.origin)).cloned().collect();
        let deadline = Instant::now() + self.config.call_deadline();
        let network = CallNetwork::new(allowed, deadline, crate::caps::network::NetLimits::of(&self.config));
        match keys.is_empty() {
            true => network,
            false => network.with_keys(Arc::new(crate::secrets::outgoing::Keys::new(keys))),
        }
    }

    /// Sends `what` to a worker and waits for its answer until `within`;
    /// kills a worker that does not answer by then.
    async fn ask(
        &self,
        live: &Live,
        what: What,
        within: Duration,
        network: Option<Arc<CallNetwork>>,
    ) -> Result<Answered, CallError> {
        let s = &live.shared;
        let id = s.next.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = tokio::sync::oneshot::channel();
        let mut line = zeroize::Zeroizing::new(
            serde_json::to_vec(&Ask { id, what })
                .map_err(|e| CallError::new(ErrorKind::Internal, format!("cannot describe the call ({e})")))?,
        );
        line.push(b'\n');
        s.pending.lock().expect("pending").expect(id, Pending { answer, network });
        // Counted while it waits, and let go however its wait ends (a
        // caller that goes away drops this future).
        let _waiting = Waiting::new(s, id);
        // Ended meanwhile: its calls were failed before this one was there.
        let sent = !s.gone.load(Ordering::Acquire) && live.lines.send(line).is_ok();
        let asked = tokio::time::Instant::now();
        let result = match sent {
            true => {
                let mut answered = answered;
                // However often it asks its launcher to compile (a worker
                // taken by an escape could ask again and again), no longer
                // than this: its own compile and one before it.
                let most = asked + within + 2 * self.config.compile_budget();
                let mut until = asked + within;
                loop {
                    match tokio::time::timeout_at(until, &mut answered).await {
                        // It waits for its launcher to compile its code (a
                        // compile has its own deadline): not a worker that
                        // stopped answering.
                        Err(_) if s.compiling.load(Ordering::Acquire) && until < most => {
                            until = (until + within).min(most);
                        }
                        r => break r.map(|r| r.map_err(|_| ())),
                    }
                }
            }
            false => Ok(Err(())),
        };
        match result {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(())) => Err(CallError::new(
                ErrorKind::Internal,
                format!("{}'s worker ended before it answered; whether the call ran is in the app's record", s.app),
            )),
            Err(_) => {
                // It does not answer: killed (its calls fail), and the next
                // call starts another.
                s.kill.notify_one();
                Err(CallError::new(
                    ErrorKind::Internal,
                    format!("{}'s worker did not answer within {}s and was stopped", s.app, asked.elapsed().as_secs()),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_start_waits_while_its_apps_data_moves_and_goes_on_when_every_move_is_over() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::open(dir.path()).unwrap();
        let workers = Workers::new(root.clone(), Config::default()).unwrap();
        let inner = workers.inner.clone();
        let (notes, other) = (AppId::parse("notes").unwrap(), AppId::parse("other").unwrap());
        let data = root.app(&notes).data();
        inner.until_in_place(&notes).await.unwrap();
        // Two moves at once (a count, not a flag): the start waits for both.
        inner.moving(&data);
        inner.moving(&data);
        // A preview's data folder is no app's own: it holds nothing back.
        inner.moving(&root.app(&notes).dir.join("previews/abc/data"));
        let waiting = tokio::spawn({
            let inner = inner.clone();
            let notes = notes.clone();
            async move { inner.until_in_place(&notes).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "a start of the app waits while its data moves");
        assert_eq!(inner.until_in_place(&other).await.unwrap(), 0, "another app's start does not wait");
        inner.moved(&data);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "one move is still under way");
        inner.moved(&data);
        tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("woken").unwrap().unwrap();
        assert!(inner.moving.lock().unwrap().is_empty());
    }

    /// What an escaped worker may ask its launcher to compile: a name that
    /// is no release id (however long) is refused without being echoed, and
    /// neither it nor an id of no release is remembered (the launcher's
    /// memory of failures holds one entry per release there is).
    #[tokio::test]
    async fn a_compile_asked_for_no_release_is_refused_at_once_unechoed_and_not_remembered() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::open(dir.path()).unwrap();
        let apps = Arc::new(Apps::new(root.clone(), &Config::default()).unwrap());
        let compiler = Arc::new(CompilesFor {
            apps: Arc::downgrade(&apps),
            one: tokio::sync::Semaphore::new(1),
            failed: Mutex::default(),
        });
        let notes = AppId::parse("notes").unwrap();
        let long = "../".repeat(1 << 20);
        for asked in [long.as_str(), &"a".repeat(64), "ABC"] {
            let e = compiler.clone().compile(&notes, asked).await.unwrap_err();
            assert!(e.message.len() < 300, "{}", &e.message[..300.min(e.message.len())]);
            assert!(!e.message.contains("../"), "{}", e.message);
        }
        assert!(compiler.failed.lock().unwrap().is_empty(), "nothing remembered");
    }

    #[tokio::test]
    async fn a_workers_line_is_read_whole_or_refused_when_too_long_cut_or_not_the_channels() {
        let good = br#"{"id":7,"said":{"answer":{"Ok":{"hello":"world"}}}}"#;
        let mut text = good.to_vec();
        text.push(b'\n');
        let mut r = tokio::io::BufReader::new(&text[..]);
        let (told, length) = read_line(&mut r).await.unwrap().expect("a line");
        assert_eq!((told.id, length), (7, text.len()));
        assert!(matches!(told.said, Said::Answer(Ok(ref v)) if v["hello"] == "world"));
        assert!(read_line(&mut r).await.unwrap().is_none(), "its end");
        // Cut (no end of line), not the channel's, too long.
        let mut cut = tokio::io::BufReader::new(&good[..]);
        assert!(read_line(&mut cut).await.is_err());
        let mut other = tokio::io::BufReader::new(&b"{\"id\":1}\n"[..]);
        assert!(read_line(&mut other).await.is_err());
        // A line the channel would understand, but over the bound.
        let mut long = br#"{"id":1,"said":{"failed":""#.to_vec();
        long.resize(long.len() + MAX_LINE as usize, b'a');
        long.extend_from_slice(b"\"}}\n");
        let mut reader = tokio::io::BufReader::new(&long[..]);
        assert!(read_line(&mut reader).await.is_err(), "a line over the bound is refused, not read whole");
        let within = &long[long.len() - 64..];
        let within = [&br#"{"id":1,"said":{"failed":""#[..], within].concat();
        let mut reader = tokio::io::BufReader::new(&within[..]);
        assert!(read_line(&mut reader).await.unwrap().is_some(), "the same line, short, is read");
    }

    #[test]
    fn an_apps_share_of_standard_error_is_spent_and_fills_again_by_the_hour() {
        let mut share = Allowance::new();
        assert!(share.take(MAX_STDERR - 10));
        assert!(!share.take(11), "past its share");
        assert!(share.take(10));
        assert!(!share.take(1));
        // Half an hour later: half of it again, and never more than all of it.
        share.at -= Duration::from_secs(1800);
        assert!(!share.take(MAX_STDERR / 2 + 100));
        assert!(share.take(MAX_STDERR / 2 - 100));
        share.at -= Duration::from_secs(36_000);
        assert!(!share.take(MAX_STDERR + 1));
        assert!(share.take(MAX_STDERR));
    }

    #[test]
    fn each_call_sent_to_a_worker_is_answered_once_at_most_given_up_or_not() {
        let pending = || Pending { answer: tokio::sync::oneshot::channel().0, network: None };
        let mut awaited = Awaited::default();
        assert_eq!(awaited.answered(1).err(), Some(Unasked), "a call never sent");
        awaited.expect(1, pending());
        awaited.expect(2, pending());
        awaited.expect(3, pending());
        assert!(matches!(awaited.answered(1), Ok(Some(_))), "its caller waits");
        awaited.give_up(1);
        assert_eq!(awaited.answered(1).err(), Some(Unasked), "answered twice");
        // Its caller went away: its answer may still come, once.
        awaited.give_up(2);
        assert!(matches!(awaited.answered(2), Ok(None)));
        assert_eq!(awaited.answered(2).err(), Some(Unasked));
        assert_eq!(awaited.answered(99).err(), Some(Unasked));
        // Given up, its answer not come yet: counted, not named (an answer
        // to a call never sent takes its place, and no more).
        awaited.give_up(3);
        assert!(matches!(awaited.answered(99), Ok(None)));
        assert_eq!(awaited.answered(3).err(), Some(Unasked));
        awaited.expect(4, pending());
        awaited.give_up(4);
        assert_eq!(awaited.drain().len(), 0);
        assert_eq!(awaited.answered(4).err(), Some(Unasked), "its worker ended: nothing is answered after");
    }
}
