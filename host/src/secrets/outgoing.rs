//! A key on its way out and back: [`inject`] puts each value into a request to
//! its very origin, where its binding says; [`Redactor`] takes every value the
//! call was given out of what comes back (status text, headers, a body read
//! in chunks) and out of the app's own words (log lines, answers, errors).
//!
//! What this cannot catch: a service that sends the key back encoded some
//! other way than as its bytes or its percent-encoding (base64, reversed, one
//! character at a time). A key is for an origin the person trusts.

use std::borrow::Cow;
use std::sync::Arc;

use super::{Given, Place, echo};
use crate::caps::network::{KeyHands, KeyStream};

/// A call's keys in the network filter's hands (`caps::network::KeyHands`).
pub struct Keys {
    given: Vec<Given>,
    redactor: Arc<Redactor>,
}

impl Keys {
    pub fn new(given: Vec<Given>) -> Keys {
        let redactor = Arc::new(Redactor::new(&given));
        Keys { given, redactor }
    }
}

impl KeyHands for Keys {
    fn is_empty(&self) -> bool {
        self.given.is_empty()
    }

    fn add(&self, head: &mut http::request::Parts, scheme: &str, host: &str, port: u16) -> Result<Vec<String>, String> {
        let replaced = inject(head, scheme, host, port, &self.given)?;
        Ok(replaced
            .into_iter()
            .map(|r| format!("the host put the key {} in {}, replacing what the app put there", r.name, r.place))
            .collect())
    }

    fn headers(&self, headers: &mut http::HeaderMap) {
        self.redactor.headers(headers);
    }

    fn body(&self) -> Box<dyn KeyStream> {
        Box::new(Stream { redactor: self.redactor.clone(), carry: Vec::new() })
    }

    fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.redactor.text(text)
    }

    fn for_origin(&self, scheme: &str, host: &str, port: u16) -> Option<Arc<dyn KeyHands>> {
        let given: Vec<Given> = self.given.iter().filter(|g| goes_to(g, scheme, host, port)).cloned().collect();
        (!given.is_empty()).then(|| Arc::new(Keys::new(given)) as Arc<dyn KeyHands>)
    }
}

/// Whether the value `g` goes to `scheme://host:port`: its binding's very
/// origin (no wildcard), and a way a key may go (TLS, or this computer).
fn goes_to(g: &Given, scheme: &str, host: &str, port: u16) -> bool {
    g.binding.origin.matches(scheme, host, port)
        && !g.binding.origin.wildcard
        && crate::caps::secret::is_private_way(&g.binding.origin)
}

/// What [`inject`] did that the record should say: the app had put something
/// in a place a key goes, and the host replaced it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replaced {
    pub name: String,
    pub place: String,
}

/// Puts each value of `given` bound to `scheme://host:port` where its
/// binding says, replacing whatever the app put there. `request` is the
/// head that goes out (its URI is its path and query). Values bound elsewhere are not
/// touched: nothing of them goes to another origin.
pub fn inject(
    request: &mut http::request::Parts,
    scheme: &str,
    host: &str,
    port: u16,
    given: &[Given],
) -> Result<Vec<Replaced>, String> {
    let mut replaced = Vec::new();
    for g in given.iter().filter(|g| goes_to(g, scheme, host, port)) {
        match &g.binding.place {
            Place::Header { header, format } => {
                let name = http::HeaderName::from_bytes(header.as_bytes()).map_err(|_| format!("header {header}"))?;
                let value = http::HeaderValue::from_str(&format.replacen("{}", g.value.expose(), 1))
                    .map_err(|_| format!("the key {} cannot go in a header", g.name))?;
                if request.headers.remove(&name).is_some() {
                    replaced.push(Replaced { name: g.name.clone(), place: format!("header {header}") });
                }
                request.headers.insert(name, value);
            }
            Place::Query { query } => {
                let uri = &request.uri;
                let path = uri.path().to_string();
                let mut pairs: Vec<&str> = uri.query().unwrap_or("").split('&').filter(|p| !p.is_empty()).collect();
                let before = pairs.len();
                pairs.retain(|p| decoded(p.split('=').next().unwrap_or("")) != query.as_bytes());
                if pairs.len() != before {
                    replaced.push(Replaced { name: g.name.clone(), place: format!("query parameter {query}") });
                }
                let ours = format!("{query}={}", encoded(g.value.expose(), true));
                pairs.push(&ours);
                let with = format!("{path}?{}", pairs.join("&"));
                request.uri = http::Uri::builder()
                    .path_and_query(with)
                    .build()
                    .map_err(|_| format!("the key {} cannot go in a query", g.name))?;
            }
        }
    }
    Ok(replaced)
}

