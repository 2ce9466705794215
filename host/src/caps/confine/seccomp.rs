//! The system-call filter beside Landlock: which sockets a confined process
//! may open, and the few calls that would let it step around Landlock or the
//! filter itself.
//!
//! Landlock (ABI 4) decides TCP ports and paths; it says nothing of UDP, of
//! UNIX sockets named by a path, of netlink or of raw sockets. This filter
//! does: `socket(2)` is allowed only for the families and types a
//! [`Sockets`] value names, and everything else answers `EACCES` (an error a
//! program reports, never a crash). Refused outright, whatever the policy:
//! `io_uring` (it can open sockets without `socket(2)`), `bpf`, `ptrace`
//! and reading or writing another process's memory, `perf_event_open`, the
//! kernel keyring, `userfaultfd`, loading kernel modules or kernels, changing
//! mounts, swap, reboot, `setns`, and opening files by handle.
//!
//! The filter is an allow-by-default list of refusals compiled by
//! `seccompiler` (rust-vmm); an app's worker that runs no program is held
//! by an allow-list beside it ([`WORKER_CALLS`]). A call made through another architecture's
//! convention (i386's `int 0x80`) fails its architecture check and ends the
//! process; x86-64's x32 numbers are refused beside the native ones.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};
use serde::{Deserialize, Serialize};

/// Which sockets a confined process may open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sockets {
    /// None at all (a connected pair of UNIX sockets, which reaches nothing
    /// outside the process tree, excepted): a build.
    #[default]
    None,
    /// TCP over IPv4 and IPv6; Landlock decides the ports: a granted program.
    Tcp,
    /// TCP and UDP over IPv4 and IPv6: a build's fetch, whose name lookups
    /// need UDP. No crate code runs in it.
    TcpUdp,
}

/// The error a refused call answers.
const REFUSED: u32 = libc::EACCES as u32;

/// x86-64's x32 convention sets this bit of the system-call number.
#[cfg(target_arch = "x86_64")]
const X32: i64 = 0x4000_0000;

/// The calls refused whatever the policy.
const NEVER: &[i64] = &[
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_bpf,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_perf_event_open,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_userfaultfd,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_setns,
    libc::SYS_name_to_handle_at,
    libc::SYS_open_by_handle_at,
];

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> SeccompCondition {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).expect("a valid condition")
}

fn rule(conditions: Vec<SeccompCondition>) -> SeccompRule {
    SeccompRule::new(conditions).expect("a rule has conditions")
}

/// When `socket(domain, type, protocol)` is refused under `sockets`: each
/// rule is one way to be refused (rules are alternatives, a rule's
/// conditions all hold). An empty list refuses every call.
fn socket_refusals(sockets: Sockets) -> Vec<SeccompRule> {
    let (types, protocols): (&[u64], &[u64]) = match sockets {
        Sockets::None => return Vec::new(),
        Sockets::Tcp => (&[libc::SOCK_STREAM as u64], &[0, libc::IPPROTO_TCP as u64]),
        Sockets::TcpUdp => (
            &[libc::SOCK_STREAM as u64, libc::SOCK_DGRAM as u64],
            &[0, libc::IPPROTO_TCP as u64, libc::IPPROTO_UDP as u64],
        ),
    };
    // Any family but IPv4 and IPv6 (UNIX, netlink, packet, …).
    let mut rules = vec![rule(vec![
        cond(0, SeccompCmpOp::Ne, libc::AF_INET as u64),
        cond(0, SeccompCmpOp::Ne, libc::AF_INET6 as u64),
    ])];
    // Any type but those allowed (raw, sequenced packets, …); the type's low
    // four bits, the rest being SOCK_NONBLOCK and SOCK_CLOEXEC.
    for t in (0..16u64).filter(|t| !types.contains(t)) {
        rules.push(rule(vec![cond(1, SeccompCmpOp::MaskedEq(0xf), t)]));
    }
    // Any protocol but the default, TCP and (where allowed) UDP: SCTP,
    // MPTCP, ICMP "ping" sockets, UDP-Lite.
    rules.push(rule(protocols.iter().map(|p| cond(2, SeccompCmpOp::Ne, *p)).collect()));
    rules
}

