//! `autoapp prune`: removes what no rollback can use any more.
//!
//! Never removed: the active release; the release and the snapshot a rollback
//! of the last activation needs (`activation.json`); a release an older-schema
//! downgrade can still use (`reads_newer_schema`, its migrations a prefix of
//! the applied ones); a release a preview runs, and every preview's copy of the
//! data; a release built, or data a rollback set aside, in the last day,
//! unless `--keep N` says how many to keep. Removed: other `data-prev-*` snapshots, the data rollbacks set aside,
//! other releases, an app's compiled code when no release of it uses it (and
//! with no app named, the compiled code of apps no longer here),
//! leftovers of interrupted copies and removals, with `--trash` the trash, and
//! with `--builds` each workspace's build output (`<workspace>/target`, which
//! no candidate needs and `autoapp build` makes again; kept while a build
//! uses it).
//!
//! A prune is planned, shown, then done: under every app's lock the plan is
//! made again and only what is in both the shown plan and the new one is
//! removed (anything that became needed meanwhile stays, and is said). Each
//! removal renames first (`.pruning-<name>`), so a crash leaves either the
//! thing whole or a leftover the next prune removes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::space::compiled_files;
use super::{Part, bytes_under, part_of, said, trash_of};
use crate::caps::store;
use crate::error::{ErrorKind, kinded};
use crate::gate::Caller;
use crate::gate::record::recorded;
use crate::manifest::AppId;
use crate::release::{self, journal, short};
use crate::root::{AppPaths, Root};

/// How long a new release is kept when `--keep` is not given.
pub const RECENT: Duration = Duration::from_secs(24 * 60 * 60);

/// How long compiled code is kept, whatever `--keep` says, after it was
/// written: a build, an install or a restore compiles before it writes the
/// release that uses it (or before the app it is for exists).
pub const COMPILED_FRESH: Duration = Duration::from_secs(10 * 60);

/// Whether `path` was written in the last [`COMPILED_FRESH`].
fn fresh(path: &Path) -> bool {
    let modified = std::fs::metadata(path).and_then(|m| m.modified());
    modified.is_ok_and(|t| t.elapsed().map_or(true, |age| age < COMPILED_FRESH))
}

/// What the person asked.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Keep the N newest of the releases and of the snapshots prune could
    /// remove (and then a release built in the last day is no exception).
    pub keep: Option<usize>,
    /// Also empty the trash (of the app, or every entry).
    pub trash: bool,
    /// Also remove each workspace's build output (`<workspace>/target`).
    pub builds: bool,
    /// Also take the rows of each app's record before this day (UTC) out,
    /// the person's own actions and answers included; never the writes a
    /// rollback still needs. Their counts stay in the day summary.
    pub record_before: Option<chrono::NaiveDate>,
    /// Also let each app's record's oldest rows go until its rows take this
    /// many MiB, as its bounds do (never the person's actions and answers).
    pub record_to_mib: Option<u64>,
}

/// One thing prune removes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// The app it belongs to; none for compiled code of no app here and the
    /// trash of removed apps.
    pub app: Option<String>,
    /// `snapshot`, `set-aside`, `release`, `compiled`, `trash`, `build`, `leftover`.
    pub kind: String,
    pub path: PathBuf,
    pub bytes: u64,
    /// What it is, in words.
    pub what: String,
}

/// One thing prune keeps though it looked at it, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Kept {
    pub app: String,
    pub kind: String,
    pub name: String,
    pub why: String,
}

/// What a prune removes, and what it keeps.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub items: Vec<Item>,
    pub kept: Vec<Kept>,
    /// The bytes the items free.
    pub bytes: u64,
}

/// What a prune did.
#[derive(Debug, Clone, Serialize)]
pub struct Pruned {
    pub removed: Vec<Item>,
    /// Shown but no longer removable when the prune was done (with why).
    pub skipped: Vec<(Item, String)>,
    pub bytes: u64,
}

/// Plans a prune of `app` (or of every app and the root's shared parts).
pub fn plan(root: &Root, app: Option<&AppId>, opts: Options) -> anyhow::Result<Plan> {
    // An app being changed now (an activation, rollback, prune or removal
    // holds its lock alone) is said so before its journal is read; a backup
    // under way does not stop the list.
    for id in scope(root, app)? {
        drop(journal::lock(&root.app(&id), false)?);
    }
    plan_locked(root, app, opts)
}

