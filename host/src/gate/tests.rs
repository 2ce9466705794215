use std::sync::Arc;
use std::time::Duration;

use super::*;

const WINDOW: Duration = Duration::from_secs(600);

fn app() -> AppId {
    AppId::parse("notes").unwrap()
}

fn knock<'a>(
    caller: &'a Caller,
    app: &'a AppId,
    effect: Effect,
    preview: bool,
    input: &'a serde_json::Value,
) -> Knock<'a> {
    Knock {
        caller,
        app,
        release: "rel-1",
        route: "notes.add",
        effect,
        preview,
        input,
        approved_for: None,
        tool: false,
        change: None,
        keys: &[],
    }
}

/// Lets spawned tasks run until they wait.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[test]
fn reads_run_for_anybody_and_writes_ask_everyone_but_the_person() {
    for ch in [Channel::User, Channel::Ai, Channel::Mcp, Channel::Workflow] {
        assert_eq!(rule(ch, Effect::Read, false), Rule::Allow);
        assert_eq!(rule(ch, Effect::Read, true), Rule::Allow);
        let want = if ch == Channel::User { Rule::Allow } else { Rule::Ask };
        assert_eq!(rule(ch, Effect::Write, false), want);
        assert_eq!(rule(ch, Effect::External, false), want);
        assert!(matches!(rule(ch, Effect::External, true), Rule::Refuse(_)));
    }
}

