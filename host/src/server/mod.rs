//! The launcher a person meets: the panel and one server per app (and per
//! preview), each on its own loopback port, so each is its own origin.
//!
//! Every request passes the [`fence`] first: the `Host` must be this server's
//! own loopback address and port, cross-site requests are refused, a
//! state-changing request must be same-origin, and everything but `/launch`
//! needs this server's session cookie, which only a single-use launch token
//! sets. A page is one pinned renderer script over the view spec the app
//! returns (see `assets/`), served with a CSP that names the script's and the
//! stylesheet's hashes. This module decides nothing the gate decides: calls go
//! to `Apps` as channel `user`; questions are answered through the gate.

mod api;
mod fence;
pub mod folder;
pub mod front;
mod page;

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;
use tokio::sync::{broadcast, watch};

use crate::apps::{Apps, Target};
use crate::config::Config;
use crate::manifest::AppId;

/// At most this many launch tokens live per server; minting one more drops the oldest.
pub const MAX_LIVE_TOKENS: usize = 8;

/// How often one app's page may open the panel, at most.
const PANEL_FROM_AN_APP: Duration = Duration::from_secs(30);

/// What a server serves.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SiteKey {
    Panel,
    App(AppId),
    Preview(AppId, String),
}

impl SiteKey {
    fn target(&self) -> Option<(AppId, Target)> {
        match self {
            SiteKey::Panel => None,
            SiteKey::App(a) => Some((a.clone(), Target::Active)),
            SiteKey::Preview(a, r) => Some((a.clone(), Target::Preview(Some(r.clone())))),
        }
    }
}

/// One server: its port, its live launch tokens and its sessions.
pub struct Site {
    pub key: SiteKey,
    pub port: u16,
    tokens: Mutex<VecDeque<(String, Instant)>>,
    sessions: Mutex<HashSet<String>>,
    stop: watch::Sender<bool>,
}

impl Site {
    fn cookie_name(&self) -> String {
        fence::cookie_name(self.port)
    }

    /// A fresh single-use launch address for this server.
    fn mint(&self, lifetime: Duration) -> String {
        let token = crate::secret::random_hex();
        let mut tokens = self.tokens.lock().expect("tokens");
        let now = Instant::now();
        tokens.retain(|(_, exp)| *exp > now);
        while tokens.len() >= MAX_LIVE_TOKENS {
            tokens.pop_front();
        }
        tokens.push_back((token.clone(), now + lifetime));
        format!("http://127.0.0.1:{}/launch?token={token}", self.port)
    }

    /// Burns `token` if it is live; returns a new session id.
    fn redeem(&self, token: &str) -> Option<String> {
        let mut tokens = self.tokens.lock().expect("tokens");
        let now = Instant::now();
        let pos = tokens.iter().position(|(t, exp)| *exp > now && crate::secret::same(t, token))?;
        tokens.remove(pos);
        let session = crate::secret::random_hex();
        self.sessions.lock().expect("sessions").insert(session.clone());
        Some(session)
    }

    fn has_session(&self, session: &str) -> bool {
        self.sessions.lock().expect("sessions").iter().any(|s| crate::secret::same(s, session))
    }
}

/// Something the pages should hear about that the gate does not say.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum LauncherEvent {
    Activated { app: String, release: String },
    Changed { app: String },
}

/// How tabs are opened.
#[derive(Debug, Clone)]
pub enum Opener {
    /// The operating system's opener, run with the address as its one argument.
    Program(PathBuf),
    /// No opener: the address is printed once to the launcher's terminal.
    Print,
}

impl Opener {
    /// From the `opener` config key: `auto`, `none`, or a program.
    pub fn from_config(choice: &crate::config::OpenerChoice) -> Opener {
        use crate::config::OpenerChoice;
        match choice {
            OpenerChoice::None => Opener::Print,
            OpenerChoice::Auto => {
                let candidates: &[&str] = if cfg!(target_os = "macos") { &["open"] } else { &["xdg-open"] };
                candidates
                    .iter()
                    .find_map(|p| crate::programs::find(p).ok())
                    .map(Opener::Program)
                    .unwrap_or(Opener::Print)
            }
            OpenerChoice::Program(program) => {
                crate::programs::find(program).map(Opener::Program).unwrap_or(Opener::Print)
            }
        }
    }

