//! Small files the host reads on every call (an app's active pointer), read
//! again only when they may have changed.
//!
//! Another process may replace such a file at any moment (`autoapp activate`
//! from a terminal, a restore, a person's editor), and the next call must see
//! the new content. Asking the file system on each call costs a `statx` of a
//! five-component path (11% of a trivial call, docs/performance.md, P1).
//! Instead the folders on the file's way are watched with inotify: the kernel
//! queues an event when an entry named on that way is created, renamed,
//! removed or written, before the call that did it returns. Each read first
//! takes what is queued (one non-blocking `read`, which finds nothing almost
//! always), forgets what an event may have changed, and answers from memory
//! for the rest. So a change made before a call starts is seen by that call,
//! as with a `statx`.
//!
//! Where inotify is not available (or its limits are reached) the file's
//! identity and times are compared on every read instead, as before.
//!
//! What a watch does not see: a change made through another name of the
//! same file (a hard link elsewhere, written in place), and a change made by
//! another machine on a network file system. Autoapp itself only ever
//! replaces a pointer by a rename in its own folder.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use rustix::fs::inotify;

/// How many folders up from the file are watched: the file's own (an app's
/// folder), its parent (`apps`) and the root. A rename of a folder further up
/// is not noticed; nothing Autoapp does renames those.
const LEVELS: usize = 3;

/// The file's content at `path` as `read` gives it, from memory when nothing
/// on the file's way has changed since the last `read`. Only a successful
/// read is kept.
pub fn read_through<E>(path: &Path, read: impl FnOnce() -> Result<String, E>) -> Result<String, E> {
    static KEPT: OnceLock<Mutex<Kept>> = OnceLock::new();
    let kept = KEPT.get_or_init(|| Mutex::new(Kept::new()));
    let mut k = kept.lock().unwrap_or_else(|e| e.into_inner());
    k.read_through(path, read)
}

/// Device, inode, modification and change times, length of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    device: u64,
    inode: u64,
    modified: (i64, i64),
    changed: (i64, i64),
    len: u64,
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            device: m.dev(),
            inode: m.ino(),
            modified: (m.mtime(), m.mtime_nsec()),
            changed: (m.ctime(), m.ctime_nsec()),
            len: m.len(),
        })
    }
}

/// What one file was seen to hold.
enum Seen {
    /// Every folder on its way is watched: good until an event says otherwise.
    Watched(String),
    /// No watch: good while the file's stamp is the same.
    Stamped(Stamp, String),
}

struct Kept {
    /// The inotify instance, non-blocking; `None` when it cannot be had.
    fd: Option<OwnedFd>,
    /// Watched folders by watch descriptor, and back.
    folders: HashMap<i32, PathBuf>,
    watches: HashMap<PathBuf, i32>,
    /// By path (as bytes: hashing a `Path` walks its components).
    seen: HashMap<std::ffi::OsString, Seen>,
}

