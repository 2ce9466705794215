//! The person's lifecycle actions on an app: activate, rollback, preview,
//! remove. Activation and rollback are journaled pair switches
//! (`release::journal`); a preview runs a candidate on a copy of the data.

use std::path::PathBuf;

use anyhow::Context as _;
use serde::Serialize;

use crate::apps::Apps;
use crate::caps::store::{self, copy_data};
use crate::error::{ErrorKind, kinded};
use crate::gate::Caller;
use crate::gate::record::{self, recorded};
use crate::manifest::AppId;
use crate::release::journal::{self, Journal, Op, Step, fault, folder, rename};
use crate::release::short;
use crate::release::{self};
use crate::root::{AppPaths, Root, write_atomic};

/// How long an activation waits for the app's writes under way to let go
/// of its store, to read the record's last row (else it takes a write to
/// have come during it).
const WRITES_HELD_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// What an activation did.
#[derive(Debug, Serialize)]
pub struct Activated {
    pub app: String,
    pub release: String,
    pub previous: Option<String>,
    pub migrations_applied: usize,
    pub snapshot: Option<String>,
}

impl Activated {
    /// "1 new migration applied", "2 new migrations applied".
    pub fn migrations_said(&self) -> String {
        let n = self.migrations_applied;
        format!("{n} new migration{} applied", if n == 1 { "" } else { "s" })
    }
}

/// How to roll back.
#[derive(Debug, Clone)]
pub enum RollbackHow {
    /// Before the first write: the pair switch in reverse.
    Plain,
    /// To an older release that reads the newer schema.
    Downgrade(String),
    /// Put the snapshot back, setting aside the writes since activation.
    Restore { yes: bool },
}

/// What a rollback did.
#[derive(Debug, Serialize)]
pub struct RolledBack {
    pub app: String,
    pub op: Op,
    pub release: String,
    /// Where the data that was active went (kept, not deleted).
    pub set_aside: Option<String>,
}

/// A preview being served.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Preview {
    pub release: String,
    pub started_at: String,
}

const PREVIEW_FILE: &str = "preview.json";

/// Finishes or undoes every activation or rollback a crash interrupted
/// (`release::journal`), before anything else looks at the apps.
pub fn recover(root: &crate::root::Root) -> anyhow::Result<Vec<journal::Recovered>> {
    journal::recover(root, &applied_in)
}

/// Finishes or undoes `app`'s interrupted activation or rollback, if it has
/// one that no process holds: a launcher that finds an app's data not in
/// place, its rollback's process gone, finishes it as the next command would.
pub fn recover_app(root: &crate::root::Root, app: &AppId) -> anyhow::Result<Option<journal::Recovered>> {
    journal::recover_app(root, app, &applied_in)
}

fn applied_in(data: &std::path::Path) -> anyhow::Result<usize> {
    Ok(store::applied_in(data)?.len())
}

impl Apps {
    fn ensure_app(&self, app: &AppId) -> anyhow::Result<AppPaths> {
        let paths = self.root().app(app);
        if !paths.exists() {
            return Err(kinded(ErrorKind::NotFound, crate::error::no_such_app(app)));
        }
        if let Some(j) = journal::journal(&paths)? {
            anyhow::bail!(
                "an interrupted {:?} of {app} (step {:?}) is waiting for recovery; run the command again and it will be finished or undone first",
                j.op,
                j.step
            );
        }
        Ok(paths)
    }

    /// The app's lock, alone; and again no journal under it (a crash between
    /// `ensure_app`'s look and the lock would have left one).
    fn lock_app(&self, paths: &AppPaths) -> anyhow::Result<journal::AppLock> {
        let lock = journal::lock(paths, true)?;
        if let Some(j) = journal::journal(paths)? {
            anyhow::bail!(
                "an interrupted {:?} of {} (step {:?}) is waiting for recovery; run the command again and it will be finished or undone first",
                j.op,
                paths.id,
                j.step
            );
        }
        Ok(lock)
    }

