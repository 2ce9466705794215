//! An app's worker: the process its calls run in, confined before it reads
//! anything an app wrote, so that a bug in wasmtime, SQLite or the host's own
//! code that lets a guest run native code costs that app's data, not the
//! person's account (`docs/security.md`, "When the runtime itself fails").
//!
//! A worker is `autoapp __worker <policy> serve`, started by the launcher's
//! workers ([`pool`]) — and by `autoapp call`, which runs its one call
//! through a pool of its own. Its policy is computed from the app's release,
//! grants and route ([`reach`]) by the process that starts it. The worker,
//! from its first instruction and before it makes a thread ([`confine`]):
//! gives up every capability, applies Landlock (the policy's files, no
//! execution but what it names, no TCP port but a granted program's) and the
//! worker's system-call filter (`confine::seccomp::apply_worker`: no socket
//! unless a granted program needs one, no `ptrace`, no namespace, no mount,
//! no change of identity), is not dumpable, and only then reads its start
//! and its calls on its standard input, bounded ([`serve`]).
//!
//! It holds no socket and no key (issue 72, rule 1): an external call's
//! requests are handed to its launcher over the channel, which sends each
//! through the call's filter with the person's keys and gives back the
//! answer, redacted (`caps::network::relay`). What it may not reach its
//! launcher tells it or does for it: how programs are contained, the grants
//! of an external call, the activation's first write, and compiled code the
//! cache lacks.

pub mod pool;
pub mod reach;
pub mod serve;

use crate::apps::{Apps, Target};
use crate::caps::confine::{self, Policy};
use crate::config::Config;
use crate::gate::Caller;
use crate::manifest::AppId;
use crate::root::Root;

/// The hidden command a worker runs as.
pub const COMMAND: &str = "__worker";

/// The word after `serve` that says its launcher gave it its app's socket
/// as descriptor 3 (`pool::SITE_FD`); without it, descriptor 3 is closed.
pub(crate) const SITE: &str = "site";

/// The most values what a worker says (a line to its launcher) may make
/// parsed, counted before it is: an app's answer's most
/// ([`MAX_ANSWER_VALUES`](crate::apps::MAX_ANSWER_VALUES)) and its
/// wrapping. An honest worker never says more; a worker taken by an escape
/// could otherwise make the process that reads it hold 64 MiB of text at 16
/// to 32 times its size, once for each call it answers.
pub(crate) const MAX_SAID_VALUES: usize = crate::apps::MAX_ANSWER_VALUES + 4096;

