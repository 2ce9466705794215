//! The engineer's side of plans and runs ([`crate::plans`]): the tools an
//! agent writes a plan with (reads: nobody is asked), `plan_start` (the
//! person's question, with the plan on the card), and the check every change
//! of an app passes first — refused while a plan of the app waits for the
//! person, refused from any connection but the run's while a run works on it,
//! and labelled with the plan and task when it is the run's.

use serde_json::{Value, json};

use super::inputs::{self, parse, schema};
use super::{Answer, Engineer, Progress, Spec, blocking};
use crate::error::{ErrorKind, kinded};
use crate::gate::Caller;
use crate::manifest::{AppId, Effect};
use crate::plans::{Plan, Touch};

/// How many plans `plan_read {app}` answers with, newest first.
const PLANS_READ: usize = 50;

/// The engineer's tools that change an app: each passes [`Engineer::plan_check`].
pub const CHANGES: &[&str] = &[
    "source_edit",
    "source_write",
    "source_delete",
    "candidate_build",
    "candidate_preview",
    "preview_stop",
    "preview_call",
    "candidate_cycle",
];

/// The tools of plans and runs, in the order a client shows them.
pub fn specs() -> Vec<Spec> {
    use Effect::{Read, Write};
    vec![
        Spec {
            name: "plan_open",
            effect: Some(Read),
            description: "Start writing a plan for one app: the request you were given (in your words), a summary, and the routes, tables and files you expect to change (each is checked against the app: what it does not have is marked for the person). Drafting asks nobody and changes nothing.",
            input: schema::<inputs::PlanOpen>(),
        },
        Spec {
            name: "plan_task",
            effect: Some(Read),
            description: "Add a task to a draft plan (in order; numbered from 1).",
            input: schema::<inputs::PlanTask>(),
        },
        Spec {
            name: "plan_submit",
            effect: Some(Read),
            description: "Submit a draft plan to the person. Until they start or reject it, your edits, builds and previews of its app are refused: call plan_start to ask them to start it.",
            input: schema::<inputs::PlanRef>(),
        },
        Spec {
            name: "plan_read",
            effect: Some(Read),
            description: "One plan (`plan`), or every plan of an app (`app`), with its tasks, what it touches and where it is (draft, submitted, running, finished, stopped, rejected).",
            input: schema::<inputs::PlanRead>(),
        },
        Spec {
            name: "plan_start",
            effect: Some(Write),
            description: "Ask the person to start a submitted plan (the card shows it). From their yes until the run ends, your edits, builds and previews of that one app, from this connection, run without asking; anything else asks as usual; activation is always the person's. The run ends with plan_finish, the person's Stop, this connection closing, a question outside it going unanswered, its time limit, or the launcher stopping.",
            input: schema::<inputs::PlanRef>(),
        },
        Spec {
            name: "plan_task_done",
            effect: Some(Read),
            description: "Mark a task of your running plan done, with a note of what you did.",
            input: schema::<inputs::PlanTaskDone>(),
        },
        Spec {
            name: "plan_finish",
            effect: Some(Read),
            description: "End your running plan, saying what came of it. The next change asks the person again.",
            input: schema::<inputs::PlanFinish>(),
        },
    ]
}

/// A plan tool's input, read.
enum Input {
    Open(inputs::PlanOpen),
    Task(inputs::PlanTask),
    Submit(inputs::PlanRef),
    Read(inputs::PlanRead),
    Done(inputs::PlanTaskDone),
    Finish(inputs::PlanFinish),
}

fn shown(plan: &Plan) -> Value {
    let mut v = serde_json::to_value(plan).unwrap_or_default();
    if let Value::Object(m) = &mut v {
        m.insert("text".into(), Value::String(plan.text()));
    }
    v
}

