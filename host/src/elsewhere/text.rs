//! Text that came from elsewhere — an agent's plan, an app's names and
//! messages, a backup's grants, another process's file — on its way to the
//! person.
//!
//! Two places text reaches the person, one function each:
//!
//! - a **terminal**: [`terminal`] shows every control character (C0, DEL, C1,
//!   and so ESC: the start of every escape sequence) and every invisible
//!   format character (bidi overrides and isolates, zero-width characters,
//!   tags) as a visible `\u{…}`, so no text can move the cursor, recolour,
//!   clear or retitle the terminal, hide a line or reorder what follows it.
//!   [`terminal_lines`] does the same but keeps line breaks, for text that is
//!   shown as lines of its own (a plan's request).
//! - a **page or a card**: the renderer draws text with `textContent` only, so
//!   markup is already text; what is left is what a text node still shows
//!   wrongly: [`for_person`] removes the invisible format characters, shows
//!   other control characters as U+FFFD, and collapses runs of blank lines.
//!
//! What text may be at most is said where it is taken in, with [`within`].
//!
//! **The one writer.** Nothing in the host prints with `println!` and its
//! kin: every line for a terminal goes through [`say!`](crate::say),
//! [`tell!`](crate::tell) (standard error) and their `_inline` forms, which
//! pass the whole text through [`terminal_lines`], and `--json` through
//! [`json_for_terminal`]. So a value that came from elsewhere cannot reach a
//! terminal unescaped, whoever forgets which value that was;
//! `tests/all/tidy.rs` holds that no other print exists.

use std::borrow::Cow;

/// Whether `c` is a Unicode format character that changes how the text
/// around it is shown without being seen: the bidi controls (embeddings,
/// overrides, isolates, marks), zero-width characters, the word joiner and
/// invisible operators, the byte order mark, interlinear annotation
/// characters, tags — Unicode's general category `Cf` (format) as of
/// Unicode 16 — and the characters that draw as nothing or as a line break
/// of their own: the Hangul fillers, the line and paragraph separators.
/// (Variation selectors, which only choose a glyph, are not among them.)
///
/// `host/assets/common.js`'s `visible` removes the same list from what a page
/// shows (but a zero-width joiner inside an emoji sequence).
pub fn is_format(c: char) -> bool {
    matches!(c as u32,
        0x00AD                       // soft hyphen
        | 0x0600..=0x0605            // Arabic number signs
        | 0x061C                     // Arabic letter mark
        | 0x06DD | 0x070F | 0x0890 | 0x0891 | 0x08E2
        | 0x115F | 0x1160            // Hangul fillers
        | 0x180E                     // Mongolian vowel separator
        | 0x200B..=0x200F            // zero-width space, (non-)joiner, LRM, RLM
        | 0x2028 | 0x2029            // line and paragraph separators
        | 0x202A..=0x202E            // embeddings and overrides
        | 0x2060..=0x2064            // word joiner, invisible operators
        | 0x2066..=0x206F            // isolates, deprecated format characters
        | 0x3164                     // Hangul filler
        | 0xFEFF                     // byte order mark, zero-width no-break space
        | 0xFFA0                     // halfwidth Hangul filler
        | 0xFFF9..=0xFFFB            // interlinear annotation
        | 0x110BD | 0x110CD
        | 0x13430..=0x1343F
        | 0x1BCA0..=0x1BCA3
        | 0x1D173..=0x1D17A
        | 0xE0001 | 0xE0020..=0xE007F // tags
    )
}

/// Whether `c` is a control character: C0 (with tab and line feed), DEL, C1.
pub fn is_control(c: char) -> bool {
    c.is_control()
}

fn escape_into(out: &mut String, c: char) {
    use std::fmt::Write as _;
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        _ => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
}

