//! The `spawn` capability: running granted programs.
//!
//! Only programs the release declared **and** the person granted, and only in
//! an `external` route. The program is the absolute path resolved when it was
//! granted; the arguments are passed as an array (never through a shell); the
//! environment is empty but for a fixed `PATH` and `LANG`; the working folder
//! is a fresh scratch folder removed afterwards; the process gets its own
//! process group, which is killed whole at the call's deadline; what it prints
//! is capped.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};

use crate::bindings::AppError;
use crate::bindings::app::autoapp::app::spawn::{Host, Output};
use crate::config::Config;
use serde::{Deserialize, Serialize};

use crate::caps::network::Origin;
use crate::problems::Problems;

/// The only environment a spawned program gets.
pub const CHILD_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
pub const CHILD_LANG: &str = "C.UTF-8";

/// How spawned programs are contained, decided once per process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Containment {
    /// Each program confines itself with Landlock before it runs.
    Landlock,
    /// The person set `spawn_unconfined = true`: programs run without Landlock.
    Unconfined,
    /// Programs cannot be confined here, so they do not run; the reason.
    Unavailable(String),
}

impl Containment {
    /// What this machine and the configuration allow: Landlock when the
    /// kernel enforces it (probed with a throwaway child) and the
    /// configuration does not turn it off; else unconfined only if the person
    /// said so (`spawn_unconfined = true`); else programs do not run.
    pub fn decide(config: &crate::config::Config) -> Containment {
        Containment::of(&super::confine::Support::here(config), config)
    }

    /// What `support` and the configuration allow.
    pub fn of(support: &super::confine::Support, config: &crate::config::Config) -> Containment {
        match (support.enforced, config.spawn_unconfined) {
            (true, _) => Containment::Landlock,
            (false, true) => Containment::Unconfined,
            (false, false) => Containment::Unavailable(support.summary.clone()),
        }
    }

    /// One line for `status` and `explain`.
    pub fn describe(&self) -> String {
        match self {
            Containment::Landlock => {
                "confined with Landlock and seccomp (files, TCP ports, no other socket, resource limits)".to_string()
            }
            Containment::Unconfined => "unconfined (spawn_unconfined = true): they run with your rights".to_string(),
            Containment::Unavailable(why) => format!("refused: {why}"),
        }
    }
}

/// A granted program, as one call may run it.
#[derive(Debug, Clone)]
pub struct Program {
    /// The absolute path resolved when it was granted.
    pub path: PathBuf,
    /// The grant's argument pattern, when the manifest fixes one.
    pub pattern: Option<Vec<String>>,
}

/// What an external call may run, and how: decided by [`configure`].
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Program name (as declared) → what was granted.
    programs: BTreeMap<String, Program>,
    /// The most a program's stdout (and its stderr) may be.
    output_max: usize,
    /// Where each run gets a scratch folder of its own.
    scratch_root: PathBuf,
    /// The policy every program runs under (plus its scratch folder).
    policy: super::confine::Policy,
}

/// A program an app asks to run.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SpawnCap {
    /// A program name looked up on `PATH` when granted, or an absolute path.
    pub program: String,
    /// The argument pattern, when the manifest fixes one.
    pub args: Option<Vec<String>>,
}

/// `[capabilities] spawn`: the programs a release asks to run, each a name
/// (looked up on `PATH` when granted) or an absolute path, with an optional
/// argument pattern.
pub fn parse_declared(v: &toml::Value, p: &mut Problems) -> Vec<SpawnCap> {
    let mut out: Vec<SpawnCap> = Vec::new();
    match v.as_array() {
        Some(items) => {
            for item in items {
                let Some(st) = item.as_table() else {
                    p.add("[capabilities] spawn must list tables, like { program = \"git\" }");
                    continue;
                };
                p.unknown_keys(st, "a [capabilities] spawn entry", &["program", "args"]);
                let program = p.string(st, "a [capabilities] spawn entry", "program");
                if let Some(pr) = &program {
                    let ok = !pr.is_empty() && (pr.starts_with('/') || !pr.contains('/')) && !pr.contains('\0');
                    if !ok {
                        p.add(format!("[capabilities] spawn: program `{}` must be a program name (looked up on PATH when granted) or an absolute path", pr.escape_debug()));
                    }
                }
                let args = match st.get("args") {
                    None => None,
                    Some(toml::Value::Array(a)) if a.iter().all(|x| x.is_str()) => {
                        Some(a.iter().map(|x| x.as_str().unwrap_or_default().to_string()).collect())
                    }
                    Some(_) => {
                        p.add("[capabilities] spawn: args must be an array of strings, like [\"--to=html\", \"*\"]");
                        None
                    }
                };
                if let Some(program) = program {
                    out.push(SpawnCap { program, args });
                }
            }
        }
        None => p.add("[capabilities] spawn must be an array of tables"),
    }
    out
}

