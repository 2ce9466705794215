//! The gate's record: every decision and the outcome of the call it let
//! through, one row per call, in `runs.sqlite` of the data folder the call ran
//! against (a preview's copy has its own).
//!
//! Rows go to the record's writer, one thread per data folder, so that
//! recording never puts a disk sync inside a call's own work and one app's
//! load never holds up another app's record (at `process`, a write's row is
//! committed on its caller's thread when nobody else is committing and the
//! record's write lock is free at once: a commit without a sync costs less
//! than the two wake-ups of a hand-over):
//!
//! - the row of a write that changed the store is committed just before
//!   the write, by the store's own commit (a group's rows together), on the
//!   record's connection beside the store ([`insert_beside`];
//!   `caps::store::AppStore::commit_group`), and [`Recorder::synced`] makes
//!   both as durable as the level says: a process killed between the two
//!   commits leaves a row whose write was not kept, never a kept write
//!   without its row;
//! - any other row of a `write` or `external` call is **as durable as the write,
//!   before the call is answered** ([`Recorder::write_durable`]): the writer
//!   commits every row waiting at that moment in one transaction, then wakes
//!   their callers. How durable is the configuration's one level
//!   ([`Durability`]): at `process` the commit is in the write-ahead log
//!   (`synchronous = NORMAL`, as the app's store), which survives the process
//!   being killed; at `power` the commit syncs the record's log (`FULL`) and
//!   then the writer syncs the data folder's other logs — the app's store,
//!   whose write each waiting row records was committed before the row was
//!   sent — with one `fdatasync` each for the whole group (group commit:
//!   [`sync_logs`]);
//! - the rows of reads ([`Recorder::write`]) are gathered for a moment and
//!   committed in batches; a crash of the host can lose the read rows of the
//!   last [`GATHER`], never an acknowledged write's;
//! - the row of a write that was kept while its call was gone (dropped while
//!   it waited for its group's commit) went in before the write, with its
//!   group's; where no record is beside the store, its step hands it to the
//!   writer ([`RowBeside`], [`Recorder::hand_on`]).
//!
//! **Where a row waits for a lock.** The writer's thread (and a lifecycle
//! action's connection, on the thread of the person's action) waits in
//! SQLite's busy handler, [`BUSY_WAIT`] at a time, when another connection
//! holds the record's write lock (the writer tries [`BUSY_RETRIES`] more
//! times before it gives its rows up). [`Recorder::write_durable`] commits a
//! call's row on a runtime's worker only when the lock is free at once, and
//! otherwise the writer's thread does, while the call awaits it. The one
//! wait on a runtime's worker is a store's commit of its group's rows, just
//! before its writes: up to `caps::store`'s `BESIDE_WAIT` (2 s) for another
//! process's commit of the record (a commit holds the lock for a moment),
//! after which nothing of the group is kept.
//!
//! [`Recorder::flush`] (called on every clean stop, and by `Drop`) waits until
//! every row sent is committed. No input value, secret, token or address is
//! stored: only the arguments' hash.

pub mod keep;

use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use anyhow::Context as _;
use rusqlite::Connection;
use serde::{Deserialize, Serialize};

pub use crate::config::Durability;

/// The record's file inside a data folder.
pub const RUNS_FILE: &str = "runs.sqlite";

/// Rows committed together at most.
const BATCH: usize = 4096;

/// The longest the record's connections wait in SQLite's busy handler for
/// another connection's commit (the writer's thread, a lifecycle action's
/// row, another process). Never on a runtime's worker
/// ([`Recorder::commit_here`] does not wait at all).
const BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How many more times the writer's thread tries a commit that found the
/// record locked by another connection for all of [`BUSY_WAIT`]: with it,
/// the record is waited for up to 30 s before its rows are given up (an
/// error in the log, and each waiting call answers that it could not be
/// recorded).
const BUSY_RETRIES: usize = 5;

