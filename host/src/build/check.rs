//! What the engineer's builds refuse before anything runs: configuration
//! that names a program or a place outside the workspace.
//!
//! The engineer cannot write cargo's or rustup's configuration (see
//! `engineer::source`), but a workspace may hold some the person wrote. A
//! build the engineer starts runs with nobody watching, so it accepts cargo
//! configuration only from a short list of keys that name neither a program
//! nor a place ([`ALLOWED`]), no toolchain `path`, and manifests whose
//! `path`s stay inside the workspace and whose `git` sources are not local.
//! Every problem is listed at once, each naming its file and key. The
//! person's own builds run such configuration as they wrote it — confined.

use std::path::{Component, Path, PathBuf};

use super::is_local_source;
use super::toolchain::Choice;

/// The cargo configuration files a build in `ws` reads: `.cargo/config.toml`
/// (or the legacy `.cargo/config`) of `ws` and of every folder above it.
/// (cargo's own home is not one: a build gets a home of its own.)
pub fn cargo_configs(ws: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in ws.ancestors() {
        for name in ["config", "config.toml"] {
            let f = dir.join(".cargo").join(name);
            if f.is_file() {
                out.push(f);
            }
        }
    }
    out
}

/// The cargo configuration keys an engineer's build accepts (a key, or a
/// table whose every key is accepted): none names a program or a place.
pub const ALLOWED: &[&str] = &[
    "build.jobs",
    "build.incremental",
    "build.target",
    "profile",
    "term",
    "alias",
    "cargo-new",
    "future-incompat-report",
    "net.retry",
    "net.offline",
    "http.timeout",
    "http.low-speed-limit",
    "http.multiplexing",
    "cache.auto-clean-frequency",
];

/// Why a key that is not accepted is refused, for the keys a person may
/// have a reason to write.
fn why_refused(key: &str) -> &'static str {
    let last = key.rsplit('.').next().unwrap_or(key);
    if key.starts_with("env.") || key == "env" {
        return "sets variables for build scripts and the compiler";
    }
    if key.starts_with("source.") || key == "source" {
        return "replaces where crates come from (source replacement)";
    }
    if key.ends_with("rustflags") || key.ends_with("rustdocflags") {
        return "passes flags to the compiler, which can name programs and places (-C linker=…)";
    }
    match last {
        "rustc"
        | "rustc-wrapper"
        | "rustc-workspace-wrapper"
        | "rustdoc"
        | "linker"
        | "runner"
        | "credential-provider"
        | "global-credential-providers"
        | "git-fetch-with-cli"
        | "browser" => "names a program to run",
        "target-dir" | "dep-info-basedir" | "cainfo" | "root" | "index" | "paths" => "names a place",
        _ => "is not a key the engineer's builds accept (they accept only keys that name no program and no place)",
    }
}

fn allowed(key: &str) -> bool {
    ALLOWED.iter().any(|a| key == *a || key.starts_with(&format!("{a}.")))
}

/// Every leaf key of a TOML table, dotted.
fn leaves(prefix: &str, table: &toml::Table, out: &mut Vec<String>) {
    for (k, v) in table {
        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        match v {
            // An empty table names nothing.
            toml::Value::Table(t) => leaves(&key, t, out),
            _ => out.push(key),
        }
    }
}

/// The problems of the cargo configuration `file` for an engineer's build.
pub fn config_problems(file: &Path, text: &str) -> Vec<String> {
    let shown = file.display();
    let table: toml::Table = match toml::from_str(text) {
        Ok(t) => t,
        Err(e) => return vec![format!("{shown} is not valid TOML ({})", e.message())],
    };
    let mut keys = Vec::new();
    leaves("", &table, &mut keys);
    keys.into_iter()
        .filter(|k| !allowed(k))
        .map(|k| format!("{shown}: `{}` {}", k.escape_debug(), why_refused(&k)))
        .collect()
}

