//! Kernel containment of every process the host starts on a workspace's or an
//! app's behalf: a build's steps (`build`) and granted programs (`spawn`).
//! One shim, one policy type.
//!
//! The host never execs such a program directly. It runs its own binary as
//! `autoapp __confined <policy> -- <program> <args>`, the **supervisor**
//! ([`supervise`]): it becomes the subreaper of everything below it, starts
//! `autoapp __confined-exec <policy> -- <program> <args>`, which confines
//! itself and then `exec`s the program, and it ends every process the program
//! started — including those that left its process group or session
//! (`setsid`, a double fork) — when the program ends, at the policy's wall
//! clock deadline, when it is told to stop (`SIGTERM`, `SIGINT`, `SIGHUP`) and
//! when the host that started it dies. No `unsafe` `pre_exec` hook is needed,
//! and the policy is plain data that tests can read.
//!
//! What the second stage applies before `exec`, in this order: a session of
//! its own (no controlling terminal); no capability (when the host runs as
//! root); resource limits; Landlock — read (and
//! execute) the policy's system folders and `read`, list `list`, write
//! `write`, connect over TCP only to `connect_ports`, bind nothing, abstract
//! UNIX sockets and signals scoped to the sandbox where the kernel offers it
//! (ABI 6); the system-call filter of [`seccomp`] (which sockets, and the
//! calls that would step around the rest); and an environment made of
//! `env` alone. Landlock's filesystem and network rules (ABI ≥ 4) and the
//! filter are required: where the kernel has neither, nothing runs, unless the
//! policy is `unconfined` (the person's explicit choice), which skips
//! Landlock and applies the filter where it can.

pub mod seccomp;
mod supervise;

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope, path_beneath_rules,
};
use serde::{Deserialize, Serialize};

pub use seccomp::Sockets;

/// The system's programs and libraries, read (and executed where a policy
/// allows) by a granted program and by a build's steps alike.
const SYSTEM_DIRS: &[&str] = &["/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin"];

/// Of `/etc`, what a compiler, a linker, a name lookup and programs
/// commonly read — never the rest of it (as root, `/etc` holds the
/// machine's keys: issue 71, rule 4, a worker that ran a program read
/// `/etc/shadow`).
const SYSTEM_ETC: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
    "/etc/pki/tls/certs",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/localtime",
];

/// What a granted program reads beside [`SYSTEM_DIRS`] and [`SYSTEM_ETC`]:
/// more of `/etc` (protocols, locale, time zone), `/opt`, `/proc` (the
/// confinement's supervisor, in the same domain, finds the descendants it
/// must end there) and the terminal.
const PROGRAM_ALSO: &[&str] = &[
    "/etc/protocols",
    "/etc/services",
    "/etc/timezone",
    "/etc/default/locale",
    "/etc/locale.conf",
    "/opt",
    "/proc",
    "/dev/tty",
];

/// The devices every confined process reads.
const SYSTEM_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"];

/// Which system folders a policy reads beside its own `read`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum System {
    /// A granted program: the system's folders, the files of `/etc`
    /// programs commonly read, `/opt` and `/proc` ([`PROGRAM_ALSO`]).
    #[default]
    Program,
    /// A build's step: the system's folders and what a compiler, a linker
    /// and a name lookup read of `/etc` ([`SYSTEM_ETC`]).
    Build,
}

impl System {
    /// The folders and files it names. Not `/proc` for a build: Landlock
    /// keeps a confined process from attaching to another, not from reading
    /// the environment of its ancestors (`/proc/<pid>/environ`), and a build
    /// needs none of it.
    pub fn paths(self) -> Vec<&'static str> {
        let also: &[&str] = match self {
            System::Program => PROGRAM_ALSO,
            System::Build => &[],
        };
        [SYSTEM_DIRS, SYSTEM_ETC, also, SYSTEM_DEVICES].concat()
    }
}

