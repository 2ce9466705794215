//! Secrets: keys that apps use and never hold (issue 52).
//!
//! A release declares the keys it needs (`[[capabilities.secret]]`,
//! `caps::secret`): each bound to one of its network origins and one place in a
//! request. The person sets each value (`autoapp secret set`, the panel) and
//! the host keeps it where the person's other keys are ([`vault`]): never
//! under the root. On an external call's request to that very origin the host
//! puts the value where the binding says, after every check of
//! `caps::network`, and takes every value it holds out of what comes back
//! ([`outgoing`]): the component never holds a key.
//!
//! A value is given only to the binding it was set for ([`given`]): a release
//! that moves a secret to another origin or place does not get it until the
//! person sets it again for the new binding ([`rebound`]).

pub mod echo;
pub mod outgoing;
pub mod vault;

use crate::manifest::{AppId, Manifest};

pub use crate::caps::secret::{Binding, Place, SecretCap};
pub use vault::{Kept, Set, Vault};

/// A key's value. Its `Debug` says only that it is there; its memory is
/// cleared when it is dropped.
#[derive(Clone)]
pub struct Value(zeroize::Zeroizing<String>);

impl Value {
    pub fn new(s: String) -> Value {
        Value(zeroize::Zeroizing::new(s))
    }

    /// The value itself, for the one place that sends or compares it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Value([redacted])")
    }
}

/// A value an external call is given, with the binding it goes to.
#[derive(Debug, Clone)]
pub struct Given {
    pub name: String,
    pub binding: Binding,
    pub value: Value,
}

/// What one declared secret of a release is, here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Set for this very binding: the release gets it.
    Set { set_at: String },
    /// Not set: the release's requests go without it.
    NotSet,
    /// Set for another binding: the release does not get it until the person
    /// sets it again (a new capability).
    Rebound { was: Binding },
}

/// How each secret `manifest` declares stands against what the person set.
pub fn standing(manifest: &Manifest, set: &std::collections::BTreeMap<String, Set>) -> Vec<(SecretCap, Standing)> {
    manifest
        .capabilities
        .secret
        .iter()
        .map(|s| {
            let standing = match set.get(&s.name) {
                None => Standing::NotSet,
                Some(v) if v.binding == s.binding => Standing::Set { set_at: v.set_at.clone() },
                Some(v) => Standing::Rebound { was: v.binding.clone() },
            };
            (s.clone(), standing)
        })
        .collect()
}

/// The secrets of `manifest` whose value was set for another binding: each
/// a capability the person has not given this release (`secret:<name>`).
pub fn rebound(manifest: &Manifest, set: &std::collections::BTreeMap<String, Set>) -> Vec<String> {
    standing(manifest, set)
        .into_iter()
        .filter(|(_, s)| matches!(s, Standing::Rebound { .. }))
        .map(|(c, _)| format!("secret:{}", c.name))
        .collect()
}

/// What an external call of `app`'s release `manifest` is given: the value of
/// each secret it declares that was set for that very binding (and its
/// origin granted: a request reaches no other).
pub fn given(
    vault: &Vault,
    app: &AppId,
    manifest: &Manifest,
    granted: &[crate::manifest::Origin],
) -> anyhow::Result<Vec<Given>> {
    if manifest.capabilities.secret.is_empty() {
        return Ok(Vec::new());
    }
    let set = vault.list(app)?;
    let mut out = Vec::new();
    for (cap, standing) in standing(manifest, &set) {
        if standing == Standing::NotSet || matches!(standing, Standing::Rebound { .. }) {
            continue;
        }
        if !granted.contains(&cap.binding.origin) {
            continue;
        }
        let value = vault.value(app, &cap.name, &set[&cap.name])?;
        out.push(Given { name: cap.name, binding: cap.binding, value });
    }
    Ok(out)
}

/// Each key `manifest` declares with where it goes, as a question names it
/// (`weather → https://api.example, header Authorization`). Declared, not
/// read: whether a value is set does not change what the person is asked.
pub fn named(manifest: &Manifest) -> Vec<String> {
    manifest.capabilities.secret.iter().map(|s| format!("{} → {}", s.name, s.binding)).collect()
}

