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
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

fn refuse<T>(msg: impl Into<String>) -> Result<T, BuildError> {
    Err(BuildError::Refused(msg.into()))
}

/// Builds `app` into a candidate release. With `component`, that file is the
/// component (built by any toolchain) and cargo is not run; the manifest and
/// migrations still come from the workspace.
/// Where a build's component comes from.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// `cargo build` in the workspace, into `target_dir` when given (cargo's
    /// own choice otherwise: the workspace's `target/`, or `CARGO_TARGET_DIR`).
    Cargo { target_dir: Option<&'a Path> },
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
        Source::Cargo { target_dir } => {
            let file = cargo_build(&ws, target_dir, progress)?;
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

/// Runs cargo in the workspace and returns the component it built.
fn cargo_build(ws: &Path, target_dir: Option<&Path>, progress: &dyn Fn(&str)) -> Result<PathBuf, BuildError> {
    ensure_target(ws, progress)?;
    progress(&format!("building with cargo (cargo build --release --target {TARGET}) in {}", ws.display()));
    let mut cargo = Command::new(cargo());
    if let Some(dir) = target_dir {
        cargo.env("CARGO_TARGET_DIR", dir);
    }
    let mut child = cargo
        .args(["build", "--release", "--target", TARGET, "--message-format=json-render-diagnostics"])
        .current_dir(ws)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            BuildError::Refused(format!("cannot run cargo ({e}); install Rust from https://rustup.rs and try again"))
        })?;
    // Cargo's messages go to the person's terminal as they come, through the
    // sanitiser: a build script that prints a token does not show it.
    let stderr = child.stderr.take().expect("piped stderr");
    let relay = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("{}", crate::sanitize::secrets(&line));
        }
    });
    let stdout = child.stdout.take().expect("piped stdout");
    let mut wasm: Vec<PathBuf> = Vec::new();
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.context("cannot read cargo's output")?;
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
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
    let status = child.wait().context("cannot wait for cargo")?;
    let _ = relay.join();
    if !status.success() {
        return refuse("cargo could not build the workspace (its errors are above); fix them and build again");
    }
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
