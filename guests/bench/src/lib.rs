//! The benchmarks' app (see `scripts/bench` and docs/performance.md).
//!
//! `hello` answers a constant: the cost of calling it is the host's path
//! (gate, fresh instance, record), which is what benchmark P1 measures against
//! bare wasmtime. `spin` never returns: benchmark P6 runs it beside another app
//! to show that the epoch deadline and yields keep that app's latency. `count`
//! reads the store (P2r); `put` writes one row under a unique key (P3c, and the
//! tests of many writers at once: every acknowledged key must be stored).

wit_bindgen::generate!({
    path: "../../wit",
    world: "autoapp:app/app",
    generate_all,
});

use autoapp::app::store::{self, Value};
use autoapp::app::types::AppError;

struct Bench;

export!(Bench);

impl exports::autoapp::app::routes::Guest for Bench {
    fn handle(route: String, input: String) -> Result<String, AppError> {
        match route.as_str() {
            "hello" => Ok(r#"{"hello":"world"}"#.to_string()),
            "spin" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "count" => {
                let rows = store::query("SELECT count(*) FROM rows", &[])?;
                match rows.rows.first().and_then(|r| r.first()) {
                    Some(Value::Integer(n)) => Ok(format!(r#"{{"rows":{n}}}"#)),
                    _ => Err(AppError::Internal("count(*) gave no number".into())),
                }
            }
            "put" => {
                let key = key_of(&input)?;
                let changed = store::execute(
                    "INSERT INTO rows (key, at) VALUES (?1, unixepoch('subsec') * 1000)",
                    &[Value::Text(key)],
                )?;
                Ok(format!(r#"{{"changed":{changed}}}"#))
            }
            other => Err(AppError::NotFound(format!("no route {other}"))),
        }
    }
}

/// The `key` of `{"key": "..."}`; the host checked the input against the
/// route's schema, so this only finds it (without a JSON library, to keep
/// the guest the size of its work).
fn key_of(input: &str) -> Result<String, AppError> {
    let v = input
        .split_once(r#""key":""#)
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(key, _)| key.to_string())
        .filter(|k| !k.contains('\\'))
        .ok_or_else(|| AppError::InvalidInput("give {\"key\": \"...\"} without escapes".into()))?;
    Ok(v)
}

impl exports::autoapp::app::views::Guest for Bench {
    fn render(page: String, _query: String) -> Result<String, AppError> {
        match page.as_str() {
            "index" => Ok(r#"{"title":"Bench","children":[{"type":"text","text":"hello"}]}"#.to_string()),
            other => Err(AppError::NotFound(format!("no page {other}"))),
        }
    }
}
