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
//! - [`sqlite`]: a SQLite file from elsewhere, opened read-only, bounded and checked
//!   (integrity, its schema against the one expected), its rows read typed.
//!   It is never opened as one of the host's own databases.
//! - [`wasm`]: a component from elsewhere (a package) by its framing: its
//!   top-level sections, every declared length checked before it is used.
//! - [`json`]: JSON text from elsewhere (an app's answer, a worker's line)
//!   weighed before it is parsed: how many values it would make, counted in
//!   one pass that allocates nothing.
//!
//! The shape every reader shares: the reader says first what it expects (an
//! [`Expected`]: each part's canonical name and size, from a list it has
//! already checked — a backup's `backup.json`; a package's manifest section
//! next); the room refuses anything else with a [`Refused`]: one sentence
//! naming the part and what was wrong. A package's reader (a `.wasm` with
//! custom sections) is a second reader of the same shape: its sections are
//! parts, named and sized by the manifest section, bounded the same way.

pub mod archive;
pub mod json;
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

/// The longest component (between two slashes) of a part's name, in bytes:
/// what a file system takes.
pub const MAX_NAME_COMPONENT: usize = 255;
/// The longest name of a part, in bytes.
pub const MAX_NAME: usize = 1024;
/// The most folders a part's name may go down (`a/b/c` is 3 deep): a deep
/// path exhausts the file descriptors of whoever walks it.
pub const MAX_DEPTH: usize = 16;
/// The most parts a file from elsewhere may list.
pub const MAX_PARTS: usize = 4096;

/// What a reader expects a file from elsewhere to hold: each part's
/// canonical name and its size in bytes, from a list the reader has read and
/// checked first. A part not listed, listed twice, or of another size is
/// refused before any byte of it is read. Names are bounded
/// ([`MAX_NAME_COMPONENT`], [`MAX_NAME`], [`MAX_DEPTH`]) and so is their
/// number ([`MAX_PARTS`]): what the list keeps is linear in what it read.
#[derive(Debug, Clone, Default)]
pub struct Expected {
    parts: BTreeMap<String, u64>,
    /// Every folder a part's name implies (`a/b/c` → `a`, `a/b`).
    folders: std::collections::BTreeSet<String>,
}

impl Expected {
    pub fn new() -> Expected {
        Expected::default()
    }

    /// Expects `name` of `bytes`; refused when the name is not canonical
    /// ([`archive::canonical`]), too long or too deep, listed twice, or one
    /// part too many.
    pub fn part(&mut self, name: &str, bytes: u64) -> Result<(), Refused> {
        if name.len() > MAX_NAME {
            return Err(refused(format!("{} is {} bytes long; a name is at most {MAX_NAME}", named(name), name.len())));
        }
        if name.split('/').any(|c| c.len() > MAX_NAME_COMPONENT) {
            return Err(refused(format!(
                "{} has a part longer than {MAX_NAME_COMPONENT} bytes between two slashes",
                named(name)
            )));
        }
        if name.split('/').count() > MAX_DEPTH + 1 {
            return Err(refused(format!("{} is more than {MAX_DEPTH} folders deep", named(name))));
        }
        if !archive::canonical(name) {
            return Err(refused(format!("{} is not a plain relative name", named(name))));
        }
        if self.parts.contains_key(name) {
            return Err(refused(format!("{} is listed twice", named(name))));
        }
        if self.parts.len() >= MAX_PARTS {
            return Err(refused(format!("more than {MAX_PARTS} parts are listed")));
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
        if self.folders.contains(name) {
            let below = format!("{name}/");
            let inside = self
                .parts
                .range(below.clone()..)
                .next()
                .map(|(n, _)| n.as_str())
                .filter(|n| n.starts_with(&below))
                .unwrap_or(&below);
            return Err(collide(name, inside));
        }
        let mut at = 0;
        while let Some(slash) = name[at..].find('/') {
            let folder = &name[..at + slash];
            if self.parts.contains_key(folder) {
                return Err(collide(folder, name));
            }
            if !self.folders.contains(folder) {
                self.folders.insert(folder.to_string());
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_refuses_long_deep_or_too_many_names_and_keeps_what_it_read_linear() {
        let mut e = Expected::new();
        let long = "a/".repeat(600) + "x";
        assert!(e.part(&long, 1).unwrap_err().0.contains("a name is at most 1024"));
        let wide = "b".repeat(256);
        assert!(e.part(&wide, 1).unwrap_err().0.contains("longer than 255 bytes"));
        let deep = "a/".repeat(17) + "x";
        assert!(e.part(&deep, 1).unwrap_err().0.contains("more than 16 folders deep"));
        let ok = "a/".repeat(16) + "x";
        e.part(&ok, 1).unwrap();
        assert_eq!(e.folders.len(), 16);
        assert!(e.folders.iter().map(String::len).sum::<usize>() < 16 * ok.len());
        assert!(e.part("a/a", 1).unwrap_err().0.contains("\"a/a\" and \"a/a/a/"), "names what is inside");
        for i in 1..MAX_PARTS {
            e.part(&format!("p/{i}"), 1).unwrap();
        }
        assert!(e.part("p/one-more", 1).unwrap_err().0.contains("more than 4096 parts"));
    }

    #[test]
    fn a_name_exactly_at_each_bound_is_taken() {
        let mut e = Expected::new();
        let c = |x: &str, n: usize| x.repeat(n);
        let longest = format!("{}/{}/{}/{}/e", c("a", 255), c("b", 255), c("c", 255), c("d", 254));
        assert_eq!(longest.len(), MAX_NAME);
        e.part(&longest, 1).unwrap();
        e.part(&c("w", MAX_NAME_COMPONENT), 1).unwrap();
        assert!(e.part(&format!("{longest}x"), 1).unwrap_err().0.contains("a name is at most 1024"));
    }

    #[test]
    fn a_list_gives_its_names_in_order_and_their_total() {
        let mut e = Expected::new();
        assert_eq!(e.total(), Some(0));
        e.part("b", 2).unwrap();
        e.part("a/c", 3).unwrap();
        assert_eq!(e.names().collect::<Vec<_>>(), ["a/c", "b"]);
        assert_eq!(e.total(), Some(5));
        assert_eq!((e.size_of("b"), e.size_of("a")), (Some(2), None));
        e.part("d", u64::MAX).unwrap();
        assert_eq!(e.total(), None, "a sum that overflows is no size");
    }

    #[test]
    fn a_refusal_shows_its_sentence() {
        let r = refused("the entry \"x\" is not listed");
        assert_eq!(r.to_string(), "the entry \"x\" is not listed");
        let e: Box<dyn std::error::Error> = Box::new(r);
        assert_eq!(e.to_string(), "the entry \"x\" is not listed");
    }
}
