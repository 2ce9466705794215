//! `autoapp backup` and `autoapp restore`.
//!
//! A backup is one file: a tar archive compressed with zstd, whose first entry
//! is `backup.json` (format, version, app, when, the active release, and every
//! other entry's size and SHA-256), then `data/*.sqlite` (each a consistent
//! copy made with SQLite's online backup while the app may be serving and
//! writing), `release/…` (the active release's folder: component, manifest,
//! migrations, release.json), `grants.json`, and `publisher.json` for an app
//! installed from a signed package (the publisher its installs are pinned to).
//!
//! `housekeeping::restore` reads such a file back, as data from elsewhere.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::caps::store;
use crate::error::{ErrorKind, kinded};
use crate::gate::Caller;
use crate::gate::record::recorded;
use crate::manifest::AppId;
use crate::release::{self, journal};
use crate::root::{AppPaths, Root, sync_dir, write_atomic};

/// What `backup.json` calls the format.
pub const FORMAT: &str = "autoapp-backup";
/// The version this Autoapp writes and the newest it reads.
pub const VERSION: u32 = 1;
/// The file name's ending.
pub const EXTENSION: &str = "autoapp-backup";

pub(super) const MANIFEST: &str = "backup.json";
pub(super) const GRANTS: &str = "grants.json";
pub(super) const PUBLISHER: &str = crate::packages::install::PUBLISHER_FILE;
/// The most `backup.json` may be.
pub(super) const MAX_MANIFEST: u64 = 4 << 20;
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
    /// The app the release is of, when not `app` (an app installed or
    /// restored under another id, `--as`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_of: Option<String>,
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
        // The publisher pinned at the app's first install: a copy, for the same reason.
        let pin = paths.dir.join(PUBLISHER);
        if pin.is_file() {
            let copy = staging.join(PUBLISHER);
            std::fs::copy(&pin, &copy).context("cannot copy the pinned publisher")?;
            files.push((PUBLISHER.to_string(), copy));
        }
        let release_of = release::manifest(paths, &release)?.id.to_string();
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
            release_of: (release_of != app.as_str()).then_some(release_of),
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
pub(super) fn rename_new(from: &Path, to: &Path) -> std::io::Result<()> {
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

/// Finishes what a crash left of backups and restores: a restore's staging
/// folder or unrecorded app ([`super::restore::recover`]), a backup's copy
/// of the data and its partial file. Answers one sentence per thing done.
pub fn recover(root: &Root, caller: &Caller) -> anyhow::Result<Vec<String>> {
    let mut said = super::restore::recover(root, caller)?;
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