/// A plan tool's input, read, and the app it is about (for its record row).
fn parsed(tool: &str, args: &Value, plans: &crate::plans::Plans) -> anyhow::Result<(Option<AppId>, Input)> {
    let named = |app: &str| AppId::parse(app).map_err(|e| kinded(ErrorKind::InvalidInput, e));
    let of_plan = |id: u64| plans.get(id).ok().and_then(|p| AppId::parse(&p.app).ok());
    Ok(match tool {
        "plan_open" => {
            let i: inputs::PlanOpen = parse(tool, args)?;
            (Some(named(&i.app)?), Input::Open(i))
        }
        "plan_task" => {
            let i: inputs::PlanTask = parse(tool, args)?;
            (of_plan(i.plan), Input::Task(i))
        }
        "plan_submit" => {
            let i: inputs::PlanRef = parse(tool, args)?;
            (of_plan(i.plan), Input::Submit(i))
        }
        "plan_read" => {
            let i: inputs::PlanRead = parse(tool, args)?;
            let app = match (&i.app, i.plan) {
                (Some(a), _) => Some(named(a)?),
                (None, Some(id)) => of_plan(id),
                (None, None) => {
                    return Err(kinded(ErrorKind::InvalidInput, "plan_read: name an `app` or a `plan`"));
                }
            };
            (app, Input::Read(i))
        }
        "plan_task_done" => {
            let i: inputs::PlanTaskDone = parse(tool, args)?;
            (of_plan(i.plan), Input::Done(i))
        }
        _ => {
            let i: inputs::PlanFinish = parse(tool, args)?;
            (of_plan(i.plan), Input::Finish(i))
        }
    })
}

/// Does what a plan tool (other than `plan_start`) asks, off the runtime's
/// threads: `on` is the app it is about, `author` the agent's connection.
fn answered(
    apps: &crate::apps::Apps,
    plans: &crate::plans::Plans,
    on: Option<AppId>,
    c: &Caller,
    author: Option<&crate::gate::Connection>,
    input: Input,
) -> anyhow::Result<Answer> {
    let by = || {
        author.ok_or_else(|| {
            kinded(ErrorKind::InvalidInput, "a plan belongs to its agent's connection; this caller has none")
        })
    };
    Ok(match input {
        Input::Open(i) => {
            let app = on.expect("plan_open names its app");
            let touches = touches(apps, &app, i.touches.as_ref())?;
            let summary = i.summary.as_deref().unwrap_or("");
            let plan = plans.open(&app, by()?.clone(), c.label(), &i.request, summary, touches)?;
            let missing = plan.touches.iter().filter(|t| !t.exists).count();
            let note = if missing == 0 {
                String::new()
            } else {
                format!(
                    " {missing} of the things it touches do not exist in {app} now; the person will see them marked."
                )
            };
            json!({ "message": format!("opened plan {} of {app} (a draft). Add tasks with plan_task, then plan_submit.{note}", plan.id), "plan": shown(&plan) })
        }
        Input::Task(i) => {
            let plan = plans.add_task(i.plan, by()?, &i.title, i.detail.as_deref().unwrap_or(""))?;
            json!({ "message": format!("plan {} has {} task(s)", plan.id, plan.tasks.len()), "plan": shown(&plan) })
        }
        Input::Submit(i) => {
            let plan = plans.submit(i.plan, by()?)?;
            json!({ "message": format!("submitted plan {} to the person; ask them to start it with plan_start. Until they answer, changes of {} are refused", plan.id, plan.app), "plan": shown(&plan) })
        }
        Input::Read(i) => match (on, i.plan) {
            (_, Some(id)) => json!({ "plan": shown(&plans.get(id)?) }),
            (Some(app), None) => {
                let list: Vec<Value> = plans.list(&app, PLANS_READ)?.iter().map(shown).collect();
                json!({ "plans": list })
            }
            (None, None) => unreachable!("refused above"),
        },
        Input::Done(i) => {
            let plan = plans.task_done(i.plan, c.connection(), i.task, i.note.as_deref().unwrap_or(""))?;
            let left = plan.tasks.iter().filter(|t| !t.done).count();
            json!({ "message": format!("task {} of plan {} is done; {left} left", i.task, plan.id), "plan": shown(&plan) })
        }
        Input::Finish(i) => {
            let plan = plans.finish(i.plan, c, &i.outcome)?;
            json!({ "message": format!("finished plan {}; the next change of {} asks the person again", plan.id, plan.app), "plan": shown(&plan) })
        }
    })
}

