//! What a person is asked to grant is shown whole where they decide (issue
//! 51, rules 2 and 4): a folder's resolved path and access, a program's path
//! and argument pattern — before it is granted and after, for every
//! candidate, built or installed. What reaches the person's keys or this
//! launcher's own files is marked, and `grant --all-asked` never grants it.

use crate::support::{TestRoot, hostile_component, repo};

/// A workspace of the hostile guest asking for `capabilities`, registered
/// on `root` and built from the prebuilt component; answers the release.
fn build_hostile(root: &TestRoot, ws: &std::path::Path, capabilities: &str, home: &std::path::Path) -> String {
    let src = repo().join("guests/hostile");
    let manifest = std::fs::read_to_string(src.join("autoapp.toml")).unwrap();
    let start = manifest.find("\n[capabilities]\n").unwrap() + 1;
    let end = manifest[start..].find("\n[data]\n").map(|i| start + i + 1).unwrap();
    let manifest = format!("{}[capabilities]\n{capabilities}\n\n{}", &manifest[..start], &manifest[end..]);
    std::fs::write(ws.join("autoapp.toml"), manifest).unwrap();
    std::fs::create_dir_all(ws.join("migrations")).unwrap();
    for m in std::fs::read_dir(src.join("migrations")).unwrap() {
        let m = m.unwrap();
        std::fs::copy(m.path(), ws.join("migrations").join(m.file_name())).unwrap();
    }
    if !root.path().join("apps/hostile").exists() {
        ok(root, home, &["create", "hostile", "--at", ws.to_str().unwrap()]);
    }
    let component = hostile_component();
    let out = ok(root, home, &["build", "hostile", "--component", component.to_str().unwrap(), "--json"]);
    serde_json::from_str::<serde_json::Value>(&out).unwrap()["release"].as_str().unwrap().to_string()
}

/// `autoapp` on `root` with `home` as the person's home folder.
fn run(root: &TestRoot, home: &std::path::Path, args: &[&str]) -> std::process::Output {
    root.command().env("HOME", home).args(args).output().unwrap()
}

