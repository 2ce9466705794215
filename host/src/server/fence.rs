//! The fence in front of every server: who may reach it at all.
//!
//! - the `Host` header must be this server's own `127.0.0.1:<port>` (a page on
//!   another name that resolves to loopback — DNS rebinding — is refused);
//! - a request a browser marks `Sec-Fetch-Site` other than `same-origin` or
//!   `none` is refused (another site, or another port of this host);
//! - a state-changing request must be same-origin (its `Origin`, when sent,
//!   must be this server);
//! - everything but `/launch` needs this server's session cookie.
//!
//! Every refusal is the same 403 with the same sentence, so an outsider learns
//! nothing from which rule it broke.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::Site;

/// The one answer to every request the fence refuses.
pub const REFUSED: &str = "This address is not open to this request. Open the app from Autoapp's panel, or use the address the launcher printed.";

pub fn refused() -> Response {
    (StatusCode::FORBIDDEN, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], REFUSED).into_response()
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// The name of the session cookie of the server on `port`.
pub fn cookie_name(port: u16) -> String {
    format!("autoapp_session_{port}")
}

/// The session cookie of the server on `port` in `headers`, if any.
pub fn session(headers: &HeaderMap, port: u16) -> Option<String> {
    let name = cookie_name(port);
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// Whether the request may pass, before its session is looked at.
pub fn admits(method: &Method, headers: &HeaderMap, port: u16) -> bool {
    let own = format!("127.0.0.1:{port}");
    if header(headers, "host") != Some(own.as_str()) {
        return false;
    }
    let fetch_site = header(headers, "sec-fetch-site");
    if !matches!(fetch_site, None | Some("same-origin") | Some("none")) {
        return false;
    }
    let changes_state = !matches!(*method, Method::GET | Method::HEAD);
    if changes_state {
        if fetch_site.is_some_and(|s| s != "same-origin") {
            return false;
        }
        if header(headers, "origin").is_some_and(|o| o != format!("http://{own}")) {
            return false;
        }
    }
    true
}

pub async fn middleware(State(site): State<Arc<Site>>, req: Request<Body>, next: Next) -> Response {
    passes(req, next, site.port, |s| site.has_session(s)).await
}

/// The fence's rules for the server on `port`, whose sessions `has` knows:
/// the launcher's servers', and an app's server as its worker serves it.
pub async fn passes(req: Request<Body>, next: Next, port: u16, has: impl Fn(&str) -> bool) -> Response {
    if !admits(req.method(), req.headers(), port) {
        return refused();
    }
    if req.uri().path() == "/launch" {
        return next.run(req).await;
    }
    match session(req.headers(), port) {
        Some(s) if has(&s) => next.run(req).await,
        _ => refused(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt as _;

    fn site(port: u16) -> Arc<Site> {
        let (stop, _) = tokio::sync::watch::channel(false);
        Arc::new(Site {
            key: super::super::SiteKey::Panel,
            port,
            tokens: Default::default(),
            sessions: Default::default(),
            stop,
        })
    }

    /// A server behind the fence that answers "through" to whatever passes.
    async fn through(site: &Arc<Site>, method: &str, path: &str, headers: &[(&str, &str)]) -> (StatusCode, String) {
        let app = axum::Router::new()
            .fallback(|| async { "through" })
            .layer(axum::middleware::from_fn_with_state(site.clone(), middleware));
        let mut req = Request::builder().method(method).uri(path);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = app.oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn only_a_request_of_this_servers_own_session_gets_through_and_every_refusal_is_the_same() {
        let site = site(4000);
        let token = site.mint(std::time::Duration::from_secs(60));
        let token = token.rsplit("token=").next().unwrap().to_string();
        let session = site.redeem(&token).unwrap();
        let mine = format!("autoapp_session_4000={session}");
        let host = ("host", "127.0.0.1:4000");
        // The launch path passes the fence without a session (it makes one).
        assert_eq!(through(&site, "GET", "/launch", &[host]).await, (StatusCode::OK, "through".into()));
        assert_eq!(through(&site, "GET", "/x", &[host, ("cookie", &mine)]).await.1, "through");
        assert_eq!(through(&site, "GET", "/x", &[host, ("cookie", &format!("other=1; {mine}"))]).await.1, "through");
        let refusals = [
            through(&site, "GET", "/x", &[host]).await,
            through(&site, "GET", "/x", &[host, ("cookie", "autoapp_session_4000=forged")]).await,
            through(&site, "GET", "/x", &[host, ("cookie", &format!("autoapp_session_4001={session}"))]).await,
            through(&site, "GET", "/x", &[host, ("cookie", "autoapp_session_4000=")]).await,
            through(&site, "GET", "/x", &[("host", "localhost:4000"), ("cookie", &mine)]).await,
            through(&site, "GET", "/launch", &[("host", "evil.example:4000")]).await,
            through(&site, "POST", "/x", &[host, ("cookie", &mine), ("sec-fetch-site", "same-site")]).await,
        ];
        for r in refusals {
            assert_eq!(r, (StatusCode::FORBIDDEN, REFUSED.to_string()));
        }
        let resp = refused();
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "text/plain; charset=utf-8");
    }

    #[test]
    fn the_session_is_read_from_this_servers_own_cookie_only() {
        let cookies = |v: &str| {
            let mut m = HeaderMap::new();
            m.append(header::COOKIE, v.parse().unwrap());
            m
        };
        assert_eq!(session(&cookies("autoapp_session_4000=abc"), 4000), Some("abc".into()));
        assert_eq!(session(&cookies("a=1; autoapp_session_4000=abc; b=2"), 4000), Some("abc".into()));
        assert_eq!(session(&cookies("autoapp_session_40000=abc"), 4000), None);
        assert_eq!(session(&cookies("xautoapp_session_4000=abc"), 4000), None);
        assert_eq!(session(&HeaderMap::new(), 4000), None);
    }

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        m
    }

    #[test]
    fn only_this_servers_own_host_passes() {
        assert!(admits(&Method::GET, &h(&[("host", "127.0.0.1:4000")]), 4000));
        for host in ["localhost:4000", "127.0.0.1:4001", "evil.example:4000", "127.0.0.1"] {
            assert!(!admits(&Method::GET, &h(&[("host", host)]), 4000), "{host}");
        }
        assert!(!admits(&Method::GET, &h(&[]), 4000));
    }

    #[test]
    fn cross_site_and_same_site_requests_are_refused() {
        let ok = |site: &str| admits(&Method::GET, &h(&[("host", "127.0.0.1:4000"), ("sec-fetch-site", site)]), 4000);
        assert!(ok("none") && ok("same-origin"));
        assert!(!ok("same-site") && !ok("cross-site"));
    }

    #[test]
    fn a_state_changing_request_must_be_same_origin() {
        let post = |hs: &[(&str, &str)]| admits(&Method::POST, &h(hs), 4000);
        assert!(post(&[
            ("host", "127.0.0.1:4000"),
            ("sec-fetch-site", "same-origin"),
            ("origin", "http://127.0.0.1:4000")
        ]));
        assert!(!post(&[("host", "127.0.0.1:4000"), ("sec-fetch-site", "none")]));
        assert!(!post(&[("host", "127.0.0.1:4000"), ("origin", "http://127.0.0.1:4001")]));
        assert!(!post(&[("host", "127.0.0.1:4000"), ("origin", "null")]));
    }
}
