//! Plans and runs: the step between answering every question and the
//! standing approval. An agent writes down what it means to do to one app (a
//! **plan**: its request, a summary, tasks, and what it says it touches);
//! drafting is a read, so nobody is asked. The person reads the submitted
//! plan and starts it, and starting it is agreeing to exactly one thing: until
//! the **run** ends, the engineer's edits, builds and previews **of that app,
//! from the run's own connection**, are answered yes without a card
//! ([`Plans`] is a [`StandIn`] of the gate, beside the standing approval).
//!
//! A run ends when its agent finishes it, the person stops it, its
//! connection closes, a question outside it goes unanswered, its time limit
//! passes or the launcher stops. While a run works on an app, nobody else
//! changes it: other connections' changes and the person's activation are
//! refused with conflict (the callers check [`Plans::running`]).
//!
//! Plans live in `<root>/plans.sqlite` and survive a restart; a run does not
//! (the launcher marks one it finds running as stopped by the restart). The
//! launcher and the command line share the file (`autoapp plan stop` from a
//! terminal ends a run the launcher serves: the stand-in reads the file at
//! every question). This module knows no MCP and no HTTP.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension as _, params};
use serde::Serialize;

use crate::error::{ErrorKind, kinded};
use crate::gate::{AnsweredBy, Caller, Channel, Knock, StandIn};
use crate::manifest::AppId;

/// The file's name in the root.
pub const FILE: &str = "plans.sqlite";

/// The engineer's tools a run answers for its app (besides the routes of a
/// preview of that app, which `preview_call` reaches): one closed list.
/// Never `apps_create`, never activation, never another app.
pub const RUN_TOOLS: &[&str] =
    &["source_edit", "source_write", "source_delete", "candidate_build", "candidate_preview", "preview_stop"];

/// Limits of what an agent may write into a plan.
pub const MAX_REQUEST: usize = 8 * 1024;
pub const MAX_SUMMARY: usize = 2 * 1024;
pub const MAX_TITLE: usize = 200;
pub const MAX_DETAIL: usize = 8 * 1024;
pub const MAX_TASKS: usize = 50;
pub const MAX_TOUCHES: usize = 100;
pub const MAX_OUTCOME: usize = 4 * 1024;

/// Where a plan is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Being written by the agent.
    Draft,
    /// Waiting for the person: start (through `plan_start`) or reject.
    Submitted,
    /// The person started it; its run works on the app.
    Running,
    /// The agent finished it (`plan_finish`).
    Finished,
    /// Its run was ended by anything but the agent's finish.
    Stopped,
    /// The person rejected it.
    Rejected,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Draft => "draft",
            State::Submitted => "submitted",
            State::Running => "running",
            State::Finished => "finished",
            State::Stopped => "stopped",
            State::Rejected => "rejected",
        }
    }

    fn parse(s: &str) -> State {
        match s {
            "draft" => State::Draft,
            "submitted" => State::Submitted,
            "running" => State::Running,
            "finished" => State::Finished,
            "rejected" => State::Rejected,
            _ => State::Stopped,
        }
    }
}

/// One task of a plan.
#[derive(Debug, Clone, Serialize)]
pub struct Task {
    pub n: u32,
    pub title: String,
    pub detail: String,
    pub done: bool,
    pub note: Option<String>,
}

/// Something a plan says it changes, and whether it exists now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Touch {
    /// `route`, `table` or `file`.
    pub kind: String,
    pub name: String,
    /// Whether the active release (routes, tables) or the workspace (files)
    /// has it: a plan that talks about what the app does not have is marked.
    pub exists: bool,
}

/// The agent a plan belongs to: the control connection (or MCP session) it
/// was written on, in the launcher of `pid`. Only its author adds to a plan,
/// submits it and starts it, so the person's yes goes to the agent whose plan
/// they read, never to another that asks to start it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Author {
    pub connection: u64,
    pub pid: u32,
}

