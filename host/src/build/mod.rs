//! From a workspace to a candidate release: cargo for `wasm32-wasip2`, checks of
//! the component against the manifest and our WIT, precompilation, and the
//! immutable release. No guest code runs here.
//!
//! A workspace the engineer may have changed is untrusted input to every
//! program a build starts, so every build (the engineer's and the person's)
//! follows one path: the toolchain is chosen by the host ([`toolchain`]), the
//! engineer's builds refuse configuration that names a program or a place
//! ([`check`]), and both of cargo's steps — the fetch and the offline build —
//! run confined ([`policy`], [`cargo`]), end at a deadline or when their caller
//! goes away ([`Stop`]), and the component is read only from the target folder.

mod cargo;
pub use cargo::MAX_COMPONENT;
pub mod check;
pub mod policy;
pub mod toolchain;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;

use crate::bindings::WIT_PACKAGE;
use crate::manifest::{self, AppId, MANIFEST_FILE, Manifest};
use crate::release::Migration;
use crate::release::{self, ReleaseInfo, ReleaseInputs};
use crate::root::Root;
use crate::runtime::{Compiled, Runtime};

/// The most entries of a workspace walked (to find its `.git` folders, its
/// `Cargo.toml` files): shared by `check` and `policy`, which do not import
/// each other.
pub const MAX_WALK: usize = 200_000;

/// Whether a `git` or `registry-index` source is on this machine: `check`
/// refuses one in the engineer's builds, `policy` opens no port for it.
pub fn is_local_source(url: &str) -> bool {
    let lower = url.trim().to_ascii_lowercase();
    lower.starts_with("file:") || !lower.contains("://")
}

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

/// Who asked for a build: what it may read and what it refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// The engineer (an AI agent): configuration that names a program or a
    /// place is refused, the build reads only the workspace, the toolchain and
    /// cargo's downloads, and it is refused where the kernel cannot confine it.
    Engineer,
    /// The person: their configuration runs as they wrote it, confined; their
    /// builds may also read the folders of `build_read`, and run unconfined,
    /// with a warning, where the kernel has no Landlock.
    Person,
}

/// Tells a running build to stop: set by the engineer when its caller went
/// away, and when the launcher stops. Cloned values are one flag.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    pub fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Where a build's component comes from.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// `cargo build` in the workspace, into `target_dir` when given (the
    /// workspace's `target/` otherwise; always, for the engineer). The
    /// dependencies are fetched first (`cargo fetch`, which runs no crate
    /// code), then the build runs offline; both confined.
    Cargo {
        target_dir: Option<&'a Path>,
        by: By,
        /// Folders the build may read beyond `build_read` (the demo's WIT).
        also_read: &'a [PathBuf],
        stop: &'a Stop,
    },
    /// This file, built by any toolchain.
    Component(&'a Path),
}

/// Whether `app` was installed from a package (its newest release came
/// from one) and has no workspace: its source is with its publisher, so it
/// cannot be built here, nor its source read or changed.
pub fn installed_without_workspace(app: &crate::root::AppPaths) -> bool {
    let from_package = crate::release::list(app).ok().and_then(|l| l.last().map(|r| r.source == "package"));
    from_package == Some(true) && crate::workspace::of(app).is_ok_and(|ws| !ws.is_dir())
}

