//! The foundation: create → build → activate → call, and every bad input
//! answered with one sentence, exit 1, and the data unchanged.

use crate::support::{TestRoot, repo};

#[test]
fn the_starter_template_goes_from_create_to_a_working_call() {
    let root = TestRoot::new();
    let out = root.ok(&["create", "starter-check"]);
    assert!(out.contains("created starter-check"), "{out}");
    let ws = root.path().join("apps/starter-check/workspace");
    for f in [
        "autoapp.toml",
        "Cargo.toml",
        "src/lib.rs",
        "migrations/0001_init.sql",
        "wit/app.wit",
        "wit/deps/http/http.wit",
    ] {
        assert!(ws.join(f).is_file(), "create wrote no {f}");
    }
    let id = root.build("starter-check");
    assert_eq!(id.len(), 64);
    let out = root.ok(&["activate", "starter-check", &id[..10]]);
    assert!(out.contains("activated starter-check"), "{out}");
    let added = root.call("starter-check", "entries.add", r#"{"text":"first"}"#);
    assert_eq!(added["id"], 1);
    let list = root.call("starter-check", "entries.list", "{}");
    assert_eq!(list["entries"][0]["text"], "first");
}

#[test]
fn notes_writes_are_seen_by_later_reads() {
    let root = TestRoot::new();
    root.install("notes");
    let a = root.call("notes", "notes.add", r#"{"title":"Groceries","tags":["home"]}"#);
    let id = a["id"].as_i64().unwrap();
    root.call("notes", "notes.tag", &format!(r#"{{"id":{id},"tag":"urgent"}}"#));
    root.call("notes", "notes.add", r#"{"title":"Taxes"}"#);
    let all = root.call("notes", "notes.list", "{}");
    assert_eq!(all["notes"].as_array().unwrap().len(), 2);
    assert_eq!(all["notes"][0]["title"], "Taxes", "newest first");
    let tagged = root.call("notes", "notes.list", r#"{"tag":"urgent"}"#);
    assert_eq!(tagged["notes"][0]["tags"], serde_json::json!(["home", "urgent"]));
    root.call("notes", "notes.delete", &format!(r#"{{"id":{id}}}"#));
    let e = root.refused(&["call", "notes", "notes.tag", &format!(r#"{{"id":{id},"tag":"x"}}"#)]);
    assert_eq!(e, format!("autoapp: there is no note {id}"));
}

#[test]
fn a_guest_trap_ends_that_call_only_and_keeps_nothing_it_wrote() {
    let root = TestRoot::new();
    root.install("hostile");
    root.call("hostile", "mark", "{}");
    let e = root.refused(&["call", "hostile", "write.then-panic"]);
    assert!(e.contains("hostile was stopped in route `write.then-panic`: it trapped"), "{e}");
    assert!(e.contains("the hostile guest panics after writing"), "the panic message is shown: {e}");
    assert!(e.ends_with("nothing it wrote was kept"), "{e}");
    assert_eq!(root.call("hostile", "count", "{}")["marks"], 1, "the trapped write left nothing");
    root.call("hostile", "mark", "{}");
    assert_eq!(root.call("hostile", "count", "{}")["marks"], 2, "the host serves the next call");
}

#[test]
fn a_route_that_returns_an_error_keeps_nothing_it_wrote() {
    let root = TestRoot::new();
    root.install("hostile");
    let e = root.refused(&["call", "hostile", "write.then-error"]);
    assert_eq!(e, "autoapp: the hostile guest fails after writing");
    assert_eq!(root.call("hostile", "count", "{}")["marks"], 0);
}

#[test]
fn an_answer_that_is_not_json_is_an_error_not_an_answer() {
    let root = TestRoot::new();
    root.install("hostile");
    let e = root.refused(&["call", "hostile", "answer.not-json"]);
    assert!(e.contains("not JSON"), "{e}");
    assert!(!e.contains("<b>"), "the guest's text is not echoed: {e}");
}

#[test]
fn a_route_that_does_not_exist_is_named_with_the_ones_that_do() {
    let root = TestRoot::new();
    root.install("notes");
    let e = root.refused(&["call", "notes", "notes.nope"]);
    assert_eq!(
        e,
        "autoapp: notes has no route `notes.nope`; its routes are notes.list, notes.add, notes.tag, notes.delete"
    );
}

#[test]
fn input_that_does_not_fit_the_schema_is_refused_before_the_guest_runs() {
    let root = TestRoot::new();
    root.install("notes");
    for (input, want) in [
        (r#"{"title":""}"#, "/title"),
        (r#"{"body":"no title"}"#, "title"),
        (r#"{"title":"x","extra":1}"#, "extra"),
        ("not json", "is not JSON"),
        ("[1,2]", "object"),
    ] {
        let e = root.refused(&["call", "notes", "notes.add", input]);
        assert!(e.contains("notes.add") && e.contains(want), "{input}: {e}");
    }
    assert_eq!(root.call("notes", "notes.list", "{}")["notes"], serde_json::json!([]), "nothing was written");
}

#[test]
fn an_invalid_manifest_is_refused_with_every_problem_and_its_fix() {
    let root = TestRoot::new();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("autoapp.toml"),
        "[app]\nid = \"broken\"\nname = \"Broken\"\nversion = \"1\"\n\n[[route]]\nname = \"x\"\neffect = \"sometimes\"\n",
    )
    .unwrap();
    root.ok(&["create", "broken", "--at", ws.path().to_str().unwrap()]);
    let stderr = root.fails_with(1, &["build", "broken"]);
    for needle in ["3 problems", "version `1` is not a version", "effect `sometimes`", "has no summary: add summary"] {
        assert!(stderr.contains(needle), "missing {needle:?}:\n{stderr}");
    }
    assert!(!root.path().join("apps/broken/releases").exists(), "no release was written");
}

#[test]
fn a_file_that_is_not_a_component_is_named_for_what_it_is() {
    let root = TestRoot::new();
    root.build_guest("notes");
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "hello").unwrap();
    let e = root.refused(&["build", "notes", "--component", text.to_str().unwrap()]);
    assert!(e.contains("not WebAssembly"), "{e}");
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, wat::parse_str("(module)").unwrap()).unwrap();
    let e = root.refused(&["build", "notes", "--component", core.to_str().unwrap()]);
    assert!(e.contains("core WebAssembly module, not a component"), "{e}");
    let empty = dir.path().join("empty.wasm");
    std::fs::write(&empty, wat::parse_str("(component)").unwrap()).unwrap();
    let e = root.fails_with(1, &["build", "notes", "--component", empty.to_str().unwrap()]);
    assert!(e.contains("does not export autoapp:app/routes@0.1.0") && e.contains("autoapp:app/views@0.1.0"), "{e}");
    let foreign = dir.path().join("foreign.wasm");
    std::fs::write(&foreign, wat::parse_str(r#"(component (import "acme:secrets/vault@1.0.0" (instance)))"#).unwrap())
        .unwrap();
    let e = root.fails_with(1, &["build", "notes", "--component", foreign.to_str().unwrap()]);
    assert!(e.contains("imports acme:secrets/vault@1.0.0, which this host does not provide"), "{e}");
    let out = root.ok(&["candidates", "notes", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["candidates"].as_array().unwrap().len(), 1, "only the good build made a release");
}

#[test]
fn the_release_id_is_stable_and_changes_with_the_component_or_the_manifest() {
    let root = TestRoot::new();
    let first = root.build_guest("notes");
    assert_eq!(root.build("notes"), first, "identical inputs give the same release");
    let out = root.ok(&["build", "notes"]);
    assert!(out.contains("already built"), "{out}");

    // The same component with one more custom section is another component.
    let component = root.path().join("apps/notes/releases").join(&first).join("component.wasm");
    let mut bytes = std::fs::read(&component).unwrap();
    bytes.extend_from_slice(&[0, 6, 5, b'e', b'x', b't', b'r', b'a']);
    let changed = root.path().join("changed.wasm");
    std::fs::write(&changed, &bytes).unwrap();
    let out = root.ok(&["build", "notes", "--component", changed.to_str().unwrap(), "--json"]);
    let by_component: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_ne!(by_component["release"], first.as_str());

    // The same component with another manifest (a copy of the workspace).
    let ws = tempfile::tempdir().unwrap();
    copy_dir(&repo().join("guests/notes"), ws.path());
    let manifest = ws.path().join("autoapp.toml");
    let text = std::fs::read_to_string(&manifest).unwrap().replace("version = \"0.1.0\"", "version = \"0.1.1\"");
    std::fs::write(&manifest, text).unwrap();
    let other = TestRoot::new();
    other.ok(&["create", "notes", "--at", ws.path().to_str().unwrap()]);
    let out = other.ok(&["build", "notes", "--component", component.to_str().unwrap(), "--json"]);
    let by_manifest: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_ne!(by_manifest["release"], first.as_str());
    assert_ne!(by_manifest["release"], by_component["release"]);
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "target" {
            continue;
        }
        let dest = to.join(&name);
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_dir(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
}

#[test]
fn a_release_name_that_matches_nothing_or_is_not_hex_is_refused() {
    let root = TestRoot::new();
    let id = root.build_guest("notes");
    let other = if id.starts_with('0') { "1" } else { "0" };
    let e = root.refused(&["activate", "notes", other]);
    assert!(e.contains(&format!("no release of notes starts with `{other}`")), "{e}");
    let e = root.refused(&["activate", "notes", "xyz"]);
    assert!(e.contains("is not a release id"), "{e}");
    root.ok(&["activate", "notes", &id]);
    let e = root.refused(&["activate", "notes", &id[..6]]);
    assert!(e.contains("already the active release"), "{e}");
}

#[test]
fn calls_before_activation_and_for_unknown_apps_say_what_to_do() {
    let root = TestRoot::new();
    root.build_guest("notes");
    let e = root.refused(&["call", "notes", "notes.list"]);
    assert!(e.contains("notes has no active release") && e.contains("autoapp activate notes"), "{e}");
    let e = root.refused(&["call", "ghost", "x"]);
    assert!(e.contains("there is no app `ghost`"), "{e}");
}

#[test]
fn bad_usage_exits_with_two() {
    let root = TestRoot::new();
    root.fails_with(2, &["call"]);
    root.fails_with(2, &["frobnicate"]);
    let e = root.fails_with(2, &["create", "Not An Id"]);
    assert!(e.contains("is not an app id"), "{e}");
}

#[test]
fn a_chosen_workspace_may_not_be_inside_the_root_or_hold_something_else() {
    let root = TestRoot::new();
    let inside = root.path().join("mine");
    let e = root.refused(&["create", "mine", "--at", inside.to_str().unwrap()]);
    assert!(e.contains("inside the launcher's root"), "{e}");
    let busy = tempfile::tempdir().unwrap();
    std::fs::write(busy.path().join("notes.txt"), "mine").unwrap();
    let e = root.refused(&["create", "mine", "--at", busy.path().to_str().unwrap()]);
    assert!(e.contains("is not empty"), "{e}");
    assert_eq!(std::fs::read_to_string(busy.path().join("notes.txt")).unwrap(), "mine", "nothing was touched");
}

#[test]
fn a_chosen_workspace_may_not_be_inside_or_around_another_apps_workspace() {
    let root = TestRoot::new();
    let place = tempfile::tempdir().unwrap();
    let first = place.path().join("first");
    root.ok(&["create", "first", "--at", first.to_str().unwrap()]);
    let e = root.refused(&["create", "second", "--at", first.join("inner").to_str().unwrap()]);
    assert!(e.contains("inside the workspace of first"), "{e}");
    // Around it: a new, empty folder that would hold first's workspace.
    let around = place.path().join("around");
    std::fs::create_dir(&around).unwrap();
    let moved = around.join("first");
    std::fs::rename(&first, &moved).unwrap();
    std::fs::write(root.path().join("apps/first/workspace.path"), format!("{}\n", moved.display())).unwrap();
    let e = root.refused(&["create", "second", "--at", around.to_str().unwrap()]);
    assert!(e.contains("contains the workspace of first"), "{e}");
    assert!(!root.path().join("apps/second").exists(), "nothing was made for a refused creation");
}

#[test]
fn a_workspace_pointer_edited_by_hand_is_held_to_the_same_rules() {
    let root = TestRoot::new();
    root.build_guest("notes");
    let inside = root.path().join("sneaky");
    std::fs::create_dir(&inside).unwrap();
    std::fs::copy(repo().join("guests/notes/autoapp.toml"), inside.join("autoapp.toml")).unwrap();
    std::fs::write(root.path().join("apps/notes/workspace.path"), format!("{}\n", inside.display())).unwrap();
    let e = root.refused(&["build", "notes"]);
    assert!(e.contains("workspace pointer of notes is not allowed") && e.contains("inside the launcher's root"), "{e}");
    // A symlink to the root is the root.
    let link = tempfile::tempdir().unwrap();
    let via = link.path().join("via");
    std::os::unix::fs::symlink(root.path(), &via).unwrap();
    std::fs::write(root.path().join("apps/notes/workspace.path"), format!("{}\n", via.join("sneaky").display()))
        .unwrap();
    let e = root.refused(&["build", "notes"]);
    assert!(e.contains("inside the launcher's root"), "{e}");
}
