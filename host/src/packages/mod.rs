//! Packages: apps from other people. A package is one component — the
//! release's component with Autoapp's manifest, migrations and WIT version in
//! custom sections, and the publisher's Ed25519 signature embedded too
//! ([`format`], [`sign`]).
//!
//! Here: the format (writing and bounded reading), publisher keys, signing
//! and verifying, `autoapp pack`, `autoapp publish` ([`registry`]: a Wasm OCI
//! artifact) and `autoapp install FILE|REFERENCE` ([`install`]: checked
//! whole, placed as a candidate, the publisher pinned).

pub mod format;
pub mod install;
pub mod pull;
pub mod registry;
pub mod sign;

use std::collections::BTreeMap;

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::manifest::AppId;
use crate::root::Root;

/// The WIT package a package says its component was built against.
pub fn wit_version() -> &'static str {
    crate::bindings::WIT_PACKAGE
}

/// What `pack` wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Packed {
    pub app: String,
    pub release: String,
    pub version: String,
    pub file: PathBuf,
    pub bytes: u64,
    /// The publisher, when it was signed.
    pub publisher: Option<sign::Publisher>,
}

/// One release of an app, packed (not yet written anywhere).
pub struct Made {
    pub app: String,
    pub release: String,
    pub version: String,
    pub manifest: crate::manifest::Manifest,
    pub bytes: Vec<u8>,
    pub publisher: Option<sign::Publisher>,
}

/// Packs release `release` (a unique prefix; default the active release) of
/// `app`, signed with `key` when given.
pub fn make(root: &Root, app: &AppId, release: Option<&str>, key: Option<&sign::Key>) -> anyhow::Result<Made> {
    let paths = root.app(app);
    if !paths.exists() {
        anyhow::bail!(crate::error::no_such_app(app));
    }
    let id = match release {
        Some(r) => crate::release::resolve(&paths, r)?,
        None => crate::release::active(&paths)?.with_context(|| {
            format!("{app} has no active release; name one with `--release` (`autoapp candidates {app}` lists them)")
        })?,
    };
    let dir = paths.release(&id);
    let info = crate::release::info(&paths, &id)?;
    let component = std::fs::read(dir.join(crate::release::COMPONENT_FILE))
        .with_context(|| format!("cannot read the component of release {}", crate::release::short(&id)))?;
    let manifest_text = std::fs::read_to_string(dir.join(crate::manifest::MANIFEST_FILE))
        .with_context(|| format!("cannot read the manifest of release {}", crate::release::short(&id)))?;
    let manifest = crate::release::manifest(&paths, &id)?;
    let migrations = crate::release::migrations(&paths, &id, &manifest)?;
    let unsigned = format::pack(&format::Contents {
        component: &component,
        manifest_text: &manifest_text,
        migrations: &migrations,
        wit: wit_version(),
    })?;
    // None of the app's keys leaves in it, in any form (issue 72, rule 5):
    // a release holds only what its source held.
    let (finder, _) = crate::secrets::finder_of(&paths)?;
    if let Some(key) = finder.found_in(unsigned.as_slice())? {
        return Err(crate::error::kinded(
            crate::error::ErrorKind::Denied,
            format!(
                "release {} of {app} holds the app's key `{key}` (in some form) in its component, manifest or migrations: no package was made, so that the key does not leave with it; take it out of the app's source and build again",
                crate::release::short(&id)
            ),
        ));
    }
    let (bytes, publisher) = match key {
        Some(k) => {
            let signed = sign::sign(unsigned, k);
            let publisher = sign::verify(&format::read(&signed)?)?;
            (signed, publisher)
        }
        None => (unsigned, None),
    };
    Ok(Made { app: app.to_string(), release: id, version: info.version, manifest, bytes, publisher })
}

/// Packs release `release` (a unique prefix; default the active release) of
/// `app` into one file: `to`, or `<app>-<version>.wasm` in the current
/// folder (or in `to` when it is a folder). Signs it with `key` when given.
/// An existing file is never written over.
pub fn pack(
    root: &Root,
    app: &AppId,
    release: Option<&str>,
    to: Option<&Path>,
    key: Option<&sign::Key>,
) -> anyhow::Result<Packed> {
    let made = make(root, app, release, key)?;
    let name = format!("{app}-{}.wasm", made.version);
    let file = match to {
        Some(t) if t.is_dir() => t.join(&name),
        Some(t) => t.to_path_buf(),
        None => PathBuf::from(&name),
    };
    write_new(&file, &made.bytes)?;
    Ok(Packed {
        app: made.app,
        release: made.release,
        version: made.version,
        file,
        bytes: made.bytes.len() as u64,
        publisher: made.publisher,
    })
}

