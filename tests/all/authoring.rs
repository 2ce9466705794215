//! Third-party authoring: apps written in Python with componentize-py and in
//! JavaScript with jco, built by `autoapp build --component`, answer their
//! routes and meet the same enforcement as a Rust guest.

use std::process::Command;

use crate::support::{TestRoot, repo};

/// componentize-py, or a loud reason it is missing. CI installs it
/// (scripts/test); there a missing tool fails the test instead of skipping.
fn componentize_py() -> Option<String> {
    let found = Command::new("componentize-py").arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    if found {
        return Some("componentize-py".into());
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "componentize-py is not installed, and CI must install it (scripts/test does)"
    );
    eprintln!(
        "\n!!! SKIPPED: componentize-py is not installed (pip install componentize-py); the Python guest was not tested !!!\n"
    );
    None
}

#[test]
fn a_python_app_builds_activates_and_meets_the_same_rules_as_rust() {
    let Some(tool) = componentize_py() else { return };
    let ws = tempfile::Builder::new().prefix("python-ws-").tempdir().unwrap();
    let src = repo().join("guests/python-hello");
    for f in ["app.py", "autoapp.toml"] {
        std::fs::copy(src.join(f), ws.path().join(f)).unwrap();
    }
    std::fs::create_dir(ws.path().join("migrations")).unwrap();
    std::fs::copy(src.join("migrations/0001_init.sql"), ws.path().join("migrations/0001_init.sql")).unwrap();

    let root = TestRoot::new();
    // The documented steps: the WIT from `autoapp wit`, then componentize-py.
    let wit = ws.path().join("wit");
    root.ok(&["wit", "--out", wit.to_str().unwrap()]);
    let out = Command::new(&tool)
        .args(["-d", "wit", "-w", "app", "componentize", "app", "-o", "app.wasm"])
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "componentize-py failed: {}", String::from_utf8_lossy(&out.stderr));

    root.ok(&["create", "python-hello", "--at", ws.path().to_str().unwrap()]);
    let built =
        root.ok(&["build", "python-hello", "--component", ws.path().join("app.wasm").to_str().unwrap(), "--json"]);
    let id = serde_json::from_str::<serde_json::Value>(&built).unwrap()["release"].as_str().unwrap().to_string();
    root.ok(&["activate", "python-hello", &id]);

    let added = root.call("python-hello", "greetings.add", r#"{"name":"Ada"}"#);
    assert_eq!(added["text"], "Hello, Ada!");
    assert_eq!(root.call("python-hello", "greetings.list", "{}")["greetings"][0]["name"], "Ada");
    let e = root.refused(&["call", "python-hello", "greetings.add", r#"{"name":"   "}"#]);
    assert_eq!(e, "autoapp: a greeting needs a name", "an app-error from Python reaches the caller");
    let e = root.refused(&["call", "python-hello", "greetings.add", r#"{"nom":"Ada"}"#]);
    assert!(e.contains("does not fit route `greetings.add`"), "{e}");

    // The same denial a Rust guest gets for a write in a read route.
    let python = root.call("python-hello", "greetings.sneak", "{}");
    let rust_root = TestRoot::new();
    rust_root.install("hostile");
    let rust = rust_root.call("hostile", "write.in-read", "{}");
    assert_eq!(python["error"], rust["error"]);
    assert_eq!(root.call("python-hello", "greetings.list", "{}")["greetings"].as_array().unwrap().len(), 1);
}

/// jco, as guests/js-hello pins it, or a loud reason it is missing. CI
/// installs it (scripts/test: `npm ci` there); there a missing tool fails.
fn jco() -> Option<std::path::PathBuf> {
    let jco = repo().join("guests/js-hello/node_modules/.bin/jco");
    if jco.is_file() {
        return Some(jco);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "jco is not installed, and CI must install it (scripts/test runs npm ci in guests/js-hello)"
    );
    eprintln!(
        "\n!!! SKIPPED: jco is not installed (npm ci in guests/js-hello); the JavaScript guest was not tested !!!\n"
    );
    None
}

#[test]
fn a_javascript_app_built_with_jco_builds_activates_and_meets_the_same_rules_as_rust() {
    let Some(jco) = jco() else { return };
    let ws = tempfile::Builder::new().prefix("js-ws-").tempdir().unwrap();
    let src = repo().join("guests/js-hello");
    for f in ["app.js", "autoapp.toml"] {
        std::fs::copy(src.join(f), ws.path().join(f)).unwrap();
    }
    std::fs::create_dir(ws.path().join("migrations")).unwrap();
    std::fs::copy(src.join("migrations/0001_init.sql"), ws.path().join("migrations/0001_init.sql")).unwrap();

    let root = TestRoot::new();
    // The documented steps: the WIT from `autoapp wit`, then jco componentize.
    root.ok(&["wit", "--out", ws.path().join("wit").to_str().unwrap()]);
    let out = Command::new(&jco)
        .args(["componentize", "app.js", "--wit", "wit", "--world-name", "app", "--out", "app.wasm"])
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "jco componentize failed: {}", String::from_utf8_lossy(&out.stderr));

    root.ok(&["create", "js-hello", "--at", ws.path().to_str().unwrap()]);
    let built = root.ok(&["build", "js-hello", "--component", ws.path().join("app.wasm").to_str().unwrap(), "--json"]);
    let id = serde_json::from_str::<serde_json::Value>(&built).unwrap()["release"].as_str().unwrap().to_string();
    root.ok(&["activate", "js-hello", &id]);

    let added = root.call("js-hello", "greetings.add", r#"{"name":"Ada"}"#);
    assert_eq!(added["text"], "Hello, Ada!");
    assert_eq!(root.call("js-hello", "greetings.list", "{}")["greetings"][0]["name"], "Ada");
    let e = root.refused(&["call", "js-hello", "greetings.add", r#"{"name":"   "}"#]);
    assert_eq!(e, "autoapp: a greeting needs a name", "an app-error thrown in JavaScript reaches the caller");
    let e = root.refused(&["call", "js-hello", "greetings.add", r#"{"nom":"Ada"}"#]);
    assert!(e.contains("does not fit route `greetings.add`"), "{e}");

    // The same denial a Rust guest gets for a write in a read route, and
    // nothing written.
    let js = root.call("js-hello", "greetings.sneak", "{}");
    let rust_root = TestRoot::new();
    rust_root.install("hostile");
    let rust = rust_root.call("hostile", "write.in-read", "{}");
    assert_eq!(js["error"], rust["error"]);
    assert_eq!(root.call("js-hello", "greetings.list", "{}")["greetings"].as_array().unwrap().len(), 1);
}

#[test]
fn a_component_built_against_another_version_of_the_package_is_refused_with_the_version() {
    let root = TestRoot::new();
    root.build_guest("notes");
    let dir = tempfile::tempdir().unwrap();
    for (version, want) in [
        ("0.2.0", "built against autoapp:app@0.2.0, but this host speaks autoapp:app@0.1.0"),
        ("1.0.0", "built against autoapp:app@1.0.0, but this host speaks autoapp:app@0.1.0"),
    ] {
        let file = dir.path().join(format!("v{version}.wasm"));
        let wat = format!(r#"(component (import "autoapp:app/store@{version}" (instance)))"#);
        std::fs::write(&file, wat::parse_str(&wat).unwrap()).unwrap();
        let e = root.fails_with(1, &["build", "notes", "--component", file.to_str().unwrap()]);
        assert!(e.contains(want), "{e}");
    }
}
