//! One sanitiser for text that came from an app or a build and is shown to the
//! person or written to a log: guest log lines, the guest's stderr in a trap
//! message, an app's error messages, cargo's output. It removes what looks like
//! a secret, so a key an app mishandles does not land in a terminal, a log file
//! or the panel.
//!
//! What it removes, each replaced by `[redacted]`: bearer tokens and
//! `Authorization` values; the value of a secret-looking assignment
//! (`token = "…"`, `password=…`, `api_key: …`: a key ending in token,
//! password, secret, api key, access key or private key); API keys of
//! well-known shapes (`sk-…`, crates.io's `cio…`, `ghp_…` and the other GitHub
//! prefixes, `github_pat_…`, GitLab's `glpat-…`, Slack's `xox?-…`, AWS access
//! key ids and `aws_secret_access_key = …`); JSON Web Tokens; the password of
//! a URL (`scheme://user:password@`); PEM private-key blocks (across lines,
//! with [`Lines`] for text that comes a line at a time); and long runs of hex
//! (40+) or base64 (40+, with upper and lower case and digits). Text the host
//! writes itself (release ids, arguments hashes) never passes through it.
//!
//! It is the second line, not the first: a secret spelled out with spaces
//! between its letters passes it. What must not leak is kept from the
//! program in the first place (a build's environment and reads, `build`).

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::{Captures, Regex};

/// What stands where a secret was.
pub const REDACTED: &str = "[redacted]";

struct Rule {
    re: Regex,
    /// Keeps the captured group 1 (a key name, a scheme and user) before the mark.
    keep_prefix: bool,
}

fn rule(pattern: &str, keep_prefix: bool) -> Rule {
    Rule { re: Regex::new(pattern).expect("a valid pattern"), keep_prefix }
}

/// Every pattern of [`RULES`] and [`BASE64`] in one set, for one look at a
/// text that holds none of them (the common case: a guest's ordinary log
/// line). Sixteen looks took 0.3 µs for a line of ASCII and 5–12 µs for a
/// line with one letter outside it (a Unicode `\b` makes the regex crate
/// leave its fast engine), measured; the set takes 0.04–0.25 µs.
///
/// The set's patterns are the rules' without their `\b`: taking away an
/// assertion that matches no character can only let a pattern match more
/// texts, never fewer, so the set matches every text a rule matches. (An
/// ASCII `\b` in its place was tried and was wrong: under `(?i)` the rules'
/// `s` matches `ſ` and their `k` the Kelvin sign, letters that are words to
/// Unicode and not to ASCII, so `ſecret=hunter22` slipped through.) So when
/// the set finds nothing, no rule would replace anything, and every rule
/// would see the text as it came: the set's "none" is the rules' "none"
/// (`the_one_look_misses_nothing_the_rules_find` tries it). Every `\b` in
/// the patterns is a word boundary (none is an escaped backslash before a
/// `b`; a pattern that broke this would fail to compile here, and every
/// test of `secrets` with it).
static ANY: LazyLock<regex::RegexSet> = LazyLock::new(|| {
    let patterns =
        RULES.iter().map(|r| r.re.as_str()).chain(std::iter::once(BASE64.as_str())).map(|p| p.replace(r"\b", ""));
    regex::RegexSet::new(patterns).expect("valid patterns")
});

