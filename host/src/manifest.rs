//! The manifest, `autoapp.toml`: parsing, validation, the route contract and the
//! syntax of capabilities.
//!
//! Validation reports every problem at once, each with its fix, so a person
//! mends the file in one pass. This module reads the file it is given and does
//! no other I/O: whether a migration file exists is the build's question.

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

pub mod workflow;

pub use workflow::{Schedule, Workflow};

// What an app asks for beyond its store is each capability's to parse and
// check (`caps/`); a manifest holds what they found.
pub use crate::caps::Capabilities;
pub use crate::caps::files::{Access, FilesCap};
pub use crate::caps::network::Origin;
pub use crate::caps::spawn::SpawnCap;
use crate::problems::Problems;

/// The manifest's file name inside a workspace and a release.
pub const MANIFEST_FILE: &str = "autoapp.toml";

/// Longest route name accepted; guards tool lists and logs against absurd names.
pub const MAX_ROUTE_NAME: usize = 64;
/// The longest route summary, in characters (after its blank runs are
/// collapsed): one line a person and an agent read.
pub const MAX_SUMMARY: usize = 200;

/// An app's id: `[a-z][a-z0-9-]{0,39}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AppId(String);

impl AppId {
    /// Checks `s` against the id rule and says what is wrong with it.
    pub fn parse(s: &str) -> Result<AppId, String> {
        let ok = s.len() <= 40
            && s.starts_with(|c: char| c.is_ascii_lowercase())
            && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if ok {
            Ok(AppId(s.to_string()))
        } else {
            Err(format!(
                "`{}` is not an app id: use 1 to 40 characters, lowercase letters, digits and '-', starting with a letter (like `notes` or `my-news`)",
                s.escape_debug()
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AppId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for AppId {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        AppId::parse(&s)
    }
}

impl From<AppId> for String {
    fn from(id: AppId) -> String {
        id.0
    }
}

/// What a route does, and so what a call of it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    /// Reads the store; nothing it sends can change anything.
    Read,
    /// Reads and writes the store; reaches nothing outside it.
    Write,
    /// Writes the store and uses the capabilities declared and granted.
    External,
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Read => "read",
            Effect::Write => "write",
            Effect::External => "external",
        }
    }

    /// Whether a call of this effect gets a store it can write.
    pub fn writes(self) -> bool {
        !matches!(self, Effect::Read)
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One declared route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Route {
    pub name: String,
    pub effect: Effect,
    pub summary: String,
    /// The JSON Schema of the route's input (always an object schema).
    pub input: Json,
}

/// A validated manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub id: AppId,
    pub name: String,
    pub version: String,
    pub description: Option<String>,
    pub routes: Vec<Route>,
    pub capabilities: Capabilities,
    /// Migration files, relative to the workspace (or the release), in order.
    pub migrations: Vec<String>,
    /// `[data] reads_newer_schema`: this release keeps working on data that
    /// later migrations changed, so a rollback may downgrade to it.
    #[serde(default)]
    pub reads_newer_schema: bool,
    /// `[[workflow]]`: routes the launcher runs on a schedule.
    #[serde(default)]
    pub workflows: Vec<Workflow>,
}

impl Manifest {
    pub fn route(&self, name: &str) -> Option<&Route> {
        self.routes.iter().find(|r| r.name == name)
    }
}

/// Every problem found in a manifest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ManifestError {
    /// Where the manifest was read from, for the message.
    pub file: String,
    pub problems: Vec<String>,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.said("fix each and build again"))
    }
}

impl ManifestError {
    /// The problems, for someone who installs a package and cannot build
    /// it: what to do is its publisher's.
    pub fn said_to_installer(&self) -> String {
        self.said("the package cannot be installed until its publisher fixes them")
    }

    fn said(&self, then: &str) -> String {
        match self.problems.as_slice() {
            [one] => format!("{}: {one}.", self.file),
            many => {
                let mut s = format!("{} has {} problems; {then}:", self.file, many.len());
                for p in many {
                    s.push_str("\n  - ");
                    s.push_str(p);
                }
                s
            }
        }
    }
}

/// Reads and validates the manifest at `path`, every rule of [`parse`].
pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
    load_as(path, Strict::Yes)
}

/// Reads the manifest of a release this root holds already (`release/`):
/// every rule of [`parse`] but [`check_shown_text`], which came after some
/// releases were made — a release built before it still loads, is served,
/// explained (with its words escaped) and rolled back to. Everything that
/// enters a root (a build, an install, a restore) passes [`parse`] whole.
pub fn load_stored(path: &Path) -> Result<Manifest, ManifestError> {
    load_as(path, Strict::No)
}

/// Whether a manifest's text is held to [`check_shown_text`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Strict {
    Yes,
    No,
}

fn load_as(path: &Path, strict: Strict) -> Result<Manifest, ManifestError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ManifestError {
        file: file.clone(),
        problems: vec![match e.kind() {
            std::io::ErrorKind::NotFound => {
                format!("there is no {MANIFEST_FILE} here; every app needs one (see docs/manifest.md)")
            }
            _ => format!("cannot be read ({e})"),
        }],
    })?;
    parse_as(&text, &file, strict, None)
}

