//! `autoapp key`, `pack` and `publish` (a publisher's side of packages) and
//! `autoapp install` (a person's): [`crate::packages`].

use std::path::PathBuf;

use super::{Failure, app_id, fail, print_json};
use crate::packages::{self, sign};
use crate::release::short;
use crate::root::Root;

/// `autoapp key new|show`.
pub(super) fn key(action: String, name: Option<String>, json: bool) -> Result<(), Failure> {
    let dir = crate::config::person_dir()?;
    let key = if action == "new" {
        let name = match name {
            Some(n) => n,
            None => std::env::var("USER").ok().filter(|u| !u.trim().is_empty()).ok_or_else(|| Failure {
                code: 2,
                message: "name the publisher your packages show with --name".into(),
            })?,
        };
        sign::new_key(&dir, &name)?
    } else {
        if name.is_some() {
            return Err(Failure { code: 2, message: "--name is for `autoapp key new`".into() });
        }
        match sign::load(&dir)? {
            Some(k) => k,
            None => {
                return fail(format!(
                    "you have no publisher key in {}; make one with `autoapp key new`",
                    dir.display()
                ));
            }
        }
    };
    if json {
        return print_json(&serde_json::json!({
            "name": key.name, "fingerprint": key.fingerprint(), "key": key.public_hex(), "file": key.file,
        }));
    }
    if action == "new" {
        say!("made a publisher key for {} in {}", key.name, key.file.display());
    } else {
        say!("your publisher key: {} ({})", key.name, key.file.display());
    }
    say!("fingerprint: {}", key.fingerprint());
    if action == "new" {
        say!("keep the file safe and private: a package signed with it says it is yours (`autoapp pack APP --sign`)");
    }
    Ok(())
}

/// The publisher key, when `sign`.
fn signing_key(sign: bool) -> Result<Option<sign::Key>, Failure> {
    if !sign {
        return Ok(None);
    }
    let dir = crate::config::person_dir()?;
    match sign::load(&dir)? {
        Some(k) => Ok(Some(k)),
        None => fail(format!(
            "--sign needs your publisher key and there is none in {}; make one with `autoapp key new`",
            dir.display()
        )),
    }
}

/// A runtime for one registry exchange of the command line.
fn block_on<F: std::future::Future>(f: F) -> Result<F::Output, Failure> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| format!("{e:#}"))?;
    Ok(rt.block_on(f))
}

/// `autoapp publish <app> <registry/repository:tag> [--release ID] [--sign]`.
pub(super) fn publish(
    root: Root,
    app: String,
    reference: String,
    release: Option<String>,
    sign: bool,
    json: bool,
) -> Result<(), Failure> {
    use crate::packages::registry;
    let id = app_id(&app)?;
    let target = registry::parse(&reference).map_err(|m| Failure { code: 2, message: m })?;
    let key = signing_key(sign)?;
    let made = packages::make(&root, &id, release.as_deref(), key.as_ref())?;
    let annotations = packages::annotations(&made);
    let author = made.publisher.as_ref().map(|p| p.name.clone());
    let (version, rel, publisher) = (made.version.clone(), made.release.clone(), made.publisher.clone());
    let published = block_on(registry::publish(&target, made.bytes, annotations, author, &super::progress))??;
    if json {
        return print_json(&serde_json::json!({
            "app": id.to_string(), "version": version, "release": rel,
            "reference": published.reference, "digest": published.digest, "layer": published.layer,
            "publisher": publisher,
        }));
    }
    say!("published {id} {version} (release {}) to {}", short(&rel), published.reference);
    say!("manifest digest: {}", published.digest);
    say!(
        "exactly these bytes: {}@{}",
        published
            .reference
            .rsplit_once(':')
            .filter(|(_, t)| !t.contains('/'))
            .map_or(published.reference.as_str(), |(r, _)| r),
        published.digest
    );
    match &publisher {
        Some(p) => say!("signed by {}", crate::packages::sign::who(&p.fingerprint, &p.name)),
        None => say!("not signed: whoever installs it is told anyone could have made it (`--sign` signs it)"),
    }
    Ok(())
}

/// `autoapp pack <app> [--release ID] [--to FILE] [--sign]`.
pub(super) fn pack(
    root: Root,
    app: String,
    release: Option<String>,
    to: Option<PathBuf>,
    sign: bool,
    json: bool,
) -> Result<(), Failure> {
    let id = app_id(&app)?;
    let key = signing_key(sign)?;
    let p = packages::pack(&root, &id, release.as_deref(), to.as_deref(), key.as_ref())?;
    if json {
        return print_json(&p);
    }
    say!("packed {id} {} (release {}) into {} ({} bytes)", p.version, short(&p.release), p.file.display(), p.bytes);
    match &p.publisher {
        Some(s) => say!("signed by {}", crate::packages::sign::who(&s.fingerprint, &s.name)),
        None => say!("not signed: whoever installs it is told anyone could have made it (`--sign` signs it)"),
    }
    Ok(())
}

/// `autoapp install FILE|REFERENCE [--as APP] [--unsigned] [--publisher FINGERPRINT]`.
pub(super) fn install(
    root: Root,
    source: String,
    as_id: Option<String>,
    unsigned: bool,
    publisher: Option<String>,
    json: bool,
) -> Result<(), Failure> {
    use crate::packages::install;
    let as_id = as_id.as_deref().map(app_id).transpose()?;
    let config = crate::config::Config::load(root.dir()).map_err(|e| format!("{e:#}"))?;
    let max = config.package_max_bytes();
    let source = packages::Location::parse(&source).map_err(|m| Failure { code: 1, message: m })?;
    let (bytes, origin) = block_on(packages::fetch(&source, max, config.install_deadline(), &super::progress))??;
    tell!("checking {source} (its sections, signature, manifest and component) before placing anything");
    let runtime = crate::runtime::Runtime::new(&config).map_err(|e| format!("{e:#}"))?;
    let options = install::Options { as_id: as_id.as_ref(), unsigned, publisher: publisher.as_deref() };
    let caller = crate::gate::Caller::command_line();
    let i = install::install(&root, &runtime, &caller, &bytes, &origin, &options, &super::progress)?;
    if json {
        return print_json(&i);
    }
    // The host's lines first, each starting with the host's words: nothing
    // the package wrote (its version, the publisher's name) comes before
    // them or can push them down (issue 51, rule 5).
    let what = if i.new_app { "a new app" } else { "a candidate of the app you have" };
    say!("installed {} as {what}: candidate {}", i.app, i.release);
    match &i.publisher {
        Some(p) => say!("publisher: {}{}", crate::packages::sign::who(&p.fingerprint, &p.name), i.standing_said()),
        None => say!("not signed: anyone could have made this package"),
    }
    say!("version: {}", crate::elsewhere::text::terminal(&i.version));
    let root_app = root.app(&app_id(&i.app)?);
    let e = crate::explain::explain(&root_app, &i.release)?;
    say!("");
    say_inline!("{}", crate::explain::render(&e));
    say!("");
    say!("nothing of it runs until you activate it: `autoapp activate {} {}`", i.app, short(&i.release));
    Ok(())
}
