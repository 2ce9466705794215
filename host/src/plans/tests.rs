use super::*;
use crate::gate::Caller;
use crate::manifest::Effect;

fn app(name: &str) -> AppId {
    AppId::parse(name).unwrap()
}

/// The launcher start the tests' plans are bound to.
const ME: &str = "launcher-1";

/// The plans of a new root, as launcher start [`ME`] holds them.
fn plans(limit: Duration) -> (tempfile::TempDir, Plans) {
    let dir = tempfile::tempdir().unwrap();
    let p = Plans::new(&crate::root::Root::open(dir.path()).unwrap(), limit);
    p.bind_launcher(ME);
    (dir, p)
}

/// The agent on control connection `number` of launcher start `launcher`.
fn of(launcher: &str, number: u64) -> Author {
    Author { launcher: launcher.into(), number }
}

/// The agent on control connection `number` of this launcher start.
fn on(number: u64) -> Author {
    of(ME, number)
}

/// An engineer's caller on connection `number` of this launcher start.
fn engineer(number: u64) -> Caller {
    Caller::engineer("agent", on(number))
}

/// A plan of `a` written and submitted by the agent `by`.
fn submitted_by(p: &Plans, a: &AppId, by: &Author) -> Plan {
    let plan = p.open(a, by.clone(), "agent", "add a due date", "a column and a route", Vec::new()).unwrap();
    p.add_task(plan.id, by, "migration", "ALTER TABLE").unwrap();
    p.submit(plan.id, by).unwrap()
}

/// A plan of `a` written and submitted by the agent on `connection`.
fn submitted(p: &Plans, a: &AppId, connection: u64) -> Plan {
    submitted_by(p, a, &on(connection))
}

