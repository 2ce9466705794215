//! The engineer's tools' inputs, as types: each tool's JSON Schema is derived
//! from its type (`schemars`, as rmcp's own tool macros do) and serde checks
//! every call against it, so what a client is told and what the launcher
//! accepts are one thing. Unknown fields are refused (`deny_unknown_fields`,
//! `additionalProperties: false`).

// Each input's `app` is read once, by `Engineer::call`, as [`Named`]; the
// field is in each type for its schema and its check.
#![allow(dead_code)]

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{ErrorKind, kinded};

/// The JSON Schema of `T`, every part inline (no `$ref`): what MCP clients show.
pub fn schema<T: JsonSchema>() -> Value {
    let settings = schemars::generate::SchemaSettings::draft2020_12().with(|s| {
        s.inline_subschemas = true;
    });
    let mut v = settings.into_generator().into_root_schema_for::<T>().to_value();
    if let Value::Object(m) = &mut v {
        // The tool has its own name and description.
        m.remove("$schema");
        m.remove("title");
        m.remove("description");
        m.entry("properties").or_insert_with(|| Value::Object(Default::default()));
    }
    v
}

/// `args` read as `T`, or a sentence saying what is wrong.
pub fn parse<T: DeserializeOwned>(tool: &str, args: &Value) -> anyhow::Result<T> {
    serde_json::from_value(args.clone()).map_err(|e| kinded(ErrorKind::InvalidInput, format!("{tool}: {e}")))
}

/// `args` of a step of `candidate_cycle` read as `T`: the `step` marker the
/// cycle adds (for the step's question and record) is not the tool's input.
/// A client's own `step` never gets here: `Engineer::call` checks what a
/// client sends against the tool's type first.
pub fn parse_step<T: DeserializeOwned>(tool: &str, args: &Value) -> anyhow::Result<T> {
    let mut a = args.clone();
    if let Value::Object(m) = &mut a {
        m.remove("step");
    }
    parse(tool, &a)
}

/// The app a tool names, whatever else it takes.
#[derive(Debug, Deserialize)]
pub struct Named {
    pub app: String,
}

/// No input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Nothing {}

