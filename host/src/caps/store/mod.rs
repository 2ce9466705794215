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
//! [`AppStore`] is here: one app's store, its fields each room's to use.
//! Its rooms, each one concern:
//!
//! - [`database`]: the app's database file, its connections and their pools,
//!   the host's own statements, the write permit and how a call's transaction
//!   begins; consistent copies of a data folder.
//! - [`group`]: group commit — a write call's open transaction handed on to
//!   the next writer, and one `COMMIT` for the group.
//! - [`checkpoint`]: the write-ahead log copied into the database, off the
//!   calls' path.
//! - [`migrations`]: a release's migrations, applied forward only, and the
//!   schema they make checked on an empty database.
//! - [`authorizer`]: the rule above, one function.
//! - [`call`]: the store as one call and the WIT see it ([`CallStore`],
//!   `autoapp:app/store`).

/// The table that records which migrations were applied.
macro_rules! migrations_table {
    () => {
        "_autoapp_migrations"
    };
}
const MIGRATIONS_TABLE: &str = migrations_table!();

mod authorizer;
mod call;
mod checkpoint;
mod database;
mod group;
mod migrations;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;

use checkpoint::CHECKPOINT_PAGES;
use database::Pooled;
use group::{GROUP_WINDOW, Group};

pub use call::{CallStore, Given, add_to_linker};
pub use database::{Beside, back_up_file, copy_data, with_writes_held};
pub use group::{HostStep, Step};
pub use migrations::{
    Applied, HOST_MIGRATIONS_TABLE, MAX_MIGRATION_SQL, Migration, applied_in, check_extends, is_prefix, schema_made_by,
    tables_in,
};

/// The app's database file inside its data folder.
pub const STORE_FILE: &str = "app.sqlite";

/// The most rows one query may return; guards the host's and the guest's memory.
pub const MAX_ROWS: usize = 10_000;

/// The most bytes of values one query may return.
pub const MAX_RESULT_BYTES: usize = 16 << 20;

/// What a write call hears when its deadline passed while other writes of
/// the same app went first.
pub const BUSY: &str = "the app is busy; try again";

/// SQLite virtual-machine steps between two deadline checks.
const PROGRESS_STEPS: i32 = 10_000;

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
    /// The same of the log of the database beside, after its last commit
    /// of rows (`commit_group`).
    beside_pages: Arc<AtomicU64>,
    checkpoint_at: AtomicU64,
    /// What is attached beside `main` on write connections.
    beside: Option<Beside>,
    /// The connection of the database beside on which a group's rows are
    /// committed, just before its writes ([`AppStore::commit_group`]);
    /// opened at its first use, used by the holder of the write permit.
    beside_conn: Mutex<Option<rusqlite::Connection>>,
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
            beside_pages: Arc::new(AtomicU64::new(0)),
            checkpoint_at: AtomicU64::new(CHECKPOINT_PAGES),
            beside,
            beside_conn: Mutex::new(None),
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
}
