//! The engineer's reach into one app's workspace, and no further.
//!
//! Every path an agent sends is relative to the workspace and checked twice:
//! by its words (not empty, no NUL byte, not absolute, no `..`, never `.git`,
//! `target` or `.cargo`) and by where it really leads (the real path of the
//! deepest existing part must be inside the workspace's real path, and may
//! not be inside `.git`, `target` or `.cargo` either). The toolchain files
//! (`rust-toolchain`, `rust-toolchain.toml`) may be read, never changed:
//! cargo's and rustup's configuration would choose the programs a build runs. A symlink that leads out is refused for
//! reading as for writing; listing and searching never follow one. A read
//! returns at most [`READ_PAGE`] bytes per page, a write takes at most
//! [`MAX_WRITE`] bytes, a search returns at most [`MAX_MATCHES`] matches for a
//! pattern of at most [`MAX_PATTERN`] bytes. Writes replace the file
//! atomically (a temporary file in the same folder, renamed), and never
//! through a symlink left at the final name.

use std::io::Write as _;
use std::path::{Component, Path, PathBuf};

use anyhow::Context as _;
use serde::Serialize;

use crate::error::{ErrorKind, kinded};

/// The most a read returns per page.
pub const READ_PAGE: usize = 256 * 1024;
/// The most a write (or the result of an edit) may hold.
pub const MAX_WRITE: usize = 1024 * 1024;
/// The most matches a search returns.
pub const MAX_MATCHES: usize = 200;
/// The longest search pattern.
pub const MAX_PATTERN: usize = 1024;
/// The most entries a listing returns.
pub const MAX_LIST: usize = 5000;
/// A file larger than this is not searched.
const MAX_SEARCHED_FILE: u64 = MAX_WRITE as u64;
/// The longest line of a match returned.
const MAX_MATCH_LINE: usize = 300;
/// The longest path accepted.
const MAX_PATH: usize = 1024;

/// The folders the engineer never reads or writes: git's (its remotes may
/// hold tokens), the builds' output, and cargo's configuration (it names the
/// programs a build runs).
const NEVER: &[&str] = &[".git", "target", ".cargo"];

/// The files the engineer reads but never changes: rustup's choice of the
/// toolchain that builds the workspace.
const READ_ONLY: &[&str] = &["rust-toolchain", "rust-toolchain.toml"];

/// One app's workspace, by its real path.
#[derive(Debug, Clone)]
pub struct Workspace {
    real: PathBuf,
}

/// An entry of a listing.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    pub path: String,
    /// `file`, `folder` or `symlink` (a symlink is listed, never followed).
    pub kind: &'static str,
    pub bytes: u64,
}

/// A page of a file.
#[derive(Debug, Clone, Serialize)]
pub struct Page {
    pub path: String,
    pub bytes: u64,
    pub offset: u64,
    pub text: String,
    /// Where the next page starts, when there is more.
    pub next_offset: Option<u64>,
}

/// One line that matched a search.
#[derive(Debug, Clone, Serialize)]
pub struct Match {
    pub path: String,
    pub line: usize,
    pub text: String,
}

/// A change to one file, not yet made: what the person is asked about.
#[derive(Debug, Clone)]
pub struct Change {
    /// The file's real path.
    target: PathBuf,
    /// The workspace-relative path, as shown.
    pub path: String,
    /// What the file holds now (`None`: it does not exist).
    before: Option<String>,
    /// What it will hold (`None`: it is deleted).
    after: Option<String>,
    /// The file held bytes that are not UTF-8 (`before` holds them lossily).
    was_not_text: bool,
}

fn invalid(msg: impl Into<String>) -> anyhow::Error {
    kinded(ErrorKind::InvalidInput, msg)
}

fn denied(msg: impl Into<String>) -> anyhow::Error {
    kinded(ErrorKind::Denied, msg)
}

