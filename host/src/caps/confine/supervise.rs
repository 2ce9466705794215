//! The supervisor: the first stage of `autoapp __confined`, which outlives
//! nothing it started.
//!
//! It makes itself the **child subreaper** of everything below it, so a
//! process whose parent died — a daemon's double fork, a `setsid` child left
//! behind — becomes its child rather than init's, and it can always find all
//! of them: they are the processes whose chain of parents leads to it. It asks
//! the kernel for `SIGTERM` when the process that started it dies, and it
//! treats `SIGTERM`, `SIGINT` and `SIGHUP` as "stop". Whichever comes first —
//! the program's own end, its wall-clock deadline, a stop — ends every
//! descendant with `SIGKILL` and reaps it before the supervisor exits, so
//! when the host sees the supervisor gone, the whole tree is gone.
//!
//! A confined program cannot signal its supervisor where the kernel scopes
//! signals to the sandbox (Landlock ABI 6); on an older kernel it could kill
//! it and leave orphans to init — `explain`'s containment line says which.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use rustix::process::{Pid, Signal, WaitOptions};

use super::{PAST_DEADLINE, STOPPED};

/// Taken by whichever ends the supervision first; the others wait for the
/// process to exit.
static FINISHING: Mutex<()> = Mutex::new(());

/// The program's process (the second stage, which leads its own session and
/// process group), once started.
static MAIN: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Supervises `autoapp __confined-exec <args>`, ending it at `wall_secs`.
pub fn run(wall_secs: Option<u64>, args: &[String]) -> i32 {
    let me = rustix::process::getpid();
    let parent = rustix::process::getppid();
    if let Err(e) = rustix::process::set_child_subreaper(Some(me)) {
        tell!("autoapp: the program was not run: it could not be supervised ({e})");
        return super::CANNOT_CONFINE;
    }
    // Told when the host dies; and if it died already, nobody waits for us.
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::TERM));
    if rustix::process::getppid() != parent {
        return STOPPED;
    }
    let signals = match signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ]) {
        Ok(s) => s,
        Err(e) => {
            tell!("autoapp: the program was not run: it could not be supervised ({e})");
            return super::CANNOT_CONFINE;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            tell!("autoapp: the program was not run: the autoapp binary cannot be found ({e})");
            return super::CANNOT_CONFINE;
        }
    };
    let child = match std::process::Command::new(exe).arg("__confined-exec").args(args).spawn() {
        Ok(c) => c,
        Err(e) => {
            tell!("autoapp: the program could not start ({e})");
            return super::CANNOT_CONFINE;
        }
    };
    let main = Pid::from_raw(child.id() as i32).expect("a child has a pid");
    MAIN.store(main.as_raw_nonzero().get(), std::sync::atomic::Ordering::SeqCst);
    std::thread::spawn(move || {
        let mut signals = signals;
        if signals.forever().next().is_some() {
            finish(STOPPED);
        }
    });
    if let Some(secs) = wall_secs {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(secs));
            let _held = FINISHING.lock();
            tell!("autoapp: it ran past its deadline of {secs} s and was stopped, with every process it started");
            end_all();
            std::process::exit(PAST_DEADLINE);
        });
    }
    // Reap until the program itself ends.
    loop {
        match rustix::process::wait(WaitOptions::empty()) {
            Ok(Some((pid, status))) if pid == main => {
                let code = status.exit_status().or_else(|| status.terminating_signal().map(|s| 128 + s)).unwrap_or(1);
                finish(code);
            }
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => finish(1),
        }
    }
}

/// Ends every descendant and exits with `code`; only the first caller does.
fn finish(code: i32) -> ! {
    let _held = FINISHING.lock();
    end_all();
    std::process::exit(code)
}

/// Kills every descendant and reaps it, until none is left. Each round kills
/// the program's process group at once (a fork bomb dies with it: the kernel
/// lets no member fork past a group's kill), then every other descendant
/// found in `/proc` (one that left the group: `setsid`, a double fork); a
/// process that forked before it was killed leaves a child that the next
/// round finds (it becomes ours when its parent dies). The supervisor exits
/// only when nothing is left, so nothing is orphaned to init.
fn end_all() {
    let me = rustix::process::getpid();
    let group = Pid::from_raw(MAIN.load(std::sync::atomic::Ordering::SeqCst));
    // A process the kernel cannot end (stuck in a device's driver) is given up
    // on after this long rather than holding the host's call forever.
    let give_up = std::time::Instant::now() + Duration::from_secs(120);
    while std::time::Instant::now() < give_up {
        if let Some(g) = group {
            let _ = rustix::process::kill_process_group(g, Signal::KILL);
        }
        let found = descendants(me);
        for pid in &found {
            let _ = rustix::process::kill_process(*pid, Signal::KILL);
        }
        loop {
            match rustix::process::wait(WaitOptions::NOHANG) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => {
                    // ECHILD: no child of ours is left, dead or alive.
                    if found.is_empty() || descendants(me).is_empty() {
                        return;
                    }
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Every process whose chain of parents leads to `root`, read from `/proc`.
pub(super) fn descendants(root: Pid) -> Vec<Pid> {
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    for entry in entries.filter_map(Result::ok) {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        if let Some(ppid) = parent_in_stat(&stat) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut out = Vec::new();
    let mut stack = vec![root.as_raw_nonzero().get()];
    while let Some(p) = stack.pop() {
        for c in children.get(&p).into_iter().flatten() {
            out.extend(Pid::from_raw(*c));
            stack.push(*c);
        }
    }
    out
}

/// The parent's pid in a `/proc/<pid>/stat` line: the fourth field, after the
/// command name in parentheses (which may hold spaces and parentheses).
fn parent_in_stat(stat: &str) -> Option<i32> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_after_the_last_parenthesis_of_the_name() {
        assert_eq!(parent_in_stat("42 (cargo) S 17 42 42 0"), Some(17));
        assert_eq!(parent_in_stat("43 (a) b) (c) R 9 43 43 0"), Some(9));
        assert_eq!(parent_in_stat("44 (x"), None);
    }

    #[test]
    fn a_child_and_its_child_are_descendants_and_the_test_itself_is_not() {
        let mut child = std::process::Command::new("sh").args(["-c", "sleep 30 & wait"]).spawn().unwrap();
        let me = rustix::process::getpid();
        let sh = Pid::from_raw(child.id() as i32).unwrap();
        let mut found = Vec::new();
        for _ in 0..500 {
            found = descendants(me);
            if found.len() >= 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(found.contains(&sh), "{found:?}");
        assert!(found.len() >= 2, "the shell's sleep too: {found:?}");
        assert!(!found.contains(&me));
        // Only the shell and what it started: the other tests' children are theirs.
        for p in descendants(sh).iter().chain([&sh]) {
            let _ = rustix::process::kill_process(*p, Signal::KILL);
        }
        let _ = child.wait();
    }
}
