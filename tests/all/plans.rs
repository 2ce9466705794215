//! Plans and runs through the real launcher: agents on control connections of
//! their own (as `autoapp mcp --engineer` keeps one), the person answering in
//! the panel (its event stream and `/api/answer`), the command line stopping.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Served, TestRoot};

/// One agent: one authenticated control connection for all its calls.
struct Agent {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Agent {
    fn connect(root: &TestRoot) -> Agent {
        let file: Value =
            serde_json::from_str(&std::fs::read_to_string(root.path().join("launcher.json")).unwrap()).unwrap();
        let s = TcpStream::connect(("127.0.0.1", file["port"].as_u64().unwrap() as u16)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
        let mut a = Agent { r: BufReader::new(s.try_clone().unwrap()), w: s };
        a.send(&json!({ "type": "auth", "secret": file["secret"] }));
        assert_eq!(a.answer()["ok"], true);
        a
    }

    fn send(&mut self, v: &Value) {
        let mut line = serde_json::to_vec(v).unwrap();
        line.push(b'\n');
        self.w.write_all(&line).unwrap();
    }

    fn answer(&mut self) -> Value {
        loop {
            let mut line = String::new();
            assert!(self.r.read_line(&mut line).unwrap() > 0, "the launcher answered");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v.get("progress").is_none() {
                return v;
            }
        }
    }

    fn start(&mut self, tool: &str, arguments: Value) {
        self.start_in(tool, arguments, None);
    }

    /// Sends a call that names an engineer session (as `autoapp mcp --engineer` does).
    fn start_in(&mut self, tool: &str, arguments: Value, session: Option<&str>) {
        let call = json!({ "type": "engineer", "tool": tool, "arguments": arguments, "client": "planner", "session": session });
        self.send(&call);
    }

    /// Opens an engineer session on this connection; its token.
    fn session(&mut self) -> String {
        self.send(&json!({ "type": "session" }));
        self.answer()["session"].as_str().unwrap().to_string()
    }

    fn tool(&mut self, tool: &str, arguments: Value) -> Value {
        self.start(tool, arguments);
        self.answer()
    }

    fn ok(&mut self, tool: &str, arguments: Value) -> Value {
        let a = self.tool(tool, arguments.clone());
        assert_eq!(a["ok"], true, "{tool} {arguments}: {a}");
        a["output"].clone()
    }

    fn refused(&mut self, tool: &str, arguments: Value, kind: &str, words: &str) {
        let a = self.tool(tool, arguments.clone());
        assert_eq!(a["ok"], false, "{tool} {arguments} should be refused: {a}");
        let message = a["error"]["message"].as_str().unwrap();
        assert_eq!(a["error"]["kind"], kind, "{message}");
        assert!(message.contains(words), "`{message}` should say `{words}`");
    }
}

/// The panel's event stream, on a thread: each question asked, as JSON.
pub(crate) fn questions(panel: &crate::support::http::Http) -> mpsc::Receiver<Value> {
    let mut lines = crate::support::event_stream(panel);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut asked = false;
        let mut line = String::new();
        while lines.read_line(&mut line).is_ok_and(|n| n > 0) {
            if line.starts_with("event: asked") {
                asked = true;
            } else if asked && let Some(data) = line.strip_prefix("data: ") {
                let v: Value = serde_json::from_str(data.trim()).unwrap();
                if tx.send(v["question"].clone()).is_err() {
                    return;
                }
                asked = false;
            }
            line.clear();
        }
    });
    rx
}

fn next_question(rx: &mpsc::Receiver<Value>) -> Value {
    rx.recv_timeout(Duration::from_secs(60)).expect("a question for the person")
}

