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
use crate::manifest::{Access, AppId, Manifest, Origin};
use crate::root::{AppPaths, write_atomic};

const GRANTS_FILE: &str = "grants.json";

pub use crate::caps::files::{FilesGrant, resolve_path};
pub use crate::caps::spawn::SpawnGrant;

/// Everything granted to one app.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grants {
    #[serde(default)]
    pub network: Vec<Origin>,
    #[serde(default)]
    pub files: BTreeMap<String, FilesGrant>,
    /// Program name as declared → the absolute path found when granted, and
    /// the argument pattern granted with it.
    #[serde(default)]
    pub spawn: BTreeMap<String, SpawnGrant>,
}

pub fn file(app: &AppPaths) -> PathBuf {
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
        .chain(c.secret.iter().map(|s| format!("secret:{}", s.name)))
        .collect()
}

/// One capability a release asks for, shown whole where the person decides
/// (issue 51, rule 2): never only the name the app chose for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AskedWhole {
    /// `network:<origin>`, `files:<name>`, `spawn:<program>`.
    pub name: String,
    /// What granting it gives, resolved on this computer: the origin; a
    /// folder as declared, where it is here and its access; a program's path
    /// and its argument pattern (or "any arguments").
    pub whole: String,
    /// Why it needs the person's own eyes, when it reaches what holds their
    /// keys or this launcher's own files: `grant --all-asked` never grants
    /// it, and every place that shows it marks it.
    pub marked: Option<String>,
}

/// Everything `manifest` asks for, each shown whole ([`AskedWhole`]); `root`
/// is the Autoapp root (its files are marked).
pub fn asked_whole(root: &std::path::Path, manifest: &Manifest) -> Vec<AskedWhole> {
    let c = &manifest.capabilities;
    // (The origin is the name: said once.)
    let network = c.network.iter().map(|o| AskedWhole {
        name: format!("network:{o}"),
        whole: "requests to that origin only (its scheme, host and port)".to_string(),
        marked: None,
    });
    let files = c.files.iter().map(|f| {
        let access = if f.access == Access::Write { "read and write" } else { "read only" };
        let (whole, marked) = match resolve_path(&f.path) {
            Ok(real) => (format!("{} → {}, {access}", f.path, real.display()), holds_keys(root, &real)),
            Err(_) => (
                format!("{} (not on this computer), {access}", f.path),
                crate::caps::files::would_be(&f.path).and_then(|at| holds_keys(root, &at)),
            ),
        };
        AskedWhole { name: format!("files:{}", f.name), whole, marked }
    });
    // Where programs run without Landlock (the person's `spawn_unconfined`),
    // one granted any arguments can do anything the person can.
    let unconfined = crate::config::Config::load(root).is_ok_and(|c| c.spawn_unconfined);
    let spawn = c.spawn.iter().map(move |s| {
        let at = match crate::programs::find(&s.program) {
            Ok(p) => p.display().to_string(),
            Err(_) => format!("{} (not found here)", s.program),
        };
        AskedWhole {
            name: format!("spawn:{}", s.program),
            whole: format!("{at} with {}", crate::caps::spawn::pattern_said(&s.args)),
            marked: (unconfined && s.args.is_none()).then(|| {
                "programs run unconfined here (spawn_unconfined = true), so one told any arguments can reach everything you can".to_string()
            }),
        }
    });
    // A key is not granted but set (`autoapp secret set`): shown whole here
    // so the person sees where it would go.
    let secrets = c.secret.iter().map(|s| AskedWhole {
        name: format!("secret:{}", s.name),
        whole: format!("your key `{}` ({}), sent to {}", s.name, s.summary, s.binding),
        marked: None,
    });
    network.chain(files).chain(spawn).chain(secrets).collect()
}

