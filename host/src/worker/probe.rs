//! Debug builds only (`tests/all/tidy.rs` holds that this module and what
//! starts it are compiled into no release): what a runtime escape would try
//! in an app's worker, done as native code does it — raw system calls on a
//! thread of the confined process — so that a test can show each one fails
//! there, and succeeds in a process that is not confined (`autoapp
//! __escape-probe`), which shows the test can fail.
//!
//! A test asks for it with `AUTOAPP_ESCAPE_PROBE` (a JSON list of
//! [`Attempt`]s) in the environment of `autoapp call`: the worker runs them
//! instead of the call and answers what became of each.

use std::io::Read as _;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The variable a test names the attempts in.
pub const ENV: &str = "AUTOAPP_ESCAPE_PROBE";

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
    /// Connect to a UNIX socket named by a path (a session bus, an agent).
    ConnectUnix { path: PathBuf },
    /// Start a program.
    Exec { path: PathBuf },
    /// Open another process's memory, which needs what `ptrace` needs.
    Attach { pid: u32 },
    /// Make a symbolic link at `path` to `target` (for the host to follow
    /// later).
    Symlink { path: PathBuf, target: PathBuf },
    /// Make a hard link at `path` to the file `target`.
    Link { path: PathBuf, target: PathBuf },
    /// Make a FIFO at `path` (for the host to block on later).
    Fifo { path: PathBuf },
    /// Start a program and leave it running past the call.
    Leave { path: PathBuf, args: Vec<String> },
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

/// The attempts a test asked for, if any.
pub fn asked() -> Option<Vec<Attempt>> {
    let text = std::env::var(ENV).ok()?;
    serde_json::from_str(&text).ok()
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
        Attempt::ConnectUnix { path } => std::os::unix::net::UnixStream::connect(path).map(|_| ()),
        Attempt::Exec { path } => std::process::Command::new(path).output().map(|_| ()),
        Attempt::Attach { pid } => std::fs::File::open(format!("/proc/{pid}/mem")).map(|_| ()),
        Attempt::Symlink { path, target } => std::os::unix::fs::symlink(target, path),
        Attempt::Link { path, target } => std::fs::hard_link(target, path),
        Attempt::Fifo { path } => {
            rustix::fs::mknodat(rustix::fs::CWD, path, rustix::fs::FileType::Fifo, rustix::fs::Mode::RUSR, 0)
                .map_err(std::io::Error::from)
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
