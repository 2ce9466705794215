//! `autoapp backup` and `autoapp restore`.
//!
//! A backup is one file: a tar archive compressed with zstd, whose first entry
//! is `backup.json` (format, version, app, when, the active release, and every
//! other entry's size and SHA-256), then `data/*.sqlite` (each a consistent
//! copy made with SQLite's online backup while the app may be serving and
//! writing), `release/…` (the active release's folder: component, manifest,
//! migrations, release.json) and `grants.json`.
//!
//! A restore reads it whole into a staging folder `apps/.restore-<id>-<random>-<pid>/`
//! and checks everything before anything is placed: only listed names, no
//! more bytes than listed, every hash, the release's id recomputed from its
//! files, SQLite's integrity check of each database, the release's migrations
//! applied to the data. Grants that name a folder or a program this computer
//! does not have are left out, and said. Then the staging folder becomes
//! `apps/<id>` in one rename that never replaces anything. A crash before
//! that rename leaves a staging folder, removed by [`recover`] at the next
//! command; after it, the app is whole, and a marker left in it makes
//! [`recover`] write the restore's row if the crash came before it.

use std::io::{Read as _, Write as _};
use std::path::{Component, Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::caps::store;
use crate::error::{ErrorKind, kinded};
use crate::gate::Caller;
use crate::gate::record::recorded;
use crate::grants::Grants;
use crate::manifest::{AppId, MANIFEST_FILE};
use crate::release::{self, COMPONENT_FILE, ReleaseInputs, journal, short};
use crate::root::{AppPaths, Root, sync_dir, write_atomic};

/// What `backup.json` calls the format.
pub const FORMAT: &str = "autoapp-backup";
/// The version this Autoapp writes and the newest it reads.
pub const VERSION: u32 = 1;
/// The file name's ending.
pub const EXTENSION: &str = "autoapp-backup";

const MANIFEST: &str = "backup.json";
const GRANTS: &str = "grants.json";
/// The most `backup.json` may be.
const MAX_MANIFEST: u64 = 4 << 20;
/// The marker a restored app holds until its row is written.
const RESTORED_MARKER: &str = ".restored.json";
/// In a backup's copy folder: where its partial file is (for recovery).
const PARTIAL_NOTE: &str = "partial";
/// Where the app's last backup is said.
const LAST_BACKUP: &str = "last-backup.json";

/// `backup.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    /// The Autoapp that wrote it.
    pub autoapp: String,
    pub app: String,
    pub taken_at: String,
    /// The active release when it was taken.
    pub release: String,
    pub files: Vec<Entry>,
}

/// One file of a backup.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

/// What a backup did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BackedUp {
    pub app: String,
    pub file: PathBuf,
    pub bytes: u64,
    pub release: String,
    pub taken_at: String,
}

/// What a restore did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Restored {
    pub app: String,
    pub release: String,
    /// When the backup was taken, and of which app.
    pub taken_at: String,
    pub backup_of: String,
    /// Capabilities the release asks for that are not granted here: the
    /// person grants them again (`autoapp grant`).
    pub grant_again: Vec<String>,
    /// The grants the backup carried that hold on this computer, kept: said,
    /// so that a backup from elsewhere never grants anything unseen.
    pub grants_kept: Vec<String>,
}

/// Each grant in words: `network:<origin>`, `files:<name> → <path> (read)`,
/// `spawn:<program> → <path>`.
fn grant_lines(g: &Grants) -> Vec<String> {
    let access =
        |a: crate::manifest::Access| if a == crate::manifest::Access::Write { "read and write" } else { "read" };
    g.network
        .iter()
        .map(|o| format!("network:{o}"))
        .chain(g.files.iter().map(|(n, f)| format!("files:{n} → {} ({})", f.path.display(), access(f.access))))
        .chain(g.spawn.iter().map(|(n, p)| format!("spawn:{n} → {}", p.display())))
        .collect()
}

/// The file name a backup of `app` gets when only a folder is given.
pub fn default_name(app: &AppId) -> String {
    format!("{app}-{}.{EXTENSION}", journal::stamp_now())
}

