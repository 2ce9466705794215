//! The engineer: the tools an AI agent uses to *change* apps (DESIGN.md, "The
//! engineer"), run inside the launcher and decided by the gate on channel
//! `ai`. The MCP server of `autoapp mcp --engineer` only forwards them over
//! the control connection; the channel is the control connection's, never
//! anything the agent sends.
//!
//! - `read` tools answer at once: `apps_list`, `source_list`, `source_read`,
//!   `source_search`, `candidate_explain`, `runs_read`, `logs_read`.
//! - `write` tools ask the person first (or are answered by the person's
//!   standing approval, [`crate::gate::standing`]): `source_edit`,
//!   `source_write`, `source_delete` (the question carries the change as a
//!   unified diff), `candidate_build` (confined, [`crate::build::By::Engineer`]),
//!   `candidate_preview`, `preview_stop`. `preview_call` is the route's own
//!   effect, in a preview (external refused there, as for everybody).
//! - `apps_create` is `external` and asks; a location is refused by name.
//!
//! Changes of one app (edits, builds, previews) run one at a time: each holds
//! the app's change lock from before its question to after its work, so the
//! diff the person approves is the change that is made. Every tool call about
//! an app is a row in that app's record. Nothing here activates, grants,
//! revokes, removes, rolls back or sets the standing approval: those are the
//! person's, and no tool names them.

pub mod cycle;
pub mod inputs;
pub mod plan;
pub mod source;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::apps::{Apps, Target};
use crate::error::{ErrorKind, kinded};
use crate::gate::record::Row;
use crate::gate::{Caller, Decision, Knock};
use crate::manifest::{AppId, Effect};
use crate::release::{self, short};

/// Told what a long step is doing (a build's lines, a wait for the person).
pub type Progress = tokio::sync::mpsc::UnboundedSender<String>;

/// One tool: its name, effect, what it does, and its input's JSON Schema.
pub struct Spec {
    pub name: &'static str,
    /// `None`: the effect of the route it calls (`preview_call`).
    pub effect: Option<Effect>,
    pub description: &'static str,
    pub input: Value,
}

/// The engineer's tools (DESIGN.md's table), in the order a client shows
/// them: the app tools, then plans and runs ([`plan::specs`]). Made once:
/// every call looks its tool up here.
pub fn tools() -> &'static [Spec] {
    static TOOLS: std::sync::LazyLock<Vec<Spec>> = std::sync::LazyLock::new(|| {
        let mut all = app_tools();
        all.push(cycle::spec());
        all.extend(plan::specs());
        all
    });
    &TOOLS
}

fn app_tools() -> Vec<Spec> {
    use Effect::{External, Read, Write};
    use inputs::schema;
    vec![
        Spec {
            name: "apps_list",
            effect: Some(Read),
            description: "The apps: id, name, active release, candidates and running previews.",
            input: schema::<inputs::Nothing>(),
        },
        Spec {
            name: "source_list",
            effect: Some(Read),
            description: "The files of an app's workspace (never .git/ or target/; symlinks listed, not followed).",
            input: schema::<inputs::SourceList>(),
        },
        Spec {
            name: "source_read",
            effect: Some(Read),
            description: "A text file of the workspace, at most 256 KiB per page; `nextOffset` says where the next page starts.",
            input: schema::<inputs::SourceRead>(),
        },
        Spec {
            name: "source_search",
            effect: Some(Read),
            description: "Lines of the workspace's files that match a regular expression (at most 200 matches).",
            input: schema::<inputs::SourceSearch>(),
        },
        Spec {
            name: "source_edit",
            effect: Some(Write),
            description: "Replace one span of a file with new text. The span must occur exactly once. The person approves the change (shown as a diff) first.",
            input: schema::<inputs::SourceEdit>(),
        },
        Spec {
            name: "source_write",
            effect: Some(Write),
            description: "Write a whole file (made or replaced; at most 1 MiB). The person approves the change (shown as a diff) first.",
            input: schema::<inputs::SourceWrite>(),
        },
        Spec {
            name: "source_delete",
            effect: Some(Write),
            description: "Delete one file of the workspace. The person approves it (shown as a diff) first.",
            input: schema::<inputs::SourceDelete>(),
        },
        Spec {
            name: "candidate_build",
            effect: Some(Write),
            description: "Build the workspace into a candidate release (confined: no network, writes only its target folder). The compiler's messages are the answer when it fails. The person approves the build first; it never activates anything.",
            input: schema::<inputs::AppOnly>(),
        },
        Spec {
            name: "candidate_explain",
            effect: Some(Read),
            description: "What a release asks for (routes, effects, capabilities, workflows) and how it differs from the active release.",
            input: schema::<inputs::Release>(),
        },
        Spec {
            name: "candidate_preview",
            effect: Some(Write),
            description: "Start a preview of a candidate on a copy of the app's data (the person approves it first). Call its routes with preview_call.",
            input: schema::<inputs::Release>(),
        },
        Spec {
            name: "preview_stop",
            effect: Some(Write),
            description: "Stop the app's previews (or the one named) and remove their copies of the data.",
            input: schema::<inputs::PreviewStop>(),
        },
        Spec {
            name: "preview_call",
            effect: None,
            description: "Call a route of a running preview (on its copy of the data). A write asks the person; an external route is refused in a preview.",
            input: schema::<inputs::PreviewCall>(),
        },
        Spec {
            name: "runs_read",
            effect: Some(Read),
            description: "The app's record: recent calls and actions with their channel, decision, who answered, and outcome.",
            input: schema::<inputs::RunsRead>(),
        },
        Spec {
            name: "logs_read",
            effect: Some(Read),
            description: "The app's newest log lines (secrets filtered), newest last, from its log file (kept across restarts).",
            input: schema::<inputs::LogsRead>(),
        },
        Spec {
            name: "apps_create",
            effect: Some(External),
            description: "Create a new app from the starter template, in the default place. The person approves it first. Where it lives is the person's choice, never a tool's: no location is accepted.",
            input: schema::<inputs::AppsCreate>(),
        },
    ]
}

