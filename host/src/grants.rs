//! Grants: the capabilities the person allowed an app, kept in
//! `apps/<id>/grants.json`. What a call may use is the intersection of what its
//! release declares and what is granted here.
//!
//! A capability is named on the command line as `network:<origin>`,
//! `files:<name>` or `spawn:<program>`. File paths and programs are resolved
//! when granted (`~` expanded, symlinks resolved, programs found on `PATH`), so
//! what runs later is what the person saw.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::error::{ErrorKind, kinded};
use crate::gate::Caller;
use crate::manifest::{Access, Manifest, Origin};
use crate::root::{AppPaths, write_atomic};

const GRANTS_FILE: &str = "grants.json";

pub use crate::caps::files::{FilesGrant, resolve_path};

/// Everything granted to one app.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grants {
    #[serde(default)]
    pub network: Vec<Origin>,
    #[serde(default)]
    pub files: BTreeMap<String, FilesGrant>,
    /// Program name as declared → absolute path found when granted.
    #[serde(default)]
    pub spawn: BTreeMap<String, PathBuf>,
}

fn file(app: &AppPaths) -> PathBuf {
    app.dir.join(GRANTS_FILE)
}

/// The app's grants (none when nothing was granted).
pub fn load(app: &AppPaths) -> anyhow::Result<Grants> {
    match std::fs::read_to_string(file(app)) {
        Ok(t) => serde_json::from_str(&t).with_context(|| format!("{} is damaged", file(app).display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Grants::default()),
        Err(e) => Err(e).context("cannot read the grants"),
    }
}

fn save(app: &AppPaths, g: &Grants) -> anyhow::Result<()> {
    write_atomic(&file(app), serde_json::to_string_pretty(g)?.as_bytes())
}

/// The capability names of everything `manifest` asks for.
pub fn asked(manifest: &Manifest) -> Vec<String> {
    let c = &manifest.capabilities;
    c.network
        .iter()
        .map(|o| format!("network:{o}"))
        .chain(c.files.iter().map(|f| format!("files:{}", f.name)))
        .chain(c.spawn.iter().map(|s| format!("spawn:{}", s.program)))
        .collect()
}

/// What `manifest` asks for that is not granted (by capability name).
pub fn ungranted(app: &AppPaths, manifest: &Manifest) -> anyhow::Result<Vec<String>> {
    let g = load(app)?;
    let c = &manifest.capabilities;
    let mut out = Vec::new();
    for o in &c.network {
        if !g.network.contains(o) {
            out.push(format!("network:{o}"));
        }
    }
    for f in &c.files {
        match g.files.get(&f.name) {
            Some(fg) if fg.access >= f.access && Some(fg.path.as_path()) == resolve_path(&f.path).ok().as_deref() => {}
            _ => out.push(format!("files:{}", f.name)),
        }
    }
    for s in &c.spawn {
        if !g.spawn.contains_key(&s.program) {
            out.push(format!("spawn:{}", s.program));
        }
    }
    Ok(out)
}

/// A capability named wrongly, or not asked for: the input did not fit.
fn invalid(message: String) -> anyhow::Error {
    kinded(ErrorKind::InvalidInput, message)
}

/// Which of the newest release's asks to grant.
#[derive(Debug, Clone)]
pub enum Asked {
    /// Everything it asks for.
    All,
    /// These (`network:<origin>`, `files:<name>`, `spawn:<program>`).
    Named(Vec<String>),
}

/// Grants what the app's newest release asks for (the release the person is
/// about to activate): the command line's `grant` and the panel's Grant.
pub fn grant_newest(caller: &Caller, app: &AppPaths, which: Asked) -> anyhow::Result<Vec<String>> {
    let id = &app.id;
    if !app.exists() {
        return Err(kinded(ErrorKind::NotFound, crate::error::no_such_app(id)));
    }
    let newest = crate::release::list(app)?.pop().ok_or_else(|| {
        kinded(
            ErrorKind::NotFound,
            format!("{id} has no release yet; build it first with `autoapp build {id}`, then grant what it asks"),
        )
    })?;
    let manifest = crate::release::manifest(app, &newest.id)?;
    let names = match which {
        Asked::All => asked(&manifest),
        Asked::Named(names) => names,
    };
    anyhow::ensure!(
        !names.is_empty(),
        "nothing to grant: {} (`autoapp explain {id}` lists what {id} asks for)",
        if asked(&manifest).is_empty() { "it asks for no capability" } else { "no capability was named" }
    );
    grant(caller, app, &manifest, &names)
}

/// Grants each named capability, as `manifest` declares it. Returns what was
/// granted, each as a line for the person.
/// Recorded in the app's record as `grant`, by `caller`.
pub fn grant(caller: &Caller, app: &AppPaths, manifest: &Manifest, names: &[String]) -> anyhow::Result<Vec<String>> {
    let done = add(app, manifest, names);
    crate::gate::record::recorded(app, caller, "grant", serde_json::json!({ "capabilities": names }), done, |lines| {
        (String::new(), lines.join("; "))
    })
}

fn add(app: &AppPaths, manifest: &Manifest, names: &[String]) -> anyhow::Result<Vec<String>> {
    let mut g = load(app)?;
    let mut done = Vec::new();
    for name in names {
        let (kind, what) = name.split_once(':').ok_or_else(|| {
            invalid(format!("`{}` is not a capability; write network:<origin>, files:<name> or spawn:<program> (see `autoapp explain {}`)", name.escape_debug(), app.id))
        })?;
        match kind {
            "network" => {
                let o = Origin::parse(what).map_err(|e| invalid(e.to_string()))?;
                if !manifest.capabilities.network.contains(&o) {
                    return Err(invalid(format!(
                        "{} does not ask for network {o}; grant only what `autoapp explain {}` lists",
                        app.id, app.id
                    )));
                }
                if !g.network.contains(&o) {
                    g.network.push(o.clone());
                }
                done.push(format!("network {o}"));
            }
            "files" => {
                let f = manifest.capabilities.files.iter().find(|f| f.name == what).ok_or_else(|| {
                    invalid(format!(
                        "{} asks for no folder named `{}`; grant only what `autoapp explain {}` lists",
                        app.id,
                        what.escape_debug(),
                        app.id
                    ))
                })?;
                // What the grant holds is the files capability's to resolve.
                let granted = crate::caps::files::resolve(f).map_err(|e| invalid(format!("{e:#}")))?;
                done.push(format!(
                    "files {} → {} ({})",
                    f.name,
                    granted.path.display(),
                    if f.access == Access::Write { "read and write" } else { "read only" }
                ));
                g.files.insert(f.name.clone(), granted);
            }
            "spawn" => {
                let s = manifest.capabilities.spawn.iter().find(|s| s.program == what).ok_or_else(|| {
                    invalid(format!(
                        "{} asks to run no program `{}`; grant only what `autoapp explain {}` lists",
                        app.id,
                        what.escape_debug(),
                        app.id
                    ))
                })?;
                let path = crate::caps::spawn::resolve(s)?;
                done.push(format!("spawn {} → {}", s.program, path.display()));
                g.spawn.insert(s.program.clone(), path);
            }
            _ => {
                return Err(invalid(format!(
                    "`{}` is not a kind of capability; the kinds are network, files and spawn",
                    kind.escape_debug()
                )));
            }
        }
    }
    save(app, &g)?;
    Ok(done)
}

/// Takes back each named capability; names not granted are reported.
/// Recorded in the app's record as `revoke`, by `caller`.
pub fn revoke(caller: &Caller, app: &AppPaths, names: &[String]) -> anyhow::Result<Vec<String>> {
    let done = take_back(app, names);
    crate::gate::record::recorded(app, caller, "revoke", serde_json::json!({ "capabilities": names }), done, |lines| {
        (String::new(), lines.join("; "))
    })
}

fn take_back(app: &AppPaths, names: &[String]) -> anyhow::Result<Vec<String>> {
    let mut g = load(app)?;
    let mut done = Vec::new();
    for name in names {
        let removed = match name.split_once(':') {
            Some(("network", what)) => {
                let o = Origin::parse(what).map_err(|e| invalid(e.to_string()))?;
                let before = g.network.len();
                g.network.retain(|x| *x != o);
                before != g.network.len()
            }
            Some(("files", what)) => g.files.remove(what).is_some(),
            Some(("spawn", what)) => g.spawn.remove(what).is_some(),
            _ => {
                return Err(invalid(format!(
                    "`{}` is not a capability; write network:<origin>, files:<name> or spawn:<program>",
                    name.escape_debug()
                )));
            }
        };
        if !removed {
            return Err(kinded(
                ErrorKind::NotFound,
                format!("{name} is not granted to {}; `autoapp explain {}` shows what is", app.id, app.id),
            ));
        }
        done.push(name.clone());
    }
    save(app, &g)?;
    Ok(done)
}