/// Calls `route` of `app` (its active release, or with `preview` a preview's)
/// with `input` as the person, on the command line's channel: through the
/// gate here, run in a worker confined to the app (a pool of this process's
/// own, ended before it answers). The error is the sentence for the person.
pub fn call(
    root: &Root,
    app: &AppId,
    preview: Option<&str>,
    route: &str,
    input: &str,
) -> Result<serde_json::Value, String> {
    let config = Config::load(root.dir()).map_err(|e| format!("{e:#}"))?;
    let apps = std::sync::Arc::new(Apps::new(root.clone(), &config).map_err(|e| format!("{e:#}"))?);
    let workers = pool::Workers::for_one_command(root.clone(), config).map_err(|e| format!("{e:#}"))?;
    apps.run_elsewhere(std::sync::Arc::new(workers.clone()));
    let target = match preview {
        None => Target::Active,
        Some("") => Target::Preview(None),
        Some(p) => Target::Preview(Some(p.to_string())),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the call ({e})"))?;
    let answered = runtime.block_on(async {
        workers.compile_with(&apps);
        let answered = apps.call_at(&Caller::command_line(), app, &target, route, input).await;
        // Its worker ends (its last rows and log lines written) before the
        // call is answered.
        workers.stop_all(std::time::Duration::from_secs(10)).await;
        answered
    });
    drop(apps);
    answered.map(|a| a.output).map_err(|e| bounded(e.message))
}

/// This kernel's own answer that it cannot confine (no Landlock, or the
/// person turned it off): the only case where a worker runs without it —
/// never because confining failed for another reason, nor when the probe
/// could not run (`Support::answered`).
fn none_here(config: &Config) -> Option<confine::Support> {
    // (Where only Landlock's file rules hold, a worker holds with them.)
    Some(confine::Support::here(config)).filter(|s| s.answered && !s.enforced && !s.files)
}

/// The most of a worker's error said to the person.
const MAX_ERROR: usize = 16 << 10;

/// A worker's error, cut at [`MAX_ERROR`] bytes (on a character's boundary).
fn bounded(mut message: String) -> String {
    if message.len() > MAX_ERROR {
        let mut end = MAX_ERROR;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str(" […]");
    }
    message
}

/// Makes what a worker of `app` writes and cannot make itself (`write`),
/// and its app's folder of compiled code, which it reads: a Landlock rule
/// names only what exists, and the code of a release built later is
/// compiled into that folder (the cache may also have been emptied since
/// the policy was made).
fn folders_made<'a>(root: &Root, app: &AppId, write: impl Iterator<Item = &'a std::path::PathBuf>) {
    for dir in write {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::create_dir_all(root.compiled_of(app));
}

/// The command that starts a worker of the app at `paths` with `policy`:
/// an empty environment but for what it needs, its standard streams piped.
fn command(me: &std::path::Path, paths: &crate::root::AppPaths, policy: &str) -> std::process::Command {
    let mut command = std::process::Command::new(me);
    command
        .arg(COMMAND)
        .arg(policy)
        .env_clear()
        // SQLite's temporary files (a large sort) go where the worker writes.
        .env("SQLITE_TMPDIR", paths.data())
        // Its log lines are read by its parent, which escapes them: no colour.
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(log) = std::env::var_os("AUTOAPP_LOG") {
        command.env("AUTOAPP_LOG", log);
    }
    // Debug builds only: a test's fault and pause points reach the worker.
    if cfg!(debug_assertions) {
        for name in ["AUTOAPP_FAULT", "AUTOAPP_PAUSE", "AUTOAPP_PAUSE_FILE", "AUTOAPP_SECCOMP_LOG"] {
            if let Some(v) = std::env::var_os(name) {
                command.env(name, v);
            }
        }
    }
    command
}

/// `autoapp __worker <policy> serve [site]`: confines itself, then serves
/// its launcher ([`serve`]). `tracing` is how the binary starts its log
/// (after confinement: it reads the environment its launcher made); `front`,
/// how it serves its app's own server.
pub fn main(args: &[String], tracing: fn(), front: serve::Front) -> i32 {
    let policy: Result<Policy, String> = match args.first() {
        Some(p) => serde_json::from_str(p).map_err(|e| format!("the worker's policy is malformed ({e})")),
        None => Err("a worker needs its policy".to_string()),
    };
    if args.get(1).is_none_or(|a| a != "serve") {
        crate::tell!("autoapp: a worker is started by its launcher (`{COMMAND} <policy> serve`)");
        return 2;
    }
    // It holds nothing its launcher did not give it on purpose: its standard
    // streams, and its app's socket as descriptor 3 when it serves a site.
    let site = args.get(2).is_some_and(|a| a == SITE);
    confine::close_inherited(if site { 4 } else { 3 });
    // A session and process group of its own: no controlling terminal to
    // type into, and one group its launcher ends whole.
    let _ = rustix::process::setsid();
    // Its own page map, opened while it may (no thread is made).
    crate::runtime::before_confinement();
    let confined = policy.and_then(|p| confine(&p).map(|held| (held, p.sockets)));
    let held = match confined {
        Ok((held, sockets)) => {
            if held == Held::Files && sockets != confine::Sockets::None {
                tell!(
                    "autoapp: this kernel's Landlock has no TCP rules (Linux 6.7 adds them): the call's files are confined, the ports its programs may connect to are not"
                );
            }
            held
        }
        Err(why) => {
            serve::unconfinable(why);
            return confine::CANNOT_CONFINE;
        }
    };
    tracing();
    serve::main(held, front)
}

/// How a worker confined as `held` contains its programs: as `explain`
/// says, never with Landlock where the person turned it off.
fn containment_of(held: Held, config: &Config) -> crate::caps::spawn::Containment {
    if config.landlock == crate::config::Landlock::Off {
        return crate::caps::spawn::Containment::of(&confine::Support::turned_off(), config);
    }
    match held {
        Held::Whole => crate::caps::spawn::Containment::Landlock,
        // What `confine::probe` finds on such a kernel: programs need the TCP
        // rules too.
        Held::Files if config.spawn_unconfined => crate::caps::spawn::Containment::Unconfined,
        Held::Files => crate::caps::spawn::Containment::Unavailable(
            "this kernel's Landlock has no TCP rules (Linux 6.7 adds them)".into(),
        ),
        Held::Filter => crate::caps::spawn::Containment::Unavailable("this process is not confined".into()),
    }
}

/// Confines this process for good, before it has a second thread: no
/// capability, no core file, not dumpable, Landlock (unless the policy is
/// `unconfined`: the kernel has none, said by the parent) and the worker's
/// system-call filter.
pub fn confine(policy: &Policy) -> Result<Held, String> {
    // Landlock holds a thread and what it starts: every thread must be made
    // after it. The filter is applied to all (TSYNC), but the rule is one.
    let threads = std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0);
    if threads > 1 {
        return Err(format!("it had {threads} threads before it was confined"));
    }
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    // It ends with the process that started it: nobody waits for its answer.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    confine::drop_capabilities()?;
    confine::limit(rustix::process::Resource::Core, 0)?;
    if policy.unconfined {
        let _ = confine::seccomp::apply_worker(policy.sockets, runs_programs(policy));
        return Ok(Held::Filter);
    }
    // Debug builds only: a test plays a kernel without the filter (as the
    // kernel probe does), or a worker that fails to confine itself on a
    // kernel that can.
    if confine::fault_is("no-seccomp") || confine::fault_is("worker-unconfinable") {
        return Err("a test plays a process that cannot be confined".into());
    }
    // Where Landlock has no TCP rules (before Linux 6.7), its file rules
    // still hold: the filter keeps the sockets, but not which ports.
    let held = match confine::has_tcp_rules() {
        true => confine::restrict(policy).map(|_| Held::Whole)?,
        false => confine::restrict_files(policy).map(|_| Held::Files)?,
    };
    confine::seccomp::apply_worker(policy.sockets, runs_programs(policy))?;
    Ok(held)
}

/// Whether a worker of `policy` may start a program (granted to its app):
/// then the programs inherit its filters, so it has no allow-list.
fn runs_programs(policy: &Policy) -> bool {
    policy.execute.as_ref().is_none_or(|e| !e.is_empty())
}

/// What a worker's confinement holds on this kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Landlock's file and TCP rules, and the filter.
    Whole,
    /// Landlock's file rules and the filter: TCP to any port its sockets
    /// allow (a kernel before Linux 6.7).
    Files,
    /// The filter alone, where the kernel has it (no Landlock, or the
    /// person turned it off).
    Filter,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workers_error_is_said_whole_up_to_its_bound_and_cut_on_a_character() {
        assert_eq!(bounded("short".into()), "short");
        let long = "é".repeat(MAX_ERROR);
        let cut = bounded(long);
        assert!(cut.len() <= MAX_ERROR + " […]".len(), "{}", cut.len());
        assert!(cut.ends_with(" […]"));
        assert!(cut.trim_end_matches(" […]").chars().all(|c| c == 'é'));
    }
}