/// What one confined process (and everything it starts) may do.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    /// The system folders read beside `read`.
    pub system: System,
    /// Folders (everything beneath) and files it may read (and execute,
    /// unless `execute` names what it may execute).
    pub read: Vec<PathBuf>,
    /// When given, the only files it may execute (an app's worker: its own
    /// binary for the shim, the programs granted), and the policy is an
    /// app's worker's: `read` is then read only, and `write` gives plain
    /// files and folders only — no symbolic link, FIFO, socket or device
    /// made there, nothing moved or linked in from elsewhere, nothing
    /// executed (what the host opens there later never follows a worker's
    /// link).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execute: Option<Vec<PathBuf>>,
    /// Folders whose entries it may list, beneath, without reading a file
    /// there that `read` does not name.
    pub list: Vec<PathBuf>,
    /// Folders and files it may write (and read).
    pub write: Vec<PathBuf>,
    /// TCP ports it may connect to; it binds none.
    pub connect_ports: Vec<u16>,
    /// Which sockets it may open at all.
    pub sockets: Sockets,
    /// The person chose to run it without Landlock (`spawn_unconfined`, or a
    /// build of theirs where the kernel has no Landlock); the filter still
    /// applies where the kernel has it.
    pub unconfined: bool,
    /// Its whole environment.
    pub env: Vec<(String, String)>,
    /// Ended with everything it started after this many seconds.
    pub wall_secs: Option<u64>,
    pub cpu_secs: u64,
    pub address_space_bytes: u64,
    pub file_size_bytes: u64,
    pub processes: u64,
}

/// The exit status of the shim when it cannot confine the program (a line on
/// stderr starting with `autoapp: ` says why).
pub const CANNOT_CONFINE: i32 = 125;

/// The exit status of the shim when the program ran past `wall_secs` and was
/// ended with everything it started (a line on stderr says so).
pub const PAST_DEADLINE: i32 = 124;

/// The exit status of the shim when it was told to stop and ended the
/// program with everything it started.
pub const STOPPED: i32 = 143;

/// What the running kernel can enforce, decided once.
#[derive(Debug, Clone, Serialize)]
pub struct Support {
    /// Landlock's filesystem and TCP rules and the system-call filter are
    /// enforced (required to confine anything).
    pub enforced: bool,
    /// A sentence for `explain` and `status`.
    pub summary: String,
    /// The answer is the kernel's (the probe ran to its end, or the
    /// configuration turned Landlock off), not a probe that could not run.
    #[serde(skip)]
    pub answered: bool,
    /// Landlock's file rules hold here, not its TCP rules (Linux 5.13 to
    /// 6.6): programs cannot be confined, an app's worker can.
    #[serde(skip)]
    pub files: bool,
}

impl Support {
    /// Support as it is when the configuration turns Landlock off.
    pub fn turned_off() -> Support {
        Support {
            enforced: false,
            summary: "Landlock is off in the configuration (landlock = \"off\")".into(),
            answered: true,
            files: false,
        }
    }

    /// What this machine enforces under `config`: probed, unless the
    /// configuration turns Landlock off.
    pub fn here(config: &crate::config::Config) -> Support {
        if config.landlock == crate::config::Landlock::Off {
            return Support::turned_off();
        }
        match std::env::current_exe() {
            Ok(me) => probe(&me),
            Err(e) => Support {
                enforced: false,
                summary: format!("the autoapp binary cannot be found ({e})"),
                answered: false,
                files: false,
            },
        }
    }
}