/// The vault of the root `app` is in, as its configuration keeps keys.
fn vault_of(app: &crate::root::AppPaths) -> anyhow::Result<Vault> {
    let root = app.dir.parent().and_then(std::path::Path::parent).unwrap_or(&app.dir);
    Vault::of(root, crate::config::Config::load(root)?.secrets_kept_in)
}

/// What finds `app`'s keys — every value the person set for it, whatever
/// binding — in a file about to leave the root (a backup, a package: issue
/// 72, rule 5), and what it could not read (a keyring that does not answer:
/// said, never a reason to stop).
pub fn finder_of(app: &crate::root::AppPaths) -> anyhow::Result<(outgoing::Redactor, Vec<String>)> {
    let vault = vault_of(app)?;
    let mut given = Vec::new();
    let mut unread = Vec::new();
    for (name, set) in vault.list(&app.id)? {
        match vault.value(&app.id, &name, &set) {
            Ok(value) => given.push(Given { name, binding: set.binding, value }),
            Err(e) => unread.push(format!("{name} ({})", crate::elsewhere::text::one_line(&format!("{e:#}")))),
        }
    }
    Ok((outgoing::Redactor::new(&given), unread))
}

/// Refuses a file about to leave the root whose part `part` (at `path`)
/// holds one of the app's keys in any form: one sentence naming the part
/// and the key, never the value.
pub fn check_part(finder: &outgoing::Redactor, part: &str, path: &std::path::Path) -> anyhow::Result<()> {
    let file = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("cannot read {part} to check it ({e})"))?;
    match finder.found_in(std::io::BufReader::new(file))? {
        None => Ok(()),
        Some(key) => Err(crate::error::kinded(
            crate::error::ErrorKind::Denied,
            format!(
                "{part} holds the app's key `{key}` (in some form): nothing was written, so that the key does not leave with it; take it out of the app's data, or remove the key (`autoapp secret remove`) first"
            ),
        )),
    }
}

/// Which secrets of `manifest` were set for another binding, on the root of
/// `app` (see [`rebound`]); none when it declares none.
pub fn rebound_of(app: &crate::root::AppPaths, manifest: &Manifest) -> anyhow::Result<Vec<String>> {
    if manifest.capabilities.secret.is_empty() {
        return Ok(Vec::new());
    }
    Ok(rebound(manifest, &vault_of(app)?.list(&app.id)?))
}

/// One secret as `autoapp secret list` and the panel show it: never a value.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Listed {
    pub name: String,
    /// What the release says it is for; none for a key set for a release
    /// that no longer declares it.
    pub summary: Option<String>,
    /// Where the release would send it (`origin, place`).
    pub binding: Option<String>,
    /// Where it was set for, when that differs (or the release no longer
    /// declares it).
    pub set_for: Option<String>,
    pub set_at: Option<String>,
    pub kept: Option<Kept>,
    /// set | not set | rebound | not declared
    pub state: &'static str,
}

/// The release whose declarations the person's secret actions follow: the
/// one named (a prefix of its id), else the newest (the one about to be
/// activated, as `grant` does).
fn release_of(app: &crate::root::AppPaths, release: Option<&str>) -> anyhow::Result<(String, Manifest)> {
    use crate::error::{ErrorKind, kinded};
    if !app.exists() {
        return Err(kinded(ErrorKind::NotFound, crate::error::no_such_app(&app.id)));
    }
    let id = match release {
        Some(prefix) => crate::release::resolve(app, prefix)?,
        None => {
            crate::release::list(app)?
                .pop()
                .ok_or_else(|| kinded(ErrorKind::NotFound, format!("{} has no release yet; build it first", app.id)))?
                .id
        }
    };
    let manifest = crate::release::manifest(app, &id)?;
    Ok((id, manifest))
}

/// The person's action alone: refused on every channel but `user`.
fn person_only(caller: &crate::gate::Caller, what: &str) -> anyhow::Result<()> {
    if caller.channel() != crate::gate::Channel::User {
        return Err(crate::error::kinded(
            crate::error::ErrorKind::Denied,
            format!("{what} is the person's action alone: no agent, tool, workflow or app may do it"),
        ));
    }
    Ok(())
}

/// What `app`'s newest release (or `release`) declares and what is set.
pub fn list(
    root: &crate::root::Root,
    vault: &Vault,
    app: &AppId,
    release: Option<&str>,
) -> anyhow::Result<Vec<Listed>> {
    let (_, manifest) = release_of(&root.app(app), release)?;
    Ok(listed(&manifest, &vault.list(app)?))
}

