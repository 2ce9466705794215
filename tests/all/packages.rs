//! Packages (issue 30, the publisher's side so far): `autoapp key` and
//! `autoapp pack`. A package is the release's component with Autoapp's part
//! in custom sections; it runs as it is.

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
    let ws = tempfile::tempdir().unwrap();
    let notes = repo().join("guests/notes");
    std::fs::copy(notes.join("autoapp.toml"), ws.path().join("autoapp.toml")).unwrap();
    std::fs::create_dir(ws.path().join("migrations")).unwrap();
    for m in std::fs::read_dir(notes.join("migrations")).unwrap() {
        let m = m.unwrap();
        std::fs::copy(m.path(), ws.path().join("migrations").join(m.file_name())).unwrap();
    }
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
    assert!(said.contains(&format!("signed by Ada's Apps (fingerprint {fingerprint})")), "{said}");
    // A name that would hide or reorder what follows it is refused.
    let other = TestRoot::new();
    let e = other.refused(&["key", "new", "--name", "Ada\u{202e}sppA"]);
    assert!(e.contains("invisible format characters"), "{e}");
}