/// Parses and validates manifest text; `file` names it in messages. Every
/// problem of every section is reported at once, each with its fix.
pub fn parse(text: &str, file: &str) -> Result<Manifest, ManifestError> {
    parse_as(text, file, Strict::Yes, None)
}

/// What a build checks beyond the manifest's own text, reported in the same
/// list as its problems (every problem at once, whichever part it is of).
pub struct Beyond<'a> {
    /// The shortest interval a workflow may have (this root's
    /// `workflow_min_every_secs`).
    pub min_every_secs: u64,
    /// What is wrong with a migration's file, if anything (given its name).
    pub migration: &'a dyn Fn(&str) -> Option<String>,
}

/// [`parse`], with a build's checks `beyond` it.
pub fn parse_beyond(text: &str, file: &str, beyond: &Beyond<'_>) -> Result<Manifest, ManifestError> {
    parse_as(text, file, Strict::Yes, Some(beyond))
}

fn parse_as(text: &str, file: &str, strict: Strict, beyond: Option<&Beyond<'_>>) -> Result<Manifest, ManifestError> {
    let table =
        parse_toml(text).map_err(|problem| ManifestError { file: file.to_string(), problems: vec![problem] })?;
    let mut p = Problems::default();
    if strict == Strict::Yes {
        check_shown_text(&table, &mut p);
        let version = table.get("app").and_then(|a| a.get("version")).and_then(toml::Value::as_str).unwrap_or("");
        if has_version_core(version) && !has_version_suffix(version) {
            p.add(format!(
                "[app] version `{}` is not a version: after MAJOR.MINOR.PATCH, a pre-release or build part is ASCII letters, digits, dots and hyphens (\"1.2.0-rc.1+build.5\")",
                crate::elsewhere::text::terminal(&crate::elsewhere::text::cut(version, 60))
            ));
        }
    }
    p.unknown_keys(&table, "the top level", &["app", "route", "capabilities", "data", "workflow"]);
    let app = parse_app(&table, &mut p);
    let routes = parse_routes(table.get("route"), &mut p);
    let capabilities = match table.get("capabilities") {
        None => Capabilities::default(),
        Some(toml::Value::Table(t)) => crate::caps::parse(t, &mut p),
        Some(_) => {
            p.add("`capabilities` must be a table: write [capabilities]");
            Capabilities::default()
        }
    };
    let (migrations, reads_newer_schema) = parse_data(table.get("data"), &mut p);
    if strict == Strict::Yes {
        // What a release that enters the root must also be (a release the
        // root holds was written already): issue 73.
        for r in routes.iter().filter(|r| r.summary.chars().count() > MAX_SUMMARY) {
            p.add(format!(
                "route `{}`: the summary is {} characters; keep it to {MAX_SUMMARY}, one line saying what the route does",
                r.name,
                r.summary.chars().count()
            ));
        }
        for (i, m) in migrations.iter().enumerate() {
            if let Err(e) = check_migration_written(m).and_then(|()| clash_among(&migrations[..i], m)) {
                p.add(e);
            }
        }
    }
    let workflows = workflow::parse(table.get("workflow"), &routes, &mut p);
    check_across(&routes, &capabilities, &mut p);
    if let Some(beyond) = beyond {
        let min = beyond.min_every_secs;
        for w in workflows.iter().filter(|w| w.schedule.every_secs().is_some_and(|s| s < min)) {
            p.add(format!(
                "workflow `{}` runs {}: a release's workflows run at most once every {min} seconds; write a longer interval, like every = \"{}m\"",
                w.name,
                w.schedule,
                min.div_ceil(60)
            ));
        }
        for m in migrations.iter().filter(|m| check_migration_written(m).is_ok()) {
            if let Some(problem) = (beyond.migration)(m) {
                p.add(problem);
            }
        }
    }
    if !p.0.is_empty() {
        return Err(ManifestError { file: file.to_string(), problems: p.0 });
    }
    Ok(Manifest {
        id: app.id.expect("a manifest without problems has an id"),
        name: app.name,
        version: app.version,
        description: app.description,
        routes,
        capabilities,
        migrations,
        reads_newer_schema,
        workflows,
    })
}

/// The TOML table of the text, or the one problem that it is not TOML (with
/// its line).
fn parse_toml(text: &str) -> Result<toml::Table, String> {
    toml::from_str(text).map_err(|e: toml::de::Error| {
        let msg = e.message().trim_end_matches('.').to_string();
        let at = e
            .span()
            .map(|s| {
                let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                format!(" at line {line}")
            })
            .unwrap_or_default();
        format!("is not valid TOML{at}: {msg}")
    })
}

/// What `[app]` says (its id is `None` when it has a problem).
struct AppSection {
    id: Option<AppId>,
    name: String,
    version: String,
    description: Option<String>,
}

