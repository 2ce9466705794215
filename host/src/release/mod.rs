//! The release store: immutable releases, candidates, the active pointer.
//!
//! A release is a folder `releases/<id>/` holding `component.wasm`,
//! `autoapp.toml`, the migration files the manifest names, and `release.json`.
//! Its id is the SHA-256 of the component, the manifest and the migrations, so
//! identical inputs give the same id and any change gives another. Nothing in
//! a release folder changes after it is written.

pub use crate::caps::store::Migration;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

pub mod journal;

use crate::manifest::{self, MANIFEST_FILE, Manifest};
use crate::root::{AppPaths, write_atomic};

pub const COMPONENT_FILE: &str = "component.wasm";
pub const RELEASE_FILE: &str = "release.json";

/// What `release.json` records about a release.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReleaseInfo {
    pub id: String,
    pub app: String,
    pub version: String,
    pub created_at: String,
    /// SHA-256 of `component.wasm` alone (the compile cache's key).
    pub component_sha256: String,
    pub component_bytes: u64,
    /// How the component was made: `cargo` or `component` (`--component`).
    pub source: String,
}

/// The inputs of a release, before it is written.
pub struct ReleaseInputs<'a> {
    pub component: &'a [u8],
    pub manifest_text: &'a str,
    pub manifest: &'a Manifest,
    /// In manifest order (`name` as the manifest gives the path).
    pub migrations: &'a [Migration],
    pub source: &'a str,
}

/// The release id of `inputs`: SHA-256 over the component, the manifest and
/// each migration, each part framed by its length so parts cannot run together.
pub fn release_id(inputs: &ReleaseInputs<'_>) -> String {
    let mut h = Sha256::new();
    let mut part = |tag: &[u8], bytes: &[u8]| {
        h.update(tag);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    part(b"component", inputs.component);
    part(b"manifest", inputs.manifest_text.as_bytes());
    for Migration { name, sql } in inputs.migrations {
        part(b"migration-name", name.as_bytes());
        part(b"migration", sql.as_bytes());
    }
    hex::encode(h.finalize())
}

/// Writes a release unless an identical one exists. Returns its info and
/// whether it was new.
pub fn write(app: &AppPaths, inputs: &ReleaseInputs<'_>) -> anyhow::Result<(ReleaseInfo, bool)> {
    let id = release_id(inputs);
    if app.release(&id).join(RELEASE_FILE).is_file() {
        return Ok((info(app, &id)?, false));
    }
    let releases = app.releases();
    let made = crate::root::Made::before(&[&releases]);
    let tmp = releases.join(format!(".tmp-{id}-{}", std::process::id()));
    let written = write_into(&releases, &tmp, &id, inputs);
    if let Err(e) = &written {
        // Nothing of the attempt is left (issue 73, rule 1): its temporary
        // folder, and the folders it made on the way. Said without the
        // temporary path, which names nothing the person can find.
        if tmp.exists() {
            let _ = make_writable(&tmp);
            let _ = fs::remove_dir_all(&tmp);
        }
        made.undo();
        return Err(anyhow::anyhow!(
            "cannot write the release {} of {}: {}",
            short(&id),
            app.id,
            crate::elsewhere::text::one_line(&e.root_cause().to_string())
        ));
    }
    written
}

/// [`write`]'s steps: the release written whole into `tmp`, sealed, and
/// renamed into place.
fn write_into(
    releases: &Path,
    tmp: &Path,
    id: &str,
    inputs: &ReleaseInputs<'_>,
) -> anyhow::Result<(ReleaseInfo, bool)> {
    let dir = releases.join(id);
    fs::create_dir_all(releases).with_context(|| format!("cannot create {}", releases.display()))?;
    if tmp.exists() {
        let _ = make_writable(tmp);
        let _ = fs::remove_dir_all(tmp);
    }
    fs::create_dir_all(tmp)?;
    let info = ReleaseInfo {
        id: id.to_string(),
        app: inputs.manifest.id.to_string(),
        version: inputs.manifest.version.clone(),
        // To the microsecond: two builds in one second stay in order, and
        // "the newest release" (what `grant` grants for) is the last built.
        created_at: humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string(),
        component_sha256: hex::encode(Sha256::digest(inputs.component)),
        component_bytes: inputs.component.len() as u64,
        source: inputs.source.to_string(),
    };
    write_atomic(&tmp.join(COMPONENT_FILE), inputs.component)?;
    write_atomic(&tmp.join(MANIFEST_FILE), inputs.manifest_text.as_bytes())?;
    for Migration { name, sql } in inputs.migrations {
        write_atomic(&tmp.join(name), sql.as_bytes())?;
    }
    write_atomic(&tmp.join(RELEASE_FILE), serde_json::to_string_pretty(&info)?.as_bytes())?;
    make_read_only(tmp)?;
    match fs::rename(tmp, &dir) {
        Ok(()) => {}
        // Another build wrote the same release meanwhile: it is identical.
        Err(_) if dir.join(RELEASE_FILE).is_file() => {
            let _ = make_writable(tmp).and_then(|_| fs::remove_dir_all(tmp).map_err(Into::into));
            return Ok((info, false));
        }
        Err(e) => return Err(e.into()),
    }
    crate::root::sync_dir(releases)?;
    Ok((info, true))
}

/// Makes every file of a release folder read-only, as `write` leaves it.
pub fn seal(dir: &Path) -> anyhow::Result<()> {
    make_read_only(dir)
}

/// Every file under `dir`, by its path inside it, sorted.
pub fn files_of(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut out: Vec<String> = walk(dir)?
        .into_iter()
        .filter_map(|p| p.strip_prefix(dir).ok().map(|r| r.to_string_lossy().into_owned()))
        .collect();
    out.sort();
    Ok(out)
}

fn make_read_only(dir: &Path) -> anyhow::Result<()> {
    for entry in walk(dir)? {
        let mut perms = fs::metadata(&entry)?.permissions();
        perms.set_readonly(true);
        fs::set_permissions(&entry, perms)?;
    }
    Ok(())
}

fn make_writable(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    for entry in walk(dir)? {
        fs::set_permissions(&entry, fs::Permissions::from_mode(0o644))?;
    }
    Ok(())
}

fn walk(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                stack.push(entry.path());
            } else {
                files.push(entry.path());
            }
        }
    }
    Ok(files)
}

pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// The info of release `id`.
pub fn info(app: &AppPaths, id: &str) -> anyhow::Result<ReleaseInfo> {
    let path = app.release(id).join(RELEASE_FILE);
    let text = fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is damaged", path.display()))
}

/// Every release of the app, oldest first.
pub fn list(app: &AppPaths) -> anyhow::Result<Vec<ReleaseInfo>> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(app.releases()) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).context("cannot list the releases"),
    };
    for entry in entries {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if is_release_id(&name) {
            out.push(info(app, &name)?);
        }
    }
    out.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    Ok(out)
}

pub fn is_release_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// Why a release name given on the command line names no single release.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(
        "`{given}` is not a release id: give the 64 hex characters of a release or a unique prefix of them (see `autoapp candidates {app}`)"
    )]
    NotHex { given: String, app: String },
    #[error("no release of {app} starts with `{given}`; `autoapp candidates {app}` lists them")]
    None { given: String, app: String },
    #[error("`{given}` names {count} releases of {app}; give more characters of the id")]
    Ambiguous { given: String, app: String, count: usize },
}

impl ResolveError {
    pub fn kind(&self) -> crate::error::ErrorKind {
        match self {
            ResolveError::None { .. } => crate::error::ErrorKind::NotFound,
            ResolveError::NotHex { .. } | ResolveError::Ambiguous { .. } => crate::error::ErrorKind::InvalidInput,
        }
    }
}

/// The release whose id is `given` or starts with it.
pub fn resolve(app: &AppPaths, given: &str) -> anyhow::Result<String> {
    resolve_id(app, given).map_err(|e| crate::error::kinded(e.kind(), e.to_string()))
}

fn resolve_id(app: &AppPaths, given: &str) -> Result<String, ResolveError> {
    let a = app.id.to_string();
    let g = given.to_ascii_lowercase();
    if g.is_empty() || g.len() > 64 || !g.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ResolveError::NotHex { given: given.escape_debug().to_string(), app: a });
    }
    let matches: Vec<String> =
        list(app).unwrap_or_default().into_iter().map(|r| r.id).filter(|id| id.starts_with(&g)).collect();
    match matches.len() {
        0 => Err(ResolveError::None { given: g, app: a }),
        1 => Ok(matches.into_iter().next().expect("one")),
        count => Err(ResolveError::Ambiguous { given: g, app: a, count }),
    }
}

/// The active release's id, if any.
pub fn active(app: &AppPaths) -> anyhow::Result<Option<String>> {
    match fs::read_to_string(app.active_file()) {
        Ok(s) => {
            let id = s.trim().to_string();
            anyhow::ensure!(
                is_release_id(&id) && app.release(&id).is_dir(),
                "the active pointer of {} names no release; activate one with `autoapp activate {} RELEASE`",
                app.id,
                app.id
            );
            Ok(Some(id))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).context("cannot read the active pointer"),
    }
}

/// Points the app at release `id`, atomically.
pub fn set_active(app: &AppPaths, id: &str) -> anyhow::Result<()> {
    write_atomic(&app.active_file(), format!("{id}\n").as_bytes())
}

/// The manifest of a written release.
pub fn manifest(app: &AppPaths, id: &str) -> anyhow::Result<Manifest> {
    manifest::load_stored(&app.release(id).join(MANIFEST_FILE)).map_err(|e| anyhow::anyhow!("{e}"))
}

/// The migrations of a written release, in order.
pub fn migrations(app: &AppPaths, id: &str, manifest: &Manifest) -> anyhow::Result<Vec<Migration>> {
    manifest
        .migrations
        .iter()
        .map(|name| {
            let path = app.release(id).join(name);
            let sql = fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
            Ok(Migration { name: name.clone(), sql })
        })
        .collect()
}

