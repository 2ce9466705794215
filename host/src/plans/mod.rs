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
//! Plans live in `<root>/plans.sqlite` and are kept across a restart; a run
//! does not survive one (the launcher marks one it finds running as stopped
//! by the restart), nor a plan not run yet (its agent's connection ended).
//! Runs and authors are bound to (launcher start id, connection number), and
//! a run to its app's folder; only the launcher holding the root's lock has
//! live runs (the command line asks the lock who that is). The
//! launcher and the command line share the file (`autoapp plan stop` from a
//! terminal ends a run the launcher serves: the stand-in reads the file at
//! every question). This module knows no MCP and no HTTP.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension as _, params};
use serde::Serialize;

use crate::elsewhere::text;
use crate::error::{ErrorKind, kinded};
use crate::gate::Connection as ControlConnection;
use crate::gate::{AnsweredBy, Caller, Channel, Knock, StandIn};
use crate::manifest::AppId;

/// The file's name in the root.
pub const FILE: &str = "plans.sqlite";

/// The engineer's tools a run answers for its app (besides the routes of a
/// preview of that app, which `preview_call` reaches): one closed list.
/// Never `apps_create`, never activation, never another app.
pub const RUN_TOOLS: &[&str] =
    &["source_edit", "source_write", "source_delete", "candidate_build", "candidate_preview", "preview_stop"];

/// Limits of what an agent may write into a plan, in characters: the
/// person reads all of it on one card, so no part may bury another (or the
/// host's lines) under its length.
pub const MAX_REQUEST: usize = 2_000;
pub const MAX_SUMMARY: usize = 4_000;
/// A task's text: its title and its detail together.
pub const MAX_TASK: usize = 1_000;
pub const MAX_TASKS: usize = 30;
pub const MAX_TOUCHES: usize = 100;
pub const MAX_OUTCOME: usize = 4_000;
pub const MAX_NOTE: usize = 1_000;

/// How many plans of one app may be open (draft or waiting for the person)
/// at once: drafting is a read nobody is asked about, so without a bound one
/// agent could fill `plans.sqlite` (and every redraw of the panel) at will.
pub const MAX_OPEN_PLANS: usize = 20;

/// What the agent's words are headed with wherever a plan is shown: they
/// follow the host's lines, each indented under this heading.
pub const AGENT_WORDS: &str = "The agent's words (not checked by Autoapp):";

/// What ends a plan whose agent's connection closed before it ran.
pub const AGENT_WENT_AWAY: &str = "its agent went away";

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
/// was written on, in one launcher start. Only its author adds to a plan,
/// submits it and starts it, so the person's yes goes to the agent whose plan
/// they read, never to another that asks to start it.
pub type Author = ControlConnection;

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
    /// The connection its run is bound to.
    #[serde(skip)]
    run: Option<ControlConnection>,
    #[serde(skip)]
    author: Option<Author>,
}

impl Plan {
    /// Whether this is a run started on `connection` (of the same launcher
    /// start: a number alone never matches).
    pub fn is_run_of(&self, connection: Option<&ControlConnection>) -> bool {
        self.state == State::Running && connection.is_some() && self.run.as_ref() == connection
    }

    /// The first task not done yet: what the run is working on.
    pub fn current_task(&self) -> Option<u32> {
        self.tasks.iter().find(|t| !t.done).map(|t| t.n)
    }