/// Builds `app` into a candidate release. With [`Source::Component`], that
/// file is the component (built by any toolchain) and cargo is not run; the
/// manifest and migrations still come from the workspace.
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
    if installed_without_workspace(&paths) {
        return refuse(format!(
            "{app} was installed from a package and has no workspace: its source is with its publisher. To build it yourself, put its source (autoapp.toml and the rest) in {} and build again; a newer package installs without one",
            ws.display()
        ));
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
    let ws_real = std::fs::canonicalize(&ws).with_context(|| format!("cannot resolve {}", ws.display()))?;
    // Each migration's file read once, as the manifest is checked: what is
    // wrong with one is among the manifest's problems.
    let read = std::cell::RefCell::new(Vec::new());
    let manifest =
        check_manifest_with(
            runtime,
            &manifest_text,
            &manifest_path.display().to_string(),
            &|name| match migration_text(&ws, &ws_real, name) {
                Ok(sql) => {
                    read.borrow_mut().push(Migration { name: name.to_string(), sql });
                    None
                }
                Err(problem) => Some(problem),
            },
        )?;
    if manifest.id != *app {
        return refuse(format!(
            "{} says id = \"{}\" but you are building {app}; make them the same",
            manifest_path.display(),
            manifest.id
        ));
    }
    // (In the manifest's order: every one read, or the check refused.)
    let migrations = read.into_inner();

    // What an agent's build made is from elsewhere too: compiled confined,
    // within the budget (issue 51, rule 1), never in the launcher.
    let came = match &from {
        Source::Cargo { by: By::Engineer, .. } => Came::Elsewhere,
        _ => Came::Here,
    };
    let (bytes, source) = match from {
        Source::Component(file) => {
            let bytes = std::fs::read(file)
                .map_err(|e| BuildError::Refused(format!("cannot read the component {} ({e})", file.display())))?;
            (bytes, "component")
        }
        Source::Cargo { target_dir, by, also_read, stop } => {
            let scratch = Scratch::new(root)?;
            let bytes = cargo_build(&ws, target_dir, by, also_read, stop, runtime.config(), &scratch.0, progress)?;
            (bytes, "cargo")
        }
    };
    let cached = runtime.is_compiled(&root.compiled_of(&paths.id), &bytes);
    check_component(root, &paths.id, runtime, &bytes, came, progress)?;

    let written = release::write(
        &paths,
        &ReleaseInputs {
            component: &bytes,
            manifest_text: &manifest_text,
            manifest: &manifest,
            migrations: &migrations,
            source,
        },
    );
    // A release that could not be written leaves no compiled code of its
    // own behind (`release::write` leaves none of its files).
    if written.is_err() && !cached {
        runtime.forget_compiled(&root.compiled_of(&paths.id), &bytes);
    }
    let (info, new) = written?;
    Ok(Built { info, new })
}

/// The checks every manifest passes before it is part of a release,
/// wherever it came from (a workspace, a package): it parses with every
/// rule of `manifest`, and its workflows run no more often than this
/// launcher allows. `file` names it in the problems.
pub fn check_manifest(runtime: &Runtime, manifest_text: &str, file: &str) -> Result<Manifest, BuildError> {
    check_manifest_with(runtime, manifest_text, file, &|_| None)
}

/// [`check_manifest`], with what is wrong with a migration's file (given its
/// name) among the same problems: every problem at once, whichever part of
/// the workspace it is in.
fn check_manifest_with(
    runtime: &Runtime,
    manifest_text: &str,
    file: &str,
    migration: &dyn Fn(&str) -> Option<String>,
) -> Result<Manifest, BuildError> {
    let beyond = manifest::Beyond { min_every_secs: runtime.config().workflow_min_every_secs, migration };
    Ok(manifest::parse_beyond(manifest_text, file, &beyond)?)
}

/// Where a component came from, which decides how it is compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Came {
    /// Built by the person from their own workspace, or given by them with
    /// `--component`: compiled here, by the engine of the process that asks.
    Here,
    /// From elsewhere (an install, a restore, the panel's Install, a build
    /// an agent asked for): compiled
    /// in a confined process within the configuration's budget
    /// (`runtime::Budget`), after every check that needs no compiler.
    Elsewhere,
}

