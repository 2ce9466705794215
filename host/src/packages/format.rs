//! The package format: one component.
//!
//! A package is the release's component with Autoapp's part appended as
//! custom sections of the component itself, in this order, each once:
//!
//! | section | holds |
//! |---|---|
//! | `autoapp:manifest` | the release's `autoapp.toml`, as UTF-8 text |
//! | `autoapp:migrations` | JSON: `[{"name": "migrations/0001_init.sql", "sql": "…"}, …]`, in the manifest's order |
//! | `autoapp:wit` | the WIT package the component was built against (`autoapp:app@0.1.0`) |
//! | `autoapp:signature` | optional, last: the publisher's Ed25519 signature (see [`super::sign`]) |
//!
//! A runtime ignores custom sections, so the file runs as it is; the bytes
//! before the first `autoapp:` section are exactly the release's component,
//! so the release id an install computes is the publisher's.
//!
//! Reading a package is reading a file from elsewhere: [`read`] walks the
//! component's top-level sections by their framing alone (never more than
//! the bytes it was given), checks every section's declared length against
//! what is left and against its bound before it looks inside, and refuses
//! anything out of place with one sentence.

use crate::release::Migration;

/// The custom sections of a package, in the order they must appear.
pub const MANIFEST_SECTION: &str = "autoapp:manifest";
pub const MIGRATIONS_SECTION: &str = "autoapp:migrations";
pub const WIT_SECTION: &str = "autoapp:wit";
pub const SIGNATURE_SECTION: &str = "autoapp:signature";

/// What a name of ours starts with: no other section may use it.
const OURS: &str = "autoapp:";

/// The most a manifest section may hold: a manifest of hundreds of routes is
/// tens of KiB.
pub const MAX_MANIFEST: usize = 256 * 1024;
/// The most the migrations section may hold.
pub const MAX_MIGRATIONS: usize = 8 << 20;
/// The most the WIT section may hold (a package name and version).
pub const MAX_WIT: usize = 256;
/// The most a signature section may hold (a publisher's name, a key, a
/// signature).
pub const MAX_SIGNATURE: usize = 4096;

/// The binary preamble of a component (`\0asm`, version 0x0d, layer 1) and
/// of a core module (version 1, layer 0).
const COMPONENT_PREAMBLE: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
const MODULE_PREAMBLE: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];