    /// Opens `url` in the person's browser; returns whether a browser was asked.
    /// The address is never logged; without an opener it is printed once.
    fn open(&self, what: &str, url: &str) -> bool {
        if let Opener::Program(p) = self {
            let spawned = std::process::Command::new(p)
                .arg(url)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn();
            if spawned.is_ok() {
                tracing::info!(what, "asked the system to open a tab");
                return true;
            }
        }
        say!("Open {what}: {url}");
        false
    }

    pub fn available(&self) -> bool {
        matches!(self, Opener::Program(_))
    }
}

/// The most threads one site's runtime has: enough for an app's busiest
/// hour on a person's computer, few enough that a hundred apps do not make
/// thousands of threads.
const SITE_THREADS_MAX: usize = 4;

/// The runtime one site serves on: its own worker threads, as many as the
/// machine has cores (at most [`SITE_THREADS_MAX`]); a single thread on a
/// machine of one core. An app's calls then use the cores the way the
/// peers' servers do (`wasmtime serve` runs a worker per core). Until
/// 2026-12-02 each site had one thread, because two threads of one app made
/// each other's cores flush their TLBs when the pool freed an instance's
/// pages; since freed instances are reset in place (`PAGEMAP_SCAN`, their
/// pages kept mapped) that cost is gone, and a second thread gives P2, P2r
/// and P3c a third more requests (docs/performance.md).
fn site_runtime(port: u16) -> std::io::Result<tokio::runtime::Runtime> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    match cores.min(SITE_THREADS_MAX) {
        1 => tokio::runtime::Builder::new_current_thread().enable_all().build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .thread_name(format!("autoapp-site-{port}-worker"))
            .enable_all()
            .build(),
    }
}

/// The running launcher.
pub struct Launcher {
    pub(crate) apps: Arc<Apps>,
    pub(crate) config: Config,
    opener: Opener,
    sites: Mutex<HashMap<SiteKey, Arc<Site>>>,
    pub(crate) events: broadcast::Sender<LauncherEvent>,
    stop: watch::Sender<bool>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    with_panel: bool,
    last_panel: Mutex<Option<Instant>>,
    /// When each app's page last opened the panel.
    panel_from: Mutex<HashMap<AppId, Instant>>,
    /// The operating system's folder window, for the panel's Create.
    pub(crate) folder: folder::FolderWindow,
    pub started_at: String,
    /// This launcher start's id (random): with a connection's number, what a
    /// run, a session and a plan's author are bound to.
    pub id: String,
    /// The apps' workers, which serve each app's own server on the socket
    /// the launcher opens (none: the launcher serves them itself).
    workers: std::sync::OnceLock<crate::worker::pool::Workers>,
    /// Per app (`""`: the launcher's own), when the pages may next hear it
    /// changed, and whether a last word is already due then.
    changes: Arc<Mutex<HashMap<String, (Instant, bool)>>>,
}

/// How often the pages hear that one app changed, at most: each write of its
/// page and each word of its worker is one, and every panel that hears it
/// reads the launcher's whole state again (a worker taken by an escape can
/// make thousands a second). The last one is never lost: it comes at the end
/// of its quarter.
const CHANGED_EVERY: Duration = Duration::from_millis(250);

/// Whether a tab was opened by the system or its address printed.
#[derive(Debug, Serialize)]
pub struct Opened {
    pub opened: bool,
    pub message: String,
}

impl Launcher {
    /// The launcher start `id` (its lock taken at `started_at`) over `apps`.
    pub fn new(
        apps: Arc<Apps>,
        config: Config,
        opener: Opener,
        with_panel: bool,
        id: String,
        started_at: String,
    ) -> Arc<Launcher> {
        let (events, _) = broadcast::channel(256);
        let (stop, _) = watch::channel(false);
        Arc::new(Launcher {
            apps,
            config,
            opener,
            sites: Mutex::default(),
            events,
            stop,
            tasks: Mutex::default(),
            with_panel,
            last_panel: Mutex::default(),
            panel_from: Mutex::default(),
            folder: folder::FolderWindow::default(),
            started_at,
            id,
            workers: std::sync::OnceLock::new(),
            changes: Arc::default(),
        })
    }