/// The engineer's side of the launcher: the tools over the running [`Apps`].
pub struct Engineer {
    apps: Arc<Apps>,
    /// One change of an app at a time.
    locks: Mutex<HashMap<AppId, Arc<tokio::sync::Mutex<()>>>>,
    /// Told when an app's plans changed (the panel redraws them).
    changed: Box<dyn Fn(&AppId) + Send + Sync>,
}

/// A tool's answer: text for the agent, and the same as JSON when it is data.
pub type Answer = Value;

/// The fields a location could hide in; `apps_create` refuses each by name.
const LOCATION_FIELDS: &[&str] = &["location", "at", "path", "dir", "folder", "workspace", "where"];

impl Engineer {
    /// The engineer over `apps`, telling `changed` when an app's plans changed.
    pub fn new(apps: Arc<Apps>, changed: impl Fn(&AppId) + Send + Sync + 'static) -> Engineer {
        Engineer { apps, locks: Mutex::default(), changed: Box::new(changed) }
    }

    fn lock_of(&self, app: &AppId) -> Arc<tokio::sync::Mutex<()>> {
        self.locks.lock().expect("engineer locks").entry(app.clone()).or_default().clone()
    }

    /// Runs `tool` with `arguments` for `caller` (the adapter's: channel
    /// `ai`). `gone` is set by the adapter the moment its caller goes away:
    /// an approved change is then not made, a build is stopped. Errors carry
    /// their kind ([`crate::error::kind_of`]).
    pub async fn call(
        &self,
        caller: &Caller,
        tool: &str,
        arguments: Value,
        progress: &Progress,
        gone: &crate::build::Stop,
    ) -> anyhow::Result<Answer> {
        let specs = tools();
        let Some(spec) = specs.iter().find(|s| s.name == tool) else {
            let names: Vec<&str> = specs.iter().map(|s| s.name).collect();
            return Err(kinded(
                ErrorKind::NotFound,
                format!("`{}` is not a tool of the engineer; the tools are {}", tool.escape_debug(), names.join(", ")),
            ));
        };
        let Value::Object(args) = arguments else {
            return Err(kinded(ErrorKind::InvalidInput, "a tool's arguments are one JSON object"));
        };
        check_fields(spec, &args)?;
        if tool.starts_with("plan_") {
            return self.plan_tool(caller, spec, Value::Object(args), progress).await;
        }
        if tool == "apps_list" {
            return self.apps_list().await;
        }
        let args = Value::Object(args);
        check_input(tool, &args)?;
        // Every tool but apps_list names its app (checked above).
        let named: inputs::Named = inputs::parse(tool, &args)?;
        let app = AppId::parse(&named.app).map_err(|e| kinded(ErrorKind::InvalidInput, e))?;
        if tool == "apps_create" {
            return self.apps_create(caller, spec, &app, &args, progress).await;
        }
        let paths = self.apps.root().app(&app);
        if !paths.exists() {
            return Err(kinded(ErrorKind::NotFound, crate::error::no_such_app(&app)));
        }
        // A change waits for a plan the person has not read, and is the run's
        // alone while a run works on the app.
        let checked;
        let caller = if plan::CHANGES.contains(&tool) {
            checked = match self.plan_check(caller, &app).await {
                Ok(c) => c,
                Err(e) => {
                    // Refused before anyone is asked: a row with its reason.
                    let release = if tool == "preview_call" { "preview" } else { "workspace" };
                    self.refused(caller, spec, &app, release, &args, &e).await;
                    return Err(e);
                }
            };
            &checked
        } else {
            caller
        };
        match tool {
            "source_list" | "source_read" | "source_search" => self.source_read_tool(caller, spec, &app, &args).await,
            "source_edit" | "source_write" | "source_delete" => {
                self.source_change(caller, spec, &app, &args, progress, gone).await
            }
            "candidate_build" => self.candidate_build(caller, spec, &app, &args, progress, gone).await,
            "candidate_cycle" => self.candidate_cycle(caller, &app, &args, progress, gone).await,
            "candidate_explain" => self.candidate_explain(caller, &app, &args).await,
            "candidate_preview" => self.candidate_preview(caller, spec, &app, &args, progress).await,
            "preview_stop" => self.preview_stop(caller, spec, &app, &args, progress).await,
            "preview_call" => self.preview_call(caller, &app, &args).await,
            "runs_read" => self.runs_read(caller, &app, &args).await,
            "logs_read" => self.logs_read(caller, &app, &args).await,
            _ => unreachable!("every tool of the list is handled"),
        }
    }