/// The refusals of a policy, by system-call number.
fn refusals(sockets: Sockets) -> BTreeMap<i64, Vec<SeccompRule>> {
    let mut map: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    map.insert(libc::SYS_socket, socket_refusals(sockets));
    // A connected pair is allowed only as UNIX sockets.
    map.insert(libc::SYS_socketpair, vec![rule(vec![cond(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)])]);
    for nr in NEVER {
        map.insert(*nr, Vec::new());
    }
    #[cfg(target_arch = "x86_64")]
    {
        let native: Vec<(i64, Vec<SeccompRule>)> = map.iter().map(|(nr, r)| (*nr, r.clone())).collect();
        for (nr, rules) in native {
            map.insert(nr | X32, rules);
        }
    }
    map
}

/// The compiled filter of `sockets`.
pub fn program(sockets: Sockets) -> Result<BpfProgram, String> {
    compiled(refusals(sockets), REFUSED)
}

/// `refusals` compiled for this machine, each answering `errno`.
fn compiled(refusals: BTreeMap<i64, Vec<SeccompRule>>, errno: u32) -> Result<BpfProgram, String> {
    let arch = std::env::consts::ARCH.try_into().map_err(|e| format!("{e:?}"))?;
    let filter = SeccompFilter::new(refusals, SeccompAction::Allow, SeccompAction::Errno(errno), arch)
        .map_err(|e| e.to_string())?;
    filter.try_into().map_err(|e: seccompiler::BackendError| e.to_string())
}