    /// From now on each app's own server is served by its worker
    /// (`server::front`) on the socket the launcher opens and keeps.
    pub fn serve_through(&self, workers: crate::worker::pool::Workers) {
        let _ = self.workers.set(workers);
    }

    pub fn apps(&self) -> &Arc<Apps> {
        &self.apps
    }

    /// The apps served now (those with a running server), by id.
    pub fn serving(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .sites
            .lock()
            .expect("sites")
            .keys()
            .filter_map(|k| match k {
                SiteKey::App(a) => Some(a.to_string()),
                _ => None,
            })
            .collect();
        v.sort();
        v
    }

    /// The server for `key`, started if it is not running. Each server runs
    /// on threads of its own ([`site_runtime`]): an app's requests, the guest
    /// code they run and its store work all stay on them, so one app's load
    /// never takes another app's threads.
    pub async fn site(self: &Arc<Self>, key: SiteKey) -> anyhow::Result<Arc<Site>> {
        if let Some(s) = self.sites.lock().expect("sites").get(&key) {
            return Ok(s.clone());
        }
        let listener = std::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .context("cannot listen on a loopback port")?;
        listener.set_nonblocking(true).context("cannot listen on a loopback port")?;
        let port = listener.local_addr()?.port();
        let (site_stop, mut site_stopped) = watch::channel(false);
        let site = Arc::new(Site {
            key: key.clone(),
            port,
            tokens: Mutex::default(),
            sessions: Mutex::default(),
            stop: site_stop,
        });
        let router = api::router(self.clone(), site.clone());
        if let (SiteKey::App(app), Some(workers)) = (&key, self.workers.get()) {
            // Its worker serves it; the launcher answers what it sends on.
            let door = AppDoor { launcher: Arc::downgrade(self), site: site.clone(), router, app: app.clone() };
            workers.serve_site(app, listener, Arc::new(door))?;
            self.sites.lock().expect("sites").insert(key, site.clone());
            return Ok(site);
        }
        let mut stop = self.stop.subscribe();
        let shutdown = async move {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => {}
                _ = site_stopped.wait_for(|s| *s) => {}
            }
        };
        let (ended, on_end) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(format!("autoapp-site-{port}"))
            .spawn(move || {
                let served = site_runtime(port).map(|rt| {
                    rt.block_on(async move {
                        let listener = tokio::net::TcpListener::from_std(listener)?;
                        axum::serve(listener, router).with_graceful_shutdown(shutdown).await
                    })
                });
                if let Err(e) = served.and_then(|r| r) {
                    tracing::error!("a server stopped: {e}");
                }
                let _ = ended.send(());
            })
            .context("cannot start a server's thread")?;
        // The launcher's shutdown waits for each server's thread to end.
        let task = tokio::spawn(async move {
            let _ = on_end.await;
        });
        self.tasks.lock().expect("tasks").push(task);
        self.sites.lock().expect("sites").insert(key, site.clone());
        Ok(site)
    }

    /// Starts the panel (when this launcher has one) and a server for every app
    /// with an active release.
    pub async fn start(self: &Arc<Self>) -> anyhow::Result<()> {
        if self.with_panel {
            self.site(SiteKey::Panel).await?;
        }
        for id in self.apps.root().app_ids()? {
            if crate::release::active(&self.apps.root().app(&id)).ok().flatten().is_some() {
                self.site(SiteKey::App(id)).await?;
            }
        }
        Ok(())
    }

    /// Opens a tab of `key` through the operating system, minting a fresh
    /// single-use address that only the opener (or the terminal) sees.
    pub async fn open(self: &Arc<Self>, key: SiteKey) -> anyhow::Result<Opened> {
        // Only a preview that is running has a server to open.
        if let SiteKey::Preview(app, release) = &key {
            let running = crate::lifecycle::previews(&self.apps.root().app(app)).unwrap_or_default();
            anyhow::ensure!(
                running.iter().any(|p| p.release == *release),
                "{app} has no running preview of {}; start one with Preview (or `autoapp preview {app} RELEASE`)",
                crate::release::short(release)
            );
        }
        let what = match &key {
            SiteKey::Panel => "the Autoapp panel".to_string(),
            SiteKey::App(a) => format!("{a}"),
            SiteKey::Preview(a, r) => format!("the preview of {a} {}", crate::release::short(r)),
        };
        let site = self.site(key).await?;
        let url = site.mint(Duration::from_secs(self.config.launch_token_secs));
        let opened = self.opener.open(&what, &url);
        let message = if opened {
            format!("opened {what} in your browser")
        } else {
            format!("no browser could be opened: the address of {what} is printed in the launcher's terminal")
        };
        Ok(Opened { opened, message })
    }

    fn panel_allowed(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.with_panel,
            "this launcher serves one app and has no panel; start one with `autoapp open`"
        );
        let mut last = self.last_panel.lock().expect("panel rate");
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(2)) {
            anyhow::bail!("a panel address was issued less than 2 seconds ago; try again in a moment");
        }
        *last = Some(Instant::now());
        tracing::info!("a panel address was issued");
        Ok(())
    }

    /// Opens the panel for a page of `app` (the app's mark): at most once
    /// per 2 seconds, and once per [`PANEL_FROM_AN_APP`] for each app. (An
    /// app's server is its worker's: one taken by an escape could ask for it
    /// again and again, and the person's browser would open a tab each time.)
    pub async fn open_panel(self: &Arc<Self>, app: &AppId) -> anyhow::Result<Opened> {
        {
            let mut from = self.panel_from.lock().expect("panel rate");
            from.retain(|_, at: &mut Instant| at.elapsed() < PANEL_FROM_AN_APP);
            anyhow::ensure!(
                !from.contains_key(app),
                "{app}'s page opened the panel less than {} seconds ago; its tab is in your browser",
                PANEL_FROM_AN_APP.as_secs()
            );
            self.panel_allowed()?;
            from.insert(app.clone(), Instant::now());
        }
        self.open(SiteKey::Panel).await
    }

    /// For a local process over the control connection: opens the panel
    /// through the opener, or hands the address back (it holds the secret, so
    /// it could reach the panel anyway) when there is no opener.
    pub async fn open_panel_url(self: &Arc<Self>) -> anyhow::Result<(bool, Option<String>)> {
        self.panel_allowed()?;
        let site = self.site(SiteKey::Panel).await?;
        let url = site.mint(Duration::from_secs(self.config.launch_token_secs));
        if let Opener::Program(_) = &self.opener
            && self.opener.open("the Autoapp panel", &url)
        {
            return Ok((true, None));
        }
        Ok((false, Some(url)))
    }

    /// Stops serving `key` (its calls in flight finish).
    pub fn stop_site(&self, key: &SiteKey) {
        if let Some(site) = self.sites.lock().expect("sites").remove(key) {
            let _ = site.stop.send(true);
            if let (SiteKey::App(app), Some(workers)) = (key, self.workers.get()) {
                workers.unserve_site(app);
            }
        }
    }

    /// Stops every server of `app` (its tab and its previews).
    pub fn stop_app(&self, app: &AppId) {
        let keys: Vec<SiteKey> = self
            .sites
            .lock()
            .expect("sites")
            .keys()
            .filter(|k| matches!(k, SiteKey::App(a) | SiteKey::Preview(a, _) if a == app))
            .cloned()
            .collect();
        for k in keys {
            self.stop_site(&k);
        }
    }

    /// Tells the pages about an app's change: an app's data changing at
    /// most once each [`CHANGED_EVERY`] (the first at once, the last at the
    /// end of its quarter).
    pub(crate) fn announce(&self, event: LauncherEvent) {
        let LauncherEvent::Changed { app } = &event else {
            let _ = self.events.send(event);
            return;
        };
        let now = Instant::now();
        let mut changes = self.changes.lock().expect("changes");
        // (The app's name copied only the first time: each write comes here.)
        if !changes.contains_key(app) {
            changes.insert(app.clone(), (now, false));
        }
        let (next, due) = changes.get_mut(app).expect("just put there");
        if now >= *next {
            *next = now + CHANGED_EVERY;
            drop(changes);
            let _ = self.events.send(event);
        } else if !*due && let Ok(runtime) = tokio::runtime::Handle::try_current() {
            *due = true;
            let (at, app) = (*next, app.clone());
            let (events, changes) = (self.events.clone(), self.changes.clone());
            runtime.spawn(async move {
                tokio::time::sleep_until(at.into()).await;
                if let Some(c) = changes.lock().expect("changes").get_mut(&app) {
                    *c = (Instant::now() + CHANGED_EVERY, false);
                }
                let _ = events.send(event);
            });
        }
    }

    /// Stops every server after the calls in flight finish, and flushes the record.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let tasks: Vec<_> = std::mem::take(&mut *self.tasks.lock().expect("tasks"));
        for t in tasks {
            let _ = t.await;
        }
        self.apps.flush_record();
    }

    /// A receiver that fires when the launcher stops.
    pub(crate) fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Keeps `task` so that the shutdown waits for it.
    pub(crate) fn keep(&self, task: tokio::task::JoinHandle<()>) {
        self.tasks.lock().expect("tasks").push(task);
    }

    /// Asks the launcher to stop (the same path as Ctrl+C).
    pub fn request_stop(&self) {
        let _ = self.stop.send(true);
    }
}