fn parse_app(table: &toml::Table, p: &mut Problems) -> AppSection {
    let empty = toml::Table::new();
    let app = match table.get("app") {
        Some(toml::Value::Table(t)) => t,
        Some(_) => {
            p.add("`app` must be a table: write [app] with id, name and version");
            &empty
        }
        None => {
            p.add("[app] is missing: add [app] with id = \"...\", name = \"...\", version = \"0.1.0\"");
            &empty
        }
    };
    if table.contains_key("app") {
        p.unknown_keys(app, "[app]", &["id", "name", "version", "description"]);
    }
    let id = match p.string(app, "[app]", "id") {
        Some(s) => match AppId::parse(&s) {
            Ok(id) => Some(id),
            Err(e) => {
                p.add(format!("[app] id: {e}"));
                None
            }
        },
        None => None,
    };
    let name = p.string(app, "[app]", "name").unwrap_or_default();
    if table.contains_key("app") && name.trim().is_empty() && app.contains_key("name") {
        p.add("[app] name is empty: give the app a name a person reads, like \"Notes\"");
    }
    let version = p.string(app, "[app]", "version").unwrap_or_default();
    if !version.is_empty() && !has_version_core(&version) {
        p.add(format!(
            "[app] version `{}` is not a version: write MAJOR.MINOR.PATCH, like \"0.1.0\"",
            version.escape_debug()
        ));
    }
    let description = match app.get("description") {
        None => None,
        Some(toml::Value::String(s)) => Some(s.clone()),
        Some(_) => {
            p.add("[app] description must be a string");
            None
        }
    };
    AppSection { id, name, version, description }
}

/// `[[route]]`: each route, and no name twice.
fn parse_routes(value: Option<&toml::Value>, p: &mut Problems) -> Vec<Route> {
    let mut routes = Vec::new();
    // The patterns of the input schemas so far (`MAX_PATTERNS`).
    let mut patterns = 0;
    match value {
        None => {}
        Some(toml::Value::Array(items)) => {
            let mut seen = BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                let where_ = format!("[[route]] number {}", i + 1);
                let Some(t) = item.as_table() else {
                    p.add(format!("{where_} must be a table: write [[route]] on its own line"));
                    continue;
                };
                if let Some(name) = t.get("name").and_then(|n| n.as_str())
                    && !seen.insert(name.to_string())
                {
                    p.add(format!(
                        "route `{}` is declared twice: give each [[route]] its own name",
                        name.escape_debug()
                    ));
                }
                if let Some(r) = parse_route(t, &where_, &mut patterns, p) {
                    routes.push(r);
                }
            }
        }
        Some(_) => p.add("`route` must be an array of tables: write each route as [[route]]"),
    }
    routes
}

/// `[data]`: the migrations (paths inside the workspace, each once) and
/// whether the app reads a newer schema.
fn parse_data(value: Option<&toml::Value>, p: &mut Problems) -> (Vec<String>, bool) {
    let mut migrations = Vec::new();
    let mut reads_newer_schema = false;
    let t = match value {
        None => return (migrations, reads_newer_schema),
        Some(toml::Value::Table(t)) => t,
        Some(_) => {
            p.add("`data` must be a table: write [data]");
            return (migrations, reads_newer_schema);
        }
    };
    p.unknown_keys(t, "[data]", &["migrations", "reads_newer_schema"]);
    match t.get("reads_newer_schema") {
        None => {}
        Some(toml::Value::Boolean(b)) => reads_newer_schema = *b,
        Some(_) => p.add("[data] reads_newer_schema must be true or false"),
    }
    match t.get("migrations") {
        None => {}
        Some(toml::Value::Array(items)) => {
            let mut seen = BTreeSet::new();
            for item in items {
                let Some(s) = item.as_str() else {
                    p.add("[data] migrations must list file paths as strings");
                    continue;
                };
                match check_migration_path(s) {
                    Ok(()) => {
                        if !seen.insert(s.to_string()) {
                            p.add(format!("[data] migrations lists `{}` twice: list each file once", s.escape_debug()));
                        }
                        migrations.push(s.to_string());
                    }
                    Err(e) => p.add(e),
                }
            }
        }
        Some(_) => p.add("[data] migrations must be an array, like [\"migrations/0001_init.sql\"]"),
    }
    (migrations, reads_newer_schema)
}

/// Rules across sections: an external route needs capabilities, and
/// capabilities need an external route to use them.
fn check_across(routes: &[Route], capabilities: &Capabilities, p: &mut Problems) {
    for r in routes.iter().filter(|r| r.effect == Effect::External) {
        if capabilities.is_empty() {
            p.add(format!(
                "route `{}` is external but [capabilities] asks for nothing: add the network origins, files or programs it uses (network = [\"https://...\"], files = [...], spawn = [...]), or make its effect write",
                r.name
            ));
        }
    }
    if !capabilities.is_empty() && !routes.iter().any(|r| r.effect == Effect::External) {
        p.add("[capabilities] asks for something but no route is external, so nothing could use it: remove the capabilities or declare the route that uses them with effect = \"external\"");
    }
}