/// The app's last backup, if it has one.
pub fn last(paths: &AppPaths) -> Option<BackedUp> {
    let text = std::fs::read_to_string(paths.dir.join(LAST_BACKUP)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Backs `app` up to `to` (a new file, or a folder to write a new file in;
/// default: the current folder), recorded in the app's record.
pub fn back_up(
    root: &Root,
    caller: &Caller,
    app: &AppId,
    to: Option<&Path>,
    progress: &dyn Fn(&str),
) -> anyhow::Result<BackedUp> {
    let paths = root.app(app);
    if !paths.exists() {
        return Err(kinded(ErrorKind::NotFound, crate::error::no_such_app(app)));
    }
    let done = write_backup(root, &paths, to, progress);
    let arguments = serde_json::json!({ "to": to });
    let b = recorded(&paths, caller, "backup", arguments, done, |b| {
        // The file's name (a whole path would read as a secret to the record's sanitiser).
        let name = b.file.file_name().unwrap_or_default().to_string_lossy();
        (b.release.clone(), format!("wrote {name} ({})", super::said(b.bytes)))
    })?;
    write_atomic(&paths.dir.join(LAST_BACKUP), serde_json::to_string_pretty(&b)?.as_bytes())?;
    Ok(b)
}

fn write_backup(root: &Root, paths: &AppPaths, to: Option<&Path>, progress: &dyn Fn(&str)) -> anyhow::Result<BackedUp> {
    let app = &paths.id;
    // Shared: other backups go on; an activation, rollback, prune or removal
    // meanwhile is refused (conflict), never queued.
    let _lock = journal::lock(paths, false)?;
    if let Some(j) = journal::journal(paths)? {
        return Err(kinded(
            ErrorKind::Conflict,
            format!(
                "an interrupted {:?} of {app} (step {:?}) waits for recovery; run any command again and it is finished or undone first, then back up",
                j.op, j.step
            ),
        ));
    }
    let release = release::active(paths)?.with_context(|| {
        format!("{app} has no active release, so it has no data to back up yet; activate one with `autoapp activate {app} RELEASE`")
    })?;
    let (file, ours) = destination(app, to)?;
    // Its own copy folder and partial file: two backups at once (two clicks,
    // two tabs) never share one. The pid comes last: recovery reads it.
    let unique = format!("{}-{}", &crate::secret::random_hex()[..8], std::process::id());
    let staging = root.dir().join("cache").join(format!("backup-{app}-{unique}"));
    let partial =
        file.with_file_name(format!(".{}.partial-{unique}", file.file_name().unwrap_or_default().to_string_lossy(),));
    let result = (|| {
        std::fs::create_dir_all(staging.join("data"))?;
        write_atomic(&staging.join(PARTIAL_NOTE), partial.to_string_lossy().as_bytes())?;
        let taken_at = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
        // The data first: each database as of one moment, while the app may write.
        let mut files: Vec<(String, PathBuf)> = Vec::new();
        let mut names: Vec<String> = std::fs::read_dir(paths.data())
            .with_context(|| format!("cannot read {}", paths.data().display()))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sqlite"))
            .collect();
        names.sort();
        for name in names {
            let copy = staging.join("data").join(&name);
            store::back_up_file(&paths.data().join(&name), &copy)?;
            let bytes = std::fs::metadata(&copy).map(|m| m.len()).unwrap_or(0);
            progress(&format!("copied data/{name} ({})", super::said(bytes)));
            files.push((format!("data/{name}"), copy));
        }
        journal::pause("backup:copied");
        let dir = paths.release(&release);
        for rel in release::files_of(&dir)? {
            files.push((format!("release/{rel}"), dir.join(&rel)));
        }
        // A copy, so that what is hashed is what is written even if a grant changes meanwhile.
        let grants = paths.dir.join(GRANTS);
        if grants.is_file() {
            let copy = staging.join(GRANTS);
            std::fs::copy(&grants, &copy).context("cannot copy the grants")?;
            files.push((GRANTS.to_string(), copy));
        }
        let mut entries = Vec::new();
        for (name, path) in &files {
            let (bytes, sha256) = hash_file(path)?;
            entries.push(Entry { path: name.clone(), bytes, sha256 });
        }
        let manifest = Manifest {
            format: FORMAT.into(),
            version: VERSION,
            autoapp: env!("CARGO_PKG_VERSION").into(),
            app: app.to_string(),
            taken_at: taken_at.clone(),
            release: release.clone(),
            files: entries,
        };
        let out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&partial)
            .with_context(|| format!("cannot create {}", partial.display()))?;
        progress(&format!("writing {}", file.display()));
        let mut tar = tar::Builder::new(zstd::Encoder::new(out, 3)?);
        let text = serde_json::to_vec_pretty(&manifest)?;
        append(&mut tar, MANIFEST, &mut text.as_slice(), text.len() as u64)?;
        for (name, path) in &files {
            let f = std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
            let len = f.metadata()?.len();
            append(&mut tar, name, &mut f.take(len), len)?;
        }
        let out = tar.into_inner()?.finish()?;
        out.sync_all()?;
        drop(out);
        journal::fault("backup:written");
        // Never over a file that appeared meanwhile; a name of ours moves on
        // to the next number instead (two backups in one second).
        let mut named = file.clone();
        for n in 2.. {
            match rename_new(&partial, &named) {
                Ok(()) => break,
                Err(e) if ours && e.raw_os_error() == Some(libc::EEXIST) && n < 100 => {
                    let stem = file.file_stem().unwrap_or_default().to_string_lossy();
                    named = file.with_file_name(format!("{stem}-{n}.{EXTENSION}"));
                }
                Err(e) => return Err(e).with_context(|| format!("cannot name the backup {}", named.display())),
            }
        }
        if let Some(parent) = named.parent() {
            sync_dir(parent)?;
        }
        let bytes = std::fs::metadata(&named)?.len();
        Ok(BackedUp { app: app.to_string(), file: named, bytes, release: release.clone(), taken_at })
    })();
    let _ = std::fs::remove_dir_all(&staging);
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result.map_err(|e: anyhow::Error| {
        e.context(format!(
            "no backup of {app} was written, and nothing of it is left (when the disk is full: free some space, or choose another folder with --to)"
        ))
    })
}

/// Where a backup goes: `to` (a new file), or a new file in the folder `to`
/// (default: the current one).
/// Where a backup goes, and whether the name is ours to change (a folder was
/// given, not a file).
fn destination(app: &AppId, to: Option<&Path>) -> anyhow::Result<(PathBuf, bool)> {
    // In a folder, a name of our own: another in the same second gets `-2`.
    let in_folder = |dir: &Path| {
        let name = default_name(app);
        let stem = name.trim_end_matches(&format!(".{EXTENSION}")).to_string();
        (1..)
            .map(|n| if n == 1 { dir.join(&name) } else { dir.join(format!("{stem}-{n}.{EXTENSION}")) })
            .find(|p| !p.exists())
            .expect("an unused name")
    };
    let (file, ours) = match to {
        None => (in_folder(&std::env::current_dir().context("cannot find the current folder")?), true),
        Some(p) if p.is_dir() => (in_folder(p), true),
        Some(p) => (p.to_path_buf(), false),
    };
    let file = if file.is_absolute() { file } else { std::env::current_dir()?.join(file) };
    if file.exists() {
        return Err(kinded(
            ErrorKind::Conflict,
            format!(
                "{} exists; a backup never writes over a file: choose another name, or a folder (`--to DIR`)",
                file.display()
            ),
        ));
    }
    let parent = file.parent().context("a backup file has a folder")?;
    anyhow::ensure!(parent.is_dir(), "the folder {} does not exist; create it, or choose another", parent.display());
    Ok((file, ours))
}

fn append<W: std::io::Write>(
    tar: &mut tar::Builder<W>,
    name: &str,
    data: &mut dyn std::io::Read,
    len: u64,
) -> anyhow::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(len);
    header.set_mode(0o644);
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mtime(0);
    tar.append_data(&mut header, name, data).with_context(|| format!("cannot write {name} to the backup"))?;
    Ok(())
}

fn hash_file(path: &Path) -> anyhow::Result<(u64, String)> {
    let mut f = std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut h = Sha256::new();
    let bytes = std::io::copy(&mut f, &mut h)?;
    Ok((bytes, hex::encode(h.finalize())))
}

/// Renames `from` to `to` unless `to` exists (atomically: never replaces).
fn rename_new(from: &Path, to: &Path) -> std::io::Result<()> {
    let flags = rustix::fs::RenameFlags::NOREPLACE;
    match rustix::fs::renameat_with(rustix::fs::CWD, from, rustix::fs::CWD, to, flags) {
        Ok(()) => Ok(()),
        // A filesystem without it (NFS, FUSE: a USB drive, sshfs): a hard
        // link never replaces either; where links are not had, a look first.
        Err(rustix::io::Errno::INVAL) => {
            let exists = || std::io::Error::from_raw_os_error(libc::EEXIST);
            if from.is_file() {
                match std::fs::hard_link(from, to) {
                    Ok(()) => return std::fs::remove_file(from),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(exists()),
                    Err(_) => {}
                }
            }
            if std::fs::symlink_metadata(to).is_ok() {
                return Err(exists());
            }
            std::fs::rename(from, to)
        }
        Err(e) => Err(e.into()),
    }
}

/// Why a backup file cannot be restored: said to the person as is.
fn damaged(file: &Path, why: impl std::fmt::Display) -> anyhow::Error {
    kinded(
        ErrorKind::InvalidInput,
        format!(
            "{} cannot be restored: {why}. Nothing was placed. Use another copy of the backup, or take a new one with `autoapp backup`",
            file.display()
        ),
    )
}

/// Restores the backup `file` as a new app (`as_id`, default the backup's
/// own id); recorded in the restored app's record.
pub fn restore(
    root: &Root,
    caller: &Caller,
    file: &Path,
    as_id: Option<&AppId>,
    progress: &dyn Fn(&str),
) -> anyhow::Result<Restored> {
    let (manifest, mut archive) = open(file)?;
    let id = match as_id {
        Some(id) => id.clone(),
        None => AppId::parse(&manifest.app).map_err(|e| damaged(file, format!("its app id is not one: {e}")))?,
    };
    let target = root.app(&id);
    if target.exists() {
        return Err(exists(file, &id));
    }
    std::fs::create_dir_all(root.apps_dir())?;
    // Its own folder: the pid says whose, a random part keeps two restores of one process apart.
    let staging =
        root.apps_dir().join(format!(".restore-{id}-{}-{}", &crate::secret::random_hex()[..8], std::process::id()));
    progress(&format!(
        "a backup of {} taken at {} by Autoapp {}: {} files, {}",
        manifest.app,
        manifest.taken_at,
        manifest.autoapp,
        manifest.files.len(),
        super::said(manifest.files.iter().map(|f| f.bytes).sum())
    ));
    let placed = place(root, file, &manifest, &mut archive, &staging, &id, progress);
    let (restored, _lock) = match placed {
        Ok(p) => p,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
    };
    // The app's lock, taken in the staging folder before the rename, is held
    // until its row is written: another process's recovery leaves it alone.
    record_restore(&target, caller, file, &restored, "")?;
    Ok(restored)
}

/// Why an app with `id` cannot be restored over: how to choose another id.
fn exists(file: &Path, id: &AppId) -> anyhow::Error {
    let other = format!("{id}-restored");
    let instead = if AppId::parse(&other).is_ok() { other } else { "ANOTHER-ID".to_string() };
    kinded(
        ErrorKind::Conflict,
        format!(
            "there is already an app `{id}`; a restore never replaces one. Restore under another id with `autoapp restore {} --as {instead}`, or remove {id} first (`autoapp remove {id} --yes {id}`)",
            file.display()
        ),
    )
}

type Archive = tar::Archive<Bounded<zstd::Decoder<'static, std::io::BufReader<std::fs::File>>>>;

/// A reader that fails once more than `left` bytes were asked of it: what a
/// backup decompresses is bounded by what its manifest lists, however small
/// the file and whatever its headers claim (long names, sizes).
struct Bounded<R> {
    inner: R,
    left: u64,
}

impl<R: std::io::Read> std::io::Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            return Err(std::io::Error::other("it holds more than its manifest lists"));
        }
        let want = buf.len().min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// What a tar archive adds around each entry: headers (a long name, or PAX
