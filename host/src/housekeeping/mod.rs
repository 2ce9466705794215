//! What a person does to keep their data and their disk: backups that
//! restore (`backup`), how much space each app holds (`space`), and removing
//! what no rollback can use any more (`prune`); and the apps of a root as
//! they stand (`list`, read only). Each is the person's action
//! alone (channel `user`: the command line and the panel; no tool, no route)
//! and each is recorded in the app's record.

pub mod backup;
pub mod backup_file;
pub mod list;
pub mod prune;
pub mod restore;
pub mod space;

use std::path::Path;

use crate::manifest::AppId;
use crate::root::Root;

pub use backup::{BackedUp, back_up};
pub use prune::{Options, Plan};
pub use restore::{Restored, restore};
pub use space::Space;

/// Finishes what a crash left of backups and restores: a restore's staging
/// folder or unrecorded app ([`restore::recover`]), a backup's copy of the
/// data and its partial file ([`backup::recover`]). Answers one sentence per
/// thing done.
pub fn recover(root: &Root, caller: &crate::gate::Caller) -> anyhow::Result<Vec<String>> {
    let mut said = restore::recover(root, caller)?;
    said.extend(backup::recover(root)?);
    Ok(said)
}

/// Bytes under `path` (a file's length, or every file's below a folder;
/// symbolic links are not followed). Something that cannot be read counts 0.
pub fn bytes_under(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return 0 };
    if !meta.is_dir() {
        return meta.len();
    }
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(m) = entry.metadata() else { continue };
            if m.is_dir() {
                stack.push(entry.path());
            } else {
                total += m.len();
            }
        }
    }
    total
}

/// Whether the process that named a folder `…-<pid>` may still be using it:
/// this process, a running one, or a name with no pid (not ours to judge).
pub fn in_use(name: &str) -> bool {
    match name.rsplit('-').next().and_then(|p| p.parse::<u32>().ok()) {
        None => true,
        Some(pid) => pid == std::process::id() || crate::root::process_alive(pid),
    }
}

/// What a folder entry of an app is, for `space` and `prune`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `data-prev-<stamp>`: the data before an activation's migrations.
    Snapshot,
    /// `data-next-<stamp>`, `data-discarded-<stamp>`: data a rollback set aside.
    SetAside,
    /// A copy a crash left half made (`*.partial`) or a removal half done (`.pruning-*`).
    Leftover,
}

/// What the app-folder entry named `name` is, when it is one of [`Part`].
pub fn part_of(name: &str) -> Option<Part> {
    if name.starts_with(".pruning-") || (name.starts_with("data-") && name.ends_with(".partial")) {
        Some(Part::Leftover)
    } else if name.starts_with("data-prev-") {
        Some(Part::Snapshot)
    } else if name.starts_with("data-next-") || name.starts_with("data-discarded-") {
        Some(Part::SetAside)
    } else {
        None
    }
}

/// The trash entries (`<root>/trash/<id>-<stamp>`) of `app`, or of every app.
pub fn trash_of(root: &Root, app: Option<&AppId>) -> Vec<std::path::PathBuf> {
    let stamp = regex::Regex::new(r"^[0-9]{8}T[0-9]{6}Z(-[0-9]+)?$").expect("a valid pattern");
    let Ok(entries) = std::fs::read_dir(root.dir().join("trash")) else { return Vec::new() };
    let mut out: Vec<_> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            match app {
                None => !name.starts_with('.'),
                Some(id) => name
                    .strip_prefix(id.as_str())
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|rest| stamp.is_match(rest)),
            }
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// "1.2 MB", "340 kB", "12 bytes".
pub fn said(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["kB", "MB", "GB", "TB"];
    if bytes < 1000 {
        return format!("{bytes} bytes");
    }
    let mut v = bytes as f64 / 1000.0;
    let mut unit = 0;
    while v >= 1000.0 && unit < UNITS.len() - 1 {
        v /= 1000.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trash_of_an_app_is_its_own_entries_only() {
        let d = tempfile::tempdir().unwrap();
        let root = Root::open(d.path()).unwrap();
        for name in ["notes-20261201T063000Z", "notes-20261201T063000Z-2", "notes-2-20261201T063000Z", "news-x"] {
            std::fs::create_dir_all(root.dir().join("trash").join(name)).unwrap();
        }
        let notes = AppId::parse("notes").unwrap();
        let names = |v: Vec<std::path::PathBuf>| -> Vec<String> {
            v.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect()
        };
        assert_eq!(names(trash_of(&root, Some(&notes))), ["notes-20261201T063000Z", "notes-20261201T063000Z-2"]);
        assert_eq!(names(trash_of(&root, Some(&AppId::parse("notes-2").unwrap()))), ["notes-2-20261201T063000Z"]);
        assert_eq!(trash_of(&root, None).len(), 4);
        assert!(in_use(&format!(".restore-a-1f2e-{}", std::process::id())), "this process");
        assert!(!in_use("backup-a-1f2e-999999999"), "no such process");
        assert!(in_use("no-pid-here"), "not ours to judge");
        assert_eq!(said(999), "999 bytes");
        assert_eq!(said(1_234_567), "1.2 MB");
        assert_eq!(part_of("data-prev-20261201T063000Z"), Some(Part::Snapshot));
        assert_eq!(part_of("data-prev-20261201T063000Z.partial"), Some(Part::Leftover));
        assert_eq!(part_of("data-discarded-x"), Some(Part::SetAside));
        assert_eq!(part_of("data"), None);
    }
}