fn answer(panel: &mut crate::support::http::Http, q: &Value, yes: bool) {
    let body = json!({ "requestId": q["requestId"], "releaseId": q["releaseId"], "argumentsHash": q["argumentsHash"], "approve": yes });
    let r = panel.request("POST", "/api/answer", Some(&body.to_string())).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

fn plans(t: &TestRoot, app: &str) -> Vec<Value> {
    let v: Value = serde_json::from_str(&t.ok(&["plans", app, "--json"])).unwrap();
    v["plans"].as_array().unwrap().clone()
}

/// Plan `id` of jotter once it is stopped (within 10 s), or as it is then.
fn stopped(t: &TestRoot, id: u64) -> Value {
    for _ in 0..100 {
        let plan = plans(t, "jotter").into_iter().find(|p| p["id"] == id).unwrap();
        if plan["state"] == "stopped" {
            return plan;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    plans(t, "jotter").into_iter().find(|p| p["id"] == id).unwrap()
}

const LIST_ARM: &str = r#""entries.list" => json!({ "entries": entries(input["limit"].as_i64().unwrap_or(20))? }),"#;

/// Writes a plan of `app` with one task and submits it; its id.
fn submitted(a: &mut Agent, app: &str) -> u64 {
    let open = a.ok("plan_open", json!({ "app": app, "request": "mark the list as edited", "summary": "one arm" }));
    let id = open["plan"]["id"].as_u64().unwrap();
    a.ok("plan_task", json!({ "plan": id, "title": "edit the list route" }));
    a.ok("plan_submit", json!({ "plan": id }));
    id
}

#[test]
fn a_plan_is_read_first_and_its_run_approves_only_its_own_apps_changes_until_it_ends() {
    let t = TestRoot::with_config("opener = \"none\"\n");
    t.ok(&["create", "jotter"]);
    let active = t.build("jotter");
    t.ok(&["activate", "jotter", &active]);
    t.ok(&["create", "other"]);
    let ws = t.path().join("apps/jotter/workspace");
    let served = Served::start(&t, &["open"]);
    let mut panel = served.tab("the Autoapp panel");
    let asked = questions(&panel);
    let mut a = Agent::connect(&t);

    // Drafting is a read: nobody is asked. What the app does not have is marked.
    let open = a.ok(
        "plan_open",
        json!({ "app": "jotter", "request": "the person asked: mark the list as edited",
                "summary": "change one arm of the list route, build, try it in a preview",
                "touches": { "routes": ["entries.list", "entries.purge"], "tables": ["entries", "nope"], "files": ["src/lib.rs"] } }),
    );
    let plan = open["plan"]["id"].as_u64().unwrap();
    let marks: Vec<(String, bool)> = open["plan"]["touches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["name"].as_str().unwrap().to_string(), x["exists"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        marks,
        [
            ("entries.list".into(), true),
            ("entries.purge".into(), false),
            ("entries".into(), true),
            ("nope".into(), false),
            ("src/lib.rs".into(), true)
        ],
        "{open}"
    );
    assert!(open["message"].as_str().unwrap().contains("2 of the things it touches do not exist"), "{open}");
    a.ok("plan_task", json!({ "plan": plan, "title": "edit the list route", "detail": "add \"edited\": true" }));
    a.ok("plan_task", json!({ "plan": plan, "title": "build and preview it" }));
    a.refused("plan_start", json!({ "plan": plan }), "conflict", "is a draft: submit it");
    a.ok("plan_submit", json!({ "plan": plan }));
    a.refused("plan_task", json!({ "plan": plan, "title": "late" }), "conflict", "no longer a draft");
    a.refused("plan_read", json!({ "plan": 999 }), "not-found", "there is no plan 999");

    // Read first, build later: a change waits for the person's answer to the plan.
    let edit = json!({ "app": "jotter", "path": "src/lib.rs", "old": LIST_ARM,
                       "new": LIST_ARM.replace("? }),", "?, \"edited\": true }),") });
    a.refused("source_edit", edit.clone(), "conflict", "waits for the person to read it");
    assert_eq!(plans(&t, "jotter")[0]["state"], "submitted");

    // Another agent may not start it (the person's yes would go to it), nor add to it.
    let mut b = Agent::connect(&t);
    b.refused("plan_start", json!({ "plan": plan }), "conflict", "written by another agent's connection");
    assert!(asked.try_recv().is_err(), "nobody was asked for another agent's start");

    // plan_start asks the person; the card shows the plan and its marks.
    a.start("plan_start", json!({ "plan": plan }));
    let q = next_question(&asked);
    assert_eq!((q["route"].as_str(), q["channel"].as_str()), (Some("plan_start"), Some("ai")));
    let card = q["change"].as_str().unwrap();
    for said in [
        "  | request: the person asked",
        "  | [ ] 1. edit the list route",
        "entries.purge  ← the app has no such thing now",
        "only jotter",
    ] {
        assert!(card.contains(said), "the card says {said:?}: {card}");
    }
    assert_eq!(q["standingCovers"], false, "the standing approval never starts a run");
    answer(&mut panel, &q, true);
    let started = a.answer();
    assert_eq!(started["output"]["plan"]["state"], "running", "{started}");

    // The run answers its own app's edits, builds and previews: no card.
    let edited = a.ok("source_edit", edit);
    assert_eq!(edited["answeredBy"], format!("run {plan}"));
    a.ok("plan_task_done", json!({ "plan": plan, "task": 1, "note": "edited" }));
    let built = a.ok("candidate_build", json!({ "app": "jotter" }));
    let candidate = built["release"].as_str().unwrap().to_string();
    a.ok("candidate_preview", json!({ "app": "jotter" }));
    let listed = a.ok("preview_call", json!({ "app": "jotter", "route": "entries.list" }));
    assert_eq!(listed["output"]["edited"], true);
    a.ok("preview_call", json!({ "app": "jotter", "route": "entries.add", "input": { "text": "in the preview" } }));
    // The change cycle under the run: edit, build, preview and a read in it, one call, no card.
    let cycled = a.ok(
        "candidate_cycle",
        json!({ "app": "jotter", "path": "src/lib.rs", "old": "\"edited\": true", "new": "\"edited\": \"twice\"", "check": "entries.list" }),
    );
    assert_eq!(cycled["check"]["output"]["edited"], "twice", "{cycled}");
    // A cycle whose build fails stops there and answers with the compiler's messages.
    let broken = json!({ "app": "jotter", "path": "src/lib.rs", "old": "\"edited\": \"twice\"", "new": "\"edited\": not_a_thing" });
    a.refused(
        "candidate_cycle",
        broken,
        "invalid-input",
        "the cycle stopped at step 2 of 3 (the build): the build failed",
    );
    let fixed = json!({ "app": "jotter", "path": "src/lib.rs", "old": "\"edited\": not_a_thing", "new": "\"edited\": true", "check": "entries.add" });
    a.refused("candidate_cycle", fixed, "invalid-input", "`entries.add` is a write route");
    assert!(asked.try_recv().is_err(), "nothing was asked of the person");

    // A change of another app still asks (the person says no).
    a.start("source_write", json!({ "app": "other", "path": "NOTES.md", "content": "x" }));
    let q = next_question(&asked);
    assert_eq!(q["appId"], "other");
    answer(&mut panel, &q, false);
    assert_eq!(a.answer()["error"]["kind"], "denied");
    // Another connection may not change the run's app; the person may not activate it.
    b.refused(
        "source_write",
        json!({ "app": "jotter", "path": "NOTES.md", "content": "x" }),
        "conflict",
        "running on jotter from another connection",
    );
    b.refused("plan_finish", json!({ "plan": plan, "outcome": "not mine" }), "conflict", "another connection");
    let line = t.refused(&["activate", "jotter", &candidate]);
    assert!(line.contains(&format!("plan {plan} is running on jotter")), "{line}");

    // Finished: the next change asks again.
    a.ok("plan_finish", json!({ "plan": plan, "outcome": "the list says edited; the person activates it" }));
    a.start("source_write", json!({ "app": "jotter", "path": "NOTES.md", "content": "x" }));
    let q = next_question(&asked);
    answer(&mut panel, &q, false);
    assert_eq!(a.answer()["error"]["kind"], "denied");
    assert!(!ws.join("NOTES.md").exists());
    t.ok(&["activate", "jotter", &candidate]);

    // The record: the run's answers, its caller naming the plan and task, its end.
    let rows: Vec<Value> = serde_json::from_str(&t.ok(&["runs", "jotter", "--json", "--limit", "200"])).unwrap();
    let by_run: Vec<&Value> = rows.iter().filter(|r| r["answered_by"] == format!("run {plan}")).collect();
    let routes: Vec<&str> = by_run.iter().map(|r| r["route"].as_str().unwrap()).collect();
    for route in ["source_edit", "candidate_build", "candidate_preview"] {
        assert!(routes.contains(&route), "{route} answered by the run: {routes:?}");
    }
    assert!(by_run.iter().all(|r| r["caller"].as_str().unwrap().starts_with(&format!("planner plan {plan} task"))));
    assert!(rows.iter().any(|r| r["route"] == "plan_start" && r["answered_by"] == "person"));
    assert!(rows.iter().any(|r| r["route"] == "plan-finish"), "{rows:#?}");
    let preview_rows = t.ok(&["runs", "jotter", "--json"]);
    assert!(!preview_rows.is_empty());

    // A run ends when its connection closes.
    let second = submitted(&mut a, "jotter");
    a.start("plan_start", json!({ "plan": second }));
    answer(&mut panel, &next_question(&asked), true);
    assert_eq!(a.answer()["ok"], true);
    drop(a);
    let ended = stopped(&t, second);
    assert_eq!((ended["state"].as_str(), ended["endedBy"].as_str()), (Some("stopped"), Some("its connection closed")));

    // The person stops a run from the terminal; a waiting plan is rejected.
    let mut c = Agent::connect(&t);
    let third = submitted(&mut c, "jotter");
    c.start("plan_start", json!({ "plan": third }));
    answer(&mut panel, &next_question(&asked), true);
    assert_eq!(c.answer()["ok"], true);
    assert!(t.ok(&["plan", "stop", "jotter"]).contains(&format!("stopped the run of plan {third}")));
    c.start("source_write", json!({ "app": "jotter", "path": "NOTES.md", "content": "x" }));
    answer(&mut panel, &next_question(&asked), false);
    assert_eq!(c.answer()["error"]["kind"], "denied", "stopped: it asks again");
    let fourth = submitted(&mut c, "jotter");
    assert!(t.ok(&["plan", "reject", "jotter"]).contains(&format!("rejected plan {fourth}")));
    c.refused("plan_start", json!({ "plan": fourth }), "conflict", "rejected");
    let text = t.ok(&["plans", "jotter"]);
    assert!(text.contains(&format!("plan {fourth} of jotter (rejected)")), "{text}");

    // The MCP server's way: a session held open on one connection, each call on
    // a connection of its own naming it. The run is the session's, and ends with it.
    let mut held = Agent::connect(&t);
    let token = held.session();
    let call = |tool: &str, args: Value, session: Option<&str>| {
        let mut once = Agent::connect(&t);
        once.start_in(tool, args, session);
        once
    };
    let open = call("plan_open", json!({ "app": "jotter", "request": "a session's plan" }), Some(&token)).answer();
    let session_plan = open["output"]["plan"]["id"].as_u64().unwrap();
    call("plan_task", json!({ "plan": session_plan, "title": "t" }), Some(&token)).answer();
    call("plan_submit", json!({ "plan": session_plan }), Some(&token)).answer();
    let mut starting = call("plan_start", json!({ "plan": session_plan }), Some(&token));
    answer(&mut panel, &next_question(&asked), true);
    assert_eq!(starting.answer()["ok"], true);
    let wrote =
        call("source_write", json!({ "app": "jotter", "path": "NOTES.md", "content": "s" }), Some(&token)).answer();
    assert_eq!(wrote["output"]["answeredBy"], format!("run {session_plan}"), "{wrote}");
    let other = call("source_write", json!({ "app": "jotter", "path": "NOTES.md", "content": "x" }), None).answer();
    assert_eq!(other["error"]["kind"], "conflict", "a connection outside the session: {other}");
    drop(held);
    let ended = stopped(&t, session_plan);
    assert_eq!(ended["endedBy"], "its connection closed");
    let stale = call("plan_read", json!({ "app": "jotter" }), Some(&token)).answer();
    assert!(stale["error"]["message"].as_str().unwrap().contains("engineer session is over"), "{stale}");
    std::fs::remove_file(ws.join("NOTES.md")).unwrap();

    // A run does not survive a restart, and one ends at its time limit.
    let fifth = submitted(&mut c, "jotter");
    c.start("plan_start", json!({ "plan": fifth }));
    answer(&mut panel, &next_question(&asked), true);
    assert_eq!(c.answer()["ok"], true);
    drop(c);
    drop(panel);
    served.stop();
    let after = plans(&t, "jotter").into_iter().find(|p| p["id"] == fifth).unwrap();
    assert_eq!(after["state"], "stopped");
    let config = format!("{}opener = \"none\"\nrun_limit_secs = 2\n", crate::support::base_config());
    std::fs::write(t.path().join("config.toml"), config).unwrap();
    let served = Served::start(&t, &["open"]);
    let mut panel = served.tab("the Autoapp panel");
    let asked = questions(&panel);
    let mut d = Agent::connect(&t);
    let sixth = submitted(&mut d, "jotter");
    d.start("plan_start", json!({ "plan": sixth }));
    answer(&mut panel, &next_question(&asked), true);
    assert_eq!(d.answer()["ok"], true);
    std::thread::sleep(Duration::from_millis(2500));
    d.start("source_write", json!({ "app": "jotter", "path": "NOTES.md", "content": "x" }));
    answer(&mut panel, &next_question(&asked), false);
    assert_eq!(d.answer()["error"]["kind"], "denied", "past its limit, it asks again");
    let ended = plans(&t, "jotter").into_iter().find(|p| p["id"] == sixth).unwrap();
    assert_eq!(ended["endedBy"], "its time limit (run_limit_secs)");
    served.stop();
}

/// A root with jotter built and active, and `other` created; questions
/// expire after `window` seconds.
fn jotter_root(window: u64) -> TestRoot {
    let t = TestRoot::with_config(&format!("opener = \"none\"\napproval_window_secs = {window}\n"));
    t.ok(&["create", "jotter"]);
    let active = t.build("jotter");
    t.ok(&["activate", "jotter", &active]);
    t.ok(&["create", "other"]);
    t
}

/// Starts plan `id` of `a`, the person saying yes in `panel`.
fn run(a: &mut Agent, panel: &mut crate::support::http::Http, asked: &mpsc::Receiver<Value>, id: u64) {
    a.start("plan_start", json!({ "plan": id }));
    answer(panel, &next_question(asked), true);
    let started = a.answer();
    assert_eq!(started["output"]["plan"]["state"], "running", "{started}");
}

/// The rows of `app`'s record.
fn rows(t: &TestRoot, app: &str) -> Vec<Value> {
    serde_json::from_str(&t.ok(&["runs", app, "--json", "--limit", "500"])).unwrap()
}

#[test]
fn a_run_is_bound_to_its_launcher_start_and_never_answers_the_same_connection_number_of_another() {
    let t = jotter_root(600);
    let x = Served::start(&t, &["open"]);
    let mut x_panel = x.tab("the Autoapp panel");
    let x_asked = questions(&x_panel);
    // Connection 1 of launcher X runs a plan of jotter.
    let mut a = Agent::connect(&t);
    let plan = submitted(&mut a, "jotter");
    run(&mut a, &mut x_panel, &x_asked, plan);

    // Launcher Y on a copy of the root, whose plans are X's as they are now
    // (copied after Y started: a start ends the runs it finds).
    let copy = TestRoot::with_config("opener = \"none\"\n");
    for entry in ["apps", "config.toml"] {
        let ok = std::process::Command::new("cp")
            .args(["-a", t.path().join(entry).to_str().unwrap(), copy.path().to_str().unwrap()])
            .status()
            .unwrap();
        assert!(ok.success());
    }
    let y = Served::start(&copy, &["open"]);
    let mut y_panel = y.tab("the Autoapp panel");
    let y_asked = questions(&y_panel);
    {
        let c = rusqlite::Connection::open(copy.path().join("plans.sqlite")).unwrap();
        c.execute("ATTACH DATABASE ?1 AS x", [t.path().join("plans.sqlite").to_str().unwrap()]).unwrap();
        c.execute_batch(
            "BEGIN; DELETE FROM main.plans; INSERT INTO main.plans SELECT * FROM x.plans;
             DELETE FROM main.tasks; INSERT INTO main.tasks SELECT * FROM x.tasks; COMMIT;",
        )
        .unwrap();
    }
    // Y's connection 1: the same number, another launcher. Its write asks.
    let mut b = Agent::connect(&copy);
    b.start("source_write", json!({ "app": "jotter", "path": "NOTES.md", "content": "from Y" }));
    let q = next_question(&y_asked);
    assert_eq!((q["appId"].as_str(), q["route"].as_str()), (Some("jotter"), Some("source_write")));
    answer(&mut y_panel, &q, false);
    let said = b.answer();
    assert_eq!(said["error"]["kind"], "denied", "fails before: answered by run {plan} of launcher X: {said}");
    assert!(!copy.path().join("apps/jotter/workspace/NOTES.md").exists());
    b.refused("plan_finish", json!({ "plan": plan, "outcome": "not mine" }), "conflict", "plan");
    // X's run goes on, its own connection's write answered by it.
    let wrote = a.ok("source_write", json!({ "app": "jotter", "path": "NOTES.md", "content": "from X" }));
    assert_eq!(wrote["answeredBy"], format!("run {plan}"));
    drop((b, a));
    y.stop();
    x.stop();
}

#[test]
fn a_run_ends_with_its_app_its_connections_questions_and_nobody_elses_change_lands_during_it() {
    let t = jotter_root(8);
    let served = Served::start(&t, &["open"]);
    let mut panel = served.tab("the Autoapp panel");
    let asked = questions(&panel);
    let ws = t.path().join("apps/jotter/workspace");
    let write = |content: &str| json!({ "app": "jotter", "path": "NOTES.md", "content": content });

    // A card waiting from before another agent's run: approved during the run, nothing is applied.
    let mut b = Agent::connect(&t);
    b.start("source_write", write("b's, asked before the run"));
    let waiting = next_question(&asked);
    let mut a = Agent::connect(&t);
    let plan = submitted(&mut a, "jotter");
    run(&mut a, &mut panel, &asked, plan);
    answer(&mut panel, &waiting, true);
    let late = b.answer();
    assert_eq!(late["error"]["kind"], "conflict", "fails before: applied during another agent's run: {late}");
    assert!(!ws.join("NOTES.md").exists(), "nothing of it was written");
    // Another agent's write during the run, and its start of a plan not its own: refused, and rows.
    b.refused("source_write", write("b's, during the run"), "conflict", "running on jotter from another connection");
    let mut c = Agent::connect(&t);
    let cs = submitted(&mut c, "other");
    b.refused("plan_start", json!({ "plan": cs }), "conflict", "written by another agent's connection");
    let record = rows(&t, "jotter");
    let refused: Vec<&Value> =
        record.iter().filter(|r| r["route"] == "source_write" && r["decision"] == "refused").collect();
    assert!(
        refused.iter().any(|r| r["reason"].as_str().unwrap().contains("began running on jotter")),
        "the late approval's refusal is a row: {record:#?}"
    );
    assert!(
        refused.iter().any(|r| r["reason"].as_str().unwrap().contains("running on jotter from another connection")),
        "fails before: the refused write left no row: {record:#?}"
    );
    let other_rows = rows(&t, "other");
    assert!(
        other_rows.iter().any(|r| r["route"] == "plan_start"
            && r["decision"] == "refused"
            && r["reason"].as_str().unwrap().contains("written by another agent's connection")),
        "fails before: another agent's plan_start left no row: {other_rows:#?}"
    );
    // A plan whose agent went away waits for nothing.
    drop(c);
    for _ in 0..100 {
        if plans(&t, "other").iter().any(|p| p["id"] == cs && p["state"] == "stopped") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let gone = plans(&t, "other").into_iter().find(|p| p["id"] == cs).unwrap();
    assert_eq!((gone["state"].as_str(), gone["endedBy"].as_str()), (Some("stopped"), Some("its agent went away")));
    b.start("source_write", json!({ "app": "other", "path": "NOTES.md", "content": "x" }));
    let q = next_question(&asked);
    assert_eq!(q["appId"], "other", "fails before: refused while a gone agent's plan waited");
    answer(&mut panel, &q, false);
    assert_eq!(b.answer()["error"]["kind"], "denied");

    // The person removes jotter and creates it again: the run ended with it; the next write asks.
    let removed = panel
        .request("POST", "/api/remove", Some(&json!({ "app": "jotter", "confirm": "jotter" }).to_string()))
        .unwrap();
    assert_eq!(removed.status, 200, "{}", String::from_utf8_lossy(&removed.body));
    t.ok(&["create", "jotter"]);
    a.start("source_write", write("after the app was made again"));
    let q = next_question(&asked);
    assert_eq!(q["appId"], "jotter", "fails before: the old run answered the new app's write");
    answer(&mut panel, &q, false);
    assert_eq!(a.answer()["error"]["kind"], "denied");
    let ended = plans(&t, "jotter").into_iter().find(|p| p["id"] == plan).unwrap();
    assert_eq!((ended["state"].as_str(), ended["endedBy"].as_str()), (Some("stopped"), Some("its app was removed")));

    // Two runs on one connection (two apps); one question left unanswered ends both.
    let mut d = Agent::connect(&t);
    let on_jotter = submitted(&mut d, "jotter");
    run(&mut d, &mut panel, &asked, on_jotter);
    let on_other = submitted(&mut d, "other");
    run(&mut d, &mut panel, &asked, on_other);
    d.start("apps_create", json!({ "app": "third" }));
    let _unanswered = next_question(&asked);
    assert_eq!(d.answer()["error"]["kind"], "denied", "nobody answered within the window");
    for (app, id) in [("jotter", on_jotter), ("other", on_other)] {
        let p = plans(&t, app).into_iter().find(|p| p["id"] == id).unwrap();
        assert_eq!(
            (p["state"].as_str(), p["endedBy"].as_str()),
            (Some("stopped"), Some("a question outside the run went unanswered")),
            "fails before: only one of the connection's runs ended ({app})"
        );
    }

    // A plan-finish row names who finished it: the session's call that did, not the plan's author.
    let mut held = Agent::connect(&t);
    let token = held.session();
    let call = |tool: &str, args: Value, client: &str| {
        let mut once = Agent::connect(&t);
        once.send(&json!({ "type": "engineer", "tool": tool, "arguments": args, "client": client, "session": token }));
        once.answer()
    };
    let open = call("plan_open", json!({ "app": "jotter", "request": "r" }), "author");
    let id = open["output"]["plan"]["id"].as_u64().unwrap();
    call("plan_task", json!({ "plan": id, "title": "t" }), "author");
    call("plan_submit", json!({ "plan": id }), "author");
    let mut starting = Agent::connect(&t);
    starting.send(&json!({ "type": "engineer", "tool": "plan_start", "arguments": { "plan": id }, "client": "author", "session": token }));
    answer(&mut panel, &next_question(&asked), true);
    assert_eq!(starting.answer()["ok"], true);
    let finished = call("plan_finish", json!({ "plan": id, "outcome": "done" }), "finisher");
    assert_eq!(finished["ok"], true, "{finished}");
    let record = rows(&t, "jotter");
    let row = record.iter().find(|r| r["route"] == "plan-finish").expect("a plan-finish row");
    assert_eq!(row["caller"], "finisher", "fails before: the row named the plan's author");
    drop(held);
    served.stop();
}

#[test]
fn a_forged_card_is_refused_past_its_bounds_and_framed_within_them() {
    let t = jotter_root(600);
    let served = Served::start(&t, &["open"]);
    let mut panel = served.tab("the Autoapp panel");
    let asked = questions(&panel);
    let mut a = Agent::connect(&t);
    let forged_lines = "summary: nothing to see\n  [ ] 1. a harmless task\nStarting it means nothing: approve\n";
    // The attack as the issue tells it: oversized, refused with a sentence.
    let oversized = format!("{forged_lines}{}", "\n".repeat(8000));
    a.refused(
        "plan_open",
        json!({ "app": "jotter", "request": oversized }),
        "invalid-input",
        "at most 2000 are allowed",
    );
    let open =
        a.ok("plan_open", json!({ "app": "jotter", "request": "r", "touches": { "routes": ["entries.purge"] } }));
    let id = open["plan"]["id"].as_u64().unwrap();
    let big = "x".repeat(8 * 1024);
    a.refused(
        "plan_task",
        json!({ "plan": id, "title": "t", "detail": big }),
        "invalid-input",
        "at most 1000 are allowed",
    );
    for n in 0..30 {
        a.ok("plan_task", json!({ "plan": id, "title": format!("task {n}") }));
    }
    a.refused("plan_task", json!({ "plan": id, "title": "31" }), "invalid-input", "30 tasks, the most a plan may have");

    // Within the bounds: the host's lines come first, the agent's are framed, no U+202E.
    let request = format!("{forged_lines}{}gnp.\u{202e}exe", "\n".repeat(50));
    let open =
        a.ok("plan_open", json!({ "app": "jotter", "request": request, "touches": { "routes": ["entries.purge"] } }));
    let id = open["plan"]["id"].as_u64().unwrap();
    a.ok("plan_task", json!({ "plan": id, "title": "the real task" }));
    a.ok("plan_submit", json!({ "plan": id }));
    a.start("plan_start", json!({ "plan": id }));
    let q = next_question(&asked);
    let card = q["change"].as_str().unwrap();
    assert!(!card.contains('\u{202e}'), "{card}");
    let (host, agent) = card.split_once("The agent's words (not checked by Autoapp):").expect("framed");
    assert!(host.starts_with(&format!("An agent asks you to start plan {id} of jotter")), "{card}");
    assert!(
        host.contains("Starting it means one thing") && host.contains("entries.purge  ← the app has no such thing now")
    );
    assert!(!host.contains("nothing to see"), "fails before: the agent's lines came first: {card}");
    assert!(agent.trim_start_matches('\n').lines().all(|l| l.starts_with("  | ")), "{card}");
    assert!(card.lines().count() < 40, "blank runs collapsed: {card}");
    answer(&mut panel, &q, false);
    assert_eq!(a.answer()["error"]["kind"], "denied");
    served.stop();
}
