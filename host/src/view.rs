//! The view spec: what `views.render` returns, checked by the host before any
//! of it reaches a page. Only the node types below exist; text is always text
//! (the renderer never interprets it as HTML); forms and buttons may name only
//! the release's routes, with fields and inputs that fit the route's schema.

use serde_json::{Map, Value};

use crate::manifest::Manifest;

/// The deepest a view may nest.
pub const MAX_DEPTH: usize = 16;

/// The most nodes one view may have.
pub const MAX_NODES: usize = 10_000;

/// Field kinds a form may use, and the JSON type each gives its value.
const FIELD_KINDS: &[(&str, &[&str])] = &[
    ("text", &["string"]),
    ("textarea", &["string"]),
    ("date", &["string"]),
    ("select", &["string"]),
    ("number", &["integer", "number"]),
    ("checkbox", &["boolean"]),
];

/// Checks `spec` against the view rules and `manifest`'s routes; `fits(route,
/// input)` says whether a button's input fits its route's schema (the caller
/// holds the compiled schemas). The error is one sentence naming the node.
pub fn validate(spec: &Value, manifest: &Manifest, fits: &dyn Fn(&str, &Value) -> bool) -> Result<(), String> {
    let mut v = Checker { manifest, fits, nodes: 0 };
    let root = spec.as_object().ok_or("the view is not a JSON object with a title and children")?;
    v.keys(root, "the view", &["title", "children"])?;
    v.string(root, "the view", "title")?;
    v.children(root, "", 0)
}

struct Checker<'a> {
    manifest: &'a Manifest,
    fits: &'a dyn Fn(&str, &Value) -> bool,
    nodes: usize,
}