impl Engineer {
    /// Runs one of the tools of [`specs`].
    pub(super) async fn plan_tool(
        &self,
        caller: &Caller,
        spec: &Spec,
        args: Value,
        progress: &Progress,
    ) -> anyhow::Result<Answer> {
        if spec.name == "plan_start" {
            return self.plan_start(caller, spec, &args, progress).await;
        }
        let plans = self.apps.plans().clone();
        let (app, input) = parsed(spec.name, &args, &plans)?;
        if let Some(app) = &app
            && !self.apps.root().app(app).exists()
        {
            return Err(kinded(ErrorKind::NotFound, crate::error::no_such_app(app)));
        }
        let (apps, on, c) = (self.apps.clone(), app.clone(), caller.clone());
        let author = caller.connection().cloned();
        let result = blocking(move || answered(&apps, &plans, on, &c, author.as_ref(), input)).await;
        if let Some(app) = &app {
            self.ran(caller, spec, app, "plan", None, &args, &result).await;
            if result.is_ok() && spec.name != "plan_read" {
                (self.changed)(app);
            }
        }
        result
    }

    /// `plan_start`: the person's question, with the plan on the card; their
    /// yes starts the run on this connection.
    async fn plan_start(
        &self,
        caller: &Caller,
        spec: &Spec,
        args: &Value,
        progress: &Progress,
    ) -> anyhow::Result<Answer> {
        let id = parse::<inputs::PlanRef>(spec.name, args)?.plan;
        let plans = self.apps.plans().clone();
        let Some(by) = caller.connection().cloned() else {
            return Err(kinded(ErrorKind::InvalidInput, "a run is bound to its connection; this caller has none"));
        };
        // Refused before the person is asked: another agent's plan (their yes
        // would go to it), one not submitted, or a second run on the app. The
        // refusal is a row of the app's record, with its reason.
        let plan = match plans.check_start(id, &by) {
            Ok(p) => p,
            Err(e) => {
                if let Some(app) = plans.get(id).ok().and_then(|p| AppId::parse(&p.app).ok()) {
                    self.refused(caller, spec, &app, "plan", args, &e).await;
                }
                return Err(e);
            }
        };
        let app = AppId::parse(&plan.app).map_err(|e| kinded(ErrorKind::InvalidInput, e))?;
        let limit = humantime::format_duration(self.apps.plans().limit());
        // The host's lines first (what starting means, the app, the marks of
        // what the app lacks), then the agent's words, framed as the agent's.
        let card = format!(
            "An agent asks you to start plan {id} of {app} (channel ai).\n\
             Starting it means one thing: until the run ends, this agent's edits, builds and previews of {app} — only {app}, \
             only from this connection — run without asking you. Anything else asks as usual; activating is yours alone. \
             The run ends when the agent finishes it, you press Stop, its connection closes, a question outside it goes \
             unanswered, its time limit ({limit}) passes, or the launcher stops.\n{}",
            plan.text()
        );
        let pass = self.ask(caller, spec, &app, "plan", args, Some(&card), progress).await?;
        let started = blocking(move || plans.start(id, &by)).await;
        self.ran(caller, spec, &app, "plan", Some(&pass), args, &started).await;
        (self.changed)(&app);
        let plan = started?;
        Ok(json!({
            "message": format!("the person started plan {id}: until it ends, your edits, builds and previews of {app} from this connection run without asking. Mark tasks with plan_task_done; end it with plan_finish"),
            "plan": shown(&plan),
            "answeredBy": pass.answered_by().to_string(),
        }))
    }