    /// What the host knows of the plan, first wherever it is shown: which
    /// plan of which app, where it is, who wrote it, what it touches with the
    /// host's marks of what the app lacks, what ended it.
    pub fn host_lines(&self) -> String {
        let mut out = format!(
            "plan {} of {} ({}), written by an agent on channel ai calling itself \"{}\"\n",
            self.id,
            self.app,
            self.state.as_str(),
            text::one_line(&self.client)
        );
        let done = self.tasks.iter().filter(|t| t.done).count();
        out.push_str(&format!("{} task(s), {done} done\n", self.tasks.len()));
        if !self.touches.is_empty() {
            let missing = self.touches.iter().filter(|t| !t.exists).count();
            out.push_str(&format!("it says it touches ({missing} the app has no such thing now):\n"));
            for t in &self.touches {
                let mark = if t.exists { "" } else { "  ← the app has no such thing now" };
                out.push_str(&format!("  {} {}{mark}\n", t.kind, text::one_line(&t.name)));
            }
        }
        if let Some(by) = &self.ended_by {
            out.push_str(&format!("ended by: {}\n", text::one_line(by)));
        }
        out
    }

    /// The agent's words — request, summary, tasks, notes, outcome — as
    /// lines, each to be shown under [`AGENT_WORDS`] and never as the host's.
    pub fn agent_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut push = |head: &str, words: &str| {
            let words = text::for_person(words);
            let mut lines = words.split('\n');
            out.push(format!("{head}{}", lines.next().unwrap_or("")));
            out.extend(lines.map(|l| format!("  {l}")));
        };
        push("request: ", &self.request);
        if !self.summary.is_empty() {
            push("summary: ", &self.summary);
        }
        for t in &self.tasks {
            let mark = if t.done { "x" } else { " " };
            let detail = if t.detail.is_empty() { String::new() } else { format!(" — {}", t.detail) };
            let note = t.note.as_ref().map(|n| format!(" (done: {n})")).unwrap_or_default();
            push(&format!("[{mark}] {}. ", t.n), &format!("{}{detail}{note}", t.title));
        }
        if let Some(o) = &self.outcome {
            push("outcome: ", o);
        }
        out
    }

    /// The plan as the person reads it on a card or a terminal: the host's
    /// lines, then the agent's words under [`AGENT_WORDS`], each line
    /// indented behind a bar, so none can pass for the host's.
    pub fn text(&self) -> String {
        let mut out = self.host_lines();
        out.push_str(AGENT_WORDS);
        out.push('\n');
        for line in self.agent_lines() {
            out.push_str("  | ");
            out.push_str(&line);
            out.push('\n');
        }
        out
    }
}

/// A running plan's id, start, limit, launcher start and app folder.
type RunRow = (i64, i64, i64, Option<String>, Option<String>);

/// The plans of one root, in `<root>/plans.sqlite` (opened at first use).
pub struct Plans {
    root: crate::root::Root,
    path: PathBuf,
    conn: Mutex<Option<Connection>>,
    /// A run's time limit (`run_limit_secs`).
    limit: Duration,
    /// The id of the launcher start this process is, when it is one.
    launcher: std::sync::OnceLock<String>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

fn rfc3339_ms(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// An agent's `text` for `field`, refused with a sentence past `max`
/// characters (counted as the agent sent it: blank lines too); kept as the
/// person will see it ([`text::for_person`]: no format characters, runs of
/// blank lines collapsed).
fn words(field: &str, said: &str, max: usize) -> anyhow::Result<String> {
    text::within(field, said, max).map_err(|e| kinded(ErrorKind::InvalidInput, e))?;
    Ok(text::for_person(said))
}

/// Which folder `app` is now (device, inode and, where the filesystem keeps
/// it, birth time: an inode number freed by emptying the trash can come back),
/// if it exists: a run is bound to the folder its app was when it started,
/// so an app removed and created again with the same id is another app to it.
fn app_identity(paths: &crate::root::AppPaths) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(&paths.dir).ok().map(|m| {
        let born = m.created().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
        format!("{}:{}:{}", m.dev(), m.ino(), born.map(|d| d.as_nanos()).unwrap_or(0))
    })
}

fn not_found(plan: u64) -> anyhow::Error {
    kinded(ErrorKind::NotFound, format!("there is no plan {plan}; plan_read {{app}} lists an app's plans"))
}

impl Plans {
    /// The plans of `root`, with runs limited to `limit`.
    pub fn new(root: &crate::root::Root, limit: Duration) -> Plans {
        Plans {
            root: root.clone(),
            path: root.dir().join(FILE),
            conn: Mutex::new(None),
            limit,
            launcher: std::sync::OnceLock::new(),
        }
    }

