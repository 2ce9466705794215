//! The control connection: how a local process (`autoapp mcp`, `status`,
//! `stop`, `open`) reaches a running launcher.
//!
//! `127.0.0.1`, an ephemeral port, and `<root>/launcher.json` holding the
//! port, the pid and a 32-byte hex secret (written atomically at mode 0600,
//! removed on exit; a file no launcher holds the root's lock for is stale and
//! removed — never judged by its pid, which another PID namespace cannot
//! see). Newline-
//! delimited JSON. The first line must be `{"type":"auth","secret":…}` within
//! 2 seconds, compared in constant time, or the socket closes. Lines are
//! capped at 1 MiB. Requests: `invoke` (a route call on channel `mcp`; the
//! client's name is only a label), `engineer` (one of the engineer's tools on
//! channel `ai`, answered after `{"progress": …}` lines), `prepare` (load a
//! release of an app before `autoapp activate` switches to it, so that the
//! first call after the switch finds it ready), `status`, `stop`,
//! `panel`. The secret is
//! never logged, never returned and never recorded.

use crate::secret::Secret;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::engineer::Engineer;
use crate::gate::{Caller, Connection};
use crate::manifest::AppId;
use crate::root::{LAUNCHER_FILE, Root};
use crate::server::Launcher;

/// How long a connection has to authenticate.
pub const AUTH_DEADLINE: Duration = Duration::from_secs(2);

/// The longest line either side may send.
pub const MAX_LINE: usize = 1 << 20;

/// What `launcher.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LauncherFile {
    pub port: u16,
    pub pid: u32,
    pub secret: Secret,
    pub started_at: String,
}

/// A request after authentication.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Request {
    Auth {
        secret: Secret,
    },
    Invoke {
        app: String,
        route: String,
        #[serde(default = "empty_object")]
        input: Value,
        #[serde(default)]
        client: String,
        #[serde(default, rename = "requestId")]
        request_id: Option<String>,
    },
    /// One of the engineer's tools (`autoapp mcp --engineer`): channel `ai`.
    Engineer {
        tool: String,
        #[serde(default = "empty_object")]
        arguments: Value,
        #[serde(default)]
        client: String,
        /// The engineer's session (see `Session`): the call is the session's,
        /// and a run the person starts is bound to the session.
        #[serde(default)]
        session: Option<String>,
    },
    /// Opens an engineer's session on this connection: the answer names a
    /// token its other connections send with their calls. The session is
    /// this connection: it ends when this connection closes.
    Session,
    /// Loads `release` of `app` (its compiled code from the cache, linked,
    /// its schemas) into the launcher, as a call would at its first use.
    Prepare {
        app: String,
        release: String,
    },
    Status,
    Stop,
    Panel,
}

fn empty_object() -> Value {
    json!({})
}

/// Parses one line of the protocol; the error is the sentence to answer with.
pub fn parse_line(line: &[u8]) -> Result<Request, String> {
    if line.len() > MAX_LINE {
        return Err(format!("a line may be at most {MAX_LINE} bytes"));
    }
    let value: Value = serde_json::from_slice(line).map_err(|_| "a line must be one JSON object".to_string())?;
    let kind = value.get("type").and_then(Value::as_str).ok_or("a request needs a \"type\"")?.to_string();
    serde_json::from_value(value).map_err(|e| {
        if matches!(kind.as_str(), "auth" | "invoke" | "engineer" | "session" | "prepare" | "status" | "stop" | "panel")
        {
            format!("the {kind} request is malformed: {e}")
        } else {
            format!(
                "unknown request `{}`; the requests are invoke, engineer, session, prepare, status, stop and panel",
                kind.escape_debug()
            )
        }
    })
}

