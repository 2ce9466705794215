//! From a workspace to a candidate release: cargo for `wasm32-wasip2`, checks of
//! the component against the manifest and our WIT, precompilation, and the
//! immutable release. No guest code runs here.

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context as _;

use crate::bindings::WIT_PACKAGE;
use crate::manifest::{self, AppId, MANIFEST_FILE, Manifest};
use crate::release::Migration;
use crate::release::{self, ReleaseInfo, ReleaseInputs};
use crate::root::Root;
use crate::runtime::{Compiled, Runtime};

/// The target every Rust guest is built for.
pub const TARGET: &str = "wasm32-wasip2";

/// The interfaces of our package a component may import.
const OUR_IMPORTS: &[&str] = &["types", "store", "log", "spawn"];

/// The WASI packages the host links (wasmtime 48 speaks 0.2.0 to 0.2.12).
const WASI_PACKAGES: &[&str] = &["cli", "clocks", "filesystem", "http", "io", "random", "sockets"];

/// What a build made.
#[derive(Debug)]
pub struct Built {
    pub info: ReleaseInfo,
    /// False when an identical release already existed.
    pub new: bool,
}

/// Why a build refused; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{0}")]
    Manifest(#[from] manifest::ManifestError),
    #[error("{0}")]
    Refused(String),
    /// Cargo failed; the field holds its messages (already passed to the
    /// progress callback, line by line, as they came).
    #[error("cargo could not build the workspace (its errors are above); fix them and build again")]
    Compile(String),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

fn refuse<T>(msg: impl Into<String>) -> Result<T, BuildError> {
    Err(BuildError::Refused(msg.into()))
}

/// How a cargo build is confined: build scripts and proc macros are code of
/// the workspace's dependencies (and of whoever edited it), run by the
/// compiler. Confined, they can write only the build's target folder (and a
/// scratch folder inside it), read only the workspace, the toolchain, cargo's
/// downloads and the system's folders, and connect nowhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confine {
    /// The engineer's builds: confined, or refused where the kernel cannot.
    Required,
    /// The person's own: confined where the kernel can, else run with a warning.
    WhereAvailable,
}