    /// Asks the gate about `spec` (the person, or their standing approval)
    /// and records the decision; `Ok` when the tool may run.
    #[allow(clippy::too_many_arguments)]
    async fn ask(
        &self,
        caller: &Caller,
        spec: &Spec,
        app: &AppId,
        release: &str,
        args: &Value,
        change: Option<&str>,
        progress: &Progress,
    ) -> anyhow::Result<crate::gate::Pass> {
        let effect = spec.effect.unwrap_or(Effect::Write);
        let knock = Knock {
            caller,
            app,
            release,
            route: spec.name,
            effect,
            preview: false,
            input: args,
            approved_for: None,
            tool: true,
            change,
            keys: &[],
        };
        let minutes = self.apps.gate().window().as_secs().div_ceil(60);
        let _ = progress.send(format!(
            "{} of {app} waits for the person's answer in the panel or the app's tab (at most {minutes} minutes)",
            spec.name
        ));
        match self.apps.gate().guard(knock).await {
            Ok(pass) => {
                // The answer may have come while another agent's run began on
                // the app: whoever approved it, the change is not made then.
                if let Err(e) = self.still_free(caller, app).await {
                    let row = Row {
                        request_id: pass.request_id().to_string(),
                        arguments_hash: pass.arguments_hash().to_string(),
                        decision: Decision::Refused.as_str().to_string(),
                        reason: format!("{e:#}"),
                        outcome: "not-run".into(),
                        answered_by: pass.answered_by().to_string(),
                        ..Row::of(caller, app, release, spec.name, effect.as_str())
                    };
                    self.record(app, effect, row).await;
                    return Err(e);
                }
                Ok(pass)
            }
            Err(refusal) => {
                let row = Row {
                    request_id: refusal.request_id.clone(),
                    arguments_hash: refusal.arguments_hash.clone(),
                    decision: refusal.decision.as_str().to_string(),
                    reason: refusal.reason.clone(),
                    outcome: "not-run".into(),
                    answered_by: refusal.answered_by.to_string(),
                    ..Row::of(caller, app, release, spec.name, effect.as_str())
                };
                self.record(app, effect, row).await;
                if refusal.decision == Decision::Denied && refusal.answered_by == crate::gate::AnsweredBy::Nobody {
                    // Unanswered: a run of this connection ends with it.
                    self.unanswered(caller).await;
                }
                Err(kinded(ErrorKind::Denied, refusal.reason))
            }
        }
    }

    /// Records a tool refused before anyone was asked, with its reason.
    async fn refused(&self, caller: &Caller, spec: &Spec, app: &AppId, release: &str, args: &Value, e: &anyhow::Error) {
        let effect = spec.effect.unwrap_or(Effect::Write);
        let row = Row {
            arguments_hash: crate::gate::arguments_hash(args),
            decision: Decision::Refused.as_str().to_string(),
            reason: crate::sanitize::secrets(&format!("{e:#}")).chars().take(300).collect(),
            outcome: "not-run".into(),
            ..Row::of(caller, app, release, spec.name, effect.as_str())
        };
        self.record(app, effect, row).await;
    }

    /// Records a tool's row in the app's record (durable for writes).
    async fn record(&self, app: &AppId, effect: Effect, row: Row) {
        let paths = self.apps.root().app(app);
        if !paths.exists() {
            // `apps_create` of an app not made: no folder is made for a name.
            tracing::info!(%app, "{} on channel ai: {} ({})", row.route, row.decision, row.reason);
            return;
        }
        let data = paths.data();
        if let Err(e) = self.apps.record(&data, effect, row).await {
            tracing::error!(%app, "cannot record an engineer's tool call: {e:#}");
        }
    }