/// `text` as it may be printed on a terminal: every control character
/// (line breaks too) and every format character shown as a visible escape
/// (`\n`, `\t`, `\u{1b}`, `\u{202e}`); everything else as it is.
///
/// Every print of text the host did not write itself goes through this (or
/// [`terminal_lines`]): `tests/all/tidy.rs` reads the command line's source
/// for prints that do not.
pub fn terminal(text: &str) -> Cow<'_, str> {
    terminal_with(text, false)
}

/// Like [`terminal`], but line breaks stay line breaks: for text shown as
/// lines of its own, which the host frames (each line indented under the
/// host's heading, so a line cannot pass for the host's).
pub fn terminal_lines(text: &str) -> Cow<'_, str> {
    terminal_with(text, true)
}

fn terminal_with(text: &str, keep_lines: bool) -> Cow<'_, str> {
    escape_where(text, |c| (is_control(c) && !(keep_lines && c == '\n')) || is_format(c))
}

/// `text` with every character `shown` picks written as a visible escape;
/// borrowed as it is when there is none.
fn escape_where(text: &str, shown: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&shown) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if shown(c) {
            escape_into(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` with every format character shown as a visible escape
/// (`\u{202e}`) and everything else as it is: for text whose every
/// character matters to the person (a change's diff: a bidi override in
/// source code reorders what they read, "Trojan Source"), where removing one
/// would misstate what is approved.
pub fn show_format(text: &str) -> Cow<'_, str> {
    escape_where(text, is_format)
}

/// The character shown where a control character was, on a page.
pub const REPLACEMENT: char = '\u{FFFD}';

/// `text` as a page or card shows it: format characters removed, other
/// control characters but line feed and tab shown as U+FFFD, carriage
/// returns dropped, trailing blanks of each line removed, and any run of
/// blank lines collapsed into one — so a long stretch of empty lines cannot
/// push what follows out of sight.
pub fn for_person(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank_run = 0usize;
    for line in text.split('\n') {
        let mut cleaned = String::with_capacity(line.len());
        for c in line.chars() {
            if is_format(c) || c == '\r' {
                continue;
            }
            if is_control(c) && c != '\t' {
                cleaned.push(REPLACEMENT);
            } else {
                cleaned.push(c);
            }
        }
        let cleaned = cleaned.trim_end();
        if cleaned.is_empty() {
            blank_run += 1;
            if blank_run > 1 {
                continue;
            }
        } else {
            blank_run = 0;
        }
        if !out.is_empty() || !cleaned.is_empty() {
            out.push_str(cleaned);
            out.push('\n');
        }
    }
    // No trailing blank lines, no final line break.
    let end = out.trim_end().len();
    out.truncate(end);
    out
}

/// One line of text for a page: [`for_person`] with every line break
/// shown as a space.
pub fn one_line(text: &str) -> String {
    for_person(text).split('\n').filter(|l| !l.trim().is_empty()).collect::<Vec<_>>().join(" ")
}

/// Checks that `text` (what `field` holds) is at most `max` characters:
/// the error is the sentence to refuse with, naming the field, its length and
/// the limit.
pub fn within(field: &str, text: &str, max: usize) -> Result<(), String> {
    let n = text.chars().count();
    if n > max {
        return Err(format!("the {field} is {n} characters long; at most {max} are allowed: say it shorter"));
    }
    Ok(())
}

/// At most `max` characters of `text`, with `…` where it was cut.
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => Cow::Borrowed(text),
        Some((at, _)) => Cow::Owned(format!("{}…", &text[..at])),
    }
}

/// Where [`write_out`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Writes `text` (and a line break when `line`) to `stream`, through
/// [`terminal_lines`], and flushes. The one place the host writes to its
/// standard output or error; `say!`/`tell!` call it.
pub fn write_out(stream: Stream, text: &str, line: bool) -> std::io::Result<()> {
    match stream {
        Stream::Stdout => write_escaped(std::io::stdout().lock(), text, line),
        Stream::Stderr => write_escaped(std::io::stderr().lock(), text, line),
    }
}

/// Writes `text` through [`terminal_lines`] to `w`, a line break after it
/// when `line`, and flushes.
fn write_escaped(mut w: impl std::io::Write, text: &str, line: bool) -> std::io::Result<()> {
    w.write_all(terminal_lines(text).as_bytes())?;
    if line {
        w.write_all(b"\n")?;
    }
    w.flush()
}

/// Serialised JSON as it may be printed on a terminal: every control and
/// format character (which JSON's own escaping leaves raw, but for C0) is
/// written as a JSON `\uXXXX` escape, so the text still parses to the same
/// value and shows nothing invisible.
pub fn json_for_terminal(json: &str) -> Cow<'_, str> {
    let shown = |c: char| c != '\n' && (is_control(c) || is_format(c));
    if !json.chars().any(shown) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if shown(c) {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                use std::fmt::Write as _;
                let _ = write!(out, "\\u{:04x}", u);
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A line on standard output, escaped ([`write_out`]): the host's `println!`.
#[macro_export]
macro_rules! say {
    () => {{ let _ = $crate::elsewhere::text::write_out($crate::elsewhere::text::Stream::Stdout, "", true); }};
    ($($t:tt)*) => {{ let _ = $crate::elsewhere::text::write_out($crate::elsewhere::text::Stream::Stdout, &format!($($t)*), true); }};
}

/// Text on standard output with no line break, escaped: the host's `print!`.
#[macro_export]
macro_rules! say_inline {
    ($($t:tt)*) => {{ let _ = $crate::elsewhere::text::write_out($crate::elsewhere::text::Stream::Stdout, &format!($($t)*), false); }};
}

/// A line on standard error, escaped ([`write_out`]): the host's `eprintln!`.
#[macro_export]
macro_rules! tell {
    ($($t:tt)*) => {{ let _ = $crate::elsewhere::text::write_out($crate::elsewhere::text::Stream::Stderr, &format!($($t)*), true); }};
}

/// Text on standard error with no line break, escaped: the host's `eprint!`.
#[macro_export]
macro_rules! tell_inline {
    ($($t:tt)*) => {{ let _ = $crate::elsewhere::text::write_out($crate::elsewhere::text::Stream::Stderr, &format!($($t)*), false); }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_writes_what_a_terminal_may_see() {
        let mut out = Vec::new();
        write_escaped(&mut out, "grant \u{1b}[2Kspawn:git\u{202e}\nnext", true).unwrap();
        write_escaped(&mut out, "more", false).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "grant \\u{1b}[2Kspawn:git\\u{202e}\nnext\nmore");
    }

    #[test]
    fn json_on_a_terminal_parses_to_the_same_value_and_shows_nothing_invisible() {
        let value = serde_json::json!({ "grant": "spawn:git\u{1b}[2K\u{202e}x\u{9b}\u{1f600}\u{e0041}", "n": 1 });
        let raw = serde_json::to_string_pretty(&value).unwrap();
        let shown = json_for_terminal(&raw);
        assert!(!shown.chars().any(|c| (c.is_control() && c != '\n') || is_format(c)), "{shown}");
        assert!(shown.contains("\\u202e") && shown.contains("\\u009b") && shown.contains("\\udb40\\udc41"), "{shown}");
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back, value);
        assert!(matches!(json_for_terminal("{\"a\": \"é\"}"), Cow::Borrowed(_)));
        // One line (`--json` unpretty): a C1 control alone is escaped too.
        assert_eq!(json_for_terminal("[\"\u{9b}2J\"]"), "[\"\\u009b2J\"]");
        assert_eq!(json_for_terminal("\"a\nb\""), "\"a\nb\"", "a line break stays");
    }

    #[test]
    fn a_terminal_sees_every_escape_sequence_as_text() {
        let hostile = "ok\u{1b}[2K\u{1b}]0;title\u{7}\r\u{9b}31m\u{7f}";
        let shown = terminal(hostile);
        assert!(!shown.chars().any(|c| c.is_control()), "{shown:?}");
        assert_eq!(shown, "ok\\u{1b}[2K\\u{1b}]0;title\\u{7}\\r\\u{9b}31m\\u{7f}");
    }

    #[test]
    fn a_terminal_sees_bidi_overrides_and_zero_width_characters() {
        let shown = terminal("git\u{202e}hs/nib/\u{202c} and\u{200b}\u{2066}x\u{2069}\u{feff}\u{e0041}");
        assert_eq!(shown, "git\\u{202e}hs/nib/\\u{202c} and\\u{200b}\\u{2066}x\\u{2069}\\u{feff}\\u{e0041}");
    }

    #[test]
    fn a_diff_shows_format_characters_and_keeps_everything_else() {
        assert_eq!(show_format("if a\u{202e} {\n\tb\u{200b}\n}"), "if a\\u{202e} {\n\tb\\u{200b}\n}");
        assert!(matches!(show_format("plain\n\ttext"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_terminal_line_break_is_shown_unless_lines_are_kept() {
        assert_eq!(terminal("a\nb\tc"), "a\\nb\\tc");
        assert_eq!(terminal_lines("a\nb\tc\u{1b}"), "a\nb\\tc\\u{1b}");
    }

    #[test]
    fn plain_text_is_borrowed_as_it_is() {
        for s in ["", "notes.add", "Grüße, 東京 — naïve café ✓", "a \"quoted\" path/with spaces"] {
            assert!(matches!(terminal(s), Cow::Borrowed(_)), "{s}");
            assert!(matches!(terminal_lines(s), Cow::Borrowed(_)), "{s}");
        }
    }

    #[test]
    fn a_person_sees_no_invisible_characters_and_no_runs_of_blank_lines() {
        let forged = format!("Do the thing\u{202e}evil\n{}summary: fake\r\n\n\n\u{200b}\n\u{7}x", "\n".repeat(8000));
        let shown = for_person(&forged);
        assert_eq!(shown, "Do the thingevil\n\nsummary: fake\n\n\u{fffd}x");
        assert!(!shown.chars().any(is_format));
        assert_eq!(for_person("\n\n\n  \nhello\n\n\n"), "hello");
        assert_eq!(one_line("a\n\n b\u{2067}"), "a  b");
    }

    #[test]
    fn lengths_are_counted_in_characters_and_refused_with_a_sentence() {
        assert!(within("request", &"é".repeat(2000), 2000).is_ok());
        let e = within("request", &"é".repeat(2001), 2000).unwrap_err();
        assert_eq!(e, "the request is 2001 characters long; at most 2000 are allowed: say it shorter");
        assert_eq!(cut("abcdef", 3), "abc…");
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("ééé", 2), "éé…");
    }

    #[test]
    fn the_format_characters_are_only_format_characters() {
        for c in ['a', ' ', '\u{e9}', '\u{4e2d}', '\u{1f600}', '-', '\u{2014}', '\u{fffd}', '\u{fe0f}', '\u{2065}'] {
            assert!(!is_format(c), "{c:?}");
        }
        for c in ['\u{202a}', '\u{202e}', '\u{2066}', '\u{2069}', '\u{200b}', '\u{200d}', '\u{2060}', '\u{feff}'] {
            assert!(is_format(c), "{c:?}");
        }
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn nothing_invisible_or_controlling_reaches_a_terminal(s in "\\PC*|[\\x00-\\x1f\\x7f-\\x9f\u{200b}-\u{200f}\u{202a}-\u{202e}\u{2066}-\u{2069}a]*") {
                let shown = terminal(&s);
                prop_assert!(!shown.chars().any(|c| c.is_control() || is_format(c)));
                let lines = terminal_lines(&s);
                prop_assert!(!lines.chars().any(|c| (c.is_control() && c != '\n') || is_format(c)));
                let page = for_person(&s);
                prop_assert!(!page.chars().any(|c| (c.is_control() && c != '\n' && c != '\t') || is_format(c)));
                prop_assert!(!page.contains("\n\n\n"));
            }
        }
    }
}
