//! The root folder: where the launcher keeps everything, and how it is laid out.
//!
//! ```text
//! <root>/
//!   config.toml                 optional overrides of config/autoapp.toml
//!   standing.json               the person's standing approval, when on
//!   plans.sqlite                the engineer's plans (and which one runs)
//!   launcher.json               the running launcher's control port and secret (0600)
//!   launcher.lock               held by the one launcher serving the root, for its life
//!   apps/<id>/
//!     workspace/                the default workspace (or workspace.path, a pointer to a chosen one)
//!     releases/<release-id>/    immutable: component.wasm, autoapp.toml, migrations/, release.json
//!     active                    the active release's id
//!     data/                     app.sqlite (the app's store), runs.sqlite (the gate's record)
//!     data-prev-<time>/         the data before an activation (kept until `autoapp prune`)
//!     logs/                     app.log (+ app.log.1): the app's log lines, at most 2 MiB
//!     last-backup.json          where and when it was last backed up
//!     .lock                     held by an activation, rollback, prune, removal (alone) or backup
//!   cache/compiled/<id>/        each app's precompiled components, by component hash and engine
//!   trash/<id>-<time>/          removed apps (`autoapp prune --trash` empties it)
//! ```

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::manifest::AppId;

/// The environment variable that names the root when `--root` is not given.
pub const ROOT_ENV: &str = "AUTOAPP_ROOT";

/// The root folder, created when first used.
#[derive(Debug, Clone)]
pub struct Root {
    dir: PathBuf,
}

impl Root {
    /// `--root`, else `$AUTOAPP_ROOT`, else `~/.autoapp`; created if missing and
    /// made absolute, so every path derived from it is absolute too.
    pub fn resolve(flag: Option<&Path>) -> anyhow::Result<Root> {
        let dir = match flag {
            Some(d) => d.to_path_buf(),
            None => match std::env::var_os(ROOT_ENV).filter(|v| !v.is_empty()) {
                Some(d) => PathBuf::from(d),
                None => {
                    let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).ok_or_else(|| {
                        anyhow::anyhow!(
                            "HOME is not set, so there is no default root; pass --root DIR or set AUTOAPP_ROOT"
                        )
                    })?;
                    PathBuf::from(home).join(".autoapp")
                }
            },
        };
        Self::open(&dir)
    }

    /// Opens (creating if needed) the root at `dir`.
    pub fn open(dir: &Path) -> anyhow::Result<Root> {
        fs::create_dir_all(dir).with_context(|| format!("cannot create the root folder {}", dir.display()))?;
        let dir = fs::canonicalize(dir).with_context(|| format!("cannot resolve the root folder {}", dir.display()))?;
        Ok(Root { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn apps_dir(&self) -> PathBuf {
        self.dir.join("apps")
    }

    pub fn app(&self, id: &AppId) -> AppPaths {
        AppPaths { id: id.clone(), dir: self.apps_dir().join(id.as_str()) }
    }

    /// The folder of every app's compiled code: a folder each
    /// ([`Root::compiled_of`]). Files directly in it are from roots made
    /// before 2026-12-06, when every app shared it; `autoapp prune` removes
    /// them.
    pub fn compiled_cache(&self) -> PathBuf {
        self.dir.join("cache").join("compiled")
    }

    /// Where the code compiled for `app`'s releases is kept: a folder of its
    /// own, which its worker may read (and never write), and nothing of
    /// another app's — not even code compiled from the same component, which
    /// each app compiles for itself.
    pub fn compiled_of(&self, app: &AppId) -> PathBuf {
        self.compiled_cache().join(app.as_str())
    }

    /// The ids of every app in the root, sorted.
    pub fn app_ids(&self) -> anyhow::Result<Vec<AppId>> {
        let mut ids = Vec::new();
        let entries = match fs::read_dir(self.apps_dir()) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ids),
            Err(e) => return Err(e).context("cannot list the apps folder"),
        };
        for entry in entries {
            let entry = entry?;
            if let Some(id) = entry.file_name().to_str().and_then(|n| AppId::parse(n).ok())
                && entry.path().is_dir()
            {
                ids.push(id);
            }
        }
        ids.sort();
        Ok(ids)
    }
}