/// records, take a few more), padding, and the end.
const PER_ENTRY: u64 = 4 * 1024;

fn archive_of(file: &Path, limit: u64) -> anyhow::Result<Archive> {
    let f = std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
    Ok(tar::Archive::new(Bounded { inner: zstd::Decoder::new(f)?, left: limit }))
}

/// Opens a backup and reads its `backup.json`, checking format and version.
fn open(file: &Path) -> anyhow::Result<(Manifest, Archive)> {
    let mut f = std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
    let mut magic = [0u8; 4];
    if f.read_exact(&mut magic).is_err() || magic != [0x28, 0xb5, 0x2f, 0xfd] {
        return Err(damaged(file, "it is not an Autoapp backup (it is not a zstd-compressed archive)"));
    }
    let mut archive = archive_of(file, MAX_MANIFEST + PER_ENTRY)?;
    let manifest: Manifest = {
        let mut entries = archive.entries().map_err(|e| damaged(file, format!("it cannot be read ({e})")))?;
        let first = entries
            .next()
            .ok_or_else(|| damaged(file, "it is empty"))?
            .map_err(|e| damaged(file, format!("it cannot be read ({e})")))?;
        let name = first.path().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        let quoted = shown(&name);
        if name != MANIFEST {
            return Err(damaged(file, format!("it does not start with {MANIFEST} (it starts with {quoted})")));
        }
        if first.header().size().unwrap_or(u64::MAX) > MAX_MANIFEST {
            return Err(damaged(file, format!("its {MANIFEST} is larger than any Autoapp writes")));
        }
        let mut text = Vec::new();
        first.take(MAX_MANIFEST).read_to_end(&mut text).map_err(|e| damaged(file, format!("it ends early ({e})")))?;
        let v: serde_json::Value =
            serde_json::from_slice(&text).map_err(|e| damaged(file, format!("its {MANIFEST} is not JSON ({e})")))?;
        if v["format"] != FORMAT {
            return Err(damaged(file, format!("its {MANIFEST} is not of an Autoapp backup")));
        }
        match v["version"].as_u64() {
            Some(n) if n > u64::from(VERSION) => {
                return Err(kinded(
                    ErrorKind::InvalidInput,
                    format!(
                        "{} was written by a newer Autoapp ({}, backup format {n}); this one ({}) reads format {VERSION} and older. Nothing was placed: restore it with a newer Autoapp",
                        file.display(),
                        v["autoapp"].as_str().unwrap_or("?"),
                        env!("CARGO_PKG_VERSION")
                    ),
                ));
            }
            Some(n) if n == u64::from(VERSION) => {}
            _ => return Err(damaged(file, format!("its format version {} is not one Autoapp wrote", v["version"]))),
        }
        serde_json::from_value(v).map_err(|e| damaged(file, format!("its {MANIFEST} is damaged ({e})")))?
    };
    // The archive is read again from its start, past the manifest, by
    // `place`: no more than the manifest and what it lists.
    let listed = manifest.files.iter().try_fold(0u64, |sum, f| sum.checked_add(f.bytes));
    let limit = listed
        .and_then(|l| l.checked_add(MAX_MANIFEST + PER_ENTRY * (manifest.files.len() as u64 + 2)))
        .ok_or_else(|| damaged(file, "the sizes its manifest lists are impossible"))?;
    let archive = archive_of(file, limit)?;
    Ok((manifest, archive))
}

