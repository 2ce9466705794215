//! Releases: previews on a copy, journaled activation, honest rollback, and
//! recovery from a crash at every journal step.

use std::path::Path;

use crate::support::{TestRoot, guest_component, repo};

/// A copy of guests/notes as a workspace of its own, so a test can add a
/// migration (v2) or a declaration without touching the repository.
pub(crate) struct Notes {
    pub(crate) root: TestRoot,
    pub(crate) ws: tempfile::TempDir,
}

impl Notes {
    pub(crate) fn new() -> Notes {
        let root = TestRoot::new();
        let ws = tempfile::Builder::new().prefix("notes-ws-").tempdir().unwrap();
        let src = repo().join("guests/notes");
        std::fs::copy(src.join("autoapp.toml"), ws.path().join("autoapp.toml")).unwrap();
        std::fs::create_dir(ws.path().join("migrations")).unwrap();
        std::fs::copy(src.join("migrations/0001_init.sql"), ws.path().join("migrations/0001_init.sql")).unwrap();
        root.ok(&["create", "notes", "--at", ws.path().to_str().unwrap()]);
        Notes { root, ws }
    }

    /// Builds the notes component with the workspace's manifest as it is now.
    pub(crate) fn build(&self) -> String {
        let c = guest_component("notes");
        let out = self.root.ok(&["build", "notes", "--component", c.to_str().unwrap(), "--json"]);
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["release"].as_str().unwrap().to_string()
    }

    /// v2: a second migration and a new version.
    pub(crate) fn add_migration(&self) {
        self.add_migration_of("0002_pinned.sql", "ALTER TABLE notes ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;\n");
    }

    /// v2: the second migration `file` (under `migrations/`) of `sql`, and
    /// a new version.
    pub(crate) fn add_migration_of(&self, file: &str, sql: &str) {
        std::fs::write(self.ws.path().join("migrations").join(file), sql).unwrap();
        self.edit_manifest(|m| {
            m.replace("version = \"0.1.0\"", "version = \"0.2.0\"").replace(
                "migrations = [\"migrations/0001_init.sql\"]",
                &format!("migrations = [\"migrations/0001_init.sql\", \"migrations/{file}\"]"),
            )
        });
    }

    pub(crate) fn edit_manifest(&self, f: impl Fn(&str) -> String) {
        let p = self.ws.path().join("autoapp.toml");
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, f(&text)).unwrap();
    }

    pub(crate) fn titles(&self, extra: &[&str]) -> Vec<String> {
        let mut args = vec!["call", "notes", "notes.list", "{}"];
        args.extend_from_slice(extra);
        let v: serde_json::Value = serde_json::from_str(&self.root.ok(&args)).unwrap();
        let mut t: Vec<String> =
            v["notes"].as_array().unwrap().iter().map(|n| n["title"].as_str().unwrap().to_string()).collect();
        t.sort();
        t
    }

    pub(crate) fn add(&self, title: &str) {
        self.root.call("notes", "notes.add", &serde_json::json!({ "title": title }).to_string());
    }

    pub(crate) fn active(&self) -> String {
        let v: serde_json::Value = serde_json::from_str(&self.root.ok(&["candidates", "notes", "--json"])).unwrap();
        v["active"]["id"].as_str().unwrap().to_string()
    }

    pub(crate) fn app_dir(&self) -> std::path::PathBuf {
        self.root.path().join("apps/notes")
    }

    /// Migrations applied to the live data.
    pub(crate) fn applied(&self) -> usize {
        applied_in(&self.app_dir().join("data"))
    }

    /// Migrations the active release declares.
    pub(crate) fn declared(&self) -> usize {
        let v: serde_json::Value =
            serde_json::from_str(&self.root.ok(&["explain", "notes", &self.active(), "--json"])).unwrap();
        v["migrations"].as_array().unwrap().len()
    }

    pub(crate) fn folders_starting(&self, prefix: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.app_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(prefix))
            .collect();
        v.sort();
        v
    }
}

fn applied_in(data: &Path) -> usize {
    let conn = rusqlite::Connection::open(data.join("app.sqlite")).unwrap();
    conn.query_row("SELECT count(*) FROM _autoapp_migrations", [], |r| r.get::<_, i64>(0)).unwrap() as usize
}

fn has_column(data: &Path, column: &str) -> bool {
    let conn = rusqlite::Connection::open(data.join("app.sqlite")).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM pragma_table_info('notes') WHERE name = ?1", [column], |r| r.get(0))
        .unwrap();
    n > 0
}

