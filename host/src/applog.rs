//! An app's log file: the lines its calls wrote (`autoapp:app/log`), already
//! sanitised, kept in `apps/<id>/logs/` for the person (`autoapp logs`, the
//! panel) and the engineer (`logs_read`), across restarts.
//!
//! One JSON object per line in `app.log`. When a write takes `app.log` past
//! [`FILE_LIMIT`] it becomes `app.log.1` (replacing the one before), so an
//! app's log never holds more than twice that. Every process that runs calls
//! (the launcher, `autoapp call`) appends whole lines (`O_APPEND`); the
//! rotation is done under a lock file so two processes never rotate twice.
//!
//! A call does not write its lines itself: [`queue`] hands them to one writer
//! thread of the process, which gathers what comes in the next moment
//! ([`GATHER`]) and appends each app's lines with one `write` (a file's
//! `statx` and `write` per line were a tenth of a write call's time,
//! docs/performance.md). Readers in this process ([`read`], [`tail`],
//! [`follow`]) first wait for what is queued ([`flush`]), and so does a clean
//! stop (`Apps` when dropped, the command line before it exits); a process
//! that is killed loses the lines of its last [`GATHER`] — the record, not
//! the log, is what keeps the calls (docs/security.md).

use std::fs;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// The size past which `app.log` is rotated: an app's log holds at most
/// twice this (`app.log` and `app.log.1`).
pub const FILE_LIMIT: u64 = 1 << 20;

/// The most of one log file any read takes, from its end: an honest log
/// file is at most [`FILE_LIMIT`] and one write past it. A file an app's
/// worker made larger (a 1 GiB sparse `app.log.1` took the launcher to
/// 2.1 GB in one read: issue 71) is read no further back than this.
pub const READ_MOST: u64 = 2 * FILE_LIMIT;

const CURRENT: &str = "app.log";
const ROTATED: &str = "app.log.1";
const ROTATE_LOCK: &str = ".rotate.lock";

/// One line of an app's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    /// UTC, RFC 3339 with microseconds.
    pub time: String,
    /// `debug`, `info`, `warn` or `error`.
    pub level: String,
    /// The route (or `page:<name>`) whose call wrote it.
    pub route: String,
    /// The app's words, sanitised (secrets `[redacted]`), at most 4 KiB.
    pub message: String,
}

impl Line {
    pub fn new(level: &str, route: &str, message: &str) -> Line {
        Line {
            time: humantime::format_rfc3339_micros(SystemTime::now()).to_string(),
            level: level.to_string(),
            route: route.to_string(),
            message: message.to_string(),
        }
    }

    /// `<time> <level> <route>: <message>`, with the message's control
    /// characters escaped so a line cannot pass for another on a terminal.
    pub fn text(&self) -> String {
        format!("{} {} {}: {}", self.time, self.level, self.route.escape_debug(), self.message.escape_debug())
    }

    fn at(&self) -> Option<SystemTime> {
        humantime::parse_rfc3339_weak(&self.time).ok()
    }
}

/// The folder of an app's log, given the app's folder.
pub fn dir_of(app_dir: &Path) -> PathBuf {
    app_dir.join("logs")
}

/// Appends `line` to the log in `dir`, rotating it when it grows past the limit.
///
/// The file is kept open between lines (an open and a close per line were a
/// tenth of a write call's cost, docs/performance.md P3). Before each line the
/// path is looked at: when it is another file than the one kept open (rotated
/// by another process, the app's folder restored or removed), the path is
/// opened anew, so every line goes where a reader looks for it.
pub fn append(dir: &Path, line: &Line) -> anyhow::Result<()> {
    let mut text = serde_json::to_vec(line)?;
    text.push(b'\n');
    append_text(dir, &text)
}

/// Appends `text` (whole lines, each ending in a newline) with one `write`,
/// rotating the log when it grows past the limit.
fn append_text(dir: &Path, text: &[u8]) -> anyhow::Result<()> {
    let path = dir.join(CURRENT);
    let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    let there = match fs::metadata(&path) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot look at {}", path.display())),
    };
    let current = there.as_ref().and_then(|m| kept.get(dir).filter(|k| k.is(m)).map(|_| m.len()));
    let before = match current {
        Some(len) => len,
        None => {
            let f = open_current(dir, &path)?;
            let m = f.metadata()?;
            if kept.len() >= KEPT_MOST {
                kept.clear();
            }
            kept.insert(dir.to_path_buf(), Kept::of(f, &m));
            m.len()
        }
    };
    let f = &mut kept.get_mut(dir).expect("kept just now").file;
    // One write of the whole line: appends of other processes never cut into it.
    if let Err(e) = f.write_all(text) {
        kept.remove(dir);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    if before + text.len() as u64 > FILE_LIMIT {
        kept.remove(dir);
        drop(kept);
        rotate(dir)?;
    }
    Ok(())
}