/// Which staging path a backup entry goes to, when it is one a backup holds:
/// a canonical relative name (no empty, `.` or `..` part, no leading `/`,
/// no backslash), so that joining it can never leave the staging folder.
fn staged_path(name: &str, release: &str) -> Option<PathBuf> {
    let canonical = !name.is_empty()
        && !name.contains('\\')
        && !name.contains('\0')
        && name.split('/').all(|part| !part.is_empty() && part != "." && part != "..");
    if !canonical || !Path::new(name).components().all(|c| matches!(c, Component::Normal(_))) {
        return None;
    }
    if name == GRANTS {
        return Some(PathBuf::from(GRANTS));
    }
    if let Some(db) = name.strip_prefix("data/") {
        let ok = db.ends_with(".sqlite")
            && !db.contains('/')
            && db.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        return ok.then(|| PathBuf::from("data").join(db));
    }
    let rel = name.strip_prefix("release/")?;
    Some(PathBuf::from("releases").join(release).join(rel))
}

/// Unpacks, checks and places the backup; answers what was restored and
/// the placed app's lock (held until its row is written).
fn place(
    root: &Root,
    file: &Path,
    manifest: &Manifest,
    archive: &mut Archive,
    staging: &Path,
    id: &AppId,
    progress: &dyn Fn(&str),
) -> anyhow::Result<(Restored, journal::AppLock)> {
    if !release::is_release_id(&manifest.release) {
        return Err(damaged(file, "its release id is not one"));
    }
    // Room for it, before anything is written.
    let needed: u64 = manifest.files.iter().map(|f| f.bytes).sum();
    if let Ok(fs) = rustix::fs::statvfs(root.apps_dir()) {
        let free = fs.f_bavail.saturating_mul(fs.f_frsize);
        if needed > free {
            return Err(kinded(
                ErrorKind::Conflict,
                format!(
                    "restoring {} needs {} and the disk of {} has {} free; free some space (`autoapp prune`) and restore again. Nothing was placed",
                    file.display(),
                    super::said(needed),
                    root.dir().display(),
                    super::said(free)
                ),
            ));
        }
    }
    let listed: std::collections::HashMap<&str, &Entry> = manifest.files.iter().map(|f| (f.path.as_str(), f)).collect();
    if listed.len() != manifest.files.len() {
        return Err(damaged(file, format!("its {MANIFEST} lists a file twice")));
    }
    std::fs::create_dir_all(staging).with_context(|| format!("cannot create {}", staging.display()))?;
    journal::fault("restore:begun");
    let mut seen = std::collections::BTreeSet::new();
    let entries = archive.entries().map_err(|e| damaged(file, format!("it cannot be read ({e})")))?;
    for (n, entry) in entries.enumerate() {
        let entry = entry.map_err(|e| damaged(file, format!("it ends early or is damaged ({e})")))?;
        let name = entry.path().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        let quoted = shown(&name);
        if n == 0 {
            continue; // backup.json, read by `open`
        }
        if !entry.header().entry_type().is_file() {
            return Err(damaged(file, format!("it holds {quoted}, which is not a plain file")));
        }
        let listed = *listed
            .get(name.as_str())
            .ok_or_else(|| damaged(file, format!("it holds {quoted}, which its {MANIFEST} does not list")))?;
        let rel = staged_path(&name, &manifest.release)
            .ok_or_else(|| damaged(file, format!("it holds {quoted}, which is not a file a backup holds")))?;
        if !seen.insert(name.clone()) {
            return Err(damaged(file, format!("it holds {quoted} twice")));
        }
        let path = staging.join(&rel);
        if !path.starts_with(staging) || rel.is_absolute() {
            return Err(damaged(file, format!("it holds {quoted}, which is not a file a backup holds")));
        }
        std::fs::create_dir_all(path.parent().expect("a staged file has a folder"))?;
        let mut out = std::fs::File::create(&path).with_context(|| format!("cannot write {}", path.display()))?;
        let mut h = Sha256::new();
        let mut reader = entry.take(listed.bytes + 1);
        let mut buf = vec![0u8; 64 * 1024];
        let mut total = 0u64;
        loop {
            let k = reader.read(&mut buf).map_err(|e| damaged(file, format!("{quoted} ends early ({e})")))?;
            if k == 0 {
                break;
            }
            total += k as u64;
            if total > listed.bytes {
                return Err(damaged(file, format!("{quoted} is larger than its {MANIFEST} says: it was changed")));
            }
            h.update(&buf[..k]);
            out.write_all(&buf[..k]).with_context(|| cannot_write(&path))?;
        }
        out.sync_all().with_context(|| cannot_write(&path))?;
        if total != listed.bytes || hex::encode(h.finalize()) != listed.sha256 {
            return Err(damaged(
                file,
                format!("{quoted} does not match its hash in {MANIFEST}: it was changed or damaged"),
            ));
        }
    }
    for f in &manifest.files {
        if !seen.contains(&f.path) {
            return Err(damaged(file, format!("{} is missing: the file is cut short", shown(&f.path))));
        }
    }
    progress("every file is there, with its size and hash");
    journal::fault("restore:unpacked");

    // The release: its id is its files' hash, as every release's is.
    let paths = AppPaths { id: id.clone(), dir: staging.to_path_buf() };
    let rid = &manifest.release;
    let rdir = paths.release(rid);
    let rmanifest = crate::manifest::load(&rdir.join(MANIFEST_FILE))
        .map_err(|e| damaged(file, format!("its release's autoapp.toml is not valid ({e})")))?;
    let manifest_text = std::fs::read_to_string(rdir.join(MANIFEST_FILE))?;
    let migrations = release::migrations(&paths, rid, &rmanifest).map_err(|e| damaged(file, format!("{e:#}")))?;
    let component = std::fs::read(rdir.join(COMPONENT_FILE))
        .map_err(|e| damaged(file, format!("its release has no component ({e})")))?;
    let inputs = ReleaseInputs {
        component: &component,
        manifest_text: &manifest_text,
        manifest: &rmanifest,
        migrations: &migrations,
        source: "",
    };
    if release::release_id(&inputs) != *rid {
        return Err(damaged(file, "its release's files do not make its release id"));
    }
    let info = release::info(&paths, rid).map_err(|e| damaged(file, format!("{e:#}")))?;
    if info.id != *rid {
        return Err(damaged(file, "its release.json names another release"));
    }
    // What space and prune key compiled code on must be the component's own.
    if info.component_sha256 != hex::encode(Sha256::digest(&component))
        || info.component_bytes != component.len() as u64
    {
        return Err(damaged(file, "its release.json does not describe its component"));
    }
    release::seal(&rdir)?;
    // The data: SQLite's own check, and the release's migrations applied.
    for f in manifest.files.iter().filter(|f| f.path.starts_with("data/")) {
        store::check_integrity(&staging.join(&f.path)).map_err(|e| damaged(file, format!("{e:#}")))?;
    }
    let applied = store::applied_in(&paths.data()).map_err(|e| damaged(file, format!("{e:#}")))?;
    if applied.len() != migrations.len() || !store::is_prefix(&migrations, &applied) {
        return Err(damaged(file, "its data does not have exactly its release's migrations applied"));
    }
    progress("the release makes its id; the data passes SQLite's integrity check and has its migrations");
    journal::fault("restore:verified");

    // Grants of folders and programs this computer has; the rest are said.
    let mut grants: Grants = match std::fs::read_to_string(staging.join(GRANTS)) {
        Ok(t) => serde_json::from_str(&t).map_err(|e| damaged(file, format!("its grants.json is damaged ({e})")))?,
        Err(_) => Grants::default(),
    };
    grants.files.retain(|_, g| g.path.is_dir());
    grants.spawn.retain(|_, p| p.is_file());
    write_atomic(&staging.join(GRANTS), serde_json::to_string_pretty(&grants)?.as_bytes())?;
    let grant_again = crate::grants::ungranted(&paths, &rmanifest)?;
    let grants_kept = grant_lines(&grants);
    release::set_active(&paths, rid)?;
    journal::set_activation(
        &paths,
        &journal::Activation {
            release: rid.clone(),
            previous: None,
            snapshot: None,
            activated_at: release::now_rfc3339(),
            first_write_at: None,
        },
    )?;
    let restored = Restored {
        app: id.to_string(),
        release: rid.clone(),
        taken_at: manifest.taken_at.clone(),
        backup_of: manifest.app.clone(),
        grant_again,
        grants_kept,
    };
    let marker = serde_json::json!({ "file": file, "restored": restored });
    write_atomic(&staging.join(RESTORED_MARKER), marker.to_string().as_bytes())?;
    // Every folder made durable before the rename makes the app visible.
    sync_tree(staging)?;
    let lock = journal::lock(&paths, true)?;
    journal::fault("restore:staged");

    // One rename places the whole app, and never over another.
    let target = root.app(id);
    if let Err(e) = rename_new(staging, &target.dir) {
        let taken = matches!(e.raw_os_error(), Some(libc::EEXIST | libc::ENOTEMPTY));
        return Err(if taken {
            exists(file, id)
        } else {
            anyhow::Error::from(e).context(format!("cannot place {id}; nothing was placed"))
        });
    }
    sync_dir(&root.apps_dir())?;
    journal::fault("restore:placed");
    Ok((restored, lock))
}

