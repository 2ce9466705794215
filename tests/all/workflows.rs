//! Workflows: routes the launcher runs on a schedule, on channel `workflow`,
//! through the gate; a write runs without asking only when the person
//! approved that workflow of that release.

use std::io::BufRead as _;
use std::time::{Duration, Instant};

use crate::support::{Served, TestRoot, beside, guest_component};

/// A root whose workflows may run every second (releases: every minute).
fn fast_root(extra_config: &str) -> TestRoot {
    TestRoot::with_config(&format!("opener = \"none\"\nworkflow_min_every_secs = 1\n{extra_config}"))
}

/// Registers `guests/<guest>` with `extra` appended to its manifest, builds
/// it from the prebuilt component and activates it; returns the workspace and
/// the release id.
fn install_with_workflows(t: &TestRoot, guest: &str, extra: &str) -> (tempfile::TempDir, String) {
    let ws = tempfile::Builder::new().prefix("ws-").tempdir().unwrap();
    let src = crate::support::repo().join("guests").join(guest);
    let manifest = std::fs::read_to_string(src.join("autoapp.toml")).unwrap();
    std::fs::write(ws.path().join("autoapp.toml"), format!("{manifest}\n{extra}\n")).unwrap();
    if src.join("migrations").is_dir() {
        std::fs::create_dir_all(ws.path().join("migrations")).unwrap();
        for m in std::fs::read_dir(src.join("migrations")).unwrap() {
            let m = m.unwrap();
            std::fs::copy(m.path(), ws.path().join("migrations").join(m.file_name())).unwrap();
        }
    }
    t.ok(&["create", guest, "--at", ws.path().to_str().unwrap()]);
    let id = build(t, guest);
    if guest == "hostile" {
        t.grant_all(guest);
    }
    t.ok(&["activate", guest, &id]);
    (ws, id)
}

fn build(t: &TestRoot, guest: &str) -> String {
    let component = guest_component(guest);
    let out = t.ok(&["build", guest, "--component", component.to_str().unwrap(), "--json"]);
    serde_json::from_str::<serde_json::Value>(&out).unwrap()["release"].as_str().unwrap().to_string()
}

/// The record's rows of workflow `name` of `app`.
fn runs_of(t: &TestRoot, app: &str, name: &str) -> Vec<serde_json::Value> {
    let out = t.ok(&["runs", app, "--limit", "10000", "--json"]);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    rows.into_iter().filter(|r| r["channel"] == "workflow" && r["caller"] == name).collect()
}