/// How long the writer gathers lines after the first before it writes them.
pub const GATHER: Duration = Duration::from_millis(10);

/// The most bytes of lines queued; past it, a call that logs waits for the
/// writer (so a flood of lines slows its app down instead of filling memory).
const QUEUED_MOST: usize = 8 << 20;

/// The most bytes written with one `write`: the log passes its limit by less
/// than this before it is rotated.
const WRITE_MOST: usize = 64 << 10;

/// Lines waiting for the writer, by log folder (few: the apps that logged
/// in the last moment).
struct Queue {
    lines: Vec<(PathBuf, Vec<Line>)>,
    bytes: usize,
    /// Lines queued and lines written (or given up on) since the process began.
    queued: u64,
    written: u64,
    /// The writer waits for lines (it must be woken) rather than gathering.
    idle: bool,
    /// A reader or a clean stop waits: write now, without gathering.
    urgent: bool,
}

struct Appender {
    queue: std::sync::Mutex<Queue>,
    /// The writer waits on this for lines (or for `urgent`).
    work: std::sync::Condvar,
    /// Those who flush, or wait for room, wait on this.
    done: std::sync::Condvar,
}

static APPENDER: Appender = Appender {
    queue: std::sync::Mutex::new(Queue {
        lines: Vec::new(),
        bytes: 0,
        queued: 0,
        written: 0,
        idle: true,
        urgent: false,
    }),
    work: std::sync::Condvar::new(),
    done: std::sync::Condvar::new(),
};

/// Whether the writer thread runs (started at the first line); if it could
/// not be started, each call writes its own lines.
fn writer_runs() -> bool {
    static RUNS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *RUNS.get_or_init(|| {
        std::thread::Builder::new()
            .name("autoapp-app-logs".into())
            .spawn(|| write_queued(&APPENDER))
            .inspect_err(|e| tracing::warn!("no thread for the apps' logs ({e}): each call writes its own lines"))
            .is_ok()
    })
}

fn lock(a: &Appender) -> std::sync::MutexGuard<'_, Queue> {
    a.queue.lock().unwrap_or_else(|p| p.into_inner())
}

/// Queues `line` for the log in `dir`; the writer appends it within
/// [`GATHER`]. Waits only when [`QUEUED_MOST`] bytes already wait.
pub fn queue(dir: &Path, line: Line) {
    let a = &APPENDER;
    if !writer_runs() {
        if let Err(e) = append(dir, &line) {
            tracing::warn!("cannot write the app's log file: {e:#}");
        }
        return;
    }
    let size = line.time.len() + line.level.len() + line.route.len() + line.message.len() + 48;
    let mut q = lock(a);
    while q.bytes >= QUEUED_MOST {
        q.urgent = true;
        a.work.notify_one();
        q = a.done.wait(q).unwrap_or_else(|p| p.into_inner());
    }
    match q.lines.iter_mut().find(|(d, _)| d == dir) {
        Some((_, lines)) => lines.push(line),
        None => q.lines.push((dir.to_path_buf(), vec![line])),
    }
    q.bytes += size;
    q.queued += 1;
    // Only an idle writer is woken: while it gathers, queuing costs no
    // system call.
    if q.idle {
        q.idle = false;
        a.work.notify_one();
    }
}

/// Waits until every line queued in this process so far is in its file.
pub fn flush() {
    let a = &APPENDER;
    let mut q = lock(a);
    let target = q.queued;
    if q.written >= target {
        return;
    }
    q.urgent = true;
    a.work.notify_one();
    while q.written < target {
        q = a.done.wait(q).unwrap_or_else(|p| p.into_inner());
    }
}

