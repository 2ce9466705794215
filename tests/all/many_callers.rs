//! Many callers at once, as the product is used: tabs, agents and workflows
//! calling one app together, through the real server of the real binary.
//!
//! - writers of one app take turns without stalling each other or the reads;
//! - every acknowledged write is in the store and in the record, even when
//!   the launcher is killed in the middle;
//! - one app's writers waiting their turn do not hold up another app;
//! - a write that cannot have its turn before its deadline hears "busy".

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::support::http::Http;
use crate::support::{Served, TestRoot, beside};

/// What the writers saw: the keys whose `put` was acknowledged, and every
/// answer that was not a success.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) acknowledged: Vec<String>,
    pub(crate) failures: Vec<String>,
}

/// `n` writers, each on its own keep-alive connection, each writing rows with
/// keys of its own (`<prefix>-<writer>-<i>`) until `stop` is set.
pub(crate) fn writers(tab: &Http, n: usize, prefix: &str, stop: &Arc<AtomicBool>) -> Vec<JoinHandle<Seen>> {
    writers_through(tab, n, prefix, stop, false)
}

/// [`writers`]; with `through_failures`, a writer whose connection failed
/// goes on with a new one (the server's process was killed, not the
/// launcher).
pub(crate) fn writers_through(
    tab: &Http,
    n: usize,
    prefix: &str,
    stop: &Arc<AtomicBool>,
    through_failures: bool,
) -> Vec<JoinHandle<Seen>> {
    (0..n)
        .map(|w| {
            let (mut h, stop, prefix) = (beside(tab), stop.clone(), prefix.to_string());
            std::thread::spawn(move || {
                let mut seen = Seen::default();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("{prefix}-{w}-{i}");
                    i += 1;
                    match h.request("POST", "/api/call/put", Some(&serde_json::json!({ "key": key }).to_string())) {
                        Ok(r) if r.status == 200 => seen.acknowledged.push(key),
                        Ok(r) => seen.failures.push(format!("{}: {}", r.status, String::from_utf8_lossy(&r.body))),
                        Err(e) => {
                            seen.failures.push(format!("{e:#}"));
                            if through_failures {
                                std::thread::sleep(std::time::Duration::from_millis(20));
                                continue;
                            }
                            // A connection that failed (the launcher is gone): stop this writer.
                            break;
                        }
                    }
                }
                seen
            })
        })
        .collect()
}

pub(crate) fn gather(handles: Vec<JoinHandle<Seen>>) -> Seen {
    let mut all = Seen::default();
    for h in handles {
        let s = h.join().expect("a writer thread");
        all.acknowledged.extend(s.acknowledged);
        all.failures.extend(s.failures);
    }
    all
}

/// The keys stored in the app's store and the argument hashes of its
/// successful `put` calls in its record, read from the files themselves.
fn stored_and_recorded(t: &TestRoot, app: &str) -> (HashSet<String>, HashSet<String>) {
    let data = t.path().join("apps").join(app).join("data");
    let store = rusqlite::Connection::open(data.join("app.sqlite")).expect("the store opens");
    let keys = store
        .prepare("SELECT key FROM rows")
        .unwrap()
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .collect::<Result<HashSet<_>, _>>()
        .unwrap();
    let record = rusqlite::Connection::open(data.join("runs.sqlite")).expect("the record opens");
    let hashes = record
        .prepare("SELECT arguments_hash FROM runs WHERE route = 'put' AND outcome = 'ok'")
        .unwrap()
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .collect::<Result<HashSet<_>, _>>()
        .unwrap();
    (keys, hashes)
}

