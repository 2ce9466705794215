//! The `files` capability: granted folders as WASI preopens.
//!
//! Each folder declared **and** granted is opened (with cap-std, inside
//! wasmtime-wasi) at `/files/<name>`, read-only unless both the declaration
//! and the grant say `write`. Paths are resolved from that handle, so `..` and
//! symlinks cannot leave it; nothing else of the host's disk is visible.

use std::path::PathBuf;

use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::problems::Problems;

/// A folder one call may see.
#[derive(Debug, Clone)]
pub struct Folder {
    pub name: String,
    pub host: PathBuf,
    pub write: bool,
}

/// Whether a granted folder may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Read,
    Write,
}

/// A folder an app asks for, seen by the guest at `/files/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FilesCap {
    pub name: String,
    /// As written in the manifest: absolute, or starting with `~/`.
    pub path: String,
    pub access: Access,
}

/// A folder the person granted: where it is, and whether it may be written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesGrant {
    /// The absolute, resolved path.
    pub path: PathBuf,
    pub access: Access,
}

/// `[capabilities] files`: the folders a release asks for, each name once,
/// each path absolute or under `~/`.
pub fn parse_declared(v: &toml::Value, p: &mut Problems) -> Vec<FilesCap> {
    let mut out: Vec<FilesCap> = Vec::new();
    match v.as_array() {
        Some(items) => {
            for item in items {
                let Some(ft) = item.as_table() else {
                    p.add("[capabilities] files must list tables, like { name = \"inbox\", path = \"~/inbox\", access = \"read\" }");
                    continue;
                };
                p.unknown_keys(ft, "a [capabilities] files entry", &["name", "path", "access"]);
                let name = p.string(ft, "a [capabilities] files entry", "name");
                let path = p.string(ft, "a [capabilities] files entry", "path");
                let access = match ft.get("access").map(|a| a.as_str()) {
                    None | Some(Some("read")) => Some(Access::Read),
                    Some(Some("write")) => Some(Access::Write),
                    _ => {
                        p.add("[capabilities] files: access must be \"read\" or \"write\"");
                        None
                    }
                };
                if let Some(n) = &name {
                    let ok = n.len() <= 40
                        && n.starts_with(|c: char| c.is_ascii_lowercase())
                        && n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
                    if !ok {
                        p.add(format!(
                            "[capabilities] files: name `{}` must match [a-z][a-z0-9_-]* (it becomes /files/<name>)",
                            n.escape_debug()
                        ));
                    } else if out.iter().any(|f| &f.name == n) {
                        p.add(format!("[capabilities] files: name `{n}` is used twice; give each folder its own name"));
                    }
                }
                if let Some(pa) = &path
                    && !(pa.starts_with('/') || pa.starts_with("~/"))
                {
                    p.add(format!(
                        "[capabilities] files: path `{}` must be absolute or start with ~/",
                        pa.escape_debug()
                    ));
                }
                if let (Some(name), Some(path), Some(access)) = (name, path, access) {
                    out.push(FilesCap { name, path, access });
                }
            }
        }
        None => p.add("[capabilities] files must be an array of tables"),
    }
    out
}

/// `~/x` → `$HOME/x`, then symlinks resolved.
pub fn resolve_path(p: &str) -> anyhow::Result<PathBuf> {
    let path = expand(p)?;
    std::fs::canonicalize(&path).with_context(|| format!("{} does not exist", path.display()))
}

/// `p` with a leading `~/` put as the home folder, nothing resolved.
fn expand(p: &str) -> anyhow::Result<PathBuf> {
    Ok(match p.strip_prefix("~/") {
        Some(rest) => {
            let home = std::env::var_os("HOME").context("HOME is not set, so ~ cannot be resolved")?;
            Path::new(&home).join(rest)
        }
        None => PathBuf::from(p),
    })
}

/// Where the folder `p` would be once made, for a folder not on this
/// computer yet: its nearest existing ancestor resolved, the rest as
/// written. What a grant of it would reach then (a folder that does not
/// exist yet under `~/.ssh` is as marked as one that does: issue 73).
pub fn would_be(p: &str) -> Option<PathBuf> {
    let path = expand(p).ok()?;
    let (base, rest) =
        path.ancestors().find_map(|a| Some((std::fs::canonicalize(a).ok()?, path.strip_prefix(a).ok()?)))?;
    Some(base.join(rest))
}

/// Grants the folder `declared` asks for, where it is now (it must exist).
pub fn resolve(declared: &FilesCap) -> anyhow::Result<FilesGrant> {
    let path = resolve_path(&declared.path)?;
    anyhow::ensure!(
        path.is_dir(),
        "{} is not a folder; create it, then grant files:{} again",
        path.display(),
        declared.name
    );
    Ok(FilesGrant { path, access: declared.access })
}

/// The folders an external call of a release may see: each folder the
/// release declares **and** the person granted, for the path it was granted
/// for; writable only if both say `write`.
pub fn configure(declared: &[FilesCap], granted: &BTreeMap<String, FilesGrant>) -> Vec<Folder> {
    declared
        .iter()
        .filter_map(|f| {
            let g = granted.get(&f.name)?;
            let path = resolve_path(&f.path).ok()?;
            (path == g.path).then(|| Folder {
                name: f.name.clone(),
                host: g.path.clone(),
                write: f.access == Access::Write && g.access == Access::Write,
            })
        })
        .collect()
}

/// One call's folders.
#[derive(Debug, Default)]
pub struct CallFiles {
    folders: Vec<Folder>,
}

impl CallFiles {
    pub fn none() -> CallFiles {
        CallFiles::default()
    }

    pub fn new(folders: Vec<Folder>) -> CallFiles {
        CallFiles { folders }
    }

    /// Whether the call is given no folder at all.
    pub fn is_empty(&self) -> bool {
        self.folders.is_empty()
    }

    /// Preopens every folder in the call's WASI context. A folder that went
    /// missing since it was granted is left out (the guest sees no such path).
    pub fn apply(&self, wasi: &mut WasiCtxBuilder) {
        for f in &self.folders {
            let perms = if f.write { FsPerms::ReadWrite } else { FsPerms::ReadOnly };
            if let Err(e) = wasi.preopened_dir(&f.host, format!("/files/{}", f.name), perms) {
                tracing::warn!(folder = f.name, "a granted folder could not be opened: {e}");
            }
        }
    }
}
