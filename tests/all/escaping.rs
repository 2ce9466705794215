//! What an app, an agent or a file says reaches the terminal escaped: every
//! print goes through elsewhere::text's one writer (tidy.rs holds that no
//! other print exists), which shows control and format characters visibly.

use crate::support::TestRoot;

/// The characters that must never reach a terminal as they are: C0 but the
/// line break, DEL, C1 (U+009B is the 8-bit CSI), and the bidi and
/// zero-width format characters.
fn invisible_or_controlling(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| {
            (c.is_control() && c != '\n')
                || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
        })
        .collect()
}

#[test]
fn an_apps_words_reach_stdout_as_json_that_shows_nothing_invisible() {
    let root = TestRoot::new();
    let _ws = root.install_hostile_with("spawn = [{ program = \"echo\" }]");
    // The store's error names the table the app asked for: the app chooses
    // every character of it.
    let table = "\u{9b}31m\u{202e}evil\u{2066}";
    let sql = format!("SELECT 1 FROM \"{table}\"");
    let input = serde_json::json!({ "sql": sql }).to_string();
    let out = root.ok(&["call", "hostile", "sql.read", &input]);
    assert_eq!(invisible_or_controlling(&out), Vec::<char>::new(), "{out:?}");
    // Escaped as JSON escapes: the answer still parses to the app's words.
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["error"].as_str().unwrap().contains(table), "{v}");
}

#[test]
fn an_error_that_echoes_a_callers_words_reaches_stderr_escaped() {
    let root = TestRoot::new();
    let _ws = root.install_hostile_with("spawn = [{ program = \"echo\" }]");
    // The input does not fit the route's schema: the refusal quotes it.
    let input = serde_json::json!({ "sql": ["\u{202e}txt.exe", "\u{9b}2J", "\u{200b}"] }).to_string();
    let out = root.run(&["call", "hostile", "sql", &input]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("\\u{202e}txt.exe"), "the refusal shows the override visibly: {stderr}");
    assert_eq!(invisible_or_controlling(&stderr), Vec::<char>::new(), "{stderr:?}");
    // The record's rows, printed, are the same.
    let runs = root.ok(&["runs", "hostile"]);
    assert_eq!(invisible_or_controlling(&runs), Vec::<char>::new(), "{runs:?}");
}
