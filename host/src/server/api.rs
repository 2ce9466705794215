//! The routes of the panel and of an app's server. Every handler acts as the
//! person (channel `user`): the fence already made sure the request came from
//! a tab the person opened.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use futures::Stream;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Launcher, LauncherEvent, Site, SiteKey, fence, page};
use crate::apps::{CallError, ErrorKind, Target};
use crate::gate::{Caller, GateEvent};
use crate::lifecycle::RollbackHow;
use crate::manifest::AppId;
use crate::release;
use crate::release::short;

#[derive(Clone)]
struct Ctx {
    launcher: Arc<Launcher>,
    site: Arc<Site>,
}

pub fn router(launcher: Arc<Launcher>, site: Arc<Site>) -> Router {
    let ctx = Ctx { launcher, site: site.clone() };
    let common = Router::new()
        .route("/launch", get(launch))
        .route("/api/events", get(events))
        .route("/api/answer", post(answer));
    let routes = match site.key {
        SiteKey::Panel => common
            .route("/", get(|| async { html(page::panel()) }))
            .route("/api/state", get(state))
            .route("/api/explain/{app}/{release}", get(explain))
            .route("/api/open", post(open))
            .route("/api/activate", post(activate))
            .route("/api/grant", post(grant))
            .route("/api/revoke", post(revoke))
            .route("/api/secret", post(secret))
            .route("/api/preview", post(preview))
            .route("/api/preview-stop", post(preview_stop))
            .route("/api/rollback", post(rollback))
            .route("/api/remove", post(remove))
            .route("/api/workflow", post(workflow))
            .route("/api/quit", post(quit))
            .route("/api/create", post(create))
            .route("/api/standing", post(standing))
            .route("/api/plan", post(plan))
            .route("/api/choose-folder", post(choose_folder))
            .route("/api/choose-package", post(choose_package))
            .route("/api/install", post(install))
            .route("/api/backup", post(backup))
            .route("/api/space", get(space))
            .route("/api/prune", post(prune)),
        _ => common
            .route("/", get(|| async { html(page::app()) }))
            .route("/api/info", get(info))
            .route("/api/view/{page}", get(view))
            .route("/api/call/{route}", post(call))
            .route("/api/panel", post(panel)),
    };
    routes
        .with_state(ctx)
        .layer(axum::middleware::from_fn_with_state(site, fence::middleware))
        .layer(axum::middleware::map_response(hardening))
}

pub(super) async fn hardening(mut res: Response) -> Response {
    let h = res.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    res
}

pub(super) fn html(p: &page::Page) -> Response {
    let mut res =
        (StatusCode::OK, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], p.html.clone()).into_response();
    res.headers_mut()
        .insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_str(&p.csp).expect("a CSP is a header value"));
    res
}

/// An error as the pages read it: `{"error": {"kind", "message"}}`.
pub(super) fn error(kind: ErrorKind, message: impl Into<String>) -> Response {
    let status = match kind {
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::InvalidInput => StatusCode::BAD_REQUEST,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Denied => StatusCode::FORBIDDEN,
        ErrorKind::Trap => StatusCode::BAD_GATEWAY,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, axum::Json(json!({ "error": { "kind": kind, "message": message.into() } }))).into_response()
}

pub(super) fn call_error(e: CallError) -> Response {
    error(e.kind, e.message)
}

/// A lifecycle action's error, with the status of its kind (a missing app or
/// release is 404, a wrong capability name 400, a state that does not allow it
/// 409), and the whole cause chain.
fn refusal(e: anyhow::Error) -> Response {
    error(crate::error::kind_of(&e), format!("{e:#}"))
}

#[derive(Deserialize)]
struct LaunchQuery {
    token: Option<String>,
}

async fn launch(State(ctx): State<Ctx>, Query(q): Query<LaunchQuery>) -> Response {
    let Some(session) = q.token.as_deref().and_then(|t| ctx.site.redeem(t)) else {
        return fence::refused();
    };
    launched(&ctx.site.cookie_name(), &session)
}

/// The answer to a launch token redeemed: the session's cookie, and the page.
pub(super) fn launched(cookie_name: &str, session: &str) -> Response {
    let cookie = format!("{cookie_name}={session}; HttpOnly; SameSite=Strict; Path=/");
    let mut res = Redirect::to("/").into_response();
    res.headers_mut().insert(header::SET_COOKIE, HeaderValue::from_str(&cookie).expect("a cookie is a header value"));
    res
}

fn app_of(ctx: &Ctx) -> Option<(AppId, Target)> {
    ctx.site.key.target()
}

async fn info(State(ctx): State<Ctx>) -> Response {
    let Some((app, target)) = app_of(&ctx) else { return error(ErrorKind::NotFound, "no app here") };
    let paths = ctx.launcher.apps.root().app(&app);
    let release = match &target {
        Target::Preview(Some(r)) => Some(r.clone()),
        _ => release::active(&paths).ok().flatten(),
    };
    let name = release.as_deref().and_then(|r| release::manifest(&paths, r).ok()).map(|m| m.name).unwrap_or_default();
    axum::Json(json!({
        "app": app, "name": name, "release": release, "preview": matches!(target, Target::Preview(_)),
        "panel": ctx.launcher.with_panel,
    }))
    .into_response()
}

