//! News: fetches headlines over `wasi:http` from the one origin it declares and
//! the person granted, and keeps them in its store.
//!
//! `headlines.refresh` is the only external route: it is the only call that
//! gets the network at all, and only to the granted origin. The feed speaks the
//! Algolia Hacker News search format: `{"hits": [{"objectID", "title", "url", "points"}]}`.

wit_bindgen::generate!({
    path: "../../wit",
    world: "autoapp:app/app",
    generate_all,
});

use autoapp::app::log::{self, Level};
use autoapp::app::store::{self, Value};
use autoapp::app::types::AppError;
use serde::Deserialize;
use serde_json::json;

/// Where headlines come from unless the call names another feed URL (which
/// must still be within a granted origin, or the host denies the request).
const DEFAULT_FEED: &str = "https://hn.algolia.com/api/v1/search?tags=front_page";

struct News;
export!(News);

#[derive(Deserialize)]
struct Feed {
    hits: Vec<Hit>,
}

#[derive(Deserialize)]
struct Hit {
    #[serde(rename = "objectID")]
    id: String,
    title: Option<String>,
    url: Option<String>,
    points: Option<i64>,
}

fn text(v: &Value) -> String {
    match v {
        Value::Text(s) => s.clone(),
        Value::Integer(i) => i.to_string(),
        _ => String::new(),
    }
}

fn list(limit: i64) -> Result<Vec<serde_json::Value>, AppError> {
    let rows = store::query(
        "SELECT id, title, url, points FROM headlines ORDER BY points DESC, id LIMIT ?1",
        &[Value::Integer(limit)],
    )?;
    Ok(rows
        .rows
        .iter()
        .map(|r| json!({ "id": text(&r[0]), "title": text(&r[1]), "url": text(&r[2]), "points": text(&r[3]).parse::<i64>().unwrap_or(0) }))
        .collect())
}

impl exports::autoapp::app::routes::Guest for News {
    fn handle(route: String, input: String) -> Result<String, AppError> {
        let input: serde_json::Value =
            serde_json::from_str(&input).map_err(|e| AppError::InvalidInput(e.to_string()))?;
        match route.as_str() {
            "headlines.list" => Ok(
                json!({ "headlines": list(input["limit"].as_i64().unwrap_or(30))? }).to_string(),
            ),
            "headlines.refresh" => {
                let feed = input["feed"].as_str().unwrap_or(DEFAULT_FEED);
                let body = http_get(feed)?;
                let feed: Feed = serde_json::from_slice(&body).map_err(|e| {
                    AppError::Internal(format!(
                        "the feed did not answer in the expected format: {e}"
                    ))
                })?;
                let mut stored = 0;
                for hit in feed.hits {
                    let Some(title) = hit.title else { continue };
                    stored += store::execute(
                        "INSERT INTO headlines (id, title, url, points) VALUES (?1, ?2, ?3, ?4)
                         ON CONFLICT (id) DO UPDATE SET title = excluded.title, url = excluded.url, points = excluded.points",
                        &[
                            Value::Text(hit.id),
                            Value::Text(title),
                            Value::Text(hit.url.unwrap_or_default()),
                            Value::Integer(hit.points.unwrap_or(0)),
                        ],
                    )?;
                }
                log::write(Level::Info, &format!("stored {stored} headlines"));
                Ok(json!({ "stored": stored }).to_string())
            }
            other => Err(AppError::NotFound(format!("no route {other}"))),
        }
    }
}

impl exports::autoapp::app::views::Guest for News {
    fn render(page: String, _query: String) -> Result<String, AppError> {
        if page != "index" {
            return Err(AppError::NotFound(format!("no page {page}")));
        }
        let rows: Vec<serde_json::Value> = list(30)?
            .into_iter()
            .map(|h| json!([h["title"], h["points"], h["url"]]))
            .collect();
        Ok(json!({
            "title": "News",
            "children": [
                { "type": "heading", "text": "News", "level": 1 },
                { "type": "button", "route": "headlines.refresh", "input": {}, "label": "Refresh" },
                { "type": "table", "columns": ["Title", "Points", "Link"], "rows": rows }
            ]
        })
        .to_string())
    }
}

/// GET `url` through wasi:http. A request the host will not make comes back as
/// `denied` naming the host's error code.
fn http_get(url: &str) -> Result<Vec<u8>, AppError> {
    use wasi::http::outgoing_handler;
    use wasi::http::types::{ErrorCode, Fields, OutgoingRequest, Scheme};
    use wasi::io::streams::StreamError;

    let bad = |why: &str| AppError::InvalidInput(format!("the feed URL {why}"));
    let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("has no scheme"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let request = OutgoingRequest::new(Fields::new());
    let scheme = match scheme {
        "https" => Scheme::Https,
        "http" => Scheme::Http,
        _ => return Err(bad("must be http or https")),
    };
    request
        .set_scheme(Some(&scheme))
        .map_err(|_| bad("has a bad scheme"))?;
    request
        .set_authority(Some(authority))
        .map_err(|_| bad("has a bad host"))?;
    request
        .set_path_with_query(Some(path))
        .map_err(|_| bad("has a bad path"))?;
    let denied = |e: ErrorCode| match e {
        ErrorCode::HttpRequestDenied => AppError::Denied(format!(
            "the host did not let News reach {authority}: it is not a granted origin"
        )),
        ErrorCode::DestinationIpProhibited => AppError::Denied(format!(
            "the host will not let News reach the address of {authority}"
        )),
        other => AppError::Internal(format!("fetching the feed failed: {other:?}")),
    };
    let pending = outgoing_handler::handle(request, None).map_err(denied)?;
    let response = loop {
        if let Some(r) = pending.get() {
            break r;
        }
        pending.subscribe().block();
    };
    let response = response
        .map_err(|_| AppError::Internal("the response was taken twice".into()))?
        .map_err(denied)?;
    if response.status() != 200 {
        return Err(AppError::Internal(format!(
            "the feed answered with status {}",
            response.status()
        )));
    }
    let body = response
        .consume()
        .map_err(|_| AppError::Internal("no body".into()))?;
    let stream = body
        .stream()
        .map_err(|_| AppError::Internal("no body stream".into()))?;
    let mut bytes = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(_)) => {
                return Err(AppError::Internal("the feed's body broke off".into()));
            }
        }
    }
    Ok(bytes)
}