static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    vec![
        // PEM private keys, the whole block (or to the end when it is cut).
        rule(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)", false),
        // `Authorization: Basic abc`, `authorization=xyz`, in headers, JSON or logs.
        rule(r#"(?i)(\b(?:proxy-)?authorization"?\s*[:=]\s*"?)(?:[a-z]+\s+)?[^\s",;]+"#, true),
        rule(r"(?i)(\bbearer\s+)[a-z0-9\-._~+/]+=*", true),
        // `token = "…"`, `password=…`, `api_key: …`: the key is kept.
        rule(
            r#"(?i)(\b[a-z0-9_.\-]*(?:token|password|passwd|secret|api[_\-]?key|apikey|access[_\-]?key|private[_\-]?key)"?\s*[:=]\s*"?)[^\s",;]{4,}"#,
            true,
        ),
        // A JSON Web Token: base64url JSON header and payload, signature.
        rule(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}", false),
        // crates.io: `cio` and 32 letters and digits.
        rule(r"\bcio[A-Za-z0-9]{32}\b", false),
        rule(r"\bglpat-[A-Za-z0-9_\-]{20,}", false),
        rule(r#"(?i)(\baws_secret_access_key"?\s*[:=]\s*"?)[^\s",;]+"#, true),
        rule(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", false),
        rule(r"\bsk-[A-Za-z0-9_\-]{16,}", false),
        rule(r"\bgh[pousr]_[A-Za-z0-9]{20,}", false),
        rule(r"\bgithub_pat_[A-Za-z0-9_]{20,}", false),
        rule(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}", false),
        // scheme://user:password@host
        rule(r"(?i)(\b[a-z][a-z0-9+.\-]*://[^/\s:@]+:)[^@\s/]+@", true),
        rule(r"\b[0-9a-fA-F]{40,}\b", false),
    ]
});

/// A run of base64 long enough to be a key (checked for mixed case and digits
/// separately: the regex crate has no look-ahead).
static BASE64: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"[A-Za-z0-9+/_\-]{40,}={0,2}").expect("valid"));

/// Text that comes a line at a time (a build's output): [`secrets`] on each
/// line, and every line of a PEM private-key block, from its `BEGIN` line to
/// its `END` line, replaced by one mark.
#[derive(Debug, Default)]
pub struct Lines {
    in_key: bool,
}

static PEM_BEGIN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----").expect("valid"));
static PEM_END: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"-----END [A-Z0-9 ]*PRIVATE KEY-----").expect("valid"));

impl Lines {
    /// The next line, sanitised; `None` for a line inside a key block.
    pub fn line(&mut self, line: &str) -> Option<String> {
        if self.in_key {
            if PEM_END.is_match(line) {
                self.in_key = false;
            }
            return None;
        }
        if let Some(m) = PEM_BEGIN.find(line)
            && !PEM_END.is_match(&line[m.end()..])
        {
            self.in_key = true;
            return Some(format!("{}{REDACTED}", secrets(&line[..m.start()])));
        }
        Some(secrets(line).into_owned())
    }
}