/// Builds `app` into a candidate release. With `component`, that file is the
/// component (built by any toolchain) and cargo is not run; the manifest and
/// migrations still come from the workspace.
/// Where a build's component comes from.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// `cargo build` in the workspace, into `target_dir` when given (the
    /// workspace's `target/` otherwise). Dependencies are fetched first
    /// (`cargo fetch`, which runs no crate code); the build itself runs
    /// offline and confined ([`Confine`]).
    Cargo { target_dir: Option<&'a Path>, confine: Confine },
    /// This file, built by any toolchain.
    Component(&'a Path),
}

pub fn build(
    root: &Root,
    runtime: &Runtime,
    app: &AppId,
    from: Source<'_>,
    progress: &dyn Fn(&str),
) -> Result<Built, BuildError> {
    let paths = root.app(app);
    if !paths.exists() {
        return refuse(format!(
            "there is no app `{app}` in {}; create it with `autoapp create {app}`",
            root.dir().display()
        ));
    }
    let ws = crate::workspace::of(&paths)?;
    if paths.workspace_pointer().exists() {
        // A pointer edited by hand is held to the same rules as `create --at`.
        crate::workspace::check_chosen(root, app, &ws)
            .map_err(|e| BuildError::Refused(format!("the workspace pointer of {app} is not allowed: {e:#}")))?;
    }
    if !ws.is_dir() {
        return refuse(format!(
            "the workspace of {app} ({}) does not exist; restore it, or create the app again",
            ws.display()
        ));
    }
    let manifest_path = ws.join(MANIFEST_FILE);
    let manifest_text = std::fs::read_to_string(&manifest_path).map_err(|e| {
        BuildError::Refused(format!("cannot read {} ({e}); every app needs one", manifest_path.display()))
    })?;
    let manifest = manifest::parse(&manifest_text, &manifest_path.display().to_string())?;
    if manifest.id != *app {
        return refuse(format!(
            "{} says id = \"{}\" but you are building {app}; make them the same",
            manifest_path.display(),
            manifest.id
        ));
    }
    let min_every = runtime.config().workflow_min_every_secs;
    let too_often: Vec<String> = manifest
        .workflows
        .iter()
        .filter(|w| w.schedule.every_secs().is_some_and(|s| s < min_every))
        .map(|w| {
            format!(
                "workflow `{}` runs {}: a release's workflows run at most once every {min_every} seconds; write a longer interval, like every = \"{}m\"",
                w.name,
                w.schedule,
                min_every.div_ceil(60)
            )
        })
        .collect();
    if !too_often.is_empty() {
        return Err(manifest::ManifestError { file: manifest_path.display().to_string(), problems: too_often }.into());
    }
    let migrations = read_migrations(&ws, &manifest)?;

    let (bytes, source) = match from {
        Source::Component(file) => {
            let bytes = std::fs::read(file)
                .map_err(|e| BuildError::Refused(format!("cannot read the component {} ({e})", file.display())))?;
            (bytes, "component")
        }
        Source::Cargo { target_dir, confine } => {
            let landlock_off = runtime.config().landlock == crate::config::Landlock::Off;
            let file = cargo_build(&ws, target_dir, confine, landlock_off, progress)?;
            let bytes = std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
            (bytes, "cargo")
        }
    };
    check_is_component(&bytes)?;

    progress(&format!("checking and compiling the component ({} KiB)", bytes.len() / 1024));
    let compiled = runtime
        .compile_cached(&root.compiled_cache(), &bytes)
        .map_err(|e| BuildError::Refused(format!("the component is not valid: {}", first_line(&e))))?;
    check_interfaces(runtime, &compiled)?;
    runtime.prepare(&compiled).map_err(|e| {
        BuildError::Refused(format!(
            "the component does not fit the world autoapp:app/app that this host speaks ({WIT_PACKAGE}): {}; rebuild it against the WIT that `autoapp create` wrote",
            first_line(&e)
        ))
    })?;

    let (info, new) = release::write(
        &paths,
        &ReleaseInputs {
            component: &bytes,
            manifest_text: &manifest_text,
            manifest: &manifest,
            migrations: &migrations,
            source,
        },
    )?;
    Ok(Built { info, new })
}

fn first_line(e: &anyhow::Error) -> String {
    format!("{e:#}").lines().next().unwrap_or("").trim_end_matches('.').to_string()
}

fn read_migrations(ws: &Path, manifest: &Manifest) -> Result<Vec<Migration>, BuildError> {
    let ws_real = std::fs::canonicalize(ws).with_context(|| format!("cannot resolve {}", ws.display()))?;
    let mut problems = Vec::new();
    let mut out = Vec::new();
    for name in &manifest.migrations {
        let path = ws.join(name);
        match std::fs::canonicalize(&path) {
            Ok(real) if !real.starts_with(&ws_real) => problems
                .push(format!("migration {name} leads outside the workspace (a symlink); keep migrations inside it")),
            Ok(real) => match std::fs::read_to_string(&real) {
                Ok(sql) => out.push(Migration { name: name.clone(), sql }),
                Err(e) => problems.push(format!("migration {name} cannot be read ({e})")),
            },
            Err(_) => problems.push(format!(
                "migration {name} does not exist in {}; create it or remove it from [data] migrations",
                ws.display()
            )),
        }
    }
    match problems.len() {
        0 => Ok(out),
        1 => refuse(problems.remove(0)),
        _ => refuse(format!("the migrations have {} problems:\n  - {}", problems.len(), problems.join("\n  - "))),
    }
}

/// A WebAssembly binary starts with `\0asm` and a version; components use
/// layer 1.
fn check_is_component(bytes: &[u8]) -> Result<(), BuildError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return refuse(
            "the file is not WebAssembly; give a component built for WASI 0.2 (for Rust: cargo build --target wasm32-wasip2)",
        );
    }
    if bytes[6..8] != [1, 0] {
        return refuse(
            "the file is a core WebAssembly module, not a component; build for wasm32-wasip2, or wrap it with `wasm-tools component new`",
        );
    }
    Ok(())
}

