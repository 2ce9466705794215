//! The store's tests: its rooms together, as a call, a group, a checkpoint
//! and a migration use them.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::call::*;
use super::checkpoint::*;
use super::database::*;
use super::group::*;
use super::migrations::*;
use super::*;
use crate::bindings::AppError;
use crate::bindings::app::autoapp::app::store::Value;

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

/// The host's statement as the store's write connections would name it
/// (the guest may not, even as the host wrote it).
const BESIDE_INSERT: &str = "INSERT INTO record.runs (x) VALUES (?1)";

/// A row's insert on the beside database's own connection (its `main`).
const BESIDE_ROW: &str = "INSERT INTO runs (x) VALUES (?1)";

fn make_beside(dir: &Path) -> anyhow::Result<()> {
    let c = crate::sqlite::open(&dir.join("beside.sqlite"), crate::sqlite::read_write())?;
    c.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE IF NOT EXISTS runs (x TEXT)")?;
    Ok(())
}

/// A store with a database attached beside `main`, as the record is.
fn store_beside() -> (tempfile::TempDir, Arc<AppStore>) {
    let dir = tempfile::tempdir().unwrap();
    let beside =
        Beside { name: "record", path: dir.path().join("beside.sqlite"), make: make_beside, statement: BESIDE_INSERT };
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
    let row = |x: &'static str| move |c: &Connection| c.prepare_cached(BESIDE_ROW)?.execute([x]).map(drop);
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
    let row = |c: &Connection| c.prepare_cached(BESIDE_ROW)?.execute(["host"]).map(drop);
    let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
    c.execute("INSERT INTO t (x) VALUES (1)", vec![]).await.unwrap();
    assert!(c.finish_with(true, Some(Box::new(row))).await.unwrap());
    // The host's own text of the insert, through the store's connection.
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
    // The record busy at the end for a moment: the row waits for it, and
    // goes in before the write.
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        other.execute_batch("COMMIT").unwrap();
        other
    });
    let row = |c: &Connection| c.prepare_cached(BESIDE_ROW)?.execute(["call"]).map(drop);
    assert!(c.finish_with(true, Some(Box::new(row))).await.unwrap());
    let other = release.join().unwrap();
    assert_eq!((t_count(&s), beside_rows(d.path())), (1, vec!["writer".to_string(), "call".to_string()]));
    // Busy for longer than the commit waits: nothing is kept, and no row.
    let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
    c.execute("INSERT INTO t (x) VALUES (2)", vec![]).await.unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let row = |c: &Connection| c.prepare_cached(BESIDE_ROW)?.execute(["late"]).map(drop);
    let e = c.finish_with(true, Some(Box::new(row))).await.unwrap_err();
    assert!(format!("{e:#}").contains("nothing it wrote was kept"), "{e:#}");
    other.execute_batch("COMMIT").unwrap();
    assert_eq!((t_count(&s), beside_rows(d.path())), (1, vec!["writer".to_string(), "call".to_string()]));
}

/// A row's step that can be taken back, as the record's is.
struct UndoableRow {
    x: &'static str,
    seq: Option<i64>,
}

impl super::Step for UndoableRow {
    fn run(&mut self, c: &Connection) -> rusqlite::Result<()> {
        c.prepare_cached(BESIDE_ROW)?.execute([self.x])?;
        self.seq = Some(c.last_insert_rowid());
        Ok(())
    }

    fn undo(&mut self, c: &Connection) -> rusqlite::Result<()> {
        match self.seq.take() {
            Some(seq) => c.execute("DELETE FROM runs WHERE rowid = ?1", [seq]).map(drop),
            None => Ok(()),
        }
    }
}

/// A write's row is committed before the write (so a process killed in
/// between never keeps the write without its row); when the write's own
/// `COMMIT` then fails, its row is taken back: neither stays. A head whose
/// own part leaves a deferred foreign key violated puts no row in at all.
#[tokio::test]
async fn a_rows_commit_comes_first_and_is_taken_back_when_the_writes_commit_fails() {
    let (d, s) = store_beside();
    // The store's COMMIT fails (its commit hook turns it into a rollback).
    let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
    c.execute("INSERT INTO t (x) VALUES (1)", vec![]).await.unwrap();
    let rows_then = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    {
        let (dir, seen) = (d.path().to_path_buf(), rows_then.clone());
        c.conn
            .as_mut()
            .unwrap()
            .conn
            .commit_hook(Some(move || {
                // At the writes' COMMIT, the row is committed already.
                *seen.lock().unwrap() = beside_rows(&dir);
                true
            }))
            .unwrap();
    }
    let e = c.finish_with(true, Some(Box::new(UndoableRow { x: "failed", seq: None }))).await.unwrap_err();
    assert!(format!("{e:#}").contains("nothing it wrote was kept"), "{e:#}");
    assert_eq!(*rows_then.lock().unwrap(), ["failed"], "the row went in first");
    assert_eq!((t_count(&s), beside_rows(d.path())), (0, Vec::<String>::new()), "taken back");
    // A deferred foreign key left violated: no row, no write.
    s.migrate(&[
        Migration { name: "0001.sql".into(), sql: "CREATE TABLE t (x INTEGER UNIQUE)".into() },
        Migration {
            name: "0002.sql".into(),
            sql: "CREATE TABLE parent (id INTEGER PRIMARY KEY);
                  CREATE TABLE child (p INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);"
                .into(),
        },
    ])
    .unwrap();
    let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
    c.execute("INSERT INTO child (p) VALUES (7)", vec![]).await.unwrap();
    let e = c.finish_with(true, Some(Box::new(UndoableRow { x: "violated", seq: None }))).await.unwrap_err();
    assert!(format!("{e:#}").contains("FOREIGN KEY"), "{e:#}");
    assert!(beside_rows(d.path()).is_empty(), "no row for a write SQLite refuses");
    // And a write that is kept has its row.
    let mut c = s.begin(Mode::ReadWrite, soon()).unwrap();
    c.execute("INSERT INTO t (x) VALUES (2)", vec![]).await.unwrap();
    assert!(c.finish_with(true, Some(Box::new(UndoableRow { x: "kept", seq: None }))).await.unwrap());
    assert_eq!((t_count(&s), beside_rows(d.path())), (1, vec!["kept".to_string()]));
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
                    c.execute("INSERT INTO t (x) VALUES (?1)", vec![Value::Integer(w * 1_000_000 + i)]).await.unwrap();
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
    Box::new(move |c: &Connection| c.prepare_cached(BESIDE_ROW)?.execute([x.to_string()]).map(drop))
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
    let e = s.migrate(&[Migration { name: "0001.sql".into(), sql: "CREATE TABLE t (x INTEGER)".into() }]).unwrap_err();
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
