//! A tar archive from elsewhere (a backup; zstd-compressed or plain), read by
//! our own code: the `tar` crate takes a GNU long name or a PAX record of any
//! declared size into memory (a 99 KB file declaring a 3 GB name took 7 GB),
//! so no header of a file from elsewhere reaches it.
//!
//! - Each 512-byte header is checked (checksum, an octal or base-256 size).
//! - A GNU long name (`L`) or link (`K`) and PAX records (`x`, `g`) are read
//!   only when they declare at most [`MAX_HEADER_TEXT`] bytes; a larger one is
//!   refused before a byte of it is read.
//! - An entry is handed to the reader as its [`Header`] first; the reader
//!   checks its name and size against what it expects ([`Archive::entry`]
//!   does it with an [`Expected`]) before it reads the body, which is
//!   exactly the declared size ([`Body`]).
//! - zstd's window is bounded ([`MAX_WINDOW_LOG`]), so decompression keeps
//!   memory flat too.
//!
//! Nothing here allocates by a size a file declares: memory is the header
//! text bound, the copy buffer of the reader, and zstd's window.

use std::io::{BufReader, Read};
use std::path::Path;

use super::{Expected, Refused, named, refused};

/// The most a long name, a long link or an entry's PAX records may hold.
/// Guards memory: a header declares any size it likes.
pub const MAX_HEADER_TEXT: u64 = 4 * 1024;

/// The largest zstd window a file from elsewhere may ask for (2^24 = 16 MiB;
/// Autoapp writes backups with level 3, whose window is 2 MiB): guards
/// memory during decompression.
pub const MAX_WINDOW_LOG: u32 = 24;

/// zstd's magic number: the first four bytes of a zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

const BLOCK: usize = 512;

/// Whether `name` is a canonical relative name: not empty, no empty, `.` or
/// `..` part, no leading or trailing `/`, no backslash, no NUL. Joining it to
/// a folder never leaves that folder.
pub fn canonical(name: &str) -> bool {
    !name.is_empty()
        && !name.contains('\\')
        && !name.contains('\0')
        && name.split('/').all(|part| !part.is_empty() && part != "." && part != "..")
}

/// What kind of entry a header announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file (`0` or NUL).
    File,
    /// Anything else (a folder, a link, a device…), with its type byte.
    Other(u8),
}

/// An entry's header, as read and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Its name (from a long name or a PAX `path` when it has one), UTF-8.
    pub name: String,
    pub kind: Kind,
    /// The body's size in bytes, as declared (a PAX `size` when given).
    pub size: u64,
}

/// A tar archive read from `R`, one header at a time.
pub struct Archive<R> {
    inner: R,
    /// Bytes of the current entry's body (and padding) not read yet.
    left: u64,
    /// The current entry's padding after its body.
    padding: u64,
    ended: bool,
}

/// A zstd-compressed archive in a file.
pub type ZstdFile = Archive<zstd::Decoder<'static, BufReader<std::fs::File>>>;

/// Opens the zstd-compressed archive `file` (its window bounded).
pub fn open_zstd(file: &Path) -> Result<ZstdFile, Refused> {
    let mut f = std::fs::File::open(file).map_err(|e| refused(format!("it cannot be opened ({e})")))?;
    let mut magic = [0u8; 4];
    if f.read_exact(&mut magic).is_err() || magic != ZSTD_MAGIC {
        return Err(refused("it is not a zstd-compressed archive"));
    }
    let f = std::fs::File::open(file).map_err(|e| refused(format!("it cannot be opened ({e})")))?;
    let mut decoder = zstd::Decoder::new(f).map_err(|e| refused(format!("it cannot be read ({e})")))?;
    decoder.window_log_max(MAX_WINDOW_LOG).map_err(|e| refused(format!("it cannot be read ({e})")))?;
    Ok(Archive::new(decoder))
}

fn damaged(e: std::io::Error) -> Refused {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        refused("it ends early: the file is cut short")
    } else {
        refused(format!("it cannot be read ({e})"))
    }
}