impl Workspace {
    /// The workspace at `dir` (which must exist).
    pub fn open(dir: &Path) -> anyhow::Result<Workspace> {
        let real = std::fs::canonicalize(dir).map_err(|e| {
            kinded(ErrorKind::NotFound, format!("the workspace {} cannot be opened ({e})", dir.display()))
        })?;
        Ok(Workspace { real })
    }

    /// Checks `rel` by its words and returns its clean components.
    fn words(rel: &str) -> anyhow::Result<PathBuf> {
        if rel.contains('\0') {
            return Err(invalid("a path may not contain a NUL byte"));
        }
        if rel.len() > MAX_PATH {
            return Err(invalid(format!("a path may be at most {MAX_PATH} bytes")));
        }
        let p = Path::new(rel);
        if p.is_absolute() || rel.starts_with('~') {
            return Err(invalid(format!(
                "`{}` is not relative to the workspace; give a path like src/lib.rs",
                rel.escape_debug()
            )));
        }
        let mut clean = PathBuf::new();
        for c in p.components() {
            match c {
                Component::Normal(n) => {
                    if NEVER.iter().any(|never| n == *never) {
                        return Err(denied(format!(
                            "`{}` is inside {}/, which the engineer never reads or writes",
                            rel.escape_debug(),
                            n.to_string_lossy()
                        )));
                    }
                    clean.push(n);
                }
                Component::CurDir => {}
                Component::ParentDir => {
                    return Err(invalid(format!(
                        "`{}` climbs out with `..`; paths stay inside the workspace",
                        rel.escape_debug()
                    )));
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(invalid(format!("`{}` is not relative to the workspace", rel.escape_debug())));
                }
            }
        }
        Ok(clean)
    }

    /// Checks where a real path leads: inside the workspace, not in `.git` or `target`.
    fn inside(&self, rel: &str, real: &Path) -> anyhow::Result<()> {
        let Ok(within) = real.strip_prefix(&self.real) else {
            return Err(denied(format!(
                "`{}` leads outside the workspace through a symlink; the engineer reads and writes only inside it",
                rel.escape_debug()
            )));
        };
        if within.components().any(|c| NEVER.iter().any(|n| c.as_os_str() == *n)) {
            return Err(denied(format!(
                "`{}` leads into .git/, target/ or .cargo/ through a symlink, which the engineer never reads or writes",
                rel.escape_debug()
            )));
        }
        Ok(())
    }

    /// Refuses a change of a file the engineer may only read.
    fn changeable(&self, rel: &str, real: &Path) -> anyhow::Result<()> {
        let named = Path::new(rel).file_name();
        if let Some(file) = [named, real.file_name()].into_iter().flatten().find(|n| READ_ONLY.iter().any(|r| n == r)) {
            return Err(denied(format!(
                "`{}` is {}, which chooses the toolchain that builds the workspace; the engineer never changes it (the person can)",
                rel.escape_debug(),
                file.to_string_lossy()
            )));
        }
        Ok(())
    }

    /// The real path of an existing `rel`, checked.
    /// Whether `rel` names something inside the workspace that the engineer
    /// may read.
    pub fn has(&self, rel: &str) -> bool {
        self.existing(rel).is_ok()
    }