/// Whether `e` is SQLite's "the database is locked by another connection".
fn is_busy(e: &anyhow::Error) -> bool {
    e.downcast_ref::<rusqlite::Error>()
        .and_then(rusqlite::Error::sqlite_error_code)
        .is_some_and(|c| matches!(c, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

/// How long the writer gathers the rows of reads after the first before it
/// commits them, unless a row that must be durable arrives first. Fewer,
/// larger transactions keep the writer's work (and its interference with the
/// calls running beside it) small; docs/performance.md (P1) has the figures.
/// A clean stop flushes everything; a crash of the host can lose the rows of
/// reads of this last moment.
pub const GATHER: std::time::Duration = std::time::Duration::from_millis(50);

/// One call: its decision, and what happened when it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub time: String,
    pub request_id: String,
    pub channel: String,
    pub caller: String,
    pub app: String,
    pub release: String,
    pub route: String,
    pub effect: String,
    pub arguments_hash: String,
    /// allowed | confirmed | denied | refused
    pub decision: String,
    /// Why, for a denial or a refusal; empty otherwise.
    pub reason: String,
    /// ok | error | trap | not-run
    pub outcome: String,
    pub duration_ms: f64,
    /// Who answered the call's question: person (who answered it, or made
    /// the call or took the action themselves) | standing approval | nobody
    /// (no question was asked, or nobody answered it in time).
    pub answered_by: String,
}

impl Row {
    /// A row of `caller` on `route` (with `effect`) of `app`'s `release`,
    /// stamped now: allowed, ok, no reason, no hash; each call site sets what
    /// differs (struct update syntax).
    pub fn of(caller: &super::Caller, app: &crate::manifest::AppId, release: &str, route: &str, effect: &str) -> Row {
        Row {
            time: crate::release::now_rfc3339(),
            request_id: String::new(),
            channel: caller.channel().to_string(),
            caller: caller.label().to_string(),
            app: app.to_string(),
            release: release.to_string(),
            route: route.to_string(),
            effect: effect.to_string(),
            arguments_hash: String::new(),
            decision: super::Decision::Allowed.as_str().to_string(),
            reason: String::new(),
            outcome: "ok".to_string(),
            duration_ms: 0.0,
            // The person's own action or call is theirs; anything else is
            // answered by nobody unless the call site says who.
            answered_by: if caller.channel() == super::Channel::User {
                super::AnsweredBy::Person
            } else {
                super::AnsweredBy::Nobody
            }
            .to_string(),
        }
    }
}

/// Told when a durable row is committed (or why it could not be).
type Durable = tokio::sync::oneshot::Sender<Result<(), String>>;

enum Msg {
    Row(Box<Row>, Option<Durable>),
    /// A row committed with its write, in the store's transaction, waiting
    /// for the group's sync (`Durability::Power`).
    Synced(Durable),
    Flush(mpsc::Sender<()>),
}

/// The writer of one data folder's record.
struct Writer {
    tx: mpsc::Sender<Msg>,
    thread: JoinHandle<()>,
    /// The record's connection, shared by the writer's thread and a durable
    /// row committed on its caller's thread (`Durability::Process`).
    conn: Arc<Mutex<Shared>>,
    /// How many durable rows are on their way to this record right now.
    waiting: Arc<std::sync::atomic::AtomicUsize>,
    /// How many calls are syncing this folder's logs on their own thread
    /// right now (at most one: [`Recorder::synced`]).
    syncing: Arc<std::sync::atomic::AtomicUsize>,
}

/// A call's right to sync its data folder's logs itself ([`Recorder::synced`]).
struct Syncing(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Syncing {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// A durable row held across an await: when the future holding it is
/// dropped there, the row goes to the writer (committed with the next batch,
/// and on a clean stop).
struct Kept<'a> {
    recorder: &'a Recorder,
    data: &'a Path,
    row: Option<Box<Row>>,
}

impl Drop for Kept<'_> {
    fn drop(&mut self) {
        if let Some(row) = self.row.take() {
            let _ = self.recorder.send(self.data, Msg::Row(row, None), true);
        }
    }
}

/// One durable row on its way, counted while it is.
struct Waiting(Arc<std::sync::atomic::AtomicUsize>);

impl Waiting {
    fn count(n: &Arc<std::sync::atomic::AtomicUsize>) -> Waiting {
        n.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Waiting(n.clone())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The connection of one record, and whether its writer closed it.
#[derive(Default)]
struct Shared {
    conn: Option<Connection>,
    /// Set by [`Recorder::close`]: the folder may be renamed; nothing more
    /// is committed through this connection.
    closed: bool,
}

impl Writer {
    /// Closes the channel and waits while the writer commits what is left.
    fn finish(self) {
        drop(self.tx);
        self.thread.thread().unpark();
        let _ = self.thread.join();
        let mut shared = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        shared.conn = None;
        shared.closed = true;
    }
}

/// The writers of every record this process keeps, one per data folder.
pub struct Recorder {
    /// By data folder (as bytes: hashing a `Path` walks its components).
    writers: Mutex<HashMap<std::ffi::OsString, Writer>>,
    durability: Durability,
    /// How long each record keeps its rows (issue 76: `keep`).
    bounds: keep::Bounds,
}

impl Recorder {
    /// A recorder whose durable rows are made as durable as `durability`
    /// says (the configuration's `durability`).
    pub fn new(durability: Durability) -> Recorder {
        Recorder { writers: Mutex::default(), durability, bounds: keep::Bounds::NONE }
    }

    /// Each record it writes keeps its rows within `bounds`: its writer lets
    /// the oldest go between its batches (`keep::let_go`).
    pub fn keeping(mut self, bounds: keep::Bounds) -> Recorder {
        self.bounds = bounds;
        self
    }

    /// Sends `msg` to the writer of `data`, starting it at first use; `wake`
    /// ends the writer's gathering at once (a row that must be durable, a
    /// flush), otherwise the row waits for the batch and wakes nobody.
    fn send(&self, data: &Path, msg: Msg, wake: bool) -> Result<(), Msg> {
        let mut writers = self.writers.lock().expect("recorder");
        let Some(w) = self.writer_of(&mut writers, data) else { return Err(msg) };
        let sent = w.tx.send(msg).map_err(|e| e.0);
        if sent.is_ok() && wake {
            w.thread.thread().unpark();
        }
        sent
    }

    /// The writer of `data`, started at first use.
    fn writer_of<'w>(&self, writers: &'w mut HashMap<std::ffi::OsString, Writer>, data: &Path) -> Option<&'w Writer> {
        if !writers.contains_key(data.as_os_str()) {
            let (tx, rx) = mpsc::channel::<Msg>();
            let conn = Arc::new(Mutex::new(Shared::default()));
            let (folder, durability, shared) = (data.to_path_buf(), self.durability, conn.clone());
            let bounds = self.bounds;
            let spawned = std::thread::Builder::new()
                .name("autoapp-record".into())
                .spawn(move || writer(&folder, rx, durability, bounds, &shared));
            match spawned {
                Ok(thread) => {
                    writers.insert(
                        data.as_os_str().to_owned(),
                        Writer { tx, thread, conn, waiting: Arc::default(), syncing: Arc::default() },
                    );
                }
                Err(e) => {
                    tracing::error!("cannot start the record's writer: {e}");
                    return None;
                }
            }
        }
        writers.get(data.as_os_str())
    }

    /// Queues `row` for the record of the data folder `data`; it is committed
    /// with the next batch (the rows of reads).
    pub fn write(&self, data: &Path, row: Row) {
        let _ = self.send(data, Msg::Row(Box::new(row), None), false);
    }

    /// Gives `row` to the writer of `data` at once, for nobody to wait on: the
    /// row of a write that was kept while its caller was gone (a call dropped
    /// while it waited for its group's commit, `apps`' step beside the
    /// write). Committed with the writer's next transaction, and on a clean
    /// stop.
    pub fn hand_on(&self, data: &Path, row: Row) {
        let _ = self.send(data, Msg::Row(Box::new(row), None), true);
    }

    /// Writes `row` to the record of `data` and returns once it is as
    /// durable as the level says: committed (`process`), or committed and
    /// synced with the store's log, with every other row waiting at that
    /// moment (`power`).
    ///
    /// At `process`, when the record's connection is free (nobody is
    /// committing), the row is committed here, on the caller's thread: a
    /// commit without a sync costs less than waking the writer's thread and
    /// being woken by it. Otherwise (the writer is committing, or at
    /// `power`, where one sync serves the whole group) the writer commits it.
    ///
    /// Whether anybody else is committing is asked after yielding once: the
    /// other calls ready to run on this thread then reach this point too,
    /// and when they have, the rows of all of them go to the writer, which
    /// commits them in one transaction on another core while this thread
    /// serves the next calls (group commit under load; one writer alone
    /// commits here).
    pub async fn write_durable(&self, data: &Path, row: Row) -> anyhow::Result<()> {
        let here = match self.durability {
            Durability::Process => self.shared_of(data),
            Durability::Power => None,
        };
        let row = Box::new(row);
        let row = match here {
            Some((waiting, conn)) => {
                let _here = Waiting::count(&waiting);
                // A call dropped while it yields (its connection closed, the
                // launcher stopping) still has its row: the guard hands it to
                // the writer. Its write is committed; its row must be too.
                let mut kept = Kept { recorder: self, data, row: Some(row) };
                tokio::task::yield_now().await;
                let row = kept.row.take().expect("taken only here");
                if waiting.load(std::sync::atomic::Ordering::Acquire) == 1 {
                    match self.commit_here(&conn, row) {
                        Ok(done) => return done,
                        Err(row) => row,
                    }
                } else {
                    row
                }
            }
            None => row,
        };
        let (told, done) = tokio::sync::oneshot::channel();
        if self.send(data, Msg::Row(row, Some(told)), true).is_err() {
            anyhow::bail!("the record's writer is not running");
        }
        match done.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(anyhow::anyhow!(why)),
            Err(_) => anyhow::bail!("the record's writer stopped"),
        }
    }

    /// Returns once the rows committed with their writes in the store of
    /// `data` ([`insert_beside`]) are as durable as the level says: at once
    /// at `process` (the commit put them in the log); at `power`, after a
    /// sync of the data folder's logs that began after the caller's commit —
    /// its own when no other call is syncing the folder, else the writer's
    /// (one sync for every row waiting at that moment).
    pub async fn synced(&self, data: &Path) -> anyhow::Result<()> {
        if self.durability == Durability::Process {
            return Ok(());
        }
        // A write alone in waiting for its folder's sync does the sync itself,
        // on its own thread: handing it to the record's writer and hearing
        // back costs two wake-ups of a thread on an idle core (on the machine
        // of docs/performance-history.md, 2026-12-06: about 75 µs of a
        // 480 µs write). A write that comes while one syncs goes to the
        // writer, whose one sync covers every write waiting for it. (On a
        // runtime of one thread — a machine of one core — the sync holds that
        // thread; at most one call does at a time.)
        if let Some(alone) = self.alone_syncing(data) {
            let sync = || sync_logs(data);
            let synced = match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
                Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(sync),
                _ => sync(),
            };
            drop(alone);
            return synced;
        }
        let (told, done) = tokio::sync::oneshot::channel();
        if self.send(data, Msg::Synced(told), true).is_err() {
            anyhow::bail!("the record's writer is not running");
        }
        match done.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(anyhow::anyhow!(why)),
            Err(_) => anyhow::bail!("the record's writer stopped"),
        }
    }

    /// The right to sync the logs of `data` on this thread, when no other
    /// call is doing so (its writer started); given back when dropped.
    fn alone_syncing(&self, data: &Path) -> Option<Syncing> {
        use std::sync::atomic::Ordering::AcqRel;
        let syncing = {
            let mut writers = self.writers.lock().expect("recorder");
            self.writer_of(&mut writers, data)?.syncing.clone()
        };
        match syncing.fetch_add(1, AcqRel) {
            0 => Some(Syncing(syncing)),
            _ => {
                syncing.fetch_sub(1, AcqRel);
                None
            }
        }
    }

    /// How many durable rows of `data` are on their way, and the record's
    /// connection (its writer started): one look-up per durable row.
    fn shared_of(&self, data: &Path) -> Option<(Arc<std::sync::atomic::AtomicUsize>, Arc<Mutex<Shared>>)> {
        let mut writers = self.writers.lock().expect("recorder");
        self.writer_of(&mut writers, data).map(|w| (w.waiting.clone(), w.conn.clone()))
    }

    /// Commits `row` on this thread when the record's connection `conn` is
    /// free, open, and the record's write lock can be had at once; hands the
    /// row back otherwise (to go to the writer's thread). Never waits: this
    /// runs on a runtime's worker, so it never sleeps in SQLite's busy
    /// handler — a record locked by another connection (a store's group
    /// commit putting rows beside its writes, another process on the root)
    /// is waited out by the writer's thread, not here.
    fn commit_here(&self, conn: &Mutex<Shared>, row: Box<Row>) -> Result<anyhow::Result<()>, Box<Row>> {
        let Ok(mut shared) = conn.try_lock() else { return Err(row) };
        if shared.closed {
            return Err(row);
        }
        // Opening (and making) the file is the writer's: it may wait.
        let Some(c) = shared.conn.as_mut() else { return Err(row) };
        if c.busy_timeout(std::time::Duration::ZERO).is_err() {
            return Err(row);
        }
        let done = insert(c, std::iter::once(&*row));
        let _ = c.busy_timeout(BUSY_WAIT);
        match done {
            Err(e) if is_busy(&e) => Err(row),
            Err(e) => {
                // Open the file anew next time (it may have been moved).
                shared.conn = None;
                Ok(Err(e))
            }
            Ok(()) => Ok(Ok(())),
        }
    }

    /// Commits what is queued for the record of `data` and closes it (before
    /// its folder is renamed or removed); a later row opens it anew.
    pub fn close(&self, data: &Path) {
        let writer = self.writers.lock().expect("recorder").remove(data.as_os_str());
        if let Some(w) = writer {
            w.finish();
        }
    }

    /// Waits until every row queued so far is committed.
    pub fn flush(&self) {
        let waiting: Vec<mpsc::Receiver<()>> = {
            let writers = self.writers.lock().expect("recorder");
            writers
                .values()
                .filter_map(|w| {
                    let (ack, done) = mpsc::channel();
                    w.tx.send(Msg::Flush(ack)).ok()?;
                    w.thread.thread().unpark();
                    Some(done)
                })
                .collect()
        };
        for done in waiting {
            let _ = done.recv();
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // Closing each channel lets its writer commit what is left and end.
        let writers: Vec<Writer> = self.writers.lock().expect("recorder").drain().map(|(_, w)| w).collect();
        for w in writers {
            w.finish();
        }
    }
}