impl Checker<'_> {
    fn keys(&self, obj: &Map<String, Value>, at: &str, allowed: &[&str]) -> Result<(), String> {
        match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(k) => {
                Err(format!("{at} has an unknown key `{}`; it may have {}", k.escape_debug(), allowed.join(", ")))
            }
            None => Ok(()),
        }
    }

    fn string<'v>(&self, obj: &'v Map<String, Value>, at: &str, key: &str) -> Result<&'v str, String> {
        obj.get(key).and_then(Value::as_str).ok_or_else(|| format!("{at} needs `{key}` as a string"))
    }

    fn children(&mut self, obj: &Map<String, Value>, at: &str, depth: usize) -> Result<(), String> {
        let list = obj
            .get("children")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("{} needs `children` as a list", name(at)))?;
        for (i, child) in list.iter().enumerate() {
            self.node(child, &format!("{at}/children/{i}"), depth + 1)?;
        }
        Ok(())
    }

    fn node(&mut self, node: &Value, at: &str, depth: usize) -> Result<(), String> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(format!("the view has more than {MAX_NODES} nodes (at {at})"));
        }
        if depth > MAX_DEPTH {
            return Err(format!("the node at {at} is nested deeper than {MAX_DEPTH} levels"));
        }
        let obj = node.as_object().ok_or_else(|| format!("the node at {at} is not an object"))?;
        let kind = obj.get("type").and_then(Value::as_str).ok_or_else(|| format!("the node at {at} has no `type`"))?;
        let here = format!("the {kind} at {at}");
        match kind {
            "heading" => {
                self.keys(obj, &here, &["type", "text", "level"])?;
                self.string(obj, &here, "text")?;
                match obj.get("level") {
                    None => {}
                    Some(l) if l.as_u64().is_some_and(|l| (1..=6).contains(&l)) => {}
                    Some(_) => return Err(format!("{here} has a `level` that is not 1 to 6")),
                }
            }
            "text" => {
                self.keys(obj, &here, &["type", "text"])?;
                self.string(obj, &here, "text")?;
            }
            "section" => {
                self.keys(obj, &here, &["type", "title", "children"])?;
                if obj.contains_key("title") {
                    self.string(obj, &here, "title")?;
                }
                self.children(obj, at, depth)?;
            }
            "list" => self.list(obj, &here, at, depth)?,
            "link" => self.link(obj, &here)?,
            "table" => self.table(obj, &here)?,
            "form" => self.form(obj, &here, at)?,
            "button" => self.button(obj, &here)?,
            "chart" => self.chart(obj, &here)?,
            other => {
                return Err(format!(
                    "the node at {at} has the unknown type `{}`; the types are heading, text, section, list, link, table, form, button, chart",
                    other.escape_debug()
                ));
            }
        }
        Ok(())
    }

    /// A list: its items are nodes.
    fn list(&mut self, obj: &Map<String, Value>, here: &str, at: &str, depth: usize) -> Result<(), String> {
        self.keys(obj, here, &["type", "items"])?;
        let items =
            obj.get("items").and_then(Value::as_array).ok_or_else(|| format!("{here} needs `items` as a list"))?;
        for (i, item) in items.iter().enumerate() {
            self.node(item, &format!("{at}/items/{i}"), depth + 1)?;
        }
        Ok(())
    }

    /// A link to another page of the app (a page name, an object query).
    fn link(&mut self, obj: &Map<String, Value>, here: &str) -> Result<(), String> {
        self.keys(obj, here, &["type", "page", "query", "text"])?;
        self.string(obj, here, "text")?;
        let page = self.string(obj, here, "page")?;
        if !valid_page(page) {
            return Err(format!(
                "{here} names the page `{}`, which is not a page name ([a-z][a-z0-9_.-]*)",
                page.escape_debug()
            ));
        }
        if obj.get("query").is_some_and(|q| !q.is_object()) {
            return Err(format!("{here} has a `query` that is not an object"));
        }
        Ok(())
    }

    /// A table: string columns; rows of as many cells, each text, a number, a boolean or null.
    fn table(&mut self, obj: &Map<String, Value>, here: &str) -> Result<(), String> {
        self.keys(obj, here, &["type", "columns", "rows"])?;
        let cols =
            obj.get("columns").and_then(Value::as_array).ok_or_else(|| format!("{here} needs `columns` as a list"))?;
        if !cols.iter().all(Value::is_string) {
            return Err(format!("{here} has a column name that is not a string"));
        }
        let rows = obj.get("rows").and_then(Value::as_array).ok_or_else(|| format!("{here} needs `rows` as a list"))?;
        for (i, row) in rows.iter().enumerate() {
            let cells = row.as_array().ok_or_else(|| format!("{here} has row {i} that is not a list"))?;
            if cells.len() != cols.len() {
                return Err(format!("{here} has row {i} with {} cells for {} columns", cells.len(), cols.len()));
            }
            if cells.iter().any(|c| c.is_object() || c.is_array()) {
                return Err(format!("{here} has a cell in row {i} that is not text, a number, a boolean or null"));
            }
            self.nodes += cells.len();
        }
        Ok(())
    }

    /// A form bound to a route of this release; its fields fit the route's schema.
    fn form(&mut self, obj: &Map<String, Value>, here: &str, at: &str) -> Result<(), String> {
        self.keys(obj, here, &["type", "route", "submit", "fields"])?;
        self.string(obj, here, "submit")?;
        let route = self.route(obj, here)?;
        let fields =
            obj.get("fields").and_then(Value::as_array).ok_or_else(|| format!("{here} needs `fields` as a list"))?;
        self.fields(fields, route, here, at)?;
        Ok(())
    }

    /// A button bound to a route of this release, its input fitting the schema.
    fn button(&mut self, obj: &Map<String, Value>, here: &str) -> Result<(), String> {
        self.keys(obj, here, &["type", "route", "input", "label"])?;
        self.string(obj, here, "label")?;
        let route = self.route(obj, here)?;
        let input = obj.get("input").cloned().unwrap_or(Value::Object(Map::new()));
        if !(self.fits)(route, &input) {
            return Err(format!("{here} has an `input` that does not fit route {route}'s schema"));
        }
        Ok(())
    }

    /// A bar or line chart: string labels, and series of one number per label.
    fn chart(&mut self, obj: &Map<String, Value>, here: &str) -> Result<(), String> {
        self.keys(obj, here, &["type", "kind", "labels", "series"])?;
        let k = self.string(obj, here, "kind")?;
        if !matches!(k, "bar" | "line") {
            return Err(format!("{here} has kind `{}`; a chart is a bar or a line chart", k.escape_debug()));
        }
        let labels =
            obj.get("labels").and_then(Value::as_array).ok_or_else(|| format!("{here} needs `labels` as a list"))?;
        if !labels.iter().all(Value::is_string) {
            return Err(format!("{here} has a label that is not a string"));
        }
        let series =
            obj.get("series").and_then(Value::as_array).ok_or_else(|| format!("{here} needs `series` as a list"))?;
        for (i, s) in series.iter().enumerate() {
            let s = s.as_object().ok_or_else(|| format!("{here} has series {i} that is not an object"))?;
            self.keys(s, &format!("series {i} of {here}"), &["name", "values"])?;
            self.string(s, &format!("series {i} of {here}"), "name")?;
            let values = s
                .get("values")
                .and_then(Value::as_array)
                .ok_or_else(|| format!("series {i} of {here} needs `values`"))?;
            if values.len() != labels.len() || !values.iter().all(Value::is_number) {
                return Err(format!("series {i} of {here} needs one number per label"));
            }
        }
        Ok(())
    }

    fn route<'v>(&self, obj: &'v Map<String, Value>, here: &str) -> Result<&'v str, String> {
        let route = self.string(obj, here, "route")?;
        if self.manifest.route(route).is_none() {
            return Err(format!("{here} names the route `{}`, which this release does not have", route.escape_debug()));
        }
        Ok(route)
    }

    fn fields(&mut self, fields: &[Value], route: &str, here: &str, at: &str) -> Result<(), String> {
        let schema = &self.manifest.route(route).expect("checked").input;
        let props = schema.get("properties").and_then(Value::as_object);
        let mut named = Vec::new();
        for (i, f) in fields.iter().enumerate() {
            self.nodes += 1;
            let fat = format!("the field at {at}/fields/{i}");
            let f = f.as_object().ok_or_else(|| format!("{fat} is not an object"))?;
            self.keys(f, &fat, &["name", "label", "kind", "options", "value"])?;
            let name = self.string(f, &fat, "name")?;
            self.string(f, &fat, "label")?;
            let kind = self.string(f, &fat, "kind")?;
            let Some((_, types)) = FIELD_KINDS.iter().find(|(k, _)| *k == kind) else {
                return Err(format!(
                    "{fat} has kind `{}`; the kinds are text, textarea, number, checkbox, select, date",
                    kind.escape_debug()
                ));
            };
            if kind == "select" {
                let opts = f.get("options").and_then(Value::as_array);
                if !opts.is_some_and(|o| !o.is_empty() && o.iter().all(Value::is_string)) {
                    return Err(format!("{fat} is a select and needs `options` as a list of strings"));
                }
            }
            let prop = props.and_then(|p| p.get(name));
            let Some(prop) = prop else {
                return Err(format!("{fat} is named `{}`, which route {route} does not take", name.escape_debug()));
            };
            if let Some(t) = prop.get("type").and_then(Value::as_str)
                && !types.contains(&t)
            {
                return Err(format!("{fat} is a {kind} field but route {route} takes `{name}` as {t}"));
            }
            named.push(name.to_string());
        }
        for req in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            if !named.iter().any(|n| n == req) {
                return Err(format!("{here} has no field for `{req}`, which route {route} requires"));
            }
        }
        Ok(())
    }
}