/// A program the person granted: where it is, and the argument pattern it
/// was granted with. A grant is for the program **and** its pattern: a
/// release that changes the pattern, or drops it, asks anew (issue 51,
/// rule 4), so the pattern the person saw is the one every run checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "SpawnEntry")]
pub struct SpawnGrant {
    /// The absolute path found when granted.
    pub path: PathBuf,
    /// The pattern granted; `None`: any arguments.
    pub args: Option<Vec<String>>,
    /// False for a grant written before the pattern was part of a grant
    /// (`grants.json` held only the path): it fits no release until the
    /// person grants it again, seeing the pattern.
    #[serde(skip)]
    pub recorded: bool,
}

/// A spawn grant as `grants.json` holds it: a path alone (written before
/// patterns were part of a grant), or the path and the pattern.
#[derive(Deserialize)]
#[serde(untagged)]
enum SpawnEntry {
    Path(PathBuf),
    Grant {
        path: PathBuf,
        #[serde(default)]
        args: Option<Vec<String>>,
    },
}

impl From<SpawnEntry> for SpawnGrant {
    fn from(e: SpawnEntry) -> SpawnGrant {
        match e {
            SpawnEntry::Path(path) => SpawnGrant { path, args: None, recorded: false },
            SpawnEntry::Grant { path, args } => SpawnGrant { path, args, recorded: true },
        }
    }
}

impl SpawnGrant {
    /// Whether this grant is for what `declared` asks: its pattern exactly
    /// (the program is the grant's key).
    pub fn fits(&self, declared: &SpawnCap) -> bool {
        self.recorded && self.args == declared.args
    }
}

/// An argument pattern in words: `any arguments`, or `arguments ["log", "*"]`.
pub fn pattern_said(args: &Option<Vec<String>>) -> String {
    match args {
        None => "any arguments".to_string(),
        Some(a) => format!("arguments {}", serde_json::to_string(a).unwrap_or_default()),
    }
}

/// Grants the program `declared` asks for: the absolute path it has now,
/// with the pattern it declares.
pub fn resolve(declared: &SpawnCap) -> anyhow::Result<SpawnGrant> {
    let path = crate::programs::find(&declared.program)?;
    Ok(SpawnGrant { path, args: declared.args.clone(), recorded: true })
}

/// The programs an external call of a release may run: each one the release
/// declares **and** the person granted (the path found when granted, the
/// declared argument pattern); and what each run may touch: the call's
/// folders (`files`), the granted origins' ports (`network`), the
/// configuration's limits; nothing else (see `confine`).
pub fn configure(
    declared: &[SpawnCap],
    granted: &BTreeMap<String, SpawnGrant>,
    folders: &[super::files::Folder],
    origins: &[Origin],
    config: &Config,
    scratch_root: PathBuf,
) -> Plan {
    let programs = declared
        .iter()
        .filter_map(|s| {
            // Granted with this very pattern, or not granted.
            let g = granted.get(&s.program).filter(|g| g.fits(s))?;
            Some((s.program.clone(), Program { path: g.path.clone(), pattern: s.args.clone() }))
        })
        .collect();
    let folders_of = |write: bool| folders.iter().filter(|f| f.write || !write).map(|f| f.host.clone()).collect();
    let mut connect_ports: Vec<u16> = origins.iter().map(|o| o.port).collect();
    connect_ports.sort_unstable();
    connect_ports.dedup();
    // TCP to the granted origins' ports only where there are some; no other
    // socket ever (no UDP, no UNIX socket, no netlink).
    let sockets = if connect_ports.is_empty() { super::confine::Sockets::None } else { super::confine::Sockets::Tcp };
    let policy = super::confine::Policy {
        read: folders_of(false),
        write: folders_of(true),
        connect_ports,
        sockets,
        cpu_secs: config.spawn_cpu_secs,
        address_space_bytes: config.spawn_memory_mib << 20,
        file_size_bytes: config.spawn_file_size_mib << 20,
        processes: config.spawn_processes,
        ..super::confine::Policy::default()
    };
    Plan { programs, output_max: (config.spawn_output_max_kib as usize) << 10, scratch_root, policy }
}