/// [`plan`], for a caller that holds the locks.
fn plan_locked(root: &Root, app: Option<&AppId>, opts: Options) -> anyhow::Result<Plan> {
    let ids = scope(root, app)?;
    let mut items = Vec::new();
    let mut kept = Vec::new();
    let mut removed_releases = Vec::new();
    for id in &ids {
        let paths = root.app(id);
        if let Some(j) = journal::journal(&paths)? {
            return Err(kinded(
                ErrorKind::Conflict,
                format!(
                    "an interrupted {:?} of {id} (step {:?}) waits for recovery; run any command again and it is finished or undone first, then prune",
                    j.op, j.step
                ),
            ));
        }
        plan_app(&paths, opts, &mut items, &mut kept, &mut removed_releases)?;
    }
    // Each app's compiled code that no release of it left uses; with no app
    // named, also the code of apps no longer here and of the layout before
    // each app had a folder, which no app loads.
    let gone: BTreeSet<(&str, &str)> =
        removed_releases.iter().map(|(a, r)| (a.as_str(), r.component_sha256.as_str())).collect();
    let removed: BTreeSet<(&str, &str)> = removed_releases.iter().map(|(a, r)| (a.as_str(), r.id.as_str())).collect();
    let live = root.app_ids()?;
    let mut used = BTreeSet::new();
    for id in &live {
        for r in release::list(&root.app(id))? {
            if !removed.contains(&(id.as_str(), r.id.as_str())) {
                used.insert((id.to_string(), r.component_sha256));
            }
        }
    }
    for f in compiled_files(root, super::space::current_key(root).as_deref()).into_iter().filter(|f| !fresh(&f.path)) {
        let owner = f.app.as_deref().and_then(|a| live.iter().find(|id| id.as_str() == a));
        let in_scope = match (app, owner) {
            (None, _) => true,
            (Some(named), Some(owner)) => named == owner,
            (Some(_), None) => false,
        };
        let Some(owner) = owner else {
            // (An app no longer here: its whole folder, below.)
            if in_scope && f.app.is_none() {
                let what = "compiled code no release uses (from before each app had a folder of its own)".into();
                items.push(Item { app: None, kind: "compiled".into(), path: f.path, bytes: f.bytes, what });
            }
            continue;
        };
        let uses = used.contains(&(owner.to_string(), f.sha.clone()));
        if !in_scope || (uses && !f.superseded) {
            continue;
        }
        let what = match gone.contains(&(owner.as_str(), f.sha.as_str())) {
            true => "compiled code of a release removed here".to_string(),
            false if uses => "compiled code of another engine (another version of autoapp; this one's is kept)".into(),
            false => "compiled code no release uses".to_string(),
        };
        items.push(Item { app: Some(owner.to_string()), kind: "compiled".into(), path: f.path, bytes: f.bytes, what });
    }
    if app.is_none() {
        for e in std::fs::read_dir(root.compiled_cache()).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let an_app = AppId::parse(&name).ok();
            let folder = e.file_type().is_ok_and(|t| t.is_dir()) && !fresh(&e.path());
            if an_app.is_some_and(|id| !live.contains(&id)) && folder {
                let what = format!("compiled code of {name}, an app no longer here");
                items.push(Item {
                    app: None,
                    kind: "compiled".into(),
                    bytes: bytes_under(&e.path()),
                    path: e.path(),
                    what,
                });
            }
        }
    }
    // Removals a crash interrupted in the shared folders and the apps'
    // compiled code.
    let compiled_folders = live.iter().map(|id| root.compiled_of(id)).filter(|_| app.is_none());
    let named_folder = app.map(|a| root.compiled_of(a));
    for dir in [root.compiled_cache(), root.dir().join("trash")].into_iter().chain(compiled_folders).chain(named_folder)
    {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(".pruning-") {
                items.push(Item {
                    app: None,
                    kind: "leftover".into(),
                    bytes: bytes_under(&entry.path()),
                    path: entry.path(),
                    what: format!("{name}: left by an interrupted removal"),
                });
            }
        }
    }
    if opts.trash {
        let live: Vec<AppId> = root.app_ids()?;
        for entry in trash_of(root, app) {
            let owner = live.iter().find(|id| trash_of(root, Some(id)).contains(&entry)).map(|id| id.to_string());
            let name = entry.file_name().unwrap_or_default().to_string_lossy().into_owned();
            items.push(Item {
                app: owner.or_else(|| app.map(|a| a.to_string())),
                kind: "trash".into(),
                bytes: bytes_under(&entry),
                path: entry,
                what: format!("{name}: an app removed to the trash"),
            });
        }
    }
    let bytes = items.iter().map(|i| i.bytes).sum();
    Ok(Plan { items, kept, bytes })
}

