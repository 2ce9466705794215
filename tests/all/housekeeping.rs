//! Housekeeping: backups that restore (taken while writers write, checked
//! before anything is placed, all or nothing at every step), prune's list
//! being exactly what it removes, and the app's log file for the person and
//! the engineer.

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::lifecycle::Notes;
use crate::support::TestRoot;

/// Notes, activated, with `titles` written.
fn notes_with(titles: &[&str]) -> Notes {
    let n = Notes::new();
    let v1 = n.build();
    n.root.ok(&["activate", "notes", &v1]);
    for t in titles {
        n.add(t);
    }
    n
}

fn backup(root: &TestRoot, app: &str, to: &Path) -> PathBuf {
    let out = root.ok(&["backup", app, "--to", to.to_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    PathBuf::from(v["file"].as_str().unwrap())
}

fn leftovers(root: &TestRoot) -> Vec<String> {
    std::fs::read_dir(root.path().join("apps"))
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

/// 16 writers write through separate processes; a backup taken meanwhile
/// holds every write acknowledged before it began, and restores on a fresh
/// root into an app that answers the same reads.
#[test]
fn a_backup_taken_while_sixteen_writers_write_holds_every_acknowledged_write_and_restores_on_a_fresh_root() {
    let n = notes_with(&["before"]);
    let root = std::sync::Arc::new(n.root.path().to_path_buf());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = Instant::now();
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let (root, stop, answered) = (root.clone(), stop.clone(), answered.clone());
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let mut k = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let title = format!("w{w}-{k}");
                    let out = Command::new(env!("CARGO_BIN_EXE_autoapp"))
                        .args(["--root", root.to_str().unwrap(), "call", "notes", "notes.add"])
                        .arg(json!({ "title": title }).to_string())
                        .env("AUTOAPP_LOG", "off")
                        .output()
                        .unwrap();
                    // Acknowledged: the call answered ok; when, from the test's clock.
                    if out.status.success() {
                        acked.push((title, started.elapsed()));
                        answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    k += 1;
                }
                acked
            })
        })
        .collect();
    // Until the writers have been answered (however slow the machine): a
    // note is in the store a moment before its writer's process has ended.
    let deadline = Instant::now() + Duration::from_secs(120);
    while answered.load(std::sync::atomic::Ordering::SeqCst) < 20 {
        assert!(Instant::now() < deadline, "the writers wrote");
        std::thread::sleep(Duration::from_millis(100));
    }
    let dir = tempfile::tempdir().unwrap();
    let began = started.elapsed();
    let file = backup(&n.root, "notes", dir.path());
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let acked: Vec<(String, Duration)> = writers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    let before: Vec<&String> = acked.iter().filter(|(_, at)| *at < began).map(|(t, _)| t).collect();
    assert!(before.len() >= 16, "the writers wrote before the backup began: {}", before.len());
    assert!(acked.iter().any(|(_, at)| *at > began), "and went on writing while it was taken");

    // A fresh root: the restore checks every hash and SQLite's integrity first.
    let fresh = TestRoot::new();
    let said = fresh.ok(&["restore", file.to_str().unwrap()]);
    assert!(said.contains("restored notes from a backup of notes"), "{said}");
    let restored: Vec<String> = fresh.call("notes", "notes.list", r#"{"limit":500}"#)["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["title"].as_str().unwrap().to_string())
        .collect();
    for t in &before {
        assert!(restored.contains(t), "{t} was acknowledged before the backup began but is not in it");
    }
    assert!(restored.contains(&"before".to_string()));
    // Every restored note was written by a writer (nothing made up, nothing torn).
    let all: Vec<&String> = acked.iter().map(|(t, _)| t).collect();
    for t in restored.iter().filter(|t| *t != "before") {
        assert!(all.contains(&t), "{t} was never acknowledged");
    }
    let record = fresh.ok(&["runs", "notes", "--json", "--limit", "5"]);
    assert!(record.contains("\"restore\""), "the restore is recorded: {record}");
    let original = n.root.ok(&["runs", "notes", "--json", "--limit", "100000"]);
    let name = file.file_name().unwrap().to_string_lossy();
    assert!(original.contains(&format!("wrote {name}")), "the backup is recorded with its file: {original}");
}

/// The same through a serving launcher: 16 writers on 16 connections of the
/// app's tab, the backup taken by another process meanwhile, the restored
/// store read directly.
#[test]
fn a_backup_taken_while_the_launcher_serves_sixteen_writers_holds_every_write_acknowledged_before_it() {
    let t = TestRoot::with_config("opener = \"none\"\n");
    t.install("bench");
    let served = crate::support::Served::start(&t, &["serve", "bench"]);
    let tab = served.tab("bench");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = Instant::now();
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let (mut h, stop) = (crate::support::beside(&tab), stop.clone());
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let key = format!("w{w}-{i}");
                    i += 1;
                    let r = h.request("POST", "/api/call/put", Some(&json!({ "key": key }).to_string())).unwrap();
                    if r.status == 200 {
                        acked.push((key, started.elapsed()));
                    }
                }
                acked
            })
        })
        .collect();
    // Until the writers have written (however slow the machine).
    let mut probe = crate::support::beside(&tab);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let r = probe.request("POST", "/api/call/count", Some("{}")).unwrap();
        if serde_json::from_slice::<Value>(&r.body).unwrap()["rows"].as_u64().unwrap() >= 150 {
            break;
        }
        assert!(Instant::now() < deadline, "the writers wrote");
        std::thread::sleep(Duration::from_millis(50));
    }
    let dir = tempfile::tempdir().unwrap();
    let began = started.elapsed();
    let file = backup(&t, "bench", dir.path());
    let took = started.elapsed() - began;
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let acked: Vec<(String, Duration)> = writers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    let before: Vec<&String> = acked.iter().filter(|(_, at)| *at < began).map(|(k, _)| k).collect();
    let during = acked.iter().filter(|(_, at)| *at >= began && *at < began + took).count();
    assert!(before.len() >= 100, "{} writes acknowledged before the backup began", before.len());
    assert!(during > 0, "the writers went on while it was taken ({took:?})");
    served.stop();

    let fresh = TestRoot::new();
    fresh.ok(&["restore", file.to_str().unwrap()]);
    let conn = rusqlite::Connection::open(fresh.path().join("apps/bench/data/app.sqlite")).unwrap();
    let keys: std::collections::HashSet<String> = conn
        .prepare("SELECT key FROM rows")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for k in &before {
        assert!(keys.contains(*k), "{k} was acknowledged before the backup began but is not in it");
    }
    let all: std::collections::HashSet<&String> = acked.iter().map(|(k, _)| k).collect();
    assert!(keys.iter().all(|k| all.contains(k)), "every row in the backup was acknowledged (or was being)");
    eprintln!(
        "backup while serving: {} writes before it, {during} during its {took:?}, {} rows in it",
        before.len(),
        keys.len()
    );
    let count = fresh.call("bench", "count", "{}");
    assert_eq!(count["rows"].as_u64().unwrap() as usize, keys.len(), "the restored app reads its rows");
}

/// A kill at every step of a restore leaves the app whole or absent, and
/// the next command finishes or undoes it.
#[test]
fn a_kill_at_every_step_of_a_restore_leaves_nothing_half_placed() {
    let n = notes_with(&["one", "two"]);
    let dir = tempfile::tempdir().unwrap();
    let file = backup(&n.root, "notes", dir.path());
    for (point, placed) in [
        ("restore:begun", false),
        ("restore:unpacked", false),
        ("restore:verified", false),
        ("restore:staged", false),
        ("restore:placed", true),
    ] {
        let fresh = TestRoot::new();
        let out = Command::new(env!("CARGO_BIN_EXE_autoapp"))
            .args(["--root", fresh.path().to_str().unwrap(), "restore", file.to_str().unwrap()])
            .env("AUTOAPP_FAULT", point)
            .env("AUTOAPP_LOG", "off")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{point}: the restore was killed");
        // The next command recovers first.
        let recovered = fresh.run(&["space"]);
        let stderr = String::from_utf8_lossy(&recovered.stderr);
        assert!(!leftovers(&fresh).iter().any(|n| n.starts_with(".restore-")), "{point}: {:?}", leftovers(&fresh));
        if placed {
            assert!(stderr.contains("the restore of notes was finished"), "{point}: {stderr}");
            let titles = fresh.call("notes", "notes.list", "{}");
            assert_eq!(titles["notes"].as_array().unwrap().len(), 2, "{point}: whole");
            let record = fresh.ok(&["runs", "notes", "--json"]);
            assert!(record.contains("recorded by recovery"), "{point}: {record}");
        } else {
            assert!(stderr.contains("an interrupted restore"), "{point}: {stderr}");
            assert!(!fresh.path().join("apps/notes").exists(), "{point}: nothing placed");
            assert!(!fresh.path().join("cache/compiled/notes").exists(), "{point}: nor the code compiled for it");
            // And the restore can simply be done again.
            fresh.ok(&["restore", file.to_str().unwrap()]);
            assert_eq!(fresh.call("notes", "notes.list", "{}")["notes"].as_array().unwrap().len(), 2);
        }
    }
}

/// A backup's entries: (name, bytes), in order.
type Entries = Vec<(String, Vec<u8>)>;

/// The archive's entries.
fn entries(file: &Path) -> Entries {
    let mut a = tar::Archive::new(zstd::Decoder::new(std::fs::File::open(file).unwrap()).unwrap());
    a.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let name = e.path().unwrap().to_string_lossy().into_owned();
            let mut bytes = Vec::new();
            e.read_to_end(&mut bytes).unwrap();
            (name, bytes)
        })
        .collect()
}