/// The checks every component passes before it is part of a release,
/// wherever it came from (built here, given with `--component`, restored
/// from a backup, installed from a package): WebAssembly, a component and
/// not a core module; then, before anything compiles it, its own imports and
/// exports read from its bytes (only what this host provides — our WIT, WASI
/// 0.2 — and the world's interfaces); then valid (compiled by this engine
/// into the root's cache; a component from elsewhere in a confined process
/// within its budget, issue 51 rule 1), importing and exporting as its
/// compiled types say, and linking against the world. A component refused
/// after it was compiled leaves nothing in the cache.
pub fn check_component(
    root: &Root,
    app: &AppId,
    runtime: &Runtime,
    bytes: &[u8],
    came: Came,
    progress: &dyn Fn(&str),
) -> Result<(), BuildError> {
    check_is_component(bytes)?;
    check_names(bytes)?;
    progress(&format!("checking and compiling the component ({} KiB)", bytes.len() / 1024));
    let cache = root.compiled_of(app);
    let cached = runtime.is_compiled(&cache, bytes);
    let made_here: Vec<PathBuf> = cache.ancestors().take_while(|a| !a.exists()).map(Path::to_path_buf).collect();
    let compiled = match came {
        Came::Here => runtime
            .compile_cached(&cache, bytes)
            .map_err(|e| BuildError::Refused(format!("the component is not valid: {}", first_line(&e))))?,
        Came::Elsewhere => runtime
            .compile_elsewhere(&cache, bytes, &crate::runtime::Budget::of(runtime.config()))
            .map_err(BuildError::Refused)?,
    };
    let checked = check_interfaces(runtime, &compiled).and_then(|()| {
        runtime.prepare(&compiled).map(drop).map_err(|e| {
            BuildError::Refused(format!(
                "the component does not fit the world autoapp:app/app that this host speaks ({WIT_PACKAGE}): {}; rebuild it against the WIT that `autoapp create` wrote",
                first_line(&e)
            ))
        })
    });
    if checked.is_err() && !cached {
        runtime.forget_compiled(&cache, bytes);
        // And the cache's folders, when this made them (they are empty then).
        for made in cache.ancestors().take_while(|a| *a != root.dir()) {
            if made_here.contains(&made.to_path_buf()) && std::fs::remove_dir(made).is_err() {
                break;
            }
        }
    }
    checked
}

/// The component's own imports and exports, read from its bytes (its
/// top-level import and export sections; nested components and core modules
/// are skipped, never compiled): checked against what this host provides
/// before anything compiles it, so that a component that cannot run here
/// costs no compiler's time or memory.
fn check_names(bytes: &[u8]) -> Result<(), BuildError> {
    let (imports, exports) = top_level_names(bytes)
        .map_err(|e| BuildError::Refused(format!("the component is not valid: {}", e.message())))?;
    interface_problems(imports.iter().map(String::as_str), &exports)
}