impl Plan {
    /// The paths of the programs granted.
    pub fn programs(&self) -> impl Iterator<Item = &std::path::Path> {
        self.programs.values().map(|p| p.path.as_path())
    }

    /// Where each run gets its scratch folder.
    pub fn scratch_root(&self) -> &std::path::Path {
        &self.scratch_root
    }

    /// The policy every program runs under (plus its own path and scratch
    /// folder).
    pub fn policy(&self) -> &super::confine::Policy {
        &self.policy
    }
}

/// One call's programs.
pub struct CallSpawn {
    external: bool,
    plan: Plan,
    deadline: Instant,
    containment: Containment,
}

impl CallSpawn {
    /// A call that may run nothing; `external` says whether its route could
    /// have been given programs (for the message).
    pub fn none(external: bool) -> CallSpawn {
        CallSpawn {
            external,
            plan: Plan::default(),
            deadline: Instant::now(),
            containment: Containment::Unavailable(String::new()),
        }
    }

    /// A call of an external route that may run what `plan` allows until
    /// `deadline`, each program contained as `containment` says.
    pub fn new(plan: Plan, deadline: Instant, containment: Containment) -> CallSpawn {
        CallSpawn { external: true, plan, deadline, containment }
    }
}

/// Serves `autoapp:app/spawn` to a call, from the `CallSpawn` that `get` projects out of
/// the call's state.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    get: fn(&mut T) -> &mut CallSpawn,
) -> anyhow::Result<()> {
    crate::bindings::app::autoapp::app::spawn::add_to_linker::<T, wasmtime::component::HasSelf<CallSpawn>>(
        linker, get,
    )?;
    Ok(())
}

impl Host for CallSpawn {
    async fn run(&mut self, program: String, args: Vec<String>, stdin: Vec<u8>) -> Result<Output, AppError> {
        let s = &*self;
        if !s.external {
            return Err(AppError::Denied("programs can only run in a route whose effect is external".into()));
        }
        let Some(granted) = s.plan.programs.get(&program).cloned() else {
            return Err(AppError::Denied(format!(
                "the program `{}` is not granted to this app",
                program.escape_debug()
            )));
        };
        if args.iter().any(|a| a.contains('\0')) {
            return Err(AppError::InvalidInput("an argument contains a NUL byte".into()));
        }
        if let Some(pattern) = &granted.pattern
            && !super::confine::argv_fits(pattern, &args)
        {
            return Err(AppError::Denied(format!(
                "these arguments do not fit what was granted for `{program}`: {} (where * is one argument that does not start with -)",
                serde_json::to_string(pattern).unwrap_or_default()
            )));
        }
        let unconfined = match &s.containment {
            Containment::Landlock => false,
            Containment::Unconfined => true,
            Containment::Unavailable(why) => {
                return Err(AppError::Denied(format!(
                    "programs cannot run here: {why}; a person who accepts running them unconfined can set spawn_unconfined = true in config.toml"
                )));
            }
        };
        let policy = super::confine::Policy { unconfined, ..s.plan.policy.clone() };
        run_confined(&granted.path, &args, stdin, s.deadline, s.plan.output_max, &s.plan.scratch_root, policy).await
    }
}