/// What `manifest` declares beside what is set for `app` on its root (what
/// `explain` shows); none when it declares none and nothing is set.
pub fn listed_here(app: &crate::root::AppPaths, manifest: &Manifest) -> anyhow::Result<Vec<Listed>> {
    Ok(listed(manifest, &vault_of(app)?.list(&app.id)?))
}

fn listed(manifest: &Manifest, set: &std::collections::BTreeMap<String, Set>) -> Vec<Listed> {
    let mut out: Vec<Listed> = standing(manifest, set)
        .into_iter()
        .map(|(cap, st)| {
            let was = set.get(&cap.name);
            Listed {
                name: cap.name.clone(),
                summary: Some(cap.summary.clone()),
                binding: Some(cap.binding.to_string()),
                set_for: match &st {
                    Standing::Rebound { was } => Some(was.to_string()),
                    _ => None,
                },
                set_at: was.map(|w| w.set_at.clone()),
                kept: was.map(|w| w.kept),
                state: match st {
                    Standing::Set { .. } => "set",
                    Standing::NotSet => "not set",
                    Standing::Rebound { .. } => "rebound",
                },
            }
        })
        .collect();
    for (name, s) in set {
        if !manifest.capabilities.secret.iter().any(|c| &c.name == name) {
            out.push(Listed {
                name: name.clone(),
                summary: None,
                binding: None,
                set_for: Some(s.binding.to_string()),
                set_at: Some(s.set_at.clone()),
                kept: Some(s.kept),
                state: "not declared",
            });
        }
    }
    out
}

/// Sets `app`'s secret `name` to `value`, for the binding the release
/// declares (`release`, else the newest). The person's action alone,
/// recorded in the app's record: the name, the binding and when, never the
/// value.
pub fn set(
    root: &crate::root::Root,
    vault: &Vault,
    caller: &crate::gate::Caller,
    app: &AppId,
    name: &str,
    value: &Value,
    release: Option<&str>,
) -> anyhow::Result<(SecretCap, Set)> {
    person_only(caller, "setting a key")?;
    let paths = root.app(app);
    let done = release_of(&paths, release).and_then(|(id, manifest)| {
        let cap = manifest.capabilities.secret.iter().find(|c| c.name == name).cloned().ok_or_else(|| {
            let names: Vec<&str> = manifest.capabilities.secret.iter().map(|c| c.name.as_str()).collect();
            crate::error::kinded(
                crate::error::ErrorKind::NotFound,
                match names.is_empty() {
                    true => format!("release {} of {app} declares no secret", crate::release::short(&id)),
                    false => format!(
                        "release {} of {app} declares no secret `{}`; it declares {}",
                        crate::release::short(&id),
                        name.escape_debug(),
                        names.join(", ")
                    ),
                },
            )
        })?;
        let set = vault.set(app, name, &cap.binding, value)?;
        Ok((id, cap, set))
    });
    let arguments = serde_json::json!({ "name": name });
    let (_, cap, set) =
        crate::gate::record::recorded(&paths, caller, "secret set", arguments, done, |(id, cap, s)| {
            (id.clone(), format!("set the key {} for {}, kept in the {}", cap.name, cap.binding, kept_said(s.kept)))
        })?;
    Ok((cap, set))
}

/// Removes `app`'s secret `name`. The person's action alone, recorded.
pub fn remove(
    root: &crate::root::Root,
    vault: &Vault,
    caller: &crate::gate::Caller,
    app: &AppId,
    name: &str,
) -> anyhow::Result<()> {
    person_only(caller, "removing a key")?;
    let paths = root.app(app);
    if !paths.exists() {
        return Err(crate::error::kinded(crate::error::ErrorKind::NotFound, crate::error::no_such_app(app)));
    }
    let done = vault.remove(app, name).and_then(|removed| match removed {
        true => Ok(()),
        false => Err(crate::error::kinded(
            crate::error::ErrorKind::NotFound,
            format!("{app} has no key `{}` set; `autoapp secret list {app}` shows what is", name.escape_debug()),
        )),
    });
    let arguments = serde_json::json!({ "name": name });
    crate::gate::record::recorded(&paths, caller, "secret remove", arguments, done, |()| {
        (String::new(), format!("removed the key {name}"))
    })
}

