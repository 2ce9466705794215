//! Hello: the smallest complete Autoapp app. Read docs/authoring.md for
//! the whole contract; the WIT it is built against is in ./wit.

// Generates the bindings of the world `autoapp:app/app` from ./wit.
wit_bindgen::generate!({ path: "wit", world: "autoapp:app/app", generate_all });

use autoapp::app::store::{self, Value};
use autoapp::app::types::AppError;
use serde_json::json;

struct App;
export!(App);

/// Routes: JSON in, JSON out. The host has already checked `input` against the
/// route's schema in autoapp.toml, and gives a `read` route a read-only store.
impl exports::autoapp::app::routes::Guest for App {
    fn handle(route: String, input: String) -> Result<String, AppError> {
        let input: serde_json::Value =
            serde_json::from_str(&input).map_err(|e| AppError::InvalidInput(e.to_string()))?;
        let answer = match route.as_str() {
            "entries.list" => json!({ "entries": entries(input["limit"].as_i64().unwrap_or(20))? }),
            "entries.add" => {
                let text = input["text"].as_str().unwrap_or_default();
                // One statement per call; `RETURNING` hands back the new id.
                let rows = store::query(
                    "INSERT INTO entries (text) VALUES (?1) RETURNING id",
                    &[Value::Text(text.to_string())],
                )?;
                json!({ "id": rows.rows[0][0].as_json() })
            }
            other => return Err(AppError::NotFound(format!("no route {other}"))),
        };
        Ok(answer.to_string())
    }
}

/// Pages: a JSON view spec that the host's renderer draws (no HTML, no script).
impl exports::autoapp::app::views::Guest for App {
    fn render(page: String, _query: String) -> Result<String, AppError> {
        if page != "index" {
            return Err(AppError::NotFound(format!("no page {page}")));
        }
        let items: Vec<_> = entries(100)?
            .into_iter()
            .map(|e| json!({ "type": "text", "text": e["text"] }))
            .collect();
        Ok(json!({
            "title": "Hello",
            "children": [
                { "type": "heading", "text": "Hello", "level": 1 },
                { "type": "form", "route": "entries.add", "submit": "Add",
                  "fields": [ { "name": "text", "label": "Text", "kind": "text" } ] },
                { "type": "section", "title": "Entries", "children": items }
            ]
        })
        .to_string())
    }
}

fn entries(limit: i64) -> Result<Vec<serde_json::Value>, AppError> {
    let rows = store::query(
        "SELECT id, text, added FROM entries ORDER BY id DESC LIMIT ?1",
        &[Value::Integer(limit)],
    )?;
    Ok(rows
        .rows
        .iter()
        .map(|r| json!({ "id": r[0].as_json(), "text": r[1].as_json(), "added": r[2].as_json() }))
        .collect())
}

impl Value {
    /// A store value as JSON.
    fn as_json(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Integer(i) => json!(i),
            Value::Real(r) => json!(r),
            Value::Text(t) => json!(t),
            Value::Blob(b) => json!(b),
        }
    }
}
