//! `autoapp restore`: a backup file is data from elsewhere, never code.
//!
//! A restore reads the file into a staging folder
//! `apps/.restore-<id>-<random>-<pid>/` through `elsewhere` and checks
//! everything before anything is placed. In order, each step its function:
//!
//! 1. [`read_list`]: `backup.json` (bounded), and what it lists becomes what
//!    the archive may hold (`elsewhere::Expected`: canonical, bounded names,
//!    no two that collide, sizes); each kind of file within its most bytes
//!    ([`most_bytes`]), under `release/` only the release's own files; its
//!    time a time and its app an id.
//! 2. [`room_for`]: the disk has room for what is listed.
//! 3. [`unpack`]: each entry's header is read by `elsewhere::archive` (long
//!    names and PAX records bounded), checked against the list before a byte
//!    of it is read, written and hashed; the backup's record and grants go to
//!    `incoming/`, never where the host would use them.
//! 4. [`check_release`]: the release's id recomputed from its files,
//!    release.json describing its component, the component checked as a
//!    build checks it (`build::check_component`).
//! 5. [`check_data`]: the app's store's schema is exactly what the release's
//!    migrations make (run guarded on an empty database: `store::schema_made_by`;
//!    an extra trigger, view or table is refused, named), then it passes
//!    SQLite's integrity check, and it has exactly those migrations.
//! 6. [`rebuild_record`]: the record is made anew by `gate::record` and the
//!    backup's rows copied in, typed and checked; the backup's file is never
//!    opened as the record.
//! 7. [`check_grants`]: each grant passes the check `autoapp grant` makes
//!    (`grants::check_from_elsewhere`); what does not is left out and said.
//!    The pinned publisher, if any, passes `packages::install::check_pinned`
//!    and is said.
//! 8. [`place`]: the staging folder becomes `apps/<id>` in one rename that
//!    never replaces anything; then the restore's row is written. A restore
//!    whose row cannot be written is undone: the app is taken away again.
//!
//! A crash before the rename leaves a staging folder, removed by [`recover`]
//! at the next command; after it, a marker left in the app makes [`recover`]
//! write the restore's row — or, when even that fails, undo the restore, so
//! that no file, whatever it held, leaves a root on which commands fail.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::backup_file::{Entry, FORMAT, GRANTS, MANIFEST, MAX_MANIFEST, Manifest, PUBLISHER, VERSION};
use crate::caps::store;
use crate::elsewhere::{self, Expected, archive, named};
use crate::error::{ErrorKind, kinded};
use crate::gate::Caller;
use crate::gate::record::{RUNS_FILE, recorded};
use crate::grants::Grants;
use crate::manifest::{AppId, MANIFEST_FILE};
use crate::release::{self, COMPONENT_FILE, Migration, ReleaseInputs, journal, short};
use crate::root::{AppPaths, Root, rename_new, sync_dir, write_atomic};
use crate::runtime::Runtime;

/// The marker a restored app holds until its row is written.
const RESTORED_MARKER: &str = ".restored.json";
/// In the staging folder: what came from the backup that the host does not
/// use as it is (its record, its grants), until it is checked.
const INCOMING: &str = "incoming";

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
    /// The grants the backup carried that pass the check `autoapp grant`
    /// makes, kept, each with its target: said, so that a backup from
    /// elsewhere never grants anything unseen.
    pub grants_kept: Vec<String>,
    /// The backup's grants left out, one sentence each (named, and why).
    #[serde(default)]
    pub grants_refused: Vec<String>,
    /// Rows of the backup's record copied into the new record.
    #[serde(default)]
    pub rows: u64,
    /// The publisher the app's installs are pinned to, "NAME (fingerprint F)".
    #[serde(default)]
    pub publisher: Option<String>,
}

/// Why a backup file cannot be restored: said to the person as is.
fn damaged(file: &Path, why: impl std::fmt::Display) -> anyhow::Error {
    kinded(
        ErrorKind::InvalidInput,
        format!(
            "{} cannot be restored: {}. Nothing was placed. Use another copy of the backup, or take a new one with `autoapp backup`",
            file.display(),
            // One line, whatever a parser's error quoted of the file.
            elsewhere::text::terminal(&why.to_string())
        ),
    )
}