/// Debug builds only: pauses here when the test-only pause named `point`
/// is set (`AUTOAPP_PAUSE`), until the file `AUTOAPP_PAUSE_FILE` is gone
/// (at most a minute), or for four seconds without one
/// (`release::journal::pause`).
pub(crate) fn pause(point: &str) {
    if !cfg!(debug_assertions) || std::env::var("AUTOAPP_PAUSE").ok().as_deref() != Some(point) {
        return;
    }
    match std::env::var_os("AUTOAPP_PAUSE_FILE") {
        Some(file) => {
            let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while Path::new(&file).exists() && std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        None => std::thread::sleep(std::time::Duration::from_secs(4)),
    }
}

/// Debug builds only: whether a test plays `name` (`AUTOAPP_FAULT`, one
/// name or several separated by commas).
pub(crate) fn fault_is(name: &str) -> bool {
    cfg!(debug_assertions) && std::env::var("AUTOAPP_FAULT").is_ok_and(|f| f.split(',').any(|f| f == name))
}

/// The probe's status where Landlock holds files and not TCP ports.
const FILES_ONLY: i32 = 2;

/// Probes the kernel by confining a throwaway child (`autoapp __landlock-probe`).
pub fn probe(self_exe: &Path) -> Support {
    let mut command = std::process::Command::new(self_exe);
    command.arg("__landlock-probe").env_clear();
    // Debug builds only: a test can play a kernel without the filter.
    if cfg!(debug_assertions)
        && let Some(fault) = std::env::var_os("AUTOAPP_FAULT")
    {
        command.env("AUTOAPP_FAULT", fault);
    }
    match command.output() {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout).trim().to_string();
            Support { enforced: true, summary: text, answered: true, files: false }
        }
        // It says why it cannot confine with status 1, or 2 where files
        // alone hold; anything else (a signal, another status) is no answer.
        Ok(o) => Support {
            enforced: false,
            summary: String::from_utf8_lossy(&o.stdout).trim().to_string(),
            answered: matches!(o.status.code(), Some(1 | FILES_ONLY)),
            files: o.status.code() == Some(FILES_ONLY),
        },
        Err(e) => Support {
            enforced: false,
            summary: format!("the Landlock probe could not run ({e})"),
            answered: false,
            files: false,
        },
    }
}

/// `autoapp __landlock-probe`: confines itself and reports what held.
pub fn probe_main() -> i32 {
    let policy = Policy {
        cpu_secs: 1,
        address_space_bytes: 1 << 30,
        file_size_bytes: 1 << 20,
        processes: 16,
        ..Policy::default()
    };
    // Whether the system-call filter holds (a test plays a kernel without).
    let filtered = || match fault_is("no-seccomp") {
        true => Err("a test plays a kernel without it".to_string()),
        false => filter_holds(),
    };
    // (Where the kernel has no TCP rules `restrict` fails; a test plays
    // such a kernel with a fault `restrict` does not see.)
    let held = match has_tcp_rules() {
        true => restrict(&policy),
        false => Err("this kernel's Landlock has no TCP rules (Linux 6.7 adds them)".to_string()),
    };
    let scoped = match held {
        Ok(scoped) => scoped,
        // Its file rules alone may hold (Linux 5.13 to 6.6): said apart, so
        // that an app's worker, which needs no more where it has no
        // socket, is never taken for one on a kernel without Landlock.
        Err(why) if restrict_files(&policy).is_ok() && filtered().is_ok() => {
            say!("this kernel cannot confine programs with Landlock ({why}); its file rules hold");
            return FILES_ONLY;
        }
        Err(why) => {
            say!("this kernel cannot confine programs with Landlock ({why})");
            return 1;
        }
    };
    if let Err(why) = filtered() {
        say!("this kernel cannot filter system calls with seccomp ({why}), so sockets cannot be restricted");
        return 1;
    }
    say!(
        "Landlock and seccomp confine programs: files, TCP and every other socket{}",
        if scoped {
            ", abstract sockets and signals"
        } else {
            " (this kernel cannot scope abstract sockets and signals)"
        }
    );
    0
}

/// Applies the strictest filter and checks that a UDP socket is refused.
fn filter_holds() -> Result<(), String> {
    seccomp::apply(Sockets::None)?;
    match std::net::UdpSocket::bind(("127.0.0.1", 0)) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Ok(()),
        Err(e) => Err(format!("a socket was refused with an unexpected error: {e}")),
        Ok(_) => Err("a UDP socket was still allowed".into()),
    }
}

/// Applies `policy`'s Landlock rules to the calling process (`no_new_privs`
/// with them). Returns whether the scopes (ABI 6) were enforced too.
pub(crate) fn restrict(policy: &Policy) -> Result<bool, String> {
    restrict_with(policy, true)
}

/// [`restrict`] on a kernel whose Landlock has no TCP rules (ABI < 4,
/// before Linux 6.7): the file rules alone — ABI 1 required, what ABI 2 and
/// 3 add (links and renames across folders, truncation) where the kernel
/// has them. Whatever the policy's ports, TCP is not held by Landlock then.
pub(crate) fn restrict_files(policy: &Policy) -> Result<bool, String> {
    restrict_with(policy, false)
}

