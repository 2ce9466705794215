//! Notes with tags: a small real app on Autoapp's WIT.
//!
//! Routes (declared with their effects in `autoapp.toml`): `notes.list` (read),
//! `notes.add`, `notes.tag`, `notes.delete` (write). Pages: `index` (the list and
//! a form) and `note` (one note, its tags, a tag form and a delete button).

wit_bindgen::generate!({
    path: "../../wit",
    world: "autoapp:app/app",
    generate_all,
});

use autoapp::app::log::{self, Level};
use autoapp::app::store::{self, Value};
use autoapp::app::types::AppError;
use serde::Deserialize;
use serde_json::{Value as Json, json};

struct Notes;

export!(Notes);

#[derive(Deserialize)]
struct ListInput {
    tag: Option<String>,
    limit: Option<i64>,
}

#[derive(Deserialize)]
struct AddInput {
    title: String,
    #[serde(default)]
    body: String,
    #[serde(default)]
    tags: Vec<String>,
}

#[derive(Deserialize)]
struct TagInput {
    id: i64,
    tag: String,
}

#[derive(Deserialize)]
struct IdInput {
    id: i64,
}

fn parse<T: for<'de> Deserialize<'de>>(input: &str) -> Result<T, AppError> {
    serde_json::from_str(input).map_err(|e| AppError::InvalidInput(e.to_string()))
}

fn text(v: &Value) -> String {
    match v {
        Value::Text(s) => s.clone(),
        Value::Integer(i) => i.to_string(),
        Value::Real(r) => r.to_string(),
        Value::Null => String::new(),
        Value::Blob(_) => "(bytes)".into(),
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Integer(i) => *i,
        _ => 0,
    }
}

/// The notes, newest first, each with its tags.
fn list(tag: Option<&str>, limit: i64) -> Result<Vec<Json>, AppError> {
    let rows = match tag {
        Some(t) => store::query(
            "SELECT n.id, n.title, n.body, n.created_at FROM notes n
             JOIN note_tags t ON t.note_id = n.id WHERE t.tag = ?1
             ORDER BY n.id DESC LIMIT ?2",
            &[Value::Text(t.to_string()), Value::Integer(limit)],
        )?,
        None => store::query(
            "SELECT id, title, body, created_at FROM notes ORDER BY id DESC LIMIT ?1",
            &[Value::Integer(limit)],
        )?,
    };
    rows.rows
        .iter()
        .map(|r| {
            let id = int(&r[0]);
            Ok(json!({
                "id": id,
                "title": text(&r[1]),
                "body": text(&r[2]),
                "created_at": text(&r[3]),
                "tags": tags_of(id)?,
            }))
        })
        .collect()
}

fn tags_of(id: i64) -> Result<Vec<String>, AppError> {
    let rows = store::query(
        "SELECT tag FROM note_tags WHERE note_id = ?1 ORDER BY tag",
        &[Value::Integer(id)],
    )?;
    Ok(rows.rows.iter().map(|r| text(&r[0])).collect())
}

fn exists(id: i64) -> Result<bool, AppError> {
    let rows = store::query("SELECT 1 FROM notes WHERE id = ?1", &[Value::Integer(id)])?;
    Ok(!rows.rows.is_empty())
}

fn add_tag(id: i64, tag: &str) -> Result<(), AppError> {
    store::execute(
        "INSERT OR IGNORE INTO note_tags (note_id, tag) VALUES (?1, ?2)",
        &[Value::Integer(id), Value::Text(tag.trim().to_string())],
    )?;
    Ok(())
}