/// Reads one line of at most [`MAX_LINE`] bytes. `Ok(None)` at the end.
async fn read_line<R: AsyncRead + Unpin>(r: &mut BufReader<R>) -> std::io::Result<Option<Result<Vec<u8>, ()>>> {
    let mut buf = Vec::new();
    let mut limited = (&mut *r).take(MAX_LINE as u64 + 1);
    let n = limited.read_until(b'\n', &mut buf).await?;
    if n == 0 {
        return Ok(None);
    }
    if buf.len() > MAX_LINE {
        return Ok(Some(Err(())));
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
    }
    Ok(Some(Ok(buf)))
}

/// The control connection of a running launcher.
pub struct ControlServer {
    file: PathBuf,
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

/// Listens, writes `launcher.json`, and serves connections until the launcher stops.
pub async fn start(root: &Root, launcher: Arc<Launcher>) -> anyhow::Result<ControlServer> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.context("cannot listen for the control connection")?;
    let port = listener.local_addr()?.port();
    let secret = Secret::random();
    let file = root.dir().join(LAUNCHER_FILE);
    let contents =
        LauncherFile { port, pid: std::process::id(), secret: secret.clone(), started_at: launcher.started_at.clone() };
    write_private(&file, serde_json::to_string_pretty(&contents)?.as_bytes())?;
    let secret = Arc::new(secret);
    let told = Arc::downgrade(&launcher);
    let engineer = Arc::new(crate::engineer::Engineer::new(launcher.apps.clone(), move |app| {
        if let Some(l) = told.upgrade() {
            l.announce(crate::server::LauncherEvent::Changed { app: app.to_string() });
        }
    }));
    let mut stopping = launcher.stopping();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stopping.wait_for(|s| *s) => break,
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    tokio::spawn(serve(stream, secret.clone(), launcher.clone(), engineer.clone()));
                }
            }
        }
    });
    Ok(ControlServer { file })
}

/// Writes `bytes` to `path` at mode 0600, atomically.
fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = path.parent().context("launcher.json has a folder")?;
    let tmp = dir.join(format!(".launcher.json.tmp-{}", std::process::id()));
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .context("cannot write launcher.json")?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path).context("cannot write launcher.json")?;
    crate::root::sync_dir(dir)
}

async fn send(w: &mut tokio::net::tcp::OwnedWriteHalf, v: &Value) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(v).expect("JSON");
    line.push(b'\n');
    w.write_all(&line).await
}

fn refuse(message: &str) -> Value {
    json!({ "ok": false, "error": { "kind": "denied", "message": message } })
}