/// How often a record's writer looks at its bounds: after this many rows,
/// or this long, since it last did (and at every flush).
const KEEP_EVERY_ROWS: usize = 2_000;
const KEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(if cfg!(test) { 1 } else { 30 });

/// How soon the next round comes after one that left rows to let go.
const BACKLOG_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

fn writer(data: &Path, rx: mpsc::Receiver<Msg>, durability: Durability, bounds: keep::Bounds, shared: &Mutex<Shared>) {
    // A record's first batch in this process looks at its bounds at once
    // (a worker that starts cleans up what its predecessors left).
    let now = std::time::Instant::now();
    let (mut since_kept, mut kept_at) = (0, now.checked_sub(KEEP_EVERY).unwrap_or(now));
    let (mut seen_version, mut backlog) = (None, false);
    loop {
        // A round that left rows past the bounds is followed by the next
        // one soon, between whatever batches come: a backlog drains at a
        // round a second, and no call waits for it.
        let first = match rx.recv_timeout(if backlog { BACKLOG_EVERY } else { KEEP_EVERY }) {
            Ok(first) => first,
            // Quiet a while: the rows of writes, committed beside them by
            // the store's connections, may still have come.
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if bounds != keep::Bounds::NONE {
                    kept_at = std::time::Instant::now();
                    let seen = (!backlog).then_some(&mut seen_version);
                    backlog = keep_round(data, durability, bounds, shared, seen);
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        // The rows of reads: gather what comes in the next moment into the
        // same transaction. While this thread is parked, queuing such a row
        // wakes nobody, so a busy host pays no system call per row; a row that
        // must be durable (or a flush) unparks it at once.
        if matches!(first, Msg::Row(_, None)) {
            std::thread::park_timeout(GATHER);
        }
        let mut rows: Vec<Box<Row>> = Vec::new();
        let mut durable: Vec<Durable> = Vec::new();
        let mut acks = Vec::new();
        let mut next = Some(first);
        while let Some(m) = next.take() {
            match m {
                Msg::Row(r, d) => {
                    rows.push(r);
                    durable.extend(d);
                }
                Msg::Synced(d) => durable.push(d),
                Msg::Flush(a) => acks.push(a),
            }
            if rows.len() < BATCH {
                next = rx.try_recv().ok();
            }
        }
        let mut result = Ok(());
        if !rows.is_empty() {
            let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
            // Another connection holding the record's lock past BUSY_WAIT
            // (another process on the root) is waited out a while longer:
            // some of these rows are of writes already kept, whose callers
            // went away (`hand_on`), and only this commit records them.
            for attempt in 0..=BUSY_RETRIES {
                result = commit(&mut s.conn, data, &rows, durability);
                if !(attempt < BUSY_RETRIES && result.as_ref().is_err_and(is_busy)) {
                    break;
                }
            }
            if result.is_err() {
                // Open the file anew next time (it may have been moved).
                s.conn = None;
            }
        }
        if result.is_ok() && !durable.is_empty() && durability == Durability::Power {
            // The record's log too: rows committed with their writes were
            // written to it by the store's connection, at NORMAL.
            result = sync_logs(data);
        }
        if let Err(e) = &result {
            tracing::error!("cannot write {} rows to the record: {e:#}", rows.len());
        }
        for d in durable {
            let _ = d.send(result.as_ref().map(|_| ()).map_err(|e| format!("{e:#}")));
        }
        // Between batches, in steps of its own: the oldest rows past the
        // record's bounds go (no call waits for it).
        since_kept += rows.len();
        if bounds != keep::Bounds::NONE
            && (since_kept >= KEEP_EVERY_ROWS
                || kept_at.elapsed() >= if backlog { BACKLOG_EVERY } else { KEEP_EVERY }
                || !acks.is_empty())
        {
            (since_kept, kept_at) = (0, std::time::Instant::now());
            backlog = keep_round(data, durability, bounds, shared, None);
        }
        for a in acks {
            let _ = a.send(());
        }
    }
}

/// One round of letting the record's oldest rows go past `bounds`, on the
/// writer's connection. With `seen`, only when another connection (a
/// write's, committing its row beside it) changed the record since the last
/// such look (`PRAGMA data_version`): a quiet record is not read again.
/// Answers whether rows may be left to let go (the round let a whole
/// round's rows go).
fn keep_round(
    data: &Path,
    durability: Durability,
    bounds: keep::Bounds,
    shared: &Mutex<Shared>,
    seen: Option<&mut Option<i64>>,
) -> bool {
    let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
    if s.closed {
        return false;
    }
    if s.conn.is_none() && data.join(RUNS_FILE).exists() {
        s.conn = open(data, durability).ok();
    }
    let Some(conn) = s.conn.as_mut() else { return false };
    if let Some(seen) = seen {
        let version = conn.query_row("PRAGMA data_version", [], |r| r.get::<_, i64>(0)).ok();
        if version.is_some() && *seen == version {
            return false;
        }
        *seen = version;
    }
    match keep::let_go(conn, bounds, std::time::SystemTime::now()) {
        Ok(gone) => gone >= keep::ROUND,
        Err(e) => {
            tracing::warn!("cannot let the oldest rows of the record in {} go: {e:#}", data.display());
            false
        }
    }
}

/// Syncs (`fdatasync`) the write-ahead log of every database in the data
/// folder `data` — the app's store, and the record, whose rows committed with
/// their writes went to its log at NORMAL —, so that every write committed
/// before this began survives a power cut (`Durability::Power`). SQLite,
/// at `synchronous = NORMAL`, syncs a log only before a checkpoint; a log
/// that is not there holds nothing uncheckpointed (a checkpoint synced it
/// into its database first).
pub fn sync_logs(data: &Path) -> anyhow::Result<()> {
    GROUPS_SYNCED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    #[cfg(test)]
    SYNCED_HERE.with(|n| n.set(n.get() + 1));
    let entries = match std::fs::read_dir(data) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", data.display())),
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !name.ends_with(".sqlite-wal") {
            continue;
        }
        match std::fs::File::open(entry.path()) {
            Ok(f) => f.sync_data().with_context(|| format!("cannot sync {}", entry.path().display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot open {}", entry.path().display())),
        }
    }
    Ok(())
}

#[cfg(test)]
thread_local! {
    /// How many syncs this thread did (tests: which thread a sync ran on).
    static SYNCED_HERE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many groups of durable rows this process synced (`Durability::Power`).
static GROUPS_SYNCED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A row for tests: request `r<i>`, a write allowed and done.
#[cfg(test)]
pub(crate) fn test_row(i: usize) -> Row {
    Row {
        time: "2026-01-01T00:00:00Z".into(),
        request_id: format!("r{i}"),
        channel: "user".into(),
        caller: "test".into(),
        app: "a".into(),
        release: "x".into(),
        route: "r".into(),
        effect: "write".into(),
        arguments_hash: "h".into(),
        decision: "allowed".into(),
        reason: String::new(),
        outcome: "ok".into(),
        duration_ms: 1.0,
        answered_by: "person".into(),
    }
}

/// How many groups of durable rows this process synced so far.
#[cfg(test)]
pub(crate) fn groups_synced() -> u64 {
    GROUPS_SYNCED.load(std::sync::atomic::Ordering::Relaxed)
}

/// SQLite's `synchronous` for the record's commits at `durability`.
fn synchronous(durability: Durability) -> &'static str {
    match durability {
        // The log is written at each commit and synced at checkpoints: as the app's store.
        Durability::Process => "NORMAL",
        // Every commit syncs the log: a row is on disk when its transaction is.
        Durability::Power => "FULL",
    }
}

fn open(data: &Path, durability: Durability) -> anyhow::Result<Connection> {
    // A data folder missing while an operation of its app is under way or
    // unfinished (a rollback moved it aside) is not made again here: a row
    // written there would leave a folder where the data is to be put back,
    // and recovery would take it for the data.
    if !data.is_dir() && data.parent().is_some_and(crate::release::journal::open_in) {
        anyhow::bail!("{} is being moved or put back; its record is not written until it is in place", data.display());
    }
    std::fs::create_dir_all(data).with_context(|| format!("cannot create {}", data.display()))?;
    let conn =
        crate::sqlite::open(&data.join(RUNS_FILE), crate::sqlite::read_write()).context("cannot open the record")?;
    // A lifecycle action's row ([`action`]) comes through a connection of its
    // own, beside the writer's: each waits out the other's commit.
    conn.busy_timeout(BUSY_WAIT)?;
    conn.execute_batch(&format!(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = {};
         {RUNS_TABLE}",
        synchronous(durability)
    ))?;
    // A record written before the column existed gets it; its rows were
    // never answered by a standing approval.
    if !has_answered_by(&conn)? {
        conn.execute_batch(ADD_ANSWERED_BY)?;
    }
    Ok(conn)
}

/// The record's table.
const RUNS_TABLE: &str = "CREATE TABLE IF NOT EXISTS runs (
             seq INTEGER PRIMARY KEY,
             time TEXT NOT NULL, request_id TEXT NOT NULL, channel TEXT NOT NULL,
             caller TEXT NOT NULL, app TEXT NOT NULL, release TEXT NOT NULL,
             route TEXT NOT NULL, effect TEXT NOT NULL, arguments_hash TEXT NOT NULL,
             decision TEXT NOT NULL, reason TEXT NOT NULL, outcome TEXT NOT NULL,
             duration_ms REAL NOT NULL, answered_by TEXT NOT NULL DEFAULT 'nobody');";
const ADD_ANSWERED_BY: &str = "ALTER TABLE runs ADD COLUMN answered_by TEXT NOT NULL DEFAULT 'nobody'";

/// The longest string, blob or row a record from elsewhere may hold: a row
/// of [`COLUMNS`], each cell at most `elsewhere::sqlite::MAX_CELL`.
pub const MAX_ROW: usize = crate::elsewhere::sqlite::MAX_CELL * 16;

/// The schemas a record has (the one this module makes, and the one a record
/// made before `answered_by` existed has once the column was added): a
/// record from elsewhere has exactly one of them — no index, trigger, view
/// or other table.
pub fn schemas() -> anyhow::Result<Vec<Vec<crate::elsewhere::sqlite::Object>>> {
    let made = |sql: &str| -> anyhow::Result<Vec<crate::elsewhere::sqlite::Object>> {
        let conn = crate::sqlite::in_memory()?;
        conn.execute_batch(sql)?;
        Ok(crate::elsewhere::sqlite::schema_of(&conn)?)
    };
    let older = RUNS_TABLE.replace(", answered_by TEXT NOT NULL DEFAULT 'nobody');", ");");
    let days = keep::DAYS_TABLE;
    Ok(vec![
        made(RUNS_TABLE)?,
        made(&format!("{older}; {ADD_ANSWERED_BY}"))?,
        // With the summary of the rows let go (issue 76).
        made(&format!("{RUNS_TABLE} {days}"))?,
        made(&format!("{older}; {ADD_ANSWERED_BY}; {days}"))?,
    ])
}

fn has_answered_by(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row("SELECT EXISTS (SELECT 1 FROM pragma_table_info('runs') WHERE name = 'answered_by')", [], |r| {
        r.get(0)
    })
}

fn commit(conn: &mut Option<Connection>, data: &Path, rows: &[Box<Row>], durability: Durability) -> anyhow::Result<()> {
    if conn.is_none() {
        *conn = Some(open(data, durability)?);
    }
    insert(conn.as_mut().expect("just opened"), rows.iter().map(|r| &**r))
}

/// The insert of one row into `$runs` (the record's table, named as the
/// connection sees it): one text for the record's own connection and for the
/// store's, where the record is attached.
macro_rules! insert_into {
    ($runs:literal) => {
        concat!(
            "INSERT INTO ",
            $runs,
            " (time, request_id, channel, caller, app, release, route, effect,
               arguments_hash, decision, reason, outcome, duration_ms, answered_by)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
        )
    };
}

/// Runs an insert of [`insert_into`] for `r`.
fn execute_row(stmt: &mut rusqlite::Statement<'_>, r: &Row) -> rusqlite::Result<()> {
    stmt.execute(rusqlite::params![
        r.time,
        r.request_id,
        r.channel,
        r.caller,
        r.app,
        r.release,
        r.route,
        r.effect,
        r.arguments_hash,
        r.decision,
        r.reason,
        r.outcome,
        r.duration_ms,
        r.answered_by
    ])
    .map(drop)
}

fn insert<'r>(conn: &mut Connection, rows: impl Iterator<Item = &'r Row>) -> anyhow::Result<()> {
    let tx = conn.transaction()?;
    {
        let mut stmt = tx.prepare_cached(insert_into!("runs"))?;
        for r in rows {
            execute_row(&mut stmt, r)?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// The name under which the record is attached to the app's store's write
/// connections ([`insert_beside`]; [`INSERT_BESIDE`] names it too).
pub const BESIDE: &str = "record";

/// Makes the record of the data folder `data` (file and table) if it is not
/// there, so that the store's write connections can attach it.
pub fn make(data: &Path) -> anyhow::Result<()> {
    open(data, Durability::Process).map(drop)
}

/// The row's insert into the record attached as [`BESIDE`]. A guest's
/// statement with this text is never served from the connection's cache
/// (`caps::store`), where this one, prepared with the authorizer off, is kept.
pub const INSERT_BESIDE: &str = insert_into!("record.runs");

/// The step that commits `row` into the record beside the store, on the
/// record's own connection, just before the write it records (with its
/// group's rows: `caps::store::AppStore::commit_group`), and takes it back
/// if that write's commit then fails. [`Recorder::synced`] then makes both
/// as durable as the level says. A kept write always has its row.
///
/// Where no record is beside the store, the call records the row itself; a
/// call that went away while it waited for its group's commit cannot, so
/// its step, owed and dropped, gives the row to `recorder`'s writer of
/// `data` (`caps::store::Step`).
pub fn insert_beside(row: Arc<Row>, recorder: &Arc<Recorder>, data: &Path) -> RowBeside {
    RowBeside { row, recorder: recorder.clone(), data: data.to_path_buf(), owed: false, inserted: None }
}

/// The row's insert on the record's own connection (the record is `main`
/// there): [`RowBeside`] commits it just before the write it records.
const INSERT_ROW: &str = insert_into!("runs");

/// The step of [`insert_beside`].
pub struct RowBeside {
    row: Arc<Row>,
    recorder: Arc<Recorder>,
    data: std::path::PathBuf,
    /// Its write was committed without it, and its call did not take it back.
    owed: bool,
    /// The row it committed (its `seq`), to take back if the write was not kept.
    inserted: Option<i64>,
}

impl crate::caps::store::Step for RowBeside {
    fn run(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        debug_assert!(self.inserted.is_none(), "a row's step runs once");
        execute_row(&mut *conn.prepare_cached(INSERT_ROW)?, &self.row)?;
        self.inserted = Some(conn.last_insert_rowid());
        Ok(())
    }

    fn undo(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        match self.inserted.take() {
            Some(seq) => conn.prepare_cached("DELETE FROM runs WHERE seq = ?1")?.execute([seq]).map(drop),
            None => Ok(()),
        }
    }

    fn owed(&mut self) {
        self.owed = true;
    }

    fn taken_back(&mut self) {
        self.owed = false;
    }
}

impl Drop for RowBeside {
    fn drop(&mut self) {
        if std::mem::take(&mut self.owed) {
            self.recorder.hand_on(&self.data, (*self.row).clone());
        }
    }
}

/// A lifecycle action the person took on an app (activate, rollback, grant,
/// revoke, preview start and stop, remove, a workflow's approval): recorded
/// beside the calls, with effect `lifecycle` and the channel and caller of the
/// adapter that received it.
#[derive(Debug, Clone)]
pub struct Action<'a> {
    /// What was done: `activate`, `rollback`, `grant`, … (the row's route).
    pub name: &'a str,
    /// The release it concerns (activated, rolled back to, previewed), or "".
    pub release: &'a str,
    /// What the person asked for; only its hash is kept.
    pub arguments: serde_json::Value,
}

/// The effect column of an action's row.
pub const LIFECYCLE: &str = "lifecycle";

/// The longest reason an action's row keeps.
const MAX_ACTION_REASON: usize = 300;

/// Records `action` on `app` by `caller` in the record of `data`, on disk when
/// this returns. `result` is what the action said: done (with a summary) or
/// why it failed (both pass the sanitiser and are cut short).
pub fn action(
    data: &Path,
    caller: &super::Caller,
    app: &crate::manifest::AppId,
    action: &Action<'_>,
    result: Result<&str, &str>,
) -> anyhow::Result<()> {
    let (outcome, said) = match result {
        Ok(summary) => ("ok", summary),
        Err(why) => ("error", why),
    };
    let reason: String = crate::sanitize::secrets(said).chars().take(MAX_ACTION_REASON).collect();
    let row = Row {
        arguments_hash: super::arguments_hash(&action.arguments),
        reason,
        outcome: outcome.to_string(),
        ..Row::of(caller, app, action.release, action.name, LIFECYCLE)
    };
    // The person's own actions are rare: each is synced, whatever the level.
    let mut conn = open(data, Durability::Power)?;
    insert(&mut conn, std::iter::once(&row))
}

/// Copies the record of the data folder `from` over the record of `to` (a
/// consistent copy, by SQLite's backup): a rollback puts older data back, but
/// the record must not go back in time with it. `from`'s writer must be closed.
pub fn carry_over(from: &Path, to: &Path) -> anyhow::Result<()> {
    let path = from.join(RUNS_FILE);
    if !path.exists() {
        return Ok(());
    }
    for stale in ["-wal", "-shm"] {
        let p = to.join(format!("{RUNS_FILE}{stale}"));
        match std::fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("cannot remove {}", p.display()));
            }
            _ => {}
        }
    }
    let src = crate::sqlite::open(&path, crate::sqlite::read_only()).context("cannot open the record")?;
    src.busy_timeout(std::time::Duration::from_secs(5))?;
    src.backup(rusqlite::MAIN_DB, to.join(RUNS_FILE), None::<fn(rusqlite::backup::Progress)>)
        .with_context(|| format!("cannot carry the record over to {}", to.display()))?;
    Ok(())
}