/// The first 12 characters of a release id, for messages.
pub fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::root::Root;

    fn fake_release(app: &AppPaths, id: &str) {
        let dir = app.release(id);
        fs::create_dir_all(&dir).unwrap();
        let info = ReleaseInfo {
            id: id.into(),
            app: app.id.to_string(),
            version: "0.1.0".into(),
            created_at: now_rfc3339(),
            component_sha256: String::new(),
            component_bytes: 0,
            source: "cargo".into(),
        };
        fs::write(dir.join(RELEASE_FILE), serde_json::to_string(&info).unwrap()).unwrap();
    }

    /// Every folder and file under `dir`, by its path inside it.
    fn tree(dir: &Path) -> Vec<String> {
        let mut all = files_of(dir).unwrap_or_default();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.file_type().unwrap().is_dir() {
                    all.push(format!("{}/", e.path().strip_prefix(dir).unwrap().display()));
                    stack.push(e.path());
                }
            }
        }
        all.sort();
        all
    }

    /// Issue 73, rule 1: a release that fails while it is written (here a
    /// migration's name the file system refuses, which the manifest's check
    /// keeps from coming this far) leaves nothing of itself: no temporary
    /// folder, no folder it made; and it says so without the temporary path.
    #[test]
    fn a_release_that_cannot_be_written_leaves_nothing_and_names_no_temporary_path() {
        let d = tempfile::tempdir().unwrap();
        let root = Root::open(d.path()).unwrap();
        let text = "[app]\nid = \"a\"\nname = \"A\"\nversion = \"0.1.0\"\n[[route]]\nname = \"r\"\neffect = \"read\"\nsummary = \"s\"\n";
        let manifest = crate::manifest::parse(text, "autoapp.toml").unwrap();
        let app = root.app(&manifest.id);
        let sql = "CREATE TABLE t (x);".to_string();
        for names in [
            vec![format!("m/{}.sql", "a".repeat(300))],
            vec!["component.wasm/x.sql".to_string()],
            vec!["a.sql".to_string(), "a.sql/b.sql".to_string()],
        ] {
            let migrations: Vec<Migration> =
                names.iter().map(|n| Migration { name: n.clone(), sql: sql.clone() }).collect();
            let inputs = ReleaseInputs {
                component: b"bytes",
                manifest_text: text,
                manifest: &manifest,
                migrations: &migrations,
                source: "package",
            };
            // On a root with no app folder yet, then over an app that has one.
            for existing in [false, true] {
                if existing {
                    fs::create_dir_all(app.releases().join("kept")).unwrap();
                }
                let before = tree(d.path());
                let e = format!("{:#}", write(&app, &inputs).unwrap_err());
                assert_eq!(tree(d.path()), before, "{names:?}, existing {existing}: {e}");
                assert!(e.starts_with("cannot write the release ") && !e.contains(".tmp-"), "{e}");
                assert_eq!(e.lines().count(), 1, "{e}");
            }
            fs::remove_dir_all(&app.dir).unwrap();
        }
        // The same inputs with a name it can write: written whole.
        let migrations = vec![Migration { name: "m/0001.sql".into(), sql }];
        let inputs = ReleaseInputs {
            component: b"bytes",
            manifest_text: text,
            manifest: &manifest,
            migrations: &migrations,
            source: "x",
        };
        let (info, new) = write(&app, &inputs).unwrap();
        assert!(new);
        assert_eq!(
            files_of(&app.release(&info.id)).unwrap(),
            ["autoapp.toml", "component.wasm", "m/0001.sql", "release.json"]
        );
    }

    #[test]
    fn a_prefix_names_one_release_or_says_why_not() {
        let d = tempfile::tempdir().unwrap();
        let root = Root::open(d.path()).unwrap();
        let app = root.app(&crate::manifest::AppId::parse("a").unwrap());
        let one = format!("ab{}", "1".repeat(62));
        let two = format!("ab{}", "2".repeat(62));
        fake_release(&app, &one);
        fake_release(&app, &two);
        assert_eq!(resolve(&app, "ab1").unwrap(), one);
        assert_eq!(resolve(&app, &two.to_uppercase()).unwrap(), two);
        assert!(matches!(resolve_id(&app, "ab"), Err(ResolveError::Ambiguous { count: 2, .. })));
        assert!(matches!(resolve_id(&app, "cd"), Err(ResolveError::None { .. })));
        assert!(matches!(resolve_id(&app, "zz"), Err(ResolveError::NotHex { .. })));
        assert!(matches!(resolve_id(&app, ""), Err(ResolveError::NotHex { .. })));
        use crate::error::{ErrorKind, kind_of};
        assert_eq!(kind_of(&resolve(&app, "cd").unwrap_err()), ErrorKind::NotFound);
        assert_eq!(kind_of(&resolve(&app, "zz").unwrap_err()), ErrorKind::InvalidInput);
    }
}
