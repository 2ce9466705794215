//! Debug builds only (`tests/all/tidy.rs` holds that this module and what
//! links it are compiled into no release): what a runtime escape would try
//! in an app's worker, done as native code does it — raw system calls in
//! the process a call runs in — so that a test can show each one fails
//! there, and succeeds in a process that is not confined (`autoapp
//! __escape-probe`), which shows the test can fail.
//!
//! A guest asks for it through an import of its own, `autoapp:escape/probe`
//! (`attempt`: a JSON list of [`Attempt`]s in, what became of each out),
//! which the runtime links in debug builds only and the build accepts in
//! debug builds only: the test guest `guests/escape` calls it from its routes, so
//! the attempts run on the very thread its code runs on, in whichever
//! worker runs the call.

use std::io::Read as _;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One thing an escaped guest would try.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "try", rename_all = "kebab-case")]
pub enum Attempt {
    /// Read a file's first bytes.
    Read { path: PathBuf },
    /// Open an existing file for writing (nothing is written).
    Write { path: PathBuf },
    /// Make a new file.
    Create { path: PathBuf },
    /// List a folder.
    List { path: PathBuf },
    /// Connect over TCP.
    Connect { address: String },
    /// Send a UDP datagram (a socket of its own, then `sendto`).
    Udp { address: String },
    /// Connect to a UNIX socket named by a path (a session bus, an agent).
    ConnectUnix { path: PathBuf },
    /// Start a program.
    Exec { path: PathBuf },
    /// Open another process's memory, which needs what `ptrace` needs.
    Attach { pid: u32 },
    /// Set a file's modification time (what WASI's `set-times` does on a
    /// granted folder's file).
    Touch { path: PathBuf },
    /// Ask whether another process may be signalled (`kill` with signal 0,
    /// which the kernel checks as it checks any signal).
    Signal { pid: u32 },
    /// The same through `tgkill` (a signal to one thread of a process: its
    /// main thread, whose id is its pid), which a worker's own runtime uses
    /// on its own threads.
    SignalThread { pid: u32 },
    /// Read another process's limit of open files (who may read it may set
    /// it).
    Limits { pid: u32 },
    /// Make another process the owner of a pipe's signals (`F_SETOWN`:
    /// then `O_ASYNC` and one byte send it `SIGIO`, or what `F_SETSIG`
    /// names; nothing is sent here).
    Owner { pid: u32 },
    /// Make a process that runs nothing (`fork`; the child ends at once).
    Fork,
    /// Make a symbolic link at `path` to `target` (for the host to follow
    /// later).
    Symlink { path: PathBuf, target: PathBuf },
    /// Make a hard link at `path` to the file `target`.
    Link { path: PathBuf, target: PathBuf },
    /// Make a FIFO at `path` (for the host to block on later).
    Fifo { path: PathBuf },
    /// Start a program and leave it running past the call.
    Leave { path: PathBuf, args: Vec<String> },
    /// Open a file for reading and take its `flock` alone (let go at once):
    /// what holding an app's lock would take.
    Lock { path: PathBuf },
    /// Say `line` on descriptor 1 — a worker's channel to its launcher —
    /// `times` times, as a worker taken by an escape would, whatever the
    /// worker itself says there meanwhile.
    Say { line: String, times: u32 },
    /// Say on descriptor 1 `before`, `piece` `times` times and `after` (an
    /// answer of a long list to a call, say: text its reader would hold many
    /// times over parsed), as `lines` lines, each with its number where
    /// `before` says `{line}`; on descriptor `to` instead when given (2: its
    /// standard error).
    Heavy {
        before: String,
        piece: String,
        times: u64,
        after: String,
        #[serde(default = "one")]
        lines: u64,
        #[serde(default = "channel")]
        to: i32,
    },
    /// End the process at once (status 0), as a worker taken by an escape
    /// may once it said what it wanted.
    Exit,
    /// Hold the call's thread for `ms` milliseconds in native code, which
    /// the call's deadline (an epoch that only the guest's own code checks)
    /// never interrupts: a worker that stops answering.
    Sleep { ms: u64 },
    /// Read the first bytes of the file held by descriptor `fd`, one that
    /// whoever started `autoapp` left open: done only when they begin with
    /// `starts` (a descriptor the process opened itself is not that file).
    ReadFd { fd: i32, starts: String },
}