/// `text` with everything that looks like a secret replaced by [`REDACTED`].
pub fn secrets(text: &str) -> Cow<'_, str> {
    let mut out: Cow<'_, str> = Cow::Borrowed(text);
    if !ANY.is_match(text) {
        return out;
    }
    for r in RULES.iter() {
        if r.re.is_match(&out) {
            let replaced = r.re.replace_all(&out, |c: &Captures<'_>| {
                let keep = if r.keep_prefix { c.get(1).map_or("", |m| m.as_str()) } else { "" };
                let at_sign =
                    if c.get(0).is_some_and(|m| m.as_str().ends_with('@')) && r.keep_prefix { "@" } else { "" };
                format!("{keep}{REDACTED}{at_sign}")
            });
            out = Cow::Owned(replaced.into_owned());
        }
    }
    if BASE64.is_match(&out) {
        let replaced = BASE64.replace_all(&out, |c: &Captures<'_>| {
            let s = c.get(0).map_or("", |m| m.as_str());
            let mixed = s.bytes().any(|b| b.is_ascii_uppercase())
                && s.bytes().any(|b| b.is_ascii_lowercase())
                && s.bytes().any(|b| b.is_ascii_digit());
            if mixed { REDACTED.to_string() } else { s.to_string() }
        });
        out = Cow::Owned(replaced.into_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(s: &str) -> String {
        secrets(s).into_owned()
    }

    /// Whether any rule (or the base64 look) matches `text` as it came.
    fn a_rule_matches(text: &str) -> bool {
        RULES.iter().any(|r| r.re.is_match(text)) || BASE64.is_match(text)
    }

    /// Pieces of texts near the rules' edges: letters in and outside ASCII
    /// (Unicode word characters and not), the characters a `\b` stands
    /// beside, keys, prefixes and values of secrets.
    const PIECES: &[&str] = &[
        "é",
        "ſ",
        "\u{212a}",
        "—",
        "ü",
        " ",
        ".",
        "-",
        "_",
        "=",
        ":",
        "\"",
        "@",
        "/",
        "://",
        "token",
        "password",
        "secret",
        "ecret",
        "api_key",
        "Bearer ",
        "authorization",
        "sk-",
        "ghp_",
        "glpat-",
        "xoxb-",
        "cio",
        "AKIA",
        "eyJ",
        "aws_secret_access_key",
        "abcdefgh",
        "ABCDEFGH",
        "0123456789",
        "deadbeef",
        "+/",
        "==",
        "-----BEGIN RSA PRIVATE KEY-----",
        "x",
        "Z",
        "9",
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn the_one_look_misses_nothing_the_rules_find(
            picks in proptest::collection::vec((0..PIECES.len(), 1usize..6), 0..24)
        ) {
            let text: String = picks.iter().map(|&(i, n)| PIECES[i].repeat(n)).collect();
            if a_rule_matches(&text) {
                proptest::prop_assert!(ANY.is_match(&text), "the set missed {text:?}");
            }
        }
    }

    #[test]
    fn a_line_with_letters_outside_ascii_is_sanitised_as_before() {
        // The set's patterns have no `\b`: where a word boundary decides (a
        // letter outside ASCII before `token`), the set only lets the rules
        // look, and the rules, with Unicode's `\b`, decide.
        assert_eq!(clean("étoken=abcd1234 ok"), "étoken=abcd1234 ok");
        assert_eq!(clean("café token=abcd1234 ok"), "café token=[redacted] ok");
        assert_eq!(clean("é.password=hunter22"), "é.password=[redacted]");
        assert_eq!(clean("naïve note — nothing secret"), "naïve note — nothing secret");
        assert!(matches!(secrets("an ordinary line: added note 42"), Cow::Borrowed(_)));
    }

    #[test]
    fn letters_that_fold_into_a_key_or_a_scheme_are_not_let_through() {
        // Under `(?i)` the rules' `s` matches `ſ` and `k` the Kelvin sign,
        // word characters to Unicode and not to ASCII: the one look must
        // still send these texts to the rules.
        assert_eq!(clean("ſecret=hunter22"), "ſecret=[redacted]");
        assert_eq!(clean(" ſecret: hunter22"), " ſecret: [redacted]");
        assert_eq!(clean("\u{212a}://user:hunter2@host"), "\u{212a}://user:[redacted]@host");
        assert_eq!(clean("ſ://u:pw@h"), "ſ://u:[redacted]@h");
    }

    #[test]
    fn bearer_tokens_and_authorization_values() {
        assert_eq!(clean("sent Bearer abc.def-ghi_123= to it"), "sent Bearer [redacted] to it");
        assert_eq!(clean("Authorization: Basic dXNlcjpwYXNz"), "Authorization: [redacted]");
        assert_eq!(clean(r#"{"authorization":"token123"}"#), r#"{"authorization":"[redacted]"}"#);
        assert_eq!(clean("proxy-authorization=xyz;next"), "proxy-authorization=[redacted];next");
    }

    #[test]
    fn api_keys_of_known_shapes() {
        assert_eq!(clean("key sk-proj-AbCdEf0123456789xyz here"), "key [redacted] here");
        assert_eq!(clean("ghp_0123456789abcdefghijABCDEFGHIJ"), "[redacted]");
        assert_eq!(clean("github_pat_11ABCDEFG0123456789_abcdefghij"), "[redacted]");
        assert_eq!(clean("slack xoxb-1234567890-abcdefghij"), "slack [redacted]");
        assert_eq!(clean("id AKIAIOSFODNN7EXAMPLE."), "id [redacted].");
        assert_eq!(clean("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG"), "aws_secret_access_key = [redacted]");
    }

    #[test]
    fn passwords_in_urls() {
        assert_eq!(
            clean("fetching https://ann:hunter2@example.com/x"),
            "fetching https://ann:[redacted]@example.com/x"
        );
        assert_eq!(clean("postgres://u:p%40ss@db:5432/app"), "postgres://u:[redacted]@db:5432/app");
        assert_eq!(clean("https://example.com:8443/path"), "https://example.com:8443/path", "a port is not a password");
    }

    #[test]
    fn private_key_blocks() {
        let pem = "before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAKC\n-----END RSA PRIVATE KEY-----\nafter";
        assert_eq!(clean(pem), "before\n[redacted]\nafter");
        assert_eq!(clean("x -----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn"), "x [redacted]", "a cut block too");
    }

    #[test]
    fn long_hex_and_base64_runs() {
        let hex = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(clean(&format!("token {hex}")), "token [redacted]");
        let b64 = "QWxhZGRpbjpvcGVuIHNlc2FtZQ0123456789abcdefXYZ";
        assert_eq!(clean(&format!("secret={b64}")), "secret=[redacted]");
    }

    #[test]
    fn secret_looking_assignments_keep_their_key() {
        assert_eq!(clean(r#"token = "abc123def""#), r#"token = "[redacted]""#);
        assert_eq!(clean("password=hunter22"), "password=[redacted]");
        assert_eq!(clean("api_key: k-1234567"), "api_key: [redacted]");
        assert_eq!(clean("GITHUB_TOKEN=xyzw9876"), "GITHUB_TOKEN=[redacted]");
        assert_eq!(clean(r#"{"client_secret":"s3cr3t"}"#), r#"{"client_secret":"[redacted]"}"#);
        // Near misses: a key that only contains the word, a short value.
        assert_eq!(clean("max_tokens = 1000000"), "max_tokens = 1000000");
        assert_eq!(clean("token_url = https://example.com"), "token_url = https://example.com");
        assert_eq!(clean("password: abc"), "password: abc");
        assert_eq!(clean("the token expired"), "the token expired");
    }

    #[test]
    fn crates_io_gitlab_and_jwt_tokens() {
        let cio = format!("cio{}", "aB3".repeat(10) + "xy");
        assert_eq!(cio.len(), 35);
        assert_eq!(clean(&format!("using {cio} now")), "using [redacted] now");
        let short = &cio[..34];
        assert_eq!(clean(&format!("using {short} now")), format!("using {short} now"), "34 characters are not a token");
        assert_eq!(clean("glpat-abcdefghij0123456789"), "[redacted]");
        assert_eq!(clean("glpat-short"), "glpat-short");
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        assert_eq!(clean(&format!("jwt {jwt}")), "jwt [redacted]");
        assert_eq!(clean("eyJhbGciOiJIUzI1NiJ9 alone"), "eyJhbGciOiJIUzI1NiJ9 alone", "a header alone");
    }

    #[test]
    fn a_key_block_that_comes_line_by_line_is_removed_whole() {
        let mut l = Lines::default();
        let out: Vec<Option<String>> = [
            "warning: read it",
            "x -----BEGIN OPENSSH PRIVATE KEY-----",
            "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU",
            "AAAA",
            "-----END OPENSSH PRIVATE KEY-----",
            "after",
        ]
        .iter()
        .map(|line| l.line(line))
        .collect();
        assert_eq!(
            out,
            [Some("warning: read it".into()), Some("x [redacted]".into()), None, None, None, Some("after".into())]
        );
        let mut one = Lines::default();
        assert_eq!(
            one.line("-----BEGIN RSA PRIVATE KEY-----abc-----END RSA PRIVATE KEY----- ok").as_deref(),
            Some("[redacted] ok"),
            "a block on one line ends on that line"
        );
        assert_eq!(one.line("next").as_deref(), Some("next"));
    }

    #[test]
    fn ordinary_text_is_left_as_it_is() {
        for s in [
            "added note 42 with 3 tags",
            "the route `notes.add` failed: title is empty",
            "sk-short and ghp_short and xoxb-1",
            "a_very_long_identifier_that_is_all_lowercase_and_underscores",
            "see https://example.com/docs?page=2",
        ] {
            assert_eq!(clean(s), s);
        }
        assert!(matches!(secrets("nothing here"), Cow::Borrowed(_)), "no copy when nothing matches");
    }
}