/// The paths of one app inside the root.
#[derive(Debug, Clone)]
pub struct AppPaths {
    pub id: AppId,
    pub dir: PathBuf,
}

impl AppPaths {
    pub fn exists(&self) -> bool {
        self.dir.is_dir()
    }

    pub fn releases(&self) -> PathBuf {
        self.dir.join("releases")
    }

    pub fn release(&self, release_id: &str) -> PathBuf {
        self.releases().join(release_id)
    }

    pub fn active_file(&self) -> PathBuf {
        self.dir.join("active")
    }

    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn default_workspace(&self) -> PathBuf {
        self.dir.join("workspace")
    }

    /// The pointer to a workspace the person chose (`create --at`).
    pub fn workspace_pointer(&self) -> PathBuf {
        self.dir.join("workspace.path")
    }
}

/// Renames `from` to `to` unless `to` exists (atomically: never replaces;
/// the error is `EEXIST` when it does).
pub fn rename_new(from: &Path, to: &Path) -> std::io::Result<()> {
    let flags = rustix::fs::RenameFlags::NOREPLACE;
    match rustix::fs::renameat_with(rustix::fs::CWD, from, rustix::fs::CWD, to, flags) {
        Ok(()) => Ok(()),
        // A filesystem without it (NFS, FUSE: a USB drive, sshfs): a hard
        // link never replaces either; where links are not had, a look first.
        Err(rustix::io::Errno::INVAL) => {
            let exists = || std::io::Error::from_raw_os_error(libc::EEXIST);
            if from.is_file() {
                match std::fs::hard_link(from, to) {
                    Ok(()) => return std::fs::remove_file(from),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(exists()),
                    Err(_) => {}
                }
            }
            if std::fs::symlink_metadata(to).is_ok() {
                return Err(exists());
            }
            std::fs::rename(from, to)
        }
        Err(e) => Err(e.into()),
    }
}

/// `path` opened without following a link or waiting on a pipe, and only
/// when it is a regular file (what a build or an app left may be anything);
/// made, and opened for writing, when `create`.
pub fn open_regular(path: &Path, create: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(create)
        .create(create)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// Writes `bytes` to `path` so that a reader sees the old content or the new,
/// never a torn file: a temporary file in the same folder, synced, renamed over
/// the target, and the folder synced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = path.parent().context("a file to write has a folder")?;
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let name = path.file_name().context("a file to write has a name")?.to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    {
        let mut f = fs::File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))?;
    sync_dir(dir)
}

/// The folders an attempt is about to make (those of the paths it will
/// write, and their ancestors, that do not exist yet), noted before it
/// starts so that a failed attempt can take them away again ([`Made::undo`]):
/// a refusal leaves the root as it was (issue 73, rule 1).
#[derive(Debug, Default)]
pub struct Made(Vec<PathBuf>);

impl Made {
    /// Notes the missing folders of each of `paths` and their ancestors.
    pub fn before(paths: &[&Path]) -> Made {
        let mut missing: Vec<PathBuf> = paths
            .iter()
            .flat_map(|p| p.ancestors().take_while(|a| !a.as_os_str().is_empty() && !a.exists()))
            .map(Path::to_path_buf)
            .collect();
        // Deepest first, each once.
        missing.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        missing.dedup();
        Made(missing)
    }

    /// Removes each noted folder that is there and empty, deepest first; one
    /// that holds something (another process put it there meanwhile) is
    /// kept, and so is every folder above it.
    pub fn undo(&self) {
        for folder in &self.0 {
            let _ = fs::remove_dir(folder);
        }
    }
}

/// Makes a rename or a new file in `dir` durable.
pub fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    fs::File::open(dir).and_then(|d| d.sync_all()).with_context(|| format!("cannot sync {}", dir.display()))
}

/// The launcher's connection file in the root.
pub const LAUNCHER_FILE: &str = "launcher.json";