async fn run_confined(
    path: &PathBuf,
    args: &[String],
    stdin: Vec<u8>,
    deadline: Instant,
    output_max: usize,
    scratch_root: &PathBuf,
    mut policy: super::confine::Policy,
) -> Result<Output, AppError> {
    let internal = |what: &str, e: std::io::Error| AppError::Internal(format!("{what}: {e}"));
    std::fs::create_dir_all(scratch_root).map_err(|e| internal("cannot make a scratch folder", e))?;
    let scratch = tempdir_in(scratch_root).map_err(|e| internal("cannot make a scratch folder", e))?;
    // Our own binary supervises, confines itself, then becomes the program;
    // the environment is the policy's and nothing else.
    policy.read.push(path.clone());
    policy.write.push(scratch.0.clone());
    let home = scratch.0.to_string_lossy().into_owned();
    policy.env = vec![
        ("PATH".into(), CHILD_PATH.into()),
        ("LANG".into(), CHILD_LANG.into()),
        ("HOME".into(), home.clone()),
        ("TMPDIR".into(), home),
    ];
    let remaining = deadline.saturating_duration_since(Instant::now());
    // The supervisor's own deadline, a second behind the call's.
    policy.wall_secs = Some(remaining.as_secs() + 1);
    let me = std::env::current_exe().map_err(|e| internal("cannot find the autoapp binary", e))?;
    let policy_json = serde_json::to_string(&policy).map_err(|e| AppError::Internal(e.to_string()))?;
    let mut child = tokio::process::Command::new(me)
        .arg("__confined")
        .arg(policy_json)
        .arg("--")
        .arg(path)
        .args(args)
        .env_clear()
        .current_dir(&scratch.0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| internal("the program could not start", e))?;
    // However the call ends (a dropped future included), the supervisor is
    // told to stop, and it ends everything the program started.
    let mut stop = Supervisor(child.id().and_then(|id| rustix::process::Pid::from_raw(id as i32)));
    let mut child_stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let feed = async move {
        let _ = child_stdin.write_all(&stdin).await;
        drop(child_stdin);
    };
    let work = async {
        let (_, out, err, status) =
            tokio::join!(feed, capped(stdout, output_max), capped(stderr, output_max), child.wait());
        (out, err, status)
    };
    let result = tokio::time::timeout(remaining, work).await;
    if result.is_err() {
        // Past the deadline: the supervisor ends the program and everything
        // it started, then exits.
        stop.signal();
        let _ = child.wait().await;
    }
    stop.0 = None; // reaped: its pid is no longer ours to signal
    match result {
        Ok((_, stderr, Ok(status)))
            if status.code() == Some(super::confine::CANNOT_CONFINE) && stderr.starts_with(b"autoapp: ") =>
        {
            let why = String::from_utf8_lossy(&stderr[b"autoapp: ".len()..]).trim().to_string();
            Err(AppError::Denied(why))
        }
        Ok((stdout, stderr, Ok(status))) => Ok(Output { status: status.code().unwrap_or(-1), stdout, stderr }),
        Ok((_, _, Err(e))) => Err(internal("cannot wait for the program", e)),
        Err(_) => Err(AppError::Denied(
            "the program ran past the call's deadline and was ended with every process it started".into(),
        )),
    }
}

/// The supervisor of a running program, told to stop when dropped unless it
/// was reaped (see `confine`).
struct Supervisor(Option<rustix::process::Pid>);

