//! `autoapp create`, `wit`, `build`, `candidates`, `explain`, `activate`,
//! `preview`, `preview-stop`, `rollback` and `remove`: an app's releases,
//! from its workspace to the one that runs ([`crate::build`],
//! [`crate::lifecycle`] through [`crate::apps`]).

use std::path::PathBuf;

use super::{Failure, app_id, fail, open_apps, print_json, progress};
use crate::apps::Apps;
use crate::config::Config;
use crate::gate::Caller;
use crate::lifecycle::RollbackHow;
use crate::manifest::AppId;
use crate::release::{self, short};
use crate::root::Root;
use crate::template;

/// `autoapp create`.
pub(super) fn create(root: Root, app: String, at: Option<PathBuf>) -> Result<(), Failure> {
    let id = app_id(&app)?;
    let c = template::create(&Caller::command_line(), &root, &id, at.as_deref())?;
    if c.adopted {
        say!("registered {} with its existing workspace {}", c.app, c.workspace.display());
    } else {
        say!("created {} in {}", c.app, c.workspace.display());
    }
    say!("next: edit it, then `autoapp build {}`", c.app);
    Ok(())
}

/// `autoapp wit`.
pub(super) fn wit(out: PathBuf) -> Result<(), Failure> {
    let files = template::write_wit(&out)?;
    say!("wrote {} files of {} to {}", files.len(), crate::bindings::WIT_PACKAGE, out.display());
    Ok(())
}

/// `autoapp build`.
pub(super) fn build(root: Root, app: String, component: Option<PathBuf>, json: bool) -> Result<(), Failure> {
    let id = app_id(&app)?;
    let apps = open_apps(&root)?;
    // Ctrl+C reaches the build's supervisor, which stops the whole build.
    let stop = crate::build::Stop::default();
    let from = match component.as_deref() {
        Some(file) => crate::build::Source::Component(file),
        None => {
            crate::build::Source::Cargo { target_dir: None, by: crate::build::By::Person, also_read: &[], stop: &stop }
        }
    };
    let built = build_app(&apps, &id, from)?;
    if json {
        print_json(&serde_json::json!({
            "app": built.info.app, "release": built.info.id, "version": built.info.version,
            "new": built.new, "source": built.info.source,
        }))
    } else {
        let what = if built.new { "built" } else { "already built (identical inputs)" };
        say!("{id} {} {what}: candidate {}", built.info.version, built.info.id);
        say!("activate it with `autoapp activate {id} {}`", short(&built.info.id));
        Ok(())
    }
}

/// `autoapp candidates`.
pub(super) fn candidates(root: Root, app: String, json: bool) -> Result<(), Failure> {
    let id = app_id(&app)?;
    let paths = root.app(&id);
    if !paths.exists() {
        return fail(crate::error::no_such_app(&id));
    }
    let active = release::active(&paths)?;
    let all = release::list(&paths)?;
    let candidates: Vec<&release::ReleaseInfo> = all.iter().filter(|r| Some(&r.id) != active.as_ref()).collect();
    let source = crate::packages::source_of(&paths, &all, active.as_ref());
    if json {
        let active = all.iter().find(|r| Some(&r.id) == active.as_ref());
        return print_json(&serde_json::json!({ "active": active, "candidates": candidates, "source": source }));
    }
    match all.iter().find(|r| Some(&r.id) == active.as_ref()) {
        Some(a) => say!("active: {} {} (built {})", short(&a.id), a.version, a.created_at),
        None => say!("active: none"),
    }
    if let Some(p) = source.publisher {
        say!("publisher: {}, pinned at its first signed install", crate::packages::sign::who(&p.fingerprint, &p.name));
    }
    if candidates.is_empty() {
        say!("no candidates; `autoapp build {id}` makes one");
    } else {
        say!("{:<14} {:<10} {:<28} source", "candidate", "version", "built");
        for r in candidates {
            say!("{:<14} {:<10} {:<28} {}", short(&r.id), r.version, r.created_at, r.source);
        }
    }
    Ok(())
}

/// `autoapp explain`.
pub(super) fn explain(root: Root, app: String, which: Option<String>, json: bool) -> Result<(), Failure> {
    let id = app_id(&app)?;
    let paths = root.app(&id);
    if !paths.exists() {
        return fail(crate::error::no_such_app(&id));
    }
    let rid = match which {
        Some(p) => release::resolve(&paths, &p)?,
        None => match release::list(&paths)?.pop() {
            Some(r) => r.id,
            None => {
                return fail(format!("{id} has no release yet; build one with `autoapp build {id}`"));
            }
        },
    };
    let e = crate::explain::explain(&paths, &rid)?;
    // What the kernel can enforce on a spawned program, when the release runs any.
    // The same answer the runtime gives (the kernel, and the
    // configuration's `landlock` and `spawn_unconfined`).
    let spawn = (!release::manifest(&paths, &rid)?.capabilities.spawn.is_empty())
        .then(|| Config::load(root.dir()).map(|c| crate::caps::spawn::Containment::decide(&c).describe()))
        .transpose()?;
    if json {
        let mut v = serde_json::to_value(&e).map_err(|e| e.to_string())?;
        v["spawn_containment"] = serde_json::json!(spawn);
        print_json(&v)
    } else {
        say_inline!("{}", crate::explain::render(&e));
        if let Some(s) = spawn {
            say!("\nspawned programs: {s}");
        }
        Ok(())
    }
}