/// Every acknowledged key is stored and has its record row.
pub(crate) fn assert_kept(t: &TestRoot, app: &str, acknowledged: &[String]) {
    let (keys, hashes) = stored_and_recorded(t, app);
    let missing: Vec<&String> = acknowledged.iter().filter(|k| !keys.contains(*k)).collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged rows are not in the store: {:?}",
        missing.len(),
        &missing[..5.min(missing.len())]
    );
    let unrecorded: Vec<&String> = acknowledged
        .iter()
        .filter(|k| !hashes.contains(&autoapp::gate::arguments_hash(&serde_json::json!({ "key": k }))))
        .collect();
    assert!(
        unrecorded.is_empty(),
        "{} acknowledged writes have no record row: {:?}",
        unrecorded.len(),
        &unrecorded[..5.min(unrecorded.len())]
    );
}

pub(crate) const QUIET: &str = "opener = \"none\"\n";

#[test]
fn sixty_four_writers_of_one_app_all_succeed_and_a_reader_beside_them_keeps_answering() {
    let t = TestRoot::with_config(QUIET);
    t.install("bench");
    let served = Served::start(&t, &["serve", "bench"]);
    let tab = served.tab("bench");

    let stop = Arc::new(AtomicBool::new(false));
    let handles = writers(&tab, 64, "w", &stop);
    // A reader of the same app, alongside: reads never wait for writes.
    let reader = {
        let (mut h, stop) = (beside(&tab), stop.clone());
        std::thread::spawn(move || {
            let mut answers = 0;
            while !stop.load(Ordering::Relaxed) {
                let r = h.request("POST", "/api/call/count", Some("{}")).expect("the reader's call");
                assert_eq!(r.status, 200, "count answered {}", String::from_utf8_lossy(&r.body));
                answers += 1;
            }
            answers
        })
    };
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let seen = gather(handles);
    let reads = reader.join().expect("the reader");
    served.stop();

    assert!(
        seen.failures.is_empty(),
        "{} writes failed, e.g. {:?}",
        seen.failures.len(),
        &seen.failures[..3.min(seen.failures.len())]
    );
    assert!(seen.acknowledged.len() >= 64, "only {} writes in 3 s", seen.acknowledged.len());
    assert!(reads >= 10, "the reader was answered only {reads} times while the writers wrote");
    assert_kept(&t, "bench", &seen.acknowledged);
    let (keys, _) = stored_and_recorded(&t, "bench");
    assert_eq!(keys.len(), seen.acknowledged.len(), "the store holds exactly the acknowledged rows");
}

#[test]
fn every_acknowledged_write_is_stored_and_recorded_when_the_launcher_is_killed_in_the_middle() {
    killed_in_the_middle("process");
}

#[test]
fn every_acknowledged_write_is_stored_and_recorded_when_the_launcher_is_killed_in_the_middle_at_power() {
    killed_in_the_middle("power");
}

/// 32 writers, the launcher killed (SIGKILL) while their writes are being
/// answered, at the configuration's `durability`.
fn killed_in_the_middle(durability: &str) {
    let t = TestRoot::with_config(&format!("{QUIET}durability = \"{durability}\"\n"));
    t.install("bench");
    let served = Served::start(&t, &["serve", "bench"]);
    let tab = served.tab("bench");

    let stop = Arc::new(AtomicBool::new(false));
    let handles = writers(&tab, 32, "k", &stop);
    // Kill it while writes are being answered: wait until some are.
    let mut probe = beside(&tab);
    let mut before = 0;
    let give_up = Instant::now() + Duration::from_secs(60);
    while before < 200 {
        assert!(Instant::now() < give_up, "the writers wrote only {before} rows");
        let r = probe.request("POST", "/api/call/count", Some("{}")).expect("count");
        before = serde_json::from_slice::<serde_json::Value>(&r.body).unwrap()["rows"].as_u64().unwrap();
    }
    served.kill();
    let seen = gather(handles);
    stop.store(true, Ordering::Relaxed);
    assert!(seen.acknowledged.len() >= 100, "{} acknowledged", seen.acknowledged.len());

    // The next start (any command) finds the data as the crash left it.
    let count: serde_json::Value = t.call("bench", "count", "{}");
    assert!(count["rows"].as_u64().unwrap() >= seen.acknowledged.len() as u64);
    assert_kept(&t, "bench", &seen.acknowledged);
}

