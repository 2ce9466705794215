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
    /// `data/`: the store and the record.
    pub data: u64,
    /// `data-prev-*` (before each activation), data a rollback set aside, and
    /// copies a crash left half made.
    pub snapshots: u64,
    /// `releases/`: every release built, active or not.
    pub releases: u64,
    /// The compiled code of its releases in `<root>/cache/compiled/`.
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
    /// Compiled code no release of any app uses (`autoapp prune`).
    pub compiled_unused: u64,
    /// Every byte under the root, counted once.
    pub root_total: u64,
}

/// The compiled files in the root's cache: (component hash, path, bytes).
pub fn compiled_files(root: &Root) -> Vec<(String, std::path::PathBuf, u64)> {
    let Ok(entries) = std::fs::read_dir(root.compiled_cache()) else { return Vec::new() };
    let mut out: Vec<_> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let (sha, rest) = name.split_once('-')?;
            (sha.len() == 64 && rest.ends_with(".cwasm")).then(|| {
                let bytes = e.metadata().map(|m| m.len()).unwrap_or(0);
                (sha.to_string(), e.path(), bytes)
            })
        })
        .collect();
    out.sort_by(|a, b| a.1.cmp(&b.1));
    out
}

/// The component hashes of every release of `app`.
pub fn components_of(root: &Root, app: &AppId) -> BTreeSet<String> {
    crate::release::list(&root.app(app)).unwrap_or_default().into_iter().map(|r| r.component_sha256).collect()
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
    let compiled = compiled_files(root);
    let mut apps = Vec::new();
    for id in &ids {
        let paths = root.app(id);
        let mut s = AppSpace { app: id.to_string(), ..AppSpace::default() };
        for entry in std::fs::read_dir(&paths.dir)?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let bytes = bytes_under(&entry.path());
            match (name.as_str(), part_of(&name)) {
                ("data", _) => s.data += bytes,
                ("releases", _) => s.releases += bytes,
                ("previews", _) => s.previews += bytes,
                ("logs", _) => s.logs += bytes,
                ("workspace", _) => s.workspace += bytes,
                (_, Some(Part::Snapshot | Part::SetAside | Part::Leftover)) => s.snapshots += bytes,
                _ => s.other += bytes,
            }
        }
        let mine = components_of(root, id);
        s.compiled = compiled.iter().filter(|(sha, _, _)| mine.contains(sha)).map(|(_, _, b)| b).sum();
        s.trash = trash_of(root, Some(id)).iter().map(|p| bytes_under(p)).sum();
        s.total =
            s.data + s.snapshots + s.releases + s.compiled + s.previews + s.logs + s.workspace + s.trash + s.other;
        apps.push(s);
    }
    let live = root.app_ids()?;
    let used: BTreeSet<String> = live.iter().flat_map(|id| components_of(root, id)).collect();
    let compiled_unused = compiled.iter().filter(|(sha, _, _)| !used.contains(sha)).map(|(_, _, b)| b).sum();
    let live_trash: BTreeSet<std::path::PathBuf> = live.iter().flat_map(|id| trash_of(root, Some(id))).collect();
    let trash_of_removed_apps =
        trash_of(root, None).iter().filter(|p| !live_trash.contains(*p)).map(|p| bytes_under(p)).sum();
    Ok(Space { apps, trash_of_removed_apps, compiled_unused, root_total: bytes_under(root.dir()) })
}