/// `autoapp activate`.
pub(super) fn activate(root: Root, app: String, release: String, json: bool) -> Result<(), Failure> {
    let id = app_id(&app)?;
    let apps = open_apps(&root)?;
    if let Ok(rid) = release::resolve(&root.app(&id), &release) {
        if let Ok(e) = crate::explain::explain(&root.app(&id), &rid) {
            for w in e.warnings {
                tell!("warning: {w}");
            }
        }
        // A launcher running on this root loads the release before the
        // switch: its first call after it pays nothing of that.
        crate::control::prepare_in_running_launcher(&root, &id, &rid);
    }
    let a = apps.activate(&Caller::command_line(), &id, &release).map_err(|e| format!("{e:#}"))?;
    if json {
        print_json(&a)
    } else {
        say!("activated {} {} ({})", a.app, short(&a.release), a.migrations_said());
        Ok(())
    }
}

/// `autoapp rollback`.
pub(super) fn rollback(
    root: Root,
    app: String,
    downgrade: Option<String>,
    restore: bool,
    yes: bool,
    json: bool,
) -> Result<(), Failure> {
    let id = app_id(&app)?;
    // A rollback moves the data folder; a running launcher holds it open.
    if let Some(f) = crate::control::running(&root)? {
        return fail(format!(
            "a launcher (pid {}) is serving this root and holds {id}'s data open; roll back from the panel, or stop the launcher with `autoapp stop` first",
            f.pid
        ));
    }
    let apps = open_apps(&root)?;
    let how = match (downgrade, restore) {
        (Some(r), _) => RollbackHow::Downgrade(r),
        (None, true) => RollbackHow::Restore { yes },
        (None, false) => RollbackHow::Plain,
    };
    let r = apps.rollback(&Caller::command_line(), &id, how).map_err(|e| format!("{e:#}"))?;
    if json {
        return print_json(&r);
    }
    say!("{id} is back on release {}", short(&r.release));
    if let Some(aside) = r.set_aside {
        say!("the data it replaced is kept in {}", root.app(&id).dir.join(aside).display());
    }
    Ok(())
}

/// `autoapp remove`.
pub(super) fn remove(root: Root, app: String, confirm: String) -> Result<(), Failure> {
    let id = app_id(&app)?;
    if confirm != app {
        return fail(format!("to remove {id}, give its id again: `autoapp remove {id} --yes {id}`"));
    }
    let apps = open_apps(&root)?;
    let to = apps.remove(&Caller::command_line(), &id).map_err(|e| format!("{e:#}"))?;
    say!("moved {id} to {}", to.display());
    Ok(())
}

/// `autoapp preview`.
pub(super) fn preview(root: Root, app: String, release: Option<String>) -> Result<(), Failure> {
    let id = app_id(&app)?;
    let apps = open_apps(&root)?;
    let (p, new) = apps.preview(&Caller::command_line(), &id, release.as_deref()).map_err(|e| format!("{e:#}"))?;
    if new {
        say!("previewing {id} {} on a copy of its data (external routes are refused)", short(&p.release));
    } else {
        say!("{id} {} is already being previewed (since {})", short(&p.release), p.started_at);
    }
    say!("call it with `autoapp call {id} ROUTE --preview`; stop it with `autoapp preview-stop {id}`");
    Ok(())
}

/// `autoapp preview-stop`.
pub(super) fn preview_stop(root: Root, app: String, release: Option<String>) -> Result<(), Failure> {
    let id = app_id(&app)?;
    let apps = open_apps(&root)?;
    for r in apps.preview_stop(&Caller::command_line(), &id, release.as_deref()).map_err(|e| format!("{e:#}"))? {
        say!("stopped the preview of {id} {} and removed its copy of the data", short(&r));
    }
    Ok(())
}

/// Builds `id`, printing progress to stderr.
pub(super) fn build_app(
    apps: &Apps,
    id: &AppId,
    from: crate::build::Source<'_>,
) -> Result<crate::build::Built, Failure> {
    tell!("building {id}");
    crate::build::build(apps.root(), apps.runtime(), id, from, &progress).map_err(|e| match e {
        crate::build::BuildError::Other(e) => Failure { code: 1, message: format!("{e:#}") },
        e => Failure { code: 1, message: e.to_string() },
    })
}