#[test]
fn a_plan_is_written_as_a_draft_and_leaves_it_only_once() {
    let (_d, p) = plans(Duration::from_secs(60));
    let a = app("notes");
    let touches = vec![Touch { kind: "route".into(), name: "nope".into(), exists: false }];
    let plan = p.open(&a, on(1), "agent", "the person's\u{7} words", "s", touches.clone()).unwrap();
    assert_eq!((plan.state, plan.request.as_str()), (State::Draft, "the person's\u{fffd} words"));
    assert_eq!(plan.touches, touches);
    let e = p.submit(plan.id, &on(1)).unwrap_err();
    assert_eq!(crate::error::kind_of(&e), ErrorKind::InvalidInput, "no task: {e}");
    p.add_task(plan.id, &on(1), "one", "").unwrap();
    // Only its author writes it: another connection, or the same number in another launcher start.
    for by in [on(2), of("launcher-2", 1)] {
        let e = p.add_task(plan.id, &by, "theirs", "").unwrap_err();
        assert!(e.to_string().contains("written by another agent's connection"), "{e}");
        assert!(p.submit(plan.id, &by).is_err());
    }
    let plan = p.add_task(plan.id, &on(1), "two", "detail").unwrap();
    assert_eq!(plan.tasks.iter().map(|t| t.n).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(p.submit(plan.id, &on(1)).unwrap().state, State::Submitted);
    assert_eq!(p.waiting(&a).unwrap().map(|w| w.id), Some(plan.id));
    for e in [p.add_task(plan.id, &on(1), "three", "").unwrap_err(), p.submit(plan.id, &on(1)).unwrap_err()] {
        assert_eq!(crate::error::kind_of(&e), ErrorKind::Conflict, "{e}");
        assert!(e.to_string().contains("no longer a draft"), "{e}");
    }
    assert_eq!(crate::error::kind_of(&p.get(999).unwrap_err()), ErrorKind::NotFound);
    let e = p.of_app(&app("other"), plan.id).unwrap_err();
    assert!(e.to_string().contains("is a plan of notes, not of other"), "{e}");
    // Too long is refused, and nothing is kept.
    assert!(p.open(&a, on(1), "agent", &"x".repeat(MAX_REQUEST + 1), "", Vec::new()).is_err());
    assert!(p.open(&a, on(1), "agent", " ", "", Vec::new()).is_err());
    assert_eq!(p.list(&a, 10).unwrap().len(), 1);
}

#[test]
fn a_run_starts_only_from_a_submitted_plan_one_per_app_and_is_bound_to_its_connection() {
    let (_d, p) = plans(Duration::from_secs(60));
    let a = app("notes");
    let draft = p.open(&a, on(1), "agent", "r", "", Vec::new()).unwrap();
    let e = p.start(draft.id, &on(1)).unwrap_err();
    assert!(e.to_string().contains("is a draft: submit it"), "{e}");
    let first = submitted(&p, &a, 7);
    let second = submitted(&p, &a, 8);
    // The person's yes goes to the plan's author only.
    let e = p.start(first.id, &on(8)).unwrap_err();
    assert!(e.to_string().contains("written by another agent's connection"), "{e}");
    let run = p.start(first.id, &on(7)).unwrap();
    assert_eq!(run.state, State::Running);
    assert!(run.ends_by.is_some());
    let e = p.start(second.id, &on(8)).unwrap_err();
    assert!(e.to_string().contains("is running on notes already"), "{e}");
    assert_eq!(p.run_of(&a, Some(&on(7))).unwrap().map(|r| r.id), Some(first.id));
    assert!(p.run_of(&a, Some(&on(8))).unwrap().is_none(), "another connection");
    assert!(p.run_of(&a, Some(&of("launcher-2", 7))).unwrap().is_none(), "the same number in another launcher");
    assert!(p.run_of(&a, None).unwrap().is_none());
    assert!(p.run_of(&app("other"), Some(&on(7))).unwrap().is_none(), "another app");
    // Progress and the end, from the run's connection only (of this launcher start).
    assert!(p.task_done(first.id, Some(&on(8)), 1, "").is_err());
    assert!(p.task_done(first.id, Some(&of("launcher-2", 7)), 1, "").is_err());
    assert_eq!(crate::error::kind_of(&p.task_done(first.id, Some(&on(7)), 9, "").unwrap_err()), ErrorKind::NotFound);
    let plan = p.task_done(first.id, Some(&on(7)), 1, "migrated").unwrap();
    assert!(plan.tasks[0].done && plan.current_task().is_none());
    assert!(p.finish(first.id, &engineer(8), "x").is_err());
    assert!(p.finish(first.id, &Caller::engineer("agent", of("launcher-2", 7)), "x").is_err());
    let done = p.finish(first.id, &engineer(7), "added the column").unwrap();
    assert_eq!((done.state, done.outcome.as_deref()), (State::Finished, Some("added the column")));
    assert!(p.running(&a).unwrap().is_none());
    assert!(p.finish(first.id, &engineer(7), "again").is_err(), "finished once");
    // The other waiting plan may start now; the person rejects it instead.
    let rejected = p.reject(&Caller::command_line(), &a, None).unwrap();
    assert_eq!((rejected.id, rejected.state), (second.id, State::Rejected));
    assert!(p.start(second.id, &on(8)).is_err());
}

#[test]
fn a_run_ends_at_its_time_limit_its_connection_a_stop_and_the_launcher() {
    let (_d, p) = plans(Duration::from_millis(50));
    let a = app("notes");
    let plan = submitted(&p, &a, 1);
    p.start(plan.id, &on(1)).unwrap();
    std::thread::sleep(Duration::from_millis(80));
    assert!(p.running(&a).unwrap().is_none(), "past its limit");
    let ended = p.get(plan.id).unwrap();
    assert_eq!((ended.state, ended.ended_by.as_deref()), (State::Stopped, Some("its time limit (run_limit_secs)")));

    let (_d, p) = plans(Duration::from_secs(60));
    let by_conn = submitted(&p, &a, 3);
    p.start(by_conn.id, &on(3)).unwrap();
    assert!(p.end_connection(&on(4)).unwrap().is_empty(), "another connection's end changes nothing");
    assert!(p.end_connection(&of("launcher-2", 3)).unwrap().is_empty(), "nor another launcher's");
    assert_eq!(p.end_connection(&on(3)).unwrap().len(), 1);
    let by_person = submitted(&p, &a, 5);
    p.start(by_person.id, &on(5)).unwrap();
    assert_eq!(
        crate::error::kind_of(&p.stop(&Caller::panel(), &a, Some(by_conn.id)).unwrap_err()),
        ErrorKind::Conflict
    );
    assert_eq!(crate::error::kind_of(&p.stop(&Caller::ai("agent"), &a, None).unwrap_err()), ErrorKind::Denied);
    assert_eq!(p.stop(&Caller::panel(), &a, None).unwrap().ended_by.as_deref(), Some("the person (panel)"));
    assert_eq!(crate::error::kind_of(&p.stop(&Caller::panel(), &a, None).unwrap_err()), ErrorKind::NotFound);
    // A question of the run's connection that went unanswered ends it; another connection's does not.
    let unanswered = submitted(&p, &a, 9);
    p.start(unanswered.id, &on(9)).unwrap();
    assert!(p.end_runs_on(&on(8), "x").unwrap().is_empty());
    let ended = p.end_runs_on(&on(9), "a question outside the run went unanswered").unwrap();
    assert_eq!((ended[0].id, ended[0].state), (unanswered.id, State::Stopped));
    let by_launcher = submitted(&p, &a, 6);
    p.start(by_launcher.id, &on(6)).unwrap();
    assert_eq!(p.end_launcher(Some(ME), "the launcher stopped").unwrap().len(), 1);
    // A run of another launcher start is over here, whatever its pid or number.
    let gone = of("launcher-0", 6);
    let orphan = submitted_by(&p, &a, &gone);
    p.start(orphan.id, &gone).unwrap();
    assert!(p.running(&a).unwrap().is_none());
    assert_eq!(p.get(orphan.id).unwrap().state, State::Stopped);
}

#[test]
fn an_unanswered_question_ends_every_run_of_its_connection() {
    let (_d, p) = plans(Duration::from_secs(60));
    let (notes, todo) = (app("notes"), app("todo"));
    let first = submitted(&p, &notes, 4);
    let second = submitted(&p, &todo, 4);
    p.start(first.id, &on(4)).unwrap();
    p.start(second.id, &on(4)).unwrap();
    assert!(p.running(&notes).unwrap().is_some() && p.running(&todo).unwrap().is_some());
    let ended = p.end_runs_on(&on(4), "a question outside the run went unanswered").unwrap();
    assert_eq!(ended.len(), 2, "fails before: only one of the connection's runs ended");
    assert!(p.running(&notes).unwrap().is_none() && p.running(&todo).unwrap().is_none());
}

#[test]
fn a_plan_whose_agent_went_away_is_ended_and_blocks_nothing() {
    let (_d, p) = plans(Duration::from_secs(60));
    let a = app("notes");
    let waiting = submitted(&p, &a, 2);
    let draft = p.open(&a, on(2), "agent", "r", "", Vec::new()).unwrap();
    assert_eq!(p.waiting(&a).unwrap().map(|w| w.id), Some(waiting.id));
    p.end_connection(&on(2)).unwrap();
    assert!(p.waiting(&a).unwrap().is_none());
    for id in [waiting.id, draft.id] {
        let ended = p.get(id).unwrap();
        assert_eq!((ended.state, ended.ended_by.as_deref()), (State::Stopped, Some(AGENT_WENT_AWAY)));
    }
    // One of another launcher start (its agent is not connected here) waits for nothing either.
    submitted_by(&p, &a, &of("launcher-0", 2));
    assert!(p.waiting(&a).unwrap().is_none(), "fails before: a plan of a gone agent blocked the app");
}

#[test]
fn a_run_ends_with_its_app_and_an_app_made_again_is_another() {
    let (d, p) = plans(Duration::from_secs(60));
    let root = crate::root::Root::open(d.path()).unwrap();
    let a = app("notes");
    std::fs::create_dir_all(root.app(&a).dir.join("data")).unwrap();
    let plan = submitted(&p, &a, 1);
    p.start(plan.id, &on(1)).unwrap();
    assert!(p.running(&a).unwrap().is_some());
    // Removed (moved to the trash) and made again with the same id.
    std::fs::create_dir_all(d.path().join("trash")).unwrap();
    std::fs::rename(root.app(&a).dir, d.path().join("trash/notes-1")).unwrap();
    std::fs::create_dir_all(root.app(&a).dir.join("data")).unwrap();
    assert!(p.run_of(&a, Some(&on(1))).unwrap().is_none(), "fails before: the run approved the new app's edits");
    assert_eq!(p.get(plan.id).unwrap().ended_by.as_deref(), Some("its app was removed"));
    // Removal ends a run at once.
    let second = submitted(&p, &a, 1);
    p.start(second.id, &on(1)).unwrap();
    assert_eq!(p.end_app(&a, "its app was removed").unwrap().len(), 1);
    assert!(p.running(&a).unwrap().is_none());
}

#[test]
fn drafts_are_bounded_per_app_and_the_list_is_cut_by_the_query() {
    let (_d, p) = plans(Duration::from_secs(60));
    let a = app("notes");
    for _ in 0..MAX_OPEN_PLANS {
        p.open(&a, on(1), "agent", "r", "", Vec::new()).unwrap();
    }
    let e = p.open(&a, on(1), "agent", "r", "", Vec::new()).unwrap_err();
    assert!(e.to_string().contains(&format!("at most {MAX_OPEN_PLANS} may be open per app")), "{e}");
    assert!(p.open(&app("other"), on(1), "agent", "r", "", Vec::new()).is_ok(), "per app");
    // The person rejecting one makes room.
    p.reject(&Caller::command_line(), &a, Some(1)).unwrap();
    p.open(&a, on(1), "agent", "r", "", Vec::new()).unwrap();
    let listed = p.list(&a, 5).unwrap();
    assert_eq!(listed.len(), 5);
    assert!(listed.windows(2).all(|w| w[0].id > w[1].id), "newest first");
}

#[test]
fn the_card_says_the_hosts_lines_first_and_frames_the_agents_words() {
    let (_d, p) = plans(Duration::from_secs(60));
    let a = app("notes");
    // Past the bounds: refused with a sentence naming the bound.
    let forged = format!("summary: nothing\nStarting it means nothing{}", "\n".repeat(5000));
    let e = p.open(&a, on(1), "agent", &forged, "", Vec::new()).unwrap_err();
    assert!(e.to_string().contains("at most 2000 are allowed"), "{e}");
    let e = p.open(&a, on(1), "agent", "r", &"s".repeat(MAX_SUMMARY + 1), Vec::new()).unwrap_err();
    assert!(e.to_string().contains("at most 4000 are allowed"), "{e}");
    let touches = vec![Touch { kind: "route".into(), name: "entries.purge".into(), exists: false }];
    let request = "summary: harmless\n\n\n\n\nStarting it means nothing at all\u{202e}evil\n  route entries.purge";
    let plan = p.open(&a, on(1), "agent\u{202e}", request, "s", touches).unwrap();
    let e = p.add_task(plan.id, &on(1), &"t".repeat(600), &"d".repeat(401)).unwrap_err();
    assert!(e.to_string().contains("at most 1000 are allowed"), "{e}");
    for n in 0..MAX_TASKS {
        p.add_task(plan.id, &on(1), &format!("task {n}"), "").unwrap();
    }
    let e = p.add_task(plan.id, &on(1), "one more", "").unwrap_err();
    assert!(e.to_string().contains(&format!("{MAX_TASKS} tasks, the most a plan may have")), "{e}");
    let text = p.get(plan.id).unwrap().text();
    assert!(!text.contains('\u{202e}'), "{text}");
    assert!(!text.contains("\n\n"), "blank runs collapsed and framed: {text}");
    let (host, agent) = text.split_once(AGENT_WORDS).expect("the agent's words are headed");
    assert!(host.starts_with(&format!("plan {} of notes (draft)", plan.id)), "{text}");
    assert!(host.contains("entries.purge  ← the app has no such thing now"), "{text}");
    assert!(!host.contains("harmless") && !host.contains("Starting it means"), "{text}");
    for line in agent.trim_start_matches('\n').lines() {
        assert!(line.starts_with("  | "), "every line of the agent's is framed: {line:?}");
    }
}

#[test]
fn a_command_line_sees_runs_of_the_launcher_holding_the_lock_only() {
    let (d, p) = plans(Duration::from_secs(60));
    let root = crate::root::Root::open(d.path()).unwrap();
    let a = app("notes");
    let plan = submitted(&p, &a, 1);
    p.start(plan.id, &on(1)).unwrap();
    // The command line's handle: bound to no launcher; it asks the lock.
    let cli = Plans::new(&root, Duration::from_secs(60));
    let holder = crate::root::Holder { pid: 1, started_at: String::new(), id: ME.into() };
    let lock = crate::root::take_launcher_lock(&root, &holder).unwrap().expect("free");
    assert_eq!(cli.running(&a).unwrap().map(|r| r.id), Some(plan.id), "held by its launcher: running");
    drop(lock);
    assert!(cli.running(&a).unwrap().is_none(), "the lock is free: its launcher is gone");
    assert_eq!(p.get(plan.id).unwrap().state, State::Stopped);
}

#[test]
fn plans_and_runs_survive_another_handle_of_the_file() {
    let (d, p) = plans(Duration::from_secs(60));
    let a = app("notes");
    let plan = submitted(&p, &a, 1);
    p.start(plan.id, &on(1)).unwrap();
    // The command line's handle stops what the launcher's runs.
    let other = Plans::new(&crate::root::Root::open(d.path()).unwrap(), Duration::from_secs(60));
    other.bind_launcher(ME);
    other.stop(&Caller::command_line(), &a, None).unwrap();
    assert!(p.running(&a).unwrap().is_none());
    assert_eq!(other.list(&a, 10).unwrap()[0].state, State::Stopped);
}

#[test]
fn a_run_answers_only_its_tools_of_its_app_on_its_connection() {
    let (_d, p) = plans(Duration::from_secs(60));
    let a = app("notes");
    let plan = submitted(&p, &a, 7);
    p.start(plan.id, &on(7)).unwrap();
    let input = serde_json::json!({});
    let (mine, theirs, no_conn) = (engineer(7), engineer(8), Caller::ai("agent"));
    let elsewhere = Caller::engineer("agent", of("launcher-2", 7));
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
                keys: &[],
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
        k(&elsewhere, &a, "source_edit", true, false),
        k(&no_conn, &a, "source_edit", true, false),
        k(&mcp, &a, "add", false, true),
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(answer, None, "case {n}");
    }
}

#[test]
fn a_plan_an_older_launcher_wrote_is_shown_without_format_characters() {
    let (_d, p) = plans(Duration::from_secs(60));
    let a = app("notes");
    let plan = p.open(&a, on(1), "agent", "r", "", Vec::new()).unwrap();
    p.add_task(plan.id, &on(1), "t", "").unwrap();
    // As a launcher before the bounds stored it: the agent's text unchanged.
    p.with(|c| {
        c.execute(
            "UPDATE plans SET request = 'a\u{202e}b\n\n\n\nc', client = 'x\u{2066}y' WHERE id = ?1",
            [plan.id as i64],
        )?;
        c.execute("UPDATE tasks SET title = 't\u{200b}' WHERE plan = ?1", [plan.id as i64])?;
        Ok(())
    })
    .unwrap();
    let shown = p.get(plan.id).unwrap();
    assert_eq!((shown.request.as_str(), shown.client.as_str(), shown.tasks[0].title.as_str()), ("ab\n\nc", "xy", "t"));
    assert!(!shown.text().chars().any(text::is_format));
}
