//! Activation and rollback as journaled pair switches, and recovery.
//!
//! An operation writes `journal.json` in the app's folder before each step
//! (synced to disk), so a crash at any point leaves a record of how far it got.
//! At the next start, [`recover`] finishes or undoes it so that the app's
//! active release and its data agree. Steps only copy and rename folders;
//! nothing here ever deletes a `data-prev-*` snapshot or data set aside.
//!
//! ```text
//! activate:  begun → snapshotted (data copied to data-prev-<stamp>) → migrated → switched → done
//! rollback:  begun → moved-aside (data → data-<kind>-<stamp>) → restored (data-prev-<stamp> → data) → switched → done
//! downgrade: begun → switched → done
//! ```

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::manifest::AppId;
use crate::root::{AppPaths, Root, sync_dir, write_atomic};

const JOURNAL: &str = "journal.json";
const HISTORY: &str = "history.jsonl";
const ACTIVATION: &str = "activation.json";

/// What is being done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    Activate,
    /// Before the first write: data and data-prev change places; nothing lost.
    SwitchBack,
    /// After writes, approved by the person: the snapshot comes back and the
    /// data since activation is set aside (kept, not deleted).
    Restore,
    /// After writes: an older release that reads the newer schema; data untouched.
    Downgrade,
}

/// How far an operation got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    Begun,
    Snapshotted,
    Migrated,
    MovedAside,
    Restored,
    Switched,
}

/// The operation in progress (`journal.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Journal {
    pub op: Op,
    pub step: Step,
    pub stamp: String,
    pub started_at: String,
    /// The release that will be active when the operation is done.
    pub release: String,
    /// The release active when it began.
    pub previous: Option<String>,
    /// The snapshot folder involved (`data-prev-<stamp>`), by name.
    pub snapshot: Option<String>,
    /// Where the current data goes in a rollback, by name.
    pub aside: Option<String>,
}

/// Whether an operation of the app whose folder is `app_dir` is under way,
/// or was left unfinished for recovery (its journal is there).
pub fn open_in(app_dir: &Path) -> bool {
    app_dir.join(JOURNAL).exists()
}

/// The current activation (`activation.json`): what a rollback goes back to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Activation {
    pub release: String,
    pub previous: Option<String>,
    /// The snapshot of the data taken before this release's migrations.
    pub snapshot: Option<String>,
    pub activated_at: String,
    /// When this release first committed a write; `None` until it does.
    pub first_write_at: Option<String>,
}

/// A line of `history.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HistoryLine {
    pub time: String,
    pub op: Op,
    /// `done`, `finished by recovery`, `undone by recovery`, `first write`.
    pub outcome: String,
    pub release: String,
    pub previous: Option<String>,
    pub snapshot: Option<String>,
    pub aside: Option<String>,
}

/// Reads this app's journal, if an operation is in progress.
pub fn journal(app: &AppPaths) -> anyhow::Result<Option<Journal>> {
    read_json(&app.dir.join(JOURNAL))
}

/// Whether an activation or rollback of the app is under way (or was
/// interrupted): its journal is open. Read as the active pointer is, from
/// memory until something on its way changes (`crate::pointer`); a journal
/// that cannot be read counts as open.
pub fn under_way(app: &AppPaths) -> bool {
    let file = app.dir.join(JOURNAL);
    crate::pointer::read_through(&file, || match std::fs::read_to_string(&file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        read => read,
    })
    .map_or(true, |text| !text.is_empty())
}

/// Reads the current activation record.
pub fn activation(app: &AppPaths) -> anyhow::Result<Option<Activation>> {
    read_json(&activation_file(app))
}

/// The file of the current activation ([`activation`]).
pub fn activation_file(app: &AppPaths) -> PathBuf {
    app.dir.join(ACTIVATION)
}

