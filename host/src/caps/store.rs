//! The `store` capability: SQL over the app's own SQLite database.
//!
//! Every app has one database, `data/app.sqlite`, in WAL mode. A call gets a
//! [`CallStore`]: a pooled connection inside one transaction, in the mode its
//! route's effect allows. A SQLite authorizer, installed for every call, is the
//! rule that holds whatever SQL the guest sends:
//!
//! - in a `read` call only `SELECT` and reads of the app's tables compile
//!   (`query_only` is set too, as a second wall);
//! - in every call, `ATTACH`, `DETACH`, `PRAGMA`, transaction control,
//!   savepoints, temporary objects, virtual tables other than FTS5 and R*Tree,
//!   and any access to the host's `_autoapp*` tables are refused: the host owns
//!   the transaction, the file and how it is kept safe.
//!
//! A progress handler interrupts a statement that runs past the call's deadline
//! (epoch interruption cannot reach into host code).
//!
//! Many calls of one app run at once. Reads never wait for writes (WAL). A
//! write call takes the app's **write permit** before its transaction begins:
//! a fair (first come, first served) asynchronous semaphore of one, so a call
//! waiting its turn parks without holding a thread, and no call ever sleeps in
//! SQLite's busy handler waiting for another call of this process. Only
//! another process holding the database (the command line's `autoapp call`
//! beside a launcher) can still make `BEGIN IMMEDIATE` busy; then the call
//! retries asynchronously until its deadline. A call whose deadline passes
//! while it waits hears `conflict`: "the app is busy; try again".
//!
//! **Group commit.** A write call that ends while other writers wait for the
//! permit, or while other write calls of the app are on their way to it
//! (begun, before their first statement: [`CallStore::on_its_way`]), does
//! not commit: it parks its open transaction ([`Group`]) and waits. The next
//! writer goes on in that transaction inside a savepoint of its own (its
//! failure undoes only its savepoint), and so on, until a call ends with
//! nobody waiting or on the way, the group is [`GROUP_WINDOW`] old or
//! [`GROUP_MOST`] calls long, or the group's closer (a task that queued for
//! the permit when the group was first parked) has its turn: then one
//! `COMMIT` ends them all, each call's record row inserted just before it,
//! and each call is answered. One writer alone commits at once, as before.
//! A closer whose group waits only for calls on their way does not hold
//! the permit: it sleeps until the window ends, or until one of them ends
//! without writing.
//! A group left with nobody to commit it (its closer gone with a stopped
//! server's runtime) is committed by a call still waiting in it, or else by
//! the store's once-a-second checkpoint.
//! A call that goes away while it waits for its group's commit (its
//! future dropped) still has its row when its write is kept: the commit
//! hands each member whose row could not go in its [`Step`] back, owed,
//! and a step nobody takes back hands its row on by itself.
//! A write is acknowledged only after the commit that holds it; a call
//! whose statement made SQLite end the transaction itself (`OR ROLLBACK`,
//! an interrupted write, a full disk) takes the calls before it in its group
//! with it: they hear that nothing they wrote was kept.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::limits::Limit;
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, ErrorCode, OpenFlags};

use crate::bindings::AppError;
use crate::bindings::app::autoapp::app::store::{Host, Rows, Value};

/// The app's database file inside its data folder.
pub const STORE_FILE: &str = "app.sqlite";

/// The most rows one query may return; guards the host's and the guest's memory.
pub const MAX_ROWS: usize = 10_000;

/// The most bytes of values one query may return.
pub const MAX_RESULT_BYTES: usize = 16 << 20;

/// Connections kept open per app between calls.
const POOL_SIZE: usize = 8;

/// Prepared statements each connection keeps for reuse.
const STATEMENT_CACHE: usize = 32;

/// What a write call hears when its deadline passed while other writes of
/// the same app went first.
pub const BUSY: &str = "the app is busy; try again";

/// What a call hears when SQLite ended its transaction by itself after one
/// of its statements failed: what it sends next would run outside any
/// transaction, so it is refused.
const LOST: &str = "the store undid this call's transaction after a statement failed \
                    (a conflict under OR ROLLBACK, an interrupted write, a full disk); nothing it wrote is kept";

/// What a call in a group hears when its write was undone with the group's
/// transaction: another call's statement made SQLite end it, or the group
/// was lost before its commit.
const GROUP_LOST: &str = "the store undid the transaction this call's writes shared with other writes of the app \
                          (one of them failed in a way that ends a transaction); nothing it wrote is kept; try again";

/// A write call hands its open transaction on to the next writer only while
/// the group is younger than this: it bounds how long an answer waits for
/// the writes that came after it (at most this, plus the run of the last
/// call that joined).
const GROUP_WINDOW: Duration = Duration::from_millis(2);

/// The most calls one group commit ends.
const GROUP_MOST: usize = 64;

/// How often a call waiting for its group's commit looks whether the group
/// was left with nobody to commit it.
const ORPHAN_CHECK: Duration = Duration::from_millis(100);

/// The longest a read may wait in SQLite's busy handler. In WAL mode a reader
/// is only ever kept waiting by another process's recovery or exclusive lock,
/// for a moment; this bounds how long such a moment can hold a thread.
const READ_BUSY_MAX: Duration = Duration::from_millis(200);

/// How long a write call waits before it tries `BEGIN IMMEDIATE` again while
/// another process holds the write lock (doubled each time up to the most).
const RETRY_FIRST: Duration = Duration::from_millis(1);
const RETRY_MOST: Duration = Duration::from_millis(25);

/// How long the host's own migration waits for another process's writes.
const MIGRATE_BUSY: Duration = Duration::from_secs(10);

/// SQLite virtual-machine steps between two deadline checks.
const PROGRESS_STEPS: i32 = 10_000;

/// The length of the write-ahead log, in pages, at which the writer that
/// reaches it checkpoints the log ([`AppStore::checkpoint_soon`]): four
/// times SQLite's own default (about 16 MiB of 4 KiB pages), moved off the
/// calls. Each checkpoint syncs both logs and both databases (the store and
/// the record beside it); at SQLite's 1,000 pages that was 0.12 `fsync` a
/// write of `notes.add`, at 4,000 (and with the log started again after
/// each checkpoint, [`AppStore::checkpoint_soon`]) it is 0.008, under the
/// native peer's 0.016 (docs/performance.md). The log stays well under
/// `journal_size_limit`.
const CHECKPOINT_PAGES: u64 = 4000;

/// A migration comes from elsewhere (a backup's release, another person's
/// package): it runs under the rules a write call runs under ([`authorize`]:
/// no ATTACH, PRAGMA, transaction control or temporary object, nothing of
/// the host's tables, nothing of another database — so no `VACUUM INTO`,
/// which attaches its target), and under these bounds.
///
/// The longest SQL text of one migration.
pub const MAX_MIGRATION_SQL: usize = 1 << 20;
/// The longest string or blob a migration may make at activation (a value
/// grown without end exhausts memory).
const MIGRATE_MAX_LENGTH: i32 = 256 << 20;
/// The same on the empty database a restore makes its expected schema on.
const SCHEMA_MAX_LENGTH: i32 = 1 << 20;
/// How long an activation's migrations may run (a statement that never ends
/// is interrupted).
const MIGRATE_BUDGET: Duration = Duration::from_secs(120);
/// How long a release's migrations may run on an empty database.
pub const SCHEMA_BUDGET: Duration = Duration::from_secs(2);
/// The most pages (of 4 KiB: 64 MiB) the empty database a release's
/// migrations are checked on may grow to: a schema is kilobytes.
const SCHEMA_MAX_PAGES: u32 = 16_384;

/// Tables of the host inside the app's database: never visible to the guest.
const HOST_TABLE_PREFIX: &str = "_autoapp";

/// The table that records which migrations were applied.
macro_rules! migrations_table {
    () => {
        "_autoapp_migrations"
    };
}
const MIGRATIONS_TABLE: &str = migrations_table!();

/// The host's own statements around each call's transaction, kept prepared
/// in the connection's statement cache (parsed once per connection, not
/// once per call: a tenth of a write's SQLite time, docs/performance.md).
/// They are prepared while the authorizer lets the host do anything, so a
/// guest's statement of the same text must never be taken from the cache
/// ([`guest_statement`]).
const BEGIN_READ: &str = "BEGIN DEFERRED";
const BEGIN_WRITE: &str = "BEGIN IMMEDIATE";
/// A write statement that changes nothing: it takes `main`'s write lock.
const LOCK_MAIN: &str = concat!("DELETE FROM main.", migrations_table!(), " WHERE 0");
const COMMIT: &str = "COMMIT";
const ROLLBACK: &str = "ROLLBACK";
/// A call that joins a group's transaction runs inside this savepoint.
const SAVEPOINT: &str = "SAVEPOINT autoapp_call";
const RELEASE: &str = "RELEASE autoapp_call";
const ROLLBACK_TO: &str = "ROLLBACK TO autoapp_call";
const HOST_STATEMENTS: [&str; 8] =
    [BEGIN_READ, BEGIN_WRITE, LOCK_MAIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE, ROLLBACK_TO];

/// Runs one of [`HOST_STATEMENTS`] from the connection's cache.
fn run_host(conn: &Connection, sql: &'static str) -> rusqlite::Result<()> {
    debug_assert!(HOST_STATEMENTS.contains(&sql));
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// A database the host attaches beside `main` on the store's write
/// connections, for its own statements only: the record of the calls
/// (`gate::record`), so that a write and the row that records it are
/// committed in one transaction. A guest cannot name it: the authorizer lets
/// a call use `main` alone.
#[derive(Debug, Clone)]
pub struct Beside {
    /// The schema name it is attached as.
    pub name: &'static str,
    /// Its file.
    pub path: PathBuf,
    /// Makes the file, and what the host keeps in it, before it is attached.
    pub make: fn(&Path) -> anyhow::Result<()>,
    /// The text of the host's statement kept in the connection's statement
    /// cache. A guest's statement of the same text is prepared afresh (and
    /// so authorized), never taken from the cache.
    pub statement: &'static str,
}

/// A statement of the host's, run in a call's transaction just before the
/// commit that ends it ([`CallStore::finish_with`]); it owns what it writes,
/// because the call that commits a group runs the steps of every call in it.
///
/// A step whose statement could not run (the database beside was busy)
/// while the write it belongs to was committed is **owed**: what it would
/// have written must reach its database another way. The call that waits
/// for the commit takes it back and does that itself
/// ([`taken_back`](Step::taken_back)); a call that went away while it waited
/// in a group (its client disconnected, its future dropped) is not there to,
/// so an owed step that is dropped without being taken back hands what it
/// holds on by itself ([`owed`](Step::owed); `gate::record`'s step gives its
/// row to the record's writer). This is how every kept write has its row.
pub trait Step: Send {
    /// Runs the statement on `conn`, inside the transaction about to commit.
    fn run(&mut self, conn: &Connection) -> rusqlite::Result<()>;
    /// The write was committed without this step's statement: from now on,
    /// dropping the step without [`taken_back`](Step::taken_back) hands what
    /// it holds on its own way.
    fn owed(&mut self) {}
    /// The call heard that its step did not go in, and writes what it holds
    /// itself: dropping the step does nothing more.
    fn taken_back(&mut self) {}
}

/// A statement with nothing to hand on (tests, and any step whose loss is
/// the caller's to notice).
impl<F: FnMut(&Connection) -> rusqlite::Result<()> + Send> Step for F {
    fn run(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        self(conn)
    }
}

/// A [`Step`], owned.
pub type HostStep = Box<dyn Step>;

/// A call whose writes are in a group's open transaction, waiting for the
/// commit: its row's step, and where it hears whether the commit held (and
/// whether its row went in with it).
struct Member {
    step: Option<HostStep>,
    told: tokio::sync::oneshot::Sender<Result<Heard, String>>,
}

/// What a member hears when its group committed: whether its step went in
/// with the commit, and if not, the step itself, owed ([`Step::owed`]): the
/// member takes it back, or, gone, drops it and the step hands its row on.
struct Heard {
    beside: bool,
    owed: Option<HostStep>,
}

/// The open transaction of a group of write calls, parked between two of
/// them (see the module's doc). Only the holder of the write permit takes
/// or parks it.
struct Group {
    conn: Pooled,
    members: Vec<Member>,
    opened: Instant,
}

/// The group a running call has joined: the calls in it before this one.
struct Joined {
    members: Vec<Member>,
    opened: Instant,
}

/// What a call may do with the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    ReadOnly,
    ReadWrite,
}

/// One app's database and its pool of connections.
pub struct AppStore {
    path: PathBuf,
    /// Connections kept between calls, one pool per mode: a connection keeps
    /// the statements it prepared, and a statement is only ever reused under
    /// the rules (authorizer, `query_only`) it was checked under.
    read_pool: Mutex<Vec<Pooled>>,
    write_pool: Mutex<Vec<Pooled>>,
    /// Commits so far, and how many of them the last checkpoint saw.
    commits: AtomicU64,
    checkpointed: AtomicU64,
    /// The write-ahead log's length in pages after the last commit (told by
    /// SQLite's WAL hook), and the length at which the writer that commits
    /// next checkpoints it ([`CHECKPOINT_PAGES`]).
    wal_pages: Arc<AtomicU64>,
    checkpoint_at: AtomicU64,
    /// What is attached beside `main` on write connections.
    beside: Option<Beside>,
    /// Calls waiting for the write permit right now.
    queued: std::sync::atomic::AtomicUsize,
    /// Write calls on their way to the permit ([`CallStore::on_its_way`]).
    coming: std::sync::atomic::AtomicUsize,
    /// Told when a call on its way ends without asking for the permit: a
    /// closer waiting for it need not wait out its group's window.
    gone: tokio::sync::Notify,
    /// The connection `checkpoint` uses, opened at its first use.
    checkpointer: Mutex<Option<Pooled>>,
    /// The write permit: one writer at a time, taken in arrival order before
    /// a write transaction begins (tokio's semaphore is fair).
    writer: Arc<tokio::sync::Semaphore>,
    /// A group's transaction waiting for the next writer, or its closer.
    parked: Mutex<Option<Group>>,
    /// How long a group may go on taking writers ([`GROUP_WINDOW`]).
    group_window: Duration,
}

