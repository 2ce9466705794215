//! Migrations: a release's SQL files, applied forward only (the applied ones
//! a prefix of the release's, same names and contents), all of an
//! activation's in one transaction, each under the rules of a write call
//! ([`authorize`](super::authorizer::authorize)) and the bounds below; and
//! the schema a release's migrations make, on an empty database, which a
//! store from elsewhere (a restored backup's) must hold exactly.
//!
//! Never: a migration run as the host (with the authorizer off), or the
//! host's table of applied migrations written by anything but [`migrate`](AppStore::migrate).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rusqlite::hooks::{AuthContext, Authorization};
use rusqlite::limits::Limit;
use rusqlite::{Connection, ErrorCode, OpenFlags};

use super::authorizer::authorize;
use super::{AppStore, MIGRATIONS_TABLE, Mode, PROGRESS_STEPS, STORE_FILE};

/// How long the host's own migration waits for another process's writes.
pub(super) const MIGRATE_BUSY: Duration = Duration::from_secs(10);

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
pub(super) const MIGRATE_MAX_LENGTH: i32 = 256 << 20;
/// The same on the empty database a restore makes its expected schema on.
pub(super) const SCHEMA_MAX_LENGTH: i32 = 1 << 20;
/// How long an activation's migrations may run (a statement that never ends
/// is interrupted).
pub(super) const MIGRATE_BUDGET: Duration = Duration::from_secs(120);
/// How long a release's migrations may run on an empty database.
pub const SCHEMA_BUDGET: Duration = Duration::from_secs(2);
/// The most pages (of 4 KiB: 64 MiB) the empty database a release's
/// migrations are checked on may grow to: a schema is kilobytes.
pub(super) const SCHEMA_MAX_PAGES: u32 = 16_384;

impl AppStore {
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

/// The host's table of applied migrations, as `migrate` makes it (the same
/// text: SQLite keeps it in the schema, which a restore compares).
pub(super) fn migrations_table() -> String {
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
pub(super) fn check_sizes(migrations: &[Migration]) -> anyhow::Result<()> {
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
pub(super) fn guarded_error(e: rusqlite::Error, denied: Option<String>, budget: Duration) -> anyhow::Error {
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

pub(super) fn hashed(migrations: &[Migration]) -> Vec<Applied> {
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

pub(super) fn read_applied(conn: &Connection) -> anyhow::Result<Vec<Applied>> {
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