/// The writer thread: gathers, then appends each folder's lines.
fn write_queued(a: &Appender) {
    loop {
        let mut q = lock(a);
        while q.lines.is_empty() {
            q.idle = true;
            q = a.work.wait(q).unwrap_or_else(|p| p.into_inner());
        }
        q.idle = false;
        if !q.urgent {
            q = a.work.wait_timeout_while(q, GATHER, |q| !q.urgent).unwrap_or_else(|p| p.into_inner()).0;
        }
        q.urgent = false;
        let lines = std::mem::take(&mut q.lines);
        let upto = q.queued;
        q.bytes = 0;
        drop(q);
        for (dir, lines) in &lines {
            if let Err(e) = write_lines(dir, lines) {
                tracing::warn!("cannot write the app's log file in {}: {e:#}", dir.display());
            }
        }
        let mut q = lock(a);
        q.written = upto;
        drop(q);
        a.done.notify_all();
    }
}

/// Appends `lines` to the log in `dir`, in writes of at most [`WRITE_MOST`]
/// bytes of whole lines.
fn write_lines(dir: &Path, lines: &[Line]) -> anyhow::Result<()> {
    let mut text = Vec::new();
    for line in lines {
        let before = text.len();
        serde_json::to_writer(&mut text, line)?;
        text.push(b'\n');
        if text.len() >= WRITE_MOST && before > 0 {
            append_text(dir, &text[..before])?;
            text.drain(..before);
        }
    }
    if !text.is_empty() {
        append_text(dir, &text)?;
    }
    Ok(())
}

/// Opens `app.log` in `dir` for appending, making the folder at the first
/// line. Only the log folder is made: an app folder that went (to the trash)
/// while a call was in flight is not made again by its last lines.
fn open_current(dir: &Path, path: &Path) -> anyhow::Result<fs::File> {
    let open = || fs::OpenOptions::new().create(true).append(true).open(path);
    match open() {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match fs::create_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
            }
            open()
        }
        Err(e) => Err(e),
    }
    .with_context(|| format!("cannot open {}", path.display()))
}

/// The log files this process keeps open, by folder.
static KEPT: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<PathBuf, Kept>>> =
    std::sync::LazyLock::new(Default::default);

/// Files kept open at most (one per app that logs); past it, all are closed.
const KEPT_MOST: usize = 256;

/// An open log file, and which file it is.
struct Kept {
    file: fs::File,
    #[cfg(unix)]
    id: (u64, u64),
}

impl Kept {
    fn of(file: fs::File, _m: &fs::Metadata) -> Kept {
        #[cfg(unix)]
        let id = {
            use std::os::unix::fs::MetadataExt as _;
            (_m.dev(), _m.ino())
        };
        Kept {
            file,
            #[cfg(unix)]
            id,
        }
    }

    /// Whether the file at the path (`m`) is the one kept open. Where files
    /// have no identity to compare, never: the path is opened for each line.
    fn is(&self, _m: &fs::Metadata) -> bool {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt as _;
            self.id == (_m.dev(), _m.ino())
        }
        #[cfg(not(unix))]
        false
    }
}

fn rotate(dir: &Path) -> anyhow::Result<()> {
    // (Not had: rotated by a later write.)
    let Some(_lock) = rotation_lock(dir, true)? else { return Ok(()) };
    // Another process may have rotated while this one waited.
    let path = dir.join(CURRENT);
    if fs::metadata(&path).map(|m| m.len()).unwrap_or(0) > FILE_LIMIT {
        fs::rename(&path, dir.join(ROTATED)).context("cannot rotate the app's log")?;
    }
    Ok(())
}

/// Parses the lines of a log file's text; a torn or foreign line is skipped.
fn parse(text: &str) -> impl Iterator<Item = Line> + '_ {
    text.lines().filter_map(|l| serde_json::from_str(l).ok())
}

/// How long a rotation or a reader waits for the rotation's lock. The lock
/// file is in the app's log folder, which the app's workers write: one
/// taken by an escape could hold it for as long as it lives, and nobody
/// who reads or rotates the app's log may wait for it that long.
const ROTATION_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// The rotation's lock: a rotation holds it alone; readers share it while
/// they read the two files together, so no rotation moves a file between
/// the reads (and readers never wait for each other). Waited for up to
/// [`ROTATION_PATIENCE`]: then a reader reads without it (a rotation at that
/// moment may hide some lines from this one reading), and a rotation is
/// left to the next write.
fn rotation_lock(dir: &Path, rotating: bool) -> anyhow::Result<Option<fs::File>> {
    match fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(ROTATE_LOCK)) {
        Ok(f) => {
            let until = std::time::Instant::now() + ROTATION_PATIENCE;
            loop {
                let taken = if rotating { f.try_lock() } else { f.try_lock_shared() };
                match taken {
                    Ok(()) => return Ok(Some(f)),
                    Err(fs::TryLockError::WouldBlock) if std::time::Instant::now() < until => {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    Err(fs::TryLockError::WouldBlock) => return Ok(None),
                    Err(fs::TryLockError::Error(e)) => return Err(e).context("cannot lock the app's log"),
                }
            }
        }
        // No log folder yet: nothing to read, nothing to rotate.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot lock {}", dir.display())),
    }
}

