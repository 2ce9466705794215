//! Third-party authoring: apps written in Python with componentize-py and in
//! JavaScript with jco, built by `autoapp build --component`, answer their
//! routes and meet the same enforcement as a Rust guest.

use std::process::Command;

use crate::support::{TestRoot, repo};

/// `tool` if it can run, or a loud reason it is missing. CI installs every
/// tool (scripts/test); there a missing one fails the test instead of
/// skipping it.
fn present(tool: std::path::PathBuf, install: &str, what: &str) -> Option<std::path::PathBuf> {
    if Command::new(&tool).arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Some(tool);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{} is not installed, and CI must install it ({install})",
        tool.display()
    );
    eprintln!("\n!!! SKIPPED: {} is not installed ({install}); {what} was not tested !!!\n", tool.display());
    None
}

/// The greetings app of `guests/<guest>` (`files`), made into a component by
/// `componentize` in a fresh workspace with the WIT of `autoapp wit` (the
/// documented steps), then created, built, activated and called: its routes
/// answer, its app-errors reach the caller, and its read route is denied a
/// write with the very words a Rust guest gets.
fn greetings_app_meets_the_same_rules_as_rust(guest: &str, files: &[&str], componentize: &mut Command) {
    let ws = tempfile::Builder::new().prefix("greetings-ws-").tempdir().unwrap();
    let src = repo().join("guests").join(guest);
    for f in files.iter().chain(&["autoapp.toml"]) {
        std::fs::copy(src.join(f), ws.path().join(f)).unwrap();
    }
    std::fs::create_dir(ws.path().join("migrations")).unwrap();
    std::fs::copy(src.join("migrations/0001_init.sql"), ws.path().join("migrations/0001_init.sql")).unwrap();
    let root = TestRoot::new();
    root.ok(&["wit", "--out", ws.path().join("wit").to_str().unwrap()]);
    let out = componentize.current_dir(ws.path()).output().unwrap();
    assert!(out.status.success(), "{guest}: making the component failed: {}", String::from_utf8_lossy(&out.stderr));

    root.ok(&["create", guest, "--at", ws.path().to_str().unwrap()]);
    let built = root.ok(&["build", guest, "--component", ws.path().join("app.wasm").to_str().unwrap(), "--json"]);
    let id = serde_json::from_str::<serde_json::Value>(&built).unwrap()["release"].as_str().unwrap().to_string();
    root.ok(&["activate", guest, &id]);

    let added = root.call(guest, "greetings.add", r#"{"name":"Ada"}"#);
    assert_eq!(added["text"], "Hello, Ada!");
    assert_eq!(root.call(guest, "greetings.list", "{}")["greetings"][0]["name"], "Ada");
    let e = root.refused(&["call", guest, "greetings.add", r#"{"name":"   "}"#]);
    assert_eq!(e, "autoapp: a greeting needs a name", "{guest}: an app-error reaches the caller");
    let e = root.refused(&["call", guest, "greetings.add", r#"{"nom":"Ada"}"#]);
    assert!(e.contains("does not fit route `greetings.add`"), "{e}");

    // The same denial a Rust guest gets for a write in a read route, and
    // nothing written.
    let theirs = root.call(guest, "greetings.sneak", "{}");
    let rust_root = TestRoot::new();
    rust_root.install("hostile");
    let rust = rust_root.call("hostile", "write.in-read", "{}");
    assert_eq!(theirs["error"], rust["error"]);
    assert_eq!(root.call(guest, "greetings.list", "{}")["greetings"].as_array().unwrap().len(), 1);

    // Packed on this root and installed on another (issue 30): a package
    // from another language is a package like any other.
    root.ok(&["key", "new", "--name", "Greeter"]);
    let out = tempfile::tempdir().unwrap();
    let packed = root.ok(&["pack", guest, "--sign", "--to", out.path().to_str().unwrap(), "--json"]);
    let file = serde_json::from_str::<serde_json::Value>(&packed).unwrap()["file"].as_str().unwrap().to_string();
    let other = TestRoot::new();
    let installed = other.ok(&["install", &file, "--json"]);
    let release =
        serde_json::from_str::<serde_json::Value>(&installed).unwrap()["release"].as_str().unwrap().to_string();
    assert_eq!(release, id, "{guest}: the same release on the other root");
    other.ok(&["activate", guest, &release]);
    assert_eq!(other.call(guest, "greetings.add", r#"{"name":"Ada"}"#)["text"], "Hello, Ada!");
}

#[test]
fn a_python_app_builds_activates_and_meets_the_same_rules_as_rust() {
    let install = "pip install componentize-py; scripts/test does";
    let Some(tool) = present("componentize-py".into(), install, "the Python guest") else { return };
    let mut componentize = Command::new(tool);
    componentize.args(["-d", "wit", "-w", "app", "componentize", "app", "-o", "app.wasm"]);
    greetings_app_meets_the_same_rules_as_rust("python-hello", &["app.py"], &mut componentize);
}

#[test]
fn a_javascript_app_built_with_jco_builds_activates_and_meets_the_same_rules_as_rust() {
    let jco = repo().join("guests/js-hello/node_modules/.bin/jco");
    let install = "npm ci in guests/js-hello; scripts/test does";
    let Some(tool) = present(jco, install, "the JavaScript guest") else { return };
    let mut componentize = Command::new(tool);
    componentize.args(["componentize", "app.js", "--wit", "wit", "--world-name", "app", "--out", "app.wasm"]);
    greetings_app_meets_the_same_rules_as_rust("js-hello", &["app.js"], &mut componentize);
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
