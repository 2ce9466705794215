//! `autoapp backup`, `restore`, `space`, `prune` and `logs`: the person's
//! housekeeping ([`crate::housekeeping`], [`crate::applog`]).

use std::io::{BufRead as _, IsTerminal as _};
use std::path::PathBuf;

use super::{Failure, app_id, fail, print_json};
use crate::gate::Caller;
use crate::housekeeping::{self, said};
use crate::release::short;
use crate::root::Root;

/// `autoapp apps`.
pub(super) fn apps(root: Root, json: bool) -> Result<(), Failure> {
    let lines = housekeeping::list::apps(&root).map_err(|e| format!("{e:#}"))?;
    if json {
        return print_json(&serde_json::json!({ "apps": lines }));
    }
    if lines.is_empty() {
        say!("no apps in {}; `autoapp create <app>` makes one", root.dir().display());
        return Ok(());
    }
    say!(
        "{:<20} {:<14} {:<10} {:<10} {:<10} {:<7} name",
        "app",
        "active",
        "version",
        "came from",
        "candidates",
        "served"
    );
    for a in &lines {
        let (release, version) = match &a.active {
            // A release's words, escaped: a release made before the manifest
            // refused line breaks may hold one.
            Some(x) => (short(&x.release).to_string(), crate::elsewhere::text::terminal(&x.version)),
            None => ("none".to_string(), "-".into()),
        };
        say!(
            "{:<20} {:<14} {:<10} {:<10} {:<10} {:<7} {}",
            a.id,
            release,
            version,
            a.came_from,
            a.candidates,
            if a.served { "yes" } else { "no" },
            crate::elsewhere::text::terminal(&a.name)
        );
        if let Some(p) = &a.publisher {
            say!("{:<20} published by {}", "", crate::packages::sign::who(&p.fingerprint, &p.name));
        }
    }
    Ok(())
}

/// A workspace this large is mostly cargo's build output: `space` names `prune --builds`.
const BIG_WORKSPACE: u64 = 50_000_000;

/// `autoapp backup <app> [--to FILE]`.
pub(super) fn backup(root: Root, app: String, to: Option<PathBuf>, json: bool) -> Result<(), Failure> {
    let id = app_id(&app)?;
    if !root.app(&id).exists() {
        return fail(crate::error::no_such_app(&id));
    }
    tell!("backing up {id} (its data is copied as of one moment; the app may go on serving)");
    let b = housekeeping::back_up(&root, &Caller::command_line(), &id, to.as_deref(), &super::progress)
        .map_err(|e| format!("{e:#}"))?;
    if json {
        return print_json(&b);
    }
    say!("backed up {id} (release {}) to {} ({})", short(&b.release), b.file.display(), said(b.bytes));
    say!("restore it with `autoapp restore {}` (add `--as ID` to restore it beside {id})", b.file.display());
    Ok(())
}

/// `autoapp restore FILE [--as <app>]`.
pub(super) fn restore(root: Root, file: PathBuf, as_id: Option<String>, json: bool) -> Result<(), Failure> {
    use crate::elsewhere::text::terminal;
    let as_id = as_id.as_deref().map(app_id).transpose()?;
    tell!(
        "checking {} (every file's hash, the release and its component, SQLite's integrity check and schema, the grants) before placing anything",
        file.display()
    );
    let config = crate::config::Config::load(root.dir()).map_err(|e| format!("{e:#}"))?;
    let runtime = crate::runtime::Runtime::new(&config).map_err(|e| format!("{e:#}"))?;
    let r = housekeeping::restore(&root, &runtime, &Caller::command_line(), &file, as_id.as_ref(), &super::progress)
        .map_err(|e| format!("{e:#}"))?;
    if json {
        return print_json(&r);
    }
    // What the backup said of itself came from elsewhere: escaped.
    say!(
        "restored {} from a backup of {} taken at {}; its active release is {}",
        r.app,
        terminal(&r.backup_of),
        terminal(&r.taken_at),
        short(&r.release)
    );
    if r.rows > 0 {
        say!("its record was made anew here, with the backup's {} rows copied in", r.rows);
    }
    if let Some(p) = &r.publisher {
        say!("installs of it stay pinned to its publisher, as in the backup: {}", terminal(p));
    }
    for g in &r.grants_kept {
        say!("granted, as in the backup (checked as `autoapp grant` checks it): {}", terminal(g));
    }
    for g in &r.grants_refused {
        say!("{}", terminal(g));
    }
    if !r.grants_kept.is_empty() {
        say!("(`autoapp revoke {} CAPABILITY` takes any of them back)", r.app);
    }
    // A key is never in a backup: the ones its release uses are set here.
    let paths = root.app(&app_id(&r.app)?);
    let manifest = crate::release::manifest(&paths, &r.release)?;
    let keys: Vec<String> = crate::secrets::listed_here(&paths, &manifest)?
        .into_iter()
        .filter(|k| k.binding.is_some() && k.state != "set")
        .map(|k| k.name)
        .collect();
    let grant_again: Vec<&String> = r.grant_again.iter().filter(|g| !g.starts_with("secret:")).collect();
    if grant_again.is_empty() {
        say!("everything its release asks for is granted; `autoapp open` serves it");
    } else {
        let names: Vec<&str> = grant_again.iter().map(|g| g.as_str()).collect();
        say!(
            "on this computer these are not granted (a grant the backup held did not pass the check `autoapp grant` makes, or was never granted): {}",
            names.join(", ")
        );
        say!("grant them again with `autoapp grant {} {}`", r.app, names.join(" "));
    }
    for k in keys {
        say!("it uses a key you set, never kept in a backup: `autoapp secret set {} {k}`", r.app);
    }
    Ok(())
}