fn scope(root: &Root, app: Option<&AppId>) -> anyhow::Result<Vec<AppId>> {
    match app {
        Some(id) if !root.app(id).exists() => Err(kinded(ErrorKind::NotFound, crate::error::no_such_app(id))),
        Some(id) => Ok(vec![id.clone()]),
        None => root.app_ids(),
    }
}

fn plan_app(
    paths: &AppPaths,
    opts: Options,
    items: &mut Vec<Item>,
    kept: &mut Vec<Kept>,
    removed_releases: &mut Vec<(String, release::ReleaseInfo)>,
) -> anyhow::Result<()> {
    let active = release::active(paths)?;
    let activation = journal::activation(paths)?.filter(|a| Some(&a.release) == active.as_ref());
    let needed = Needed {
        active,
        snapshot: activation.as_ref().and_then(|a| a.snapshot.clone()),
        previous: activation.as_ref().and_then(|a| a.previous.clone()),
    };
    let mut found = Found { app: paths.id.to_string(), items, kept };
    plan_data_parts(paths, opts, &needed, &mut found)?;
    plan_releases(paths, opts, &needed, &mut found, removed_releases)?;
    if opts.builds {
        plan_builds(paths, &mut found)?;
    }
    if let Some(day) = opts.record_before {
        plan_record(paths, day, &mut found)?;
    }
    if let Some(mib) = opts.record_to_mib {
        plan_record_size(paths, mib, &mut found)?;
    }
    Ok(())
}

/// The oldest rows of the app's record past `mib` MiB, as one item.
fn plan_record_size(paths: &AppPaths, mib: u64, found: &mut Found<'_>) -> anyhow::Result<()> {
    let rows = crate::gate::record::prune_to(&paths.data(), mib << 20, true)?;
    if rows > 0 {
        let what = format!(
            "the record's oldest rows until its rows take {mib} MiB (about {rows} rows; your own actions and answers and the writes since the last activation stay; their counts stay in `autoapp runs --summary`)"
        );
        record_item(paths, "record-size", what, found);
    }
    Ok(())
}

/// One item of rows of the app's record: its file is the item's path, and
/// it frees no byte (freed pages are used again by the next rows: the file
/// keeps its size).
fn record_item(paths: &AppPaths, kind: &str, what: String, found: &mut Found<'_>) {
    let path = paths.data().join(crate::gate::record::RUNS_FILE);
    found.items.push(Item { app: Some(found.app.clone()), kind: kind.into(), path, bytes: 0, what });
}

/// A day as `--record-before` takes it: `YYYY-MM-DD`, not after today.
pub fn record_day(text: &str) -> Result<chrono::NaiveDate, String> {
    let day = chrono::NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d").map_err(|_| {
        format!(
            "`{}` is not a day; write it as YYYY-MM-DD (like 2026-01-31)",
            crate::elsewhere::text::terminal(&crate::elsewhere::text::cut(text, 40))
        )
    })?;
    if day > chrono::Utc::now().date_naive() + chrono::Days::new(1) {
        return Err(format!("{day} is after today: every row is before it; name a day that has passed"));
    }
    Ok(day)
}

/// The rows of the app's record before `day` (issue 76), as one item: how
/// many, and how many of them were the person's own actions or answers.
fn plan_record(paths: &AppPaths, day: chrono::NaiveDate, found: &mut Found<'_>) -> anyhow::Result<()> {
    let day = day.format("%Y-%m-%d").to_string();
    let rows = crate::gate::record::prune_before(&paths.data(), &day, true)?;
    if rows.rows == 0 {
        return Ok(());
    }
    let decisions = match rows.decisions {
        0 => String::new(),
        n => format!(", {n} of them your own actions or answers"),
    };
    let what = format!(
        "the record's rows before {day} ({} rows{decisions}; their counts stay in `autoapp runs --summary`)",
        rows.rows
    );
    record_item(paths, "record", what, found);
    Ok(())
}

