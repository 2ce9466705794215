//! A key sent back in another form than its bytes (issue 72, rule 4): the
//! encodings services use, read by one small decoder ([`unit`]), and the
//! runs of a key's characters found through it ([`Runs`]) — the whole key,
//! or any part of it [`RUN`] characters long or longer (a request quoted in a
//! cut-short error holds most of a key; the rest is then a guess away).
//!
//! What the decoder reads, each unit standing for one byte: the byte itself;
//! `%XX` in either case; `+` and a space as one (so a key's space matches
//! either); JSON's `\/`, `\"`, `\\` and `\uXXXX`; HTML's `&#NN;`, `&#xNN;`
//! and the named entities of ASCII punctuation. Units may be mixed within
//! one run (`s3cret%2FKEY&#43;1`). What it cannot read — a transform a
//! hostile origin chooses (reversed, interleaved, compressed by hand) — is
//! said in docs/security.md. Base64 is matched as fixed forms by the
//! redactor (`outgoing::Redactor`), not here.
//!
//! This room knows bytes only: no value, no label, no HTTP.

use std::collections::{HashMap, HashSet};

/// The shortest part of a key that is taken out wherever it appears.
pub const RUN: usize = 8;

/// The longest text one unit may take (`&#x0000002F;` is refused past it).
const MAX_UNIT: usize = 12;

/// What a run finder says of the start of a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// No run of a key starts here.
    None,
    /// A run of the key `key` takes the first `len` bytes of the text.
    Run { len: usize, key: usize },
    /// The text ends before it can be told: wait for more.
    Wait,
}

/// The byte one unit of `t` stands for and how many bytes of `t` it takes
/// (a space given as `+`); `None` when `t` ends inside what may still be one
/// unit and more may come (`!last`).
pub fn unit(t: &[u8], last: bool) -> Option<(u8, usize)> {
    let first = *t.first()?;
    let plain = |b: u8| Some((if b == b' ' { b'+' } else { b }, 1));
    let hex = |s: &[u8]| -> Option<u32> {
        (!s.is_empty() && s.len() <= 8 && s.iter().all(u8::is_ascii_hexdigit))
            .then(|| u32::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok())
            .flatten()
    };
    let byte = |code: u32| if code < 0x80 { if code == 0x20 { b'+' } else { code as u8 } } else { 0xFF };
    match first {
        b'%' => {
            if t.len() >= 3
                && let Some(v) = hex(&t[1..3])
            {
                return Some((byte(v), 3));
            }
            if !last && t.len() < 3 && t[1..].iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            plain(b'%')
        }
        b'\\' => match t.get(1) {
            None if !last => None,
            Some(c @ (b'/' | b'"' | b'\\')) => Some((*c, 2)),
            Some(b'u') => {
                if t.len() >= 6
                    && let Some(v) = hex(&t[2..6])
                {
                    return Some((byte(v), 6));
                }
                if !last && t.len() < 6 && t[2..].iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                plain(b'\\')
            }
            _ => plain(b'\\'),
        },
        b'&' => {
            let window = &t[..t.len().min(MAX_UNIT)];
            match window.iter().position(|&b| b == b';') {
                Some(end) => match entity(&t[1..end]) {
                    Some(b) => Some((byte(b as u32), end + 1)),
                    None => plain(b'&'),
                },
                None if !last
                    && t.len() < MAX_UNIT
                    && t[1..].iter().all(|b| b.is_ascii_alphanumeric() || *b == b'#') =>
                {
                    None
                }
                None => plain(b'&'),
            }
        }
        b => plain(b),
    }
}