pub fn set_activation(app: &AppPaths, a: &Activation) -> anyhow::Result<()> {
    write_atomic(&app.dir.join(ACTIVATION), serde_json::to_string_pretty(a)?.as_bytes())
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> anyhow::Result<Option<T>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(serde_json::from_str(&t).with_context(|| format!("{} is damaged", path.display()))?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Records a step, durably, before it is taken.
pub fn write_step(app: &AppPaths, j: &Journal) -> anyhow::Result<()> {
    write_atomic(&app.dir.join(JOURNAL), serde_json::to_string_pretty(j)?.as_bytes())
}

impl Step {
    /// The step's name, as the journal writes it and fault points use it.
    pub fn name(self) -> &'static str {
        match self {
            Step::Begun => "begun",
            Step::Snapshotted => "snapshotted",
            Step::Migrated => "migrated",
            Step::MovedAside => "moved-aside",
            Step::Restored => "restored",
            Step::Switched => "switched",
        }
    }
}

/// Records (synced) that `j` reached `step`, then offers the fault point
/// `<point>:<step>` (debug builds, `AUTOAPP_FAULT`): every step of every
/// operation is written before what follows it is taken, and can be crashed at.
pub fn reach(app: &AppPaths, j: &mut Journal, step: Step, point: &str) -> anyhow::Result<()> {
    j.step = step;
    write_step(app, j)?;
    let point = format!("{point}:{}", step.name());
    fault(&point);
    pause(&point);
    Ok(())
}

/// Ends an operation: one history line, then the journal goes.
pub fn close(app: &AppPaths, j: &Journal, outcome: &str) -> anyhow::Result<()> {
    append_history(
        app,
        &HistoryLine {
            time: super::now_rfc3339(),
            op: j.op,
            outcome: outcome.to_string(),
            release: j.release.clone(),
            previous: j.previous.clone(),
            snapshot: j.snapshot.clone(),
            aside: j.aside.clone(),
        },
    )?;
    match std::fs::remove_file(app.dir.join(JOURNAL)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).context("cannot close the journal"),
    }
    sync_dir(&app.dir)
}

pub fn append_history(app: &AppPaths, line: &HistoryLine) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(app.dir.join(HISTORY))
        .context("cannot open the history")?;
    writeln!(f, "{}", serde_json::to_string(line)?)?;
    f.sync_all()?;
    Ok(())
}

/// The app's history, oldest first.
pub fn history(app: &AppPaths) -> anyhow::Result<Vec<HistoryLine>> {
    match std::fs::read_to_string(app.dir.join(HISTORY)) {
        Ok(t) => t.lines().filter(|l| !l.trim().is_empty()).map(|l| Ok(serde_json::from_str(l)?)).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).context("cannot read the history"),
    }
}

/// The time now as a stamp for names: UTC, to the second, sortable
/// (`20261201T063000Z`).
pub fn stamp_now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string().replace([':', '-'], "")
}

/// A stamp for folder names: UTC time, sortable, unique within the app.
pub fn new_stamp(app: &AppPaths) -> String {
    let base = stamp_now();
    let mut stamp = base.clone();
    let mut n = 1;
    while app.dir.join(format!("data-prev-{stamp}")).exists()
        || app.dir.join(format!("data-prev-{stamp}.partial")).exists()
    {
        n += 1;
        stamp = format!("{base}-{n}");
    }
    stamp
}