/// What a rollback of the last activation needs, and the active release.
struct Needed {
    active: Option<String>,
    snapshot: Option<String>,
    previous: Option<String>,
}

/// What the plan of one app found so far: what goes, and what stays and why.
struct Found<'a> {
    app: String,
    items: &'a mut Vec<Item>,
    kept: &'a mut Vec<Kept>,
}

impl Found<'_> {
    fn keep(&mut self, kind: &str, name: &str, why: &str) {
        self.kept.push(Kept { app: self.app.clone(), kind: kind.into(), name: name.into(), why: why.into() });
    }

    fn item(&self, kind: &str, path: PathBuf, what: String) -> Item {
        Item { app: Some(self.app.clone()), kind: kind.into(), bytes: bytes_under(&path), path, what }
    }
}

/// Snapshots, data set aside, and leftovers of the app's folder.
fn plan_data_parts(paths: &AppPaths, opts: Options, needed: &Needed, found: &mut Found<'_>) -> anyhow::Result<()> {
    let mut snapshots = Vec::new();
    for entry in std::fs::read_dir(&paths.dir)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(part) = part_of(&name) else { continue };
        if part == Part::Snapshot && needed.snapshot.as_deref() == Some(name.as_str()) {
            found.keep("snapshot", &name, "a rollback of the last activation puts it back");
            continue;
        }
        let (kind, what) = match part {
            Part::Snapshot => ("snapshot", format!("{name}: the data before an activation no rollback goes back to")),
            Part::SetAside if name.starts_with("data-discarded-") => {
                ("set-aside", format!("{name}: the writes a rollback --restore discarded"))
            }
            Part::SetAside => ("set-aside", format!("{name}: the data a rollback set aside")),
            Part::Leftover => ("leftover", format!("{name}: left by an interrupted copy or removal")),
        };
        let item = found.item(kind, entry.path(), what);
        if part == Part::Leftover {
            found.items.push(item);
        } else {
            snapshots.push((name, item));
        }
    }
    // Newest first (their names end in the time they were made).
    snapshots.sort_by(|a, b| stamp_of(&b.0).cmp(stamp_of(&a.0)));
    let now = SystemTime::now();
    for (n, (name, item)) in snapshots.into_iter().enumerate() {
        if opts.keep.is_some_and(|k| n < k) {
            found.keep(&item.kind, &name, "one of the newest you asked to keep (--keep)");
        } else if opts.keep.is_none() && item.kind == "set-aside" && made_within(stamp_of(&name), now, RECENT) {
            found.keep(&item.kind, &name, "set aside in the last day (pass --keep N to choose how many to keep)");
        } else {
            found.items.push(item);
        }
    }
    Ok(())
}

/// Releases, newest first, and the releases a crash left half written or
/// half removed.
fn plan_releases(
    paths: &AppPaths,
    opts: Options,
    needed: &Needed,
    found: &mut Found<'_>,
    removed_releases: &mut Vec<(String, release::ReleaseInfo)>,
) -> anyhow::Result<()> {
    // A preview's folder counts from its first byte: one being started has
    // no preview.json yet.
    let mut previewed: BTreeSet<String> = crate::lifecycle::previews(paths)?.into_iter().map(|p| p.release).collect();
    for entry in std::fs::read_dir(paths.dir.join("previews")).into_iter().flatten().flatten() {
        previewed.insert(entry.file_name().to_string_lossy().into_owned());
    }
    let applied = store::applied_in(&paths.data())?;
    let mut releases = release::list(paths)?;
    releases.reverse();
    let now = SystemTime::now();
    let mut removable = 0;
    for r in releases {
        let name = short(&r.id).to_string();
        let why = if Some(&r.id) == needed.active.as_ref() {
            Some("the active release".to_string())
        } else if needed.previous.as_deref() == Some(r.id.as_str()) {
            Some("a rollback of the last activation goes back to it".to_string())
        } else if previewed.contains(&r.id) {
            Some("a preview of it is running".to_string())
        } else if downgrade_can_use(paths, &r.id, &applied) {
            Some("a rollback --downgrade can still use it (it reads the newer schema)".to_string())
        } else if opts.keep.is_none() && built_within(&r.created_at, now, RECENT) {
            Some("built in the last day (pass --keep N to choose how many releases to keep)".to_string())
        } else if opts.keep.is_some_and(|k| removable < k) {
            removable += 1;
            Some("one of the newest you asked to keep (--keep)".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            found.keep("release", &name, &why);
            continue;
        }
        let item =
            found.item("release", paths.release(&r.id), format!("release {name} {} built {}", r.version, r.created_at));
        found.items.push(item);
        removed_releases.push((found.app.clone(), r));
    }
    if let Ok(entries) = std::fs::read_dir(paths.releases()) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // A build writing its release now names itself `.tmp-<id>-<pid>`.
            if (name.starts_with(".tmp-") && !super::in_use(&name)) || name.starts_with(".pruning-") {
                let item = found.item(
                    "leftover",
                    entry.path(),
                    format!("releases/{name}: left by an interrupted build or removal"),
                );
                found.items.push(item);
            }
        }
    }
    Ok(())
}