/// A name from a backup file, for a message: quoted, escaped, and cut (a
/// hostile file's names can be megabytes).
fn shown(name: &str) -> String {
    const MOST: usize = 120;
    let cut: String = name.chars().take(MOST).collect();
    let more = if name.chars().nth(MOST).is_some() { "…" } else { "" };
    format!("{cut:?}{more}")
}

fn cannot_write(path: &Path) -> String {
    format!(
        "cannot write {}; nothing was restored (when the disk is full: free some space, `autoapp prune`, then restore again)",
        path.display()
    )
}

/// Syncs `dir` and every folder below it.
fn sync_tree(dir: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)?.flatten() {
        if entry.file_type()?.is_dir() {
            sync_tree(&entry.path())?;
        }
    }
    sync_dir(dir)
}

fn record_restore(target: &AppPaths, caller: &Caller, file: &Path, r: &Restored, by: &str) -> anyhow::Result<()> {
    let arguments = serde_json::json!({ "file": file });
    let mut summary = format!(
        "restored from a backup of {} taken at {} (release {}){by}",
        r.backup_of,
        r.taken_at,
        short(&r.release)
    );
    if !r.grants_kept.is_empty() {
        summary.push_str(&format!("; grants kept from the backup: {}", r.grants_kept.join(", ")));
    }
    if !r.grant_again.is_empty() {
        summary.push_str(&format!("; to grant again: {}", r.grant_again.join(", ")));
    }
    recorded(target, caller, "restore", arguments, Ok(()), |_| (r.release.clone(), summary))?;
    match std::fs::remove_file(target.dir.join(RESTORED_MARKER)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).context("cannot finish the restore"),
    }
    sync_dir(&target.dir)
}