/// Restores the backup `file` as a new app (`as_id`, default the backup's
/// own id); recorded in the restored app's record. `runtime` checks the
/// component as a build does.
pub fn restore(
    root: &Root,
    runtime: &Runtime,
    caller: &Caller,
    file: &Path,
    as_id: Option<&AppId>,
    progress: &dyn Fn(&str),
) -> anyhow::Result<Restored> {
    let (manifest, expected) = read_list(file)?;
    let id = match as_id {
        Some(id) => id.clone(),
        None => AppId::parse(&manifest.app)
            .map_err(|e| damaged(file, format!("its app id {} is not one: {e}", named(&manifest.app))))?,
    };
    let target = root.app(&id);
    if target.exists() {
        return Err(exists(file, &id));
    }
    // Its own folder: the pid says whose, a random part keeps two restores of one process apart.
    let staging =
        root.apps_dir().join(format!(".restore-{id}-{}-{}", &crate::secret::random_hex()[..8], std::process::id()));
    // What a refusal takes away again, with the staging folder: the folders
    // made on the way (`apps/`, the compiled cache's), so a refused restore
    // leaves the root as it was (issue 73, rule 1).
    let made = crate::root::Made::before(&[&staging, &root.compiled_of(&id)]);
    std::fs::create_dir_all(root.apps_dir())?;
    progress(&format!(
        "a backup of {} taken at {} by Autoapp {}: {} files, {}",
        named(&manifest.app),
        named(&manifest.taken_at),
        named(&manifest.autoapp),
        manifest.files.len(),
        super::said(expected.total().unwrap_or(u64::MAX))
    ));
    let staged = stage(root, runtime, file, &manifest, &expected, &staging, &id, progress);
    let restored = match staged {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            crate::lifecycle::forget_compiled(root, &id);
            made.undo();
            return Err(e);
        }
    };
    // The app's lock, taken in the staging folder before the rename, is held
    // until its row is written: another process's recovery leaves it alone.
    let lock = journal::lock(&AppPaths { id: id.clone(), dir: staging.clone() }, true)?;
    journal::fault("restore:staged");
    if let Err(e) = place(root, file, &staging, &id) {
        let _ = std::fs::remove_dir_all(&staging);
        crate::lifecycle::forget_compiled(root, &id);
        made.undo();
        return Err(e);
    }
    journal::fault("restore:placed");
    if let Err(e) = record_restore(&target, caller, file, &restored, "") {
        drop(lock);
        return Err(undo(root, &target, e));
    }
    drop(lock);
    Ok(restored)
}

/// Every check, in order, in the staging folder; answers what the restore
/// will say once placed.
#[allow(clippy::too_many_arguments)]
fn stage(
    root: &Root,
    runtime: &Runtime,
    file: &Path,
    manifest: &Manifest,
    expected: &Expected,
    staging: &Path,
    id: &AppId,
    progress: &dyn Fn(&str),
) -> anyhow::Result<Restored> {
    room_for(root, file, expected)?;
    std::fs::create_dir_all(staging).with_context(|| format!("cannot create {}", staging.display()))?;
    journal::fault("restore:begun");
    unpack(file, manifest, expected, staging)?;
    progress("every file is there, with its size and hash");
    journal::fault("restore:unpacked");

    let paths = AppPaths { id: id.clone(), dir: staging.to_path_buf() };
    let listed: Vec<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    let of = manifest.release_of.as_deref().unwrap_or(&manifest.app);
    let release = check_release(root, runtime, file, &paths, &manifest.release, &listed, of)?;
    check_data(file, &paths, &release.migrations)?;
    let rows = rebuild_record(file, staging)?;
    progress(&format!(
        "the release makes its id and its component is one this host runs; the data passes SQLite's integrity check and has exactly its migrations' schema; the record was made anew with its {rows} rows"
    ));
    journal::fault("restore:verified");

    let (grants, grants_refused) = check_grants(file, &paths, &release.manifest)?;
    let publisher = check_publisher(file, &paths)?;
    let grant_again = crate::grants::ungranted(&paths, &release.manifest)?;
    let grants_kept = crate::grants::said(&grants);
    let rid = &manifest.release;
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
    std::fs::remove_dir_all(staging.join(INCOMING)).context("cannot clear the staging folder")?;
    let restored = Restored {
        app: id.to_string(),
        release: rid.clone(),
        taken_at: manifest.taken_at.clone(),
        backup_of: manifest.app.clone(),
        grant_again,
        grants_kept,
        grants_refused,
        rows,
        publisher,
    };
    let marker = serde_json::json!({ "file": file, "restored": restored });
    write_atomic(&staging.join(RESTORED_MARKER), marker.to_string().as_bytes())?;
    // Every folder made durable before the rename makes the app visible.
    sync_tree(staging)?;
    Ok(restored)
}