/// Records a lifecycle action's result in the app's record
/// ([`action`]) and hands the result back. `said` gives, for a done
/// action, the release it concerns and a one-line summary. Nothing is written
/// for an app that does not exist (no folder is made for a name). An action
/// done but not recorded is reported as such, never as plain success.
pub fn recorded<T>(
    paths: &crate::root::AppPaths,
    caller: &super::Caller,
    name: &str,
    arguments: serde_json::Value,
    done: anyhow::Result<T>,
    said: impl FnOnce(&T) -> (String, String),
) -> anyhow::Result<T> {
    if !paths.exists() {
        return done;
    }
    let (release, result) = match &done {
        Ok(t) => {
            let (release, summary) = said(t);
            (release, Ok(summary))
        }
        Err(e) => (String::new(), Err(format!("{e:#}"))),
    };
    let taken = Action { name, release: &release, arguments };
    let written = action(&paths.data(), caller, &paths.id, &taken, result.as_deref().map_err(String::as_str));
    match (done, written) {
        (Ok(t), Ok(())) => Ok(t),
        (Ok(_), Err(e)) => Err(e.context(format!("{name} of {} was done, but it could not be recorded", paths.id))),
        (Err(e), written) => {
            if let Err(w) = written {
                tracing::error!(app = %paths.id, "cannot record the failed {name}: {w:#}");
            }
            Err(e)
        }
    }
}

