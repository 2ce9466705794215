//! What comes from elsewhere: anything the launcher did not make itself is
//! input an attacker may have written — a backup or a package file, a
//! registry's answer, another process on the same root, the text of an
//! agent's plan or an app's view. This room bounds it, checks it and escapes
//! it, once, for every reader (restore now, packages next): no second copy.
//!
//! - [`text`]: outside text on its way to the person (a terminal, a page, a
//!   card): escaped, stripped of invisible format characters, bounded.
//! - [`archive`]: a tar archive (zstd-compressed or not) read by our own code:
//!   headers bounded (long names and PAX records of a few KiB), every entry's
//!   size checked against what the reader expects ([`Expected`]) before any
//!   byte of it is read, canonical names only. Memory stays flat whatever a
//!   header declares.
//! - [`sqlite`]: a SQLite file from elsewhere, opened read-only and checked
//!   (integrity, its schema against the one expected), its rows read typed.
//!   It is never opened as one of the host's own databases.
//! - [`wasm`]: a component from elsewhere (a package) by its framing: its
//!   top-level sections, every declared length checked before it is used.
//!
//! The shape every reader shares: the reader says first what it expects (an
//! [`Expected`]: each part's canonical name and size, from a list it has
//! already checked — a backup's `backup.json`; a package's manifest section
//! next); the room refuses anything else with a [`Refused`]: one sentence
//! naming the part and what was wrong. A package's reader (a `.wasm` with
//! custom sections) is a second reader of the same shape: its sections are
//! parts, named and sized by the manifest section, bounded the same way.

pub mod archive;
pub mod sqlite;
#[macro_use]
pub mod text;
pub mod wasm;

use std::collections::BTreeMap;

/// Why something from elsewhere is refused: one sentence that names the
/// part (an entry, a table, a grant) and what was wrong with it. It does not
/// name the file: the reader says which file, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// A refusal: `why` is the sentence.
pub fn refused(why: impl Into<String>) -> Refused {
    Refused(why.into())
}

/// The longest name from elsewhere a sentence shows (a hostile file's names
/// can be megabytes).
pub const MAX_SHOWN: usize = 120;

/// A name from elsewhere, for a sentence: quoted, escaped for a terminal
/// ([`text::terminal`]) and cut to [`MAX_SHOWN`] characters.
pub fn named(name: &str) -> String {
    format!("\"{}\"", text::terminal(&text::cut(name, MAX_SHOWN)))
}

/// What a reader expects a file from elsewhere to hold: each part's
/// canonical name and its size in bytes, from a list the reader has read and
/// checked first. A part not listed, listed twice, or of another size is
/// refused before any byte of it is read.
#[derive(Debug, Clone, Default)]
pub struct Expected {
    parts: BTreeMap<String, u64>,
    /// Every folder a part's name implies (`a/b/c` → `a`, `a/b`).
    folders: BTreeMap<String, String>,
}

impl Expected {
    pub fn new() -> Expected {
        Expected::default()
    }

    /// Expects `name` of `bytes`; refused when the name is not canonical
    /// ([`archive::canonical`]) or is listed twice.
    pub fn part(&mut self, name: &str, bytes: u64) -> Result<(), Refused> {
        if !archive::canonical(name) {
            return Err(refused(format!("{} is not a plain relative name", named(name))));
        }
        if self.parts.contains_key(name) {
            return Err(refused(format!("{} is listed twice", named(name))));
        }
        // A file where another part needs a folder, or the other way round:
        // two entries that cannot both be written.
        let collide = |file: &str, inside: &str| {
            refused(format!(
                "{} and {} collide: the first is a file, and the second would be inside it",
                named(file),
                named(inside)
            ))
        };
        if let Some(inside) = self.folders.get(name) {
            return Err(collide(name, inside));
        }
        let mut at = 0;
        while let Some(slash) = name[at..].find('/') {
            let folder = &name[..at + slash];
            if self.parts.contains_key(folder) {
                return Err(collide(folder, name));
            }
            self.folders.entry(folder.to_string()).or_insert_with(|| name.to_string());
            at += slash + 1;
        }
        self.parts.insert(name.to_string(), bytes);
        Ok(())
    }

    /// The size `name` must have, when it is expected.
    pub fn size_of(&self, name: &str) -> Option<u64> {
        self.parts.get(name).copied()
    }

    /// Every part's name, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.parts.keys().map(String::as_str)
    }

    /// The sum of the parts' sizes (`None` when it overflows: no file holds that).
    pub fn total(&self) -> Option<u64> {
        self.parts.values().try_fold(0u64, |sum, b| sum.checked_add(*b))
    }
}