/// The launcher's lock in the root: held (`flock`, exclusive) by the one
/// launcher serving the root for its whole life, taken before anything is
/// served or written. It holds that launcher's pid, start time and id, for a
/// second launcher to name it. The kernel lets go of it when the process ends
/// however it ends, and in whatever PID namespace the reader runs: a launcher
/// is gone when its lock is free, never because its pid looks dead.
pub const LAUNCHER_LOCK: &str = "launcher.lock";

/// The root's launcher lock, held until dropped.
#[derive(Debug)]
pub struct LauncherLock {
    _file: fs::File,
}

/// Who holds (or last held) a root's launcher lock, as it wrote itself down.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Holder {
    pub pid: u32,
    #[serde(rename = "startedAt")]
    pub started_at: String,
    /// The launcher's id: a random value per start (see `launcher::run`).
    pub id: String,
}

/// How many times (20 ms apart) a launcher tries the lock before it says
/// another holds it.
const LOCK_TRIES: u32 = 10;

/// The longest lock file read: what a launcher writes there is small.
const MAX_HOLDER: u64 = 4096;

fn open_lock(root: &Root) -> anyhow::Result<fs::File> {
    let path = root.dir().join(LAUNCHER_LOCK);
    fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))
}

/// Takes the root's launcher lock for `holder` (written into the file), at
/// once or not at all: `Ok(None)` when another process holds it.
pub fn take_launcher_lock(root: &Root, holder: &Holder) -> anyhow::Result<Option<LauncherLock>> {
    use std::io::Seek as _;
    let mut file = open_lock(root)?;
    // A process looking at the lock (`launcher_holder`) holds it for a
    // moment: tried again for a little while before another is said to hold it.
    let mut tries = 0;
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(fs::TryLockError::WouldBlock) if tries < LOCK_TRIES => tries += 1,
            Err(fs::TryLockError::WouldBlock) => return Ok(None),
            Err(fs::TryLockError::Error(e)) => return Err(e).context("cannot lock the root's launcher.lock"),
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    file.set_len(0)?;
    file.seek(std::io::SeekFrom::Start(0))?;
    file.write_all(&serde_json::to_vec(holder)?)?;
    file.sync_all()?;
    Ok(Some(LauncherLock { _file: file }))
}

/// The launcher holding the root's lock, if one does: `None` when the lock
/// is free (no launcher serves the root, whatever `launcher.json` says).
/// What the holder wrote may be missing (it is starting): then its fields
/// are empty.
pub fn launcher_holder(root: &Root) -> anyhow::Result<Option<Holder>> {
    use std::io::Read as _;
    let mut file = open_lock(root)?;
    match file.try_lock_shared() {
        Ok(()) => return Ok(None),
        Err(fs::TryLockError::WouldBlock) => {}
        Err(fs::TryLockError::Error(e)) => return Err(e).context("cannot lock the root's launcher.lock"),
    }
    let mut text = String::new();
    let _ = (&mut file).take(MAX_HOLDER).read_to_string(&mut text);
    Ok(Some(serde_json::from_str(&text).unwrap_or_default()))
}

/// Runs `f` while holding the root's launcher lock, when no launcher holds
/// it (`None` when one does): what is stale can be removed without racing
/// a launcher that starts meanwhile.
pub fn without_launcher<T>(root: &Root, f: impl FnOnce() -> T) -> anyhow::Result<Option<T>> {
    let file = open_lock(root)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(f())),
        Err(fs::TryLockError::WouldBlock) => Ok(None),
        Err(fs::TryLockError::Error(e)) => Err(e).context("cannot lock the root's launcher.lock"),
    }
}

/// The pid of a launcher that is running on this root, if one is (its lock
/// is held); `Some(0)` when the holder has not written itself down yet.
pub fn running_launcher(root: &Root) -> anyhow::Result<Option<u32>> {
    Ok(launcher_holder(root)?.map(|h| h.pid))
}

/// Whether process `pid` is running (on this machine, by `/proc`).
pub fn process_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}