/// A plan, as the tools, the panel and the command line show it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub id: u64,
    pub app: String,
    /// The agent's words: what it was asked to do.
    pub request: String,
    pub summary: String,
    pub state: State,
    /// The agent that wrote it (its client's name).
    pub client: String,
    pub created_at: String,
    pub submitted_at: Option<String>,
    pub started_at: Option<String>,
    /// When a running plan's time limit passes.
    pub ends_by: Option<String>,
    pub ended_at: Option<String>,
    /// What ended the run, or who rejected the plan.
    pub ended_by: Option<String>,
    /// What the agent said it did (`plan_finish`).
    pub outcome: Option<String>,
    pub tasks: Vec<Task>,
    pub touches: Vec<Touch>,
    #[serde(skip)]
    connection: Option<u64>,
    #[serde(skip)]
    author: Option<Author>,
}

impl Plan {
    /// Whether this is a run started on `connection`.
    pub fn is_run_of(&self, connection: Option<u64>) -> bool {
        self.state == State::Running && connection.is_some() && self.connection == connection
    }

    /// The first task not done yet: what the run is working on.
    pub fn current_task(&self) -> Option<u32> {
        self.tasks.iter().find(|t| !t.done).map(|t| t.n)
    }

    /// The plan as the person reads it on a card or a terminal.
    pub fn text(&self) -> String {
        let mut out = format!(
            "plan {} of {} ({}), by {}\nrequest (the agent's words): {}\nsummary: {}\n",
            self.id,
            self.app,
            self.state.as_str(),
            self.client,
            self.request,
            self.summary
        );
        for t in &self.tasks {
            let mark = if t.done { "x" } else { " " };
            out.push_str(&format!("  [{mark}] {}. {}", t.n, t.title));
            if !t.detail.is_empty() {
                out.push_str(&format!(" — {}", t.detail));
            }
            if let Some(note) = &t.note {
                out.push_str(&format!(" (done: {note})"));
            }
            out.push('\n');
        }
        if !self.touches.is_empty() {
            out.push_str("touches:\n");
            for t in &self.touches {
                let mark = if t.exists { "" } else { "  ← the app has no such thing now" };
                out.push_str(&format!("  {} {}{mark}\n", t.kind, t.name));
            }
        }
        if let Some(o) = &self.outcome {
            out.push_str(&format!("outcome: {o}\n"));
        }
        if let Some(by) = &self.ended_by {
            out.push_str(&format!("ended by: {by}\n"));
        }
        out
    }
}

