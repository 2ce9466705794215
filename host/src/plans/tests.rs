use super::*;
use crate::gate::Caller;
use crate::manifest::Effect;

fn app(name: &str) -> AppId {
    AppId::parse(name).unwrap()
}

fn plans(limit: Duration) -> (tempfile::TempDir, Plans) {
    let dir = tempfile::tempdir().unwrap();
    let p = Plans::new(&crate::root::Root::open(dir.path()).unwrap(), limit);
    (dir, p)
}

/// The agent on control connection `connection` of this process.
fn on(connection: u64) -> Author {
    Author { connection, pid: std::process::id() }
}

/// A plan of `a` written and submitted by the agent on `connection`.
fn submitted(p: &Plans, a: &AppId, connection: u64) -> Plan {
    let by = on(connection);
    let plan = p.open(a, by, "agent", "add a due date", "a column and a route", Vec::new()).unwrap();
    p.add_task(plan.id, by, "migration", "ALTER TABLE").unwrap();
    p.submit(plan.id, by).unwrap()
}

#[test]
fn a_plan_is_written_as_a_draft_and_leaves_it_only_once() {
    let (_d, p) = plans(Duration::from_secs(60));
    let a = app("notes");
    let touches = vec![Touch { kind: "route".into(), name: "nope".into(), exists: false }];
    let plan = p.open(&a, on(1), "agent", "the person's\u{7} words", "s", touches.clone()).unwrap();
    assert_eq!((plan.state, plan.request.as_str()), (State::Draft, "the person's words"));
    assert_eq!(plan.touches, touches);
    let e = p.submit(plan.id, on(1)).unwrap_err();
    assert_eq!(crate::error::kind_of(&e), ErrorKind::InvalidInput, "no task: {e}");
    p.add_task(plan.id, on(1), "one", "").unwrap();
    // Only its author writes it: another connection, or the same number in another launcher.
    let other_pid = Author { connection: 1, pid: u32::MAX - 1 };
    for by in [on(2), other_pid] {
        let e = p.add_task(plan.id, by, "theirs", "").unwrap_err();
        assert!(e.to_string().contains("written by another agent's connection"), "{e}");
        assert!(p.submit(plan.id, by).is_err());
    }
    let plan = p.add_task(plan.id, on(1), "two", "detail").unwrap();
    assert_eq!(plan.tasks.iter().map(|t| t.n).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(p.submit(plan.id, on(1)).unwrap().state, State::Submitted);
    assert_eq!(p.waiting(&a).unwrap().map(|w| w.id), Some(plan.id));
    for e in [p.add_task(plan.id, on(1), "three", "").unwrap_err(), p.submit(plan.id, on(1)).unwrap_err()] {
        assert_eq!(crate::error::kind_of(&e), ErrorKind::Conflict, "{e}");
        assert!(e.to_string().contains("no longer a draft"), "{e}");
    }
    assert_eq!(crate::error::kind_of(&p.get(999).unwrap_err()), ErrorKind::NotFound);
    let e = p.of_app(&app("other"), plan.id).unwrap_err();
    assert!(e.to_string().contains("is a plan of notes, not of other"), "{e}");
    // Too long is refused, and nothing is kept.
    assert!(p.open(&a, on(1), "agent", &"x".repeat(MAX_REQUEST + 1), "", Vec::new()).is_err());
    assert!(p.open(&a, on(1), "agent", " ", "", Vec::new()).is_err());
    assert_eq!(p.list(&a).unwrap().len(), 1);
}

#[test]
fn a_run_starts_only_from_a_submitted_plan_one_per_app_and_is_bound_to_its_connection() {
    let (_d, p) = plans(Duration::from_secs(60));
    let a = app("notes");
    let draft = p.open(&a, on(1), "agent", "r", "", Vec::new()).unwrap();
    let e = p.start(draft.id, on(1)).unwrap_err();
    assert!(e.to_string().contains("is a draft: submit it"), "{e}");
    let first = submitted(&p, &a, 7);
    let second = submitted(&p, &a, 8);
    // The person's yes goes to the plan's author only.
    let e = p.start(first.id, on(8)).unwrap_err();
    assert!(e.to_string().contains("written by another agent's connection"), "{e}");
    let run = p.start(first.id, on(7)).unwrap();
    assert_eq!(run.state, State::Running);
    assert!(run.ends_by.is_some());
    let e = p.start(second.id, on(8)).unwrap_err();
    assert!(e.to_string().contains("is running on notes already"), "{e}");
    assert_eq!(p.run_of(&a, Some(7)).unwrap().map(|r| r.id), Some(first.id));
    assert!(p.run_of(&a, Some(8)).unwrap().is_none(), "another connection");
    assert!(p.run_of(&a, None).unwrap().is_none());
    assert!(p.run_of(&app("other"), Some(7)).unwrap().is_none(), "another app");
    // Progress and the end, from the run's connection only.
    assert!(p.task_done(first.id, Some(8), 1, "").is_err());
    assert_eq!(crate::error::kind_of(&p.task_done(first.id, Some(7), 9, "").unwrap_err()), ErrorKind::NotFound);
    let plan = p.task_done(first.id, Some(7), 1, "migrated").unwrap();
    assert!(plan.tasks[0].done && plan.current_task().is_none());
    assert!(p.finish(first.id, Some(8), "x").is_err());
    let done = p.finish(first.id, Some(7), "added the column").unwrap();
    assert_eq!((done.state, done.outcome.as_deref()), (State::Finished, Some("added the column")));
    assert!(p.running(&a).unwrap().is_none());
    assert!(p.finish(first.id, Some(7), "again").is_err(), "finished once");
    // The other waiting plan may start now; the person rejects it instead.
    let rejected = p.reject(&Caller::command_line(), &a, None).unwrap();
    assert_eq!((rejected.id, rejected.state), (second.id, State::Rejected));
    assert!(p.start(second.id, on(8)).is_err());
}

#[test]
fn a_run_ends_at_its_time_limit_its_connection_a_stop_and_the_launcher() {
    let (_d, p) = plans(Duration::from_millis(50));
    let a = app("notes");
    let plan = submitted(&p, &a, 1);
    p.start(plan.id, on(1)).unwrap();
    std::thread::sleep(Duration::from_millis(80));
    assert!(p.running(&a).unwrap().is_none(), "past its limit");
    let ended = p.get(plan.id).unwrap();
    assert_eq!((ended.state, ended.ended_by.as_deref()), (State::Stopped, Some("its time limit (run_limit_secs)")));

    let (_d, p) = plans(Duration::from_secs(60));
    let me = std::process::id();
    let by_conn = submitted(&p, &a, 3);
    p.start(by_conn.id, on(3)).unwrap();
    assert!(p.end_connection(4, me).unwrap().is_empty(), "another connection's end changes nothing");
    assert_eq!(p.end_connection(3, me).unwrap().len(), 1);
    let by_person = submitted(&p, &a, 5);
    p.start(by_person.id, on(5)).unwrap();
    assert_eq!(
        crate::error::kind_of(&p.stop(&Caller::panel(), &a, Some(by_conn.id)).unwrap_err()),
        ErrorKind::Conflict
    );
    assert_eq!(crate::error::kind_of(&p.stop(&Caller::ai("agent"), &a, None).unwrap_err()), ErrorKind::Denied);
    assert_eq!(p.stop(&Caller::panel(), &a, None).unwrap().ended_by.as_deref(), Some("the person (panel)"));
    assert_eq!(crate::error::kind_of(&p.stop(&Caller::panel(), &a, None).unwrap_err()), ErrorKind::NotFound);
    // A question of the run's connection that went unanswered ends it; another connection's does not.
    let unanswered = submitted(&p, &a, 9);
    p.start(unanswered.id, on(9)).unwrap();
    assert!(p.end_run_on(8, me, "x").unwrap().is_none());
    let ended = p.end_run_on(9, me, "a question outside the run went unanswered").unwrap().unwrap();
    assert_eq!((ended.id, ended.state), (unanswered.id, State::Stopped));
    let by_launcher = submitted(&p, &a, 6);
    p.start(by_launcher.id, on(6)).unwrap();
    assert_eq!(p.end_launcher(Some(me), "the launcher stopped").unwrap().len(), 1);
    // A run of a launcher that is gone is over.
    let gone = Author { connection: 6, pid: u32::MAX - 1 };
    let orphan = p.open(&a, gone, "agent", "r", "", Vec::new()).unwrap();
    p.add_task(orphan.id, gone, "t", "").unwrap();
    p.submit(orphan.id, gone).unwrap();
    p.start(orphan.id, gone).unwrap();
    assert!(p.running(&a).unwrap().is_none());
    assert_eq!(p.get(orphan.id).unwrap().state, State::Stopped);
}

#[test]
fn plans_and_runs_survive_another_handle_of_the_file() {
    let (d, p) = plans(Duration::from_secs(60));
    let a = app("notes");
    let plan = submitted(&p, &a, 1);
    p.start(plan.id, on(1)).unwrap();
    // The command line's handle stops what the launcher's runs.
    let other = Plans::new(&crate::root::Root::open(d.path()).unwrap(), Duration::from_secs(60));
    other.stop(&Caller::command_line(), &a, None).unwrap();
    assert!(p.running(&a).unwrap().is_none());
    assert_eq!(other.list(&a).unwrap()[0].state, State::Stopped);
}

#[test]
fn a_run_answers_only_its_tools_of_its_app_on_its_connection() {
    let (_d, p) = plans(Duration::from_secs(60));
    let a = app("notes");
    let plan = submitted(&p, &a, 7);
    p.start(plan.id, on(7)).unwrap();
    let input = serde_json::json!({});
    let (mine, theirs, no_conn) = (Caller::engineer("agent", 7), Caller::engineer("agent", 8), Caller::ai("agent"));
    let mcp = Caller::control("agent");
    let other = app("other");
    let k =
        |caller: &'_ Caller, app: &'_ AppId, route: &'static str, tool: bool, preview: bool| -> Option<AnsweredBy> {
            let knock = Knock {
                caller,
                app,
                release: "r",
                route,
                effect: Effect::Write,
                preview,
                input: &input,
                approved_for: None,
                tool,
                change: None,
            };
            p.answers(&knock)
        };
    for tool in RUN_TOOLS {
        assert_eq!(k(&mine, &a, tool, true, false), Some(AnsweredBy::Run(plan.id)), "{tool}");
    }
    assert_eq!(k(&mine, &a, "add", false, true), Some(AnsweredBy::Run(plan.id)), "a preview's route");
    for (n, answer) in [
        k(&mine, &a, "apps_create", true, false),
        k(&mine, &a, "add", false, false),
        k(&mine, &other, "source_edit", true, false),
        k(&theirs, &a, "source_edit", true, false),
        k(&no_conn, &a, "source_edit", true, false),
        k(&mcp, &a, "add", false, true),
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(answer, None, "case {n}");
    }
}
