//! The `files` capability: granted folders as WASI preopens.
//!
//! Each folder declared **and** granted is opened (with cap-std, inside
//! wasmtime-wasi) at `/files/<name>`, read-only unless both the declaration
//! and the grant say `write`. Paths are resolved from that handle, so `..` and
//! symlinks cannot leave it; nothing else of the host's disk is visible.

use std::path::PathBuf;

use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use crate::grants::Grants;
use crate::manifest::{Access, Capabilities};

/// A folder one call may see.
#[derive(Debug, Clone)]
pub struct Folder {
    pub name: String,
    pub host: PathBuf,
    pub write: bool,
}

/// The folders an external call of a release may see: each folder the
/// release declares **and** the person granted, for the path it was granted
/// for; writable only if both say `write`.
pub fn configure(declared: &Capabilities, grants: &Grants) -> Vec<Folder> {
    declared
        .files
        .iter()
        .filter_map(|f| {
            let granted = grants.files.get(&f.name)?;
            let path = crate::grants::resolve_path(&f.path).ok()?;
            (path == granted.path).then(|| Folder {
                name: f.name.clone(),
                host: granted.path.clone(),
                write: f.access == Access::Write && granted.access == Access::Write,
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
