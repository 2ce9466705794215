//! The app's database and its connections: the file, opened on first use
//! (WAL, `synchronous = NORMAL`, defensive), a pool of connections per mode
//! (a connection keeps its prepared statements, and is only ever reused under
//! the rules it was checked under), the host's own statements around each
//! call's transaction, and how that transaction begins.
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
//! Never: a write transaction begun without the permit, or a statement
//! prepared for the host handed to a guest (a connection's authorizer lets
//! the host do anything while [`Rules::host`] is set).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rusqlite::hooks::{AuthContext, Authorization};
use rusqlite::{Connection, ErrorCode, OpenFlags};

use super::authorizer::authorize;
use super::{AppStore, Mode, PROGRESS_STEPS};

/// Connections kept open per app between calls.
pub(super) const POOL_SIZE: usize = 8;

/// Prepared statements each connection keeps for reuse.
pub(super) const STATEMENT_CACHE: usize = 32;

/// The longest a read may wait in SQLite's busy handler. In WAL mode a reader
/// is only ever kept waiting by another process's recovery or exclusive lock,
/// for a moment; this bounds how long such a moment can hold a thread.
pub(super) const READ_BUSY_MAX: Duration = Duration::from_millis(200);

/// How long a write call waits before it tries `BEGIN IMMEDIATE` again while
/// another process holds the write lock (doubled each time up to the most).
pub(super) const RETRY_FIRST: Duration = Duration::from_millis(1);
pub(super) const RETRY_MOST: Duration = Duration::from_millis(25);

/// The host's own statements around each call's transaction, kept prepared
/// in the connection's statement cache (parsed once per connection, not
/// once per call: a tenth of a write's SQLite time, docs/performance.md).
/// They are prepared while the authorizer lets the host do anything, so a
/// guest's statement of the same text must never be taken from the cache
/// ([`guest_statement`]).
pub(super) const BEGIN_READ: &str = "BEGIN DEFERRED";
pub(super) const BEGIN_WRITE: &str = "BEGIN IMMEDIATE";
/// A write statement that changes nothing: it takes `main`'s write lock.
pub(super) const LOCK_MAIN: &str = concat!("DELETE FROM main.", migrations_table!(), " WHERE 0");
pub(super) const COMMIT: &str = "COMMIT";
pub(super) const ROLLBACK: &str = "ROLLBACK";
/// A call that joins a group's transaction runs inside this savepoint.
pub(super) const SAVEPOINT: &str = "SAVEPOINT autoapp_call";
pub(super) const RELEASE: &str = "RELEASE autoapp_call";
pub(super) const ROLLBACK_TO: &str = "ROLLBACK TO autoapp_call";
pub(super) const HOST_STATEMENTS: [&str; 8] =
    [BEGIN_READ, BEGIN_WRITE, LOCK_MAIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE, ROLLBACK_TO];