/// The number in a header's numeric field: octal text, or GNU's base-256
/// (first byte's high bit set).
fn number(field: &[u8]) -> Option<u64> {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        let mut n: u64 = u64::from(field[0] & 0x7f);
        for b in &field[1..] {
            n = n.checked_mul(256)?.checked_add(u64::from(*b))?;
        }
        return Some(n);
    }
    let text: Vec<u8> = field.iter().copied().filter(|b| *b != 0 && *b != b' ').collect();
    if text.is_empty() {
        return Some(0);
    }
    let text = std::str::from_utf8(&text).ok()?;
    u64::from_str_radix(text, 8).ok()
}

/// The text of a NUL-terminated field.
fn field(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    &bytes[..end]
}

fn utf8(bytes: &[u8], what: &str) -> Result<String, Refused> {
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(s.to_string()),
        Err(_) => {
            Err(refused(format!("it holds {what} that is not UTF-8 ({})", named(&String::from_utf8_lossy(bytes)))))
        }
    }
}

fn padding_of(size: u64) -> u64 {
    (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64
}

/// What PAX records say of the next entry: its path and size.
#[derive(Default)]
struct Pax {
    path: Option<String>,
    size: Option<u64>,
}

/// Reads PAX records (`<len> <key>=<value>\n` …), at most [`MAX_HEADER_TEXT`] bytes.
fn pax(records: &[u8]) -> Result<Pax, Refused> {
    let bad = || refused("its PAX records are not well formed");
    let mut out = Pax::default();
    let mut rest = records;
    while !rest.is_empty() && rest[0] != 0 {
        let space = rest.iter().position(|b| *b == b' ').ok_or_else(bad)?;
        let len: usize = std::str::from_utf8(&rest[..space]).ok().and_then(|t| t.parse().ok()).ok_or_else(bad)?;
        if len <= space + 1 || len > rest.len() || rest[len - 1] != b'\n' {
            return Err(bad());
        }
        let record = &rest[space + 1..len - 1];
        let eq = record.iter().position(|b| *b == b'=').ok_or_else(bad)?;
        let (key, value) = (&record[..eq], &record[eq + 1..]);
        match key {
            b"path" => out.path = Some(utf8(value, "a PAX path")?),
            b"size" => {
                let size = std::str::from_utf8(value).ok().and_then(|t| t.parse().ok()).ok_or_else(bad)?;
                out.size = Some(size);
            }
            _ => {}
        }
        rest = &rest[len..];
    }
    Ok(out)
}

impl<R: Read> Archive<R> {
    pub fn new(inner: R) -> Archive<R> {
        Archive { inner, left: 0, padding: 0, ended: false }
    }

    /// Reads and drops what is left of the current entry (its unread body and
    /// padding), in a fixed buffer.
    fn skip_rest(&mut self) -> Result<(), Refused> {
        let mut rest = self.left + self.padding;
        let mut buf = [0u8; 8192];
        while rest > 0 {
            let want = buf.len().min(usize::try_from(rest).unwrap_or(usize::MAX));
            self.inner.read_exact(&mut buf[..want]).map_err(damaged)?;
            rest -= want as u64;
        }
        self.left = 0;
        self.padding = 0;
        Ok(())
    }

    /// A meta entry's text (a long name, PAX records): refused past
    /// [`MAX_HEADER_TEXT`] before any byte of it is read.
    fn header_text(&mut self, size: u64, what: &str) -> Result<Vec<u8>, Refused> {
        if size > MAX_HEADER_TEXT {
            return Err(refused(format!(
                "it holds {what} that declares {size} bytes; at most {MAX_HEADER_TEXT} are allowed (a name is never that long)"
            )));
        }
        let mut text = vec![0u8; size as usize];
        self.inner.read_exact(&mut text).map_err(damaged)?;
        let mut pad = [0u8; BLOCK];
        self.inner.read_exact(&mut pad[..padding_of(size) as usize]).map_err(damaged)?;
        Ok(text)
    }

    /// The next entry's header, or `None` at the archive's end. What is left
    /// of the previous entry is skipped (read in a fixed buffer).
    pub fn next_header(&mut self) -> Result<Option<Header>, Refused> {
        if self.ended {
            return Ok(None);
        }
        self.skip_rest()?;
        let mut long_name: Option<String> = None;
        let mut pax_next = Pax::default();
        // Meta entries before the real one: bounded in number as in size.
        for _ in 0..8 {
            let mut block = [0u8; BLOCK];
            match self.inner.read_exact(&mut block) {
                Ok(()) => {}
                Err(e) => return Err(damaged(e)),
            }
            if block.iter().all(|b| *b == 0) {
                if long_name.is_some() || pax_next.path.is_some() {
                    return Err(refused("it ends after a long name, before the entry it names"));
                }
                self.ended = true;
                return Ok(None);
            }
            let declared = number(&block[148..156]).ok_or_else(|| refused("a header's checksum is not a number"))?;
            let sum: u64 = block
                .iter()
                .enumerate()
                .map(|(i, b)| if (148..156).contains(&i) { u64::from(b' ') } else { u64::from(*b) })
                .sum();
            if sum != declared {
                return Err(refused("a header is damaged (its checksum does not match)"));
            }
            let size = number(&block[124..136]).ok_or_else(|| refused("a header's size is not a number"))?;
            match block[156] {
                b'L' => {
                    let text = self.header_text(size, "a long name")?;
                    long_name = Some(utf8(field(&text), "a long name")?);
                }
                b'K' => {
                    self.header_text(size, "a long link name")?;
                }
                b'x' => {
                    let text = self.header_text(size, "PAX records")?;
                    pax_next = pax(&text)?;
                }
                b'g' => {
                    // Global records: read within the bound, and ignored.
                    self.header_text(size, "global PAX records")?;
                }
                kind => {
                    let name = match (pax_next.path.take(), long_name.take()) {
                        (Some(p), _) => p,
                        (None, Some(l)) => l,
                        (None, None) => {
                            let name = field(&block[..100]);
                            let ustar = &block[257..263] == b"ustar\0";
                            let prefix = if ustar { field(&block[345..500]) } else { &[][..] };
                            if prefix.is_empty() {
                                utf8(name, "a name")?
                            } else {
                                format!("{}/{}", utf8(prefix, "a name")?, utf8(name, "a name")?)
                            }
                        }
                    };
                    let size = pax_next.size.unwrap_or(size);
                    let kind = if kind == b'0' || kind == 0 { Kind::File } else { Kind::Other(kind) };
                    // A folder's or a link's size is not a body to read.
                    let body = if kind == Kind::File { size } else { 0 };
                    self.left = body;
                    self.padding = padding_of(body);
                    return Ok(Some(Header { name, kind, size }));
                }
            }
        }
        Err(refused("it holds more than 8 long names or PAX records in a row"))
    }

    /// The current entry's body: exactly its declared size.
    pub fn body(&mut self) -> Body<'_, R> {
        Body { archive: self }
    }

    /// The next entry, checked against `expected` before any byte of its
    /// body is read: a plain file, canonically named, listed, of its listed
    /// size, not seen before (`seen` holds the names read so far). `None` at
    /// the archive's end.
    pub fn entry(
        &mut self,
        expected: &Expected,
        seen: &mut std::collections::BTreeSet<String>,
    ) -> Result<Option<Header>, Refused> {
        let Some(h) = self.next_header()? else { return Ok(None) };
        let name = named(&h.name);
        if h.kind != Kind::File {
            return Err(refused(format!("it holds {name}, which is not a plain file")));
        }
        // What is listed is canonical ([`Expected::part`]); the second check
        // keeps this so if the list ever were not.
        let Some(listed) = expected.size_of(&h.name) else {
            return Err(refused(format!("it holds {name}, which its list of files does not list")));
        };
        if !canonical(&h.name) {
            return Err(refused(format!("it holds {name}, which is not a plain relative name")));
        }
        if h.size != listed {
            return Err(refused(format!("{name} is {} bytes where its list says {listed}: it was changed", h.size)));
        }
        if !seen.insert(h.name.clone()) {
            return Err(refused(format!("it holds {name} twice")));
        }
        Ok(Some(h))
    }
}