/// With `--builds`: the workspace's own build output (`<workspace>/target`,
/// what cargo writes). No candidate needs it — each release holds its own
/// component — and `autoapp build` makes it again. Listed only when it is
/// known to be cargo's (Autoapp's build marker, cargo's `CACHEDIR.TAG` or a
/// `.cargo-lock` in it), a folder of its own (not a link, not another
/// filesystem mounted there), and no build holds it ([`held`]); otherwise
/// kept, and said why. Removals a crash interrupted (`.pruning-target…`)
/// come first.
fn plan_builds(paths: &AppPaths, found: &mut Found<'_>) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(ws) = crate::workspace::of(paths) else { return Ok(()) };
    for entry in std::fs::read_dir(&ws).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = name == ".pruning-target"
            || name
                .strip_prefix(".pruning-target-")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        // A folder, or a link (only the link goes): nothing else was ever moved aside here.
        let kind = entry.file_type();
        if ours && kind.is_ok_and(|k| k.is_dir() || k.is_symlink()) {
            let what = format!("the workspace's {name}: left by an interrupted removal");
            let item = found.item("leftover", entry.path(), what);
            found.items.push(item);
        }
    }
    let target = ws.join("target");
    let Ok(meta) = std::fs::symlink_metadata(&target) else { return Ok(()) };
    let why = if meta.file_type().is_symlink() {
        Some("the workspace's target is a link, not its own folder".to_string())
    } else if !meta.is_dir() {
        Some("the workspace's target is not a folder".to_string())
    } else if std::fs::metadata(&ws).is_ok_and(|w| w.dev() != meta.dev()) {
        Some("the workspace's target is another filesystem mounted there".to_string())
    } else {
        let locks = lock_files(&target);
        if locks.is_empty() && !tagged(&target) {
            Some("nothing in it says cargo wrote it (no build marker, CACHEDIR.TAG or .cargo-lock)".to_string())
        } else {
            held(&locks).err()
        }
    };
    match why {
        Some(why) => found.keep("build", "target", &why),
        None => {
            let what = format!("{}: the workspace's build output; `autoapp build` makes it again", target.display());
            let item = found.item("build", target, what);
            found.items.push(item);
        }
    }
    Ok(())
}

/// What cargo writes at the top of a build folder it made.
const CACHEDIR_SIGNATURE: &str = "Signature: 8a477f597d28d172789f06886806bc55";

/// Whether `target` holds cargo's `CACHEDIR.TAG`, which cargo writes at the
/// top of a build folder it made. What a build wrote may be anything (a
/// link, a pipe): read only a regular file, never waiting, and no more than
/// the signature.
fn tagged(target: &Path) -> bool {
    use std::io::Read as _;
    let Ok(file) = crate::root::open_regular(&target.join("CACHEDIR.TAG"), false) else { return false };
    let mut head = Vec::new();
    file.take(CACHEDIR_SIGNATURE.len() as u64).read_to_end(&mut head).is_ok() && head == CACHEDIR_SIGNATURE.as_bytes()
}

