//! Where an app's workspace is (its pointer, or the default folder), and where
//! it may be (seed 000, "Where a workspace may be"): a folder
//! the person chose may not be inside the root, nor inside another app's
//! workspace, nor contain one. Checked with real paths, symlinks resolved.

use std::path::{Path, PathBuf};

use crate::manifest::AppId;
use anyhow::Context as _;

use crate::root::{AppPaths, Root};

/// The real path of `p`: its deepest existing ancestor resolved, the rest
/// appended (so a folder that does not exist yet is checked too).
pub fn real_path(p: &Path) -> PathBuf {
    let mut existing = p.to_path_buf();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            _ => break,
        }
    }
    let mut real = std::fs::canonicalize(&existing).unwrap_or(existing);
    for name in rest.into_iter().rev() {
        real.push(name);
    }
    real
}

/// The app's workspace: the folder a pointer names, else the default one.
pub fn of(app: &AppPaths) -> anyhow::Result<PathBuf> {
    let pointer = app.workspace_pointer();
    match std::fs::read_to_string(&pointer) {
        Ok(text) => {
            let path = PathBuf::from(text.trim());
            anyhow::ensure!(
                path.is_absolute(),
                "the workspace pointer {} does not hold an absolute path; write the workspace's absolute path there",
                pointer.display()
            );
            Ok(path)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(app.default_workspace()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", pointer.display())),
    }
}

/// Refuses a chosen folder for app `id` that breaks a rule above.
pub fn check_chosen(root: &Root, id: &AppId, dir: &Path) -> anyhow::Result<()> {
    let real = real_path(dir);
    anyhow::ensure!(
        !real.starts_with(root.dir()),
        "{} is inside the launcher's root ({}); choose a folder outside it",
        dir.display(),
        root.dir().display()
    );
    for other in root.app_ids()? {
        if other == *id {
            continue;
        }
        let Ok(ws) = of(&root.app(&other)) else {
            continue;
        };
        let ws = real_path(&ws);
        anyhow::ensure!(
            !real.starts_with(&ws),
            "{} is inside the workspace of {other}; choose a folder outside every other app's workspace",
            dir.display()
        );
        anyhow::ensure!(
            !ws.starts_with(&real),
            "{} contains the workspace of {other}; choose a folder that holds no other app",
            dir.display()
        );
    }
    Ok(())
}
