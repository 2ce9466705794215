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