impl Supervisor {
    fn signal(&self) {
        if let Some(pid) = self.0 {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.signal();
    }
}

/// Reads all of `r`, keeping at most `max` bytes (the rest is drained and dropped).
async fn capped(mut r: impl AsyncRead + Unpin, max: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = max.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

/// A folder removed when dropped.
struct ScratchDir(PathBuf);

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir_in(root: &std::path::Path) -> std::io::Result<ScratchDir> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = root.join(format!("{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir(&dir)?;
    Ok(ScratchDir(dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::files::{Access, FilesGrant};
    use crate::grants::Grants;

    #[test]
    fn a_call_may_run_only_what_was_declared_and_granted_and_touch_only_its_folders_and_ports() {
        let dir = tempfile::tempdir().unwrap();
        let (read, write) = (dir.path().join("r"), dir.path().join("w"));
        std::fs::create_dir_all(&read).unwrap();
        std::fs::create_dir_all(&write).unwrap();
        let text = format!(
            r#"
[app]
id = "t"
name = "T"
version = "0.1.0"

[[route]]
name = "go"
effect = "external"
summary = "Goes out"

[capabilities]
network = ["https://a.example", "https://b.example", "http://127.0.0.1:8080"]
files = [{{ name = "r", path = "{}", access = "read" }}, {{ name = "w", path = "{}", access = "write" }}]
spawn = [{{ program = "sh" }}, {{ program = "cat", args = ["*"] }}, {{ program = "env" }}]
"#,
            read.display(),
            write.display()
        );
        let manifest = crate::manifest::parse(&text, "autoapp.toml").unwrap_or_else(|e| panic!("{text}\n{e:?}"));
        let real = |p: &std::path::Path| std::fs::canonicalize(p).unwrap();
        let mut grants = Grants {
            network: vec![Origin::parse("https://a.example").unwrap(), Origin::parse("http://127.0.0.1:8080").unwrap()],
            ..Grants::default()
        };
        grants.files.insert("r".into(), FilesGrant { path: real(&read), access: Access::Read });
        grants.files.insert("w".into(), FilesGrant { path: real(&write), access: Access::Write });
        let granted = |path: &str, args: Option<Vec<String>>| SpawnGrant { path: path.into(), args, recorded: true };
        grants.spawn.insert("sh".into(), granted("/bin/sh", None));
        grants.spawn.insert("cat".into(), granted("/bin/cat", Some(vec!["*".into()])));
        // Granted once but no longer declared: not given.
        grants.spawn.insert("rm".into(), granted("/bin/rm", None));
        // Issue 51, rule 4: granted with another pattern than the release
        // declares (it declares none: any arguments): not given.
        grants.spawn.insert("env".into(), granted("/usr/bin/env", Some(vec!["hello".into()])));
        let declared = &manifest.capabilities;
        let origins = crate::caps::network::configure(&declared.network, &grants.network);
        assert_eq!(origins.len(), 2, "b.example was declared, never granted");
        let folders = crate::caps::files::configure(&declared.files, &grants.files);
        assert_eq!(folders.iter().map(|f| (f.name.as_str(), f.write)).collect::<Vec<_>>(), [("r", false), ("w", true)]);
        let plan = configure(
            &declared.spawn,
            &grants.spawn,
            &folders,
            &origins,
            &Config::default(),
            dir.path().join("scratch"),
        );
        assert_eq!(plan.programs.keys().map(String::as_str).collect::<Vec<_>>(), ["cat", "sh"]);
        assert_eq!(plan.programs["cat"].pattern, Some(vec!["*".to_string()]));
        // A grant written before patterns were part of a grant (the path
        // alone) fits no release until granted again.
        let old: Grants = serde_json::from_str(r#"{"spawn": {"sh": "/bin/sh"}}"#).unwrap();
        assert!(!old.spawn["sh"].recorded);
        let plan_old =
            configure(&declared.spawn, &old.spawn, &folders, &origins, &Config::default(), dir.path().into());
        assert!(plan_old.programs.is_empty(), "an old grant without its pattern gives nothing");
        let again: Grants = serde_json::from_str(&serde_json::to_string(&grants).unwrap()).unwrap();
        assert_eq!(again, grants, "a grant is written with its pattern and read back whole");
        assert_eq!(plan.policy.read, [real(&read), real(&write)]);
        assert_eq!(plan.policy.write, [real(&write)]);
        assert_eq!(plan.policy.connect_ports, [443, 8080]);
        assert_eq!(plan.policy.sockets, crate::caps::confine::Sockets::Tcp, "TCP, for the granted ports only");
        let offline = configure(&declared.spawn, &grants.spawn, &folders, &[], &Config::default(), dir.path().into());
        assert_eq!(offline.policy.sockets, crate::caps::confine::Sockets::None, "no origin: no socket at all");
        let config = Config::default();
        assert_eq!(plan.policy.processes, config.spawn_processes);
        assert_eq!(plan.output_max, (config.spawn_output_max_kib as usize) << 10);
    }
}