/// Step 1: opens a backup and reads its `backup.json` (format, version), and
/// what it lists becomes what the archive may hold.
fn read_list(file: &Path) -> anyhow::Result<(Manifest, Expected)> {
    let mut archive = archive::open_zstd(file).map_err(|e| {
        if e.0.contains("not a zstd") {
            damaged(file, "it is not an Autoapp backup (it is not a zstd-compressed archive)")
        } else {
            damaged(file, e)
        }
    })?;
    let first = archive.next_header().map_err(|e| damaged(file, e))?.ok_or_else(|| damaged(file, "it is empty"))?;
    if first.name != MANIFEST {
        return Err(damaged(
            file,
            format!("it does not start with {MANIFEST} (it starts with {})", named(&first.name)),
        ));
    }
    if first.size > MAX_MANIFEST {
        return Err(damaged(file, format!("its {MANIFEST} is larger than any Autoapp writes")));
    }
    let mut text = Vec::new();
    archive.body().read_to_end(&mut text).map_err(|e| damaged(file, format!("it ends early ({e})")))?;
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
                    elsewhere::text::terminal(&elsewhere::text::cut(v["autoapp"].as_str().unwrap_or("?"), 40)),
                    env!("CARGO_PKG_VERSION")
                ),
            ));
        }
        Some(n) if n == u64::from(VERSION) => {}
        _ => {
            let said = elsewhere::text::cut(&v["version"].to_string(), 40).into_owned();
            return Err(damaged(file, format!("its format version {said} is not one Autoapp wrote")));
        }
    }
    let manifest: Manifest =
        serde_json::from_value(v).map_err(|e| damaged(file, format!("its {MANIFEST} is damaged ({e})")))?;
    if !release::is_release_id(&manifest.release) {
        return Err(damaged(file, format!("its release id {} is not one", named(&manifest.release))));
    }
    // What the success line says of it: a time and an app id, nothing else.
    if manifest.taken_at.len() > 40 || humantime::parse_rfc3339_weak(&manifest.taken_at).is_err() {
        return Err(damaged(file, format!("the time it was taken, {}, is not a time", named(&manifest.taken_at))));
    }
    if AppId::parse(&manifest.app).is_err() {
        return Err(damaged(file, format!("its app id {} is not one", named(&manifest.app))));
    }
    let mut expected = Expected::new();
    for Entry { path, bytes, .. } in &manifest.files {
        if path == MANIFEST {
            return Err(damaged(file, format!("its {MANIFEST} lists itself")));
        }
        // Bounded and canonical first, then one of the files a backup holds.
        expected.part(path, *bytes).map_err(|e| damaged(file, format!("its {MANIFEST}: {e}")))?;
        if staged_path(path, &manifest.release).is_none() {
            return Err(damaged(
                file,
                format!("its {MANIFEST} lists {}, which is not a file a backup holds", named(path)),
            ));
        }
        if *bytes > most_bytes(path) {
            return Err(damaged(
                file,
                format!("its {MANIFEST} lists {} of {} bytes; at most {}", named(path), bytes, most_bytes(path)),
            ));
        }
    }
    let migrations: u64 = manifest.files.iter().filter(|f| f.path.ends_with(".sql")).map(|f| f.bytes).sum();
    if migrations > MAX_MIGRATIONS {
        return Err(damaged(
            file,
            format!("its {MANIFEST} lists {migrations} bytes of migrations; at most {MAX_MIGRATIONS}"),
        ));
    }
    if expected.total().is_none() {
        return Err(damaged(file, "the sizes its manifest lists are impossible"));
    }
    Ok((manifest, expected))
}