/// Why bytes are not a package: each a sentence that says what was wrong.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    #[error("it is a core WebAssembly module, not a component: a package is a component built for autoapp:app")]
    CoreModule,
    #[error("it is not a WebAssembly component (its first bytes are not a component's preamble)")]
    NotWasm,
    #[error("it ends inside a section at byte {0}: the file is cut short or damaged")]
    Truncated(usize),
    #[error("the section at byte {at} declares {declared} bytes but only {left} follow: the file is damaged")]
    Overlong { at: usize, declared: u64, left: usize },
    #[error("its `{name}` section holds {len} bytes; at most {max} are allowed")]
    TooBig { name: &'static str, len: usize, max: usize },
    #[error("it holds an unknown Autoapp section `{0}`")]
    UnknownSection(String),
    #[error("its `{0}` section appears twice")]
    Twice(&'static str),
    #[error("its `{0}` section is out of order: Autoapp's sections come last, as manifest, migrations, wit, signature")]
    OutOfOrder(String),
    #[error("it has no `{0}` section: it is a component, but not an Autoapp package (make one with `autoapp pack`)")]
    Missing(&'static str),
    #[error("its `{0}` section is not what it should be: {1}")]
    Malformed(&'static str, String),
}

/// Autoapp's part of a package, before it is packed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contents<'a> {
    pub component: &'a [u8],
    pub manifest_text: &'a str,
    pub migrations: &'a [Migration],
    pub wit: &'a str,
}

/// A package read back: where its parts are, checked for shape (not yet for
/// meaning: the signature, the component and the manifest are checked by
/// their owners).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package<'a> {
    /// The component, without Autoapp's sections: the release's bytes.
    pub component: &'a [u8],
    pub manifest_text: String,
    pub migrations: Vec<Migration>,
    pub wit: String,
    /// Every byte before the signature section (what a signature covers),
    /// and the signature section's contents, when there is one.
    pub signed: &'a [u8],
    pub signature: Option<&'a [u8]>,
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MigrationEntry {
    name: String,
    sql: String,
}

/// Appends a custom section `name` holding `payload` to `out`.
pub fn push_section(out: &mut Vec<u8>, name: &str, payload: &[u8]) {
    let mut body = Vec::with_capacity(name.len() + payload.len() + 5);
    leb128(&mut body, name.len() as u64);
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(payload);
    out.push(0);
    leb128(out, body.len() as u64);
    out.extend_from_slice(&body);
}

fn leb128(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// The package of `contents`, unsigned: the component with Autoapp's
/// sections appended. The component itself must carry none of ours.
pub fn pack(contents: &Contents<'_>) -> Result<Vec<u8>, FormatError> {
    let sections = walk(contents.component)?;
    if let Some(s) = sections.iter().find(|s| s.ours) {
        return Err(FormatError::OutOfOrder(s.name.clone()));
    }
    let migrations: Vec<MigrationEntry> =
        contents.migrations.iter().map(|m| MigrationEntry { name: m.name.clone(), sql: m.sql.clone() }).collect();
    let migrations = serde_json::to_vec(&migrations).expect("JSON of strings");
    for (name, len, max) in [
        (MANIFEST_SECTION, contents.manifest_text.len(), MAX_MANIFEST),
        (MIGRATIONS_SECTION, migrations.len(), MAX_MIGRATIONS),
        (WIT_SECTION, contents.wit.len(), MAX_WIT),
    ] {
        if len > max {
            return Err(FormatError::TooBig { name, len, max });
        }
    }
    let mut out = contents.component.to_vec();
    push_section(&mut out, MANIFEST_SECTION, contents.manifest_text.as_bytes());
    push_section(&mut out, MIGRATIONS_SECTION, &migrations);
    push_section(&mut out, WIT_SECTION, contents.wit.as_bytes());
    Ok(out)
}

/// One top-level section, by its framing.
#[derive(Debug)]
struct Section {
    /// Where the section starts (its id byte).
    start: usize,
    /// Its name, for a custom section; empty otherwise.
    name: String,
    /// Whether it is a custom section named `autoapp:…`.
    ours: bool,
    /// The custom section's payload (after its name), for ours.
    payload: std::ops::Range<usize>,
}

/// Reads an unsigned LEB128 `u32` at `*at` of `bytes` (at most 5 bytes).
fn read_u32(bytes: &[u8], at: &mut usize) -> Result<u64, FormatError> {
    let mut value: u64 = 0;
    for i in 0..5 {
        let byte = *bytes.get(*at).ok_or(FormatError::Truncated(*at))?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(FormatError::Malformed("length", format!("a length at byte {} runs past five bytes", *at - 5)))
}

/// The top-level sections of the component `bytes`, by their framing alone.
fn walk(bytes: &[u8]) -> Result<Vec<Section>, FormatError> {
    match bytes.get(..8) {
        Some(p) if p == COMPONENT_PREAMBLE => {}
        Some(p) if p == MODULE_PREAMBLE => return Err(FormatError::CoreModule),
        _ => return Err(FormatError::NotWasm),
    }
    let mut at = 8;
    let mut sections = Vec::new();
    while at < bytes.len() {
        let start = at;
        let id = bytes[at];
        at += 1;
        let declared = read_u32(bytes, &mut at)?;
        let left = bytes.len() - at;
        if declared > left as u64 {
            return Err(FormatError::Overlong { at: start, declared, left });
        }
        let end = at + declared as usize;
        let mut section = Section { start, name: String::new(), ours: false, payload: end..end };
        if id == 0 {
            let mut name_at = at;
            let name_len = read_u32(&bytes[..end], &mut name_at)?;
            let name_end = name_at
                .checked_add(name_len as usize)
                .filter(|e| *e <= end)
                .ok_or(FormatError::Overlong { at: start, declared: name_len, left: end.saturating_sub(name_at) })?;
            // A name is shown only cut and escaped: it is the file's words.
            section.name = String::from_utf8_lossy(&bytes[name_at..name_end]).into_owned();
            section.ours = section.name.starts_with(OURS);
            section.payload = name_end..end;
        }
        sections.push(section);
        at = end;
    }
    Ok(sections)
}

/// The name of a section as a sentence may show it: at most 80 characters.
fn shown(name: &str) -> String {
    crate::elsewhere::text::cut(name, 80).into_owned()
}

/// Reads a package: the component's sections, then Autoapp's, each checked
/// for place, count and size before its contents are looked at.
pub fn read(bytes: &[u8]) -> Result<Package<'_>, FormatError> {
    let sections = walk(bytes)?;
    let order = [MANIFEST_SECTION, MIGRATIONS_SECTION, WIT_SECTION, SIGNATURE_SECTION];
    let first_ours = sections.iter().position(|s| s.ours).ok_or(FormatError::Missing(MANIFEST_SECTION))?;
    let mut found: [Option<&Section>; 4] = [None; 4];
    let mut last = None;
    for s in &sections[first_ours..] {
        if !s.ours {
            let what = if s.name.is_empty() { "a component section".to_string() } else { shown(&s.name) };
            return Err(FormatError::OutOfOrder(what));
        }
        let i = order.iter().position(|n| *n == s.name).ok_or_else(|| FormatError::UnknownSection(shown(&s.name)))?;
        if found[i].is_some() {
            return Err(FormatError::Twice(order[i]));
        }
        if last.is_some_and(|l| l > i) {
            return Err(FormatError::OutOfOrder(order[i].to_string()));
        }
        last = Some(i);
        found[i] = Some(s);
    }
    for (name, i, max) in [
        (MANIFEST_SECTION, 0, MAX_MANIFEST),
        (MIGRATIONS_SECTION, 1, MAX_MIGRATIONS),
        (WIT_SECTION, 2, MAX_WIT),
        (SIGNATURE_SECTION, 3, MAX_SIGNATURE),
    ] {
        if let Some(s) = found[i]
            && s.payload.len() > max
        {
            return Err(FormatError::TooBig { name, len: s.payload.len(), max });
        }
    }
    let text = |i: usize, name: &'static str| -> Result<String, FormatError> {
        let s = found[i].ok_or(FormatError::Missing(name))?;
        String::from_utf8(bytes[s.payload.clone()].to_vec())
            .map_err(|_| FormatError::Malformed(name, "it is not UTF-8 text".into()))
    };
    let manifest_text = text(0, MANIFEST_SECTION)?;
    let wit = text(2, WIT_SECTION)?;
    let migrations_json = text(1, MIGRATIONS_SECTION)?;
    let migrations: Vec<MigrationEntry> = serde_json::from_str(&migrations_json).map_err(|e| {
        FormatError::Malformed(MIGRATIONS_SECTION, format!("it is not a JSON list of {{name, sql}}: {e}"))
    })?;
    let (signed, signature) = match found[3] {
        Some(s) => (&bytes[..s.start], Some(&bytes[s.payload.clone()])),
        None => (bytes, None),
    };
    Ok(Package {
        component: &bytes[..sections[first_ours].start],
        manifest_text,
        migrations: migrations.into_iter().map(|m| Migration { name: m.name, sql: m.sql }).collect(),
        wit,
        signed,
        signature,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest component: its preamble and one custom section of its own.
    fn component() -> Vec<u8> {
        let mut c = COMPONENT_PREAMBLE.to_vec();
        push_section(&mut c, "component-type:x", b"\x01\x02");
        c
    }

    fn contents<'a>(c: &'a [u8], migrations: &'a [Migration]) -> Contents<'a> {
        Contents { component: c, manifest_text: "[app]\nid = \"notes\"\n", migrations, wit: "autoapp:app@0.1.0" }
    }

    fn migrations() -> Vec<Migration> {
        vec![Migration { name: "migrations/0001_init.sql".into(), sql: "CREATE TABLE t (x);".into() }]
    }

    #[test]
    fn a_package_reads_back_as_it_was_packed_and_its_component_is_the_release_s_bytes() {
        let c = component();
        let m = migrations();
        let packed = pack(&contents(&c, &m)).unwrap();
        let p = read(&packed).unwrap();
        assert_eq!(p.component, &c[..]);
        assert_eq!(p.manifest_text, "[app]\nid = \"notes\"\n");
        assert_eq!(p.migrations, m);
        assert_eq!(p.wit, "autoapp:app@0.1.0");
        assert_eq!(p.signed, &packed[..]);
        assert_eq!(p.signature, None);
        let mut signed = packed.clone();
        push_section(&mut signed, SIGNATURE_SECTION, b"sig");
        let p = read(&signed).unwrap();
        assert_eq!(p.signed, &packed[..]);
        assert_eq!(p.signature, Some(&b"sig"[..]));
    }

    #[test]
    fn what_is_not_a_package_is_refused_with_its_sentence() {
        assert_eq!(read(&MODULE_PREAMBLE), Err(FormatError::CoreModule));
        assert_eq!(read(b"garbage, not wasm"), Err(FormatError::NotWasm));
        assert_eq!(read(b"\0as"), Err(FormatError::NotWasm));
        assert_eq!(read(&component()), Err(FormatError::Missing(MANIFEST_SECTION)));
        let c = component();
        let m = migrations();
        let packed = pack(&contents(&c, &m)).unwrap();
        // Cut anywhere inside: refused, never a panic.
        for cut in 9..packed.len() {
            assert!(read(&packed[..cut]).is_err(), "cut at {cut}");
        }
        // A section that claims more than follows.
        let mut liar = c.clone();
        liar.extend_from_slice(&[0, 0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(matches!(read(&liar), Err(FormatError::Overlong { .. })));
        // A length of six bytes.
        let mut long = c.clone();
        long.extend_from_slice(&[0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00]);
        assert!(matches!(read(&long), Err(FormatError::Malformed("length", _))));
    }

    #[test]
    fn autoapp_s_sections_come_last_once_each_in_order_and_bounded() {
        let c = component();
        let m = migrations();
        let packed = pack(&contents(&c, &m)).unwrap();
        let mut twice = packed.clone();
        push_section(&mut twice, WIT_SECTION, b"autoapp:app@0.1.0");
        assert_eq!(read(&twice), Err(FormatError::Twice(WIT_SECTION)));
        let mut after = packed.clone();
        push_section(&mut after, "name", b"x");
        assert_eq!(read(&after), Err(FormatError::OutOfOrder("name".into())));
        let mut unknown = packed.clone();
        push_section(&mut unknown, "autoapp:grants", b"all");
        assert_eq!(read(&unknown), Err(FormatError::UnknownSection("autoapp:grants".into())));
        let mut swapped = c.clone();
        push_section(&mut swapped, MIGRATIONS_SECTION, b"[]");
        push_section(&mut swapped, MANIFEST_SECTION, b"");
        assert_eq!(read(&swapped), Err(FormatError::OutOfOrder(MANIFEST_SECTION.into())));
        let mut big = c.clone();
        push_section(&mut big, MANIFEST_SECTION, &vec![b'a'; MAX_MANIFEST + 1]);
        push_section(&mut big, MIGRATIONS_SECTION, b"[]");
        push_section(&mut big, WIT_SECTION, b"x");
        assert_eq!(
            read(&big),
            Err(FormatError::TooBig { name: MANIFEST_SECTION, len: MAX_MANIFEST + 1, max: MAX_MANIFEST })
        );
        let mut bad = c.clone();
        push_section(&mut bad, MANIFEST_SECTION, b"\xff\xfe");
        push_section(&mut bad, MIGRATIONS_SECTION, b"[]");
        push_section(&mut bad, WIT_SECTION, b"x");
        assert!(matches!(read(&bad), Err(FormatError::Malformed(MANIFEST_SECTION, _))));
        let mut not_json = c.clone();
        push_section(&mut not_json, MANIFEST_SECTION, b"");
        push_section(&mut not_json, MIGRATIONS_SECTION, b"{\"name\": 1}");
        push_section(&mut not_json, WIT_SECTION, b"x");
        assert!(matches!(read(&not_json), Err(FormatError::Malformed(MIGRATIONS_SECTION, _))));
        // A component that already carries a section of ours is not packed again.
        assert!(matches!(pack(&contents(&packed, &m)), Err(FormatError::OutOfOrder(_))));
    }

    #[test]
    fn leb128_lengths_round_trip() {
        for v in [0u64, 1, 127, 128, 300, 16_384, u32::MAX as u64] {
            let mut out = Vec::new();
            leb128(&mut out, v);
            let mut at = 0;
            assert_eq!(read_u32(&out, &mut at).unwrap(), v);
            assert_eq!(at, out.len());
        }
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn reading_any_bytes_after_a_preamble_never_panics(tail in proptest::collection::vec(any::<u8>(), 0..256)) {
                let mut bytes = COMPONENT_PREAMBLE.to_vec();
                bytes.extend_from_slice(&tail);
                let _ = read(&bytes);
            }
        }
    }
}
