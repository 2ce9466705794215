//! An app's worker: the process its calls run in, confined before it reads
//! anything an app wrote, so that a bug in wasmtime, SQLite or the host's own
//! code that lets a guest run native code costs that app's data, not the
//! person's account (`docs/security.md`, "When the runtime itself fails").
//!
//! Its first form serves one call: `autoapp call` starts `autoapp __worker
//! <policy>` with an empty environment and pipes for its standard streams,
//! the policy computed here from the app's release, grants and route
//! ([`reach`]). The worker, from its first instruction and before it makes a
//! thread ([`confine`]): gives up every capability, applies Landlock (the
//! policy's files, no execution but what it names, TCP only to its ports) and
//! the worker's system-call filter (`confine::seccomp::apply_worker`: its
//! sockets, no `ptrace`, no namespace, no mount, no change of identity), is
//! not dumpable, and only then reads the call from its standard input,
//! bounded. What it may not reach its parent reads for it: the configuration,
//! the person's keys of an external route, how programs are contained
//! (`apps::Ahead`). It answers on its standard output, one JSON value,
//! bounded; its log lines come on its standard error and are said through
//! `tell!`. What it may not write its parent writes from the answer: the
//! activation's first write (`apps::note_first_write_of`), and compiled code
//! the cache lacks (the worker reports it; its parent compiles the release,
//! confined, and starts it again once).
//!
//! The channel is the parent's: the worker runs its one call as the person
//! (`Caller::command_line`), because only `autoapp call` starts it.

pub mod pool;
pub mod reach;
pub mod serve;

use std::io::{Read as _, Write as _};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::apps::{Answer, Apps, Target};
use crate::caps::confine::{self, Policy};
use crate::config::Config;
use crate::gate::Caller;
use crate::manifest::{AppId, Effect};
use crate::root::Root;

/// The hidden command a worker runs as.
pub const COMMAND: &str = "__worker";

/// The word after `serve` that says its launcher gave it its app's socket
/// as descriptor 3 (`pool::SITE_FD`); without it, descriptor 3 is closed.
pub(crate) const SITE: &str = "site";

/// The most a call's request may be (its input comes from a command line,
/// at most a few MiB).
const MAX_REQUEST: u64 = 64 << 20;

/// The most a worker's answer may be (read whole, then parsed, by a
/// process that is not confined).
const MAX_REPLY: u64 = 64 << 20;

/// The most values what a worker says (a line to its launcher, an answer to
/// `autoapp call`) may make parsed, counted before it is: an app's answer's
/// most ([`MAX_ANSWER_VALUES`](crate::apps::MAX_ANSWER_VALUES)) and its
/// wrapping. An honest worker never says more; a worker taken by an escape
/// could otherwise make the process that reads it hold 64 MiB of text at 16
/// to 32 times its size, once for each call it answers.
pub(crate) const MAX_SAID_VALUES: usize = crate::apps::MAX_ANSWER_VALUES + 4096;

/// The most of a worker's standard error said to the person.
const MAX_STDERR: u64 = 1 << 20;

/// One call, as its parent sends it.
#[derive(Serialize, Deserialize)]
struct Request {
    root: PathBuf,
    config: Config,
    app: String,
    /// None: the active release; `Some("")`: the newest preview.
    preview: Option<String>,
    /// The release its policy was made for: it runs that one or none.
    release: String,
    route: String,
    input: String,
    /// How its programs are contained, when its parent knows; else by
    /// whether it confined itself.
    containment: Option<crate::caps::spawn::Containment>,
    /// The keys the release declared when its parent read them.
    declared: Vec<crate::caps::secret::SecretCap>,
    keys: Vec<Key>,
}

/// A key given to the worker's network filter; its value is cleared from
/// memory when it is dropped, as a `secrets::Value` is.
#[derive(Serialize, Deserialize)]
struct Key {
    name: String,
    binding: crate::caps::secret::Binding,
    value: String,
}

impl Key {
    /// The key `given` holds, to be sent to a worker.
    fn of(given: &crate::secrets::Given) -> Key {
        Key { name: given.name.clone(), binding: given.binding.clone(), value: given.value.expose().to_string() }
    }