    /// Records how a tool that ran fared.
    #[allow(clippy::too_many_arguments)]
    async fn ran<T>(
        &self,
        caller: &Caller,
        spec: &Spec,
        app: &AppId,
        release: &str,
        pass: Option<&crate::gate::Pass>,
        args: &Value,
        result: &anyhow::Result<T>,
    ) {
        let effect = spec.effect.unwrap_or(Effect::Write);
        let row = outcome_row(caller, spec, app, release, pass, args, result);
        self.record(app, effect, row).await;
    }

    /// A guard for an approved tool's work: if the call is dropped before
    /// [`Unfinished::done`] (its caller went away, the launcher stops), it sets
    /// the returned [`crate::build::Stop`] (`gone`, the caller's) and records
    /// that the work was stopped.
    #[allow(clippy::too_many_arguments)]
    fn unfinished(
        &self,
        caller: &Caller,
        spec: &Spec,
        app: &AppId,
        release: &str,
        pass: &crate::gate::Pass,
        args: &Value,
        gone: &crate::build::Stop,
    ) -> (Unfinished, crate::build::Stop) {
        let stopped: anyhow::Result<()> =
            Err(anyhow::anyhow!("stopped: its caller went away before it finished; nothing of it was kept"));
        let row = outcome_row(caller, spec, app, release, Some(pass), args, &stopped);
        let stop = gone.clone();
        let guard = Unfinished {
            apps: self.apps.clone(),
            app: app.clone(),
            effect: spec.effect.unwrap_or(Effect::Write),
            row: Some(row),
            stop: stop.clone(),
        };
        (guard, stop)
    }

    fn workspace(&self, app: &AppId) -> anyhow::Result<source::Workspace> {
        self.has_source(app)?;
        let dir = crate::workspace::of(&self.apps.root().app(app))?;
        source::Workspace::open(&dir)
    }

    /// Refuses, before anyone is asked, an app installed from a package
    /// without a workspace: there is no source to read, change or build.
    fn has_source(&self, app: &AppId) -> anyhow::Result<()> {
        if crate::build::installed_without_workspace(&self.apps.root().app(app)) {
            return Err(kinded(
                ErrorKind::NotFound,
                format!(
                    "{app} was installed from a package and has no workspace: its source is with its publisher, so it cannot be read, changed or built here. What its releases ask for is in candidate_explain; a person who gets its source puts it in its workspace (`autoapp build {app}` says where)"
                ),
            ));
        }
        Ok(())
    }

    async fn apps_list(&self) -> anyhow::Result<Answer> {
        let apps = self.apps.clone();
        blocking(move || {
            let root = apps.root();
            let mut list = Vec::new();
            for crate::housekeeping::list::Seen { id, paths, active, all, name } in
                crate::housekeeping::list::each(root)?
            {
                let candidates: Vec<Value> = all
                    .iter()
                    .rev()
                    .filter(|r| Some(&r.id) != active.as_ref())
                    .map(|r| json!({ "release": r.id, "version": r.version, "builtAt": r.created_at }))
                    .collect();
                let previews: Vec<String> =
                    crate::lifecycle::previews(&paths).unwrap_or_default().into_iter().map(|p| p.release).collect();
                list.push(json!({
                    "app": id, "name": name, "active": active,
                    "candidates": candidates, "previews": previews,
                    "source": crate::packages::source_of(&paths, &all, active.as_ref()),
                }));
            }
            Ok(json!({ "apps": list }))
        })
        .await
    }

    async fn source_read_tool(
        &self,
        caller: &Caller,
        spec: &Spec,
        app: &AppId,
        args: &Value,
    ) -> anyhow::Result<Answer> {
        let ws = self.workspace(app)?;
        let tool = spec.name;
        let a = args.clone();
        let result = blocking(move || {
            Ok(match tool {
                "source_list" => {
                    let i: inputs::SourceList = inputs::parse(tool, &a)?;
                    let (entries, truncated) = ws.list(i.under.as_deref().unwrap_or(""))?;
                    json!({ "files": entries, "truncated": truncated })
                }
                "source_read" => {
                    let i: inputs::SourceRead = inputs::parse(tool, &a)?;
                    let p = ws.read(&i.path, i.offset.unwrap_or(0))?;
                    json!({ "path": p.path, "bytes": p.bytes, "offset": p.offset, "nextOffset": p.next_offset, "text": p.text })
                }
                _ => {
                    let i: inputs::SourceSearch = inputs::parse(tool, &a)?;
                    let (matches, more) = ws.search(&i.pattern, i.under.as_deref().unwrap_or(""))?;
                    json!({ "matches": matches, "more": more })
                }
            })
        })
        .await;
        self.ran(caller, spec, app, "workspace", None, args, &result).await;
        result
    }

