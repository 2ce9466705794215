//! `autoapp apps`: the apps of a root as they stand, whether or not a
//! launcher runs — each one's id and name, its active release and version,
//! where it came from, the candidates waiting, and whether the launcher
//! serves it. Read only: it changes nothing and asks no launcher.

use serde::Serialize;

use crate::packages::SourcePublisher;
use crate::release;
use crate::root::Root;

/// One app, as `apps` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct AppLine {
    pub id: String,
    /// The name its active release (else its newest) gives it.
    pub name: String,
    pub active: Option<Active>,
    /// `built` (from a workspace, or a component the person gave),
    /// `installed` (from a package) or `restored` (from a backup).
    pub came_from: &'static str,
    /// The publisher an installed app is pinned to.
    pub publisher: Option<SourcePublisher>,
    /// Releases built or installed and not active.
    pub candidates: usize,
    /// Whether a launcher runs on this root and serves the app: it serves
    /// every app with an active release.
    pub served: bool,
}

/// An app's active release.
#[derive(Debug, Clone, Serialize)]
pub struct Active {
    pub release: String,
    pub version: String,
}

/// One app of a root as it stands: its folders, its active release, every
/// release it has (oldest first) and the name its active (else newest)
/// release gives it — what every listing of apps starts from (`apps`, the
/// engineer's `apps_list`).
pub struct Seen {
    pub id: crate::manifest::AppId,
    pub paths: crate::root::AppPaths,
    pub active: Option<String>,
    pub all: Vec<release::ReleaseInfo>,
    pub name: String,
}

/// Every app of `root`, by id, as it stands.
pub fn each(root: &Root) -> anyhow::Result<Vec<Seen>> {
    let mut seen = Vec::new();
    for id in root.app_ids()? {
        let paths = root.app(&id);
        let active = release::active(&paths).ok().flatten();
        let all = release::list(&paths).unwrap_or_default();
        let newest = active.clone().or_else(|| all.last().map(|r| r.id.clone()));
        let name = newest.as_deref().and_then(|r| release::manifest(&paths, r).ok()).map(|m| m.name);
        seen.push(Seen { name: name.unwrap_or_else(|| id.to_string()), id, paths, active, all });
    }
    Ok(seen)
}

/// Every app of `root`, by id.
pub fn apps(root: &Root) -> anyhow::Result<Vec<AppLine>> {
    let launcher = crate::root::running_launcher(root)?.is_some();
    let mut lines = Vec::new();
    for Seen { id, paths, active, all, name } in each(root)? {
        let source = crate::packages::source_of(&paths, &all, active.as_ref());
        let came_from = if source.kind == "package" {
            "installed"
        } else if crate::gate::record::has_action(&paths.data(), "restore") {
            "restored"
        } else {
            "built"
        };
        let active_line = active.as_ref().and_then(|a| all.iter().find(|r| &r.id == a));
        lines.push(AppLine {
            id: id.to_string(),
            name,
            active: active_line.map(|r| Active { release: r.id.clone(), version: r.version.clone() }),
            came_from,
            publisher: source.publisher,
            candidates: all.iter().filter(|r| Some(&r.id) != active.as_ref()).count(),
            served: launcher && active.is_some(),
        });
    }
    Ok(lines)
}