/// The body of the entry whose header was read last: reads end at its
/// declared size.
pub struct Body<'a, R> {
    archive: &'a mut Archive<R>,
}

impl<R: Read> Read for Body<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = buf.len().min(usize::try_from(self.archive.left).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = self.archive.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
        }
        self.archive.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(name: &[u8], kind: u8, size: u64) -> [u8; BLOCK] {
        let mut h = [0u8; BLOCK];
        h[..name.len()].copy_from_slice(name);
        h[100..107].copy_from_slice(b"0000644");
        h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
        h[156] = kind;
        h[257..265].copy_from_slice(b"ustar  \0");
        h[148..156].copy_from_slice(b"        ");
        let sum: u64 = h.iter().map(|b| u64::from(*b)).sum();
        h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        h
    }

    fn entry(out: &mut Vec<u8>, name: &[u8], kind: u8, body: &[u8]) {
        out.extend_from_slice(&header(name, kind, body.len() as u64));
        out.extend_from_slice(body);
        out.resize(out.len() + padding_of(body.len() as u64) as usize, 0);
    }

    fn end(out: &mut Vec<u8>) {
        out.resize(out.len() + 2 * BLOCK, 0);
    }

    #[test]
    fn the_tar_crates_archives_read_the_same_here() {
        let mut b = tar::Builder::new(Vec::new());
        let long = format!("release/{}/x.sql", "d".repeat(150));
        for (name, body) in [("backup.json", &b"{}"[..]), (long.as_str(), b"select 1;")] {
            let mut h = tar::Header::new_gnu();
            h.set_size(body.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            b.append_data(&mut h, name, body).unwrap();
        }
        let bytes = b.into_inner().unwrap();
        let mut a = Archive::new(bytes.as_slice());
        let h = a.next_header().unwrap().unwrap();
        assert_eq!((h.name.as_str(), h.kind, h.size), ("backup.json", Kind::File, 2));
        let mut body = String::new();
        a.body().read_to_string(&mut body).unwrap();
        assert_eq!(body, "{}");
        let h = a.next_header().unwrap().unwrap();
        assert_eq!(h.name, long, "a GNU long name");
        // Its body left unread: skipped.
        assert_eq!(a.next_header().unwrap(), None);
    }

    #[test]
    fn a_long_name_that_declares_more_than_a_few_kib_is_refused_before_it_is_read() {
        let mut bytes = Vec::new();
        // Declares 3 GB and holds nothing: refused at the header.
        bytes.extend_from_slice(&header(b"././@LongLink", b'L', 3 << 30));
        let e = Archive::new(bytes.as_slice()).next_header().unwrap_err();
        assert!(e.0.contains("a long name that declares 3221225472 bytes"), "{e}");
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&header(b"././@PaxHeader", b'x', 1 << 20));
        let e = Archive::new(bytes.as_slice()).next_header().unwrap_err();
        assert!(e.0.contains("PAX records that declares"), "{e}");
    }

    #[test]
    fn pax_records_name_and_size_the_next_entry() {
        let mut bytes = Vec::new();
        let path = format!("data/{}.sqlite", "p".repeat(120));
        let record = format!("path={path}\n");
        let len = record.len() + 4; // "NNN " prefix
        let records = format!("{len} {record}");
        assert_eq!(records.len(), len);
        entry(&mut bytes, b"././@PaxHeader", b'x', records.as_bytes());
        entry(&mut bytes, b"short", b'0', b"abc");
        end(&mut bytes);
        let mut a = Archive::new(bytes.as_slice());
        let h = a.next_header().unwrap().unwrap();
        assert_eq!((h.name, h.size), (path, 3));
        assert_eq!(a.next_header().unwrap(), None);
        // A PAX size stands for the header's.
        let mut bytes = Vec::new();
        entry(&mut bytes, b"././@PaxHeader", b'x', b"10 size=3\n");
        bytes.extend_from_slice(&header(b"sized", b'0', 0));
        bytes.extend_from_slice(b"xyz");
        bytes.resize(bytes.len() + padding_of(3) as usize, 0);
        end(&mut bytes);
        let mut a = Archive::new(bytes.as_slice());
        let h = a.next_header().unwrap().unwrap();
        assert_eq!((h.name.as_str(), h.size), ("sized", 3));
        let mut body = String::new();
        a.body().read_to_string(&mut body).unwrap();
        assert_eq!(body, "xyz");
        assert_eq!(a.next_header().unwrap(), None);
        assert!(pax(b"9 path=x\n").is_ok());
        assert!(pax(b"99 path=x\n").is_err(), "a length past the records");
        assert!(pax(b"x path=x\n").is_err());
    }

    #[test]
    fn a_damaged_header_or_a_short_file_is_a_sentence() {
        let mut bytes = header(b"a", b'0', 10).to_vec();
        bytes[0] = b'b';
        let e = Archive::new(bytes.as_slice()).next_header().unwrap_err();
        assert!(e.0.contains("checksum"), "{e}");
        let bytes = header(b"a", b'0', 10).to_vec();
        let mut a = Archive::new(bytes.as_slice());
        a.next_header().unwrap().unwrap();
        let mut body = Vec::new();
        assert!(a.body().read_to_end(&mut body).is_err(), "the body is cut short");
    }

    #[test]
    fn a_file_cut_inside_a_header_says_it_ends_early() {
        let bytes = header(b"a", b'0', 0);
        let e = Archive::new(&bytes[..300]).next_header().unwrap_err();
        assert_eq!(e.0, "it ends early: the file is cut short");
    }

    #[test]
    fn a_long_name_of_a_few_kib_is_read() {
        let name = format!("{}/x", "n".repeat(3000));
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, &name, &b"x"[..]).unwrap();
        let bytes = b.into_inner().unwrap();
        assert_eq!(Archive::new(bytes.as_slice()).next_header().unwrap().unwrap().name, name);
    }

    #[test]
    fn a_long_name_exactly_at_the_bound_is_read() {
        // The long name's entry holds the name and its NUL: 4096 bytes.
        let name = format!("{}/x", "n".repeat(MAX_HEADER_TEXT as usize - 3));
        let mut bytes = Vec::new();
        let mut text = name.clone().into_bytes();
        text.push(0);
        assert_eq!(text.len() as u64, MAX_HEADER_TEXT);
        entry(&mut bytes, b"././@LongLink", b'L', &text);
        entry(&mut bytes, b"short", b'0', b"");
        end(&mut bytes);
        assert_eq!(Archive::new(bytes.as_slice()).next_header().unwrap().unwrap().name, name);
    }

    #[test]
    fn an_archive_that_ends_after_a_long_name_or_a_pax_path_is_refused() {
        for (meta, kind, text) in
            [(&b"././@LongLink"[..], b'L', &b"a-long-name\0"[..]), (&b"././@PaxHeader"[..], b'x', &b"11 path=ab\n"[..])]
        {
            let mut bytes = Vec::new();
            entry(&mut bytes, meta, kind, text);
            end(&mut bytes);
            let e = Archive::new(bytes.as_slice()).next_header().unwrap_err();
            assert_eq!(e.0, "it ends after a long name, before the entry it names");
        }
    }

    #[test]
    fn a_ustar_name_is_its_prefix_and_its_name() {
        // The tar crate splits a long path of a POSIX ustar header into its
        // prefix field and its name field.
        let path = format!("{}/{}", "p".repeat(120), "n".repeat(60));
        let mut h = tar::Header::new_ustar();
        h.set_path(&path).unwrap();
        h.set_size(0);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        let mut bytes = h.as_bytes().to_vec();
        end(&mut bytes);
        assert_eq!(Archive::new(bytes.as_slice()).next_header().unwrap().unwrap().name, path);
    }

    #[test]
    fn an_entry_of_type_nul_is_a_file_and_a_folder_is_not() {
        let mut bytes = Vec::new();
        entry(&mut bytes, b"old", 0, b"abc");
        entry(&mut bytes, b"dir", b'5', b"");
        end(&mut bytes);
        let mut a = Archive::new(bytes.as_slice());
        assert_eq!(a.next_header().unwrap().unwrap().kind, Kind::File);
        assert_eq!(a.next_header().unwrap().unwrap().kind, Kind::Other(b'5'));
    }

    #[test]
    fn only_a_zstd_file_is_opened_as_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut tar = Vec::new();
        entry(&mut tar, b"backup.json", b'0', b"{}");
        end(&mut tar);
        let plain = dir.path().join("plain");
        std::fs::write(&plain, &tar).unwrap();
        let short = dir.path().join("short");
        std::fs::write(&short, &ZSTD_MAGIC[..2]).unwrap();
        for f in [&plain, &short] {
            let e = open_zstd(f).err().expect("refused");
            assert_eq!(e.0, "it is not a zstd-compressed archive", "{f:?}");
        }
        let packed = dir.path().join("packed");
        std::fs::write(&packed, zstd::encode_all(tar.as_slice(), 3).unwrap()).unwrap();
        let h = open_zstd(&packed).unwrap().next_header().unwrap().unwrap();
        assert_eq!(h.name, "backup.json");
    }

    #[test]
    fn entries_are_checked_against_what_is_expected_before_they_are_read() {
        let mut expected = Expected::new();
        expected.part("data/app.sqlite", 3).unwrap();
        assert!(expected.part("data/app.sqlite", 3).is_err(), "listed twice");
        assert!(expected.part("../x", 3).is_err());
        let e = expected.part("data/app.sqlite/x", 3).unwrap_err();
        assert_eq!(
            e.0,
            "\"data/app.sqlite\" and \"data/app.sqlite/x\" collide: the first is a file, and the second would be inside it"
        );
        let e = expected.part("data", 3).unwrap_err();
        assert!(e.0.starts_with("\"data\" and \"data/app.sqlite\" collide"), "{e}");
        let case = |entries: &[(&[u8], u8, &[u8])]| {
            let mut bytes = Vec::new();
            for (n, k, b) in entries {
                entry(&mut bytes, n, *k, b);
            }
            end(&mut bytes);
            let mut a = Archive::new(std::io::Cursor::new(bytes));
            let mut seen = Default::default();
            let mut out = Vec::new();
            while let Some(h) = a.entry(&expected, &mut seen)? {
                out.push(h.name);
            }
            Ok::<_, Refused>(out)
        };
        assert_eq!(case(&[(b"data/app.sqlite", b'0', b"abc")]).unwrap(), ["data/app.sqlite"]);
        let e = case(&[(b"data/app.sqlite", b'0', b"abcd")]).unwrap_err();
        assert!(e.0.contains("\"data/app.sqlite\" is 4 bytes where its list says 3"), "{e}");
        let e = case(&[(b"data/app.sqlite", b'0', b"abc"), (b"data/app.sqlite", b'0', b"abc")]).unwrap_err();
        assert!(e.0.contains("twice"), "{e}");
        let e = case(&[(b"evil", b'0', b"abc")]).unwrap_err();
        assert!(e.0.contains("\"evil\", which its list of files does not list"), "{e}");
        let e = case(&[(b"data/app.sqlite", b'2', b"")]).unwrap_err();
        assert!(e.0.contains("not a plain file"), "{e}");
        let e = case(&[(b"data//app.sqlite", b'0', b"abc")]).unwrap_err();
        assert!(e.0.contains("does not list"), "{e}");
        let e = case(&[(b"a\x1b[2Kb", b'0', b"abc")]).unwrap_err();
        assert!(!e.0.contains('\u{1b}'), "a name is escaped: {e}");
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            /// Whatever the bytes, the reader answers (a header, the end or a
            /// sentence) without panicking and without reading a body it was
            /// not asked to.
            #[test]
            fn any_bytes_are_read_or_refused_with_a_sentence(
                bytes in proptest::collection::vec(any::<u8>(), 0..3000),
                kind in prop_oneof![Just(b'0'), Just(b'L'), Just(b'x'), Just(b'g'), Just(b'5'), any::<u8>()],
                size in prop_oneof![0u64..5000, Just(0o77777777777u64), Just(3u64 << 30)],
            ) {
                let mut data = super::header(b"name", kind, size).to_vec();
                data.extend_from_slice(&bytes);
                let mut a = Archive::new(data.as_slice());
                for _ in 0..4 {
                    match a.next_header() {
                        Ok(Some(_)) => {
                            let mut sink = Vec::new();
                            let _ = std::io::Read::read_to_end(&mut a.body().take(8192), &mut sink);
                        }
                        Ok(None) | Err(_) => break,
                    }
                }
                let mut raw = Archive::new(bytes.as_slice());
                let _ = raw.next_header();
            }
        }
    }

    #[test]
    fn sizes_may_be_base_256_and_canonical_names_are_plain() {
        assert_eq!(number(&[0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]), Some(256));
        assert_eq!(number(b"00000000012\0"), Some(10));
        assert_eq!(number(&[0xff; 12]), None, "more than a u64");
        for ok in ["a", "data/app.sqlite", "release/migrations/001.sql"] {
            assert!(canonical(ok), "{ok}");
        }
        for bad in ["", "/a", "a/", "a//b", "./a", "a/../b", "a\\b", "a\0b"] {
            assert!(!canonical(bad), "{bad:?}");
        }
    }
}