/// A connection and the switch of its authorizer.
struct Pooled {
    conn: Connection,
    rules: Arc<Rules>,
}

/// What a connection's authorizer consults. The authorizer is installed once,
/// when the connection is opened (installing one expires every prepared
/// statement, so doing it per call would throw the statement cache away). It
/// applies the rules of its pool's mode to everything prepared while a call
/// has the connection; between calls the host runs its own statements
/// (BEGIN, COMMIT, migrations), which never enter the statement cache.
struct Rules {
    /// The host, not a call, is using the connection.
    host: AtomicBool,
    /// Why the authorizer last refused a statement of the call.
    denial: Mutex<Option<String>>,
}

impl AppStore {
    /// The store in `data_dir` (its folder created if needed). The database is
    /// opened, and created if needed, by the first use of a connection.
    pub fn open(data_dir: &Path) -> anyhow::Result<Arc<AppStore>> {
        AppStore::open_with(data_dir, None)
    }

    /// The store in `data_dir`, with `beside` attached to its write
    /// connections when it is given.
    pub fn open_with(data_dir: &Path, beside: Option<Beside>) -> anyhow::Result<Arc<AppStore>> {
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("cannot create the data folder {}", data_dir.display()))?;
        let store = Arc::new(AppStore {
            path: data_dir.join(STORE_FILE),
            read_pool: Mutex::new(Vec::new()),
            write_pool: Mutex::new(Vec::new()),
            commits: AtomicU64::new(0),
            checkpointed: AtomicU64::new(0),
            wal_pages: Arc::new(AtomicU64::new(0)),
            checkpoint_at: AtomicU64::new(CHECKPOINT_PAGES),
            beside,
            queued: std::sync::atomic::AtomicUsize::new(0),
            coming: std::sync::atomic::AtomicUsize::new(0),
            gone: tokio::sync::Notify::new(),
            checkpointer: Mutex::new(None),
            writer: Arc::new(tokio::sync::Semaphore::new(1)),
            parked: Mutex::new(None),
            group_window: GROUP_WINDOW,
        });
        // No connection yet: the first call that uses the store opens one.
        Ok(store)
    }

    /// A new connection for calls of `mode`.
    fn connect(&self, mode: Mode) -> anyhow::Result<Pooled> {
        let mut conn = crate::sqlite::open(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | OpenFlags::SQLITE_OPEN_NOFOLLOW,
        )
        .with_context(|| format!("cannot open the store {}", self.path.display()))?;
        // WAL with synchronous=NORMAL: a committed call survives the process
        // crashing; an OS crash may lose the last few commits, never corrupt.
        // No call checkpoints the log itself (that would put a copy of many
        // pages and an fsync inside somebody's call): `checkpoint` does, off
        // the calls' path (once a second, and `checkpoint_soon` when a write
        // makes the log long), and closing the last connection does.
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA wal_autocheckpoint = 0;
             PRAGMA journal_size_limit = 67108864;
             PRAGMA synchronous = NORMAL;
             PRAGMA foreign_keys = ON;
             PRAGMA trusted_schema = OFF;",
        )
        .context("cannot configure the store")?;
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)?;
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, true)?;
        // A read connection stays read-only for its whole life: the second
        // wall behind the authorizer.
        conn.pragma_update(None, "query_only", mode == Mode::ReadOnly)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        if mode == Mode::ReadWrite {
            if let Some(b) = &self.beside {
                let dir = self.path.parent().unwrap_or(Path::new("."));
                (b.make)(dir)?;
                let path = b.path.to_str().context("the record's path is not UTF-8")?;
                conn.execute(&format!("ATTACH DATABASE ?1 AS {}", b.name), [path])
                    .with_context(|| format!("cannot attach {}", b.path.display()))?;
                // `synchronous` is each database's own: the same as `main`'s.
                conn.execute_batch(&format!("PRAGMA {}.synchronous = NORMAL", b.name))?;
            }
            // Set after `wal_autocheckpoint`, which would replace it. The
            // longer of the two logs decides (`main`'s and the one beside).
            let pages = self.wal_pages.clone();
            conn.wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, n: std::ffi::c_int| {
                let n = u64::try_from(n).unwrap_or(0);
                if wal.name() == c"main" {
                    pages.store(n, Ordering::Release);
                } else {
                    pages.fetch_max(n, Ordering::AcqRel);
                }
                Ok(())
            }))?;
        }
        let rules = Arc::new(Rules { host: AtomicBool::new(true), denial: Mutex::default() });
        {
            let rules = rules.clone();
            conn.authorizer(Some(move |ctx: AuthContext<'_>| {
                if rules.host.load(Ordering::Acquire) {
                    return Authorization::Allow;
                }
                match authorize(mode, &ctx) {
                    Ok(()) => Authorization::Allow,
                    Err(why) => {
                        *rules.denial.lock().expect("denial") = Some(why);
                        Authorization::Deny
                    }
                }
            }))?;
        }
        Ok(Pooled { conn, rules })
    }

    fn pool(&self, mode: Mode) -> &Mutex<Vec<Pooled>> {
        match mode {
            Mode::ReadOnly => &self.read_pool,
            Mode::ReadWrite => &self.write_pool,
        }
    }

    fn take(&self, mode: Mode) -> anyhow::Result<Pooled> {
        let pooled = self.pool(mode).lock().expect("store pool").pop();
        match pooled {
            Some(c) => Ok(c),
            None => self.connect(mode),
        }
    }

    fn put_back(&self, mode: Mode, conn: Pooled) {
        let mut pool = self.pool(mode).lock().expect("store pool");
        if pool.len() < POOL_SIZE {
            pool.push(conn);
        }
    }

    /// Copies what calls committed since the last checkpoint from the write-
    /// ahead log into the database (PASSIVE: it never waits for, nor blocks,
    /// a call). The host runs it on its own thread once a second.
    ///
    /// First it commits a group left parked with nobody to commit it (its
    /// calls and its closer gone with a server that stopped): otherwise its
    /// transaction would hold the database's write lock, and keep every
    /// other process's write waiting, until the app's next write.
    pub fn checkpoint(&self) -> anyhow::Result<()> {
        self.commit_orphaned();
        self.checkpoint_passive()
    }

    /// Commits the parked group when nobody holds or waits for the write
    /// permit: then no call of the group is running and no writer is about
    /// to take it (one that comes just after begins a transaction of its
    /// own).
    fn commit_orphaned(&self) {
        if self.parked.lock().expect("group").is_none() {
            return;
        }
        if let Ok(_permit) = self.writer.clone().try_acquire_owned() {
            self.commit_parked();
        }
    }

    /// [`checkpoint`](Self::checkpoint), one PASSIVE step over both logs.
    fn checkpoint_passive(&self) -> anyhow::Result<()> {
        let commits = self.commits.load(Ordering::Acquire);
        if commits == self.checkpointed.load(Ordering::Acquire) {
            self.checkpoint_at.store(CHECKPOINT_PAGES, Ordering::Release);
            return Ok(());
        }
        let mut slot = self.checkpointer.lock().expect("checkpointer");
        if slot.is_none() {
            *slot = Some(self.connect(Mode::ReadWrite)?);
        }
        let conn = &slot.as_ref().expect("just opened").conn;
        let mut schemas = vec!["main"];
        schemas.extend(self.beside.as_ref().map(|b| b.name));
        let (mut busy, mut logged, mut copied) = (0i64, 0i64, 0i64);
        for schema in schemas {
            let (b, l, c): (i64, i64, i64) =
                conn.query_row(&format!("PRAGMA {schema}.wal_checkpoint(PASSIVE)"), [], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })?;
            busy |= b;
            if l - c >= logged - copied {
                (logged, copied) = (l, c);
            }
        }
        // All of the log is in the database: nothing left to do until the
        // next commit, which starts the log again from its beginning.
        let all = busy == 0 && logged == copied;
        if all {
            self.checkpointed.store(commits, Ordering::Release);
            self.checkpoint_at.store(CHECKPOINT_PAGES, Ordering::Release);
        } else {
            // A reader still needs the log's end: try again once it has grown
            // as much again, not at every commit.
            self.checkpoint_at.store(u64::try_from(logged).unwrap_or(0) + CHECKPOINT_PAGES, Ordering::Release);
        }
        Ok(())
    }

    /// Whether the log has grown to where its next writer checkpoints it.
    fn log_is_long(&self) -> bool {
        self.wal_pages.load(Ordering::Acquire) >= self.checkpoint_at.load(Ordering::Acquire)
    }

    /// Checkpoints the logs on a blocking thread, off the calls' path, in
    /// two steps. First beside the writers: most of the log is copied and
    /// synced while they go on. But SQLite starts a log again from its
    /// beginning only for a writer whose transaction began when all of the
    /// log was already copied, and while writes keep coming, one is always
    /// in a transaction that began before the copy ended, even when the
    /// copy reached the log's end: the log would grow for as long as writes
    /// keep coming (1 GB in 9 s of writes, measured), and every write past
    /// [`CHECKPOINT_PAGES`] would start another checkpoint (43 in 5,000
    /// writes one after another, measured). So then the write permit is
    /// taken (in turn, after the writers already waiting) and what was
    /// logged since is copied too: writers wait for that short part only,
    /// and the next one starts the log again from its beginning. The log
    /// stays near [`CHECKPOINT_PAGES`]. Without a runtime to run it on, the
    /// background checkpoint does the first step.
    fn checkpoint_soon(self: Arc<Self>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        // Not again by the next writer while this one runs.
        self.checkpoint_at.store(u64::MAX, Ordering::Release);
        rt.spawn_blocking(move || {
            let done = self.checkpoint_passive().and_then(|()| {
                let _permit = futures::executor::block_on(self.writer.clone().acquire_owned())
                    .context("the store's write permit is gone")?;
                self.commit_parked();
                self.checkpoint_passive()
            });
            if let Err(e) = done {
                self.checkpoint_at.store(CHECKPOINT_PAGES, Ordering::Release);
                tracing::warn!("cannot checkpoint a store: {e:#}");
            }
        });
    }

    /// Groups that stay open as long as a test needs (not cut by time): for
    /// tests that set up a group step by step. Before the store is shared.
    #[cfg(test)]
    pub(crate) fn keep_groups_open(self: &mut Arc<Self>) {
        Arc::get_mut(self).expect("not shared yet").group_window = Duration::from_secs(600);
    }

    /// The store of one call in `mode`. Nothing is opened yet: the call's
    /// connection and transaction begin when the guest first uses the store,
    /// so a call that never touches it costs no SQLite work at all.
    pub fn begin(self: &Arc<Self>, mode: Mode, deadline: Instant) -> anyhow::Result<CallStore> {
        Ok(CallStore {
            conn: None,
            joined: None,
            began: None,
            permit: None,
            home: self.clone(),
            mode,
            deadline,
            coming: false,
            state: State::Unused,
            waited_out: false,
            waited: Duration::ZERO,
        })
    }

    /// The app's write permit, waited for asynchronously in arrival order
    /// until `deadline`; `None` when the deadline came first.
    /// A call counted on its way (`coming`) is counted as waiting from here.
    async fn write_permit(&self, deadline: Instant, coming: &mut bool) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let wait = self.writer.clone().acquire_owned();
        // Counted while it waits, however the wait ends (a call dropped
        // while it waits, its client gone, is no longer waiting).
        struct Queued<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Queued<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.queued.fetch_add(1, Ordering::AcqRel);
        let queued = Queued(&self.queued);
        if std::mem::take(coming) {
            self.coming.fetch_sub(1, Ordering::AcqRel);
        }
        let waited = tokio::time::timeout_at(deadline.into(), wait).await;
        drop(queued);
        match waited {
            Ok(Ok(permit)) => Some(permit),
            // The semaphore is never closed; a timeout is the only other way out.
            _ => None,
        }
    }

    /// A pooled connection inside a transaction of `mode`, with the authorizer
    /// and the deadline's progress handler installed. A write transaction is
    /// begun only by the holder of the write permit; if another process holds
    /// the database's write lock, it retries without blocking the thread.
    async fn open_transaction(&self, mode: Mode, deadline: Instant) -> anyhow::Result<Pooled> {
        let mut p = self.take(mode)?;
        match mode {
            Mode::ReadOnly => {
                let busy = deadline.saturating_duration_since(Instant::now()).min(READ_BUSY_MAX);
                p.conn.busy_timeout(busy)?;
                run_host(&p.conn, BEGIN_READ)?;
            }
            Mode::ReadWrite => {
                // No busy handler: waiting happens here, asynchronously.
                p.conn.busy_timeout(Duration::ZERO)?;
                let mut pause = RETRY_FIRST;
                loop {
                    match begin_write(&p.conn, self.beside.is_some()) {
                        Ok(()) => break,
                        Err(e) if is_busy(&e) && Instant::now() + pause < deadline => {
                            tokio::time::sleep(pause).await;
                            pause = (pause * 2).min(RETRY_MOST);
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        hand_to_call(&mut p, deadline)?;
        Ok(p)
    }

    /// The parked group's transaction, for the holder of the write permit
    /// whose call goes on in it, inside a savepoint of its own.
    fn join(&self, g: Group, deadline: Instant) -> anyhow::Result<(Pooled, Joined)> {
        let Group { conn: mut p, members, opened } = g;
        if let Err(e) = run_host(&p.conn, SAVEPOINT).and_then(|()| hand_to_call(&mut p, deadline)) {
            // Cannot go on in it: commit what it holds, and say why this call cannot begin.
            let _ = self.commit_group(p, members, None);
            return Err(e.into());
        }
        Ok((p, Joined { members, opened }))
    }

    /// Commits the parked group, if there is one. The caller holds the
    /// write permit (the group's closer, a checkpoint's last step, a
    /// migration).
    fn commit_parked(&self) {
        let parked = self.parked.lock().expect("group").take();
        if let Some(g) = parked
            && let Err(e) = self.commit_group(g.conn, g.members, None)
        {
            tracing::warn!("cannot commit a group of writes: {e:#}");
        }
    }

    /// Queues for the write permit behind the writers waiting now; at its
    /// turn, leaves a parked group to the writers still waiting (and queues
    /// again) while the group may grow, and commits it otherwise: a group
    /// whose next writer gave up its turn (its deadline, its connection
    /// closed) is never left open, and a closer does not cut a group short.
    /// While the group waits only for writers on their way, the closer lets
    /// the permit go and sleeps until the group's window ends (or one of
    /// them ends without writing), so they take the permit straight away.
    fn close_later(self: &Arc<Self>, rt: &tokio::runtime::Handle) {
        let store = self.clone();
        rt.spawn(async move {
            while let Ok(permit) = store.writer.clone().acquire_owned().await {
                let grows = store
                    .parked
                    .lock()
                    .expect("group")
                    .as_ref()
                    .map(|g| (store.may_grow(&g.members, g.opened), g.opened));
                let opened = match grows {
                    Some((true, opened)) => opened,
                    Some((false, _)) => return store.commit_parked(),
                    None => return,
                };
                drop(permit);
                if store.queued.load(Ordering::Acquire) > 0 {
                    // The waiters go first (one counted may not be queued yet).
                    tokio::task::yield_now().await;
                } else {
                    let end = opened + store.group_window;
                    tokio::select! {
                        () = tokio::time::sleep_until(end.into()) => {}
                        () = store.gone.notified() => {}
                    }
                }
            }
        });
    }

    /// Whether a group of `members` opened at `opened` may be handed on to
    /// a writer waiting now, or on its way.
    fn may_grow(&self, members: &[Member], opened: Instant) -> bool {
        (self.queued.load(Ordering::Acquire) > 0 || self.coming.load(Ordering::Acquire) > 0)
            && members.len() + 1 < GROUP_MOST
            && opened.elapsed() < self.group_window
    }

    /// Ends a group's transaction: the host's steps of its calls (their
    /// record rows, into the database beside) and then `own`, then one
    /// `COMMIT`; tells each member how it went. Answers whether `own` went
    /// in. The caller holds the write permit, and lets it go after.
    fn commit_group(&self, p: Pooled, mut members: Vec<Member>, own: Option<HostStep>) -> anyhow::Result<bool> {
        // Busy: the record's own writer is committing; the rows go its way then.
        let mut beside = self.beside.is_some();
        let mut step = |s: &mut Option<HostStep>| -> bool {
            let Some(s) = s.as_mut().filter(|_| beside) else { return false };
            match s.run(&p.conn) {
                Ok(()) => true,
                Err(e) => {
                    if !is_busy(&e) {
                        tracing::warn!("cannot record a call with its write: {e}");
                    }
                    beside = false;
                    false
                }
            }
        };
        let went: Vec<bool> = members.iter_mut().map(|m| step(&mut m.step)).collect();
        let mut own = own;
        let own = step(&mut own);
        match run_host(&p.conn, COMMIT) {
            Ok(()) => {
                self.commits.fetch_add(1, Ordering::AcqRel);
                self.put_back(Mode::ReadWrite, p);
                for (m, went) in members.into_iter().zip(went) {
                    // A step left out of the commit is owed. Its member may be
                    // gone (its future dropped while it waited): then the send
                    // fails, or the answer is dropped unread, and either way
                    // the owed step, dropped, hands its row on.
                    let owed = m.step.filter(|_| !went).map(|mut s| {
                        s.owed();
                        s
                    });
                    let _ = m.told.send(Ok(Heard { beside: went, owed }));
                }
                Ok(own)
            }
            Err(e) => {
                // Make sure nothing half-done survives, then drop the connection.
                let _ = run_host(&p.conn, ROLLBACK);
                let why = format!("cannot commit the call's writes; nothing it wrote was kept: {e}");
                for m in members {
                    let _ = m.told.send(Err(why.clone()));
                }
                Err(e).context("cannot commit the call's writes; nothing it wrote was kept")
            }
        }
    }

    /// The migrations already applied, in order.
    pub fn applied_migrations(&self) -> anyhow::Result<Vec<Applied>> {
        let conn = self.take(Mode::ReadWrite)?;
        let result = read_applied(&conn.conn);
        self.put_back(Mode::ReadWrite, conn);
        result
    }

    /// Applies `migrations` after the ones already applied, all in one
    /// transaction: either every new migration is applied or none is.
    /// Refuses when the applied ones are not a prefix of `migrations`.
    pub fn migrate(&self, migrations: &[Migration]) -> anyhow::Result<usize> {
        // The host's writes take their turn like a call's. This runs on a
        // thread that may block (the command line, or a blocking task).
        let _permit = futures::executor::block_on(self.writer.clone().acquire_owned())
            .context("the store's write permit is gone")?;
        self.commit_parked();
        let mut conn = self.take(Mode::ReadWrite)?;
        conn.conn.busy_timeout(MIGRATE_BUSY)?;
        check_sizes(migrations)?;
        let deadline = Instant::now() + MIGRATE_BUDGET;
        conn.conn.progress_handler(PROGRESS_STEPS, Some(move || Instant::now() >= deadline))?;
        let length = conn.conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, MIGRATE_MAX_LENGTH)?;
        let result = (|| {
            let conn = &mut conn;
            let tx = conn.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            tx.execute_batch(&migrations_table())?;
            let applied = read_applied(&tx)?;
            let wanted = hashed(migrations);
            check_forward(&applied, &wanted)?;
            let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
            for (i, (m, a)) in migrations.iter().zip(&wanted).enumerate().skip(applied.len()) {
                // The migration under the rules of a write call; the host's own row after it.
                conn.rules.host.store(false, Ordering::Release);
                let ran = tx.execute_batch(&m.sql);
                conn.rules.host.store(true, Ordering::Release);
                let why = conn.rules.denial.lock().expect("denial").take();
                ran.map_err(|e| guarded_error(e, why, MIGRATE_BUDGET))
                    .with_context(|| format!("migration {} failed", crate::elsewhere::text::terminal(&m.name)))?;
                tx.execute(
                    &format!("INSERT INTO {MIGRATIONS_TABLE} (seq, name, sha256, applied_at) VALUES (?1, ?2, ?3, ?4)"),
                    rusqlite::params![i as i64 + 1, m.name, a.sha256, now],
                )?;
            }
            tx.commit()?;
            self.commits.fetch_add(1, Ordering::AcqRel);
            Ok(wanted.len() - applied.len())
        })();
        let reset = conn
            .conn
            .progress_handler(0, None::<fn() -> bool>)
            .and_then(|()| conn.conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, length));
        if reset.is_ok() {
            self.put_back(Mode::ReadWrite, conn);
        }
        result
    }
}

/// Whether the connection's open transaction holds a deferred foreign-key
/// violation (SQLite checks those only at `COMMIT`). When SQLite cannot
/// tell, it is taken as violated: the call then commits alone.
fn deferred_violations(conn: &Connection) -> bool {
    let (mut now, mut most) = (0, 0);
    // SAFETY: the handle is `conn`'s own open database, used on this thread
    // while `conn` is borrowed; `sqlite3_db_status` only reads one of its
    // counters into the two integers given.
    #[allow(unsafe_code)]
    let rc = unsafe {
        rusqlite::ffi::sqlite3_db_status(
            conn.handle(),
            rusqlite::ffi::SQLITE_DBSTATUS_DEFERRED_FKS,
            &mut now,
            &mut most,
            0,
        )
    };
    rc != rusqlite::ffi::SQLITE_OK || now != 0
}

/// Gives a connection inside a transaction to a call: the deadline's
/// progress handler installed, and from here on what is prepared on it is
/// the guest's.
fn hand_to_call(p: &mut Pooled, deadline: Instant) -> rusqlite::Result<()> {
    p.conn.progress_handler(PROGRESS_STEPS, Some(move || Instant::now() >= deadline))?;
    p.rules.denial.lock().expect("denial").take();
    p.rules.host.store(false, Ordering::Release);
    Ok(())
}

/// Begins a write transaction on `conn`, holding `main`'s write lock from
/// the start (as `BEGIN IMMEDIATE`), but not the lock of a database attached
/// beside it: `BEGIN IMMEDIATE` would take every attached database's too, and
/// hold the record's for as long as the call runs, keeping its writer (and
/// the person's actions) waiting. The record's lock is taken at the end, for
/// the row ([`CallStore::finish_with`]). A store without the host's table
/// (never migrated) begins as `BEGIN IMMEDIATE`.
fn begin_write(conn: &Connection, beside: bool) -> rusqlite::Result<()> {
    if !beside {
        return run_host(conn, BEGIN_WRITE);
    }
    run_host(conn, BEGIN_READ)?;
    match run_host(conn, LOCK_MAIN) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = run_host(conn, ROLLBACK);
            if is_busy(&e) { Err(e) } else { run_host(conn, BEGIN_WRITE) }
        }
    }
}

