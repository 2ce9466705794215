//! An app's own server as its worker serves it (issue 54): on the socket
//! its launcher opened and gave it, so the port stays while workers come
//! and go, and a page's calls run where the app's code runs, with no hop
//! through the launcher.
//!
//! The same fence as every server ([`fence::passes`]), with the sessions
//! its launcher made (a launch token is redeemed by the launcher, which
//! holds the tokens). Served here: the renderer, page views, and calls of
//! read and write routes — on channel `user`, through the gate in this
//! process, which never asks for it. Sent on to the launcher over the
//! worker's channel and answered there through the launcher's own router
//! for this server (its fence checks again): everything else — an external
//! route's call (its other worker, with what the person granted, runs it),
//! the questions and their answers, the events, the app's information, the
//! panel.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use super::{api, fence, page};
use crate::apps::{Apps, BoxFuture, ErrorKind, Target};
use crate::gate::Caller;
use crate::manifest::AppId;
use crate::worker::serve::{Link, Reply, Served};

use crate::worker::pool::MAX_SENT_ON;

#[derive(Clone)]
struct Ctx {
    apps: Arc<Apps>,
    app: AppId,
    port: u16,
    link: Arc<Link>,
}

/// Serves the app's server until the worker is retired: its requests in
/// flight are answered, then it ends.
pub fn serve(served: Served) -> BoxFuture<()> {
    Box::pin(async move {
        let Served { listener, port, apps, app, link, mut stop } = served;
        let ctx = Ctx { apps, app, port, link };
        let router = Router::new()
            .route("/", get(|| async { api::html(page::app()) }))
            .route("/launch", get(launch))
            .route("/api/view/{page}", get(view))
            .route("/api/call/{route}", post(call))
            .fallback(send_on)
            .with_state(ctx.clone())
            .layer(axum::middleware::from_fn_with_state(ctx, door))
            .layer(axum::middleware::map_response(api::hardening));
        let shutdown = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, router).with_graceful_shutdown(shutdown).await {
            tracing::error!("the app's server stopped: {e}");
        }
    })
}

async fn door(State(ctx): State<Ctx>, req: Request, next: Next) -> Response {
    ctx.link.used();
    fence::passes(req, next, ctx.port, |s| ctx.link.has_session(s)).await
}

#[derive(Deserialize)]
struct LaunchQuery {
    token: Option<String>,
}

async fn launch(State(ctx): State<Ctx>, Query(q): Query<LaunchQuery>) -> Response {
    let Some(token) = q.token else { return fence::refused() };
    match ctx.link.redeem(&token).await {
        Some(session) => api::launched(&fence::cookie_name(ctx.port), &session),
        None => fence::refused(),
    }
}

#[derive(Deserialize)]
struct ViewQuery {
    query: Option<String>,
}

async fn view(State(ctx): State<Ctx>, Path(page): Path<String>, Query(q): Query<ViewQuery>) -> Response {
    let query = q.query.unwrap_or_else(|| "{}".into());
    match ctx.apps.render_at(&Caller::page(), &ctx.app, &Target::Active, &page, &query).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => api::call_error(e),
    }
}

async fn call(State(ctx): State<Ctx>, Path(route): Path<String>, req: Request) -> Response {
    // Its head is kept whole, not copied, for the one case that sends it on.
    let (parts, body) = req.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_SENT_ON).await else {
        return api::error(ErrorKind::InvalidInput, "the request is too large");
    };
    let Ok(text) = std::str::from_utf8(&body) else {
        return api::error(ErrorKind::InvalidInput, "the call's input is not UTF-8 text; send JSON");
    };
    let input = if text.trim().is_empty() { "{}" } else { text };
    match ctx.apps.call_page(&ctx.app, &route, input).await {
        Ok(Some(a)) => {
            if a.effect.writes() {
                ctx.link.changed();
            }
            axum::Json(a.output).into_response()
        }
        // An external route: its launcher's gate and the app's other worker run it.
        Ok(None) => forward(&ctx, parts.method, &parts.uri, &parts.headers, &body).await,
        Err(e) => api::call_error(e),
    }
}

async fn send_on(State(ctx): State<Ctx>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_SENT_ON).await else {
        return api::error(ErrorKind::InvalidInput, "the request is too large");
    };
    forward(&ctx, parts.method, &parts.uri, &parts.headers, &body).await
}

/// Sends a request on to the launcher and answers with what it answers,
/// its body as it comes (an event stream stays open as long as both ends).
async fn forward(ctx: &Ctx, method: Method, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Response {
    let hop = |name: &str| matches!(name, "connection" | "transfer-encoding" | "keep-alive" | "upgrade");
    let headers = headers
        .iter()
        .filter(|(k, _)| !hop(k.as_str()))
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    let (id, mut answers) = ctx.link.forward(method.to_string(), uri.to_string(), headers, body);
    let cancel = Cancel { link: ctx.link.clone(), id, done: false };
    let Some(Reply::Head { status, headers }) = answers.recv().await else {
        return api::error(ErrorKind::Internal, "the launcher did not answer; try again");
    };
    let mut response = Response::builder().status(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY));
    let whole = headers.iter().any(|(k, _)| k == "content-length");
    for (name, value) in headers.iter().filter(|(k, _)| !hop(k) && k != "content-length") {
        response = response.header(name.as_str(), value.as_str());
    }
    if whole {
        // Of known length: answered whole (its length set by the server).
        use base64::Engine as _;
        let mut body = Vec::new();
        loop {
            match answers.recv().await {
                Some(Reply::Chunk(b64)) => match base64::engine::general_purpose::STANDARD.decode(b64) {
                    Ok(piece) if body.len() + piece.len() <= MAX_SENT_ON * 32 => body.extend_from_slice(&piece),
                    _ => return api::error(ErrorKind::Internal, "the launcher's answer could not be sent on"),
                },
                Some(Reply::End) => break,
                // Cut short: never served as if whole.
                _ => return api::error(ErrorKind::Internal, "the launcher's answer was cut short; try again"),
            }
        }
        let mut cancel = cancel;
        cancel.done = true;
        drop(cancel);
        return response
            .body(Body::from(body))
            .unwrap_or_else(|_| api::error(ErrorKind::Internal, "the launcher's answer could not be sent on"));
    }
    let pieces = futures::stream::unfold((answers, cancel), |(mut answers, mut cancel)| async move {
        use base64::Engine as _;
        let piece = match answers.recv().await {
            Some(Reply::Chunk(b64)) => base64::engine::general_purpose::STANDARD.decode(b64).ok(),
            _ => None,
        };
        match piece {
            Some(bytes) => Some((Ok::<Bytes, Infallible>(Bytes::from(bytes)), (answers, cancel))),
            None => {
                cancel.done = true;
                drop(cancel);
                None
            }
        }
    });
    response
        .body(Body::from_stream(pieces))
        .unwrap_or_else(|_| api::error(ErrorKind::Internal, "the launcher's answer could not be sent on"))
}

/// Tells the launcher a forwarded request's client went away, unless its
/// answer ended first.
struct Cancel {
    link: Arc<Link>,
    id: u64,
    done: bool,
}

impl Drop for Cancel {
    fn drop(&mut self) {
        if !self.done {
            self.link.cancel(self.id);
        }
    }
}