    /// Makes `release_prefix` the active release of `app`: refuses an
    /// ungranted capability or migrations that do not extend the applied ones;
    /// then snapshots the data, applies the new migrations and switches, each
    /// step journaled.
    pub fn activate(&self, caller: &Caller, app: &AppId, release_prefix: &str) -> anyhow::Result<Activated> {
        let done = self.switch_to(app, release_prefix);
        let arguments = serde_json::json!({ "release": release_prefix });
        recorded(&self.root().app(app), caller, "activate", arguments, done, |a| {
            let previous = a.previous.as_deref().map(short).unwrap_or("none");
            let summary = format!("activated (previous {previous}); {}", a.migrations_said());
            (a.release.clone(), summary)
        })
    }

    fn switch_to(&self, app: &AppId, release_prefix: &str) -> anyhow::Result<Activated> {
        let paths = self.ensure_app(app)?;
        // Two hands never change one app: a run works on it until it ends.
        if let Some(run) = self.plans().running(app)? {
            return Err(crate::error::kinded(
                crate::error::ErrorKind::Conflict,
                format!(
                    "plan {} is running on {app}: an engineer is changing it; stop the run first (`autoapp plan stop {app}`, or Stop in the panel), then activate",
                    run.id
                ),
            ));
        }
        let _lock = self.lock_app(&paths)?;
        let id = release::resolve(&paths, release_prefix)?;
        let previous = release::active(&paths).ok().flatten();
        anyhow::ensure!(
            previous.as_deref() != Some(id.as_str()),
            "release {} is already the active release of {app}; nothing to do",
            short(&id)
        );
        let manifest = release::manifest(&paths, &id)?;
        let (rebound, ungranted): (Vec<String>, Vec<String>) =
            crate::grants::ungranted(&paths, &manifest)?.into_iter().partition(|n| n.starts_with("secret:"));
        if let Some(name) = rebound.first().and_then(|n| n.strip_prefix("secret:")) {
            let cap = manifest.capabilities.secret.iter().find(|c| c.name == name);
            anyhow::bail!(
                "release {} would send your key `{name}` to {}, but you set it for another place; set it again for this one with `autoapp secret set {app} {name} --release {}` and activate again",
                short(&id),
                cap.map(|c| c.binding.to_string()).unwrap_or_default(),
                short(&id)
            );
        }
        if !ungranted.is_empty() {
            anyhow::bail!(
                "release {} asks for {}, which nobody granted; grant it with `autoapp grant {app} {}` (or `--all-asked`) and activate again",
                short(&id),
                ungranted.join(", "),
                ungranted.join(" ")
            );
        }
        // A release that cannot be served is not activated.
        self.load_release(app, &id)?;
        let migrations = release::migrations(&paths, &id, &manifest)?;
        let data = paths.data();
        let applied = store::applied_in(&data)?;
        store::check_extends(&applied, &migrations)?;
        let applied_before = applied.len();

        let stamp = journal::new_stamp(&paths);
        let snapshot = format!("data-prev-{stamp}");
        let mut j = Journal {
            op: Op::Activate,
            step: Step::Begun,
            stamp,
            started_at: release::now_rfc3339(),
            release: id.clone(),
            previous: previous.clone(),
            snapshot: Some(snapshot.clone()),
            aside: None,
        };
        journal::reach(&paths, &mut j, Step::Begun, "activate")?;

        // The snapshot: a consistent copy, renamed into place once complete.
        self.close_store(&data);
        // The record's last row before the copy (the rows this process held
        // written by `close_store`): a write recorded after it may have come
        // after the copy. Read while no write is between its row's commit
        // and its own (a row goes in first: `caps::store::AppStore::commit_group`),
        // so every row up to it has its write in the store, and in the copy.
        let before_snapshot =
            store::with_writes_held(&data, WRITES_HELD_WITHIN, || record::last_row(&data)).and_then(|last| last);
        let partial = folder(&paths, &format!("{snapshot}.partial"));
        copy_data(&data, &partial).context("cannot snapshot the data")?;
        fault("activate:copied");
        rename(&partial, &folder(&paths, &snapshot))?;
        journal::reach(&paths, &mut j, Step::Snapshotted, "activate")?;
        journal::pause("activate:snapshotted");

        let applied = match self.store(&data).and_then(|s| s.migrate(&migrations)) {
            Ok(applied) => applied,
            Err(e) => {
                // The migrations run in one transaction: when none of them is
                // in the data (as many applied as before; a release that adds
                // none, too), nothing changed, and the activation is undone
                // here (not left for the next command to find and recover, or
                // finish), its snapshot removed. Else recovery decides, as
                // after a crash.
                if store::applied_in(&data).is_ok_and(|now| now.len() == applied_before) {
                    let undone = std::fs::remove_dir_all(folder(&paths, &snapshot))
                        .context("cannot remove its snapshot")
                        .and_then(|()| journal::close(&paths, &Journal { snapshot: None, ..j.clone() }, "undone"));
                    if let Err(u) = undone {
                        tracing::warn!(app = %app, "the activation failed, and could not be undone at once (the next command does it): {u:#}");
                    }
                }
                return Err(e);
            }
        };
        fault("activate:migrations-committed");
        journal::reach(&paths, &mut j, Step::Migrated, "activate")?;

        release::set_active(&paths, &id)?;
        journal::reach(&paths, &mut j, Step::Switched, "activate")?;

        journal::record_activation(&paths, &j)?;
        // A write of the release replaced that came while this ran (a tab
        // or an agent still on it) may not be in the snapshot, which a plain
        // rollback would put back without it: it is this activation's first
        // write. Judged from the record, here under the app's lock, whoever
        // made it and whether or not its own noting has come yet.
        let wrote = before_snapshot.and_then(|last| record::writes_after(&data, last)).unwrap_or_else(|e| {
            tracing::warn!(app = %app, "cannot tell from the record whether a write came during the activation, so it is taken to have: {e:#}");
            1
        });
        if wrote > 0
            && let Some(a) = journal::activation(&paths)?
        {
            journal::note_first_write(&paths, a)?;
        }
        journal::close(&paths, &j, "done")?;
        fault("activate:done");
        Ok(Activated {
            app: app.to_string(),
            release: id,
            previous,
            migrations_applied: applied,
            snapshot: Some(snapshot),
        })
    }

