//! Workflows at run time: the launcher runs the active releases'
//! `[[workflow]]`s on their schedules, on channel `workflow`, through the gate
//! (DESIGN.md, "Workflows"; the manifest side is `manifest::workflow`).
//!
//! - A `read` route runs. A `write` or `external` route runs without asking
//!   only when the person approved *that workflow of that release*: an
//!   approval in `<root>/apps/<id>/workflows.json` binds the release id, the
//!   route and the SHA-256 of the input, so a new release needs a new approval,
//!   and it is read at every run, so a revocation holds from the next run.
//!   Without it the run asks like any call, and with nobody attached it is
//!   refused at once; both are recorded.
//! - Runs of one workflow never overlap: a run still going when the next is
//!   due skips that one, and the skip is recorded.
//! - The schedule starts when the launcher does (or the release is
//!   activated); runs missed while no launcher was running are not made up.
//! - Time enters the runner in one place, a [`Clock`].

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use chrono::{DateTime, Local};
use serde::{Deserialize, Serialize};

use crate::apps::Apps;
use crate::error::{ErrorKind, kinded};
use crate::gate::Caller;
use crate::manifest::{AppId, Effect, Manifest, Workflow};
use crate::release;
use crate::root::{AppPaths, Root};

/// The person's approvals of workflows, in the app's folder.
pub const APPROVALS_FILE: &str = "workflows.json";

/// How often the runner looks at the active releases (to see an activation)
/// when nothing is due sooner.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// One approval: this workflow of this release, with this route and input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    pub workflow: String,
    pub release: String,
    pub route: String,
    pub input_hash: String,
    pub approved_at: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct ApprovalsFile {
    version: u32,
    approvals: Vec<Approval>,
}

/// The approvals of `app` (none when the file does not exist).
pub fn approvals(paths: &AppPaths) -> anyhow::Result<Vec<Approval>> {
    let file = paths.dir.join(APPROVALS_FILE);
    match std::fs::read(&file) {
        Ok(bytes) => {
            let f: ApprovalsFile = serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is damaged; remove it and approve the workflows again", file.display()))?;
            Ok(f.approvals)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", file.display())),
    }
}

fn save(paths: &AppPaths, approvals: Vec<Approval>) -> anyhow::Result<()> {
    let text = serde_json::to_vec_pretty(&ApprovalsFile { version: 1, approvals })?;
    crate::root::write_atomic(&paths.dir.join(APPROVALS_FILE), &text)
}

/// Whether `workflow` of `release_id` may run its write or external route
/// without asking: approved for exactly this release, route and input.
pub fn is_approved(paths: &AppPaths, release_id: &str, workflow: &Workflow) -> bool {
    let hash = crate::gate::arguments_hash(&workflow.input);
    approvals(paths).is_ok_and(|list| {
        list.iter().any(|a| {
            a.workflow == workflow.name && a.release == release_id && a.route == workflow.route && a.input_hash == hash
        })
    })
}

/// The active release of `app` and its manifest.
fn active_manifest(root: &Root, app: &AppId) -> anyhow::Result<(String, Manifest)> {
    let paths = root.app(app);
    if !paths.exists() {
        return Err(kinded(ErrorKind::NotFound, crate::error::no_such_app(app)));
    }
    let id = release::active(&paths)?.with_context(|| {
        format!("{app} has no active release, so no workflow runs; activate one with `autoapp activate {app} RELEASE`")
    })?;
    let manifest = release::manifest(&paths, &id)?;
    Ok((id, manifest))
}

fn find<'m>(manifest: &'m Manifest, app: &AppId, name: &str) -> anyhow::Result<&'m Workflow> {
    manifest.workflows.iter().find(|w| w.name == name).ok_or_else(|| {
        let names: Vec<&str> = manifest.workflows.iter().map(|w| w.name.as_str()).collect();
        kinded(
            ErrorKind::NotFound,
            format!(
                "the active release of {app} has no workflow `{}`; its workflows are {}",
                name.escape_debug(),
                if names.is_empty() { "none".to_string() } else { names.join(", ") }
            ),
        )
    })
}

/// The person approves `name` of the app's active release (channel `user`
/// only: the command line and the panel call this).
/// Recorded in the app's record as `workflow-approve`, by `caller`.
pub fn approve(caller: &Caller, root: &Root, app: &AppId, name: &str) -> anyhow::Result<String> {
    let done = add_approval(root, app, name);
    let arguments = serde_json::json!({ "workflow": name });
    crate::gate::record::recorded(&root.app(app), caller, "workflow-approve", arguments, done, |said| {
        (release::active(&root.app(app)).ok().flatten().unwrap_or_default(), said.clone())
    })
}