/// Writes `entries` as a backup file (names as given, even hostile ones).
fn write_entries(file: &Path, entries: &Entries) {
    let mut tar = tar::Builder::new(zstd::Encoder::new(std::fs::File::create(file).unwrap(), 3).unwrap());
    for (name, bytes) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_size(bytes.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        // `set_path` refuses `..`; a hostile file is written byte by byte.
        let raw = name.as_bytes();
        h.as_old_mut().name[..raw.len()].copy_from_slice(raw);
        h.set_cksum();
        tar.append(&h, bytes.as_slice()).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap();
}

fn sha(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Rewrites the manifest's entry for `path` to match `bytes` (a tamperer who
/// knows the format).
fn relisted(manifest: &[u8], path: &str, bytes: &[u8]) -> Vec<u8> {
    let mut m: Value = serde_json::from_slice(manifest).unwrap();
    for f in m["files"].as_array_mut().unwrap() {
        if f["path"] == path {
            f["bytes"] = json!(bytes.len());
            f["sha256"] = json!(sha(bytes));
        }
    }
    serde_json::to_vec(&m).unwrap()
}

#[test]
fn a_damaged_tampered_or_foreign_backup_is_refused_and_nothing_is_placed() {
    let n = notes_with(&["one"]);
    let dir = tempfile::tempdir().unwrap();
    let file = backup(&n.root, "notes", dir.path());
    let good = entries(&file);
    assert_eq!(good[0].0, "backup.json");
    let names: Vec<&str> = good.iter().map(|(n, _)| n.as_str()).collect();
    for expected in [
        "data/app.sqlite",
        "data/runs.sqlite",
        "release/component.wasm",
        "release/autoapp.toml",
        "release/release.json",
    ] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    let manifest = good[0].1.clone();
    let with = |f: &dyn Fn(&mut Entries)| -> PathBuf {
        let mut e = good.clone();
        f(&mut e);
        let p = dir.path().join(format!(
            "case-{}.autoapp-backup",
            sha(&serde_json::to_vec(&e.iter().map(|(n, b)| (n, sha(b))).collect::<Vec<_>>()).unwrap())
        ));
        write_entries(&p, &e);
        p
    };
    let index = |name: &str| good.iter().position(|(n, _)| n == name).unwrap();
    let bytes = std::fs::read(&file).unwrap();
    let truncated = dir.path().join("truncated.autoapp-backup");
    std::fs::write(&truncated, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let not_a_backup = dir.path().join("notes.txt");
    std::fs::write(&not_a_backup, "hello").unwrap();

    let mut cases: Vec<(&str, PathBuf, &str)> =
        vec![("truncated", truncated, "cannot be restored"), ("not a backup", not_a_backup, "not an Autoapp backup")];
    // A byte of the data changed, the manifest left as it was.
    let data = index("data/app.sqlite");
    cases.push((
        "tampered data",
        with(&|e| {
            let last = e[data].1.len() - 10;
            e[data].1[last] ^= 0xff;
        }),
        "does not match its hash",
    ));
    // The manifest made to agree with a changed component: the release's id gives it away.
    let comp = index("release/component.wasm");
    cases.push((
        "a component swapped with its hash",
        with(&|e| {
            e[comp].1.extend_from_slice(b"\0evil");
            e[0].1 = relisted(&manifest, "release/component.wasm", &e[comp].1);
        }),
        "do not make its release id",
    ));
    // A database whose pages are garbage, hash recomputed: SQLite's own check.
    cases.push((
        "a corrupt database with its hash",
        with(&|e| {
            let db = &mut e[data].1;
            for b in db.iter_mut().skip(4096).take(4096) {
                *b = 0x5a;
            }
            e[0].1 = relisted(&manifest, "data/app.sqlite", &e[data].1);
        }),
        "integrity",
    ));
    cases.push((
        "an entry the manifest does not list",
        with(&|e| e.push(("../../evil.sh".into(), b"#!/bin/sh\n".to_vec()))),
        "does not list",
    ));
    // Bytes added to the data, the manifest left as it was.
    cases.push((
        "an entry longer than listed",
        with(&|e| e[data].1.extend_from_slice(&[0u8; 4096])),
        "bytes where its list says",
    ));
    // Data with a migration its release does not have, its hash recomputed.
    let migrated = {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(tmp.path(), &good[index("data/app.sqlite")].1).unwrap();
        let conn = rusqlite::Connection::open(tmp.path()).unwrap();
        conn.execute(
            "INSERT INTO _autoapp_migrations (seq, name, sha256, applied_at) VALUES (99, 'migrations/0099_x.sql', 'ab', 'now')",
            [],
        )
        .unwrap();
        conn.pragma_update(None, "journal_mode", "DELETE").unwrap();
        drop(conn);
        std::fs::read(tmp.path()).unwrap()
    };
    cases.push((
        "data with a migration its release does not have",
        with(&|e| {
            e[data].1 = migrated.clone();
            e[0].1 = relisted(&manifest, "data/app.sqlite", &migrated);
        }),
        "does not have exactly its release's migrations",
    ));
    // A release.json that does not describe its component (what prune keys compiled code on).
    let info = index("release/release.json");
    cases.push((
        "a release.json about another component",
        with(&|e| {
            let mut r: Value = serde_json::from_slice(&e[info].1).unwrap();
            r["component_sha256"] = json!("0".repeat(64));
            e[info].1 = serde_json::to_vec(&r).unwrap();
            e[0].1 = relisted(&manifest, "release/release.json", &e[info].1);
        }),
        "does not describe its component",
    ));
    // A name that `Path::join` would read as absolute (`release//…`), listed
    // with its hash: never written, anywhere.
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("planted");
    let sneaky = format!("release//{}", target.display().to_string().trim_start_matches('/'));
    cases.push((
        "an entry whose name leads out through an empty part",
        with(&|e| {
            let body = b"planted".to_vec();
            let mut m: Value = serde_json::from_slice(&manifest).unwrap();
            m["files"]
                .as_array_mut()
                .unwrap()
                .push(json!({ "path": sneaky, "bytes": body.len(), "sha256": sha(&body) }));
            e[0].1 = serde_json::to_vec(&m).unwrap();
            e.push((sneaky.clone(), body));
        }),
        "is not a plain relative name",
    ));
    cases.push((
        "a missing entry",
        with(&|e| {
            e.remove(data);
        }),
        "is missing",
    ));
    let version = |v: u64| {
        let mut m: Value = serde_json::from_slice(&manifest).unwrap();
        m["version"] = json!(v);
        m["autoapp"] = json!("9.9.9");
        serde_json::to_vec(&m).unwrap()
    };
    cases.push(("from a newer Autoapp", with(&|e| e[0].1 = version(2)), "written by a newer Autoapp (9.9.9"));
    cases.push(("of another format version", with(&|e| e[0].1 = version(0)), "is not one Autoapp wrote"));
    cases.push((
        "of another format",
        with(&|e| {
            let mut m: Value = serde_json::from_slice(&manifest).unwrap();
            m["format"] = json!("something-else");
            e[0].1 = serde_json::to_vec(&m).unwrap();
        }),
        "not of an Autoapp backup",
    ));

    // A small file whose first header claims a long name of 200 MB (zeros
    // compress to almost nothing): the reading stops at what a manifest may be.
    let bomb = dir.path().join("bomb.autoapp-backup");
    {
        let mut tar = tar::Builder::new(zstd::Encoder::new(std::fs::File::create(&bomb).unwrap(), 1).unwrap());
        let mut h = tar::Header::new_gnu();
        let size = 200 << 20;
        h.set_entry_type(tar::EntryType::GNULongName);
        h.set_size(size);
        h.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
        h.set_cksum();
        tar.append(&h, std::io::repeat(0).take(size)).unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_size(manifest.len() as u64);
        h.set_path("backup.json").unwrap();
        h.set_cksum();
        tar.append(&h, manifest.as_slice()).unwrap();
        tar.into_inner().unwrap().finish().unwrap();
    }
    assert!(std::fs::metadata(&bomb).unwrap().len() < 1 << 20, "a small file");
    cases.push(("a long name of 200 MB", bomb, "a long name that declares 209715200 bytes"));

    for (case, path, words) in cases {
        let fresh = TestRoot::new();
        let said = fresh.refused(&["restore", path.to_str().unwrap()]);
        assert!(said.len() < 2000, "{case}: a refusal is a sentence, whatever the file names ({} bytes)", said.len());
        assert!(said.contains(words), "{case}: `{said}` should say `{words}`");
        assert!(!target.exists(), "{case}: a file was planted outside the root");
        assert!(!fresh.path().join("apps/notes").exists(), "{case}: nothing placed");
        assert!(leftovers(&fresh).is_empty(), "{case}: no staging left: {:?}", leftovers(&fresh));
        assert!(!fresh.path().join("evil.sh").exists() && !fresh.path().parent().unwrap().join("evil.sh").exists());
    }

    // Grants travel only as `autoapp grant` would grant them here: notes asks
    // for no network and no folder, so neither is kept, and each is said.
    let grants = json!({
        "network": [{ "scheme": "https", "host": "example.com", "wildcard": false, "port": 443 }],
        "files": { "docs": { "path": "/nonexistent/autoapp-docs", "access": "read" } },
    });
    std::fs::write(n.app_dir().join("grants.json"), grants.to_string()).unwrap();
    let with_grants = backup(&n.root, "notes", dir.path());
    let said = n.root.ok(&["restore", with_grants.to_str().unwrap(), "--as", "notes-granted"]);
    assert!(said.contains("the grant \"network:https://example.com\" → \"https://example.com\" is not kept"), "{said}");
    assert!(said.contains("the grant \"files:docs\" → \"/nonexistent/autoapp-docs\" is not kept"), "{said}");
    let kept: Value =
        serde_json::from_str(&std::fs::read_to_string(n.root.path().join("apps/notes-granted/grants.json")).unwrap())
            .unwrap();
    assert_eq!(kept["network"], json!([]));
    assert_eq!(kept["files"], json!({}));

    // Over an existing app: refused, with how to pick another id; --as places it beside.
    let said = n.root.refused(&["restore", file.to_str().unwrap()]);
    assert!(said.contains("already an app `notes`") && said.contains("--as notes-restored"), "{said}");
    n.root.ok(&["restore", file.to_str().unwrap(), "--as", "notes-copy"]);
    // The same reads, field for field.
    assert_eq!(n.root.call("notes-copy", "notes.list", "{}"), n.root.call("notes", "notes.list", "{}"));
    assert_eq!(n.titles(&[]), ["one"], "the original untouched");
}

/// Runs `autoapp` with the file size limited (as a full disk would stop a
/// write) and SIGXFSZ ignored, so a write fails instead of killing it.
fn with_small_disk(root: &TestRoot, args: &[&str]) -> std::process::Output {
    let mut cmd = format!(
        "trap '' XFSZ; ulimit -f 40; exec '{}' --root '{}'",
        env!("CARGO_BIN_EXE_autoapp"),
        root.path().display()
    );
    for a in args {
        cmd.push_str(&format!(" '{a}'"));
    }
    Command::new("sh").args(["-c", &cmd]).env("AUTOAPP_LOG", "off").output().unwrap()
}

#[test]
fn a_full_disk_during_backup_or_restore_leaves_no_partial_file_and_the_app_untouched() {
    let n = notes_with(&[]);
    // Enough rows that the data is larger than the limit.
    let body = "x".repeat(19_000);
    for i in 0..4 {
        n.root.call("notes", "notes.add", &json!({ "title": format!("n{i}"), "body": body }).to_string());
    }
    let dir = tempfile::tempdir().unwrap();
    let out = with_small_disk(&n.root, &["backup", "notes", "--to", dir.path().to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("no backup of notes was written, and nothing of it is left (when the disk is full"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no partial file");
    assert!(
        !n.root.path().join("cache").read_dir().unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("backup-"))
    );
    assert_eq!(n.titles(&[]).len(), 4, "the app untouched");

    let file = backup(&n.root, "notes", dir.path());
    let fresh = TestRoot::new();
    let out = with_small_disk(&fresh, &["restore", file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("nothing was restored (when the disk is full: free some space"), "{stderr}");
    assert!(leftovers(&fresh).is_empty(), "{:?}", leftovers(&fresh));
    fresh.ok(&["restore", file.to_str().unwrap()]);
}

#[test]
fn a_backup_killed_before_its_file_is_named_leaves_nothing_after_the_next_command() {
    let n = notes_with(&["one"]);
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_autoapp"))
        .args(["--root", n.root.path().to_str().unwrap(), "backup", "notes", "--to", dir.path().to_str().unwrap()])
        .env("AUTOAPP_FAULT", "backup:written")
        .env("AUTOAPP_LOG", "off")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let names = |d: &Path| -> Vec<String> {
        std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
    };
    let left = names(dir.path());
    assert!(left.len() == 1 && left[0].contains(".partial-"), "the kill left its partial file: {left:?}");
    assert!(names(&n.root.path().join("cache")).iter().any(|c| c.starts_with("backup-notes-")));
    let next = n.root.run(&["space"]);
    assert!(
        String::from_utf8_lossy(&next.stderr).contains("an interrupted backup's copy and partial file were removed")
    );
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
    assert!(!names(&n.root.path().join("cache")).iter().any(|c| c.starts_with("backup-")));
    // And a backup now works, and restores.
    let file = backup(&n.root, "notes", dir.path());
    TestRoot::new().ok(&["restore", file.to_str().unwrap()]);
}

/// `prune --dry-run`'s list, as `prune --yes` then removes it.
/// Sets `path`'s modification time an hour back.
fn written_an_hour_ago(path: &std::path::Path) {
    let then = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::open(path).unwrap().set_modified(then).unwrap();
}

fn listed(out: &str) -> Vec<String> {
    out.lines().filter(|l| l.starts_with("remove  ")).map(str::to_string).collect()
}

#[test]
fn prunes_dry_run_lists_exactly_what_prune_removes_and_a_rollback_after_it_still_works() {
    let n = notes_with(&["one"]);
    let mut releases = vec![n.active()];
    for (was, v) in [("0.1.0", "0.1.1"), ("0.1.1", "0.1.2"), ("0.1.2", "0.1.3")] {
        n.edit_manifest(|m| m.replacen(&format!("version = \"{was}\""), &format!("version = \"{v}\""), 1));
        let r = n.build();
        n.root.ok(&["activate", "notes", &r]);
        n.add(&format!("after {v}"));
        releases.push(r);
    }
    // A candidate, built now.
    n.edit_manifest(|m| m.replacen("version = \"0.1.3\"", "version = \"0.2.0\"", 1));
    let candidate = n.build();
    // A rollback set some data aside, and an orphan compiled file in the shared cache.
    let snapshots = n.folders_starting("data-prev-");
    assert_eq!(snapshots.len(), 4);
    let orphan = n.root.path().join("cache/compiled").join(format!("{}-0123456789abcdef.cwasm", "e".repeat(64)));
    std::fs::write(&orphan, vec![0u8; 1000]).unwrap();
    written_an_hour_ago(&orphan);

    // Without --keep, everything built in the last day stays.
    let out = n.root.ok(&["prune", "notes", "--dry-run"]);
    assert!(out.contains("built in the last day"), "{out}");
    assert!(!listed(&out).iter().any(|l| l.contains("release ")), "{out}");

    let dry = n.root.ok(&["prune", "notes", "--dry-run", "--keep", "0"]);
    let shown = listed(&dry);
    assert!(dry.contains("a dry run: nothing was removed"));
    // Kept: the active release, the one a rollback goes back to, the last snapshot.
    assert!(dry.contains(&format!("release {}: the active release", &releases[3][..12])), "{dry}");
    assert!(
        dry.contains(&format!("release {}: a rollback of the last activation goes back to it", &releases[2][..12])),
        "{dry}"
    );
    assert!(
        dry.contains(&format!("snapshot {}: a rollback of the last activation puts it back", snapshots[3])),
        "{dry}"
    );
    for r in [&releases[0], &releases[1], &candidate] {
        assert!(shown.iter().any(|l| l.contains(&format!("release {}", &r[..12]))), "{r} listed: {shown:?}");
    }
    for s in &snapshots[..3] {
        assert!(shown.iter().any(|l| l.contains(s.as_str())), "{s} listed: {shown:?}");
    }
    assert!(!shown.iter().any(|l| l.contains("compiled")), "a one-app prune leaves code others may use: {shown:?}");
    assert_eq!(n.folders_starting("data-prev-").len(), 4, "the dry run removed nothing");

    // Not on a terminal, without --yes: asks, so refuses.
    let said = n.root.refused(&["prune", "notes", "--keep", "0"]);
    assert!(said.contains("--yes"), "{said}");

    let done = n.root.ok(&["prune", "notes", "--keep", "0", "--yes"]);
    assert_eq!(listed(&done), shown, "prune removes exactly the dry run's list");
    assert!(done.contains("removed 3 snapshots, 3 releases"), "{done}");
    assert_eq!(n.folders_starting("data-prev-"), [snapshots[3].clone()]);
    let left: Vec<String> = std::fs::read_dir(n.app_dir().join("releases"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
    let record = n.root.ok(&["runs", "notes", "--json", "--limit", "3"]);
    assert!(record.contains("\"prune\"") && record.contains("removed 3 snapshots, 3 releases"), "{record}");

    // The rollback of the last activation still works, with its snapshot.
    n.root.ok(&["rollback", "notes", "--restore", "--yes"]);
    assert_eq!(n.active(), releases[2]);
    assert_eq!(n.titles(&[]), ["after 0.1.1", "after 0.1.2", "one"]);

    // The whole root: compiled code no release uses goes too.
    let all = n.root.ok(&["prune", "--dry-run"]);
    assert!(listed(&all).iter().any(|l| l.contains("compiled code no release uses")), "{all}");
    n.root.ok(&["prune", "--yes"]);
    assert!(!orphan.exists());
    // The code of the releases left is still there: the app is served.
    assert_eq!(n.titles(&[]).len(), 3);

    // The trash goes only with --trash.
    n.root.ok(&["restore", &backup(&n.root, "notes", n.root.path()).display().to_string(), "--as", "spare"]);
    n.root.ok(&["remove", "spare", "--yes", "spare"]);
    let trash = n.root.path().join("trash");
    assert_eq!(std::fs::read_dir(&trash).unwrap().count(), 1);
    assert!(!listed(&n.root.ok(&["prune", "--dry-run"])).iter().any(|l| l.contains("spare-")));
    let with_trash = n.root.ok(&["prune", "--trash", "--dry-run"]);
    assert!(
        listed(&with_trash).iter().any(|l| l.contains("spare-") && l.contains("an app removed to the trash")),
        "{with_trash}"
    );
    n.root.ok(&["prune", "--trash", "--yes"]);
    assert_eq!(std::fs::read_dir(&trash).unwrap().count(), 0);
}

/// `prune --builds`: a workspace's build output (what cargo writes) goes
/// only when asked, never while a build holds it, and never through a link.
#[test]
fn prune_builds_removes_a_workspaces_build_output_only_when_asked_and_no_build_holds_it() {
    let root = TestRoot::new();
    root.ok(&["create", "hello"]);
    let ws = root.path().join("apps/hello/workspace");
    let target = ws.join("target");
    let out_dir = target.join("wasm32-wasip2/release");
    std::fs::create_dir_all(&out_dir).unwrap();
    std::fs::write(out_dir.join("hello.wasm"), vec![7u8; 64 << 10]).unwrap();
    let lock = std::fs::File::create(out_dir.join(".cargo-lock")).unwrap();
    let build_line = |out: &str| listed(out).into_iter().find(|l| l.contains("the workspace's build output"));

    // Without --builds, build output is not prune's.
    assert!(build_line(&root.ok(&["prune", "hello", "--dry-run"])).is_none());

    // A build holds cargo's lock: kept, and said why.
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let busy = root.ok(&["prune", "hello", "--builds", "--dry-run"]);
    assert!(busy.contains("keep    hello build target: a build is using it now"), "{busy}");
    assert!(build_line(&busy).is_none(), "{busy}");
    let said = root.ok(&["prune", "hello", "--builds", "--yes"]);
    assert!(said.contains("nothing to remove"), "{said}");
    assert!(out_dir.join("hello.wasm").exists());

    // `space` names `--builds` once a workspace is mostly build output (a
    // sparse file: its length, not the disk).
    let hint = "`autoapp prune --builds --dry-run`";
    assert!(!root.ok(&["space", "hello"]).contains(hint));
    std::fs::File::create(out_dir.join("deps.rlib")).unwrap().set_len(60_000_000).unwrap();
    assert!(root.ok(&["space", "hello"]).contains(hint));

    // The build ended: listed with what it frees, then removed, and recorded;
    // a removal a crash interrupted before goes too, and is no obstacle.
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::Unlock).unwrap();
    std::fs::create_dir_all(ws.join(".pruning-target/release")).unwrap();
    let dry = root.ok(&["prune", "hello", "--builds", "--dry-run"]);
    let line = build_line(&dry).unwrap_or_else(|| panic!("{dry}"));
    assert!(line.contains(&target.display().to_string()) && line.contains("60.1 MB"), "{line}");
    assert!(dry.contains(".pruning-target: left by an interrupted removal"), "{dry}");
    let done = root.ok(&["prune", "hello", "--builds", "--yes"]);
    assert_eq!(listed(&done), listed(&dry), "prune removes exactly the dry run's list");
    assert!(done.contains("1 workspace build folder, 1 leftover"), "{done}");
    let left: Vec<String> =
        std::fs::read_dir(&ws).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(!left.iter().any(|n| n == "target" || n.starts_with(".pruning")), "{left:?}");
    assert!(ws.join("Cargo.toml").exists() && ws.join("src/lib.rs").exists(), "the workspace itself stays");
    let record = root.ok(&["runs", "hello", "--json", "--limit", "1"]);
    assert!(record.contains("\"prune\"") && record.contains("1 workspace build folder"), "{record}");

    // A `target` nothing says cargo wrote is the person's: kept, said. A
    // `CACHEDIR.TAG` that is a pipe (a build script may leave anything) is
    // not waited on.
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("notes.txt"), "mine").unwrap();
    let fifo = rustix::fs::FileType::Fifo;
    rustix::fs::mknodat(rustix::fs::CWD, target.join("CACHEDIR.TAG"), fifo, 0o644.into(), 0).unwrap();
    let theirs = root.ok(&["prune", "hello", "--builds", "--yes"]);
    assert!(theirs.contains("nothing in it says cargo wrote it"), "{theirs}");
    std::fs::remove_file(target.join("CACHEDIR.TAG")).unwrap();
    // One of Autoapp's builds holds its marker (shared) from before cargo
    // runs until the component is read: kept while it does.
    let marker = std::fs::File::create(target.join(".autoapp-build")).unwrap();
    rustix::fs::flock(&marker, rustix::fs::FlockOperation::LockShared).unwrap();
    let building = root.ok(&["prune", "hello", "--builds", "--yes"]);
    assert!(building.contains("a build is using it now") && target.join("notes.txt").exists(), "{building}");
    drop(marker);
    std::fs::remove_dir_all(&target).unwrap();

    // A `target` that is a link is not the workspace's own: kept, and what
    // it points to untouched.
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("keep.txt"), "the person's").unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), &target).unwrap();
    let linked = root.ok(&["prune", "hello", "--builds", "--yes"]);
    assert!(linked.contains("the workspace's target is a link"), "{linked}");
    assert!(elsewhere.path().join("keep.txt").exists() && target.is_symlink());
}

#[test]
fn a_prune_during_an_activation_is_refused_and_removes_nothing() {
    let n = notes_with(&["one"]);
    let v1 = n.active();
    n.edit_manifest(|m| m.replacen("version = \"0.1.0\"", "version = \"0.1.1\"", 1));
    let v2 = n.build();
    n.root.ok(&["activate", "notes", &v2]);
    n.root.ok(&["activate", "notes", &v1]);
    let before = n.folders_starting("data-prev-");
    // An activation paused half way (debug builds: AUTOAPP_PAUSE), until the test lets it go.
    let hold = tempfile::NamedTempFile::new().unwrap();
    let mut activation = n.root.paused(&["activate", "notes", &v2], "activate:snapshotted", hold.path());
    let journal = n.app_dir().join("journal.json");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&journal).is_ok_and(|j| j.contains("snapshotted")) {
        assert!(Instant::now() < deadline, "the activation reached its snapshot");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The journal is there: prune says so (a conflict), removes nothing.
    let said = n.root.fails_with(1, &["prune", "notes", "--keep", "0", "--yes"]);
    assert!(said.contains("is under way"), "{said}");
    // Nor is the activation taken for an interrupted one and "recovered" under its feet.
    assert!(!said.contains("recovered"), "{said}");
    drop(hold);
    assert!(activation.wait().unwrap().success());
    let after = n.folders_starting("data-prev-");
    assert_eq!(
        after.len(),
        before.len() + 1,
        "nothing removed, the activation's snapshot added: {before:?} → {after:?}"
    );

    // The lock itself (held by another process for its whole step): a conflict.
    let lock = std::fs::OpenOptions::new().write(true).open(n.root.path().join("apps/.notes.lock")).unwrap();
    lock.lock().unwrap();
    let said = n.root.refused(&["prune", "notes", "--keep", "0", "--yes"]);
    assert!(said.contains("is under way"), "{said}");
    let said = n.root.refused(&["activate", "notes", &v1]);
    assert!(said.contains("is under way"), "{said}");
    drop(lock);

    // A backup under way shares the lock: prune's list is shown, its removal
    // and an activation are refused; the backup then finishes.
    let hold = tempfile::NamedTempFile::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().to_str().unwrap();
    let mut backing_up = n.root.paused(&["backup", "notes", "--to", to], "backup:copied", hold.path());
    let cache = n.root.path().join("cache");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_dir(&cache)
        .unwrap()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("backup-notes-"))
    {
        assert!(Instant::now() < deadline, "the backup began");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(n.root.ok(&["prune", "notes", "--keep", "0", "--dry-run"]).contains("a dry run"));
    let said = n.root.refused(&["prune", "notes", "--keep", "0", "--yes"]);
    assert!(said.contains("is under way"), "{said}");
    let said = n.root.refused(&["activate", "notes", &v1]);
    assert!(said.contains("is under way"), "{said}");
    drop(hold);
    assert!(backing_up.wait().unwrap().success());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "the backup was written");
    n.root.ok(&["prune", "notes", "--keep", "0", "--yes"]);
}

#[test]
fn logs_follow_sees_a_line_the_app_writes_and_since_filters() {
    let n = notes_with(&["first"]);
    let out = n.root.ok(&["logs", "notes"]);
    assert!(out.contains("info notes.add: added note 1"), "{out}");
    assert!(n.root.ok(&["logs", "notes", "--since", "2999-01-01T00:00:00Z"]).trim().is_empty());
    let said = n.root.fails_with(2, &["logs", "notes", "--since", "last tuesday"]);
    assert!(said.contains("is not a time"), "{said}");

    let mut follow = Command::new(env!("CARGO_BIN_EXE_autoapp"))
        .args(["--root", n.root.path().to_str().unwrap(), "logs", "notes", "--follow", "--json", "-n", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = follow.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    n.add("second");
    let line = rx.recv_timeout(Duration::from_secs(10)).expect("logs --follow printed the new line");
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["message"], "added note 2");
    assert_eq!(v["route"], "notes.add");
    assert_eq!(v["level"], "info");
    let _ = follow.kill();
    let _ = follow.wait();
}

#[test]
fn logs_read_returns_lines_written_before_the_launcher_started() {
    let Notes { root, ws } = notes_with(&["a", "b"]);
    // The lines were written by `autoapp call`, before this launcher existed.
    let launcher = crate::engineer::Launcher::start(root);
    let out = launcher.ok("logs_read", json!({ "app": "notes" }));
    let lines: Vec<&str> = out["lines"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].ends_with("notes.add: added note 1") && lines[1].ends_with("notes.add: added note 2"),
        "{lines:?}"
    );
    drop(ws);
}

/// Each app's compiled code is in a folder of its own (its worker reads
/// that one, no other app's): prune of one app removes the code no release
/// of it uses, and only a prune of the whole root removes the folder of an
/// app that is gone.
#[test]
fn each_apps_compiled_code_is_its_own_and_prune_removes_what_no_release_of_it_uses() {
    let n = notes_with(&["one"]);
    let mine = n.root.path().join("cache/compiled/notes");
    let in_use: Vec<_> = std::fs::read_dir(&mine).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(in_use.len(), 1, "the active release's code, compiled for notes: {in_use:?}");
    let unused = mine.join(format!("{}-0123456789abcdef.cwasm", "d".repeat(64)));
    std::fs::write(&unused, vec![0u8; 1000]).unwrap();
    // What another autoapp's engine compiled for the same release (its key
    // in the name), written after this one's: this one never loads it.
    let sha = in_use[0].file_name().unwrap().to_string_lossy().split_once('-').unwrap().0.to_string();
    let older = mine.join(format!("{sha}-00000000000000ff.cwasm"));
    std::fs::write(&older, vec![0u8; 700]).unwrap();
    let gone = n.root.path().join("cache/compiled/gone-app");
    std::fs::create_dir_all(&gone).unwrap();
    std::fs::write(gone.join(format!("{}-0123456789abcdef.cwasm", "c".repeat(64))), vec![0u8; 500]).unwrap();
    // Code written in the last minutes stays (a build, install or restore
    // compiles before it writes what uses it).
    let one = listed(&n.root.ok(&["prune", "--dry-run", "--keep", "0"]));
    assert!(!one.iter().any(|l| l.contains("compiled")), "fresh code is kept: {one:?}");
    written_an_hour_ago(&unused);
    written_an_hour_ago(&gone);
    // (This engine's own code, older than the other engine's: kept all the same.)
    written_an_hour_ago(&in_use[0]);
    let half_an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(30 * 60);
    std::fs::File::open(&older).unwrap().set_modified(half_an_hour_ago).unwrap();

    let v: Value = serde_json::from_str(&n.root.ok(&["space", "--json"])).unwrap();
    let code: u64 = in_use.iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
    assert_eq!(v["apps"][0]["compiled"].as_u64().unwrap(), code + 1700, "{v}");
    assert_eq!(v["compiled_unused"].as_u64().unwrap(), 2200, "{v}");

    let one = listed(&n.root.ok(&["prune", "notes", "--dry-run", "--keep", "0"]));
    let mut compiled: Vec<&String> = one.iter().filter(|l| l.contains("compiled")).collect();
    compiled.sort();
    assert_eq!(
        compiled,
        [
            "remove  notes compiled code no release uses (1.0 kB)",
            "remove  notes compiled code of another engine (another version of autoapp; this one's is kept) (700 bytes)"
        ],
        "only its unused files: {one:?}"
    );
    let all = listed(&n.root.ok(&["prune", "--dry-run", "--keep", "0"]));
    assert!(all.iter().any(|l| l.contains("compiled code of gone-app, an app no longer here")), "{all:?}");
    n.root.ok(&["prune", "--keep", "0", "--yes"]);
    assert!(!unused.exists() && !gone.exists() && !older.exists());
    assert!(in_use[0].exists(), "the active release's code stays");
    assert_eq!(n.titles(&[]), ["one"]);
}

#[test]
fn space_says_what_each_app_holds() {
    let n = notes_with(&["one"]);
    let v: Value = serde_json::from_str(&n.root.ok(&["space", "--json"])).unwrap();
    let a = &v["apps"][0];
    assert_eq!(a["app"], "notes");
    for part in ["data", "record", "snapshots", "releases", "compiled", "logs"] {
        assert!(a[part].as_u64().unwrap() > 0, "{part}: {a}");
    }
    let parts =
        ["data", "record", "snapshots", "releases", "compiled", "previews", "logs", "workspace", "trash", "other"];
    let sum: u64 = parts.iter().map(|p| a[p].as_u64().unwrap()).sum();
    assert_eq!(a["total"].as_u64().unwrap(), sum);
    assert!(v["root_total"].as_u64().unwrap() >= sum - a["compiled"].as_u64().unwrap());
    let text = n.root.ok(&["space", "notes"]);
    assert!(text.contains("notes") && text.contains("record") && text.contains("total"), "{text}");
    let said = n.root.refused(&["space", "nope"]);
    assert!(said.contains("there is no app `nope`"), "{said}");
}

// ---- A backup is data, not code (issue 29): each case made from a genuine
// backup by a tamperer who knows the format (hashes and ids recomputed).

/// `good`'s entries changed by `f`, written as a new backup file in `dir`.
fn tampered(good: &Entries, dir: &Path, tag: &str, f: impl FnOnce(&mut Entries)) -> PathBuf {
    let mut e = good.clone();
    f(&mut e);
    let p = dir.join(format!("{tag}.autoapp-backup"));
    write_entries(&p, &e);
    p
}

fn index_of(e: &Entries, name: &str) -> usize {
    e.iter().position(|(n, _)| n == name).unwrap_or_else(|| panic!("{name} in the backup"))
}

/// Sets `path`'s entry to `bytes` and lists it with its hash.
fn put(e: &mut Entries, path: &str, bytes: Vec<u8>) {
    let i = index_of(e, path);
    e[i].1 = bytes;
    let listed = relisted(&e[0].1, path, &e[i].1);
    e[0].1 = listed;
}

/// A SQLite file's bytes after `sql` ran on them (with the sqlite3 library
/// directly, as a tamperer would).
fn with_sql(db: &[u8], sql: &str) -> Vec<u8> {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("x.sqlite");
    std::fs::write(&path, db).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(sql).unwrap();
    conn.pragma_update(None, "journal_mode", "DELETE").unwrap();
    drop(conn);
    std::fs::read(&path).unwrap()
}

/// The rows of a record file: (time, request_id, route, effect).
fn record_rows(db: &[u8]) -> Vec<(String, String, String, String)> {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("runs.sqlite");
    std::fs::write(&path, db).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mut st = conn.prepare("SELECT time, request_id, route, effect FROM runs ORDER BY seq").unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))).unwrap().map(Result::unwrap).collect()
}