/// Which staging path a backup entry goes to, when it is one a backup holds:
/// a canonical relative name (`elsewhere::archive::canonical`), so that
/// joining it can never leave the staging folder. The backup's record and
/// grants go to `incoming/`: they are read, never used as they are.
fn staged_path(name: &str, release: &str) -> Option<PathBuf> {
    if !archive::canonical(name) {
        return None;
    }
    if name == GRANTS || name == PUBLISHER {
        return Some(Path::new(INCOMING).join(name));
    }
    if let Some(db) = name.strip_prefix("data/") {
        return match db {
            store::STORE_FILE => Some(PathBuf::from("data").join(db)),
            RUNS_FILE => Some(Path::new(INCOMING).join(RUNS_FILE)),
            _ => None,
        };
    }
    // A release holds its component, its manifest, its release.json and the
    // migrations its manifest lists (each a `.sql`; [`check_release`] holds
    // that they are exactly the listed ones).
    let rel = name.strip_prefix("release/")?;
    if !is_release_file(rel) {
        return None;
    }
    Some(PathBuf::from("releases").join(release).join(rel))
}

/// What a name inside `release/` may be: one of the release's own files, or a migration.
fn is_release_file(rel: &str) -> bool {
    matches!(rel, COMPONENT_FILE | MANIFEST_FILE | release::RELEASE_FILE) || rel.ends_with(".sql")
}

/// The most bytes a listed file of each kind may have, checked in
/// [`read_list`] before anything is unpacked (a listing of an 8 GB
/// component, its hash precomputed, fits in a backup of a megabyte).
fn most_bytes(name: &str) -> u64 {
    match name.strip_prefix("release/") {
        Some(COMPONENT_FILE) => crate::build::MAX_COMPONENT,
        Some(rel) if rel.ends_with(".sql") => store::MAX_MIGRATION_SQL as u64,
        Some(_) => MAX_TEXT,
        None if name == GRANTS || name == PUBLISHER => MAX_TEXT,
        // The app's data and its record: bounded by the disk's room (`room_for`).
        None => u64::MAX,
    }
}

/// The most bytes of a release's manifest, release.json, or a backup's grants.json.
const MAX_TEXT: u64 = 1 << 20;
/// The most bytes of all a release's migrations together.
const MAX_MIGRATIONS: u64 = 16 << 20;

/// Step 2: room for what is listed, before anything is written.
fn room_for(root: &Root, file: &Path, expected: &Expected) -> anyhow::Result<()> {
    let needed = expected.total().unwrap_or(u64::MAX);
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
    Ok(())
}

/// Step 3: every entry, read by `elsewhere::archive` and checked against the
/// list before a byte of it is read; written to its staging path and hashed.
fn unpack(file: &Path, manifest: &Manifest, expected: &Expected, staging: &Path) -> anyhow::Result<()> {
    let hashes: std::collections::HashMap<&str, &str> =
        manifest.files.iter().map(|f| (f.path.as_str(), f.sha256.as_str())).collect();
    let mut archive = archive::open_zstd(file).map_err(|e| damaged(file, e))?;
    // backup.json, read by `read_list`.
    archive.next_header().map_err(|e| damaged(file, e))?;
    let mut seen = std::collections::BTreeSet::new();
    while let Some(h) = archive.entry(expected, &mut seen).map_err(|e| damaged(file, e))? {
        let quoted = named(&h.name);
        let rel = staged_path(&h.name, &manifest.release).expect("a listed name has a staging path");
        let path = staging.join(&rel);
        std::fs::create_dir_all(path.parent().expect("a staged file has a folder"))
            .with_context(|| cannot_write(&path))?;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| cannot_write(&path))?;
        let mut h256 = Sha256::new();
        let mut body = archive.body();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let k = body.read(&mut buf).map_err(|e| damaged(file, format!("{quoted} ends early ({e})")))?;
            if k == 0 {
                break;
            }
            h256.update(&buf[..k]);
            out.write_all(&buf[..k]).with_context(|| cannot_write(&path))?;
        }
        out.sync_all().with_context(|| cannot_write(&path))?;
        if hashes.get(h.name.as_str()).is_none_or(|want| hex::encode(h256.finalize()) != *want) {
            return Err(damaged(
                file,
                format!("{quoted} does not match its hash in {MANIFEST}: it was changed or damaged"),
            ));
        }
    }
    if let Some(missing) = expected.names().find(|n| !seen.contains(*n)) {
        return Err(damaged(file, format!("{} is missing: the file is cut short", named(missing))));
    }
    Ok(())
}