/// Whether this kernel's Landlock has its TCP rules (ABI 4). Debug builds
/// only: `AUTOAPP_FAULT=landlock-without-tcp` plays a kernel without them.
pub(crate) fn has_tcp_rules() -> bool {
    if fault_is("landlock-without-tcp") {
        return false;
    }
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessNet::from_all(ABI::V4))
        .and_then(|r| r.create())
        .is_ok()
}

fn restrict_with(policy: &Policy, tcp: bool) -> Result<bool, String> {
    let abi = if tcp { ABI::V4 } else { ABI::V3 };
    let err = |e: landlock::RulesetError| e.to_string();
    let ruleset = Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
    let ruleset = match tcp {
        true => ruleset
            .handle_access(AccessFs::from_all(abi))
            .map_err(err)?
            .handle_access(AccessNet::from_all(abi))
            .map_err(err)?,
        false => ruleset
            .handle_access(AccessFs::from_all(ABI::V1))
            .map_err(err)?
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(abi))
            .map_err(err)?,
    };
    let ruleset = ruleset.set_compatibility(CompatLevel::BestEffort).scope(Scope::from_all(ABI::V6)).map_err(err)?;
    let mut created = ruleset.create().map_err(err)?;
    let read: Vec<&Path> =
        policy.system.paths().into_iter().map(Path::new).chain(policy.read.iter().map(PathBuf::as_path)).collect();
    let reads = match &policy.execute {
        None => AccessFs::from_read(abi),
        Some(_) => AccessFs::ReadFile | AccessFs::ReadDir,
    };
    created = created.add_rules(path_beneath_rules(read, reads)).map_err(err)?;
    if let Some(execute) = &policy.execute {
        created = created.add_rules(path_beneath_rules(execute, AccessFs::from_read(abi))).map_err(err)?;
    }
    created = created.add_rules(path_beneath_rules(&policy.list, AccessFs::ReadDir)).map_err(err)?;
    let writes = match &policy.execute {
        None => AccessFs::from_all(abi),
        Some(_) => {
            AccessFs::ReadFile
                | AccessFs::ReadDir
                | AccessFs::WriteFile
                | AccessFs::Truncate
                | AccessFs::MakeReg
                | AccessFs::MakeDir
                | AccessFs::RemoveFile
                | AccessFs::RemoveDir
        }
    };
    created = created.add_rules(path_beneath_rules(&policy.write, writes)).map_err(err)?;
    for port in policy.connect_ports.iter().filter(|_| tcp) {
        created = created.add_rule(NetPort::new(*port, AccessNet::ConnectTcp)).map_err(err)?;
    }
    let status = created.restrict_self().map_err(err)?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(true),
        RulesetStatus::PartiallyEnforced => Ok(false),
        RulesetStatus::NotEnforced => Err("Landlock is not enabled in this kernel".into()),
    }
}

/// Gives up every capability for good, when there are any (the host runs as
/// root): emptied from the bounding set first, so that no program it runs
/// gets them back on `exec`, then from the thread's own sets. Without them a
/// confined program run as root is held like anyone's: it cannot read the
/// host's `/proc/<pid>/environ` (the host is not dumpable), nor use what
/// Landlock does not govern.
pub(crate) fn drop_capabilities() -> Result<(), String> {
    use rustix::thread::{CapabilitySet, CapabilitySets};
    let held = rustix::thread::capabilities(None).map_err(|e| format!("cannot read the capabilities: {e}"))?;
    if held.permitted.is_empty() && held.effective.is_empty() && held.inheritable.is_empty() {
        return Ok(());
    }
    for bit in 0..64 {
        let Some(cap) = CapabilitySet::from_bits(1 << bit) else { continue };
        if rustix::thread::capability_is_in_bounding_set(cap).unwrap_or(false) {
            rustix::thread::remove_capability_from_bounding_set(cap)
                .map_err(|e| format!("cannot drop a capability from the bounding set: {e}"))?;
        }
    }
    let none = CapabilitySets {
        effective: CapabilitySet::empty(),
        permitted: CapabilitySet::empty(),
        inheritable: CapabilitySet::empty(),
    };
    rustix::thread::set_capabilities(None, none).map_err(|e| format!("cannot drop the capabilities: {e}"))
}