/// What each capability of `manifest` declares, as the release says it (no
/// look-up on this computer): what `explain` compares between two releases,
/// so a folder moved elsewhere, an access widened or a program's pattern
/// changed is a change of capability, not "no change".
pub fn declared_whole(manifest: &Manifest) -> Vec<String> {
    let c = &manifest.capabilities;
    c.network
        .iter()
        .map(|o| format!("network:{o}"))
        .chain(c.files.iter().map(|f| {
            let access = if f.access == Access::Write { "read and write" } else { "read only" };
            format!("files:{} ({}, {access})", f.name, f.path)
        }))
        .chain(c.spawn.iter().map(|s| format!("spawn:{} ({})", s.program, crate::caps::spawn::pattern_said(&s.args))))
        .chain(c.secret.iter().map(|s| format!("secret:{} ({})", s.name, s.binding)))
        .collect()
}

/// Why the folder `path` is marked: it is the person's home folder itself (or
/// holds it), or it holds, is or is inside a place of their keys and logins
/// (`~/.ssh`, `~/.gnupg`, `~/.aws`, `~/.azure`, `~/.kube`, `~/.docker`,
/// `~/.config`, the keyring's folder, `~/.password-store`, `~/.mozilla`,
/// `~/.cargo`, `~/.netrc`, `~/.git-credentials`, and `$XDG_CONFIG_HOME`,
/// `$DOCKER_CONFIG`, `$XDG_RUNTIME_DIR/containers`, `$GNUPGHOME`) or of this
/// launcher (its root, its configuration folder). A list, so not every place
/// a program may keep a secret: what is marked is a floor, and every folder
/// is shown whole whether marked or not.
pub fn holds_keys(root: &std::path::Path, path: &std::path::Path) -> Option<String> {
    let real = |p: PathBuf| std::fs::canonicalize(&p).unwrap_or(p);
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| real(PathBuf::from(h)));
    if let Some(home) = &home
        && home.starts_with(path)
    {
        return Some(format!("it is your home folder {}, or holds it", home.display()));
    }
    let mut keys: Vec<(PathBuf, &str)> = Vec::new();
    if let Some(home) = &home {
        for (sub, what) in [
            (".ssh", "your SSH keys"),
            (".gnupg", "your GnuPG keys"),
            (".aws", "your cloud keys"),
            (".azure", "your cloud keys"),
            (".kube", "your cluster credentials"),
            (".docker", "your registry logins"),
            (".config", "your programs' settings and keys"),
            (".local/share/keyrings", "your keyring"),
            (".password-store", "your passwords"),
            (".mozilla", "your browser's profile"),
            (".cargo", "your crates.io token"),
            (".netrc", "your logins"),
            (".git-credentials", "your git logins"),
        ] {
            keys.push((real(home.join(sub)), what));
        }
    }
    // Where the person's environment says such things are.
    for (var, sub, what) in [
        ("XDG_CONFIG_HOME", "", "your programs' settings and keys"),
        ("DOCKER_CONFIG", "", "your registry logins"),
        ("XDG_RUNTIME_DIR", "containers", "your registry logins"),
        ("GNUPGHOME", "", "your GnuPG keys"),
    ] {
        if let Some(v) = std::env::var_os(var).filter(|v| std::path::Path::new(v).is_absolute()) {
            keys.push((real(PathBuf::from(v).join(sub)), what));
        }
    }
    keys.push((real(root.to_path_buf()), "Autoapp's own files (every app's data, the control secret)"));
    if let Ok(config) = crate::config::person_dir() {
        keys.push((real(config), "Autoapp's configuration and your publisher key"));
    }
    keys.into_iter()
        .find(|(k, _)| k.starts_with(path) || path.starts_with(k))
        .map(|(k, what)| format!("{} holds {what}", k.display()))
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
        // Granted for this very pattern (issue 51, rule 4).
        if !g.spawn.get(&s.program).is_some_and(|sg| sg.fits(s)) {
            out.push(format!("spawn:{}", s.program));
        }
    }
    // A key set for another place is not this release's until the person
    // sets it again (issue 52, rule 6).
    out.extend(crate::secrets::rebound_of(app, manifest)?);
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
        // Never what reaches the person's keys or this launcher's own files:
        // those are granted one by one, by name (issue 51, rule 2).
        Asked::All => {
            let root = app.dir.parent().and_then(std::path::Path::parent).unwrap_or(&app.dir);
            let whole = asked_whole(root, &manifest);
            let marked: Vec<String> = whole
                .iter()
                .filter_map(|a| a.marked.as_ref().map(|why| format!("{} ({}: {why})", a.name, a.whole)))
                .collect();
            // A key is set, not granted (`autoapp secret set`).
            let names: Vec<String> = whole
                .into_iter()
                .filter(|a| a.marked.is_none() && !a.name.starts_with("secret:"))
                .map(|a| a.name)
                .collect();
            if !marked.is_empty() && names.is_empty() {
                return Err(kinded(
                    ErrorKind::Denied,
                    format!(
                        "--all-asked never grants what reaches your keys or Autoapp's own files: {}; if you mean it, name it: autoapp grant {id} <capability>",
                        crate::elsewhere::text::terminal(&marked.join("; "))
                    ),
                ));
            }
            if !marked.is_empty() {
                crate::tell!(
                    "not granted by --all-asked (it reaches your keys or Autoapp's own files; name it to grant it): {}",
                    crate::elsewhere::text::terminal(&marked.join("; "))
                );
            }
            names
        }
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
        let held = resolve(&app.id, manifest, name)?;
        done.push(held.said());
        held.insert_into(&mut g);
    }
    save(app, &g)?;
    Ok(done)
}