/// The locks a build holds in `target`: Autoapp's marker and cargo's
/// `.cargo-lock` files (`<profile>/`, `<triple>/<profile>/`, and deeper for
/// a tool's own folder such as rust-analyzer's), where they are.
fn lock_files(target: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let marker = target.join(crate::build::BUILD_MARKER);
    if std::fs::symlink_metadata(&marker).is_ok_and(|m| m.is_file()) {
        found.push(marker);
    }
    let mut stack = vec![(target.to_path_buf(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else { continue };
            let name = entry.file_name();
            let skip = ["deps", "build", "incremental", ".fingerprint", "examples"].iter().any(|s| name == *s);
            if kind.is_dir() && depth < 4 && !skip {
                stack.push((entry.path(), depth + 1));
            } else if kind.is_file() && name == ".cargo-lock" {
                found.push(entry.path());
            }
        }
    }
    found
}

/// Every one of `locks` (a build folder's, [`lock_files`]), taken
/// exclusive without waiting and held while the answer lives: a build that
/// starts meanwhile waits for them, so the folder is not moved from under
/// it. `Err` says why not: a build holds one, or one cannot be tried (then
/// it is taken as held).
fn held(locks: &[PathBuf]) -> Result<Vec<std::fs::File>, String> {
    let mut held = Vec::new();
    for lock in locks {
        let Ok(file) = crate::root::open_regular(lock, false) else {
            return Err("one of its locks cannot be tried".into());
        };
        if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            return Err("a build is using it now".into());
        }
        held.push(file);
    }
    Ok(held)
}

fn stamp_of(name: &str) -> &str {
    name.trim_start_matches("data-prev-").trim_start_matches("data-next-").trim_start_matches("data-discarded-")
}

/// Whether a folder stamp (`20261201T063000Z`, maybe `-2` after it) is
/// within `span` of `now`.
fn made_within(stamp: &str, now: SystemTime, span: Duration) -> bool {
    let s = stamp.get(..16).unwrap_or("");
    let (Some(d), Some(t)) = (s.get(..8), s.get(9..15)) else { return false };
    let text = format!("{}-{}-{}T{}:{}:{}Z", &d[..4], &d[4..6], &d[6..], &t[..2], &t[2..4], &t[4..]);
    built_within(&text, now, span)
}

fn built_within(created_at: &str, now: SystemTime, span: Duration) -> bool {
    humantime::parse_rfc3339_weak(created_at).is_ok_and(|t| now.duration_since(t).map_or(true, |age| age < span))
}

/// Whether `rollback --downgrade` could go to release `id` on this data.
fn downgrade_can_use(paths: &AppPaths, id: &str, applied: &[store::Applied]) -> bool {
    let Ok(manifest) = release::manifest(paths, id) else { return false };
    if !manifest.reads_newer_schema {
        return false;
    }
    release::migrations(paths, id, &manifest).is_ok_and(|m| store::is_prefix(&m, applied))
}