#[derive(Deserialize)]
struct ViewQuery {
    query: Option<String>,
}

async fn view(State(ctx): State<Ctx>, Path(page): Path<String>, Query(q): Query<ViewQuery>) -> Response {
    let Some((app, target)) = app_of(&ctx) else { return error(ErrorKind::NotFound, "no app here") };
    let query = q.query.unwrap_or_else(|| "{}".into());
    match ctx.launcher.apps.render_at(&Caller::page(), &app, &target, &page, &query).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => call_error(e),
    }
}

async fn call(State(ctx): State<Ctx>, Path(route): Path<String>, body: String) -> Response {
    let Some((app, target)) = app_of(&ctx) else { return error(ErrorKind::NotFound, "no app here") };
    let input = if body.trim().is_empty() { "{}".to_string() } else { body };
    match ctx.launcher.apps.call_at(&Caller::page(), &app, &target, &route, &input).await {
        Ok(a) => {
            if a.effect.writes() {
                ctx.launcher.announce(LauncherEvent::Changed { app: app.to_string() });
            }
            axum::Json(a.output).into_response()
        }
        Err(e) => call_error(e),
    }
}

async fn panel(State(ctx): State<Ctx>) -> Response {
    let Some((app, _)) = app_of(&ctx) else { return error(ErrorKind::NotFound, "no app here") };
    match ctx.launcher.open_panel(&app).await {
        Ok(o) => axum::Json(o).into_response(),
        Err(e) => error(ErrorKind::Conflict, format!("{e:#}")),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnswerBody {
    request_id: String,
    release_id: String,
    arguments_hash: String,
    approve: bool,
    /// "Allow, and stop asking": approve, and turn the standing approval on.
    #[serde(default)]
    standing: bool,
}

async fn answer(State(ctx): State<Ctx>, axum::Json(b): axum::Json<AnswerBody>) -> Response {
    let gate = ctx.launcher.apps.gate();
    let question = gate.pending().into_iter().find(|q| q.request_id == b.request_id);
    // An app's tab answers only its own app's questions; the panel answers any.
    let caller = match app_of(&ctx) {
        Some((app, _)) => {
            if question.as_ref().is_none_or(|q| q.app_id != app.as_str()) {
                return error(ErrorKind::NotFound, "that question is not waiting in this app");
            }
            Caller::page()
        }
        None => Caller::panel(),
    };
    if b.standing {
        // The card's third button: offered only in the panel, for a question
        // the standing approval would cover, and only as a yes. Never from an
        // app's tab: an app's server is its worker's, and the switch holds
        // for the engineer's work on every app (a worker taken by an escape
        // could forward the answer with its tab's session).
        if app_of(&ctx).is_some() {
            return error(
                ErrorKind::Denied,
                "\"Allow, and stop asking\" is answered in the panel only: it holds for every app",
            );
        }
        if !b.approve || !question.as_ref().is_some_and(|q| q.standing_covers) {
            return error(
                ErrorKind::InvalidInput,
                "\"Allow, and stop asking\" answers only a question the standing approval covers, and only with a yes",
            );
        }
        // The answer must fit the question before the switch is turned on.
        if question.as_ref().is_some_and(|q| q.release_id != b.release_id || q.arguments_hash != b.arguments_hash) {
            return error(
                ErrorKind::Conflict,
                "the answer does not fit the question it names; reload and answer again",
            );
        }
        let apps = ctx.launcher.apps.clone();
        let set = tokio::task::spawn_blocking(move || crate::gate::standing::set(apps.root(), &caller, true)).await;
        match set {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return refusal(e),
            Err(e) => return error(ErrorKind::Internal, e.to_string()),
        }
        ctx.launcher.announce(LauncherEvent::Changed { app: String::new() });
    }
    match gate.answer(&b.request_id, &b.release_id, &b.arguments_hash, b.approve) {
        Ok(()) => axum::Json(json!({ "message": if b.approve { "approved" } else { "declined" } })).into_response(),
        Err(e) => error(ErrorKind::Conflict, e.to_string()),
    }
}

/// Server-sent events: questions asked and answered, activations. While the
/// stream is open, the app (or, for the panel, every app) counts as attached.
async fn events(State(ctx): State<Ctx>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let app = app_of(&ctx).map(|(a, _)| a);
    let gate = ctx.launcher.apps.gate().clone();
    let attachment = gate.attach(app.clone());
    // An app's tab never offers "Allow, and stop asking" (`answer`).
    let panel = app.is_none();
    let mine = move |a: &str| app.as_ref().is_none_or(|x| x.as_str() == a);
    let shown = move |mut q: crate::gate::Question| {
        q.standing_covers &= panel;
        q
    };
    let questions: Vec<_> = gate.pending().into_iter().filter(|q| mine(&q.app_id)).map(shown).collect();
    let hello = Event::default().event("hello").json_data(json!({ "questions": questions })).expect("JSON");
    let state = (gate.subscribe(), ctx.launcher.events.subscribe(), ctx.launcher.stopping(), attachment, mine);
    let rest = futures::stream::unfold(state, move |(mut g, mut l, mut stop, att, mine)| async move {
        loop {
            let event = tokio::select! {
                _ = stop.wait_for(|s| *s) => return None,
                e = g.recv() => match e {
                    Ok(GateEvent::Asked { question }) if mine(&question.app_id) => {
                        Event::default().event("asked").json_data(json!({ "question": shown(*question) }))
                    }
                    Ok(GateEvent::Answered { request_id, app_id, outcome }) if mine(&app_id) => Event::default()
                        .event("answered")
                        .json_data(json!({ "request_id": request_id, "app_id": app_id, "outcome": outcome })),
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(_) => return None,
                },
                e = l.recv() => match e {
                    Ok(LauncherEvent::Activated { app, release }) if mine(&app) => {
                        Event::default().event("activated").json_data(json!({ "app": app, "release": release }))
                    }
                    Ok(LauncherEvent::Changed { app }) if mine(&app) => {
                        Event::default().event("changed").json_data(json!({ "app": app }))
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(_) => return None,
                },
            };
            return Some((Ok(event.expect("JSON")), (g, l, stop, att, mine)));
        }
    });
    Sse::new(futures::StreamExt::chain(futures::stream::once(async { Ok(hello) }), rest))
        // A comment every second: a tab that was closed is noticed (and stops
        // counting as a page that can answer) within about a second.
        .keep_alive(KeepAlive::new().interval(std::time::Duration::from_secs(1)))
}

// ---- the panel ------------------------------------------------------------------

async fn state(State(ctx): State<Ctx>) -> Response {
    let apps = ctx.launcher.apps.clone();
    let workers = apps.workers().unwrap_or_default();
    let result = tokio::task::spawn_blocking(move || -> anyhow::Result<Value> {
        let root = apps.root();
        let mut list = Vec::new();
        for id in root.app_ids()? {
            let paths = root.app(&id);
            let active = release::active(&paths).ok().flatten();
            let all = release::list(&paths).unwrap_or_default();
            let active_info = all.iter().find(|r| Some(&r.id) == active.as_ref());
            let candidates: Vec<_> = all.iter().rev().filter(|r| Some(&r.id) != active.as_ref()).collect();
            let newest = active.clone().or_else(|| all.last().map(|r| r.id.clone()));
            let manifest = newest.as_deref().and_then(|r| release::manifest(&paths, r).ok());
            let (asked, not_granted, asked_whole) = match &manifest {
                Some(m) => (
                    crate::grants::asked(m),
                    crate::grants::ungranted(&paths, m).unwrap_or_default(),
                    crate::grants::asked_whole(root.dir(), m),
                ),
                None => (Vec::new(), Vec::new(), Vec::new()),
            };
            let granted_as = crate::grants::targets(&crate::grants::load(&paths).unwrap_or_default());
            // The keys the release declares and what is set: never a value.
            let secrets = match &manifest {
                Some(m) if !m.capabilities.secret.is_empty() => {
                    crate::secrets::listed_here(&paths, m).unwrap_or_default()
                }
                _ => Vec::new(),
            };
            let rollback = release::journal::activation(&paths).ok().flatten().and_then(|a| {
                (Some(&a.release) == active.as_ref() && a.previous.is_some()).then(|| {
                    let written = a.first_write_at.is_some();
                    // Where a downgrade could go (it keeps the writes).
                    let downgrades = match written {
                        true => crate::lifecycle::downgrades(&paths).unwrap_or_default(),
                        false => Vec::new(),
                    };
                    json!({ "previous": a.previous, "written": written, "downgrades": downgrades })
                })
            });
            let its_workers: Vec<&Value> =
                workers.as_array().into_iter().flatten().filter(|w| w["app"] == id.as_str()).collect();
            list.push(json!({
                "id": id,
                "workers": its_workers,
                "name": manifest.as_ref().map(|m| m.name.clone()).unwrap_or_else(|| id.to_string()),
                "active": active_info,
                "candidates": candidates,
                "previews": crate::lifecycle::previews(&paths).unwrap_or_default(),
                "asked": asked,
                "asked_whole": asked_whole,
                "granted_as": granted_as,
                "not_granted": not_granted,
                "secrets": secrets,
                "rollback": rollback,
                "runs": crate::gate::record::read(&paths.data(), 20).unwrap_or_default(),
                "plans": apps.plans().list(&id, PLANS_SHOWN).unwrap_or_default(),
                "removal": {
                    // What Remove moves to the trash, and what it leaves.
                    "trash": root.dir().join("trash").display().to_string(),
                    "releases": all.len(),
                    "workspace": crate::workspace::of(&paths).ok().map(|w| w.display().to_string()),
                    "workspace_moves": !paths.workspace_pointer().exists(),
                },
                "last_backup": crate::housekeeping::backup::last(&paths),
                "source": crate::packages::source_of(&paths, &all, active.as_ref()),
                "log": crate::applog::tail(&crate::applog::dir_of(&paths.dir), LOG_LINES_SHOWN)
                    .unwrap_or_default()
                    .iter()
                    .map(crate::applog::Line::text)
                    .collect::<Vec<_>>(),
                "workflows": if active.is_some() {
                    crate::workflows::status(root, &id, chrono::Local::now()).unwrap_or_default()
                } else {
                    Vec::new()
                },
            }));
        }
        Ok(json!({ "apps": list }))
    })
    .await;
    match result {
        Ok(Ok(mut v)) => {
            v["opener"] = json!(ctx.launcher.opener.available());
            v["standing"] = json!(crate::gate::standing::since(&crate::gate::standing::file(ctx.launcher.apps.root())));
            axum::Json(v).into_response()
        }
        Ok(Err(e)) => refusal(e),
        Err(e) => error(ErrorKind::Internal, e.to_string()),
    }
}

async fn explain(State(ctx): State<Ctx>, Path((app, rel)): Path<(String, String)>) -> Response {
    let id = match AppId::parse(&app) {
        Ok(i) => i,
        Err(e) => return error(ErrorKind::InvalidInput, e),
    };
    let paths = ctx.launcher.apps.root().app(&id);
    match release::resolve(&paths, &rel).and_then(|r| crate::explain::explain(&paths, &r)) {
        Ok(e) => axum::Json(e).into_response(),
        Err(e) => error(ErrorKind::NotFound, format!("{e:#}")),
    }
}

#[derive(Deserialize)]
struct AppBody {
    app: String,
    release: Option<String>,
    preview: Option<String>,
    #[serde(default)]
    capabilities: Vec<String>,
    how: Option<String>,
    #[serde(default)]
    yes: bool,
    confirm: Option<String>,
}

async fn open(State(ctx): State<Ctx>, axum::Json(b): axum::Json<AppBody>) -> Response {
    let id = match AppId::parse(&b.app) {
        Ok(i) => i,
        Err(e) => return error(ErrorKind::InvalidInput, e),
    };
    let key = match b.preview {
        Some(r) => SiteKey::Preview(id, r),
        None => SiteKey::App(id),
    };
    match ctx.launcher.open(key).await {
        Ok(o) => axum::Json(o).into_response(),
        Err(e) => refusal(e),
    }
}

/// Runs a lifecycle action off the async threads and answers with its message.
async fn blocking<F>(ctx: &Ctx, f: F) -> Response
where
    F: FnOnce(&crate::apps::Apps) -> anyhow::Result<String> + Send + 'static,
{
    let apps = ctx.launcher.apps.clone();
    match tokio::task::spawn_blocking(move || f(&apps)).await {
        Ok(Ok(message)) => axum::Json(json!({ "message": message })).into_response(),
        Ok(Err(e)) => refusal(e),
        Err(e) => error(ErrorKind::Internal, e.to_string()),
    }
}

async fn activate(State(ctx): State<Ctx>, axum::Json(b): axum::Json<AppBody>) -> Response {
    let id = match AppId::parse(&b.app) {
        Ok(i) => i,
        Err(e) => return error(ErrorKind::InvalidInput, e),
    };
    let Some(rel) = b.release else { return error(ErrorKind::InvalidInput, "name the release to activate") };
    let app = id.clone();
    let res = blocking(&ctx, move |apps| {
        let a = apps.activate(&Caller::panel(), &app, &rel)?;
        Ok(format!("activated {} {} ({})", a.app, short(&a.release), a.migrations_said()))
    })
    .await;
    if res.status().is_success() {
        // The person activated it from the panel: its tab opens, through the
        // opener (or the launcher's terminal), never as an address in a page.
        if let Err(e) = ctx.launcher.open(SiteKey::App(id.clone())).await {
            tracing::error!("cannot serve {id}: {e:#}");
        }
        let release = release::active(&ctx.launcher.apps.root().app(&id)).ok().flatten().unwrap_or_default();
        ctx.launcher.announce(LauncherEvent::Activated { app: id.to_string(), release });
    }
    res
}

async fn grant(State(ctx): State<Ctx>, axum::Json(b): axum::Json<AppBody>) -> Response {
    let id = match AppId::parse(&b.app) {
        Ok(i) => i,
        Err(e) => return error(ErrorKind::InvalidInput, e),
    };
    blocking(&ctx, move |apps| {
        let which = crate::grants::Asked::Named(b.capabilities);
        Ok(format!(
            "granted {}",
            crate::grants::grant_newest(&Caller::panel(), &apps.root().app(&id), which)?.join(", ")
        ))
    })
    .await
}

#[derive(Deserialize)]
struct SecretBody {
    app: String,
    name: String,
    /// The key itself, to set it; never echoed, logged or kept by the page.
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    remove: bool,
}

/// The panel's Set, Replace and Remove of a key (`crate::secrets`): the
/// person's action, on channel `user`, recorded without the value.
async fn secret(State(ctx): State<Ctx>, axum::Json(b): axum::Json<SecretBody>) -> Response {
    let id = match AppId::parse(&b.app) {
        Ok(i) => i,
        Err(e) => return error(ErrorKind::InvalidInput, e),
    };
    blocking(&ctx, move |apps| {
        let vault = apps.vault()?;
        if b.remove {
            crate::secrets::remove(apps.root(), vault, &Caller::panel(), &id, &b.name)?;
            return Ok(format!("removed the key {}: {id}'s requests go without it", b.name));
        }
        let value = crate::secrets::Value::new(b.value.unwrap_or_default());
        crate::secrets::vault::check_value(value.expose())
            .map_err(|e| crate::error::kinded(ErrorKind::InvalidInput, format!("{e:#}")))?;
        let (cap, set) = crate::secrets::set(apps.root(), vault, &Caller::panel(), &id, &b.name, &value, None)?;
        Ok(format!(
            "set {}: sent only to {} ({}); kept in the {}",
            cap.name,
            cap.binding.origin,
            cap.binding.place,
            crate::secrets::kept_said(set.kept)
        ))
    })
    .await
}

#[derive(Deserialize)]
struct CreateBody {
    app: String,
    /// Where its workspace goes: a whole path (or `~/…`); none for the root.
    #[serde(default)]
    location: Option<String>,
}

#[derive(Deserialize)]
struct StandingBody {
    on: bool,
}

/// The panel's switch "Work without asking" (the person, channel `user`).
async fn standing(State(ctx): State<Ctx>, axum::Json(b): axum::Json<StandingBody>) -> Response {
    let res = blocking(&ctx, move |apps| {
        crate::gate::standing::set(apps.root(), &Caller::panel(), b.on)?;
        Ok(if b.on {
            "the engineer works without asking: its edits, builds and previews are approved by your standing approval"
        } else {
            "the engineer asks again: every edit, build and preview waits for you"
        }
        .to_string())
    })
    .await;
    ctx.launcher.announce(LauncherEvent::Changed { app: String::new() });
    res
}

/// How many of an app's newest plans the panel shows.
const PLANS_SHOWN: usize = 10;

#[derive(Deserialize)]
struct PlanBody {
    app: String,
    /// `stop` (the running plan) or `reject` (a plan that waits, or a draft).
    action: String,
    plan: Option<u64>,
}

/// The panel's Stop and Reject of an engineer's plan (the person, channel `user`).
async fn plan(State(ctx): State<Ctx>, axum::Json(b): axum::Json<PlanBody>) -> Response {
    let id = match AppId::parse(&b.app) {
        Ok(i) => i,
        Err(e) => return error(ErrorKind::InvalidInput, e),
    };
    let res = blocking(&ctx, move |apps| {
        let me = Caller::panel();
        Ok(match b.action.as_str() {
            "stop" => {
                let p = apps.plans().stop(&me, &id, b.plan)?;
                format!("stopped the run of plan {} of {id}: the engineer's next change asks you again", p.id)
            }
            "reject" => {
                let p = apps.plans().reject(&me, &id, b.plan)?;
                format!("rejected plan {} of {id}", p.id)
            }
            other => {
                return Err(crate::error::kinded(
                    ErrorKind::InvalidInput,
                    format!("`{}` is not an action on a plan; stop or reject", other.escape_debug()),
                ));
            }
        })
    })
    .await;
    ctx.launcher.announce(LauncherEvent::Changed { app: b.app.clone() });
    res
}

/// The panel's Create (the person, channel `user`): the starter template in
/// the chosen folder, under the same rules as `create --at`; then the new
/// app's tab opens, through the opener, the way Open does.
async fn create(State(ctx): State<Ctx>, axum::Json(b): axum::Json<CreateBody>) -> Response {
    let id = match AppId::parse(&b.app) {
        Ok(i) => i,
        Err(e) => return error(ErrorKind::InvalidInput, e),
    };
    let location = match b.location.as_deref().map(str::trim).filter(|l| !l.is_empty()).map(typed_folder) {
        None => None,
        Some(Ok(p)) => Some(p),
        Some(Err(why)) => return error(ErrorKind::InvalidInput, why),
    };
    let app = id.clone();
    let res = blocking(&ctx, move |apps| {
        let c = crate::template::create(&Caller::panel(), apps.root(), &app, location.as_deref())?;
        let how = if c.adopted { "registered with its existing workspace" } else { "created in" };
        Ok(format!("{} {how} {}; build it, then activate it here", c.app, c.workspace.display()))
    })
    .await;
    if res.status().is_success() {
        if let Err(e) = ctx.launcher.open(SiteKey::App(id.clone())).await {
            tracing::error!("cannot serve {id}: {e:#}");
        }
        ctx.launcher.announce(LauncherEvent::Changed { app: id.to_string() });
    }
    res
}

/// A folder the person typed: a whole path, or one under their home (`~/…`).
fn typed_folder(typed: &str) -> Result<std::path::PathBuf, String> {
    let home = || std::env::var_os("HOME").map(std::path::PathBuf::from);
    let p = match typed.strip_prefix("~/") {
        Some(rest) => home().ok_or("there is no home folder to start `~/` from; type a whole path")?.join(rest),
        None if typed == "~" => home().ok_or("there is no home folder; type a whole path")?,
        None => std::path::PathBuf::from(typed),
    };
    if p.is_absolute() {
        Ok(p)
    } else {
        Err(format!("{} is not a whole path; type one that starts with / (or ~/)", typed.escape_debug()))
    }
}

#[derive(Deserialize)]
struct FolderBody {
    #[serde(default)]
    title: String,
    #[serde(default)]
    start: Option<String>,
}

/// Shows the operating system's folder window (one at a time) and answers
/// with the folder the person chose, or `null` when they did not choose one.
async fn choose_folder(State(ctx): State<Ctx>, axum::Json(b): axum::Json<FolderBody>) -> Response {
    let chosen = ctx.launcher.folder.choose(&b.title, b.start.as_deref(), ctx.launcher.stopping()).await;
    match chosen {
        Ok(folder) => axum::Json(json!({ "folder": folder })).into_response(),
        Err(e @ super::folder::ChooseError::Busy) => error(ErrorKind::Conflict, e.to_string()),
        Err(e) => error(ErrorKind::NotFound, e.to_string()),
    }
}

/// Shows the operating system's file window for a package to install.
async fn choose_package(State(ctx): State<Ctx>, axum::Json(b): axum::Json<FolderBody>) -> Response {
    let chosen = ctx
        .launcher
        .folder
        .pick(super::folder::Pick::Package, &b.title, b.start.as_deref(), ctx.launcher.stopping())
        .await;
    match chosen {
        Ok(file) => axum::Json(json!({ "file": file })).into_response(),
        Err(e @ super::folder::ChooseError::Busy) => error(ErrorKind::Conflict, e.to_string()),
        Err(e) => error(ErrorKind::NotFound, e.to_string()),
    }
}

#[derive(Deserialize)]
struct InstallBody {
    /// A package file (a whole path, or `~/…`) or a registry reference.
    source: String,
    #[serde(default)]
    unsigned: bool,
    #[serde(default)]
    publisher: Option<String>,
}

/// Install from the panel (channel `user`): the same checks as `autoapp
/// install`, then a candidate — never activated, never granted. A source
/// that starts with `/` or `~` is a file; anything else a registry reference.
async fn install(State(ctx): State<Ctx>, axum::Json(b): axum::Json<InstallBody>) -> Response {
    use crate::packages::{self, install as inst};
    let source = match packages::Location::parse(&b.source) {
        Ok(s) => s,
        Err(_) if b.source.trim().is_empty() => {
            return error(ErrorKind::InvalidInput, "type a package file or a registry reference, or choose a file");
        }
        Err(why) => return error(ErrorKind::InvalidInput, why),
    };
    let config = &ctx.launcher.config;
    let (bytes, origin) =
        match packages::fetch(&source, config.package_max_bytes(), config.install_deadline(), &|_| {}).await {
            Ok(f) => f,
            Err(e) => return refusal(e),
        };
    let apps = ctx.launcher.apps.clone();
    let done = tokio::task::spawn_blocking(move || -> anyhow::Result<Value> {
        let options = inst::Options { as_id: None, unsigned: b.unsigned, publisher: b.publisher.as_deref() };
        let i = inst::install(apps.root(), apps.runtime(), &Caller::panel(), &bytes, &origin, &options, &|_| {})?;
        let who = match &i.publisher {
            Some(p) => format!("published by {}{}", crate::packages::sign::who(&p.fingerprint, &p.name), i.standing_said()),
            None => "not signed: anyone could have made it".to_string(),
        };
        let what = if i.new_app { "a new app" } else { "a candidate of the app you have" };
        Ok(json!({
            "message": format!(
                "installed {} as {what}: candidate {}, {who}; its version: {}. Nothing of it runs until you activate it.",
                i.app, release::short(&i.release), crate::elsewhere::text::one_line(&i.version)
            ),
            "installed": i,
        }))
    })
    .await;
    match done {
        Ok(Ok(v)) => {
            if let Some(app) = v["installed"]["app"].as_str() {
                ctx.launcher.announce(LauncherEvent::Changed { app: app.to_string() });
            }
            axum::Json(v).into_response()
        }
        Ok(Err(e)) => refusal(e),
        Err(e) => error(ErrorKind::Internal, e.to_string()),
    }
}

/// Quit from the panel (channel `user`): the same clean stop as Ctrl+C.
async fn quit(State(ctx): State<Ctx>) -> Response {
    tracing::info!("the person quit from the panel");
    ctx.launcher.request_stop();
    axum::Json(json!({ "message": "Autoapp is stopping: the calls in flight finish first" })).into_response()
}

#[derive(Deserialize)]
struct WorkflowBody {
    app: String,
    name: String,
    approve: bool,
}

/// The person approves a workflow of the active release, or takes it back
/// (the panel is channel `user`).
async fn workflow(State(ctx): State<Ctx>, axum::Json(b): axum::Json<WorkflowBody>) -> Response {
    let id = match AppId::parse(&b.app) {
        Ok(i) => i,
        Err(e) => return error(ErrorKind::InvalidInput, e),
    };
    blocking(&ctx, move |apps| {
        if b.approve {
            crate::workflows::approve(&Caller::panel(), apps.root(), &id, &b.name)
        } else {
            crate::workflows::revoke(&Caller::panel(), apps.root(), &id, &b.name)
        }
    })
    .await
}

async fn revoke(State(ctx): State<Ctx>, axum::Json(b): axum::Json<AppBody>) -> Response {
    let id = match AppId::parse(&b.app) {
        Ok(i) => i,
        Err(e) => return error(ErrorKind::InvalidInput, e),
    };
    blocking(&ctx, move |apps| {
        Ok(format!(
            "revoked {}",
            crate::grants::revoke(&Caller::panel(), &apps.root().app(&id), &b.capabilities)?.join(", ")
        ))
    })
    .await
}

async fn preview(State(ctx): State<Ctx>, axum::Json(b): axum::Json<AppBody>) -> Response {
    let id = match AppId::parse(&b.app) {
        Ok(i) => i,
        Err(e) => return error(ErrorKind::InvalidInput, e),
    };
    let app = id.clone();
    let rel = b.release.clone();
    let apps = ctx.launcher.apps.clone();
    let started = tokio::task::spawn_blocking(move || apps.preview(&Caller::panel(), &app, rel.as_deref())).await;
    match started {
        Ok(Ok((p, _))) => match ctx.launcher.open(SiteKey::Preview(id, p.release.clone())).await {
            Ok(o) => axum::Json(
                json!({ "message": format!("previewing {} on a copy of the data; {}", short(&p.release), o.message) }),
            )
            .into_response(),
            Err(e) => refusal(e),
        },
        Ok(Err(e)) => refusal(e),
        Err(e) => error(ErrorKind::Internal, e.to_string()),
    }
}

async fn preview_stop(State(ctx): State<Ctx>, axum::Json(b): axum::Json<AppBody>) -> Response {
    let id = match AppId::parse(&b.app) {
        Ok(i) => i,
        Err(e) => return error(ErrorKind::InvalidInput, e),
    };
    let apps = ctx.launcher.apps.clone();
    let app = id.clone();
    let stopped =
        tokio::task::spawn_blocking(move || apps.preview_stop(&Caller::panel(), &app, b.release.as_deref())).await;
    match stopped {
        Ok(Ok(releases)) => {
            for r in &releases {
                ctx.launcher.stop_site(&SiteKey::Preview(id.clone(), r.clone()));
            }
            axum::Json(json!({ "message": format!("stopped {} preview(s) and removed their copies", releases.len()) }))
                .into_response()
        }
        Ok(Err(e)) => refusal(e),
        Err(e) => error(ErrorKind::Internal, e.to_string()),
    }
}

async fn rollback(State(ctx): State<Ctx>, axum::Json(b): axum::Json<AppBody>) -> Response {
    let id = match AppId::parse(&b.app) {
        Ok(i) => i,
        Err(e) => return error(ErrorKind::InvalidInput, e),
    };
    let how = match (b.how.as_deref(), b.release.clone()) {
        (Some("downgrade"), Some(r)) => RollbackHow::Downgrade(r),
        (Some("restore"), _) => RollbackHow::Restore { yes: b.yes },
        (Some("plain") | None, _) => RollbackHow::Plain,
        _ => return error(ErrorKind::InvalidInput, "how is plain, downgrade (with a release) or restore"),
    };
    let app = id.clone();
    let res = blocking(&ctx, move |apps| {
        let r = apps.rollback(&Caller::panel(), &app, how)?;
        Ok(format!("{} is back on release {}", r.app, short(&r.release)))
    })
    .await;
    if res.status().is_success() {
        let release = release::active(&ctx.launcher.apps.root().app(&id)).ok().flatten().unwrap_or_default();
        ctx.launcher.announce(LauncherEvent::Activated { app: id.to_string(), release });
    }
    res
}

async fn remove(State(ctx): State<Ctx>, axum::Json(b): axum::Json<AppBody>) -> Response {
    let id = match AppId::parse(&b.app) {
        Ok(i) => i,
        Err(e) => return error(ErrorKind::InvalidInput, e),
    };
    if b.confirm.as_deref() != Some(id.as_str()) {
        return error(ErrorKind::InvalidInput, format!("type the app's id, {id}, to remove it"));
    }
    // This launcher is the one serving it: stop serving, then move it.
    ctx.launcher.stop_app(&id);
    let res = blocking(&ctx, move |apps| {
        let to = apps.remove_unserved(&Caller::panel(), &id)?;
        Ok(format!("moved {id} to {}", to.display()))
    })
    .await;
    ctx.launcher.announce(LauncherEvent::Changed { app: b.app });
    res
}

/// How many of an app's newest log lines the panel shows.
const LOG_LINES_SHOWN: usize = 10;

#[derive(Deserialize)]
struct BackupBody {
    app: String,
    /// A folder (typed or chosen with the folder window), or a new file.
    to: String,
}

/// Backup from the panel (channel `user`): a new file in the folder chosen.
async fn backup(State(ctx): State<Ctx>, axum::Json(b): axum::Json<BackupBody>) -> Response {
    let id = match AppId::parse(&b.app) {
        Ok(i) => i,
        Err(e) => return error(ErrorKind::InvalidInput, e),
    };
    let to = match typed_folder(b.to.trim()) {
        Ok(p) if p.is_dir() => p,
        Ok(p) => {
            return error(
                ErrorKind::InvalidInput,
                format!("{} is not a folder; choose one that exists (Choose… opens the folder window)", p.display()),
            );
        }
        Err(why) => return error(ErrorKind::InvalidInput, why),
    };
    let res = blocking(&ctx, move |apps| {
        let done = crate::housekeeping::back_up(apps.root(), &Caller::panel(), &id, Some(&to), &|_| {})?;
        Ok(format!(
            "backed up {id} to {} ({}); `autoapp restore` places it again",
            done.file.display(),
            crate::housekeeping::said(done.bytes)
        ))
    })
    .await;
    ctx.launcher.announce(LauncherEvent::Changed { app: b.app });
    res
}

/// What each app holds on disk.
async fn space(State(ctx): State<Ctx>) -> Response {
    let apps = ctx.launcher.apps.clone();
    match tokio::task::spawn_blocking(move || crate::housekeeping::space::of(apps.root(), None)).await {
        Ok(Ok(s)) => axum::Json(s).into_response(),
        Ok(Err(e)) => refusal(e),
        Err(e) => error(ErrorKind::Internal, e.to_string()),
    }
}

#[derive(Deserialize)]
struct PruneBody {
    app: String,
    keep: Option<usize>,
    #[serde(default)]
    trash: bool,
    #[serde(default)]
    builds: bool,
    /// Also the record's rows before this day (`YYYY-MM-DD`).
    #[serde(default)]
    record_before: Option<String>,
    /// Also the record's oldest rows, until its rows take this many MiB.
    #[serde(default)]
    record_to_mib: Option<u64>,
    /// Absent: only the list (a dry run). Present: the app's id typed again,
    /// with the list the person read (`plan`): only what is in it and still
    /// removable is removed.
    confirm: Option<String>,
    plan: Option<Vec<crate::housekeeping::prune::Item>>,
}

/// Prune from the panel: first the list, then — the id typed again — exactly it.
async fn prune(State(ctx): State<Ctx>, axum::Json(b): axum::Json<PruneBody>) -> Response {
    let id = match AppId::parse(&b.app) {
        Ok(i) => i,
        Err(e) => return error(ErrorKind::InvalidInput, e),
    };
    let record_before = match b.record_before.as_deref().map(crate::housekeeping::prune::record_day) {
        Some(Err(e)) => return error(ErrorKind::InvalidInput, e),
        Some(Ok(day)) => Some(day),
        None => None,
    };
    let record_to_mib = b.record_to_mib.filter(|m| *m > 0);
    let opts =
        crate::housekeeping::Options { keep: b.keep, trash: b.trash, builds: b.builds, record_before, record_to_mib };
    let apps = ctx.launcher.apps.clone();
    let confirm = b.confirm.clone();
    let shown = b.plan;
    if confirm.is_some() && confirm.as_deref() != Some(id.as_str()) {
        return error(ErrorKind::InvalidInput, format!("type the app's id, {id}, to prune it"));
    }
    let app = id.clone();
    let result = tokio::task::spawn_blocking(move || -> anyhow::Result<Value> {
        let root = apps.root();
        let Some(items) = shown.filter(|_| confirm.is_some()) else {
            return Ok(serde_json::to_value(crate::housekeeping::prune::plan(root, Some(&app), opts)?)?);
        };
        let bytes = items.iter().map(|i| i.bytes).sum();
        let seen = crate::housekeeping::Plan { items, kept: Vec::new(), bytes };
        let done = crate::housekeeping::prune::run(root, &Caller::panel(), Some(&app), opts, &seen)?;
        let removed: Vec<&crate::housekeeping::prune::Item> = done.removed.iter().collect();
        let mut message = format!(
            "removed {} of {app}; freed {}",
            crate::housekeeping::prune::counted(&removed),
            crate::housekeeping::said(done.bytes)
        );
        for (item, why) in &done.skipped {
            message.push_str(&format!("; left {} ({why})", item.what));
        }
        Ok(json!({ "message": message, "removed": done.removed, "skipped": done.skipped }))
    })
    .await;
    if b.confirm.is_some() {
        ctx.launcher.announce(LauncherEvent::Changed { app: id.to_string() });
    }
    match result {
        Ok(Ok(v)) => axum::Json(v).into_response(),
        Ok(Err(e)) => refusal(e),
        Err(e) => error(ErrorKind::Internal, e.to_string()),
    }
}