/// The record's columns, as a copy of a record from elsewhere (a backup's)
/// is read: each typed as the record's table says, `answered_by` taken as
/// `nobody` from a record written before the column existed.
pub const COLUMNS: &[crate::elsewhere::sqlite::Column] = {
    use crate::elsewhere::sqlite::{Column, Type};
    const fn text(name: &'static str) -> Column {
        Column { name, ty: Type::Text, default: None }
    }
    &[
        text("time"),
        text("request_id"),
        text("channel"),
        text("caller"),
        text("app"),
        text("release"),
        text("route"),
        text("effect"),
        text("arguments_hash"),
        text("decision"),
        text("reason"),
        text("outcome"),
        Column { name: "duration_ms", ty: Type::Real, default: None },
        Column { name: "answered_by", ty: Type::Text, default: Some("nobody") },
    ]
};

/// Makes the record of the data folder `data` (which has none) anew, with
/// this module's own table, and copies in every row of `from` — a record
/// from elsewhere, never opened as a record: its rows are read typed and
/// checked ([`COLUMNS`]), in order; nothing in its schema (a trigger, a
/// view) comes along. Answers how many rows were copied.
pub fn rebuild_from(data: &Path, from: &crate::elsewhere::sqlite::Foreign) -> anyhow::Result<u64> {
    use crate::elsewhere::sqlite::Cell;
    let path = data.join(RUNS_FILE);
    anyhow::ensure!(!path.exists(), "{} exists already", path.display());
    let mut conn = open(data, Durability::Power)?;
    let mut batch: Vec<Row> = Vec::with_capacity(BATCH);
    let mut failed: Option<anyhow::Error> = None;
    let copied = from.rows("runs", COLUMNS, "seq", |cells| {
        let mut c = cells.into_iter();
        let mut next = || c.next().map(Cell::text).unwrap_or_default();
        let (time, request_id, channel, caller, app, release) = (next(), next(), next(), next(), next(), next());
        let (route, effect, arguments_hash, decision, reason, outcome) =
            (next(), next(), next(), next(), next(), next());
        let duration_ms = next().parse().unwrap_or(0.0);
        let answered_by = next();
        batch.push(Row {
            time,
            request_id,
            channel,
            caller,
            app,
            release,
            route,
            effect,
            arguments_hash,
            decision,
            reason,
            outcome,
            duration_ms,
            answered_by,
        });
        if batch.len() >= BATCH {
            if let Err(e) = insert(&mut conn, batch.iter()) {
                failed = Some(e);
                return Err(crate::elsewhere::refused("its rows cannot be written to the new record"));
            }
            batch.clear();
        }
        Ok(())
    });
    if let Some(e) = failed {
        return Err(e.context("cannot write the restored record"));
    }
    let copied = copied.map_err(|r| anyhow::anyhow!("{r}"))?;
    insert(&mut conn, batch.iter())?;
    copy_days(&mut conn, from)?;
    Ok(copied)
}

/// The day summary's columns, as a record from elsewhere's is read.
const DAY_COLUMNS: &[crate::elsewhere::sqlite::Column] = {
    use crate::elsewhere::sqlite::{Column, Type};
    const fn column(name: &'static str, ty: Type) -> Column {
        Column { name, ty, default: None }
    }
    &[
        column("day", Type::Text),
        column("route", Type::Text),
        column("channel", Type::Text),
        column("calls", Type::Integer),
        column("refused", Type::Integer),
        column("errors", Type::Integer),
    ]
};

/// The day summary of a record from elsewhere (when it has one), copied
/// into `conn`'s, each line checked as its rows are.
fn copy_days(conn: &mut Connection, from: &crate::elsewhere::sqlite::Foreign) -> anyhow::Result<()> {
    use crate::elsewhere::sqlite::Cell;
    let has = from.schema().map_err(|r| anyhow::anyhow!("{r}"))?.iter().any(|o| o.kind == "table" && o.name == "days");
    if !has {
        return Ok(());
    }
    let tx = conn.transaction()?;
    tx.execute_batch(keep::DAYS_TABLE)?;
    {
        let mut stmt = tx.prepare(
            "INSERT INTO days (day, route, channel, calls, refused, errors) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (day, route, channel) DO UPDATE SET calls = calls + excluded.calls,
                 refused = refused + excluded.refused, errors = errors + excluded.errors",
        )?;
        let mut failed = None;
        from.rows("days", DAY_COLUMNS, "day", |cells| {
            let number = |c: &Cell| match c {
                Cell::Integer(i) => (*i).max(0),
                _ => 0,
            };
            let (day, route, channel) = (cells[0].clone().text(), cells[1].clone().text(), cells[2].clone().text());
            let counts = (number(&cells[3]), number(&cells[4]), number(&cells[5]));
            if let Err(e) = stmt.execute(rusqlite::params![day, route, channel, counts.0, counts.1, counts.2]) {
                failed = Some(e);
                return Err(crate::elsewhere::refused("its day summary cannot be written to the new record"));
            }
            Ok(())
        })
        .map_err(|r| match failed.take() {
            Some(e) => anyhow::Error::from(e).context(r.to_string()),
            None => anyhow::anyhow!("{r}"),
        })?;
    }
    tx.commit()?;
    Ok(())
}

/// Whether the record of the data folder `data` holds a lifecycle action
/// named `name` (`restore`, `install`, …); false when it has none or cannot
/// be read.
pub fn has_action(data: &Path, name: &str) -> bool {
    let path = data.join(RUNS_FILE);
    if !path.is_file() {
        return false;
    }
    let Ok(conn) = crate::sqlite::open(&path, crate::sqlite::read_only()) else { return false };
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM runs WHERE effect = ?1 AND route = ?2)",
        rusqlite::params![LIFECYCLE, name],
        |r| r.get::<_, bool>(0),
    )
    .unwrap_or(false)
}