    /// Rolls the app back (see [`RollbackHow`]).
    pub fn rollback(&self, caller: &Caller, app: &AppId, how: RollbackHow) -> anyhow::Result<RolledBack> {
        let arguments = match &how {
            RollbackHow::Plain => serde_json::json!({ "how": "plain" }),
            RollbackHow::Downgrade(r) => serde_json::json!({ "how": "downgrade", "release": r }),
            RollbackHow::Restore { yes } => serde_json::json!({ "how": "restore", "yes": yes }),
        };
        let done = self.roll_back(app, how);
        recorded(&self.root().app(app), caller, "rollback", arguments, done, |r| {
            let summary = match &r.set_aside {
                Some(aside) => format!("{:?}: the writes since activation set aside in {aside}", r.op),
                None => format!("{:?}", r.op),
            };
            (r.release.clone(), summary.to_lowercase())
        })
    }

    fn roll_back(&self, app: &AppId, how: RollbackHow) -> anyhow::Result<RolledBack> {
        let paths = self.ensure_app(app)?;
        let _lock = self.lock_app(&paths)?;
        let active =
            release::active(&paths)?.with_context(|| format!("{app} has no active release; nothing to roll back"))?;
        let act = journal::activation(&paths)?
            .filter(|a| a.release == active)
            .with_context(|| format!("{app}'s active release {} was not activated by a journaled activation, so there is nothing to roll back to", short(&active)))?;
        let Some(previous) = act.previous.clone() else {
            anyhow::bail!(
                "{} is the first release {app} activated; there is no earlier release to roll back to",
                short(&active)
            );
        };
        let snapshot = act.snapshot.clone().context("the activation kept no snapshot")?;
        match how {
            RollbackHow::Plain if act.first_write_at.is_some() => anyhow::bail!(
                "{app} {} has written data since {} (its first write was at {}), so a rollback must choose what happens to those writes:\n  - a compatible downgrade keeps them: `autoapp rollback {app} --downgrade RELEASE`, for an older release whose migrations are a prefix of the applied ones and that declares [data] reads_newer_schema = true;\n  - a forward repair keeps them: fix the app, `autoapp build {app}` and `autoapp activate {app}` the new candidate;\n  - a restore discards them: `autoapp rollback {app} --restore --yes` puts back the data as it was before the activation (the writes since are set aside in the app's folder, not deleted).",
                short(&active),
                act.activated_at,
                act.first_write_at.as_deref().unwrap_or("")
            ),
            RollbackHow::Plain => self.swap_back(&paths, Op::SwitchBack, &active, &previous, &snapshot),
            RollbackHow::Restore { yes: false } => anyhow::bail!(
                "a restore discards every write {app} made since its activation at {}; if that is what you want, run `autoapp rollback {app} --restore --yes`",
                act.activated_at
            ),
            RollbackHow::Restore { yes: true } => self.swap_back(&paths, Op::Restore, &active, &previous, &snapshot),
            RollbackHow::Downgrade(prefix) => self.downgrade(&paths, &active, &prefix),
        }
    }