/// Waits (up to a minute) until the rows of workflow `name` satisfy `enough`.
fn wait_for_runs(
    t: &TestRoot,
    app: &str,
    name: &str,
    what: &str,
    enough: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let rows = runs_of(t, app, name);
        if enough(&rows) {
            return rows;
        }
        assert!(Instant::now() < give_up, "no {what} within a minute; the workflow's rows: {rows:#?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn schedules_and_workflows_that_do_not_fit_are_refused_with_every_problem() {
    let t = TestRoot::new();
    let ws = tempfile::Builder::new().prefix("ws-").tempdir().unwrap();
    let src = crate::support::repo().join("guests").join("hostile");
    let manifest = std::fs::read_to_string(src.join("autoapp.toml")).unwrap();
    let bad = r#"
[[workflow]]
name = "a"
route = "count"
every = "15x"

[[workflow]]
name = "b"
route = "count"
cron = "0 7 * *"

[[workflow]]
name = "c"
route = "nope"
every = "1h"

[[workflow]]
name = "a"
route = "count"
every = "1h"

[[workflow]]
name = "d"
route = "sql"
input = { sql = 7 }
every = "1h"

[[workflow]]
name = "e"
route = "count"
every = "1h"
cron = "0 7 * * *"

[[workflow]]
name = "f"
route = "count"
"#;
    std::fs::write(ws.path().join("autoapp.toml"), format!("{manifest}\n{bad}")).unwrap();
    t.ok(&["create", "hostile", "--at", ws.path().to_str().unwrap()]);
    let component = guest_component("hostile");
    let out = t.fails_with(1, &["build", "hostile", "--component", component.to_str().unwrap()]);
    for expected in [
        "workflow `a`: every `15x` is not a duration",
        "workflow `b`: cron `0 7 * *` has 4 fields, not 5",
        "workflow `c`: there is no route `nope`",
        "workflow `a` is declared twice",
        "workflow `d`: its input does not fit route `sql`",
        "workflow `e` has both every and cron",
        "workflow `f` has no schedule",
    ] {
        assert!(out.contains(expected), "missing `{expected}` in:\n{out}");
    }

    // Good syntax, but more often than a release may run: refused at build.
    let quick = "[[workflow]]\nname = \"tally\"\nroute = \"count\"\nevery = \"30s\"\n";
    std::fs::write(ws.path().join("autoapp.toml"), format!("{manifest}\n{quick}")).unwrap();
    let out = t.fails_with(1, &["build", "hostile", "--component", component.to_str().unwrap()]);
    assert!(
        out.contains("workflow `tally` runs every 30s: a release's workflows run at most once every 60 seconds"),
        "{out}"
    );

    // And with a migration whose file is missing and a broken workflow
    // besides: all of them in the one refusal (before: one build each; the
    // workspace lacks 0001_init.sql too).
    let missing = manifest.replace(
        r#"migrations = ["migrations/0001_init.sql"]"#,
        r#"migrations = ["migrations/0001_init.sql", "migrations/missing.sql"]"#,
    );
    assert_ne!(missing, manifest);
    let broken = "[[workflow]]\nname = \"g\"\nroute = \"count\"\nevery = \"15x\"\n";
    std::fs::write(ws.path().join("autoapp.toml"), format!("{missing}\n{quick}\n{broken}")).unwrap();
    let out = t.fails_with(1, &["build", "hostile", "--component", component.to_str().unwrap()]);
    for expected in [
        "has 4 problems",
        "workflow `tally` runs every 30s",
        "migration migrations/missing.sql does not exist in",
        "workflow `g`: every `15x` is not a duration",
    ] {
        assert!(out.contains(expected), "missing `{expected}` in:\n{out}");
    }
}

#[test]
fn a_read_workflow_runs_on_its_schedule_and_each_run_is_recorded() {
    let t = fast_root("");
    install_with_workflows(&t, "hostile", "[[workflow]]\nname = \"tally\"\nroute = \"count\"\nevery = \"1s\"\n");
    let served = Served::start(&t, &["serve", "hostile"]);
    let rows = wait_for_runs(&t, "hostile", "tally", "two runs", |r| r.len() >= 2);
    for r in &rows {
        assert_eq!(r["route"], "count");
        assert_eq!(r["decision"], "allowed", "{r}");
        assert_eq!(r["outcome"], "ok", "{r}");
    }
    served.stop();
    let status: serde_json::Value = serde_json::from_str(&t.ok(&["workflows", "hostile", "--json"])).unwrap();
    assert_eq!(status[0]["name"], "tally");
    assert_eq!(status[0]["needsApproval"], false);
    assert_eq!(status[0]["lastRun"]["outcome"], "ok");
    assert!(status[0]["nextRun"].is_string());
    let explained: serde_json::Value = serde_json::from_str(&t.ok(&["explain", "hostile", "--json"])).unwrap();
    assert_eq!(explained["workflows"][0]["schedule"], "every 1s");
    assert_eq!(explained["workflows"][0]["needs_approval"], false);
}

#[test]
fn a_write_workflow_asks_until_approved_for_its_release_and_a_new_release_needs_a_new_approval() {
    let t = fast_root("");
    let (ws, first) =
        install_with_workflows(&t, "hostile", "[[workflow]]\nname = \"marker\"\nroute = \"mark\"\nevery = \"1s\"\n");
    let served = Served::start(&t, &["serve", "hostile"]);

    // No page open: each run is refused at once, and recorded.
    let rows = wait_for_runs(&t, "hostile", "marker", "a refused run", |r| !r.is_empty());
    assert_eq!(rows[0]["decision"], "refused", "{}", rows[0]);
    assert!(rows[0]["reason"].as_str().unwrap().contains("nobody could be asked"), "{}", rows[0]);
    assert_eq!(t.call("hostile", "count", "{}")["marks"], 0);

    // Approved for this release: runs without asking.
    let said = t.ok(&["workflow", "approve", "hostile", "marker"]);
    assert!(said.contains("approved workflow marker of hostile"), "{said}");
    let rows = wait_for_runs(&t, "hostile", "marker", "an approved run", |r| r.iter().any(|x| x["outcome"] == "ok"));
    let ran = rows.iter().find(|x| x["outcome"] == "ok").unwrap();
    assert_eq!(ran["decision"], "confirmed");
    assert_eq!(ran["release"], first.as_str());
    assert!(t.call("hostile", "count", "{}")["marks"].as_i64().unwrap() >= 1);
    let status: serde_json::Value = serde_json::from_str(&t.ok(&["workflows", "hostile", "--json"])).unwrap();
    assert_eq!(status[0]["approved"], true);

    // A new release (the same workflow) needs a new approval.
    let manifest = std::fs::read_to_string(ws.path().join("autoapp.toml")).unwrap();
    std::fs::write(ws.path().join("autoapp.toml"), format!("{manifest}\n# a new release\n")).unwrap();
    let second = build(&t, "hostile");
    assert_ne!(first, second);
    t.ok(&["activate", "hostile", &second]);
    let rows = wait_for_runs(&t, "hostile", "marker", "a refused run of the new release", |r| {
        r.iter().any(|x| x["release"] == second.as_str() && x["decision"] == "refused")
    });
    assert!(rows.iter().all(|x| x["release"] != second.as_str() || x["decision"] != "confirmed"));
    let status: serde_json::Value = serde_json::from_str(&t.ok(&["workflows", "hostile", "--json"])).unwrap();
    assert_eq!(status[0]["approved"], false);

    // Revoked: asks again (approve the new release, then take it back).
    t.ok(&["workflow", "approve", "hostile", "marker"]);
    let said = t.ok(&["workflow", "revoke", "hostile", "marker"]);
    assert!(said.contains("no longer approved"), "{said}");
    let line = t.refused(&["workflow", "revoke", "hostile", "marker"]);
    assert!(line.contains("is not approved"), "{line}");
    let line = t.refused(&["workflow", "approve", "hostile", "nope"]);
    assert!(line.contains("has no workflow `nope`; its workflows are marker"), "{line}");
    served.stop();
}

#[test]
fn a_write_workflow_with_a_page_open_asks_the_person() {
    let t = fast_root("");
    install_with_workflows(&t, "hostile", "[[workflow]]\nname = \"marker\"\nroute = \"mark\"\nevery = \"1s\"\n");
    let served = Served::start(&t, &["serve", "hostile"]);
    let tab = served.tab("hostile");
    // The page's event stream: the person is there to be asked.
    let mut lines = crate::support::event_stream(&tab);
    let mut line = String::new();
    loop {
        line.clear();
        assert!(lines.read_line(&mut line).unwrap() > 0, "the event stream ended before a question");
        if line.starts_with("event: asked") {
            break;
        }
    }
    line.clear();
    lines.read_line(&mut line).unwrap();
    assert!(line.contains("\"channel\":\"workflow\"") && line.contains("\"caller\":\"marker\""), "{line}");
    assert!(line.contains("\"route\":\"mark\""), "{line}");
    drop(beside(&tab));
    served.stop();
}

#[test]
fn a_run_still_going_when_the_next_is_due_is_skipped_and_does_not_hold_up_another_app() {
    let t = fast_root("call_deadline_ms = 2500\n");
    install_with_workflows(&t, "hostile", "[[workflow]]\nname = \"loop\"\nroute = \"spin\"\nevery = \"1s\"\n");
    t.install("bench");
    let launcher = Served::start(&t, &["open"]);
    let mut panel = launcher.tab("the Autoapp panel");
    let mut bench = launcher.opened(&mut panel, "bench");
    let rows = wait_for_runs(&t, "hostile", "loop", "a skipped run and a stopped one", |r| {
        r.iter().any(|x| x["reason"].as_str().unwrap_or("").starts_with("skipped"))
            && r.iter().any(|x| x["outcome"] == "trap")
    });
    // A run is either skipped or runs until it is stopped at its deadline:
    // runs of one workflow never overlap, so none ends any other way.
    assert!(rows.iter().all(|x| x["outcome"] == "trap" || x["outcome"] == "not-run"), "{rows:#?}");
    // Meanwhile another app answers.
    for i in 0..10 {
        let r = bench.request("POST", "/api/call/put", Some(&format!(r#"{{"key":"beside-{i}"}}"#))).unwrap();
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    launcher.stop();
}

#[test]
fn a_preview_runs_no_workflow() {
    let t = fast_root("");
    let (ws, _) = install_with_workflows(&t, "hostile", "");
    // A candidate with a workflow, previewed while the launcher runs.
    let manifest = std::fs::read_to_string(ws.path().join("autoapp.toml")).unwrap();
    std::fs::write(
        ws.path().join("autoapp.toml"),
        format!("{manifest}\n[[workflow]]\nname = \"marker\"\nroute = \"mark\"\nevery = \"1s\"\n"),
    )
    .unwrap();
    let candidate = build(&t, "hostile");
    let launcher = Served::start(&t, &["serve", "hostile"]);
    t.ok(&["preview", "hostile", &candidate]);
    // Long enough for a few runs, if anything ran them.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(t.call("hostile", "count", "{}")["marks"], 0);
    let preview: serde_json::Value =
        serde_json::from_str(&t.ok(&["call", "hostile", "count", "{}", "--preview"])).unwrap();
    assert_eq!(preview["marks"], 0);
    let out = t.ok(&["runs", "hostile", "--json"]);
    assert!(!out.contains("\"workflow\""), "the active release has no workflow, and the preview's ran none: {out}");
    let mut found = Vec::new();
    for entry in walk(&t.path().join("apps/hostile")) {
        if entry.file_name().is_some_and(|n| n == "runs.sqlite") {
            let c = rusqlite::Connection::open(&entry).unwrap();
            let n: i64 = c.query_row("SELECT count(*) FROM runs WHERE channel = 'workflow'", [], |r| r.get(0)).unwrap();
            found.push((entry.clone(), n));
        }
    }
    assert!(found.iter().all(|(_, n)| *n == 0), "{found:?}");
    t.ok(&["preview-stop", "hostile"]);
    launcher.stop();
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}
