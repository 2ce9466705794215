//! Compiling a component from elsewhere (a package, a backup) in a process
//! of its own, within a budget, before anyone agreed to anything.
//!
//! Cranelift's work grows with what a component holds, not with its size on
//! disk: a 4 MB package of one core module with a million empty functions
//! ran 28.6 s and peaked at 6.2 GB in the launcher (issue 51, rule 1). So a
//! component that did not come from the person's own workspace is compiled
//! by `autoapp __compile`, our own binary run through the confinement shim
//! (`caps::confine`): no socket, reading only itself and the component,
//! writing only its own work folder, under an address-space limit
//! (`compile_memory_mib`) and a wall-clock deadline that ends it with
//! everything it started (`compile_deadline_secs`). Over either it is
//! refused with one sentence naming the limit, and nothing is left in the
//! compiled cache: the code goes there only once the whole component holds.
//!
//! The compiling process's engine has the launcher's compile settings
//! ([`super::engine_settings`]) without its pooling allocator (whose
//! reservations alone would pass the limit), so the launcher's engine loads
//! what it made; wasmtime checks that when it loads the file.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;

use super::{Compiled, Runtime};
use crate::caps::confine::{self, Policy, Sockets, System};
use crate::config::Config;

/// The hidden command that compiles in the confined process.
pub const COMPILE_COMMAND: &str = "__compile";

/// Why a process that never compiles (an app's worker) could not load a
/// component: the compiled cache lacks its code (its parent compiles it).
pub const NOT_IN_CACHE: &str = "its compiled code is not in the cache, and this process may not compile it";

/// The most of the compiling process's messages read (it writes one line).
const MESSAGES_MAX: u64 = 64 << 10;

/// What compiling one component from elsewhere may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The compiling process's address space, in bytes.
    pub memory_bytes: u64,
    /// Its wall-clock deadline.
    pub deadline: Duration,
}

impl Budget {
    /// The configuration's budget (`compile_memory_mib`, `compile_deadline_secs`).
    pub fn of(config: &Config) -> Budget {
        Budget { memory_bytes: config.compile_memory_mib << 20, deadline: config.compile_budget() }
    }
}

/// `autoapp __compile <stack-bytes> <component> <output>`: compiles the
/// component at `<component>` with the launcher's compile settings and
/// writes the code to `<output>`. Run only by [`Runtime::compile_elsewhere`],
/// confined. Exits 0, or 1 with one `autoapp: ` line saying why.
pub fn compile_main(args: &[String]) -> i32 {
    let [stack, input, output] = args else {
        crate::tell!("autoapp: {COMPILE_COMMAND} needs <stack-bytes> <component> <output>");
        return 2;
    };
    let run = || -> anyhow::Result<()> {
        let stack: usize = stack.parse().context("the stack size is not a number")?;
        let engine = wasmtime::Engine::new(&super::engine_settings(stack)).map_err(anyhow::Error::from)?;
        let wasm = std::fs::read(input).context("cannot read the component")?;
        let code = engine.precompile_component(&wasm).map_err(anyhow::Error::from)?;
        std::fs::write(output, code).context("cannot write the compiled code")?;
        Ok(())
    };
    match run() {
        Ok(()) => 0,
        Err(e) => {
            let line = format!("{e:#}");
            crate::tell!("autoapp: {}", line.lines().next().unwrap_or("").trim_end_matches('.'));
            1
        }
    }
}

impl Runtime {
    /// Compiles `wasm`, a component from elsewhere, in a confined process
    /// within `budget` (see the module's doc), or loads the code compiled for
    /// it earlier from `cache_dir`. The error is one sentence for the person:
    /// which limit it passed, or why the component is not valid.
    pub fn compile_elsewhere(&self, cache_dir: &Path, wasm: &[u8], budget: &Budget) -> Result<Compiled, String> {
        let path = self.compiled_path(cache_dir, wasm);
        if path.is_file()
            && let Ok(c) = self.load_compiled(&path)
        {
            return Ok(Compiled(c));
        }
        if !self.compiles {
            return Err(NOT_IN_CACHE.into());
        }
        // Only the autoapp binary has the shim and `__compile`: a program
        // that links the library (a benchmark, a unit test) compiles itself.
        if !std::env::current_exe().is_ok_and(|me| me.file_stem().is_some_and(|n| n == "autoapp")) {
            return self.compile_cached(cache_dir, wasm).map_err(|e| format!("the component is not valid: {e:#}"));
        }
        let work = WorkFolder::make(cache_dir).map_err(|e| format!("cannot prepare its compilation: {e:#}"))?;
        let input = work.0.join("component.wasm");
        let output = work.0.join("compiled.cwasm");
        std::fs::write(&input, wasm).map_err(|e| format!("cannot prepare its compilation: {e}"))?;
        self.run_compiler(&work.0, &input, &output, budget)?;
        // What the process left is a plain file it wrote, or nothing is kept.
        if !std::fs::symlink_metadata(&output).is_ok_and(|m| m.file_type().is_file()) {
            return Err("its compilation left no compiled file".to_string());
        }
        // Placed in the cache only now, whole, by a rename.
        std::fs::rename(&output, &path).map_err(|e| format!("cannot keep its compiled code: {e}"))?;
        self.load_compiled(&path).map(Compiled).map_err(|e| {
            let _ = std::fs::remove_file(&path);
            format!("its compiled code could not be loaded: {}", first_line(&e))
        })
    }