/// The record of the data folder `data`, oldest first (the newest `limit`).
pub fn read(data: &Path, limit: usize) -> anyhow::Result<Vec<Row>> {
    let Some(conn) = open_to_read(data)? else { return Ok(Vec::new()) };
    let answered_by = if has_answered_by(&conn)? { "answered_by" } else { "'nobody'" };
    let mut stmt = conn.prepare(&format!(
        "SELECT time, request_id, channel, caller, app, release, route, effect, arguments_hash,
                decision, reason, outcome, duration_ms, {answered_by}
         FROM (SELECT * FROM runs ORDER BY seq DESC LIMIT ?1) ORDER BY seq"
    ))?;
    let rows = stmt.query_map([limit as i64], |r| {
        Ok(Row {
            time: r.get(0)?,
            request_id: r.get(1)?,
            channel: r.get(2)?,
            caller: r.get(3)?,
            app: r.get(4)?,
            release: r.get(5)?,
            route: r.get(6)?,
            effect: r.get(7)?,
            arguments_hash: r.get(8)?,
            decision: r.get(9)?,
            reason: r.get(10)?,
            outcome: r.get(11)?,
            duration_ms: r.get(12)?,
            answered_by: r.get(13)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The record in `data`, opened to read: none when it has no table yet.
fn open_to_read(data: &Path) -> anyhow::Result<Option<Connection>> {
    let path = data.join(RUNS_FILE);
    if !path.exists() {
        return Ok(None);
    }
    let conn = crate::sqlite::open(&path, crate::sqlite::read_only()).context("cannot open the record")?;
    // The app's workers write the record: one taken by an escape could put a
    // row of a gigabyte there, for the panel to read. No value longer than
    // a record from elsewhere may hold is read (`SQLITE_TOOBIG`).
    conn.set_limit(rusqlite::limits::Limit::SQLITE_LIMIT_LENGTH, crate::elsewhere::sqlite::MAX_CELL as i32)?;
    // The writer may be setting the file up this very moment (it creates the
    // file, then the table): wait out its lock, and a record without its
    // table yet has no rows.
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let made: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs')",
        [],
        |r| r.get(0),
    )?;
    Ok(made.then_some(conn))
}

/// What the record in `data` let go so far (its day summary's count).
pub fn let_go_of(data: &Path) -> anyhow::Result<keep::LetGo> {
    match open_to_read(data)? {
        Some(conn) => keep::let_go_so_far(&conn),
        None => Ok(keep::LetGo::default()),
    }
}

/// The record in `data` counted per day, route and channel (the newest
/// `limit` lines), the rows let go among them.
pub fn summary(data: &Path, limit: usize) -> anyhow::Result<Vec<keep::Day>> {
    match open_to_read(data)? {
        Some(conn) => keep::summary(&conn, limit),
        None => Ok(Vec::new()),
    }
}

/// `prune --record-before`: the rows of the record in `data` before `day`
/// that go (all but the writes a rollback needs), counted; taken out
/// unless `dry`. The app's calls' writers may write meanwhile: each waits
/// out the other.
pub fn prune_before(data: &Path, day: &str, dry: bool) -> anyhow::Result<keep::Pruned> {
    if !data.join(RUNS_FILE).exists() {
        return Ok(keep::Pruned::default());
    }
    let mut conn = open(data, Durability::Power)?;
    keep::prune_before(&mut conn, day, dry)
}

/// `prune --record-to`: the oldest rows of the record in `data` let go
/// until its rows take `bytes` at most (never the person's actions and
/// answers, nor the writes since the last activation): about how many
/// with `dry`, else how many went.
pub fn prune_to(data: &Path, bytes: u64, dry: bool) -> anyhow::Result<u64> {
    if !data.join(RUNS_FILE).exists() {
        return Ok(0);
    }
    let mut conn = open(data, Durability::Power)?;
    match dry {
        true => keep::to_size_estimate(&conn, bytes),
        false => keep::to_size(&mut conn, bytes),
    }
}

/// The bytes the rows of the record in `data` take (its pages in use; the
/// file may be larger: freed pages are used again).
pub fn used_bytes(data: &Path) -> anyhow::Result<u64> {
    match open_to_read(data)? {
        Some(conn) => Ok(keep::used_bytes(&conn)?),
        None => Ok(0),
    }
}

/// The number of the last row of the record in `data` (0 for none): rows
/// are numbered in the order they are committed.
pub fn last_row(data: &Path) -> anyhow::Result<i64> {
    let Some(conn) = open_to_read(data)? else { return Ok(0) };
    Ok(conn.query_row("SELECT coalesce(max(seq), 0) FROM runs", [], |r| r.get(0))?)
}

/// How many calls that may have written (`write` and `external` routes that
/// succeeded) the record in `data` holds after its row `after`.
pub fn writes_after(data: &Path, after: i64) -> anyhow::Result<i64> {
    let Some(conn) = open_to_read(data)? else { return Ok(0) };
    Ok(conn.query_row(
        "SELECT count(*) FROM runs WHERE seq > ?1 AND effect IN ('write', 'external') AND outcome = 'ok'",
        [after],
        |r| r.get(0),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::test_row as row;

    /// A row of `effect` by `channel`, its decision and who answered, at `time`.
    fn made(effect: &str, channel: &str, decision: &str, answered_by: &str, time: &str) -> Row {
        Row {
            effect: effect.into(),
            channel: channel.into(),
            decision: decision.into(),
            answered_by: answered_by.into(),
            time: time.into(),
            ..row(0)
        }
    }

    /// The rows of the record in `dir` of `effect`.
    fn count_of(dir: &Path, which: &str) -> i64 {
        let conn = open(dir, Durability::Process).unwrap();
        conn.query_row(&format!("SELECT count(*) FROM runs WHERE {which}"), [], |r| r.get(0)).unwrap()
    }

    /// Issue 76: 200,000 reads through a recorder whose record is bounded to
    /// 1 MiB keep it under its bound (a step's rows over it at most), while
    /// the person's action, the question they answered and the write since
    /// the activation stay, and the day summary counts every row let go
    /// (fails without the bound: the record held every row, about 16 MB).
    #[test]
    fn a_record_past_its_size_lets_its_oldest_reads_go_and_keeps_what_the_person_decided() {
        let dir = tempfile::tempdir().unwrap();
        let bounds = keep::Bounds { days: 0, bytes: 1 << 20 };
        let rec = Recorder::new(Durability::Process).keeping(bounds);
        let now = crate::release::now_rfc3339();
        let mut conn = open(dir.path(), Durability::Process).unwrap();
        insert(&mut conn, [made("lifecycle", "user", "allowed", "person", &now)].iter()).unwrap();
        let kept = [
            made("write", "ai", "confirmed", "person", &now),
            made("read", "ai", "confirmed", "person", &now),
            made("write", "user", "allowed", "person", &now),
        ];
        insert(&mut conn, kept.iter()).unwrap();
        drop(conn);
        const READS: usize = 200_000;
        for i in 0..READS {
            rec.write(dir.path(), Row { time: now.clone(), effect: "read".into(), channel: "ai".into(), ..row(i) });
        }
        rec.flush();
        let conn = open(dir.path(), Durability::Process).unwrap();
        let used = keep::used_bytes(&conn).unwrap();
        assert!(used <= (1 << 20) + (256 << 10), "the record holds {used} bytes");
        assert_eq!(count_of(dir.path(), "effect = 'lifecycle'"), 1);
        assert_eq!(count_of(dir.path(), "decision = 'confirmed'"), 2, "the questions the person answered");
        assert_eq!(count_of(dir.path(), "effect = 'write'"), 2, "the writes since the activation");
        let held = count_of(dir.path(), "1");
        let gone = keep::let_go_so_far(&conn).unwrap();
        assert!(gone.rows > 150_000, "{gone:?}");
        assert_eq!(held as u64 + gone.rows, READS as u64 + 4, "every row is counted once");
        let summed: u64 = keep::summary(&conn, 1000).unwrap().iter().map(|d| d.calls).sum();
        assert_eq!(summed, READS as u64 + 4);
    }

    /// Issue 76: rows older than `record_keep_days` go, with the writes of an
    /// activation before the last one; the writes since the last activation
    /// and the person's actions stay, however old.
    #[test]
    fn rows_older_than_the_bound_go_but_the_writes_a_rollback_needs_stay() {
        let dir = tempfile::tempdir().unwrap();
        let old = "2020-01-01T00:00:00Z";
        let now = crate::release::now_rfc3339();
        let mut conn = open(dir.path(), Durability::Process).unwrap();
        let activate =
            |time: &str| Row { route: "activate".into(), ..made("lifecycle", "user", "allowed", "person", time) };
        let rows = [
            activate(old),
            made("write", "ai", "allowed", "nobody", old),
            made("read", "ai", "allowed", "nobody", old),
            activate(old),
            made("write", "ai", "allowed", "nobody", old),
            made("read", "ai", "refused", "nobody", old),
            made("read", "ai", "allowed", "nobody", &now),
        ];
        insert(&mut conn, rows.iter()).unwrap();
        let bounds = keep::Bounds { days: 90, bytes: 0 };
        let gone = keep::let_go(&mut conn, bounds, std::time::SystemTime::now()).unwrap();
        assert_eq!(gone, 3, "the first activation's write and the two old reads");
        assert_eq!(count_of(dir.path(), "effect = 'lifecycle'"), 2);
        assert_eq!(count_of(dir.path(), "effect = 'write'"), 1, "the write since the last activation");
        assert_eq!(count_of(dir.path(), "effect = 'read'"), 1, "the read of today");
        let days = keep::summary(&conn, 100).unwrap();
        let old_reads = days.iter().find(|d| d.day == "2020-01-01" && d.route == row(0).route).unwrap();
        assert_eq!((old_reads.calls, old_reads.refused), (4, 1), "two writes and two reads, kept or let go: {days:?}");
        // Without the fence of the second activation, its write goes too
        // (fails when writes are kept from the first activation only).
        conn.execute("DELETE FROM runs WHERE effect = 'lifecycle' AND seq = 4", []).unwrap();
        assert_eq!(keep::let_go(&mut conn, bounds, std::time::SystemTime::now()).unwrap(), 0);
    }

    /// Issue 76: `prune --record-before` counts, then takes out, exactly the
    /// rows before its day — the person's own actions and answers included,
    /// never the writes since the last activation.
    #[test]
    fn pruning_the_record_before_a_day_counts_then_takes_out_exactly_those_rows() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = open(dir.path(), Durability::Process).unwrap();
        let on = |day: &str| format!("{day}T12:00:00Z");
        let rows = [
            Row { route: "activate".into(), ..made("lifecycle", "user", "allowed", "person", &on("2026-01-01")) },
            made("read", "ai", "confirmed", "person", &on("2026-01-02")),
            made("read", "ai", "allowed", "nobody", &on("2026-01-03")),
            made("write", "ai", "allowed", "nobody", &on("2026-01-03")),
            made("read", "ai", "allowed", "nobody", &on("2026-02-01")),
        ];
        insert(&mut conn, rows.iter()).unwrap();
        let dry = keep::prune_before(&mut conn, "2026-01-31", true).unwrap();
        assert_eq!((dry.rows, dry.decisions), (3, 2), "{dry:?}");
        assert_eq!(count_of(dir.path(), "1"), 5, "a dry run takes nothing out");
        let done = keep::prune_before(&mut conn, "2026-01-31", false).unwrap();
        assert_eq!(done, dry);
        assert_eq!(count_of(dir.path(), "1"), 2, "the write since the activation and the read after the day");
        assert_eq!(keep::let_go_so_far(&conn).unwrap().rows, 3);
    }

    /// Issue 76: rows committed beside a write (by the store's connection,
    /// never through the writer) are let go too: a writer that hears
    /// nothing for a while looks at its record when another connection
    /// changed it (fails before: only a batch of the writer's own woke it).
    #[test]
    fn rows_written_beside_the_writer_are_let_go_once_it_has_been_quiet_a_while() {
        let dir = tempfile::tempdir().unwrap();
        let rec = Recorder::new(Durability::Process).keeping(keep::Bounds { days: 90, bytes: 0 });
        let now = crate::release::now_rfc3339();
        rec.write(dir.path(), made("read", "ai", "allowed", "nobody", &now));
        rec.flush();
        let mut beside = open(dir.path(), Durability::Process).unwrap();
        let old = made("read", "ai", "allowed", "nobody", "2020-01-01T00:00:00Z");
        insert(&mut beside, [old.clone(), old].iter()).unwrap();
        let deadline = std::time::Instant::now() + KEEP_EVERY * 5;
        while count_of(dir.path(), "time < '2021'") > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert_eq!(count_of(dir.path(), "time < '2021'"), 0, "the old rows were let go");
        assert_eq!(count_of(dir.path(), "1"), 1);
    }

    /// Issue 76: a backlog past the bounds (a record kept long under other
    /// bounds) drains round after round, a round a second, with nothing more
    /// written (fails before: one round, 8,000 rows, then nothing until the
    /// record was written again).
    #[test]
    fn a_backlog_past_the_bounds_drains_round_after_round() {
        let dir = tempfile::tempdir().unwrap();
        let mut beside = open(dir.path(), Durability::Process).unwrap();
        let old = made("read", "ai", "allowed", "nobody", "2020-01-01T00:00:00Z");
        insert(&mut beside, std::iter::repeat_n(&old, 30_000)).unwrap();
        drop(beside);
        let rec = Recorder::new(Durability::Process).keeping(keep::Bounds { days: 90, bytes: 0 });
        rec.write(dir.path(), made("read", "ai", "allowed", "nobody", &crate::release::now_rfc3339()));
        rec.flush();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while count_of(dir.path(), "time < '2021'") > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        assert_eq!(count_of(dir.path(), "time < '2021'"), 0, "the backlog drained");
    }

    /// Issue 76: `prune --record-to` estimates, then lets go, the oldest
    /// rows until the record's rows fit, the person's action kept.
    #[test]
    fn pruning_the_record_to_a_size_lets_its_oldest_rows_go_until_they_fit() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = open(dir.path(), Durability::Process).unwrap();
        let now = crate::release::now_rfc3339();
        let mut rows = vec![made("lifecycle", "user", "allowed", "person", &now)];
        rows.extend(
            (0..20_000).map(|i| Row { request_id: format!("r{i}"), ..made("read", "ai", "allowed", "nobody", &now) }),
        );
        insert(&mut conn, rows.iter()).unwrap();
        let fit = 512 << 10;
        assert!(keep::used_bytes(&conn).unwrap() > 2 * fit);
        let about = keep::to_size_estimate(&conn, fit).unwrap();
        let gone = keep::to_size(&mut conn, fit).unwrap();
        assert!(keep::used_bytes(&conn).unwrap() <= fit, "{}", keep::used_bytes(&conn).unwrap());
        assert!(about.abs_diff(gone) * 5 <= gone, "about {about}, {gone} went");
        assert_eq!(count_of(dir.path(), "effect = 'lifecycle'"), 1);
        assert_eq!(keep::to_size_estimate(&conn, fit).unwrap(), 0, "nothing more to let go");
    }

    /// A record with its day summary is one a backup may hold: restored, its
    /// summary comes along (issue 76).
    #[test]
    fn a_record_with_its_day_summary_is_restored_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = open(dir.path(), Durability::Process).unwrap();
        let old = made("read", "ai", "allowed", "nobody", "2020-01-01T00:00:00Z");
        insert(&mut conn, [old.clone(), old].iter()).unwrap();
        let bounds = keep::Bounds { days: 90, bytes: 0 };
        keep::let_go(&mut conn, bounds, std::time::SystemTime::now()).unwrap();
        drop(conn);
        let foreign = crate::elsewhere::sqlite::open(&dir.path().join(RUNS_FILE), "runs.sqlite", MAX_ROW).unwrap();
        foreign.check_schema_one_of(&schemas().unwrap()).unwrap();
        let to = tempfile::tempdir().unwrap();
        rebuild_from(to.path(), &foreign).unwrap();
        assert_eq!(let_go_of(to.path()).unwrap().rows, 2);
    }

    /// Issue 54: the app's workers write its record, so a worker taken by an
    /// escape could put a row of a gigabyte there for the panel (which reads
    /// every app's last rows) to read whole. No value longer than a record
    /// from elsewhere may hold is read: the read fails, saying so (before:
    /// the row came back whole).
    #[test]
    fn a_row_longer_than_a_record_may_hold_is_never_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = open(dir.path(), Durability::Process).unwrap();
        insert(&mut conn, [row(1)].iter()).unwrap();
        assert_eq!(read(dir.path(), 10).unwrap().len(), 1);
        let long = "x".repeat(crate::elsewhere::sqlite::MAX_CELL * 8);
        conn.execute("UPDATE runs SET reason = ?1", [&long]).unwrap();
        let e = read(dir.path(), 10).expect_err("a row too long to read");
        assert!(format!("{e:#}").contains("too big"), "{e:#}");
    }

    /// Issue 55: at `process` a durable row is committed on its call's own
    /// thread (a runtime's worker) only when the record's write lock is free
    /// at once; locked by another connection, the row is handed back at once
    /// — never slept on in SQLite's busy handler there (before: up to 5 s) —
    /// and the writer's thread commits it once the lock is let go.
    #[test]
    fn a_row_committed_on_the_calls_thread_never_waits_for_a_locked_record() {
        let dir = tempfile::tempdir().unwrap();
        let rec = Recorder::new(Durability::Process);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        // The record's connection is open (the first row is the writer's).
        rt.block_on(rec.write_durable(dir.path(), row(1))).unwrap();
        rt.block_on(rec.write_durable(dir.path(), row(2))).unwrap();
        let blocker = crate::sqlite::open(&dir.path().join(RUNS_FILE), crate::sqlite::read_write()).unwrap();
        blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
        let (_, conn) = rec.shared_of(dir.path()).unwrap();
        assert!(conn.lock().unwrap().conn.is_some(), "the record's connection is open");
        let handed = rec.commit_here(&conn, Box::new(row(3)));
        assert!(matches!(handed, Err(ref r) if r.request_id == "r3"), "handed back to go to the writer: {handed:?}");
        // The writer waits the lock out on its own thread.
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            blocker.execute_batch("COMMIT").unwrap();
        });
        rt.block_on(rec.write_durable(dir.path(), row(3))).unwrap();
        release.join().unwrap();
        let ids: Vec<String> = read(dir.path(), 10).unwrap().into_iter().map(|r| r.request_id).collect();
        assert_eq!(ids, ["r1", "r2", "r3"]);
        // Free again: committed here, as before.
        assert!(matches!(rec.commit_here(&conn, Box::new(row(4))), Ok(Ok(()))));
    }

    #[test]
    fn a_record_made_before_the_answered_by_column_gains_it_and_keeps_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        {
            let c = Connection::open(dir.path().join(RUNS_FILE)).unwrap();
            c.execute_batch(
                "CREATE TABLE runs (seq INTEGER PRIMARY KEY, time TEXT NOT NULL, request_id TEXT NOT NULL,
                 channel TEXT NOT NULL, caller TEXT NOT NULL, app TEXT NOT NULL, release TEXT NOT NULL,
                 route TEXT NOT NULL, effect TEXT NOT NULL, arguments_hash TEXT NOT NULL,
                 decision TEXT NOT NULL, reason TEXT NOT NULL, outcome TEXT NOT NULL, duration_ms REAL NOT NULL);
                 INSERT INTO runs VALUES (1, 't', 'r0', 'mcp', 'c', 'a', 'x', 'r', 'write', 'h', 'confirmed', '', 'ok', 1.0);",
            )
            .unwrap();
        }
        let old = read(dir.path(), 10).unwrap();
        assert_eq!(old[0].answered_by, "nobody", "read before the writer adds the column");
        let mut conn = open(dir.path(), Durability::Process).unwrap();
        insert(&mut conn, std::iter::once(&row(1))).unwrap();
        let rows = read(dir.path(), 10).unwrap();
        assert_eq!(rows.iter().map(|r| r.answered_by.as_str()).collect::<Vec<_>>(), ["nobody", "person"]);
    }

    #[test]
    fn every_row_sent_before_a_clean_stop_is_kept() {
        let d = tempfile::tempdir().unwrap();
        let rec = Recorder::new(Durability::Process);
        for i in 0..2000 {
            rec.write(d.path(), row(i));
        }
        drop(rec);
        let rows = read(d.path(), 10_000).unwrap();
        assert_eq!(rows.len(), 2000);
        assert_eq!(rows[1999].request_id, "r1999");
    }

    #[test]
    fn a_durable_row_is_on_disk_when_its_write_returns() {
        for durability in [Durability::Process, Durability::Power] {
            let d = tempfile::tempdir().unwrap();
            let rec = Recorder::new(durability);
            // A read's row waits to be gathered; the write's row does not wait
            // for it. At `power` the writer takes it along in the same commit;
            // at `process` the write's row is committed on this thread.
            rec.write(d.path(), row(1));
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(rec.write_durable(d.path(), row(2))).unwrap();
            // Read by another connection, with the writer still running.
            let ids: Vec<String> = read(d.path(), 10).unwrap().into_iter().map(|r| r.request_id).collect();
            match durability {
                Durability::Power => assert_eq!(ids, ["r1", "r2"]),
                // (The read's batch may have been committed meanwhile, on a slow machine.)
                Durability::Process => assert!(ids.iter().any(|i| i == "r2"), "committed here: {ids:?}"),
            }
            rec.flush();
            assert_eq!(read(d.path(), 10).unwrap().len(), 2);
            drop(rec);
        }
    }

    #[test]
    fn many_durable_rows_at_once_are_each_on_disk_when_their_write_returns() {
        let d = tempfile::tempdir().unwrap();
        let rec = std::sync::Arc::new(Recorder::new(Durability::Process));
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
        rt.block_on(async {
            let mut tasks = Vec::new();
            for i in 0..200 {
                let (rec, dir) = (rec.clone(), d.path().to_path_buf());
                tasks.push(tokio::spawn(async move {
                    rec.write_durable(&dir, row(i)).await.unwrap();
                    // This row is there now, whatever the others are doing.
                    let rows = read(&dir, 10_000).unwrap();
                    assert!(rows.iter().any(|r| r.request_id == format!("r{i}")), "row {i} is not on disk");
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        });
        assert_eq!(read(d.path(), 10_000).unwrap().len(), 200);
    }

    #[test]
    fn at_power_a_group_of_durable_rows_syncs_the_stores_log_once_and_at_process_never() {
        use std::sync::atomic::Ordering::Relaxed;
        let d = tempfile::tempdir().unwrap();
        // The app's store, a write committed to its log and not synced (NORMAL).
        let store = Connection::open(d.path().join("app.sqlite")).unwrap();
        store
            .execute_batch(
                "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0;
                 CREATE TABLE t (x); INSERT INTO t VALUES (1);",
            )
            .unwrap();
        let wal = d.path().join("app.sqlite-wal");
        assert!(wal.metadata().unwrap().len() > 0);
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
        let many = |durability: Durability| {
            let rec = std::sync::Arc::new(Recorder::new(durability));
            let before = GROUPS_SYNCED.load(Relaxed);
            rt.block_on(async {
                let tasks: Vec<_> = (0..200)
                    .map(|i| {
                        let (rec, dir) = (rec.clone(), d.path().to_path_buf());
                        tokio::spawn(async move { rec.write_durable(&dir, row(i)).await })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap().unwrap();
                }
            });
            GROUPS_SYNCED.load(Relaxed) - before
        };
        assert_eq!(many(Durability::Process), 0, "process: nothing is synced");
        let groups = many(Durability::Power);
        assert!((1..200).contains(&groups), "power: 200 writers shared {groups} syncs");
        // The sync is of the store's log: one that cannot be opened fails the rows waiting.
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o000)).unwrap();
        if std::fs::File::open(&wal).is_err() {
            let rec = Recorder::new(Durability::Power);
            let e = rt.block_on(rec.write_durable(d.path(), row(1000))).unwrap_err();
            assert!(format!("{e:#}").contains("app.sqlite-wal"), "{e:#}");
            assert!(rt.block_on(Recorder::new(Durability::Process).write_durable(d.path(), row(1001))).is_ok());
        }
        std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    /// At `power`, a write alone in waiting for its folder's sync syncs the
    /// logs on its own thread: it does not wake the record's writer for it,
    /// and wait to be woken (two wake-ups of a thread on an idle core).
    #[test]
    fn at_power_a_write_alone_syncs_its_folders_logs_on_its_own_thread() {
        let d = tempfile::tempdir().unwrap();
        Connection::open(d.path().join("app.sqlite"))
            .unwrap()
            .execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (x); INSERT INTO t VALUES (1);")
            .unwrap();
        let here = || SYNCED_HERE.with(|n| n.get());
        for flavor in ["multi-thread", "current-thread"] {
            let rt = match flavor {
                "multi-thread" => tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap(),
                _ => tokio::runtime::Builder::new_current_thread().build().unwrap(),
            };
            let rec = Recorder::new(Durability::Power);
            let before = here();
            rt.block_on(async {
                rec.synced(d.path()).await.unwrap();
                rec.synced(d.path()).await.unwrap();
            });
            assert_eq!(here() - before, 2, "{flavor}: each lone write synced on the caller's thread");
            // At `process`, nothing is synced.
            let before = here();
            rt.block_on(Recorder::new(Durability::Process).synced(d.path())).unwrap();
            assert_eq!(here(), before, "{flavor}: process");
        }
    }

    #[test]
    fn a_durable_row_whose_call_is_dropped_while_it_waits_is_still_recorded() {
        use std::future::Future as _;
        let d = tempfile::tempdir().unwrap();
        let rec = Recorder::new(Durability::Process);
        {
            let mut f = Box::pin(rec.write_durable(d.path(), row(7)));
            let mut cx = std::task::Context::from_waker(futures::task::noop_waker_ref());
            assert!(f.as_mut().poll(&mut cx).is_pending(), "it waits once before it commits");
        }
        rec.flush();
        let ids: Vec<String> = read(d.path(), 10).unwrap().into_iter().map(|r| r.request_id).collect();
        assert_eq!(ids, ["r7"]);
    }

    #[test]
    fn a_record_whose_writer_has_not_made_its_table_yet_reads_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        // What the writer leaves between creating the file and its table.
        Connection::open(dir.path().join(RUNS_FILE)).unwrap().execute_batch("PRAGMA journal_mode = WAL;").unwrap();
        assert!(read(dir.path(), 10).unwrap().is_empty());
    }

    #[test]
    fn a_record_that_cannot_be_written_is_reported_to_the_durable_writer() {
        let d = tempfile::tempdir().unwrap();
        // A file where the data folder should be: the record cannot be opened.
        let blocked = d.path().join("data");
        std::fs::write(&blocked, b"not a folder").unwrap();
        let rec = Recorder::new(Durability::Process);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let e = rt.block_on(rec.write_durable(&blocked, row(1))).unwrap_err();
        assert!(format!("{e:#}").contains("cannot create"), "{e:#}");
    }

    #[test]
    fn flush_waits_for_the_rows_already_sent() {
        let d = tempfile::tempdir().unwrap();
        let rec = Recorder::new(Durability::Process);
        rec.write(d.path(), row(1));
        rec.flush();
        assert_eq!(read(d.path(), 10).unwrap().len(), 1);
    }
}