#[test]
fn one_apps_writers_waiting_their_turn_do_not_hold_up_another_app() {
    let t = TestRoot::with_config(&format!("{QUIET}call_deadline_ms = 4000\n"));
    t.install("hostile");
    t.install("bench");
    let launcher = Served::start(&t, &["open"]);
    let mut panel = launcher.tab("the Autoapp panel");
    let mut tab = |app: &str| launcher.opened(&mut panel, app);
    let hostile = tab("hostile");
    let mut bench = tab("bench");

    // The hostile app holds its turn to write until its deadline…
    let holder = {
        let mut h = beside(&hostile);
        std::thread::spawn(move || h.request("POST", "/api/call/mark.then-spin", Some("{}")).unwrap().status)
    };
    // …and more of its writers queue up behind it, one per connection.
    let queued = Arc::new(AtomicUsize::new(0));
    let waiting: Vec<JoinHandle<(u16, String)>> = (0..16)
        .map(|_| {
            let (mut h, queued) = (beside(&hostile), queued.clone());
            std::thread::spawn(move || {
                queued.fetch_add(1, Ordering::SeqCst);
                let r = h.request("POST", "/api/call/mark", Some("{}")).unwrap();
                (r.status, String::from_utf8_lossy(&r.body).into_owned())
            })
        })
        .collect();
    while queued.load(Ordering::SeqCst) < 16 {
        std::thread::yield_now();
    }
    // Another app's writes and reads are answered while all of that waits.
    for i in 0..20 {
        let r = bench.request("POST", "/api/call/put", Some(&format!(r#"{{"key":"other-{i}"}}"#))).unwrap();
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let r = bench.request("POST", "/api/call/count", Some("{}")).unwrap();
        assert_eq!(r.status, 200);
    }
    assert!(!holder.is_finished(), "the other app's 40 calls were answered while the hostile app still held its turn");
    assert_eq!(holder.join().unwrap(), 502, "the holder is stopped at its deadline");
    for w in waiting {
        // Each has its turn after the holder, or (queued within a tick of
        // it) hears that the app was busy until its own deadline.
        let (status, body) = w.join().unwrap();
        assert!(status == 200 || status == 409, "a queued writer answered {status}: {body}");
        if status == 409 {
            assert!(body.contains("the app is busy; try again"), "{body}");
        }
    }
    launcher.stop();
}

#[test]
fn a_write_that_cannot_have_its_turn_before_its_deadline_hears_the_app_is_busy() {
    let t = TestRoot::with_config("call_deadline_ms = 1000\n");
    t.install("hostile");
    t.call("hostile", "mark", "{}");
    // Another process holds the app's write lock (a person's own sqlite3
    // shell, say).
    let store = t.path().join("apps/hostile/data/app.sqlite");
    let other = rusqlite::Connection::open(&store).unwrap();
    other.execute_batch("BEGIN IMMEDIATE; INSERT INTO marks (note) VALUES ('held')").unwrap();

    let started = Instant::now();
    let line = t.refused(&["call", "hostile", "mark"]);
    assert!(line.contains("the app is busy; try again"), "{line}");
    assert!(started.elapsed() >= Duration::from_millis(900), "it waited for its deadline, not less");
    // Reads never wait for writes.
    assert_eq!(t.call("hostile", "count", "{}")["marks"], 1);

    other.execute_batch("COMMIT").unwrap();
    t.call("hostile", "mark", "{}");
    assert_eq!(t.call("hostile", "count", "{}")["marks"], 3);
}

#[test]
fn calls_beyond_the_instance_slots_wait_for_one_instead_of_failing() {
    let t = TestRoot::with_config(&format!("{QUIET}max_instances = 2\ncall_deadline_ms = 1500\n"));
    t.install("hostile");
    let served = Served::start(&t, &["serve", "hostile"]);
    let tab = served.tab("hostile");
    // Both slots are taken by calls that run until their deadline…
    let spinners: Vec<JoinHandle<u16>> = (0..2)
        .map(|_| {
            let mut h = beside(&tab);
            std::thread::spawn(move || h.request("POST", "/api/call/spin", Some("{}")).unwrap().status)
        })
        .collect();
    // (nothing outside the launcher can see a slot taken: give them a moment
    // to start, far less than their deadline)
    std::thread::sleep(Duration::from_millis(300));
    // …so these wait for a slot, and are answered when one frees.
    let waiting: Vec<JoinHandle<(u16, String)>> = (0..4)
        .map(|_| {
            let mut h = beside(&tab);
            std::thread::spawn(move || {
                let r = h.request("POST", "/api/call/count", Some("{}")).unwrap();
                (r.status, String::from_utf8_lossy(&r.body).into_owned())
            })
        })
        .collect();
    for s in spinners {
        assert_eq!(s.join().unwrap(), 502, "a spinner is stopped at its deadline");
    }
    for w in waiting {
        let (status, body) = w.join().unwrap();
        assert_eq!(status, 200, "a call beyond the slots waited for one: {body}");
    }
    served.stop();
}

/// Issue 76: 64 writers and a reader while the record lets its oldest rows
/// go (20,000 old reads over a bound of 1 MiB and one day): no write fails,
/// every acknowledged write is stored and keeps its row, and the old reads
/// are let go, counted by day.
#[test]
fn sixty_four_writers_while_the_record_lets_rows_go_lose_nothing_acknowledged() {
    let t = TestRoot::with_config(&format!("{QUIET}record_keep_mib = 1\nrecord_keep_days = 1\n"));
    t.install("bench");
    let record = t.path().join("apps/bench/data/runs.sqlite");
    {
        let mut conn = rusqlite::Connection::open(&record).expect("the record opens");
        let tx = conn.transaction().unwrap();
        for i in 0..20_000 {
            tx.execute(
                "INSERT INTO runs (time, request_id, channel, caller, app, release, route, effect, arguments_hash,
                                   decision, reason, outcome, duration_ms, answered_by)
                 VALUES ('2020-01-01T00:00:00Z', ?1, 'ai', 'agent', 'bench', 'r', 'count', 'read', 'h',
                         'allowed', '', 'ok', 1.0, 'nobody')",
                [format!("old-{i}")],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    let served = Served::start(&t, &["serve", "bench"]);
    let tab = served.tab("bench");
    let stop = Arc::new(AtomicBool::new(false));
    let handles = writers(&tab, 64, "k", &stop);
    let reader = {
        let (mut h, stop) = (beside(&tab), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let r = h.request("POST", "/api/call/count", Some("{}")).expect("the reader's call");
                assert_eq!(r.status, 200, "count answered {}", String::from_utf8_lossy(&r.body));
            }
        })
    };
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, Ordering::Relaxed);
    let seen = gather(handles);
    reader.join().expect("the reader");
    served.stop();
    assert!(seen.failures.is_empty(), "{} writes failed, e.g. {:?}", seen.failures.len(), seen.failures.first());
    assert!(seen.acknowledged.len() >= 64, "only {} writes in 4 s", seen.acknowledged.len());
    assert_kept(&t, "bench", &seen.acknowledged);
    let conn = rusqlite::Connection::open(&record).expect("the record opens");
    let old: i64 = conn.query_row("SELECT count(*) FROM runs WHERE time < '2021'", [], |r| r.get(0)).unwrap();
    let counted: i64 =
        conn.query_row("SELECT coalesce(sum(calls), 0) FROM days WHERE day = '2020-01-01'", [], |r| r.get(0)).unwrap();
    assert!(old < 20_000, "no old row was let go");
    assert_eq!(old + counted, 20_000, "each old row is held or counted, once");
}
