//! `autoapp install FILE|REFERENCE`: a package from elsewhere (a file, or
//! a registry through [`super::registry`]) becomes a candidate
//! release — checked whole first, placed only then, never activated and
//! never granted (those stay the person's, as for any candidate).
//!
//! What is checked, in order, each refused with one sentence and nothing
//! placed: the package's size (`package_max_mib`); its framing and Autoapp's
//! sections ([`super::format::read`], through `elsewhere::wasm`); the
//! signature ([`super::sign::verify`]; none only with `--unsigned`); the WIT
//! version; the manifest, as a build checks it; the migrations it carries
//! being exactly the manifest's; the component, as a build checks it
//! (`build::check_component`, last, as the dearest); the publisher, against the one pinned at the
//! app's first install (`publisher.json`; another key only with
//! `--publisher <its fingerprint>`).

use std::path::Path;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::format;
use super::sign::{self, Publisher};
use crate::error::{ErrorKind, kinded};
use crate::gate::Caller;
use crate::manifest::AppId;
use crate::release::ReleaseInputs;
use crate::root::{AppPaths, Root};
use crate::runtime::Runtime;

/// The publisher pinned for an app, in its folder.
pub const PUBLISHER_FILE: &str = "publisher.json";

/// What an app's first signed install pinned.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pinned {
    pub name: String,
    pub fingerprint: String,
    pub key: String,
    pub pinned_at: String,
}

/// How the package's publisher stands against the app's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Standing {
    /// Nobody signed it (installed with `--unsigned`).
    Unsigned,
    /// The first package installed from this publisher for this app.
    FirstTime,
    /// The publisher pinned at the app's first install.
    Same,
    /// Another key than the pinned one, which the person named.
    Changed { from: String },
}

/// What `install` placed.
#[derive(Debug, Clone, Serialize)]
pub struct Installed {
    pub app: String,
    pub release: String,
    pub version: String,
    /// Whether the install made the app (it had none of that id).
    pub new_app: bool,
    /// Whether the release was new (an identical one may be there already).
    pub new_release: bool,
    /// Where the package came from: a file, or a registry reference with the
    /// manifest's digest.
    pub origin: String,
    pub publisher: Option<Publisher>,
    pub standing: Standing,
}

impl Installed {
    /// How its publisher stands, after "NAME (fingerprint F)": the first
    /// time, the same as the app's, or a new key the person accepted.
    pub fn standing_said(&self) -> String {
        match &self.standing {
            Standing::FirstTime => format!(
                ": the first time you install {} from this publisher; later packages must be signed by the same key",
                self.app
            ),
            Standing::Same => ": the same publisher as the app you have".to_string(),
            Standing::Changed { from } => format!(", which you accepted in place of {from}; it is pinned from now on"),
            Standing::Unsigned => String::new(),
        }
    }
}

/// The person's choices for one install.
#[derive(Debug, Clone, Default)]
pub struct Options<'a> {
    pub as_id: Option<&'a AppId>,
    pub unsigned: bool,
    /// The fingerprint of a new publisher the person accepts.
    pub publisher: Option<&'a str>,
}

/// A refusal of what a package (or its registry) holds.
pub(super) fn refused(why: impl std::fmt::Display) -> anyhow::Error {
    kinded(ErrorKind::Denied, why.to_string())
}

