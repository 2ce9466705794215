//! `autoapp space`: what each app holds on disk, by part, in bytes.

use std::collections::BTreeSet;

use serde::Serialize;

use super::{Part, bytes_under, part_of, trash_of};
use crate::manifest::AppId;
use crate::root::Root;

/// One app's bytes, by part.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AppSpace {
    pub app: String,
    /// `data/`: the store (and what else the app keeps there), not the record.
    pub data: u64,
    /// `data/runs.sqlite` and its log: the record of every call and action
    /// (bounded by `record_keep_days` and `record_keep_mib`).
    pub record: u64,
    /// `data-prev-*` (before each activation), data a rollback set aside, and
    /// copies a crash left half made.
    pub snapshots: u64,
    /// `releases/`: every release built, active or not.
    pub releases: u64,
    /// Its folder of compiled code, `<root>/cache/compiled/<id>/` (what no
    /// release of it uses is counted in [`Space::compiled_unused`] too).
    pub compiled: u64,
    /// `previews/`: the copies of the data previews run on.
    pub previews: u64,
    /// `logs/`: its log file.
    pub logs: u64,
    /// The workspace, when it is inside the root (`create` without `--at`),
    /// with its build output (`target/`).
    pub workspace: u64,
    /// Its entries in `<root>/trash/` (an app removed and created again).
    pub trash: u64,
    /// Everything else in its folder (grants, history, journal, ...).
    pub other: u64,
    pub total: u64,
}

/// The space of the apps asked about, and of the whole root.
#[derive(Debug, Clone, Serialize)]
pub struct Space {
    pub apps: Vec<AppSpace>,
    /// Trash of apps that are no longer in the root (`autoapp prune --trash`).
    pub trash_of_removed_apps: u64,
    /// Compiled code that no release of its app uses (`autoapp prune`): in
    /// an app's folder (also in its `compiled`), in the folder of an app no
    /// longer here, or of the layout before each app had a folder; and code
    /// of another engine where this one's code of the same component is.
    pub compiled_unused: u64,
    /// Every byte under the root, counted once.
    pub root_total: u64,
}

/// One file of compiled code in the root's cache.
#[derive(Debug, Clone)]
pub struct CompiledFile {
    /// The folder it is in (`cache/compiled/<app>`: an app's id, of an app
    /// that may be gone); none for a file of the layout before each app had
    /// a folder, which no app loads.
    pub app: Option<String>,
    /// The hash of the component it was compiled from.
    pub sha: String,
    pub path: std::path::PathBuf,
    pub bytes: u64,
    /// Another engine's code (another version of autoapp, other settings:
    /// the engine's key is in the name, `<sha>-<key>.cwasm`) of a component
    /// whose code this autoapp's engine compiled too, beside it: never
    /// loaded by this one.
    pub superseded: bool,
}

/// The compiled files in the root's cache, each app's folder and (from
/// before each app had one) the cache's own; `current`, the key of this
/// autoapp's engine ([`current_key`]), tells which are superseded.
pub fn compiled_files(root: &Root, current: Option<&str>) -> Vec<CompiledFile> {
    let cache = root.compiled_cache();
    let mut out = compiled_in(&cache, None, current);
    for e in std::fs::read_dir(&cache).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if AppId::parse(&name).is_ok() && e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(compiled_in(&e.path(), Some(name), current));
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// The key of the engine this autoapp makes for the root's configuration,
/// which names the code it compiles; none if it cannot be made (then no
/// code is taken for another engine's).
pub fn current_key(root: &Root) -> Option<String> {
    let config = crate::config::Config::load(root.dir()).ok()?;
    crate::runtime::engine_key(&config).ok()
}

/// The compiled files in one folder of the cache (`app`'s, or none).
fn compiled_in(dir: &std::path::Path, app: Option<String>, current: Option<&str>) -> Vec<CompiledFile> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let found: Vec<(CompiledFile, String)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let (sha, rest) = name.split_once('-')?;
            let key = rest.strip_suffix(".cwasm")?.to_string();
            let meta = e.metadata().ok().filter(|m| m.is_file())?;
            let file = CompiledFile {
                app: app.clone(),
                sha: sha.to_string(),
                path: e.path(),
                bytes: meta.len(),
                superseded: false,
            };
            (sha.len() == 64).then_some((file, key))
        })
        .collect();
    // Another engine's code of a component whose code this engine compiled
    // too: this one loads its own.
    let ours = |sha: &str| current.is_some_and(|k| found.iter().any(|(f, key)| f.sha == sha && key == k));
    found
        .iter()
        .map(|(f, key)| CompiledFile { superseded: current.is_some_and(|k| key != k) && ours(&f.sha), ..f.clone() })
        .collect()
}