/// Renames `from` to `to` durably.
pub fn rename(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::rename(from, to).with_context(|| format!("cannot rename {} to {}", from.display(), to.display()))?;
    if let Some(parent) = to.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

/// An app's lock (`apps/.<app>.lock`, `flock`): activation, rollback, prune
/// and removal hold it alone, a backup shares it; held until dropped, and
/// let go by the kernel when the process ends however it ends.
///
/// It lies beside the app's folder, not in it: the app's workers may read
/// their app's folder whole, and whoever can open a file can `flock` it —
/// a worker taken by an escape would hold its app's lock for as long as it
/// lived, and the person could neither activate, roll back, back up nor
/// remove the app. (Until 2026-12-06 it was `<app>/.lock`.)
#[derive(Debug)]
pub struct AppLock {
    _file: std::fs::File,
}

/// Where `app`'s lock is.
pub fn lock_file(app: &AppPaths) -> PathBuf {
    let apps = app.dir.parent().unwrap_or(Path::new("."));
    apps.join(format!(".{}.lock", app.id))
}

/// Takes `app`'s lock alone (`exclusive`) or shared, at once or not at all:
/// a conflict says another change of the app is under way.
pub fn lock(app: &AppPaths, exclusive: bool) -> anyhow::Result<AppLock> {
    let path = lock_file(app);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let taken = if exclusive { file.try_lock() } else { file.try_lock_shared() };
    match taken {
        Ok(()) => Ok(AppLock { _file: file }),
        Err(std::fs::TryLockError::WouldBlock) => Err(crate::error::kinded(
            crate::error::ErrorKind::Conflict,
            format!(
                "another change of {} (an activation, rollback, prune, removal or backup) is under way; try again when it is done",
                app.id
            ),
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(e).with_context(|| format!("cannot lock {}", path.display())),
    }
}

/// Pauses here when the test-only pause named `point` is set
/// (`AUTOAPP_PAUSE`, debug builds only), so a test can act while an
/// operation is half done: until the file `AUTOAPP_PAUSE_FILE` is gone (at
/// most a minute), or for four seconds without one.
pub fn pause(point: &str) {
    crate::caps::confine::pause(point);
}

/// Stops the process here when the test-only fault named `point` is set.
///
/// Read only in debug builds (tests); a release build ignores the variable.
pub fn fault(point: &str) {
    if cfg!(debug_assertions) && std::env::var("AUTOAPP_FAULT").is_ok_and(|f| f == point) {
        tell!("autoapp: fault injected at {point}");
        std::process::abort();
    }
}

/// The snapshot folder's path.
pub fn folder(app: &AppPaths, name: &str) -> PathBuf {
    app.dir.join(name)
}

/// What recovery did for one app.
#[derive(Debug, Clone, Serialize)]
pub struct Recovered {
    pub app: String,
    pub op: Op,
    pub step: Step,
    pub outcome: String,
}

/// How many migrations the store in a data folder has applied (the store's
/// knowledge, passed in: the journal does not open stores).
pub type AppliedIn<'a> = &'a dyn Fn(&Path) -> anyhow::Result<usize>;

/// Finishes or undoes every interrupted operation in the root.
pub fn recover(root: &Root, applied_in: AppliedIn<'_>) -> anyhow::Result<Vec<Recovered>> {
    let mut done = Vec::new();
    for id in root.app_ids()? {
        done.extend(recover_app(root, &id, applied_in)?);
    }
    Ok(done)
}

/// Finishes or undoes `id`'s interrupted operation, if it has one: what
/// was done, or nothing when there is none or it is under way.
pub fn recover_app(root: &Root, id: &AppId, applied_in: AppliedIn<'_>) -> anyhow::Result<Option<Recovered>> {
    let app = root.app(id);
    let Some(j) = journal(&app)? else { return Ok(None) };
    // An operation that holds the app's lock is not interrupted: it is
    // under way in another process (or this one), which finishes it.
    let _lock = match lock(&app, true) {
        Ok(l) => l,
        Err(e) if crate::error::kind_of(&e) == crate::error::ErrorKind::Conflict => return Ok(None),
        Err(e) => return Err(e.context(format!("cannot recover the interrupted {:?} of {id}", j.op))),
    };
    let Some(j) = journal(&app)?.filter(|again| again.stamp == j.stamp) else { return Ok(None) };
    let outcome = recover_one(&app, &j, applied_in)
        .with_context(|| format!("cannot recover the interrupted {:?} of {id}", j.op))?;
    tracing::warn!(app = %id, op = ?j.op, step = ?j.step, outcome, "recovered an interrupted operation");
    Ok(Some(Recovered { app: id.to_string(), op: j.op, step: j.step, outcome: outcome.to_string() }))
}

fn recover_one(app: &AppPaths, j: &Journal, applied_in: AppliedIn<'_>) -> anyhow::Result<&'static str> {
    match j.op {
        Op::Activate => recover_activation(app, j, applied_in),
        Op::SwitchBack | Op::Restore => recover_rollback(app, j),
        Op::Downgrade => {
            // The data was never touched: finishing is the same as doing it,
            // its record too.
            finish_switch(app, j)?;
            record_downgrade(app, j)?;
            close(app, j, "finished by recovery")?;
            Ok("finished")
        }
    }
}

fn recover_activation(app: &AppPaths, j: &Journal, applied_in: AppliedIn<'_>) -> anyhow::Result<&'static str> {
    let data = app.data();
    let snapshot_done = j.snapshot.as_deref().is_some_and(|s| folder(app, s).is_dir());
    let mut step = j.step;
    if step == Step::Begun && snapshot_done {
        step = Step::Snapshotted;
    }
    if step == Step::Begun {
        // The snapshot was never completed: its partial copy is not a snapshot.
        if let Some(s) = &j.snapshot {
            let partial = folder(app, &format!("{s}.partial"));
            if partial.exists() {
                std::fs::remove_dir_all(&partial).context("cannot remove a partial copy")?;
            }
        }
        close(app, j, "undone by recovery")?;
        return Ok("undone");
    }
    if step == Step::Snapshotted {
        // The migrations run in one transaction: either all of them are in the
        // data or none is. Applied → go forward; not applied → nothing changed.
        let manifest = super::manifest(app, &j.release)?;
        let wanted = super::migrations(app, &j.release, &manifest)?;
        if applied_in(&data)? < wanted.len() {
            close(app, j, "undone by recovery")?;
            return Ok("undone");
        }
    }
    finish_switch(app, j)?;
    record_activation(app, j)?;
    close(app, j, "finished by recovery")?;
    Ok("finished")
}

fn recover_rollback(app: &AppPaths, j: &Journal) -> anyhow::Result<&'static str> {
    let data = app.data();
    let aside = folder(app, j.aside.as_deref().context("a rollback journal names where the data goes")?);
    let snapshot = folder(app, j.snapshot.as_deref().context("a rollback journal names its snapshot")?);
    if j.step == Step::Begun && data.exists() && !aside.exists() {
        close(app, j, "undone by recovery")?;
        return Ok("undone");
    }
    // From here on every step is a rename: redo what is missing.
    if data.exists() && !aside.exists() {
        rename(&data, &aside)?;
    }
    if !data.exists() && snapshot.exists() {
        rename(&snapshot, &data)?;
    }
    if !data.exists() && aside.exists() && j.step < Step::Restored {
        // The snapshot is gone (as when the rollback could not put it in
        // place and ended before it undid itself): the data it moved aside
        // goes back, and the release it ran stays active.
        rename(&aside, &data)?;
        close(app, j, "undone by recovery: its snapshot was missing")?;
        return Ok("undone");
    }
    finish_switch(app, j)?;
    // As the rollback itself would have.
    record_switched_back(app, j, None)?;
    close(app, j, "finished by recovery")?;
    Ok("finished")
}

fn finish_switch(app: &AppPaths, j: &Journal) -> anyhow::Result<()> {
    if super::active(app).ok().flatten().as_deref() != Some(j.release.as_str()) {
        super::set_active(app, &j.release)?;
    }
    Ok(())
}

/// Notes the first write of the activation `a` (read under the app's lock):
/// its time in the activation file, and a line in the history.
pub fn note_first_write(app: &AppPaths, mut a: Activation) -> anyhow::Result<()> {
    let now = super::now_rfc3339();
    a.first_write_at = Some(now.clone());
    set_activation(app, &a)?;
    append_history(
        app,
        &HistoryLine {
            time: now,
            op: Op::Activate,
            outcome: "first write".into(),
            release: a.release.clone(),
            previous: a.previous.clone(),
            snapshot: a.snapshot.clone(),
            aside: None,
        },
    )
}

/// Writes the activation record of the release `j` switched back to (a
/// rollback, a downgrade): active by no activation of its own, so nothing to
/// roll back to from it; `first_write_at` carried where the writes since the
/// activation are kept (a downgrade).
pub fn record_switched_back(app: &AppPaths, j: &Journal, first_write_at: Option<String>) -> anyhow::Result<()> {
    set_activation(
        app,
        &Activation {
            release: j.release.clone(),
            previous: None,
            snapshot: None,
            activated_at: j.started_at.clone(),
            first_write_at,
        },
    )
}

/// Writes the activation record of a downgrade, unless it is written
/// already: the release switched to, active by no activation of its own,
/// keeping the first write of the activation it left noted (the data has
/// it), so a plain rollback afterwards still asks.
pub fn record_downgrade(app: &AppPaths, j: &Journal) -> anyhow::Result<()> {
    let current = activation(app)?;
    if current.as_ref().is_some_and(|a| a.release == j.release) {
        return Ok(());
    }
    record_switched_back(app, j, current.and_then(|a| a.first_write_at))
}

/// Writes the activation record for a finished activation.
pub fn record_activation(app: &AppPaths, j: &Journal) -> anyhow::Result<()> {
    set_activation(
        app,
        &Activation {
            release: j.release.clone(),
            previous: j.previous.clone(),
            snapshot: j.snapshot.clone(),
            activated_at: j.started_at.clone(),
            first_write_at: None,
        },
    )
}
