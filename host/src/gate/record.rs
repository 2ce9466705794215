//! The gate's record: every decision and the outcome of the call it let
//! through, one row per call, in `runs.sqlite` of the data folder the call ran
//! against (a preview's copy has its own).
//!
//! Rows go to a writer thread that commits them in batches, so recording never
//! costs a call a synchronous disk flush; [`Recorder::flush`] (called on every
//! clean stop, and by `Drop`) waits until every row sent is committed. No
//! input value, secret, token or address is stored: only the arguments' hash.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::mpsc;
use std::thread::JoinHandle;

use anyhow::Context as _;
use rusqlite::Connection;
use serde::{Deserialize, Serialize};

/// The record's file inside a data folder.
pub const RUNS_FILE: &str = "runs.sqlite";

/// Rows committed together at most.
const BATCH: usize = 4096;

/// How long the writer gathers rows after the first before it commits them:
/// the rows of a call reach the disk within about this long. Fewer, larger
/// transactions keep the writer's work (and its interference with the calls
/// running beside it) small; docs/performance.md (P1) has the figures. A
/// clean stop flushes everything; a crash of the host can lose the rows of
/// this last moment.
const GATHER: std::time::Duration = std::time::Duration::from_millis(50);

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
}

enum Msg {
    Row(PathBuf, Box<Row>),
    Flush(mpsc::Sender<()>),
}

/// The writer of every record this process keeps.
pub struct Recorder {
    tx: Mutex<Option<mpsc::Sender<Msg>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    pub fn new() -> Recorder {
        let (tx, rx) = mpsc::channel::<Msg>();
        let thread = std::thread::Builder::new()
            .name("autoapp-record".into())
            .spawn(move || writer(rx))
            .expect("the record's writer thread starts");
        Recorder { tx: Mutex::new(Some(tx)), thread: Mutex::new(Some(thread)) }
    }

    /// Queues `row` for the record of the data folder `data`.
    pub fn write(&self, data: &Path, row: Row) {
        if let Some(tx) = self.tx.lock().expect("recorder").as_ref() {
            let _ = tx.send(Msg::Row(data.to_path_buf(), Box::new(row)));
        }
    }

    /// Waits until every row queued so far is committed.
    pub fn flush(&self) {
        let (ack, done) = mpsc::channel();
        let sent = self.tx.lock().expect("recorder").as_ref().map(|tx| tx.send(Msg::Flush(ack)).is_ok());
        if sent == Some(true) {
            let _ = done.recv();
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // Closing the channel lets the writer commit what is left and end.
        self.tx.lock().expect("recorder").take();
        if let Some(t) = self.thread.lock().expect("recorder").take() {
            let _ = t.join();
        }
    }
}

fn writer(rx: mpsc::Receiver<Msg>) {
    let mut conns: HashMap<PathBuf, Connection> = HashMap::new();
    while let Ok(first) = rx.recv() {
        // Gather what comes in the next moment into the same transaction:
        // while this thread is not waiting, queuing a row wakes nobody, so a
        // busy host pays no system call per row and one commit per batch.
        if matches!(first, Msg::Row(..)) {
            std::thread::sleep(GATHER);
        }
        let mut rows: Vec<(PathBuf, Box<Row>)> = Vec::new();
        let mut acks = Vec::new();
        let mut next = Some(first);
        while let Some(m) = next.take() {
            match m {
                Msg::Row(p, r) => rows.push((p, r)),
                Msg::Flush(a) => acks.push(a),
            }
            if rows.len() < BATCH {
                next = rx.try_recv().ok();
            }
        }
        let mut by_file: HashMap<PathBuf, Vec<Box<Row>>> = HashMap::new();
        for (p, r) in rows {
            by_file.entry(p).or_default().push(r);
        }
        for (data, rows) in by_file {
            if let Err(e) = commit(&mut conns, &data, &rows) {
                tracing::error!("cannot write {} rows to the record: {e:#}", rows.len());
            }
        }
        for a in acks {
            let _ = a.send(());
        }
    }
}

fn open(data: &Path) -> anyhow::Result<Connection> {
    std::fs::create_dir_all(data).with_context(|| format!("cannot create {}", data.display()))?;
    let conn = Connection::open(data.join(RUNS_FILE)).context("cannot open the record")?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = NORMAL;
         CREATE TABLE IF NOT EXISTS runs (
             seq INTEGER PRIMARY KEY,
             time TEXT NOT NULL, request_id TEXT NOT NULL, channel TEXT NOT NULL,
             caller TEXT NOT NULL, app TEXT NOT NULL, release TEXT NOT NULL,
             route TEXT NOT NULL, effect TEXT NOT NULL, arguments_hash TEXT NOT NULL,
             decision TEXT NOT NULL, reason TEXT NOT NULL, outcome TEXT NOT NULL,
             duration_ms REAL NOT NULL);",
    )?;
    Ok(conn)
}

fn commit(conns: &mut HashMap<PathBuf, Connection>, data: &Path, rows: &[Box<Row>]) -> anyhow::Result<()> {
    if !conns.contains_key(data) {
        conns.insert(data.to_path_buf(), open(data)?);
    }
    let conn = conns.get_mut(data).expect("just opened");
    let tx = conn.transaction()?;
    {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO runs (time, request_id, channel, caller, app, release, route, effect,
                               arguments_hash, decision, reason, outcome, duration_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        )?;
        for r in rows {
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
                r.duration_ms
            ])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// The record of the data folder `data`, oldest first (the newest `limit`).
pub fn read(data: &Path, limit: usize) -> anyhow::Result<Vec<Row>> {
    let path = data.join(RUNS_FILE);
    if !path.exists() {
        return Ok(Vec::new());
    }
    let conn = Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .context("cannot open the record")?;
    let mut stmt = conn.prepare(
        "SELECT time, request_id, channel, caller, app, release, route, effect, arguments_hash,
                decision, reason, outcome, duration_ms
         FROM (SELECT * FROM runs ORDER BY seq DESC LIMIT ?1) ORDER BY seq",
    )?;
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
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(i: usize) -> Row {
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
        }
    }

    #[test]
    fn every_row_sent_before_a_clean_stop_is_kept() {
        let d = tempfile::tempdir().unwrap();
        let rec = Recorder::new();
        for i in 0..2000 {
            rec.write(d.path(), row(i));
        }
        drop(rec);
        let rows = read(d.path(), 10_000).unwrap();
        assert_eq!(rows.len(), 2000);
        assert_eq!(rows[1999].request_id, "r1999");
    }

    #[test]
    fn flush_waits_for_the_rows_already_sent() {
        let d = tempfile::tempdir().unwrap();
        let rec = Recorder::new();
        rec.write(d.path(), row(1));
        rec.flush();
        assert_eq!(read(d.path(), 10).unwrap().len(), 1);
    }
}