fn add_approval(root: &Root, app: &AppId, name: &str) -> anyhow::Result<String> {
    let (release_id, manifest) = active_manifest(root, app)?;
    let w = find(&manifest, app, name)?;
    let effect = manifest.route(&w.route).map(|r| r.effect).unwrap_or(Effect::Read);
    if effect == Effect::Read {
        return Ok(format!("workflow {name} of {app} runs route `{}`, a read: it runs without approval", w.route));
    }
    let paths = root.app(app);
    let mut list = approvals(&paths)?;
    list.retain(|a| a.workflow != name);
    list.push(Approval {
        workflow: name.to_string(),
        release: release_id.clone(),
        route: w.route.clone(),
        input_hash: crate::gate::arguments_hash(&w.input),
        approved_at: release::now_rfc3339(),
    });
    save(&paths, list)?;
    Ok(format!(
        "approved workflow {name} of {app} for release {} ({} route `{}`, {}); a new release needs a new approval",
        crate::release::short(&release_id),
        effect,
        w.route,
        w.schedule
    ))
}

/// The person takes back the approval of `name`.
/// Recorded in the app's record as `workflow-revoke`, by `caller`.
pub fn revoke(caller: &Caller, root: &Root, app: &AppId, name: &str) -> anyhow::Result<String> {
    let done = remove_approval(root, app, name);
    let arguments = serde_json::json!({ "workflow": name });
    crate::gate::record::recorded(&root.app(app), caller, "workflow-revoke", arguments, done, |said| {
        (String::new(), said.clone())
    })
}

fn remove_approval(root: &Root, app: &AppId, name: &str) -> anyhow::Result<String> {
    let paths = root.app(app);
    if !paths.exists() {
        return Err(kinded(ErrorKind::NotFound, crate::error::no_such_app(app)));
    }
    let mut list = approvals(&paths)?;
    let before = list.len();
    list.retain(|a| a.workflow != name);
    anyhow::ensure!(
        list.len() < before,
        "workflow {} of {app} is not approved; `autoapp workflows {app}` lists them",
        name.escape_debug()
    );
    save(&paths, list)?;
    Ok(format!("workflow {name} of {app} is no longer approved: from its next run on it asks"))
}

/// What `autoapp workflows` and the panel show of one workflow.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub name: String,
    pub route: String,
    pub effect: Effect,
    pub schedule: String,
    /// When it would run next if a launcher were running now (local time).
    pub next_run: Option<String>,
    pub last_run: Option<LastRun>,
    /// Whether its route needs the person's approval to run without asking.
    pub needs_approval: bool,
    /// Approved for the active release.
    pub approved: bool,
}

/// The newest run of a workflow in the record.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LastRun {
    pub time: String,
    pub decision: String,
    pub outcome: String,
    pub reason: String,
}

/// The workflows of the app's active release.
pub fn status(root: &Root, app: &AppId, now: DateTime<Local>) -> anyhow::Result<Vec<Status>> {
    let (release_id, manifest) = active_manifest(root, app)?;
    let paths = root.app(app);
    let rows = crate::gate::record::read(&paths.data(), 2000).unwrap_or_default();
    Ok(manifest
        .workflows
        .iter()
        .map(|w| {
            let effect = manifest.route(&w.route).map(|r| r.effect).unwrap_or(Effect::Read);
            let last = rows.iter().rev().find(|r| r.channel == "workflow" && r.caller == w.name).map(|r| LastRun {
                time: r.time.clone(),
                decision: r.decision.clone(),
                outcome: r.outcome.clone(),
                reason: r.reason.clone(),
            });
            Status {
                name: w.name.clone(),
                route: w.route.clone(),
                effect,
                schedule: w.schedule.to_string(),
                next_run: w.schedule.next_after(&now).map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, false)),
                last_run: last,
                needs_approval: effect != Effect::Read,
                approved: effect != Effect::Read && is_approved(&paths, &release_id, w),
            }
        })
        .collect())
}

/// Where time comes from for the runner: the one place it is read.
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Local>;
}

/// The computer's clock, in the person's time zone.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Local> {
        Local::now()
    }
}

/// One workflow of one active release, as the runner keeps it.
struct Planned {
    release: String,
    workflow: Workflow,
    effect: Effect,
    next: Option<DateTime<Local>>,
    running: Arc<AtomicBool>,
}

/// What the runner does with a planned workflow at `now`.
#[derive(Debug, PartialEq, Eq)]
enum Due {
    NotYet,
    Run,
    Skip,
}

fn due(next: Option<&DateTime<Local>>, running: bool, now: &DateTime<Local>) -> Due {
    match next {
        Some(t) if t <= now => {
            if running {
                Due::Skip
            } else {
                Due::Run
            }
        }
        _ => Due::NotYet,
    }
}

/// The plan: every workflow of every active release the launcher serves.
#[derive(Default)]
struct Plan {
    by_app: HashMap<AppId, (String, Vec<Planned>)>,
}

