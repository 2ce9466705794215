//! Files: lists and reads one folder the person granted, seen by the guest at
//! `/files/inbox` through ordinary `std::fs` (WASI filesystem). Nothing else of
//! the disk exists for it, and only its external routes see even that.

wit_bindgen::generate!({
    path: "../../wit",
    world: "autoapp:app/app",
    generate_all,
});

use autoapp::app::types::AppError;
use serde_json::json;

const INBOX: &str = "/files/inbox";

/// The most of one file `files.read` returns.
const MAX_READ: u64 = 256 * 1024;

struct Files;
export!(Files);

fn list() -> Result<Vec<serde_json::Value>, AppError> {
    let entries = std::fs::read_dir(INBOX)
        .map_err(|e| AppError::Denied(format!("the inbox folder is not available ({e}); grant it with `autoapp grant files files:inbox`")))?;
    let mut files: Vec<serde_json::Value> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            meta.is_file()
                .then(|| json!({ "name": e.file_name().to_string_lossy(), "bytes": meta.len() }))
        })
        .collect();
    files.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Ok(files)
}

impl exports::autoapp::app::routes::Guest for Files {
    fn handle(route: String, input: String) -> Result<String, AppError> {
        let input: serde_json::Value =
            serde_json::from_str(&input).map_err(|e| AppError::InvalidInput(e.to_string()))?;
        match route.as_str() {
            "files.list" => Ok(json!({ "files": list()? }).to_string()),
            "files.read" => {
                let name = input["name"].as_str().unwrap_or_default();
                if name.contains('/') || name == ".." || name == "." {
                    return Err(AppError::InvalidInput(
                        "give a file name in the inbox, not a path".into(),
                    ));
                }
                let path = format!("{INBOX}/{name}");
                let meta = std::fs::metadata(&path).map_err(|_| {
                    AppError::NotFound(format!("there is no file {name} in the inbox"))
                })?;
                if meta.len() > MAX_READ {
                    return Err(AppError::InvalidInput(format!(
                        "{name} is larger than {} KiB",
                        MAX_READ / 1024
                    )));
                }
                let bytes = std::fs::read(&path)
                    .map_err(|e| AppError::Internal(format!("cannot read {name}: {e}")))?;
                Ok(json!({ "name": name, "text": String::from_utf8_lossy(&bytes) }).to_string())
            }
            other => Err(AppError::NotFound(format!("no route {other}"))),
        }
    }
}

impl exports::autoapp::app::views::Guest for Files {
    fn render(page: String, _query: String) -> Result<String, AppError> {
        if page != "index" {
            return Err(AppError::NotFound(format!("no page {page}")));
        }
        // A page renders as a read, so it sees no folder: it offers the routes instead.
        Ok(json!({
            "title": "Files",
            "children": [
                { "type": "heading", "text": "Files", "level": 1 },
                { "type": "text", "text": "The inbox folder is read by external routes only." },
                { "type": "button", "route": "files.list", "input": {}, "label": "List the inbox" },
                { "type": "form", "route": "files.read", "submit": "Read",
                  "fields": [ { "name": "name", "label": "File name", "kind": "text" } ] }
            ]
        })
        .to_string())
    }
}