/// The launcher's side of an app's server that its worker serves: the
/// tokens and sessions stay here, and what the worker sends on is answered
/// by the launcher's own router for that server (behind its fence).
struct AppDoor {
    launcher: std::sync::Weak<Launcher>,
    site: Arc<Site>,
    router: axum::Router,
    app: AppId,
}

impl crate::worker::pool::Door for AppDoor {
    fn sessions(&self) -> Vec<String> {
        self.site.sessions.lock().expect("sessions").iter().cloned().collect()
    }

    fn redeem(&self, token: &str) -> Option<String> {
        self.site.redeem(token)
    }

    fn forward(&self, request: axum::http::Request<Vec<u8>>) -> crate::apps::BoxFuture<crate::worker::pool::SentBack> {
        use futures::StreamExt as _;
        use tower::ServiceExt as _;
        let router = self.router.clone();
        Box::pin(async move {
            let response = match router.oneshot(request.map(axum::body::Body::from)).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            let (parts, body) = response.into_parts();
            let headers = parts
                .headers
                .iter()
                .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
                .collect();
            let length = http_body::Body::size_hint(&body).exact();
            // Its pieces until its end (or a piece it could not make).
            let body = body.into_data_stream().take_while(|piece| std::future::ready(piece.is_ok()));
            let body = body.filter_map(|piece| std::future::ready(piece.ok().map(|b| b.to_vec()))).boxed();
            crate::worker::pool::SentBack { status: parts.status.as_u16(), headers, length, body }
        })
    }

    fn note(&self, release: &str) {
        let Some(launcher) = self.launcher.upgrade() else { return };
        // The worker's words: a release of its app that is there, or
        // nothing (each name noted while the app is locked waits on a
        // thread of its own, and a worker may say any name).
        let paths = launcher.apps.root().app(&self.app);
        if crate::release::is_release_id(release) && paths.release(release).is_dir() {
            launcher.apps.note_first_write(&self.app, release);
        }
    }

    fn changed(&self) {
        if let Some(launcher) = self.launcher.upgrade() {
            launcher.announce(LauncherEvent::Changed { app: self.app.to_string() });
        }
    }

    fn serve_here(
        &self,
        listener: tokio::net::TcpListener,
        until: crate::apps::BoxFuture<()>,
    ) -> crate::apps::BoxFuture<()> {
        let router = self.router.clone();
        Box::pin(async move {
            if let Err(e) = axum::serve(listener, router).with_graceful_shutdown(until).await {
                tracing::error!("a server stopped: {e}");
            }
        })
    }
}