/// `path` made absolute against `base` and cleaned of `.` and `..` by its
/// words (no file is touched).
fn lexical(base: &Path, path: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for c in base.join(path).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Whether `path`, written in a file of the folder `base`, stays inside
/// `ws` (a real path) — by its words, and by where it really leads where it
/// exists.
fn stays_inside(ws: &Path, base: &Path, path: &str) -> bool {
    let clean = lexical(base, path);
    if !clean.starts_with(ws) {
        return false;
    }
    // The deepest existing part, resolved: a symlink inside may lead out.
    let mut existing = clean.as_path();
    while !existing.exists() {
        match existing.parent() {
            Some(p) => existing = p,
            None => return true,
        }
    }
    std::fs::canonicalize(existing).is_ok_and(|real| real.starts_with(ws))
}

/// The problems of the manifest `file` (in the real workspace `ws`).
pub fn manifest_problems(ws: &Path, file: &Path, text: &str) -> Vec<String> {
    let shown = file.strip_prefix(ws).unwrap_or(file).display().to_string();
    let base = file.parent().unwrap_or(ws);
    let table: toml::Table = match toml::from_str(text) {
        Ok(t) => t,
        Err(e) => return vec![format!("{shown} is not valid TOML ({})", e.message())],
    };
    let mut problems = Vec::new();
    let mut walk: Vec<(String, &toml::Value)> = table.iter().map(|(k, v)| (k.clone(), v)).collect();
    while let Some((key, value)) = walk.pop() {
        let last = key.rsplit('.').next().unwrap_or(&key);
        match value {
            // What cargo ignores (`metadata`) may say anything.
            toml::Value::Table(_) if last == "metadata" => {}
            toml::Value::Table(t) => walk.extend(t.iter().map(|(k, v)| (format!("{key}.{k}"), v))),
            toml::Value::Array(items) if matches!(last, "members" | "exclude" | "default-members") => {
                for item in items.iter().filter_map(toml::Value::as_str) {
                    // A glob's folder part is what it can reach.
                    let fixed = item.split(['*', '?', '[']).next().unwrap_or(item);
                    if !stays_inside(ws, base, fixed) {
                        problems.push(format!("{shown}: `{key}` names {item:?}, outside the workspace"));
                    }
                }
            }
            toml::Value::Array(items) => {
                walk.extend(items.iter().enumerate().map(|(i, v)| (format!("{key}.{i}"), v)));
            }
            toml::Value::String(s)
                if matches!(last, "path" | "build" | "workspace" | "readme" | "license-file")
                    && !stays_inside(ws, base, s) =>
            {
                problems.push(format!("{shown}: `{key}` leads outside the workspace ({s:?})"));
            }
            toml::Value::String(s) if matches!(last, "git" | "registry-index") && is_local_source(s) => {
                problems.push(format!("{shown}: `{key}` is a source on this machine ({s:?}); use a remote URL"));
            }
            _ => {}
        }
    }
    problems.sort();
    problems
}

/// Every `Cargo.toml` of the workspace, never inside `.git` or `target`,
/// never through a symlink.
fn manifests(ws: &Path) -> Vec<PathBuf> {
    manifests_within(ws, super::MAX_WALK)
}

/// [`manifests`], looking at no more than `limit` entries.
fn manifests_within(ws: &Path, limit: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![ws.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.filter_map(Result::ok) {
            seen += 1;
            if seen > limit {
                return out;
            }
            let Ok(kind) = e.file_type() else { continue };
            let name = e.file_name();
            if kind.is_dir() && name != ".git" && name != "target" {
                stack.push(e.path());
            } else if kind.is_file() && name == "Cargo.toml" {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// Refuses an engineer's build of the real workspace `ws` whose
/// configuration names a program or a place, listing every problem.
pub fn engineer(ws: &Path, toolchain: &Choice) -> Result<(), super::BuildError> {
    let mut problems = Vec::new();
    if let Choice::Path { by, .. } = toolchain {
        problems.push(format!("{by}: `toolchain.path` names a folder whose programs would build it; name a channel"));
    }
    for file in cargo_configs(ws) {
        match std::fs::read_to_string(&file) {
            Ok(text) => problems.extend(config_problems(&file, &text)),
            Err(e) => problems.push(format!("{} cannot be read ({e})", file.display())),
        }
    }
    for file in manifests(ws) {
        if let Ok(text) = std::fs::read_to_string(&file) {
            problems.extend(manifest_problems(ws, &file, &text));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    super::refuse(format!(
        "the engineer's builds refuse configuration that names a program or a place outside the workspace, and this workspace has {}:\n  - {}\nThe person can remove {} or build it with `autoapp build`",
        if problems.len() == 1 { "one such key".to_string() } else { format!("{} such keys", problems.len()) },
        problems.join("\n  - "),
        if problems.len() == 1 { "it" } else { "them" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Vec<String> {
        config_problems(Path::new("/ws/.cargo/config.toml"), text)
    }

    #[test]
    fn cargo_configuration_naming_a_program_or_a_place_is_refused_by_its_key() {
        let cases = [
            ("[build]\nrustc = \"./evil\"", "`build.rustc` names a program"),
            ("[build]\nrustc-wrapper = \"/bin/sh\"", "`build.rustc-wrapper` names a program"),
            ("[build]\nrustc-workspace-wrapper = \"x\"", "`build.rustc-workspace-wrapper` names a program"),
            ("[target.wasm32-wasip2]\nlinker = \"x\"", "`target.wasm32-wasip2.linker` names a program"),
            ("[target.x86_64-unknown-linux-gnu]\nrunner = \"x\"", "names a program"),
            ("[registry]\ncredential-provider = \"x\"", "`registry.credential-provider` names a program"),
            ("[net]\ngit-fetch-with-cli = true", "`net.git-fetch-with-cli` names a program"),
            ("[env]\nRUSTC_BOOTSTRAP = \"1\"", "`env.RUSTC_BOOTSTRAP` sets variables"),
            ("[source.crates-io]\nreplace-with = \"x\"", "source replacement"),
            ("[build]\nrustflags = [\"-C\", \"linker=x\"]", "`build.rustflags` passes flags"),
            ("[build]\ntarget-dir = \"/tmp/x\"", "`build.target-dir` names a place"),
            ("paths = [\"/x\"]", "`paths` names a place"),
            ("[unstable]\nbuild-std = [\"std\"]", "is not a key the engineer's builds accept"),
        ];
        for (text, said) in cases {
            let p = config(text);
            assert_eq!(p.len(), 1, "{text}: {p:?}");
            assert!(p[0].contains(said) && p[0].starts_with("/ws/.cargo/config.toml: "), "{text}: {p:?}");
        }
        assert!(config("[build")[0].contains("not valid TOML"));
    }

    #[test]
    fn configuration_that_names_neither_is_accepted() {
        let text = "[http]\n[build]\njobs = 2\nincremental = false\ntarget = \"wasm32-wasip2\"\n[profile.release]\nopt-level = \"s\"\n[term]\ncolor = \"never\"\n[net]\nretry = 3\n[alias]\nb = \"build\"\n";
        assert_eq!(config(text), Vec::<String>::new());
        assert!(!allowed("build.jobsx") && allowed("build.jobs") && allowed("profile.dev.opt-level"));
        assert!(!allowed("build") && !allowed("net") && !allowed("profiles"));
    }

    #[test]
    fn manifest_paths_stay_inside_and_git_sources_are_remote() {
        let dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap().join("ws");
        std::fs::create_dir_all(ws.join("crates/a")).unwrap();
        std::os::unix::fs::symlink("/etc", ws.join("crates/out")).unwrap();
        let manifest = ws.join("Cargo.toml");
        let text = r#"
[package]
name = "x"
keywords = ["../not-a-path"]
build = "../build.rs"
workspace = ".."
[dependencies]
inside = { path = "crates/a" }
up = { path = "../other" }
through = { path = "crates/out/x" }
link = { path = "crates/out" }
new = { path = "crates/new" }
local = { git = "file:///tmp/repo" }
bare = { git = "/tmp/repo" }
remote = { git = "https://example.com/r.git" }
[target.'cfg(unix)'.dependencies]
deep = { path = "../../deep" }
[patch.crates-io]
serde = { path = "/abs/serde" }
[workspace]
members = ["crates/*", "../elsewhere/*"]
[package.metadata.tool]
path = "/anything"
[[bin]]
name = "b"
path = "../evil.rs"
"#;
        let p = manifest_problems(&ws, &manifest, text);
        let has = |s: &str| p.iter().any(|x| x.contains(s));
        for key in [
            "`package.build` leads outside",
            "`package.workspace` leads outside",
            "`dependencies.up.path` leads outside",
            "`dependencies.through.path` leads outside",
            "`dependencies.local.git` is a source on this machine",
            "`dependencies.bare.git` is a source on this machine",
            "`target.cfg(unix).dependencies.deep.path` leads outside",
            "`patch.crates-io.serde.path` leads outside",
            "`workspace.members` names \"../elsewhere/*\"",
            "`dependencies.link.path` leads outside",
            "`bin.0.path` leads outside",
        ] {
            assert!(has(key), "{key} in {p:#?}");
        }
        assert_eq!(p.len(), 11, "{p:#?}");
        assert!(p.iter().all(|x| x.starts_with("Cargo.toml: ")), "{p:#?}");
    }

    #[test]
    fn manifests_are_found_outside_git_and_target_within_the_walk_limit() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        for d in ["sub", ".git", "target"] {
            std::fs::create_dir(ws.join(d)).unwrap();
            std::fs::write(ws.join(d).join("Cargo.toml"), "").unwrap();
        }
        std::fs::write(ws.join("Cargo.toml"), "").unwrap();
        std::fs::write(ws.join("README"), "").unwrap();
        // The top's five entries, then the sub-folder's one.
        let both = vec![ws.join("Cargo.toml"), ws.join("sub/Cargo.toml")];
        assert_eq!(manifests(ws), both);
        assert_eq!(manifests_within(ws, 6), both);
        assert_eq!(manifests_within(ws, 5), vec![ws.join("Cargo.toml")]);
    }

    #[test]
    fn a_toolchain_path_and_every_problem_are_named_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(ws.join(".cargo")).unwrap();
        std::fs::write(ws.join(".cargo/config.toml"), "[build]\nrustc = \"x\"\n").unwrap();
        std::fs::write(ws.join("Cargo.toml"), "[dependencies]\na = { path = \"../a\" }\n").unwrap();
        let choice = Choice::Path { path: "/x".into(), by: "rust-toolchain.toml".into() };
        let e = engineer(&ws, &choice).unwrap_err().to_string();
        assert!(e.contains("3 such keys"), "{e}");
        for said in ["toolchain.path", "`build.rustc` names a program", "`dependencies.a.path` leads outside"] {
            assert!(e.contains(said), "{said}: {e}");
        }
        std::fs::remove_file(ws.join(".cargo/config.toml")).unwrap();
        std::fs::write(ws.join("Cargo.toml"), "[dependencies]\na = \"1\"\n").unwrap();
        assert!(engineer(&ws, &Choice::Default).is_ok());
    }
}