/// The ASCII byte an HTML character reference between `&` and `;` stands
/// for: `#NN`, `#xNN`, or a named entity of ASCII punctuation.
fn entity(name: &[u8]) -> Option<u8> {
    if let Some(num) = name.strip_prefix(b"#") {
        let (digits, radix) = match num.first() {
            Some(b'x' | b'X') => (&num[1..], 16),
            _ => (num, 10),
        };
        let code = u32::from_str_radix(std::str::from_utf8(digits).ok()?, radix).ok()?;
        return u8::try_from(code).ok().filter(u8::is_ascii);
    }
    let named: &[(&[u8], u8)] = &[
        (b"amp", b'&'),
        (b"lt", b'<'),
        (b"gt", b'>'),
        (b"quot", b'"'),
        (b"apos", b'\''),
        (b"sol", b'/'),
        (b"bsol", b'\\'),
        (b"plus", b'+'),
        (b"equals", b'='),
        (b"colon", b':'),
        (b"semi", b';'),
        (b"num", b'#'),
        (b"percnt", b'%'),
        (b"excl", b'!'),
        (b"quest", b'?'),
        (b"commat", b'@'),
        (b"lowbar", b'_'),
        (b"period", b'.'),
        (b"comma", b','),
        (b"dollar", b'$'),
        (b"lpar", b'('),
        (b"rpar", b')'),
        (b"ast", b'*'),
        (b"lsqb", b'['),
        (b"rsqb", b']'),
        (b"lcub", b'{'),
        (b"rcub", b'}'),
        (b"verbar", b'|'),
        (b"grave", b'`'),
        (b"Hat", b'^'),
        (b"hyphen", b'-'),
    ];
    named.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

/// A short byte string as one number: its bytes and its length.
fn packed(bytes: &[u8]) -> u64 {
    debug_assert!(bytes.len() <= 7);
    bytes.iter().fold(bytes.len() as u64, |n, &b| (n << 8) | b as u64)
}

/// The runs of some keys' characters, found through [`unit`].
#[derive(Debug, Default)]
pub struct Runs {
    /// Each key as the decoder gives it back (a space as `+`).
    keys: Vec<Vec<u8>>,
    /// Every [`RUN`] bytes of a key: where they are (key, offset).
    grams: HashMap<[u8; RUN], Vec<(usize, usize)>>,
    /// Every shorter part of a key ([`packed`]): what may still become a run.
    parts: HashSet<u64>,
}

impl Runs {
    /// The runs of `keys` (each at least [`RUN`] bytes; a shorter one is
    /// matched only whole, by the redactor's own forms).
    pub fn new<'a>(keys: impl IntoIterator<Item = &'a [u8]>) -> Runs {
        let mut runs = Runs::default();
        for key in keys {
            let key: Vec<u8> = key.iter().map(|&b| if b == b' ' { b'+' } else { b }).collect();
            if key.len() < RUN {
                runs.keys.push(Vec::new());
                continue;
            }
            let k = runs.keys.len();
            for (at, gram) in key.windows(RUN).enumerate() {
                runs.grams.entry(gram.try_into().expect("RUN bytes")).or_default().push((k, at));
            }
            for len in 1..RUN {
                for part in key.windows(len) {
                    runs.parts.insert(packed(part));
                }
            }
            runs.keys.push(key);
        }
        runs
    }

    /// Whether a run of a key starts at the start of `t`, the longest one.
    pub fn at(&self, t: &[u8], last: bool) -> Found {
        let mut gram = [0u8; RUN];
        let mut pos = 0;
        for n in 0..RUN {
            match unit(&t[pos..], last) {
                Some((b, len)) => {
                    gram[n] = b;
                    pos += len;
                }
                // The text ends (or may go on inside a unit) with what so far
                // is a part of a key: it may still become a run.
                None if n > 0 && !last && pos == t.len() => return Found::Wait,
                None if !last && pos < t.len() => return Found::Wait,
                None => return Found::None,
            }
            if n + 1 < RUN && !self.parts.contains(&packed(&gram[..=n])) {
                return Found::None;
            }
        }
        let Some(places) = self.grams.get(&gram) else { return Found::None };
        let mut best: Option<(usize, usize)> = None;
        for &(key, at) in places {
            let whole = &self.keys[key];
            let (mut end, mut k) = (pos, at + RUN);
            while k < whole.len() {
                match unit(&t[end..], last) {
                    Some((b, len)) if b == whole[k] => {
                        end += len;
                        k += 1;
                    }
                    Some(_) => break,
                    None if last => break,
                    // More may come that goes on with the key.
                    None => return Found::Wait,
                }
            }
            if best.is_none_or(|(e, _)| end > e) {
                best = Some((end, key));
            }
        }
        match best {
            Some((len, key)) => Found::Run { len, key },
            None => Found::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(t: &str) -> Vec<u8> {
        let (mut out, mut t) = (Vec::new(), t.as_bytes());
        while let Some((b, len)) = unit(t, true) {
            out.push(b);
            t = &t[len..];
        }
        out
    }

    #[test]
    fn each_encoding_a_service_uses_is_read_as_the_byte_it_stands_for() {
        assert_eq!(decoded("a%2Fb%2f c+d"), b"a/b/+c+d");
        assert_eq!(decoded(r#"a\/b\"c\\d\u0041\u002b"#), b"a/b\"c\\dA+");
        assert_eq!(decoded("&#43;&#x2B;&#X2b;&amp;&sol;&Hat;&#0047;"), b"+++&/^/");
        // Not units: each byte as it is.
        assert_eq!(decoded("%zz&nope;&#9999;\\q\\u12"), b"%zz&nope;&#9999;\\q\\u12");
        assert_eq!(decoded("\\u00e9"), [0xFF], "not ASCII: never a key's byte");
        // What may still be one unit waits for more, unless it is the end.
        for t in ["%", "%2", "\\", "\\u00", "&#x2", "&am"] {
            assert_eq!(unit(t.as_bytes(), false), None, "{t}");
            assert!(unit(t.as_bytes(), true).is_some(), "{t}");
        }
        assert_eq!(unit(b"%2", true), Some((b'%', 1)));
    }

    #[test]
    fn a_run_of_eight_or_more_of_a_key_s_characters_is_found_in_any_encoding() {
        let runs = Runs::new([&b"sk-test/7Hq2Zr9+vXw4Lm8Pn"[..]]);
        let found = |t: &str| runs.at(t.as_bytes(), true);
        assert_eq!(found("sk-test/7Hq2Zr9+vXw4Lm8Pn!"), Found::Run { len: 25, key: 0 });
        assert_eq!(found("7Hq2Zr9+vX and more"), Found::Run { len: 10, key: 0 });
        assert_eq!(found("sk-test%2F7Hq2Zr9%2BvXw4Lm8Pn"), Found::Run { len: 29, key: 0 });
        assert_eq!(found(r#"sk-test\/7Hq2Zr9\u002bvXw4Lm8P""#), Found::Run { len: 30, key: 0 });
        assert_eq!(found("sk-test&#47;7Hq2Zr9&plus;vXw"), Found::Run { len: 28, key: 0 });
        assert_eq!(found("sk-test/"), Found::Run { len: 8, key: 0 });
        assert_eq!(found("sk-test"), Found::None, "seven is not a run");
        assert_eq!(found("sk-tesT/7Hq"), Found::None);
        assert_eq!(found("hello world"), Found::None);
        // Cut short: wait, unless it is the end.
        assert_eq!(runs.at(b"sk-te", false), Found::Wait);
        assert_eq!(runs.at(b"sk-test/7H", false), Found::Wait, "it may go on");
        assert_eq!(runs.at(b"sk-test/7Hx", false), Found::Run { len: 10, key: 0 });
        assert_eq!(runs.at(b"sk-test%2", false), Found::Wait);
        assert_eq!(runs.at(b"xy", false), Found::None, "no part of a key");
        assert!(Runs::new([&b"short"[..]]).grams.is_empty(), "a key under 8 is matched whole only");
    }
}