async fn serve(stream: TcpStream, secret: Arc<Secret>, launcher: Arc<Launcher>, engineer: Arc<Engineer>) {
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    // Authentication first, within the deadline.
    let first = tokio::time::timeout(AUTH_DEADLINE, read_line(&mut r)).await;
    let authed = match first {
        Ok(Ok(Some(Ok(line)))) => {
            matches!(parse_line(&line), Ok(Request::Auth { secret: s }) if s.matches(&secret))
        }
        _ => false,
    };
    if !authed {
        let _ = send(&mut w, &refuse("authenticate first with the secret in launcher.json")).await;
        return;
    }
    let _ = send(&mut w, &json!({ "ok": true })).await;
    // The connection's number, for the life of the launcher: a run the
    // person starts for an engineer here is bound to it, and ends with it.
    let connection = Connection {
        launcher: launcher.id.clone(),
        number: NEXT_CONNECTION.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
    };
    let mut runs_end = RunsEnd {
        plans: launcher.apps.plans().clone(),
        connection: connection.clone(),
        may_run: false,
        told: Arc::downgrade(&launcher),
    };
    // Lines are read on a task of their own, so that a tool working for a
    // long time still notices its caller going away (the end of the stream).
    let (tx, lines) = tokio::sync::mpsc::channel::<Result<Vec<u8>, ()>>(QUEUED_LINES);
    // Set the moment the stream ends: a change the caller asked for is then
    // not made, its build is stopped (see `Engineer::call`).
    let gone = crate::build::Stop::default();
    let gone_when_read = gone.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = read_line(&mut r).await {
            let too_long = line.is_err();
            if tx.send(line).await.is_err() || too_long {
                break;
            }
        }
        gone_when_read.set();
    });
    let mut caller_lines =
        Lines { lines, queued: std::collections::VecDeque::new(), stopping: launcher.stopping(), gone };
    loop {
        let line = match caller_lines.next().await {
            Some(Ok(l)) => l,
            Some(Err(())) => {
                let _ = send(&mut w, &refuse("that line is longer than 1 MiB; the connection is closed")).await;
                return;
            }
            None => return,
        };
        let answer = match parse_line(&line) {
            Err(e) => refuse(&e),
            Ok(Request::Session) => {
                runs_end.may_run = true;
                let token = crate::secret::random_hex();
                SESSIONS.lock().unwrap_or_else(|p| p.into_inner()).insert(token.clone(), connection.clone());
                json!({ "ok": true, "session": token })
            }
            Ok(Request::Engineer { tool, arguments, client, session }) => {
                let label = if client.trim().is_empty() { "an engineer" } else { &client };
                // The session's connection, when the call names one that is open.
                let on = match session {
                    None => {
                        runs_end.may_run = true;
                        Some(connection.clone())
                    }
                    Some(token) => SESSIONS.lock().unwrap_or_else(|p| p.into_inner()).get(&token).cloned(),
                };
                let Some(on) = on else {
                    let said = refuse(
                        "that engineer session is over (its connection closed, or the launcher restarted); open a new one",
                    );
                    if send(&mut w, &said).await.is_err() {
                        return;
                    }
                    continue;
                };
                let caller = Caller::engineer(label, on);
                match engineer_call(&engineer, &caller, &tool, arguments, &mut w, &mut caller_lines).await {
                    Some(answer) => answer,
                    None => return,
                }
            }
            // A call may wait for the person (a write's question): when its
            // caller goes away meanwhile, the question is withdrawn from the
            // pages and the call refused, never run for nobody
            // (`gate::CALLER_GONE`). A call past the gate runs to its end
            // (its row written, a first write noted), answered to nobody.
            Ok(req @ Request::Invoke { .. }) => {
                let (gone, caller_gone) = tokio::sync::watch::channel(false);
                let call = crate::gate::CALLER_GONE.scope(caller_gone, handle(req, &launcher));
                tokio::pin!(call);
                tokio::select! {
                    answer = &mut call => answer,
                    () = caller_lines.went_away() => {
                        let went = caller_lines.gone.is_set();
                        let _ = gone.send(went);
                        let answer = call.await;
                        if went {
                            return;
                        }
                        // (The launcher stops: the call ended as it would.)
                        answer
                    }
                }
            }
            Ok(req) => handle(req, &launcher).await,
        };
        if send(&mut w, &answer).await.is_err() {
            return;
        }
    }
}