/// One app.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AppOnly {
    /// the app's id, as apps_list gives it
    pub app: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceList {
    /// the app's id, as apps_list gives it
    pub app: String,
    /// a folder to list (default: all), relative to the app's workspace (like src)
    pub under: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceRead {
    /// the app's id, as apps_list gives it
    pub app: String,
    /// the file, relative to the app's workspace (like src/lib.rs)
    pub path: String,
    /// the byte to start at (default 0)
    pub offset: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceSearch {
    /// the app's id, as apps_list gives it
    pub app: String,
    /// a regular expression (Rust regex syntax), at most 1024 bytes
    pub pattern: String,
    /// a folder to search (default: all), relative to the app's workspace
    pub under: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceEdit {
    /// the app's id, as apps_list gives it
    pub app: String,
    /// the file, relative to the app's workspace (like src/lib.rs)
    pub path: String,
    /// the exact text to replace; it must occur once
    pub old: String,
    /// the text to put there
    pub new: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceWrite {
    /// the app's id, as apps_list gives it
    pub app: String,
    /// the file, relative to the app's workspace (like src/lib.rs)
    pub path: String,
    /// the file's whole new text
    pub content: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceDelete {
    /// the app's id, as apps_list gives it
    pub app: String,
    /// the file, relative to the app's workspace (like src/lib.rs)
    pub path: String,
}

/// A release of an app.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Release {
    /// the app's id, as apps_list gives it
    pub app: String,
    /// a release id or a unique prefix of one (default: the newest candidate)
    pub release: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PreviewStop {
    /// the app's id, as apps_list gives it
    pub app: String,
    /// the preview's release (default: every preview of the app)
    pub release: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PreviewCall {
    /// the app's id, as apps_list gives it
    pub app: String,
    /// the route's name, as candidate_explain lists it
    pub route: String,
    /// the route's input (default {})
    pub input: Option<serde_json::Map<String, Value>>,
    /// the preview's release (default: the newest preview)
    pub release: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunsRead {
    /// the app's id, as apps_list gives it
    pub app: String,
    /// how many of the newest rows (default 50)
    #[schemars(range(min = 1, max = 200))]
    pub limit: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogsRead {
    /// the app's id, as apps_list gives it
    pub app: String,
    /// how many of the newest lines (default 100)
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AppsCreate {
    /// the new app's id: lowercase letters, digits and -
    pub app: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CandidateCycle {
    /// the app's id, as apps_list gives it
    pub app: String,
    /// the file, relative to the app's workspace (like src/lib.rs)
    pub path: String,
    /// the exact text to replace; it must occur once
    pub old: String,
    /// the text to put there
    pub new: String,
    /// a read route to call in the preview when it runs (its input is {})
    pub check: Option<String>,
}

/// What a plan says it changes.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Touches {
    /// route names
    #[serde(default)]
    #[schemars(length(max = 100))]
    pub routes: Vec<String>,
    /// tables of the app's store
    #[serde(default)]
    #[schemars(length(max = 100))]
    pub tables: Vec<String>,
    /// files of the workspace, like src/lib.rs
    #[serde(default)]
    #[schemars(length(max = 100))]
    pub files: Vec<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanOpen {
    /// the app's id, as apps_list gives it
    pub app: String,
    /// what you were asked to do, as you understood it (at most 2,000 characters)
    #[schemars(length(max = crate::plans::MAX_REQUEST))]
    pub request: String,
    /// how you mean to do it, in a few sentences (at most 4,000 characters)
    #[schemars(length(max = crate::plans::MAX_SUMMARY))]
    pub summary: Option<String>,
    /// what the plan changes
    pub touches: Option<Touches>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanTask {
    /// the plan's id, as plan_open gave it
    #[schemars(range(min = 1))]
    pub plan: u64,
    /// the task, in a line (title and detail together at most 1,000 characters; a plan has at most 30 tasks)
    #[schemars(length(max = crate::plans::MAX_TASK))]
    pub title: String,
    /// what it involves
    #[schemars(length(max = crate::plans::MAX_TASK))]
    pub detail: Option<String>,
}

/// One plan.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanRef {
    /// the plan's id, as plan_open gave it
    #[schemars(range(min = 1))]
    pub plan: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanRead {
    /// the app's id, as apps_list gives it: every plan of the app
    pub app: Option<String>,
    /// the plan's id, as plan_open gave it: that plan
    #[schemars(range(min = 1))]
    pub plan: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanTaskDone {
    /// the plan's id, as plan_open gave it
    #[schemars(range(min = 1))]
    pub plan: u64,
    /// the task's number
    #[schemars(range(min = 1))]
    pub task: u32,
    /// what you did
    pub note: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanFinish {
    /// the plan's id, as plan_open gave it
    #[schemars(range(min = 1))]
    pub plan: u64,
    /// what was done, and what was not
    pub outcome: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_schema_is_a_closed_object_with_its_required_fields_and_descriptions() {
        let s = schema::<SourceRead>();
        assert_eq!(s["type"], "object");
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["required"], serde_json::json!(["app", "path"]));
        assert_eq!(
            s["properties"]["path"]["description"],
            "the file, relative to the app's workspace (like src/lib.rs)"
        );
        assert!(s.get("$schema").is_none() && s.get("$defs").is_none());
        let open = schema::<PlanOpen>();
        assert_eq!(open["properties"]["touches"]["additionalProperties"], false, "inline: {open}");
        assert_eq!(open["properties"]["request"]["maxLength"], crate::plans::MAX_REQUEST, "{open}");
        assert_eq!(schema::<PlanTask>()["properties"]["title"]["maxLength"], crate::plans::MAX_TASK);
        assert_eq!(schema::<Nothing>()["properties"], serde_json::json!({}));
    }

    #[test]
    fn serde_checks_each_call_against_the_type() {
        let ok: SourceRead =
            parse("source_read", &serde_json::json!({ "app": "a", "path": "p", "offset": 3 })).unwrap();
        assert_eq!(ok.offset, Some(3));
        for bad in [
            serde_json::json!({ "app": "a", "path": "p", "offset": -1 }),
            serde_json::json!({ "app": "a", "path": 3 }),
            serde_json::json!({ "app": "a" }),
            serde_json::json!({ "app": "a", "path": "p", "other": 1 }),
        ] {
            let e = parse::<SourceRead>("source_read", &bad).unwrap_err();
            assert_eq!(crate::error::kind_of(&e), ErrorKind::InvalidInput, "{bad}");
            assert!(e.to_string().starts_with("source_read: "), "{e}");
        }
    }
}