/// Every import must be one the host links; both exports must be there.
fn check_interfaces(runtime: &Runtime, component: &Compiled) -> Result<(), BuildError> {
    let mut problems = Vec::new();
    for name in runtime.imports(component) {
        if let Some(p) = import_problem(&name) {
            problems.push(p);
        }
    }
    let exports = runtime.exports(component);
    for want in ["routes", "views"] {
        let ours = format!("autoapp:app/{want}@");
        match exports.iter().find(|e| e.starts_with(&ours) || e.starts_with(&format!("autoapp:app/{want}"))) {
            Some(e) if e.starts_with(&format!("autoapp:app/{want}@0.1.")) => {}
            Some(e) => problems.push(format!(
                "the component exports {e}, but this host speaks {WIT_PACKAGE}; rebuild it against that version of the WIT"
            )),
            None => problems.push(format!(
                "the component does not export autoapp:app/{want}@0.1.0; implement the `{want}` interface of the world autoapp:app/app"
            )),
        }
    }
    match problems.len() {
        0 => Ok(()),
        1 => refuse(problems.remove(0)),
        _ => refuse(format!("the component has {} problems:\n  - {}", problems.len(), problems.join("\n  - "))),
    }
}

/// Why the host cannot provide import `name`, if it cannot.
pub fn import_problem(name: &str) -> Option<String> {
    let (pkg_iface, version) = match name.split_once('@') {
        Some((a, v)) => (a, Some(v)),
        None => (name, None),
    };
    let (pkg, iface) = pkg_iface.split_once('/').unwrap_or((pkg_iface, ""));
    match pkg {
        "autoapp:app" => {
            if !OUR_IMPORTS.contains(&iface) {
                return Some(format!(
                    "the component imports {name}, which this host does not provide; the imports of {WIT_PACKAGE} are types, store, log and spawn"
                ));
            }
            match version {
                Some(v) if v.starts_with("0.1.") => None,
                Some(v) => Some(format!(
                    "the component was built against autoapp:app@{v}, but this host speaks {WIT_PACKAGE}; rebuild it against the WIT that `autoapp wit` writes"
                )),
                None => Some(format!("the component imports {name} without a version; this host speaks {WIT_PACKAGE}")),
            }
        }
        p if p.strip_prefix("wasi:").is_some_and(|w| WASI_PACKAGES.contains(&w)) => match version {
            Some(v) if v.starts_with("0.2.") => None,
            Some(_) => Some(format!(
                "the component imports {name}, but this host speaks WASI 0.2 (0.2.0 to 0.2.12); build it for WASI 0.2 (wasm32-wasip2)"
            )),
            None => Some(format!("the component imports {name} without a version; this host speaks WASI 0.2")),
        },
        _ => Some(format!(
            "the component imports {name}, which this host does not provide; an app may import {WIT_PACKAGE} (store, log, spawn) and WASI 0.2 (cli, clocks, filesystem, http, io, random, sockets)"
        )),
    }
}