/// What granting one capability holds on this computer: what `manifest`
/// declares, resolved here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    Network(Origin),
    /// The folder's name as declared, and where it is here.
    Files(String, FilesGrant),
    /// The program's name as declared, the program it is here and the
    /// argument pattern it is granted with.
    Spawn(String, SpawnGrant),
}

impl Held {
    /// The grant in words, with its target: `network https://x`,
    /// `files docs → /home/a/docs (read only)`, `spawn git → /usr/bin/git`.
    pub fn said(&self) -> String {
        match self {
            Held::Network(o) => format!("network {o}"),
            Held::Files(name, g) => format!(
                "files {name} → {} ({})",
                g.path.display(),
                if g.access == Access::Write { "read and write" } else { "read only" }
            ),
            Held::Spawn(name, g) => {
                format!("spawn {name} → {} with {}", g.path.display(), crate::caps::spawn::pattern_said(&g.args))
            }
        }
    }

    fn insert_into(self, g: &mut Grants) {
        match self {
            Held::Network(o) => {
                if !g.network.contains(&o) {
                    g.network.push(o);
                }
            }
            Held::Files(name, f) => {
                g.files.insert(name, f);
            }
            Held::Spawn(name, sg) => {
                g.spawn.insert(name, sg);
            }
        }
    }
}

/// The one check a grant passes, whoever asks for it (`autoapp grant`, the
/// panel, a restored backup's `grants.json`): `name` (`network:<origin>`,
/// `files:<name>`, `spawn:<program>`) must be something `manifest` asks for,
/// and is resolved as its capability resolves it on this computer (a folder:
/// the declared path, which must exist; a program: found as `grant` finds it).
pub fn resolve(app: &AppId, manifest: &Manifest, name: &str) -> anyhow::Result<Held> {
    let (kind, what) = name.split_once(':').ok_or_else(|| {
        invalid(format!("`{}` is not a capability; write network:<origin>, files:<name> or spawn:<program> (see `autoapp explain {app}`)", name.escape_debug()))
    })?;
    match kind {
        "secret" => Err(invalid(format!(
            "a key is not granted but set by you, bound to where the release sends it: `autoapp secret set {app} {}`",
            what.escape_debug()
        ))),
        "network" => {
            let o = Origin::parse(what).map_err(|e| invalid(e.to_string()))?;
            if !manifest.capabilities.network.contains(&o) {
                return Err(invalid(format!(
                    "{app} does not ask for network {o}; grant only what `autoapp explain {app}` lists"
                )));
            }
            Ok(Held::Network(o))
        }
        "files" => {
            let f = manifest.capabilities.files.iter().find(|f| f.name == what).ok_or_else(|| {
                invalid(format!(
                    "{app} asks for no folder named `{}`; grant only what `autoapp explain {app}` lists",
                    what.escape_debug()
                ))
            })?;
            // What the grant holds is the files capability's to resolve.
            let granted = crate::caps::files::resolve(f).map_err(|e| invalid(format!("{e:#}")))?;
            Ok(Held::Files(f.name.clone(), granted))
        }
        "spawn" => {
            let s = manifest.capabilities.spawn.iter().find(|s| s.program == what).ok_or_else(|| {
                invalid(format!(
                    "{app} asks to run no program `{}`; grant only what `autoapp explain {app}` lists",
                    what.escape_debug()
                ))
            })?;
            let granted = crate::caps::spawn::resolve(s)?;
            Ok(Held::Spawn(s.program.clone(), granted))
        }
        _ => Err(invalid(format!(
            "`{}` is not a kind of capability; the kinds are network, files and spawn",
            kind.escape_debug()
        ))),
    }
}