    /// Binds these plans to launcher start `id` (the launcher's own, once,
    /// before it serves anything): only runs and authors of that start are
    /// live in it.
    pub fn bind_launcher(&self, id: &str) {
        let _ = self.launcher.set(id.to_string());
    }

    /// The launcher start serving the root now: this process's own, else the
    /// holder of the root's lock; `None` when none serves it (its lock is
    /// free, whatever a pid looks like from here).
    fn live_launcher(&self) -> anyhow::Result<Option<String>> {
        if let Some(id) = self.launcher.get() {
            return Ok(Some(id.clone()));
        }
        Ok(crate::root::launcher_holder(&self.root)?.map(|h| h.id))
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
                   connection INTEGER, launcher_pid INTEGER, author_connection INTEGER, author_pid INTEGER,
                   launcher TEXT, author_launcher TEXT, app_dir TEXT);
                 CREATE UNIQUE INDEX IF NOT EXISTS one_run_per_app ON plans(app) WHERE state = 'running';
                 CREATE TABLE IF NOT EXISTS tasks (
                   plan INTEGER NOT NULL, n INTEGER NOT NULL, title TEXT NOT NULL, detail TEXT NOT NULL,
                   done INTEGER NOT NULL DEFAULT 0, note TEXT, PRIMARY KEY (plan, n));
                 CREATE TABLE IF NOT EXISTS touches (
                   plan INTEGER NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, found INTEGER NOT NULL);",
            )?;
            Self::add_columns(&conn)?;
            *guard = Some(conn);
        }
        f(guard.as_mut().expect("opened above"))
    }

    /// Adds the columns a file made by an older launcher lacks.
    fn add_columns(conn: &Connection) -> anyhow::Result<()> {
        let have: Vec<String> =
            conn.prepare("PRAGMA table_info(plans)")?.query_map([], |r| r.get(1))?.collect::<Result<_, _>>()?;
        for column in ["launcher", "author_launcher", "app_dir"] {
            if !have.iter().any(|c| c == column) {
                conn.execute_batch(&format!("ALTER TABLE plans ADD COLUMN {column} TEXT"))?;
            }
        }
        Ok(())
    }

    fn load(conn: &Connection, id: u64) -> anyhow::Result<Option<Plan>> {
        let row = conn
            .query_row(
                "SELECT id, app, client, request, summary, state, created_ms, submitted_ms, started_ms, limit_ms,
                        ended_ms, ended_by, outcome, connection, launcher, author_connection, author_launcher
                 FROM plans WHERE id = ?1",
                [id as i64],
                |r| {
                    let started: Option<i64> = r.get(8)?;
                    let limit: Option<i64> = r.get(9)?;
                    let state = State::parse(&r.get::<_, String>(5)?);
                    Ok(Plan {
                        id: r.get::<_, i64>(0)? as u64,
                        app: r.get(1)?,
                        client: text::one_line(&r.get::<_, String>(2)?),
                        // As the person sees it, also for a file an older launcher wrote.
                        request: text::for_person(&r.get::<_, String>(3)?),
                        summary: text::for_person(&r.get::<_, String>(4)?),
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
                        outcome: r.get::<_, Option<String>>(12)?.map(|o| text::for_person(&o)),
                        run: match (r.get::<_, Option<i64>>(13)?, r.get::<_, Option<String>>(14)?) {
                            (Some(c), Some(launcher)) => Some(ControlConnection { launcher, number: c as u64 }),
                            _ => None,
                        },
                        author: match (r.get::<_, Option<i64>>(15)?, r.get::<_, Option<String>>(16)?) {
                            (Some(c), Some(launcher)) => Some(Author { launcher, number: c as u64 }),
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
                Ok(Task {
                    n: r.get(0)?,
                    title: text::for_person(&r.get::<_, String>(1)?),
                    detail: text::for_person(&r.get::<_, String>(2)?),
                    done: r.get(3)?,
                    note: r.get::<_, Option<String>>(4)?.map(|n| text::for_person(&n)),
                })
            })?
            .collect::<Result<_, _>>()?;
        let mut touches = conn.prepare("SELECT kind, name, found FROM touches WHERE plan = ?1 ORDER BY rowid")?;
        plan.touches = touches
            .query_map([id as i64], |r| {
                Ok(Touch { kind: r.get(0)?, name: text::one_line(&r.get::<_, String>(1)?), exists: r.get(2)? })
            })?
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

    /// The newest `limit` plans of `app`, newest first (a run past its time
    /// limit ended first); the rest are never loaded.
    pub fn list(&self, app: &AppId, limit: usize) -> anyhow::Result<Vec<Plan>> {
        let _ = self.running(app)?;
        self.with(|c| {
            let ids: Vec<i64> = c
                .prepare("SELECT id FROM plans WHERE app = ?1 ORDER BY id DESC LIMIT ?2")?
                .query_map(params![app.as_str(), limit.min(i64::MAX as usize) as i64], |r| r.get(0))?
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
        let client = text::one_line(client);
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
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let open: i64 = tx.query_row(
                "SELECT count(*) FROM plans WHERE app = ?1 AND state IN ('draft', 'submitted')",
                [app.as_str()],
                |r| r.get(0),
            )?;
            if open as usize >= MAX_OPEN_PLANS {
                return Err(kinded(
                    ErrorKind::Conflict,
                    format!(
                        "{app} has {open} plans in draft or waiting for the person; at most {MAX_OPEN_PLANS} may be open per app: submit or finish one, or wait for the person to reject one"
                    ),
                ));
            }
            tx.execute(
                "INSERT INTO plans (app, client, request, summary, state, created_ms, author_connection, author_launcher)
                 VALUES (?1, ?2, ?3, ?4, 'draft', ?5, ?6, ?7)",
                params![app.as_str(), client, request, summary, now_ms(), author.number as i64, author.launcher],
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
    fn authored(plan: &Plan, by: &Author) -> anyhow::Result<()> {
        if plan.author.as_ref() != Some(by) {
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
    pub fn add_task(&self, id: u64, by: &Author, title: &str, detail: &str) -> anyhow::Result<Plan> {
        text::within("task's text (title and detail)", &format!("{title}{detail}"), MAX_TASK)
            .map_err(|e| kinded(ErrorKind::InvalidInput, e))?;
        let title = words("title", title, MAX_TASK)?;
        let detail = words("detail", detail, MAX_TASK)?;
        if title.trim().is_empty() {
            return Err(kinded(ErrorKind::InvalidInput, "a task needs a `title`"));
        }
        self.with(|c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let plan = Self::load(&tx, id)?.ok_or_else(|| not_found(id))?;
            Self::authored(&plan, by)?;
            Self::draft(&plan)?;
            if plan.tasks.len() >= MAX_TASKS {
                return Err(kinded(
                    ErrorKind::InvalidInput,
                    format!("plan {id} has {MAX_TASKS} tasks, the most a plan may have: say the rest in fewer tasks"),
                ));
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
    pub fn submit(&self, id: u64, by: &Author) -> anyhow::Result<Plan> {
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

    /// The submitted plan of `app` that waits for the person, if any. Only a
    /// plan whose agent is still connected to the launcher serving the root
    /// waits: one of an agent that went away blocks nothing (and is ended when
    /// its connection closes, [`Plans::end_connection`]).
    pub fn waiting(&self, app: &AppId) -> anyhow::Result<Option<Plan>> {
        let Some(live) = self.live_launcher()? else { return Ok(None) };
        let id: Option<i64> = self.with(|c| {
            Ok(c.query_row(
                "SELECT id FROM plans WHERE app = ?1 AND state = 'submitted' AND author_launcher = ?2
                 ORDER BY id LIMIT 1",
                params![app.as_str(), live],
                |r| r.get(0),
            )
            .optional()?)
        })?;
        id.map(|id| self.get(id as u64)).transpose()
    }

    /// Starts submitted plan `id` for its author `by` (the run is bound to
    /// its connection): the person said yes to `plan_start`. (The tool's own
    /// row records the person's answer.)
    pub fn start(&self, id: u64, by: &Author) -> anyhow::Result<Plan> {
        let limit = self.limit.as_millis() as i64;
        let plan = self.check_start(id, by)?;
        let app_dir = AppId::parse(&plan.app).ok().and_then(|a| app_identity(&self.root.app(&a)));
        self.with(|c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            // Again inside the transaction: nothing changed it since.
            Self::startable(&tx, id, by)?;
            tx.execute(
                "UPDATE plans SET state = 'running', started_ms = ?2, limit_ms = ?3, connection = ?4, launcher = ?5,
                 app_dir = ?6 WHERE id = ?1",
                params![id as i64, now_ms(), limit, by.number as i64, by.launcher, app_dir],
            )?;
            tx.commit()?;
            Ok(())
        })?;
        self.get(id)
    }

    /// Plan `id`, when `by` may start it now (before the person is asked):
    /// its author's, submitted, and no other run on its app (a run past its
    /// time limit, or of a launcher that is gone, is ended first).
    pub fn check_start(&self, id: u64, by: &Author) -> anyhow::Result<Plan> {
        let plan = self.get(id)?;
        if let Ok(app) = AppId::parse(&plan.app) {
            self.running(&app)?;
        }
        self.with(|c| Self::startable(c, id, by))
    }

    fn startable(conn: &Connection, id: u64, by: &Author) -> anyhow::Result<Plan> {
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
        // A run that ended by itself (its connection, its limit, its launcher)
        // is its agent's; anything else names who ended it.
        let agent = Caller::ai(&plan.client);
        let name = if state == State::Finished { "plan-finish" } else { "plan-stop" };
        let said = format!("the run of plan {id} ended: {by}; every question goes to the person again");
        self.record(&plan, caller.unwrap_or(&agent), name, said);
        Ok(Some(plan))
    }

    /// The run working on `app`, if any. A run past its time limit, of a
    /// launcher start that is not the one serving the root now (its lock is
    /// free, or another start holds it), or of an app removed since it
    /// started (a folder of the same id made again is another app) is ended
    /// here first.
    pub fn running(&self, app: &AppId) -> anyhow::Result<Option<Plan>> {
        let row: Option<RunRow> = self.with(|c| {
            Ok(c.query_row(
                "SELECT id, started_ms, limit_ms, launcher, app_dir FROM plans WHERE app = ?1 AND state = 'running'",
                [app.as_str()],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
            .optional()?)
        })?;
        let Some((id, started, limit, launcher, app_dir)) = row else { return Ok(None) };
        let id = id as u64;
        if now_ms() >= started + limit {
            self.end(id, State::Stopped, "its time limit (run_limit_secs)", None, None)?;
            return Ok(None);
        }
        if launcher.is_none() || launcher != self.live_launcher()? {
            self.end(id, State::Stopped, "the launcher stopped", None, None)?;
            return Ok(None);
        }
        if app_dir != app_identity(&self.root.app(app)) {
            self.end(id, State::Stopped, "its app was removed", None, None)?;
            return Ok(None);
        }
        self.get(id).map(Some)
    }

    /// The run of `app` that `connection` started, if that is what works on it.
    pub fn run_of(&self, app: &AppId, connection: Option<&ControlConnection>) -> anyhow::Result<Option<Plan>> {
        Ok(self.running(app)?.filter(|p| p.is_run_of(connection)))
    }

    /// Ends every run of control connection `on` because of `by` (a
    /// question outside them went unanswered).
    pub fn end_runs_on(&self, on: &ControlConnection, by: &str) -> anyhow::Result<Vec<Plan>> {
        self.end_where("launcher = ?1 AND connection = ?2", params![on.launcher, on.number as i64], by)
    }

    /// The agent `caller` finishes running plan `id` (from the run's
    /// connection); the record's row names it.
    pub fn finish(&self, id: u64, caller: &Caller, outcome: &str) -> anyhow::Result<Plan> {
        let outcome = words("outcome", outcome, MAX_OUTCOME)?;
        let plan = self.get(id)?;
        let connection = caller.connection();
        if plan.state != State::Running || plan.run.as_ref() != connection || connection.is_none() {
            return Err(kinded(
                ErrorKind::Conflict,
                format!(
                    "plan {id} is {}{}; only the connection that started a run finishes it",
                    plan.state.as_str(),
                    if plan.state == State::Running { " on another connection" } else { "" }
                ),
            ));
        }
        self.end(id, State::Finished, "its agent (plan_finish)", Some(&outcome), Some(caller))?
            .ok_or_else(|| kinded(ErrorKind::Conflict, format!("plan {id} ended before it was finished")))
    }

    /// Marks task `n` of running plan `id` done (from the run's connection).
    pub fn task_done(
        &self,
        id: u64,
        connection: Option<&ControlConnection>,
        n: u32,
        note: &str,
    ) -> anyhow::Result<Plan> {
        let note = words("note", note, MAX_NOTE)?;
        let plan = self.get(id)?;
        if plan.state != State::Running || plan.run.as_ref() != connection || connection.is_none() {
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

    /// Ends every run of control connection `on` (it closed), and the plans
    /// it wrote that had not run (drafts and plans waiting for the person:
    /// nobody else may go on with them, and a waiting one would block its
    /// app). The runs ended.
    pub fn end_connection(&self, on: &ControlConnection) -> anyhow::Result<Vec<Plan>> {
        self.end_unrun("author_launcher = ?1 AND author_connection = ?2", params![on.launcher, on.number as i64])?;
        self.end_where(
            "launcher = ?1 AND connection = ?2",
            params![on.launcher, on.number as i64],
            "its connection closed",
        )
    }

    /// Ends the run of `app`, if one works on it, because of `by` (the
    /// person removed the app: a run ends with its app).
    pub fn end_app(&self, app: &AppId, by: &str) -> anyhow::Result<Vec<Plan>> {
        self.end_where("app = ?1", params![app.as_str()], by)
    }

    /// Ends every run of launcher start `id` (it stops), or every run and
    /// every plan not run yet when `None` (a launcher starts: nothing of the
    /// last one survives a restart).
    pub fn end_launcher(&self, id: Option<&str>, by: &str) -> anyhow::Result<Vec<Plan>> {
        match id {
            Some(l) => {
                self.end_unrun("author_launcher = ?1", params![l])?;
                self.end_where("launcher = ?1", params![l], by)
            }
            None => {
                self.end_unrun("1 = 1", params![])?;
                self.end_where("1 = 1", params![], by)
            }
        }
    }

    /// Ends the drafts and waiting plans matching `cond`: their agent went away.
    fn end_unrun(&self, cond: &str, args: &[&dyn rusqlite::ToSql]) -> anyhow::Result<usize> {
        self.with(|c| {
            let sql = format!(
                "UPDATE plans SET state = 'stopped', ended_ms = {}, ended_by = '{AGENT_WENT_AWAY}'
                 WHERE state IN ('draft', 'submitted') AND {cond}",
                now_ms()
            );
            Ok(c.execute(&sql, args)?)
        })
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