/// Runs one of [`HOST_STATEMENTS`] from the connection's cache.
pub(super) fn run_host(conn: &Connection, sql: &'static str) -> rusqlite::Result<()> {
    debug_assert!(HOST_STATEMENTS.contains(&sql));
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// How long a group's commit waits for the write lock of the database beside
/// (the record, which other processes write too: the app's other worker,
/// the launcher, `autoapp call`) before nothing of the group is kept.
pub(super) const BESIDE_WAIT: Duration = Duration::from_secs(2);

/// A database the host keeps beside `main`: the record of the calls
/// (`gate::record`). The rows of a group of writes are committed into it
/// on a connection of its own just before the writes (`commit_group`); it
/// is attached to the store's write connections so that a checkpoint takes
/// both logs. A guest cannot name it: the authorizer lets a call use `main`
/// alone.
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

/// A connection and the switch of its authorizer.
pub(super) struct Pooled {
    pub(super) conn: Connection,
    pub(super) rules: Arc<Rules>,
}

/// What a connection's authorizer consults. The authorizer is installed once,
/// when the connection is opened (installing one expires every prepared
/// statement, so doing it per call would throw the statement cache away). It
/// applies the rules of its pool's mode to everything prepared while a call
/// has the connection; between calls the host runs its own statements
/// (BEGIN, COMMIT, migrations), which never enter the statement cache.
pub(super) struct Rules {
    /// The host, not a call, is using the connection.
    pub(super) host: AtomicBool,
    /// Why the authorizer last refused a statement of the call.
    pub(super) denial: Mutex<Option<String>>,
}

impl AppStore {
    /// The connection of the database beside `main` on which the host
    /// commits a group's rows before its writes (`commit_group`): settled as
    /// the attached database is, and waiting up to `BESIDE_WAIT` for its
    /// write lock (another process's commit).
    pub(super) fn connect_beside(&self) -> anyhow::Result<Connection> {
        let b = self.beside.as_ref().context("nothing is kept beside this store")?;
        let dir = self.path.parent().unwrap_or(Path::new("."));
        (b.make)(dir)?;
        let mut conn = crate::sqlite::open(
            &b.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_NOFOLLOW,
        )
        .with_context(|| format!("cannot open {}", b.path.display()))?;
        // `NORMAL`, as the store's: at `power` the group's sync after the
        // commits (`gate::record::sync_logs`) syncs both logs. A sync of the
        // rows before the writes' commit (`FULL` here) was measured costing
        // 40-90 µs a write at `power` (P3 power 0.66-0.74x against 0.97-0.99x
        // for the build before, one sitting) and was not kept.
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA wal_autocheckpoint = 0;
             PRAGMA synchronous = NORMAL;
             PRAGMA trusted_schema = OFF;",
        )
        .with_context(|| format!("cannot configure {}", b.path.display()))?;
        conn.busy_timeout(BESIDE_WAIT)?;
        // Its log is checkpointed with the store's (`checkpoint`), when the
        // longer of the two is long.
        let pages = self.beside_pages.clone();
        conn.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, n: std::ffi::c_int| {
            pages.store(u64::try_from(n).unwrap_or(0), Ordering::Release);
            Ok(())
        }))?;
        Ok(conn)
    }

    /// A new connection for calls of `mode`.
    pub(super) fn connect(&self, mode: Mode) -> anyhow::Result<Pooled> {
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
            // longer of the two logs decides (`main`'s here, the one beside's
            // on its own connection: `connect_beside`).
            let pages = self.wal_pages.clone();
            conn.wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, n: std::ffi::c_int| {
                if wal.name() == c"main" {
                    pages.store(u64::try_from(n).unwrap_or(0), Ordering::Release);
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

    pub(super) fn pool(&self, mode: Mode) -> &Mutex<Vec<Pooled>> {
        match mode {
            Mode::ReadOnly => &self.read_pool,
            Mode::ReadWrite => &self.write_pool,
        }
    }

    pub(super) fn take(&self, mode: Mode) -> anyhow::Result<Pooled> {
        let pooled = self.pool(mode).lock().expect("store pool").pop();
        match pooled {
            Some(c) => Ok(c),
            None => self.connect(mode),
        }
    }

    pub(super) fn put_back(&self, mode: Mode, conn: Pooled) {
        let mut pool = self.pool(mode).lock().expect("store pool");
        if pool.len() < POOL_SIZE {
            pool.push(conn);
        }
    }

    /// The app's write permit, waited for asynchronously in arrival order
    /// until `deadline`; `None` when the deadline came first.
    /// A call counted on its way (`coming`) is counted as waiting from here.
    pub(super) async fn write_permit(
        &self,
        deadline: Instant,
        coming: &mut bool,
    ) -> Option<tokio::sync::OwnedSemaphorePermit> {
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
    pub(super) async fn open_transaction(&self, mode: Mode, deadline: Instant) -> anyhow::Result<Pooled> {
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
}

/// Gives a connection inside a transaction to a call: the deadline's
/// progress handler installed, and from here on what is prepared on it is
/// the guest's.
pub(super) fn hand_to_call(p: &mut Pooled, deadline: Instant) -> rusqlite::Result<()> {
    p.conn.progress_handler(PROGRESS_STEPS, Some(move || Instant::now() >= deadline))?;
    p.rules.denial.lock().expect("denial").take();
    p.rules.host.store(false, Ordering::Release);
    Ok(())
}

/// Begins a write transaction on `conn`, holding `main`'s write lock from
/// the start (as `BEGIN IMMEDIATE`), but not the lock of a database attached
/// beside it: `BEGIN IMMEDIATE` would take every attached database's too, and
/// hold the record's for as long as the call runs, keeping its writer (and
/// the person's actions) waiting. (The rows go in on the record's own
/// connection, just before the commit: `connect_beside`.) A store without the host's table
/// (never migrated) begins as `BEGIN IMMEDIATE`.
pub(super) fn begin_write(conn: &Connection, beside: bool) -> rusqlite::Result<()> {
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

/// Whether SQLite said another connection holds what this one needs.
pub(super) fn is_busy(e: &rusqlite::Error) -> bool {
    e.sqlite_error_code().is_some_and(|code| matches!(code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
}

/// Runs `f` while holding the write lock of the store in the data folder
/// `data` (waiting up to `within` for it), so that no write of any process
/// is between its rows' commit and its own: every row in the record beside
/// then has its write in the store, or was taken back. Without a store
/// there, `f` runs as it is.
pub fn with_writes_held<R>(data: &Path, within: Duration, f: impl FnOnce() -> R) -> anyhow::Result<R> {
    let path = data.join(super::STORE_FILE);
    let conn = match crate::sqlite::open(
        &path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_NOFOLLOW,
    ) {
        Ok(conn) => conn,
        Err(_) if !path.exists() => return Ok(f()),
        Err(e) => return Err(e).with_context(|| format!("cannot open {}", path.display())),
    };
    conn.busy_timeout(within)?;
    conn.execute_batch("BEGIN IMMEDIATE").context("the app's writes did not let go of its store")?;
    let out = f();
    conn.execute_batch("ROLLBACK")?;
    Ok(out)
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