fn record_json(root: &TestRoot, app: &str) -> Vec<Value> {
    let out = root.ok(&["runs", app, "--json", "--limit", "100000"]);
    match serde_json::from_str::<Value>(&out).unwrap() {
        Value::Array(rows) => rows,
        v => v["rows"].as_array().cloned().unwrap_or_default(),
    }
}

#[test]
fn a_record_whose_trigger_aborts_inserts_never_wedges_the_root() {
    let n = notes_with(&["one"]);
    let dir = tempfile::tempdir().unwrap();
    let file = backup(&n.root, "notes", dir.path());
    let good = entries(&file);
    let runs = good[index_of(&good, "data/runs.sqlite")].1.clone();
    let hostile = tampered(&good, dir.path(), "aborting-trigger", |e| {
        let db = with_sql(&runs, "CREATE TRIGGER stop BEFORE INSERT ON runs BEGIN SELECT RAISE(ABORT, 'no'); END;");
        put(e, "data/runs.sqlite", db);
    });
    let fresh = TestRoot::new();
    // Another app on the same root, restored from the genuine file.
    fresh.ok(&["restore", file.to_str().unwrap(), "--as", "other"]);
    // The record is made anew: the trigger never comes along.
    let out = fresh.run(&["restore", hostile.to_str().unwrap()]);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() {
        fresh.call("notes", "notes.add", r#"{"title":"after"}"#);
        let rows = record_json(&fresh, "notes");
        assert!(rows.iter().any(|r| r["route"] == "restore"), "the restore is recorded: {rows:?}");
        assert!(rows.iter().any(|r| r["route"] == "notes.add"), "so is a later call: {rows:?}");
    } else {
        assert!(said.contains("cannot be restored") && said.contains("Nothing was placed"), "{said}");
        assert!(!fresh.path().join("apps/notes").exists());
    }
    // Whatever the file held, every command on the root works: `status`
    // gets as far as saying no launcher runs (exit 1, its own answer), not a
    // failure of recovery.
    let status = fresh.fails_with(1, &["status"]);
    assert!(status.contains("no launcher is running"), "{status}");
    fresh.ok(&["space"]);
    assert_eq!(fresh.call("other", "notes.list", "{}")["notes"].as_array().unwrap().len(), 1);
    backup(&fresh, "other", dir.path());
    assert!(leftovers(&fresh).iter().all(|n| !n.starts_with(".restore-")), "{:?}", leftovers(&fresh));
}

/// A release of notes that asks for `capabilities` (and so has an external route).
fn asking(n: &Notes, capabilities: &str) {
    let manifest = std::fs::read_to_string(n.ws.path().join("autoapp.toml")).unwrap();
    let manifest = manifest.replace(
        "[data]",
        &format!(
            "[[route]]\nname = \"notes.sync\"\neffect = \"external\"\nsummary = \"Sync\"\ninput = {{ type = \"object\" }}\n\n[capabilities]\n{capabilities}\n\n[data]"
        ),
    );
    std::fs::write(n.ws.path().join("autoapp.toml"), manifest).unwrap();
}

#[test]
fn a_record_whose_trigger_deletes_rows_or_whose_runs_is_a_view_loses_no_row() {
    let n = Notes::new();
    // A release that asks for something to grant and revoke.
    asking(&n, "network = [\"https://example.com\"]");
    let v1 = n.build();
    n.root.grant_all("notes");
    n.root.ok(&["activate", "notes", &v1]);
    n.add("one");
    let dir = tempfile::tempdir().unwrap();
    let file = backup(&n.root, "notes", dir.path());
    let good = entries(&file);
    let runs = good[index_of(&good, "data/runs.sqlite")].1.clone();
    let before = record_rows(&runs);
    assert!(before.iter().any(|r| r.3 == "lifecycle"), "the genuine record has lifecycle rows: {before:?}");

    let deleting = tampered(&good, dir.path(), "deleting-trigger", |e| {
        let db = with_sql(
            &runs,
            "CREATE TRIGGER forget AFTER INSERT ON runs WHEN NEW.effect IN ('lifecycle', 'external')
             BEGIN DELETE FROM runs WHERE seq = NEW.seq; END;",
        );
        put(e, "data/runs.sqlite", db);
    });
    // A record holds exactly the record's table: the trigger is refused, named,
    // before SQLite's integrity check evaluates anything of the file.
    let fresh = TestRoot::new();
    let said = fresh.refused(&["restore", deleting.to_str().unwrap()]);
    assert!(said.contains("runs.sqlite holds trigger \"forget\" that Autoapp does not make in it"), "{said}");
    assert!(leftovers(&fresh).is_empty(), "{:?}", leftovers(&fresh));
    // The genuine file restores every row, and later rows follow them.
    fresh.ok(&["restore", file.to_str().unwrap()]);
    fresh.call("notes", "notes.add", r#"{"title":"after"}"#);
    fresh.ok(&["revoke", "notes", "network:https://example.com"]);
    let rows = record_json(&fresh, "notes");
    for (time, request_id, route, _) in &before {
        assert!(
            rows.iter().any(|r| r["time"] == *time && r["request_id"] == *request_id && r["route"] == *route),
            "the backup's row {route} at {time} is in the restored record: {rows:?}"
        );
    }
    for route in ["restore", "notes.add", "revoke"] {
        assert!(rows.iter().any(|r| r["route"] == route), "{route} is recorded after the restore: {rows:?}");
    }
    assert_eq!(rows.len(), before.len() + 3, "every row, and nothing else: {rows:?}");

    // `runs` replaced by a view over another table: not the record's table; refused, named.
    let viewed = tampered(&good, dir.path(), "runs-view", |e| {
        let db = with_sql(
            &runs,
            "ALTER TABLE runs RENAME TO kept;
             CREATE VIEW runs AS SELECT * FROM kept WHERE effect NOT IN ('lifecycle', 'external');",
        );
        put(e, "data/runs.sqlite", db);
    });
    let fresh = TestRoot::new();
    let said = fresh.refused(&["restore", viewed.to_str().unwrap()]);
    assert!(said.contains("runs.sqlite holds") && said.contains("view \"runs\""), "{said}");
    assert!(leftovers(&fresh).is_empty(), "{:?}", leftovers(&fresh));
    fresh.ok(&["space"]);
}

#[test]
fn an_app_store_with_a_trigger_or_view_its_migrations_do_not_make_is_refused_naming_it() {
    let n = notes_with(&["one"]);
    let dir = tempfile::tempdir().unwrap();
    let file = backup(&n.root, "notes", dir.path());
    let good = entries(&file);
    let data = good[index_of(&good, "data/app.sqlite")].1.clone();
    for (case, sql, named) in [
        (
            "trigger",
            "CREATE TRIGGER sneaky AFTER INSERT ON notes BEGIN DELETE FROM note_tags; END;",
            "trigger \"sneaky\"",
        ),
        ("view", "CREATE VIEW peek AS SELECT title FROM notes;", "view \"peek\""),
        ("table", "CREATE TABLE extra (x);", "table \"extra\""),
    ] {
        let hostile = tampered(&good, dir.path(), case, |e| put(e, "data/app.sqlite", with_sql(&data, sql)));
        let fresh = TestRoot::new();
        let said = fresh.refused(&["restore", hostile.to_str().unwrap()]);
        assert!(said.contains(named) && said.contains("that its release's migrations do not make"), "{case}: {said}");
        assert!(leftovers(&fresh).is_empty(), "{case}: {:?}", leftovers(&fresh));
    }
}

#[test]
fn a_backups_grants_pass_the_check_grant_makes_and_are_printed_escaped() {
    let n = Notes::new();
    asking(&n, "network = [\"https://example.com\"]\nspawn = [{ program = \"cat\", args = [\"*\"] }]");
    let v1 = n.build();
    n.root.grant_all("notes");
    n.root.ok(&["activate", "notes", &v1]);
    let granted: Value =
        serde_json::from_str(&std::fs::read_to_string(n.app_dir().join("grants.json")).unwrap()).unwrap();
    let cat = granted["spawn"]["cat"]["path"].as_str().unwrap().to_string();
    assert_eq!(granted["spawn"]["cat"]["args"], json!(["*"]), "a spawn grant holds its pattern: {granted}");
    let dir = tempfile::tempdir().unwrap();
    let file = backup(&n.root, "notes", dir.path());
    let good = entries(&file);
    let esc = "\u{1b}[1A\u{1b}[2K\u{1b}[8m";
    let hostile = tampered(&good, dir.path(), "grants", |e| {
        let grants = json!({
            "network": [
                { "scheme": "https", "host": "example.com", "wildcard": false, "port": 443 },
                { "scheme": "https", "host": format!("evil.example{esc}"), "wildcard": false, "port": 443 },
            ],
            "files": { format!("home{esc}"): { "path": "/tmp", "access": "write" } },
            "spawn": { "cat": "/bin/sh", format!("git{esc}"): "/bin/sh" },
        });
        put(e, "grants.json", serde_json::to_vec(&grants).unwrap());
    });
    let fresh = TestRoot::new();
    let out = fresh.run(&["restore", hostile.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = [out.stdout.as_slice(), out.stderr.as_slice()].concat();
    assert!(!printed.contains(&0x1b), "no ESC byte reaches the terminal: {}", String::from_utf8_lossy(&printed));
    let said = String::from_utf8_lossy(&printed);
    assert!(said.contains("the grant \"spawn:cat\" → \"/bin/sh\" is not kept"), "{said}");
    assert!(
        said.contains("granted, as in the backup (checked as `autoapp grant` checks it): network https://example.com"),
        "{said}"
    );
    let kept: Value =
        serde_json::from_str(&std::fs::read_to_string(fresh.path().join("apps/notes/grants.json")).unwrap()).unwrap();
    assert_eq!(kept["network"].as_array().unwrap().len(), 1, "{kept}");
    assert_eq!(kept["spawn"], json!({}), "not /bin/sh as cat, nothing the release does not ask for: {kept}");
    assert_eq!(kept["files"], json!({}), "{kept}");
    // Granted here, `explain` names the program each grant runs.
    fresh.ok(&["grant", "notes", "spawn:cat"]);
    let explained = fresh.ok(&["explain", "notes"]);
    assert!(explained.contains(&format!("granted ({cat}, arguments [\"*\"])")), "{explained}");
}

/// Peak resident memory of `autoapp args…` on `root`, in KiB (GNU time's %M).
fn peak_kib(root: &TestRoot, args: &[&str]) -> (u64, std::process::Output) {
    let report = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%M", "-o", report.path().to_str().unwrap()])
        .arg(env!("CARGO_BIN_EXE_autoapp"))
        .arg("--root")
        .arg(root.path())
        .args(args)
        .env("AUTOAPP_LOG", "off")
        .output()
        .unwrap();
    let text = std::fs::read_to_string(report.path()).unwrap();
    let kib = text.lines().last().and_then(|l| l.trim().parse().ok()).unwrap_or_else(|| panic!("time said {text}"));
    (kib, out)
}

#[test]
fn a_small_file_whose_long_name_declares_3_gb_is_refused_in_flat_memory() {
    if !Path::new("/usr/bin/time").exists() {
        eprintln!("skipped: /usr/bin/time (GNU time) is not installed, so peak memory cannot be measured");
        return;
    }
    let n = notes_with(&["one"]);
    let dir = tempfile::tempdir().unwrap();
    let file = backup(&n.root, "notes", dir.path());
    let good = entries(&file);
    const DECLARED: u64 = 3 << 30;
    // The manifest lists 3 GB for the data (so nothing stops at its sum),
    // and the data's entry comes after a GNU long name of 3 GB of zeros.
    let mut m: Value = serde_json::from_slice(&good[0].1).unwrap();
    for f in m["files"].as_array_mut().unwrap() {
        if f["path"] == "data/app.sqlite" {
            f["bytes"] = json!(DECLARED);
        }
    }
    let manifest = serde_json::to_vec(&m).unwrap();
    let bomb = dir.path().join("long-name.autoapp-backup");
    {
        let mut tar = tar::Builder::new(zstd::Encoder::new(std::fs::File::create(&bomb).unwrap(), 1).unwrap());
        let mut h = tar::Header::new_gnu();
        h.set_size(manifest.len() as u64);
        h.set_path("backup.json").unwrap();
        h.set_cksum();
        tar.append(&h, manifest.as_slice()).unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::GNULongName);
        h.set_size(DECLARED);
        h.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
        h.set_cksum();
        tar.append(&h, std::io::repeat(0).take(DECLARED)).unwrap();
        tar.into_inner().unwrap().finish().unwrap();
    }
    let bytes = std::fs::metadata(&bomb).unwrap().len();
    assert!(bytes < 1 << 20, "a small file: {bytes} bytes");
    let fresh = TestRoot::new();
    let (kib, out) = peak_kib(&fresh, &["restore", bomb.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("a long name that declares 3221225472 bytes; at most 4096"), "{stderr}");
    eprintln!("a {bytes}-byte file declaring a 3 GB long name: refused, peak memory {} MB", kib / 1024);
    assert!(kib < 100 * 1024, "peak memory {kib} KiB");
    assert!(leftovers(&fresh).is_empty());
}

#[test]
fn a_component_that_is_not_one_is_refused_at_restore_even_with_its_release_id_recomputed() {
    let n = notes_with(&["one"]);
    let dir = tempfile::tempdir().unwrap();
    let file = backup(&n.root, "notes", dir.path());
    let good = entries(&file);
    let garbage: Vec<u8> = b"\0asm\x0d\0\x01\0".iter().copied().chain(std::iter::repeat_n(0x42u8, 4096)).collect();
    let hostile = tampered(&good, dir.path(), "garbage-component", |e| {
        put(e, "release/component.wasm", garbage.clone());
        rereleased(e);
    });
    let fresh = TestRoot::new();
    let said = fresh.refused(&["restore", hostile.to_str().unwrap()]);
    assert!(said.contains("its release/component.wasm is refused as a build would refuse it"), "{said}");
    assert!(!fresh.path().join("apps/notes").exists() && leftovers(&fresh).is_empty());
}

#[test]
fn two_entries_that_collide_are_refused_with_a_sentence_naming_both() {
    let n = notes_with(&["one"]);
    let dir = tempfile::tempdir().unwrap();
    let file = backup(&n.root, "notes", dir.path());
    let good = entries(&file);
    let hostile = tampered(&good, dir.path(), "collide", |e| {
        let body = b"inside".to_vec();
        let mut m: Value = serde_json::from_slice(&e[0].1).unwrap();
        m["files"].as_array_mut().unwrap().push(json!({
            "path": "release/component.wasm/x", "bytes": body.len(), "sha256": sha(&body)
        }));
        e[0].1 = serde_json::to_vec(&m).unwrap();
        e.push(("release/component.wasm/x".into(), body));
    });
    let fresh = TestRoot::new();
    let said = fresh.refused(&["restore", hostile.to_str().unwrap()]);
    assert!(
        said.contains("\"release/component.wasm\" and \"release/component.wasm/x\" collide"),
        "one sentence naming both: {said}"
    );
    assert!(!said.contains("os error"), "{said}");
    assert!(leftovers(&fresh).is_empty());
}

#[test]
fn a_restore_that_cannot_be_recorded_is_undone_and_never_wedges_the_root() {
    let n = notes_with(&["one"]);
    let dir = tempfile::tempdir().unwrap();
    let file = backup(&n.root, "notes", dir.path());
    let fresh = TestRoot::new();
    fresh.ok(&["restore", file.to_str().unwrap(), "--as", "other"]);
    // Killed after the rename, before its row: recovery writes the row from
    // the marker. A marker it cannot read (here: damaged) is a restore that
    // cannot finish.
    let out = Command::new(env!("CARGO_BIN_EXE_autoapp"))
        .args(["--root", fresh.path().to_str().unwrap(), "restore", file.to_str().unwrap()])
        .env("AUTOAPP_FAULT", "restore:placed")
        .env("AUTOAPP_LOG", "off")
        .output()
        .unwrap();
    assert!(!out.status.success(), "the restore was killed");
    std::fs::write(fresh.path().join("apps/notes/.restored.json"), "{ damaged").unwrap();
    let out = fresh.run(&["space"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the next command works: {stderr}");
    assert!(stderr.contains("the restore of notes could not be recorded, so it was undone"), "{stderr}");
    assert!(!fresh.path().join("apps/notes").exists(), "undone");
    assert!(!fresh.path().join("cache/compiled/notes").exists(), "with the code it compiled");
    assert!(fresh.path().join("cache/compiled/other").is_dir(), "not another app's");
    assert!(leftovers(&fresh).iter().all(|n| !n.starts_with(".restore-")), "{:?}", leftovers(&fresh));
    assert_eq!(fresh.call("other", "notes.list", "{}")["notes"].as_array().unwrap().len(), 1);
    // And the restore can simply be done again.
    fresh.ok(&["restore", file.to_str().unwrap()]);
    assert_eq!(fresh.call("notes", "notes.list", "{}")["notes"].as_array().unwrap().len(), 1);
}

/// Recomputes the release's id from `e`'s release files (a tamperer who
/// changed them), and writes it where release.json and backup.json name it
/// (release.json's description of the component too).
fn rereleased(e: &mut Entries) {
    use autoapp::release::{Migration, ReleaseInputs, release_id};
    let text = String::from_utf8(e[index_of(e, "release/autoapp.toml")].1.clone()).unwrap();
    let parsed = autoapp::manifest::parse(&text, "autoapp.toml").unwrap();
    let migrations: Vec<Migration> = parsed
        .migrations
        .iter()
        .map(|m| Migration {
            name: m.clone(),
            sql: String::from_utf8(e[index_of(e, &format!("release/{m}"))].1.clone()).unwrap(),
        })
        .collect();
    let component = e[index_of(e, "release/component.wasm")].1.clone();
    let inputs = ReleaseInputs {
        component: &component,
        manifest_text: &text,
        manifest: &parsed,
        migrations: &migrations,
        source: "",
    };
    let id = release_id(&inputs);
    let info = index_of(e, "release/release.json");
    let mut r: Value = serde_json::from_slice(&e[info].1).unwrap();
    r["id"] = json!(id);
    r["component_sha256"] = json!(sha(&component));
    r["component_bytes"] = json!(component.len());
    put(e, "release/release.json", serde_json::to_vec(&r).unwrap());
    let mut m: Value = serde_json::from_slice(&e[0].1).unwrap();
    m["release"] = json!(id);
    e[0].1 = serde_json::to_vec(&m).unwrap();
}

/// `good` with `sql` appended to the release's first migration, its id recomputed.
fn with_migration(good: &Entries, dir: &Path, tag: &str, sql: &str) -> PathBuf {
    tampered(good, dir, tag, |e| {
        let text = String::from_utf8(e[index_of(e, "release/autoapp.toml")].1.clone()).unwrap();
        let first = autoapp::manifest::parse(&text, "autoapp.toml").unwrap().migrations[0].clone();
        let name = format!("release/{first}");
        let mut body = e[index_of(e, &name)].1.clone();
        body.extend_from_slice(sql.as_bytes());
        put(e, &name, body);
        rereleased(e);
    })
}

#[test]
fn a_backups_migrations_cannot_attach_another_apps_record_vacuum_into_a_file_or_run_forever() {
    let n = notes_with(&["one"]);
    let dir = tempfile::tempdir().unwrap();
    let file = backup(&n.root, "notes", dir.path());
    let good = entries(&file);
    let fresh = TestRoot::new();
    fresh.ok(&["restore", file.to_str().unwrap(), "--as", "other"]);
    let record = fresh.path().join("apps/other/data/runs.sqlite");
    let rows = || record_rows(&std::fs::read(&record).unwrap()).len();
    let before = rows();
    assert!(before > 0);

    let attach = format!("\nATTACH '{}' AS x; DELETE FROM x.runs;\n", record.display());
    let hostile = with_migration(&good, dir.path(), "attach", &attach);
    let said = fresh.refused(&["restore", hostile.to_str().unwrap()]);
    assert_eq!(rows(), before, "the other app's record is intact");
    assert!(said.contains("ATTACH and DETACH are not available"), "{said}");

    let into = dir.path().join("stolen.sqlite");
    let hostile = with_migration(&good, dir.path(), "vacuum", &format!("\nVACUUM INTO '{}';\n", into.display()));
    let said = fresh.refused(&["restore", hostile.to_str().unwrap()]);
    assert!(said.contains("cannot be restored"), "{said}");
    assert!(!into.exists(), "no file was made");

    let endless = "\nCREATE TABLE forever AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) AS n FROM c;\n";
    let hostile = with_migration(&good, dir.path(), "endless", endless);
    let began = Instant::now();
    let said = fresh.refused(&["restore", hostile.to_str().unwrap()]);
    assert!(said.contains("ran past its 2 s and was stopped"), "{said}");
    assert!(began.elapsed() < Duration::from_secs(30), "{:?}", began.elapsed());
    assert!(!fresh.path().join("apps/notes").exists());
    assert!(leftovers(&fresh).iter().all(|n| !n.starts_with(".restore-")), "{:?}", leftovers(&fresh));
    fresh.ok(&["space"]);
}

/// `good` whose backup.json also lists `path` (with `body`), and holds it.
fn with_extra(good: &Entries, dir: &Path, tag: &str, path: &str, body: &[u8]) -> PathBuf {
    tampered(good, dir, tag, |e| {
        let mut m: Value = serde_json::from_slice(&e[0].1).unwrap();
        m["files"].as_array_mut().unwrap().push(json!({ "path": path, "bytes": body.len(), "sha256": sha(body) }));
        e[0].1 = serde_json::to_vec(&m).unwrap();
    })
}

#[test]
fn a_long_name_in_the_list_is_refused_before_anything_is_unpacked() {
    let n = notes_with(&["one"]);
    let dir = tempfile::tempdir().unwrap();
    let file = backup(&n.root, "notes", dir.path());
    let good = entries(&file);
    let long = format!("release/{}x", "a/".repeat(2000));
    let hostile = with_extra(&good, dir.path(), "long-name", &long, b"x");
    let fresh = TestRoot::new();
    let said = fresh.refused(&["restore", hostile.to_str().unwrap()]);
    assert!(said.contains("bytes long; a name is at most 1024"), "{said}");
    assert!(leftovers(&fresh).is_empty(), "{:?}", leftovers(&fresh));
}

#[test]
fn a_listed_8_gb_component_is_refused_before_anything_is_unpacked() {
    let n = notes_with(&["one"]);
    let dir = tempfile::tempdir().unwrap();
    let file = backup(&n.root, "notes", dir.path());
    let good = entries(&file);
    // Listed as 8 GB of zeros (its hash would be precomputed; none is read).
    let hostile = tampered(&good, dir.path(), "8gb", |e| {
        let mut m: Value = serde_json::from_slice(&e[0].1).unwrap();
        for f in m["files"].as_array_mut().unwrap() {
            if f["path"] == "release/component.wasm" {
                f["bytes"] = json!(8u64 << 30);
            }
        }
        e[0].1 = serde_json::to_vec(&m).unwrap();
    });
    let fresh = TestRoot::new();
    let began = Instant::now();
    let said = fresh.refused(&["restore", hostile.to_str().unwrap()]);
    assert!(said.contains("lists \"release/component.wasm\" of 8589934592 bytes; at most 268435456"), "{said}");
    assert!(began.elapsed() < Duration::from_secs(20));
    assert!(leftovers(&fresh).is_empty(), "no staging folder: {:?}", leftovers(&fresh));
}

#[test]
fn a_deep_or_extra_release_file_is_refused_and_a_staging_folder_that_cannot_be_removed_wedges_nothing() {
    let n = notes_with(&["one"]);
    let dir = tempfile::tempdir().unwrap();
    let file = backup(&n.root, "notes", dir.path());
    let good = entries(&file);
    let fresh = TestRoot::new();
    let deep = format!("release/{}x.sql", "a/".repeat(100));
    let hostile = with_extra(&good, dir.path(), "deep", &deep, b"x");
    let said = fresh.refused(&["restore", hostile.to_str().unwrap()]);
    assert!(said.contains("more than 16 folders deep"), "{said}");
    let hostile = with_extra(&good, dir.path(), "extra", "release/a/a/x", b"x");
    let said = fresh.refused(&["restore", hostile.to_str().unwrap()]);
    assert!(said.contains("lists \"release/a/a/x\", which is not a file a backup holds"), "{said}");
    assert!(leftovers(&fresh).is_empty(), "{:?}", leftovers(&fresh));

    // What a crash left that cannot be removed (here: not a folder at all,
    // so removing it as one fails) is said, never a failure of the command.
    std::fs::create_dir_all(fresh.path().join("apps")).unwrap();
    std::fs::write(fresh.path().join("apps/.restore-notes-deadbeef-4194305"), "x").unwrap();
    let out = fresh.run(&["space"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("cannot be removed"), "{stderr}");
    let status = fresh.fails_with(1, &["status"]);
    assert!(status.contains("no launcher is running"), "{status}");
    fresh.ok(&["restore", file.to_str().unwrap()]);
}

#[test]
fn a_foreign_sqlite_files_schema_is_compared_before_its_integrity_check_evaluates_anything() {
    let n = notes_with(&["one"]);
    let dir = tempfile::tempdir().unwrap();
    let file = backup(&n.root, "notes", dir.path());
    let good = entries(&file);
    // A CHECK that builds a 100 MB text whenever a row is checked; its row
    // put in without the check (as a tamperer can).
    let bomb = "CREATE TABLE evil (x CHECK (length(printf('%.*c', 100000000, 'x')) > 0));
                PRAGMA ignore_check_constraints = ON; INSERT INTO evil VALUES (1);";
    for (entry, named) in [
        ("data/runs.sqlite", "runs.sqlite holds table \"evil\" that Autoapp does not make in it"),
        ("data/app.sqlite", "app.sqlite holds table \"evil\" that its release's migrations do not make"),
    ] {
        let db = good[index_of(&good, entry)].1.clone();
        let hostile = tampered(&good, dir.path(), "check-bomb", |e| put(e, entry, with_sql(&db, bomb)));
        let fresh = TestRoot::new();
        let said = fresh.refused(&["restore", hostile.to_str().unwrap()]);
        assert!(said.contains(named), "{entry}: {said}");
        assert!(leftovers(&fresh).is_empty(), "{:?}", leftovers(&fresh));
    }
    // A table whose name only looks like SQLite's own is compared like any other.
    let db = good[index_of(&good, "data/app.sqlite")].1.clone();
    let hostile = tampered(&good, dir.path(), "sqlite-named", |e| {
        put(e, "data/app.sqlite", with_sql(&db, "PRAGMA writable_schema = ON; CREATE TABLE SQLITE_kept (x);"))
    });
    let fresh = TestRoot::new();
    let said = fresh.refused(&["restore", hostile.to_str().unwrap()]);
    assert!(said.contains("table \"SQLITE_kept\""), "{said}");
}

#[test]
fn what_a_restore_keeps_of_a_backups_own_words_is_checked_and_every_refusal_is_one_line() {
    let n = notes_with(&["one"]);
    let dir = tempfile::tempdir().unwrap();
    let file = backup(&n.root, "notes", dir.path());
    let good = entries(&file);
    let listed = |tag: &str, key: &str, value: Value| {
        tampered(&good, dir.path(), tag, |e| {
            let mut m: Value = serde_json::from_slice(&e[0].1).unwrap();
            m[key] = value;
            e[0].1 = serde_json::to_vec(&m).unwrap();
        })
    };
    let fresh = TestRoot::new();
    // A time that is text for the terminal.
    let said =
        fresh.refused(&["restore", listed("taken", "taken_at", json!("now\n\u{1b}[2Jall is well")).to_str().unwrap()]);
    assert!(said.contains("is not a time") && !said.contains('\u{1b}'), "{said}");
    // A backup of another app than its release's.
    let said = fresh.refused(&["restore", listed("other-app", "app", json!("other")).to_str().unwrap()]);
    assert!(said.contains("autoapp.toml is of notes, not of \"other\""), "{said}");
    // A TOML error quoting lines of the file: one line.
    let broken = tampered(&good, dir.path(), "toml", |e| {
        let mut text = e[index_of(e, "release/autoapp.toml")].1.clone();
        text.extend_from_slice(b"\n[[[broken\n\x1b[2J\n");
        // Read before the release's id is recomputed: no need to recompute it.
        put(e, "release/autoapp.toml", text);
    });
    let out = fresh.run(&["restore", broken.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let line: Vec<&str> = stderr.lines().filter(|l| l.contains("cannot be restored")).collect();
    assert_eq!(line.len(), 1, "{stderr}");
    assert!(line[0].ends_with("take a new one with `autoapp backup`") && !stderr.contains('\u{1b}'), "{stderr}");
    // release.json is written anew: a time in the future and another version are not kept.
    let future = tampered(&good, dir.path(), "future", |e| {
        let info = index_of(e, "release/release.json");
        let mut r: Value = serde_json::from_slice(&e[info].1).unwrap();
        r["created_at"] = json!("2999-01-01T00:00:00Z");
        r["version"] = json!("9.9.9-trust-me");
        put(e, "release/release.json", serde_json::to_vec(&r).unwrap());
    });
    fresh.ok(&["restore", future.to_str().unwrap()]);
    let releases = fresh.path().join("apps/notes/releases");
    let rdir = std::fs::read_dir(&releases).unwrap().flatten().next().unwrap().path();
    let r: Value = serde_json::from_slice(&std::fs::read(rdir.join("release.json")).unwrap()).unwrap();
    assert!(r["created_at"].as_str().unwrap() < "2999", "{r}");
    assert_ne!(r["version"], "9.9.9-trust-me", "{r}");
}

/// Issue 76: `prune --record-before` lists the record's rows before a day
/// in a dry run, then takes out exactly those — the writes since the last
/// activation stay —; `runs` then says rows were let go, `runs --summary`
/// still counts them, and `space` shows the record apart from the data.
#[test]
fn prune_record_before_a_day_lists_then_takes_out_those_rows_and_runs_still_counts_them() {
    let n = notes_with(&["one", "two"]);
    for _ in 0..3 {
        n.root.call("notes", "notes.list", "{}");
    }
    let rows_now =
        || -> Vec<Value> { serde_json::from_str(&n.root.ok(&["runs", "notes", "--json", "--limit", "1000"])).unwrap() };
    let before = rows_now();
    let writes = before.iter().filter(|r| r["effect"] == "write").count();
    assert_eq!(writes, 2, "{before:?}");
    // A bad day is refused, naming the form.
    let bad = n.root.fails_with(2, &["prune", "notes", "--record-before", "31/01/2026"]);
    assert!(bad.contains("YYYY-MM-DD"), "{bad}");
    let tomorrow = (chrono::Utc::now().date_naive() + chrono::Days::new(1)).format("%Y-%m-%d").to_string();
    let dry = n.root.ok(&["prune", "notes", "--record-before", &tomorrow, "--dry-run"]);
    let gone = before.len() - writes;
    assert!(dry.contains(&format!("the record's rows before {tomorrow} ({gone} rows")), "{dry}");
    assert!(dry.contains("of them your own actions or answers"), "{dry}");
    assert_eq!(rows_now().len(), before.len(), "a dry run takes nothing out");
    let done = n.root.ok(&["prune", "notes", "--record-before", &tomorrow, "--yes"]);
    assert!(done.contains("record's old rows"), "{done}");
    let after = rows_now();
    // The two writes since the activation, and the prune's own row.
    assert!(after.iter().filter(|r| r["effect"] == "write").count() == 2, "{after:?}");
    assert!(after.iter().all(|r| r["effect"] == "write" || r["route"] == "prune"), "{after:?}");
    let runs = n.root.ok(&["runs", "notes"]);
    assert!(runs.contains(&format!("older rows were let go: {gone} rows")), "{runs}");
    let summary: Vec<Value> = serde_json::from_str(&n.root.ok(&["runs", "notes", "--summary", "--json"])).unwrap();
    let counted: u64 = summary.iter().map(|d| d["calls"].as_u64().unwrap()).sum();
    assert_eq!(counted as usize, before.len() + 1, "every row, let go or kept, once: {summary:?}");
    let space: Value = serde_json::from_str(&n.root.ok(&["space", "notes", "--json"])).unwrap();
    assert!(space["apps"][0]["record"].as_u64().unwrap() > 0, "{space}");
}