    async fn source_change(
        &self,
        caller: &Caller,
        spec: &Spec,
        app: &AppId,
        args: &Value,
        progress: &Progress,
        gone: &crate::build::Stop,
    ) -> anyhow::Result<Answer> {
        let lock = self.lock_of(app);
        let _one_at_a_time = lock.lock().await;
        let ws = self.workspace(app)?;
        let (tool, a) = (spec.name, args.clone());
        let change = blocking(move || match tool {
            "source_edit" => {
                let i: inputs::SourceEdit = inputs::parse_step(tool, &a)?;
                ws.edit(&i.path, &i.old, &i.new)
            }
            "source_write" => {
                let i: inputs::SourceWrite = inputs::parse_step(tool, &a)?;
                ws.write(&i.path, &i.content)
            }
            _ => {
                let i: inputs::SourceDelete = inputs::parse_step(tool, &a)?;
                ws.delete(&i.path)
            }
        })
        .await;
        let change = match change {
            Ok(c) => c,
            Err(e) => {
                let failed: anyhow::Result<()> = Err(anyhow::anyhow!("{e:#}"));
                self.ran(caller, spec, app, "workspace", None, args, &failed).await;
                return Err(e);
            }
        };
        // A change too long to show whole is refused before anyone is asked.
        let diff = match change.shown() {
            Ok(d) => d,
            Err(e) => {
                let failed: anyhow::Result<()> = Err(anyhow::anyhow!("{e:#}"));
                self.ran(caller, spec, app, "workspace", None, args, &failed).await;
                return Err(e);
            }
        };
        let pass = self.ask(caller, spec, app, "workspace", args, Some(&diff), progress).await?;
        // A change whose caller went away while it waited is not made.
        let (unfinished, gone) = self.unfinished(caller, spec, app, "workspace", &pass, args, gone);
        let c = change.clone();
        let result = blocking(move || {
            if gone.is_set() {
                anyhow::bail!("its caller went away; nothing was written");
            }
            c.apply().map(|()| c.summary())
        })
        .await;
        unfinished.done();
        self.ran(caller, spec, app, "workspace", Some(&pass), args, &result).await;
        let summary = result?;
        Ok(json!({ "message": summary, "diff": diff, "answeredBy": pass.answered_by().to_string() }))
    }

    async fn candidate_build(
        &self,
        caller: &Caller,
        spec: &Spec,
        app: &AppId,
        args: &Value,
        progress: &Progress,
        gone: &crate::build::Stop,
    ) -> anyhow::Result<Answer> {
        self.has_source(app)?;
        let lock = self.lock_of(app);
        let _one_at_a_time = lock.lock().await;
        let pass = self.ask(caller, spec, app, "workspace", args, None, progress).await?;
        let _ = progress.send(format!("building {app}"));
        // If this call is dropped (its caller went away, the launcher stops),
        // the build is stopped with everything it started, and recorded so.
        let (unfinished, stop) = self.unfinished(caller, spec, app, "workspace", &pass, args, gone);
        let (apps, id, tx) = (self.apps.clone(), app.clone(), progress.clone());
        let result = blocking(move || {
            let report = |line: &str| {
                let _ = tx.send(line.to_string());
            };
            let from = crate::build::Source::Cargo {
                target_dir: None,
                by: crate::build::By::Engineer,
                also_read: &[],
                stop: &stop,
            };
            crate::build::build(apps.root(), apps.runtime(), &id, from, &report).map_err(|e| match e {
                crate::build::BuildError::Compile(messages) => kinded(
                    ErrorKind::InvalidInput,
                    format!(
                        "the build failed; nothing changed (the previous candidates are as they were). The compiler said:\n{}",
                        compiler_messages(&messages)
                    ),
                ),
                crate::build::BuildError::Other(e) => e,
                e => kinded(ErrorKind::InvalidInput, e.to_string()),
            })
        })
        .await;
        unfinished.done();
        self.ran(caller, spec, app, "workspace", Some(&pass), args, &result).await;
        let built = result?;
        let said =
            if built.new { "built a new candidate" } else { "the workspace builds to a candidate that exists already" };
        Ok(json!({
            "message": format!("{said}: release {} of {app} (version {}); try it with candidate_preview, and the person activates it in the panel", short(&built.info.id), built.info.version),
            "release": built.info.id, "new": built.new, "version": built.info.version,
        }))
    }