fn parse_route(t: &toml::Table, where_: &str, patterns: &mut usize, p: &mut Problems) -> Option<Route> {
    p.unknown_keys(t, where_, &["name", "effect", "summary", "input"]);
    let name = p.string(t, where_, "name");
    let where_ = match &name {
        Some(n) => format!("route `{}`", n.escape_debug()),
        None => where_.to_string(),
    };
    if let Some(n) = &name
        && !is_name(n)
    {
        p.add(format!(
            "{where_}: the name must match [a-z][a-z0-9_.-]* and be at most {MAX_ROUTE_NAME} characters, like \"notes.add\""
        ));
    }
    let effect = match t.get("effect") {
        Some(toml::Value::String(s)) => match s.as_str() {
            "read" => Some(Effect::Read),
            "write" => Some(Effect::Write),
            "external" => Some(Effect::External),
            other => {
                p.add(format!("{where_}: effect `{}` is not one of read, write, external", other.escape_debug()));
                None
            }
        },
        Some(_) => {
            p.add(format!("{where_}: effect must be the string \"read\", \"write\" or \"external\""));
            None
        }
        None => {
            p.add(format!("{where_} has no effect: add effect = \"read\", \"write\" or \"external\""));
            None
        }
    };
    let summary = match t.get("summary") {
        // Shown to people and agents on one line: its blank runs collapsed
        // to one space, and bounded (issue 73: 300 blanks wrapped a forged
        // line into `explain`).
        Some(toml::Value::String(s)) if !s.trim().is_empty() => {
            Some(s.split_whitespace().collect::<Vec<_>>().join(" "))
        }
        Some(toml::Value::String(_)) | None => {
            p.add(format!(
                "{where_} has no summary: add summary = \"...\", one line saying what it does (people and AI agents read it)"
            ));
            None
        }
        Some(_) => {
            p.add(format!("{where_}: summary must be a string"));
            None
        }
    };
    let input = match t.get("input") {
        None => Some(serde_json::json!({
            "type": "object", "properties": {}, "additionalProperties": false
        })),
        Some(v) => {
            let json = serde_json::to_value(v).unwrap_or(Json::Null);
            match check_input_schema(&json, patterns) {
                Ok(()) => Some(json),
                Err(e) => {
                    p.add(format!("{where_}: {e}"));
                    None
                }
            }
        }
    };
    Some(Route { name: name?, effect: effect?, summary: summary?, input: input? })
}

/// Whether `n` is a route or workflow name: `[a-z][a-z0-9_.-]*`, at most
/// [`MAX_ROUTE_NAME`] characters.
fn is_name(n: &str) -> bool {
    n.len() <= MAX_ROUTE_NAME
        && n.starts_with(|c: char| c.is_ascii_lowercase())
        && n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-'))
}

/// The input schema must be a JSON Schema that describes an object, with
/// at most [`MAX_PATTERNS`] patterns in all the manifest's (`patterns`: so
/// far, this one's added).
fn check_input_schema(schema: &Json, patterns: &mut usize) -> Result<(), String> {
    let Some(obj) = schema.as_object() else {
        return Err(
            "input must be a JSON Schema object, like input = { type = \"object\", properties = { ... } }".into()
        );
    };
    if obj.get("type") != Some(&Json::String("object".into())) {
        return Err("input must describe an object: add type = \"object\" (routes take a JSON object)".into());
    }
    // Counted before any is compiled.
    *patterns += patterns_in(schema);
    if *patterns > MAX_PATTERNS {
        return Err(format!(
            "the input schemas have more than {MAX_PATTERNS} patterns (`pattern`, each key of `patternProperties`); keep to {MAX_PATTERNS} in all the manifest's routes"
        ));
    }
    input_validator(schema)
        .map(|_| ())
        .map_err(|e| format!("input is not a valid JSON Schema ({e}); see docs/manifest.md"))
}

/// The most patterns the input schemas of one manifest may have. Each is
/// compiled (up to [`MAX_PATTERN_BYTES`], and as much again for its cache)
/// and kept while the release is loaded, by the launcher and the app's
/// workers: a manifest of 256 KiB has room for thousands (500 patterns of
/// `\w{400}`, 25 KB of text, are held in 35 MB; of `\w{4}`, in 9 MB).
const MAX_PATTERNS: usize = 64;

/// How many regular expressions `schema` holds: each `pattern` that is a
/// string, and each key of a `patternProperties`, anywhere in it.
fn patterns_in(schema: &Json) -> usize {
    let (mut n, mut left) = (0, vec![schema]);
    while let Some(v) = left.pop() {
        match v {
            Json::Object(o) => {
                for (k, v) in o {
                    match (k.as_str(), v) {
                        ("pattern", Json::String(_)) => n += 1,
                        ("patternProperties", Json::Object(p)) => n += p.len(),
                        _ => {}
                    }
                    left.push(v);
                }
            }
            Json::Array(a) => left.extend(a),
            _ => {}
        }
    }
    n
}

/// The most a compiled `pattern` of an input schema may be (and its lazy
/// DFA's cache), in bytes.
const MAX_PATTERN_BYTES: usize = 256 << 10;