    fn swap_back(
        &self,
        paths: &AppPaths,
        op: Op,
        active: &str,
        previous: &str,
        snapshot: &str,
    ) -> anyhow::Result<RolledBack> {
        let snap = folder(paths, snapshot);
        anyhow::ensure!(
            snap.is_dir(),
            "the snapshot {snapshot} is missing from {}; nothing can be put back",
            paths.dir.display()
        );
        let stamp = journal::new_stamp(paths);
        let aside = match op {
            Op::Restore => format!("data-discarded-{stamp}"),
            _ => format!("data-next-{stamp}"),
        };
        let mut j = Journal {
            op,
            step: Step::Begun,
            stamp,
            started_at: release::now_rfc3339(),
            release: previous.to_string(),
            previous: Some(active.to_string()),
            snapshot: Some(snapshot.to_string()),
            aside: Some(aside.clone()),
        };
        let data = paths.data();
        journal::reach(paths, &mut j, Step::Begun, "rollback")?;
        // No worker of the app starts until the rollback is done.
        let _moving = self.moving_store(&data);
        // The record stays whole: the rows since the snapshot (the activation,
        // the calls) go back with it; the data does not.
        record::carry_over(&data, &snap)?;
        rename(&data, &folder(paths, &aside))?;
        journal::pause("rollback:moved-aside");
        let put_back = journal::reach(paths, &mut j, Step::MovedAside, "rollback").and_then(|()| rename(&snap, &data));
        if let Err(e) = put_back {
            // Undone at once: the data goes back where it was, so that
            // nothing finds its folder missing (the calls that wait for it,
            // the row that records this failure).
            if rename(&folder(paths, &aside), &data).is_ok() {
                let _ = journal::close(paths, &j, "undone");
            }
            return Err(e);
        }
        journal::reach(paths, &mut j, Step::Restored, "rollback")?;
        release::set_active(paths, previous)?;
        journal::reach(paths, &mut j, Step::Switched, "rollback")?;
        journal::record_switched_back(paths, &j, None)?;
        journal::close(paths, &j, "done")?;
        Ok(RolledBack { app: paths.id.to_string(), op, release: previous.to_string(), set_aside: Some(aside) })
    }

    fn downgrade(&self, paths: &AppPaths, active: &str, prefix: &str) -> anyhow::Result<RolledBack> {
        let app = &paths.id;
        let target = release::resolve(paths, prefix)?;
        anyhow::ensure!(target != active, "release {} is already active", short(&target));
        let manifest = release::manifest(paths, &target)?;
        anyhow::ensure!(
            manifest.reads_newer_schema,
            "release {} does not declare [data] reads_newer_schema = true, so it may not work on data that later migrations changed; choose a forward repair or a restore instead",
            short(&target)
        );
        let wanted = release::migrations(paths, &target, &manifest)?;
        let applied = store::applied_in(&paths.data())?;
        anyhow::ensure!(
            store::is_prefix(&wanted, &applied),
            "release {}'s migrations are not a prefix of the ones applied to {app}'s data, so it cannot read it; choose a forward repair or a restore instead",
            short(&target)
        );
        let ungranted = crate::grants::ungranted(paths, &manifest)?;
        anyhow::ensure!(
            ungranted.is_empty(),
            "release {} asks for {}, which nobody granted",
            short(&target),
            ungranted.join(", ")
        );
        self.load_release(app, &target)?;
        let mut j = Journal {
            op: Op::Downgrade,
            step: Step::Begun,
            stamp: journal::new_stamp(paths),
            started_at: release::now_rfc3339(),
            release: target.clone(),
            previous: Some(active.to_string()),
            snapshot: None,
            aside: None,
        };
        journal::reach(paths, &mut j, Step::Begun, "downgrade")?;
        release::set_active(paths, &target)?;
        journal::reach(paths, &mut j, Step::Switched, "downgrade")?;
        journal::record_downgrade(paths, &j)?;
        journal::close(paths, &j, "done")?;
        Ok(RolledBack { app: app.to_string(), op: Op::Downgrade, release: target, set_aside: None })
    }