fn one() -> u64 {
    1
}

fn channel() -> i32 {
    1
}

/// What became of an attempt.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    pub attempt: Attempt,
    /// It did what it tried.
    pub done: bool,
    /// Why not.
    pub error: Option<String>,
}

/// The interface a guest imports it by, and its one function.
pub const INTERFACE: &str = "autoapp:escape/probe";
pub const FUNCTION: &str = "attempt";

/// The import's answer: what became of each attempt `asked` names (a
/// JSON list), as a JSON list; an error's sentence when it names none.
pub fn answer(asked: &str) -> String {
    match serde_json::from_str::<Vec<Attempt>>(asked) {
        Ok(attempts) => serde_json::to_string(&run(&attempts)).unwrap_or_default(),
        Err(e) => serde_json::json!({ "error": format!("not a list of attempts ({e})") }).to_string(),
    }
}

/// Tries each attempt in this process.
pub fn run(attempts: &[Attempt]) -> Vec<Outcome> {
    attempts
        .iter()
        .map(|a| {
            let tried = attempt(a);
            Outcome { attempt: a.clone(), done: tried.is_ok(), error: tried.err().map(|e| e.to_string()) }
        })
        .collect()
}

fn attempt(a: &Attempt) -> std::io::Result<()> {
    match a {
        Attempt::Read { path } => std::fs::File::open(path)?.read(&mut [0u8; 16]).map(|_| ()),
        Attempt::Write { path } => std::fs::OpenOptions::new().write(true).open(path).map(|_| ()),
        Attempt::Create { path } => std::fs::OpenOptions::new().write(true).create_new(true).open(path).map(|_| ()),
        Attempt::List { path } => std::fs::read_dir(path)?.next().transpose().map(|_| ()),
        Attempt::Connect { address } => std::net::TcpStream::connect(address).map(|_| ()),
        Attempt::Udp { address } => std::net::UdpSocket::bind("127.0.0.1:0")?.send_to(b"probe", address).map(|_| ()),
        Attempt::ConnectUnix { path } => std::os::unix::net::UnixStream::connect(path).map(|_| ()),
        Attempt::Exec { path } => std::process::Command::new(path).output().map(|_| ()),
        Attempt::Attach { pid } => std::fs::File::open(format!("/proc/{pid}/mem")).map(|_| ()),
        Attempt::Touch { path } => {
            std::fs::OpenOptions::new().write(true).open(path)?.set_modified(std::time::SystemTime::now())
        }
        Attempt::Signal { pid } => {
            let pid = rustix::process::Pid::from_raw(*pid as i32).ok_or_else(|| std::io::Error::other("no pid 0"))?;
            rustix::process::test_kill_process(pid).map_err(std::io::Error::from)
        }
        Attempt::SignalThread { pid } => {
            // SAFETY: tgkill with signal 0 sends nothing; it only checks.
            #[allow(unsafe_code)]
            let got = unsafe { libc::syscall(libc::SYS_tgkill, *pid as libc::c_long, *pid as libc::c_long, 0) };
            match got {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        }
        Attempt::Limits { pid } => {
            let mut old = libc::rlimit64 { rlim_cur: 0, rlim_max: 0 };
            // SAFETY: reads the limit into `old`; sets nothing (no new limit).
            #[allow(unsafe_code)]
            let got = unsafe { libc::prlimit64(*pid as libc::pid_t, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) };
            match got {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        }
        Attempt::Owner { pid } => {
            let (read, _write) = rustix::pipe::pipe().map_err(std::io::Error::from)?;
            // SAFETY: fcntl on a descriptor this owns; it only sets who owns it.
            #[allow(unsafe_code)]
            let got =
                unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&read), libc::F_SETOWN, *pid as libc::c_int) };
            match got {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        }
        Attempt::Fork => {
            // SAFETY: the child calls only `_exit`, which is safe after fork.
            #[allow(unsafe_code)]
            match unsafe { libc::fork() } {
                -1 => Err(std::io::Error::last_os_error()),
                0 => unsafe { libc::_exit(0) },
                child => {
                    // (Reaped where it may be: outside a worker.)
                    // SAFETY: waits for the child just made.
                    #[allow(unsafe_code)]
                    let _ = unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
                    Ok(())
                }
            }
        }
        Attempt::Lock { path } => {
            let file = std::fs::File::open(path)?;
            rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(std::io::Error::from)
        }
        Attempt::Say { line, times } => {
            use std::io::Write as _;
            let mut said = line.clone().into_bytes();
            said.push(b'\n');
            // SAFETY: descriptor 1 is this process's standard output, open
            // for its whole life; borrowed for the writes, never closed here.
            #[allow(unsafe_code)]
            let out = unsafe { std::os::fd::BorrowedFd::borrow_raw(1) };
            let mut out = std::fs::File::from(out.try_clone_to_owned()?);
            (0..*times).try_for_each(|_| out.write_all(&said))
        }
        Attempt::Heavy { before, piece, times, after, lines, to } => {
            use std::io::Write as _;
            let mut middle = Vec::with_capacity(piece.len() * *times as usize);
            for _ in 0..*times {
                middle.extend_from_slice(piece.as_bytes());
            }
            if ![1, 2].contains(to) {
                return Err(std::io::Error::other("said on descriptor 1 or 2"));
            }
            // SAFETY: as `Say`'s (descriptor 2 likewise: its standard error).
            #[allow(unsafe_code)]
            let out = unsafe { std::os::fd::BorrowedFd::borrow_raw(*to) };
            let mut out = std::fs::File::from(out.try_clone_to_owned()?);
            for line in 0..*lines {
                let start = before.replace("{line}", &line.to_string());
                for part in [start.as_bytes(), &middle, after.as_bytes()] {
                    // The channel does not block (its worker's runtime made
                    // it so): what does not fit yet goes once there is room.
                    let mut left = part;
                    while !left.is_empty() {
                        match out.write(left) {
                            Ok(n) => left = &left[n..],
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                                let mut ready = [rustix::event::PollFd::new(&out, rustix::event::PollFlags::OUT)];
                                rustix::event::poll(&mut ready, None)?;
                            }
                            Err(e) => return Err(e),
                        }
                    }
                }
            }
            Ok(())
        }
        Attempt::Exit => std::process::exit(0),
        Attempt::Sleep { ms } => {
            std::thread::sleep(std::time::Duration::from_millis(*ms));
            Ok(())
        }
        Attempt::Symlink { path, target } => std::os::unix::fs::symlink(target, path),
        Attempt::Link { path, target } => std::fs::hard_link(target, path),
        Attempt::Fifo { path } => {
            rustix::fs::mknodat(rustix::fs::CWD, path, rustix::fs::FileType::Fifo, rustix::fs::Mode::RUSR, 0)
                .map_err(std::io::Error::from)
        }
        Attempt::ReadFd { fd, starts } => {
            let mut first = vec![0u8; starts.len()];
            // SAFETY: reads into a buffer of the length given; a number that
            // is not an open descriptor fails with EBADF.
            #[allow(unsafe_code)]
            let got = unsafe { libc::pread(*fd, first.as_mut_ptr().cast(), first.len(), 0) };
            match got {
                n if n < 0 => Err(std::io::Error::last_os_error()),
                n if first[..n as usize] == *starts.as_bytes() => Ok(()),
                _ => Err(std::io::Error::other(format!("descriptor {fd} holds something else"))),
            }
        }
        // Not waited for: it is left to run, holding none of the worker's
        // streams (as a daemon does; pipes of its own, closed here).
        Attempt::Leave { path, args } => std::process::Command::new(path)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map(|_| ()),
    }
}

/// `autoapp __escape-probe <attempts>`: the same attempts in a process that
/// is not confined; prints the outcomes as JSON.
pub fn main(args: &[String]) -> i32 {
    let Some(attempts) = args.first().and_then(|a| serde_json::from_str::<Vec<Attempt>>(a).ok()) else {
        tell!("autoapp: __escape-probe needs a JSON list of attempts");
        return 2;
    };
    say!("{}", serde_json::to_string(&run(&attempts)).unwrap_or_default());
    0
}