/// The component hashes of every release of `app`.
pub fn components_of(root: &Root, app: &AppId) -> BTreeSet<String> {
    crate::release::list(&root.app(app)).unwrap_or_default().into_iter().map(|r| r.component_sha256).collect()
}

/// The bytes of the record in the data folder `data` (its file, log and
/// shared memory), as the file system gives them.
fn record_bytes(data: &std::path::Path) -> u64 {
    let file = crate::gate::record::RUNS_FILE;
    [String::new(), "-wal".into(), "-shm".into()]
        .iter()
        .filter_map(|end| std::fs::symlink_metadata(data.join(format!("{file}{end}"))).ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// Measures `app` (or every app).
pub fn of(root: &Root, app: Option<&AppId>) -> anyhow::Result<Space> {
    let ids = match app {
        Some(id) => {
            if !root.app(id).exists() {
                return Err(crate::error::kinded(crate::error::ErrorKind::NotFound, crate::error::no_such_app(id)));
            }
            vec![id.clone()]
        }
        None => root.app_ids()?,
    };
    let compiled = compiled_files(root, current_key(root).as_deref());
    let mut apps = Vec::new();
    for id in &ids {
        let paths = root.app(id);
        let mut s = AppSpace { app: id.to_string(), ..AppSpace::default() };
        for entry in std::fs::read_dir(&paths.dir)?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let bytes = bytes_under(&entry.path());
            match (name.as_str(), part_of(&name)) {
                ("data", _) => {
                    s.record = record_bytes(&entry.path());
                    s.data += bytes.saturating_sub(s.record);
                }
                ("releases", _) => s.releases += bytes,
                ("previews", _) => s.previews += bytes,
                ("logs", _) => s.logs += bytes,
                ("workspace", _) => s.workspace += bytes,
                (_, Some(Part::Snapshot | Part::SetAside | Part::Leftover)) => s.snapshots += bytes,
                _ => s.other += bytes,
            }
        }
        s.compiled = compiled.iter().filter(|f| f.app.as_deref() == Some(id.as_str())).map(|f| f.bytes).sum();
        s.trash = trash_of(root, Some(id)).iter().map(|p| bytes_under(p)).sum();
        s.total = s.data
            + s.record
            + s.snapshots
            + s.releases
            + s.compiled
            + s.previews
            + s.logs
            + s.workspace
            + s.trash
            + s.other;
        apps.push(s);
    }
    let live = root.app_ids()?;
    let used: BTreeSet<(String, String)> =
        live.iter().flat_map(|id| components_of(root, id).into_iter().map(|sha| (id.to_string(), sha))).collect();
    let compiled_unused = compiled
        .iter()
        .filter(|f| f.superseded || f.app.as_ref().is_none_or(|a| !used.contains(&(a.clone(), f.sha.clone()))))
        .map(|f| f.bytes)
        .sum();
    let live_trash: BTreeSet<std::path::PathBuf> = live.iter().flat_map(|id| trash_of(root, Some(id))).collect();
    let trash_of_removed_apps =
        trash_of(root, None).iter().filter(|p| !live_trash.contains(*p)).map(|p| bytes_under(p)).sum();
    Ok(Space { apps, trash_of_removed_apps, compiled_unused, root_total: bytes_under(root.dir()) })
}