/// Runs cargo in the workspace and returns the component it built: fetches
/// the dependencies (no crate code runs), then builds offline, confined.
fn cargo_build(
    ws: &Path,
    target_dir: Option<&Path>,
    confine: Confine,
    landlock_off: bool,
    progress: &dyn Fn(&str),
) -> Result<PathBuf, BuildError> {
    ensure_target(ws, progress)?;
    let ws = std::fs::canonicalize(ws).with_context(|| format!("cannot resolve {}", ws.display()))?;
    // The engineer's builds write only the workspace's own target folder; the
    // person's may go where they said (CARGO_TARGET_DIR).
    let from_env = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty() && confine == Confine::WhereAvailable);
    let target_dir = match (target_dir, from_env) {
        (Some(d), _) => d.to_path_buf(),
        (None, Some(d)) => PathBuf::from(d),
        (None, None) => ws.join("target"),
    };
    std::fs::create_dir_all(&target_dir).with_context(|| format!("cannot create {}", target_dir.display()))?;
    let target_dir = std::fs::canonicalize(&target_dir).context("cannot resolve the target folder")?;

    progress("fetching dependencies (cargo fetch: downloads only, no crate code runs)");
    let fetched = run_cargo(Command::new(cargo()).arg("fetch").current_dir(&ws), progress)?;
    if !fetched.success {
        return Err(BuildError::Compile(fetched.messages));
    }

    let mut command = match confinement(&ws, &target_dir, confine, landlock_off)? {
        Some(policy) => {
            progress(
                "building offline, confined: build scripts and proc macros may write only the target folder and connect nowhere",
            );
            let mut c = Command::new(std::env::current_exe().context("cannot find the autoapp binary")?);
            c.arg("__confined")
                .arg(serde_json::to_string(&policy).context("the policy is JSON")?)
                .arg("--")
                .arg(cargo());
            c.env("TMPDIR", target_dir.join(SCRATCH));
            c
        }
        None => Command::new(cargo()),
    };
    progress(&format!("building with cargo (cargo build --release --target {TARGET}) in {}", ws.display()));
    command
        .env("CARGO_TARGET_DIR", &target_dir)
        .args(["build", "--offline", "--release", "--target", TARGET, "--message-format=json-render-diagnostics"])
        .current_dir(&ws);
    let built = run_cargo(&mut command, progress)?;
    if !built.success {
        return Err(BuildError::Compile(built.messages));
    }
    let mut wasm = built.wasm;
    match wasm.len() {
        1 => Ok(wasm.remove(0)),
        0 => refuse(
            "cargo built no component: the package needs [lib] crate-type = [\"cdylib\"] in Cargo.toml (see docs/authoring.md)",
        ),
        n => refuse(format!(
            "cargo built {n} components ({}); an app's workspace builds exactly one cdylib",
            wasm.iter().filter_map(|p| p.file_name()).map(|f| f.to_string_lossy()).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// The scratch folder of a confined build, inside its target folder.
const SCRATCH: &str = "autoapp-scratch";

/// The most lines of cargo's messages a failed build keeps for its answer.
const KEPT_MESSAGES: usize = 400;

/// The policy a build runs under, or `None` for an unconfined build (the
/// person's, where the kernel cannot confine it: said through `progress`).
fn confinement(
    ws: &Path,
    target_dir: &Path,
    confine: Confine,
    landlock_off: bool,
) -> Result<Option<crate::caps::confine::Policy>, BuildError> {
    let me = std::env::current_exe().context("cannot find the autoapp binary")?;
    let support = if landlock_off {
        crate::caps::confine::Support {
            enforced: false,
            summary: "Landlock is off in the configuration (landlock = \"off\")".into(),
        }
    } else {
        crate::caps::confine::probe(&me)
    };
    if !support.enforced {
        return match confine {
            Confine::Required => refuse(format!(
                "builds the engineer asks for run confined by Landlock, and {}; so this build was not run. The person can build it with `autoapp build`",
                support.summary
            )),
            Confine::WhereAvailable => {
                tracing::warn!("this build is not confined: {}", support.summary);
                eprintln!(
                    "warning: this build is not confined ({}): build scripts and proc macros run with your rights",
                    support.summary
                );
                Ok(None)
            }
        };
    }
    let scratch = target_dir.join(SCRATCH);
    std::fs::create_dir_all(&scratch).with_context(|| format!("cannot create {}", scratch.display()))?;
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let from_env = |var: &str, default: &str| {
        std::env::var_os(var).map(PathBuf::from).or_else(|| home.as_ref().map(|h| h.join(default)))
    };
    // The engineer's builds read only what a build needs; the person's may
    // read anywhere (a workspace of theirs may use a path outside it, such
    // as a shared WIT folder): for both, writes and the network are shut.
    let mut read: Vec<PathBuf> =
        if confine == Confine::Required { vec![ws.to_path_buf()] } else { vec![PathBuf::from("/")] };
    read.extend(from_env("CARGO_HOME", ".cargo"));
    read.extend(from_env("RUSTUP_HOME", ".rustup"));
    if let Some(sysroot) = sysroot(ws) {
        read.push(sysroot);
    }
    read.extend(crate::programs::find(&cargo()).ok().and_then(|c| std::fs::canonicalize(c).ok()));
    read.retain(|p| p.exists());
    Ok(Some(crate::caps::confine::Policy {
        read,
        write: vec![target_dir.to_path_buf(), PathBuf::from("/dev/null")],
        connect_ports: Vec::new(),
        cpu_secs: 3600,
        address_space_bytes: u64::MAX,
        file_size_bytes: 8 << 30,
        processes: 4096,
    }))
}

/// The toolchain's sysroot, as the workspace's toolchain says.
fn sysroot(ws: &Path) -> Option<PathBuf> {
    let out = Command::new("rustc").args(["--print", "sysroot"]).current_dir(ws).stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// What one run of cargo said.
struct CargoRun {
    success: bool,
    /// Its messages (stderr, sanitised), the last [`KEPT_MESSAGES`] lines.
    messages: String,
    /// The `.wasm` files of the cdylibs it built.
    wasm: Vec<PathBuf>,
}

/// Runs `command` (cargo, perhaps through the confinement shim), passing
/// each line of its messages to `progress` through the sanitiser as it comes
/// (a build script that prints a token does not show it).
fn run_cargo(command: &mut Command, progress: &dyn Fn(&str)) -> Result<CargoRun, BuildError> {
    let mut child =
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| {
            BuildError::Refused(format!("cannot run cargo ({e}); install Rust from https://rustup.rs and try again"))
        })?;
    let stderr = child.stderr.take().expect("piped stderr");
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    let relay = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines_tx.send(crate::sanitize::secrets(&line).into_owned()).is_err() {
                break;
            }
        }
    });
    let stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut wasm: Vec<PathBuf> = Vec::new();
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
            if msg["reason"] != "compiler-artifact" {
                continue;
            }
            let is_cdylib = msg["target"]["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "cdylib"));
            if !is_cdylib {
                continue;
            }
            for f in msg["filenames"].as_array().into_iter().flatten() {
                if let Some(f) = f.as_str().filter(|f| f.ends_with(".wasm")) {
                    wasm.push(PathBuf::from(f));
                }
            }
        }
        wasm
    });
    let mut kept = std::collections::VecDeque::new();
    for line in lines_rx {
        progress(&line);
        if kept.len() == KEPT_MESSAGES {
            kept.pop_front();
        }
        kept.push_back(line);
    }
    let status = child.wait().context("cannot wait for cargo")?;
    let _ = relay.join();
    let wasm = reader.join().unwrap_or_default();
    Ok(CargoRun { success: status.success(), messages: Vec::from(kept).join("\n"), wasm })
}