    /// Starts a preview of `release_prefix` (default: the newest candidate) on
    /// a consistent copy of the app's data, with the candidate's migrations
    /// applied to the copy.
    pub fn preview(
        &self,
        caller: &Caller,
        app: &AppId,
        release_prefix: Option<&str>,
    ) -> anyhow::Result<(Preview, bool)> {
        let done = self.start_preview(app, release_prefix);
        let arguments = serde_json::json!({ "release": release_prefix });
        recorded(&self.root().app(app), caller, "preview-start", arguments, done, |(p, new)| {
            let summary = if *new { "started on a copy of the data" } else { "was already running" };
            (p.release.clone(), summary.to_string())
        })
    }

    fn start_preview(&self, app: &AppId, release_prefix: Option<&str>) -> anyhow::Result<(Preview, bool)> {
        let paths = self.ensure_app(app)?;
        let active = release::active(&paths)?;
        let id = match release_prefix {
            Some(p) => release::resolve(&paths, p)?,
            None => release::list(&paths)?
                .into_iter()
                .rev()
                .find(|r| Some(&r.id) != active.as_ref())
                .map(|r| r.id)
                .with_context(|| format!("{app} has no candidate to preview; build one with `autoapp build {app}`"))?,
        };
        anyhow::ensure!(
            Some(&id) != active.as_ref(),
            "release {} is the active release; preview a candidate instead",
            short(&id)
        );
        let dir = preview_dir(&paths, &id);
        if let Some(p) = read_preview(&dir)? {
            return Ok((p, false));
        }
        self.load_release(app, &id)?;
        let manifest = release::manifest(&paths, &id)?;
        let migrations = release::migrations(&paths, &id, &manifest)?;
        let partial = dir.join("data.partial");
        let _ = std::fs::remove_dir_all(&partial);
        copy_data(&paths.data(), &partial).context("cannot copy the data for the preview")?;
        let result = store::AppStore::open(&partial).and_then(|s| s.migrate(&migrations));
        if let Err(e) = result {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e.context(format!("release {} cannot run on {app}'s data", short(&id))));
        }
        rename(&partial, &dir.join("data"))?;
        let p = Preview { release: id, started_at: release::now_rfc3339() };
        write_atomic(&dir.join(PREVIEW_FILE), serde_json::to_string_pretty(&p)?.as_bytes())?;
        Ok((p, true))
    }

    /// Stops previews (one, or all of the app's) and removes their copies.
    pub fn preview_stop(
        &self,
        caller: &Caller,
        app: &AppId,
        release_prefix: Option<&str>,
    ) -> anyhow::Result<Vec<String>> {
        let done = self.stop_previews(app, release_prefix);
        let arguments = serde_json::json!({ "release": release_prefix });
        recorded(&self.root().app(app), caller, "preview-stop", arguments, done, |stopped| {
            let releases: Vec<&str> = stopped.iter().map(|r| short(r)).collect();
            (stopped.first().cloned().unwrap_or_default(), format!("stopped {}; copies removed", releases.join(", ")))
        })
    }

    fn stop_previews(&self, app: &AppId, release_prefix: Option<&str>) -> anyhow::Result<Vec<String>> {
        let paths = self.ensure_app(app)?;
        let mut stopped = Vec::new();
        for p in previews(&paths)? {
            if release_prefix.is_some_and(|pre| !p.release.starts_with(&pre.to_ascii_lowercase())) {
                continue;
            }
            let dir = preview_dir(&paths, &p.release);
            self.close_store(&dir.join("data"));
            remove_while_let_go(&dir)?;
            stopped.push(p.release);
        }
        if stopped.is_empty() {
            let which = release_prefix.map(|p| format!(" of a release starting with `{p}`")).unwrap_or_default();
            return Err(kinded(ErrorKind::NotFound, format!("{app} has no preview{which} to stop")));
        }
        Ok(stopped)
    }

    /// The preview a `call --preview[=RELEASE]` reaches: the one named, or the
    /// newest.
    pub fn find_preview(&self, app: &AppId, release_prefix: Option<&str>) -> anyhow::Result<(Preview, PathBuf)> {
        pick_preview(&self.root().app(app), release_prefix)
    }

    /// Moves the app's folder to `<root>/trash/<id>-<stamp>`.
    pub fn remove(&self, caller: &Caller, app: &AppId) -> anyhow::Result<PathBuf> {
        if let Some(pid) = crate::root::running_launcher(self.root())? {
            anyhow::bail!(
                "a running launcher (pid {pid}) may be serving {app}; remove it from the panel, or stop the launcher with `autoapp stop` first"
            );
        }
        self.remove_unserved(caller, app)
    }

    /// Moves the app's folder to the trash; the caller has stopped serving it.
    /// The removal's row is written first, into the record that moves with
    /// the data (a failed move is recorded after it).
    pub fn remove_unserved(&self, caller: &Caller, app: &AppId) -> anyhow::Result<PathBuf> {
        let paths = self.root().app(app);
        let (_lock, locked) = match self.ensure_app(app).and_then(|p| journal::lock(&p, true)) {
            Ok(l) => (Some(l), Ok(())),
            Err(e) => (None, Err(e)),
        };
        let ready = locked.and_then(|()| {
            let trash = self.root().dir().join("trash");
            std::fs::create_dir_all(&trash)?;
            Ok(trash.join(format!("{app}-{}", journal::new_stamp(&paths))))
        });
        let to = recorded(&paths, caller, "remove", serde_json::json!({}), ready, |to| {
            let active = release::active(&paths).ok().flatten().unwrap_or_default();
            (active, format!("moved to {}", to.display()))
        })?;
        // A run ends with its app: one working on it now is stopped, its row
        // in the record that moves with the data.
        if let Err(e) = self.plans().end_app(app, "its app was removed") {
            tracing::error!(%app, "cannot end the run of a removed app: {e:#}");
        }
        let moving = self.moving_store(&paths.data());
        if let Err(e) = rename(&paths.dir, &to) {
            // The folder stayed: its record says the move failed.
            let failed: anyhow::Result<PathBuf> = Err(e);
            return recorded(&paths, caller, "remove", serde_json::json!({}), failed, |_| {
                (String::new(), String::new())
            });
        }
        drop(moving);
        // Its keys go with it: an app made later under this id (another
        // person's package) starts with none of them.
        if let Err(e) = self.vault().and_then(|v| v.remove_all(app)) {
            tracing::error!(%app, "cannot remove the keys of a removed app: {e:#}");
        }
        // So does its compiled code (made again from its releases when it is
        // back): an app made later under this id reads none of it.
        forget_compiled(self.root(), app);
        Ok(to)
    }
}

