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
//! Reading a package is reading a file from elsewhere: [`read`] takes the
//! component's top-level sections from the room that reads what comes from
//! elsewhere ([`crate::elsewhere::wasm`]: framing only, every declared length
//! checked against what is left), checks Autoapp's for place, count and size
//! before it looks inside, and refuses anything out of place with one
//! sentence.

use crate::elsewhere::wasm::{self, Section};
use crate::elsewhere::{Refused, named};
use crate::release::Migration;

/// The custom sections of a package, in the order they must appear.
pub const MANIFEST_SECTION: &str = "autoapp:manifest";
pub const MIGRATIONS_SECTION: &str = "autoapp:migrations";
pub const WIT_SECTION: &str = "autoapp:wit";
pub const SIGNATURE_SECTION: &str = "autoapp:signature";
const ORDER: [&str; 4] = [MANIFEST_SECTION, MIGRATIONS_SECTION, WIT_SECTION, SIGNATURE_SECTION];

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
const MAXIMA: [usize; 4] = [MAX_MANIFEST, MAX_MIGRATIONS, MAX_WIT, MAX_SIGNATURE];

/// Why bytes are not a package: each a sentence that says what was wrong.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    /// The framing: not a component, cut short, a length that lies.
    #[error("{0}")]
    Framing(Refused),
    #[error("its `{name}` section holds {len} bytes; at most {max} are allowed")]
    TooBig { name: &'static str, len: usize, max: usize },
    #[error("it holds an unknown Autoapp section {0}")]
    UnknownSection(String),
    #[error("its `{0}` section appears twice")]
    Twice(&'static str),
    #[error("{0} is out of order: Autoapp's sections come last, as manifest, migrations, wit, signature")]
    OutOfOrder(String),
    #[error("it has no `{0}` section: it is a component, but not an Autoapp package (make one with `autoapp pack`)")]
    Missing(&'static str),
    #[error("its `{0}` section is not what it should be: {1}")]
    Malformed(&'static str, String),
}

impl From<Refused> for FormatError {
    fn from(r: Refused) -> FormatError {
        FormatError::Framing(r)
    }
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
pub use crate::elsewhere::wasm::push_custom as push_section;

fn is_ours(s: &Section) -> bool {
    s.name.as_deref().is_some_and(|n| n.starts_with(OURS))
}

/// The package of `contents`, unsigned: the component with Autoapp's
/// sections appended. The component itself must carry none of ours.
pub fn pack(contents: &Contents<'_>) -> Result<Vec<u8>, FormatError> {
    if let Some(s) = wasm::sections(contents.component)?.iter().find(|s| is_ours(s)) {
        return Err(FormatError::OutOfOrder(wasm::describe(s)));
    }
    let migrations: Vec<MigrationEntry> =
        contents.migrations.iter().map(|m| MigrationEntry { name: m.name.clone(), sql: m.sql.clone() }).collect();
    let migrations = serde_json::to_vec(&migrations).expect("JSON of strings");
    let parts: [&[u8]; 3] = [contents.manifest_text.as_bytes(), &migrations, contents.wit.as_bytes()];
    let mut out = contents.component.to_vec();
    for (i, part) in parts.iter().enumerate() {
        if part.len() > MAXIMA[i] {
            return Err(FormatError::TooBig { name: ORDER[i], len: part.len(), max: MAXIMA[i] });
        }
        push_section(&mut out, ORDER[i], part);
    }
    Ok(out)
}

/// Reads a package: the component's sections, then Autoapp's, each checked
/// for place, count and size before its contents are looked at.
pub fn read(bytes: &[u8]) -> Result<Package<'_>, FormatError> {
    let sections = wasm::sections(bytes)?;
    let first_ours = sections.iter().position(is_ours).ok_or(FormatError::Missing(MANIFEST_SECTION))?;
    let mut found: [Option<&Section>; 4] = [None; 4];
    let mut last = None;
    for s in &sections[first_ours..] {
        if !is_ours(s) {
            return Err(FormatError::OutOfOrder(wasm::describe(s)));
        }
        let name = s.name.as_deref().unwrap_or_default();
        let i = ORDER.iter().position(|n| *n == name).ok_or_else(|| FormatError::UnknownSection(named(name)))?;
        if found[i].is_some() {
            return Err(FormatError::Twice(ORDER[i]));
        }
        if last.is_some_and(|l| l > i) {
            return Err(FormatError::OutOfOrder(wasm::describe(s)));
        }
        last = Some(i);
        found[i] = Some(s);
    }
    for (i, s) in found.iter().enumerate() {
        if let Some(s) = s
            && s.payload.len() > MAXIMA[i]
        {
            return Err(FormatError::TooBig { name: ORDER[i], len: s.payload.len(), max: MAXIMA[i] });
        }
    }
    let text = |i: usize| -> Result<String, FormatError> {
        let s = found[i].ok_or(FormatError::Missing(ORDER[i]))?;
        String::from_utf8(bytes[s.payload.clone()].to_vec())
            .map_err(|_| FormatError::Malformed(ORDER[i], "it is not UTF-8 text".into()))
    };
    let manifest_text = text(0)?;
    let migrations: Vec<MigrationEntry> = serde_json::from_str(&text(1)?).map_err(|e| {
        FormatError::Malformed(MIGRATIONS_SECTION, format!("it is not a JSON list of {{name, sql}}: {e}"))
    })?;
    let wit = text(2)?;
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
        let mut c = wasm::COMPONENT_PREAMBLE.to_vec();
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
        assert!(matches!(read(&wasm::MODULE_PREAMBLE), Err(FormatError::Framing(_))));
        assert!(matches!(read(b"garbage, not wasm"), Err(FormatError::Framing(_))));
        assert_eq!(read(&component()), Err(FormatError::Missing(MANIFEST_SECTION)));
        let c = component();
        let m = migrations();
        let packed = pack(&contents(&c, &m)).unwrap();
        // Cut anywhere inside: refused, never a panic.
        for cut in 9..packed.len() {
            assert!(read(&packed[..cut]).is_err(), "cut at {cut}");
        }
    }

    /// Each bound is the bound: a section of exactly its most is packed and
    /// read, one byte more is refused, whether packing or reading. (Found by
    /// the mutation run of 2026-12-05: the limits' values and `>` were not
    /// held by any test.)
    #[test]
    fn a_section_of_exactly_its_most_passes_and_one_byte_more_is_refused() {
        let c = component();
        let m = migrations();
        assert_eq!((MAX_MANIFEST, MAX_MIGRATIONS, MAX_WIT, MAX_SIGNATURE), (262_144, 8_388_608, 256, 4096));
        let at_most = "a".repeat(MAX_MANIFEST);
        let packed = pack(&Contents { manifest_text: &at_most, ..contents(&c, &m) }).unwrap();
        assert_eq!(read(&packed).unwrap().manifest_text.len(), MAX_MANIFEST);
        let over = "a".repeat(MAX_MANIFEST + 1);
        assert_eq!(
            pack(&Contents { manifest_text: &over, ..contents(&c, &m) }),
            Err(FormatError::TooBig { name: MANIFEST_SECTION, len: MAX_MANIFEST + 1, max: MAX_MANIFEST })
        );
        // Read: a WIT section of exactly its most, then one byte more.
        for (len, ok) in [(MAX_WIT, true), (MAX_WIT + 1, false)] {
            let mut b = c.clone();
            push_section(&mut b, MANIFEST_SECTION, b"[app]");
            push_section(&mut b, MIGRATIONS_SECTION, b"[]");
            push_section(&mut b, WIT_SECTION, &vec![b'w'; len]);
            assert_eq!(!matches!(read(&b), Err(FormatError::TooBig { .. })), ok, "{len}");
        }
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
        assert_eq!(read(&after), Err(FormatError::OutOfOrder("the custom section \"name\"".into())));
        let mut unknown = packed.clone();
        push_section(&mut unknown, "autoapp:grants", b"all");
        assert_eq!(read(&unknown), Err(FormatError::UnknownSection("\"autoapp:grants\"".into())));
        let mut swapped = c.clone();
        push_section(&mut swapped, MIGRATIONS_SECTION, b"[]");
        push_section(&mut swapped, MANIFEST_SECTION, b"");
        assert_eq!(read(&swapped), Err(FormatError::OutOfOrder("the custom section \"autoapp:manifest\"".into())));
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

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn reading_any_bytes_after_a_preamble_never_panics(tail in proptest::collection::vec(any::<u8>(), 0..256)) {
                let mut bytes = wasm::COMPONENT_PREAMBLE.to_vec();
                bytes.extend_from_slice(&tail);
                let _ = read(&bytes);
            }
        }
    }
}