/// The `org.opencontainers.image.*` annotations of a published package's
/// manifest (and Autoapp's own: the app id and the publisher's fingerprint).
pub fn annotations(made: &Made) -> BTreeMap<String, String> {
    let mut a = BTreeMap::new();
    let oci = |k: &str| format!("org.opencontainers.image.{k}");
    a.insert(oci("title"), made.manifest.name.clone());
    a.insert(oci("version"), made.version.clone());
    a.insert(oci("created"), crate::release::now_rfc3339());
    if let Some(d) = &made.manifest.description {
        a.insert(oci("description"), d.clone());
    }
    if let Some(p) = &made.publisher {
        a.insert(oci("vendor"), p.name.clone());
        a.insert("dev.autoapp.publisher".into(), p.fingerprint.clone());
    }
    a.insert("dev.autoapp.app".into(), made.app.clone());
    a
}

/// Where a package to install comes from, as the person named it.
#[derive(Debug, Clone)]
pub enum Location {
    File(PathBuf),
    Registry(registry::Target),
}

impl Location {
    /// `text` as a location: a file when one is there or it is written as a
    /// path (`/…`, `./…`, `~/…`), else a registry reference.
    pub fn parse(text: &str) -> Result<Location, String> {
        let text = text.trim();
        let file = crate::config::expand_home(text);
        if file.exists() || text.starts_with(['/', '.', '~']) {
            return Ok(Location::File(file));
        }
        registry::parse(text).map(Location::Registry)
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::File(p) => write!(f, "{}", crate::elsewhere::text::terminal(&p.display().to_string())),
            Location::Registry(t) => write!(f, "{t}"),
        }
    }
}

/// The bytes of the package `source` names — at most `max`, a file's size
/// checked before it is read, a registry's layer as it arrives
/// ([`pull::fetch`]) — and where they came from, for the record. A
/// registry's whole answer (manifest, token, layer) comes within `deadline`
/// (`install_deadline_secs`), however slowly it sends (issue 51, rule 9).
pub async fn fetch(
    source: &Location,
    max: u64,
    deadline: std::time::Duration,
    progress: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<(Vec<u8>, String)> {
    match source {
        Location::File(path) => {
            let name =
                path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
            let path = path.clone();
            let bytes = tokio::task::spawn_blocking(move || install::read_file(&path, max)).await??;
            Ok((bytes, format!("the file {name}")))
        }
        Location::Registry(target) => {
            let fetched = tokio::time::timeout(deadline, pull::fetch(target, max, progress)).await.map_err(|_| {
                crate::error::kinded(
                    crate::error::ErrorKind::Denied,
                    format!(
                        "the registry {} took longer than {} s to send {target} (install_deadline_secs in config.toml); nothing was placed",
                        target.registry(),
                        deadline.as_secs()
                    ),
                )
            })??;
            Ok((fetched.bytes, format!("{target} (manifest {})", fetched.digest)))
        }
    }
}

/// Where an app comes from, as the person's lists show it (the panel's
/// row, `apps_list`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Source {
    /// `package` when its active release (else its newest) was installed
    /// from a package, else `workspace`.
    pub kind: &'static str,
    /// That release's version.
    pub version: Option<String>,
    /// The publisher pinned at its first signed install.
    pub publisher: Option<SourcePublisher>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct SourcePublisher {
    pub name: String,
    pub fingerprint: String,
}

/// Where the app of `paths` comes from, given its releases `all` (as the
/// caller listed them) and its `active` one.
pub fn source_of(
    paths: &crate::root::AppPaths,
    all: &[crate::release::ReleaseInfo],
    active: Option<&String>,
) -> Source {
    let shown = all.iter().find(|r| Some(&r.id) == active).or(all.last());
    let publisher = install::pinned(paths)
        .ok()
        .flatten()
        .map(|p| SourcePublisher { name: crate::elsewhere::text::one_line(&p.name), fingerprint: p.fingerprint });
    Source {
        kind: if shown.is_some_and(|r| r.source == "package") { "package" } else { "workspace" },
        version: shown.map(|r| r.version.clone()),
        publisher,
    }
}

/// Writes `bytes` to a new file `path`: never over an existing one.
fn write_new(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut f = match std::fs::OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            anyhow::bail!("{} exists already; a package is never written over: name another with --to", path.display())
        }
        Err(e) => return Err(e).with_context(|| format!("cannot write {}", path.display())),
    };
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    if let Err(e) = written {
        drop(f);
        let _ = std::fs::remove_file(path);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(())
}