/// What a checked release holds.
struct Checked {
    manifest: crate::manifest::Manifest,
    migrations: Vec<Migration>,
}

/// Step 4: the release's id is its files' hash, as every release's is; its
/// release.json describes its component; its component is one a build
/// would make a release of.
fn check_release(
    root: &Root,
    runtime: &Runtime,
    file: &Path,
    paths: &AppPaths,
    rid: &str,
    listed: &[&str],
    app: &str,
) -> anyhow::Result<Checked> {
    let rdir = paths.release(rid);
    let rmanifest = crate::manifest::load(&rdir.join(MANIFEST_FILE))
        .map_err(|e| damaged(file, format!("its release's autoapp.toml is not valid ({e})")))?;
    // As a build checks: the release is of the app it says it backs up.
    if rmanifest.id.to_string() != app {
        return Err(damaged(
            file,
            format!(
                "its release's autoapp.toml is of {}, not of {}, the app it says it holds",
                rmanifest.id,
                named(app)
            ),
        ));
    }
    let manifest_text = std::fs::read_to_string(rdir.join(MANIFEST_FILE))?;
    // The release holds exactly the files it covers: no migration its manifest does not list.
    for listed in listed.iter().filter_map(|p| p.strip_prefix("release/")) {
        if listed.ends_with(".sql") && !rmanifest.migrations.iter().any(|m| m == listed) {
            return Err(damaged(
                file,
                format!("its release holds {}, a migration its autoapp.toml does not list", named(listed)),
            ));
        }
    }
    let migrations = release::migrations(paths, rid, &rmanifest).map_err(|e| damaged(file, format!("{e:#}")))?;
    let component = std::fs::read(rdir.join(COMPONENT_FILE))
        .map_err(|e| damaged(file, format!("its release has no component ({e})")))?;
    let inputs = ReleaseInputs {
        component: &component,
        manifest_text: &manifest_text,
        manifest: &rmanifest,
        migrations: &migrations,
        source: "",
    };
    if release::release_id(&inputs) != rid {
        return Err(damaged(file, "its release's files do not make its release id"));
    }
    let info = release::info(paths, rid).map_err(|e| damaged(file, format!("{e:#}")))?;
    if info.id != rid {
        return Err(damaged(file, "its release.json names another release"));
    }
    // What space and prune key compiled code on must be the component's own.
    if info.component_sha256 != hex::encode(Sha256::digest(&component))
        || info.component_bytes != component.len() as u64
    {
        return Err(damaged(file, "its release.json does not describe its component"));
    }
    // A recomputed id proves nothing of what the component is.
    let checked =
        crate::build::check_component(root, &paths.id, runtime, &component, crate::build::Came::Elsewhere, &|_| {});
    checked.map_err(|e| {
        damaged(file, format!("its release/{COMPONENT_FILE} is refused as a build would refuse it: {e}"))
    })?;
    // release.json written anew from what was checked: its id, app, version
    // and component are the release's own; its time is kept when it is one
    // and not in the future.
    let now = std::time::SystemTime::now();
    let created_at = match humantime::parse_rfc3339_weak(&info.created_at) {
        Ok(t) if t <= now && info.created_at.len() <= 40 => info.created_at.clone(),
        _ => release::now_rfc3339(),
    };
    let info = release::ReleaseInfo {
        id: rid.to_string(),
        app: rmanifest.id.to_string(),
        version: rmanifest.version.clone(),
        created_at,
        component_sha256: info.component_sha256,
        component_bytes: info.component_bytes,
        source: match info.source.as_str() {
            "cargo" | "package" => info.source.clone(),
            _ => "component".into(),
        },
    };
    write_atomic(&rdir.join(release::RELEASE_FILE), serde_json::to_string_pretty(&info)?.as_bytes())?;
    release::seal(&rdir)?;
    Ok(Checked { manifest: rmanifest, migrations })
}