#[test]
fn the_whole_lifecycle_from_preview_to_restore() {
    let n = Notes::new();
    let v1 = n.build();
    n.root.ok(&["activate", "notes", &v1]);
    n.add("one");
    n.add("two");

    n.add_migration();
    let v2 = n.build();
    assert_ne!(v1, v2);
    let explained = n.root.ok(&["explain", "notes", &v2]);
    assert!(explained.contains("migrations added: migrations/0002_pinned.sql"), "{explained}");

    // A preview runs v2 on a copy; the live data does not change.
    let out = n.root.ok(&["preview", "notes"]);
    assert!(out.contains(&format!("previewing notes {}", &v2[..12])), "{out}");
    n.root.ok(&["call", "notes", "notes.add", r#"{"title":"only in the preview"}"#, "--preview"]);
    assert_eq!(n.titles(&["--preview"]), ["one", "only in the preview", "two"]);
    // A prefix no preview has: named, with the previews there are.
    let e = n.root.refused(&["call", "notes", "notes.list", "--preview=zzzz"]);
    assert!(
        e.contains(&format!("no preview of a release starting with `zzzz`; its previews are of {}", &v2[..12])),
        "{e}"
    );
    assert_eq!(n.titles(&[]), ["one", "two"], "the live data is unchanged");
    assert!(!has_column(&n.app_dir().join("data"), "pinned"), "the live schema is unchanged");
    n.root.ok(&["preview-stop", "notes"]);
    assert!(!n.app_dir().join("previews").join(&v2).exists(), "the copy is removed");
    let e = n.root.refused(&["call", "notes", "notes.list", "{}", "--preview"]);
    assert!(e.contains("no preview running"), "{e}");

    // Activate v2, then roll back before any write: nothing is lost.
    let out = n.root.ok(&["activate", "notes", &v2]);
    assert!(out.contains("1 new migration applied"), "{out}");
    assert!(has_column(&n.app_dir().join("data"), "pinned"));
    assert_eq!(n.folders_starting("data-prev-").len(), 2, "a snapshot per activation");
    n.root.ok(&["rollback", "notes"]);
    assert_eq!(n.active(), v1);
    assert_eq!(n.titles(&[]), ["one", "two"]);
    assert!(!has_column(&n.app_dir().join("data"), "pinned"), "v1's data is back");
    assert_eq!(n.folders_starting("data-next-").len(), 1, "v2's data is kept aside");

    // Activate v2 again and write: now a rollback must choose.
    n.root.ok(&["activate", "notes", &v2]);
    n.add("three");
    let e = n.root.fails_with(1, &["rollback", "notes"]);
    for option in ["--downgrade RELEASE", "forward repair", "--restore --yes"] {
        assert!(e.contains(option), "the refusal explains {option}: {e}");
    }
    let e = n.root.refused(&["rollback", "notes", "--restore"]);
    assert!(e.contains("discards every write") && e.contains("--restore --yes"), "{e}");
    let e = n.root.refused(&["rollback", "notes", "--downgrade", &v1]);
    assert!(e.contains("does not declare [data] reads_newer_schema = true"), "{e}");

    // The restore discards exactly the writes since activation, and keeps them aside.
    n.root.ok(&["rollback", "notes", "--restore", "--yes"]);
    assert_eq!(n.active(), v1);
    assert_eq!(n.titles(&[]), ["one", "two"]);
    let discarded = n.folders_starting("data-discarded-");
    assert_eq!(discarded.len(), 1);
    assert_eq!(applied_in(&n.app_dir().join(&discarded[0])), 2, "the discarded data is kept, with v2's schema");
    let history = std::fs::read_to_string(n.app_dir().join("history.jsonl")).unwrap();
    assert!(history.contains("\"op\":\"restore\"") && history.contains("\"op\":\"switch-back\""), "{history}");
    assert!(history.contains("first write"), "{history}");
}

/// Notes whose v1 may run on newer data (`reads_newer_schema`), with "one"
/// written by v1 and "two" by v2, which added a migration and is active.
fn notes_v2_over_a_downgradable_v1() -> (Notes, String, String) {
    let n = Notes::new();
    n.edit_manifest(|m| m.replace("[data]\n", "[data]\nreads_newer_schema = true\n"));
    let v1 = n.build();
    n.root.ok(&["activate", "notes", &v1]);
    n.add("one");
    n.add_migration();
    let v2 = n.build();
    n.root.ok(&["activate", "notes", &v2]);
    n.add("two");
    (n, v1, v2)
}

#[test]
fn a_compatible_downgrade_keeps_the_writes() {
    let (n, v1, _) = notes_v2_over_a_downgradable_v1();
    n.root.ok(&["rollback", "notes", "--downgrade", &v1[..10]]);
    assert_eq!(n.active(), v1);
    assert_eq!(n.titles(&[]), ["one", "two"], "a downgrade keeps every write");
    assert_eq!(n.applied(), 2, "and the newer schema");
}

/// While a launcher serves the root, a rollback is the panel's (the command
/// refuses): the panel lists the releases a downgrade could go to, and its
/// downgrade keeps the writes (fails before: the panel offered only the
/// restore, and a downgrade could be made nowhere while the launcher ran).
#[test]
fn the_panel_offers_the_downgrades_that_keep_the_writes() {
    let (n, v1, v2) = notes_v2_over_a_downgradable_v1();
    std::fs::write(n.root.path().join("config.toml"), format!("{}opener = \"none\"\n", crate::support::base_config()))
        .unwrap();
    let served = crate::support::Served::start(&n.root, &["open"]);
    let mut panel = served.tab("the Autoapp panel");
    let e = n.root.refused(&["rollback", "notes", "--downgrade", &v1]);
    assert!(e.contains("roll back from the panel"), "{e}");
    let r = panel.request("GET", "/api/state", None).unwrap();
    let state: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let notes = state["apps"].as_array().unwrap().iter().find(|a| a["id"] == "notes").unwrap().clone();
    assert_eq!(notes["rollback"]["written"], true, "{}", notes["rollback"]);
    assert_eq!(notes["rollback"]["downgrades"], serde_json::json!([v1]), "v1 reads v2's data; v2 is active");
    let body = serde_json::json!({ "app": "notes", "how": "downgrade", "release": v1 }).to_string();
    let r = panel.request("POST", "/api/rollback", Some(&body)).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    served.stop();
    assert_eq!(n.active(), v1);
    assert_ne!(v1, v2);
    assert_eq!(n.titles(&[]), ["one", "two"], "a downgrade keeps every write");
}

/// A launcher serves calls for days while the person activates from a
/// terminal. A release activated again (after another) is a new activation:
/// its first write must be noted again, or a plain rollback would set that
/// write aside without asking. (The launcher once remembered "this release
/// has written" for its whole life, and the second activation's first write
/// went unnoted.)
#[test]
fn a_release_activated_again_under_a_running_launcher_has_its_first_write_noted_again() {
    let _alone = FIRST_WRITE_THREADS.lock().unwrap_or_else(|p| p.into_inner());
    let (n, v1, v2) = notes_built_twice();
    n.root.ok(&["activate", "notes", &v2]);
    let serving = Serving::new(&n);
    n.root.ok(&["activate", "notes", &v1]);
    let add = |title: &str| {
        serving.add(title);
    };
    add("one");
    add("one more");
    let e = n.root.fails_with(1, &["rollback", "notes"]);
    assert!(e.contains("--restore --yes"), "v1 wrote: a rollback must choose: {e}");
    n.root.ok(&["activate", "notes", &v2]);
    n.root.ok(&["activate", "notes", &v1]);
    // While another change of the app holds its lock, the first write is
    // not written down (it could overwrite what that change writes)...
    let paths = serving.paths();
    let held = autoapp::release::journal::lock(&paths, true).unwrap();
    for i in 0..20 {
        add(&format!("two, {i}"));
    }
    // One thread waits to note it, however many writes come meanwhile. (A
    // thread names itself once it runs: on a busy machine it may not have
    // yet.)
    let waiting = || {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter(|t| {
                let comm = std::fs::read_to_string(t.as_ref().unwrap().path().join("comm")).unwrap_or_default();
                comm.trim_end() == "autoapp-first-w"
            })
            .count()
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while waiting() == 0 && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(waiting(), 1, "threads waiting to note the first write");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let a = autoapp::release::journal::activation(&paths).unwrap().unwrap();
    assert!(a.first_write_at.is_none(), "nothing is written under another change's lock: {a:?}");
    // ... and once it lets go, it is, with no other write needed.
    drop(held);
    let noted = std::time::Instant::now();
    while autoapp::release::journal::activation(&paths).unwrap().unwrap().first_write_at.is_none() {
        assert!(noted.elapsed() < std::time::Duration::from_secs(10), "the first write is noted once the lock is free");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    add("three");
    let e = n.root.fails_with(1, &["rollback", "notes"]);
    assert!(e.contains("--restore --yes"), "v1, activated again, wrote again: a rollback must choose: {e}");
    serving.apps.flush_record();
    drop(serving);
    let history = std::fs::read_to_string(n.app_dir().join("history.jsonl")).unwrap();
    assert_eq!(history.matches("first write").count(), 2, "{history}");
}

/// The tests that make `autoapp-first-write` threads, one at a time: one of
/// them counts those threads in this process.
static FIRST_WRITE_THREADS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The notes app built twice (versions 0.1.0 and 0.1.1, the same
/// migrations): the app and its two releases, none active.
fn notes_built_twice() -> (Notes, String, String) {
    let n = Notes::new();
    let v1 = n.build();
    n.edit_manifest(|m| m.replace("version = \"0.1.0\"", "version = \"0.1.1\""));
    let v2 = n.build();
    assert_ne!(v1, v2);
    (n, v1, v2)
}

/// One process serving the notes app's calls for as long as it lives, as a
/// launcher does.
struct Serving {
    apps: autoapp::apps::Apps,
    rt: tokio::runtime::Runtime,
    root: std::path::PathBuf,
}

impl Serving {
    fn new(n: &Notes) -> Serving {
        use autoapp::{apps::Apps, config::Config, root::Root};
        let apps = Apps::new(Root::open(n.root.path()).unwrap(), &Config::default()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        Serving { apps, rt, root: n.root.path().to_path_buf() }
    }

    /// Adds a note titled `title`, from the command line.
    fn add(&self, title: &str) -> autoapp::apps::Answer {
        let (me, app) = (autoapp::gate::Caller::command_line(), autoapp::manifest::AppId::parse("notes").unwrap());
        let input = serde_json::json!({ "title": title }).to_string();
        self.rt.block_on(self.apps.call(&me, &app, "notes.add", &input)).expect("the write is answered")
    }

    /// The app's folders.
    fn paths(&self) -> autoapp::root::AppPaths {
        autoapp::root::Root::open(&self.root).unwrap().app(&autoapp::manifest::AppId::parse("notes").unwrap())
    }
}

/// An activation switches the pointer before it writes its activation file:
/// a launcher's write that runs on the new release in between is that
/// activation's first write, and is noted once the activation lets go of the
/// app (else a plain rollback would set it aside without asking).
#[test]
fn a_write_between_an_activations_switch_and_its_record_is_noted_as_its_first() {
    let _alone = FIRST_WRITE_THREADS.lock().unwrap_or_else(|p| p.into_inner());
    let (n, v1, v2) = notes_built_twice();
    n.root.ok(&["activate", "notes", &v1]);
    let serving = Serving::new(&n);
    let add = |title: &str| serving.add(title);
    // v1 writes: its activation is noted, and (at its next write) the
    // launcher remembers that.
    add("one");
    let paths = serving.paths();
    assert!(autoapp::release::journal::activation(&paths).unwrap().unwrap().first_write_at.is_some());
    add("one more");
    // v2's activation, paused after its switch, before its activation file.
    let hold = tempfile::NamedTempFile::new().unwrap();
    let mut activation = n.root.paused(&["activate", "notes", &v2], "activate:switched", hold.path());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while n.active() != v2 {
        assert!(std::time::Instant::now() < deadline, "the activation switched");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let answer = add("two");
    assert_eq!(answer.release, v2, "the write ran on the release switched to");
    assert_eq!(autoapp::release::journal::activation(&paths).unwrap().unwrap().release, v1, "not written yet");
    drop(hold);
    assert!(activation.wait().unwrap().success());
    // Noted once the activation lets go, with no other write (the history's
    // line is the last thing written under the lock).
    let history = n.app_dir().join("history.jsonl");
    let noted = std::time::Instant::now();
    while std::fs::read_to_string(&history).unwrap().matches("first write").count() < 2 {
        assert!(noted.elapsed() < std::time::Duration::from_secs(10), "v2's first write is noted");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let a = autoapp::release::journal::activation(&paths).unwrap().unwrap();
    assert_eq!(a.release, v2);
    assert!(a.first_write_at.is_some(), "{a:?}");
    // The thread that noted it lets go of the app's lock just after its
    // history line: the rollback below must not find it still held.
    while autoapp::release::journal::lock(&paths, true).is_err() {
        assert!(noted.elapsed() < std::time::Duration::from_secs(10), "the app's lock is let go");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let e = n.root.fails_with(1, &["rollback", "notes"]);
    assert!(e.contains("--restore --yes"), "v2 wrote: a rollback must choose: {e}");
    serving.apps.flush_record();
}

#[test]
fn migrations_that_do_not_extend_the_applied_ones_are_refused() {
    let n = Notes::new();
    let v1 = n.build();
    n.root.ok(&["activate", "notes", &v1]);
    std::fs::write(n.ws.path().join("migrations/0001_init.sql"), "CREATE TABLE other (x);").unwrap();
    n.edit_manifest(|m| m.replace("version = \"0.1.0\"", "version = \"0.1.1\""));
    let changed = n.build();
    let e = n.root.refused(&["activate", "notes", &changed]);
    assert!(e.contains("forward only"), "{e}");
    assert_eq!(n.active(), v1);
    assert_eq!(n.folders_starting("data-prev-").len(), 1, "nothing was snapshotted for the refused release");
}

/// A migration that fails on the person's data (a unique index over two
/// notes of one title; the build's check, on empty data, passes it): the
/// activation fails saying why and is undone at once — no journal left for
/// the next command to find and recover, no snapshot kept, the release
/// before still active with its data, however often it is tried (fails
/// before: `journal.json` stayed, the next command said it "recovered an
/// interrupted operation", and each try left a `data-prev-` folder).
#[test]
fn an_activation_whose_migration_fails_on_the_data_is_undone_at_once() {
    let n = Notes::new();
    let v1 = n.build();
    n.root.ok(&["activate", "notes", &v1]);
    n.add("same");
    n.add("same");
    n.add_migration_of("0002_unique.sql", "CREATE UNIQUE INDEX by_title ON notes(title);\n");
    let v2 = n.build();
    let snapshots = n.folders_starting("data-prev-");
    for _ in 0..2 {
        let e = n.root.refused(&["activate", "notes", &v2]);
        assert!(e.contains("UNIQUE"), "{e}");
        assert!(!n.app_dir().join("journal.json").exists(), "the activation is undone, not left open");
        assert_eq!(n.folders_starting("data-prev-"), snapshots, "no snapshot kept");
    }
    let next = n.root.run(&["apps"]);
    let said = String::from_utf8_lossy(&next.stderr);
    assert!(next.status.success() && !said.contains("recovered"), "{said}");
    assert_eq!(n.active(), v1);
    assert_eq!(n.applied(), 1);
    assert_eq!(n.titles(&[]), ["same", "same"]);
}

#[test]
fn removal_needs_the_id_twice_and_keeps_everything_in_the_trash() {
    let n = Notes::new();
    let v1 = n.build();
    n.root.ok(&["activate", "notes", &v1]);
    let e = n.root.refused(&["remove", "notes", "--yes", "note"]);
    assert!(e.contains("give its id again"), "{e}");
    n.root.fails_with(2, &["remove", "notes"]);
    let compiled = n.root.path().join("cache/compiled/notes");
    assert!(compiled.is_dir());
    n.root.ok(&["remove", "notes", "--yes", "notes"]);
    assert!(!n.app_dir().exists());
    assert!(!compiled.exists(), "its compiled code goes: an app made later under its id reads none of it");
    let trash: Vec<_> = std::fs::read_dir(n.root.path().join("trash")).unwrap().collect();
    assert_eq!(trash.len(), 1);
    assert!(n.ws.path().join("autoapp.toml").exists(), "the chosen workspace stays where it is");
}

/// After a crash and a restart, the active release and the data agree, and
/// no note written before the operation began is lost.
fn assert_consistent(n: &Notes, expect_titles: &[&str]) {
    assert!(!n.app_dir().join("journal.json").exists(), "recovery closed the journal");
    assert_eq!(n.applied(), n.declared(), "the data has exactly the active release's migrations");
    assert_eq!(n.titles(&[]), expect_titles);
}

#[test]
fn an_activation_interrupted_at_any_step_is_finished_or_undone_at_the_next_start() {
    for point in [
        "activate:begun",
        "activate:copied",
        "activate:snapshotted",
        "activate:migrations-committed",
        "activate:migrated",
        "activate:switched",
        "activate:done",
    ] {
        let n = Notes::new();
        let v1 = n.build();
        n.root.ok(&["activate", "notes", &v1]);
        n.add("before");
        n.add_migration();
        let v2 = n.build();
        let crashed = std::process::Command::new(env!("CARGO_BIN_EXE_autoapp"))
            .args(["--root", n.root.path().to_str().unwrap(), "activate", "notes", &v2])
            .env("AUTOAPP_FAULT", point)
            .output()
            .unwrap();
        assert_eq!(crashed.status.code(), None, "{point}: the process was killed by the fault");
        let out = n.root.run(&["candidates", "notes"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if point != "activate:done" {
            assert!(stderr.contains("recovered notes"), "{point}: {stderr}");
        }
        assert_consistent(&n, &["before"]);
        let active = n.active();
        let forward = ["activate:migrations-committed", "activate:migrated", "activate:switched", "activate:done"];
        assert_eq!(active == v2, forward.contains(&point), "{point}: active is {active}");
        assert!(n.folders_starting("data-prev-").iter().all(|f| !f.ends_with(".partial")), "{point}");
        // The app works after recovery, and a later activation still can.
        n.add("after");
        if active == v1 {
            n.root.ok(&["activate", "notes", &v2]);
            assert_consistent(&n, &["after", "before"]);
        }
    }
}

#[test]
fn a_rollback_interrupted_at_any_step_is_finished_or_undone_at_the_next_start() {
    for point in ["rollback:begun", "rollback:moved-aside", "rollback:restored", "rollback:switched"] {
        let n = Notes::new();
        let v1 = n.build();
        n.root.ok(&["activate", "notes", &v1]);
        n.add("before");
        n.add_migration();
        let v2 = n.build();
        n.root.ok(&["activate", "notes", &v2]);
        let crashed = std::process::Command::new(env!("CARGO_BIN_EXE_autoapp"))
            .args(["--root", n.root.path().to_str().unwrap(), "rollback", "notes"])
            .env("AUTOAPP_FAULT", point)
            .output()
            .unwrap();
        assert_eq!(crashed.status.code(), None, "{point}: the process was killed by the fault");
        n.root.ok(&["candidates", "notes"]);
        assert_consistent(&n, &["before"]);
        let expect = if point == "rollback:begun" { &v2 } else { &v1 };
        assert_eq!(&n.active(), expect, "{point}");
        assert!(n.app_dir().join("data").is_dir(), "{point}: there is always a data folder");
    }
}

/// A downgrade that a crash interrupted is finished by recovery as the
/// downgrade itself ends: the activation file names the release switched to,
/// active by no activation of its own, and keeps the first write noted
/// before — so a plain rollback afterwards is refused as it is after a
/// downgrade that ran whole, and a write now is not taken for the first
/// write of the activation it left.
#[test]
fn a_downgrade_interrupted_at_any_step_is_finished_as_the_downgrade_ends() {
    let activation = |n: &Notes| -> serde_json::Value {
        let text = std::fs::read_to_string(n.app_dir().join("activation.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    };
    // The activation file after the downgrade, and the one before it.
    let downgraded = |fault: Option<&str>| {
        let (n, v1, v2) = notes_v2_over_a_downgradable_v1();
        let before = activation(&n);
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_autoapp"));
        command.args(["--root", n.root.path().to_str().unwrap(), "rollback", "notes", "--downgrade", &v1]);
        if let Some(point) = fault {
            command.env("AUTOAPP_FAULT", point);
        }
        let o = command.output().unwrap();
        match fault {
            Some(point) => {
                assert_eq!(o.status.code(), None, "{point}: the process was killed by the fault");
                let out = n.root.run(&["candidates", "notes"]);
                let said = String::from_utf8_lossy(&out.stderr);
                assert!(said.contains("recovered notes"), "{point}: {said}");
            }
            None => assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr)),
        }
        assert_eq!(n.active(), v1, "{fault:?}");
        assert_eq!(n.titles(&[]), ["one", "two"], "{fault:?}");
        let after = activation(&n);
        assert_eq!(after["release"], v1.as_str(), "{fault:?}: {after}");
        assert!(after["previous"].is_null() && after["snapshot"].is_null(), "{fault:?}: {after}");
        assert!(before["first_write_at"].is_string(), "{before}");
        assert_eq!(after["first_write_at"], before["first_write_at"], "{fault:?}: the write of v2 stays noted");
        (n, v2)
    };
    let (whole, v2) = downgraded(None);
    let refused = whole.root.fails_with(1, &["rollback", "notes"]);
    assert!(!refused.contains(&v2[..12]), "{refused}");
    for point in ["downgrade:begun", "downgrade:switched"] {
        let (n, _) = downgraded(Some(point));
        assert_eq!(n.root.fails_with(1, &["rollback", "notes"]), refused, "{point}");
    }
}

/// The rows of the lifecycle actions in the record of the data folder `data`.
fn actions_in(data: &Path) -> Vec<(String, String, String, String, String)> {
    let conn = rusqlite::Connection::open(data.join("runs.sqlite")).unwrap();
    let mut stmt = conn
        .prepare("SELECT route, channel, caller, outcome, release FROM runs WHERE effect = 'lifecycle' ORDER BY seq")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn every_lifecycle_action_is_recorded_with_its_channel_and_a_rollback_keeps_the_record_whole() {
    let n = Notes::new();
    let v1 = n.build();
    n.root.ok(&["activate", "notes", &v1]);
    n.add("one");
    n.add_migration();
    let v2 = n.build();
    n.root.ok(&["preview", "notes"]);
    n.root.ok(&["preview-stop", "notes"]);
    n.root.ok(&["activate", "notes", &v2]);
    n.root.ok(&["rollback", "notes"]);
    // Refused actions are recorded too, with why.
    n.root.refused(&["activate", "notes", "ffffffff"]);
    n.root.refused(&["grant", "notes", "network:https://example.com"]);
    let data = n.app_dir().join("data");
    let rows = actions_in(&data);
    let seen: Vec<(&str, &str)> = rows.iter().map(|r| (r.0.as_str(), r.3.as_str())).collect();
    assert_eq!(
        seen,
        [
            ("create", "ok"),
            ("activate", "ok"),
            ("preview-start", "ok"),
            ("preview-stop", "ok"),
            ("activate", "ok"),
            ("rollback", "ok"),
            ("activate", "error"),
            ("grant", "error"),
        ],
        "after the rollback the record still has v2's activation: {rows:#?}"
    );
    assert!(rows.iter().all(|r| r.1 == "user" && r.2 == "command line"), "{rows:#?}");
    assert_eq!([&rows[1].4, &rows[2].4, &rows[4].4, &rows[5].4], [&v1, &v2, &v2, &v1], "the release each concerned");
    // `autoapp runs` shows them beside the calls, in order.
    let all: Vec<serde_json::Value> = serde_json::from_str(&n.root.ok(&["runs", "notes", "--json"])).unwrap();
    let order: Vec<&str> = all.iter().map(|r| r["route"].as_str().unwrap()).collect();
    assert_eq!(&order[..4], ["create", "activate", "notes.add", "preview-start"], "{order:?}");
    let text = n.root.ok(&["runs", "notes"]);
    assert!(text.contains("lifecycle") && text.contains("rollback"), "{text}");
    // The person's own actions and calls read as theirs, in the text too.
    assert!(all.iter().all(|r| r["answered_by"] == "person"), "every row here is the person's: {all:#?}");
    assert!(text.lines().next().unwrap().contains("answered by"), "{text}");
    let activate = text.lines().find(|l| l.contains(" activate ")).unwrap();
    assert!(activate.contains(" person "), "{activate}");
    // A refusal's reason says why, and no argument reaches the record.
    let grant = all.iter().find(|r| r["route"] == "grant").unwrap();
    assert!(grant["reason"].as_str().unwrap().contains("does not ask for network"), "{grant}");

    // Removal is recorded in the record that moves to the trash with the data.
    n.root.ok(&["remove", "notes", "--yes", "notes"]);
    let trashed = std::fs::read_dir(n.root.path().join("trash")).unwrap().next().unwrap().unwrap().path();
    let rows = actions_in(&trashed.join("data"));
    let last = rows.last().unwrap();
    assert_eq!((last.0.as_str(), last.3.as_str(), last.4.as_str()), ("remove", "ok", v1.as_str()));
    assert!(!n.app_dir().exists(), "no folder was made again for the removed app");
}

#[test]
fn actions_from_the_panel_are_recorded_as_the_panels_answer_with_their_kinds_status_and_a_render_is_a_read() {
    let n = Notes::new();
    let v1 = n.build();
    // No browser: the launcher prints the addresses it would open.
    std::fs::write(n.root.path().join("config.toml"), format!("{}opener = \"none\"\n", crate::support::base_config()))
        .unwrap();
    let launcher = crate::support::Served::start(&n.root, &["open"]);
    let mut panel = launcher.tab("the Autoapp panel");
    let body = serde_json::json!({ "app": "notes", "release": v1 }).to_string();
    let r = panel.request("POST", "/api/activate", Some(&body)).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // A failed action answers with the status of its kind, and says why.
    for (path, body, status, says) in [
        ("/api/activate", r#"{"app":"ghost","release":"abc"}"#, 404, "there is no app `ghost`"),
        ("/api/activate", r#"{"app":"notes","release":"ffffffff"}"#, 404, "no release of notes starts with"),
        ("/api/grant", r#"{"app":"notes","capabilities":["bogus"]}"#, 400, "`bogus` is not a capability"),
        ("/api/preview-stop", r#"{"app":"notes"}"#, 404, "notes has no preview to stop"),
        ("/api/activate", &body, 409, "already the active release"),
    ] {
        let r = panel.request("POST", path, Some(body)).unwrap();
        let text = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, status, "{path} {body}: {text}");
        assert!(text.contains(says), "{path} {body}: {text}");
    }
    let mut tab = launcher.tab("notes");
    let r = tab.request("GET", "/api/view/index?query=%7B%7D", None).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    launcher.stop();
    let rows = actions_in(&n.app_dir().join("data"));
    let who: Vec<(&str, &str, &str, &str)> =
        rows.iter().map(|r| (r.0.as_str(), r.1.as_str(), r.2.as_str(), r.3.as_str())).collect();
    assert_eq!(
        who,
        [
            ("create", "user", "command line", "ok"),
            ("activate", "user", "panel", "ok"),
            ("activate", "user", "panel", "error"),
            ("grant", "user", "panel", "error"),
            ("preview-stop", "user", "panel", "error"),
            ("activate", "user", "panel", "error"),
        ]
    );
    let all: Vec<serde_json::Value> = serde_json::from_str(&n.root.ok(&["runs", "notes", "--json"])).unwrap();
    let render = all.iter().find(|r| r["route"] == "page:index").expect("the render is recorded");
    assert_eq!(
        (&render["effect"], &render["channel"], &render["outcome"]),
        (&"read".into(), &"user".into(), &"ok".into())
    );
}

/// A write's row is committed before the write (issue 54: a process killed
/// between the two must never keep the write without its row). An
/// activation that read the record's last row while a write was between
/// its two commits took that write for one its snapshot held; the snapshot
/// did not hold it, and a plain rollback put the data back without that
/// acknowledged write. The activation now reads the last row while no
/// write is between its two commits (it waits for the store's write lock).
#[test]
fn an_activation_beside_a_write_between_its_two_commits_loses_no_write_to_a_rollback() {
    let (n, v1, v2) = notes_built_twice();
    n.root.ok(&["activate", "notes", &v1]);
    n.add("before");
    let hold = tempfile::NamedTempFile::new().unwrap();
    let between = r#"{"title":"between"}"#;
    let mut writing = n.root.paused(&["call", "notes", "notes.add", between], "store:rows-committed", hold.path());
    // Its row is in the record, its write not yet.
    let rows = || {
        let runs: serde_json::Value = serde_json::from_str(&n.root.ok(&["runs", "notes", "--json"])).unwrap();
        runs.as_array().unwrap().iter().filter(|r| r["route"] == "notes.add").count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while rows() < 2 {
        assert!(std::time::Instant::now() < deadline, "the write's row went in");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut activate = n.root.command();
    activate.args(["activate", "notes", &v2]);
    let activating = std::thread::spawn(move || activate.output().unwrap());
    std::thread::sleep(std::time::Duration::from_millis(700));
    drop(hold);
    assert!(writing.wait().unwrap().success(), "the write was answered");
    let activated = activating.join().unwrap();
    assert!(activated.status.success(), "{}", String::from_utf8_lossy(&activated.stderr));
    // The activation judges a write whose row it read before its snapshot
    // to be in the snapshot (it notes only the writes recorded after): so
    // it is. (Before, the snapshot was taken with the write still between
    // its two commits, and only the writer's own noting, which a killed
    // process never does, kept a rollback from losing it.)
    let snapshot = n.folders_starting("data-prev-").into_iter().max().expect("the activation's snapshot");
    let held = rusqlite::Connection::open(n.app_dir().join(&snapshot).join("app.sqlite")).unwrap();
    let there: i64 = held.query_row("SELECT count(*) FROM notes WHERE title = 'between'", [], |r| r.get(0)).unwrap();
    assert_eq!(there, 1, "the snapshot holds the write whose row came before it");
    // A plain rollback either asks (the write noted as the activation's
    // first) or puts back data that holds the write.
    let back = n.root.run(&["rollback", "notes"]);
    if back.status.success() {
        let listed = n.root.call("notes", "notes.list", "{}");
        let titles: Vec<&str> =
            listed["notes"].as_array().unwrap().iter().map(|t| t["title"].as_str().unwrap()).collect();
        assert!(
            titles.contains(&"between") && titles.contains(&"before"),
            "an acknowledged write was lost: {titles:?}"
        );
    } else {
        assert!(String::from_utf8_lossy(&back.stderr).contains("--restore --yes"));
    }
}