/// The next control connection's number.
static NEXT_CONNECTION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The open engineer sessions: token → the connection that opened it (of
/// this launcher start: a token of another is unknown here).
static SESSIONS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<String, Connection>>> =
    std::sync::LazyLock::new(Default::default);

/// Ends the runs of a connection when it closes (or the launcher drops it),
/// and the sessions it opened.
struct RunsEnd {
    plans: Arc<crate::plans::Plans>,
    connection: Connection,
    /// Told that the app's plans changed (the panel redraws them).
    told: std::sync::Weak<Launcher>,
    /// Whether a run can be bound to this connection: it opened a session or
    /// called an engineer's tool as itself. Other connections (`invoke`,
    /// `status`, a session's per-call connections) have nothing to end.
    may_run: bool,
}

impl Drop for RunsEnd {
    fn drop(&mut self) {
        if !self.may_run {
            return;
        }
        SESSIONS.lock().unwrap_or_else(|p| p.into_inner()).retain(|_, c| *c != self.connection);
        match self.plans.end_connection(&self.connection) {
            Ok(ended) => {
                for p in ended {
                    tracing::info!(app = %p.app, "the run of plan {} ended: its connection closed", p.id);
                    if let Some(l) = self.told.upgrade() {
                        l.announce(crate::server::LauncherEvent::Changed { app: p.app.clone() });
                    }
                }
            }
            Err(e) => tracing::error!("cannot end the runs of a closed connection: {e:#}"),
        }
    }
}

/// How many lines a caller may send ahead of the answer it waits for.
const QUEUED_LINES: usize = 16;

/// A caller's lines, and whether it is still there.
struct Lines {
    lines: tokio::sync::mpsc::Receiver<Result<Vec<u8>, ()>>,
    /// Lines that came while a tool worked.
    queued: std::collections::VecDeque<Result<Vec<u8>, ()>>,
    stopping: tokio::sync::watch::Receiver<bool>,
    /// Set when the caller's stream ended.
    gone: crate::build::Stop,
}

impl Lines {
    /// The next line; `None` when the caller went away or the launcher stops.
    async fn next(&mut self) -> Option<Result<Vec<u8>, ()>> {
        if let Some(l) = self.queued.pop_front() {
            return Some(l);
        }
        tokio::select! {
            line = self.lines.recv() => line,
            _ = self.stopping.wait_for(|s| *s) => None,
        }
    }

    /// Resolves when the caller goes away or the launcher stops; lines that
    /// come meanwhile are kept for later.
    async fn went_away(&mut self) {
        loop {
            if self.queued.len() >= QUEUED_LINES {
                // A caller that sends without reading is still there, or its
                // stream ends: either way the launcher stopping ends it.
                let _ = self.stopping.wait_for(|s| *s).await;
                return;
            }
            tokio::select! {
                line = self.lines.recv() => match line {
                    Some(l) => self.queued.push_back(l),
                    None => return,
                },
                _ = self.stopping.wait_for(|s| *s) => return,
            }
        }
    }
}

/// How often a long tool says it is still working, when nothing else came.
const STILL_WORKING: Duration = Duration::from_secs(10);

/// Runs one engineer's tool, sending `{"progress": …}` lines while it works
/// (a build's lines, a wait for the person, and a line every
/// [`STILL_WORKING`]); the answer is the last line. `None` when the caller
/// went away or the launcher stops: the tool is dropped with its question,
/// its build is stopped with everything it started, and a change it had not
/// made yet is never made.
async fn engineer_call(
    engineer: &Engineer,
    caller: &Caller,
    tool: &str,
    arguments: Value,
    w: &mut tokio::net::tcp::OwnedWriteHalf,
    lines: &mut Lines,
) -> Option<Value> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let started = tokio::time::Instant::now();
    let gone = lines.gone.clone();
    let work = engineer.call(caller, tool, arguments, &tx, &gone);
    tokio::pin!(work);
    let mut last = String::from("working");
    let mut tick = tokio::time::interval_at(started + STILL_WORKING, STILL_WORKING);
    loop {
        tokio::select! {
            done = &mut work => {
                // What the tool said last is sent before its answer.
                while let Ok(p) = rx.try_recv() {
                    send(w, &json!({ "progress": p })).await.ok()?;
                }
                return Some(match done {
                    Ok(output) => json!({ "ok": true, "output": output }),
                    Err(e) => json!({ "ok": false, "error": { "kind": crate::error::kind_of(&e), "message": format!("{e:#}") } }),
                });
            }
            Some(p) = rx.recv() => {
                last = p.clone();
                send(w, &json!({ "progress": p })).await.ok()?;
            }
            _ = tick.tick() => {
                let secs = started.elapsed().as_secs();
                send(w, &json!({ "progress": format!("still working ({secs} s): {last}") })).await.ok()?;
            }
            () = lines.went_away() => return None,
        }
    }
}

