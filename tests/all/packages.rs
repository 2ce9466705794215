//! Packages (issue 30): `autoapp key`, `pack` and `install` by file. A
//! package is the release's component with Autoapp's part in custom
//! sections; it runs as it is. The registry's side is `registry.rs`.

use crate::support::{TestRoot, repo};

/// The release's files, as `pack` must carry them.
fn release_file(root: &TestRoot, app: &str, release: &str, name: &str) -> Vec<u8> {
    std::fs::read(root.path().join("apps").join(app).join("releases").join(release).join(name)).unwrap()
}

#[test]
fn a_package_is_the_release_s_component_with_its_manifest_inside_and_it_runs_as_it_is() {
    let root = TestRoot::new();
    let release = root.install("notes");
    let out = tempfile::tempdir().unwrap();
    let said = root.ok(&["pack", "notes", "--to", out.path().to_str().unwrap(), "--json"]);
    let packed: serde_json::Value = serde_json::from_str(&said).unwrap();
    assert_eq!(packed["release"], release.as_str());
    let file = std::path::PathBuf::from(packed["file"].as_str().unwrap());
    assert_eq!(file.parent().unwrap(), out.path());
    assert!(file.file_name().unwrap().to_str().unwrap().starts_with("notes-"), "{file:?}");
    let bytes = std::fs::read(&file).unwrap();
    let component = release_file(&root, "notes", &release, "component.wasm");
    assert_eq!(&bytes[..component.len()], &component[..], "the package starts with the release's component, unchanged");
    let manifest = release_file(&root, "notes", &release, "autoapp.toml");
    let tail = &bytes[component.len()..];
    assert!(tail.windows(manifest.len()).any(|w| w == manifest), "the manifest is carried inside");
    assert!(tail.windows(b"autoapp:app@0.1.0".len()).any(|w| w == b"autoapp:app@0.1.0"));
    // Never written over.
    let again = root.fails_with(1, &["pack", "notes", "--to", file.to_str().unwrap()]);
    assert!(again.contains("exists already"), "{again}");
    // The file runs as it is: a runtime ignores the custom sections.
    let other = TestRoot::new();
    let ws = notes_workspace();
    other.ok(&["create", "notes", "--at", ws.path().to_str().unwrap()]);
    let built: serde_json::Value =
        serde_json::from_str(&other.ok(&["build", "notes", "--component", file.to_str().unwrap(), "--json"])).unwrap();
    other.ok(&["activate", "notes", built["release"].as_str().unwrap()]);
    other.call("notes", "notes.add", r#"{"title": "from a package"}"#);
    let listed = other.call("notes", "notes.list", "{}");
    assert!(listed.to_string().contains("from a package"), "{listed}");
}

#[test]
fn a_signed_package_names_its_publisher_and_signing_needs_the_person_s_key() {
    let root = TestRoot::new();
    root.install("notes");
    let out = tempfile::tempdir().unwrap();
    let to = out.path().to_str().unwrap();
    let refused = root.refused(&["pack", "notes", "--sign", "--to", to]);
    assert!(refused.contains("autoapp key new"), "{refused}");
    assert!(root.refused(&["key", "show"]).contains("autoapp key new"));
    let made = root.ok(&["key", "new", "--name", "Ada's Apps", "--json"]);
    let made: serde_json::Value = serde_json::from_str(&made).unwrap();
    let fingerprint = made["fingerprint"].as_str().unwrap().to_string();
    assert_eq!(fingerprint.len(), 32);
    // Kept in the configuration folder, the person's alone; never replaced.
    let file = root.path().join("xdg-config/autoapp/publisher.key");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(root.refused(&["key", "new", "--name", "Eve"]).contains("exists already"));
    assert!(root.ok(&["key", "show"]).contains(&fingerprint));
    let said = root.ok(&["pack", "notes", "--sign", "--to", to]);
    assert!(said.contains(&format!("signed by fingerprint {fingerprint} \"Ada's Apps\"")), "{said}");
    // A name that would hide or reorder what follows it is refused.
    let other = TestRoot::new();
    let e = other.refused(&["key", "new", "--name", "Ada\u{202e}sppA"]);
    assert!(e.contains("invisible format characters"), "{e}");
}

/// A signed package of notes, made on a root of its own: (that root, the
/// file's folder, the file, the publisher's fingerprint).
fn signed_notes_package(name: &str) -> (TestRoot, tempfile::TempDir, std::path::PathBuf, String) {
    let publisher = TestRoot::new();
    publisher.install("notes");
    let made: serde_json::Value =
        serde_json::from_str(&publisher.ok(&["key", "new", "--name", name, "--json"])).unwrap();
    let out = tempfile::tempdir().unwrap();
    let packed: serde_json::Value = serde_json::from_str(&publisher.ok(&[
        "pack",
        "notes",
        "--sign",
        "--to",
        out.path().to_str().unwrap(),
        "--json",
    ]))
    .unwrap();
    let file = std::path::PathBuf::from(packed["file"].as_str().unwrap());
    (publisher, out, file, made["fingerprint"].as_str().unwrap().to_string())
}

#[test]
fn a_signed_package_installs_on_another_root_as_a_candidate_that_answers_the_same() {
    let (publisher, _out, file, fingerprint) = signed_notes_package("Ada's Apps");
    let person = TestRoot::new();
    let said = person.ok(&["install", file.to_str().unwrap()]);
    // What explain says, and the publisher, first time.
    assert!(said.contains(&format!("publisher: fingerprint {fingerprint} \"Ada's Apps\": the first time")), "{said}");
    assert!(said.contains("notes.add") && said.contains("routes:"), "{said}");
    assert!(said.contains("nothing of it runs until you activate it"), "{said}");
    // A candidate: nothing active, nothing granted.
    let candidates = person.ok(&["candidates", "notes", "--json"]);
    let release = publisher.ok(&["candidates", "notes", "--json"]);
    let active = |j: &str| serde_json::from_str::<serde_json::Value>(j).unwrap()["active"]["id"].clone();
    assert_eq!(active(&candidates), serde_json::Value::Null, "{candidates}");
    let id = active(&release).as_str().unwrap().to_string();
    assert!(candidates.contains(&id), "the same release id as the publisher's: {candidates}");
    assert_eq!(person.run(&["call", "notes", "notes.list"]).status.code(), Some(1));
    person.ok(&["activate", "notes", &id]);
    person.call("notes", "notes.add", r#"{"title": "installed"}"#);
    publisher.call("notes", "notes.add", r#"{"title": "installed"}"#);
    assert_eq!(
        person.call("notes", "notes.list", "{}")["notes"][0]["title"],
        publisher.call("notes", "notes.list", "{}")["notes"][0]["title"]
    );
    // Again: the same publisher, the same release.
    let again: serde_json::Value =
        serde_json::from_str(&person.ok(&["install", file.to_str().unwrap(), "--json"])).unwrap();
    assert_eq!(again["standing"], "same");
    assert_eq!(again["new_release"], false);
    assert!(person.ok(&["runs", "notes"]).contains("install"));
}

#[test]
fn a_package_that_does_not_hold_is_refused_with_a_sentence_and_nothing_is_placed() {
    let (_publisher, out, file, fingerprint) = signed_notes_package("Ada");
    let person = TestRoot::new();
    let nothing_placed = |r: &TestRoot| assert!(!r.path().join("apps/notes").exists(), "nothing is placed");
    // A flipped byte inside the component.
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[200] ^= 0x01;
    let flipped = out.path().join("flipped.wasm");
    std::fs::write(&flipped, &bytes).unwrap();
    let e = person.refused(&["install", flipped.to_str().unwrap()]);
    assert!(e.contains("does not verify"), "{e}");
    nothing_placed(&person);
    // Garbage, and a component that is not a package.
    let garbage = out.path().join("garbage.wasm");
    std::fs::write(&garbage, b"not a component at all").unwrap();
    assert!(person.refused(&["install", garbage.to_str().unwrap()]).contains("not a WebAssembly component"));
    let bare = crate::support::guest_component("notes");
    assert!(person.refused(&["install", bare.to_str().unwrap()]).contains("not an Autoapp package"));
    nothing_placed(&person);
    // Unsigned: refused, then taken with --unsigned, saying so.
    let unsigned_dir = tempfile::tempdir().unwrap();
    let publisher2 = TestRoot::new();
    publisher2.install("notes");
    let packed: serde_json::Value = serde_json::from_str(&publisher2.ok(&[
        "pack",
        "notes",
        "--to",
        unsigned_dir.path().to_str().unwrap(),
        "--json",
    ]))
    .unwrap();
    let unsigned = packed["file"].as_str().unwrap().to_string();
    assert!(person.refused(&["install", &unsigned]).contains("--unsigned"));
    nothing_placed(&person);
    assert!(person.ok(&["install", &unsigned, "--unsigned"]).contains("anyone could have made"));
    // Another root pinned to Ada's key refuses a package signed by another.
    let pinned = TestRoot::new();
    pinned.ok(&["install", file.to_str().unwrap()]);
    let (_p2, _out2, other_file, other_fp) = signed_notes_package("Ada");
    let e = pinned.refused(&["install", other_file.to_str().unwrap()]);
    assert!(e.contains(&fingerprint) && e.contains(&other_fp) && e.contains("--publisher"), "{e}");
    let accepted = pinned.ok(&["install", other_file.to_str().unwrap(), "--publisher", &other_fp]);
    assert!(accepted.contains(&format!("in place of {fingerprint}")), "{accepted}");
    // From then on, the new key is the pinned one.
    assert!(pinned.refused(&["install", file.to_str().unwrap()]).contains(&other_fp));
    // An app pinned to a publisher takes no unsigned package, even with --unsigned.
    let e = pinned.refused(&["install", &unsigned, "--unsigned"]);
    assert!(e.contains("not signed") && e.contains(&other_fp), "{e}");
}

/// Issue 51, rule 3: a package of `notes` signed by anyone became "a
/// candidate of the app you have" for the person's own `notes` (built from
/// its workspace), pinned its signer to it, inherited its grants, and on
/// activation its migration could empty the person's entries. A package is
/// a candidate only of an app pinned to its publisher; the person's own app
/// (built here, installed unsigned, restored without a pin) refuses it with
/// the way out (`--as`), and the root is as it was, byte for byte.
#[test]
fn a_stranger_s_package_never_becomes_a_release_of_the_person_s_own_app_of_that_id() {
    let (_publisher, _out, file, _fingerprint) = signed_notes_package("Trusted Apps");
    let file = file.to_str().unwrap();
    let person = TestRoot::new();
    person.install("notes");
    person.call("notes", "notes.add", r#"{"title": "mine"}"#);
    let before = person.files();
    let e = person.refused(&["install", file]);
    assert!(e.contains("not installed from this publisher's packages") && e.contains("--as <new-id>"), "{e}");
    assert_eq!(person.files(), before, "nothing placed, pinned or compiled");
    // Beside it, under a new id, it installs.
    person.ok(&["install", file, "--as", "their-notes"]);
    assert!(person.call("notes", "notes.list", "{}").to_string().contains("mine"));
    // An app installed unsigned is pinned to nobody: no signed package takes it over.
    let unsigned_root = TestRoot::new();
    let out = tempfile::tempdir().unwrap();
    let packed: serde_json::Value =
        serde_json::from_str(&person.ok(&["pack", "notes", "--to", out.path().to_str().unwrap(), "--json"])).unwrap();
    unsigned_root.ok(&["install", packed["file"].as_str().unwrap(), "--unsigned"]);
    let before = unsigned_root.files();
    assert!(unsigned_root.refused(&["install", file]).contains("--as <new-id>"));
    assert_eq!(unsigned_root.files(), before);
}

/// A package of `functions` empty functions in one core module, inside a
/// component that names the world's two interfaces (so that it passes every
/// check that needs no compiler), with the unsigned notes package's sections
/// after it: what the red team installed to exhaust the machine.
fn heavy_package(dir: &std::path::Path, functions: usize, exports: bool) -> std::path::PathBuf {
    let publisher = TestRoot::new();
    let release = publisher.install("notes");
    let packed: serde_json::Value = serde_json::from_str(&publisher.ok(&[
        "pack",
        "notes",
        "--to",
        dir.join(format!("notes-{exports}.wasm")).to_str().unwrap(),
        "--json",
    ]))
    .unwrap();
    let package = std::fs::read(packed["file"].as_str().unwrap()).unwrap();
    let component = release_file(&publisher, "notes", &release, "component.wasm");
    let sections = &package[component.len()..];
    let ours = "(instance $i) (export \"autoapp:app/routes@0.1.0\" (instance $i)) (export \"autoapp:app/views@0.1.0\" (instance $i))";
    let wat =
        format!("(component (core module $m {}) {})", "(func)".repeat(functions), if exports { ours } else { "" });
    let mut heavy = wat::parse_str(&wat).unwrap();
    heavy.extend_from_slice(sections);
    let file = dir.join(if exports { "heavy.wasm" } else { "bare.wasm" });
    std::fs::write(&file, heavy).unwrap();
    file
}

/// Issue 51, rules 1 and 10: a 4 MB package of a million empty functions
/// compiled for 28.6 s in 6.2 GB inside the installing process, before any
/// check that needed no compiler, and left its compiled code behind. A
/// component from elsewhere is compiled in a confined process of its own
/// within `compile_memory_mib` and `compile_deadline_secs`: over either it is
/// refused naming the limit, and the root is as it was, byte for byte.
#[test]
fn a_component_from_elsewhere_compiles_within_its_budget_or_is_refused_leaving_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let heavy = heavy_package(dir.path(), 300_000, true);
    let heavy = heavy.to_str().unwrap();
    let small = TestRoot::with_config("compile_memory_mib = 256\n");
    let before = small.files();
    let e = small.refused(&["install", heavy, "--unsigned"]);
    assert!(e.contains("more than 256 MiB of memory (compile_memory_mib"), "{e}");
    assert_eq!(small.files(), before, "nothing placed, nothing compiled kept");
    let quick = TestRoot::with_config("compile_deadline_secs = 1\n");
    let before = quick.files();
    let e = quick.refused(&["install", heavy, "--unsigned"]);
    assert!(e.contains("longer than 1 s (compile_deadline_secs"), "{e}");
    assert_eq!(quick.files(), before);
    // A component that cannot run here is refused before anything compiles
    // it, whatever its size: a core module alone exports nothing of ours.
    // (Compiled, it would pass the 1 s deadline.)
    let bare = heavy_package(dir.path(), 300_000, false);
    let e = quick.fails_with(1, &["install", bare.to_str().unwrap(), "--unsigned"]);
    assert!(e.contains("does not export autoapp:app/routes@0.1.0") && !e.contains("compile_deadline_secs"), "{e}");
    assert_eq!(quick.files(), before);
    // An app's component compiles well inside the defaults, and runs.
    let (_p, _out, file, _fp) = signed_notes_package("Ada");
    let person = TestRoot::new();
    let said: serde_json::Value =
        serde_json::from_str(&person.ok(&["install", file.to_str().unwrap(), "--json"])).unwrap();
    person.ok(&["activate", "notes", said["release"].as_str().unwrap()]);
    person.call("notes", "notes.add", r#"{"title": "compiled elsewhere"}"#);
    assert!(person.call("notes", "notes.list", "{}").to_string().contains("compiled elsewhere"));
    let cache: Vec<_> = std::fs::read_dir(person.path().join("cache/compiled/notes"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(cache.iter().all(|n| !n.to_string_lossy().starts_with(".compiling")), "{cache:?}");
}

/// Issue 51, rule 10: a migration over the limit activation uses (1 MiB of
/// SQL each) was accepted at install and refused only at activation. Install
/// checks the migrations as activation runs them, and a refusal leaves the
/// root as it was.
#[test]
fn a_migration_activation_would_refuse_is_refused_at_install_leaving_nothing() {
    let publisher = TestRoot::new();
    let ws = notes_workspace();
    publisher.ok(&["create", "notes", "--at", ws.path().to_str().unwrap()]);
    let manifest = std::fs::read_to_string(ws.path().join("autoapp.toml")).unwrap().replace(
        "migrations = [\"migrations/0001_init.sql\"]",
        "migrations = [\"migrations/0001_init.sql\", \"migrations/0002_big.sql\"]",
    );
    std::fs::write(ws.path().join("autoapp.toml"), manifest).unwrap();
    let big = format!("CREATE TABLE big (x);\n-- {}\n", "x".repeat(1_100_000));
    std::fs::write(ws.path().join("migrations/0002_big.sql"), big).unwrap();
    let release = build_notes(&publisher);
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("big.wasm");
    publisher.ok(&["pack", "notes", "--release", &release, "--to", file.to_str().unwrap()]);
    let person = TestRoot::new();
    let before = person.files();
    let e = person.refused(&["install", file.to_str().unwrap(), "--unsigned"]);
    assert!(e.contains("migrations are refused") && e.contains("a migration is at most"), "{e}");
    assert_eq!(person.files(), before);
}

/// Issue 53, point 5: `autoapp apps` lists the apps of a root whether or
/// not a launcher runs: id and name, the active release and version, where
/// each came from (built, installed from a publisher, restored), the
/// candidates waiting, and whether the launcher serves it.
#[test]
fn apps_lists_each_app_with_its_release_where_it_came_from_and_whether_it_is_served() {
    let (_publisher, _out, file, fingerprint) = signed_notes_package("Ada");
    let root = TestRoot::with_config("opener = \"none\"\n");
    let empty = root.ok(&["apps"]);
    assert!(empty.contains("no apps in"), "{empty}");
    let release = root.install("notes");
    root.ok(&["install", file.to_str().unwrap(), "--as", "ada-notes"]);
    let dir = tempfile::tempdir().unwrap();
    root.ok(&["backup", "notes", "--to", dir.path().to_str().unwrap()]);
    let backup = std::fs::read_dir(dir.path()).unwrap().next().unwrap().unwrap().path();
    root.ok(&["restore", backup.to_str().unwrap(), "--as", "notes-copy"]);
    let listed = |r: &TestRoot| -> Vec<serde_json::Value> {
        let all: serde_json::Value = serde_json::from_str(&r.ok(&["apps", "--json"])).unwrap();
        all["apps"].as_array().unwrap().clone()
    };
    let of = |apps: &[serde_json::Value], id: &str| apps.iter().find(|a| a["id"] == id).unwrap().clone();
    let apps = listed(&root);
    assert_eq!(apps.len(), 3, "{apps:?}");
    let notes = of(&apps, "notes");
    assert_eq!(
        (notes["came_from"].as_str(), notes["active"]["release"].as_str()),
        (Some("built"), Some(release.as_str()))
    );
    assert_eq!((notes["candidates"].as_u64(), notes["served"].as_bool()), (Some(0), Some(false)));
    let ada = of(&apps, "ada-notes");
    assert_eq!((ada["came_from"].as_str(), ada["candidates"].as_u64()), (Some("installed"), Some(1)));
    assert!(ada["active"].is_null() && ada["publisher"]["fingerprint"] == fingerprint.as_str(), "{ada}");
    assert_eq!(of(&apps, "notes-copy")["came_from"], "restored");
    let text = root.ok(&["apps"]);
    assert!(text.contains("ada-notes") && text.contains(&format!("published by fingerprint {fingerprint}")), "{text}");
    // With a launcher on the root, the apps with an active release are served.
    let launcher = crate::support::Served::start(&root, &["open"]);
    let _panel = launcher.tab("the Autoapp panel");
    let apps = listed(&root);
    assert_eq!(of(&apps, "notes")["served"], true);
    assert_eq!(of(&apps, "ada-notes")["served"], false, "nothing active, nothing served");
    launcher.stop();
}

/// A copy of the notes workspace in a temporary folder (manifest and
/// migrations; the component comes built).
pub(crate) fn notes_workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    let notes = repo().join("guests/notes");
    std::fs::copy(notes.join("autoapp.toml"), ws.path().join("autoapp.toml")).unwrap();
    std::fs::create_dir(ws.path().join("migrations")).unwrap();
    for m in std::fs::read_dir(notes.join("migrations")).unwrap() {
        let m = m.unwrap();
        std::fs::copy(m.path(), ws.path().join("migrations").join(m.file_name())).unwrap();
    }
    ws
}

/// Builds `notes` on `r` from the prebuilt guest component (its workspace
/// holds the manifest and migrations, as `notes_workspace` makes it);
/// answers the release id.
pub(crate) fn build_notes(r: &TestRoot) -> String {
    let component = crate::support::guest_component("notes");
    let said = r.ok(&["build", "notes", "--component", component.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&said).unwrap();
    v["release"].as_str().unwrap().to_string()
}

#[test]
fn an_update_is_a_candidate_that_says_what_changed_previews_on_a_copy_and_keeps_the_rows() {
    let publisher = TestRoot::new();
    publisher.ok(&["key", "new", "--name", "Ada"]);
    let ws = notes_workspace();
    publisher.ok(&["create", "notes", "--at", ws.path().to_str().unwrap()]);
    let built = build_notes;
    let out = tempfile::tempdir().unwrap();
    let pack = |release: &str, name: &str| -> String {
        let to = out.path().join(name);
        publisher.ok(&["pack", "notes", "--release", release, "--sign", "--to", to.to_str().unwrap()]);
        to.to_str().unwrap().to_string()
    };
    let v1 = built(&publisher);
    let v1_file = pack(&v1, "v1.wasm");
    // Version 2: a new route, a new migration.
    let manifest = std::fs::read_to_string(ws.path().join("autoapp.toml")).unwrap();
    let manifest = manifest
        .replace("version = \"0.1.0\"", "version = \"0.2.0\"")
        .replace(
            "migrations = [\"migrations/0001_init.sql\"]",
            "migrations = [\"migrations/0001_init.sql\", \"migrations/0002_archive.sql\"]",
        )
        .replacen(
            "\n[data]",
            "\n[[route]]\nname = \"notes.archive\"\neffect = \"write\"\nsummary = \"Archive a note\"\n\n[data]",
            1,
        );
    std::fs::write(ws.path().join("autoapp.toml"), &manifest).unwrap();
    std::fs::write(
        ws.path().join("migrations/0002_archive.sql"),
        "CREATE TABLE archived (note_id INTEGER PRIMARY KEY);\n",
    )
    .unwrap();
    let v2 = built(&publisher);
    let v2_file = pack(&v2, "v2.wasm");

    let person = TestRoot::new();
    person.ok(&["install", &v1_file]);
    person.ok(&["activate", "notes", &v1]);
    person.call("notes", "notes.add", r#"{"title": "kept across the update"}"#);
    let said = person.ok(&["install", &v2_file]);
    assert!(said.contains("a candidate of the app you have") && said.contains("the same publisher"), "{said}");
    assert!(said.contains("compared with the active release"), "{said}");
    assert!(
        said.contains("notes.archive") && said.contains("0002_archive.sql"),
        "explain names the new route and migration: {said}"
    );
    // A preview on a copy of the data, then the person's activation.
    person.ok(&["preview", "notes", &v2]);
    let previewed = person.ok(&["call", "notes", "notes.list", "{}", "--preview"]);
    assert!(previewed.contains("kept across the update"), "{previewed}");
    person.ok(&["preview-stop", "notes"]);
    person.ok(&["activate", "notes", &v2]);
    let listed = person.call("notes", "notes.list", "{}");
    assert!(listed.to_string().contains("kept across the update"), "{listed}");
}

/// Appends a custom section `name` holding `payload` to `out`, as the
/// WebAssembly binary format frames one.
fn push_custom(out: &mut Vec<u8>, name: &str, payload: &[u8]) {
    fn leb(out: &mut Vec<u8>, mut n: usize) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            out.push(if n == 0 { byte } else { byte | 0x80 });
            if n == 0 {
                break;
            }
        }
    }
    let mut body = Vec::new();
    leb(&mut body, name.len());
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(payload);
    out.push(0);
    leb(out, body.len());
    out.extend_from_slice(&body);
}

#[test]
fn a_package_whose_component_imports_what_the_host_does_not_offer_is_refused_naming_it() {
    // Written by hand, as anyone can: a component that imports an interface
    // of nobody's, with the notes manifest and migrations in our sections.
    let mut bytes = wat::parse_str(r#"(component (import "evil:net/raw@1.0.0" (instance)))"#).unwrap();
    let notes = repo().join("guests/notes");
    let manifest = std::fs::read(notes.join("autoapp.toml")).unwrap();
    let sql = std::fs::read_to_string(notes.join("migrations/0001_init.sql")).unwrap();
    let migrations = serde_json::json!([{ "name": "migrations/0001_init.sql", "sql": sql }]).to_string();
    push_custom(&mut bytes, "autoapp:manifest", &manifest);
    push_custom(&mut bytes, "autoapp:migrations", migrations.as_bytes());
    push_custom(&mut bytes, "autoapp:wit", b"autoapp:app@0.1.0");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes-evil.wasm");
    std::fs::write(&file, &bytes).unwrap();
    let person = TestRoot::new();
    let e = person.fails_with(1, &["install", file.to_str().unwrap(), "--unsigned"]);
    assert!(e.contains("the package's component is refused") && e.contains("evil:net/raw"), "{e}");
    assert!(!person.path().join("apps/notes").exists(), "nothing is placed");
}

#[test]
fn a_package_over_the_configured_size_is_refused_before_it_is_read() {
    let person = TestRoot::with_config("package_max_mib = 1\n");
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.wasm");
    std::fs::write(&big, vec![0u8; 2 << 20]).unwrap();
    let e = person.refused(&["install", big.to_str().unwrap()]);
    assert!(e.contains("is 2097152 bytes; a package may be at most 1048576 bytes (package_max_mib)"), "{e}");
    assert!(
        !person.path().join("apps").exists() || std::fs::read_dir(person.path().join("apps")).unwrap().next().is_none()
    );
}

#[test]
fn a_package_installs_under_another_id_keeps_its_publisher_through_a_backup_and_has_no_source_for_the_engineer() {
    let (_publisher, _out, file, fingerprint) = signed_notes_package("Ada");
    let file = file.to_str().unwrap();
    let person = TestRoot::with_config("opener = \"none\"\n");
    person.install("notes");
    person.install("news");
    // Beside the notes the person built: another id, a new app, pinned there.
    let said: serde_json::Value =
        serde_json::from_str(&person.ok(&["install", file, "--as", "ada-notes", "--json"])).unwrap();
    assert_eq!((said["app"].as_str(), said["new_app"].as_bool()), (Some("ada-notes"), Some(true)), "{said}");
    let release = said["release"].as_str().unwrap().to_string();
    person.ok(&["activate", "ada-notes", &release]);
    person.call("ada-notes", "notes.add", r#"{"title": "under another id"}"#);
    assert!(person.call("notes", "notes.list", "{}").to_string().find("under another id").is_none());
    // Over an app that is another app: refused, nothing placed.
    let releases =
        |app: &str| std::fs::read_dir(person.path().join("apps").join(app).join("releases")).unwrap().count();
    let before = releases("news");
    let refused = person.refused(&["install", file, "--as", "news"]);
    assert!(refused.contains("the package is the app notes, and news here is another app"), "{refused}");
    assert_eq!(releases("news"), before);
    // The same --as again: the same publisher, the same app.
    let again: serde_json::Value =
        serde_json::from_str(&person.ok(&["install", file, "--as", "ada-notes", "--json"])).unwrap();
    assert_eq!((again["standing"].as_str(), again["new_app"].as_bool()), (Some("same"), Some(false)), "{again}");

    // A backup of it restores on another root under its id, with its publisher.
    let dir = tempfile::tempdir().unwrap();
    person.ok(&["backup", "ada-notes", "--to", dir.path().to_str().unwrap()]);
    let backup = std::fs::read_dir(dir.path()).unwrap().next().unwrap().unwrap().path();
    let fresh = TestRoot::new();
    let said = fresh.ok(&["restore", backup.to_str().unwrap()]);
    assert!(
        said.contains("restored ada-notes")
            && said.contains(&format!("pinned to its publisher, as in the backup: fingerprint {fingerprint} \"Ada\"")),
        "{said}"
    );
    assert!(fresh.call("ada-notes", "notes.list", "{}").to_string().contains("under another id"));
    let again: serde_json::Value =
        serde_json::from_str(&fresh.ok(&["install", file, "--as", "ada-notes", "--json"])).unwrap();
    assert_eq!(again["standing"], "same", "the pin came with the backup: {again}");

    // The engineer can see what it asks for, but there is no source to read, change or build.
    let l = crate::engineer::Launcher::start(person);
    let explained = l.ok("candidate_explain", serde_json::json!({ "app": "ada-notes", "release": release }));
    assert!(explained.to_string().contains("notes.add"), "{explained}");
    for (tool, args) in [
        ("source_list", serde_json::json!({ "app": "ada-notes" })),
        ("source_write", serde_json::json!({ "app": "ada-notes", "path": "autoapp.toml", "content": "id = \"x\"" })),
        ("candidate_build", serde_json::json!({ "app": "ada-notes" })),
    ] {
        l.refused(tool, args, "not-found", "was installed from a package and has no workspace");
    }
    assert!(!l.root.path().join("apps/ada-notes/workspace").exists(), "nothing made a workspace");
}

/// Signs `unsigned` with the publisher key in `key_file` by hand, as anyone
/// can (the red team signed its hostile packages so): Ed25519 over the
/// format's message — each part framed by its length — in the last section.
fn signed_by_hand(mut unsigned: Vec<u8>, key_file: &std::path::Path) -> Vec<u8> {
    use ed25519_dalek::Signer as _;
    use sha2::Digest as _;
    let k: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(key_file).unwrap()).unwrap();
    let secret: [u8; 32] = hex::decode(k["secret"].as_str().unwrap()).unwrap().try_into().unwrap();
    let signing = ed25519_dalek::SigningKey::from_bytes(&secret);
    let (name, public) = (k["name"].as_str().unwrap(), signing.verifying_key().to_bytes());
    let mut message = Vec::new();
    let digest = sha2::Sha256::digest(&unsigned);
    for part in [&b"autoapp package signature v1"[..], &digest[..], name.as_bytes(), &public[..]] {
        message.extend_from_slice(&(part.len() as u64).to_le_bytes());
        message.extend_from_slice(part);
    }
    let section = serde_json::json!({
        "format": "autoapp-signature",
        "version": 1,
        "publisher": name,
        "key": hex::encode(public),
        "signature": hex::encode(signing.sign(&message).to_bytes()),
    });
    push_custom(&mut unsigned, "autoapp:signature", section.to_string().as_bytes());
    unsigned
}

/// Issue 73, rule 1: migration names that passed every check but could not
/// be written (300 characters, a name that is also a folder, a name under
/// the release's own `component.wasm` or `autoapp.toml`) failed while the
/// release was written: on an empty root they left `apps/`, `cache/` and
/// `cache/compiled/`; over an existing app, `releases/.tmp-<id>-<pid>/` with
/// the component in it; each said as a raw OS error naming the temporary
/// path. Every name is checked before anything is written, and the root is
/// as it was, byte for byte.
#[test]
fn a_package_whose_migrations_cannot_be_written_is_refused_leaving_the_root_as_it_was() {
    let publisher = TestRoot::new();
    let release = publisher.install("notes");
    publisher.ok(&["key", "new", "--name", "Mallory"]);
    let key_file = publisher.path().join("xdg-config/autoapp/publisher.key");
    let component = release_file(&publisher, "notes", &release, "component.wasm");
    let manifest = String::from_utf8(release_file(&publisher, "notes", &release, "autoapp.toml")).unwrap();
    let init = String::from_utf8(release_file(&publisher, "notes", &release, "migrations/0001_init.sql")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let package = |extra: &[&str], file: &str| {
        let mut names = vec!["migrations/0001_init.sql"];
        names.extend_from_slice(extra);
        let list = names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ");
        let text = manifest.replace(r#"migrations = ["migrations/0001_init.sql"]"#, &format!("migrations = [{list}]"));
        let migrations: Vec<serde_json::Value> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let sql = if i == 0 { init.clone() } else { format!("CREATE TABLE extra_{i} (x);") };
                serde_json::json!({ "name": n, "sql": sql })
            })
            .collect();
        let mut bytes = component.clone();
        push_custom(&mut bytes, "autoapp:manifest", text.as_bytes());
        push_custom(&mut bytes, "autoapp:migrations", serde_json::Value::from(migrations).to_string().as_bytes());
        push_custom(&mut bytes, "autoapp:wit", b"autoapp:app@0.1.0");
        let path = dir.path().join(file);
        std::fs::write(&path, signed_by_hand(bytes, &key_file)).unwrap();
        path.to_str().unwrap().to_string()
    };
    // An app of Mallory's, pinned to Mallory: what an update would go over.
    let existing = TestRoot::new();
    existing.ok(&["install", &package(&[], "good.wasm")]);
    let empty = TestRoot::new();
    let long = format!("migrations/{}.sql", "a".repeat(296));
    for (i, extra) in [
        &[long.as_str()][..],
        &["migrations/0002.sql", "migrations/0002.sql/0003.sql"],
        &["component.wasm/0002.sql"],
        &["autoapp.toml/0002.sql"],
    ]
    .into_iter()
    .enumerate()
    {
        let file = package(extra, &format!("bad-{i}.wasm"));
        for root in [&empty, &existing] {
            let before = root.files();
            let e = root.refused(&["install", &file]);
            assert!(e.contains("[data] migration"), "{extra:?}: {e}");
            assert!(!e.contains(".tmp-") && !e.contains("os error") && !e.contains("build again"), "{e}");
            assert_eq!(root.files(), before, "{extra:?}: the root as it was, byte for byte");
        }
    }
}