    /// The check before a change of `app` ([`CHANGES`]): refused while a plan
    /// of the app waits for the person, or while a run of another connection
    /// works on it. The caller to go on with: labelled with its plan and task
    /// when the change is its run's.
    pub(super) async fn plan_check(&self, caller: &Caller, app: &AppId) -> anyhow::Result<Caller> {
        let (plans, id, c) = (self.apps.plans().clone(), app.clone(), caller.clone());
        blocking(move || {
            if let Some(run) = plans.running(&id)? {
                if run.is_run_of(c.connection()) {
                    return Ok(c.in_run(run.id, run.current_task()));
                }
                return Err(kinded(
                    ErrorKind::Conflict,
                    format!(
                        "plan {} is running on {id} from another connection; nobody else changes {id} until its run ends (the person can Stop it)",
                        run.id
                    ),
                ));
            }
            if let Some(waiting) = plans.waiting(&id)? {
                return Err(kinded(
                    ErrorKind::Conflict,
                    format!(
                        "plan {} of {id} waits for the person to read it; changes of {id} are refused until they start it (plan_start asks them) or reject it",
                        waiting.id
                    ),
                ));
            }
            Ok(c)
        })
        .await
    }

    /// Right before an approved change of `app` is made: refused (conflict)
    /// when a run of another connection began on the app since it was
    /// checked, whoever approved it.
    pub(super) async fn still_free(&self, caller: &Caller, app: &AppId) -> anyhow::Result<()> {
        let (plans, id, on) = (self.apps.plans().clone(), app.clone(), caller.connection().cloned());
        blocking(move || match plans.running(&id)? {
            Some(run) if !run.is_run_of(on.as_ref()) => Err(kinded(
                ErrorKind::Conflict,
                format!(
                    "plan {} began running on {id} from another connection while this waited; nothing was changed: nobody else changes {id} until its run ends",
                    run.id
                ),
            )),
            _ => Ok(()),
        })
        .await
    }

    /// A question of `caller` went unanswered: every run on its connection ends.
    pub(super) async fn unanswered(&self, caller: &Caller) {
        let Some(conn) = caller.connection().cloned() else { return };
        let plans = self.apps.plans().clone();
        let ended = blocking(move || plans.end_runs_on(&conn, "a question outside the run went unanswered")).await;
        match ended {
            Ok(ended) => {
                for p in ended {
                    tracing::info!(app = %p.app, "the run of plan {} ended: a question went unanswered", p.id);
                }
            }
            Err(e) => tracing::error!("cannot end a run: {e:#}"),
        }
    }
}

/// What `touches` names, each marked by whether the app has it now: routes
/// of the active release, tables of the store, files of the workspace.
fn touches(apps: &crate::apps::Apps, app: &AppId, t: Option<&inputs::Touches>) -> anyhow::Result<Vec<Touch>> {
    let Some(t) = t else { return Ok(Vec::new()) };
    let paths = apps.root().app(app);
    let routes: Vec<String> = crate::release::active(&paths)
        .ok()
        .flatten()
        .and_then(|r| crate::release::manifest(&paths, &r).ok())
        .map(|m| m.routes.into_iter().map(|r| r.name).collect())
        .unwrap_or_default();
    let tables = crate::caps::store::tables_in(&paths.data()).unwrap_or_default();
    let ws = crate::workspace::of(&paths).ok().and_then(|d| super::source::Workspace::open(&d).ok());
    let mut out = Vec::new();
    for (key, kind, list) in
        [("routes", "route", &t.routes), ("tables", "table", &t.tables), ("files", "file", &t.files)]
    {
        for name in list {
            if name.is_empty() || name.len() > 1024 {
                return Err(kinded(ErrorKind::InvalidInput, format!("`touches.{key}` holds names (1 to 1024 bytes)")));
            }
            let exists = match kind {
                "route" => routes.iter().any(|r| r == name),
                "table" => tables.iter().any(|t| t == name),
                _ => ws.as_ref().is_some_and(|w| w.has(name)),
            };
            out.push(Touch { kind: kind.into(), name: crate::elsewhere::text::one_line(name), exists });
        }
    }
    Ok(out)
}