/// The validator of a route's input schema: the one way the host compiles
/// one. Its `pattern`s and `patternProperties` run on the `regex` engine,
/// in time linear in what they match: a schema is the app's, and the
/// launcher checks inputs (from every caller) and views (a preview's, a
/// page's its worker already checked) against it — a pattern run by
/// backtracking (`(?=(a+)+b)`: a million steps a string before the
/// backtracking engine gives up) would hold a launcher thread for
/// milliseconds on each of a view's million strings. A pattern the `regex` engine cannot
/// run (a lookaround, a backreference) is refused with the manifest.
pub(crate) fn input_validator(schema: &Json) -> Result<jsonschema::Validator, jsonschema::ValidationError<'static>> {
    jsonschema::options()
        .with_pattern_options(
            jsonschema::PatternOptions::regex().size_limit(MAX_PATTERN_BYTES).dfa_size_limit(MAX_PATTERN_BYTES),
        )
        .build(schema)
}

/// The longest part of a migration's path (a folder's or the file's name),
/// in bytes: well inside every file system's 255, with room for the
/// temporary name a file is written under first.
pub const MAX_MIGRATION_PART: usize = 100;
/// The longest migration path, in bytes.
pub const MAX_MIGRATION_PATH: usize = 240;
/// The most folders a migration's path may go down.
const MAX_MIGRATION_DEPTH: usize = 4;

/// The names a release writes beside its migrations (`release::write`): a
/// migration's path may not start with one, in any case.
const RELEASE_OWN_FILES: [&str; 3] = ["component.wasm", MANIFEST_FILE, "release.json"];

/// A migration's path: a relative path of plain parts inside the
/// workspace, a `.sql` file.
fn check_migration_path(s: &str) -> Result<(), String> {
    let path = Path::new(s);
    let said = s.escape_debug();
    let inside =
        !s.is_empty() && path.is_relative() && path.components().all(|c| matches!(c, std::path::Component::Normal(_)));
    if !inside {
        return Err(format!(
            "[data] migration `{said}` must be a relative path inside the workspace, like \"migrations/0001_init.sql\""
        ));
    }
    if !s.ends_with(".sql") {
        return Err(format!("[data] migration `{said}` must be a .sql file"));
    }
    Ok(())
}

/// A migration's path as a release writes it (issue 73, rule 1), for every
/// manifest that enters the root: checked before anything is written, so
/// that a release is never left half written by a name the file system
/// refuses. One slash between parts, each at most [`MAX_MIGRATION_PART`]
/// bytes and not hidden (a leading `.`: the release writes its temporary
/// files so), no backslash, at most [`MAX_MIGRATION_DEPTH`] folders down,
/// the whole at most [`MAX_MIGRATION_PATH`] bytes, and never under one of
/// the release's own files.
fn check_migration_written(s: &str) -> Result<(), String> {
    let said = s.escape_debug();
    if s.contains("//") || s.ends_with('/') {
        return Err(format!(
            "[data] migration `{said}` must be a relative path inside the workspace, like \"migrations/0001_init.sql\""
        ));
    }
    if s.len() > MAX_MIGRATION_PATH {
        return Err(format!(
            "[data] migration `{}` is {} bytes long; a migration's path is at most {MAX_MIGRATION_PATH}",
            crate::elsewhere::text::cut(s, 40).escape_debug(),
            s.len()
        ));
    }
    let parts: Vec<&str> = s.split('/').collect();
    if parts.len() > MAX_MIGRATION_DEPTH + 1 {
        return Err(format!(
            "[data] migration `{said}` is more than {MAX_MIGRATION_DEPTH} folders down; keep it nearer"
        ));
    }
    if let Some(long) = parts.iter().find(|p| p.len() > MAX_MIGRATION_PART) {
        return Err(format!(
            "[data] migration `{}` has a name of {} bytes; each folder's and file's name is at most {MAX_MIGRATION_PART}",
            crate::elsewhere::text::cut(long, 40).escape_debug(),
            long.len()
        ));
    }
    if parts.iter().any(|p| p.starts_with('.') || p.contains('\\')) {
        return Err(format!(
            "[data] migration `{said}` has a name that starts with a dot or holds a backslash; name it like \"migrations/0001_init.sql\""
        ));
    }
    if let Some(own) = RELEASE_OWN_FILES.iter().find(|f| parts[0].eq_ignore_ascii_case(f)) {
        return Err(format!(
            "[data] migration `{said}` is under `{own}`, a file every release holds; put migrations in a folder like migrations/"
        ));
    }
    Ok(())
}

/// Whether the migration `s` cannot be written beside those of `before` (each
/// passed [`check_migration_path`]): one is the other's folder (`a.sql` and
/// `a.sql/b.sql`), or they differ only in case (one file where names are
/// compared without case).
fn clash_among(before: &[String], s: &str) -> Result<(), String> {
    let folder_of = |a: &str, b: &str| b.len() > a.len() && b.as_bytes()[a.len()] == b'/' && b.starts_with(a);
    let Some(other) = before.iter().find(|b| {
        let (lb, ls) = (b.to_lowercase(), s.to_lowercase());
        folder_of(&lb, &ls) || folder_of(&ls, &lb) || (lb == ls && b.as_str() != s)
    }) else {
        return Ok(());
    };
    Err(format!(
        "[data] migrations lists `{}` and `{}`: one would be the other's folder, or they differ only in case; give each its own name",
        other.escape_debug(),
        s.escape_debug()
    ))
}