/// Removes the compiled code of `app` when no app has that id (removed, or
/// a restore or install of a new app that did not go through): an app made
/// later under the id reads none of it. What cannot be removed is left to
/// `autoapp prune`, and said in the log.
pub fn forget_compiled(root: &Root, app: &AppId) {
    if root.app(app).exists() {
        return;
    }
    match std::fs::remove_dir_all(root.compiled_of(app)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            tracing::error!(%app, "cannot remove the compiled code of an app that is not here: {e:#} (`autoapp prune` removes it)");
        }
        _ => {}
    }
}

/// The preview of the app whose release starts with `release_prefix`, or
/// its newest, and the copy of the data it runs against.
pub fn pick_preview(paths: &AppPaths, release_prefix: Option<&str>) -> anyhow::Result<(Preview, PathBuf)> {
    let app = &paths.id;
    let mut all = previews(paths)?;
    all.sort_by(|a, b| a.started_at.cmp(&b.started_at));
    let running: Vec<String> = all.iter().map(|p| short(&p.release).to_string()).collect();
    let found = match release_prefix {
        Some(pre) => {
            let pre = pre.to_ascii_lowercase();
            let m: Vec<Preview> = all.into_iter().filter(|p| p.release.starts_with(&pre)).collect();
            anyhow::ensure!(m.len() <= 1, "`{pre}` names {} previews of {app}; give more of the release id", m.len());
            m.into_iter().next()
        }
        None => all.pop(),
    };
    let p = found.ok_or_else(|| match release_prefix {
        Some(pre) if !running.is_empty() => kinded(
            ErrorKind::NotFound,
            format!(
                "{app} has no preview of a release starting with `{}`; its previews are of {}",
                crate::elsewhere::text::terminal(&crate::elsewhere::text::cut(pre, 64)),
                running.join(", ")
            ),
        ),
        _ => {
            kinded(ErrorKind::NotFound, format!("{app} has no preview running; start one with `autoapp preview {app}`"))
        }
    })?;
    let data = preview_dir(paths, &p.release).join("data");
    Ok((p, data))
}