/// `autoapp space [<app>] [--json]`.
pub(super) fn space(root: Root, app: Option<String>, json: bool) -> Result<(), Failure> {
    let id = app.as_deref().map(app_id).transpose()?;
    let s = housekeeping::space::of(&root, id.as_ref()).map_err(|e| format!("{e:#}"))?;
    if json {
        return print_json(&s);
    }
    if s.apps.is_empty() {
        say!("no apps yet");
    } else {
        let cols = [
            "data",
            "record",
            "snapshots",
            "releases",
            "compiled",
            "previews",
            "logs",
            "workspace",
            "trash",
            "other",
            "total",
        ];
        say_inline!("{:<20}", "app");
        for c in cols {
            say_inline!(" {c:>10}");
        }
        say!();
        for a in &s.apps {
            say_inline!("{:<20}", a.app);
            for v in [
                a.data,
                a.record,
                a.snapshots,
                a.releases,
                a.compiled,
                a.previews,
                a.logs,
                a.workspace,
                a.trash,
                a.other,
                a.total,
            ] {
                say_inline!(" {:>10}", said(v));
            }
            say!();
        }
    }
    if id.is_none() {
        say!("trash of removed apps: {}", said(s.trash_of_removed_apps));
        say!("compiled code no release uses: {}", said(s.compiled_unused));
        say!("everything under {}: {}", root.dir().display(), said(s.root_total));
    }
    say!("`autoapp prune --dry-run` shows what prune would remove (old snapshots, releases no rollback can use)");
    // A workspace's build output is most of a fresh app's space.
    if s.apps.iter().any(|a| a.workspace >= BIG_WORKSPACE) {
        say!(
            "`autoapp prune --builds --dry-run` also shows each workspace's build output (target/), which `autoapp build` makes again"
        );
    }
    Ok(())
}

/// `autoapp prune [<app>] [--dry-run] [--keep N] [--trash] [--builds] [--yes]`.
pub(super) fn prune(
    root: Root,
    app: Option<String>,
    dry_run: bool,
    opts: housekeeping::Options,
    yes: bool,
) -> Result<(), Failure> {
    let id = app.as_deref().map(app_id).transpose()?;
    let plan = housekeeping::prune::plan(&root, id.as_ref(), opts).map_err(|e| format!("{e:#}"))?;
    for k in &plan.kept {
        say!("keep    {} {} {}: {}", k.app, k.kind, k.name, k.why);
    }
    for i in &plan.items {
        match &i.app {
            Some(app) => say!("remove  {app} {} ({})", i.what, said(i.bytes)),
            None => say!("remove  {} ({})", i.what, said(i.bytes)),
        }
    }
    let which = id.as_ref().map(|i| i.to_string()).unwrap_or_else(|| "the root".to_string());
    if plan.items.is_empty() {
        say!("nothing to remove from {which}");
        return Ok(());
    }
    say!("{} to remove, freeing {}", plan.items.len(), said(plan.bytes));
    if dry_run {
        say!("a dry run: nothing was removed; `autoapp prune` without --dry-run removes exactly these");
        return Ok(());
    }
    if !yes {
        if !std::io::stdin().is_terminal() {
            return fail(
                "prune asks before it removes anything; run it in a terminal, or pass --yes after reading the list (`--dry-run` shows it)",
            );
        }
        tell_inline!("remove these {} and free {}? [y/N] ", plan.items.len(), said(plan.bytes));
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer).map_err(|e| e.to_string())?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            say!("nothing was removed");
            return Ok(());
        }
    }
    let done = housekeeping::prune::run(&root, &Caller::command_line(), id.as_ref(), opts, &plan)
        .map_err(|e| format!("{e:#}"))?;
    for (item, why) in &done.skipped {
        say!("left    {} ({why})", item.what);
    }
    let removed: Vec<&housekeeping::prune::Item> = done.removed.iter().collect();
    say!("removed {}; freed {}", housekeeping::prune::counted(&removed), said(done.bytes));
    Ok(())
}

/// `autoapp logs <app> [--follow] [--json] [--since TIME] [--lines N]`.
pub(super) fn logs(
    root: Root,
    app: String,
    follow: bool,
    json: bool,
    since: Option<String>,
    lines: usize,
) -> Result<(), Failure> {
    let id = app_id(&app)?;
    let paths = root.app(&id);
    if !paths.exists() {
        return fail(crate::error::no_such_app(&id));
    }
    let since =
        since.as_deref().map(crate::applog::parse_since).transpose().map_err(|e| Failure { code: 2, message: e })?;
    let dir = crate::applog::dir_of(&paths.dir);
    let print = |l: &crate::applog::Line| -> bool {
        let text = if json {
            crate::elsewhere::text::json_for_terminal(&serde_json::to_string(l).unwrap_or_default()).into_owned()
        } else {
            l.text()
        };
        // A closed pipe (`| head`) ends the command quietly.
        crate::elsewhere::text::write_out(crate::elsewhere::text::Stream::Stdout, &text, true).is_ok()
    };
    if follow {
        // The newest lines, then each new one as it is written (Ctrl+C ends).
        crate::applog::follow(&dir, since, lines, std::time::Duration::from_millis(250), |l| print(&l))?;
        return Ok(());
    }
    let shown = crate::applog::read(&dir, since, lines)?;
    if shown.is_empty() && lines > 0 && !json {
        tell!("{id} has written no log lines{}", if since.is_some() { " since then" } else { "" });
    }
    for l in &shown {
        if !print(l) {
            break;
        }
    }
    Ok(())
}