/// `s` percent-encoded: every byte but the unreserved ones, in uppercase hex
/// (or lowercase).
pub fn encoded(s: &str, upper: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else if upper {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push_str(&format!("%{b:02x}"));
        }
    }
    out
}

/// A query parameter's name percent-decoded (`+` as a space).
fn decoded(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    out
}

/// Takes the values a call was given out of text and bytes: each value, as
/// its bytes and percent-encoded (both cases of hex), becomes
/// `[secret <name>]`.
#[derive(Debug, Default)]
pub struct Redactor {
    /// (the bytes to find, what replaces them), longest first: each value,
    /// its percent-encodings and its base64 forms.
    patterns: Vec<(Vec<u8>, Vec<u8>)>,
    /// Each value (and a Basic header's credentials) in any encoding a
    /// service uses, whole or any run of [`echo::RUN`] of its characters
    /// (issue 72, rule 4).
    runs: echo::Runs,
    /// The label of each of `runs`' keys.
    run_labels: Vec<Vec<u8>>,
}

impl Redactor {
    pub fn new(given: &[Given]) -> Redactor {
        let mut patterns: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut keys: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for g in given {
            let label = format!("[secret {}]", g.name).into_bytes();
            let v = g.value.expose();
            let mut forms = vec![v.to_string(), encoded(v, true), encoded(v, false)];
            forms.extend(base64_forms(v.as_bytes()));
            keys.push((v.as_bytes().to_vec(), label.clone()));
            // A Basic header's value is `user:password` in base64: a service
            // may echo it decoded.
            if let Place::Header { format, .. } = &g.binding.place
                && format.to_ascii_lowercase().starts_with("basic ")
                && let Some(credentials) = basic_credentials(v)
            {
                forms.push(credentials.clone());
                keys.push((credentials.into_bytes(), label.clone()));
            }
            for form in forms {
                if !patterns.iter().any(|(p, _)| *p == form.as_bytes()) {
                    patterns.push((form.into_bytes(), label.clone()));
                }
            }
        }
        patterns.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        let runs = echo::Runs::new(keys.iter().map(|(k, _)| k.as_slice()));
        Redactor { patterns, runs, run_labels: keys.into_iter().map(|(_, l)| l).collect() }
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// `bytes` with every value taken out.
    pub fn bytes<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        if self.is_empty() {
            return Cow::Borrowed(bytes);
        }
        let (out, used) = self.scan(bytes, true);
        debug_assert_eq!(used, bytes.len());
        match out {
            None => Cow::Borrowed(bytes),
            Some(o) => Cow::Owned(o),
        }
    }