    /// Runs `autoapp __compile` through the confinement shim on `input`,
    /// writing `output`; answers why not, in one sentence.
    fn run_compiler(&self, work: &Path, input: &Path, output: &Path, budget: &Budget) -> Result<(), String> {
        let me = std::env::current_exe().map_err(|e| format!("cannot find the autoapp binary ({e})"))?;
        let secs = budget.deadline.as_secs().max(1);
        let support = confine::Support::here(&self.config);
        let policy = Policy {
            system: System::Build,
            read: vec![me.clone(), work.to_path_buf()],
            write: vec![work.to_path_buf()],
            sockets: Sockets::None,
            // Where the kernel cannot confine it, the limits still hold.
            unconfined: !support.enforced,
            wall_secs: Some(secs),
            // Compiling uses every core: its processor time may be the
            // deadline's on each.
            cpu_secs: secs.saturating_mul(std::thread::available_parallelism().map_or(1, |n| n.get() as u64)),
            address_space_bytes: budget.memory_bytes,
            file_size_bytes: budget.memory_bytes,
            processes: 4096,
            ..Policy::default()
        };
        let policy_json =
            serde_json::to_string(&policy).map_err(|e| format!("cannot describe its confinement ({e})"))?;
        let mut child = std::process::Command::new(&me)
            .arg("__confined")
            .arg(policy_json)
            .arg("--")
            .arg(&me)
            .arg(COMPILE_COMMAND)
            .arg(self.config.stack_max_bytes().to_string())
            .arg(input)
            .arg(output)
            .env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start its compilation ({e})"))?;
        let mut said = Vec::new();
        if let Some(stderr) = child.stderr.take() {
            let _ = stderr.take(MESSAGES_MAX).read_to_end(&mut said);
        }
        let status = child.wait().map_err(|e| format!("cannot wait for its compilation ({e})"))?;
        let said = String::from_utf8_lossy(&said);
        let line = said
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("autoapp: "))
            .map(|l| crate::elsewhere::text::cut(l, 300).into_owned())
            .unwrap_or_default();
        let mib = budget.memory_bytes >> 20;
        let over_memory = format!(
            "compiling it needed more than {mib} MiB of memory (compile_memory_mib in config.toml); an app's component compiles well inside that"
        );
        match status.code() {
            Some(0) if output.is_file() => Ok(()),
            Some(confine::PAST_DEADLINE) => Err(format!(
                "compiling it took longer than {secs} s (compile_deadline_secs in config.toml); an app's component compiles well inside that"
            )),
            Some(confine::CANNOT_CONFINE) => Err(format!("it could not be compiled in a confined process: {line}")),
            // Its processor time ran out (SIGXCPU): its deadline, on every core.
            Some(c) if c == 128 + libc::SIGXCPU => Err(format!(
                "compiling it took longer than {secs} s (compile_deadline_secs in config.toml); an app's component compiles well inside that"
            )),
            // An allocation refused at the limit ends the process (Rust's
            // handler aborts: SIGABRT; the kernel may kill it), or it says so first.
            _ if said.contains("memory allocation of") || said.contains("out of memory") => Err(over_memory),
            Some(c) if c == 128 + libc::SIGABRT || c == 128 + libc::SIGKILL => Err(over_memory),
            Some(c) if c > 128 => Err(format!("its compilation ended abnormally (signal {})", c - 128)),
            None => Err("its compilation ended abnormally".to_string()),
            Some(_) if !line.is_empty() => Err(format!("the component is not valid: {line}")),
            Some(c) => Err(format!("its compilation ended with status {c}")),
        }
    }
}

fn first_line(e: &anyhow::Error) -> String {
    format!("{e:#}").lines().next().unwrap_or("").trim_end_matches('.').to_string()
}

/// The compiling process's own folder, in the compiled cache, removed with
/// whatever is in it when done; and the cache's folders it had to make,
/// removed again when nothing was kept in them (a refusal leaves the root as
/// it was).
struct WorkFolder(PathBuf, Vec<PathBuf>);

impl WorkFolder {
    fn make(cache_dir: &Path) -> anyhow::Result<WorkFolder> {
        sweep(cache_dir);
        let made: Vec<PathBuf> = cache_dir.ancestors().take_while(|a| !a.exists()).map(Path::to_path_buf).collect();
        std::fs::create_dir_all(cache_dir).with_context(|| format!("cannot create {}", cache_dir.display()))?;
        let dir = cache_dir.join(format!(".compiling-{}-{}", std::process::id(), crate::secret::random_hex()));
        let folder = WorkFolder(dir, made);
        std::fs::create_dir(&folder.0).with_context(|| format!("cannot create {}", folder.0.display()))?;
        Ok(folder)
    }
}

/// How old a work folder left by a process that died (a killed launcher)
/// must be before another compilation takes it away: older than any
/// deadline a compilation may have.
const STALE: Duration = Duration::from_secs(24 * 3600);

/// Takes away the work folders in `cache_dir` that a process which died
/// while compiling left behind.
fn sweep(cache_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(cache_dir) else { return };
    for e in entries.flatten() {
        let stale = e.metadata().and_then(|m| m.modified()).is_ok_and(|t| t.elapsed().unwrap_or_default() > STALE);
        if e.file_name().to_string_lossy().starts_with(".compiling-") && stale {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl Drop for WorkFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        // Deepest first; a folder that holds something (the code kept) stays.
        for made in &self.1 {
            if std::fs::remove_dir(made).is_err() {
                break;
            }
        }
    }
}