impl Plan {
    /// Brings the plan up to date with the active releases: an app whose
    /// active release changed starts its workflows' schedules anew from `now`.
    fn refresh(&mut self, root: &Root, only: Option<&AppId>, now: &DateTime<Local>) {
        let ids: Vec<AppId> = match only {
            Some(a) => vec![a.clone()],
            None => root.app_ids().unwrap_or_default(),
        };
        self.by_app.retain(|a, _| ids.contains(a));
        for app in ids {
            let active = release::active(&root.app(&app)).ok().flatten();
            let Some(release_id) = active else {
                self.by_app.remove(&app);
                continue;
            };
            if self.by_app.get(&app).is_some_and(|(r, _)| *r == release_id) {
                continue;
            }
            let manifest = match release::manifest(&root.app(&app), &release_id) {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(app = %app, "cannot read the active release's workflows: {e:#}");
                    self.by_app.remove(&app);
                    continue;
                }
            };
            let planned = manifest
                .workflows
                .iter()
                .map(|w| Planned {
                    release: release_id.clone(),
                    effect: manifest.route(&w.route).map(|r| r.effect).unwrap_or(Effect::Read),
                    next: w.schedule.next_after(now),
                    workflow: w.clone(),
                    running: Arc::default(),
                })
                .collect();
            self.by_app.insert(app, (release_id, planned));
        }
    }

    fn soonest(&self) -> Option<DateTime<Local>> {
        self.by_app.values().flat_map(|(_, ws)| ws.iter().filter_map(|w| w.next)).min()
    }
}

/// Runs the workflows of the active releases (of `only`, or of every app)
/// until `stop` fires; then waits for the runs in flight.
pub async fn run(
    apps: Arc<Apps>,
    only: Option<AppId>,
    clock: Arc<dyn Clock>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut plan = Plan::default();
    let mut runs = tokio::task::JoinSet::new();
    loop {
        let now = clock.now();
        plan.refresh(apps.root(), only.as_ref(), &now);
        for (app, (_, planned)) in plan.by_app.iter_mut() {
            for p in planned.iter_mut() {
                match due(p.next.as_ref(), p.running.load(Ordering::Acquire), &now) {
                    Due::NotYet => continue,
                    Due::Skip => {
                        tracing::warn!(
                            app = %app,
                            workflow = %p.workflow.name,
                            "a workflow run was skipped: the previous run was still going"
                        );
                        apps.record_workflow_skip(app, &p.release, &p.workflow, p.effect);
                    }
                    Due::Run => {
                        p.running.store(true, Ordering::Release);
                        let paths = apps.root().app(app);
                        let approved = p.effect != Effect::Read && is_approved(&paths, &p.release, &p.workflow);
                        let (apps, app, release, workflow, running) =
                            (apps.clone(), app.clone(), p.release.clone(), p.workflow.clone(), p.running.clone());
                        runs.spawn(async move {
                            let approved_for = approved.then_some(release.as_str());
                            if let Err(e) = apps.call_workflow(&app, &workflow, approved_for).await {
                                tracing::info!(app = %app, workflow = %workflow.name, "a workflow run did not succeed: {e}");
                            }
                            running.store(false, Ordering::Release);
                        });
                    }
                }
                // From now on: runs missed (a skip, a slow machine) are not made up.
                p.next = p.workflow.schedule.next_after(&now);
            }
        }
        while runs.try_join_next().is_some() {}
        let wait = plan
            .soonest()
            .and_then(|t| (t - clock.now()).to_std().ok())
            .unwrap_or(Duration::ZERO)
            .min(LOOK_EVERY)
            .max(Duration::from_millis(10));
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    // Runs in flight finish like any call; a run still waiting for the
    // person's answer when the launcher stops is given up (nobody will answer
    // a launcher that is going away).
    let finish = async { while runs.join_next().await.is_some() {} };
    if tokio::time::timeout(apps.runtime().config().call_deadline() + STOP_GRACE, finish).await.is_err() {
        runs.abort_all();
        while runs.join_next().await.is_some() {}
    }
}

/// How long past a call's deadline the launcher's stop waits for the
/// workflow runs in flight.
const STOP_GRACE: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone as _;

    #[test]
    fn a_workflow_runs_when_due_and_skips_while_its_last_run_goes_on() {
        let t = |s| Local.with_ymd_and_hms(2026, 11, 30, 7, 0, s).unwrap();
        assert_eq!(due(Some(&t(10)), false, &t(9)), Due::NotYet);
        assert_eq!(due(Some(&t(10)), false, &t(10)), Due::Run);
        assert_eq!(due(Some(&t(10)), true, &t(11)), Due::Skip);
        assert_eq!(due(None, false, &t(11)), Due::NotYet);
    }
}
