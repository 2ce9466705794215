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

/// The session cookie of `site` in `headers`, if any.
pub fn session(headers: &HeaderMap, site: &Site) -> Option<String> {
    let name = site.cookie_name();
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
    if !admits(req.method(), req.headers(), site.port) {
        return refused();
    }
    if req.uri().path() == "/launch" {
        return next.run(req).await;
    }
    match session(req.headers(), &site) {
        Some(s) if site.has_session(&s) => next.run(req).await,
        _ => refused(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