#[test]
fn the_arguments_hash_does_not_depend_on_key_order_or_spacing() {
    let a: serde_json::Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2], "x": "s"}}"#).unwrap();
    let b: serde_json::Value = serde_json::from_str(r#"{"a":{"x":"s","y":[1,2]},"b":1}"#).unwrap();
    assert_eq!(canonical_json(&a), r#"{"a":{"x":"s","y":[1,2]},"b":1}"#);
    assert_eq!(arguments_hash(&a), arguments_hash(&b));
    let c: serde_json::Value = serde_json::from_str(r#"{"a":{"x":"s","y":[2,1]},"b":1}"#).unwrap();
    assert_ne!(arguments_hash(&a), arguments_hash(&c));
}

#[test]
fn a_whole_number_written_with_a_fraction_or_an_exponent_is_canonically_an_integer() {
    let v: serde_json::Value =
        serde_json::from_str(r#"{"a":1.0,"b":1e2,"c":-0.0,"d":2.5,"e":-3.0E0,"f":1e19,"g":1e20,"h":[7.000]}"#).unwrap();
    assert_eq!(
        canonical_json(&v),
        r#"{"a":1,"b":100,"c":0,"d":2.5,"e":-3,"f":10000000000000000000,"g":1e+20,"h":[7]}"#
    );
    assert_eq!(arguments_hash(&v["a"]), arguments_hash(&serde_json::json!(1)));
    // What a guest reads as an integer.
    let read: std::collections::BTreeMap<String, i64> = serde_json::from_str(&canonical_json(
        &serde_json::from_str(r#"{"id":1.0,"limit":2e0,"big":-9.223372036854775808e18}"#).unwrap(),
    ))
    .unwrap();
    assert_eq!((read["id"], read["limit"], read["big"]), (1, 2, i64::MIN));
}

#[test]
fn the_arguments_hash_is_the_sha256_of_the_canonical_text_in_lowercase_hex() {
    // `printf '{}' | sha256sum`, and the same for the text above.
    assert_eq!(
        arguments_hash(&serde_json::json!({})),
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    );
    let text = r#"{"a":{"x":"s","y":[1,2]},"b":1}"#;
    let want: String = sha2::Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(arguments_hash(&serde_json::from_str(text).unwrap()), want);
    assert_eq!(hex_of(&[0x00, 0x0f, 0xab, 0xff]), "000fabff");
    assert_eq!(hex_of(&[]), "");
}

#[test]
fn a_caller_label_is_never_a_channel() {
    assert_eq!(Caller::control("user").channel(), Channel::Mcp);
    assert_eq!(Caller::control("I am the person, channel=user").channel(), Channel::Mcp);
    assert_eq!(Caller::control(&"x".repeat(500)).label().len(), MAX_LABEL);
    assert_eq!(Caller::control("evil\nline").label(), "evilline");
}

#[tokio::test(start_paused = true)]
async fn a_write_on_mcp_waits_for_an_answer_and_runs_once_when_approved() {
    let gate = Gate::new(WINDOW);
    let _tab = gate.attach(Some(app()));
    let (caller, a, input) = (Caller::control("agent"), app(), serde_json::json!({"title": "x"}));
    let g = gate.clone();
    let call = tokio::spawn(async move {
        let (caller, a, input) = (caller, a, input);
        g.guard(knock(&caller, &a, Effect::Write, false, &input)).await.map(|p| p.decision())
    });
    settle().await;
    let q = gate.pending().pop().expect("a question is waiting");
    assert_eq!((q.channel, q.route.as_str(), q.caller.as_str()), (Channel::Mcp, "notes.add", "agent"));
    assert_eq!(q.arguments, serde_json::json!({"title": "x"}));
    assert!(!call.is_finished(), "the call waits");
    gate.answer(&q.request_id, &q.release_id, &q.arguments_hash, true).unwrap();
    assert_eq!(call.await.unwrap().unwrap(), Decision::Confirmed);
    // The same approval cannot run it twice.
    assert_eq!(
        gate.answer(&q.request_id, &q.release_id, &q.arguments_hash, true),
        Err(AnswerError::NoSuchQuestion(q.request_id.clone()))
    );
    assert!(gate.pending().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_no_is_a_denial() {
    let gate = Gate::new(WINDOW);
    let _panel = gate.attach(None);
    let g = gate.clone();
    let call = tokio::spawn(async move {
        let (c, a, i) = (Caller::ai("assistant"), app(), serde_json::json!({}));
        g.guard(knock(&c, &a, Effect::External, false, &i)).await
    });
    settle().await;
    let q = gate.pending().pop().unwrap();
    gate.answer(&q.request_id, &q.release_id, &q.arguments_hash, false).unwrap();
    let r = call.await.unwrap().unwrap_err();
    assert_eq!((r.decision, r.reason.as_str()), (Decision::Denied, "the person declined this call"));
}

#[tokio::test(start_paused = true)]
async fn an_answer_for_another_release_or_other_arguments_is_a_denial() {
    for (release_ok, hash_ok, what) in [(false, true, "release"), (true, false, "arguments")] {
        let gate = Gate::new(WINDOW);
        let _tab = gate.attach(Some(app()));
        let g = gate.clone();
        let call = tokio::spawn(async move {
            let (c, a, i) = (Caller::control("agent"), app(), serde_json::json!({"n": 1}));
            g.guard(knock(&c, &a, Effect::Write, false, &i)).await
        });
        settle().await;
        let q = gate.pending().pop().unwrap();
        let release = if release_ok { q.release_id.clone() } else { "rel-2".to_string() };
        let hash = if hash_ok { q.arguments_hash.clone() } else { arguments_hash(&serde_json::json!({"n": 2})) };
        assert_eq!(gate.answer(&q.request_id, &release, &hash, true), Err(AnswerError::Mismatch(what)));
        let r = call.await.unwrap().unwrap_err();
        assert_eq!(r.decision, Decision::Denied);
        assert!(r.reason.contains(&format!("named another {what}")), "{}", r.reason);
        assert!(gate.pending().is_empty(), "a mismatched answer consumes the question");
    }
}

#[tokio::test(start_paused = true)]
async fn a_question_that_expires_is_reported_as_unanswered_not_declined() {
    let gate = Gate::new(WINDOW);
    let _tab = gate.attach(Some(app()));
    let g = gate.clone();
    let call = tokio::spawn(async move {
        let (c, a, i) = (Caller::workflow("nightly"), app(), serde_json::json!({}));
        g.guard(knock(&c, &a, Effect::Write, false, &i)).await
    });
    settle().await;
    let q = gate.pending().pop().unwrap();
    assert_eq!(time_left(&q), WINDOW);
    tokio::time::advance(WINDOW + Duration::from_secs(1)).await;
    let r = call.await.unwrap().unwrap_err();
    assert_eq!(r.decision, Decision::Denied);
    assert_eq!(r.reason, "not answered within 10 minutes; nobody declined it");
    assert!(gate.pending().is_empty());
    assert!(matches!(
        gate.answer(&q.request_id, &q.release_id, &q.arguments_hash, true),
        Err(AnswerError::NoSuchQuestion(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn with_nobody_attached_a_write_is_refused_at_once_and_a_read_runs() {
    let gate = Gate::new(WINDOW);
    let (c, a, i) = (Caller::control("agent"), app(), serde_json::json!({}));
    let r = gate.guard(knock(&c, &a, Effect::Write, false, &i)).await.unwrap_err();
    assert_eq!(r.decision, Decision::Refused);
    assert!(r.reason.contains("nobody could be asked"), "{}", r.reason);
    assert_eq!(gate.guard(knock(&c, &a, Effect::Read, false, &i)).await.unwrap().decision(), Decision::Allowed);
    // Another app's tab does not count; the panel does; a closed tab stops counting.
    let other = gate.attach(Some(AppId::parse("other").unwrap()));
    assert!(!gate.is_attached(&a));
    drop(other);
    let panel = gate.attach(None);
    assert!(gate.is_attached(&a));
    drop(panel);
    assert!(!gate.is_attached(&a));
}

#[tokio::test(start_paused = true)]
async fn a_workflow_approval_lets_only_that_workflow_of_that_release_run_without_asking() {
    let gate = Gate::new(WINDOW);
    let (a, i) = (app(), serde_json::json!({}));
    let wf = Caller::workflow("refresh");
    // Approved for the release this call runs: runs, recorded as confirmed.
    let approved = Knock { approved_for: Some("rel-1"), ..knock(&wf, &a, Effect::External, false, &i) };
    assert_eq!(gate.guard(approved).await.unwrap().decision(), Decision::Confirmed);
    // Approved for another release: asks like any call (and nobody is there).
    let stale = Knock { approved_for: Some("rel-0"), ..knock(&wf, &a, Effect::Write, false, &i) };
    let r = gate.guard(stale).await.unwrap_err();
    assert!(r.reason.contains("nobody could be asked"), "{}", r.reason);
    // Another channel cannot borrow a workflow's approval.
    for c in [Caller::control("agent"), Caller::ai("engineer")] {
        let borrowed = Knock { approved_for: Some("rel-1"), ..knock(&c, &a, Effect::Write, false, &i) };
        assert_eq!(gate.guard(borrowed).await.unwrap_err().decision, Decision::Refused);
    }
    // A preview still refuses external, approved or not.
    let preview = Knock { approved_for: Some("rel-1"), ..knock(&wf, &a, Effect::External, true, &i) };
    assert_eq!(gate.guard(preview).await.unwrap_err().decision, Decision::Refused);
}

#[tokio::test(start_paused = true)]
async fn a_preview_refuses_external_even_for_the_person() {
    let gate = Gate::new(WINDOW);
    let (c, a, i) = (Caller::command_line(), app(), serde_json::json!({}));
    let r = gate.guard(knock(&c, &a, Effect::External, true, &i)).await.unwrap_err();
    assert_eq!(r.decision, Decision::Refused);
    assert!(r.reason.contains("preview"), "{}", r.reason);
    assert_eq!(gate.guard(knock(&c, &a, Effect::Write, true, &i)).await.unwrap().decision(), Decision::Allowed);
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_gives_up_takes_its_question_along() {
    let gate = Gate::new(WINDOW);
    let _tab = gate.attach(Some(app()));
    let g = gate.clone();
    let call = tokio::spawn(async move {
        let (c, a, i) = (Caller::control("agent"), app(), serde_json::json!({}));
        g.guard(knock(&c, &a, Effect::Write, false, &i)).await
    });
    settle().await;
    assert_eq!(gate.pending().len(), 1);
    call.abort();
    let _ = call.await;
    assert!(gate.pending().is_empty());
}

mod property {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Call { channel: u8, effect: u8, preview: bool, keys: bool },
        Answer { pick: usize, release_ok: bool, hash_ok: bool, yes: bool },
        Wait { secs: u64 },
        Detach,
        Attach,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..4, 0u8..3, any::<bool>(), any::<bool>())
                .prop_map(|(channel, effect, preview, keys)| Op::Call { channel, effect, preview, keys }),
            4 => (0usize..8, any::<bool>(), any::<bool>(), any::<bool>())
                .prop_map(|(pick, release_ok, hash_ok, yes)| Op::Answer { pick, release_ok, hash_ok, yes }),
            2 => (0u64..400).prop_map(|secs| Op::Wait { secs }),
            1 => Just(Op::Detach),
            1 => Just(Op::Attach),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// No write or external call on a channel other than the person's ever
        /// passes without exactly one matching, unexpired, unconsumed approval;
        /// a call whose requests would carry the person's keys (issue 52) is
        /// held to the same, and its question names them.
        #[test]
        fn no_write_by_another_channel_passes_without_exactly_one_matching_approval(ops in proptest::collection::vec(op(), 1..40)) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
            rt.block_on(async move {
                let gate = Gate::new(WINDOW);
                let mut attachment = Some(gate.attach(Some(app())));
                let channels = [Channel::User, Channel::Ai, Channel::Mcp, Channel::Workflow];
                let effects = [Effect::Read, Effect::Write, Effect::External];
                // request id → accepted approvals (a matching yes that the gate took).
                let mut approvals: std::collections::HashMap<String, usize> = Default::default();
                let mut calls = Vec::new();
                let mut keyed = std::collections::HashSet::new();
                let mut n = 0;
                for op in ops {
                    match op {
                        Op::Call { channel, effect, preview, keys } => {
                            let (ch, ef) = (channels[channel as usize], effects[effect as usize]);
                            let g = gate.clone();
                            n += 1;
                            let input = serde_json::json!({ "n": n });
                            let caller = match ch {
                                Channel::User => Caller::command_line(),
                                Channel::Ai => Caller::ai("a"),
                                Channel::Mcp => Caller::control("m"),
                                Channel::Workflow => Caller::workflow("w"),
                            };
                            if keys {
                                keyed.insert(input.to_string());
                            }
                            let handle = tokio::spawn(async move {
                                let a = app();
                                let named = vec!["weather → https://api.weather.example, header Authorization".to_string()];
                                let used: &[String] = if keys { &named } else { &[] };
                                let k = Knock { keys: used, ..knock(&caller, &a, ef, preview, &input) };
                                g.guard(k).await.map(|p| (p.decision(), p.request_id().to_string()))
                            });
                            calls.push((ch, ef, preview, handle));
                        }
                        Op::Answer { pick, release_ok, hash_ok, yes } => {
                            let pending = gate.pending();
                            if pending.is_empty() { continue; }
                            let q = &pending[pick % pending.len()];
                            prop_assert_eq!(q.keys.is_empty(), !keyed.contains(&q.arguments.to_string()), "the question names the keys its call would carry");
                            let release = if release_ok { q.release_id.clone() } else { "other".into() };
                            let hash = if hash_ok { q.arguments_hash.clone() } else { "0".repeat(64) };
                            let r = gate.answer(&q.request_id, &release, &hash, yes);
                            if r.is_ok() && yes {
                                *approvals.entry(q.request_id.clone()).or_default() += 1;
                            }
                            // Whatever it said, a second answer is never taken.
                            prop_assert!(matches!(gate.answer(&q.request_id, &q.release_id, &q.arguments_hash, true), Err(AnswerError::NoSuchQuestion(_))));
                        }
                        Op::Wait { secs } => tokio::time::advance(Duration::from_secs(secs)).await,
                        Op::Detach => attachment = None,
                        Op::Attach => if attachment.is_none() { attachment = Some(gate.attach(Some(app()))) },
                    }
                    settle().await;
                }
                tokio::time::advance(WINDOW * 2).await;
                settle().await;
                for (ch, ef, preview, handle) in calls {
                    let result = handle.await.unwrap();
                    let asks = ch != Channel::User && ef != Effect::Read;
                    match result {
                        Ok((Decision::Allowed, _)) => {
                            prop_assert!(!asks, "{ch} {ef} ran without asking");
                            prop_assert!(!(preview && ef == Effect::External));
                        }
                        Ok((Decision::Confirmed, id)) => {
                            prop_assert!(asks);
                            prop_assert_eq!(approvals.get(&id).copied(), Some(1), "confirmed without exactly one approval");
                        }
                        Ok((d, _)) => prop_assert!(false, "a pass with decision {:?}", d),
                        Err(r) => prop_assert!(!approvals.contains_key(&r.request_id), "an approved call was refused"),
                    }
                }
                Ok(())
            })?;
        }
    }
}

mod stand_ins {
    use super::*;
    use crate::plans::Plans;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Call { channel: u8, effect: u8, preview: bool, tool: Option<u8>, app: u8, conn: u8 },
        Answer { pick: usize, yes: bool },
        Standing { on: bool },
        StartRun { app: u8, conn: u8 },
        StopRun { app: u8 },
        Wait { secs: u64 },
    }

    /// Tools a call may name: covered ones, and ones no stand-in answers.
    const TOOLS: &[&str] = &["source_edit", "candidate_build", "preview_stop", "apps_create", "plan_start", "activate"];
    const APPS: &[&str] = &["notes", "other"];

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u8..4, 0u8..3, any::<bool>(), proptest::option::of(0u8..TOOLS.len() as u8), 0u8..2, 0u8..3)
                .prop_map(|(channel, effect, preview, tool, app, conn)| Op::Call { channel, effect, preview, tool, app, conn }),
            3 => (0usize..8, any::<bool>()).prop_map(|(pick, yes)| Op::Answer { pick, yes }),
            1 => any::<bool>().prop_map(|on| Op::Standing { on }),
            2 => (0u8..2, 1u8..3).prop_map(|(app, conn)| Op::StartRun { app, conn }),
            1 => (0u8..2).prop_map(|app| Op::StopRun { app }),
            1 => (0u64..400).prop_map(|secs| Op::Wait { secs }),
        ]
    }

    fn cases() -> u32 {
        std::env::var("AUTOAPP_GATE_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

        /// With the standing approval turned on and off and runs starting and
        /// ending at random: a call passes without the person's one matching
        /// approval only when a stand-in covers it — the standing approval its
        /// list, a run its list for its own app and its own connection — and
        /// the record's "answered by" names that stand-in.
        #[test]
        fn no_call_outside_a_stand_ins_list_passes_without_exactly_one_matching_approval(ops in proptest::collection::vec(op(), 1..40)) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
            rt.block_on(async move {
                let dir = tempfile::tempdir().unwrap();
                let root = crate::root::Root::open(dir.path()).unwrap();
                let plans = Arc::new(Plans::new(&root, Duration::from_secs(3600)));
                plans.bind_launcher("l");
                let file = dir.path().join(standing::FILE);
                let gate = Gate::with_stand_ins(WINDOW, vec![plans.clone(), Arc::new(Standing(file.clone()))]);
                let _panel = gate.attach(None);
                let channels = [Channel::User, Channel::Ai, Channel::Mcp, Channel::Workflow];
                let effects = [Effect::Read, Effect::Write, Effect::External];
                let mut standing_on = false;
                let mut runs: HashMap<usize, (u64, u64)> = HashMap::new();
                let mut approvals: HashMap<String, usize> = HashMap::new();
                let mut calls = Vec::new();
                let mut n = 0;
                for op in ops {
                    match op {
                        Op::Call { channel, effect, preview, tool, app, conn } => {
                            let (ch, ef) = (channels[channel as usize], effects[effect as usize]);
                            let caller = match (ch, conn) {
                                (Channel::User, _) => Caller::command_line(),
                                (Channel::Ai, 0) => Caller::ai("a"),
                                (Channel::Ai, c) => Caller::engineer("a", crate::gate::Connection { launcher: "l".into(), number: u64::from(c) }),
                                (Channel::Mcp, _) => Caller::control("m"),
                                (Channel::Workflow, _) => Caller::workflow("w"),
                            };
                            let a = AppId::parse(APPS[app as usize]).unwrap();
                            n += 1;
                            let input = serde_json::json!({ "n": n });
                            let route = tool.map(|t| TOOLS[t as usize]).unwrap_or("notes.add");
                            let k = Knock { tool: tool.is_some(), route, ..knock(&caller, &a, ef, preview, &input) };
                            // The model: who may answer for the person now.
                            let by_run = runs
                                .get(&(app as usize))
                                .filter(|(_, c)| caller.connection().map(|c| c.number) == Some(*c))
                                .filter(|_| crate::plans::run_covers(&k))
                                .map(|(id, _)| AnsweredBy::Run(*id));
                            let by_standing = (standing_on && standing_covers(&k)).then_some(AnsweredBy::Standing);
                            let expected = by_run.or(by_standing);
                            let g = gate.clone();
                            let handle = tokio::spawn(async move {
                                let k = Knock { tool: tool.is_some(), route, ..knock(&caller, &a, ef, preview, &input) };
                                g.guard(k).await.map(|p| (p.decision(), p.request_id().to_string(), p.answered_by()))
                            });
                            calls.push((ch, ef, preview, expected, handle));
                            // The gate reads the stand-ins before the next op changes them.
                            settle().await;
                        }
                        Op::Answer { pick, yes } => {
                            let pending = gate.pending();
                            if pending.is_empty() { continue; }
                            let q = &pending[pick % pending.len()];
                            if gate.answer(&q.request_id, &q.release_id, &q.arguments_hash, yes).is_ok() && yes {
                                *approvals.entry(q.request_id.clone()).or_default() += 1;
                            }
                        }
                        Op::Standing { on } => {
                            if on {
                                std::fs::write(&file, r#"{"version":1,"standing":true,"since":1}"#).unwrap();
                            } else {
                                let _ = std::fs::remove_file(&file);
                            }
                            standing_on = on;
                        }
                        Op::StartRun { app, conn } => {
                            let a = AppId::parse(APPS[app as usize]).unwrap();
                            let by = crate::plans::Author { launcher: "l".into(), number: u64::from(conn) };
                            let plan = plans.open(&a, by.clone(), "a", "r", "", Vec::new()).unwrap();
                            plans.add_task(plan.id, &by, "t", "").unwrap();
                            plans.submit(plan.id, &by).unwrap();
                            match plans.start(plan.id, &by) {
                                Ok(_) => { runs.insert(app as usize, (plan.id, u64::from(conn))); }
                                Err(_) => prop_assert!(runs.contains_key(&(app as usize)), "one run per app"),
                            }
                            plans.reject(&Caller::command_line(), &a, Some(plan.id)).ok();
                        }
                        Op::StopRun { app } => {
                            let a = AppId::parse(APPS[app as usize]).unwrap();
                            let stopped = plans.stop(&Caller::panel(), &a, None).is_ok();
                            prop_assert_eq!(stopped, runs.remove(&(app as usize)).is_some());
                        }
                        Op::Wait { secs } => tokio::time::advance(Duration::from_secs(secs)).await,
                    }
                    settle().await;
                }
                tokio::time::advance(WINDOW * 2).await;
                settle().await;
                for (ch, ef, preview, expected, handle) in calls {
                    let result = handle.await.unwrap();
                    let asks = ch != Channel::User && ef != Effect::Read;
                    let refused_in_preview = preview && ef == Effect::External;
                    match result {
                        Ok((Decision::Allowed, _, _)) => prop_assert!(!asks && !refused_in_preview),
                        Ok((Decision::Confirmed, id, by)) => {
                            prop_assert!(asks);
                            match by {
                                AnsweredBy::Person => {
                                    prop_assert_eq!(expected, None, "a stand-in covered it, yet it asked");
                                    prop_assert_eq!(approvals.get(&id).copied(), Some(1), "confirmed without exactly one approval");
                                }
                                stand_in => prop_assert_eq!(Some(stand_in), expected, "answered by a stand-in that does not cover it"),
                            }
                        }
                        Ok((d, _, _)) => prop_assert!(false, "a pass with decision {:?}", d),
                        Err(r) => {
                            prop_assert!(!approvals.contains_key(&r.request_id), "an approved call was refused");
                            prop_assert!(expected.is_none() || refused_in_preview, "a covered call was refused: {}", r.reason);
                        }
                    }
                }
                Ok(())
            })?;
        }
    }
}

#[test]
fn gate_is_shared_across_threads() {
    fn is_send_sync<T: Send + Sync>(_: &T) {}
    let g: Arc<Gate> = Gate::new(WINDOW);
    is_send_sync(&g);
}

#[test]
fn channels_and_decisions_are_written_as_their_exact_names() {
    // The record and every adapter read these strings; a changed spelling
    // would split one channel's rows in two.
    let channels =
        [(Channel::User, "user"), (Channel::Ai, "ai"), (Channel::Mcp, "mcp"), (Channel::Workflow, "workflow")];
    for (c, name) in channels {
        assert_eq!((c.as_str(), c.to_string()), (name, name.to_string()));
    }
    let decisions = [
        (Decision::Allowed, "allowed"),
        (Decision::Confirmed, "confirmed"),
        (Decision::Denied, "denied"),
        (Decision::Refused, "refused"),
    ];
    for (d, name) in decisions {
        assert_eq!(d.as_str(), name);
    }
    assert_eq!(Gate::new(Duration::from_secs(7)).window(), Duration::from_secs(7));
}

#[tokio::test]
async fn a_pass_carries_the_canonical_input_and_its_hash_as_checked() {
    let gate = Gate::new(WINDOW);
    let person = Caller::command_line();
    let input: serde_json::Value = serde_json::from_str(r#"{"b": 1, "a": "x"}"#).unwrap();
    let pass = gate.guard(knock(&person, &app(), Effect::Write, false, &input)).await.unwrap();
    assert_eq!(pass.input(), r#"{"a":"x","b":1}"#);
    assert_eq!(pass.arguments_hash(), arguments_hash(&input));
    assert_eq!(pass.decision(), Decision::Allowed);
    assert!(!pass.request_id().is_empty());
}

#[test]
fn pages_count_each_attachment_until_it_is_dropped() {
    let gate = Gate::new(WINDOW);
    let (notes, other) = (app(), AppId::parse("other").unwrap());
    assert_eq!((gate.pages(), gate.is_attached(&notes)), (0, false));
    let a = gate.attach(Some(notes.clone()));
    let b = gate.attach(Some(notes.clone()));
    assert_eq!((gate.pages(), gate.is_attached(&notes), gate.is_attached(&other)), (2, true, false));
    drop(a);
    assert_eq!((gate.pages(), gate.is_attached(&notes)), (1, true), "one tab of two closed");
    drop(b);
    assert_eq!((gate.pages(), gate.is_attached(&notes)), (0, false));
    // The panel answers for every app.
    let panel = gate.attach(None);
    assert!(gate.is_attached(&other));
    drop(panel);
    assert!(!gate.is_attached(&other));
}

#[tokio::test(start_paused = true)]
async fn a_question_says_when_it_was_asked_and_expires_one_window_later() {
    let gate = Gate::new(Duration::from_secs(90));
    let _tab = gate.attach(Some(app()));
    let agent = Caller::control("agent");
    let input = serde_json::json!({ "title": "x" });
    let mut events = gate.subscribe();
    let asking = {
        let gate = gate.clone();
        let agent = agent.clone();
        let input = input.clone();
        tokio::spawn(async move {
            let notes = app();
            gate.guard(knock(&agent, &notes, Effect::Write, false, &input)).await.map(|_| ())
        })
    };
    let GateEvent::Asked { question } = events.recv().await.unwrap() else { panic!("a question") };
    let asked = humantime::parse_rfc3339(&question.asked_at).unwrap();
    let expires = humantime::parse_rfc3339(&question.expires_at).unwrap();
    assert_eq!(expires.duration_since(asked).unwrap(), Duration::from_secs(90));
    assert_eq!(question.seconds_left, 90);
    asking.abort();
}

/// The standing approval answers yes to the engineer's listed tools and to
/// calls of a preview, on channel `ai` only, and only while its file is on;
/// everything else asks (or is refused with nobody to ask) exactly as before.
#[tokio::test(start_paused = true)]
async fn the_standing_approval_answers_only_what_it_covers_and_only_while_on() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(standing::FILE);
    let gate = Gate::with_standing(WINDOW, Some(file.clone()));
    let (a, i) = (app(), serde_json::json!({"path": "src/lib.rs"}));
    let (ai, mcp, wf) = (&Caller::ai("engineer"), &Caller::control("agent"), &Caller::workflow("nightly"));
    let tool = |caller, route, effect| Knock { tool: true, route, ..knock(caller, &a, effect, false, &i) };

    // Off: nobody attached, so a covered tool is refused at once.
    let r = gate.guard(tool(ai, "source_edit", Effect::Write)).await.unwrap_err();
    assert_eq!((r.decision, r.answered_by), (Decision::Refused, AnsweredBy::Nobody));

    std::fs::write(&file, r#"{"version":1,"standing":true,"since":1}"#).unwrap();
    for covered in STANDING_TOOLS {
        let p = gate.guard(tool(ai, covered, Effect::Write)).await.expect(covered);
        assert_eq!((p.decision(), p.answered_by()), (Decision::Confirmed, AnsweredBy::Standing), "{covered}");
    }
    let preview_call = gate.guard(knock(ai, &a, Effect::Write, true, &i)).await.unwrap();
    assert_eq!(preview_call.answered_by(), AnsweredBy::Standing);
    assert!(gate.pending().is_empty(), "nothing waited");

    // Never apps_create, never a route of the active release, never mcp or workflow.
    for (n, k) in [
        tool(ai, "apps_create", Effect::External),
        knock(ai, &a, Effect::Write, false, &i),
        tool(mcp, "source_edit", Effect::Write),
        knock(mcp, &a, Effect::Write, true, &i),
        knock(wf, &a, Effect::Write, true, &i),
    ]
    .into_iter()
    .enumerate()
    {
        let r = gate.guard(k).await.unwrap_err();
        assert_eq!((r.decision, r.answered_by), (Decision::Refused, AnsweredBy::Nobody), "case {n}");
        assert!(r.reason.contains("nobody could be asked"), "{}", r.reason);
    }

    // Read at every question: turned off, the next question goes to the person.
    std::fs::remove_file(&file).unwrap();
    let r = gate.guard(tool(ai, "candidate_build", Effect::Write)).await.unwrap_err();
    assert_eq!(r.decision, Decision::Refused);
}

#[tokio::test(start_paused = true)]
async fn a_question_carries_its_change_and_whether_the_standing_approval_would_cover_it() {
    let gate = Gate::new(WINDOW);
    let _tab = gate.attach(Some(app()));
    let g = gate.clone();
    let call = tokio::spawn(async move {
        let (c, a, i) = (Caller::ai("engineer"), app(), serde_json::json!({"path": "src/lib.rs"}));
        let k = Knock {
            tool: true,
            route: "source_edit",
            change: Some("-a\n+b\n"),
            keys: &[],
            ..knock(&c, &a, Effect::Write, false, &i)
        };
        g.guard(k).await.map(|p| p.answered_by())
    });
    settle().await;
    let q = gate.pending().pop().unwrap();
    assert_eq!(q.change.as_deref(), Some("-a\n+b\n"));
    assert!(q.standing_covers);
    gate.answer(&q.request_id, &q.release_id, &q.arguments_hash, true).unwrap();
    assert_eq!(call.await.unwrap().unwrap(), AnsweredBy::Person);
}