async fn handle(req: Request, launcher: &Arc<Launcher>) -> Value {
    match req {
        Request::Auth { .. } => refuse("this connection is authenticated already"),
        Request::Engineer { .. } | Request::Session => unreachable!("served by the connection's loop"),
        Request::Invoke { app, route, input, client, request_id } => {
            let Ok(app) = AppId::parse(&app) else { return refuse("that is not an app id") };
            let caller = Caller::control(if client.trim().is_empty() { "a local client" } else { &client });
            match launcher.apps.call(&caller, &app, &route, &input.to_string()).await {
                Ok(a) => json!({ "ok": true, "requestId": request_id, "output": a.output }),
                Err(e) => {
                    json!({ "ok": false, "requestId": request_id, "error": { "kind": e.kind, "message": e.message } })
                }
            }
        }
        Request::Prepare { app, release } => {
            let Ok(app) = AppId::parse(&app) else { return refuse("that is not an app id") };
            match launcher.apps.prepare(&app, &release).await {
                Ok(()) => json!({ "ok": true }),
                Err(e) => json!({ "ok": false, "error": { "kind": e.kind, "message": e.message } }),
            }
        }
        Request::Status => {
            let spawn = launcher.apps.containment().describe();
            json!({
                "ok": true, "pid": std::process::id(), "startedAt": launcher.started_at, "serving": launcher.serving(),
                "spawnedPrograms": spawn, "pagesOpen": launcher.apps.gate().pages(),
                "releasesLoaded": launcher.apps.loaded_releases(),
                "workers": launcher.apps.workers(),
            })
        }
        Request::Stop => {
            let serving = launcher.serving();
            launcher.request_stop();
            json!({ "ok": true, "stopping": true, "serving": serving })
        }
        Request::Panel => match launcher.open_panel_url().await {
            Ok((opened, url)) => json!({ "ok": true, "opened": opened, "url": url }),
            Err(e) => refuse(&format!("{e:#}")),
        },
    }
}

/// Asks the launcher running on `root`, if any, to load `release` of `app`
/// before an activation switches to it (`autoapp activate`). Best effort:
/// with no launcher, or one that cannot, nothing is prepared and its first
/// call loads the release as it would have.
pub fn prepare_in_running_launcher(root: &Root, app: &AppId, release: &str) {
    let ask = async {
        let mut c = Client::connect(root).await?;
        c.request(&json!({ "type": "prepare", "app": app, "release": release })).await
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return tracing::debug!("cannot prepare the release in the launcher: {e}"),
    };
    match rt.block_on(async { tokio::time::timeout(PREPARE_DEADLINE, ask).await }) {
        Ok(Ok(v)) if v["ok"] == true => tracing::debug!("the running launcher prepared {app} {release}"),
        Ok(Ok(v)) => tracing::debug!("the running launcher could not prepare {app} {release}: {v}"),
        Ok(Err(e)) => tracing::debug!("no launcher prepared {app} {release}: {e:#}"),
        Err(_) => tracing::debug!("the launcher did not prepare {app} {release} in time"),
    }
}

/// How long `autoapp activate` waits for a running launcher to prepare.
const PREPARE_DEADLINE: Duration = Duration::from_secs(60);

/// A client of a running launcher.
pub struct Client {
    reader: BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: tokio::net::tcp::OwnedWriteHalf,
}

/// The launcher running on `root`: its file, when a launcher holds the
/// root's lock. A file with the lock free is stale: removed while holding the
/// lock (so no launcher starting meanwhile loses its own). Whether the pid in
/// it looks alive from here is never asked: from another PID namespace a live
/// launcher's pid looks dead.
pub fn running(root: &Root) -> anyhow::Result<Option<LauncherFile>> {
    let path = root.dir().join(LAUNCHER_FILE);
    let stale = crate::root::without_launcher(root, || match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            tracing::warn!("cannot remove a stale launcher.json: {e}");
        }
        _ => {}
    })?;
    if stale.is_some() {
        return Ok(None);
    }
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        // Held, and its file not written yet: it is starting.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).context("cannot read launcher.json"),
    };
    Ok(serde_json::from_str(&text).ok())
}