    /// The key as the worker's network filter takes it; its text moves
    /// into a value that is cleared when dropped.
    fn into_given(mut self) -> crate::secrets::Given {
        crate::secrets::Given {
            name: std::mem::take(&mut self.name),
            binding: self.binding.clone(),
            value: crate::secrets::Value::new(std::mem::take(&mut self.value)),
        }
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.value);
    }
}

/// What a worker answers.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Reply {
    Answer(Answer),
    Failed(String),
    /// The release's compiled code is not in the cache.
    NotCompiled,
    /// It could not confine itself: why.
    Unconfinable(String),
}

/// Calls `route` of `app` (its active release, or with `preview` a preview's)
/// with `input`, in a worker confined to the app; on the command line's
/// channel. The error is the sentence for the person.
pub fn call(
    root: &Root,
    app: &AppId,
    preview: Option<&str>,
    route: &str,
    input: &str,
) -> Result<serde_json::Value, String> {
    let config = Config::load(root.dir()).map_err(|e| format!("{e:#}"))?;
    let me = std::env::current_exe().map_err(|e| format!("cannot find the autoapp binary ({e})"))?;
    // Known only when the worker could not confine itself, or the person
    // turned Landlock off: the worker's own confinement is the probe.
    let mut support = (config.landlock == crate::config::Landlock::Off).then(confine::Support::turned_off);
    let mut compiled = false;
    for _ in 0..3 {
        if let Some(s) = support.as_ref().filter(|s| !s.enforced) {
            // Said at every start of a worker: nothing silent about it.
            tell!("autoapp: this call runs in a process of its own without Landlock: {}", s.summary);
        }
        let reach = reach::of(root, app, preview, route, &config, me.clone()).map_err(|e| format!("{e:#}"))?;
        match start(root, app, preview, route, input, &config, &me, support.as_ref(), &reach)? {
            Reply::Answer(answer) => {
                // The worker's words are not trusted for what it may have
                // written: the route's effect is the release's, as found here.
                // (Noting an activation that did not write only makes a
                // rollback ask.)
                if reach.effect.is_some_and(Effect::writes) && !reach.preview {
                    crate::apps::note_first_write_of(root, app, &reach.release);
                    if answer.release != reach.release {
                        crate::apps::note_first_write_of(root, app, &answer.release);
                    }
                }
                return Ok(answer.output);
            }
            Reply::Failed(message) => return Err(bounded(message)),
            Reply::Unconfinable(why) => {
                // Whether this kernel has Landlock at all, asked once: a
                // worker runs without it only where the kernel says there is
                // none, never because confining failed for another reason or
                // the probe could not run.
                match support.is_none().then(|| none_here(&config)).flatten() {
                    Some(none_here) => support = Some(none_here),
                    None => {
                        return Err(format!(
                            "the call was not run: its process could not be confined ({})",
                            bounded(why)
                        ));
                    }
                }
            }
            Reply::NotCompiled if !compiled => {
                // Compiled here (confined, within its budget), then asked again.
                let apps = Apps::new(root.clone(), &config).map_err(|e| format!("{e:#}"))?;
                apps.load_release(app, &reach.release).map_err(|e| format!("{e:#}"))?;
                compiled = true;
            }
            Reply::NotCompiled => break,
        }
    }
    Err(format!("the compiled code of {app}'s release could not be made ready; try again"))
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

/// Starts the worker for one call and reads its answer.
#[allow(clippy::too_many_arguments)]
fn start(
    root: &Root,
    app: &AppId,
    preview: Option<&str>,
    route: &str,
    input: &str,
    config: &Config,
    me: &std::path::Path,
    support: Option<&confine::Support>,
    reach: &reach::Reach,
) -> Result<Reply, String> {
    let (declared, keys) = keys_for(root, app, config, reach)?;
    let request = Request {
        root: root.dir().to_path_buf(),
        config: config.clone(),
        app: app.to_string(),
        preview: preview.map(str::to_string),
        release: reach.release.clone(),
        route: route.to_string(),
        input: input.to_string(),
        containment: support.map(|s| crate::caps::spawn::Containment::of(s, config)),
        declared,
        keys,
    };
    let paths = root.app(app);
    folders_made(root, app, reach.policy.write.iter().filter(|d| d.starts_with(root.dir())));
    let policy = Policy { unconfined: support.is_some_and(|s| !s.enforced), ..reach.policy.clone() };
    let policy =
        serde_json::to_string(&policy).map_err(|e| format!("cannot describe the worker's confinement ({e})"))?;
    let mut command = command(me, &paths, &policy);
    let mut child = command.spawn().map_err(|e| format!("cannot start the app's worker ({e})"))?;
    // It holds the keys: cleared when dropped.
    let bytes =
        zeroize::Zeroizing::new(serde_json::to_vec(&request).map_err(|e| format!("cannot describe the call ({e})"))?);
    drop(request);
    let mut stdin = child.stdin.take().expect("piped");
    // A worker that could not be confined answers without reading it.
    let _ = stdin.write_all(&bytes).and_then(|_| stdin.flush());
    drop(stdin);
    let stderr = child.stderr.take().expect("piped");
    let relay = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.take(MAX_STDERR).read_to_string(&mut text);
        text
    });
    let stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        stdout.take(MAX_REPLY).read_to_end(&mut out).map(|_| out)
    });
    // Whatever the worker started ends with it: its process group (which
    // nothing in it may leave: `setsid` and `setpgid` are refused) is
    // killed once it has exited and before it is reaped, so that its id
    // cannot have been taken by another process meanwhile.
    let pid = rustix::process::Pid::from_child(&child);
    let _ = rustix::process::waitid(
        rustix::process::WaitId::Pid(pid),
        rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOWAIT,
    );
    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    let status = child.wait().map_err(|e| format!("the app's worker was lost ({e})"))?;
    for line in relay.join().unwrap_or_default().lines() {
        tell!("{line}");
    }
    let out = reader
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the reader stopped")))
        .map_err(|e| format!("cannot read the app's worker's answer ({e})"))?;
    if crate::elsewhere::json::values(&out) > MAX_SAID_VALUES {
        return Err(format!("the app's worker's answer holds more than {MAX_SAID_VALUES} values; it was not read"));
    }
    serde_json::from_slice(&out).map_err(|_| match status.code() {
        Some(code) => format!("the app's worker ended without an answer (status {code})"),
        None => "the app's worker was killed before it answered".to_string(),
    })
}