impl Kept {
    fn new() -> Kept {
        let fd = inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC)
            .inspect_err(|e| tracing::debug!("no inotify ({e}): pointers are checked with a stat per read"))
            .ok();
        Kept { fd, folders: HashMap::new(), watches: HashMap::new(), seen: HashMap::new() }
    }

    fn read_through<E>(&mut self, path: &Path, read: impl FnOnce() -> Result<String, E>) -> Result<String, E> {
        self.take_events();
        match self.seen.get(path.as_os_str()) {
            Some(Seen::Watched(content)) => return Ok(content.clone()),
            Some(Seen::Stamped(stamp, content)) if Stamp::of(path).as_ref() == Some(stamp) => {
                return Ok(content.clone());
            }
            _ => {}
        }
        // The watches first, then the read: a change after the read is an
        // event the next read takes.
        let watched = self.watch_the_way_to(path);
        let stamp = if watched { None } else { Stamp::of(path) };
        let content = read()?;
        match stamp {
            _ if watched => {
                self.seen.insert(path.as_os_str().to_owned(), Seen::Watched(content.clone()));
            }
            Some(stamp) => {
                self.seen.insert(path.as_os_str().to_owned(), Seen::Stamped(stamp, content.clone()));
            }
            None => {
                self.seen.remove(path.as_os_str());
            }
        }
        Ok(content)
    }

    /// Watches the folders on the way to `path`; whether all of them are.
    fn watch_the_way_to(&mut self, path: &Path) -> bool {
        let Some(fd) = &self.fd else { return false };
        let mask = inotify::WatchFlags::CREATE
            | inotify::WatchFlags::DELETE
            | inotify::WatchFlags::MOVED_FROM
            | inotify::WatchFlags::MOVED_TO
            | inotify::WatchFlags::MODIFY
            | inotify::WatchFlags::CLOSE_WRITE
            | inotify::WatchFlags::ATTRIB
            | inotify::WatchFlags::DELETE_SELF
            | inotify::WatchFlags::MOVE_SELF
            | inotify::WatchFlags::ONLYDIR;
        // From the root down: a folder renamed while its parent is not yet
        // watched would leave a watch on the folder that moved away.
        let way: Vec<&Path> = path.ancestors().skip(1).take(LEVELS).collect();
        for folder in way.into_iter().rev() {
            if self.watches.contains_key(folder) {
                continue;
            }
            match inotify::add_watch(fd, folder, mask) {
                Ok(wd) => {
                    // The same folder under another name has the same
                    // descriptor: what was seen under the old name is forgotten.
                    if let Some(old) = self.folders.insert(wd, folder.to_path_buf())
                        && old != folder
                    {
                        self.watches.remove(&old);
                        self.seen.retain(|path, _| !Path::new(path).starts_with(&old));
                    }
                    self.watches.insert(folder.to_path_buf(), wd);
                }
                Err(e) => {
                    tracing::debug!("cannot watch {}: {e}", folder.display());
                    return false;
                }
            }
        }
        true
    }

    /// Takes the queued events and forgets what each may have changed.
    fn take_events(&mut self) {
        let Some(fd) = &self.fd else { return };
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(fd, &mut buf);
        let mut gone: Vec<PathBuf> = Vec::new();
        let mut ignored: Vec<i32> = Vec::new();
        let mut overflow = false;
        loop {
            let event = match reader.next() {
                Ok(e) => e,
                Err(rustix::io::Errno::AGAIN) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    tracing::warn!("cannot read the pointers' watch: {e}");
                    overflow = true;
                    break;
                }
            };
            let flags = event.events();
            if flags.contains(inotify::ReadFlags::QUEUE_OVERFLOW) {
                overflow = true;
                continue;
            }
            let Some(folder) = self.folders.get(&event.wd()) else { continue };
            if flags.contains(inotify::ReadFlags::IGNORED) {
                ignored.push(event.wd());
            }
            match event.file_name() {
                // An entry of the folder: what lies under that name.
                Some(name) if !name.is_empty() => {
                    use std::os::unix::ffi::OsStrExt as _;
                    gone.push(folder.join(std::ffi::OsStr::from_bytes(name.to_bytes())));
                }
                // The folder itself: everything under it.
                _ => gone.push(folder.clone()),
            }
        }
        if overflow {
            // Events were lost, renames of watched folders among them: every
            // watch may be on a folder that is elsewhere now. All are dropped;
            // the next read watches what is there.
            self.seen.clear();
            for (wd, _) in self.folders.drain() {
                let _ = inotify::remove_watch(fd, wd);
            }
            self.watches.clear();
            return;
        }
        for wd in ignored {
            if let Some(folder) = self.folders.remove(&wd) {
                self.watches.remove(&folder);
            }
        }
        for g in gone {
            self.seen.retain(|path, _| !Path::new(path).starts_with(&g));
            // A watched folder at or under that name may be another folder
            // now (one renamed over it): its watch follows the old one, so it
            // is dropped, and the next read watches what is there.
            let stale: Vec<i32> =
                self.folders.iter().filter(|(_, folder)| folder.starts_with(&g)).map(|(wd, _)| *wd).collect();
            for wd in stale {
                if let Some(folder) = self.folders.remove(&wd) {
                    self.watches.remove(&folder);
                }
                let _ = inotify::remove_watch(fd, wd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A root/apps/app/active layout in a temporary folder.
    fn layout() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let app = dir.path().join("apps").join("a");
        std::fs::create_dir_all(&app).unwrap();
        let pointer = app.join("active");
        std::fs::write(&pointer, "one").unwrap();
        (dir, pointer)
    }

    fn read(kept: &mut Kept, path: &Path, reads: &Cell<u32>) -> String {
        kept.read_through(path, || {
            reads.set(reads.get() + 1);
            std::fs::read_to_string(path).map_err(|e| e.to_string())
        })
        .unwrap()
    }

    fn replace(path: &Path, content: &str) {
        let tmp = path.with_file_name(".active.tmp");
        std::fs::write(&tmp, content).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    /// Renames the pointer's folder away and another folder, whose pointer
    /// holds `content`, into its place (as a restore does).
    fn replace_app_folder(pointer: &Path, content: &str) {
        let app = pointer.parent().unwrap();
        let apps = app.parent().unwrap();
        let other = apps.join("incoming");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("active"), content).unwrap();
        std::fs::rename(app, apps.join(format!("old-{content}"))).unwrap();
        std::fs::rename(&other, app).unwrap();
    }

    #[test]
    fn a_pointer_is_read_once_and_again_after_each_change_on_its_way() {
        let mut kept = Kept::new();
        assert!(kept.fd.is_some(), "this machine has inotify");
        let (dir, pointer) = layout();
        let reads = Cell::new(0);
        assert_eq!(read(&mut kept, &pointer, &reads), "one");
        assert_eq!(read(&mut kept, &pointer, &reads), "one");
        assert_eq!(reads.get(), 1, "the second read came from memory");

        // Replaced by a rename, as `activate` does: the very next read sees it.
        replace(&pointer, "two");
        assert_eq!(read(&mut kept, &pointer, &reads), "two");
        // Written in place, as an editor may.
        std::fs::write(&pointer, "three").unwrap();
        assert_eq!(read(&mut kept, &pointer, &reads), "three");
        assert_eq!(reads.get(), 3);

        // Another file created and written beside it changes nothing.
        std::fs::write(pointer.with_file_name("other"), "x").unwrap();
        assert_eq!(read(&mut kept, &pointer, &reads), "three");
        assert_eq!(reads.get(), 3);

        // The app's folder replaced by another (a restore): seen.
        replace_app_folder(&pointer, "four");
        assert_eq!(read(&mut kept, &pointer, &reads), "four");
        // And the new folder is watched in its turn.
        replace(&pointer, "five");
        assert_eq!(read(&mut kept, &pointer, &reads), "five");

        // The apps folder replaced as a whole: seen.
        let apps = dir.path().join("apps");
        let new_apps = dir.path().join("apps-new");
        std::fs::create_dir_all(new_apps.join("a")).unwrap();
        std::fs::write(new_apps.join("a").join("active"), "six").unwrap();
        std::fs::rename(&apps, dir.path().join("apps-old")).unwrap();
        std::fs::rename(&new_apps, &apps).unwrap();
        assert_eq!(read(&mut kept, &pointer, &reads), "six");
        assert_eq!(reads.get(), 6);
    }

    /// When the kernel's queue overflows, the events after it are lost, a
    /// folder renamed over the app's among them: the watches that followed
    /// the old folders are all dropped, and the new folder is watched.
    #[test]
    fn after_lost_events_every_folder_is_watched_anew() {
        let mut kept = Kept::new();
        let (_dir, pointer) = layout();
        let reads = Cell::new(0);
        assert_eq!(read(&mut kept, &pointer, &reads), "one");
        // Fill the queue past its limit: writes to two files in turn (the
        // kernel merges an event identical to the one before it).
        let limit: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(16384)
            // Past this the queue is too long to fill here; the test then
            // checks the same changes without an overflow.
            .min(1 << 20);
        let app = pointer.parent().unwrap().to_path_buf();
        let noise = [app.join("noise-a"), app.join("noise-b")];
        let mut files: Vec<std::fs::File> = noise.iter().map(|p| std::fs::File::create(p).unwrap()).collect();
        for i in 0..limit + 16 {
            use std::io::Write as _;
            files[i % 2].write_all(b"x").unwrap();
        }
        // Lost with the overflow: the app's folder replaced by another.
        replace_app_folder(&pointer, "two");
        assert_eq!(read(&mut kept, &pointer, &reads), "two");
        // The new folder is watched: an activation in it is seen.
        replace(&pointer, "three");
        assert_eq!(read(&mut kept, &pointer, &reads), "three");
    }

    #[test]
    fn a_pointer_removed_is_not_answered_from_memory() {
        let mut kept = Kept::new();
        let (_dir, pointer) = layout();
        let reads = Cell::new(0);
        assert_eq!(read(&mut kept, &pointer, &reads), "one");
        std::fs::remove_file(&pointer).unwrap();
        let again = kept.read_through(&pointer, || std::fs::read_to_string(&pointer).map_err(|e| e.kind()));
        assert_eq!(again, Err(std::io::ErrorKind::NotFound));
    }

    #[test]
    fn without_inotify_the_stamp_decides() {
        let mut kept = Kept { fd: None, folders: HashMap::new(), watches: HashMap::new(), seen: HashMap::new() };
        let (_dir, pointer) = layout();
        let reads = Cell::new(0);
        assert_eq!(read(&mut kept, &pointer, &reads), "one");
        assert_eq!(read(&mut kept, &pointer, &reads), "one");
        assert_eq!(reads.get(), 1);
        replace(&pointer, "two");
        assert_eq!(read(&mut kept, &pointer, &reads), "two");
        assert_eq!(reads.get(), 2);
    }
}