/// The names a component imports and exports at its top level.
fn top_level_names(bytes: &[u8]) -> Result<(Vec<String>, Vec<String>), wasmparser::BinaryReaderError> {
    use wasmparser::Payload;
    let (mut imports, mut exports) = (Vec::new(), Vec::new());
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload? {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(s) if depth == 0 => {
                for i in s {
                    imports.push(i?.name.name.to_string());
                }
            }
            Payload::ComponentExportSection(s) if depth == 0 => {
                for e in s {
                    exports.push(e?.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    Ok((imports, exports))
}

fn first_line(e: &anyhow::Error) -> String {
    format!("{e:#}").lines().next().unwrap_or("").trim_end_matches('.').to_string()
}

/// The text of the migration `name` of the workspace `ws` (`ws_real`
/// resolved), or what is wrong with its file.
fn migration_text(ws: &Path, ws_real: &Path, name: &str) -> Result<String, String> {
    match std::fs::canonicalize(ws.join(name)) {
        Ok(real) if !real.starts_with(ws_real) => {
            Err(format!("migration {name} leads outside the workspace (a symlink); keep migrations inside it"))
        }
        Ok(real) => std::fs::read_to_string(&real).map_err(|e| format!("migration {name} cannot be read ({e})")),
        Err(_) => Err(format!(
            "migration {name} does not exist in {}; create it or remove it from [data] migrations",
            ws.display()
        )),
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
    let imports = runtime.imports(component);
    interface_problems(imports.iter().map(String::as_str), &runtime.exports(component))
}

/// The problems of a component that imports `imports` and exports `exports`.
fn interface_problems<'a>(imports: impl Iterator<Item = &'a str>, exports: &[String]) -> Result<(), BuildError> {
    let mut problems = Vec::new();
    for name in imports {
        if let Some(p) = import_problem(name) {
            problems.push(p);
        }
    }
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
        // Debug builds only (`tests/all/tidy.rs`): the probe a test's guest
        // imports (`crate::probe`); a release's host refuses it as any other.
        #[cfg(debug_assertions)]
        _ if name == crate::probe::INTERFACE => None,
        _ => Some(format!(
            "the component imports {name}, which this host does not provide; an app may import {WIT_PACKAGE} (store, log, spawn) and WASI 0.2 (cli, clocks, filesystem, http, io, random, sockets)"
        )),
    }
}

/// Runs cargo in the workspace `ws` and returns the component it built:
/// fetches the dependencies (no crate code runs), then builds offline, both
/// steps confined by [`policy::Plan`].
#[allow(clippy::too_many_arguments)]
fn cargo_build(
    ws: &Path,
    target_dir: Option<&Path>,
    by: By,
    also_read: &[PathBuf],
    stop: &Stop,
    config: &crate::config::Config,
    scratch: &Path,
    progress: &dyn Fn(&str),
) -> Result<Vec<u8>, BuildError> {
    let ws = std::fs::canonicalize(ws).with_context(|| format!("cannot resolve {}", ws.display()))?;
    // Nothing runs before the engineer's build is checked.
    let choice = toolchain::choice(&ws)?;
    if by == By::Engineer {
        check::engineer(&ws, &choice)?;
    }
    let unconfined = confinement(by, config)?;
    let toolchain = toolchain::resolve(&choice)?;
    toolchain.ensure_target(progress)?;
    // The engineer's builds write only the workspace's own target folder; the
    // person's may go where they said (CARGO_TARGET_DIR).
    let from_env = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty() && by == By::Person);
    let target_dir = match (target_dir.filter(|_| by == By::Person), from_env) {
        (Some(d), _) => d.to_path_buf(),
        (None, Some(d)) => PathBuf::from(d),
        (None, None) => ws.join("target"),
    };
    std::fs::create_dir_all(&target_dir).with_context(|| format!("cannot create {}", target_dir.display()))?;
    let target_dir = std::fs::canonicalize(&target_dir).context("cannot resolve the target folder")?;
    // Held (shared) until the component is read: `prune --builds` leaves a
    // build folder alone while any build holds it, cargo's locks or not.
    let _building = build_marker(&target_dir)?;
    // The fetch may write this one file of the workspace, so it exists before
    // the plan names what may be read and written.
    let lockfile = ws.join("Cargo.lock");
    if !lockfile.exists() {
        std::fs::write(&lockfile, "").with_context(|| format!("cannot create {}", lockfile.display()))?;
    }
    let plan = plan(&ws, target_dir.clone(), scratch, &toolchain, by, also_read, config, unconfined)?;
    let mut args: Vec<String> = Vec::new();
    for c in &plan.network.config_args {
        args.extend(["--config".to_string(), c.clone()]);
    }

    progress("fetching dependencies (cargo fetch, confined: downloads only, no crate code runs)");
    plan.fresh_scratch().context("cannot make the build's scratch folder")?;
    let fetch_args: Vec<String> = std::iter::once("fetch".to_string()).chain(args.iter().cloned()).collect();
    let fetched = cargo::run(&plan.fetch(), &toolchain.cargo, &fetch_args, &ws, "fetch", stop, progress)?;
    if !fetched.success {
        return Err(BuildError::Compile(fetched.messages));
    }

    progress(if unconfined {
        "building offline (not confined: build scripts and proc macros run with your rights)"
    } else {
        "building offline, confined: build scripts and proc macros may write only the target folder and reach nothing"
    });
    progress(&format!("building with cargo (cargo build --release --target {TARGET}) in {}", ws.display()));
    plan.fresh_scratch().context("cannot make the build's scratch folder")?;
    let build_args: Vec<String> =
        ["build", "--offline", "--release", "--target", TARGET, "--message-format=json-render-diagnostics"]
            .iter()
            .map(|a| a.to_string())
            .chain(args.iter().cloned())
            .collect();
    let built = cargo::run(&plan.build(), &toolchain.cargo, &build_args, &ws, "build", stop, progress)?;
    if !built.success {
        return Err(BuildError::Compile(built.messages));
    }
    let mut wasm = built.wasm;
    let file = match wasm.len() {
        1 => wasm.remove(0),
        0 => {
            return refuse(
                "cargo built no component: the package needs [lib] crate-type = [\"cdylib\"] in Cargo.toml (see docs/authoring.md)",
            );
        }
        n => {
            return refuse(format!(
                "cargo built {n} components ({}); an app's workspace builds exactly one cdylib",
                wasm.iter().filter_map(|p| p.file_name()).map(|f| f.to_string_lossy()).collect::<Vec<_>>().join(", ")
            ));
        }
    };
    cargo::read_component(&target_dir, &file)
}

/// The file a build holds (shared `flock`) in its build folder for as long
/// as it uses the folder, from before `cargo fetch` until the component is
/// read; `prune --builds` leaves a folder alone while one is held, and it
/// says that the folder is a build's.
pub const BUILD_MARKER: &str = ".autoapp-build";

/// The build folder's [`BUILD_MARKER`], made if needed and held with a
/// shared `flock` while the answer lives. A prune that held it meanwhile may
/// have moved the folder away: once held, the marker is checked to be the
/// one at its path still, else the folder is made again and the marker taken
/// anew. What is there and is not a regular file (a build script may leave
/// anything in its build folder) is removed first: never opened, never
/// waited on.
fn build_marker(target_dir: &Path) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::MetadataExt as _;
    let path = target_dir.join(BUILD_MARKER);
    for _ in 0..10 {
        std::fs::create_dir_all(target_dir).with_context(|| format!("cannot create {}", target_dir.display()))?;
        if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file()) {
            std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
        }
        let file =
            crate::root::open_regular(&path, true).with_context(|| format!("cannot create {}", path.display()))?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockShared)
            .with_context(|| format!("cannot lock {}", path.display()))?;
        let held = file.metadata()?;
        let there = std::fs::symlink_metadata(&path).ok();
        if held.nlink() > 0 && there.is_some_and(|t| (t.dev(), t.ino()) == (held.dev(), held.ino())) {
            return Ok(file);
        }
    }
    anyhow::bail!(
        "the build folder {} was removed again and again while this build began; build again",
        target_dir.display()
    )
}