    /// `text` with every value taken out.
    pub fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match self.bytes(text.as_bytes()) {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            // A value and its label are ASCII, so what is between stays UTF-8.
            Cow::Owned(o) => Cow::Owned(String::from_utf8_lossy(&o).into_owned()),
        }
    }

    /// Scans `buf`: what it becomes (None: unchanged) and how many bytes of
    /// it were decided. Unless `last`, the bytes at the end that could be the
    /// start of a value are left for the next chunk.
    fn scan(&self, buf: &[u8], last: bool) -> (Option<Vec<u8>>, usize) {
        let mut out: Option<Vec<u8>> = None;
        let mut i = 0;
        while i < buf.len() {
            match self.step(&buf[i..], last) {
                Step::Found { len, label } => {
                    out.get_or_insert_with(|| buf[..i].to_vec()).extend_from_slice(label);
                    i += len;
                }
                Step::Wait => break,
                Step::Byte => {
                    if let Some(o) = out.as_mut() {
                        o.push(buf[i]);
                    }
                    i += 1;
                }
            }
        }
        (out, i)
    }

    /// What starts `rest`: a form of a value (its length and label), what
    /// may still become one when more comes (unless `last`), or a byte.
    fn step(&self, rest: &[u8], last: bool) -> Step<'_> {
        // What may still be a whole form (a longer one than any found here
        // now: a padded base64 form holds a shorter one) waits for the next
        // chunk, so that every cut of a text gives the same.
        if !last && self.patterns.iter().any(|(p, _)| p.len() > rest.len() && p.starts_with(rest)) {
            return Step::Wait;
        }
        if let Some((p, label)) = self.patterns.iter().find(|(p, _)| rest.starts_with(p)) {
            return Step::Found { len: p.len(), label };
        }
        match self.runs.at(rest, last) {
            echo::Found::Run { len, key } => Step::Found { len, label: &self.run_labels[key] },
            echo::Found::Wait => Step::Wait,
            echo::Found::None => Step::Byte,
        }
    }

    /// The name of the first value found in what `read` gives, in any form
    /// the redactor takes out (issue 72, rule 5: a backup's or a package's
    /// parts, checked as they are written); never the value.
    pub fn found_in(&self, mut read: impl std::io::Read) -> std::io::Result<Option<String>> {
        if self.is_empty() {
            return Ok(None);
        }
        let (mut held, mut chunk) = (Vec::new(), vec![0u8; 64 << 10]);
        loop {
            let n = read.read(&mut chunk)?;
            let last = n == 0;
            held.extend_from_slice(&chunk[..n]);
            let mut i = 0;
            while i < held.len() {
                match self.step(&held[i..], last) {
                    Step::Found { label, .. } => {
                        let name = String::from_utf8_lossy(label);
                        let name = name.trim_start_matches("[secret ").trim_end_matches(']');
                        return Ok(Some(name.to_string()));
                    }
                    Step::Wait => break,
                    Step::Byte => i += 1,
                }
            }
            if last {
                return Ok(None);
            }
            held.drain(..i);
        }
    }

    /// The headers of what came back with every value taken out: a header
    /// whose name holds one is dropped, a value holding one is rewritten.
    pub fn headers(&self, headers: &mut http::HeaderMap) {
        if self.is_empty() {
            return;
        }
        let names: Vec<http::HeaderName> = headers.keys().cloned().collect();
        for name in names {
            // A header's name is kept in lowercase: compared so.
            let lower = name.as_str().as_bytes();
            if self.patterns.iter().any(|(p, _)| lower.windows(p.len()).any(|w| w.eq_ignore_ascii_case(p))) {
                headers.remove(&name);
                continue;
            }
            let values: Vec<http::HeaderValue> = headers.get_all(&name).iter().cloned().collect();
            if values.iter().all(|v| matches!(self.bytes(v.as_bytes()), Cow::Borrowed(_))) {
                continue;
            }
            headers.remove(&name);
            for v in values {
                let clean = self.bytes(v.as_bytes()).into_owned();
                if let Ok(v) = http::HeaderValue::from_bytes(&clean) {
                    headers.append(name.clone(), v);
                }
            }
        }
    }
}

/// The base64 forms of `value` that any base64 text holding it holds,
/// standard and URL-safe: the value encoded alone (padded and not), and the
/// characters that only its bytes decide when it starts one or two bytes
/// into a group (after other bytes).
fn base64_forms(value: &[u8]) -> Vec<String> {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
    let mut forms = vec![STANDARD.encode(value)];
    for before in 0..3usize {
        let mut bytes = vec![0u8; before];
        bytes.extend_from_slice(value);
        let text = STANDARD_NO_PAD.encode(&bytes);
        // The characters the bytes before touch, and a last one that the
        // bytes after would change.
        let skip = (before * 8).div_ceil(6);
        let end = if bytes.len() % 3 == 0 { text.len() } else { text.len() - 1 };
        if end > skip + echo::RUN {
            forms.push(text[skip..end].to_string());
        }
    }
    let url: Vec<String> = forms.iter().map(|f| f.replace('+', "-").replace('/', "_")).collect();
    forms.extend(url);
    forms.sort();
    forms.dedup();
    forms
}

/// The `user:password` a Basic header's value stands for, when it is base64
/// of printable ASCII.
fn basic_credentials(value: &str) -> Option<String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(value.trim()).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    (text.len() >= echo::RUN && text.contains(':') && text.bytes().all(|b| (0x20..0x7f).contains(&b))).then_some(text)
}