    async fn candidate_explain(&self, caller: &Caller, app: &AppId, args: &Value) -> anyhow::Result<Answer> {
        let which = inputs::parse::<inputs::Release>("candidate_explain", args)?.release;
        let (apps, id) = (self.apps.clone(), app.clone());
        let result = blocking(move || {
            let paths = apps.root().app(&id);
            let release = newest_candidate(&paths, &id, which.as_deref())?;
            let e = crate::explain::explain(&paths, &release)?;
            Ok(json!({ "release": release, "text": crate::explain::render(&e), "explanation": e }))
        })
        .await;
        let spec = Spec { name: "candidate_explain", effect: Some(Effect::Read), description: "", input: json!({}) };
        self.ran(caller, &spec, app, "", None, args, &result).await;
        result
    }

    async fn candidate_preview(
        &self,
        caller: &Caller,
        spec: &Spec,
        app: &AppId,
        args: &Value,
        progress: &Progress,
    ) -> anyhow::Result<Answer> {
        let lock = self.lock_of(app);
        let _one_at_a_time = lock.lock().await;
        let which = inputs::parse_step::<inputs::Release>(spec.name, args)?.release;
        let (apps, id) = (self.apps.clone(), app.clone());
        let release = blocking(move || newest_candidate(&apps.root().app(&id), &id, which.as_deref())).await?;
        let pass = self.ask(caller, spec, app, &release, args, None, progress).await?;
        let (apps, id, c, r) = (self.apps.clone(), app.clone(), caller.clone(), release.clone());
        let result = blocking(move || apps.preview(&c, &id, Some(&r))).await;
        self.ran(caller, spec, app, &release, Some(&pass), args, &result).await;
        let (p, new) = result?;
        let said = if new { "started on a copy of the data" } else { "was running already" };
        Ok(json!({
            "message": format!("the preview of {app} release {} {said}; call its routes with preview_call (external routes are refused in a preview)", short(&p.release)),
            "release": p.release,
        }))
    }

    async fn preview_stop(
        &self,
        caller: &Caller,
        spec: &Spec,
        app: &AppId,
        args: &Value,
        progress: &Progress,
    ) -> anyhow::Result<Answer> {
        let lock = self.lock_of(app);
        let _one_at_a_time = lock.lock().await;
        let which = inputs::parse::<inputs::PreviewStop>(spec.name, args)?.release;
        let paths = self.apps.root().app(app);
        let running = crate::lifecycle::previews(&paths)?;
        let named: Vec<&crate::lifecycle::Preview> = running
            .iter()
            .filter(|p| which.as_deref().is_none_or(|w| p.release.starts_with(&w.to_ascii_lowercase())))
            .collect();
        if named.is_empty() {
            let which =
                which.map(|w| format!(" of a release starting with `{}`", w.escape_debug())).unwrap_or_default();
            return Err(kinded(ErrorKind::NotFound, format!("{app} has no preview{which} to stop")));
        }
        let release = named[0].release.clone();
        let pass = self.ask(caller, spec, app, &release, args, None, progress).await?;
        let (apps, id, c) = (self.apps.clone(), app.clone(), caller.clone());
        let result = blocking(move || apps.preview_stop(&c, &id, which.as_deref())).await;
        self.ran(caller, spec, app, &release, Some(&pass), args, &result).await;
        let stopped = result?;
        let list: Vec<&str> = stopped.iter().map(|r| short(r)).collect();
        Ok(
            json!({ "message": format!("stopped the preview of {} and removed its copy of the data", list.join(", ")), "stopped": stopped }),
        )
    }

    async fn preview_call(&self, caller: &Caller, app: &AppId, args: &Value) -> anyhow::Result<Answer> {
        let i: inputs::PreviewCall = inputs::parse("preview_call", args)?;
        let route = i.route.as_str();
        let input = Value::Object(i.input.unwrap_or_default());
        let target = Target::Preview(i.release);
        // The call is the route's: the gate decides it on channel ai, in the
        // preview, and records it in the preview's own record.
        let answer = self
            .apps
            .call_at(caller, app, &target, route, &input.to_string())
            .await
            .map_err(|e| kinded(e.kind, e.message))?;
        Ok(json!({ "output": answer.output, "release": answer.release, "effect": answer.effect }))
    }

    async fn runs_read(&self, caller: &Caller, app: &AppId, args: &Value) -> anyhow::Result<Answer> {
        let limit = inputs::parse::<inputs::RunsRead>("runs_read", args)?.limit.unwrap_or(50).clamp(1, 200) as usize;
        let data = self.apps.root().app(app).data();
        let result = blocking(move || crate::gate::record::read(&data, limit)).await;
        let spec = Spec { name: "runs_read", effect: Some(Effect::Read), description: "", input: json!({}) };
        self.ran(caller, &spec, app, "", None, args, &result).await;
        Ok(json!({ "rows": result? }))
    }