/// Whether the build runs without Landlock: never for the engineer (refused
/// where the kernel cannot confine it); for the person, where it cannot,
/// with a warning.
fn confinement(by: By, config: &crate::config::Config) -> Result<bool, BuildError> {
    let support = if config.landlock == crate::config::Landlock::Off {
        crate::caps::confine::Support::turned_off()
    } else {
        crate::caps::confine::probe(&std::env::current_exe().context("cannot find the autoapp binary")?)
    };
    if support.enforced {
        return Ok(false);
    }
    match by {
        By::Engineer => refuse(format!(
            "builds the engineer asks for run confined by Landlock and seccomp, and {}; so this build was not run. The person can build it with `autoapp build`",
            support.summary
        )),
        By::Person => {
            tracing::warn!("this build is not confined: {}", support.summary);
            tell!(
                "warning: this build is not confined ({}): build scripts and proc macros run with your rights",
                support.summary
            );
            Ok(true)
        }
    }
}

/// A build's own scratch folder, `<root>/cache/builds/<pid>-<n>`, removed
/// when the build ends (and, when a build's process died, by the next one).
struct Scratch(PathBuf);

impl Scratch {
    fn new(root: &Root) -> Result<Scratch, BuildError> {
        use std::sync::atomic::AtomicU64;
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let builds = root.dir().join("cache").join("builds");
        std::fs::create_dir_all(&builds).with_context(|| format!("cannot create {}", builds.display()))?;
        // Left by a build whose process is gone.
        for entry in std::fs::read_dir(&builds).into_iter().flatten().filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name.split('-').next().and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|p| p != std::process::id() && !Path::new(&format!("/proc/{p}")).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let dir = builds.join(format!("{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
        let dir = std::fs::canonicalize(&builds).map(|b| b.join(dir.file_name().expect("a name"))).unwrap_or(dir);
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The confinement of both steps of a build of the real workspace `ws`.
#[allow(clippy::too_many_arguments)]
fn plan(
    ws: &Path,
    target_dir: PathBuf,
    scratch: &Path,
    toolchain: &toolchain::Toolchain,
    by: By,
    also_read: &[PathBuf],
    config: &crate::config::Config,
    unconfined: bool,
) -> Result<policy::Plan, BuildError> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let from_env = |var: &str, default: &str| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(default)))
    };
    let cargo_home = from_env("CARGO_HOME", ".cargo").ok_or_else(|| {
        BuildError::Refused("neither CARGO_HOME nor HOME is set, so cargo's downloads have no place; set one".into())
    })?;
    std::fs::create_dir_all(&cargo_home).with_context(|| format!("cannot create {}", cargo_home.display()))?;
    let cargo_home = std::fs::canonicalize(&cargo_home).context("cannot resolve cargo's home")?;
    let rustup_home = from_env("RUSTUP_HOME", ".rustup").and_then(|p| std::fs::canonicalize(p).ok());
    // The person's own cargo configuration: its network keys, passed; the
    // file itself is never read by the build.
    let home_config = ["config.toml", "config"].iter().find_map(|f| std::fs::read_to_string(cargo_home.join(f)).ok());
    let vars: Vec<(String, String)> = std::env::vars().collect();
    let network = policy::Network::of(&vars, home_config.as_deref());
    let mut read: Vec<PathBuf> = Vec::new();
    if by == By::Person {
        for dir in config.build_read.iter().map(|d| crate::config::expand_home(d)).chain(also_read.iter().cloned()) {
            match std::fs::canonicalize(&dir) {
                Ok(real) => read.push(real),
                Err(e) => tracing::warn!("build_read: {} cannot be read ({e}); left out", dir.display()),
            }
        }
    }
    let Some(ws_read) = policy::readable(ws, &target_dir) else {
        return refuse(format!(
            "the workspace has more than {} files and folders outside its target folder; a build reads it \
             entry by entry to leave its .git folders out: move what the build does not need elsewhere",
            MAX_WALK
        ));
    };
    Ok(policy::Plan {
        ws_read,
        ws: ws.to_path_buf(),
        target_dir,
        scratch: scratch.to_path_buf(),
        sysroot: toolchain.sysroot.clone(),
        toolchain_name: toolchain.name.clone(),
        cargo_home,
        rustup_home,
        configs: check::cargo_configs(ws),
        also_read: read,
        network,
        deadline_secs: config.build_deadline_secs,
        unconfined,
        lang: std::env::var("LANG").ok().filter(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_graphic())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A build that waited for its marker while a prune held it and removed
    /// the folder takes the marker of a folder made again, never the one
    /// removed; what is there and is not a regular file is replaced, not
    /// waited on.
    #[test]
    fn a_build_holds_the_marker_of_its_folder_as_it_is_not_one_a_prune_removed() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::create_dir_all(&target).unwrap();
        let marker = target.join(BUILD_MARKER);
        let prune = std::fs::File::create(&marker).unwrap();
        rustix::fs::flock(&prune, rustix::fs::FlockOperation::LockExclusive).unwrap();
        let building = {
            let target = target.clone();
            std::thread::spawn(move || build_marker(&target).unwrap())
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!building.is_finished(), "the build waits while the prune holds the marker");
        std::fs::remove_dir_all(&target).unwrap();
        drop(prune);
        let held = building.join().unwrap();
        let there = std::fs::metadata(&marker).unwrap();
        assert_eq!((held.metadata().unwrap().ino(), held.metadata().unwrap().nlink()), (there.ino(), 1));
        drop(held);

        // A pipe where the marker goes is removed, not opened.
        std::fs::remove_file(&marker).unwrap();
        rustix::fs::mknodat(rustix::fs::CWD, &marker, rustix::fs::FileType::Fifo, 0o644.into(), 0).unwrap();
        let held = build_marker(&target).unwrap();
        assert!(held.metadata().unwrap().is_file());
    }

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