/// Removes `dir`, a preview's folder whose workers were just retired: one
/// of them may still write its last rows there as it ends (a read's row is
/// written up to 50 ms after the read), which makes a removal under way
/// find the folder not empty. Tried again for up to two seconds.
fn remove_while_let_go(dir: &std::path::Path) -> anyhow::Result<()> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => return Ok(()),
            Err(_) if !dir.exists() => return Ok(()),
            Err(_) if std::time::Instant::now() < until => std::thread::sleep(std::time::Duration::from_millis(50)),
            Err(e) => return Err(e).with_context(|| format!("cannot remove {}", dir.display())),
        }
    }
}

fn preview_dir(paths: &AppPaths, release: &str) -> PathBuf {
    paths.dir.join("previews").join(release)
}

fn read_preview(dir: &std::path::Path) -> anyhow::Result<Option<Preview>> {
    match std::fs::read_to_string(dir.join(PREVIEW_FILE)) {
        Ok(t) => Ok(Some(serde_json::from_str(&t)?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The releases a `rollback --downgrade` could go to now, newest first:
/// not the active one, declaring `[data] reads_newer_schema = true`, with
/// migrations that are a prefix of those applied to the data (what the
/// downgrade itself checks first; it also needs their grants).
pub fn downgrades(paths: &AppPaths) -> anyhow::Result<Vec<String>> {
    let active = release::active(paths)?;
    let applied = store::applied_in(&paths.data())?;
    let mut out = Vec::new();
    for r in release::list(paths)?.into_iter().rev().filter(|r| Some(&r.id) != active.as_ref()) {
        let Ok(manifest) = release::manifest(paths, &r.id) else { continue };
        if manifest.reads_newer_schema
            && release::migrations(paths, &r.id, &manifest).is_ok_and(|wanted| store::is_prefix(&wanted, &applied))
        {
            out.push(r.id);
        }
    }
    Ok(out)
}

/// The app's previews.
pub fn previews(paths: &AppPaths) -> anyhow::Result<Vec<Preview>> {
    let mut out = Vec::new();
    let dir = paths.dir.join("previews");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e.into()),
    };
    for e in entries {
        if let Some(p) = read_preview(&e?.path())? {
            out.push(p);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    /// A retired worker writing its last rows while its preview's folder is
    /// removed (as a writer that goes on for 300 ms): the removal waits for
    /// it rather than fail "directory not empty".
    #[test]
    fn a_preview_folder_is_removed_while_a_late_writer_lets_go() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("previews/abc");
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let writing = {
            let data = dir.join("data");
            std::thread::spawn(move || {
                let until = std::time::Instant::now() + std::time::Duration::from_millis(300);
                let mut n = 0;
                while std::time::Instant::now() < until {
                    // (Fails once the folder is gone, as a worker's write would.)
                    let _ = std::fs::write(data.join(format!("runs-{n}")), b"row");
                    n += 1;
                }
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        super::remove_while_let_go(&dir).unwrap();
        writing.join().unwrap();
        assert!(!dir.exists());
    }
}