/// The plans of one root, in `<root>/plans.sqlite` (opened at first use).
pub struct Plans {
    root: crate::root::Root,
    path: PathBuf,
    conn: Mutex<Option<Connection>>,
    /// A run's time limit (`run_limit_secs`).
    limit: Duration,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

fn rfc3339_ms(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// `text` without control characters other than newlines and tabs, checked
/// against `max` bytes.
fn words(field: &str, text: &str, max: usize) -> anyhow::Result<String> {
    if text.len() > max {
        return Err(kinded(ErrorKind::InvalidInput, format!("`{field}` may be at most {max} bytes")));
    }
    Ok(text.chars().filter(|c| !c.is_control() || matches!(c, '\n' | '\t')).collect())
}

fn not_found(plan: u64) -> anyhow::Error {
    kinded(ErrorKind::NotFound, format!("there is no plan {plan}; plan_read {{app}} lists an app's plans"))
}

impl Plans {
    /// The plans of `root`, with runs limited to `limit`.
    pub fn new(root: &crate::root::Root, limit: Duration) -> Plans {
        Plans { root: root.clone(), path: root.dir().join(FILE), conn: Mutex::new(None), limit }
    }

    /// A run's time limit.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// Writes the row of a plan's start or end (`name`) in its app's record,
    /// for `caller` (who did it; a run that ended by itself is its agent's).
    fn record(&self, plan: &Plan, caller: &Caller, name: &str, said: String) {
        let Ok(app) = AppId::parse(&plan.app) else { return };
        let paths = self.root.app(&app);
        let done: anyhow::Result<()> = Ok(());
        let args = serde_json::json!({ "plan": plan.id });
        if let Err(e) = crate::gate::record::recorded(&paths, caller, name, args, done, |()| (String::new(), said)) {
            tracing::error!(%app, "cannot record {name} of plan {}: {e:#}", plan.id);
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Connection) -> anyhow::Result<T>) -> anyhow::Result<T> {
        let mut guard = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            let conn = crate::sqlite::open(&self.path, crate::sqlite::read_write())
                .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", self.path.display()))?;
            conn.busy_timeout(Duration::from_secs(5))?;
            conn.execute_batch(
                "PRAGMA journal_mode = WAL;
                 PRAGMA synchronous = FULL;
                 CREATE TABLE IF NOT EXISTS plans (
                   id INTEGER PRIMARY KEY AUTOINCREMENT,
                   app TEXT NOT NULL, client TEXT NOT NULL,
                   request TEXT NOT NULL, summary TEXT NOT NULL, state TEXT NOT NULL,
                   created_ms INTEGER NOT NULL, submitted_ms INTEGER, started_ms INTEGER,
                   limit_ms INTEGER, ended_ms INTEGER, ended_by TEXT, outcome TEXT,
                   connection INTEGER, launcher_pid INTEGER, author_connection INTEGER, author_pid INTEGER);
                 CREATE UNIQUE INDEX IF NOT EXISTS one_run_per_app ON plans(app) WHERE state = 'running';
                 CREATE TABLE IF NOT EXISTS tasks (
                   plan INTEGER NOT NULL, n INTEGER NOT NULL, title TEXT NOT NULL, detail TEXT NOT NULL,
                   done INTEGER NOT NULL DEFAULT 0, note TEXT, PRIMARY KEY (plan, n));
                 CREATE TABLE IF NOT EXISTS touches (
                   plan INTEGER NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, found INTEGER NOT NULL);",
            )?;
            *guard = Some(conn);
        }
        f(guard.as_mut().expect("opened above"))
    }

    fn load(conn: &Connection, id: u64) -> anyhow::Result<Option<Plan>> {
        let row = conn
            .query_row(
                "SELECT id, app, client, request, summary, state, created_ms, submitted_ms, started_ms, limit_ms,
                        ended_ms, ended_by, outcome, connection, author_connection, author_pid FROM plans WHERE id = ?1",
                [id as i64],
                |r| {
                    let started: Option<i64> = r.get(8)?;
                    let limit: Option<i64> = r.get(9)?;
                    let state = State::parse(&r.get::<_, String>(5)?);
                    Ok(Plan {
                        id: r.get::<_, i64>(0)? as u64,
                        app: r.get(1)?,
                        client: r.get(2)?,
                        request: r.get(3)?,
                        summary: r.get(4)?,
                        state,
                        created_at: rfc3339_ms(r.get(6)?),
                        submitted_at: r.get::<_, Option<i64>>(7)?.map(rfc3339_ms),
                        started_at: started.map(rfc3339_ms),
                        ends_by: match (state, started, limit) {
                            (State::Running, Some(s), Some(l)) => Some(rfc3339_ms(s + l)),
                            _ => None,
                        },
                        ended_at: r.get::<_, Option<i64>>(10)?.map(rfc3339_ms),
                        ended_by: r.get(11)?,
                        outcome: r.get(12)?,
                        connection: r.get::<_, Option<i64>>(13)?.map(|c| c as u64),
                        author: match (r.get::<_, Option<i64>>(14)?, r.get::<_, Option<u32>>(15)?) {
                            (Some(c), Some(pid)) => Some(Author { connection: c as u64, pid }),
                            _ => None,
                        },
                        tasks: Vec::new(),
                        touches: Vec::new(),
                    })
                },
            )
            .optional()?;
        let Some(mut plan) = row else { return Ok(None) };
        let mut tasks = conn.prepare("SELECT n, title, detail, done, note FROM tasks WHERE plan = ?1 ORDER BY n")?;
        plan.tasks = tasks
            .query_map([id as i64], |r| {
                Ok(Task { n: r.get(0)?, title: r.get(1)?, detail: r.get(2)?, done: r.get(3)?, note: r.get(4)? })
            })?
            .collect::<Result<_, _>>()?;
        let mut touches = conn.prepare("SELECT kind, name, found FROM touches WHERE plan = ?1 ORDER BY rowid")?;
        plan.touches = touches
            .query_map([id as i64], |r| Ok(Touch { kind: r.get(0)?, name: r.get(1)?, exists: r.get(2)? }))?
            .collect::<Result<_, _>>()?;
        Ok(Some(plan))
    }

    /// Plan `id`.
    pub fn get(&self, id: u64) -> anyhow::Result<Plan> {
        self.with(|c| Self::load(c, id)?.ok_or_else(|| not_found(id)))
    }

    /// Plan `id`, which must be a plan of `app`.
    pub fn of_app(&self, app: &AppId, id: u64) -> anyhow::Result<Plan> {
        let plan = self.get(id)?;
        if plan.app != app.as_str() {
            return Err(kinded(
                ErrorKind::InvalidInput,
                format!(
                    "plan {id} is a plan of {}, not of {app}; name a plan of {app} (plan_read lists them)",
                    plan.app
                ),
            ));
        }
        Ok(plan)
    }

    /// The plans of `app`, newest first (a run past its time limit ended first).
    pub fn list(&self, app: &AppId) -> anyhow::Result<Vec<Plan>> {
        let _ = self.running(app)?;
        self.with(|c| {
            let ids: Vec<i64> = c
                .prepare("SELECT id FROM plans WHERE app = ?1 ORDER BY id DESC")?
                .query_map([app.as_str()], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            ids.into_iter().map(|id| Self::load(c, id as u64).map(|p| p.expect("listed"))).collect()
        })
    }

    /// A new draft plan of `app` by `client`.
    pub fn open(
        &self,
        app: &AppId,
        author: Author,
        client: &str,
        request: &str,
        summary: &str,
        touches: Vec<Touch>,
    ) -> anyhow::Result<Plan> {
        let request = words("request", request, MAX_REQUEST)?;
        let summary = words("summary", summary, MAX_SUMMARY)?;
        if request.trim().is_empty() {
            return Err(kinded(ErrorKind::InvalidInput, "`request` says what the agent was asked to do; it is empty"));
        }
        if touches.len() > MAX_TOUCHES {
            return Err(kinded(
                ErrorKind::InvalidInput,
                format!("a plan names at most {MAX_TOUCHES} things it touches"),
            ));
        }
        let id = self.with(|c| {
            let tx = c.transaction()?;
            tx.execute(
                "INSERT INTO plans (app, client, request, summary, state, created_ms, author_connection, author_pid)
                 VALUES (?1, ?2, ?3, ?4, 'draft', ?5, ?6, ?7)",
                params![app.as_str(), client, request, summary, now_ms(), author.connection as i64, author.pid],
            )?;
            let id = tx.last_insert_rowid();
            for t in &touches {
                tx.execute(
                    "INSERT INTO touches (plan, kind, name, found) VALUES (?1, ?2, ?3, ?4)",
                    params![id, t.kind, t.name, t.exists],
                )?;
            }
            tx.commit()?;
            Ok(id as u64)
        })?;
        self.get(id)
    }

    /// Refuses anyone but the plan's author.
    fn authored(plan: &Plan, by: Author) -> anyhow::Result<()> {
        if plan.author != Some(by) {
            return Err(kinded(
                ErrorKind::Conflict,
                format!(
                    "plan {} was written by another agent's connection (or before the launcher restarted); only the agent that wrote a plan adds to it, submits it and starts it: open a plan of your own with plan_open",
                    plan.id
                ),
            ));
        }
        Ok(())
    }

    /// Refuses a change to plan `plan` unless it is a draft.
    fn draft(plan: &Plan) -> anyhow::Result<()> {
        if plan.state != State::Draft {
            return Err(kinded(
                ErrorKind::Conflict,
                format!(
                    "plan {} is {}, no longer a draft: only a draft is written; open a new plan with plan_open",
                    plan.id,
                    plan.state.as_str()
                ),
            ));
        }
        Ok(())
    }

    /// Adds a task to draft plan `id`; returns the plan.
    pub fn add_task(&self, id: u64, by: Author, title: &str, detail: &str) -> anyhow::Result<Plan> {
        let title = words("title", title, MAX_TITLE)?;
        let detail = words("detail", detail, MAX_DETAIL)?;
        if title.trim().is_empty() {
            return Err(kinded(ErrorKind::InvalidInput, "a task needs a `title`"));
        }
        self.with(|c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let plan = Self::load(&tx, id)?.ok_or_else(|| not_found(id))?;
            Self::authored(&plan, by)?;
            Self::draft(&plan)?;
            if plan.tasks.len() >= MAX_TASKS {
                return Err(kinded(ErrorKind::InvalidInput, format!("a plan has at most {MAX_TASKS} tasks")));
            }
            let n = plan.tasks.len() as u32 + 1;
            tx.execute(
                "INSERT INTO tasks (plan, n, title, detail) VALUES (?1, ?2, ?3, ?4)",
                params![id as i64, n, title, detail],
            )?;
            tx.commit()?;
            Ok(())
        })?;
        self.get(id)
    }

    /// Submits draft plan `id` to the person. While it waits, the engineer's
    /// changes of its app are refused ([`Plans::waiting`]).
    pub fn submit(&self, id: u64, by: Author) -> anyhow::Result<Plan> {
        self.with(|c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let plan = Self::load(&tx, id)?.ok_or_else(|| not_found(id))?;
            Self::authored(&plan, by)?;
            Self::draft(&plan)?;
            if plan.tasks.is_empty() {
                return Err(kinded(
                    ErrorKind::InvalidInput,
                    format!("plan {id} has no task; add what you mean to do with plan_task, then submit"),
                ));
            }
            tx.execute(
                "UPDATE plans SET state = 'submitted', submitted_ms = ?2 WHERE id = ?1",
                params![id as i64, now_ms()],
            )?;
            tx.commit()?;
            Ok(())
        })?;
        self.get(id)
    }