/// Where a value is kept, as the person reads it (after "kept in the").
pub fn kept_said(kept: Kept) -> &'static str {
    match kept {
        Kept::Keyring => "system's keyring",
        Kept::File => "file of keys of your configuration folder (mode 0600): no keyring is used here",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Caller;

    /// Issue 52, rule 6: a value goes only to the binding it was set for,
    /// and only to an origin the person granted.
    #[test]
    fn a_value_goes_only_to_the_binding_it_was_set_for() {
        let config = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        let vault = Vault::at(config.path(), root.path(), crate::config::SecretsKeptIn::File);
        let app = AppId::parse("weather").unwrap();
        let manifest = |origin: &str, header: &str| {
            crate::manifest::parse(
                &format!(
                    "[app]\nid = \"weather\"\nname = \"W\"\nversion = \"0.1.0\"\n\n[[route]]\nname = \"now\"\neffect = \"external\"\nsummary = \"s\"\n\n[capabilities]\nnetwork = [\"{origin}\"]\n\n[[capabilities.secret]]\nname = \"weather\"\norigin = \"{origin}\"\nheader = \"{header}\"\nsummary = \"k\"\n"
                ),
                "autoapp.toml",
            )
            .unwrap()
        };
        let here = manifest("https://api.weather.example", "X-Key");
        let origin = here.capabilities.network.clone();
        // Not set: nothing given, nothing rebound.
        assert!(given(&vault, &app, &here, &origin).unwrap().is_empty());
        assert!(rebound(&here, &vault.list(&app).unwrap()).is_empty());
        assert_eq!(standing(&here, &vault.list(&app).unwrap())[0].1, Standing::NotSet);
        // Set for this binding: given, to a granted origin only.
        let value = Value::new("0123456789abcdef".into());
        vault.set(&app, "weather", &here.capabilities.secret[0].binding, &value).unwrap();
        let got = given(&vault, &app, &here, &origin).unwrap();
        assert_eq!((got.len(), got[0].name.as_str(), got[0].value.expose()), (1, "weather", "0123456789abcdef"));
        assert!(given(&vault, &app, &here, &[]).unwrap().is_empty(), "its origin not granted");
        assert!(matches!(standing(&here, &vault.list(&app).unwrap())[0].1, Standing::Set { .. }));
        // A release that moves it (another origin, or another header): not given, rebound.
        for moved in
            [manifest("https://elsewhere.example", "X-Key"), manifest("https://api.weather.example", "X-Other")]
        {
            let granted = moved.capabilities.network.clone();
            assert!(given(&vault, &app, &moved, &granted).unwrap().is_empty());
            assert_eq!(rebound(&moved, &vault.list(&app).unwrap()), ["secret:weather"]);
            assert!(matches!(standing(&moved, &vault.list(&app).unwrap())[0].1, Standing::Rebound { .. }));
        }
        assert_eq!(named(&here), ["weather → https://api.weather.example, header X-Key"]);
    }

    #[test]
    fn only_the_person_sets_or_removes_a_key() {
        let root_dir = tempfile::tempdir().unwrap();
        let config = tempfile::tempdir().unwrap();
        let root = crate::root::Root::open(root_dir.path()).unwrap();
        let vault = Vault::at(config.path(), root_dir.path(), crate::config::SecretsKeptIn::File);
        let app = AppId::parse("weather").unwrap();
        let value = Value::new("0123456789abcdef".into());
        for caller in [Caller::ai("engineer"), Caller::control("mcp-client"), Caller::workflow("morning")] {
            let set = set(&root, &vault, &caller, &app, "weather", &value, None).unwrap_err();
            assert_eq!(crate::error::kind_of(&set), crate::error::ErrorKind::Denied, "{set:#}");
            assert!(format!("{set:#}").contains("the person's action alone"));
            let removed = remove(&root, &vault, &caller, &app, "weather").unwrap_err();
            assert_eq!(crate::error::kind_of(&removed), crate::error::ErrorKind::Denied);
        }
        // The person, on an app that is not there: refused for that reason.
        let missing = set(&root, &vault, &Caller::command_line(), &app, "weather", &value, None).unwrap_err();
        assert_eq!(crate::error::kind_of(&missing), crate::error::ErrorKind::NotFound);
        assert!(!config.path().join("secrets").exists(), "nothing was kept");
    }
}