/// `MAJOR.MINOR.PATCH`, with SemVer's pre-release (`-…`) and build (`+…`)
/// parts made of ASCII letters, digits, dots and hyphens only.
#[cfg(test)]
fn is_version(s: &str) -> bool {
    has_version_core(s) && has_version_suffix(s)
}

/// `MAJOR.MINOR.PATCH` first (what a release made before the suffix rule holds).
fn has_version_core(s: &str) -> bool {
    let core = s.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3 && parts.iter().all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

/// What follows the core is SemVer's characters (issue 51, rule 5: a build
/// suffix carried line breaks and words of the host's).
fn has_version_suffix(s: &str) -> bool {
    let core = s.split(['-', '+']).next().unwrap_or("");
    let tail = &s[core.len()..];
    tail.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'))
        && tail.chars().filter(|&c| c == '+').count() <= 1
        && !tail.ends_with(['-', '+', '.'])
}

/// The most problems of [`check_shown_text`] one manifest reports: a hostile
/// manifest's thousand bad strings are one refusal, not a thousand lines.
const MAX_TEXT_PROBLEMS: usize = 10;

/// Every string and key of a manifest is shown to a person somewhere
/// (`explain`, `install`, the panel's cards, a gate question) and to AI
/// agents (MCP's tool list): none may hold a control character (a line
/// break, an escape: it would forge lines of the host's own) or an invisible
/// format character (a bidi override: it would reorder what the person
/// reads). Refused at build and at install alike, each named by where it is.
fn check_shown_text(table: &toml::Table, p: &mut Problems) {
    fn bad(text: &str) -> bool {
        text.chars().any(|c| crate::elsewhere::text::is_control(c) || crate::elsewhere::text::is_format(c))
    }
    fn walk(value: &toml::Value, at: &str, found: &mut Vec<String>) {
        match value {
            toml::Value::String(s) if bad(s) => found.push(format!(
                "{at} holds a line break, a control or an invisible format character (\"{}\"): what a manifest says is shown to people as it is; write it on one line with visible characters only",
                crate::elsewhere::text::terminal(&crate::elsewhere::text::cut(s, 60))
            )),
            toml::Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, &format!("{at}[{}]", i + 1), found);
                }
            }
            toml::Value::Table(t) => {
                for (k, v) in t {
                    let key = crate::elsewhere::text::terminal(&crate::elsewhere::text::cut(k, 60)).into_owned();
                    if bad(k) {
                        found.push(format!(
                            "{at} has a key holding a control or invisible format character (\"{key}\"): use plain names"
                        ));
                    }
                    let here = if at.is_empty() { key } else { format!("{at}.{key}") };
                    walk(v, &here, found);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk(&toml::Value::Table(table.clone()), "", &mut found);
    let more = found.len().saturating_sub(MAX_TEXT_PROBLEMS);
    for f in found.into_iter().take(MAX_TEXT_PROBLEMS) {
        p.add(f);
    }
    if more > 0 {
        p.add(format!("and {more} more strings hold such characters"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[app]
id = "news"
name = "News"
version = "0.2.0"

[[route]]
name = "headlines.list"
effect = "read"
summary = "The stored headlines"
input = { type = "object", properties = { limit = { type = "integer", minimum = 1, maximum = 100 } } }

[[route]]
name = "headlines.refresh"
effect = "external"
summary = "Fetch and store"

[capabilities]
network = ["https://hn.algolia.com", "https://*.example.com:8443"]
files = [{ name = "inbox", path = "~/Documents/inbox", access = "read" }]
spawn = [{ program = "git" }]

[data]
migrations = ["migrations/0001_init.sql"]
"#;

    #[test]
    fn a_good_manifest_parses_with_defaults_filled_in() {
        let m = parse(GOOD, "autoapp.toml").unwrap();
        assert_eq!(m.id.as_str(), "news");
        assert_eq!(m.routes.len(), 2);
        assert_eq!(m.routes[1].effect, Effect::External);
        assert_eq!(m.routes[1].input["additionalProperties"], Json::Bool(false));
        assert_eq!(m.capabilities.network[1].to_string(), "https://*.example.com:8443");
        assert_eq!(m.capabilities.files[0].access, Access::Read);
    }

    /// A schema's patterns run in linear time: a nested repetition
    /// (`^(a+)+$`, on 40 letters and a digit) is matched, and a pattern only
    /// a backtracking engine runs (a lookahead, in which `(?=(a+)+b)` tries
    /// 2^n ways) is refused with the manifest (fails before: it was taken,
    /// and run by backtracking up to a million steps a string).
    #[test]
    fn an_input_schemas_patterns_run_in_linear_time_and_a_lookahead_is_refused() {
        let route = |pattern: &str| {
            GOOD.replace(
                "input = { type = \"object\", properties = { limit = { type = \"integer\", minimum = 1, maximum = 100 } } }",
                &format!("input = {{ type = \"object\", properties = {{ s = {{ type = \"string\", pattern = '{pattern}' }} }} }}"),
            )
        };
        let m = parse(&route("^(a+)+$"), "autoapp.toml").unwrap();
        let v = input_validator(&m.routes[0].input).unwrap();
        let long = format!("{}1", "a".repeat(40));
        let problems: Vec<String> = v.iter_errors(&serde_json::json!({ "s": long })).map(|e| e.to_string()).collect();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("does not match"), "{problems:?}");
        assert!(v.is_valid(&serde_json::json!({ "s": "aaaa" })));
        let e = parse(&route("^(?=a)a+$"), "autoapp.toml").unwrap_err().to_string();
        assert!(e.contains("input is not a valid JSON Schema"), "{e}");
    }

    /// Each pattern is compiled and kept while the release is loaded: at
    /// most 64 in a manifest (fails before: any number — 500 of `\w{400}`,
    /// 25 KB of a manifest's 256 KiB, held 35 MB).
    #[test]
    fn a_manifest_has_at_most_64_patterns_in_its_input_schemas() {
        let with = |n: usize, pattern: &str| {
            let props: Vec<String> =
                (0..n).map(|i| format!("p{i} = {{ type = \"string\", pattern = '{pattern}{i}' }}")).collect();
            GOOD.replace(
                "input = { type = \"object\", properties = { limit = { type = \"integer\", minimum = 1, maximum = 100 } } }",
                &format!("input = {{ type = \"object\", properties = {{ {} }} }}", props.join(", ")),
            )
        };
        assert!(parse(&with(64, "^\\w{1,64}$"), "autoapp.toml").is_ok());
        let e = parse(&with(65, "^a"), "autoapp.toml").unwrap_err().to_string();
        assert!(e.contains("more than 64 patterns"), "{e}");
        assert_eq!(patterns_in(&serde_json::json!({ "patternProperties": { "^a": {}, "^b": { "pattern": "c" } } })), 3);
    }

    #[test]
    fn every_problem_is_reported_at_once_with_its_fix() {
        let bad = r#"
[app]
id = "Bad Id"
version = "one"
colour = "red"

[[route]]
name = "a"
effect = "read"
summary = "x"

[[route]]
name = "a"
effect = "delete"
summary = "x"

[[route]]
name = "b"
effect = "write"
summary = "y"
input = { type = "string" }

[[route]]
name = "c"
effect = "external"
summary = "z"
"#;
        let e = parse(bad, "autoapp.toml").unwrap_err();
        let all = e.to_string();
        for needle in [
            "unknown key `colour`",
            "not an app id",
            "has no name",
            "not a version",
            "effect `delete` is not one of",
            "declared twice",
            "must describe an object",
            "asks for nothing",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
        }
        assert!(e.problems.len() >= 8, "{all}");
    }

    /// Issue 51, rule 5: a package forged lines on the person's terminal
    /// through its version's build metadata, a route's summary, a program's
    /// name and a migration's path. Every string (and key) of a manifest is
    /// refused when it holds a control or invisible format character.
    #[test]
    fn no_string_of_a_manifest_may_hold_a_line_break_a_control_or_a_format_character() {
        let forged = [
            (
                "version = \"0.2.0\"",
                "version = \"0.2.0+ as a candidate of the app you have\\npublisher: Trusted Apps\"",
            ),
            ("summary = \"The stored headlines\"", "summary = \"The stored headlines\\ninstalled: nothing\""),
            ("program = \"git\"", "program = \"git\\u001b[2K\""),
            ("\"migrations/0001_init.sql\"", "\"migrations/0001\\u202e_init.sql\""),
            ("name = \"News\"", "name = \"News\"\ndescription = \"safe\\u0085\""),
            ("[data]", "[data]\n\"odd\\nkey\" = 1"),
        ];
        for (from, to) in forged {
            assert!(GOOD.contains(from), "{from}");
            let e = parse(&GOOD.replacen(from, to, 1), "autoapp.toml").unwrap_err().to_string();
            assert!(e.contains("control or") && !e.contains('\u{1b}') && !e.contains('\u{202e}'), "{to}: {e}");
        }
        // A version's pre-release and build parts are SemVer's characters.
        assert!(is_version("1.2.3-rc.1+build.5") && is_version("0.1.0"));
        for v in ["0.1.0+a b", "0.1.0+", "0.1.0-", "0.1.0+a+b", "0.1.0+(fingerprint)"] {
            assert!(!is_version(v), "{v}");
        }
        // A release this root made before the rule still loads (its words
        // are escaped where they are shown); nothing new enters with them.
        let dir = tempfile::tempdir().unwrap();
        let stored = dir.path().join("autoapp.toml");
        std::fs::write(
            &stored,
            GOOD.replacen("version = \"0.2.0\"", "version = \"0.2.0+a b\"", 1).replacen(
                "summary = \"The stored headlines\"",
                "summary = \"The stored\\nheadlines\"",
                1,
            ),
        )
        .unwrap();
        assert!(load_stored(&stored).is_ok());
        let e = load(&stored).unwrap_err().to_string();
        assert!(e.contains("control or") && e.contains("is not a version"), "{e}");
        // A thousand bad strings are one refusal of a few lines.
        let many: String = (0..1000).map(|i| format!("k{i} = \"a\\tb\"\n")).collect();
        let e = parse(&format!("{GOOD}\n[extra]\n{many}"), "autoapp.toml").unwrap_err();
        assert!(e.problems.len() <= MAX_TEXT_PROBLEMS + 3, "{}", e.problems.len());
    }

    #[test]
    fn capabilities_without_an_external_route_are_refused() {
        let m = "[app]\nid='a'\nname='A'\nversion='0.1.0'\n[[route]]\nname='x'\neffect='write'\nsummary='s'\n[capabilities]\nnetwork=['https://a.com']\n";
        let e = parse(m, "f").unwrap_err().to_string();
        assert!(e.contains("no route is external"), "{e}");
    }

    #[test]
    fn origins_are_parsed_strictly() {
        assert_eq!(Origin::parse("http://127.0.0.1:8080").unwrap().port, 8080);
        assert_eq!(Origin::parse("https://[::1]").unwrap().host, "::1");
        assert_eq!(Origin::parse("HTTPS://Example.COM/").unwrap().to_string(), "https://example.com");
        for bad in [
            "example.com",
            "ftp://example.com",
            "https://example.com/path",
            "https://user@example.com",
            "https://example.com:0",
            "https://*.com",
            "https://*.127.0.0.1",
            "https://exa mple.com",
            "https://",
        ] {
            assert!(Origin::parse(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn migration_paths_may_not_leave_the_workspace() {
        assert!(check_migration_path("migrations/0001.sql").is_ok());
        assert!(check_migration_path("../x.sql").is_err());
        assert!(check_migration_path("/etc/x.sql").is_err());
        assert!(check_migration_path("./x.sql").is_err());
        assert!(check_migration_path("x.txt").is_err());
    }

    /// Issue 73, point 3: a summary padded with blanks is collapsed to one
    /// line's words; a longer one than a line is refused with what to do.
    #[test]
    fn a_route_summary_is_one_bounded_line() {
        let padded = GOOD.replace("\"The stored headlines\"", &format!("\"The stored{}headlines  \"", " ".repeat(300)));
        let m = parse(&padded, "autoapp.toml").unwrap();
        assert_eq!(m.routes[0].summary, "The stored headlines");
        let long = GOOD.replace("\"The stored headlines\"", &format!("\"{}\"", "word ".repeat(41)));
        let e = parse(&long, "autoapp.toml").unwrap_err().to_string();
        assert!(e.contains("the summary is 204 characters; keep it to 200"), "{e}");
        // A release the root holds already still loads.
        assert!(parse_as(&long, "autoapp.toml", Strict::No, None).is_ok());
    }

    /// Issue 73, rule 1: every name a release writes is checked before
    /// anything is written. These passed, then failed while the release was
    /// written ("File name too long", "File exists"), leaving its files.
    #[test]
    fn a_migration_s_path_is_one_a_release_can_write() {
        let long = format!("migrations/{}.sql", "a".repeat(296));
        let part = |n: usize| format!("m/{}.sql", "a".repeat(n - 4));
        assert!(check_migration_written(&part(MAX_MIGRATION_PART)).is_ok());
        for (bad, says) in [
            (long.as_str(), "bytes long"),
            (&part(MAX_MIGRATION_PART + 1), "has a name of 101 bytes"),
            ("component.wasm/x.sql", "a file every release holds"),
            ("Autoapp.TOML/x.sql", "a file every release holds"),
            ("release.json/0001.sql", "a file every release holds"),
            ("migrations/.0001.sql", "starts with a dot"),
            ("migrations/./0001.sql", "starts with a dot"),
            ("migrations\\0001.sql", "backslash"),
            ("a/b/c/d/e/f.sql", "folders down"),
            ("migrations//0001.sql", "relative path"),
        ] {
            let e = check_migration_path(bad).and_then(|()| check_migration_written(bad)).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(e.len() < 300, "said in one short sentence: {e}");
        }
        let listed = |names: &[&str]| {
            let list = names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ");
            let text = GOOD.replace(r#"migrations = ["migrations/0001_init.sql"]"#, &format!("migrations = [{list}]"));
            parse(&text, "autoapp.toml").map_err(|e| e.to_string())
        };
        assert!(listed(&["migrations/0001.sql", "migrations/0002.sql"]).is_ok());
        for names in [
            &["a.sql", "a.sql/b.sql"][..],
            &["a.sql/b.sql", "a.sql"],
            &["migrations/0001.sql", "Migrations/0001.sql"],
            &["m/x.sql", "M/x.sql/y.sql"],
        ] {
            let e = listed(names).unwrap_err();
            assert!(e.contains("the other's folder, or they differ only in case"), "{names:?}: {e}");
        }
    }

    #[test]
    fn invalid_toml_names_the_line() {
        let e = parse("[app]\nid = \n", "autoapp.toml").unwrap_err().to_string();
        assert!(e.contains("not valid TOML at line"), "{e}");
    }
}
