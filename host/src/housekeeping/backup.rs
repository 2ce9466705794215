//! `autoapp backup`: one app's data, active release, grants and pinned
//! publisher, written to one file whose format is `housekeeping::backup_file`'s.
//!
//! `housekeeping::restore` reads such a file back, as data from elsewhere.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::backup_file::{EXTENSION, Entry, FORMAT, GRANTS, MANIFEST, Manifest, PUBLISHER, VERSION};

use crate::caps::store;
use crate::error::{ErrorKind, kinded};
use crate::gate::Caller;
use crate::gate::record::recorded;
use crate::manifest::AppId;
use crate::release::{self, journal};
use crate::root::{AppPaths, Root, rename_new, sync_dir, write_atomic};

/// In a backup's copy folder: where its partial file is (for recovery).
const PARTIAL_NOTE: &str = "partial";
/// Where the app's last backup is said.
const LAST_BACKUP: &str = "last-backup.json";

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
        let files = gather(paths, &release, &staging, progress)?;
        // None of the app's keys leaves in it, in any form (issue 72, rule 5).
        let (finder, unread) = crate::secrets::finder_of(paths)?;
        for key in unread {
            progress(&format!("the key {key} could not be read, so the backup is not checked for it"));
        }
        for (name, path) in &files {
            crate::secrets::check_part(&finder, &format!("the backup's part {name}"), path)?;
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
        write_archive(out, &manifest, &files)?;
        journal::fault("backup:written");
        let named = name_new(&partial, &file, ours)?;
        let bytes = std::fs::metadata(&named)?.len();
        Ok(BackedUp { app: app.to_string(), file: named, bytes, release: release.clone(), taken_at })
    })();
    let _ = std::fs::remove_dir_all(&staging);
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result.map_err(|e: anyhow::Error| {
        // A refusal (a key found in a part) is its own sentence.
        if crate::error::kind_of(&e) == ErrorKind::Denied {
            return e;
        }
        e.context(format!(
            "no backup of {app} was written, and nothing of it is left (when the disk is full: free some space, or choose another folder with --to)"
        ))
    })
}

/// What a backup holds, each with where its bytes are now: the data first
/// (each database as of one moment, copied into `staging` while the app may
/// write), the release's files, and copies of the grants and the pinned
/// publisher (so that what is hashed is what is written even if a grant
/// changes meanwhile).
fn gather(
    paths: &AppPaths,
    release: &str,
    staging: &Path,
    progress: &dyn Fn(&str),
) -> anyhow::Result<Vec<(String, PathBuf)>> {
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
    let dir = paths.release(release);
    for rel in release::files_of(&dir)? {
        files.push((format!("release/{rel}"), dir.join(&rel)));
    }
    for (name, what) in [(GRANTS, "the grants"), (PUBLISHER, "the pinned publisher")] {
        let kept = paths.dir.join(name);
        if kept.is_file() {
            let copy = staging.join(name);
            std::fs::copy(&kept, &copy).with_context(|| format!("cannot copy {what}"))?;
            files.push((name.to_string(), copy));
        }
    }
    Ok(files)
}

/// Writes the archive to `out` (the new partial file): `backup.json`, then
/// each file in order, synced.
fn write_archive(out: std::fs::File, manifest: &Manifest, files: &[(String, PathBuf)]) -> anyhow::Result<()> {
    let mut tar = tar::Builder::new(zstd::Encoder::new(out, 3)?);
    let text = serde_json::to_vec_pretty(manifest)?;
    append(&mut tar, MANIFEST, &mut text.as_slice(), text.len() as u64)?;
    for (name, path) in files {
        let f = std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
        let len = f.metadata()?.len();
        append(&mut tar, name, &mut f.take(len), len)?;
    }
    let out = tar.into_inner()?.finish()?;
    out.sync_all()?;
    Ok(())
}

/// Gives the written `partial` its name `file`, never over a file that
/// appeared meanwhile; a name of ours (`ours`) moves on to the next number
/// instead (two backups in one second). Answers the name it got.
fn name_new(partial: &Path, file: &Path, ours: bool) -> anyhow::Result<PathBuf> {
    let mut named = file.to_path_buf();
    for n in 2.. {
        match rename_new(partial, &named) {
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
    Ok(named)
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

/// Finishes what a crash left of backups: a backup's copy of the data and
/// its partial file. Answers one sentence per thing done.
pub(super) fn recover(root: &Root) -> anyhow::Result<Vec<String>> {
    let mut said = Vec::new();
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