    /// The submitted plan of `app` that waits for the person, if any.
    pub fn waiting(&self, app: &AppId) -> anyhow::Result<Option<Plan>> {
        let id: Option<i64> = self.with(|c| {
            Ok(c.query_row(
                "SELECT id FROM plans WHERE app = ?1 AND state = 'submitted' ORDER BY id LIMIT 1",
                [app.as_str()],
                |r| r.get(0),
            )
            .optional()?)
        })?;
        id.map(|id| self.get(id as u64)).transpose()
    }

    /// Starts submitted plan `id` for its author `by` (the run is bound to
    /// its connection): the person said yes to `plan_start`. (The tool's own
    /// row records the person's answer.)
    pub fn start(&self, id: u64, by: Author) -> anyhow::Result<Plan> {
        let limit = self.limit.as_millis() as i64;
        self.check_start(id, by)?;
        self.with(|c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            // Again inside the transaction: nothing changed it since.
            Self::startable(&tx, id, by)?;
            tx.execute(
                "UPDATE plans SET state = 'running', started_ms = ?2, limit_ms = ?3, connection = ?4, launcher_pid = ?5
                 WHERE id = ?1",
                params![id as i64, now_ms(), limit, by.connection as i64, by.pid],
            )?;
            tx.commit()?;
            Ok(())
        })?;
        self.get(id)
    }

    /// Plan `id`, when `by` may start it now (before the person is asked):
    /// its author's, submitted, and no other run on its app (a run past its
    /// time limit, or of a launcher that is gone, is ended first).
    pub fn check_start(&self, id: u64, by: Author) -> anyhow::Result<Plan> {
        let plan = self.get(id)?;
        if let Ok(app) = AppId::parse(&plan.app) {
            self.running(&app)?;
        }
        self.with(|c| Self::startable(c, id, by))
    }

    fn startable(conn: &Connection, id: u64, by: Author) -> anyhow::Result<Plan> {
        let plan = Self::load(conn, id)?.ok_or_else(|| not_found(id))?;
        Self::authored(&plan, by)?;
        if plan.state != State::Submitted {
            let what = match plan.state {
                State::Draft => "a draft: submit it with plan_submit first".to_string(),
                s => format!("{}; only a submitted plan starts", s.as_str()),
            };
            return Err(kinded(ErrorKind::Conflict, format!("plan {id} is {what}")));
        }
        let busy: Option<i64> = conn
            .query_row("SELECT id FROM plans WHERE app = ?1 AND state = 'running'", [&plan.app], |r| r.get(0))
            .optional()?;
        if let Some(other) = busy {
            return Err(kinded(
                ErrorKind::Conflict,
                format!("plan {other} is running on {} already; one run per app: wait for it to end", plan.app),
            ));
        }
        Ok(plan)
    }

    /// Ends running plan `id` (its state becomes `state`), saying what ended
    /// it. `None` when it was not running (ended already).
    fn end(
        &self,
        id: u64,
        state: State,
        by: &str,
        outcome: Option<&str>,
        caller: Option<&Caller>,
    ) -> anyhow::Result<Option<Plan>> {
        let changed = self.with(|c| {
            Ok(c.execute(
                "UPDATE plans SET state = ?2, ended_ms = ?3, ended_by = ?4, outcome = COALESCE(?5, outcome)
                 WHERE id = ?1 AND state = 'running'",
                params![id as i64, state.as_str(), now_ms(), by, outcome],
            )?)
        })?;
        if changed == 0 {
            return Ok(None);
        }
        let plan = self.get(id)?;
        let agent = Caller::ai(&plan.client);
        let name = if state == State::Finished { "plan-finish" } else { "plan-stop" };
        let said = format!("the run of plan {id} ended: {by}; every question goes to the person again");
        self.record(&plan, caller.unwrap_or(&agent), name, said);
        Ok(Some(plan))
    }

    /// The run working on `app`, if any. A run past its time limit, or of a
    /// launcher that is gone, is ended here first.
    pub fn running(&self, app: &AppId) -> anyhow::Result<Option<Plan>> {
        let row: Option<(i64, i64, i64, Option<i64>)> = self.with(|c| {
            Ok(c.query_row(
                "SELECT id, started_ms, limit_ms, launcher_pid FROM plans WHERE app = ?1 AND state = 'running'",
                [app.as_str()],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .optional()?)
        })?;
        let Some((id, started, limit, pid)) = row else { return Ok(None) };
        let id = id as u64;
        if now_ms() >= started + limit {
            self.end(id, State::Stopped, "its time limit (run_limit_secs)", None, None)?;
            return Ok(None);
        }
        if pid.is_some_and(|p| !std::path::Path::new(&format!("/proc/{p}")).exists()) {
            self.end(id, State::Stopped, "the launcher stopped", None, None)?;
            return Ok(None);
        }
        self.get(id).map(Some)
    }

    /// The run of `app` that `connection` started, if that is what works on it.
    pub fn run_of(&self, app: &AppId, connection: Option<u64>) -> anyhow::Result<Option<Plan>> {
        Ok(self.running(app)?.filter(|p| p.is_run_of(connection)))
    }

    /// The run control connection `connection` of launcher `pid` works in,
    /// if any.
    pub fn run_on(&self, connection: u64, pid: u32) -> anyhow::Result<Option<Plan>> {
        let id: Option<i64> = self.with(|c| {
            Ok(c.query_row(
                "SELECT id FROM plans WHERE state = 'running' AND connection = ?1 AND launcher_pid = ?2",
                params![connection as i64, pid],
                |r| r.get(0),
            )
            .optional()?)
        })?;
        id.map(|id| self.get(id as u64)).transpose()
    }

    /// Ends the run of control connection `connection` of launcher `pid`
    /// because of `by` (a question outside it went unanswered).
    pub fn end_run_on(&self, connection: u64, pid: u32, by: &str) -> anyhow::Result<Option<Plan>> {
        match self.run_on(connection, pid)? {
            Some(p) => self.end(p.id, State::Stopped, by, None, None),
            None => Ok(None),
        }
    }

    /// The agent finishes running plan `id` (from the run's connection).
    pub fn finish(&self, id: u64, connection: Option<u64>, outcome: &str) -> anyhow::Result<Plan> {
        let outcome = words("outcome", outcome, MAX_OUTCOME)?;
        let plan = self.get(id)?;
        if plan.state != State::Running || plan.connection != connection || connection.is_none() {
            return Err(kinded(
                ErrorKind::Conflict,
                format!(
                    "plan {id} is {}{}; only the connection that started a run finishes it",
                    plan.state.as_str(),
                    if plan.state == State::Running { " on another connection" } else { "" }
                ),
            ));
        }
        self.end(id, State::Finished, "its agent (plan_finish)", Some(&outcome), None)?
            .ok_or_else(|| kinded(ErrorKind::Conflict, format!("plan {id} ended before it was finished")))
    }

    /// Marks task `n` of running plan `id` done (from the run's connection).
    pub fn task_done(&self, id: u64, connection: Option<u64>, n: u32, note: &str) -> anyhow::Result<Plan> {
        let note = words("note", note, MAX_DETAIL)?;
        let plan = self.get(id)?;
        if plan.state != State::Running || plan.connection != connection || connection.is_none() {
            return Err(kinded(
                ErrorKind::Conflict,
                format!("plan {id} is {}: only its running run marks its tasks done", plan.state.as_str()),
            ));
        }
        let changed = self.with(|c| {
            Ok(c.execute(
                "UPDATE tasks SET done = 1, note = ?3 WHERE plan = ?1 AND n = ?2",
                params![id as i64, n, note],
            )?)
        })?;
        if changed == 0 {
            return Err(kinded(
                ErrorKind::NotFound,
                format!("plan {id} has no task {n}; its tasks are 1 to {}", plan.tasks.len()),
            ));
        }
        self.get(id)
    }

    /// The person (`caller`, channel `user`) stops the run of `app` (plan
    /// `which`, or whichever runs).
    pub fn stop(&self, caller: &Caller, app: &AppId, which: Option<u64>) -> anyhow::Result<Plan> {
        person(caller)?;
        let by = format!("the person ({})", caller.label());
        let running = self.running(app)?;
        let plan = match (running, which) {
            (Some(p), None) => p,
            (Some(p), Some(w)) if p.id == w => p,
            (_, Some(w)) => {
                let p = self.of_app(app, w)?;
                return Err(kinded(
                    ErrorKind::Conflict,
                    format!("plan {w} of {app} is {}, not running", p.state.as_str()),
                ));
            }
            (None, None) => return Err(kinded(ErrorKind::NotFound, format!("no plan is running on {app}"))),
        };
        self.end(plan.id, State::Stopped, &by, None, Some(caller))?
            .ok_or_else(|| kinded(ErrorKind::Conflict, format!("plan {} ended already", plan.id)))
    }

    /// The person (`caller`, channel `user`) rejects a plan of `app` that has
    /// not run (the waiting one, or plan `which`).
    pub fn reject(&self, caller: &Caller, app: &AppId, which: Option<u64>) -> anyhow::Result<Plan> {
        person(caller)?;
        let by = format!("the person ({})", caller.label());
        let plan = match which {
            Some(w) => self.of_app(app, w)?,
            None => self
                .waiting(app)?
                .ok_or_else(|| kinded(ErrorKind::NotFound, format!("no plan of {app} waits for you")))?,
        };
        let changed = self.with(|c| {
            Ok(c.execute(
                "UPDATE plans SET state = 'rejected', ended_ms = ?2, ended_by = ?3
                 WHERE id = ?1 AND state IN ('draft', 'submitted')",
                params![plan.id as i64, now_ms(), &by],
            )?)
        })?;
        if changed == 0 {
            return Err(kinded(
                ErrorKind::Conflict,
                format!(
                    "plan {} is {}; only a draft or a waiting plan is rejected (a running one is stopped)",
                    plan.id,
                    plan.state.as_str()
                ),
            ));
        }
        let plan = self.get(plan.id)?;
        self.record(&plan, caller, "plan-reject", format!("rejected plan {}", plan.id));
        Ok(plan)
    }

    /// Ends every run of control connection `connection` (it closed).
    pub fn end_connection(&self, connection: u64, pid: u32) -> anyhow::Result<Vec<Plan>> {
        self.end_where(
            "connection = ?1 AND launcher_pid = ?2",
            params![connection as i64, pid],
            "its connection closed",
        )
    }

    /// Ends every run of launcher `pid` (it stops, or it started again and
    /// found them: a run does not survive a restart).
    pub fn end_launcher(&self, pid: Option<u32>, by: &str) -> anyhow::Result<Vec<Plan>> {
        match pid {
            Some(p) => self.end_where("launcher_pid = ?1", params![p], by),
            None => self.end_where("1 = 1", params![], by),
        }
    }

    fn end_where(&self, cond: &str, args: &[&dyn rusqlite::ToSql], by: &str) -> anyhow::Result<Vec<Plan>> {
        let ids: Vec<i64> = self.with(|c| {
            Ok(c.prepare(&format!("SELECT id FROM plans WHERE state = 'running' AND {cond}"))?
                .query_map(args, |r| r.get(0))?
                .collect::<Result<_, _>>()?)
        })?;
        let mut ended = Vec::new();
        for id in ids {
            if let Some(p) = self.end(id as u64, State::Stopped, by, None, None)? {
                ended.push(p);
            }
        }
        Ok(ended)
    }
}

/// Refuses anyone but the person.
fn person(caller: &Caller) -> anyhow::Result<()> {
    if caller.channel() != Channel::User {
        return Err(kinded(ErrorKind::Denied, "only the person stops a run or rejects a plan (channel user)"));
    }
    Ok(())
}

/// Whether a run would answer the question of `knock`: channel `ai`, one of
/// [`RUN_TOOLS`] or a route of a preview; which run, [`Plans::run_of`] says.
pub fn run_covers(knock: &Knock<'_>) -> bool {
    knock.caller.channel() == Channel::Ai
        && match knock.tool {
            true => RUN_TOOLS.contains(&knock.route),
            false => knock.preview,
        }
}

impl StandIn for Plans {
    fn answers(&self, knock: &Knock<'_>) -> Option<AnsweredBy> {
        if !run_covers(knock) {
            return None;
        }
        match self.run_of(knock.app, knock.caller.connection()) {
            Ok(run) => run.map(|p| AnsweredBy::Run(p.id)),
            Err(e) => {
                // Cannot tell: the person is asked.
                tracing::warn!(app = %knock.app, "cannot read the plans: {e:#}");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