/// Makes what a worker of `app` writes and cannot make itself (`write`),
/// and its app's folder of compiled code, which it reads: a Landlock rule
/// names only what exists, and the code of a release built later is
/// compiled into that folder (the cache may also have been emptied since
/// the policy was made).
fn folders_made<'a>(root: &Root, app: &AppId, write: impl Iterator<Item = &'a PathBuf>) {
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

/// The keys an external call of the reach's release carries, read here
/// (the worker cannot reach the keyring), with what the release declared.
fn keys_for(
    root: &Root,
    app: &AppId,
    config: &Config,
    reach: &reach::Reach,
) -> Result<(Vec<crate::caps::secret::SecretCap>, Vec<Key>), String> {
    let declared = reach.manifest.capabilities.secret.clone();
    if reach.preview || reach.effect != Some(Effect::External) || declared.is_empty() {
        return Ok((declared, Vec::new()));
    }
    let vault = crate::secrets::Vault::of(root.dir(), config.secrets_kept_in).map_err(|e| format!("{e:#}"))?;
    let given = crate::secrets::given(&vault, app, &reach.manifest, &reach.origins).map_err(|e| format!("{e:#}"))?;
    Ok((declared, given.iter().map(Key::of).collect()))
}

/// `autoapp __worker <policy>`: confines itself, reads one call on its
/// standard input, runs it, answers on its standard output. `tracing` is
/// how the binary starts its log (after confinement: it reads the
/// environment the parent made); `front`, how a launcher's worker serves
/// its app's own server.
pub fn main(args: &[String], tracing: fn(), front: serve::Front) -> i32 {
    let policy: Result<Policy, String> = match args.first() {
        Some(p) => serde_json::from_str(p).map_err(|e| format!("the worker's policy is malformed ({e})")),
        None => Err("a worker needs its policy".to_string()),
    };
    let serving = args.get(1).is_some_and(|a| a == "serve");
    // It holds nothing its parent did not give it on purpose: its standard
    // streams, and its app's socket as descriptor 3 when it serves a site.
    let site = serving && args.get(2).is_some_and(|a| a == SITE);
    confine::close_inherited(if site { 4 } else { 3 });
    // A session and process group of its own: no controlling terminal to
    // type into, and one group its parent ends whole.
    let _ = rustix::process::setsid();
    // Its own page map, opened while it may (no thread is made).
    crate::runtime::before_confinement();
    let confined = policy.and_then(|p| confine(&p).map(|held| (held, p.sockets)));
    let held = match confined {
        Ok((held, sockets)) => {
            if held == Held::Files && sockets != confine::Sockets::None {
                tell!(
                    "autoapp: this kernel's Landlock has no TCP rules (Linux 6.7 adds them): the call's files are confined, the ports it may connect to are not"
                );
            }
            held
        }
        Err(why) if serving => {
            serve::unconfinable(why);
            return confine::CANNOT_CONFINE;
        }
        Err(why) => {
            answer(&Reply::Unconfinable(why));
            return confine::CANNOT_CONFINE;
        }
    };
    tracing();
    if serving {
        return serve::main(held, front);
    }
    // It holds the keys: cleared when dropped.
    let mut bytes = zeroize::Zeroizing::new(Vec::new());
    if let Err(e) = std::io::stdin().take(MAX_REQUEST + 1).read_to_end(&mut bytes) {
        answer(&Reply::Failed(format!("the worker could not read its call ({e})")));
        return 1;
    }
    let request: Request = match serde_json::from_slice(&bytes).ok().filter(|_| bytes.len() as u64 <= MAX_REQUEST) {
        Some(r) => r,
        None => {
            answer(&Reply::Failed("the worker's call is malformed".into()));
            return 1;
        }
    };
    drop(bytes);
    let reply = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt.block_on(serve(request, held)),
        Err(e) => Reply::Failed(format!("the worker could not start ({e})")),
    };
    answer(&reply);
    0
}

