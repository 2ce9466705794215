//! One test per containment rule: each hostile path is refused with the kind
//! and words that name the rule, and nothing outside the workspace changes.

use super::*;
use crate::error::kind_of;

struct Fixture {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(ws.join(".git")).unwrap();
    std::fs::create_dir_all(ws.join("target/release")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(ws.join("autoapp.toml"), "[app]\n").unwrap();
    std::fs::write(ws.join("src/lib.rs"), "fn a() {}\nfn b() {}\n").unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(ws.join("target/release/x.wasm"), "wasm").unwrap();
    std::fs::write(outside.join("secret.txt"), "the person's secret\n").unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("src/out")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), ws.join("leak.txt")).unwrap();
    std::os::unix::fs::symlink(ws.join(".git"), ws.join("src/git")).unwrap();
    std::os::unix::fs::symlink(outside.join("new.txt"), ws.join("dangling.txt")).unwrap();
    Fixture { _dir: dir, ws, outside }
}

fn refused(r: anyhow::Result<impl std::fmt::Debug>, kind: ErrorKind, words: &str) {
    let e = r.expect_err("refused");
    assert_eq!(kind_of(&e), kind, "{e:#}");
    assert!(format!("{e:#}").contains(words), "`{e:#}` should say `{words}`");
}

#[test]
fn dot_dot_is_refused_by_name() {
    let f = fixture();
    let w = Workspace::open(&f.ws).unwrap();
    refused(w.read("../outside/secret.txt", 0), ErrorKind::InvalidInput, "climbs out with `..`");
    refused(w.write("src/../../outside/x", "x"), ErrorKind::InvalidInput, "`..`");
    refused(w.list(".."), ErrorKind::InvalidInput, "`..`");
    assert!(!f.outside.join("x").exists());
}

#[test]
fn absolute_paths_are_refused() {
    let f = fixture();
    let w = Workspace::open(&f.ws).unwrap();
    let abs = f.outside.join("secret.txt");
    refused(w.read(abs.to_str().unwrap(), 0), ErrorKind::InvalidInput, "not relative to the workspace");
    refused(w.write("/tmp/autoapp-engineer-test", "x"), ErrorKind::InvalidInput, "not relative");
    refused(w.read("~/.ssh/id_rsa", 0), ErrorKind::InvalidInput, "not relative");
}

#[test]
fn a_nul_byte_is_refused() {
    let f = fixture();
    let w = Workspace::open(&f.ws).unwrap();
    refused(w.read("src/lib.rs\0.txt", 0), ErrorKind::InvalidInput, "NUL byte");
    refused(w.write("a\0b", "x"), ErrorKind::InvalidInput, "NUL byte");
}