/// The namespaces a worker may not make: a new user namespace would give it
/// capabilities inside, and the others are what a way out starts with.
const NEW_NAMESPACES: [u64; 7] = [
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// What an app's worker is refused beyond a policy's sockets and the calls
/// refused to everything: a namespace of its own (`unshare`, `clone` with a
/// `CLONE_NEW*` flag), `chroot`, changing its identity, and leaving its
/// session or process group (`setsid`, `setpgid`).
fn worker_refusals(sockets: Sockets) -> BTreeMap<i64, Vec<SeccompRule>> {
    let mut map = refusals(sockets);
    let mut more: Vec<(i64, Vec<SeccompRule>)> = vec![
        (libc::SYS_unshare, Vec::new()),
        // One rule per flag: a call with any of them is refused.
        (libc::SYS_clone, NEW_NAMESPACES.iter().map(|f| rule(vec![cond(0, SeccompCmpOp::MaskedEq(*f), *f)])).collect()),
        (libc::SYS_chroot, Vec::new()),
        // What it starts stays in its session and process group, which its
        // parent ends whole when the call is over.
        (libc::SYS_setsid, Vec::new()),
        (libc::SYS_setpgid, Vec::new()),
        (libc::SYS_setuid, Vec::new()),
        (libc::SYS_setgid, Vec::new()),
        (libc::SYS_setreuid, Vec::new()),
        (libc::SYS_setregid, Vec::new()),
        (libc::SYS_setresuid, Vec::new()),
        (libc::SYS_setresgid, Vec::new()),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        let x32: Vec<(i64, Vec<SeccompRule>)> = more.iter().map(|(nr, r)| (*nr | X32, r.clone())).collect();
        more.extend(x32);
        // x32's own numbers (512–547: its `ptrace`, `execve`,
        // `process_vm_readv`, `ioctl`, …), which no native number mirrors:
        // a worker is a native process and uses none of them.
        more.extend(X32_OWN.map(|nr| (nr | X32, Vec::new())));
    }
    map.extend(more);
    map
}

/// The system calls x32 numbers apart from the native ones.
#[cfg(target_arch = "x86_64")]
const X32_OWN: std::ops::RangeInclusive<i64> = 512..=547;

/// The system calls a worker that runs no program makes: its runtime
/// (threads, memory, signals for traps, timers), its store (files, locks,
/// syncs), its server and an external route's connections (sockets, which
/// the other filter and Landlock narrow), the active pointer's watch. Not
/// listed, so refused: starting a program (`execve`, `fork`), signalling or
/// waiting for another process, namespaces and mounts, identity, `ptrace`,
/// the kernel's keyring, modules, BPF, `io_uring` — everything a worker
/// does not need. Some are allowed only with arguments that keep them to
/// the worker itself ([`worker_allowed`]: `clone` of threads alone, no
/// owner for a descriptor's signals, `tgkill`, `setpriority` and
/// `prlimit64` on itself).
const WORKER_CALLS: &[i64] = &[
    // Files and folders.
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_openat,
    // The guest's granted folders, opened beneath their root (cap-std).
    libc::SYS_openat2,
    libc::SYS_close,
    libc::SYS_close_range,
    libc::SYS_lseek,
    libc::SYS_fstat,
    libc::SYS_newfstatat,
    libc::SYS_statx,
    libc::SYS_statfs,
    libc::SYS_fstatfs,
    libc::SYS_fcntl,
    libc::SYS_ioctl,
    libc::SYS_flock,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_ftruncate,
    libc::SYS_fallocate,
    // What WASI gives a guest on its granted folders beside reads and
    // writes: advice, and a file's times (Python's `shutil.copy2` sets them).
    libc::SYS_fadvise64,
    libc::SYS_utimensat,
    // SQLite gives a new journal or log its database's owner (a no-op but
    // for root, which has given up the capability to change it).
    libc::SYS_fchown,
    libc::SYS_unlinkat,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_mkdirat,
    libc::SYS_getdents64,
    libc::SYS_readlinkat,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_getcwd,
    libc::SYS_dup,
    libc::SYS_dup3,
    libc::SYS_pipe2,
    libc::SYS_inotify_init1,
    libc::SYS_inotify_add_watch,
    libc::SYS_inotify_rm_watch,
    // Memory.
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_madvise,
    libc::SYS_mremap,
    libc::SYS_brk,
    libc::SYS_mincore,
    libc::SYS_msync,
    libc::SYS_membarrier,
    libc::SYS_memfd_create,
    // Threads, signals (a trap is a signal), time.
    libc::SYS_clone,
    libc::SYS_clone3,
    libc::SYS_futex,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    libc::SYS_set_tid_address,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_gettid,
    libc::SYS_getpid,
    libc::SYS_getppid,
    // (Its own threads only: `worker_allowed`.)
    libc::SYS_tgkill,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_sigaltstack,
    libc::SYS_restart_syscall,
    libc::SYS_sched_yield,
    libc::SYS_sched_getaffinity,
    libc::SYS_getrandom,
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_clock_nanosleep,
    libc::SYS_nanosleep,
    libc::SYS_gettimeofday,
    libc::SYS_prctl,
    // The instance thread lowers its own priority (only lowering is allowed).
    // (Its own only: `worker_allowed`.)
    libc::SYS_setpriority,
    libc::SYS_prlimit64,
    libc::SYS_getrlimit,
    libc::SYS_uname,
    libc::SYS_sysinfo,
    libc::SYS_getuid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getegid,
    // Waiting on descriptors.
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
    libc::SYS_eventfd2,
    libc::SYS_ppoll,
    libc::SYS_pselect6,
    // Sockets (which ones: the other filter and Landlock).
    libc::SYS_socket,
    libc::SYS_socketpair,
    libc::SYS_connect,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_recvfrom,
    libc::SYS_recvmsg,
    libc::SYS_recvmmsg,
    libc::SYS_sendto,
    libc::SYS_sendmsg,
    libc::SYS_sendmmsg,
    libc::SYS_shutdown,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
    libc::SYS_getsockopt,
    libc::SYS_setsockopt,
    // x86-64's older forms of the same, which its C library still uses.
    #[cfg(target_arch = "x86_64")]
    libc::SYS_arch_prctl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_open,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_stat,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_lstat,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_access,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_readlink,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_unlink,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_rename,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_mkdir,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_getdents,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_pipe,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_dup2,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_poll,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_select,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_epoll_wait,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_epoll_create,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_time,
];

/// The allow-list of a worker that runs no program: [`WORKER_CALLS`], and
/// every other call answers `EPERM` (an error its code reports, never a
/// crash). Debug builds: `AUTOAPP_SECCOMP_LOG=1` lets every call through
/// and has the kernel log the ones the list lacks (`dmesg`, `type=1326`),
/// which is how the list is checked against a run of the tests.
fn worker_allowed(own: u32) -> Result<BpfProgram, String> {
    let mut calls: BTreeMap<i64, Vec<SeccompRule>> = WORKER_CALLS.iter().map(|nr| (*nr, Vec::new())).collect();
    // Argument `arg` (its low 32 bits) compared with `value`.
    let arg = |arg: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(|e| e.to_string())
    };
    // Allowed only when every condition holds.
    let mut only = |nr: i64, conditions: Vec<SeccompCondition>| -> Result<(), String> {
        calls.insert(nr, vec![SeccompRule::new(conditions).map_err(|e| e.to_string())?]);
        Ok(())
    };
    // A signal to one of its own threads only (the runtime's own use): not
    // to another process's thread, whose group id is its pid.
    only(libc::SYS_tgkill, vec![arg(0, SeccompCmpOp::Eq, u64::from(own))?])?;
    // Its own priority and limits only (`who`, `pid` 0): another process's
    // (any of the person's, `PRIO_USER`) it could lower or choke.
    only(
        libc::SYS_setpriority,
        vec![arg(0, SeccompCmpOp::Eq, libc::PRIO_PROCESS as u64)?, arg(1, SeccompCmpOp::Eq, 0)?],
    )?;
    only(libc::SYS_prlimit64, vec![arg(0, SeccompCmpOp::Eq, 0)?])?;
    // No owner for a descriptor's signals (`F_SETOWN`: its `SIGIO`, or any
    // signal `F_SETSIG` names, then goes to another process, checked only
    // by the person's uid — Landlock scopes it only from ABI 6):
    // `F_SETOWN` 8, `F_SETSIG` 10, `F_SETOWN_EX` 15; `FIOSETOWN` and
    // `SIOCSPGRP` (a socket's owner), `FIOASYNC` (its signals on).
    let none_of = |commands: &[u64]| -> Result<Vec<_>, String> {
        commands.iter().map(|c| arg(1, SeccompCmpOp::Ne, *c)).collect()
    };
    only(libc::SYS_fcntl, none_of(&[8, 10, 15])?)?;
    only(libc::SYS_ioctl, none_of(&[0x8901, 0x8902, 0x5452])?)?;
    // Threads only (`CLONE_VM`, `CLONE_SIGHAND`, `CLONE_THREAD`): no
    // process, not even one that runs nothing (a fork bomb, a child left to
    // the launcher with `CLONE_PARENT`).
    let thread = (libc::CLONE_VM | libc::CLONE_SIGHAND | libc::CLONE_THREAD) as u64;
    only(libc::SYS_clone, vec![arg(0, SeccompCmpOp::MaskedEq(thread), thread)?])?;
    let arch = std::env::consts::ARCH.try_into().map_err(|e| format!("{e:?}"))?;
    let otherwise = match cfg!(debug_assertions) && std::env::var_os("AUTOAPP_SECCOMP_LOG").is_some() {
        true => SeccompAction::Log,
        false => SeccompAction::Errno(libc::EPERM as u32),
    };
    let filter = SeccompFilter::new(calls, otherwise, SeccompAction::Allow, arch).map_err(|e| e.to_string())?;
    filter.try_into().map_err(|e: seccompiler::BackendError| e.to_string())
}