/// The publisher pinned for `app`, if any.
pub fn pinned(app: &AppPaths) -> anyhow::Result<Option<Pinned>> {
    let path = app.dir.join(PUBLISHER_FILE);
    match std::fs::read_to_string(&path) {
        Ok(t) => serde_json::from_str(&t).map(Some).with_context(|| format!("{} is damaged", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Reads `file` whole, refusing one larger than `max` bytes before a byte
/// of it is read (and one that grows meanwhile).
pub fn read_file(file: &Path, max: u64) -> anyhow::Result<Vec<u8>> {
    use std::io::Read as _;
    let f = std::fs::File::open(file).with_context(|| format!("cannot read {}", file.display()))?;
    let len = f.metadata()?.len();
    if len > max {
        return Err(refused(format!(
            "{} is {len} bytes; a package may be at most {max} bytes (package_max_mib)",
            crate::elsewhere::text::terminal(&file.display().to_string())
        )));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    f.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(refused(format!("the package grew past {max} bytes while it was read")));
    }
    Ok(bytes)
}

/// Installs the package `bytes` (read from `origin`) as a candidate release
/// of its app (made when it has none). Nothing is placed unless every check
/// passed.
pub fn install(
    root: &Root,
    runtime: &Runtime,
    caller: &Caller,
    bytes: &[u8],
    origin: &str,
    options: &Options<'_>,
    progress: &dyn Fn(&str),
) -> anyhow::Result<Installed> {
    let package = format::read(bytes).map_err(|e| refused(format!("this is not a package Autoapp installs: {e}")))?;
    progress("read Autoapp's sections: the manifest, the migrations, the WIT version");
    let publisher = sign::verify(&package).map_err(|e| refused(format!("the package is refused: {e}")))?;
    match &publisher {
        Some(p) => progress(&format!("the signature verifies: {} (fingerprint {})", p.name, p.fingerprint)),
        None if options.unsigned => progress("the package is not signed: anyone could have made it"),
        None => {
            return Err(refused(
                "the package is not signed, so anyone could have made it; if you trust where it came from, install it with --unsigned",
            ));
        }
    }
    let ours = crate::bindings::WIT_PACKAGE;
    if package.wit != ours {
        return Err(refused(format!(
            "the package was built against {} and this Autoapp speaks {ours}; ask its publisher for a package built against {ours}",
            crate::elsewhere::named(&package.wit)
        )));
    }
    let manifest = crate::build::check_manifest(runtime, &package.manifest_text, "the package's autoapp.toml")
        .map_err(|e| refused(format!("{e}")))?;
    let id = manifest.id.clone();
    if let Some(as_id) = options.as_id
        && *as_id != id
    {
        return Err(refused(format!(
            "the package is the app {id}; installing it under another id is not offered yet: remove --as, or install it as {id}"
        )));
    }
    let names: Vec<&str> = package.migrations.iter().map(|m| m.name.as_str()).collect();
    if names != manifest.migrations.iter().map(String::as_str).collect::<Vec<_>>() {
        return Err(refused(
            "the migrations the package carries are not the ones its manifest lists ([data] migrations), in that order",
        ));
    }
    let paths = root.app(&id);
    let existing = paths.exists();
    let pin = if existing { pinned(&paths)? } else { None };
    let standing = match (&publisher, &pin) {
        (None, Some(k)) => {
            return Err(refused(format!(
                "{id} was installed from {} (fingerprint {}), and this package is not signed, so anyone could have made it; ask the publisher for a signed package",
                crate::elsewhere::named(&k.name),
                k.fingerprint
            )));
        }
        (None, None) => Standing::Unsigned,
        (Some(_), None) => Standing::FirstTime,
        (Some(p), Some(k)) if p.key == k.key => Standing::Same,
        (Some(p), Some(k)) if options.publisher == Some(p.fingerprint.as_str()) => {
            Standing::Changed { from: k.fingerprint.clone() }
        }
        (Some(p), Some(k)) => {
            return Err(refused(format!(
                "{id} was installed from {} (fingerprint {}), and this package is signed by another key: {} (fingerprint {}); if the publisher told you their key changed, install it with --publisher {}",
                crate::elsewhere::named(&k.name),
                k.fingerprint,
                crate::elsewhere::named(&p.name),
                p.fingerprint,
                p.fingerprint
            )));
        }
    };
    if let Some(fp) = options.publisher
        && !matches!(standing, Standing::Changed { .. })
        && publisher.as_ref().is_none_or(|p| p.fingerprint != fp)
    {
        return Err(refused(format!(
            "--publisher names {} but the package is {}; give the fingerprint the package is signed with, or leave --publisher out",
            crate::elsewhere::named(fp),
            publisher.as_ref().map_or("not signed".to_string(), |p| format!("signed by fingerprint {}", p.fingerprint))
        )));
    }
    // The component last: compiling it is the dearest check.
    crate::build::check_component(root, runtime, package.component, progress)
        .map_err(|e| refused(format!("the package's component is refused: {e}")))?;
    // Every check passed: place it.
    if !existing {
        std::fs::create_dir_all(root.apps_dir())?;
        match std::fs::create_dir(&paths.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(kinded(
                    ErrorKind::Conflict,
                    format!("the app {id} appeared while the package was checked; install it again"),
                ));
            }
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", paths.dir.display())),
        }
    }
    let placed = place(&paths, &package, &manifest, publisher.as_ref(), &standing);
    let done = placed.map(|(info, new_release)| Installed {
        app: id.to_string(),
        release: info.id,
        version: info.version,
        new_app: !existing,
        new_release,
        origin: origin.to_string(),
        publisher: publisher.clone(),
        standing: standing.clone(),
    });
    if done.is_err() && !existing {
        let _ = std::fs::remove_dir_all(&paths.dir);
        return done;
    }
    let arguments = serde_json::json!({
        "publisher": publisher.as_ref().map(|p| &p.fingerprint),
        "unsigned": options.unsigned,
        "from": origin,
    });
    crate::gate::record::recorded(&paths, caller, "install", arguments, done, |i| {
        let from = match &i.publisher {
            Some(p) => format!("signed by {} ({})", crate::elsewhere::text::one_line(&p.name), p.fingerprint),
            None => "not signed".to_string(),
        };
        (
            i.release.clone(),
            format!("installed {} {} from {}, {from}", i.app, i.version, crate::elsewhere::text::one_line(&i.origin)),
        )
    })
}

fn place(
    paths: &AppPaths,
    package: &format::Package<'_>,
    manifest: &crate::manifest::Manifest,
    publisher: Option<&Publisher>,
    standing: &Standing,
) -> anyhow::Result<(crate::release::ReleaseInfo, bool)> {
    let written = crate::release::write(
        paths,
        &ReleaseInputs {
            component: package.component,
            manifest_text: &package.manifest_text,
            manifest,
            migrations: &package.migrations,
            source: "package",
        },
    )?;
    if let Some(p) = publisher
        && matches!(standing, Standing::FirstTime | Standing::Changed { .. })
    {
        let pin = Pinned {
            name: p.name.clone(),
            fingerprint: p.fingerprint.clone(),
            key: p.key.clone(),
            pinned_at: crate::release::now_rfc3339(),
        };
        crate::root::write_atomic(&paths.dir.join(PUBLISHER_FILE), serde_json::to_string_pretty(&pin)?.as_bytes())?;
    }
    Ok(written)
}