/// Step 5: the app's store holds exactly the schema its release's migrations
/// make (compared before anything of it is evaluated), then passes SQLite's
/// integrity check, and has exactly those migrations applied.
fn check_data(file: &Path, paths: &AppPaths, migrations: &[Migration]) -> anyhow::Result<()> {
    let path = paths.data().join(store::STORE_FILE);
    if !path.exists() {
        return Ok(());
    }
    let expected = store::schema_made_by(migrations).map_err(|e| {
        damaged(file, format!("its release's migrations cannot be applied to an empty database ({e:#})"))
    })?;
    {
        let mut found = elsewhere::sqlite::open(&path, "its data/app.sqlite", store::MAX_RESULT_BYTES)
            .map_err(|e| damaged(file, e))?;
        // A store no migration was ever applied to may lack the host's table.
        let optional: &[&str] = if migrations.is_empty() { &[store::HOST_MIGRATIONS_TABLE] } else { &[] };
        // The schema first: the integrity check evaluates what it says.
        found.check_schema(&expected, optional).map_err(|e| damaged(file, e))?;
        found.check_integrity().map_err(|e| damaged(file, e))?;
    }
    let applied = store::applied_in(&paths.data()).map_err(|e| damaged(file, format!("{e:#}")))?;
    if applied.len() != migrations.len() || !store::is_prefix(migrations, &applied) {
        return Err(damaged(file, "its data does not have exactly its release's migrations applied"));
    }
    Ok(())
}

/// Step 6: the record, made anew by the record's own code; the backup's rows
/// copied in, typed and checked. Answers how many.
fn rebuild_record(file: &Path, staging: &Path) -> anyhow::Result<u64> {
    let from = staging.join(INCOMING).join(RUNS_FILE);
    let data = staging.join("data");
    std::fs::create_dir_all(&data)?;
    if !from.exists() {
        return Ok(0);
    }
    let mut foreign = elsewhere::sqlite::open(&from, "its data/runs.sqlite", crate::gate::record::MAX_ROW)
        .map_err(|e| damaged(file, e))?;
    // Exactly the record's own table, before the integrity check evaluates anything.
    foreign.check_schema_one_of(&crate::gate::record::schemas()?).map_err(|e| damaged(file, e))?;
    foreign.check_integrity().map_err(|e| damaged(file, e))?;
    crate::gate::record::rebuild_from(&data, &foreign).map_err(|e| damaged(file, format!("{e:#}")))
}

/// Step 7: the backup's grants, each through the check `autoapp grant`
/// makes; those that pass are written, the rest said.
fn check_grants(
    file: &Path,
    paths: &AppPaths,
    manifest: &crate::manifest::Manifest,
) -> anyhow::Result<(Grants, Vec<String>)> {
    let from: Grants = match std::fs::read_to_string(paths.dir.join(INCOMING).join(GRANTS)) {
        Ok(t) => serde_json::from_str(&t).map_err(|e| damaged(file, format!("its grants.json is damaged ({e})")))?,
        Err(_) => Grants::default(),
    };
    let (kept, refused) = crate::grants::check_from_elsewhere(&paths.id, manifest, &from);
    write_atomic(&paths.dir.join(GRANTS), serde_json::to_string_pretty(&kept)?.as_bytes())?;
    Ok((kept, refused))
}

/// Step 7, too: the publisher the backup says the app's installs are
/// pinned to, checked as text from elsewhere and said; answers how it is said.
fn check_publisher(file: &Path, paths: &AppPaths) -> anyhow::Result<Option<String>> {
    let text = match std::fs::read_to_string(paths.dir.join(INCOMING).join(PUBLISHER)) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(_) => return Err(damaged(file, format!("its {PUBLISHER} is not text"))),
    };
    let pin = crate::packages::install::check_pinned(&text)
        .map_err(|e| damaged(file, format!("its {PUBLISHER} is refused: {e}")))?;
    write_atomic(&paths.dir.join(PUBLISHER), serde_json::to_string_pretty(&pin)?.as_bytes())?;
    Ok(Some(crate::packages::sign::who(&pin.fingerprint, &pin.name)))
}

/// Step 8: one rename places the whole app, and never over another.
fn place(root: &Root, file: &Path, staging: &Path, id: &AppId) -> anyhow::Result<()> {
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
    Ok(())
}