/// The sentence a second launcher refuses to start with: which launcher
/// holds the root (from `launcher.json` when it is readable, else from what
/// the holder wrote into the lock).
pub fn held_by(root: &Root) -> String {
    let file: Option<LauncherFile> =
        std::fs::read_to_string(root.dir().join(LAUNCHER_FILE)).ok().and_then(|t| serde_json::from_str(&t).ok());
    // A launcher writes itself into the lock the moment it has it: a moment's wait.
    let mut holder = crate::root::Holder::default();
    for _ in 0..10 {
        holder = crate::root::launcher_holder(root).ok().flatten().unwrap_or_default();
        if holder.pid != 0 || file.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (pid, since) = match file {
        Some(f) => (f.pid, f.started_at),
        None => (holder.pid, holder.started_at),
    };
    let who = match (pid, since.is_empty()) {
        (0, _) => "another process".to_string(),
        (p, true) => format!("the launcher with pid {p}"),
        (p, false) => format!("the launcher with pid {p}, started {}", crate::elsewhere::text::terminal(&since)),
    };
    format!(
        "{who} holds this root ({}): one root, one launcher. Use `autoapp open` to reach it, or `autoapp stop` to stop it first",
        root.dir().display()
    )
}

impl Client {
    /// Connects to the launcher running on `root` and authenticates.
    pub async fn connect(root: &Root) -> anyhow::Result<Client> {
        let Some(f) = running(root)? else {
            anyhow::bail!("no launcher is running on {}; start one with `autoapp open`", root.dir().display());
        };
        let stream = TcpStream::connect(("127.0.0.1", f.port)).await.context("cannot reach the launcher")?;
        let (r, writer) = stream.into_split();
        let mut c = Client { reader: BufReader::new(r), writer };
        let answer = c.request(&json!({ "type": "auth", "secret": f.secret })).await?;
        anyhow::ensure!(answer["ok"] == true, "the launcher refused the connection");
        Ok(c)
    }

    /// Sends one request and reads its answer.
    pub async fn request(&mut self, v: &Value) -> anyhow::Result<Value> {
        self.request_with_progress(v, |_| {}).await
    }

    /// Sends one request and reads its answer, passing each
    /// `{"progress": …}` line that comes before it to `progress`.
    pub async fn request_with_progress(
        &mut self,
        v: &Value,
        mut progress: impl FnMut(String),
    ) -> anyhow::Result<Value> {
        let mut line = serde_json::to_vec(v)?;
        line.push(b'\n');
        self.writer.write_all(&line).await.context("the launcher went away")?;
        loop {
            let answer: Value = match read_line(&mut self.reader).await? {
                Some(Ok(l)) => {
                    serde_json::from_slice(&l).context("the launcher answered something that is not JSON")?
                }
                _ => anyhow::bail!("the launcher closed the connection"),
            };
            match answer.get("progress").and_then(Value::as_str) {
                Some(p) if answer.get("ok").is_none() => progress(p.to_string()),
                _ => return Ok(answer),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_into_requests_or_a_sentence() {
        assert_eq!(parse_line(br#"{"type":"status"}"#), Ok(Request::Status));
        assert!(matches!(
            parse_line(br#"{"type":"invoke","app":"notes","route":"notes.list"}"#),
            Ok(Request::Invoke { .. })
        ));
        assert!(parse_line(b"not json").unwrap_err().contains("one JSON object"));
        assert!(parse_line(br#"{"type":"format-disk"}"#).unwrap_err().contains("unknown request `format-disk`"));
        assert!(parse_line(br#"{"type":"invoke"}"#).unwrap_err().contains("malformed"));
        assert!(parse_line(br#"[1,2]"#).is_err());
        let big = vec![b' '; MAX_LINE + 1];
        assert!(parse_line(&big).unwrap_err().contains("at most"));
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn the_line_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
                let _ = parse_line(&bytes);
            }

            #[test]
            fn json_shaped_lines_never_panic(kind in "[a-z]{0,8}", app in ".{0,20}", extra in ".{0,20}") {
                let line = serde_json::to_vec(&json!({ "type": kind, "app": app, "route": extra, "secret": extra })).unwrap();
                let _ = parse_line(&line);
            }
        }
    }
}