/// Does the prune the person saw (`shown`): under every app's lock, plans
/// again and removes what is in both. Each app's row says what went.
pub fn run(root: &Root, caller: &Caller, app: Option<&AppId>, opts: Options, shown: &Plan) -> anyhow::Result<Pruned> {
    let ids = scope(root, app)?;
    // Every lock first: a conflict anywhere removes nothing.
    let mut locks = Vec::new();
    for id in &ids {
        locks.push(journal::lock(&root.app(id), true)?);
    }
    let fresh = plan_locked(root, app, opts)?;
    let mut removed = Vec::new();
    let mut skipped = Vec::new();
    let mut failed: Option<(Option<String>, anyhow::Error)> = None;
    for item in &shown.items {
        // What is removed, and what is recorded of it, is the fresh plan's item.
        let Some(item) = fresh.items.iter().find(|f| f.path == item.path && f.kind == item.kind) else {
            let same_app = |k: &&Kept| item.app.as_deref() == Some(k.app.as_str());
            let named = |k: &&Kept| item.path.ends_with(&k.name) || item.what.contains(&k.name);
            let why = match fresh.kept.iter().find(|k| same_app(k) && named(k)) {
                Some(k) => format!("kept now: {}", k.why),
                None => "no longer there".to_string(),
            };
            skipped.push((item.clone(), why));
            continue;
        };
        // A build folder: its locks held while it is moved aside, or left.
        // Autoapp's marker is made first when it is not there, so that a
        // build that comes after this check waits on it too (a build checks,
        // once it holds the marker, that it is still the one in its folder).
        let locks = match item.kind == "build" {
            true => {
                let marker = crate::root::open_regular(&item.path.join(crate::build::BUILD_MARKER), true);
                match marker
                    .map_err(|_| "its build marker cannot be tried".to_string())
                    .and_then(|_| held(&lock_files(&item.path)))
                {
                    Ok(locks) => locks,
                    Err(why) => {
                        skipped.push((item.clone(), format!("kept now: {why}")));
                        continue;
                    }
                }
            }
            false => Vec::new(),
        };
        // A build folder (or one a crash left moved aside) is what cargo and
        // build scripts wrote: removed as it is, never made writable first.
        let built = item.kind == "build"
            || item.path.file_name().is_some_and(|n| n.to_string_lossy().starts_with(".pruning-target"));
        let (kind, data) = (item.kind.as_str(), item.path.parent());
        let removed_now = match (kind, opts.record_before, opts.record_to_mib, data) {
            // Rows, not a file: taken out of the record, counted by day.
            ("record", Some(day), _, Some(data)) => {
                crate::gate::record::prune_before(data, &day.format("%Y-%m-%d").to_string(), false).map(drop)
            }
            ("record-size", _, Some(mib), Some(data)) => {
                crate::gate::record::prune_to(data, mib << 20, false).map(drop)
            }
            // Never the record's file itself.
            ("record" | "record-size", ..) => Err(anyhow::anyhow!("the record's rows were not asked for")),
            _ => remove(&item.path, !built),
        };
        drop(locks);
        match removed_now {
            Ok(()) => removed.push(item.clone()),
            Err(e) => {
                failed = Some((item.app.clone(), e.context(format!("cannot remove {}", item.path.display()))));
                break;
            }
        }
    }
    let bytes = removed.iter().map(|i| i.bytes).sum();
    for id in &ids {
        let mine: Vec<&Item> = removed.iter().filter(|i| i.app.as_deref() == Some(id.as_str())).collect();
        let failed_here = failed.as_ref().filter(|(a, _)| a.as_deref() == Some(id.as_str()));
        if mine.is_empty() && failed_here.is_none() {
            continue;
        }
        let freed: u64 = mine.iter().map(|i| i.bytes).sum();
        let summary = format!("removed {}; freed {}", counted(&mine), said(freed));
        let outcome: anyhow::Result<()> = match failed_here {
            Some((_, e)) => Err(anyhow::anyhow!("{summary}, then stopped: {e:#}")),
            None => Ok(()),
        };
        let arguments = serde_json::json!({
            "keep": opts.keep, "trash": opts.trash, "builds": opts.builds,
            "record_before": opts.record_before.map(|d| d.to_string()), "record_to_mib": opts.record_to_mib,
        });
        let active = release::active(&root.app(id)).ok().flatten().unwrap_or_default();
        let _ = recorded(&root.app(id), caller, "prune", arguments, outcome, |_| (active, summary.clone()));
    }
    drop(locks);
    if let Some((_, e)) = failed {
        return Err(e.context(format!("the prune stopped after freeing {}", said(bytes))));
    }
    Ok(Pruned { removed, skipped, bytes })
}

/// "2 snapshots, 1 release", or "nothing".
pub fn counted(items: &[&Item]) -> String {
    let mut parts = Vec::new();
    for (kind, one, many) in [
        ("snapshot", "snapshot", "snapshots"),
        ("set-aside", "set-aside data folder", "set-aside data folders"),
        ("release", "release", "releases"),
        ("compiled", "compiled file", "compiled files"),
        ("trash", "trash entry", "trash entries"),
        ("build", "workspace build folder", "workspace build folders"),
        ("leftover", "leftover", "leftovers"),
        ("record", "record's old rows", "records' old rows"),
        ("record-size", "record's oldest rows", "records' oldest rows"),
    ] {
        let n = items.iter().filter(|i| i.kind == kind).count();
        if n > 0 {
            parts.push(format!("{n} {}", if n == 1 { one } else { many }));
        }
    }
    if parts.is_empty() { "nothing".to_string() } else { parts.join(", ") }
}