/// Takes a placed app away again (its restore could not be recorded): the
/// root is as before the restore. Answers the error to report.
fn undo(root: &Root, target: &AppPaths, why: anyhow::Error) -> anyhow::Error {
    let away = root.apps_dir().join(format!(
        ".restore-{}-{}-undone-{}",
        target.id,
        &crate::secret::random_hex()[..8],
        std::process::id()
    ));
    match std::fs::rename(&target.dir, &away) {
        Ok(()) => {
            let _ = std::fs::remove_dir_all(&away);
            let _ = sync_dir(&root.apps_dir());
            crate::lifecycle::forget_compiled(root, &target.id);
            why.context(format!("the restore of {} could not be recorded, so it was undone: nothing was placed", target.id))
        }
        Err(e) => why.context(format!(
            "the restore of {} could not be recorded, and cannot be undone ({e}); remove it with `autoapp remove {} --yes {}`",
            target.id, target.id, target.id
        )),
    }
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
        elsewhere::text::cut(&r.backup_of, 120),
        elsewhere::text::cut(&r.taken_at, 60),
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
/// (nothing was placed); a placed app whose row was not written gets it, or,
/// when it cannot be written, the restore is undone. Never fails for one
/// app's sake: a restored file never wedges the root. Answers one sentence
/// per thing done.
pub fn recover(root: &Root, caller: &Caller) -> anyhow::Result<Vec<String>> {
    let mut said = Vec::new();
    let Ok(entries) = std::fs::read_dir(root.apps_dir()) else { return Ok(said) };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // A staging folder whose restore is gone (one running now is left to it).
        // One that cannot be removed is said and left: never a reason for the command to fail.
        if name.starts_with(".restore-") && !super::in_use(&name) {
            let shown = elsewhere::text::terminal(&name).into_owned();
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => {
                    // And the code it compiled for an app that is not here.
                    let of = name.strip_prefix(".restore-").and_then(|n| n.rsplitn(3, '-').nth(2));
                    if let Some(id) = of.and_then(|i| AppId::parse(i).ok()) {
                        crate::lifecycle::forget_compiled(root, &id);
                    }
                    said.push(format!("an interrupted restore ({shown}) was undone: nothing of it was placed"))
                }
                Err(e) => {
                    tracing::warn!(folder = %shown, error = %e, "an interrupted restore's folder cannot be removed");
                    said.push(format!(
                        "an interrupted restore left {} behind, and it cannot be removed ({e}); nothing of it was placed. Remove it by hand when you can",
                        entry.path().display()
                    ));
                }
            }
        }
    }
    for id in root.app_ids()? {
        let paths = root.app(&id);
        let Ok(text) = std::fs::read_to_string(paths.dir.join(RESTORED_MARKER)) else { continue };
        // A restore that holds the lock is writing its row now.
        let Ok(lock) = journal::lock(&paths, true) else { continue };
        if !paths.dir.join(RESTORED_MARKER).exists() {
            continue;
        }
        let finished = (|| {
            let v: serde_json::Value = serde_json::from_str(&text)?;
            let r: Restored = serde_json::from_value(v["restored"].clone())?;
            let file = PathBuf::from(v["file"].as_str().unwrap_or_default());
            record_restore(&paths, caller, &file, &r, " (recorded by recovery)")
        })();
        drop(lock);
        match finished {
            Ok(()) => said.push(format!("the restore of {id} was finished: it was placed whole")),
            Err(e) => {
                let e = undo(root, &paths, e);
                said.push(format!("{e:#}"));
            }
        }
    }
    Ok(said)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_names_a_backup_holds_are_staged() {
        let r = "a".repeat(64);
        assert_eq!(staged_path("grants.json", &r), Some(PathBuf::from("incoming/grants.json")));
        assert_eq!(staged_path("data/app.sqlite", &r), Some(PathBuf::from("data/app.sqlite")));
        assert_eq!(staged_path("data/runs.sqlite", &r), Some(PathBuf::from("incoming/runs.sqlite")));
        assert_eq!(
            staged_path("release/migrations/001.sql", &r),
            Some(PathBuf::from(format!("releases/{r}/migrations/001.sql")))
        );
        for bad in [
            "../x",
            "/etc/passwd",
            "data/../../x.sqlite",
            "data/x.txt",
            "data/other.sqlite",
            "data/a/b.sqlite",
            "release/../../x",
            "release//etc/passwd",
            "release/a/a/a/x",
            "release/notes.txt",
            "other",
        ] {
            assert_eq!(staged_path(bad, &r), None, "{bad}");
        }
    }
}
