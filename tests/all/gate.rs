//! The gate through the real call path: approvals bound to their question,
//! attachment, and the record of every decision.

use autoapp::apps::{Apps, ErrorKind};
use autoapp::config::Config;
use autoapp::gate::{Caller, GateEvent};
use autoapp::manifest::AppId;
use autoapp::root::Root;

use crate::support::TestRoot;

fn notes() -> AppId {
    AppId::parse("notes").unwrap()
}

fn setup(config: Config) -> (TestRoot, Apps, tokio::runtime::Runtime) {
    let t = TestRoot::new();
    t.install("notes");
    let apps = Apps::new(Root::open(t.path()).unwrap(), &config).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    (t, apps, rt)
}

/// The record's rows of calls (not of the lifecycle actions that set the app up).
fn runs(t: &TestRoot) -> Vec<serde_json::Value> {
    let rows: Vec<serde_json::Value> = serde_json::from_str(&t.ok(&["runs", "notes", "--json"])).unwrap();
    rows.into_iter().filter(|r| r["effect"] != "lifecycle").collect()
}

#[test]
fn a_write_on_mcp_waits_for_the_person_and_runs_once_when_approved() {
    let (t, apps, rt) = setup(Config::default());
    let q = rt.block_on(async {
        let _tab = apps.gate().attach(Some(notes()));
        let mut events = apps.gate().subscribe();
        let agent = Caller::control("test agent");
        let app = notes();
        let call = apps.call(&agent, &app, "notes.add", r#"{"title":"from the agent"}"#);
        let person = async {
            let GateEvent::Asked { question } = events.recv().await.unwrap() else { panic!("a question first") };
            assert_eq!(question.arguments, serde_json::json!({"title": "from the agent"}));
            assert_eq!(apps.gate().pending().len(), 1);
            apps.gate().answer(&question.request_id, &question.release_id, &question.arguments_hash, true).unwrap();
            question
        };
        let (answer, q) = tokio::join!(call, person);
        answer.expect("the approved call runs");
        assert!(
            apps.gate().answer(&q.request_id, &q.release_id, &q.arguments_hash, true).is_err(),
            "an approval is consumed once"
        );
        q
    });
    apps.flush_record();
    assert_eq!(t.call("notes", "notes.list", "{}")["notes"].as_array().unwrap().len(), 1, "it ran exactly once");
    let rows = runs(&t);
    let row = rows.iter().find(|r| r["request_id"] == q.request_id.as_str()).expect("the call is recorded");
    assert_eq!(row["decision"], "confirmed");
    assert_eq!(row["channel"], "mcp");
    assert_eq!(row["caller"], "test agent");
    assert_eq!(row["outcome"], "ok");
    assert_eq!(row["arguments_hash"], q.arguments_hash.as_str());
}

#[test]
fn a_declined_write_does_not_run_and_says_so() {
    let (t, apps, rt) = setup(Config::default());
    rt.block_on(async {
        let _panel = apps.gate().attach(None);
        let mut events = apps.gate().subscribe();
        let agent = Caller::control("test agent");
        let app = notes();
        let call = apps.call(&agent, &app, "notes.add", r#"{"title":"unwanted"}"#);
        let person = async {
            let GateEvent::Asked { question } = events.recv().await.unwrap() else { panic!() };
            apps.gate().answer(&question.request_id, &question.release_id, &question.arguments_hash, false).unwrap();
        };
        let (answer, ()) = tokio::join!(call, person);
        let e = answer.unwrap_err();
        assert_eq!((e.kind, e.message.as_str()), (ErrorKind::Denied, "the person declined this call"));
    });
    apps.flush_record();
    assert_eq!(t.call("notes", "notes.list", "{}")["notes"], serde_json::json!([]));
    assert!(runs(&t).iter().any(|r| r["decision"] == "denied" && r["outcome"] == "not-run"));
}

#[test]
fn with_no_page_open_a_write_on_mcp_is_refused_at_once_and_a_read_runs() {
    let (t, apps, rt) = setup(Config::default());
    rt.block_on(async {
        let agent = Caller::control("test agent");
        let e = apps.call(&agent, &notes(), "notes.add", r#"{"title":"x"}"#).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Denied);
        assert!(e.message.contains("nobody could be asked"), "{e}");
        apps.call(&agent, &notes(), "notes.list", "{}").await.expect("a read runs for anybody");
    });
    apps.flush_record();
    let rows = runs(&t);
    assert!(rows.iter().any(|r| r["decision"] == "refused" && r["route"] == "notes.add"));
    assert!(rows.iter().any(|r| r["decision"] == "allowed" && r["route"] == "notes.list" && r["channel"] == "mcp"));
}

#[test]
fn an_unanswered_question_expires_as_not_answered_not_declined() {
    let config = Config { approval_window_secs: 1, ..Config::default() };
    let (_t, apps, rt) = setup(config);
    rt.block_on(async {
        let _tab = apps.gate().attach(Some(notes()));
        let e = apps.call(&Caller::control("agent"), &notes(), "notes.add", r#"{"title":"x"}"#).await.unwrap_err();
        assert_eq!(e.message, "not answered within 1 minute; nobody declined it");
        assert!(apps.gate().pending().is_empty());
    });
}

#[test]
fn the_record_keeps_each_decision_and_no_input_value() {
    let t = TestRoot::new();
    t.install("notes");
    t.call("notes", "notes.add", r#"{"title":"hunter2 is my password"}"#);
    t.refused(&["call", "notes", "notes.add", r#"{"title":"hunter2","extra":true}"#]);
    t.refused(&["call", "notes", "notes.tag", r#"{"id":999,"tag":"hunter2"}"#]);
    let rows = runs(&t);
    let summary: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["route"].as_str().unwrap().into(),
                r["decision"].as_str().unwrap().into(),
                r["outcome"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("notes.add".to_string(), "allowed".to_string(), "ok".to_string()),
            ("notes.add".into(), "refused".into(), "not-run".into()),
            ("notes.tag".into(), "allowed".into(), "error".into()),
        ]
    );
    let record = std::fs::read(t.path().join("apps/notes/data/runs.sqlite")).unwrap();
    let wal = std::fs::read(t.path().join("apps/notes/data/runs.sqlite-wal")).unwrap_or_default();
    for bytes in [record, wal] {
        assert!(!bytes.windows(7).any(|w| w == b"hunter2"), "an input value reached the record");
    }
    let text = t.ok(&["runs", "notes"]);
    assert!(text.contains("allowed") && text.contains("refused"), "{text}");
}

#[test]
fn a_call_to_an_unknown_route_is_recorded_as_refused_with_the_name_kept_short_and_escaped() {
    let t = TestRoot::new();
    t.install("notes");
    let line = t.refused(&["call", "notes", "notes.nope"]);
    assert!(line.contains("notes has no route `notes.nope`"), "{line}");
    let probe = format!("x\n{}", "y".repeat(500));
    t.refused(&["call", "notes", &probe]);
    let rows = runs(&t);
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(rows[0]["route"], "notes.nope");
    assert_eq!(rows[0]["decision"], "refused");
    assert_eq!(rows[0]["reason"], "no such route");
    assert_eq!(rows[0]["outcome"], "not-run");
    let kept = rows[1]["route"].as_str().unwrap();
    assert!(kept.starts_with("x\\ny") && kept.len() <= 80, "{kept}");
}

/// The gate's events in `tab`'s event stream, as (event, data), from now on.
fn gate_events(tab: &crate::support::http::Http) -> std::sync::mpsc::Receiver<(String, serde_json::Value)> {
    use std::io::BufRead as _;
    let mut lines = crate::support::event_stream(tab);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut event, mut line) = (String::new(), String::new());
        while lines.read_line(&mut line).is_ok_and(|n| n > 0) {
            if let Some(name) = line.strip_prefix("event: ") {
                event = name.trim().to_string();
            } else if let Some(data) = line.strip_prefix("data: ")
                && let Ok(v) = serde_json::from_str(data.trim())
                && tx.send((std::mem::take(&mut event), v)).is_err()
            {
                return;
            }
            line.clear();
        }
    });
    rx
}

/// Waits for the gate's event `name` (the question asked, or its end).
fn next_event(events: &std::sync::mpsc::Receiver<(String, serde_json::Value)>, name: &str) -> serde_json::Value {
    loop {
        let (event, data) =
            events.recv_timeout(std::time::Duration::from_secs(60)).unwrap_or_else(|_| panic!("no `{name}` event"));
        if event == name {
            return data;
        }
    }
}

/// The body of the person's answer to the question `q`.
fn answer_to(q: &serde_json::Value, approve: bool) -> String {
    serde_json::json!({ "requestId": q["requestId"], "releaseId": q["releaseId"],
                        "argumentsHash": q["argumentsHash"], "approve": approve })
    .to_string()
}

/// Sends an agent's `invoke` of `route` on a control connection of the
/// launcher serving `t`, and leaves its answer unread: the connection, for
/// the caller to close.
fn invoke_on_control(t: &TestRoot, app: &str, route: &str, input: serde_json::Value) -> std::net::TcpStream {
    use std::io::{BufRead as _, Write as _};
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(t.path().join("launcher.json")).unwrap()).unwrap();
    let mut control = std::net::TcpStream::connect(("127.0.0.1", file["port"].as_u64().unwrap() as u16)).unwrap();
    let mut said = std::io::BufReader::new(control.try_clone().unwrap());
    writeln!(control, "{}", serde_json::json!({ "type": "auth", "secret": file["secret"] })).unwrap();
    let mut line = String::new();
    said.read_line(&mut line).unwrap();
    assert!(line.contains("\"ok\":true"), "{line}");
    let invoke =
        serde_json::json!({ "type": "invoke", "app": app, "route": route, "input": input, "client": "an agent" });
    writeln!(control, "{invoke}").unwrap();
    control
}

/// An agent's write that the person approved runs to its end though the
/// agent goes away while it runs: its row is written and it is noted as the
/// activation's first write, so a plain rollback still asks (fails when the
/// caller's going away dropped the call past the gate: the write ran in its
/// worker, and the first write was never noted).
#[test]
fn an_approved_write_whose_caller_goes_away_runs_to_its_end_and_is_noted() {
    let t = TestRoot::with_config(crate::many_callers::QUIET);
    t.install("escape");
    let served = crate::support::Served::start(&t, &["serve", "escape"]);
    let mut tab = served.tab("escape");
    let events = gate_events(&tab);
    let sleep = serde_json::json!({ "attempts": [{ "try": "sleep", "ms": 3000 }] });
    let control = invoke_on_control(&t, "escape", "escape.write", sleep);
    let q = next_event(&events, "asked")["question"].clone();
    let r = tab.request("POST", "/api/answer", Some(&answer_to(&q, true))).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    std::thread::sleep(std::time::Duration::from_millis(500));
    drop(control);
    let started = std::time::Instant::now();
    let history = loop {
        let history = std::fs::read_to_string(t.path().join("apps/escape/history.jsonl")).unwrap_or_default();
        if history.contains("first write") || started.elapsed() > std::time::Duration::from_secs(20) {
            break history;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(history.contains("first write"), "{history}");
    served.stop();
    let rows: Vec<serde_json::Value> = serde_json::from_str(&t.ok(&["runs", "escape", "--json"])).unwrap();
    let row = rows.iter().find(|r| r["request_id"] == q["requestId"]).expect("its row");
    assert_eq!((&row["decision"], &row["outcome"]), (&"confirmed".into(), &"ok".into()), "{row}");
}

/// An agent's write waits for the person, and the agent goes away first:
/// its control connection closes, its MCP client cancels the call, or the
/// client ends. Each time the question is withdrawn from the app's page at
/// once, answering it runs nothing, and nothing is written (fails before:
/// the card stayed, and approving it later wrote the note for nobody).
#[test]
fn a_write_question_is_withdrawn_when_its_caller_goes_away() {
    use std::io::{BufRead as _, Write as _};
    let t = TestRoot::with_config(crate::many_callers::QUIET);
    t.install("notes");
    let served = crate::support::Served::start(&t, &["serve", "notes"]);
    let mut tab = served.tab("notes");
    let events = gate_events(&tab);
    let withdrawn = |asked: &serde_json::Value, tab: &mut crate::support::http::Http| {
        let q = &asked["question"];
        let ended = next_event(&events, "answered");
        assert_eq!((&ended["request_id"], ended["outcome"].as_str()), (&q["requestId"], Some("withdrawn")), "{ended}");
        let r = tab.request("POST", "/api/answer", Some(&answer_to(q, true))).unwrap();
        assert_eq!(r.status, 404, "{}", String::from_utf8_lossy(&r.body));
    };

    // The control connection's invoke (what every agent's call becomes).
    let control = invoke_on_control(&t, "notes", "notes.add", serde_json::json!({ "title": "for nobody" }));
    let asked = next_event(&events, "asked");
    drop(control);
    withdrawn(&asked, &mut tab);

    // `autoapp mcp`: a call the client cancels, then one whose client ends.
    let mut mcp = std::process::Command::new(env!("CARGO_BIN_EXE_autoapp"))
        .args(["--root", t.path().to_str().unwrap(), "mcp", "notes"])
        .env_remove("AUTOAPP_ROOT")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut to = mcp.stdin.take().unwrap();
    let mut from = std::io::BufReader::new(mcp.stdout.take().unwrap());
    let mut rpc = |v: serde_json::Value| writeln!(to, "{v}").unwrap();
    rpc(serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "going away", "version": "1" } } }));
    let mut line = String::new();
    from.read_line(&mut line).unwrap();
    assert!(line.contains("\"result\""), "{line}");
    rpc(serde_json::json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    let call = |id: u64| {
        serde_json::json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
                                              "params": { "name": "notes_add", "arguments": { "title": "for nobody" } } })
    };
    rpc(call(2));
    let asked = next_event(&events, "asked");
    rpc(serde_json::json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": 2 } }));
    withdrawn(&asked, &mut tab);
    rpc(call(3));
    let asked = next_event(&events, "asked");
    drop(to);
    withdrawn(&asked, &mut tab);
    let started = std::time::Instant::now();
    while mcp.try_wait().unwrap().is_none() {
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "the MCP server ends with its client");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    assert_eq!(t.call("notes", "notes.list", "{}")["notes"], serde_json::json!([]), "nothing was written");
    served.stop();
}

/// A schema's `integer` takes `1.0` and `2e0` (JSON Schema counts a number
/// with no fraction as one), so the guest is given `1` and `2`: `notes.list`
/// with a limit of `1.0` lists one note (fails before: the guest was given
/// `1.0`, which its integer field refused, "invalid type: floating point").
#[test]
fn a_whole_number_written_as_a_float_reaches_the_guest_as_an_integer() {
    let t = TestRoot::new();
    t.install("notes");
    t.call("notes", "notes.add", r#"{"title":"one"}"#);
    t.call("notes", "notes.add", r#"{"title":"two"}"#);
    assert_eq!(t.call("notes", "notes.list", r#"{"limit":1.0}"#)["notes"].as_array().unwrap().len(), 1);
    assert_eq!(t.call("notes", "notes.list", r#"{"limit":2e0}"#)["notes"].as_array().unwrap().len(), 2);
}

/// What the host logs on standard error (here the warning that an
/// activation left open was recovered) reaches a pipe or a file as plain
/// words: no colour's escape (fails before: `\x1b[33m WARN\x1b[0m`).
#[test]
fn the_log_on_a_pipe_has_no_colours() {
    let t = TestRoot::new();
    t.install("notes");
    let v: serde_json::Value = serde_json::from_str(&t.ok(&["candidates", "notes", "--json"])).unwrap();
    let journal = serde_json::json!({ "op": "activate", "step": "begun", "stamp": "x", "started_at": "2026-12-06T00:00:00Z",
                                      "release": v["active"]["id"], "previous": null, "snapshot": "data-prev-x", "aside": null });
    std::fs::write(t.path().join("apps/notes/journal.json"), journal.to_string()).unwrap();
    let out = t.command().args(["apps"]).env_remove("NO_COLOR").output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.contains("recovered an interrupted operation"), "{said}");
    assert!(!said.contains('\u{1b}'), "{said:?}");
}

/// A page whose view breaks the view rules (a button with a link's `text`):
/// the tab is told which node and why, and the app's log says it too, for
/// its developer at a terminal (fails before: only the tab had the reason).
#[test]
fn why_a_page_is_not_drawn_is_in_the_apps_log() {
    let t = TestRoot::with_config(crate::many_callers::QUIET);
    t.install("hostile");
    let served = crate::support::Served::start(&t, &["serve", "hostile"]);
    let mut tab = served.tab("hostile");
    let r = tab.request("GET", "/api/view/misnamed?query=%7B%7D", None).unwrap();
    let said = String::from_utf8_lossy(&r.body).into_owned();
    assert!(r.status >= 400 && said.contains("has an unknown key `text`"), "{} {said}", r.status);
    let log = t.log_saying("hostile", "unknown key `text`");
    assert!(
        log.contains(
            "returned a page `misnamed` that cannot be shown: the button at /children/0 has an unknown key `text`"
        ),
        "{log}"
    );
    served.stop();
}

/// `autoapp call <app> <route> -` reads the input from standard input (for
/// one too long for a command line: here 3 MB of blanks around a note, which
/// as an argument fails "Argument list too long"), and `runs --limit 0` is
/// refused for what it is, not answered "no calls recorded".
#[test]
fn a_calls_input_may_come_on_standard_input() {
    use std::io::Write as _;
    let t = TestRoot::new();
    t.install("notes");
    let input = format!(r#"{{"title":"from stdin",{}"body":"b"}}"#, " ".repeat(3 << 20));
    let mut call = t
        .command()
        .args(["call", "notes", "notes.add", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    call.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = call.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(t.call("notes", "notes.list", "{}")["notes"][0]["title"], "from stdin");
    let e = t.fails_with(2, &["runs", "notes", "--limit", "0"]);
    assert!(e.contains("--limit"), "{e}");
}