fn cargo() -> String {
    std::env::var("CARGO").ok().filter(|c| !c.is_empty()).unwrap_or_else(|| "cargo".to_string())
}

/// Installs the wasm32-wasip2 target with rustup when the workspace's
/// toolchain lacks it.
fn ensure_target(ws: &Path, progress: &dyn Fn(&str)) -> Result<(), BuildError> {
    let libdir = Command::new("rustc")
        .args(["--print", "target-libdir", "--target", TARGET])
        .current_dir(ws)
        .stderr(Stdio::null())
        .output();
    let installed = match &libdir {
        Ok(out) if out.status.success() => Path::new(String::from_utf8_lossy(&out.stdout).trim()).is_dir(),
        _ => false,
    };
    if installed {
        return Ok(());
    }
    progress(&format!("the Rust target {TARGET} is missing; installing it with `rustup target add {TARGET}`"));
    let status = Command::new("rustup")
        .args(["target", "add", TARGET])
        .current_dir(ws)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(_) => refuse(format!(
            "rustup could not install the target {TARGET}; run `rustup target add {TARGET}` in the workspace and build again"
        )),
        Err(_) => refuse(format!(
            "the Rust target {TARGET} is not installed and rustup is not available; install it for your toolchain and build again"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_are_checked_by_package_and_version() {
        assert!(import_problem("autoapp:app/store@0.1.0").is_none());
        assert!(import_problem("wasi:http/outgoing-handler@0.2.12").is_none());
        assert!(import_problem("wasi:io/streams@0.2.0").is_none());
        let p = import_problem("autoapp:app/store@0.2.0").unwrap();
        assert!(p.contains("autoapp:app@0.2.0") && p.contains("speaks autoapp:app@0.1.0"), "{p}");
        let p = import_problem("wasi:keyvalue/store@0.2.0").unwrap();
        assert!(p.contains("does not provide"), "{p}");
        assert!(import_problem("wasi:http/types@0.3.0").unwrap().contains("WASI 0.2"));
        assert!(import_problem("autoapp:app/secrets@0.1.0").unwrap().contains("does not provide"));
    }

    #[test]
    fn non_components_are_named_for_what_they_are() {
        let e = check_is_component(b"hello world").unwrap_err().to_string();
        assert!(e.contains("not WebAssembly"), "{e}");
        let core = wat::parse_str("(module)").unwrap();
        let e = check_is_component(&core).unwrap_err().to_string();
        assert!(e.contains("core WebAssembly module"), "{e}");
        let comp = wat::parse_str("(component)").unwrap();
        assert!(check_is_component(&comp).is_ok());
    }
}
