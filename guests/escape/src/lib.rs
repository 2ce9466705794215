//! A guest for the tests alone: it plays a runtime escape. Its `escape`
//! routes hand their attempts to the probe of a debug build of the host (an
//! import of its own, `autoapp:escape/probe`), which tries each as native
//! code would, in the process this very call runs in, and answers what
//! became of each.

wit_bindgen::generate!({
    path: "../../wit",
    inline: "
        package autoapp:escape;

        interface probe {
            /// Tries each of `attempts` (a JSON list) as native code would,
            /// and answers what became of each (a JSON list).
            attempt: func(attempts: string) -> string;
        }

        world escape {
            include autoapp:app/app@0.1.0;
            import probe;
        }
    ",
    world: "autoapp:escape/escape",
    generate_all,
});

use autoapp::app::store::{self, Value};
use autoapp::app::types::AppError;
use serde_json::{Value as Json, json};

struct Escape;
export!(Escape);

impl exports::autoapp::app::routes::Guest for Escape {
    fn handle(route: String, input: String) -> Result<String, AppError> {
        let input: Json = serde_json::from_str(&input).map_err(|e| AppError::InvalidInput(e.to_string()))?;
        let answer = match route.as_str() {
            "count" => {
                let counted = store::query("SELECT count(*) FROM marks", &[])?;
                let n = counted.rows.first().and_then(|row| row.first());
                json!({ "marks": if let Some(Value::Integer(n)) = n { Some(*n) } else { None } })
            }
            "mark" => {
                store::execute("INSERT INTO marks (note) VALUES ('a mark')", &[])?;
                json!({ "ok": true })
            }
            "escape" | "escape.write" | "escape.external" => {
                let outcomes = autoapp::escape::probe::attempt(&input["attempts"].to_string());
                serde_json::from_str(&outcomes).map_err(|e| AppError::Internal(e.to_string()))?
            }
            other => return Err(AppError::NotFound(format!("no route {other}"))),
        };
        Ok(answer.to_string())
    }
}

impl exports::autoapp::app::views::Guest for Escape {
    fn render(page: String, _query: String) -> Result<String, AppError> {
        match page.as_str() {
            "index" => Ok(json!({ "title": "Escape", "children": [] }).to_string()),
            other => Err(AppError::NotFound(format!("no page {other}"))),
        }
    }
}
