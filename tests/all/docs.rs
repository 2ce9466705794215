//! The documentation's commands are run as written: every `autoapp` line of
//! docs/getting-started.md, and the Rust example of docs/authoring.md.

use crate::support::{TestRoot, repo};

/// The fenced blocks of `lang` in a markdown file, in order.
fn blocks(file: &str, lang: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo().join(file)).unwrap();
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match &mut current {
            None if line.trim_start() == format!("```{lang}") => current = Some(String::new()),
            Some(_) if line.trim_start() == "```" => out.push(current.take().unwrap()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    out
}

/// Splits a shell line into words: spaces separate, single quotes group,
/// `#` outside quotes starts a comment.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let (mut quoted, mut in_word) = (false, false);
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                in_word = true;
            }
            '#' if !quoted && !in_word => break,
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(word);
    }
    out
}

#[test]
fn every_autoapp_command_of_getting_started_runs_as_written() {
    let root = TestRoot::new();
    let mut built: std::collections::HashMap<String, String> = Default::default();
    let mut ran = 0;
    for block in blocks("docs/getting-started.md", "sh") {
        for line in block.lines() {
            let w = words(line);
            if w.first().map(String::as_str) != Some("autoapp") {
                continue;
            }
            let mut args: Vec<String> = w[1..].to_vec();
            // The release a reader would copy from `build`'s output.
            if args.first().map(String::as_str) == Some("activate") {
                args[2] = built.get(&args[1]).cloned().expect("the doc builds before it activates");
            }
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            // Files the guide writes (a backup) go to a folder of the test's own.
            let out = root.ok_at(root.path(), &refs);
            if args.first().map(String::as_str) == Some("build") {
                let id = out
                    .split("candidate ")
                    .nth(1)
                    .and_then(|s| s.split_whitespace().next())
                    .expect("build prints its release");
                built.insert(args[1].clone(), id.to_string());
            }
            ran += 1;
        }
    }
    assert!(ran >= 7, "the guide's commands were found ({ran})");
    assert_eq!(root.call("hello", "entries.list", "{}")["entries"][0]["text"], "first");
    assert_eq!(root.call("hello-copy", "entries.list", "{}"), root.call("hello", "entries.list", "{}"));
}

#[test]
fn the_rust_example_of_authoring_builds_and_answers() {
    let root = TestRoot::new();
    root.ok(&["create", "hello"]);
    let ws = root.path().join("apps/hello/workspace");
    let toml = blocks("docs/authoring.md", "toml");
    let rust = blocks("docs/authoring.md", "rust");
    let cargo = toml.iter().find(|b| b.contains("[package]")).expect("the Cargo.toml of the example");
    std::fs::write(ws.join("Cargo.toml"), cargo).unwrap();
    std::fs::write(ws.join("src/lib.rs"), rust.first().expect("the lib.rs of the example")).unwrap();
    let id = root.build("hello");
    root.ok(&["activate", "hello", &id]);
    assert_eq!(root.call("hello", "entries.add", r#"{"text":"from the docs"}"#), serde_json::json!({}));
    let e = root.refused(&["call", "hello", "entries.list"]);
    assert!(e.contains("no route entries.list"), "the example answers only entries.add: {e}");
}
