//! Finding a program on this computer: what a `spawn` grant resolves, the
//! browser opener, the folder window. A leaf: it knows nothing of apps.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// An absolute program path as given, or the first match on `PATH`.
pub fn find(program: &str) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let executable =
        |p: &Path| p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false);
    if program.starts_with('/') {
        let p = std::fs::canonicalize(program).with_context(|| format!("{program} does not exist"))?;
        anyhow::ensure!(executable(&p), "{program} is not an executable file");
        return Ok(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(program);
        if executable(&candidate) {
            return std::fs::canonicalize(&candidate)
                .with_context(|| format!("cannot resolve {}", candidate.display()));
        }
    }
    anyhow::bail!("the program `{program}` is not on PATH; install it, or declare it by absolute path")
}