/// The host's table of applied migrations, as `migrate` makes it (the same
/// text: SQLite keeps it in the schema, which a restore compares).
fn migrations_table() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (
                    seq INTEGER PRIMARY KEY, name TEXT NOT NULL, sha256 TEXT NOT NULL,
                    applied_at TEXT NOT NULL)"
    )
}

/// The schema a store has when `migrations` (and nothing else) made it: the
/// host's table of applied migrations, then each migration applied, to an
/// empty database in memory. A store from elsewhere (a restored backup's)
/// must hold exactly this.
///
/// The migrations came from elsewhere: they run inside one transaction,
/// under the rules and bounds of [`MAX_MIGRATION_SQL`] (the authorizer of a
/// write call, [`SCHEMA_BUDGET`], [`SCHEMA_MAX_LENGTH`], [`SCHEMA_MAX_PAGES`]).
pub fn schema_made_by(migrations: &[Migration]) -> anyhow::Result<Vec<crate::elsewhere::sqlite::Object>> {
    check_sizes(migrations)?;
    let mut conn = crate::sqlite::in_memory()?;
    // The database lives in memory, in the process that checks it (the
    // launcher, for the panel's Install): it may hold SCHEMA_MAX_PAGES and no
    // more, and what SQLite sorts or keeps aside goes to files, not memory
    // (issue 51: a migration piling up rows for its 2 s could take gigabytes).
    conn.execute_batch(&format!("PRAGMA max_page_count = {SCHEMA_MAX_PAGES}; PRAGMA temp_store = FILE;"))?;
    conn.execute_batch(&migrations_table())?;
    // No VACUUM inside a transaction, and no statement may end it.
    conn.execute_batch("BEGIN")?;
    conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, SCHEMA_MAX_LENGTH)?;
    conn.set_limit(Limit::SQLITE_LIMIT_SQL_LENGTH, MAX_MIGRATION_SQL as i32)?;
    let deadline = Instant::now() + SCHEMA_BUDGET;
    conn.progress_handler(PROGRESS_STEPS, Some(move || Instant::now() >= deadline))?;
    let denial = Arc::new(Mutex::new(None::<String>));
    {
        let denial = denial.clone();
        conn.authorizer(Some(move |ctx: AuthContext<'_>| match authorize(Mode::ReadWrite, &ctx) {
            Ok(()) => Authorization::Allow,
            Err(why) => {
                *denial.lock().expect("denial") = Some(why);
                Authorization::Deny
            }
        }))?;
    }
    for m in migrations {
        let ran = conn.execute_batch(&m.sql);
        let why = denial.lock().expect("denial").take();
        ran.map_err(|e| guarded_error(e, why, SCHEMA_BUDGET)).with_context(|| {
            format!("migration {} failed on an empty database", crate::elsewhere::text::terminal(&m.name))
        })?;
    }
    conn.authorizer(None::<fn(AuthContext<'_>) -> Authorization>)?;
    conn.progress_handler(0, None::<fn() -> bool>)?;
    Ok(crate::elsewhere::sqlite::schema_of(&conn)?)
}

/// Refuses migrations longer than [`MAX_MIGRATION_SQL`], before any runs.
fn check_sizes(migrations: &[Migration]) -> anyhow::Result<()> {
    if let Some(m) = migrations.iter().find(|m| m.sql.len() > MAX_MIGRATION_SQL) {
        anyhow::bail!(
            "migration {} is {} bytes; a migration is at most {MAX_MIGRATION_SQL}",
            crate::elsewhere::text::terminal(&m.name),
            m.sql.len()
        );
    }
    Ok(())
}

/// A migration's failure, said: what the authorizer refused, or the budget
/// it ran past, or SQLite's own words (on one line).
fn guarded_error(e: rusqlite::Error, denied: Option<String>, budget: Duration) -> anyhow::Error {
    let interrupted = matches!(&e, rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::OperationInterrupted);
    match denied {
        Some(why) => anyhow::anyhow!("refused: {why}"),
        None if interrupted => anyhow::anyhow!("it ran past its {} s and was stopped", budget.as_secs()),
        None => anyhow::anyhow!("{}", crate::elsewhere::text::terminal(&e.to_string())),
    }
}

/// The name of the host's table of applied migrations (a store that never
/// ran a migration may lack it).
pub const HOST_MIGRATIONS_TABLE: &str = MIGRATIONS_TABLE;

/// A migration as a release brings it: its file name and its SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    pub name: String,
    pub sql: String,
}

/// A migration as the store applied it: its file name and the SHA-256 of its SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub name: String,
    pub sha256: String,
}

/// Copies the data folder `from` to `to` (which must not exist): every SQLite
/// database through SQLite's backup API, so the copy is consistent even while
/// another process writes; other files as they are. Journal, WAL and shared
/// memory files are not copied (the backup holds their committed content).
pub fn copy_data(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    if !from.exists() {
        return Ok(());
    }
    for entry in std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))? {
        let entry = entry?;
        let name = entry.file_name();
        let name_str = name.to_string_lossy();
        let target = to.join(&name);
        if entry.file_type()?.is_dir() {
            copy_data(&entry.path(), &target)?;
        } else if name_str.ends_with(".sqlite") {
            let src =
                crate::sqlite::open(&entry.path(), OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                    .with_context(|| format!("cannot open {}", entry.path().display()))?;
            src.busy_timeout(std::time::Duration::from_secs(10))?;
            src.backup(rusqlite::MAIN_DB, &target, None::<fn(rusqlite::backup::Progress)>)
                .with_context(|| format!("cannot copy {}", entry.path().display()))?;
        } else if name_str.ends_with("-wal") || name_str.ends_with("-shm") || name_str.ends_with("-journal") {
            continue;
        } else {
            std::fs::copy(entry.path(), &target).with_context(|| format!("cannot copy {}", entry.path().display()))?;
        }
    }
    let dir = std::fs::File::open(to)?;
    dir.sync_all()?;
    Ok(())
}