fn name(at: &str) -> String {
    if at.is_empty() { "the view".into() } else { format!("the node at {at}") }
}

fn valid_page(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 64
        && p.starts_with(|c: char| c.is_ascii_lowercase())
        && p.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn manifest() -> Manifest {
        crate::manifest::parse(
            r#"
[app]
id = "notes"
name = "Notes"
version = "0.1.0"
[[route]]
name = "notes.add"
effect = "write"
summary = "add"
input = { type = "object", required = ["title"], properties = { title = { type = "string" }, pinned = { type = "boolean" }, n = { type = "integer" } } }
[[route]]
name = "notes.delete"
effect = "write"
summary = "delete"
input = { type = "object", required = ["id"], properties = { id = { type = "integer" } } }
"#,
            "t",
        )
        .unwrap()
    }

    fn check(children: Value) -> Result<(), String> {
        let m = manifest();
        let fits = |route: &str, input: &Value| {
            let schema = &m.route(route).unwrap().input;
            crate::manifest::input_validator(schema).unwrap().is_valid(input)
        };
        validate(&json!({ "title": "T", "children": children }), &m, &fits)
    }

    #[test]
    fn the_design_example_is_valid() {
        check(json!([
            { "type": "heading", "text": "Notes", "level": 1 },
            { "type": "text", "text": "<script>alert(1)</script> is just text" },
            { "type": "section", "title": "Recent", "children": [
                { "type": "list", "items": [ { "type": "link", "page": "note", "query": { "id": 3 }, "text": "G" } ] } ] },
            { "type": "table", "columns": ["Title", "Tags"], "rows": [["Groceries", "home"]] },
            { "type": "form", "route": "notes.add", "submit": "Add", "fields": [
                { "name": "title", "label": "Title", "kind": "text" },
                { "name": "pinned", "label": "Pinned", "kind": "checkbox" } ] },
            { "type": "button", "route": "notes.delete", "input": { "id": 3 }, "label": "Delete" },
            { "type": "chart", "kind": "bar", "labels": ["Mon", "Tue"], "series": [ { "name": "notes", "values": [2, 5] } ] }
        ]))
        .unwrap();
    }

    #[test]
    fn each_rule_refuses_with_a_sentence_naming_the_node() {
        for (children, want) in [
            (json!([{ "type": "html", "html": "<b>x</b>" }]), "unknown type `html`"),
            (json!([{ "type": "text", "text": "x", "html": "<b>" }]), "unknown key `html`"),
            (json!([{ "type": "button", "route": "notes.nuke", "label": "x" }]), "route `notes.nuke`"),
            (
                json!([{ "type": "button", "route": "notes.delete", "input": { "id": "3" }, "label": "x" }]),
                "does not fit route notes.delete",
            ),
            (
                json!([{ "type": "form", "route": "notes.add", "submit": "x", "fields": [ { "name": "titel", "label": "x", "kind": "text" } ] }]),
                "`titel`",
            ),
            (
                json!([{ "type": "form", "route": "notes.add", "submit": "x", "fields": [ { "name": "title", "label": "x", "kind": "checkbox" } ] }]),
                "takes `title` as string",
            ),
            (
                json!([{ "type": "form", "route": "notes.add", "submit": "x", "fields": [ { "name": "pinned", "label": "x", "kind": "checkbox" } ] }]),
                "requires",
            ),
            (json!([{ "type": "link", "page": "../etc", "text": "x" }]), "not a page name"),
            (json!([{ "type": "table", "columns": ["a"], "rows": [["x", "y"]] }]), "2 cells for 1 columns"),
        ] {
            let e = check(children.clone()).unwrap_err();
            assert!(e.contains(want), "{children}: {e}");
            assert!(e.contains("/children/0"), "the node is named: {e}");
        }
    }

    #[test]
    fn depth_and_size_are_bounded() {
        let mut deep = json!({ "type": "text", "text": "bottom" });
        for _ in 0..20 {
            deep = json!({ "type": "section", "children": [deep] });
        }
        assert!(check(json!([deep])).unwrap_err().contains("deeper than 16"));
        let many: Vec<Value> = (0..10_001).map(|_| json!({ "type": "text", "text": "x" })).collect();
        assert!(check(json!(many)).unwrap_err().contains("more than 10000 nodes"));
    }
}