    fn existing(&self, rel: &str) -> anyhow::Result<PathBuf> {
        let clean = Self::words(rel)?;
        let joined = self.real.join(&clean);
        let real = std::fs::canonicalize(&joined).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                kinded(ErrorKind::NotFound, format!("`{}` does not exist in the workspace", rel.escape_debug()))
            } else {
                anyhow::Error::from(e).context(format!("cannot resolve `{}`", rel.escape_debug()))
            }
        })?;
        self.inside(rel, &real)?;
        Ok(real)
    }

    /// Where a write of `rel` lands: the real path of its deepest existing
    /// part, checked, with the rest appended.
    fn for_write(&self, rel: &str) -> anyhow::Result<PathBuf> {
        let clean = Self::words(rel)?;
        if clean.as_os_str().is_empty() {
            return Err(invalid("give a file's path, not the workspace itself"));
        }
        let mut existing = self.real.join(&clean);
        let mut rest = Vec::new();
        while std::fs::symlink_metadata(&existing).is_err() {
            rest.push(existing.file_name().expect("a clean path has names").to_os_string());
            existing = existing.parent().expect("inside the workspace").to_path_buf();
        }
        let real = std::fs::canonicalize(&existing).map_err(|_| {
            denied(format!("`{}` passes through a symlink that leads nowhere; remove it first", rel.escape_debug()))
        })?;
        self.inside(rel, &real)?;
        let mut target = real;
        for n in rest.into_iter().rev() {
            target.push(n);
        }
        Ok(target)
    }

    fn shown(&self, real: &Path) -> String {
        real.strip_prefix(&self.real).unwrap_or(real).to_string_lossy().into_owned()
    }

    /// The files under `under` (the whole workspace when empty), never
    /// `.git/` or `target/`, never following a symlink.
    pub fn list(&self, under: &str) -> anyhow::Result<(Vec<Entry>, bool)> {
        // `.` is the workspace too (by its words, it is the empty path).
        let start = if under.is_empty() { self.real.clone() } else { self.existing(under)? };
        let mut out = Vec::new();
        let mut stack = vec![start];
        let mut truncated = false;
        while let Some(dir) = stack.pop() {
            let mut entries: Vec<_> = std::fs::read_dir(&dir)
                .with_context(|| format!("cannot list {}", self.shown(&dir)))?
                .filter_map(Result::ok)
                .collect();
            entries.sort_by_key(|e| std::cmp::Reverse(e.file_name()));
            for e in entries {
                if NEVER.iter().any(|n| e.file_name() == *n) {
                    continue;
                }
                let Ok(meta) = e.path().symlink_metadata() else { continue };
                let kind = if meta.is_symlink() {
                    "symlink"
                } else if meta.is_dir() {
                    stack.push(e.path());
                    "folder"
                } else {
                    "file"
                };
                if out.len() == MAX_LIST {
                    truncated = true;
                    break;
                }
                out.push(Entry {
                    path: self.shown(&e.path()),
                    kind,
                    bytes: if kind == "file" { meta.len() } else { 0 },
                });
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok((out, truncated))
    }

    /// A page of the text file `rel`, from byte `offset`.
    pub fn read(&self, rel: &str, offset: u64) -> anyhow::Result<Page> {
        let real = self.existing(rel)?;
        if real.is_dir() {
            return Err(invalid(format!("`{}` is a folder; source_list lists it", rel.escape_debug())));
        }
        let bytes = std::fs::read(&real).with_context(|| format!("cannot read `{}`", rel.escape_debug()))?;
        let text = std::str::from_utf8(&bytes).map_err(|_| {
            invalid(format!(
                "`{}` is not UTF-8 text ({} bytes); the engineer reads only text",
                rel.escape_debug(),
                bytes.len()
            ))
        })?;
        let len = bytes.len() as u64;
        if offset > len {
            return Err(invalid(format!("offset {offset} is past the end of `{}` ({len} bytes)", rel.escape_debug())));
        }
        let mut start = offset as usize;
        while !text.is_char_boundary(start) {
            start -= 1;
        }
        let mut end = (start + READ_PAGE).min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        Ok(Page {
            path: self.shown(&real),
            bytes: len,
            offset: start as u64,
            text: text[start..end].to_string(),
            next_offset: (end < text.len()).then_some(end as u64),
        })
    }

    /// Lines matching the regular expression `pattern`, in the files under
    /// `under`; at most [`MAX_MATCHES`]. Says whether there were more.
    pub fn search(&self, pattern: &str, under: &str) -> anyhow::Result<(Vec<Match>, bool)> {
        if pattern.len() > MAX_PATTERN {
            return Err(invalid(format!("a pattern may be at most {MAX_PATTERN} bytes")));
        }
        let re = regex::RegexBuilder::new(pattern)
            .size_limit(1 << 20)
            .dfa_size_limit(1 << 20)
            .build()
            .map_err(|e| invalid(format!("the pattern is not a regular expression this search reads: {e}")))?;
        let (entries, _) = self.list(under)?;
        let mut out = Vec::new();
        for e in entries.iter().filter(|e| e.kind == "file" && e.bytes <= MAX_SEARCHED_FILE) {
            let Ok(text) = std::fs::read_to_string(self.real.join(&e.path)) else { continue };
            for (i, line) in text.lines().enumerate() {
                if re.is_match(line) {
                    if out.len() == MAX_MATCHES {
                        return Ok((out, true));
                    }
                    out.push(Match {
                        path: e.path.clone(),
                        line: i + 1,
                        text: line.chars().take(MAX_MATCH_LINE).collect(),
                    });
                }
            }
        }
        Ok((out, false))
    }

    /// The change that replaces the one occurrence of `old` in `rel` with `new`.
    pub fn edit(&self, rel: &str, old: &str, new: &str) -> anyhow::Result<Change> {
        if old.is_empty() {
            return Err(invalid("the span to replace is empty; give text that occurs once in the file"));
        }
        let real = self.existing(rel)?;
        self.changeable(rel, &real)?;
        let before = self.text_of(rel, &real)?;
        let found = before.matches(old).count();
        match found {
            0 => {
                return Err(invalid(format!(
                    "the span is not in `{}`; read the file again and copy the text exactly",
                    rel.escape_debug()
                )));
            }
            1 => {}
            n => {
                return Err(invalid(format!(
                    "the span occurs {n} times in `{}`; include more of the text around it so it occurs once",
                    rel.escape_debug()
                )));
            }
        }
        let after = before.replacen(old, new, 1);
        cap(&after)?;
        Ok(Change {
            path: self.shown(&real),
            target: real,
            before: Some(before),
            after: Some(after),
            was_not_text: false,
        })
    }

    /// The change that writes `content` to `rel` (made or replaced).
    pub fn write(&self, rel: &str, content: &str) -> anyhow::Result<Change> {
        cap(content)?;
        let target = self.for_write(rel)?;
        self.changeable(rel, &target)?;
        if target.is_dir() {
            return Err(invalid(format!("`{}` is a folder; give a file's path", rel.escape_debug())));
        }
        let before = if target.exists() { Some(self.text_of(rel, &target)?) } else { None };
        Ok(Change { path: self.shown(&target), target, before, after: Some(content.to_string()), was_not_text: false })
    }

    /// The change that deletes the file `rel`.
    pub fn delete(&self, rel: &str) -> anyhow::Result<Change> {
        let real = self.existing(rel)?;
        self.changeable(rel, &real)?;
        if real.is_dir() {
            return Err(invalid(format!(
                "`{}` is a folder; the engineer deletes files one at a time",
                rel.escape_debug()
            )));
        }
        if real == self.real.join(crate::manifest::MANIFEST_FILE) {
            return Err(invalid("autoapp.toml is what makes the workspace an app; edit it instead of deleting it"));
        }
        let bytes = std::fs::read(&real).ok();
        let was_not_text = bytes.as_deref().is_some_and(|b| std::str::from_utf8(b).is_err());
        let before = bytes.map(|b| String::from_utf8_lossy(&b).into_owned());
        Ok(Change { path: self.shown(&real), target: real, before, after: None, was_not_text })
    }

    fn text_of(&self, rel: &str, real: &Path) -> anyhow::Result<String> {
        let bytes = std::fs::read(real).with_context(|| format!("cannot read `{}`", rel.escape_debug()))?;
        String::from_utf8(bytes)
            .map_err(|_| invalid(format!("`{}` is not UTF-8 text; the engineer changes only text", rel.escape_debug())))
    }
}

fn cap(text: &str) -> anyhow::Result<()> {
    if text.len() > MAX_WRITE {
        return Err(invalid(format!(
            "a file the engineer writes may hold at most {} KiB; this would hold {} KiB",
            MAX_WRITE / 1024,
            text.len().div_ceil(1024)
        )));
    }
    Ok(())
}

/// The longest diff a person is asked about. A change whose diff is longer
/// is refused before anyone is asked: a person approves only what they were
/// shown whole.
pub const MAX_DIFF: usize = 512 * 1024;

/// Whether `text` reads as a binary file: a NUL byte or another control
/// character than tab, line feed, carriage return and form feed.
fn binary(text: &str) -> bool {
    text.chars().any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r' | '\u{c}'))
}

impl Change {
    /// What the person is shown: a line that says so when the file is binary,
    /// then the change as a unified diff (`a/` before, `b/` after), whole.
    /// Refused (invalid input) when it is longer than [`MAX_DIFF`].
    pub fn shown(&self) -> anyhow::Result<String> {
        let before = self.before.as_deref().unwrap_or("");
        let after = self.after.as_deref().unwrap_or("");
        let (from, to) = match (&self.before, &self.after) {
            (None, _) => ("/dev/null".to_string(), format!("b/{}", self.path)),
            (_, None) => (format!("a/{}", self.path), "/dev/null".to_string()),
            _ => (format!("a/{}", self.path), format!("b/{}", self.path)),
        };
        let mut text = String::new();
        if self.after.as_deref().is_some_and(binary) {
            text.push_str(
                "note: this writes a BINARY file (it holds NUL or control bytes); they are shown as they are\n",
            );
        }
        if self.before.as_deref().is_some_and(binary) || self.was_not_text {
            text.push_str(
                "note: the file as it is now is BINARY or not UTF-8 text; its old content is shown as text\n",
            );
        }
        let diff = similar::TextDiff::from_lines(before, after);
        let diff = diff.unified_diff().context_radius(3).header(&from, &to).to_string();
        // Bidi overrides and zero-width characters change what the person
        // reads without being seen: each is shown as its escape.
        let shown = crate::elsewhere::text::show_format(&diff);
        if matches!(shown, std::borrow::Cow::Owned(_)) {
            text.push_str("note: this change holds invisible format characters (bidi controls, zero-width); each is shown as \\u{…}\n");
        }
        text.push_str(&shown);
        if text.len() > MAX_DIFF {
            return Err(invalid(format!(
                "this change's diff is {} KiB, and a person is shown at most {} KiB of one change; split it into smaller changes (source_edit, or several files)",
                text.len().div_ceil(1024),
                MAX_DIFF / 1024
            )));
        }
        Ok(text)
    }

    /// Makes the change, if the file still holds what the question showed.
    pub fn apply(&self) -> anyhow::Result<()> {
        let now = match std::fs::read(&self.target) {
            Ok(b) => Some(String::from_utf8_lossy(&b).into_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(anyhow::Error::from(e).context(format!("cannot read `{}`", self.path))),
        };
        if now != self.before {
            return Err(kinded(
                ErrorKind::Conflict,
                format!("`{}` changed while the question waited; nothing was written; read it again", self.path),
            ));
        }
        match &self.after {
            None => std::fs::remove_file(&self.target).with_context(|| format!("cannot delete `{}`", self.path)),
            Some(text) => {
                write_file(&self.target, text.as_bytes()).with_context(|| format!("cannot write `{}`", self.path))
            }
        }
    }

    /// A one-line summary for the answer.
    pub fn summary(&self) -> String {
        match (&self.before, &self.after) {
            (None, Some(a)) => format!("created {} ({} bytes)", self.path, a.len()),
            (Some(_), Some(a)) => format!("wrote {} ({} bytes)", self.path, a.len()),
            (_, None) => format!("deleted {}", self.path),
        }
    }
}

/// Writes `bytes` to `target` through a temporary file in the same folder,
/// renamed over it: never through a symlink at the final name.
fn write_file(target: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = target.parent().context("a file has a folder")?;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".autoapp-engineer-{}.tmp", crate::secret::random_hex()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .mode(0o644)
        .open(&tmp)?;
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, target)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