/// Copies the SQLite database at `from` to a new file `to` with SQLite's
/// online backup, in one step: the copy is the database as of one moment (a
/// read transaction), taken while other connections and processes go on
/// writing (write-ahead log), and every write committed before it began is
/// in it. `to` is synced before this returns.
pub fn back_up_file(from: &Path, to: &Path) -> anyhow::Result<()> {
    let src = crate::sqlite::open(from, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .with_context(|| format!("cannot open {}", from.display()))?;
    src.busy_timeout(std::time::Duration::from_secs(10))?;
    let mut dst = crate::sqlite::open(to, crate::sqlite::read_write())
        .with_context(|| format!("cannot create {}", to.display()))?;
    {
        let backup = rusqlite::backup::Backup::new(&src, &mut dst)?;
        // All pages at once: a step-by-step copy restarts whenever another
        // connection writes, and may never finish under steady writes.
        loop {
            match backup.step(-1).with_context(|| format!("cannot copy {}", from.display()))? {
                rusqlite::backup::StepResult::Done => break,
                _ => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        }
    }
    // A plain file, whole by itself (no -wal beside it).
    dst.pragma_update(None, "journal_mode", "DELETE")?;
    dst.close().map_err(|(_, e)| e)?;
    std::fs::File::open(to)?.sync_all()?;
    Ok(())
}

/// The migrations applied to the store in `data`, without keeping it open.
pub fn applied_in(data: &Path) -> anyhow::Result<Vec<Applied>> {
    let path = data.join(STORE_FILE);
    if !path.exists() {
        return Ok(Vec::new());
    }
    let conn = crate::sqlite::open(&path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    read_applied(&conn)
}

/// The names of the app's own tables in the store in `data` (none when it
/// has no store yet), without keeping it open.
pub fn tables_in(data: &Path) -> anyhow::Result<Vec<String>> {
    let path = data.join(STORE_FILE);
    if !path.exists() {
        return Ok(Vec::new());
    }
    let conn = crate::sqlite::open(&path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    let mut st = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'
         AND name NOT LIKE '\\_autoapp%' ESCAPE '\\' ORDER BY name",
    )?;
    let names = st.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
    Ok(names)
}

fn hashed(migrations: &[Migration]) -> Vec<Applied> {
    use sha2::Digest as _;
    migrations
        .iter()
        .map(|m| Applied { name: m.name.clone(), sha256: hex::encode(sha2::Sha256::digest(m.sql.as_bytes())) })
        .collect()
}

/// Refuses `migrations` unless they extend `applied`.
pub fn check_extends(applied: &[Applied], migrations: &[Migration]) -> anyhow::Result<()> {
    check_forward(applied, &hashed(migrations))
}

/// Whether `migrations` are a prefix of `applied`.
pub fn is_prefix(migrations: &[Migration], applied: &[Applied]) -> bool {
    let wanted = hashed(migrations);
    wanted.len() <= applied.len() && wanted.iter().zip(applied).all(|(w, a)| w == a)
}

/// The migrations a release brings must extend the applied ones: same names,
/// same contents, in the same order, and more of them or as many.
pub fn check_forward(applied: &[Applied], wanted: &[Applied]) -> anyhow::Result<()> {
    for (i, Applied { name, sha256: sha }) in applied.iter().enumerate() {
        match wanted.get(i) {
            None => anyhow::bail!(
                "this release knows {} migrations but the data has {} applied (the last is {name}); migrations are forward only, so activate a release that includes them all",
                wanted.len(),
                applied.len()
            ),
            Some(Applied { name: wn, sha256: wsha }) if wn != name || wsha != sha => anyhow::bail!(
                "this release's migration number {} is {wn} but the data applied {name}{}; migrations are forward only: keep the applied files unchanged and add new ones after them",
                i + 1,
                if wn == name { " with different contents" } else { "" }
            ),
            Some(_) => {}
        }
    }
    Ok(())
}

fn read_applied(conn: &Connection) -> anyhow::Result<Vec<Applied>> {
    let exists: bool = conn.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
        [MIGRATIONS_TABLE],
        |r| r.get::<_, i64>(0).map(|n| n > 0),
    )?;
    if !exists {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare(&format!("SELECT name, sha256 FROM {MIGRATIONS_TABLE} ORDER BY seq"))?;
    let rows = stmt.query_map([], |r| Ok(Applied { name: r.get(0)?, sha256: r.get(1)? }))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The authorizer's refusal of any database but `main`.
const ONLY_MAIN: &str = "only the app's own database (`main`) can be used";

/// Decides one action of a statement the guest sent. `Err` says why not.
fn authorize(mode: Mode, ctx: &AuthContext<'_>) -> Result<(), String> {
    use AuthAction as A;
    let host_table =
        |t: &str| t.get(..HOST_TABLE_PREFIX.len()).is_some_and(|p| p.eq_ignore_ascii_case(HOST_TABLE_PREFIX));
    if ctx.database_name.is_some_and(|d| d != "main")
        && !matches!(ctx.action, A::Select | A::Function { .. } | A::Recursive)
    {
        return Err(ONLY_MAIN.into());
    }
    match ctx.action {
        A::Select | A::Recursive => Ok(()),
        A::Read { table_name, .. } if host_table(table_name) => {
            Err(format!("the table {table_name} belongs to the host"))
        }
        A::Read { .. } => Ok(()),
        A::Function { function_name } => {
            let f = function_name.to_ascii_lowercase();
            if matches!(f.as_str(), "load_extension" | "fts3_tokenizer" | "readfile" | "writefile" | "edit") {
                Err(format!("the function {function_name} is not available"))
            } else {
                Ok(())
            }
        }
        // The r-tree module reads the page size when it makes a table; reading
        // it changes nothing.
        A::Pragma { pragma_name, pragma_value: None } if pragma_name.eq_ignore_ascii_case("page_size") => Ok(()),
        A::Pragma { .. } => Err("PRAGMA statements are not available: the host keeps the database's settings".into()),
        A::Attach { .. } | A::Detach { .. } => {
            Err("ATTACH and DETACH are not available: an app has exactly one database".into())
        }
        A::Transaction { .. } | A::Savepoint { .. } => Err(
            "transaction control is not available: each call of a write route is already one transaction, committed when the route succeeds".into(),
        ),
        A::CreateTempIndex { .. }
        | A::CreateTempTable { .. }
        | A::CreateTempTrigger { .. }
        | A::CreateTempView { .. }
        | A::DropTempIndex { .. }
        | A::DropTempTable { .. }
        | A::DropTempTrigger { .. }
        | A::DropTempView { .. } => Err("temporary tables, views and triggers are not available; use a table".into()),
        _ if mode == Mode::ReadOnly => Err("this route's effect is read, so the store is read-only; declare the route with effect = \"write\" to change data".into()),
        A::Insert { table_name }
        | A::Delete { table_name }
        | A::Update { table_name, .. }
        | A::CreateTable { table_name }
        | A::DropTable { table_name }
        | A::CreateIndex { table_name, .. }
        | A::DropIndex { table_name, .. }
        | A::CreateTrigger { table_name, .. }
        | A::DropTrigger { table_name, .. }
        | A::AlterTable { table_name, .. }
        | A::Analyze { table_name } => {
            if host_table(table_name) {
                Err(format!("the table {table_name} belongs to the host"))
            } else {
                Ok(())
            }
        }
        A::CreateView { .. } | A::DropView { .. } | A::Reindex { .. } => Ok(()),
        A::CreateVtable { module_name, .. } | A::DropVtable { module_name, .. } => {
            if matches!(module_name.to_ascii_lowercase().as_str(), "fts5" | "rtree") {
                Ok(())
            } else {
                Err(format!("the virtual table module {module_name} is not available (fts5 and rtree are)"))
            }
        }
        _ => Err("this statement is not available to apps".into()),
    }
}

/// The store as one call sees it: one connection inside one transaction,
/// begun at the guest's first use.
pub struct CallStore {
    conn: Option<Pooled>,
    /// The group whose transaction this call goes on in (a savepoint is
    /// open), when it joined one.
    joined: Option<Joined>,
    /// When this call began the transaction it heads.
    began: Option<Instant>,
    /// The app's write permit, held from before the transaction begins until
    /// after it ends (fields drop in order: the connection is rolled back in
    /// `Drop` before the permit is let go).
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    home: Arc<AppStore>,
    mode: Mode,
    deadline: Instant,
    state: State,
    /// Counted among the writers on their way to the permit.
    coming: bool,
    /// The deadline passed while the call waited for the write permit.
    waited_out: bool,
    /// How long the call waited for its turn to write.
    waited: Duration,
}

/// Where a call's transaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The guest has not used the store.
    Unused,
    /// A transaction is open on `conn`.
    Open,
    /// The transaction could not begin, or was ended.
    Closed,
    /// SQLite ended the transaction by itself ([`LOST`]).
    Lost,
}

impl CallStore {
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Counts this write call among the app's writers on their way to the
    /// write permit, from now until it asks for the permit or ends: a group
    /// ending meanwhile is handed on to it rather than committed (within the
    /// group's window). For calls that should reach the store soon (a
    /// `write` route's), not for ones that may first spend long elsewhere
    /// (an `external` route's network or programs): a group would wait its
    /// whole window for them.
    pub fn on_its_way(mut self) -> CallStore {
        if self.mode == Mode::ReadWrite && self.state == State::Unused && !self.coming {
            self.home.coming.fetch_add(1, Ordering::AcqRel);
            self.coming = true;
        }
        self
    }

    /// Whether the call's deadline passed while it waited for its turn to
    /// write: whatever the guest did after, the call's answer is [`BUSY`].
    pub fn waited_out(&self) -> bool {
        self.waited_out
    }

    /// How long the call waited for its turn to write (for the permit, and
    /// for another process's write lock).
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// Ends the call's transaction: commits when `commit` and the call may
    /// write, rolls back otherwise. The connection goes back to the pool only
    /// when it is clean.
    pub async fn finish(self, commit: bool) -> anyhow::Result<()> {
        self.finish_with(commit, None).await.map(drop)
    }

    /// Ends the call's transaction as [`finish`](Self::finish) does, and
    /// returns once what it wrote is committed. Before that commit, `host`
    /// (the row that records the call, into the database attached beside
    /// `main`) runs in the same transaction, so that one `COMMIT` ends both
    /// (in WAL mode SQLite appends it to each file's log in turn, `main`'s
    /// first: atomic per file, not across them against a crash;
    /// docs/security.md). Answers whether `host` was committed: not when
    /// the call wrote nothing (no transaction), nothing is attached, the call
    /// is not committed, or the database beside was busy with the record's
    /// own writer (then the caller records the row its own way).
    ///
    /// While other writers wait for their turn, the transaction is handed on
    /// rather than committed (group commit, see the module's doc): this call
    /// then waits for the commit of its group.
    pub async fn finish_with(mut self, commit: bool, host: Option<HostStep>) -> anyhow::Result<bool> {
        self.state = State::Closed;
        let joined = self.joined.take();
        let Some(mut p) = self.conn.take() else {
            return Ok(false);
        };
        p.rules.host.store(true, Ordering::Release);
        p.conn.progress_handler(0, None::<fn() -> bool>)?;
        if self.mode == Mode::ReadOnly {
            let ended = if p.conn.is_autocommit() { Ok(()) } else { run_host(&p.conn, ROLLBACK) };
            ended.context("cannot end the call's read")?;
            self.home.put_back(self.mode, p);
            return Ok(false);
        }
        if p.conn.is_autocommit() {
            // SQLite ended the transaction itself, and with it the writes of
            // the calls before this one in its group (told by their dropped
            // `Member`s). The connection is clean.
            drop(joined);
            self.home.put_back(self.mode, p);
            self.permit.take();
            return if commit { Err(anyhow::anyhow!(LOST)) } else { Ok(false) };
        }
        // This call's part: kept (its savepoint released into the group's
        // transaction) or undone.
        // A deferred foreign key this call left violated fails its commit
        // alone, as it would with no group: never one it shares with others,
        // and never made good by a later call of the group.
        let violated = commit && deferred_violations(&p.conn);
        let (members, opened) = match joined {
            Some(j) => {
                let ended = if commit && !violated {
                    run_host(&p.conn, RELEASE)
                } else {
                    run_host(&p.conn, ROLLBACK_TO).and_then(|()| run_host(&p.conn, RELEASE))
                };
                if let Err(e) = ended {
                    let _ = run_host(&p.conn, ROLLBACK);
                    self.permit.take();
                    // The members are told by their dropped `Member`s.
                    return Err(e).context("cannot end the call's part of its group; nothing it wrote was kept");
                }
                if violated {
                    // Its own part undone; the group goes on without it.
                    let _ = self.hand_on_or_commit(p, j.members, j.opened, false, None, true).await;
                    return Err(anyhow::anyhow!(
                        "cannot commit the call's writes; nothing it wrote was kept: FOREIGN KEY constraint failed"
                    ));
                }
                (j.members, j.opened)
            }
            None if !commit => {
                let ended = run_host(&p.conn, ROLLBACK);
                self.permit.take();
                return match ended {
                    Ok(()) => {
                        self.home.put_back(self.mode, p);
                        Ok(false)
                    }
                    Err(e) => Err(e).context("cannot end the call's transaction"),
                };
            }
            None => (Vec::new(), self.began.unwrap_or_else(Instant::now)),
        };
        // A head with a violation commits at once, alone: SQLite's COMMIT
        // refuses it.
        self.hand_on_or_commit(p, members, opened, commit, host, !violated).await
    }

    /// The end of a write call whose own part is settled in the open
    /// transaction on `p` (kept when `commit`): while writers wait and the
    /// group may grow (and `may_park`), parks it for them and waits for its
    /// commit; commits it otherwise. Lets the permit go either way.
    async fn hand_on_or_commit(
        &mut self,
        p: Pooled,
        members: Vec<Member>,
        opened: Instant,
        commit: bool,
        host: Option<HostStep>,
        may_park: bool,
    ) -> anyhow::Result<bool> {
        if may_park
            && (commit || !members.is_empty())
            && self.home.may_grow(&members, opened)
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            // Writers wait: hand the transaction on, and wait for its commit.
            let mut members = members;
            let (told, mut answer) = tokio::sync::oneshot::channel();
            if commit {
                members.push(Member { step: host, told });
            }
            *self.home.parked.lock().expect("group") = Some(Group { conn: p, members, opened });
            // The call that began the transaction parks it first.
            if self.began.is_some() {
                self.home.close_later(&rt);
            }
            self.permit.take();
            if !commit {
                return Ok(false);
            }
            loop {
                tokio::select! {
                    told = &mut answer => return match told {
                        Ok(Ok(Heard { beside, owed })) => {
                            // This call records its row itself (its caller
                            // goes on from here without another await).
                            if let Some(mut step) = owed {
                                step.taken_back();
                            }
                            Ok(beside)
                        }
                        Ok(Err(why)) => Err(anyhow::anyhow!(why)),
                        Err(_) => Err(anyhow::anyhow!(GROUP_LOST)),
                    },
                    () = tokio::time::sleep(ORPHAN_CHECK) => {
                        // Nobody holds or waits for the permit, yet a group
                        // is parked: its closer is gone with its runtime (a
                        // server stopped). Commit it here.
                        self.home.commit_orphaned();
                    }
                }
            }
        }
        let own = if commit { host } else { None };
        let done = self.home.commit_group(p, members, own);
        self.permit.take();
        if done.is_ok() && self.home.log_is_long() {
            self.home.clone().checkpoint_soon();
        }
        match done {
            Ok(beside) => Ok(beside && commit),
            // What this call wrote was undone before; its own answer stands.
            Err(_) if !commit => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The call's connection; the first use begins its transaction (a write
    /// call first waits for the app's write permit).
    async fn conn(&mut self) -> Result<&mut Connection, AppError> {
        if self.state == State::Open && self.conn.as_ref().is_some_and(|p| p.conn.is_autocommit()) {
            // A statement made SQLite end the transaction (`LOST`): nothing
            // more may run, or it would be committed on its own at once.
            self.state = State::Lost;
        }
        if self.state == State::Lost {
            return Err(AppError::Conflict(LOST.into()));
        }
        if self.state == State::Unused {
            self.state = State::Closed;
            let asked = Instant::now();
            if self.mode == Mode::ReadWrite {
                let permit = self.home.write_permit(self.deadline, &mut self.coming).await;
                self.waited = asked.elapsed();
                match permit {
                    Some(permit) => self.permit = Some(permit),
                    None => {
                        self.waited_out = true;
                        return Err(AppError::Conflict(BUSY.into()));
                    }
                }
            }
            let parked = match self.mode {
                Mode::ReadWrite => self.home.parked.lock().expect("group").take(),
                Mode::ReadOnly => None,
            };
            let opened = match parked {
                Some(g) => self.home.join(g, self.deadline).map(|(p, joined)| {
                    self.joined = Some(joined);
                    p
                }),
                None => self.home.open_transaction(self.mode, self.deadline).await.inspect(|_| {
                    self.began = Some(Instant::now());
                }),
            };
            if self.mode == Mode::ReadWrite {
                self.waited = asked.elapsed();
            }
            match opened {
                Ok(p) => {
                    self.conn = Some(p);
                    self.state = State::Open;
                }
                Err(e) => {
                    self.permit.take();
                    // The guest hears what it can act on, never a host path.
                    tracing::warn!("a call's store transaction could not begin: {e:#}");
                    let busy = e.chain().any(|c| c.downcast_ref::<rusqlite::Error>().is_some_and(is_busy));
                    self.waited_out = busy;
                    return Err(if busy {
                        AppError::Conflict(BUSY.into())
                    } else {
                        AppError::Internal("the store could not be opened".into())
                    });
                }
            }
        }
        self.conn.as_mut().map(|p| &mut p.conn).ok_or_else(|| AppError::Internal("the store is closed".into()))
    }

    fn map_err(&self, e: rusqlite::Error) -> AppError {
        // Why the connection's authorizer refused, when it did.
        let denial = self.conn.as_ref().and_then(|p| p.rules.denial.lock().expect("denial").take());
        // SQLite's own failures, whether or not rusqlite attached the SQL.
        let failure = match e {
            rusqlite::Error::SqliteFailure(f, msg) => Ok((f.code, msg.unwrap_or_else(|| f.to_string()))),
            rusqlite::Error::SqlInputError { error, msg, .. } => Ok((error.code, msg)),
            other => Err(other),
        };
        match failure {
            // The authorizer refused part of the statement: say why, whatever
            // code SQLite chose to report it with.
            Ok(_) if denial.is_some() => AppError::Denied(denial.unwrap_or_default()),
            Ok((code, msg)) => match code {
                ErrorCode::AuthorizationForStatementDenied => {
                    AppError::Denied("this statement is not available to apps".into())
                }
                ErrorCode::OperationInterrupted => {
                    AppError::Denied("the statement ran past the call's deadline and was interrupted".into())
                }
                ErrorCode::ReadOnly => {
                    AppError::Denied("this route's effect is read, so the store is read-only".into())
                }
                ErrorCode::ConstraintViolation => AppError::Conflict(msg),
                ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => AppError::Conflict(BUSY.into()),
                ErrorCode::TooBig => AppError::Denied("a value is too big for the store".into()),
                _ if msg.starts_with("not authorized") => {
                    AppError::Denied(format!("{msg}: this is not available to apps"))
                }
                _ if msg.contains("VACUUM") => {
                    AppError::Denied("VACUUM is not available: the host keeps the database file".into())
                }
                _ => AppError::InvalidInput(msg),
            },
            Err(rusqlite::Error::MultipleStatement) => AppError::InvalidInput("send one SQL statement per call".into()),
            Err(rusqlite::Error::ExecuteReturnedResults) => {
                AppError::InvalidInput("this statement returns rows: use query instead of execute".into())
            }
            Err(rusqlite::Error::InvalidParameterCount(got, want)) => {
                AppError::InvalidInput(format!("the statement has {want} parameters but {got} values were given"))
            }
            Err(other) => AppError::InvalidInput(other.to_string()),
        }
    }
}

impl Drop for CallStore {
    fn drop(&mut self) {
        if std::mem::take(&mut self.coming) {
            // On its way, it never asked for the permit: a group waiting
            // for it need wait no longer.
            self.home.coming.fetch_sub(1, Ordering::AcqRel);
            self.home.gone.notify_one();
        }
        // A call that was never settled (a trap unwinding, a dropped future)
        // keeps nothing.
        if let Some(mut p) = self.conn.take() {
            p.rules.host.store(true, Ordering::Release);
            if let Some(j) = self.joined.take()
                && !p.conn.is_autocommit()
                && run_host(&p.conn, ROLLBACK_TO).and_then(|()| run_host(&p.conn, RELEASE)).is_ok()
                && p.conn.progress_handler(0, None::<fn() -> bool>).is_ok()
            {
                // What the calls before it in its group wrote stays, parked
                // for the next writer or the group's closer (before the
                // permit is let go: fields drop after this).
                *self.home.parked.lock().expect("group") =
                    Some(Group { conn: p, members: j.members, opened: j.opened });
                return;
            }
            let _ = run_host(&p.conn, ROLLBACK);
        }
    }
}

/// Whether SQLite said another connection holds what this one needs.
fn is_busy(e: &rusqlite::Error) -> bool {
    e.sqlite_error_code().is_some_and(|code| matches!(code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
}

fn bind(params: Vec<Value>) -> Vec<SqlValue> {
    params
        .into_iter()
        .map(|v| match v {
            Value::Null => SqlValue::Null,
            Value::Integer(i) => SqlValue::Integer(i),
            Value::Real(r) => SqlValue::Real(r),
            Value::Text(t) => SqlValue::Text(t),
            Value::Blob(b) => SqlValue::Blob(b),
        })
        .collect()
}

fn value_of(v: ValueRef<'_>) -> (Value, usize) {
    match v {
        ValueRef::Null => (Value::Null, 1),
        ValueRef::Integer(i) => (Value::Integer(i), 8),
        ValueRef::Real(r) => (Value::Real(r), 8),
        ValueRef::Text(t) => (Value::Text(String::from_utf8_lossy(t).into_owned()), t.len()),
        ValueRef::Blob(b) => (Value::Blob(b.to_vec()), b.len()),
    }
}

/// A guest's statement on `c`: cached per connection (connections are pooled
/// per mode, so a statement is reused only under the rules it was authorized
/// by), except one of the text of a host's own cached statement (the
/// [`HOST_STATEMENTS`], and `beside`: the row of the database attached beside
/// `main`), which the cache would hand over as the host prepared it,
/// authorized for the host. Those control the transaction or write beside
/// `main`, so prepared afresh under the guest's rules they are refused, and
/// they are refused whatever the authorizer makes of them.
fn guest_statement<'c>(
    c: &'c Connection,
    sql: &str,
    beside: Option<&str>,
) -> rusqlite::Result<rusqlite::CachedStatement<'c>> {
    // The cache's key is the trimmed text.
    let key = sql.trim();
    if HOST_STATEMENTS.contains(&key) || beside.is_some_and(|h| h.trim() == key) {
        return Err(c.prepare(sql).err().unwrap_or_else(|| {
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_AUTH),
                Some("this statement is the host's, not available to apps".into()),
            )
        }));
    }
    c.prepare_cached(sql)
}

impl CallStore {
    pub async fn execute(&mut self, sql: &str, params: Vec<Value>) -> Result<u64, AppError> {
        let params = bind(params);
        let host_text = self.home.beside.as_ref().map(|b| b.statement);
        let r = self.conn().await.map_err(Ok).and_then(|c| {
            let mut stmt = guest_statement(c, sql, host_text).map_err(Err)?;
            stmt.execute(rusqlite::params_from_iter(params)).map_err(Err)
        });
        match r {
            Ok(n) => Ok(n as u64),
            Err(e) => Err(self.to_app_error(e)),
        }
    }

    pub async fn query(&mut self, sql: &str, params: Vec<Value>) -> Result<Rows, AppError> {
        let params = bind(params);
        let host_text = self.home.beside.as_ref().map(|b| b.statement);
        let r = self.conn().await.map_err(Ok).and_then(|c| {
            let mut stmt = guest_statement(c, sql, host_text).map_err(Err)?;
            let columns: Vec<String> = stmt.column_names().map(|s| s.to_string()).collect();
            let width = columns.len();
            let mut rows = stmt.query(rusqlite::params_from_iter(params)).map_err(Err)?;
            let mut out = Vec::new();
            let mut bytes = 0usize;
            while let Some(row) = rows.next().map_err(Err)? {
                if out.len() == MAX_ROWS {
                    return Err(Ok(AppError::Denied(format!(
                        "the query returns more than {MAX_ROWS} rows; page through it with LIMIT and OFFSET"
                    ))));
                }
                let mut vals = Vec::with_capacity(width);
                for i in 0..width {
                    let (v, n) = value_of(row.get_ref(i).map_err(Err)?);
                    bytes += n;
                    vals.push(v);
                }
                if bytes > MAX_RESULT_BYTES {
                    return Err(Ok(AppError::Denied(format!(
                        "the query returns more than {} MiB; select fewer columns or page with LIMIT",
                        MAX_RESULT_BYTES >> 20
                    ))));
                }
                out.push(vals);
            }
            Ok(Rows { columns, rows: out })
        });
        match r {
            Ok(rows) => Ok(rows),
            Err(e) => Err(self.to_app_error(e)),
        }
    }

    fn to_app_error(&self, e: Result<AppError, rusqlite::Error>) -> AppError {
        match e {
            Ok(app) => app,
            Err(sql) => self.map_err(sql),
        }
    }
}

/// The store as an instance holds it: none while the instance is being made
/// (code a component runs then, a start function, is refused), the call's
/// [`CallStore`] once the call is given it (`runtime`).
#[derive(Default)]
pub struct Given(pub Option<CallStore>);

/// What code that runs before a call is given the store is told.
const NOT_GIVEN: &str = "the store is not available while the instance is being made";

/// Serves `autoapp:app/store` to a call, from the store that `get` projects out of
/// the call's state.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    get: fn(&mut T) -> &mut Given,
) -> anyhow::Result<()> {
    crate::bindings::app::autoapp::app::store::add_to_linker::<T, wasmtime::component::HasSelf<Given>>(linker, get)?;
    Ok(())
}

impl Host for Given {
    async fn execute(&mut self, sql: String, params: Vec<Value>) -> Result<u64, AppError> {
        match &mut self.0 {
            Some(store) => store.execute(&sql, params).await,
            None => Err(AppError::Denied(NOT_GIVEN.into())),
        }
    }

    async fn query(&mut self, sql: String, params: Vec<Value>) -> Result<Rows, AppError> {
        match &mut self.0 {
            Some(store) => store.query(&sql, params).await,
            None => Err(AppError::Denied(NOT_GIVEN.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn store() -> (tempfile::TempDir, Arc<AppStore>) {
        let dir = tempfile::tempdir().unwrap();
        let s = AppStore::open(dir.path()).unwrap();
        s.migrate(&[Migration { name: "0001.sql".into(), sql: "CREATE TABLE t (x INTEGER UNIQUE)".into() }]).unwrap();
        (dir, s)
    }

    /// [`store`] with a table of blobs too, to make the log long quickly.
    fn store_with_blobs() -> (tempfile::TempDir, Arc<AppStore>) {
        let (dir, s) = store();
        s.migrate(&[
            Migration { name: "0001.sql".into(), sql: "CREATE TABLE t (x INTEGER UNIQUE)".into() },
            Migration { name: "0002.sql".into(), sql: "CREATE TABLE blobs (b BLOB)".into() },
        ])
        .unwrap();
        (dir, s)
    }

    #[test]
    fn a_migration_at_activation_cannot_attach_pragma_or_touch_the_hosts_table() {
        let (dir, s) = store();
        let other = dir.path().join("other.sqlite");
        for (i, sql) in [
            format!("ATTACH '{}' AS x; CREATE TABLE x.t (y)", other.display()),
            "PRAGMA foreign_keys = OFF".to_string(),
            "DELETE FROM _autoapp_migrations".to_string(),
            "COMMIT; CREATE TABLE u (y)".to_string(),
        ]
        .into_iter()
        .enumerate()
        {
            let m = [
                Migration { name: "0001.sql".into(), sql: "CREATE TABLE t (x INTEGER UNIQUE)".into() },
                Migration { name: format!("000{}.sql", i + 2), sql: sql.clone() },
            ];
            let e = s.migrate(&m).unwrap_err();
            assert!(format!("{e:#}").contains("refused:"), "{sql}: {e:#}");
            assert_eq!(s.applied_migrations().unwrap().len(), 1, "{sql}");
        }
        assert!(!other.exists(), "nothing attached");
        let m = [Migration { name: "0001.sql".into(), sql: "CREATE TABLE t (x INTEGER UNIQUE)".into() }];
        let into = dir.path().join("into.sqlite");
        let vacuum = Migration { name: "x.sql".into(), sql: format!("VACUUM INTO '{}'", into.display()) };
        assert!(schema_made_by(&[m[0].clone(), vacuum]).is_err());
        assert!(!into.exists(), "no file made");
    }

    /// Issue 51 (a review of rules 1 and 10): the empty database a package's
    /// migrations are checked on lives in the installing process's memory; a
    /// migration piling up megabyte rows for its 2 s took gigabytes there.
    /// It may grow to SCHEMA_MAX_PAGES, and is then full.
    #[test]
    fn migrations_checked_on_an_empty_database_cannot_fill_the_checking_process_s_memory() {
        let pile = Migration {
            name: "0002.sql".into(),
            sql: "CREATE TABLE b (x); INSERT INTO b WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) \
                  SELECT zeroblob(1000000) FROM c;"
                .into(),
        };
        let e = format!("{:#}", schema_made_by(&[pile]).unwrap_err());
        assert!(e.contains("full"), "refused as full, not at its deadline: {e}");
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[tokio::test]
    async fn a_read_call_cannot_change_anything() {
        let (_d, s) = store();
        let mut c = s.begin(Mode::ReadOnly, soon()).unwrap();
        for sql in ["INSERT INTO t VALUES (1)", "DELETE FROM t", "CREATE TABLE u (y)", "DROP TABLE t"] {
            let e = c.execute(sql, vec![]).await.unwrap_err();
            assert!(matches!(e, AppError::Denied(ref m) if m.contains("read-only")), "{sql}: {e:?}");
        }
        let e = c.query("INSERT INTO t VALUES (2) RETURNING x", vec![]).await.unwrap_err();
        assert!(matches!(e, AppError::Denied(_)), "{e:?}");
        c.finish(true).await.unwrap();
        let mut c = s.begin(Mode::ReadOnly, soon()).unwrap();
        assert!(matches!(c.query("SELECT count(*) FROM t", vec![]).await.unwrap().rows[0][0], Value::Integer(0)));
    }

    #[tokio::test]
    async fn no_call_may_attach_pragma_or_control_the_transaction() {
        let (d, s) = store();
        let other = d.path().join("other.sqlite");
        let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
        for sql in [
            format!("ATTACH DATABASE '{}' AS o", other.display()),
            "PRAGMA journal_mode = DELETE".to_string(),
            "PRAGMA writable_schema = ON".to_string(),
            "COMMIT".to_string(),
            "BEGIN".to_string(),
            "SAVEPOINT s".to_string(),
            "CREATE TEMP TABLE x (y)".to_string(),
            "SELECT * FROM _autoapp_migrations".to_string(),
            "DELETE FROM _AUTOAPP_migrations".to_string(),
            "VACUUM".to_string(),
        ] {
            let e = c.execute(&sql, vec![]).await.unwrap_err();
            assert!(matches!(e, AppError::Denied(_) | AppError::InvalidInput(_)), "{sql}: {e:?}");
        }
        // The host's own statements, by their exact text, after the host has
        // run them on this very connection: denied by the authorizer, never
        // found ready-made in the (guest's) statement cache.
        for sql in HOST_STATEMENTS.iter().copied().chain(["PRAGMA query_only = OFF", "  COMMIT\n"]) {
            let e = c.execute(sql, vec![]).await.unwrap_err();
            assert!(matches!(e, AppError::Denied(_)), "{sql}: {e:?}");
        }
        assert!(!other.exists());
        c.finish(true).await.unwrap();
        // A read call's connection holds the host's `BEGIN DEFERRED` and `ROLLBACK`.
        for _ in 0..2 {
            let mut r = s.begin(Mode::ReadOnly, soon()).unwrap();
            r.query("SELECT count(*) FROM t", vec![]).await.unwrap();
            for sql in HOST_STATEMENTS {
                let e = r.execute(sql, vec![]).await.unwrap_err();
                assert!(matches!(e, AppError::Denied(_)), "{sql}: {e:?}");
            }
            r.finish(true).await.unwrap();
        }
        assert_eq!(s.applied_migrations().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn each_refusal_of_the_authorizer_says_its_own_reason_and_what_apps_may_do_still_works() {
        let (_d, s) = store();
        let denied = |e: AppError| match e {
            AppError::Denied(m) => m,
            other => panic!("denied, not {other:?}"),
        };
        let mut w = s.begin(Mode::ReadWrite, soon()).unwrap();
        for (sql, says) in [
            ("PRAGMA user_version", "PRAGMA statements are not available"),
            ("ATTACH DATABASE ':memory:' AS o", "ATTACH and DETACH are not available"),
            ("SAVEPOINT s", "transaction control is not available"),
            ("BEGIN", "transaction control is not available"),
            // Temporary objects live in the database `temp`: refused by that rule first.
            ("CREATE TEMP TABLE x (y)", "only the app's own database (`main`) can be used"),
            ("CREATE TEMP VIEW v2 AS SELECT 1", "only the app's own database (`main`) can be used"),
            ("INSERT INTO _autoapp_migrations (seq) VALUES (9)", "belongs to the host"),
        ] {
            let m = denied(w.execute(sql, vec![]).await.unwrap_err());
            assert!(m.contains(says), "{sql}: {m}");
        }
        // What a write route may do: views, reindexing, full-text and r-tree tables.
        for sql in [
            "CREATE VIEW v AS SELECT x FROM t",
            "DROP VIEW v",
            "REINDEX",
            "CREATE VIRTUAL TABLE f USING fts5(body)",
            "CREATE VIRTUAL TABLE r USING rtree(id, minx, maxx)",
        ] {
            w.execute(sql, vec![]).await.unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        }
        w.finish(true).await.unwrap();
        let mut r = s.begin(Mode::ReadOnly, soon()).unwrap();
        for (sql, says) in [
            ("INSERT INTO t (x) VALUES (5)", "this route's effect is read, so the store is read-only"),
            ("SELECT * FROM _autoapp_migrations", "belongs to the host"),
            ("SELECT * FROM temp.sqlite_master", "only the app's own database (`main`) can be used"),
        ] {
            let m = denied(r.query(sql, vec![]).await.unwrap_err());
            assert!(m.contains(says), "{sql}: {m}");
        }
        r.finish(true).await.unwrap();
    }

    #[tokio::test]
    async fn a_statement_a_write_call_prepared_is_not_reused_by_a_read_call() {
        let (_d, s) = store();
        let insert = "INSERT INTO t (x) VALUES (?1)";
        for i in 0..3 {
            let mut w = s.begin(Mode::ReadWrite, soon()).unwrap();
            w.execute(insert, vec![Value::Integer(i)]).await.unwrap();
            w.finish(true).await.unwrap();
            let mut r = s.begin(Mode::ReadOnly, soon()).unwrap();
            let e = r.execute(insert, vec![Value::Integer(100 + i)]).await.unwrap_err();
            assert!(matches!(e, AppError::Denied(_)), "{e:?}");
            r.finish(true).await.unwrap();
        }
        let mut r = s.begin(Mode::ReadOnly, soon()).unwrap();
        let rows = r.query("SELECT count(*) FROM t", vec![]).await.unwrap();
        assert!(matches!(rows.rows[0][0], Value::Integer(3)));
    }

    #[tokio::test]
    async fn no_call_checkpoints_the_log_and_checkpoint_does() {
        let (d, s) = store();
        let main = d.path().join(STORE_FILE);
        let before = std::fs::metadata(&main).unwrap().len();
        // Short of the writers' checkpoint (CHECKPOINT_PAGES).
        for i in 0..40 {
            let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
            c.execute("INSERT INTO t (x) VALUES (?1)", vec![Value::Integer(i)]).await.unwrap();
            c.execute("CREATE TABLE IF NOT EXISTS blobs (b BLOB)", vec![]).await.unwrap();
            c.execute("INSERT INTO blobs (b) VALUES (zeroblob(16384))", vec![]).await.unwrap();
            c.finish(true).await.unwrap();
        }
        // Everything is in the log; none of it was copied inside a call.
        assert_eq!(std::fs::metadata(&main).unwrap().len(), before);
        s.checkpoint().unwrap();
        assert!(std::fs::metadata(&main).unwrap().len() > 40 * 16384);
        let mut r = s.begin(Mode::ReadOnly, soon()).unwrap();
        let rows = r.query("SELECT count(*) FROM blobs", vec![]).await.unwrap();
        assert!(matches!(rows.rows[0][0], Value::Integer(40)));
    }

    const BESIDE_INSERT: &str = "INSERT INTO record.runs (x) VALUES (?1)";

    fn make_beside(dir: &Path) -> anyhow::Result<()> {
        let c = crate::sqlite::open(&dir.join("beside.sqlite"), crate::sqlite::read_write())?;
        c.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE IF NOT EXISTS runs (x TEXT)")?;
        Ok(())
    }

    /// A store with a database attached beside `main`, as the record is.
    fn store_beside() -> (tempfile::TempDir, Arc<AppStore>) {
        let dir = tempfile::tempdir().unwrap();
        let beside = Beside {
            name: "record",
            path: dir.path().join("beside.sqlite"),
            make: make_beside,
            statement: BESIDE_INSERT,
        };
        let s = AppStore::open_with(dir.path(), Some(beside)).unwrap();
        s.migrate(&[Migration { name: "0001.sql".into(), sql: "CREATE TABLE t (x INTEGER UNIQUE)".into() }]).unwrap();
        (dir, s)
    }

    fn beside_rows(dir: &Path) -> Vec<String> {
        let c = Connection::open(dir.join("beside.sqlite")).unwrap();
        let mut st = c.prepare("SELECT x FROM runs ORDER BY rowid").unwrap();
        st.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    }

    fn t_count(s: &Arc<AppStore>) -> i64 {
        let c = Connection::open(&s.path).unwrap();
        c.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap()
    }

    #[tokio::test]
    async fn a_write_and_the_hosts_row_beside_it_are_committed_together_or_not_at_all() {
        let (d, s) = store_beside();
        let row = |x: &'static str| move |c: &Connection| c.prepare_cached(BESIDE_INSERT)?.execute([x]).map(drop);
        let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
        c.execute("INSERT INTO t (x) VALUES (1)", vec![]).await.unwrap();
        assert!(c.finish_with(true, Some(Box::new(row("one")))).await.unwrap(), "committed with the write");
        assert_eq!((t_count(&s), beside_rows(d.path())), (1, vec!["one".to_string()]));
        // A call that fails keeps neither; its row is the caller's to record.
        let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
        c.execute("INSERT INTO t (x) VALUES (2)", vec![]).await.unwrap();
        assert!(!c.finish_with(false, Some(Box::new(row("two")))).await.unwrap());
        // A call that never used the store has no transaction to put it in.
        let c = s.begin(Mode::ReadWrite, soon()).unwrap();
        assert!(!c.finish_with(true, Some(Box::new(row("three")))).await.unwrap());
        assert_eq!((t_count(&s), beside_rows(d.path())), (1, vec!["one".to_string()]));
    }

    #[tokio::test]
    async fn a_guest_cannot_use_the_database_beside_main_not_even_through_the_hosts_cached_statement() {
        let (d, s) = store_beside();
        let row = |c: &Connection| c.prepare_cached(BESIDE_INSERT)?.execute(["host"]).map(drop);
        let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
        c.execute("INSERT INTO t (x) VALUES (1)", vec![]).await.unwrap();
        assert!(c.finish_with(true, Some(Box::new(row))).await.unwrap());
        // The pool's one write connection now holds the host's statement in its cache.
        for text in [BESIDE_INSERT.to_string(), format!("  {BESIDE_INSERT}\n")] {
            let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
            let e = c.execute(&text, vec![Value::Text("forged".into())]).await.unwrap_err();
            assert!(matches!(e, AppError::Denied(ref m) if m.contains("main")), "{e:?}");
            c.finish(true).await.unwrap();
        }
        // Nor the host's statements that began and locked that write.
        for sql in HOST_STATEMENTS {
            let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
            c.execute("INSERT INTO t (x) VALUES (2)", vec![]).await.unwrap();
            let e = c.execute(sql, vec![]).await.unwrap_err();
            assert!(matches!(e, AppError::Denied(_)), "{sql}: {e:?}");
            c.finish(false).await.unwrap();
        }
        for sql in [
            "SELECT * FROM pragma_database_list",
            "SELECT file FROM pragma_database_list WHERE name = 'record'",
            "SELECT x FROM record.runs",
            "DELETE FROM record.runs",
            "UPDATE record.runs SET x = 'forged'",
            "CREATE TABLE record.more (y)",
            "DETACH DATABASE record",
        ] {
            let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
            let e = c.query(sql, vec![]).await.unwrap_err();
            assert!(matches!(e, AppError::Denied(_)), "{sql}: {e:?}");
            c.finish(true).await.unwrap();
        }
        assert_eq!(beside_rows(d.path()), vec!["host".to_string()]);
    }

    #[tokio::test]
    async fn a_write_call_holds_mains_lock_but_not_the_one_beside_until_its_row() {
        let (d, s) = store_beside();
        let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
        c.execute("INSERT INTO t (x) VALUES (1)", vec![]).await.unwrap();
        // While the call runs, the record's own writer commits at once…
        let other = Connection::open(d.path().join("beside.sqlite")).unwrap();
        other.busy_timeout(Duration::from_millis(100)).unwrap();
        other.execute("INSERT INTO runs (x) VALUES ('writer')", []).unwrap();
        // …and `main` is the call's alone.
        let main = Connection::open(&s.path).unwrap();
        main.busy_timeout(Duration::ZERO).unwrap();
        let e = main.execute_batch("BEGIN IMMEDIATE").unwrap_err();
        assert!(is_busy(&e), "{e}");
        // The record busy at the end: the write is committed, its row handed back.
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let row = |c: &Connection| c.prepare_cached(BESIDE_INSERT)?.execute(["call"]).map(drop);
        assert!(!c.finish_with(true, Some(Box::new(row))).await.unwrap());
        other.execute_batch("COMMIT").unwrap();
        assert_eq!((t_count(&s), beside_rows(d.path())), (1, vec!["writer".to_string()]));
    }

    /// Writers one after another without a pause: a checkpoint beside them
    /// never reaches the log's end, so the log never starts again from its
    /// beginning and grows by every write (to 1 GB in 9 s, measured); only
    /// the writers' own checkpoint, its last step with the permit held, lets
    /// it start again while they go on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_log_starts_again_while_writers_keep_writing() {
        let (_d, s) = store_with_blobs();
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let (s, stop) = (s.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut i = 0;
                    while !stop.load(Ordering::Acquire) {
                        let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
                        c.execute("INSERT INTO t (x) VALUES (?1)", vec![Value::Integer(w * 1_000_000 + i)])
                            .await
                            .unwrap();
                        c.execute("INSERT INTO blobs (b) VALUES (zeroblob(16384))", vec![]).await.unwrap();
                        c.finish(true).await.unwrap();
                        i += 1;
                    }
                })
            })
            .collect();
        // Past the checkpoint's length, the log must come back to its beginning.
        let (mut longest, mut started_again) = (0, false);
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until && !started_again {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let now = s.wal_pages.load(Ordering::Acquire);
            started_again = longest > CHECKPOINT_PAGES && now < longest / 2;
            longest = longest.max(now);
        }
        stop.store(true, Ordering::Release);
        for w in writers {
            w.await.unwrap();
        }
        assert!(started_again, "the log grew to {longest} pages and never started again");
    }

    /// SQLite starts a log again only for a writer that begins once all of
    /// it is copied. A checkpoint that copies all of it while a write is in
    /// its transaction (writes one after another: there always is one) must
    /// copy that write's pages too, once it ends: else the next writer goes
    /// on at the log's end, and so on for as long as writes keep coming.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_checkpoint_that_reached_the_end_beside_a_write_still_lets_the_log_start_again() {
        let (_d, s) = store_with_blobs();
        let write = |s: Arc<AppStore>| async move {
            let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
            c.execute("INSERT INTO blobs (b) VALUES (zeroblob(16384))", vec![]).await.unwrap();
            c
        };
        // The log past its length, with no checkpoint started yet.
        s.checkpoint_at.store(u64::MAX, Ordering::Release);
        while s.wal_pages.load(Ordering::Acquire) <= CHECKPOINT_PAGES {
            write(s.clone()).await.finish(true).await.unwrap();
        }
        let long = s.wal_pages.load(Ordering::Acquire);
        // A write in its transaction while the checkpoint copies all that was committed.
        let during = write(s.clone()).await;
        let commits = s.commits.load(Ordering::Acquire);
        s.clone().checkpoint_soon();
        let since = Instant::now();
        while s.checkpointed.load(Ordering::Acquire) != commits {
            assert!(since.elapsed() < Duration::from_secs(10), "the checkpoint copied what was committed");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // (No other checkpoint started by the write's end.)
        s.checkpoint_at.store(u64::MAX, Ordering::Release);
        during.finish(true).await.unwrap();
        // Its second step, under the write permit, copies the write that was in its transaction.
        let since = Instant::now();
        while s.checkpointed.load(Ordering::Acquire) != commits + 1 && since.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // The next writer starts the log again from its beginning.
        write(s.clone()).await.finish(true).await.unwrap();
        let now = s.wal_pages.load(Ordering::Acquire);
        assert!(now < long / 2, "the log is {now} pages after a checkpoint of {long}: it went on at its end");
    }

    #[tokio::test]
    async fn a_call_that_never_uses_the_store_holds_no_transaction() {
        let (_d, s) = store();
        // A write call that has not touched the store yet…
        let idle = s.begin(Mode::ReadWrite, soon()).unwrap();
        // …does not hold the write lock: another write goes through at once.
        let mut c = s.begin(Mode::ReadWrite, Instant::now() + Duration::from_millis(200)).unwrap();
        c.execute("INSERT INTO t (x) VALUES (1)", vec![]).await.unwrap();
        c.finish(true).await.unwrap();
        idle.finish(true).await.unwrap();
        // Once used, it does hold it, and the other waits its turn; when its
        // deadline comes first it hears "busy".
        let mut first = s.begin(Mode::ReadWrite, soon()).unwrap();
        first.execute("INSERT INTO t (x) VALUES (2)", vec![]).await.unwrap();
        let mut second = s.begin(Mode::ReadWrite, Instant::now() + Duration::from_millis(200)).unwrap();
        let e = second.execute("INSERT INTO t (x) VALUES (3)", vec![]).await.unwrap_err();
        assert!(matches!(&e, AppError::Conflict(m) if m == BUSY), "{e:?}");
        assert!(second.waited_out());
        first.finish(true).await.unwrap();
    }

    /// One thread for every call: a writer waiting its turn must not hold it.
    fn one_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn a_writer_waiting_its_turn_holds_no_thread_and_reads_go_on() {
        let (_d, s) = store();
        one_thread().block_on(async {
            let mut first = s.begin(Mode::ReadWrite, soon()).unwrap();
            first.execute("INSERT INTO t (x) VALUES (1)", vec![]).await.unwrap();
            // The second writer waits on the same (only) thread…
            let waiter = {
                let s = s.clone();
                tokio::spawn(async move {
                    let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
                    c.execute("INSERT INTO t (x) VALUES (2)", vec![]).await?;
                    c.finish(true).await.map_err(|e| AppError::Internal(e.to_string()))
                })
            };
            tokio::task::yield_now().await;
            // …while a read runs and sees only what was committed…
            let mut r = s.begin(Mode::ReadOnly, soon()).unwrap();
            let rows = r.query("SELECT count(*) FROM t", vec![]).await.unwrap();
            assert!(matches!(rows.rows[0][0], Value::Integer(0)));
            r.finish(true).await.unwrap();
            // …and the first writer, still polled, commits; then the second goes.
            first.finish(true).await.unwrap();
            waiter.await.unwrap().expect("the second writer had its turn");
        });
        let rows = one_thread().block_on(async {
            let mut r = s.begin(Mode::ReadOnly, soon()).unwrap();
            r.query("SELECT count(*) FROM t", vec![]).await.unwrap()
        });
        assert!(matches!(rows.rows[0][0], Value::Integer(2)));
    }

    #[test]
    fn writers_take_their_turns_in_the_order_they_came() {
        let (_d, s) = store();
        let order = Arc::new(Mutex::new(Vec::new()));
        one_thread().block_on(async {
            let mut first = s.begin(Mode::ReadWrite, soon()).unwrap();
            first.execute("INSERT INTO t (x) VALUES (0)", vec![]).await.unwrap();
            let mut waiters = Vec::new();
            for i in 1..=5i64 {
                let (s, order) = (s.clone(), order.clone());
                waiters.push(tokio::spawn(async move {
                    let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
                    c.execute("INSERT INTO t (x) VALUES (?1)", vec![Value::Integer(i)]).await.unwrap();
                    order.lock().unwrap().push(i);
                    c.finish(true).await.unwrap();
                }));
                // Each one is queued before the next is spawned.
                tokio::task::yield_now().await;
            }
            first.finish(true).await.unwrap();
            for w in waiters {
                w.await.unwrap();
            }
        });
        assert_eq!(*order.lock().unwrap(), vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_write_lock_held_by_another_process_is_waited_for_without_holding_the_thread() {
        let (d, s) = store();
        // Another process's connection (the command line beside a launcher).
        let other = Connection::open(d.path().join(STORE_FILE)).unwrap();
        other.execute_batch("BEGIN IMMEDIATE; INSERT INTO t (x) VALUES (10);").unwrap();
        let other = Arc::new(Mutex::new(other));
        one_thread().block_on(async {
            let writer = {
                let s = s.clone();
                tokio::spawn(async move {
                    let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
                    c.execute("INSERT INTO t (x) VALUES (11)", vec![]).await.unwrap();
                    c.finish(true).await.unwrap();
                })
            };
            // The writer has tried once and now retries on a timer; this
            // thread stays free to run a read and to let the other commit.
            tokio::task::yield_now().await;
            let mut r = s.begin(Mode::ReadOnly, soon()).unwrap();
            r.query("SELECT count(*) FROM t", vec![]).await.unwrap();
            r.finish(true).await.unwrap();
            other.lock().unwrap().execute_batch("COMMIT").unwrap();
            writer.await.unwrap();
        });
        let rows = one_thread().block_on(async {
            let mut r = s.begin(Mode::ReadOnly, soon()).unwrap();
            r.query("SELECT count(*) FROM t", vec![]).await.unwrap()
        });
        assert!(matches!(rows.rows[0][0], Value::Integer(2)));
    }

    #[tokio::test]
    async fn a_call_that_is_not_committed_keeps_nothing() {
        let (_d, s) = store();
        let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
        assert_eq!(c.execute("INSERT INTO t VALUES (?1)", vec![Value::Integer(7)]).await.unwrap(), 1);
        c.finish(false).await.unwrap();
        let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
        c.execute("INSERT INTO t VALUES (8)", vec![]).await.unwrap();
        drop(c); // a call whose future was dropped
        let mut c = s.begin(Mode::ReadOnly, soon()).unwrap();
        assert!(matches!(c.query("SELECT count(*) FROM t", vec![]).await.unwrap().rows[0][0], Value::Integer(0)));
    }

    /// A write call that holds the permit, its row `x` written.
    async fn writing(s: &Arc<AppStore>, x: i64) -> CallStore {
        let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
        c.execute("INSERT INTO t (x) VALUES (?1)", vec![Value::Integer(x)]).await.unwrap();
        c
    }

    /// A write call of row `x` that queues for the permit; the task ends
    /// (dropping the call) once its row is written.
    fn queued_writer(s: &Arc<AppStore>, x: i64) -> tokio::task::JoinHandle<Result<(), AppError>> {
        let s = s.clone();
        tokio::spawn(async move {
            let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
            c.execute("INSERT INTO t (x) VALUES (?1)", vec![Value::Integer(x)]).await.map(drop)
        })
    }

    /// The rows of `t` another connection sees, in order.
    fn kept(s: &AppStore) -> Vec<i64> {
        let c = Connection::open(&s.path).unwrap();
        let mut st = c.prepare("SELECT x FROM t ORDER BY x").unwrap();
        st.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    }

    fn long_groups(s: &mut Arc<AppStore>) {
        s.keep_groups_open();
    }

    /// Whether another connection sees the row `x` committed.
    fn committed(s: &AppStore, x: i64) -> bool {
        let c = Connection::open(&s.path).unwrap();
        c.query_row("SELECT count(*) FROM t WHERE x = ?1", [x], |r| r.get::<_, i64>(0)).unwrap() == 1
    }

    fn row_step(x: i64) -> HostStep {
        Box::new(move |c: &Connection| c.prepare_cached(BESIDE_INSERT)?.execute([x.to_string()]).map(drop))
    }

    #[test]
    fn writers_that_wait_their_turn_are_committed_together_and_each_answered_after_the_commit() {
        let (d, mut s) = store_beside();
        long_groups(&mut s);
        let before = s.commits.load(Ordering::Acquire);
        one_thread().block_on(async {
            let first = writing(&s, 0).await;
            let mut waiters = Vec::new();
            for i in 1..=5i64 {
                let s = s.clone();
                waiters.push(tokio::spawn(async move {
                    let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
                    c.execute("INSERT INTO t (x) VALUES (?1)", vec![Value::Integer(i)]).await.unwrap();
                    let beside = c.finish_with(true, Some(row_step(i))).await.unwrap();
                    (beside, committed(&s, i))
                }));
                tokio::task::yield_now().await;
            }
            assert!(first.finish_with(true, Some(row_step(0))).await.unwrap(), "its row went in with it");
            assert!(committed(&s, 0), "answered before its write was committed");
            for w in waiters {
                assert_eq!(w.await.unwrap(), (true, true), "each answered after its commit, its row with it");
            }
        });
        assert_eq!(t_count(&s), 6);
        assert_eq!(beside_rows(d.path()), ["0", "1", "2", "3", "4", "5"]);
        // Five writers waited while the first ran: one commit for all six.
        assert_eq!(s.commits.load(Ordering::Acquire) - before, 1);
        // A writer alone commits at once.
        one_thread().block_on(async {
            let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
            c.execute("INSERT INTO t (x) VALUES (6)", vec![]).await.unwrap();
            c.finish(true).await.unwrap();
        });
        assert_eq!(s.commits.load(Ordering::Acquire) - before, 2);
    }

    #[test]
    fn a_call_that_fails_or_is_dropped_in_a_group_undoes_only_its_own_writes() {
        let (_d, mut s) = store();
        long_groups(&mut s);
        one_thread().block_on(async {
            let first = writing(&s, 0).await;
            let call = |i: i64, how: &'static str| {
                let s = s.clone();
                tokio::spawn(async move {
                    let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
                    c.execute("INSERT INTO t (x) VALUES (?1)", vec![Value::Integer(i)]).await.unwrap();
                    match how {
                        "fails" => {
                            let e = c.execute("INSERT INTO t (x) VALUES (0)", vec![]).await.unwrap_err();
                            assert!(matches!(e, AppError::Conflict(_)), "{e:?}");
                            c.finish(false).await.map_err(|e| e.to_string())
                        }
                        "dropped" => {
                            drop(c);
                            Ok(())
                        }
                        _ => c.finish(true).await.map_err(|e| e.to_string()),
                    }
                })
            };
            let mut waiters = Vec::new();
            for (i, how) in [(1, "ok"), (2, "fails"), (3, "dropped"), (4, "ok"), (5, "fails")] {
                waiters.push(call(i, how));
                tokio::task::yield_now().await;
            }
            first.finish(true).await.unwrap();
            for w in waiters {
                w.await.unwrap().unwrap();
            }
        });
        assert_eq!(kept(&s), [0, 1, 4]);
    }

    #[test]
    fn a_group_whose_next_writer_gives_up_its_turn_is_committed_by_its_closer() {
        let (_d, mut s) = store();
        long_groups(&mut s);
        one_thread().block_on(async {
            let first = writing(&s, 0).await;
            let next = queued_writer(&s, 1);
            tokio::task::yield_now().await;
            // The first parks its group for `next` and waits for the commit…
            let mut finishing = Box::pin(first.finish(true));
            assert!(futures::poll!(&mut finishing).is_pending());
            // …but `next` gives its turn up before it takes the group.
            next.abort();
            tokio::time::timeout(Duration::from_secs(10), finishing)
                .await
                .expect("the group's closer committed it")
                .unwrap();
        });
        assert!(committed(&s, 0));
        assert!(!committed(&s, 1));
    }

    #[test]
    fn a_group_ending_while_a_writer_is_on_its_way_waits_for_it_and_both_commit_once() {
        let (_d, mut s) = store();
        long_groups(&mut s);
        let before = s.commits.load(Ordering::Acquire);
        one_thread().block_on(async {
            let first = writing(&s, 0).await;
            // A write call that has begun but not yet sent its statement.
            let mut next = s.begin(Mode::ReadWrite, soon()).unwrap().on_its_way();
            let mut finishing = Box::pin(first.finish(true));
            assert!(futures::poll!(&mut finishing).is_pending(), "the group waits for the writer on its way");
            assert!(!committed(&s, 0));
            next.execute("INSERT INTO t (x) VALUES (1)", vec![]).await.unwrap();
            // Nobody waits or is on the way now: its end commits both.
            next.finish(true).await.unwrap();
            finishing.await.unwrap();
        });
        assert!(committed(&s, 0) && committed(&s, 1));
        assert_eq!(s.commits.load(Ordering::Acquire) - before, 1, "one commit for both");
        assert_eq!(s.coming.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_group_waiting_for_a_writer_on_its_way_that_never_writes_is_committed_when_it_ends() {
        let (_d, mut s) = store();
        long_groups(&mut s);
        one_thread().block_on(async {
            let first = writing(&s, 0).await;
            let next = s.begin(Mode::ReadWrite, soon()).unwrap().on_its_way();
            let mut finishing = Box::pin(first.finish(true));
            assert!(futures::poll!(&mut finishing).is_pending());
            // The group's closer has looked, and sleeps until the window ends…
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
            assert!(!committed(&s, 0));
            // …but the call it waits for ends without writing: no need to wait.
            drop(next);
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
            assert!(committed(&s, 0), "committed as soon as the writer on its way went");
            finishing.await.unwrap();
        });
        assert_eq!(s.coming.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_write_call_on_its_way_is_counted_until_it_asks_for_the_permit_or_ends() {
        let (_d, s) = store();
        one_thread().block_on(async {
            let reader = s.begin(Mode::ReadOnly, soon()).unwrap().on_its_way();
            assert_eq!(s.coming.load(Ordering::Acquire), 0, "a read never writes");
            drop(reader);
            let mut a = s.begin(Mode::ReadWrite, soon()).unwrap().on_its_way();
            let b = s.begin(Mode::ReadWrite, soon()).unwrap().on_its_way();
            assert_eq!(s.coming.load(Ordering::Acquire), 2);
            a.execute("INSERT INTO t (x) VALUES (1)", vec![]).await.unwrap();
            assert_eq!(s.coming.load(Ordering::Acquire), 1, "asking for the permit, it is no longer on its way");
            b.finish(true).await.unwrap();
            assert_eq!(s.coming.load(Ordering::Acquire), 0, "ending without writing, neither");
            a.finish(true).await.unwrap();
        });
        assert!(committed(&s, 1));
    }

    #[test]
    fn a_statement_that_ends_a_groups_transaction_is_heard_by_every_call_in_it() {
        let (_d, mut s) = store();
        long_groups(&mut s);
        one_thread().block_on(async {
            let first = writing(&s, 0).await;
            let breaker = {
                let s = s.clone();
                tokio::spawn(async move {
                    let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
                    c.execute("INSERT INTO t (x) VALUES (1)", vec![]).await.unwrap();
                    // Conflicts with the first call's row: SQLite undoes the whole transaction.
                    c.execute("INSERT OR ROLLBACK INTO t (x) VALUES (0)", vec![]).await.unwrap_err();
                    let after = c.execute("INSERT INTO t (x) VALUES (2)", vec![]).await;
                    assert!(matches!(&after, Err(AppError::Conflict(m)) if m == LOST), "{after:?}");
                    c.finish(true).await.unwrap_err().to_string()
                })
            };
            let later = {
                let s = s.clone();
                tokio::spawn(async move {
                    let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
                    c.execute("INSERT INTO t (x) VALUES (3)", vec![]).await.unwrap();
                    c.finish(true).await.unwrap();
                })
            };
            tokio::task::yield_now().await;
            let e = first.finish(true).await.unwrap_err().to_string();
            assert_eq!(e, GROUP_LOST);
            assert_eq!(breaker.await.unwrap(), LOST);
            later.await.unwrap();
        });
        assert_eq!(kept(&s), [3], "only the call after the lost group");
    }

    #[test]
    fn a_deferred_foreign_key_a_call_leaves_violated_fails_that_call_alone_in_its_group() {
        let (_d, mut s) = store();
        s.migrate(&[
            Migration { name: "0001.sql".into(), sql: "CREATE TABLE t (x INTEGER UNIQUE)".into() },
            Migration {
                name: "0002.sql".into(),
                sql: "CREATE TABLE parent (id INTEGER PRIMARY KEY); \
                      CREATE TABLE child (p INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);"
                    .into(),
            },
        ])
        .unwrap();
        long_groups(&mut s);
        let results = one_thread().block_on(async {
            let first = writing(&s, 0).await;
            let mut calls = Vec::new();
            for sql in [
                // Violates the deferred key, alone…
                "INSERT INTO child (p) VALUES (7)",
                // …and this would make it good before the group's one COMMIT.
                "INSERT INTO parent (id) VALUES (7)",
            ] {
                let s = s.clone();
                calls.push(tokio::spawn(async move {
                    let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
                    c.execute(sql, vec![]).await.unwrap();
                    c.finish(true).await.map_err(|e| e.to_string())
                }));
                tokio::task::yield_now().await;
            }
            first.finish(true).await.unwrap();
            let mut results = Vec::new();
            for c in calls {
                results.push(c.await.unwrap());
            }
            // A head that violates one commits alone, and fails alone.
            let mut head = s.begin(Mode::ReadWrite, soon()).unwrap();
            head.execute("INSERT INTO child (p) VALUES (9)", vec![]).await.unwrap();
            let after = {
                let s = s.clone();
                tokio::spawn(async move {
                    let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
                    c.execute("INSERT INTO t (x) VALUES (1)", vec![]).await.unwrap();
                    c.finish(true).await.map_err(|e| e.to_string())
                })
            };
            tokio::task::yield_now().await;
            results.push(head.finish(true).await.map_err(|e| format!("{e:#}")));
            results.push(after.await.unwrap());
            results
        });
        assert!(matches!(&results[0], Err(e) if e.contains("FOREIGN KEY")), "{results:?}");
        assert!(results[1].is_ok(), "{results:?}");
        assert!(matches!(&results[2], Err(e) if e.contains("FOREIGN KEY")), "{results:?}");
        assert!(results[3].is_ok(), "{results:?}");
        let c = Connection::open(&s.path).unwrap();
        let count = |sql: &str| c.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
        assert_eq!(count("SELECT count(*) FROM child"), 0);
        assert_eq!(count("SELECT count(*) FROM parent"), 1);
        assert_eq!(count("SELECT count(*) FROM t"), 2);
    }

    #[test]
    fn a_group_left_with_no_call_and_no_closer_is_committed_at_the_next_checkpoint() {
        let (_d, mut s) = store();
        long_groups(&mut s);
        let here = one_thread();
        here.block_on(async {
            let first = writing(&s, 0).await;
            let next = queued_writer(&s, 1);
            tokio::task::yield_now().await;
            // The first parks its group for `next`; then the server stops:
            // every call and the closer are dropped before they run again.
            let mut finishing = Box::pin(first.finish(true));
            assert!(futures::poll!(&mut finishing).is_pending());
            next.abort();
        });
        drop(here);
        // The parked transaction holds the write lock against other processes…
        let other = Connection::open(&s.path).unwrap();
        other.busy_timeout(Duration::ZERO).unwrap();
        assert!(other.execute_batch("BEGIN IMMEDIATE").is_err());
        // …until the store's next checkpoint (once a second) commits it.
        s.checkpoint().unwrap();
        other.execute_batch("BEGIN IMMEDIATE; ROLLBACK").unwrap();
        assert!(committed(&s, 0) && !committed(&s, 1));
    }

    #[test]
    fn a_writer_dropped_while_it_waits_is_no_longer_counted_as_waiting() {
        let (_d, s) = store();
        one_thread().block_on(async {
            let first = writing(&s, 0).await;
            let waiter = queued_writer(&s, 1);
            tokio::task::yield_now().await;
            assert_eq!(s.queued.load(Ordering::Acquire), 1);
            // Its client went away: the call's future is dropped while it waits.
            waiter.abort();
            let _ = waiter.await;
            assert_eq!(s.queued.load(Ordering::Acquire), 0);
            // So the first, alone, commits at once instead of waiting for a group.
            let before = s.commits.load(Ordering::Acquire);
            let mut finishing = Box::pin(first.finish(true));
            assert!(futures::poll!(&mut finishing).is_ready());
            assert_eq!(s.commits.load(Ordering::Acquire), before + 1);
        });
    }

    #[test]
    fn a_group_whose_closer_went_with_its_runtime_is_committed_by_a_call_waiting_in_it() {
        let (_d, mut s) = store();
        long_groups(&mut s);
        let elsewhere = one_thread();
        let here = one_thread();
        let (go, ready) = tokio::sync::oneshot::channel::<()>();
        let (mut first, member) = here.block_on(async {
            let first = writing(&s, 0).await;
            let member = {
                let s = s.clone();
                tokio::spawn(async move {
                    let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
                    c.execute("INSERT INTO t (x) VALUES (1)", vec![]).await.unwrap();
                    ready.await.unwrap();
                    c.finish(true).await.map_err(|e| e.to_string())
                })
            };
            tokio::task::yield_now().await;
            (Some(first), member)
        });
        // The first parks its group on another runtime (its closer spawned
        // there), its own call is dropped, and that runtime stops.
        elsewhere.block_on(async {
            let mut finishing = Box::pin(first.take().unwrap().finish(true));
            assert!(futures::poll!(&mut finishing).is_pending());
        });
        drop(elsewhere);
        let done = here.block_on(async {
            // The member joins the group; another writer queues behind it…
            tokio::task::yield_now().await;
            let other = queued_writer(&s, 2);
            tokio::task::yield_now().await;
            // …so the member parks the group for it and waits; that writer gives up.
            go.send(()).unwrap();
            tokio::task::yield_now().await;
            other.abort();
            tokio::time::timeout(Duration::from_secs(10), member).await
        });
        done.expect("the member committed the group nobody else would").unwrap().unwrap();
        assert!(committed(&s, 0) && committed(&s, 1) && !committed(&s, 2));
    }

    /// SQLite ends a whole transaction by itself on some failures (a
    /// conflict under `OR ROLLBACK`, an interrupted write, a full disk).
    /// What the call sends after that must not run outside any transaction,
    /// committed at once whatever the call's outcome.
    #[tokio::test]
    async fn a_statement_that_ends_the_transaction_ends_what_the_call_may_write() {
        let (_d, s) = store();
        for commit in [false, true] {
            let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
            c.execute("INSERT INTO t VALUES (1)", vec![]).await.unwrap();
            let e = c.execute("INSERT OR ROLLBACK INTO t VALUES (1)", vec![]).await.unwrap_err();
            assert!(matches!(e, AppError::Conflict(_)), "{e:?}");
            let later = c.execute("INSERT INTO t VALUES (2)", vec![]).await;
            assert!(later.is_err(), "a statement after the transaction ended ran: {later:?}");
            let read = c.query("SELECT count(*) FROM t", vec![]).await;
            assert!(read.is_err(), "{read:?}");
            assert!(c.finish(commit).await.is_err() == commit, "a commit of nothing is not reported as done");
            assert_eq!(t_count(&s), 0, "commit: {commit}");
        }
        // The pool's connection is still good for the next call.
        let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
        c.execute("INSERT INTO t VALUES (3)", vec![]).await.unwrap();
        c.finish(true).await.unwrap();
        assert_eq!(t_count(&s), 1);
    }

    #[tokio::test]
    async fn constraint_violations_are_conflicts_and_syntax_errors_are_invalid_input() {
        let (_d, s) = store();
        let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
        c.execute("INSERT INTO t VALUES (1)", vec![]).await.unwrap();
        assert!(matches!(c.execute("INSERT INTO t VALUES (1)", vec![]).await, Err(AppError::Conflict(_))));
        assert!(matches!(c.execute("INSERT INTO nope VALUES (1)", vec![]).await, Err(AppError::InvalidInput(_))));
        assert!(matches!(c.execute("SELEC 1", vec![]).await, Err(AppError::InvalidInput(_))));
    }

    #[tokio::test]
    async fn a_statement_past_the_deadline_is_interrupted() {
        let (_d, s) = store();
        let mut c = s.begin(Mode::ReadOnly, Instant::now() + Duration::from_millis(100)).unwrap();
        let e = c
            .query("WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r", vec![])
            .await
            .unwrap_err();
        assert!(matches!(e, AppError::Denied(ref m) if m.contains("deadline")), "{e:?}");
    }

    #[test]
    fn migrations_are_forward_only() {
        let (_d, s) = store();
        let e =
            s.migrate(&[Migration { name: "0001.sql".into(), sql: "CREATE TABLE t (x INTEGER)".into() }]).unwrap_err();
        assert!(e.to_string().contains("different contents"), "{e}");
        let e = s.migrate(&[]).unwrap_err();
        assert!(e.to_string().contains("forward only"), "{e}");
        let n = s
            .migrate(&[
                Migration { name: "0001.sql".into(), sql: "CREATE TABLE t (x INTEGER UNIQUE)".into() },
                Migration { name: "0002.sql".into(), sql: "CREATE TABLE u (y)".into() },
            ])
            .unwrap();
        assert_eq!(n, 1);
    }
}