/// Grants that came from elsewhere (a backup's `grants.json`), each passed
/// through [`resolve`] as if the person granted it now: kept only when the
/// release asks for it and it holds exactly what granting it here would
/// hold (the same folder and access, the same program). Answers what is
/// kept and, for each grant left out, one sentence naming it and why.
pub fn check_from_elsewhere(app: &AppId, manifest: &Manifest, from: &Grants) -> (Grants, Vec<String>) {
    let mut kept = Grants::default();
    let mut refused = Vec::new();
    let shown = |s: &str| crate::elsewhere::named(s);
    let mut check = |name: String, target: String, fits: &dyn Fn(&Held) -> bool| match resolve(app, manifest, &name) {
        Ok(held) if fits(&held) => held.insert_into(&mut kept),
        Ok(held) => refused.push(format!(
            "the grant {} → {} is not kept: granting it here holds {}",
            shown(&name),
            shown(&target),
            crate::elsewhere::text::terminal(&held.said())
        )),
        Err(e) => refused.push(format!(
            "the grant {} → {} is not kept: {}",
            shown(&name),
            shown(&target),
            crate::elsewhere::text::terminal(&crate::elsewhere::text::cut(&format!("{e:#}"), 300))
        )),
    };
    for o in &from.network {
        check(format!("network:{o}"), o.to_string(), &|h: &Held| *h == Held::Network(o.clone()));
    }
    for (name, g) in &from.files {
        let target = g.path.display().to_string();
        check(format!("files:{name}"), target, &|h: &Held| matches!(h, Held::Files(_, held) if held == g));
    }
    for (name, sg) in &from.spawn {
        // A grant written before patterns were part of one names a path alone.
        let target = match sg.recorded {
            true => format!("{} with {}", sg.path.display(), crate::caps::spawn::pattern_said(&sg.args)),
            false => sg.path.display().to_string(),
        };
        check(format!("spawn:{name}"), target, &|h: &Held| matches!(h, Held::Spawn(_, held) if held == sg));
    }
    (kept, refused)
}

/// What each grant of `g` is granted as, by capability name: a folder's path
/// and access, a program's path. (An origin is its own target.)
pub fn targets(g: &Grants) -> BTreeMap<String, String> {
    let files = g.files.iter().map(|(n, f)| {
        let access = if f.access == Access::Write { "read and write" } else { "read only" };
        (format!("files:{n}"), format!("{}, {access}", f.path.display()))
    });
    let spawn = g.spawn.iter().map(|(n, sg)| {
        (format!("spawn:{n}"), format!("{}, {}", sg.path.display(), crate::caps::spawn::pattern_said(&sg.args)))
    });
    files.chain(spawn).collect()
}

/// Each grant of `g` in words, with its target ([`Held::said`]).
pub fn said(g: &Grants) -> Vec<String> {
    g.network
        .iter()
        .map(|o| Held::Network(o.clone()))
        .chain(g.files.iter().map(|(n, f)| Held::Files(n.clone(), f.clone())))
        .chain(g.spawn.iter().map(|(n, sg)| Held::Spawn(n.clone(), sg.clone())))
        .map(|h| h.said())
        .collect()
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