impl exports::autoapp::app::routes::Guest for Notes {
    fn handle(route: String, input: String) -> Result<String, AppError> {
        let answer = match route.as_str() {
            "notes.list" => {
                let i: ListInput = parse(&input)?;
                json!({ "notes": list(i.tag.as_deref(), i.limit.unwrap_or(50))? })
            }
            "notes.add" => {
                let i: AddInput = parse(&input)?;
                if i.title.trim().is_empty() {
                    return Err(AppError::InvalidInput("a note needs a title".into()));
                }
                let rows = store::query(
                    "INSERT INTO notes (title, body) VALUES (?1, ?2) RETURNING id",
                    &[Value::Text(i.title.trim().to_string()), Value::Text(i.body)],
                )?;
                let id = rows.rows.first().map(|r| int(&r[0])).unwrap_or(0);
                for t in &i.tags {
                    add_tag(id, t)?;
                }
                log::write(Level::Info, &format!("added note {id}"));
                json!({ "id": id })
            }
            "notes.tag" => {
                let i: TagInput = parse(&input)?;
                if !exists(i.id)? {
                    return Err(AppError::NotFound(format!("there is no note {}", i.id)));
                }
                add_tag(i.id, &i.tag)?;
                json!({ "id": i.id, "tags": tags_of(i.id)? })
            }
            "notes.delete" => {
                let i: IdInput = parse(&input)?;
                let n = store::execute("DELETE FROM notes WHERE id = ?1", &[Value::Integer(i.id)])?;
                if n == 0 {
                    return Err(AppError::NotFound(format!("there is no note {}", i.id)));
                }
                json!({ "deleted": i.id })
            }
            other => return Err(AppError::NotFound(format!("no route {other}"))),
        };
        Ok(answer.to_string())
    }
}

impl exports::autoapp::app::views::Guest for Notes {
    fn render(page: String, query: String) -> Result<String, AppError> {
        let view = match page.as_str() {
            "index" => {
                let notes = list(None, 100)?;
                let tagged = notes
                    .iter()
                    .filter(|n| n["tags"].as_array().is_some_and(|t| !t.is_empty()))
                    .count();
                let items: Vec<Json> = notes
                    .iter()
                    .map(|n| json!({ "type": "link", "page": "note", "query": { "id": n["id"] }, "text": n["title"] }))
                    .collect();
                json!({
                    "title": "Notes",
                    "children": [
                        { "type": "heading", "text": "Notes", "level": 1 },
                        { "type": "text", "text": format!("{} note{}, {} tagged", notes.len(), if notes.len() == 1 { "" } else { "s" }, tagged) },
                        { "type": "form", "route": "notes.add", "submit": "Add",
                          "fields": [
                              { "name": "title", "label": "Title", "kind": "text" },
                              { "name": "body", "label": "Body", "kind": "textarea" }
                          ] },
                        { "type": "section", "title": "Recent", "children": [ { "type": "list", "items": items } ] }
                    ]
                })
            }
            "note" => {
                let q: IdInput = parse(&query)?;
                let rows = store::query(
                    "SELECT title, body, created_at FROM notes WHERE id = ?1",
                    &[Value::Integer(q.id)],
                )?;
                let Some(r) = rows.rows.first() else {
                    return Err(AppError::NotFound(format!("there is no note {}", q.id)));
                };
                let tags = tags_of(q.id)?;
                json!({
                    "title": text(&r[0]),
                    "children": [
                        { "type": "heading", "text": text(&r[0]), "level": 1 },
                        { "type": "text", "text": text(&r[1]) },
                        { "type": "table", "columns": ["Created", "Tags"], "rows": [[text(&r[2]), tags.join(", ")]] },
                        { "type": "form", "route": "notes.tag", "submit": "Tag",
                          "fields": [
                              { "name": "id", "label": "Note", "kind": "number", "value": q.id },
                              { "name": "tag", "label": "Tag", "kind": "text" }
                          ] },
                        { "type": "button", "route": "notes.delete", "input": { "id": q.id }, "label": "Delete" },
                        { "type": "link", "page": "index", "query": {}, "text": "All notes" }
                    ]
                })
            }
            other => return Err(AppError::NotFound(format!("no page {other}"))),
        };
        Ok(view.to_string())
    }
}