/// Runs the request's call.
async fn serve(request: Request, held: Held) -> Reply {
    let (root, app) = match (Root::open(&request.root), AppId::parse(&request.app)) {
        (Ok(root), Ok(app)) => (root, app),
        _ => return Reply::Failed("the worker's call names no app of a root".into()),
    };
    // Confined with Landlock and the filter, it contains its programs the
    // same way (what `confine::probe` would have found).
    let containment = request.containment.unwrap_or_else(|| containment_of(held, &request.config));
    let ahead = crate::apps::Ahead {
        release: Some(request.release),
        containment,
        declared: request.declared,
        keys: request.keys.into_iter().map(Key::into_given).collect(),
    };
    let apps = match Apps::confined(root, &request.config, ahead) {
        Ok(apps) => apps,
        Err(e) => return Reply::Failed(format!("{e:#}")),
    };
    let target = match request.preview {
        None => Target::Active,
        Some(p) if p.is_empty() => Target::Preview(None),
        Some(p) => Target::Preview(Some(p)),
    };
    // Debug builds only: a test holds it here (`AUTOAPP_PAUSE=worker:call`).
    crate::release::journal::pause("worker:call");
    let called = apps.call_at(&Caller::command_line(), &app, &target, &request.route, &request.input).await;
    match called {
        Ok(answer) => Reply::Answer(answer),
        Err(e) if e.code_missing => Reply::NotCompiled,
        Err(e) => Reply::Failed(format!("{e:#}")),
    }
}

/// How a worker confined as `held` contains its programs.
fn containment_of(held: Held, config: &Config) -> crate::caps::spawn::Containment {
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

/// Writes the worker's one answer to its standard output: its parent's pipe,
/// never a terminal.
fn answer(reply: &Reply) {
    if let Ok(bytes) = serde_json::to_vec(reply) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(&bytes).and_then(|_| out.flush());
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