fn ok(root: &TestRoot, home: &std::path::Path, args: &[&str]) -> String {
    let out = run(root, home, args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Rule 2: `files = [{ name = "photos", path = "~/.ssh", access = "write" }]`
/// showed as `files:photos  not granted` in explain, its JSON and the panel,
/// and `grant --all-asked` granted it. Now the folder's path and access are
/// shown whole before the grant, marked, and only a grant by name gives it.
#[test]
fn a_folder_that_holds_the_person_s_keys_is_shown_whole_marked_and_never_granted_by_all_asked() {
    let root = TestRoot::new();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".ssh")).unwrap();
    std::fs::create_dir(home.path().join("Pictures")).unwrap();
    std::fs::create_dir(home.path().join(".docker")).unwrap();
    let ssh = std::fs::canonicalize(home.path().join(".ssh")).unwrap();
    let ws = tempfile::tempdir().unwrap();
    build_hostile(
        &root,
        ws.path(),
        r#"files = [{ name = "photos", path = "~/.ssh", access = "write" }, { name = "pics", path = "~/Pictures", access = "read" }, { name = "cache", path = "~/.docker", access = "read" }]
spawn = [{ program = "echo", args = ["hello"] }]"#,
        home.path(),
    );
    let said = ok(&root, home.path(), &["explain", "hostile"]);
    let line = said.lines().find(|l| l.trim_start().starts_with("files:photos")).unwrap();
    assert!(
        line.contains(&format!("~/.ssh → {}, read and write", ssh.display())) && line.contains("not granted"),
        "{said}"
    );
    assert!(said.contains("MARKED") && said.contains("holds your SSH keys"), "{said}");
    let echo = said.lines().find(|l| l.trim_start().starts_with("spawn:echo")).unwrap();
    assert!(echo.contains("/echo with arguments [\"hello\"]"), "{said}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&root, home.path(), &["explain", "hostile", "--json"])).unwrap();
    let photos = json["asked"].as_array().unwrap().iter().find(|a| a["name"] == "files:photos").unwrap().clone();
    assert!(photos["whole"].as_str().unwrap().contains(&ssh.display().to_string()), "{photos}");
    assert!(photos["marked"].as_str().unwrap().contains(".ssh"), "{photos}");
    // --all-asked grants the rest, never the marked folder.
    let out = run(&root, home.path(), &["grant", "hostile", "--all-asked"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let told = String::from_utf8_lossy(&out.stderr);
    assert!(told.contains("not granted by --all-asked") && told.contains("files:photos"), "{told}");
    assert!(told.contains("files:cache") && told.contains("your registry logins"), "{told}");
    let after = ok(&root, home.path(), &["explain", "hostile"]);
    let line = after.lines().find(|l| l.trim_start().starts_with("files:photos")).unwrap();
    assert!(line.contains("not granted"), "{after}");
    assert!(after.lines().find(|l| l.trim_start().starts_with("files:pics")).unwrap().contains(": granted"), "{after}");
    // By name, it is the person's to give.
    let granted = ok(&root, home.path(), &["grant", "hostile", "files:photos"]);
    assert!(granted.contains(&ssh.display().to_string()) && granted.contains("read and write"), "{granted}");
    // Home itself is marked too.
    let ws2 = tempfile::tempdir().unwrap();
    let other = TestRoot::new();
    build_hostile(&other, ws2.path(), r#"files = [{ name = "all", path = "~/", access = "read" }]"#, home.path());
    let e = run(&other, home.path(), &["grant", "hostile", "--all-asked"]);
    assert_eq!(e.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&e.stderr).contains("never grants"), "{}", String::from_utf8_lossy(&e.stderr));
    // Issue 73, point 3: a folder under ~/.ssh (or ~/.aws) that does not exist
    // yet is marked as one that does: it would hold the keys once made.
    let ws3 = tempfile::tempdir().unwrap();
    let third = TestRoot::new();
    build_hostile(
        &third,
        ws3.path(),
        r#"files = [{ name = "later", path = "~/.ssh/backup", access = "write" }, { name = "cloud", path = "~/.aws/new", access = "read" }]"#,
        home.path(),
    );
    let said = ok(&third, home.path(), &["explain", "hostile"]);
    let later = said.lines().find(|l| l.trim_start().starts_with("files:later")).unwrap();
    assert!(later.contains("not on this computer"), "{said}");
    assert!(said.contains("holds your SSH keys") && said.contains("your cloud keys"), "{said}");
    assert_eq!(said.matches("MARKED").count(), 2, "{said}");
}

/// Rule 4: v1 with `args = ["hello"]` granted; v2 drops `args`. Before:
/// explain said "no change to … capabilities" and v2 activated on v1's
/// grant. Now the pattern is part of the grant: a change, and a new grant.
#[test]
fn a_program_s_argument_pattern_is_part_of_its_grant() {
    let root = TestRoot::new();
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let v1 = build_hostile(&root, ws.path(), r#"spawn = [{ program = "echo", args = ["hello"] }]"#, home.path());
    let granted = ok(&root, home.path(), &["grant", "hostile", "--all-asked"]);
    assert!(granted.contains("with arguments [\"hello\"]"), "{granted}");
    ok(&root, home.path(), &["activate", "hostile", &v1]);
    let v2 = build_hostile(&root, ws.path(), r#"spawn = [{ program = "echo" }]"#, home.path());
    let said = ok(&root, home.path(), &["explain", "hostile", &v2]);
    assert!(!said.contains("no change to routes, effects, capabilities"), "{said}");
    assert!(said.contains("capabilities added: spawn:echo (any arguments)"), "{said}");
    assert!(said.contains("capabilities removed: spawn:echo (arguments [\"hello\"])"), "{said}");
    assert!(said.contains("before activating, grant: autoapp grant hostile spawn:echo"), "{said}");
    let e = run(&root, home.path(), &["activate", "hostile", &v2]);
    assert!(!e.status.success(), "activation needs the new grant");
    assert!(String::from_utf8_lossy(&e.stderr).contains("spawn:echo"), "{}", String::from_utf8_lossy(&e.stderr));
    let again = ok(&root, home.path(), &["grant", "hostile", "spawn:echo"]);
    assert!(again.contains("with any arguments"), "{again}");
    ok(&root, home.path(), &["activate", "hostile", &v2]);
}

/// Where programs run without Landlock (`spawn_unconfined = true`), a program
/// granted any arguments can reach everything the person can: it is marked,
/// and `--all-asked` leaves it to be named (found by a review of rule 2).
#[test]
fn a_program_told_any_arguments_is_marked_where_programs_run_unconfined() {
    let root = TestRoot::with_config("spawn_unconfined = true\n");
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    build_hostile(&root, ws.path(), r#"spawn = [{ program = "echo" }]"#, home.path());
    let said = ok(&root, home.path(), &["explain", "hostile"]);
    assert!(said.contains("MARKED: programs run unconfined here"), "{said}");
    let e = run(&root, home.path(), &["grant", "hostile", "--all-asked"]);
    assert_eq!(e.status.code(), Some(1), "{}", String::from_utf8_lossy(&e.stderr));
    // Confined (the default), the same program is shown whole and not marked.
    let other = TestRoot::new();
    let ws2 = tempfile::tempdir().unwrap();
    build_hostile(&other, ws2.path(), r#"spawn = [{ program = "echo" }]"#, home.path());
    assert!(!ok(&other, home.path(), &["explain", "hostile"]).contains("MARKED"));
}