/// Sets `resource` to `value`, or to the hard limit already in place when
/// that is lower (a process cannot raise it).
pub(crate) fn limit(resource: rustix::process::Resource, value: u64) -> Result<(), String> {
    let hard = rustix::process::getrlimit(resource).maximum;
    let value = hard.map_or(value, |h| value.min(h));
    let r = rustix::process::Rlimit { current: Some(value), maximum: Some(value) };
    rustix::process::setrlimit(resource, r).map_err(|e| format!("cannot set a resource limit: {e}"))
}

/// Marks every descriptor from 3 up close-on-exec. Whoever started this
/// process may have left descriptors open without that flag (a shell's
/// `7<file`, a parent's socket); each would pass to every process this one
/// starts — a worker, a build's steps, a granted program — past every rule
/// of their confinement, which governs what they open, not what they hold.
/// Called first by every `autoapp` process: what it starts gets only what
/// it gives on purpose (its standard streams, a worker's socket).
pub fn inherit_nothing() {
    if range(3, CloseRange::OnExec) {
        return;
    }
    // Before Linux 5.11: each descriptor this process holds.
    on_exec_each(held_descriptors().filter(|fd| *fd >= 3));
}

fn on_exec_each(fds: impl Iterator<Item = i32>) {
    for fd in fds {
        // SAFETY: only sets a flag on a descriptor number; one that is
        // not open fails with EBADF, which is ignored.
        #[allow(unsafe_code)]
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

/// Closes every descriptor from `from` up: what an app's worker holds of
/// what its parent left open, before it reads anything an app wrote.
/// Nothing in this process holds them yet (it has only begun).
pub fn close_inherited(from: u32) {
    if range(from, CloseRange::Close) {
        return;
    }
    for fd in held_descriptors().filter(|fd| u32::try_from(*fd).is_ok_and(|fd| fd >= from)) {
        // SAFETY: called before anything of this process opened a
        // descriptor it means to keep (see above); closing a number that
        // is not open fails with EBADF, which is ignored.
        #[allow(unsafe_code)]
        unsafe {
            libc::close(fd);
        }
    }
}

enum CloseRange {
    OnExec,
    Close,
}

/// `close_range(from, ~0, flags)`; false where the kernel has no such call.
fn range(from: u32, how: CloseRange) -> bool {
    let flags = match how {
        CloseRange::OnExec => libc::CLOSE_RANGE_CLOEXEC,
        CloseRange::Close => 0,
    };
    // SAFETY: the system call takes three integers and touches no memory of
    // this process; it only flags or closes descriptors (see the callers).
    #[allow(unsafe_code)]
    let rc = unsafe { libc::syscall(libc::SYS_close_range, from, u32::MAX, flags) };
    rc == 0
}

/// The descriptors this process holds, as `/proc/self/fd` lists them (the
/// listing's own among them), gathered before any is changed.
fn held_descriptors() -> impl Iterator<Item = i32> {
    let held: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    held.into_iter()
}

/// The policy, the program and its arguments of `<policy-json> -- <program> <args>`.
fn parse_args(args: &[String]) -> Result<(Policy, &str, &[String]), String> {
    let (Some(policy), Some(sep), Some(program)) = (args.first(), args.get(1), args.get(2)) else {
        return Err("__confined needs a policy, `--` and a program".into());
    };
    if sep != "--" {
        return Err("__confined needs `--` before the program".into());
    }
    let policy: Policy =
        serde_json::from_str(policy).map_err(|e| format!("the confinement policy is malformed ({e})"))?;
    Ok((policy, program, &args[3..]))
}

/// `autoapp __confined <policy-json> -- <program> <args>`: the supervisor
/// ([`supervise`]). Returns the program's exit status, or one of
/// [`CANNOT_CONFINE`], [`PAST_DEADLINE`], [`STOPPED`].
pub fn confined_main(args: &[String]) -> i32 {
    let (policy, _, _) = match parse_args(args) {
        Ok(parsed) => parsed,
        Err(why) => {
            tell!("autoapp: {why}");
            return CANNOT_CONFINE;
        }
    };
    supervise::run(policy.wall_secs, args)
}

/// `autoapp __confined-exec <policy-json> -- <program> <args>`: confines
/// itself, then becomes the program. Returns only when it could not.
pub fn exec_main(args: &[String]) -> i32 {
    use std::os::unix::process::CommandExt as _;
    let (policy, program, rest) = match parse_args(args) {
        Ok(parsed) => parsed,
        Err(why) => {
            tell!("autoapp: {why}");
            return CANNOT_CONFINE;
        }
    };
    // A session of its own: no controlling terminal to read or signal.
    let _ = rustix::process::setsid();
    if let Err(why) = drop_capabilities() {
        tell!("autoapp: the program was not run: it could not be confined ({why})");
        return CANNOT_CONFINE;
    }
    let limits = [
        (rustix::process::Resource::Cpu, policy.cpu_secs),
        (rustix::process::Resource::As, policy.address_space_bytes),
        (rustix::process::Resource::Fsize, policy.file_size_bytes),
        (rustix::process::Resource::Nproc, policy.processes),
        (rustix::process::Resource::Core, 0),
    ];
    for (resource, value) in limits {
        if let Err(e) = limit(resource, value) {
            tell!("autoapp: {e}");
            return CANNOT_CONFINE;
        }
    }
    if !policy.unconfined {
        if let Err(why) = restrict(&policy) {
            tell!("autoapp: the program was not run: it could not be confined ({why})");
            return CANNOT_CONFINE;
        }
        if let Err(why) = seccomp::apply(policy.sockets) {
            tell!("autoapp: the program was not run: it could not be confined ({why})");
            return CANNOT_CONFINE;
        }
    } else {
        // The person's choice skips Landlock; the filter holds where it can.
        let _ = seccomp::apply(policy.sockets);
    }
    let e = std::process::Command::new(program).args(rest).env_clear().envs(policy.env.iter().cloned()).exec();
    tell!("autoapp: the program could not start ({e})");
    127
}

/// Whether `argv` fits the grant's argument `pattern`: the same number of
/// arguments, each equal to the pattern's, where `*` is one free argument
/// that may not start with `-`.
pub fn argv_fits(pattern: &[String], argv: &[String]) -> bool {
    pattern.len() == argv.len()
        && pattern.iter().zip(argv).all(|(p, a)| if p == "*" { !a.starts_with('-') } else { p == a })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn a_descriptor_left_without_close_on_exec_gets_it_where_the_kernel_has_no_close_range() {
        use std::os::fd::AsFd as _;
        use std::os::fd::AsRawFd as _;
        let file = tempfile::tempfile().unwrap();
        rustix::io::fcntl_setfd(file.as_fd(), rustix::io::FdFlags::empty()).unwrap();
        assert!(!rustix::io::fcntl_getfd(file.as_fd()).unwrap().contains(rustix::io::FdFlags::CLOEXEC));
        let listed: Vec<i32> = held_descriptors().collect();
        assert!(listed.contains(&file.as_raw_fd()), "{listed:?}");
        on_exec_each(listed.into_iter().filter(|fd| *fd == file.as_raw_fd()));
        assert!(rustix::io::fcntl_getfd(file.as_fd()).unwrap().contains(rustix::io::FdFlags::CLOEXEC));
    }

    #[test]
    fn an_argv_fits_its_pattern_or_not() {
        let p = s(&["--from=markdown", "--to=html", "*"]);
        assert!(argv_fits(&p, &s(&["--from=markdown", "--to=html", "notes.md"])));
        assert!(
            !argv_fits(&p, &s(&["--from=markdown", "--to=html", "--lua-filter=x.lua"])),
            "a free argument may not be an option"
        );
        assert!(!argv_fits(&p, &s(&["--from=markdown", "--to=html"])));
        assert!(!argv_fits(&p, &s(&["--from=markdown", "--to=html", "a", "b"])));
        assert!(!argv_fits(&p, &s(&["--from=html", "--to=html", "a"])));
    }
}