/// Applies an app's worker's filters to every thread of the process, for
/// good: the refusals of [`worker_refusals`]; `clone3` answering `ENOSYS`
/// (its flags are behind a pointer a filter cannot read), so that the C
/// library makes threads and processes with `clone`, whose flags the first
/// filter reads; and, for a worker that runs no program (`programs` false),
/// the allow-list of [`WORKER_CALLS`] (a granted program inherits every
/// filter and may need any call; its worker keeps the refusals alone).
pub fn apply_worker(sockets: Sockets, programs: bool) -> Result<(), String> {
    let refused = compiled(worker_refusals(sockets), REFUSED)?;
    let mut clone3 = BTreeMap::new();
    clone3.insert(libc::SYS_clone3, Vec::new());
    #[cfg(target_arch = "x86_64")]
    clone3.insert(libc::SYS_clone3 | X32, Vec::new());
    let clone3 = compiled(clone3, libc::ENOSYS as u32)?;
    let mut filters = vec![refused, clone3];
    if !programs {
        filters.push(worker_allowed(std::process::id())?);
    }
    for program in filters {
        seccompiler::apply_filter_all_threads(&program)
            .map_err(|e| format!("the kernel refused the system-call filter: {e}"))?;
    }
    Ok(())
}

/// Applies the filter of `sockets` to the calling thread (and what it
/// `exec`s), for good.
pub fn apply(sockets: Sockets) -> Result<(), String> {
    let program = program(sockets)?;
    seccompiler::apply_filter(&program).map_err(|e| format!("the kernel refused the system-call filter: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_policy_compiles_and_refuses_more_sockets_the_less_it_allows() {
        for s in [Sockets::None, Sockets::Tcp, Sockets::TcpUdp] {
            assert!(program(s).is_ok(), "{s:?}");
        }
        assert!(socket_refusals(Sockets::None).is_empty(), "no rule: every socket() is refused");
        // Types refused: 15 of 16 for TCP, 14 for TCP and UDP, plus the
        // family rule and the protocol rule.
        assert_eq!(socket_refusals(Sockets::Tcp).len(), 1 + 15 + 1);
        assert_eq!(socket_refusals(Sockets::TcpUdp).len(), 1 + 14 + 1);
    }

    /// Which sockets a thread under `sockets` may open: (family, type,
    /// protocol) → opened.
    fn opened(sockets: Sockets) -> Vec<bool> {
        use rustix::net::{AddressFamily as F, Protocol, SocketType as T, ipproto};
        std::thread::spawn(move || {
            apply(sockets).unwrap();
            let tries: [(F, T, Option<Protocol>); 9] = [
                (F::INET, T::STREAM, None),
                (F::INET6, T::STREAM, Some(ipproto::TCP)),
                (F::INET, T::DGRAM, None),
                (F::INET, T::STREAM, Some(ipproto::SCTP)),
                (F::INET, T::DGRAM, Some(ipproto::ICMP)),
                (F::INET, T::RAW, Some(ipproto::ICMP)),
                (F::UNIX, T::STREAM, None),
                (F::UNIX, T::DGRAM, None),
                (F::NETLINK, T::RAW, None),
            ];
            let mut out: Vec<bool> = tries
                .iter()
                .map(|(f, t, p)| match rustix::net::socket(*f, *t, *p) {
                    Ok(_) => true,
                    Err(e) => {
                        assert_eq!(
                            e,
                            rustix::io::Errno::ACCESS,
                            "{f:?} {t:?} {p:?}: refused by the filter, not the kernel"
                        );
                        false
                    }
                })
                .collect();
            out.push(std::os::unix::net::UnixStream::pair().is_ok());
            out
        })
        .join()
        .unwrap()
    }

    #[test]
    fn a_filtered_thread_opens_only_the_sockets_its_policy_names() {
        //                         tcp4  tcp6  udp    sctp   icmp   raw    unix   unixdg netlink pair
        assert_eq!(opened(Sockets::None), [false, false, false, false, false, false, false, false, false, true]);
        assert_eq!(opened(Sockets::Tcp), [true, true, false, false, false, false, false, false, false, true]);
        assert_eq!(opened(Sockets::TcpUdp), [true, true, true, false, false, false, false, false, false, true]);
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn a_worker_refuses_x32s_own_numbers_and_its_namespaces() {
        let map = worker_refusals(Sockets::None);
        // x32's ptrace, execve and process_vm_readv.
        for nr in [521, 520, 539] {
            assert!(map.get(&(nr | X32)).is_some_and(Vec::is_empty), "{nr}");
        }
        for nr in [libc::SYS_unshare, libc::SYS_setsid, libc::SYS_setpgid, libc::SYS_chroot] {
            assert!(map.get(&nr).is_some_and(Vec::is_empty), "{nr} refused whatever its arguments");
            assert!(map.contains_key(&(nr | X32)), "{nr}");
        }
        assert_eq!(map[&libc::SYS_clone].len(), NEW_NAMESPACES.len(), "one rule per namespace flag");
        assert!(compiled(map, REFUSED).is_ok());
    }

    #[test]
    fn every_refusal_has_its_x32_twin() {
        let map = refusals(Sockets::None);
        for nr in [libc::SYS_socket, libc::SYS_io_uring_setup, libc::SYS_bpf] {
            assert!(map.contains_key(&nr));
            #[cfg(target_arch = "x86_64")]
            assert!(map.contains_key(&(nr | X32)), "{nr}");
        }
    }
}