/// The whole lines of the last `most` bytes of `path` before `to` (its end
/// when none), judged on the file as opened (its length read from the open
/// handle, the read itself bounded: no gap between a look and a read), and
/// whether they are all of it. A read that began inside a line starts after
/// its end.
fn read_end(path: &Path, to: Option<u64>, most: u64) -> anyhow::Result<(String, bool)> {
    let mut f = match open_log(path)? {
        Some(f) => f,
        None => return Ok((String::new(), true)),
    };
    let end = to.unwrap_or(f.metadata()?.len());
    let from = end.saturating_sub(most);
    f.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    f.take(end - from).read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Ok(match from {
        0 => (text, true),
        _ => (text.split_once('\n').map(|(_, rest)| rest.to_string()).unwrap_or_default(), false),
    })
}

/// `path` opened to read, if it is there: a regular file only, never
/// waiting on a FIFO or a device an app's worker put in its place.
fn open_log(path: &Path) -> anyhow::Result<Option<fs::File>> {
    use std::os::unix::fs::OpenOptionsExt as _;
    // (Not `root::open_regular`: this module is a leaf.)
    let opened = fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path);
    match opened {
        Ok(f) if f.metadata()?.is_file() => Ok(Some(f)),
        Ok(_) => anyhow::bail!("{} is not a regular file", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn keep_last(lines: impl Iterator<Item = Line>, since: Option<SystemTime>, limit: usize) -> Vec<Line> {
    let mut lines: Vec<Line> = lines.filter(|l| since.is_none_or(|s| l.at().is_some_and(|t| t >= s))).collect();
    let skip = lines.len().saturating_sub(limit);
    lines.drain(..skip);
    lines
}

/// The newest `limit` lines in `dir` at or after `since`, oldest first.
pub fn read(dir: &Path, since: Option<SystemTime>, limit: usize) -> anyhow::Result<Vec<Line>> {
    flush();
    let _lock = rotation_lock(dir, false)?;
    let (new, whole) = read_end(&dir.join(CURRENT), None, READ_MOST)?;
    // The file before it only when this one was read from its start: else
    // lines between the two would be skipped.
    let (old, _) = if whole { read_end(&dir.join(ROTATED), None, READ_MOST)? } else { (String::new(), true) };
    Ok(keep_last(parse(&old).chain(parse(&new)), since, limit))
}

/// The newest `limit` lines in `dir`, reading only the ends of the files.
pub fn tail(dir: &Path, limit: usize) -> anyhow::Result<Vec<Line>> {
    flush();
    let _lock = rotation_lock(dir, false)?;
    // A line is at most a 4 KiB message, escaped (up to six bytes for one),
    // with its time, level and route.
    let want = (limit as u64).saturating_add(1).saturating_mul(26 * 1024).min(READ_MOST);
    let (mut lines, whole) = tail_of(&dir.join(CURRENT), want)?;
    // The file before it only when this one was read from its start: else
    // lines between the two would be skipped.
    if lines.len() < limit && whole {
        let (mut older, _) = tail_of(&dir.join(ROTATED), want)?;
        older.append(&mut lines);
        lines = older;
    }
    let skip = lines.len().saturating_sub(limit);
    lines.drain(..skip);
    Ok(lines)
}

/// The lines in the last `want` bytes of `path`, and whether that was all of it.
fn tail_of(path: &Path, want: u64) -> anyhow::Result<(Vec<Line>, bool)> {
    let (text, whole) = read_end(path, None, want)?;
    Ok((parse(&text).collect(), whole))
}

/// Prints the log in `dir` and follows it: calls `each` with the newest
/// `limit` lines at or after `since`, then with every line appended from
/// then on (through rotations), polling every `every`, until `each` returns
/// false. The history and the following meet exactly: none is lost or twice.
pub fn follow(
    dir: &Path,
    since: Option<SystemTime>,
    limit: usize,
    every: Duration,
    mut each: impl FnMut(Line) -> bool,
) -> anyhow::Result<()> {
    flush();
    let path = dir.join(CURRENT);
    let (history, mut current) = {
        let _lock = rotation_lock(dir, false)?;
        let current = match open_log(&path)? {
            Some(mut f) => {
                let end = f.seek(SeekFrom::End(0))?;
                Some((f, end))
            }
            None => None,
        };
        let (new, whole) = match &current {
            Some((_, end)) => read_end(&path, Some(*end), READ_MOST)?,
            None => (String::new(), true),
        };
        let (old, _) = if whole { read_end(&dir.join(ROTATED), None, READ_MOST)? } else { (String::new(), true) };
        (keep_last(parse(&old).chain(parse(&new)), since, limit), current)
    };
    for l in history {
        if !each(l) {
            return Ok(());
        }
    }
    let mut pending = String::new();
    loop {
        // What was appended to the file this handle has open (the current
        // one, or the one a rotation just renamed).
        if let Some((f, _)) = current.as_mut()
            && !read_on(f, &mut pending, &mut each)?
        {
            return Ok(());
        }
        std::thread::sleep(every);
        let rotated = match (&current, fs::metadata(&path)) {
            (Some((f, _)), Ok(m)) => {
                use std::os::unix::fs::MetadataExt as _;
                f.metadata()?.ino() != m.ino()
            }
            (None, Ok(_)) => true,
            (_, Err(_)) => false,
        };
        if rotated {
            // The rest of the old file first, then the new one from its start.
            if let Some((f, _)) = current.as_mut()
                && !read_on(f, &mut pending, &mut each)?
            {
                return Ok(());
            }
            pending.clear();
            current = open_log(&path).ok().flatten().map(|f| (f, 0));
        }
    }
}

/// Reads what was appended to `f` and hands each whole line to `each`
/// (a line cut short waits in `pending`); false when `each` said stop.
fn read_on(f: &mut fs::File, pending: &mut String, each: &mut impl FnMut(Line) -> bool) -> anyhow::Result<bool> {
    let mut more = Vec::new();
    // At most a file's worth each poll: a file that grew past any honest
    // log's size is skipped to its last [`READ_MOST`] bytes, and a line that
    // never ends is dropped rather than held.
    let at = f.stream_position()?;
    let len = f.metadata()?.len();
    if len.saturating_sub(at) > READ_MOST {
        f.seek(SeekFrom::Start(len - READ_MOST))?;
        pending.clear();
    }
    f.take(READ_MOST).read_to_end(&mut more)?;
    pending.push_str(&String::from_utf8_lossy(&more));
    if pending.len() as u64 > READ_MOST && !pending.contains('\n') {
        pending.clear();
    }
    while let Some(end) = pending.find('\n') {
        let line: String = pending.drain(..=end).collect();
        if let Ok(l) = serde_json::from_str::<Line>(&line)
            && !each(l)
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Reads a `--since` value: an RFC 3339 time (`2026-12-01T09:00:00Z`) or a
/// span back from now (`10m`, `2h`, `1day`).
pub fn parse_since(given: &str) -> Result<SystemTime, String> {
    if let Ok(t) = humantime::parse_rfc3339_weak(given) {
        return Ok(t);
    }
    match humantime::parse_duration(given) {
        Ok(d) => Ok(SystemTime::now().checked_sub(d).unwrap_or(SystemTime::UNIX_EPOCH)),
        Err(_) => Err(format!(
            "`{}` is not a time: give one like 2026-12-01T09:00:00Z (UTC), or a span back from now like 10m, 2h or 3days",
            given.escape_debug()
        )),
    }
}

/// How many bytes the log in `dir` holds.
pub fn bytes(dir: &Path) -> u64 {
    flush();
    [CURRENT, ROTATED].iter().filter_map(|n| fs::metadata(dir.join(n)).ok()).map(|m| m.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_goes_to_the_file_at_the_path_when_another_process_moved_the_one_kept_open() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("logs");
        append(&dir, &Line::new("info", "r", "one")).unwrap();
        // Another process rotates the log (a rename, as `rotate` does).
        fs::rename(dir.join(CURRENT), dir.join(ROTATED)).unwrap();
        append(&dir, &Line::new("info", "r", "two")).unwrap();
        let current = fs::read_to_string(dir.join(CURRENT)).unwrap();
        assert!(current.contains("two") && !current.contains("one"), "{current}");
        // The folder is removed and made again (a restore): the next line is in the new one.
        fs::remove_dir_all(&dir).unwrap();
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join(CURRENT), "").unwrap();
        append(&dir, &Line::new("info", "r", "three")).unwrap();
        let lines: Vec<String> = read(&dir, None, 10).unwrap().into_iter().map(|l| l.message).collect();
        assert_eq!(lines, ["three"]);
    }

    #[test]
    fn queued_lines_of_many_callers_at_once_are_all_written_whole_and_in_order_before_a_read() {
        let d = tempfile::tempdir().unwrap();
        let dirs: Vec<PathBuf> = (0..2).map(|i| d.path().join(format!("app{i}")).join("logs")).collect();
        for dir in &dirs {
            fs::create_dir_all(dir.parent().unwrap()).unwrap();
        }
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let dir = dirs[t % 2].clone();
                std::thread::spawn(move || {
                    for i in 0..500 {
                        queue(&dir, Line::new("info", &format!("t{t}"), &format!("{i} {}", "z".repeat(i % 300))));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // No flush here: a reader in this process waits for what is queued.
        for (k, dir) in dirs.iter().enumerate() {
            let lines = read(dir, None, usize::MAX).unwrap();
            assert_eq!(lines.len(), 4 * 500, "every line of app{k}, each whole");
            for t in (k..8).step_by(2) {
                let mine: Vec<usize> = lines
                    .iter()
                    .filter(|l| l.route == format!("t{t}"))
                    .map(|l| l.message.split(' ').next().unwrap().parse().unwrap())
                    .collect();
                assert_eq!(mine, (0..500).collect::<Vec<_>>(), "each caller's lines in the order it wrote them");
            }
        }
    }

    #[test]
    fn a_flood_of_queued_lines_keeps_the_log_bounded_and_loses_no_line_between_its_files() {
        let d = tempfile::tempdir().unwrap();
        let message = "q".repeat(4000);
        let n = (3 * FILE_LIMIT / 4000) as usize;
        // Made first, then queued at once: the writer takes them in one batch.
        let lines: Vec<Line> = (0..n).map(|i| Line::new("info", "r", &format!("{i} {message}"))).collect();
        for line in lines {
            queue(d.path(), line);
        }
        flush();
        assert!(bytes(d.path()) <= 2 * FILE_LIMIT + (64 << 10), "bounded: {}", bytes(d.path()));
        let all = read(d.path(), None, usize::MAX).unwrap();
        let first: usize = all[0].message.split(' ').next().unwrap().parse().unwrap();
        assert_eq!(first + all.len(), n, "the newest lines, up to the last");
        for (k, l) in all.iter().enumerate() {
            assert!(l.message.starts_with(&format!("{} ", first + k)));
        }
    }

    #[test]
    fn a_queued_line_is_not_made_into_a_folder_for_an_app_that_went() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("gone").join("logs");
        queue(&dir, Line::new("info", "r", "late"));
        flush();
        assert!(!d.path().join("gone").exists(), "the app's folder is not made again by its last line");
    }

    /// The most memory this process has held, in KiB (`VmHWM`).
    fn peak_kib() -> u64 {
        let status = fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// Issue 71, rule 2: an app's worker writes its own log folder. It made
    /// `app.log.1` (then `app.log`) a 1 GiB sparse file, and one read of the
    /// log took the launcher from 25 MB to 2.1 GB. Every read takes at most
    /// [`READ_MOST`] of a file, from its end, judged on the file as opened;
    /// the lines an honest writer added are read still.
    #[test]
    fn a_log_file_made_huge_by_its_app_is_read_no_further_back_than_the_bound() {
        let d = tempfile::tempdir().unwrap();
        fs::File::create(d.path().join(ROTATED)).unwrap().set_len(1 << 30).unwrap();
        append(d.path(), &Line::new("info", "r", "after")).unwrap();
        let before = peak_kib();
        assert_eq!(read(d.path(), None, 10).unwrap().last().unwrap().message, "after");
        assert_eq!(tail(d.path(), usize::MAX).unwrap().last().unwrap().message, "after");
        // The current file made huge too, an honest line at its end.
        let mut f = fs::OpenOptions::new().append(true).open(d.path().join(CURRENT)).unwrap();
        f.set_len(1 << 30).unwrap();
        f.write_all(b"\n").unwrap();
        drop(f);
        append(d.path(), &Line::new("info", "r", "last")).unwrap();
        let lines = read(d.path(), None, usize::MAX).unwrap();
        assert_eq!(lines.iter().map(|l| l.message.as_str()).collect::<Vec<_>>(), ["last"]);
        assert_eq!(tail(d.path(), 5).unwrap(), lines);
        let mut seen = Vec::new();
        follow(d.path(), None, 5, Duration::from_millis(1), |l| {
            seen.push(l.message);
            false
        })
        .unwrap();
        assert_eq!(seen, ["last"]);
        let grew = peak_kib().saturating_sub(before);
        assert!(grew < 256 << 10, "the reads held {grew} KiB more at their peak");
    }

    #[test]
    fn a_log_rotates_past_its_limit_and_stays_bounded() {
        let d = tempfile::tempdir().unwrap();
        let message = "x".repeat(4000);
        let n = (3 * FILE_LIMIT / 4000) as usize;
        for i in 0..n {
            append(d.path(), &Line::new("info", "r", &format!("{i} {message}"))).unwrap();
        }
        assert!(bytes(d.path()) <= 2 * FILE_LIMIT + 5000, "bounded: {}", bytes(d.path()));
        assert!(d.path().join(ROTATED).is_file());
        let last = read(d.path(), None, 3).unwrap();
        assert_eq!(tail(d.path(), 3).unwrap(), last, "the tail reads the same lines");
        assert_eq!(tail(d.path(), 400).unwrap(), read(d.path(), None, 400).unwrap(), "across both files");
        assert_eq!(last.len(), 3);
        assert!(last[2].message.starts_with(&format!("{} ", n - 1)), "newest last");
        // Nothing between the two files is lost: what is kept is a run of consecutive lines.
        let all = read(d.path(), None, usize::MAX).unwrap();
        let first: usize = all[0].message.split(' ').next().unwrap().parse().unwrap();
        for (k, l) in all.iter().enumerate() {
            assert!(l.message.starts_with(&format!("{} ", first + k)));
        }
    }

    #[test]
    fn since_keeps_later_lines_and_a_torn_line_is_skipped() {
        let d = tempfile::tempdir().unwrap();
        let mut old = Line::new("info", "r", "old");
        old.time = "2020-01-01T00:00:00.000000Z".into();
        append(d.path(), &old).unwrap();
        fs::OpenOptions::new().append(true).open(d.path().join(CURRENT)).unwrap().write_all(b"{\"time\":\"20").unwrap();
        fs::OpenOptions::new().append(true).open(d.path().join(CURRENT)).unwrap().write_all(b"\n").unwrap();
        append(d.path(), &Line::new("warn", "r", "new\nforged 2020 line")).unwrap();
        let all = read(d.path(), None, 10).unwrap();
        assert_eq!(all.len(), 2);
        let since = read(d.path(), Some(parse_since("1h").unwrap()), 10).unwrap();
        assert_eq!(since.len(), 1);
        assert_eq!(since[0].message, "new\nforged 2020 line");
        assert!(!since[0].text().contains('\n'), "escaped on a terminal: {}", since[0].text());
        assert!(parse_since("yesterday-ish").is_err());
        assert!(parse_since("2021-01-01T00:00:00Z").is_ok());
    }

    #[test]
    fn follow_sees_lines_written_after_it_starts_and_through_a_rotation() {
        let d = tempfile::tempdir().unwrap();
        append(d.path(), &Line::new("info", "r", "before")).unwrap();
        let dir = d.path().to_path_buf();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            append(&dir, &Line::new("info", "r", "after-1")).unwrap();
            // Fill past the limit: the next line lands in a new file.
            let big = "y".repeat(4000);
            for _ in 0..(FILE_LIMIT / 4000 + 1) {
                append(&dir, &Line::new("debug", "r", &big)).unwrap();
            }
            append(&dir, &Line::new("info", "r", "after-2")).unwrap();
        });
        let mut seen = Vec::new();
        follow(d.path(), None, 0, Duration::from_millis(20), |l| {
            if !l.message.starts_with('y') {
                seen.push(l.message);
            }
            seen.len() < 2
        })
        .unwrap();
        writer.join().unwrap();
        assert_eq!(seen, ["after-1", "after-2"]);
    }
}