/// Finishes what a crash left of restores: a staging folder is removed
/// (nothing was placed); a placed app whose row was not written gets it.
/// Answers one sentence per thing done.
pub fn recover(root: &Root, caller: &Caller) -> anyhow::Result<Vec<String>> {
    let mut said = Vec::new();
    let Ok(entries) = std::fs::read_dir(root.apps_dir()) else { return Ok(said) };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // A staging folder whose restore is gone (one running now is left to it).
        if name.starts_with(".restore-") && !super::in_use(&name) {
            std::fs::remove_dir_all(entry.path())
                .with_context(|| format!("cannot remove {}", entry.path().display()))?;
            said.push(format!("an interrupted restore ({name}) was undone: nothing of it was placed"));
        }
    }
    for id in root.app_ids()? {
        let paths = root.app(&id);
        let Ok(text) = std::fs::read_to_string(paths.dir.join(RESTORED_MARKER)) else { continue };
        // A restore that holds the lock is writing its row now.
        let Ok(_lock) = journal::lock(&paths, true) else { continue };
        if !paths.dir.join(RESTORED_MARKER).exists() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let r: Restored = serde_json::from_value(v["restored"].clone())
            .with_context(|| format!("{} is damaged", paths.dir.join(RESTORED_MARKER).display()))?;
        let file = PathBuf::from(v["file"].as_str().unwrap_or_default());
        record_restore(&paths, caller, &file, &r, " (recorded by recovery)")?;
        said.push(format!("the restore of {id} was finished: it was placed whole"));
    }
    // Backups a kill interrupted: their copies of the data, and the partial file.
    let cache = root.dir().join("cache");
    for entry in std::fs::read_dir(&cache).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("backup-") || super::in_use(&name) {
            continue;
        }
        if let Ok(partial) = std::fs::read_to_string(entry.path().join(PARTIAL_NOTE)) {
            let partial = PathBuf::from(partial);
            if partial.file_name().is_some_and(|n| n.to_string_lossy().contains(".partial-")) {
                let _ = std::fs::remove_file(&partial);
            }
        }
        std::fs::remove_dir_all(entry.path()).with_context(|| format!("cannot remove {}", entry.path().display()))?;
        said.push("an interrupted backup's copy and partial file were removed".to_string());
    }
    Ok(said)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_names_a_backup_holds_are_staged() {
        let r = "a".repeat(64);
        assert_eq!(staged_path("grants.json", &r), Some(PathBuf::from("grants.json")));
        assert_eq!(staged_path("data/app.sqlite", &r), Some(PathBuf::from("data/app.sqlite")));
        assert_eq!(
            staged_path("release/migrations/001.sql", &r),
            Some(PathBuf::from(format!("releases/{r}/migrations/001.sql")))
        );
        for bad in
            ["../x", "/etc/passwd", "data/../../x.sqlite", "data/x.txt", "data/a/b.sqlite", "release/../../x", "other"]
        {
            assert_eq!(staged_path(bad, &r), None, "{bad}");
        }
    }
}