    async fn logs_read(&self, caller: &Caller, app: &AppId, args: &Value) -> anyhow::Result<Answer> {
        let limit = inputs::parse::<inputs::LogsRead>("logs_read", args)?.limit.unwrap_or(100).clamp(1, 500) as usize;
        let dir = crate::applog::dir_of(&self.apps.root().app(app).dir);
        let result = blocking(move || crate::applog::read(&dir, None, limit)).await;
        let spec = Spec { name: "logs_read", effect: Some(Effect::Read), description: "", input: json!({}) };
        self.ran(caller, &spec, app, "", None, args, &result).await;
        let lines: Vec<String> = result?.iter().map(crate::applog::Line::text).collect();
        Ok(
            json!({ "lines": lines, "note": "the app's log file (kept across restarts, about 2 MiB at most), newest last" }),
        )
    }

    async fn apps_create(
        &self,
        caller: &Caller,
        spec: &Spec,
        app: &AppId,
        args: &Value,
        progress: &Progress,
    ) -> anyhow::Result<Answer> {
        if self.apps.root().app(app).exists() {
            return Err(kinded(ErrorKind::Conflict, format!("there is an app {app} already; choose another id")));
        }
        // Nobody attached to the new app's tab: the panel answers.
        let pass = self.ask(caller, spec, app, "", args, None, progress).await?;
        let (apps, id, c) = (self.apps.clone(), app.clone(), caller.clone());
        let created = blocking(move || crate::template::create(&c, apps.root(), &id, None)).await;
        self.ran(caller, spec, app, "", Some(&pass), args, &created).await;
        created?;
        Ok(json!({
            "message": format!("created {app} from the starter template. Read it with source_list, change it, then candidate_build (which fetches its dependencies)"),
            "app": app,
        }))
    }
}

/// The record row of a tool that ran (or was refused after it was asked).
fn outcome_row<T>(
    caller: &Caller,
    spec: &Spec,
    app: &AppId,
    release: &str,
    pass: Option<&crate::gate::Pass>,
    args: &Value,
    result: &anyhow::Result<T>,
) -> Row {
    let effect = spec.effect.unwrap_or(Effect::Write);
    let (outcome, reason) = match result {
        Ok(_) => ("ok", String::new()),
        Err(e) => ("error", crate::sanitize::secrets(&format!("{e:#}")).chars().take(300).collect()),
    };
    Row {
        request_id: pass.map(|p| p.request_id().to_string()).unwrap_or_default(),
        arguments_hash: pass
            .map(|p| p.arguments_hash().to_string())
            .unwrap_or_else(|| crate::gate::arguments_hash(args)),
        decision: pass.map(|p| p.decision()).unwrap_or(Decision::Allowed).as_str().to_string(),
        answered_by: pass.map(|p| p.answered_by()).unwrap_or(crate::gate::AnsweredBy::Nobody).to_string(),
        reason,
        outcome: outcome.into(),
        ..Row::of(caller, app, release, spec.name, effect.as_str())
    }
}

/// An approved tool's work in progress (see [`Engineer::unfinished`]).
struct Unfinished {
    apps: Arc<Apps>,
    app: AppId,
    effect: Effect,
    row: Option<Row>,
    stop: crate::build::Stop,
}

impl Unfinished {
    /// The work finished (well or not): nothing to stop, nothing to record here.
    fn done(mut self) {
        self.row = None;
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        let Some(row) = self.row.take() else { return };
        self.stop.set();
        let (apps, data, effect) = (self.apps.clone(), self.apps.root().app(&self.app).data(), self.effect);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = apps.record(&data, effect, row).await {
                    tracing::error!("cannot record a stopped tool call: {e:#}");
                }
            });
        }
    }
}

/// Refuses an argument the tool does not take, naming it (a location for
/// `apps_create` by what it is), and a missing required one.
/// Checks `args` against the tool's input type (serde: types, required
/// fields, nothing unknown), before anything runs.
fn check_input(tool: &str, args: &Value) -> anyhow::Result<()> {
    use inputs::parse;
    match tool {
        "source_list" => parse::<inputs::SourceList>(tool, args).map(drop),
        "source_read" => parse::<inputs::SourceRead>(tool, args).map(drop),
        "source_search" => parse::<inputs::SourceSearch>(tool, args).map(drop),
        "source_edit" => parse::<inputs::SourceEdit>(tool, args).map(drop),
        "source_write" => parse::<inputs::SourceWrite>(tool, args).map(drop),
        "source_delete" => parse::<inputs::SourceDelete>(tool, args).map(drop),
        "candidate_build" => parse::<inputs::AppOnly>(tool, args).map(drop),
        "candidate_explain" | "candidate_preview" => parse::<inputs::Release>(tool, args).map(drop),
        "candidate_cycle" => parse::<inputs::CandidateCycle>(tool, args).map(drop),
        "preview_stop" => parse::<inputs::PreviewStop>(tool, args).map(drop),
        "preview_call" => parse::<inputs::PreviewCall>(tool, args).map(drop),
        "runs_read" => parse::<inputs::RunsRead>(tool, args).map(drop),
        "logs_read" => parse::<inputs::LogsRead>(tool, args).map(drop),
        "apps_create" => parse::<inputs::AppsCreate>(tool, args).map(drop),
        _ => Ok(()),
    }
}