#[test]
fn a_symlink_that_leads_out_is_refused_for_reading_and_writing() {
    let f = fixture();
    let w = Workspace::open(&f.ws).unwrap();
    refused(w.read("leak.txt", 0), ErrorKind::Denied, "leads outside the workspace");
    refused(w.read("src/out/secret.txt", 0), ErrorKind::Denied, "leads outside the workspace");
    refused(w.write("src/out/planted.txt", "x"), ErrorKind::Denied, "leads outside the workspace");
    refused(w.write("leak.txt", "overwritten"), ErrorKind::Denied, "leads outside the workspace");
    refused(w.edit("leak.txt", "secret", "x"), ErrorKind::Denied, "leads outside");
    refused(w.delete("leak.txt"), ErrorKind::Denied, "leads outside");
    refused(w.write("dangling.txt", "x"), ErrorKind::Denied, "symlink that leads nowhere");
    refused(w.list("src/out"), ErrorKind::Denied, "leads outside");
    assert!(!f.outside.join("planted.txt").exists() && !f.outside.join("new.txt").exists());
    assert_eq!(std::fs::read_to_string(f.outside.join("secret.txt")).unwrap(), "the person's secret\n");
    // Listing and searching never follow it.
    let (entries, _) = w.list("").unwrap();
    assert!(entries.iter().any(|e| e.path == "src/out" && e.kind == "symlink"));
    assert!(!entries.iter().any(|e| e.path.contains("secret")));
    let (found, _) = w.search("secret", "").unwrap();
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn git_and_target_are_never_read_or_written() {
    let f = fixture();
    let w = Workspace::open(&f.ws).unwrap();
    refused(w.read(".git/config", 0), ErrorKind::Denied, ".git/");
    refused(w.write(".git/hooks/pre-commit", "#!/bin/sh\n"), ErrorKind::Denied, ".git/");
    refused(w.read("target/release/x.wasm", 0), ErrorKind::Denied, "target/");
    refused(w.write("target/release/x.wasm", "x"), ErrorKind::Denied, "target/");
    refused(w.delete("src/../target/release/x.wasm"), ErrorKind::InvalidInput, "`..`");
    refused(w.read("src/git/config", 0), ErrorKind::Denied, "into .git/, target/ or .cargo/");
    refused(w.write("src/git/hooks/post-checkout", "x"), ErrorKind::Denied, "into .git/, target/ or .cargo/");
    let (entries, _) = w.list("").unwrap();
    assert!(!entries.iter().any(|e| e.path.starts_with(".git") || e.path.starts_with("target")), "{entries:?}");
    assert!(!f.ws.join(".git/hooks").exists());
}

#[test]
fn the_caps_hold() {
    let f = fixture();
    let w = Workspace::open(&f.ws).unwrap();
    let big = "x".repeat(MAX_WRITE + 1);
    refused(w.write("big.txt", &big), ErrorKind::InvalidInput, "at most 1024 KiB");
    refused(w.edit("src/lib.rs", "fn a() {}", &big), ErrorKind::InvalidInput, "at most 1024 KiB");
    refused(w.search(&"a".repeat(MAX_PATTERN + 1), ""), ErrorKind::InvalidInput, "at most 1024 bytes");
    // A page of a long file is at most READ_PAGE bytes, and says where the next starts.
    // The page ends before a character it would cut (READ_PAGE falls inside an é).
    assert_eq!(READ_PAGE, 256 * 1024);
    std::fs::write(f.ws.join("long.txt"), format!("a{}", "é".repeat(READ_PAGE))).unwrap();
    let p = w.read("long.txt", 0).unwrap();
    assert_eq!((p.text.len(), p.next_offset), (READ_PAGE - 1, Some(READ_PAGE as u64 - 1)));
    let mut all = p.text;
    let mut next = p.next_offset;
    while let Some(at) = next {
        let page = w.read("long.txt", at).unwrap();
        all.push_str(&page.text);
        next = page.next_offset;
    }
    assert_eq!(all, format!("a{}", "é".repeat(READ_PAGE)), "the pages make the file");
    // An offset inside a character starts at that character.
    let mid = w.read("long.txt", 2).unwrap();
    assert_eq!((mid.offset, mid.text.len()), (1, READ_PAGE));
    // The end is a page of nothing; past it is refused.
    let end = 2 * READ_PAGE as u64 + 1;
    assert_eq!(w.read("long.txt", end).unwrap().text, "");
    refused(w.read("long.txt", end + 1), ErrorKind::InvalidInput, "past the end");
    // The longest path is accepted by its words, one byte more is not.
    assert!(Workspace::words(&"a".repeat(MAX_PATH)).is_ok());
    refused(Workspace::words(&"a".repeat(MAX_PATH + 1)), ErrorKind::InvalidInput, "at most 1024 bytes");
    // The caps are inclusive: exactly MAX_WRITE and MAX_PATTERN are taken.
    w.write("full.txt", &"x".repeat(MAX_WRITE)).unwrap();
    assert!(w.search(&"a".repeat(MAX_PATTERN), "").is_ok());
    // A match says its line (from 1); a pattern is compiled within a bounded size, not at any size.
    let (found, _) = w.search(r"fn\s+b\(\)", "src").unwrap();
    assert_eq!((found.len(), found[0].path.as_str(), found[0].line), (1, "src/lib.rs", 2));
    refused(w.search(r"\w{5000}", ""), ErrorKind::InvalidInput, "not a regular expression this search reads");
    // A search stops at MAX_MATCHES and says there were more.
    std::fs::write(f.ws.join("many.txt"), "hit\n".repeat(MAX_MATCHES + 5)).unwrap();
    let (found, more) = w.search("^hit$", "").unwrap();
    assert_eq!((found.len(), more), (MAX_MATCHES, true));
}

#[test]
fn has_says_what_the_engineer_may_read() {
    let f = fixture();
    let w = Workspace::open(&f.ws).unwrap();
    assert!(w.has("src/lib.rs") && w.has("src"));
    for not in ["nope.rs", ".git/config", "target/release/x.wasm", "../outside/secret.txt", "leak.txt", "src/out"] {
        assert!(!w.has(not), "{not}");
    }
}

#[test]
fn a_listing_is_sorted_skips_git_and_target_and_stops_at_its_cap() {
    let f = fixture();
    let w = Workspace::open(&f.ws).unwrap();
    let (entries, truncated) = w.list("").unwrap();
    let paths: Vec<(&str, &str)> = entries.iter().map(|e| (e.path.as_str(), e.kind)).collect();
    assert_eq!(
        paths,
        [
            ("autoapp.toml", "file"),
            ("dangling.txt", "symlink"),
            ("leak.txt", "symlink"),
            ("src", "folder"),
            ("src/git", "symlink"),
            ("src/lib.rs", "file"),
            ("src/out", "symlink")
        ]
    );
    assert!(!truncated);
    assert_eq!(entries[0].bytes, 6);
    assert_eq!(w.list(".").unwrap().0.len(), entries.len(), "`.` is the whole workspace");
    assert_eq!(w.list("src").unwrap().0.len(), 3);
    std::fs::create_dir(f.ws.join("many")).unwrap();
    for i in 0..MAX_LIST {
        std::fs::write(f.ws.join("many").join(i.to_string()), "").unwrap();
    }
    let (entries, truncated) = w.list("").unwrap();
    assert_eq!((entries.len(), truncated), (MAX_LIST, true));
}

#[test]
fn an_edit_replaces_one_unique_span_and_shows_its_diff() {
    let f = fixture();
    let w = Workspace::open(&f.ws).unwrap();
    refused(w.edit("src/lib.rs", "fn c() {}", "x"), ErrorKind::InvalidInput, "not in `src/lib.rs`");
    std::fs::write(f.ws.join("twice.rs"), "x\nx\n").unwrap();
    refused(w.edit("twice.rs", "x", "y"), ErrorKind::InvalidInput, "occurs 2 times");
    refused(w.edit("nope.rs", "x", "y"), ErrorKind::NotFound, "does not exist");
    let c = w.edit("src/lib.rs", "fn b() {}", "fn b() { 1; }").unwrap();
    let d = c.shown().unwrap();
    assert!(d.contains("--- a/src/lib.rs") && d.contains("+++ b/src/lib.rs"), "{d}");
    assert!(d.contains("-fn b() {}\n+fn b() { 1; }\n"), "{d}");
    assert_eq!(std::fs::read_to_string(f.ws.join("src/lib.rs")).unwrap(), "fn a() {}\nfn b() {}\n", "not yet made");
    c.apply().unwrap();
    assert_eq!(std::fs::read_to_string(f.ws.join("src/lib.rs")).unwrap(), "fn a() {}\nfn b() { 1; }\n");
    // A change whose file moved on while the question waited is not made.
    let stale = w.edit("src/lib.rs", "fn a() {}", "fn a2() {}").unwrap();
    std::fs::write(f.ws.join("src/lib.rs"), "edited by the person\n").unwrap();
    refused(stale.apply(), ErrorKind::Conflict, "changed while the question waited");
    assert_eq!(std::fs::read_to_string(f.ws.join("src/lib.rs")).unwrap(), "edited by the person\n");
}

#[test]
fn a_write_makes_folders_inside_and_a_delete_removes_one_file() {
    let f = fixture();
    let w = Workspace::open(&f.ws).unwrap();
    let c = w.write("src/routes/new.rs", "pub fn x() {}\n").unwrap();
    assert!(c.shown().unwrap().contains("--- /dev/null"));
    assert_eq!(c.summary(), "created src/routes/new.rs (14 bytes)");
    c.apply().unwrap();
    assert_eq!(w.write("src/routes/new.rs", "x").unwrap().summary(), "wrote src/routes/new.rs (1 bytes)");
    assert_eq!(std::fs::read_to_string(f.ws.join("src/routes/new.rs")).unwrap(), "pub fn x() {}\n");
    refused(w.delete("src"), ErrorKind::InvalidInput, "is a folder");
    refused(w.delete("autoapp.toml"), ErrorKind::InvalidInput, "edit it instead");
    let d = w.delete("src/routes/new.rs").unwrap();
    assert!(d.shown().unwrap().contains("+++ /dev/null"));
    assert_eq!(d.summary(), "deleted src/routes/new.rs");
    d.apply().unwrap();
    assert!(!f.ws.join("src/routes/new.rs").exists());
    // A file that could not be read when the change is made is not written over.
    let made = w.write("later.txt", "x").unwrap();
    std::fs::create_dir(f.ws.join("later.txt")).unwrap();
    let e = made.apply().unwrap_err();
    assert!(format!("{e:#}").contains("cannot read `later.txt`"), "{e:#}");
}

#[test]
fn a_diff_of_exactly_the_shown_limit_is_shown_and_one_byte_more_is_refused() {
    let f = fixture();
    let w = Workspace::open(&f.ws).unwrap();
    // The diff of a new one-line file grows by one byte with each byte of the line.
    let base = w.write("big.txt", "x\n").unwrap().shown().unwrap().len() - 1;
    let at = w.write("big.txt", &format!("{}\n", "x".repeat(MAX_DIFF - base))).unwrap();
    assert_eq!(at.shown().unwrap().len(), MAX_DIFF);
    let over = w.write("big.txt", &format!("{}\n", "x".repeat(MAX_DIFF - base + 1))).unwrap();
    refused(over.shown(), ErrorKind::InvalidInput, "split it");
}

#[test]
fn cargos_configuration_is_never_read_or_written_and_the_toolchain_files_never_changed() {
    let f = fixture();
    std::fs::create_dir_all(f.ws.join(".cargo")).unwrap();
    std::fs::write(f.ws.join(".cargo/config.toml"), "[registries.x]\ntoken = \"t\"\n").unwrap();
    std::fs::write(f.ws.join("rust-toolchain.toml"), "[toolchain]\nchannel = \"1.95.0\"\n").unwrap();
    std::os::unix::fs::symlink(f.ws.join(".cargo"), f.ws.join("src/cargo-link")).unwrap();
    let w = Workspace::open(&f.ws).unwrap();
    refused(w.read(".cargo/config.toml", 0), ErrorKind::Denied, "inside .cargo/");
    refused(w.write(".cargo/config.toml", "[build]\nrustc = \"x\"\n"), ErrorKind::Denied, "inside .cargo/");
    refused(w.write("sub/.cargo/config.toml", "x"), ErrorKind::Denied, "inside .cargo/");
    refused(w.read("src/cargo-link/config.toml", 0), ErrorKind::Denied, "through a symlink");
    refused(w.write("src/cargo-link/config.toml", "x"), ErrorKind::Denied, "through a symlink");
    let (listed, _) = w.list("").unwrap();
    assert!(!listed.iter().any(|e| e.path.starts_with(".cargo")), "{listed:?}");
    // The toolchain files: read, never changed.
    assert!(w.read("rust-toolchain.toml", 0).unwrap().text.contains("1.95.0"));
    for file in ["rust-toolchain.toml", "rust-toolchain", "sub/rust-toolchain.toml"] {
        refused(w.write(file, "[toolchain]\npath = \"target/x\"\n"), ErrorKind::Denied, "chooses the toolchain");
    }
    refused(w.edit("rust-toolchain.toml", "1.95.0", "nightly"), ErrorKind::Denied, "chooses the toolchain");
    refused(w.delete("rust-toolchain.toml"), ErrorKind::Denied, "chooses the toolchain");
    std::os::unix::fs::symlink(f.ws.join("rust-toolchain.toml"), f.ws.join("innocent.toml")).unwrap();
    refused(w.write("innocent.toml", "x"), ErrorKind::Denied, "chooses the toolchain");
    assert!(!f.ws.join("rust-toolchain").exists());
    assert!(std::fs::read_to_string(f.ws.join(".cargo/config.toml")).unwrap().contains("token"));
}

#[test]
fn a_person_is_shown_a_change_whole_or_it_is_refused_before_anyone_is_asked() {
    let f = fixture();
    let w = Workspace::open(&f.ws).unwrap();
    // 70 KiB whose last line differs from the file it replaces: shown whole.
    let body: String = (0..1500).map(|i| format!("line {i:04} of a long file that the agent writes\n")).collect();
    assert!(body.len() > 68 * 1024, "{}", body.len());
    std::fs::write(f.ws.join("long.txt"), format!("{body}the old last line\n")).unwrap();
    let text = format!("{body}the LAST line, changed\n");

    let shown = w.write("long.txt", &text).unwrap().shown().unwrap();
    assert!(shown.contains("-the old last line\n+the LAST line, changed\n"), "{}", &shown[shown.len() - 200..]);
    let created = w.write("new-long.txt", &(body.clone() + &body)).unwrap().shown().unwrap();
    assert!(created.ends_with("+line 1499 of a long file that the agent writes\n"), "the end of a new file too");
    // Over the limit: refused, nothing written.
    let huge = "x".repeat(80) + "\n";
    let huge = huge.repeat(MAX_DIFF / 81 + 10);
    refused(w.write("huge.txt", &huge).unwrap().shown(), ErrorKind::InvalidInput, "split it into smaller changes");
    assert!(!f.ws.join("huge.txt").exists());
}

#[test]
fn a_binary_write_and_the_delete_of_a_file_that_is_not_text_say_so() {
    let f = fixture();
    let w = Workspace::open(&f.ws).unwrap();
    let shown = w.write("blob.bin", "MZ\u{0}\u{1}payload").unwrap().shown().unwrap();
    assert!(shown.starts_with("note: this writes a BINARY file"), "{shown}");
    assert!(!w.write("text.txt", "tab\there\r\n").unwrap().shown().unwrap().contains("note:"));
    std::fs::write(f.ws.join("image.png"), [0x89, b'P', b'N', b'G', 0xff, 0xfe]).unwrap();
    let shown = w.delete("image.png").unwrap().shown().unwrap();
    assert!(shown.contains("note: the file as it is now is BINARY or not UTF-8"), "{shown}");
}

#[test]
fn a_bidi_override_in_a_change_is_shown_on_its_card_not_hidden() {
    let f = fixture();
    let w = Workspace::open(&f.ws).unwrap();
    let trojan = "if access_level != \"user\u{202e} \u{2066}// Check if admin\u{2069} \u{2066}\" {\n";
    let change = w.write("src/lib.rs", trojan).unwrap();
    let shown = change.shown().unwrap();
    assert!(!shown.chars().any(crate::elsewhere::text::is_format), "{shown}");
    assert!(shown.contains("\\u{202e}") && shown.contains("\\u{2066}"), "{shown}");
    assert!(shown.starts_with("note: this change holds invisible format characters"), "{shown}");
    // What is written is the agent's text as it is: the card only shows it.
    change.apply().unwrap();
    assert_eq!(std::fs::read_to_string(f.ws.join("src/lib.rs")).unwrap(), trojan);
}