/// What the redactor finds at one place of a text.
enum Step<'a> {
    /// A form of a value, `len` bytes long, that `label` replaces.
    Found { len: usize, label: &'a [u8] },
    /// What may still become one when more comes.
    Wait,
    /// Neither: the byte stays.
    Byte,
}

/// A body read in chunks with every value taken out, even one split across
/// two chunks: the bytes at a chunk's end that could start a value wait for
/// the next (`caps::network`'s body asks it chunk by chunk).
pub struct Stream {
    redactor: Arc<Redactor>,
    carry: Vec<u8>,
}

impl Stream {
    fn take(&mut self, chunk: &[u8], last: bool) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(chunk);
        let (out, used) = self.redactor.scan(&buf, last);
        let out = out.unwrap_or_else(|| buf[..used].to_vec());
        self.carry = buf[used..].to_vec();
        out
    }
}

impl KeyStream for Stream {
    fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.take(chunk, false)
    }

    fn finish(&mut self) -> Vec<u8> {
        self.take(&[], true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::network::Origin;
    use crate::caps::secret::Binding;

    fn key(name: &str, origin: &str, place: Place, value: &str) -> Given {
        Given {
            name: name.into(),
            binding: Binding { origin: Origin::parse(origin).unwrap(), place },
            value: super::super::Value::new(value.into()),
        }
    }

    fn bearer() -> Place {
        Place::Header { header: "Authorization".into(), format: "Bearer {}".into() }
    }

    #[test]
    fn a_key_goes_to_its_very_origin_in_its_place_replacing_the_app_s_own() {
        let given = vec![
            key("weather", "https://api.weather.example", bearer(), "s3cret-KEY/1"),
            key("appid", "http://127.0.0.1:8080", Place::Query { query: "appid".into() }, "a b&c=d+e%"),
        ];
        let head = |uri: &str| http::Request::builder().uri(uri).body(()).unwrap().into_parts().0;
        let mut r = head("/v1/now");
        r.headers.insert("authorization", "Bearer mine".parse().unwrap());
        let said = inject(&mut r, "https", "api.weather.example", 443, &given).unwrap();
        assert_eq!(r.headers.get_all("authorization").iter().collect::<Vec<_>>(), ["Bearer s3cret-KEY/1"]);
        assert_eq!(said, [Replaced { name: "weather".into(), place: "header Authorization".into() }]);
        assert_eq!(r.uri, "/v1/now", "the other key stays away");

        // Another origin, another port, another scheme of the same host: nothing.
        for (scheme, host, port) in [
            ("https", "api.weather.example.evil", 443),
            ("https", "api.weather.example", 8443),
            ("http", "api.weather.example", 443),
            ("https", "evil.example", 443),
        ] {
            let mut r = head("/x?appid=1");
            assert!(inject(&mut r, scheme, host, port, &given).unwrap().is_empty());
            assert!(r.headers.is_empty(), "{scheme}://{host}:{port}");
            assert_eq!(r.uri, "/x?appid=1");
        }

        // A query key: encoded, the app's own parameter of that name gone
        // (however it encoded the name), the others kept.
        let mut r = head("/q?city=Oslo&app%69d=forged&x=1&appid");
        let said = inject(&mut r, "http", "127.0.0.1", 8080, &given).unwrap();
        assert_eq!(r.uri, "/q?city=Oslo&x=1&appid=a%20b%26c%3Dd%2Be%25");
        assert_eq!(said.len(), 1);
        let mut r = head("/q");
        assert!(inject(&mut r, "http", "127.0.0.1", 8080, &given).unwrap().is_empty());
        assert_eq!(r.uri, "/q?appid=a%20b%26c%3Dd%2Be%25");
        // Names decoded as a service decodes them: `appi%64` is `appid`;
        // `%41ppid` (Appid), `app+id` (app id), a cut `%6` or a `%zz` are not.
        let mut r = head("/q?appi%64=1&%41ppid=2&app+id=3&appid%6=4&app%zzid=5");
        assert_eq!(inject(&mut r, "http", "127.0.0.1", 8080, &given).unwrap().len(), 1);
        assert_eq!(r.uri, "/q?%41ppid=2&app+id=3&appid%6=4&app%zzid=5&appid=a%20b%26c%3Dd%2Be%25");
        assert_eq!(decoded("a%2"), b"a%2");
        assert_eq!(decoded("a%2B+b"), b"a+ b");
    }

    /// What the network filter is handed: nothing for a call without keys;
    /// for one with them, what the record says, headers, body and words.
    #[test]
    fn a_call_s_keys_are_handed_to_the_filter_whole() {
        assert!(Keys::new(Vec::new()).is_empty());
        let keys = Keys::new(vec![key("weather", "https://api.weather.example", bearer(), "s3cret-KEY-1")]);
        assert!(!keys.is_empty());
        let mut r = http::Request::builder().uri("/").body(()).unwrap().into_parts().0;
        r.headers.insert("authorization", "Bearer mine".parse().unwrap());
        assert_eq!(
            keys.add(&mut r, "https", "api.weather.example", 443).unwrap(),
            ["the host put the key weather in header Authorization, replacing what the app put there"]
        );
        assert!(
            keys.add(&mut r, "https", "api.weather.example", 443).unwrap().len() == 1,
            "its own now, replaced again"
        );
        let mut h = http::HeaderMap::new();
        h.insert("x-echo", "s3cret-KEY-1".parse().unwrap());
        keys.headers(&mut h);
        assert_eq!(h["x-echo"], "[secret weather]");
        assert_eq!(keys.text("log: s3cret-KEY-1"), "log: [secret weather]");
        let mut body = keys.body();
        let mut out = body.push(b"s3cret-");
        out.extend(body.push(b"KEY-1 and more"));
        out.extend(body.finish());
        assert_eq!(out, b"[secret weather] and more");
    }

    /// Issue 72, rules 3 and 7: the hands of one origin hold that origin's
    /// keys alone (what its answer is redacted of); another origin, or a
    /// key's plain-HTTP origin on another computer, has none.
    #[test]
    fn an_origin_s_hands_hold_its_own_keys_alone() {
        let keys = Keys::new(vec![
            key("weather", "https://api.weather.example", bearer(), "s3cret-KEY-1"),
            key("local", "http://127.0.0.1:8080", bearer(), "local-KEY-22"),
            key("clear", "http://api.clear.example", bearer(), "clear-KEY-33"),
        ]);
        let own = keys.for_origin("https", "api.weather.example", 443).expect("its key");
        assert_eq!(own.text("s3cret-KEY-1 local-KEY-22"), "[secret weather] local-KEY-22");
        let local = keys.for_origin("http", "127.0.0.1", 8080).expect("a loopback origin's key");
        assert_eq!(local.text("s3cret-KEY-1 local-KEY-22"), "s3cret-KEY-1 [secret local]");
        assert!(keys.for_origin("https", "evil.example", 443).is_none());
        assert!(keys.for_origin("http", "api.weather.example", 443).is_none());
        assert!(keys.for_origin("http", "api.clear.example", 80).is_none(), "never in clear across a network");
        let mut r = http::Request::builder().uri("/").body(()).unwrap().into_parts().0;
        assert!(keys.add(&mut r, "http", "api.clear.example", 80).unwrap().is_empty());
        assert!(r.headers.is_empty(), "{r:?}");
        // A call without keys has no origin's hands either.
        assert!(crate::caps::network::NoKeys.for_origin("https", "api.weather.example", 443).is_none());
    }

    #[test]
    fn every_form_of_a_key_is_taken_out_even_split_across_chunks() {
        let given = vec![
            key("weather", "https://api.weather.example", bearer(), "s3cret/KEY+1"),
            key("other", "https://api.weather.example", Place::Query { query: "k".into() }, "another-key-value"),
        ];
        let r = Redactor::new(&given);
        let text = "a s3cret/KEY+1 b s3cret%2FKEY%2B1 c s3cret%2fKEY%2b1 d another-key-value e s3cret/KEY+";
        // (The last, 11 of the key's characters, is a part of it: issue 72,
        // rule 4 takes any run of 8 or more out too.)
        assert_eq!(
            r.text(text),
            "a [secret weather] b [secret weather] c [secret weather] d [secret other] e [secret weather]"
        );
        assert!(matches!(r.text("nothing here"), Cow::Borrowed(_)));

        // Every way of cutting the text into chunks gives the same.
        let whole = text.as_bytes();
        for cut in 0..=whole.len() {
            for cut2 in cut..=whole.len() {
                let mut stream = Keys::new(given.clone()).body();
                let mut out = Vec::new();
                for c in [&whole[..cut], &whole[cut..cut2], &whole[cut2..]] {
                    out.extend(stream.push(c));
                }
                out.extend(stream.finish());
                assert_eq!(String::from_utf8_lossy(&out), r.text(text), "cut at {cut} and {cut2}");
            }
        }
    }

    /// A chunk that ends with a whole key (here the longest form of the
    /// only one) is passed on at once, the key taken out: none of it waits
    /// for a next chunk that may come late (a stream of events) or never. (A
    /// shorter key at a chunk's end may still wait for the next chunk, as
    /// much of it as a longer key could begin with.)
    #[test]
    fn a_chunk_that_ends_with_a_whole_key_is_passed_on_at_once() {
        let given = vec![key("weather", "https://api.weather.example", bearer(), "s3cret-KEY-1")];
        let mut stream = Keys::new(given).body();
        assert_eq!(String::from_utf8_lossy(&stream.push(b"data: s3cret-KEY-1")), "data: [secret weather]");
        assert!(stream.finish().is_empty());
    }

    /// Issue 72, rule 4: the encodings services use, mixed within one echo;
    /// base64 at any offset of a longer base64 text; a Basic header's
    /// credentials decoded; and a part of the key 8 characters long — each
    /// taken out, in one piece or cut across chunks.
    #[test]
    fn a_key_echoed_in_any_encoding_a_service_uses_or_in_part_is_taken_out() {
        use base64::Engine as _;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let value = "sk-test/7Hq2Zr9+vXw4Lm8Pn";
        let basic = b64(b"ada:correct horse battery");
        let given = vec![
            key("weather", "https://api.weather.example", bearer(), value),
            key(
                "login",
                "https://api.weather.example",
                Place::Header { header: "Authorization".into(), format: "Basic {}".into() },
                &basic,
            ),
        ];
        let r = Redactor::new(&given);
        for echo in [
            r#"{"key":"sk-test\/7Hq2Zr9+vXw4Lm8Pn"}"#.to_string(),
            "<p>sk-test&#47;7Hq2Zr9&#x2B;vXw4Lm8Pn</p>".to_string(),
            "<p>sk&#45;test&sol;7Hq2Zr9&plus;vXw4Lm8Pn</p>".to_string(),
            "q=sk-test%2f7Hq2Zr9+vXw4Lm8Pn".to_string(),
            format!("token {}", b64(value.as_bytes())),
            format!("blob {}", b64(format!("x{value}y").as_bytes())),
            format!("blob {}", b64(format!("xy{value}").as_bytes())),
            format!("blob {}", b64(value.as_bytes()).replace('+', "-").replace('/', "_")),
            "error: request sk-test/7Hq2Zr9+vXw4Lm8P… cut short".to_string(),
            "error: 7Hq2Zr9+ was refused".to_string(),
        ] {
            let out = r.text(&echo);
            assert!(out.contains("[secret weather]"), "{echo} → {out}");
            assert!(!out.contains("7Hq2Zr9") && !out.contains("Hq2Zr9"), "{echo} → {out}");
        }
        // The Basic header's credentials, decoded or as they went.
        for echo in ["you are ada:correct horse battery", &format!("Basic {basic}")] {
            assert_eq!(r.text(echo).matches("[secret login]").count(), 1, "{echo} → {}", r.text(echo));
        }
        // A key of 8 characters, one byte into a group of a longer base64.
        let short = Redactor::new(&[key("s", "https://api.weather.example", bearer(), "abcdefgh")]);
        let inside = b64(b"xabcdefghy");
        assert!(short.text(&inside).contains("[secret s]"), "{inside} → {}", short.text(&inside));
        // A Basic value that is not `user:password` of 8 printable
        // characters or more is matched as itself only.
        for (value, decoded) in [
            ("YWJjZGVmZ2hpams=", "abcdefghijk"),
            ("YTpiYTpi", "a:ba:b"),
            ("AQI6AQI6AQI6", "\u{1}\u{2}:\u{1}\u{2}:\u{1}\u{2}:"),
        ] {
            let basic = Place::Header { header: "Authorization".into(), format: "Basic {}".into() };
            let r = Redactor::new(&[key("b", "https://api.weather.example", basic, value)]);
            assert_eq!(r.text(&format!("x {decoded} y")), format!("x {decoded} y"), "{value}");
            assert_eq!(r.text(&format!("x {value} y")), "x [secret b] y");
        }
        // Seven of its characters are not a part: text stays text.
        assert_eq!(r.text("sk-test is a prefix"), "sk-test is a prefix");
        // Base64 after two bytes of a group: taken out to its very last
        // character, which only the value's bytes decide.
        let after_two = r.text(&format!("blob {}", b64(format!("xy{value}").as_bytes()))).into_owned();
        assert!(after_two.ends_with("[secret weather]"), "{after_two}");
        // Cut anywhere across chunks: the same (a base64 form too, which no
        // decoder reads: it waits as a form of its own).
        let text = format!(r#"a sk-test\/7Hq2Zr9&#43;vXw4Lm8Pn b 7Hq2Zr9+vXw d {} c sk-test%2"#, b64(value.as_bytes()));
        let text = text.as_str();
        let whole = text.as_bytes();
        for cut in 0..=whole.len() {
            let mut stream = Keys::new(given.clone()).body();
            let mut out = stream.push(&whole[..cut]);
            out.extend(stream.push(&whole[cut..]));
            out.extend(stream.finish());
            assert_eq!(String::from_utf8_lossy(&out), r.text(text), "cut at {cut}");
        }
        assert_eq!(r.text(text), "a [secret weather] b [secret weather] d [secret weather] c sk-test%2");
    }

    /// Issue 72, rule 5: what finds a key in a file about to leave (a
    /// backup's part, a package) names the key, never the value, whatever
    /// form it is in and wherever a read cuts it.
    #[test]
    fn a_key_in_a_file_about_to_leave_is_found_by_name_in_any_form() {
        let given = vec![
            key("weather", "https://api.weather.example", bearer(), "sk-test/7Hq2Zr9+vXw4Lm8Pn"),
            key("other", "https://api.weather.example", bearer(), "another-key-value"),
        ];
        let r = Redactor::new(&given);
        /// A reader that gives three bytes at a time.
        struct Slow<'a>(&'a [u8]);
        impl std::io::Read for Slow<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.len().min(buf.len()).min(3);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        for (text, found) in [
            ("rows: sk-test\\/7Hq2Zr9\\u002bvXw4Lm8Pn", Some("weather")),
            ("rows: x another-key-value", Some("other")),
            ("rows: 7Hq2Zr9+vXw", Some("weather")),
            ("rows: nothing of it, [secret weather] as text", None),
        ] {
            assert_eq!(r.found_in(text.as_bytes()).unwrap().as_deref(), found, "{text}");
            assert_eq!(r.found_in(Slow(text.as_bytes())).unwrap().as_deref(), found, "{text} read 3 at a time");
        }
        assert_eq!(Redactor::new(&[]).found_in(&b"anything"[..]).unwrap(), None);
    }

    #[test]
    fn a_header_holding_a_key_is_rewritten_and_one_named_by_it_dropped() {
        let given = vec![key("weather", "https://api.weather.example", bearer(), "s3cret-KEY-1")];
        let r = Redactor::new(&given);
        let mut h = http::HeaderMap::new();
        h.append("location", "https://elsewhere.example/?k=s3cret-KEY-1".parse().unwrap());
        h.append("x-echo", "one".parse().unwrap());
        h.append("x-echo", "Bearer s3cret-KEY-1".parse().unwrap());
        h.append("s3cret-KEY-1", "x".parse().unwrap());
        r.headers(&mut h);
        assert_eq!(h["location"], "https://elsewhere.example/?k=[secret weather]");
        assert_eq!(h.get_all("x-echo").iter().collect::<Vec<_>>(), ["one", "Bearer [secret weather]"]);
        assert_eq!(h.len(), 3, "{h:?}");
    }
}