fn check_fields(spec: &Spec, args: &serde_json::Map<String, Value>) -> anyhow::Result<()> {
    let known = spec.input["properties"].as_object().cloned().unwrap_or_default();
    for k in args.keys() {
        if known.contains_key(k) {
            continue;
        }
        if spec.name == "apps_create" && LOCATION_FIELDS.contains(&k.to_ascii_lowercase().as_str()) {
            return Err(kinded(
                ErrorKind::InvalidInput,
                format!(
                    "apps_create takes no `{}`: where an app's workspace lives is the person's choice, never a tool's; it is made in the default place",
                    k.escape_debug()
                ),
            ));
        }
        let names: Vec<&String> = known.keys().collect();
        return Err(kinded(
            ErrorKind::InvalidInput,
            format!(
                "{} takes no `{}`; its arguments are {}",
                spec.name,
                k.escape_debug(),
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ")
                }
            ),
        ));
    }
    for r in spec.input["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        if !args.contains_key(r) {
            return Err(kinded(ErrorKind::InvalidInput, format!("{} needs `{r}`", spec.name)));
        }
    }
    Ok(())
}

/// The release `which` names, or the newest candidate.
fn newest_candidate(paths: &crate::root::AppPaths, app: &AppId, which: Option<&str>) -> anyhow::Result<String> {
    match which {
        Some(p) => release::resolve(paths, p).map_err(|e| kinded(ErrorKind::NotFound, format!("{e:#}"))),
        None => {
            let active = release::active(paths)?;
            release::list(paths)?.into_iter().rev().find(|r| Some(&r.id) != active.as_ref()).map(|r| r.id).ok_or_else(
                || kinded(ErrorKind::NotFound, format!("{app} has no candidate; build one with candidate_build")),
            )
        }
    }
}

/// The compiler's messages, without cargo's progress lines.
fn compiler_messages(messages: &str) -> String {
    let kept: Vec<&str> = messages
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !(t.starts_with("Compiling ")
                || t.starts_with("Checking ")
                || t.starts_with("Fresh ")
                || t.starts_with("Downloaded ")
                || t.starts_with("Blocking "))
        })
        .collect();
    kept.join("\n")
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> anyhow::Result<T> + Send + 'static) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| anyhow::anyhow!("the tool stopped: {e}"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_are_the_table_of_the_design_and_nothing_more() {
        let names: Vec<&str> = tools().iter().map(|t| t.name).collect();
        assert_eq!(
            names,
            [
                "apps_list",
                "source_list",
                "source_read",
                "source_search",
                "source_edit",
                "source_write",
                "source_delete",
                "candidate_build",
                "candidate_explain",
                "candidate_preview",
                "preview_stop",
                "preview_call",
                "runs_read",
                "logs_read",
                "apps_create",
                "candidate_cycle",
                "plan_open",
                "plan_task",
                "plan_submit",
                "plan_read",
                "plan_start",
                "plan_task_done",
                "plan_finish"
            ]
        );
        for never in [
            "activate", "rollback", "remove", "grant", "revoke", "standing", "panel", "quit", "backup", "restore",
            "prune",
        ] {
            assert!(!names.iter().any(|n| n.contains(never)), "{never} is never a tool");
        }
        for t in tools() {
            assert_eq!(t.input["additionalProperties"], false, "{}", t.name);
        }
    }

    #[test]
    fn apps_create_refuses_a_location_by_name_and_unknown_fields_are_named() {
        let specs = tools();
        let create = specs.iter().find(|s| s.name == "apps_create").unwrap();
        for field in ["location", "at", "path", "Workspace"] {
            let args = json!({ "app": "x", field: "/tmp/x" });
            let e = check_fields(create, args.as_object().unwrap()).unwrap_err();
            assert!(format!("{e}").contains("the person's choice"), "{e}");
            assert_eq!(crate::error::kind_of(&e), ErrorKind::InvalidInput);
        }
        let read = specs.iter().find(|s| s.name == "source_read").unwrap();
        let e =
            check_fields(read, json!({ "app": "x", "path": "a", "follow": true }).as_object().unwrap()).unwrap_err();
        assert!(format!("{e}").contains("takes no `follow`"), "{e}");
        let e = check_fields(read, json!({ "app": "x" }).as_object().unwrap()).unwrap_err();
        assert!(format!("{e}").contains("needs `path`"), "{e}");
    }
}