/// Removes `path`: renamed to `.pruning-<name>` beside it first (another
/// number after it when one is there already), so a crash leaves the thing
/// whole or a leftover, never half of it in its place. Read-only folders are
/// made writable first when `writable_first` (a release's; not a build
/// folder, which cargo and build scripts wrote).
fn remove(path: &Path, writable_first: bool) -> anyhow::Result<()> {
    let name = path.file_name().context("a path to remove has a name")?.to_string_lossy().into_owned();
    let parent = path.parent().context("a path to remove has a folder")?;
    let mut doomed = path.to_path_buf();
    if !name.starts_with(".pruning-") {
        for n in 1.. {
            let aside = match n {
                1 => parent.join(format!(".pruning-{name}")),
                n => parent.join(format!(".pruning-{name}-{n}")),
            };
            match crate::root::rename_new(path, &aside) {
                Ok(()) => {
                    doomed = aside;
                    break;
                }
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) && n < 100 => {}
                Err(e) => return Err(e).with_context(|| format!("cannot move {} aside", path.display())),
            }
        }
        crate::root::sync_dir(parent)?;
    }
    journal::fault("prune:moved");
    let meta = std::fs::symlink_metadata(&doomed)?;
    if meta.is_dir() {
        if writable_first {
            make_writable(&doomed);
        }
        std::fs::remove_dir_all(&doomed)?;
    } else {
        std::fs::remove_file(&doomed)?;
    }
    Ok(())
}

/// A release's files are read-only; their folders are not, so removing them
/// works as it is. This only matters where read-only folders were made.
fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755));
        if let Ok(entries) = std::fs::read_dir(&d) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only what is both in the list the person read and in the list made
    /// again is removed: an item shown but not removable stays (forged by a
    /// page, or needed since), and one removable but never shown stays too.
    #[test]
    fn a_prune_removes_only_what_was_shown_and_is_still_removable() {
        let d = tempfile::tempdir().unwrap();
        let root = Root::open(d.path()).unwrap();
        let id = AppId::parse("a").unwrap();
        let app = root.app(&id);
        for s in ["data-prev-20200101T000000Z", "data-prev-20200102T000000Z"] {
            std::fs::create_dir_all(app.dir.join(s)).unwrap();
        }
        std::fs::write(app.dir.join("grants.json"), "{}").unwrap();
        let opts = Options { keep: None, trash: false, builds: false, record_before: None, record_to_mib: None };
        let fresh = plan(&root, Some(&id), opts).unwrap();
        assert_eq!(fresh.items.len(), 2, "{:?}", fresh.items);
        let shown_one = fresh.items.iter().find(|i| i.path.ends_with("data-prev-20200101T000000Z")).unwrap().clone();
        let forged = Item {
            app: Some("a".into()),
            kind: "snapshot".into(),
            path: app.dir.join("grants.json"),
            bytes: 1,
            what: "grants.json".into(),
        };
        let shown = Plan { items: vec![shown_one.clone(), forged.clone()], kept: Vec::new(), bytes: 3 };
        let done = run(&root, &crate::gate::Caller::command_line(), Some(&id), opts, &shown).unwrap();
        assert_eq!(done.removed, [shown_one]);
        assert_eq!(done.skipped.len(), 1);
        assert_eq!(done.skipped[0].0, forged);
        assert!(app.dir.join("grants.json").exists(), "a forged item is never removed");
        assert!(app.dir.join("data-prev-20200102T000000Z").exists(), "one never shown stays");
        assert!(!app.dir.join("data-prev-20200101T000000Z").exists());
    }

    #[test]
    fn a_folder_stamp_is_read_as_its_time() {
        let now = humantime::parse_rfc3339("2026-12-01T12:00:00Z").unwrap();
        assert!(made_within("20261201T063000Z", now, RECENT));
        assert!(made_within("20261130T120001Z-2", now, RECENT));
        assert!(!made_within("20261130T115959Z", now, RECENT));
        assert!(!made_within("garbage", now, RECENT));
        assert!(!made_within("", now, RECENT));
        assert_eq!(stamp_of("data-discarded-20261201T063000Z"), "20261201T063000Z");
    }
}
